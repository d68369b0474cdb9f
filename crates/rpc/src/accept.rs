//! The acceptor: one thread accepts every connection and drives its handshake (Hello,
//! challenge, Auth) over nonblocking sockets with readiness polling, so that a peer
//! that has not proved it knows the cluster secret costs no thread, and counts toward
//! no limit a real client needs.
//!
//! Unauthenticated connections are bounded twice: in all (`max_unauth`) and per IP
//! address (`max_unauth_per_addr`). A new connection that finds a budget full closes
//! one already in it, never itself: the oldest of those that have not yet sent a whole
//! Hello, and only when there are none, the oldest of those that were sent a challenge.
//! A real client sends its Hello at once and answers the challenge within one round
//! trip, so a flood of silent or trickling connections only displaces itself, also
//! when it comes from the real client's own address and reopens connections faster
//! than the client's round trip (tens of thousands a second on loopback). Each
//! connection must finish the whole handshake within `handshake_deadline` of being
//! accepted, however it spreads its bytes.
//!
//! A connection that authenticates leaves the acceptor for a thread of its own
//! (`server::start_connection`).

use crate::auth::{random_nonce, Secret};
use crate::limits::{LISTEN_BACKLOG, MAX_HANDSHAKE_BODY_BYTES};
use crate::server::{refuse, send_reply, start_connection, Reply, Service, Shared};
use crate::tls::{Stream, TlsServer, TLS_RECORD_HANDSHAKE};
use crate::token::Token as Scope;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use rustls::ServerConnection;
use std::collections::{BTreeSet, HashMap};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use stripefs_wire::{
    decode_request, encode_response, Envelope, ErrorCode, FrameError, Header, Opcode, Request,
    Response, WireError, HEADER_LEN,
};

const LISTENER: Token = Token(usize::MAX);
/// How often the acceptor logs what its budgets did (evictions, expiries), at most.
const SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// Where a connection is in its handshake.
enum Stage {
    Hello,
    Auth {
        nonce_c: [u8; 32],
        nonce_s: [u8; 32],
        /// A token's key and scope (TokenHello); `None`: the cluster secret (Hello).
        token: Option<(Secret, Scope)>,
    },
}

struct Pending {
    stream: TcpStream,
    peer: SocketAddr,
    since: Instant,
    /// Bytes received and not yet consumed (at most one handshake frame).
    buf: Vec<u8>,
    stage: Stage,
    link: Link,
}

/// What a connection speaks, known from its first byte.
enum Link {
    Unknown,
    Plain,
    /// Plain on a server that requires TLS: its Hello is answered with the reason.
    PlainRefused,
    Tls(Box<ServerConnection>),
}

/// Why a plain connection to a TLS-only server is refused.
pub(crate) const TLS_REQUIRED: &str = "this server requires TLS (require_tls = true): connect \
     with TLS (tls_ca in the client's cluster file; `cluster up --tls` writes it)";

/// What a step of a handshake came to.
enum Step {
    /// Waiting for more bytes.
    Wait,
    /// Refused or gone; the reason, for the log (already logged when `None`).
    Close(Option<String>),
    /// Auth with a good proof arrived, request id given: hand the connection over.
    Authenticated(u64, Option<Scope>),
}

/// Why a frame of the handshake is refused, with the answer it gets.
enum Refusal {
    Frame(u64, Option<Opcode>, FrameError),
    Auth(u64, Opcode, String),
}

pub(crate) struct Acceptor {
    poll: Poll,
    listener: TcpListener,
    secret: Secret,
    shared: Arc<Shared>,
    pending: HashMap<u64, Pending>,
    /// Ids of pending connections, oldest first (ids increase with acceptance).
    order: BTreeSet<u64>,
    /// Pending connections in the order they are closed when a budget is full:
    /// (tier, id), see [`Pending::tier`].
    victims: BTreeSet<(u8, u64)>,
    by_addr: HashMap<IpAddr, BTreeSet<(u8, u64)>>,
    next_id: u64,
    /// Accepting stopped at a lack of file descriptors: try again without an event.
    accept_again: bool,
    logged: (Instant, u64, u64),
}

impl Acceptor {
    pub fn new(
        listener: std::net::TcpListener,
        secret: Secret,
        shared: Arc<Shared>,
    ) -> io::Result<Acceptor> {
        listener.set_nonblocking(true)?;
        // A deeper queue than std's 128: bursts wait for the acceptor instead of having
        // their SYNs dropped (a client then waits a second to retry).
        // Listening again on a listening socket only changes its backlog; a refusal
        // keeps std's.
        let _ = rustix::net::listen(&listener, LISTEN_BACKLOG);
        let mut listener = TcpListener::from_std(listener);
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        Ok(Acceptor {
            poll,
            listener,
            secret,
            shared,
            pending: HashMap::new(),
            order: BTreeSet::new(),
            victims: BTreeSet::new(),
            by_addr: HashMap::new(),
            next_id: 0,
            accept_again: false,
            logged: (Instant::now(), 0, 0),
        })
    }

