//! Small writes are gathered per data server into list writes (WriteList): fewer
//! requests, the same bytes, the same order where writes overlap.

use crate::common;

use common::{hint, pattern, seed, Cluster};
use rand::{Rng, SeedableRng};
use stripefs_client::{Client, OpenOptions};
use stripefs_wire::{Counters, ServerId};

/// A counter of the data servers `0..servers`, summed.
fn data_counter(c: &Client, servers: usize, of: impl Fn(&Counters) -> u64) -> u64 {
    (0..servers)
        .map(|s| of(&c.data_status(ServerId(s as u32)).unwrap().counters))
        .sum()
}

fn data_requests(c: &Client, servers: usize) -> u64 {
    data_counter(c, servers, |k| k.requests)
}

fn write_requests(c: &Client, servers: usize) -> u64 {
    data_counter(c, servers, |k| k.write_requests)
}

/// 4 KiB writes at every other 4 KiB of a 4 MiB range (the strided pattern of
/// interleaved ranks) go out as a few list writes, and read back exactly.
#[test]
fn strided_small_writes_become_few_requests_and_read_back() {
    let cl = Cluster::with(2, 1, 1 << 20);
    let c = cl.client();
    let f = c
        .open(
            "/strided",
            &OpenOptions::create_truncate()
                .read(true)
                .layout(hint(1 << 20, 2)),
        )
        .unwrap();
    let data = pattern(5, 4 << 20);
    let before = data_requests(&c, 2);
    let writes = (4 << 20) / 8192;
    for k in 0..writes {
        let at = k * 8192;
        f.write_at(at as u64, &data[at..at + 4096]).unwrap();
    }
    f.fsync().unwrap();
    // Each server's gathers hold up to 256 extents (1 MiB of 4 KiB pieces here):
    // 512 writes become 2 list writes a server, plus the fsyncs.
    let used = data_requests(&c, 2) - before;
    assert!(
        used <= 16,
        "{writes} small writes took {used} data server requests"
    );
    let mut want = vec![0u8; (4 << 20) - 4096];
    for k in 0..writes {
        let at = k * 8192;
        want[at..at + 4096].copy_from_slice(&data[at..at + 4096]);
    }
    let mut got = vec![0u8; want.len()];
    assert_eq!(f.read_at(0, &mut got).unwrap(), want.len());
    assert!(got == want, "strided writes read back wrong");
    f.close().unwrap();
}

/// Four handles of one client (four processes writing through one mount) write
/// interleaved unaligned records, `(k * 4 + r) * 47008`, each round in a different
/// order of writers: a writer's record lies inside the span of another writer's
/// gathered records without sharing a byte with them, so it joins its server's gather
/// instead of sending the other's gather and waiting for it. The records go out as a
/// few list writes and read back exactly.
#[test]
fn interleaved_writers_of_one_client_do_not_wait_for_each_other() {
    const REC: usize = 47_008;
    const WRITERS: usize = 4;
    const ROUNDS: usize = 64;
    let cl = Cluster::with(2, 1, 1 << 20);
    let c = cl.client();
    let opts = OpenOptions::create_truncate()
        .read(true)
        .layout(hint(1 << 20, 2));
    let f = c.open("/interleaved", &opts).unwrap();
    let handles: Vec<_> = (0..WRITERS)
        .map(|_| {
            c.open("/interleaved", &OpenOptions::new().write(true))
                .unwrap()
        })
        .collect();
    let size = REC * WRITERS * ROUNDS;
    let data = pattern(9, size);
    let before = write_requests(&c, 2);
    let orders = [[2, 0, 3, 1], [1, 3, 0, 2], [3, 2, 1, 0], [0, 1, 2, 3]];
    for k in 0..ROUNDS {
        for &r in &orders[k % orders.len()] {
            let at = (k * WRITERS + r) * REC;
            handles[r].write_at(at as u64, &data[at..at + REC]).unwrap();
        }
    }
    for h in &handles {
        h.fsync().unwrap();
    }
    let used = write_requests(&c, 2) - before;
    eprintln!("{} records: {used} write requests", WRITERS * ROUNDS);
    // 12 MB: about 12 gathers of 1 MiB, plus the pieces split at stripe edges. Waiting
    // for each other's gathers sent one request per few records (68 before this test).
    assert!(
        used <= 24,
        "{} interleaved records of {REC} bytes took {used} write requests",
        WRITERS * ROUNDS
    );
    let mut got = vec![0u8; size];
    assert_eq!(f.read_at(0, &mut got).unwrap(), size);
    assert!(got == data, "interleaved records read back wrong");
    for h in handles {
        h.close().unwrap();
    }
    f.close().unwrap();
}

