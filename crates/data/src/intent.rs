//! An object's log file (`<fid>.log`, docs/objects.md, "Log records"): what makes a
//! read-modify-write of a partial block safe against the death of the server process
//! and against a power cut.
//!
//! A partial write into a block that already holds written bytes rewrites the block in
//! place: its bytes in the data file, then its checksum in the sidecar. Those bytes
//! include other writes' bytes, perhaps acknowledged by an fsync long before, and the
//! block's checksum covers them all; a server that stops between the two steps, or a
//! power cut that tears the rewrite, would turn the whole block into a checksum error.
//! So before a block changes in place, the log gets one of two records:
//!
//! - an **image** (the block's whole new content, synced to disk before the block is
//!   touched), for the first rewrite of a block since the object's last fsync began:
//!   the block may hold acknowledged bytes that are already on disk, and the image
//!   restores them (with the rewrite's own bytes) whatever a power cut tore;
//! - an **intent** (the block's new CRC, not synced), for later rewrites before the next
//!   fsync: the block's durable content then holds no bytes acknowledged since (an
//!   fsync starts by forgetting which blocks were written, see [`IntentLog::begin_sync`]),
//!   and the intent covers the death of the process, whose page cache survives it.
//!
//! When the object is next opened, each block named in the log that fails its stored
//! checksum is repaired: given the intended CRC if its bytes match one, else rewritten
//! from its latest image (`object::replay_log`). A block matching neither stays a
//! checksum error. An fsync empties the log once the data and checksums it covers are
//! on disk and no record was appended meanwhile.

use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use stripefs_sys::storage::{ObjectFile, Storage};
use stripefs_wire::crc32c;

/// Bytes of a record header (an intent record is a header alone).
pub const HEADER_BYTES: usize = 40;
/// Most disjoint ranges of written blocks an object remembers between fsyncs.
pub const MAX_WRITTEN_RANGES: usize = 1 << 16;
const MAGIC: &[u8; 4] = b"SFDL";
const VERSION: u8 = 1;
/// Record kinds (docs/objects.md, "Log record").
const KIND_PIECE: u8 = 1;
const KIND_COVER: u8 = 2;
const KIND_IMAGE: u8 = 3;
const KIND_INTENT: u8 = 4;
const KIND_BARRIER: u8 = 5;

/// One record of the log. `seq` is the object's sync epoch when the record was
/// appended (one more at each fsync's start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// Block `block` is being rewritten in place to bytes whose CRC32C is `crc`.
    Intent { seq: u64, block: u64, crc: u32 },
    /// Block `block` is being rewritten in place to `bytes` (a whole block).
    Image {
        seq: u64,
        block: u64,
        bytes: Vec<u8>,
    },
    /// An fsync that began epoch `seq` completed: records of earlier epochs are dead
    /// (the states they guard are superseded by one on disk).
    Barrier { seq: u64 },
    /// A partial-block write of the delta log: `bytes` (inside one block, shorter than
    /// it) at object offset `offset`, under the CRC32C the client sent for them.
    Piece {
        seq: u64,
        offset: u64,
        bytes: Vec<u8>,
        crc: u32,
    },
    /// Block `block` was replaced whole after this log's earlier records of it: they
    /// are dead.
    Cover { seq: u64, block: u64 },
}

impl Record {
    pub fn seq(&self) -> u64 {
        match self {
            Record::Intent { seq, .. }
            | Record::Image { seq, .. }
            | Record::Barrier { seq }
            | Record::Piece { seq, .. }
            | Record::Cover { seq, .. } => *seq,
        }
    }

    /// The block the record is about (none for a barrier).
    pub fn block(&self, block_bytes: u64) -> Option<u64> {
        match self {
            Record::Intent { block, .. }
            | Record::Image { block, .. }
            | Record::Cover { block, .. } => Some(*block),
            Record::Piece { offset, .. } => Some(offset / block_bytes),
            Record::Barrier { .. } => None,
        }
    }
}

/// A record's payload is padded with zeros to a multiple of this.
const PAD: usize = 8;

