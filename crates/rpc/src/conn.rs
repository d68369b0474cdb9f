//! The client side of one connection.

use crate::auth::{random_nonce, Secret};
use crate::compress::Codec;
use crate::frame::{read_exact, read_header, skip, write_all_parts, ReadError};
use crate::tls::{Stream, TlsClient};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;
use stripefs_wire::{
    decode_response, encode_request, encode_request_flags, Cred, Envelope, ErrorCode, Features,
    Opcode, Request, Response, WireError, FLAG_COMPRESSED, FLAG_NO_REPLY,
};

/// Default timeout for connecting and for each read and write, in milliseconds.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;

/// One authenticated connection to a server. One request is in flight at a time (or up
/// to [`MAX_PENDING`] with [`Conn::call_many`]), apart from requests sent with
/// [`Conn::send`], which are not answered. After any transport or frame error the
/// connection is *broken*: callers drop it.
pub struct Conn {
    stream: Stream,
    addr: String,
    next_id: u64,
    broken: bool,
    body_buf: Vec<u8>,
    /// Frames of requests [`Conn::defer`]red: they go out with the next request or at
    /// [`Conn::flush`].
    outbox: Vec<u8>,
    /// Deferred frames written with the request in flight: kept until its answer shows
    /// the server read them, so that a server closing the connection unread
    /// (`ConnectionClosed`) loses none of them ([`Conn::take_unhandled`]).
    sent_deferred: Vec<u8>,
    /// How request data is sent ([`Conn::announce`]); the server compresses its
    /// answers' data the same way.
    codec: Codec,
    /// A compressed data section read off the socket, before it is decoded.
    packed_buf: Vec<u8>,
    /// Bulk data bytes written to and read from the socket (after compression).
    wire_sent: u64,
    wire_received: u64,
}

/// Most requests [`Conn::call_many`] sends before it reads their answers.
pub const MAX_PENDING: usize = 32;
/// Largest buffer for compressed answers a connection keeps between calls.
const KEPT_PACKED_BYTES: usize = 1 << 20;
/// Deferred frames are written at once when they reach this many bytes.
pub const MAX_OUTBOX_BYTES: usize = 64 << 10;

impl Conn {
    /// Connects to `addr` and authenticates with `secret`. Every error names `addr`.
    pub fn connect(addr: &str, secret: &Secret, timeout: Duration) -> Result<Conn, WireError> {
        Conn::connect_with(addr, secret, None, timeout, None)
    }

    /// Connects to `addr` and authenticates with a scoped token instead of the secret
    /// (`TokenHello`; see token.rs).
    pub fn connect_token(
        addr: &str,
        token: &crate::token::TokenCred,
        timeout: Duration,
    ) -> Result<Conn, WireError> {
        Conn::connect_with(addr, &token.key, Some(token), timeout, None)
    }

    /// Connects to `addr`, over TLS when `tls` is given (the server's certificate checked
    /// against its CA), and authenticates with `token` if given, else with `secret`.
    pub fn connect_with(
        addr: &str,
        secret: &Secret,
        token: Option<&crate::token::TokenCred>,
        timeout: Duration,
        tls: Option<&TlsClient>,
    ) -> Result<Conn, WireError> {
        let mut conn = Conn::open(addr, timeout, tls)?;
        match token {
            Some(token) => {
                let hello = Request::TokenHello {
                    nonce: random_nonce(),
                    token: token.payload.clone(),
                };
                conn.authenticate(hello, &token.key)?;
            }
            None => {
                let hello = Request::Hello {
                    nonce: random_nonce(),
                };
                conn.authenticate(hello, secret)?;
            }
        }
        Ok(conn)
    }

    /// Whether the connection is encrypted (TLS).
    pub fn is_tls(&self) -> bool {
        self.stream.is_tls()
    }

