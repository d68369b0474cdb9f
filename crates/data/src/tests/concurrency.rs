use super::*;
use rand::{rngs::StdRng, seq::SliceRandom, Rng, SeedableRng};

const THREADS: usize = 8;

/// Eight threads write disjoint, unaligned ranges of one file whose neighbours share
/// blocks, in random order; the result must be exact and every CRC right.
fn disjoint_writers(svc: Arc<DataService>, unit: u32, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let total = 3 << 20;
    let mut cuts = vec![0usize];
    while *cuts.last().unwrap() < total {
        let next = cuts.last().unwrap() + rng.gen_range(1..3 * B);
        cuts.push(next.min(total));
    }
    let expect = pattern(total, seed);
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
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(read(&svc, 77, unit, 0, total), expect);
}

#[test]
fn eight_writers_one_object() {
    let (_d, svc) = fs_server(1, None);
    disjoint_writers(svc, 64 << 10, seed("eight_writers_one_object"));
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
