//! A pool of authenticated connections to one server.
//!
//! Callers take an idle connection or open a new one (up to a named maximum), make one
//! call, and give it back. A connection that failed in transport is dropped, never reused.
//! A call on a *reused* connection that finds it closed by the server (for instance after
//! the server restarted) is retried once on a fresh connection when the request is
//! idempotent; timeouts are never retried, so a call is bounded by one timeout per
//! socket operation.
//!
//! Servers close connections idle for `limits::IDLE_TIMEOUT`. That never reaches the
//! caller: the pool drops connections idle for `limits::CLIENT_IDLE_MAX` (half of it)
//! before using them, and one the server has closed (seen without waiting, at checkout);
//! and should a request still cross the server's `ConnectionClosed` notice, the server
//! did not handle it, so it is sent again on a fresh connection whatever it is, with the
//! deferred requests that went with it.
//!
//! Requests nobody waits for (Close) are deferred: they go out with the next request on
//! their connection, so a create + close loop costs the server one wake-up per file,
//! or, when the connection stays idle, within [`DEFER_MAX`] by the pool's flusher
//! thread.
//!
//! A deferred request is not lost when it cannot be sent: if no connection can be made,
//! or its idle connection turns out closed by the server before it was written (checked
//! with a non-blocking peek before deferred frames are written), its frame is kept
//! (up to [`MAX_UNSENT_BYTES`]) and goes out with the next request, or from the flusher,
//! which retries with a growing delay until the server takes it. Only frames whose write
//! failed part-way may be lost (the server may or may not have read them, and a Close
//! must not be sent twice); the session's lease, or its end when the client goes,
//! bounds what such a loss keeps open.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use stripefs_rpc::compress::Codec;
use stripefs_rpc::limits::CLIENT_IDLE_MAX;
use stripefs_rpc::tls::TlsClient;
use stripefs_rpc::token::TokenCred;
use stripefs_rpc::{Conn, Pipe, Secret};
use stripefs_wire::{
    encode_request_flags, Cred, Envelope, ErrorCode, Features, Opcode, Operation, Reply, ReplyKind,
    Request, Response, ServerId, WireError, FLAG_NO_REPLY,
};

/// A pooled connection idle for less than this is used without first asking the kernel
/// whether the server closed it (servers close connections idle for far longer).
const PEEK_AFTER: Duration = Duration::from_millis(10);

/// Longest a deferred request waits on an idle connection before the flusher sends it.
pub const DEFER_MAX: Duration = Duration::from_millis(2);
/// Most bytes of deferred frames kept while they cannot be sent (a Close is about 30).
pub const MAX_UNSENT_BYTES: usize = 4 << 20;
/// First and longest wait of the flusher between attempts to send kept frames.
const UNSENT_RETRY_MIN: Duration = Duration::from_millis(50);
const UNSENT_RETRY_MAX: Duration = Duration::from_secs(2);

struct State {
    /// Idle connections and when each was given back.
    idle: Vec<(Conn, Instant)>,
    /// Connections in existence: idle, lent out, or being opened.
    open: usize,
    /// An idle connection holds deferred requests, or `unsent` is not empty.
    deferred: bool,
    /// Frames of deferred requests that could not be sent yet (see the module doc).
    unsent: Vec<u8>,
    /// The pool is being dropped: the flusher ends.
    closing: bool,
}

/// A pool's pipelined connections.
#[derive(Default)]
struct Pipes {
    /// Each with when it was last picked.
    list: Vec<(Arc<Pipe>, Instant)>,
    /// Connections being dialled.
    opening: usize,
}

/// What the pool shares with its flusher thread.
struct Shared {
    state: Mutex<State>,
    returned: Condvar,
    /// Wakes the flusher (deferred requests, or closing).
    kick: Condvar,
}

