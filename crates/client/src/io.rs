//! Striped I/O on one inode: write-behind, parallel reads, readahead, size tracking.
//!
//! All handles of one inode in one client share an [`InodeIo`], so that a read through
//! one handle waits for overlapping writes queued through another (read-your-writes
//! within a client) and a write drops readahead data that any handle prefetched.
//!
//! Invariants: a pending write chunk and a read or write of an overlapping range are
//! never in flight at once (overlaps wait), so the order of overlapping operations is
//! the order of the calls. `inflight_bytes` is the sum of the lengths of unreaped
//! pending chunks. Data returned to a caller has passed its block CRC check.

use crate::abuf::IoBuf;
use crate::chunk::{Chunk, Geometry};
use crate::exec::{promise, Completion, Promise};
use crate::pool::ServerPool;
use crate::{
    Inner, GATHER_BELOW_BYTES, GATHER_MAX_BYTES, GATHER_MAX_EXTENTS, MAX_FILE_BYTES,
    READAHEAD_BASE_BYTES, READAHEAD_MAX_BYTES,
};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

mod inline;
mod sparse;
pub(crate) use sparse::{allocated_bytes, allocated_known};

use stripefs_wire::{
    crc32c, padded_block_crc, piece_crcs, Attr, Cred, ErrorCode, InodeId, Layout, Request,
    Response, SetAttrs, WireError, BLOCK_BYTES, MAX_DATA_BYTES, MAX_LIST_EXTENTS,
};

/// The bytes of a write: the caller's slice, or a buffer the caller gave away (taken
/// out when it is sent as it is).
enum Src<'a> {
    Slice(&'a [u8]),
    Owned(Option<IoBuf>),
}

impl Src<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Src::Slice(s) => s,
            Src::Owned(b) => b.as_deref().expect("read only before it is taken"),
        }
    }
}

/// The write-behind window of a handle's writes that go direct (see `write_from`).
const DIRECT_WINDOW_BYTES: u64 = 16 << 20;

/// One queued or running write request, or the gathered small writes of one place
/// not yet sent (`gather` names the place).
struct Pending {
    /// Global span the chunk lies in (an over-estimate, see `Geometry::global_span`).
    lo: u64,
    hi: u64,
    bytes: u64,
    done: Completion<()>,
    gather: Option<u32>,
    /// The place and the local ranges `[lo, hi)` written, for writes and gathers: what
    /// another write must not overlap (the global span of a gather also covers the other
    /// places' bytes in between, and other writers' records interleaved with its own).
    /// `None` for a fence, which holds its whole global span.
    exact: Option<(u32, Vec<(u64, u64)>)>,
}

impl Pending {
    /// Whether this touches `len` bytes at `local` of `place`, whose global span is
    /// `span`.
    fn touches(&self, place: u32, local: u64, len: u64, span: (u64, u64)) -> bool {
        // The global spans are over-estimates: disjoint spans cannot share a byte.
        if !overlaps((self.lo, self.hi), span.0, span.1) {
            return false;
        }
        match &self.exact {
            None => true,
            Some((p, ranges)) => {
                *p == place && ranges.iter().any(|&r| overlaps(r, local, local + len))
            }
        }
    }

    /// Whether this touches any of `chunks` (with their global spans).
    fn touches_any(&self, chunks: &[(Chunk, (u64, u64))]) -> bool {
        chunks
            .iter()
            .any(|(c, span)| self.touches(c.place, c.local, c.len, *span))
    }
}

/// Small writes to one place, gathered into one list write (see `GATHER_BELOW_BYTES`).
/// Its `Pending` entry is in the queue from the first extent on, so that readers and
/// overlapping writers see it; whoever would wait for it sends it first (`send_gathers`).
struct Gather {
    cred: Cred,
    /// Extents in the order written: (local offset, bytes).
    extents: Vec<(u64, Vec<u8>)>,
    bytes: u64,
    promise: Promise<()>,
}

/// A request of a read: the chunk, the local offset its buffer starts at (a cell may
/// start before the chunk), and the buffer to come.
/// A chunk of a read, the local offset its read starts at, the read, and whether that is
/// a cell (a stretch read for the cache, larger than the chunk).
type ReadPart = (Chunk, u64, Completion<Arc<Vec<u8>>>, bool);
/// A chunk of a read, the local offset its buffer starts at, and the buffer.
type Fetched = (Chunk, u64, Arc<Vec<u8>>);

/// One readahead cell: `len` bytes at `local` of a server, being read or read.
struct Cell {
    local: u64,
    len: u64,
    span: (u64, u64),
    data: Completion<Arc<Vec<u8>>>,
}

struct State {
    pending: VecDeque<Pending>,
    inflight_bytes: u64,
    /// First error of a background write not yet reported to a caller.
    latched: Option<WireError>,
    /// Background writes that failed so far, and the last one's error: every handle
    /// open at the time reports it at its flushes and closes and at its next fsync
    /// ([`InodeIo::write_errors_after`], [`InodeIo::write_errors_since`]), even when
    /// another call took `latched`. That call may not be the write whose bytes were
    /// lost, nor of the same handle (the mount's kernel turns an error after part of a
    /// write into a short count and drops it; another process's write on the mount
    /// shares the inode), so a flush, close or fsync that succeeds says every write
    /// before it landed, as Linux's `errseq_t` does for fsync and NFS's close does.
    write_errors: u64,
    last_write_error: Option<WireError>,
    /// Highest end written since the size was last sent to the metadata server.
    unflushed_end: Option<u64>,
    /// When the last of those writes was made: the mtime to record, and to show
    /// meanwhile, as write(2) marks the file modified at once.
    unflushed_mtime_ns: i64,
    /// Size as last seen from the metadata server.
    meta_size: u64,
    cells: HashMap<(u32, u64), Cell>,
    cell_bytes_held: u64,
    ra_window: u64,
    /// Readahead stops here when the reader declared its range (`advise_sequential`).
    ra_limit: Option<u64>,
    /// Gathered small writes per place, not yet sent.
    gathers: HashMap<u32, Gather>,
}

pub(crate) struct InodeIo {
    inner: Arc<Inner>,
    pub ino: InodeId,
    pub layout: Layout,
    geo: Geometry,
    /// Executor index (data server id) of each place of the layout.
    places: Vec<usize>,
    /// For messages: the path this inode was first opened by, if any.
    path: Option<String>,
    ra_max: u64,
    state: Mutex<State>,
    /// Per place, the boot identity its data server answered this inode's writes with
    /// since the last fsync: a different one later means the server restarted and may
    /// have lost them (see `note_boot`).
    boots: Arc<Mutex<HashMap<u32, u64>>>,
    /// Set when the metadata server released this inode's opens with an ended session
    /// and it could not be opened again (`session.rs`): every later call fails so.
    lost: std::sync::OnceLock<WireError>,
    /// The file's bytes while the metadata server holds them (`io/inline.rs`); `None`
    /// once the file is striped over its data servers.
    inline: inline::InlineSlot,
}

impl Drop for InodeIo {
    /// The boot identities of writes not yet fsynced stay with the client (`KeptBoots`).
    fn drop(&mut self) {
        let boots = std::mem::take(&mut *self.boots.lock().unwrap_or_else(|p| p.into_inner()));
        self.inner.kept_boots.keep(self.ino, &self.layout, boots);
    }
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn overlaps(a: (u64, u64), lo: u64, hi: u64) -> bool {
    a.0 < hi && lo < a.1
}

impl State {
    /// The last background write's error if any failed after the first `seen`.
    fn lost_after(&self, seen: u64) -> Result<(), WireError> {
        if self.write_errors == seen {
            return Ok(());
        }
        Err(self
            .last_write_error
            .clone()
            .expect("an error with every count"))
    }

    /// Retires finished writes, latching the first error.
    fn reap(&mut self) {
        let mut i = 0;
        while i < self.pending.len() {
            match self.pending[i].done.try_get() {
                None => i += 1,
                Some(r) => {
                    let p = self.pending.remove(i).expect("index in range");
                    self.inflight_bytes -= p.bytes;
                    if let Err(e) = r {
                        self.write_errors += 1;
                        self.last_write_error = Some(e.clone());
                        self.latched.get_or_insert(e);
                    }
                }
            }
        }
        // O(pending) per reap: on in test builds only (the rule in ARCHITECTURE.md).
        debug_assert_eq!(
            self.inflight_bytes,
            self.pending.iter().map(|p| p.bytes).sum::<u64>()
        );
    }

