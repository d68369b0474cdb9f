//! Timestamps and names as POSIX and Linux define them, one test per rule: which of
//! atime, mtime and ctime each operation moves (on the inode and on the directories whose
//! entries change), name and path length limits, and the rename corner cases. The clock
//! is fixed, so every expected time is exact.

use crate::common;
use common::*;
use stripefs_wire::*;

const ROOT: u64 = 1;

/// The three times of `ino`.
fn times(fs: &Fs, ino: u64) -> (i64, i64, i64) {
    let a = fs.getattr(ino).unwrap();
    (a.atime_ns, a.mtime_ns, a.ctime_ns)
}

/// Asserts that `dir`'s mtime and ctime are `now` and its atime `atime`.
fn assert_dir_changed(fs: &Fs, dir: u64, atime: i64, now: i64) {
    assert_eq!(
        times(fs, dir),
        (atime, now, now),
        "times of directory {dir}"
    );
}

fn link(fs: &Fs, ino: InodeId, parent: u64, name: &str) -> Result<Attr, WireError> {
    fs.attr(
        &Cred::root(),
        Request::Link {
            ino,
            parent: InodeId(parent),
            name: name.into(),
        },
    )
}

fn set(fs: &Fs, ino: InodeId, attrs: SetAttrs) -> Attr {
    fs.attr(&Cred::root(), Request::SetAttr { ino, attrs })
        .unwrap()
}

#[test]
fn every_entry_change_moves_the_parents_mtime_and_ctime() {
    let fs = Fs::new();
    let r = Cred::root();
    let d = fs.mkdir(&r, ROOT, "d", 0o755).unwrap().ino.0;
    let mut now = T0;
    let mut step = |what: &str, f: &dyn Fn() -> Result<Response, WireError>| {
        now += 1_000_000_007;
        fs.clock.set(now);
        f().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_dir_changed(&fs, d, T0, now);
        now
    };
    let t = step("create", &|| {
        fs.create(&r, d, "f", 0o644).map(Response::Attr)
    });
    assert_eq!(times(&fs, fs.lookup(d, "f").unwrap().ino.0), (t, t, t));
    let t = step("mkdir", &|| {
        fs.mkdir(&r, d, "sub", 0o755).map(Response::Attr)
    });
    assert_eq!(times(&fs, fs.lookup(d, "sub").unwrap().ino.0), (t, t, t));
    step("mknod", &|| {
        fs.root(Request::Mknod {
            parent: InodeId(d),
            name: "fifo".into(),
            mode: 0o644,
            ftype: FileType::Fifo,
            rdev: 0,
        })
    });
    step("symlink", &|| {
        fs.root(Request::Symlink {
            parent: InodeId(d),
            name: "sym".into(),
            target: "f".into(),
        })
    });
    let f = fs.lookup(d, "f").unwrap().ino;
    step("link", &|| link(&fs, f, d, "f2").map(Response::Attr));
    step("unlink", &|| fs.unlink(&r, d, "f2"));
    step("rename within", &|| fs.rename(d, "f", d, "g", false));
    step("rmdir", &|| {
        fs.root(Request::Rmdir {
            parent: InodeId(d),
            name: "sub".into(),
        })
    });
    fs.check();
}

#[test]
fn rename_moves_both_parents_and_the_inodes_ctime_only() {
    let fs = Fs::new();
    let r = Cred::root();
    let a = fs.mkdir(&r, ROOT, "a", 0o755).unwrap().ino.0;
    let b = fs.mkdir(&r, ROOT, "b", 0o755).unwrap().ino.0;
    let f = fs.create(&r, a, "f", 0o644).unwrap().ino.0;
    let victim = fs.create(&r, b, "v", 0o644).unwrap().ino;
    link(&fs, victim, ROOT, "v-other-link").unwrap();
    fs.clock.set(T0 + 42);
    fs.rename(a, "f", b, "v", false).unwrap();
    assert_eq!(times(&fs, f), (T0, T0, T0 + 42), "renamed inode");
    assert_dir_changed(&fs, a, T0, T0 + 42);
    assert_dir_changed(&fs, b, T0, T0 + 42);
    // The replaced file lost a link but lives on: its ctime moves, nothing else.
    let v = fs.getattr(victim.0).unwrap();
    assert_eq!((v.nlink, v.mtime_ns, v.ctime_ns), (1, T0, T0 + 42));
    // A directory moved to another parent: its ctime, and both parents' link counts.
    let sub = fs.mkdir(&r, a, "sub", 0o755).unwrap().ino.0;
    fs.clock.set(T0 + 50);
    fs.rename(a, "sub", b, "sub", false).unwrap();
    assert_eq!(times(&fs, sub), (T0 + 42, T0 + 42, T0 + 50));
    assert_eq!(fs.getattr(a).unwrap().nlink, 2);
    assert_eq!(fs.getattr(b).unwrap().nlink, 3);
    fs.check();
}

