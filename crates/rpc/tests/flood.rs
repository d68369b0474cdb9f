//! More silent connections than the server's limit of authenticated connections, held
//! open from the good client's own address, with the real limits: the good client is
//! still served at once. Before the handshake acceptor, each of them took a thread and
//! one of the `MAX_CONNECTIONS` slots from the moment it was accepted, and the good
//! client was answered `Busy`.

mod common;

use common::*;
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[test]
fn more_silent_connections_than_the_limit_do_not_lock_a_client_out() {
    raise_nofile();
    let server = Server::start();
    let n = stripefs_rpc::MAX_CONNECTIONS + 100;
    let silent: Vec<TcpStream> = (0..n).map(|_| server.raw()).collect();
    // Give the server time to take them all in.
    std::thread::sleep(Duration::from_millis(500));
    let start = Instant::now();
    for _ in 0..3 {
        server.assert_serving();
    }
    let took = start.elapsed();
    println!("{n} silent connections; three clients served in {took:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    drop(silent);
}

/// Room for the silent connections at both ends in this one process.
fn raise_nofile() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit with a valid struct on the stack.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur = r.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
    }
}
