//! Partial blocks whose unwritten bytes are known to be zeros (docs/objects.md, "Writes
//! into known zeros").
//!
//! A partial write into a hole is written in place: the block then holds the write's
//! bytes and zeros elsewhere. Ranks writing interleaved unaligned records share every
//! edge block with a neighbour, who comes second and finds the block written. Knowing
//! which of its bytes are still the zeros of the first write, the server can put the
//! second write in place too, and compute the block's new CRC from the stored one and
//! the new bytes alone, without reading the block: CRC32C is affine, so for blocks of
//! one length `crc(a ^ b) = crc(a) ^ crc(b) ^ crc(zeros)`, and a block whose bytes
//! `[at, at + n)` go from zeros to `p` changes by `zeros(at) ‖ p ‖ zeros(rest)`.
//! No piece, no fold at the next fsync, and the block stays plainly written (readers,
//! sendfile and short-circuit clients serve it from the file).
//!
//! What is known is kept per open object, in memory only (a restart forgets it: the
//! next such write takes the delta log, as before), with the CRC the block had when it
//! was last recorded. It is used only while the block's stored entry still holds that
//! CRC, so a change by any other path (a fold, a truncate, a punch, a whole-block
//! write) makes it unusable without having to be told. Should a record ever be wrong,
//! the CRC computed from it does not match the block's bytes: a checksum error, never
//! wrong bytes blessed. Lock order: a block range lock, then this mutex.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use stripefs_wire::{crc32c, crc32c_append};

/// Blocks an object remembers at most, and all objects of the process; past either,
/// what the object knows is forgotten, or nothing more is recorded (which only sends
/// later writes down the delta log).
pub const MAX_KNOWN_BLOCKS: usize = 4096;
pub const MAX_TOTAL_KNOWN_BLOCKS: usize = 65_536;
static TOTAL: AtomicUsize = AtomicUsize::new(0);
/// Written ranges remembered per block; a block written in more disjoint ranges is
/// forgotten.
const MAX_RANGES: usize = 8;

static ZEROS: [u8; 4096] = [0; 4096];

/// The CRC32C of a block of `block_len` bytes whose CRC is `old`, after its bytes
/// `[at, at + new.len())`, all zeros before, become `new`.
pub fn crc_after_filling(old: u32, block_len: usize, at: usize, new: &[u8]) -> u32 {
    let end = at + new.len();
    assert!(
        end <= block_len && block_len <= ZEROS.len(),
        "inside the block"
    );
    let delta = crc32c_append(
        crc32c_append(crc32c(&ZEROS[..at]), new),
        &ZEROS[..block_len - end],
    );
    old ^ delta ^ crc32c(&ZEROS[..block_len])
}

struct Known {
    /// The block's CRC when this was recorded.
    crc: u32,
    /// Byte ranges of the block written since it was a hole, sorted and disjoint; every
    /// other byte is zero.
    written: Vec<(u16, u16)>,
}

#[derive(Default)]
pub struct KnownZeros {
    map: Mutex<HashMap<u64, Known>>,
}

impl KnownZeros {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Known>> {
        // Entries are replaced whole: valid after a panic.
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `block`, whose stored CRC is `crc`, is known to hold zeros in all of
    /// `[at, end)`.
    pub fn zeros_in(&self, block: u64, crc: u32, at: usize, end: usize) -> bool {
        match self.lock().get(&block) {
            Some(k) if k.crc == crc => k
                .written
                .iter()
                .all(|&(lo, hi)| end <= lo as usize || at >= hi as usize),
            _ => false,
        }
    }

