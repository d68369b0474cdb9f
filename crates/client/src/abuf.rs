//! Page-aligned byte buffers for large writes and reads: a short-circuit direct write
//! hands its buffer to the disk as it is (`O_DIRECT` needs the address aligned), so the
//! bytes a client gathers for a server are put in one of these instead of a `Vec`.
//!
//! Applications get them as [`IoBuf`]: a buffer they fill themselves and
//! hand to [`File::write_buf`](crate::File::write_buf) is sent as it is when its bytes go
//! to one server (no copy into a buffer of the client's), and a read into one can go from
//! the disk straight into it (`O_DIRECT`) on the short-circuit path.

use std::ptr::NonNull;

/// The alignment of every buffer: a page, which covers any disk's logical block.
pub const ALIGN: usize = 4096;

/// A page-aligned buffer of bytes, from a small process-wide pool.
///
/// [`IoBuf::new`] gives `len` bytes to fill (their old contents are unspecified: zeros
/// or bytes of an earlier buffer of this process). Dereferences to `[u8]`.
pub struct IoBuf {
    ptr: NonNull<u8>,
    len: usize,
    /// Bytes mapped (at least `len`, a multiple of [`GRAIN`]); 0 for none.
    cap: usize,
}

/// Capacities are rounded up to this, so that buffers of similar writes are reused.
const GRAIN: usize = 64 << 10;
/// Freed buffers kept for reuse, at most this many and this many bytes in all: a stream
/// of large writes would otherwise map, fault in (zeroed by the kernel) and unmap a
/// fresh buffer for each (measured: about a tenth of a colocated writer's CPU). As much
/// as one handle's default write window, since its writes complete in bursts (with 16
/// MiB, a tenth of a colocated writer's samples were still in faults and `munmap`).
const POOL_BUFFERS: usize = 64;
const POOL_BYTES: usize = crate::DEFAULT_WRITE_WINDOW_BYTES as usize;

/// A mapping of `cap` bytes, owned by whoever holds it; every byte initialised (the
/// kernel maps zeros, and whatever is written later stays).
struct Free(NonNull<u8>, usize);
// SAFETY: a mapping owned by the pool, touched by one holder at a time.
unsafe impl Send for Free {}

static POOL: std::sync::Mutex<Vec<Free>> = std::sync::Mutex::new(Vec::new());

fn pool() -> std::sync::MutexGuard<'static, Vec<Free>> {
    POOL.lock().unwrap_or_else(|p| p.into_inner())
}

// SAFETY: the buffer owns its mapping, like a Vec<u8>.
unsafe impl Send for IoBuf {}
// SAFETY: shared access is read-only through `Deref`.
unsafe impl Sync for IoBuf {}

impl IoBuf {
    /// A buffer of `len` bytes to fill: a freed one of the same capacity if the pool
    /// holds one (with its old bytes), else fresh zeroed pages.
    pub fn new(len: usize) -> IoBuf {
        let cap = len.div_ceil(GRAIN) * GRAIN;
        if cap == 0 {
            // Never dereferenced for a length of 0; aligned as promised.
            let ptr = NonNull::new(ALIGN as *mut u8).expect("not null");
            return IoBuf {
                ptr,
                len: 0,
                cap: 0,
            };
        }
        let reused = {
            let mut p = pool();
            // The one freed last: its pages are the likeliest to be in a cache still.
            let i = p.iter().rposition(|f| f.1 == cap);
            i.map(|i| p.swap_remove(i).0)
        };
        let ptr = reused.unwrap_or_else(|| fresh(cap));
        IoBuf { ptr, len, cap }
    }

