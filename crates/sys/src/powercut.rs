//! The one model of what a power cut does to a file, shared by both in-memory disks (the
//! data server's [`crate::memstore::MemStore`] and the metadata server's
//! [`crate::memdisk::MemDisk`]), so that a rule about durability is written, and
//! tested, once.
//!
//! A [`CutFile`] holds what reads see (the page cache), what a power cut keeps for
//! certain (the image at the last sync), and the changes made since, oldest first. At a
//! power cut each change is replayed onto the synced image as the seeded generator
//! chooses: a buffered write is kept, lost, or torn (a random subset of its 512-byte
//! sectors of the file kept; the first and last may be partial); a direct write
//! (`O_DIRECT | O_DSYNC`) is kept; a length change is kept or lost. `sync_all` makes
//! everything durable; `sync_data` is the weak `fdatasync` some file systems give, which
//! does not make a length cut durable (the old tail comes back after a cut).
//!
//! Names are each disk's own: the data server's objects and directories, the metadata
//! server's logs and database.

/// Granularity at which a power cut or a torn write tears a write.
pub const SECTOR_BYTES: u64 = 512;

/// A small deterministic generator (SplitMix64), so that a seed replays exactly.
#[derive(Clone, Copy, Debug, Default)]
pub struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64) -> SplitMix {
        SplitMix(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

enum Change {
    Write {
        offset: u64,
        bytes: Vec<u8>,
        /// A direct write: durable when it returned.
        durable: bool,
    },
    SetLen(u64),
}

/// What power cuts did to buffered writes, for the fault counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CutCounts {
    pub writes_lost: u64,
    pub writes_torn: u64,
}

/// One file's bytes under the power-cut model (see the module comment).
#[derive(Default)]
pub struct CutFile {
    data: Vec<u8>,
    synced: Vec<u8>,
    pending: Vec<Change>,
}

impl CutFile {
    /// What reads see.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    pub fn len(&self) -> u64 {
        self.data.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Reads up to `buf.len()` bytes at `offset`; fewer only at the end.
    pub fn read(&self, buf: &mut [u8], offset: u64) -> usize {
        let from = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(self.data.len());
        let n = buf.len().min(self.data.len() - from);
        buf[..n].copy_from_slice(&self.data[from..from + n]);
        n
    }

    /// Writes `bytes` at `offset`: into the page cache, or durable at once if `durable`.
    pub fn write(&mut self, offset: u64, bytes: &[u8], durable: bool) {
        put(&mut self.data, offset, bytes);
        self.pending.push(Change::Write {
            offset,
            bytes: bytes.to_vec(),
            durable,
        });
    }

    /// A write that failed part way (a crash inside the call): a random subset of its
    /// sectors reaches the file, each recorded as its own write.
    pub fn write_torn(&mut self, offset: u64, bytes: &[u8], durable: bool, rng: &mut SplitMix) {
        for_sectors(offset, bytes, |at, piece| {
            if rng.next_u64() % 2 == 0 {
                self.write(at, piece, durable);
            }
        });
    }

    /// Changes the length (zeros past the old end).
    pub fn set_len(&mut self, len: u64) {
        self.data.resize(len as usize, 0);
        self.pending.push(Change::SetLen(len));
    }

    /// Replaces byte `offset` with `f(byte)` on the medium (what reads see and what a
    /// power cut keeps), as a bad disk would; false past the end.
    pub fn corrupt(&mut self, offset: u64, f: impl FnOnce(u8) -> u8) -> bool {
        let Some(b) = self.data.get_mut(offset as usize) else {
            return false;
        };
        let bad = f(*b);
        *b = bad;
        if let Some(s) = self.synced.get_mut(offset as usize) {
            *s = bad;
        }
        true
    }

    /// `fsync`: everything durable.
    pub fn sync_all(&mut self) {
        self.synced = self.data.clone();
        self.pending.clear();
    }

    /// The weak `fdatasync`: written bytes and growth durable, but a length cut since the
    /// last sync is not (its old tail comes back after a power cut).
    pub fn sync_data(&mut self) {
        let cut = self.pending.iter().any(|c| matches!(c, Change::SetLen(_)));
        let mut image = self.data.clone();
        if cut && image.len() < self.synced.len() {
            image.extend_from_slice(&self.synced[self.data.len()..]);
        }
        self.synced = image;
        self.pending.clear();
    }

    /// Changes not yet durable.
    pub fn unsynced(&self) -> usize {
        self.pending
            .iter()
            .filter(|c| !matches!(c, Change::Write { durable: true, .. }))
            .count()
    }

    /// Power is lost: the file becomes its synced image with each later change kept,
    /// lost or torn as `rng` chooses.
    pub fn power_cut(&mut self, rng: &mut SplitMix, counts: &mut CutCounts) {
        let mut image = std::mem::take(&mut self.synced);
        for change in std::mem::take(&mut self.pending) {
            match change {
                Change::Write {
                    offset,
                    bytes,
                    durable: true,
                } => put(&mut image, offset, &bytes),
                Change::Write { offset, bytes, .. } => match rng.next_u64() % 3 {
                    0 => put(&mut image, offset, &bytes),
                    1 => counts.writes_lost += 1,
                    _ => {
                        counts.writes_torn += 1;
                        for_sectors(offset, &bytes, |at, piece| {
                            if rng.next_u64() % 2 == 0 {
                                put(&mut image, at, piece);
                            }
                        });
                    }
                },
                Change::SetLen(len) => {
                    if rng.next_u64() % 2 == 0 {
                        image.resize(len as usize, 0);
                    }
                }
            }
        }
        self.data = image.clone();
        self.synced = image;
    }
}

fn put(image: &mut Vec<u8>, offset: u64, bytes: &[u8]) {
    let start = offset as usize;
    let end = start + bytes.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[start..end].copy_from_slice(bytes);
}

/// Calls `f` with each piece of `bytes` (written at `offset`) that lies in one sector of
/// the file, in order.
fn for_sectors(offset: u64, bytes: &[u8], mut f: impl FnMut(u64, &[u8])) {
    let end = offset + bytes.len() as u64;
    let mut at = offset;
    while at < end {
        let next = ((at / SECTOR_BYTES + 1) * SECTOR_BYTES).min(end);
        f(at, &bytes[(at - offset) as usize..(next - offset) as usize]);
        at = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(f: &mut CutFile, seed: u64) -> CutCounts {
        let mut counts = CutCounts::default();
        f.power_cut(&mut SplitMix::new(seed), &mut counts);
        counts
    }

    #[test]
    fn synced_bytes_survive_every_cut() {
        for seed in 0..200 {
            let mut f = CutFile::default();
            f.write(0, &[1; 3000], false);
            f.sync_all();
            f.write(1000, &[2; 1500], false);
            cut(&mut f, seed);
            let d = f.data();
            assert_eq!(d.len(), 3000, "seed {seed}");
            assert!(d[..1000].iter().all(|&b| b == 1), "seed {seed}");
            assert!(d[2500..].iter().all(|&b| b == 1), "seed {seed}");
            // Each sector of the unsynced write is all old or all new.
            for s in (1000..2500).step_by(1) {
                let sector = s / 512;
                let lo = (sector * 512).max(1000);
                let hi = ((sector + 1) * 512).min(2500);
                assert!(
                    d[lo..hi].iter().all(|&b| b == d[s]),
                    "seed {seed} sector {sector}"
                );
            }
        }
    }

    #[test]
    fn unsynced_writes_are_kept_lost_and_torn() {
        let mut total = CutCounts::default();
        let mut kept = 0;
        for seed in 0..300 {
            let mut f = CutFile::default();
            f.write(0, &[7; 4096], false);
            let c = cut(&mut f, seed);
            total.writes_lost += c.writes_lost;
            total.writes_torn += c.writes_torn;
            if c == CutCounts::default() {
                assert_eq!(f.data(), &[7; 4096][..], "seed {seed}");
                kept += 1;
            }
            if c.writes_lost == 1 {
                assert!(f.is_empty(), "seed {seed}");
            }
        }
        assert!(kept > 50 && total.writes_lost > 50 && total.writes_torn > 50);
    }

    #[test]
    fn direct_writes_and_syncs_are_durable() {
        for seed in 0..100 {
            let mut f = CutFile::default();
            f.write(0, b"direct", true);
            assert_eq!(f.unsynced(), 0);
            f.write(6, b"buffered", false);
            f.sync_data();
            assert_eq!(f.unsynced(), 0);
            cut(&mut f, seed);
            assert_eq!(f.data(), b"directbuffered");
        }
    }

    #[test]
    fn weak_fdatasync_does_not_keep_a_length_cut() {
        let mut f = CutFile::default();
        f.write(0, b"0123456789", false);
        f.sync_all();
        f.set_len(4);
        f.sync_data();
        assert_eq!(f.data(), b"0123");
        cut(&mut f, 1);
        assert_eq!(f.data(), b"0123456789");
        f.set_len(4);
        f.sync_all();
        cut(&mut f, 1);
        assert_eq!(f.data(), b"0123");
    }

    #[test]
    fn a_torn_write_keeps_whole_sectors_and_corruption_is_durable() {
        let mut rng = SplitMix::new(9);
        let mut f = CutFile::default();
        f.write_torn(100, &[5; 2000], false, &mut rng);
        let d = f.data().to_vec();
        f.sync_all();
        cut(&mut f, 3);
        assert_eq!(f.data(), &d[..]);
        if !f.is_empty() {
            let last = f.len() - 1;
            assert!(f.corrupt(last, |b| b ^ 0xff));
            cut(&mut f, 4);
            assert_eq!(f.data()[last as usize], d[last as usize] ^ 0xff);
        }
        assert!(!f.corrupt(1 << 20, |b| b));
    }
}
