//! One object on one target: its bytes and its checksum sidecar.
//!
//! Sidecar format: entry `i` (8 bytes at offset `8 * i`) describes block `i` (bytes
//! `[4096 * i, 4096 * (i + 1))`) of the object: u32 LE CRC32C of the block zero-padded to
//! 4096 bytes, then u32 LE flag, 0 = never written (a hole: reads as zeros whatever the
//! data file holds) and anything else = written. Entries past the sidecar's end are holes.
//!
//! Sparse objects: punching whole blocks zeroes their sidecar entries first and then
//! frees their data, so a crash in between leaves holes over stale bytes, which read as
//! zeros; the partial blocks at the edges of a punched range are rewritten with zeros and
//! a fresh CRC, as a write would. Stored data, for SEEK_DATA/SEEK_HOLE, is the written
//! blocks: the sidecar says which, at block granularity, whatever the file system does.
//!
//! Invariant: outside a range lock, every written block's CRC matches its bytes, also
//! after a write that failed part-way (its space is reserved first, and a failure after
//! that rewrites the touched blocks' CRCs from the bytes they hold). Data is written
//! before its sidecar entries, so a torn write after a crash shows up as a checksum
//! mismatch (written blocks) or as the old hole (new blocks), never as silently wrong
//! bytes.
//! Callers hold the block-range lock of everything these functions touch.

use crate::cache::Object;
use crate::Canary;
use std::io;
use std::path::Path;
use std::sync::Arc;
use stripefs_rpc::Part;
use stripefs_sys::storage::ObjectFile;
use stripefs_wire::{crc32c, ErrorCode, InodeId, ServerId, WireError, BLOCK_BYTES};

pub const BLOCK: u64 = BLOCK_BYTES as u64;
const BLOCK_USIZE: usize = BLOCK_BYTES as usize;
use crate::pieces::Piece;
pub use stripefs_wire::sidecar::{encode_entry, Entry, ENTRY_BYTES};

/// Names what an error is about: server, file and target.
pub struct Ctx<'a> {
    pub server: ServerId,
    pub fid: InodeId,
    pub target: &'a Path,
    /// A known-broken rule swapped in for the simulator's checker to catch.
    pub canary: Option<Canary>,
    /// Fault injection for tests (`STRIPEFS_FAULT_ABORT_MID_RMW`): counts down the
    /// read-modify-writes of written blocks; the one that takes it to zero aborts the
    /// process after its data reached the file and before its checksum did.
    pub abort_mid_rmw: Option<&'a std::sync::atomic::AtomicU64>,
}

impl Ctx<'_> {
    pub fn io(&self, what: &str, e: &io::Error) -> WireError {
        WireError::io(
            format!(
                "data server {}: {} on target {}: {what}",
                self.server.0,
                self.fid,
                self.target.display()
            ),
            e,
        )
    }

    /// An entry whose flag this version does not know (a newer format): refused, never
    /// guessed at.
    fn unknown_flag(&self, block: u64, flag: u32) -> WireError {
        WireError::new(
            ErrorCode::Io,
            format!(
                "data server {}: {} on target {}: the checksum entry of the block at object \
                 offset {} has flag {flag}, which this version does not know",
                self.server.0,
                self.fid,
                self.target.display(),
                block * BLOCK
            ),
        )
    }

    /// A piece in memory that fails its CRC.
    fn bad_piece(&self, block: u64, p: &Piece, actual: u32) -> WireError {
        WireError::new(
            ErrorCode::Checksum,
            format!(
                "data server {}: {} on target {}: a piece of {} bytes at object offset {} \
                 fails its checksum (stored {:08x}, computed {actual:08x})",
                self.server.0,
                self.fid,
                self.target.display(),
                p.bytes.len(),
                block * BLOCK + p.at as u64,
                p.crc
            ),
        )
    }

    fn corrupt(&self, block: u64, stored: u32, actual: u32) -> WireError {
        WireError::new(
            ErrorCode::Checksum,
            format!(
                "data server {}: {} on target {}: stored block at object offset {} fails its \
                 checksum (stored {stored:08x}, computed {actual:08x})",
                self.server.0,
                self.fid,
                self.target.display(),
                block * BLOCK
            ),
        )
    }
}

/// The entry of `block` held in `e` (8 bytes), refusing unknown flags.
fn entry_of(c: &Ctx, block: u64, e: &[u8]) -> Result<Entry, WireError> {
    Entry::decode(e).map_err(|flag| c.unknown_flag(block, flag))
}

/// The entries of `n` blocks from `first` (holes past the sidecar's end). Read without
/// the blocks' lock it is a hint only (an entry is read whole or not at all).
pub fn read_entries(c: &Ctx, obj: &Object, first: u64, n: u64) -> Result<Vec<Entry>, WireError> {
    let mut buf = vec![0u8; (n * ENTRY_BYTES) as usize];
    let got = obj
        .crcs
        .read_at(&mut buf, first * ENTRY_BYTES)
        .map_err(|e| c.io(&format!("reading checksums from block {first}"), &e))?;
    buf[got..].fill(0);
    buf.chunks(ENTRY_BYTES as usize)
        .enumerate()
        .map(|(i, e)| entry_of(c, first + i as u64, e))
        .collect()
}

fn read_entry(c: &Ctx, obj: &Object, block: u64) -> Result<Entry, WireError> {
    Ok(read_entries(c, obj, block, 1)?[0])
}

fn write_entry(c: &Ctx, obj: &Object, block: u64, e: Entry) -> Result<(), WireError> {
    obj.crcs
        .write_at(&e.encode(), block * ENTRY_BYTES)
        .map_err(|err| {
            c.io(
                &format!("writing the checksum entry of block {block}"),
                &err,
            )
        })
}

/// The content of a block whose entry is `entry`, given the bytes `buf` the data file
/// holds for it: the base checked against its CRC (a hole's bytes zeroed), then, if the
/// entry says it has pieces, its pieces put on top, each checked. Returns the content's
/// CRC.
fn merge(
    c: &Ctx,
    obj: &Object,
    block: u64,
    entry: Entry,
    buf: &mut [u8],
) -> Result<u32, WireError> {
    match entry.base() {
        Some(crc) => {
            let actual = crc32c(buf);
            if actual != crc {
                return Err(c.corrupt(block, crc, actual));
            }
        }
        None => buf.fill(0),
    }
    if matches!(entry, Entry::Pieces(_)) {
        obj.pieces
            .apply(block, buf)
            .map_err(|(p, actual)| c.bad_piece(block, &p, actual))?;
    }
    Ok(crc32c(buf))
}

/// A block being read-modify-written: its current content (zeros for a hole), verified.
struct Partial {
    block: u64,
    buf: [u8; BLOCK_USIZE],
    /// Bytes of the block present in the data file.
    on_disk: usize,
    written: bool,
    /// Its entry named pieces (the callers fold every piece in first, so none was
    /// left to merge): the whole block is written out, under a plain entry.
    pieces: bool,
    /// The byte range of `buf` to write out, set by `apply`.
    dirty: (usize, usize),
    /// The block's CRC after `apply`.
    crc: u32,
    /// Its entry when loaded.
    stored: Entry,
    /// Made by `onto_zeros`: only `dirty` of `buf` holds the block's bytes (the new
    /// ones), and `crc` was computed from the stored one.
    onto_zeros: bool,
}

impl Partial {
    fn load(c: &Ctx, obj: &Object, block: u64) -> Result<Partial, WireError> {
        let stored = read_entry(c, obj, block)?;
        Partial::load_with(c, obj, block, stored)
    }

    /// As `load`, with the block's stored entry read already (before its data, as
    /// every reader does). A block with pieces loads with them on top (callers fold
    /// them in first, so that a rewrite never leaves pieces live under it).
    fn load_with(c: &Ctx, obj: &Object, block: u64, stored: Entry) -> Result<Partial, WireError> {
        let mut buf = [0u8; BLOCK_USIZE];
        let at = block * BLOCK;
        let on_disk = obj
            .data
            .read_at(&mut buf, at)
            .map_err(|e| c.io(&format!("reading block at object offset {at}"), &e))?;
        // A hole reads as zeros whatever a torn write may have left in the file.
        merge(c, obj, block, stored, &mut buf)?;
        Ok(Partial {
            block,
            buf,
            on_disk,
            written: stored.base().is_some(),
            pieces: matches!(stored, Entry::Pieces(_)),
            dirty: (0, 0),
            crc: 0,
            stored,
            onto_zeros: false,
        })
    }

