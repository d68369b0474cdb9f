//! Scoped tokens on a real cluster (server processes): a read-only token cannot write;
//! a token for /a cannot read /b, neither through the metadata server nor by asking a
//! data server directly for /b's objects; expired and revoked tokens are refused (also
//! after a restart); a collaborator's client file holds no secret; each refusal says why.

use crate::common;

use common::*;
use std::time::Duration;
use stripefs_rpc::token::TokenCred;
use stripefs_rpc::{ClusterConfig, Conn};
use stripefs_wire::{Cred, InodeId, Request, Response};

fn token(c: &Cluster, args: &[&str]) -> String {
    let out = c.ok(&[&["token", "create"], args].concat());
    out.lines()
        .last()
        .expect("the token is printed")
        .trim()
        .to_string()
}

fn setup() -> Cluster {
    let c = Cluster::up(2, 1, &[]);
    let dir = c.path().join("local");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("fa"), b"inside a\n").unwrap();
    std::fs::write(dir.join("fb"), vec![7u8; 300_000]).unwrap();
    for d in ["/a", "/a/sub", "/b"] {
        c.ok(&["mkdir", d]);
    }
    let local = |f: &str| dir.join(f).display().to_string();
    c.ok(&["put", &local("fa"), "/a/sub/f"]);
    c.ok(&["put", &local("fb"), "/b/g"]);
    c
}

#[test]
fn a_token_is_held_to_its_tree_and_mode() {
    let c = setup();
    let local = c.path().join("local/fa").display().to_string();
    // Read-only, through a client file that holds no secret.
    let ro_file = c.path().join("collaborator.toml");
    let ro = token(&c, &["--path", "/a", "--read-only", "--ttl", "1h"]);
    c.ok(&[
        "token",
        "create",
        "--path",
        "/a",
        "--read-only",
        "--client-file",
        &ro_file.display().to_string(),
    ]);
    let text = std::fs::read_to_string(&ro_file).unwrap();
    assert!(
        text.contains("token = \"sft1.") && !text.contains("secret"),
        "{text}"
    );
    let as_collab = |args: &[&str]| {
        std::process::Command::new(exe())
            .args(args)
            .env("STRIPEFS_CLUSTER", &ro_file)
            .output()
            .unwrap()
    };
    let out = as_collab(&["get", "/a/sub/f", "-"]);
    assert!(out.status.success(), "{}", text_of(&out));
    assert_eq!(out.stdout, b"inside a\n");
    let out = as_collab(&["put", &local, "/a/new"]);
    assert!(!out.status.success());
    assert!(text_of(&out).contains("read-only"), "{}", text_of(&out));
    refused(&c, &["rm", "--token", &ro, "/a/sub/f"], "read-only");
    refused(&c, &["mkdir", "--token", &ro, "/a/x"], "read-only");

    // Read-write for /a: writes inside, nothing outside.
    let rw = token(&c, &["--path", "/a", "--ttl", "1h"]);
    c.ok(&["put", "--token", &rw, &local, "/a/sub/new"]);
    assert_eq!(c.ok(&["get", "/a/sub/new", "-"]), "inside a\n");
    refused(
        &c,
        &["get", "--token", &rw, "/b/g", "-"],
        "outside its tree",
    );
    refused(&c, &["ls", "--token", &rw, "/"], "outside its tree");
    refused(
        &c,
        &["put", "--token", &rw, &local, "/b/new"],
        "outside its tree",
    );
    refused(
        &c,
        &["mv", "--token", &rw, "/a/sub/new", "/b/moved"],
        "outside its tree",
    );
    // A prefix of the name is not the tree.
    c.ok(&["mkdir", "/ab"]);
    refused(&c, &["ls", "--token", &rw, "/ab"], "outside its tree");

    // Straight to a data server, for /b/g's objects, with the /a token.
    let cfg = ClusterConfig::load(&c.cluster_file()).unwrap();
    let admin = stripefs_client::Client::connect(&cfg).unwrap();
    let ino = admin.stat("/b/g").unwrap().ino;
    let a_ino = admin.stat("/a/sub/f").unwrap().ino;
    let cred = TokenCred::parse(&rw).unwrap();
    for d in &cfg.data {
        let mut conn = Conn::connect_token(&d.addr, &cred, Duration::from_secs(5)).unwrap();
        let mut buf = vec![0u8; 64 << 10];
        let read = |fid: InodeId| Request::Read {
            fid,
            unit: cfg.defaults.stripe_size_bytes,
            offset: 0,
            len: 64 << 10,
        };
        let err = conn
            .call(&Cred::root(), read(ino), &[], &mut buf)
            .expect_err("a data server served /b to a token for /a");
        assert!(err.message.contains("outside its tree"), "{err}");
        // The server's own questions are refused too: listing its objects needs the
        // secret.
        let err = conn
            .call(
                &Cred::root(),
                Request::ListObjects {
                    after: None,
                    limit: 10,
                },
                &[],
                &mut [],
            )
            .expect_err("a token listed objects");
        assert!(err.message.contains("cluster secret"), "{err}");
    }
    // Nor does a resolve through a symlink that leads out get past the metadata server
    // (".." is refused by every server anyway).
    admin.symlink("/b", "/a/out").unwrap();
    let mut meta = Conn::connect_token(&cfg.meta_addr, &cred, Duration::from_secs(5)).unwrap();
    for path in ["/a/out", "/a/out/g"] {
        let r = Request::Resolve {
            path: path.into(),
            follow: true,
        };
        let err = meta
            .call(&Cred::root(), r, &[], &mut [])
            .expect_err("resolved through a symlink out of its tree");
        assert!(err.message.contains("out"), "{path}: {err}");
    }
    // Nor an open by path through it: OpenPath is judged before it counts the open.
    let session = match meta
        .call(&Cred::root(), Request::SessionOpen {}, &[], &mut [])
        .unwrap()
        .0
    {
        Response::Session { session, .. } => session,
        other => panic!("SessionOpen answered {other:?}"),
    };
    let open = |path: &str, write: bool| Request::OpenPath {
        path: path.into(),
        session,
        read: true,
        write,
    };
    // Whether an open was counted is asked of this session itself (a Close, over a
    // connection with the secret), not of the server's total, which other sessions of
    // the test change as their leases run out.
    let mut secret = Conn::connect(&cfg.meta_addr, &cfg.secret, Duration::from_secs(5)).unwrap();
    let mut close =
        |ino: InodeId| secret.call(&Cred::root(), Request::Close { ino, session }, &[], &mut []);
    let err = meta
        .call(&Cred::root(), open("/a/out/g", false), &[], &mut [])
        .expect_err("opened through a symlink out of its tree");
    assert!(err.message.contains("out"), "{err}");
    let err = meta
        .call(&Cred::root(), open("/b/g", false), &[], &mut [])
        .expect_err("opened outside its tree");
    assert!(err.message.contains("outside its tree"), "{err}");
    let e = close(ino).expect_err("a refused open was counted");
    assert_eq!(e.code, stripefs_wire::ErrorCode::BadHandle, "{e}");
    meta.call(&Cred::root(), open("/a/sub/f", true), &[], &mut [])
        .expect("an open inside its tree");
    close(a_ino).expect("the open inside its tree was not counted");
    let e = close(a_ino).expect_err("the open was counted twice");
    assert_eq!(e.code, stripefs_wire::ErrorCode::BadHandle, "{e}");
    // The read-only token cannot write through a data server either.
    let rocred = TokenCred::parse(&ro).unwrap();
    let mut conn = Conn::connect_token(&cfg.data[0].addr, &rocred, Duration::from_secs(5)).unwrap();
    let data = vec![1u8; 4096];
    let w = Request::Write {
        fid: a_ino,
        unit: cfg.defaults.stripe_size_bytes,
        offset: 0,
        crcs: stripefs_wire::piece_crcs(0, &data),
    };
    let err = conn
        .call(&Cred::root(), w, &data, &mut [])
        .expect_err("a read-only token wrote");
    assert!(err.message.contains("read-only"), "{err}");
    // Nor open a file for writing by path.
    let mut meta = Conn::connect_token(&cfg.meta_addr, &rocred, Duration::from_secs(5)).unwrap();
    let err = meta
        .call(
            &Cred::root(),
            Request::OpenPath {
                path: "/a/sub/f".into(),
                session,
                read: true,
                write: true,
            },
            &[],
            &mut [],
        )
        .expect_err("a read-only token opened for writing");
    assert!(err.message.contains("read-only"), "{err}");
}

