//! The stripefs metadata server: the namespace (directories, names, hard links,
//! symlinks), attributes, permissions and file layouts, kept in an embedded ACID store
//! (redb).
//!
//! Inodes and directory entries are separate tables, so an inode may have many names
//! (hard links) or none while a client keeps it open. Mutations are group-committed
//! (`writer.rs`): the operations queued meanwhile are applied together, logged as one
//! record of the metadata log with one synchronous write (`wal.rs`), and only then
//! published and answered. Readers see redb under the in-memory layers of logged changes
//! that background checkpoints have not yet written into redb (`overlay.rs`). Files
//! whose last link goes away are deleted in the same batch that puts their data objects
//! in a purge queue, emptied by a background thread (`purge.rs`).
//!
//! Invariants (checked by [`check`]): every entry names an existing inode of the
//! recorded type; link counts equal the names (plus subdirectories for directories);
//! every directory is reachable from the root; an inode without a name is an orphan
//! that is open or will be purged at the next start.
//!
//! The server takes its disk ([`MetaDisk`]: the log files and redb), its calls to data
//! servers ([`DataNet`]) and its clock ([`Clock`]) through traits, so that it runs
//! unchanged on the in-memory [`MemDisk`] (power cuts, torn writes, ENOSPC, EIO) and in
//! a whole-cluster simulator ([`MetaService::open_on`], [`Tuning::deterministic`]).
//!
//! Clients open files in sessions with leases (`sessions.rs`): a session not renewed in
//! time ends and its opens are released, so a vanished client holds nothing longer
//! than its lease.
//!
//! Fault model: the process may be killed at any moment; an acknowledged change is
//! committed, an unacknowledged one may or may not be, and the namespace is consistent
//! either way because each batch is one log record and each checkpoint one transaction.
//! Requests are untrusted: every inode number, name and type is checked, errors are
//! numbered codes with messages naming the inode, and no request can panic the server
//! (the writer also catches panics and fails only the batch). Data servers may be down:
//! purging retries later.

mod fsck;
mod heartbeat;
mod inline;
mod legacy;
pub mod logtool;
mod net;
mod opens;
mod ops;
mod overlay;
mod perm;
mod purge;
pub mod scope;
mod sessions;
mod store;
mod wal;
mod writer;
pub use writer::CARRY_WAIT;

pub use disk::{FsDisk, LogFile, MetaDisk};
pub use fsck::{check, check_on, inventory, Inventory, Report};
pub use net::{Answers, DataNet, TcpNet};
pub use purge::PURGE_BATCH;
pub use stripefs_sys::clock::{Clock, FixedClock, SystemClock, VirtualClock};
pub use stripefs_sys::memdisk::{
    BrokenRule, DiskCall, DiskFault, DiskFaultCounts, DiskOp, MemDisk, SECTOR_BYTES,
};
/// The metadata server's disk interface lives in the system-interface crate.
pub use stripefs_sys::metadisk as disk;
pub use writer::{
    CHECKPOINT_RETRY_MAX, CHECKPOINT_RETRY_MIN, FREEZE_AGE, FREEZE_BYTES, FREEZE_KEYS, MAX_BATCH,
    MAX_OVERLAY_KEYS, MAX_OVERLAY_LOG_BYTES,
};

use opens::Opens;
use ops::Placement;
use overlay::{Layers, View, Wr};
use redb::Database;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, RwLockReadGuard};
use std::time::Duration;
use store::{need, Inode, Rd, Tables};
use stripefs_rpc::{ClusterConfig, ConnInfo, Reply, Service};
use stripefs_wire::{
    AnyOp, Counters, Cred, Envelope, ErrorCode, FileType, InodeId, LayoutHint, MetaOp, MetaReadOp,
    MetaWriteOp, Response, Role, Route, Valid, WireError,
};
use writer::{Answer, Job, Writer};

/// Most inodes open at once across all clients (the open table is in memory).
pub const MAX_OPEN_INODES: usize = 1 << 20;

/// State shared by the service, the writer and the purge thread.
/// Longest a read waits for the database to be opened again after a failed checkpoint.
const REOPEN_WAIT: Duration = Duration::from_secs(2);

pub(crate) struct Core {
    /// The store of record; replaced by a fresh handle after a failed checkpoint (redb
    /// refuses every call after an I/O error until reopened).
    db: RwLock<Arc<Database>>,
    pub disk: Arc<dyn MetaDisk>,
    /// Changes durable in the metadata log but not yet in `db` (see `overlay.rs`).
    pub layers: RwLock<Layers>,
    pub path: std::path::PathBuf,
    pub opens: Opens,
    pub clock: Arc<dyn Clock>,
    pub placement: Placement,
    /// Set to stop committing (simulates a crash in tests, and ends service).
    pub halted: AtomicBool,
    pub stop_purge: AtomicBool,
    /// Set by a stop: the checkpoint thread stops retrying.
    pub stopping: AtomicBool,
    stop_signal: (Mutex<bool>, Condvar),
    /// The error of the last checkpoint, while checkpoints fail (back-pressure).
    ckpt_failure: Mutex<Option<WireError>>,
    kick: (Mutex<bool>, Condvar),
    /// Set (and notified) to end the lease sweeper.
    stop_sweep: (Mutex<bool>, Condvar),
    requests: AtomicU64,
    errors: AtomicU64,
    /// Batches committed and operations they carried (group commit ratio).
    pub commits: AtomicU64,
    pub committed_ops: AtomicU64,
    /// Checkpoints of the log into `db`.
    pub checkpoints: AtomicU64,
    pub tuning: Tuning,
    /// Set while the grace period after the start runs (see opens.rs `grace`); it ends
    /// at `grace_end` on the clock's monotonic time.
    in_grace: AtomicBool,
    grace_end: Duration,
    pub writer: Writer,
    /// Inline files whose bytes are moving to their data servers (`inline.rs`).
    pub moving: inline::Moving,
    /// The data servers, for the moves of inline files (the purger has its own).
    pub net: Arc<dyn DataNet>,
}

