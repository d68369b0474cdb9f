//! Exercisers through real mounts, checked against models.
//!
//! `tests/posix/fsx.py` applies random
//! operations (unaligned pwrite/pwritev/pread/preadv, O_APPEND writes, ftruncate up and
//! down, fallocate allocate/punch/zero-range, shared mappings, fsync) to one file and
//! checks every read, the size and, at each change of client, the whole file against a
//! model of its bytes. The two sides are two mounts of one cluster (two clients), and
//! the runner moves between them by closing and reopening (close-to-open).
//!
//! `tests/posix/nsx.py` does the same for the namespace: random creates, mkdirs,
//! unlinks, rmdirs, renames (over files and directories, into their own subtrees, with
//! RENAME_NOREPLACE and RENAME_EXCHANGE), hard links, symlinks, rewrites and unlinks of
//! open files, chmod, utime and user.* extended attributes, checking every errno, link
//! count, size, mode, attribute and directory listing, and the whole tree through the
//! second mount once its caches have expired.
//!
//! Each run prints its seed; `STRIPEFS_SEED=N` repeats a run (as for the other
//! randomised tests), `STRIPEFS_FSX_OPS=N` sets its length (both exercisers). The same exercisers on /dev/shm (`reference_*`)
//! check the models themselves. The mount tests skip, saying why, where FUSE is
//! unavailable.

use crate::common;
use common::*;
use std::path::Path;
use std::process::Command;

const FSX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/posix/fsx.py");
const NSX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/posix/nsx.py");
/// How long a mount caches names and attributes (crates/fuse ENTRY_TTL, ATTR_TTL), and a
/// margin: the second mount is looked at after this.
const SETTLE_S: &str = "1.2";
const PYTHON: &str = "/usr/bin/python3";

macro_rules! need_fuse {
    () => {
        if let Some(why) = fuse_unavailable() {
            skip(&why);
            return;
        }
    };
}

/// Runs `script` on sides `a` and `b` with `args`; fails the test with its report
/// (seed, failing operation, the operations before it).
fn exercise(script: &str, a: &Path, b: &Path, args: &[&str]) -> String {
    let seed = test_seed(script);
    let ops = std::env::var("STRIPEFS_FSX_OPS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(1500);
    let mut cmd = Command::new(PYTHON);
    // STRIPEFS_POSIX_PRELOAD=LIB runs the exercisers with the interception library (as
    // for the POSIX matrix; CI does, with STRIPEFS_PRELOAD_AFTER=1).
    if let Some(lib) = std::env::var_os("STRIPEFS_POSIX_PRELOAD") {
        cmd.env("LD_PRELOAD", lib);
    }
    let out = cmd
        .arg(script)
        .arg("--a")
        .arg(a)
        .arg("--b")
        .arg(b)
        .args(["--seed", &seed.to_string()])
        .args(["--ops", &ops.to_string()])
        .args(args)
        .output()
        .expect("python3 runs");
    let report = text(&out);
    eprintln!("{report}");
    assert!(
        out.status.success(),
        "{script} failed (seed {seed}):\n{report}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        stdout.contains(": passed"),
        "{script} did not say it passed:\n{report}"
    );
    stdout
}

/// The file exerciser, for files up to `max_size` bytes.
fn fsx(a: &Path, b: &Path, max_size: u64) {
    exercise(FSX, a, b, &["--max-size", &max_size.to_string()]);
}

/// A cluster of two data servers, two mounts of it, and `dir` in it with `setstripe`
/// arguments `layout` (none: the defaults).
fn two_mounts(dir: &str, layout: &[&str]) -> (Cluster, FuseMount, FuseMount) {
    let c = Cluster::up(2, 1, &[]);
    let a = FuseMount::new(&c.cluster_file());
    let b = FuseMount::new(&c.cluster_file());
    std::fs::create_dir(a.p(dir)).unwrap();
    if !layout.is_empty() {
        let cluster_path = format!("/{dir}");
        let mut args = vec!["setstripe", cluster_path.as_str()];
        args.extend_from_slice(layout);
        c.ok(&args);
    }
    (c, a, b)
}

fn shm_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("stripefs-fsx-")
        .tempdir_in("/dev/shm")
        .unwrap()
}

