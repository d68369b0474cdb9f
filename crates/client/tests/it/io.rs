//! Striped reads and writes against a real in-process cluster.

use crate::common;

use common::{hint, pattern, seed, Cluster, SMALL_STRIPE};
use rand::{Rng, SeedableRng};
use stripefs_client::{Client, File, OpenOptions};

fn read_all(f: &File) -> Vec<u8> {
    let mut out = vec![0u8; f.size() as usize + 4096];
    let mut at = 0;
    loop {
        let n = f.read_at(at as u64, &mut out[at..]).unwrap();
        if n == 0 {
            break;
        }
        at += n;
        if at == out.len() {
            out.resize(at + 4096, 0);
        }
    }
    out.truncate(at);
    out
}

fn create(c: &Client, path: &str, stripe: u32, count: u32) -> File {
    let opts = OpenOptions::create_truncate()
        .read(true)
        .layout(hint(stripe, count));
    c.open(path, &opts).unwrap()
}

#[test]
fn round_trip_sizes() {
    let cl = Cluster::start();
    let c = cl.client();
    let s = SMALL_STRIPE as usize;
    for len in [0, 1, s - 1, s, s + 1, 10 * s + 17, 4 * s * 5 + 4097] {
        let path = format!("/f{len}");
        let data = pattern(len as u64, len);
        let f = create(&c, &path, SMALL_STRIPE, 4);
        assert_eq!(f.layout().servers.len(), 4);
        f.write_at(0, &data).unwrap();
        assert_eq!(f.size(), len as u64);
        assert_eq!(
            read_all(&f),
            data,
            "read back through the writing handle, len {len}"
        );
        f.close().unwrap();
        assert_eq!(c.stat(&path).unwrap().size, len as u64);
        let f = c.open(&path, &OpenOptions::new()).unwrap();
        assert_eq!(read_all(&f), data, "read back after reopen, len {len}");
        // Reads at and past the end return nothing.
        let mut b = [0u8; 10];
        assert_eq!(f.read_at(len as u64, &mut b).unwrap(), 0);
        assert_eq!(f.read_at(len as u64 + 12345, &mut b).unwrap(), 0);
        f.close().unwrap();
        assert_eq!(c.read_file(&path).unwrap(), data);
    }
}

#[test]
fn random_offsets_with_holes() {
    let cl = Cluster::start();
    let c = cl.client();
    let seed = seed("random_offsets_with_holes");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let f = create(&c, "/holes", SMALL_STRIPE, 3);
    let mut model = Vec::new();
    for i in 0..40 {
        let off = rng.gen_range(0..3_000_000usize);
        let len = rng.gen_range(1..200_000usize);
        let data = pattern(seed ^ i, len);
        if model.len() < off + len {
            model.resize(off + len, 0);
        }
        model[off..off + len].copy_from_slice(&data);
        f.write_at(off as u64, &data).unwrap();
    }
    assert_eq!(read_all(&f), model);
    f.fsync().unwrap();
    f.close().unwrap();
    let f = c.open("/holes", &OpenOptions::new()).unwrap();
    assert_eq!(read_all(&f), model);
    // Unaligned random reads.
    for _ in 0..50 {
        let off = rng.gen_range(0..model.len());
        let len = rng.gen_range(0..300_000usize);
        let mut buf = vec![0xEEu8; len];
        let n = f.read_at(off as u64, &mut buf).unwrap();
        assert_eq!(n, len.min(model.len() - off));
        assert_eq!(&buf[..n], &model[off..off + n]);
    }
    // The same through read_with, whose pieces come in file order; then a sequential
    // pass (readahead cells) in steps that do not match the stripes.
    for _ in 0..50 {
        let off = rng.gen_range(0..model.len());
        let len = rng.gen_range(0..300_000usize);
        let got = f
            .read_with(off as u64, len, |parts| parts.concat())
            .unwrap();
        assert_eq!(got.len(), len.min(model.len() - off));
        assert_eq!(got, &model[off..off + got.len()]);
    }
    let mut at = 0;
    while at < model.len() {
        let got = f
            .read_with(at as u64, 100_003, |parts| parts.concat())
            .unwrap();
        assert_eq!(
            got,
            &model[at..at + got.len()],
            "sequential read_with at {at}"
        );
        at += got.len();
    }
    assert_eq!(f.read_with(at as u64, 10, |p| p.len()).unwrap(), 0);
}

