//! The offline check and repair of a damaged metadata log (issue 12, item 7): the server
//! refuses to start naming the commands; the check lists the records beyond the damage
//! with their operations; the repair keeps the valid records beyond it when the
//! namespace checks clean with them, drops them (saying which) when it does not, moves
//! the damaged log aside, and the server then starts.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use stripefs_meta::logtool;
use stripefs_meta::{Answers, DataNet, MemDisk, MetaDisk, MetaService, Tuning, VirtualClock};
use stripefs_rpc::{ConnInfo, Defaults, Service};
use stripefs_wire::*;

const DB: &str = "/h-meta-log/meta.redb";
const WAL0: &str = "/h-meta-log/meta.redb.wal0";

struct NoNet;

impl DataNet for NoNet {
    fn call_many(&self, _server: u32, _cred: &Cred, _reqs: Vec<Request>) -> Answers {
        Err(WireError::new(ErrorCode::Unreachable, "no data servers"))
    }
}

fn open(disk: &MemDisk) -> Result<Arc<MetaService>, String> {
    let cluster = crate::common::unreachable_cluster(1, Defaults::default());
    let disk: Arc<dyn MetaDisk> = Arc::new(disk.clone());
    let clock = Arc::new(VirtualClock::starting_at(1_700_000_000_000_000_000));
    MetaService::open_on(
        disk,
        Arc::new(NoNet),
        clock,
        Path::new(DB),
        &cluster,
        Tuning::deterministic(),
    )
}

fn call(svc: &MetaService, req: Request) -> Result<Response, WireError> {
    let conn = ConnInfo::new(SocketAddr::from(([127, 0, 0, 1], 9)));
    let env = Envelope {
        cred: Cred::root(),
        req,
    };
    match stripefs_wire::Valid::check(env, 0) {
        Ok(req) => svc.handle(&conn, req, &[]).result,
        Err(e) => Err(e),
    }
}

fn create(svc: &MetaService, parent: u64, name: &str) -> u64 {
    match call(
        svc,
        Request::Create {
            parent: InodeId(parent),
            name: name.into(),
            mode: 0o644,
            exclusive: true,
            layout: LayoutHint::default(),
        },
    ) {
        Ok(Response::Attr(a)) => a.ino.0,
        r => panic!("create {name}: {r:?}"),
    }
}

fn mkdir(svc: &MetaService, name: &str) -> u64 {
    match call(
        svc,
        Request::Mkdir {
            parent: InodeId::ROOT,
            name: name.into(),
            mode: 0o755,
        },
    ) {
        Ok(Response::Attr(a)) => a.ino.0,
        r => panic!("mkdir {name}: {r:?}"),
    }
}

fn exists(svc: &MetaService, path: &str) -> bool {
    call(
        svc,
        Request::Resolve {
            path: path.into(),
            follow: false,
        },
    )
    .is_ok()
}

/// Flips a byte inside the payload of the `n`th record (from 1) of log file 0.
fn damage_record(disk: &MemDisk, n: usize) {
    let f = disk.open(Path::new(WAL0), false).unwrap().unwrap();
    let mut bytes = vec![0u8; f.size_bytes().unwrap() as usize];
    f.read_at(&mut bytes, 0).unwrap();
    let magic = 0x4c57_4653u32.to_le_bytes();
    let at = (0..bytes.len() - 4)
        .filter(|&i| bytes[i..i + 4] == magic)
        .nth(n - 1)
        .expect("record exists");
    f.write_direct(&[bytes[at + 24 + 3] ^ 0x40], (at + 24 + 3) as u64)
        .unwrap();
}

/// Each call below is its own log record (one thread: one operation per batch); the
/// process dies without a checkpoint, so every record is in log file 0.
fn crash(svc: Arc<MetaService>, disk: &MemDisk) {
    svc.halt();
    disk.kill();
    drop(svc);
}

