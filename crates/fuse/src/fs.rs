//! The `fuser::Filesystem` implementation: each kernel request is translated into client
//! calls on a worker thread, which replies.

use crate::behind::Stream;
use crate::cache::{CacheStamps, DirAttrs, Stamp};
use crate::cred::CredCache;
use crate::dir::{DirHandle, Fetch};
use crate::errno::{errno, errno_ino, file_attr, time_ns};
use crate::pool::Pool;
use crate::setid::{kill_setid, SetIdFiles, FUSE_WRITE_KILL_SUIDGID};
use crate::{ATTR_TTL, ENTRY_TTL, MAX_BACKGROUND, MAX_IO_BYTES, MAX_QUEUED_REQUESTS, WORKERS};
use fuser::consts::{
    FOPEN_DIRECT_IO, FOPEN_KEEP_CACHE, FUSE_ASYNC_DIO, FUSE_ATOMIC_O_TRUNC, FUSE_CACHE_SYMLINKS,
    FUSE_DO_READDIRPLUS, FUSE_PARALLEL_DIROPS, FUSE_READDIRPLUS_AUTO, FUSE_WRITEBACK_CACHE,
};
use fuser::{
    KernelConfig, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request,
    TimeOrNow,
};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};
use stripefs_client::{
    Attr, Client, ErrorCode, File, FileType, InodeId, OpenOptions, SetAttrs, SetTime, WireError,
};

/// Size of the unit `statfs` counts blocks in.
const STATFS_FRSIZE: u32 = 4096;
/// Longest name, as the wire protocol allows.
const NAME_MAX: u32 = 255;
/// Inodes `statfs` reports as total: the metadata store has no fixed table, so the
/// total is this or twice the inodes in use, whichever is more, and the rest are free.
const STATFS_FILES: u64 = 1 << 32;

struct FileHandle {
    file: File,
    /// Opened with O_APPEND: every write goes to the current end of file.
    append: bool,
    /// The handle's reads, for drop-behind.
    stream: Mutex<Stream>,
}

impl FileHandle {
    fn new(file: File, append: bool) -> FileHandle {
        FileHandle {
            file,
            append,
            stream: Mutex::new(Stream::default()),
        }
    }
}

#[derive(Clone)]
enum Handle {
    File(Arc<FileHandle>),
    Dir(Arc<DirHandle>),
}

/// State the worker threads share.
pub struct Shared {
    client: Client,
    creds: CredCache,
    handles: Mutex<HashMap<u64, Handle>>,
    next_fh: AtomicU64,
    notifier: OnceLock<fuser::Notifier>,
    /// Ranges of cached pages `(ino, from, to)` for the drop-behind thread to drop.
    behind: OnceLock<Mutex<mpsc::Sender<(u64, u64, u64)>>>,
    mountpoint: std::path::PathBuf,
    readahead_set: std::sync::Once,
    /// The kernel keeps direct writes coherent with cached and mapped pages
    /// (FUSE_DIRECT_IO_ALLOW_MMAP, Linux 6.6 and later): write-only handles then bypass
    /// the page cache.
    direct_writes: AtomicBool,
    /// The kernel may ask for READDIRPLUS: listings are fetched with attributes.
    readdirplus: AtomicBool,
    /// The kernel's writeback cache is on (asked for with `--writeback-cache` and granted
    /// at INIT): writes come from the kernel's page cache at offsets it chose, also for
    /// appending handles, and it may read through any handle to fill a page.
    writeback: AtomicBool,
    /// `--writeback-cache` was asked for.
    writeback_wanted: bool,
    /// The change stamp of each file whose pages the kernel may hold.
    stamps: CacheStamps,
    /// Directory attributes, for the kernel's permission checks (see [`DirAttrs`]).
    dirs: DirAttrs,
    setid: SetIdFiles,
    /// When streaming reads drop the kernel's pages behind them.
    drop_behind: crate::behind::Policy,
}

impl Shared {
    /// Keeps the session's notifier and starts the thread that drops pages behind
    /// streaming reads. That thread alone waits for the kernel to drop them (the kernel
    /// may wait for a page's read in progress, which a worker must answer), and it ends
    /// when the file system does.
    pub fn set_notifier(&self, n: fuser::Notifier) {
        let (tx, rx) = mpsc::channel::<(u64, u64, u64)>();
        let drop_n = n.clone();
        let started = std::thread::Builder::new()
            .name("fuse-drop-behind".into())
            .spawn(move || {
                for (ino, from, to) in rx {
                    // Fails only if the kernel no longer knows the inode.
                    let _ = drop_n.inval_inode(ino, from as i64, (to - from) as i64);
                }
            });
        if started.is_ok() {
            let _ = self.behind.set(Mutex::new(tx));
        }
        let _ = self.notifier.set(n);
    }

    /// Notes a read of `[off, end)` through handle `h` of `ino`; drops the kernel's pages
    /// far behind a stream.
    fn read_done(&self, h: &FileHandle, ino: u64, off: u64, end: u64) {
        // Appending handles bypass the page cache: nothing to drop.
        if h.append {
            return;
        }
        let range =
            h.stream
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .note(&self.drop_behind, off, end);
        if let (Some((from, to)), Some(tx)) = (range, self.behind.get()) {
            let _ = tx
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .send((ino, from, to));
        }
    }

    /// The metadata server has the times of every write to `ino` before now. Its stamp
    /// moved: the next open drops the cached pages (they are right, but this mount
    /// cannot tell its own change from another's).
    fn writes_recorded(&self, ino: u64) {
        self.stamps.forget(ino);
    }