    /// A partial write of `bytes` at `at` of a written block (CRC `base`) whose bytes
    /// there are known zeros ([`into_zeros`], checked by the caller under the block's
    /// exclusive lock): nothing is read; the new CRC comes from `base` and the bytes
    /// (`zeros.rs`), and only the new bytes are written.
    fn onto_zeros(block: u64, base: u32, at: usize, bytes: &[u8]) -> Partial {
        let end = at + bytes.len();
        assert!(!bytes.is_empty() && end <= BLOCK_USIZE, "inside one block");
        let mut buf = [0u8; BLOCK_USIZE];
        buf[at..end].copy_from_slice(bytes);
        Partial {
            block,
            buf,
            on_disk: BLOCK_USIZE,
            written: true,
            pieces: false,
            dirty: (at, end),
            crc: crate::zeros::crc_after_filling(base, BLOCK_USIZE, at, bytes),
            stored: Entry::Written(base),
            onto_zeros: true,
        }
    }

    /// After `[at, end)` of the block was written in place: what is known of its zeros
    /// (`zeros.rs`). A hole now holds zeros but there; a written block keeps what was
    /// known if its record is current; a block with pieces was rewritten whole.
    fn remember(&self, obj: &Object, at: usize, end: usize) {
        match self.stored {
            Entry::Hole => obj
                .zeros
                .wrote(self.block, None, self.crc, at, end, BLOCK_USIZE),
            Entry::Written(base) => {
                obj.zeros
                    .wrote(self.block, Some(base), self.crc, at, end, BLOCK_USIZE)
            }
            Entry::Pieces(_) => obj.zeros.forget(self.block),
        }
    }

    /// The block's new CRC with `bytes` at `at`: put in by `apply`, or, for a block
    /// made by `onto_zeros` (which holds them already), as computed there.
    fn put(&mut self, at: usize, bytes: &[u8]) -> u32 {
        match self.onto_zeros {
            true => self.crc,
            false => self.apply(at, bytes),
        }
    }

    /// Puts `bytes` at `at` in the block (in memory) and returns the block's new CRC.
    fn apply(&mut self, at: usize, bytes: &[u8]) -> u32 {
        let end = at + bytes.len();
        assert!(end <= BLOCK_USIZE);
        self.buf[at..end].copy_from_slice(bytes);
        // A hole's bytes in the file may be garbage from a torn write: overwrite them.
        self.dirty = if self.pieces {
            (0, BLOCK_USIZE)
        } else if self.written || self.on_disk == 0 {
            (at, end)
        } else {
            (0, end.max(self.on_disk))
        };
        self.crc = crc32c(&self.buf);
        self.crc
    }

    /// Before the block's bytes change in place: if it holds written bytes (of other
    /// writes, perhaps acknowledged by an fsync), logs the rewrite (an image made
    /// durable, or an intent; `intent.rs`), so that a server dying or a power cut
    /// between the data and the checksum leaves a block that reads (`replay_log`). A
    /// hole has nothing to lose: it stays a hole.
    ///
    /// A write onto known zeros logs an intent whatever the set of written blocks says
    /// now: its caller found the block written since the last fsync began under the
    /// block's lock (a fact the set may forget, never the other way), and `buf` is not
    /// the block's content, so it must never become an image.
    fn protect(&self, c: &Ctx, obj: &Object) -> Result<(), WireError> {
        if !self.written || c.canary == Some(Canary::ChecksumBeforeData) {
            return Ok(());
        }
        if self.onto_zeros {
            return obj
                .intents
                .intend(self.block, self.crc, BLOCK)
                .map_err(|e| c.io(&format!("logging the rewrite of block {}", self.block), &e));
        }
        obj.intents
            .protect(self.block, &self.buf, self.crc, BLOCK)
            .map_err(|e| c.io(&format!("logging the rewrite of block {}", self.block), &e))
    }

    /// Writes the bytes `apply` changed.
    fn flush(&self, c: &Ctx, obj: &Object) -> Result<(), WireError> {
        let (lo, hi) = self.dirty;
        let off = self.block * BLOCK + lo as u64;
        obj.data.write_at(&self.buf[lo..hi], off).map_err(|e| {
            c.io(
                &format!("writing {} bytes at object offset {off}", hi - lo),
                &e,
            )
        })
    }

    /// Puts `bytes` at `at` in the block, writes what changed and returns the new CRC.
    fn store(&mut self, c: &Ctx, obj: &Object, at: usize, bytes: &[u8]) -> Result<u32, WireError> {
        let crc = self.apply(at, bytes);
        self.protect(c, obj)?;
        self.flush(c, obj)?;
        Ok(crc)
    }
}

/// Writes `data` at object offset `off`. `crcs` holds the verified CRC32C of each
/// block-bounded piece of `data` (so, for whole blocks, the block CRC to store).
///
/// A failure part-way damages nothing: a write over written blocks reserves the space
/// for its data and checksums first (ENOSPC then fails it before anything changed); if
/// a later step still fails (EIO, a short write, ENOSPC in holes), the touched blocks'
/// checksums are set to the bytes they hold, so that every byte reads: old bytes
/// outside the range, old or new inside it.
pub fn write(c: &Ctx, obj: &Object, off: u64, data: &[u8], crcs: &[u32]) -> Result<(), WireError> {
    write_onto(c, obj, off, data, crcs, None, [None, None])
}

