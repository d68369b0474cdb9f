//! TLS on a real cluster (server processes): `cluster up --require-tls` serves clients
//! that use its cluster file (TLS, checked against the cluster CA), refuses a client
//! whose file has no `tls_ca` with an error naming TLS on both sides (the client's
//! message and the server's log), and a collaborator's client file made by `token create
//! --client-file` carries the CA itself, no secret and no server key, and works from
//! another directory.

use crate::common;

use common::*;
use std::process::Command;

fn run_with(file: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(exe())
        .args(args)
        .env("STRIPEFS_CLUSTER", file)
        // Another host than the servers: every byte crosses a connection.
        .env("STRIPEFS_HOST", "tls-elsewhere")
        .output()
        .unwrap()
}

#[test]
fn a_tls_only_cluster_serves_tls_clients_and_refuses_plain_ones_naming_tls() {
    let c = Cluster::up(2, 1, &["--require-tls"]);
    let text_of = |o: &std::process::Output| text(o);
    let file = c.cluster_file();
    let conf = std::fs::read_to_string(&file).unwrap();
    assert!(
        conf.contains("require_tls = true") && conf.contains("tls_ca"),
        "{conf}"
    );

    // A TLS client moves data both ways, byte for byte.
    let data = random_bytes(3 << 20 | 17);
    let local = c.path().join("in.bin");
    std::fs::write(&local, &data).unwrap();
    let out = run_with(&file, &["put", &local.display().to_string(), "/f"]);
    assert!(out.status.success(), "{}", text_of(&out));
    let out = run_with(&file, &["get", "/f", "-"]);
    assert!(out.status.success(), "{}", text_of(&out));
    assert!(out.stdout == data, "read back differs");

    // The same file without tls_ca: refused, and both sides say it is about TLS.
    let plain = c.path().join("plain.toml");
    let without: String = conf
        .lines()
        .filter(|l| !l.starts_with("tls_ca"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&plain, without).unwrap();
    let out = run_with(&plain, &["ls", "/"]);
    assert!(!out.status.success(), "a plain client was served");
    assert!(text_of(&out).contains("requires TLS"), "{}", text_of(&out));
    let log = std::fs::read_to_string(c.path().join("logs/meta.log")).unwrap();
    assert!(log.contains("requires TLS"), "server log: {log}");

    // A collaborator's client file: the CA inline, no secret, no server key.
    let collab = c.path().join("collab.toml");
    c.ok(&[
        "token",
        "create",
        "--path",
        "/",
        "--read-only",
        "--client-file",
        &collab.display().to_string(),
    ]);
    let text = std::fs::read_to_string(&collab).unwrap();
    assert!(text.contains("BEGIN CERTIFICATE"), "{text}");
    assert!(
        !text.contains("secret") && !text.contains("tls_key") && !text.contains("tls_cert"),
        "{text}"
    );
    let elsewhere = tempfile::tempdir().unwrap();
    let moved = elsewhere.path().join("collab.toml");
    std::fs::copy(&collab, &moved).unwrap();
    let out = run_with(&moved, &["get", "/f", "-"]);
    assert!(out.status.success(), "{}", text_of(&out));
    assert!(out.stdout == data, "read back through the token differs");
}
