//! Short-circuit reads (issue 14; docs/objects.md "Reads", docs/protocol.md
//! "Short-circuit socket"): a client on the same host as a data server asks the server's
//! Unix socket for read-only descriptors of an object's files and reads them with
//! `pread`, verifying every block against the checksum the writing client computed and
//! the server stored. The server's CPU and memory are not in that data path.
//!
//! Anything unexpected sends the read through the server instead (the caller falls back
//! when [`ShortCircuit::read`] says no): a checksum mismatch (a block being rewritten
//! under the server's lock, or real damage, which the server then reports), an object
//! missing on a target, a socket error. A server that refuses short-circuit reads for
//! good (throttled targets) is not asked again.
//!
//! Whole-block writes go through the same socket, their bytes in a pipe
//! ([`ShortCircuit::write`]); the server checks and stores them as for any write. Large
//! writes of new blocks from aligned buffers (direct writes, on by default) are written
//! by the client into the server's files itself (`O_DIRECT`) and the server stores their
//! CRCs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use stripefs_layout::Stripe;
use stripefs_rpc::local;
use stripefs_rpc::samehost::{refuses_for_good, Attached, Liveness, LocalDial, LocalLink, PipeOut};
use stripefs_sys::storage::ObjectFile;
use stripefs_wire::sidecar::{Entry, ENTRY_BYTES};
use stripefs_wire::{
    padded_block_crc, GrantPiece, InodeId, Request, Response, WireError, BLOCK_BYTES, HAS_DATA,
    HAS_SIDECAR, MAX_LOCAL_MESSAGE, MAX_LOCAL_TARGETS, MAX_LOCAL_WRITE,
};

/// What a client got for one object: per target, its data file and sidecar, if any.
type ObjectFiles = Vec<(Option<Arc<dyn ObjectFile>>, Option<Arc<dyn ObjectFile>>)>;

/// What a short-circuit write came to.
enum Written {
    Done {
        boot_id: u64,
    },
    /// The server takes no writes of this kind: do not ask it again.
    Refused(String),
    Failed(String),
}

impl Written {
    /// The server's answer to a write.
    fn of(r: Result<Response, WireError>) -> Written {
        match r {
            Ok(Response::Written { boot_id }) => Written::Done { boot_id },
            Ok(other) => Written::Failed(format!("answered {:?}", other.kind())),
            Err(e) if refuses_for_good(&e) => Written::Refused(e.to_string()),
            Err(e) => Written::Failed(e.to_string()),
        }
    }
}

/// Objects whose descriptors a client keeps per server.
const MAX_CACHED_OBJECTS: usize = 256;
const BLOCK: u64 = BLOCK_BYTES as u64;
/// A pipe must carry at least this many blocks per round to be worth its round trips.
const MIN_PIPE_ROUND_BLOCKS: usize = 32;
/// List writes failing in a row after which a client sends them over TCP.
const MAX_LIST_FAILURES: usize = 8;
const PAGE: usize = 4096;
/// Whole-block writes at least this large, from a page-aligned buffer, are written by
/// the client itself (direct writes); smaller ones go through the pipe, where a disk
/// round trip per write would cost more than the copy it saves.
const MIN_DIRECT_BYTES: usize = 256 << 10;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One data server's short-circuit path, as seen by one client.
pub(crate) struct ShortCircuit {
    dial: Arc<dyn LocalDial>,
    conn: Mutex<Option<Link>>,
    /// The connection (with its pipe) for writes, apart from `conn` so that opens for
    /// reads do not wait behind writes. One per server: more let a client's writes run
    /// at once on the server, where they contend for the object file's lock (measured:
    /// more server CPU per GiB with four, docs/benchmarks.md, seventh session).
    writer: Mutex<Option<Link>>,
    /// Idle connections for direct writes (one per direct write running).
    direct_links: Mutex<Vec<Link>>,
    /// List writes that failed in a row; past [`MAX_LIST_FAILURES`] they go over TCP
    /// (a server that does not take them answers every one with a failure).
    list_failures: AtomicUsize,
    /// Descriptors of objects that exist on every target, by file id, from the
    /// connection whose liveness they keep (they are dropped once it has ended: a
    /// restarted server may have lost or replaced the files they show).
    cache: Mutex<Cached>,
    /// The client wants short-circuit reads (`Client::set_short_circuit`).
    pub enabled: AtomicBool,
    /// The server refused them for good.
    refused: AtomicBool,
    /// The server takes no short-circuit writes (throttled targets).
    write_refused: AtomicBool,
    /// The client wants direct writes (the default; `STRIPEFS_DIRECT_WRITES=0` and
    /// `Client::set_direct_writes(false)` turn them off).
    pub direct_enabled: AtomicBool,
    /// The server takes no direct writes (throttled targets, or a file system without
    /// `O_DIRECT`); writes go through its pipe.
    direct_refused: AtomicBool,
    /// Which large reads of bytes not in the page cache go from the disk into the
    /// caller's buffer (`O_DIRECT`), not through the page cache and a copy: a
    /// [`DirectReads`] as a number (`STRIPEFS_DIRECT_READS`, `Client::set_direct_reads`).
    pub direct_reads: AtomicU8,
    /// Bytes read with `O_DIRECT` (part of `bytes`).
    pub direct_read: AtomicU64,
    /// Bytes read directly.
    pub bytes: AtomicU64,
    /// Bytes written through the pipe or directly.
    pub written: AtomicU64,
    /// Of those, bytes the client wrote into the object files itself (direct writes).
    pub direct: AtomicU64,
    /// Reads that went through the server after all.
    pub fallbacks: AtomicU64,
}

