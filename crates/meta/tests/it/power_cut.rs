//! The metadata server on the in-memory disk, through power cuts: every acknowledged
//! create, mkdir, rename and unlink is there after each restart, the namespace checks
//! clean, and the canaries (a disk whose syncs do nothing, or whose directory syncs do
//! nothing) are caught, which shows the checker can fail. Each run prints its seed.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use stripefs_meta::{
    Answers, BrokenRule, DataNet, DiskFault, DiskOp, MemDisk, MetaDisk, MetaService, Tuning,
    VirtualClock,
};
use stripefs_rpc::{ClusterConfig, ConnInfo, Defaults, Service};
use stripefs_wire::*;

const DB: &str = "/h-meta/meta.redb";

/// Data servers that are never reachable (purging is not exercised here).
struct NoNet;

impl DataNet for NoNet {
    fn call_many(&self, server: u32, _cred: &Cred, _reqs: Vec<Request>) -> Answers {
        Err(WireError::new(
            ErrorCode::Unreachable,
            format!("data server {server} is not simulated"),
        ))
    }
}

fn cluster() -> ClusterConfig {
    crate::common::unreachable_cluster(2, Defaults::default())
}

fn open(disk: Arc<dyn MetaDisk>, clock: &Arc<VirtualClock>, tuning: Tuning) -> Arc<MetaService> {
    MetaService::open_on(
        disk,
        Arc::new(NoNet),
        clock.clone(),
        Path::new(DB),
        &cluster(),
        tuning,
    )
    .unwrap_or_else(|e| panic!("reopening after a power cut: {e}"))
}

fn call(svc: &MetaService, req: Request) -> Result<Response, WireError> {
    let conn = ConnInfo::new(SocketAddr::from(([127, 0, 0, 1], 9)));
    let env = Envelope {
        cred: Cred::root(),
        req,
    };
    let req = stripefs_wire::Valid::check(env, 0)?;
    svc.handle(&conn, req, &[]).result
}

/// The whole namespace: path -> (is directory).
type Tree = BTreeMap<String, bool>;

fn list(svc: &MetaService, ino: u64, prefix: &str, out: &mut Tree) -> Result<(), WireError> {
    let mut after = String::new();
    loop {
        let r = call(
            svc,
            Request::ReadDir {
                ino: InodeId(ino),
                after: after.clone(),
                limit: 100,
            },
        )?;
        let Response::Entries { entries, done } = r else {
            panic!("{r:?}")
        };
        for e in entries {
            let path = format!("{prefix}/{}", e.name);
            let dir = e.ftype == FileType::Dir;
            if dir {
                list(svc, e.ino.0, &path, out)?;
            }
            out.insert(path, dir);
            after = e.name;
        }
        if done {
            return Ok(());
        }
    }
}

fn tree(svc: &MetaService) -> Tree {
    let mut t = Tree::new();
    list(svc, 1, "", &mut t).unwrap();
    t
}

fn ino_of(svc: &MetaService, path: &str) -> Option<u64> {
    match call(
        svc,
        Request::Resolve {
            path: path.into(),
            follow: false,
        },
    ) {
        Ok(Response::Attr(a)) => Some(a.ino.0),
        _ => None,
    }
}

const DIRS: [&str; 3] = ["", "/a", "/b"];
const NAMES: [&str; 4] = ["x", "y", "z", "a"];

