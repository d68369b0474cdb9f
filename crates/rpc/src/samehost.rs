//! The same-host transport: what a client and a data server on one host exchange beside
//! TCP (docs/protocol.md "Short-circuit socket"), as traits with two implementations:
//! the Unix socket with real descriptors and kernel pipes ([`SocketDial`], over
//! [`crate::local`]), and the simulator's in-process one, which hands over the server's
//! in-memory files and an in-memory pipe. The client's short-circuit reads, pipe writes
//! and direct writes and the server's handling of them are the same code over either.

use crate::local::{self, Seqpacket};
use crate::Secret;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use stripefs_sys::storage::{FsFile, ObjectFile};
use stripefs_wire::{ErrorCode, Request, Response, WireError};

/// What travels beside a same-host message.
pub enum Attached {
    None,
    /// Files: an object's data files and sidecars (`LocalFiles`), or a grant's data
    /// files and its fence (`Granted`).
    Files(Vec<Arc<dyn ObjectFile>>),
    /// The read end of the connection's pipe (`LocalPipe`).
    Pipe(Box<dyn PipeIn>),
}

impl Attached {
    /// The files, if any came.
    pub fn files(self) -> Vec<Arc<dyn ObjectFile>> {
        match self {
            Attached::Files(f) => f,
            _ => Vec::new(),
        }
    }
}

/// The server's end of a connection's pipe.
pub trait PipeIn: Send {
    /// Fills `buf`, waiting a bounded time for each part.
    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()>;

    /// Takes `len` bytes out and drops them (after a write that failed part-way, so that
    /// the next write starts at its own first byte).
    fn drain(&mut self, mut len: usize) -> io::Result<()> {
        let mut buf = vec![0u8; len.min(64 << 10)];
        while len > 0 {
            let n = len.min(buf.len());
            self.read_exact(&mut buf[..n])?;
            len -= n;
        }
        Ok(())
    }

    /// Moves `len` bytes into `file` at `offset`; on an error, also how many bytes left
    /// the pipe. By default through a buffer; a kernel pipe moves them with `splice`
    /// into a file with a descriptor, never through this process's memory.
    fn splice_into(
        &mut self,
        file: &dyn ObjectFile,
        offset: u64,
        len: usize,
    ) -> Result<(), (usize, io::Error)> {
        buffered_splice(self, file, offset, len)
    }

    /// The pipe's descriptor, for a transport that passes real descriptors.
    fn borrowed_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
}

/// [`PipeIn::splice_into`] through a buffer: `len` bytes read out, then written.
fn buffered_splice<P: PipeIn + ?Sized>(
    pipe: &mut P,
    file: &dyn ObjectFile,
    offset: u64,
    len: usize,
) -> Result<(), (usize, io::Error)> {
    let mut buf = vec![0u8; len];
    pipe.read_exact(&mut buf).map_err(|e| (0, e))?;
    file.write_at(&buf, offset).map_err(|e| (len, e))
}

/// The client's end of a connection's pipe.
pub trait PipeOut: Send {
    /// Puts all of `data` in; the caller leaves `data` unchanged until the server has
    /// answered the write it belongs to (a kernel pipe holds the caller's pages by
    /// reference, `vmsplice`).
    fn put(&mut self, data: &[u8]) -> io::Result<()>;
    /// Bytes the pipe holds.
    fn capacity(&self) -> usize;
}

/// One connection of a client to a data server's same-host endpoint.
pub trait LocalLink: Send {
    /// Sends `req` with `attach` and waits for the answer, which is a reply its row
    /// allows, and what came with it. An `Err` is the connection's: it is done.
    fn call(
        &mut self,
        req: Request,
        attach: Attached,
    ) -> io::Result<(Result<Response, WireError>, Attached)>;

    /// A new pipe: the end the client writes, and the end to attach to `LocalPipe`.
    fn pipe(&mut self) -> io::Result<(Box<dyn PipeOut>, Attached)>;

    /// Ends the connection at once: a server waiting on it sees the end.
    fn shutdown(&self);

    /// A probe of whether this connection is still up. Files handed out on it stay
    /// valid only while it is: a server that restarted (its connections all ended) may
    /// have lost or replaced them (a power cut before a name was synced, a new disk), and
    /// a descriptor still shows the old file.
    fn liveness(&self) -> Arc<dyn Liveness>;
}

/// See [`LocalLink::liveness`]. Cheap: asked before every use of cached files.
pub trait Liveness: Send + Sync {
    fn alive(&self) -> bool;
}

/// Makes connections to one data server's same-host endpoint.
pub trait LocalDial: Send + Sync {
    fn dial(&self) -> io::Result<Box<dyn LocalLink>>;
    /// The endpoint, for logs.
    fn describe(&self) -> String;
}

/// The real endpoint: a data server's Unix socket.
pub struct SocketDial {
    pub path: PathBuf,
    pub secret: Secret,
    pub timeout: Duration,
}