    /// Attributes the metadata server just gave: kept for directories (`DirAttrs`) and
    /// for files with set-ID bits (`SetIdFiles`).
    pub(crate) fn seen(&self, a: &Attr) {
        self.dirs.store(a);
        self.setid.note(a);
    }

    /// Notes an entry added to `parent` by this mount (see [`DirAttrs::entry_added`]).
    fn added(&self, parent: u64, r: &Result<Attr, WireError>) {
        if let Ok(a) = r {
            self.dirs.entry_added(parent, a);
            self.seen(a);
        }
    }

    /// Notes an entry removed from `parent`, with the directory as the server left it.
    fn removed(&self, parent: u64, r: &Result<Option<Attr>, WireError>) {
        match r {
            Ok(Some(a)) => self.dirs.store(a),
            Ok(None) => self.dirs.forget(parent),
            Err(_) => {}
        }
    }

    /// Write-only handles bypass the page cache (not with the writeback cache, whose
    /// point is to gather writes there).
    fn direct_writes(&self) -> bool {
        self.direct_writes.load(Ordering::Relaxed) && !self.writeback()
    }

    fn writeback(&self) -> bool {
        self.writeback.load(Ordering::Relaxed)
    }

    /// Opens `ino` (or creates `name` in `parent`) for open(2) `flags`. With the
    /// writeback cache, O_APPEND is the kernel's business (it sends each write at the end
    /// it knows), and a write-only open is made read-write where the caller may read, as
    /// the kernel may read a page through it before a partial write; where the caller
    /// may not, it stays write-only (such a partial-page write then fails with EBADF).
    fn open_file(
        &self,
        flags: i32,
        open: impl Fn(OpenOptions) -> Result<File, WireError>,
    ) -> Result<File, WireError> {
        if self.writeback() && flags & libc::O_ACCMODE == libc::O_WRONLY {
            let rw = (flags & !libc::O_ACCMODE) | libc::O_RDWR;
            match open(open_options(rw)) {
                Err(e) if e.code == ErrorCode::PermissionDenied => {}
                r => return r,
            }
        }
        open(open_options(flags))
    }

    fn insert(&self, h: Handle) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(fh, h);
        fh
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Handle>> {
        self.handles.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn file(&self, fh: u64) -> Result<Arc<FileHandle>, i32> {
        match self.lock().get(&fh) {
            Some(Handle::File(f)) => Ok(f.clone()),
            _ => Err(libc::EBADF),
        }
    }

    fn dir(&self, fh: u64) -> Result<Arc<DirHandle>, i32> {
        match self.lock().get(&fh) {
            Some(Handle::Dir(d)) => Ok(d.clone()),
            _ => Err(libc::EBADF),
        }
    }

    /// Whether the kernel's writeback cache is on (or asked for, before INIT).
    pub fn writeback_cache(&self) -> bool {
        self.writeback_wanted || self.writeback.load(Ordering::Relaxed)
    }

    /// Another program changed inode `ino` with the native client (and, with `name`,
    /// the entry `name` in directory `ino`): the kernel and this daemon forget what
    /// they cached of them.
    pub fn changed_elsewhere(&self, ino: u64, name: Option<&str>) {
        self.dirs.forget(ino);
        let Some(n) = self.notifier.get() else { return };
        // Each fails only if the kernel does not know the inode or the name: nothing to
        // drop then.
        if let Some(name) = name {
            let _ = n.inval_entry(ino, std::ffi::OsStr::new(name));
        }
        let _ = n.inval_inode(ino, -1, 0);
    }

    /// Close-to-open: drops the kernel's cached attributes of `ino`, so that the size
    /// and times another client left are fetched again.
    pub(crate) fn forget_attrs(&self, ino: u64) {
        if let Some(n) = self.notifier.get() {
            // Fails only if the kernel no longer knows the inode; nothing to drop then.
            let _ = n.inval_inode(ino, -1, 0);
        }
    }
}

pub struct StripeFs {
    shared: Arc<Shared>,
    pool: Pool,
}

impl StripeFs {
    pub fn new(client: Client, mountpoint: &Path, writeback_cache: bool) -> StripeFs {
        StripeFs {
            shared: Arc::new(Shared {
                client,
                creds: CredCache::default(),
                handles: Mutex::new(HashMap::new()),
                next_fh: AtomicU64::new(1),
                notifier: OnceLock::new(),
                behind: OnceLock::new(),
                mountpoint: mountpoint.to_path_buf(),
                readahead_set: std::sync::Once::new(),
                direct_writes: AtomicBool::new(false),
                readdirplus: AtomicBool::new(false),
                writeback: AtomicBool::new(false),
                writeback_wanted: writeback_cache,
                stamps: CacheStamps::default(),
                dirs: DirAttrs::default(),
                setid: SetIdFiles::default(),
                drop_behind: crate::drop_behind_policy(crate::keep_head_bytes()),
            }),
            pool: Pool::new(WORKERS, MAX_QUEUED_REQUESTS),
        }
    }

    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// Runs `f` on a worker with a client carrying the caller's credentials.
    /// Runs `f` on this, the session's thread, when `here` (work that cannot block: it
    /// saves the hand-over to a worker and its wake-up), else on a worker.
    fn here_or_spawn(
        &self,
        req: &Request<'_>,
        here: bool,
        f: impl FnOnce(&Shared) + Send + 'static,
    ) {
        if here {
            f(&self.shared)
        } else {
            self.spawn(req, move |sh, _| f(sh))
        }
    }

    /// Handle `fh` has nothing to flush (a file only read, or created and closed):
    /// flushing or closing it neither waits nor needs a round trip.
    fn nothing_to_flush(&self, fh: u64) -> bool {
        self.shared.file(fh).is_ok_and(|h| h.file.flush_is_noop())
    }

