//! Faults the client must report clearly: corruption, dead servers, wrong secret.

use crate::common;

use common::{hint, pattern, Cluster, SMALL_STRIPE};
use std::time::{Duration, Instant};
use stripefs_client::{Client, ErrorCode, OpenOptions};

/// A flipped byte in a stored object is caught by the client's CRC check.
#[test]
fn corrupt_object_is_a_checksum_error() {
    let cl = Cluster::start();
    let c = cl.client();
    let f = c
        .open(
            "/victim",
            &OpenOptions::create_truncate().layout(hint(SMALL_STRIPE, 1)),
        )
        .unwrap();
    let data = pattern(3, 300_000);
    f.write_at(0, &data).unwrap();
    f.fsync().unwrap();
    let ino = f.ino();
    let server = f.layout().servers[0].0 as usize;
    f.close().unwrap();
    // Flip one byte in whichever target holds data (unit 0 lives on target 0).
    let (path, _) = cl.object_paths(server, 0, ino);
    let mut bytes =
        std::fs::read(&path).unwrap_or_else(|e| panic!("object file {}: {e}", path.display()));
    bytes[5000] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();

    let f = c.open("/victim", &OpenOptions::new()).unwrap();
    let mut buf = vec![0u8; 8192];
    let err = f.read_at(4096, &mut buf).unwrap_err();
    assert_eq!(err.code, ErrorCode::Checksum, "{err}");
    let addr = &cl.config.data[server].addr;
    assert!(err.message.contains(addr), "names the server: {err}");
    assert!(
        err.message.contains(&format!("data server {server}")),
        "names the server id: {err}"
    );
    assert!(
        err.message.contains(&format!("inode {}", ino.0)),
        "names the inode: {err}"
    );
    assert!(err.message.contains("/victim"), "names the path: {err}");
    // Bytes in other blocks are still readable.
    assert_eq!(f.read_at(8192, &mut buf).unwrap(), 8192);
    assert_eq!(buf[..], data[8192..16384]);
}

/// A damaged block fails the reads that need it, not sequential reads of other bytes
/// near it (which read whole stretches ahead for their cache).
#[test]
fn a_damaged_block_fails_only_reads_that_need_it() {
    let cl = Cluster::start();
    let c = cl.client();
    let data = pattern(4, 1 << 20);
    let f = c
        .open(
            "/near",
            &OpenOptions::create_truncate().layout(hint(1 << 20, 1)),
        )
        .unwrap();
    f.write_at(0, &data).unwrap();
    f.fsync().unwrap();
    let (ino, server) = (f.ino(), f.layout().servers[0].0 as usize);
    f.close().unwrap();
    let (path, _) = cl.object_paths(server, 0, ino);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[600_000] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();

    let f = c.open("/near", &OpenOptions::new()).unwrap();
    f.advise_sequential(0, data.len() as u64);
    let mut buf = vec![0u8; 100_000];
    for at in [0u64, 100_000, 200_000, 300_000, 400_000] {
        assert_eq!(f.read_at(at, &mut buf).unwrap(), 100_000, "at {at}");
        assert!(
            buf[..] == data[at as usize..at as usize + 100_000],
            "at {at}"
        );
    }
    let err = f.read_at(550_000, &mut buf).unwrap_err();
    assert_eq!(err.code, ErrorCode::Checksum, "{err}");
    assert_eq!(f.read_at(700_000, &mut buf).unwrap(), 100_000);
    assert!(buf[..] == data[700_000..800_000]);
}

/// A stopped data server fails the reads that need it, quickly and by name; files on
/// other servers keep working.
#[test]
fn stopped_server_fails_fast_and_others_work() {
    let mut cl = Cluster::start();
    let c = cl.client();
    let data = pattern(9, 200_000);
    // With stripe count 1, each file lands on one server; make enough to cover all 4.
    let mut files = Vec::new();
    for i in 0..8 {
        let path = format!("/one{i}");
        c.write_file(&path, &[], 0o644).ok();
        c.unlink(&path).unwrap();
        let f = c
            .open(
                &path,
                &OpenOptions::create_truncate().layout(hint(SMALL_STRIPE, 1)),
            )
            .unwrap();
        f.write_at(0, &data).unwrap();
        let server = f.layout().servers[0].0 as usize;
        f.close().unwrap();
        files.push((path, server));
    }
    let victim = files[0].1;
    assert!(
        files.iter().any(|f| f.1 != victim),
        "files spread over servers: {files:?}"
    );
    // Open handles before the stop: their pooled connections break.
    let opened: Vec<_> = files
        .iter()
        .map(|(p, _)| c.open(p, &OpenOptions::new()).unwrap())
        .collect();
    cl.stop_data(victim);
    let addr = cl.config.data[victim].addr.clone();
    for ((path, server), f) in files.iter().zip(&opened) {
        let mut buf = vec![0u8; data.len()];
        let t = Instant::now();
        let r = f.read_at(0, &mut buf);
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{path} took {:?}",
            t.elapsed()
        );
        if *server == victim {
            let err = r.unwrap_err();
            assert!(err.message.contains(&addr), "names {addr}: {err}");
            assert!(
                matches!(err.code, ErrorCode::Unreachable | ErrorCode::Timeout),
                "{err}"
            );
        } else {
            assert_eq!(r.unwrap(), data.len());
            assert_eq!(buf, data);
            assert_eq!(c.read_file(path).unwrap(), data);
        }
    }
}