fn header(kind: u8, seq: u64, offset: u64, len: u32, crc: u32) -> [u8; HEADER_BYTES] {
    let mut r = [0u8; HEADER_BYTES];
    r[0..4].copy_from_slice(MAGIC);
    r[4] = VERSION;
    r[5] = kind;
    r[8..16].copy_from_slice(&seq.to_le_bytes());
    r[16..24].copy_from_slice(&offset.to_le_bytes());
    r[24..28].copy_from_slice(&len.to_le_bytes());
    r[28..32].copy_from_slice(&crc.to_le_bytes());
    let h = crc32c(&r[0..32]);
    r[32..36].copy_from_slice(&h.to_le_bytes());
    r
}

/// The bytes of a record.
pub fn encode(r: &Record, block_bytes: u64) -> Vec<u8> {
    match r {
        Record::Intent { seq, block, crc } => {
            header(KIND_INTENT, *seq, block * block_bytes, 0, *crc).to_vec()
        }
        Record::Barrier { seq } => header(KIND_BARRIER, *seq, 0, 0, 0).to_vec(),
        Record::Image { seq, block, bytes } => image_record(*seq, *block, bytes, block_bytes),
        Record::Cover { seq, block } => {
            header(KIND_COVER, *seq, block * block_bytes, 0, 0).to_vec()
        }
        Record::Piece {
            seq,
            offset,
            bytes,
            crc,
        } => piece_record(*seq, *offset, bytes, *crc, block_bytes),
    }
}

/// The bytes of a piece record: `bytes` at object offset `offset`, inside one block.
pub fn piece_record(seq: u64, offset: u64, bytes: &[u8], crc: u32, block_bytes: u64) -> Vec<u8> {
    assert!(
        !bytes.is_empty() && offset % block_bytes + bytes.len() as u64 <= block_bytes,
        "a piece lies inside one block"
    );
    let padded = bytes.len().div_ceil(PAD) * PAD;
    let mut out = Vec::with_capacity(HEADER_BYTES + padded);
    out.extend_from_slice(&header(KIND_PIECE, seq, offset, bytes.len() as u32, crc));
    out.extend_from_slice(bytes);
    out.resize(HEADER_BYTES + padded, 0);
    out
}

/// The bytes of an image record of `bytes`, a whole block.
fn image_record(seq: u64, block: u64, bytes: &[u8], block_bytes: u64) -> Vec<u8> {
    assert_eq!(bytes.len() as u64, block_bytes, "an image is a whole block");
    let mut out = Vec::with_capacity(HEADER_BYTES + bytes.len());
    out.extend_from_slice(&header(
        KIND_IMAGE,
        seq,
        block * block_bytes,
        bytes.len() as u32,
        crc32c(bytes),
    ));
    out.extend_from_slice(bytes);
    out
}

/// What a log holds: its valid records in order, and whether parsing stopped early at
/// a record that does not hold (a torn tail after a power cut: everything after it was
/// never synced, so no rewrite relied on it).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    pub records: Vec<Record>,
    pub torn_bytes: usize,
}

/// Parses a log's bytes, up to the first record whose magic, version, kind, length,
/// header CRC, payload CRC or block alignment does not hold.
pub fn decode(bytes: &[u8], block_bytes: u64) -> Decoded {
    let mut out = Decoded::default();
    let mut at = 0;
    while at < bytes.len() {
        match decode_one(&bytes[at..], block_bytes) {
            Some((r, n)) => {
                out.records.push(r);
                at += n;
            }
            None => {
                out.torn_bytes = bytes.len() - at;
                break;
            }
        }
    }
    out
}

