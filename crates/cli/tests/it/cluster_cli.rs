//! The core's user-facing promises, checked with real server processes: put/get of a
//! striped file, balance over servers and targets, status JSON, getstripe, restart on
//! existing data, and clear errors for bad input.

use crate::common;
use common::*;
use serde_json::Value;

#[test]
fn put_get_balance_status_getstripe_restart() {
    let c = Cluster::up(4, 2, &[]);
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src.bin");
    let data = random_bytes(200 << 20);
    std::fs::write(&src, &data).unwrap();
    let src_s = src.display().to_string();
    c.ok(&[
        "put",
        &src_s,
        "/big",
        "--stripe-size",
        "1M",
        "--stripe-count",
        "4",
    ]);
    let back = work.path().join("back.bin");
    let back_s = back.display().to_string();
    c.ok(&["get", "/big", &back_s]);
    assert!(
        std::fs::read(&back).unwrap() == data,
        "get returned different bytes"
    );

    let status: Value = serde_json::from_str(&c.ok(&["cluster", "status", "--json"])).unwrap();
    let servers = status["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 5);
    assert!(servers.iter().all(|s| s["healthy"] == true), "{status}");
    let data_servers: Vec<&Value> = servers.iter().filter(|s| s["role"] == "data").collect();
    let total: u64 = data_servers
        .iter()
        .map(|s| s["bytes_used"].as_u64().unwrap())
        .sum();
    assert!(total >= 200 << 20, "{total}");
    for s in &data_servers {
        let share = s["bytes_used"].as_u64().unwrap() as f64 / total as f64;
        assert!(
            (share - 0.25).abs() <= 0.02,
            "server {} holds {share:.3} of the bytes",
            s["addr"]
        );
        let targets = s["targets"].as_array().unwrap();
        assert_eq!(targets.len(), 2);
        for t in targets {
            assert!(
                t["bytes_used"].as_u64().unwrap() > 20 << 20,
                "target unused: {t}"
            );
        }
    }

    let gs: Value = serde_json::from_str(&c.ok(&["getstripe", "/big", "--json"])).unwrap();
    assert_eq!(gs["stripe_size"], 1 << 20);
    assert_eq!(gs["stripe_count"], 4);
    let human = c.ok(&["getstripe", "/big"]);
    assert!(
        human.contains("1 MiB") && human.contains("stripe_count: 4"),
        "{human}"
    );

    // A stopped cluster restarts on its existing data.
    c.down();
    let st = c.run(&["cluster", "status", "--json"]);
    let v: Value = serde_json::from_slice(&st.stdout).unwrap_or(Value::Null);
    assert!(v["servers"]
        .as_array()
        .map(|s| s.iter().all(|s| s["healthy"] == false))
        .unwrap_or(true));
    c.restart();
    std::fs::remove_file(&back).unwrap();
    c.ok(&["get", "/big", &back_s]);
    assert!(
        std::fs::read(&back).unwrap() == data,
        "data changed across a restart"
    );
}

#[test]
fn namespace_commands_and_errors() {
    let c = Cluster::up(2, 1, &[]);
    c.ok(&["mkdir", "-p", "/a/b/c"]);
    c.ok(&["setstripe", "/a", "--size", "64K", "--count", "1"]);
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("f");
    std::fs::write(&src, b"hello stripefs").unwrap();
    c.ok(&["put", &src.display().to_string(), "/a/"]);
    let gs: Value = serde_json::from_str(&c.ok(&["getstripe", "/a/f", "--json"])).unwrap();
    assert_eq!(
        gs["stripe_size"], 65536,
        "directory default not inherited: {gs}"
    );
    assert_eq!(gs["stripe_count"], 1);
    // Extended attributes without a mount.
    c.ok(&["xattr", "set", "/a/f", "user.origin", "run-42"]);
    assert_eq!(c.ok(&["xattr", "get", "/a/f", "user.origin"]), "run-42");
    assert_eq!(
        c.ok(&["xattr", "get", "/a/f", "user.origin", "--hex"])
            .trim(),
        "72756e2d3432"
    );
    assert_eq!(c.ok(&["xattr", "list", "/a/f"]).trim(), "user.origin");
    refused(
        &c,
        &["xattr", "set", "/a/f", "user.origin", "x", "--create"],
        "already",
    );
    c.ok(&["xattr", "rm", "/a/f", "user.origin"]);
    refused(
        &c,
        &["xattr", "get", "/a/f", "user.origin"],
        "no such extended attribute",
    );
    refused(
        &c,
        &["xattr", "set", "/a/f", "system.posix_acl_access", "x"],
        "not supported",
    );
    // `get` replaces a regular file (through a symlink, the file it points to) but
    // writes into a FIFO or device (such as /dev/null) instead of renaming over it.
    let link = work.path().join("link");
    let real = work.path().join("real");
    std::fs::write(&real, b"old").unwrap();
    std::os::unix::fs::symlink(&real, &link).unwrap();
    c.ok(&["get", "/a/f", &link.display().to_string()]);
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    assert_eq!(std::fs::read(&real).unwrap(), b"hello stripefs");
    let fifo = work.path().join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(&fifo).unwrap())
    };
    c.ok(&["get", "/a/f", &fifo.display().to_string()]);
    assert_eq!(reader.join().unwrap(), b"hello stripefs");
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    let into_dir = c.run(&["get", "/a/f", &work.path().display().to_string()]);
    assert!(!into_dir.status.success());
    assert!(
        text(&into_dir).contains("is a directory"),
        "{}",
        text(&into_dir)
    );
    c.ok(&["mv", "/a/f", "/a/b/g"]);
    let ls = c.ok(&["ls", "/a/b"]);
    assert!(ls.contains('g') && ls.contains('c'), "{ls}");
    let st: Value = serde_json::from_str(&c.ok(&["stat", "/a/b/g", "--json"])).unwrap();
    assert_eq!(st["size"], 14);
    let out = c.run(&["rm", "/a"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("is a directory"), "{}", text(&out));
    c.ok(&["rm", "-r", "/a"]);
    assert!(!c.ok(&["ls", "/"]).contains('a'));

    // Bad input gets a clear error and a non-zero exit.
    let bad = c.run(&["stat", "/no/such"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("no such file"),
        "{}",
        text(&bad)
    );
    let bad = c.run(&["setstripe", "/x", "--size", "1000"]);
    assert!(!bad.status.success(), "{}", text(&bad));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("multiples of 4K up to 16M"),
        "{}",
        text(&bad)
    );
    let bad = c.run(&["mkdir", "/x/.."]);
    assert!(!bad.status.success(), "{}", text(&bad));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains(".."),
        "{}",
        text(&bad)
    );
    let missing = std::process::Command::new(exe())
        .args(["ls", "/"])
        .env_remove("STRIPEFS_CLUSTER")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("STRIPEFS_CLUSTER"),
        "{}",
        text(&missing)
    );
}

