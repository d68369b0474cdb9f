//! Sparse objects: Punch, Allocate, Seek and Allocated, on real directories (hole
//! punching and st_blocks are the file system's), checked against a model of the bytes
//! and of which blocks hold written data.

use super::*;
use rand::{rngs::StdRng, Rng, SeedableRng};
use stripefs_wire::padded_block_crc;

const UNIT: u32 = 16 << 10;

fn punch(svc: &DataService, fid: u64, unit: u32, offset: u64, len: u64) {
    let req = Request::Punch {
        fid: InodeId(fid),
        unit,
        offset,
        len,
    };
    assert_eq!(simple(svc, req).unwrap(), Response::Done);
}

fn allocate(svc: &DataService, fid: u64, unit: u32, offset: u64, len: u64) {
    let req = Request::Allocate {
        fid: InodeId(fid),
        unit,
        offset,
        len,
    };
    assert_eq!(simple(svc, req).unwrap(), Response::Done);
}

fn seek(svc: &DataService, fid: u64, unit: u32, offset: u64, hole: bool) -> Option<u64> {
    let req = Request::Seek {
        fid: InodeId(fid),
        unit,
        offset,
        hole,
    };
    match simple(svc, req).unwrap() {
        Response::Offset { offset } => offset,
        other => panic!("unexpected {other:?}"),
    }
}

fn allocated(svc: &DataService, fid: u64) -> u64 {
    match simple(svc, Request::Allocated { fid: InodeId(fid) }).unwrap() {
        Response::Allocated { bytes } => bytes,
        other => panic!("unexpected {other:?}"),
    }
}

/// Punching inside one block, across block edges and over whole blocks leaves every
/// block's stored CRC matching its bytes (the read helper checks each one), the range
/// zero and the rest intact; whole punched blocks become holes.
#[test]
fn punch_partial_blocks_keeps_checksums_consistent() {
    let (_d, svc) = fs_server(2, None);
    let len = 6 * UNIT as usize;
    let mut expect = pattern(21, len);
    write(&svc, 1, UNIT, 0, &expect).unwrap();
    for (off, n) in [
        (100u64, 50u64),                  // inside one block
        (B as u64 - 10, 20),              // across one block edge
        (3 * B as u64 + 7, 5 * B as u64), // partial, whole blocks, partial
        (UNIT as u64 - 1, 2),             // across a unit edge: two targets
        (5 * UNIT as u64, UNIT as u64),   // a whole unit
    ] {
        punch(&svc, 1, UNIT, off, n);
        expect[off as usize..(off + n) as usize].fill(0);
        assert_eq!(read(&svc, 1, UNIT, 0, len), expect, "after punch {off}+{n}");
    }
    // Whole punched blocks are holes: stored CRC is the zero block's. Block 4 lies
    // wholly in the third punch; block 3 only partly, so it is still written.
    let (crcs, _) = read_raw(&svc, 1, UNIT, 0, 8 * B as u32).unwrap();
    assert_eq!(crcs[4], padded_block_crc(&[]));
    assert_eq!(seek(&svc, 1, UNIT, 4 * B as u64, true), Some(4 * B as u64));
    assert_eq!(seek(&svc, 1, UNIT, 3 * B as u64, true), Some(4 * B as u64));
    // A partial write into a punched hole is read-modify-write of zeros.
    write(&svc, 1, UNIT, 4 * B as u64 + 9, b"back").unwrap();
    expect[4 * B + 9..4 * B + 13].copy_from_slice(b"back");
    assert_eq!(read(&svc, 1, UNIT, 0, len), expect);
    // Punching a file that has no objects, or past the end, is harmless.
    punch(&svc, 2, UNIT, 0, 1 << 30);
    punch(&svc, 1, UNIT, 1 << 40, 10);
    assert_eq!(read(&svc, 1, UNIT, 0, len), expect);
}

/// A corrupt block at the edge of a punch is reported, not silently rewritten with a
/// fresh CRC.
#[test]
fn punch_refuses_corrupt_edge_block() {
    let (_d, svc) = fs_server(1, None);
    write(&svc, 3, UNIT, 0, &pattern(3, 4 * B)).unwrap();
    let (path, _) = svc.object_paths(0, InodeId(3));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[B + 1] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let req = Request::Punch {
        fid: InodeId(3),
        unit: UNIT,
        offset: B as u64 + 100,
        len: 10,
    };
    assert_eq!(simple(&svc, req).unwrap_err().code, ErrorCode::Checksum);
}

