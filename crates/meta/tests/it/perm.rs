//! Permission checks with non-root credentials.

use crate::common;
use common::*;
use stripefs_wire::*;

const ROOT: u64 = 1;

#[test]
fn directory_write_and_search() {
    let fs = Fs::new();
    let r = Cred::root();
    let alice = user(1000, 100);
    let bob = user(1001, 101);
    let home = fs.mkdir(&r, ROOT, "home", 0o755).unwrap().ino.0;
    assert_eq!(
        code(fs.create(&alice, ROOT, "x", 0o644)),
        ErrorCode::PermissionDenied
    );
    assert_eq!(
        code(fs.mkdir(&alice, home, "a", 0o755)),
        ErrorCode::PermissionDenied
    );
    let a = fs.mkdir(&r, home, "alice", 0o700).unwrap().ino.0;
    fs.attr(
        &r,
        Request::SetAttr {
            ino: InodeId(a),
            attrs: SetAttrs {
                uid: Some(1000),
                gid: Some(100),
                ..Default::default()
            },
        },
    )
    .unwrap();
    let f = fs.create(&alice, a, "f", 0o600).unwrap();
    // bob cannot pass alice's 0700 directory, nor list it, nor remove in it.
    assert_eq!(
        code(fs.resolve(&bob, "/home/alice/f", true)),
        ErrorCode::PermissionDenied
    );
    assert_eq!(
        fs.resolve(&alice, "/home/alice/f", true).unwrap().ino,
        f.ino
    );
    assert_eq!(
        code(fs.call(
            &bob,
            Request::Lookup {
                parent: InodeId(a),
                name: "f".into()
            }
        )),
        ErrorCode::PermissionDenied
    );
    assert_eq!(
        code(fs.call(
            &bob,
            Request::ReadDir {
                ino: InodeId(a),
                after: String::new(),
                limit: 10
            }
        )),
        ErrorCode::PermissionDenied
    );
    assert_eq!(code(fs.unlink(&bob, a, "f")), ErrorCode::PermissionDenied);
    // Open checks r/w against the mode; root bypasses.
    let open = |c: &Cred, read, write| {
        fs.call(
            c,
            Request::Open {
                ino: f.ino,
                session: fs.sess(1),
                read,
                write,
            },
        )
    };
    assert_eq!(code(open(&bob, true, false)), ErrorCode::PermissionDenied);
    open(&alice, true, true).unwrap();
    open(&r, true, true).unwrap();
    // Access.
    let access = |c: &Cred, mask| fs.call(c, Request::Access { ino: f.ino, mask });
    access(&alice, 6).unwrap();
    assert_eq!(code(access(&alice, 1)), ErrorCode::PermissionDenied);
    assert_eq!(code(access(&r, 1)), ErrorCode::PermissionDenied); // no x bit at all
    access(&r, 6).unwrap();
    assert_eq!(code(access(&bob, 4)), ErrorCode::PermissionDenied);
    access(&bob, 0).unwrap();
    fs.check();
}

#[test]
fn group_and_supplementary_groups() {
    let fs = Fs::new();
    let r = Cred::root();
    let d = fs.mkdir(&r, ROOT, "shared", 0o770).unwrap();
    fs.attr(
        &r,
        Request::SetAttr {
            ino: d.ino,
            attrs: SetAttrs {
                gid: Some(50),
                ..Default::default()
            },
        },
    )
    .unwrap();
    let member = Cred {
        uid: 1000,
        gid: 100,
        groups: vec![50],
    };
    let outsider = user(1001, 100);
    fs.create(&member, d.ino.0, "f", 0o640).unwrap();
    assert_eq!(
        code(fs.create(&outsider, d.ino.0, "g", 0o640)),
        ErrorCode::PermissionDenied
    );
}

/// Alice and bob, and a sticky directory open to all with a file of each ("a", "b").
fn sticky_tmp(fs: &Fs) -> (Cred, Cred, u64) {
    let alice = user(1000, 100);
    let bob = user(1001, 100);
    let tmp = fs.mkdir(&Cred::root(), ROOT, "tmp", 0o1777).unwrap().ino.0;
    fs.create(&alice, tmp, "a", 0o666).unwrap();
    fs.create(&bob, tmp, "b", 0o666).unwrap();
    (alice, bob, tmp)
}

