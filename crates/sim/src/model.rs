//! What the file system may show: for every byte of every file, the set of writes
//! ("generations") whose value it may hold now and after a power cut, and the range of
//! sizes it may have. Operations whose outcome the client cannot know (a failed write, a
//! power cut before fsync) widen the sets; observations narrow them; an observation
//! outside them is a violation.

use crate::rng::mix;
use stripefs_wire::InodeId;

/// Generations per file: 0 is "never written" (reads as zeros), 1..=MAX_GEN are writes.
pub const MAX_GEN: u8 = 63;

fn bit(g: u8) -> u64 {
    1u64 << g
}

/// The value of byte `offset` written by generation `g` of file `key` (0 for g = 0).
pub fn pattern(seed: u64, key: u64, g: u8, offset: u64) -> u8 {
    if g == 0 {
        return 0;
    }
    let h = mix(seed ^ mix(key.wrapping_mul(0x100) | u64::from(g)) ^ (offset / 8));
    (h >> ((offset % 8) * 8)) as u8
}

/// One file (inode) of the model.
pub struct MFile {
    /// Stable id within a run (pattern key).
    pub key: u64,
    pub ino: InodeId,
    /// Possible generations of each byte now.
    pub now: Vec<u64>,
    /// Possible generations of each byte after a power cut of its server.
    pub durable: Vec<u64>,
    /// The byte was written or cut since it was last synced: a power cut may tear it.
    pub dirty: Vec<bool>,
    /// The generation last written to each byte.
    pub last: Vec<u8>,
    pub size_lo: u64,
    pub size_hi: u64,
    pub next_gen: u8,
    /// A power cut hit bytes of this file that were not yet durable: a checksum error
    /// on read is allowed (a torn block), once.
    pub torn_ok: bool,
    /// The file showed a torn block: its bytes are no longer checked.
    pub damaged: bool,
    /// Stripe size and servers.
    pub layout: Option<(u64, Vec<u32>)>,
}

/// A write (or a truncation, as generation 0 from `offset` on) not yet confirmed by a
/// successful fsync or close of its handle.
#[derive(Clone, Copy, Debug)]
pub struct Pending {
    pub offset: u64,
    pub len: u64,
    pub gen: u8,
}

impl MFile {
    pub fn new(key: u64, ino: InodeId, max_bytes: usize) -> MFile {
        MFile {
            key,
            ino,
            now: vec![bit(0); max_bytes],
            durable: vec![bit(0); max_bytes],
            dirty: vec![false; max_bytes],
            last: vec![0; max_bytes],
            size_lo: 0,
            size_hi: 0,
            next_gen: 1,
            torn_ok: false,
            damaged: false,
            layout: None,
        }
    }

    pub fn max_bytes(&self) -> u64 {
        self.now.len() as u64
    }

    /// A new generation for a write, if any is left.
    pub fn take_gen(&mut self) -> Option<u8> {
        if self.next_gen > MAX_GEN {
            return None;
        }
        let g = self.next_gen;
        self.next_gen += 1;
        Some(g)
    }

    /// A write of generation `g` was sent: until confirmed, each byte may hold the
    /// new value or what it could hold before. A disk may write back any page at any
    /// time, so after a power cut each byte may hold any value written since its last
    /// sync, not only the synced one or the last one: the write joins `durable` too.
    pub fn write_sent(&mut self, offset: u64, len: u64, g: u8) {
        for i in offset..offset + len {
            let i = i as usize;
            self.now[i] |= bit(g);
            self.durable[i] |= bit(g);
            self.dirty[i] = true;
            self.last[i] = g;
        }
        self.size_hi = self.size_hi.max(offset + len);
    }

    /// A truncation to `size` was sent (by path or handle).
    pub fn truncate_sent(&mut self, size: u64) {
        for i in size..self.max_bytes() {
            let i = i as usize;
            self.now[i] |= bit(0);
            self.durable[i] |= bit(0);
            self.dirty[i] = true;
            self.last[i] = 0;
        }
        self.size_lo = self.size_lo.min(size);
        self.size_hi = self.size_hi.max(size);
    }

