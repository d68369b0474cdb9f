//! Client sessions with leases on the metadata server (issue 12, item 10): opens are
//! counted per session; a session whose lease runs out without renewal is ended and its
//! opens released, so an unlinked file a vanished client held open is purged.

use crate::common;

use common::*;
use std::time::{Duration, Instant};
use stripefs_wire::*;

const LEASE_MS: u64 = 600;
const ROOT: u64 = 1;

fn fs() -> Fs {
    let mut c = cluster(1);
    c.lease_ms = LEASE_MS;
    Fs::with_cluster(c)
}

fn open(fs: &Fs, ino: InodeId, session: u64) -> Result<Response, WireError> {
    fs.root(Request::Open {
        ino,
        session,
        read: true,
        write: true,
    })
}

fn renew(fs: &Fs, session: u64) -> Result<Response, WireError> {
    fs.root(Request::SessionRenew { session })
}

/// Waits until `f` holds, at most `limit`.
fn until(limit: Duration, f: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    f()
}

#[test]
fn unlinked_file_of_a_lapsed_session_is_purged_after_the_lease() {
    let fs = fs();
    let r = Cred::root();
    let f = fs.create(&r, ROOT, "f", 0o644).unwrap();
    let s = fs.sess(1);
    open(&fs, f.ino, s).unwrap();
    fs.unlink(&r, ROOT, "f").unwrap();
    let opened = Instant::now();
    // The client vanishes: no renewal, no Close.
    assert!(
        until(Duration::from_millis(LEASE_MS * 10), || fs
            .getattr(f.ino.0)
            .is_err()),
        "inode still there {} ms after the lease ran out",
        LEASE_MS * 9
    );
    assert!(
        opened.elapsed() >= Duration::from_millis(LEASE_MS),
        "released before the lease ran out"
    );
    assert_eq!(code(fs.getattr(f.ino.0)), ErrorCode::StaleHandle);
    assert_eq!(fs.svc.purge_queue_len().unwrap(), 1);
    assert_eq!((fs.svc.sessions(), fs.svc.open_files()), (0, 0));
    // The client comes back: it is told, not served on released opens.
    let close = fs.root(Request::Close {
        ino: f.ino,
        session: s,
    });
    assert_eq!(code(close), ErrorCode::SessionExpired);
    assert_eq!(code(renew(&fs, s)), ErrorCode::SessionExpired);
    let g = fs.create(&r, ROOT, "g", 0o644).unwrap();
    let e = open(&fs, g.ino, s).unwrap_err();
    assert_eq!(e.code, ErrorCode::SessionExpired);
    assert!(e.message.contains("lease"), "{e}");
    fs.check();
}

#[test]
fn renewals_keep_a_long_open_alive_past_several_leases() {
    let fs = fs();
    let r = Cred::root();
    let f = fs.create(&r, ROOT, "f", 0o644).unwrap();
    let s = fs.sess(1);
    open(&fs, f.ino, s).unwrap();
    fs.unlink(&r, ROOT, "f").unwrap();
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(LEASE_MS * 5) {
        match renew(&fs, s).unwrap() {
            Response::Session { session, lease_ms } => {
                assert_eq!((session, lease_ms), (s, LEASE_MS))
            }
            other => panic!("{other:?}"),
        }
        std::thread::sleep(Duration::from_millis(LEASE_MS / 3));
    }
    assert_eq!(fs.getattr(f.ino.0).unwrap().nlink, 0, "kept while open");
    assert_eq!(fs.svc.open_files(), 1);
    fs.root(Request::Close {
        ino: f.ino,
        session: s,
    })
    .unwrap();
    assert_eq!(code(fs.getattr(f.ino.0)), ErrorCode::StaleHandle);
    fs.check();
}

#[test]
fn ending_a_session_releases_its_opens_at_once_and_only_its_own() {
    let fs = fs();
    let r = Cred::root();
    let f = fs.create(&r, ROOT, "f", 0o644).unwrap();
    let (a, b) = (fs.sess(1), fs.sess(2));
    open(&fs, f.ino, a).unwrap();
    open(&fs, f.ino, a).unwrap();
    open(&fs, f.ino, b).unwrap();
    fs.unlink(&r, ROOT, "f").unwrap();
    fs.root(Request::SessionEnd { session: a }).unwrap();
    assert!(fs.getattr(f.ino.0).is_ok(), "b still has it open");
    fs.root(Request::SessionEnd { session: b }).unwrap();
    assert_eq!(code(fs.getattr(f.ino.0)), ErrorCode::StaleHandle);
    // Ending an ended session is harmless; unknown sessions open nothing.
    fs.root(Request::SessionEnd { session: a }).unwrap();
    let create = Request::CreateOpen {
        parent: InodeId(ROOT),
        name: "new".into(),
        mode: 0o644,
        exclusive: true,
        layout: LayoutHint::default(),
        session: 12345,
        read: true,
        write: true,
    };
    assert_eq!(code(fs.root(create)), ErrorCode::SessionExpired);
    assert!(fs.lookup(ROOT, "new").is_err(), "refused before creating");
    fs.check();
}