/// [`write`], given the entries of the write's blocks if the caller read them under
/// its locks (`held`, one per block from the first the write touches: saves reading
/// them again, and the object length, which only spared that read), and where a partial
/// first or last block may go onto bytes known to be zeros (`zeros`: the block's stored
/// CRC, for the first and the last block; the caller checked [`into_zeros`] under the
/// block's exclusive lock): that block is not read, its bytes go out with the rest of
/// the write in one run, under an intent.
pub fn write_onto(
    c: &Ctx,
    obj: &Object,
    off: u64,
    data: &[u8],
    crcs: &[u32],
    held: Option<&[Entry]>,
    zeros: [Option<u32>; 2],
) -> Result<(), WireError> {
    let len = data.len() as u64;
    assert!(len > 0);
    let first = off / BLOCK;
    let nblocks = ((off + len).div_ceil(BLOCK) - first) as usize;
    assert_eq!(crcs.len(), nblocks, "one checksum per block piece");
    let head_len = (BLOCK - off % BLOCK).min(len) as usize;
    let tail_len = ((off + len) % BLOCK) as usize;
    let head_partial = head_len != BLOCK_USIZE;
    let tail_partial = nblocks > 1 && tail_len != 0;
    let last = first + nblocks as u64 - 1;
    // Blocks with pieces are folded in first (the caller holds every block of the range
    // exclusively, so none gets a piece meanwhile). Their pieces are thereby covered in
    // the log before any of their bytes is overwritten: a cover that cannot be appended
    // (a full disk) fails the write with nothing changed, instead of leaving pieces
    // live in the log that a restart would lay over this write's bytes (simulator,
    // seed 5272).
    let mut held = held;
    if let Some(h) = held {
        assert_eq!(h.len(), nblocks, "one held entry per block");
    }
    let with_pieces = obj.pieces.blocks_in(first, last + 1);
    if !with_pieces.is_empty() {
        // Folding changes the entries: read them again below.
        held = None;
        if let Err(e) = compact(c, obj, &with_pieces) {
            // A block that fails its checksum (its base, or a piece) cannot be folded;
            // one this write replaces whole need not be: its pieces are covered and the
            // write heals it. A partial block's other bytes must be read: it fails.
            let left = obj.pieces.blocks_in(first, last + 1);
            let edge = |b: &u64| (*b == first && head_partial) || (*b == last && tail_partial);
            if e.code != ErrorCode::Checksum || left.iter().any(edge) {
                return Err(e);
            }
            obj.pieces
                .settle(&obj.intents, &left, BLOCK)
                .map_err(|e| c.io("recording replaced pieces in the object's log", &e))?;
        }
    }
    // Read and verify both partial blocks before anything changes (their entries in
    // one read of the sidecar).
    let pair: Option<std::borrow::Cow<[Entry]>> = match held {
        Some(h) => Some(h.into()),
        None => (head_partial && tail_partial)
            .then(|| read_entries(c, obj, first, last - first + 1))
            .transpose()?
            .map(Into::into),
    };
    let load = |block: u64, end: usize| match &pair {
        Some(entries) => Partial::load_with(c, obj, block, entries[end * (entries.len() - 1)]),
        None => Partial::load(c, obj, block),
    };
    let head_at = (off % BLOCK) as usize;
    let mut head = match (head_partial, zeros[0]) {
        (false, _) => None,
        (true, Some(base)) => Some(Partial::onto_zeros(first, base, head_at, &data[..head_len])),
        (true, None) => Some(load(first, 0)?),
    };
    // Only a tail that is a partial block of its own (`tail_len` is less than the write).
    let tail_bytes = &data[data.len() - if tail_partial { tail_len } else { 0 }..];
    let mut tail = match (tail_partial, zeros[1]) {
        (false, _) => None,
        (true, Some(base)) => Some(Partial::onto_zeros(last, base, 0, tail_bytes)),
        (true, None) => Some(load(last, 1)?),
    };

    let mut entries = Vec::with_capacity(nblocks * ENTRY_BYTES as usize);
    crcs.iter()
        .for_each(|crc| entries.extend_from_slice(&encode_entry(*crc)));
    if let Some(p) = head.as_mut() {
        let crc = p.put(head_at, &data[..head_len]);
        entries[..ENTRY_BYTES as usize].copy_from_slice(&encode_entry(crc));
    }
    if let Some(p) = tail.as_mut() {
        let crc = p.put(0, tail_bytes);
        let at = entries.len() - ENTRY_BYTES as usize;
        entries[at..].copy_from_slice(&encode_entry(crc));
    }
    // A write that changes written blocks reserves its space first, so that a full disk
    // fails it before any old block changed. One into holes only needs none: a failure
    // part-way leaves their blocks as holes (or the repair below marks the ones fully
    // written), and an fallocate per write would cost the streaming and interleaved
    // write paths (ext4 allocates the blocks there and then, under the file's lock:
    // 11% of a data server's CPU in the interleaved 47,008-byte pattern). Appends are
    // into holes; a write inside the file looks at its entries (one sidecar read).
    // With the entries in hand, no length is needed: a block past the end has none.
    let inside = held.is_some()
        || off
            < obj
                .data
                .size_bytes()
                .map_err(|e| c.io("reading the object length", &e))?;
    if inside {
        // A block written onto its known zeros needs no space: it holds written
        // bytes already, so its disk block is there.
        let rewrites = |entries: &[Entry]| {
            entries.iter().enumerate().any(|(i, e)| {
                let onto = (i == 0 && zeros[0].is_some() && head_partial)
                    || (i == nblocks - 1 && zeros[1].is_some() && tail_partial);
                e.base().is_some() && !onto
            })
        };
        let changes_written = match &pair {
            Some(entries) => rewrites(entries),
            None => rewrites(&read_entries(c, obj, first, nblocks as u64)?),
        };
        if changes_written {
            reserve(c, obj, first, off + len, nblocks as u64)?;
        }
    }
    for p in [head.as_ref(), tail.as_ref()].into_iter().flatten() {
        p.protect(c, obj)?;
    }
    let mid = (
        if head_partial { head_len } else { 0 },
        data.len() - if tail_partial { tail_len } else { 0 },
    );
    let parts = WriteParts {
        off,
        data,
        head: head.as_ref(),
        mid,
        tail: tail.as_ref(),
        entries: &entries,
        first,
    };
    if c.canary == Some(Canary::ChecksumBeforeData) {
        return parts.checksums_first(c, obj);
    }
    let end = first + nblocks as u64;
    parts.write_all(c, obj).inspect_err(|e| {
        if let Err(r) = repair(c, obj, first, &entries) {
            tracing::error!("{e}; then repairing the checksums failed: {r}");
        }
    })?;
    obj.intents.mark_written(first, end);
    if let Some(p) = &head {
        p.remember(obj, head_at, head_at + head_len);
    }
    if let Some(p) = &tail {
        p.remember(obj, 0, tail_len);
    }
    Ok(())
}

/// Whether a partial write of `data.len()` bytes at object offset `off` may go in place
/// into bytes known to be zeros ([`write_onto`]), the block's entry being
/// `entry`: the block is written (without pieces) under the CRC what is known of it
/// was recorded with, the write's bytes are all known zeros, and the block was written
/// since the object's last fsync began (so an intent protects the rewrite; the caller
/// holds the block's lock, which keeps the epoch).
pub fn into_zeros(c: &Ctx, obj: &Object, off: u64, len: usize, entry: Entry) -> bool {
    let block = off / BLOCK;
    let at = (off % BLOCK) as usize;
    match entry {
        Entry::Written(crc) => {
            c.canary.is_none()
                && obj.zeros.zeros_in(block, crc, at, at + len)
                && obj.intents.written_since_sync(block)
        }
        _ => false,
    }
}

/// Writes `data` (inside one block, shorter than it) at object offset `off` as a piece
/// in the object's log, under the CRC the client sent for it, the caller holding the
/// block's lock (shared is enough): the delta log, no read of the block, no CRC
/// computed here. The block's entry says it has pieces; readers merge them, and a
/// compaction folds them in (docs/objects.md, "Writes").
///
/// `held`: the block's entry, if the caller read it under the block's lock. Another
/// piece's writer (holding the lock shared too) may have changed it since, but only to
/// what this one would write (a piece on the same base).
pub fn write_piece(
    c: &Ctx,
    obj: &Object,
    off: u64,
    data: &[u8],
    crc: u32,
    held: Option<Entry>,
) -> Result<(), WireError> {
    let block = off / BLOCK;
    let at = (off % BLOCK) as usize;
    assert!(
        !data.is_empty() && data.len() < BLOCK_USIZE && at + data.len() <= BLOCK_USIZE,
        "a partial block"
    );
    let entry = match held {
        Some(e) => e,
        None => read_entry(c, obj, block)?,
    };
    // The entry first: with no piece yet it reads as before, and if its write fails
    // nothing changed. A piece is visible to readers only once it is in the log and the
    // index (one append, undone if it fails), so what a reader saw is what a restart
    // replays.
    match entry {
        Entry::Written(base) => write_entry(c, obj, block, Entry::Pieces(Some(base)))?,
        Entry::Hole => write_entry(c, obj, block, Entry::Pieces(None))?,
        Entry::Pieces(_) => {}
    }
    let piece = Piece {
        at,
        bytes: data.to_vec(),
        crc,
        pos: 0,
    };
    obj.pieces
        .append(&obj.intents, block, piece, BLOCK)
        .map_err(|e| {
            c.io(
                &format!(
                    "appending a piece of {} bytes at object offset {off} to the object's log",
                    data.len()
                ),
                &e,
            )
        })
}

/// What [`write_spliced`] did with a short-circuit write's bytes.
pub enum Spliced {
    /// Written and checked; their checksums stored.
    Done,
    /// Some blocks of the range hold written bytes: the bytes were left in the pipe for
    /// the caller to read and write the usual way (checked before they change anything).
    NotHoles,
}

/// Writes `len` bytes (whole blocks) at object offset `off` straight from `pipe`
/// (`splice`: the kernel copies them into the file's pages; they never pass through this
/// process's memory), when every block of the range is a hole. Then checks them against
/// `crcs` (the client's, one per block) through a mapping of the file, and stores the
/// CRCs. Since only holes are written, a failure or a mismatch at any point leaves every
/// block as it was: a hole reads as zeros whatever bytes lie under it, and no CRC is
/// stored for bytes that were not checked (never blessed). On an error, also returns
/// how many bytes were taken out of the pipe.
pub fn write_spliced(
    c: &Ctx,
    obj: &Object,
    off: u64,
    len: u64,
    pipe: &mut dyn stripefs_rpc::samehost::PipeIn,
    crcs: &[u32],
) -> Result<Spliced, (usize, WireError)> {
    assert!(
        off % BLOCK == 0 && len % BLOCK == 0 && len > 0,
        "whole blocks"
    );
    let first = off / BLOCK;
    let n = (len / BLOCK) as usize;
    assert_eq!(crcs.len(), n, "one CRC per block");
    if !all_holes(c, obj, off, len).map_err(|e| (0, e))? {
        return Ok(Spliced::NotHoles);
    }
    pipe.splice_into(&*obj.data, off, len as usize)
        .map_err(|(done, e)| {
            (
                done,
                c.io(
                    &format!("splicing {len} bytes in at object offset {off}"),
                    &e,
                ),
            )
        })?;
    let consumed = len as usize;
    let actual = stored_crcs(&*obj.data, off, len).map_err(|e| {
        (
            consumed,
            c.io(&format!("checking {len} bytes at object offset {off}"), &e),
        )
    })?;
    let checked = c.canary != Some(Canary::PipeUnchecked);
    if let Some(i) = (0..n).find(|&i| checked && actual[i] != crcs[i]) {
        return Err((
            consumed,
            WireError::new(
                ErrorCode::Checksum,
                format!(
                    "data server {}: {} on target {}: block {} arrived through the short-circuit pipe with CRC {:#010x}, the client sent {:#010x}; left a hole",
                    c.server.0,
                    c.fid,
                    c.target.display(),
                    first + i as u64,
                    actual[i],
                    crcs[i]
                ),
            ),
        ));
    }
    store_written(c, obj, off, crcs).map_err(|e| (consumed, e))?;
    start_writeback_behind(obj, off, len);
    Ok(Spliced::Done)
}

