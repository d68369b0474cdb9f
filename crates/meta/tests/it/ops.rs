//! Per-operation tests through `MetaService::handle`.

use crate::common;
use common::*;
use stripefs_wire::*;

const ROOT: u64 = 1;

#[test]
fn fresh_root_and_ping() {
    let fs = Fs::new();
    let r = fs.getattr(ROOT).unwrap();
    assert_eq!(
        (r.ftype, r.mode, r.nlink, r.uid, r.gid),
        (FileType::Dir, 0o755, 2, 0, 0)
    );
    assert!(matches!(
        fs.root(Request::Ping {}),
        Ok(Response::Pong {
            role: Role::Meta,
            server_id: None,
            ..
        })
    ));
    let data = Request::Remove { fid: InodeId(5) };
    assert_eq!(code(fs.root(data)), ErrorCode::Unsupported);
    assert_eq!(code(fs.getattr(999)), ErrorCode::StaleHandle);
    fs.check();
}

#[test]
fn create_lookup_and_exclusive() {
    let fs = Fs::new();
    let me = user(1000, 100);
    let d = fs.mkdir(&Cred::root(), ROOT, "d", 0o777).unwrap();
    let f = fs.create(&me, d.ino.0, "f", 0o640).unwrap();
    assert_eq!(
        (f.uid, f.gid, f.mode, f.nlink, f.size),
        (1000, 100, 0o640, 1, 0)
    );
    assert_eq!(fs.lookup(d.ino.0, "f").unwrap(), f);
    assert_eq!(code(fs.create(&me, d.ino.0, "f", 0o640)), ErrorCode::Exists);
    let again = fs.attr(
        &me,
        Request::Create {
            parent: d.ino,
            name: "f".into(),
            mode: 0o600,
            exclusive: false,
            layout: LayoutHint::default(),
        },
    );
    assert_eq!(again.unwrap().ino, f.ino);
    let on_dir = fs.attr(
        &me,
        Request::Create {
            parent: InodeId(ROOT),
            name: "d".into(),
            mode: 0o600,
            exclusive: false,
            layout: LayoutHint::default(),
        },
    );
    assert_eq!(code(on_dir), ErrorCode::IsDir);
    assert_eq!(code(fs.create(&me, f.ino.0, "x", 0o600)), ErrorCode::NotDir);
    assert_eq!(
        code(fs.create(&me, 12345, "x", 0o600)),
        ErrorCode::StaleHandle
    );
    assert_eq!(
        code(fs.create(&me, ROOT, "..", 0o600)),
        ErrorCode::InvalidArgument
    );
    assert_eq!(code(fs.lookup(ROOT, "nope")), ErrorCode::NotFound);
    // Parent times move with its entries.
    fs.clock.set(T0 + 5);
    fs.create(&me, d.ino.0, "g", 0o600).unwrap();
    let d2 = fs.getattr(d.ino.0).unwrap();
    assert_eq!((d2.mtime_ns, d2.ctime_ns), (T0 + 5, T0 + 5));
    fs.check();
}

#[test]
fn mkdir_rmdir_nlink() {
    let fs = Fs::new();
    let r = Cred::root();
    let a = fs.mkdir(&r, ROOT, "a", 0o755).unwrap();
    assert_eq!(a.nlink, 2);
    assert_eq!(fs.getattr(ROOT).unwrap().nlink, 3);
    fs.mkdir(&r, a.ino.0, "b", 0o755).unwrap();
    assert_eq!(fs.getattr(a.ino.0).unwrap().nlink, 3);
    let rmdir = |p: u64, n: &str| {
        fs.root(Request::Rmdir {
            parent: InodeId(p),
            name: n.into(),
        })
    };
    assert_eq!(code(rmdir(ROOT, "a")), ErrorCode::NotEmpty);
    fs.create(&r, ROOT, "f", 0o644).unwrap();
    assert_eq!(code(rmdir(ROOT, "f")), ErrorCode::NotDir);
    assert_eq!(code(fs.unlink(&r, ROOT, "a")), ErrorCode::IsDir);
    rmdir(a.ino.0, "b").unwrap();
    rmdir(ROOT, "a").unwrap();
    assert_eq!(fs.getattr(ROOT).unwrap().nlink, 2);
    assert_eq!(code(fs.getattr(a.ino.0)), ErrorCode::StaleHandle);
    let (inodes, files, dirs, _) = fs.status();
    assert_eq!((inodes, files, dirs), (2, 1, 1));
    fs.check();
}

