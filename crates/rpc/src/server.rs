//! The server loop: a thread per connection.

use crate::auth::{random_nonce, Secret};
use crate::frame::{read_exact, read_header, skip, write_all_parts, ReadError};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use stripefs_wire::{
    decode_request, encode_response, Envelope, ErrorCode, FrameError, Header, Opcode, Request,
    Response, WireError,
};

/// Most connections a server serves at once; more are refused with `Busy`.
pub const MAX_CONNECTIONS: usize = 4096;
/// How long a peer may take to authenticate, and to send the rest of a frame it started.
const PEER_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest body read before a peer has authenticated.
const MAX_HANDSHAKE_BODY_BYTES: u32 = 1024;
/// How often an idle connection thread checks for shutdown.
const IDLE_POLL: Duration = Duration::from_millis(500);

/// Bulk data of a response.
pub enum Payload {
    None,
    Bytes(Vec<u8>),
}

impl Payload {
    fn as_slice(&self) -> &[u8] {
        match self {
            Payload::None => &[],
            Payload::Bytes(b) => b,
        }
    }
}

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
}

/// A server's request handler. Requests arrive decoded, authenticated and validated
/// (`Request::validate`); `data` is the bulk data that followed the request.
pub trait Service: Send + Sync + 'static {
    fn handle(&self, conn: &ConnInfo, env: Envelope, data: &[u8]) -> Reply;
}

/// Counts a connection while it lives, also when its thread unwinds.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Waits until `listener` has a connection to accept or `timeout` passes.
fn wait_readable(listener: &TcpListener, timeout: Duration) {
    use std::os::fd::AsRawFd;
    let mut pfd = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd on the stack for the duration of the call.
    unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as libc::c_int) };
}

/// Serves `listener` until `shutdown` is set. Blocks the calling thread.
pub fn serve(
    listener: TcpListener,
    secret: Secret,
    service: Arc<dyn Service>,
    shutdown: Arc<AtomicBool>,
) -> std::io::Result<()> {
    let active = Arc::new(AtomicUsize::new(0));
    let secret = Arc::new(secret);
    listener.set_nonblocking(true)?;
    while !shutdown.load(Ordering::Relaxed) {
        let (mut stream, peer) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                wait_readable(&listener, IDLE_POLL);
                continue;
            }
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if active.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
            tracing::warn!("refusing connection from {peer}: {MAX_CONNECTIONS} connections open");
            let err = WireError::new(
                ErrorCode::Busy,
                format!("server busy: {MAX_CONNECTIONS} connections open"),
            );
            let _ = stream.set_nonblocking(false);
            let _ = send_reply(&mut stream, 0, Opcode::Hello, Reply::err(err));
            continue;
        }
        active.fetch_add(1, Ordering::Relaxed);
        let slot = Slot(active.clone());
        let (secret, service, shutdown) = (secret.clone(), service.clone(), shutdown.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("conn-{peer}"))
            .spawn(move || {
                let _slot = slot;
                if let Err(why) = connection(stream, peer, &secret, &*service, &shutdown) {
                    tracing::info!("connection from {peer} closed: {why}");
                }
            });
        if let Err(e) = spawned {
            tracing::error!("cannot start a thread for {peer}: {e}");
        }
    }
    Ok(())
}