    /// A connected, not yet authenticated connection.
    fn open(addr: &str, timeout: Duration, tls: Option<&TlsClient>) -> Result<Conn, WireError> {
        let unreachable = |why: String| {
            WireError::new(
                ErrorCode::Unreachable,
                format!("server {addr} unreachable: {why}"),
            )
        };
        let sockaddrs: Vec<SocketAddr> = addr
            .to_socket_addrs()
            .map_err(|e| unreachable(format!("bad address: {e}")))?
            .collect();
        let sa = sockaddrs
            .first()
            .ok_or_else(|| unreachable("address resolves to nothing".into()))?;
        let stream = TcpStream::connect_timeout(sa, timeout).map_err(|e| {
            if e.kind() == std::io::ErrorKind::TimedOut {
                WireError::new(
                    ErrorCode::Timeout,
                    format!(
                        "server {addr} did not answer within {} ms",
                        timeout.as_millis()
                    ),
                )
            } else {
                unreachable(e.to_string())
            }
        })?;
        let stream = crate::fdplace::place_tcp(stream);
        stream
            .set_nodelay(true)
            .and_then(|_| stream.set_read_timeout(Some(timeout)))
            .and_then(|_| stream.set_write_timeout(Some(timeout)))
            .map_err(|e| unreachable(e.to_string()))?;
        let stream = match tls {
            None => Stream::Plain(stream),
            Some(tls) => tls.connect(addr, stream).map_err(|why| {
                WireError::new(ErrorCode::Unreachable, format!("server {addr}: {why}"))
            })?,
        };
        Ok(Conn::over(stream, addr, Codec::Off))
    }

    /// A connection on `stream` with nothing sent or received yet.
    fn over(stream: Stream, addr: &str, codec: Codec) -> Conn {
        Conn {
            stream,
            addr: addr.to_string(),
            next_id: 1,
            broken: false,
            body_buf: Vec::new(),
            outbox: Vec::new(),
            sent_deferred: Vec::new(),
            codec,
            packed_buf: Vec::new(),
            wire_sent: 0,
            wire_received: 0,
        }
    }

    /// The handshake: `hello` (Hello or TokenHello, carrying the client nonce), the
    /// server's challenge checked with `secret`, then Auth.
    fn authenticate(&mut self, hello: Request, secret: &Secret) -> Result<(), WireError> {
        let (nonce_c, with_token) = match &hello {
            Request::Hello { nonce } => (*nonce, false),
            Request::TokenHello { nonce, .. } => (*nonce, true),
            _ => unreachable!("a handshake starts with Hello or TokenHello"),
        };
        let cred = Cred::root();
        let resp = self.call(&cred, hello, &[], &mut [])?;
        let Response::Challenge { nonce, proof } = resp.0 else {
            return Err(self.fail(
                ErrorCode::UnexpectedMessage,
                "answered Hello without a challenge",
            ));
        };
        if !secret.verify_server_proof(&nonce_c, &nonce, &proof) {
            let why = if with_token {
                "authentication failed: the token was not made with this cluster's secret, or was altered"
            } else {
                "authentication failed: the server does not know this cluster's secret (check cluster.toml)"
            };
            return Err(self.fail(ErrorCode::AuthFailed, why));
        }
        let proof = secret.client_proof(&nonce, &nonce_c);
        match self.call(&cred, Request::Auth { proof }, &[], &mut []) {
            Ok((Response::Done, _)) => Ok(()),
            Ok(_) => Err(self.fail(ErrorCode::UnexpectedMessage, "answered Auth oddly")),
            Err(e) if e.code == ErrorCode::AuthFailed && !with_token => Err(WireError::new(
                ErrorCode::AuthFailed,
                format!(
                    "server {} refused our credentials: wrong cluster secret (check cluster.toml)",
                    self.addr
                ),
            )),
            Err(e) => Err(e),
        }
    }

