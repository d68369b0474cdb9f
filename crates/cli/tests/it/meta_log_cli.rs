//! `stripefs meta-log check|repair` on a real database whose log has a damaged record in
//! the middle (issue 12, item 7): the server refuses to start naming the commands, the
//! check exits 1 listing the records that would be lost, a repair without --yes changes
//! nothing, and with --yes the server starts with every valid record.

use std::path::Path;
use std::process::Command;
use stripefs_meta::{FixedClock, MetaService};
use stripefs_rpc::{ClusterConfig, ConnInfo, DataServerEntry, Service};
use stripefs_wire::*;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_stripefs")
}

fn cluster() -> ClusterConfig {
    ClusterConfig {
        timeout_ms: 1000,
        ..ClusterConfig::new(
            "127.0.0.1:1".into(),
            vec![DataServerEntry::new("127.0.0.1:1".into())],
        )
    }
}

fn open(db: &Path) -> Result<std::sync::Arc<MetaService>, String> {
    MetaService::open_with_clock(db, &cluster(), std::sync::Arc::new(FixedClock::new(1)))
}

fn call(svc: &MetaService, req: Request) -> Result<Response, WireError> {
    let conn = ConnInfo::new(std::net::SocketAddr::from(([127, 0, 0, 1], 9)));
    let env = Envelope {
        cred: Cred::root(),
        req,
    };
    match stripefs_wire::Valid::check(env, 0) {
        Ok(req) => svc.handle(&conn, req, &[]).result,
        Err(e) => Err(e),
    }
}

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(bin()).args(args).output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn meta_log_check_and_repair_a_damaged_middle_record() {
    let dir = tempfile::Builder::new()
        .prefix("h-meta-log-cli")
        .tempdir()
        .unwrap();
    let db = dir.path().join("meta.redb");
    let svc = open(&db).unwrap();
    for i in 0..12 {
        let r = call(
            &svc,
            Request::Create {
                parent: InodeId::ROOT,
                name: format!("g{i:02}"),
                mode: 0o644,
                exclusive: true,
                layout: LayoutHint::default(),
            },
        );
        assert!(r.is_ok(), "{r:?}");
    }
    // A crash: no final checkpoint, everything is in log file 0.
    svc.halt();
    drop(svc);
    let wal0 = dir.path().join("meta.redb.wal0");
    let mut bytes = std::fs::read(&wal0).unwrap();
    let magic = 0x4c57_4653u32.to_le_bytes();
    let at = (0..bytes.len() - 4)
        .filter(|&i| bytes[i..i + 4] == magic)
        .nth(4)
        .unwrap(); // record 5: the create of g04
    bytes[at + 30] ^= 0x40;
    std::fs::write(&wal0, &bytes).unwrap();

    let db_s = db.to_str().unwrap();
    let err = open(&db).err().expect("a damaged log refuses to start");
    assert!(
        err.contains(&format!("stripefs meta-log check --db {db_s}")),
        "{err}"
    );

    let (code, out) = run(&["meta-log", "check", "--db", db_s]);
    println!("{out}");
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("DAMAGED at byte"), "{out}");
    assert!(out.contains("missing: records 5..=5"), "{out}");
    assert!(out.contains("7 valid records beyond the damage"), "{out}");
    assert!(out.contains("\"g05\""), "{out}");
    let (code, json) = run(&["meta-log", "check", "--db", db_s, "--json"]);
    assert_eq!(code, 1);
    assert!(json.contains("\"beyond\""), "{json}");

    let (code, out) = run(&["meta-log", "repair", "--db", db_s]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("dry run"), "{out}");
    assert!(open(&db).is_err(), "a dry run changed nothing");

    let (code, out) = run(&["meta-log", "repair", "--db", db_s, "--yes"]);
    println!("{out}");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("repaired"), "{out}");
    let aside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".damaged-"))
        .collect();
    assert_eq!(aside.len(), 2, "both old log files are kept aside");

    let svc = open(&db).unwrap();
    for i in 0..12 {
        let r = call(
            &svc,
            Request::Lookup {
                parent: InodeId::ROOT,
                name: format!("g{i:02}"),
            },
        );
        assert_eq!(r.is_ok(), i != 4, "g{i:02}: {r:?}");
    }
    svc.check().unwrap();
    drop(svc);
    let (code, out) = run(&["meta-log", "check", "--db", db_s]);
    assert_eq!(code, 0, "{out}");
}
