//! Under a real `mpirun` (OpenMPI): every `stripefs-mpi` benchmark on a real cluster
//! (server processes started with the `stripefs` binary beside this one), and the C
//! interface: `examples/c/files.c` built with cc and `examples/c/mpi_io.c` built with
//! mpicc against `libstripefs.so`, run and checked. `.ci/run` installs OpenMPI first.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_stripefs-mpi"))
        .parent()
        .expect("a directory")
        .to_path_buf()
}

/// A file built beside stripefs-mpi (the stripefs binary, libstripefs.so).
fn built(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.exists(),
        "{} is missing: build the workspace first (cargo build --release)",
        p.display()
    );
    p
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A cluster of real server processes, stopped on drop (also when a test fails).
struct Cluster {
    dir: tempfile::TempDir,
}

impl Cluster {
    fn up(servers: u32) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("stripefs-mpi-test-")
            .tempdir()
            .unwrap();
        let o = Command::new(built("stripefs"))
            .args(["cluster", "up", "--servers", &servers.to_string(), "--dir"])
            .arg(dir.path())
            .output()
            .unwrap();
        let c = Cluster { dir };
        assert!(o.status.success(), "cluster up: {}", text(&o));
        c
    }

    fn file(&self) -> PathBuf {
        self.dir.path().join("cluster.toml")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(built("stripefs"))
            .args(["cluster", "down", "--dir"])
            .arg(self.dir.path())
            .output();
    }
}

/// `mpirun -n N` with what OpenMPI needs here: more ranks than cores, and root.
fn mpirun(n: u32) -> Command {
    let mut c = Command::new("mpirun");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        c.arg("--allow-run-as-root");
    }
    c.args(["--oversubscribe", "-n", &n.to_string()]);
    c
}

fn run_ok(mut c: Command, what: &str) -> String {
    let o = c
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(o.status.success(), "{what}: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn every_benchmark_runs_under_mpirun_with_one_client_per_rank() {
    let cl = Cluster::up(2);
    let out = tempfile::tempdir().unwrap();
    let exe = env!("CARGO_BIN_EXE_stripefs-mpi");
    let cases: &[(&str, u32, &[&str], &[&str])] = &[
        (
            "io",
            4,
            &["--block", "8M", "--xfer", "1M"],
            &["write_mib_s", "read_mib_s"],
        ),
        (
            "io",
            3,
            &["--xfer", "47008", "--segments", "20", "--interleaved"],
            &["write_mib_s", "read_mib_s"],
        ),
        (
            "md",
            4,
            &["--iterations", "5"],
            &[
                "collective_create_s",
                "collective_open_s",
                "collective_resize_s",
            ],
        ),
        (
            "perf",
            4,
            &["--size", "1M"],
            &["write_mib_s", "read_mib_s", "write_sync_mib_s"],
        ),
        (
            "btio",
            4,
            &["--grid", "16", "--steps", "2"],
            &["collective_mib_s", "independent_mib_s"],
        ),
        (
            "overlap",
            2,
            &["--size", "8M", "--chunk", "2M", "--compute-ms", "5"],
            &["compute_s", "io_s", "total_s", "overlap_efficiency"],
        ),
    ];
    for (i, (bench, ranks, args, keys)) in cases.iter().enumerate() {
        let j = out.path().join(format!("{bench}-{i}.json"));
        let mut c = mpirun(*ranks);
        c.arg(exe)
            .arg(bench)
            .arg("--cluster")
            .arg(cl.file())
            .args(*args)
            .arg("--json")
            .arg(&j);
        let stdout = run_ok(c, &format!("stripefs-mpi {bench}"));
        assert!(!stdout.is_empty(), "{bench} printed nothing");
        let r = json(&j);
        assert_eq!(r["verified"], true, "{bench}: {r}");
        for k in *keys {
            let v = r[k]
                .as_f64()
                .unwrap_or_else(|| panic!("{bench}: no {k} in {r}"));
            assert!(v > 0.0, "{bench}: {k} = {v}");
        }
        let ranks_seen = r.get("clients").or(r.get("ranks")).and_then(|v| v.as_u64());
        assert_eq!(ranks_seen, Some(*ranks as u64), "{bench}: {r}");
    }
    // A bad argument fails the whole job with the reason, once per rank at most.
    let mut c = mpirun(3);
    c.arg(exe).arg("btio").arg("--cluster").arg(cl.file());
    let o = c.output().unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("square number of ranks"), "{}", text(&o));
}

#[test]
fn the_c_examples_build_and_run() {
    let cl = Cluster::up(2);
    let lib = built("libstripefs.so");
    let libdir = lib.parent().unwrap().to_path_buf();
    let inc = repo().join("include");
    let out = tempfile::tempdir().unwrap();
    let build = |cc: &str, src: &str, exe: &Path| {
        let mut c = Command::new(cc);
        c.args(["-Wall", "-Wextra", "-Werror", "-O2", "-I"])
            .arg(&inc)
            .arg(repo().join("examples/c").join(src))
            .arg("-L")
            .arg(&libdir)
            .arg("-lstripefs")
            .arg(format!("-Wl,-rpath,{}", libdir.display()))
            .arg("-o")
            .arg(exe);
        run_ok(c, &format!("{cc} {src}"));
    };
    let files = out.path().join("files");
    build("cc", "files.c", &files);
    let mut c = Command::new(&files);
    c.arg(cl.file());
    assert!(run_ok(c, "files").contains("files.c: ok"));

    let mpi_io = out.path().join("mpi_io");
    build("mpicc", "mpi_io.c", &mpi_io);
    for n in [1, 4] {
        let mut c = mpirun(n);
        c.arg(&mpi_io).arg(cl.file());
        let stdout = run_ok(c, "mpi_io");
        assert!(
            stdout.contains(&format!("mpi_io.c: {n} ranks")) && stdout.contains("verified"),
            "{stdout}"
        );
    }
}
