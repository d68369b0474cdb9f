//! Space: targets' size and free bytes, bytes allocated, reserving space, punching
//! holes, and seeking data and holes.

use super::DataService;
use crate::locks::Mode;
use crate::object::{self, BLOCK};
use stripefs_wire::{InodeId, Response, TargetSpace, WireError};

impl DataService {
    /// Frees the local range `[offset, offset + len)`: one contiguous object range per
    /// target, each under its exclusive block-range lock. Missing objects read as zeros
    /// already.
    pub(super) fn punch(
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
    pub(super) fn allocate(
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
    pub(super) fn seek(
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
    pub(super) fn allocated(&self, fid: InodeId) -> Result<Response, WireError> {
        let mut bytes = 0;
        for t in 0..self.targets.len() {
            if let Some(obj) = self.object(t, fid, false)? {
                bytes += object::allocated(&self.ctx(t, fid), &obj)?;
            }
        }
        Ok(Response::Allocated { bytes })
    }

    /// Each target's size and free bytes: one statvfs each, no walk (statfs, `df`).
    pub(super) fn space(&self) -> Result<Response, WireError> {
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
}