    /// The write or truncation `p` is known to have happened: bytes it was the last to
    /// touch hold its value.
    pub fn confirm(&mut self, p: &Pending) {
        let end = if p.gen == 0 {
            self.max_bytes()
        } else {
            p.offset + p.len
        };
        for i in p.offset..end {
            let i = i as usize;
            if self.last[i] == p.gen {
                self.now[i] = bit(p.gen);
            }
        }
    }

    /// A truncation to `size` was acknowledged: data servers make a cut durable before
    /// they answer, so the cut bytes never come back, even after a power cut.
    pub fn cut_durable(&mut self, size: u64) {
        for i in size..self.max_bytes() {
            let i = i as usize;
            if self.last[i] == 0 {
                self.durable[i] = bit(0);
                self.dirty[i] = false;
            }
        }
    }

    /// The size is known to be exactly `size` (a successful truncate, or an observation).
    pub fn size_is(&mut self, size: u64) {
        self.size_lo = size;
        self.size_hi = size;
    }

    /// A successful fsync: the confirmed bytes of `ranges` are durable as they are now.
    pub fn synced(&mut self, ranges: &[Pending]) {
        for p in ranges {
            let end = if p.gen == 0 {
                self.max_bytes()
            } else {
                p.offset + p.len
            };
            for i in p.offset as usize..end as usize {
                self.durable[i] = self.now[i];
                self.dirty[i] = false;
            }
        }
    }

    /// The data server at `place` of the layout (a place is an index into its servers).
    fn server_of(&self, offset: u64) -> Option<u32> {
        let (stripe, servers) = self.layout.as_ref()?;
        Some(servers[((offset / stripe) % servers.len() as u64) as usize])
    }

    /// Data server `server` lost power: its bytes that were not durable may be old.
    pub fn power_cut(&mut self, server: u32) {
        for i in 0..self.now.len() {
            let on = match self.server_of(i as u64) {
                Some(s) => s == server,
                // Layout unknown: any server may hold it.
                None => true,
            };
            if on && self.dirty[i] {
                self.now[i] |= self.durable[i];
                // Still dirty: a write the client still holds (gathered, not yet sent)
                // reaches the disk only after this cut, and is not durable until synced.
                self.durable[i] |= self.now[i];
                self.torn_ok = true;
            }
        }
    }

