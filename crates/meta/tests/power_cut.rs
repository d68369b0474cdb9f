//! The metadata server on the in-memory disk, through power cuts: every acknowledged
//! create, mkdir, rename and unlink is there after each restart, the namespace checks
//! clean, and the canaries (a disk whose syncs do nothing, or whose directory syncs do
//! nothing) are caught, which shows the checker can fail. Each run prints its seed.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stripefs_meta::{
    Answers, BrokenRule, DataNet, DiskFault, DiskOp, LogFile, MemDisk, MetaDisk, MetaService,
    SimClock, Tuning,
};
use stripefs_rpc::{ClusterConfig, ConnInfo, DataServerEntry, Defaults, Secret, Service};
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
    ClusterConfig {
        secret: Secret::generate(),
        timeout_ms: 1000,
        meta_addr: "127.0.0.1:1".into(),
        data: vec![
            DataServerEntry {
                addr: "127.0.0.1:1".into(),
                host: None,
                local_socket: None,
                advertise: None,
            };
            2
        ],
        defaults: Defaults::default(),
        lease_ms: stripefs_rpc::limits::LEASE_MS,
        host: None,
        meta_host: None,
        streams: None,
        pipeline: None,
        compress: None,
        token: None,
        has_secret: true,
        tls: Default::default(),
    }
}

