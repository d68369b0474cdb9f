//! Short-circuit reads (issue 14, item 3): a client on a data server's host reads the
//! server's files through descriptors passed over its Unix socket, verifies every block
//! itself, falls back to the server on any mismatch (so damage is still reported, never
//! passed on), and gets descriptors only for files it could open.

mod common;

use common::{hint, pattern, seed, Cluster};
use rand::{Rng, SeedableRng};
use std::os::unix::fs::FileExt;
use stripefs_client::{Client, Cred, ErrorCode, OpenOptions};
use stripefs_data::LocalServer;

/// The cluster's servers all on host "h0", each with a short-circuit socket; the
/// returned config is that of a client on h0.
fn on_one_host(cl: &Cluster) -> (stripefs_rpc::ClusterConfig, Vec<LocalServer>) {
    let mut cfg = cl.config.clone();
    let mut socks = Vec::new();
    for (i, d) in cfg.data.iter_mut().enumerate() {
        let path = cl.dir.path().join(format!("d{i}.sock"));
        socks.push(
            LocalServer::start(cl.data[i].clone(), &path, cfg.secret.clone()).expect("socket"),
        );
        d.host = Some("h0".into());
        d.local_socket = Some(path);
    }
    cfg.host = Some("h0".into());
    (cfg, socks)
}

fn client(cfg: &stripefs_rpc::ClusterConfig) -> Client {
    Client::connect(cfg).unwrap().with_cred(Cred::root())
}

#[test]
fn same_host_reads_bypass_the_server_and_read_back_exactly() {
    let cl = Cluster::with(2, 2, 64 << 10);
    let (cfg, _socks) = on_one_host(&cl);
    let c = client(&cfg);
    let data = pattern(11, (3 << 20) + 12345);
    let f = c
        .open(
            "/sc",
            &OpenOptions::create_truncate()
                .read(true)
                .layout(hint(64 << 10, 2)),
        )
        .unwrap();
    f.write_at(0, &data).unwrap();
    // A hole in the middle: reads as zeros.
    f.write_at((5 << 20) + 7, b"tail").unwrap();
    f.fsync().unwrap();
    f.close().unwrap();

    let reader = client(&cfg);
    let before = reader.traffic();
    let got = reader.read_file("/sc").unwrap();
    let t = reader.traffic().since(&before);
    assert_eq!(got.len(), (5 << 20) + 11);
    assert!(got[..data.len()] == data[..], "data read back wrong");
    assert!(got[data.len()..(5 << 20) + 7].iter().all(|&b| b == 0));
    assert_eq!(&got[(5 << 20) + 7..], b"tail");
    assert!(t.direct_read >= data.len() as u64, "{t:?}");
    assert_eq!(
        t.local_read + t.remote_read,
        0,
        "read through a server: {t:?}"
    );
    assert!(cl.data.iter().all(|d| d.local_opens() > 0));

    // Turned off, the same read goes through the servers.
    reader.set_short_circuit(false);
    let before = reader.traffic();
    assert!(reader.read_file("/sc").unwrap() == got);
    let t = reader.traffic().since(&before);
    assert_eq!(t.direct_read, 0, "{t:?}");
    assert!(t.local_read > 0, "{t:?}");
}

/// Reads at any offset and length, inside a block, across blocks and units, over holes
/// and past the end, go straight from the files into the caller's buffer and equal the
/// bytes written.
#[test]
fn unaligned_short_circuit_reads_return_exactly_the_written_bytes() {
    let seed = seed("unaligned_short_circuit_reads_return_exactly_the_written_bytes");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let cl = Cluster::with(3, 2, 64 << 10);
    let (cfg, _socks) = on_one_host(&cl);
    let c = client(&cfg);
    let size = (1 << 20) + 54_321;
    let mut want = pattern(seed, size);
    // A hole of 50,000 bytes: never written, reads as zeros.
    want[300_001..350_001].fill(0);
    let f = c
        .open(
            "/u",
            &OpenOptions::create_truncate()
                .read(true)
                .layout(hint(64 << 10, 3)),
        )
        .unwrap();
    f.write_at(0, &want[..300_001]).unwrap();
    f.write_at(350_001, &want[350_001..]).unwrap();
    f.close().unwrap();

    let reader = client(&cfg);
    let r = reader.open("/u", &OpenOptions::read_only()).unwrap();
    let before = reader.traffic();
    for i in 0..300 {
        let offset = match i % 3 {
            0 => rng.gen_range(0..size as u64 + 5_000),
            1 => rng.gen_range(0..size as u64 / 4096) * 4096 + rng.gen_range(4090..4096),
            _ => rng.gen_range(1..=size as u64 / 65_536) * 65_536 - 1,
        };
        let len = match i % 4 {
            0 => rng.gen_range(1..20),
            1 => rng.gen_range(1..10_000),
            2 => rng.gen_range(60_000..200_000),
            _ => 4096,
        };
        let mut buf = vec![0xEEu8; len];
        let n = r.read_at(offset, &mut buf).unwrap();
        let lo = (offset as usize).min(size);
        let hi = (offset as usize + len).min(size);
        assert_eq!(n, hi - lo, "read {len} at {offset}: length (seed {seed})");
        assert!(
            buf[..n] == want[lo..hi],
            "read {len} at {offset}: wrong bytes (seed {seed})"
        );
    }
    let t = reader.traffic().since(&before);
    assert!(t.direct_read > 0, "{t:?}");
    assert_eq!(
        t.local_read + t.remote_read,
        0,
        "read through a server: {t:?}"
    );
}

