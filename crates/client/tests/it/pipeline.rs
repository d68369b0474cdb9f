//! Pipelined data-server connections (`pipeline` in the cluster file): the same bytes
//! both ways through real data servers, with large and small (gathered) writes and
//! reads; a data server that stops during pipelined write-behind makes fsync fail,
//! never acknowledge.

use crate::common;

use common::{hint, pattern, seed, Cluster};
use stripefs_client::{Client, Cred, OpenOptions};

#[test]
fn pipelined_connections_carry_the_same_bytes_both_ways() {
    let s = seed("pipelined_connections_carry_the_same_bytes_both_ways");
    let cl = Cluster::with(2, 1, 64 << 10);
    for (streams, depth) in [(1, 8), (2, 4)] {
        let mut cfg = cl.config.clone();
        cfg.streams = Some(streams);
        cfg.pipeline = Some(depth);
        let data = pattern(s ^ u64::from(depth), 12 << 20 | 4321);
        let c = Client::connect(&cfg).unwrap().with_cred(Cred::root());
        let path = format!("/pipe-{streams}-{depth}");
        let f = c
            .open(
                &path,
                &OpenOptions::create_truncate()
                    .read(true)
                    .layout(hint(64 << 10, 2)),
            )
            .unwrap();
        f.write_at(0, &data[..8 << 20]).unwrap();
        for k in 0..300u64 {
            let at = (k * 13_007) as usize;
            f.write_at(at as u64, &data[at..at + 1000]).unwrap();
        }
        f.write_at(8 << 20, &data[8 << 20..]).unwrap();
        f.fsync().unwrap();
        f.close().unwrap();
        let r = Client::connect(&cfg).unwrap().with_cred(Cred::root());
        assert!(
            r.read_file(&path).unwrap() == data,
            "streams {streams} pipeline {depth}: bytes differ (seed {s})"
        );
        let f = r.open(&path, &OpenOptions::read_only()).unwrap();
        let mut buf = vec![0u8; 5000];
        for k in 0..50u64 {
            let at = k * 200_003 % (data.len() as u64 - 5000);
            assert_eq!(f.read_at(at, &mut buf).unwrap(), 5000);
            assert!(buf[..] == data[at as usize..at as usize + 5000], "at {at}");
        }
    }
}

#[test]
fn a_data_server_stopping_during_pipelined_write_behind_fails_fsync() {
    let s = seed("a_data_server_stopping_during_pipelined_write_behind_fails_fsync");
    let mut cl = Cluster::with(2, 1, 64 << 10);
    let mut cfg = cl.config.clone();
    cfg.pipeline = Some(4);
    let c = Client::connect(&cfg).unwrap().with_cred(Cred::root());
    let f = c
        .open(
            "/pipe-stop",
            &OpenOptions::create_truncate().layout(hint(64 << 10, 2)),
        )
        .unwrap();
    let data = pattern(s, 4 << 20);
    f.write_at(0, &data).unwrap();
    f.fsync().unwrap();
    cl.stop_data(1);
    // Write-behind takes these without waiting; what does not reach server 1 must
    // surface at fsync (or already at a write, once the window is full).
    let mut failed = false;
    for k in 1..8u64 {
        if f.write_at(k * (4 << 20), &data).is_err() {
            failed = true;
            break;
        }
    }
    let synced = f.fsync();
    assert!(
        failed || synced.is_err(),
        "fsync acknowledged data a stopped server never got (seed {s})"
    );
    let _ = f.close();
}
