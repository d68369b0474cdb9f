//! The data pattern benchmarks write and verify: a random base buffer, with the first 16
//! bytes of every 4 KiB block stamped with its file offset and the run's seed. Writing
//! costs one copy; verifying costs one comparison; a block in the wrong place, a stale
//! block or a flipped byte is caught.

use rand::{RngCore, SeedableRng};

pub const STAMP_BLOCK: usize = 4096;

pub struct Pattern {
    seed: u64,
    base: Vec<u8>,
}

impl Pattern {
    pub fn new(seed: u64, len: usize) -> Pattern {
        let mut base = vec![0u8; len];
        rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut base);
        Pattern { seed, base }
    }

    /// Fills `buf` with the bytes that belong at file offset `offset`. `buf` is at most
    /// the base length and `offset` a multiple of [`STAMP_BLOCK`].
    pub fn fill(&self, offset: u64, buf: &mut [u8]) {
        assert!(buf.len() <= self.base.len());
        assert_eq!(offset % STAMP_BLOCK as u64, 0);
        buf.copy_from_slice(&self.base[..buf.len()]);
        for (i, block) in buf.chunks_mut(STAMP_BLOCK).enumerate() {
            let at = offset + (i * STAMP_BLOCK) as u64;
            stamp(block, at, self.seed);
        }
    }

    /// Checks that `buf` holds what belongs at `offset`; returns the first bad offset.
    pub fn verify(&self, offset: u64, buf: &[u8]) -> Result<(), u64> {
        assert!(buf.len() <= self.base.len());
        for (i, block) in buf.chunks(STAMP_BLOCK).enumerate() {
            let at = offset + (i * STAMP_BLOCK) as u64;
            let mut want = [0u8; 16];
            stamp(&mut want, at, self.seed);
            let n = block.len().min(16);
            let base = &self.base[i * STAMP_BLOCK..i * STAMP_BLOCK + block.len()];
            if block[..n] != want[..n] || block[n..] != base[n..] {
                return Err(at);
            }
        }
        Ok(())
    }
}

fn stamp(block: &mut [u8], offset: u64, seed: u64) {
    let mut s = [0u8; 16];
    s[..8].copy_from_slice(&offset.to_le_bytes());
    s[8..].copy_from_slice(&(seed ^ 0x5354_5246_5354_5246).to_le_bytes());
    let n = block.len().min(16);
    block[..n].copy_from_slice(&s[..n]);
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
}
