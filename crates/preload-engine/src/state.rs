//! What the library keeps: the mount table, the process's clients, the descriptors it
//! serves, and its counters.

use crate::real;
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::c_int;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};
use stripefs_client::{Client, ClusterConfig, Cred, OpenOptions, WireError};

thread_local! {
    static BUSY: Cell<bool> = const { Cell::new(false) };
    static ERRNO: Cell<Option<i32>> = const { Cell::new(None) };
}

/// Set while this thread runs the library's own code: the calls that code makes (the
/// client's sockets, reading the mount table) go straight to the C library. When it
/// ends, errno is what the call served says (`set_errno`), else what it was before:
/// the client's own calls do not leak their errno into a call that succeeded.
pub struct Busy(i32);

impl Drop for Busy {
    fn drop(&mut self) {
        let e = ERRNO
            .try_with(|e| e.take())
            .ok()
            .flatten()
            .unwrap_or(self.0);
        // SAFETY: the calling thread's errno.
        unsafe { *libc::__errno_location() = e };
        let _ = BUSY.try_with(|b| b.set(false));
    }
}

/// `None` when this thread is already inside the library (or is being torn down).
pub fn enter() -> Option<Busy> {
    BUSY.try_with(|b| {
        if b.get() {
            None
        } else {
            b.set(true);
            // SAFETY: the calling thread's errno.
            Some(Busy(unsafe { *libc::__errno_location() }))
        }
    })
    .ok()
    .flatten()
}

/// The errno of a call the library served and failed.
pub fn set_errno(e: i32) {
    let _ = ERRNO.try_with(|c| c.set(Some(e)));
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = e };
}

pub fn debug() -> bool {
    static D: OnceLock<bool> = OnceLock::new();
    *D.get_or_init(|| std::env::var("STRIPEFS_PRELOAD_DEBUG").is_ok_and(|v| v == "1"))
}

pub fn log(msg: std::fmt::Arguments) {
    if debug() {
        let line = format!("stripefs-preload[{}]: {msg}\n", std::process::id());
        // SAFETY: a buffer of that length.
        unsafe { real::write(2, line.as_ptr() as *const _, line.len()) };
    }
}

// ---- counters ----

pub static SERVED: AtomicU64 = AtomicU64::new(0);
pub static FELL_THROUGH: AtomicU64 = AtomicU64::new(0);
pub static OPENED: AtomicU64 = AtomicU64::new(0);

pub fn served() {
    SERVED.fetch_add(1, Ordering::Relaxed);
}

/// At exit: flush what is behind, and with STRIPEFS_PRELOAD_DEBUG=1 print the counters.
pub fn at_exit() {
    flush_all();
    let any = [&OPENED, &SERVED, &FELL_THROUGH]
        .iter()
        .any(|c| c.load(Ordering::Relaxed) > 0);
    if debug() && any {
        log(format_args!(
            "files served natively {}, calls served {}, fell through to the mount {}",
            OPENED.load(Ordering::Relaxed),
            SERVED.load(Ordering::Relaxed),
            FELL_THROUGH.load(Ordering::Relaxed)
        ));
    }
}

// ---- the mount table ----

struct Table {
    text: String,
    read_at: Instant,
    /// Counts the readings that changed the text.
    generation: u64,
    /// The stripefs mount points in it.
    points: Vec<PathBuf>,
}

static MOUNTS: Mutex<Option<Table>> = Mutex::new(None);

/// The stripefs mount (cluster file, path inside stripefs) of an absolute path, from the
/// mount table read at most once a second.
/// `abs` is the path, or `None` to ask only whether any stripefs mount exists.
pub fn on_mount(abs: Option<&str>) -> Option<stripefs_client::mounts::Found> {
    with_table(|text| match abs {
        Some(abs) => stripefs_client::mounts::find(text, std::path::Path::new(abs)),
        None => Some(stripefs_client::mounts::Found {
            cluster: String::new(),
            inner: String::new(),
        }),
    })
    .flatten()
}

/// `f` of the mount table text (read at most once a second), if it names any stripefs
/// mount.
pub fn with_table<R>(f: impl FnOnce(&str) -> R) -> Option<R> {
    table(|t| f(&t.text))
}

