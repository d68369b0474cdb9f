//! Metadata calls on paths served natively: `stat` and its family by path, `mkdir`,
//! `unlink`, `rmdir`, `rename`.
//!
//! **Which names.** A path is served only where the kernel's own resolution and the
//! native one cannot differ: its directory is opened by the kernel with `O_PATH` and
//! `RESOLVE_NO_SYMLINKS` (no FUSE open; the dentries are the kernel's, usually cached),
//! which must land on a stripefs mount with no other file system mounted below it, and
//! its last component is then looked up natively in that directory (the kernel's inode
//! numbers are the cluster's). Symbolic links anywhere before the last component, a
//! final symbolic link to follow, a trailing slash, `.` or `..` as the last component,
//! special files, and files this process has open through the mount go to the kernel.
//!
//! **Coherence with the mount.** After a change of names (`unlink`, `rmdir`, `rename`,
//! `mkdir`), the mount daemon is told on its control socket (`stripefs_client::mountctl`)
//! and has the kernel drop its entries and attributes of those names and directories
//! before the call returns, so every process on the machine sees the change at once.
//! Without that socket (an older daemon), and on a mount with the kernel's writeback
//! cache (which keeps its own sizes and times), these calls go through the mount.

use crate::real;
use crate::state::{self, log, set_errno};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr};
use std::io::{Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::sync::{Arc, Mutex};
use stripefs_client::mountctl::{self, Changed};
use stripefs_client::{Attr, Client, FileType, InodeId, PosixAttr};

/// A stripefs mount, by device number.
struct Mount {
    cluster: String,
    /// Another file system is mounted below it: nothing on it is served by name.
    nested: bool,
    /// The uid its daemon runs as: the control socket must be served by it.
    owner: Option<u32>,
    /// The daemon's control socket, once connected, and the features it told.
    ctl: Mutex<Option<(UnixStream, u8)>>,
}

/// The mounts by device number, with the mount table generation they were found in.
type Mounts = HashMap<(u32, u32), (u64, Option<Arc<Mount>>)>;
static MOUNTS: Mutex<Option<Mounts>> = Mutex::new(None);

/// The stripefs mount of device `dev` in mount table generation `generation`; `None` if
/// it is none.
fn mount_of(dev: (u32, u32), generation: u64) -> Option<Arc<Mount>> {
    let mut all = MOUNTS.lock().unwrap_or_else(|p| p.into_inner());
    let map = all.get_or_insert_with(HashMap::new);
    if let Some((g, m)) = map.get(&dev) {
        if *g == generation {
            return m.clone();
        }
    }
    let found = state::with_table(|t| stripefs_client::mounts::of_dev(t, dev)).flatten();
    let keep = match (map.get(&dev), &found) {
        (Some((_, Some(m))), Some(f)) => {
            m.cluster == f.cluster && m.nested == f.nested && m.owner == f.owner
        }
        _ => false,
    };
    if keep {
        if let Some(e) = map.get_mut(&dev) {
            e.0 = generation;
        }
    } else {
        let m = found.map(|f| {
            Arc::new(Mount {
                cluster: f.cluster,
                nested: f.nested,
                owner: f.owner,
                ctl: Mutex::new(None),
            })
        });
        map.insert(dev, (generation, m));
    }
    map.get(&dev).and_then(|e| e.1.clone())
}

/// In the child of a fork: the parent's control connections are its own.
pub fn after_fork_in_child() {
    let mut all = MOUNTS.lock().unwrap_or_else(|p| p.into_inner());
    all.take();
}

/// A name in a directory on a stripefs mount, as the kernel resolved the directory.
pub struct Target {
    client: Client,
    mount: Arc<Mount>,
    dev: (u32, u32),
    parent: u64,
    name: String,
    /// The kernel's statx of the directory (for the fields of a statx answer that
    /// belong to the mount, not the file).
    dir: libc::statx,
}

/// The directory part and last component of `path`, if the last component is a name
/// (not empty, `.` or `..`, no trailing slash).
fn split(path: &[u8]) -> Option<(&[u8], &str)> {
    if path.is_empty() || path.ends_with(b"/") {
        return None;
    }
    let (dir, name): (&[u8], &[u8]) = match path.iter().rposition(|&b| b == b'/') {
        Some(0) => (b"/", &path[1..]),
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (b".", path),
    };
    let name = std::str::from_utf8(name).ok()?;
    if name == "." || name == ".." || name.len() > 255 {
        return None;
    }
    Some((dir, name))
}

/// Where `path` (relative to `dirfd`) names an entry on a stripefs mount, if it may be
/// served natively (see the module's rules).
pub fn locate(dirfd: c_int, path: *const c_char) -> Option<Target> {
    if path.is_null() {
        return None;
    }
    // SAFETY: the caller's NUL-terminated path.
    let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
    let (dir, name) = split(bytes)?;
    // An absolute path elsewhere costs no more than this.
    let (generation, may) = state::maybe_on_mount(bytes.starts_with(b"/").then_some(bytes))?;
    if !may {
        return None;
    }
    let dir = std::ffi::CString::new(dir).ok()?;
    // SAFETY: open_how is plain integers; zero is "no flags".
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: a NUL-terminated path and an open_how of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dirfd,
            dir.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return None;
    }
    let fd = fd as c_int;
    // SAFETY: a zeroed statx is a valid buffer.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: an O_PATH descriptor just opened, an empty path with AT_EMPTY_PATH, a
    // statx buffer; the descriptor is closed right after.
    let r = unsafe {
        let r = real::statx(
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_STATX_DONT_SYNC,
            libc::STATX_BASIC_STATS | libc::STATX_MNT_ID,
            &mut st,
        );
        real::close(fd);
        r
    };
    if r != 0 || u32::from(st.stx_mode) & libc::S_IFMT != libc::S_IFDIR {
        return None;
    }
    let dev = (st.stx_dev_major, st.stx_dev_minor);
    let mount = mount_of(dev, generation)?;
    if mount.nested {
        return None;
    }
    // The mount's features come from its daemon; a mount whose daemon cannot be asked,
    // or whose kernel keeps its own sizes (writeback cache), is left to the kernel.
    if mount.features(dev)? & mountctl::FEATURE_WRITEBACK_CACHE != 0 {
        return None;
    }
    let client = state::client(&mount.cluster)?;
    Some(Target {
        client,
        mount,
        dev,
        parent: st.stx_ino,
        name: name.to_string(),
        dir: st,
    })
}