impl LocalDial for SocketDial {
    fn dial(&self) -> io::Result<Box<dyn LocalLink>> {
        let sock = Seqpacket::connect(&self.path, self.timeout)?;
        local::client_handshake(&sock, &self.secret)?;
        Ok(Box::new(SocketLink {
            sock: Arc::new(sock),
            next_id: 3,
            timeout: self.timeout,
        }))
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }
}

struct SocketLink {
    sock: Arc<Seqpacket>,
    next_id: u64,
    timeout: Duration,
}

impl LocalLink for SocketLink {
    fn call(
        &mut self,
        req: Request,
        attach: Attached,
    ) -> io::Result<(Result<Response, WireError>, Attached)> {
        let fds: Vec<BorrowedFd<'_>> = match &attach {
            Attached::None => Vec::new(),
            Attached::Files(f) => f
                .iter()
                .map(|f| f.borrowed_fd())
                .collect::<Option<_>>()
                .ok_or_else(|| {
                    io::Error::new(io::ErrorKind::Unsupported, "a file without a descriptor")
                })?,
            Attached::Pipe(p) => vec![p.borrowed_fd().ok_or_else(|| {
                io::Error::new(io::ErrorKind::Unsupported, "a pipe without a descriptor")
            })?],
        };
        let (id, op) = (self.next_id, req.opcode());
        self.next_id += 1;
        local::send_request(&self.sock, id, req, &fds)?;
        // Sent: the server holds its own copies of the descriptors.
        drop(attach);
        let (result, got) = local::recv_answer(&self.sock, id, op)?;
        let files = match &result {
            Ok(Response::LocalFiles { .. } | Response::Granted { .. }) => Attached::Files(
                got.into_iter()
                    .map(|fd| {
                        Arc::new(FsFile::from(std::fs::File::from(fd))) as Arc<dyn ObjectFile>
                    })
                    .collect(),
            ),
            _ => Attached::None,
        };
        Ok((result, files))
    }

    fn pipe(&mut self) -> io::Result<(Box<dyn PipeOut>, Attached)> {
        let (r, w, cap) = local::write_pipe()?;
        // The client keeps a reader of its own: with one always open, a write into the
        // pipe never raises SIGPIPE.
        let keep = crate::fdplace::place(r.try_clone()?);
        let out = KernelPipeOut {
            w,
            _r: keep,
            cap,
            timeout: self.timeout,
        };
        let end = KernelPipeIn::new(r, self.timeout);
        Ok((Box::new(out), Attached::Pipe(Box::new(end))))
    }

    fn shutdown(&self) {
        self.sock.shutdown();
    }

    fn liveness(&self) -> Arc<dyn Liveness> {
        Arc::new(SocketLive(Arc::downgrade(&self.sock)))
    }
}

/// A socket connection is up while its link exists and the server has not closed it
/// (the server never speaks unasked, so anything to read, or a hang-up, is its end).
struct SocketLive(std::sync::Weak<Seqpacket>);

impl Liveness for SocketLive {
    fn alive(&self) -> bool {
        self.0.upgrade().is_some_and(|s| !s.ended())
    }
}

/// The read end of a kernel pipe.
pub struct KernelPipeIn {
    fd: OwnedFd,
    timeout: Duration,
}

impl KernelPipeIn {
    /// `timeout`: how long each part of a transfer may take to arrive.
    pub fn new(fd: OwnedFd, timeout: Duration) -> KernelPipeIn {
        KernelPipeIn { fd, timeout }
    }
}

impl PipeIn for KernelPipeIn {
    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        local::read_pipe(&self.fd, buf, self.timeout)
    }

    fn drain(&mut self, len: usize) -> io::Result<()> {
        local::drain(&self.fd, len, self.timeout)
    }

    fn splice_into(
        &mut self,
        file: &dyn ObjectFile,
        offset: u64,
        len: usize,
    ) -> Result<(), (usize, io::Error)> {
        match file.borrowed_fd() {
            Some(fd) => local::splice_into(&self.fd, fd, offset, len, self.timeout),
            None => buffered_splice(self, file, offset, len),
        }
    }

    fn borrowed_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.fd.as_fd())
    }
}

struct KernelPipeOut {
    w: OwnedFd,
    _r: OwnedFd,
    cap: usize,
    timeout: Duration,
}

impl PipeOut for KernelPipeOut {
    fn put(&mut self, data: &[u8]) -> io::Result<()> {
        local::vmsplice_all(&self.w, data, self.timeout)
    }

    fn capacity(&self) -> usize {
        self.cap
    }
}

/// Whether an error answer means the server takes no requests of that kind at all (the
/// client stops asking), rather than a failure of this one.
pub fn refuses_for_good(e: &WireError) -> bool {
    e.code == ErrorCode::Unsupported
}
