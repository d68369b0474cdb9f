//! Integration tests of `serve` and `Conn` over real TCP on 127.0.0.1: the good path
//! with bulk data both ways, authentication failures, bad frames of every kind before and
//! after authentication, silent and stalling peers, and unreachable or mute servers.
//! After each misbehaving peer a good client must still be served.

use crate::common;

use common::*;
use std::io::Write;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use stripefs_rpc::auth::Secret;
use stripefs_rpc::Conn;
use stripefs_wire::*;

use stripefs_testkit::pattern;

fn echo(conn: &mut Conn, offset: u64, data: &[u8], recv: &mut [u8]) -> usize {
    let req = Request::Write {
        fid: InodeId(42),
        unit: 1 << 20,
        offset,
        crcs: piece_crcs(offset, data),
    };
    let (resp, n) = conn
        .call(&Cred::root(), req, data, recv)
        .unwrap_or_else(|e| panic!("echo of {} bytes at {offset}: {e}", data.len()));
    let Response::ReadData { crcs } = resp else {
        panic!("echo answered {resp:?}");
    };
    // The client's end-to-end check: the stored per-block CRCs match the bytes received.
    assert_eq!(crcs, block_crcs(&recv[..n]));
    n
}

#[test]
fn handshake_and_bulk_data_both_ways() {
    let server = Server::start();
    let mut conn = server.connect().expect("connect with the right secret");
    assert_eq!(conn.addr(), server.addr.to_string());
    let mut recv = vec![0u8; MAX_DATA_BYTES as usize];
    for (offset, len) in [(0, 0), (0, 1), (10, 4095), (4095, 4097), (0, 100_000)] {
        let data = pattern(1, len);
        let n = echo(&mut conn, offset, &data, &mut recv);
        assert_eq!(&recv[..n], &data[..], "offset {offset} len {len}");
    }
    let data = pattern(1, MAX_DATA_BYTES as usize);
    let start = Instant::now();
    let n = echo(&mut conn, 0, &data, &mut recv);
    assert_eq!(n, data.len());
    assert!(recv == data, "16 MiB echo differs");
    println!("16 MiB each way in {:?}", start.elapsed());
    assert!(!conn.is_broken());
}

#[test]
fn response_larger_than_the_buffer_is_refused() {
    let server = Server::start();
    let mut conn = server.connect().expect("connect");
    let data = pattern(1, 8192);
    let mut small = vec![0u8; 4096];
    let req = Request::Write {
        fid: InodeId(1),
        unit: 4096,
        offset: 0,
        crcs: piece_crcs(0, &data),
    };
    let err = conn
        .call(&Cred::root(), req, &data, &mut small)
        .expect_err("8192 bytes do not fit in 4096");
    assert_eq!(err.code, ErrorCode::UnexpectedMessage, "{err}");
    assert!(conn.is_broken());
    server.assert_serving();
}

#[test]
fn wrong_secret_is_refused_with_a_clear_message() {
    capture_logs();
    let server = Server::start();
    let wrong = Secret::generate();
    let err = Conn::connect(&server.addr.to_string(), &wrong, TIMEOUT)
        .err()
        .expect("connect with a wrong secret must fail");
    assert_eq!(err.code, ErrorCode::AuthFailed, "{err}");
    assert!(err.message.contains("cluster"), "{err}");
    assert!(err.message.contains("secret"), "{err}");
    assert!(err.message.contains(&server.addr.to_string()), "{err}");
    // The client hangs up after checking the server's proof; the server says why.
    let line = wait_for_log(&["no Auth after the challenge", "wrong cluster secret"]);
    println!("server logged: {line}");
    server.assert_serving();
}

#[test]
fn wrong_client_proof_gets_auth_failed_and_a_log_line() {
    capture_logs();
    let server = Server::start();
    let mut s = server.raw();
    let me = s.local_addr().expect("local address").to_string();
    s.write_all(&request_frame(1, Request::Hello { nonce: [1; 32] }))
        .expect("send Hello");
    let Some((_, Ok(Response::Challenge { .. }))) = read_response(&mut s) else {
        panic!("no challenge");
    };
    s.write_all(&request_frame(2, Request::Auth { proof: [0; 32] }))
        .expect("send Auth");
    let err = expect_refusal(&mut s, ErrorCode::AuthFailed);
    assert!(err.message.contains("wrong cluster secret"), "{err}");
    wait_for_log(&["authentication of", &me, "wrong cluster secret"]);
    server.assert_serving();
}

