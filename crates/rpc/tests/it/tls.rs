//! TLS on connections: a server with a certificate serves TLS clients (data both ways,
//! also replies sent from files, which go by sendfile on plain connections); the bytes on
//! the wire are not the plaintext (a recording relay between client and server shows
//! it, and shows the plaintext for a plain connection, so the check can fail); a server
//! that requires TLS refuses plain clients with an error naming TLS; a TLS client to a
//! plain server, or with another cluster's CA, fails naming TLS or the certificate; an
//! idle TLS connection does not look closed by the server.

use crate::common;

use common::Echo;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use stripefs_rpc::auth::Secret;
use stripefs_rpc::tls::{make_cluster_certs, TlsClient, TlsServer};
use stripefs_rpc::{serve_tls, Conn, ConnInfo, ConnStats, Limits, Part, Payload, Reply, Service};
use stripefs_wire::*;

const TIMEOUT: Duration = Duration::from_secs(5);

/// Echo, except that Read answers with `len` bytes of a file (a `Part::File`, which a
/// plain connection sends with sendfile).
struct FileEcho(std::fs::File);

impl Service for FileEcho {
    fn strict_replies(&self) -> bool {
        false
    }

    fn handle(&self, conn: &ConnInfo, req: Valid, data: &[u8]) -> Reply {
        use std::os::fd::AsRawFd;
        match req.req() {
            Request::Read { offset, len, .. } => {
                let f = self.0.try_clone().expect("dup");
                Reply {
                    result: Ok(Response::ReadData { crcs: Vec::new() }),
                    data: Payload::Parts {
                        parts: vec![Part::File {
                            fd: f.as_raw_fd(),
                            offset: *offset,
                            len: u64::from(*len),
                        }],
                        hold: Box::new(f),
                    },
                }
            }
            _ => Echo.handle(conn, req, data),
        }
    }
}

struct TlsTestServer {
    addr: SocketAddr,
    secret: Secret,
    shutdown: Arc<AtomicBool>,
    thread: Option<JoinHandle<std::io::Result<()>>>,
}