    /// The completion of the first pending write overlapping `[lo, hi)`, and whether it
    /// is a gather not sent yet.
    fn first_overlap(&self, lo: u64, hi: u64) -> Option<(Completion<()>, bool)> {
        self.first_hit(|p| overlaps((p.lo, p.hi), lo, hi))
    }

    /// The completion of the first pending write `hit` picks, and whether it is a gather
    /// not sent yet.
    fn first_hit(&self, hit: impl Fn(&Pending) -> bool) -> Option<(Completion<()>, bool)> {
        let p = self.pending.iter().find(|p| hit(p))?;
        Some((p.done.clone(), p.gather.is_some()))
    }

    fn drop_cells(&mut self, keep: impl Fn(&Cell) -> bool) {
        let mut freed = 0;
        self.cells.retain(|_, c| {
            let k = keep(c);
            if !k {
                freed += c.len;
            }
            k
        });
        self.cell_bytes_held -= freed;
    }

    fn size(&self) -> u64 {
        self.meta_size.max(self.unflushed_end.unwrap_or(0))
    }
}

impl InodeIo {
    pub fn new(inner: Arc<Inner>, attr: &Attr, path: Option<String>) -> Result<InodeIo, WireError> {
        let layout = attr.layout.clone().ok_or_else(|| {
            WireError::new(
                ErrorCode::InvalidArgument,
                format!("{} has no data layout", attr.ino),
            )
        })?;
        let geo = Geometry::new(attr.ino, &layout)?;
        let mut places = Vec::with_capacity(layout.servers.len());
        for s in &layout.servers {
            if s.0 as usize >= inner.data.len() {
                return Err(WireError::new(
                    ErrorCode::InvalidArgument,
                    format!(
                        "{} is striped over data server {}, which the cluster file does not list",
                        attr.ino, s.0
                    ),
                ));
            }
            places.push(s.0 as usize);
        }
        let round = geo.width() as u64 * geo.unit() as u64;
        let ra_max = READAHEAD_BASE_BYTES.max(2 * round).min(READAHEAD_MAX_BYTES);
        let boots = inner.kept_boots.take(attr.ino, &layout);
        Ok(InodeIo {
            inner,
            ino: attr.ino,
            layout,
            geo,
            places,
            path,
            ra_max,
            boots: Arc::new(Mutex::new(boots)),
            lost: std::sync::OnceLock::new(),
            inline: Mutex::new(inline::InlineState::from_attr(attr)),
            state: Mutex::new(State {
                pending: VecDeque::new(),
                inflight_bytes: 0,
                latched: None,
                write_errors: 0,
                last_write_error: None,
                unflushed_end: None,
                unflushed_mtime_ns: attr.mtime_ns,
                meta_size: attr.size,
                cells: HashMap::new(),
                cell_bytes_held: 0,
                ra_window: 0,
                ra_limit: None,
                gathers: HashMap::new(),
            }),
        })
    }

    /// How the file is named in messages: inode and, when known, path.
    pub fn describe(&self) -> String {
        match &self.path {
            Some(p) => format!("{} ({p})", self.ino),
            None => self.ino.to_string(),
        }
    }

    fn pool(&self, place: u32) -> &Arc<ServerPool> {
        &self.inner.data[self.places[place as usize]]
    }

    /// The size this client knows: the metadata server's, or further if written here.
    pub fn size(&self) -> u64 {
        lock(&self.state).size()
    }

    /// The end and time of writes made here that the metadata server does not know
    /// about yet.
    pub fn unflushed(&self) -> Option<(u64, i64)> {
        let st = lock(&self.state);
        st.unflushed_end.map(|end| (end, st.unflushed_mtime_ns))
    }

    pub fn note_meta_size(&self, size: u64) {
        lock(&self.state).meta_size = size;
    }

    /// The file changed through another client: `size` is the server's now, and bytes
    /// read ahead before may be stale.
    pub fn note_changed_elsewhere(&self, size: u64) {
        let mut st = lock(&self.state);
        st.meta_size = size;
        st.drop_cells(|_| false);
    }

    // ---- waiting on pending writes ----

    /// Sends the gathered writes of the places `which` picks (by their pending span).
    fn send_gathers(&self, which: impl Fn(&Pending) -> bool) {
        let taken: Vec<(u32, Gather)> = {
            let mut st = lock(&self.state);
            let places: Vec<u32> = st
                .pending
                .iter()
                .filter(|p| p.gather.is_some() && which(p))
                .filter_map(|p| p.gather)
                .collect();
            let taken: Vec<(u32, Gather)> = places
                .into_iter()
                .filter_map(|pl| st.gathers.remove(&pl).map(|g| (pl, g)))
                .collect();
            // The entries stay in `pending` (their completions are the promises'); they
            // are no longer gathers once sent.
            for p in st.pending.iter_mut() {
                if p.gather
                    .is_some_and(|pl| taken.iter().any(|(t, _)| *t == pl))
                {
                    p.gather = None;
                }
            }
            taken
        };
        for (place, g) in taken {
            self.submit_gather(place, g);
        }
    }

    /// Waits for every pending write overlapping `[lo, hi)`, sending the gathers among
    /// them first. Gathers that other threads make while this one waits are sent too:
    /// a gather completes only once sent, and its writer may have stopped writing.
    fn wait_overlapping(&self, lo: u64, hi: u64) {
        self.wait_for(|p| overlaps((p.lo, p.hi), lo, hi));
    }

    /// Waits for every pending write `hit` picks, sending the gathers among them first
    /// (as `wait_overlapping`).
    fn wait_for(&self, hit: impl Fn(&Pending) -> bool) {
        self.send_gathers(&hit);
        loop {
            let c = {
                let mut st = lock(&self.state);
                st.reap();
                match st.first_hit(&hit) {
                    Some((_, true)) => None,
                    Some((c, false)) => Some(c),
                    None => return,
                }
            };
            match c {
                Some(c) => {
                    let _ = c.wait();
                }
                None => self.send_gathers(&hit),
            }
        }
    }

    /// The chunks of a write of `n` bytes at `offset`, each with its global span.
    fn spanned_write_chunks(&self, offset: u64, n: u64) -> Vec<(Chunk, (u64, u64))> {
        self.geo
            .write_chunks(offset, n)
            .into_iter()
            .map(|c| (c, self.geo.global_span(c.place, c.local, c.len)))
            .collect()
    }

    /// Waits for every pending write of this inode.
    pub fn wait_all(&self) {
        self.wait_overlapping(0, u64::MAX);
    }

    /// Waits until `n` more bytes fit in `window` (or nothing is in flight).
    fn wait_room(&self, n: u64, window: u64) {
        loop {
            let c = {
                let mut st = lock(&self.state);
                st.reap();
                if st.inflight_bytes == 0 || st.inflight_bytes + n <= window {
                    return;
                }
                st.pending.front().expect("bytes in flight").done.clone()
            };
            // What would be waited for may be gathered, not sent: send everything.
            self.send_gathers(|_| true);
            let _ = c.wait();
        }
    }

    /// Whether a write of `n` bytes at `offset` would be queued at once: nothing
    /// pending overlaps it and it fits in `window`. Another thread may queue in between;
    /// then the write waits as usual.
    pub fn write_would_not_wait(&self, offset: u64, n: u64, window: u64) -> bool {
        let Some(hi) = offset.checked_add(n).filter(|&e| e <= MAX_FILE_BYTES) else {
            return false;
        };
        let mut st = lock(&self.state);
        st.reap();
        if st.inflight_bytes != 0 && st.inflight_bytes + n > window {
            return false;
        }
        // Nothing pending in the write's global span (the common case): no need to
        // cut it into chunks for the exact check.
        st.first_overlap(offset, hi).is_none() || {
            let chunks = self.spanned_write_chunks(offset, n);
            st.first_hit(|p| p.touches_any(&chunks)).is_none()
        }
    }

    /// Whether [`InodeIo::flush`] without a data sync would return at once for a handle
    /// that has reported `seen` failed background writes: no write queued or in flight,
    /// no error to report, no size to record.
    pub fn flush_is_noop(&self, seen: u64) -> bool {
        let mut st = lock(&self.state);
        st.reap();
        st.pending.is_empty()
            && st.latched.is_none()
            && st.write_errors == seen
            && st.unflushed_end.is_none()
            && self.lost.get().is_none()
    }

    /// Marks the inode lost (see the `lost` field); the first reason stays.
    pub fn mark_lost(&self, why: WireError) {
        let _ = self.lost.set(why);
    }