// ---- stat ----

/// What a native stat found: the attributes, as the mount would show them.
pub struct Found {
    pub attr: PosixAttr,
    pub dev: (u32, u32),
    dir: libc::statx,
}

/// `stat` (`follow`) or `lstat` of `path` natively: `None` to ask the kernel (see the
/// module's rules), else the answer or the errno.
pub fn stat(dirfd: c_int, path: *const c_char, follow: bool) -> Option<Result<Found, c_int>> {
    let t = locate(dirfd, path)?;
    let a = match t.client.lookup(InodeId(t.parent), &t.name) {
        Ok(a) => a,
        Err(e) => return Some(Err(stripefs_client::posix_errno(&e))),
    };
    match a.ftype {
        FileType::File | FileType::Dir => {}
        FileType::Symlink if !follow => {}
        _ => return None,
    }
    let devt = libc::makedev(t.dev.0, t.dev.1);
    if state::through_kernel(devt, a.ino.0) {
        return None;
    }
    let allocated = allocated(&t.client, &a);
    state::served();
    log(format_args!(
        "stat {:?} in directory {} served natively",
        t.name, t.parent
    ));
    Some(Ok(Found {
        attr: stripefs_client::posix_attr(&a, allocated),
        dev: t.dev,
        dir: t.dir,
    }))
}

/// `st_blocks`' bytes, as the mount computes them.
fn allocated(c: &Client, a: &Attr) -> u64 {
    Client::allocated_known(a).unwrap_or_else(|| c.allocated_bytes(a).unwrap_or(a.size))
}

fn split_ns(ns: i64) -> (i64, i64) {
    (ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000))
}

/// Fills a `struct stat` (or `stat64`: the same layout on 64-bit Linux).
macro_rules! fill_stat {
    ($st:expr, $f:expr) => {{
        let s = $st;
        let f: &Found = $f;
        let a = &f.attr;
        *s = std::mem::zeroed();
        s.st_dev = libc::makedev(f.dev.0, f.dev.1) as _;
        s.st_ino = a.ino as _;
        s.st_mode = a.mode() as _;
        s.st_nlink = a.nlink as _;
        s.st_uid = a.uid as _;
        s.st_gid = a.gid as _;
        s.st_size = a.size as _;
        s.st_blksize = a.blksize as _;
        s.st_blocks = a.blocks as _;
        let (sec, nsec) = split_ns(a.atime_ns);
        s.st_atime = sec as _;
        s.st_atime_nsec = nsec as _;
        let (sec, nsec) = split_ns(a.mtime_ns);
        s.st_mtime = sec as _;
        s.st_mtime_nsec = nsec as _;
        let (sec, nsec) = split_ns(a.ctime_ns);
        s.st_ctime = sec as _;
        s.st_ctime_nsec = nsec as _;
    }};
}

pub unsafe fn fill_stat(st: *mut libc::stat, f: &Found) {
    fill_stat!(&mut *st, f);
}

pub unsafe fn fill_stat64(st: *mut libc::stat64, f: &Found) {
    fill_stat!(&mut *st, f);
}

