//! Random namespace operation sequences against a simple in-memory model. Each case
//! prints its seed; STRIPEFS_SEED=<seed> replays one case.

use crate::common;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;
use stripefs_meta::Tuning;
use stripefs_wire::*;

const ROOT: u64 = 1;
const NAMES: [&str; 4] = ["a", "b", "c", "d"];
const OPS_PER_CASE: usize = 400;
const CASES: usize = 12;

#[derive(Clone, Debug)]
struct Node {
    ftype: FileType,
    nlink: u32,
    size: u64,
    parent: u64,
    children: BTreeMap<String, u64>,
}

#[derive(Default)]
struct Model {
    nodes: HashMap<u64, Node>,
    open: HashMap<u64, u32>,
    purged_files: u64,
    /// Highest inode number given so far.
    max_ino: u64,
    /// After a restart, inodes below this are of the server's previous life: while the
    /// grace period runs (the whole test), one whose last link goes away is kept as an
    /// orphan, since an old client might still reclaim it.
    grace_below: u64,
}

type Res = Result<Option<u64>, ErrorCode>;

impl Model {
    fn new() -> Model {
        let mut m = Model::default();
        m.nodes.insert(
            ROOT,
            Node {
                ftype: FileType::Dir,
                nlink: 2,
                size: 0,
                parent: ROOT,
                children: BTreeMap::new(),
            },
        );
        m
    }
    fn dirs(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.ftype == FileType::Dir)
            .map(|(i, _)| *i)
            .collect();
        v.sort();
        v
    }
    fn files(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.ftype == FileType::File && n.nlink > 0)
            .map(|(i, _)| *i)
            .collect();
        v.sort();
        v
    }
    fn entry(&self, p: u64, n: &str) -> Option<u64> {
        self.nodes[&p].children.get(n).copied()
    }
    fn add(&mut self, p: u64, n: &str, ino: u64, ftype: FileType) {
        self.max_ino = self.max_ino.max(ino);
        let parent = if ftype == FileType::Dir { p } else { 0 };
        let nlink = if ftype == FileType::Dir { 2 } else { 1 };
        self.nodes.insert(
            ino,
            Node {
                ftype,
                nlink,
                size: 0,
                parent,
                children: BTreeMap::new(),
            },
        );
        self.nodes
            .get_mut(&p)
            .unwrap()
            .children
            .insert(n.into(), ino);
        if ftype == FileType::Dir {
            self.nodes.get_mut(&p).unwrap().nlink += 1;
        }
    }
    fn new_entry(&self, p: u64, n: &str) -> Result<(), ErrorCode> {
        if self.entry(p, n).is_some() {
            Err(ErrorCode::Exists)
        } else {
            Ok(())
        }
    }
    fn drop_link(&mut self, ino: u64) {
        let node = self.nodes.get_mut(&ino).unwrap();
        node.nlink -= 1;
        if node.nlink == 0 && !self.open.contains_key(&ino) && ino >= self.grace_below {
            self.delete(ino);
        }
    }
    /// After a restart nothing is open; unlinked files that were open stay orphans for
    /// the grace period (longer than the test), as do files of the previous life that
    /// lose their last link during it.
    fn restart(&mut self) {
        self.open.clear();
        self.grace_below = self.max_ino + 1;
    }
    fn delete(&mut self, ino: u64) {
        let n = self.nodes.remove(&ino).unwrap();
        if n.ftype == FileType::File {
            self.purged_files += 1;
        }
    }
    fn unlink(&mut self, p: u64, n: &str) -> Res {
        let ino = self.entry(p, n).ok_or(ErrorCode::NotFound)?;
        if self.nodes[&ino].ftype == FileType::Dir {
            return Err(ErrorCode::IsDir);
        }
        self.nodes.get_mut(&p).unwrap().children.remove(n);
        self.drop_link(ino);
        Ok(None)
    }
    fn rmdir(&mut self, p: u64, n: &str) -> Res {
        let ino = self.entry(p, n).ok_or(ErrorCode::NotFound)?;
        if self.nodes[&ino].ftype != FileType::Dir {
            return Err(ErrorCode::NotDir);
        }
        if !self.nodes[&ino].children.is_empty() {
            return Err(ErrorCode::NotEmpty);
        }
        self.nodes.get_mut(&p).unwrap().children.remove(n);
        self.nodes.get_mut(&p).unwrap().nlink -= 1;
        self.delete(ino);
        Ok(None)
    }
    fn in_subtree(&self, mut at: u64, top: u64) -> bool {
        loop {
            if at == top {
                return true;
            }
            if at == ROOT {
                return false;
            }
            at = self.nodes[&at].parent;
        }
    }
    fn rename(&mut self, sp: u64, sn: &str, dp: u64, dn: &str, noreplace: bool) -> Res {
        let ino = self.entry(sp, sn).ok_or(ErrorCode::NotFound)?;
        let is_dir = self.nodes[&ino].ftype == FileType::Dir;
        let dst = self.entry(dp, dn);
        // Linux's order: EEXIST, then EINVAL for a directory into its own subtree,
        // ENOTEMPTY for a destination above the source, then the same inode (nothing to
        // do), then what the destination says.
        if dst.is_some() && noreplace {
            return Err(ErrorCode::Exists);
        }
        if is_dir && sp != dp && self.in_subtree(dp, ino) {
            return Err(ErrorCode::InvalidArgument);
        }
        // Then ENOTEMPTY for a destination above the source, whatever the types.
        if let Some(d) = dst {
            if d != ino && self.nodes[&d].ftype == FileType::Dir && self.in_subtree(sp, d) {
                return Err(ErrorCode::NotEmpty);
            }
        }
        if let Some(d) = dst {
            if d == ino {
                return Ok(None);
            }
            let d_dir = self.nodes[&d].ftype == FileType::Dir;
            match (is_dir, d_dir) {
                (false, true) => return Err(ErrorCode::IsDir),
                (true, false) => return Err(ErrorCode::NotDir),
                (true, true) if !self.nodes[&d].children.is_empty() => {
                    return Err(ErrorCode::NotEmpty)
                }
                _ => {}
            }
        }
        self.nodes.get_mut(&sp).unwrap().children.remove(sn);
        if let Some(d) = dst {
            self.nodes.get_mut(&dp).unwrap().children.remove(dn);
            if self.nodes[&d].ftype == FileType::Dir {
                self.nodes.get_mut(&dp).unwrap().nlink -= 1;
                self.delete(d);
            } else {
                self.drop_link(d);
            }
        }
        self.nodes
            .get_mut(&dp)
            .unwrap()
            .children
            .insert(dn.into(), ino);
        if is_dir && sp != dp {
            self.nodes.get_mut(&sp).unwrap().nlink -= 1;
            self.nodes.get_mut(&dp).unwrap().nlink += 1;
            self.nodes.get_mut(&ino).unwrap().parent = dp;
        }
        Ok(None)
    }
}

