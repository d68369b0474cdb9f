//! Hosts, the emulated host network and placement (issue 14, items 1 and 2), on real
//! clusters started with `cluster up --hosts`.

use crate::common;

use common::{text, Cluster};
use std::time::Instant;

fn json(c: &Cluster, args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&c.ok(args)).unwrap()
}

/// Bytes used per data server, by id, from `cluster status --json`.
fn used(c: &Cluster) -> Vec<u64> {
    let v = json(c, &["cluster", "status", "--json"]);
    v["servers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["role"] == "data")
        .map(|s| s["bytes_used"].as_u64().unwrap())
        .collect()
}

fn servers_of(c: &Cluster, path: &str) -> Vec<u64> {
    json(c, &["getstripe", path, "--json"])["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect()
}

fn local_file(len: usize) -> tempfile::NamedTempFile {
    let f = tempfile::Builder::new()
        .prefix("hh-src-")
        .tempfile()
        .unwrap();
    std::fs::write(f.path(), common::random_bytes(len)).unwrap();
    f
}

#[test]
fn hosts_show_in_status_and_a_local_layout_lands_on_the_clients_host() {
    let c = Cluster::up_prefixed("hh-hosts-", 2, 1, &["--hosts", "2"]);
    // The cluster description and `cluster status` say which server is on which host.
    let cfg = std::fs::read_to_string(c.cluster_file()).unwrap();
    assert!(
        cfg.contains("host = \"host0\"") && cfg.contains("host = \"host1\""),
        "{cfg}"
    );
    let status = c.ok(&["cluster", "status"]);
    assert!(status.contains("HOST"), "{status}");
    let v = json(&c, &["cluster", "status", "--json"]);
    let hosts: Vec<&str> = v["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, ["host0", "host0", "host1"], "meta, data0, data1");

    c.ok(&["mkdir", "/loc"]);
    c.ok(&["setstripe", "/loc", "--layout", "local", "--size", "64K"]);
    let d = json(&c, &["getstripe", "/loc", "--json"]);
    assert_eq!(d["layout"], "local", "{d}");
    let src = local_file(3 << 20);
    let before = used(&c);
    let src_path = src.path().to_str().unwrap();
    // From host1: every object of the file on data1, none on data0, whatever the
    // rotation (several files).
    for i in 0..3 {
        let p = format!("/loc/h1-{i}");
        c.ok(&["put", src_path, &p, "--host", "host1"]);
        assert_eq!(servers_of(&c, &p), [1], "{p}");
    }
    let after = used(&c);
    assert_eq!(
        after[0], before[0],
        "data0 (host0) got bytes: {before:?} -> {after:?}"
    );
    assert!(after[1] >= before[1] + (9 << 20), "{before:?} -> {after:?}");
    // From host0 (here through STRIPEFS_HOST): on data0.
    let out = std::process::Command::new(common::exe())
        .args(["put", src_path, "/loc/h0"])
        .env("STRIPEFS_CLUSTER", c.cluster_file())
        .env("STRIPEFS_HOST", "host0")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(servers_of(&c, "/loc/h0"), [0]);
    // A subdirectory inherits the policy; a file's own --stripe-count keeps it local
    // first.
    c.ok(&["mkdir", "/loc/sub"]);
    c.ok(&["put", src_path, "/loc/sub/f", "--host", "host1"]);
    assert_eq!(servers_of(&c, "/loc/sub/f"), [1]);
    c.ok(&[
        "put",
        src_path,
        "/loc/two",
        "--host",
        "host1",
        "--stripe-count",
        "2",
    ]);
    assert_eq!(servers_of(&c, "/loc/two"), [1, 0]);
    // A host without a data server: placed as usual, with a note in the metadata log.
    c.ok(&["put", src_path, "/loc/elsewhere", "--host", "host7"]);
    assert_eq!(servers_of(&c, "/loc/elsewhere").len(), 1);
    let log = std::fs::read_to_string(c.path().join("logs/meta.log")).unwrap();
    assert!(
        log.contains("client host \"host7\" has no data server; placed spread"),
        "{log}"
    );
    // The bytes read back whole, from either host.
    let back = c.path().join("hh-back");
    c.ok(&[
        "get",
        "/loc/h1-0",
        back.to_str().unwrap(),
        "--host",
        "host0",
    ]);
    assert_eq!(
        std::fs::read(&back).unwrap(),
        std::fs::read(src.path()).unwrap()
    );
}

#[test]
fn an_explicit_server_order_is_kept_and_bad_ones_are_refused() {
    let c = Cluster::up_prefixed("hh-order-", 3, 1, &["--hosts", "3"]);
    c.ok(&["setstripe", "/f", "--servers", "2,0"]);
    assert_eq!(servers_of(&c, "/f"), [2, 0]);
    c.ok(&["mkdir", "/d"]);
    c.ok(&["setstripe", "/d", "--servers", "1,2,0", "--count", "3"]);
    let d = json(&c, &["getstripe", "/d", "--json"]);
    assert_eq!(d["servers"], serde_json::json!([1, 2, 0]), "{d}");
    // A list without --count: the count is the servers', and getstripe says so.
    c.ok(&["mkdir", "/e"]);
    c.ok(&["setstripe", "/e", "--servers", "2,1"]);
    let shown = c.ok(&["getstripe", "/e"]);
    assert!(
        shown.contains("stripe_count: 2 (the servers listed)"),
        "{shown}"
    );
    let e = json(&c, &["getstripe", "/e", "--json"]);
    assert_eq!(e["stripe_count"], 2, "{e}");
    let src = local_file(100 << 10);
    c.ok(&["put", src.path().to_str().unwrap(), "/d/g"]);
    assert_eq!(servers_of(&c, "/d/g"), [1, 2, 0]);

    let fails = |args: &[&str], want: &str| {
        let out = c.run(args);
        let t = text(&out);
        assert!(!out.status.success(), "{args:?} succeeded: {t}");
        assert!(t.contains(want), "{args:?}: wanted {want:?} in {t}");
    };
    fails(
        &["setstripe", "/d", "--servers", "0,3"],
        "data server 3 does not exist: the cluster has 3 data servers",
    );
    fails(
        &["setstripe", "/d", "--servers", "1,1"],
        "data server 1 is named twice",
    );
    fails(
        &["setstripe", "/d", "--servers", "0,1", "--count", "3"],
        "--count 3 but --servers names 2 servers",
    );
    fails(&["setstripe", "/d", "--servers", "x"], "invalid value 'x'");
    fails(
        &["setstripe", "/d", "--servers", "0", "--layout", "local"],
        "cannot be combined with --layout local",
    );
    fails(
        &["setstripe", "/d", "--layout", "near"],
        "unknown layout \"near\"",
    );
    fails(&["ls", "/", "--host", "no such host"], "bad host id");
    // The directory kept its good layout.
    let d = json(&c, &["getstripe", "/d", "--json"]);
    assert_eq!(d["servers"], serde_json::json!([1, 2, 0]), "{d}");
}

#[test]
fn cluster_up_refuses_bad_host_flags() {
    let dir = tempfile::Builder::new()
        .prefix("hh-bad-")
        .tempdir()
        .unwrap();
    let up = |extra: &[&str]| {
        let out = std::process::Command::new(common::exe())
            .args(["cluster", "up", "--dir"])
            .arg(dir.path())
            .args(extra)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{extra:?} started a cluster");
        text(&out)
    };
    assert!(up(&["--host-net", "4MiB"]).contains("--host-net needs --hosts"));
    assert!(up(&["--hosts", "0"]).contains("--hosts must be between 1 and"));
    assert!(up(&["--hosts", "2", "--host-net", "fast"]).contains("invalid value"));
}

/// Seconds `stripefs ARGS` takes.
fn timed(c: &Cluster, args: &[&str]) -> f64 {
    let t = Instant::now();
    c.ok(args);
    t.elapsed().as_secs_f64()
}

#[test]
fn host_net_limits_cross_host_bytes_and_not_same_host_bytes() {
    const RATE: u64 = 2 << 20;
    const LEN: usize = 6 << 20;
    let c = Cluster::up_prefixed("hh-net-", 2, 1, &["--hosts", "2", "--host-net", "2MiB"]);
    // Both files on data1 (host1).
    c.ok(&["setstripe", "/a", "--servers", "1"]);
    c.ok(&["setstripe", "/b", "--servers", "1"]);
    let src = local_file(LEN);
    let s = src.path().to_str().unwrap();
    let dst = c.path().join("hh-dst");
    let d = dst.to_str().unwrap();
    let link = LEN as f64 / RATE as f64;
    // Same host: not limited.
    let local_put = timed(&c, &["put", s, "/a", "--host", "host1"]);
    let local_get = timed(&c, &["get", "/a", d, "--host", "host1"]);
    // From host0: through host1's emulated link, each direction.
    let remote_put = timed(&c, &["put", s, "/b", "--host", "host0"]);
    let remote_get = timed(&c, &["get", "/b", d, "--host", "host0"]);
    eprintln!(
        "link time {link:.2} s; local put {local_put:.2} get {local_get:.2}; remote put \
         {remote_put:.2} get {remote_get:.2}"
    );
    assert!(remote_put >= 0.7 * link, "remote put {remote_put:.2} s");
    assert!(remote_get >= 0.7 * link, "remote get {remote_get:.2} s");
    assert!(local_put < 0.5 * link, "local put {local_put:.2} s");
    assert!(local_get < 0.5 * link, "local get {local_get:.2} s");
    assert_eq!(
        std::fs::read(&dst).unwrap(),
        std::fs::read(src.path()).unwrap()
    );
}

/// `bench io --colocate` runs client i on host i: with a local layout every byte stays
/// on the clients' own hosts; spread over the hosts from one outside host, none does.
/// The CPU figures come from the servers' /proc entries (pid files of `cluster up`).
#[test]
fn bench_io_colocate_counts_local_bytes_and_cpu() {
    let c = Cluster::up_prefixed("hh-coloc-", 2, 1, &["--hosts", "2"]);
    let out = c.path().join("hh-coloc.json");
    let o = out.to_str().unwrap();
    let base = [
        "bench",
        "io",
        "--clients",
        "2",
        "--block",
        "4M",
        "--xfer",
        "1M",
        "--file-per-process",
        "--json",
        o,
    ];
    let run = |extra: &[&str]| -> serde_json::Value {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        c.ok(&args);
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap()
    };
    let local = run(&["--colocate", "--layout", "local"]);
    assert_eq!(local["client_hosts"], serde_json::json!(["host0", "host1"]));
    for phase in ["write", "read"] {
        assert_eq!(local["local_bytes_fraction"][phase], 1.0, "{local}");
        assert_eq!(local["local_bytes"][phase], 8 << 20, "{local}");
        // Measured (clock ticks of 10 ms may make a small run's share 0), not null.
        assert!(local["server_cpu_s_per_gib"][phase].as_f64().unwrap() >= 0.0);
        let total = local["total_cpu_s_per_gib"][phase].as_f64().unwrap();
        assert!(total >= local["server_cpu_s_per_gib"][phase].as_f64().unwrap());
    }
    assert_eq!(local["server_cpu_known"], true);
    // Same host and unthrottled: reads bypass the servers (short-circuit).
    assert_eq!(local["short_circuit_bytes"]["read"], 8 << 20, "{local}");
    // From a host with no server: everything crosses a host boundary.
    let remote = run(&["--host", "elsewhere", "--layout", "spread"]);
    for phase in ["write", "read"] {
        assert_eq!(remote["local_bytes_fraction"][phase], 0.0, "{remote}");
        assert_eq!(remote["remote_bytes"][phase], 8 << 20, "{remote}");
    }
    assert_eq!(remote["short_circuit_bytes"]["read"], 0, "{remote}");
}

/// `cluster status` says how many bytes each data server moved with clients on its own
/// host and on others, and how many short-circuit opens it answered (reads through them
/// never reach the server).
#[test]
fn status_counts_same_host_and_other_host_bytes() {
    const LEN: usize = 1 << 20;
    let c = Cluster::up_prefixed("hh-count-", 2, 1, &["--hosts", "2"]);
    c.ok(&["setstripe", "/a", "--servers", "1"]);
    c.ok(&["setstripe", "/b", "--servers", "1"]);
    let src = local_file(LEN);
    let s = src.path().to_str().unwrap();
    let dst = c.path().join("hh-count-dst");
    let d = dst.to_str().unwrap();
    c.ok(&["put", s, "/a", "--host", "host1"]);
    c.ok(&["put", s, "/b", "--host", "host0"]);
    c.ok(&["get", "/a", d, "--host", "host1"]);
    c.ok(&["get", "/b", d, "--host", "host0"]);
    let v = json(&c, &["cluster", "status", "--json"]);
    let data1 = v["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["role"] == "data" && s["host"] == "host1")
        .unwrap()
        .clone();
    let n = |k: &str| data1[k].as_u64().unwrap_or_else(|| panic!("{k}: {data1}"));
    assert_eq!(n("same_host_bytes_written"), LEN as u64, "{data1}");
    assert_eq!(n("other_host_bytes_written"), LEN as u64, "{data1}");
    assert_eq!(n("other_host_bytes_read"), LEN as u64, "{data1}");
    // The same-host read went short-circuit, past the server.
    assert_eq!(n("same_host_bytes_read"), 0, "{data1}");
    assert!(n("short_circuit_opens") >= 1, "{data1}");
}