    /// Records that `[at, end)` of `block` was written, its CRC now `new`. `was`: the
    /// CRC it had before, or `None` if it was a hole (all zeros but these bytes now).
    /// A block whose record does not hold `was` is forgotten: nothing is known of it.
    pub fn wrote(
        &self,
        block: u64,
        was: Option<u32>,
        new: u32,
        at: usize,
        end: usize,
        block_len: usize,
    ) {
        assert!(at < end && end <= block_len && block_len <= u16::MAX as usize);
        let mut map = self.lock();
        let known = map.remove(&block);
        if known.is_some() {
            TOTAL.fetch_sub(1, Ordering::Relaxed);
        }
        let mut written = match (was, known) {
            (None, _) => Vec::new(),
            (Some(old), Some(k)) if k.crc == old => k.written,
            _ => return,
        };
        written.push((at as u16, end as u16));
        written.sort_unstable();
        let mut merged: Vec<(u16, u16)> = Vec::with_capacity(written.len());
        for (lo, hi) in written {
            match merged.last_mut() {
                Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
                _ => merged.push((lo, hi)),
            }
        }
        let full = merged == [(0, block_len as u16)];
        if full || merged.len() > MAX_RANGES {
            return;
        }
        if map.len() >= MAX_KNOWN_BLOCKS {
            TOTAL.fetch_sub(map.len(), Ordering::Relaxed);
            map.clear();
        }
        if TOTAL.fetch_add(1, Ordering::Relaxed) >= MAX_TOTAL_KNOWN_BLOCKS {
            TOTAL.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        map.insert(
            block,
            Known {
                crc: new,
                written: merged,
            },
        );
    }

    /// Forgets what is known of `block`.
    pub fn forget(&self, block: u64) {
        if self.lock().remove(&block).is_some() {
            TOTAL.fetch_sub(1, Ordering::Relaxed);
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }
}

impl Drop for KnownZeros {
    fn drop(&mut self) {
        TOTAL.fetch_sub(self.lock().len(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small xorshift generator; the seed is printed so that a failure replays.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// The computed CRC equals the CRC of the block with the bytes put in, for every
    /// start and length in small blocks and at random in full ones.
    #[test]
    fn filling_zeros_gives_the_crc_of_the_new_block() {
        for block_len in [1usize, 2, 7, 64] {
            for at in 0..block_len {
                for n in 1..=block_len - at {
                    let mut block: Vec<u8> = (0..block_len).map(|i| (i * 37 + 11) as u8).collect();
                    block[at..at + n].fill(0);
                    let old = crc32c(&block);
                    let new: Vec<u8> = (0..n).map(|i| (i * 101 + 3) as u8).collect();
                    block[at..at + n].copy_from_slice(&new);
                    assert_eq!(crc_after_filling(old, block_len, at, &new), crc32c(&block));
                }
            }
        }
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            | 1;
        println!("seed {seed}");
        let mut r = Rng(seed);
        for _ in 0..2000 {
            let mut block: Vec<u8> = (0..4096).map(|_| r.next() as u8).collect();
            let at = r.below(4096);
            let n = 1 + r.below(4096 - at);
            block[at..at + n].fill(0);
            let old = crc32c(&block);
            let new: Vec<u8> = (0..n).map(|_| r.next() as u8).collect();
            block[at..at + n].copy_from_slice(&new);
            assert_eq!(
                crc_after_filling(old, 4096, at, &new),
                crc32c(&block),
                "seed {seed}"
            );
        }
    }

    /// Bytes are known zeros only outside what was written, only under the CRC last
    /// recorded, and a record that does not continue the last one is dropped.
    #[test]
    fn what_is_known_follows_the_writes() {
        let k = KnownZeros::default();
        assert!(
            !k.zeros_in(5, 1, 0, 10),
            "nothing known of a block never recorded"
        );
        k.wrote(5, None, 100, 1000, 2000, 4096);
        assert!(k.zeros_in(5, 100, 0, 1000));
        assert!(k.zeros_in(5, 100, 2000, 4096));
        assert!(!k.zeros_in(5, 100, 999, 1001), "overlaps the written bytes");
        assert!(!k.zeros_in(5, 100, 1999, 2001));
        assert!(!k.zeros_in(5, 101, 0, 1000), "the block changed since");
        k.wrote(5, Some(100), 200, 0, 1000, 4096);
        assert!(!k.zeros_in(5, 200, 0, 10));
        assert!(k.zeros_in(5, 200, 2000, 4096));
        // A write recorded against a CRC the record does not hold: forgotten.
        k.wrote(5, Some(999), 300, 2000, 2100, 4096);
        assert!(!k.zeros_in(5, 300, 3000, 4096));
        assert!(!k.zeros_in(5, 200, 3000, 4096));
        assert_eq!(k.len(), 0);
        // A block written whole is no longer remembered.
        k.wrote(6, None, 1, 0, 2048, 4096);
        k.wrote(6, Some(1), 2, 2048, 4096, 4096);
        assert_eq!(k.len(), 0);
        // A hole written again starts over, whatever was known.
        k.wrote(7, None, 1, 0, 10, 4096);
        k.wrote(7, None, 2, 20, 30, 4096);
        assert!(k.zeros_in(7, 2, 0, 20));
        k.forget(7);
        assert!(!k.zeros_in(7, 2, 0, 20));
        // Too many disjoint ranges: forgotten.
        k.wrote(8, None, 0, 0, 1, 4096);
        for i in 1..=MAX_RANGES as u32 {
            let at = 10 * i as usize;
            k.wrote(8, Some(i - 1), i, at, at + 1, 4096);
        }
        assert_eq!(k.len(), 0);
    }
}