#[test]
fn link_and_unlink_of_a_link_move_the_inodes_ctime() {
    let fs = Fs::new();
    let r = Cred::root();
    let f = fs.create(&r, ROOT, "f", 0o644).unwrap().ino;
    fs.clock.set(T0 + 1);
    let l = link(&fs, f, ROOT, "l").unwrap();
    assert_eq!(
        (l.nlink, l.atime_ns, l.mtime_ns, l.ctime_ns),
        (2, T0, T0, T0 + 1)
    );
    fs.clock.set(T0 + 2);
    fs.unlink(&r, ROOT, "f").unwrap();
    let a = fs.getattr(f.0).unwrap();
    assert_eq!(
        (a.nlink, a.atime_ns, a.mtime_ns, a.ctime_ns),
        (1, T0, T0, T0 + 2)
    );
    fs.check();
}

#[test]
fn chmod_and_chown_move_ctime_only() {
    let fs = Fs::new();
    let f = fs.create(&Cred::root(), ROOT, "f", 0o644).unwrap().ino;
    fs.clock.set(T0 + 3);
    let a = set(
        &fs,
        f,
        SetAttrs {
            mode: Some(0o600),
            ..SetAttrs::default()
        },
    );
    assert_eq!(
        (a.mode, a.atime_ns, a.mtime_ns, a.ctime_ns),
        (0o600, T0, T0, T0 + 3)
    );
    fs.clock.set(T0 + 4);
    let a = set(
        &fs,
        f,
        SetAttrs {
            uid: Some(7),
            gid: Some(8),
            ..SetAttrs::default()
        },
    );
    assert_eq!((a.uid, a.gid, a.mtime_ns, a.ctime_ns), (7, 8, T0, T0 + 4));
    // chown to the same owner still marks the change, as Linux does.
    fs.clock.set(T0 + 5);
    let a = set(
        &fs,
        f,
        SetAttrs {
            uid: Some(7),
            ..SetAttrs::default()
        },
    );
    assert_eq!((a.mtime_ns, a.ctime_ns), (T0, T0 + 5));
}

#[test]
fn truncate_moves_mtime_and_ctime_only_when_the_size_changes() {
    let fs = Fs::new();
    let f = fs.create(&Cred::root(), ROOT, "f", 0o644).unwrap().ino;
    let size = |s| SetAttrs {
        size: Some(s),
        ..SetAttrs::default()
    };
    fs.clock.set(T0 + 10);
    let a = set(&fs, f, size(100));
    assert_eq!(
        (a.size, a.atime_ns, a.mtime_ns, a.ctime_ns),
        (100, T0, T0 + 10, T0 + 10)
    );
    fs.clock.set(T0 + 20);
    let a = set(&fs, f, size(100));
    assert_eq!((a.mtime_ns, a.ctime_ns), (T0 + 10, T0 + 10), "same size");
    // ftruncate sends "mtime now" with the size: the times move even at the same size.
    let a = set(
        &fs,
        f,
        SetAttrs {
            mtime: Some(SetTime::Now),
            ..size(100)
        },
    );
    assert_eq!((a.mtime_ns, a.ctime_ns), (T0 + 20, T0 + 20));
    fs.clock.set(T0 + 30);
    let a = set(&fs, f, size(0));
    assert_eq!((a.size, a.mtime_ns, a.ctime_ns), (0, T0 + 30, T0 + 30));
}

#[test]
fn write_records_its_mtime_and_moves_ctime() {
    let fs = Fs::new();
    let f = fs.create(&Cred::root(), ROOT, "f", 0o644).unwrap().ino;
    fs.clock.set(T0 + 9);
    let a = fs
        .attr(
            &Cred::root(),
            Request::ExtendSize {
                ino: f,
                size: 10,
                mtime_ns: T0 + 8,
            },
        )
        .unwrap();
    assert_eq!(
        (a.size, a.atime_ns, a.mtime_ns, a.ctime_ns),
        (10, T0, T0 + 8, T0 + 9)
    );
}

