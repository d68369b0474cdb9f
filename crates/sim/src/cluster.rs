//! The simulated cluster: one metadata server and several data servers in this process,
//! on in-memory disks (`MemStore`) and a shared virtual clock, restarted in place after
//! a crash or a power cut.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use stripefs_data::{DataService, MemStore, VirtualClock};
use stripefs_meta::{Answers, DataNet, MemDisk, MetaService, Tuning};
use stripefs_rpc::{ClusterConfig, ConnInfo, DataServerEntry, Defaults, Service};
use stripefs_wire::{Cred, Envelope, Request, Response, ServerId, WireError};

/// Storage targets per data server.
pub const TARGETS: usize = 2;
/// The cluster's default stripe size: small, so that small files span every server.
pub const STRIPE_BYTES: u32 = 16 << 10;

struct DataNode {
    store: Arc<MemStore>,
    svc: RwLock<Arc<DataService>>,
    /// Starts so far (each start has its own boot identity).
    boots: AtomicU64,
}

/// The metadata server's way to the data servers (its purges), in process.
struct PurgeNet {
    data: Arc<Vec<DataNode>>,
}

impl PurgeNet {
    fn call_one(&self, server: u32, cred: &Cred, req: Request, data: &[u8]) -> Answer {
        let node = self.data.get(server as usize).ok_or_else(|| {
            WireError::new(
                stripefs_wire::ErrorCode::InvalidArgument,
                format!("no data server {server} in the simulation"),
            )
        })?;
        let svc = lock_read(&node.svc).clone();
        let conn = ConnInfo::new("127.0.0.1:1".parse().expect("a socket address"));
        let env = Envelope {
            cred: cred.clone(),
            req,
        };
        let req = stripefs_wire::Valid::check(env, data.len() as u32)?;
        svc.handle(&conn, req, data).result
    }
}

type Answer = Result<Response, WireError>;

impl DataNet for PurgeNet {
    fn call_many(&self, server: u32, cred: &Cred, reqs: Vec<Request>) -> Answers {
        Ok(reqs
            .into_iter()
            .map(|req| self.call_one(server, cred, req, &[]))
            .collect())
    }

    fn call_data(&self, server: u32, cred: &Cred, req: Request, data: &[u8]) -> Answer {
        self.call_one(server, cred, req, data)
    }
}

pub struct Servers {
    pub cluster: ClusterConfig,
    seed: u64,
    canary: Option<crate::Canary>,
    meta_disk: Arc<MemDisk>,
    meta: RwLock<Option<Arc<MetaService>>>,
    data: Arc<Vec<DataNode>>,
    /// Every server's clock: the cluster's one virtual time.
    clock: Arc<VirtualClock>,
    /// Simulated time since the start, shared by every server.
    now_ns: AtomicU64,
}

/// Where the metadata server keeps its database on its (in-memory) disk.
const META_DB: &str = "/sim/meta/meta.redb";

/// Simulated wall time at the start (2026-01-01), so that times look like times.
const EPOCH_NS: i64 = 1_767_225_600 * 1_000_000_000;

fn lock_read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn lock_write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

impl Servers {
    pub fn start(
        data_servers: usize,
        seed: u64,
        canary: Option<crate::Canary>,
    ) -> Result<Servers, String> {
        let data = (0..data_servers)
            .map(|i| DataServerEntry::new(format!("sim-data-{i}:1")))
            .collect();
        let cluster = ClusterConfig {
            defaults: Defaults {
                stripe_size_bytes: STRIPE_BYTES,
                stripe_count: 0,
                inline_bytes: stripefs_rpc::DEFAULT_INLINE_BYTES,
            },
            ..ClusterConfig::new("sim-meta:1".into(), data)
        };
        let clock = Arc::new(VirtualClock::starting_at(EPOCH_NS));
        let mut data = Vec::with_capacity(data_servers);
        for i in 0..data_servers {
            let store = Arc::new(MemStore::new());
            let svc = open_data(i, &store, &clock, seed, 0, canary)?;
            data.push(DataNode {
                store,
                svc: RwLock::new(svc),
                boots: AtomicU64::new(1),
            });
        }
        let meta_disk = Arc::new(MemDisk::with_seed(seed));
        match canary {
            Some(crate::Canary::MetaSyncNoop) => {
                meta_disk.break_rule(stripefs_meta::BrokenRule::SyncIsNoop)
            }
            Some(crate::Canary::MetaDirSyncNoop) => {
                meta_disk.break_rule(stripefs_meta::BrokenRule::DirSyncIsNoop)
            }
            _ => {}
        }
        let s = Servers {
            cluster,
            seed,
            canary,
            meta_disk,
            meta: RwLock::new(None),
            data: Arc::new(data),
            clock,
            now_ns: AtomicU64::new(0),
        };
        s.open_meta()?;
        Ok(s)
    }

    fn open_meta(&self) -> Result<(), String> {
        let svc = MetaService::open_on(
            self.meta_disk.clone(),
            Arc::new(PurgeNet {
                data: self.data.clone(),
            }),
            self.clock.clone(),
            std::path::Path::new(META_DB),
            &self.cluster,
            Tuning::deterministic(),
        )?;
        *lock_write(&self.meta) = Some(svc);
        Ok(())
    }

    /// The metadata server checkpoints its log into its tables now.
    pub fn checkpoint_meta(&self) {
        if let Some(m) = lock_read(&self.meta).clone() {
            // A failed checkpoint is the server's to retry; the log keeps everything.
            let _ = m.checkpoint();
        }
    }

