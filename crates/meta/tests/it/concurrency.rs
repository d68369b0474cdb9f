//! Group commit under concurrency, durability across reopen, and a "crash" mid-storm.

use crate::common;
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

/// An exclusive create of a regular file `name` in the root directory.
fn create_in_root(name: &str) -> Request {
    Request::Create {
        parent: InodeId(ROOT),
        name: name.into(),
        mode: 0o644,
        exclusive: true,
        layout: LayoutHint::default(),
    }
}

/// Lets the storm run a while (chosen by `seed`), halts the server as a crash would,
/// stops the threads and closes it: its database path, cluster and directory.
fn halt_storm(
    fs: Fs,
    seed: u64,
    stop: &AtomicBool,
    handles: Vec<std::thread::JoinHandle<()>>,
) -> (
    std::path::PathBuf,
    stripefs_rpc::ClusterConfig,
    tempfile::TempDir,
) {
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
    (db, cluster, dir)
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
                    let req = create_in_root(&name);
                    match call(&svc, &Cred::root(), req) {
                        Ok(_) => acked.lock().unwrap().push(name),
                        Err(e) => assert_eq!(e.code, ErrorCode::Busy, "{e}"),
                    }
                    i += 1;
                }
            })
        })
        .collect();
    let (db, cluster, dir) = halt_storm(fs, seed, &stop, handles);
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

/// A small file's create, write and close cost one log write: the close's bytes
/// (WriteInlineUnsynced, answered before they are durable) go in the record of the next
/// create, and a SyncMeta writes the last ones.
#[test]
fn small_files_cost_one_log_write_each() {
    let mut c = cluster(1);
    c.defaults = stripefs_rpc::Defaults::default();
    let fs = Fs::with_cluster(c);
    let data = vec![7u8; 3901];
    let (c0, o0) = fs.svc.commit_stats();
    for i in 0..200 {
        let ino = match fs.root(Request::Create {
            parent: InodeId::ROOT,
            name: format!("small{i}"),
            mode: 0o644,
            exclusive: true,
            layout: LayoutHint::default(),
        }) {
            Ok(Response::Attr(a)) => {
                assert!(a.inline.is_some(), "a new file is inline");
                a.ino
            }
            other => panic!("create: {other:?}"),
        };
        let r = fs.root(inline_write(ino, &data));
        assert!(
            matches!(r, Ok(Response::Attr(ref a)) if a.size == 3901),
            "{r:?}"
        );
    }
    assert!(matches!(
        fs.root(Request::SyncMeta { session: 0 }),
        Ok(Response::Done)
    ));
    let (c1, o1) = fs.svc.commit_stats();
    let (commits, ops) = (c1 - c0, o1 - o0);
    // The sync thread's own Syncs (one per close it finds unwritten) count too.
    assert!(
        (401..=450).contains(&ops),
        "{ops} operations committed, 401 asked"
    );
    // 201 when no close waits long enough for the sync thread to write it alone.
    assert!(
        (200..=240).contains(&commits),
        "{commits} log writes for 200 small files (two each would be 400)"
    );
}

/// Small files from 6 threads (create, then the close's bytes with WriteInlineUnsynced,
/// a SyncMeta every 8 files), halted mid-storm: every write is visible as soon as it is
/// answered; after the restart every acknowledged create is there, every file whose
/// bytes a SyncMeta covered has them, and no file has bytes other than its own or none.
#[test]
fn small_file_storm_halted_keeps_synced_bytes_and_never_others() {
    small_file_storm("small_file_storm", stripefs_meta::Tuning::default());
}

/// The same storm with a checkpoint after nearly every batch (`freeze_age` zero), so
/// that freezes meet closes joining the carry beside commits.
#[test]
fn small_file_storm_with_constant_checkpoints_keeps_synced_bytes() {
    let tuning = stripefs_meta::Tuning {
        freeze_age: std::time::Duration::ZERO,
        ..Default::default()
    };
    small_file_storm("small_file_storm_ckpt", tuning);
}

