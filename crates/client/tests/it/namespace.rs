//! Namespace calls by path and by inode.

use crate::common;

use common::{hint, Cluster};
use stripefs_client::{ErrorCode, FileType, InodeId, OpenOptions};
use stripefs_wire::Features;

#[test]
fn bad_names_are_refused() {
    let cl = Cluster::start();
    let c = cl.client();
    for bad in ["a/b", "a\0b", "..", ".", ""] {
        assert_eq!(
            c.mkdir_at(InodeId::ROOT, bad, 0o755).unwrap_err().code,
            ErrorCode::InvalidArgument,
            "{bad:?}"
        );
        assert_eq!(
            c.lookup(InodeId::ROOT, bad).unwrap_err().code,
            ErrorCode::InvalidArgument,
            "{bad:?}"
        );
        let opts = OpenOptions::create_truncate();
        assert_eq!(
            c.create_at(InodeId::ROOT, bad, &opts).unwrap_err().code,
            ErrorCode::InvalidArgument,
            "{bad:?}"
        );
    }
    for bad in ["/a/../b", "/..", "/x\0y", "/"] {
        assert_eq!(
            c.mkdir(bad, 0o755).unwrap_err().code,
            ErrorCode::InvalidArgument,
            "{bad:?}"
        );
    }
    assert_eq!(
        c.stat("/a/../b").unwrap_err().code,
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        c.lookup(InodeId::ROOT, &"x".repeat(256)).unwrap_err().code,
        ErrorCode::NameTooLong
    );
}

#[test]
fn tree_operations() {
    let cl = Cluster::start();
    let c = cl.client();
    c.mkdir("/d", 0o755).unwrap();
    c.mkdir_all("/d/e/f", 0o755).unwrap();
    assert_eq!(c.mkdir("/d", 0o755).unwrap_err().code, ErrorCode::Exists);
    c.write_file("/d/file", b"hello", 0o644).unwrap();
    assert_eq!(c.read_file("/d/file").unwrap(), b"hello");
    c.link("/d/file", "/d/hard").unwrap();
    assert_eq!(c.stat("/d/hard").unwrap().nlink, 2);
    c.symlink("/d/file", "/d/sym").unwrap();
    assert_eq!(c.readlink("/d/sym").unwrap(), "/d/file");
    assert_eq!(c.lstat("/d/sym").unwrap().ftype, FileType::Symlink);
    assert_eq!(c.stat("/d/sym").unwrap().ftype, FileType::File);
    c.rename("/d/hard", "/d/e/moved").unwrap();
    let names: Vec<String> = c
        .readdir("/d")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec!["e", "file", "sym"]);
    c.chmod("/d/file", 0o600).unwrap();
    assert_eq!(c.stat("/d/file").unwrap().mode & 0o777, 0o600);
    c.unlink("/d/e/moved").unwrap();
    assert_eq!(c.stat("/d/file").unwrap().nlink, 1);
    assert_eq!(c.rmdir("/d").unwrap_err().code, ErrorCode::NotEmpty);
    assert_eq!(c.stat("/nope/x").unwrap_err().code, ErrorCode::NotFound);
    let err = c.stat("/d/missing").unwrap_err();
    assert!(err.message.contains("/d/missing"), "{err}");
    assert_eq!(
        c.open("/d", &OpenOptions::new()).unwrap_err().code,
        ErrorCode::IsDir
    );
    let excl = OpenOptions::create_truncate().exclusive(true);
    assert_eq!(
        c.open("/d/file", &excl).unwrap_err().code,
        ErrorCode::Exists
    );
}

#[test]
fn readdir_pages_through_large_directories() {
    let cl = Cluster::start();
    let c = cl.client();
    let d = c.mkdir("/big", 0o755).unwrap();
    // More than two pages; made from 8 threads so that group commit batches them.
    let n = 2100;
    std::thread::scope(|s| {
        for t in 0..8 {
            let c = c.clone();
            s.spawn(move || {
                for i in (t..n).step_by(8) {
                    c.mknod_at(d.ino, &format!("f{i:05}"), 0o644, FileType::Fifo, 0)
                        .unwrap();
                }
            });
        }
    });
    let entries = c.readdir("/big").unwrap();
    assert_eq!(entries.len(), n);
    let mut names: Vec<_> = entries.iter().map(|e| e.name.clone()).collect();
    names.dedup();
    assert_eq!(names.len(), n);
}

#[test]
fn layouts_and_status() {
    let cl = Cluster::start();
    let c = cl.client();
    c.mkdir("/striped", 0o755).unwrap();
    c.set_stripe("/striped", hint(128 << 10, 2)).unwrap();
    c.write_file("/striped/x", b"abc", 0o644).unwrap();
    let l = c.get_layout("/striped/x").unwrap();
    assert_eq!(l.stripe_size_bytes, 128 << 10);
    assert_eq!(l.servers.len(), 2);
    let fs = c.statfs().unwrap();
    assert_eq!(fs.data_servers, 4);
    assert_eq!(fs.targets, 8);
    assert!(fs.bytes_total > 0 && fs.bytes_free > 0);
    let ds = c.data_status(stripefs_client::ServerId(1)).unwrap();
    assert_eq!(ds.targets.len(), 2);
    let ms = c.meta_status().unwrap();
    assert!(ms.files >= 1 && ms.dirs >= 2, "{ms:?}");
}

