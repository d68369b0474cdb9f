//! Same-host direct writes: grants of hole blocks that the client writes itself
//! (docs/protocol.md "Short-circuit socket", `fence.rs`).

use super::{DataService, LocalWriteError};
use crate::cache::Object;
use crate::locks::{Mode, RangeGuard};
use crate::object::{self, BLOCK};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use stripefs_wire::{ErrorCode, InodeId, WireError};

impl DataService {
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

/// A same-host direct write's range: the client writes its hole blocks itself.
pub(crate) struct DirectWrite {
    pub fid: InodeId,
    pub unit: u32,
    pub offset: u64,
    pub len: u32,
}
