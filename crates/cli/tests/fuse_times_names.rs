//! Timestamps and names through a real FUSE mount, with ordinary system calls: which
//! times each call moves, nanosecond times from utimensat (with UTIME_NOW and
//! UTIME_OMIT), names of 255 and 256 bytes, paths of 4095 and 4096 bytes, and the rename
//! corner cases. Each test skips, saying why, where FUSE is unavailable.

mod common;
use common::*;
use std::ffi::CString;
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

macro_rules! need_fuse {
    () => {
        if let Some(why) = fuse_unavailable() {
            skip(&why);
            return;
        }
    };
}

/// (atime, mtime, ctime) in nanoseconds.
fn times(p: &Path) -> (i64, i64, i64) {
    let m = fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let ns = |s: i64, n: i64| s * 1_000_000_000 + n;
    (
        ns(m.atime(), m.atime_nsec()),
        ns(m.mtime(), m.mtime_nsec()),
        ns(m.ctime(), m.ctime_nsec()),
    )
}

/// Lets the clock move, so that a time set by the next call is later than the last.
fn tick() {
    std::thread::sleep(Duration::from_millis(20));
}

/// Runs `f` after a tick and asserts which of (mtime, ctime) of each path moved.
fn moves(what: &str, paths: &[(&Path, bool, bool)], f: impl FnOnce()) {
    let before: Vec<_> = paths.iter().map(|(p, ..)| times(p)).collect();
    tick();
    f();
    for ((p, mtime, ctime), b) in paths.iter().zip(before) {
        let a = times(p);
        let name = p.file_name().unwrap().to_string_lossy();
        assert_eq!(a.1 > b.1, *mtime, "{what}: mtime of {name}: {b:?} -> {a:?}");
        assert_eq!(a.2 > b.2, *ctime, "{what}: ctime of {name}: {b:?} -> {a:?}");
        assert!(a.1 >= b.1 && a.2 >= b.2, "{what}: {name} went back");
    }
}

const UTIME_NOW: i64 = (1 << 30) - 1;
const UTIME_OMIT: i64 = (1 << 30) - 2;

fn utimensat(p: &Path, atime: (i64, i64), mtime: (i64, i64)) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let ts = [
        libc::timespec {
            tv_sec: atime.0,
            tv_nsec: atime.1,
        },
        libc::timespec {
            tv_sec: mtime.0,
            tv_nsec: mtime.1,
        },
    ];
    // SAFETY: `c` is NUL-terminated and `ts` holds the two timespecs utimensat reads.
    let r = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), ts.as_ptr(), 0) };
    assert_eq!(r, 0, "utimensat: {}", std::io::Error::last_os_error());
}

