//! The fence of direct writes (docs/protocol.md "Short-circuit socket"). A descriptor
//! handed to a client cannot be taken back, so a grant whose client did not say it is
//! done (the connection broke or timed out, the message was malformed, the server
//! restarted) is over only once the client has closed that descriptor: until then a
//! `pwrite` of the client's may still land, over bytes another writer got since.
//!
//! Every grant therefore hands the client, beside its write descriptors, a descriptor of
//! this server's fence file (`direct-grants.lock` in its first target's root) that holds
//! a read lock on one byte of its own. The lock belongs to that open file
//! (`F_OFD_SETLK`), in whichever process has a descriptor of it, and goes when the last
//! one is closed: when the client closes it after its last `pwrite` returned, or when the
//! client process ends (its threads finish their writes first). So:
//!
//! - a grant that ends without the client's *done* keeps its blocks locked until its byte
//!   can be locked for writing ([`GrantFence::wait`]);
//! - a server starting on these targets waits until it can lock every byte (no grant of
//!   an earlier run is held any more; [`GrantFence::open`]) before it serves anything.

use crate::storage::{FsFile, ObjectFile};
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The fence file's name, in a target's root (beside the objects directory).
pub const FENCE_FILE: &str = "direct-grants.lock";
/// Waits longer than this are logged (once per wait), naming the file.
const TELL_AFTER: Duration = Duration::from_secs(2);

/// One server's fence file, open for the server's life.
#[derive(Debug)]
pub struct GrantFence {
    path: PathBuf,
    /// Kept open so that later opens (through `/proc/self/fd`) reach this very file,
    /// even if someone replaces the name.
    file: File,
    next: AtomicU64,
}

/// Locks `[start, start + len)` of `f` (`len` 0: to the end, however far) in `kind`
/// (`F_RDLCK`, `F_WRLCK` or `F_UNLCK`) for `f`'s open file, without waiting; `false` if
/// another open file holds a conflicting lock.
fn ofd_lock(f: &File, kind: libc::c_int, start: u64, len: u64) -> io::Result<bool> {
    // SAFETY: a zeroed `flock` is a valid value (l_pid must be 0 for OFD locks).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = i64::try_from(start).map_err(|_| io::Error::other("fence byte out of range"))?;
    fl.l_len = i64::try_from(len).map_err(|_| io::Error::other("fence length out of range"))?;
    // SAFETY: fcntl on a descriptor we own, with a pointer to a live flock.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_SETLK, &fl as *const libc::flock) };
    if r == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN | libc::EACCES) => Ok(false),
        _ => Err(e),
    }
}

impl GrantFence {
    /// Opens (creating) the fence file in `root` and waits until no grant of an earlier
    /// run is held, logging while it waits.
    pub fn open(root: &Path) -> io::Result<GrantFence> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = root.join(FENCE_FILE);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let fence = GrantFence {
            path,
            file,
            next: AtomicU64::new(0),
        };
        fence.wait_for(
            0,
            0,
            "a direct write granted by an earlier run of this server",
        )?;
        Ok(fence)
    }

    /// A new open file of the fence file (its own locks), `write` for a write lock.
    fn reopen(&self, write: bool) -> io::Result<File> {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .write(write)
            .custom_flags(libc::O_CLOEXEC)
            .open(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
    }

    /// A descriptor for one grant, holding a read lock on its own byte, and that byte's
    /// number for [`GrantFence::wait`].
    pub fn take_file(&self) -> io::Result<(File, u64)> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let f = self.reopen(false)?;
        if !ofd_lock(&f, libc::F_RDLCK, n, 1)? {
            // Only a server waiting on this very byte holds it for writing, and it
            // waits on no byte it has not handed out.
            return Err(io::Error::other(format!(
                "{}: byte {n} is locked for writing",
                self.path.display()
            )));
        }
        Ok((f, n))
    }

    /// Waits until grant `n`'s descriptor is closed in every process.
    pub fn wait_closed(&self, n: u64) -> io::Result<()> {
        self.wait_for(
            n,
            1,
            "a client's direct write whose grant ended without its answer",
        )
    }

    /// Waits until `[start, start + len)` can be locked for writing (then unlocks it).
    fn wait_for(&self, start: u64, len: u64, what: &str) -> io::Result<()> {
        let f = self.reopen(true)?;
        let began = Instant::now();
        let mut told = false;
        let mut nap = Duration::from_micros(200);
        while !ofd_lock(&f, libc::F_WRLCK, start, len)? {
            if !told && began.elapsed() > TELL_AFTER {
                tracing::warn!(
                    "waiting for {what} to end: a process on this host still holds a descriptor of {} (see `fuser`)",
                    self.path.display()
                );
                told = true;
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(50));
        }
        if told {
            tracing::warn!("{what} ended after {:.1} s", began.elapsed().as_secs_f64());
        }
        // Closing `f` drops its lock.
        Ok(())
    }
}