impl Model {
    /// renameat2 RENAME_EXCHANGE, in Linux's order of checks.
    fn exchange(&mut self, ap: u64, an: &str, bp: u64, bn: &str) -> Res {
        let a = self.entry(ap, an).ok_or(ErrorCode::NotFound)?;
        let b = self.entry(bp, bn).ok_or(ErrorCode::NotFound)?;
        let a_dir = self.nodes[&a].ftype == FileType::Dir;
        let b_dir = self.nodes[&b].ftype == FileType::Dir;
        if ap != bp && ((a_dir && self.in_subtree(bp, a)) || (b_dir && self.in_subtree(ap, b))) {
            return Err(ErrorCode::InvalidArgument);
        }
        if a == b {
            return Ok(None);
        }
        self.nodes
            .get_mut(&ap)
            .unwrap()
            .children
            .insert(an.into(), b);
        self.nodes
            .get_mut(&bp)
            .unwrap()
            .children
            .insert(bn.into(), a);
        if ap != bp {
            for (ino, is_dir, from, to) in [(a, a_dir, ap, bp), (b, b_dir, bp, ap)] {
                if is_dir {
                    self.nodes.get_mut(&ino).unwrap().parent = to;
                    self.nodes.get_mut(&from).unwrap().nlink -= 1;
                    self.nodes.get_mut(&to).unwrap().nlink += 1;
                }
            }
        }
        Ok(None)
    }
}

fn ok_ino(r: Result<Response, WireError>) -> Result<Option<u64>, ErrorCode> {
    match r {
        Ok(Response::Attr(a)) => Ok(Some(a.ino.0)),
        Ok(_) => Ok(None),
        Err(e) => Err(e.code),
    }
}

