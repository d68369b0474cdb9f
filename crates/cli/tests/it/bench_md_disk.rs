//! `stripefs bench md` against a real local cluster and `stripefs bench disk` on a
//! temporary directory, each at a small size: the JSON has the documented fields with
//! positive figures, and the runs leave nothing behind.

use crate::common;
use common::*;

fn json_of(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn assert_positive(r: &serde_json::Value, fields: &[&str]) {
    for f in fields {
        let v = r[f]
            .as_f64()
            .unwrap_or_else(|| panic!("field {f} missing or not a number in {r}"));
        assert!(v > 0.0, "field {f} is {v}, not positive: {r}");
    }
}

#[test]
fn bench_md_reports_every_rate_and_cleans_up() {
    let c = Cluster::up(2, 1, &[]);
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("md.json");
    let base = out.path().join("base");
    let stdout = c.ok(&[
        "bench",
        "md",
        "--clients",
        "3",
        "--files",
        "40",
        "--iterations",
        "5",
        "--baseline",
        base.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(stdout.contains("shared create"), "{stdout}");
    let r = json_of(&json);
    assert_eq!(r["clients"], 3);
    assert_eq!(r["files_per_client"], 40);
    assert_positive(
        &r,
        &[
            "create_ops_s",
            "stat_ops_s",
            "remove_ops_s",
            "create_latency_s",
            "stat_latency_s",
            "remove_latency_s",
            "shared_dir_create_ops_s",
            "shared_dir_stat_ops_s",
            "shared_dir_remove_ops_s",
            "collective_create_s",
            "collective_open_s",
            "collective_resize_s",
            "collective_create_latency_s",
            "local_fsync_s",
            "baseline_create_ops_s",
            "baseline_stat_ops_s",
            "baseline_remove_ops_s",
        ],
    );
    // The run directory is gone; only the (empty) test directory stays.
    let ls = c.ok(&["ls", "/bench-md"]);
    assert!(ls.trim().is_empty(), "left behind: {ls}");
    let left: Vec<_> = std::fs::read_dir(&base).unwrap().collect();
    assert!(left.is_empty(), "baseline files left behind: {left:?}");
}

#[test]
fn bench_disk_reports_every_figure_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("disk.json");
    let target = dir.path().join("target");
    let out = std::process::Command::new(exe())
        .args([
            "bench",
            "disk",
            target.to_str().unwrap(),
            "--size",
            "8M",
            "--block",
            "1M",
            "--seeks",
            "200",
            "--files",
            "300",
            "--json",
            json.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "bench disk failed: {}", text(&out));
    let r = json_of(&json);
    assert_positive(
        &r,
        &[
            "block_write_mib_s",
            "rewrite_mib_s",
            "block_read_mib_s",
            "seeks_s",
            "create_s",
            "stat_s",
            "delete_s",
        ],
    );
    assert_eq!(r["size_bytes"], 8 << 20);
    assert_eq!(r["block_bytes"], 1 << 20);
    assert!(r["caches_dropped"].is_boolean(), "{r}");
    let left: Vec<_> = std::fs::read_dir(&target).unwrap().collect();
    assert!(left.is_empty(), "test files left behind: {left:?}");
}

#[test]
fn bench_disk_refuses_bad_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(exe())
        .args([
            "bench",
            "disk",
            dir.path().to_str().unwrap(),
            "--size",
            "3M",
            "--block",
            "2M",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("--size"), "{}", text(&out));
}
