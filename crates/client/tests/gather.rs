//! Small writes are gathered per data server into list writes (WriteList): fewer
//! requests, the same bytes, the same order where writes overlap.

mod common;

use common::{hint, pattern, seed, Cluster};
use rand::{Rng, SeedableRng};
use stripefs_client::{Client, OpenOptions};
use stripefs_wire::ServerId;

fn data_requests(c: &Client, servers: usize) -> u64 {
    (0..servers)
        .map(|s| c.data_status(ServerId(s as u32)).unwrap().counters.requests)
        .sum()
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
