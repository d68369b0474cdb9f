//! The data server's request handlers.
//!
//! This file holds the [`DataService`] itself: its state, [`Options`], how it is
//! opened (target directories, the direct-write fence), where objects live on a
//! target (paths, listing) and how they are opened and cached (with their logs
//! replayed). The handlers are split by what they do, each file an `impl DataService`:
//!
//! - `dispatch.rs`: the [`Service`](stripefs_rpc::Service) entry point, scoped-token
//!   checks, the request dispatch and the status and locality counters;
//! - `write.rs`: writes and write lists from TCP and the same-host pipe, checked in
//!   transit, unit by unit under block-range locks, with the object log's bound;
//! - `direct.rs`: same-host direct-write grants (`direct_begin`, `direct_done`,
//!   `direct_abandon`, [`DirectGrant`]);
//! - `read.rs`: reads, through memory or zero-copy (`sendfile`);
//! - `space.rs`: targets' size and free bytes, allocation, punching holes, seeking
//!   data and holes;
//! - `sync.rs`: fsync (with directory syncs of new names), truncate, remove, dropping
//!   cached pages;
//! - `scrub.rs`: scrubbing objects against their checksums, on request and in the
//!   background.

use crate::cache::{Key, Object, ObjectCache};
use crate::intent::IntentLog;
use crate::locks::RangeLocks;
use crate::object::{self, Ctx, BLOCK};
use crate::throttle::Throttle;
use crate::Canary;
use crate::{Clock, SystemClock};
use std::collections::{BTreeSet, HashSet};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stripefs_layout::Stripe;
use stripefs_sys::storage::{FsStore, Storage};
use stripefs_wire::{padded_block_crc, ErrorCode, InodeId, ServerId, WireError};

mod direct;
mod dispatch;
mod read;
mod scrub;
mod space;
mod sync;
mod write;

pub(crate) use direct::{DirectGrant, DirectWrite};
pub use scrub::DEFAULT_SCRUB_RATE_BYTES_S;
pub(crate) use write::{LocalWrite, LocalWriteError};

/// Directory under a target that holds the objects, fanned out over 256 subdirectories.
const OBJECTS_DIR: &str = "objects";
/// Suffix of an object's checksum sidecar.
const SIDECAR_SUFFIX: &str = ".crc";
/// Suffix of an object's log (`intent.rs`).
const LOG_SUFFIX: &str = ".log";
/// Number of fan-out subdirectories (the low byte of the file id).
const FANOUT_DIRS: u64 = 256;

pub(crate) struct Target {
    root: PathBuf,
    pub(crate) throttle: Option<Throttle>,
}

impl Target {
    fn data_path(&self, fid: InodeId) -> PathBuf {
        self.root
            .join(OBJECTS_DIR)
            .join(format!("{:02x}", fid.0 % FANOUT_DIRS))
            .join(format!("{:016x}", fid.0))
    }
}

fn lock_set(m: &Mutex<HashSet<Key>>) -> std::sync::MutexGuard<'_, HashSet<Key>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[derive(Default)]
pub(crate) struct Stats {
    /// Short-circuit opens answered with descriptors.
    local_opens: AtomicU64,
    /// Bulk bytes received from / sent to clients on this server's host and on others.
    same_host_received: AtomicU64,
    same_host_sent: AtomicU64,
    other_host_received: AtomicU64,
    other_host_sent: AtomicU64,
    requests: AtomicU64,
    errors: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    write_requests: AtomicU64,
    scrubbed_bytes: AtomicU64,
    damaged_blocks: AtomicU64,
    scrub_passes: AtomicU64,
    scrub_rate_bytes_s: AtomicU64,
    /// Messages on the short-circuit socket (opens, pipe and direct writes): not
    /// requests in the counters, but the scrubber yields to them as to requests.
    local_messages: AtomicU64,
}

impl Stats {
    pub(crate) fn note_local_open(&self) {
        self.local_opens.fetch_add(1, Ordering::Relaxed);
    }

