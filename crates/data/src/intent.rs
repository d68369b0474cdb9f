//! The intent records of an object's log file (`<fid>.log`, docs/objects.md, "Log
//! records"): what makes a read-modify-write of a partial block safe against the death
//! of the server process.
//!
//! A partial write into a block that already holds written bytes rewrites the block's
//! bytes in the data file and then its checksum in the sidecar. A server killed between
//! the two (`kill -9`, an abort, the OOM killer) leaves the new bytes under the old
//! checksum: the whole block would read as a checksum error, and with it the bytes of
//! other writes that share the block, which may have been acknowledged by an fsync long
//! before. So before the data changes, the block's new checksum is appended to the log
//! as an intent record; when the object is next opened, every block named by an intent
//! whose bytes no longer match their stored checksum but match the intended one gets
//! the intended checksum. A block whose bytes match neither (only a torn write after a
//! power cut can leave one) stays a checksum error. The records are needed only while
//! their write is in flight, so an fsync empties the log (under the object's exclusive
//! range lock, with no write in flight).

use crate::store::{ObjectFile, Storage};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use stripefs_wire::crc32c;

/// Bytes of a record header (an intent record is a header alone).
pub const RECORD_BYTES: usize = 40;
const MAGIC: &[u8; 4] = b"SFDL";
const VERSION: u8 = 1;
/// Record kind of an intent; 1 to 3 are reserved for the delta log's pieces, covers
/// and block images (docs/objects.md).
const KIND_INTENT: u8 = 4;

/// One intent: block `block` of the object is being rewritten to bytes whose CRC32C is
/// `crc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Intent {
    pub seq: u64,
    pub block: u64,
    pub crc: u32,
}

/// The 40-byte record of an intent.
pub fn encode(i: &Intent, block_bytes: u64) -> [u8; RECORD_BYTES] {
    let mut r = [0u8; RECORD_BYTES];
    r[0..4].copy_from_slice(MAGIC);
    r[4] = VERSION;
    r[5] = KIND_INTENT;
    r[8..16].copy_from_slice(&i.seq.to_le_bytes());
    r[16..24].copy_from_slice(&(i.block * block_bytes).to_le_bytes());
    // Length 0 (bytes 24..28): an intent carries no payload.
    r[28..32].copy_from_slice(&i.crc.to_le_bytes());
    let h = crc32c(&r[0..32]);
    r[32..36].copy_from_slice(&h.to_le_bytes());
    r
}

/// What a log holds: its valid intents in order, and how many records were skipped as
/// torn or unknown (a torn tail is expected after a crash: the write it belonged to was
/// never acknowledged).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    pub intents: Vec<Intent>,
    pub skipped: usize,
}

/// Parses a log's bytes. A record is valid when its magic, version, kind, header CRC
/// and block alignment hold; anything else (a torn tail, a partial record) is skipped.
pub fn decode(bytes: &[u8], block_bytes: u64) -> Decoded {
    let mut out = Decoded::default();
    for r in bytes.chunks(RECORD_BYTES) {
        let valid = r.len() == RECORD_BYTES
            && &r[0..4] == MAGIC
            && r[4] == VERSION
            && r[5] == KIND_INTENT
            && u32::from_le_bytes(r[32..36].try_into().unwrap()) == crc32c(&r[0..32]);
        let offset = u64::from_le_bytes(r.get(16..24).map_or([0; 8], |b| b.try_into().unwrap()));
        if !valid || offset % block_bytes != 0 {
            out.skipped += 1;
            continue;
        }
        out.intents.push(Intent {
            seq: u64::from_le_bytes(r[8..16].try_into().unwrap()),
            block: offset / block_bytes,
            crc: u32::from_le_bytes(r[28..32].try_into().unwrap()),
        });
    }
    out
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
    seq: AtomicU64,
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
            seq: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<Arc<dyn ObjectFile>>> {
        self.file.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends the intent to rewrite `block` to bytes of CRC `crc`. No sync: the record
    /// guards against the process dying, whose page cache survives it.
    pub fn note(&self, block: u64, crc: u32, block_bytes: u64) -> io::Result<()> {
        let file = {
            let mut f = self.lock();
            match f.as_ref() {
                Some(f) => f.clone(),
                None => {
                    let opened = self.store.open_append(&self.path)?;
                    *f = Some(opened.clone());
                    opened
                }
            }
        };
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        self.dirty.store(true, Ordering::Release);
        file.append(&encode(&Intent { seq, block, crc }, block_bytes))
    }

    /// Whether records may have been appended since the log was last emptied.
    pub fn is_dirty(&self) -> bool {
        self.dirty.load(Ordering::Acquire)
    }

    /// Empties the log. The caller holds the object's exclusive range lock: no
    /// read-modify-write is between its intent and its checksum.
    pub fn clear(&self) -> io::Result<()> {
        if !self.dirty.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let f = self.lock().clone();
        let emptied = match f {
            Some(f) => f.set_len(0),
            None => Ok(()),
        };
        if emptied.is_err() {
            self.dirty.store(true, Ordering::Release);
        }
        emptied
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: u64 = 4096;

    #[test]
    fn records_round_trip_and_damage_is_skipped() {
        let intents: Vec<Intent> = (0..5)
            .map(|i| Intent {
                seq: i,
                block: i * 7 + 1,
                crc: 0xdead_beef ^ i as u32,
            })
            .collect();
        let mut log: Vec<u8> = intents.iter().flat_map(|i| encode(i, B)).collect();
        assert_eq!(
            decode(&log, B),
            Decoded {
                intents: intents.clone(),
                skipped: 0
            }
        );
        // Every single flipped bit of every record is caught by its header CRC (or its
        // magic, version or kind), and only that record is lost.
        for at in 0..RECORD_BYTES * 2 {
            for bit in 0..8 {
                let mut bad = log.clone();
                bad[at] ^= 1 << bit;
                let d = decode(&bad, B);
                if (36..40).contains(&(at % RECORD_BYTES)) {
                    // The zero padding is not covered: a flip there changes nothing.
                    assert_eq!(d.intents, intents);
                    continue;
                }
                assert_eq!(d.skipped, 1, "flip of bit {bit} at byte {at}");
                let lost = at / RECORD_BYTES;
                let mut want = intents.clone();
                want.remove(lost);
                assert_eq!(d.intents, want);
            }
        }
        // A torn tail: a partial last record is skipped, the others kept.
        log.truncate(log.len() - 13);
        let d = decode(&log, B);
        assert_eq!(d.intents, intents[..4]);
        assert_eq!(d.skipped, 1);
    }

    #[test]
    fn an_empty_log_holds_nothing() {
        assert_eq!(decode(&[], B), Decoded::default());
    }
}