/// Knobs of the metadata server that tests and the simulator turn.
#[derive(Clone, Copy, Debug)]
pub struct Tuning {
    /// The active layer is checkpointed at the latest this long after the last freeze
    /// (zero: after every batch, whenever the previous checkpoint is done). Only with
    /// `background`.
    pub freeze_age: Duration,
    /// Background threads: a checkpoint thread (with the timer of `freeze_age`) and a
    /// purge thread. Without them (a deterministic simulator), checkpoints run on the
    /// committing thread when the layer is large ([`FREEZE_KEYS`], [`FREEZE_BYTES`]) or
    /// when asked ([`MetaService::checkpoint`]), failed ones are retried by later
    /// batches, and purging runs only in [`MetaService::purge_once`].
    pub background: bool,
    /// Back-pressure bounds: past these many changed keys in memory, or bytes in the
    /// current log file, while checkpoints fail, clients' mutations are refused.
    pub max_overlay_keys: usize,
    pub max_overlay_log_bytes: u64,
    /// Largest metadata-log record a batch may make; a larger batch is committed an
    /// operation at a time (at most the log's own limit, which readers enforce).
    pub max_log_record: usize,
    /// Owner (uid, gid) given to the root directory when a new database is made: by
    /// default the server process's effective ids, so that a user who starts a cluster
    /// without root privileges owns (and can write) its root, as root does when it
    /// starts one. An existing root keeps its owner.
    pub root_owner: (u32, u32),
    /// How long changes answered unsynced wait for a commit to take them along before
    /// the sync thread writes them ([`CARRY_WAIT`]).
    pub carry_wait: Duration,
    /// Fault point for tests: each metadata-log write waits this long first (zero: not
    /// at all), so that a test can act while a commit's write is in flight.
    pub log_write_delay: Duration,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            freeze_age: FREEZE_AGE,
            background: true,
            max_overlay_keys: MAX_OVERLAY_KEYS,
            max_overlay_log_bytes: MAX_OVERLAY_LOG_BYTES,
            max_log_record: wal::MAX_RECORD as usize - 1,
            // SAFETY: geteuid and getegid cannot fail.
            root_owner: unsafe { (libc::geteuid(), libc::getegid()) },
            carry_wait: CARRY_WAIT,
            log_write_delay: Duration::ZERO,
        }
    }
}

impl Tuning {
    /// No background thread and no timer: everything happens on the caller's thread,
    /// so that the same calls give the same run.
    pub fn deterministic() -> Tuning {
        Tuning {
            background: false,
            ..Tuning::default()
        }
    }
}