fn step(fs: &Fs, m: &mut Model, rng: &mut StdRng, log: &mut Vec<String>) {
    let dirs = m.dirs();
    let p = dirs[rng.gen_range(0..dirs.len())];
    let n = NAMES[rng.gen_range(0..NAMES.len())];
    let r = Cred::root();
    let choice = rng.gen_range(0..100);
    let (desc, got, want): (String, Res, Res) = match choice {
        0..=14 => {
            let got = ok_ino(fs.root(Request::Create {
                parent: InodeId(p),
                name: n.into(),
                mode: 0o644,
                exclusive: true,
                layout: LayoutHint::default(),
            }));
            let want = m.new_entry(p, n).map(|_| got.ok().flatten());
            if let (Ok(Some(ino)), Ok(_)) = (&got, &want) {
                m.add(p, n, *ino, FileType::File);
            }
            (format!("create {p}/{n}"), got, want)
        }
        15..=26 => {
            let got = ok_ino(fs.root(Request::Mkdir {
                parent: InodeId(p),
                name: n.into(),
                mode: 0o755,
            }));
            let want = m.new_entry(p, n).map(|_| got.ok().flatten());
            if let (Ok(Some(ino)), Ok(_)) = (&got, &want) {
                m.add(p, n, *ino, FileType::Dir);
            }
            (format!("mkdir {p}/{n}"), got, want)
        }
        27..=31 => {
            let got = ok_ino(fs.root(Request::Symlink {
                parent: InodeId(p),
                name: n.into(),
                target: "x/y".into(),
            }));
            let want = m.new_entry(p, n).map(|_| got.ok().flatten());
            if let (Ok(Some(ino)), Ok(_)) = (&got, &want) {
                m.add(p, n, *ino, FileType::Symlink);
                m.nodes.get_mut(ino).unwrap().size = 3;
            }
            (format!("symlink {p}/{n}"), got, want)
        }
        32..=43 => (
            format!("unlink {p}/{n}"),
            ok_ino(fs.unlink(&r, p, n)),
            m.unlink(p, n),
        ),
        44..=51 => (
            format!("rmdir {p}/{n}"),
            ok_ino(fs.root(Request::Rmdir {
                parent: InodeId(p),
                name: n.into(),
            })),
            m.rmdir(p, n),
        ),
        70..=74 => {
            let bp = dirs[rng.gen_range(0..dirs.len())];
            let bn = NAMES[rng.gen_range(0..NAMES.len())];
            (
                format!("exchange {p}/{n} <-> {bp}/{bn}"),
                ok_ino(fs.exchange(&r, p, n, bp, bn)),
                m.exchange(p, n, bp, bn),
            )
        }
        52..=69 => {
            let dp = dirs[rng.gen_range(0..dirs.len())];
            let dn = NAMES[rng.gen_range(0..NAMES.len())];
            let nr = rng.gen_bool(0.1);
            (
                format!("rename {p}/{n} -> {dp}/{dn} noreplace={nr}"),
                ok_ino(fs.rename(p, n, dp, dn, nr)),
                m.rename(p, n, dp, dn, nr),
            )
        }
        75..=82 => {
            let files = m.files();
            if files.is_empty() {
                return;
            }
            let f = files[rng.gen_range(0..files.len())];
            let got = ok_ino(fs.root(Request::Link {
                ino: InodeId(f),
                parent: InodeId(p),
                name: n.into(),
            }));
            let want = m.new_entry(p, n).map(|_| Some(f));
            if want.is_ok() {
                m.nodes.get_mut(&p).unwrap().children.insert(n.into(), f);
                m.nodes.get_mut(&f).unwrap().nlink += 1;
            }
            (format!("link {f} -> {p}/{n}"), got, want)
        }
        83..=89 => {
            let files = m.files();
            if files.is_empty() {
                return;
            }
            let f = files[rng.gen_range(0..files.len())];
            let size = rng.gen_range(0..1_000_000u64);
            let got = ok_ino(fs.root(Request::ExtendSize {
                ino: InodeId(f),
                size,
                mtime_ns: T0,
            }));
            let node = m.nodes.get_mut(&f).unwrap();
            node.size = node.size.max(size);
            (format!("extend {f} to {size}"), got, Ok(Some(f)))
        }
        90..=94 => {
            let files = m.files();
            if files.is_empty() {
                return;
            }
            let f = files[rng.gen_range(0..files.len())];
            let got = ok_ino(fs.root(Request::Open {
                ino: InodeId(f),
                session: fs.sess(1),
                read: true,
                write: true,
            }));
            *m.open.entry(f).or_default() += 1;
            (format!("open {f}"), got, Ok(Some(f)))
        }
        _ => {
            let mut open: Vec<u64> = m.open.keys().copied().collect();
            if open.is_empty() {
                return;
            }
            open.sort();
            let f = open[rng.gen_range(0..open.len())];
            let got = ok_ino(fs.root(Request::Close {
                ino: InodeId(f),
                session: fs.sess(1),
            }));
            let c = m.open.get_mut(&f).unwrap();
            *c -= 1;
            if *c == 0 {
                m.open.remove(&f);
                if m.nodes[&f].nlink == 0 {
                    m.delete(f);
                }
            }
            (format!("close {f}"), got, Ok(None))
        }
    };
    log.push(format!("{desc}: {got:?}"));
    let same = match (&got, &want) {
        (Ok(_), Ok(_)) => true,
        (Err(a), Err(b)) => a == b,
        _ => false,
    };
    assert!(
        same,
        "{desc}: server {got:?}, model {want:?}\nhistory:\n{}",
        log.join("\n")
    );
}

