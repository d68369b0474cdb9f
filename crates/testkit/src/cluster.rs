//! A throwaway in-process cluster for integration tests: one metadata server and N data
//! servers with T targets each, on 127.0.0.1 port 0, in a temporary directory, served by
//! the real services and rpc layer in threads of the test's process. Dropping the fixture
//! stops every server (also when a test fails). Needs the `cluster` feature.

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use stripefs_client::{Client, Cred, InodeId, LayoutHint};
use stripefs_data::{Clock, DataService, MemStore, SystemClock};
use stripefs_meta::MetaService;
use stripefs_rpc::{
    ClusterConfig, ConnInfo, ConnStats, DataServerEntry, Defaults, Limits, Reply, Secret, Service,
};
use stripefs_wire::{ErrorCode, Features, Valid, WireError};

pub const SMALL_STRIPE: u32 = 64 << 10;

struct Server {
    shutdown: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    stats: Arc<ConnStats>,
}

impl Server {
    fn start(
        listener: TcpListener,
        secret: &Secret,
        service: Arc<dyn Service>,
        limits: &Limits,
    ) -> Server {
        let shutdown = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(ConnStats::default());
        let (flag, secret, st, limits) = (
            shutdown.clone(),
            secret.clone(),
            stats.clone(),
            limits.clone(),
        );
        let thread = std::thread::spawn(move || {
            stripefs_rpc::serve_with(listener, secret, service, flag, limits, st).expect("serve");
        });
        Server {
            shutdown,
            thread: Some(thread),
            stats,
        }
    }

    /// Stops accepting and closes the listener; connection threads notice within
    /// the server's idle poll and close their connections.
    fn stop(&mut self) {
        self.shutdown.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A server of an older build in front of a real one: it announces its features less
/// `lacks` (or, with `lacks` `None`, predates features altogether and refuses the
/// `Features` request as an unknown opcode), and refuses what needs a missing feature as
/// a server that does not know the opcode would, counting each such request in
/// `refused`: a client that asks it one sent what it should not have.
pub struct Older {
    inner: Arc<dyn Service>,
    lacks: Option<Features>,
    refused: Arc<AtomicU64>,
}

impl Service for Older {
    fn handle(&self, conn: &ConnInfo, req: Valid, data: &[u8]) -> Reply {
        let missing = match self.lacks {
            None => Features::all(),
            Some(l) => l,
        };
        if req.opcode().feature().is_some_and(|f| missing.has(f)) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            let e = WireError::new(ErrorCode::BadFrame, "opcode unknown to this server");
            return Reply::err(e);
        }
        self.inner.handle(conn, req, data)
    }

    fn features(&self) -> Option<Features> {
        let theirs = self.inner.features()?;
        self.lacks.map(|l| theirs.without(l))
    }

    fn check_token(&self, t: &stripefs_rpc::token::Token) -> Result<(), WireError> {
        self.inner.check_token(t)
    }
}

pub struct Cluster {
    pub config: ClusterConfig,
    /// Requests the servers refused for needing a feature they lack (see `Older`).
    pub refused: Arc<AtomicU64>,
    pub data: Vec<Arc<DataService>>,
    pub targets: Vec<Vec<PathBuf>>,
    /// The in-memory disks of the data servers, when made by `with_mem`.
    pub stores: Vec<Option<Arc<MemStore>>>,
    servers: Vec<Server>,
    meta: Server,
    pub dir: tempfile::TempDir,
}

fn bind() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0")
}

impl Cluster {
    /// 1 metadata server and 4 data servers with 2 targets each; default layout
    /// 64 KiB x all servers.
    pub fn start() -> Cluster {
        Cluster::with(4, 2, SMALL_STRIPE)
    }

    pub fn with(n_data: usize, n_targets: usize, stripe: u32) -> Cluster {
        Cluster::make(
            n_data,
            n_targets,
            stripe,
            false,
            stripefs_rpc::limits::LEASE_MS,
            &Limits::default(),
            None,
        )
    }

    /// Servers of an older build (see [`Older`]): lacking the features `lacks`, or with
    /// `None` predating features altogether.
    pub fn older(n_data: usize, lacks: Option<Features>) -> Cluster {
        Cluster::make(
            n_data,
            1,
            SMALL_STRIPE,
            false,
            stripefs_rpc::limits::LEASE_MS,
            &Limits::default(),
            Some(lacks),
        )
    }

    /// Like `with`, but the data servers keep their objects on in-memory disks
    /// (`MemStore`), so that a test can cut their power (`power_cut_data`).
    pub fn with_mem(n_data: usize, n_targets: usize, stripe: u32) -> Cluster {
        Cluster::make(
            n_data,
            n_targets,
            stripe,
            true,
            stripefs_rpc::limits::LEASE_MS,
            &Limits::default(),
            None,
        )
    }

    /// [`Cluster::with`] whose client sessions live `lease_ms` without renewal.
    pub fn with_lease(n_data: usize, n_targets: usize, stripe: u32, lease_ms: u64) -> Cluster {
        Cluster::make(
            n_data,
            n_targets,
            stripe,
            false,
            lease_ms,
            &Limits::default(),
            None,
        )
    }

