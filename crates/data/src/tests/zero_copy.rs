//! Reads sent from the files (zero-copy) answer exactly what copied reads answer: the
//! same bytes and the same stored CRCs, over written blocks, holes, punched blocks,
//! stale bytes under a hole, a tail block past the data file's end and missing objects.

use super::*;
use crate::Options;
use rand::{rngs::StdRng, Rng, SeedableRng};

fn server(dir: &std::path::Path, targets: usize, no_zero_copy: bool) -> Arc<DataService> {
    let paths: Vec<PathBuf> = (0..targets).map(|i| dir.join(format!("t{i}"))).collect();
    DataService::open_with(
        ServerId(3),
        &paths,
        Options {
            no_zero_copy,
            ..Options::default()
        },
    )
    .unwrap()
}

#[test]
fn zero_copy_and_copied_reads_agree_byte_for_byte() {
    let seed = seed("zero_copy_and_copied_reads_agree_byte_for_byte");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let unit = 16 * B as u32;
    let fid = 77;
    {
        let svc = server(dir.path(), 2, false);
        // Writes at odd offsets and lengths, a punch, and a gap the writes never touch.
        for i in 0..40 {
            let off = rng.gen_range(0..600 * B as u64);
            let len = rng.gen_range(1..5 * B);
            write(&svc, fid, unit, off, &pattern(i, len)).unwrap();
        }
        let punch = Request::Punch {
            fid: InodeId(fid),
            unit,
            offset: 100 * B as u64,
            len: 7 * B as u64 + 123,
        };
        call(&svc, punch, vec![]).result.unwrap();
        write(&svc, fid, unit, 900 * B as u64 + 17, b"tail").unwrap();
    }
    // A stale byte under a hole: the data file holds it, the sidecar says hole.
    let (data_path, _) = server(dir.path(), 2, true).object_paths(0, InodeId(fid));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&data_path)
        .unwrap();
    use std::os::unix::fs::FileExt;
    // Global block 101 is punched: unit 6 (16 blocks a unit), on target 0 (units
    // alternate over 2 targets), local block 3 * 16 + 5.
    let hole_block = (3 * 16 + 5) * B as u64;
    f.write_at(b"stale", hole_block + 10).unwrap();
    drop(f);

    let zc = server(dir.path(), 2, false);
    let copied = server(dir.path(), 2, true);
    let (crcs, bytes) = read_raw(&zc, fid, unit, 101 * B as u64, B as u32).unwrap();
    assert!(
        bytes.iter().all(|&x| x == 0) && crcs[0] == crc32c(&[0u8; B]),
        "the stale bytes under the punched block read as a hole"
    );
    for _ in 0..60 {
        let first = rng.gen_range(0..1000u64);
        let blocks = rng.gen_range(1..80u64);
        let (off, len) = (first * B as u64, (blocks * B as u64) as u32);
        let a = read_raw(&zc, fid, unit, off, len).unwrap();
        let b = read_raw(&copied, fid, unit, off, len).unwrap();
        assert_eq!(a.0, b.0, "CRCs differ at {off}+{len} (seed {seed})");
        assert!(a.1 == b.1, "bytes differ at {off}+{len} (seed {seed})");
        for (i, (block, crc)) in a.1.chunks(B).zip(&a.0).enumerate() {
            assert_eq!(
                crc32c(block),
                *crc,
                "block {i} of {off}+{len} (seed {seed})"
            );
        }
    }
    // An object that does not exist reads as zeros either way.
    let a = read_raw(&zc, fid + 1, unit, 0, 64 * B as u32).unwrap();
    assert!(a.1.iter().all(|&x| x == 0));
    assert_eq!(
        a,
        read_raw(&copied, fid + 1, unit, 0, 64 * B as u32).unwrap()
    );
}
