//! POSIX conformance through a real mount, as root and as unprivileged users.
//!
//! Every case runs system calls in `tests/posix/matrix.py` (Python's `os` and `socket`,
//! no packages) as the caller under test: as root directly, as anyone else through
//! `setpriv --reuid --regid --groups` (or, where timing matters, in a child the runner
//! forks and drops to that user). Each case asserts the errno and the resulting
//! attributes, and a failing test lists every case that went wrong, not just the first.
//!
//! Every test runs twice: `NAME::mount` on a stripefs mount of a 2-data-server cluster
//! (two mounts of it, for the coherence cases; tests running at the same time share the
//! cluster, each in a directory of its own), and `NAME::tmpfs` on a directory in
//! /dev/shm. The tmpfs run is the reference: the expectations here are what Linux does,
//! and a tmpfs failure means the expectation is wrong, not the file system. Both need
//! root (to act as other users); the mount also needs /dev/fuse. Otherwise they skip.
//!
//! The matrices (`matrix_*`) are generated: call x file type x caller x mode bits (and
//! sticky), with the expected outcome from a small model of Linux's permission checks
//! ([`may`], [`may_delete`]).

use crate::common;
use common::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

const RUNNER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/posix/matrix.py");
const PYTHON: &str = "/usr/bin/python3";

// ---------------------------------------------------------------------------------------
// Callers

/// A caller: uid, primary gid and supplementary groups.
#[derive(Clone, Copy, Debug)]
struct Who {
    name: &'static str,
    uid: u32,
    gid: u32,
    groups: &'static [u32],
}

const ROOT: Who = Who {
    name: "root",
    uid: 0,
    gid: 0,
    groups: &[],
};
/// Owns the fixtures (1001:1001); also in group 3000.
const OWNER: Who = Who {
    name: "owner",
    uid: 1001,
    gid: 1001,
    groups: &[1001, 3000],
};
/// In the fixtures' group 1001 through a supplementary group.
const MEMBER: Who = Who {
    name: "member",
    uid: 1002,
    gid: 1002,
    groups: &[1002, 1001],
};
/// In the fixtures' group 1001 through the primary gid only.
const PGID: Who = Who {
    name: "pgid",
    uid: 1004,
    gid: 1001,
    groups: &[1004],
};
/// Neither the owner nor in the group.
const OTHER: Who = Who {
    name: "other",
    uid: 1003,
    gid: 1003,
    groups: &[1003],
};
const CALLERS: [Who; 5] = [ROOT, OWNER, MEMBER, PGID, OTHER];

impl Who {
    fn root(&self) -> bool {
        self.uid == 0
    }
    fn in_group(&self, g: u32) -> bool {
        self.gid == g || self.groups.contains(&g)
    }
    fn describe(&self) -> String {
        format!(
            "{} (uid {} gid {} groups {:?})",
            self.name, self.uid, self.gid, self.groups
        )
    }
}

// ---------------------------------------------------------------------------------------
// The model

const R: u32 = 4;
const W: u32 = 2;
const X: u32 = 1;

/// Linux's generic_permission: root may read and write anything, search any directory
/// and execute a file with any x bit; others get the owner, else the group, else the
/// other class of bits (only the first class that matches counts).
fn may(who: Who, owner: u32, group: u32, mode: u32, want: u32, dir: bool) -> bool {
    if who.root() {
        return want & X == 0 || dir || mode & 0o111 != 0;
    }
    let bits = if who.uid == owner {
        mode >> 6
    } else if who.in_group(group) {
        mode >> 3
    } else {
        mode
    } & 7;
    bits & want == want
}

/// May `who` remove (or rename away) an entry owned by `entry_owner` from a directory
/// (owner, group, mode)? EACCES without write and search on the directory; EPERM in a
/// sticky directory unless the caller owns the entry or the directory, or is root.
fn may_delete(who: Who, dir: (u32, u32, u32), entry_owner: u32) -> &'static str {
    let (downer, dgroup, dmode) = dir;
    if !may(who, downer, dgroup, dmode, W | X, true) {
        return "EACCES";
    }
    if dmode & 0o1000 != 0 && !who.root() && who.uid != downer && who.uid != entry_owner {
        return "EPERM";
    }
    "OK"
}

fn ok_or(cond: bool, err: &'static str) -> &'static str {
    if cond {
        "OK"
    } else {
        err
    }
}

// ---------------------------------------------------------------------------------------
// Steps for the runner (see matrix.py for their meaning)

fn open(p: &str, flags: &[&str], mode: u32, fd: &str) -> Value {
    json!({"op": "open", "path": p, "flags": flags, "mode": mode, "fd": fd})
}
fn close(fd: &str) -> Value {
    json!({"op": "close", "fd": fd})
}
fn write(fd: &str, data: &str) -> Value {
    json!({"op": "write", "fd": fd, "data": data})
}
fn read(fd: &str, n: usize) -> Value {
    json!({"op": "read", "fd": fd, "n": n})
}
/// fallocate(2) with `mode` (1: FALLOC_FL_KEEP_SIZE).
fn fallocate(fd: &str, mode: u32, offset: u64, len: u64) -> Value {
    json!({"op": "fallocate", "fd": fd, "mode": mode, "offset": offset, "len": len})
}
fn ftruncate(fd: &str, len: u64) -> Value {
    json!({"op": "ftruncate", "fd": fd, "len": len})
}
fn fstat(fd: &str) -> Value {
    json!({"op": "fstat", "fd": fd})
}
fn stat(p: &str) -> Value {
    json!({"op": "stat", "path": p})
}
fn lstat(p: &str) -> Value {
    json!({"op": "lstat", "path": p})
}
fn exists(p: &str) -> Value {
    json!({"op": "exists", "path": p})
}
fn truncate(p: &str, len: u64) -> Value {
    json!({"op": "truncate", "path": p, "len": len})
}
fn chmod(p: &str, mode: u32) -> Value {
    json!({"op": "chmod", "path": p, "mode": mode})
}
/// chown(2); -1 leaves that id alone.
fn chown(p: &str, uid: i64, gid: i64) -> Value {
    json!({"op": "chown", "path": p, "uid": uid, "gid": gid})
}
fn link(src: &str, dst: &str) -> Value {
    json!({"op": "link", "src": src, "dst": dst})
}
fn symlink(target: &str, dst: &str) -> Value {
    json!({"op": "symlink", "target": target, "dst": dst})
}
fn rename(src: &str, dst: &str) -> Value {
    json!({"op": "rename", "src": src, "dst": dst})
}
fn unlink(p: &str) -> Value {
    json!({"op": "unlink", "path": p})
}
fn mkdir(p: &str, mode: u32) -> Value {
    json!({"op": "mkdir", "path": p, "mode": mode})
}
fn rmdir(p: &str) -> Value {
    json!({"op": "rmdir", "path": p})
}
fn mkfifo(p: &str, mode: u32) -> Value {
    json!({"op": "mkfifo", "path": p, "mode": mode})
}
fn mknod(p: &str, mode: u32, major: u32, minor: u32) -> Value {
    json!({"op": "mknod", "path": p, "mode": mode, "major": major, "minor": minor})
}
fn listdir(p: &str) -> Value {
    json!({"op": "listdir", "path": p})
}
/// access(2) with a mode string of "rwx" letters ("" is F_OK).
fn access(p: &str, mode: &str) -> Value {
    json!({"op": "access", "path": p, "mode": mode})
}
/// utimensat(2): each time is [sec, nsec], "now" or "omit"; both null passes NULL.
fn utimens(p: &str, atime: Value, mtime: Value) -> Value {
    json!({"op": "utimens", "path": p, "atime": atime, "mtime": mtime})
}
fn bind_unix(p: &str, sock: &str) -> Value {
    json!({"op": "bind_unix", "path": p, "sock": sock})
}
fn connect_unix(p: &str, sock: &str, data: &str) -> Value {
    json!({"op": "connect_unix", "path": p, "sock": sock, "data": data})
}
fn read_file(p: &str) -> Value {
    json!({"op": "read_file", "path": p})
}
fn write_file(p: &str, data: &str) -> Value {
    json!({"op": "write_file", "path": p, "data": data})
}
fn sleep_ms(ms: u64) -> Value {
    json!({"op": "sleep", "s": ms as f64 / 1000.0})
}
fn now() -> Value {
    json!({"op": "now"})
}

/// The pause between a change and the one before it, so that timestamps can differ
/// even on a clock that ticks in jiffies.
const TICK_MS: u64 = 20;

// ---------------------------------------------------------------------------------------
// Running cases

/// One step's outcome: "OK" or an errno name, and the value (stat fields, data...).
#[derive(Clone, Debug)]
struct Res {
    err: String,
    value: Value,
}

impl Res {
    fn u(&self, field: &str) -> u64 {
        self.value[field]
            .as_u64()
            .unwrap_or_else(|| panic!("no {field} in {:?} ({})", self.value, self.err))
    }
}

/// The file system under test: a stripefs mount (and a second mount of the same cluster)
/// or a tmpfs directory. `base` (and `base2`, the same directory through the second
/// mount) is a fresh directory, mode 0777, owned by root.
struct Fs {
    kind: &'static str,
    base: PathBuf,
    base2: PathBuf,
    _shared: Option<Arc<Shared>>,
    _tmp: Option<tempfile::TempDir>,
}

/// A cluster and two mounts of it, shared by the tests that run at the same time (each
/// in its own directory): the last test to let go unmounts and stops the cluster, also
/// when it fails. Fields drop in order: the mounts before the cluster.
struct Shared {
    a: FuseMount,
    b: FuseMount,
    _cluster: Cluster,
}

static SHARED: Mutex<Weak<Shared>> = Mutex::new(Weak::new());
static NEXT_BASE: AtomicUsize = AtomicUsize::new(0);

fn shared_mounts() -> Arc<Shared> {
    let mut g = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = g.upgrade() {
        return s;
    }
    let cluster = Cluster::up(2, 1, &[]);
    let s = Arc::new(Shared {
        a: FuseMount::new(&cluster.cluster_file()),
        b: FuseMount::new(&cluster.cluster_file()),
        _cluster: cluster,
    });
    *g = Arc::downgrade(&s);
    s
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

impl Fs {
    fn mount() -> Option<Fs> {
        if let Some(why) = fuse_unavailable() {
            skip(&why);
            return None;
        }
        if !is_root() {
            skip("needs root to act as other users");
            return None;
        }
        let shared = shared_mounts();
        let t = format!("t{}", NEXT_BASE.fetch_add(1, Ordering::Relaxed));
        let fs = Fs {
            kind: "mount",
            base: shared.a.p(&t),
            base2: shared.b.p(&t),
            _shared: Some(shared),
            _tmp: None,
        };
        fs.setup(&[chmod(
            &fs.base.parent().unwrap().display().to_string(),
            0o755,
        )]);
        fs.setup(&[mkdir(&fs.p(""), 0o777)]);
        Some(fs)
    }

    fn tmpfs() -> Option<Fs> {
        if !is_root() {
            skip("needs root to act as other users");
            return None;
        }
        let tmp = tempfile::Builder::new()
            .prefix("stripefs-posix-")
            .tempdir_in("/dev/shm")
            .unwrap();
        let base = tmp.path().join("t");
        let fs = Fs {
            kind: "tmpfs",
            base: base.clone(),
            base2: base,
            _shared: None,
            _tmp: Some(tmp),
        };
        fs.setup(&[chmod(
            &fs.base.parent().unwrap().display().to_string(),
            0o755,
        )]);
        fs.setup(&[mkdir(&fs.p(""), 0o777)]);
        Some(fs)
    }

    /// `rel` under the base directory (through the first mount).
    fn p(&self, rel: &str) -> String {
        if rel.is_empty() {
            return self.base.display().to_string();
        }
        self.base.join(rel).display().to_string()
    }

    /// `rel` under the base directory through the second mount.
    fn p2(&self, rel: &str) -> String {
        self.base2.join(rel).display().to_string()
    }

    /// Runs `cases` (each a list of steps) as `who`, `jobs` cases at a time, and returns
    /// each case's step outcomes.
    fn run_cases(&self, who: Who, cases: &[Vec<Value>], jobs: usize) -> Vec<Vec<Res>> {
        let input: Vec<Value> = cases
            .iter()
            .enumerate()
            .map(|(i, steps)| json!({"id": i.to_string(), "steps": steps}))
            .collect();
        let mut cmd = if who.root() {
            Command::new(PYTHON)
        } else {
            let mut c = Command::new("setpriv");
            c.arg(format!("--reuid={}", who.uid))
                .arg(format!("--regid={}", who.gid));
            if who.groups.is_empty() {
                c.arg("--clear-groups");
            } else {
                let g: Vec<String> = who.groups.iter().map(|g| g.to_string()).collect();
                c.arg(format!("--groups={}", g.join(",")));
            }
            c.arg(PYTHON);
            c
        };
        // STRIPEFS_POSIX_PRELOAD=LIB runs the cases with the interception library (by
        // hand: `STRIPEFS_POSIX_PRELOAD=$PWD/target/release/libstripefs_preload.so
        // STRIPEFS_PRELOAD_AFTER=1 cargo test --release -p stripefs --test it posix_matrix::
        // -- --skip tmpfs`, the mount cases).
        if let Some(lib) = std::env::var_os("STRIPEFS_POSIX_PRELOAD") {
            cmd.env("LD_PRELOAD", lib);
        }
        cmd.args(["-I", "-X", "utf8", RUNNER, "--jobs", &jobs.to_string()])
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("starting the case runner");
        let text_in = serde_json::to_vec(&input).unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&text_in);
        });
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        assert!(
            out.status.success(),
            "case runner as {} failed: {}",
            who.describe(),
            text(&out)
        );
        let got: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("runner output is not JSON ({e}): {}", text(&out));
        });
        assert_eq!(got.len(), cases.len());
        got.iter()
            .map(|c| {
                c["results"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| Res {
                        err: r["err"].as_str().unwrap().to_string(),
                        value: r["value"].clone(),
                    })
                    .collect()
            })
            .collect()
    }

    /// Runs steps as root that must all succeed (fixtures).
    fn setup(&self, steps: &[Value]) {
        let res = self.run_cases(ROOT, &[steps.to_vec()], 1).remove(0);
        let bad: Vec<String> = steps
            .iter()
            .zip(&res)
            .filter(|(_, r)| r.err != "OK")
            .map(|(s, r)| format!("  {s}: {} ({})", r.err, r.value))
            .collect();
        assert!(
            bad.is_empty(),
            "[{}] fixture setup failed:\n{}",
            self.kind,
            bad.join("\n")
        );
    }

    /// Runs a script as `who` and checks each step's expected outcome.
    fn exec(&self, who: Who, script: &Script) -> Outcome {
        let res = self
            .run_cases(who, std::slice::from_ref(&script.steps), 1)
            .remove(0);
        let mut o = Outcome {
            kind: self.kind,
            res,
            failures: Vec::new(),
        };
        o.check_script(who, script, None);
        o
    }
}