#[test]
fn reference_nsx_on_tmpfs() {
    let dir = shm_dir();
    let out = exercise(NSX, dir.path(), dir.path(), &["--check-every", "500"]);
    assert!(out.contains("refused renameat2 flags: none"), "{out}");
}

/// Namespace operations on one client, the tree checked through another; renameat2's
/// RENAME_NOREPLACE and RENAME_EXCHANGE must work.
#[test]
fn namespace_between_two_clients() {
    need_fuse!();
    let (_c, a, b) = two_mounts("ns", &[]);
    let out = exercise(
        NSX,
        &a.p("ns"),
        &b.p("ns"),
        &["--check-every", "500", "--settle", SETTLE_S],
    );
    assert!(out.contains("refused renameat2 flags: none"), "{out}");
}

#[test]
fn reference_on_tmpfs() {
    let dir = shm_dir();
    fsx(dir.path(), dir.path(), 1 << 20);
}

/// Unaligned operations across 16 KiB stripes on two servers, between two clients.
#[test]
fn two_clients_on_a_striped_file() {
    need_fuse!();
    let (_c, a, b) = two_mounts("striped", &["--size", "16K", "--count", "2"]);
    fsx(&a.p("striped"), &b.p("striped"), 600_000);
}

/// Files that cross the inline threshold (4 KiB here) both ways, over and over: bytes
/// kept with the inode, moved to the data servers, truncated back.
#[test]
fn two_clients_around_the_inline_threshold() {
    need_fuse!();
    let (_c, a, b) = two_mounts(
        "inline",
        &["--inline-bytes", "4096", "--size", "4K", "--count", "2"],
    );
    fsx(&a.p("inline"), &b.p("inline"), 12_000);
}

/// One client with the kernel's writeback cache (`--writeback-cache`, for files no other
/// client changes meanwhile): small writes gathered in the page cache, mappings,
/// truncation and fallocate.
#[test]
fn writeback_cache_mount() {
    need_fuse!();
    let c = Cluster::up(2, 1, &[]);
    let m = FuseMount::with_args(&c.cluster_file(), &["--writeback-cache"]);
    std::fs::create_dir(m.p("wb")).unwrap();
    c.ok(&["setstripe", "/wb", "--size", "16K", "--count", "2"]);
    fsx(&m.p("wb"), &m.p("wb"), 600_000);
}

/// Two clients (two mounts) write interleaved records of one shared file at the same
/// time, records smaller than a page and records straddling pages, in shuffled order:
/// every record of both must be there, read through either mount after both closed.
/// (A mount that wrote back whole cached pages, as the kernel's writeback cache does,
/// would overwrite the other client's bytes in shared pages.)
#[test]
fn interleaved_records_from_two_clients_all_land() {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    use std::os::unix::fs::FileExt;
    need_fuse!();
    let (_c, a, b) = two_mounts("n1", &[]);
    let seed = test_seed("shuffle");
    for (len, per_client) in [(333usize, 3000u64), (4097, 600)] {
        let record = |k: u64| -> Vec<u8> {
            (0..len)
                .map(|i| (k.wrapping_mul(2_654_435_761) >> 7) as u8 ^ i as u8)
                .collect()
        };
        let name = format!("n1/f{len}");
        std::fs::File::create(a.p(&name)).unwrap();
        let paths = [a.p(&name), b.p(&name)];
        std::thread::scope(|s| {
            for (rank, path) in paths.iter().enumerate() {
                let record = &record;
                s.spawn(move || {
                    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
                    let mut ks: Vec<u64> = (0..2 * per_client)
                        .filter(|k| k % 2 == rank as u64)
                        .collect();
                    ks.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed + rank as u64));
                    for k in ks {
                        f.write_at(&record(k), k * len as u64).unwrap();
                    }
                    f.sync_all().unwrap();
                });
            }
        });
        for path in &paths {
            let f = std::fs::File::open(path).unwrap();
            assert_eq!(f.metadata().unwrap().len(), 2 * per_client * len as u64);
            let mut buf = vec![0u8; len];
            for k in 0..2 * per_client {
                f.read_exact_at(&mut buf, k * len as u64).unwrap();
                assert!(
                    buf == record(k),
                    "record {k} ({len} bytes, written through mount {}) is wrong read through {}",
                    "ab".as_bytes()[(k % 2) as usize] as char,
                    path.display()
                );
            }
        }
    }
}
