//! The data server's end of the short-circuit socket (issue 14; the messages are in
//! `stripefs_rpc::local`, the rules in docs/objects.md "Reads"): a client on the same
//! host that proves it knows the cluster secret gets read-only descriptors of an
//! object's data files and sidecars, one pair per target, and reads them itself.
//!
//! The server hands out descriptors only; it never sees the bytes the client then reads.
//! It refuses (for good) when its targets are throttled, since an emulated disk rate
//! can only be kept by the server, and when its store has no real files.

use crate::service::LocalWriteError;
use crate::DataService;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use stripefs_rpc::local::{self, Listener, Seqpacket};
use stripefs_rpc::Secret;
use stripefs_wire::InodeId;

/// Most short-circuit connections served at once; more are closed at accept.
pub const MAX_LOCAL_CONNECTIONS: usize = 1024;
/// A connection must finish its handshake within this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// An idle connection is closed after this (the client reconnects on its next open).
const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
const ACCEPT_POLL: Duration = Duration::from_millis(200);
/// A short-circuit write's bytes must keep arriving in the pipe within this.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// A short-circuit write message of either kind.
enum Write {
    One(local::LocalWrite),
    List(local::LocalWriteList),
}

/// The descriptors of one object, or why there are none.
pub enum LocalFiles {
    /// Flags per target (`local::HAS_DATA`, `local::HAS_SIDECAR`) and the files, in order.
    Files(Vec<u8>, Vec<std::fs::File>),
    Refused(String),
    Failed(String),
}

impl DataService {
    /// Read-only descriptors of `fid`'s files on every target, for a short-circuit
    /// client. A target without the object gets no descriptors (it reads as holes now;
    /// the client does not keep such an answer).
    pub fn local_files(&self, fid: InodeId) -> LocalFiles {
        if self.throttled() {
            return LocalFiles::Refused(format!(
                "data server {}: its targets are throttled (emulated disks), so reads go through the server",
                self.id.0
            ));
        }
        if self.targets.len() > local::MAX_TARGETS {
            return LocalFiles::Refused(format!(
                "data server {} has {} targets; short-circuit reads handle at most {}",
                self.id.0,
                self.targets.len(),
                local::MAX_TARGETS
            ));
        }
        let mut flags = Vec::with_capacity(self.targets.len());
        let mut files = Vec::new();
        for t in 0..self.targets.len() {
            let (data, crc) = self.object_paths(t, fid);
            let mut f = 0;
            for (path, bit) in [(data, local::HAS_DATA), (crc, local::HAS_SIDECAR)] {
                match self.store.open_read_only(&path) {
                    Ok(Some(file)) => {
                        f |= bit;
                        files.push(file);
                    }
                    Ok(None) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
                        return LocalFiles::Refused(e.to_string())
                    }
                    Err(e) => {
                        return LocalFiles::Failed(format!(
                            "data server {}: cannot open {}: {e}",
                            self.id.0,
                            path.display()
                        ))
                    }
                }
            }
            flags.push(f);
        }
        self.stats.note_local_open();
        LocalFiles::Files(flags, files)
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
    ) -> std::io::Result<LocalServer> {
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
                if let Err(e) = serve_conn(&c, &svc, &sec, &st) {
                    if e.kind() != std::io::ErrorKind::UnexpectedEof {
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

fn serve_conn(
    c: &Seqpacket,
    service: &DataService,
    secret: &Secret,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    c.set_timeout(HANDSHAKE_TIMEOUT)?;
    local::server_handshake(c, secret)?;
    c.set_timeout(IDLE_TIMEOUT)?;
    let mut pipe: Option<std::os::fd::OwnedFd> = None;
    // Write lists are read out of the pipe into this, reused for the connection's life
    // (at most `MAX_LOCAL_WRITE`, 2 MiB, and only on connections that send lists).
    let mut buf = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let (m, mut fds) = c.recv()?;
        service.stats.note_local_message();
        match m.first() {
            Some(&local::OP_PIPE) => {
                if m.len() != 1 || fds.len() != 1 {
                    let _ = c.send(
                        &local::verdict(local::FAILED, "a pipe message carries one descriptor"),
                        &[],
                    );
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "bad pipe message",
                    ));
                }
                pipe = fds.pop();
                c.send(&local::verdict(local::OK, ""), &[])?;
                continue;
            }
            Some(&op @ (local::OP_WRITE | local::OP_WRITE_LIST)) => {
                // A malformed message leaves the pipe's contents unknown: the connection
                // ends (the client starts a new one, with a new pipe).
                let parsed = if op == local::OP_WRITE {
                    local::parse_write(&m).map(Write::One)
                } else {
                    local::parse_write_list(&m).map(Write::List)
                };
                let w = match parsed {
                    Ok(w) => w,
                    Err(e) => {
                        let _ = c.send(&local::verdict(local::FAILED, &e.to_string()), &[]);
                        return Err(e);
                    }
                };
                let Some(p) = pipe.as_ref() else {
                    let _ = c.send(
                        &local::verdict(local::FAILED, "a write before its pipe"),
                        &[],
                    );
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "write without a pipe",
                    ));
                };
                let done = match &w {
                    Write::One(w) => service.local_write(w, p, WRITE_TIMEOUT),
                    Write::List(w) => service.local_write_list(w, p, WRITE_TIMEOUT, &mut buf),
                };
                match done {
                    Ok(boot) => c.send(&local::written_answer(boot), &[])?,
                    Err(LocalWriteError::Broken(why)) => {
                        let _ = c.send(&local::verdict(local::FAILED, &why), &[]);
                        return Err(std::io::Error::other(format!("short-circuit pipe: {why}")));
                    }
                    Err(e) => c.send(&refusal(service, e, THROTTLED), &[])?,
                }
                continue;
            }
            Some(&local::OP_DIRECT) => {
                direct(c, service, &m)?;
                continue;
            }
            _ => {}
        }
        let fid = match local::parse_open(&m) {
            Ok(f) => f,
            Err(e) => {
                let _ = c.send(&local::verdict(local::FAILED, &e.to_string()), &[]);
                return Err(e);
            }
        };
        match service.local_files(InodeId(fid)) {
            LocalFiles::Files(flags, files) => {
                let fds: Vec<_> = files.iter().map(|f| f.as_raw_fd()).collect();
                c.send(&local::objects_answer(&flags), &fds)?;
            }
            LocalFiles::Refused(why) => c.send(&local::verdict(local::REFUSED, &why), &[])?,
            LocalFiles::Failed(why) => c.send(&local::verdict(local::FAILED, &why), &[])?,
        }
    }
    Ok(())
}