/// Whether every block of `[off, off + len)` (whole blocks) is a hole: the range may
/// then take bytes before its entries say so (a splice, a client's direct write), since
/// a hole reads as zeros whatever bytes lie under it. The caller holds the range's
/// exclusive lock.
pub fn all_holes(c: &Ctx, obj: &Object, off: u64, len: u64) -> Result<bool, WireError> {
    let first = off / BLOCK;
    let mut entries = vec![0u8; (len / BLOCK) as usize * ENTRY_BYTES as usize];
    let got = obj
        .crcs
        .read_at(&mut entries, first * ENTRY_BYTES)
        .map_err(|e| c.io(&format!("reading checksums from block {first}"), &e))?;
    entries[got..].fill(0);
    let data_or_unknown =
        |(i, e): (usize, &[u8])| entry_of(c, first + i as u64, e).map_or(true, Entry::is_data);
    Ok(!entries
        .chunks(ENTRY_BYTES as usize)
        .enumerate()
        .any(data_or_unknown))
}

/// Stores `crcs` as the entries of the whole blocks at `off`, which were holes and now
/// hold their bytes (checked, or written by a trusted short-circuit client), and notes
/// them as written since the object's last fsync.
pub fn store_written(c: &Ctx, obj: &Object, off: u64, crcs: &[u32]) -> Result<(), WireError> {
    let first = off / BLOCK;
    let mut stored = Vec::with_capacity(crcs.len() * ENTRY_BYTES as usize);
    crcs.iter()
        .for_each(|crc| stored.extend_from_slice(&encode_entry(*crc)));
    obj.crcs
        .write_at(&stored, first * ENTRY_BYTES)
        .map_err(|e| {
            c.io(
                &format!("writing checksums of {} blocks from {first}", crcs.len()),
                &e,
            )
        })?;
    obj.intents.mark_written(first, first + crcs.len() as u64);
    Ok(())
}

/// A handle of the object's data file for a short-circuit client's direct writes: for
/// a file with a descriptor, a new write-only open with `O_DIRECT` (the client's buffer
/// goes to the disk without a copy or the page cache); for one in memory (the
/// simulator's store), the file itself, shared as a descriptor shares the inode.
/// `Unsupported` for a file system that does not take `O_DIRECT` (tmpfs).
pub fn direct_writer(obj: &Object) -> io::Result<Arc<dyn ObjectFile>> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let Some(fd) = obj.data.borrowed_fd() else {
        return Ok(obj.data.clone());
    };
    // A new open of the same file (not a dup): O_DIRECT belongs to the open, and the
    // server's own descriptor must stay buffered.
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT | libc::O_CLOEXEC)
        .open(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map(|f| Arc::new(stripefs_sys::storage::FsFile::from(f)) as Arc<dyn ObjectFile>)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EINVAL) => io::Error::new(
                io::ErrorKind::Unsupported,
                format!("the target's file system does not take O_DIRECT ({e})"),
            ),
            _ => e,
        })
}

/// The CRC32C of each 4 KiB block of `[off, off + len)` of `file`, read through a shared
/// read-only mapping of its descriptor (no copy of the bytes), or by `read_at` for a file
/// without one (in memory).
fn stored_crcs(file: &dyn ObjectFile, off: u64, len: u64) -> io::Result<Vec<u32>> {
    use std::os::fd::AsRawFd;
    if let Some(fd) = file.borrowed_fd() {
        return mapped_crcs(fd.as_raw_fd(), off, len);
    }
    let mut bytes = vec![0u8; len as usize];
    let n = file.read_at(&mut bytes, off)?;
    bytes[n..].fill(0);
    Ok(bytes.chunks(BLOCK_USIZE).map(crc32c).collect())
}

/// The CRC32C of each 4 KiB block of `[off, off + len)` of the file, read through a
/// shared read-only mapping (no copy of the bytes).
fn mapped_crcs(fd: std::os::fd::RawFd, off: u64, len: u64) -> io::Result<Vec<u32>> {
    // SAFETY: a fresh read-only shared mapping of a range the caller just wrote (so
    // inside the file), unmapped below before anything else can cut the file: the
    // caller holds the range's exclusive lock.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len as usize,
            libc::PROT_READ,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd,
            off as libc::off_t,
        );
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let bytes = std::slice::from_raw_parts(p as *const u8, len as usize);
        let out = bytes.chunks(BLOCK_USIZE).map(crc32c).collect();
        libc::munmap(p, len as usize);
        Ok(out)
    }
}

/// Bytes of an object written out together once a write completes them.
pub const WRITEBACK_WINDOW: u64 = 1 << 20;

/// Starts the write-out of every whole [`WRITEBACK_WINDOW`] of the object that the write
/// `[off, off + len)` completes (ends in), so that streaming writes of any size reach the
/// disk as they go. A write that ends no window starts nothing: a small file's write
/// must not queue a device write of its own (measured: `sync_file_range` on each 4 KiB
/// write of a new small file cost 0.38 ms of its 0.57 ms at the data server).
fn start_writeback_behind(obj: &Object, off: u64, len: u64) {
    if let Some((lo, n)) = windows_completed(off, len) {
        obj.data.start_writeback(lo, n);
    }
}

/// The whole windows `[lo, lo + n)` that a write of `len` bytes at `off` ends in (from
/// the window holding `off`), `None` if it ends none.
fn windows_completed(off: u64, len: u64) -> Option<(u64, u64)> {
    let first = off / WRITEBACK_WINDOW + 1;
    let last = (off + len) / WRITEBACK_WINDOW;
    (first <= last).then(|| {
        let lo = (first - 1) * WRITEBACK_WINDOW;
        (lo, last * WRITEBACK_WINDOW - lo)
    })
}

/// The fault point `STRIPEFS_FAULT_ABORT_MID_RMW`: a rewrite in place of a written block
/// has its new bytes in the data file and not yet its checksum; the countdown's last
/// one kills the process (as kill -9 would).
fn fault_mid_rmw(c: &Ctx) {
    if let Some(countdown) = c.abort_mid_rmw {
        if countdown.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            eprintln!("STRIPEFS_FAULT_ABORT_MID_RMW: dying between data and checksum");
            // SAFETY: kill(2) on this process: it dies as with kill -9.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
    }
}

/// The pieces of one write, computed before anything is written.
struct WriteParts<'a> {
    off: u64,
    data: &'a [u8],
    head: Option<&'a Partial>,
    /// The range of `data` written as whole blocks.
    mid: (usize, usize),
    tail: Option<&'a Partial>,
    /// The new sidecar entries of blocks `first..`.
    entries: &'a [u8],
    first: u64,
}