/// Carries requests to servers in place of TCP connections: the whole-cluster simulator
/// (crates/sim) runs the real client over its simulated network through this.
pub trait Transport: Send + Sync + 'static {
    /// One request to `server` (`None`: the metadata server) and its answer, with the
    /// answer's bulk data copied into `recv`, as [`Conn::call`].
    fn call(
        &self,
        server: Option<ServerId>,
        cred: &Cred,
        req: Request,
        data: &[u8],
        recv: &mut [u8],
    ) -> Result<(Response, usize), WireError>;

    /// A request nobody waits for (Close), as [`Conn::defer`]: it may arrive after
    /// requests sent later.
    fn send(&self, server: Option<ServerId>, cred: &Cred, req: Request) -> Result<(), WireError> {
        self.call(server, cred, req, &[], &mut []).map(|_| ())
    }

    /// How many I/O worker threads a client over this transport runs (`None`: the
    /// default).
    fn io_workers(&self) -> Option<usize> {
        None
    }

    /// The protocol features `server` has (as its `Features` answer says over TCP).
    fn features(&self, _server: Option<ServerId>) -> Features {
        Features::all()
    }

    /// Whether the client renews its session on a background thread in real time
    /// (a simulator whose time is virtual keeps its runs repeatable without it).
    fn renews_in_background(&self) -> bool {
        true
    }

    /// The same-host endpoint of data server `server` when the client runs on its host
    /// (the simulator's in-process one), so that short-circuit reads, pipe writes and
    /// direct writes go the way they go on a real host.
    fn same_host(&self, _server: ServerId) -> Option<Arc<dyn stripefs_rpc::samehost::LocalDial>> {
        None
    }
}

pub(crate) struct ServerPool {
    /// `None` for the metadata server.
    pub id: Option<ServerId>,
    pub addr: String,
    /// Requests go here instead of over TCP.
    via: Option<Arc<dyn Transport>>,
    secret: Secret,
    timeout: Duration,
    max_conns: usize,
    /// The client's host, announced on every new connection (`ClientHost`).
    host: Option<String>,
    /// Compression of bulk data on this pool's connections (`SetCompression`).
    codec: Codec,
    /// A scoped token to authenticate with instead of the secret.
    token: Option<Arc<TokenCred>>,
    /// TLS on every connection, checked against this CA.
    tls: Option<TlsClient>,
    /// Bulk requests in flight per connection (`pipeline`); 1: one at a time, on the
    /// pool's ordinary connections.
    depth: usize,
    /// Pipelined connections for bulk requests (at most `max_conns`), with when each was
    /// last picked.
    pipes: Mutex<Pipes>,
    /// The server runs on the client's host (by the cluster file's host ids).
    pub same_host: bool,
    /// Bulk bytes sent to and received from this server in answered calls.
    pub bytes_sent: std::sync::atomic::AtomicU64,
    pub bytes_received: std::sync::atomic::AtomicU64,
    /// Bulk bytes as they crossed the wire both ways (after compression).
    pub wire_sent: std::sync::atomic::AtomicU64,
    pub wire_received: std::sync::atomic::AtomicU64,
    /// Short-circuit reads from this server's files (same host, `local_socket`).
    pub local: Option<crate::local::ShortCircuit>,
    shared: Arc<Shared>,
    /// Started on the first deferred request.
    flusher: Mutex<Option<JoinHandle<()>>>,
    /// The server's protocol features, as its last new connection announced them.
    features: std::sync::atomic::AtomicU64,
    /// Whether `features` is known: `UNKNOWN`, `ASKED`, or `PREDATES` (the server
    /// refused `Features`: never asked again).
    features_state: std::sync::atomic::AtomicU8,
}

const UNKNOWN: u8 = 0;
const ASKED: u8 = 1;
const PREDATES: u8 = 2;

