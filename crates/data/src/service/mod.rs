//! The data server's request handlers.

use crate::cache::{Key, Object, ObjectCache};
use crate::clock::{Clock, SystemClock};
use crate::intent::IntentLog;
use crate::locks::{Mode, RangeGuard, RangeLocks};
use crate::object::{self, Ctx, BLOCK};
use crate::throttle::Throttle;
use crate::Canary;
use std::collections::{BTreeSet, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stripefs_layout::Stripe;
use stripefs_rpc::samehost::PipeIn;
use stripefs_rpc::{ConnInfo, Part, Payload, Reply, Service};
use stripefs_sys::storage::{FsStore, Storage};
use stripefs_wire::sidecar::Entry;
use stripefs_wire::{
    padded_block_crc, pieces, AnyOp, Counters, Damage, DataOp, ErrorCode, InodeId, Reach, Request,
    Response, Role, Route, Scope, ServerId, TargetSpace, TargetStatus, Valid, WireError,
    BLOCK_BYTES, MAX_DATA_BYTES, SCRUB_REQUEST_BYTES,
};

/// Directory under a target that holds the objects, fanned out over 256 subdirectories.
const OBJECTS_DIR: &str = "objects";
/// Suffix of an object's checksum sidecar.
const SIDECAR_SUFFIX: &str = ".crc";
/// Suffix of an object's log (`intent.rs`).
const LOG_SUFFIX: &str = ".log";
/// Bytes a log may hold before a write syncs its object to empty it (small in unit
/// tests, so that they reach it).
const MAX_LOG_BYTES: u64 = if cfg!(test) { 64 << 10 } else { 64 << 20 };
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

/// The background scrubber's default rate: a 1 TB disk is read in about 1.5 days.
pub const DEFAULT_SCRUB_RATE_BYTES_S: u64 = 8 << 20;
/// Object bytes the background scrubber reads per step (and per throttle charge).
const SCRUB_STEP_BYTES: u64 = 1 << 20;
/// The background scrubber reads a step only after the server had no request for this
/// long, or after waiting `SCRUB_MAX_YIELD` for that.
const SCRUB_QUIET: Duration = Duration::from_millis(20);
const SCRUB_MAX_YIELD: Duration = Duration::from_secs(1);
/// How long the background scrubber rests between passes.
const SCRUB_IDLE: Duration = Duration::from_secs(5);

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
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
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

    /// Names this server's host (once), for the locality counters.
    /// How this server checks requests made with scoped tokens (`tokens.rs`).
    pub fn set_token_checker(&self, checker: crate::tokens::TokenChecker) {
        let _ = self.tokens.set(checker);
    }

    /// A request made with a scoped token: what it may do here.
    fn token_allows(&self, t: &stripefs_rpc::token::Token, req: &Request) -> Result<(), WireError> {
        let denied = |why: String| {
            WireError::new(
                ErrorCode::PermissionDenied,
                format!("token {:016x} (for {}): {why}", t.id, t.path),
            )
        };
        let Scope { reach, writes } = req.scope();
        let fid = match reach {
            Reach::Nothing => return Ok(()),
            Reach::Fid(fid) => fid,
            Reach::Secret
            | Reach::Dir(_)
            | Reach::Dirs(..)
            | Reach::Ino(_)
            | Reach::InoAndDir(..)
            | Reach::Path(_)
            | Reach::OpenPath(_) => {
                return Err(denied(format!(
                    "{} needs the cluster secret",
                    req.opcode().name()
                )))
            }
        };
        let write = writes;
        if write && t.read_only {
            return Err(denied(format!(
                "read-only: {} refused",
                req.opcode().name()
            )));
        }
        match self.tokens.get() {
            Some(c) => c.check(t, fid, write),
            None => Err(denied(
                "this data server cannot check tokens (no metadata server known)".into(),
            )),
        }
    }

    pub fn set_host(&self, host: String) {
        let _ = self.host.set(host);
    }

    /// Counts a request's bulk bytes by whether its client is on this server's host.
    fn count_locality(&self, conn: &ConnInfo, received: u64, sent: u64) {
        if received == 0 && sent == 0 {
            return;
        }
        let same = self
            .host
            .get()
            .is_some_and(|h| conn.host.as_deref() == Some(h));
        let (r, s) = if same {
            (&self.stats.same_host_received, &self.stats.same_host_sent)
        } else {
            (&self.stats.other_host_received, &self.stats.other_host_sent)
        };
        r.fetch_add(received, Ordering::Relaxed);
        s.fetch_add(sent, Ordering::Relaxed);
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

    fn write(
        &self,
        conn: &ConnInfo,
        fid: InodeId,
        unit: u32,
        offset: u64,
        crcs: &[u32],
        data: &[u8],
    ) -> Result<Response, WireError> {
        verify_transit(&conn.peer, fid, offset, crcs, data)?;
        let stripe = self.stripe(unit)?;
        self.throttle(&stripe, offset, data.len() as u64);
        self.write_verified(&stripe, fid, offset, crcs, data)?;
        Ok(Response::Written {
            boot_id: self.boot_id,
        })
    }

    /// A list write: every extent's checksums are checked before anything is written,
    /// then the extents are written in order, each as a Write would be. A failure
    /// part-way leaves the earlier extents written (the client counts the whole request
    /// as failed: old or new bytes in it, as for a failed Write).
    fn write_list(
        &self,
        from: &Transit,
        fid: InodeId,
        unit: u32,
        extents: &[(u64, u32)],
        crcs: &[u32],
        data: &[u8],
    ) -> Result<Response, WireError> {
        let stripe = self.stripe(unit)?;
        let (mut at, mut c) = (0usize, 0usize);
        let mut spans = Vec::with_capacity(extents.len());
        for &(offset, len) in extents {
            let n = pieces(offset, len as usize).count();
            let (bytes, sums) = (&data[at..at + len as usize], &crcs[c..c + n]);
            if !(self.canary == Some(Canary::PipeUnchecked) && matches!(from, Transit::Pipe)) {
                verify_transit(from, fid, offset, sums, bytes)?;
            }
            spans.push((offset, bytes, sums));
            at += len as usize;
            c += n;
        }
        assert_eq!((at, c), (data.len(), crcs.len()), "validated by the wire");
        for (offset, bytes, sums) in spans {
            self.throttle(&stripe, offset, bytes.len() as u64);
            self.write_verified(&stripe, fid, offset, sums, bytes)?;
        }
        Ok(Response::Written {
            boot_id: self.boot_id,
        })
    }

    /// Whether any target emulates a disk rate: the server then takes no short-circuit
    /// I/O (the rate can only be kept where the bytes pass).
    pub(crate) fn throttled(&self) -> bool {
        self.targets.iter().any(|t| t.throttle.is_some())
    }

    /// A short-circuit write (docs/protocol.md "Short-circuit socket"): `w.len` bytes of
    /// whole blocks wait in `pipe`. Blocks that are holes take the bytes straight from the
    /// pipe (`object::write_spliced`, checked after, never blessed unchecked); a unit
    /// whose blocks hold written bytes has its bytes read from the pipe and checked before
    /// it is written the usual way, since a rewrite must never damage what it replaces.
    /// Whatever happens, exactly `w.len` bytes leave the pipe, or the pipe is `Broken`.
    pub(crate) fn local_write(
        &self,
        w: &LocalWrite,
        pipe: &mut dyn PipeIn,
    ) -> Result<u64, LocalWriteError> {
        let total = w.len as usize;
        let mut taken = 0usize;
        let r = self.local_write_units(w, pipe, &mut taken);
        if taken < total && !matches!(r, Err(LocalWriteError::Broken(_))) {
            pipe.drain(total - taken)
                .map_err(|e| LocalWriteError::Broken(e.to_string()))?;
        }
        r?;
        self.stats
            .bytes_written
            .fetch_add(w.len as u64, Ordering::Relaxed);
        self.stats.write_requests.fetch_add(1, Ordering::Relaxed);
        self.stats
            .same_host_received
            .fetch_add(w.len as u64, Ordering::Relaxed);
        Ok(self.boot_id)
    }

    /// A short-circuit write list: the extents' bytes wait in `pipe`, in order. They are
    /// read out (all of them, whatever happens, or the pipe is `Broken`) and written as a
    /// `WriteList` from TCP is: every CRC checked first.
    /// `buf`: the connection's buffer, reused (no zeroing or page faults per list).
    pub(crate) fn local_write_list(
        &self,
        fid: InodeId,
        unit: u32,
        extents: &[(u64, u32)],
        crcs: &[u32],
        pipe: &mut dyn PipeIn,
        buf: &mut Vec<u8>,
    ) -> Result<u64, LocalWriteError> {
        let total: usize = extents.iter().map(|&(_, len)| len as usize).sum();
        if buf.len() < total {
            buf.resize(total, 0);
        }
        let bytes = &mut buf[..total];
        pipe.read_exact(bytes)
            .map_err(|e| LocalWriteError::Broken(e.to_string()))?;
        if self.throttled() {
            return Err(LocalWriteError::Refused);
        }
        let pipe = Transit::Pipe;
        self.write_list(&pipe, fid, unit, extents, crcs, bytes)?;
        self.stats.write_requests.fetch_add(1, Ordering::Relaxed);
        self.stats
            .same_host_received
            .fetch_add(total as u64, Ordering::Relaxed);
        Ok(self.boot_id)
    }

    fn local_write_units(
        &self,
        w: &LocalWrite,
        pipe: &mut dyn PipeIn,
        taken: &mut usize,
    ) -> Result<(), LocalWriteError> {
        let stripe = self.local_stripe(w.unit)?;
        let fid = w.fid;
        let len = w.len as u64;
        self.each_unit(
            &stripe,
            fid,
            w.offset,
            len,
            &w.crcs,
            |t, obj, local, n, _, crcs| {
                // The unit's blocks exclusive: spliced holes and rewrites alike.
                let (first, end) = (local / BLOCK, (local + n as u64).div_ceil(BLOCK));
                let _g = self
                    .locks
                    .lock(fid.0, t as u32, first, end, Mode::Exclusive);
                let c = &self.ctx(t, fid);
                match object::write_spliced(c, obj, local, n as u64, &mut *pipe, crcs) {
                    Ok(object::Spliced::Done) => *taken += n,
                    Ok(object::Spliced::NotHoles) => {
                        let mut bytes = vec![0u8; n];
                        pipe.read_exact(&mut bytes)
                            .map_err(|e| LocalWriteError::Broken(e.to_string()))?;
                        *taken += n;
                        if self.canary != Some(Canary::PipeUnchecked) {
                            verify_transit(&"the short-circuit pipe", fid, local, crcs, &bytes)?;
                        }
                        object::write(c, obj, local, &bytes, crcs)?;
                    }
                    Err((done, e)) => {
                        *taken += done;
                        return Err(e.into());
                    }
                }
                Ok(())
            },
        )
    }

    /// The stripe of a short-circuit write's unit: `Refused` when the server takes no
    /// short-circuit writes (throttled targets), `Failed` for a unit of partial blocks.
    fn local_stripe(&self, unit: u32) -> Result<Stripe, LocalWriteError> {
        if self.throttled() {
            return Err(LocalWriteError::Refused);
        }
        if unit as u64 % BLOCK != 0 {
            return Err(LocalWriteError::Failed(WireError::new(
                ErrorCode::InvalidArgument,
                format!("stripe unit {unit} is not whole blocks"),
            )));
        }
        Ok(self.stripe(unit)?)
    }

    /// Grants a short-circuit direct write (docs/protocol.md "Short-circuit socket"):
    /// locks the range's blocks exclusive, unit by unit in the range's order, checks
    /// that they are all holes, and opens an `O_DIRECT` write descriptor of each target's
    /// data file. The client then writes the bytes itself; [`DataService::direct_done`]
    /// stores its CRCs. Until then the blocks stay holes, which read as zeros whatever
    /// the data file holds, so a client that dies or fails mid-way changes nothing anyone
    /// reads. `Failed` when a block holds bytes (the client then writes through the pipe,
    /// whose checks a rewrite needs).
    pub(crate) fn direct_begin(&self, w: &DirectWrite) -> Result<DirectGrant, LocalWriteError> {
        let stripe = self.local_stripe(w.unit)?;
        let fid = w.fid;
        let Some(fence) = self.fence.as_ref() else {
            return Err(LocalWriteError::Refused);
        };
        let mut grant = DirectGrant {
            fid,
            blocks: (w.len as u64 / BLOCK) as usize,
            units: Vec::new(),
            files: Vec::new(),
            fence: None,
        };
        let mut fd_of_target: Vec<Option<u16>> = vec![None; self.targets.len()];
        for p in stripe.split(w.offset, w.len as u64) {
            if grant.units.len() == stripefs_wire::MAX_GRANT_PIECES {
                return Err(LocalWriteError::Failed(WireError::new(
                    ErrorCode::InvalidArgument,
                    "a direct write of more pieces than one grant names",
                )));
            }
            let t = p.place as usize;
            let (first, end) = (p.local / BLOCK, (p.local + p.len) / BLOCK);
            let guard = self.locks.lock(fid.0, p.place, first, end, Mode::Exclusive);
            let obj = self
                .object(t, fid, true)?
                .ok_or_else(|| self.vanished(t, fid))?;
            let c = self.ctx(t, fid);
            if !object::all_holes(&c, &obj, p.local, p.len)? {
                return Err(LocalWriteError::Failed(WireError::new(
                    ErrorCode::InvalidArgument,
                    format!(
                        "data server {}: {fid} on target {}: blocks {first}..{end} hold bytes; a direct write takes holes only",
                        self.id.0,
                        self.targets[t].root.display()
                    ),
                )));
            }
            let fd = match fd_of_target[t] {
                Some(i) => i,
                None => {
                    let f = object::direct_writer(&obj).map_err(|e| {
                        if e.kind() == io::ErrorKind::Unsupported {
                            LocalWriteError::Refused
                        } else {
                            LocalWriteError::Failed(
                                c.io("opening the data file for direct writes", &e),
                            )
                        }
                    })?;
                    grant.files.push(f);
                    let i = (grant.files.len() - 1) as u16;
                    fd_of_target[t] = Some(i);
                    i
                }
            };
            grant.units.push(DirectUnit {
                t,
                obj,
                local: p.local,
                len: p.len,
                fd,
                _guard: guard,
            });
        }
        // Last, after the data files the pieces name: the client holds it as long as
        // it may still write (fence.rs).
        let (f, n) = fence.take().map_err(|e| {
            LocalWriteError::Failed(WireError::new(
                ErrorCode::Io,
                format!("data server {}: direct-write fence: {e}", self.id.0),
            ))
        })?;
        grant.files.push(f);
        grant.fence = Some(n);
        Ok(grant)
    }

    /// Ends a grant whose client did not say it is done (the connection broke or timed
    /// out, or its message was malformed): the blocks stay holes, and stay locked until
    /// the client has closed the grant's descriptors, so that none of its writes can
    /// land once another writer has the blocks (fence.rs).
    pub(crate) fn direct_abandon(&self, mut grant: DirectGrant) {
        grant.files.clear();
        if let (Some(fence), Some(n)) = (self.fence.as_ref(), grant.fence) {
            if let Err(e) = fence.wait(n) {
                // The blocks stay locked for good rather than risk a late write.
                tracing::error!(
                    "data server {}: cannot wait for the end of a direct write to {}: {e}; its blocks stay locked",
                    self.id.0,
                    grant.fid
                );
                std::mem::forget(grant);
                return;
            }
        }
        drop(grant);
    }

    /// Ends a granted direct write: with `crcs` (the client wrote every piece whole),
    /// stores them as the blocks' entries; without, stores nothing (the blocks stay
    /// holes). The locks go with the grant.
    pub(crate) fn direct_done(
        &self,
        grant: DirectGrant,
        crcs: Option<&[u32]>,
    ) -> Result<u64, LocalWriteError> {
        let Some(crcs) = crcs else {
            return Err(LocalWriteError::Failed(WireError::new(
                ErrorCode::Io,
                "the client did not write the range; its blocks stay holes",
            )));
        };
        assert_eq!(crcs.len(), grant.blocks, "checked when parsed");
        let mut at = 0;
        let mut bytes = 0;
        for u in &grant.units {
            let n = (u.len / BLOCK) as usize;
            let c = self.ctx(u.t, grant.fid);
            object::store_written(&c, &u.obj, u.local, &crcs[at..at + n])?;
            at += n;
            bytes += u.len;
        }
        self.stats.bytes_written.fetch_add(bytes, Ordering::Relaxed);
        self.stats.write_requests.fetch_add(1, Ordering::Relaxed);
        self.stats
            .same_host_received
            .fetch_add(bytes, Ordering::Relaxed);
        Ok(self.boot_id)
    }

    /// Writes checked bytes at `offset` of the local byte space, unit by unit.
    fn write_verified(
        &self,
        stripe: &Stripe,
        fid: InodeId,
        offset: u64,
        crcs: &[u32],
        data: &[u8],
    ) -> Result<(), WireError> {
        let len = data.len() as u64;
        self.each_unit(
            stripe,
            fid,
            offset,
            len,
            crcs,
            |t, obj, local, n, at, sums| {
                self.write_unit(t, fid, obj, local, &data[at..at + n], sums)?;
                if self.targets[t].throttle.is_some() {
                    self.flush_behind.wrote(obj, n as u64);
                }
                Ok::<(), WireError>(())
            },
        )?;
        self.stats.bytes_written.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    /// Writes `bytes` at object offset `local` of one unit (`sums`: their CRCs, one per
    /// block-bounded piece), in three parts, each under a lock of its own blocks' mode:
    /// the whole blocks, a partial first block, a partial last block (docs/objects.md,
    /// "Writes"). A partial block that holds written bytes takes the write as a piece in
    /// the object's log under a shared lock, so that writers of disjoint pieces of one
    /// block (ranks' interleaved records) neither wait for each other nor read and
    /// rewrite the block; a partial write into a hole is written in place (there is
    /// nothing to read), under the block's exclusive lock.
    fn write_unit(
        &self,
        t: usize,
        fid: InodeId,
        obj: &Object,
        local: u64,
        bytes: &[u8],
        sums: &[u32],
    ) -> Result<(), WireError> {
        let c = self.ctx(t, fid);
        let len = bytes.len() as u64;
        let (first, end) = (local / BLOCK, (local + len).div_ceil(BLOCK));
        let head_len = (BLOCK - local % BLOCK).min(len) as usize;
        let head = head_len as u64 != BLOCK;
        let tail_len = ((local + len) % BLOCK) as usize;
        let tail = end - first > 1 && tail_len != 0;
        let mid = (
            if head { head_len } else { 0 },
            bytes.len() - if tail { tail_len } else { 0 },
        );
        // The mode of a partial block is chosen from a look at its entry without the
        // lock and checked under it: a hole, or written with the write's bytes known to
        // be zeros (`zeros.rs`), is locked exclusive, to be written in place; else the
        // block is locked shared, for a piece. All the write's ranges are locked at once.
        // One read of the sidecar looks at both partial blocks.
        let looked = if head || tail {
            object::read_entries(&c, obj, first, end - first).unwrap_or_default()
        } else {
            Vec::new()
        };
        let head_span = (local, head_len);
        let tail_span = (local + mid.1 as u64, tail_len);
        let mode_of =
            |block: u64, (off, n): (u64, usize)| match looked.get((block - first) as usize) {
                Some(Entry::Hole) => Mode::Exclusive,
                Some(&e) if object::into_zeros(&c, obj, off, n, e) => Mode::Exclusive,
                _ => Mode::Shared,
            };
        let mut ranges = Vec::with_capacity(3);
        let head_mode = head.then(|| mode_of(first, head_span));
        if let Some(m) = head_mode {
            ranges.push((first, first + 1, m));
        }
        let (mfirst, mend) = (
            (local + mid.0 as u64) / BLOCK,
            (local + mid.1 as u64) / BLOCK,
        );
        if mid.0 < mid.1 {
            ranges.push((mfirst, mend, Mode::Exclusive));
        }
        let tail_mode = tail.then(|| mode_of(end - 1, tail_span));
        if let Some(m) = tail_mode {
            ranges.push((end - 1, end, m));
        }
        let _g = self.locks.lock_all(fid.0, t as u32, &ranges);
        // The entries again, now under the locks, for every part below (one read where
        // each part would read its own, and the object length besides).
        let held = if head || tail {
            Some(object::read_entries(&c, obj, first, end - first)?)
        } else {
            None
        };
        let held_of = |block: u64| held.as_ref().map(|h| h[(block - first) as usize]);
        // Each partial block's part, decided under the lock: a piece (locked shared),
        // in place into known zeros (locked exclusive and still so), or else in place
        // with the whole blocks, as one run (`object::write`: a hole has nothing to
        // read; one that became written meanwhile is read and merged, logged as any
        // rewrite). The run goes first: it reserves its space before anything changes,
        // so that a full disk fails the write with nothing written.
        let part_of =
            |mode: Option<Mode>, block: u64, (off, n): (u64, usize)| match (mode, held_of(block)) {
                (None, _) => Edge::Run,
                (Some(Mode::Shared), e) => Edge::Piece(e),
                (Some(Mode::Exclusive), Some(e @ Entry::Written(base)))
                    if object::into_zeros(&c, obj, off, n, e) =>
                {
                    Edge::Zeros(base)
                }
                (Some(Mode::Exclusive), _) => Edge::Run,
            };
        let head_part = part_of(head_mode, first, head_span);
        let tail_part = part_of(tail_mode, end - 1, tail_span);
        let piece = |e: Edge| matches!(e, Edge::Piece(_));
        let lo = if piece(head_part) { head_len } else { 0 };
        let hi = bytes.len() - if piece(tail_part) { tail_len } else { 0 };
        if lo < hi {
            let crcs = &sums[(lo != 0) as usize..sums.len() - (hi != bytes.len()) as usize];
            let at = local + lo as u64;
            let (b0, b1) = (at / BLOCK, (local + hi as u64).div_ceil(BLOCK));
            let given = held
                .as_deref()
                .map(|h| &h[(b0 - first) as usize..(b1 - first) as usize]);
            let base = |e: Edge| match e {
                Edge::Zeros(base) => Some(base),
                _ => None,
            };
            // Edges onto known zeros go out with the run (one write of the bytes).
            let zeros = [
                base(head_part).filter(|_| lo == 0),
                base(tail_part).filter(|_| hi == bytes.len()),
            ];
            object::write_onto(&c, obj, at, &bytes[lo..hi], crcs, given, zeros)?;
        }
        let edges = [
            (head_part, head_span, &bytes[..head_len], sums[0]),
            (tail_part, tail_span, &bytes[mid.1..], sums[sums.len() - 1]),
        ];
        for (part, (off, _), data, crc) in edges {
            if let Edge::Piece(held) = part {
                object::write_piece(&c, obj, off, data, crc, held)?;
            }
        }
        Ok(())
    }

    /// A writer that never fsyncs would grow an object's log without end (an intent per
    /// small rewrite, a piece per partial write) and keep its pieces in memory: past a
    /// bound, the object is synced here, with its writes held for that long, which folds
    /// the pieces in and empties the log.
    fn bound_log(&self, t: usize, fid: InodeId, obj: &Object) -> Result<(), WireError> {
        if obj.intents.appended_bytes() > MAX_LOG_BYTES || obj.pieces.over_bound() {
            self.sync_object(t, fid, true)?;
        }
        Ok(())
    }

    /// Runs `f(target, object, local offset, length, start in the request, CRCs)` for
    /// each unit of the range `[offset, offset + len)` of the local byte space, in order,
    /// with the unit's object (made if missing); `crcs` holds one CRC per block-bounded
    /// piece of the whole range. After each unit (whose locks `f` took and released),
    /// the object's log is held to its bound.
    fn each_unit<E: From<WireError>>(
        &self,
        stripe: &Stripe,
        fid: InodeId,
        offset: u64,
        len: u64,
        crcs: &[u32],
        mut f: impl FnMut(usize, &Object, u64, usize, usize, &[u32]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut next_crc = 0;
        for p in stripe.split(offset, len) {
            assert_eq!(p.global % BLOCK, p.local % BLOCK, "units are whole blocks");
            let t = p.place as usize;
            let n = pieces(p.local, p.len as usize).count();
            let obj = self
                .object(t, fid, true)?
                .ok_or_else(|| self.vanished(t, fid))?;
            let at = (p.global - offset) as usize;
            f(
                t,
                &obj,
                p.local,
                p.len as usize,
                at,
                &crcs[next_crc..next_crc + n],
            )?;
            next_crc += n;
            self.bound_log(t, fid, &obj)?;
        }
        assert_eq!(next_crc, crcs.len());
        Ok(())
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

    fn read(
        &self,
        fid: InodeId,
        unit: u32,
        offset: u64,
        len: u32,
    ) -> Result<(Vec<u32>, Vec<u8>), WireError> {
        let stripe = self.stripe(unit)?;
        self.throttle(&stripe, offset, len as u64);
        let mut out = vec![0u8; len as usize];
        let mut crcs = vec![self.zero_crc; (len / BLOCK_BYTES) as usize];
        for p in stripe.split(offset, len as u64) {
            let t = p.place as usize;
            let (first, end) = (p.local / BLOCK, (p.local + p.len) / BLOCK);
            let _g = self.locks.lock(fid.0, p.place, first, end, Mode::Shared);
            // A missing object reads as zeros, which `out` and `crcs` already hold.
            let Some(obj) = self.object(t, fid, false)? else {
                continue;
            };
            let at = (p.global - offset) as usize;
            let dst = &mut out[at..at + p.len as usize];
            let c =
                &mut crcs[at / BLOCK_BYTES as usize..(at + p.len as usize) / BLOCK_BYTES as usize];
            object::read(&self.ctx(t, fid), &obj, p.local, dst, c, self.zero_crc)?;
        }
        self.stats
            .bytes_read
            .fetch_add(len as u64, Ordering::Relaxed);
        Ok((crcs, out))
    }

    /// A read answered from where the bytes lie: runs of the data files are sent with
    /// `sendfile`, holes from a zero page, the stored CRCs as they are; the block ranges
    /// stay locked (shared) and the objects open until the reply is sent. Objects
    /// without descriptors (in-memory stores) are copied as by [`DataService::read`].
    fn read_zero_copy(
        &self,
        fid: InodeId,
        unit: u32,
        offset: u64,
        len: u32,
    ) -> Result<(Vec<u32>, Payload), WireError> {
        let stripe = self.stripe(unit)?;
        self.throttle(&stripe, offset, len as u64);
        let mut crcs = vec![self.zero_crc; (len / BLOCK_BYTES) as usize];
        let mut parts = Vec::new();
        let mut hold: Vec<(RangeGuard, Option<Arc<Object>>)> = Vec::new();
        let mut planned = 0u64;
        for p in stripe.split(offset, len as u64) {
            let t = p.place as usize;
            let (first, end) = (p.local / BLOCK, (p.local + p.len) / BLOCK);
            let g = self.locks.lock(fid.0, p.place, first, end, Mode::Shared);
            let at = (p.global - offset) as usize;
            assert_eq!(at as u64, planned, "pieces of a read come in order");
            planned += p.len;
            let obj = self.object(t, fid, false)?;
            let c =
                &mut crcs[at / BLOCK_BYTES as usize..(at + p.len as usize) / BLOCK_BYTES as usize];
            match &obj {
                // A missing object reads as zeros; `crcs` already holds the hole CRC.
                None => parts.push(Part::Zeros(p.len)),
                Some(o) => {
                    match object::read_parts(&self.ctx(t, fid), o, p.local, c, self.zero_crc)? {
                        Some(ps) => parts.extend(ps),
                        None => {
                            let mut buf = vec![0u8; p.len as usize];
                            object::read(
                                &self.ctx(t, fid),
                                o,
                                p.local,
                                &mut buf,
                                c,
                                self.zero_crc,
                            )?;
                            parts.push(Part::Bytes(buf));
                        }
                    }
                }
            }
            hold.push((g, obj));
        }
        self.stats
            .bytes_read
            .fetch_add(len as u64, Ordering::Relaxed);
        Ok((
            crcs,
            Payload::Parts {
                parts,
                hold: Box::new(hold),
            },
        ))
    }

    fn truncate(&self, fid: InodeId, unit: u32, local_size: u64) -> Result<Response, WireError> {
        let stripe = self.stripe(unit)?;
        for t in 0..self.targets.len() {
            let new_len = stripe.local_size(local_size, t as u32);
            // The whole object: a cut is made durable like an fsync, and its log's
            // older records are then made dead (below), with no rewrite in flight.
            let _g = self
                .locks
                .lock(fid.0, t as u32, 0, u64::MAX, Mode::Exclusive);
            // Growing a missing object needs nothing: it reads as zeros anyway.
            if let Some(obj) = self.object(t, fid, false)? {
                let c = self.ctx(t, fid);
                // Pieces are folded in first: the cut is then made on plain blocks, and
                // none is left to come back past it.
                object::compact_all(&c, &obj)?;
                let old_len = obj
                    .data
                    .size_bytes()
                    .map_err(|e| c.io("reading the object length", &e))?;
                let cut = new_len < old_len;
                let log_len = if cut && obj.intents.needs_sync_work() {
                    Some(begin_log_sync(&c, &obj)?)
                } else {
                    None
                };
                self.mark_resized(t, fid);
                object::truncate(&c, &obj, new_len)?;
                if cut {
                    // The metadata server records the new size durably once we answer;
                    // a cut lost in a power cut would let a later extension show the
                    // cut bytes again instead of zeros. So a cut is durable first (found
                    // by the simulator, seed 1100).
                    obj.data
                        .sync_all()
                        .and_then(|()| obj.crcs.sync_all())
                        .map_err(|e| c.io("making the cut durable", &e))?;
                    // Nor may a logged image of a cut block bring its bytes back after
                    // a later extension and a crash (simulator, seed 213).
                    if let Some(len) = log_len {
                        obj.intents
                            .end_sync(len)
                            .map_err(|e| c.io("emptying the object's log", &e))?;
                    }
                }
            }
        }
        Ok(Response::Done)
    }

    /// Folds the pieces of `fid`'s object on target `t` into its blocks, as an fsync
    /// would before syncing (tests reach the states a crash mid-compaction leaves).
    #[cfg(test)]
    pub(crate) fn compact_object(&self, t: usize, fid: InodeId) -> Result<usize, WireError> {
        let _g = self
            .locks
            .lock(fid.0, t as u32, 0, u64::MAX, Mode::Exclusive);
        match self.object(t, fid, false)? {
            Some(obj) => object::compact_all(&self.ctx(t, fid), &obj),
            None => Ok(0),
        }
    }

    /// Frees the local range `[offset, offset + len)`: one contiguous object range per
    /// target, each under its exclusive block-range lock. Missing objects read as zeros
    /// already.
    fn punch(&self, fid: InodeId, unit: u32, offset: u64, len: u64) -> Result<Response, WireError> {
        let stripe = self.stripe(unit)?;
        for e in stripe.extents(offset, len) {
            let t = e.place as usize;
            let (first, end) = (e.local / BLOCK, (e.local + e.len).div_ceil(BLOCK));
            let _g = self.locks.lock(fid.0, e.place, first, end, Mode::Exclusive);
            if let Some(obj) = self.object(t, fid, false)? {
                self.mark_resized(t, fid);
                let c = self.ctx(t, fid);
                object::compact(&c, &obj, &obj.pieces.blocks_in(first, end))?;
                object::punch(&c, &obj, e.local, e.len)?;
            }
        }
        Ok(Response::Done)
    }

    /// Reserves space for the local range on every target it touches, creating the
    /// objects. Content does not change, so a shared lock suffices.
    fn allocate(
        &self,
        fid: InodeId,
        unit: u32,
        offset: u64,
        len: u64,
    ) -> Result<Response, WireError> {
        let stripe = self.stripe(unit)?;
        for e in stripe.extents(offset, len) {
            let t = e.place as usize;
            let (first, end) = (e.local / BLOCK, (e.local + e.len).div_ceil(BLOCK));
            let _g = self.locks.lock(fid.0, e.place, first, end, Mode::Shared);
            let obj = self
                .object(t, fid, true)?
                .ok_or_else(|| self.vanished(t, fid))?;
            self.mark_resized(t, fid);
            object::allocate(&self.ctx(t, fid), &obj, e.local, e.len)?;
        }
        Ok(Response::Done)
    }

    /// The first local offset at or after `offset` with stored data (or in a hole): each
    /// target's object is searched from its own start and the answers are combined by
    /// the striping math. No lock: the answer is a snapshot, as on a local file system,
    /// and a sidecar entry is read whole or not at all.
    fn seek(
        &self,
        fid: InodeId,
        unit: u32,
        offset: u64,
        hole: bool,
    ) -> Result<Response, WireError> {
        let stripe = self.stripe(unit)?;
        let mut found = Vec::with_capacity(self.targets.len());
        for (place, start) in stripe.seek_starts(offset) {
            let t = place as usize;
            let at = match self.object(t, fid, false)? {
                Some(obj) => object::seek(&self.ctx(t, fid), &obj, start, hole)?,
                None => hole.then_some(start),
            };
            found.extend(at.map(|local| (place, local)));
        }
        Ok(Response::Offset {
            offset: stripe.seek_result(found),
        })
    }

    /// Bytes on disk of the fid's objects and sidecars over all targets.
    fn allocated(&self, fid: InodeId) -> Result<Response, WireError> {
        let mut bytes = 0;
        for t in 0..self.targets.len() {
            if let Some(obj) = self.object(t, fid, false)? {
                bytes += object::allocated(&self.ctx(t, fid), &obj)?;
            }
        }
        Ok(Response::Allocated { bytes })
    }

    fn remove(&self, fid: InodeId) -> Result<Response, WireError> {
        for t in 0..self.targets.len() {
            let _g = self
                .locks
                .lock(fid.0, t as u32, 0, u64::MAX, Mode::Exclusive);
            // Every user of the handle takes the range lock first, so none is using it.
            self.cache.evict((t as u32, fid.0));
            lock_set(&self.new_names).remove(&(t as u32, fid.0));
            lock_set(&self.resized).remove(&(t as u32, fid.0));
            let (data, crc) = self.object_paths(t, fid);
            for p in [&data, &crc, &self.log_path(t, fid)] {
                self.store.remove(p).map_err(|e| {
                    self.ctx(t, fid)
                        .io(&format!("removing {}", p.display()), &e)
                })?;
            }
        }
        Ok(Response::Done)
    }

    /// Drops cached pages of the fid's objects on every target. Dirty pages are not
    /// dropped by the kernel, so callers fsync first.
    fn drop_cache(&self, fid: InodeId) -> Result<Response, WireError> {
        for t in 0..self.targets.len() {
            if let Some(obj) = self.object(t, fid, false)? {
                obj.data.drop_cache();
                obj.crcs.drop_cache();
            }
        }
        Ok(Response::Done)
    }

    /// Marked before the change, so that an fsync racing with it syncs fully.
    fn mark_resized(&self, t: usize, fid: InodeId) {
        lock_set(&self.resized).insert((t as u32, fid.0));
    }

    fn fsync(&self, fid: InodeId) -> Result<Response, WireError> {
        let done = Response::Written {
            boot_id: self.boot_id,
        };
        if self.canary == Some(Canary::FsyncBeforeDurable) {
            return Ok(done);
        }
        for t in 0..self.targets.len() {
            self.sync_object(t, fid, false)?;
        }
        Ok(done)
    }

    /// Makes the object of `fid` on target `t` durable (data, checksums, lengths and
    /// names) and its log's older records dead. With `quiesce`, under the object's
    /// exclusive range lock throughout, so that no record is appended meanwhile and the
    /// log is emptied for sure (the bound on a log's size, below); otherwise the lock
    /// is taken only around the log's two steps, and writes go on during the sync.
    fn sync_object(&self, t: usize, fid: InodeId, quiesce: bool) -> Result<(), WireError> {
        let Some(obj) = self.object(t, fid, false)? else {
            return Ok(());
        };
        let c = self.ctx(t, fid);
        let key: Key = (t as u32, fid.0);
        let whole = || {
            self.locks
                .lock(fid.0, t as u32, 0, u64::MAX, Mode::Exclusive)
        };
        let held = quiesce.then(whole);
        // Taken before the sync, so that a change racing with it marks it again.
        let resized = lock_set(&self.resized).remove(&key);
        // Rewrites from here on log images (intent.rs), with none in flight now.
        let log_len = if obj.intents.needs_sync_work() {
            let _g = held.is_none().then(whole);
            // Pieces acknowledged before this fsync are folded into their blocks first,
            // so that the sync covers them and the log's copies may die.
            object::compact_all(&c, &obj)?;
            Some(begin_log_sync(&c, &obj)?)
        } else {
            None
        };
        let synced = if resized {
            obj.data
                .sync_all()
                .and_then(|()| obj.crcs.sync_all())
                .map_err(|e| c.io("syncing data, checksums and lengths", &e))
        } else {
            obj.data
                .sync_data()
                .map_err(|e| c.io("syncing data", &e))
                .and_then(|()| {
                    obj.crcs
                        .sync_data()
                        .map_err(|e| c.io("syncing checksums", &e))
                })
        };
        if let Err(e) = synced {
            if resized {
                lock_set(&self.resized).insert(key);
            }
            return Err(e);
        }
        // The records of rewrites done before the sync are dead on disk before the
        // fsync is answered (intent.rs), with no rewrite in flight.
        if let Some(len) = log_len {
            let _g = held.is_none().then(whole);
            obj.intents
                .end_sync(len)
                .map_err(|e| c.io("emptying the object's log", &e))?;
        }
        drop(held);
        if lock_set(&self.new_names).contains(&key) {
            if self.canary != Some(Canary::SkipDirSync) {
                let (data, _) = self.object_paths(t, fid);
                let dir = data.parent().unwrap_or(Path::new("/"));
                self.store
                    .sync_dir(dir)
                    .map_err(|e| c.io(&format!("syncing directory {}", dir.display()), &e))?;
            }
            lock_set(&self.new_names).remove(&key);
        }
        Ok(())
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

    /// Checks the written blocks of `fid`'s object on target `target`, from object
    /// offset `offset`, for up to `max_bytes`, against their stored checksums (each run
    /// of blocks under a shared range lock, so that no write is seen half done).
    /// Returns the bytes read, the offset to continue from (`None` at the object's end)
    /// and the damaged blocks, which are also logged and counted.
    pub fn scrub(
        &self,
        fid: InodeId,
        target: u32,
        offset: u64,
        max_bytes: u64,
    ) -> Result<(u64, Option<u64>, Vec<Damage>), WireError> {
        let t = target as usize;
        if t >= self.targets.len() || offset % BLOCK != 0 {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "data server {}: scrub of target {target} at {offset}: it has {} targets and \
                     offsets are block-aligned",
                    self.id.0,
                    self.targets.len()
                ),
            ));
        }
        // Opened past the handle cache, so that a scrub does not evict busy objects;
        // but an object with a log to replay (its server died mid-rewrite) is opened
        // through the cache, which replays it only when no handle of it is in use, so
        // that the scrub does not report blocks the replay repairs.
        let c = self.ctx(t, fid);
        let (data_path, crc_path) = self.object_paths(t, fid);
        let open = |p: &Path| {
            self.store
                .open(p, false)
                .map_err(|e| c.io(&format!("opening {}", p.display()), &e))
        };
        let log = open(&self.log_path(t, fid))?;
        let obj = if log.is_some_and(|f| f.size_bytes().is_ok_and(|n| n > 0)) {
            match self.object(t, fid, false)? {
                Some(obj) => obj,
                None => return Ok((0, None, Vec::new())),
            }
        } else {
            let (Some(data), Some(crcs)) = (open(&data_path)?, open(&crc_path)?) else {
                return Ok((0, None, Vec::new()));
            };
            // Never written through: the scrub only reads.
            Arc::new(Object {
                data,
                crcs,
                intents: IntentLog::new(self.log_path(t, fid), self.store.clone(), None),
                pieces: Default::default(),
                zeros: Default::default(),
                unflushed: Default::default(),
            })
        };
        let blocks = obj
            .crcs
            .size_bytes()
            .map_err(|e| c.io("reading the checksums' length", &e))?
            / object::ENTRY_BYTES;
        let (first, end) = (
            offset / BLOCK,
            blocks.min(offset / BLOCK + max_bytes.max(BLOCK) / BLOCK),
        );
        let mut damaged = Vec::new();
        let mut at = first;
        while at < end {
            let n = (end - at).min(SCRUB_STEP_BYTES / BLOCK);
            let _g = self.locks.lock(fid.0, target, at, at + n, Mode::Shared);
            for (block, stored, actual) in object::verify(&c, &obj, at, n)? {
                tracing::error!(
                    "data server {}: scrub: {fid} on target {}: block at object offset {} \
                     fails its checksum (stored {stored:08x}, computed {actual:08x})",
                    self.id.0,
                    self.targets[t].root.display(),
                    block * BLOCK
                );
                damaged.push(Damage {
                    fid,
                    target,
                    offset: block * BLOCK,
                    stored_crc: stored,
                    actual_crc: actual,
                });
            }
            at += n;
        }
        let bytes = end.saturating_sub(first) * BLOCK;
        self.stats
            .scrubbed_bytes
            .fetch_add(bytes, Ordering::Relaxed);
        self.stats
            .damaged_blocks
            .fetch_add(damaged.len() as u64, Ordering::Relaxed);
        Ok((bytes, (end < blocks).then_some(end * BLOCK), damaged))
    }

    /// Starts the background scrubber: it reads every stored block of every object
    /// against its checksum, over and over, at `rate_bytes_s` (0: no scrubber), until
    /// `shutdown` is set.
    pub fn start_scrubber(
        self: &Arc<Self>,
        rate_bytes_s: u64,
        shutdown: Arc<std::sync::atomic::AtomicBool>,
    ) -> Option<std::thread::JoinHandle<()>> {
        if rate_bytes_s == 0 {
            return None;
        }
        self.stats
            .scrub_rate_bytes_s
            .store(rate_bytes_s, Ordering::Relaxed);
        let svc = self.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("scrub-{}", self.id.0))
            .spawn(move || svc.scrub_forever(rate_bytes_s, &shutdown));
        match spawned {
            Ok(h) => Some(h),
            Err(e) => {
                tracing::error!("data server {}: cannot start the scrubber: {e}", self.id.0);
                None
            }
        }
    }

    fn scrub_forever(&self, rate_bytes_s: u64, shutdown: &std::sync::atomic::AtomicBool) {
        let throttle = Throttle::new(rate_bytes_s, self.clock.clone());
        let stop = || shutdown.load(Ordering::Relaxed);
        while !stop() {
            match self.scrub_pass(&throttle, &stop) {
                Ok(_) => self.rest(SCRUB_IDLE, &stop),
                Err(e) => {
                    tracing::warn!("data server {}: scrub pass: {e}", self.id.0);
                    self.rest(SCRUB_IDLE, &stop);
                }
            }
        }
    }

    /// Sleeps `d` in short steps, returning early once `stop` says so.
    fn rest(&self, d: Duration, stop: &dyn Fn() -> bool) {
        let end = self.clock.now() + d;
        while !stop() && self.clock.now() < end {
            let step = (end - self.clock.now()).min(Duration::from_millis(200));
            self.clock.sleep(step);
        }
    }

    /// Yields to clients: waits until no request came for `SCRUB_QUIET`, at most
    /// `SCRUB_MAX_YIELD`, so that a busy server scrubs slowly, never not at all.
    fn wait_for_quiet(&self, stop: &dyn Fn() -> bool) {
        let give_up = self.clock.now() + SCRUB_MAX_YIELD;
        loop {
            let before = self.stats.activity();
            self.clock.sleep(SCRUB_QUIET);
            let quiet = self.stats.activity() == before;
            if quiet || stop() || self.clock.now() >= give_up {
                return;
            }
        }
    }

    /// One pass over every object; returns the bytes read.
    fn scrub_pass(&self, throttle: &Throttle, stop: &dyn Fn() -> bool) -> Result<u64, WireError> {
        let mut cursor = None;
        let mut total = 0;
        loop {
            let (fids, done) = self.list_objects(cursor, 256)?;
            for fid in &fids {
                for t in 0..self.targets.len() as u32 {
                    let mut at = Some(0);
                    while let Some(offset) = at {
                        if stop() {
                            return Ok(total);
                        }
                        self.wait_for_quiet(stop);
                        // A removed object is simply gone: nothing to scrub.
                        let (bytes, next, _) = self.scrub(*fid, t, offset, SCRUB_STEP_BYTES)?;
                        total += bytes;
                        self.rest(
                            throttle.reserve(bytes).saturating_sub(self.clock.now()),
                            stop,
                        );
                        at = next;
                    }
                }
            }
            cursor = fids.last().copied().or(cursor);
            if done {
                break;
            }
        }
        self.stats.scrub_passes.fetch_add(1, Ordering::Relaxed);
        Ok(total)
    }

    fn status(&self) -> Result<Response, WireError> {
        let mut targets = Vec::with_capacity(self.targets.len());
        for t in &self.targets {
            let u = self.store.usage(&t.root).map_err(|e| {
                WireError::io(
                    format!(
                        "data server {}: usage of target {}",
                        self.id.0,
                        t.root.display()
                    ),
                    &e,
                )
            })?;
            targets.push(TargetStatus {
                path: t.root.display().to_string(),
                bytes_used: u.used,
                bytes_total: u.total,
                bytes_free: u.free,
                throttle_bytes_s: t.throttle.as_ref().map(|th| th.rate_bytes_s()),
            });
        }
        let s = &self.stats;
        let counters = Counters {
            requests: s.requests.load(Ordering::Relaxed),
            errors: s.errors.load(Ordering::Relaxed),
            bytes_read: s.bytes_read.load(Ordering::Relaxed),
            bytes_written: s.bytes_written.load(Ordering::Relaxed),
            write_requests: s.write_requests.load(Ordering::Relaxed),
        };
        Ok(Response::DataStatus {
            server_id: self.id,
            targets,
            counters,
        })
    }

    /// Each target's size and free bytes: one statvfs each, no walk (statfs, `df`).
    fn space(&self) -> Result<Response, WireError> {
        let targets = self
            .targets
            .iter()
            .map(|t| {
                let (bytes_total, bytes_free) = self.store.space(&t.root).map_err(|e| {
                    WireError::io(
                        format!(
                            "data server {}: space of target {}",
                            self.id.0,
                            t.root.display()
                        ),
                        &e,
                    )
                })?;
                Ok(TargetSpace {
                    bytes_total,
                    bytes_free,
                })
            })
            .collect::<Result<Vec<_>, WireError>>()?;
        Ok(Response::Space { targets })
    }

    fn dispatch(&self, conn: &ConnInfo, req: Request, data: &[u8]) -> Reply {
        let opcode = req.opcode();
        if data.len() > MAX_DATA_BYTES as usize {
            let msg = format!(
                "request carries {} bytes, the limit is {MAX_DATA_BYTES}",
                data.len()
            );
            return Reply::err(WireError::new(ErrorCode::InvalidArgument, msg));
        }
        let op = match req.route() {
            Route::DataOp(op) => op,
            Route::AnyOp(AnyOp::Ping {}) => {
                return Reply::ok(Response::Pong {
                    role: Role::Data,
                    server_id: Some(self.id),
                    version: env!("CARGO_PKG_VERSION").to_string(),
                })
            }
            Route::ConnectionOp(op) => {
                return Reply::err(WireError::new(
                    ErrorCode::UnexpectedMessage,
                    format!(
                        "{} is not for this point of a connection",
                        op.opcode().name()
                    ),
                ))
            }
            Route::MetaReadOp(_) | Route::MetaWriteOp(_) | Route::MetaOp(_) => {
                return Reply::err(WireError::new(
                    ErrorCode::Unsupported,
                    format!(
                        "data server {} does not serve {} (the metadata server does)",
                        self.id.0,
                        opcode.name()
                    ),
                ))
            }
            // Descriptors and pipes cross only a Unix socket (local.rs).
            Route::SameHostOp(_) => {
                return Reply::err(WireError::new(
                    ErrorCode::UnexpectedMessage,
                    format!(
                        "data server {} serves {} only on its short-circuit socket",
                        self.id.0,
                        opcode.name()
                    ),
                ))
            }
        };
        let result = match op {
            DataOp::Write {
                fid,
                unit,
                offset,
                crcs,
            } => self.write(conn, fid, unit, offset, &crcs, data),
            DataOp::WriteList {
                fid,
                unit,
                extents,
                crcs,
            } => self.write_list(&Transit::Tcp(conn.peer), fid, unit, &extents, &crcs, data),
            DataOp::Read {
                fid,
                unit,
                offset,
                len,
            } => {
                let r = if self.zero_copy {
                    self.read_zero_copy(fid, unit, offset, len)
                } else {
                    self.read(fid, unit, offset, len)
                        .map(|(crcs, bytes)| (crcs, Payload::Bytes(bytes)))
                };
                return match r {
                    Ok((crcs, data)) => Reply {
                        result: Ok(Response::ReadData { crcs }),
                        data,
                    },
                    Err(e) => Reply::err(e),
                };
            }
            DataOp::ReadList { fid, unit, ranges } => {
                // Range by range through memory: each range's locks are released before
                // the next is taken, so a list read never waits holding a lock.
                let total: usize = ranges.iter().map(|r| r.1 as usize).sum();
                let mut all_crcs = Vec::with_capacity(total / BLOCK_BYTES as usize);
                let mut bytes = Vec::with_capacity(total);
                for (offset, len) in ranges {
                    match self.read(fid, unit, offset, len) {
                        Ok((crcs, b)) => {
                            all_crcs.extend(crcs);
                            bytes.extend_from_slice(&b);
                        }
                        Err(e) => return Reply::err(e),
                    }
                }
                return Reply {
                    result: Ok(Response::ReadData { crcs: all_crcs }),
                    data: Payload::Bytes(bytes),
                };
            }
            DataOp::Truncate {
                fid,
                unit,
                local_size,
            } => self.truncate(fid, unit, local_size),
            DataOp::Remove { fid } => self.remove(fid),
            DataOp::Fsync { fid } => self.fsync(fid),
            DataOp::DropCache { fid } => self.drop_cache(fid),
            DataOp::Punch {
                fid,
                unit,
                offset,
                len,
            } => self.punch(fid, unit, offset, len),
            DataOp::Allocate {
                fid,
                unit,
                offset,
                len,
            } => self.allocate(fid, unit, offset, len),
            DataOp::Seek {
                fid,
                unit,
                offset,
                hole,
            } => self.seek(fid, unit, offset, hole),
            DataOp::Allocated { fid } => self.allocated(fid),
            DataOp::DataStatus {} => self.status(),
            DataOp::ListObjects { after, limit } => self
                .list_objects(after, limit)
                .map(|(fids, done)| Response::Objects { fids, done }),
            DataOp::Scrub {
                fid,
                target,
                offset,
            } => self.scrub(fid, target, offset, SCRUB_REQUEST_BYTES).map(
                |(bytes, next, damaged)| Response::Scrubbed {
                    bytes,
                    next,
                    damaged,
                },
            ),
            DataOp::Space {} => self.space(),
            DataOp::LocalityStatus {} => {
                let s = &self.stats;
                let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
                Ok(Response::LocalityStatus {
                    host: self.host.get().cloned().unwrap_or_default(),
                    same_host_received: get(&s.same_host_received),
                    same_host_sent: get(&s.same_host_sent),
                    other_host_received: get(&s.other_host_received),
                    other_host_sent: get(&s.other_host_sent),
                    short_circuit_opens: get(&s.local_opens),
                })
            }
            DataOp::ScrubStatus {} => {
                let s = &self.stats;
                Ok(Response::ScrubStatus {
                    scrubbed_bytes: s.scrubbed_bytes.load(Ordering::Relaxed),
                    damaged_blocks: s.damaged_blocks.load(Ordering::Relaxed),
                    passes: s.scrub_passes.load(Ordering::Relaxed),
                    rate_bytes_s: s.scrub_rate_bytes_s.load(Ordering::Relaxed),
                })
            }
        };
        Reply::from_result(result)
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

/// A granted direct write: its ranges stay locked exclusive until it is dropped.
pub(crate) struct DirectGrant {
    fid: InodeId,
    /// Blocks of the whole range.
    blocks: usize,
    units: Vec<DirectUnit>,
    /// The descriptors handed out: a write descriptor per target of the range, then the
    /// fence's.
    pub files: Vec<Arc<dyn stripefs_sys::storage::ObjectFile>>,
    /// The grant's byte of the fence file.
    fence: Option<u64>,
}

impl DirectGrant {
    /// The pieces of the grant, in the range's order, for the client.
    pub fn pieces(&self) -> Vec<stripefs_wire::GrantPiece> {
        self.units
            .iter()
            .map(|u| stripefs_wire::GrantPiece {
                fd: u.fd,
                offset: u.local,
                len: u.len as u32,
            })
            .collect()
    }

    pub fn blocks(&self) -> usize {
        self.blocks
    }
}

struct DirectUnit {
    t: usize,
    obj: Arc<Object>,
    local: u64,
    len: u64,
    /// Index of its target's descriptor in `files`.
    fd: u16,
    _guard: RangeGuard,
}

/// A same-host write of whole blocks whose bytes wait in the connection's pipe.
pub(crate) struct LocalWrite {
    pub fid: InodeId,
    pub unit: u32,
    pub offset: u64,
    pub len: u32,
    pub crcs: Vec<u32>,
}

/// A same-host direct write's range: the client writes its hole blocks itself.
pub(crate) struct DirectWrite {
    pub fid: InodeId,
    pub unit: u32,
    pub offset: u64,
    pub len: u32,
}

/// Why a short-circuit write did not happen.
pub(crate) enum LocalWriteError {
    /// The server takes none (throttled targets): the client sends over TCP from now on.
    Refused,
    /// This write failed; the pipe is in step for the next.
    Failed(WireError),
    /// The pipe is out of step or broken: the connection must end.
    Broken(String),
}

impl From<WireError> for LocalWriteError {
    fn from(e: WireError) -> Self {
        LocalWriteError::Failed(e)
    }
}

/// Checks the data against the per-piece CRCs the client computed before sending.
fn verify_transit(
    from: &dyn std::fmt::Display,
    fid: InodeId,
    offset: u64,
    crcs: &[u32],
    data: &[u8],
) -> Result<(), WireError> {
    let mut at = 0;
    for (i, len) in pieces(offset, data.len()).enumerate() {
        let actual = stripefs_wire::crc32c(&data[at..at + len]);
        if crcs.get(i) != Some(&actual) {
            return Err(WireError::new(
                ErrorCode::Checksum,
                format!(
                    "data corrupted in transit from {from}: write to {fid} at local offset {}, \
                     {len} bytes fail their checksum",
                    offset + at as u64
                ),
            ));
        }
        at += len;
    }
    Ok(())
}

impl Service for DataService {
    fn handle(&self, conn: &ConnInfo, req: Valid, data: &[u8]) -> Reply {
        let env = req.into_env();
        // ScrubStatus rides along with DataStatus (`cluster status`) and is not counted
        // (its row says), so that one status moves the counters by one.
        if env.req.opcode().counted() {
            self.stats.requests.fetch_add(1, Ordering::Relaxed);
        }
        if matches!(env.req, Request::Write { .. } | Request::WriteList { .. }) {
            self.stats.write_requests.fetch_add(1, Ordering::Relaxed);
        }
        let op = env.req.opcode();
        if let Some(t) = &conn.token {
            if let Err(e) = self.token_allows(t, &env.req) {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("{} from {} refused: {e}", op.name(), conn.peer);
                return Reply::err(e);
            }
        }
        let reply = self.dispatch(conn, env.req, data);
        self.charge_host_net(conn, data.len(), &reply);
        if reply.result.is_ok() {
            self.count_locality(conn, data.len() as u64, reply.data.len());
        }
        if let Err(e) = &reply.result {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("{} from {} failed: {e}", op.name(), conn.peer);
        }
        reply
    }
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

/// [`IntentLog::begin_sync`] of `obj`'s log, its error naming the object.
fn begin_log_sync(c: &Ctx, obj: &Object) -> Result<u64, WireError> {
    obj.intents
        .begin_sync()
        .map_err(|e| c.io("reading the object's log length", &e))
}

/// How `write_unit` writes a partial edge block of a write.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Edge {
    /// In place, with the write's whole blocks (also: no such edge).
    Run,
    /// As a piece in the object's log (the block's entry as read under the lock).
    Piece(Option<Entry>),
    /// In place into bytes known to be zeros; the block's CRC before.
    Zeros(u32),
}

/// Where a write's bytes came from, for its error messages.
enum Transit {
    Tcp(std::net::SocketAddr),
    Pipe,
}

impl std::fmt::Display for Transit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Transit::Tcp(peer) => write!(f, "{peer}"),
            Transit::Pipe => f.write_str("the short-circuit pipe"),
        }
    }
}