/// Fills a `struct statx` as the kernel would for a file on the mount.
pub unsafe fn fill_statx(st: *mut libc::statx, f: &Found) {
    let s = &mut *st;
    let a = &f.attr;
    *s = std::mem::zeroed();
    s.stx_mask = f.dir.stx_mask & (libc::STATX_BASIC_STATS | libc::STATX_MNT_ID);
    s.stx_blksize = a.blksize;
    s.stx_attributes_mask = f.dir.stx_attributes_mask;
    s.stx_nlink = a.nlink;
    s.stx_uid = a.uid;
    s.stx_gid = a.gid;
    s.stx_mode = a.mode() as u16;
    s.stx_ino = a.ino;
    s.stx_size = a.size;
    s.stx_blocks = a.blocks;
    for (t, ns) in [
        (&mut s.stx_atime, a.atime_ns),
        (&mut s.stx_mtime, a.mtime_ns),
        (&mut s.stx_ctime, a.ctime_ns),
    ] {
        let (sec, nsec) = split_ns(ns);
        t.tv_sec = sec;
        t.tv_nsec = nsec as u32;
    }
    s.stx_dev_major = f.dev.0;
    s.stx_dev_minor = f.dev.1;
    s.stx_mnt_id = f.dir.stx_mnt_id;
}

// ---- changes of names ----

impl Mount {
    /// The mount's features (`mountctl::FEATURE_*`), connecting its daemon's control
    /// socket if it is not yet; `None` if there is no socket to connect.
    fn features(&self, dev: (u32, u32)) -> Option<u8> {
        let mut ctl = self.ctl.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, f)) = ctl.as_ref() {
            return Some(*f);
        }
        let name = mountctl::socket_name(dev);
        let s = match SocketAddr::from_abstract_name(name.as_bytes())
            .and_then(|a| UnixStream::connect_addr(&a))
            .map(stripefs_rpc::fdplace::place_unix)
        {
            Ok(s) if !served_by(&s, self.owner) => {
                log(format_args!(
                    "mount control socket @{name} is not served by the mount's owner ({:?})",
                    self.owner
                ));
                return None;
            }
            Ok(s) => s,
            Err(e) => {
                log(format_args!("mount control socket @{name}: {e}"));
                return None;
            }
        };
        let _ = s.set_read_timeout(Some(ANNOUNCE_TIMEOUT));
        let _ = s.set_write_timeout(Some(ANNOUNCE_TIMEOUT));
        let mut s = s;
        let mut answer = [0u8; 2];
        let r = s
            .write_all(&mountctl::encode(&[Changed::Hello]))
            .and_then(|()| s.read_exact(&mut answer));
        if r.is_err() || answer[0] != mountctl::DONE {
            log(format_args!("mount control socket @{name}: {r:?}"));
            return None;
        }
        *ctl = Some((s, answer[1]));
        Some(answer[1])
    }
}

/// Whether files of the stripefs mount of device `dev` may be served natively: not on
/// a mount with the kernel's writeback cache, whose size and times the kernel keeps
/// itself (`None`: not a stripefs mount, or one that may be served).
pub fn refuses_files(dev: u64) -> Option<&'static str> {
    let dev = (libc::major(dev), libc::minor(dev));
    let (generation, _) = state::maybe_on_mount(None)?;
    let m = mount_of(dev, generation)?;
    match m.features(dev) {
        Some(f) if f & mountctl::FEATURE_WRITEBACK_CACHE != 0 => {
            Some("the mount uses the kernel's writeback cache, which keeps its own sizes")
        }
        _ => None,
    }
}

impl Target {
    /// Whether the daemon's control socket is connected (connecting it if not): a
    /// change made natively must be announced to it.
    fn can_announce(&self) -> bool {
        if self.mount.features(self.dev).is_none() {
            log(format_args!("names change through the mount"));
            return false;
        }
        true
    }
}

/// Whether the peer of `s` runs as `owner` (the mount's daemon), or as root.
fn served_by(s: &UnixStream, owner: Option<u32>) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: a ucred buffer of the length passed.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    r == 0 && (cred.uid == 0 || Some(cred.uid) == owner)
}

/// How long the daemon may take to drop the kernel's entries.
const ANNOUNCE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Has the daemon of `m` drop the kernel's caches of `changes`, and waits until it has.
fn announce(m: &Mount, changes: &[Changed]) {
    let mut ctl = m.ctl.lock().unwrap_or_else(|p| p.into_inner());
    let Some((s, _)) = ctl.as_mut() else { return };
    let msg = mountctl::encode(changes);
    let mut done = [0u8; 1];
    let r = s.write_all(&msg).and_then(|()| s.read_exact(&mut done));
    if r.is_err() || done[0] != mountctl::DONE {
        log(format_args!(
            "mount control socket: {r:?}; the mount may show the old names for a second"
        ));
        *ctl = None;
    }
}

