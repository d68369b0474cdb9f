//! What a deterministic simulator needs from the metadata server: no background thread
//! (checkpoints only when asked, purging only in `purge_once`), the purge's calls to data
//! servers through the `DataNet` it is given, and retries timed by its clock.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stripefs_meta::{Answers, DataNet, MemDisk, MetaDisk, MetaService, Tuning, VirtualClock};
use stripefs_rpc::{ConnInfo, Service};
use stripefs_wire::*;

/// Records every call; answers them or fails them all, as told.
#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<(u32, Vec<Request>)>>,
    down: Mutex<bool>,
}

impl DataNet for Recorder {
    fn call_many(&self, server: u32, _cred: &Cred, reqs: Vec<Request>) -> Answers {
        self.calls.lock().unwrap().push((server, reqs.clone()));
        if *self.down.lock().unwrap() {
            return Err(WireError::new(ErrorCode::Unreachable, "down"));
        }
        Ok(reqs.iter().map(|_| Ok(Response::Done)).collect())
    }
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

#[test]
fn purging_and_checkpoints_run_only_when_asked_and_through_the_given_network() {
    let disk: Arc<dyn MetaDisk> = Arc::new(MemDisk::new());
    let net = Arc::new(Recorder::default());
    let clock = Arc::new(VirtualClock::starting_at(1_700_000_000_000_000_000));
    let cluster = crate::common::cluster(2);
    let svc = MetaService::open_on(
        disk,
        net.clone(),
        clock.clone(),
        Path::new("/h-meta-hooks/meta.redb"),
        &cluster,
        Tuning::deterministic(),
    )
    .unwrap();
    let ino = match call(
        &svc,
        Request::Create {
            parent: InodeId::ROOT,
            name: "f".into(),
            mode: 0o644,
            exclusive: true,
            layout: LayoutHint::default(),
        },
    ) {
        Ok(Response::Attr(a)) => a.ino,
        r => panic!("{r:?}"),
    };
    call(
        &svc,
        Request::Unlink {
            parent: InodeId::ROOT,
            name: "f".into(),
        },
    )
    .unwrap();
    // Real time passes; nothing happens by itself.
    std::thread::sleep(Duration::from_millis(300));
    clock.advance(Duration::from_secs(60));
    assert_eq!(svc.checkpoints(), 0);
    assert!(net.calls.lock().unwrap().is_empty());
    assert_eq!(svc.purge_queue_len().unwrap(), 1);

    // Data servers down: the round fails, and is not retried before its backoff passes.
    *net.down.lock().unwrap() = true;
    assert_eq!(svc.purge_once().unwrap(), 0);
    let tried = net.calls.lock().unwrap().len();
    assert!(tried >= 1);
    *net.down.lock().unwrap() = false;
    assert_eq!(svc.purge_once().unwrap(), 0, "retried before its time");
    assert_eq!(net.calls.lock().unwrap().len(), tried);
    clock.advance(Duration::from_secs(1));
    assert_eq!(svc.purge_once().unwrap(), 1);
    let calls = net.calls.lock().unwrap().clone();
    assert!(calls[tried..]
        .iter()
        .all(|(_, reqs)| reqs == &vec![Request::Remove { fid: ino }]));
    assert_eq!(svc.purge_queue_len().unwrap(), 0);

    svc.checkpoint().unwrap();
    assert_eq!(svc.checkpoints(), 1);
}