#[test]
fn wrong_secret_is_refused_clearly_and_logged() {
    let c = Cluster::up(1, 1, &[]);
    let text_cfg = std::fs::read_to_string(c.cluster_file()).unwrap();
    let secret_line = text_cfg.lines().find(|l| l.starts_with("secret")).unwrap();
    let wrong = text_cfg.replace(secret_line, &format!("secret = \"{}\"", "ab".repeat(32)));
    let bad = c.path().join("wrong.toml");
    std::fs::write(&bad, wrong).unwrap();
    let out = std::process::Command::new(exe())
        .args(["ls", "/", "--cluster"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("secret"), "{err}");
    // The server is still serving the right clients, and said why it refused.
    c.ok(&["ls", "/"]);
    // The server logs the refusal when it sees the client hang up, which may come a
    // little after the client process ended on a loaded machine.
    let read_log = || std::fs::read_to_string(c.path().join("logs/meta.log")).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !read_log().contains("wrong cluster secret") && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let log = read_log();
    assert!(log.contains("wrong cluster secret"), "{log}");
    // The cluster file holds the secret: only its owner may read it.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(c.cluster_file())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

/// What servers write on their disks is for the cluster's owner only: logs, the
/// metadata database and its log, objects and their directories, TLS keys (0600 files,
/// 0700 object directories); a log an older build left readable is made private at the
/// next start. The short-circuit sockets stay 0666 by design: every local user's
/// programs connect (through the interception library) and then prove the secret.
#[test]
fn files_servers_write_are_private() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let c = Cluster::up(2, 1, &["--tls", "--inline-bytes", "0"]);
    let src = c.path().join("src");
    std::fs::write(&src, vec![7u8; 3 << 20]).unwrap();
    c.ok(&["put", src.to_str().unwrap(), "/f"]);
    let log = c.path().join("logs/data0.log");
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o644)).unwrap();
    c.down();
    c.restart();
    let mode =
        |p: &std::path::Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777;
    let mut seen = (0, 0);
    let mut stack = vec![c.path().to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p
                .strip_prefix(c.path())
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let t = std::fs::symlink_metadata(&p).unwrap().file_type();
            if t.is_dir() {
                if rel.contains("objects") {
                    assert_eq!(mode(&p), 0o700, "{rel}");
                    seen.0 += 1;
                }
                stack.push(p);
            } else if t.is_socket() {
                assert_eq!(mode(&p), 0o666, "{rel}");
            } else if rel.starts_with("logs/")
                || rel.starts_with("meta/meta.redb")
                || rel.contains("objects/")
                || rel.ends_with(".key")
            {
                assert_eq!(mode(&p), 0o600, "{rel}");
                seen.1 += 1;
            }
        }
    }
    // The object directories, and at least the three logs, the database, two keys
    // and the file's objects.
    assert!(seen.0 >= 2 && seen.1 >= 8, "{seen:?}");
}