/// The generation of the mount table (changes when its text does) and whether `abs`
/// may lie on a stripefs mount (`None`: no stripefs mount at all).
pub fn maybe_on_mount(abs: Option<&[u8]>) -> Option<(u64, bool)> {
    use std::os::unix::ffi::OsStrExt;
    table(|t| {
        let may = abs.map_or(true, |abs| {
            let p = std::path::Path::new(std::ffi::OsStr::from_bytes(abs));
            t.points.iter().any(|m| p.starts_with(m))
        });
        (t.generation, may)
    })
}

fn table<R>(f: impl FnOnce(&Table) -> R) -> Option<R> {
    let mut m = MOUNTS.lock().unwrap_or_else(|p| p.into_inner());
    let stale = m
        .as_ref()
        .map_or(true, |t| t.read_at.elapsed() > Duration::from_secs(1));
    if stale {
        let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let generation = match m.as_ref() {
            Some(t) if t.text == text => t.generation,
            Some(t) => t.generation + 1,
            None => 0,
        };
        let points = stripefs_client::mounts::mountpoints(&text);
        *m = Some(Table {
            text,
            read_at: Instant::now(),
            generation,
            points,
        });
    }
    let t = m.as_ref()?;
    t.text.contains("stripefs").then(|| f(t))
}

// ---- clients ----

static CLIENTS: Mutex<Option<HashMap<String, Option<Client>>>> = Mutex::new(None);

/// The process's client of a cluster file (connected at first use), with the caller's
/// credentials; `None` (remembered) if the file cannot be read or the cluster reached.
pub fn client(cluster: &str) -> Option<Client> {
    let mut all = CLIENTS.lock().unwrap_or_else(|p| p.into_inner());
    let map = all.get_or_insert_with(HashMap::new);
    let c = map.entry(cluster.to_string()).or_insert_with(|| {
        let c = ClusterConfig::load(std::path::Path::new(cluster))
            .map_err(|e| e.to_string())
            .and_then(|cfg| Client::connect(&cfg).map_err(|e| e.to_string()));
        match c {
            Ok(c) => Some(c),
            Err(e) => {
                log(format_args!(
                    "cannot use cluster {cluster} ({e}): its files go through the mount"
                ));
                None
            }
        }
    });
    c.clone().map(|c| c.with_cred(caller()))
}

/// The caller's uid, gid and groups, which the mount would check.
fn caller() -> Cred {
    // SAFETY: plain queries; getgroups with a buffer of its length.
    unsafe {
        let n = libc::getgroups(0, std::ptr::null_mut()).max(0);
        let mut groups = vec![0 as libc::gid_t; n as usize];
        let n = libc::getgroups(n, groups.as_mut_ptr()).max(0);
        groups.truncate(n as usize);
        Cred {
            uid: libc::geteuid(),
            gid: libc::getegid(),
            groups,
        }
    }
}

// ---- the descriptors served ----

/// One open file description served natively (shared by the descriptors `dup` made).
pub struct Open {
    pub file: stripefs_client::File,
    /// The kernel's identity of the file, to correct the size a stat by path shows
    /// while writes of this process are behind.
    pub dev: u64,
    pub ino: u64,
    /// Held by a call using the file offset (the kernel's) from reading it to moving it.
    pub offset: Mutex<()>,
    pub path: String,
    pub written: AtomicBool,
    /// When this process last wrote it natively (ns since the epoch; 0: never).
    pub last_write_ns: AtomicI64,
}

static FDS: RwLock<Option<HashMap<c_int, Arc<Open>>>> = RwLock::new(None);
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// Whether any descriptor is served or a candidate (no lock).
pub fn any() -> bool {
    COUNT.load(Ordering::Acquire) > 0
}

/// The open file served for `fd`, if any (no lock when none is served at all).
pub fn get(fd: c_int) -> Option<Arc<Open>> {
    if COUNT.load(Ordering::Acquire) == 0 {
        return None;
    }
    let t = FDS.read().unwrap_or_else(|p| p.into_inner());
    t.as_ref()?.get(&fd).cloned()
}

pub fn insert(fd: c_int, o: Arc<Open>) {
    let mut t = FDS.write().unwrap_or_else(|p| p.into_inner());
    if t.get_or_insert_with(HashMap::new).insert(fd, o).is_none() {
        COUNT.fetch_add(1, Ordering::AcqRel);
    }
}