    /// Runs until the shutdown flag is set; pending handshakes are dropped then.
    pub fn run(mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        while !self.shared.shutdown.load(Ordering::Relaxed) {
            let wait = self.next_wake();
            match self.poll.poll(&mut events, Some(wait)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            let mut accept = std::mem::take(&mut self.accept_again);
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => accept = true,
                    Token(id) => self.advance(id as u64),
                }
            }
            if accept {
                self.accept_all();
            }
            self.expire();
            self.log_summary(false);
        }
        self.log_summary(true);
        Ok(())
    }

    /// Until the oldest handshake's deadline, or the shutdown poll.
    fn next_wake(&self) -> Duration {
        let limits = &self.shared.limits;
        let mut wait = limits.idle_poll;
        if self.accept_again {
            wait = Duration::from_millis(10);
        }
        if let Some(p) = self.order.first().and_then(|id| self.pending.get(id)) {
            let left =
                (p.since + limits.handshake_deadline).saturating_duration_since(Instant::now());
            wait = wait.min(left + Duration::from_millis(1));
        }
        wait
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) => self.admit(stream, peer),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    // Out of descriptors: free a handshake's, or wait a little.
                    match self.victims.first().copied() {
                        Some((_, victim)) => self.evict(victim),
                        None => {
                            tracing::warn!("accept failed: {e}");
                            self.accept_again = true;
                            return;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => {}
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    self.accept_again = true;
                    return;
                }
            }
        }
    }

    /// Takes a new connection into the handshake, closing one of its address or of all
    /// (the first in `victims` order) if a budget is full.
    fn admit(&mut self, mut stream: TcpStream, peer: SocketAddr) {
        let limits = &self.shared.limits;
        let ip = peer.ip();
        let of_addr = self.by_addr.get(&ip).map_or(0, |s| s.len());
        if of_addr >= limits.max_unauth_per_addr {
            let (_, victim) = *self.by_addr[&ip]
                .first()
                .expect("a full budget has members");
            self.evict(victim);
        }
        if self.order.len() >= self.shared.limits.max_unauth {
            let (_, victim) = *self.victims.first().expect("a full budget has members");
            self.evict(victim);
        }
        let id = self.next_id;
        self.next_id += 1;
        let _ = stream.set_nodelay(true);
        let token = Token(usize::try_from(id).expect("ids fit in a usize"));
        if let Err(e) = self
            .poll
            .registry()
            .register(&mut stream, token, Interest::READABLE)
        {
            tracing::warn!("cannot watch the connection from {peer}: {e}");
            return;
        }
        let p = Pending {
            stream,
            peer,
            since: Instant::now(),
            buf: Vec::new(),
            stage: Stage::Hello,
            link: Link::Unknown,
        };
        let key = (p.tier(), id);
        self.pending.insert(id, p);
        self.order.insert(id);
        self.victims.insert(key);
        self.by_addr.entry(ip).or_default().insert(key);
        self.count();
        // Bytes that came with the connection raise no edge of their own: look now.
        self.advance(id);
    }

    fn count(&self) {
        let n = self.order.len();
        self.shared.stats.pending.store(n, Ordering::Relaxed);
    }

    /// Removes a pending connection from every index; the caller closes or hands it on.
    fn take(&mut self, id: u64) -> Option<Pending> {
        let mut p = self.pending.remove(&id)?;
        self.order.remove(&id);
        let key = (p.tier(), id);
        self.victims.remove(&key);
        let ip = p.peer.ip();
        if let Some(set) = self.by_addr.get_mut(&ip) {
            set.remove(&key);
            if set.is_empty() {
                self.by_addr.remove(&ip);
            }
        }
        let _ = self.poll.registry().deregister(&mut p.stream);
        self.count();
        Some(p)
    }

    fn evict(&mut self, id: u64) {
        if let Some(p) = self.take(id) {
            self.shared.stats.evicted.fetch_add(1, Ordering::Relaxed);
            tracing::debug!("closed the handshake of {} to admit a newer one", p.peer);
        }
    }

    /// Closes the handshakes past their deadline (the oldest are first).
    fn expire(&mut self) {
        let deadline = self.shared.limits.handshake_deadline;
        while let Some(&id) = self.order.first() {
            if self.pending[&id].since.elapsed() < deadline {
                return;
            }
            if let Some(p) = self.take(id) {
                self.shared
                    .stats
                    .handshake_expired
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    "connection from {}: no handshake within {deadline:?}; closed",
                    p.peer
                );
            }
        }
    }

    /// Logs, at most every [`SUMMARY_EVERY`], how many handshakes the budgets closed:
    /// one line for a flood, not one per connection.
    fn log_summary(&mut self, now: bool) {
        if !now && self.logged.0.elapsed() < SUMMARY_EVERY {
            return;
        }
        let st = &self.shared.stats;
        let evicted = st.evicted.load(Ordering::Relaxed);
        let expired = st.handshake_expired.load(Ordering::Relaxed);
        let (de, dx) = (evicted - self.logged.1, expired - self.logged.2);
        if de + dx > 0 {
            tracing::warn!(
                "unauthenticated connections: {de} closed to admit newer ones (budget full), \
                 {dx} closed for not authenticating within {:?}; {} in handshake now",
                self.shared.limits.handshake_deadline,
                self.order.len()
            );
        }
        self.logged = (Instant::now(), evicted, expired);
    }

    /// Reads what a connection sent and answers it, as far as it goes.
    fn advance(&mut self, id: u64) {
        let Some(p) = self.pending.get_mut(&id) else {
            return; // evicted earlier in this round of events
        };
        let tier = p.tier();
        match p.advance(
            &self.secret,
            &*self.shared.service,
            self.shared.tls.as_ref(),
        ) {
            Step::Wait => {
                let (now, ip) = (p.tier(), p.peer.ip());
                if now != tier {
                    self.victims.remove(&(tier, id));
                    self.victims.insert((now, id));
                    let set = self.by_addr.get_mut(&ip).expect("pending has its address");
                    set.remove(&(tier, id));
                    set.insert((now, id));
                }
            }
            Step::Close(why) => {
                if let Some(p) = self.take(id) {
                    if let Some(why) = why {
                        tracing::info!("connection from {} closed: {why}", p.peer);
                    }
                }
            }
            Step::Authenticated(auth_id, token) => {
                if let Some(p) = self.take(id) {
                    let std = std::net::TcpStream::from(p.stream);
                    let stream = match p.link {
                        Link::Tls(conn) => {
                            Stream::Server(Box::new(rustls::StreamOwned::new(*conn, std)))
                        }
                        _ => Stream::Plain(std),
                    };
                    start_connection(stream, p.peer, auth_id, token, &self.shared);
                }
            }
        }
    }
}

