//! Crash safety and hardening of the data server (issue 12): failed writes damage
//! nothing, the boot identity changes across a power cut, a truncate is made durable by
//! the next fsync, the scrubber finds damage, and each canary (a known-broken rule) is
//! caught by the check it breaks.

use super::*;
use crate::Storage;
use crate::{Canary, Options};
use std::path::Path;

const UNIT: u32 = 1 << 20;
const OLD_LEN: usize = 8 << 10;
const AT: u64 = 100;
const NEW_LEN: usize = 4 << 20;

fn mem_server_with(store: Arc<MemStore>, opts: Options) -> Arc<DataService> {
    let paths = vec![PathBuf::from("/mem/t0")];
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    DataService::build(ServerId(3), &paths, store, clock, opts).unwrap()
}

/// After a write of `new` at `at` failed, every byte of the file reads (each block
/// passes its checksum); bytes outside the written range are the old ones and bytes
/// inside it are old or new. The file held `old` (zeros past its end).
fn check_after_failed_write(
    svc: &DataService,
    old: &[u8],
    at: usize,
    new: &[u8],
) -> Result<(), String> {
    let end = (at + new.len()).max(old.len());
    let len = end.div_ceil(B) * B;
    let (crcs, data) = read_raw(svc, 1, UNIT, 0, len as u32).map_err(|e| e.to_string())?;
    for (i, (block, crc)) in data.chunks(B).zip(&crcs).enumerate() {
        if crc32c(block) != *crc {
            return Err(format!(
                "block {i} fails its checksum after the failed write"
            ));
        }
    }
    for (i, byte) in data.iter().enumerate() {
        let was = old.get(i).copied().unwrap_or(0);
        let inside = (at..at + new.len()).contains(&i);
        if *byte != was && !(inside && *byte == new[i - at]) {
            return Err(format!("byte {i} reads {byte}, neither old {was} nor new"));
        }
    }
    Ok(())
}

/// A write whose k-th disk write fails with EIO (whole or cut short) leaves every byte
/// readable: the touched blocks' checksums are repaired from the bytes on disk. Before
/// the fix, the head block was rewritten, the rest failed, and its old checksum no
/// longer matched (a checksum error at offset 0 for ever after).
#[test]
fn failed_write_partway_leaves_every_byte_readable() {
    let old = pattern(1, OLD_LEN);
    // The bytes (head block, whole blocks and tail block in one disk write, since the
    // partial blocks change only where the write does) and the checksums, after the
    // log record guarding the rewritten head block: each of the write's disk writes in
    // turn fails, until a pass fails none. Cut short, the data write leaves a torn mix.
    let new = pattern(2, 20 * B + 333);
    let mut failed = 0;
    'passes: for pass in 0.. {
        for cut_short in [false, true] {
            let (store, svc) = mem_server(1);
            write(&svc, 1, UNIT, 0, &old).unwrap();
            store.fail_writes(pass, 1, libc::EIO, cut_short);
            let Err(e) = write(&svc, 1, UNIT, AT, &new) else {
                break 'passes;
            };
            failed += 1;
            assert_eq!(e.code, ErrorCode::Io, "{e}");
            let r = check_after_failed_write(&svc, &old, AT as usize, &new);
            assert_eq!(
                r,
                Ok(()),
                "disk write {pass} failed (cut short: {cut_short})"
            );
            // The disk works again: the write goes through whole.
            write(&svc, 1, UNIT, AT, &new).unwrap();
            assert_eq!(read(&svc, 1, UNIT, AT, new.len()), new);
        }
    }
    assert!(failed >= 4, "only {failed} failing disk writes were tried");
}

