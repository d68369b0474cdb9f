//! Back-pressure when checkpoints fail for lack of space (issue 12, item 8): past a bound
//! the metadata server answers mutations with ENOSPC instead of growing its in-memory
//! layers without end, reads keep working, a stop does not spin, and service resumes by
//! itself once space returns, with nothing acknowledged lost.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use stripefs_meta::{
    Answers, Clock, DataNet, FixedClock, MemDisk, MetaDisk, MetaService, Tuning, VirtualClock,
    CHECKPOINT_RETRY_MAX,
};
use stripefs_rpc::{ClusterConfig, ConnInfo, Defaults, Service};
use stripefs_wire::*;

const DB: &str = "/h-meta-nospace/meta.redb";

struct NoNet;

impl DataNet for NoNet {
    fn call_many(&self, _server: u32, _cred: &Cred, _reqs: Vec<Request>) -> Answers {
        Err(WireError::new(ErrorCode::Unreachable, "no data servers"))
    }
}

fn cluster() -> ClusterConfig {
    crate::common::unreachable_cluster(1, Defaults::default())
}

fn open(disk: &MemDisk, clock: Arc<dyn Clock>, tuning: Tuning) -> Arc<MetaService> {
    let disk: Arc<dyn MetaDisk> = Arc::new(disk.clone());
    MetaService::open_on(
        disk,
        Arc::new(NoNet),
        clock,
        Path::new(DB),
        &cluster(),
        tuning,
    )
    .unwrap()
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

fn create(svc: &MetaService, i: usize) -> Result<Response, WireError> {
    call(
        svc,
        Request::Create {
            parent: InodeId::ROOT,
            name: format!("f{i:06}"),
            mode: 0o644,
            exclusive: true,
            layout: LayoutHint::default(),
        },
    )
}

fn lookup(svc: &MetaService, i: usize) -> Result<Response, WireError> {
    call(
        svc,
        Request::Lookup {
            parent: InodeId::ROOT,
            name: format!("f{i:06}"),
        },
    )
}

fn count_entries(svc: &MetaService) -> usize {
    let mut n = 0;
    let mut after = String::new();
    loop {
        let r = call(
            svc,
            Request::ReadDir {
                ino: InodeId::ROOT,
                after: after.clone(),
                limit: 1000,
            },
        )
        .unwrap();
        let Response::Entries { entries, done } = r else {
            panic!("{r:?}")
        };
        n += entries.len();
        if let Some(e) = entries.last() {
            after = e.name.clone();
        }
        if done {
            return n;
        }
    }
}

/// Creates files until one is refused; returns how many were acknowledged and the
/// refusal.
fn fill_until_refused(svc: &MetaService, from: usize, limit: usize) -> (usize, WireError) {
    for i in from..limit {
        if let Err(e) = create(svc, i) {
            return (i, e);
        }
    }
    panic!("{} creates were all accepted on a full disk", limit - from);
}

const BOUND_KEYS: usize = 300;

/// The disk fills up (no file may grow): checkpoints fail, and once the changes waiting
/// for one pass the bound, creates answer ENOSPC while lookups and listings still work.
/// When space returns, the next retry succeeds and creates are accepted again; after a
/// power cut every acknowledged create is there.
#[test]
fn failing_checkpoints_refuse_changes_past_the_bound_and_service_resumes() {
    let disk = MemDisk::with_seed(7);
    let clock = Arc::new(VirtualClock::starting_at(1_700_000_000_000_000_000));
    let tuning = Tuning {
        max_overlay_keys: BOUND_KEYS,
        ..Tuning::deterministic()
    };
    let svc = open(&disk, clock.clone(), tuning);
    for i in 0..10 {
        create(&svc, i).unwrap();
    }
    svc.checkpoint().unwrap();
    disk.set_capacity(Some(disk.used_bytes()));

    let (acked, refusal) = fill_until_refused(&svc, 10, 200_000);
    assert_eq!(refusal.code, ErrorCode::NoSpace, "{refusal}");
    assert!(
        svc.checkpoint_failure()
            .is_some_and(|e| e.code == ErrorCode::NoSpace),
        "{:?}",
        svc.checkpoint_failure()
    );
    println!("{acked} creates acknowledged before the refusal: {refusal}");
    // The refusal is lasting, and the layers stop growing.
    for i in acked..acked + 50 {
        assert_eq!(create(&svc, i).unwrap_err().code, ErrorCode::NoSpace);
    }
    assert_eq!(svc.checkpoint().unwrap_err().code, ErrorCode::NoSpace);
    // Reads keep working, through the layers and the reopened store.
    for i in [0, 9, 10, acked / 2, acked - 1] {
        lookup(&svc, i).unwrap_or_else(|e| panic!("lookup f{i}: {e}"));
    }
    assert_eq!(count_entries(&svc), acked);

    // Space returns; once the retry is due the next create succeeds.
    disk.set_capacity(None);
    clock.advance(CHECKPOINT_RETRY_MAX);
    create(&svc, acked).unwrap();
    assert!(svc.checkpoint_failure().is_none());
    svc.checkpoint().unwrap();
    let acked = acked + 1;

    svc.halt();
    disk.power_cut(99);
    drop(svc);
    let svc = open(&disk, clock, tuning);
    assert_eq!(count_entries(&svc), acked);
    lookup(&svc, acked - 1).unwrap();
    svc.check().unwrap();
}

/// With the checkpoint thread: a stop while checkpoints fail returns promptly (it used to
/// spin forever waiting for the checkpoint), leaving the log for the next start; the
/// restarted server, with space back, has every acknowledged create. Before that,
/// service resumes by itself once space returns.
#[test]
fn stopping_while_checkpoints_fail_does_not_spin_and_loses_nothing() {
    let disk = MemDisk::with_seed(8);
    let clock: Arc<dyn Clock> = Arc::new(FixedClock::new(1_700_000_000_000_000_000));
    let tuning = Tuning {
        freeze_age: Duration::ZERO,
        max_overlay_keys: BOUND_KEYS,
        ..Tuning::default()
    };
    let svc = open(&disk, clock.clone(), tuning);
    create(&svc, 0).unwrap();
    svc.checkpoint().unwrap();
    disk.set_capacity(Some(disk.used_bytes()));
    let (acked, refusal) = fill_until_refused(&svc, 1, 200_000);
    assert_eq!(refusal.code, ErrorCode::NoSpace, "{refusal}");

    // Space returns: the checkpoint thread's retry succeeds within its backoff.
    disk.set_capacity(None);
    let start = Instant::now();
    let mut next = acked;
    while create(&svc, next).is_err() {
        assert!(
            start.elapsed() < 3 * CHECKPOINT_RETRY_MAX,
            "service did not resume after space returned"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    next += 1;

    // Full again, then stop while the checkpoints fail.
    disk.set_capacity(Some(disk.used_bytes()));
    let (acked, _) = fill_until_refused(&svc, next, 400_000);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(svc);
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("stopping the service spins while checkpoints fail");

    disk.kill();
    disk.set_capacity(None);
    let svc = open(&disk, clock, tuning);
    assert_eq!(count_entries(&svc), acked);
    svc.check().unwrap();
}

/// A log file that must grow on a full disk refuses that batch with ENOSPC and nothing
/// else: the server does not halt (nothing was written), and once space returns the
/// next change is accepted; after a power cut every acknowledged change is there.
#[test]
fn a_log_file_that_cannot_grow_refuses_the_batch_without_halting() {
    let disk = MemDisk::with_seed(9);
    let clock = Arc::new(VirtualClock::starting_at(1_700_000_000_000_000_000));
    let tuning = Tuning::deterministic();
    let svc = open(&disk, clock.clone(), tuning);
    disk.set_capacity(Some(disk.used_bytes()));
    // Records of about 4 KiB reach the end of the 4 MiB log file within ~1,000 changes.
    let symlink = |i: usize| {
        call(
            &svc,
            Request::Symlink {
                parent: InodeId::ROOT,
                name: format!("s{i:05}"),
                target: "t".repeat(4000),
            },
        )
    };
    let mut acked = 0;
    let refusal = loop {
        match symlink(acked) {
            Ok(_) => acked += 1,
            Err(e) => break e,
        }
        assert!(acked < 5000, "the log never had to grow");
    };
    assert_eq!(refusal.code, ErrorCode::NoSpace, "{refusal}");
    assert!(refusal.message.contains("filling"), "{refusal}");
    disk.set_capacity(None);
    symlink(acked).unwrap_or_else(|e| panic!("not accepted once space returned: {e}"));
    let acked = acked + 1;
    svc.halt();
    disk.power_cut(3);
    drop(svc);
    let svc = open(&disk, clock, tuning);
    assert_eq!(count_entries(&svc), acked);
}