/// `stripefs ARGS` with no STRIPEFS_CLUSTER in the environment.
fn without_env(args: &[&str]) -> std::process::Output {
    std::process::Command::new(exe())
        .args(args)
        .env_remove("STRIPEFS_CLUSTER")
        .output()
        .unwrap()
}

#[test]
fn small_things_a_user_notices() {
    let c = Cluster::up(2, 1, &[]);
    let file = c.cluster_file().display().to_string();
    // --cluster before or after the command, or from the environment.
    c.ok(&["mkdir", "/d"]);
    for args in [
        vec!["--cluster", &file, "ls", "/"],
        vec!["ls", "/", "--cluster", &file],
        vec!["ls", "--cluster", &file, "/"],
    ] {
        let out = without_env(&args);
        assert!(out.status.success(), "{args:?}: {}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains('d'),
            "{args:?}"
        );
    }
    assert!(c.ok(&["ls", "/"]).contains('d'));

    // stat prints times as dates; --json keeps the nanosecond numbers.
    let human = c.ok(&["stat", "/d"]);
    let st: Value = serde_json::from_str(&c.ok(&["stat", "/d", "--json"])).unwrap();
    for key in ["atime", "mtime", "ctime"] {
        let ns = st[format!("{key}_ns")].as_i64().unwrap();
        assert!(ns > 1_600_000_000_000_000_000, "{st}");
        let line = human
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{key}:")))
            .unwrap_or_else(|| panic!("no {key} in {human}"));
        let date = line.split_whitespace().nth(1).unwrap();
        // 2026-11-23T13:45:01.123456789Z
        assert_eq!(date.len(), 30, "{line}");
        assert!(date.ends_with('Z') && date.as_bytes()[10] == b'T', "{line}");
        assert!(
            date.ends_with(&format!("{:09}Z", ns % 1_000_000_000)),
            "{line}"
        );
    }

    // A stripe count above the number of data servers is an error, not a quiet clamp.
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("f");
    std::fs::write(&src, b"x").unwrap();
    let src = src.display().to_string();
    for args in [
        vec!["put", &src, "/f", "--stripe-count", "3"],
        vec!["setstripe", "/g", "--count", "3"],
        vec!["setstripe", "/d", "--count", "5"],
    ] {
        let out = c.run(&args);
        assert!(!out.status.success(), "{args:?}: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("exceeds the number of data servers (2)") && err.contains("stripe count"),
            "{args:?}: {err}"
        );
    }
    let ls = c.ok(&["ls", "/"]);
    assert!(!ls.contains('f') && !ls.contains('g'), "{ls}");
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().display().to_string();
    let args = [
        "cluster",
        "up",
        "--dir",
        &dir,
        "--servers",
        "2",
        "--stripe-count",
        "3",
    ];
    let out = without_env(&args);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--stripe-count 3 exceeds the number of data servers (2)"),
        "{}",
        text(&out)
    );
    c.ok(&["put", &src, "/f", "--stripe-count", "2"]);

    // Names: 255 bytes work, 256 are too long; a directory cannot move into itself.
    let ok = format!("/{}", "n".repeat(255));
    c.ok(&["mkdir", &ok]);
    assert!(c.ok(&["stat", &ok]).contains("type: Dir"));
    let out = c.run(&["mkdir", &format!("/{}", "n".repeat(256))]);
    assert!(text(&out).contains("name too long"), "{}", text(&out));
    c.ok(&["mkdir", "/d/e"]);
    let out = c.run(&["mv", "/d", "/d/e/d"]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("into its own subtree"),
        "{}",
        text(&out)
    );
}

