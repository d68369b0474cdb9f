//! `stripefs fsck` on a live and on a stopped cluster: a flipped stored byte and an
//! orphan object are both reported with a non-zero exit; a clean cluster exits 0.

use crate::common;

use common::{random_bytes, text, Cluster};
use std::path::{Path, PathBuf};

/// The data object files (not sidecars) under data server `server`'s target 0.
fn objects(dir: &Path, server: u32) -> Vec<PathBuf> {
    let root = dir.join(format!("data{server}/t0/objects"));
    let mut out = Vec::new();
    for sub in std::fs::read_dir(&root).unwrap() {
        for f in std::fs::read_dir(sub.unwrap().path()).unwrap() {
            let p = f.unwrap().path();
            if p.extension().is_none() {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn fsck(c: &Cluster, args: &[&str]) -> (i32, serde_json::Value) {
    let mut all = vec!["fsck", "--json"];
    all.extend_from_slice(args);
    let out = c.run(&all);
    let code = out.status.code().unwrap_or(-1);
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("fsck printed no JSON ({e}): {}", text(&out)));
    (code, report)
}

fn fids(report: &serde_json::Value, key: &str) -> Vec<u64> {
    report[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {report}"))
        .iter()
        .map(|v| v["fid"].as_u64().unwrap())
        .collect()
}

/// Puts a file striped over both servers; returns its inode number.
fn put_file(c: &Cluster) -> u64 {
    let local = c.path().join("local.bin");
    std::fs::write(&local, random_bytes(600 << 10)).unwrap();
    c.ok(&["put", local.to_str().unwrap(), "/f", "--stripe-size", "64K"]);
    let stat: serde_json::Value = serde_json::from_str(&c.ok(&["stat", "/f", "--json"])).unwrap();
    stat["ino"].as_u64().unwrap()
}

#[test]
fn fsck_finds_a_flipped_byte_and_an_orphan_live_and_stopped() {
    let c = Cluster::up(2, 1, &[]);
    let ino = put_file(&c);
    let (code, clean) = fsck(&c, &[]);
    assert_eq!(code, 0, "a clean cluster: {clean}");
    assert_eq!(clean["mode"], "live");
    assert!(
        clean["scrubbed_bytes"].as_u64().unwrap() >= 600 << 10,
        "{clean}"
    );

    // One flipped byte in a stored block of the file, and an orphan object: a copy of
    // the file's object under an inode number nobody has.
    let obj = objects(c.path(), 1).into_iter().next().expect("an object");
    assert_eq!(
        obj.file_name().unwrap().to_str().unwrap(),
        format!("{ino:016x}")
    );
    let mut bytes = std::fs::read(&obj).unwrap();
    let orphan: u64 = 0x00fe_ed00;
    let orphan_path = obj
        .parent()
        .unwrap()
        .with_file_name(format!("{:02x}", orphan % 256))
        .join(format!("{orphan:016x}"));
    std::fs::write(&orphan_path, &bytes).unwrap();
    let sidecar = |p: &Path| PathBuf::from(format!("{}.crc", p.display()));
    std::fs::copy(sidecar(&obj), sidecar(&orphan_path)).unwrap();
    bytes[5000] ^= 0x10;
    std::fs::write(&obj, &bytes).unwrap();

    let (code, live) = fsck(&c, &[]);
    assert_eq!(code, 1, "{live}");
    assert_eq!(fids(&live, "damaged_blocks"), vec![ino], "{live}");
    assert_eq!(live["damaged_blocks"][0]["object_offset"], 4096);
    assert_eq!(live["damaged_blocks"][0]["server"], 1);
    assert_eq!(fids(&live, "orphan_objects"), vec![orphan], "{live}");
    // The human report says so too.
    let out = c.run(&["fsck"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let human = String::from_utf8_lossy(&out.stdout);
    assert!(
        human.contains("DAMAGED") && human.contains("ORPHAN"),
        "{human}"
    );

    c.down();
    let dir = c.path().to_str().unwrap().to_string();
    let (code, stopped) = fsck(&c, &["--dir", &dir]);
    assert_eq!(code, 1, "{stopped}");
    assert_eq!(stopped["mode"], "stopped");
    assert_eq!(stopped["namespace_checked"], true);
    assert_eq!(fids(&stopped, "damaged_blocks"), vec![ino], "{stopped}");
    assert_eq!(fids(&stopped, "orphan_objects"), vec![orphan], "{stopped}");
}

#[test]
fn fsck_of_a_clean_stopped_cluster_exits_zero() {
    let c = Cluster::up(2, 1, &[]);
    put_file(&c);
    c.down();
    let dir = c.path().to_str().unwrap().to_string();
    let (code, report) = fsck(&c, &["--dir", &dir]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["namespace_problems"].as_array().unwrap().len(), 0);
    assert!(report["objects"].as_u64().unwrap() >= 1, "{report}");
}
