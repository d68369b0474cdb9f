//! An MPI-IO file handle over the stripefs client: views, explicit offsets and an
//! individual file pointer, independent and collective (two-phase) reads and writes,
//! and asynchronous requests served in FIFO order by an I/O thread.

use crate::comm::Communicator;
use crate::datatype::{Datatype, TypeError};
use crate::view::View;
use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use stripefs_client::{Client, ErrorCode, LayoutHint, OpenOptions, WireError};

/// Errors of the layer: a type or view error, or the file system's.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    #[error(transparent)]
    Type(#[from] TypeError),
    #[error(transparent)]
    Fs(#[from] WireError),
    #[error("{0}")]
    Usage(String),
}

pub type Result<T> = std::result::Result<T, IoError>;

impl IoError {
    /// The file system's error code, if the error is the file system's.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            IoError::Fs(w) => Some(w.code),
            _ => None,
        }
    }

    /// An error that says the same (for a rank that reports another's failure).
    fn same(&self) -> IoError {
        match self {
            IoError::Fs(w) => IoError::Fs(WireError::new(w.code, w.message.clone())),
            other => IoError::Usage(other.to_string()),
        }
    }
}

/// ROMIO hint names this layer understands; others are kept and ignored.
#[derive(Clone, Debug, Default)]
pub struct Hints {
    pub values: HashMap<String, String>,
}

impl Hints {
    pub fn set(mut self, key: &str, value: &str) -> Hints {
        self.values.insert(key.to_string(), value.to_string());
        self
    }

    fn number(&self, key: &str) -> Result<Option<u64>> {
        match self.values.get(key) {
            None => Ok(None),
            Some(v) => v
                .parse()
                .map(Some)
                .map_err(|_| IoError::Usage(format!("hint {key}={v:?} is not a number"))),
        }
    }

    fn switch(&self, key: &str) -> Result<Option<bool>> {
        match self.values.get(key).map(String::as_str) {
            None | Some("automatic") => Ok(None),
            Some("enable") => Ok(Some(true)),
            Some("disable") => Ok(Some(false)),
            Some(v) => Err(IoError::Usage(format!(
                "hint {key}={v:?}: enable, disable or automatic"
            ))),
        }
    }
}

/// Default `ind_rd_buffer_size`: the largest span data sieving reads at once.
pub const DEFAULT_SIEVE_BYTES: u64 = 4 << 20;

/// An open file.
pub struct File {
    f: Arc<stripefs_client::File>,
    view: View,
    /// The individual file pointer, in etypes of the view.
    pointer: u64,
    sieve_bytes: u64,
    cb_nodes: Option<u64>,
    cb_write: Option<bool>,
    cb_read: Option<bool>,
    stripe: u64,
    io: Mutex<Option<IoThread>>,
}

/// How to open.
#[derive(Clone, Copy, Debug)]
pub struct Mode {
    pub read: bool,
    pub write: bool,
    pub create: bool,
    /// With `create`: fail if the file exists (MPI_MODE_EXCL).
    pub exclusive: bool,
}

impl File {
    /// Opens `path`; striping hints (`striping_unit`, `striping_factor`) apply when this
    /// call creates the file.
    pub fn open(client: &Client, path: &str, mode: Mode, hints: &Hints) -> Result<File> {
        let layout = LayoutHint {
            stripe_size_bytes: hints.number("striping_unit")?.map(|v| v as u32),
            stripe_count: hints.number("striping_factor")?.map(|v| v as u32),
            ..LayoutHint::default()
        };
        let opts = OpenOptions::new()
            .read(mode.read)
            .write(mode.write)
            .create(mode.create)
            .exclusive(mode.create && mode.exclusive)
            .mode(0o644)
            .layout(layout);
        let f = client.open(path, &opts)?;
        let stripe = f.layout().stripe_size_bytes as u64;
        Ok(File {
            f: Arc::new(f),
            view: View::bytes(0),
            pointer: 0,
            sieve_bytes: hints
                .number("ind_rd_buffer_size")?
                .unwrap_or(DEFAULT_SIEVE_BYTES),
            cb_nodes: hints.number("cb_nodes")?,
            cb_write: hints.switch("romio_cb_write")?,
            cb_read: hints.switch("romio_cb_read")?,
            stripe: stripe.max(1),
            io: Mutex::new(None),
        })
    }

    /// Sets the view; the individual file pointer goes back to 0.
    pub fn set_view(&mut self, disp: u64, etype: &Datatype, filetype: &Datatype) -> Result<()> {
        self.wait_io()?;
        self.view = View::new(disp, etype, filetype)?;
        self.pointer = 0;
        Ok(())
    }