fn small_file_storm(name: &str, tuning: stripefs_meta::Tuning) {
    let seed = seed(name);
    let mut c = cluster(1);
    c.defaults = stripefs_rpc::Defaults::default();
    let fs = Fs::tuned(c, tuning);
    let content = |name: &str| -> Vec<u8> { name.repeat(3901 / name.len() + 1).into_bytes() };
    // (name, ino, covered by an answered SyncMeta)
    type Acked = Vec<(String, u64, bool)>;
    let acked = Arc::new(Mutex::new(Acked::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..6)
        .map(|t| {
            let (svc, acked, stop) = (fs.svc.clone(), acked.clone(), stop.clone());
            std::thread::spawn(move || {
                let r = Cred::root();
                let mut mine: Vec<usize> = Vec::new();
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) {
                    let name = format!("s{t}-{i}");
                    i += 1;
                    let req = create_in_root(&name);
                    let ino = match call(&svc, &r, req) {
                        Ok(Response::Attr(a)) => a.ino,
                        Err(e) if e.code == ErrorCode::Busy => continue,
                        other => panic!("create {name}: {other:?}"),
                    };
                    let at = {
                        let mut a = acked.lock().unwrap();
                        a.push((name.clone(), ino.0, false));
                        a.len() - 1
                    };
                    let data = content(&name);
                    let data = &data[..3901];
                    match call(&svc, &r, inline_write(ino, data)) {
                        Ok(_) => {}
                        Err(e) if e.code == ErrorCode::Busy => continue,
                        Err(e) => panic!("write {name}: {e}"),
                    }
                    // Visible once answered.
                    match call(&svc, &r, Request::ReadInline { ino }) {
                        Ok(Response::Attr(a)) => {
                            let d = a.inline.and_then(|i| i.data).expect("inline bytes");
                            assert_eq!(d, data, "{name} read back at once");
                        }
                        // Refused once halted, as every request is.
                        Err(e) if e.code == ErrorCode::Busy => continue,
                        other => panic!("read {name}: {other:?}"),
                    }
                    mine.push(at);
                    if mine.len() == 8 {
                        if let Ok(Response::Done) = call(&svc, &r, Request::SyncMeta { session: 0 })
                        {
                            let mut a = acked.lock().unwrap();
                            for k in mine.drain(..) {
                                a[k].2 = true;
                            }
                        }
                        mine.clear();
                    }
                }
            })
        })
        .collect();
    let (db, cluster, dir) = halt_storm(fs, seed, &stop, handles);
    let svc = MetaService::open(&db, &cluster).unwrap();
    let acked = acked.lock().unwrap().clone();
    let synced = acked.iter().filter(|a| a.2).count();
    assert!(synced > 0, "no SyncMeta answered before the halt");
    for (name, ino, synced) in &acked {
        let got = match call(
            &svc,
            &Cred::root(),
            Request::ReadInline { ino: InodeId(*ino) },
        ) {
            Ok(Response::Attr(a)) => {
                let i = a.inline.expect("inline");
                let d = i.data.expect("bytes");
                assert_eq!(
                    crc32c(&d),
                    i.crc,
                    "{name}: stored bytes match their checksum"
                );
                d
            }
            other => panic!("acknowledged {name} lost: {other:?}"),
        };
        let want = &content(name)[..3901];
        if *synced {
            assert_eq!(got, want, "{name}: bytes covered by a SyncMeta");
        } else {
            assert!(got.is_empty() || got == want, "{name}: bytes nobody wrote");
        }
    }
    eprintln!(
        "{} small files acknowledged, {synced} synced, all as written",
        acked.len()
    );
    drop(svc);
    drop(dir);
}

/// A server whose log writes each take `delay` (the `log_write_delay` fault point), with
/// one inline file `f` already written; returns it and the file's inode.
fn slow_log_with_file(delay: std::time::Duration) -> (Fs, InodeId) {
    let mut c = cluster(1);
    c.defaults = stripefs_rpc::Defaults::default();
    let tuning = stripefs_meta::Tuning {
        log_write_delay: delay,
        ..Default::default()
    };
    let fs = Fs::tuned(c, tuning);
    let ino = match fs.root(create_in_root("f")) {
        Ok(Response::Attr(a)) => a.ino,
        other => panic!("create f: {other:?}"),
    };
    (fs, ino)
}

