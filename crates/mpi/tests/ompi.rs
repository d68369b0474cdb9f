//! Unmodified MPI-IO programs on stripefs through Open MPI itself: the stripefs
//! components (`make -C ompi`, found through OMPI_MCA_mca_base_component_path) serve
//! `stripefs:` names and paths on a stripefs mount with the native client. Each program
//! (ompi/tests/semantics.c and the plain MPI-IO benchmarks of examples/mpiio, C and
//! Fortran) verifies what it reads; the components' log line and MPI_File_get_info
//! show that they, not the POSIX driver, served the file. `.ci/run` installs Open MPI,
//! gfortran and parallel HDF5 first.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_stripefs-mpi"))
        .parent()
        .expect("a directory")
        .to_path_buf()
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn run_ok(mut c: Command, what: &str) -> Output {
    let o = c.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(o.status.success(), "{what}: {}", text(&o));
    o
}

/// The components and the test programs, built once per test binary into
/// target/ompi-test (the components beside a copy of libstripefs.so).
struct Built {
    components: PathBuf,
    programs: PathBuf,
}

fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let out = repo().join("target/ompi-test");
        let components = out.join("components");
        let programs = out.join("programs");
        std::fs::create_dir_all(&programs).unwrap();
        let lib = bin_dir().join("libstripefs.so");
        assert!(
            lib.exists(),
            "{} is missing: cargo build --release first",
            lib.display()
        );
        let mut make = Command::new("make");
        make.arg("-C")
            .arg(repo().join("ompi"))
            .arg(format!("OUT={}", components.display()))
            // libstripefs.so is already built (the test's own build): no nested cargo.
            .arg("CARGO=true")
            .arg(format!("STRIPEFS_LIB={}", lib.display()));
        run_ok(make, "make -C ompi");
        let mut mpicc = Command::new("mpicc");
        mpicc
            .args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(programs.join("semantics"))
            .arg(repo().join("ompi/tests/semantics.c"));
        run_ok(mpicc, "mpicc semantics.c");
        let mut make = Command::new("make");
        make.arg("-C")
            .arg(repo().join("examples/mpiio"))
            .arg(format!("OUT={}", programs.display()));
        run_ok(make, "make -C examples/mpiio");
        Built {
            components,
            programs,
        }
    })
}

fn program(name: &str) -> PathBuf {
    let p = built().programs.join(name);
    assert!(p.exists(), "{} was not built", p.display());
    p
}

/// A cluster of real server processes with a FUSE mount, both stopped on drop.
struct Cluster {
    dir: tempfile::TempDir,
    mount: PathBuf,
}

impl Cluster {
    fn up(servers: u32) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("stripefs-ompi-test-")
            .tempdir()
            .unwrap();
        let mut c = Command::new(bin_dir().join("stripefs"));
        c.args(["cluster", "up", "--servers", &servers.to_string(), "--dir"])
            .arg(dir.path());
        let mount = dir.path().join("mnt");
        let cl = Cluster { dir, mount };
        run_ok(c, "cluster up");
        std::fs::create_dir_all(&cl.mount).unwrap();
        let mut m = Command::new(bin_dir().join("stripefs"));
        m.arg("--cluster")
            .arg(cl.file())
            .arg("mount")
            .arg(&cl.mount);
        run_ok(m, "stripefs mount");
        cl
    }

    fn file(&self) -> PathBuf {
        self.dir.path().join("cluster.toml")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(bin_dir().join("stripefs"))
            .arg("umount")
            .arg(&self.mount)
            .output();
        let _ = Command::new(bin_dir().join("stripefs"))
            .args(["cluster", "down", "--dir"])
            .arg(self.dir.path())
            .output();
    }
}

