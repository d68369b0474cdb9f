//! In-process throughput: `cargo test --release -p stripefs-data throughput -- --ignored --nocapture`.

use super::*;
use std::time::{Duration, Instant};
use stripefs_wire::Valid;

const REQUEST_BYTES: usize = 1 << 20;
const TOTAL_BYTES: usize = 1 << 30;
const UNIT: u32 = 1 << 20;

/// Time spent inside `handle` only; building each request (a copy of the payload, as
/// the network would deliver it) is outside the timing.
fn run(svc: &DataService, threads: usize) -> (f64, f64) {
    let per = TOTAL_BYTES / threads / REQUEST_BYTES;
    let (write_s, read_s) = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let data = pattern(t as u64, REQUEST_BYTES);
                    let crcs = piece_crcs(0, &data);
                    let (mut w, mut r) = (Duration::ZERO, Duration::ZERO);
                    for i in 0..per {
                        let off = ((t * per + i) * REQUEST_BYTES) as u64;
                        let req = Request::Write {
                            fid: InodeId(1),
                            unit: UNIT,
                            offset: off,
                            crcs: crcs.clone(),
                        };
                        let env = Envelope {
                            cred: Cred::root(),
                            req,
                        };
                        let t0 = Instant::now();
                        let req = Valid::check(env, data.len() as u32).unwrap();
                        assert!(svc.handle(&conn(), req, &data).result.is_ok());
                        w += t0.elapsed();
                    }
                    for i in 0..per {
                        let off = ((t * per + i) * REQUEST_BYTES) as u64;
                        let req = Request::Read {
                            fid: InodeId(1),
                            unit: UNIT,
                            offset: off,
                            len: REQUEST_BYTES as u32,
                        };
                        let env = Envelope {
                            cred: Cred::root(),
                            req,
                        };
                        let t0 = Instant::now();
                        let reply = svc.handle(&conn(), Valid::check(env, 0).unwrap(), &[]);
                        r += t0.elapsed();
                        assert!(reply.result.is_ok());
                    }
                    (w, r)
                })
            })
            .collect();
        let all: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        let w = all.iter().map(|x| x.0).max().unwrap();
        let r = all.iter().map(|x| x.1).max().unwrap();
        (w.as_secs_f64(), r.as_secs_f64())
    });
    let gb = TOTAL_BYTES as f64 / 1e9;
    (gb / write_s, gb / read_s)
}

#[test]
#[ignore]
fn throughput() {
    for threads in [1, 2] {
        let (_d, svc) = fs_server(2, None);
        let (w, r) = run(&svc, threads);
        eprintln!("{threads} thread(s), 2 targets, 1 MiB requests, 1 GiB: write {w:.2} GB/s, read {r:.2} GB/s");
    }
}

/// In-process interleaved unaligned records (issue 13's hard pattern): `threads`
/// writers, record `k` of writer `w` at `(k * threads + w) * 47008`, then one fsync.
/// `cargo test --release -p stripefs-data interleaved_throughput -- --ignored --nocapture`
#[test]
#[ignore]
fn interleaved_throughput() {
    const REC: usize = 47_008;
    const RECS: usize = 4000;
    for round in 0..3 {
        let (_d, svc) = fs_server(1, None);
        let threads = 4;
        let t0 = Instant::now();
        std::thread::scope(|s| {
            for w in 0..threads {
                let svc = svc.clone();
                s.spawn(move || {
                    let data = pattern(w as u64, REC);
                    for k in 0..RECS / threads {
                        let off = ((k * threads + w) * REC) as u64;
                        let req = Request::Write {
                            fid: InodeId(1),
                            unit: UNIT,
                            offset: off,
                            crcs: piece_crcs(off, &data),
                        };
                        let env = Envelope {
                            cred: Cred::root(),
                            req,
                        };
                        let req = Valid::check(env, data.len() as u32).unwrap();
                        assert!(svc.handle(&conn(), req, &data).result.is_ok());
                    }
                });
            }
        });
        let write_s = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        simple(&svc, Request::Fsync { fid: InodeId(1) }).unwrap();
        let sync_s = t1.elapsed().as_secs_f64();
        let mib = (REC * RECS) as f64 / (1 << 20) as f64;
        eprintln!(
            "round {round}: writes {:.0} MiB/s ({write_s:.3} s), fsync {sync_s:.3} s, together {:.0} MiB/s",
            mib / write_s,
            mib / (write_s + sync_s)
        );
    }
}
