//! The C library functions the library takes over. Each first asks whether this thread
//! is already inside the library (then, and for descriptors it does not serve, the C
//! library's own function runs), so the client's own sockets and files never loop back.

use crate::meta;
use crate::real;
use crate::state::{self, enter, served, Open};
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use stripefs_client::WireError;

use state::set_errno;

fn fail(e: &WireError) -> isize {
    set_errno(stripefs_client::posix_errno(e));
    -1
}

/// A C library call made while inside the library: its errno, if it failed, is the
/// caller's.
fn keep_errno(r: i64) -> i64 {
    if r < 0 {
        // SAFETY: the calling thread's errno.
        set_errno(unsafe { *libc::__errno_location() });
    }
    r
}

/// The served file of `fd`, with this thread marked as inside the library.
fn served_fd(fd: c_int) -> Option<(state::Busy, Arc<Open>)> {
    let b = enter()?;
    state::get(fd).map(|o| (b, o))
}

/// As `served_fd`, for a read or write of `n` bytes (which may start serving it).
fn served_io(fd: c_int, n: usize, write: bool) -> Option<(state::Busy, Arc<Open>)> {
    let b = enter()?;
    state::for_io(fd, n, write).map(|o| (b, o))
}

fn iov_len(v: *const libc::iovec, n: c_int) -> usize {
    if v.is_null() || n <= 0 {
        return 0;
    }
    // SAFETY: the caller's array of n iovecs.
    unsafe { std::slice::from_raw_parts(v, n as usize) }
        .iter()
        .map(|i| i.iov_len)
        .sum()
}

/// After the kernel opened `fd`: serve it natively if it is on a stripefs mount.
fn opened(fd: c_int, flags: c_int) -> c_int {
    if fd >= 0 {
        if let Some(_b) = enter() {
            state::adopt(fd, flags);
        }
    }
    fd
}

// ---- open ----