    fn fail(&mut self, code: ErrorCode, what: &str) -> WireError {
        self.broken = true;
        WireError::new(code, format!("server {}: {what}", self.addr))
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Tells the server, in one round trip, the client's host (`ClientHost`, so that the
    /// server counts this connection's bytes as that host's), how bulk data is to be
    /// compressed both ways from now on (`SetCompression`; `Off` sends nothing) and, if
    /// `ask`, this build's protocol features, learning the server's (`Features`,
    /// returned). A server that refuses the host or the codec answers with an error,
    /// returned here; the connection then stays uncompressed. A server that predates
    /// `Features` refuses it and closes the connection: then the answer is
    /// `Features::NONE` and the connection is broken, to be dialed again without asking.
    pub fn announce(
        &mut self,
        host: Option<&str>,
        codec: Codec,
        ask: bool,
    ) -> Result<Option<Features>, WireError> {
        let mut reqs = Vec::new();
        if let Some(host) = host {
            reqs.push(Request::ClientHost {
                host: host.to_string(),
            });
        }
        if codec != Codec::Off {
            let (c, level) = codec.to_wire();
            reqs.push(Request::SetCompression { codec: c, level });
        }
        if ask {
            reqs.push(Request::Features {
                features: Features::all(),
            });
        }
        if reqs.is_empty() {
            return Ok(None);
        }
        let mut answers = match self.call_many(&Cred::root(), reqs) {
            Err(e) if ask && e.code == ErrorCode::BadFrame => {
                self.broken = true;
                return Ok(Some(Features::NONE));
            }
            r => r?,
        };
        let theirs = if ask {
            match answers.pop().expect("one answer per request") {
                Ok(Response::Features { features }) => Some(features),
                Err(e) if e.code == ErrorCode::BadFrame => {
                    self.broken = true;
                    return Ok(Some(Features::NONE));
                }
                Ok(_) => {
                    return Err(self.fail(
                        ErrorCode::UnexpectedMessage,
                        "answered Features without its features",
                    ))
                }
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        for r in answers {
            r?;
        }
        self.codec = codec;
        Ok(theirs)
    }

    /// The connection's codec.
    pub fn compression(&self) -> Codec {
        self.codec
    }

    /// Bulk data bytes this connection has written and read on its socket, as they
    /// went over the wire (compressed where they were).
    pub fn wire_data_bytes(&self) -> (u64, u64) {
        (self.wire_sent, self.wire_received)
    }

    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// Changes the read/write timeout (for example to wait for a long server operation).
    pub fn set_timeout(&self, timeout: Duration) {
        let _ = self.stream.tcp().set_read_timeout(Some(timeout));
        let _ = self.stream.tcp().set_write_timeout(Some(timeout));
    }

    /// Sends `req` with bulk `data` and waits for the response. Bulk data in the response
    /// is read into `recv`, and its length returned; a response with more data than
    /// `recv` holds is a protocol error. Server errors come back as `Err` with the
    /// server's code; transport errors mark the connection broken.
    pub fn call(
        &mut self,
        cred: &Cred,
        req: Request,
        data: &[u8],
        recv: &mut [u8],
    ) -> Result<(Response, usize), WireError> {
        self.call_parts(cred, req, &[data], recv)
    }

    /// As [`Conn::call`], with the bulk data in `parts`, sent one after another as if
    /// joined (with one vectored write, not copied together first).
    pub fn call_parts(
        &mut self,
        cred: &Cred,
        req: Request,
        parts: &[&[u8]],
        recv: &mut [u8],
    ) -> Result<(Response, usize), WireError> {
        let (id, opcode) = self.send_request(cred, req, parts, false)?;
        self.read_reply(id, opcode, recv)
    }

    /// Sends `req` with [`stripefs_wire::FLAG_NO_REPLY`] and returns: the server sends
    /// no answer (it logs an error). For requests whose failure the caller could not act
    /// on, such as Close: the server handles one connection's requests in order, so
    /// later requests on this connection see its effect, and nobody waits for (or is
    /// woken by) an answer.
    pub fn send(&mut self, cred: &Cred, req: Request) -> Result<(), WireError> {
        self.send_request(cred, req, &[], true).map(|_| ())
    }

    /// Like [`Conn::send`], but the request goes out with the next request on this
    /// connection (one system call and one wake-up of the server for both), or at
    /// [`Conn::flush`] (also on drop), or at once when the deferred frames reach
    /// [`MAX_OUTBOX_BYTES`]. Whoever defers must make sure that a flush follows.
    pub fn defer(&mut self, cred: &Cred, req: Request) -> Result<(), WireError> {
        self.check_usable()?;
        let id = self.next_id;
        self.next_id += 1;
        let env = Envelope {
            cred: cred.clone(),
            req,
        };
        self.outbox
            .extend(encode_request_flags(id, &env, 0, FLAG_NO_REPLY));
        if self.outbox.len() >= MAX_OUTBOX_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// Requests are deferred and not yet written.
    pub fn has_deferred(&self) -> bool {
        !self.outbox.is_empty()
    }

    /// Defers whole request frames taken from another connection. They keep their
    /// request ids: nobody reads an answer to them (`FLAG_NO_REPLY`).
    pub fn defer_frames(&mut self, frames: &[u8]) -> Result<(), WireError> {
        self.check_usable()?;
        self.outbox.extend_from_slice(frames);
        if self.outbox.len() >= MAX_OUTBOX_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// The deferred frames the server did not handle because it closed the connection
    /// first (after a `ConnectionClosed` answer): to be sent again on another connection
    /// with [`Conn::defer_frames`].
    pub fn take_unhandled(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.sent_deferred);
        out.append(&mut self.outbox);
        out
    }

    /// Whether the server has closed this idle connection (or sent something nobody
    /// asked for, such as its `ConnectionClosed` notice): then it must not be used. Asks
    /// the kernel without waiting.
    pub fn closed_by_peer(&mut self) -> bool {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        if self.stream.buffered() {
            return true;
        }
        let mut pfd = [PollFd::new(
            self.stream.tcp(),
            PollFlags::IN | PollFlags::RDHUP,
        )];
        let now = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        !matches!(poll(&mut pfd, Some(&now)), Ok(0))
    }

    /// Writes the deferred requests.
    pub fn flush(&mut self) -> Result<(), WireError> {
        if self.outbox.is_empty() {
            return Ok(());
        }
        self.check_usable()?;
        let r = write_all_parts(&mut self.stream, &[&self.outbox]);
        self.outbox.clear();
        r.map_err(|e| self.transport("sending deferred requests".into(), e.into()))
    }

    fn check_usable(&self) -> Result<(), WireError> {
        if self.broken {
            return Err(WireError::new(
                ErrorCode::Io,
                format!("connection to {} is broken", self.addr),
            ));
        }
        Ok(())
    }

    /// Sends up to [`MAX_PENDING`] requests without data back to back, then reads their
    /// answers in order: one round trip for all. The outer `Err` is a transport error
    /// (the connection is broken); the inner results are each request's answer.
    #[allow(clippy::type_complexity)]
    pub fn call_many(
        &mut self,
        cred: &Cred,
        reqs: Vec<Request>,
    ) -> Result<Vec<Result<Response, WireError>>, WireError> {
        // Bounded so that unread answers never fill the socket buffers, which could
        // leave both sides blocked writing.
        assert!(
            reqs.len() <= MAX_PENDING,
            "call_many takes at most MAX_PENDING requests"
        );
        let mut sent = Vec::with_capacity(reqs.len());
        for req in reqs {
            sent.push(self.send_request(cred, req, &[], false)?);
        }
        let mut out = Vec::with_capacity(sent.len());
        for (id, opcode) in sent {
            match self.read_reply(id, opcode, &mut []) {
                Ok((r, _)) => out.push(Ok(r)),
                Err(e) if !self.broken => out.push(Err(e)),
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    fn send_request(
        &mut self,
        cred: &Cred,
        req: Request,
        parts: &[&[u8]],
        no_reply: bool,
    ) -> Result<(u64, Opcode), WireError> {
        self.check_usable()?;
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > stripefs_wire::MAX_DATA_BYTES as usize {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "request data of {len} bytes exceeds the frame limit {}",
                    stripefs_wire::MAX_DATA_BYTES
                ),
            ));
        }
        let id = self.next_id;
        self.next_id += 1;
        let opcode = req.opcode();
        let env = Envelope {
            cred: cred.clone(),
            req,
        };
        let packed = match parts {
            [] => None,
            [one] => self.codec.compress(one),
            _ if self.codec == Codec::Off => None,
            more => self.codec.compress(&more.concat()),
        };
        let frame = if no_reply {
            assert_eq!(len, 0, "requests with data are answered");
            encode_request_flags(id, &env, 0, FLAG_NO_REPLY)
        } else if let Some(p) = &packed {
            encode_request_flags(id, &env, p.len() as u32, FLAG_COMPRESSED)
        } else {
            encode_request(id, &env, len as u32)
        };
        let mut out: Vec<&[u8]> = Vec::with_capacity(2 + parts.len());
        out.push(&self.outbox);
        out.push(&frame);
        match &packed {
            Some(p) => out.push(p),
            None => out.extend_from_slice(parts),
        }
        self.wire_sent += packed.as_ref().map_or(len, |p| p.len()) as u64;
        // Deferred requests go first, in the same system call.
        let sent = write_all_parts(&mut self.stream, &out);
        drop(out);
        self.sent_deferred.append(&mut self.outbox);
        if let Err(e) = sent {
            return Err(self.transport(format!("sending {}", opcode.name()), e.into()));
        }
        Ok((id, opcode))
    }

    fn read_reply(
        &mut self,
        id: u64,
        opcode: Opcode,
        recv: &mut [u8],
    ) -> Result<(Response, usize), WireError> {
        let header = match read_header(&mut self.stream, Duration::ZERO) {
            Ok((h, _)) => h,
            Err(e) => return Err(self.transport(format!("waiting for {}", opcode.name()), e)),
        };
        if header.request_id == 0 && header.status == ErrorCode::ConnectionClosed as u32 {
            return Err(self.closed_notice(&header, opcode));
        }
        // The server answers in order: it has read every frame written before this one.
        self.sent_deferred.clear();
        // A server refusing a frame it cannot take (an opcode it does not know: an older
        // server) answers under opcode Ping with the error, BadFrame, and closes; request
        // id 0 when the header itself was refused. That error is the answer; the
        // connection is done.
        let refused = (header.request_id == id || header.request_id == 0)
            && header.opcode == Opcode::Ping as u16
            && opcode != Opcode::Ping
            && header.status != 0;
        if refused && header.data_len == 0 {
            self.body_buf.resize(header.body_len as usize, 0);
            let mut body = std::mem::take(&mut self.body_buf);
            let r = read_exact(&mut self.stream, &mut body, None);
            let decoded = r.and_then(|_| decode_response(&header, &body).map_err(ReadError::Frame));
            self.body_buf = body;
            self.broken = true;
            return match decoded {
                Ok(Err(mut err)) => {
                    err.message = format!(
                        "server {} refused {}: {}",
                        self.addr,
                        opcode.name(),
                        err.message
                    );
                    Err(err)
                }
                Ok(Ok(_)) | Err(_) => Err(self.fail(
                    ErrorCode::UnexpectedMessage,
                    &format!("answered request {id} ({}) as a Ping", opcode.name()),
                )),
            };
        }
        if header.request_id != id || header.opcode != opcode as u16 {
            return Err(self.fail(
                ErrorCode::UnexpectedMessage,
                &format!(
                    "answered request {id} ({}) with request {} opcode {}",
                    opcode.name(),
                    header.request_id,
                    header.opcode
                ),
            ));
        }
        self.body_buf.resize(header.body_len as usize, 0);
        let mut body = std::mem::take(&mut self.body_buf);
        let r = read_exact(&mut self.stream, &mut body, None);
        let decoded = r.and_then(|_| decode_response(&header, &body).map_err(ReadError::Frame));
        self.body_buf = body;
        let result = match decoded {
            Ok(r) => r,
            Err(e) => return Err(self.transport(format!("reading {}", opcode.name()), e)),
        };
        self.wire_received += u64::from(header.data_len);
        let n = if header.flags & FLAG_COMPRESSED != 0 {
            self.read_packed(&header, opcode, recv)?
        } else {
            let n = header.data_len as usize;
            if n > recv.len() {
                let _ = skip(&mut self.stream, n as u64, None);
                return Err(self.fail(
                    ErrorCode::UnexpectedMessage,
                    &format!("sent {n} bytes of data where {} were expected", recv.len()),
                ));
            }
            if let Err(e) = read_exact(&mut self.stream, &mut recv[..n], None) {
                return Err(self.transport(format!("reading data of {}", opcode.name()), e));
            }
            n
        };
        match result {
            Ok(resp) => Ok((resp, n)),
            Err(mut err) => {
                if !err.message.contains(&self.addr) {
                    err.message = format!("{} (from server {})", err.message, self.addr);
                }
                Err(err)
            }
        }
    }

    /// Reads a compressed data section and decodes it into `recv`; returns the decoded
    /// length. Compressed data on a connection that did not ask for it, or data that
    /// does not decode to what its prefix says, breaks the connection.
    fn read_packed(
        &mut self,
        header: &stripefs_wire::Header,
        opcode: Opcode,
        recv: &mut [u8],
    ) -> Result<usize, WireError> {
        let mut packed = std::mem::take(&mut self.packed_buf);
        packed.resize(header.data_len as usize, 0);
        let r = read_exact(&mut self.stream, &mut packed, None);
        let out = match r {
            Err(e) => Err(self.transport(format!("reading data of {}", opcode.name()), e)),
            Ok(()) if self.codec == Codec::Off => Err(self.fail(
                ErrorCode::UnexpectedMessage,
                "sent compressed data on a connection that did not ask for compression",
            )),
            Ok(()) => match crate::compress::raw_len(&packed) {
                Ok(n) if n > recv.len() => Err(self.fail(
                    ErrorCode::UnexpectedMessage,
                    &format!("sent {n} bytes of data where {} were expected", recv.len()),
                )),
                Ok(n) => match crate::compress::decompress_into(&packed, &mut recv[..n]) {
                    Ok(()) => Ok(n),
                    Err(e) => Err(self.fail(e.code, &e.message)),
                },
                Err(e) => Err(self.fail(e.code, &e.message)),
            },
        };
        // Kept for the next answer unless large: a client may hold many connections
        // (streams x servers), and each must not keep a whole frame's worth.
        if packed.capacity() <= KEPT_PACKED_BYTES {
            packed.clear();
            self.packed_buf = packed;
        }
        out
    }

    /// The server's notice that it closed this connection without handling what was
    /// sent after its last answer (an idle connection expired): `ConnectionClosed`, which
    /// callers may retry on a fresh connection whatever the request.
    fn closed_notice(&mut self, header: &stripefs_wire::Header, opcode: Opcode) -> WireError {
        self.broken = true;
        let mut body = vec![0u8; header.body_len as usize];
        let why = match read_exact(&mut self.stream, &mut body, None)
            .and_then(|_| decode_response(header, &body).map_err(ReadError::Frame))
        {
            Ok(Err(e)) => e.message,
            Ok(Ok(_)) => "closed".into(),
            Err(e) => e.to_string(),
        };
        WireError::new(
            ErrorCode::ConnectionClosed,
            format!("server {}: {} not handled: {why}", self.addr, opcode.name()),
        )
    }

    fn transport(&mut self, what: String, e: ReadError) -> WireError {
        self.broken = true;
        let code = match &e {
            ReadError::Io(io) if is_timeout(io) => ErrorCode::Timeout,
            ReadError::Idle => ErrorCode::Timeout,
            ReadError::Frame(f) => f.code(),
            _ => ErrorCode::Unreachable,
        };
        let why = match code {
            ErrorCode::Timeout => "no answer before the timeout".to_string(),
            _ => e.to_string(),
        };
        WireError::new(code, format!("server {}: {what}: {why}", self.addr))
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

impl From<std::io::Error> for ReadError {
    fn from(e: std::io::Error) -> ReadError {
        ReadError::Io(e)
    }
}

impl Drop for Conn {
    /// Deferred requests are written before the connection closes (best effort).
    fn drop(&mut self) {
        let _ = self.flush();
        self.stream.close_notify();
    }
}

/// One connection carrying several requests at once (pipelining): callers on different
/// threads each send a request as soon as the sending half is free and then wait for
/// their answer, which the server sends in request order; each answer is matched to its
/// caller by request id. So one connection is limited by its TCP window, not by round
/// trips. Only plain connections split this way (a TLS session is one object for both
/// directions); only for requests whose data goes one way (a write with data and a
/// small answer, or a small read request with data in the answer), so that neither side
/// can block writing while the other is not reading: answers are read by the waiting
/// callers while others are still sending.
///
/// After any transport error the pipe is broken: every caller waiting on it gets the
/// error (a `ConnectionClosed` notice reaches them all, so each may resend on a fresh
/// connection), and the pool drops it.
pub struct Pipe {
    tx: std::sync::Mutex<Conn>,
    rx: std::sync::Mutex<Conn>,
    turn: std::sync::Mutex<Turn>,
    cv: std::sync::Condvar,
}

#[derive(Default)]
struct Turn {
    /// Ids of the requests sent and not yet answered, in the order they were sent.
    queue: std::collections::VecDeque<u64>,
    broken: Option<WireError>,
}

fn locked<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Pipe {
    /// Splits an authenticated connection into a pipe; a TLS connection, or one with
    /// deferred requests, is handed back.
    pub fn new(conn: Conn) -> Result<Pipe, Box<Conn>> {
        if conn.stream.is_tls() || !conn.outbox.is_empty() || conn.broken {
            return Err(Box::new(conn));
        }
        let rx_stream = match conn.stream.tcp().try_clone() {
            Ok(s) => s,
            Err(_) => return Err(Box::new(conn)),
        };
        let rx = Conn::over(Stream::Plain(rx_stream), &conn.addr, conn.codec);
        Ok(Pipe {
            tx: std::sync::Mutex::new(conn),
            rx: std::sync::Mutex::new(rx),
            turn: std::sync::Mutex::new(Turn::default()),
            cv: std::sync::Condvar::new(),
        })
    }

    /// Requests sent and not yet answered.
    pub fn in_flight(&self) -> usize {
        locked(&self.turn).queue.len()
    }

    pub fn is_broken(&self) -> bool {
        locked(&self.turn).broken.is_some()
    }

    /// Whether the server closed this pipe while it was idle (see
    /// [`Conn::closed_by_peer`]); only meaningful with nothing in flight.
    pub fn closed_by_peer(&self) -> bool {
        locked(&self.tx).closed_by_peer()
    }

    fn fail(&self, e: &WireError) {
        let mut t = locked(&self.turn);
        if t.broken.is_none() {
            t.broken = Some(e.clone());
        }
        drop(t);
        self.cv.notify_all();
    }

    /// Sends `req` with `data` and waits for its answer, as [`Conn::call`]; other
    /// callers' requests may be in flight on the same connection meanwhile. Also
    /// returns the bytes this call's data took on the wire both ways.
    #[allow(clippy::type_complexity)]
    pub fn call(
        &self,
        cred: &Cred,
        req: Request,
        data: &[u8],
        recv: &mut [u8],
    ) -> (Result<(Response, usize), WireError>, (u64, u64)) {
        self.call_parts(cred, req, &[data], recv)
    }

    /// As [`Pipe::call`], with the bulk data in `parts` (see [`Conn::call_parts`]).
    #[allow(clippy::type_complexity)]
    pub fn call_parts(
        &self,
        cred: &Cred,
        req: Request,
        parts: &[&[u8]],
        recv: &mut [u8],
    ) -> (Result<(Response, usize), WireError>, (u64, u64)) {
        let (id, opcode, sent) = {
            let mut tx = locked(&self.tx);
            let id = tx.next_id;
            {
                let mut t = locked(&self.turn);
                if let Some(e) = &t.broken {
                    return (Err(e.clone()), (0, 0));
                }
                t.queue.push_back(id);
            }
            let before = tx.wire_sent;
            match tx.send_request(cred, req, parts, false) {
                Ok((sent_id, opcode)) => {
                    debug_assert_eq!(sent_id, id);
                    (id, opcode, tx.wire_sent - before)
                }
                Err(e) => {
                    // Refused before anything was written (too much data): only this
                    // call fails; a failed write breaks the pipe for every caller.
                    let broken = tx.broken;
                    drop(tx);
                    if broken {
                        self.fail(&e);
                    }
                    self.leave(id);
                    return (Err(e), (0, 0));
                }
            }
        };
        {
            let mut t = locked(&self.turn);
            loop {
                if let Some(e) = &t.broken {
                    let e = e.clone();
                    drop(t);
                    self.leave(id);
                    return (Err(e), (sent, 0));
                }
                if t.queue.front() == Some(&id) {
                    break;
                }
                t = self.cv.wait(t).unwrap_or_else(|p| p.into_inner());
            }
        }
        let (r, got) = {
            let mut rx = locked(&self.rx);
            let before = rx.wire_received;
            let r = rx.read_reply(id, opcode, recv);
            if rx.broken {
                if let Err(e) = &r {
                    self.fail(e);
                }
            }
            (r, rx.wire_received - before)
        };
        self.leave(id);
        (r, (sent, got))
    }

    /// Takes request `id` off the queue (answered, or given up on a broken pipe).
    fn leave(&self, id: u64) {
        let mut t = locked(&self.turn);
        if let Some(i) = t.queue.iter().position(|&x| x == id) {
            t.queue.remove(i);
        }
        drop(t);
        self.cv.notify_all();
    }
}
