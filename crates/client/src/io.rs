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
mod list;
mod read;
mod sparse;
mod sync;
mod write;
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