/// The case of the issue: an 8 KiB file, the disk full, a 4 MiB write at byte 100
/// fails with NoSpace and changes nothing; once space is freed the whole file reads as
/// before. Before the fix, the head block was rewritten before the space ran out.
#[test]
fn full_disk_fails_the_write_before_anything_changes() {
    let (store, svc) = mem_server(1);
    let old = pattern(3, OLD_LEN);
    write(&svc, 1, UNIT, 0, &old).unwrap();
    let (d, c) = svc.object_paths(0, InodeId(1));
    let before = (store.contents(&d), store.contents(&c));
    store.set_capacity(store.used_bytes() + 16 * B as u64);
    let new = pattern(4, NEW_LEN);
    let e = write(&svc, 1, UNIT, AT, &new).unwrap_err();
    assert_eq!(e.code, ErrorCode::NoSpace, "{e}");
    assert!(
        before == (store.contents(&d), store.contents(&c)),
        "a write that failed for lack of space changed the object"
    );
    store.set_capacity(1 << 40);
    // Bytes outside the failed range are unchanged, inside old or new; all readable.
    assert_eq!(
        check_after_failed_write(&svc, &old, AT as usize, &new),
        Ok(())
    );
    assert_eq!(read(&svc, 1, UNIT, 0, AT as usize), old[..AT as usize]);
}

/// Interleaved writers' shape on a full disk: an unaligned record that starts in the
/// last block another record wrote and goes on past the end. The write fails with
/// NoSpace, the written block reads as before (it is rewritten in place, so the write
/// must not change it and then run out of space), and the new blocks read as holes or
/// as the new bytes. With space again the write goes through.
#[test]
fn full_disk_fails_an_unaligned_record_after_a_written_block_keeping_it() {
    let (store, svc) = mem_server(1);
    let old = pattern(5, 2 * B);
    write(&svc, 1, UNIT, 0, &old).unwrap();
    store.set_capacity(store.used_bytes() + 2 * B as u64);
    let rec = pattern(7, 10 * B + 333);
    let at = B + 100;
    let e = write(&svc, 1, UNIT, at as u64, &rec).unwrap_err();
    assert_eq!(e.code, ErrorCode::NoSpace, "{e}");
    assert_eq!(
        read(&svc, 1, UNIT, 0, 2 * B),
        old,
        "the written blocks changed"
    );
    assert_eq!(check_after_failed_write(&svc, &old, at, &rec), Ok(()));
    store.set_capacity(1 << 40);
    write(&svc, 1, UNIT, at as u64, &rec).unwrap();
    let mut model = old.clone();
    model.resize(at + rec.len(), 0);
    model[at..].copy_from_slice(&rec);
    assert!(read(&svc, 1, UNIT, 0, model.len()) == model);
}

/// A power cut between a write and its fsync gives the restarted server a new boot
/// identity, which both answers carry, so the client can tell.
#[test]
fn boot_id_changes_across_a_power_cut() {
    let store = Arc::new(MemStore::new());
    let svc = mem_server_with(store.clone(), Options::default());
    let req = Request::Write {
        fid: InodeId(1),
        unit: UNIT,
        offset: 0,
        crcs: piece_crcs(0, b"abc"),
    };
    let first = match call(&svc, req, b"abc".to_vec()).result.unwrap() {
        Response::Written { boot_id } => boot_id,
        other => panic!("{other:?}"),
    };
    assert_eq!(first, svc.boot_id());
    let fsync = Request::Fsync { fid: InodeId(1) };
    assert_eq!(
        simple(&svc, fsync.clone()),
        Ok(Response::Written { boot_id: first })
    );
    store.crash(seed("boot_id_changes_across_a_power_cut"));
    drop(svc);
    let svc = mem_server_with(store, Options::default());
    match simple(&svc, fsync).unwrap() {
        Response::Written { boot_id } => assert_ne!(boot_id, first, "same boot id after restart"),
        other => panic!("{other:?}"),
    }
}

/// Power cut after `fsync`, restart, and the first `len` bytes of file 1 read back.
fn after_power_cut(store: &Arc<MemStore>, seed: u64, len: usize) -> Vec<u8> {
    store.crash(seed);
    let svc = mem_server_with(store.clone(), Options::default());
    read(&svc, 1, UNIT, 0, len)
}