fn decode_one(b: &[u8], block_bytes: u64) -> Option<(Record, usize)> {
    let h = b.get(..HEADER_BYTES)?;
    let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().unwrap());
    let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap());
    if &h[0..4] != MAGIC || h[4] != VERSION || u32_at(32) != crc32c(&h[0..32]) {
        return None;
    }
    let (seq, offset, len, crc) = (u64_at(8), u64_at(16), u32_at(24) as usize, u32_at(28));
    if h[5] == KIND_PIECE {
        if len == 0 || offset % block_bytes + len as u64 > block_bytes {
            return None;
        }
        let bytes = b.get(HEADER_BYTES..HEADER_BYTES + len)?;
        let padded = len.div_ceil(PAD) * PAD;
        b.get(HEADER_BYTES..HEADER_BYTES + padded)?;
        return (crc32c(bytes) == crc).then(|| {
            let r = Record::Piece {
                seq,
                offset,
                bytes: bytes.to_vec(),
                crc,
            };
            (r, HEADER_BYTES + padded)
        });
    }
    if offset % block_bytes != 0 {
        return None;
    }
    let block = offset / block_bytes;
    match h[5] {
        KIND_COVER if len == 0 => Some((Record::Cover { seq, block }, HEADER_BYTES)),
        KIND_INTENT if len == 0 => Some((Record::Intent { seq, block, crc }, HEADER_BYTES)),
        KIND_BARRIER if len == 0 && offset == 0 => Some((Record::Barrier { seq }, HEADER_BYTES)),
        KIND_IMAGE if len as u64 == block_bytes => {
            let bytes = b.get(HEADER_BYTES..HEADER_BYTES + len)?;
            (crc32c(bytes) == crc).then(|| {
                let r = Record::Image {
                    seq,
                    block,
                    bytes: bytes.to_vec(),
                };
                (r, HEADER_BYTES + len)
            })
        }
        _ => None,
    }
}

/// Blocks written since the object's last fsync began, as disjoint ranges
/// `first -> end`.
#[derive(Default)]
struct Ranges(BTreeMap<u64, u64>);

impl Ranges {
    fn contains(&self, block: u64) -> bool {
        self.0
            .range(..=block)
            .next_back()
            .is_some_and(|(_, &end)| block < end)
    }

    fn insert(&mut self, mut first: u64, mut end: u64) {
        if first >= end {
            return;
        }
        // Merge with every range that touches [first, end).
        if let Some((&f, &e)) = self.0.range(..=first).next_back() {
            if e >= first {
                first = f;
                end = end.max(e);
            }
        }
        let touching: Vec<u64> = self.0.range(first..=end).map(|(&f, _)| f).collect();
        for f in touching {
            let e = self.0.remove(&f).unwrap();
            end = end.max(e);
        }
        self.0.insert(first, end);
    }
}

/// The log of one open object: opened (created) at its first record, appended to with
/// `O_APPEND` semantics (so that two handles of one object, one evicted from the cache
/// but still in use, never overwrite each other's records).
pub struct IntentLog {
    path: PathBuf,
    store: Arc<dyn Storage>,
    file: Mutex<Option<Arc<dyn ObjectFile>>>,
    /// Records appended since the log was last emptied.
    dirty: AtomicBool,
    /// The log file was created by this handle and its name is not yet durable.
    new_name: AtomicBool,
    /// The sync epoch records are appended in (see [`Record`]).
    epoch: AtomicU64,
    /// Bytes appended since the log was last emptied (by this handle).
    appended: AtomicU64,
    /// One append at a time, so that a failed one can be cut off again; holds the log's
    /// length when known (this handle is the only writer of the file), saving a stat per
    /// append.
    appending: Mutex<Option<u64>>,
    /// A failed append could not be cut off: the next append cuts it off first (and
    /// fails if it still cannot), unless the log is emptied before.
    broken: AtomicBool,
    written: Mutex<Ranges>,
}

impl IntentLog {
    /// The log at `path`; `existing` is its file if one was found at open.
    pub fn new(
        path: PathBuf,
        store: Arc<dyn Storage>,
        existing: Option<Arc<dyn ObjectFile>>,
    ) -> IntentLog {
        let dirty = existing
            .as_ref()
            .is_some_and(|f| f.size_bytes().map_or(true, |n| n > 0));
        IntentLog {
            path,
            store,
            file: Mutex::new(existing),
            dirty: AtomicBool::new(dirty),
            new_name: AtomicBool::new(false),
            epoch: AtomicU64::new(1),
            appended: AtomicU64::new(0),
            appending: Mutex::new(None),
            broken: AtomicBool::new(false),
            written: Mutex::new(Ranges::default()),
        }
    }

    /// After reading an existing log whose records' largest epoch is `seq`: appends
    /// from here on are of a later epoch, so that a barrier written later cannot kill
    /// them.
    pub fn resume_after(&self, seq: u64) {
        self.epoch.fetch_max(seq + 1, Ordering::AcqRel);
    }