/// The short-circuit cache of one server's object files.
#[derive(Default)]
struct Cached {
    /// The connection the files came on.
    live: Option<Arc<dyn Liveness>>,
    files: HashMap<u64, Arc<ObjectFiles>>,
}

impl Cached {
    /// `fid`'s files, if cached from a connection that is still up; the whole cache goes
    /// once it has ended.
    fn get(&mut self, fid: u64) -> Option<Arc<ObjectFiles>> {
        let f = self.files.get(&fid)?.clone();
        if self.live.as_ref().is_some_and(|l| l.alive()) {
            return Some(f);
        }
        self.files.clear();
        self.live = None;
        None
    }

    /// Caches `fid`'s files, which came on the connection `live` says about; files of an
    /// earlier connection go first.
    fn insert(
        &mut self,
        fid: u64,
        files: Arc<ObjectFiles>,
        live: impl FnOnce() -> Arc<dyn Liveness>,
    ) {
        if !self.live.as_ref().is_some_and(|l| l.alive()) || self.files.len() >= MAX_CACHED_OBJECTS
        {
            self.files.clear();
            self.live = Some(live());
        }
        self.files.insert(fid, files);
    }
}

impl ShortCircuit {
    pub fn new(dial: Arc<dyn LocalDial>, enabled: bool) -> ShortCircuit {
        ShortCircuit {
            dial,
            conn: Mutex::new(None),
            writer: Mutex::new(None),
            direct_links: Mutex::new(Vec::new()),
            list_failures: AtomicUsize::new(0),
            cache: Mutex::new(Cached::default()),
            enabled: AtomicBool::new(enabled),
            refused: AtomicBool::new(false),
            write_refused: AtomicBool::new(false),
            direct_enabled: AtomicBool::new(direct_writes_default()),
            direct_refused: AtomicBool::new(false),
            direct_reads: AtomicU8::new(direct_reads_default() as u8),
            direct_read: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            written: AtomicU64::new(0),
            direct: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
        }
    }

    /// Whether a read should try this path.
    pub fn usable(&self) -> bool {
        self.enabled.load(Ordering::Relaxed) && !self.refused.load(Ordering::Relaxed)
    }

    /// Asks the server for `fid`'s files (one reconnect on a broken connection).
    fn open(&self, fid: u64) -> Option<Arc<ObjectFiles>> {
        if let Some(f) = lock(&self.cache).get(fid) {
            return Some(f);
        }
        let mut conn = lock(&self.conn);
        for _ in 0..2 {
            let c = &mut self.connected(&mut conn)?.conn;
            let answer = c
                .call(Request::LocalOpen { fid: InodeId(fid) }, Attached::None)
                .and_then(|(r, files)| pair_files(r, files.files()));
            match answer {
                Ok(Ok(files)) => {
                    let complete = files.iter().all(|(d, s)| d.is_some() && s.is_some());
                    let files = Arc::new(files);
                    if complete {
                        lock(&self.cache).insert(fid, files.clone(), || c.liveness());
                    }
                    return Some(files);
                }
                Ok(Err(e)) if refuses_for_good(&e) => {
                    tracing::info!(
                        "short-circuit reads refused by {}: {e}; reading through the server",
                        self.dial.describe()
                    );
                    self.refused.store(true, Ordering::Relaxed);
                    return None;
                }
                Ok(Err(e)) => {
                    tracing::debug!("short-circuit open of {fid:#x}: {e}");
                    return None;
                }
                Err(e) => {
                    tracing::debug!("short-circuit socket {}: {e}", self.dial.describe());
                    *conn = None;
                }
            }
        }
        None
    }