fn connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    secret: &Secret,
    service: &dyn Service,
    shutdown: &AtomicBool,
) -> Result<(), String> {
    stream.set_nonblocking(false).map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(PEER_TIMEOUT))
        .and_then(|_| stream.set_write_timeout(Some(PEER_TIMEOUT)))
        .map_err(|e| e.to_string())?;
    handshake(&mut stream, peer, secret)?;
    let info = ConnInfo { peer };
    let mut body = Vec::new();
    let mut data_buf = Vec::new();
    // Reads poll with a short timeout so that shutdown is noticed; a frame that has begun
    // may take up to PEER_TIMEOUT (see frame::fill).
    stream
        .set_read_timeout(Some(IDLE_POLL))
        .map_err(|e| e.to_string())?;
    loop {
        let header = match read_header(&mut stream, PEER_TIMEOUT) {
            Ok(h) => h,
            Err(ReadError::Idle) if !shutdown.load(Ordering::Relaxed) => continue,
            Err(ReadError::Idle) | Err(ReadError::Closed) => return Ok(()),
            Err(ReadError::Frame(f)) => return Err(refuse(&mut stream, peer, 0, None, &f)),
            Err(e) => return Err(e.to_string()),
        };
        let env = match read_request(&mut stream, &header, &mut body, &mut data_buf) {
            Ok(x) => x,
            Err(ReadError::Frame(f)) => {
                let op = Opcode::from_u16(header.opcode);
                return Err(refuse(&mut stream, peer, header.request_id, op, &f));
            }
            Err(e) => return Err(e.to_string()),
        };
        let opcode = env.req.opcode();
        let reply = match env.req.validate(header.data_len) {
            Err(e) => Reply::err(e),
            Ok(()) if matches!(env.req, Request::Hello { .. } | Request::Auth { .. }) => {
                Reply::err(WireError::new(
                    ErrorCode::UnexpectedMessage,
                    "already authenticated",
                ))
            }
            Ok(()) => {
                let data = &data_buf[..header.data_len as usize];
                handle_guarded(service, &info, env, data)
            }
        };
        if header.wants_reply() {
            send_reply(&mut stream, header.request_id, opcode, reply).map_err(|e| e.to_string())?;
        } else if let Err(e) = reply.result {
            tracing::warn!(
                "{} from {peer} (no reply wanted) failed: {e}",
                opcode.name()
            );
        }
        if shutdown.load(Ordering::Relaxed) {
            return Ok(());
        }
    }
}

/// Runs the handler; a panic (a bug) becomes an `Internal` error for that request only.
fn handle_guarded(service: &dyn Service, info: &ConnInfo, env: Envelope, data: &[u8]) -> Reply {
    let op = env.req.opcode();
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        service.handle(info, env, data)
    })) {
        Ok(r) => r,
        Err(_) => {
            tracing::error!("handler for {} from {} panicked", op.name(), info.peer);
            Reply::err(WireError::new(
                ErrorCode::Internal,
                format!("internal error handling {}", op.name()),
            ))
        }
    }
}

/// Reads a request's body and bulk data; the data lands in `data`, a buffer the
/// connection reuses so that large writes cost no allocation, zeroing or page faults.
fn read_request(
    stream: &mut TcpStream,
    header: &Header,
    body: &mut Vec<u8>,
    data: &mut Vec<u8>,
) -> Result<Envelope, ReadError> {
    body.resize(header.body_len as usize, 0);
    read_exact(stream, body, PEER_TIMEOUT)?;
    let env = match decode_request(header, body) {
        Ok(env) => env,
        Err(f) => {
            // Consume the bulk data so the error response is read in order by the peer.
            skip(stream, header.data_len as u64, PEER_TIMEOUT)?;
            return Err(ReadError::Frame(f));
        }
    };
    let n = header.data_len as usize;
    if data.len() < n {
        data.resize(n, 0);
    }
    read_exact(stream, &mut data[..n], PEER_TIMEOUT)?;
    Ok(env)
}

fn send_reply(
    stream: &mut TcpStream,
    request_id: u64,
    opcode: Opcode,
    reply: Reply,
) -> std::io::Result<()> {
    let (result, data) = match reply.result {
        Ok(r) => (Ok(r), reply.data),
        Err(e) => (Err(e), Payload::None),
    };
    let frame = encode_response(request_id, opcode, &result, data.as_slice().len() as u32);
    write_all_parts(stream, &[&frame, data.as_slice()])
}

