use super::*;
use stripefs_wire::padded_block_crc;

const UNIT: u32 = 16 << 10;

#[test]
fn unaligned_writes_round_trip_over_two_targets_with_holes() {
    let (dir, svc) = fs_server(2, None);
    let a = pattern(1, 50_000);
    let b = pattern(2, 7_777);
    write(&svc, 7, UNIT, 1_234, &a).unwrap();
    write(&svc, 7, UNIT, 200_001, &b).unwrap();
    let mut expect = vec![0u8; 210_000];
    expect[1_234..1_234 + a.len()].copy_from_slice(&a);
    expect[200_001..200_001 + b.len()].copy_from_slice(&b);
    assert_eq!(read(&svc, 7, UNIT, 0, expect.len()), expect);
    // Reading past the end gives zeros.
    assert_eq!(read(&svc, 7, UNIT, 300_000, 10_000), vec![0u8; 10_000]);
    // Both targets hold an object and its sidecar, at the documented paths.
    for t in 0..2 {
        let (data, crc) = svc.object_paths(t, InodeId(7));
        assert!(
            data.starts_with(dir.path().join(format!("t{t}"))),
            "{data:?}"
        );
        assert!(data.exists() && crc.exists(), "{data:?}");
        assert!(crc
            .to_string_lossy()
            .ends_with("/objects/07/0000000000000007.crc"));
    }
}

#[test]
fn hole_blocks_read_as_zero_with_zero_block_crc() {
    let (_d, svc) = fs_server(2, None);
    write(&svc, 1, UNIT, 3 * B as u64, &[9u8; 10]).unwrap();
    let (crcs, data) = read_raw(&svc, 1, UNIT, 0, 8 * B as u32).unwrap();
    let zero = padded_block_crc(&[]);
    assert_eq!(crcs[0], zero);
    assert_eq!(crcs[3], padded_block_crc(&[9u8; 10]));
    assert_eq!(crcs[4], zero);
    assert!(data[..3 * B].iter().all(|&x| x == 0));
    // A file never written at all reads as zeros too.
    let (crcs, data) = read_raw(&svc, 99, UNIT, 0, 2 * B as u32).unwrap();
    assert_eq!(crcs, vec![zero, zero]);
    assert!(data.iter().all(|&x| x == 0));
}

#[test]
fn partial_block_read_modify_write() {
    let (_d, svc) = fs_server(1, None);
    let base = pattern(5, 3 * B);
    write(&svc, 2, UNIT, 0, &base).unwrap();
    let mut expect = base.clone();
    // Inside one block, across a boundary, and a single byte.
    for (off, len, salt) in [
        (100usize, 50usize, 6u64),
        (B - 10, 20, 7),
        (2 * B + 4095, 1, 8),
    ] {
        let p = pattern(salt, len);
        write(&svc, 2, UNIT, off as u64, &p).unwrap();
        expect[off..off + len].copy_from_slice(&p);
        assert_eq!(read(&svc, 2, UNIT, 0, 3 * B), expect);
    }
}

#[test]
fn returned_crcs_match_every_block() {
    let (_d, svc) = fs_server(2, None);
    let data = pattern(3, 100_000);
    write(&svc, 4, UNIT, 777, &data).unwrap();
    let (crcs, got) = read_raw(&svc, 4, UNIT, 0, 104 * B as u32 / 4).unwrap();
    for (block, crc) in got.chunks(B).zip(&crcs) {
        assert_eq!(crc32c(block), *crc);
    }
}

#[test]
fn flipped_byte_on_disk_is_detected_by_client_and_never_blessed_by_a_partial_write() {
    let (_d, svc) = fs_server(2, None);
    write(&svc, 5, UNIT, 0, &pattern(4, 4 * UNIT as usize)).unwrap();
    // Local block 1 of unit 0 lives on target 0 at object offset 4096.
    let (path, _) = svc.object_paths(0, InodeId(5));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[B + 17] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let (crcs, data) = read_raw(&svc, 5, UNIT, 0, 2 * B as u32).unwrap();
    assert_eq!(crc32c(&data[..B]), crcs[0]);
    assert_ne!(
        crc32c(&data[B..]),
        crcs[1],
        "the client must see the corruption"
    );
    // A partial write over it goes to the object's log as a piece (the block is not
    // read); merging it is where the damage shows: a read of the block, and the fsync
    // that would fold it in, fail, and nothing blesses the flipped byte.
    write(&svc, 5, UNIT, B as u64 + 100, b"hello").unwrap();
    let e = read_raw(&svc, 5, UNIT, 0, 2 * B as u32).unwrap_err();
    assert_eq!(e.code, ErrorCode::Checksum);
    let f = simple(&svc, Request::Fsync { fid: InodeId(5) }).unwrap_err();
    assert_eq!(f.code, ErrorCode::Checksum, "{f}");
    for part in [
        "data server 3",
        "inode 5",
        "object offset 4096",
        &path
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .display()
            .to_string(),
    ] {
        assert!(e.message.contains(part), "{part:?} missing in {e}");
    }
    // A whole-block write replaces the bad block and its piece, and heals it.
    write(&svc, 5, UNIT, B as u64, &[1u8; B]).unwrap();
    assert_eq!(read(&svc, 5, UNIT, B as u64, B), vec![1u8; B]);
    simple(&svc, Request::Fsync { fid: InodeId(5) }).unwrap();
    assert_eq!(read(&svc, 5, UNIT, B as u64, B), vec![1u8; B]);
}