    /// The connection, made (with its handshake) if there is none.
    fn connected<'c>(&self, conn: &'c mut Option<Link>) -> Option<&'c mut Link> {
        if conn.is_none() {
            match self.dial.dial() {
                Ok(c) => {
                    *conn = Some(Link {
                        conn: c,
                        pipe: None,
                    })
                }
                Err(e) => {
                    tracing::debug!("short-circuit socket {}: {e}", self.dial.describe());
                    return None;
                }
            }
        }
        conn.as_mut()
    }

    /// Whether a write of `len` bytes from an aligned buffer would be tried as a direct
    /// write (it is, if its blocks are whole and holes).
    pub fn writes_direct(&self, len: usize) -> bool {
        (MIN_DIRECT_BYTES..=MAX_LOCAL_WRITE).contains(&len)
            && self.usable()
            && !self.write_refused.load(Ordering::Relaxed)
            && self.direct_enabled.load(Ordering::Relaxed)
            && !self.direct_refused.load(Ordering::Relaxed)
    }

    /// Writes `data` (whole blocks, `crcs` one per block) at local offset `local` of
    /// `fid`'s object through the server's pipe: the bytes go into the pipe by reference
    /// (`vmsplice`) and the server splices them into its files, so neither side copies
    /// them through user memory and no TCP stack carries them. The server's boot id, or
    /// `None` when the caller must send the write through TCP instead (not whole blocks,
    /// too large, refused, or anything failed: the TCP path then reports real errors).
    pub fn write(&self, fid: u64, unit: u32, local: u64, data: &[u8], crcs: &[u32]) -> Option<u64> {
        let whole =
            local % BLOCK == 0 && data.len() as u64 % BLOCK == 0 && unit as u64 % BLOCK == 0;
        if !whole
            || data.is_empty()
            || data.len() > MAX_LOCAL_WRITE
            || !self.usable()
            || self.write_refused.load(Ordering::Relaxed)
        {
            return None;
        }
        let direct = data.len() >= MIN_DIRECT_BYTES
            && data.as_ptr() as usize % crate::abuf::ALIGN == 0
            && self.direct_enabled.load(Ordering::Relaxed)
            && !self.direct_refused.load(Ordering::Relaxed);
        if direct {
            if let Some(boot_id) = self.write_direct(fid, unit, local, data, crcs) {
                return Some(boot_id);
            }
        }
        let mut conn = lock(&self.writer);
        let link = self.connected(&mut conn)?;
        let r = link.write(fid, unit, local, data, crcs);
        self.outcome(r, &mut conn, fid, data.len(), false)
    }

    /// A direct write on a connection of its own (taken from the idle ones, or made):
    /// direct writes to one server run at once, as many as the client's jobs for it, so
    /// that the disk has several in its queue. The server's boot id, or `None` for the
    /// pipe's path.
    fn write_direct(
        &self,
        fid: u64,
        unit: u32,
        offset: u64,
        data: &[u8],
        crcs: &[u32],
    ) -> Option<u64> {
        let idle = lock(&self.direct_links).pop();
        let mut link = match idle {
            Some(l) => l,
            None => {
                let mut fresh = None;
                self.connected(&mut fresh)?;
                fresh?
            }
        };
        let r = direct_write(&mut *link.conn, fid, unit, offset, data, crcs);
        let keep = |link: Link| lock(&self.direct_links).push(link);
        match r {
            Ok(Written::Done { boot_id }) => {
                keep(link);
                self.written.fetch_add(data.len() as u64, Ordering::Relaxed);
                self.direct.fetch_add(data.len() as u64, Ordering::Relaxed);
                Some(boot_id)
            }
            Ok(Written::Refused(why)) => {
                tracing::info!(
                    "short-circuit direct writes refused by {}: {why}; writing through its pipe",
                    self.dial.describe()
                );
                self.direct_refused.store(true, Ordering::Relaxed);
                None
            }
            // Blocks that hold bytes, a failed write: the pipe's path (whose checks a
            // rewrite needs) reports real errors.
            Ok(Written::Failed(why)) => {
                keep(link);
                tracing::debug!("short-circuit direct write to {fid:#x}: {why}");
                None
            }
            // The connection is dropped with whatever it was in the middle of.
            Err(e) => {
                tracing::debug!("short-circuit socket {}: {e}", self.dial.describe());
                None
            }
        }
    }

    /// What a write through the pipe came to: the server's boot id, or `None` for the
    /// caller to write over TCP. `list`: a list write, whose failures in a row are
    /// counted (a server that does not know them fails every one).
    fn outcome(
        &self,
        r: std::io::Result<Written>,
        conn: &mut Option<Link>,
        fid: u64,
        bytes: usize,
        list: bool,
    ) -> Option<u64> {
        let failed = || {
            if list {
                self.list_failures.fetch_add(1, Ordering::Relaxed);
            }
        };
        match r {
            Ok(Written::Done { boot_id }) => {
                self.written.fetch_add(bytes as u64, Ordering::Relaxed);
                if list {
                    self.list_failures.store(0, Ordering::Relaxed);
                }
                Some(boot_id)
            }
            Ok(Written::Refused(why)) => {
                tracing::info!(
                    "short-circuit writes refused by {}: {why}; writing through the server",
                    self.dial.describe()
                );
                self.write_refused.store(true, Ordering::Relaxed);
                None
            }
            Ok(Written::Failed(why)) => {
                tracing::debug!("short-circuit write to {fid:#x}: {why}");
                failed();
                None
            }
            Err(e) => {
                tracing::debug!("short-circuit socket {}: {e}", self.dial.describe());
                // The pipe may hold part of the write: this connection is done.
                *conn = None;
                failed();
                None
            }
        }
    }

    /// Writes a gather of `fid`'s extents (`offsets[i]` and `parts[i]`: any offset and
    /// length; `crcs` one per block-bounded piece of each, in order) through the server's
    /// pipe: the bytes go in by reference, the server reads them out and writes them as a
    /// list write from TCP, so the TCP stack and the copy into a socket are saved. The
    /// server's boot id, or `None` when the caller must send the list through TCP instead
    /// (refused, too large for the pipe, or anything failed: the TCP path then reports
    /// real errors; rounds already written are written again, the same bytes).
    pub fn write_list(
        &self,
        fid: u64,
        unit: u32,
        offsets: &[u64],
        parts: &[&[u8]],
        crcs: &[u32],
    ) -> Option<u64> {
        assert_eq!(offsets.len(), parts.len());
        if parts.is_empty()
            || !self.usable()
            || self.write_refused.load(Ordering::Relaxed)
            || self.list_failures.load(Ordering::Relaxed) >= MAX_LIST_FAILURES
        {
            return None;
        }
        let mut conn = lock(&self.writer);
        let link = self.connected(&mut conn)?;
        // An extent too large for the pipe is no failure of the server's: not counted.
        let r = link.write_list(fid, unit, offsets, parts, crcs);
        let r = r.transpose()?;
        let bytes = parts.iter().map(|p| p.len()).sum();
        self.outcome(r, &mut conn, fid, bytes, true)
    }

    /// Reads `buf.len()` bytes of `fid`'s object at local offset `local` (both block
    /// aligned; the object striped over the server's targets with `unit`) directly from
    /// the server's files, holes as zeros, every written block verified. `false` when
    /// the caller must read through the server instead (`buf` is then zeroed again).
    /// `iobuf`: `buf` lies in an [`IoBuf`](crate::IoBuf) (huge pages), which
    /// [`DirectReads::IoBufs`] reads directly.
    pub fn read(&self, fid: u64, unit: u32, local: u64, buf: &mut [u8], iobuf: bool) -> bool {
        let ok = self.try_read(fid, unit, local, buf, iobuf);
        if ok {
            self.bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        } else {
            buf.fill(0);
            self.fallbacks.fetch_add(1, Ordering::Relaxed);
            // The cached descriptors may be the cause (never, by the rules, but a
            // fresh answer costs one round trip).
            lock(&self.cache).files.remove(&fid);
        }
        ok
    }

    fn try_read(&self, fid: u64, unit: u32, local: u64, buf: &mut [u8], iobuf: bool) -> bool {
        if local % BLOCK != 0 || buf.len() as u64 % BLOCK != 0 || unit as u64 % BLOCK != 0 {
            return false;
        }
        let Some(files) = self.open(fid) else {
            return false;
        };
        let Ok(stripe) = Stripe::new(unit as u64, files.len() as u32) else {
            return false;
        };
        let direct = match DirectReads::from_u8(self.direct_reads.load(Ordering::Relaxed)) {
            DirectReads::Off => false,
            DirectReads::IoBufs => iobuf && crate::abuf::huge_pages(),
            DirectReads::Any => true,
        };
        for p in stripe.split(local, buf.len() as u64) {
            let at = (p.global - local) as usize;
            let out = &mut buf[at..at + p.len as usize];
            let (data, sidecar) = &files[p.place as usize];
            let how = match data {
                Some(d) if direct && direct_read_fits(&**d, p.local, out) => Via::Direct,
                _ => Via::PageCache,
            };
            match read_target(data.as_ref(), sidecar.as_ref(), p.local, out, how) {
                None => return false,
                Some(Via::Direct) => {
                    self.direct_read.fetch_add(p.len, Ordering::Relaxed);
                }
                // Asked for and not done: this client reads this server's files through
                // the page cache from now on, without trying again each time.
                Some(Via::PageCache) if how == Via::Direct => {
                    self.direct_reads
                        .store(DirectReads::Off as u8, Ordering::Relaxed);
                }
                Some(Via::PageCache) => {}
            }
        }
        true
    }
}

