//! The data server's end of the same-host socket (issue 14; the frames are in
//! `stripefs_rpc::local`, the transport in `stripefs_rpc::samehost`, the rules in
//! docs/objects.md "Reads" and docs/protocol.md "Short-circuit socket").
//!
//! A [`LocalSession`] is one connection's state (its pipe, its direct-write grant) and
//! serves the operation table's [`SameHostOp`] rows; [`LocalServer`] runs sessions over
//! the Unix socket, and the simulator runs them in process. A client on the same host
//! that proved it knows the cluster secret gets read-only descriptors of an object's
//! data files and sidecars and reads them itself, writes whole blocks through a pipe,
//! and writes hole blocks into the files itself (direct writes). The server refuses
//! (for good, `Unsupported`) when its targets are throttled, since an emulated disk rate
//! can only be kept by the server.

use crate::service::{DirectGrant, DirectWrite, LocalWrite, LocalWriteError};
use crate::DataService;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use stripefs_rpc::local::{self, Listener, Seqpacket};
use stripefs_rpc::samehost::{Attached, KernelPipeIn, PipeIn};
use stripefs_rpc::Secret;
use stripefs_sys::storage::ObjectFile;
use stripefs_wire::{
    ErrorCode, InodeId, Opcode, Response, SameHostOp, WireError, HAS_DATA, HAS_SIDECAR,
    MAX_LOCAL_TARGETS,
};

/// Most short-circuit connections served at once; more are closed at accept.
pub const MAX_LOCAL_CONNECTIONS: usize = 1024;
/// A connection must finish its handshake within this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// An idle connection is closed after this (the client reconnects on its next open).
const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
const ACCEPT_POLL: Duration = Duration::from_millis(200);
/// A short-circuit write's bytes must keep arriving in the pipe within this, and a
/// granted direct write's end must arrive within it.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a server refuses short-circuit writes through its pipe, and direct writes.
const THROTTLED: &str = "its targets are throttled (emulated disks)";
const NO_DIRECT: &str =
    "its targets are throttled (emulated disks) or their file system takes no O_DIRECT";

/// Handles of an object's files, handed to a same-host client.
pub type Handles = Vec<Arc<dyn ObjectFile>>;

impl DataService {
    /// Read-only handles of `fid`'s files on every target, for a short-circuit client,
    /// and per target which of them there are. A target without the object gets none (it
    /// reads as holes now; the client does not keep such an answer). `Unsupported` when
    /// the server hands out none at all.
    pub fn local_files(&self, fid: InodeId) -> Result<(Vec<u8>, Handles), WireError> {
        if self.throttled() {
            return Err(WireError::new(
                ErrorCode::Unsupported,
                format!(
                    "data server {}: its targets are throttled (emulated disks), so reads go through the server",
                    self.id.0
                ),
            ));
        }
        if self.targets.len() > MAX_LOCAL_TARGETS {
            return Err(WireError::new(
                ErrorCode::Unsupported,
                format!(
                    "data server {} has {} targets; short-circuit reads handle at most {MAX_LOCAL_TARGETS}",
                    self.id.0,
                    self.targets.len(),
                ),
            ));
        }
        let mut flags = Vec::with_capacity(self.targets.len());
        let mut files = Vec::new();
        for t in 0..self.targets.len() {
            let (data, crc) = self.object_paths(t, fid);
            let mut f = 0;
            for (path, bit) in [(data, HAS_DATA), (crc, HAS_SIDECAR)] {
                match self.store.open_read_only(&path) {
                    Ok(Some(file)) => {
                        f |= bit;
                        files.push(file);
                    }
                    Ok(None) => {}
                    Err(e) if e.kind() == io::ErrorKind::Unsupported => {
                        return Err(WireError::new(ErrorCode::Unsupported, e.to_string()))
                    }
                    Err(e) => {
                        return Err(WireError::new(
                            ErrorCode::Io,
                            format!(
                                "data server {}: cannot open {}: {e}",
                                self.id.0,
                                path.display()
                            ),
                        ))
                    }
                }
            }
            flags.push(f);
        }
        self.stats.note_local_open();
        Ok((flags, files))
    }
}

/// What a connection does after an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum After {
    Go,
    /// The connection's state is out of step (a pipe with unknown contents, a grant
    /// ended wrongly): it ends, and the client starts a new one.
    Close,
}

/// One same-host connection's state on the server.
pub struct LocalSession {
    service: Arc<DataService>,
    pipe: Option<Box<dyn PipeIn>>,
    grant: Option<DirectGrant>,
    /// Write lists are read out of the pipe into this, reused for the connection's life
    /// (at most `MAX_LOCAL_WRITE`, 2 MiB, and only on connections that send lists).
    buf: Vec<u8>,
}

fn bad(m: &str) -> WireError {
    WireError::new(ErrorCode::InvalidArgument, m.to_string())
}

impl LocalSession {
    pub fn new(service: Arc<DataService>) -> LocalSession {
        LocalSession {
            service,
            pipe: None,
            grant: None,
            buf: Vec::new(),
        }
    }