#[test]
fn each_call_moves_the_times_posix_says() {
    need_fuse!();
    let c = Cluster::up(2, 1, &[]);
    let m = FuseMount::new(&c.cluster_file());
    let (a, b) = (m.p("a"), m.p("b"));
    fs::create_dir(&a).unwrap();
    fs::create_dir(&b).unwrap();
    let f = a.join("f");
    moves("create", &[(&a, true, true)], || {
        fs::write(&f, b"hello").unwrap();
    });
    moves("write", &[(&f, true, true), (&a, false, false)], || {
        let mut h = fs::OpenOptions::new().append(true).open(&f).unwrap();
        h.write_all(b" world").unwrap();
    });
    // A write shows at once, before close; the close records the same mtime.
    let before = times(&f);
    tick();
    let mut h = fs::OpenOptions::new().append(true).open(&f).unwrap();
    h.write_all(b"!").unwrap();
    let open = times(&f);
    assert!(
        open.1 > before.1 && open.2 > before.2,
        "{before:?} -> {open:?}"
    );
    drop(h);
    assert_eq!(times(&f).1, open.1, "mtime recorded at close");
    moves("chmod", &[(&f, false, true)], || {
        fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    });
    moves("chown", &[(&f, false, true)], || {
        std::os::unix::fs::chown(&f, Some(12), Some(34)).unwrap();
    });
    moves("truncate", &[(&f, true, true)], || {
        fs::OpenOptions::new()
            .write(true)
            .open(&f)
            .unwrap()
            .set_len(3)
            .unwrap();
    });
    moves(
        "truncate(2) to the same size",
        &[(&f, false, false)],
        || {
            let c = CString::new(f.as_os_str().as_bytes()).unwrap();
            // SAFETY: `c` is a NUL-terminated path.
            assert_eq!(unsafe { libc::truncate(c.as_ptr(), 3) }, 0);
        },
    );
    let empty = m.p("empty");
    fs::write(&empty, b"").unwrap();
    moves("O_TRUNC of an empty file", &[(&empty, true, true)], || {
        fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&empty)
            .unwrap();
    });
    let l = b.join("l");
    moves("link", &[(&f, false, true), (&b, true, true)], || {
        fs::hard_link(&f, &l).unwrap()
    });
    moves(
        "unlink of a link",
        &[(&l, false, true), (&a, true, true), (&b, false, false)],
        || fs::remove_file(&f).unwrap(),
    );
    assert_eq!(fs::metadata(&l).unwrap().nlink(), 1);
    // rename: the inode's ctime (not its mtime), and both parents' mtime and ctime.
    let g = a.join("g");
    let before = [times(&l), times(&a), times(&b)];
    tick();
    fs::rename(&l, &g).unwrap();
    let after = [times(&g), times(&a), times(&b)];
    assert_eq!(after[0].1, before[0].1, "rename: mtime of the inode");
    assert!(after[0].2 > before[0].2, "rename: ctime of the inode");
    for (x, y) in before[1..].iter().zip(&after[1..]) {
        assert!(y.1 > x.1 && y.2 > x.2, "rename: parent {x:?} -> {y:?}");
    }
    moves("mkdir", &[(&a, true, true)], || {
        fs::create_dir(a.join("sub")).unwrap()
    });
    moves("symlink", &[(&a, true, true)], || {
        std::os::unix::fs::symlink("g", a.join("sym")).unwrap()
    });
    moves("rmdir", &[(&a, true, true)], || {
        fs::remove_dir(a.join("sub")).unwrap()
    });
    moves("unlink", &[(&a, true, true)], || {
        fs::remove_file(a.join("sym")).unwrap()
    });

    // utimensat: nanoseconds kept; UTIME_OMIT keeps a time, UTIME_NOW sets it; the
    // ctime is always now.
    let (_, _, c0) = times(&g);
    utimensat(&g, (1, 123_456_789), (2, 987_654_321));
    let (at, mt, c1) = times(&g);
    assert_eq!((at, mt), (1_123_456_789, 2_987_654_321));
    assert!(c1 > c0);
    tick();
    utimensat(&g, (0, UTIME_OMIT), (5, 6));
    let (at, mt, c2) = times(&g);
    assert_eq!((at, mt), (1_123_456_789, 5_000_000_006));
    assert!(c2 > c1);
    tick();
    utimensat(&g, (0, UTIME_NOW), (0, UTIME_OMIT));
    let (at, mt, c3) = times(&g);
    assert_eq!(mt, 5_000_000_006);
    assert!(at > c2 && c3 > c2, "{at} {c3} {c2}");

    // Before 1970 too: -1.012345679 s is the timespec (-2, 987654321).
    utimensat(&g, (-2, 987_654_321), (-1, 0));
    let st = fs::metadata(&g).unwrap();
    assert_eq!((st.atime(), st.atime_nsec()), (-2, 987_654_321));
    assert_eq!((st.mtime(), st.mtime_nsec()), (-1, 0));
    let (at, mt, _) = times(&g);
    assert_eq!((at, mt), (-1_012_345_679, -1_000_000_000));
    let st: serde_json::Value = serde_json::from_str(&c.ok(&["stat", "/a/g", "--json"])).unwrap();
    assert_eq!(st["atime_ns"], -1_012_345_679);

    // cp -p: data written and the times set before close keep the times set.
    let cp = m.p("cp");
    {
        let mut h = fs::File::create(&cp).unwrap();
        h.write_all(&vec![7u8; 300_000]).unwrap();
        let when = std::time::UNIX_EPOCH + Duration::new(1_000_000_000, 42);
        h.set_times(fs::FileTimes::new().set_accessed(when).set_modified(when))
            .unwrap();
    }
    let (at, mt, _) = times(&cp);
    assert_eq!(
        (at, mt),
        (1_000_000_000_000_000_042, 1_000_000_000_000_000_042)
    );
    assert_eq!(fs::metadata(&cp).unwrap().len(), 300_000);
}