impl WriteParts<'_> {
    /// Data first, checksums last: a crash in between leaves mismatches (detected) or
    /// old holes, never a stored CRC blessing bytes that are not there.
    fn write_all(&self, c: &Ctx, obj: &Object) -> Result<(), WireError> {
        if self.is_one_run() {
            self.write_run(c, obj, 0, self.data.len())?;
        } else {
            if let Some(p) = self.head {
                p.flush(c, obj)?;
            }
            self.write_mid(c, obj)?;
            if let Some(p) = self.tail {
                p.flush(c, obj)?;
            }
        }
        // Disk write-out overlaps the transfer of the next requests instead of piling
        // up for the client's fsync (the page cache would otherwise hold it all).
        start_writeback_behind(obj, self.off, self.data.len() as u64);
        if [self.head, self.tail]
            .into_iter()
            .flatten()
            .any(|p| p.written)
        {
            fault_mid_rmw(c);
        }
        self.write_entries(c, obj)
    }

    /// The broken order of `Canary::ChecksumBeforeData`, with no repair.
    fn checksums_first(&self, c: &Ctx, obj: &Object) -> Result<(), WireError> {
        self.write_entries(c, obj)?;
        if let Some(p) = self.head {
            p.flush(c, obj)?;
        }
        self.write_mid(c, obj)?;
        if let Some(p) = self.tail {
            p.flush(c, obj)?;
        }
        Ok(())
    }

    /// Whether the bytes to write are exactly the request's, at its offset: the partial
    /// blocks change only where the request writes (they are not holes over stale bytes
    /// to be zeroed), so head, whole blocks and tail go out as one write (an unaligned
    /// record would otherwise cost three).
    fn is_one_run(&self) -> bool {
        let at = (self.off % BLOCK) as usize;
        let head = self.head.map_or(true, |p| p.dirty == (at, at + self.mid.0));
        let tail = self
            .tail
            .map_or(true, |p| p.dirty == (0, self.data.len() - self.mid.1));
        head && tail
    }

    fn write_mid(&self, c: &Ctx, obj: &Object) -> Result<(), WireError> {
        let (lo, hi) = self.mid;
        self.write_run(c, obj, lo, hi)
    }

    /// Writes `data[lo..hi]` at its place.
    fn write_run(&self, c: &Ctx, obj: &Object, lo: usize, hi: usize) -> Result<(), WireError> {
        if lo >= hi {
            return Ok(());
        }
        let at = self.off + lo as u64;
        obj.data.write_at(&self.data[lo..hi], at).map_err(|e| {
            c.io(
                &format!("writing {} bytes at object offset {at}", hi - lo),
                &e,
            )
        })
    }

    fn write_entries(&self, c: &Ctx, obj: &Object) -> Result<(), WireError> {
        let (first, n) = (self.first, self.entries.len() as u64 / ENTRY_BYTES);
        obj.crcs
            .write_at(self.entries, first * ENTRY_BYTES)
            .map_err(|e| c.io(&format!("writing checksums of {n} blocks from {first}"), &e))
    }
}

/// Reserves the space a write of blocks `first..first + nblocks` (data up to object
/// offset `end`) needs, data and checksums, before anything is written.
fn reserve(c: &Ctx, obj: &Object, first: u64, end: u64, nblocks: u64) -> Result<(), WireError> {
    let start = first * BLOCK;
    obj.data.reserve(start, end - start).map_err(|e| {
        c.io(
            &format!("reserving {} bytes at object offset {start}", end - start),
            &e,
        )
    })?;
    obj.crcs
        .reserve(first * ENTRY_BYTES, nblocks * ENTRY_BYTES)
        .map_err(|e| {
            c.io(
                &format!("reserving checksums of {nblocks} blocks from {first}"),
                &e,
            )
        })
}

/// After a write to blocks `first..` failed part-way, makes the stored checksum of each
/// block the write touched agree with the bytes the block now holds, so that the block
/// reads (old bytes, new bytes or a mix of the two inside the written range).
/// `intended` holds the entries the write meant to store. A block that was a hole
/// stays one (reads as zeros, its old content) unless it holds exactly its new bytes:
/// bytes a torn write once left under a hole are never blessed.
fn repair(c: &Ctx, obj: &Object, first: u64, intended: &[u8]) -> Result<(), WireError> {
    let mut current = vec![0u8; intended.len()];
    let got = obj
        .crcs
        .read_at(&mut current, first * ENTRY_BYTES)
        .map_err(|e| c.io(&format!("reading checksums from block {first}"), &e))?;
    current[got..].fill(0);
    let mut fixed = current.clone();
    let mut buf = [0u8; BLOCK_USIZE];
    let n = intended.len() / ENTRY_BYTES as usize;
    for i in 0..n {
        let block = first + i as u64;
        buf.fill(0);
        obj.data
            .read_at(&mut buf, block * BLOCK)
            .map_err(|e| c.io(&format!("reading block {block}"), &e))?;
        let actual = crc32c(&buf);
        let at = i * ENTRY_BYTES as usize;
        let entry = &current[at..at + ENTRY_BYTES as usize];
        let want = Entry::decode(&intended[at..at + ENTRY_BYTES as usize])
            .ok()
            .and_then(Entry::base);
        // The write's blocks have no pieces (folded in first): the entry says it all.
        let bless = want == Some(actual);
        let new = match Entry::decode(entry) {
            Ok(Entry::Written(stored)) if stored == actual => None,
            Ok(Entry::Written(_)) | Ok(Entry::Pieces(Some(_))) => Some(Entry::Written(actual)),
            Ok(Entry::Hole) if !bless => None,
            _ if bless => Some(Entry::Written(actual)),
            _ => Some(Entry::Hole),
        };
        if let Some(e) = new {
            fixed[at..at + ENTRY_BYTES as usize].copy_from_slice(&e.encode());
        }
    }
    // Only the span of changed entries is written, so that unchanged entries past
    // the sidecar's end need no space.
    let changed = |i: &usize| current[*i] != fixed[*i];
    let lo = (0..fixed.len()).find(changed);
    let hi = (0..fixed.len()).rev().find(changed);
    if let (Some(lo), Some(hi)) = (lo, hi) {
        let lo = lo / ENTRY_BYTES as usize * ENTRY_BYTES as usize;
        let hi = (hi / ENTRY_BYTES as usize + 1) * ENTRY_BYTES as usize;
        obj.crcs
            .write_at(&fixed[lo..hi], first * ENTRY_BYTES + lo as u64)
            .map_err(|e| c.io(&format!("rewriting checksums from block {first}"), &e))?;
    }
    tracing::warn!(
        "data server {}: {} on target {}: a write failed part-way; the checksums of blocks \
         {first}..{} now match their bytes",
        c.server.0,
        c.fid,
        c.target.display(),
        first + n as u64
    );
    Ok(())
}

/// Reads the block-aligned range at object offset `off` into `out` (zeroed by the
/// caller) and the stored CRC of each block into `crcs`. Holes come back as zeros with
/// `zero_crc`. Nothing is verified here: the client checks the data against the CRCs.
pub fn read(
    c: &Ctx,
    obj: &Object,
    off: u64,
    out: &mut [u8],
    crcs: &mut [u32],
    zero_crc: u32,
) -> Result<(), WireError> {
    assert!(off % BLOCK == 0 && out.len() % BLOCK_USIZE == 0);
    assert_eq!(crcs.len(), out.len() / BLOCK_USIZE);
    let first = off / BLOCK;
    let entries = read_entries(c, obj, first, crcs.len() as u64)?;
    obj.data.read_at(out, off).map_err(|e| {
        c.io(
            &format!("reading {} bytes at object offset {off}", out.len()),
            &e,
        )
    })?;
    let blocks = out.chunks_mut(BLOCK_USIZE).zip(entries);
    for (i, ((block, entry), crc)) in blocks.zip(crcs.iter_mut()).enumerate() {
        match entry {
            Entry::Written(stored) => *crc = stored,
            Entry::Hole => {
                block.fill(0);
                *crc = zero_crc;
            }
            // The stored base checked, the pieces put on top, the result's CRC sent.
            Entry::Pieces(_) => *crc = merge(c, obj, first + i as u64, entry, block)?,
        }
    }
    Ok(())
}

/// Plans a read of `crcs.len()` blocks at `off` to be sent from where the bytes lie
/// (zero-copy): the parts, in order, are runs of written blocks in the data file and
/// runs of zeros (holes, and written blocks past the data file's end, which their CRC
/// covers as zero padding); `crcs` gets the stored CRCs. `None` if the data file has no
/// descriptor (an in-memory store): the caller copies with [`read`] instead. The caller
/// holds the blocks' range lock until the parts are sent.
pub fn read_parts(
    c: &Ctx,
    obj: &Object,
    off: u64,
    crcs: &mut [u32],
    zero_crc: u32,
) -> Result<Option<Vec<Part>>, WireError> {
    assert!(off % BLOCK == 0);
    let Some(fd) = obj
        .data
        .borrowed_fd()
        .map(|f| std::os::fd::AsRawFd::as_raw_fd(&f))
    else {
        return Ok(None);
    };
    let first = off / BLOCK;
    let entries = read_entries(c, obj, first, crcs.len() as u64)?;
    let size = obj
        .data
        .size_bytes()
        .map_err(|e| c.io("reading the object length", &e))?;
    let mut parts: Vec<Part> = Vec::new();
    let mut push = |p: Part| {
        if p.is_empty() {
            return;
        }
        match (parts.last_mut(), &p) {
            (Some(Part::Zeros(n)), Part::Zeros(m)) => *n += m,
            (
                Some(Part::File {
                    offset: o, len: l, ..
                }),
                Part::File { offset, len, .. },
            ) if *o + *l == *offset => *l += len,
            _ => parts.push(p),
        }
    };
    for (i, (entry, crc)) in entries.into_iter().zip(crcs.iter_mut()).enumerate() {
        let at = off + i as u64 * BLOCK;
        match entry {
            // Pieces on top: this block is merged in memory and sent from there.
            Entry::Pieces(_) => {
                let mut buf = vec![0u8; BLOCK_USIZE];
                obj.data
                    .read_at(&mut buf, at)
                    .map_err(|e| c.io(&format!("reading block at object offset {at}"), &e))?;
                *crc = merge(c, obj, first + i as u64, entry, &mut buf)?;
                push(Part::Bytes(buf));
            }
            Entry::Written(stored) => {
                *crc = stored;
                let in_file = size.saturating_sub(at).min(BLOCK);
                push(Part::File {
                    fd,
                    offset: at,
                    len: in_file,
                });
                push(Part::Zeros(BLOCK - in_file));
            }
            Entry::Hole => {
                *crc = zero_crc;
                push(Part::Zeros(BLOCK));
            }
        }
    }
    debug_assert_eq!(
        parts.iter().map(Part::len).sum::<u64>(),
        crcs.len() as u64 * BLOCK
    );
    // No readahead hint (POSIX_FADV_WILLNEED) here: the kernel fills the page cache
    // for it a 4 KiB page at a time (`force_page_cache_ra`), 44% of the servers' CPU in
    // a profile of cold remote reads, while sendfile's own readahead fills it in larger
    // pieces (page allocation fell from 10% of the samples to under 0.2%): without the
    // hint, 0.30-0.42 s of server CPU per GiB read against 0.76-0.82 with it, and reads
    // no slower (docs/benchmarks.md, eleventh session).
    Ok(Some(parts))
}

