use super::*;

const UNIT: u32 = 8 << 10;

#[test]
fn enospc_maps_to_nospace_and_leaves_object_unchanged() {
    let (store, svc) = mem_server(2);
    let base = pattern(1, 40_000);
    write(&svc, 3, UNIT, 0, &base).unwrap();
    let paths: Vec<_> = (0..2).map(|t| svc.object_paths(t, InodeId(3))).collect();
    let before: Vec<_> = paths
        .iter()
        .map(|(d, c)| (store.contents(d), store.contents(c)))
        .collect();
    for (off, len) in [(100u64, 30_000usize), (0, 4096), (41_000, 10)] {
        store.fail_next_writes(1);
        let e = write(&svc, 3, UNIT, off, &pattern(2, len)).unwrap_err();
        assert_eq!(e.code, ErrorCode::NoSpace, "{e}");
        assert!(
            e.message.contains("data server 3")
                && e.message.contains("inode 3")
                && e.message.contains("/mem/t"),
            "{e}"
        );
        let after: Vec<_> = paths
            .iter()
            .map(|(d, c)| (store.contents(d), store.contents(c)))
            .collect();
        assert_eq!(before, after, "a failed write changed the objects");
        assert_eq!(read(&svc, 3, UNIT, 0, base.len()), base);
    }
    // The disk has room again: the next write succeeds.
    write(&svc, 3, UNIT, 5, b"ok").unwrap();
}

#[test]
fn bytes_used_on_memstore() {
    let (_store, svc) = mem_server(2);
    write(&svc, 4, UNIT, 0, &[1u8; 3 * UNIT as usize]).unwrap();
    let used = |svc: &DataService| match simple(svc, Request::DataStatus {}).unwrap() {
        Response::DataStatus { targets, .. } => {
            targets.iter().map(|t| t.bytes_used).collect::<Vec<_>>()
        }
        other => panic!("{other:?}"),
    };
    // Data plus 8 bytes of sidecar per block.
    assert_eq!(used(&svc), vec![2 * UNIT as u64 + 32, UNIT as u64 + 16]);
    simple(&svc, Request::Remove { fid: InodeId(4) }).unwrap();
    assert_eq!(used(&svc), vec![0, 0]);
}

/// After a crash that tears unsynced writes, every block reads back as its old or its
/// new content with a matching CRC, or fails the client's check: never wrong and valid.
#[test]
fn torn_unsynced_writes_are_detected_or_consistent() {
    let seed = seed("torn_unsynced_writes_are_detected_or_consistent");
    let (mut detected, mut valid) = (0, 0);
    for round in 0..20u64 {
        let (store, svc) = mem_server(2);
        let old = pattern(round, 20 * B);
        write(&svc, 1, UNIT, 0, &old).unwrap();
        simple(&svc, Request::Fsync { fid: InodeId(1) }).unwrap();
        let new = pattern(round + 1000, 30 * B);
        // Unaligned writes, so partial blocks are read-modify-written too.
        write(&svc, 1, UNIT, 1000, &new[1000..15 * B + 7]).unwrap();
        write(&svc, 1, UNIT, 15 * B as u64 + 7, &new[15 * B + 7..]).unwrap();
        store.crash(seed ^ round);
        let (crcs, data) = read_raw(&svc, 1, UNIT, 0, 30 * B as u32).unwrap();
        // The states the file passed through: before, between and after the two writes.
        let mut states = vec![old.clone(), old.clone(), old.clone()];
        for s in &mut states {
            s.resize(30 * B, 0);
        }
        states[1][1000..15 * B + 7].copy_from_slice(&new[1000..15 * B + 7]);
        states[2][1000..].copy_from_slice(&new[1000..]);
        for (i, (block, crc)) in data.chunks(B).zip(&crcs).enumerate() {
            if crc32c(block) != *crc {
                detected += 1; // The client will refuse this block.
                continue;
            }
            valid += 1;
            let r = i * B..(i + 1) * B;
            assert!(
                states.iter().any(|s| s[r.clone()] == *block),
                "round {round} block {i}: valid CRC over content the file never held (seed {seed})"
            );
        }
    }
    eprintln!("blocks detected as torn: {detected}, valid: {valid}");
    // With 20 crashes some torn block is certain in practice; seeds replay exactly.
    assert!(detected > 0 && valid > 0, "seed {seed}");
}

/// A new object's directory entry is made durable by the object's next fsync even when
/// its cached handle was evicted in between (more objects opened than the cache holds),
/// and the fan-out directories themselves survive a power cut: after the cut and a
/// restart, the fsynced object reads back whole.
#[test]
fn fsync_after_eviction_makes_the_new_object_durable() {
    let (store, svc) = mem_server(1);
    let data = pattern(7, 3 * B);
    write(&svc, 1, UNIT, 0, &data).unwrap();
    for fid in 2..(crate::cache::MAX_OPEN_OBJECTS as u64 + 10) {
        write(&svc, fid, UNIT, 0, b"x").unwrap();
    }
    simple(&svc, Request::Fsync { fid: InodeId(1) }).unwrap();
    // Object 2 was never fsynced: a power cut may forget it, never object 1.
    store.crash(seed("fsync_after_eviction_makes_the_new_object_durable"));
    drop(svc);
    let paths = vec![PathBuf::from("/mem/t0")];
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let svc = DataService::with_store(ServerId(3), &paths, None, store.clone(), clock).unwrap();
    assert!(
        read(&svc, 1, UNIT, 0, data.len()) == data,
        "an fsynced object was lost in a power cut"
    );
}

/// Found by the simulator (`stripefs sim`, seed 217): a target directory whose parents the
/// server made itself lost them all in a power cut, objects and fsynced bytes included,
/// since only the target's own parent was synced.
#[test]
fn target_directories_made_at_start_survive_a_power_cut() {
    let store = Arc::new(MemStore::new());
    let paths = vec![PathBuf::from("/mem/new/deep/t0")];
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let svc =
        DataService::with_store(ServerId(1), &paths, None, store.clone(), clock.clone()).unwrap();
    let data = pattern(11, 2 * B);
    write(&svc, 1, UNIT, 0, &data).unwrap();
    simple(&svc, Request::Fsync { fid: InodeId(1) }).unwrap();
    store.crash(seed("target_directories_made_at_start_survive_a_power_cut"));
    drop(svc);
    let svc = DataService::with_store(ServerId(1), &paths, None, store.clone(), clock).unwrap();
    assert!(
        read(&svc, 1, UNIT, 0, data.len()) == data,
        "an fsynced object under directories the server made was lost in a power cut"
    );
}