/// A valid Hello frame: header then body.
fn hello() -> Vec<u8> {
    request_frame(1, Request::Hello { nonce: [3; 32] })
}

fn header_with(f: impl FnOnce(&mut Header)) -> Vec<u8> {
    let mut h = Header {
        version: VERSION,
        opcode: Opcode::Hello as u16,
        ..Header::default()
    };
    f(&mut h);
    h.encode().to_vec()
}

/// Bad frames, each with the FrameError reason number it must be refused with. Every
/// frame is sent whole, so the server has nothing unread when it closes.
fn bad_frames() -> Vec<(&'static str, Vec<u8>, u32)> {
    let mut bad_header_crc = hello()[..HEADER_LEN].to_vec();
    bad_header_crc[36] ^= 1;
    let mut bad_body_crc = hello();
    let last = bad_body_crc.len() - 1;
    bad_body_crc[last] ^= 0x80;
    let mut garbage = b"GET / HTTP/1.1\r\nHost: stripefs\r\n\r\n".to_vec();
    garbage.resize(HEADER_LEN, b' ');
    vec![
        ("garbage", garbage, 2),
        ("bad header crc", bad_header_crc, 4),
        ("bad body crc", bad_body_crc, 12),
        (
            "oversized body_len",
            header_with(|h| h.body_len = MAX_BODY_BYTES + 1),
            10,
        ),
        (
            "oversized data_len",
            header_with(|h| h.data_len = MAX_DATA_BYTES + 1),
            11,
        ),
        (
            "a later version",
            header_with(|h| h.version = VERSION + 1),
            3,
        ),
    ]
}

/// Sends `frame`, reads the refusal, checks the reason and the log.
fn send_bad_frame(s: &mut TcpStream, what: &str, frame: &[u8], reason: u32) {
    let me = s.local_addr().expect("local address").to_string();
    s.write_all(frame).expect("send");
    let code = if reason == 3 {
        ErrorCode::VersionMismatch
    } else {
        ErrorCode::BadFrame
    };
    let err = expect_refusal(s, code);
    let tag = format!("(reason {reason})");
    assert!(err.message.contains(&tag), "{what}: {err}");
    wait_for_log(&["bad frame from", &me, &tag]);
}

#[test]
fn bad_frames_before_authentication_are_refused() {
    capture_logs();
    let server = Server::start();
    for (what, frame, reason) in bad_frames() {
        let mut s = server.raw();
        send_bad_frame(&mut s, what, &frame, reason);
        server.assert_serving();
    }
}

#[test]
fn bad_frames_after_authentication_are_refused() {
    capture_logs();
    let server = Server::start();
    for (what, frame, reason) in bad_frames() {
        let mut s = server.raw();
        raw_authenticate(&mut s, &server.secret);
        send_bad_frame(&mut s, what, &frame, reason);
        server.assert_serving();
    }
}

#[test]
fn truncated_frames_then_close_are_refused() {
    capture_logs();
    let server = Server::start();
    let frame = hello();
    for cut in [1, HEADER_LEN / 2, HEADER_LEN + 5, frame.len() - 1] {
        for authenticated in [false, true] {
            let mut s = server.raw();
            if authenticated {
                raw_authenticate(&mut s, &server.secret);
            }
            s.write_all(&frame[..cut]).expect("send");
            s.shutdown(Shutdown::Write).expect("half-close");
            let err = expect_refusal(&mut s, ErrorCode::BadFrame);
            assert!(err.message.contains("truncated"), "cut at {cut}: {err}");
            server.assert_serving();
        }
    }
}

#[test]
fn request_before_authentication_is_refused() {
    capture_logs();
    let server = Server::start();
    let mut s = server.raw();
    let me = s.local_addr().expect("local address").to_string();
    s.write_all(&request_frame(1, Request::Ping {}))
        .expect("send Ping");
    let err = expect_refusal(&mut s, ErrorCode::AuthFailed);
    assert!(err.message.contains("not Hello"), "{err}");
    wait_for_log(&["authentication of", &me, "not Hello"]);
    server.assert_serving();
}