    /// The reason the inode is lost, as an error, if it is.
    pub fn check_lost(&self) -> Result<(), WireError> {
        match self.lost.get() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Returns (and clears) the latched error of a background write.
    pub fn take_latched(&self) -> Result<(), WireError> {
        let mut st = lock(&self.state);
        st.reap();
        match st.latched.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Background writes failed so far (to start a handle's count at its open).
    pub fn write_errors(&self) -> u64 {
        let mut st = lock(&self.state);
        st.reap();
        st.write_errors
    }

    /// For a handle's flush or close: the last background write error if any failed
    /// since the handle's count `seen`, which stays (the next fsync reports it too).
    pub fn write_errors_after(&self, seen: u64) -> Result<(), WireError> {
        let mut st = lock(&self.state);
        st.reap();
        st.lost_after(seen)
    }

    /// For a handle's fsync: the last background write error if any failed since the
    /// handle's count `seen`, which moves to now (each handle's fsyncs report a
    /// failure once, whether or not another call reported it already).
    pub fn write_errors_since(&self, seen: &AtomicU64) -> Result<(), WireError> {
        let mut st = lock(&self.state);
        st.reap();
        st.lost_after(seen.swap(st.write_errors, Ordering::AcqRel))
    }

    // ---- writes ----

    /// Queues `data` for writing at `offset`; returns once it is queued and in-flight
    /// bytes are under `window`.
    pub fn write(
        &self,
        cred: &Cred,
        offset: u64,
        data: &[u8],
        window: u64,
    ) -> Result<(), WireError> {
        self.write_from(cred, offset, Src::Slice(data), window)
    }

    /// As [`InodeIo::write`], with the bytes in a buffer the client may keep: when they
    /// all go to one server as one extent, that buffer is sent as it is (no copy).
    pub fn write_buf(
        &self,
        cred: &Cred,
        offset: u64,
        buf: IoBuf,
        window: u64,
    ) -> Result<(), WireError> {
        self.write_from(cred, offset, Src::Owned(Some(buf)), window)
    }

    fn write_from(
        &self,
        cred: &Cred,
        offset: u64,
        mut src: Src<'_>,
        window: u64,
    ) -> Result<(), WireError> {
        let total = src.bytes().len();
        let end = offset
            .checked_add(total as u64)
            .filter(|&e| e <= MAX_FILE_BYTES)
            .ok_or_else(|| {
                WireError::new(
                    ErrorCode::FileTooBig,
                    format!(
                        "write of {total} bytes at {offset} to {} ends beyond {MAX_FILE_BYTES}",
                        self.describe()
                    ),
                )
            })?;
        self.take_latched()?;
        if total == 0 {
            return Ok(());
        }
        if self.write_inline(cred, offset, src.bytes())? {
            return Ok(());
        }
        // Only writes that share a byte with this one must land before it: writers of
        // other records of the same blocks or stripes (interleaved ranks) do not wait.
        let chunks = self.spanned_write_chunks(offset, total as u64);
        self.wait_for(|p| p.touches_any(&chunks));
        {
            let mut st = lock(&self.state);
            st.unflushed_end = Some(st.unflushed_end.unwrap_or(0).max(end));
            st.unflushed_mtime_ns = now_ns();
        }
        let mut queued = 0;
        for (chunk, (lo, hi)) in chunks {
            // A direct write goes at the disk's pace with the buffer held until then: a
            // deeper queue than DIRECT_WINDOW_BYTES keeps the disk no busier, only more
            // memory in buffers (fresh ones cost page faults and zeroing).
            let local = self.pool(chunk.place).local.as_ref();
            let window = match local {
                Some(l) if l.writes_direct(chunk.len as usize) => window.min(DIRECT_WINDOW_BYTES),
                _ => window,
            };
            self.wait_room(chunk.len, window);
            if chunk.len < GATHER_BELOW_BYTES {
                let bytes = self.gather(&chunk, offset, src.bytes());
                self.gather_write(cred, chunk, bytes, lo, hi);
                queued += chunk.len;
                continue;
            }
            // Page-aligned, so that a short-circuit direct write sends it to the disk
            // as it is. The caller's own buffer when it is this chunk, in order.
            let bytes = match &mut src {
                Src::Owned(b) if chunk.len as usize == total && self.in_order(&chunk, offset) => {
                    b.take().expect("taken by the only chunk")
                }
                _ => IoBuf::gathered(
                    chunk.len as usize,
                    self.parts_of(&chunk, offset, src.bytes()),
                ),
            };
            // A large chunk goes out alone; what is gathered for its place goes first,
            // so that the server sees the place's writes in order.
            let place = chunk.place;
            self.send_gathers(|p| p.gather == Some(place));
            let done = self.submit_write(cred, chunk, bytes);
            let mut st = lock(&self.state);
            // Under the same lock as the push: no cell overlapping a pending write stays
            // cached (it may hold bytes from before the write), and `plan_read` and
            // `prefetch` create none while the write is pending.
            st.drop_cells(|c| !overlaps(c.span, lo, hi));
            st.pending.push_back(Pending {
                lo,
                hi,
                bytes: chunk.len,
                done,
                gather: None,
                exact: Some((place, vec![(chunk.local, chunk.local + chunk.len)])),
            });
            st.inflight_bytes += chunk.len;
            queued += chunk.len;
        }
        assert_eq!(queued, total as u64, "write chunks add up to the write");
        self.take_latched()
    }

    /// Adds a small chunk to its place's gathered writes (sending them first if it would
    /// not fit, or was gathered under other credentials), and sends them once full.
    fn gather_write(&self, cred: &Cred, chunk: Chunk, bytes: Vec<u8>, lo: u64, hi: u64) {
        let place = chunk.place;
        let mut st = lock(&self.state);
        let full = st.gathers.get(&place).is_some_and(|g| {
            g.bytes + chunk.len > GATHER_MAX_BYTES
                || g.extents.len() >= GATHER_MAX_EXTENTS
                || g.cred != *cred
        });
        if full {
            drop(st);
            self.send_gathers(|p| p.gather == Some(place));
            st = lock(&self.state);
        }
        st.drop_cells(|c| !overlaps(c.span, lo, hi));
        st.inflight_bytes += chunk.len;
        let send = if let Some(g) = st.gathers.get_mut(&place) {
            match g.extents.last_mut() {
                Some((at, b)) if *at + b.len() as u64 == chunk.local => b.extend_from_slice(&bytes),
                _ => g.extents.push((chunk.local, bytes)),
            }
            g.bytes += chunk.len;
            let send = g.bytes >= GATHER_MAX_BYTES || g.extents.len() >= GATHER_MAX_EXTENTS;
            let p = st
                .pending
                .iter_mut()
                .find(|p| p.gather == Some(place))
                .expect("a gather has its pending entry");
            p.lo = p.lo.min(lo);
            p.hi = p.hi.max(hi);
            p.bytes += chunk.len;
            let (_, ranges) = p.exact.as_mut().expect("a gather knows its ranges");
            match ranges.last_mut() {
                Some(r) if r.1 == chunk.local => r.1 += chunk.len,
                _ => ranges.push((chunk.local, chunk.local + chunk.len)),
            }
            send
        } else {
            let (promise, done) = promise();
            st.gathers.insert(
                place,
                Gather {
                    cred: cred.clone(),
                    extents: vec![(chunk.local, bytes)],
                    bytes: chunk.len,
                    promise,
                },
            );
            st.pending.push_back(Pending {
                lo,
                hi,
                bytes: chunk.len,
                done,
                gather: Some(place),
                exact: Some((place, vec![(chunk.local, chunk.local + chunk.len)])),
            });
            false
        };
        drop(st);
        if send {
            self.send_gathers(|p| p.gather == Some(place));
        }
    }

    /// Sends one place's gathered writes: one Write if they are one extent, else one
    /// WriteList; the gather's promise reports the outcome.
    fn submit_gather(&self, place: u32, g: Gather) {
        let pool = self.pool(place).clone();
        let (fid, unit) = (self.ino, self.geo.unit());
        let what = self.describe();
        let boots = self.boots.clone();
        let Gather {
            cred,
            extents,
            bytes,
            promise,
        } = g;
        self.inner
            .exec
            .submit(self.places[place as usize], move || {
                let first = extents[0].0;
                let mut crcs = Vec::new();
                for (at, b) in &extents {
                    crcs.extend(piece_crcs(*at, b));
                }
                // The extents go out from their own buffers, one after another (one
                // vectored write), never copied together.
                let n = extents.len();
                let parts: Vec<&[u8]> = extents.iter().map(|(_, b)| b.as_slice()).collect();
                // A server on this host takes the list through its pipe (no TCP stack, no
                // copy into a socket), and one extent of whole blocks the whole-block pipe
                // (spliced into the files where they are holes); anything but success
                // there goes over TCP.
                let block = BLOCK_BYTES as u64;
                let whole = n == 1 && first % block == 0 && parts[0].len() as u64 % block == 0;
                let piped = pool.local.as_ref().and_then(|sc| match whole {
                    true => sc.write(fid.0, unit, first, parts[0], &crcs),
                    false => {
                        let offsets: Vec<u64> = extents.iter().map(|(at, _)| *at).collect();
                        sc.write_list(fid.0, unit, &offsets, &parts, &crcs)
                    }
                });
                let tcp = || {
                    let req = if n == 1 {
                        Request::Write {
                            fid,
                            unit,
                            offset: first,
                            crcs,
                        }
                    } else {
                        Request::WriteList {
                            fid,
                            unit,
                            extents: extents
                                .iter()
                                .map(|(at, b)| (*at, b.len() as u32))
                                .collect(),
                            crcs,
                        }
                    };
                    pool.call_parts(&cred, req, &parts, &mut [])
                };
                let r = match piped {
                    Some(boot_id) => note_boot(&boots, place, boot_id, &pool),
                    None => tcp().and_then(|(resp, _)| match resp {
                        Response::Written { boot_id } => note_boot(&boots, place, boot_id, &pool),
                        other => Err(unexpected(&pool, "Write", &other)),
                    }),
                };
                promise.fulfil(r.map_err(|e| {
                    context(
                        e,
                        format!(
                            "writing {bytes} bytes of {what} in {n} extents from local offset \
                         {first} to {}",
                            pool.name()
                        ),
                    )
                }));
            });
    }

    /// Copies the bytes of `chunk` out of a caller's buffer that starts at `offset`.
    fn gather(&self, chunk: &Chunk, offset: u64, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(chunk.len as usize);
        self.parts_of(chunk, offset, data)
            .for_each(|p| out.extend_from_slice(p));
        assert_eq!(out.len() as u64, chunk.len);
        out
    }

    /// The pieces of a caller's buffer that starts at `offset` that make `chunk`, in order.
    /// Whether `chunk`'s segments are the write at `offset` in order, from its first
    /// byte on: its bytes are then the caller's buffer as it is.
    fn in_order(&self, chunk: &Chunk, offset: u64) -> bool {
        let mut at = offset;
        self.geo
            .segments(chunk.place, chunk.local, chunk.len)
            .all(|s| {
                let next = s.global == at;
                at += s.len;
                next
            })
    }

    fn parts_of<'a>(
        &'a self,
        chunk: &Chunk,
        offset: u64,
        data: &'a [u8],
    ) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.geo
            .segments(chunk.place, chunk.local, chunk.len)
            .map(move |s| {
                let at = (s.global - offset) as usize;
                &data[at..at + s.len as usize]
            })
    }

    fn submit_write(&self, cred: &Cred, chunk: Chunk, bytes: IoBuf) -> Completion<()> {
        let (p, c) = promise();
        let pool = self.pool(chunk.place).clone();
        let (cred, fid, unit) = (cred.clone(), self.ino, self.geo.unit());
        let what = self.describe();
        let global = self.geo.stripe().to_global(chunk.place, chunk.local);
        let boots = self.boots.clone();
        self.inner
            .exec
            .submit(self.places[chunk.place as usize], move || {
                // Checksums are computed here, on the worker, so that they run in parallel.
                let crcs = piece_crcs(chunk.local, &bytes);
                let tcp = |offset: u64, part: &[u8], crcs: Vec<u32>| {
                    let req = Request::Write {
                        fid,
                        unit,
                        offset,
                        crcs,
                    };
                    pool.call(&cred, req, part, &mut [])
                        .and_then(|(resp, _)| match resp {
                            Response::Written { boot_id } => {
                                note_boot(&boots, chunk.place, boot_id, &pool)
                            }
                            other => Err(unexpected(&pool, "Write", &other)),
                        })
                };
                // A server on this host takes the whole blocks through its pipe; a partial
                // first or last block goes over TCP, so a write with partial edges takes
                // the pipe only when its middle is large enough to pay for the extra
                // request (an unaligned record of tens of KiB goes over TCP whole).
                let block = BLOCK_BYTES as u64;
                let (lo, hi) = (chunk.local, chunk.local + bytes.len() as u64);
                let (a, b) = (lo.div_ceil(block) * block, hi / block * block);
                let worth = (a == lo && b == hi) || b.saturating_sub(a) >= MIN_SPLIT_PIPE_BYTES;
                let piped = match pool.local.as_ref() {
                    Some(sc) if a < b && worth => {
                        let head = (a - lo) as usize;
                        let skip = usize::from(head > 0);
                        let n = ((b - a) / block) as usize;
                        let mid = &bytes[head..head + (b - a) as usize];
                        sc.write(fid.0, unit, a, mid, &crcs[skip..skip + n])
                            .map(|boot_id| (boot_id, head, (b - lo) as usize))
                    }
                    _ => None,
                };
                let r = match piped {
                    Some((boot_id, head, tail)) => note_boot(&boots, chunk.place, boot_id, &pool)
                        .and_then(|()| {
                            if head == 0 {
                                return Ok(());
                            }
                            let part = &bytes[..head];
                            tcp(lo, part, piece_crcs(lo, part))
                        })
                        .and_then(|()| {
                            if tail == bytes.len() {
                                return Ok(());
                            }
                            let part = &bytes[tail..];
                            tcp(b, part, piece_crcs(b, part))
                        }),
                    None => tcp(lo, &bytes, crcs),
                };
                p.fulfil(r.map_err(|e| {
                    context(
                        e,
                        format!(
                            "writing {} bytes of {what} at file offset {global} (local {}) to {}",
                            chunk.len,
                            chunk.local,
                            pool.name()
                        ),
                    )
                }));
            });
        c
    }

    // ---- reads ----

    /// Reads into `buf` at `offset`; short only at end of file. `sequential` says the
    /// read starts where the handle's previous read ended, which enables readahead;
    /// `iobuf` that `buf` lies in an [`IoBuf`].
    pub fn read(
        &self,
        cred: &Cred,
        offset: u64,
        buf: &mut [u8],
        sequential: bool,
        iobuf: bool,
    ) -> Result<usize, WireError> {
        if let Some(b) = self.read_inline(cred, offset, buf.len() as u64, false)? {
            buf[..b.len()].copy_from_slice(&b);
            return Ok(b.len());
        }
        let (n, size) = self.clamp(cred, offset, buf.len() as u64, false)?;
        if n == 0 {
            return Ok(0);
        }
        if self.read_local(offset, &mut buf[..n as usize], iobuf) {
            return Ok(n as usize);
        }
        let parts = self.fetch(cred, offset, n, size, sequential)?;
        let out = &mut buf[..n as usize];
        let mut copied = 0;
        for (chunk, base, data) in &parts {
            copied += self.scatter(chunk, *base, data, offset, out);
        }
        assert_eq!(copied, n, "read pieces add up to the read");
        Ok(n as usize)
    }

    /// Reads `[offset, offset + out.len())` straight into `out` through the short-circuit
    /// path when every server holding those bytes offers it (the file's other servers may
    /// be anywhere), on the caller's thread: the kernel reads ahead in the object files,
    /// so no readahead cell, worker thread or buffer of ours stands between the server's
    /// files and the caller's buffer (only a partial first or last block goes through a
    /// block of its own). `false` when the
    /// read must go the usual way (some server is remote or refuses, or a block fails its
    /// checksum, which the server's path then reports); `out` is then rewritten by it.
    fn read_local(&self, offset: u64, out: &mut [u8], iobuf: bool) -> bool {
        let block = BLOCK_BYTES as u64;
        let end = offset + out.len() as u64;
        let stripe = self.geo.stripe();
        let local_of = |place: u32| self.pool(place).local.as_ref().filter(|l| l.usable());
        let touched = stripe.extents(offset, out.len() as u64);
        if !touched.iter().all(|e| local_of(e.place).is_some()) {
            return false;
        }
        self.wait_overlapping(offset, end);
        let (fid, unit) = (self.ino.0, self.geo.unit());
        let mut edge = vec![0u8; 0];
        for piece in stripe.split(offset, out.len() as u64) {
            let Some(sc) = local_of(piece.place) else {
                return false;
            };
            let dst = &mut out[(piece.global - offset) as usize..][..piece.len as usize];
            // A unit is whole blocks, so local and global offsets share their block
            // alignment: the whole blocks `[a, b)` go straight into `dst`, a partial first
            // block `[lo, a)` and last block `[b, hi)` through `edge` (inside one block,
            // `[lo, hi)` is all first block; across one boundary, first and last).
            let (lo, hi) = (piece.local, piece.local + piece.len);
            let a = (lo.div_ceil(block) * block).min(hi);
            let b = (hi / block * block).max(a);
            let mut edge_read = |from: u64, to: u64, dst: &mut [u8]| {
                if from == to {
                    return true;
                }
                let start = from / block * block;
                edge.resize(block as usize, 0);
                if !sc.read(fid, unit, start, &mut edge, false) {
                    return false;
                }
                dst.copy_from_slice(&edge[(from - start) as usize..(to - start) as usize]);
                true
            };
            let (head, rest) = dst.split_at_mut((a - lo) as usize);
            let (middle, tail) = rest.split_at_mut((b - a) as usize);
            if !edge_read(lo, a, head)
                || (b > a && !sc.read(fid, unit, a, middle, iobuf))
                || !edge_read(b, hi, tail)
            {
                return false;
            }
        }
        true
    }

    /// Reads many extents `(file offset, length)` into `out`, one after another (`out`
    /// holds their lengths added up): each data server gets one `ReadList` request per
    /// batch of up to `MAX_LIST_EXTENTS` block-aligned ranges instead of a request per
    /// extent. Bytes at or past the end of the file read as zeros. Every block is checked
    /// against its stored CRC, as in [`InodeIo::read`]; the handle's own writes still in
    /// flight to the extents are waited for first.
    pub fn read_list(
        &self,
        cred: &Cred,
        extents: &[(u64, u64)],
        out: &mut [u8],
    ) -> Result<(), WireError> {
        let total: u64 = extents.iter().map(|e| e.1).sum();
        assert_eq!(total, out.len() as u64, "out holds the extents");
        out.fill(0);
        let hi = extents.iter().map(|e| e.0 + e.1).max().unwrap_or(0);
        let lo = extents.iter().map(|e| e.0).min().unwrap_or(0);
        if hi == lo {
            return Ok(());
        }
        // Read whole (bytes past the end read as zeros): the size is asked for whenever
        // the extents reach past the known one.
        if let Some(b) = self.read_inline(cred, lo, hi - lo, true)? {
            let mut at = 0;
            for &(offset, len) in extents {
                let from = ((offset - lo) as usize).min(b.len());
                let to = ((offset - lo + len) as usize).min(b.len());
                out[at..at + (to - from)].copy_from_slice(&b[from..to]);
                at += len as usize;
            }
            return Ok(());
        }
        let (_, size) = self.clamp(cred, lo, hi - lo, true)?;
        self.wait_overlapping(lo, hi);
        // The block-aligned chunks of every extent, per server, merged where they meet.
        let clipped: Vec<(u64, u64)> = extents
            .iter()
            .map(|&(o, l)| (o, size.saturating_sub(o).min(l)))
            .collect();
        let mut wanted: Vec<Vec<(u64, u64)>> = vec![Vec::new(); self.places.len()];
        for &(o, l) in clipped.iter().filter(|e| e.1 > 0) {
            for c in self.geo.read_chunks(o, l) {
                wanted[c.place as usize].push((c.local, c.len));
            }
        }
        let mut ranges: Vec<Vec<(u64, u64)>> = Vec::with_capacity(wanted.len());
        for mut w in wanted {
            w.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::new();
            for (local, len) in w {
                match merged.last_mut() {
                    // Overlapping or touching, and still one request's worth.
                    Some((s, n))
                        if local <= *s + *n
                            && (local + len).max(*s + *n) - *s <= MAX_DATA_BYTES as u64 =>
                    {
                        *n = (local + len).max(*s + *n) - *s;
                    }
                    _ => merged.push((local, len)),
                }
            }
            ranges.push(merged);
        }
        // One job per batch: at most MAX_LIST_EXTENTS ranges and MAX_DATA_BYTES.
        let mut jobs = Vec::new();
        for (place, rs) in ranges.iter().enumerate() {
            let mut batch: Vec<(u64, u64)> = Vec::new();
            let mut bytes = 0u64;
            for &r in rs {
                if !batch.is_empty()
                    && (batch.len() == MAX_LIST_EXTENTS || bytes + r.1 > MAX_DATA_BYTES as u64)
                {
                    jobs.push((place as u32, std::mem::take(&mut batch)));
                    bytes = 0;
                }
                batch.push(r);
                bytes += r.1;
            }
            if !batch.is_empty() {
                jobs.push((place as u32, batch));
            }
        }
        let waits: Vec<_> = jobs
            .into_iter()
            .map(|(place, batch)| (place, self.submit_read_list(cred, place, batch)))
            .collect();
        // (place, local start, bytes) of every range, sorted for lookup.
        let mut got: Vec<Vec<(u64, Arc<Vec<u8>>)>> = vec![Vec::new(); self.places.len()];
        for (place, w) in waits {
            got[place as usize].extend(w.wait()?);
        }
        for g in &mut got {
            g.sort_unstable_by_key(|r| r.0);
        }
        let mut at = 0usize;
        for (&(o, l), &(_, n)) in extents.iter().zip(&clipped) {
            if n > 0 {
                let dst = &mut out[at..at + n as usize];
                for c in self.geo.read_chunks(o, n) {
                    let rs = &got[c.place as usize];
                    let i = rs.partition_point(|r| r.0 <= c.local) - 1;
                    let (base, data) = (rs[i].0, &rs[i].1);
                    self.scatter(&c, base, data, o, dst);
                }
            }
            at += l as usize;
        }
        Ok(())
    }

    /// One `ReadList` of `ranges` (local offsets) to the server of `place`: each range's
    /// bytes, checked against their CRCs.
    fn submit_read_list(
        &self,
        cred: &Cred,
        place: u32,
        ranges: Vec<(u64, u64)>,
    ) -> Completion<Vec<(u64, Arc<Vec<u8>>)>> {
        let (p, c) = promise();
        let pool = self.pool(place).clone();
        let (cred, fid, unit, geo) = (cred.clone(), self.ino, self.geo.unit(), self.geo);
        let what = self.describe();
        self.inner
            .exec
            .submit(self.places[place as usize], move || {
                let total: u64 = ranges.iter().map(|r| r.1).sum();
                let mut buf = vec![0u8; total as usize];
                let req = Request::ReadList {
                    fid,
                    unit,
                    ranges: ranges.iter().map(|&(o, l)| (o, l as u32)).collect(),
                };
                let r = checksum_retried(&mut buf, |buf| {
                    let (resp, got) = pool.call(&cred, req.clone(), &[], buf)?;
                    let Response::ReadData { crcs } = resp else {
                        return Err(unexpected(&pool, "ReadList", &resp));
                    };
                    if got as u64 != total || crcs.len() as u64 != total / BLOCK_BYTES as u64 {
                        return Err(WireError::new(
                            ErrorCode::UnexpectedMessage,
                            format!(
                                "{} answered a list read of {total} bytes with {got} bytes and {} checksums",
                                pool.name(),
                                crcs.len()
                            ),
                        ));
                    }
                    let mut out = Vec::with_capacity(ranges.len());
                    let (mut at, mut ci) = (0usize, 0usize);
                    let buf = &*buf;
                    for &(local, len) in &ranges {
                        let (n, blocks) = (len as usize, (len / BLOCK_BYTES as u64) as usize);
                        let bytes = &buf[at..at + n];
                        verify(&crcs[ci..ci + blocks], bytes, local, &pool, &geo, place, &what)?;
                        out.push((local, Arc::new(bytes.to_vec())));
                        at += n;
                        ci += blocks;
                    }
                    Ok(out)
                });
                p.fulfil(r.map_err(|e| {
                    context(
                        e,
                        format!("list read of {} ranges of {what} from {}", ranges.len(), pool.name()),
                    )
                }));
            });
        c
    }

    /// Reads up to `len` bytes at `offset` like [`InodeIo::read`], but hands `f` the
    /// bytes where they arrived, in file order, instead of copying them into a buffer:
    /// for callers that copy them on anyway (a FUSE reply is copied by the kernel).
    pub fn read_with<R>(
        &self,
        cred: &Cred,
        offset: u64,
        len: u64,
        sequential: bool,
        f: impl FnOnce(&[&[u8]]) -> R,
    ) -> Result<R, WireError> {
        if let Some(b) = self.read_inline(cred, offset, len, false)? {
            return Ok(if b.is_empty() { f(&[]) } else { f(&[&b]) });
        }
        let (n, size) = self.clamp(cred, offset, len, false)?;
        if n == 0 {
            return Ok(f(&[]));
        }
        let parts = self.fetch(cred, offset, n, size, sequential)?;
        let mut pieces: Vec<(u64, &[u8])> = Vec::new();
        for (chunk, base, data) in &parts {
            pieces.extend(self.pieces(chunk, *base, data, offset, offset + n));
        }
        pieces.sort_unstable_by_key(|(at, _)| *at);
        let total: usize = pieces.iter().map(|(_, p)| p.len()).sum();
        assert_eq!(total as u64, n, "read pieces add up to the read");
        let slices: Vec<&[u8]> = pieces.into_iter().map(|(_, p)| p).collect();
        Ok(f(&slices))
    }

    /// The data of the chunks covering `[offset, offset + n)`: (chunk, local start of
    /// its buffer, buffer).
    fn fetch(
        &self,
        cred: &Cred,
        offset: u64,
        n: u64,
        size: u64,
        sequential: bool,
    ) -> Result<Vec<Fetched>, WireError> {
        let end = offset + n;
        self.wait_overlapping(offset, end);
        let parts = self.plan_read(cred, offset, n, size, sequential);
        let mut out = Vec::with_capacity(parts.len());
        for (chunk, base, done, cell) in parts {
            match done.wait() {
                Ok(d) => out.push((chunk, base, d)),
                Err(e) => {
                    // A failed cell must not stay cached, or every retry would fail too.
                    lock(&self.state).drop_cells(|c| !matches!(c.data.try_get(), Some(Err(_))));
                    // A damaged block elsewhere in a cell (a whole stretch read for the
                    // cache) must not fail a read of other bytes: read just this read's
                    // blocks; their own damage is still an error.
                    if e.code != ErrorCode::Checksum || !cell {
                        return Err(e);
                    }
                    let own = self.submit_read(cred, chunk.place, chunk.local, chunk.len);
                    out.push((chunk, chunk.local, own.wait()?));
                }
            }
        }
        if sequential {
            lock(&self.state).drop_cells(|c| c.span.1 > end);
        }
        Ok(out)
    }

    /// How many of `len` bytes at `offset` exist, and the size that says so. A read
    /// that reaches past the known size asks the metadata server, since another client
    /// may have extended the file; without `whole` only one that starts at or past it
    /// does: one that starts before it returns what the known size holds (a short read,
    /// after which a reader asks again from the end, so no end of file is reported
    /// without asking).
    fn clamp(
        &self,
        cred: &Cred,
        offset: u64,
        len: u64,
        whole: bool,
    ) -> Result<(u64, u64), WireError> {
        let mut size = self.size();
        if must_ask(offset, len, size, whole) {
            let attr = self.inner.getattr(cred, self.ino)?;
            self.note_meta_size(attr.size);
            size = self.size();
        }
        Ok((size.saturating_sub(offset).min(len), size))
    }

    /// Finds or issues the requests for a read: `(chunk, local start of its buffer,
    /// completion)`. Sequential reads go through whole cells, which are cached, and
    /// prefetch the cells ahead.
    fn plan_read(
        &self,
        cred: &Cred,
        offset: u64,
        n: u64,
        size: u64,
        sequential: bool,
    ) -> Vec<ReadPart> {
        let mut st = lock(&self.state);
        if !sequential {
            st.drop_cells(|_| false);
            st.ra_window = 0;
        }
        let mut parts = Vec::new();
        for chunk in self.geo.read_chunks(offset, n) {
            let idx = chunk.local / self.geo.cell_bytes();
            let key = (chunk.place, idx);
            let cached = st
                .cells
                .get(&key)
                .filter(|c| c.local <= chunk.local && chunk.local + chunk.len <= c.local + c.len);
            if let Some(c) = cached {
                parts.push((chunk, c.local, c.data.clone(), true));
                continue;
            }
            let span = self.geo.cell_span(chunk.place, idx);
            let cell = self
                .geo
                .cell_range(chunk.place, idx, size)
                .filter(|_| sequential && st.first_overlap(span.0, span.1).is_none());
            match cell {
                Some((lo, len)) if lo <= chunk.local && chunk.local + chunk.len <= lo + len => {
                    let data = self.insert_cell(&mut st, cred, key, lo, len);
                    parts.push((chunk, lo, data, true));
                }
                _ => parts.push((
                    chunk,
                    chunk.local,
                    self.submit_read(cred, chunk.place, chunk.local, chunk.len),
                    false,
                )),
            }
        }
        if sequential {
            self.prefetch(&mut st, cred, offset + n, size);
        }
        parts
    }

    fn insert_cell(
        &self,
        st: &mut State,
        cred: &Cred,
        key: (u32, u64),
        local: u64,
        len: u64,
    ) -> Completion<Arc<Vec<u8>>> {
        let data = self.submit_read(cred, key.0, local, len);
        let span = self.geo.cell_span(key.0, key.1);
        let old = st.cells.insert(
            key,
            Cell {
                local,
                len,
                span,
                data: data.clone(),
            },
        );
        st.cell_bytes_held += len;
        if let Some(old) = old {
            st.cell_bytes_held -= old.len;
        }
        data
    }

    /// Bounds readahead to end at `end` (`None`: the file size).
    pub fn set_readahead_limit(&self, end: Option<u64>) {
        lock(&self.state).ra_limit = end;
    }

    /// Issues reads of the cells of `[from, from + window)` not yet cached, growing the
    /// window, never past `size`, never over pending writes, and holding at most
    /// `ra_max` bytes plus one cell per server.
    fn prefetch(&self, st: &mut State, cred: &Cred, from: u64, size: u64) {
        let start = self.geo.width() as u64 * self.geo.cell_bytes();
        st.ra_window = (st.ra_window * 2).max(start).min(self.ra_max.max(start));
        let to = from
            .saturating_add(st.ra_window)
            .min(size)
            .min(st.ra_limit.unwrap_or(u64::MAX));
        if to <= from {
            return;
        }
        let budget = self.ra_max + start;
        for key in self.geo.cells_of(from, to - from) {
            if st.cells.contains_key(&key) {
                continue;
            }
            let Some((lo, len)) = self.geo.cell_range(key.0, key.1, size) else {
                continue;
            };
            let span = self.geo.cell_span(key.0, key.1);
            if st.cell_bytes_held + len > budget || st.first_overlap(span.0, span.1).is_some() {
                continue;
            }
            self.insert_cell(st, cred, key, lo, len);
        }
    }

    fn submit_read(
        &self,
        cred: &Cred,
        place: u32,
        local: u64,
        len: u64,
    ) -> Completion<Arc<Vec<u8>>> {
        let (p, c) = promise();
        let pool = self.pool(place).clone();
        let (cred, fid, unit, geo) = (cred.clone(), self.ino, self.geo.unit(), self.geo);
        let what = self.describe();
        self.inner
            .exec
            .submit(self.places[place as usize], move || {
                let mut buf = vec![0u8; len as usize];
                if let Some(sc) = pool.local.as_ref().filter(|l| l.usable()) {
                    if sc.read(fid.0, unit, local, &mut buf, false) {
                        p.fulfil(Ok(Arc::new(buf)));
                        return;
                    }
                }
                let req = Request::Read {
                    fid,
                    unit,
                    offset: local,
                    len: len as u32,
                };
                let r = checksum_retried(&mut buf, |buf| {
                    match pool.call(&cred, req.clone(), &[], buf)? {
                        (Response::ReadData { crcs }, got) => {
                            verify(&crcs, &buf[..got], local, &pool, &geo, place, &what)
                        }
                        (other, _) => Err(unexpected(&pool, "Read", &other)),
                    }
                });
                // Bytes past what the server returned are holes or lie past its object's end:
                // zeros, which `buf` already holds.
                p.fulfil(r.map(|()| Arc::new(buf)).map_err(|e| {
                    context(
                        e,
                        format!(
                    "reading {len} bytes of {what} at file offset {} (local {local}) from {}",
                    geo.stripe().to_global(place, local), pool.name()
                ),
                    )
                }));
            });
        c
    }

    /// Copies the part of `chunk` inside `[offset, offset + out.len())` from `data`,
    /// which holds local bytes from `base` on; returns the bytes copied.
    fn scatter(&self, chunk: &Chunk, base: u64, data: &[u8], offset: u64, out: &mut [u8]) -> u64 {
        let end = offset + out.len() as u64;
        let mut copied = 0;
        for (at, piece) in self.pieces(chunk, base, data, offset, end) {
            let dst = (at - offset) as usize;
            out[dst..dst + piece.len()].copy_from_slice(piece);
            copied += piece.len() as u64;
        }
        copied
    }

    /// The parts of `chunk`'s buffer `data` (starting at local offset `base`) that hold
    /// bytes of `[offset, end)` of the file, each with its file offset.
    fn pieces<'d>(
        &self,
        chunk: &Chunk,
        base: u64,
        data: &'d [u8],
        offset: u64,
        end: u64,
    ) -> impl Iterator<Item = (u64, &'d [u8])> + 'd {
        let segments: Vec<_> = self
            .geo
            .segments(chunk.place, chunk.local, chunk.len)
            .collect();
        segments.into_iter().filter_map(move |s| {
            let lo = s.global.max(offset);
            let hi = (s.global + s.len).min(end);
            (lo < hi).then(|| {
                let src = (s.local + (lo - s.global) - base) as usize;
                (lo, &data[src..src + (hi - lo) as usize])
            })
        })
    }

    // ---- durability and size ----

    /// Waits for pending writes, optionally makes them durable on every server of the
    /// layout, then tells the metadata server the new size and mtime.
    /// Asks every server of the layout to drop its cached pages of this file.
    pub fn drop_server_cache(&self, cred: &Cred) -> Result<(), WireError> {
        if self.is_inline() {
            return Ok(());
        }
        self.on_all_servers(cred, "DropCache", |_| Request::DropCache { fid: self.ino })
    }

    pub fn flush(&self, cred: &Cred, data_sync: bool) -> Result<(), WireError> {
        // First: a file found moved meanwhile gets its inline writes queued for the data
        // servers, which the wait below covers.
        if self.flush_inline(cred, data_sync)? {
            return Ok(());
        }
        self.wait_all();
        self.take_latched()?;
        if data_sync {
            self.fsync_servers(cred)?;
        }
        let (end, mtime_ns) = {
            let mut st = lock(&self.state);
            (st.unflushed_end.take(), st.unflushed_mtime_ns)
        };
        let Some(end) = end else {
            if data_sync {
                self.sync_meta_after(cred, false)?;
            }
            return Ok(());
        };
        let session = self.inner.session.id();
        // Durable when answered only for an fsync: a close's or flush's size is answered
        // once visible, as the data servers answer its writes (docs/protocol.md).
        let req = if data_sync {
            Request::ExtendSize {
                ino: self.ino,
                size: end,
                mtime_ns,
            }
        } else {
            Request::ExtendSizeUnsynced {
                ino: self.ino,
                size: end,
                mtime_ns,
            }
        };
        match self.inner.meta_call(cred, req) {
            Ok(resp) => {
                if let Response::Attr(a) = resp {
                    self.note_meta_size(a.size);
                } else {
                    let mut st = lock(&self.state);
                    st.meta_size = st.meta_size.max(end);
                }
                if data_sync {
                    self.sync_meta_after(cred, true)?;
                } else {
                    self.note_unsynced(session);
                }
                Ok(())
            }
            Err(e) => {
                let mut st = lock(&self.state);
                st.unflushed_end = Some(st.unflushed_end.unwrap_or(0).max(end));
                Err(context(
                    e,
                    format!("recording the size {end} of {}", self.describe()),
                ))
            }
        }
    }

    /// Makes every change the metadata server answered so far durable (SyncMeta): what
    /// closes recorded without waiting for the disk (docs/protocol.md, "A close's inline
    /// bytes"). It names the session this inode's oldest such change of this client was
    /// answered under (`unsynced.rs`), so that a server restarted since, which may have
    /// lost it, answers `ServerRestarted` instead of reporting it durable.
    fn sync_meta(&self, cred: &Cred) -> Result<(), WireError> {
        let mark = self.inner.unsynced.mark(self.ino);
        let session = mark.map_or(0, |m| m.session);
        let r = self.inner.meta_call(cred, Request::SyncMeta { session });
        if let Some(m) = mark {
            // Confirmed, or its loss reported now: once.
            if r.is_ok()
                || r.as_ref()
                    .is_err_and(|e| e.code == ErrorCode::ServerRestarted)
            {
                self.inner.unsynced.checked(self.ino, m);
            }
        }
        r.map(|_| ())
            .map_err(|e| context(e, format!("syncing {}", self.describe())))
    }

    /// The end of an fsync's metadata part. With nothing sent durably (`sent` false), a
    /// change an earlier close recorded (from any handle, or another client) may not be
    /// durable yet: SyncMeta makes it so. After a durable request of its own everything
    /// the same server answered before is durable too, and SyncMeta is needed only if
    /// this client had a change of the inode answered unsynced, to check that the
    /// server which answered it is still the one running (`unsynced.rs`).
    pub(crate) fn sync_meta_after(&self, cred: &Cred, sent: bool) -> Result<(), WireError> {
        if sent && self.inner.unsynced.mark(self.ino).is_none() {
            return Ok(());
        }
        self.sync_meta(cred)
    }

    /// Notes a change answered before it was durable, under the session current when
    /// it was sent; past the bound, confirms them with one SyncMeta (`unsynced.rs`).
    pub(crate) fn note_unsynced(&self, session: u64) {
        if self.inner.unsynced.note(self.ino, session) {
            self.inner.confirm_unsynced();
        }
    }

    /// Sends Fsync to every server of the layout; fails with `ServerRestarted` if a
    /// server answers with another boot identity than it answered this inode's writes
    /// with since the last fsync: it restarted in between, and what it acknowledged
    /// but had not made durable may be lost. The client does not hold acknowledged
    /// bytes to send again, so the loss is reported (once, as Linux reports a failed
    /// write-back at fsync), not repaired.
    fn fsync_servers(&self, cred: &Cred) -> Result<(), WireError> {
        let reqs = (0..self.geo.width())
            .map(|place| (place, Request::Fsync { fid: self.ino }))
            .collect();
        let answers = self.on_places(cred, "Fsync", reqs, |pool, resp| match resp {
            Response::Written { boot_id } => Ok(boot_id),
            other => Err(unexpected(pool, "Fsync", &other)),
        })?;
        let mut boots = self.boots.lock().unwrap_or_else(|p| p.into_inner());
        let mut lost = None;
        for (place, boot) in answers.into_iter().enumerate() {
            let place = place as u32;
            if boots.get(&place).is_some_and(|b| *b != boot) {
                lost.get_or_insert(place);
            }
            boots.remove(&place);
        }
        drop(boots);
        match lost {
            None => Ok(()),
            Some(place) => {
                let pool = self.pool(place);
                Err(WireError::new(
                    ErrorCode::ServerRestarted,
                    format!(
                        "fsync of {}: {} restarted since it acknowledged writes to it; \
                         writes not yet durable may be lost",
                        self.describe(),
                        pool.name()
                    ),
                ))
            }
        }
    }

    /// Sets the size: waits for pending writes, cuts (or extends) every server's object,
    /// then records the size on the metadata server.
    /// Cuts or extends the file to `size`: the data servers first, then the size on the
    /// metadata server. `via_write_handle`: the caller holds this file open for writing
    /// (ftruncate); otherwise the caller's write permission is checked before any data
    /// server is touched, so that a refused truncate loses no bytes.
    pub fn truncate(
        &self,
        cred: &Cred,
        size: u64,
        via_write_handle: bool,
    ) -> Result<Attr, WireError> {
        if size > MAX_FILE_BYTES {
            return Err(WireError::new(
                ErrorCode::FileTooBig,
                format!(
                    "size {size} of {} exceeds {MAX_FILE_BYTES}",
                    self.describe()
                ),
            ));
        }
        if !via_write_handle {
            self.inner.meta_call(
                cred,
                Request::Access {
                    ino: self.ino,
                    mask: 2,
                },
            )?;
        }
        let resize = Request::SetAttr {
            ino: self.ino,
            attrs: SetAttrs {
                size: Some(size),
                via_write_handle,
                ..SetAttrs::default()
            },
        };
        // Before the wait: a move queues the inline writes for the data servers.
        if let Some(attr) = self.truncate_inline(cred, resize, size)? {
            return Ok(attr);
        }
        self.wait_all();
        self.take_latched()?;
        let unflushed = {
            let mut st = lock(&self.state);
            st.drop_cells(|_| false);
            // Bytes written past the new size are cut off; the SetAttr below records
            // the size (and mtime) that stands.
            st.unflushed_end.take()
        };
        let (unit, stripe) = (self.geo.unit(), *self.geo.stripe());
        let r = self
            .on_all_servers(cred, "Truncate", |place| Request::Truncate {
                fid: self.ino,
                unit,
                local_size: stripe.local_size(size, place),
            })
            .and_then(|()| {
                let attrs = SetAttrs {
                    size: Some(size),
                    via_write_handle,
                    ..SetAttrs::default()
                };
                self.inner.meta_op(
                    cred,
                    stripefs_wire::op::SetAttr {
                        ino: self.ino,
                        attrs,
                    },
                )
            });
        match r {
            Ok(attr) => {
                self.note_meta_size(attr.size);
                Ok(attr)
            }
            Err(e) => {
                // The size may not have changed: the end of the writes before still has
                // to reach the metadata server, or acknowledged bytes would be cut off
                // by the size at close (found by the simulator, seed 100).
                if let Some(end) = unflushed {
                    let mut st = lock(&self.state);
                    st.unflushed_end = Some(st.unflushed_end.unwrap_or(0).max(end));
                }
                Err(e)
            }
        }
    }

    /// Sends one request to every server of the layout at once; the first error wins.
    pub fn on_all_servers(
        &self,
        cred: &Cred,
        op: &'static str,
        make: impl Fn(u32) -> Request,
    ) -> Result<(), WireError> {
        let reqs = (0..self.geo.width()).map(|place| (place, make(place)));
        self.on_places(cred, op, reqs.collect(), |pool, resp| match resp {
            Response::Done => Ok(()),
            other => Err(unexpected(pool, op, &other)),
        })
        .map(|_| ())
    }

    /// Sends each `(place, request)` to the server of that place, all at once, and
    /// turns each answer into a value with `answer`; the first error wins.
    pub fn on_places<T: Clone + Send + 'static>(
        &self,
        cred: &Cred,
        op: &'static str,
        reqs: Vec<(u32, Request)>,
        answer: impl Fn(&ServerPool, Response) -> Result<T, WireError> + Copy + Send + 'static,
    ) -> Result<Vec<T>, WireError> {
        let to_servers = reqs
            .into_iter()
            .map(|(place, req)| (self.places[place as usize], req));
        call_servers(&self.inner, cred, op, &self.describe(), to_servers, answer)
    }
}

/// Sends each `(data server index, request)` at once through the worker pool and turns
/// each answer into a value with `answer`; the first error wins, named with `op`, the
/// file (`what`) and the server.
pub(crate) fn call_servers<T: Clone + Send + 'static>(
    inner: &Inner,
    cred: &Cred,
    op: &'static str,
    what: &str,
    reqs: impl Iterator<Item = (usize, Request)>,
    answer: impl Fn(&ServerPool, Response) -> Result<T, WireError> + Copy + Send + 'static,
) -> Result<Vec<T>, WireError> {
    let mut waits = Vec::new();
    for (server, req) in reqs {
        let (p, c) = promise::<T>();
        let pool = inner.data[server].clone();
        let (cred, what) = (cred.clone(), what.to_string());
        inner.exec.submit(server, move || {
            let r = pool
                .call(&cred, req, &[], &mut [])
                .and_then(|(resp, _)| answer(&pool, resp));
            p.fulfil(r.map_err(|e| context(e, format!("{op} of {what} on {}", pool.name()))));
        });
        waits.push(c);
    }
    let results: Vec<_> = waits.iter().map(|c| c.wait()).collect();
    results.into_iter().collect()
}