fn inline_write(ino: InodeId, data: &[u8]) -> Request {
    Request::WriteInlineUnsynced {
        ino,
        pieces: vec![InlinePiece {
            offset: 0,
            crc: crc32c(data),
            data: data.to_vec(),
        }],
        mtime_ns: 0,
    }
}

fn inline_bytes(fs: &Fs, ino: InodeId) -> (u32, Vec<u8>) {
    match fs.root(Request::ReadInline { ino }) {
        Ok(Response::Attr(a)) => (a.mode, a.inline.and_then(|i| i.data).expect("bytes")),
        other => panic!("read inline: {other:?}"),
    }
}

/// A close's bytes (WriteInlineUnsynced) are applied and answered beside a commit whose
/// log write is in flight, not after it: with every log write taking 1.5 s, the write is
/// answered while another client's create is still being written, is visible at once,
/// and after a SyncMeta survives a crash.
#[test]
fn a_close_is_answered_beside_a_log_write_in_flight() {
    let delay = std::time::Duration::from_millis(1500);
    let (mut fs, ino) = slow_log_with_file(delay);
    let svc = fs.svc.clone();
    let creating = std::thread::spawn(move || {
        let t = std::time::Instant::now();
        let r = call(&svc, &Cred::root(), create_in_root("other"));
        assert!(matches!(r, Ok(Response::Attr(_))), "{r:?}");
        t.elapsed()
    });
    // The create's batch is applied within microseconds and then written for 1.5 s.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let data = vec![5u8; 3000];
    let t = std::time::Instant::now();
    let r = fs.root(inline_write(ino, &data));
    let took = t.elapsed();
    assert!(
        matches!(r, Ok(Response::Attr(ref a)) if a.size == 3000),
        "{r:?}"
    );
    assert!(
        took < std::time::Duration::from_millis(700),
        "the close's bytes waited {took:?} for another client's log write"
    );
    assert_eq!(inline_bytes(&fs, ino).1, data, "visible once answered");
    let created = creating.join().unwrap();
    assert!(created >= delay, "the create was answered after its write");
    assert!(matches!(
        fs.root(Request::SyncMeta { session: 0 }),
        Ok(Response::Done)
    ));
    fs.crash();
    assert_eq!(inline_bytes(&fs, ino).1, data, "durable after SyncMeta");
    assert!(fs.lookup(ROOT, "other").is_ok(), "the create survived");
}

/// An early job on an inode that the batch being written changes waits for it, and
/// takes its change along: a chmod in flight (its log write taking 1 s) and the close's
/// bytes of the same file both hold afterwards, visible and after a crash. Applied
/// beside the chmod, the bytes would be written over the inode as it was before it,
/// and the chmod's publication would then undo them (or they the chmod).
#[test]
fn a_close_on_an_inode_being_written_waits_and_keeps_both_changes() {
    let delay = std::time::Duration::from_millis(1000);
    let (mut fs, ino) = slow_log_with_file(delay);
    let svc = fs.svc.clone();
    let chmod = std::thread::spawn(move || {
        let req = Request::SetAttr {
            ino,
            attrs: SetAttrs {
                mode: Some(0o600),
                ..Default::default()
            },
        };
        let r = call(&svc, &Cred::root(), req);
        assert!(
            matches!(r, Ok(Response::Attr(ref a)) if a.mode & 0o7777 == 0o600),
            "{r:?}"
        );
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let data = vec![9u8; 2000];
    let r = fs.root(inline_write(ino, &data));
    assert!(
        matches!(r, Ok(Response::Attr(ref a)) if a.size == 2000),
        "{r:?}"
    );
    chmod.join().unwrap();
    let (mode, bytes) = inline_bytes(&fs, ino);
    assert_eq!(mode & 0o7777, 0o600, "the chmod was undone");
    assert_eq!(bytes, data, "the close's bytes were undone");
    assert!(matches!(
        fs.root(Request::SyncMeta { session: 0 }),
        Ok(Response::Done)
    ));
    fs.crash();
    let (mode, bytes) = inline_bytes(&fs, ino);
    assert_eq!(mode & 0o7777, 0o600, "the chmod after a crash");
    assert_eq!(bytes, data, "the close's bytes after a crash");
}