/// A connection to the server's short-circuit endpoint and, once a write needed it, the
/// client's end of the pipe whose read end the server holds.
struct Link {
    conn: Box<dyn LocalLink>,
    pipe: Option<Box<dyn PipeOut>>,
}

impl Link {
    fn write(
        &mut self,
        fid: u64,
        unit: u32,
        offset: u64,
        data: &[u8],
        crcs: &[u32],
    ) -> std::io::Result<Written> {
        if let Some(refused) = self.ensure_pipe()? {
            return Ok(refused);
        }
        let cap = self.pipe.as_ref().expect("made above").capacity();
        // A pipe holds a page per buffer, and the bytes of a buffer not aligned to a page
        // span one page more: each round carries at most a page less than the pipe holds,
        // in equal whole-block pieces (1 MiB in two through a 1 MiB pipe).
        let room = cap.saturating_sub(BLOCK as usize) / BLOCK as usize;
        if room < MIN_PIPE_ROUND_BLOCKS {
            return Ok(Written::Failed(format!("the pipe holds only {cap} bytes")));
        }
        let blocks = data.len() / BLOCK as usize;
        let rounds = blocks.div_ceil(room);
        let per = blocks.div_ceil(rounds);
        let mut boot = None;
        for (i, (part, sums)) in data
            .chunks(per * BLOCK as usize)
            .zip(crcs.chunks(per))
            .enumerate()
        {
            let req = Request::LocalWrite {
                fid: InodeId(fid),
                unit,
                offset: offset + (i * per) as u64 * BLOCK,
                len: part.len() as u32,
                crcs: sums.to_vec(),
            };
            // The bytes first, then the message: the server finds them all in the pipe.
            self.pipe.as_mut().expect("made above").put(part)?;
            let (r, _) = self.conn.call(req, Attached::None)?;
            match Written::of(r) {
                Written::Done { boot_id } => boot = Some(boot_id),
                other => return Ok(other),
            }
        }
        Ok(Written::Done {
            boot_id: boot.expect("at least one round"),
        })
    }

