//! The server loop: an acceptor drives each new connection's handshake on one thread
//! (no thread per unauthenticated peer, budgets per address and in all, see
//! `accept.rs`), then each authenticated connection gets a thread of its own.

use crate::accept::Acceptor;
use crate::auth::Secret;
use crate::compress::Codec;
use crate::frame::{read_exact, read_header, skip, write_all_parts, ReadError};
use crate::limits::Limits;
use crate::tls::{Stream, TlsServer};
use crate::token::Token;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use stripefs_wire::{
    decode_request, encode_response, encode_response_flags, ConnectionOp, Envelope, ErrorCode,
    Features, FrameError, Group, Header, Opcode, Response, Route, Valid, WireError,
    FLAG_COMPRESSED,
};

pub use crate::limits::MAX_CONNECTIONS;

pub use crate::payload::{Part, Payload};

/// A handler's answer.
pub struct Reply {
    pub result: Result<Response, WireError>,
    pub data: Payload,
}

impl Reply {
    pub fn ok(resp: Response) -> Reply {
        Reply {
            result: Ok(resp),
            data: Payload::None,
        }
    }

    pub fn err(err: WireError) -> Reply {
        Reply {
            result: Err(err),
            data: Payload::None,
        }
    }

    pub fn from_result(r: Result<Response, WireError>) -> Reply {
        Reply {
            result: r,
            data: Payload::None,
        }
    }
}

/// Facts about the connection a request came on.
#[derive(Clone, Debug)]
pub struct ConnInfo {
    pub peer: SocketAddr,
    /// The host the client announced with `ClientHost`, if it did.
    pub host: Option<String>,
    /// The scoped token the client authenticated with (`TokenHello`); `None`: it holds
    /// the cluster secret. The rpc layer has checked its signature, expiry and (through
    /// [`Service::check_token`]) revocation, and made every request act as its user;
    /// services enforce its path and mode.
    pub token: Option<Arc<Token>>,
    /// The features the client announced (`Features`); none until it does.
    pub features: Features,
}

impl ConnInfo {
    pub fn new(peer: SocketAddr) -> ConnInfo {
        ConnInfo {
            peer,
            host: None,
            token: None,
            features: Features::NONE,
        }
    }
}

/// A server's request handler. Requests arrive decoded, authenticated and validated
/// ([`Valid`]); the rpc layer serves the connection's own requests (`ConnectionOp`)
/// itself. `data` is the bulk data that followed the request.
pub trait Service: Send + Sync + 'static {
    fn handle(&self, conn: &ConnInfo, req: Valid, data: &[u8]) -> Reply;

    /// Whether a success is checked against the replies its operation's row allows
    /// (every real server; a transport test's echo answers as it likes).
    fn strict_replies(&self) -> bool {
        true
    }

    /// The protocol features this server announces (`Features`). `None`: it behaves
    /// as a server from before features were negotiated, which refuses the request as
    /// an opcode it does not know and closes the connection (tests of older servers).
    fn features(&self) -> Option<Features> {
        Some(Features::all())
    }

    /// Whether a token (signed with the cluster secret, not expired) may still be used:
    /// asked at its handshake and before each of its requests. The metadata server
    /// refuses revoked tokens; by default every token is accepted.
    fn check_token(&self, _token: &Token) -> Result<(), WireError> {
        Ok(())
    }

    /// Called once at a graceful stop, after the server stopped accepting and the
    /// requests it was serving were answered (or [`STOP_WAIT`] ran out): makes durable
    /// whatever was answered before it was (the metadata server's carried changes),
    /// since the process ends next, with the service perhaps still held by a
    /// connection thread.
    fn stop(&self) {}
}

/// How long a graceful stop waits for the requests being served to be answered.
pub const STOP_WAIT: Duration = Duration::from_secs(5);

/// Counters of a server's connections, for tests and status: what the limits did.
#[derive(Debug, Default)]
pub struct ConnStats {
    /// Authenticated connections open now.
    pub authenticated: AtomicUsize,
    /// Connections in their handshake now.
    pub pending: AtomicUsize,
    /// Requests being served now (read, not yet answered).
    pub serving: AtomicUsize,
    /// Connections in their handshake closed to admit newer ones (budget full).
    pub evicted: AtomicU64,
    /// Connections closed for not finishing the handshake in time.
    pub handshake_expired: AtomicU64,
    /// Authenticated connections refused because `max_connections` were open.
    pub refused_busy: AtomicU64,
    /// Authenticated connections closed after `idle_timeout` without a request.
    pub idle_closed: AtomicU64,
    /// Bytes of receive buffers held by all connections now.
    pub buffer_bytes: AtomicUsize,
}