pub fn remove(fd: c_int) -> Option<Arc<Open>> {
    if COUNT.load(Ordering::Acquire) == 0 {
        return None;
    }
    let mut t = FDS.write().unwrap_or_else(|p| p.into_inner());
    let o = t.as_mut()?.remove(&fd);
    if o.is_some() {
        COUNT.fetch_sub(1, Ordering::AcqRel);
    }
    o
}

/// The served descriptors in `first..=last`.
pub fn served_in(first: u64, last: u64) -> Vec<(c_int, Arc<Open>)> {
    if COUNT.load(Ordering::Acquire) == 0 {
        return Vec::new();
    }
    all()
        .into_iter()
        .filter(|(fd, _)| (first..=last).contains(&(*fd as u64)))
        .collect()
}

/// Every open file served, with its descriptors.
fn all() -> Vec<(c_int, Arc<Open>)> {
    let t = FDS.read().unwrap_or_else(|p| p.into_inner());
    t.as_ref()
        .map(|m| m.iter().map(|(k, v)| (*k, v.clone())).collect())
        .unwrap_or_default()
}

/// The size this process knows for the file `(dev, ino)` if it serves it, and the time
/// of its last write served (0: none); the mount's attributes may not show them yet.
pub fn known(dev: u64, ino: u64) -> Option<(u64, i64)> {
    if COUNT.load(Ordering::Acquire) == 0 {
        return None;
    }
    all()
        .into_iter()
        .find(|(_, o)| o.dev == dev && o.ino == ino)
        .map(|(_, o)| (o.file.size(), o.last_write_ns.load(Ordering::Relaxed)))
}

/// Now, in nanoseconds since the epoch (the time of a write served).
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Flushes every served file's writes still behind (before fork, exec, exit).
pub fn flush_all() {
    for (fd, o) in all() {
        if let Err(e) = o.file.flush() {
            log(format_args!("flushing {} (fd {fd}): {e}", o.path));
        }
    }
}

// ---- descriptors of stripefs files that go through the kernel ----
//
// The mount and the native client are coherent only at opens and closes (close-to-open,
// as between two clients), while the descriptors of one process on one file are coherent
// with each other through the kernel's page cache. So a file is served natively only
// while no descriptor of it in this process goes through the mount (a candidate not
// served yet, one opened with O_APPEND or O_DIRECT, one handed back for mmap or
// fallocate): when one does, every served descriptor of the file goes back to the mount
// too, and none is served again while such a descriptor is open.

static KERNEL: Mutex<Option<HashMap<c_int, (u64, u64)>>> = Mutex::new(None);

/// `fd`, a descriptor of the file `(dev, ino)`, goes through the mount: the file's
/// served descriptors go back to it.
pub fn kernel_add(fd: c_int, dev: u64, ino: u64) {
    {
        let mut k = KERNEL.lock().unwrap_or_else(|p| p.into_inner());
        k.get_or_insert_with(HashMap::new).insert(fd, (dev, ino));
    }
    // Only the descriptors: a reference to the file held here would keep the last
    // release from closing it (and flushing its writes).
    let others: Vec<c_int> = all()
        .into_iter()
        .filter(|(_, o)| o.dev == dev && o.ino == ino)
        .map(|(fd, _)| fd)
        .collect();
    for other in others {
        release(
            other,
            "another descriptor of the file goes through the mount",
        );
    }
}

/// `fd` is closed (or served natively now).
pub fn kernel_remove(fd: c_int) {
    let mut k = KERNEL.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(m) = k.as_mut() {
        m.remove(&fd);
    }
}

/// The descriptors in `first..=last` are closed.
pub fn kernel_remove_range(first: u64, last: u64) {
    let mut k = KERNEL.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(m) = k.as_mut() {
        m.retain(|fd, _| !(first..=last).contains(&(*fd as u64)));
    }
}

/// `to` is a duplicate of `from`: it goes through the mount if `from` does.
pub fn kernel_dup(from: c_int, to: c_int) {
    let mut k = KERNEL.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(m) = k.as_mut() {
        if let Some(id) = m.get(&from).copied() {
            m.insert(to, id);
        }
    }
}

/// Whether a descriptor of `(dev, ino)` in this process goes through the mount (its
/// size and times are then the kernel's to tell).
pub fn through_kernel(dev: u64, ino: u64) -> bool {
    kernel_others(dev, ino, &[])
}

