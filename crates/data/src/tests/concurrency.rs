use super::*;
use rand::{rngs::StdRng, seq::SliceRandom, Rng, SeedableRng};

const THREADS: usize = 8;

/// Eight threads write disjoint, unaligned ranges of one file whose neighbours share
/// blocks, in random order; the result must be exact and every CRC right.
fn disjoint_writers(svc: Arc<DataService>, unit: u32, seed: u64) {
    disjoint_writers_syncing(svc, unit, seed, false)
}

/// [`disjoint_writers`], with a thread fsyncing the file over and over meanwhile if
/// `fsyncs` (each fsync forgets the written blocks and may empty the object's log while
/// rewrites of shared blocks go on: images and intents, see intent.rs).
fn disjoint_writers_syncing(svc: Arc<DataService>, unit: u32, seed: u64, fsyncs: bool) {
    let mut rng = StdRng::seed_from_u64(seed);
    let total = 3 << 20;
    let mut cuts = vec![0usize];
    while *cuts.last().unwrap() < total {
        let next = cuts.last().unwrap() + rng.gen_range(1..3 * B);
        cuts.push(next.min(total));
    }
    let expect = pattern(seed, total);
    let ranges: Vec<(usize, usize)> = cuts.windows(2).map(|w| (w[0], w[1])).collect();
    let mut handles = Vec::new();
    for i in 0..THREADS {
        let mut mine: Vec<(usize, usize)> =
            ranges.iter().copied().skip(i).step_by(THREADS).collect();
        mine.shuffle(&mut rng);
        let (svc, expect) = (svc.clone(), expect.clone());
        handles.push(std::thread::spawn(move || {
            for (a, b) in mine {
                write(&svc, 77, unit, a as u64, &expect[a..b]).unwrap();
            }
        }));
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let syncer = fsyncs.then(|| {
        let (svc, stop) = (svc.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                simple(&svc, Request::Fsync { fid: InodeId(77) }).unwrap();
                n += 1;
            }
            n
        })
    });
    for h in handles {
        h.join().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(s) = syncer {
        let n = s.join().unwrap();
        eprintln!("{n} fsyncs during the writes");
    }
    assert!(read(&svc, 77, unit, 0, total) == expect, "seed {seed}");
}

#[test]
fn eight_writers_one_object() {
    let (_d, svc) = fs_server(1, None);
    disjoint_writers(svc, 64 << 10, seed("eight_writers_one_object"));
}

#[test]
fn eight_writers_one_object_fsyncing_meanwhile() {
    let (_d, svc) = fs_server(2, None);
    let seed = seed("eight_writers_one_object_fsyncing_meanwhile");
    disjoint_writers_syncing(svc.clone(), 16 << 10, seed, true);
    // After a last fsync with nothing in flight, every object's log is empty again.
    simple(&svc, Request::Fsync { fid: InodeId(77) }).unwrap();
    for t in 0..2 {
        let log = svc.log_path(t, InodeId(77));
        let len = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
        assert_eq!(
            len, 0,
            "target {t}: the log holds {len} bytes after a quiet fsync"
        );
    }
}

#[test]
fn eight_writers_two_targets_small_unit() {
    let (_d, svc) = fs_server(2, None);
    disjoint_writers(svc, 8 << 10, seed("eight_writers_two_targets_small_unit"));
}

/// Writers and readers of the same blocks at once: a reader never sees a CRC that
/// disagrees with the data, whichever version it gets.
#[test]
fn readers_never_see_torn_blocks() {
    let (_d, svc) = mem_server(2);
    let unit = 8 << 10;
    write(&svc, 5, unit, 0, &[0u8; 64 << 10]).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut handles = Vec::new();
    for w in 0..3u8 {
        let (svc, stop) = (svc.clone(), stop.clone());
        handles.push(std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let off = (i * 1_000 + w as u64 * 333) % (60 << 10);
                write(&svc, 5, unit, off, &vec![w + 1; 3_000]).unwrap();
                i += 1;
            }
        }));
    }
    for _ in 0..300 {
        read(&svc, 5, unit, 0, 64 << 10);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
}