    /// The concatenation of `parts`, which must add up to `len` bytes.
    pub(crate) fn gathered<'a>(len: usize, parts: impl IntoIterator<Item = &'a [u8]>) -> IoBuf {
        let mut buf = IoBuf::new(len);
        let mut at = 0;
        for p in parts {
            assert!(at + p.len() <= len, "parts longer than the buffer");
            buf[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        assert_eq!(at, len, "parts shorter than the buffer");
        buf
    }
}

/// A transparent huge page: fresh buffers are mapped in these where they can, since a
/// huge page costs one fault where 512 small ones cost 512 (measured on this project's
/// machine: filling fresh 2 MiB buffers took 0.80 s per GiB in small pages, 0.09 s in
/// huge ones, against 0.04 s for buffers reused).
const HUGE: usize = 2 << 20;
/// Whether the kernel maps IoBufs in huge pages (transparent huge pages `always` or
/// `madvise`), read once.
pub(crate) fn huge_pages() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .is_ok_and(|s| s.contains("[always]") || s.contains("[madvise]"))
    })
}

/// Capacities from this up share a huge page between several buffers (the others go to
/// the pool); smaller ones get pages of their own.
const SHARE_HUGE_FROM: usize = 256 << 10;

/// A fresh buffer of `cap` bytes (zeroed pages): in huge pages where `cap` allows, a
/// smaller one cut from a huge page whose other cuts go to the pool.
fn fresh(cap: usize) -> NonNull<u8> {
    if cap >= HUGE {
        return map_aligned(cap, true);
    }
    let cuts = HUGE / cap;
    if cap < SHARE_HUGE_FROM || cuts < 2 {
        return map_aligned(cap, false);
    }
    let slab = map_aligned(HUGE, true);
    let base = slab.as_ptr();
    let (spare_at, spare) = (cuts * cap, HUGE - cuts * cap);
    if spare > 0 {
        // SAFETY: the slab's tail past its last cut, never handed out.
        unsafe { unmap(base.add(spare_at), spare) };
    }
    let mut p = pool();
    for i in 1..cuts {
        // SAFETY: cut i of the slab, `cap` bytes inside its mapping, owned by nobody.
        let cut = unsafe { NonNull::new_unchecked(base.add(i * cap)) };
        let held: usize = p.iter().map(|f| f.1).sum();
        if p.len() < POOL_BUFFERS && held + cap <= POOL_BYTES {
            p.push(Free(cut, cap));
        } else {
            // SAFETY: as above; never handed out.
            unsafe { unmap(cut.as_ptr(), cap) };
        }
    }
    slab
}

/// Maps `len` bytes of fresh zeroed memory at a page-aligned address (every mapping is),
/// or, with `huge`, at a huge-page-aligned one advised for huge pages; faults its pages
/// in with one call, not one trap per page as the first writes into them would. Both
/// advices are hints: where the kernel refuses them, small pages fault in as written.
fn map_aligned(len: usize, huge: bool) -> NonNull<u8> {
    let extra = if huge { HUGE } else { 0 };
    // SAFETY: an anonymous private mapping; no file, no fixed address.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len + extra,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        let e = std::io::Error::last_os_error();
        panic!("cannot map a buffer of {len} bytes: {e}");
    }
    let raw = raw.cast::<u8>();
    let head = if huge { raw.align_offset(HUGE) } else { 0 };
    // SAFETY: `head <= extra`, so `[raw + head, raw + head + len)` lies in the mapping;
    // what is cut off before and after it is ours and unused.
    let p = unsafe {
        let p = raw.add(head);
        if head > 0 {
            unmap(raw, head);
        }
        if extra > head {
            unmap(p.add(len), extra - head);
        }
        if huge {
            libc::madvise(p.cast(), len, libc::MADV_HUGEPAGE);
        }
        libc::madvise(p.cast(), len, libc::MADV_POPULATE_WRITE);
        p
    };
    NonNull::new(p).expect("mmap never maps address 0 here")
}

/// Unmaps `len` bytes at `p`.
///
/// # Safety
/// `[p, p + len)` was mapped by this module and nobody uses it any more.
unsafe fn unmap(p: *mut u8, len: usize) {
    // SAFETY: as the caller promises.
    let r = unsafe { libc::munmap(p.cast(), len) };
    debug_assert_eq!(r, 0, "munmap of our own mapping");
}