    /// A message came on the short-circuit socket.
    pub(crate) fn note_local_message(&self) {
        self.local_messages.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests and short-circuit messages so far: the scrubber's measure of activity.
    fn activity(&self) -> u64 {
        self.requests.load(Ordering::Relaxed) + self.local_messages.load(Ordering::Relaxed)
    }
}

/// How a data server is built, beyond its storage and clock.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Emulated disk rate per target.
    pub throttle_bytes_s: Option<u64>,
    /// The boot identity answered with writes and fsyncs; `None` draws a random one
    /// (a simulator passes its own, for replayable runs).
    pub boot_id: Option<u64>,
    /// A known-broken rule to follow instead (tests and the simulator only).
    pub canary: Option<Canary>,
    /// Copy read replies through memory instead of sending them from the files
    /// (`sendfile`); for comparison (`--no-zero-copy`).
    pub no_zero_copy: bool,
}

/// A data server: the pieces of files on this server, striped over its targets.
pub struct DataService {
    pub(crate) id: ServerId,
    pub(crate) targets: Vec<Target>,
    pub(crate) store: Arc<dyn Storage>,
    pub(crate) clock: Arc<dyn Clock>,
    cache: ObjectCache,
    locks: RangeLocks,
    pub(crate) stats: Stats,
    /// CRC of a block of zeros: what a hole reads as.
    zero_crc: u32,
    /// Objects whose files were created and whose directory has not been synced since:
    /// the next fsync of the object syncs it. Kept here, not on the cached handle, so
    /// that a handle evicted before the fsync does not take the duty with it.
    new_names: Mutex<HashSet<Key>>,
    /// Read replies go out from the files with `sendfile` (see `read_zero_copy`).
    zero_copy: bool,
    /// Objects whose length or allocation changed (truncate, punch, allocate) since
    /// their last fsync, which therefore syncs them with `sync_all`: fdatasync need not
    /// make a cut length durable. Kept here for the same reason as `new_names`.
    resized: Mutex<HashSet<Key>>,
    /// Drawn at each start; a client that sees it change between its write and its
    /// fsync knows the server restarted and the write may be lost.
    boot_id: u64,
    canary: Option<Canary>,
    /// `STRIPEFS_FAULT_ABORT_MID_RMW=N` (tests): see [`object::Ctx::abort_mid_rmw`].
    abort_mid_rmw: Option<std::sync::atomic::AtomicU64>,
    /// The emulated host link, if any (`hostnet.rs`).
    pub(crate) host_net: std::sync::OnceLock<crate::hostnet::HostNet>,
    /// This server's host id, for the locality counters (`set_host`).
    host: std::sync::OnceLock<String>,
    /// Asks the metadata server about scoped tokens (`set_token_checker`); without one,
    /// connections made with a token are refused every file request.
    tokens: std::sync::OnceLock<crate::tokens::TokenChecker>,
    /// The fence of direct writes (`fence.rs`); `None` for stores without files, which
    /// grant none.
    fence: Option<Arc<dyn stripefs_sys::fence::Fence>>,
    /// Background flushes of objects on emulated disks (`throttle.rs`).
    flush_behind: crate::throttle::FlushBehind,
}

impl DataService {
    /// Opens a data server on the real file system; creates target directories if missing.
    pub fn open(
        id: ServerId,
        targets: &[PathBuf],
        throttle_bytes_s: Option<u64>,
    ) -> Result<Arc<DataService>, String> {
        DataService::open_with(
            id,
            targets,
            Options {
                throttle_bytes_s,
                ..Options::default()
            },
        )
    }

    /// Opens a data server on the real file system with all options.
    pub fn open_with(
        id: ServerId,
        targets: &[PathBuf],
        opts: Options,
    ) -> Result<Arc<DataService>, String> {
        let mut canonical: Vec<PathBuf> = Vec::with_capacity(targets.len());
        for t in targets {
            std::fs::create_dir_all(t)
                .map_err(|e| format!("cannot create target directory {}: {e}", t.display()))?;
            let c = t
                .canonicalize()
                .map_err(|e| format!("cannot resolve target directory {}: {e}", t.display()))?;
            if canonical.contains(&c) {
                return Err(format!("target {} is listed twice", t.display()));
            }
            canonical.push(c);
        }
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        DataService::build(id, targets, Arc::new(FsStore), clock, opts)
    }