/// Random write/read/truncate sequences on one file against a Vec<u8> model.
#[test]
fn model_check() {
    let cl = Cluster::start();
    let c = cl.client();
    let seed = seed("model_check");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for case in 0..64 {
        let stripe = [4096u32, 8192, SMALL_STRIPE][rng.gen_range(0..3)];
        let count = rng.gen_range(1..=4);
        let path = format!("/model{case}");
        // A small window makes write-behind waits and overlaps frequent.
        let window = [4096u64, 100_000, 64 << 20][rng.gen_range(0..3)];
        let opts = OpenOptions::create_truncate()
            .read(true)
            .layout(hint(stripe, count))
            .write_window_bytes(window);
        let f = c.open(&path, &opts).unwrap();
        let mut model: Vec<u8> = Vec::new();
        let mut last_end = 0;
        for step in 0..25 {
            let what = rng.gen_range(0..10);
            let max = 4 * stripe as usize * count as usize;
            if what < 5 {
                let off = rng.gen_range(0..max);
                let len = rng.gen_range(0..max / 2);
                let data = pattern(seed ^ (case << 8) ^ step, len);
                f.write_at(off as u64, &data).unwrap();
                if len > 0 {
                    if model.len() < off + len {
                        model.resize(off + len, 0);
                    }
                    model[off..off + len].copy_from_slice(&data);
                }
            } else if what < 8 {
                // Half the reads continue where the last ended, which drives readahead.
                let off = if rng.gen_bool(0.5) {
                    last_end
                } else {
                    rng.gen_range(0..max + 10)
                };
                let len = rng.gen_range(0..max);
                let mut buf = vec![0xAAu8; len];
                let n = f.read_at(off as u64, &mut buf).unwrap();
                last_end = off + n;
                let want = if off >= model.len() {
                    &[][..]
                } else {
                    &model[off..(off + len).min(model.len())]
                };
                assert_eq!(
                    &buf[..n],
                    want,
                    "case {case} step {step}: read {len} at {off}, seed {seed}"
                );
            } else if what < 9 {
                let size = rng.gen_range(0..max);
                f.set_len(size as u64).unwrap();
                model.resize(size, 0);
            } else {
                f.fsync().unwrap();
            }
            assert_eq!(
                f.size(),
                model.len() as u64,
                "case {case} step {step}, seed {seed}"
            );
        }
        f.close().unwrap();
        assert_eq!(
            c.stat(&path).unwrap().size,
            model.len() as u64,
            "case {case}, seed {seed}"
        );
        assert_eq!(
            c.read_file(&path).unwrap(),
            model,
            "case {case}, seed {seed}"
        );
    }
}

#[test]
fn parallel_clients_write_disjoint_regions() {
    let cl = Cluster::start();
    let c = cl.client();
    create(&c, "/shared", SMALL_STRIPE, 4).close().unwrap();
    let region = 3 * SMALL_STRIPE as usize + 1000;
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let cl = &cl;
            s.spawn(move || {
                let c = cl.client();
                let f = c.open("/shared", &OpenOptions::new().write(true)).unwrap();
                let data = pattern(t, region);
                // Two halves, the second first, to mix the order of requests.
                let half = region / 2;
                let at = t as usize * region;
                f.write_at((at + half) as u64, &data[half..]).unwrap();
                f.write_at(at as u64, &data[..half]).unwrap();
                f.close().unwrap();
            });
        }
    });
    let all = c.read_file("/shared").unwrap();
    assert_eq!(all.len(), 8 * region);
    for t in 0..8 {
        assert_eq!(
            &all[t * region..(t + 1) * region],
            &pattern(t as u64, region)[..],
            "region {t}"
        );
    }
}