impl Pending {
    /// Which connections a full budget closes first (lower first, then the oldest): 0
    /// before a whole Hello arrived (silent or trickling), 1 once challenged.
    fn tier(&self) -> u8 {
        match self.stage {
            Stage::Hello => 0,
            Stage::Auth { .. } => 1,
        }
    }

    fn advance(&mut self, secret: &Secret, service: &dyn Service, tls: Option<&TlsServer>) -> Step {
        loop {
            match self.parse() {
                Err(r) => return self.refuse(r),
                Ok(Some((h, env))) => match self.answer(secret, service, h, env) {
                    Step::Wait => continue,
                    other => return other,
                },
                Ok(None) => {}
            }
            let mut chunk = [0u8; 2048];
            match self.read_some(&mut chunk, tls) {
                Ok(0) => return self.closed_early(),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Wait,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Step::Close(Some(e.to_string())),
            }
        }
    }

    /// Reads what the peer sent, through TLS if it opened with a TLS handshake (decided
    /// by its first byte); `WouldBlock` when nothing more is there.
    fn read_some(&mut self, out: &mut [u8], tls: Option<&TlsServer>) -> io::Result<usize> {
        if matches!(self.link, Link::Unknown) {
            let n = self.stream.read(out)?;
            if n == 0 {
                return Ok(0);
            }
            if out[0] != TLS_RECORD_HANDSHAKE {
                self.link = match tls {
                    Some(t) if t.required => Link::PlainRefused,
                    _ => Link::Plain,
                };
                return Ok(n);
            }
            let Some(tls) = tls else {
                return Err(io::Error::other(
                    "the client began a TLS handshake, but this server has no TLS certificate \
                     (tls_cert and tls_key in its cluster file; `cluster up --tls`)",
                ));
            };
            let mut conn = tls.session().map_err(io::Error::other)?;
            let mut rest = &out[..n];
            while !rest.is_empty() {
                conn.read_tls(&mut rest)?;
                tls_progress(&mut conn, &mut self.stream)?;
            }
            self.link = Link::Tls(Box::new(conn));
        }
        let Link::Tls(conn) = &mut self.link else {
            return self.stream.read(out);
        };
        loop {
            match conn.reader().read(out) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            let n = conn.read_tls(&mut self.stream)?;
            tls_progress(conn, &mut self.stream)?;
            if n == 0 {
                // The end: the reader now says so (or hands over what came last).
                match conn.reader().read(out) {
                    Ok(n) => return Ok(n),
                    Err(_) => return Ok(0),
                }
            }
        }
    }