    /// Makes the connection's pipe if it has none and hands its read end to the server;
    /// `Some` is the server's refusal.
    fn ensure_pipe(&mut self) -> std::io::Result<Option<Written>> {
        if self.pipe.is_none() {
            let (out, end) = self.conn.pipe()?;
            match self.conn.call(Request::LocalPipe {}, end)?.0 {
                Ok(_) => self.pipe = Some(out),
                Err(e) => return Ok(Some(Written::of(Err(e)))),
            }
        }
        Ok(None)
    }

    /// Sends the extents in rounds that each fit the pipe (a buffer takes one pipe slot
    /// per page it touches) and one message; `None` (nothing sent) when an extent alone
    /// does not.
    fn write_list(
        &mut self,
        fid: u64,
        unit: u32,
        offsets: &[u64],
        parts: &[&[u8]],
        crcs: &[u32],
    ) -> std::io::Result<Option<Written>> {
        if let Some(refused) = self.ensure_pipe()? {
            return Ok(Some(refused));
        }
        let slots = self.pipe.as_ref().expect("made above").capacity() / PAGE - 1;
        let pages = |p: &[u8]| {
            let a = p.as_ptr() as usize;
            (a + p.len()).div_ceil(PAGE) - a / PAGE
        };
        let pieces: Vec<usize> = offsets
            .iter()
            .zip(parts)
            .map(|(&o, p)| stripefs_wire::pieces(o, p.len()).count())
            .collect();
        assert_eq!(
            pieces.iter().sum::<usize>(),
            crcs.len(),
            "one CRC per piece"
        );
        let sizes: Vec<Extent> = parts
            .iter()
            .zip(&pieces)
            .map(|(p, &crcs)| Extent {
                pages: pages(p),
                bytes: p.len(),
                crcs,
            })
            .collect();
        let Some(rounds) = rounds(&sizes, slots) else {
            return Ok(None);
        };
        let mut boot = None;
        let mut c = 0;
        for (i, j) in rounds {
            let n: usize = pieces[i..j].iter().sum();
            let req = Request::LocalWriteList {
                fid: InodeId(fid),
                unit,
                extents: (i..j)
                    .map(|x| (offsets[x], parts[x].len() as u32))
                    .collect(),
                crcs: crcs[c..c + n].to_vec(),
            };
            // The bytes first, then the message: the server finds them all in the pipe.
            let pipe = self.pipe.as_mut().expect("made above");
            for p in &parts[i..j] {
                pipe.put(p)?;
            }
            let (r, _) = self.conn.call(req, Attached::None)?;
            match Written::of(r) {
                Written::Done { boot_id } => boot = Some(boot_id),
                other => return Ok(Some(other)),
            }
            c += n;
        }
        Ok(Some(Written::Done {
            boot_id: boot.expect("at least one round"),
        }))
    }
}