    fn lock(&self) -> MutexGuard<'_, Option<Arc<dyn ObjectFile>>> {
        self.file.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn written(&self) -> MutexGuard<'_, Ranges> {
        self.written.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn file(&self) -> io::Result<Arc<dyn ObjectFile>> {
        let mut f = self.lock();
        if let Some(f) = f.as_ref() {
            return Ok(f.clone());
        }
        let opened = self.store.open_append(&self.path)?;
        self.new_name.store(true, Ordering::Release);
        *f = Some(opened.clone());
        Ok(opened)
    }

    /// Appends `bytes`; returns the file and the offset they start at.
    fn append(&self, bytes: &[u8]) -> io::Result<(Arc<dyn ObjectFile>, u64)> {
        let file = self.file()?;
        let mut known = self.appending.lock().unwrap_or_else(|p| p.into_inner());
        if self.broken.load(Ordering::Acquire) {
            // The last append failed part-way and cutting it off failed too: nothing is
            // appended after its torn bytes (a replay would stop there), so the cut is
            // tried again first.
            let Some(good) = *known else {
                return Err(io::Error::other(
                    "the object's log holds a record cut short at an unknown place",
                ));
            };
            file.set_len(good).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "the object's log holds a record cut short after byte {good}, which \
                         could not be removed: {e}"
                    ),
                )
            })?;
            self.broken.store(false, Ordering::Release);
        }
        let before = match *known {
            Some(n) => n,
            None => file.size_bytes()?,
        };
        self.dirty.store(true, Ordering::Release);
        if let Err(e) = file.append(bytes) {
            // A record cut short would end the log there, hiding every later record from
            // a replay: the log goes back to where it was (or, if that fails, before the
            // next append).
            *known = Some(before);
            if file.set_len(before).is_err() {
                self.broken.store(true, Ordering::Release);
            }
            return Err(e);
        }
        *known = Some(before + bytes.len() as u64);
        self.appended
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok((file, before))
    }

    /// Whether `block` was written since the object's last fsync began: its durable
    /// content then holds no bytes acknowledged since, and an intent suffices.
    pub fn written_since_sync(&self, block: u64) -> bool {
        self.written().contains(block)
    }

    /// Notes that blocks `first..end` were written. The set is bounded: past
    /// [`MAX_WRITTEN_RANGES`] disjoint ranges (random small writes without an fsync) it
    /// is forgotten, which is always safe (blocks then count as unwritten, and their
    /// next rewrites log images: more syncs, never less safety).
    pub fn mark_written(&self, first: u64, end: u64) {
        let mut w = self.written();
        w.insert(first, end);
        if w.0.len() > MAX_WRITTEN_RANGES {
            w.0.clear();
        }
    }

    /// Bytes appended to the log since it was last emptied.
    pub fn appended_bytes(&self) -> u64 {
        self.appended.load(Ordering::Relaxed)
    }

    /// Before rewriting `block` in place to `image` (whose CRC is `crc`): an image
    /// record made durable, or an intent, as the module explains.
    pub fn protect(&self, block: u64, image: &[u8], crc: u32, block_bytes: u64) -> io::Result<()> {
        self.protect_many(&[(block, image, crc)], block_bytes)
    }

    /// Before rewriting `block`, written since the object's last fsync began (the
    /// caller checked [`IntentLog::written_since_sync`] under the block's lock, which
    /// keeps the epoch), in place to bytes whose CRC is `crc`: an intent, unsynced.
    pub fn intend(&self, block: u64, crc: u32, block_bytes: u64) -> io::Result<()> {
        let seq = self.epoch.load(Ordering::Acquire);
        self.append(&encode(&Record::Intent { seq, block, crc }, block_bytes))
            .map(|_| ())
    }

    /// [`IntentLog::protect`] for many blocks at once (a compaction): their records in
    /// one append, and one sync for all the images among them.
    pub fn protect_many(&self, blocks: &[(u64, &[u8], u32)], block_bytes: u64) -> io::Result<()> {
        if blocks.is_empty() {
            return Ok(());
        }
        let seq = self.epoch.load(Ordering::Acquire);
        let mut bytes = Vec::new();
        let mut images = false;
        for &(block, image, crc) in blocks {
            if self.written_since_sync(block) {
                bytes.extend_from_slice(&encode(&Record::Intent { seq, block, crc }, block_bytes));
            } else {
                bytes.extend_from_slice(&image_record(seq, block, image, block_bytes));
                images = true;
            }
        }
        let (file, _) = self.append(&bytes)?;
        if !images {
            return Ok(());
        }
        file.sync_data()?;
        if self.new_name.swap(false, Ordering::AcqRel) {
            if let Some(dir) = self.path.parent() {
                if let Err(e) = self.store.sync_dir(dir) {
                    self.new_name.store(true, Ordering::Release);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Appends records of the delta log (pieces, covers) in the current epoch, unsynced:
    /// `make` gets the epoch and returns their bytes. Returns where they start in the
    /// log (positions grow while any piece lives: the log is emptied only once every
    /// piece is folded in).
    pub fn append_delta(&self, make: impl FnOnce(u64) -> Vec<u8>) -> io::Result<u64> {
        let seq = self.epoch.load(Ordering::Acquire);
        self.append(&make(seq)).map(|(_, at)| at)
    }

    /// Whether records may have been appended since the log was last emptied, or
    /// blocks written since the last fsync began.
    pub fn needs_sync_work(&self) -> bool {
        self.dirty.load(Ordering::Acquire) || !self.written().0.is_empty()
    }

    /// The start of an fsync, under the object's exclusive range lock (no rewrite in
    /// flight): forgets which blocks were written, so that every rewrite from here on
    /// that could touch bytes this fsync acknowledges writes an image first. Returns
    /// the log's length, for [`IntentLog::end_sync`].
    pub fn begin_sync(&self) -> io::Result<u64> {
        self.written().0.clear();
        self.epoch.fetch_add(1, Ordering::AcqRel);
        match self.lock().as_ref() {
            Some(f) => f.size_bytes(),
            None => Ok(0),
        }
    }

    /// The end of an fsync, once the object's data and checksums are on disk, under
    /// the object's exclusive range lock. The records from before `begin_sync` (which
    /// returned `len`) guard states this fsync supersedes: replaying one after a later
    /// crash could bring back bytes older than what the fsync acknowledged (say, before
    /// a truncate, or under a whole-block write). So before the fsync is answered they
    /// are made dead on disk: the log is emptied and synced (a length cut needs
    /// `fsync`) if nothing was appended since, or else a barrier for the epoch begun is
    /// appended and synced (the records of rewrites since may guard bytes this fsync
    /// acknowledges, so they stay).
    pub fn end_sync(&self, len: u64) -> io::Result<()> {
        let f = self.lock().clone();
        let Some(f) = f else {
            return Ok(());
        };
        let size = f.size_bytes()?;
        if size == len {
            let mut known = self.appending.lock().unwrap_or_else(|p| p.into_inner());
            // A failed cut changes nothing: what `known` says stays true.
            f.set_len(0)?;
            *known = Some(0);
            drop(known);
            f.sync_all()?;
            self.broken.store(false, Ordering::Release);
            self.dirty.store(false, Ordering::Release);
            self.appended.store(0, Ordering::Relaxed);
            return Ok(());
        }
        if size < len {
            // A sync that began after this one emptied the log meanwhile: every record
            // older than this sync is dead already.
            return Ok(());
        }
        // Appended as any record is, so that the log counts as not empty.
        let seq = self.epoch.load(Ordering::Acquire);
        self.append(&encode(&Record::Barrier { seq }, 1))?;
        f.sync_data()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: u64 = 4096;

    /// An append torn by a full disk whose cut then fails too leaves the log broken:
    /// the next append cuts the torn bytes off first (failing, and appending nothing,
    /// while it cannot), so no record ever lies after a torn one, where a replay would
    /// not see it.
    #[test]
    fn a_torn_append_that_could_not_be_cut_is_cut_before_the_next() {
        let store = Arc::new(crate::MemStore::new());
        let path = PathBuf::from("/o/1.log");
        let log = IntentLog::new(path.clone(), store.clone(), None);
        let piece = |at: u64, salt: u8| {
            let bytes = vec![salt; 700];
            let crc = stripefs_wire::crc32c(&bytes);
            move |seq| piece_record(seq, at, &bytes, crc, B)
        };
        log.append_delta(piece(100, 1)).unwrap();
        let whole = store.contents(&path).unwrap().len();
        // Room for half a record: the append is torn, and cutting it off fails.
        store.set_capacity(store.used_bytes() + 300);
        store.fail_next_set_len(1);
        log.append_delta(piece(5000, 2)).unwrap_err();
        store.set_capacity(1 << 40);
        assert!(
            store.contents(&path).unwrap().len() > whole,
            "torn bytes stay"
        );
        // The cut fails again: nothing is appended.
        store.fail_next_set_len(1);
        let e = log.append_delta(piece(9000, 3)).unwrap_err();
        assert!(e.to_string().contains("cut short after byte"), "{e}");
        assert!(store.contents(&path).unwrap().len() > whole);
        // Then it works: the torn bytes go, the record follows the first.
        let at = log.append_delta(piece(9000, 4)).unwrap();
        assert_eq!(at, whole as u64);
        let d = decode(&store.contents(&path).unwrap(), B);
        assert_eq!(d.torn_bytes, 0);
        let offsets: Vec<u64> = d
            .records
            .iter()
            .map(|r| match r {
                Record::Piece { offset, .. } => *offset,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(offsets, [100, 9000]);
    }

    fn sample() -> Vec<Record> {
        (0..6u64)
            .map(|i| {
                if i == 4 {
                    Record::Barrier { seq: i }
                } else if i % 3 == 2 {
                    Record::Image {
                        seq: i,
                        block: i * 5,
                        bytes: (0..B).map(|j| (j * 7 + i) as u8).collect(),
                    }
                } else {
                    Record::Intent {
                        seq: i,
                        block: i * 7 + 1,
                        crc: 0xdead_beef ^ i as u32,
                    }
                }
            })
            .collect()
    }

    #[test]
    fn records_round_trip_and_damage_ends_the_log() {
        let records = sample();
        let encoded: Vec<Vec<u8>> = records.iter().map(|r| encode(r, B)).collect();
        let log: Vec<u8> = encoded.concat();
        assert_eq!(
            decode(&log, B),
            Decoded {
                records: records.clone(),
                torn_bytes: 0
            }
        );
        // Every flipped bit of a header or a payload is caught (by the header CRC,
        // the payload CRC, the magic, version, kind or length), and the log ends there.
        let starts: Vec<usize> = encoded
            .iter()
            .scan(0, |at, e| {
                let s = *at;
                *at += e.len();
                Some(s)
            })
            .collect();
        for (k, &start) in starts.iter().enumerate() {
            let len = encoded[k].len();
            for at in (start..start + len).step_by(13).chain([start + 36]) {
                let mut bad = log.clone();
                bad[at] ^= 1 << (at % 8);
                let d = decode(&bad, B);
                if (36..40).contains(&(at - start)) {
                    // The header's zero padding is not covered.
                    assert_eq!(d.records, records);
                    continue;
                }
                assert_eq!(d.records, records[..k], "flip at byte {at}");
                assert_eq!(d.torn_bytes, log.len() - start);
            }
        }
        // A torn tail: a partial last record ends the log.
        let cut = &log[..log.len() - 13];
        let d = decode(cut, B);
        assert_eq!(d.records, records[..5]);
    }

    #[test]
    fn an_empty_log_holds_nothing() {
        assert_eq!(decode(&[], B), Decoded::default());
    }

    #[test]
    fn written_ranges_merge_and_answer() {
        let mut r = Ranges::default();
        let mut model = std::collections::BTreeSet::new();
        let mut x = 12345u64;
        for _ in 0..2000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let first = (x >> 33) % 200;
            let len = (x >> 20) % 9;
            r.insert(first, first + len);
            model.extend(first..first + len);
            for b in 0..220 {
                assert_eq!(r.contains(b), model.contains(&b), "block {b}");
            }
            // Disjoint and not touching.
            let mut prev_end = None;
            for (&f, &e) in &r.0 {
                assert!(f < e);
                if let Some(p) = prev_end {
                    assert!(f > p, "ranges {p} and {f} touch");
                }
                prev_end = Some(e);
            }
        }
    }
}
