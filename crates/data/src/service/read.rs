//! Reads: through memory, or answered from where the bytes lie (`sendfile`).

use super::DataService;
use crate::cache::Object;
use crate::locks::{Mode, RangeGuard};
use crate::object::{self, BLOCK};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use stripefs_rpc::{Part, Payload};
use stripefs_wire::{InodeId, WireError, BLOCK_BYTES};

impl DataService {
    pub(super) fn read(
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
    pub(super) fn read_zero_copy(
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
}
