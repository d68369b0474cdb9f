//! The simulated cluster: one metadata server and several data servers in this process,
//! on in-memory disks (`MemStore`) and a shared virtual clock, restarted in place after
//! a crash or a power cut.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use stripefs_data::{DataService, MemStore, VirtualClock};
use stripefs_meta::{FixedClock, MetaService, Tuning};
use stripefs_rpc::{ClusterConfig, DataServerEntry, Defaults, Secret, Service};
use stripefs_wire::ServerId;

/// Storage targets per data server.
pub const TARGETS: usize = 2;
/// The cluster's default stripe size: small, so that small files span every server.
pub const STRIPE_BYTES: u32 = 16 << 10;

struct DataNode {
    store: Arc<MemStore>,
    svc: RwLock<Arc<DataService>>,
}

pub struct Servers {
    pub cluster: ClusterConfig,
    meta_dir: tempfile::TempDir,
    meta: RwLock<Option<Arc<MetaService>>>,
    data: Vec<DataNode>,
    meta_clock: Arc<FixedClock>,
    data_clock: Arc<VirtualClock>,
    /// Simulated time since the start, shared by every server.
    now_ns: AtomicU64,
}

/// Simulated wall time at the start (2026-01-01), so that times look like times.
const EPOCH_NS: i64 = 1_767_225_600 * 1_000_000_000;

fn lock_read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn lock_write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

impl Servers {
    pub fn start(data_servers: usize) -> Result<Servers, String> {
        // The metadata server's files live in memory too (/dev/shm where it exists).
        let shm = std::path::Path::new("/dev/shm");
        let meta_dir = if shm.is_dir() {
            tempfile::Builder::new()
                .prefix("stripefs-sim-")
                .tempdir_in(shm)
        } else {
            tempfile::Builder::new().prefix("stripefs-sim-").tempdir()
        }
        .map_err(|e| format!("cannot make a directory for the simulated metadata server: {e}"))?;
        let cluster = ClusterConfig {
            secret: Secret::generate(),
            timeout_ms: 10_000,
            meta_addr: "sim-meta:1".into(),
            data: (0..data_servers)
                .map(|i| DataServerEntry {
                    addr: format!("sim-data-{i}:1"),
                })
                .collect(),
            defaults: Defaults {
                stripe_size_bytes: STRIPE_BYTES,
                stripe_count: 0,
            },
        };
        let meta_clock = Arc::new(FixedClock::new(EPOCH_NS));
        let data_clock = Arc::new(VirtualClock::new());
        let mut data = Vec::with_capacity(data_servers);
        for i in 0..data_servers {
            let store = Arc::new(MemStore::new());
            let svc = open_data(i, &store, &data_clock)?;
            data.push(DataNode {
                store,
                svc: RwLock::new(svc),
            });
        }
        let s = Servers {
            cluster,
            meta_dir,
            meta: RwLock::new(None),
            data,
            meta_clock,
            data_clock,
            now_ns: AtomicU64::new(0),
        };
        s.open_meta()?;
        Ok(s)
    }

    fn meta_db(&self) -> PathBuf {
        self.meta_dir.path().join("meta.redb")
    }

    fn open_meta(&self) -> Result<(), String> {
        let svc = MetaService::open_tuned(
            &self.meta_db(),
            &self.cluster,
            self.meta_clock.clone(),
            Tuning::default(),
        )?;
        *lock_write(&self.meta) = Some(svc);
        Ok(())
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

    pub fn data_servers(&self) -> usize {
        self.data.len()
    }

    /// Moves simulated time forward on every server.
    pub fn advance(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let now = self.now_ns.fetch_add(ns, Ordering::SeqCst) + ns;
        self.data_clock.advance(d);
        self.meta_clock
            .set(EPOCH_NS.saturating_add(i64::try_from(now).unwrap_or(i64::MAX)));
    }

    /// The metadata server process dies and restarts: what it acknowledged is in its
    /// log; everything in its memory is gone.
    pub fn crash_meta(&self) -> Result<(), String> {
        let old = lock_write(&self.meta).take();
        if let Some(m) = old {
            m.halt();
            drop(m);
        }
        self.open_meta()
    }

    /// Data server `i`'s process dies and restarts; its disks keep their page cache.
    pub fn crash_data(&self, i: usize) -> Result<(), String> {
        let n = &self.data[i];
        let svc = open_data(i, &n.store, &self.data_clock)?;
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

    /// The next `count` writes to data server `i`'s disks fail with ENOSPC.
    pub fn no_space(&self, i: usize, count: u32) {
        self.data[i].store.fail_next_writes(count);
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
) -> Result<Arc<DataService>, String> {
    let targets: Vec<PathBuf> = (0..TARGETS)
        .map(|t| PathBuf::from(format!("/sim/data{i}/t{t}")))
        .collect();
    DataService::with_store(
        ServerId(i as u32),
        &targets,
        None,
        store.clone(),
        clock.clone(),
    )
}
