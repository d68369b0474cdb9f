//! The mount's page cache across opens: an unchanged file is read again from memory (no
//! data-server reads), and a file another mount changed is never read stale after the
//! next open (close-to-open). Whether the cache was used is told by the data servers'
//! read counters, not by timing.

use crate::common;
use common::*;
use std::fs;
use std::io::{Read, Write};

macro_rules! need_fuse {
    () => {
        if let Some(why) = fuse_unavailable() {
            skip(&why);
            return;
        }
    };
}

/// Bytes the data servers have sent to clients so far.
fn bytes_read(c: &Cluster) -> u64 {
    c.status_sums("data", &["bytes_read"])[0]
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
    // The servers' read counters tell whether the page cache was used, so the mounts
    // say they are on another host: reads go through the servers, not short-circuit
    // (which the servers never see).
    let a = FuseMount::with_args(&c.cluster_file(), &["--host", "elsewhere"]);
    let b = FuseMount::with_args(&c.cluster_file(), &["--host", "elsewhere"]);
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

/// Requests the metadata server has answered so far (its status call counts one).
fn meta_requests(c: &Cluster) -> u64 {
    c.status_sums("meta", &["requests"])[0]
}

/// Listing a directory costs one metadata request (its entries): opening it needs no
/// round trip while its attributes are fresh (at most ATTR_TTL old, as the kernel's own
/// cache), and the kernel's last READDIR, past the end, is answered by the mount.
#[test]
fn listing_a_directory_is_one_request() {
    need_fuse!();
    const N: u64 = 50;
    let c = Cluster::up(1, 1, &[]);
    let m = FuseMount::new(&c.cluster_file());
    let d = m.p("d");
    fs::create_dir(&d).unwrap();
    for i in 0..5 {
        fs::File::create(d.join(format!("f{i}"))).unwrap();
    }
    let start = std::time::Instant::now();
    let before = meta_requests(&c);
    for _ in 0..N {
        assert_eq!(fs::read_dir(&d).unwrap().count(), 5);
    }
    let listings = meta_requests(&c) - before - 1;
    // Each second the directory's attributes expire and one open fetches them again;
    // plus 3 for sessions, as above.
    let expiries = 2 * start.elapsed().as_secs().saturating_add(1);
    assert!(
        listings <= N + expiries + 3,
        "{listings} requests for {N} listings in {:?}",
        start.elapsed()
    );
}

/// A listing carries each entry's attributes (READDIRPLUS): a stat of every entry after
/// it (`ls -l`, `find`, `du`) asks the metadata server nothing more, for empty files,
/// small files kept inline and directories alike; files with bytes on the data servers
/// are given for no time (their st_blocks is counted there) and looked up again.
#[test]
fn a_listing_then_a_stat_of_every_entry_is_one_request() {
    need_fuse!();
    use std::os::unix::fs::MetadataExt;
    const N: usize = 300;
    let c = Cluster::up(1, 1, &[]);
    let m = FuseMount::new(&c.cluster_file());
    let d = m.p("d");
    fs::create_dir(&d).unwrap();
    for i in 0..N {
        let p = d.join(format!("f{i:03}"));
        match i % 3 {
            0 => drop(fs::File::create(&p).unwrap()),
            1 => fs::write(&p, b"small").unwrap(),
            _ => fs::create_dir(&p).unwrap(),
        }
    }
    // Let the kernel's entries from the creates expire.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let start = std::time::Instant::now();
    let before = meta_requests(&c);
    let mut sizes = 0;
    for e in fs::read_dir(&d).unwrap() {
        let md = fs::symlink_metadata(e.unwrap().path()).unwrap();
        sizes += md.size();
    }
    let asked = meta_requests(&c) - before - 1;
    assert_eq!(sizes, 5 * (N as u64 / 3) + 4096 * (N as u64 / 3));
    let expiries = 2 * start.elapsed().as_secs().saturating_add(1);
    assert!(
        asked <= 1 + expiries + 3,
        "{asked} requests to list and stat {N} entries in {:?}",
        start.elapsed()
    );
    // A file on the data servers: its st_blocks is exact, asked when stat'ed.
    let big = d.join("big");
    fs::write(&big, vec![1u8; 1 << 20]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert!(fs::read_dir(&d).unwrap().count() > N);
    let listed = fs::symlink_metadata(&big).unwrap().blocks();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let fetched = fs::symlink_metadata(&big).unwrap().blocks();
    assert!(fetched >= 2048, "{fetched} blocks for 1 MiB");
    assert_eq!(listed, fetched, "st_blocks right after a listing");
}

/// The kernel checks a directory's mode before each create and unlink in it
/// (default_permissions) and forgets its attributes after each: the mount answers those
/// checks from the directory's attributes as the last change left them, so a create
/// costs lookup + create + close and an unlink lookup + unlink, no GETATTR of the
/// directory. The directory's times still move with each change.
#[test]
fn entry_changes_cost_no_directory_getattr_and_keep_its_times_exact() {
    need_fuse!();
    const N: u64 = 200;
    let c = Cluster::up(1, 1, &[]);
    let m = FuseMount::new(&c.cluster_file());
    let d = m.p("d");
    fs::create_dir(&d).unwrap();
    let names: Vec<_> = (0..N).map(|i| d.join(format!("f{i}"))).collect();
    let before = meta_requests(&c);
    for n in &names {
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(n)
            .unwrap();
    }
    // Slack of 2, plus 3 for sessions: the status clients' SessionEnd and SessionOpen
    // fall between the two counts, and perhaps one renewal of the mount's session.
    let creates = meta_requests(&c) - before - 1;
    assert!(creates <= 3 * N + 5, "{creates} requests for {N} creates");
    use std::os::unix::fs::MetadataExt;
    let mtime = |p: &std::path::Path| {
        let md = fs::metadata(p).unwrap();
        (md.mtime(), md.mtime_nsec(), md.ctime(), md.ctime_nsec())
    };
    let t0 = mtime(&d);
    let before = meta_requests(&c);
    for n in &names {
        fs::remove_file(n).unwrap();
    }
    let unlinks = meta_requests(&c) - before - 1;
    assert!(unlinks <= 2 * N + 5, "{unlinks} requests for {N} unlinks");
    let t1 = mtime(&d);
    assert!(
        t1 > t0,
        "unlinks did not move the directory's times: {t0:?} {t1:?}"
    );
    // What the mount shows is what the metadata server holds.
    let shown = fs::metadata(&d).unwrap();
    let json = c.ok(&["stat", "/d", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let ns = |s: i64, n: i64| s * 1_000_000_000 + n;
    assert_eq!(
        ns(shown.mtime(), shown.mtime_nsec()),
        v["mtime_ns"].as_i64().unwrap()
    );
    assert_eq!(
        ns(shown.ctime(), shown.ctime_nsec()),
        v["ctime_ns"].as_i64().unwrap()
    );
    fs::File::create(d.join("last")).unwrap();
    let shown = fs::metadata(&d).unwrap();
    let json = c.ok(&["stat", "/d", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        ns(shown.mtime(), shown.mtime_nsec()),
        v["mtime_ns"].as_i64().unwrap()
    );
}