    /// Where answers go: into the TLS session, if there is one.
    fn out(&mut self) -> PendingOut<'_> {
        PendingOut {
            stream: &mut self.stream,
            tls: match &mut self.link {
                Link::Tls(c) => Some(c),
                _ => None,
            },
        }
    }

    /// The next whole handshake frame in the buffer, if there is one. Only small Hello
    /// and Auth frames are read, so that an unauthenticated peer cannot make the server
    /// allocate large buffers.
    fn parse(&mut self) -> Result<Option<(Header, Envelope)>, Refusal> {
        if self.buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let h = Header::decode(&self.buf[..HEADER_LEN]).map_err(|f| Refusal::Frame(0, None, f))?;
        let op = Opcode::from_u16(h.opcode);
        let handshake_op = matches!(op, Some(Opcode::Hello | Opcode::TokenHello | Opcode::Auth));
        if !handshake_op || h.data_len != 0 || h.body_len > MAX_HANDSHAKE_BODY_BYTES {
            let op = op.unwrap_or(Opcode::Hello);
            let why = if handshake_op {
                format!("oversized {} frame", op.name())
            } else {
                format!("{} before authenticating: not Hello or Auth", op.name())
            };
            return Err(Refusal::Auth(h.request_id, op, why));
        }
        let end = HEADER_LEN + h.body_len as usize;
        if self.buf.len() < end {
            return Ok(None);
        }
        let env = decode_request(&h, &self.buf[HEADER_LEN..end])
            .map_err(|f| Refusal::Frame(h.request_id, op, f))?;
        self.buf.drain(..end);
        if !self.buf.is_empty() {
            // A client waits for each answer of the handshake before it sends again.
            let why = format!(
                "sent more after {} before its answer",
                env.req.opcode().name()
            );
            return Err(Refusal::Auth(h.request_id, env.req.opcode(), why));
        }
        Ok(Some((h, env)))
    }

    /// Answers one handshake frame.
    fn answer(&mut self, secret: &Secret, service: &dyn Service, h: Header, env: Envelope) -> Step {
        if matches!(self.link, Link::PlainRefused) {
            let why = TLS_REQUIRED.to_string();
            return self.refuse(Refusal::Auth(h.request_id, env.req.opcode(), why));
        }
        let (nonce_c, token) = match (&self.stage, env.req) {
            (Stage::Hello, Request::Hello { nonce }) => (nonce, None),
            (Stage::Hello, Request::TokenHello { nonce, token }) => {
                // Checked before the challenge: the token is well formed, current and not
                // revoked; whether it was signed with our secret the proof will tell.
                let t = match Scope::from_payload(&token) {
                    Ok(t) => t,
                    Err(why) => {
                        return self.refuse(Refusal::Auth(h.request_id, Opcode::TokenHello, why))
                    }
                };
                if t.expired(crate::token::now_s()) {
                    let why = format!("token {:016x} has expired", t.id);
                    return self.refuse(Refusal::Auth(h.request_id, Opcode::TokenHello, why));
                }
                if let Err(e) = service.check_token(&t) {
                    return self.refuse(Refusal::Auth(h.request_id, Opcode::TokenHello, e.message));
                }
                (nonce, Some((crate::token::key(secret, &token), t)))
            }
            (
                Stage::Auth {
                    nonce_c,
                    nonce_s,
                    token,
                },
                Request::Auth { proof },
            ) => {
                let key = token.as_ref().map_or(secret, |t| &t.0);
                return if key.verify_client_proof(nonce_s, nonce_c, &proof) {
                    Step::Authenticated(h.request_id, token.as_ref().map(|t| t.1.clone()))
                } else {
                    let why = match token {
                        Some((_, t)) => format!(
                            "token {:016x} was not made with this cluster's secret, or was altered",
                            t.id
                        ),
                        None => "wrong cluster secret".into(),
                    };
                    self.refuse(Refusal::Auth(h.request_id, Opcode::Auth, why))
                };
            }
            (Stage::Hello, req) => {
                return self.refuse(Refusal::Auth(
                    h.request_id,
                    req.opcode(),
                    "first message was not Hello".into(),
                ))
            }
            (Stage::Auth { .. }, req) => {
                return self.refuse(Refusal::Auth(
                    h.request_id,
                    req.opcode(),
                    "second message was not Auth".into(),
                ))
            }
        };
        {
            {
                let key = token.as_ref().map_or(secret, |t: &(Secret, Scope)| &t.0);
                let nonce_s = random_nonce();
                let proof = key.server_proof(&nonce_c, &nonce_s);
                let challenge = Ok(Response::Challenge {
                    nonce: nonce_s,
                    proof,
                });
                let op = if token.is_some() {
                    Opcode::TokenHello
                } else {
                    Opcode::Hello
                };
                let frame = encode_response(h.request_id, op, &challenge, 0);
                // A fresh socket's send buffer takes a frame this small at once; a peer
                // whose buffer is full is not reading and is dropped.
                match self.out().write(&frame) {
                    Ok(n) if n == frame.len() => {}
                    Ok(_) => return Step::Close(Some("does not read its challenge".into())),
                    Err(e) => return Step::Close(Some(e.to_string())),
                }
                self.stage = Stage::Auth {
                    nonce_c,
                    nonce_s,
                    token,
                };
                Step::Wait
            }
        }
    }

    /// The peer closed before finishing the handshake.
    fn closed_early(&mut self) -> Step {
        if !self.buf.is_empty() {
            let need = if self.buf.len() < HEADER_LEN {
                HEADER_LEN
            } else {
                let h = Header::decode(&self.buf[..HEADER_LEN]).ok();
                HEADER_LEN + h.map_or(0, |h| h.body_len as usize)
            };
            let f = FrameError::Truncated {
                got: self.buf.len(),
                need,
            };
            return self.refuse(Refusal::Frame(0, None, f));
        }
        match self.stage {
            Stage::Hello => Step::Close(Some("closed before Hello".into())),
            // A client that does not know the cluster secret hangs up here, after
            // checking our proof; say so, since its side of the story is elsewhere.
            Stage::Auth { .. } => {
                tracing::warn!(
                    "connection from {}: no Auth after the challenge (wrong cluster secret?): \
                     connection closed by peer",
                    self.peer
                );
                Step::Close(None)
            }
        }
    }

    /// Answers a refused frame (best effort: the socket is nonblocking) and closes.
    fn refuse(&mut self, r: Refusal) -> Step {
        match r {
            Refusal::Frame(id, op, f) => {
                let peer = self.peer;
                let why = refuse(&mut self.out(), peer, id, op, &f);
                Step::Close(Some(why))
            }
            Refusal::Auth(id, op, why) => {
                tracing::warn!("authentication of {} failed: {why}", self.peer);
                let err = WireError::new(
                    ErrorCode::AuthFailed,
                    format!("authentication failed: {why}"),
                );
                let _ = send_reply(&mut self.out(), id, op, Reply::err(err));
                Step::Close(Some(format!("authentication failed: {why}")))
            }
        }
    }
}