/// `mpirun -n N` with the stripefs components on Open MPI's component path (and Open
/// MPI's own directory after them), the cluster for `stripefs:` names, and the
/// components' log of each file they serve.
fn mpirun(n: u32, cluster: &Path) -> Command {
    let system = Command::new("ompi_info")
        .args(["--path", "pkglibdir", "--parsable"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let system = system
        .lines()
        .find_map(|l| l.strip_prefix("path:pkglibdir:"))
        .expect("ompi_info names Open MPI's component directory")
        .to_string();
    let mut c = Command::new("mpirun");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        c.arg("--allow-run-as-root");
    }
    c.args(["--oversubscribe", "-n", &n.to_string()])
        .args(["--mca", "fs_stripefs_verbose", "1"])
        .args([
            "-x",
            "OMPI_MCA_mca_base_component_path",
            "-x",
            "STRIPEFS_CLUSTER",
        ])
        .args(["-x", "EXPECT_STRIPEFS"])
        .env(
            "OMPI_MCA_mca_base_component_path",
            format!("{}:{system}", built().components.display()),
        )
        .env("STRIPEFS_CLUSTER", cluster)
        .env("EXPECT_STRIPEFS", "1");
    c
}

const NATIVE: &str = "opened with the native client";

fn served_natively(o: &Output) -> bool {
    String::from_utf8_lossy(&o.stderr).contains(NATIVE)
        || String::from_utf8_lossy(&o.stdout).contains(NATIVE)
}

#[test]
fn ompi_info_lists_the_three_components() {
    let b = built();
    let o = run_ok(
        {
            let mut c = Command::new("ompi_info");
            c.env("OMPI_MCA_mca_base_component_path", &b.components);
            c
        },
        "ompi_info",
    );
    let out = String::from_utf8_lossy(&o.stdout);
    for fw in ["fs", "fbtl", "fcoll"] {
        assert!(
            out.lines()
                .any(|l| l.contains(&format!("MCA {fw}: stripefs"))),
            "ompi_info does not list {fw}/stripefs:\n{out}"
        );
    }
}

#[test]
fn the_semantics_hold_on_stripefs_names_mount_paths_and_a_local_directory() {
    let cl = Cluster::up(4);
    for path in [
        "stripefs:/semantics.dat".to_string(),
        cl.mount.join("semantics.dat").display().to_string(),
    ] {
        let mut c = mpirun(4, &cl.file());
        c.arg(program("semantics")).arg(&path);
        let o = run_ok(c, &format!("semantics on {path}"));
        assert!(
            served_natively(&o),
            "{path} was not served by stripefs: {}",
            text(&o)
        );
        assert!(String::from_utf8_lossy(&o.stdout).contains("ok MPI_File_delete"));
    }
    // The same program passes on a local directory with Open MPI's own drivers (the
    // reference the stripefs runs are held to); atomic mode is honoured there.
    let local = tempfile::tempdir().unwrap();
    let mut c = mpirun(4, &cl.file());
    c.env("EXPECT_STRIPEFS", "0")
        .arg(program("semantics"))
        .arg(local.path().join("semantics.dat"));
    let o = run_ok(c, "semantics on a local directory");
    assert!(
        !served_natively(&o),
        "a local file went to stripefs: {}",
        text(&o)
    );
}

#[test]
fn benchmarks_verify_through_the_components_and_the_posix_driver_on_the_mount() {
    let cl = Cluster::up(4);
    let mount_file = cl.mount.join("mit.dat").display().to_string();
    for (path, collective) in [
        ("stripefs:/mit.dat".to_string(), false),
        ("stripefs:/mit.dat".to_string(), true),
        (mount_file.clone(), true),
    ] {
        let mut c = mpirun(4, &cl.file());
        c.arg(program("mpi-io-test"))
            .args(["--block", "4M", "--xfer", "256K", "--unlink"]);
        if collective {
            c.arg("--collective");
        }
        c.arg(&path);
        let o = run_ok(c, &format!("mpi-io-test on {path}"));
        assert!(served_natively(&o), "{}", text(&o));
        let line = String::from_utf8_lossy(&o.stdout);
        let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
        assert!(v["write_mib_s"].as_f64().unwrap() > 0.0, "{line}");
    }
    // The same file name on the mount with the POSIX driver forced: not stripefs's.
    let mut c = mpirun(4, &cl.file());
    c.args(["--mca", "fs", "ufs", "--mca", "fbtl", "posix"])
        .arg(program("mpi-io-test"))
        .args([
            "--block",
            "4M",
            "--xfer",
            "256K",
            "--collective",
            "--unlink",
        ])
        .arg(&mount_file);
    let o = run_ok(c, "mpi-io-test through the mount and the POSIX driver");
    assert!(!served_natively(&o), "{}", text(&o));

    for args in [
        vec!["btio", "--grid", "32", "--steps", "3", "--unlink"],
        vec![
            "btio",
            "--grid",
            "32",
            "--steps",
            "3",
            "--independent",
            "--unlink",
        ],
        vec!["perf", "--size", "1M", "--unlink"],
        vec!["overlap", "--block", "2M", "--iterations", "2", "--unlink"],
    ] {
        let mut c = mpirun(4, &cl.file());
        c.arg(program(args[0]))
            .args(&args[1..])
            .arg("stripefs:/bench.dat");
        let o = run_ok(c, &format!("{args:?}"));
        assert!(served_natively(&o), "{args:?}: {}", text(&o));
    }
    let mut c = mpirun(4, &cl.file());
    c.arg(program("mpi-md-test"))
        .args(["--files", "20"])
        .arg(cl.mount.join("md").display().to_string());
    std::fs::create_dir_all(cl.mount.join("md")).unwrap();
    run_ok(c, "mpi-md-test on the mount");
}

#[test]
fn fortran_programs_verify_on_stripefs() {
    let cl = Cluster::up(2);
    for (prog, args) in [("btio-f90", vec!["16", "2"]), ("subarray", vec![])] {
        for path in [
            "stripefs:/fortran.dat".to_string(),
            cl.mount.join("fortran.dat").display().to_string(),
        ] {
            let mut c = mpirun(4, &cl.file());
            c.arg(program(prog)).arg(&path).args(&args);
            let o = run_ok(c, &format!("{prog} on {path}"));
            assert!(served_natively(&o), "{prog} on {path}: {}", text(&o));
        }
    }
}

#[test]
fn an_unreachable_cluster_is_an_io_error_naming_the_server() {
    let cl = Cluster::up(1);
    let file = cl.file();
    let mut down = Command::new(bin_dir().join("stripefs"));
    down.args(["cluster", "down", "--dir"]).arg(cl.dir.path());
    run_ok(down, "cluster down");
    let mut c = mpirun(2, &file);
    c.arg(program("mpi-io-test"))
        .args(["--block", "1M", "--xfer", "1M"])
        .arg("stripefs:/x.dat");
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(err.contains("MPI_ERR_IO"), "{}", text(&o));
    assert!(
        err.contains("unreachable"),
        "the server is named: {}",
        text(&o)
    );
}

#[test]
fn parallel_hdf5_writes_and_reads_a_dataset_and_h5dump_shows_it_through_the_mount() {
    let cl = Cluster::up(4);
    let on_mount = cl.mount.join("grid.h5");
    for path in [
        "stripefs:/grid.h5".to_string(),
        on_mount.display().to_string(),
    ] {
        let mut c = mpirun(4, &cl.file());
        c.arg(program("hdf5_rw"))
            .args(["--rows", "64", "--cols", "32"])
            .arg(&path);
        let o = run_ok(c, &format!("hdf5_rw on {path}"));
        assert!(served_natively(&o), "hdf5_rw on {path}: {}", text(&o));
    }
    // The file written natively reads through the mount with the HDF5 tools: value of
    // cell (r, c) is r * cols + c.
    let mut dump = Command::new("h5dump");
    dump.arg("-d")
        .arg("/data")
        .arg("-y")
        .arg("-w")
        .arg("0")
        .arg(&on_mount);
    let o = run_ok(dump, "h5dump through the mount");
    let out = String::from_utf8_lossy(&o.stdout);
    let values: Vec<f64> = out
        .split(|ch: char| ch == ',' || ch.is_whitespace())
        .filter_map(|t| t.parse::<f64>().ok())
        .collect();
    let want: Vec<f64> = (0..64 * 32).map(|i| i as f64).collect();
    assert!(
        values.windows(want.len()).any(|w| w == want.as_slice()),
        "h5dump does not show the dataset written: {out}"
    );
}

#[test]
fn a_user_who_cannot_read_the_cluster_file_gets_the_mount_through_open_mpis_driver() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        // Where the environment is required (CI), it must be there.
        assert!(
            !std::env::var("STRIPEFS_REQUIRE_ENV").is_ok_and(|v| v == "1"),
            "acting as another user needs root; STRIPEFS_REQUIRE_ENV=1 requires it"
        );
        eprintln!("skipping: acting as another user needs root");
        return;
    }
    let cl = Cluster::up(2);
    // The cluster file stays 0600 root's; the mount (allow_other) is reachable.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(cl.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let public = cl.mount.join("pub");
    std::fs::create_dir(&public).unwrap();
    std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let c = mpirun(2, &cl.file());
    let args: Vec<std::ffi::OsString> = std::iter::once(c.get_program().to_owned())
        .chain(c.get_args().map(|a| a.to_owned()))
        .collect();
    let mut as_nobody = Command::new("setpriv");
    as_nobody
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "env",
            "HOME=/tmp",
        ])
        .args(args.iter().filter(|a| *a != "--allow-run-as-root"))
        .arg(program("semantics"))
        .arg(public.join("n.dat"));
    for (k, v) in c.get_envs() {
        if let Some(v) = v {
            as_nobody.env(k, v);
        }
    }
    as_nobody.env("EXPECT_STRIPEFS", "0");
    let o = run_ok(as_nobody, "semantics as nobody on the mount");
    assert!(!served_natively(&o), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("ok MPI_File_delete"));
}