#[test]
fn hard_links() {
    let fs = Fs::new();
    let r = Cred::root();
    let f = fs.create(&r, ROOT, "f", 0o644).unwrap();
    let d = fs.mkdir(&r, ROOT, "d", 0o755).unwrap();
    let l = fs
        .attr(
            &r,
            Request::Link {
                ino: f.ino,
                parent: d.ino,
                name: "g".into(),
            },
        )
        .unwrap();
    assert_eq!((l.ino, l.nlink), (f.ino, 2));
    assert_eq!(
        code(fs.attr(
            &r,
            Request::Link {
                ino: d.ino,
                parent: InodeId(ROOT),
                name: "dd".into()
            }
        )),
        ErrorCode::NotPermitted
    );
    assert_eq!(
        code(fs.attr(
            &r,
            Request::Link {
                ino: f.ino,
                parent: d.ino,
                name: "g".into()
            }
        )),
        ErrorCode::Exists
    );
    fs.unlink(&r, ROOT, "f").unwrap();
    assert_eq!(fs.getattr(f.ino.0).unwrap().nlink, 1);
    assert_eq!(fs.lookup(d.ino.0, "g").unwrap().ino, f.ino);
    assert_eq!(fs.svc.purge_queue_len().unwrap(), 0);
    fs.unlink(&r, d.ino.0, "g").unwrap();
    assert_eq!(code(fs.getattr(f.ino.0)), ErrorCode::StaleHandle);
    assert_eq!(fs.svc.purge_queue_len().unwrap(), 1);
    fs.check();
}

#[test]
fn rename_cases() {
    let fs = Fs::new();
    let r = Cred::root();
    let a = fs.mkdir(&r, ROOT, "a", 0o755).unwrap().ino.0;
    let b = fs.mkdir(&r, ROOT, "b", 0o755).unwrap().ino.0;
    let f = fs.create(&r, a, "f", 0o644).unwrap();
    let g = fs.create(&r, b, "g", 0o644).unwrap();
    // Plain move between directories.
    fs.rename(a, "f", b, "f2", false).unwrap();
    assert_eq!(fs.lookup(b, "f2").unwrap().ino, f.ino);
    assert_eq!(code(fs.lookup(a, "f")), ErrorCode::NotFound);
    // Over an existing file: atomic replace, the old one is purged.
    fs.rename(b, "f2", b, "g", false).unwrap();
    assert_eq!(fs.lookup(b, "g").unwrap().ino, f.ino);
    assert_eq!(code(fs.getattr(g.ino.0)), ErrorCode::StaleHandle);
    assert_eq!(fs.svc.purge_queue_len().unwrap(), 1);
    // noreplace.
    fs.create(&r, b, "h", 0o644).unwrap();
    assert_eq!(code(fs.rename(b, "g", b, "h", true)), ErrorCode::Exists);
    // Directory cases.
    let sub = fs.mkdir(&r, a, "sub", 0o755).unwrap().ino.0;
    fs.mkdir(&r, b, "empty", 0o755).unwrap();
    let full = fs.mkdir(&r, b, "full", 0o755).unwrap().ino.0;
    fs.create(&r, full, "x", 0o644).unwrap();
    assert_eq!(
        code(fs.rename(a, "sub", b, "full", false)),
        ErrorCode::NotEmpty
    );
    assert_eq!(code(fs.rename(b, "g", b, "empty", false)), ErrorCode::IsDir);
    assert_eq!(code(fs.rename(a, "sub", b, "g", false)), ErrorCode::NotDir);
    assert_eq!(
        code(fs.rename(ROOT, "a", sub, "a2", false)),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        code(fs.rename(ROOT, "a", a, "a2", false)),
        ErrorCode::InvalidArgument
    );
    // A destination above the source: ENOTEMPTY before any type check, as Linux
    // answers (a file or a directory onto its own parent or grandparent).
    let f3 = fs.create(&r, sub, "f3", 0o644).unwrap();
    assert_eq!(
        code(fs.rename(sub, "f3", ROOT, "a", false)),
        ErrorCode::NotEmpty
    );
    assert_eq!(
        code(fs.rename(sub, "f3", a, "sub", false)),
        ErrorCode::NotEmpty
    );
    fs.unlink(&r, sub, "f3").unwrap();
    assert_eq!(code(fs.getattr(f3.ino.0)), ErrorCode::StaleHandle);
    fs.rename(a, "sub", b, "empty", false).unwrap();
    assert_eq!(fs.lookup(b, "empty").unwrap().ino.0, sub);
    assert_eq!(fs.getattr(a).unwrap().nlink, 2);
    assert_eq!(fs.getattr(b).unwrap().nlink, 4); // ., .., empty(sub), full
                                                 // `..` of the moved directory follows it.
    assert_eq!(fs.resolve(&r, "/b/empty/..", true).unwrap().ino.0, b);
    // Hard links to one inode: rename is a no-op.
    fs.attr(
        &r,
        Request::Link {
            ino: f.ino,
            parent: InodeId(b),
            name: "same".into(),
        },
    )
    .unwrap();
    fs.rename(b, "g", b, "same", false).unwrap();
    assert_eq!(fs.lookup(b, "g").unwrap().nlink, 2);
    // Same name: nothing happens.
    fs.rename(b, "h", b, "h", false).unwrap();
    fs.check();
}