/// Pairs a `LocalFiles` answer's flags with the files that came with it, per target; the
/// inner `Err` is the server's.
fn pair_files(
    r: Result<Response, WireError>,
    files: Vec<Arc<dyn ObjectFile>>,
) -> std::io::Result<Result<ObjectFiles, WireError>> {
    let flags = match r {
        Ok(Response::LocalFiles { flags }) => flags,
        Ok(other) => return Err(bad(&format!("answered {:?}", other.kind()))),
        Err(e) => return Ok(Err(e)),
    };
    if flags.is_empty() || flags.len() > MAX_LOCAL_TARGETS {
        return Err(bad(&format!("an answer for {} targets", flags.len())));
    }
    let want: usize = flags
        .iter()
        .map(|f| (f & HAS_DATA != 0) as usize + (f & HAS_SIDECAR != 0) as usize)
        .sum();
    if want != files.len() {
        return Err(bad(&format!(
            "the answer announces {want} files and carries {}",
            files.len()
        )));
    }
    let mut files = files.into_iter();
    let out = flags
        .iter()
        .map(|&f| {
            let data = (f & HAS_DATA != 0).then(|| files.next()).flatten();
            let crc = (f & HAS_SIDECAR != 0).then(|| files.next()).flatten();
            (data, crc)
        })
        .collect();
    Ok(Ok(out))
}

fn bad(m: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("short-circuit: {m}"),
    )
}

/// What an extent of a list write takes: pipe slots (a page each it touches), bytes and
/// CRCs.
#[derive(Clone, Copy, Debug)]
struct Extent {
    pages: usize,
    bytes: usize,
    crcs: usize,
}

/// Splits a list write's extents, in order, into rounds `[i, j)` through a pipe of
/// `slots` slots: each round's extents take at most `slots` pages and
/// [`MAX_LOCAL_WRITE`] bytes, and its message fits one packet. `None` when an extent
/// alone does not fit.
fn rounds(extents: &[Extent], slots: usize) -> Option<Vec<(usize, usize)>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < extents.len() {
        let (mut j, mut pages, mut bytes, mut crcs) = (i, 0, 0, 0);
        while let Some(e) = extents.get(j) {
            let fits = pages + e.pages <= slots
                && bytes + e.bytes <= MAX_LOCAL_WRITE
                && list_message_bound(j + 1 - i, crcs + e.crcs) <= MAX_LOCAL_MESSAGE;
            if !fits {
                break;
            }
            (pages, bytes, crcs) = (pages + e.pages, bytes + e.bytes, crcs + e.crcs);
            j += 1;
        }
        if j == i {
            return None;
        }
        out.push((i, j));
        i = j;
    }
    Some(out)
}

/// At least the bytes of a `LocalWriteList` frame of `extents` extents and `crcs` CRCs:
/// the header, the credentials and the request's small fields, each extent's two
/// integers at their longest, four bytes per CRC.
fn list_message_bound(extents: usize, crcs: usize) -> usize {
    stripefs_wire::HEADER_LEN + 96 + 15 * extents + 4 * crcs
}

/// How a short-circuit read takes a target's bytes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Via {
    /// `pread` through the page cache (a copy out of it).
    PageCache,
    /// `pread` with `O_DIRECT`: the disk writes into the caller's buffer.
    Direct,
}

/// Whether a read of `out.len()` bytes of `f` at `off` is worth doing with `O_DIRECT`:
/// large, the buffer page-aligned, and none of the range in the page cache (read from
/// there, a cached range costs one copy and no disk; and the kernel would first write
/// back dirty pages of the range for a direct read). Asked with `cachestat` (Linux
/// 6.5); where that is missing, never.
fn direct_read_fits(f: &dyn ObjectFile, off: u64, out: &[u8]) -> bool {
    out.len() >= MIN_DIRECT_BYTES
        && out.as_ptr() as usize % PAGE == 0
        && out.len() % PAGE == 0
        && off % PAGE as u64 == 0
        && f.borrowed_fd()
            .and_then(|fd| local::cachestat(&fd, off, out.len() as u64))
            .is_some_and(|c| c.cached == 0)
}

