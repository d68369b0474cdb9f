//! The delta log (docs/objects.md, "Writes"): partial writes of written blocks go to
//! the object's log as pieces, readers merge them, compactions fold them in, and a
//! restart replays them; never a read-modify-write of the block on the write path.

use super::*;
use crate::intent::{decode, Record};
use crate::{Options, ServerId};
use stripefs_wire::sidecar::{Entry, ENTRY_BYTES};

const UNIT: u32 = 1 << 20;
const FID: u64 = 21;

fn server(store: &Arc<MemStore>) -> Arc<DataService> {
    let paths = vec![PathBuf::from("/mem/t0")];
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    DataService::build(
        ServerId(3),
        &paths,
        store.clone(),
        clock,
        Options::default(),
    )
    .unwrap()
}

fn entry(store: &MemStore, svc: &DataService, block: usize) -> Entry {
    let (_, crcs) = svc.object_paths(0, InodeId(FID));
    let bytes = store.contents(&crcs).unwrap_or_default();
    let at = block * ENTRY_BYTES as usize;
    match bytes.get(at..at + ENTRY_BYTES as usize) {
        Some(e) => Entry::decode(e).unwrap(),
        None => Entry::Hole,
    }
}

fn records(store: &MemStore, svc: &DataService) -> Vec<Record> {
    let log = store
        .contents(&svc.log_path(0, InodeId(FID)))
        .unwrap_or_default();
    let d = decode(&log, B as u64);
    assert_eq!(d.torn_bytes, 0, "a log written without a crash is whole");
    d.records
}

/// Writes record `k` of `rec` bytes, notes it in `expect`, and checks that the object
/// reads back as `expect` says.
fn write_record(svc: &DataService, expect: &mut [u8], rec: usize, k: usize) {
    let p = pattern(k as u64 + 1, rec);
    write(svc, FID, UNIT, (k * rec) as u64, &p).unwrap();
    expect[k * rec..(k + 1) * rec].copy_from_slice(&p);
    assert!(
        read(svc, FID, UNIT, 0, expect.len()) == expect,
        "after record {k}"
    );
}

fn fsync(svc: &DataService) {
    simple(svc, Request::Fsync { fid: InodeId(FID) }).unwrap();
}

/// Interleaved records of two writers share blocks: the first writer of a block
/// writes it in place (a hole: nothing to read). With an fsync between them (so that
/// the second's rewrites would need durable images in place), the second's bytes
/// become a piece in the log and the block's data stays as it was until an fsync folds
/// the piece in. Every read in between returns the merged bytes under a CRC that
/// matches them.
#[test]
fn pieces_of_written_blocks_go_to_the_log_and_fsync_folds_them_in() {
    let store = Arc::new(MemStore::new());
    let svc = server(&store);
    let rec = 47_008usize;
    let recs = 6;
    let mut expect = vec![0u8; rec * recs];
    // Writer 0's records first, then writer 1's, as two ranks far apart in time.
    for k in (0..recs).step_by(2).chain((1..recs).step_by(2)) {
        if k == 1 {
            fsync(&svc);
        }
        write_record(&svc, &mut expect, rec, k);
    }
    let (data_path, _) = svc.object_paths(0, InodeId(FID));
    let pieces: Vec<u64> = records(&store, &svc)
        .iter()
        .filter_map(|r| match r {
            Record::Piece { offset, .. } => Some(*offset / B as u64),
            _ => None,
        })
        .collect();
    // Each of writer 1's records shares its first and last block with writer 0's.
    assert_eq!(pieces.len(), 2 * (recs / 2) - 1, "{pieces:?}");
    for &b in &pieces {
        assert!(matches!(
            entry(&store, &svc, b as usize),
            Entry::Pieces(Some(_))
        ));
        // The data file holds the block as writer 0 left it.
        let file = store.contents(&data_path).unwrap();
        let at = b as usize * B;
        let theirs = &file[at..at + B];
        assert_ne!(
            theirs,
            &expect[at..at + B],
            "block {b} was rewritten in place"
        );
    }
    let (crcs, got) = read_raw(
        &svc,
        FID,
        UNIT,
        0,
        expect.len().div_ceil(B) as u32 * B as u32,
    )
    .unwrap();
    for (i, (block, crc)) in got.chunks(B).zip(&crcs).enumerate() {
        assert_eq!(crc32c(block), *crc, "block {i}");
    }

    fsync(&svc);
    assert!(
        records(&store, &svc).is_empty(),
        "the fsync emptied the log"
    );
    for &b in &pieces {
        let e = entry(&store, &svc, b as usize);
        let file = store.contents(&data_path).unwrap();
        let at = b as usize * B;
        let block = &file[at..at + B];
        assert_eq!(block, &expect[at..at + B], "block {b} folded in");
        assert_eq!(e, Entry::Written(crc32c(block)));
    }
    assert!(read(&svc, FID, UNIT, 0, expect.len()) == expect);
}

