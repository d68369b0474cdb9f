//! The stripefs native client library: a blocking, thread-safe API over the metadata
//! server and the data servers, used by the CLI, the FUSE adapter and the MPI-IO layer.
//!
//! Role. [`Client`] offers namespace calls by path and by inode, and [`File`] handles
//! that read and write striped data. A file range maps to one local extent per data
//! server of its layout; each extent is cut into requests of about
//! [`CHUNK_TARGET_BYTES`] aligned to stripe units (so one request hits one storage
//! target), and all requests of one call are in flight at once on a client-wide pool of
//! [`IO_WORKERS`] threads, each using a pooled connection to its server (at most
//! [`MAX_CONNS_PER_SERVER`] per server). Writes are write-behind within a per-handle
//! window; sequential reads prefetch whole request cells ahead.
//!
//! Invariants. Data handed to a caller has passed the per-block CRC32C check against the
//! checksum the data server stored at write time, so corruption anywhere between the
//! writer's memory and the reader's is reported (`Checksum`, naming server, file and
//! offset), never returned. Overlapping operations on one inode in one client happen in
//! call order. The size this client reports for a file it writes is at least the end of
//! its writes, and the metadata server learns it at `flush`, `fsync` and `close`.
//!
//! Fault model. Any server may be slow, stop, or return garbage. Every socket operation
//! has the cluster's timeout, so a dead or hung server yields an error naming its
//! address within that time, and only requests that need that server fail. Errors of
//! background writes are latched and reported by the next call on the inode, and again
//! by the next flush, fsync or close of every handle open when it failed (a call that
//! took one may have been ignored, or made through another handle).
//! The client's opens live in a session with a lease that a background thread renews
//! (`session.rs`); if the metadata server ended it anyway (a long pause, a partition, a
//! restart), the client opens a new one and reopens its files, and handles of files
//! purged meanwhile fail with `StaleHandle`. Consistency between clients is
//! close-to-open: sizes and data written by another client are seen
//! after it closes (or flushes) and this client opens (or stats).

mod abuf;
mod chunk;
mod client;
mod exec;
mod file;
mod io;
mod local;
pub mod mounts;

pub mod mountctl;
mod path;
mod pool;
pub mod posix;
mod session;
mod unsynced;

pub use abuf::IoBuf;
pub use client::{DataStatus, MetaStatus, StatFs};
pub use file::{File, OpenOptions};
pub use local::DirectReads;
pub use pool::Transport;
pub use posix::{posix_attr, posix_errno, PosixAttr};
pub use stripefs_rpc::ClusterConfig;
pub use stripefs_wire::{
    make_rdev, split_rdev, Attr, Counters, Cred, DirEntry, ErrorCode, FileType, InodeId, Layout,
    LayoutHint, ServerId, SetAttrs, SetTime, TargetStatus, WireError, XATTR_SET_ANY,
    XATTR_SET_CREATE, XATTR_SET_REPLACE,
};

use exec::Executor;
use io::InodeIo;
use pool::ServerPool;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use stripefs_wire::{op, Operation, Reply, Request, Response, MAX_DATA_BYTES, MAX_READDIR_ENTRIES};

