//! Test scaffolding: a real server on 127.0.0.1:0 with an echo service, stopped by a
//! guard on drop (also when a test fails); raw-socket helpers for speaking the protocol
//! badly on purpose; and a tracing subscriber that keeps server log lines for assertions.

#![allow(dead_code)] // Each test binary uses a different part of this module.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use stripefs_rpc::auth::{random_nonce, Secret};
use stripefs_rpc::{serve_with, Conn, ConnInfo, ConnStats, Limits, Payload, Reply, Service};
use stripefs_wire::*;

/// Client timeout for tests that expect answers.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// Echoes a write's data back as a read's data, with the per-block CRCs a data server
/// would store; answers Ping with Pong (whose `version` is the host the connection
/// announced, or "test") and everything else with Done.
pub struct Echo;

impl Service for Echo {
    // A transport test's echo: Write answered with its data, the rest with Done.
    fn strict_replies(&self) -> bool {
        false
    }

    fn handle(&self, conn: &ConnInfo, req: Valid, data: &[u8]) -> Reply {
        match req.into_env().req {
            Request::Write { .. } => Reply {
                result: Ok(Response::ReadData {
                    crcs: block_crcs(data),
                }),
                data: Payload::Bytes(data.to_vec()),
            },
            Request::Ping {} => Reply::ok(Response::Pong {
                role: Role::Data,
                server_id: Some(ServerId(7)),
                version: conn.host.clone().unwrap_or_else(|| "test".into()),
            }),
            _ => Reply::ok(Response::Done),
        }
    }
}

/// A running server; dropping it sets the shutdown flag and joins the serving thread.
pub struct Server {
    pub addr: SocketAddr,
    pub secret: Secret,
    /// What the server's limits did (evictions, expiries, buffer bytes).
    pub stats: Arc<ConnStats>,
    shutdown: Arc<AtomicBool>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(Limits::default())
    }

    /// A server with chosen limits, so a test can play a misbehaving peer quickly.
    pub fn start_with(limits: Limits) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address");
        let secret = Secret::generate();
        let shutdown = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(ConnStats::default());
        let (s, f, st) = (secret.clone(), shutdown.clone(), stats.clone());
        let thread =
            std::thread::spawn(move || serve_with(listener, s, Arc::new(Echo), f, limits, st));
        Server {
            addr,
            secret,
            stats,
            shutdown,
            thread: Some(thread),
        }
    }

    pub fn connect(&self) -> Result<Conn, WireError> {
        Conn::connect(&self.addr.to_string(), &self.secret, TIMEOUT)
    }

    /// Proves the server still serves: a fresh client authenticates and gets a Pong.
    pub fn assert_serving(&self) {
        let mut conn = self.connect().expect("a good client still connects");
        let (resp, n) = conn
            .call(&Cred::root(), Request::Ping {}, &[], &mut [])
            .expect("a good client still gets answers");
        assert!(matches!(resp, Response::Pong { .. }), "{resp:?}");
        assert_eq!(n, 0);
    }

    pub fn raw(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("raw connect");
        s.set_read_timeout(Some(TIMEOUT)).expect("set timeout");
        s
    }

    /// A raw connection from the local address `from` (any 127.x.y.z works on
    /// loopback), so tests can play peers at several addresses.
    pub fn raw_from(&self, from: std::net::Ipv4Addr) -> TcpStream {
        let s = connect_from(from, self.addr);
        s.set_read_timeout(Some(TIMEOUT)).expect("set timeout");
        s
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let r = t.join();
            if !std::thread::panicking() {
                r.expect("server thread panicked")
                    .expect("serve returned an error");
            }
        }
    }
}

/// Connects to `to` from the IPv4 address `from`.
pub fn connect_from(from: std::net::Ipv4Addr, to: SocketAddr) -> TcpStream {
    use std::os::fd::FromRawFd;
    let SocketAddr::V4(to) = to else {
        panic!("IPv4 only");
    };
    let sin = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: plain socket calls on a descriptor this function owns; the addresses are
    // valid sockaddr_in structs on the stack.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", io::Error::last_os_error());
        let stream = TcpStream::from_raw_fd(fd);
        let a = sin(from, 0);
        let r = libc::bind(fd, &a as *const _ as *const libc::sockaddr, len);
        assert_eq!(r, 0, "bind {from}: {}", io::Error::last_os_error());
        let b = sin(*to.ip(), to.port());
        let r = libc::connect(fd, &b as *const _ as *const libc::sockaddr, len);
        assert_eq!(r, 0, "connect from {from}: {}", io::Error::last_os_error());
        stream
    }
}

