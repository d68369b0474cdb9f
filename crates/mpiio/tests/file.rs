//! The MPI-IO layer on a real (in-process) cluster: views, independent and collective
//! I/O against each other, asynchronous requests, hints.

use proptest::prelude::*;
use stripefs_mpiio::{
    testany, waitall, Communicator, Datatype, File, Hints, Mode, Order, ThreadComm,
};
use stripefs_testkit::cluster::Cluster;

/// One metadata and `n` data servers (one target each, 64 KiB stripes) in this process.
fn cluster(n: usize) -> Cluster {
    Cluster::with(n, 1, 64 << 10)
}

const RW_CREATE: Mode = Mode {
    read: true,
    write: true,
    create: true,
    exclusive: false,
};

use stripefs_testkit::pattern;

/// A 2-D array of `n x n` cells of 8 bytes, split into a `p x p` grid of blocks: rank r's
/// subarray view (C order).
fn block_view(n: u64, p: u64, r: u64) -> Datatype {
    let b = n / p;
    Datatype::subarray(
        vec![n, n],
        vec![b, b],
        vec![(r / p) * b, (r % p) * b],
        Order::C,
        Datatype::bytes(8),
    )
    .unwrap()
}

#[test]
fn collective_and_independent_writes_through_subarray_views_agree() {
    let cl = cluster(3);
    let (n, p) = (64u64, 2u64);
    let ranks = (p * p) as usize;
    let block = ((n / p) * (n / p) * 8) as usize;
    for (name, collective) in [("/coll", true), ("/ind", false)] {
        let comms = ThreadComm::group(ranks);
        let threads: Vec<_> = comms
            .into_iter()
            .map(|comm| {
                let client = cl.client();
                std::thread::spawn(move || {
                    let r = comm.rank() as u64;
                    let hints = Hints::default().set("striping_unit", "65536");
                    let mut f = File::open(&client, name, RW_CREATE, &hints).unwrap();
                    f.set_view(0, &Datatype::bytes(8), &block_view(n, p, r))
                        .unwrap();
                    let data = pattern(r, block);
                    if collective {
                        f.write_at_all(&comm, 0, &data).unwrap();
                    } else {
                        f.write_at(0, &data).unwrap();
                        comm.barrier();
                    }
                    f.sync().unwrap();
                    comm.barrier();
                    // Read back another rank's block, collectively and independently.
                    let other = (r + 1) % (p * p);
                    f.set_view(0, &Datatype::bytes(8), &block_view(n, p, other))
                        .unwrap();
                    let mut a = vec![0u8; block];
                    f.read_at_all(&comm, 0, &mut a).unwrap();
                    let mut b = vec![0u8; block];
                    f.read_at(0, &mut b).unwrap();
                    assert!(a == pattern(other, block), "collective read differs");
                    assert!(b == a, "independent and collective reads differ");
                    f.close().unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
    // The two files are byte for byte the same: the whole array in row-major order.
    let c = cl.client();
    let a = c.read_file("/coll").unwrap();
    assert_eq!(a.len() as u64, n * n * 8);
    assert!(a == c.read_file("/ind").unwrap());
}

#[test]
fn asynchronous_requests_complete_in_order_and_report_at_wait() {
    let cl = cluster(2);
    let c = cl.client();
    let mut f = File::open(&c, "/async", RW_CREATE, &Hints::default()).unwrap();
    let mut reqs = Vec::new();
    for i in 0..8u64 {
        reqs.push(f.iwrite(pattern(i, 100_000)).unwrap());
    }
    // A read queued after the writes sees them (FIFO per file).
    let mut read = f.iread_at(0, 800_000).unwrap();
    waitall(reqs).unwrap();
    while !read.test() {
        std::thread::yield_now();
    }
    let got = read.wait().unwrap();
    let want: Vec<u8> = (0..8).flat_map(|i| pattern(i, 100_000)).collect();
    assert!(got == want);
    let mut two = vec![f.iread_at(0, 10).unwrap(), f.iread_at(10, 10).unwrap()];
    while testany(&mut two).is_none() {
        std::thread::yield_now();
    }
    // A whole number of etypes is required: refused before anything is queued.
    f.set_view(0, &Datatype::bytes(8), &Datatype::bytes(8))
        .unwrap();
    assert!(f.iwrite_at(0, vec![0; 5]).is_err());
    f.close().unwrap();
}

#[test]
fn striping_hints_apply_at_create_and_bad_hints_are_refused() {
    let cl = cluster(3);
    let c = cl.client();
    let hints = Hints::default()
        .set("striping_unit", "131072")
        .set("striping_factor", "2");
    let f = File::open(&c, "/hinted", RW_CREATE, &hints).unwrap();
    f.close().unwrap();
    let l = c.get_layout("/hinted").unwrap();
    assert_eq!((l.stripe_size_bytes, l.servers.len()), (131072, 2));
    let bad = Hints::default().set("striping_factor", "many");
    assert!(File::open(&c, "/bad", RW_CREATE, &bad).is_err());
    let bad = Hints::default().set("romio_cb_write", "sometimes");
    assert!(File::open(&c, "/bad2", RW_CREATE, &bad).is_err());
}

#[test]
fn collective_open_creates_once_and_collective_resize_is_seen_by_all() {
    let cl = cluster(2);
    let hints = Hints::default().set("striping_factor", "1");
    let comms = ThreadComm::group(4);
    let threads: Vec<_> = comms
        .into_iter()
        .map(|comm| {
            let client = cl.client();
            let hints = hints.clone();
            std::thread::spawn(move || {
                let f = File::open_all(&comm, &client, "/coll", RW_CREATE, &hints).unwrap();
                f.set_size_all(&comm, 12345).unwrap();
                // Every rank sees the new size once the collective call returned.
                assert_eq!(f.size().unwrap(), 12345);
                comm.barrier();
                f.close().unwrap();
                // A collective open of a file that is not there, without create, fails at
                // every rank.
                let ro = Mode {
                    read: true,
                    write: false,
                    create: false,
                    exclusive: false,
                };
                let err = File::open_all(&comm, &client, "/absent", ro, &hints)
                    .err()
                    .expect("a missing file does not open");
                // Every rank reports the same class, not a generic error.
                assert_eq!(
                    err.code(),
                    Some(stripefs_client::ErrorCode::NotFound),
                    "{err}"
                );
                // Exclusive create of an existing file fails with Exists at every rank.
                let excl = Mode {
                    exclusive: true,
                    ..RW_CREATE
                };
                let err = File::open_all(&comm, &client, "/coll", excl, &hints)
                    .err()
                    .expect("an exclusive create of an existing file fails");
                assert_eq!(
                    err.code(),
                    Some(stripefs_client::ErrorCode::Exists),
                    "{err}"
                );
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let c = cl.client();
    assert_eq!(c.get_layout("/coll").unwrap().servers.len(), 1);
    assert_eq!(c.stat("/coll").unwrap().size, 12345);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, .. ProptestConfig::default() })]
    // Random vector views over 4 ranks: the collective write equals the independent one.
    #[test]
    fn collective_equals_independent_for_random_vector_views(
        blocklen in 1u64..40, gap in 0u64..40, count in 1u64..20, cb_nodes in 1u64..5,
    ) {
        let cl = cluster(2);
        let ranks = 4usize;
        let stride = (blocklen + gap) * ranks as u64;
        let len = (count * blocklen) as usize;
        for (name, coll) in [("/c", true), ("/i", false)] {
            let comms = ThreadComm::group(ranks);
            let threads: Vec<_> = comms.into_iter().map(|comm| {
                let client = cl.client();
                std::thread::spawn(move || {
                    let r = comm.rank() as u64;
                    let hints = Hints::default().set("cb_nodes", &cb_nodes.to_string());
                    let mut f = File::open(&client, name, RW_CREATE, &hints).unwrap();
                    let ft = Datatype::resized(0, stride, Datatype::bytes(blocklen));
                    f.set_view(r * (blocklen + gap), &Datatype::bytes(1), &ft).unwrap();
                    let data = pattern(r + 7, len);
                    if coll { f.write_at_all(&comm, 0, &data).unwrap(); }
                    else { f.write_at(0, &data).unwrap(); comm.barrier(); }
                    f.close().unwrap();
                })
            }).collect();
            for t in threads { t.join().unwrap(); }
        }
        let c = cl.client();
        prop_assert!(c.read_file("/c").unwrap() == c.read_file("/i").unwrap());
    }
}

#[test]
fn a_collective_resize_cuts_what_every_rank_wrote_before_it() {
    let cl = cluster(2);
    let comms = ThreadComm::group(3);
    let threads: Vec<_> = comms
        .into_iter()
        .map(|comm| {
            let client = cl.client();
            std::thread::spawn(move || {
                let f =
                    File::open_all(&comm, &client, "/cut", RW_CREATE, &Hints::default()).unwrap();
                // Each rank writes far past the new end; the writes are still behind
                // (no sync) when the resize starts.
                let r = comm.rank() as u64;
                f.write_at((r + 1) << 20, &pattern(r, 100_000)).unwrap();
                f.set_size_all(&comm, 4096).unwrap();
                assert_eq!(f.size().unwrap(), 4096, "rank {r} sees the new size");
                f.sync().unwrap();
                comm.barrier();
                assert_eq!(f.size().unwrap(), 4096, "rank {r}: no write landed past it");
                f.close().unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