/// One random namespace operation: the request and the tree it leaves if acknowledged.
fn random_op(rng: &mut StdRng, svc: &MetaService, model: &Tree) -> Option<(Request, Tree)> {
    let dir = DIRS[rng.gen_range(0..DIRS.len())];
    let name = NAMES[rng.gen_range(0..NAMES.len())];
    let path = format!("{dir}/{name}");
    let parent = InodeId(ino_of(svc, if dir.is_empty() { "/" } else { dir })?);
    let mut after = model.clone();
    let req = match rng.gen_range(0..4) {
        0 => {
            after.insert(path, false);
            Request::Create {
                parent,
                name: name.into(),
                mode: 0o644,
                exclusive: true,
                layout: LayoutHint::default(),
            }
        }
        1 => {
            after.insert(path, true);
            Request::Mkdir {
                parent,
                name: name.into(),
                mode: 0o755,
            }
        }
        2 => {
            if model.get(&path) != Some(&false) {
                return None;
            }
            after.remove(&path);
            Request::Unlink {
                parent,
                name: name.into(),
            }
        }
        _ => {
            let dst_dir = DIRS[rng.gen_range(0..DIRS.len())];
            let dst_name = NAMES[rng.gen_range(0..NAMES.len())];
            let dst = format!("{dst_dir}/{dst_name}");
            // Files only, onto free names: the model stays simple.
            if model.get(&path) != Some(&false) || model.contains_key(&dst) {
                return None;
            }
            let dst_parent = ino_of(svc, if dst_dir.is_empty() { "/" } else { dst_dir })?;
            after.remove(&path);
            after.insert(dst, false);
            Request::Rename {
                src_parent: parent,
                src_name: name.into(),
                dst_parent: InodeId(dst_parent),
                dst_name: dst_name.into(),
                noreplace: true,
            }
        }
    };
    Some((req, after))
}

/// What one seed's run found wrong, if anything.
fn run_seed(seed: u64, make_disk: &dyn Fn(&MemDisk) -> Arc<dyn MetaDisk>) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mem = MemDisk::with_seed(seed);
    let disk = make_disk(&mem);
    let clock = Arc::new(VirtualClock::starting_at(1_700_000_000_000_000_000));
    let tuning = Tuning::deterministic();
    let mut svc = open(disk.clone(), &clock, tuning);
    let mut model = Tree::new();
    // A failed log write may or may not have reached the disk: either tree is right.
    let mut maybe: Option<Tree> = None;
    for step in 0..120 {
        match rng.gen_range(0..40) {
            0..=2 => {
                let cut = rng.gen::<u64>();
                svc.halt();
                mem.clear_faults();
                mem.power_cut(cut);
                drop(svc);
                svc = MetaService::open_on(
                    disk.clone(),
                    Arc::new(NoNet),
                    clock.clone(),
                    Path::new(DB),
                    &cluster(),
                    tuning,
                )
                .map_err(|e| format!("step {step}: cannot restart after power cut: {e}"))?;
                let got = tree(&svc);
                match maybe.take() {
                    Some(alt) if got == alt => model = alt,
                    _ if got == model => {}
                    _ => {
                        return Err(format!(
                            "step {step}: after a power cut the namespace is\n{got:?}\n\
                             but acknowledged changes make it\n{model:?}"
                        ))
                    }
                }
                svc.check()
                    .map_err(|e| format!("step {step}: after a power cut: {e}"))?;
            }
            3..=5 => {
                let _ = svc.checkpoint();
            }
            6 => {
                // The next log append is torn (as a crash in the middle of it would leave
                // it): the server stops accepting changes until restarted.
                mem.fail_next(DiskOp::Write, ".wal", 1, DiskFault::Torn);
            }
            _ => {
                let Some((req, after)) = random_op(&mut rng, &svc, &model) else {
                    continue;
                };
                match call(&svc, req) {
                    Ok(_) => model = after,
                    Err(e) if matches!(e.code, ErrorCode::Io | ErrorCode::Internal) => {
                        maybe = Some(after)
                    }
                    Err(_) => {}
                }
            }
        }
    }
    Ok(())
}

fn honest(mem: &MemDisk) -> Arc<dyn MetaDisk> {
    Arc::new(mem.clone())
}

/// `STRIPEFS_SEED` (to replay a run), else a random seed.
fn seed_from_env() -> u64 {
    match std::env::var(stripefs_testkit::SEED_VAR) {
        Ok(v) => stripefs_testkit::seed_from(Some(&v)).unwrap_or_else(|e| panic!("{e}")),
        Err(_) => rand::random::<u64>() >> 16,
    }
}