/// A truncate is made durable by the object's next fsync: after a power cut the cut
/// bytes do not come back. Before the fix the fsync used fdatasync, which (on the file
/// systems the in-memory store models) leaves the old length, and the old tail was back.
#[test]
fn truncate_is_made_durable_by_the_next_fsync() {
    let seed = seed("truncate_is_made_durable_by_the_next_fsync");
    let store = Arc::new(MemStore::new());
    let svc = mem_server_with(store.clone(), Options::default());
    write(&svc, 1, UNIT, 0, &pattern(5, 8 * B)).unwrap();
    simple(&svc, Request::Fsync { fid: InodeId(1) }).unwrap();
    let cut = Request::Truncate {
        fid: InodeId(1),
        unit: UNIT,
        local_size: B as u64 + 10,
    };
    simple(&svc, cut).unwrap();
    simple(&svc, Request::Fsync { fid: InodeId(1) }).unwrap();
    drop(svc);
    let back = after_power_cut(&store, seed, 8 * B);
    let mut want = pattern(5, 8 * B);
    want[B + 10..].fill(0);
    assert!(
        back == want,
        "bytes cut by a truncate came back after an fsync and a power cut"
    );
}

/// Writes a new object, fsyncs it, cuts the power and restarts: the fsynced bytes must
/// read back. Returns the violation, if any, over a few crash seeds.
fn fsynced_new_object_survives(canary: Option<Canary>) -> Result<(), String> {
    for seed in 0..8u64 {
        let store = Arc::new(MemStore::new());
        let svc = mem_server_with(
            store.clone(),
            Options {
                canary,
                ..Options::default()
            },
        );
        let data = pattern(seed, 3 * B + 5);
        write(&svc, 1, UNIT, 0, &data).unwrap();
        simple(&svc, Request::Fsync { fid: InodeId(1) }).unwrap();
        drop(svc);
        if after_power_cut(&store, seed, data.len()) != data {
            return Err(format!("crash seed {seed}: an fsynced write was lost"));
        }
    }
    Ok(())
}

/// The write-path check of `failed_write_partway_leaves_every_byte_readable`, once.
fn failed_write_keeps_file_readable(canary: Option<Canary>) -> Result<(), String> {
    let store = Arc::new(MemStore::new());
    let svc = mem_server_with(
        store.clone(),
        Options {
            canary,
            ..Options::default()
        },
    );
    let old = pattern(6, OLD_LEN);
    write(&svc, 1, UNIT, 0, &old).unwrap();
    let new = pattern(7, 3 * B);
    // The write's first disk write succeeds, the next fails.
    store.fail_writes(1, 1, libc::EIO, false);
    if write(&svc, 1, UNIT, AT, &new).is_ok() {
        return Err("the failing write succeeded".into());
    }
    check_after_failed_write(&svc, &old, AT as usize, &new)
}

/// Each canary swaps in a known-broken rule; the check that rule breaks must fail with
/// it and hold without it, or the check proves nothing.
#[test]
fn canaries_are_caught() {
    assert_eq!(fsynced_new_object_survives(None), Ok(()));
    assert_eq!(failed_write_keeps_file_readable(None), Ok(()));
    for canary in [Canary::FsyncBeforeDurable, Canary::SkipDirSync] {
        assert!(
            fsynced_new_object_survives(Some(canary)).is_err(),
            "{canary:?} was not caught by a power cut"
        );
    }
    // Checksums before data: a crash between the two shows as a checksum error, which
    // the crash rule allows; a write failing part-way is what it damages.
    assert!(
        failed_write_keeps_file_readable(Some(Canary::ChecksumBeforeData)).is_err(),
        "ChecksumBeforeData was not caught by a failed write"
    );
}