/// renameat2 RENAME_EXCHANGE: two entries swap, whatever their types; `..` and the
/// parents' link counts follow a directory that changes parent (the invariant check
/// counts them); a directory cannot be swapped under itself.
#[test]
fn exchange_cases() {
    let fs = Fs::new();
    let r = Cred::root();
    let a = fs.mkdir(&r, ROOT, "a", 0o755).unwrap().ino.0;
    let b = fs.mkdir(&r, ROOT, "b", 0o755).unwrap().ino.0;
    let f = fs.create(&r, a, "f", 0o644).unwrap().ino;
    let g = fs.create(&r, b, "g", 0o644).unwrap().ino;
    let before = fs.getattr(f.0).unwrap().ctime_ns;
    // Two files in two directories.
    fs.exchange(&r, a, "f", b, "g").unwrap();
    assert_eq!(fs.lookup(a, "f").unwrap().ino, g);
    assert_eq!(fs.lookup(b, "g").unwrap().ino, f);
    assert!(fs.getattr(f.0).unwrap().ctime_ns >= before);
    fs.check();
    // A directory with a file, across parents: `a` loses a subdirectory, `b` gains one.
    let sub = fs.mkdir(&r, a, "sub", 0o755).unwrap().ino.0;
    fs.create(&r, sub, "inside", 0o644).unwrap();
    assert_eq!(fs.getattr(a).unwrap().nlink, 3);
    fs.exchange(&r, a, "sub", b, "g").unwrap();
    assert_eq!(fs.lookup(b, "g").unwrap().ino.0, sub);
    assert_eq!(fs.lookup(a, "sub").unwrap().ino, f);
    assert_eq!(fs.getattr(a).unwrap().nlink, 2);
    assert_eq!(fs.getattr(b).unwrap().nlink, 3);
    assert_eq!(fs.resolve(&r, "/b/g/..", true).unwrap().ino.0, b);
    assert_eq!(fs.resolve(&r, "/b/g/inside", true).unwrap().nlink, 1);
    fs.check();
    // Two directories in one parent: names swap, no link moves.
    let c = fs.mkdir(&r, b, "c", 0o755).unwrap().ino.0;
    fs.exchange(&r, b, "g", b, "c").unwrap();
    assert_eq!(fs.lookup(b, "c").unwrap().ino.0, sub);
    assert_eq!(fs.lookup(b, "g").unwrap().ino.0, c);
    assert_eq!(fs.getattr(b).unwrap().nlink, 4);
    fs.check();
    // A directory under itself, either way round: EINVAL; missing names: ENOENT.
    fs.create(&r, sub, "deep", 0o644).unwrap();
    for ((ap, an), (bp, bn), want) in [
        ((b, "c"), (sub, "deep"), ErrorCode::InvalidArgument),
        ((sub, "deep"), (b, "c"), ErrorCode::InvalidArgument),
        ((ROOT, "b"), (sub, "deep"), ErrorCode::InvalidArgument),
        ((a, "nope"), (b, "c"), ErrorCode::NotFound),
        ((a, "sub"), (b, "nope"), ErrorCode::NotFound),
    ] {
        assert_eq!(code(fs.exchange(&r, ap, an, bp, bn)), want, "{an} <-> {bn}");
    }
    // One inode twice (the same name, or two hard links): nothing happens.
    fs.exchange(&r, a, "sub", a, "sub").unwrap();
    fs.attr(
        &r,
        Request::Link {
            ino: f,
            parent: InodeId(b),
            name: "f-link".into(),
        },
    )
    .unwrap();
    fs.exchange(&r, a, "sub", b, "f-link").unwrap();
    assert_eq!(fs.lookup(a, "sub").unwrap().ino, f);
    assert_eq!(fs.getattr(f.0).unwrap().nlink, 2);
    // The same request twice (as a duplicated message would be): the second finds the
    // names changed and is refused, so the swap stands.
    let c_ino = InodeId(c);
    let g_ino = fs.lookup(b, "g").unwrap().ino;
    assert_eq!(g_ino, c_ino);
    let sub_ino = fs.lookup(b, "c").unwrap().ino;
    let once = || fs.exchange_seen(&r, (b, "g", g_ino), (b, "c", sub_ino));
    once().unwrap();
    assert_eq!(code(once()), ErrorCode::StaleHandle);
    assert_eq!(fs.lookup(b, "g").unwrap().ino, sub_ino);
    assert_eq!(fs.lookup(b, "c").unwrap().ino, c_ino);
    fs.check();
}