    fn check_len(&self, len: usize) -> Result<()> {
        if len as u64 % self.view.etype_size() != 0 {
            return Err(IoError::Usage(format!(
                "{len} bytes is not a whole number of etypes ({} bytes each)",
                self.view.etype_size()
            )));
        }
        Ok(())
    }

    /// Writes `buf` at view offset `off` (etypes).
    pub fn write_at(&self, off: u64, buf: &[u8]) -> Result<()> {
        self.check_len(buf.len())?;
        write_extents(&self.f, &self.view.extents(off, buf.len() as u64)?, buf)
    }

    /// Reads `buf.len()` bytes at view offset `off` (etypes); bytes past the end of
    /// file read as zeros. Dense patterns are read with data sieving: one read of the
    /// span, then the pieces copied out.
    pub fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        self.check_len(buf.len())?;
        let ext = self.view.extents(off, buf.len() as u64)?;
        read_extents(&self.f, &ext, buf, self.sieve_bytes)
    }

    /// Writes at the individual file pointer and moves it.
    pub fn write(&mut self, buf: &[u8]) -> Result<()> {
        self.write_at(self.pointer, buf)?;
        self.pointer += buf.len() as u64 / self.view.etype_size();
        Ok(())
    }

    /// Independent write of file extents `(offset, length)` in bytes (no view), their
    /// bytes one after another in `buf`.
    pub fn write_list(&self, ext: &[(u64, u64)], buf: &[u8]) -> Result<()> {
        check_list(ext, buf.len())?;
        write_extents(&self.f, ext, buf)
    }

    /// Independent read of file extents in bytes into `buf`, one after another (with
    /// data sieving, as `read_at`); bytes past the end of file read as zeros.
    pub fn read_list(&self, ext: &[(u64, u64)], buf: &mut [u8]) -> Result<()> {
        check_list(ext, buf.len())?;
        read_extents(&self.f, ext, buf, self.sieve_bytes)
    }

    /// Starts an independent write of file extents; the bytes are `buf`'s.
    pub fn iwrite_list(&self, ext: Vec<(u64, u64)>, buf: Vec<u8>) -> Result<Request> {
        check_list(&ext, buf.len())?;
        Ok(self.submit(Job::Write(ext, buf)))
    }

    /// Starts an independent read of file extents; `wait` returns their bytes.
    pub fn iread_list(&self, ext: Vec<(u64, u64)>) -> Result<Request> {
        let len = check_list(&ext, usize::MAX)?;
        Ok(self.submit(Job::Read(ext, len)))
    }

    /// The striping of the file: (stripe size in bytes, data servers).
    pub fn striping(&self) -> (u64, usize) {
        let l = self.f.layout();
        (l.stripe_size_bytes as u64, l.servers.len())
    }

    /// Reads at the individual file pointer and moves it.
    pub fn read(&mut self, buf: &mut [u8]) -> Result<()> {
        self.read_at(self.pointer, buf)?;
        self.pointer += buf.len() as u64 / self.view.etype_size();
        Ok(())
    }

    pub fn seek(&mut self, etypes: u64) {
        self.pointer = etypes;
    }

    pub fn set_size(&self, size: u64) -> Result<()> {
        self.wait_io()?;
        Ok(self.f.set_len(size)?)
    }

    pub fn preallocate(&self, size: u64) -> Result<()> {
        self.wait_io()?;
        Ok(self.f.allocate(0, size, false)?)
    }

    pub fn size(&self) -> Result<u64> {
        Ok(self.f.attr()?.size)
    }

    /// Makes every write of this handle durable.
    pub fn sync(&self) -> Result<()> {
        self.wait_io()?;
        Ok(self.f.fsync()?)
    }

    pub fn close(self) -> Result<()> {
        self.wait_io()?;
        drop(self.io.lock().unwrap_or_else(|p| p.into_inner()).take());
        match Arc::try_unwrap(self.f) {
            Ok(f) => Ok(f.close()?),
            Err(_) => Err(IoError::Usage(
                "the file is still in use by a request".into(),
            )),
        }
    }

    // ---- collective ----

    /// Collective open (MPI_File_open on a communicator): every rank of `comm` calls it
    /// with the same path and mode. With `create`, rank 0 creates the file first (the
    /// striping hints apply) and the others open it after, so that no two ranks race to
    /// create; every rank gets an error if any rank's open failed.
    pub fn open_all(
        comm: &dyn Communicator,
        client: &Client,
        path: &str,
        mode: Mode,
        hints: &Hints,
    ) -> Result<File> {
        let first = if comm.rank() == 0 || !mode.create {
            Some(File::open(client, path, mode, hints))
        } else {
            None
        };
        let created = first.as_ref().map_or(Ok(()), |r| match r {
            Ok(_) => Ok(()),
            Err(e) => Err(e.same()),
        });
        if mode.create {
            // The others wait for rank 0's create (and learn whether it worked).
            agree(comm, created, "create")?;
        }
        let f = match first {
            Some(f) => f,
            None => File::open(
                client,
                path,
                Mode {
                    create: false,
                    exclusive: false,
                    ..mode
                },
                hints,
            ),
        };
        let outcome = f.as_ref().map(|_| ()).map_err(IoError::same);
        match (agree(comm, outcome, "open"), f) {
            (Ok(()), Ok(f)) => Ok(f),
            (_, Err(e)) => Err(e),
            (Err(e), Ok(f)) => {
                let _ = f.close();
                Err(e)
            }
        }
    }

    /// Collective resize (MPI_File_set_size): every rank of `comm` calls it with the same
    /// size; one rank changes the size once every rank has called (so that no rank's
    /// earlier I/O races with a truncation), and all return when it has, with its outcome.
    ///
    /// Every rank's writes so far reach the servers first (a write still behind could
    /// otherwise land past the new end after the cut), and every rank's handle learns
    /// the new size after (a rank that wrote further would otherwise still report its
    /// own end).
    pub fn set_size_all(&self, comm: &dyn Communicator, size: u64) -> Result<()> {
        let flushed = self.wait_io().and_then(|()| Ok(self.f.flush()?));
        agree(comm, flushed, "resize")?;
        let r = if comm.rank() == 0 {
            self.f.set_len(size).map_err(IoError::from)
        } else {
            Ok(())
        };
        agree(comm, r, "resize")?;
        if comm.rank() != 0 {
            self.f.attr()?;
        }
        Ok(())
    }

    /// Aggregators of a collective call: `cb_nodes`, else one per data server of the
    /// file, at most the communicator's size.
    fn aggregators(&self, comm: &dyn Communicator) -> usize {
        let servers = self.f.layout().servers.len() as u64;
        (self.cb_nodes.unwrap_or(servers).max(1) as usize).min(comm.size())
    }

    /// Collective write: every rank of `comm` calls it. With two-phase I/O (the default;
    /// `romio_cb_write=disable` writes independently) the ranks send their pieces to
    /// the aggregators, each owning a stripe-aligned part of the range all ranks write,
    /// which write them as few large requests.
    pub fn write_at_all(&self, comm: &dyn Communicator, off: u64, buf: &[u8]) -> Result<()> {
        self.check_len(buf.len())?;
        let ext = self.view.extents(off, buf.len() as u64)?;
        self.write_list_all(comm, &ext, buf)
    }

    /// Collective write of file extents `(offset, length)` in bytes (no view), their
    /// bytes one after another in `buf`: as `write_at_all`, for callers that flattened
    /// the view themselves (the Open MPI components).
    pub fn write_list_all(
        &self,
        comm: &dyn Communicator,
        ext: &[(u64, u64)],
        buf: &[u8],
    ) -> Result<()> {
        check_list(ext, buf.len())?;
        if self.cb_write == Some(false) {
            let r = write_extents(&self.f, ext, buf);
            comm.barrier();
            return r;
        }
        let spans = spans(comm, ext);
        if self.cb_write.is_none() && !worth_aggregating(&spans, AGGREGATE_WRITES_BELOW_BYTES) {
            // Automatic: aggregation would only copy every byte once more. Each rank
            // reports its own outcome (MPI lets a collective call's error codes differ
            // between ranks): one collective per call, not two, matters where ranks
            // spin in MPI's collectives on the cores the client needs.
            return write_extents(&self.f, ext, buf);
        }
        let domains = self.domains(comm, &spans);
        // Pieces for each aggregator: (offset, len) then the bytes; each message sized
        // first, so that it is filled without growing (no copies, no fresh pages twice).
        let mut need = vec![0usize; comm.size()];
        for_each_piece(ext, &domains, |a, _, _, n| need[a] += 16 + n);
        let mut send: Vec<Vec<u8>> = need.into_iter().map(Vec::with_capacity).collect();
        for_each_piece(ext, &domains, |a, fo, at, n| {
            let m = &mut send[a];
            m.extend_from_slice(&fo.to_le_bytes());
            m.extend_from_slice(&(n as u64).to_le_bytes());
            m.extend_from_slice(&buf[at..at + n]);
        });
        let got = comm.alltoallv(send);
        // Aggregator: lay the pieces out in file order, later ranks over earlier ones,
        // and write each contiguous run once.
        let mut pieces: Vec<(u64, &[u8])> = Vec::new();
        for m in &got {
            let mut i = 0;
            while i < m.len() {
                let fo = u64::from_le_bytes(m[i..i + 8].try_into().expect("8 bytes"));
                let n = u64::from_le_bytes(m[i + 8..i + 16].try_into().expect("8 bytes")) as usize;
                pieces.push((fo, &m[i + 16..i + 16 + n]));
                i += 16 + n;
            }
        }
        // Stable: of pieces at the same offset, the later rank's stays on top.
        pieces.sort_by_key(|p| p.0);
        let mut result = Ok(());
        // Each contiguous run is sized before it is filled with its pieces, in order.
        let ranges: Vec<(u64, u64)> = pieces.iter().map(|p| (p.0, p.1.len() as u64)).collect();
        let mut next = pieces.iter().peekable();
        for (start, len) in merge(&ranges) {
            let mut data = Vec::with_capacity(len as usize);
            while let Some(&(fo, bytes)) = next.next_if(|p| p.0 < start + len) {
                let rel = (fo - start) as usize;
                if rel == data.len() {
                    data.extend_from_slice(bytes);
                } else {
                    // Overlapping pieces (ranks writing the same bytes): later wins.
                    if rel + bytes.len() > data.len() {
                        data.resize(rel + bytes.len(), 0);
                    }
                    data[rel..rel + bytes.len()].copy_from_slice(bytes);
                }
            }
            debug_assert_eq!(data.len() as u64, len);
            result = result.and(self.f.write_at(start, &data).map_err(IoError::from));
        }
        // The aggregators' writes go on behind the call, as independent writes do, so
        // that consecutive collective writes keep the servers busy (no drain per call).
        // What MPI promises holds: `sync` (and close) flushes them and reports any
        // failure, and a collective read first flushes every rank's writes.
        agree(comm, result, "write")
    }

    /// Collective read, the mirror of `write_at_all`: ranks send the extents they want
    /// to the aggregators, which read their domain's runs once and send the bytes back.
    pub fn read_at_all(&self, comm: &dyn Communicator, off: u64, buf: &mut [u8]) -> Result<()> {
        self.check_len(buf.len())?;
        let ext = self.view.extents(off, buf.len() as u64)?;
        self.read_list_all(comm, &ext, buf)
    }

    /// Collective read of file extents in bytes into `buf`, one after another: as
    /// `read_at_all`, for callers that flattened the view themselves.
    pub fn read_list_all(
        &self,
        comm: &dyn Communicator,
        ext: &[(u64, u64)],
        buf: &mut [u8],
    ) -> Result<()> {
        check_list(ext, buf.len())?;
        // Writes of this handle still behind (a collective write's aggregation) reach
        // the servers before any aggregator reads: every rank flushes before it sends
        // its requests, and the aggregators read only once they have all requests.
        let flushed = self.f.flush().map_err(IoError::from);
        if self.cb_read == Some(false) {
            comm.barrier();
            let r = flushed.and(read_extents(&self.f, ext, buf, self.sieve_bytes));
            comm.barrier();
            return r;
        }
        let spans = spans(comm, ext);
        if self.cb_read.is_none() && !worth_aggregating(&spans, u64::MAX) {
            // Every rank's writes reached the servers before any rank reads (the
            // gathering of the spans was the barrier), as with aggregation.
            // Each rank reports its own outcome, as for writes.
            return flushed.and(read_extents(&self.f, ext, buf, self.sieve_bytes));
        }
        let domains = self.domains(comm, &spans);
        let mut ask = vec![Vec::new(); comm.size()];
        // Where each asked piece goes in `buf`, per aggregator, in order.
        let mut dest: Vec<Vec<(usize, usize)>> = vec![Vec::new(); comm.size()];
        for_each_piece(ext, &domains, |a, fo, at, n| {
            ask[a].extend_from_slice(&fo.to_le_bytes());
            ask[a].extend_from_slice(&(n as u64).to_le_bytes());
            dest[a].push((at, n));
        });
        let asked = comm.alltoallv(ask);
        // Aggregator: read the covering runs of everything asked, answer each rank.
        let mut wanted: Vec<(u64, u64)> = Vec::new();
        for m in &asked {
            for c in m.chunks(16) {
                let fo = u64::from_le_bytes(c[..8].try_into().expect("8 bytes"));
                let n = u64::from_le_bytes(c[8..].try_into().expect("8 bytes"));
                wanted.push((fo, n));
            }
        }
        let runs = merge(&wanted);
        let mut run_data: Vec<(u64, Vec<u8>)> = runs
            .iter()
            .map(|&(s, n)| (s, vec![0u8; n as usize]))
            .collect();
        let mut result: Result<()> = flushed;
        // The runs as list reads (a request per data server), a batch at a time.
        let mut k = 0;
        while k < runs.len() {
            let mut m = k;
            let mut bytes = 0u64;
            while m < runs.len() && (m == k || bytes + runs[m].1 <= LIST_READ_BYTES) {
                bytes += runs[m].1;
                m += 1;
            }
            let mut data = vec![0u8; bytes as usize];
            match self.f.read_list(&runs[k..m], &mut data) {
                Ok(()) => {
                    let mut at = 0usize;
                    for (_, d) in &mut run_data[k..m] {
                        let n = d.len();
                        d.copy_from_slice(&data[at..at + n]);
                        at += n;
                    }
                }
                Err(e) => result = Err(e.into()),
            }
            k = m;
        }
        let answers: Vec<Vec<u8>> = asked
            .iter()
            .map(|m| {
                let mut out = Vec::new();
                for c in m.chunks(16) {
                    let fo = u64::from_le_bytes(c[..8].try_into().expect("8 bytes"));
                    let n = u64::from_le_bytes(c[8..].try_into().expect("8 bytes")) as usize;
                    let i = run_data.partition_point(|(s, _)| *s <= fo) - 1;
                    let (s, d) = &run_data[i];
                    let rel = (fo - s) as usize;
                    out.extend_from_slice(&d[rel..rel + n]);
                }
                out
            })
            .collect();
        let got = comm.alltoallv(answers);
        for (a, bytes) in got.iter().enumerate() {
            let mut i = 0;
            for &(at, n) in &dest[a] {
                buf[at..at + n].copy_from_slice(&bytes[i..i + n]);
                i += n;
            }
        }
        agree(comm, result, "read")
    }

    /// The aggregators' file domains: the range every rank touches (`spans`, one per
    /// rank), split into stripe-aligned parts, one per aggregator (rank i for domain i).
    fn domains(&self, comm: &dyn Communicator, spans: &[Span]) -> Vec<(u64, u64)> {
        let lo = spans.iter().map(|s| s.lo).min().unwrap_or(0);
        let hi = spans.iter().map(|s| s.hi).max().unwrap_or(0);
        let n = self.aggregators(comm) as u64;
        if hi <= lo {
            return vec![(0, u64::MAX)];
        }
        let s = self.stripe;
        let first = lo / s;
        let stripes = (hi - 1) / s + 1 - first;
        let per = stripes.div_ceil(n);
        (0..n)
            .map(|i| {
                let a = if i == 0 { 0 } else { (first + i * per) * s };
                let b = if i + 1 == n {
                    u64::MAX
                } else {
                    (first + (i + 1) * per) * s
                };
                (a, b)
            })
            .collect()
    }

    // ---- asynchronous ----

    fn submit(&self, job: Job) -> Request {
        let mut io = self.io.lock().unwrap_or_else(|p| p.into_inner());
        let t = io.get_or_insert_with(|| IoThread::start(self.f.clone(), self.sieve_bytes));
        let (tx, rx) = mpsc::channel();
        // A send fails only once the thread is gone, when the request reports it.
        let _ = t.jobs.send((job, tx));
        Request { rx, done: None }
    }

    /// Starts writing `buf` at view offset `off`; the I/O thread serves the file's
    /// requests in the order they were made.
    pub fn iwrite_at(&self, off: u64, buf: Vec<u8>) -> Result<Request> {
        self.check_len(buf.len())?;
        let ext = self.view.extents(off, buf.len() as u64)?;
        Ok(self.submit(Job::Write(ext, buf)))
    }

    /// Starts reading `len` bytes at view offset `off`; `wait` returns them.
    pub fn iread_at(&self, off: u64, len: usize) -> Result<Request> {
        self.check_len(len)?;
        let ext = self.view.extents(off, len as u64)?;
        Ok(self.submit(Job::Read(ext, len)))
    }

    /// At the individual file pointer, which moves at once.
    pub fn iwrite(&mut self, buf: Vec<u8>) -> Result<Request> {
        let n = buf.len() as u64 / self.view.etype_size();
        let r = self.iwrite_at(self.pointer, buf)?;
        self.pointer += n;
        Ok(r)
    }

    pub fn iread(&mut self, len: usize) -> Result<Request> {
        let r = self.iread_at(self.pointer, len)?;
        self.pointer += len as u64 / self.view.etype_size();
        Ok(r)
    }

    /// Waits for every request made so far.
    fn wait_io(&self) -> Result<()> {
        let io = self.io.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = io.as_ref() {
            let (tx, rx) = mpsc::channel();
            let _ = t.jobs.send((Job::Barrier, tx));
            drop(io);
            rx.recv()
                .map_err(|_| IoError::Usage("the I/O thread ended".into()))?
                .map(|_| ())
        } else {
            Ok(())
        }
    }
}