#[test]
fn wrong_piece_crc_is_refused_and_writes_nothing() {
    let (_d, svc) = fs_server(2, None);
    let data = pattern(9, 20_000);
    let mut crcs = stripefs_wire::piece_crcs(10, &data);
    crcs[2] ^= 1;
    let req = Request::Write {
        fid: InodeId(6),
        unit: UNIT,
        offset: 10,
        crcs,
    };
    let e = call(&svc, req, data).result.unwrap_err();
    assert_eq!(e.code, ErrorCode::Checksum);
    assert!(e.message.contains("in transit from 127.0.0.1:40000"), "{e}");
    for t in 0..2 {
        assert!(!svc.object_paths(t, InodeId(6)).0.exists());
    }
    assert_eq!(read(&svc, 6, UNIT, 0, 30_000), vec![0u8; 30_000]);
}

#[test]
fn truncate_shrink_and_extend_keep_last_block_crc() {
    let (_d, svc) = fs_server(2, None);
    let data = pattern(10, 5 * UNIT as usize);
    write(&svc, 8, UNIT, 0, &data).unwrap();
    let trunc = |size: u64| {
        simple(
            &svc,
            Request::Truncate {
                fid: InodeId(8),
                unit: UNIT,
                local_size: size,
            },
        )
        .unwrap()
    };
    // Shrink into the middle of a block of unit 3 (target 1).
    let cut = 3 * UNIT as u64 + 5_000;
    trunc(cut);
    let len = 6 * UNIT as usize;
    let mut expect = vec![0u8; len];
    expect[..cut as usize].copy_from_slice(&data[..cut as usize]);
    assert_eq!(read(&svc, 8, UNIT, 0, len), expect);
    let (crcs, _) = read_raw(&svc, 8, UNIT, cut / B as u64 * B as u64, B as u32).unwrap();
    let tail = &data[(cut / B as u64 * B as u64) as usize..cut as usize];
    assert_eq!(crcs[0], padded_block_crc(tail));
    // Object sizes follow the striping.
    let (obj1, crc1) = svc.object_paths(1, InodeId(8));
    assert_eq!(std::fs::metadata(&obj1).unwrap().len(), UNIT as u64 + 5_000);
    assert_eq!(
        std::fs::metadata(&crc1).unwrap().len(),
        (UNIT as u64 + 5_000).div_ceil(B as u64) * 8
    );
    // Extend: a hole that reads as zeros, then write into it.
    trunc(20 * UNIT as u64);
    assert_eq!(read(&svc, 8, UNIT, 0, len), expect);
    write(&svc, 8, UNIT, cut + 10, b"abc").unwrap();
    expect[cut as usize + 10..cut as usize + 13].copy_from_slice(b"abc");
    assert_eq!(read(&svc, 8, UNIT, 0, len), expect);
    // Shrink to zero, and truncating a missing file is fine.
    trunc(0);
    assert_eq!(read(&svc, 8, UNIT, 0, len), vec![0u8; len]);
    simple(
        &svc,
        Request::Truncate {
            fid: InodeId(1000),
            unit: UNIT,
            local_size: 5,
        },
    )
    .unwrap();
}