/// Checks each returned block against the CRC the server stored for it. A short last
/// block is checksummed as stored: padded with zeros to a full block.
/// Extra tries of a read through a server whose bytes fail their checksums.
const CHECKSUM_RETRIES: usize = 2;

/// Least whole-block middle for which a write with partial edges goes through a same-host
/// server's pipe (the edges then go over TCP: three requests instead of one).
const MIN_SPLIT_PIPE_BYTES: u64 = 256 << 10;

/// Runs a read through a server into `buf` (zeroed before each try), again when its bytes
/// fail their checksums: data servers send stored bytes with sendfile, and a block
/// rewritten by another client while its pages are still on their way is caught here as
/// a mismatch (never passed on). A mismatch that stays is damage, and is reported.
fn checksum_retried<T>(
    buf: &mut [u8],
    mut read: impl FnMut(&mut [u8]) -> Result<T, WireError>,
) -> Result<T, WireError> {
    let mut tries = 0;
    loop {
        match read(buf) {
            Err(e) if e.code == ErrorCode::Checksum && tries < CHECKSUM_RETRIES => {
                tries += 1;
                tracing::debug!("{e}; reading again ({tries} of {CHECKSUM_RETRIES})");
                buf.fill(0);
            }
            r => return r,
        }
    }
}