/// A scrub request finds a flipped stored byte, names its object offset and counts it;
/// ListObjects pages through every object.
#[test]
fn scrub_finds_a_flipped_byte_and_list_pages_objects() {
    let (store, svc) = mem_server(2);
    for fid in [1u64, 2, 257, 513] {
        write(&svc, fid, 8 << 10, 0, &pattern(fid, 40_000)).unwrap();
    }
    let (data, _) = svc.object_paths(1, InodeId(257));
    assert!(store.corrupt(&data, 5000, |b| b ^ 0x40));
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let (fids, done) = match simple(&svc, Request::ListObjects { after, limit: 1 }).unwrap() {
            Response::Objects { fids, done } => (fids, done),
            other => panic!("{other:?}"),
        };
        assert!(fids.len() <= 1);
        seen.extend(fids.iter().map(|f| f.0));
        after = fids.last().copied().or(after);
        if done {
            break;
        }
    }
    assert_eq!(seen, vec![1, 257, 513, 2], "order (fid % 256, fid)");
    let mut damaged = Vec::new();
    for fid in &seen {
        for target in 0..2 {
            let req = Request::Scrub {
                fid: InodeId(*fid),
                target,
                offset: 0,
            };
            match simple(&svc, req).unwrap() {
                Response::Scrubbed {
                    next, damaged: d, ..
                } => {
                    assert_eq!(next, None);
                    damaged.extend(d);
                }
                other => panic!("{other:?}"),
            }
        }
    }
    assert_eq!(damaged.len(), 1, "{damaged:?}");
    assert_eq!((damaged[0].fid, damaged[0].target), (InodeId(257), 1));
    assert_eq!(
        damaged[0].offset, 4096,
        "byte 5000 lies in the block at 4096"
    );
    match simple(&svc, Request::ScrubStatus {}).unwrap() {
        Response::ScrubStatus {
            scrubbed_bytes,
            damaged_blocks,
            ..
        } => {
            assert_eq!(damaged_blocks, 1);
            assert!(scrubbed_bytes >= 4 * 40_000, "{scrubbed_bytes}");
        }
        other => panic!("{other:?}"),
    }
}