/// Threads in the client-wide I/O worker pool.
pub const IO_WORKERS: usize = 32;
/// Connections (streams, and so requests in flight) to one data server unless the
/// cluster file says `streams`.
pub const MAX_CONNS_PER_SERVER: usize = 4;
/// Most connections to the metadata server.
pub const MAX_META_CONNS: usize = 16;
/// Most I/O jobs queued before submitting blocks.
pub const MAX_QUEUED_JOBS: usize = 4096;
/// Target size of one data request; requests are cut at multiples of the stripe unit.
pub const CHUNK_TARGET_BYTES: u64 = 1 << 20;
/// Write chunks smaller than this are gathered per data server into list writes
/// (WriteList) instead of going out one request each.
pub const GATHER_BELOW_BYTES: u64 = 128 << 10;
/// A server's gathered writes go out once they hold this many bytes ...
pub const GATHER_MAX_BYTES: u64 = 1 << 20;
/// ... or this many extents (at most `stripefs_wire::MAX_LIST_EXTENTS`).
pub const GATHER_MAX_EXTENTS: usize = 256;
/// Default write-behind window of a handle.
pub const DEFAULT_WRITE_WINDOW_BYTES: u64 = 64 << 20;
/// Largest write-behind window a handle may ask for.
pub const MAX_WRITE_WINDOW_BYTES: u64 = 1 << 30;
/// Readahead grows to this, or to two rounds of the layout if larger, ...
pub const READAHEAD_BASE_BYTES: u64 = 32 << 20;
/// ... but never beyond this.
pub const READAHEAD_MAX_BYTES: u64 = 64 << 20;
/// Entries asked for per ReadDir.
pub const READDIR_PAGE: u32 = 1024;
/// Largest file size (keeps all striping arithmetic far from overflow).
pub const MAX_FILE_BYTES: u64 = 1 << 60;
/// Stack of an I/O worker; jobs are shallow.
const WORKER_STACK_BYTES: usize = 256 << 10;

const _: () = {
    assert!(CHUNK_TARGET_BYTES <= MAX_DATA_BYTES as u64);
    assert!(READDIR_PAGE <= MAX_READDIR_ENTRIES);
    assert!(READAHEAD_BASE_BYTES <= READAHEAD_MAX_BYTES);
    assert!(DEFAULT_WRITE_WINDOW_BYTES <= MAX_WRITE_WINDOW_BYTES);
    assert!(IO_WORKERS >= MAX_CONNS_PER_SERVER);
};

/// A connection to a stripefs cluster. Cheap to clone; clones share connections,
/// workers and open-file state, and may carry different credentials
/// ([`Client::with_cred`]), as a FUSE adapter serving many users needs.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    cred: Cred,
}

/// State shared by all clones of a client and its open files.
pub(crate) struct Inner {
    pub cluster: ClusterConfig,
    /// This client's session with the metadata server, under which it opens files.
    pub session: session::Session,
    pub meta: ServerPool,
    /// Pools by data server id.
    pub data: Vec<Arc<ServerPool>>,
    pub exec: Executor,
    /// I/O state of inodes open in this client, shared by their handles.
    open: Mutex<HashMap<InodeId, Weak<InodeIo>>>,
    /// Changes the metadata server answered before they were durable (`unsynced.rs`).
    pub unsynced: unsynced::Unsynced,
    /// Data servers' boot identities of files closed since their last fsync.
    pub kept_boots: unsynced::KeptBoots,
}

impl Inner {
    /// One metadata request.
    pub fn meta_call(&self, cred: &Cred, req: Request) -> Result<Response, WireError> {
        self.meta.call(cred, req, &[], &mut []).map(|(r, _)| r)
    }

    /// One metadata operation, answered with its row's reply type.
    pub fn meta_op<O: Operation>(&self, cred: &Cred, op: O) -> Result<O::Reply, WireError> {
        self.meta.op(cred, op)
    }

    /// One metadata request chosen at run time (one of several operations with the same
    /// reply type), its answer as `R`; the pool checks it against the request's row.
    pub fn meta_req<R: Reply>(&self, cred: &Cred, req: Request) -> Result<R, WireError> {
        let op = req.opcode();
        let resp = self.meta_call(cred, req)?;
        R::from_response(resp).map_err(|kind| self.meta.unexpected(op, kind))
    }

    pub fn getattr(&self, cred: &Cred, ino: InodeId) -> Result<Attr, WireError> {
        self.meta_op(cred, op::GetAttr { ino })
    }

    /// The shared I/O state of a file, created on first use.
    pub fn inode_io(
        self: &Arc<Self>,
        attr: &Attr,
        path: Option<&str>,
    ) -> Result<Arc<InodeIo>, WireError> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(io) = open.get(&attr.ino).and_then(Weak::upgrade) {
            if Some(&io.layout) == attr.layout.as_ref() {
                return Ok(io);
            }
        }
        open.retain(|_, w| w.strong_count() > 0);
        let io = Arc::new(InodeIo::new(self.clone(), attr, path.map(str::to_string))?);
        open.insert(attr.ino, Arc::downgrade(&io));
        Ok(io)
    }

    /// The I/O state of `ino` if a handle of this client has it open.
    pub fn live_io(&self, ino: InodeId) -> Option<Arc<InodeIo>> {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.get(&ino).and_then(Weak::upgrade)
    }
}

