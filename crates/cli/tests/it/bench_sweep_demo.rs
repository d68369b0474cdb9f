//! `stripefs bench sweep` and `stripefs demo` at tiny sizes, as a user runs them: JSON
//! arrays with the documented fields, PNG plots, the report directory, and no server left
//! running afterwards (checked by scanning the process table for the clusters' paths).

use crate::common;

use common::{exe, text, Cluster};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};

/// Pids of processes whose command line mentions `marker` (a test's own directory).
fn procs_mentioning(marker: &Path) -> Vec<u32> {
    let marker = marker.display().to_string();
    let mut out = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmd).contains(&marker) {
                out.push(pid);
            }
        }
    }
    out
}

fn assert_png(p: &Path) {
    let b = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    assert!(
        b.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{} is not a PNG",
        p.display()
    );
    assert!(
        b.len() > 10_000,
        "{} is only {} bytes",
        p.display(),
        b.len()
    );
}

fn json(p: &Path) -> Value {
    let t = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&t).unwrap()
}

fn sweep(c: &Cluster, vary: &str, values: &str, base: &str, out: &Path) -> Value {
    let (j, png) = (
        out.join(format!("{vary}.json")),
        out.join(format!("{vary}.png")),
    );
    let stdout = c.ok(&[
        "bench",
        "sweep",
        "--vary",
        vary,
        "--values",
        values,
        "--base-args",
        base,
        "--json",
        j.to_str().unwrap(),
        "--plot",
        png.to_str().unwrap(),
    ]);
    assert!(
        stdout.contains(&format!("bench sweep over {vary}")),
        "{stdout}"
    );
    assert_png(&png);
    json(&j)
}