/// What every connection thread of one server shares.
pub(crate) struct Shared {
    pub service: Arc<dyn Service>,
    pub shutdown: Arc<AtomicBool>,
    pub limits: Limits,
    pub stats: Arc<ConnStats>,
    /// The server's TLS identity, if it has one (and whether plain connections are
    /// refused).
    pub tls: Option<TlsServer>,
}

/// Serves `listener` until `shutdown` is set, with the [`Limits`] of
/// `crate::limits`. Blocks the calling thread.
pub fn serve(
    listener: TcpListener,
    secret: Secret,
    service: Arc<dyn Service>,
    shutdown: Arc<AtomicBool>,
) -> std::io::Result<()> {
    let stats = Arc::new(ConnStats::default());
    serve_with(
        listener,
        secret,
        service,
        shutdown,
        Limits::default(),
        stats,
    )
}

/// [`serve`] with chosen limits (tests use small ones to play misbehaving peers) and
/// counters the caller can read.
pub fn serve_with(
    listener: TcpListener,
    secret: Secret,
    service: Arc<dyn Service>,
    shutdown: Arc<AtomicBool>,
    limits: Limits,
    stats: Arc<ConnStats>,
) -> std::io::Result<()> {
    serve_tls(listener, secret, service, shutdown, limits, stats, None)
}

/// [`serve_with`] with a TLS identity: connections that open with a TLS handshake get
/// TLS (see tls.rs); with [`TlsServer::required`], plain ones are refused.
pub fn serve_tls(
    listener: TcpListener,
    secret: Secret,
    service: Arc<dyn Service>,
    shutdown: Arc<AtomicBool>,
    limits: Limits,
    stats: Arc<ConnStats>,
    tls: Option<TlsServer>,
) -> std::io::Result<()> {
    limits.check();
    if let Some(t) = &tls {
        let how = if t.required {
            "TLS required: plain connections are refused"
        } else {
            "TLS accepted beside plain connections"
        };
        tracing::info!("{how}");
    }
    let nofile = crate::limits::raise_nofile_limit();
    tracing::debug!("open file limit {nofile}");
    let shared = Arc::new(Shared {
        service,
        shutdown,
        limits,
        stats,
        tls,
    });
    let served = Acceptor::new(listener, secret, shared.clone())?.run();
    let deadline = Instant::now() + STOP_WAIT;
    let serving = || shared.stats.serving.load(Ordering::SeqCst);
    while serving() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    if serving() > 0 {
        tracing::warn!("stopping with {} requests not answered yet", serving());
    }
    shared.service.stop();
    served
}

/// Counts a request in [`ConnStats::serving`] from when it is read until it is answered.
struct Serving<'a>(&'a ConnStats);

impl<'a> Serving<'a> {
    fn new(stats: &'a ConnStats) -> Serving<'a> {
        stats.serving.fetch_add(1, Ordering::SeqCst);
        Serving(stats)
    }
}

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        self.0.serving.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts an authenticated connection while it lives, also when its thread unwinds.
struct Slot(Arc<ConnStats>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.authenticated.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Starts the thread of a connection that has just proved it knows the secret; the
/// thread answers its Auth (request `auth_id`) with Done. Refuses with `Busy` when
/// `max_connections` are open.
pub(crate) fn start_connection(
    mut stream: Stream,
    peer: SocketAddr,
    auth_id: u64,
    token: Option<Token>,
    shared: &Arc<Shared>,
) {
    let (limits, stats) = (&shared.limits, &shared.stats);
    let _ = stream.tcp().set_nonblocking(false);
    let _ = stream.tcp().set_write_timeout(Some(limits.peer_timeout));
    if stats.authenticated.load(Ordering::Relaxed) >= limits.max_connections {
        let n = limits.max_connections;
        tracing::warn!("refusing connection from {peer}: {n} connections open");
        stats.refused_busy.fetch_add(1, Ordering::Relaxed);
        let err = WireError::new(
            ErrorCode::Busy,
            format!("server busy: {n} connections open"),
        );
        let _ = send_reply(&mut stream, auth_id, Opcode::Auth, Reply::err(err));
        return;
    }
    stats.authenticated.fetch_add(1, Ordering::Relaxed);
    let slot = Slot(stats.clone());
    let sh = shared.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("conn-{peer}"))
        .spawn(move || {
            let _slot = slot;
            if let Err(why) = connection(stream, peer, auth_id, token, &sh) {
                tracing::info!("connection from {peer} closed: {why}");
            }
        });
    if let Err(e) = spawned {
        // The stream went down with the closure: the peer sees its Auth unanswered.
        tracing::error!("cannot start a thread for {peer}: {e}");
    }
}

/// A connection's receive buffers, reused from request to request so that large writes
/// cost no allocation; counted in [`ConnStats::buffer_bytes`] and shrunk to
/// `kept_buffer_bytes` when the connection goes idle.
struct Buffers {
    body: Vec<u8>,
    data: Vec<u8>,
    /// A compressed data section before it is decoded into `data`.
    packed: Vec<u8>,
    held: usize,
    stats: Arc<ConnStats>,
}

impl Buffers {
    fn new(stats: Arc<ConnStats>) -> Buffers {
        Buffers {
            body: Vec::new(),
            data: Vec::new(),
            packed: Vec::new(),
            held: 0,
            stats,
        }
    }