/// Steps with the outcome each must have (None: not checked).
#[derive(Default, Clone)]
struct Script {
    steps: Vec<Value>,
    expect: Vec<Option<&'static str>>,
}

impl Script {
    fn new() -> Script {
        Script::default()
    }
    /// A step whose outcome is not checked; returns its index.
    fn run(&mut self, step: Value) -> usize {
        self.steps.push(step);
        self.expect.push(None);
        self.steps.len() - 1
    }
    /// A step that must succeed.
    fn ok(&mut self, step: Value) -> usize {
        self.expect_(step, "OK")
    }
    /// A step that must fail with `errno`.
    fn err(&mut self, errno: &'static str, step: Value) -> usize {
        self.expect_(step, errno)
    }
    fn expect_(&mut self, step: Value, e: &'static str) -> usize {
        self.steps.push(step);
        self.expect.push(Some(e));
        self.steps.len() - 1
    }
    /// Runs `inner` as `who` in a child of the (root) runner; returns the step index.
    fn as_user(&mut self, who: Who, inner: &Script) -> usize {
        self.ok(json!({
            "op": "as", "uid": who.uid, "gid": who.gid, "groups": who.groups,
            "steps": inner.steps,
        }))
    }
}

/// A script's outcomes and the failures found in them so far.
struct Outcome {
    kind: &'static str,
    res: Vec<Res>,
    failures: Vec<String>,
}

impl Outcome {
    fn check_script(&mut self, who: Who, script: &Script, nested: Option<usize>) {
        let res: Vec<Res> = match nested {
            None => self.res.clone(),
            Some(i) => match self.res[i].value.as_array() {
                Some(a) => a
                    .iter()
                    .map(|r| Res {
                        err: r["err"].as_str().unwrap_or("?").to_string(),
                        value: r["value"].clone(),
                    })
                    .collect(),
                None => return,
            },
        };
        for (i, (step, want)) in script.steps.iter().zip(&script.expect).enumerate() {
            if let Some(want) = want {
                if res[i].err != *want {
                    self.failures.push(format!(
                        "as {}: {step}: expected {want}, got {} ({})",
                        who.describe(),
                        res[i].err,
                        res[i].value
                    ));
                }
            }
        }
    }

