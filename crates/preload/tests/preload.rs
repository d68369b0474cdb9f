//! The interception library on a real cluster and FUSE mount: unmodified programs run
//! with `libstripefs_preload.so` (directly and through `stripefs run`) do what they do
//! without it, line by line and byte by byte, while the library serves their files
//! natively (its debug log says which). Needs `cargo build --release` first (the
//! library, the stripefs binary) and cc; `.ci/run` does both.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn release_dir() -> PathBuf {
    // target/release/deps/preload-HASH -> target/release
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    for f in ["stripefs", "libstripefs_preload.so"] {
        assert!(
            dir.join(f).exists(),
            "{} is missing: cargo build --release first",
            dir.join(f).display()
        );
    }
    dir
}

fn library() -> PathBuf {
    release_dir().join("libstripefs_preload.so")
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

/// A cluster of real server processes and its FUSE mount, both stopped on drop.
struct Cluster {
    dir: tempfile::TempDir,
    mount: PathBuf,
}

impl Cluster {
    fn up() -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("stripefs-preload-test-")
            .tempdir()
            .unwrap();
        let mount = dir.path().join("mnt");
        let mut c = Command::new(release_dir().join("stripefs"));
        c.args(["cluster", "up", "--servers", "2", "--dir"])
            .arg(dir.path());
        let cl = Cluster { dir, mount };
        run_ok(c, "cluster up");
        std::fs::create_dir_all(&cl.mount).unwrap();
        let mut m = Command::new(release_dir().join("stripefs"));
        m.arg("--cluster")
            .arg(cl.dir.path().join("cluster.toml"))
            .arg("mount")
            .arg(&cl.mount);
        run_ok(m, "stripefs mount");
        cl
    }

    /// A fresh directory on the mount.
    fn dir(&self, name: &str) -> PathBuf {
        let d = self.mount.join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(release_dir().join("stripefs"))
            .arg("umount")
            .arg(&self.mount)
            .output();
        let _ = Command::new(release_dir().join("stripefs"))
            .args(["cluster", "down", "--dir"])
            .arg(self.dir.path())
            .output();
    }
}

fn preloaded(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    c.env("LD_PRELOAD", library())
        .env("STRIPEFS_PRELOAD_DEBUG", "1");
    c
}

fn served(o: &Output) -> bool {
    String::from_utf8_lossy(&o.stderr).contains("served natively")
}

fn exercise() -> PathBuf {
    let out = release_dir().join("preload-exercise");
    let mut cc = Command::new("cc");
    cc.args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&out)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/exercise.c"));
    run_ok(cc, "cc exercise.c");
    out
}

fn same_files(a: &Path, b: &Path, names: &[&str]) {
    for n in names {
        let x = std::fs::read(a.join(n)).unwrap();
        let y = std::fs::read(b.join(n)).unwrap();
        assert!(
            x == y,
            "{n} differs between {} and {}",
            a.display(),
            b.display()
        );
    }
}

#[test]
fn a_program_sees_the_same_with_the_library_as_through_the_mount_and_on_a_local_disk() {
    let cl = Cluster::up();
    let prog = exercise();
    let local = tempfile::tempdir().unwrap();
    let reference = run_ok(
        {
            let mut c = Command::new(&prog);
            c.arg(local.path());
            c
        },
        "exercise on a local directory",
    );
    let plain_dir = cl.dir("plain");
    let plain = run_ok(
        {
            let mut c = Command::new(&prog);
            c.arg(&plain_dir);
            c
        },
        "exercise through the mount",
    );
    let lib_dir = cl.dir("lib");
    let lib = run_ok(
        {
            let mut c = preloaded(&prog);
            c.arg(&lib_dir);
            c
        },
        "exercise with the library",
    );
    assert!(served(&lib), "nothing was served natively: {}", text(&lib));
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout),
        String::from_utf8_lossy(&reference.stdout),
        "the mount differs from a local disk"
    );
    assert_eq!(
        String::from_utf8_lossy(&lib.stdout),
        String::from_utf8_lossy(&plain.stdout),
        "the library differs from the mount"
    );
    same_files(&plain_dir, &lib_dir, &["a", "b", "c"]);
    same_files(local.path(), &lib_dir, &["a", "b", "c"]);
    // And with every file served from its first call (no calls through the mount first).
    let first_dir = cl.dir("first");
    let first = run_ok(
        {
            let mut c = preloaded(&prog);
            c.env("STRIPEFS_PRELOAD_AFTER", "1").arg(&first_dir);
            c
        },
        "exercise with the library serving from the first call",
    );
    assert!(served(&first), "{}", text(&first));
    assert_eq!(
        String::from_utf8_lossy(&first.stdout),
        String::from_utf8_lossy(&plain.stdout),
        "the library (from the first call) differs from the mount"
    );
    same_files(&plain_dir, &first_dir, &["a", "b", "c"]);
}