    /// Brings the server's count up to date with this connection's capacity.
    fn note(&mut self) {
        let now = self.body.capacity() + self.data.capacity() + self.packed.capacity();
        if now == self.held {
            return; // the usual case: no write to the counter all threads share
        }
        if now > self.held {
            self.stats
                .buffer_bytes
                .fetch_add(now - self.held, Ordering::Relaxed);
        } else {
            self.stats
                .buffer_bytes
                .fetch_sub(self.held - now, Ordering::Relaxed);
        }
        self.held = now;
    }

    fn shrink(&mut self, kept: usize) {
        for b in [&mut self.body, &mut self.data, &mut self.packed] {
            if b.capacity() > kept {
                b.truncate(kept);
                b.shrink_to(kept);
            }
        }
        self.note();
    }
}

impl Drop for Buffers {
    fn drop(&mut self) {
        self.body = Vec::new();
        self.data = Vec::new();
        self.packed = Vec::new();
        self.note();
    }
}

/// Serves one authenticated connection until the peer leaves, misbehaves, stays idle
/// past `idle_timeout`, or the server shuts down.
fn connection(
    mut stream: Stream,
    peer: SocketAddr,
    auth_id: u64,
    token: Option<Token>,
    shared: &Shared,
) -> Result<(), String> {
    let limits = &shared.limits;
    stream.tcp().set_nodelay(true).map_err(|e| e.to_string())?;
    // Reads poll with a short timeout so that shutdown and idleness are noticed; a frame
    // that has begun gets until its deadline (see frame::read_header).
    stream
        .tcp()
        .set_read_timeout(Some(limits.idle_poll))
        .map_err(|e| e.to_string())?;
    send_reply(
        &mut stream,
        auth_id,
        Opcode::Auth,
        Reply::ok(Response::Done),
    )
    .map_err(|e| e.to_string())?;
    let mut info = ConnInfo::new(peer);
    info.token = token.map(Arc::new);
    // What the client asked for with SetCompression: how answers' data is sent.
    let mut codec = Codec::Off;
    let mut bufs = Buffers::new(shared.stats.clone());
    let mut last = Instant::now();
    let mut idle = true;
    loop {
        let (header, deadline) = match read_header(&mut stream, limits.peer_timeout) {
            Ok(x) => x,
            Err(ReadError::Idle) if shared.shutdown.load(Ordering::Relaxed) => return Ok(()),
            Err(ReadError::Idle) => {
                if !idle {
                    bufs.shrink(limits.kept_buffer_bytes);
                    idle = true;
                }
                if last.elapsed() >= limits.idle_timeout {
                    shared.stats.idle_closed.fetch_add(1, Ordering::Relaxed);
                    return Err(goodbye(&mut stream, last.elapsed()));
                }
                continue;
            }
            Err(ReadError::Closed) => return Ok(()),
            Err(ReadError::Frame(f)) => return Err(refuse(&mut stream, peer, 0, None, &f)),
            Err(e) => return Err(e.to_string()),
        };
        idle = false;
        let (mut env, data_len) = match read_request(&mut stream, &header, deadline, &mut bufs) {
            Ok(x) => x,
            Err(ReadError::Frame(f)) => {
                let op = Opcode::from_u16(header.opcode);
                return Err(refuse(&mut stream, peer, header.request_id, op, &f));
            }
            Err(e) => return Err(e.to_string()),
        };
        bufs.note();
        let _serving = Serving::new(&shared.stats);
        let opcode = env.req.opcode();
        // A token's requests act as its user, whatever they claim, and only while it is
        // current and not revoked.
        let scoped = info.token.as_ref().map(|t| {
            env.cred = stripefs_wire::Cred {
                uid: t.uid,
                gid: t.gid,
                groups: Vec::new(),
            };
            if t.expired(crate::token::now_s()) {
                Err(WireError::new(
                    ErrorCode::PermissionDenied,
                    format!("token {:016x} has expired", t.id),
                ))
            } else {
                shared.service.check_token(t)
            }
        });
        let reply = match (Valid::check(env, data_len as u32), scoped) {
            (Err(e), _) => Reply::err(e),
            (Ok(_), Some(Err(e))) => Reply::err(e),
            (Ok(valid), _) if valid.opcode().group() == Group::ConnectionOp => {
                let Route::ConnectionOp(op) = valid.into_env().req.route() else {
                    unreachable!("its row's group is ConnectionOp")
                };
                let ours = shared.service.features();
                if ours.is_none() && matches!(op, ConnectionOp::Features { .. }) {
                    let f = FrameError::BadOpcode(opcode as u16);
                    return Err(refuse(&mut stream, peer, header.request_id, None, &f));
                }
                connection_op(op, &mut info, &mut codec, ours.unwrap_or_default())
            }
            (Ok(valid), _) => {
                let data = &bufs.data[..data_len];
                handle_guarded(&*shared.service, &info, valid, data)
            }
        };
        if header.wants_reply() {
            send_reply_with(&mut stream, header.request_id, opcode, reply, codec)
                .map_err(|e| e.to_string())?;
        } else if let Err(e) = reply.result {
            tracing::warn!(
                "{} from {peer} (no reply wanted) failed: {e}",
                opcode.name()
            );
        }
        last = Instant::now();
        if shared.shutdown.load(Ordering::Relaxed) {
            return Ok(());
        }
    }
}

/// Closes a connection that stayed idle: a `ConnectionClosed` notice (request id 0)
/// tells the client that nothing it sends now is handled, so it may resend anything on
/// a fresh connection; then the server reads (and drops) what the peer still sends until
/// it closes, briefly, so that the notice is not destroyed by a reset.
fn goodbye(stream: &mut Stream, idle: Duration) -> String {
    let why = format!("idle for {} ms: closed by the server", idle.as_millis());
    let err = WireError::new(ErrorCode::ConnectionClosed, why.clone());
    let frame = encode_response(0, Opcode::Ping, &Err(err), 0);
    let _ = write_all_parts(stream, &[&frame]);
    stream.close_notify();
    let _ = stream.tcp().shutdown(std::net::Shutdown::Write);
    let start = Instant::now();
    let _ = stream
        .tcp()
        .set_read_timeout(Some(Duration::from_millis(100)));
    let mut sink = [0u8; 4096];
    while start.elapsed() < Duration::from_secs(1) {
        match std::io::Read::read(stream, &mut sink) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    why
}

/// The requests the rpc layer serves itself: the handshake's (refused once it is done)
/// and the connection's settings.
fn connection_op(
    op: ConnectionOp,
    info: &mut ConnInfo,
    codec: &mut Codec,
    ours: Features,
) -> Reply {
    match op {
        ConnectionOp::Hello { .. }
        | ConnectionOp::TokenHello { .. }
        | ConnectionOp::Auth { .. } => Reply::err(WireError::new(
            ErrorCode::UnexpectedMessage,
            "already authenticated",
        )),
        ConnectionOp::ClientHost { host } => {
            info.host = Some(host);
            Reply::ok(Response::Done)
        }
        ConnectionOp::SetCompression { codec: c, level } => match Codec::from_wire(c, level) {
            Ok(c) => {
                *codec = c;
                Reply::ok(Response::Done)
            }
            Err(e) => Reply::err(e),
        },
        ConnectionOp::Features { features } => {
            info.features = features;
            Reply::ok(Response::Features { features: ours })
        }
    }
}

/// Runs the handler; a panic (a bug) becomes an `Internal` error for that request only.
/// A success the operation's row does not allow is a bug of the server too: a debug
/// build stops on it, a release build answers `Internal` instead of misleading the client.
fn handle_guarded(service: &dyn Service, info: &ConnInfo, req: Valid, data: &[u8]) -> Reply {
    let op = req.opcode();
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        service.handle(info, req, data)
    })) {
        Ok(r) => match &r.result {
            Ok(resp) if service.strict_replies() && !op.answers(resp.kind()) => {
                debug_assert!(false, "{} answered {:?}", op.name(), resp.kind());
                tracing::error!(
                    "{} answered {:?}, which its row does not allow",
                    op.name(),
                    resp.kind()
                );
                Reply::err(WireError::new(
                    ErrorCode::Internal,
                    format!("internal error: {} answered {:?}", op.name(), resp.kind()),
                ))
            }
            _ => r,
        },
        Err(_) => {
            tracing::error!("handler for {} from {} panicked", op.name(), info.peer);
            Reply::err(WireError::new(
                ErrorCode::Internal,
                format!("internal error handling {}", op.name()),
            ))
        }
    }
}