/// Connects, authenticates and, in one more round trip, announces the client's host id
/// (`ClientHost`: the server counts the connection's bytes as that host's and the
/// metadata server places local layouts there), the pool's compression and, if `ask`,
/// this build's features, returning the server's (see [`Conn::announce`]).
#[allow(clippy::too_many_arguments)]
fn dial(
    addr: &str,
    secret: &Secret,
    token: Option<&TokenCred>,
    timeout: Duration,
    host: Option<&str>,
    codec: Codec,
    tls: Option<&TlsClient>,
    ask: bool,
) -> Result<(Conn, Option<Features>), WireError> {
    let mut c = Conn::connect_with(addr, secret, token, timeout, tls)?;
    let theirs = c.announce(host, codec, ask)?;
    Ok((c, theirs))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ServerPool {
    /// The pool authenticates with a scoped token instead of the secret.
    pub fn with_token(mut self, token: Option<Arc<TokenCred>>) -> ServerPool {
        self.token = token;
        self
    }

    /// Up to `depth` bulk requests (reads and writes of data) in flight on each of the
    /// pool's connections; see [`Pipe`]. TLS connections carry one at a time.
    pub fn with_pipeline(mut self, depth: usize) -> ServerPool {
        self.depth = depth.max(1);
        self
    }

    /// A new connection with this pool's settings, which also learns the server's
    /// protocol features (in the same round trip as the host and codec).
    fn dial(&self) -> Result<Conn, WireError> {
        use std::sync::atomic::Ordering::Relaxed;
        let dial_asking = |ask| {
            dial(
                &self.addr,
                &self.secret,
                self.token.as_deref(),
                self.timeout,
                self.host.as_deref(),
                self.codec,
                self.tls.as_ref(),
                ask,
            )
        };
        let (c, theirs) = dial_asking(self.features_state.load(Relaxed) != PREDATES)?;
        let Some(theirs) = theirs else {
            return Ok(c);
        };
        self.features.store(theirs.0, Relaxed);
        if !c.is_broken() {
            self.features_state.store(ASKED, Relaxed);
            return Ok(c);
        }
        tracing::warn!(
            "{} predates protocol features (an older stripefs): the client uses only what \
             every version 5 server serves",
            self.name()
        );
        self.features_state.store(PREDATES, Relaxed);
        dial_asking(false).map(|(c, _)| c)
    }

    /// The server's protocol features; connects first if no connection was made yet.
    pub fn features(&self) -> Result<Features, WireError> {
        use std::sync::atomic::Ordering::Relaxed;
        if let Some(via) = &self.via {
            return Ok(via.features(self.id));
        }
        if self.features_state.load(Relaxed) == UNKNOWN {
            let (c, _) = self.checkout()?;
            self.checkin(c);
        }
        Ok(Features(self.features.load(Relaxed)))
    }

    /// Whether the server serves `op`: every operation but those its row marks as
    /// needing a feature the server did not announce.
    pub fn serves(&self, op: Opcode) -> Result<bool, WireError> {
        match op.feature() {
            None => Ok(true),
            Some(f) => Ok(self.features()?.has(f)),
        }
    }

    /// The pool's connections use TLS.
    pub fn with_tls(mut self, tls: Option<TlsClient>) -> ServerPool {
        self.tls = tls;
        self
    }

    /// The pool's connections compress bulk data with `codec`.
    pub fn with_compression(mut self, codec: Codec) -> ServerPool {
        self.codec = codec;
        self
    }

    /// The pool announces `host` on each connection it makes.
    pub fn with_host(mut self, host: Option<String>) -> ServerPool {
        self.host = host;
        self
    }

    pub fn new(
        id: Option<ServerId>,
        addr: &str,
        secret: &Secret,
        timeout: Duration,
        max_conns: usize,
    ) -> ServerPool {
        assert!(max_conns > 0);
        ServerPool {
            id,
            addr: addr.to_string(),
            via: None,
            secret: secret.clone(),
            timeout,
            max_conns,
            host: None,
            codec: Codec::Off,
            token: None,
            tls: None,
            depth: 1,
            pipes: Mutex::new(Pipes::default()),
            same_host: false,
            bytes_sent: Default::default(),
            bytes_received: Default::default(),
            wire_sent: Default::default(),
            wire_received: Default::default(),
            local: None,
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    idle: Vec::new(),
                    open: 0,
                    deferred: false,
                    unsent: Vec::new(),
                    closing: false,
                }),
                returned: Condvar::new(),
                kick: Condvar::new(),
            }),
            flusher: Mutex::new(None),
            features: Default::default(),
            features_state: Default::default(),
        }
    }

    /// Marks the server as running on the client's host (for the traffic counters).
    pub fn on_same_host(mut self, same: bool) -> ServerPool {
        self.same_host = same;
        self
    }

    /// Reads may bypass the server through its short-circuit socket `socket`.
    pub fn with_short_circuit(self, socket: PathBuf, enabled: bool) -> ServerPool {
        let dial = stripefs_rpc::samehost::SocketDial {
            path: socket,
            secret: self.secret.clone(),
            timeout: self.timeout,
        };
        self.with_same_host(Arc::new(dial), enabled)
    }

    /// Reads and writes may bypass the server through the same-host endpoint `dial`
    /// makes connections to (the simulator's, in process).
    pub fn with_same_host(
        mut self,
        dial: Arc<dyn stripefs_rpc::samehost::LocalDial>,
        enabled: bool,
    ) -> ServerPool {
        self.local = Some(crate::local::ShortCircuit::new(dial, enabled));
        self
    }

    /// Counts the bulk bytes of an answered call.
    fn count(&self, r: &Result<(Response, usize), WireError>, sent: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        if let Ok((_, got)) = r {
            self.bytes_sent.fetch_add(sent as u64, Relaxed);
            self.bytes_received.fetch_add(*got as u64, Relaxed);
        }
    }

    /// Adds what a call moved on the wire, (sent, received).
    fn count_wire(&self, (sent, got): (u64, u64)) {
        use std::sync::atomic::Ordering::Relaxed;
        self.wire_sent.fetch_add(sent, Relaxed);
        self.wire_received.fetch_add(got, Relaxed);
    }

    /// A pool whose requests travel over `via` rather than TCP.
    pub fn over(mut self, via: Arc<dyn Transport>) -> ServerPool {
        self.via = Some(via);
        self
    }

    /// How this server is named in error messages.
    pub fn name(&self) -> String {
        match self.id {
            Some(id) => format!("data server {} ({})", id.0, self.addr),
            None => format!("metadata server {}", self.addr),
        }
    }

    /// One operation without bulk data, answered with the reply type of its row of the
    /// operation table.
    pub fn op<O: Operation>(&self, cred: &Cred, op: O) -> Result<O::Reply, WireError> {
        let (resp, _) = self.call(cred, op.into(), &[], &mut [])?;
        O::Reply::from_response(resp).map_err(|kind| self.unexpected(O::OPCODE, kind))
    }

    /// The error for an answer of the wrong kind to `op`.
    pub fn unexpected(&self, op: Opcode, kind: ReplyKind) -> WireError {
        WireError::new(
            ErrorCode::UnexpectedMessage,
            format!("{} answered {} with {kind:?}", self.name(), op.name()),
        )
    }

    /// One request and its response; see [`Conn::call`].
    pub fn call(
        &self,
        cred: &Cred,
        req: Request,
        data: &[u8],
        recv: &mut [u8],
    ) -> Result<(Response, usize), WireError> {
        self.call_parts(cred, req, &[data], recv)
    }

    /// As [`ServerPool::call`], with the bulk data in `parts`, sent as if joined
    /// (see [`Conn::call_parts`]).
    pub fn call_parts(
        &self,
        cred: &Cred,
        req: Request,
        parts: &[&[u8]],
        recv: &mut [u8],
    ) -> Result<(Response, usize), WireError> {
        let op = req.opcode();
        if !self.serves(op)? {
            return Err(WireError::new(
                ErrorCode::Unsupported,
                format!(
                    "{} does not serve {} (an older version: it did not announce it)",
                    self.name(),
                    op.name()
                ),
            ));
        }
        let r = self.call_uncounted(cred, req, parts, recv);
        self.count(&r, parts.iter().map(|p| p.len()).sum());
        match r {
            // Only the answers its row in the operation table allows.
            Ok((resp, _)) if !op.answers(resp.kind()) => Err(WireError::new(
                ErrorCode::UnexpectedMessage,
                format!(
                    "{} answered {} with {:?}, which is not one of its answers",
                    self.name(),
                    op.name(),
                    resp.kind()
                ),
            )),
            r => r,
        }
    }

    fn call_uncounted(
        &self,
        cred: &Cred,
        req: Request,
        parts: &[&[u8]],
        recv: &mut [u8],
    ) -> Result<(Response, usize), WireError> {
        if let Some(via) = &self.via {
            return match parts {
                [one] => via.call(self.id, cred, req, one, recv),
                more => via.call(self.id, cred, req, &more.concat(), recv),
            };
        }
        if self.depth > 1 && self.tls.is_none() && bulk(&req) {
            return self.call_piped(cred, req, parts, recv);
        }
        let again = req.clone();
        let (mut conn, reused) = self.checkout()?;
        let before = conn.wire_data_bytes();
        let r = conn.call_parts(cred, req, parts, recv);
        self.count_wire(wire_since(before, &conn));
        let stale =
            reused && conn.is_broken() && matches!(&r, Err(e) if e.code == ErrorCode::Unreachable);
        // The server closed the connection before handling the request: safe to resend.
        let unhandled = matches!(&r, Err(e) if e.code == ErrorCode::ConnectionClosed);
        let carried = if unhandled {
            conn.take_unhandled()
        } else {
            Vec::new()
        };
        self.checkin(conn);
        if unhandled || (stale && idempotent(&again)) {
            let mut conn = self.connect_new()?;
            let before = conn.wire_data_bytes();
            let r = conn
                .defer_frames(&carried)
                .and_then(|()| conn.call_parts(cred, again, parts, recv));
            self.count_wire(wire_since(before, &conn));
            self.checkin(conn);
            return r;
        }
        r
    }

    /// A bulk request on a pipelined connection; resent once on a fresh one when the
    /// server closed the connection before handling it, or when a connection that sat
    /// idle turns out dead and the request is idempotent (as [`ServerPool::call`]).
    fn call_piped(
        &self,
        cred: &Cred,
        req: Request,
        parts: &[&[u8]],
        recv: &mut [u8],
    ) -> Result<(Response, usize), WireError> {
        let again = req.clone();
        let (pipe, reused) = self.pick_pipe(false)?;
        let (r, wire) = pipe.call_parts(cred, req, parts, recv);
        self.count_wire(wire);
        // A transport failure (the pipe broke), not a server's answer.
        let stale =
            reused && pipe.is_broken() && matches!(&r, Err(e) if e.code == ErrorCode::Unreachable);
        let unhandled = matches!(&r, Err(e) if e.code == ErrorCode::ConnectionClosed);
        if unhandled || (stale && idempotent(&again)) {
            let (pipe, _) = self.pick_pipe(true)?;
            let (r, wire) = pipe.call_parts(cred, again, parts, recv);
            self.count_wire(wire);
            return r;
        }
        r
    }

    /// The least busy pipelined connection, or a new one while fewer than `max_conns`
    /// exist and every one carries a request (so that load spreads over the streams
    /// before it piles up on one); `fresh`: a new one whatever exists (after a failure).
    /// Returns whether the connection had been used before.
    fn pick_pipe(&self, fresh: bool) -> Result<(Arc<Pipe>, bool), WireError> {
        {
            let mut ps = lock(&self.pipes);
            ps.list.retain(|(p, last)| {
                let idle = p.in_flight() == 0;
                let gone = p.is_broken()
                    || (idle && last.elapsed() >= CLIENT_IDLE_MAX)
                    || (idle && last.elapsed() >= PEEK_AFTER && p.closed_by_peer());
                !gone
            });
            let full = ps.list.len() + ps.opening >= self.max_conns;
            if !fresh {
                let best = ps
                    .list
                    .iter_mut()
                    .min_by_key(|(p, _)| p.in_flight())
                    .filter(|(p, _)| full || p.in_flight() == 0);
                if let Some((p, last)) = best {
                    *last = Instant::now();
                    return Ok((p.clone(), true));
                }
            }
            // Dialled without the lock, so that callers of a server that does not
            // answer each wait for their own connection's timeout, not for each other's.
            ps.opening += 1;
        }
        let dialed = self.dial();
        let mut ps = lock(&self.pipes);
        ps.opening -= 1;
        let pipe = match Pipe::new(dialed?) {
            Ok(p) => Arc::new(p),
            Err(_) => {
                return Err(WireError::new(
                    ErrorCode::Internal,
                    format!("{}: a connection that cannot be pipelined", self.name()),
                ))
            }
        };
        if ps.list.len() >= self.max_conns {
            // A fresh one replaces the oldest (its callers finish on it).
            ps.list.remove(0);
        }
        ps.list.push((pipe.clone(), Instant::now()));
        Ok((pipe, false))
    }

    /// Sends a request that gets no answer, deferred: with the next request on the same
    /// connection, or within [`DEFER_MAX`]; see [`Conn::defer`].
    pub fn send_deferred(&self, cred: &Cred, req: Request) -> Result<(), WireError> {
        if let Some(via) = &self.via {
            return via.send(self.id, cred, req);
        }
        self.start_flusher()?;
        match self.checkout() {
            Ok((mut conn, _)) => {
                let r = conn.defer(cred, req);
                self.checkin(conn);
                r
            }
            Err(e) => {
                // Nothing was sent: keep the frame for the flusher to retry.
                let env = Envelope {
                    cred: cred.clone(),
                    req,
                };
                let frame = encode_request_flags(0, &env, 0, FLAG_NO_REPLY);
                tracing::info!(
                    "{}: {e}; the deferred request is kept and will be retried",
                    self.name()
                );
                self.keep_unsent(frame)
            }
        }
    }

    /// Keeps frames that could not be sent, for the next request or the flusher.
    fn keep_unsent(&self, frames: Vec<u8>) -> Result<(), WireError> {
        if frames.is_empty() {
            return Ok(());
        }
        let mut st = lock(&self.shared.state);
        if st.unsent.len() + frames.len() > MAX_UNSENT_BYTES {
            return Err(WireError::new(
                ErrorCode::Io,
                format!(
                    "{}: {MAX_UNSENT_BYTES} bytes of deferred requests wait to be sent; \
                     dropping {} more",
                    self.name(),
                    frames.len()
                ),
            ));
        }
        st.unsent.extend_from_slice(&frames);
        st.deferred = true;
        self.shared.kick.notify_one();
        Ok(())
    }

    /// Adds the frames kept unsent to `conn`'s deferred requests.
    fn adopt_unsent(&self, conn: &mut Conn) {
        let frames = std::mem::take(&mut lock(&self.shared.state).unsent);
        if frames.is_empty() {
            return;
        }
        if let Err(e) = conn.defer_frames(&frames) {
            tracing::info!("{}: {e}", self.name());
            let _ = self.keep_unsent(frames);
        }
    }

    fn start_flusher(&self) -> Result<(), WireError> {
        let mut f = lock(&self.flusher);
        if f.is_none() {
            let shared = self.shared.clone();
            let (addr, secret, timeout) = (self.addr.clone(), self.secret.clone(), self.timeout);
            let max_conns = self.max_conns;
            let (host, codec, token) = (self.host.clone(), self.codec, self.token.clone());
            let tls = self.tls.clone();
            let connect = move || {
                dial(
                    &addr,
                    &secret,
                    token.as_deref(),
                    timeout,
                    host.as_deref(),
                    codec,
                    tls.as_ref(),
                    false,
                )
                .map(|(c, _)| c)
            };
            let thread = std::thread::Builder::new()
                .name("stripefs-flush".into())
                .spawn(move || flusher(&shared, max_conns, &connect))
                .map_err(|e| {
                    WireError::new(
                        ErrorCode::Internal,
                        format!("cannot start a flusher thread: {e}"),
                    )
                })?;
            *f = Some(thread);
        }
        Ok(())
    }

    /// Connects once, outside the pool, to check that the server answers.
    pub fn probe(&self) -> Result<(), WireError> {
        if let Some(via) = &self.via {
            return via
                .call(self.id, &Cred::root(), Request::Ping {}, &[], &mut [])
                .map(|_| ());
        }
        let conn = self.checkout()?.0;
        self.checkin(conn);
        Ok(())
    }

    fn checkout(&self) -> Result<(Conn, bool), WireError> {
        let (mut conn, reused) = self.checkout_raw()?;
        if !lock(&self.shared.state).unsent.is_empty() {
            self.adopt_unsent(&mut conn);
        }
        Ok((conn, reused))
    }

    fn checkout_raw(&self) -> Result<(Conn, bool), WireError> {
        let mut st = lock(&self.shared.state);
        loop {
            if let Some((mut c, since)) = st.idle.pop() {
                let idle = since.elapsed();
                // A connection given back moments ago cannot have been closed for being
                // idle: the system call is skipped on the hot path of back-to-back calls,
                // unless deferred frames (ours or kept ones) are about to be written.
                let check = idle >= PEEK_AFTER || c.has_deferred() || !st.unsent.is_empty();
                if idle >= CLIENT_IDLE_MAX || (check && c.closed_by_peer()) {
                    // Closed by the server, or about to be: never used again. Requests it
                    // still holds go with the next connection.
                    let frames = c.take_unhandled();
                    st.unsent.extend_from_slice(&frames);
                    st.open -= 1;
                    continue;
                }
                return Ok((c, true));
            }
            if st.open < self.max_conns {
                st.open += 1;
                break;
            }
            st = self
                .shared
                .returned
                .wait(st)
                .unwrap_or_else(|p| p.into_inner());
        }
        drop(st);
        match self.dial() {
            Ok(c) => Ok((c, false)),
            Err(e) => {
                lock(&self.shared.state).open -= 1;
                self.shared.returned.notify_one();
                Err(e)
            }
        }
    }

    /// A fresh connection for a retry; counted against the pool like any other.
    fn connect_new(&self) -> Result<Conn, WireError> {
        let mut st = lock(&self.shared.state);
        // Drop idle connections: if one was stale after a server restart, all are.
        let stale = std::mem::take(&mut st.idle);
        st.open -= stale.len();
        // Their deferred requests are written as they drop (best effort, as before).
        drop(st);
        drop(stale);
        self.shared.returned.notify_all();
        let (c, _) = self.checkout()?;
        Ok(c)
    }

    fn checkin(&self, conn: Conn) {
        let mut st = lock(&self.shared.state);
        if conn.is_broken() {
            st.open -= 1;
        } else {
            if conn.has_deferred() && !st.deferred {
                st.deferred = true;
                self.shared.kick.notify_one();
            }
            st.idle.push((conn, Instant::now()));
        }
        drop(st);
        self.shared.returned.notify_one();
    }
}

