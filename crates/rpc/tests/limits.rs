//! Each named limit of `stripefs_rpc::limits`, tested by playing the peer it guards
//! against, with small values so the tests are quick: floods of connections that never
//! authenticate (from the good client's own address, from other addresses), peers that
//! trickle a handshake or a frame, authenticated connections that go idle, frames that
//! grow a connection's buffers, and more authenticated connections than allowed. After
//! each, a good client must still be served.

mod common;

use common::*;
use std::io::Write;
use std::net::{Ipv4Addr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use stripefs_rpc::auth::random_nonce;
use stripefs_rpc::limits;
use stripefs_rpc::{Conn, Limits};
use stripefs_wire::*;

fn small() -> Limits {
    Limits {
        max_connections: 64,
        max_unauth: 64,
        max_unauth_per_addr: 16,
        handshake_deadline: Duration::from_secs(1),
        peer_timeout: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(60),
        kept_buffer_bytes: 64 << 10,
        idle_poll: Duration::from_millis(100),
    }
}

fn ip(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, last)
}

/// Connects and proves the connection works, within `limit`.
fn assert_serving_within(server: &Server, limit: Duration) {
    let start = Instant::now();
    server.assert_serving();
    assert!(start.elapsed() < limit, "took {:?}", start.elapsed());
}

/// Far more silent connections than the per-address budget, from the good client's own
/// address: the newest always gets in, each new one closing the oldest, and the good
/// client (which authenticates at once) is served. Before the acceptor budgets, the
/// first 64 silent connections took every slot (max_connections) and locked it out.
#[test]
fn a_flood_from_the_clients_own_address_cannot_lock_it_out() {
    // A deadline far away: this test counts evictions, and on a loaded machine the
    // flood could outlast a short deadline, which would close some connections first.
    let server = Server::start_with(Limits {
        handshake_deadline: Duration::from_secs(30),
        ..small()
    });
    let mut flood: Vec<TcpStream> = (0..300).map(|_| server.raw_from(ip(1))).collect();
    for _ in 0..3 {
        assert_serving_within(&server, Duration::from_secs(2));
    }
    eventually(Duration::from_secs(5), "evictions counted", || {
        server.stats.evicted.load(Ordering::Relaxed) >= 300 - 16
    });
    assert!(server.stats.pending.load(Ordering::Relaxed) <= 16);
    // The oldest were closed, the newest are still waiting for their handshake.
    eventually(Duration::from_secs(5), "the oldest closed", || {
        is_closed(&mut flood[0])
    });
    assert!(!is_closed(&mut flood[299]), "the newest was closed");
    // And a held connection that then authenticates is served like any other.
    let mut newest = flood.pop().expect("300 connections");
    raw_authenticate(&mut newest, &server.secret);
}

/// A client that has sent its Hello and holds its challenge is not displaced by silent
/// connections from its own address, however many more than the budget arrive before
/// it answers: they close each other. Before the eviction tiers, a flood reopening
/// connections faster than the client's round trip (CI saw 21,000 a second on loopback)
/// closed the real client between its challenge and its Auth ("connection reset").
#[test]
fn a_challenged_client_outlives_a_silent_flood_from_its_own_address() {
    let server = Server::start_with(Limits {
        handshake_deadline: Duration::from_secs(30),
        ..small()
    });
    let mut client = server.raw_from(ip(4));
    let nonce_c = random_nonce();
    client
        .write_all(&request_frame(1, Request::Hello { nonce: nonce_c }))
        .expect("send Hello");
    let Some((_, Ok(Response::Challenge { nonce, .. }))) = read_response(&mut client) else {
        panic!("no challenge");
    };
    // Ten budgets' worth of silent connections from the same address, all newer.
    let _flood: Vec<TcpStream> = (0..160).map(|_| server.raw_from(ip(4))).collect();
    eventually(Duration::from_secs(5), "the flood closed itself", || {
        server.stats.evicted.load(Ordering::Relaxed) >= 160 - 16
    });
    let proof = server.secret.client_proof(&nonce, &nonce_c);
    client
        .write_all(&request_frame(2, Request::Auth { proof }))
        .expect("send Auth");
    let Some((_, Ok(Response::Done))) = read_response(&mut client) else {
        panic!("the challenged client was closed by the flood");
    };
}

/// A flood from one address displaces only its own connections: handshakes in progress
/// from other addresses survive it and complete.
#[test]
fn a_flood_from_one_address_spares_other_addresses() {
    // Not a test of the handshake deadline: the other addresses' handshakes must outlast
    // the flood and the check that the server serves, also on a loaded machine.
    let server = Server::start_with(Limits {
        handshake_deadline: Duration::from_secs(30),
        ..small()
    });
    let mut others: Vec<TcpStream> = (0..8).map(|_| server.raw_from(ip(3))).collect();
    let _flood: Vec<TcpStream> = (0..200).map(|_| server.raw_from(ip(2))).collect();
    assert_serving_within(&server, Duration::from_secs(2));
    for s in others.iter_mut() {
        raw_authenticate(s, &server.secret);
    }
}