/// Reads a request's body and bulk data before the frame's `deadline`; the data lands
/// (decompressed, if the frame says it is compressed) in the connection's reused buffer.
/// Returns the request and its data's length.
fn read_request(
    stream: &mut Stream,
    header: &Header,
    deadline: Option<Instant>,
    bufs: &mut Buffers,
) -> Result<(Envelope, usize), ReadError> {
    bufs.body.resize(header.body_len as usize, 0);
    read_exact(stream, &mut bufs.body, deadline)?;
    let env = match decode_request(header, &bufs.body) {
        Ok(env) => env,
        Err(f) => {
            // Consume the bulk data so the error response is read in order by the peer.
            skip(stream, header.data_len as u64, deadline)?;
            return Err(ReadError::Frame(f));
        }
    };
    let n = header.data_len as usize;
    if header.flags & FLAG_COMPRESSED == 0 {
        if bufs.data.len() < n {
            bufs.data.resize(n, 0);
        }
        read_exact(stream, &mut bufs.data[..n], deadline)?;
        return Ok((env, n));
    }
    // Compressed: whatever the peer claims, the decoded size is bounded by the frame
    // limit (raw_len), and data that does not decode is a bad frame that ends the
    // connection, never a request handled with wrong bytes.
    let mut packed = std::mem::take(&mut bufs.packed);
    packed.resize(n, 0);
    let read = read_exact(stream, &mut packed, deadline);
    let out = read.and_then(|()| {
        let bad = |e: WireError| ReadError::Frame(FrameError::BadCompressed(e.message));
        let raw = crate::compress::raw_len(&packed).map_err(bad)?;
        if bufs.data.len() < raw {
            bufs.data.resize(raw, 0);
        }
        crate::compress::decompress_into(&packed, &mut bufs.data[..raw]).map_err(bad)?;
        Ok((env, raw))
    });
    packed.clear();
    bufs.packed = packed;
    out
}

