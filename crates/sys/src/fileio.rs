//! File calls the same-host paths and the stores share: what the page cache holds of a
//! range (`cachestat`), and reads with `O_DIRECT` on a new open of a file.

use std::io;
use std::os::fd::AsRawFd;

/// What `cachestat(2)` says of a file range's pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStat {
    /// Pages of the range in the page cache.
    pub cached: u64,
    /// Of those, pages dirty or under writeback: not on the disk yet.
    pub unwritten: u64,
}

/// The page cache's hold on `f`'s range `[offset, offset + len)` (`len` 0: to the end),
/// by `cachestat(2)` (Linux 6.5); `None` where the kernel cannot say.
pub fn cachestat(f: &impl AsRawFd, offset: u64, len: u64) -> Option<CacheStat> {
    /// The same number on every architecture (the common syscall table).
    const SYS_CACHESTAT: libc::c_long = 451;
    // struct cachestat_range { off, len } and struct cachestat { nr_cache, nr_dirty,
    // nr_writeback, nr_evicted, nr_recently_evicted }: all u64.
    let range = [offset, len];
    let mut st = [0u64; 5];
    // SAFETY: both arrays have the kernel's layouts and live across the call; flags 0.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            f.as_raw_fd(),
            range.as_ptr(),
            st.as_mut_ptr(),
            0u32,
        )
    };
    (r == 0).then_some(CacheStat {
        cached: st[0],
        unwritten: st[1] + st[2],
    })
}

/// A new open of `f`'s file for reading with `O_DIRECT` (through `/proc/self/fd`, so the
/// caller's access is checked again; `O_DIRECT` belongs to an open, so `f`'s own stays as
/// it is).
pub fn open_direct_reader(f: &impl AsRawFd) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT | libc::O_CLOEXEC)
        .open(format!("/proc/self/fd/{}", f.as_raw_fd()))
}

/// Reads into `buf` (page-aligned, a whole number of pages) from `d` (opened with
/// `O_DIRECT`) at `offset` (page-aligned) until it is full or the file ends; returns the
/// bytes read. A read short of a page is the file's end (another would need an
/// unaligned offset, which `O_DIRECT` refuses).
pub fn pread_direct(d: &std::fs::File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    const PAGE: usize = 4096;
    let mut done = 0;
    while done < buf.len() {
        match d.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) if n % PAGE != 0 => return Ok(done + n),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}