    /// Checks the expectations of `inner`, run by [`Script::as_user`] at step `i`.
    fn nested(&mut self, i: usize, who: Who, inner: &Script) -> Vec<Res> {
        self.check_script(who, inner, Some(i));
        self.res[i]
            .value
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|r| Res {
                        err: r["err"].as_str().unwrap_or("?").to_string(),
                        value: r["value"].clone(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Records a failure unless stat field `f` of step `i` lies between the clock
    /// readings of steps `lo` and `hi` ([`now`]). The kernel's clock is coarse (it may lag
    /// time_ns by a tick): 50 ms of slack.
    fn near(&mut self, i: usize, f: &str, lo: usize, hi: usize, what: &str) {
        let slack = 50_000_000;
        let at = |k: usize| self.res[k].value.as_u64().unwrap_or(0) as i128;
        let (lo, hi) = (at(lo), at(hi));
        let v = self.field(i, f);
        self.check(
            matches!(v, Some(v) if v >= lo - slack && v <= hi + slack),
            format!("{what}: {f} {v:?} is not the time of the call ({lo}..{hi})"),
        );
    }

    /// Stat field `f` of step `i`, if that step succeeded.
    fn field(&self, i: usize, f: &str) -> Option<i128> {
        let r = &self.res[i];
        (r.err == "OK").then(|| r.value[f].as_u64().map(|v| v as i128))?
    }

    /// Records a failure unless stat field `f` of step `i` equals `want`.
    fn eq(&mut self, i: usize, f: &str, want: i128, what: &str) {
        match self.field(i, f) {
            Some(v) if v == want => {}
            got => self.failures.push(format!(
                "{what}: {f} expected {want:#o} ({want}), got {got:?}"
            )),
        }
    }

    /// Records a failure unless field `f` grew from step `before` to step `after`.
    fn grew(&mut self, before: usize, after: usize, f: &str, what: &str) {
        match (self.field(before, f), self.field(after, f)) {
            (Some(a), Some(b)) if b > a => {}
            (a, b) => self.failures.push(format!(
                "{what}: {f} must change: before {a:?}, after {b:?}"
            )),
        }
    }

    /// Records a failure unless field `f` is the same at steps `before` and `after`.
    fn same(&mut self, before: usize, after: usize, f: &str, what: &str) {
        match (self.field(before, f), self.field(after, f)) {
            (Some(a), Some(b)) if a == b => {}
            (a, b) => self.failures.push(format!(
                "{what}: {f} must not change: before {a:?}, after {b:?}"
            )),
        }
    }

    fn check(&mut self, cond: bool, what: String) {
        if !cond {
            self.failures.push(what);
        }
    }

    fn value(&self, i: usize) -> &Value {
        &self.res[i].value
    }

    /// Panics listing every failure, if there is any.
    fn done(self) {
        finish(self.kind, self.failures);
    }
}

fn finish(kind: &str, failures: Vec<String>) {
    if !failures.is_empty() {
        panic!(
            "[{kind}] {} failure(s):\n  {}",
            failures.len(),
            failures.join("\n  ")
        );
    }
}

/// Each test body runs on a mount (`NAME::mount`) and on tmpfs (`NAME::tmpfs`).
macro_rules! posix_tests {
    ($($(#[doc = $doc:expr])* fn $name:ident($fs:ident) $body:block)*) => {$(
        $(#[doc = $doc])*
        mod $name {
            use super::*;
            fn body($fs: &Fs) $body
            #[test]
            fn mount() {
                if let Some(fs) = Fs::mount() {
                    body(&fs);
                }
            }
            #[test]
            fn tmpfs() {
                if let Some(fs) = Fs::tmpfs() {
                    body(&fs);
                }
            }
        }
    )*};
}

const S_IFSOCK: u32 = 0o140000;
const S_IFBLK: u32 = 0o060000;
const S_IFCHR: u32 = 0o020000;
const S_IFIFO: u32 = 0o010000;

// ---------------------------------------------------------------------------------------
// Named cases

posix_tests! {
    /// mknod of character and block devices as root stores the type and rdev (seen by
    /// stat through both mounts); anyone else gets EPERM and no entry.
    fn device_nodes_by_root_keep_rdev_and_others_get_eperm(fs) {
        let (chr, blk) = (fs.p("chr"), fs.p("blk"));
        let mut s = Script::new();
        s.ok(mknod(&chr, S_IFCHR | 0o640, 240, 7));
        s.ok(mknod(&blk, S_IFBLK | 0o600, 8, 17));
        let c1 = s.ok(lstat(&chr));
        let b1 = s.ok(lstat(&blk));
        let c2 = s.ok(lstat(&fs.p2("chr")));
        let b2 = s.ok(lstat(&fs.p2("blk")));
        let mut o = fs.exec(ROOT, &s);
        for (i, name) in [(c1, "chr"), (c2, "chr via the second mount")] {
            o.eq(i, "type", S_IFCHR as i128, name);
            o.eq(i, "perm", 0o640, name);
            o.eq(i, "rdev_major", 240, name);
            o.eq(i, "rdev_minor", 7, name);
        }
        for (i, name) in [(b1, "blk"), (b2, "blk via the second mount")] {
            o.eq(i, "type", S_IFBLK as i128, name);
            o.eq(i, "perm", 0o600, name);
            o.eq(i, "rdev_major", 8, name);
            o.eq(i, "rdev_minor", 17, name);
        }
        let mut failures = o.failures;
        for who in [OWNER, OTHER] {
            let mut u = Script::new();
            u.err("EPERM", mknod(&fs.p(&format!("c-{}", who.name)), S_IFCHR | 0o666, 1, 3));
            u.err("EPERM", mknod(&fs.p(&format!("b-{}", who.name)), S_IFBLK | 0o666, 7, 0));
            let x = u.ok(exists(&fs.p(&format!("c-{}", who.name))));
            let o = fs.exec(who, &u);
            if o.value(x) != &json!(false) {
                failures.push(format!("{}: a refused mknod left an entry", who.name));
            }
            failures.extend(o.failures);
        }
        finish(fs.kind, failures);
    }

    /// bind() of a UNIX domain socket inside the file system makes an S_IFSOCK entry
    /// that connect() reaches, owned by the binding user; unlink removes it.
    fn unix_socket_bind_inside_the_mount(fs) {
        let sock = fs.p("sock");
        let mut s = Script::new();
        s.ok(bind_unix(&sock, "l"));
        let st = s.ok(lstat(&sock));
        let st2 = s.ok(lstat(&fs.p2("sock")));
        let got = s.ok(connect_unix(&sock, "l", "ping"));
        s.ok(unlink(&sock));
        s.ok(bind_unix(&fs.p("sock2"), "l2"));
        let mut o = fs.exec(OTHER, &s);
        o.eq(st, "type", S_IFSOCK as i128, "socket");
        o.eq(st, "uid", OTHER.uid as i128, "socket");
        o.eq(st2, "type", S_IFSOCK as i128, "socket via the second mount");
        let v = o.value(got).clone();
        o.check(v == json!("ping"), format!("connect/send through the socket got {v}"));
        o.done();
    }

    /// A FIFO's mode is enforced on open: 0600 owned by someone else is EACCES for
    /// reading and writing, also for a group member; the owner can use it.
    fn fifo_mode_is_enforced_on_open(fs) {
        let f = fs.p("fifo");
        fs.setup(&[mkfifo(&f, 0o600), chown(&f, 1001, 1001)]);
        let mut failures = Vec::new();
        for who in [OTHER, MEMBER] {
            let mut s = Script::new();
            s.err("EACCES", open(&f, &["O_RDONLY", "O_NONBLOCK"], 0, "r"));
            s.err("EACCES", open(&f, &["O_WRONLY", "O_NONBLOCK"], 0, "w"));
            s.err("EACCES", open(&f, &["O_RDWR"], 0, "rw"));
            failures.extend(fs.exec(who, &s).failures);
        }
        let mut s = Script::new();
        s.ok(open(&f, &["O_RDONLY", "O_NONBLOCK"], 0, "r"));
        s.ok(open(&f, &["O_WRONLY", "O_NONBLOCK"], 0, "w"));
        s.ok(write("w", "through the fifo"));
        let got = s.ok(read("r", 100));
        let st = s.ok(lstat(&f));
        let mut o = fs.exec(OWNER, &s);
        let v = o.value(got).clone();
        o.check(v == json!("through the fifo"), format!("read from the fifo got {v}"));
        o.eq(st, "type", S_IFIFO as i128, "fifo");
        failures.extend(o.failures);
        finish(fs.kind, failures);
    }

    /// Search permission is checked on every lookup, also for entries the kernel has
    /// cached: after root stats /d/f (caching d and f) and chmods d to 0700, another
    /// user's stat/open/truncate/chmod/chown/link/rename/unlink/utimes of d/f is EACCES.
    fn search_permission_on_cached_paths(fs) {
        let (d, f) = (fs.p("d"), fs.p("d/f"));
        fs.setup(&[mkdir(&d, 0o755), write_file(&f, "secret"), chmod(&f, 0o666)]);
        let mut before = Script::new();
        before.ok(stat(&f));
        before.ok(open(&f, &["O_RDONLY"], 0, "x"));
        before.ok(close("x"));
        let mut after = Script::new();
        after.err("EACCES", stat(&f));
        after.err("EACCES", open(&f, &["O_RDONLY"], 0, "r"));
        after.err("EACCES", open(&f, &["O_WRONLY"], 0, "w"));
        after.err("EACCES", open(&f, &["O_WRONLY", "O_TRUNC"], 0, "t"));
        after.err("EACCES", truncate(&f, 0));
        after.err("EACCES", chmod(&f, 0o777));
        after.err("EACCES", chown(&f, -1, 1003));
        after.err("EACCES", link(&f, &fs.p("stolen")));
        after.err("EACCES", rename(&f, &fs.p("moved")));
        after.err("EACCES", unlink(&f));
        after.err("EACCES", utimens(&f, Value::Null, Value::Null));
        after.err("EACCES", access(&f, "r"));
        after.err("EACCES", listdir(&d));
        let mut s = Script::new();
        s.ok(stat(&f));
        let warm = s.as_user(OTHER, &before);
        s.ok(chmod(&d, 0o700));
        let cold = s.as_user(OTHER, &after);
        let st = s.ok(stat(&f));
        let gone = s.ok(exists(&fs.p("stolen")));
        let mut o = fs.exec(ROOT, &s);
        o.nested(warm, OTHER, &before);
        o.nested(cold, OTHER, &after);
        o.eq(st, "size", 6, "d/f after the refused calls");
        o.eq(st, "perm", 0o666, "d/f after the refused calls");
        let v = o.value(gone).clone();
        o.check(v == json!(false), "a refused link made an entry".into());
        o.done();
    }

    /// In a 1777 directory only the entry's owner, the directory's owner or root may
    /// unlink or rename an entry (others: EPERM), also when renaming over it.
    fn sticky_directory_limits_unlink_and_rename(fs) {
        let s_ = |n: &str| fs.p(&format!("s/{n}"));
        let mut setup = vec![mkdir(&fs.p("s"), 0o777)];
        let owners = [
            ("a", 1002),
            ("b", 1003),
            ("c", 1003),
            ("e", 1002),
            ("g", 1003),
            ("h", 1002),
        ];
        for (n, owner) in owners {
            setup.push(write_file(&s_(n), n));
            setup.push(chown(&s_(n), owner, owner));
        }
        setup.push(mkdir(&s_("da"), 0o777));
        setup.push(chown(&s_("da"), 1002, 1002));
        setup.push(chown(&fs.p("s"), 1001, 1001));
        setup.push(chmod(&fs.p("s"), 0o1777));
        fs.setup(&setup);
        let mut failures = Vec::new();
        let mut other = Script::new();
        other.err("EPERM", unlink(&s_("a")));
        other.err("EPERM", rename(&s_("a"), &s_("a2")));
        other.err("EPERM", rename(&s_("c"), &s_("a")));
        other.err("EPERM", rmdir(&s_("da")));
        other.err("EPERM", rename(&s_("da"), &s_("da2")));
        other.ok(unlink(&s_("b")));
        other.ok(write_file(&s_("new"), "mine"));
        other.ok(rename(&s_("new"), &s_("new2")));
        failures.extend(fs.exec(OTHER, &other).failures);
        let mut member = Script::new();
        member.ok(rename(&s_("a"), &s_("a3")));
        member.ok(unlink(&s_("a3")));
        failures.extend(fs.exec(MEMBER, &member).failures);
        let mut owner = Script::new();
        owner.ok(unlink(&s_("e")));
        owner.ok(rename(&s_("c"), &s_("c2")));
        failures.extend(fs.exec(OWNER, &owner).failures);
        let mut root = Script::new();
        root.ok(unlink(&s_("g")));
        root.ok(rename(&s_("h"), &s_("h2")));
        failures.extend(fs.exec(ROOT, &root).failures);
        let want = [("a", false), ("a2", false), ("b", false), ("c", false), ("c2", true),
                    ("da", true), ("e", false), ("g", false), ("h2", true), ("new2", true)];
        let mut check = Script::new();
        for (n, _) in want {
            check.run(exists(&s_(n)));
        }
        let c = fs.exec(ROOT, &check);
        for (k, (n, there)) in want.iter().enumerate() {
            if c.value(k) != &json!(there) {
                failures.push(format!("s/{n} should {}exist", if *there { "" } else { "not " }));
            }
        }
        finish(fs.kind, failures);
    }

    /// A setgid directory gives new files and directories its group whoever makes them;
    /// new subdirectories inherit the setgid bit; a new file's setgid bit is dropped when
    /// its creator is not in that group.
    fn setgid_directory_inherits_group_and_bit(fs) {
        let g = |n: &str| fs.p(&format!("g/{n}"));
        let dir = fs.p("g");
        fs.setup(&[mkdir(&dir, 0o777), chown(&dir, 1001, 3000), chmod(&dir, 0o2777)]);
        let mut failures = Vec::new();
        // OTHER is not in group 3000, OWNER is.
        let mut s = Script::new();
        s.ok(write_file(&g("f"), "x"));
        s.ok(mkdir(&g("sub"), 0o755));
        s.ok(open(&g("x"), &["O_CREAT", "O_WRONLY", "O_EXCL"], 0o2755, "x"));
        s.ok(mkfifo(&g("p"), 0o644));
        let f = s.ok(stat(&g("f")));
        let sub = s.ok(stat(&g("sub")));
        let x = s.ok(stat(&g("x")));
        let p = s.ok(lstat(&g("p")));
        let mut o = fs.exec(OTHER, &s);
        o.eq(f, "gid", 3000, "file made by a non-member in a setgid dir");
        o.eq(f, "uid", OTHER.uid as i128, "file made by a non-member in a setgid dir");
        o.eq(f, "perm", 0o644, "file made by a non-member in a setgid dir");
        o.eq(sub, "gid", 3000, "subdirectory of a setgid dir");
        o.eq(sub, "perm", 0o2755, "subdirectory of a setgid dir (inherits S_ISGID)");
        o.eq(x, "gid", 3000, "02755 file made by a non-member");
        o.eq(x, "perm", 0o755, "02755 file made by a non-member (S_ISGID dropped)");
        o.eq(p, "gid", 3000, "fifo in a setgid dir");
        failures.extend(o.failures);
        let mut s = Script::new();
        s.ok(open(&g("y"), &["O_CREAT", "O_WRONLY", "O_EXCL"], 0o2755, "y"));
        let y = s.ok(stat(&g("y")));
        let mut o = fs.exec(OWNER, &s);
        o.eq(y, "perm", 0o2755, "02755 file made by a member of the dir's group");
        o.eq(y, "gid", 3000, "02755 file made by a member of the dir's group");
        failures.extend(o.failures);
        let mut s = Script::new();
        s.ok(write_file(&g("r"), "x"));
        s.ok(mkdir(&g("sub/deeper"), 0o700));
        let r = s.ok(stat(&g("r")));
        let deeper = s.ok(stat(&g("sub/deeper")));
        let mut o = fs.exec(ROOT, &s);
        o.eq(r, "gid", 3000, "file made by root in a setgid dir");
        o.eq(r, "uid", 0, "file made by root in a setgid dir");
        o.eq(deeper, "gid", 3000, "directory two levels down");
        o.eq(deeper, "perm", 0o2700, "directory two levels down");
        failures.extend(o.failures);
        finish(fs.kind, failures);
    }

    /// Only the owner or root may chmod (others: EPERM, whatever the mode bits); a
    /// non-root owner outside the file's group silently loses S_ISGID.
    fn chmod_only_by_owner_or_root(fs) {
        let c = fs.p("c");
        let o3 = fs.p("o3");
        fs.setup(&[write_file(&c, "c"), chown(&c, 1001, 1001), chmod(&c, 0o666)]);
        fs.setup(&[write_file(&o3, "o"), chown(&o3, 1003, 3000)]);
        let mut failures = Vec::new();
        for who in [MEMBER, PGID, OTHER] {
            let mut s = Script::new();
            s.err("EPERM", chmod(&c, 0o777));
            failures.extend(fs.exec(who, &s).failures);
        }
        let mut s = Script::new();
        s.ok(chmod(&c, 0o600));
        let a = s.ok(stat(&c));
        let mut o = fs.exec(OWNER, &s);
        o.eq(a, "perm", 0o600, "after the owner's chmod");
        failures.extend(o.failures);
        let mut s = Script::new();
        s.ok(chmod(&c, 0o4640));
        let b = s.ok(stat(&c));
        s.ok(chmod(&o3, 0o2755));
        let b3 = s.ok(stat(&o3));
        let mut o = fs.exec(ROOT, &s);
        o.eq(b, "perm", 0o4640, "after root's chmod");
        o.eq(b3, "perm", 0o2755, "after root's chmod of a file in a group root is not in");
        failures.extend(o.failures);
        let mut s = Script::new();
        s.ok(chmod(&o3, 0o2775));
        let st = s.ok(stat(&o3));
        let mut o = fs.exec(OTHER, &s);
        o.eq(st, "perm", 0o775, "chmod 2775 by an owner outside the file's group");
        failures.extend(o.failures);
        finish(fs.kind, failures);
    }

    /// A non-root owner may chown only to its own uid and to a group it is in (EPERM
    /// otherwise); a non-owner may not chown at all; root may do anything.
    fn chown_by_non_root_only_to_own_groups(fs) {
        let f = fs.p("o");
        fs.setup(&[write_file(&f, "o"), chown(&f, 1001, 1001)]);
        let mut failures = Vec::new();
        let mut s = Script::new();
        s.err("EPERM", chown(&f, -1, 4000));
        s.err("EPERM", chown(&f, 1002, -1));
        s.err("EPERM", chown(&f, 1002, 1001));
        s.ok(chown(&f, 1001, 1001));
        s.ok(chown(&f, -1, 3000));
        let a = s.ok(stat(&f));
        let mut o = fs.exec(OWNER, &s);
        o.eq(a, "gid", 3000, "after the owner's chgrp to its group 3000");
        o.eq(a, "uid", 1001, "after the owner's chgrp to its group 3000");
        failures.extend(o.failures);
        for who in [MEMBER, PGID, OTHER] {
            let mut s = Script::new();
            s.err("EPERM", chown(&f, -1, who.gid as i64));
            s.err("EPERM", chown(&f, who.uid as i64, -1));
            failures.extend(fs.exec(who, &s).failures);
        }
        let mut s = Script::new();
        s.ok(chown(&f, 1002, 4000));
        let b = s.ok(stat(&f));
        let mut o = fs.exec(ROOT, &s);
        o.eq(b, "uid", 1002, "after root's chown");
        o.eq(b, "gid", 4000, "after root's chown");
        failures.extend(o.failures);
        finish(fs.kind, failures);
    }

    /// S_ISUID and S_ISGID (with group execute) are cleared by a write or truncate by
    /// anyone but root, and by chown (also root's); root's writes keep them. S_ISGID
    /// without group execute stays for a writer in the group, goes for one outside it.
    /// Writes through read-write descriptors (the page cache's path through a mount)
    /// as through write-only ones.
    fn suid_sgid_cleared_on_write_truncate_and_chown(fs) {
        let names = [
            "w", "wo", "t", "ft", "c", "rc", "rw", "k", "km", "x", "kx", "xo", "xf",
        ];
        let mut setup = Vec::new();
        // Past the inline threshold, so that a write in place goes to the data servers
        // and nothing tells the metadata server of it.
        let big = "0123456789".repeat(2000);
        for n in names {
            let p = fs.p(n);
            let body = if n.starts_with('x') || n == "kx" {
                big.as_str()
            } else {
                "0123456789"
            };
            setup.push(write_file(&p, body));
            setup.push(chown(&p, 1001, 1001));
            let mode = if n.starts_with('k') { 0o2666 } else { 0o6777 };
            setup.push(chmod(&p, mode));
        }
        fs.setup(&setup);
        let mut failures = Vec::new();
        // `early`: fstats taken while the writer still held the file open (the bits go
        // before the write, not at its close).
        let check = |who: Who, s: &mut Script, want: &[(&str, u32)], early: &[(usize, u32)]| {
            let idx: Vec<usize> = want.iter().map(|(n, _)| s.ok(stat(&fs.p(n)))).collect();
            let mut o = fs.exec(who, s);
            for ((n, perm), i) in want.iter().zip(idx) {
                o.eq(i, "perm", *perm as i128, &format!("{n} as {}", who.name));
            }
            for &(i, perm) in early {
                let what = format!("fstat of step {i} after a write as {}", who.name);
                o.eq(i, "perm", perm as i128, &what);
            }
            o.failures
        };
        let mut s = Script::new();
        s.ok(open(&fs.p("w"), &["O_WRONLY"], 0, "w"));
        s.ok(write("w", "x"));
        s.ok(close("w"));
        s.ok(truncate(&fs.p("t"), 3));
        s.ok(open(&fs.p("ft"), &["O_WRONLY"], 0, "ft"));
        s.ok(ftruncate("ft", 2));
        s.ok(close("ft"));
        s.ok(open(&fs.p("k"), &["O_WRONLY"], 0, "k"));
        s.ok(write("k", "x"));
        s.ok(close("k"));
        s.ok(open(&fs.p("x"), &["O_RDWR"], 0, "x"));
        s.ok(write("x", "x"));
        let x_open = s.ok(fstat("x"));
        s.ok(write("x", "y"));
        s.ok(close("x"));
        s.ok(open(&fs.p("kx"), &["O_RDWR"], 0, "kx"));
        s.ok(write("kx", "x"));
        let kx_open = s.ok(fstat("kx"));
        s.ok(close("kx"));
        // Space reserved without growing the file: no write, no size change, and the
        // bits still go.
        s.ok(open(&fs.p("xf"), &["O_RDWR"], 0, "xf"));
        s.ok(fallocate("xf", 1, 0, 100_000));
        let xf_open = s.ok(fstat("xf"));
        s.ok(close("xf"));
        let want = [
            ("w", 0o777),
            ("t", 0o777),
            ("ft", 0o777),
            ("k", 0o666),
            ("x", 0o777),
            ("kx", 0o666),
            ("xf", 0o777),
        ];
        let early = [(x_open, 0o777), (kx_open, 0o666), (xf_open, 0o777)];
        failures.extend(check(OTHER, &mut s, &want, &early));
        let mut s = Script::new();
        s.ok(open(&fs.p("wo"), &["O_WRONLY"], 0, "w"));
        s.ok(write("w", "x"));
        s.ok(close("w"));
        s.ok(chown(&fs.p("c"), -1, 3000));
        s.ok(open(&fs.p("km"), &["O_WRONLY"], 0, "k"));
        s.ok(write("k", "x"));
        s.ok(close("k"));
        s.ok(open(&fs.p("xo"), &["O_RDWR"], 0, "x"));
        s.ok(write("x", "x"));
        let xo_open = s.ok(fstat("x"));
        s.ok(close("x"));
        let want = [("wo", 0o777), ("c", 0o777), ("km", 0o2666), ("xo", 0o777)];
        failures.extend(check(OWNER, &mut s, &want, &[(xo_open, 0o777)]));
        let mut s = Script::new();
        s.ok(open(&fs.p("rw"), &["O_WRONLY"], 0, "w"));
        s.ok(write("w", "x"));
        s.ok(close("w"));
        s.ok(chown(&fs.p("rc"), 1002, -1));
        failures.extend(check(ROOT, &mut s, &[("rw", 0o6777), ("rc", 0o777)], &[]));
        finish(fs.kind, failures);
    }

    /// ftruncate on a descriptor from open(O_CREAT|O_RDWR, mode 0) succeeds: it is
    /// judged by the descriptor's access, not by the new file's mode bits.
    fn ftruncate_on_a_new_mode_0_file_by_its_descriptor(fs) {
        let mut s = Script::new();
        s.ok(open(&fs.p("z"), &["O_CREAT", "O_RDWR", "O_EXCL"], 0, "z"));
        s.ok(write("z", "hello"));
        s.ok(ftruncate("z", 2));
        let a = s.ok(fstat("z"));
        s.ok(close("z"));
        s.ok(open(&fs.p("z2"), &["O_CREAT", "O_WRONLY", "O_EXCL"], 0, "y"));
        s.ok(ftruncate("y", 10));
        s.ok(write("y", "abc"));
        s.ok(close("y"));
        s.err("EACCES", open(&fs.p("z"), &["O_RDONLY"], 0, "again"));
        let mut o = fs.exec(OTHER, &s);
        o.eq(a, "size", 2, "fstat after ftruncate");
        o.eq(a, "perm", 0, "fstat after ftruncate");
        let mut failures = o.failures;
        let mut r = Script::new();
        let z = r.ok(stat(&fs.p("z")));
        let z2 = r.ok(stat(&fs.p("z2")));
        let zd = r.ok(read_file(&fs.p("z")));
        let mut o = fs.exec(ROOT, &r);
        o.eq(z, "size", 2, "z");
        o.eq(z, "uid", 1003, "z");
        o.eq(z2, "size", 10, "z2");
        let v = o.value(zd).clone();
        o.check(v == json!("he"), format!("z holds {v}"));
        failures.extend(o.failures);
        finish(fs.kind, failures);
    }

    /// ctime changes on chmod, chown, link, rename, truncate, ftruncate and write;
    /// mtime only on the data changes.
    fn timestamps_ctime_and_mtime_of_a_file(fs) {
        let (f, h, h2) = (fs.p("f"), fs.p("h"), fs.p("h2"));
        fs.setup(&[write_file(&f, "0123456789")]);
        let mut s = Script::new();
        let mut prev = s.ok(stat(&f));
        let mut steps: Vec<(usize, usize, &str, bool)> = Vec::new();
        let mut change = |s: &mut Script, what: &'static str, step: Value, data: bool| {
            s.run(sleep_ms(TICK_MS));
            s.ok(step);
            let after = s.ok(stat(&f));
            steps.push((prev, after, what, data));
            prev = after;
        };
        change(&mut s, "chmod", chmod(&f, 0o600), false);
        change(&mut s, "chown", chown(&f, 1001, 1001), false);
        change(&mut s, "link", link(&f, &h), false);
        change(&mut s, "rename of another link", rename(&h, &h2), false);
        change(&mut s, "truncate", truncate(&f, 5), true);
        s.run(sleep_ms(TICK_MS));
        s.ok(open(&f, &["O_WRONLY"], 0, "w"));
        change(&mut s, "write", write("w", "ab"), true);
        change(&mut s, "ftruncate", ftruncate("w", 1), true);
        s.ok(close("w"));
        // The renamed inode itself: rename changes its ctime.
        let r0 = s.ok(stat(&h2));
        s.run(sleep_ms(TICK_MS));
        s.ok(rename(&h2, &h));
        let r1 = s.ok(stat(&h));
        let mut o = fs.exec(ROOT, &s);
        for (a, b, what, data) in steps {
            o.grew(a, b, "ctime_ns", what);
            if data {
                o.grew(a, b, "mtime_ns", what);
            } else {
                o.same(a, b, "mtime_ns", what);
            }
        }
        o.grew(r0, r1, "ctime_ns", "the renamed inode");
        o.done();
    }

    /// A directory's mtime and ctime change when entries are made, removed or renamed
    /// in or out of it.
    fn timestamps_of_a_directory_on_entry_changes(fs) {
        let (d, e) = (fs.p("d"), fs.p("e"));
        fs.setup(&[mkdir(&d, 0o755), mkdir(&e, 0o755), write_file(&fs.p("src"), "s")]);
        let dd = |n: &str| fs.p(&format!("d/{n}"));
        let mut s = Script::new();
        let mut prev = s.ok(stat(&d));
        let mut steps = Vec::new();
        let mut change = |s: &mut Script, what: &'static str, step: Value| {
            s.run(sleep_ms(TICK_MS));
            s.ok(step);
            let after = s.ok(stat(&d));
            steps.push((prev, after, what));
            prev = after;
        };
        change(&mut s, "create", write_file(&dd("f"), "x"));
        change(&mut s, "mkdir", mkdir(&dd("sub"), 0o755));
        change(&mut s, "mkfifo", mkfifo(&dd("p"), 0o644));
        change(&mut s, "symlink", symlink("f", &dd("l")));
        change(&mut s, "link", link(&fs.p("src"), &dd("hard")));
        change(&mut s, "rename within", rename(&dd("f"), &dd("g")));
        change(&mut s, "unlink", unlink(&dd("l")));
        change(&mut s, "rmdir", rmdir(&dd("sub")));
        change(&mut s, "rename out", rename(&dd("g"), &fs.p("e/g")));
        change(&mut s, "rename in", rename(&fs.p("e/g"), &dd("g")));
        // The other side of a rename between directories.
        let e0 = s.ok(stat(&e));
        s.run(sleep_ms(TICK_MS));
        s.ok(rename(&dd("g"), &fs.p("e/g")));
        let e1 = s.ok(stat(&e));
        let mut o = fs.exec(ROOT, &s);
        for (a, b, what) in steps {
            o.grew(a, b, "mtime_ns", what);
            o.grew(a, b, "ctime_ns", what);
        }
        o.grew(e0, e1, "mtime_ns", "target dir of a rename");
        o.grew(e0, e1, "ctime_ns", "target dir of a rename");
        o.done();
    }

    /// utimensat: explicit times keep their nanoseconds (also as read through the
    /// second mount), UTIME_OMIT leaves a time alone, UTIME_NOW sets the current time,
    /// NULL sets both; ctime changes every time.
    fn timestamps_utimens_now_omit_and_nanoseconds(fs) {
        let f = fs.p("f");
        fs.setup(&[write_file(&f, "x")]);
        let (a_s, a_ns) = (1_000_000_000i128, 123_456_789i128);
        let (m_s, m_ns) = (1_500_000_000i128, 987_654_321i128);
        let mut s = Script::new();
        let s0 = s.ok(stat(&f));
        s.run(sleep_ms(TICK_MS));
        s.ok(utimens(&f, json!([a_s, a_ns]), json!([m_s, m_ns])));
        let s1 = s.ok(stat(&f));
        s.run(sleep_ms(TICK_MS));
        let t0 = s.ok(now());
        s.ok(utimens(&f, json!("omit"), json!("now")));
        let t1 = s.ok(now());
        let s2 = s.ok(stat(&f));
        s.run(sleep_ms(TICK_MS));
        s.ok(utimens(&f, json!("now"), json!("omit")));
        let s3 = s.ok(stat(&f));
        s.ok(utimens(&f, json!([a_s, 1]), json!([m_s, 999_999_999])));
        s.run(sleep_ms(TICK_MS));
        let t2 = s.ok(now());
        s.ok(utimens(&f, Value::Null, Value::Null));
        let t3 = s.ok(now());
        let s4 = s.ok(stat(&f));
        s.ok(utimens(&f, json!([a_s, a_ns]), json!([m_s, m_ns])));
        // Through the mount that has not cached the file: what the server stored.
        let s5 = s.ok(stat(&fs.p2("f")));
        let mut o = fs.exec(ROOT, &s);
        let (at, mt) = (a_s * 1_000_000_000 + a_ns, m_s * 1_000_000_000 + m_ns);
        o.eq(s1, "atime_ns", at, "explicit atime");
        o.eq(s1, "mtime_ns", mt, "explicit mtime");
        o.grew(s0, s1, "ctime_ns", "utimensat with explicit times");
        o.eq(s2, "atime_ns", at, "atime after UTIME_OMIT");
        o.grew(s1, s2, "ctime_ns", "utimensat UTIME_OMIT/UTIME_NOW");
        o.near(s2, "mtime_ns", t0, t1, "mtime after UTIME_NOW");
        o.same(s2, s3, "mtime_ns", "mtime after UTIME_OMIT");
        o.grew(s2, s3, "atime_ns", "atime after UTIME_NOW");
        o.grew(s2, s3, "ctime_ns", "utimensat UTIME_NOW/UTIME_OMIT");
        o.near(s4, "atime_ns", t2, t3, "atime after utimensat(NULL)");
        o.near(s4, "mtime_ns", t2, t3, "mtime after utimensat(NULL)");
        o.eq(s5, "atime_ns", at, "explicit atime through the second mount");
        o.eq(s5, "mtime_ns", mt, "explicit mtime through the second mount");
        o.done();
    }

    /// Names of 255 bytes work (also multi-byte UTF-8); 256 bytes is ENAMETOOLONG for
    /// every call that makes or looks up a name.
    fn name_length_255_ok_256_enametoolong(fs) {
        let n255 = "a".repeat(255);
        let utf = format!("{}b", "é".repeat(127));
        assert_eq!(utf.len(), 255);
        let n256 = "c".repeat(256);
        fs.setup(&[write_file(&fs.p("src"), "s")]);
        let mut s = Script::new();
        s.ok(write_file(&fs.p(&n255), "x"));
        s.ok(stat(&fs.p(&n255)));
        s.ok(mkdir(&fs.p(&utf), 0o755));
        s.ok(stat(&fs.p(&utf)));
        let ls = s.ok(listdir(&fs.p("")));
        s.ok(rename(&fs.p(&n255), &fs.p(&"d".repeat(255))));
        let long = fs.p(&n256);
        s.err("ENAMETOOLONG", open(&long, &["O_CREAT", "O_WRONLY"], 0o644, "x"));
        s.err("ENAMETOOLONG", stat(&long));
        s.err("ENAMETOOLONG", mkdir(&long, 0o755));
        s.err("ENAMETOOLONG", mkfifo(&long, 0o644));
        s.err("ENAMETOOLONG", symlink("src", &long));
        s.err("ENAMETOOLONG", link(&fs.p("src"), &long));
        s.err("ENAMETOOLONG", rename(&fs.p("src"), &long));
        s.err("ENAMETOOLONG", unlink(&long));
        s.ok(stat(&fs.p("src")));
        let mut o = fs.exec(ROOT, &s);
        let names = o.value(ls).clone();
        let listed = |n: &str| names.as_array().is_some_and(|a| a.contains(&json!(n)));
        let both = listed(&n255) && listed(&utf);
        o.check(both, format!("listing lacks the 255-byte names: {names}"));
        o.done();
    }

    /// rename() of one hard link over another of the same inode does nothing: both
    /// names stay and it succeeds.
    fn rename_of_a_hard_link_over_its_twin_does_nothing(fs) {
        let (a, b) = (fs.p("a"), fs.p("b"));
        fs.setup(&[write_file(&a, "same"), link(&a, &b)]);
        let mut s = Script::new();
        s.ok(rename(&a, &b));
        s.ok(stat(&a));
        let sb = s.ok(stat(&b));
        s.ok(rename(&b, &a));
        s.ok(stat(&b));
        let sa = s.ok(stat(&a));
        let ls = s.ok(listdir(&fs.p("")));
        let mut o = fs.exec(ROOT, &s);
        o.eq(sb, "nlink", 2, "b after rename(a, b)");
        o.eq(sa, "nlink", 2, "a after rename(b, a)");
        let v = o.value(ls).clone();
        o.check(v == json!(["a", "b"]), format!("listing after the renames: {v}"));
        o.done();
    }

    /// A directory renamed into its own subtree is EINVAL and stays where it was.
    fn directory_renamed_into_its_own_subtree_is_einval(fs) {
        let x = |n: &str| fs.p(n);
        fs.setup(&[mkdir(&x("x"), 0o755), mkdir(&x("x/y"), 0o755), mkdir(&x("x/y/z"), 0o755)]);
        let mut s = Script::new();
        s.err("EINVAL", rename(&x("x"), &x("x/y/z/moved")));
        s.err("EINVAL", rename(&x("x"), &x("x/moved")));
        s.err("EINVAL", rename(&x("x/y"), &x("x/y/z/w")));
        s.ok(rename(&x("x"), &x("x")));
        s.ok(stat(&x("x/y/z")));
        let gone = s.ok(exists(&x("x/y/z/moved")));
        let mut o = fs.exec(ROOT, &s);
        let v = o.value(gone).clone();
        o.check(v == json!(false), "the refused rename made an entry".into());
        o.done();
    }

    /// Two mounts of one cluster: B rewrites (in place, same length; then shorter) a file
    /// A has read and cached; A's next open reads B's bytes.
    fn two_mounts_next_open_sees_the_other_mounts_write(fs) {
        let (a, b) = (fs.p("shared"), fs.p2("shared"));
        let mut s = Script::new();
        s.ok(write_file(&a, "version-1 from A"));
        let r1 = s.ok(read_file(&a));
        let r1b = s.ok(read_file(&b));
        s.ok(open(&b, &["O_WRONLY"], 0, "bw"));
        s.ok(write("bw", "VERSION-2"));
        s.ok(close("bw"));
        let r2 = s.ok(read_file(&a));
        s.ok(write_file(&b, "v3"));
        let r3 = s.ok(read_file(&a));
        let st = s.ok(stat(&a));
        let mut o = fs.exec(ROOT, &s);
        let v1 = "version-1 from A";
        for (i, want) in [(r1, v1), (r1b, v1), (r2, "VERSION-2 from A"), (r3, "v3")] {
            let v = o.value(i).clone();
            o.check(v == json!(want), format!("read {v}, expected {want:?}"));
        }
        o.eq(st, "size", 2, "size seen by A after B's truncating rewrite");
        o.done();
    }
}

// ---------------------------------------------------------------------------------------
// Generated matrices

/// One generated case: the caller's steps (the last is the call under test), the
/// expected errno, and root's checks of the result afterwards.
struct MCase {
    desc: String,
    who: Who,
    /// Root's fixture steps; cases with the same fixture key share them.
    fixture_key: String,
    fixture: Vec<Value>,
    steps: Vec<Value>,
    expect: &'static str,
    /// (path, expected attributes) checked by root after all calls; None: must not exist.
    after: Vec<(String, Option<Attrs>)>,
}

#[derive(Clone, Copy, Default, Debug)]
struct Attrs {
    perm: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    size: Option<u64>,
    mtime_ns: Option<u64>,
}

/// Runs the cases: fixtures as root, each caller's calls in one runner, root's checks;
/// panics listing every case that did not go as the model says.
fn run_matrix(fs: &Fs, cases: &[MCase]) {
    const JOBS: usize = 8;
    let mut seen = BTreeSet::new();
    let fixtures: Vec<Vec<Value>> = cases
        .iter()
        .filter(|c| seen.insert(c.fixture_key.clone()))
        .map(|c| c.fixture.clone())
        .collect();
    let res = fs.run_cases(ROOT, &fixtures, JOBS);
    let bad: Vec<String> = fixtures
        .iter()
        .zip(&res)
        .flat_map(|(f, r)| f.iter().zip(r))
        .filter(|(_, r)| r.err != "OK")
        .map(|(s, r)| format!("  {s}: {} ({})", r.err, r.value))
        .collect();
    assert!(
        bad.is_empty(),
        "[{}] fixture setup failed ({} steps):\n{}",
        fs.kind,
        bad.len(),
        bad.iter().take(50).cloned().collect::<Vec<_>>().join("\n")
    );
    let mut failures = Vec::new();
    for who in CALLERS {
        let mine: Vec<&MCase> = cases.iter().filter(|c| c.who.uid == who.uid).collect();
        let steps: Vec<Vec<Value>> = mine.iter().map(|c| c.steps.clone()).collect();
        let res = fs.run_cases(who, &steps, JOBS);
        for (c, r) in mine.iter().zip(res) {
            let got = &r.last().unwrap().err;
            if got != c.expect {
                failures.push(format!(
                    "{} by {}: expected {}, got {got} ({})",
                    c.desc,
                    who.describe(),
                    c.expect,
                    r.last().unwrap().value
                ));
            }
        }
    }
    let checks: Vec<Vec<Value>> = cases
        .iter()
        .map(|c| c.after.iter().map(|(p, _)| lstat(p)).collect())
        .collect();
    let res = fs.run_cases(ROOT, &checks, JOBS);
    for (c, r) in cases.iter().zip(res) {
        for ((p, want), got) in c.after.iter().zip(r) {
            let name = p.rsplit('/').next().unwrap();
            let bad = match want {
                None if got.err == "ENOENT" => None,
                None => Some(format!("should not exist ({})", got.err)),
                Some(_) if got.err != "OK" => Some(format!("stat: {}", got.err)),
                Some(a) => {
                    let mut m = Vec::new();
                    let mut cmp = |f: &str, w: Option<u64>| {
                        if let Some(w) = w {
                            let g = got.u(f);
                            if g != w {
                                m.push(format!("{f} {g:#o} ({g}), expected {w:#o} ({w})"));
                            }
                        }
                    };
                    cmp("perm", a.perm.map(u64::from));
                    cmp("uid", a.uid.map(u64::from));
                    cmp("gid", a.gid.map(u64::from));
                    cmp("size", a.size);
                    cmp("mtime_ns", a.mtime_ns);
                    (!m.is_empty()).then(|| m.join(", "))
                }
            };
            if let Some(b) = bad {
                failures.push(format!(
                    "{} by {} (expected {}): afterwards {name}: {b}",
                    c.desc,
                    c.who.describe(),
                    c.expect
                ));
            }
        }
    }
    eprintln!(
        "[{}] {} cases, {} fixtures, {} failures",
        fs.kind,
        cases.len(),
        fixtures.len(),
        failures.len()
    );
    finish(fs.kind, failures);
}

const MODES: [u32; 12] = [
    0o000, 0o777, 0o700, 0o070, 0o007, 0o640, 0o604, 0o460, 0o066, 0o555, 0o333, 0o111,
];

/// Calls on an existing regular file, FIFO or directory owned by 1001:1001, for every
/// caller and mode.
fn file_cases(fs: &Fs) -> Vec<MCase> {
    let (fo, fg) = (OWNER.uid, OWNER.gid);
    fs.setup(&[mkdir(&fs.p("fa"), 0o777)]);
    let mut cases = Vec::new();
    let set_mtime = 1_234_567_890_123_456_789u64;
    for kind in ["reg", "fifo", "dir"] {
        let calls: &[&str] = match kind {
            "reg" => &[
                "open_r",
                "open_w",
                "open_rw",
                "open_trunc",
                "open_r_trunc",
                "open_append",
                "open_creat",
                "truncate",
                "chmod",
                "chgrp_mine",
                "chgrp_foreign",
                "chown_self",
                "utime_now",
                "utime_set",
                "access_r",
                "access_w",
                "access_x",
                "exec_search",
            ],
            "fifo" => &[
                "open_r_nb",
                "open_w_nb",
                "open_rw_nb",
                "truncate",
                "chmod",
                "utime_now",
                "access_r",
                "access_w",
            ],
            _ => &[
                "listdir",
                "stat_child",
                "create_child",
                "mkdir_child",
                "unlink_child",
                "chmod",
                "open_w",
                "truncate",
                "access_x",
                "utime_set",
            ],
        };
        let dir = kind == "dir";
        for &mode in &MODES {
            for &call in calls {
                // Calls that change nothing share one fixture per kind and mode. (Not
                // open_w_nb: a FIFO another case has open for reading would let it in.)
                let shared = matches!(
                    call,
                    "open_r"
                        | "open_w"
                        | "open_rw"
                        | "open_r_nb"
                        | "open_rw_nb"
                        | "access_r"
                        | "access_w"
                        | "access_x"
                        | "listdir"
                        | "stat_child"
                        | "exec_search"
                );
                for who in CALLERS {
                    let key = if shared {
                        format!("{kind}-{mode:03o}")
                    } else {
                        format!("{kind}-{mode:03o}-{call}-{}", who.name)
                    };
                    let p = fs.p(&format!("fa/{key}"));
                    let child = format!("{p}/c");
                    let mut fixture = vec![];
                    match kind {
                        "reg" => fixture.push(write_file(&p, "abc")),
                        "fifo" => fixture.push(mkfifo(&p, 0o644)),
                        _ => {
                            fixture.push(mkdir(&p, 0o755));
                            fixture.push(write_file(&child, "c"));
                        }
                    }
                    fixture.push(chown(&p, fo as i64, fg as i64));
                    fixture.push(chmod(&p, mode));
                    let may_ = |want| may(who, fo, fg, mode, want, dir);
                    let owner_or_root = who.root() || who.uid == fo;
                    let unchanged = Attrs {
                        perm: Some(mode),
                        uid: Some(fo),
                        gid: Some(fg),
                        size: (kind == "reg").then_some(3),
                        mtime_ns: None,
                    };
                    let mut after = vec![(p.clone(), Some(unchanged))];
                    let new_mode = if mode == 0o640 { 0o604 } else { 0o640 };
                    // What a caller's successful create leaves: its own entry with `perm`.
                    let new_entry = |ok: bool, perm: u32| {
                        ok.then(|| Attrs {
                            uid: Some(who.uid),
                            gid: Some(who.gid),
                            perm: Some(perm),
                            ..Attrs::default()
                        })
                    };
                    let (step, expect) = match call {
                        "open_r" => (open(&p, &["O_RDONLY"], 0, "f"), ok_or(may_(R), "EACCES")),
                        "open_w" if dir => (open(&p, &["O_WRONLY"], 0, "f"), "EISDIR"),
                        "open_w" => (open(&p, &["O_WRONLY"], 0, "f"), ok_or(may_(W), "EACCES")),
                        "open_rw" => (open(&p, &["O_RDWR"], 0, "f"), ok_or(may_(R | W), "EACCES")),
                        "open_trunc" => {
                            let ok = may_(W);
                            after[0].1.as_mut().unwrap().size = Some(if ok { 0 } else { 3 });
                            (
                                open(&p, &["O_WRONLY", "O_TRUNC"], 0, "f"),
                                ok_or(ok, "EACCES"),
                            )
                        }
                        "truncate" if dir => (truncate(&p, 1), "EISDIR"),
                        "truncate" if kind == "fifo" => (truncate(&p, 1), "EINVAL"),
                        "truncate" => {
                            let ok = may_(W);
                            after[0].1.as_mut().unwrap().size = Some(if ok { 1 } else { 3 });
                            (truncate(&p, 1), ok_or(ok, "EACCES"))
                        }
                        "chmod" => {
                            if owner_or_root {
                                after[0].1.as_mut().unwrap().perm = Some(new_mode);
                            }
                            (chmod(&p, new_mode), ok_or(owner_or_root, "EPERM"))
                        }
                        "chgrp_mine" => {
                            // 3000: a group the owner is in.
                            if owner_or_root {
                                after[0].1.as_mut().unwrap().gid = Some(3000);
                            }
                            (chown(&p, -1, 3000), ok_or(owner_or_root, "EPERM"))
                        }
                        "chgrp_foreign" => {
                            // 1002: a group the owner is not in.
                            if who.root() {
                                after[0].1.as_mut().unwrap().gid = Some(1002);
                            }
                            (chown(&p, -1, 1002), ok_or(who.root(), "EPERM"))
                        }
                        "chown_self" => {
                            if owner_or_root {
                                after[0].1.as_mut().unwrap().uid = Some(who.uid);
                            }
                            (chown(&p, who.uid as i64, -1), ok_or(owner_or_root, "EPERM"))
                        }
                        "utime_now" => (
                            utimens(&p, Value::Null, Value::Null),
                            ok_or(owner_or_root || may_(W), "EACCES"),
                        ),
                        "utime_set" => {
                            if owner_or_root {
                                after[0].1.as_mut().unwrap().mtime_ns = Some(set_mtime);
                            }
                            let t = json!([set_mtime / 1_000_000_000, set_mtime % 1_000_000_000]);
                            (utimens(&p, t.clone(), t), ok_or(owner_or_root, "EPERM"))
                        }
                        "access_r" => (access(&p, "r"), ok_or(may_(R), "EACCES")),
                        "access_w" => (access(&p, "w"), ok_or(may_(W), "EACCES")),
                        "access_x" => (access(&p, "x"), ok_or(may_(X), "EACCES")),
                        // A path through a regular file: ENOTDIR, whatever its mode.
                        "exec_search" => (stat(&format!("{p}/x")), "ENOTDIR"),
                        // O_TRUNC asks for write permission even with O_RDONLY.
                        "open_r_trunc" => {
                            let ok = may_(R | W);
                            after[0].1.as_mut().unwrap().size = Some(if ok { 0 } else { 3 });
                            (
                                open(&p, &["O_RDONLY", "O_TRUNC"], 0, "f"),
                                ok_or(ok, "EACCES"),
                            )
                        }
                        "open_append" => (
                            open(&p, &["O_WRONLY", "O_APPEND"], 0, "f"),
                            ok_or(may_(W), "EACCES"),
                        ),
                        // O_CREAT of an existing file: only the file's own permission.
                        "open_creat" => (
                            open(&p, &["O_WRONLY", "O_CREAT"], 0o777, "f"),
                            ok_or(may_(W), "EACCES"),
                        ),
                        "open_r_nb" => (
                            open(&p, &["O_RDONLY", "O_NONBLOCK"], 0, "f"),
                            ok_or(may_(R), "EACCES"),
                        ),
                        // No reader: ENXIO once permission is granted.
                        "open_w_nb" => (
                            open(&p, &["O_WRONLY", "O_NONBLOCK"], 0, "f"),
                            if may_(W) { "ENXIO" } else { "EACCES" },
                        ),
                        "open_rw_nb" => (
                            open(&p, &["O_RDWR", "O_NONBLOCK"], 0, "f"),
                            ok_or(may_(R | W), "EACCES"),
                        ),
                        "listdir" => (listdir(&p), ok_or(may_(R), "EACCES")),
                        "stat_child" => (stat(&child), ok_or(may_(X), "EACCES")),
                        "create_child" => {
                            let n = format!("{p}/new");
                            let ok = may_(W | X);
                            after.push((n.clone(), new_entry(ok, 0o600)));
                            (
                                open(&n, &["O_CREAT", "O_WRONLY", "O_EXCL"], 0o600, "f"),
                                // Without search, the name cannot even be looked up.
                                ok_or(ok, "EACCES"),
                            )
                        }
                        "mkdir_child" => {
                            let n = format!("{p}/newdir");
                            let ok = may_(W | X);
                            after.push((n.clone(), new_entry(ok, 0o750)));
                            (mkdir(&n, 0o750), ok_or(ok, "EACCES"))
                        }
                        "unlink_child" => {
                            let ok = may_(W | X);
                            after.push((child.clone(), (!ok).then(Attrs::default)));
                            (unlink(&child), ok_or(ok, "EACCES"))
                        }
                        other => unreachable!("{other} on {kind}"),
                    };
                    cases.push(MCase {
                        desc: format!("{call} on {kind} {p} mode {mode:04o} (1001:1001)"),
                        who,
                        fixture_key: key,
                        fixture,
                        steps: vec![step],
                        expect,
                        after,
                    });
                }
            }
        }
    }
    cases
}

const DIR_MODES: [u32; 10] = [
    0o777, 0o1777, 0o755, 0o775, 0o1775, 0o733, 0o1733, 0o766, 0o711, 0o1770,
];

/// Entry operations in a directory owned by 1001:1001 with each mode (sticky or not),
/// on entries owned by 1002 or 1003, for every caller.
fn entry_cases(fs: &Fs) -> Vec<MCase> {
    let dir_owner = (OWNER.uid, OWNER.gid);
    let src = fs.p("de-src");
    fs.setup(&[
        mkdir(&fs.p("de"), 0o777),
        mkdir(&fs.p("de-out"), 0o777),
        write_file(&src, "s"),
        chmod(&src, 0o666),
    ]);
    let mut cases = Vec::new();
    for &dmode in &DIR_MODES {
        for eowner in [MEMBER.uid, OTHER.uid] {
            let d = fs.p(&format!("de/{dmode:04o}-{eowner}"));
            let dir = (dir_owner.0, dir_owner.1, dmode);
            // run_entry_matrix makes the directory before these fixtures and gives it
            // its owner and mode after them.
            for who in CALLERS {
                for call in [
                    "unlink",
                    "rename",
                    "rename_over",
                    "rmdir",
                    "rename_dir",
                    "create",
                    "mkdir",
                    "stat",
                    "listdir",
                    "link",
                    "move_out",
                    "move_dir_out",
                ] {
                    let e = format!("{d}/{call}-{}", who.name);
                    let to = format!("{e}.to");
                    let mut fixture = Vec::new();
                    let entry_attrs = Attrs {
                        uid: Some(eowner),
                        ..Attrs::default()
                    };
                    let mut after = Vec::new();
                    let del = may_delete(who, dir, eowner);
                    let create = ok_or(may(who, dir.0, dir.1, dmode, W | X, true), "EACCES");
                    let (step, expect) = match call {
                        "unlink" | "rename" | "stat" | "rename_over" => {
                            fixture.push(write_file(&e, "e"));
                            fixture.push(chown(&e, eowner as i64, eowner as i64));
                            match call {
                                "unlink" => {
                                    after.push((e.clone(), (del != "OK").then_some(entry_attrs)));
                                    (unlink(&e), del)
                                }
                                "rename" => {
                                    let ok = del == "OK";
                                    after.push((e.clone(), (!ok).then_some(entry_attrs)));
                                    after.push((to.clone(), ok.then_some(entry_attrs)));
                                    (rename(&e, &to), del)
                                }
                                "rename_over" => {
                                    // The caller's own file, over the entry.
                                    fixture.push(write_file(&to, "mine"));
                                    fixture.push(chown(&to, who.uid as i64, who.gid as i64));
                                    let own = may_delete(who, dir, who.uid);
                                    let r = if own != "OK" { own } else { del };
                                    let ok = r == "OK";
                                    let mine = Attrs {
                                        uid: Some(who.uid),
                                        ..Attrs::default()
                                    };
                                    after.push((
                                        e.clone(),
                                        Some(if ok { mine } else { entry_attrs }),
                                    ));
                                    after.push((to.clone(), (!ok).then_some(mine)));
                                    (rename(&to, &e), r)
                                }
                                _ => (
                                    stat(&e),
                                    ok_or(may(who, dir.0, dir.1, dmode, X, true), "EACCES"),
                                ),
                            }
                        }
                        "rmdir" | "rename_dir" => {
                            fixture.push(mkdir(&e, 0o755));
                            fixture.push(chown(&e, eowner as i64, eowner as i64));
                            let ok = del == "OK";
                            after.push((e.clone(), (!ok).then_some(entry_attrs)));
                            if call == "rmdir" {
                                (rmdir(&e), del)
                            } else {
                                after.push((to.clone(), ok.then_some(entry_attrs)));
                                (rename(&e, &to), del)
                            }
                        }
                        "create" => {
                            let ok = create == "OK";
                            after.push((
                                e.clone(),
                                ok.then_some(Attrs {
                                    uid: Some(who.uid),
                                    gid: Some(who.gid),
                                    perm: Some(0o640),
                                    ..Attrs::default()
                                }),
                            ));
                            (
                                open(&e, &["O_CREAT", "O_WRONLY", "O_EXCL"], 0o640, "f"),
                                create,
                            )
                        }
                        "mkdir" => {
                            let ok = create == "OK";
                            after.push((
                                e.clone(),
                                ok.then_some(Attrs {
                                    uid: Some(who.uid),
                                    gid: Some(who.gid),
                                    perm: Some(0o705),
                                    ..Attrs::default()
                                }),
                            ));
                            (mkdir(&e, 0o705), create)
                        }
                        "move_out" | "move_dir_out" => {
                            // To another directory (0777): moving a directory also
                            // rewrites its "..", which takes write permission on it.
                            let dir_entry = call == "move_dir_out";
                            if dir_entry {
                                fixture.push(mkdir(&e, 0o755));
                            } else {
                                fixture.push(write_file(&e, "e"));
                            }
                            fixture.push(chown(&e, eowner as i64, eowner as i64));
                            let r = if del != "OK" {
                                del
                            } else {
                                ok_or(
                                    !dir_entry || may(who, eowner, eowner, 0o755, W, true),
                                    "EACCES",
                                )
                            };
                            let ok = r == "OK";
                            let out = format!(
                                "{}/{dmode:04o}-{eowner}-{call}-{}",
                                fs.p("de-out"),
                                who.name
                            );
                            after.push((e.clone(), (!ok).then_some(entry_attrs)));
                            after.push((out.clone(), ok.then_some(entry_attrs)));
                            (rename(&e, &out), r)
                        }
                        "listdir" => (
                            listdir(&d),
                            ok_or(may(who, dir.0, dir.1, dmode, R, true), "EACCES"),
                        ),
                        _ => {
                            // link(2) of a 0666 file owned by root (fs.protected_hardlinks
                            // allows it: the caller may read and write it).
                            let ok = create == "OK";
                            after.push((
                                e.clone(),
                                ok.then_some(Attrs {
                                    uid: Some(0),
                                    ..Attrs::default()
                                }),
                            ));
                            (link(&src, &e), create)
                        }
                    };
                    cases.push(MCase {
                        desc: format!(
                            "{call} of {e} (entry owner {eowner}) in dir mode {dmode:04o} \
                             (1001:1001)"
                        ),
                        who,
                        fixture_key: e.clone(),
                        fixture,
                        steps: vec![step],
                        expect,
                        after,
                    });
                }
            }
        }
    }
    cases
}

/// Makes each entry-matrix directory before, and sets its owner and mode after, the
/// entries' fixtures.
fn run_entry_matrix(fs: &Fs) {
    let cases = entry_cases(fs);
    let mut dirs = Vec::new();
    for &dmode in &DIR_MODES {
        for eowner in [MEMBER.uid, OTHER.uid] {
            dirs.push((fs.p(&format!("de/{dmode:04o}-{eowner}")), dmode));
        }
    }
    fs.setup(
        &dirs
            .iter()
            .map(|(d, _)| mkdir(d, 0o777))
            .collect::<Vec<_>>(),
    );
    let mut seen = BTreeSet::new();
    let fixtures: Vec<Vec<Value>> = cases
        .iter()
        .filter(|c| seen.insert(c.fixture_key.clone()))
        .map(|c| c.fixture.clone())
        .filter(|f| !f.is_empty())
        .collect();
    let res = fs.run_cases(ROOT, &fixtures, 8);
    for (f, r) in fixtures.iter().zip(&res) {
        for (s, r) in f.iter().zip(r) {
            assert_eq!(r.err, "OK", "[{}] fixture {s}: {}", fs.kind, r.value);
        }
    }
    let mut fin = Vec::new();
    for (d, dmode) in &dirs {
        fin.push(chown(d, OWNER.uid as i64, OWNER.gid as i64));
        fin.push(chmod(d, *dmode));
    }
    fs.setup(&fin);
    // The fixtures are in place: run with none.
    let cases: Vec<MCase> = cases
        .into_iter()
        .map(|c| MCase {
            fixture: Vec::new(),
            fixture_key: String::new(),
            ..c
        })
        .collect();
    run_matrix(fs, &cases);
}

/// Creating a file, directory or FIFO with special mode bits (S_ISUID, S_ISGID with and
/// without group execute, S_ISVTX) in a plain and in a setgid directory owned by
/// 1001:3000, by every caller: the new entry's owner, group and mode.
fn creation_cases(fs: &Fs) -> Vec<MCase> {
    let mut cases = Vec::new();
    let mut dirs = Vec::new();
    for sgid in [false, true] {
        let d = fs.p(if sgid { "cr-sgid" } else { "cr-plain" });
        dirs.push(mkdir(&d, 0o777));
        dirs.push(chown(&d, 1001, 3000));
        dirs.push(chmod(&d, if sgid { 0o2777 } else { 0o777 }));
        for who in CALLERS {
            for kind in ["reg", "dir", "fifo"] {
                for mode in [0o644, 0o2755, 0o2745, 0o4755, 0o1777, 0o3775] {
                    let p = format!("{d}/{kind}-{mode:04o}-{}", who.name);
                    let step = match kind {
                        "reg" => open(&p, &["O_CREAT", "O_WRONLY", "O_EXCL"], mode, "f"),
                        "dir" => mkdir(&p, mode),
                        _ => mkfifo(&p, mode),
                    };
                    // A new directory takes S_ISGID from its parent only (never from
                    // mkdir's mode); a new file loses S_ISGID (with group execute) in a
                    // setgid directory whose group its creator is not in.
                    let perm = if kind == "dir" {
                        (mode & 0o1777) | if sgid { 0o2000 } else { 0 }
                    } else if sgid && mode & 0o2010 == 0o2010 && !(who.root() || who.in_group(3000))
                    {
                        mode & !0o2000
                    } else {
                        mode
                    };
                    let gid = if sgid { 3000 } else { who.gid };
                    cases.push(MCase {
                        desc: format!(
                            "create {kind} mode {mode:04o} in the {} dir (1001:3000)",
                            if sgid { "setgid 2777" } else { "plain 0777" }
                        ),
                        who,
                        fixture_key: String::new(),
                        fixture: Vec::new(),
                        steps: vec![step],
                        expect: "OK",
                        after: vec![(
                            p,
                            Some(Attrs {
                                perm: Some(perm),
                                uid: Some(who.uid),
                                gid: Some(gid),
                                ..Attrs::default()
                            }),
                        )],
                    });
                }
            }
        }
    }
    fs.setup(&dirs);
    cases
}

posix_tests! {
    /// New files, directories and FIFOs x special mode bits x plain or setgid parent x
    /// every caller: owner, group and mode of the result.
    fn matrix_creation_in_setgid_and_plain_directories(fs) {
        let cases = creation_cases(fs);
        run_matrix(fs, &cases);
    }

    /// open/truncate/chmod/chown/utimensat/access... on regular files, FIFOs and
    /// directories x every caller x 12 modes, against the permission model.
    fn matrix_calls_on_files_fifos_and_directories(fs) {
        let cases = file_cases(fs);
        run_matrix(fs, &cases);
    }

    /// unlink/rename/rmdir/create/mkdir/link/stat/listdir/moving out of entries x every
    /// caller x 10 directory modes (with and without the sticky bit) x 2 entry owners.
    fn matrix_entries_in_directories_with_sticky_and_modes(fs) {
        run_entry_matrix(fs);
    }
}

#[test]
fn the_model_matches_textbook_cases() {
    // Owner class decides alone: an owner without r is refused even if others have it.
    assert!(!may(OWNER, 1001, 1001, 0o077, R, false));
    assert!(may(MEMBER, 1001, 1001, 0o040, R, false));
    assert!(may(PGID, 1001, 1001, 0o040, R, false));
    assert!(!may(OTHER, 1001, 1001, 0o770, R, false));
    assert!(may(ROOT, 1001, 1001, 0o000, R | W, false));
    assert!(!may(ROOT, 1001, 1001, 0o000, X, false));
    assert!(may(ROOT, 1001, 1001, 0o000, X, true));
    assert_eq!(may_delete(OTHER, (1001, 1001, 0o1777), 1002), "EPERM");
    assert_eq!(may_delete(OTHER, (1001, 1001, 0o1777), 1003), "OK");
    assert_eq!(may_delete(OWNER, (1001, 1001, 0o1777), 1002), "OK");
    assert_eq!(may_delete(OTHER, (1001, 1001, 0o755), 1003), "EACCES");
}