/// When the budget of all unauthenticated connections is full, the oldest in all goes,
/// whichever its address.
#[test]
fn the_total_budget_closes_the_oldest_of_all() {
    // A deadline far away, so that only the budget closes connections here.
    let server = Server::start_with(Limits {
        handshake_deadline: Duration::from_secs(30),
        ..small()
    });
    // Four addresses, 16 each: 64, the total budget, then 16 more from a fifth.
    let mut first: Vec<TcpStream> = (0..16).map(|_| server.raw_from(ip(10))).collect();
    let _mid: Vec<TcpStream> = (11..14)
        .flat_map(|a| (0..16).map(move |_| a))
        .map(|a| server.raw_from(ip(a)))
        .collect();
    eventually(Duration::from_secs(5), "64 pending", || {
        server.stats.pending.load(Ordering::Relaxed) == 64
    });
    let _late: Vec<TcpStream> = (0..16).map(|_| server.raw_from(ip(14))).collect();
    eventually(Duration::from_secs(5), "the first address's closed", || {
        first.iter_mut().all(is_closed)
    });
    // The last eviction closes its victim a moment before the newcomer is counted.
    eventually(Duration::from_secs(5), "64 pending again", || {
        server.stats.pending.load(Ordering::Relaxed) == 64
    });
    assert_serving_within(&server, Duration::from_secs(2));
}