#[test]
fn hello_after_authentication_is_an_error_but_not_fatal() {
    let server = Server::start();
    let mut s = server.raw();
    raw_authenticate(&mut s, &server.secret);
    s.write_all(&request_frame(3, Request::Hello { nonce: [0; 32] }))
        .expect("send");
    let (_, r) = read_response(&mut s).expect("an answer");
    assert_eq!(
        r.expect_err("second Hello").code,
        ErrorCode::UnexpectedMessage
    );
    s.write_all(&request_frame(4, Request::Ping {}))
        .expect("send");
    let (h, r) = read_response(&mut s).expect("an answer");
    assert_eq!(h.request_id, 4);
    assert!(matches!(r, Ok(Response::Pong { .. })), "{r:?}");
}

#[test]
fn silent_client_does_not_block_others() {
    let server = Server::start();
    let silent: Vec<TcpStream> = (0..8).map(|_| server.raw()).collect();
    let start = Instant::now();
    for _ in 0..4 {
        server.assert_serving();
    }
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    drop(silent);
}

/// The server's limit for finishing a started frame or the handshake (PEER_TIMEOUT).
const PEER_TIMEOUT: Duration = Duration::from_secs(10);

fn stall_and_time_the_drop(mut s: TcpStream, partial: &[u8]) -> JoinHandle<Duration> {
    s.set_read_timeout(Some(PEER_TIMEOUT * 2)).expect("timeout");
    s.write_all(partial).expect("send");
    std::thread::spawn(move || {
        let start = Instant::now();
        assert_closed(&mut s);
        start.elapsed()
    })
}

#[test]
fn stalled_half_frames_are_dropped_after_the_timeout() {
    let server = Server::start();
    let frame = hello();
    // Before authentication: half a header.
    let before = stall_and_time_the_drop(server.raw(), &frame[..HEADER_LEN / 2]);
    // After authentication: a whole header and half the body it announces.
    let mut s = server.raw();
    raw_authenticate(&mut s, &server.secret);
    let ping = request_frame(9, Request::Ping {});
    let after = stall_and_time_the_drop(s, &ping[..ping.len() - 3]);
    let start = Instant::now();
    server.assert_serving();
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "stalled peers slowed others"
    );
    for (what, t) in [("before auth", before), ("after auth", after)] {
        let waited = t.join().expect("stall thread");
        println!("{what}: dropped after {waited:?}");
        assert!(
            waited >= PEER_TIMEOUT - Duration::from_secs(1),
            "{what}: {waited:?}"
        );
        assert!(
            waited < PEER_TIMEOUT + Duration::from_secs(5),
            "{what}: {waited:?}"
        );
    }
    server.assert_serving();
}

#[test]
fn connect_to_a_closed_port_fails_fast() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    drop(listener);
    let start = Instant::now();
    let err = Conn::connect(&addr, &Secret::generate(), TIMEOUT)
        .err()
        .expect("nothing listens there");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(err.code, ErrorCode::Unreachable, "{err}");
    assert!(err.message.contains(&addr), "{err}");
}