#[test]
fn dd_shells_and_python_work_with_the_library() {
    let cl = Cluster::up();
    let d = cl.dir("tools");
    // dd in 4 KiB blocks (a write per block, each one kernel round trip without it).
    let src = tempfile::NamedTempFile::new().unwrap();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 13 % 251) as u8).collect();
    std::fs::write(src.path(), &data).unwrap();
    let mut dd = Command::new(release_dir().join("stripefs"));
    dd.args(["run", "--debug", "--", "dd", "bs=4k", "conv=fsync"])
        .arg(format!("if={}", src.path().display()))
        .arg(format!("of={}", d.join("dd.out").display()));
    let o = run_ok(dd, "stripefs run -- dd");
    assert!(served(&o), "{}", text(&o));
    assert!(
        std::fs::read(d.join("dd.out")).unwrap() == data,
        "dd's copy differs"
    );

    // A shell: redirections (served), a pipeline, appends (left to the mount).
    let script = format!(
        "cd {} && echo hello > x && cat x | tr a-z A-Z > y && echo one >> y && echo two >> y && cat y",
        d.display()
    );
    let mut sh = preloaded("bash");
    sh.args(["-c", &script]);
    let o = run_ok(sh, "bash with the library");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "HELLO\none\ntwo\n",
        "{}",
        text(&o)
    );

    // Python's open/write/read, os.walk and shutil.copytree.
    let py = format!(
        r#"
import os, shutil
base = {base:?}
os.makedirs(os.path.join(base, "tree", "sub"), exist_ok=True)
for i in range(20):
    # Unbuffered, in pieces: a file written in several calls is served natively (one
    # written in one call stays with the mount, which costs no connection).
    with open(os.path.join(base, "tree", "sub" if i % 2 else "", f"f{{i}}"), "wb", buffering=0) as f:
        data = bytes([i]) * (1000 * i + 1)
        for k in range(0, len(data), 997):
            f.write(data[k:k + 997])
shutil.copytree(os.path.join(base, "tree"), os.path.join(base, "copy"))
total = 0
for root, dirs, files in os.walk(os.path.join(base, "copy")):
    for n in files:
        with open(os.path.join(root, n), "rb") as f:
            b = f.read()
        assert b == bytes([b[0]]) * len(b), n
        total += len(b)
print(total)
"#,
        base = d.display().to_string()
    );
    let mut p = preloaded("python3");
    p.args(["-c", &py]);
    let o = run_ok(p, "python with the library");
    let want: usize = (0..20).map(|i| 1000 * i + 1).sum();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        want.to_string(),
        "{}",
        text(&o)
    );
    assert!(served(&o), "python's files were not served: {}", text(&o));
}