/// Without an fsync between them, the second writer of each shared block writes its
/// bytes in place too: the server knows the rest of the block is the zeros the first
/// write left, so it computes the block's CRC from the stored one and the new bytes,
/// reads nothing and logs only an intent (no piece, nothing to fold at the fsync).
/// Reads in between, a restart (which forgets what is known: later writes take pieces)
/// and a flipped stored byte all behave.
#[test]
fn interleaved_writes_of_one_epoch_go_in_place_into_known_zeros() {
    let store = Arc::new(MemStore::new());
    let svc = server(&store);
    let rec = 47_008usize;
    let recs = 12;
    let mut expect = vec![0u8; rec * recs];
    let order: Vec<usize> = (0..recs / 2)
        .step_by(2)
        .chain((1..recs / 2).step_by(2))
        .collect();
    for &k in &order {
        write_record(&svc, &mut expect, rec, k);
    }
    let (data_path, _) = svc.object_paths(0, InodeId(FID));
    let recs_now = records(&store, &svc);
    assert!(
        !recs_now.iter().any(|r| matches!(r, Record::Piece { .. })),
        "no piece: {recs_now:?}"
    );
    let intents = recs_now
        .iter()
        .filter(|r| matches!(r, Record::Intent { .. }))
        .count();
    assert_eq!(intents, 2 * (recs / 4) - 1, "an intent per shared block");
    let file = store.contents(&data_path).unwrap();
    let end = recs / 2 * rec;
    assert_eq!(&file[..end], &expect[..end], "every byte in place");
    for b in 0..end.div_ceil(B) {
        let lo = b * B;
        let mut block = expect[lo..(lo + B).min(expect.len())].to_vec();
        block.resize(B, 0);
        assert_eq!(
            entry(&store, &svc, b),
            Entry::Written(crc32c(&block)),
            "block {b}"
        );
    }
    // A restart forgets what is known: the second half goes as pieces where blocks are
    // shared, and reads and the fsync's fold are right.
    drop(svc);
    let svc = server(&store);
    for k in (recs / 2..recs)
        .step_by(2)
        .chain((recs / 2 + 1..recs).step_by(2))
    {
        let p = pattern(k as u64 + 1, rec);
        write(&svc, FID, UNIT, (k * rec) as u64, &p).unwrap();
        expect[k * rec..(k + 1) * rec].copy_from_slice(&p);
    }
    assert!(records(&store, &svc)
        .iter()
        .any(|r| matches!(r, Record::Piece { .. })));
    assert!(read(&svc, FID, UNIT, 0, expect.len()) == expect);
    fsync(&svc);
    assert!(
        records(&store, &svc).is_empty(),
        "the fsync emptied the log"
    );
    assert!(read(&svc, FID, UNIT, 0, expect.len()) == expect);
    // A flipped byte in a block written into known zeros is a checksum error.
    let shared = (rec / B) as u64;
    assert!(store.corrupt(&data_path, shared as usize * B + 5, |b| b ^ 1));
    let e = read_raw(&svc, FID, UNIT, shared * B as u64, B as u32);
    match e {
        Err(e) => assert_eq!(e.code, ErrorCode::Checksum, "{e}"),
        Ok((crcs, bytes)) => assert_ne!(crc32c(&bytes), crcs[0], "the damage is reported"),
    }
}