pub(crate) fn send_reply(
    stream: &mut impl crate::payload::ReplyStream,
    request_id: u64,
    opcode: Opcode,
    reply: Reply,
) -> std::io::Result<()> {
    send_reply_with(stream, request_id, opcode, reply, Codec::Off)
}

/// [`send_reply`] with the connection's codec: data that shrinks goes compressed (read
/// into memory first, so a compressed answer is never sent with sendfile).
fn send_reply_with(
    stream: &mut impl crate::payload::ReplyStream,
    request_id: u64,
    opcode: Opcode,
    reply: Reply,
    codec: Codec,
) -> std::io::Result<()> {
    let (result, data) = match reply.result {
        Ok(r) => (Ok(r), reply.data),
        Err(e) => (Err(e), Payload::None),
    };
    if codec != Codec::Off && data.len() >= crate::compress::MIN_COMPRESS_BYTES as u64 {
        let plain = data.into_bytes()?;
        if let Some(packed) = codec.compress(&plain) {
            let len = u32::try_from(packed.len()).expect("compressed data is smaller");
            let frame = encode_response_flags(request_id, opcode, &result, len, FLAG_COMPRESSED);
            return crate::payload::send(stream, &frame, Payload::Bytes(packed));
        }
        let len = u32::try_from(plain.len()).expect("a reply's data fits a frame");
        let frame = encode_response(request_id, opcode, &result, len);
        return crate::payload::send(stream, &frame, Payload::Bytes(plain));
    }
    let len = u32::try_from(data.len()).expect("a reply's data fits a frame");
    let frame = encode_response(request_id, opcode, &result, len);
    crate::payload::send(stream, &frame, data)
}

/// Answers a bad frame with an error naming the reason and logs it; returns the reason
/// the connection ends.
pub(crate) fn refuse(
    stream: &mut impl std::io::Write,
    peer: SocketAddr,
    request_id: u64,
    opcode: Option<Opcode>,
    f: &FrameError,
) -> String {
    tracing::warn!(
        "bad frame from {peer}: {f} (reason {}); closing",
        f.number()
    );
    let err = WireError::new(f.code(), format!("bad frame: {f} (reason {})", f.number()));
    let frame = encode_response(request_id, opcode.unwrap_or(Opcode::Ping), &Err(err), 0);
    let _ = write_all_parts(stream, &[&frame]);
    format!("bad frame: {f}")
}