#[test]
fn unlink_while_open_then_close_purges() {
    let fs = Fs::new();
    let r = Cred::root();
    let f = fs.create(&r, ROOT, "f", 0o644).unwrap();
    let open = |s: u64| {
        fs.root(Request::Open {
            ino: f.ino,
            session: fs.sess(s),
            read: true,
            write: true,
        })
    };
    let close = |s: u64| {
        fs.root(Request::Close {
            ino: f.ino,
            session: fs.sess(s),
        })
    };
    open(7).unwrap();
    open(8).unwrap();
    assert_eq!(fs.status().3, 1);
    fs.unlink(&r, ROOT, "f").unwrap();
    let orphan = fs.getattr(f.ino.0).unwrap();
    assert_eq!(orphan.nlink, 0);
    assert_eq!(fs.svc.purge_queue_len().unwrap(), 0);
    assert_eq!(fs.check().orphans, 1);
    fs.attr(
        &r,
        Request::ExtendSize {
            ino: f.ino,
            size: 100,
            mtime_ns: T0,
        },
    )
    .unwrap();
    close(7).unwrap();
    assert!(fs.getattr(f.ino.0).is_ok());
    close(8).unwrap();
    assert_eq!(code(fs.getattr(f.ino.0)), ErrorCode::StaleHandle);
    assert_eq!(fs.svc.purge_queue_len().unwrap(), 1);
    assert_eq!(code(close(8)), ErrorCode::BadHandle);
    assert_eq!(code(open(9)), ErrorCode::StaleHandle);
    assert_eq!(fs.status().3, 0);
    fs.check();
}

#[test]
fn orphans_are_kept_for_the_grace_period_after_a_restart_then_purged() {
    let mut fs = Fs::new();
    let r = Cred::root();
    let f = fs.create(&r, ROOT, "f", 0o644).unwrap();
    fs.root(Request::Open {
        ino: f.ino,
        session: fs.sess(1),
        read: true,
        write: false,
    })
    .unwrap();
    fs.unlink(&r, ROOT, "f").unwrap();
    // A short lease, so that the grace period after the restart ends soon.
    fs.cluster.lease_ms = 300;
    fs.reopen();
    // The client of the previous life may still reclaim it: kept, and it can be
    // opened again (in a new session).
    assert_eq!(fs.getattr(f.ino.0).unwrap().nlink, 0);
    let rep = fs.check();
    assert_eq!((rep.orphans, rep.purge_pending), (1, 0));
    fs.root(Request::Open {
        ino: f.ino,
        session: fs.sess(2),
        read: true,
        write: false,
    })
    .unwrap();
    // Reclaimed: its last close purges it, as before the restart.
    fs.root(Request::Close {
        ino: f.ino,
        session: fs.sess(2),
    })
    .unwrap();
    assert_eq!(code(fs.getattr(f.ino.0)), ErrorCode::StaleHandle);
    // An orphan nobody reclaims goes when the grace period ends.
    let g = fs.create(&r, ROOT, "g", 0o644).unwrap();
    fs.root(Request::Open {
        ino: g.ino,
        session: fs.sess(3),
        read: true,
        write: false,
    })
    .unwrap();
    fs.unlink(&r, ROOT, "g").unwrap();
    fs.reopen();
    assert_eq!(fs.getattr(g.ino.0).unwrap().nlink, 0);
    std::thread::sleep(std::time::Duration::from_millis(400));
    // The next request ends the grace period; the reap is committed with the next batch.
    fs.mkdir(&r, ROOT, "after-grace", 0o755).unwrap();
    let rep = fs.check();
    assert_eq!(rep.orphans, 0, "{rep:?}");
    assert_eq!(code(fs.getattr(g.ino.0)), ErrorCode::StaleHandle);
}