/// Checks `n` blocks from `first`, as the device holds them (`read_stored`), against
/// their stored checksums; returns each written block that fails, with its stored and
/// computed CRC. Holes are not checked.
pub fn verify(
    c: &Ctx,
    obj: &Object,
    first: u64,
    n: u64,
) -> Result<Vec<(u64, u32, u32)>, WireError> {
    let entries = read_entries(c, obj, first, n)?;
    let mut data = vec![0u8; (n * BLOCK) as usize];
    obj.data
        .read_stored(&mut data, first * BLOCK)
        .map_err(|e| {
            c.io(
                &format!(
                    "reading {} bytes at object offset {}",
                    n * BLOCK,
                    first * BLOCK
                ),
                &e,
            )
        })?;
    let mut bad = Vec::new();
    let blocks = data.chunks(BLOCK_USIZE).zip(entries);
    for (i, (block, entry)) in blocks.enumerate() {
        // A block with pieces has its base checked (the pieces are checked as they
        // are merged).
        if let Some(stored) = entry.base() {
            let actual = crc32c(block);
            if actual != stored {
                bad.push((first + i as u64, stored, actual));
            }
        }
    }
    Ok(bad)
}

/// Sets the object's length to `new_len`, keeping the CRC of a cut last block right.
pub fn truncate(c: &Ctx, obj: &Object, new_len: u64) -> Result<(), WireError> {
    let old_len = obj
        .data
        .size_bytes()
        .map_err(|e| c.io("reading the object length", &e))?;
    let keep = (new_len % BLOCK) as usize;
    let block = new_len / BLOCK;
    let mut cut_crc = None;
    if new_len < old_len && keep != 0 {
        let mut p = Partial::load(c, obj, block)?;
        if p.written {
            p.buf[keep..].fill(0);
            p.crc = crc32c(&p.buf);
            p.protect(c, obj)?;
            cut_crc = Some(p.crc);
        }
    }
    obj.data
        .set_len(new_len)
        .map_err(|e| c.io(&format!("truncating to {new_len} bytes"), &e))?;
    let entries_len = new_len.div_ceil(BLOCK) * ENTRY_BYTES;
    obj.crcs
        .set_len(entries_len)
        .map_err(|e| c.io(&format!("truncating checksums to {entries_len} bytes"), &e))?;
    if let Some(crc) = cut_crc {
        // The block is already cut: its old checksum no longer matches. The entry is
        // rewritten in place (no space needed); a failed write is tried once more, so
        // that one transient error does not leave the block unreadable.
        let entry = encode_entry(crc);
        let at = block * ENTRY_BYTES;
        if let Err(first) = obj.crcs.write_at(&entry, at) {
            tracing::warn!(
                "data server {}: {} on target {}: writing checksum of cut block {block}: \
                 {first}; trying once more",
                c.server.0,
                c.fid,
                c.target.display()
            );
            obj.crcs
                .write_at(&entry, at)
                .map_err(|e| c.io(&format!("writing checksum of block {block}"), &e))?;
        }
    }
    Ok(())
}

/// Entries scanned per sidecar read while seeking (8192 entries cover 32 MiB of object).
const SEEK_SCAN_ENTRIES: u64 = 8192;

/// Makes `[off, off + len)` of the object read as zeros and frees its whole blocks.
pub fn punch(c: &Ctx, obj: &Object, off: u64, len: u64) -> Result<(), WireError> {
    assert!(len > 0);
    let end = off.checked_add(len).expect("validated range");
    let (first_full, end_full) = (off.div_ceil(BLOCK), end / BLOCK);
    let head = (off % BLOCK != 0).then_some(off / BLOCK);
    let tail = (end % BLOCK != 0)
        .then_some(end / BLOCK)
        .filter(|b| Some(*b) != head);
    // Read and verify the edge blocks before anything changes; a hole at an edge
    // already reads as zeros.
    let mut edges = Vec::with_capacity(2);
    for block in head.into_iter().chain(tail) {
        let p = Partial::load(c, obj, block)?;
        if p.written {
            edges.push(p);
        }
    }
    if first_full < end_full {
        let n = end_full - first_full;
        obj.crcs
            .punch(first_full * ENTRY_BYTES, n * ENTRY_BYTES)
            .map_err(|e| {
                c.io(
                    &format!("clearing checksums of {n} blocks from {first_full}"),
                    &e,
                )
            })?;
        obj.data.punch(first_full * BLOCK, n * BLOCK).map_err(|e| {
            c.io(
                &format!(
                    "punching {} bytes at object offset {}",
                    n * BLOCK,
                    first_full * BLOCK
                ),
                &e,
            )
        })?;
    }
    for p in &mut edges {
        let start = p.block * BLOCK;
        let lo = (off.max(start) - start) as usize;
        let hi = (end.min(start + BLOCK) - start) as usize;
        let crc = p.store(c, obj, lo, &[0u8; BLOCK_USIZE][..hi - lo])?;
        obj.crcs
            .write_at(&encode_entry(crc), p.block * ENTRY_BYTES)
            .map_err(|e| c.io(&format!("writing checksum of block {}", p.block), &e))?;
    }
    Ok(())
}

/// Reserves disk space for the blocks of `[off, off + len)` and their sidecar entries,
/// so that writing them later does not fail for lack of space. Changes no content: new
/// blocks stay holes.
pub fn allocate(c: &Ctx, obj: &Object, off: u64, len: u64) -> Result<(), WireError> {
    assert!(len > 0);
    let first = off / BLOCK;
    let end = off
        .checked_add(len)
        .expect("validated range")
        .div_ceil(BLOCK);
    let n = end - first;
    obj.data.allocate(first * BLOCK, n * BLOCK).map_err(|e| {
        c.io(
            &format!(
                "allocating {} bytes at object offset {}",
                n * BLOCK,
                first * BLOCK
            ),
            &e,
        )
    })?;
    obj.crcs
        .allocate(first * ENTRY_BYTES, n * ENTRY_BYTES)
        .map_err(|e| {
            c.io(
                &format!("allocating checksums of {n} blocks from {first}"),
                &e,
            )
        })
}

/// Bytes the object and its sidecar occupy on disk.
pub fn allocated(c: &Ctx, obj: &Object) -> Result<u64, WireError> {
    let data = obj
        .data
        .allocated_bytes()
        .map_err(|e| c.io("reading the object's allocation", &e))?;
    let crcs = obj
        .crcs
        .allocated_bytes()
        .map_err(|e| c.io("reading the checksums' allocation", &e))?;
    Ok(data + crcs)
}