/// Serves one direct write (docs/protocol.md "Short-circuit socket"): grants the range,
/// waits (at most [`WRITE_TIMEOUT`]) for the client to write it and send its CRCs, and
/// stores them. A malformed message, a silent client or a broken connection ends the
/// connection; the grant's blocks then stay holes, locked until the client has closed
/// the grant's descriptors (fence.rs).
fn direct(c: &Seqpacket, service: &DataService, m: &[u8]) -> std::io::Result<()> {
    let w = match local::parse_direct(m) {
        Ok(w) => w,
        Err(e) => {
            let _ = c.send(&local::verdict(local::FAILED, &e.to_string()), &[]);
            return Err(e);
        }
    };
    let grant = match service.direct_begin(&w) {
        Ok(g) => g,
        Err(e) => return c.send(&refusal(service, e, NO_DIRECT), &[]),
    };
    let fds: Vec<_> = grant.files.iter().map(|f| f.as_raw_fd()).collect();
    let answered = c
        .send(&local::grant_answer(&grant.pieces()), &fds)
        .and_then(|()| c.set_timeout(WRITE_TIMEOUT))
        .and_then(|()| c.recv())
        .and_then(|(done, _)| {
            c.set_timeout(IDLE_TIMEOUT)?;
            local::parse_direct_done(&done, grant.blocks()).inspect_err(|e| {
                let _ = c.send(&local::verdict(local::FAILED, &e.to_string()), &[]);
            })
        });
    let crcs = match answered {
        Ok(crcs) => crcs,
        Err(e) => {
            // A client still writing sees the end at once (and closes the descriptors
            // the wait below is for) rather than wait for an answer.
            c.shutdown();
            service.direct_abandon(grant);
            return Err(e);
        }
    };
    match service.direct_done(grant, crcs.as_deref()) {
        Ok(boot) => c.send(&local::written_answer(boot), &[]),
        Err(e) => c.send(&refusal(service, e, NO_DIRECT), &[]),
    }
}

/// Why a server refuses short-circuit writes through its pipe, and direct writes.
const THROTTLED: &str = "its targets are throttled (emulated disks)";
const NO_DIRECT: &str =
    "its targets are throttled (emulated disks) or their file system takes no O_DIRECT";

/// The answer to a short-circuit write the server did not do; `why_refused` says why it
/// takes none of that kind.
fn refusal(service: &DataService, e: LocalWriteError, why_refused: &str) -> Vec<u8> {
    match e {
        LocalWriteError::Refused => local::verdict(
            local::REFUSED,
            &format!(
                "data server {}: {why_refused}, so writes go through the server",
                service.id.0
            ),
        ),
        LocalWriteError::Failed(e) => local::verdict(local::FAILED, &e.to_string()),
        LocalWriteError::Broken(why) => local::verdict(local::FAILED, &why),
    }
}