/// A data server that loses power between a write it acknowledged and the fsync comes
/// back with a new boot id, and the fsync fails with ServerRestarted (EIO through the
/// mount) instead of reporting success for bytes that may be gone. Before the fix the
/// fsync succeeded. A power cut with nothing unsynced raises no alarm, the loss is
/// reported once, and the file works again afterwards.
#[test]
fn fsync_after_a_data_server_power_cut_fails() {
    let seed = common::seed("fsync_after_a_data_server_power_cut_fails");
    let mut cl = Cluster::with_mem(2, 1, SMALL_STRIPE);
    let c = cl.client();
    let opts = OpenOptions::create_truncate().layout(hint(SMALL_STRIPE, 2));
    let f = c.open("/pc", &opts).unwrap();
    let mut buf = vec![0u8; 300_000];
    f.write_at(0, &pattern(1, buf.len())).unwrap();
    f.fsync().unwrap();
    cl.power_cut_data(0, seed);
    f.fsync().expect("nothing was unsynced: no alarm");
    f.write_at(0, &pattern(2, buf.len())).unwrap();
    // A read waits for the overlapping writes: both servers acknowledged them.
    f.read_at(0, &mut buf).unwrap();
    cl.power_cut_data(1, seed);
    let err = f.fsync().unwrap_err();
    assert_eq!(err.code, ErrorCode::ServerRestarted, "{err}");
    assert_eq!(err.code.errno(), libc::EIO);
    assert!(err.message.contains(&cl.config.data[1].addr), "{err}");
    f.fsync().expect("the loss is reported once");
    f.write_at(0, b"again").unwrap();
    f.fsync().unwrap();
    let mut back = [0u8; 5];
    f.read_at(0, &mut back).unwrap();
    assert_eq!(&back, b"again");
}

/// Write-behind errors are reported by fsync and close.
#[test]
fn write_behind_errors_are_reported() {
    let mut cl = Cluster::start();
    let c = cl.client();
    let f = c
        .open(
            "/wb",
            &OpenOptions::create_truncate().layout(hint(SMALL_STRIPE, 1)),
        )
        .unwrap();
    let g = c
        .open(
            "/wb2",
            &OpenOptions::create_truncate().layout(hint(SMALL_STRIPE, 1)),
        )
        .unwrap();
    let server = f.layout().servers[0].0 as usize;
    cl.stop_data(server);
    let addr = cl.config.data[server].addr.clone();
    let t = Instant::now();
    // The write is queued; its failure shows at the latest in fsync.
    let first = f.write_at(0, &pattern(1, 100_000));
    let err = match first {
        Err(e) => e,
        Ok(()) => f.fsync().unwrap_err(),
    };
    assert!(err.message.contains(&addr), "names {addr}: {err}");
    assert!(err.message.contains("/wb"), "names the file: {err}");
    // A further write either fails at once or is queued; if queued, close must report
    // its failure (an error already reported is not reported twice).
    match f.write_at(200_000, b"more") {
        Ok(()) => {
            let err = f.close().unwrap_err();
            assert!(err.message.contains(&addr), "close reports it too: {err}");
        }
        Err(e) => {
            assert!(e.message.contains(&addr), "names {addr}: {e}");
            let _ = f.close();
        }
    }
    assert!(t.elapsed() < Duration::from_secs(10));
    // Close alone (no fsync) reports a failed background write too.
    let queued = g.write_at(0, b"x");
    if g.layout().servers[0].0 as usize != server {
        queued.unwrap();
        g.close().unwrap();
    } else if queued.is_ok() {
        assert!(g.close().is_err());
    }
}

#[test]
fn wrong_secret_is_refused_clearly() {
    let cl = Cluster::start();
    let mut bad = cl.config.clone();
    bad.secret = stripefs_rpc::Secret::generate();
    let err = Client::connect(&bad).expect_err("connect must fail");
    assert_eq!(err.code, ErrorCode::AuthFailed, "{err}");
    assert!(err.message.contains(&cl.config.meta_addr), "{err}");
    assert!(err.message.contains("secret"), "{err}");
}

#[test]
fn unreachable_meta_is_named() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    drop(l);
    let cl = Cluster::start();
    let mut cfg = cl.config.clone();
    cfg.meta_addr = addr.clone();
    let err = Client::connect(&cfg).expect_err("connect must fail");
    assert_eq!(err.code, ErrorCode::Unreachable);
    assert!(err.message.contains(&addr), "{err}");
}

/// A server that accepts connections but never answers yields a Timeout naming it, after
/// the configured timeout, not a hang.
#[test]
fn hung_server_times_out() {
    let cl = Cluster::start();
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hole_addr = hole.local_addr().unwrap().to_string();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    hole.set_nonblocking(true).unwrap();
    let holder = std::thread::spawn(move || {
        let mut held = Vec::new();
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            if let Ok((s, _)) = hole.accept() {
                held.push(s);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    let mut cfg = cl.config.clone();
    cfg.timeout_ms = 1000;
    cfg.data[0].addr = hole_addr.clone();
    let c = Client::connect(&cfg)
        .unwrap()
        .with_cred(stripefs_client::Cred::root());
    let f = c
        .open(
            "/hung",
            &OpenOptions::create_truncate().layout(hint(SMALL_STRIPE, 4)),
        )
        .unwrap();
    let t = Instant::now();
    f.write_at(0, &pattern(2, 1 << 20)).unwrap_or(());
    let err = f.fsync().unwrap_err();
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(err.code, ErrorCode::Timeout, "{err}");
    assert!(err.message.contains(&hole_addr), "{err}");
    drop(f);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    holder.join().unwrap();
}