#[test]
fn symlinks_fifo_and_resolve() {
    let fs = Fs::new();
    let r = Cred::root();
    let a = fs.mkdir(&r, ROOT, "a", 0o755).unwrap().ino.0;
    let b = fs.mkdir(&r, a, "b", 0o755).unwrap().ino.0;
    let f = fs.create(&r, b, "f", 0o644).unwrap();
    let sym = |p: u64, n: &str, t: &str| {
        fs.attr(
            &r,
            Request::Symlink {
                parent: InodeId(p),
                name: n.into(),
                target: t.into(),
            },
        )
    };
    let l = sym(ROOT, "abs", "/a/b").unwrap();
    assert_eq!((l.ftype, l.size), (FileType::Symlink, 4));
    assert_eq!(
        fs.root(Request::Readlink { ino: l.ino }).unwrap(),
        Response::Target("/a/b".into())
    );
    assert_eq!(
        code(fs.root(Request::Readlink { ino: f.ino })),
        ErrorCode::InvalidArgument
    );
    sym(a, "rel", "b/f").unwrap();
    sym(ROOT, "loop1", "loop2").unwrap();
    sym(ROOT, "loop2", "loop1").unwrap();
    assert_eq!(fs.resolve(&r, "/", true).unwrap().ino.0, ROOT);
    assert_eq!(fs.resolve(&r, "//a///b/./f", true).unwrap().ino, f.ino);
    assert_eq!(fs.resolve(&r, "/abs/f", false).unwrap().ino, f.ino);
    assert_eq!(fs.resolve(&r, "/abs", false).unwrap().ino, l.ino);
    assert_eq!(fs.resolve(&r, "/abs", true).unwrap().ino.0, b);
    assert_eq!(fs.resolve(&r, "/a/rel", true).unwrap().ino, f.ino);
    assert_eq!(
        fs.resolve(&r, "/../../a/b/../b/f", true).unwrap().ino,
        f.ino
    );
    assert_eq!(fs.resolve(&r, "/abs/../b", true).unwrap().ino.0, b);
    assert_eq!(code(fs.resolve(&r, "/loop1", true)), ErrorCode::Loop);
    assert_eq!(
        fs.resolve(&r, "/loop1", false).unwrap().ftype,
        FileType::Symlink
    );
    assert_eq!(code(fs.resolve(&r, "/a/b/f/x", true)), ErrorCode::NotDir);
    assert_eq!(code(fs.resolve(&r, "/a/b/f/", true)), ErrorCode::NotDir);
    assert_eq!(code(fs.resolve(&r, "/a/nope", true)), ErrorCode::NotFound);
    let fifo = fs
        .attr(
            &r,
            Request::Mknod {
                parent: InodeId(ROOT),
                name: "p".into(),
                mode: 0o600,
                ftype: FileType::Fifo,
                rdev: 0,
            },
        )
        .unwrap();
    assert_eq!((fifo.ftype, fifo.layout), (FileType::Fifo, None));
    let mknod = |cred: &Cred, name: &str, ftype, rdev| {
        fs.attr(
            cred,
            Request::Mknod {
                parent: InodeId(ROOT),
                name: name.into(),
                mode: 0o640,
                ftype,
                rdev,
            },
        )
    };
    // A regular file is made by Create; a FIFO or socket has no device number.
    assert_eq!(
        code(mknod(&r, "q", FileType::File, 0)),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        code(mknod(&r, "q", FileType::Fifo, 5)),
        ErrorCode::InvalidArgument
    );
    let sock = mknod(&r, "s", FileType::Socket, 0).unwrap();
    assert_eq!(
        (sock.ftype, sock.mode, sock.rdev),
        (FileType::Socket, 0o640, 0)
    );
    let rdev = stripefs_wire::make_rdev(8, 17);
    let blk = mknod(&r, "b", FileType::BlockDev, rdev).unwrap();
    assert_eq!(
        (blk.ftype, blk.rdev, blk.size),
        (FileType::BlockDev, rdev, 0)
    );
    let chr = mknod(&r, "c", FileType::CharDev, 0x103).unwrap();
    assert_eq!(fs.getattr(chr.ino.0).unwrap().rdev, 0x103);
    // Only root makes device nodes; anyone with write access to the directory makes
    // FIFOs and sockets.
    let open_root = Request::SetAttr {
        ino: InodeId(ROOT),
        attrs: SetAttrs {
            mode: Some(0o777),
            ..SetAttrs::default()
        },
    };
    fs.attr(&r, open_root).unwrap();
    let user = Cred {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    };
    for t in [FileType::BlockDev, FileType::CharDev] {
        assert_eq!(code(mknod(&user, "u", t, 1)), ErrorCode::NotPermitted);
    }
    assert_eq!(mknod(&user, "us", FileType::Socket, 0).unwrap().uid, 1000);
    for n in ["p", "s", "b", "c", "us"] {
        fs.unlink(&r, ROOT, n).unwrap();
    }
    fs.unlink(&r, ROOT, "abs").unwrap();
    assert_eq!(fs.svc.purge_queue_len().unwrap(), 0);
    fs.check();
}

#[test]
fn readdir_pagination_10000() {
    let fs = Fs::new();
    let r = Cred::root();
    let d = fs.mkdir(&r, ROOT, "big", 0o755).unwrap().ino.0;
    let mut names: Vec<String> = (0..10_000)
        .map(|i| format!("file-{i:05}-{}", i * 7919 % 10_007))
        .collect();
    std::thread::scope(|s| {
        for chunk in names.chunks(2500) {
            let fs = &fs;
            s.spawn(move || {
                for n in chunk {
                    fs.create(&Cred::root(), d, n, 0o644).unwrap();
                }
            });
        }
    });
    names.sort();
    let t = std::time::Instant::now();
    assert_eq!(fs.list(d, 1000), names);
    assert!(t.elapsed().as_secs() < 5, "listing took {:?}", t.elapsed());
    assert_eq!(fs.list(d, 4096), names);
    let Response::Entries { entries, done } = fs
        .root(Request::ReadDir {
            ino: InodeId(d),
            after: names[9998].clone(),
            limit: 10,
        })
        .unwrap()
    else {
        panic!()
    };
    assert_eq!((entries.len(), done), (1, true));
    assert_eq!(
        code(fs.root(Request::ReadDir {
            ino: InodeId(d),
            after: String::new(),
            limit: 0
        })),
        ErrorCode::InvalidArgument
    );
    assert_eq!(fs.check().files, 10_000);
}

