//! Inline files (docs/objects.md, "Inline files"): small files live with their inode on
//! the metadata server, and move to their data servers, keeping every byte, when they
//! outgrow their threshold, also while another client reads them.

use crate::common;

use common::{hint, pattern, seed, Cluster};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use stripefs_client::{Client, InodeId, LayoutHint, OpenOptions};

/// Whether any data server holds an object file of `ino`.
fn has_objects(cl: &Cluster, ino: InodeId) -> bool {
    (0..cl.data.len()).any(|i| {
        (0..cl.targets[i].len()).any(|t| {
            let (data, sums) = cl.object_paths(i, t, ino);
            data.exists() || sums.exists()
        })
    })
}

#[test]
fn small_files_live_inline_and_touch_no_data_server() {
    let cl = Cluster::start();
    let c = cl.client();
    let s = seed("small_files_live_inline");
    for i in 0..20u64 {
        let data = pattern(s + i, 3901);
        c.write_file(&format!("/f{i}"), &data, 0o644).unwrap();
        let attr = c.stat(&format!("/f{i}")).unwrap();
        assert_eq!(attr.size, 3901);
        assert!(attr.inline.is_some(), "seed {s}: file {i} is not inline");
        assert!(
            !has_objects(&cl, attr.ino),
            "seed {s}: file {i} has objects"
        );
        // Another client reads the same bytes.
        assert_eq!(cl.client().read_file(&format!("/f{i}")).unwrap(), data);
    }
    // Empty and exactly-threshold files too.
    c.write_file("/empty", &[], 0o644).unwrap();
    assert_eq!(c.read_file("/empty").unwrap(), Vec::<u8>::new());
    let full = pattern(s, 4096);
    c.write_file("/full", &full, 0o644).unwrap();
    assert!(c.stat("/full").unwrap().inline.is_some());
    assert_eq!(cl.client().read_file("/full").unwrap(), full);
}

#[test]
fn writes_truncates_and_growth_past_the_threshold_keep_every_byte() {
    let cl = Cluster::start();
    let c = cl.client();
    let s = seed("inline_model");
    let mut model: Vec<u8> = Vec::new();
    let f = c.create("/m", 0o644).unwrap();
    let write = |f: &stripefs_client::File, model: &mut Vec<u8>, at: usize, data: &[u8]| {
        f.write_at(at as u64, data).unwrap();
        if model.len() < at + data.len() {
            model.resize(at + data.len(), 0);
        }
        model[at..at + data.len()].copy_from_slice(data);
    };
    write(&f, &mut model, 0, &pattern(s, 3000));
    write(&f, &mut model, 100, &pattern(s + 1, 50));
    // A hole inside the threshold reads as zeros.
    write(&f, &mut model, 3500, &pattern(s + 2, 10));
    f.fsync().unwrap();
    assert!(c.stat("/m").unwrap().inline.is_some());
    f.set_len(1000).unwrap();
    model.truncate(1000);
    f.set_len(2000).unwrap();
    model.resize(2000, 0);
    let mut buf = vec![0u8; 8192];
    let n = f.read_at(0, &mut buf).unwrap();
    assert_eq!(&buf[..n], &model[..], "seed {s}: inline reads");
    assert!(c.stat("/m").unwrap().inline.is_some());
    // Growth past 4 KiB moves the file; the bytes so far come along.
    write(&f, &mut model, 5000, &pattern(s + 3, 300));
    f.fsync().unwrap();
    let attr = c.stat("/m").unwrap();
    assert!(attr.inline.is_none(), "seed {s}: still inline after growth");
    assert_eq!(attr.size, 5300);
    assert!(has_objects(&cl, attr.ino));
    write(&f, &mut model, 10, &pattern(s + 4, 20));
    f.close().unwrap();
    assert_eq!(cl.client().read_file("/m").unwrap(), model, "seed {s}");
    // A truncate past the threshold moves a file too, and extends it with zeros.
    c.write_file("/t", &pattern(s + 5, 100), 0o644).unwrap();
    c.truncate("/t", 100_000).unwrap();
    let mut want = pattern(s + 5, 100);
    want.resize(100_000, 0);
    assert!(c.stat("/t").unwrap().inline.is_none());
    assert_eq!(cl.client().read_file("/t").unwrap(), want, "seed {s}");
}