#[test]
fn repair_keeps_valid_records_beyond_a_damaged_one() {
    let disk = MemDisk::new();
    let svc = open(&disk).unwrap();
    for i in 0..30 {
        create(&svc, 1, &format!("f{i:02}"));
    }
    crash(svc, &disk);
    damage_record(&disk, 11); // the create of f10

    let err = open(&disk).err().expect("a damaged log refuses to start");
    assert!(err.contains("stripefs meta-log check --db"), "{err}");
    assert!(err.contains("stripefs meta-log repair --db"), "{err}");

    let report = logtool::inspect(&disk, Path::new(DB)).unwrap();
    println!("{}", report.render());
    assert!(!report.is_clean());
    assert_eq!(report.replayable, Some((1, 10)));
    assert_eq!(report.missing, vec![(11, 11)]);
    assert_eq!(report.beyond.len(), 19);
    assert!(
        report.beyond[0].summary.contains("\"f11\""),
        "{:?}",
        report.beyond[0]
    );
    assert!(report.files[0].damaged_at_byte.is_some());

    // A dry run changes nothing.
    let plan = logtool::repair(&disk, Path::new(DB), false).unwrap();
    assert!(!plan.applied && plan.dropped.is_empty());
    assert_eq!(plan.kept.len(), 29);
    assert!(open(&disk).is_err());

    let plan = logtool::repair(&disk, Path::new(DB), true).unwrap();
    println!("{}", plan.render());
    assert!(plan.applied);
    assert_eq!(plan.moved_aside.len(), 2);
    let aside = &plan.moved_aside[0].1;
    assert!(
        disk.open(aside, false).unwrap().is_some(),
        "the damaged log is kept"
    );

    let svc = open(&disk).unwrap();
    for i in 0..30 {
        assert_eq!(exists(&svc, &format!("/f{i:02}")), i != 10, "f{i:02}");
    }
    svc.check().unwrap();
    // The log goes on after the repair, through a restart.
    create(&svc, 1, "after");
    crash(svc, &disk);
    let svc = open(&disk).unwrap();
    assert!(exists(&svc, "/after"));
    assert!(logtool::inspect(&disk, Path::new(DB)).unwrap().is_clean());
}

#[test]
fn repair_drops_records_that_need_the_damaged_one() {
    let disk = MemDisk::new();
    let svc = open(&disk).unwrap();
    for i in 0..5 {
        create(&svc, 1, &format!("a{i}"));
    }
    let d = mkdir(&svc, "d"); // record 6
    for i in 0..5 {
        create(&svc, d, &format!("x{i}"));
    }
    crash(svc, &disk);
    damage_record(&disk, 6);

    let plan = logtool::repair(&disk, Path::new(DB), true).unwrap();
    println!("{}", plan.render());
    assert!(plan.applied);
    assert_eq!(plan.kept, vec![1, 2, 3, 4, 5]);
    let dropped: Vec<u64> = plan.dropped.iter().map(|r| r.seq).collect();
    assert_eq!(dropped, vec![7, 8, 9, 10, 11]);
    assert!(plan.render().contains("DROPS 5 valid records"));

    let svc = open(&disk).unwrap();
    for i in 0..5 {
        assert!(exists(&svc, &format!("/a{i}")));
    }
    assert!(!exists(&svc, "/d"));
    svc.check().unwrap();
}

#[test]
fn a_clean_log_needs_no_repair() {
    let disk = MemDisk::new();
    let svc = open(&disk).unwrap();
    create(&svc, 1, "f");
    crash(svc, &disk);
    let report = logtool::inspect(&disk, Path::new(DB)).unwrap();
    assert!(report.is_clean(), "{}", report.render());
    assert_eq!(report.replayable, Some((1, 1)));
    let plan = logtool::repair(&disk, Path::new(DB), true).unwrap();
    assert!(!plan.applied && plan.moved_aside.is_empty());
    assert!(plan.render().contains("nothing to repair"));
}