/// Whether a descriptor of `(dev, ino)` other than `except` goes through the mount.
fn kernel_others(dev: u64, ino: u64, except: &[c_int]) -> bool {
    let k = KERNEL.lock().unwrap_or_else(|p| p.into_inner());
    k.as_ref().is_some_and(|m| {
        m.iter()
            .any(|(fd, id)| *id == (dev, ino) && !except.contains(fd))
    })
}

/// Stops serving `fd` (a call the library does not serve is about to use it): the last
/// descriptor of the file closes the native handle, which flushes its writes; from then
/// on the file's descriptors all go through the mount.
pub fn release(fd: c_int, why: &str) {
    drop_candidate(fd);
    if let Some(o) = remove(fd) {
        FELL_THROUGH.fetch_add(1, Ordering::Relaxed);
        log(format_args!(
            "{} (fd {fd}) goes through the mount from here: {why}",
            o.path
        ));
        let (dev, ino) = (o.dev, o.ino);
        let _ = finish(fd, o);
        kernel_add(fd, dev, ino);
    }
}

/// The last reference to `o` going (its descriptor `fd` still open in the kernel):
/// closes the native handle, and if it wrote, has the mount fetch the file's
/// attributes anew (a setattr of its mtime), so the kernel shows the size written.
/// Returns the close's error.
pub fn finish(fd: c_int, o: Arc<Open>) -> Result<(), WireError> {
    let Ok(o) = Arc::try_unwrap(o) else {
        return Ok(());
    };
    let written = o.written.load(Ordering::Relaxed);
    let path = o.path.clone();
    // A flush waits until the metadata server has the size the writes reached; the
    // close's own record of it may still be on its way when the setattr below asks.
    let flushed = if written { o.file.flush() } else { Ok(()) };
    let r = flushed.and(o.file.close());
    if written {
        kernel_attrs_changed(fd);
        // The kernel may hold pages of the file from before these writes (read through
        // the mount earlier): dropped, so that a read or mmap through `fd` from now on
        // gets the bytes written (fsx with two clients found zeros). The mount writes
        // through (or, with the writeback cache, writes dirty pages back first), so this
        // loses nothing.
        // SAFETY: an advice on a descriptor the caller holds open.
        unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
    if let Err(e) = &r {
        log(format_args!("closing {path}: {e}"));
    }
    r
}

/// The cluster has a size or times of the file of `fd` that the kernel may not: a
/// setattr of its mtime through the mount makes the kernel (and the mount daemon's
/// handles of it) take the cluster's.
pub fn kernel_attrs_changed(fd: c_int) {
    let times = [
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
    ];
    // SAFETY: two timespecs, as futimens takes.
    unsafe { real::futimens(fd, times.as_ptr()) };
}

/// In the child of a fork: the parent's clients and handles belong to threads that do
/// not exist here, so they are forgotten (never dropped: that would wait for those
/// threads); the child's descriptors go through the mount, and its own first file on a
/// mount connects anew.
pub fn after_fork_in_child() {
    let mut t = FDS.write().unwrap_or_else(|p| p.into_inner());
    if let Some(m) = t.take() {
        std::mem::forget(m);
    }
    drop(t);
    let mut t = CANDIDATES.write().unwrap_or_else(|p| p.into_inner());
    if let Some(m) = t.take() {
        std::mem::forget(m);
    }
    drop(t);
    let mut k = KERNEL.lock().unwrap_or_else(|p| p.into_inner());
    k.take();
    drop(k);
    COUNT.store(0, Ordering::Release);
    let mut c = CLIENTS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(m) = c.take() {
        std::mem::forget(m);
    }
}

/// A file on a stripefs mount not served yet: its first calls go through the mount, so
/// that a process reading a small file once (`cat`, a shell's `source`) pays no
/// connection to the cluster; the descriptor is served natively from its
/// [`PROMOTE_AFTER_CALLS`]-th read or write, or at once when this process is connected
/// to the cluster already. (Not by bytes asked for: programs ask for their buffer's
/// size, which the mount's 4 MiB block size makes large, whatever the file's size.)
pub struct Candidate {
    cluster: String,
    inner: String,
    path: String,
    flags: c_int,
    dev: u64,
    ino: u64,
    calls: AtomicU64,
    wrote: AtomicBool,
}

pub const PROMOTE_AFTER_CALLS: u64 = 4;

/// [`PROMOTE_AFTER_CALLS`], or `STRIPEFS_PRELOAD_AFTER` (1: from the first read or
/// write, for tests), as the shim reads it.
fn promote_after() -> u64 {
    static N: OnceLock<u64> = OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("STRIPEFS_PRELOAD_AFTER")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&v| v >= 1)
            .unwrap_or(PROMOTE_AFTER_CALLS)
    })
}