/// A peer that sends its Hello a byte every 100 ms (it would take 7 s) and one that sends
/// nothing are both closed at the handshake deadline, however their bytes are spread.
#[test]
fn the_handshake_deadline_closes_trickling_and_silent_peers() {
    let limits = small();
    let deadline = limits.handshake_deadline;
    let server = Server::start_with(limits);
    let mut silent = server.raw();
    let hello = request_frame(1, Request::Hello { nonce: [9; 32] });
    let mut trickler = server.raw();
    let start = Instant::now();
    let mut closed_at = None;
    for b in &hello {
        if trickler.write_all(&[*b]).is_err() {
            closed_at = Some(start.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        if is_closed(&mut trickler) {
            closed_at = Some(start.elapsed());
            break;
        }
    }
    let took = closed_at.expect("the trickled Hello was read to its end");
    println!("trickler closed after {took:?}");
    assert!(took >= deadline - Duration::from_millis(100), "{took:?}");
    assert!(took < deadline + Duration::from_millis(700), "{took:?}");
    assert!(
        is_closed(&mut silent),
        "the silent peer outlived the deadline"
    );
    assert!(server.stats.handshake_expired.load(Ordering::Relaxed) >= 2);
    assert_serving_within(&server, Duration::from_secs(2));
}

/// After authenticating, a frame trickled a byte every 100 ms is cut off at its deadline
/// (the peer timeout plus its length at the minimum rate), not read to its end.
#[test]
fn a_trickled_frame_is_cut_off_at_the_frame_deadline() {
    let limits = small();
    let deadline = limits::frame_deadline(limits.peer_timeout, HEADER_LEN);
    let server = Server::start_with(limits);
    let mut s = server.raw();
    raw_authenticate(&mut s, &server.secret);
    let ping = request_frame(7, Request::Ping {});
    let start = Instant::now();
    let mut closed_at = None;
    for b in &ping {
        if s.write_all(&[*b]).is_err() || is_closed(&mut s) {
            closed_at = Some(start.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = closed_at.expect("the trickled Ping was read to its end");
    println!("trickler closed after {took:?}");
    assert!(took >= deadline - Duration::from_millis(100), "{took:?}");
    assert!(took < deadline + Duration::from_millis(700), "{took:?}");
    assert_serving_within(&server, Duration::from_secs(2));
}

/// An authenticated connection with no request for the idle timeout is closed with a
/// `ConnectionClosed` notice (request id 0), then the server closes the socket; a
/// `Conn` that sends on it anyway gets `ConnectionClosed` (not handled, safe to resend)
/// and its deferred requests back.
#[test]
fn idle_connections_expire_with_a_notice() {
    let limits = Limits {
        idle_timeout: Duration::from_millis(500),
        ..small()
    };
    let server = Server::start_with(limits);
    let mut raw = server.raw();
    raw_authenticate(&mut raw, &server.secret);
    let start = Instant::now();
    let (h, r) = read_response(&mut raw).expect("a notice before the close");
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(450), "{waited:?}");
    assert!(waited < Duration::from_secs(2), "{waited:?}");
    assert_eq!(h.request_id, 0);
    let err = r.expect_err("the notice is an error");
    assert_eq!(err.code, ErrorCode::ConnectionClosed, "{err}");
    assert!(err.message.contains("idle"), "{err}");
    assert_closed(&mut raw);
    assert!(server.stats.idle_closed.load(Ordering::Relaxed) >= 1);

    // A client that sends after the notice: its request and deferred ones come back.
    let mut conn = server.connect().expect("connect");
    conn.defer(&Cred::root(), Request::Remove { fid: InodeId(5) })
        .expect("defer");
    std::thread::sleep(Duration::from_millis(1200));
    let e = conn
        .call(&Cred::root(), Request::Ping {}, &[], &mut [])
        .expect_err("the connection was closed");
    assert_eq!(e.code, ErrorCode::ConnectionClosed, "{e}");
    assert!(conn.is_broken());
    let unhandled = conn.take_unhandled();
    assert!(!unhandled.is_empty(), "the deferred Remove was lost");
    let h = Header::decode(&unhandled[..HEADER_LEN]).expect("a frame");
    assert_eq!(h.opcode, Opcode::Remove as u16);
    assert_serving_within(&server, Duration::from_secs(2));
}

/// A connection in use is never expired, however long it lives.
#[test]
fn busy_connections_do_not_expire() {
    let limits = Limits {
        idle_timeout: Duration::from_millis(300),
        ..small()
    };
    let server = Server::start_with(limits);
    let mut conn = server.connect().expect("connect");
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(1) {
        conn.call(&Cred::root(), Request::Ping {}, &[], &mut [])
            .expect("a connection in use stays");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(server.stats.idle_closed.load(Ordering::Relaxed), 0);
}

/// A 16 MiB write grows the connection's buffer to 16 MiB; once the connection is idle
/// the buffer shrinks back to the kept size.
#[test]
fn buffers_shrink_to_the_kept_size_when_idle() {
    let limits = small();
    let kept = limits.kept_buffer_bytes;
    let server = Server::start_with(limits);
    let mut conn = server.connect().expect("connect");
    let data = vec![7u8; MAX_DATA_BYTES as usize];
    let mut recv = vec![0u8; data.len()];
    let req = Request::Write {
        fid: InodeId(1),
        unit: 1 << 20,
        offset: 0,
        crcs: piece_crcs(0, &data),
    };
    conn.call(&Cred::root(), req, &data, &mut recv)
        .expect("echo 16 MiB");
    let grown = server.stats.buffer_bytes.load(Ordering::Relaxed);
    assert!(grown >= data.len(), "{grown}");
    eventually(Duration::from_secs(3), "buffers shrunk", || {
        server.stats.buffer_bytes.load(Ordering::Relaxed) <= 2 * kept
    });
    // Still a working connection.
    conn.call(&Cred::root(), Request::Ping {}, &[], &mut [])
        .expect("ping after the shrink");
    drop(conn);
    eventually(Duration::from_secs(3), "buffers freed on close", || {
        server.stats.buffer_bytes.load(Ordering::Relaxed) == 0
    });
}

/// Authenticated connections beyond `max_connections` are answered `Busy`; silent
/// unauthenticated ones do not count toward it.
#[test]
fn authenticated_connections_beyond_the_limit_are_busy() {
    let limits = Limits {
        max_connections: 4,
        ..small()
    };
    let server = Server::start_with(limits);
    let _silent: Vec<TcpStream> = (0..10).map(|_| server.raw()).collect();
    let mut held: Vec<Conn> = (0..4)
        .map(|_| server.connect().expect("within the limit"))
        .collect();
    let err = server.connect().err().expect("a fifth is refused");
    assert_eq!(err.code, ErrorCode::Busy, "{err}");
    assert_eq!(server.stats.refused_busy.load(Ordering::Relaxed), 1);
    held.pop();
    eventually(Duration::from_secs(3), "a slot freed", || {
        server.stats.authenticated.load(Ordering::Relaxed) == 3
    });
    server.assert_serving();
}

/// A handshake frame larger than the handshake allows is refused before its body is
/// read, so an unauthenticated peer cannot make the server allocate.
#[test]
fn an_oversized_handshake_frame_is_refused() {
    let server = Server::start();
    let mut s = server.raw();
    let mut h = Header {
        version: VERSION,
        opcode: Opcode::Hello as u16,
        body_len: limits::MAX_HANDSHAKE_BODY_BYTES + 1,
        ..Header::default()
    };
    h.body_crc = 0;
    s.write_all(&h.encode()).expect("send");
    let err = expect_refusal(&mut s, ErrorCode::AuthFailed);
    assert!(err.message.contains("oversized Hello"), "{err}");
    server.assert_serving();
}

/// A server raises its open-file limit to the hard limit, so its budgets fit: from
/// half the hard limit (so the other tests of this process keep room) back to all of it.
#[test]
fn the_open_file_limit_is_raised_to_the_hard_limit() {
    let get = || {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit with a valid struct on the stack.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) }, 0);
        r
    };
    let hard = get().rlim_max;
    let lower = libc::rlimit {
        rlim_cur: hard / 2,
        rlim_max: hard,
    };
    // SAFETY: setrlimit with a valid struct on the stack; lowering is always allowed.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lower) }, 0);
    assert_eq!(get().rlim_cur, hard / 2);
    let now = limits::raise_nofile_limit();
    assert_eq!(now, hard);
    assert_eq!(get().rlim_cur, hard);
}