#[test]
fn sequential_reader_with_readahead() {
    let cl = Cluster::start();
    let c = cl.client();
    for (stripe, count) in [(1 << 20, 4), (SMALL_STRIPE, 4), (4096, 2)] {
        let len = 23 * (1 << 20) + 5;
        let data = pattern(stripe as u64, len);
        let path = format!("/seq{stripe}");
        let f = create(&c, &path, stripe, count);
        f.write_at(0, &data).unwrap();
        f.close().unwrap();
        let f = c.open(&path, &OpenOptions::new().write(true)).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut at = 0;
        while at < len {
            // A write into the prefetched range must drop the stale prefetch.
            if at == 5 << 20 {
                f.write_at(6 << 20, b"fresh").unwrap();
            }
            let n = f.read_at(at as u64, &mut buf).unwrap();
            assert!(n > 0);
            let mut want = data[at..at + n].to_vec();
            let fresh = 6usize << 20;
            if at <= fresh && fresh < at + n {
                let k = (at + n - fresh).min(5);
                want[fresh - at..fresh - at + k].copy_from_slice(&b"fresh"[..k]);
            }
            if let Some(i) = (0..n).find(|&i| buf[i] != want[i]) {
                panic!("stripe {stripe}: read at {at} differs from byte {}", at + i);
            }
            at += n;
        }
        assert_eq!(f.read_at(at as u64, &mut buf).unwrap(), 0);
        f.close().unwrap();
    }
}

/// A read through one handle sees writes still queued through another of the same client.
#[test]
fn read_your_writes_across_handles() {
    let cl = Cluster::start();
    let c = cl.client();
    let w = create(&c, "/ryw", SMALL_STRIPE, 4);
    let r = c.open("/ryw", &OpenOptions::new()).unwrap();
    let data = pattern(5, 5 << 20);
    w.write_at(0, &data).unwrap();
    let mut buf = vec![0u8; data.len()];
    assert_eq!(r.read_at(0, &mut buf).unwrap(), data.len());
    assert_eq!(buf, data);
    r.close().unwrap();
    w.close().unwrap();
}

#[test]
fn size_of_open_file_and_truncate() {
    let cl = Cluster::start();
    let c = cl.client();
    let f = create(&c, "/sz", SMALL_STRIPE, 4);
    f.write_at(1_000_000, b"tail").unwrap();
    // Not yet flushed: stat in this client shows the pending end, another client not.
    assert_eq!(c.stat("/sz").unwrap().size, 1_000_004);
    assert_eq!(f.attr().unwrap().size, 1_000_004);
    assert_eq!(cl.client().stat("/sz").unwrap().size, 0);
    f.flush().unwrap();
    assert_eq!(cl.client().stat("/sz").unwrap().size, 1_000_004);
    // Path-level truncate waits for this client's pending writes.
    f.write_at(0, &pattern(1, 300_000)).unwrap();
    c.truncate("/sz", 100_000).unwrap();
    assert_eq!(c.stat("/sz").unwrap().size, 100_000);
    let mut b = vec![0u8; 200_000];
    assert_eq!(f.read_at(0, &mut b).unwrap(), 100_000);
    assert_eq!(&b[..100_000], &pattern(1, 300_000)[..100_000]);
    // Extending truncate reads zeros, also where old data was.
    f.set_len(250_000).unwrap();
    assert_eq!(f.read_at(0, &mut b).unwrap(), 200_000);
    assert!(b[100_000..].iter().all(|&x| x == 0));
    f.close().unwrap();
}

