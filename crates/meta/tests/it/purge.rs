//! The purge thread: unreachable data servers do not slow metadata operations and the
//! queue persists; reachable ones receive Remove and the queue empties.

use crate::common;
use common::*;
use std::collections::HashSet;
use std::net::TcpListener;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use stripefs_rpc::{ConnInfo, Reply, Service};
use stripefs_wire::*;

const ROOT: u64 = 1;

#[test]
fn unreachable_data_servers_do_not_block_and_queue_persists() {
    let mut fs = Fs::with_cluster(cluster(3));
    let r = Cred::root();
    let t0 = Instant::now();
    for i in 0..200 {
        fs.create(&r, ROOT, &format!("f{i}"), 0o644).unwrap();
        fs.unlink(&r, ROOT, &format!("f{i}")).unwrap();
    }
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(10), "400 ops took {took:?}");
    assert_eq!(fs.svc.purge_queue_len().unwrap(), 200);
    fs.reopen();
    assert_eq!(fs.svc.purge_queue_len().unwrap(), 200);
    assert_eq!(fs.check().purge_pending, 200);
}

/// A data server that answers Remove and records it; it refuses the first Remove of
/// each inode in `fail_once`.
struct FakeData(Mutex<Vec<u64>>, Mutex<HashSet<u64>>);

impl FakeData {
    fn new() -> FakeData {
        FakeData(Mutex::new(Vec::new()), Mutex::new(HashSet::new()))
    }
}

impl Service for FakeData {
    fn handle(&self, _c: &ConnInfo, req: Valid, _d: &[u8]) -> Reply {
        match req.into_env().req {
            Request::Remove { fid } => {
                if self.1.lock().unwrap().remove(&fid.0) {
                    return Reply::err(WireError::new(ErrorCode::Io, "injected failure"));
                }
                self.0.lock().unwrap().push(fid.0);
                Reply::ok(Response::Done)
            }
            _ => Reply::err(WireError::new(ErrorCode::Unsupported, "fake")),
        }
    }
}

/// Starts `n` fake data servers and points the cluster at them.
fn fake_servers(
    c: &mut stripefs_rpc::ClusterConfig,
    n: usize,
    shutdown: &Arc<AtomicBool>,
) -> (
    Vec<Arc<FakeData>>,
    Vec<std::thread::JoinHandle<std::io::Result<()>>>,
) {
    let fakes: Vec<Arc<FakeData>> = (0..n).map(|_| Arc::new(FakeData::new())).collect();
    let mut servers = Vec::new();
    for (i, fake) in fakes.iter().enumerate() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        c.data[i].addr = l.local_addr().unwrap().to_string();
        let (secret, svc, stop) = (
            c.secret.clone(),
            fake.clone() as Arc<dyn Service>,
            shutdown.clone(),
        );
        servers.push(std::thread::spawn(move || {
            stripefs_rpc::serve(l, secret, svc, stop)
        }));
    }
    (fakes, servers)
}

/// Waits up to 10 s for the purge queue to empty; returns its length.
fn drain(fs: &Fs) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    while fs.svc.purge_queue_len().unwrap() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    fs.svc.purge_queue_len().unwrap()
}

#[test]
fn reachable_data_servers_get_remove_and_queue_empties() {
    let mut c = cluster(2);
    let shutdown = Arc::new(AtomicBool::new(false));
    let (fakes, servers) = fake_servers(&mut c, 2, &shutdown);
    let fs = Fs::with_cluster(c);
    let r = Cred::root();
    let f = fs.create(&r, ROOT, "f", 0o644).unwrap();
    fs.root(Request::Open {
        ino: f.ino,
        session: fs.sess(3),
        read: true,
        write: true,
    })
    .unwrap();
    fs.unlink(&r, ROOT, "f").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        fakes.iter().all(|f| f.0.lock().unwrap().is_empty()),
        "purged while open"
    );
    fs.root(Request::Close {
        ino: f.ino,
        session: fs.sess(3),
    })
    .unwrap();
    let left = drain(&fs);
    shutdown.store(true, std::sync::atomic::Ordering::SeqCst);
    for s in servers {
        s.join().unwrap().unwrap();
    }
    assert_eq!(left, 0);
    for fake in &fakes {
        assert_eq!(*fake.0.lock().unwrap(), vec![f.ino.0]);
    }
    fs.check();
}

/// Many files go in several rounds of pipelined Removes; a Remove refused by one server
/// keeps its file queued and is sent again; every object is removed.
#[test]
fn many_files_in_pipelined_rounds_with_refused_removes_retried() {
    let mut c = cluster(2);
    let shutdown = Arc::new(AtomicBool::new(false));
    let (fakes, servers) = fake_servers(&mut c, 2, &shutdown);
    let fs = Fs::with_cluster(c);
    let r = Cred::root();
    let n = 5 * stripefs_meta::PURGE_BATCH + 3;
    let mut inos = Vec::new();
    for i in 0..n {
        inos.push(fs.create(&r, ROOT, &format!("f{i}"), 0o644).unwrap().ino.0);
    }
    // Server 1 refuses the first Remove of every third file.
    fakes[1]
        .1
        .lock()
        .unwrap()
        .extend(inos.iter().step_by(3).copied());
    for i in 0..n {
        fs.unlink(&r, ROOT, &format!("f{i}")).unwrap();
    }
    let left = drain(&fs);
    shutdown.store(true, std::sync::atomic::Ordering::SeqCst);
    for s in servers {
        s.join().unwrap().unwrap();
    }
    assert_eq!(left, 0);
    assert!(
        fakes[1].1.lock().unwrap().is_empty(),
        "every failure was hit"
    );
    // A retry goes to every server of the layout again (Remove is idempotent), so
    // server 0 sees the retried files twice; server 1 removed each once.
    for fake in &fakes {
        let mut got = fake.0.lock().unwrap().clone();
        got.sort();
        got.dedup();
        assert_eq!(got, inos, "every object removed");
    }
    assert_eq!(fakes[1].0.lock().unwrap().len(), n);
    fs.check();
}