/// Close is deferred to ride with the client's next metadata request: a request made
/// right after the close sees the file closed, and an idle client's close reaches the
/// server within the pool's flush delay, as does a dropped client's.
#[test]
fn deferred_closes_reach_the_server() {
    let cl = Cluster::start();
    let c = cl.client();
    let other = cl.client();
    let open_files = |c: &stripefs_client::Client| c.meta_status().unwrap().open_files;
    let all_closed = |c: &stripefs_client::Client, what: &str| {
        let t0 = std::time::Instant::now();
        while open_files(c) != 0 {
            assert!(t0.elapsed().as_secs() < 5, "{what}");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    };
    let f = c.create("/a", 0o644).unwrap();
    assert_eq!(open_files(&other), 1);
    f.close().unwrap();
    // The next request on the same connection carries the Close.
    assert_eq!(open_files(&c), 0);
    // An idle connection: the flusher sends it.
    let f = c.create("/b", 0o644).unwrap();
    f.close().unwrap();
    all_closed(&other, "the deferred Close never arrived");
    // Many closes at once, then the client goes away.
    let files: Vec<_> = (0..200)
        .map(|i| c.create(&format!("/m{i}"), 0o644).unwrap())
        .collect();
    assert_eq!(open_files(&other), 200);
    drop(files);
    drop(c);
    all_closed(&other, "closes of a dropped client were lost");
}

/// A truncate that the metadata server refuses leaves every byte in place: the caller's
/// write permission is checked before any data server cuts its pieces. Through a handle
/// opened for writing, a truncate is judged by the handle (POSIX ftruncate), even when
/// the file's mode no longer allows writing.
#[test]
fn refused_truncate_loses_no_data_and_ftruncate_follows_the_handle() {
    let cl = Cluster::start();
    let root = cl.client();
    let data: Vec<u8> = (0..300_000u32).map(|i| i as u8).collect();
    root.write_file("/kept", &data, 0o644).unwrap();
    let user = cl.client().with_cred(stripefs_client::Cred {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    });
    let e = user.truncate("/kept", 10).unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{e}");
    assert_eq!(root.read_file("/kept").unwrap(), data);

    root.setattr_ino(
        root.stat("/").unwrap().ino,
        stripefs_client::SetAttrs {
            mode: Some(0o777),
            ..Default::default()
        },
    )
    .unwrap();
    let opts = OpenOptions::create_new(0).read(true).write(true);
    let f = user.create_at(InodeId::ROOT, "mode0", &opts).unwrap();
    f.set_len(5000).unwrap();
    assert_eq!(f.attr().unwrap().size, 5000);
    f.close().unwrap();
    let e = user.truncate("/mode0", 1).unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{e}");
    assert_eq!(root.stat("/mode0").unwrap().size, 5000);
}

/// Extended attributes by path: set, read and list from another client, replace and
/// create modes, removal; a symlink's target is what a path names.
#[test]
fn extended_attributes_by_path() {
    let cl = Cluster::start();
    let (a, b) = (cl.client(), cl.client());
    a.write_file("/f", b"x", 0o644).unwrap();
    a.symlink("/f", "/l").unwrap();
    a.set_xattr("/f", "user.tag", b"blue", stripefs_client::XATTR_SET_ANY)
        .unwrap();
    assert_eq!(b.get_xattr("/l", "user.tag").unwrap(), b"blue");
    assert_eq!(b.list_xattr("/f").unwrap(), ["user.tag"]);
    let e = b
        .set_xattr("/f", "user.tag", b"red", stripefs_client::XATTR_SET_CREATE)
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Exists);
    b.set_xattr("/f", "user.tag", b"red", stripefs_client::XATTR_SET_REPLACE)
        .unwrap();
    assert_eq!(a.get_xattr("/f", "user.tag").unwrap(), b"red");
    a.remove_xattr("/f", "user.tag").unwrap();
    let e = b.get_xattr("/f", "user.tag").unwrap_err();
    assert_eq!(e.code, ErrorCode::NoAttr);
    assert!(e.message.contains("/f"), "{e}");
}