    fn spawn(&self, req: &Request<'_>, f: impl FnOnce(&Shared, Client) + Send + 'static) {
        let cred = self.shared.creds.cred(req.uid(), req.gid(), req.pid());
        let shared = self.shared.clone();
        self.pool.submit(move || {
            let client = shared.client.clone().with_cred(cred);
            f(&shared, client)
        });
    }
}

/// Answers a getxattr or listxattr: the size alone when the caller asks for it (`size`
/// 0), ERANGE when its buffer is too small, else the bytes.
fn xattr_reply(reply: ReplyXattr, bytes: &[u8], size: u32) {
    if size == 0 {
        reply.size(bytes.len() as u32);
    } else if bytes.len() > size as usize {
        reply.error(libc::ERANGE);
    } else {
        reply.data(bytes);
    }
}

fn name_str(name: &OsStr) -> Result<&str, i32> {
    name.to_str().ok_or(libc::EINVAL)
}

/// The name as an owned `String` for a worker, or answers EINVAL and returns.
/// The value of an errno result, or answers the errno and returns.
macro_rules! or_reply {
    ($r:expr, $reply:expr) => {
        match $r {
            Ok(v) => v,
            Err(e) => return $reply.error(e),
        }
    };
}

macro_rules! owned_name {
    ($name:expr, $reply:expr) => {
        match name_str($name) {
            Ok(n) => n.to_string(),
            Err(e) => return $reply.error(e),
        }
    };
}

/// The kernel's attributes of `a`, with `st_blocks` from the data servers: a regular
/// file of size above 0 costs one parallel round trip to its servers, nothing else
/// does. If they cannot answer, the size stands in, so that `stat` and `ls` still work
/// while a data server is down.
fn kernel_attr(c: &Client, a: &Attr) -> fuser::FileAttr {
    let allocated = c.allocated_bytes(a).unwrap_or_else(|e| {
        tracing::warn!("st_blocks of {}: {e}; reporting its size instead", a.ino);
        a.size
    });
    file_attr(a, allocated)
}

fn reply_entry(c: &Client, reply: ReplyEntry, r: Result<Attr, WireError>) {
    match r {
        Ok(a) => reply.entry(&ENTRY_TTL, &kernel_attr(c, &a), 0),
        Err(e) => reply.error(errno(&e)),
    }
}

/// What a fallocate(2) mode asks for; other modes are EOPNOTSUPP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fallocate {
    Allocate { keep_size: bool },
    PunchHole,
    ZeroRange { keep_size: bool },
}

impl Fallocate {
    fn of_mode(mode: i32) -> Option<Fallocate> {
        use libc::{FALLOC_FL_KEEP_SIZE as KEEP, FALLOC_FL_PUNCH_HOLE as PUNCH};
        const ZERO: i32 = libc::FALLOC_FL_ZERO_RANGE;
        match mode {
            0 => Some(Fallocate::Allocate { keep_size: false }),
            KEEP => Some(Fallocate::Allocate { keep_size: true }),
            m if m == PUNCH | KEEP => Some(Fallocate::PunchHole),
            ZERO => Some(Fallocate::ZeroRange { keep_size: false }),
            m if m == ZERO | KEEP => Some(Fallocate::ZeroRange { keep_size: true }),
            _ => None,
        }
    }

    fn run(self, f: &File, offset: u64, len: u64) -> Result<(), WireError> {
        match self {
            Fallocate::Allocate { keep_size } => f.allocate(offset, len, keep_size),
            Fallocate::PunchHole => f.punch_hole(offset, len),
            Fallocate::ZeroRange { keep_size } => f.zero_range(offset, len, keep_size),
        }
    }
}

fn reply_empty(reply: ReplyEmpty, r: Result<(), WireError>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(&e)),
    }
}

fn set_time(t: Option<TimeOrNow>) -> Option<SetTime> {
    t.map(|t| match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(s) => SetTime::AtNs(time_ns(s)),
    })
}

/// Client open options for open(2) flags.
fn open_options(flags: i32) -> OpenOptions {
    let acc = flags & libc::O_ACCMODE;
    OpenOptions::new()
        .read(acc == libc::O_RDONLY || acc == libc::O_RDWR)
        .write(acc == libc::O_WRONLY || acc == libc::O_RDWR)
        .truncate(flags & libc::O_TRUNC != 0 && acc != libc::O_RDONLY)
}

/// open(O_RDONLY | O_TRUNC): Linux truncates when the caller may write (the kernel
/// has checked that); the handle stays read-only. Returns whether it truncated.
fn truncate_read_only(c: &Client, flags: i32, f: &File) -> Result<bool, WireError> {
    let read_only_trunc = flags & libc::O_ACCMODE == libc::O_RDONLY && flags & libc::O_TRUNC != 0;
    if read_only_trunc && f.size() > 0 {
        let zero = SetAttrs {
            size: Some(0),
            ..SetAttrs::default()
        };
        c.setattr_ino(f.ino(), zero)?;
        return Ok(true);
    }
    Ok(false)
}