    /// Whether a direct-write grant waits for its end (the connection then gives the
    /// client [`WRITE_TIMEOUT`], not the idle time).
    pub fn granted(&self) -> bool {
        self.grant.is_some()
    }

    /// Serves one request (checked by its row) with what came beside it: the answer,
    /// what goes beside it, and whether the connection goes on.
    pub fn call(
        &mut self,
        op: SameHostOp,
        attached: Attached,
    ) -> (Result<Response, WireError>, Attached, After) {
        let svc = self.service.clone();
        svc.stats.note_local_message();
        if self.grant.is_some() && !matches!(op, SameHostOp::LocalDirectDone { .. }) {
            self.abandon();
            let e = bad("a direct write's grant is followed by its end, nothing else");
            return (Err(e), Attached::None, After::Close);
        }
        let no_pipe = || {
            (
                Err(bad("a write before its pipe")),
                Attached::None,
                After::Close,
            )
        };
        let boot = |r: Result<u64, LocalWriteError>, refused: &str| match r {
            Ok(boot_id) => (Ok(Response::Written { boot_id }), After::Go),
            Err(LocalWriteError::Broken(why)) => (
                Err(WireError::new(
                    ErrorCode::Io,
                    format!("short-circuit pipe: {why}"),
                )),
                After::Close,
            ),
            Err(e) => (Err(refusal(&svc, e, refused)), After::Go),
        };
        match op {
            SameHostOp::LocalOpen { fid } => match svc.local_files(fid) {
                Ok((flags, files)) => (
                    Ok(Response::LocalFiles { flags }),
                    Attached::Files(files),
                    After::Go,
                ),
                Err(e) => (Err(e), Attached::None, After::Go),
            },
            SameHostOp::LocalPipe {} => match attached {
                Attached::Pipe(p) => {
                    self.pipe = Some(p);
                    (Ok(Response::Done), Attached::None, After::Go)
                }
                _ => {
                    let e = bad("a pipe message carries the pipe's read end");
                    (Err(e), Attached::None, After::Close)
                }
            },
            SameHostOp::LocalWrite {
                fid,
                unit,
                offset,
                len,
                crcs,
            } => {
                let Some(pipe) = self.pipe.as_deref_mut() else {
                    return no_pipe();
                };
                let w = LocalWrite {
                    fid,
                    unit,
                    offset,
                    len,
                    crcs,
                };
                let (r, after) = boot(svc.local_write(&w, pipe), THROTTLED);
                (r, Attached::None, after)
            }
            SameHostOp::LocalWriteList {
                fid,
                unit,
                extents,
                crcs,
            } => {
                let Some(pipe) = self.pipe.as_deref_mut() else {
                    return no_pipe();
                };
                let r = svc.local_write_list(fid, unit, &extents, &crcs, pipe, &mut self.buf);
                let (r, after) = boot(r, THROTTLED);
                (r, Attached::None, after)
            }
            SameHostOp::LocalDirect {
                fid,
                unit,
                offset,
                len,
            } => {
                let w = DirectWrite {
                    fid,
                    unit,
                    offset,
                    len,
                };
                match svc.direct_begin(&w) {
                    Ok(grant) => {
                        let answer = Response::Granted {
                            pieces: grant.pieces(),
                        };
                        let files = grant.files.clone();
                        self.grant = Some(grant);
                        (Ok(answer), Attached::Files(files), After::Go)
                    }
                    Err(e) => (Err(refusal(&svc, e, NO_DIRECT)), Attached::None, After::Go),
                }
            }
            SameHostOp::LocalDirectDone { crcs } => {
                let Some(grant) = self.grant.take() else {
                    return (
                        Err(bad("a direct write's end without its grant")),
                        Attached::None,
                        After::Close,
                    );
                };
                if crcs.as_ref().is_some_and(|c| c.len() != grant.blocks()) {
                    self.grant = Some(grant);
                    self.abandon();
                    let e = bad("a direct write's end names another number of blocks");
                    return (Err(e), Attached::None, After::Close);
                }
                let (r, after) = boot(svc.direct_done(grant, crcs.as_deref()), NO_DIRECT);
                (r, Attached::None, after)
            }
        }
    }

    /// Ends a grant whose client did not say it is done: its blocks stay holes, locked
    /// until the client has let go of the grant's handles (the fence).
    fn abandon(&mut self) {
        if let Some(g) = self.grant.take() {
            self.service.direct_abandon(g);
        }
    }
}

impl Drop for LocalSession {
    fn drop(&mut self) {
        self.abandon();
    }
}

/// The answer to a short-circuit write the server did not do; `why_refused` says why it
/// takes none of that kind.
fn refusal(service: &DataService, e: LocalWriteError, why_refused: &str) -> WireError {
    match e {
        LocalWriteError::Refused => WireError::new(
            ErrorCode::Unsupported,
            format!(
                "data server {}: {why_refused}, so writes go through the server",
                service.id.0
            ),
        ),
        LocalWriteError::Failed(e) => e,
        LocalWriteError::Broken(why) => WireError::new(ErrorCode::Io, why),
    }
}

