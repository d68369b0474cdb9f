//! Writes: from TCP and from the same-host pipe, single and listed, checked in transit
//! and written unit by unit under block-range locks; the bound on an object's log.

use super::DataService;
use crate::cache::Object;
use crate::locks::Mode;
use crate::object::{self, BLOCK};
use crate::Canary;
use std::sync::atomic::Ordering;
use stripefs_layout::Stripe;
use stripefs_rpc::samehost::PipeIn;
use stripefs_rpc::ConnInfo;
use stripefs_wire::sidecar::Entry;
use stripefs_wire::{pieces, ErrorCode, InodeId, Response, WireError};

/// Bytes a log may hold before a write syncs its object to empty it (small in unit
/// tests, so that they reach it).
const MAX_LOG_BYTES: u64 = if cfg!(test) { 64 << 10 } else { 64 << 20 };

impl DataService {
    pub(super) fn write(
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
    pub(super) fn write_list(
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
    pub(super) fn local_stripe(&self, unit: u32) -> Result<Stripe, LocalWriteError> {
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
}

/// A same-host write of whole blocks whose bytes wait in the connection's pipe.
pub(crate) struct LocalWrite {
    pub fid: InodeId,
    pub unit: u32,
    pub offset: u64,
    pub len: u32,
    pub crcs: Vec<u32>,
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
pub(super) enum Transit {
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