impl Drop for ServerPool {
    /// Ends the flusher; idle connections write their deferred requests as they close.
    fn drop(&mut self) {
        lock(&self.shared.state).closing = true;
        self.shared.kick.notify_all();
        if let Some(t) = lock(&self.flusher).take() {
            let _ = t.join();
        }
    }
}

/// Sends the deferred requests of idle connections [`DEFER_MAX`] after they were
/// deferred (a connection used meanwhile has sent them with its request), and the
/// frames kept unsent, retrying with a growing delay while the server cannot be reached.
fn flusher(shared: &Shared, max_conns: usize, connect: &dyn Fn() -> Result<Conn, WireError>) {
    let mut retry = UNSENT_RETRY_MIN;
    loop {
        let mut st = lock(&shared.state);
        while !st.deferred && !st.closing {
            st = shared.kick.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        if st.closing {
            return;
        }
        drop(st);
        std::thread::sleep(DEFER_MAX);
        let mut st = lock(&shared.state);
        st.deferred = false;
        flush_idle(&mut st);
        if st.unsent.is_empty() {
            retry = UNSENT_RETRY_MIN;
            continue;
        }
        if send_unsent(shared, st, max_conns, connect) {
            retry = UNSENT_RETRY_MIN;
            continue;
        }
        // Not sent: wait (or until the pool closes), then try again.
        let mut st = lock(&shared.state);
        st.deferred = true;
        let (st, _) = shared
            .kick
            .wait_timeout_while(st, retry, |s| !s.closing)
            .unwrap_or_else(|p| p.into_inner());
        drop(st);
        retry = (retry * 2).min(UNSENT_RETRY_MAX);
    }
}

/// Writes the deferred requests of idle connections; those found closed by the server
/// hand their frames to `unsent`, and broken ones are dropped.
fn flush_idle(st: &mut State) {
    let mut kept = Vec::with_capacity(st.idle.len());
    for (mut c, since) in std::mem::take(&mut st.idle) {
        if c.has_deferred() && c.closed_by_peer() {
            st.unsent.extend_from_slice(&c.take_unhandled());
        } else if let Err(e) = c.flush() {
            tracing::warn!("{e}");
        }
        if c.is_broken() || c.closed_by_peer() {
            st.open -= 1;
        } else {
            kept.push((c, since));
        }
    }
    st.idle = kept;
}

/// Sends the frames kept unsent on an idle connection or a new one; false if they are
/// still unsent (kept again).
fn send_unsent<'a>(
    shared: &'a Shared,
    mut st: MutexGuard<'a, State>,
    max_conns: usize,
    connect: &dyn Fn() -> Result<Conn, WireError>,
) -> bool {
    let frames = std::mem::take(&mut st.unsent);
    let mut conn = match st.idle.pop() {
        Some((c, _)) => c,
        None if st.open < max_conns => {
            st.open += 1;
            drop(st);
            match connect() {
                Ok(c) => {
                    st = lock(&shared.state);
                    c
                }
                Err(e) => {
                    tracing::info!("{e}; deferred requests kept, will retry");
                    let mut st = lock(&shared.state);
                    st.open -= 1;
                    st.unsent.splice(0..0, frames);
                    shared.returned.notify_one();
                    return false;
                }
            }
        }
        // Every connection is lent out: one of them takes the frames when it is next
        // checked out (see `checkout`).
        None => {
            st.unsent.splice(0..0, frames);
            return true;
        }
    };
    drop(st);
    // A frame whose write fails part-way is not sent again (see the module doc).
    let sent = conn.defer_frames(&frames).and_then(|_| conn.flush());
    let mut st = lock(&shared.state);
    if let Err(e) = &sent {
        tracing::warn!("sending deferred requests: {e}");
    }
    if conn.is_broken() {
        st.open -= 1;
    } else {
        st.idle.push((conn, Instant::now()));
    }
    drop(st);
    shared.returned.notify_one();
    sent.is_ok()
}

/// Requests that do the same thing when sent twice.
/// What `conn` moved on the wire since it said `before`.
fn wire_since(before: (u64, u64), conn: &Conn) -> (u64, u64) {
    let now = conn.wire_data_bytes();
    (now.0 - before.0, now.1 - before.1)
}

/// Requests whose data goes one way only, which a pipelined connection carries.
fn bulk(req: &Request) -> bool {
    req.opcode().bulk()
}

fn idempotent(req: &Request) -> bool {
    req.opcode().idempotent()
}
