//! The C ABI of stripefs (`libstripefs.so`, declared in `include/stripefs.h`): a client,
//! namespace calls, file I/O at offsets, and the MPI-IO layer (views from the compact
//! datatype description, collective and asynchronous calls), with the communicator given
//! as C callbacks so that the library needs no MPI (`include/stripefs_mpi.h` makes one
//! from an `MPI_Comm`).
//!
//! Every function returns 0 (or a byte count) or a negative errno, and keeps a message
//! for `stripefs_errmsg` in a thread-local. No panic crosses the boundary: each body runs
//! under `catch_unwind`, and a panic (a bug, or a communicator callback that failed)
//! becomes `-EIO` with its message.

#![allow(clippy::missing_safety_doc)] // The safety rules are those of include/stripefs.h.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use stripefs_client::{Client, OpenOptions};
use stripefs_mpiio::{Communicator, Datatype, Hints, IoError, Mode};
use stripefs_rpc::ClusterConfig;
use stripefs_wire::WireError;

use stripefs_client::mounts;

/// The interface version (`STRIPEFS_ABI_VERSION` in the header).
pub const ABI_VERSION: c_int = 1;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// A failure: the negative errno returned and the message kept.
struct Fail {
    errno: c_int,
    msg: String,
}

impl Fail {
    fn new(errno: c_int, msg: impl Into<String>) -> Fail {
        Fail {
            errno,
            msg: msg.into(),
        }
    }
}

impl From<WireError> for Fail {
    fn from(e: WireError) -> Fail {
        Fail::new(e.code.errno(), e.to_string())
    }
}

impl From<IoError> for Fail {
    fn from(e: IoError) -> Fail {
        match e {
            IoError::Fs(w) => w.into(),
            other => Fail::new(libc::EINVAL, other.to_string()),
        }
    }
}

fn set_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// Runs `f`; its value, or the negative errno of its failure (message kept).
fn guard(f: impl FnOnce() -> Result<i64, Fail>) -> i64 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(fail)) => {
            set_error(&fail.msg);
            -i64::from(fail.errno.max(1))
        }
        Err(p) => {
            let why = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown".into());
            set_error(&format!("internal error in libstripefs: {why}"));
            -i64::from(libc::EIO)
        }
    }
}

fn guard_int(f: impl FnOnce() -> Result<(), Fail>) -> c_int {
    guard(|| f().map(|()| 0)) as c_int
}

unsafe fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str, Fail> {
    if p.is_null() {
        return Err(Fail::new(libc::EINVAL, format!("{what} is NULL")));
    }
    CStr::from_ptr(p)
        .to_str()
        .map_err(|_| Fail::new(libc::EINVAL, format!("{what} is not UTF-8")))
}

unsafe fn handle<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T, Fail> {
    p.as_mut()
        .ok_or_else(|| Fail::new(libc::EINVAL, format!("{what} handle is NULL")))
}

unsafe fn out_ptr<T>(p: *mut *mut T) -> Result<(), Fail> {
    if p.is_null() {
        return Err(Fail::new(libc::EINVAL, "the output pointer is NULL"));
    }
    *p = std::ptr::null_mut();
    Ok(())
}

unsafe fn bytes<'a>(p: *const c_void, len: usize) -> Result<&'a [u8], Fail> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Fail::new(libc::EFAULT, "buffer is NULL"));
    }
    Ok(std::slice::from_raw_parts(p as *const u8, len))
}

unsafe fn bytes_mut<'a>(p: *mut c_void, len: usize) -> Result<&'a mut [u8], Fail> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(Fail::new(libc::EFAULT, "buffer is NULL"));
    }
    Ok(std::slice::from_raw_parts_mut(p as *mut u8, len))
}

/// `stripefs_t`: a connected client.
pub struct Fs {
    client: Client,
}

/// `stripefs_file_t`.
pub struct FsFile {
    file: stripefs_client::File,
}

#[no_mangle]
pub extern "C" fn stripefs_abi_version() -> c_int {
    ABI_VERSION
}

