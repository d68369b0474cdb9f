//! Process-level test fixtures: real `stripefs` server processes started with
//! `stripefs cluster up`, always stopped again by `Drop`, also when a test fails.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_stripefs")
}

pub struct Cluster {
    pub dir: tempfile::TempDir,
}

impl Cluster {
    pub fn up(servers: u32, targets: u32, extra: &[&str]) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("stripefs-test-")
            .tempdir()
            .unwrap();
        let c = Cluster { dir };
        let mut args = vec![
            "cluster".to_string(),
            "up".into(),
            "--dir".into(),
            c.dir.path().display().to_string(),
            "--servers".into(),
            servers.to_string(),
            "--targets".into(),
            targets.to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let out = Command::new(exe()).args(&args).output().unwrap();
        assert!(out.status.success(), "cluster up failed: {}", text(&out));
        c
    }

    pub fn cluster_file(&self) -> PathBuf {
        self.dir.path().join("cluster.toml")
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Runs `stripefs ARGS` against this cluster.
    pub fn run(&self, args: &[&str]) -> Output {
        Command::new(exe())
            .args(args)
            .env("STRIPEFS_CLUSTER", self.cluster_file())
            .output()
            .unwrap()
    }

    /// Runs and asserts success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "stripefs {args:?} failed: {}",
            text(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn restart(&self) {
        let out = Command::new(exe())
            .args(["cluster", "up", "--dir"])
            .arg(self.dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cluster up (restart) failed: {}",
            text(&out)
        );
    }

    pub fn down(&self) {
        let _ = Command::new(exe())
            .args(["cluster", "down", "--dir"])
            .arg(self.dir.path())
            .output();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.down();
    }
}

pub fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Random bytes from a printed seed (STRIPEFS_SEED replays).
pub fn random_bytes(len: usize) -> Vec<u8> {
    use rand::{RngCore, SeedableRng};
    let seed = std::env::var("STRIPEFS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    eprintln!("random data seed: {seed} (STRIPEFS_SEED={seed} replays)");
    let mut v = vec![0u8; len];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}