/// The first object offset at or after `off` in a written block (`hole` false) or in a
/// hole (`hole` true); `None` if no written block follows. Past the sidecar's last
/// entry everything is a hole, so a hole is always found.
pub fn seek(c: &Ctx, obj: &Object, off: u64, hole: bool) -> Result<Option<u64>, WireError> {
    let entries = obj
        .crcs
        .size_bytes()
        .map_err(|e| c.io("reading the checksums' length", &e))?
        / ENTRY_BYTES;
    let mut block = off / BLOCK;
    let mut buf = vec![0u8; (SEEK_SCAN_ENTRIES * ENTRY_BYTES) as usize];
    while block < entries {
        if !hole {
            // Skip the sidecar's own holes (never-written stretches) without reading.
            let next = obj
                .crcs
                .seek_data(block * ENTRY_BYTES)
                .map_err(|e| c.io("seeking data in the checksums", &e))?;
            match next {
                Some(at) => block = block.max(at / ENTRY_BYTES),
                None => return Ok(None),
            }
            if block >= entries {
                break;
            }
        }
        let n = (entries - block).min(SEEK_SCAN_ENTRIES);
        let bytes = &mut buf[..(n * ENTRY_BYTES) as usize];
        let got = obj
            .crcs
            .read_at(bytes, block * ENTRY_BYTES)
            .map_err(|e| c.io(&format!("reading checksums from block {block}"), &e))?;
        bytes[got..].fill(0);
        let hit = bytes
            .chunks(ENTRY_BYTES as usize)
            .position(|e| Entry::decode(e).map_or(true, Entry::is_data) != hole);
        if let Some(i) = hit {
            return Ok(Some(off.max((block + i as u64) * BLOCK)));
        }
        block += n;
    }
    Ok(hole.then(|| off.max(block * BLOCK)))
}

/// Blocks a compaction folds per batch: their records go to the log in one append, with
/// one sync for the images among them.
const COMPACT_BATCH: usize = 1024;

/// Memory for a compaction batch's blocks (their stored bytes and their folded bytes),
/// kept between compactions: fresh pages for every block were a third of the time a
/// data server spent in an fsync that folded the interleaved pattern's pieces (`perf`:
/// page faults, zeroing and freeing of two 4 KiB buffers per block).
static SCRATCH: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());
/// Scratch buffers kept (each `2 * COMPACT_BATCH` blocks, 8 MiB); compactions running
/// at once beyond it take fresh memory, as every compaction did before.
const SCRATCH_KEPT: usize = 1;

/// A scratch buffer of `2 * COMPACT_BATCH` blocks, given back when dropped.
struct Scratch(Vec<u8>);

impl Scratch {
    fn take() -> Scratch {
        let kept = SCRATCH.lock().unwrap_or_else(|p| p.into_inner()).pop();
        Scratch(kept.unwrap_or_else(|| vec![0u8; 2 * COMPACT_BATCH * BLOCK_USIZE]))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let mut kept = SCRATCH.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() < SCRATCH_KEPT {
            kept.push(std::mem::take(&mut self.0));
        }
    }
}

/// Folds the pieces of `blocks` into them (compaction; the caller holds their exclusive
/// lock): each block's base is checked and its pieces put on top, the results are
/// logged as any in-place rewrite of written bytes is (`intent.rs`: one sync for all
/// the images of a batch), written, given their entries, and their pieces settled.
/// Returns how many blocks were folded.
pub fn compact(c: &Ctx, obj: &Object, blocks: &[u64]) -> Result<usize, WireError> {
    struct Fold {
        block: u64,
        entry: Entry,
        crc: u32,
    }
    fn nth(buf: &[u8], i: usize) -> &[u8] {
        &buf[i * BLOCK_USIZE..(i + 1) * BLOCK_USIZE]
    }
    let mut scratch = Scratch::take();
    for chunk in blocks.chunks(COMPACT_BATCH) {
        let mut folds = Vec::with_capacity(chunk.len());
        // Block i's bytes as the data file holds them (checked, for a written base) in
        // `bases`, with its pieces on top in `merged`.
        let (bases, merged) = scratch.0.split_at_mut(COMPACT_BATCH * BLOCK_USIZE);
        // The chunk's entries in one read of the sidecar.
        let (lo, hi) = (
            *chunk.iter().min().expect("a chunk"),
            *chunk.iter().max().expect("a chunk"),
        );
        let span = (hi - lo < 64 * COMPACT_BATCH as u64)
            .then(|| read_entries(c, obj, lo, hi - lo + 1))
            .transpose()?;
        for (i, &block) in chunk.iter().enumerate() {
            let entry = match &span {
                Some(es) => es[(block - lo) as usize],
                None => read_entry(c, obj, block)?,
            };
            let base = &mut bases[i * BLOCK_USIZE..(i + 1) * BLOCK_USIZE];
            let got = obj
                .data
                .read_at(base, block * BLOCK)
                .map_err(|e| c.io(&format!("reading block {block}"), &e))?;
            base[got..].fill(0);
            let m = &mut merged[i * BLOCK_USIZE..(i + 1) * BLOCK_USIZE];
            m.copy_from_slice(base);
            let crc = merge(c, obj, block, entry, m)?;
            folds.push(Fold { block, entry, crc });
        }
        let (bases, merged) = (&*bases, &*merged);
        let written = |f: &&Fold| f.entry.base().is_some();
        // A written block's rewrite must not run out of space half-way: one that ends
        // past the data file's end takes its space first. A hole's may: it reads as
        // zeros and its pieces until its entry changes.
        let size = obj
            .data
            .size_bytes()
            .map_err(|e| c.io("reading the object length", &e))?;
        let past_end = |f: &&Fold| (f.block + 1) * BLOCK > size;
        for f in folds.iter().filter(written).filter(past_end) {
            obj.data.reserve(f.block * BLOCK, BLOCK).map_err(|e| {
                c.io(
                    &format!("reserving block {} to fold its pieces in", f.block),
                    &e,
                )
            })?;
        }
        let guarded: Vec<(u64, &[u8], u32)> = folds
            .iter()
            .enumerate()
            .filter(|(_, f)| written(f))
            .map(|(i, f)| (f.block, nth(merged, i), f.crc))
            .collect();
        obj.intents
            .protect_many(&guarded, BLOCK)
            .map_err(|e| c.io("logging the compaction of pieces", &e))?;
        // Data first, then the entries: with the chunk's span of entries in hand, all of
        // them in one write (the span lies inside the caller's exclusive lock); else
        // one write per block.
        let mut failed = None;
        for (i, f) in folds.iter().enumerate() {
            let at = f.block * BLOCK;
            let done = obj
                .data
                .write_at(nth(merged, i), at)
                .map_err(|e| c.io(&format!("writing block {} with its pieces", f.block), &e))
                .and_then(|()| match span {
                    Some(_) => Ok(()),
                    None => {
                        if f.entry.base().is_some() {
                            fault_mid_rmw(c);
                        }
                        write_entry(c, obj, f.block, Entry::Written(f.crc))
                    }
                });
            if let Err(e) = done {
                failed = Some((i + 1, e));
                break;
            }
        }
        if let (None, Some(es)) = (&failed, &span) {
            if folds.iter().any(|f| written(&f)) {
                fault_mid_rmw(c);
            }
            let mut buf = Vec::with_capacity(es.len() * ENTRY_BYTES as usize);
            es.iter().for_each(|e| buf.extend_from_slice(&e.encode()));
            for f in &folds {
                let at = ((f.block - lo) * ENTRY_BYTES) as usize;
                buf[at..at + ENTRY_BYTES as usize].copy_from_slice(&encode_entry(f.crc));
            }
            if let Err(e) = obj.crcs.write_at(&buf, lo * ENTRY_BYTES) {
                let e = c.io(
                    &format!("writing the checksums of {} folded blocks", folds.len()),
                    &e,
                );
                failed = Some((folds.len(), e));
            }
        }
        if let Some((n, e)) = failed {
            // A compaction changes no byte anyone reads, so a failed one must not either:
            // each block it may have changed gets its base back (a written one), with
            // its entry, and keeps its pieces (if that fails too, it is a checksum error
            // until its log repairs it, never other bytes). A hole with pieces reads as
            // zeros and its pieces whatever the data file holds.
            for (i, f) in folds[..n].iter().enumerate() {
                let restored = match f.entry.base() {
                    Some(crc) => obj
                        .data
                        .write_at(nth(bases, i), f.block * BLOCK)
                        .map_err(|e| c.io(&format!("restoring block {}", f.block), &e))
                        .and_then(|()| write_entry(c, obj, f.block, Entry::Pieces(Some(crc)))),
                    None => write_entry(c, obj, f.block, Entry::Pieces(None)),
                };
                if let Err(r) = restored {
                    tracing::error!("{e}; then restoring block {} failed: {r}", f.block);
                }
            }
            return Err(e);
        }
        for f in &folds {
            obj.intents.mark_written(f.block, f.block + 1);
        }
        obj.pieces
            .settle(&obj.intents, chunk, BLOCK)
            .map_err(|e| c.io("recording folded pieces in the object's log", &e))?;
    }
    Ok(blocks.len())
}