/// Reads and verifies `out.len()` bytes at target offset `off` (block aligned) the way
/// `how` says, or through the page cache where a direct read cannot be done; returns
/// the way taken, `None` when the caller must read through the server.
fn read_target(
    data: Option<&Arc<dyn ObjectFile>>,
    sidecar: Option<&Arc<dyn ObjectFile>>,
    off: u64,
    out: &mut [u8],
    mut how: Via,
) -> Option<Via> {
    let blocks = out.len() / BLOCK as usize;
    let mut entries = vec![0u8; blocks * ENTRY_BYTES as usize];
    // Checksums first, then data, as the server reads: a block rewritten in between
    // shows as a mismatch, never as wrong bytes passed on.
    if let Some(s) = sidecar {
        if read_full(s, &mut entries, off / BLOCK * ENTRY_BYTES).is_err() {
            return None;
        }
    }
    match (data, how) {
        (Some(d), Via::PageCache) => {
            if read_full(d, out, off).is_err() {
                return None;
            }
        }
        (Some(d), Via::Direct) => {
            if let Err(e) = read_direct(d, out, off) {
                // This process may not open the file itself (another user's client) or
                // the file system takes no O_DIRECT: the server's descriptor still reads.
                tracing::debug!("short-circuit direct read at {off}: {e}; through the page cache");
                how = Via::PageCache;
                if read_full(d, out, off).is_err() {
                    return None;
                }
            }
        }
        (None, _) => out.fill(0),
    }
    for (block, entry) in out
        .chunks_mut(BLOCK as usize)
        .zip(entries.chunks(ENTRY_BYTES as usize))
    {
        match Entry::decode(entry) {
            Ok(Entry::Hole) => block.fill(0),
            Ok(Entry::Written(crc)) => {
                if padded_block_crc(block) != crc {
                    return None;
                }
            }
            // Pieces in the server's log lie on top of these bytes (docs/objects.md,
            // "Writes"), or a flag this version does not know: the server serves it.
            Ok(Entry::Pieces(_)) | Err(_) => return None,
        }
    }
    Some(how)
}

/// Fills `buf` from `f` at `off`; bytes past the file's end are zeros.
fn read_full(f: &Arc<dyn ObjectFile>, buf: &mut [u8], off: u64) -> std::io::Result<()> {
    // `read_at` returns fewer bytes only at the file's end.
    let n = f.read_at(buf, off)?;
    buf[n..].fill(0);
    Ok(())
}

/// Fills `buf` (page-aligned, a whole number of pages) from `f` at `off` (page-aligned)
/// with `O_DIRECT`, on a descriptor of its own opened through `/proc/self/fd` (the
/// server's descriptor stays as it is; opening checks this process's access to the
/// file again, and where it has none the caller reads through the page cache instead).
/// Bytes past the file's end are zeros.
fn read_direct(f: &Arc<dyn ObjectFile>, buf: &mut [u8], off: u64) -> std::io::Result<()> {
    let fd = f.borrowed_fd().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "a file without a descriptor",
        )
    })?;
    let d = local::open_direct_reader(&fd)?;
    let n = local::pread_direct(&d, buf, off)?;
    buf[n..].fill(0);
    Ok(())
}

/// Which short-circuit reads of large uncached ranges go from the disk straight into the
/// caller's buffer with `O_DIRECT` (see [`direct_read_fits`]), sparing the client the copy
/// out of the page cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum DirectReads {
    /// None.
    Off = 0,
    /// Reads into an [`IoBuf`](crate::IoBuf) (`File::read_buf`), where the kernel maps
    /// IoBufs in huge pages (the default): measured two to four times faster than
    /// buffered reads, since a 1 MiB read into one huge page is one segment for the
    /// block layer (docs/benchmarks.md, tenth session).
    IoBufs = 1,
    /// Every read into a page-aligned buffer. Into a buffer in small pages a 1 MiB read
    /// is 256 segments, and such reads streamed at a third to two thirds of the
    /// buffered rate.
    Any = 2,
}

impl DirectReads {
    fn from_u8(v: u8) -> DirectReads {
        match v {
            0 => DirectReads::Off,
            2 => DirectReads::Any,
            _ => DirectReads::IoBufs,
        }
    }
}

/// New clients' [`DirectReads`]: `STRIPEFS_DIRECT_READS=0` (or `off`) none, `=1` (or `on`,
/// `all`) every aligned read, otherwise reads into IoBufs.
fn direct_reads_default() -> DirectReads {
    match std::env::var("STRIPEFS_DIRECT_READS").as_deref() {
        Ok("0" | "off" | "false") => DirectReads::Off,
        Ok("1" | "on" | "true" | "all") => DirectReads::Any,
        _ => DirectReads::IoBufs,
    }
}

/// Whether new clients write large new blocks on their host's servers themselves
/// (direct writes): yes unless the environment says `STRIPEFS_DIRECT_WRITES=0` (or
/// `off`). They save the servers' CPU and the page cache; a write whose grant ended
/// without the client's answer is fenced by the server (docs/protocol.md,
/// "Short-circuit socket").
fn direct_writes_default() -> bool {
    !matches!(
        std::env::var("STRIPEFS_DIRECT_WRITES").as_deref(),
        Ok("0" | "off" | "false")
    )
}