fn verify(
    crcs: &[u32],
    data: &[u8],
    local: u64,
    pool: &ServerPool,
    geo: &Geometry,
    place: u32,
    what: &str,
) -> Result<(), WireError> {
    let block = BLOCK_BYTES as usize;
    let blocks = data.len().div_ceil(block);
    if crcs.len() != blocks {
        return Err(WireError::new(
            ErrorCode::UnexpectedMessage,
            format!(
                "{} returned {} bytes with {} checksums, expected {blocks}",
                pool.name(),
                data.len(),
                crcs.len()
            ),
        ));
    }
    for (i, (b, &want)) in data.chunks(block).zip(crcs).enumerate() {
        let ok = if b.len() == block {
            crc32c(b) == want
        } else {
            padded_block_crc(b) == want
        };
        if !ok {
            let at = local + (i * block) as u64;
            return Err(WireError::new(
                ErrorCode::Checksum,
                format!(
                    "checksum mismatch in {what} at file offset {} (local offset {at}) returned by {}: the stored block is corrupt or was damaged in transit",
                    geo.stripe().to_global(place, at),
                    pool.name()
                ),
            ));
        }
    }
    Ok(())
}

/// An answer of the wrong kind: the server speaks another protocol revision or is buggy.
pub(crate) fn unexpected(pool: &ServerPool, op: &str, resp: &Response) -> WireError {
    let kind = format!("{resp:?}");
    let kind = kind.split([' ', '(', '{']).next().unwrap_or("?");
    WireError::new(
        ErrorCode::UnexpectedMessage,
        format!("{} answered {op} with {kind}", pool.name()),
    )
}

