//! Extended attributes on the metadata server: values round-trip and survive a crash
//! (the metadata log) and a restart (the store); create and replace modes; the
//! namespaces and who may read, write and list them; size limits; ctime.

use crate::common;

use common::{code, user, Fs};
use stripefs_wire::*;

fn get(fs: &Fs, cred: &Cred, ino: u64, name: &str) -> Result<Vec<u8>, WireError> {
    match fs.call(
        cred,
        Request::GetXattr {
            ino: InodeId(ino),
            name: name.into(),
        },
    )? {
        Response::Xattr { value } => Ok(value),
        other => panic!("expected Xattr, got {other:?}"),
    }
}

fn list(fs: &Fs, cred: &Cred, ino: u64) -> Vec<String> {
    match fs.call(cred, Request::ListXattr { ino: InodeId(ino) }) {
        Ok(Response::XattrNames { names }) => names,
        other => panic!("expected XattrNames, got {other:?}"),
    }
}

fn set(
    fs: &Fs,
    cred: &Cred,
    ino: u64,
    name: &str,
    value: &[u8],
    mode: u8,
) -> Result<Attr, WireError> {
    fs.attr(
        cred,
        Request::SetXattr {
            ino: InodeId(ino),
            name: name.into(),
            value: value.to_vec(),
            mode,
        },
    )
}

fn remove(fs: &Fs, cred: &Cred, ino: u64, name: &str) -> Result<Attr, WireError> {
    fs.attr(
        cred,
        Request::RemoveXattr {
            ino: InodeId(ino),
            name: name.into(),
        },
    )
}

#[test]
fn values_round_trip_and_survive_a_crash_and_a_restart() {
    let mut fs = Fs::new();
    let root = Cred::root();
    let f = fs.create(&root, 1, "f", 0o644).unwrap().ino.0;
    let d = fs.mkdir(&root, 1, "d", 0o755).unwrap().ino.0;
    let before = fs.getattr(f).unwrap();
    let big = vec![7u8; MAX_XATTR_VALUE - 1024];
    let a = set(&fs, &root, f, "user.big", &big, XATTR_SET_ANY).unwrap();
    assert!(a.ctime_ns >= before.ctime_ns);
    set(&fs, &root, f, "user.a", b"1", XATTR_SET_ANY).unwrap();
    set(&fs, &root, f, "user.empty", b"", XATTR_SET_ANY).unwrap();
    set(&fs, &root, d, "user.dir", b"d", XATTR_SET_ANY).unwrap();
    set(&fs, &root, f, "trusted.t", b"t", XATTR_SET_ANY).unwrap();
    set(&fs, &root, f, "security.s", b"s", XATTR_SET_ANY).unwrap();
    let all = [
        "security.s",
        "trusted.t",
        "user.a",
        "user.big",
        "user.empty",
    ];
    assert_eq!(list(&fs, &root, f), all);
    fs.crash();
    assert_eq!(list(&fs, &root, f), all, "after replaying the metadata log");
    fs.reopen();
    assert_eq!(list(&fs, &root, f), all, "after a restart");
    assert_eq!(get(&fs, &root, f, "user.big").unwrap(), big);
    assert_eq!(get(&fs, &root, f, "user.a").unwrap(), b"1");
    assert_eq!(get(&fs, &root, f, "user.empty").unwrap(), b"");
    assert_eq!(get(&fs, &root, d, "user.dir").unwrap(), b"d");
    // A replace keeps one entry; a remove drops it.
    set(&fs, &root, f, "user.a", b"22", XATTR_SET_ANY).unwrap();
    assert_eq!(get(&fs, &root, f, "user.a").unwrap(), b"22");
    remove(&fs, &root, f, "user.a").unwrap();
    assert_eq!(code(get(&fs, &root, f, "user.a")), ErrorCode::NoAttr);
    assert_eq!(code(remove(&fs, &root, f, "user.a")), ErrorCode::NoAttr);
    // The attributes go with the inode: a hard link sees them, an unlinked name not.
    fs.attr(
        &root,
        Request::Link {
            ino: InodeId(f),
            parent: InodeId(d),
            name: "g".into(),
        },
    )
    .unwrap();
    let g = fs.lookup(d, "g").unwrap().ino.0;
    assert_eq!(get(&fs, &root, g, "trusted.t").unwrap(), b"t");
    assert!(fs.check().files >= 1, "fsck passes with attributes");
}