/// One asynchronous request.
pub struct Request {
    rx: mpsc::Receiver<Result<Vec<u8>>>,
    done: Option<Result<Vec<u8>>>,
}

impl Request {
    /// Waits for the request: the bytes read (empty for a write), or its error.
    pub fn wait(mut self) -> Result<Vec<u8>> {
        if let Some(d) = self.done.take() {
            return d;
        }
        self.rx
            .recv()
            .map_err(|_| IoError::Usage("the I/O thread ended".into()))?
    }

    /// Whether the request is complete (then `wait` returns at once).
    pub fn test(&mut self) -> bool {
        if self.done.is_none() {
            if let Ok(r) = self.rx.try_recv() {
                self.done = Some(r);
            }
        }
        self.done.is_some()
    }
}

/// Waits for all; the first error, if any, after all are done.
pub fn waitall(reqs: Vec<Request>) -> Result<Vec<Vec<u8>>> {
    let results: Vec<_> = reqs.into_iter().map(Request::wait).collect();
    results.into_iter().collect()
}

/// The index of a complete request, if one is.
pub fn testany(reqs: &mut [Request]) -> Option<usize> {
    reqs.iter_mut().position(Request::test)
}

enum Job {
    Write(Vec<(u64, u64)>, Vec<u8>),
    Read(Vec<(u64, u64)>, usize),
    Barrier,
}