#[test]
fn programs_the_library_does_not_serve_work_unchanged_and_a_plain_process_pays_nothing() {
    let cl = Cluster::up();
    let d = cl.dir("unserved");
    std::fs::write(d.join("f"), b"some bytes for sha256sum\n").unwrap();
    // sha256sum reads through stdio, which the library does not see.
    let mut plain = Command::new("sha256sum");
    plain.arg(d.join("f"));
    let a = run_ok(plain, "sha256sum");
    let mut lib = preloaded("sha256sum");
    lib.arg(d.join("f"));
    let b = run_ok(lib, "sha256sum with the library");
    assert_eq!(a.stdout, b.stdout);
    // A process that touches no stripefs file: no log line, no connection.
    let o = run_ok(preloaded("true"), "true with the library");
    assert!(o.stderr.is_empty(), "{}", text(&o));
}

#[test]
fn a_cluster_that_goes_away_fails_served_calls_with_eio_not_a_hang() {
    let cl = Cluster::up();
    let d = cl.dir("away");
    let py = format!(
        r#"
import os, sys, time
fd = os.open({path:?}, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
for i in range(8):
    os.write(fd, b"x" * 65536)
os.fsync(fd)
print("served", flush=True)
sys.stdin.readline()  # the cluster stops now
t0 = time.time()
try:
    while time.time() - t0 < 60:
        os.write(fd, b"y" * 65536)
        os.fsync(fd)
    print("no error")
except OSError as e:
    print("errno", e.errno, round(time.time() - t0))
"#,
        path = d.join("f").display().to_string()
    );
    let mut p = preloaded("python3");
    p.args(["-c", &py])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = p.spawn().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line.trim(), "served");
    let mut down = Command::new(release_dir().join("stripefs"));
    down.args(["cluster", "down", "--dir"]).arg(cl.dir.path());
    run_ok(down, "cluster down");
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"\n").unwrap();
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    let o = child.wait_with_output().unwrap();
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        words.first().copied(),
        Some("errno"),
        "{line} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(words[1], "5", "EIO, as through the mount: {line}");
    let secs: u64 = words[2].parse().unwrap();
    assert!(secs < 30, "the error took {secs} s");
}

