//! Scrubbing: checking stored blocks against their checksums, on request and in the
//! background scrubber.

use super::DataService;
use crate::cache::Object;
use crate::intent::IntentLog;
use crate::locks::Mode;
use crate::object::{self, BLOCK};
use crate::throttle::Throttle;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use stripefs_wire::{Damage, ErrorCode, InodeId, WireError};

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

impl DataService {
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
        let end = self.clock.monotonic() + d;
        while !stop() && self.clock.monotonic() < end {
            let step = (end - self.clock.monotonic()).min(Duration::from_millis(200));
            self.clock.sleep(step);
        }
    }

    /// Yields to clients: waits until no request came for `SCRUB_QUIET`, at most
    /// `SCRUB_MAX_YIELD`, so that a busy server scrubs slowly, never not at all.
    fn wait_for_quiet(&self, stop: &dyn Fn() -> bool) {
        let give_up = self.clock.monotonic() + SCRUB_MAX_YIELD;
        loop {
            let before = self.stats.activity();
            self.clock.sleep(SCRUB_QUIET);
            let quiet = self.stats.activity() == before;
            if quiet || stop() || self.clock.monotonic() >= give_up {
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
                            throttle
                                .reserve(bytes)
                                .saturating_sub(self.clock.monotonic()),
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
}
