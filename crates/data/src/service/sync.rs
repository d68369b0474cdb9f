//! Durability and removal: fsync (and the syncs of new names' directories),
//! truncate, remove, dropping cached pages.

use super::{lock_set, DataService};
use crate::cache::{Key, Object};
use crate::locks::Mode;
use crate::object::{self, Ctx};
use crate::Canary;
use std::path::Path;
use stripefs_wire::{InodeId, Response, WireError};

impl DataService {
    pub(super) fn truncate(
        &self,
        fid: InodeId,
        unit: u32,
        local_size: u64,
    ) -> Result<Response, WireError> {
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

    pub(super) fn remove(&self, fid: InodeId) -> Result<Response, WireError> {
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
    pub(super) fn drop_cache(&self, fid: InodeId) -> Result<Response, WireError> {
        for t in 0..self.targets.len() {
            if let Some(obj) = self.object(t, fid, false)? {
                obj.data.drop_cache();
                obj.crcs.drop_cache();
            }
        }
        Ok(Response::Done)
    }

    /// Marked before the change, so that an fsync racing with it syncs fully.
    pub(super) fn mark_resized(&self, t: usize, fid: InodeId) {
        lock_set(&self.resized).insert((t as u32, fid.0));
    }

    pub(super) fn fsync(&self, fid: InodeId) -> Result<Response, WireError> {
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
    pub(super) fn sync_object(
        &self,
        t: usize,
        fid: InodeId,
        quiesce: bool,
    ) -> Result<(), WireError> {
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
}

/// [`IntentLog::begin_sync`] of `obj`'s log, its error naming the object.
fn begin_log_sync(c: &Ctx, obj: &Object) -> Result<u64, WireError> {
    obj.intents
        .begin_sync()
        .map_err(|e| c.io("reading the object's log length", &e))
}