#[test]
fn sweep_over_clients_and_stripe_size_writes_json_and_plot() {
    let c = Cluster::up(2, 2, &["--throttle", "200MiB"]);
    let out = tempfile::tempdir().unwrap();
    let rows = sweep(&c, "clients", "1,2", "--block 2M --xfer 256K", out.path());
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for (r, n) in rows.iter().zip([1, 2]) {
        assert_eq!(r["vary"], "clients");
        assert_eq!(r["value"], n);
        assert_eq!(r["clients"], n);
        assert_eq!(r["block_bytes"], 2 << 20);
        assert_eq!(r["verified"], true);
        assert!(r["write_mib_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["read_mib_s"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["ceiling_mib_s"].as_f64(), Some(2.0 * 2.0 * 200.0), "{r}");
        assert!(r["command"].as_str().unwrap().contains("--clients"), "{r}");
    }
    let rows = sweep(
        &c,
        "stripe-size",
        "64K,256K",
        "--clients 2 --block 1M",
        out.path(),
    );
    let sizes: Vec<u64> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["stripe_size_bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, [64 << 10, 256 << 10]);
}

#[test]
fn sweep_refuses_bad_values_before_measuring() {
    let c = Cluster::up(1, 1, &[]);
    let out = c.run(&["bench", "sweep", "--vary", "xfer", "--values", "64K,lots"]);
    assert!(!out.status.success(), "{}", text(&out));
    let out = c.run(&[
        "bench",
        "sweep",
        "--vary",
        "clients",
        "--values",
        "1",
        "--base-args",
        "--no-such-option 3",
    ]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--no-such-option"),
        "{}",
        text(&out)
    );
}

#[test]
fn sweep_over_servers_starts_and_stops_its_clusters() {
    let tmp = tempfile::Builder::new()
        .prefix("stripefs-sweep-servers-")
        .tempdir()
        .unwrap();
    let j = tmp.path().join("servers.json");
    let png = tmp.path().join("servers.png");
    // The clusters go into TMPDIR, so that this test can find any server left behind.
    let out = Command::new(exe())
        .args(["bench", "sweep", "--vary", "servers", "--values", "1,2"])
        .args(["--targets", "2", "--throttle", "100MiB"])
        .args(["--base-args", "--clients 2 --block 1M --xfer 256K"])
        .arg("--json")
        .arg(&j)
        .arg("--plot")
        .arg(&png)
        .env("TMPDIR", tmp.path())
        .env_remove("STRIPEFS_CLUSTER")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let rows = json(&j);
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for (r, n) in rows.iter().zip([1u64, 2]) {
        assert_eq!(r["servers"], n, "{r}");
        assert_eq!(r["stripe_count"], n, "{r}");
        assert_eq!(
            r["ceiling_mib_s"].as_f64(),
            Some(n as f64 * 2.0 * 100.0),
            "{r}"
        );
    }
    assert_png(&png);
    assert_eq!(
        procs_mentioning(tmp.path()),
        Vec::<u32>::new(),
        "servers left running"
    );
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with("stripefs-bench-"))
        .collect();
    assert!(left.is_empty(), "cluster directories left behind: {left:?}");
}

/// Options that make the demo small enough for a test (`block` per io client).
fn tiny_demo(report: &Path, block: &str, throttle: &str) -> Vec<String> {
    let mut v: Vec<String> = [
        "demo",
        "--servers",
        "2",
        "--targets",
        "1",
        "--throttle",
        throttle,
        "--clients",
        "2",
        "--block",
        block,
        "--files",
        "20",
        "--balance-sizes",
        "1M",
        "--balance-files",
        "1",
        "--sweep-block",
        "1M",
        "--locality-block",
        "2M",
        "--wan-size",
        "2M",
        "--tls-size",
        "2M",
        "--report",
    ]
    .map(String::from)
    .to_vec();
    v.push(report.display().to_string());
    v
}

fn run_demo(tmp: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(exe())
        .args(tiny_demo(&tmp.join("report"), "2M", "200MiB"))
        .args(extra)
        .env("TMPDIR", tmp)
        .env_remove("STRIPEFS_CLUSTER")
        .output()
        .unwrap()
}

#[test]
fn demo_writes_the_report_and_stops_its_cluster() {
    let tmp = tempfile::Builder::new()
        .prefix("stripefs-demo-test-")
        .tempdir()
        .unwrap();
    let out = run_demo(tmp.path(), &["--sweep-values", "64K,256K"]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("index.html"), "{stdout}");
    // One summary table, not the benchmarks' own tables (those are in NAME.txt).
    assert_eq!(stdout.matches("reference").count(), 1, "{stdout}");
    let rep = tmp.path().join("report");
    let html = std::fs::read_to_string(rep.join("index.html")).unwrap();
    for name in ["io", "md", "balance", "sweep-stripe-size", "summary"] {
        json(&rep.join(format!("{name}.json")));
    }
    // The locality section: its own cluster with hosts, colocated clients all local.
    let near = json(&rep.join("io-colocated.json"));
    assert_eq!(near["local_bytes_fraction"]["write"], 1.0, "{near}");
    assert_eq!(
        json(&rep.join("io-remote.json"))["local_bytes_fraction"]["read"],
        0.0
    );
    json(&rep.join("balance-hosts.json"));
    // The remote-access section: rows for 1 and 8 streams, off and auto, both ways.
    let wan = json(&rep.join("wan.json"));
    assert_eq!(wan["rows"].as_array().map(Vec::len), Some(8), "{wan}");
    // The TLS section: TLS and plain, both ways, every read verified.
    let tls = json(&rep.join("tls.json"));
    assert_eq!(tls["rows"].as_array().map(Vec::len), Some(4), "{tls}");
    assert_eq!(tls["verified"], true, "{tls}");
    for png in [
        "balance.png",
        "sweep-stripe-size.png",
        "balance-hosts.png",
        "wan.png",
    ] {
        assert_png(&rep.join(png));
        assert!(
            html.contains(&format!("<img src=\"{png}\"")),
            "{png} not in index.html"
        );
    }
    assert!(
        html.contains("stripefs bench io --cluster D/cluster.toml"),
        "{html}"
    );
    assert!(!html.contains("FAILED"), "{html}");
    // The report is for users: it names no internal planning documents.
    for text in [&html, &stdout.to_string()] {
        assert!(!text.to_lowercase().contains("issue"), "{text}");
    }
    assert!(html.contains("target (4 servers, 2,500 files)"), "{html}");
    let io = json(&rep.join("io.json"));
    assert!(io["baseline_write_mib_s"].as_f64().unwrap() > 0.0, "{io}");
    assert!(std::fs::read_to_string(rep.join("io.txt"))
        .unwrap()
        .contains("bench io"));
    assert_eq!(
        procs_mentioning(tmp.path()),
        Vec::<u32>::new(),
        "servers left running"
    );
}

#[test]
fn demo_reports_a_failed_benchmark_and_exits_non_zero() {
    let tmp = tempfile::Builder::new()
        .prefix("stripefs-demo-fail-")
        .tempdir()
        .unwrap();
    let out = run_demo(tmp.path(), &["--sweep-values", "64K,lots"]);
    assert!(!out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("sweep") && stdout.contains("FAILED"),
        "{stdout}"
    );
    let rep = tmp.path().join("report");
    let html = std::fs::read_to_string(rep.join("index.html")).unwrap();
    assert!(html.contains("FAILED") && html.contains("lots"), "{html}");
    // The benchmarks before it still ran and reported.
    assert!(json(&rep.join("io.json"))["write_mib_s"].as_f64().unwrap() > 0.0);
    assert_eq!(
        procs_mentioning(tmp.path()),
        Vec::<u32>::new(),
        "servers left running"
    );
}

#[test]
fn interrupted_demo_stops_its_cluster() {
    let tmp = tempfile::Builder::new()
        .prefix("stripefs-demo-int-")
        .tempdir()
        .unwrap();
    // Big enough that the interrupt lands while the benchmarks run.
    let mut child = Command::new(exe())
        .args(tiny_demo(&tmp.path().join("report"), "64M", "10MiB"))
        .env("TMPDIR", tmp.path())
        .env_remove("STRIPEFS_CLUSTER")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
        seen.push_str(&line);
        if n == 0 || line.contains("cluster in") {
            break;
        }
    }
    if !seen.contains("cluster in") {
        let out = child.wait_with_output().unwrap();
        panic!("demo did not start: {seen}{}", text(&out));
    }
    let others = || -> Vec<u32> {
        let mut v = procs_mentioning(tmp.path());
        v.retain(|&p| p != child.id());
        v
    };
    assert!(!others().is_empty(), "no servers seen");
    std::thread::sleep(std::time::Duration::from_millis(500));
    // SAFETY: signals our own child, which is still running (not yet waited for).
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{seen}");
    assert_eq!(
        procs_mentioning(tmp.path()),
        Vec::<u32>::new(),
        "servers left running"
    );
}
