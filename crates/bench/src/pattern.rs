//! The data pattern benchmarks write and verify. The byte at file offset `o` is
//! `base[o % BASE_LEN]` of a random base buffer, except that the first 16 bytes of every
//! 4 KiB block of the file (at offsets that are multiples of 4096) are stamped with that
//! offset and the run's seed. Any offset and any length work (unaligned transfers of any
//! size): writing costs one copy, verifying one comparison, and a block in the wrong
//! place, a stale block or a flipped byte is caught.

use rand::{RngCore, SeedableRng};

pub const STAMP_BLOCK: usize = 4096;
const STAMP_LEN: usize = 16;
/// Length of the random base; a multiple of [`STAMP_BLOCK`], so that inside one 4 KiB
/// block of the file the base bytes are contiguous.
const BASE_LEN: usize = 1 << 20;

pub struct Pattern {
    seed: u64,
    base: Vec<u8>,
}

/// One piece of a buffer that lies inside one 4 KiB block of the file: the buffer range,
/// the file offset of its block, the stamp bytes it holds and where its base bytes start.
struct Piece {
    /// Buffer index just past the piece (it starts at `stamp.0`).
    end: usize,
    /// File offset of the 4 KiB block holding the piece.
    block: u64,
    /// Buffer index range of the piece's stamp bytes (possibly empty) and the first of
    /// them as an index into the stamp.
    stamp: (usize, usize, usize),
    /// Index in the base of the byte at buffer index `stamp.1`.
    base_at: usize,
}

fn pieces(offset: u64, len: usize) -> impl Iterator<Item = Piece> {
    let end = offset + len as u64;
    let mut at = offset;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let block = at - at % STAMP_BLOCK as u64;
        let piece_end = (block + STAMP_BLOCK as u64).min(end);
        let stamp_end = (block + STAMP_LEN as u64).clamp(at, piece_end);
        let rel = |o: u64| (o - offset) as usize;
        let p = Piece {
            end: rel(piece_end),
            block,
            stamp: (
                rel(at),
                rel(stamp_end),
                (at - block).min(STAMP_LEN as u64) as usize,
            ),
            base_at: (stamp_end % BASE_LEN as u64) as usize,
        };
        at = piece_end;
        Some(p)
    })
}

impl Pattern {
    /// The pattern of run `seed`. `_len` (the largest transfer the caller makes) is
    /// kept for the callers' sake: any length works.
    pub fn new(seed: u64, _len: usize) -> Pattern {
        let mut base = vec![0u8; BASE_LEN];
        rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut base);
        Pattern { seed, base }
    }

    /// Fills `buf` with the bytes that belong at file offset `offset`.
    pub fn fill(&self, offset: u64, buf: &mut [u8]) {
        for p in pieces(offset, buf.len()) {
            let stamp = stamp_of(p.block, self.seed);
            let (s0, s1, si) = p.stamp;
            buf[s0..s1].copy_from_slice(&stamp[si..si + (s1 - s0)]);
            let n = p.end - s1;
            buf[s1..p.end].copy_from_slice(&self.base[p.base_at..p.base_at + n]);
        }
    }

    /// Checks that `buf` holds what belongs at `offset`; returns the file offset of the
    /// 4 KiB block holding the first wrong byte.
    pub fn verify(&self, offset: u64, buf: &[u8]) -> Result<(), u64> {
        for p in pieces(offset, buf.len()) {
            let stamp = stamp_of(p.block, self.seed);
            let (s0, s1, si) = p.stamp;
            let n = p.end - s1;
            if buf[s0..s1] != stamp[si..si + (s1 - s0)]
                || buf[s1..p.end] != self.base[p.base_at..p.base_at + n]
            {
                return Err(p.block);
            }
        }
        Ok(())
    }
}

fn stamp_of(block: u64, seed: u64) -> [u8; STAMP_LEN] {
    let mut s = [0u8; STAMP_LEN];
    s[..8].copy_from_slice(&block.to_le_bytes());
    s[8..].copy_from_slice(&(seed ^ 0x5354_5246_5354_5246).to_le_bytes());
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_misplaced_and_corrupt_blocks() {
        let p = Pattern::new(7, 3 * STAMP_BLOCK);
        let mut a = vec![0u8; 3 * STAMP_BLOCK];
        p.fill(8192, &mut a);
        assert_eq!(p.verify(8192, &a), Ok(()));
        assert_eq!(p.verify(0, &a), Err(0));
        a[5000] ^= 1;
        assert_eq!(p.verify(8192, &a), Err(8192 + 4096));
        let q = Pattern::new(8, 3 * STAMP_BLOCK);
        let mut b = vec![0u8; 3 * STAMP_BLOCK];
        q.fill(8192, &mut b);
        assert!(p.verify(8192, &b).is_err());
    }

    /// Unaligned transfers of odd sizes: the bytes at an offset do not depend on how the
    /// file was cut into transfers, and a shift by one byte or a flipped stamp byte is
    /// caught.
    #[test]
    fn any_offset_and_length() {
        let p = Pattern::new(11, 0);
        let len = 3 * BASE_LEN + 12345;
        let mut whole = vec![0u8; len];
        p.fill(0, &mut whole);
        for (off, n) in [
            (0u64, 47008usize),
            (47008, 47008),
            (4090, 20),
            (4100, 30),
            (13, 5000),
        ] {
            let mut part = vec![0u8; n];
            p.fill(off, &mut part);
            assert_eq!(part, whole[off as usize..off as usize + n], "{off}+{n}");
            assert_eq!(p.verify(off, &part), Ok(()));
            if off > 0 {
                assert!(p.verify(off - 1, &part).is_err(), "shifted {off}+{n}");
            }
        }
        // Stamps at every 4 KiB boundary, also across the base's wrap-around.
        assert_eq!(
            whole[BASE_LEN..BASE_LEN + 8],
            (BASE_LEN as u64).to_le_bytes()
        );
        assert_eq!(p.verify(0, &whole), Ok(()));
        // A flipped stamp byte in a piece that starts inside the stamp.
        let mut part = vec![0u8; 100];
        p.fill(4096 + 5, &mut part);
        part[2] ^= 0x80;
        assert_eq!(p.verify(4096 + 5, &part), Err(4096));
        // A flipped base byte beyond 1 MiB.
        let mut w = whole.clone();
        w[2 * BASE_LEN + 5000] ^= 1;
        assert_eq!(p.verify(0, &w), Err((2 * BASE_LEN + 4096) as u64));
    }
}