#[test]
fn utimens_now_omit_and_nanoseconds() {
    let fs = Fs::new();
    let f = fs.create(&Cred::root(), ROOT, "f", 0o644).unwrap().ino;
    let (at, mt) = (1_234_567_890_123_456_789, -987_654_321);
    fs.clock.set(T0 + 1);
    let a = set(
        &fs,
        f,
        SetAttrs {
            atime: Some(SetTime::AtNs(at)),
            mtime: Some(SetTime::AtNs(mt)),
            ..SetAttrs::default()
        },
    );
    assert_eq!((a.atime_ns, a.mtime_ns, a.ctime_ns), (at, mt, T0 + 1));
    // UTIME_OMIT for the mtime, UTIME_NOW for the atime; ctime is always now.
    fs.clock.set(T0 + 2);
    let a = set(
        &fs,
        f,
        SetAttrs {
            atime: Some(SetTime::Now),
            ..SetAttrs::default()
        },
    );
    assert_eq!((a.atime_ns, a.mtime_ns, a.ctime_ns), (T0 + 2, mt, T0 + 2));
    fs.clock.set(T0 + 3);
    let a = set(
        &fs,
        f,
        SetAttrs {
            mtime: Some(SetTime::Now),
            ..SetAttrs::default()
        },
    );
    assert_eq!(
        (a.atime_ns, a.mtime_ns, a.ctime_ns),
        (T0 + 2, T0 + 3, T0 + 3)
    );
    // The times survive a restart to the nanosecond.
    let mut fs = fs;
    fs.reopen();
    assert_eq!(times(&fs, f.0), (T0 + 2, T0 + 3, T0 + 3));
}

#[test]
fn names_of_255_bytes_work_and_256_are_too_long() {
    let fs = Fs::new();
    let r = Cred::root();
    let ok = "n".repeat(MAX_NAME_BYTES);
    let long = "n".repeat(MAX_NAME_BYTES + 1);
    // Multi-byte characters count in bytes: 85 three-byte characters are 255 bytes.
    let wide = "€".repeat(85);
    let f = fs.create(&r, ROOT, &ok, 0o644).unwrap().ino;
    fs.mkdir(&r, ROOT, &wide, 0o755).unwrap();
    assert_eq!(fs.lookup(ROOT, &ok).unwrap().ino, f);
    let too_long = |res: Result<Response, WireError>, what: &str| {
        let e = res.unwrap_err();
        assert_eq!(e.code, ErrorCode::NameTooLong, "{what}: {e}");
        assert_eq!(e.code.errno(), 36, "ENAMETOOLONG");
    };
    let resp = |r: Result<Attr, WireError>| r.map(Response::Attr);
    too_long(resp(fs.create(&r, ROOT, &long, 0o644)), "create");
    too_long(resp(fs.mkdir(&r, ROOT, &long, 0o755)), "mkdir");
    too_long(resp(fs.lookup(ROOT, &long)), "lookup");
    too_long(resp(link(&fs, f, ROOT, &long)), "link");
    too_long(fs.rename(ROOT, &ok, ROOT, &long, false), "rename");
    too_long(fs.unlink(&r, ROOT, &long), "unlink");
    too_long(
        fs.root(Request::Symlink {
            parent: InodeId(ROOT),
            name: long.clone(),
            target: "x".into(),
        }),
        "symlink",
    );
    too_long(resp(fs.mkdir(&r, ROOT, &"€".repeat(86), 0o755)), "wide");
    fs.check();
}

#[test]
fn paths_of_4095_bytes_resolve_and_4096_are_too_long() {
    let fs = Fs::new();
    let r = Cred::root();
    // 16 components of "/" + 254 bytes, then one that brings the total to 4095.
    let mut path = String::new();
    let mut at = ROOT;
    for i in 0..16 {
        let name = format!("{i:02}{}", "d".repeat(252));
        at = fs.mkdir(&r, at, &name, 0o755).unwrap().ino.0;
        path = format!("{path}/{name}");
    }
    let last = "f".repeat(MAX_PATH_BYTES - path.len() - 1);
    let f = fs.create(&r, at, &last, 0o644).unwrap().ino;
    path = format!("{path}/{last}");
    assert_eq!(path.len(), MAX_PATH_BYTES);
    assert_eq!(fs.resolve(&r, &path, true).unwrap().ino, f);
    let e = fs.resolve(&r, &format!("/{path}"), true).unwrap_err();
    assert_eq!(e.code, ErrorCode::NameTooLong, "{e}");
    // A symlink target may be a full path too.
    fs.root(Request::Symlink {
        parent: InodeId(ROOT),
        name: "deep".into(),
        target: path.clone(),
    })
    .unwrap();
    assert_eq!(fs.resolve(&r, "/deep", true).unwrap().ino, f);
}

