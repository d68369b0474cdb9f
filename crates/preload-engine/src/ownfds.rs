//! The engine's own descriptors (sockets to the servers, the short-circuit socket and
//! the descriptors it receives, pipes, the mount's control socket), kept out of the
//! program's way: moved to the top of the descriptor table as they are made
//! (`stripefs_rpc::fdplace`), so that the program's own descriptors get the numbers they
//! get without the library, and spared by the program's `close_range` and `closefrom`,
//! which would otherwise close them under the client, whose next frame would then go to
//! whatever file the program opened at that number.

use std::collections::BTreeSet;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::sync::{Mutex, OnceLock};

static OWN: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn own() -> std::sync::MutexGuard<'static, BTreeSet<i32>> {
    OWN.lock().unwrap_or_else(|p| p.into_inner())
}

/// The lowest number the engine's descriptors take: the top 256 numbers the process may
/// open (a quarter of them under a smaller limit).
fn base() -> i32 {
    static BASE: OnceLock<i32> = OnceLock::new();
    *BASE.get_or_init(|| {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit fills the struct it is given.
        let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
            lim.rlim_cur.min(i32::MAX as u64) as i32
        } else {
            1024
        };
        (soft - (soft / 4).min(256)).max(3)
    })
}

fn is_open(fd: i32) -> bool {
    // SAFETY: F_GETFD reads a flag of a descriptor number; a closed one answers EBADF.
    unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_GETFD) >= 0 }
}

/// Moves `fd` to the top of the table (if there is room) and remembers it as the
/// engine's. Straight system calls, so that no hook takes them for the program's.
pub fn place(fd: OwnedFd) -> OwnedFd {
    let raw = fd.as_raw_fd();
    let mut own = own();
    own.retain(|&f| is_open(f));
    if raw >= base() {
        own.insert(raw);
        return fd;
    }
    // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor of the same file, or fails.
    let high = unsafe { libc::syscall(libc::SYS_fcntl, raw, libc::F_DUPFD_CLOEXEC, base()) };
    if high < 0 {
        // The top of the table is full: the descriptor stays where it is, still spared.
        own.insert(raw);
        return fd;
    }
    let high = high as i32;
    let raw = fd.into_raw_fd();
    // SAFETY: `raw` was ours alone; its file stays open through `high`.
    unsafe { libc::syscall(libc::SYS_close, raw) };
    own.insert(high);
    // SAFETY: a descriptor just made, owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(high) }
}

/// Closes `first..=last` as close_range(2) does (`flags` as its), except the engine's
/// own descriptors: the range is closed around them.
pub fn close_range_sparing(first: u32, last: u32, flags: i32) -> i32 {
    let spared: Vec<u32> = {
        let mut own = own();
        own.retain(|&f| is_open(f));
        own.iter()
            .map(|&f| f as u32)
            .filter(|&f| f >= first && f <= last)
            .collect()
    };
    let mut from = first;
    let mut result = 0;
    for f in spared {
        if f > from {
            // SAFETY: close_range on numbers the program asked to close.
            let r = unsafe { crate::real::close_range(from, f - 1, flags) };
            if r != 0 && result == 0 {
                result = r;
            }
        }
        from = f + 1;
    }
    if from <= last && from >= first {
        // SAFETY: as above.
        let r = unsafe { crate::real::close_range(from, last, flags) };
        if r != 0 && result == 0 {
            result = r;
        }
    }
    result
}
