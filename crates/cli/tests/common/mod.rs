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
        Cluster::up_prefixed("stripefs-test-", servers, targets, extra)
    }

    /// [`Cluster::up`] in a temporary directory whose name starts with `prefix`.
    pub fn up_prefixed(prefix: &str, servers: u32, targets: u32, extra: &[&str]) -> Cluster {
        Cluster::up_with_env(prefix, servers, targets, extra, &[])
    }

    /// [`Cluster::up_prefixed`] with environment variables for the servers it starts
    /// (fault injection); a [`Cluster::restart`] starts them without.
    pub fn up_with_env(
        prefix: &str,
        servers: u32,
        targets: u32,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Cluster {
        let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
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
        let out = Command::new(exe())
            .args(&args)
            .envs(env.iter().copied())
            .output()
            .unwrap();
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

    /// Sums of `fields` over the servers of `role` ("meta" or "data"), from one
    /// `cluster status --json` (which itself counts a request on every server).
    pub fn status_sums(&self, role: &str, fields: &[&str]) -> Vec<u64> {
        let v: serde_json::Value =
            serde_json::from_str(&self.ok(&["cluster", "status", "--json"])).unwrap();
        let servers = v["servers"].as_array().unwrap();
        let of_role: Vec<_> = servers.iter().filter(|s| s["role"] == role).collect();
        fields
            .iter()
            .map(|f| of_role.iter().map(|s| s[*f].as_u64().unwrap()).sum())
            .collect()
    }

    pub fn restart(&self) {
        self.restart_with_env(&[]);
    }

    /// [`Cluster::restart`] with environment variables for the servers it starts.
    pub fn restart_with_env(&self, env: &[(&str, &str)]) {
        let out = Command::new(exe())
            .args(["cluster", "up", "--dir"])
            .arg(self.dir.path())
            .envs(env.iter().copied())
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

/// A randomised test's seed: `STRIPEFS_SEED` if set, else a fresh one; printed, named
/// by `what`, so that a failing run can be replayed.
pub fn test_seed(what: &str) -> u64 {
    let seed = std::env::var("STRIPEFS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    eprintln!("{what} seed: {seed} (STRIPEFS_SEED={seed} replays)");
    seed
}

/// Random bytes from a printed seed (STRIPEFS_SEED replays).
pub fn random_bytes(len: usize) -> Vec<u8> {
    use rand::{RngCore, SeedableRng};
    let seed = test_seed("random data");
    let mut v = vec![0u8; len];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

/// Why FUSE tests cannot run here, if they cannot: no /dev/fuse, or neither root (which
/// mounts with mount(2)) nor fusermount3.
pub fn fuse_unavailable() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root && Command::new("fusermount3").arg("-V").output().is_err() {
        return Some("not root and fusermount3 is not installed (apt-get install fuse3)".into());
    }
    None
}

/// Whether `dir` is a mount point now, by /proc/self/mountinfo.
pub fn is_mounted(dir: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let want = dir.display().to_string();
    info.lines()
        .any(|l| l.split(' ').nth(4) == Some(want.as_str()))
}

/// A FUSE mount served by `stripefs mount --foreground` in a child process. Dropping it
/// unmounts (lazily) and waits for the daemon, killing it if it does not exit.
pub struct FuseMount {
    pub dir: tempfile::TempDir,
    child: Option<std::process::Child>,
}

impl FuseMount {
    /// Mounts `cluster_file` on a fresh directory and waits until the mount is up.
    pub fn new(cluster_file: &Path) -> FuseMount {
        FuseMount::with_args(cluster_file, &[])
    }

    /// [`FuseMount::new`] with more `stripefs mount` arguments (e.g. `--host H`).
    pub fn with_args(cluster_file: &Path, extra: &[&str]) -> FuseMount {
        let dir = tempfile::Builder::new()
            .prefix("stripefs-mnt-")
            .tempdir()
            .unwrap();
        let log = dir.path().with_extension("log");
        let child = Command::new(exe())
            .args(["mount", "--foreground", "--cluster"])
            .arg(cluster_file)
            .arg("--log")
            .arg(&log)
            .args(extra)
            .arg(dir.path())
            .stdin(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut m = FuseMount {
            dir,
            child: Some(child),
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !is_mounted(m.path()) {
            if let Some(st) = m.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "stripefs mount exited with {st} before mounting; log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(
                std::time::Instant::now() < deadline,
                "mount did not come up"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        m
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `rel` inside the mount.
    pub fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
}

impl Drop for FuseMount {
    fn drop(&mut self) {
        // The daemon's log sits beside the mount point: kept (and named) when the test
        // failed, removed otherwise.
        let log = self.dir.path().with_extension("log");
        if std::thread::panicking() {
            eprintln!("mount daemon log kept: {}", log.display());
        } else {
            let _ = std::fs::remove_file(&log);
        }
        // `stripefs umount` uses fusermount3 where installed, else umount2(2) as root.
        let _ = Command::new(exe())
            .args(["umount", "-z"])
            .arg(self.dir.path())
            .output();
        if let Some(mut child) = self.child.take() {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if std::time::Instant::now() > deadline => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(std::time::Duration::from_millis(20)),
                }
            }
        }
    }
}

/// Runs a command with `--json FILE` added and returns the JSON it wrote.
pub fn json_of(c: &Cluster, args: &[&str]) -> serde_json::Value {
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("r.json");
    let mut all = args.to_vec();
    let p = path.display().to_string();
    all.extend(["--json", &p]);
    c.ok(&all);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The number at `key`, which must be there and positive.
pub fn positive(r: &serde_json::Value, key: &str) -> f64 {
    let v = r[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing or null: {r}"));
    assert!(v > 0.0, "{key} is not positive: {r}");
    v
}

/// Runs a command that must fail with `why` in its error output.
pub fn refused(c: &Cluster, args: &[&str], why: &str) {
    let out = c.run(args);
    assert!(
        !out.status.success(),
        "{args:?} should fail: {}",
        text(&out)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(why), "{args:?}: expected {why:?} in: {err}");
}

#[allow(unused_imports)] // Each test binary uses a different part.
pub use stripefs_testkit::skip;