fn used(svc: &DataService) -> Vec<u64> {
    match simple(svc, Request::DataStatus {}).unwrap() {
        Response::DataStatus {
            targets, server_id, ..
        } => {
            assert_eq!(server_id, ServerId(3));
            targets.iter().map(|t| t.bytes_used).collect()
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn remove_and_bytes_used() {
    let (_d, svc) = fs_server(2, None);
    let before = used(&svc);
    write(&svc, 9, UNIT, 0, &pattern(11, 1 << 20)).unwrap();
    let after = used(&svc);
    for t in 0..2 {
        assert!(
            after[t] >= before[t] + (512 << 10),
            "target {t}: {before:?} -> {after:?}"
        );
    }
    simple(&svc, Request::Fsync { fid: InodeId(9) }).unwrap();
    simple(&svc, Request::Remove { fid: InodeId(9) }).unwrap();
    assert_eq!(used(&svc), before);
    assert_eq!(read(&svc, 9, UNIT, 0, 3 * B), vec![0u8; 3 * B]);
    // Removing again, and fsync of a missing file, succeed.
    simple(&svc, Request::Remove { fid: InodeId(9) }).unwrap();
    simple(&svc, Request::Fsync { fid: InodeId(9) }).unwrap();
    // Writing after a remove starts a fresh object, not the unlinked one.
    write(&svc, 9, UNIT, 0, b"new").unwrap();
    assert!(svc.object_paths(0, InodeId(9)).0.exists());
    assert_eq!(read(&svc, 9, UNIT, 0, 5), b"new\0\0");
}

/// Space answers each target's file system (as DataStatus does) without walking the
/// objects; a write's bytes show up as less free space on the device, not counted here.
#[test]
fn space_gives_each_target_its_device() {
    let (_d, svc) = fs_server(2, None);
    write(&svc, 4, UNIT, 0, &pattern(3, 1 << 20)).unwrap();
    let space = match simple(&svc, Request::Space {}).unwrap() {
        Response::Space { targets } => targets,
        other => panic!("{other:?}"),
    };
    let status = match simple(&svc, Request::DataStatus {}).unwrap() {
        Response::DataStatus { targets, .. } => targets,
        other => panic!("{other:?}"),
    };
    assert_eq!(space.len(), 2);
    assert_eq!(space.len(), status.len());
    for (s, t) in space.iter().zip(&status) {
        assert_eq!(s.bytes_total, t.bytes_total);
        assert!(s.bytes_total > 0 && s.bytes_free <= s.bytes_total, "{s:?}");
    }
}

#[test]
fn status_counts_requests_errors_and_bytes() {
    let (_d, svc) = fs_server(1, Some(1 << 30));
    write(&svc, 1, UNIT, 0, &[1u8; 1000]).unwrap();
    read(&svc, 1, UNIT, 0, 1000);
    let _ = simple(&svc, Request::GetAttr { ino: InodeId(1) });
    match simple(&svc, Request::DataStatus {}).unwrap() {
        Response::DataStatus {
            targets, counters, ..
        } => {
            assert_eq!(counters.requests, 4);
            assert_eq!(counters.errors, 1);
            assert_eq!(counters.bytes_written, 1000);
            assert_eq!(counters.bytes_read, B as u64);
            assert_eq!(targets[0].throttle_bytes_s, Some(1 << 30));
            assert!(targets[0].bytes_total >= targets[0].bytes_free && targets[0].bytes_total > 0);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn invalid_requests_fail_cleanly() {
    let (_d, svc) = fs_server(1, None);
    let e = simple(
        &svc,
        Request::Read {
            fid: InodeId(1),
            unit: UNIT,
            offset: 1,
            len: 4096,
        },
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    let req = Request::Write {
        fid: InodeId(1),
        unit: 1000,
        offset: 0,
        crcs: vec![],
    };
    assert_eq!(
        call(&svc, req, vec![]).result.unwrap_err().code,
        ErrorCode::InvalidArgument
    );
    let req = Request::Write {
        fid: InodeId(1),
        unit: UNIT,
        offset: 0,
        crcs: vec![],
    };
    assert_eq!(
        call(&svc, req, vec![1]).result.unwrap_err().code,
        ErrorCode::InvalidArgument
    );
    // An empty write is a no-op.
    write(&svc, 1, UNIT, 5, &[]).unwrap();
    assert!(!svc.object_paths(0, InodeId(1)).0.exists());
}

#[test]
fn open_handle_cache_is_bounded() {
    let (_store, svc) = mem_server(1);
    let n = crate::MAX_OPEN_OBJECTS as u64 + 50;
    for fid in 1..=n {
        write(&svc, fid, UNIT, 0, &fid.to_le_bytes()).unwrap();
        assert!(svc.open_objects() <= crate::MAX_OPEN_OBJECTS);
    }
    // Evicted objects reopen transparently.
    for fid in [1, n / 2, n] {
        assert_eq!(read(&svc, fid, UNIT, 0, 8), fid.to_le_bytes());
    }
}