    /// Opens a data server on any storage and clock (tests use in-memory ones).
    pub fn with_store(
        id: ServerId,
        targets: &[PathBuf],
        throttle_bytes_s: Option<u64>,
        store: Arc<dyn Storage>,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<DataService>, String> {
        let opts = Options {
            throttle_bytes_s,
            ..Options::default()
        };
        DataService::build(id, targets, store, clock, opts)
    }

    /// Opens a data server on any storage and clock with all options.
    pub fn build(
        id: ServerId,
        targets: &[PathBuf],
        store: Arc<dyn Storage>,
        clock: Arc<dyn Clock>,
        opts: Options,
    ) -> Result<Arc<DataService>, String> {
        let throttle_bytes_s = opts.throttle_bytes_s;
        if targets.is_empty() {
            return Err(format!("data server {} has no storage targets", id.0));
        }
        if throttle_bytes_s == Some(0) {
            return Err("a throttle rate must be above zero".into());
        }
        let mut ts = Vec::with_capacity(targets.len());
        for root in targets {
            for sub in 0..FANOUT_DIRS {
                let dir = root.join(OBJECTS_DIR).join(format!("{sub:02x}"));
                store.create_dir_all(&dir).map_err(|e| {
                    format!(
                        "cannot create {} on target {}: {e}",
                        dir.display(),
                        root.display()
                    )
                })?;
                // Objects an earlier run of this server created and never fsynced may
                // still have their names only in the page cache (the process died, the
                // machine did not): that run's duty to sync them died with it, so
                // they are made durable now, before a client's fsync relies on them.
                store.sync_dir(&dir).map_err(|e| {
                    format!(
                        "cannot sync directory {} on target {}: {e}",
                        dir.display(),
                        root.display()
                    )
                })?;
            }
            // The fan-out directories' names, the objects directory's and those of every
            // directory above (`create_dir_all` may have made them) survive a power cut
            // before any object is made durable in them.
            let objects = root.join(OBJECTS_DIR);
            for dir in objects.ancestors().filter(|d| !d.as_os_str().is_empty()) {
                store.sync_dir(dir).map_err(|e| {
                    format!(
                        "cannot sync directory {} on target {}: {e}",
                        dir.display(),
                        root.display()
                    )
                })?;
            }
            ts.push(Target {
                root: root.clone(),
                throttle: throttle_bytes_s.map(|r| Throttle::new(r, clock.clone())),
            });
        }
        // Before anything is served: a client's direct write granted by an earlier run of
        // this server may still be landing (fence.rs).
        let fence = store.grant_fence(&targets[0]).map_err(|e| {
            format!(
                "cannot open the direct-write fence on target {}: {e}",
                targets[0].display()
            )
        })?;
        Ok(Arc::new(DataService {
            id,
            fence,
            flush_behind: Default::default(),
            targets: ts,
            store,
            clock,
            cache: ObjectCache::default(),
            locks: RangeLocks::new(),
            stats: Stats::default(),
            zero_crc: padded_block_crc(&[]),
            new_names: Mutex::new(HashSet::new()),
            resized: Mutex::new(HashSet::new()),
            boot_id: opts.boot_id.unwrap_or_else(rand::random),
            canary: opts.canary,
            abort_mid_rmw: fault_countdown("STRIPEFS_FAULT_ABORT_MID_RMW")?,
            zero_copy: !opts.no_zero_copy,
            host_net: std::sync::OnceLock::new(),
            host: std::sync::OnceLock::new(),
            tokens: std::sync::OnceLock::new(),
        }))
    }

    /// This start's boot identity.
    pub fn boot_id(&self) -> u64 {
        self.boot_id
    }

    pub fn target_count(&self) -> usize {
        self.targets.len()
    }

    pub fn id(&self) -> ServerId {
        self.id
    }

    /// The data file and sidecar paths of `fid` on target `t`.
    pub fn object_paths(&self, t: usize, fid: InodeId) -> (PathBuf, PathBuf) {
        let data = self.targets[t].data_path(fid);
        let mut crc = data.clone().into_os_string();
        crc.push(SIDECAR_SUFFIX);
        (data, crc.into())
    }

    /// How this server checks requests made with scoped tokens (`tokens.rs`).
    pub fn set_token_checker(&self, checker: crate::tokens::TokenChecker) {
        let _ = self.tokens.set(checker);
    }

    /// Names this server's host (once), for the locality counters.
    pub fn set_host(&self, host: String) {
        let _ = self.host.set(host);
    }

    /// Short-circuit opens answered with descriptors since the server started.
    pub fn local_opens(&self) -> u64 {
        self.stats.local_opens.load(Ordering::Relaxed)
    }

    /// Open object handles currently cached.
    pub fn open_objects(&self) -> usize {
        self.cache.len()
    }

    fn ctx(&self, t: usize, fid: InodeId) -> Ctx<'_> {
        Ctx {
            server: self.id,
            fid,
            target: &self.targets[t].root,
            canary: self.canary,
            abort_mid_rmw: self.abort_mid_rmw.as_ref(),
        }
    }