/// An open by path is one round trip (OpenPath): it follows symlinks as open(2) does,
/// answers each failure as the separate resolve and open did, counts the open (the file
/// outlives its unlink while open), and checks the caller's access on the way and at
/// the end.
#[test]
fn opens_by_path_resolve_and_count_in_one_round_trip() {
    let cl = Cluster::start();
    let root = cl.client();
    root.mkdir_all("/p/q", 0o755).unwrap();
    root.write_file("/p/q/f", b"by path", 0o644).unwrap();
    root.symlink("/p/q/f", "/p/link").unwrap();
    root.symlink("q", "/p/rel").unwrap();
    root.symlink("/p/none", "/p/dangling").unwrap();

    let read = |c: &stripefs_client::Client, p: &str| -> Result<Vec<u8>, ErrorCode> {
        let f = c.open(p, &OpenOptions::read_only()).map_err(|e| e.code)?;
        let mut buf = vec![0u8; 64];
        let n = f.read_at(0, &mut buf).unwrap();
        buf.truncate(n);
        Ok(buf)
    };
    for p in ["/p/q/f", "/p/link", "/p/rel/f", "/p/./q/f"] {
        assert_eq!(read(&root, p).unwrap(), b"by path", "{p}");
    }
    // One request to the metadata server: the status calls around it count themselves.
    let requests = || root.meta_status().unwrap().counters.requests;
    let idle = {
        let r0 = requests();
        requests() - r0
    };
    let r0 = requests();
    let f = root.open("/p/link", &OpenOptions::read_only()).unwrap();
    assert_eq!(
        requests() - r0,
        idle + 1,
        "an open by path took more than one request"
    );
    drop(f);
    assert_eq!(read(&root, "/p/q/missing"), Err(ErrorCode::NotFound));
    assert_eq!(read(&root, "/p/dangling"), Err(ErrorCode::NotFound));
    assert_eq!(read(&root, "/p/q/f/x"), Err(ErrorCode::NotDir));
    assert_eq!(read(&root, "/p/q"), Err(ErrorCode::IsDir));
    let err = root
        .open("/p/q/missing", &OpenOptions::read_only())
        .unwrap_err();
    assert!(err.message.contains("/p/q/missing"), "{err}");

    // The open is counted: the file is read after its last name is gone.
    let f = root.open("/p/link", &OpenOptions::read_only()).unwrap();
    root.unlink("/p/q/f").unwrap();
    let mut buf = [0u8; 7];
    assert_eq!(f.read_at(0, &mut buf).unwrap(), 7);
    assert_eq!(&buf, b"by path");
    f.close().unwrap();

    // Access: the search permission of each directory, then the file's mode.
    root.write_file("/p/q/secret", b"s", 0o600).unwrap();
    root.write_file("/p/open", b"o", 0o644).unwrap();
    let user = cl.client().with_cred(stripefs_client::Cred {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    });
    assert_eq!(read(&user, "/p/q/secret"), Err(ErrorCode::PermissionDenied));
    assert_eq!(read(&user, "/p/open").unwrap(), b"o");
    let w = OpenOptions::new().write(true);
    assert_eq!(
        user.open("/p/open", &w).unwrap_err().code,
        ErrorCode::PermissionDenied
    );
    root.chmod("/p/q", 0o700).unwrap();
    root.write_file("/p/q/g", b"g", 0o644).unwrap();
    assert_eq!(read(&user, "/p/q/g"), Err(ErrorCode::PermissionDenied));
}

/// Servers of an older build announce fewer protocol features (or none: they predate the
/// `Features` request). The client never sends them an operation they lack, which they
/// would refuse (counted in `refused`); it asks what they serve instead, with the same
/// answers: a listing with attributes from ReadDir and lookups, statfs from each data
/// server's status and the metadata server's.
#[test]
fn servers_without_a_feature_are_never_sent_it_and_answer_the_same() {
    let cases = [
        ("every feature", Some(Features::NONE)),
        ("no ReadDirPlus", Some(Features::READDIR_PLUS)),
        ("no Space", Some(Features::SPACE)),
        ("no Statfs", Some(Features::STATFS)),
        ("before features", None),
    ];
    let mut answers = Vec::new();
    for (what, lacks) in cases {
        let cl = Cluster::older(2, lacks);
        let c = cl.client();
        c.mkdir("/d", 0o755).unwrap();
        for (name, len) in [("a", 0usize), ("b", 5000), ("c", 70_000)] {
            c.write_file(&format!("/d/{name}"), &vec![7u8; len], 0o640)
                .unwrap();
        }
        c.mkdir("/d/sub", 0o700).unwrap();
        let dir = c.stat("/d").unwrap().ino;
        let (page, done) = c
            .readdir_plus_page(dir, "", 100)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(done, "{what}");
        let listed: Vec<(String, u64, u32)> = page
            .iter()
            .map(|(n, a)| (n.clone(), a.size, a.mode))
            .collect();
        let st = c.statfs().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(
            st.bytes_total > 0 && st.bytes_free <= st.bytes_total,
            "{what}: {st:?}"
        );
        assert_eq!(
            cl.refused.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "{what}: the client sent an operation the server lacks"
        );
        // The root, /d, its three files and /d/sub.
        assert_eq!(st.inodes, 6, "{what}: inodes in use");
        answers.push((what, listed));
    }
    let (first, expected) = &answers[0];
    assert_eq!(expected.len(), 4, "{first}: {expected:?}");
    for (what, listed) in &answers[1..] {
        assert_eq!(listed, expected, "{what} against {first}");
    }
}