    /// Checks bytes read from offset 0; narrows the sets to what was seen. Returns the
    /// first disagreement.
    pub fn observe(&mut self, seed: u64, bytes: &[u8]) -> Result<(), String> {
        for (i, &v) in bytes.iter().enumerate() {
            let allowed = self.now[i];
            let mut fits = 0u64;
            for g in 0..=MAX_GEN {
                if allowed & bit(g) != 0 && pattern(seed, self.key, g, i as u64) == v {
                    fits |= bit(g);
                }
            }
            if fits == 0 {
                let gens: Vec<u8> = (0..=MAX_GEN).filter(|g| allowed & bit(*g) != 0).collect();
                let expected: Vec<u8> = gens
                    .iter()
                    .map(|g| pattern(seed, self.key, *g, i as u64))
                    .collect();
                // Which writes, allowed or not, would have put it there: tells a lost
                // write from a stale one from garbage.
                let would: Vec<u8> = (1..self.next_gen)
                    .filter(|g| pattern(seed, self.key, *g, i as u64) == v)
                    .collect();
                return Err(format!(
                    "byte {i} reads {v:#04x}, which no allowed write put there \
                     (allowed writes {gens:?}, values {expected:02x?}; writes with that \
                     value there: {would:?}, last write there: {})",
                    self.last[i]
                ));
            }
            self.now[i] = fits;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unconfirmed_write_allows_old_and_new_and_a_power_cut_brings_back_the_durable() {
        let seed = 3;
        let mut f = MFile::new(1, InodeId(5), 64);
        let g = f.take_gen().unwrap();
        f.write_sent(0, 8, g);
        let new: Vec<u8> = (0..8).map(|i| pattern(seed, 1, g, i)).collect();
        // Old (zeros) or new both fit before confirmation.
        let mut a = MFile::new(1, InodeId(5), 64);
        a.write_sent(0, 8, g);
        assert!(a.observe(seed, &[0; 8]).is_ok());
        assert!(f.observe(seed, &new).is_ok());
        // Confirmed: only new.
        f.confirm(&Pending {
            offset: 0,
            len: 8,
            gen: g,
        });
        assert!(f.clone_now_allows(seed, &new));
        assert!(!f.clone_now_allows(seed, &[0; 8]));
        // Power cut before sync: old comes back as possible.
        f.power_cut(0);
        assert!(f.clone_now_allows(seed, &[0; 8]));
        assert!(f.torn_ok);
        // A value nobody wrote is refused.
        let wrong: Vec<u8> = new.iter().map(|b| b ^ 0x5a).collect();
        assert!(!f.clone_now_allows(seed, &wrong) || wrong == new);
    }

    #[test]
    fn a_synced_write_survives_a_power_cut() {
        let seed = 9;
        let mut f = MFile::new(2, InodeId(6), 32);
        let g = f.take_gen().unwrap();
        let p = Pending {
            offset: 4,
            len: 10,
            gen: g,
        };
        f.write_sent(4, 10, g);
        f.confirm(&p);
        f.synced(&[p]);
        f.power_cut(0);
        assert!(!f.torn_ok);
        let mut zeros = vec![0u8; 14];
        assert!(!f.clone_now_allows(seed, &zeros));
        for (i, b) in zeros.iter_mut().enumerate().skip(4) {
            *b = pattern(seed, 2, g, i as u64);
        }
        assert!(f.clone_now_allows(seed, &zeros));
    }

    #[test]
    fn a_power_cut_may_show_any_write_since_the_last_sync_but_none_before_it() {
        let seed = 11;
        let mut f = MFile::new(3, InodeId(7), 16);
        let value = |g: u8| -> Vec<u8> { (0..8).map(|i| pattern(seed, 3, g, i)).collect() };
        let write = |f: &mut MFile, g: u8| {
            let p = Pending {
                offset: 0,
                len: 8,
                gen: g,
            };
            f.write_sent(0, 8, g);
            f.confirm(&p);
            p
        };
        let g1 = f.take_gen().unwrap();
        let p1 = write(&mut f, g1);
        f.synced(&[p1]);
        let g2 = f.take_gen().unwrap();
        write(&mut f, g2);
        let g3 = f.take_gen().unwrap();
        write(&mut f, g3);
        assert!(f.clone_now_allows(seed, &value(g3)));
        assert!(!f.clone_now_allows(seed, &value(g2)), "g2 was overwritten");
        // The disk wrote g2 back on its own, then lost g3: g2 is what it shows.
        f.power_cut(0);
        assert!(f.torn_ok);
        for g in [g1, g2, g3] {
            assert!(f.clone_now_allows(seed, &value(g)), "generation {g}");
        }
        assert!(
            !f.clone_now_allows(seed, &[0; 8]),
            "zeros were never durable after g1"
        );
        // Until a sync, a later cut may show any of them again; after it, only g3.
        f.observe(seed, &value(g2)).unwrap();
        f.power_cut(0);
        assert!(f.clone_now_allows(seed, &value(g1)));
        f.observe(seed, &value(g3)).unwrap();
        f.synced(&[Pending {
            offset: 0,
            len: 8,
            gen: g3,
        }]);
        f.power_cut(0);
        assert!(!f.clone_now_allows(seed, &value(g1)));
        assert!(f.clone_now_allows(seed, &value(g3)));
    }

    impl MFile {
        fn clone_now_allows(&self, seed: u64, bytes: &[u8]) -> bool {
            let mut copy = MFile::new(self.key, self.ino, self.now.len());
            copy.now = self.now.clone();
            copy.observe(seed, bytes).is_ok()
        }
    }
}