impl Drop for TlsTestServer {
    fn drop(&mut self) {
        self.shutdown.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn start(service: Arc<dyn Service>, tls: Option<TlsServer>) -> TlsTestServer {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let secret = Secret::generate();
    let shutdown = Arc::new(AtomicBool::new(false));
    let (s, f) = (secret.clone(), shutdown.clone());
    let stats = Arc::new(ConnStats::default());
    let thread = std::thread::spawn(move || {
        serve_tls(listener, s, service, f, Limits::default(), stats, tls)
    });
    TlsTestServer {
        addr,
        secret,
        shutdown,
        thread: Some(thread),
    }
}

/// A CA and a server certificate for 127.0.0.1, and both sides' TLS settings.
fn certs(required: bool) -> (tempfile::TempDir, TlsServer, TlsClient) {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = make_cluster_certs(dir.path(), &["127.0.0.1".into(), "localhost".into()])
        .expect("certificates");
    let server = TlsServer::load(&c.cert, &c.key, required).expect("server identity");
    let ca = std::fs::read(&c.ca).expect("ca");
    let client = TlsClient::from_ca_pem(&ca, None).expect("client");
    (dir, server, client)
}

/// A relay from a new local port to `to` that keeps every byte it carries both ways.
fn recording_relay(to: SocketAddr) -> (SocketAddr, Arc<Mutex<Vec<u8>>>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind relay");
    let addr = l.local_addr().expect("relay addr");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(a) = c else { return };
            let Ok(b) = TcpStream::connect(to) else {
                return;
            };
            for (mut from, mut into) in [(a.try_clone().unwrap(), b.try_clone().unwrap()), (b, a)] {
                let seen = seen2.clone();
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 65536];
                    loop {
                        match from.read(&mut buf) {
                            Ok(0) | Err(_) => {
                                let _ = into.shutdown(std::net::Shutdown::Write);
                                return;
                            }
                            Ok(n) => {
                                seen.lock().unwrap().extend_from_slice(&buf[..n]);
                                if into.write_all(&buf[..n]).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        }
    });
    (addr, seen)
}

fn text(len: usize) -> Vec<u8> {
    b"stripefs plaintext that must not cross the wire in the clear; "
        .iter()
        .cycle()
        .take(len)
        .copied()
        .collect()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Writes `data` and checks the echo, then reads `len` bytes of the server's file.
fn exchange(conn: &mut Conn, data: &[u8]) -> Vec<u8> {
    let req = Request::Write {
        fid: InodeId(42),
        unit: 1 << 20,
        offset: 0,
        crcs: piece_crcs(0, data),
    };
    let mut back = vec![0u8; data.len()];
    let (_, n) = conn
        .call(&Cred::root(), req, data, &mut back)
        .expect("echo over TLS");
    assert_eq!(n, data.len());
    assert!(back == data, "the echo differs from what was sent");
    let req = Request::Read {
        fid: InodeId(42),
        unit: 1 << 20,
        offset: 0,
        len: 1 << 20,
    };
    let mut file = vec![0u8; 1 << 20];
    let (_, n) = conn
        .call(&Cred::root(), req, &[], &mut file)
        .expect("file reply");
    file.truncate(n);
    file
}

fn file_service(content: &[u8]) -> (tempfile::NamedTempFile, Arc<dyn Service>) {
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    f.write_all(content).expect("write");
    let svc = Arc::new(FileEcho(f.reopen().expect("reopen")));
    (f, svc)
}

#[test]
fn tls_carries_data_both_ways_and_the_wire_shows_no_plaintext() {
    let (_d, server_tls, client_tls) = certs(false);
    let content = text(1 << 20);
    let (_f, svc) = file_service(&content);
    let server = start(svc, Some(server_tls));
    let data = text(3 << 20 | 123);

    // TLS: right bytes, and none of them in the clear on the wire.
    let (relay, seen) = recording_relay(server.addr);
    let mut conn = Conn::connect_with(
        &relay.to_string(),
        &server.secret,
        None,
        TIMEOUT,
        Some(&client_tls),
    )
    .expect("TLS connect");
    assert!(conn.is_tls());
    assert!(exchange(&mut conn, &data) == content, "file reply over TLS");
    drop(conn);
    std::thread::sleep(Duration::from_millis(100));
    let wire = seen.lock().unwrap().clone();
    assert!(wire.len() > 7 << 20, "the relay saw {} bytes", wire.len());
    assert!(!contains(&wire, &data[..48]), "plaintext crossed the wire");

    // Control: a plain connection through the same kind of relay shows the plaintext,
    // so the check above could fail.
    let (relay, seen) = recording_relay(server.addr);
    let mut plain = Conn::connect(&relay.to_string(), &server.secret, TIMEOUT).expect("plain");
    assert!(!plain.is_tls());
    assert!(exchange(&mut plain, &data) == content, "file reply, plain");
    drop(plain);
    std::thread::sleep(Duration::from_millis(100));
    assert!(contains(&seen.lock().unwrap(), &data[..48]));
}

#[test]
fn a_server_that_requires_tls_refuses_plain_clients_naming_tls() {
    let (_d, server_tls, client_tls) = certs(true);
    let server = start(Arc::new(Echo), Some(server_tls));
    let addr = server.addr.to_string();
    let err = Conn::connect(&addr, &server.secret, TIMEOUT)
        .err()
        .expect("a plain client is refused");
    assert!(err.message.contains("requires TLS"), "{err}");
    let mut c = Conn::connect_with(&addr, &server.secret, None, TIMEOUT, Some(&client_tls))
        .expect("a TLS client is served");
    let (r, _) = c
        .call(&Cred::root(), Request::Ping {}, &[], &mut [])
        .expect("ping");
    assert!(matches!(r, Response::Pong { .. }));
}

#[test]
fn a_tls_client_of_a_plain_server_or_of_another_ca_fails_naming_it() {
    let (_d, server_tls, _) = certs(false);
    let (_d2, _, other_ca) = certs(false);
    let plain = start(Arc::new(Echo), None);
    let err = Conn::connect_with(
        &plain.addr.to_string(),
        &plain.secret,
        None,
        TIMEOUT,
        Some(&other_ca),
    )
    .err()
    .expect("no TLS on a plain server");
    assert!(err.message.contains("TLS handshake failed"), "{err}");
    assert!(err.message.contains("certificate"), "{err}");

    let tls = start(Arc::new(Echo), Some(server_tls));
    let err = Conn::connect_with(
        &tls.addr.to_string(),
        &tls.secret,
        None,
        TIMEOUT,
        Some(&other_ca),
    )
    .err()
    .expect("another cluster's CA does not vouch for this server");
    assert!(err.message.contains("TLS handshake failed"), "{err}");
    assert!(err.message.to_lowercase().contains("certificate"), "{err}");
}

#[test]
fn a_certificate_for_another_name_is_refused_unless_tls_name_says_it() {
    let d = tempfile::tempdir().expect("tempdir");
    let c = make_cluster_certs(d.path(), &["stripefs.test".into()]).expect("certificates");
    let server_tls = TlsServer::load(&c.cert, &c.key, false).expect("server identity");
    let server = start(Arc::new(Echo), Some(server_tls));
    let ca = std::fs::read(&c.ca).expect("ca");
    let addr = server.addr.to_string();
    // The certificate names stripefs.test only, not the address the client dials.
    let strict = TlsClient::from_ca_pem(&ca, None).expect("client");
    let err = Conn::connect_with(&addr, &server.secret, None, TIMEOUT, Some(&strict))
        .err()
        .expect("the certificate is not for 127.0.0.1");
    assert!(err.message.contains("TLS handshake failed"), "{err}");
    let named = TlsClient::from_ca_pem(&ca, Some("stripefs.test".into())).expect("client");
    Conn::connect_with(&addr, &server.secret, None, TIMEOUT, Some(&named))
        .expect("tls_name = stripefs.test matches the certificate");
}

#[test]
fn an_idle_tls_connection_does_not_look_closed() {
    let (_d, server_tls, client_tls) = certs(false);
    let server = start(Arc::new(Echo), Some(server_tls));
    let addr = server.addr.to_string();
    let mut c = Conn::connect_with(&addr, &server.secret, None, TIMEOUT, Some(&client_tls))
        .expect("connect");
    c.call(&Cred::root(), Request::Ping {}, &[], &mut [])
        .expect("ping");
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !c.closed_by_peer(),
        "nothing unasked-for arrives after the handshake"
    );
    c.call(&Cred::root(), Request::Ping {}, &[], &mut [])
        .expect("ping again");
    // A TLS session is one object for both directions: it is not split for pipelining.
    assert!(stripefs_rpc::Pipe::new(c).is_err());
}