/// The background scrubber finds damage in a cold object by itself, and stops when
/// told to.
#[test]
fn background_scrubber_finds_damage() {
    let (store, svc) = mem_server(1);
    write(&svc, 9, UNIT, 0, &pattern(9, 64 << 10)).unwrap();
    let (data, _) = svc.object_paths(0, InodeId(9));
    assert!(store.corrupt(&data, 10_000, |b| !b));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let h = svc.start_scrubber(64 << 20, stop.clone()).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let damaged = loop {
        let d = match simple(&svc, Request::ScrubStatus {}).unwrap() {
            Response::ScrubStatus { damaged_blocks, .. } => damaged_blocks,
            other => panic!("{other:?}"),
        };
        if d > 0 || std::time::Instant::now() > deadline {
            break d;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    h.join().unwrap();
    // Each pass that meets the block counts it again.
    assert!(damaged >= 1, "the scrubber found nothing");
}

/// Pages of `f` in the page cache; `None` where the kernel cannot say.
fn cached_pages(f: &std::fs::File) -> Option<u64> {
    stripefs_rpc::local::cachestat(f, 0, 0).map(|c| c.cached)
}

/// Writes `f`'s dirty pages and drops its cached ones.
fn uncache(f: &std::fs::File) {
    use std::os::fd::AsRawFd;
    f.sync_all().unwrap();
    // SAFETY: advice on an open descriptor.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(r, 0);
}

/// The scrubber checks what the disk holds, past the page cache: it finds a byte
/// flipped on the disk (an object of 8 MiB and a partial last block), and a scrubbed
/// object is not left in the page cache, where it would push out what clients read.
#[test]
fn scrub_reads_the_disk_past_the_page_cache() {
    let (_dir, svc) = fs_server(1, None);
    let len = (8 << 20) + 5000;
    write(&svc, 9, UNIT, 0, &pattern(9, len)).unwrap();
    simple(&svc, Request::Fsync { fid: InodeId(9) }).unwrap();
    let (path, _) = svc.object_paths(0, InodeId(9));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    // A byte of the partial last block flipped, as a disk would.
    use std::os::unix::fs::FileExt;
    let at = len as u64 - 10;
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[!b[0]], at).unwrap();
    uncache(&f);
    if cached_pages(&f) != Some(0) {
        eprintln!(
            "skipped: this file system keeps {path:?} cached ({:?} pages), or the kernel has \
             no cachestat",
            cached_pages(&f)
        );
        return;
    }
    let mut offset = Some(0);
    let mut damaged = Vec::new();
    while let Some(o) = offset {
        let req = Request::Scrub {
            fid: InodeId(9),
            target: 0,
            offset: o,
        };
        match simple(&svc, req).unwrap() {
            Response::Scrubbed {
                next, damaged: d, ..
            } => {
                damaged.extend(d);
                offset = next;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(damaged.len(), 1, "{damaged:?}");
    assert_eq!(damaged[0].offset, at / 4096 * 4096);
    assert_eq!(
        cached_pages(&f),
        Some(0),
        "the scrub left the object cached"
    );
}

/// Puts the sidecar entry of `block` back to `entry`: what a server that died between a
/// read-modify-write's new bytes and its new checksum leaves behind.
fn undo_entry(store: &MemStore, crc_path: &Path, block: usize, entry: &[u8]) {
    for (i, &b) in entry.iter().enumerate() {
        assert!(store.corrupt(crc_path, block * 8 + i, |_| b));
    }
}

/// Issue 13's crash rule for shared blocks: record `a` is fsynced; record `b` then
/// writes the rest of `a`'s last block, which goes to the object's log as a piece; the
/// compaction that folds it into the block (as the next fsync does) rewrites the block
/// in place, and the server dies after the block's bytes and before its checksum. The
/// restarted server finds the rewrite's image in the log and gives the block its
/// checksum, so `a` still reads; without the log the whole block, `a`'s acknowledged
/// bytes included, would be a checksum error (checked too, so that this test can
/// fail).
#[test]
fn dying_between_rmw_bytes_and_checksum_keeps_the_blocks_other_bytes() {
    for keep_log in [true, false] {
        let store = Arc::new(MemStore::new());
        let svc = mem_server_with(store.clone(), Options::default());
        let fid = 7;
        let a = pattern(1, 5000);
        write(&svc, fid, UNIT, 0, &a).unwrap();
        simple(&svc, Request::Fsync { fid: InodeId(fid) }).unwrap();
        let (_, crc_path) = svc.object_paths(0, InodeId(fid));
        let old_entry = store.contents(&crc_path).unwrap()[8..16].to_vec();
        let b = pattern(2, 4000);
        write(&svc, fid, UNIT, 5000, &b).unwrap();
        assert_eq!(svc.compact_object(0, InodeId(fid)).unwrap(), 1);
        undo_entry(&store, &crc_path, 1, &old_entry);
        let log_path = svc.log_path(0, InodeId(fid));
        let log = store.contents(&log_path).unwrap();
        let records = crate::intent::decode(&log, B as u64).records;
        use crate::intent::Record;
        assert!(
            matches!(
                records[..],
                [
                    Record::Piece { offset: 5000, .. },
                    Record::Image { block: 1, .. },
                    Record::Cover { block: 1, .. }
                ]
            ),
            "b's head as a piece (block 2 was a hole: written in place), then the \
             compaction's image of block 1 (it held fsynced bytes) and its cover: \
             {records:?}"
        );
        if !keep_log {
            store.remove(&log_path).unwrap();
        }
        drop(svc);
        // The restarted server.
        let svc = mem_server_with(store.clone(), Options::default());
        let (crcs, bytes) = read_raw(&svc, fid, UNIT, 0, 3 * B as u32).unwrap();
        let block1_ok = crc32c(&bytes[B..2 * B]) == crcs[1];
        if !keep_log {
            assert!(
                !block1_ok,
                "without the intent the block fails its checksum"
            );
            continue;
        }
        assert!(block1_ok, "the intent repaired block 1's checksum");
        assert_eq!(read(&svc, fid, UNIT, 0, 5000), a);
        assert_eq!(read(&svc, fid, UNIT, 5000, 4000), b);
        // The next fsync empties the log: its intents are of completed writes.
        simple(&svc, Request::Fsync { fid: InodeId(fid) }).unwrap();
        write(&svc, fid, UNIT, 6000, &pattern(3, 10)).unwrap();
        simple(&svc, Request::Fsync { fid: InodeId(fid) }).unwrap();
        assert_eq!(store.contents(&log_path).map(|l| l.len()), Some(0));
    }
}

/// The log never blesses bytes it does not name: a block whose bytes match neither its
/// stored checksum nor an intended one (a flipped byte) stays a checksum error, also
/// with a piece waiting to be folded into it.
#[test]
fn an_intent_does_not_bless_damaged_bytes() {
    let store = Arc::new(MemStore::new());
    let svc = mem_server_with(store.clone(), Options::default());
    let fid = 9;
    write(&svc, fid, UNIT, 0, &pattern(1, 5000)).unwrap();
    // After an fsync the next write into block 1 is a piece (in place it would need a
    // durable image).
    simple(&svc, Request::Fsync { fid: InodeId(fid) }).unwrap();
    write(&svc, fid, UNIT, 5000, &pattern(2, 100)).unwrap();
    let (data_path, _) = svc.object_paths(0, InodeId(fid));
    assert!(store.corrupt(&data_path, 4500, |b| b ^ 0x40));
    drop(svc);
    let svc = mem_server_with(store.clone(), Options::default());
    match read_raw(&svc, fid, UNIT, 0, 2 * B as u32) {
        // The server merging the piece checks the base first.
        Err(e) => assert_eq!(e.code, ErrorCode::Checksum, "{e}"),
        Ok((crcs, bytes)) => assert_ne!(crc32c(&bytes[B..]), crcs[1], "damage is still reported"),
    }
    let e = simple(&svc, Request::Fsync { fid: InodeId(fid) }).unwrap_err();
    assert_eq!(
        e.code,
        ErrorCode::Checksum,
        "the compaction refuses to fold it: {e}"
    );
}

/// The same rule across power cuts: after record `a` is fsynced, records `b`, `c` and
/// `d` write into `a`'s last block as pieces, and two compactions fold them in, rewriting
/// the block in place (the first logs a durable image, the second an intent); then the
/// power fails, tearing every unsynced write at sector granularity. After each of many
/// crash seeds `a` reads back whole, and the others' bytes read as written (the latest
/// or an earlier one) or as the old zeros; never as other bytes.
#[test]
fn power_cut_during_rewrites_of_a_shared_block_keeps_the_fsynced_bytes() {
    let a = pattern(1, 5000);
    let b = pattern(2, 2000);
    let c = pattern(3, 1500);
    let d = pattern(4, 300);
    for seed in 0..64 {
        let store = Arc::new(MemStore::new());
        let svc = mem_server_with(store.clone(), Options::default());
        let fid = 11;
        write(&svc, fid, UNIT, 0, &a).unwrap();
        simple(&svc, Request::Fsync { fid: InodeId(fid) }).unwrap();
        // b's and c's bytes in block 1 go to the log as pieces; folding them in rewrites
        // the block in place (its image logged and synced first), and folding d in
        // again (an intent).
        write(&svc, fid, UNIT, 5000, &b).unwrap();
        write(&svc, fid, UNIT, 7000, &c).unwrap();
        assert_eq!(svc.compact_object(0, InodeId(fid)).unwrap(), 1);
        write(&svc, fid, UNIT, 7600, &d).unwrap();
        assert_eq!(svc.compact_object(0, InodeId(fid)).unwrap(), 1);
        drop(svc);
        store.crash(seed);
        let svc = mem_server_with(store.clone(), Options::default());
        let (crcs, bytes) = read_raw(&svc, fid, UNIT, 0, 3 * B as u32).unwrap();
        for (i, blk) in bytes.chunks(B).enumerate() {
            if i < 2 {
                assert_eq!(
                    crc32c(blk),
                    crcs[i],
                    "seed {seed}: block {i}, holding fsynced bytes, fails its checksum"
                );
            }
        }
        assert_eq!(
            &bytes[..5000],
            &a[..],
            "seed {seed}: the fsynced record changed"
        );
        if crc32c(&bytes[B..2 * B]) == crcs[1] {
            for (i, &x) in bytes[5000..2 * B].iter().enumerate() {
                let at = 5000 + i;
                let mut want = vec![
                    0,
                    if at < 7000 {
                        b[at - 5000]
                    } else {
                        c[at - 7000]
                    },
                ];
                if (7600..7900).contains(&at) {
                    want.push(d[at - 7600]);
                }
                assert!(want.contains(&x), "seed {seed}: byte {at} is {x}");
            }
        }
    }
}

/// A durable cut kills the logged images of the blocks it cuts: a block rewritten in
/// place (its image logged), then cut off by a truncate, then written again and torn by
/// a power cut, reads as its new bytes, as zeros or as a checksum error; never as the
/// bytes from before the cut (found by the simulator, seed 213).
#[test]
fn a_truncate_kills_the_logged_images_of_the_blocks_it_cuts() {
    let a = pattern(1, 3 * B);
    let c = pattern(3, B);
    for seed in 0..48 {
        let store = Arc::new(MemStore::new());
        let svc = mem_server_with(store.clone(), Options::default());
        let fid = 13;
        write(&svc, fid, UNIT, 0, &a).unwrap();
        simple(&svc, Request::Fsync { fid: InodeId(fid) }).unwrap();
        // A piece in written block 1, folded in by the truncate before it cuts: the
        // fold's image goes to the log.
        write(&svc, fid, UNIT, B as u64 + 100, &pattern(2, 50)).unwrap();
        let cut = Request::Truncate {
            fid: InodeId(fid),
            unit: UNIT,
            local_size: 10,
        };
        simple(&svc, cut).unwrap();
        write(&svc, fid, UNIT, B as u64, &c).unwrap();
        drop(svc);
        store.crash(seed);
        let svc = mem_server_with(store.clone(), Options::default());
        let (crcs, bytes) = read_raw(&svc, fid, UNIT, 0, 2 * B as u32).unwrap();
        let block1 = &bytes[B..];
        if crc32c(block1) == crcs[1] {
            for (i, &x) in block1.iter().enumerate() {
                assert!(
                    x == c[i] || x == 0,
                    "seed {seed}: byte {} of the cut and rewritten block reads {x}",
                    B + i
                );
            }
        }
    }
}

/// A writer that never fsyncs does not grow an object's log without end: small appends
/// to a file (each rewrites its written last block, logging an intent) sync the object
/// and empty the log once it passes its bound (64 KiB in unit tests), and every byte
/// reads back.
#[test]
fn an_object_log_stays_bounded_without_fsync() {
    let store = Arc::new(MemStore::new());
    let svc = mem_server_with(store.clone(), Options::default());
    let fid = 17;
    let log_path = svc.log_path(0, InodeId(fid));
    let mut want = Vec::new();
    let mut largest = 0;
    for i in 0..6000u64 {
        let rec = pattern(i, 37);
        write(&svc, fid, UNIT, want.len() as u64, &rec).unwrap();
        want.extend_from_slice(&rec);
        largest = largest.max(store.contents(&log_path).map_or(0, |l| l.len()));
    }
    // 6000 intents would be 240,000 bytes.
    assert!(
        largest <= (64 << 10) + 4136,
        "the log grew to {largest} bytes"
    );
    assert_eq!(read(&svc, fid, UNIT, 0, want.len()), want);
}