/// The pieces survive the server: a restart without an fsync folds them in from the
/// log; a whole-block write over a block with pieces replaces them for good (its cover
/// keeps them from coming back at the next restart); a truncate folds them in before it
/// cuts, so none comes back past the cut.
#[test]
fn pieces_survive_a_restart_and_never_come_back_over_newer_bytes() {
    let store = Arc::new(MemStore::new());
    let svc = server(&store);
    let base = pattern(1, 3 * B);
    write(&svc, FID, UNIT, 0, &base).unwrap();
    fsync(&svc);
    let mut expect = base.clone();
    for (at, len, salt) in [
        (100, 50, 2),
        (B + 7, 300, 3),
        (B + 200, 1000, 4),
        (2 * B + 9, 9, 5),
    ] {
        let p = pattern(salt, len);
        write(&svc, FID, UNIT, at as u64, &p).unwrap();
        expect[at..at + len].copy_from_slice(&p);
    }
    assert!(matches!(entry(&store, &svc, 1), Entry::Pieces(Some(_))));
    drop(svc);
    let svc = server(&store);
    assert!(
        read(&svc, FID, UNIT, 0, 3 * B) == expect,
        "replayed from the log"
    );
    for b in 0..3 {
        assert!(
            matches!(entry(&store, &svc, b), Entry::Written(_)),
            "block {b}"
        );
    }

    // Pieces in blocks 0 and 1, then a whole block over block 1, then a restart: block
    // 0's piece is folded in, block 1 keeps the whole block's bytes.
    let whole = pattern(6, B);
    write(&svc, FID, UNIT, 300, &pattern(7, 10)).unwrap();
    write(&svc, FID, UNIT, (B + 300) as u64, &pattern(9, 10)).unwrap();
    assert!(matches!(entry(&store, &svc, 1), Entry::Pieces(Some(_))));
    write(&svc, FID, UNIT, B as u64, &whole).unwrap();
    assert_eq!(entry(&store, &svc, 1), Entry::Written(crc32c(&whole)));
    expect[300..310].copy_from_slice(&pattern(7, 10));
    expect[B..2 * B].copy_from_slice(&whole);
    drop(svc);
    let svc = server(&store);
    assert!(
        read(&svc, FID, UNIT, 0, 3 * B) == expect,
        "a cover kept the old pieces dead"
    );

    // A truncate cuts through bytes a piece wrote; growing again shows zeros there.
    write(&svc, FID, UNIT, (2 * B + 100) as u64, &pattern(8, 200)).unwrap();
    simple(
        &svc,
        Request::Truncate {
            fid: InodeId(FID),
            unit: UNIT,
            local_size: (2 * B + 150) as u64,
        },
    )
    .unwrap();
    expect[2 * B + 100..2 * B + 150].copy_from_slice(&pattern(8, 200)[..50]);
    expect[2 * B + 150..].fill(0);
    drop(svc);
    let svc = server(&store);
    assert!(
        read(&svc, FID, UNIT, 0, 3 * B) == expect,
        "nothing came back past the cut"
    );
}