/// Records the boot identity a write to `place` was answered with; a different one than
/// earlier writes since the last fsync saw means the server restarted in between, and
/// those writes may be lost: an error, which the next write, fsync or close reports.
fn note_boot(
    boots: &Mutex<HashMap<u32, u64>>,
    place: u32,
    boot_id: u64,
    pool: &ServerPool,
) -> Result<(), WireError> {
    let mut boots = boots.lock().unwrap_or_else(|p| p.into_inner());
    match boots.insert(place, boot_id) {
        Some(before) if before != boot_id => Err(WireError::new(
            ErrorCode::ServerRestarted,
            format!(
                "{} restarted since it acknowledged earlier writes; writes not yet durable \
                 may be lost",
                pool.name()
            ),
        )),
        _ => Ok(()),
    }
}

/// Prefixes `what` to an error's message, keeping its code.
pub(crate) fn context(e: WireError, what: String) -> WireError {
    WireError::new(e.code, format!("{what}: {}", e.message))
}

pub(crate) fn now_ns() -> i64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// Whether a read of `len` bytes at `offset` must ask the metadata server for the size
/// (or an inline file's bytes) before answering, when `known` bytes are known here: one
/// starting at or past them must (no end of file without asking); one reaching past
/// them must only if it is read `whole` (a list read, whose bytes past the end read as
/// zeros); otherwise it returns what is known, a short read.
pub(crate) fn must_ask(offset: u64, len: u64, known: u64, whole: bool) -> bool {
    len > 0 && (offset >= known || (whole && offset.saturating_add(len) > known))
}

#[cfg(test)]
mod must_ask_tests {
    use super::must_ask;

    #[test]
    fn reads_ask_only_at_the_known_end_unless_read_whole() {
        for known in [0u64, 1, 4096] {
            for offset in [0u64, 1, 4095, 4096, 4097] {
                for len in [0u64, 1, 4096, u64::MAX] {
                    let end = offset.saturating_add(len);
                    assert_eq!(
                        must_ask(offset, len, known, false),
                        len > 0 && offset >= known,
                        "{offset} {len} {known}"
                    );
                    assert_eq!(
                        must_ask(offset, len, known, true),
                        len > 0 && end > known,
                        "{offset} {len} {known} whole"
                    );
                }
            }
        }
    }
}