/// The running short-circuit listener; stops (and removes its socket file) on drop.
pub struct LocalServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl LocalServer {
    /// Binds `path` and serves it on a thread of its own (a thread per connection).
    pub fn start(
        service: Arc<DataService>,
        path: &Path,
        secret: Secret,
    ) -> io::Result<LocalServer> {
        let listener = Listener::bind(path)?;
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let thread = std::thread::Builder::new()
            .name("short-circuit".into())
            .spawn(move || accept_loop(listener, service, secret, st))?;
        Ok(LocalServer {
            path: path.to_path_buf(),
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn accept_loop(l: Listener, service: Arc<DataService>, secret: Secret, stop: Arc<AtomicBool>) {
    let live = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::Relaxed) {
        let c = match l.accept_timeout(ACCEPT_POLL) {
            Ok(Some(c)) => c,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!("short-circuit socket: accept failed: {e}");
                std::thread::sleep(ACCEPT_POLL);
                continue;
            }
        };
        if live.fetch_add(1, Ordering::AcqRel) >= MAX_LOCAL_CONNECTIONS {
            live.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!(
                "short-circuit socket: {MAX_LOCAL_CONNECTIONS} connections open; closing a new one"
            );
            continue;
        }
        let (svc, sec, lv, st) = (service.clone(), secret.clone(), live.clone(), stop.clone());
        let spawned = std::thread::Builder::new()
            .name("short-circuit-conn".into())
            .spawn(move || {
                if let Err(e) = serve_conn(&c, svc, &sec, &st) {
                    if e.kind() != io::ErrorKind::UnexpectedEof {
                        tracing::info!("short-circuit connection closed: {e}");
                    }
                }
                lv.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(e) = spawned {
            live.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!("short-circuit socket: cannot start a thread: {e}");
        }
    }
}

/// Serves one connection: frames in, a session's answers out. A frame that does not
/// decode ends the connection; a request that fails its row's check is answered, then
/// the connection ends (what is in its pipe is unknown). A grant left without its end
/// (the connection broke or timed out) is abandoned when the session ends.
fn serve_conn(
    c: &Seqpacket,
    service: Arc<DataService>,
    secret: &Secret,
    stop: &AtomicBool,
) -> io::Result<()> {
    c.set_timeout(HANDSHAKE_TIMEOUT)?;
    local::server_handshake(c, secret)?;
    c.set_timeout(IDLE_TIMEOUT)?;
    let mut session = LocalSession::new(service);
    while !stop.load(Ordering::Relaxed) {
        let r = match local::recv_request(c) {
            Ok(r) => r,
            Err(e) => {
                // A client still writing into a grant's files sees the end at once (and
                // lets go of the descriptors the fence waits for).
                c.shutdown();
                return Err(e);
            }
        };
        let op = match r.req.map(|v| v.into_env().req.route()) {
            Ok(stripefs_wire::Route::SameHostOp(op)) => op,
            Ok(_) => {
                let e = WireError::new(
                    ErrorCode::UnexpectedMessage,
                    format!(
                        "{} is not served on the short-circuit socket",
                        r.opcode.name()
                    ),
                );
                let _ = local::send_answer(c, r.id, r.opcode, &Err(e), &[]);
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "not a same-host request",
                ));
            }
            Err(e) => {
                let _ = local::send_answer(c, r.id, r.opcode, &Err(e.clone()), &[]);
                return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string()));
            }
        };
        let attached = match (r.opcode, r.fds.len()) {
            (Opcode::LocalPipe, 1) => {
                let fd = r.fds.into_iter().next().expect("one");
                Attached::Pipe(Box::new(KernelPipeIn::new(fd, WRITE_TIMEOUT)))
            }
            (_, 0) => Attached::None,
            (op, n) => {
                let e = WireError::new(
                    ErrorCode::InvalidArgument,
                    format!("{} carries {n} descriptors", op.name()),
                );
                let _ = local::send_answer(c, r.id, r.opcode, &Err(e), &[]);
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "unexpected descriptors",
                ));
            }
        };
        let (answer, out, after) = session.call(op, attached);
        // The files stay open until the message that passes their descriptors is sent.
        let files = out.files();
        let fds: Vec<_> = files.iter().filter_map(|f| f.borrowed_fd()).collect();
        if fds.len() != files.len() {
            let e = WireError::new(ErrorCode::Internal, "a file without a descriptor");
            let _ = local::send_answer(c, r.id, r.opcode, &Err(e), &[]);
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a file without a descriptor",
            ));
        }
        local::send_answer(c, r.id, r.opcode, &answer, &fds)?;
        drop(files);
        if after == After::Close {
            c.shutdown();
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                answer.err().map_or_else(String::new, |e| e.to_string()),
            ));
        }
        c.set_timeout(if session.granted() {
            WRITE_TIMEOUT
        } else {
            IDLE_TIMEOUT
        })?;
    }
    Ok(())
}