static CANDIDATES: RwLock<Option<HashMap<c_int, Arc<Candidate>>>> = RwLock::new(None);

fn candidate(fd: c_int) -> Option<Arc<Candidate>> {
    if COUNT.load(Ordering::Acquire) == 0 {
        return None;
    }
    let t = CANDIDATES.read().unwrap_or_else(|p| p.into_inner());
    t.as_ref()?.get(&fd).cloned()
}

fn insert_candidate(fd: c_int, c: Arc<Candidate>) {
    let mut t = CANDIDATES.write().unwrap_or_else(|p| p.into_inner());
    if t.get_or_insert_with(HashMap::new).insert(fd, c).is_none() {
        COUNT.fetch_add(1, Ordering::AcqRel);
    }
}

/// Forgets the candidate of `fd` (closed, or handed to a call not served).
pub fn drop_candidate(fd: c_int) -> bool {
    if COUNT.load(Ordering::Acquire) == 0 {
        return false;
    }
    let mut t = CANDIDATES.write().unwrap_or_else(|p| p.into_inner());
    let gone = t.as_mut().and_then(|m| m.remove(&fd)).is_some();
    if gone {
        COUNT.fetch_sub(1, Ordering::AcqRel);
    }
    gone
}

/// `to` is a duplicate of `from`: it is a candidate too.
pub fn dup_candidate(from: c_int, to: c_int) {
    if let Some(c) = candidate(from) {
        insert_candidate(to, c);
    }
}

/// The candidates in `first..=last`.
pub fn candidates_in(first: u64, last: u64) -> Vec<c_int> {
    let t = CANDIDATES.read().unwrap_or_else(|p| p.into_inner());
    t.as_ref()
        .map(|m| {
            m.keys()
                .copied()
                .filter(|fd| (first..=last).contains(&(*fd as u64)))
                .collect()
        })
        .unwrap_or_default()
}

/// A read or write of `n` bytes is about to be made on `fd`: the served file if `fd` is
/// served, or becomes served now; `None` to make it through the mount.
pub fn for_io(fd: c_int, n: usize, write: bool) -> Option<Arc<Open>> {
    if let Some(o) = get(fd) {
        return Some(o);
    }
    let c = candidate(fd)?;
    let calls = c.calls.fetch_add(1, Ordering::Relaxed) + 1;
    let _ = n;
    let due = calls >= promote_after() || connected(&c.cluster);
    if !due {
        if write {
            c.wrote.store(true, Ordering::Relaxed);
        }
        return None;
    }
    // Every descriptor of the description moves over together.
    let fds: Vec<c_int> = {
        let t = CANDIDATES.read().unwrap_or_else(|p| p.into_inner());
        t.as_ref()
            .map(|m| {
                m.iter()
                    .filter(|(_, x)| Arc::ptr_eq(x, &c))
                    .map(|(k, _)| *k)
                    .collect()
            })
            .unwrap_or_default()
    };
    for f in &fds {
        drop_candidate(*f);
    }
    if kernel_others(c.dev, c.ino, &fds) {
        // Another descriptor of the file goes through the mount: so do these.
        log(format_args!(
            "{} (fd {fd}) stays with the mount: another descriptor of it goes through the mount",
            c.path
        ));
        return None;
    }
    if c.wrote.load(Ordering::Relaxed) {
        // Its writes through the mount leave the mount daemon's write-behind first:
        // closing a duplicate sends the daemon a flush.
        // SAFETY: a duplicate of the caller's descriptor, closed at once.
        unsafe {
            let d = real::dup(fd);
            if d >= 0 {
                real::close(d);
            }
        }
    }
    let o = open_native(fd, &c)?;
    for f in &fds {
        kernel_remove(*f);
        insert(*f, o.clone());
    }
    Some(o)
}