#[test]
fn a_corrupted_block_is_detected_and_reported_by_the_server() {
    let cl = Cluster::with(1, 1, 64 << 10);
    let (cfg, _socks) = on_one_host(&cl);
    let c = client(&cfg);
    let data = pattern(12, 256 << 10);
    c.write_file("/bad", &data, 0o644).unwrap();
    let ino = c.stat("/bad").unwrap().ino;
    // Flip one byte of the second block in the stored object, under the server.
    let (obj, _) = cl.data[0].object_paths(0, ino);
    let f = std::fs::OpenOptions::new().write(true).open(&obj).unwrap();
    let mut b = [0u8; 1];
    std::fs::File::open(&obj)
        .unwrap()
        .read_at(&mut b, 5000)
        .unwrap();
    f.write_at(&[b[0] ^ 0x40], 5000).unwrap();
    drop(f);

    let reader = client(&cfg);
    let opens = cl.data[0].local_opens();
    let e = reader.read_file("/bad").unwrap_err();
    assert!(
        cl.data[0].local_opens() > opens,
        "the read did not try the files"
    );
    assert!(
        e.code == ErrorCode::Checksum,
        "not reported as damage: {e:?}"
    );
}

#[test]
fn no_descriptors_for_a_file_the_caller_may_not_open() {
    let cl = Cluster::with(1, 1, 64 << 10);
    let (cfg, _socks) = on_one_host(&cl);
    let root = client(&cfg);
    root.write_file("/secret", &pattern(13, 100_000), 0o600)
        .unwrap();
    let opens = cl.data[0].local_opens();
    let user = Client::connect(&cfg).unwrap().with_cred(Cred {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    });
    let e = user.read_file("/secret").unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{e:?}");
    assert_eq!(
        cl.data[0].local_opens(),
        opens,
        "descriptors were handed out"
    );
}

/// A short-circuit reader racing a writer of the same blocks (another client, whole-block
/// rewrites, so every block is always one version) sees each block whole, from one
/// version or another, never a torn mix: a block caught mid-rewrite fails its checksum
/// and is read again through the server, which holds the block's lock.
#[test]
fn reads_racing_rewrites_see_whole_blocks() {
    const LEN: usize = 512 << 10;
    const VERSIONS: u8 = 40;
    let cl = Cluster::with(1, 1, 64 << 10);
    let (cfg, _socks) = on_one_host(&cl);
    let block_of = |v: u8, b: usize| -> Vec<u8> {
        (0..4096)
            .map(|i| v ^ (b as u8) ^ (i as u8 & 0x0f))
            .collect()
    };
    let version = |v: u8| -> Vec<u8> { (0..LEN / 4096).flat_map(|b| block_of(v, b)).collect() };
    let w = client(&cfg);
    w.write_file("/race", &version(0), 0o644).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let st = stop.clone();
    let cfg2 = cfg.clone();
    let reader = std::thread::spawn(move || {
        let r = client(&cfg2);
        let mut reads = 0u64;
        while !st.load(std::sync::atomic::Ordering::Relaxed) {
            let got = r.read_file("/race").unwrap();
            assert_eq!(got.len(), LEN);
            for (b, blk) in got.chunks(4096).enumerate() {
                let v = blk[0] ^ (b as u8);
                assert!(
                    v < VERSIONS && blk == block_of(v, b).as_slice(),
                    "block {b} of read {reads} is no whole version"
                );
            }
            reads += 1;
        }
        (reads, r.traffic().direct_read)
    });
    let f = w.open("/race", &OpenOptions::write_only()).unwrap();
    for v in 1..VERSIONS {
        f.write_at(0, &version(v)).unwrap();
        f.fsync().unwrap();
    }
    f.close().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (reads, direct) = reader.join().unwrap();
    assert!(
        reads > 0 && direct > 0,
        "{reads} reads, {direct} bytes direct"
    );
}