/// The shim opened `fd` (with `flags`) before this library was loaded, and made `calls`
/// reads and writes on it through the mount (`wrote`: some were writes): a candidate
/// here, as if this library had seen them.
#[no_mangle]
pub unsafe extern "C" fn sfs_engine_take(fd: c_int, flags: c_int, calls: u64, wrote: c_int) {
    if fd >= 0 {
        if let Some(_b) = enter() {
            state::take(fd, flags, calls, wrote != 0);
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    opened(real::open(path, flags, mode), flags)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_open64(
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    opened(real::open64(path, flags, mode), flags)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    opened(real::openat(dirfd, path, flags, mode), flags)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    opened(real::openat64(dirfd, path, flags, mode), flags)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine___open_2(path: *const c_char, flags: c_int) -> c_int {
    opened(real::__open_2(path, flags), flags)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine___open64_2(path: *const c_char, flags: c_int) -> c_int {
    opened(real::__open64_2(path, flags), flags)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine___openat_2(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
) -> c_int {
    opened(real::__openat_2(dirfd, path, flags), flags)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine___openat64_2(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
) -> c_int {
    opened(real::__openat64_2(dirfd, path, flags), flags)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_creat(path: *const c_char, mode: c_uint) -> c_int {
    opened(
        real::creat(path, mode),
        libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
    )
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_creat64(path: *const c_char, mode: c_uint) -> c_int {
    opened(
        real::creat64(path, mode),
        libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
    )
}

// ---- close and descriptors ----

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_close(fd: c_int) -> c_int {
    let mut failed = None;
    if let Some(_b) = enter() {
        state::drop_candidate(fd);
        state::kernel_remove(fd);
        if let Some(o) = state::remove(fd) {
            served();
            failed = state::finish(fd, o).err();
        }
    }
    let r = real::close(fd);
    match failed {
        Some(e) if r == 0 => fail(&e) as c_int,
        _ => r,
    }
}

/// The descriptors in `first..=last` are about to be closed together.
fn closing_range(first: u64, last: u64) {
    if let Some(_b) = enter() {
        for fd in state::candidates_in(first, last) {
            state::drop_candidate(fd);
        }
        state::kernel_remove_range(first, last);
        for (fd, o) in state::served_in(first, last) {
            if let Some(o2) = state::remove(fd) {
                drop(o);
                let _ = state::finish(fd, o2);
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_close_range(
    first: c_uint,
    last: c_uint,
    flags: c_int,
) -> c_int {
    // CLOSE_RANGE_CLOEXEC only marks them; they close at exec, where nothing is kept.
    if flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
        closing_range(first as u64, last as u64);
    }
    crate::ownfds::close_range_sparing(first, last, flags)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_closefrom(first: c_int) {
    closing_range(first.max(0) as u64, u64::MAX);
    // As closefrom(3), which has no result to give.
    let _ = crate::ownfds::close_range_sparing(first.max(0) as c_uint, c_uint::MAX, 0);
}

/// `to` now names what `from` named: share the served file, if any.
fn duplicated(from: c_int, to: c_int) -> c_int {
    if to >= 0 {
        if let Some(_b) = enter() {
            if let Some(o) = state::get(from) {
                state::insert(to, o);
                served();
            } else {
                state::dup_candidate(from, to);
                state::kernel_dup(from, to);
            }
        }
    }
    to
}

/// `to` is about to be closed by dup2/dup3: finish its served file first.
fn closing(to: c_int) {
    if let Some(_b) = enter() {
        state::drop_candidate(to);
        state::kernel_remove(to);
        if let Some(o) = state::remove(to) {
            let _ = state::finish(to, o);
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_dup(fd: c_int) -> c_int {
    duplicated(fd, real::dup(fd))
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_dup2(fd: c_int, to: c_int) -> c_int {
    if fd == to {
        return real::dup2(fd, to);
    }
    closing(to);
    duplicated(fd, real::dup2(fd, to))
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_dup3(fd: c_int, to: c_int, flags: c_int) -> c_int {
    if fd != to {
        closing(to);
    }
    duplicated(fd, real::dup3(fd, to, flags))
}

unsafe fn fcntl_any(
    fd: c_int,
    cmd: c_int,
    arg: usize,
    f: unsafe fn(c_int, c_int, usize) -> c_int,
) -> c_int {
    match cmd {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => duplicated(fd, f(fd, cmd, arg)),
        libc::F_SETFL if arg as c_int & (libc::O_APPEND | libc::O_DIRECT) != 0 => {
            if let Some(_b) = enter() {
                state::release(fd, "fcntl sets O_APPEND or O_DIRECT");
            }
            f(fd, cmd, arg)
        }
        _ => f(fd, cmd, arg),
    }
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    fcntl_any(fd, cmd, arg, real::fcntl)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    fcntl_any(fd, cmd, arg, real::fcntl64)
}

// ---- reads and writes ----

/// The file offset is the kernel's, always: it is shared with every descriptor of the
/// open file description, in this process and in children after fork or exec, which may
/// move it through the mount. A seek on the mount to the current or a set position is
/// answered by the kernel, with no round trip. The lock of the open file keeps two
/// threads' calls on one description from interleaving their offsets.
fn kernel_offset(fd: c_int) -> Result<u64, c_int> {
    // SAFETY: a descriptor the caller uses.
    let at = unsafe { real::lseek(fd, 0, libc::SEEK_CUR) };
    u64::try_from(at).map_err(|_| unsafe { *libc::__errno_location() })
}

fn set_kernel_offset(fd: c_int, off: u64) {
    // SAFETY: a descriptor the caller uses.
    unsafe { real::lseek(fd, off as i64, libc::SEEK_SET) };
}

/// Reads into `parts` from `at`, or from the file offset (which moves) when `None`.
/// A short read refreshes the size once: another client (or a child writing through
/// the mount) may have made the file longer than this client knows.
fn do_read(fd: c_int, o: &Open, parts: &mut [&mut [u8]], at: Option<u64>) -> isize {
    let _g = o.offset.lock().unwrap_or_else(|p| p.into_inner());
    let start = match at {
        Some(a) => a,
        None => match kernel_offset(fd) {
            Ok(a) => a,
            Err(e) => {
                set_errno(e);
                return -1;
            }
        },
    };
    let mut done = 0u64;
    let mut refreshed = false;
    'parts: for p in parts.iter_mut() {
        let mut got = 0usize;
        while got < p.len() {
            match o.file.read_at(start + done, &mut p[got..]) {
                Ok(n) if n > 0 => {
                    done += n as u64;
                    got += n;
                }
                Ok(_) if !refreshed => {
                    refreshed = true;
                    if o.file.attr().is_err() {
                        break 'parts;
                    }
                }
                Ok(_) => break 'parts,
                Err(e) if done == 0 => return fail(&e),
                Err(_) => break 'parts,
            }
        }
    }
    if at.is_none() {
        set_kernel_offset(fd, start + done);
    }
    served();
    done as isize
}

fn do_write(fd: c_int, o: &Open, parts: &[&[u8]], at: Option<u64>) -> isize {
    let _g = o.offset.lock().unwrap_or_else(|p| p.into_inner());
    let start = match at {
        Some(a) => a,
        None => match kernel_offset(fd) {
            Ok(a) => a,
            Err(e) => {
                set_errno(e);
                return -1;
            }
        },
    };
    let mut done = 0u64;
    for p in parts {
        if p.is_empty() {
            continue;
        }
        if let Err(e) = o.file.write_at(start + done, p) {
            if done == 0 {
                return fail(&e);
            }
            break;
        }
        done += p.len() as u64;
    }
    o.written.store(true, Ordering::Relaxed);
    o.last_write_ns.store(state::now_ns(), Ordering::Relaxed);
    if at.is_none() {
        set_kernel_offset(fd, start + done);
    }
    served();
    done as isize
}

unsafe fn buf_mut<'a>(p: *mut c_void, n: usize) -> &'a mut [u8] {
    if n == 0 || p.is_null() {
        &mut []
    } else {
        std::slice::from_raw_parts_mut(p as *mut u8, n)
    }
}

unsafe fn buf<'a>(p: *const c_void, n: usize) -> &'a [u8] {
    if n == 0 || p.is_null() {
        &[]
    } else {
        std::slice::from_raw_parts(p as *const u8, n)
    }
}

unsafe fn iov_mut<'a>(iov: *const libc::iovec, n: c_int) -> Option<Vec<&'a mut [u8]>> {
    if n < 0 || (n > 0 && iov.is_null()) {
        return None;
    }
    let v = if n == 0 {
        &[][..]
    } else {
        std::slice::from_raw_parts(iov, n as usize)
    };
    Some(v.iter().map(|i| buf_mut(i.iov_base, i.iov_len)).collect())
}

unsafe fn iov<'a>(iov: *const libc::iovec, n: c_int) -> Option<Vec<&'a [u8]>> {
    if n < 0 || (n > 0 && iov.is_null()) {
        return None;
    }
    let v = if n == 0 {
        &[][..]
    } else {
        std::slice::from_raw_parts(iov, n as usize)
    };
    Some(v.iter().map(|i| buf(i.iov_base, i.iov_len)).collect())
}

fn offset(off: i64) -> Option<u64> {
    u64::try_from(off).ok()
}

macro_rules! served_or {
    ($fd:expr, $o:ident => $body:expr, else $fallback:expr) => {
        match served_fd($fd) {
            Some((_b, $o)) => $body,
            None => $fallback,
        }
    };
}

macro_rules! io_or {
    ($fd:expr, $n:expr, $write:expr, $o:ident => $body:expr, else $fallback:expr) => {
        match served_io($fd, $n, $write) {
            Some((_b, $o)) => $body,
            None => $fallback,
        }
    };
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_read(fd: c_int, b: *mut c_void, n: usize) -> isize {
    io_or!(fd, n, false, o => do_read(fd, &o, &mut [buf_mut(b, n)], None), else real::read(fd, b, n))
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_write(fd: c_int, b: *const c_void, n: usize) -> isize {
    io_or!(fd, n, true, o => do_write(fd, &o, &[buf(b, n)], None), else real::write(fd, b, n))
}

unsafe fn pread_any(
    fd: c_int,
    b: *mut c_void,
    n: usize,
    off: i64,
    f: unsafe fn(c_int, *mut c_void, usize, i64) -> isize,
) -> isize {
    io_or!(fd, n, false, o => match offset(off) {
        Some(at) => do_read(fd, &o, &mut [buf_mut(b, n)], Some(at)),
        None => { set_errno(libc::EINVAL); -1 }
    }, else f(fd, b, n, off))
}

unsafe fn pwrite_any(
    fd: c_int,
    b: *const c_void,
    n: usize,
    off: i64,
    f: unsafe fn(c_int, *const c_void, usize, i64) -> isize,
) -> isize {
    io_or!(fd, n, true, o => match offset(off) {
        Some(at) => do_write(fd, &o, &[buf(b, n)], Some(at)),
        None => { set_errno(libc::EINVAL); -1 }
    }, else f(fd, b, n, off))
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_pread(fd: c_int, b: *mut c_void, n: usize, off: i64) -> isize {
    pread_any(fd, b, n, off, real::pread)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_pread64(
    fd: c_int,
    b: *mut c_void,
    n: usize,
    off: i64,
) -> isize {
    pread_any(fd, b, n, off, real::pread64)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_pwrite(
    fd: c_int,
    b: *const c_void,
    n: usize,
    off: i64,
) -> isize {
    pwrite_any(fd, b, n, off, real::pwrite)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_pwrite64(
    fd: c_int,
    b: *const c_void,
    n: usize,
    off: i64,
) -> isize {
    pwrite_any(fd, b, n, off, real::pwrite64)
}

unsafe fn readv_at(fd: c_int, v: *const libc::iovec, n: c_int, at: Option<i64>) -> Option<isize> {
    let (_b, o) = served_io(fd, iov_len(v, n), false)?;
    let Some(mut parts) = iov_mut(v, n) else {
        set_errno(libc::EINVAL);
        return Some(-1);
    };
    let at = match at.map(offset) {
        Some(None) => {
            set_errno(libc::EINVAL);
            return Some(-1);
        }
        Some(Some(a)) => Some(a),
        None => None,
    };
    Some(do_read(fd, &o, &mut parts, at))
}

unsafe fn writev_at(fd: c_int, v: *const libc::iovec, n: c_int, at: Option<i64>) -> Option<isize> {
    let (_b, o) = served_io(fd, iov_len(v, n), true)?;
    let Some(parts) = iov(v, n) else {
        set_errno(libc::EINVAL);
        return Some(-1);
    };
    let at = match at.map(offset) {
        Some(None) => {
            set_errno(libc::EINVAL);
            return Some(-1);
        }
        Some(Some(a)) => Some(a),
        None => None,
    };
    Some(do_write(fd, &o, &parts, at))
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_readv(fd: c_int, v: *const libc::iovec, n: c_int) -> isize {
    readv_at(fd, v, n, None).unwrap_or_else(|| real::readv(fd, v, n))
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_writev(fd: c_int, v: *const libc::iovec, n: c_int) -> isize {
    writev_at(fd, v, n, None).unwrap_or_else(|| real::writev(fd, v, n))
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_preadv(
    fd: c_int,
    v: *const libc::iovec,
    n: c_int,
    off: i64,
) -> isize {
    readv_at(fd, v, n, Some(off)).unwrap_or_else(|| real::preadv(fd, v, n, off))
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_preadv64(
    fd: c_int,
    v: *const libc::iovec,
    n: c_int,
    off: i64,
) -> isize {
    readv_at(fd, v, n, Some(off)).unwrap_or_else(|| real::preadv64(fd, v, n, off))
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_pwritev(
    fd: c_int,
    v: *const libc::iovec,
    n: c_int,
    off: i64,
) -> isize {
    writev_at(fd, v, n, Some(off)).unwrap_or_else(|| real::pwritev(fd, v, n, off))
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_pwritev64(
    fd: c_int,
    v: *const libc::iovec,
    n: c_int,
    off: i64,
) -> isize {
    writev_at(fd, v, n, Some(off)).unwrap_or_else(|| real::pwritev64(fd, v, n, off))
}

type RwV2 = unsafe fn(c_int, *const libc::iovec, c_int, i64, c_int) -> isize;

/// preadv2/pwritev2 (and their 64 names): offset -1 means the file offset; flags
/// (RWF_*) are hints here, except RWF_APPEND, which is left to the mount.
unsafe fn preadv2_any(
    fd: c_int,
    v: *const libc::iovec,
    n: c_int,
    off: i64,
    flags: c_int,
    f: RwV2,
) -> isize {
    let at = if off == -1 { None } else { Some(off) };
    readv_at(fd, v, n, at).unwrap_or_else(|| f(fd, v, n, off, flags))
}

unsafe fn pwritev2_any(
    fd: c_int,
    v: *const libc::iovec,
    n: c_int,
    off: i64,
    flags: c_int,
    f: RwV2,
) -> isize {
    if flags & libc::RWF_APPEND != 0 {
        if let Some(_b) = enter() {
            state::release(fd, "pwritev2 with RWF_APPEND");
        }
        return f(fd, v, n, off, flags);
    }
    let at = if off == -1 { None } else { Some(off) };
    writev_at(fd, v, n, at).unwrap_or_else(|| f(fd, v, n, off, flags))
}

/// The exported preadv2/pwritev2 and their 64 names, each on its C library function.
macro_rules! v2_hooks {
    ($($name:ident => $any:ident($real:ident);)*) => {
        $(
            #[no_mangle]
            pub unsafe extern "C" fn $name(
                fd: c_int,
                v: *const libc::iovec,
                n: c_int,
                off: i64,
                flags: c_int,
            ) -> isize {
                $any(fd, v, n, off, flags, real::$real)
            }
        )*
    };
}

v2_hooks! {
    sfs_engine_preadv2 => preadv2_any(preadv2);
    sfs_engine_preadv64v2 => preadv2_any(preadv64v2);
    sfs_engine_pwritev2 => pwritev2_any(pwritev2);
    sfs_engine_pwritev64v2 => pwritev2_any(pwritev64v2);
}

unsafe fn lseek_any(
    fd: c_int,
    off: i64,
    whence: c_int,
    f: unsafe fn(c_int, i64, c_int) -> i64,
) -> i64 {
    let Some((_b, o)) = served_fd(fd) else {
        return f(fd, off, whence);
    };
    let _g = o.offset.lock().unwrap_or_else(|p| p.into_inner());
    let end = match whence {
        // The end as the cluster knows it with this client's writes (the kernel's
        // attributes may not have them yet).
        libc::SEEK_END => match o.file.attr() {
            Ok(a) => a.size,
            Err(e) => return fail(&e) as i64,
        },
        libc::SEEK_DATA | libc::SEEK_HOLE => {
            let Some(from) = offset(off) else {
                set_errno(libc::ENXIO);
                return -1;
            };
            // The servers answer: this process's writes still behind go there first.
            if let Err(e) = o.file.flush() {
                return fail(&e) as i64;
            }
            let r = if whence == libc::SEEK_DATA {
                o.file.seek_data(from)
            } else {
                o.file.seek_hole(from)
            };
            return match r {
                Ok(Some(at)) => {
                    set_kernel_offset(fd, at);
                    served();
                    at as i64
                }
                Ok(None) => {
                    set_errno(libc::ENXIO);
                    -1
                }
                Err(e) => fail(&e) as i64,
            };
        }
        // SEEK_SET and SEEK_CUR: the kernel's own answer (and its errno).
        _ => return keep_errno(f(fd, off, whence)),
    };
    let new = end as i128 + off as i128;
    if new < 0 || new > i64::MAX as i128 {
        set_errno(libc::EINVAL);
        return -1;
    }
    set_kernel_offset(fd, new as u64);
    served();
    new as i64
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_lseek(fd: c_int, off: i64, whence: c_int) -> i64 {
    lseek_any(fd, off, whence, real::lseek)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_lseek64(fd: c_int, off: i64, whence: c_int) -> i64 {
    lseek_any(fd, off, whence, real::lseek64)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_fsync(fd: c_int) -> c_int {
    served_or!(fd, o => match o.file.fsync() {
        Ok(()) => { served(); 0 }
        Err(e) => fail(&e) as c_int,
    }, else real::fsync(fd))
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_fdatasync(fd: c_int) -> c_int {
    served_or!(fd, o => match o.file.fsync() {
        Ok(()) => { served(); 0 }
        Err(e) => fail(&e) as c_int,
    }, else real::fdatasync(fd))
}

/// A resize through the native handle (which drops what it cached past the new end),
/// then through the mount too, so that the kernel's attributes show it at once.
unsafe fn ftruncate_any(fd: c_int, len: i64, f: unsafe fn(c_int, i64) -> c_int) -> c_int {
    let Some((_b, o)) = served_fd(fd) else {
        return f(fd, len);
    };
    let Some(size) = offset(len) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if let Err(e) = o.file.set_len(size) {
        return fail(&e) as c_int;
    }
    served();
    let _ = f;
    // The kernel's size and times follow from a setattr of the mtime (which a
    // truncation changes anyway); a second truncation through the mount would be
    // another client's, and race this process's writes after it.
    state::kernel_attrs_changed(fd);
    0
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_ftruncate(fd: c_int, len: i64) -> c_int {
    ftruncate_any(fd, len, real::ftruncate)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_ftruncate64(fd: c_int, len: i64) -> c_int {
    ftruncate_any(fd, len, real::ftruncate64)
}

// ---- stat: the kernel's answer, with what this process's writes did ----
//
// The size and times of a file this process writes natively, as a stat through the
// mount would show them: its writes may still be behind, unknown to the mount daemon.

/// Raises `size`, and mtime and ctime to the last write served, for the file
/// `(dev, ino)` if this process serves it.
fn fix(
    dev: u64,
    ino: u64,
    size: &mut i64,
    mtime: (&mut i64, &mut i64),
    ctime: (&mut i64, &mut i64),
) {
    let Some(_b) = enter() else { return };
    let Some((k, last)) = state::known(dev, ino) else {
        return;
    };
    if k as i64 > *size {
        *size = k as i64;
    }
    for (sec, nsec) in [mtime, ctime] {
        let cur = *sec * 1_000_000_000 + *nsec;
        if last > cur {
            *sec = last.div_euclid(1_000_000_000);
            *nsec = last.rem_euclid(1_000_000_000);
        }
    }
}

macro_rules! fix_stat {
    ($st:expr) => {{
        let s = &mut *$st;
        fix(
            s.st_dev as u64,
            s.st_ino as u64,
            &mut s.st_size,
            (&mut s.st_mtime, &mut s.st_mtime_nsec),
            (&mut s.st_ctime, &mut s.st_ctime_nsec),
        );
    }};
}

macro_rules! stat_hooks {
    ($($real:ident => $name:ident ( $($a:ident : $t:ty),* ) buf $st:ident;)*) => {
        $(
            #[no_mangle]
            pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
                let r = real::$real($($a),*);
                if r == 0 && !$st.is_null() && state::any() {
                    fix_stat!($st);
                }
                r
            }
        )*
    };
}

stat_hooks! {
    fstat => sfs_engine_fstat(fd: c_int, st: *mut libc::stat) buf st;
    fstat64 => sfs_engine_fstat64(fd: c_int, st: *mut libc::stat64) buf st;
    __fxstat => sfs_engine___fxstat(ver: c_int, fd: c_int, st: *mut libc::stat) buf st;
    __fxstat64 => sfs_engine___fxstat64(ver: c_int, fd: c_int, st: *mut libc::stat64) buf st;
}

/// The `fstatat` flags a native stat honours (others go to the kernel).
const STAT_FLAGS: c_int = libc::AT_SYMLINK_NOFOLLOW | libc::AT_NO_AUTOMOUNT | libc::AT_EMPTY_PATH;
/// The `statx` flags it honours: those and the sync type (a native stat is always as
/// fresh as a forced sync).
const STATX_FLAGS: c_int = STAT_FLAGS | libc::AT_STATX_FORCE_SYNC | libc::AT_STATX_DONT_SYNC;

/// A stat by path: natively if it may be (meta.rs), else the kernel's; then what this
/// process's own writes did (`fix`). `$ok` says whether the arguments allow a native
/// answer at all.
macro_rules! path_stat_hooks {
    ($($real:ident => $name:ident ( $($a:ident : $t:ty),* ) at ($dirfd:expr, $path:expr, $follow:expr, $ok:expr) buf $st:ident fill $fill:ident;)*) => {
        $(
            #[no_mangle]
            pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
                let native = match enter() {
                    Some(_b) if $ok && !$st.is_null() => match meta::stat($dirfd, $path, $follow) {
                        Some(Ok(f)) => Some(Ok(f)),
                        Some(Err(e)) => {
                            set_errno(e);
                            Some(Err(()))
                        }
                        None => None,
                    },
                    _ => None,
                };
                let r = match native {
                    Some(Ok(f)) => {
                        meta::$fill($st, &f);
                        0
                    }
                    Some(Err(())) => -1,
                    None => real::$real($($a),*),
                };
                if r == 0 && !$st.is_null() && state::any() {
                    fix_stat!($st);
                }
                r
            }
        )*
    };
}

const CWD: c_int = libc::AT_FDCWD;

path_stat_hooks! {
    stat => sfs_engine_stat(path: *const c_char, st: *mut libc::stat) at (CWD, path, true, true) buf st fill fill_stat;
    stat64 => sfs_engine_stat64(path: *const c_char, st: *mut libc::stat64) at (CWD, path, true, true) buf st fill fill_stat64;
    lstat => sfs_engine_lstat(path: *const c_char, st: *mut libc::stat) at (CWD, path, false, true) buf st fill fill_stat;
    lstat64 => sfs_engine_lstat64(path: *const c_char, st: *mut libc::stat64) at (CWD, path, false, true) buf st fill fill_stat64;
    fstatat => sfs_engine_fstatat(dirfd: c_int, path: *const c_char, st: *mut libc::stat, flags: c_int)
        at (dirfd, path, flags & libc::AT_SYMLINK_NOFOLLOW == 0, flags & !STAT_FLAGS == 0) buf st fill fill_stat;
    fstatat64 => sfs_engine_fstatat64(dirfd: c_int, path: *const c_char, st: *mut libc::stat64, flags: c_int)
        at (dirfd, path, flags & libc::AT_SYMLINK_NOFOLLOW == 0, flags & !STAT_FLAGS == 0) buf st fill fill_stat64;
    __xstat => sfs_engine___xstat(ver: c_int, path: *const c_char, st: *mut libc::stat) at (CWD, path, true, ver <= 1) buf st fill fill_stat;
    __xstat64 => sfs_engine___xstat64(ver: c_int, path: *const c_char, st: *mut libc::stat64) at (CWD, path, true, ver <= 1) buf st fill fill_stat64;
    __lxstat => sfs_engine___lxstat(ver: c_int, path: *const c_char, st: *mut libc::stat) at (CWD, path, false, ver <= 1) buf st fill fill_stat;
    __lxstat64 => sfs_engine___lxstat64(ver: c_int, path: *const c_char, st: *mut libc::stat64) at (CWD, path, false, ver <= 1) buf st fill fill_stat64;
    __fxstatat => sfs_engine___fxstatat(ver: c_int, dirfd: c_int, path: *const c_char, st: *mut libc::stat, flags: c_int)
        at (dirfd, path, flags & libc::AT_SYMLINK_NOFOLLOW == 0, ver <= 1 && flags & !STAT_FLAGS == 0) buf st fill fill_stat;
    __fxstatat64 => sfs_engine___fxstatat64(ver: c_int, dirfd: c_int, path: *const c_char, st: *mut libc::stat64, flags: c_int)
        at (dirfd, path, flags & libc::AT_SYMLINK_NOFOLLOW == 0, ver <= 1 && flags & !STAT_FLAGS == 0) buf st fill fill_stat64;
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    st: *mut libc::statx,
) -> c_int {
    let native = match enter() {
        Some(_b) if !st.is_null() && flags & !STATX_FLAGS == 0 => {
            match meta::stat(dirfd, path, flags & libc::AT_SYMLINK_NOFOLLOW == 0) {
                Some(Ok(f)) => Some(Ok(f)),
                Some(Err(e)) => {
                    set_errno(e);
                    Some(Err(()))
                }
                None => None,
            }
        }
        _ => None,
    };
    let r = match native {
        Some(Ok(f)) => {
            meta::fill_statx(st, &f);
            0
        }
        Some(Err(())) => -1,
        None => real::statx(dirfd, path, flags, mask, st),
    };
    if r == 0 && !st.is_null() && state::any() {
        let s = &mut *st;
        let dev = libc::makedev(s.stx_dev_major, s.stx_dev_minor);
        let mut size = s.stx_size as i64;
        let (mut ms, mut mn) = (s.stx_mtime.tv_sec, s.stx_mtime.tv_nsec as i64);
        let (mut cs, mut cn) = (s.stx_ctime.tv_sec, s.stx_ctime.tv_nsec as i64);
        fix(
            dev,
            s.stx_ino,
            &mut size,
            (&mut ms, &mut mn),
            (&mut cs, &mut cn),
        );
        s.stx_size = size as u64;
        s.stx_mtime.tv_sec = ms;
        s.stx_mtime.tv_nsec = mn as u32;
        s.stx_ctime.tv_sec = cs;
        s.stx_ctime.tv_nsec = cn as u32;
    }
    r
}

// ---- changes of names: natively where meta.rs may, else through the mount ----

/// `$native` (an `Option<c_int>` from meta.rs) inside the library, else `$kernel`.
macro_rules! name_change {
    ($native:expr, $kernel:expr) => {{
        if let Some(_b) = enter() {
            if let Some(r) = $native {
                return r;
            }
        }
        $kernel
    }};
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_unlink(path: *const c_char) -> c_int {
    name_change!(meta::remove(CWD, path, false), real::unlink(path))
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_rmdir(path: *const c_char) -> c_int {
    name_change!(meta::remove(CWD, path, true), real::rmdir(path))
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_unlinkat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
) -> c_int {
    let native = || match flags {
        0 => meta::remove(dirfd, path, false),
        libc::AT_REMOVEDIR => meta::remove(dirfd, path, true),
        _ => None,
    };
    name_change!(native(), real::unlinkat(dirfd, path, flags))
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_mkdir(path: *const c_char, mode: libc::mode_t) -> c_int {
    name_change!(meta::mkdir(CWD, path, mode), real::mkdir(path, mode))
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_mkdirat(
    dirfd: c_int,
    path: *const c_char,
    mode: libc::mode_t,
) -> c_int {
    name_change!(
        meta::mkdir(dirfd, path, mode),
        real::mkdirat(dirfd, path, mode)
    )
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_rename(from: *const c_char, to: *const c_char) -> c_int {
    name_change!(meta::rename(CWD, from, CWD, to, 0), real::rename(from, to))
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_renameat(
    fromfd: c_int,
    from: *const c_char,
    tofd: c_int,
    to: *const c_char,
) -> c_int {
    name_change!(
        meta::rename(fromfd, from, tofd, to, 0),
        real::renameat(fromfd, from, tofd, to)
    )
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_renameat2(
    fromfd: c_int,
    from: *const c_char,
    tofd: c_int,
    to: *const c_char,
    flags: c_uint,
) -> c_int {
    name_change!(
        meta::rename(fromfd, from, tofd, to, flags),
        real::renameat2(fromfd, from, tofd, to, flags)
    )
}

// ---- calls the library does not serve: the descriptor goes to the mount first ----

fn release(fd: c_int, why: &str) {
    if let Some(_b) = enter() {
        state::release(fd, why);
    }
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: i64,
) -> *mut c_void {
    if fd >= 0 {
        release(fd, "mmap");
    }
    real::mmap(addr, len, prot, flags, fd, off)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_mmap64(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: i64,
) -> *mut c_void {
    if fd >= 0 {
        release(fd, "mmap");
    }
    real::mmap64(addr, len, prot, flags, fd, off)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_fdopen(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    release(fd, "fdopen (stdio reads and writes it directly)");
    real::fdopen(fd, mode)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_sendfile(
    out: c_int,
    inp: c_int,
    off: *mut i64,
    n: usize,
) -> isize {
    release(out, "sendfile");
    release(inp, "sendfile");
    real::sendfile(out, inp, off, n)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_sendfile64(
    out: c_int,
    inp: c_int,
    off: *mut i64,
    n: usize,
) -> isize {
    release(out, "sendfile");
    release(inp, "sendfile");
    real::sendfile64(out, inp, off, n)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_splice(
    inp: c_int,
    off_in: *mut i64,
    out: c_int,
    off_out: *mut i64,
    n: usize,
    flags: c_uint,
) -> isize {
    release(inp, "splice");
    release(out, "splice");
    real::splice(inp, off_in, out, off_out, n, flags)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_copy_file_range(
    inp: c_int,
    off_in: *mut i64,
    out: c_int,
    off_out: *mut i64,
    n: usize,
    flags: c_uint,
) -> isize {
    release(inp, "copy_file_range");
    release(out, "copy_file_range");
    real::copy_file_range(inp, off_in, out, off_out, n, flags)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_fallocate(fd: c_int, mode: c_int, off: i64, len: i64) -> c_int {
    release(fd, "fallocate");
    real::fallocate(fd, mode, off, len)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_fallocate64(
    fd: c_int,
    mode: c_int,
    off: i64,
    len: i64,
) -> c_int {
    release(fd, "fallocate");
    real::fallocate64(fd, mode, off, len)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_posix_fallocate(fd: c_int, off: i64, len: i64) -> c_int {
    release(fd, "posix_fallocate");
    real::posix_fallocate(fd, off, len)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_posix_fallocate64(fd: c_int, off: i64, len: i64) -> c_int {
    release(fd, "posix_fallocate");
    real::posix_fallocate64(fd, off, len)
}

// ---- process boundaries: nothing stays behind ----

fn flush_all() {
    if let Some(_b) = enter() {
        state::flush_all();
    }
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    flush_all();
    real::execve(path, argv, envp)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_execv(
    path: *const c_char,
    argv: *const *const c_char,
) -> c_int {
    flush_all();
    real::execv(path, argv)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_execvp(
    file: *const c_char,
    argv: *const *const c_char,
) -> c_int {
    flush_all();
    real::execvp(file, argv)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    flush_all();
    real::execvpe(file, argv, envp)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    flush_all();
    real::fexecve(fd, argv, envp)
}

/// `system` and `popen` start their shell with the C library's own spawn, past the
/// `posix_spawn` hook: what is behind goes out first here, so that the command sees it.
#[no_mangle]
pub unsafe extern "C" fn sfs_engine_system(command: *const c_char) -> c_int {
    flush_all();
    real::system(command)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_popen(
    command: *const c_char,
    mode: *const c_char,
) -> *mut libc::FILE {
    flush_all();
    real::popen(command, mode)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_posix_spawn(
    pid: *mut libc::pid_t,
    path: *const c_char,
    fa: *const c_void,
    attr: *const c_void,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    flush_all();
    real::posix_spawn(pid, path, fa, attr, argv, envp)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine_posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const c_char,
    fa: *const c_void,
    attr: *const c_void,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    flush_all();
    real::posix_spawnp(pid, file, fa, attr, argv, envp)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine__exit(code: c_int) -> ! {
    flush_all();
    real::exit_now(code)
}

#[no_mangle]
pub unsafe extern "C" fn sfs_engine__Exit(code: c_int) -> ! {
    flush_all();
    real::exit_now(code)
}

extern "C" fn before_fork() {
    flush_all();
}

extern "C" fn in_child() {
    state::after_fork_in_child();
    crate::meta::after_fork_in_child();
}

extern "C" fn at_exit() {
    if let Some(_b) = enter() {
        state::at_exit();
    }
}

extern "C" fn init() {
    stripefs_rpc::fdplace::set(crate::ownfds::place);
    // SAFETY: registering handlers with no preconditions.
    unsafe {
        libc::pthread_atfork(Some(before_fork), None, Some(in_child));
        libc::atexit(at_exit);
    }
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;