/// The fence of a store's direct writes: a token per grant that the client holds as long
/// as it may still write, and a wait for the token's last holder to let go.
pub trait Fence: Send + Sync + std::fmt::Debug {
    /// A token for a new grant (handed to the client beside its write descriptors) and
    /// its number for [`Fence::wait`].
    fn take(&self) -> io::Result<(Arc<dyn ObjectFile>, u64)>;
    /// Waits until grant `n`'s token is let go by every holder.
    fn wait(&self, n: u64) -> io::Result<()>;
}

impl Fence for GrantFence {
    fn take(&self) -> io::Result<(Arc<dyn ObjectFile>, u64)> {
        let (f, n) = self.take_file()?;
        Ok((Arc::new(FsFile::from(f)), n))
    }

    fn wait(&self, n: u64) -> io::Result<()> {
        self.wait_closed(n)
    }
}

/// The fence of a store in memory (the simulator's): a grant's token is an object shared
/// with the client in the same process, over once the fence holds the last reference.
#[derive(Default)]
pub struct MemFence {
    tokens: Mutex<HashMap<u64, Arc<dyn ObjectFile>>>,
    next: AtomicU64,
}

impl std::fmt::Debug for MemFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemFence").finish_non_exhaustive()
    }
}

/// How long [`MemFence::wait`] waits for a token's holders before it gives up (the
/// grant's blocks then stay locked, as for a real fence that cannot be waited on).
const MEM_FENCE_PATIENCE: Duration = Duration::from_secs(30);

impl Fence for MemFence {
    fn take(&self) -> io::Result<(Arc<dyn ObjectFile>, u64)> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let token: Arc<dyn ObjectFile> = Arc::new(Token);
        self.tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(n, token.clone());
        Ok((token, n))
    }

    fn wait(&self, n: u64) -> io::Result<()> {
        let token = self
            .tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&n);
        let Some(token) = token else {
            return Ok(());
        };
        let began = Instant::now();
        while Arc::strong_count(&token) > 1 {
            if began.elapsed() > MEM_FENCE_PATIENCE {
                return Err(io::Error::other(format!(
                    "grant {n}'s token is still held after {MEM_FENCE_PATIENCE:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }
}

/// A grant's token in memory: holds nothing, takes no I/O.
struct Token;

impl ObjectFile for Token {
    fn read_at(&self, _buf: &mut [u8], _offset: u64) -> io::Result<usize> {
        Err(not_a_file())
    }
    fn write_at(&self, _buf: &[u8], _offset: u64) -> io::Result<()> {
        Err(not_a_file())
    }
    fn size_bytes(&self) -> io::Result<u64> {
        Ok(0)
    }
    fn set_len(&self, _len: u64) -> io::Result<()> {
        Err(not_a_file())
    }
    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }
    fn punch(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Err(not_a_file())
    }
    fn allocate(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Err(not_a_file())
    }
    fn allocated_bytes(&self) -> io::Result<u64> {
        Ok(0)
    }
}

fn not_a_file() -> io::Error {
    io::Error::from_raw_os_error(libc::EBADF)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A grant's byte is free once every descriptor of it is closed (here: the server's
    /// copy and a duplicate standing for the client's), and not before; a new fence on
    /// the same root waits for grants of the old one.
    #[test]
    fn a_grant_is_over_only_when_every_copy_of_its_descriptor_is_closed() {
        let dir = tempfile::tempdir().unwrap();
        let fence = Arc::new(GrantFence::open(dir.path()).unwrap());
        let (mine, n) = fence.take_file().unwrap();
        let (other, m) = fence.take_file().unwrap();
        assert_ne!(n, m);
        let client = mine.try_clone().unwrap();
        drop(mine);
        let f = fence.clone();
        let waiter = std::thread::spawn(move || f.wait_closed(n).unwrap());
        std::thread::sleep(Duration::from_millis(100));
        assert!(!waiter.is_finished(), "the client still holds the grant");
        // A grant of another byte is no obstacle.
        let (_third, _) = fence.take_file().unwrap();
        drop(client);
        waiter.join().unwrap();

        // A second run of the server on the same root waits for the first run's grants.
        let root = dir.path().to_path_buf();
        let restart = std::thread::spawn(move || GrantFence::open(&root).unwrap());
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            !restart.is_finished(),
            "a grant of the first run is still held"
        );
        drop(other);
        drop(_third);
        let again = restart.join().unwrap();
        let (_f, k) = again.take_file().unwrap();
        assert_eq!(k, 0);
    }

    /// In memory: a grant is over once every clone of its token is dropped, and a token
    /// of another grant is no obstacle.
    #[test]
    fn a_memory_grant_is_over_when_the_last_token_is_dropped() {
        let fence = Arc::new(MemFence::default());
        let (token, n) = fence.take().unwrap();
        let (_other, m) = fence.take().unwrap();
        assert_ne!(n, m);
        let f = fence.clone();
        let waiter = std::thread::spawn(move || f.wait(n).unwrap());
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiter.is_finished(), "the client still holds the token");
        drop(token);
        waiter.join().unwrap();
        // Waiting again, or on a grant never made, returns at once.
        fence.wait(n).unwrap();
        fence.wait(999).unwrap();
    }
}