#[test]
fn rename_of_a_hard_link_over_another_link_of_it_does_nothing() {
    let fs = Fs::new();
    let r = Cred::root();
    let d = fs.mkdir(&r, ROOT, "d", 0o755).unwrap().ino.0;
    let f = fs.create(&r, d, "a", 0o644).unwrap().ino;
    link(&fs, f, d, "b").unwrap();
    let before = (fs.getattr(f.0).unwrap(), fs.getattr(d).unwrap());
    fs.clock.set(T0 + 100);
    fs.rename(d, "a", d, "b", false).unwrap();
    assert_eq!(fs.lookup(d, "a").unwrap().ino, f);
    assert_eq!(fs.lookup(d, "b").unwrap().ino, f);
    let after = (fs.getattr(f.0).unwrap(), fs.getattr(d).unwrap());
    assert_eq!(before, after, "nlink and all times unchanged");
    assert_eq!(after.0.nlink, 2);
    // Across directories too, and even for a caller who could not remove either name.
    link(&fs, f, ROOT, "c").unwrap();
    fs.call(
        &user(1000, 1000),
        Request::Rename {
            src_parent: InodeId(ROOT),
            src_name: "c".into(),
            dst_parent: InodeId(d),
            dst_name: "a".into(),
            noreplace: false,
        },
    )
    .unwrap();
    assert_eq!(fs.getattr(f.0).unwrap().nlink, 3);
    fs.check();
}

#[test]
fn a_directory_renamed_into_its_own_subtree_is_invalid() {
    let fs = Fs::new();
    let r = Cred::root();
    let a = fs.mkdir(&r, ROOT, "a", 0o755).unwrap().ino.0;
    let b = fs.mkdir(&r, a, "b", 0o755).unwrap().ino.0;
    let c = fs.mkdir(&r, b, "c", 0o755).unwrap().ino.0;
    fs.create(&r, c, "file", 0o644).unwrap();
    let full = fs.mkdir(&r, c, "full", 0o755).unwrap().ino.0;
    fs.create(&r, full, "x", 0o644).unwrap();
    let invalid = |dp: u64, dn: &str| {
        let e = fs.rename(ROOT, "a", dp, dn, false).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument, "to {dn:?}: {e}");
    };
    invalid(a, "new");
    invalid(c, "new");
    // EINVAL comes before what the destination would say (ENOTDIR, ENOTEMPTY).
    invalid(c, "file");
    invalid(c, "full");
    // An entry onto its own name is fine; a directory onto its parent is ENOTEMPTY.
    fs.rename(ROOT, "a", ROOT, "a", false).unwrap();
    assert_eq!(
        code(fs.rename(b, "c", ROOT, "a", false)),
        ErrorCode::NotEmpty
    );
    fs.check();
}

#[test]
fn a_stripe_count_above_the_servers_is_refused() {
    let fs = Fs::with_cluster(cluster(3));
    let r = Cred::root();
    let hint = |count| LayoutHint {
        stripe_count: Some(count),
        ..LayoutHint::default()
    };
    let create = |name: &str, count| {
        fs.attr(
            &r,
            Request::Create {
                parent: InodeId(ROOT),
                name: name.into(),
                mode: 0o644,
                exclusive: true,
                layout: hint(count),
            },
        )
    };
    let e = create("four", 4).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    assert!(
        e.message.contains("stripe count 4") && e.message.contains("(3)"),
        "{e}"
    );
    assert_eq!(code(fs.lookup(ROOT, "four")), ErrorCode::NotFound);
    assert_eq!(create("three", 3).unwrap().layout.unwrap().servers.len(), 3);
    assert_eq!(create("all", 0).unwrap().layout.unwrap().servers.len(), 3);
    let f = fs.create(&r, ROOT, "f", 0o644).unwrap().ino;
    let d = fs.mkdir(&r, ROOT, "d", 0o755).unwrap().ino;
    for ino in [f, d] {
        let e = fs
            .attr(&r, Request::SetLayout { ino, hint: hint(9) })
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{e}");
        assert!(e.message.contains("stripe count 9"), "{e}");
    }
    fs.check();
}