impl std::ops::Deref for IoBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` initialised bytes of the mapping (see `Free`), owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for IoBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `deref`; `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl std::fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IoBuf({} bytes at {:p})", self.len, self.ptr)
    }
}

impl Drop for IoBuf {
    fn drop(&mut self) {
        if self.cap == 0 {
            return;
        }
        let mut p = pool();
        let held: usize = p.iter().map(|f| f.1).sum();
        if p.len() < POOL_BUFFERS && held + self.cap <= POOL_BYTES {
            p.push(Free(self.ptr, self.cap));
            return;
        }
        drop(p);
        // SAFETY: mapped by `fresh` with this length, and not in the pool.
        unsafe { unmap(self.ptr.as_ptr(), self.cap) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pool is the process's: the tests that look at what it hands out take turns.
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn turn() -> std::sync::MutexGuard<'static, ()> {
        TURN.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Empties the pool, so that a buffer freed next fits in it whatever earlier tests
    /// left there (a full pool unmaps what is freed instead of keeping it).
    fn drain_pool() {
        let frees = std::mem::take(&mut *pool());
        for f in frees {
            // SAFETY: a pooled mapping of this length, owned by nobody.
            unsafe { unmap(f.0.as_ptr(), f.1) };
        }
    }

    #[test]
    fn gathers_parts_into_an_aligned_buffer() {
        let _t = turn();
        for len in [0usize, 1, 4095, 4096, 70_000, 1 << 20] {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            let cut = len / 3;
            let b = IoBuf::gathered(len, [&src[..cut], &src[cut..]]);
            assert_eq!(b.as_ptr() as usize % ALIGN, 0, "{len}");
            assert_eq!(&b[..], &src[..], "{len}");
        }
    }

    #[test]
    fn freed_buffers_are_reused_with_their_bytes_replaced() {
        let _t = turn();
        drain_pool();
        let a = IoBuf::gathered(200_000, [&vec![7u8; 200_000][..]]);
        let at = a.as_ptr() as usize;
        drop(a);
        // The same capacity (no other test here asks for 256 KiB): the same buffer.
        let b = IoBuf::gathered(250_000, [&vec![9u8; 250_000][..]]);
        assert_eq!(b.as_ptr() as usize, at, "not reused");
        assert!(b.iter().all(|&x| x == 9) && b.len() == 250_000);
    }

    #[test]
    fn a_live_buffer_is_never_handed_out_again() {
        let _t = turn();
        // 320 KiB: a capacity no other test here asks for.
        let bufs: Vec<_> = (0..8u8)
            .map(|i| IoBuf::gathered(300_000, [&vec![i; 300_000][..]]))
            .collect();
        let mut at: Vec<_> = bufs.iter().map(|b| b.as_ptr() as usize).collect();
        at.sort();
        at.dedup();
        assert_eq!(at.len(), 8, "one allocation handed out twice");
        for (i, b) in bufs.iter().enumerate() {
            assert!(b.iter().all(|&x| x == i as u8), "buffer {i} overwritten");
        }
    }

    #[test]
    fn a_new_buffer_is_aligned_writable_and_zero_when_fresh() {
        // 448 KiB: a capacity no other test here asks for, so the buffer is fresh.
        let mut b = IoBuf::new(450_000);
        assert_eq!(b.as_ptr() as usize % ALIGN, 0);
        assert_eq!(b.len(), 450_000);
        assert!(b.iter().all(|&x| x == 0), "fresh pages are zeros");
        b[449_999] = 5;
        b[0] = 6;
        assert_eq!((b[0], b[449_999]), (6, 5));
        assert_eq!(IoBuf::new(0).len(), 0);
    }

    #[test]
    #[should_panic(expected = "shorter")]
    fn parts_must_fill_it() {
        let _ = IoBuf::gathered(10, [&[1u8, 2][..]]);
    }
}