    /// The metadata server removes the objects of deleted files now.
    pub fn purge(&self) {
        if let Some(m) = lock_read(&self.meta).clone() {
            let _ = m.purge_once();
        }
    }

    /// The service that answers for `server` now (`None`: the metadata server), or
    /// `None` while it is down.
    pub fn service(&self, server: Option<ServerId>) -> Option<Arc<dyn Service>> {
        match server {
            None => lock_read(&self.meta).clone().map(|m| m as Arc<dyn Service>),
            Some(id) => self
                .data
                .get(id.0 as usize)
                .map(|n| lock_read(&n.svc).clone() as Arc<dyn Service>),
        }
    }

    /// Data server `id`'s service now (its same-host endpoint's server).
    pub fn data_service(&self, id: ServerId) -> Option<Arc<DataService>> {
        self.data
            .get(id.0 as usize)
            .map(|n| lock_read(&n.svc).clone())
    }

    pub fn data_servers(&self) -> usize {
        self.data.len()
    }

    /// Moves simulated time forward on every server.
    pub fn advance(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.now_ns.fetch_add(ns, Ordering::SeqCst);
        self.clock.advance(d);
    }

    /// The metadata server process dies and restarts: what it acknowledged is in its
    /// log; everything in its memory is gone.
    pub fn crash_meta(&self) -> Result<(), String> {
        let old = lock_write(&self.meta).take();
        if let Some(m) = old {
            m.halt();
            // Its handles die with the process; the page cache survives.
            self.meta_disk.kill();
            drop(m);
        }
        self.open_meta()
    }

    /// The metadata server loses power: what it did not sync is kept, lost or torn
    /// (chosen by `seed`); then it restarts.
    pub fn power_cut_meta(&self, seed: u64) -> Result<(), String> {
        let old = lock_write(&self.meta).take();
        if let Some(m) = old {
            m.halt();
            self.meta_disk.power_cut(seed);
            drop(m);
        }
        self.open_meta()
    }

    /// Data server `i`'s process dies and restarts; its disks keep their page cache.
    pub fn crash_data(&self, i: usize) -> Result<(), String> {
        let n = &self.data[i];
        let boot = n.boots.fetch_add(1, Ordering::SeqCst);
        let svc = open_data(i, &n.store, &self.clock, self.seed, boot, self.canary)?;
        *lock_write(&n.svc) = svc;
        Ok(())
    }

    /// Data server `i` loses power: every write since its file's last sync is kept,
    /// lost or torn (chosen by `seed`), names not yet synced into their directory are
    /// gone; then it restarts.
    pub fn power_cut_data(&self, i: usize, seed: u64) -> Result<(), String> {
        let n = &self.data[i];
        n.store.crash(seed);
        self.crash_data(i)
    }

    /// Data server `i`'s disk fills up: `slack` more bytes fit, then writes that need
    /// space fail with ENOSPC (after writing what fits) until [`Servers::space_back`].
    pub fn fill_disk(&self, i: usize, slack: u64) {
        let store = &self.data[i].store;
        store.set_capacity(store.used_bytes() + slack);
    }

    /// Data server `i`'s disk has room again.
    pub fn space_back(&self, i: usize) {
        self.data[i].store.set_capacity(u64::MAX / 4);
    }

    /// After `pass` more writes, data server `i`'s disk fails one write with EIO
    /// (writing half of it first if `cut_short`).
    pub fn io_error(&self, i: usize, pass: u32, cut_short: bool) {
        self.data[i].store.fail_writes(pass, 1, 5, cut_short);
    }

    /// The metadata server's own consistency check (namespace, link counts, layouts).
    pub fn check_meta(&self) -> Result<(), String> {
        let m = lock_read(&self.meta).clone();
        match m {
            Some(m) => m.check().map(|_| ()),
            None => Ok(()),
        }
    }

    /// Stops everything (the metadata server checkpoints and closes its files).
    pub fn stop(&self) {
        lock_write(&self.meta).take();
    }
}

fn open_data(
    i: usize,
    store: &Arc<MemStore>,
    clock: &Arc<VirtualClock>,
    seed: u64,
    boot: u64,
    canary: Option<crate::Canary>,
) -> Result<Arc<DataService>, String> {
    let targets: Vec<PathBuf> = (0..TARGETS)
        .map(|t| PathBuf::from(format!("/sim/data{i}/t{t}")))
        .collect();
    let canary = match canary {
        Some(crate::Canary::FsyncBeforeDurable) => Some(stripefs_data::Canary::FsyncBeforeDurable),
        Some(crate::Canary::SkipDirSync) => Some(stripefs_data::Canary::SkipDirSync),
        Some(crate::Canary::ChecksumBeforeData) => Some(stripefs_data::Canary::ChecksumBeforeData),
        Some(crate::Canary::PipeUnchecked) => Some(stripefs_data::Canary::PipeUnchecked),
        _ => None,
    };
    DataService::build(
        ServerId(i as u32),
        &targets,
        store.clone(),
        clock.clone(),
        stripefs_data::Options {
            throttle_bytes_s: None,
            // Replayable: the same seed gives the same identities, restarts new ones.
            boot_id: Some(crate::rng::mix(seed ^ ((i as u64) << 32) ^ boot)),
            canary,
            // The in-memory store has no descriptors: its reads are copied either way.
            no_zero_copy: false,
        },
    )
}