/// Whether this process has a working client of `cluster` already.
fn connected(cluster: &str) -> bool {
    let all = CLIENTS.lock().unwrap_or_else(|p| p.into_inner());
    all.as_ref()
        .and_then(|m| m.get(cluster))
        .is_some_and(|c| c.is_some())
}

fn open_native(fd: c_int, c: &Candidate) -> Option<Arc<Open>> {
    let Some(client) = client(&c.cluster) else {
        FELL_THROUGH.fetch_add(1, Ordering::Relaxed);
        return None;
    };
    let acc = c.flags & libc::O_ACCMODE;
    let opts = OpenOptions::new()
        .read(acc == libc::O_RDONLY || acc == libc::O_RDWR)
        .write(acc == libc::O_WRONLY || acc == libc::O_RDWR);
    match client.open(&c.inner, &opts) {
        Ok(file) => {
            OPENED.fetch_add(1, Ordering::Relaxed);
            log(format_args!(
                "{} (fd {fd}) served natively as {}",
                c.path, c.inner
            ));
            Some(Arc::new(Open {
                file,
                dev: c.dev,
                ino: c.ino,
                offset: Mutex::new(()),
                path: c.path.clone(),
                written: AtomicBool::new(false),
                last_write_ns: AtomicI64::new(0),
            }))
        }
        Err(e) => {
            FELL_THROUGH.fetch_add(1, Ordering::Relaxed);
            log(format_args!(
                "{} goes through the mount: native open: {e}",
                c.path
            ));
            None
        }
    }
}

/// After the kernel opened `fd` with `flags`: a regular file on a stripefs mount becomes
/// a candidate (served at once if this process is connected to its cluster already).
pub fn adopt(fd: c_int, flags: c_int) {
    take(fd, flags, 0, false)
}

/// As `adopt`, for a descriptor that already made `calls` reads and writes through the
/// mount (`wrote`: some of them writes), counted by the shim before it loaded the
/// engine.
pub fn take(fd: c_int, flags: c_int, calls: u64, wrote: bool) {
    // Most processes have no stripefs mount at all: no readlink for them.
    if on_mount(None).is_none() {
        return;
    }
    let Some(abs) = fd_path(fd) else { return };
    let Some(found) = on_mount(Some(&abs)) else {
        return;
    };
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a stat buffer for a descriptor the kernel just gave.
    let regular =
        unsafe { real::fstat(fd, &mut st) } == 0 && st.st_mode & libc::S_IFMT == libc::S_IFREG;
    let refused = if regular {
        crate::meta::refuses_files(st.st_dev)
    } else {
        None
    };
    let why = if let Some(r) = refused {
        Some(r)
    } else if flags & libc::O_APPEND != 0 {
        Some("O_APPEND")
    } else if flags & libc::O_DIRECT != 0 {
        Some("O_DIRECT")
    } else if flags & libc::O_PATH != 0 {
        Some("O_PATH")
    } else {
        None
    };
    if why.is_some() || !regular {
        FELL_THROUGH.fetch_add(1, Ordering::Relaxed);
        log(format_args!(
            "{abs} goes through the mount: {}",
            why.unwrap_or("not a regular file")
        ));
        if regular {
            kernel_add(fd, st.st_dev, st.st_ino);
        }
        return;
    }
    let c = Arc::new(Candidate {
        cluster: found.cluster,
        inner: found.inner,
        path: abs,
        flags,
        dev: st.st_dev,
        ino: st.st_ino,
        calls: AtomicU64::new(calls),
        wrote: AtomicBool::new(wrote),
    });
    if connected(&c.cluster) && !wrote && !kernel_others(c.dev, c.ino, &[fd]) {
        if let Some(o) = open_native(fd, &c) {
            insert(fd, o);
            return;
        }
    }
    // Until served, its calls go through the mount.
    kernel_add(fd, c.dev, c.ino);
    insert_candidate(fd, c);
}

/// The absolute path the kernel gives for descriptor `fd`.
fn fd_path(fd: c_int) -> Option<String> {
    let p = PathBuf::from(format!("/proc/self/fd/{fd}"));
    let target = std::fs::read_link(p).ok()?;
    let s = target.to_str()?.to_string();
    s.starts_with('/').then_some(s)
}