/// Punched space is returned to the file system; allocated space is reserved without
/// becoming data.
#[test]
fn punch_frees_and_allocate_reserves_space() {
    let (_d, svc) = fs_server(2, None);
    let mib = 1u64 << 20;
    write(&svc, 4, UNIT, 0, &pattern(4, 4 * mib as usize)).unwrap();
    let full = allocated(&svc, 4);
    assert!(full >= 4 * mib, "{full}");
    punch(&svc, 4, UNIT, mib, 2 * mib);
    let after = allocated(&svc, 4);
    assert!(after <= full - 2 * mib + (64 << 10), "{full} -> {after}");
    assert!(after >= 2 * mib, "{after}");

    // Allocate: space reserved, content still holes (zeros, not data).
    assert_eq!(allocated(&svc, 5), 0);
    allocate(&svc, 5, UNIT, 100, 3 * mib);
    let reserved = allocated(&svc, 5);
    assert!(reserved >= 3 * mib, "{reserved}");
    assert_eq!(seek(&svc, 5, UNIT, 0, false), None);
    assert_eq!(seek(&svc, 5, UNIT, 0, true), Some(0));
    assert_eq!(read(&svc, 5, UNIT, 0, 3 * mib as usize), vec![0u8; 3 << 20]);
    // Writes into the reserved range work and do not grow the allocation much.
    write(&svc, 5, UNIT, 200, &pattern(5, 2 * mib as usize)).unwrap();
    assert!(allocated(&svc, 5) <= reserved + (64 << 10));
}

/// Seek over three written extents on two targets, by hand.
#[test]
fn seek_finds_written_extents() {
    let (_d, svc) = fs_server(2, None);
    assert_eq!(seek(&svc, 6, UNIT, 0, false), None);
    assert_eq!(seek(&svc, 6, UNIT, 123, true), Some(123));
    let ext = [
        (10 * UNIT as u64, 3 * UNIT as u64),
        (40 * UNIT as u64 + 5, 100),
    ];
    for (i, &(off, len)) in ext.iter().enumerate() {
        write(&svc, 6, UNIT, off, &pattern(i as u64, len as usize)).unwrap();
    }
    assert_eq!(seek(&svc, 6, UNIT, 0, false), Some(10 * UNIT as u64));
    assert_eq!(seek(&svc, 6, UNIT, 0, true), Some(0));
    assert_eq!(
        seek(&svc, 6, UNIT, 10 * UNIT as u64 + 1, true),
        Some(13 * UNIT as u64)
    );
    assert_eq!(
        seek(&svc, 6, UNIT, 13 * UNIT as u64, false),
        Some(40 * UNIT as u64)
    );
    assert_eq!(
        seek(&svc, 6, UNIT, 40 * UNIT as u64 + 7, true),
        Some(40 * UNIT as u64 + B as u64)
    );
    assert_eq!(
        seek(&svc, 6, UNIT, 40 * UNIT as u64 + B as u64, false),
        None
    );
}

/// Which local blocks of a file hold written data, and its bytes.
#[derive(Default)]
struct Model {
    bytes: Vec<u8>,
    written: Vec<bool>,
}

impl Model {
    fn write(&mut self, off: usize, data: &[u8]) {
        let end = off + data.len();
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        self.bytes[off..end].copy_from_slice(data);
        self.mark(off / B, end.div_ceil(B), true);
    }

    fn punch(&mut self, off: usize, len: usize) {
        let end = (off + len).min(self.bytes.len());
        if off < end {
            self.bytes[off..end].fill(0);
        }
        self.mark(off.div_ceil(B), (off + len) / B, false);
    }

    fn mark(&mut self, from: usize, to: usize, yes: bool) {
        if yes && self.written.len() < to {
            self.written.resize(to, false);
        }
        for w in self.written.iter_mut().take(to).skip(from) {
            *w = yes;
        }
    }

    fn seek(&self, off: u64, hole: bool) -> Option<u64> {
        let from = off as usize / B;
        let is = |b: usize| self.written.get(b).copied().unwrap_or(false) != hole;
        let limit = self.written.len().max(from) + 1;
        (from..limit)
            .find(|&b| is(b))
            .map(|b| off.max((b * B) as u64))
    }
}

/// Random writes, punches and allocations on three targets; after each, reads (CRCs
/// checked) match the model and seeks from random offsets find the model's first data
/// block and first hole.
#[test]
fn random_sparse_ops_match_model() {
    let seed = seed("random_sparse_ops_match_model");
    let mut rng = StdRng::seed_from_u64(seed);
    let (_d, svc) = fs_server(3, None);
    let unit = 8192u32;
    let space = 400usize << 10;
    let mut m = Model::default();
    for step in 0..300 {
        let off = rng.gen_range(0..space);
        let len = rng.gen_range(1..40_000);
        match rng.gen_range(0..10) {
            0..=3 => {
                let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                write(&svc, 9, unit, off as u64, &data).unwrap();
                m.write(off, &data);
            }
            4..=7 => {
                punch(&svc, 9, unit, off as u64, len as u64);
                m.punch(off, len);
            }
            _ => allocate(&svc, 9, unit, off as u64, len as u64),
        }
        let got = read(&svc, 9, unit, 0, space + 50_000);
        let mut want = m.bytes.clone();
        want.resize(space + 50_000, 0);
        assert!(got == want, "seed {seed} step {step}: bytes differ");
        for _ in 0..8 {
            let at = rng.gen_range(0..space as u64 + 60_000);
            for hole in [false, true] {
                assert_eq!(
                    seek(&svc, 9, unit, at, hole),
                    m.seek(at, hole),
                    "seed {seed} step {step}: seek from {at}, hole {hole}"
                );
            }
        }
    }
}