#[test]
fn sticky_bit() {
    let fs = Fs::new();
    let r = Cred::root();
    let (alice, bob, tmp) = sticky_tmp(&fs);
    assert_eq!(code(fs.unlink(&bob, tmp, "a")), ErrorCode::NotPermitted);
    let mv = |c: &Cred, n: &str, to: &str| {
        fs.call(
            c,
            Request::Rename {
                src_parent: InodeId(tmp),
                src_name: n.into(),
                dst_parent: InodeId(tmp),
                dst_name: to.into(),
                noreplace: false,
            },
        )
    };
    assert_eq!(code(mv(&bob, "a", "c")), ErrorCode::NotPermitted);
    // Replacing someone else's file in a sticky directory is refused too.
    assert_eq!(code(mv(&bob, "b", "a")), ErrorCode::NotPermitted);
    mv(&bob, "b", "b2").unwrap();
    fs.unlink(&alice, tmp, "a").unwrap();
    fs.unlink(&r, tmp, "b2").unwrap();
    // Without the sticky bit, anyone with write permission on the directory may remove.
    let open = fs.mkdir(&r, ROOT, "open", 0o777).unwrap().ino.0;
    fs.create(&alice, open, "a", 0o600).unwrap();
    fs.unlink(&bob, open, "a").unwrap();
    fs.check();
}

/// An exchange removes both entries from their directories (write permission on both,
/// the sticky rule for both), and a directory that changes parent needs write
/// permission on itself, as for rename.
#[test]
fn exchange_permissions() {
    let fs = Fs::new();
    let r = Cred::root();
    let (alice, bob, tmp) = sticky_tmp(&fs);
    // Bob owns one of the two entries, not the other: refused in a sticky directory.
    assert_eq!(
        code(fs.exchange(&bob, tmp, "a", tmp, "b")),
        ErrorCode::NotPermitted
    );
    fs.exchange(&alice, tmp, "a", tmp, "a").unwrap();
    // A directory bob may not write into.
    let base = fs.mkdir(&r, ROOT, "base", 0o777).unwrap().ino.0;
    let closed = fs.mkdir(&alice, base, "closed", 0o755).unwrap().ino.0;
    fs.create(&alice, closed, "c", 0o666).unwrap();
    let mine = fs.mkdir(&bob, base, "mine", 0o755).unwrap().ino.0;
    fs.create(&bob, mine, "m", 0o666).unwrap();
    assert_eq!(
        code(fs.exchange(&bob, mine, "m", closed, "c")),
        ErrorCode::PermissionDenied
    );
    // A directory alice may not write moving to another parent.
    let open = fs.mkdir(&r, base, "open", 0o777).unwrap().ino.0;
    fs.mkdir(&bob, open, "bobs", 0o755).unwrap();
    fs.create(&alice, open, "x", 0o666).unwrap();
    let other = fs.mkdir(&alice, base, "other", 0o755).unwrap().ino.0;
    fs.create(&alice, other, "y", 0o666).unwrap();
    assert_eq!(
        code(fs.exchange(&alice, open, "bobs", other, "y")),
        ErrorCode::PermissionDenied
    );
    // In one directory its `..` does not change: allowed.
    fs.exchange(&alice, open, "bobs", open, "x").unwrap();
    fs.check();
}