#[test]
fn create_and_replace_modes() {
    let fs = Fs::new();
    let root = Cred::root();
    let f = fs.create(&root, 1, "f", 0o644).unwrap().ino.0;
    assert_eq!(
        code(set(&fs, &root, f, "user.x", b"1", XATTR_SET_REPLACE)),
        ErrorCode::NoAttr
    );
    set(&fs, &root, f, "user.x", b"1", XATTR_SET_CREATE).unwrap();
    assert_eq!(
        code(set(&fs, &root, f, "user.x", b"2", XATTR_SET_CREATE)),
        ErrorCode::Exists
    );
    set(&fs, &root, f, "user.x", b"3", XATTR_SET_REPLACE).unwrap();
    assert_eq!(get(&fs, &root, f, "user.x").unwrap(), b"3");
    assert_eq!(
        code(set(&fs, &root, f, "user.x", b"3", 3)),
        ErrorCode::InvalidArgument
    );
}

#[test]
fn namespaces_and_permissions_follow_linux() {
    let fs = Fs::new();
    let root = Cred::root();
    let (alice, bob) = (user(1000, 1000), user(2000, 2000));
    let w = fs.mkdir(&root, 1, "w", 0o777).unwrap().ino.0;
    let f = fs.create(&alice, w, "f", 0o644).unwrap().ino.0;
    set(&fs, &alice, f, "user.mine", b"a", XATTR_SET_ANY).unwrap();
    set(&fs, &root, f, "trusted.t", b"t", XATTR_SET_ANY).unwrap();
    set(&fs, &root, f, "security.s", b"s", XATTR_SET_ANY).unwrap();
    // user.*: read with read permission, write with write permission.
    assert_eq!(get(&fs, &bob, f, "user.mine").unwrap(), b"a");
    assert_eq!(
        code(set(&fs, &bob, f, "user.mine", b"b", XATTR_SET_ANY)),
        ErrorCode::PermissionDenied
    );
    assert_eq!(
        code(remove(&fs, &bob, f, "user.mine")),
        ErrorCode::PermissionDenied
    );
    let private = fs.create(&alice, w, "p", 0o600).unwrap().ino.0;
    set(&fs, &alice, private, "user.k", b"k", XATTR_SET_ANY).unwrap();
    assert_eq!(
        code(get(&fs, &bob, private, "user.k")),
        ErrorCode::PermissionDenied
    );
    // trusted.*: root only, and hidden from others' lists.
    assert_eq!(code(get(&fs, &alice, f, "trusted.t")), ErrorCode::NoAttr);
    assert_eq!(
        code(set(&fs, &alice, f, "trusted.t", b"x", XATTR_SET_ANY)),
        ErrorCode::NotPermitted
    );
    assert_eq!(list(&fs, &alice, f), ["security.s", "user.mine"]);
    assert_eq!(
        list(&fs, &root, f),
        ["security.s", "trusted.t", "user.mine"]
    );
    // security.*: anyone reads, root writes.
    assert_eq!(get(&fs, &bob, f, "security.s").unwrap(), b"s");
    assert_eq!(
        code(set(&fs, &alice, f, "security.s", b"x", XATTR_SET_ANY)),
        ErrorCode::NotPermitted
    );
    // system.* (ACLs) and unknown namespaces are not kept.
    for name in ["system.posix_acl_access", "os2.x", "user"] {
        let c = code(set(&fs, &root, f, name, b"x", XATTR_SET_ANY));
        assert!(
            matches!(c, ErrorCode::AttrUnsupported | ErrorCode::InvalidArgument),
            "{name}: {c:?}"
        );
    }
    // user.* belongs to regular files and directories only.
    fs.attr(
        &root,
        Request::Symlink {
            parent: InodeId::ROOT,
            name: "l".into(),
            target: "f".into(),
        },
    )
    .unwrap();
    let l = fs.lookup(1, "l").unwrap().ino.0;
    assert_eq!(
        code(set(&fs, &root, l, "user.x", b"x", XATTR_SET_ANY)),
        ErrorCode::NotPermitted
    );
    assert_eq!(code(get(&fs, &root, l, "user.x")), ErrorCode::NoAttr);
    set(&fs, &root, l, "trusted.x", b"x", XATTR_SET_ANY).unwrap();
    // In a sticky directory, only its owner (or root) writes its user attributes.
    let t = fs.mkdir(&alice, w, "t", 0o1777).unwrap().ino.0;
    assert_eq!(
        code(set(&fs, &bob, t, "user.x", b"x", XATTR_SET_ANY)),
        ErrorCode::NotPermitted
    );
    set(&fs, &alice, t, "user.x", b"x", XATTR_SET_ANY).unwrap();
}