    /// Servers with chosen connection limits (for instance a short idle timeout).
    pub fn with_limits(n_data: usize, n_targets: usize, stripe: u32, limits: &Limits) -> Cluster {
        Cluster::make(
            n_data,
            n_targets,
            stripe,
            false,
            stripefs_rpc::limits::LEASE_MS,
            limits,
            None,
        )
    }

    /// `older`: every server is an [`Older`] one lacking these features.
    fn make(
        n_data: usize,
        n_targets: usize,
        stripe: u32,
        mem: bool,
        lease_ms: u64,
        limits: &Limits,
        older: Option<Option<Features>>,
    ) -> Cluster {
        let refused = Arc::new(AtomicU64::new(0));
        let serve_as = |svc: Arc<dyn Service>| -> Arc<dyn Service> {
            match older {
                None => svc,
                Some(lacks) => Arc::new(Older {
                    inner: svc,
                    lacks,
                    refused: refused.clone(),
                }),
            }
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let meta_l = bind();
        let data_l: Vec<TcpListener> = (0..n_data).map(|_| bind()).collect();
        let data_addrs = data_l
            .iter()
            .map(|l| DataServerEntry::new(l.local_addr().unwrap().to_string()))
            .collect();
        let config = ClusterConfig {
            timeout_ms: 10_000,
            defaults: Defaults {
                stripe_size_bytes: stripe,
                ..Defaults::default()
            },
            lease_ms,
            ..ClusterConfig::new(meta_l.local_addr().unwrap().to_string(), data_addrs)
        };
        let mut data = Vec::new();
        let mut targets = Vec::new();
        let mut servers = Vec::new();
        let mut stores = Vec::new();
        for (i, l) in data_l.into_iter().enumerate() {
            let t: Vec<PathBuf> = (0..n_targets)
                .map(|t| dir.path().join(format!("d{i}/t{t}")))
                .collect();
            for p in &t {
                std::fs::create_dir_all(p).unwrap();
            }
            let store = mem.then(|| Arc::new(MemStore::new()));
            let svc = match &store {
                None => DataService::open(stripefs_client::ServerId(i as u32), &t, None),
                Some(s) => mem_data(i, &t, s.clone()),
            }
            .expect("data service");
            stores.push(store);
            servers.push(Server::start(
                l,
                &config.secret,
                serve_as(svc.clone()),
                limits,
            ));
            data.push(svc);
            targets.push(t);
        }
        let meta_svc =
            MetaService::open(&dir.path().join("meta.redb"), &config).expect("meta service");
        let meta = Server::start(meta_l, &config.secret, serve_as(meta_svc), limits);
        Cluster {
            config,
            refused,
            data,
            targets,
            stores,
            servers,
            meta,
            dir,
        }
    }

    /// Connections the servers closed for being idle, metadata server first.
    pub fn idle_closed(&self) -> Vec<u64> {
        std::iter::once(&self.meta)
            .chain(&self.servers)
            .map(|s| s.stats.idle_closed.load(Ordering::Relaxed))
            .collect()
    }

    /// A client acting as root (test files are created in the root directory).
    pub fn client(&self) -> Client {
        Client::connect(&self.config)
            .expect("connect")
            .with_cred(Cred::root())
    }

    /// Stops data server `i` like a killed process: no new connections, and the
    /// established ones close (the rpc server checks for shutdown on connections idle
    /// for its 500 ms poll, hence the wait).
    pub fn stop_data(&mut self, i: usize) {
        self.servers[i].stop();
        std::thread::sleep(std::time::Duration::from_millis(800));
    }

    /// Cuts the power of in-memory data server `i` (unsynced writes lost or torn, as
    /// chosen by `seed`) and starts it again on the same address, with a new boot id.
    pub fn power_cut_data(&mut self, i: usize, seed: u64) {
        let store = self.stores[i].clone().expect("a cluster made by with_mem");
        self.servers[i].stop();
        // Connection threads notice the stop within the server's idle poll.
        std::thread::sleep(std::time::Duration::from_millis(800));
        store.crash(seed);
        let svc = mem_data(i, &self.targets[i], store).expect("data service");
        let l = TcpListener::bind(&self.config.data[i].addr).expect("rebind");
        self.servers[i] = Server::start(l, &self.config.secret, svc.clone(), &Limits::default());
        self.data[i] = svc;
    }

    /// Object files (data, checksums) of `ino` on data server `i`, target `t`.
    pub fn object_paths(&self, i: usize, t: usize, ino: InodeId) -> (PathBuf, PathBuf) {
        self.data[i].object_paths(t, ino)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for s in &mut self.servers {
            s.stop();
        }
        self.meta.stop();
    }
}

fn mem_data(i: usize, t: &[PathBuf], store: Arc<MemStore>) -> Result<Arc<DataService>, String> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    DataService::with_store(stripefs_client::ServerId(i as u32), t, None, store, clock)
}

pub fn hint(stripe: u32, count: u32) -> LayoutHint {
    LayoutHint {
        stripe_size_bytes: Some(stripe),
        stripe_count: Some(count),
        start_server: None,
        ..LayoutHint::default()
    }
}