#[test]
fn expired_and_revoked_tokens_are_refused_also_after_a_restart() {
    let c = setup();
    let short = token(&c, &["--path", "/a", "--ttl", "2s"]);
    c.ok(&["get", "--token", &short, "/a/sub/f", "-"]);
    std::thread::sleep(Duration::from_millis(2500));
    refused(&c, &["get", "--token", &short, "/a/sub/f", "-"], "expired");

    let t = token(&c, &["--path", "/a", "--ttl", "1h"]);
    c.ok(&["get", "--token", &t, "/a/sub/f", "-"]);
    let out = c.ok(&["token", "revoke", &t]);
    assert!(out.contains("revoked"), "{out}");
    refused(&c, &["get", "--token", &t, "/a/sub/f", "-"], "revoked");
    // A data server stops serving it within its answer cache's time.
    let cfg = ClusterConfig::load(&c.cluster_file()).unwrap();
    let cred = TokenCred::parse(&t).unwrap();
    let ino = stripefs_client::Client::connect(&cfg)
        .unwrap()
        .stat("/a/sub/f")
        .unwrap()
        .ino;
    std::thread::sleep(stripefs_data::tokens::ANSWER_TTL + Duration::from_millis(200));
    for d in &cfg.data {
        let mut conn = Conn::connect_token(&d.addr, &cred, Duration::from_secs(5)).unwrap();
        let read = Request::Read {
            fid: ino,
            unit: cfg.defaults.stripe_size_bytes,
            offset: 0,
            len: 4096,
        };
        let err = conn
            .call(&Cred::root(), read, &[], &mut vec![0u8; 4096])
            .expect_err("a data server served a revoked token");
        assert!(err.message.contains("revoked"), "{err}");
    }
    // Remembered across a restart of the cluster.
    c.ok(&["cluster", "down", "--dir", &c.path().display().to_string()]);
    c.ok(&["cluster", "up", "--dir", &c.path().display().to_string()]);
    refused(&c, &["get", "--token", &t, "/a/sub/f", "-"], "revoked");
    // A token of another cluster, or one altered, is refused at the handshake.
    let mut bent = token(&c, &["--path", "/a", "--ttl", "1h"]);
    let last = bent.pop().unwrap();
    bent.push(if last == '0' { '1' } else { '0' });
    refused(&c, &["get", "--token", &bent, "/a/sub/f", "-"], "altered");
    refused(
        &c,
        &["get", "--token", "sft1.zz", "/a/sub/f", "-"],
        "--token",
    );
}

fn text_of(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
