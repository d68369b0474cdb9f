use super::*;
use rand::{rngs::StdRng, Rng, SeedableRng};

const FIDS: u64 = 3;
const SPACE: u64 = 600 << 10;
const STEPS: usize = 400;

/// Random writes, reads, truncates, removes and fsyncs against a plain byte vector per
/// file, on real directories with three targets.
#[test]
fn random_ops_match_model() {
    let seed = seed("random_ops_match_model");
    let mut rng = StdRng::seed_from_u64(seed);
    let (_d, svc) = fs_server(3, None);
    let units = [4096u32, 8192, 65536];
    let mut model: Vec<Vec<u8>> = vec![Vec::new(); FIDS as usize];
    for step in 0..STEPS {
        let f = rng.gen_range(0..FIDS);
        let unit = units[f as usize];
        let m = &mut model[f as usize];
        match rng.gen_range(0..100) {
            0..=54 => {
                let off = rng.gen_range(0..SPACE);
                let max = if rng.gen_bool(0.2) { 200_000 } else { 9_000 };
                let len = rng.gen_range(0..max);
                let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                write(&svc, f, unit, off, &data).unwrap();
                let end = off as usize + len;
                if m.len() < end {
                    m.resize(end, 0);
                }
                m[off as usize..end].copy_from_slice(&data);
            }
            55..=84 => {
                let off = rng.gen_range(0..SPACE + 10_000);
                let len = rng.gen_range(0..100_000);
                let got = read(&svc, f, unit, off, len);
                let mut want = vec![0u8; len];
                for (i, w) in want.iter_mut().enumerate() {
                    *w = m.get(off as usize + i).copied().unwrap_or(0);
                }
                assert_eq!(
                    got, want,
                    "step {step}: read of file {f} at {off} len {len} (seed {seed})"
                );
            }
            85..=93 => {
                let size = rng.gen_range(0..SPACE);
                simple(
                    &svc,
                    Request::Truncate {
                        fid: InodeId(f),
                        unit,
                        local_size: size,
                    },
                )
                .unwrap();
                m.resize(size as usize, 0);
            }
            94..=96 => {
                simple(&svc, Request::Remove { fid: InodeId(f) }).unwrap();
                m.clear();
            }
            _ => {
                simple(&svc, Request::Fsync { fid: InodeId(f) }).unwrap();
            }
        }
    }
    for f in 0..FIDS {
        let m = &model[f as usize];
        assert_eq!(
            read(&svc, f, units[f as usize], 0, m.len() + 5_000)[..m.len()],
            m[..],
            "seed {seed}"
        );
    }
}