/// Stops the cluster in a directory when dropped, also when the test fails.
struct DownOnDrop(std::path::PathBuf);

impl Drop for DownOnDrop {
    fn drop(&mut self) {
        let _ = stripefs_launch::down(&self.0);
    }
}

/// A port can be taken between `up` choosing it and the server binding it (another
/// program, or another `up` at the same moment): the new cluster starts again on ports
/// chosen anew instead of failing.
#[test]
fn a_port_taken_before_its_server_binds_it_is_chosen_again() {
    let dir = tempfile::Builder::new()
        .prefix("stripefs-test-ports-")
        .tempdir()
        .unwrap();
    let _down = DownOnDrop(dir.path().to_path_buf());
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = held.local_addr().unwrap().port();
    let mut calls = 0;
    let mut pick = |host: &str, n: usize| {
        calls += 1;
        let mut ports = stripefs_launch::free_ports(host, n)?;
        if calls == 1 {
            // Data server 1's port, as if someone bound it right after the choice.
            ports[2] = taken;
        }
        Ok(ports)
    };
    let opts = stripefs_launch::UpOptions {
        dir: dir.path().to_path_buf(),
        servers: 3,
        targets: 1,
        throttle_bytes_s: None,
        hosts: None,
        host_net_bytes_s: None,
        defaults: Default::default(),
        host: "127.0.0.1".into(),
        exe: exe().into(),
        no_zero_copy: false,
        wan: None,
        tls: false,
        require_tls: false,
    };
    let up = stripefs_launch::up_picking(&opts, &mut pick).expect("up on a taken port");
    assert_eq!(calls, 2, "the ports were chosen once more");
    let toml = std::fs::read_to_string(&up.cluster_file).unwrap();
    assert!(
        !toml.contains(&format!(":{taken}\"")),
        "the taken port is still in cluster.toml:\n{toml}"
    );
    // The cluster serves on its new ports.
    let src = dir.path().join("src.bin");
    let bytes = random_bytes(3 << 20);
    std::fs::write(&src, &bytes).unwrap();
    let cf = up.cluster_file.display().to_string();
    let put = std::process::Command::new(exe())
        .args(["put", "--cluster", &cf, &src.display().to_string(), "/f"])
        .output()
        .unwrap();
    assert!(put.status.success(), "put: {}", text(&put));
    let back = dir.path().join("back.bin");
    let get = std::process::Command::new(exe())
        .args(["get", "--cluster", &cf, "/f", &back.display().to_string()])
        .output()
        .unwrap();
    assert!(get.status.success(), "get: {}", text(&get));
    assert!(std::fs::read(&back).unwrap() == bytes, "bytes differ");
    drop(held);
}