/// Writers of disjoint pieces of the same written blocks run at once, and every byte
/// lands, before and after the fsync that folds them in.
#[test]
fn concurrent_pieces_of_one_block_all_land() {
    let store = Arc::new(MemStore::new());
    let svc = server(&store);
    write(&svc, FID, UNIT, 0, &vec![0xAA; 8 * B]).unwrap();
    let writers = 8;
    let per = B / writers;
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let svc = svc.clone();
            std::thread::spawn(move || {
                for round in 0..50u64 {
                    for block in 0..8 {
                        let at = block * B + w * per + 1;
                        let p = pattern(round * 100 + w as u64, per - 2);
                        write(&svc, FID, UNIT, at as u64, &p).unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let got = read(&svc, FID, UNIT, 0, 8 * B);
    for block in 0..8 {
        for w in 0..writers {
            let at = block * B + w * per;
            assert_eq!(got[at], 0xAA, "block {block} writer {w}: byte before");
            assert_eq!(
                &got[at + 1..at + per - 1],
                &pattern(49 * 100 + w as u64, per - 2)[..],
                "block {block} writer {w}: its last piece"
            );
        }
    }
    fsync(&svc);
    assert!(read(&svc, FID, UNIT, 0, 8 * B) == got);
}

/// Writers of disjoint slots of the same hole blocks run at once: each block's first
/// writer writes it in place from a hole, the others into its known zeros, each under
/// the block's exclusive lock (or, having looked at it mid-write, as a piece), and no
/// byte or CRC is lost to a race.
#[test]
fn concurrent_writes_into_known_zeros_all_land() {
    let store = Arc::new(MemStore::new());
    let svc = server(&store);
    let writers = 8;
    let per = B / writers;
    let blocks = 16;
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let svc = svc.clone();
            std::thread::spawn(move || {
                for block in 0..blocks {
                    let at = block * B + w * per + 1;
                    let p = pattern((block * 100 + w) as u64, per - 2);
                    write(&svc, FID, UNIT, at as u64, &p).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut expect = vec![0u8; blocks * B];
    for block in 0..blocks {
        for w in 0..writers {
            let at = block * B + w * per + 1;
            expect[at..at + per - 2].copy_from_slice(&pattern((block * 100 + w) as u64, per - 2));
        }
    }
    assert!(read(&svc, FID, UNIT, 0, blocks * B) == expect);
    // A writer that looked at a block between another's write and its record took
    // the delta log instead (as correct, only slower): folded in by the fsync.
    fsync(&svc);
    assert!(read(&svc, FID, UNIT, 0, blocks * B) == expect);
    for b in 0..blocks {
        assert_eq!(
            entry(&store, &svc, b),
            Entry::Written(crc32c(&expect[b * B..(b + 1) * B]))
        );
    }
}

/// On real files, across two restarts without an fsync: the records a replay appends
/// (images, covers) and the pieces written after it go after the log's last record, so
/// the second replay finds them all, and an fsync then leaves nothing to replay.
#[test]
fn pieces_survive_two_restarts_on_real_files() {
    let dir = tempfile::tempdir().unwrap();
    let paths = vec![dir.path().join("t0")];
    let open = || DataService::open(ServerId(3), &paths, None).unwrap();
    let svc = open();
    let mut expect = pattern(1, 3 * B);
    write(&svc, FID, UNIT, 0, &expect).unwrap();
    fsync(&svc);
    let mut put = |svc: &DataService, at: usize, len: usize, salt: u64| {
        let p = pattern(salt, len);
        write(svc, FID, UNIT, at as u64, &p).unwrap();
        expect[at..at + len].copy_from_slice(&p);
    };
    put(&svc, 100, 700, 2);
    put(&svc, B + 50, 300, 3);
    drop(svc);
    let svc = open();
    put(&svc, 2 * B + 10, 900, 4);
    put(&svc, 200, 100, 5);
    drop(svc);
    let svc = open();
    assert!(
        read(&svc, FID, UNIT, 0, 3 * B) == expect,
        "a piece was lost or undone"
    );
    fsync(&svc);
    drop(svc);
    let svc = open();
    assert!(read(&svc, FID, UNIT, 0, 3 * B) == expect);
}

/// Three fsynced blocks, then a piece in block 1 (left in the log); returns block 1's
/// bytes with the piece.
fn block_with_a_piece() -> (Arc<MemStore>, Arc<DataService>, Vec<u8>) {
    let store = Arc::new(MemStore::new());
    let svc = server(&store);
    let base = pattern(1, 3 * B);
    write(&svc, FID, UNIT, 0, &base).unwrap();
    fsync(&svc);
    let piece = pattern(2, 50);
    write(&svc, FID, UNIT, (B + 100) as u64, &piece).unwrap();
    assert!(matches!(entry(&store, &svc, 1), Entry::Pieces(Some(_))));
    let mut block = base[B..2 * B].to_vec();
    block[100..150].copy_from_slice(&piece);
    (store, svc, block)
}

/// A whole-block write over a block with pieces, with each of its disk writes in turn
/// failing (ENOSPC, then EIO): the block reads the same before and after a restart, and
/// each byte is the old (base and piece) or the new one; once the write is
/// acknowledged, a later piece of the block lands on its bytes and nothing older comes
/// back over them. Before the pieces were folded in first, a cover that could not be
/// appended left the old piece live in the log, and the restart laid it over the newer
/// bytes (simulator, seed 5272).
#[test]
fn a_failed_cover_never_brings_old_pieces_back() {
    let whole = pattern(6, B);
    let later = pattern(7, 20);
    for errno in [libc::ENOSPC, libc::EIO] {
        let mut failed = 0;
        for pass in 0.. {
            let (store, svc, old) = block_with_a_piece();
            store.fail_writes(pass, 1, errno, false);
            let result = write(&svc, FID, UNIT, B as u64, &whole);
            store.fail_writes(0, 0, errno, false);
            let ctx = format!("errno {errno}, disk write {pass} failed");
            let mut expect = match &result {
                Ok(()) => whole.clone(),
                Err(e) => {
                    failed += 1;
                    let now = read(&svc, FID, UNIT, B as u64, B);
                    for (i, b) in now.iter().enumerate() {
                        assert!(*b == old[i] || *b == whole[i], "{ctx}: {e}: byte {i}");
                    }
                    now
                }
            };
            write(&svc, FID, UNIT, (B + 110) as u64, &later).unwrap();
            expect[110..130].copy_from_slice(&later);
            assert!(read(&svc, FID, UNIT, B as u64, B) == expect, "{ctx}");
            drop(svc);
            let svc = server(&store);
            assert!(
                read(&svc, FID, UNIT, B as u64, B) == expect,
                "{ctx}: after a restart"
            );
            if result.is_ok() {
                break;
            }
        }
        assert!(failed > 2, "errno {errno}: the faults hit the write");
    }
}

/// A restart that folds pieces in but cannot record that in the log (each of its disk
/// writes in turn failing) keeps them: a whole-block write after it still replaces
/// them for good, across one more restart.
#[test]
fn pieces_a_replay_could_not_cover_stay_dead_under_a_later_write() {
    let whole = pattern(6, B);
    for pass in 0..12 {
        let (store, svc, old) = block_with_a_piece();
        drop(svc);
        store.fail_writes(pass, 1, libc::ENOSPC, false);
        let svc = server(&store);
        let opened = read_raw(&svc, FID, UNIT, B as u64, B as u32);
        store.fail_writes(0, 0, libc::ENOSPC, false);
        if let Ok((crcs, data)) = opened {
            assert!(
                data == old && crcs[0] == crc32c(&old),
                "disk write {pass} failed"
            );
        }
        write(&svc, FID, UNIT, B as u64, &whole).unwrap();
        drop(svc);
        let svc = server(&store);
        assert!(
            read(&svc, FID, UNIT, B as u64, B) == whole,
            "disk write {pass} of the replay failed"
        );
    }
}

/// An fsync whose fold of two blocks' pieces has each of its disk writes in turn fail
/// (EIO, whole or cut short): every byte reads as acknowledged, before and after a
/// restart, and a later fsync folds the pieces for good. The fold writes the blocks,
/// then their entries in one write over the span between them (which holds a block
/// without pieces, whose entry must come out unchanged); a failure at any point puts
/// the bases back under entries that name the pieces still in the log.
#[test]
fn a_failed_fold_changes_no_byte() {
    let mut failed = 0;
    for cut_short in [false, true] {
        for pass in 0.. {
            let store = Arc::new(MemStore::new());
            let svc = server(&store);
            let mut expect = pattern(11, 5 * B);
            write(&svc, FID, UNIT, 0, &expect).unwrap();
            fsync(&svc);
            for (block, at, len, seed) in [(1, 100, 50, 12), (3, 4000, 96, 13)] {
                let piece = pattern(seed, len);
                let off = block * B + at;
                write(&svc, FID, UNIT, off as u64, &piece).unwrap();
                expect[off..off + len].copy_from_slice(&piece);
            }
            assert!(matches!(entry(&store, &svc, 1), Entry::Pieces(Some(_))));
            assert!(matches!(entry(&store, &svc, 2), Entry::Written(_)));
            store.fail_writes(pass, 1, libc::EIO, cut_short);
            let result = simple(&svc, Request::Fsync { fid: InodeId(FID) });
            store.fail_writes(0, 0, libc::EIO, false);
            let ctx = format!("disk write {pass} failed (cut short: {cut_short})");
            assert!(read(&svc, FID, UNIT, 0, 5 * B) == expect, "{ctx}");
            drop(svc);
            let svc = server(&store);
            assert!(
                read(&svc, FID, UNIT, 0, 5 * B) == expect,
                "{ctx}: after a restart"
            );
            fsync(&svc);
            assert!(read(&svc, FID, UNIT, 0, 5 * B) == expect, "{ctx}: folded");
            for block in 0..5 {
                let e = entry(&store, &svc, block);
                assert!(
                    matches!(e, Entry::Written(_)),
                    "{ctx}: block {block}: {e:?}"
                );
            }
            if result.is_ok() {
                break;
            }
            failed += 1;
        }
    }
    assert!(
        failed > 4,
        "the faults hit the fold ({failed} fsyncs failed)"
    );
}
