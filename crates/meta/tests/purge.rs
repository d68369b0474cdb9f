//! The purge thread: unreachable data servers do not slow metadata operations and the
//! queue persists; reachable ones receive Remove and the queue empties.

mod common;
use common::*;
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

/// A data server that answers Remove and records it.
struct FakeData(Mutex<Vec<u64>>);

impl Service for FakeData {
    fn handle(&self, _c: &ConnInfo, env: Envelope, _d: &[u8]) -> Reply {
        match env.req {
            Request::Remove { fid } => {
                self.0.lock().unwrap().push(fid.0);
                Reply::ok(Response::Done)
            }
            _ => Reply::err(WireError::new(ErrorCode::Unsupported, "fake")),
        }
    }
}

#[test]
fn reachable_data_servers_get_remove_and_queue_empties() {
    let mut c = cluster(2);
    let shutdown = Arc::new(AtomicBool::new(false));
    let fakes: Vec<Arc<FakeData>> = (0..2)
        .map(|_| Arc::new(FakeData(Mutex::new(Vec::new()))))
        .collect();
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
    let fs = Fs::with_cluster(c);
    let r = Cred::root();
    let f = fs.create(&r, ROOT, "f", 0o644).unwrap();
    fs.root(Request::Open {
        ino: f.ino,
        session: 3,
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
        session: 3,
    })
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while fs.svc.purge_queue_len().unwrap() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let result = fs.svc.purge_queue_len();
    shutdown.store(true, std::sync::atomic::Ordering::SeqCst);
    for s in servers {
        s.join().unwrap().unwrap();
    }
    assert_eq!(result.unwrap(), 0);
    for fake in &fakes {
        assert_eq!(*fake.0.lock().unwrap(), vec![f.ino.0]);
    }
    fs.check();
}