thread_local! {
    /// A worker's buffer for read replies.
    static READ_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Kernel capability (FUSE 7.39, Linux 6.6): files opened with `FOPEN_DIRECT_IO` may
/// still be mapped shared, and a direct write writes back and drops the cached pages it
/// overlaps.
const FUSE_DIRECT_IO_ALLOW_MMAP: u64 = 1 << 36;
/// Kernel capability (FUSE 7.33, Linux 5.11): the file system clears set-ID bits on
/// write, truncate and chown, and the kernel marks inodes without them or a
/// `security.capability` attribute as not needing the check on each write (SB_NOSEC).
const FUSE_HANDLE_KILLPRIV_V2: u64 = 1 << 28;

/// Attributes for the `.` and `..` entries of a READDIRPLUS answer, which the kernel
/// does not link (it takes only their inode number and type).
fn dot_attr(ino: u64, kind: fuser::FileType) -> fuser::FileAttr {
    fuser::FileAttr {
        ino,
        size: 0,
        blocks: 0,
        atime: SystemTime::UNIX_EPOCH,
        mtime: SystemTime::UNIX_EPOCH,
        ctime: SystemTime::UNIX_EPOCH,
        crtime: SystemTime::UNIX_EPOCH,
        kind,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: crate::BLKSIZE_BYTES,
        flags: 0,
    }
}

/// Reply flags for a new file handle.
///
/// Appending handles bypass the page cache: their writes go to the end of file as the
/// cluster knows it, not where the kernel's cached size says, so the kernel must not
/// cache pages at its guessed offsets.
///
/// Write-only handles bypass it too when the kernel keeps direct writes coherent with
/// cached and mapped pages (`direct_writes`, FUSE_DIRECT_IO_ALLOW_MMAP): each write then
/// comes to the daemon as one request of up to [`MAX_IO_BYTES`] straight from the
/// writer's buffer, with no copy into page-cache pages that nobody reads (that copy cost
/// more CPU than the rest of the mount's work on a 2 GiB `dd`, measured with `perf`).
/// Readable handles keep the page cache: small reads (stdio, 4-8 KiB buffers) would
/// otherwise each be a round trip to the daemon, eight times slower (measured).
///
/// Write-only direct handles also allow parallel direct writes
/// (`FOPEN_PARALLEL_DIRECT_WRITES`, Linux 6.2): the kernel then holds the file's lock
/// shared, not exclusive, across a write that stays inside the file's size, so writers
/// of one shared file (ranks writing interleaved records) are not serialized round trip
/// by round trip; the client library orders writes that overlap. Appends, and writes
/// past the end, keep the exclusive lock.
///
/// Read-only handles are not flushed at close (`FOPEN_NOFLUSH`, Linux 5.16): their flush
/// has nothing to do (`File::flush` returns at once for a handle that cannot write), and
/// the kernel would still wait a round trip for it at every close of every descriptor.
/// Not with the writeback cache, where the kernel ignores the flag: a read-only
/// descriptor's close there also writes back the file's dirty pages.
fn open_flags(append: bool, flags: i32, direct_writes: bool, writeback: bool) -> u32 {
    let acc = flags & libc::O_ACCMODE;
    if append {
        FOPEN_DIRECT_IO
    } else if direct_writes && acc == libc::O_WRONLY {
        FOPEN_DIRECT_IO | FOPEN_PARALLEL_DIRECT_WRITES
    } else if acc == libc::O_RDONLY && !writeback {
        FOPEN_NOFLUSH
    } else {
        0
    }
}

/// Open reply flag (FUSE 7.35): the kernel sends no FLUSH when the handle's descriptors
/// are closed.
const FOPEN_NOFLUSH: u32 = 1 << 5;

/// Open reply flag (FUSE 7.38): parallel direct writes to one file.
const FOPEN_PARALLEL_DIRECT_WRITES: u32 = 1 << 6;

impl fuser::Filesystem for StripeFs {
    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), i32> {
        // Each setting is best effort: an older kernel keeps its default.
        let _ = config.set_max_write(MAX_IO_BYTES);
        let _ = config.set_max_readahead(MAX_IO_BYTES);
        let _ = config.set_max_background(MAX_BACKGROUND);
        let _ = config.set_congestion_threshold(MAX_BACKGROUND * 3 / 4);
        for cap in [
            FUSE_ATOMIC_O_TRUNC,
            FUSE_PARALLEL_DIROPS,
            FUSE_CACHE_SYMLINKS,
            FUSE_ASYNC_DIO,
        ] {
            let _ = config.add_capabilities(cap);
        }
        // The kernel then stops asking for `security.capability` before every write
        // through the page cache (a GETXATTR round trip each, measured: a 4 KiB write
        // through a read-write descriptor cost three times one through a write-only
        // one); the daemon clears set-ID bits on write itself (`kill_setid`), and the
        // metadata server on truncate and chown as it always did.
        let _ = config.add_capabilities(FUSE_HANDLE_KILLPRIV_V2);
        // Listings carry each entry's attributes (one round trip per page of entries,
        // not a LOOKUP per entry for `ls -l`, `find` or `du`); the kernel asks for them
        // at the start of a listing and where lookups in the directory followed one.
        let plus = config.add_capabilities(FUSE_DO_READDIRPLUS).is_ok();
        let _ = config.add_capabilities(FUSE_READDIRPLUS_AUTO);
        self.shared.readdirplus.store(plus, Ordering::Relaxed);
        let direct = config.add_capabilities(FUSE_DIRECT_IO_ALLOW_MMAP).is_ok();
        self.shared.direct_writes.store(direct, Ordering::Relaxed);
        if self.shared.writeback_wanted {
            let granted = config.add_capabilities(FUSE_WRITEBACK_CACHE).is_ok();
            if !granted {
                tracing::warn!(
                    "--writeback-cache: this kernel does not offer it; writes go through"
                );
            } else {
                tracing::info!(
                    "writeback cache on: small writes gather in the kernel's pages, which are \
                     written back whole; files other clients write meanwhile may lose their bytes"
                );
            }
            self.shared.writeback.store(granted, Ordering::Relaxed);
        }
        Ok(())
    }

    fn destroy(&mut self) {
        // Handles still open at unmount are closed (and their writes flushed) on drop.
        self.shared.lock().clear();
    }

    fn lookup(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let name = owned_name!(name, reply);
        self.spawn(req, move |sh, c| {
            let r = c.lookup(InodeId(parent), &name);
            if let Ok(a) = &r {
                sh.seen(a);
            }
            reply_entry(&c, reply, r)
        });
    }

    fn getattr(&mut self, req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        // A directory's attributes fetched less than ATTR_TTL ago (the kernel asks after
        // each entry change, for its permission check): answered here, no round trip.
        if let Some(a) = self.shared.dirs.fresh(ino) {
            return reply.attr(&ATTR_TTL, &file_attr(&a, 0));
        }
        self.spawn(req, move |sh, c| match c.getattr(InodeId(ino)) {
            Ok(a) => {
                sh.seen(&a);
                reply.attr(&ATTR_TTL, &kernel_attr(&c, &a))
            }
            Err(e) => reply.error(errno_ino(&e)),
        });
    }

    fn setattr(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        let attrs = SetAttrs {
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: set_time(atime),
            mtime: set_time(mtime),
            via_write_handle: false,
        };
        self.spawn(req, move |sh, c| {
            match setattr(sh, &c, InodeId(ino), attrs, fh) {
                Ok(a) => {
                    sh.seen(&a);
                    reply.attr(&ATTR_TTL, &kernel_attr(&c, &a))
                }
                Err(e) => reply.error(errno_ino(&e)),
            }
        });
    }

    fn readlink(&mut self, req: &Request<'_>, ino: u64, reply: ReplyData) {
        self.spawn(req, move |_, c| match c.readlink_ino(InodeId(ino)) {
            Ok(t) => reply.data(t.as_bytes()),
            Err(e) => reply.error(errno_ino(&e)),
        });
    }

    fn setxattr(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        let name = owned_name!(name, reply);
        let mode = match flags & (libc::XATTR_CREATE | libc::XATTR_REPLACE) {
            0 => stripefs_client::XATTR_SET_ANY,
            libc::XATTR_CREATE => stripefs_client::XATTR_SET_CREATE,
            libc::XATTR_REPLACE => stripefs_client::XATTR_SET_REPLACE,
            _ => return reply.error(libc::EINVAL),
        };
        // `position` is macOS's resource-fork offset; Linux always sends 0.
        if position != 0 {
            return reply.error(libc::EINVAL);
        }
        let value = value.to_vec();
        self.spawn(req, move |sh, c| {
            match c.set_xattr_ino(InodeId(ino), &name, &value, mode) {
                Ok(a) => {
                    // The ctime moved: a directory's cached attributes too.
                    sh.seen(&a);
                    reply.ok()
                }
                Err(e) => reply.error(errno_ino(&e)),
            }
        });
    }

    fn getxattr(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        name: &OsStr,
        size: u32,
        reply: ReplyXattr,
    ) {
        let name = owned_name!(name, reply);
        self.spawn(req, move |_, c| {
            match c.get_xattr_ino(InodeId(ino), &name) {
                Ok(value) => xattr_reply(reply, &value, size),
                Err(e) => reply.error(errno_ino(&e)),
            }
        });
    }

    fn listxattr(&mut self, req: &Request<'_>, ino: u64, size: u32, reply: ReplyXattr) {
        self.spawn(req, move |_, c| match c.list_xattr_ino(InodeId(ino)) {
            Ok(names) => {
                let mut all = Vec::new();
                for n in names {
                    all.extend_from_slice(n.as_bytes());
                    all.push(0);
                }
                xattr_reply(reply, &all, size)
            }
            Err(e) => reply.error(errno_ino(&e)),
        });
    }

    fn removexattr(&mut self, req: &Request<'_>, ino: u64, name: &OsStr, reply: ReplyEmpty) {
        let name = owned_name!(name, reply);
        self.spawn(req, move |sh, c| {
            match c.remove_xattr_ino(InodeId(ino), &name) {
                Ok(a) => {
                    sh.seen(&a);
                    reply.ok()
                }
                Err(e) => reply.error(errno_ino(&e)),
            }
        });
    }

    fn mknod(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let name = owned_name!(name, reply);
        let perm = mode & 0o7777 & !umask;
        let (ftype, rdev) = match mode & libc::S_IFMT {
            libc::S_IFREG | 0 => (None, 0),
            libc::S_IFIFO => (Some(FileType::Fifo), 0),
            libc::S_IFSOCK => (Some(FileType::Socket), 0),
            libc::S_IFBLK => (Some(FileType::BlockDev), rdev),
            libc::S_IFCHR => (Some(FileType::CharDev), rdev),
            _ => return reply.error(libc::EINVAL),
        };
        self.spawn(req, move |sh, c| {
            let p = InodeId(parent);
            let r = match ftype {
                Some(t) => c.mknod_at(p, &name, perm, t, rdev),
                None => c
                    .create_at(p, &name, &OpenOptions::create_new(perm))
                    .and_then(|f| {
                        let a = f.cached_attr();
                        f.close().map(|()| a)
                    }),
            };
            sh.added(parent, &r);
            reply_entry(&c, reply, r)
        });
    }

    fn mkdir(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let name = owned_name!(name, reply);
        let perm = mode & 0o7777 & !umask;
        self.spawn(req, move |sh, c| {
            let r = c.mkdir_at(InodeId(parent), &name, perm);
            sh.added(parent, &r);
            reply_entry(&c, reply, r)
        });
    }

    fn unlink(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let name = owned_name!(name, reply);
        self.spawn(req, move |sh, c| {
            let r = c.unlink_at(InodeId(parent), &name);
            sh.removed(parent, &r);
            reply_empty(reply, r.map(|_| ()))
        });
    }

    fn rmdir(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let name = owned_name!(name, reply);
        self.spawn(req, move |sh, c| {
            let r = c.rmdir_at(InodeId(parent), &name);
            sh.removed(parent, &r);
            reply_empty(reply, r.map(|_| ()))
        });
    }

    fn symlink(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let (name, target) = match (name_str(link_name), target.to_str()) {
            (Ok(n), Some(t)) => (n.to_string(), t.to_string()),
            _ => return reply.error(libc::EINVAL),
        };
        self.spawn(req, move |sh, c| {
            let r = c.symlink_at(InodeId(parent), &name, &target);
            sh.added(parent, &r);
            reply_entry(&c, reply, r)
        });
    }

    fn rename(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        reply: ReplyEmpty,
    ) {
        let (name, newname) = match (name_str(name), name_str(newname)) {
            (Ok(a), Ok(b)) => (a.to_string(), b.to_string()),
            _ => return reply.error(libc::EINVAL),
        };
        let exchange = match flags {
            0 | libc::RENAME_NOREPLACE => false,
            libc::RENAME_EXCHANGE => true,
            // RENAME_WHITEOUT (overlay file systems' own) has no metadata operation.
            _ => return reply.error(libc::EINVAL),
        };
        let noreplace = flags & libc::RENAME_NOREPLACE != 0;
        self.spawn(req, move |sh, c| {
            let (p, np) = (InodeId(parent), InodeId(newparent));
            let r = if exchange {
                c.exchange_at(p, &name, np, &newname)
            } else {
                c.rename_at(p, &name, np, &newname, noreplace)
            };
            // Both directories and a moved directory itself changed: rare enough to
            // forget every cached directory.
            sh.dirs.lock().clear();
            reply_empty(reply, r)
        });
    }

    fn link(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let name = owned_name!(newname, reply);
        self.spawn(req, move |sh, c| {
            let r = c.link_at(InodeId(ino), InodeId(newparent), &name);
            sh.added(newparent, &r);
            reply_entry(&c, reply, r)
        });
    }

    fn open(&mut self, req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        let append = flags & libc::O_APPEND != 0 && !self.shared.writeback();
        self.spawn(req, move |sh, c| {
            // Only after INIT, which would clamp it back, and never while mounting, when
            // looking at the mount would wait for this very loop.
            sh.readahead_set
                .call_once(|| crate::readahead::raise(&sh.mountpoint));
            let opened = sh
                .open_file(flags, |o| c.open_ino(InodeId(ino), &o))
                .and_then(|f| Ok((truncate_read_only(&c, flags, &f)?, f)));
            match opened {
                Ok((truncated, file)) => {
                    sh.forget_attrs(ino);
                    // Close-to-open, without rereading an unchanged file: the kernel
                    // keeps its pages only if the stamp is the one they were read at.
                    let attr = file.cached_attr();
                    sh.setid.note(&attr);
                    let stamp = Stamp::of(&attr);
                    let keep =
                        !truncated && flags & libc::O_TRUNC == 0 && sh.stamps.keep(ino, stamp);
                    if truncated {
                        sh.stamps.forget(ino);
                    }
                    let fh = sh.insert(Handle::File(Arc::new(FileHandle::new(file, append))));
                    let keep_flag = if keep { FOPEN_KEEP_CACHE } else { 0 };
                    reply.opened(
                        fh,
                        open_flags(append, flags, sh.direct_writes(), sh.writeback()) | keep_flag,
                    );
                }
                Err(e) => reply.error(errno_ino(&e)),
            }
        });
    }

    fn read(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let Ok(offset) = u64::try_from(offset) else {
            return reply.error(libc::EINVAL);
        };
        self.spawn(req, move |sh, _| {
            let h = or_reply!(sh.file(fh), reply);
            // The reply is written from where the client received the bytes (the kernel
            // copies them into its page cache anyway); a read that spans several pieces
            // is gathered in this worker's buffer, reused: no zeroing or page faults.
            let want = size.min(MAX_IO_BYTES * 2) as usize;
            let mut reply = Some(reply);
            let read = h.file.read_with(offset, want, |parts| {
                let reply = reply.take().expect("replied once");
                match parts {
                    [] => reply.data(&[]),
                    [one] => reply.data(one),
                    _ => READ_BUF.with_borrow_mut(|buf| {
                        buf.clear();
                        for p in parts {
                            buf.extend_from_slice(p);
                        }
                        reply.data(buf);
                    }),
                }
                parts.iter().map(|p| p.len() as u64).sum::<u64>()
            });
            match read {
                Ok(n) => sh.read_done(&h, ino, offset, offset + n),
                Err(e) => {
                    if let Some(reply) = reply {
                        reply.error(errno(&e));
                    }
                }
            }
        });
    }

    fn write(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        data: &[u8],
        write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        let Ok(offset) = u64::try_from(offset) else {
            return reply.error(libc::EINVAL);
        };
        // A write that fits in the handle's write-behind window only copies the bytes
        // into it: done here, it saves a copy and a hand-over to a worker. One that would
        // wait for earlier writes goes to a worker, so that other requests keep flowing,
        // as does one that must clear set-ID bits first.
        let mut kill = None;
        if let Ok(h) = self.shared.file(fh) {
            if self.shared.setid.must_kill(ino, req.gid(), write_flags) {
                kill = Some(self.shared.creds.cred(req.uid(), req.gid(), req.pid()));
            } else if !h.append && h.file.write_would_not_wait(offset, data.len() as u64) {
                return match h.file.write_at(offset, data) {
                    Ok(()) => reply.written(data.len() as u32),
                    Err(e) => reply.error(errno(&e)),
                };
            }
        }
        // The request buffer is reused for the next request: the worker needs a copy.
        let data = data.to_vec();
        self.spawn(req, move |sh, c| {
            let h = or_reply!(sh.file(fh), reply);
            if let Some(cred) = kill {
                if let Err(e) = kill_setid(sh, &c, &cred, ino, fh) {
                    return reply.error(errno(&e));
                }
            }
            // The kernel serialises writes of an appending handle (direct I/O holds the
            // inode lock), so the end of file cannot move between the size and the write.
            let at = if h.append {
                offset.max(h.file.size())
            } else {
                offset
            };
            match h.file.write_at(at, &data) {
                Ok(()) => reply.written(data.len() as u32),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn flush(&mut self, req: &Request<'_>, ino: u64, fh: u64, _lock: u64, reply: ReplyEmpty) {
        let here = self.nothing_to_flush(fh);
        self.here_or_spawn(req, here, move |sh| match sh.file(fh) {
            Ok(h) => {
                let r = h.file.flush();
                if r.is_ok() && !here {
                    sh.writes_recorded(ino);
                }
                reply_empty(reply, r)
            }
            Err(e) => reply.error(e),
        });
    }

    fn release(
        &mut self,
        req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _flags: i32,
        _lock_owner: Option<u64>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // With nothing to flush, closing only queues a deferred Close.
        let here = self.nothing_to_flush(fh);
        self.here_or_spawn(req, here, move |sh| {
            let h = sh.lock().remove(&fh);
            match h {
                // The kernel ignores release errors; close-time errors were reported by
                // the flush before it.
                Some(Handle::File(h)) => match Arc::try_unwrap(h) {
                    Ok(h) => reply_empty(reply, h.file.close()),
                    Err(_) => reply.ok(),
                },
                _ => reply.ok(),
            }
        });
    }

    fn fsync(&mut self, req: &Request<'_>, _ino: u64, fh: u64, _data: bool, reply: ReplyEmpty) {
        self.spawn(req, move |sh, _| match sh.file(fh) {
            Ok(h) => reply_empty(reply, h.file.fsync()),
            Err(e) => reply.error(e),
        });
    }

    fn lseek(
        &mut self,
        req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        // With the writeback cache, written bytes may still be only in the kernel's
        // dirty pages (it does not write them back before an LSEEK), and the file's end
        // only in its inode: the servers' extents would report data as holes, and `cp`
        // or `tar -S` would copy zeros. ENOSYS makes the kernel answer every later
        // SEEK_DATA and SEEK_HOLE on this mount itself (the whole file is data), which
        // is always right (test `writeback_cache_mount` in crates/cli/tests/it/fuse_fsx.rs).
        if self.shared.writeback() {
            return reply.error(libc::ENOSYS);
        }
        // The kernel answers SEEK_SET, SEEK_CUR and SEEK_END itself.
        let hole = match whence {
            libc::SEEK_DATA => false,
            libc::SEEK_HOLE => true,
            _ => return reply.error(libc::EINVAL),
        };
        let Ok(offset) = u64::try_from(offset) else {
            return reply.error(libc::ENXIO);
        };
        self.spawn(req, move |sh, _| {
            let h = or_reply!(sh.file(fh), reply);
            let found = if hole {
                h.file.seek_hole(offset)
            } else {
                h.file.seek_data(offset)
            };
            match found {
                Ok(Some(at)) => reply.offset(at as i64),
                Ok(None) => reply.error(libc::ENXIO),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn fallocate(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        length: i64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let Some(op) = Fallocate::of_mode(mode) else {
            return reply.error(libc::EOPNOTSUPP);
        };
        let (Ok(offset), Ok(len)) = (u64::try_from(offset), u64::try_from(length)) else {
            return reply.error(libc::EINVAL);
        };
        // fallocate clears set-ID bits as a write does; its request carries no flag for
        // it, so anyone but root is taken to lack CAP_FSETID.
        let kill = (req.uid() != 0
            && self
                .shared
                .setid
                .must_kill(ino, req.gid(), FUSE_WRITE_KILL_SUIDGID))
        .then(|| self.shared.creds.cred(req.uid(), req.gid(), req.pid()));
        self.spawn(req, move |sh, c| {
            let h = or_reply!(sh.file(fh), reply);
            if let Some(cred) = kill {
                if let Err(e) = kill_setid(sh, &c, &cred, ino, fh) {
                    return reply.error(errno(&e));
                }
            }
            let r = op.run(&h.file, offset, len);
            // Size, times and st_blocks changed behind the kernel's cached attributes.
            sh.forget_attrs(ino);
            match r {
                Ok(()) => reply.ok(),
                // ENOSYS would make the kernel stop sending fallocate for good.
                Err(e) if e.code == ErrorCode::Unsupported => reply.error(libc::EOPNOTSUPP),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn opendir(&mut self, req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        // A directory whose attributes came from the metadata server less than ATTR_TTL
        // ago (as the kernel's own cache allows) needs no round trip to be opened; the
        // listing is fetched by the first READDIR either way.
        if self.shared.dirs.fresh(ino).is_some() {
            let fh = self
                .shared
                .insert(Handle::Dir(Arc::new(DirHandle::new(InodeId(ino)))));
            return reply.opened(fh, 0);
        }
        self.spawn(req, move |sh, c| match c.getattr(InodeId(ino)) {
            Ok(a) if a.ftype != FileType::Dir => reply.error(libc::ENOTDIR),
            Ok(a) => {
                sh.seen(&a);
                let fh = sh.insert(Handle::Dir(Arc::new(DirHandle::new(InodeId(ino)))));
                reply.opened(fh, 0);
            }
            Err(e) => reply.error(errno_ino(&e)),
        });
    }

    fn readdir(
        &mut self,
        req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        if self.shared.dir(fh).is_ok_and(|d| d.past_end(offset)) {
            return reply.ok();
        }
        self.spawn(req, move |sh, c| {
            let d = or_reply!(sh.dir(fh), reply);
            let fetch = if sh.readdirplus.load(Ordering::Relaxed) {
                // The same listing may serve READDIRPLUS calls of this handle later.
                Fetch::Plus {
                    who: &c,
                    fallback: &sh.client,
                }
            } else {
                Fetch::Names(&c)
            };
            let r = d.fill(fetch, offset, |(ino, next, kind, name, _)| {
                reply.add(ino, next, kind, name)
            });
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn readdirplus(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        mut reply: ReplyDirectoryPlus,
    ) {
        if self.shared.dir(fh).is_ok_and(|d| d.past_end(offset)) {
            return reply.ok();
        }
        self.spawn(req, move |sh, c| {
            let d = or_reply!(sh.dir(fh), reply);
            let fetch = Fetch::Plus {
                who: &c,
                fallback: &sh.client,
            };
            let mut failed = None;
            let r = d.fill(fetch, offset, |(e_ino, next, kind, name, attr)| {
                let looked_up;
                let attr = match attr {
                    Some(a) => a,
                    // `.` and `..`: the kernel links neither, only their type counts.
                    None if name == "." || name == ".." => {
                        let a = dot_attr(e_ino, kind);
                        return reply.add(e_ino, next, name, &Duration::ZERO, &a, 0);
                    }
                    // Fetched by a plain READDIR of this handle before the kernel's
                    // first READDIRPLUS: looked up now.
                    None => match c.lookup(InodeId(ino), name) {
                        Ok(a) => {
                            looked_up = a;
                            &looked_up
                        }
                        Err(e) => {
                            failed = Some(e);
                            return true;
                        }
                    },
                };
                sh.seen(attr);
                // The kernel caches these as a lookup's; st_blocks of a file on the data
                // servers would take a round trip to each, so such an entry is given
                // for no time (the next stat asks, exactly).
                let (fa, ttl) = match Client::allocated_known(attr) {
                    Some(bytes) => (file_attr(attr, bytes), ENTRY_TTL),
                    None => (file_attr(attr, attr.size), Duration::ZERO),
                };
                reply.add(e_ino, next, name, &ttl, &fa, 0)
            });
            match r.and_then(|()| failed.map_or(Ok(()), Err)) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn releasedir(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _flags: i32,
        reply: ReplyEmpty,
    ) {
        self.shared.lock().remove(&fh);
        reply.ok();
    }

    fn fsyncdir(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _d: bool, reply: ReplyEmpty) {
        // Metadata changes are durable before the metadata server acknowledges them.
        reply.ok();
    }

    fn statfs(&mut self, req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        self.spawn(req, move |_, c| match c.statfs() {
            Ok(s) => {
                let b = STATFS_FRSIZE as u64;
                let files = STATFS_FILES.max(s.inodes.saturating_mul(2));
                reply.statfs(
                    s.bytes_total / b,
                    s.bytes_free / b,
                    s.bytes_free / b,
                    files,
                    files - s.inodes,
                    crate::BLKSIZE_BYTES,
                    NAME_MAX,
                    STATFS_FRSIZE,
                )
            }
            Err(e) => reply.error(errno(&e)),
        });
    }

    fn access(&mut self, req: &Request<'_>, ino: u64, mask: i32, reply: ReplyEmpty) {
        self.spawn(req, move |_, c| {
            match c.access_ino(InodeId(ino), mask as u32) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno_ino(&e)),
            }
        });
    }

    fn create(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let name = owned_name!(name, reply);
        let append = flags & libc::O_APPEND != 0 && !self.shared.writeback();
        self.spawn(req, move |sh, c| {
            let created = sh.open_file(flags, |o| {
                let o = o
                    .create(true)
                    .exclusive(flags & libc::O_EXCL != 0)
                    .mode(mode & 0o7777 & !umask);
                c.create_at(InodeId(parent), &name, &o)
            });
            match created {
                Ok(file) => {
                    let created = file.cached_attr();
                    sh.setid.note(&created);
                    sh.dirs.entry_added(parent, &created);
                    let attr = kernel_attr(&c, &created);
                    let fh = sh.insert(Handle::File(Arc::new(FileHandle::new(file, append))));
                    reply.created(
                        &ENTRY_TTL,
                        &attr,
                        0,
                        fh,
                        open_flags(append, flags, sh.direct_writes(), sh.writeback()),
                    );
                }
                Err(e) => reply.error(errno(&e)),
            }
        });
    }
}

/// Changes attributes. Through a handle opened for writing (ftruncate, and the kernel
/// clearing set-ID bits on a write), the change is judged by that handle's access; a size
/// change through a handle goes through the handle, so that it is ordered after the
/// handle's queued writes.
pub(crate) fn setattr(
    sh: &Shared,
    c: &Client,
    ino: InodeId,
    mut attrs: SetAttrs,
    fh: Option<u64>,
) -> Result<Attr, WireError> {
    let handle = fh.and_then(|fh| sh.file(fh).ok());
    if let Some(h) = &handle {
        attrs.via_write_handle = h.file.is_writable();
    }
    if let (Some(size), Some(h)) = (attrs.size, &handle) {
        if h.file.is_writable() {
            h.file.set_len(size)?;
            attrs.size = None;
            if attrs.changes_nothing() {
                return c.getattr(ino);
            }
        }
    }
    c.setattr_ino(ino, attrs)
}