/// Measures 1-client 256 MiB write+fsync and read with 4 servers x 2 targets:
/// `cargo test --release -p stripefs-client --test it -- --ignored --nocapture io::throughput`
#[test]
#[ignore]
fn throughput() {
    let cl = Cluster::with(4, 2, 1 << 20);
    let c = cl.client();
    let total = 256usize << 20;
    let block = pattern(7, 1 << 20);
    let f = create(&c, "/big", 1 << 20, 4);
    let t = std::time::Instant::now();
    for i in 0..total >> 20 {
        f.write_at((i << 20) as u64, &block).unwrap();
    }
    let queued = t.elapsed().as_secs_f64();
    f.flush().unwrap();
    let written = t.elapsed().as_secs_f64();
    f.fsync().unwrap();
    f.close().unwrap();
    let w = t.elapsed().as_secs_f64();
    eprintln!("queued in {queued:.2} s, written in {written:.2} s, durable in {w:.2} s");
    let f = c.open("/big", &OpenOptions::new()).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let t = std::time::Instant::now();
    let mut at = 0u64;
    loop {
        let n = f.read_at(at, &mut buf).unwrap();
        if n == 0 {
            break;
        }
        at += n as u64;
    }
    let r = t.elapsed().as_secs_f64();
    assert_eq!(at, total as u64);
    let mib = (total >> 20) as f64;
    let (lw, lr) = local_reference(&cl.dir.path().join("reference"), &block, total >> 20);
    eprintln!("same run, local file system reference (1 file, 1 MiB writes + fsync / warm read): write {:.0} MiB/s, read {:.0} MiB/s", mib / lw, mib / lr);
    eprintln!("256 MiB, 1 MiB calls, 4 servers x 2 targets, stripe 1 MiB: write+fsync {:.0} MiB/s ({w:.2} s), sequential read {:.0} MiB/s ({r:.2} s)", mib / w, mib / r);
}

/// Seconds to write `n` copies of `block` to one local file and fsync, and to read it.
fn local_reference(path: &std::path::Path, block: &[u8], n: usize) -> (f64, f64) {
    use std::io::{Read, Write};
    let t = std::time::Instant::now();
    let mut f = std::fs::File::create(path).unwrap();
    for _ in 0..n {
        f.write_all(block).unwrap();
    }
    f.sync_all().unwrap();
    let w = t.elapsed().as_secs_f64();
    let t = std::time::Instant::now();
    let mut f = std::fs::File::open(path).unwrap();
    let mut buf = vec![0u8; block.len()];
    while f.read(&mut buf).unwrap() > 0 {}
    (w, t.elapsed().as_secs_f64())
}

/// Stripe units larger than one request (up to `MAX_STRIPE_BYTES`): writes that cross
/// units and servers' targets, large and unaligned, read back exactly, and the bytes of
/// each unit are on the server the layout names.
#[test]
fn stripe_units_larger_than_a_request_round_trip() {
    let unit: u32 = 24 << 20;
    let cl = Cluster::with(2, 2, 1 << 20);
    let c = cl.client();
    let f = create(&c, "/big-units", unit, 2);
    assert_eq!(f.layout().stripe_size_bytes, unit);
    let len = 3 * unit as usize + 12_345;
    let data = pattern(77, len);
    // One write of 40 MiB across the first unit boundary, then unaligned pieces.
    let mut at = 0usize;
    for n in [40 << 20, 5, 4096 * 3 + 1, 16 << 20, 1 << 20] {
        f.write_at(at as u64, &data[at..at + n]).unwrap();
        at += n;
    }
    f.write_at(at as u64, &data[at..]).unwrap();
    assert_eq!(read_all(&f), data, "through the writing handle");
    f.close().unwrap();
    let f = c.open("/big-units", &OpenOptions::new()).unwrap();
    assert_eq!(read_all(&f), data, "after reopen");
    let mut b = vec![0u8; 3 << 20];
    let from = unit as usize - (1 << 20) - 7;
    assert_eq!(f.read_at(from as u64, &mut b).unwrap(), b.len());
    assert_eq!(&b[..], &data[from..from + b.len()], "a read across a unit");
    f.close().unwrap();
    // The layout's placement: server 0 holds units 0 and 2 (one on each of its targets),
    // server 1 unit 1 and the tail.
    let ino = c.stat("/big-units").unwrap().ino;
    let held: Vec<Vec<u64>> = (0..2)
        .map(|i| {
            (0..2)
                .map(|t| {
                    let (obj, _) = cl.object_paths(i, t, ino);
                    std::fs::metadata(obj).map_or(0, |m| m.len())
                })
                .collect()
        })
        .collect();
    let u = unit as u64;
    assert_eq!(
        held,
        vec![vec![u, u], vec![u, 12_345]],
        "object bytes per server and target"
    );
}
