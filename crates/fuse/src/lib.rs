//! The stripefs FUSE adapter: mounts a cluster so that unmodified programs use it.
//!
//! Role. A thin translation layer, as 3FS keeps its FUSE daemon: every kernel request
//! becomes one or two calls of the native client library ([`stripefs_client::Client`]),
//! with the caller's uid, gid and supplementary groups, and every client error becomes
//! the errno its code names. The adapter keeps no file system state of its own beyond
//! open handles and per-handle directory listings; inode numbers are the cluster's, so the
//! root is inode 1 on both sides and no translation table is needed.
//!
//! Concurrency. fuser reads kernel requests on one thread; every request that may wait
//! on the network is handed to a pool of [`WORKERS`] threads, which reply themselves, so
//! reads, writes, fsyncs and metadata calls of many processes are in flight at once.
//! Writes use the client's write-behind (errors come back at flush, fsync or close);
//! write-only handles bypass the page cache where the kernel allows it (see `open_flags`
//! in `fs.rs`). Sequential reads combine the kernel's readahead with the client's, and a
//! streaming reader's pages far behind it are dropped (`behind.rs`).
//!
//! Consistency. Attributes and entries are cached by the kernel for [`ATTR_TTL`] and
//! [`ENTRY_TTL`]. Close-to-open between clients: each open invalidates the kernel's
//! attributes, and keeps the file's cached pages only if the file is unchanged since
//! they were cached (its change stamp, ctime, mtime and size from the metadata server,
//! is the one seen when they were cached: see `CacheStamps` in `cache.rs`), so what another
//! client closed is seen by the next open and an unchanged file is read again from
//! memory; an open of an inode that another client replaced answers ESTALE, which makes
//! the kernel look the name up again.
//!
//! Fault model. A server that stops makes the calls that need it fail within the client
//! timeout; they answer EIO, never hang. The client reconnects on the next call, so the
//! mount works again once the servers are back.

mod behind;
mod cache;
mod control;
mod cred;
mod dir;
mod errno;
mod fs;
mod pool;
mod readahead;
mod setid;

use std::io;
use std::path::Path;
use std::time::Duration;
use stripefs_client::Client;

/// How long the kernel may use attributes without asking again.
pub const ATTR_TTL: Duration = Duration::from_secs(1);
/// How long the kernel may use a name -> inode entry without asking again.
pub const ENTRY_TTL: Duration = Duration::from_secs(1);
/// Threads that serve kernel requests.
pub const WORKERS: usize = 16;
/// Requests queued for the workers before the reading thread waits.
pub const MAX_QUEUED_REQUESTS: usize = 1024;
/// Largest read or write request the kernel sends (the kernel's own limit is 256 pages).
pub const MAX_IO_BYTES: u32 = 1 << 20;
/// Asynchronous (readahead, background) requests the kernel keeps in flight.
pub const MAX_BACKGROUND: u16 = 64;
/// Kernel readahead of the mount. The kernel offers only 128 KiB at INIT; as root the
/// mount raises it through sysfs, so that sequential reads keep every server busy.
pub const READAHEAD_BYTES: u64 = 16 << 20;
/// Drop-behind of streaming reads (see `behind.rs`): a run of reads counts as one stream
/// while each starts within the kernel's readahead of the front; once a stream has read
/// four readaheads, the kernel's pages more than two readaheads behind its front and
/// beyond the first `keep_head` bytes of the file are dropped, at least 8 MiB at a time.
/// The head of a file stays cached, so that reading an unchanged file again runs from
/// memory (see [`keep_head_bytes`]); only what lies beyond streams through.
pub(crate) fn drop_behind_policy(keep_head: u64) -> behind::Policy {
    behind::Policy {
        slack: READAHEAD_BYTES,
        lag: 2 * READAHEAD_BYTES,
        min_run: 4 * READAHEAD_BYTES,
        step: 8 << 20,
        keep_head,
    }
}

/// Bytes at the head of each file whose cached pages a stream keeps: an eighth of the
/// machine's memory, at least [`MIN_KEEP_HEAD_BYTES`].
pub(crate) fn keep_head_bytes() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        })
        .unwrap_or(0);
    (total / 8).max(MIN_KEEP_HEAD_BYTES)
}

/// The least [`keep_head_bytes`] gives, whatever the machine.
pub const MIN_KEEP_HEAD_BYTES: u64 = 256 << 20;
/// The block size `stat` reports: programs size their buffers by it.
pub use stripefs_client::posix::BLKSIZE_BYTES;

const _: () = {
    assert!(MAX_IO_BYTES as u64 <= stripefs_client::CHUNK_TARGET_BYTES * 16);
    assert!(WORKERS >= 2 && MAX_QUEUED_REQUESTS >= WORKERS);
};