/// Random small and large writes that overlap each other, from two handles of one
/// client: the last write of each byte wins, as without gathering; reads in between see
/// every earlier write.
#[test]
fn overlapping_small_and_large_writes_keep_their_order() {
    let seed = seed("overlapping_small_and_large_writes_keep_their_order");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let cl = Cluster::with(3, 2, 64 << 10);
    let c = cl.client();
    let opts = OpenOptions::create_truncate()
        .read(true)
        .layout(hint(64 << 10, 3));
    let f = c.open("/mixed", &opts).unwrap();
    let g = c.open("/mixed", &OpenOptions::new().write(true)).unwrap();
    let size = 3 << 20;
    let mut model = vec![0u8; size];
    for i in 0..300u64 {
        let big = rng.gen_ratio(1, 6);
        let len = if big {
            rng.gen_range(128 << 10..600 << 10)
        } else {
            rng.gen_range(1..20_000)
        };
        let at = rng.gen_range(0..size - len);
        let bytes = pattern(seed ^ i, len);
        let h = if rng.gen_bool(0.5) { &f } else { &g };
        h.write_at(at as u64, &bytes).unwrap();
        model[at..at + len].copy_from_slice(&bytes);
        if rng.gen_ratio(1, 25) {
            let (lo, n) = (rng.gen_range(0..size - 4096), 4096);
            let mut buf = vec![0u8; n];
            let got = f.read_at(lo as u64, &mut buf).unwrap();
            let end = (lo + got).min(size);
            assert!(
                buf[..end - lo] == model[lo..end],
                "read at {lo} after write {i} (seed {seed})"
            );
        }
    }
    g.close().unwrap();
    f.fsync().unwrap();
    let len = f.size() as usize;
    let mut got = vec![0u8; len];
    assert_eq!(f.read_at(0, &mut got).unwrap(), len);
    assert!(got == model[..len], "final contents differ (seed {seed})");
    f.close().unwrap();
}

/// List reads: random extents (scattered, overlapping, repeated, in holes, across stripe
/// units and servers, past the end of the file) read with one list request per data
/// server and batch give exactly what reading each extent alone gives, zeros past the
/// end; the handle's own unflushed writes are seen.
#[test]
fn list_reads_equal_extent_by_extent_reads() {
    let s = seed("list_reads_equal_extent_by_extent_reads");
    let mut rng = rand::rngs::StdRng::seed_from_u64(s);
    let cl = Cluster::with(3, 2, 64 << 10);
    let c = cl.client();
    let f = c
        .open(
            "/listread",
            &OpenOptions::create_truncate()
                .read(true)
                .layout(hint(64 << 10, 3)),
        )
        .unwrap();
    let size = 3 << 20;
    let data = pattern(s, size);
    // A hole in the middle, and the tail written but not yet flushed.
    f.write_at(0, &data[..1 << 20]).unwrap();
    f.fsync().unwrap();
    f.write_at(2 << 20, &data[2 << 20..]).unwrap();
    let mut want_file = data.clone();
    want_file[1 << 20..2 << 20].fill(0);
    for round in 0..20 {
        let n = rng.gen_range(1..300);
        let extents: Vec<(u64, u64)> = (0..n)
            .map(|_| {
                let o = rng.gen_range(0..size as u64 + 100_000);
                (o, rng.gen_range(0..20_000))
            })
            .collect();
        let total: u64 = extents.iter().map(|e| e.1).sum();
        let mut got = vec![0xAAu8; total as usize];
        f.read_list(&extents, &mut got).unwrap();
        let mut at = 0usize;
        for &(o, l) in &extents {
            for i in 0..l {
                let want = want_file.get((o + i) as usize).copied().unwrap_or(0);
                assert_eq!(
                    got[at + i as usize],
                    want,
                    "round {round}: byte {i} of the extent at {o} (seed {s})"
                );
            }
            at += l as usize;
        }
    }
    // Many small extents cost a request per server and batch, not one each.
    f.fsync().unwrap();
    let before = data_requests(&c, 3);
    let extents: Vec<(u64, u64)> = (0..500).map(|k| (k * 6000, 100)).collect();
    let mut got = vec![0u8; 500 * 100];
    f.read_list(&extents, &mut got).unwrap();
    let used = data_requests(&c, 3) - before;
    assert!(used <= 3 + 3, "500 extents took {used} data requests");
    assert!(f.read_list(&[(0, 10)], &mut [0u8; 9]).is_err());
    f.close().unwrap();
}

/// An fsync while another thread of the process writes small pieces to the same handle
/// (a logger and its syncer) returns once the writer stops: the pieces gathered while it
/// waited are sent too. It used to wait for ever on the writer's last gather, which
/// nothing sent any more (found through the mount, with the kernel's writeback cache).
#[test]
fn fsync_during_concurrent_small_writes_returns() {
    use std::sync::{mpsc, Arc};
    use std::time::{Duration, Instant};
    let cl = Cluster::with(2, 1, 1 << 20);
    let c = cl.client();
    let f = Arc::new(
        c.open(
            "/logger",
            &OpenOptions::create_truncate()
                .read(true)
                .layout(hint(1 << 20, 2)),
        )
        .unwrap(),
    );
    let block = pattern(seed("fsync_during_concurrent_small_writes_returns"), 4096);
    let writer = {
        let (f, block) = (f.clone(), block.clone());
        std::thread::spawn(move || {
            let t = Instant::now();
            let mut at = 0u64;
            while t.elapsed() < Duration::from_millis(400) {
                f.write_at(at, &block).unwrap();
                at += 4096;
            }
            at
        })
    };
    let (tx, rx) = mpsc::channel();
    {
        let f = f.clone();
        std::thread::spawn(move || {
            let t = Instant::now();
            let mut n = 0;
            while t.elapsed() < Duration::from_millis(600) {
                f.fsync().unwrap();
                n += 1;
            }
            let _ = tx.send(n);
        });
    }
    let end = writer.join().unwrap();
    let fsyncs = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("an fsync during concurrent small writes did not return");
    assert!(fsyncs > 0);
    let mut got = vec![0u8; end as usize];
    assert_eq!(f.read_at(0, &mut got).unwrap(), end as usize);
    for (i, piece) in got.chunks(4096).enumerate() {
        assert!(piece == &block[..], "piece {i} reads back wrong");
    }
    Arc::try_unwrap(f).ok().unwrap().close().unwrap();
}