/// Answers a bad frame with an error naming the reason and logs it; returns the reason
/// the connection ends.
fn refuse(
    stream: &mut TcpStream,
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

fn handshake(stream: &mut TcpStream, peer: SocketAddr, secret: &Secret) -> Result<(), String> {
    let mut body = Vec::new();
    let (h, env) = read_one(stream, peer, &mut body).map_err(|e| {
        tracing::warn!("connection from {peer}: no valid Hello: {e}");
        e
    })?;
    let Request::Hello { nonce: nonce_c } = env.req else {
        return refuse_auth(
            stream,
            peer,
            h.request_id,
            env.req.opcode(),
            "first message was not Hello",
        );
    };
    let nonce_s = random_nonce();
    let proof = secret.server_proof(&nonce_c, &nonce_s);
    let challenge = Reply::ok(Response::Challenge {
        nonce: nonce_s,
        proof,
    });
    send_reply(stream, h.request_id, Opcode::Hello, challenge).map_err(|e| e.to_string())?;
    let (h, env) = read_one(stream, peer, &mut body).map_err(|e| {
        // A client that does not know the cluster secret hangs up here, after checking
        // our proof; say so, since the client's side of the story is on another machine.
        tracing::warn!(
            "connection from {peer}: no Auth after the challenge (wrong cluster secret?): {e}"
        );
        e
    })?;
    let Request::Auth { proof } = env.req else {
        return refuse_auth(
            stream,
            peer,
            h.request_id,
            env.req.opcode(),
            "second message was not Auth",
        );
    };
    if !secret.verify_client_proof(&nonce_s, &nonce_c, &proof) {
        return refuse_auth(
            stream,
            peer,
            h.request_id,
            Opcode::Auth,
            "wrong cluster secret",
        );
    }
    send_reply(
        stream,
        h.request_id,
        Opcode::Auth,
        Reply::ok(Response::Done),
    )
    .map_err(|e| e.to_string())
}

fn read_one(
    stream: &mut TcpStream,
    peer: SocketAddr,
    body: &mut Vec<u8>,
) -> Result<(Header, Envelope), String> {
    // A bad header is answered too, as after authentication: the peer learns the reason.
    let h = match read_header(stream, PEER_TIMEOUT) {
        Ok(h) => h,
        Err(ReadError::Frame(f)) => return Err(refuse(stream, peer, 0, None, &f)),
        Err(e) => return Err(e.to_string()),
    };
    // Before authentication only small Hello and Auth frames are read, so that an
    // unauthenticated peer cannot make the server allocate large buffers.
    let handshake_op = matches!(
        Opcode::from_u16(h.opcode),
        Some(Opcode::Hello | Opcode::Auth)
    );
    if !handshake_op || h.data_len != 0 || h.body_len > MAX_HANDSHAKE_BODY_BYTES {
        let op = Opcode::from_u16(h.opcode).unwrap_or(Opcode::Hello);
        let why = if handshake_op {
            format!("oversized {} frame", op.name())
        } else {
            format!("{} before authenticating: not Hello or Auth", op.name())
        };
        let _ = refuse_auth(stream, peer, h.request_id, op, &why);
        return Err(format!("authentication failed: {why}"));
    }
    // Handshake frames carry no bulk data (checked above).
    let env = match read_request(stream, &h, body, &mut Vec::new()) {
        Ok(x) => x,
        Err(ReadError::Frame(f)) => {
            return Err(refuse(
                stream,
                peer,
                h.request_id,
                Opcode::from_u16(h.opcode),
                &f,
            ));
        }
        Err(e) => return Err(e.to_string()),
    };
    Ok((h, env))
}

fn refuse_auth(
    stream: &mut TcpStream,
    peer: SocketAddr,
    request_id: u64,
    opcode: Opcode,
    why: &str,
) -> Result<(), String> {
    tracing::warn!("authentication of {peer} failed: {why}");
    let err = WireError::new(
        ErrorCode::AuthFailed,
        format!("authentication failed: {why}"),
    );
    let _ = send_reply(stream, request_id, opcode, Reply::err(err));
    Err(format!("authentication failed: {why}"))
}