/// Compares the whole namespace and every inode's attributes.
fn compare(fs: &Fs, m: &Model) {
    for (&ino, node) in &m.nodes {
        let a = fs
            .getattr(ino)
            .unwrap_or_else(|e| panic!("inode {ino} missing: {e}"));
        assert_eq!(
            (a.ftype, a.nlink, a.size),
            (node.ftype, node.nlink, node.size),
            "inode {ino}"
        );
        if node.ftype == FileType::Dir {
            let names = fs.list(ino, 3);
            let want: Vec<String> = node.children.keys().cloned().collect();
            assert_eq!(names, want, "entries of inode {ino}");
            for (name, child) in &node.children {
                assert_eq!(fs.lookup(ino, name).unwrap().ino.0, *child);
            }
        }
    }
    let (inodes, files, dirs, open) = fs.status();
    assert_eq!(inodes, m.nodes.len() as u64);
    let model_files = m
        .nodes
        .values()
        .filter(|n| n.ftype == FileType::File)
        .count() as u64;
    let model_dirs = m
        .nodes
        .values()
        .filter(|n| n.ftype == FileType::Dir)
        .count() as u64;
    assert_eq!(
        (files, dirs, open),
        (model_files, model_dirs, m.open.len() as u64)
    );
    assert_eq!(fs.svc.purge_queue_len().unwrap(), m.purged_files);
    let rep = fs.check();
    let orphans: HashSet<u64> = m
        .nodes
        .iter()
        .filter(|(_, n)| n.nlink == 0)
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(rep.orphans, orphans.len() as u64);
}

/// Runs one case twice: with the default checkpoints (everything stays in the in-memory
/// layers), and with a checkpoint after nearly every batch and a crash half-way (reads
/// cross the active and frozen layers and redb, and the log is replayed).
fn run_case(seed: u64) {
    for eager in [false, true] {
        let tuning = if eager {
            Tuning {
                freeze_age: Duration::ZERO,
                ..Tuning::default()
            }
        } else {
            Tuning::default()
        };
        let mut fs = Fs::tuned(common::cluster(4), tuning);
        let mut m = Model::new();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut log = Vec::new();
        // The reopened service counts its checkpoints from zero.
        let mut checkpoints_before_crash = 0;
        for i in 0..OPS_PER_CASE {
            if eager && i == OPS_PER_CASE / 2 {
                checkpoints_before_crash = fs.svc.checkpoints();
                fs.crash();
                m.restart();
                log.push("crash and reopen".into());
            }
            step(&fs, &mut m, &mut rng, &mut log);
        }
        if eager {
            let checkpoints = checkpoints_before_crash + fs.svc.checkpoints();
            assert!(
                checkpoints > 10,
                "checkpoints ran during the case: {checkpoints}"
            );
        }
        compare(&fs, &m);
    }
}

#[test]
fn random_operations_match_the_model() {
    if let Ok(s) = std::env::var("STRIPEFS_SEED") {
        let seed: u64 = s.parse().expect("STRIPEFS_SEED is a number");
        eprintln!("replaying seed {seed}");
        return run_case(seed);
    }
    let base: u64 = rand::random();
    for i in 0..CASES as u64 {
        let seed = base.wrapping_add(i);
        eprintln!("model case seed {seed} (replay with STRIPEFS_SEED={seed})");
        run_case(seed);
    }
}
