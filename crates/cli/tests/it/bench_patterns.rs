//! The hard patterns of issue 13 in the suite, against a real cluster and a real FUSE
//! mount of it: `bench io` with unaligned transfers interleaved in one shared file, and
//! `bench md` with small files written at create and read back, in one shared
//! directory, each natively and through the mount (one process per client). Checks the
//! documented JSON keys, that every byte was verified and that every rate is positive,
//! and that contradictory arguments are refused with a message naming the flag. The
//! figures themselves are not checked: benchmarks are measured by hand.

use crate::common;
use common::*;
use serde_json::Value;

const IO: [&str; 10] = [
    "bench",
    "io",
    "--clients",
    "3",
    "--xfer",
    "47008",
    "--segments",
    "20",
    "--interleaved",
    "--keep",
];

#[test]
fn io_interleaved_unaligned_native_and_through_the_mount() {
    let c = Cluster::up(4, 1, &[]);
    let base = tempfile::tempdir().unwrap();
    let mut args = IO.to_vec();
    let b = base.path().display().to_string();
    args.extend(["--baseline", &b]);
    let r = json_of(&c, &args);
    assert_eq!(r["verified"], true, "{r}");
    assert_eq!(r["xfer_bytes"], 47008, "{r}");
    assert_eq!(r["segments"], 20, "{r}");
    assert_eq!(r["interleaved"], true, "{r}");
    assert_eq!(r["block_bytes"], 20 * 47008, "{r}");
    assert_eq!(r["mount"], Value::Null, "{r}");
    assert!(r.get("caches_dropped").is_some(), "{r}");
    for k in [
        "write_mib_s",
        "read_mib_s",
        "baseline_write_mib_s",
        "baseline_read_mib_s",
    ] {
        positive(&r, k);
    }
    // --keep: the shared file is all 3 clients' transfers, no gap, no overlap.
    let st = c.ok(&["stat", "/bench-io/file0", "--json"]);
    let st: Value = serde_json::from_str(&st).unwrap();
    assert_eq!(st["size"], 3 * 20 * 47008, "{st}");

    if let Some(why) = fuse_unavailable() {
        skip(&format!("the mount half: {why}"));
        return;
    }
    let m = FuseMount::new(&c.cluster_file());
    let mnt = m.path().display().to_string();
    let mut args = IO.to_vec();
    args.extend(["--mount", &mnt]);
    let r = json_of(&c, &args);
    assert_eq!(r["verified"], true, "{r}");
    assert_eq!(r["mount"], mnt.as_str(), "{r}");
    for k in [
        "write_mib_s",
        "read_mib_s",
        "mount_write_mib_s",
        "mount_read_mib_s",
    ] {
        positive(&r, k);
    }
    assert!(r["mount_caches_dropped"].is_boolean(), "{r}");
    // The mount's file holds what the client processes wrote: the same size.
    let len = std::fs::metadata(m.p("bench-io/mount-file0"))
        .unwrap()
        .len();
    assert_eq!(len, 3 * 20 * 47008);
    // A directory that is not a mount of this cluster is refused by name.
    let elsewhere = tempfile::tempdir().unwrap();
    let e = elsewhere.path().display().to_string();
    let mut args = IO.to_vec();
    args.extend(["--mount", &e]);
    refused(&c, &args, "is it a stripefs mount of this cluster?");
}

#[test]
fn io_refuses_contradictory_shapes() {
    let c = Cluster::up(1, 1, &[]);
    fn io<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        [&["bench", "io"][..], extra].concat()
    }
    refused(
        &c,
        &io(&["--xfer", "47008", "--segments", "20", "--block", "1M"]),
        "--block 1048576 contradicts --segments 20",
    );
    refused(
        &c,
        &io(&["--interleaved", "--file-per-process"]),
        "--file-per-process",
    );
    refused(&c, &io(&["--xfer", "47008"]), "--segments");
    refused(
        &c,
        &io(&["--segments", "0"]),
        "--segments must be at least 1",
    );
    refused(&c, &io(&["--xfer", "0"]), "--xfer must be between");
}

fn md_args(extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "bench",
        "md",
        "--clients",
        "3",
        "--files",
        "30",
        "--file-bytes",
        "3901",
        "--shared-dir",
        "--iterations",
        "3",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn check_md_native(r: &Value) {
    assert_eq!(r["verified"], true, "{r}");
    assert_eq!(r["file_bytes"], 3901, "{r}");
    assert_eq!(r["shared_dir"], true, "{r}");
    for k in [
        "shared_dir_create_ops_s",
        "shared_dir_stat_ops_s",
        "shared_dir_read_ops_s",
        "shared_dir_remove_ops_s",
        "collective_create_s",
    ] {
        positive(r, k);
    }
    // --shared-dir: no directory per client, so those figures are null, keys present.
    for k in ["create_ops_s", "read_ops_s", "remove_ops_s"] {
        assert!(r.get(k).is_some_and(Value::is_null), "{k}: {r}");
    }
}

#[test]
fn md_small_files_in_a_shared_directory_native_and_through_the_mount() {
    let c = Cluster::up(2, 1, &[]);
    let base = tempfile::tempdir().unwrap();
    let b = base.path().display().to_string();
    let args = md_args(&["--baseline", &b]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = json_of(&c, &args);
    check_md_native(&r);
    assert_eq!(r["mount"], Value::Null, "{r}");
    positive(&r, "baseline_read_ops_s");
    positive(&r, "baseline_create_ops_s");

    // Without --shared-dir both arrangements run, each with its read phase.
    let r = json_of(
        &c,
        &[
            "bench",
            "md",
            "--clients",
            "2",
            "--files",
            "10",
            "--file-bytes",
            "5000",
            "--iterations",
            "2",
        ],
    );
    assert_eq!(r["verified"], true, "{r}");
    positive(&r, "read_ops_s");
    positive(&r, "shared_dir_read_ops_s");
    // Empty files: nothing is read, so nothing is verified.
    let r = json_of(
        &c,
        &[
            "bench",
            "md",
            "--clients",
            "2",
            "--files",
            "10",
            "--iterations",
            "2",
        ],
    );
    assert_eq!(r["verified"], Value::Null, "{r}");
    assert_eq!(r["read_ops_s"], Value::Null, "{r}");
    positive(&r, "create_ops_s");

    if let Some(why) = fuse_unavailable() {
        skip(&format!("the mount half: {why}"));
        return;
    }
    let m = FuseMount::new(&c.cluster_file());
    let mnt = m.path().display().to_string();
    let args = md_args(&["--mount", &mnt]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = json_of(&c, &args);
    check_md_native(&r);
    assert_eq!(r["mount"], mnt.as_str(), "{r}");
    for k in [
        "mount_shared_dir_create_ops_s",
        "mount_shared_dir_stat_ops_s",
        "mount_shared_dir_read_ops_s",
        "mount_shared_dir_remove_ops_s",
    ] {
        positive(&r, k);
    }
    assert_eq!(r["mount_create_ops_s"], Value::Null, "{r}");
    refused(
        &c,
        &["bench", "md", "--file-bytes", "65M"],
        "--file-bytes must be at most 64M",
    );
}