fn open(disk: Arc<dyn MetaDisk>, clock: &Arc<SimClock>, tuning: Tuning) -> Arc<MetaService> {
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
    let conn = ConnInfo {
        peer: SocketAddr::from(([127, 0, 0, 1], 9)),
        host: None,
        token: None,
    };
    let reply = svc.handle(
        &conn,
        Envelope {
            cred: Cred::root(),
            req,
        },
        &[],
    );
    reply.result
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
    let clock = Arc::new(SimClock::new(1_700_000_000_000_000_000));
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

/// Every acknowledged create, mkdir, rename and unlink survives any power cut (with
/// checkpoints at random points and torn log appends), and the namespace checks clean.
#[test]
fn acknowledged_changes_survive_any_power_cut() {
    let base: u64 = std::env::var("STRIPEFS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::random::<u64>() >> 16);
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

/// A log file on the in-memory disk whose direct writes take a while (as a real disk's
/// synchronous writes do, so that several are in flight at once) and which a power cut
/// reaches in the middle: a write still in flight when the power goes never reaches the
/// disk.
struct SlowLog {
    inner: Arc<dyn LogFile>,
    power_off: Arc<AtomicBool>,
    /// Direct writes wait 100 to 800 µs, so that a later one may land first.
    waits: AtomicU64,
    /// Offsets of direct writes, and whether each reached the disk.
    writes: Arc<Mutex<Vec<(u64, bool)>>>,
}

impl SlowLog {
    fn powered(&self) -> std::io::Result<()> {
        if self.power_off.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("the power is off"));
        }
        Ok(())
    }
}

impl LogFile for SlowLog {
    fn size_bytes(&self) -> std::io::Result<u64> {
        self.inner.size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.powered()?;
        self.inner.write_at(buf, offset)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.powered()?;
        self.inner.sync_data()
    }
    fn sync_all(&self) -> std::io::Result<()> {
        self.powered()?;
        self.inner.sync_all()
    }
    fn write_direct(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        let n = self.waits.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(Duration::from_micros(100 + n * 7919 % 8 * 100));
        let done = self
            .powered()
            .and_then(|()| self.inner.write_direct(buf, offset));
        self.writes.lock().unwrap().push((offset, done.is_ok()));
        done
    }
}

/// [`MemDisk`] with slow log files (see [`SlowLog`]).
struct SlowDisk {
    mem: MemDisk,
    power_off: Arc<AtomicBool>,
    writes: Arc<Mutex<Vec<(u64, bool)>>>,
}

impl MetaDisk for SlowDisk {
    fn open(&self, path: &Path, create: bool) -> std::io::Result<Option<Arc<dyn LogFile>>> {
        Ok(self
            .mem
            .open(path, create)?
            .map(|inner| -> Arc<dyn LogFile> {
                Arc::new(SlowLog {
                    inner,
                    power_off: self.power_off.clone(),
                    waits: AtomicU64::new(0),
                    writes: self.writes.clone(),
                })
            }))
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.mem.sync_dir(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.mem.rename(from, to)
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        self.mem.remove(path)
    }
    fn file_bytes(&self, path: &Path) -> u64 {
        self.mem.file_bytes(path)
    }
    fn open_db(&self, path: &Path) -> Result<redb::Database, String> {
        self.mem.open_db(path)
    }
}

/// Clients creating files at once make the metadata server write several log records at
/// once (pipelined group commit); a power cut in the middle of that leaves some written
/// and some not, in any order. After each restart every acknowledged create is there,
/// nothing appears that was not asked for, the namespace checks clean, and the server
/// starts (records written after one that never reached the disk are discarded, not
/// taken for damage); the creates go on after it.
#[test]
fn power_cuts_amid_overlapping_log_writes_keep_every_acknowledged_create() {
    let base: u64 = std::env::var("STRIPEFS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::random::<u64>() >> 16);
    println!("seeds {base}..{} (STRIPEFS_SEED={base} replays)", base + 12);
    // Cuts after which a log write landed beyond one that was lost.
    let mut out_of_order = 0;
    for seed in base..base + 12 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mem = MemDisk::with_seed(seed);
        let power_off = Arc::new(AtomicBool::new(false));
        let writes = Arc::new(Mutex::new(Vec::new()));
        let disk: Arc<dyn MetaDisk> = Arc::new(SlowDisk {
            mem: mem.clone(),
            power_off: power_off.clone(),
            writes: writes.clone(),
        });
        let clock = Arc::new(SimClock::new(1_700_000_000_000_000_000));
        let tuning = Tuning::deterministic();
        let mut svc = open(disk.clone(), &clock, tuning);
        let mut have: BTreeSet<String> = BTreeSet::new();
        for round in 0..6 {
            writes.lock().unwrap().clear();
            let acked = Mutex::new(BTreeSet::new());
            let tried = Mutex::new(BTreeSet::new());
            let cut_after = Duration::from_micros(rng.gen_range(500..20_000));
            std::thread::scope(|s| {
                for t in 0..4 {
                    let (svc, acked, tried) = (&svc, &acked, &tried);
                    s.spawn(move || {
                        for i in 0.. {
                            let name = format!("r{round}-t{t}-{i}");
                            tried.lock().unwrap().insert(format!("/{name}"));
                            let req = Request::Create {
                                parent: InodeId(1),
                                name: name.clone(),
                                mode: 0o644,
                                exclusive: true,
                                layout: LayoutHint::default(),
                            };
                            if call(svc, req).is_err() {
                                return;
                            }
                            acked.lock().unwrap().insert(format!("/{name}"));
                        }
                    });
                }
                std::thread::sleep(cut_after);
                power_off.store(true, Ordering::SeqCst);
                svc.halt();
            });
            mem.power_cut(rng.gen());
            drop(svc);
            let w = std::mem::take(&mut *writes.lock().unwrap());
            let first_lost = w.iter().filter(|(_, ok)| !ok).map(|(o, _)| *o).min();
            out_of_order +=
                usize::from(first_lost.is_some_and(|lost| w.iter().any(|&(o, ok)| ok && o > lost)));
            power_off.store(false, Ordering::SeqCst);
            svc = open(disk.clone(), &clock, tuning);
            let got: BTreeSet<String> = tree(&svc).into_keys().collect();
            let (acked, tried) = (acked.into_inner().unwrap(), tried.into_inner().unwrap());
            for name in acked.iter().chain(&have) {
                assert!(
                    got.contains(name),
                    "seed {seed} round {round}: acknowledged {name} is gone"
                );
            }
            for name in &got {
                assert!(
                    have.contains(name) || tried.contains(name),
                    "seed {seed} round {round}: {name} was never created"
                );
            }
            svc.check()
                .unwrap_or_else(|e| panic!("seed {seed} round {round}: {e}"));
            have = got;
        }
    }
    println!("power cuts with a log write landed beyond a lost one: {out_of_order} of 72");
    assert!(out_of_order > 0, "no power cut hit overlapping log writes");
}