#[test]
fn layout_inheritance_and_rotation() {
    let fs = Fs::with_cluster(cluster(4));
    let r = Cred::root();
    // Cluster defaults: all servers, 1 MiB; the start rotates by one per file.
    let starts: Vec<u32> = (0..8)
        .map(|i| {
            let l = fs
                .create(&r, ROOT, &format!("f{i}"), 0o644)
                .unwrap()
                .layout
                .unwrap();
            assert_eq!((l.stripe_size_bytes, l.servers.len()), (1 << 20, 4));
            l.servers[0].0
        })
        .collect();
    assert_eq!(starts, vec![0, 1, 2, 3, 0, 1, 2, 3]);
    let d = fs.mkdir(&r, ROOT, "d", 0o755).unwrap();
    let hint = LayoutHint {
        stripe_size_bytes: Some(65536),
        stripe_count: Some(2),
        start_server: None,
        ..LayoutHint::default()
    };
    let d2 = fs
        .attr(
            &r,
            Request::SetLayout {
                ino: d.ino,
                hint: hint.clone(),
            },
        )
        .unwrap();
    assert_eq!(d2.dir_layout, hint);
    // Subdirectories inherit; hint fields override per field.
    let sub = fs.mkdir(&r, d.ino.0, "sub", 0o755).unwrap();
    assert_eq!(sub.dir_layout, hint);
    let f = fs
        .create(&r, sub.ino.0, "f", 0o644)
        .unwrap()
        .layout
        .unwrap();
    assert_eq!((f.stripe_size_bytes, f.servers.len()), (65536, 2));
    assert_eq!(f.servers[1].0, (f.servers[0].0 + 1) % 4);
    let g = |count| {
        fs.attr(
            &r,
            Request::Create {
                parent: sub.ino,
                name: "g".into(),
                mode: 0o644,
                exclusive: true,
                layout: LayoutHint {
                    stripe_size_bytes: None,
                    stripe_count: Some(count),
                    start_server: None,
                    ..LayoutHint::default()
                },
            },
        )
    };
    // More stripes than servers is refused, not quietly cut down.
    assert_eq!(code(g(9)), ErrorCode::InvalidArgument);
    let g = g(4).unwrap().layout.unwrap();
    assert_eq!((g.stripe_size_bytes, g.servers.len()), (65536, 4));
    // SetLayout on a file: only while empty.
    let fa = fs.lookup(sub.ino.0, "f").unwrap();
    let one = LayoutHint {
        stripe_size_bytes: None,
        stripe_count: Some(1),
        start_server: None,
        ..LayoutHint::default()
    };
    let fa2 = fs
        .attr(
            &r,
            Request::SetLayout {
                ino: fa.ino,
                hint: one.clone(),
            },
        )
        .unwrap()
        .layout
        .unwrap();
    assert_eq!((fa2.stripe_size_bytes, fa2.servers.len()), (65536, 1));
    fs.attr(
        &r,
        Request::ExtendSize {
            ino: fa.ino,
            size: 10,
            mtime_ns: T0,
        },
    )
    .unwrap();
    let e = fs
        .attr(
            &r,
            Request::SetLayout {
                ino: fa.ino,
                hint: one,
            },
        )
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    assert!(e.message.contains("file has data"), "{e}");
    let bad = LayoutHint {
        stripe_size_bytes: Some(1000),
        stripe_count: None,
        start_server: None,
        ..LayoutHint::default()
    };
    assert_eq!(
        code(fs.attr(
            &r,
            Request::SetLayout {
                ino: d.ino,
                hint: bad
            }
        )),
        ErrorCode::InvalidArgument
    );
    fs.check();
}