#[test]
fn a_file_growing_past_its_threshold_while_another_client_reads_it() {
    let cl = Cluster::with(4, 2, 4096);
    let s = seed("inline_growth_while_read");
    let total = 64 * 1024;
    let want = Arc::new(pattern(s, total));
    let c = cl.client();
    c.write_file("/g", &[], 0o644).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (config, want, done) = (cl.config.clone(), want.clone(), done.clone());
        std::thread::spawn(move || {
            let r = Client::connect(&config)
                .unwrap()
                .with_cred(stripefs_client::Cred::root());
            let mut reads = 0;
            let mut longest = 0;
            while !done.load(Ordering::SeqCst) || reads == 0 {
                let f = r.open("/g", &OpenOptions::read_only()).unwrap();
                let mut buf = vec![0u8; total + 4096];
                // Two reads through one handle: the second reaches past what the open
                // brought, so it asks the metadata server again.
                for _ in 0..2 {
                    let n = f.read_at(0, &mut buf).unwrap();
                    assert_eq!(&buf[..n], &want[..n], "seed {s}: a read of {n} bytes");
                    longest = longest.max(n);
                }
                reads += 1;
            }
            (reads, longest)
        })
    };
    let f = c.open("/g", &OpenOptions::write_only()).unwrap();
    for at in (0..total).step_by(1000) {
        let end = (at + 1000).min(total);
        f.write_at(at as u64, &want[at..end]).unwrap();
        f.fsync().unwrap();
    }
    f.close().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    done.store(true, Ordering::SeqCst);
    let (reads, longest) = reader.join().unwrap();
    assert!(reads > 0);
    assert_eq!(c.stat("/g").unwrap().inline, None);
    assert_eq!(cl.client().read_file("/g").unwrap(), *want, "seed {s}");
    eprintln!("{reads} opens by the reader, longest read {longest} bytes");
}