    /// The log path of `fid` on target `t`.
    pub(crate) fn log_path(&self, t: usize, fid: InodeId) -> PathBuf {
        let mut p = self.targets[t].data_path(fid).into_os_string();
        p.push(LOG_SUFFIX);
        p.into()
    }

    /// The object whose data file and sidecar were just opened, with its log: an
    /// existing log is replayed first (a server that died or lost power mid-rewrite left
    /// it), so that every block reads as its last complete write; records appended from
    /// here on are of a later epoch than any in it.
    fn object_with_log(
        &self,
        t: usize,
        fid: InodeId,
        data: Arc<dyn stripefs_sys::storage::ObjectFile>,
        crcs: Arc<dyn stripefs_sys::storage::ObjectFile>,
        fresh: bool,
    ) -> io::Result<Object> {
        let path = self.log_path(t, fid);
        // Opened for appending (O_APPEND on a real file): records go after the last
        // one, never over the log's start at the descriptor's offset.
        let existing = match fresh {
            true => None,
            false => match self.store.open(&path, false)? {
                Some(_) => Some(self.store.open_append(&path)?),
                None => None,
            },
        };
        let obj = Object {
            data,
            crcs,
            intents: IntentLog::new(path, self.store.clone(), existing.clone()),
            pieces: Default::default(),
            zeros: Default::default(),
            unflushed: Default::default(),
        };
        if let Some(f) = existing.filter(|_| obj.intents.needs_sync_work()) {
            let mut bytes = vec![0u8; f.size_bytes()? as usize];
            let n = f.read_at(&mut bytes, 0)?;
            bytes.truncate(n);
            let decoded = crate::intent::decode(&bytes, BLOCK);
            // A torn tail (a power cut in the middle of an append) is cut off, durably,
            // before anything is appended: records after it would be hidden from the
            // next replay, which stops there (simulator, seed 2707).
            if decoded.torn_bytes > 0 {
                f.set_len((bytes.len() - decoded.torn_bytes) as u64)?;
                f.sync_all()?;
            }
            // Records the replay appends are of a later epoch than any in the log.
            let last = decoded.records.iter().map(|r| r.seq()).max();
            obj.intents.resume_after(last.unwrap_or(0));
            object::replay_log(&self.ctx(t, fid), &obj, &decoded)
                .map_err(|e| io::Error::other(e.to_string()))?;
        }
        Ok(obj)
    }

    fn stripe(&self, unit: u32) -> Result<Stripe, WireError> {
        Stripe::new(unit as u64, self.targets.len() as u32).map_err(|e| {
            WireError::new(
                ErrorCode::InvalidArgument,
                format!("stripe unit {unit}: {e}"),
            )
        })
    }

