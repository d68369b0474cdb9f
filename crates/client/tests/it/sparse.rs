//! Sparse files through the native API against a real in-process cluster (4 data servers
//! of 2 targets): random writes, punches, zero ranges and allocations, checked against a
//! model of the bytes, the size and the written blocks; SEEK_DATA/SEEK_HOLE answers and
//! allocated bytes follow the model.

use crate::common;

use common::{hint, pattern, seed, Cluster, SMALL_STRIPE};
use rand::{Rng, SeedableRng};
use stripefs_client::{File, OpenOptions};

const B: u64 = 4096;

/// What the file should hold: bytes up to the size, and which 4 KiB blocks hold
/// written data (a file block is one block of one object: stripe units are whole
/// blocks).
#[derive(Default)]
struct Model {
    bytes: Vec<u8>,
    written: Vec<bool>,
}

impl Model {
    fn size(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn grow(&mut self, end: u64) {
        if self.size() < end {
            self.bytes.resize(end as usize, 0);
        }
    }

    fn mark(&mut self, from: u64, to: u64, yes: bool) {
        if self.written.len() < to as usize {
            self.written.resize(to as usize, false);
        }
        for w in &mut self.written[from.min(to) as usize..to as usize] {
            *w = yes;
        }
    }

    fn write(&mut self, off: u64, data: &[u8]) {
        let end = off + data.len() as u64;
        self.grow(end);
        self.bytes[off as usize..end as usize].copy_from_slice(data);
        self.mark(off / B, end.div_ceil(B), true);
    }

    fn punch(&mut self, off: u64, len: u64) {
        let end = (off + len).min(self.size());
        if off < end {
            self.bytes[off as usize..end as usize].fill(0);
        }
        self.mark(off.div_ceil(B), (off + len) / B, false);
    }

    fn is_data(&self, block: u64) -> bool {
        self.written.get(block as usize).copied().unwrap_or(false)
    }

    fn seek(&self, off: u64, hole: bool) -> Option<u64> {
        let size = self.size();
        if off >= size {
            return None;
        }
        let b = (off / B..=size / B).find(|&b| self.is_data(b) != hole);
        match (b, hole) {
            (Some(b), false) => Some(off.max(b * B)).filter(|&g| g < size),
            (None, false) => None,
            (b, true) => Some(b.map_or(size, |b| off.max(b * B).min(size))),
        }
    }
}

fn read_all(f: &File, size: u64) -> Vec<u8> {
    let mut out = vec![0u8; size as usize];
    let mut at = 0;
    while at < out.len() {
        let n = f.read_at(at as u64, &mut out[at..]).unwrap();
        assert!(n > 0, "short file at {at} of {size}");
        at += n;
    }
    out
}

#[test]
fn random_sparse_ops_match_model() {
    let cl = Cluster::start();
    let c = cl.client();
    let seed = seed("random_sparse_ops_match_model");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let opts = OpenOptions::create_truncate()
        .read(true)
        .layout(hint(SMALL_STRIPE, 3));
    let f = c.open("/sparse", &opts).unwrap();
    let mut m = Model::default();
    let space = 40 * SMALL_STRIPE as u64;
    for step in 0..150 {
        let off = rng.gen_range(0..space);
        let len = rng.gen_range(1..3 * SMALL_STRIPE as u64);
        let keep = rng.gen_bool(0.5);
        match rng.gen_range(0..10) {
            0..=3 => {
                let data = pattern(step, len as usize);
                f.write_at(off, &data).unwrap();
                m.write(off, &data);
            }
            4..=5 => {
                f.punch_hole(off, len).unwrap();
                m.punch(off, len);
            }
            6..=7 => {
                f.zero_range(off, len, keep).unwrap();
                m.punch(off, len);
                if !keep {
                    m.grow(off + len);
                }
            }
            _ => {
                f.allocate(off, len, keep).unwrap();
                if !keep {
                    m.grow(off + len);
                }
            }
        }
        assert_eq!(f.size(), m.size(), "seed {seed} step {step}: size");
        assert!(
            read_all(&f, m.size()) == m.bytes,
            "seed {seed} step {step}: bytes differ"
        );
        for _ in 0..6 {
            let at = rng.gen_range(0..m.size() + 2 * B);
            assert_eq!(
                f.seek_data(at).unwrap(),
                m.seek(at, false),
                "seed {seed} step {step}: SEEK_DATA {at}"
            );
            assert_eq!(
                f.seek_hole(at).unwrap(),
                m.seek(at, true),
                "seed {seed} step {step}: SEEK_HOLE {at}"
            );
        }
    }
    f.close().unwrap();
    // Another client sees the size, and allocated bytes cover the written blocks.
    let attr = cl.client().stat("/sparse").unwrap();
    assert_eq!(attr.size, m.size());
    let written = m.written.iter().filter(|&&w| w).count() as u64 * B;
    let allocated = c.allocated_bytes(&attr).unwrap();
    assert!(allocated >= written, "{allocated} < {written} written");
}

#[test]
fn allocated_bytes_of_empty_and_written_files() {
    let cl = Cluster::start();
    let c = cl.client();
    let f = c.create("/empty", 0o644).unwrap();
    assert_eq!(c.allocated_bytes(&f.attr().unwrap()).unwrap(), 0);
    f.close().unwrap();
    let f = c.create("/one", 0o644).unwrap();
    f.write_at(10 * SMALL_STRIPE as u64, &[7u8; 100]).unwrap();
    let n = f.allocated_bytes().unwrap();
    assert!((B..=4 * B).contains(&n), "{n} bytes for one written block");
    // Only the writing handle may change allocation.
    let r = c.open("/one", &OpenOptions::read_only()).unwrap();
    assert!(r.punch_hole(0, 10).is_err());
    assert!(r.allocate(0, 10, false).is_err());
    assert_eq!(r.seek_data(0).unwrap(), Some(10 * SMALL_STRIPE as u64));
}
