//! Pipelined connections (`Pipe`): many callers on one connection each get their own
//! answer (matched by request id) while several requests are in flight; a connection
//! that breaks fails every waiting caller instead of leaving one hanging.

use crate::common;

use common::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use stripefs_rpc::{Conn, Pipe};
use stripefs_wire::*;

fn write_req(offset: u64, data: &[u8]) -> Request {
    Request::Write {
        fid: InodeId(42),
        unit: 1 << 20,
        offset,
        crcs: piece_crcs(offset, data),
    }
}

/// Distinct bytes per caller and call.
fn bytes(caller: usize, call: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64 * 31 + caller as u64 * 7 + call as u64 * 13) as u8)
        .collect()
}

#[test]
fn many_callers_share_one_connection_and_each_gets_its_own_answer() {
    let server = Server::start();
    let conn = Conn::connect(&server.addr.to_string(), &server.secret, TIMEOUT).unwrap();
    let pipe = Arc::new(Pipe::new(conn).ok().expect("a plain connection pipelines"));
    let most = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (pipe, most, stop) = (pipe.clone(), most.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                most.fetch_max(pipe.in_flight(), Ordering::Relaxed);
                std::thread::yield_now();
            }
        })
    };
    let callers: Vec<_> = (0..8)
        .map(|caller| {
            let pipe = pipe.clone();
            std::thread::spawn(move || {
                for call in 0..40 {
                    let data = bytes(caller, call, 4096 * (1 + (caller + call) % 16));
                    let mut back = vec![0u8; data.len()];
                    let (r, (sent, got)) =
                        pipe.call(&Cred::root(), write_req(0, &data), &data, &mut back);
                    let (_, n) = r.unwrap_or_else(|e| panic!("caller {caller} call {call}: {e}"));
                    assert_eq!(n, data.len());
                    assert!(
                        back == data,
                        "caller {caller} call {call} got another's answer"
                    );
                    assert_eq!((sent, got), (data.len() as u64, data.len() as u64));
                }
            })
        })
        .collect();
    for c in callers {
        c.join().expect("caller");
    }
    stop.store(true, Ordering::Relaxed);
    watcher.join().unwrap();
    assert!(
        most.load(Ordering::Relaxed) >= 2,
        "never more than {} request in flight",
        most.load(Ordering::Relaxed)
    );
    assert_eq!(pipe.in_flight(), 0);
    assert!(!pipe.is_broken());
}

#[test]
fn a_broken_connection_fails_every_waiting_caller() {
    let mut server = Some(Server::start());
    let s = server.as_ref().unwrap();
    let conn = Conn::connect(&s.addr.to_string(), &s.secret, TIMEOUT).unwrap();
    let pipe = Arc::new(Pipe::new(conn).ok().expect("pipe"));
    let start = Instant::now();
    let callers: Vec<_> = (0..6)
        .map(|caller| {
            let pipe = pipe.clone();
            std::thread::spawn(move || {
                let mut errors = 0;
                for call in 0..400 {
                    let data = bytes(caller, call, 64 << 10);
                    let mut back = vec![0u8; data.len()];
                    match pipe
                        .call(&Cred::root(), write_req(0, &data), &data, &mut back)
                        .0
                    {
                        Ok(_) => assert!(back == data),
                        Err(_) => errors += 1,
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                errors
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    // The server goes away while requests are in flight.
    drop(server.take());
    let errors: usize = callers.into_iter().map(|c| c.join().expect("caller")).sum();
    assert!(errors > 0, "no caller saw the server go");
    assert!(pipe.is_broken());
    assert_eq!(pipe.in_flight(), 0, "a caller was left waiting");
    assert!(start.elapsed() < Duration::from_secs(30));
}

#[test]
fn a_request_refused_before_sending_fails_alone() {
    let server = Server::start();
    let conn = Conn::connect(&server.addr.to_string(), &server.secret, TIMEOUT).unwrap();
    let pipe = Pipe::new(conn).ok().expect("pipe");
    let huge = vec![0u8; MAX_DATA_BYTES as usize + 1];
    let (r, _) = pipe.call(&Cred::root(), write_req(0, &huge), &huge, &mut []);
    assert_eq!(r.err().map(|e| e.code), Some(ErrorCode::InvalidArgument));
    assert!(
        !pipe.is_broken(),
        "one oversized request broke the connection"
    );
    let data = bytes(1, 1, 4096);
    let mut back = vec![0u8; 4096];
    let (r, _) = pipe.call(&Cred::root(), write_req(0, &data), &data, &mut back);
    r.expect("the pipe still carries requests");
    assert!(back == data);
}