/// One direct write (docs/protocol.md "Short-circuit socket"): asks for the range's
/// places, writes each piece through its file's handle (`O_DIRECT` for a real
/// descriptor) straight from `data` (page-aligned), lets go of the grant's handles, and
/// sends the CRCs (or, if a piece could not be written whole, none, so that the blocks
/// stay holes and the caller writes them another way).
fn direct_write(
    conn: &mut dyn LocalLink,
    fid: u64,
    unit: u32,
    offset: u64,
    data: &[u8],
    crcs: &[u32],
) -> std::io::Result<Written> {
    let req = Request::LocalDirect {
        fid: InodeId(fid),
        unit,
        offset,
        len: data.len() as u32,
    };
    let (r, files) = conn.call(req, Attached::None)?;
    let files = files.files();
    let pieces = match r {
        Ok(Response::Granted { pieces }) => pieces,
        other => return Ok(Written::of(other)),
    };
    check_grant(&pieces, files.len(), data.len())?;
    let mut at = 0;
    let mut whole = true;
    for p in &pieces {
        let part = &data[at..at + p.len as usize];
        if let Err(e) = files[p.fd as usize].write_at(part, p.offset) {
            tracing::debug!(
                "short-circuit direct write of {} bytes at object offset {}: {e}",
                p.len,
                p.offset
            );
            whole = false;
            break;
        }
        at += p.len as usize;
    }
    // Done writing: the fence may let the blocks go as soon as the server wants.
    drop(files);
    let done = Request::LocalDirectDone {
        crcs: whole.then(|| crcs.to_vec()),
    };
    Ok(Written::of(conn.call(done, Attached::None)?.0))
}

/// A grant names files that came with it, and its pieces cover the range exactly (the
/// last file is the fence, which no piece names).
fn check_grant(pieces: &[GrantPiece], files: usize, len: usize) -> std::io::Result<()> {
    let covered: u64 = pieces.iter().map(|p| p.len as u64).sum();
    if pieces.iter().any(|p| p.fd as usize + 1 >= files) || covered != len as u64 {
        return Err(bad(&format!(
            "a grant of {} pieces over {covered} bytes and {files} files for {len} bytes",
            pieces.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Flag(Arc<AtomicBool>);
    impl Liveness for Flag {
        fn alive(&self) -> bool {
            self.0.load(Ordering::Relaxed)
        }
    }

    /// Cached files are served while the connection they came on is up; once it ended,
    /// none is (the whole cache goes), and files of a new connection replace them.
    #[test]
    fn cached_files_live_as_long_as_their_connection() {
        let (one, two) = (
            Arc::new(AtomicBool::new(true)),
            Arc::new(AtomicBool::new(true)),
        );
        let live = |f: &Arc<AtomicBool>| Arc::new(Flag(f.clone())) as Arc<dyn Liveness>;
        let files = Arc::new(ObjectFiles::new());
        let mut c = Cached::default();
        c.insert(7, files.clone(), || live(&one));
        c.insert(8, files.clone(), || live(&two));
        assert!(
            c.get(7).is_some() && c.get(8).is_some(),
            "one live connection's files"
        );
        one.store(false, Ordering::Relaxed);
        assert!(
            c.get(7).is_none() && c.get(8).is_none(),
            "served after the connection ended"
        );
        assert!(c.files.is_empty());
        c.insert(9, files, || live(&two));
        assert!(c.get(9).is_some());
        two.store(false, Ordering::Relaxed);
        assert!(c.get(9).is_none());
    }

    fn ext(pages: usize, bytes: usize, crcs: usize) -> Extent {
        Extent { pages, bytes, crcs }
    }

    /// Rounds keep the order, cover every extent once, and respect the pipe's slots, the
    /// byte limit and the message size; an extent that fits nowhere alone gives `None`
    /// (the caller then writes over TCP, which is no failure of the server's).
    #[test]
    fn rounds_fit_the_pipe_and_refuse_what_never_can() {
        // 47,008-byte records, unaligned: 13 pages and 12 CRCs each; 255 slots.
        let recs = vec![ext(13, 47_008, 12); 50];
        let r = rounds(&recs, 255).unwrap();
        assert_eq!(
            r.first(),
            Some(&(0, 19)),
            "19 x 13 = 247 slots, 20 x 13 = 260"
        );
        assert_eq!(r.iter().map(|(i, j)| j - i).sum::<usize>(), 50);
        assert!(r.windows(2).all(|w| w[0].1 == w[1].0), "in order, no gap");
        // Bytes: two extents of 1.5 MiB never share a round of at most 2 MiB.
        let big = vec![ext(1, 3 << 19, 1); 3];
        assert_eq!(rounds(&big, 10_000).unwrap(), vec![(0, 1), (1, 2), (2, 3)]);
        // The message: many CRCs split the rounds.
        let many = vec![ext(1, 10, 1200); 3];
        assert_eq!(rounds(&many, 255).unwrap().len(), 3);
        // An extent of 257 pages through 255 slots (1 MiB, unaligned, in a 1 MiB pipe).
        let wide = vec![ext(13, 47_008, 12), ext(257, 1 << 20, 257)];
        assert_eq!(rounds(&wide, 255), None);
        assert_eq!(rounds(&[ext(1, MAX_LOCAL_WRITE + 1, 1)], 10_000), None);
        assert_eq!(rounds(&[], 255), Some(vec![]));
    }
}