#[test]
fn set_attr_and_sizes() {
    let fs = Fs::new();
    let r = Cred::root();
    let f = fs.create(&r, ROOT, "f", 0o644).unwrap();
    fs.clock.set(T0 + 10);
    let a = fs
        .attr(
            &r,
            Request::ExtendSize {
                ino: f.ino,
                size: 500,
                mtime_ns: T0 + 7,
            },
        )
        .unwrap();
    assert_eq!((a.size, a.mtime_ns), (500, T0 + 7));
    let a = fs
        .attr(
            &r,
            Request::ExtendSize {
                ino: f.ino,
                size: 100,
                mtime_ns: T0 + 3,
            },
        )
        .unwrap();
    assert_eq!((a.size, a.mtime_ns), (500, T0 + 7));
    let set = |c: &Cred, attrs: SetAttrs| fs.attr(c, Request::SetAttr { ino: f.ino, attrs });
    let a = set(
        &r,
        SetAttrs {
            size: Some(42),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!((a.size, a.mtime_ns, a.ctime_ns), (42, T0 + 10, T0 + 10));
    let a = set(
        &r,
        SetAttrs {
            mode: Some(0o100600),
            uid: Some(5),
            gid: Some(6),
            atime: Some(SetTime::AtNs(3)),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!((a.mode, a.uid, a.gid, a.atime_ns), (0o600, 5, 6, 3));
    let d = fs.mkdir(&r, ROOT, "d", 0o755).unwrap();
    assert_eq!(
        code(fs.attr(
            &r,
            Request::SetAttr {
                ino: d.ino,
                attrs: SetAttrs {
                    size: Some(1),
                    ..Default::default()
                }
            }
        )),
        ErrorCode::IsDir
    );
    assert_eq!(
        code(fs.attr(
            &r,
            Request::ExtendSize {
                ino: d.ino,
                size: 1,
                mtime_ns: 0
            }
        )),
        ErrorCode::IsDir
    );
    fs.check();
}

#[test]
fn extend_size_from_8_threads() {
    let fs = Fs::new();
    let f = fs.create(&Cred::root(), ROOT, "f", 0o644).unwrap();
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let fs = &fs;
            s.spawn(move || {
                // Interleaved blocks, sent in a shuffled order per thread.
                for i in (0..200u64).rev() {
                    let end = (i * 8 + t + 1) * 4096;
                    fs.attr(
                        &Cred::root(),
                        Request::ExtendSize {
                            ino: f.ino,
                            size: end,
                            mtime_ns: T0 + end as i64,
                        },
                    )
                    .unwrap();
                }
            });
        }
    });
    let a = fs.getattr(f.ino.0).unwrap();
    assert_eq!(a.size, 1600 * 4096);
    assert_eq!(a.mtime_ns, T0 + 1600 * 4096);
}

#[test]
fn bad_requests_do_not_panic() {
    let fs = Fs::new();
    let r = Cred::root();
    let long = "x".repeat(300);
    assert_eq!(
        code(fs.create(&r, ROOT, &long, 0o644)),
        ErrorCode::NameTooLong
    );
    assert_eq!(code(fs.create(&r, 0, "a", 0o644)), ErrorCode::StaleHandle);
    assert_eq!(
        code(fs.create(&r, u64::MAX, "a", 0o644)),
        ErrorCode::StaleHandle
    );
    assert_eq!(
        code(fs.root(Request::ReadDir {
            ino: InodeId(u64::MAX),
            after: String::new(),
            limit: 5
        })),
        ErrorCode::StaleHandle
    );
    assert_eq!(
        code(fs.root(Request::Access {
            ino: InodeId(ROOT),
            mask: 99
        })),
        ErrorCode::InvalidArgument
    );
    assert_eq!(code(fs.resolve(&r, "", true)), ErrorCode::NotFound);
    assert_eq!(
        code(fs.root(Request::Rmdir {
            parent: InodeId(ROOT),
            name: "..".into()
        })),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        code(fs.root(Request::Close {
            ino: InodeId(ROOT),
            session: fs.sess(1)
        })),
        ErrorCode::BadHandle
    );
    fs.check();
}

fn create_open(fs: &Fs, name: &str, mode: u32, exclusive: bool, write: bool) -> Request {
    Request::CreateOpen {
        parent: InodeId(ROOT),
        name: name.into(),
        mode,
        exclusive,
        layout: LayoutHint::default(),
        session: fs.sess(42),
        read: true,
        write,
    }
}

#[test]
fn create_open_counts_the_open_and_lets_the_creator_write() {
    let fs = Fs::new();
    let me = user(1000, 100);
    let dir = fs.mkdir(&Cred::root(), ROOT, "pub", 0o777).unwrap();
    let req =
        |name: &str, mode, exclusive, write| match create_open(&fs, name, mode, exclusive, write) {
            Request::CreateOpen {
                name,
                mode,
                exclusive,
                layout,
                session,
                read,
                write,
                ..
            } => Request::CreateOpen {
                parent: dir.ino,
                name,
                mode,
                exclusive,
                layout,
                session,
                read,
                write,
            },
            _ => unreachable!(),
        };
    // open(O_CREAT|O_RDWR, 0444) succeeds for the creator, as POSIX says.
    let f = fs.attr(&me, req("ro", 0o444, true, true)).unwrap();
    assert_eq!((f.mode, f.uid), (0o444, 1000));
    // Opening it again for writing is refused: the mode now applies.
    assert_eq!(
        code(fs.attr(&me, req("ro", 0o444, false, true))),
        ErrorCode::PermissionDenied
    );
    assert_eq!(
        code(fs.attr(&me, req("ro", 0o444, true, false))),
        ErrorCode::Exists
    );
    // The open was counted: unlinking keeps the inode until Close.
    let unlink = Request::Unlink {
        parent: dir.ino,
        name: "ro".into(),
    };
    call(&fs.svc, &me, unlink).unwrap();
    assert_eq!(fs.getattr(f.ino.0).unwrap().nlink, 0);
    let close = Request::Close {
        ino: f.ino,
        session: fs.sess(42),
    };
    call(&fs.svc, &me, close).unwrap();
    // An existing directory is not opened as a file.
    assert_eq!(
        code(fs.attr(&Cred::root(), create_open(&fs, "pub", 0o644, false, false))),
        ErrorCode::IsDir
    );
    fs.check();
}

/// ReadDirPlus lists as ReadDir does, each entry with the attributes a Lookup of its
/// name gives, page by page to the end; it needs read and search permission on the
/// directory (read alone lists names with ReadDir).
#[test]
fn readdir_plus_gives_each_entry_its_lookup_attributes() {
    let fs = Fs::new();
    let r = Cred::root();
    let d = fs.mkdir(&r, ROOT, "d", 0o755).unwrap().ino.0;
    let mut names: Vec<String> = (0..300).map(|i| format!("e{i:03}")).collect();
    for (i, n) in names.iter().enumerate() {
        if i % 10 == 0 {
            fs.mkdir(&r, d, n, 0o700).unwrap();
        } else {
            fs.create(&r, d, n, 0o640).unwrap();
        }
    }
    names.sort();
    let mut got: Vec<(String, Attr)> = Vec::new();
    loop {
        let after = got.last().map(|(n, _)| n.clone()).unwrap_or_default();
        let Response::EntriesPlus { entries, done } = fs
            .root(Request::ReadDirPlus {
                ino: InodeId(d),
                after,
                limit: 64,
            })
            .unwrap()
        else {
            panic!()
        };
        assert!(entries.len() <= 64);
        got.extend(entries);
        if done {
            break;
        }
    }
    assert_eq!(
        got.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
        names
    );
    for (n, a) in &got {
        assert_eq!(*a, fs.lookup(d, n).unwrap(), "{n}");
    }
    // Read without search: names only.
    let bob = Cred {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    };
    let ro = fs.mkdir(&r, ROOT, "ro", 0o744).unwrap().ino.0;
    fs.create(&r, ro, "x", 0o644).unwrap();
    let list = |req| fs.call(&bob, req);
    assert!(list(Request::ReadDir {
        ino: InodeId(ro),
        after: String::new(),
        limit: 10
    })
    .is_ok());
    assert_eq!(
        code(list(Request::ReadDirPlus {
            ino: InodeId(ro),
            after: String::new(),
            limit: 10
        })),
        ErrorCode::PermissionDenied
    );
    assert_eq!(
        code(fs.root(Request::ReadDirPlus {
            ino: InodeId(d),
            after: String::new(),
            limit: 0
        })),
        ErrorCode::InvalidArgument
    );
    // Long names fill the byte budget before the entry limit: the page ends early, and
    // the listing goes on from there.
    let long = fs.mkdir(&r, ROOT, "long", 0o755).unwrap().ino.0;
    let n = MAX_READDIR_ENTRIES as usize;
    for i in 0..n {
        fs.create(&r, long, &format!("{i:05}{}", "x".repeat(245)), 0o644)
            .unwrap();
    }
    let mut seen = 0;
    let mut after = String::new();
    let mut pages = 0;
    loop {
        let Response::EntriesPlus { entries, done } = fs
            .root(Request::ReadDirPlus {
                ino: InodeId(long),
                after: after.clone(),
                limit: MAX_READDIR_ENTRIES,
            })
            .unwrap()
        else {
            panic!()
        };
        let body = encode_body(&Response::EntriesPlus {
            entries: entries.clone(),
            done,
        });
        assert!(body.len() <= READDIRPLUS_BODY_BYTES + 16, "{}", body.len());
        seen += entries.len();
        pages += 1;
        after = entries.last().map(|(n, _)| n.clone()).unwrap_or_default();
        if done {
            break;
        }
    }
    assert_eq!(seen, n);
    assert!(pages > 1, "{n} long names came in one page");
}

/// A name is looked up only with search permission on its directory, as Linux does:
/// EACCES comes before ENOENT and EEXIST, and EEXIST before the write check. (A mount's
/// kernel checks first; a native client, the interception library, must get the same.)
#[test]
fn search_permission_comes_before_the_lookup() {
    let fs = Fs::new();
    let r = Cred::root();
    let user = Cred {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    };
    // Root's 0700 directory: nothing in it can be looked up by the user.
    let private = fs.mkdir(&r, ROOT, "private", 0o700).unwrap().ino.0;
    fs.create(&r, private, "f", 0o644).unwrap();
    let unlink = fs.attr(
        &user,
        Request::Unlink {
            parent: InodeId(private),
            name: "missing".into(),
        },
    );
    assert_eq!(code(unlink), ErrorCode::PermissionDenied);
    let rmdir = fs.attr(
        &user,
        Request::Rmdir {
            parent: InodeId(private),
            name: "missing".into(),
        },
    );
    assert_eq!(code(rmdir), ErrorCode::PermissionDenied);
    assert_eq!(
        code(fs.mkdir(&user, private, "f", 0o755)),
        ErrorCode::PermissionDenied
    );
    let rename = fs.attr(
        &user,
        Request::Rename {
            src_parent: InodeId(private),
            src_name: "missing".into(),
            dst_parent: InodeId(ROOT),
            dst_name: "x".into(),
            noreplace: false,
        },
    );
    assert_eq!(code(rename), ErrorCode::PermissionDenied);
    // Root's 0755 directory: searchable, not writable: an existing name is EEXIST.
    let shared = fs.mkdir(&r, ROOT, "shared", 0o755).unwrap().ino.0;
    fs.create(&r, shared, "f", 0o644).unwrap();
    assert_eq!(code(fs.mkdir(&user, shared, "f", 0o755)), ErrorCode::Exists);
    assert_eq!(
        code(fs.mkdir(&user, shared, "new", 0o755)),
        ErrorCode::PermissionDenied
    );
    fs.check();
}