/// A server that accepts connections and, if `handshake`, authenticates them, but never
/// answers anything else. Stopped and joined on drop.
struct MuteServer {
    addr: String,
    secret: Secret,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MuteServer {
    fn start(handshake: bool) -> MuteServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr").to_string();
        let secret = Secret::generate();
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sec) = (stop.clone(), secret.clone());
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !st.load(Ordering::Relaxed) {
                if let Ok((s, _)) = listener.accept() {
                    s.set_nonblocking(false).expect("blocking");
                    let mut s = s;
                    if handshake {
                        serve_handshake(&mut s, &sec);
                    }
                    held.push(s);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        MuteServer {
            addr,
            secret,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for MuteServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let r = t.join();
            if !std::thread::panicking() {
                r.expect("mute server thread panicked");
            }
        }
    }
}

/// The server half of the handshake, written against the wire crate alone.
fn serve_handshake(s: &mut TcpStream, secret: &Secret) {
    use std::io::Read;
    let read_req = |s: &mut TcpStream| {
        let mut hb = [0u8; HEADER_LEN];
        s.read_exact(&mut hb).expect("header");
        let h = Header::decode(&hb).expect("valid header");
        let mut body = vec![0u8; h.body_len as usize];
        s.read_exact(&mut body).expect("body");
        (h, decode_request(&h, &body).expect("valid request").req)
    };
    let (h, Request::Hello { nonce: nonce_c }) = read_req(s) else {
        panic!("expected Hello");
    };
    let nonce = [5u8; 32];
    let proof = secret.server_proof(&nonce_c, &nonce);
    let challenge = Ok(Response::Challenge { nonce, proof });
    s.write_all(&encode_response(h.request_id, Opcode::Hello, &challenge, 0))
        .expect("send challenge");
    let (h, Request::Auth { proof }) = read_req(s) else {
        panic!("expected Auth");
    };
    assert_eq!(proof, secret.client_proof(&nonce, &nonce_c));
    s.write_all(&encode_response(
        h.request_id,
        Opcode::Auth,
        &Ok(Response::Done),
        0,
    ))
    .expect("send Done");
}

fn assert_timeout(err: &WireError, addr: &str, took: Duration, limit: Duration) {
    assert_eq!(err.code, ErrorCode::Timeout, "{err}");
    assert!(err.message.contains(addr), "{err}");
    assert!(took >= limit - Duration::from_millis(100), "{took:?}");
    assert!(took < limit + Duration::from_millis(1500), "{took:?}");
}

#[test]
fn server_that_never_answers_the_handshake_times_out() {
    let mute = MuteServer::start(false);
    let limit = Duration::from_millis(500);
    let start = Instant::now();
    let err = Conn::connect(&mute.addr, &mute.secret, limit)
        .err()
        .expect("no handshake answer");
    assert_timeout(&err, &mute.addr, start.elapsed(), limit);
}

#[test]
fn server_that_never_answers_a_call_times_out() {
    let mute = MuteServer::start(true);
    let mut conn = Conn::connect(&mute.addr, &mute.secret, TIMEOUT).expect("handshake");
    let limit = Duration::from_millis(500);
    conn.set_timeout(limit);
    let start = Instant::now();
    let err = conn
        .call(&Cred::root(), Request::Ping {}, &[], &mut [])
        .expect_err("no answer");
    assert_timeout(&err, &mute.addr, start.elapsed(), limit);
    assert!(conn.is_broken());
    let again = conn
        .call(&Cred::root(), Request::Ping {}, &[], &mut [])
        .expect_err("broken");
    assert!(again.message.contains("broken"), "{again}");
}

/// Requests sent without an answer (`send`, FLAG_NO_REPLY) get none: the next call's
/// answer is the first frame to arrive, even after more of them than a socket buffer
/// would hold answers for; one that fails (Hello after authentication) is only logged
/// and the connection stays. Pipelined calls keep their order.
#[test]
fn unanswered_requests_and_pipelined_calls_keep_order() {
    let server = Server::start();
    let mut conn = server.connect().unwrap();
    let r = Cred::root();
    for _ in 0..20_000 {
        conn.send(&r, Request::Ping {}).unwrap();
    }
    conn.send(&r, Request::Hello { nonce: [0; 32] }).unwrap();
    let (resp, _) = conn.call(&r, Request::Ping {}, &[], &mut []).unwrap();
    assert!(matches!(resp, Response::Pong { .. }), "{resp:?}");
    let mut recv = vec![0u8; 100];
    let data = pattern(1, 100);
    assert_eq!(echo(&mut conn, 5, &data, &mut recv), 100);
    assert_eq!(recv, data);
    let answers = conn
        .call_many(
            &r,
            vec![
                Request::Ping {},
                Request::Hello { nonce: [1; 32] },
                Request::Remove { fid: InodeId(3) },
            ],
        )
        .unwrap();
    assert_eq!(answers.len(), 3);
    assert!(matches!(answers[0], Ok(Response::Pong { .. })));
    assert_eq!(
        answers[1].as_ref().unwrap_err().code,
        ErrorCode::UnexpectedMessage
    );
    assert!(matches!(answers[2], Ok(Response::Done)));
    assert!(!conn.is_broken());
    server.assert_serving();
}

/// `ClientHost` is answered by the rpc layer and kept with its connection only; a bad
/// host id is refused and the connection stays.
#[test]
fn client_host_is_kept_with_its_connection() {
    let server = Server::start();
    let mut a = server.connect().unwrap();
    let mut b = server.connect().unwrap();
    let pong = |c: &mut Conn| match c.call(&Cred::root(), Request::Ping {}, &[], &mut []) {
        Ok((Response::Pong { version, .. }, _)) => version,
        other => panic!("ping answered {other:?}"),
    };
    let say = |c: &mut Conn, host: &str| {
        let req = Request::ClientHost { host: host.into() };
        c.call(&Cred::root(), req, &[], &mut []).map(|(r, _)| r)
    };
    assert_eq!(pong(&mut a), "test");
    assert_eq!(say(&mut a, "host3").unwrap(), Response::Done);
    assert_eq!(pong(&mut a), "host3");
    assert_eq!(
        pong(&mut b),
        "test",
        "another connection of the same client"
    );
    let e = say(&mut a, "a b").unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument, "{e}");
    assert!(e.message.contains("bad host id"), "{e}");
    assert_eq!(pong(&mut a), "host3");
    assert_eq!(say(&mut a, "host4").unwrap(), Response::Done);
    assert_eq!(pong(&mut a), "host4");
}