#[test]
fn names_paths_and_rename_corners() {
    need_fuse!();
    let c = Cluster::up(2, 1, &[]);
    let m = FuseMount::new(&c.cluster_file());
    let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(0);
    // 255-byte names work, 256-byte names are ENAMETOOLONG.
    let ok = m.p(&"n".repeat(255));
    let long = m.p(&"n".repeat(256));
    fs::write(&ok, b"x").unwrap();
    assert_eq!(fs::read(&ok).unwrap(), b"x");
    assert_eq!(
        errno(fs::write(&long, b"x").unwrap_err()),
        libc::ENAMETOOLONG
    );
    assert_eq!(
        errno(fs::create_dir(&long).unwrap_err()),
        libc::ENAMETOOLONG
    );
    assert_eq!(errno(fs::metadata(&long).unwrap_err()), libc::ENAMETOOLONG);
    assert_eq!(
        errno(fs::rename(&ok, &long).unwrap_err()),
        libc::ENAMETOOLONG
    );

    // A path of 4095 bytes relative to the mount works; 4096 is ENAMETOOLONG.
    let mut rel = String::new();
    for i in 0..16 {
        let name = format!("{i:02}{}", "d".repeat(252));
        rel = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
    }
    // The kernel limits the path it is given, so the path is relative to the mount.
    std::env::set_current_dir(m.path()).unwrap();
    fs::create_dir_all(&rel).unwrap();
    let rel = format!("{rel}/{}", "f".repeat(4095 - rel.len() - 1));
    assert_eq!(rel.len(), 4095);
    fs::write(&rel, b"deep").unwrap();
    assert_eq!(fs::read(&rel).unwrap(), b"deep");
    let e = fs::write(format!("{rel}x"), b"x").unwrap_err();
    fs::write(&rel[..4094], b"").unwrap();
    std::env::set_current_dir("/").unwrap();
    assert_eq!(errno(e), libc::ENAMETOOLONG);
    // The CLI takes absolute paths of up to 4095 bytes too.
    let abs = format!("/{}", &rel[..4094]);
    assert_eq!(abs.len(), 4095);
    let through_cli = c.ok(&["stat", &abs]);
    assert!(through_cli.contains("type: File"), "{through_cli}");
    let out = c.run(&["stat", &format!("/{rel}")]);
    assert!(!out.status.success());
    assert!(text(&out).contains("name too long"), "{}", text(&out));

    // Renaming a hard link over another link of the same inode does nothing.
    let (x, y) = (m.p("x"), m.p("y"));
    fs::write(&x, b"same").unwrap();
    fs::hard_link(&x, &y).unwrap();
    let before = times(&x);
    tick();
    fs::rename(&x, &y).unwrap();
    assert!(x.exists() && y.exists());
    assert_eq!(fs::metadata(&y).unwrap().nlink(), 2);
    assert_eq!(times(&x), before);

    // A directory into its own subtree is EINVAL.
    fs::create_dir_all(m.p("top/mid/low")).unwrap();
    let e = fs::rename(m.p("top"), m.p("top/mid/low/top")).unwrap_err();
    assert_eq!(errno(e), libc::EINVAL);
    let e = fs::rename(m.p("top"), m.p("top/mid/top")).unwrap_err();
    assert_eq!(errno(e), libc::EINVAL);
}
