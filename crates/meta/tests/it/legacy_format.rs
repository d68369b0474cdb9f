//! Databases and metadata logs written by builds that encoded with bincode 1 (record
//! formats 1-3) still open, read and change. The fixture in `fixtures/bincode-v1` was
//! made by the last bincode build: `cluster up`, `mkdir /a`, `put /a/f1` (17 bytes),
//! `setstripe /a --size 64K --count 1`, a checkpoint (so redb holds bincode records),
//! then `mkdir /b`, `put /b/f2`, `mv /a/f1 /b/g` and `kill -9` of the metadata server
//! before the next checkpoint (so those changes are only in the log, as bincode
//! records). The log files are cut to their first 4 KiB block, which holds every
//! record.

use crate::common;

use common::*;
use std::sync::Arc;
use stripefs_meta::{MetaService, Tuning};
use stripefs_wire::*;

fn open_fixture() -> (tempfile::TempDir, Fs) {
    let dir = tempfile::tempdir().unwrap();
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bincode-v1");
    for f in ["meta.redb", "meta.redb.wal0", "meta.redb.wal1"] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    let clock = Arc::new(stripefs_meta::FixedClock::new(T0));
    let cluster = cluster(1);
    let svc = MetaService::open_tuned(
        &dir.path().join("meta.redb"),
        &cluster,
        clock.clone(),
        Tuning::default(),
    )
    .expect("a bincode-era database opens");
    let fs = Fs {
        svc,
        clock,
        dir: tempfile::tempdir().unwrap(),
        cluster,
        tuning: Tuning::default(),
        sessions: Default::default(),
    };
    (dir, fs)
}

fn check_old_namespace(fs: &Fs) {
    let root = Cred::root();
    let a = fs.resolve(&root, "/a", true).unwrap();
    assert_eq!(a.ftype, FileType::Dir);
    assert_eq!(a.dir_layout.stripe_size_bytes, Some(64 << 10));
    assert_eq!(a.dir_layout.stripe_count, Some(1));
    assert_eq!(fs.list(a.ino.0, 100), Vec::<String>::new(), "f1 moved away");
    let b = fs.resolve(&root, "/b", true).unwrap();
    assert_eq!(
        fs.list(b.ino.0, 100),
        vec!["f2".to_string(), "g".to_string()]
    );
    for path in ["/b/f2", "/b/g"] {
        let f = fs.resolve(&root, path, true).unwrap();
        assert_eq!((f.ftype, f.size), (FileType::File, 17), "{path}");
        assert_eq!(f.layout.as_ref().unwrap().servers, vec![ServerId(0)]);
    }
}

#[test]
fn bincode_era_database_and_log_still_read() {
    let (_dir, fs) = open_fixture();
    check_old_namespace(&fs);
    // The check fails on any inconsistency; the counts are the fixture's.
    let report = fs.svc.check().unwrap();
    assert_eq!((report.files, report.dirs), (2, 3), "{report:?}");
}

/// Changes written now (postcard) beside the old records, through a crash (log replay)
/// and a clean restart (checkpointed tables): old and new records read together.
#[test]
fn bincode_era_database_takes_new_changes() {
    let (dir, mut fs) = open_fixture();
    let root = Cred::root();
    let b = fs.resolve(&root, "/b", true).unwrap();
    fs.mkdir(&root, b.ino.0, "new", 0o700).unwrap();
    fs.unlink(&root, b.ino.0, "f2").unwrap();
    fs.svc.halt();
    drop(fs.svc);
    let svc = MetaService::open_tuned(
        &dir.path().join("meta.redb"),
        &fs.cluster,
        fs.clock.clone(),
        Tuning::default(),
    )
    .unwrap();
    fs.svc = svc;
    assert_eq!(
        fs.list(b.ino.0, 100),
        vec!["g".to_string(), "new".to_string()]
    );
    let report = fs.svc.check().unwrap();
    // f2 (from before the restart) is kept as an orphan for the grace period, in case a
    // client of the server's previous life still has it open.
    assert_eq!(
        (report.files, report.dirs, report.orphans),
        (2, 4, 1),
        "{report:?}"
    );
}