struct IoThread {
    jobs: mpsc::Sender<(Job, mpsc::Sender<Result<Vec<u8>>>)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for IoThread {
    /// Ends the thread once its queue is done, and waits for it (so that its handle
    /// of the file is gone when this returns).
    fn drop(&mut self) {
        let (tx, _) = mpsc::channel();
        drop(std::mem::replace(&mut self.jobs, tx));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl IoThread {
    fn start(f: Arc<stripefs_client::File>, sieve: u64) -> IoThread {
        let (tx, rx) = mpsc::channel::<(Job, mpsc::Sender<Result<Vec<u8>>>)>();
        let thread = std::thread::Builder::new()
            .name("mpiio-io".into())
            .spawn(move || {
                for (job, reply) in rx {
                    let r = match job {
                        Job::Write(ext, buf) => write_extents(&f, &ext, &buf).map(|()| Vec::new()),
                        Job::Read(ext, len) => {
                            let mut buf = vec![0u8; len];
                            read_extents(&f, &ext, &mut buf, sieve).map(|()| buf)
                        }
                        Job::Barrier => Ok(Vec::new()),
                    };
                    let _ = reply.send(r);
                }
            })
            .expect("an I/O thread starts");
        IoThread {
            jobs: tx,
            thread: Some(thread),
        }
    }
}

/// Every rank's part of a collective call: the (lowest offset, end) of its extents, or
/// (u64::MAX, 0) for a rank with none, and how many extents and bytes; from all ranks.
fn spans(comm: &dyn Communicator, ext: &[(u64, u64)]) -> Vec<Span> {
    let lo = ext.iter().map(|e| e.0).min().unwrap_or(u64::MAX);
    let hi = ext.iter().map(|e| e.0 + e.1).max().unwrap_or(0);
    let bytes: u64 = ext.iter().map(|e| e.1).sum();
    let mut mine = Vec::with_capacity(32);
    for v in [lo, hi, ext.len() as u64, bytes] {
        mine.extend_from_slice(&v.to_le_bytes());
    }
    comm.allgather(mine)
        .iter()
        .map(|m| {
            let v = |i: usize| u64::from_le_bytes(m[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
            Span {
                lo: v(0),
                hi: v(1),
                extents: v(2),
                bytes: v(3),
            }
        })
        .collect()
}

#[derive(Clone, Copy, Debug)]
struct Span {
    lo: u64,
    hi: u64,
    extents: u64,
    bytes: u64,
}

/// Written pieces below this mean size are worth aggregating when ranks interleave;
/// above it each rank's own list I/O is faster on stripefs, whose client already
/// gathers small pieces per data server into list requests (measured: btio's
/// 2,560-byte pieces at 4 ranks write 3-6x faster independently; docs/benchmarks.md).
/// Interleaved reads are always aggregated: each rank's own reads would fetch the
/// others' bytes too (data sieving) or many small pieces, where the aggregators read
/// each byte once (btio reads on throttled disks 83 -> 139 MiB/s).
const AGGREGATE_WRITES_BELOW_BYTES: u64 = 1024;

/// ROMIO's automatic choice, with stripefs's threshold: aggregate (two-phase) only if
/// ranks' parts interleave in the file and their pieces are smaller than `below`.
fn worth_aggregating(spans: &[Span], below: u64) -> bool {
    let mut s: Vec<(u64, u64)> = spans
        .iter()
        .filter(|s| s.lo < s.hi)
        .map(|s| (s.lo, s.hi))
        .collect();
    s.sort_unstable();
    let interleaved = s.windows(2).any(|w| w[1].0 < w[0].1);
    let extents: u64 = spans.iter().map(|s| s.extents).sum();
    let bytes: u64 = spans.iter().map(|s| s.bytes).sum();
    interleaved && extents > 0 && bytes / extents < below
}

/// Checks that extents are well formed (no offset + length past 2^64) and, unless
/// `len` is `usize::MAX`, add up to `len` bytes; their total.
fn check_list(ext: &[(u64, u64)], len: usize) -> Result<usize> {
    let mut total = 0u64;
    for &(o, n) in ext {
        if o.checked_add(n).is_none() {
            return Err(IoError::Usage(format!(
                "extent at {o} of {n} bytes passes 2^64"
            )));
        }
        total = total
            .checked_add(n)
            .ok_or_else(|| IoError::Usage("extents add up past 2^64 bytes".into()))?;
    }
    let total = usize::try_from(total)
        .map_err(|_| IoError::Usage(format!("extents of {total} bytes do not fit memory")))?;
    if len != usize::MAX && total != len {
        return Err(IoError::Usage(format!(
            "extents of {total} bytes for a buffer of {len} bytes"
        )));
    }
    Ok(total)
}

fn write_extents(f: &stripefs_client::File, ext: &[(u64, u64)], buf: &[u8]) -> Result<()> {
    let mut at = 0usize;
    for &(fo, len) in ext {
        f.write_at(fo, &buf[at..at + len as usize])?;
        at += len as usize;
    }
    Ok(())
}

/// Most bytes of spans one list read fetches at once.
const LIST_READ_BYTES: u64 = 64 << 20;

/// Reads every extent into `buf` in order. Extents close together (the span at most
/// `sieve` bytes and at most twice the data) are read as one span (data sieving); the
/// spans go out as list reads (one request per data server for many spans), not a
/// request each.
fn read_extents(
    f: &stripefs_client::File,
    ext: &[(u64, u64)],
    buf: &mut [u8],
    sieve: u64,
) -> Result<()> {
    if let [(offset, len)] = ext {
        // One run: a plain read, which the client's readahead follows (consecutive
        // calls of a rank stream from every server at once instead of asking one
        // server per call, which ranks in step would all ask at the same time).
        let len = *len as usize;
        let mut got = 0;
        while got < len {
            let n = f.read_at(offset + got as u64, &mut buf[got..len])?;
            if n == 0 {
                break;
            }
            got += n;
        }
        buf[got..len].fill(0);
        return Ok(());
    }
    // (span start, span length, extents i..j it covers)
    let mut spans: Vec<(u64, u64, usize, usize)> = Vec::new();
    let mut i = 0;
    while i < ext.len() {
        // The longest run of extents from i, in increasing order, worth one read.
        let start = ext[i].0;
        let (mut j, mut data, mut end) = (i, 0u64, start);
        while j < ext.len()
            && ext[j].0 >= end
            && ext[j].0 + ext[j].1 - start <= sieve.max(ext[i].1)
            && (j == i || (ext[j].0 + ext[j].1 - start) <= 2 * (data + ext[j].1))
        {
            data += ext[j].1;
            end = ext[j].0 + ext[j].1;
            j += 1;
        }
        spans.push((start, end - start, i, j));
        i = j;
    }
    let mut at = 0usize;
    let mut k = 0;
    while k < spans.len() {
        // A batch of spans worth one list read.
        let mut bytes = 0u64;
        let mut m = k;
        while m < spans.len() && (m == k || bytes + spans[m].1 <= LIST_READ_BYTES) {
            bytes += spans[m].1;
            m += 1;
        }
        let list: Vec<(u64, u64)> = spans[k..m].iter().map(|s| (s.0, s.1)).collect();
        let mut data = vec![0u8; bytes as usize];
        f.read_list(&list, &mut data)?;
        let mut base = 0usize;
        for &(start, len, i, j) in &spans[k..m] {
            for &(fo, n) in &ext[i..j] {
                let rel = base + (fo - start) as usize;
                buf[at..at + n as usize].copy_from_slice(&data[rel..rel + n as usize]);
                at += n as usize;
            }
            base += len as usize;
        }
        k = m;
    }
    Ok(())
}

/// Every rank learns whether all ranks' parts of a collective call succeeded: this
/// rank's own error, else an error of the first failing rank's code (so that every
/// rank reports the same class: a missing file is `NotFound` on every rank), naming it.
fn agree(comm: &dyn Communicator, result: Result<()>, what: &str) -> Result<()> {
    let mine: u32 = match &result {
        Ok(()) => 0,
        Err(e) => e.code().map_or(u32::MAX, |c| c as u32),
    };
    let all = comm.allgather(mine.to_le_bytes().to_vec());
    result?;
    let failed = all.iter().enumerate().find_map(|(r, v)| {
        let c = u32::from_le_bytes(v.get(..4)?.try_into().ok()?);
        (c != 0).then_some((r, c))
    });
    if let Some((rank, c)) = failed {
        let code = ErrorCode::from_u32(c).unwrap_or(ErrorCode::Io);
        return Err(IoError::Fs(WireError::new(
            code,
            format!(
                "rank {rank}'s part of the collective {what} failed: {}",
                code.text()
            ),
        )));
    }
    Ok(())
}

/// Cuts the extents `ext` (laid out one after another in the caller's buffer) at the
/// aggregators' domain boundaries: `f(aggregator, file offset, buffer offset, length)`
/// for each piece, in order.
fn for_each_piece(
    ext: &[(u64, u64)],
    domains: &[(u64, u64)],
    mut f: impl FnMut(usize, u64, usize, usize),
) {
    let mut at = 0usize;
    for &(fo, len) in ext {
        let mut done = 0;
        while done < len {
            let (a, dom_end) = owner(domains, fo + done);
            let n = (len - done).min(dom_end - (fo + done));
            f(a, fo + done, at + done as usize, n as usize);
            done += n;
        }
        at += len as usize;
    }
}

/// The aggregator owning file offset `at`, and its domain's end.
fn owner(domains: &[(u64, u64)], at: u64) -> (usize, u64) {
    let i = domains.partition_point(|d| d.0 <= at) - 1;
    (i, domains[i].1)
}

/// Sorted, merged (offset, len) runs of possibly overlapping ranges.
fn merge(ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = ranges.iter().copied().filter(|r| r.1 > 0).collect();
    v.sort();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (s, n) in v {
        match out.last_mut() {
            Some(last) if last.0 + last.1 >= s => {
                let end = (last.0 + last.1).max(s + n);
                last.1 = end - last.0;
            }
            _ => out.push((s, n)),
        }
    }
    out
}

#[cfg(test)]
mod choice_tests {
    use super::*;

    fn span(lo: u64, hi: u64, extents: u64, bytes: u64) -> Span {
        Span {
            lo,
            hi,
            extents,
            bytes,
        }
    }

    #[test]
    fn ranks_apart_are_never_aggregated() {
        let s = [
            span(0, 100, 10, 100),
            span(100, 200, 10, 100),
            span(u64::MAX, 0, 0, 0),
        ];
        assert!(!worth_aggregating(&s, u64::MAX));
    }

    #[test]
    fn interleaved_ranks_are_aggregated_below_the_piece_size() {
        // Two ranks taking every other 256-byte piece of [0, 4096).
        let small = [span(0, 3840, 8, 2048), span(256, 4096, 8, 2048)];
        assert!(worth_aggregating(&small, 1024));
        assert!(!worth_aggregating(&small, 256));
        // Pieces of 2,560 bytes (btio's rows at grid 64 per 2 x 2 ranks) are written
        // independently, read aggregated.
        let rows = [span(0, 10_240, 2, 5120), span(2560, 12_800, 2, 5120)];
        assert!(!worth_aggregating(&rows, AGGREGATE_WRITES_BELOW_BYTES));
        assert!(worth_aggregating(&rows, u64::MAX));
    }
}
