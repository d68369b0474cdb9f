//! The mount's page cache across opens: an unchanged file is read again from memory (no
//! data-server reads), and a file another mount changed is never read stale after the
//! next open (close-to-open). Whether the cache was used is told by the data servers'
//! read counters, not by timing.

mod common;
use common::*;
use std::fs;
use std::io::{Read, Write};

macro_rules! need_fuse {
    () => {
        if let Some(why) = fuse_unavailable() {
            eprintln!("skipping: {why}");
            return;
        }
    };
}

/// Bytes the data servers have sent to clients so far.
fn bytes_read(c: &Cluster) -> u64 {
    let out = c.ok(&["cluster", "status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["servers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["role"] == "data")
        .map(|s| s["bytes_read"].as_u64().unwrap())
        .sum()
}

/// Reads the whole file with a fresh open; returns its bytes and what the servers sent.
fn read_counted(c: &Cluster, path: &std::path::Path) -> (Vec<u8>, u64) {
    let before = bytes_read(c);
    let mut v = Vec::new();
    fs::File::open(path).unwrap().read_to_end(&mut v).unwrap();
    (v, bytes_read(c) - before)
}

fn write_all(path: &std::path::Path, data: &[u8]) {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap();
    f.write_all(data).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn unchanged_files_are_reread_from_memory_and_changed_ones_never_stale() {
    need_fuse!();
    const LEN: usize = 48 << 20;
    let c = Cluster::up(2, 1, &[]);
    let a = FuseMount::new(&c.cluster_file());
    let b = FuseMount::new(&c.cluster_file());
    let v1 = random_bytes(LEN);
    write_all(&b.p("data"), &v1);

    // First read in A comes from the servers; the second, after a new open, from A's
    // page cache: the file did not change.
    let (got, cold) = read_counted(&c, &a.p("data"));
    assert!(got == v1, "first read returned other bytes");
    assert!(cold >= LEN as u64, "cold read sent only {cold} bytes");
    let (got, warm) = read_counted(&c, &a.p("data"));
    assert!(got == v1, "second read returned other bytes");
    assert!(
        warm < LEN as u64 / 100,
        "an unchanged file was read again from the servers ({warm} bytes)"
    );

    // B rewrites a few bytes in place (same size): A's next open sees them.
    let mut v2 = v1.clone();
    v2[LEN / 2..LEN / 2 + 5].copy_from_slice(b"fresh");
    {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .open(b.p("data"))
            .unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(b"fresh", (LEN / 2) as u64).unwrap();
        f.flush().unwrap();
    }
    let (got, again) = read_counted(&c, &a.p("data"));
    assert!(got == v2, "a file changed by another mount was read stale");
    assert!(again > 0);

    // A change of attributes only also moves the stamp: still correct bytes.
    fs::set_permissions(
        b.p("data"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let (got, _) = read_counted(&c, &a.p("data"));
    assert!(got == v2);

    // Truncated and rewritten shorter by B: A sees the new length and bytes.
    write_all(&b.p("data"), b"short now");
    let (got, _) = read_counted(&c, &a.p("data"));
    assert_eq!(got, b"short now");

    // A's own writes: what A reads back is what it wrote.
    write_all(&a.p("data"), b"written by a");
    let (got, _) = read_counted(&c, &a.p("data"));
    assert_eq!(got, b"written by a");
    let (got, _) = read_counted(&c, &b.p("data"));
    assert_eq!(got, b"written by a");
}