/// `sh -c SCRIPT` in `dir`, with the library (every file served from its first call)
/// or without; its stdout.
fn sh_in(dir: &Path, script: &str, with_library: bool) -> String {
    let mut c = if with_library {
        let mut c = preloaded("sh");
        c.env("STRIPEFS_PRELOAD_AFTER", "1");
        c
    } else {
        Command::new("sh")
    };
    c.args(["-c", script]).current_dir(dir);
    let o = run_ok(c, script);
    if with_library {
        assert!(served(&o), "nothing served for {script}: {}", text(&o));
    }
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn tar_cp_git_sqlite_rsync_and_fio_agree_with_and_without_the_library() {
    let cl = Cluster::up();
    let src = Path::new(env!("CARGO_MANIFEST_DIR"));
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let rows: String = (1..=500)
        .map(|i| format!("insert into t values({i},'row{i}');"))
        .collect();
    let script = format!(
        "set -e
tar cf a.tar -C {src} . && mkdir t && tar xf a.tar -C t && diff -r t {src} && echo tar
cp -a {src} c && diff -r c {src} && echo cp
git clone -q {repo} g && cd g && git fsck --full >/dev/null 2>/dev/null && echo fsck && git rev-list --count HEAD && cd ..
sqlite3 s.db \"create table t(a integer, b text); begin; {rows} commit;\" && sqlite3 s.db 'select count(*), sum(a) from t; pragma integrity_check;'
rsync -a {src}/ r/ && diff -r r {src} && echo rsync
fio --name=v --filename=f.dat --size=8M --bs=4k --rw=randwrite --verify=crc32c --do_verify=1 --ioengine=psync --output-format=terse --terse-version=3 | cut -d';' -f5
",
        src = src.display(),
        repo = repo.display()
    );
    let without = sh_in(&cl.dir("without"), &script, false);
    let with = sh_in(&cl.dir("with"), &script, true);
    assert!(without.contains("tar\ncp\n"), "{without}");
    assert_eq!(with, without, "the tools' outputs differ with the library");
    // fio's terse field 5 is its error count.
    assert!(without.trim_end().ends_with('0'), "{without}");
}

/// What a process without the library sees of `names` in `dir` (`lstat` fields, or
/// the errno), one line each.
const KERNEL_VIEW: &str = r#"
import os, sys
d = sys.argv[1]
for n in sys.argv[2:]:
    try:
        s = os.lstat(os.path.join(d, n))
        print(n, s.st_dev, s.st_ino, s.st_mode, s.st_nlink, s.st_uid, s.st_gid, s.st_size,
              s.st_blocks, s.st_blksize, s.st_mtime_ns, s.st_ctime_ns)
    except OSError as e:
        print(n, "errno", e.errno)
"#;

#[test]
fn names_changed_by_the_library_are_seen_through_the_mount_at_once_and_stats_agree() {
    let cl = Cluster::up();
    let d = cl.dir("names");
    let view = |names: &[&str]| -> String {
        let mut c = Command::new("python3");
        c.args(["-c", KERNEL_VIEW]).arg(&d).args(names);
        String::from_utf8(run_ok(c, "kernel view").stdout).unwrap()
    };
    // The program: makes files through the mount, stats them natively and prints what it
    // saw (which must be what the kernel shows), then changes names natively; between
    // the two it waits for a line on stdin, so that the test can have the kernel cache
    // the old names.
    let py = format!(
        r#"
import os, sys
d = {d:?}
os.chdir(d)
for i in range(6):
    with open(f"f{{i}}", "wb") as f:
        f.write(bytes([i]) * (70000 * i))
os.mkdir("dir")
os.mkdir("full")
open("full/x", "w").close()
os.symlink("f1", "link")
names = [f"f{{i}}" for i in range(6)] + ["dir", "full", "link", "missing"]
for n in names:
    try:
        s = os.lstat(n)
        print(n, s.st_dev, s.st_ino, s.st_mode, s.st_nlink, s.st_uid, s.st_gid, s.st_size,
              s.st_blocks, s.st_blksize, s.st_mtime_ns, s.st_ctime_ns)
    except OSError as e:
        print(n, "errno", e.errno)
sys.stdout.flush()
sys.stdin.readline()
os.rename("f1", "g1")
os.unlink("f2")
os.rename("f3", "f4")
os.mkdir("new")
os.rmdir("dir")
errors = []
for call in [lambda: os.rmdir("full"), lambda: os.unlink("nothing"), lambda: os.mkdir("new"),
             lambda: os.rename("nothing", "x")]:
    try:
        call()
        errors.append(0)
    except OSError as e:
        errors.append(e.errno)
print("errors", *errors)
print("stat f4", os.stat("f4").st_size)
"#,
        d = d.display().to_string()
    );
    let mut p = preloaded("python3");
    p.args(["-c", &py])
        .env("STRIPEFS_PRELOAD_AFTER", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = p.spawn().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let names = [
        "f0", "f1", "f2", "f3", "f4", "f5", "dir", "full", "link", "missing",
    ];
    let mut seen = String::new();
    for _ in 0..names.len() {
        std::io::BufRead::read_line(&mut out, &mut seen).unwrap();
    }
    // Stats answered natively show what the kernel shows, field by field.
    assert_eq!(seen, view(&names), "stats with the library and without");
    // The kernel has cached the old names now; the program changes them natively.
    let before = view(&["f1", "f2", "f3", "f4", "dir", "new", "g1"]);
    assert!(!before.contains("f1 errno"), "{before}");
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"go\n").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{rest}\n{err}");
    // At once, through the mount, for a process without the library.
    let after = view(&["f1", "g1", "f2", "f3", "f4", "new", "dir"]);
    let lines: Vec<&str> = after.lines().collect();
    let enoent = format!("errno {}", libc::ENOENT);
    assert!(lines[0].ends_with(&enoent), "{after}");
    assert!(!lines[1].contains("errno"), "{after}");
    assert!(lines[2].ends_with(&enoent), "{after}");
    assert!(lines[3].ends_with(&enoent), "{after}");
    assert!(
        lines[4].contains(&format!(" {} ", 3 * 70000)),
        "f4 is f3 now: {after}"
    );
    assert!(!lines[5].contains("errno"), "{after}");
    assert!(lines[6].ends_with(&enoent), "{after}");
    assert!(
        rest.contains(&format!(
            "errors {} {} {} {}",
            libc::ENOTEMPTY,
            libc::ENOENT,
            libc::EEXIST,
            libc::ENOENT
        )),
        "{rest}"
    );
    assert!(rest.contains(&format!("stat f4 {}", 3 * 70000)), "{rest}");
    for what in ["rename", "unlink", "mkdir", "rmdir", "stat"] {
        assert!(
            err.contains(&format!("{what} \"")),
            "{what} was not served natively: {err}"
        );
    }
}

/// A program that writes without closing and then starts a command (`system`, `popen`,
/// `execl` through a child) that reads the file: the command sees every byte, as it
/// would through the mount's page cache (the library flushes before each).
#[test]
fn commands_started_by_a_writer_see_its_writes() {
    let cl = Cluster::up();
    let d = cl.dir("spawn");
    let py = format!(
        r#"
import os, sys
p = os.path.join({d:?}, "f")
fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
for i in range(8):
    os.write(fd, b"x" * 1000)
print("system", os.system(f"test $(wc -c < {{p}}) = 8000") >> 8)
for i in range(8):
    os.write(fd, b"y" * 1000)
print("popen", os.popen(f"wc -c < {{p}}").read().strip())
os.close(fd)
"#,
        d = d.display().to_string()
    );
    let mut p = preloaded("python3");
    p.args(["-c", &py]).env("STRIPEFS_PRELOAD_AFTER", "1");
    let o = run_ok(p, "python with the library");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "system 0\npopen 16000\n",
        "{}",
        text(&o)
    );
    assert!(served(&o), "{}", text(&o));

    // execl, execlp and execle (variadic: built on the hooked execv family) from the
    // writing process itself: the shell it becomes checks the size; and popen from C
    // (Python's spawns through execve).
    let src = d.join("execl.c");
    let exe = release_dir().join("preload-execl");
    std::fs::write(
        &src,
        r#"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    char b[1000];
    memset(b, 'x', sizeof b);
    for (int i = 0; i < 8; i++)
        if (write(fd, b, sizeof b) != sizeof b) return 2;
    char check[4200];
    snprintf(check, sizeof check, "test $(wc -c < '%s') = 8000 && test \"$0\" = sh && test \"$1\" = one", argv[1]);
    char *env[] = {"PATH=/usr/bin:/bin", NULL};
    switch (argv[2][0]) {
    case 'l': execl("/bin/sh", "sh", "-c", check, "sh", "one", (char *)NULL); break;
    case 'p': execlp("sh", "sh", "-c", check, "sh", "one", (char *)NULL); break;
    case 'e': execle("/bin/sh", "sh", "-c", check, "sh", "one", (char *)NULL, env); break;
    case 'o': {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "wc -c < '%s'", argv[1]);
        FILE *p = popen(cmd, "r");
        long n = -1;
        if (p == NULL || fscanf(p, "%ld", &n) != 1) return 4;
        pclose(p);
        return n == 8000 ? 0 : 1;
    }
    }
    perror("exec");
    return 3;
}
"#,
    )
    .unwrap();
    let mut cc = Command::new("cc");
    cc.args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src);
    run_ok(cc, "cc execl.c");
    for how in ["l", "p", "e", "o"] {
        let mut c = preloaded(&exe);
        c.arg(d.join(format!("exec-{how}")))
            .arg(how)
            .env("STRIPEFS_PRELOAD_AFTER", "1");
        let o = run_ok(c, &format!("exec{how} with the library"));
        assert!(served(&o), "exec{how}: {}", text(&o));
    }
}