/// Whether the server has closed `s` (EOF or reset seen without waiting long).
pub fn is_closed(s: &mut TcpStream) -> bool {
    s.set_nonblocking(true).expect("nonblocking");
    let mut b = [0u8; 1];
    let r = match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
        Err(_) => true,
    };
    s.set_nonblocking(false).expect("blocking");
    r
}

/// A request frame from root, without bulk data.
pub fn request_frame(id: u64, req: Request) -> Vec<u8> {
    encode_request(
        id,
        &Envelope {
            cred: Cred::root(),
            req,
        },
        0,
    )
}

/// Reads one response frame. `None` if the peer closed (or reset) before a header.
pub fn read_response(s: &mut TcpStream) -> Option<(Header, Result<Response, WireError>)> {
    let mut hb = [0u8; HEADER_LEN];
    s.read_exact(&mut hb).ok()?;
    let h = Header::decode(&hb).expect("server sent a bad header");
    let mut body = vec![0u8; h.body_len as usize];
    s.read_exact(&mut body).expect("server sent a short body");
    let mut data = vec![0u8; h.data_len as usize];
    s.read_exact(&mut data).expect("server sent short data");
    Some((
        h,
        decode_response(&h, &body).expect("server sent a bad body"),
    ))
}

/// Asserts the server closes the connection (EOF or reset) within the read timeout.
pub fn assert_closed(s: &mut TcpStream) {
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("server sent {n} more bytes instead of closing"),
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("server did not close the connection: {e}"),
    }
}

/// Reads the error response a bad peer gets, checks its code, and that the server then
/// closes the connection. Returns the error for further checks.
pub fn expect_refusal(s: &mut TcpStream, code: ErrorCode) -> WireError {
    let (h, result) = read_response(s).expect("no error response before the close");
    let err = result.expect_err("a bad frame was answered with success");
    assert_eq!(err.code, code, "{err}");
    assert_eq!(h.status, code as u32);
    assert_closed(s);
    err
}

/// Authenticates a raw stream as a client would, so tests can misbehave afterwards.
pub fn raw_authenticate(s: &mut TcpStream, secret: &Secret) {
    let nonce_c = random_nonce();
    s.write_all(&request_frame(1, Request::Hello { nonce: nonce_c }))
        .expect("send Hello");
    let Some((_, Ok(Response::Challenge { nonce, proof }))) = read_response(s) else {
        panic!("no challenge");
    };
    assert_eq!(proof, secret.server_proof(&nonce_c, &nonce));
    let proof = secret.client_proof(&nonce, &nonce_c);
    s.write_all(&request_frame(2, Request::Auth { proof }))
        .expect("send Auth");
    let Some((_, Ok(Response::Done))) = read_response(s) else {
        panic!("Auth not accepted");
    };
}

/// Waits until `f` holds, or panics naming `what` after `limit`.
pub fn eventually(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

// --- Log capture --------------------------------------------------------------------

static LOGS: Mutex<Vec<String>> = Mutex::new(Vec::new());
static INSTALL: Once = Once::new();

/// Keeps every event's level and message in [`LOGS`]. Installed as the global default
/// because servers log from their own threads.
struct Capture;

struct MessageOf<'a>(&'a mut String);

impl tracing::field::Visit for MessageOf<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0.push_str(&format!("{value:?}"));
        }
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut line = format!("{} ", event.metadata().level());
        event.record(&mut MessageOf(&mut line));
        LOGS.lock().unwrap_or_else(|p| p.into_inner()).push(line);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Starts capturing server logs (idempotent; call at the start of each test).
pub fn capture_logs() {
    INSTALL.call_once(|| {
        tracing::subscriber::set_global_default(Capture).expect("no other subscriber");
    });
}

/// Waits until a log line contains all of `parts`; returns it.
pub fn wait_for_log(parts: &[&str]) -> String {
    let mut found = None;
    eventually(
        Duration::from_secs(5),
        &format!("a log line with {parts:?}"),
        || {
            let logs = LOGS.lock().unwrap_or_else(|p| p.into_inner());
            found = logs
                .iter()
                .find(|l| parts.iter().all(|p| l.contains(p)))
                .cloned();
            found.is_some()
        },
    );
    found.unwrap_or_default()
}