/// What to mount and how.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// Let users other than the mounting one use the mount (needs root or
    /// `user_allow_other` in /etc/fuse.conf). Permissions are checked by the metadata
    /// server with each caller's credentials either way.
    pub allow_other: bool,
    /// Shown as the source in /proc/mounts and `df`.
    pub fsname: String,
    /// Device nodes in the mount may be opened as devices (mount option `dev`). Off by
    /// default, as fusermount3 does: anyone who can create a node could reach any device.
    pub dev: bool,
    /// Set-user-ID and set-group-ID bits take effect on exec (mount option `suid`).
    pub suid: bool,
    /// The kernel's writeback cache (FUSE_WRITEBACK_CACHE): small writes gather in the
    /// page cache and reach the daemon as large ones, but the kernel then keeps its own
    /// size and times of every file it caches and ignores the cluster's, so a file that
    /// another client grows or truncates shows a stale size here. Only for a mount whose
    /// files no other client changes while they are in use here (docs/ARCHITECTURE.md).
    pub writeback_cache: bool,
}

impl Default for MountOptions {
    fn default() -> MountOptions {
        MountOptions {
            // SAFETY: geteuid cannot fail.
            allow_other: unsafe { libc::geteuid() } == 0,
            fsname: "stripefs".into(),
            dev: false,
            suid: false,
            writeback_cache: false,
        }
    }
}

/// A mounted file system whose request loop has not started yet.
pub struct Mounted {
    session: fuser::Session<fs::StripeFs>,
    shared: std::sync::Arc<fs::Shared>,
    mountpoint: std::path::PathBuf,
}

/// Mounts `client`'s cluster at `mountpoint`. The mount exists when this returns; the
/// kernel queues requests until [`Mounted::run`] serves them.
pub fn mount(client: Client, mountpoint: &Path, opts: &MountOptions) -> io::Result<Mounted> {
    check_mountpoint(mountpoint)?;
    // Canonical, as /proc/self/mountinfo shows it.
    let mountpoint = &std::fs::canonicalize(mountpoint)?;
    check_mount_program()?;
    // default_permissions: the kernel checks modes itself, with the attributes it
    // caches, on every call including those it answers from its caches (an open of a
    // path whose entries are cached never reaches the daemon, so only the kernel can
    // check search permission on each directory then). The metadata server checks again
    // on every request it receives: it does not trust a client's kernel.
    let mut options = vec![
        fuser::MountOption::FSName(opts.fsname.clone()),
        fuser::MountOption::Subtype("stripefs".into()),
        fuser::MountOption::NoAtime,
        fuser::MountOption::DefaultPermissions,
    ];
    if opts.allow_other {
        options.push(fuser::MountOption::AllowOther);
    }
    if opts.dev {
        options.push(fuser::MountOption::Dev);
    }
    if opts.suid {
        options.push(fuser::MountOption::Suid);
    }
    let fs = fs::StripeFs::new(client, mountpoint, opts.writeback_cache);
    let shared = fs.shared();
    let session = fuser::Session::new(fs, mountpoint, &options).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("mounting on {}: {e}", mountpoint.display()),
        )
    })?;
    shared.set_notifier(session.notifier());
    Ok(Mounted {
        session,
        shared,
        mountpoint: mountpoint.clone(),
    })
}

impl Mounted {
    /// Serves kernel requests until the file system is unmounted, then closes every
    /// handle still open (flushing its writes).
    /// Also listens on the mount's control socket (see `control.rs`).
    pub fn run(mut self) -> io::Result<()> {
        control::start(self.shared.clone(), self.mountpoint.clone());
        let r = self.session.run();
        drop(self.session);
        r
    }
}

/// As root the mount is made with mount(2) directly; other users need the setuid helper
/// `fusermount3`, which a fresh machine may not have.
fn check_mount_program() -> io::Result<()> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 || find_in_path("fusermount3") {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        "mounting as a user other than root needs the fusermount3 program, which is not \
         installed: install the fuse3 package (Debian/Ubuntu: `sudo apt-get install fuse3`), \
         or mount as root",
    ))
}

fn find_in_path(program: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path).any(|d| d.join(program).is_file())
}

fn check_mountpoint(mountpoint: &Path) -> io::Result<()> {
    match std::fs::metadata(mountpoint) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("mount point {} is not a directory", mountpoint.display()),
        )),
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => Err(io::Error::new(
            e.kind(),
            format!(
                "mount point {} is a dead mount (its daemon is gone): run `stripefs umount {}` first",
                mountpoint.display(),
                mountpoint.display()
            ),
        )),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("mount point {}: {e}", mountpoint.display()),
        )),
    }
}

/// Unmounts with `fusermount3 -u` (`-z`: lazily, even while files are open). As root,
/// falls back to umount2(2) if fusermount3 is missing.
pub fn unmount(mountpoint: &Path, lazy: bool) -> io::Result<()> {
    let mut cmd = std::process::Command::new("fusermount3");
    cmd.arg("-u");
    if lazy {
        cmd.arg("-z");
    }
    match cmd.arg(mountpoint).output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(io::Error::other(format!(
            "fusermount3 -u {}: {}",
            mountpoint.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => umount2(mountpoint, lazy),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("running fusermount3: {e}"),
        )),
    }
}

fn umount2(mountpoint: &Path, lazy: bool) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(mountpoint.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in mount point"))?;
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    if unsafe { libc::umount2(c.as_ptr(), flags) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("umount {}: {e}", mountpoint.display()),
        ));
    }
    Ok(())
}