impl Drop for Inner {
    /// Ends the session, releasing this client's opens on the server at once (Closes
    /// still deferred go out first, on the same connection).
    fn drop(&mut self) {
        self.session.end(&self.meta);
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("meta", &self.inner.cluster.meta_addr)
            .field("data_servers", &self.inner.data.len())
            .field("session", &self.inner.session.id())
            .field("cred", &self.cred)
            .finish()
    }
}

impl Client {
    /// Connects to the cluster: checks that the metadata server answers and accepts the
    /// cluster secret. Data servers are connected on first use, so a client works with
    /// whichever of them are up. Credentials default to the calling process's.
    pub fn connect(cluster: &ClusterConfig) -> Result<Client, WireError> {
        Client::connect_over(cluster, None)
    }

    /// [`Client::connect`] with every request carried by `via` instead of TCP (the
    /// simulator's network); the addresses in `cluster` only name the servers.
    pub fn connect_via(
        cluster: &ClusterConfig,
        via: Arc<dyn pool::Transport>,
    ) -> Result<Client, WireError> {
        Client::connect_over(cluster, Some(via))
    }

    fn connect_over(
        cluster: &ClusterConfig,
        via: Option<Arc<dyn pool::Transport>>,
    ) -> Result<Client, WireError> {
        let timeout = Duration::from_millis(cluster.timeout_ms);
        let streams = cluster.streams.map_or(MAX_CONNS_PER_SERVER, |n| {
            n.clamp(1, stripefs_rpc::config::MAX_STREAMS) as usize
        });
        // Pipelined bulk requests need plain connections (see Pipe); with TLS each
        // connection carries one at a time.
        let depth = match (&cluster.tls.client, &via) {
            (None, None) => cluster.pipeline.map_or(1, |n| {
                n.clamp(1, stripefs_rpc::config::MAX_PIPELINE) as usize
            }),
            _ => 1,
        };
        let host = cluster.client_host();
        stripefs_wire::validate_host(&host)?;
        let token = match &cluster.token {
            Some(text) => Some(Arc::new(
                stripefs_rpc::token::TokenCred::parse(text)
                    .map_err(|e| WireError::new(ErrorCode::InvalidArgument, e))?,
            )),
            None => None,
        };
        let over = |p: ServerPool| match &via {
            Some(v) => p.over(v.clone()),
            None => p
                .with_host(Some(host.clone()))
                .with_token(token.clone())
                .with_tls(cluster.tls.client.clone()),
        };
        let meta = over(ServerPool::new(
            None,
            &cluster.meta_addr,
            &cluster.secret,
            timeout,
            MAX_META_CONNS,
        ));
        // A client file that lists no data servers (a remote client's, which needs only
        // the metadata server's address): the metadata server says where they are.
        let mut listed;
        let cluster = if cluster.data.is_empty() {
            listed = cluster.clone();
            listed.data = data_servers_of(&meta)?;
            &listed
        } else {
            cluster
        };
        let data = cluster
            .data
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let id = ServerId(i as u32);
                let same_host = d.host.as_deref() == Some(host.as_str());
                let mut p = over(
                    ServerPool::new(Some(id), &d.addr, &cluster.secret, timeout, streams)
                        .on_same_host(same_host)
                        .with_pipeline(depth)
                        .with_compression(cluster.compress.unwrap_or_default()),
                );
                // Short-circuit reads authenticate with the secret, which a token holder
                // does not have.
                if let (true, None, Some(sock), None) = (same_host, &via, &d.local_socket, &token) {
                    p = p.with_short_circuit(sock.clone(), short_circuit_default());
                }
                if let Some(dial) = via.as_ref().and_then(|v| v.same_host(id)) {
                    p = p.on_same_host(true).with_same_host(dial, true);
                }
                Arc::new(p)
            })
            .collect::<Vec<_>>();
        meta.probe()?;
        let session = session::Session::open(&meta)?;
        let inner = Arc::new(Inner {
            cluster: cluster.clone(),
            session,
            meta,
            exec: Executor::with_workers(
                data.len(),
                via.as_ref()
                    .and_then(|v| v.io_workers())
                    .unwrap_or(IO_WORKERS.max(streams * depth * data.len().min(8))),
                streams * depth,
            ),
            data,
            open: Mutex::new(HashMap::new()),
            unsynced: unsynced::Unsynced::default(),
            kept_boots: unsynced::KeptBoots::default(),
        });
        if via.as_ref().map_or(true, |v| v.renews_in_background()) {
            session::Session::start_renewer(&inner)?;
        }
        Ok(Client {
            inner,
            cred: process_cred(),
        })
    }

    /// Waits until no I/O of this client is queued or in flight (write-behind and
    /// readahead included): the simulator calls it so that faults fall between
    /// requests at points that do not depend on thread timing.
    pub fn quiesce(&self) {
        self.inner.exec.wait_idle();
    }

    /// The bulk bytes this client moved to and from data servers so far, by where
    /// they went (see [`Traffic`]).
    pub fn traffic(&self) -> Traffic {
        use std::sync::atomic::Ordering::Relaxed;
        let mut t = Traffic::default();
        for p in &self.inner.data {
            let (sent, got) = (p.bytes_sent.load(Relaxed), p.bytes_received.load(Relaxed));
            if let Some(l) = &p.local {
                t.direct_read += l.bytes.load(Relaxed);
                t.direct_written += l.written.load(Relaxed);
                t.self_written += l.direct.load(Relaxed);
                t.self_read += l.direct_read.load(Relaxed);
            }
            if p.same_host {
                t.local_written += sent;
                t.local_read += got;
            } else {
                t.remote_written += sent;
                t.remote_read += got;
            }
        }
        t
    }

    /// Bulk data bytes this client sent to and received from its data servers as they
    /// crossed the wire: what [`Client::traffic`] counts, after compression.
    pub fn wire_bytes(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.inner.data.iter().fold((0, 0), |(s, r), p| {
            (
                s + p.wire_sent.load(Relaxed),
                r + p.wire_received.load(Relaxed),
            )
        })
    }

    /// Turns short-circuit reads and writes (through the files and pipes of data servers
    /// on this client's host, see `local.rs`) on or off; they are on unless
    /// `STRIPEFS_SHORT_CIRCUIT=0`.
    pub fn set_short_circuit(&self, on: bool) {
        for p in &self.inner.data {
            if let Some(l) = &p.local {
                l.enabled.store(on, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// Turns direct writes on or off: large writes of new blocks to a data server on
    /// this client's host written by the client itself with `O_DIRECT` (docs/protocol.md,
    /// "Short-circuit socket"); on unless `STRIPEFS_DIRECT_WRITES=0`.
    pub fn set_direct_writes(&self, on: bool) {
        for p in &self.inner.data {
            if let Some(l) = &p.local {
                l.direct_enabled
                    .store(on, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// Chooses which large reads of uncached ranges from a data server on this
    /// client's host go from the disk straight into the caller's buffer with `O_DIRECT`,
    /// with no copy out of the page cache ([`DirectReads`]; by default reads into an
    /// [`IoBuf`], or as `STRIPEFS_DIRECT_READS` says).
    pub fn set_direct_reads(&self, which: DirectReads) {
        for p in &self.inner.data {
            if let Some(l) = &p.local {
                l.direct_reads
                    .store(which as u8, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// This client with other credentials, used in every metadata request.
    pub fn with_cred(mut self, cred: Cred) -> Client {
        self.cred = cred;
        self
    }

    pub fn cred(&self) -> &Cred {
        &self.cred
    }

    pub fn cluster(&self) -> &ClusterConfig {
        &self.inner.cluster
    }

    /// The id of this client's session on the metadata server (it changes if the
    /// session had to be re-established).
    pub fn session(&self) -> u64 {
        self.inner.session.id()
    }
}

/// Bulk bytes a client moved to and from data servers: `local_*` with servers on the
/// client's own host (by the cluster file's host ids), `remote_*` with the others.
/// Written bytes are those sent in write requests, read bytes those answered (holes
/// past an object's end are not sent and not counted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    pub local_written: u64,
    /// Read from servers on the client's host through them (relayed).
    pub local_read: u64,
    pub remote_written: u64,
    pub remote_read: u64,
    /// Read directly from the files of servers on the client's host (short-circuit);
    /// not part of `local_read`.
    pub direct_read: u64,
    /// Written through the pipes of servers on the client's host, or into their files
    /// by the client itself (short-circuit); not part of `local_written`.
    pub direct_written: u64,
    /// Of `direct_written`, the bytes the client wrote into the servers' files itself
    /// (direct writes, `O_DIRECT`).
    pub self_written: u64,
    /// Of `direct_read`, the bytes read from the disk straight into the caller's buffer
    /// (`O_DIRECT`, not through the page cache).
    pub self_read: u64,
}

impl Traffic {
    /// Bytes written through data servers, on this host and others.
    pub fn total_written(&self) -> u64 {
        self.local_written + self.remote_written
    }

    /// Bytes read through data servers (not short-circuit), on this host and others.
    pub fn total_read(&self) -> u64 {
        self.local_read + self.remote_read
    }

    /// The counts since `earlier` (a reading of the same client).
    pub fn since(&self, earlier: &Traffic) -> Traffic {
        Traffic {
            local_written: self.local_written - earlier.local_written,
            local_read: self.local_read - earlier.local_read,
            remote_written: self.remote_written - earlier.remote_written,
            remote_read: self.remote_read - earlier.remote_read,
            direct_read: self.direct_read - earlier.direct_read,
            direct_written: self.direct_written - earlier.direct_written,
            self_written: self.self_written - earlier.self_written,
            self_read: self.self_read - earlier.self_read,
        }
    }

    /// Adds another client's counts.
    pub fn add(&mut self, o: &Traffic) {
        self.local_written += o.local_written;
        self.local_read += o.local_read;
        self.remote_written += o.remote_written;
        self.remote_read += o.remote_read;
        self.direct_read += o.direct_read;
        self.direct_written += o.direct_written;
        self.self_written += o.self_written;
        self.self_read += o.self_read;
    }
}

/// The data servers as the metadata server tells them (DataServers), by id.
fn data_servers_of(meta: &ServerPool) -> Result<Vec<stripefs_rpc::DataServerEntry>, WireError> {
    let servers = meta.op(&Cred::root(), op::DataServers {})?.servers;
    if servers.is_empty() {
        return Err(WireError::new(
            stripefs_wire::ErrorCode::InvalidArgument,
            "the metadata server knows no data servers",
        ));
    }
    Ok(servers
        .into_iter()
        .map(|(addr, host)| stripefs_rpc::DataServerEntry {
            host,
            ..stripefs_rpc::DataServerEntry::new(addr)
        })
        .collect())
}

/// Whether new clients read short-circuit where they can: yes, unless the environment
/// says `STRIPEFS_SHORT_CIRCUIT=0` (or `off`).
fn short_circuit_default() -> bool {
    !matches!(
        std::env::var("STRIPEFS_SHORT_CIRCUIT").as_deref(),
        Ok("0" | "off" | "false")
    )
}

/// The credentials of the calling process: real uid and gid and supplementary groups.
pub fn process_cred() -> Cred {
    // SAFETY: getuid/getgid cannot fail; getgroups writes at most `n` entries into a
    // buffer of `n` entries and returns how many it wrote, or -1.
    unsafe {
        let uid = libc::getuid();
        let gid = libc::getgid();
        let n = libc::getgroups(0, std::ptr::null_mut());
        let mut groups = vec![0 as libc::gid_t; n.max(0) as usize];
        let got = if n > 0 {
            libc::getgroups(n, groups.as_mut_ptr())
        } else {
            0
        };
        groups.truncate(got.max(0) as usize);
        groups.retain(|&g| g != gid);
        Cred { uid, gid, groups }
    }
}