/// Runs a change natively: `None` to leave it to the kernel, else the call's result
/// (0, or -1 with errno set).
fn change(
    t: &Target,
    what: &str,
    op: impl FnOnce(&Client) -> Result<(), stripefs_client::WireError>,
    changes: &[Changed],
) -> c_int {
    let r = op(&t.client);
    log(format_args!(
        "{what} {:?} in directory {} served natively: {}",
        t.name,
        t.parent,
        r.as_ref().map_or_else(|e| e.to_string(), |_| "done".into())
    ));
    // A change made, or perhaps made (its answer lost), is announced.
    let eio = |e: &stripefs_client::WireError| stripefs_client::posix_errno(e) == libc::EIO;
    if r.as_ref().map_or_else(eio, |_| true) {
        announce(&t.mount, changes);
    }
    state::served();
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(stripefs_client::posix_errno(&e));
            -1
        }
    }
}

fn entry_and_dir(t: &Target) -> [Changed; 2] {
    [
        Changed::Entry {
            parent: t.parent,
            name: t.name.clone(),
        },
        Changed::Inode { ino: t.parent },
    ]
}

/// `unlink` (or with `dir`, `rmdir`) natively, if served.
pub fn remove(dirfd: c_int, path: *const c_char, dir: bool) -> Option<c_int> {
    let t = locate(dirfd, path)?;
    if !t.can_announce() {
        return None;
    }
    let (p, n) = (InodeId(t.parent), t.name.clone());
    Some(change(
        &t,
        if dir { "rmdir" } else { "unlink" },
        |c| {
            if dir {
                c.rmdir_at(p, &n).map(|_| ())
            } else {
                c.unlink_at(p, &n).map(|_| ())
            }
        },
        &entry_and_dir(&t),
    ))
}

/// `mkdir` natively, if served; `mode` before the umask.
pub fn mkdir(dirfd: c_int, path: *const c_char, mode: libc::mode_t) -> Option<c_int> {
    let t = locate(dirfd, path)?;
    let umask = umask()?;
    if !t.can_announce() {
        return None;
    }
    let (p, n) = (InodeId(t.parent), t.name.clone());
    // As the kernel's vfs_mkdir: only the permission and sticky bits of the caller's
    // mode (a set-group-ID bit comes from the parent, on the server).
    let mode = mode & 0o1777 & !umask;
    Some(change(
        &t,
        "mkdir",
        |c| c.mkdir_at(p, &n, mode).map(|_| ()),
        &entry_and_dir(&t),
    ))
}

/// The process's umask, as the kernel applies it to a mkdir through the mount.
fn umask() -> Option<u32> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("Umask:"))?;
    u32::from_str_radix(line.split_whitespace().nth(1)?, 8).ok()
}

/// `renameat2` natively, if served (both names on one mount; flags 0, RENAME_NOREPLACE
/// or RENAME_EXCHANGE).
pub fn rename(
    fromfd: c_int,
    from: *const c_char,
    tofd: c_int,
    to: *const c_char,
    flags: u32,
) -> Option<c_int> {
    const NOREPLACE: u32 = libc::RENAME_NOREPLACE;
    const EXCHANGE: u32 = libc::RENAME_EXCHANGE;
    if flags & !(NOREPLACE | EXCHANGE) != 0 || flags == NOREPLACE | EXCHANGE {
        return None;
    }
    let s = locate(fromfd, from)?;
    let d = locate(tofd, to)?;
    if s.dev != d.dev || !s.can_announce() {
        return None;
    }
    let mut changes = entry_and_dir(&s).to_vec();
    changes.extend(entry_and_dir(&d));
    let (sp, sn, dp, dn) = (
        InodeId(s.parent),
        s.name.clone(),
        InodeId(d.parent),
        d.name.clone(),
    );
    Some(change(
        &s,
        "rename",
        |c| {
            if flags == EXCHANGE {
                c.exchange_at(sp, &sn, dp, &dn)
            } else {
                c.rename_at(sp, &sn, dp, &dn, flags == NOREPLACE)
            }
        },
        &changes,
    ))
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn paths_split_into_directory_and_name() {
        assert_eq!(split(b"/a/b"), Some((&b"/a"[..], "b")));
        assert_eq!(split(b"/a"), Some((&b"/"[..], "a")));
        assert_eq!(split(b"a"), Some((&b"."[..], "a")));
        assert_eq!(split(b"x/y/z"), Some((&b"x/y"[..], "z")));
        for no in [&b""[..], b"/", b"a/", b"a/.", b"a/..", b".", b".."] {
            assert_eq!(split(no), None, "{no:?}");
        }
    }
}