#[no_mangle]
pub extern "C" fn stripefs_errmsg() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_connect(cluster_file: *const c_char, out: *mut *mut Fs) -> c_int {
    guard_int(|| {
        out_ptr(out)?;
        let path = if cluster_file.is_null() {
            std::env::var_os("STRIPEFS_CLUSTER")
                .map(PathBuf::from)
                .ok_or_else(|| {
                    Fail::new(
                        libc::EINVAL,
                        "no cluster file given and STRIPEFS_CLUSTER is not set",
                    )
                })?
        } else {
            PathBuf::from(text(cluster_file, "the cluster file")?)
        };
        let cfg = ClusterConfig::load(&path).map_err(|e| Fail::new(libc::EINVAL, e))?;
        let client = Client::connect(&cfg)?;
        *out = Box::into_raw(Box::new(Fs { client }));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_disconnect(fs: *mut Fs) {
    if !fs.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| drop(Box::from_raw(fs))));
    }
}

/// `stripefs_stat_t`.
#[repr(C)]
pub struct StatOut {
    pub ino: u64,
    pub size: u64,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub stripe_size: u32,
    pub stripe_count: u32,
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_stat(
    fs: *mut Fs,
    path: *const c_char,
    out: *mut StatOut,
) -> c_int {
    guard_int(|| {
        let fs = handle(fs, "stripefs_t")?;
        let out = out
            .as_mut()
            .ok_or_else(|| Fail::new(libc::EINVAL, "the stat buffer is NULL"))?;
        let a = fs.client.stat(text(path, "the path")?)?;
        *out = StatOut {
            ino: a.ino.0,
            size: a.size,
            mode: stripefs_client::posix::type_bits(a.ftype) | a.mode,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            mtime_ns: a.mtime_ns,
            ctime_ns: a.ctime_ns,
            stripe_size: a.layout.as_ref().map_or(0, |l| l.stripe_size_bytes),
            stripe_count: a.layout.as_ref().map_or(0, |l| l.servers.len() as u32),
        };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_mkdir(fs: *mut Fs, path: *const c_char, mode: u32) -> c_int {
    guard_int(|| {
        let fs = handle(fs, "stripefs_t")?;
        fs.client.mkdir(text(path, "the path")?, mode & 0o7777)?;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_rmdir(fs: *mut Fs, path: *const c_char) -> c_int {
    guard_int(|| {
        Ok(handle(fs, "stripefs_t")?
            .client
            .rmdir(text(path, "the path")?)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_unlink(fs: *mut Fs, path: *const c_char) -> c_int {
    guard_int(|| {
        Ok(handle(fs, "stripefs_t")?
            .client
            .unlink(text(path, "the path")?)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_rename(
    fs: *mut Fs,
    from: *const c_char,
    to: *const c_char,
) -> c_int {
    guard_int(|| {
        let fs = handle(fs, "stripefs_t")?;
        Ok(fs
            .client
            .rename(text(from, "the source path")?, text(to, "the target path")?)?)
    })
}

/// Open options from `open(2)` flags.
fn open_options(flags: c_int, mode: u32) -> Result<OpenOptions, Fail> {
    let known = libc::O_ACCMODE | libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC;
    if flags & !known != 0 {
        return Err(Fail::new(
            libc::EINVAL,
            format!(
                "open flags 0x{:x} are not O_RDONLY/O_WRONLY/O_RDWR with O_CREAT, O_EXCL, O_TRUNC",
                flags
            ),
        ));
    }
    let (read, write) = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => (true, false),
        libc::O_WRONLY => (false, true),
        libc::O_RDWR => (true, true),
        _ => return Err(Fail::new(libc::EINVAL, "bad access mode in the open flags")),
    };
    Ok(OpenOptions::new()
        .read(read)
        .write(write)
        .create(flags & libc::O_CREAT != 0)
        .exclusive(flags & libc::O_EXCL != 0)
        .truncate(flags & libc::O_TRUNC != 0)
        .mode(mode & 0o7777))
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_open(
    fs: *mut Fs,
    path: *const c_char,
    flags: c_int,
    mode: u32,
    out: *mut *mut FsFile,
) -> c_int {
    guard_int(|| {
        out_ptr(out)?;
        let fs = handle(fs, "stripefs_t")?;
        let opts = open_options(flags, mode)?;
        let file = fs.client.open(text(path, "the path")?, &opts)?;
        *out = Box::into_raw(Box::new(FsFile { file }));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_pread(
    f: *mut FsFile,
    buf: *mut c_void,
    len: usize,
    offset: u64,
) -> i64 {
    guard(|| {
        let f = handle(f, "stripefs_file_t")?;
        let buf = bytes_mut(buf, len)?;
        Ok(f.file.read_at(offset, buf)? as i64)
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_pwrite(
    f: *mut FsFile,
    buf: *const c_void,
    len: usize,
    offset: u64,
) -> i64 {
    guard(|| {
        let f = handle(f, "stripefs_file_t")?;
        f.file.write_at(offset, bytes(buf, len)?)?;
        Ok(len as i64)
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_fsync(f: *mut FsFile) -> c_int {
    guard_int(|| Ok(handle(f, "stripefs_file_t")?.file.fsync()?))
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_ftruncate(f: *mut FsFile, size: u64) -> c_int {
    guard_int(|| Ok(handle(f, "stripefs_file_t")?.file.set_len(size)?))
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_close(f: *mut FsFile) -> c_int {
    guard_int(|| {
        if f.is_null() {
            return Err(Fail::new(libc::EINVAL, "stripefs_file_t handle is NULL"));
        }
        let f = Box::from_raw(f);
        Ok(f.file.close()?)
    })
}

// ---- the MPI-IO layer ----

/// `stripefs_comm_t`: a communicator as C callbacks.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CComm {
    pub ctx: *mut c_void,
    pub rank: c_int,
    pub size: c_int,
    pub barrier: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
    pub allgather_u64: Option<unsafe extern "C" fn(*mut c_void, u64, *mut u64) -> c_int>,
    pub allgatherv: Option<
        unsafe extern "C" fn(*mut c_void, *const c_void, u64, *mut c_void, *const u64) -> c_int,
    >,
    pub alltoall_u64: Option<unsafe extern "C" fn(*mut c_void, *const u64, *mut u64) -> c_int>,
    pub alltoallv: Option<
        unsafe extern "C" fn(
            *mut c_void,
            *const c_void,
            *const u64,
            *mut c_void,
            *const u64,
        ) -> c_int,
    >,
}

// SAFETY: the callbacks are only called from the thread that makes the collective call
// (the layer's I/O thread never communicates); the C side keeps ctx alive until close.
unsafe impl Send for CComm {}
// SAFETY: as above.
unsafe impl Sync for CComm {}

impl CComm {
    fn check(&self) -> Result<(), Fail> {
        if self.size < 1 || self.rank < 0 || self.rank >= self.size {
            return Err(Fail::new(
                libc::EINVAL,
                format!(
                    "communicator rank {} of size {} is impossible",
                    self.rank, self.size
                ),
            ));
        }
        if self.barrier.is_none()
            || self.allgather_u64.is_none()
            || self.allgatherv.is_none()
            || self.alltoall_u64.is_none()
            || self.alltoallv.is_none()
        {
            return Err(Fail::new(libc::EINVAL, "a communicator callback is NULL"));
        }
        Ok(())
    }
}

/// A callback that failed leaves the ranks out of step: nothing can be recovered, so
/// the call unwinds to its `guard`, which reports EIO.
fn called(rc: c_int, what: &str) {
    if rc != 0 {
        panic!("the communicator's {what} callback failed ({rc})");
    }
}

/// A buffer handed to C is never empty (an empty Vec's address is 1, which MPI takes for
/// MPI_IN_PLACE): one spare byte past every length.
fn padded(mut v: Vec<u8>) -> Vec<u8> {
    v.push(0);
    v
}

fn split(buf: &[u8], lens: &[u64]) -> Vec<Vec<u8>> {
    let mut at = 0usize;
    lens.iter()
        .map(|&l| {
            let part = buf[at..at + l as usize].to_vec();
            at += l as usize;
            part
        })
        .collect()
}

impl Communicator for CComm {
    fn rank(&self) -> usize {
        self.rank as usize
    }

    fn size(&self) -> usize {
        self.size as usize
    }

    fn barrier(&self) {
        let f = self.barrier.expect("checked at open");
        // SAFETY: a callback the C caller provided, with its own context.
        called(unsafe { f(self.ctx) }, "barrier");
    }

    fn allgather(&self, mine: Vec<u8>) -> Vec<Vec<u8>> {
        let n = self.size as usize;
        let mut lens = vec![0u64; n];
        let f = self.allgather_u64.expect("checked at open");
        // SAFETY: `lens` holds `size` entries, as the callback writes.
        called(
            unsafe { f(self.ctx, mine.len() as u64, lens.as_mut_ptr()) },
            "allgather_u64",
        );
        let total: u64 = lens.iter().sum();
        let mut recv = vec![0u8; total as usize + 1];
        let len = mine.len() as u64;
        let mine = padded(mine);
        let g = self.allgatherv.expect("checked at open");
        // SAFETY: send holds len bytes, recv the sum of lens, lens `size` entries.
        called(
            unsafe {
                g(
                    self.ctx,
                    mine.as_ptr() as *const c_void,
                    len,
                    recv.as_mut_ptr() as *mut c_void,
                    lens.as_ptr(),
                )
            },
            "allgatherv",
        );
        split(&recv, &lens)
    }

    fn alltoallv(&self, send: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        let n = self.size as usize;
        assert_eq!(send.len(), n, "alltoallv takes one message per rank");
        let send_lens: Vec<u64> = send.iter().map(|m| m.len() as u64).collect();
        let mut recv_lens = vec![0u64; n];
        let f = self.alltoall_u64.expect("checked at open");
        // SAFETY: both arrays hold `size` entries.
        called(
            unsafe { f(self.ctx, send_lens.as_ptr(), recv_lens.as_mut_ptr()) },
            "alltoall_u64",
        );
        let flat = padded(send.concat());
        let total: u64 = recv_lens.iter().sum();
        let mut recv = vec![0u8; total as usize + 1];
        let g = self.alltoallv.expect("checked at open");
        // SAFETY: buffers sized by the length arrays, which hold `size` entries each.
        called(
            unsafe {
                g(
                    self.ctx,
                    flat.as_ptr() as *const c_void,
                    send_lens.as_ptr(),
                    recv.as_mut_ptr() as *mut c_void,
                    recv_lens.as_ptr(),
                )
            },
            "alltoallv",
        );
        split(&recv, &recv_lens)
    }
}

/// `stripefs_mfile_t`.
pub struct MFile {
    file: stripefs_mpiio::File,
    comm: CComm,
}

/// `stripefs_request_t`: the request, and where an iread's bytes go.
pub struct MRequest {
    req: stripefs_mpiio::Request,
    into: Option<(*mut u8, usize)>,
}

const MODE_RDONLY: c_int = 1;
const MODE_WRONLY: c_int = 2;
const MODE_RDWR: c_int = 4;
const MODE_CREATE: c_int = 8;
const MODE_EXCL: c_int = 16;

fn parse_hints(text: &str) -> Result<Hints, Fail> {
    let mut h = Hints::default();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| Fail::new(libc::EINVAL, format!("hint {item:?} is not key=value")))?;
        h = h.set(k.trim(), v.trim());
    }
    Ok(h)
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_mpi_open(
    fs: *mut Fs,
    comm: *const CComm,
    path: *const c_char,
    amode: c_int,
    hints: *const c_char,
    out: *mut *mut MFile,
) -> c_int {
    guard_int(|| {
        out_ptr(out)?;
        let fs = handle(fs, "stripefs_t")?;
        let comm = *comm
            .as_ref()
            .ok_or_else(|| Fail::new(libc::EINVAL, "the communicator is NULL"))?;
        comm.check()?;
        if amode & !(MODE_RDONLY | MODE_WRONLY | MODE_RDWR | MODE_CREATE | MODE_EXCL) != 0
            || (amode & (MODE_RDONLY | MODE_WRONLY | MODE_RDWR)).count_ones() != 1
            || (amode & MODE_EXCL != 0 && amode & MODE_CREATE == 0)
        {
            return Err(Fail::new(
                libc::EINVAL,
                format!(
                    "amode {amode}: one of RDONLY, WRONLY, RDWR, with CREATE (and EXCL) or not"
                ),
            ));
        }
        let mode = Mode {
            read: amode & (MODE_RDONLY | MODE_RDWR) != 0,
            write: amode & (MODE_WRONLY | MODE_RDWR) != 0,
            create: amode & MODE_CREATE != 0,
            exclusive: amode & MODE_EXCL != 0,
        };
        let hints = if hints.is_null() {
            Hints::default()
        } else {
            parse_hints(text(hints, "the hints")?)?
        };
        let path = text(path, "the path")?;
        let file = stripefs_mpiio::File::open_all(&comm, &fs.client, path, mode, &hints)?;
        *out = Box::into_raw(Box::new(MFile { file, comm }));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_mpi_set_view(
    f: *mut MFile,
    disp: u64,
    etype: *const c_char,
    filetype: *const c_char,
) -> c_int {
    guard_int(|| {
        let f = handle(f, "stripefs_mfile_t")?;
        let e = Datatype::parse(text(etype, "the etype")?).map_err(IoError::from)?;
        let t = Datatype::parse(text(filetype, "the filetype")?).map_err(IoError::from)?;
        Ok(f.file.set_view(disp, &e, &t)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_mpi_write_at(
    f: *mut MFile,
    offset: u64,
    buf: *const c_void,
    len: usize,
) -> c_int {
    guard_int(|| {
        let f = handle(f, "stripefs_mfile_t")?;
        Ok(f.file.write_at(offset, bytes(buf, len)?)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_mpi_read_at(
    f: *mut MFile,
    offset: u64,
    buf: *mut c_void,
    len: usize,
) -> c_int {
    guard_int(|| {
        let f = handle(f, "stripefs_mfile_t")?;
        Ok(f.file.read_at(offset, bytes_mut(buf, len)?)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_mpi_write_at_all(
    f: *mut MFile,
    offset: u64,
    buf: *const c_void,
    len: usize,
) -> c_int {
    guard_int(|| {
        let f = handle(f, "stripefs_mfile_t")?;
        Ok(f.file.write_at_all(&f.comm, offset, bytes(buf, len)?)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_mpi_read_at_all(
    f: *mut MFile,
    offset: u64,
    buf: *mut c_void,
    len: usize,
) -> c_int {
    guard_int(|| {
        let f = handle(f, "stripefs_mfile_t")?;
        Ok(f.file.read_at_all(&f.comm, offset, bytes_mut(buf, len)?)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_mpi_iwrite_at(
    f: *mut MFile,
    offset: u64,
    buf: *const c_void,
    len: usize,
    req: *mut *mut MRequest,
) -> c_int {
    guard_int(|| {
        out_ptr(req)?;
        let f = handle(f, "stripefs_mfile_t")?;
        let r = f.file.iwrite_at(offset, bytes(buf, len)?.to_vec())?;
        *req = Box::into_raw(Box::new(MRequest { req: r, into: None }));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_mpi_iread_at(
    f: *mut MFile,
    offset: u64,
    buf: *mut c_void,
    len: usize,
    req: *mut *mut MRequest,
) -> c_int {
    guard_int(|| {
        out_ptr(req)?;
        let f = handle(f, "stripefs_mfile_t")?;
        if len > 0 && buf.is_null() {
            return Err(Fail::new(libc::EFAULT, "buffer is NULL"));
        }
        let r = f.file.iread_at(offset, len)?;
        *req = Box::into_raw(Box::new(MRequest {
            req: r,
            into: Some((buf as *mut u8, len)),
        }));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_mpi_wait(req: *mut MRequest) -> c_int {
    guard_int(|| {
        if req.is_null() {
            return Err(Fail::new(libc::EINVAL, "stripefs_request_t handle is NULL"));
        }
        let r = Box::from_raw(req);
        let data = r.req.wait()?;
        if let Some((p, len)) = r.into {
            if data.len() != len {
                return Err(Fail::new(
                    libc::EIO,
                    format!("read {} of {len} bytes", data.len()),
                ));
            }
            if len > 0 {
                // SAFETY: the caller keeps the buffer of `len` bytes valid until wait.
                std::ptr::copy_nonoverlapping(data.as_ptr(), p, len);
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_mpi_test(req: *mut MRequest, done: *mut c_int) -> c_int {
    guard_int(|| {
        let r = handle(req, "stripefs_request_t")?;
        let done = done
            .as_mut()
            .ok_or_else(|| Fail::new(libc::EINVAL, "the done flag pointer is NULL"))?;
        *done = c_int::from(r.req.test());
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_mpi_set_size(f: *mut MFile, size: u64) -> c_int {
    guard_int(|| {
        let f = handle(f, "stripefs_mfile_t")?;
        Ok(f.file.set_size_all(&f.comm, size)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_mpi_get_size(f: *mut MFile, size: *mut u64) -> c_int {
    guard_int(|| {
        let f = handle(f, "stripefs_mfile_t")?;
        let out = size
            .as_mut()
            .ok_or_else(|| Fail::new(libc::EINVAL, "the size pointer is NULL"))?;
        *out = f.file.size()?;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_mpi_sync(f: *mut MFile) -> c_int {
    guard_int(|| Ok(handle(f, "stripefs_mfile_t")?.file.sync()?))
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_mpi_close(f: *mut MFile) -> c_int {
    guard_int(|| {
        if f.is_null() {
            return Err(Fail::new(libc::EINVAL, "stripefs_mfile_t handle is NULL"));
        }
        let f = Box::from_raw(f);
        let comm = f.comm;
        let r = f.file.close();
        comm.barrier();
        Ok(r?)
    })
}

// ---- list I/O, for callers that flatten views themselves (the Open MPI components) ----

/// `stripefs_extent_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Extent {
    pub offset: u64,
    pub len: u64,
}

unsafe fn extents(p: *const Extent, n: usize) -> Result<Vec<(u64, u64)>, Fail> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(Fail::new(libc::EFAULT, "the extent list is NULL"));
    }
    Ok(std::slice::from_raw_parts(p, n)
        .iter()
        .map(|e| (e.offset, e.len))
        .collect())
}

fn list_len(ext: &[(u64, u64)]) -> Result<usize, Fail> {
    ext.iter()
        .try_fold(0u64, |t, e| t.checked_add(e.1))
        .and_then(|t| usize::try_from(t).ok())
        .ok_or_else(|| Fail::new(libc::EINVAL, "the extents add up past the address space"))
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_mpi_write_list(
    f: *mut MFile,
    ext: *const Extent,
    n: usize,
    buf: *const c_void,
) -> c_int {
    guard_int(|| {
        let f = handle(f, "stripefs_mfile_t")?;
        let ext = extents(ext, n)?;
        let len = list_len(&ext)?;
        Ok(f.file.write_list(&ext, bytes(buf, len)?)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_mpi_read_list(
    f: *mut MFile,
    ext: *const Extent,
    n: usize,
    buf: *mut c_void,
) -> c_int {
    guard_int(|| {
        let f = handle(f, "stripefs_mfile_t")?;
        let ext = extents(ext, n)?;
        let len = list_len(&ext)?;
        Ok(f.file.read_list(&ext, bytes_mut(buf, len)?)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_mpi_write_list_all(
    f: *mut MFile,
    ext: *const Extent,
    n: usize,
    buf: *const c_void,
) -> c_int {
    guard_int(|| {
        let f = handle(f, "stripefs_mfile_t")?;
        let ext = extents(ext, n)?;
        let len = list_len(&ext)?;
        Ok(f.file.write_list_all(&f.comm, &ext, bytes(buf, len)?)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_mpi_read_list_all(
    f: *mut MFile,
    ext: *const Extent,
    n: usize,
    buf: *mut c_void,
) -> c_int {
    guard_int(|| {
        let f = handle(f, "stripefs_mfile_t")?;
        let ext = extents(ext, n)?;
        let len = list_len(&ext)?;
        Ok(f.file.read_list_all(&f.comm, &ext, bytes_mut(buf, len)?)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_mpi_iwrite_list(
    f: *mut MFile,
    ext: *const Extent,
    n: usize,
    buf: *const c_void,
    req: *mut *mut MRequest,
) -> c_int {
    guard_int(|| {
        out_ptr(req)?;
        let f = handle(f, "stripefs_mfile_t")?;
        let ext = extents(ext, n)?;
        let len = list_len(&ext)?;
        let r = f.file.iwrite_list(ext, bytes(buf, len)?.to_vec())?;
        *req = Box::into_raw(Box::new(MRequest { req: r, into: None }));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_mpi_iread_list(
    f: *mut MFile,
    ext: *const Extent,
    n: usize,
    buf: *mut c_void,
    req: *mut *mut MRequest,
) -> c_int {
    guard_int(|| {
        out_ptr(req)?;
        let f = handle(f, "stripefs_mfile_t")?;
        let ext = extents(ext, n)?;
        let len = list_len(&ext)?;
        if len > 0 && buf.is_null() {
            return Err(Fail::new(libc::EFAULT, "buffer is NULL"));
        }
        let r = f.file.iread_list(ext)?;
        *req = Box::into_raw(Box::new(MRequest {
            req: r,
            into: Some((buf as *mut u8, len)),
        }));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn stripefs_mpi_striping(
    f: *mut MFile,
    stripe_size: *mut u64,
    stripe_count: *mut u32,
) -> c_int {
    guard_int(|| {
        let f = handle(f, "stripefs_mfile_t")?;
        let (s, c) = f.file.striping();
        if let Some(p) = stripe_size.as_mut() {
            *p = s;
        }
        if let Some(p) = stripe_count.as_mut() {
            *p = c as u32;
        }
        Ok(())
    })
}

/// Whether `path` (absolute, or relative to the working directory; it need not exist,
/// its directory must) lies under a stripefs FUSE mount of this machine: 1 with the
/// mount's cluster file and the path inside stripefs written as C strings (cut to
/// fit `len`-byte buffers; -ENAMETOOLONG if they do not fit), 0 if it does not, or a
/// negative errno. The cluster file is the one the mount daemon was started with, which
/// it names as its mount source (`stripefs:/path/cluster.toml`).
#[no_mangle]
pub unsafe extern "C" fn stripefs_resolve_mount_path(
    path: *const c_char,
    cluster: *mut c_char,
    cluster_len: usize,
    inner: *mut c_char,
    inner_len: usize,
) -> c_int {
    guard_int_value(|| {
        let path = text(path, "the path")?;
        let Some(abs) = mounts::resolve_dir(path) else {
            return Ok(0);
        };
        let table = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| Fail::new(libc::EIO, format!("reading /proc/self/mountinfo: {e}")))?;
        let Some(found) = mounts::find(&table, &abs) else {
            return Ok(0);
        };
        put_text(&found.cluster, cluster, cluster_len)?;
        put_text(&found.inner, inner, inner_len)?;
        Ok(1)
    })
}

fn guard_int_value(f: impl FnOnce() -> Result<c_int, Fail>) -> c_int {
    guard(|| f().map(i64::from)) as c_int
}

unsafe fn put_text(s: &str, out: *mut c_char, len: usize) -> Result<(), Fail> {
    if out.is_null() || len == 0 {
        return Err(Fail::new(libc::EINVAL, "the output buffer is NULL"));
    }
    if s.len() + 1 > len {
        return Err(Fail::new(
            libc::ENAMETOOLONG,
            format!("{s:?} does not fit {len} bytes"),
        ));
    }
    std::ptr::copy_nonoverlapping(s.as_ptr(), out as *mut u8, s.len());
    *out.add(s.len()) = 0;
    Ok(())
}
