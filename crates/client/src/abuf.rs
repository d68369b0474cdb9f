//! Page-aligned byte buffers for large writes: a short-circuit direct write hands its
//! buffer to the disk as it is (`O_DIRECT` needs the address aligned), so the bytes a
//! client gathers for a server are put in one of these instead of a `Vec`.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::ptr::NonNull;

/// The alignment of every buffer: a page, which covers any disk's logical block.
pub const ALIGN: usize = 4096;

pub(crate) struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    /// Bytes allocated (at least `len`, a multiple of [`GRAIN`]); 0 for none.
    cap: usize,
}

/// Capacities are rounded up to this, so that buffers of similar writes are reused.
const GRAIN: usize = 64 << 10;
/// Freed buffers kept for reuse, at most this many and this many bytes in all: a stream
/// of large writes would otherwise map, fault in (zeroed by the kernel) and unmap a
/// fresh buffer for each (measured: about a tenth of a colocated writer's CPU).
const POOL_BUFFERS: usize = 16;
const POOL_BYTES: usize = 16 << 20;

/// An allocation of `cap` bytes at `ALIGN`, owned by whoever holds it.
struct Free(NonNull<u8>, usize);
// SAFETY: an allocation owned by the pool, touched by one holder at a time.
unsafe impl Send for Free {}

static POOL: std::sync::Mutex<Vec<Free>> = std::sync::Mutex::new(Vec::new());

fn pool() -> std::sync::MutexGuard<'static, Vec<Free>> {
    POOL.lock().unwrap_or_else(|p| p.into_inner())
}

// SAFETY: the buffer owns its allocation, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access is read-only through `Deref`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// The concatenation of `parts`, which must add up to `len` bytes.
    pub fn gathered<'a>(len: usize, parts: impl IntoIterator<Item = &'a [u8]>) -> AlignedBuf {
        let cap = len.div_ceil(GRAIN) * GRAIN;
        let ptr = if len == 0 {
            // Never dereferenced for a length of 0; aligned as promised.
            NonNull::new(ALIGN as *mut u8).expect("not null")
        } else {
            let reused = {
                let mut p = pool();
                let i = p.iter().position(|f| f.1 == cap);
                i.map(|i| p.swap_remove(i).0)
            };
            reused.unwrap_or_else(|| {
                let layout = Self::layout(cap);
                // SAFETY: a layout of non-zero size.
                NonNull::new(unsafe { alloc(layout) }).unwrap_or_else(|| handle_alloc_error(layout))
            })
        };
        // From here the buffer owns the allocation (freed on a panic below too).
        let mut buf = AlignedBuf { ptr, len: 0, cap };
        let mut at = 0;
        for p in parts {
            assert!(at + p.len() <= len, "parts longer than the buffer");
            // SAFETY: `at + p.len() <= len` bytes of the allocation; `p` is another
            // allocation (a caller's slice), so they do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), ptr.as_ptr().add(at), p.len()) };
            at += p.len();
        }
        // Every byte is written before the buffer is read (uninitialised otherwise).
        assert_eq!(at, len, "parts shorter than the buffer");
        buf.len = len;
        buf
    }

    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len, ALIGN).expect("a buffer size below isize::MAX")
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` initialised bytes (see `gathered`), owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
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
        // SAFETY: allocated in `gathered` with this layout, and not in the pool.
        unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.cap)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathers_parts_into_an_aligned_buffer() {
        for len in [0usize, 1, 4095, 4096, 70_000, 1 << 20] {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            let cut = len / 3;
            let b = AlignedBuf::gathered(len, [&src[..cut], &src[cut..]]);
            assert_eq!(b.as_ptr() as usize % ALIGN, 0, "{len}");
            assert_eq!(&b[..], &src[..], "{len}");
        }
    }

    #[test]
    fn freed_buffers_are_reused_with_their_bytes_replaced() {
        let a = AlignedBuf::gathered(200_000, [&vec![7u8; 200_000][..]]);
        let at = a.as_ptr() as usize;
        drop(a);
        // The same capacity (no other test here asks for 256 KiB): the same buffer.
        let b = AlignedBuf::gathered(250_000, [&vec![9u8; 250_000][..]]);
        assert_eq!(b.as_ptr() as usize, at, "not reused");
        assert!(b.iter().all(|&x| x == 9) && b.len() == 250_000);
    }

    #[test]
    fn a_live_buffer_is_never_handed_out_again() {
        // 320 KiB: a capacity no other test here asks for.
        let bufs: Vec<_> = (0..8u8)
            .map(|i| AlignedBuf::gathered(300_000, [&vec![i; 300_000][..]]))
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
    #[should_panic(expected = "shorter")]
    fn parts_must_fill_it() {
        let _ = AlignedBuf::gathered(10, [&[1u8, 2][..]]);
    }
}