/// Every acknowledged create, mkdir, rename and unlink survives any power cut (with
/// checkpoints at random points and torn log appends), and the namespace checks clean.
#[test]
fn acknowledged_changes_survive_any_power_cut() {
    let base = seed_from_env();
    println!("seeds {base}..{} (STRIPEFS_SEED={base} replays)", base + 40);
    for seed in base..base + 40 {
        if let Err(e) = run_seed(seed, &honest) {
            panic!("seed {seed}: {e}");
        }
    }
}

/// A disk whose syncs and direct writes return before anything is durable: the check
/// above must catch it (lost acknowledged changes) within a few seeds.
#[test]
fn canary_sync_that_makes_nothing_durable_is_caught() {
    let caught = (0..30).find(|&seed| {
        let make = |m: &MemDisk| -> Arc<dyn MetaDisk> {
            m.break_rule(BrokenRule::SyncIsNoop);
            Arc::new(m.clone())
        };
        run_seed(seed, &make)
            .inspect_err(|e| println!("seed {seed}: {e}"))
            .is_err()
    });
    println!("caught at seed {caught:?}");
    assert!(caught.is_some(), "a disk that never syncs went unnoticed");
}

/// A disk whose directory syncs do nothing: the log files' names can vanish with a
/// power cut, which a restart must notice.
#[test]
fn canary_directory_sync_that_does_nothing_is_caught() {
    let caught = (0..30).find(|&seed| {
        let make = |m: &MemDisk| -> Arc<dyn MetaDisk> {
            m.break_rule(BrokenRule::DirSyncIsNoop);
            Arc::new(m.clone())
        };
        run_seed(seed, &make)
            .inspect_err(|e| println!("seed {seed}: {e}"))
            .is_err()
    });
    println!("caught at seed {caught:?}");
    assert!(caught.is_some(), "lost directory entries went unnoticed");
}

/// The tear itself: unsynced writes are lost or torn by some power cuts, synced and
/// direct ones never.
#[test]
fn power_cut_tears_unsynced_writes_and_keeps_synced_ones() {
    let mut lost_or_torn = 0;
    for seed in 0..32u64 {
        let disk = MemDisk::new();
        let f = disk.open(Path::new("/d/f"), true).unwrap().unwrap();
        f.write_at(&[1u8; 4096], 0).unwrap();
        f.sync_all().unwrap();
        disk.sync_dir(Path::new("/d")).unwrap();
        f.write_direct(&[2u8; 4096], 4096).unwrap();
        f.write_at(&[3u8; 4096], 8192).unwrap();
        assert_eq!(disk.unsynced_writes(), 1);
        disk.power_cut(seed);
        // The dead process's handle no longer reaches the disk.
        assert!(f.write_at(&[9u8; 1], 0).is_err());
        let f = disk.open(Path::new("/d/f"), false).unwrap().unwrap();
        let mut buf = vec![0u8; 3 * 4096];
        let n = f.read_at(&mut buf, 0).unwrap();
        assert!(buf[..4096].iter().all(|&b| b == 1), "seed {seed}: synced");
        assert!(
            buf[4096..8192].iter().all(|&b| b == 2),
            "seed {seed}: direct"
        );
        if n < buf.len() || buf[8192..].iter().any(|&b| b != 3) {
            lost_or_torn += 1;
            // Torn at sector granularity: each sector old (absent) or new.
            for sector in buf[8192..n.max(8192)].chunks(512) {
                assert!(
                    sector.iter().all(|&b| b == 3) || sector.iter().all(|&b| b == 0),
                    "seed {seed}: a sector mixes old and new bytes"
                );
            }
        }
    }
    assert!(
        lost_or_torn >= 8,
        "only {lost_or_torn} of 32 cuts lost the unsynced write"
    );
    // A file created but its directory never synced is gone after a cut.
    let disk = MemDisk::new();
    disk.open(Path::new("/d/new"), true).unwrap();
    disk.power_cut(1);
    assert!(disk.open(Path::new("/d/new"), false).unwrap().is_none());
}