#[test]
fn names_values_and_totals_are_bounded() {
    let fs = Fs::new();
    let root = Cred::root();
    let f = fs.create(&root, 1, "f", 0o644).unwrap().ino.0;
    let long = format!("user.{}", "n".repeat(MAX_XATTR_NAME - 5));
    set(&fs, &root, f, &long, b"x", XATTR_SET_ANY).unwrap();
    let too_long = format!("{long}n");
    assert_eq!(
        code(set(&fs, &root, f, &too_long, b"x", XATTR_SET_ANY)),
        ErrorCode::AttrRange
    );
    assert_eq!(code(get(&fs, &root, f, "")), ErrorCode::AttrRange);
    assert_eq!(
        code(set(
            &fs,
            &root,
            f,
            "user.v",
            &vec![0u8; MAX_XATTR_VALUE + 1],
            XATTR_SET_ANY
        )),
        ErrorCode::AttrTooBig
    );
    assert_eq!(
        code(set(&fs, &root, f, "user.a\0b", b"x", XATTR_SET_ANY)),
        ErrorCode::InvalidArgument
    );
    // An inode holds at most 64 KiB of names and values: ENOSPC past that, and a
    // replace counts the space the old value frees.
    remove(&fs, &root, f, &long).unwrap();
    set(&fs, &root, f, "user.a", &vec![1u8; 40_000], XATTR_SET_ANY).unwrap();
    assert_eq!(
        code(set(
            &fs,
            &root,
            f,
            "user.b",
            &vec![2u8; 30_000],
            XATTR_SET_ANY
        )),
        ErrorCode::NoSpace
    );
    set(&fs, &root, f, "user.a", &vec![3u8; 1000], XATTR_SET_ANY).unwrap();
    set(&fs, &root, f, "user.b", &vec![2u8; 30_000], XATTR_SET_ANY).unwrap();
    remove(&fs, &root, f, "user.b").unwrap();
    assert_eq!(list(&fs, &root, f), ["user.a"]);
}

/// A batch whose log record would pass the log's limit (operations on many inodes with
/// large attributes) is committed an operation at a time: every change lands and the
/// server keeps accepting changes. A single change too large for a record is refused.
#[test]
fn a_batch_too_large_for_one_log_record_commits_one_by_one() {
    let tuning = stripefs_meta::Tuning {
        max_log_record: 40 << 10,
        ..stripefs_meta::Tuning::default()
    };
    let mut fs = Fs::tuned(common::cluster(1), tuning);
    let root = Cred::root();
    let files: Vec<u64> = (0..32)
        .map(|i| fs.create(&root, 1, &format!("f{i}"), 0o644).unwrap().ino.0)
        .collect();
    let value = |ino: u64| vec![ino as u8; 30 << 10];
    std::thread::scope(|s| {
        for part in files.chunks(4) {
            let fs = &fs;
            s.spawn(move || {
                for &ino in part {
                    set(
                        fs,
                        &Cred::root(),
                        ino,
                        "user.big",
                        &value(ino),
                        XATTR_SET_ANY,
                    )
                    .unwrap();
                }
            });
        }
    });
    let g = fs.create(&root, 1, "g", 0o644).unwrap().ino.0;
    let e = set(
        &fs,
        &root,
        g,
        "user.huge",
        &vec![1u8; 50 << 10],
        XATTR_SET_ANY,
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument, "{e}");
    set(&fs, &root, files[0], "user.small", b"s", XATTR_SET_ANY).unwrap();
    fs.crash();
    for &ino in &files {
        assert_eq!(get(&fs, &root, ino, "user.big").unwrap(), value(ino));
    }
    assert_eq!(get(&fs, &root, files[0], "user.small").unwrap(), b"s");
}
