//! The delta log's in-memory side (docs/objects.md, "Writes"): per open object, the
//! partial-block writes (*pieces*) that lie in its log on top of their blocks' stored
//! bytes, in write order. A partial write of a block that holds written bytes appends
//! its piece instead of reading, merging and rewriting the block, and holds the block's
//! range lock only shared: writers of disjoint pieces of one block do not wait for each
//! other. Readers merge a block's pieces into its bytes; an fsync, a truncate, a punch or
//! a whole-block write folds them into the block (compaction) under the exclusive lock.
//!
//! The pieces are kept here as well as in the log so that reads need not scan the log;
//! the log is what survives the process (`object::replay_log` folds them in when the
//! object is next opened). Lock order: a block range lock, then this mutex; never the
//! other way.

use crate::intent::{piece_record, IntentLog, Record};
use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use stripefs_wire::crc32c;

/// Piece bytes an object keeps before a write folds them into its blocks (an fsync of
/// the object, as the log's own bound does).
pub const MAX_OBJECT_PIECE_BYTES: u64 = 16 << 20;
/// Piece bytes all objects of the process keep before a write folds its object's.
pub const MAX_TOTAL_PIECE_BYTES: u64 = 512 << 20;
static TOTAL: AtomicU64 = AtomicU64::new(0);

/// Bytes written at `at` inside a block, under the CRC32C the client sent for them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    pub at: usize,
    pub bytes: Vec<u8>,
    pub crc: u32,
    /// Where its record starts in the log: pieces of a block are laid on in this order.
    pub pos: u64,
}

impl Piece {
    /// Puts the piece into `block`, after checking its bytes against its CRC (memory
    /// is a trust boundary too: a damaged piece is never merged and blessed).
    pub fn apply(&self, block: &mut [u8]) -> Result<(), u32> {
        let actual = crc32c(&self.bytes);
        if actual != self.crc {
            return Err(actual);
        }
        block[self.at..self.at + self.bytes.len()].copy_from_slice(&self.bytes);
        Ok(())
    }
}

#[derive(Default)]
pub struct Pieces {
    map: Mutex<BTreeMap<u64, Vec<Piece>>>,
    bytes: AtomicU64,
}

impl Pieces {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Vec<Piece>>> {
        // Only whole entries are pushed and removed: valid after a panic.
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends `piece` of `block` to the log, then puts it in the index by its place in
    /// the log, so that the two hold the pieces of a block in the same order (the index
    /// mutex is not held across the append).
    pub fn append(
        &self,
        log: &IntentLog,
        block: u64,
        mut piece: Piece,
        block_bytes: u64,
    ) -> io::Result<()> {
        let n = piece.bytes.len() as u64;
        piece.pos = log.append_delta(|seq| {
            piece_record(
                seq,
                block * block_bytes + piece.at as u64,
                &piece.bytes,
                piece.crc,
                block_bytes,
            )
        })?;
        let mut map = self.lock();
        let v = map.entry(block).or_default();
        let at = v.partition_point(|p| p.pos <= piece.pos);
        v.insert(at, piece);
        drop(map);
        self.bytes.fetch_add(n, Ordering::Relaxed);
        TOTAL.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }

    /// Puts back a piece found in the log (already there) that could not be folded in
    /// when the object was opened (its block fails its checksum): kept, so that reads
    /// and the next compaction report the damage instead of dropping the piece.
    pub fn restore(&self, block: u64, piece: Piece) {
        let n = piece.bytes.len() as u64;
        self.lock().entry(block).or_default().push(piece);
        self.bytes.fetch_add(n, Ordering::Relaxed);
        TOTAL.fetch_add(n, Ordering::Relaxed);
    }

    /// Lays the pieces of `block` on `buf` in write order, each checked against its CRC
    /// first (under the index mutex: no copy of their bytes); the first that fails is
    /// returned with the CRC its bytes have.
    pub fn apply(&self, block: u64, buf: &mut [u8]) -> Result<(), (Piece, u32)> {
        let map = self.lock();
        for p in map.get(&block).into_iter().flatten() {
            p.apply(buf).map_err(|actual| (p.clone(), actual))?;
        }
        Ok(())
    }

    /// The blocks in `[first, end)` that have pieces.
    pub fn blocks_in(&self, first: u64, end: u64) -> Vec<u64> {
        if self.is_empty() {
            return Vec::new();
        }
        self.lock().range(first..end).map(|(b, _)| *b).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.load(Ordering::Relaxed) == 0
    }

    /// Whether this object's pieces, or all objects', passed their bound.
    pub fn over_bound(&self) -> bool {
        self.bytes.load(Ordering::Relaxed) > MAX_OBJECT_PIECE_BYTES
            || TOTAL.load(Ordering::Relaxed) > MAX_TOTAL_PIECE_BYTES
    }

    /// Forgets the pieces of `blocks` (folded into their blocks, or replaced by a
    /// whole-block write, the caller holding their exclusive lock) and appends a cover
    /// record for each, so that the log's copies are not folded in again after a
    /// restart over what replaced them.
    pub fn settle(&self, log: &IntentLog, blocks: &[u64], block_bytes: u64) -> io::Result<()> {
        if blocks.is_empty() {
            return Ok(());
        }
        let mut map = self.lock();
        log.append_delta(|seq| {
            blocks
                .iter()
                .flat_map(|&block| {
                    crate::intent::encode(&Record::Cover { seq, block }, block_bytes)
                })
                .collect()
        })?;
        let mut freed = 0;
        for b in blocks {
            if let Some(ps) = map.remove(b) {
                freed += ps.iter().map(|p| p.bytes.len() as u64).sum::<u64>();
            }
        }
        drop(map);
        self.bytes.fetch_sub(freed, Ordering::Relaxed);
        TOTAL.fetch_sub(freed, Ordering::Relaxed);
        Ok(())
    }
}

impl Drop for Pieces {
    fn drop(&mut self) {
        TOTAL.fetch_sub(self.bytes.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}