/// Moves a TLS handshake on: processes what arrived and writes what it answers (small:
/// a fresh socket's buffer takes it at once). A failed handshake is an error naming TLS,
/// after a last try to tell the peer.
fn tls_progress(conn: &mut ServerConnection, stream: &mut TcpStream) -> io::Result<()> {
    let processed = conn.process_new_packets().map(|_| ());
    while conn.wants_write() {
        match conn.write_tls(stream) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if processed.is_ok() => return Err(e),
            Err(_) => break,
        }
    }
    processed.map_err(|e| io::Error::other(format!("TLS handshake failed: {e}")))
}

/// A pending connection's answers: written to the socket, or into its TLS session and
/// from there to the socket.
struct PendingOut<'a> {
    stream: &'a mut TcpStream,
    tls: Option<&'a mut Box<ServerConnection>>,
}

impl Write for PendingOut<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.tls {
            None => self.stream.write(buf),
            Some(conn) => {
                conn.writer().write_all(buf)?;
                self.flush()?;
                Ok(buf.len())
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        if let Some(conn) = &mut self.tls {
            while conn.wants_write() {
                conn.write_tls(self.stream)?;
            }
        }
        Ok(())
    }
}

impl crate::payload::ReplyStream for PendingOut<'_> {
    fn socket(&self) -> Option<std::os::fd::RawFd> {
        self.tls.is_none().then(|| self.stream.as_raw_fd())
    }
}