/// [`compact`] of every block of the object that has pieces (the caller holds the
/// whole object's exclusive lock).
pub fn compact_all(c: &Ctx, obj: &Object) -> Result<usize, WireError> {
    if obj.pieces.is_empty() {
        return Ok(0);
    }
    compact(c, obj, &obj.pieces.blocks_in(0, u64::MAX))
}

/// After the object's files are opened (the caller has the only handle): brings every
/// block named in its log (`decoded`, parsed from the log file, `intent.rs`) to its last
/// complete state. A block that fails its stored checksum (a server that died or lost
/// power between a rewrite's data and its checksum) gets an intended CRC its bytes
/// match, or else its latest image; the live pieces that came after that state (not
/// covered by a later whole-block write) are put on top, and the result is written in
/// place (logged first when it replaces written bytes) with its entry. Blocks with
/// neither pieces nor a mismatch are left alone, as are holes and blocks past the data
/// file's end without pieces (a punch or truncate came later). Returns how many blocks
/// were rewritten.
pub fn replay_log(
    c: &Ctx,
    obj: &Object,
    decoded: &crate::intent::Decoded,
) -> Result<usize, WireError> {
    use crate::intent::Record;
    if decoded.torn_bytes > 0 {
        tracing::warn!(
            "data server {}: {} on target {}: the last {} bytes of the object's log are torn \
             (never synced); ignored",
            c.server.0,
            c.fid,
            c.target.display(),
            decoded.torn_bytes
        );
    }
    let size = obj
        .data
        .size_bytes()
        .map_err(|e| c.io("reading the object length", &e))?;
    // Records of epochs before the last barrier guard states an fsync superseded.
    let live_from = decoded
        .records
        .iter()
        .filter(|r| matches!(r, Record::Barrier { .. }))
        .map(Record::seq)
        .max()
        .unwrap_or(0);
    let mut blocks: std::collections::BTreeMap<u64, Vec<&Record>> = Default::default();
    for r in decoded.records.iter().filter(|r| r.seq() >= live_from) {
        if let Some(b) = r.block(BLOCK) {
            blocks.entry(b).or_default().push(r);
        }
    }
    // (block, new content, its CRC, whether it replaces written bytes, how)
    let mut fixed: Vec<(u64, Vec<u8>, u32, bool, &str)> = Vec::new();
    // The live pieces folded in, by block.
    let mut live: Vec<(u64, Piece)> = Vec::new();
    for (block, recs) in blocks {
        // Pieces before the block's last cover were replaced by a whole-block write.
        let covered = recs
            .iter()
            .rposition(|r| matches!(r, Record::Cover { .. }))
            .map_or(0, |i| i + 1);
        let has_pieces = |from: usize| {
            recs[from.max(covered)..]
                .iter()
                .any(|r| matches!(r, Record::Piece { .. }))
        };
        if block * BLOCK >= size && !has_pieces(0) {
            continue;
        }
        let entry = read_entry(c, obj, block)?;
        let mut buf = vec![0u8; BLOCK_USIZE];
        obj.data
            .read_at(&mut buf, block * BLOCK)
            .map_err(|e| c.io(&format!("reading block {block}"), &e))?;
        let actual = crc32c(&buf);
        // The state to start from, and the first record that can come after it.
        let (from, how) = match entry.base() {
            None => {
                buf.fill(0);
                (0, "")
            }
            Some(stored) if stored == actual => (0, ""),
            Some(_) => {
                let meant = recs.iter().rposition(|r| match r {
                    Record::Intent { crc, .. } => *crc == actual,
                    Record::Image { bytes, .. } => crc32c(bytes) == actual,
                    _ => false,
                });
                let image = recs.iter().rposition(|r| matches!(r, Record::Image { .. }));
                match (meant, image) {
                    (Some(i), _) => (i + 1, "given the checksum of its bytes from an intent"),
                    (None, Some(i)) => {
                        if let Record::Image { bytes, .. } = recs[i] {
                            buf.copy_from_slice(bytes);
                        }
                        (i + 1, "rewritten from its image")
                    }
                    // Nothing to repair it from: it stays a checksum error, and its
                    // pieces stay waiting on it (reads and compactions report it).
                    (None, None) => {
                        for r in &recs[covered..] {
                            if let Record::Piece {
                                offset, bytes, crc, ..
                            } = r
                            {
                                // Older than any piece appended from here on.
                                let piece = Piece {
                                    at: (offset % BLOCK) as usize,
                                    bytes: bytes.clone(),
                                    crc: *crc,
                                    pos: 0,
                                };
                                obj.pieces.restore(block, piece);
                            }
                        }
                        continue;
                    }
                }
            }
        };
        let mut folded = false;
        for r in &recs[from.max(covered)..] {
            if let Record::Piece {
                offset, bytes, crc, ..
            } = r
            {
                let at = (offset % BLOCK) as usize;
                buf[at..at + bytes.len()].copy_from_slice(bytes);
                folded = true;
                let piece = Piece {
                    at,
                    bytes: bytes.clone(),
                    crc: *crc,
                    pos: 0,
                };
                live.push((block, piece));
            }
        }
        let how = match (how.is_empty(), folded) {
            (true, false) => {
                // Unchanged: only an entry still naming pieces is brought up to date.
                if let Entry::Pieces(base) = entry {
                    let e = base.map_or(Entry::Hole, Entry::Written);
                    write_entry(c, obj, block, e)?;
                }
                continue;
            }
            (true, true) => "its pieces folded in",
            (false, _) => how,
        };
        let crc = crc32c(&buf);
        fixed.push((block, buf, crc, entry.base().is_some(), how));
    }
    // Rewrites of written bytes are logged first, as any rewrite in place is, so that a
    // crash during this replay leaves the next one something to start from.
    let guarded: Vec<(u64, &[u8], u32)> = fixed
        .iter()
        .filter(|f| f.3)
        .map(|f| (f.0, &f.1[..], f.2))
        .collect();
    obj.intents
        .protect_many(&guarded, BLOCK)
        .map_err(|e| c.io("logging the replay of the object's log", &e))?;
    for (block, buf, crc, _, how) in &fixed {
        obj.data.write_at(buf, block * BLOCK).map_err(|e| {
            c.io(
                &format!("rewriting block {block} from the object's log"),
                &e,
            )
        })?;
        write_entry(c, obj, *block, Entry::Written(*crc))?;
        tracing::warn!(
            "data server {}: {} on target {}: block at object offset {} {how} (object log)",
            c.server.0,
            c.fid,
            c.target.display(),
            block * BLOCK
        );
    }
    // The folded pieces are dead from here on: a later whole-block write must not get
    // them back after another restart.
    let blocks: Vec<u64> = fixed.iter().map(|f| f.0).collect();
    if let Err(e) = obj.pieces.settle(&obj.intents, &blocks, BLOCK) {
        // No cover could be appended (a full disk): the pieces stay live in the log, so
        // they stay in the index too, where the next compaction of their blocks, or a
        // write over them, covers them before anything else changes those bytes. Laid
        // on again, they change nothing: each block now holds them.
        tracing::warn!(
            "data server {}: {} on target {}: recording the folded pieces in the object's \
             log: {e}; kept until a later fold records them",
            c.server.0,
            c.fid,
            c.target.display()
        );
        for (block, piece) in live {
            obj.pieces.restore(block, piece);
        }
    }
    Ok(fixed.len())
}

#[cfg(test)]
mod writeback_tests {
    use super::*;
    const W: u64 = WRITEBACK_WINDOW;

    #[test]
    fn only_writes_that_end_a_window_start_write_out() {
        assert_eq!(windows_completed(0, 4096), None);
        assert_eq!(windows_completed(0, W), Some((0, W)));
        assert_eq!(windows_completed(W - 10, 10), Some((0, W)));
        assert_eq!(windows_completed(W - 10, 9), None);
        assert_eq!(windows_completed(W, W), Some((W, W)));
        assert_eq!(windows_completed(100, 3 * W), Some((0, 3 * W)));
        // Small writes streaming through a window: only the one that ends it counts.
        let mut started = 0;
        for k in 0..(2 * W / 47008 + 1) {
            if let Some((lo, n)) = windows_completed(k * 47008, 47008) {
                assert_eq!(n % W, 0);
                assert_eq!(lo % W, 0);
                started += n;
            }
        }
        assert_eq!(started, 2 * W);
    }
}
