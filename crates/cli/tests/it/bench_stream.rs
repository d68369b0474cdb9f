//! `bench balance`, `bench scan` and `bench transpose` at a small size against a real
//! cluster of 4 throttled data servers: each writes its documented JSON fields with
//! positive figures, verifies its output, and refuses bad arguments with a clear error.
//! The figures themselves are not checked: benchmarks are measured by hand.

use crate::common;
use common::*;

/// Targets per server and their rate, so that every ceiling is known: 4 x 2 x 200 MiB/s.
const THROTTLE: &str = "200MiB";

fn cluster() -> Cluster {
    Cluster::up(4, 2, &["--throttle", THROTTLE])
}

#[test]
fn balance_measures_every_mix_and_size() {
    let c = cluster();
    let r = json_of(
        &c,
        &["bench", "balance", "--sizes", "256K,1M", "--files", "2"],
    );
    assert_eq!(r["pairs"], 2, "{r}");
    assert_eq!(r["verified"], true, "{r}");
    let rows = r["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2 * 3, "2 sizes x 3 mixes: {r}");
    for row in rows {
        let (i, e) = (
            row["intranode"].as_u64().unwrap(),
            row["internode"].as_u64().unwrap(),
        );
        assert_eq!(i + e, 2, "{row}");
        assert!([256 << 10, 1 << 20].contains(&row["size_bytes"].as_u64().unwrap()));
        positive(row, "mib_s");
        // 2 pairs x the slowest: internode min(400, 400), intranode 400 / 2 MiB/s.
        let ceiling = positive(row, "ceiling_mib_s");
        assert_eq!(ceiling, if i == 0 { 800.0 } else { 400.0 }, "{row}");
        assert_eq!(
            row["servers_rate_mib_s"],
            400.0 * (2 * e + i) as f64,
            "{row}"
        );
    }
    refused(
        &c,
        &["bench", "balance", "--pairs", "3"],
        "need 6 data servers",
    );
}

#[test]
fn scan_selects_verifies_and_reports_the_stream_rate() {
    let c = cluster();
    let base = tempfile::tempdir().unwrap();
    let b = base.path().display().to_string();
    let r = json_of(
        &c,
        &[
            "bench",
            "scan",
            "--size",
            "8M",
            "--record",
            "4K",
            "--select",
            "0.25",
            "--clients",
            "3",
            "--seed",
            "7",
            "--baseline",
            &b,
        ],
    );
    assert_eq!(r["verified"], true, "{r}");
    assert_eq!(r["seed"], 7, "{r}");
    assert_eq!(r["records"], 2048, "{r}");
    let f = positive(&r, "selected_fraction");
    assert!((f - 0.25).abs() < 0.05, "selected fraction {f}: {r}");
    positive(&r, "d_mib_s");
    positive(&r, "baseline_d_mib_s");
    assert_eq!(r["ceiling_mib_s"], 4.0 * 2.0 * 200.0, "{r}");
    let written = positive(&r, "written_mib");
    assert!((written - 8.0 * f).abs() < 1e-6, "{r}");
    refused(
        &c,
        &["bench", "scan", "--size", "1M", "--record", "12"],
        "--record",
    );
    refused(&c, &["bench", "scan", "--select", "2"], "--select");
}

#[test]
fn transpose_verifies_and_reports_the_stream_rate() {
    let c = cluster();
    let base = tempfile::tempdir().unwrap();
    let b = base.path().display().to_string();
    let r = json_of(
        &c,
        &[
            "bench",
            "transpose",
            "--m",
            "512",
            "--b",
            "64",
            "--clients",
            "3",
            "--baseline",
            &b,
        ],
    );
    assert_eq!(r["verified"], true, "{r}");
    assert_eq!(r["blocks_per_side"], 8, "{r}");
    assert_eq!(
        r["verified_blocks"], 64,
        "a small output is checked entirely: {r}"
    );
    assert_eq!(r["matrix_bytes"], 512 * 512 * 8, "{r}");
    positive(&r, "d_mib_s");
    positive(&r, "baseline_d_mib_s");
    assert_eq!(r["ceiling_mib_s"], 4.0 * 2.0 * 200.0, "{r}");
    refused(
        &c,
        &["bench", "transpose", "--m", "100", "--b", "64"],
        "must be a multiple of --b",
    );
    refused(
        &c,
        &[
            "bench",
            "transpose",
            "--m",
            "128",
            "--b",
            "64",
            "--clients",
            "3",
        ],
        "exceeds the 2 block rows",
    );
}