#[test]
fn set_attr_rules() {
    let fs = Fs::new();
    let r = Cred::root();
    let alice = Cred {
        uid: 1000,
        gid: 100,
        groups: vec![200],
    };
    let bob = user(1001, 100);
    let pub_dir = fs.mkdir(&r, ROOT, "p", 0o777).unwrap().ino.0;
    let f = fs.create(&alice, pub_dir, "f", 0o664).unwrap().ino;
    let set = |c: &Cred, attrs: SetAttrs| fs.call(c, Request::SetAttr { ino: f, attrs });
    let none = SetAttrs::default;
    // chmod: owner or root only.
    set(
        &alice,
        SetAttrs {
            mode: Some(0o660),
            ..none()
        },
    )
    .unwrap();
    assert_eq!(
        code(set(
            &bob,
            SetAttrs {
                mode: Some(0o777),
                ..none()
            }
        )),
        ErrorCode::NotPermitted
    );
    // chown: root only; chgrp by the owner to one of its groups.
    assert_eq!(
        code(set(
            &alice,
            SetAttrs {
                uid: Some(1001),
                ..none()
            }
        )),
        ErrorCode::NotPermitted
    );
    set(
        &alice,
        SetAttrs {
            gid: Some(200),
            ..none()
        },
    )
    .unwrap();
    assert_eq!(
        code(set(
            &alice,
            SetAttrs {
                gid: Some(300),
                ..none()
            }
        )),
        ErrorCode::NotPermitted
    );
    set(
        &r,
        SetAttrs {
            uid: Some(1001),
            ..none()
        },
    )
    .unwrap();
    set(
        &r,
        SetAttrs {
            uid: Some(1000),
            gid: Some(100),
            ..none()
        },
    )
    .unwrap();
    // Times: Now with write permission; explicit times only by the owner.
    set(
        &bob,
        SetAttrs {
            mtime: Some(SetTime::Now),
            ..none()
        },
    )
    .unwrap(); // group rw
    assert_eq!(
        code(set(
            &bob,
            SetAttrs {
                mtime: Some(SetTime::AtNs(5)),
                ..none()
            }
        )),
        ErrorCode::NotPermitted
    );
    set(
        &alice,
        SetAttrs {
            mtime: Some(SetTime::AtNs(5)),
            ..none()
        },
    )
    .unwrap();
    // Size needs write permission, even for the owner.
    set(
        &alice,
        SetAttrs {
            mode: Some(0o444),
            ..none()
        },
    )
    .unwrap();
    assert_eq!(
        code(set(
            &alice,
            SetAttrs {
                size: Some(0),
                ..none()
            }
        )),
        ErrorCode::PermissionDenied
    );
    assert_eq!(
        code(set(
            &bob,
            SetAttrs {
                mtime: Some(SetTime::Now),
                ..none()
            }
        )),
        ErrorCode::PermissionDenied
    );
    set(
        &r,
        SetAttrs {
            size: Some(0),
            ..none()
        },
    )
    .unwrap();
    // SetLayout: owner or root.
    let hint = LayoutHint {
        stripe_size_bytes: None,
        stripe_count: Some(1),
        start_server: None,
        ..LayoutHint::default()
    };
    assert_eq!(
        code(fs.call(
            &bob,
            Request::SetLayout {
                ino: f,
                hint: hint.clone(),
            }
        )),
        ErrorCode::NotPermitted
    );
    fs.call(&alice, Request::SetLayout { ino: f, hint })
        .unwrap();
    fs.check();
}

#[test]
fn setgid_directory_inheritance() {
    let fs = Fs::new();
    let r = Cred::root();
    let d = fs.mkdir(&r, ROOT, "g", 0o2777).unwrap();
    fs.attr(
        &r,
        Request::SetAttr {
            ino: d.ino,
            attrs: SetAttrs {
                gid: Some(77),
                ..Default::default()
            },
        },
    )
    .unwrap();
    let alice = user(1000, 100);
    let f = fs.create(&alice, d.ino.0, "f", 0o644).unwrap();
    assert_eq!((f.uid, f.gid), (1000, 77));
    let sub = fs.mkdir(&alice, d.ino.0, "sub", 0o755).unwrap();
    assert_eq!((sub.gid, sub.mode & 0o2000), (77, 0o2000));
}

/// The root directory of a new file system belongs to whoever made it: by default the
/// server process's effective ids (root when root starts the cluster), so that a user
/// who starts a cluster without root privileges can write its root. Other users cannot,
/// and a restart keeps the owner whatever ids the server runs with then.
#[test]
fn the_root_belongs_to_the_user_who_made_the_file_system() {
    // SAFETY: geteuid and getegid cannot fail.
    let me = unsafe { (libc::geteuid(), libc::getegid()) };
    assert_eq!(stripefs_meta::Tuning::default().root_owner, me);
    let tuning = stripefs_meta::Tuning {
        root_owner: (1000, 100),
        ..stripefs_meta::Tuning::default()
    };
    let mut fs = Fs::tuned(cluster(4), tuning);
    let a = fs.getattr(ROOT).unwrap();
    assert_eq!((a.uid, a.gid, a.mode & 0o7777), (1000, 100, 0o755));
    let alice = user(1000, 100);
    let bob = user(1001, 101);
    fs.create(&alice, ROOT, "mine", 0o644).unwrap();
    fs.mkdir(&alice, ROOT, "dir", 0o755).unwrap();
    assert_eq!(
        code(fs.create(&bob, ROOT, "x", 0o644)),
        ErrorCode::PermissionDenied
    );
    fs.tuning.root_owner = (0, 0);
    fs.reopen();
    let a = fs.getattr(ROOT).unwrap();
    assert_eq!(
        (a.uid, a.gid),
        (1000, 100),
        "a restart keeps the root's owner"
    );
}