/// Text-like bytes (words from a small vocabulary): compressible about 4:1.
fn text(len: usize) -> Vec<u8> {
    let words = [
        "stripe ", "server ", "client ", "object ", "block ", "inode ",
    ];
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(words[(x % 6) as usize].as_bytes());
    }
    out.truncate(len);
    out
}

#[test]
fn compressed_connections_carry_the_same_bytes_in_fewer_wire_bytes() {
    use stripefs_rpc::compress::Codec;
    let server = Server::start();
    let mut recv = vec![0u8; MAX_DATA_BYTES as usize];
    for codec in [Codec::Lz4, Codec::Zstd(1), Codec::Zstd(9), Codec::Auto] {
        let mut conn = server.connect().expect("connect");
        conn.announce(Some("h1"), codec, false)
            .expect("SetCompression");
        assert_eq!(conn.compression(), codec);
        // Small (sent as it is), odd-sized and the largest frame.
        let mut plain = 0u64;
        for (offset, len) in [(0, 100), (4095, 70_001), (0, MAX_DATA_BYTES as usize)] {
            let data = text(len);
            let n = echo(&mut conn, offset, &data, &mut recv);
            assert!(recv[..n] == data[..], "{codec}: {len} bytes differ");
            plain += len as u64;
        }
        let (sent, received) = conn.wire_data_bytes();
        println!("{codec}: {plain} plain bytes each way, {sent} sent, {received} received");
        assert!(sent < plain / 2, "{codec}: {sent} of {plain} sent");
        assert!(
            received < plain / 2,
            "{codec}: {received} of {plain} received"
        );
        assert!(!conn.is_broken());
    }
    // Random bytes under auto go as they are, both ways.
    let mut conn = server.connect().expect("connect");
    conn.announce(None, Codec::Auto, false)
        .expect("SetCompression");
    let data = pattern(1, 1 << 20);
    let n = echo(&mut conn, 0, &data, &mut recv);
    assert!(recv[..n] == data[..]);
    assert_eq!(conn.wire_data_bytes(), (1 << 20, 1 << 20));
}

#[test]
fn an_unknown_codec_is_refused_and_the_connection_stays_plain() {
    let server = Server::start();
    let mut conn = server.connect().expect("connect");
    let req = Request::SetCompression { codec: 9, level: 0 };
    let err = conn
        .call(&Cred::root(), req, &[], &mut [])
        .expect_err("codec 9 accepted");
    assert_eq!(err.code, ErrorCode::InvalidArgument, "{err}");
    assert!(err.message.contains("codec 9"), "{err}");
    let data = text(1 << 16);
    let mut recv = vec![0u8; data.len()];
    echo(&mut conn, 0, &data, &mut recv);
    assert_eq!(recv, data);
    assert_eq!(conn.wire_data_bytes(), (1 << 16, 1 << 16));
}

#[test]
fn compressed_data_that_does_not_decode_is_a_bad_frame() {
    capture_logs();
    let server = Server::start();
    let data = text(1 << 16);
    let good = stripefs_rpc::compress::Codec::Lz4.compress(&data).unwrap();
    let mut lying = good.clone();
    lying[4..8].copy_from_slice(&(data.len() as u32 + 1).to_le_bytes());
    let mut garbage = good.clone();
    for b in &mut garbage[8..] {
        *b = 0xff;
    }
    for (what, section) in [("lying length", lying), ("garbage", garbage)] {
        let mut s = server.raw();
        raw_authenticate(&mut s, &server.secret);
        let env = Envelope {
            cred: Cred::root(),
            req: Request::Write {
                fid: InodeId(42),
                unit: 1 << 20,
                offset: 0,
                crcs: piece_crcs(0, &data),
            },
        };
        let mut frame = encode_request_flags(3, &env, section.len() as u32, FLAG_COMPRESSED);
        frame.extend_from_slice(&section);
        send_bad_frame(&mut s, what, &frame, 16);
        server.assert_serving();
    }
}