    /// The object of `fid` on target `t`, opened (and created, if `create`) on a miss.
    fn object(
        &self,
        t: usize,
        fid: InodeId,
        create: bool,
    ) -> Result<Option<Arc<Object>>, WireError> {
        let key: Key = (t as u32, fid.0);
        let (data_path, crc_path) = self.object_paths(t, fid);
        self.cache
            .get_or_open(key, || {
                let mut created = false;
                let data = match self.store.open(&data_path, false)? {
                    Some(f) => f,
                    None if create => {
                        created = true;
                        match self.store.open(&data_path, true)? {
                            Some(f) => f,
                            None => return Ok(None),
                        }
                    }
                    None => return Ok(None),
                };
                // A crash can leave a data file without its sidecar: all holes then.
                let crcs = match self.store.open(&crc_path, false)? {
                    Some(f) => f,
                    None => {
                        created = true;
                        match self.store.open(&crc_path, true)? {
                            Some(f) => f,
                            None => return Ok(None),
                        }
                    }
                };
                if created {
                    lock_set(&self.new_names).insert(key);
                }
                self.object_with_log(t, fid, data, crcs, created).map(Some)
            })
            .map_err(|e| self.ctx(t, fid).io("opening the object", &e))
    }

    /// Charges `len` bytes at local `offset` to the targets' throttles and sleeps until
    /// the latest reservation ends; the targets work in parallel, as disks would.
    fn throttle(&self, stripe: &Stripe, offset: u64, len: u64) {
        if len == 0 || self.targets[0].throttle.is_none() {
            return;
        }
        let mut end = Duration::ZERO;
        for e in stripe.extents(offset, len) {
            if let Some(th) = &self.targets[e.place as usize].throttle {
                end = end.max(th.reserve(e.len));
            }
        }
        self.clock.sleep_until(end);
    }

    fn vanished(&self, t: usize, fid: InodeId) -> WireError {
        WireError::new(
            ErrorCode::Internal,
            format!(
                "data server {}: {fid} on target {}: object not created",
                self.id.0,
                self.targets[t].root.display()
            ),
        )
    }

    /// File ids this server holds objects of (on any target), in the order
    /// (fid % 256, fid), after the cursor `after`; at most `limit`. Returns them and
    /// whether the listing is complete.
    pub fn list_objects(
        &self,
        after: Option<InodeId>,
        limit: u32,
    ) -> Result<(Vec<InodeId>, bool), WireError> {
        let start_dir = after.map_or(0, |f| f.0 % FANOUT_DIRS);
        let mut out = Vec::new();
        for d in start_dir..FANOUT_DIRS {
            let mut fids = BTreeSet::new();
            for t in &self.targets {
                let dir = t.root.join(OBJECTS_DIR).join(format!("{d:02x}"));
                let names = self.store.list_dir(&dir).map_err(|e| {
                    WireError::io(
                        format!("data server {}: listing {}", self.id.0, dir.display()),
                        &e,
                    )
                })?;
                fids.extend(
                    names
                        .iter()
                        .filter_map(|n| parse_object_name(n))
                        .filter(|fid| fid % FANOUT_DIRS == d),
                );
            }
            let after_fid = after.filter(|_| d == start_dir).map(|f| f.0);
            for fid in fids
                .into_iter()
                .filter(|f| after_fid.map_or(true, |a| *f > a))
            {
                if out.len() == limit as usize {
                    return Ok((out, false));
                }
                out.push(InodeId(fid));
            }
        }
        Ok((out, true))
    }
}

/// The file id of an object's data or sidecar file name (16 hex digits).
fn parse_object_name(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(SIDECAR_SUFFIX).unwrap_or(name);
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// A countdown for a fault-injection point, from the environment variable `name`
/// (a positive integer); `None` when it is unset.
fn fault_countdown(name: &str) -> Result<Option<std::sync::atomic::AtomicU64>, String> {
    match std::env::var(name) {
        Err(_) => Ok(None),
        Ok(v) => match v.parse::<u64>() {
            Ok(n) if n > 0 => {
                tracing::warn!("fault injection {name}={n} is on");
                Ok(Some(std::sync::atomic::AtomicU64::new(n)))
            }
            _ => Err(format!("{name}={v}: expected a positive integer")),
        },
    }
}