#[test]
fn clients_writing_disjoint_pieces_of_one_inline_file_merge() {
    let cl = Cluster::start();
    let c = cl.client();
    c.write_file("/shared", &[], 0o644).unwrap();
    let threads: Vec<_> = (0..4u8)
        .map(|k| {
            let config = cl.config.clone();
            std::thread::spawn(move || {
                let w = Client::connect(&config)
                    .unwrap()
                    .with_cred(stripefs_client::Cred::root());
                let f = w.open("/shared", &OpenOptions::new().write(true)).unwrap();
                // Piece k of 1000 bytes; the fourth client goes past 4 KiB and moves it.
                let len = if k == 3 { 2000 } else { 1000 };
                f.write_at(k as u64 * 1000, &vec![k + 1; len]).unwrap();
                f.close().unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let got = cl.client().read_file("/shared").unwrap();
    assert_eq!(got.len(), 5000);
    for k in 0..4u8 {
        let len = if k == 3 { 2000 } else { 1000 };
        let at = k as usize * 1000;
        assert!(
            got[at..at + len].iter().all(|&b| b == k + 1),
            "piece {k} lost"
        );
    }
}

#[test]
fn the_inline_threshold_is_set_per_directory() {
    let cl = Cluster::start();
    let c = cl.client();
    let never = c.mkdir("/never", 0o755).unwrap();
    c.set_layout_ino(
        never.ino,
        LayoutHint {
            inline_bytes: Some(0),
            ..LayoutHint::default()
        },
    )
    .unwrap();
    c.write_file("/never/a", b"small", 0o644).unwrap();
    let a = c.stat("/never/a").unwrap();
    assert!(a.inline.is_none());
    assert!(has_objects(&cl, a.ino));
    let big = c.mkdir("/big", 0o755).unwrap();
    let mut h = hint(65536, 2);
    h.inline_bytes = Some(16 << 10);
    c.set_layout_ino(big.ino, h).unwrap();
    let data = pattern(seed("inline_dir"), 12_000);
    c.write_file("/big/b", &data, 0o644).unwrap();
    let b = c.stat("/big/b").unwrap();
    assert_eq!(b.inline.as_ref().map(|i| i.max), Some(16 << 10));
    assert!(!has_objects(&cl, b.ino));
    assert_eq!(c.read_file("/big/b").unwrap(), data);
    // More than the protocol allows is refused.
    let bad = LayoutHint {
        inline_bytes: Some(1 << 20),
        ..LayoutHint::default()
    };
    assert!(c.set_layout_ino(big.ino, bad).is_err());
}

#[test]
fn a_move_that_cannot_reach_a_data_server_leaves_the_file_inline_and_whole() {
    let mut cl = Cluster::start();
    let c = cl.client();
    let data = pattern(seed("inline_move_fails"), 3000);
    c.write_file("/stay", &data, 0o644).unwrap();
    cl.stop_data(0);
    let f = c.open("/stay", &OpenOptions::new().write(true)).unwrap();
    // The layout spans every server, so the move needs server 0.
    let r = f
        .write_at(100_000, b"past the threshold")
        .and_then(|()| f.fsync());
    assert!(r.is_err(), "a move without data server 0 succeeded");
    drop(f);
    let attr = c.stat("/stay").unwrap();
    assert!(attr.inline.is_some());
    assert_eq!(attr.size, 3000);
    assert_eq!(cl.client().read_file("/stay").unwrap(), data);
}

/// A reader's handle sees another client's later growth (inline and striped): a read
/// that starts inside the size the reader knows returns those bytes (a short read), and
/// the next read, from that end, asks again and finds the new bytes, never an end of
/// file the metadata server would not confirm; a list read reaching past the known size
/// asks at once.
#[test]
fn reads_past_the_known_size_ask_again_before_reporting_the_end() {
    let cl = Cluster::start();
    let s = seed("reads_past_the_known_size");
    for (name, first, more) in [("/small", 1000, 900), ("/big", 70_000, 50_000)] {
        let (a, b) = (cl.client(), cl.client());
        let data = pattern(s, first + more);
        a.write_file(name, &data[..first], 0o644).unwrap();
        let r = b.open(name, &OpenOptions::read_only()).unwrap();
        let r2 = cl.client().open(name, &OpenOptions::read_only()).unwrap();
        let w = a.open(name, &OpenOptions::write_only()).unwrap();
        w.write_at(first as u64, &data[first..]).unwrap();
        w.close().unwrap();
        let mut buf = vec![0u8; first + more + 10];
        let n = r.read_at(0, &mut buf).unwrap();
        assert!(
            n >= first,
            "seed {s}: {name}: {n} bytes of at least {first}"
        );
        assert_eq!(&buf[..n], &data[..n], "seed {s}: {name}");
        let mut got = n;
        while got < buf.len() {
            let k = r.read_at(got as u64, &mut buf[got..]).unwrap();
            if k == 0 {
                break;
            }
            got += k;
        }
        assert_eq!(&buf[..got], &data[..], "seed {s}: {name}: read to the end");
        let mut whole = vec![0u8; first + more];
        r2.read_list(&[(0, (first + more) as u64)], &mut whole)
            .unwrap();
        assert_eq!(whole, data, "seed {s}: {name}: list read");
        r.close().unwrap();
        r2.close().unwrap();
    }
}

/// fsx's sequence through the interception library (seed 1): writes past the
/// threshold, truncations while writes are behind, reads of what stands.
#[test]
fn truncations_while_writes_are_behind_cut_them() {
    let cl = Cluster::start();
    let c = cl.client();
    let s = seed("inline_truncate_behind");
    let opts = OpenOptions::create_truncate()
        .read(true)
        .mode(0o644)
        .layout(hint(4096, 2));
    let f = c.open("/t", &opts).unwrap();
    let mut model: Vec<u8> = Vec::new();
    let write = |f: &stripefs_client::File, model: &mut Vec<u8>, at: usize, data: &[u8]| {
        f.write_at(at as u64, data).unwrap();
        if model.len() < at + data.len() {
            model.resize(at + data.len(), 0);
        }
        model[at..at + data.len()].copy_from_slice(data);
    };
    write(&f, &mut model, 0, &pattern(s, 12000));
    f.set_len(5565).unwrap();
    model.truncate(5565);
    write(&f, &mut model, 0, &pattern(s + 1, 12000));
    for (i, at) in [0usize, 3000, 6000, 9000].iter().enumerate() {
        write(&f, &mut model, *at, &pattern(s + 2 + i as u64, 3000));
    }
    f.set_len(1464).unwrap();
    model.truncate(1464);
    assert_eq!(f.size(), 1464);
    let mut buf = vec![0u8; 1564];
    let n = f.read_at(0, &mut buf).unwrap();
    assert_eq!(n, 1464, "read past the truncation");
    assert!(buf[..n] == model[..], "bytes before the truncation");
    write(&f, &mut model, 8563, &pattern(s + 9, 320));
    let mut buf = vec![0u8; 5657];
    let n = f.read_at(225, &mut buf).unwrap();
    assert_eq!(n, 5657);
    assert!(buf[..n] == model[225..225 + n]);
    f.close().unwrap();
    assert_eq!(c.read_file("/t").unwrap(), model);
}