/// A close's inline bytes (WriteInlineUnsynced) are visible when answered and durable
/// with the next commit, a SyncMeta, or the sync thread's write within CARRY_WAIT; a
/// power cut before any of those returns the old bytes or the new ones, never others.
#[test]
fn unsynced_inline_bytes_are_durable_with_the_next_commit_or_soon_after() {
    let seed = seed_from_env();
    println!("seed {seed} (STRIPEFS_SEED={seed} replays)");
    let mem = MemDisk::with_seed(seed);
    let disk: Arc<dyn MetaDisk> = Arc::new(mem.clone());
    let clock = Arc::new(VirtualClock::starting_at(1_700_000_000_000_000_000));
    // Background threads: the sync thread is what bounds an unwritten close's life.
    let tuning = Tuning::default();
    let mut svc = open(disk.clone(), &clock, tuning);
    let create = |svc: &MetaService, name: &str| -> u64 {
        match call(
            svc,
            Request::Create {
                parent: InodeId::ROOT,
                name: name.into(),
                mode: 0o644,
                exclusive: true,
                layout: LayoutHint::default(),
            },
        ) {
            Ok(Response::Attr(a)) => a.ino.0,
            other => panic!("create {name}: {other:?}"),
        }
    };
    let write = |svc: &MetaService, ino: u64, data: &[u8]| {
        let r = call(
            svc,
            Request::WriteInlineUnsynced {
                ino: InodeId(ino),
                pieces: vec![InlinePiece {
                    offset: 0,
                    crc: crc32c(data),
                    data: data.to_vec(),
                }],
                mtime_ns: 0,
            },
        );
        assert!(matches!(r, Ok(Response::Attr(_))), "{r:?}");
    };
    let bytes = |svc: &MetaService, ino: u64| -> Vec<u8> {
        match call(svc, Request::ReadInline { ino: InodeId(ino) }) {
            Ok(Response::Attr(a)) => {
                let i = a.inline.expect("inline");
                let d = i.data.expect("bytes");
                assert_eq!(crc32c(&d), i.crc, "stored bytes match their checksum");
                d
            }
            other => panic!("ReadInline: {other:?}"),
        }
    };
    let cut = |svc: Arc<MetaService>, n: u64| -> Arc<MetaService> {
        svc.halt();
        mem.power_cut(seed.wrapping_add(n));
        drop(svc);
        open(disk.clone(), &clock, tuning)
    };
    let f = create(&svc, "f");
    // Visible at once; durable after a SyncMeta.
    write(&svc, f, b"AAAA");
    assert_eq!(bytes(&svc, f), b"AAAA");
    assert!(matches!(
        call(&svc, Request::SyncMeta { session: 0 }),
        Ok(Response::Done)
    ));
    svc = cut(svc, 1);
    assert_eq!(bytes(&svc, f), b"AAAA", "after SyncMeta");
    // Durable with the next change that is answered.
    write(&svc, f, b"BBBB");
    let g = create(&svc, "g");
    svc = cut(svc, 2);
    assert_eq!(bytes(&svc, f), b"BBBB", "after a later create");
    assert_eq!(ino_of(&svc, "/g"), Some(g));
    // Cut at once: the old bytes or the new, nothing else.
    write(&svc, f, b"CCCC");
    svc = cut(svc, 3);
    let got = bytes(&svc, f);
    assert!(got == b"BBBB" || got == b"CCCC", "{got:?}");
    // Left alone: written by the sync thread within CARRY_WAIT.
    write(&svc, f, b"DDDD");
    std::thread::sleep(stripefs_meta::CARRY_WAIT * 10);
    svc = cut(svc, 4);
    assert_eq!(
        bytes(&svc, f),
        b"DDDD",
        "after CARRY_WAIT with no other commit"
    );
    svc.check().unwrap();
}