impl Core {
    /// The shared layers, read-locked; take it before `opens` when both are needed.
    pub fn layers(&self) -> RwLockReadGuard<'_, Layers> {
        self.layers.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The store of record (hold it only for the length of a request: a reopen waits
    /// for every holder).
    pub fn db(&self) -> Arc<Database> {
        self.db.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The store of record and a read transaction on it. Right after a failed checkpoint,
    /// until the database is opened again (`reopen_db`), redb refuses reads with
    /// "previous I/O error": such a read waits for the reopen (briefly) instead of
    /// failing, so that reads keep working while the disk is full.
    pub fn read_txn(&self) -> Result<(Arc<Database>, redb::ReadTransaction), WireError> {
        let mut waited = Duration::ZERO;
        loop {
            let db = self.db();
            match db.begin_read() {
                Ok(txn) => return Ok((db, txn)),
                Err(redb::TransactionError::Storage(redb::StorageError::PreviousIo))
                    if waited < REOPEN_WAIT =>
                {
                    drop(db);
                    std::thread::sleep(Duration::from_millis(2));
                    waited += Duration::from_millis(2);
                }
                Err(e) => return Err(store::io("starting a read", e)),
            }
        }
    }

    /// Replaces the database handle with a fresh one (after redb saw an I/O error, it
    /// refuses every call until reopened). Waits for the requests holding the old handle;
    /// on failure the old one stays (and the next failed checkpoint tries again).
    pub fn reopen_db(&self) -> Result<(), String> {
        let mut slot = self.db.write().unwrap_or_else(|p| p.into_inner());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while Arc::strong_count(&slot) > 1 {
            if std::time::Instant::now() >= deadline {
                return Err("requests still hold the database".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // The old handle must be gone before the file is opened again (redb locks it).
        let placeholder = Arc::new(
            redb::Builder::new()
                .create_with_backend(redb::backends::InMemoryBackend::new())
                .map_err(|e| e.to_string())?,
        );
        drop(std::mem::replace(&mut *slot, placeholder));
        match self.disk.open_db(&self.path) {
            Ok(db) => {
                *slot = Arc::new(db);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    pub fn checkpoint_failure(&self) -> Option<WireError> {
        self.ckpt_failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn set_checkpoint_failure(&self, e: Option<WireError>) {
        *self.ckpt_failure.lock().unwrap_or_else(|p| p.into_inner()) = e;
    }

    /// Wakes [`Core::wait_stop`].
    pub fn wake_stop(&self) {
        *self.stop_signal.0.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.stop_signal.1.notify_all();
    }

    /// Sleeps for `timeout` or until a stop.
    pub fn wait_stop(&self, timeout: Duration) {
        let s = self.stop_signal.0.lock().unwrap_or_else(|p| p.into_inner());
        let _ = self
            .stop_signal
            .1
            .wait_timeout_while(s, timeout, |stopped| !*stopped);
    }

    /// Runs `f` on a consistent view of the namespace.
    pub fn with_view<T>(
        &self,
        f: impl FnOnce(&View) -> Result<T, WireError>,
    ) -> Result<T, WireError> {
        let layers = self.layers();
        // Begun under the lock (see overlay.rs).
        let (_db, txn) = self.read_txn()?;
        let rd = Rd::open(&txn)?;
        f(&View::new(&layers, &rd))
    }

    pub fn kick_purge(&self) {
        let mut k = self.kick.0.lock().unwrap_or_else(|p| p.into_inner());
        *k = true;
        self.kick.1.notify_all();
    }

    /// Sleeps until kicked or `timeout` passes.
    pub fn wait_for_kick(&self, timeout: Duration) {
        let k = self.kick.0.lock().unwrap_or_else(|p| p.into_inner());
        let (mut k, _) = self
            .kick
            .1
            .wait_timeout_while(k, timeout, |k| !*k)
            .unwrap_or_else(|p| p.into_inner());
        *k = false;
    }
}

/// The file an Open names: an inode, or a path resolved as open(2) does.
enum Target<'a> {
    Ino(u64),
    Path(&'a str),
}

/// The metadata service: a [`Service`] for the rpc server loop.
pub struct MetaService {
    core: Arc<Core>,
    purge: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The purger, when no thread runs it (see [`MetaService::purge_once`]).
    purger: Mutex<Option<purge::Purger>>,
    /// Ends sessions whose lease ran out (`sweep_leases`).
    sweep: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Pings the data servers (`heartbeat.rs`).
    heartbeat: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Scoped tokens: their subtrees, the files they reached, the revoked ones.
    scopes: scope::Scopes,
}

impl MetaService {
    /// Opens (creating if new, with a root dir ino 1 mode 0755 owned by 0:0) the redb
    /// database.
    /// Fault injection for tests: `STRIPEFS_FAULT_CARRY_WAIT_MS=N` makes the sync thread
    /// wait N ms (not [`CARRY_WAIT`]) before it writes changes answered unsynced, so
    /// that a kill in between loses them for certain.
    pub fn open(db: &Path, cluster: &ClusterConfig) -> Result<Arc<MetaService>, String> {
        let mut tuning = Tuning::default();
        const FAULT: &str = "STRIPEFS_FAULT_CARRY_WAIT_MS";
        if let Ok(v) = std::env::var(FAULT) {
            let ms: u64 = v
                .parse()
                .map_err(|_| format!("{FAULT}={v}: expected a number of milliseconds"))?;
            tracing::warn!("fault injection {FAULT}={ms} is on");
            tuning.carry_wait = Duration::from_millis(ms);
        }
        MetaService::open_tuned(db, cluster, Arc::new(SystemClock), tuning)
    }

    /// [`MetaService::open`] with a chosen clock (tests fix time).
    pub fn open_with_clock(
        path: &Path,
        cluster: &ClusterConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<MetaService>, String> {
        MetaService::open_tuned(path, cluster, clock, Tuning::default())
    }

    /// [`MetaService::open_with_clock`] with chosen [`Tuning`].
    pub fn open_tuned(
        path: &Path,
        cluster: &ClusterConfig,
        clock: Arc<dyn Clock>,
        tuning: Tuning,
    ) -> Result<Arc<MetaService>, String> {
        let net = Arc::new(TcpNet::new(cluster));
        MetaService::open_on(Arc::new(FsDisk), net, clock, path, cluster, tuning)
    }

    /// The service on a chosen disk, network (to data servers) and clock, with the
    /// database at `path` on that disk: what a simulator runs. After a simulated power
    /// cut (`MemDisk::power_cut`, then dropping the old service), opening again on the
    /// same disk recovers as a real restart does.
    pub fn open_on(
        disk: Arc<dyn MetaDisk>,
        net: Arc<dyn DataNet>,
        clock: Arc<dyn Clock>,
        path: &Path,
        cluster: &ClusterConfig,
        tuning: Tuning,
    ) -> Result<Arc<MetaService>, String> {
        stripefs_rpc::config::check_lease(cluster.lease_ms)?;
        // redb asserts on some damage it finds while opening a file: a damaged database
        // is an error that names it, not a crash.
        let db = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| disk.open_db(path)))
            .unwrap_or_else(|p| Err(damaged(path, p)))?;
        let placement = Placement {
            data_servers: cluster.data.len() as u32,
            defaults: cluster.defaults,
            hosts: cluster.data.iter().map(|d| d.host.clone()).collect(),
            addrs: cluster
                .data
                .iter()
                .map(|d| d.advertise.clone().unwrap_or_else(|| d.addr.clone()))
                .collect(),
            live: Arc::new(heartbeat::Liveness::new(cluster.data.len())),
        };
        let fail = |e: WireError| format!("metadata database {}: {e}", path.display());
        // Recovery replays the log into redb, which asserts on some damage too: a panic
        // there is the same error as above.
        let recovered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let last = recover(disk.as_ref(), &db, path).map_err(fail)?;
            let earlier = init(&db, clock.now_ns(), last, tuning.root_owner).map_err(fail)?;
            Ok::<_, String>((last, earlier))
        }))
        .unwrap_or_else(|p| Err(damaged(path, p)));
        let (last, earlier) = match recovered {
            Ok(r) => r,
            Err(e) => {
                // redb writes its allocator state when the handle is dropped, and may
                // assert on the damage there too (seen in the power-cut canary test).
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(db)));
                return Err(e);
            }
        };
        let wal = wal::Wal::open(disk.as_ref(), path, last).map_err(fail)?;
        let grace_end = clock.monotonic() + Duration::from_millis(cluster.lease_ms);
        let core = Arc::new(Core {
            db: RwLock::new(Arc::new(db)),
            disk,
            layers: RwLock::new(Layers::default()),
            path: path.to_path_buf(),
            opens: Opens::new(Duration::from_millis(cluster.lease_ms), earlier),
            clock,
            placement,
            halted: AtomicBool::new(false),
            stop_purge: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            stop_signal: (Mutex::new(false), Condvar::new()),
            ckpt_failure: Mutex::new(None),
            kick: (Mutex::new(true), Condvar::new()),
            stop_sweep: (Mutex::new(false), Condvar::new()),
            requests: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            committed_ops: AtomicU64::new(0),
            checkpoints: AtomicU64::new(0),
            tuning,
            in_grace: AtomicBool::new(earlier.is_some()),
            grace_end,
            writer: Writer::new(),
            moving: inline::Moving::default(),
            net: net.clone(),
        });
        let scopes = scope::Scopes::new(core.disk.clone(), path)?;
        Writer::start(&core, wal)?;
        let purger = purge::Purger::new(core.clone(), net);
        if !tuning.background {
            return Ok(Arc::new(MetaService {
                core,
                purge: Mutex::new(None),
                purger: Mutex::new(Some(purger)),
                sweep: Mutex::new(None),
                heartbeat: Mutex::new(None),
                scopes,
            }));
        }
        let purge = std::thread::Builder::new()
            .name("meta-purge".into())
            .spawn(move || purger.run());
        let purge = match purge {
            Ok(t) => t,
            Err(e) => {
                Writer::stop(&core);
                return Err(format!("cannot start the purge thread: {e}"));
            }
        };
        let service = MetaService {
            core: core.clone(),
            purge: Mutex::new(Some(purge)),
            purger: Mutex::new(None),
            sweep: Mutex::new(None),
            heartbeat: Mutex::new(None),
            scopes,
        };
        let sweep = std::thread::Builder::new()
            .name("meta-leases".into())
            .spawn(move || sweep_leases(&core));
        // On failure, dropping the service stops the purge thread and the writer.
        *lock(&service.sweep) =
            Some(sweep.map_err(|e| format!("cannot start the lease thread: {e}"))?);
        // Its own connections, with a short timeout: a ping never waits behind the
        // purger's or a move's call, nor for a dead server's TCP timeout.
        let mut short = cluster.clone();
        short.timeout_ms = heartbeat::PING_TIMEOUT.as_millis() as u64;
        let ping_net = TcpNet::new(&short);
        let core = service.core.clone();
        let heartbeat = std::thread::Builder::new()
            .name("meta-heartbeat".into())
            .spawn(move || {
                heartbeat::run(&core.placement.live, &ping_net, |every| {
                    let stop = lock(&core.stop_sweep.0);
                    let (stop, _) = core
                        .stop_sweep
                        .1
                        .wait_timeout_while(stop, every, |s| !*s)
                        .unwrap_or_else(|p| p.into_inner());
                    *stop
                })
            });
        *lock(&service.heartbeat) =
            Some(heartbeat.map_err(|e| format!("cannot start the heartbeat thread: {e}"))?);
        Ok(Arc::new(service))
    }

    /// Ends the sessions whose lease ran out, now (without the lease thread, see
    /// [`Tuning::background`]).
    pub fn sweep_once(&self) {
        sweep_overdue(&self.core);
    }

    /// Ends the grace period after the start once a lease has passed: orphans no client
    /// reclaimed are reaped (their objects purged).
    fn end_grace_if_due(&self) {
        if self.core.clock.monotonic() < self.core.grace_end
            || !self.core.in_grace.swap(false, Ordering::SeqCst)
        {
            return;
        }
        self.core.opens.lock().grace = false;
        let orphans = match self.core.with_view(|v| v.stack().orphans()) {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!("end of the grace period: cannot list orphans: {e}");
                return;
            }
        };
        if !orphans.is_empty() {
            tracing::info!(
                "grace period over: reaping {} orphans no client reclaimed",
                orphans.len()
            );
        }
        for ino in orphans {
            if let Err(e) = self.submit(Job::Reap(ino)) {
                tracing::warn!("reaping orphan inode {ino}: {e}");
            }
        }
    }

    /// Client sessions open now.
    pub fn sessions(&self) -> usize {
        self.core.opens.lock().sessions.len()
    }

    /// Inodes open in some session now.
    pub fn open_files(&self) -> u64 {
        self.core.opens.open_files()
    }

    /// Writes everything acknowledged so far into the tables (a checkpoint), on the
    /// caller's thread; fails while checkpoints fail (a full disk), without waiting.
    pub fn checkpoint(&self) -> Result<(), WireError> {
        self.submit(Job::Checkpoint).map(|_| ())
    }

    /// One purge round on the caller's thread (only without the purge thread, see
    /// [`Tuning::background`]): removes the data objects of the deleted files that are
    /// due; returns how many files were purged.
    pub fn purge_once(&self) -> Result<usize, WireError> {
        let mut p = self.purger.lock().unwrap_or_else(|p| p.into_inner());
        match p.as_mut() {
            Some(p) => p.round_once(),
            None => Err(WireError::new(
                ErrorCode::InvalidArgument,
                "purging runs on its own thread in this service (Tuning::background)",
            )),
        }
    }

    /// The error of the last checkpoint while checkpoints fail, `None` when they work.
    pub fn checkpoint_failure(&self) -> Option<WireError> {
        self.core.checkpoint_failure()
    }

    /// Stops committing at once, as a crash would: queued and later mutations fail with
    /// `Busy`. Whatever was acknowledged as durable is durable (a close's inline bytes
    /// not yet written are lost, as in a crash).
    pub fn halt(&self) {
        self.core.halted.store(true, Ordering::SeqCst);
    }

    /// Runs [`check`] on the live database: checkpoints everything acknowledged so far,
    /// then checks a snapshot of the tables.
    pub fn check(&self) -> Result<Report, String> {
        self.submit(Job::Checkpoint).map_err(|e| e.to_string())?;
        fsck::check_db(&self.core.db())
    }

    /// Checkpoints of the metadata log into the tables so far.
    pub fn checkpoints(&self) -> u64 {
        self.core.checkpoints.load(Ordering::Relaxed)
    }

    /// Log records (batches) committed so far and the operations they carried.
    pub fn commit_stats(&self) -> (u64, u64) {
        (
            self.core.commits.load(Ordering::Relaxed),
            self.core.committed_ops.load(Ordering::Relaxed),
        )
    }

    /// Files whose data objects still wait for removal from the data servers.
    pub fn purge_queue_len(&self) -> Result<u64, String> {
        self.core
            .with_view(|v| Ok(v.stack().purge_entries(usize::MAX)?.len() as u64))
            .map_err(|e| e.to_string())
    }

    fn dispatch(&self, env: Envelope, host: Option<&str>) -> Answer {
        let Envelope { cred, req } = env;
        if self.core.halted.load(Ordering::SeqCst) {
            return Err(WireError::new(
                ErrorCode::Busy,
                "metadata server is stopping",
            ));
        }
        match req.route() {
            Route::AnyOp(AnyOp::Ping {}) => Ok(Response::Pong {
                role: Role::Meta,
                server_id: None,
                version: env!("CARGO_PKG_VERSION").to_string(),
            }),
            // The rpc layer serves these; any that reaches a service is out of place.
            Route::ConnectionOp(op) => Err(WireError::new(
                ErrorCode::UnexpectedMessage,
                format!(
                    "{} is not for this point of a connection",
                    op.opcode().name()
                ),
            )),
            Route::DataOp(op) => Err(WireError::new(
                ErrorCode::Unsupported,
                format!(
                    "the metadata server does not serve {} (a data server does)",
                    op.opcode().name()
                ),
            )),
            Route::SameHostOp(op) => Err(WireError::new(
                ErrorCode::Unsupported,
                format!(
                    "the metadata server does not serve {} (a data server's short-circuit socket does)",
                    op.opcode().name()
                ),
            )),
            Route::MetaReadOp(op) => self.read(&cred, &op),
            Route::MetaWriteOp(req) => self.submit(Job::Client {
                cred,
                req,
                host: host.map(str::to_string),
            }),
            Route::MetaOp(op) => self.direct(cred, op, host),
        }
    }

    /// The metadata server's operations that are neither reads of a snapshot nor
    /// changes through the writer.
    fn direct(&self, cred: Cred, op: MetaOp, host: Option<&str>) -> Answer {
        match op {
            MetaOp::Open {
                ino,
                session,
                read,
                write,
            } => self.open_file(&cred, Target::Ino(ino.0), session, read, write, true),
            MetaOp::OpenPath {
                path,
                session,
                read,
                write,
            } => self.open_file(&cred, Target::Path(&path), session, read, write, true),
            MetaOp::CreateOpen {
                parent,
                name,
                mode,
                exclusive,
                layout,
                session,
                read,
                write,
            } => {
                // Refused before the file is made; open_file checks again under the lock.
                self.core
                    .opens
                    .lock()
                    .sessions
                    .get(session, self.core.clock.monotonic())?;
                let create = MetaWriteOp::Create {
                    parent,
                    name: name.clone(),
                    mode,
                    exclusive: true,
                    layout,
                };
                match self.submit(Job::Client {
                    cred: cred.clone(),
                    req: create,
                    host: host.map(str::to_string),
                }) {
                    // The creator may use the access it asked for whatever the new mode
                    // says (open(2) with O_CREAT), so no permission check here.
                    Ok(Response::Attr(a)) => {
                        self.open_file(&cred, Target::Ino(a.ino.0), session, read, write, false)
                    }
                    Err(e) if e.code == ErrorCode::Exists && !exclusive => {
                        let ino = match self.read(&cred, &MetaReadOp::Lookup { parent, name })? {
                            Response::Attr(a) if a.ftype == FileType::File => a.ino.0,
                            Response::Attr(a) if a.ftype == FileType::Dir => {
                                return Err(WireError::new(
                                    ErrorCode::IsDir,
                                    format!("inode {} is a directory", a.ino.0),
                                ))
                            }
                            Response::Attr(a) => {
                                return Err(WireError::new(
                                    ErrorCode::Unsupported,
                                    format!("inode {} is not a regular file", a.ino.0),
                                ))
                            }
                            other => return Ok(other),
                        };
                        self.open_file(&cred, Target::Ino(ino), session, read, write, true)
                    }
                    other => other,
                }
            }
            MetaOp::Close { ino, session } => self.close_file(ino.0, session),
            MetaOp::Uninline { ino } => {
                inline::uninline(&self.core, self.core.net.as_ref(), &cred, ino.0)
            }
            MetaOp::SessionOpen {} => {
                let mut st = self.core.opens.lock();
                let session = st.sessions.open(self.core.clock.monotonic())?;
                let lease_ms = st.sessions.lease().as_millis() as u64;
                drop(st);
                tracing::debug!("session {session:#x} opened");
                Ok(Response::Session { session, lease_ms })
            }
            MetaOp::SessionRenew { session } => {
                let mut st = self.core.opens.lock();
                match st.sessions.renew(session, self.core.clock.monotonic()) {
                    Ok(()) => Ok(Response::Session {
                        session,
                        lease_ms: st.sessions.lease().as_millis() as u64,
                    }),
                    Err(e) => {
                        // Past its lease: it ends now, whether or not the sweep came.
                        drop(st);
                        end_session(&self.core, session, "its lease ran out");
                        Err(e)
                    }
                }
            }
            MetaOp::SessionEnd { session } => {
                end_session(&self.core, session, "the client ended it");
                Ok(Response::Done)
            }
            // Batches are written to the log in order, each before the next is applied:
            // once this one's turn comes, everything answered before it is durable.
            // A session of another start: what this server's predecessor answered
            // unsynced may be lost, which the fsync must report, not bless.
            MetaOp::SyncMeta { session }
                if session != 0 && !self.core.opens.lock().sessions.started_here(session) =>
            {
                Err(WireError::new(
                    ErrorCode::ServerRestarted,
                    format!(
                        "the metadata server restarted since it answered changes of session \
                         {session:#x} before they were durable (a close's bytes or size); \
                         they may be lost"
                    ),
                ))
            }
            MetaOp::SyncMeta { .. } => self.submit(Job::Sync),
            MetaOp::MetaStatus {} => self.status(),
            MetaOp::DataServers {} => {
                let p = &self.core.placement;
                Ok(Response::DataServers {
                    servers: p
                        .addrs
                        .iter()
                        .cloned()
                        .zip(p.hosts.iter().cloned())
                        .collect(),
                })
            }
            MetaOp::TokenRevoke { id } => self.scopes.revoke(id).map(|()| Response::Done),
            MetaOp::TokenAllows { token, fid, write } => {
                stripefs_rpc::token::Token::from_payload(&token)
                    .map_err(|e| WireError::new(ErrorCode::InvalidArgument, e))
                    .and_then(|t| self.scopes.allows(&t, self, fid.0, write))
                    .map(|()| Response::Done)
            }
        }
    }

    fn read(&self, cred: &Cred, req: &MetaReadOp) -> Answer {
        self.core.with_view(|rd| Self::read_in(rd, cred, req))
    }

    fn read_in(rd: &View, cred: &Cred, req: &MetaReadOp) -> Answer {
        use ops::read;
        match req {
            MetaReadOp::Lookup { parent, name } => read::lookup(rd, cred, parent.0, name),
            MetaReadOp::GetAttr { ino } => read::get_attr(rd, ino.0),
            MetaReadOp::Resolve { path, follow } => read::resolve(rd, cred, path, *follow),
            MetaReadOp::Readlink { ino } => read::readlink(rd, ino.0),
            MetaReadOp::ReadDir { ino, after, limit } => {
                read::read_dir(rd, cred, ino.0, after, *limit)
            }
            MetaReadOp::ReadDirPlus { ino, after, limit } => {
                read::read_dir_plus(rd, cred, ino.0, after, *limit)
            }
            MetaReadOp::Access { ino, mask } => read::access(rd, cred, ino.0, *mask),
            MetaReadOp::ReadInline { ino } => inline::read(rd, cred, ino.0),
            MetaReadOp::GetXattr { ino, name } => ops::xattr::get(rd, cred, ino.0, name),
            MetaReadOp::ListXattr { ino } => ops::xattr::list(rd, cred, ino.0),
            MetaReadOp::Statfs {} => Ok(Response::Statfs {
                inodes: rd.stack().inode_count()?,
                files: rd.counter(store::META_FILES)?,
                dirs: rd.counter(store::META_DIRS)?,
            }),
        }
    }

    /// Commits a mutation (group commit, see writer.rs) and returns its answer.
    fn submit(&self, job: Job) -> Answer {
        Writer::submit(&self.core, job)
    }

    /// Counts an open of `target` by `session`, after checking `read`/`write` access
    /// against the mode when `check` (a file just created by this caller is not checked).
    fn open_file(
        &self,
        cred: &Cred,
        target: Target,
        session: u64,
        read: bool,
        write: bool,
        check: bool,
    ) -> Answer {
        // The lock is held across the read so that the writer cannot decide "not open,
        // delete" between our check and our count (see opens.rs). The layers are locked
        // first, as the writer does.
        let layers = self.core.layers();
        let (_db, txn) = self.core.read_txn()?;
        let rd = Rd::open(&txn)?;
        let view = View::new(&layers, &rd);
        // A path is resolved in the same view the open is counted in, so that the file
        // cannot be removed in between.
        let ino = match target {
            Target::Ino(ino) => ino,
            Target::Path(path) => match ops::read::resolve(&view, cred, path, true)? {
                Response::Attr(a) => a.ino.0,
                other => {
                    return Err(WireError::new(
                        ErrorCode::Internal,
                        format!("Resolve answered {other:?}"),
                    ))
                }
            },
        };
        let mut st = self.core.opens.lock();
        let gone = || {
            WireError::new(
                ErrorCode::StaleHandle,
                format!("inode {ino} does not exist"),
            )
        };
        if st.dying.contains(&ino) {
            return Err(gone());
        }
        let inode = need(&view, ino)?;
        // Only regular files are opened here (the client's File); refused before the
        // permission check, as open(2) answers EISDIR before EACCES.
        match inode.ftype {
            FileType::File => {}
            FileType::Dir => {
                return Err(WireError::new(
                    ErrorCode::IsDir,
                    format!("open inode {ino}: is a directory"),
                ))
            }
            _ => {
                return Err(WireError::new(
                    ErrorCode::Unsupported,
                    format!("open inode {ino}: not a regular file"),
                ))
            }
        }
        if check {
            check_open(cred, ino, &inode, read, write)?;
        }
        // An orphan can be opened again only by a client reclaiming its open after a
        // restart, within the grace period; it is reaped at its last close.
        let reclaim = inode.nlink == 0 && !st.is_open(ino);
        if reclaim && !st.may_be_reclaimed(ino) {
            return Err(gone());
        }
        if st.open.len() >= MAX_OPEN_INODES && !st.open.contains_key(&ino) {
            return Err(WireError::new(
                ErrorCode::Busy,
                format!("{MAX_OPEN_INODES} inodes are open; cannot open inode {ino}"),
            ));
        }
        st.sessions
            .get(session, self.core.clock.monotonic())?
            .inodes
            .insert(ino);
        let entry = st.open.entry(ino).or_default();
        *entry.sessions.entry(session).or_default() += 1;
        if reclaim {
            // Reaped at the last close, as if unlinked while open.
            entry.unlinked = true;
        }
        // Inline bytes go to readers only (a write-only opener may not read them).
        Ok(Response::Attr(if read {
            inode.attr_with_data(ino)
        } else {
            inode.attr(ino)
        }))
    }

    fn close_file(&self, ino: u64, session: u64) -> Answer {
        let reap = {
            let mut st = self.core.opens.lock();
            // A Close in an ended session finds its open released already.
            st.sessions.get(session, self.core.clock.monotonic())?;
            let not_open = || {
                WireError::new(
                    ErrorCode::BadHandle,
                    format!("inode {ino} is not open in session {session}"),
                )
            };
            let entry = st.open.get_mut(&ino).ok_or_else(not_open)?;
            let count = entry.sessions.get_mut(&session).ok_or_else(not_open)?;
            *count -= 1;
            let session_done = *count == 0;
            if session_done {
                entry.sessions.remove(&session);
            }
            let last = entry.sessions.is_empty();
            let unlinked = entry.unlinked;
            if last {
                st.open.remove(&ino);
            }
            if session_done {
                if let Ok(s) = st.sessions.get(session, self.core.clock.monotonic()) {
                    s.inodes.remove(&ino);
                }
            }
            last && unlinked
        };
        if reap {
            self.submit(Job::Reap(ino))?;
        }
        Ok(Response::Done)
    }

    fn status(&self) -> Answer {
        let (inodes, files, dirs) = self.core.with_view(|v| {
            Ok((
                v.stack().inode_count()?,
                v.counter(store::META_FILES)?,
                v.counter(store::META_DIRS)?,
            ))
        })?;
        Ok(Response::MetaStatus {
            inodes,
            files,
            dirs,
            open_files: self.core.opens.open_files(),
            db_bytes: self.core.disk.file_bytes(&self.core.path),
            counters: Counters {
                requests: self.core.requests.load(Ordering::Relaxed),
                errors: self.core.errors.load(Ordering::Relaxed),
                bytes_read: 0,
                bytes_written: 0,
                write_requests: 0,
            },
        })
    }
}

fn check_open(
    cred: &Cred,
    ino: u64,
    inode: &Inode,
    read: bool,
    write: bool,
) -> Result<(), WireError> {
    match inode.ftype {
        FileType::Dir if write => {
            return Err(WireError::new(
                ErrorCode::IsDir,
                format!("inode {ino} is a directory: cannot open it for writing"),
            ))
        }
        FileType::Symlink => {
            return Err(WireError::new(
                ErrorCode::Loop,
                format!("inode {ino} is a symbolic link: resolve it before opening"),
            ))
        }
        _ => {}
    }
    let mask = if read { perm::R } else { 0 } | if write { perm::W } else { 0 };
    perm::check(cred, inode, ino, mask)
}

impl scope::Namespace for MetaService {
    fn dir_parent(&self, ino: u64) -> Result<Option<u64>, WireError> {
        let inode = self.core.with_view(|v| need(v, ino))?;
        Ok((inode.ftype == FileType::Dir).then_some(inode.parent))
    }

    fn resolve(&self, path: &str) -> Result<u64, WireError> {
        let req = MetaReadOp::Resolve {
            path: path.to_string(),
            follow: true,
        };
        match self.read(&Cred::root(), &req)? {
            Response::Attr(a) => Ok(a.ino.0),
            other => Err(WireError::new(
                ErrorCode::Internal,
                format!("Resolve answered {other:?}"),
            )),
        }
    }

    fn lookup(&self, parent: u64, name: &str) -> Result<u64, WireError> {
        let req = MetaReadOp::Lookup {
            parent: InodeId(parent),
            name: name.to_string(),
        };
        match self.read(&Cred::root(), &req)? {
            Response::Attr(a) => Ok(a.ino.0),
            other => Err(WireError::new(
                ErrorCode::Internal,
                format!("Lookup answered {other:?}"),
            )),
        }
    }
}

impl MetaService {
    /// A request made with a scoped token: checked against its tree and mode before,
    /// and its answer after (which also records the files it reached).
    fn scoped(&self, t: &stripefs_rpc::token::Token, env: Envelope, host: Option<&str>) -> Answer {
        self.scopes.authorize(t, self, &env.req)?;
        let req = env.req.clone();
        let answer = self.dispatch(env, host)?;
        self.scopes.admit(t, self, &req, &answer)?;
        Ok(answer)
    }
}

impl Service for MetaService {
    fn stop(&self) {
        self.shut_down();
    }

    fn check_token(&self, t: &stripefs_rpc::token::Token) -> Result<(), WireError> {
        self.scopes.check_revoked(t)
    }

    fn handle(&self, conn: &ConnInfo, req: Valid, _data: &[u8]) -> Reply {
        let env = req.into_env();
        if env.req.opcode().counted() {
            self.core.requests.fetch_add(1, Ordering::Relaxed);
        }
        if self.core.in_grace.load(Ordering::Relaxed) {
            self.end_grace_if_due();
        }
        let answer = match &conn.token {
            Some(t) => self.scoped(t, env, conn.host.as_deref()),
            None => self.dispatch(env, conn.host.as_deref()),
        };
        if answer.is_err() {
            self.core.errors.fetch_add(1, Ordering::Relaxed);
        }
        Reply::from_result(answer)
    }
}

impl Drop for MetaService {
    fn drop(&mut self) {
        self.shut_down();
    }
}

impl MetaService {
    /// Stops the background threads and the writer: what was answered before it is
    /// durable afterwards (the carried changes of closes included), and later changes
    /// are refused. Called by the server at a graceful stop, when the process may end
    /// with connection threads still holding the service, and again (doing nothing) by
    /// `Drop`.
    fn shut_down(&self) {
        // The purge thread commits through the writer, so it stops first; then the
        // writer checkpoints and ends its checkpoint thread, and the database closes
        // with the last `Core`.
        *lock(&self.core.stop_sweep.0) = true;
        self.core.stop_sweep.1.notify_all();
        if let Some(sweep) = lock(&self.sweep).take() {
            let _ = sweep.join();
        }
        if let Some(heartbeat) = lock(&self.heartbeat).take() {
            let _ = heartbeat.join();
        }
        self.core.stop_purge.store(true, Ordering::SeqCst);
        self.core.kick_purge();
        if let Some(purge) = lock(&self.purge).take() {
            let _ = purge.join();
        }
        Writer::stop(&self.core);
    }
}

/// The error for a panic of redb while opening or recovering the database at `path`.
fn damaged(path: &Path, p: Box<dyn std::any::Any + Send>) -> String {
    let what = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into());
    format!(
        "metadata database {} is damaged ({what}); see `stripefs meta-log check`",
        path.display()
    )
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Ends session `id` (if it is still there) and releases its opens; unlinked files whose
/// last open this was are reaped (purged).
fn end_session(core: &Core, id: u64, why: &str) {
    let reap = {
        let mut st = core.opens.lock();
        let Some(session) = st.sessions.end(id) else {
            return;
        };
        tracing::info!(
            "session {id:#x} ended ({why}): releasing its opens of {} inodes",
            session.inodes.len()
        );
        st.release(id, session)
    };
    for ino in reap {
        // On failure the inode stays an orphan, purged at the next start.
        if let Err(e) = Writer::submit(core, Job::Reap(ino)) {
            tracing::warn!("reaping inode {ino} after its session ended: {e}");
        }
    }
}

/// The lease sweeper: ends the sessions whose lease ran out, checking four times per
/// lease (at most once a second, at least every 10 ms), until the service stops.
fn sweep_leases(core: &Core) {
    let lease = core.opens.lock().sessions.lease();
    let every = (lease / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    loop {
        let stop = lock(&core.stop_sweep.0);
        let (stop, _) = core
            .stop_sweep
            .1
            .wait_timeout_while(stop, every, |s| !*s)
            .unwrap_or_else(|p| p.into_inner());
        if *stop {
            return;
        }
        drop(stop);
        sweep_overdue(core);
    }
}

/// Ends every session whose lease ran out.
fn sweep_overdue(core: &Core) {
    let overdue = core.opens.lock().sessions.overdue(core.clock.monotonic());
    for id in overdue {
        end_session(core, id, "its lease ran out without a renewal");
    }
}

/// Brings the tables up to date with the metadata log (see `wal.rs`) after a crash;
/// returns the number of the last log record, which the tables now include.
fn recover(disk: &dyn MetaDisk, db: &Database, path: &Path) -> Result<u64, WireError> {
    store::create_tables(db)?;
    let checkpoint = {
        let txn = db
            .begin_read()
            .map_err(|e| store::io("starting a read", e))?;
        Rd::open(&txn)?.counter(store::META_WAL_SEQ)?
    };
    let (gen, last, records) = wal::recover(disk, path, checkpoint)?;
    if records > 0 {
        store::commit_gen(db, &gen, last)?;
        tracing::info!(
            "metadata log: replayed {records} records ({} changes) after record {checkpoint}",
            gen.len()
        );
    }
    Ok(last)
}

/// Creates the root of a new database, owned by `owner` (uid, gid); returns the first
/// inode number this start will give, or `None` for a new database (no client of an
/// earlier start can exist).
fn init(
    db: &Database,
    now_ns: i64,
    last: u64,
    owner: (u32, u32),
) -> Result<Option<u64>, WireError> {
    let layers = Layers::default();
    let txn = db.begin_read().map_err(|e| store::io("starting init", e))?;
    let rd = Rd::open(&txn)?;
    let mut w = Wr::new(View::new(&layers, &rd));
    let earlier = if w.inode(InodeId::ROOT.0)?.is_some() {
        Some(w.counter(store::META_NEXT_INO)?)
    } else {
        None
    };
    if earlier.is_none() {
        let root = Inode {
            ftype: FileType::Dir,
            mode: 0o755,
            nlink: 2,
            uid: owner.0,
            gid: owner.1,
            size: 0,
            atime_ns: now_ns,
            mtime_ns: now_ns,
            ctime_ns: now_ns,
            layout: None,
            dir_layout: LayoutHint::default(),
            target: None,
            parent: InodeId::ROOT.0,
            rdev: 0,
            inline: None,
            xattrs: Vec::new(),
        };
        w.put_inode(InodeId::ROOT.0, &root)?;
        w.set_counter(store::META_NEXT_INO, 2)?;
        w.set_counter(store::META_DIRS, 1)?;
    }
    // Orphans (unlinked while open) are kept: their clients reclaim them within the
    // grace period, and those nobody reclaims are reaped when it ends.
    if !w.delta.is_empty() {
        store::commit_gen(db, &w.delta, last)?;
    }
    Ok(earlier)
}

/// Binds cfg.listen_addr(Role::Meta), opens cfg.db (error if None), serves until
/// shutdown.
pub fn run(cfg: &stripefs_rpc::ServerConfig, shutdown: Arc<AtomicBool>) -> Result<(), String> {
    let db = cfg
        .db
        .as_ref()
        .ok_or("the metadata server's config needs `db` (the database file)")?;
    let addr = cfg.listen_addr(Role::Meta)?;
    let host = cfg.host_id(Role::Meta)?;
    let service = MetaService::open(db, &cfg.cluster)?;
    let listener = std::net::TcpListener::bind(&addr)
        .map_err(|e| format!("metadata server cannot listen on {addr}: {e}"))?;
    tracing::info!(
        "metadata server on host {host}, {addr}, database {}",
        db.display()
    );
    let tls = cfg
        .cluster
        .tls
        .server()
        .map_err(|e| format!("metadata server: {e}"))?;
    stripefs_rpc::serve_tls(
        listener,
        cfg.cluster.secret.clone(),
        service,
        shutdown,
        stripefs_rpc::Limits::default(),
        Default::default(),
        tls,
    )
    .map_err(|e| format!("metadata server on {addr}: {e}"))
}
