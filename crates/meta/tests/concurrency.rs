//! Group commit under concurrency, durability across reopen, and a "crash" mid-storm.

mod common;
use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use stripefs_meta::MetaService;
use stripefs_wire::*;

const ROOT: u64 = 1;

#[test]
fn group_commit_8_threads_2000_files_survive_reopen() {
    let mut fs = Fs::new();
    let r = Cred::root();
    let dirs: Vec<u64> = (0..8)
        .map(|t| fs.mkdir(&r, ROOT, &format!("t{t}"), 0o755).unwrap().ino.0)
        .collect();
    std::thread::scope(|s| {
        for &d in &dirs {
            let fs = &fs;
            s.spawn(move || {
                for i in 0..250 {
                    fs.create(&Cred::root(), d, &format!("f{i}"), 0o644)
                        .unwrap();
                }
            });
        }
    });
    fs.reopen();
    for &d in &dirs {
        assert_eq!(fs.list(d, 4096).len(), 250);
    }
    let rep = fs.check();
    assert_eq!((rep.files, rep.dirs), (2000, 9));
}

#[test]
fn shared_directory_concurrent_mixed_ops() {
    let fs = Fs::new();
    std::thread::scope(|s| {
        for t in 0..8 {
            let fs = &fs;
            s.spawn(move || {
                let r = Cred::root();
                for i in 0..100 {
                    let n = format!("x{t}-{i}");
                    fs.create(&r, ROOT, &n, 0o644).unwrap();
                    if i % 3 == 0 {
                        fs.rename(ROOT, &n, ROOT, &format!("{n}-moved"), false)
                            .unwrap();
                    } else if i % 3 == 1 {
                        fs.unlink(&r, ROOT, &n).unwrap();
                    }
                    // Refused operations in the same batches must not disturb others.
                    assert_eq!(
                        code(fs.unlink(&r, ROOT, "never-there")),
                        ErrorCode::NotFound
                    );
                }
            });
        }
    });
    let rep = fs.check();
    assert_eq!(rep.files, 8 * 67);
}

/// Creates from `threads` threads for `n` files each; returns the metadata server's
/// (commits, operations committed) for them.
fn create_storm(threads: usize, n: usize) -> (u64, u64) {
    let fs = Fs::new();
    let r = Cred::root();
    let dirs: Vec<u64> = (0..threads)
        .map(|t| fs.mkdir(&r, ROOT, &format!("t{t}"), 0o755).unwrap().ino.0)
        .collect();
    let (c0, o0) = fs.svc.commit_stats();
    std::thread::scope(|s| {
        for &d in &dirs {
            let fs = &fs;
            s.spawn(move || {
                for i in 0..n {
                    fs.create(&Cred::root(), d, &format!("file{i}"), 0o644)
                        .unwrap();
                }
            });
        }
    });
    let (c1, o1) = fs.svc.commit_stats();
    assert_eq!(fs.check().files, (threads * n) as u64);
    (c1 - c0, o1 - o0)
}

/// Concurrent durable creates share commits (group commit): 16 threads need far fewer
/// synchronous log writes than creates. (The rate is measured by `stripefs bench md`.)
#[test]
fn concurrent_creates_share_commits() {
    let (commits, ops) = create_storm(1, 200);
    assert_eq!(ops, 200);
    assert!(
        commits >= 1 && commits <= ops,
        "{commits} commits for {ops} creates"
    );
    let (commits, ops) = create_storm(16, 200);
    assert_eq!(ops, 16 * 200);
    let per_commit = ops as f64 / commits as f64;
    assert!(
        per_commit >= 1.5,
        "16 threads: {ops} creates in {commits} commits ({per_commit:.1} per commit)"
    );
}

#[test]
fn halt_mid_storm_keeps_every_acknowledged_create() {
    let seed = seed("halt_mid_storm");
    let fs = Fs::new();
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..6)
        .map(|t| {
            let (svc, acked, stop) = (fs.svc.clone(), acked.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) {
                    let name = format!("s{t}-{i}");
                    let req = Request::Create {
                        parent: InodeId(ROOT),
                        name: name.clone(),
                        mode: 0o644,
                        exclusive: true,
                        layout: LayoutHint::default(),
                    };
                    match call(&svc, &Cred::root(), req) {
                        Ok(_) => acked.lock().unwrap().push(name),
                        Err(e) => assert_eq!(e.code, ErrorCode::Busy, "{e}"),
                    }
                    i += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(100 + seed % 200));
    fs.svc.halt();
    std::thread::sleep(std::time::Duration::from_millis(20));
    stop.store(true, Ordering::SeqCst);
    for h in handles {
        h.join().unwrap();
    }
    let db = fs.db();
    let cluster = fs.cluster.clone();
    let Fs { svc, dir, .. } = fs;
    drop(svc);
    let report = stripefs_meta::check(&db).unwrap();
    let acked = acked.lock().unwrap().clone();
    assert!(!acked.is_empty());
    assert!(report.files >= acked.len() as u64);
    let svc = MetaService::open(&db, &cluster).unwrap();
    for name in &acked {
        call(
            &svc,
            &Cred::root(),
            Request::Lookup {
                parent: InodeId(ROOT),
                name: name.clone(),
            },
        )
        .unwrap_or_else(|e| panic!("acknowledged {name} lost: {e}"));
    }
    eprintln!("{} acknowledged creates all present", acked.len());
    drop(svc);
    drop(dir);
}
