//! An offline consistency check of the namespace (fsck), used by tests and operators.
//!
//! It verifies: every entry's parent is a directory and its child exists with the type
//! the entry records; every inode's link count equals its entries (plus its
//! subdirectories and `.` for directories); every directory has exactly one entry (root
//! none) naming its recorded parent, and is reachable from the root; inodes with no
//! entry are orphans marked as such; purge-queue entries have no inode left; the
//! counters agree with the tables.

use crate::store::{
    decode_inode, decode_layout, type_from_code, Inode, Rd, Tables, META_DIRS, META_FILES,
    META_NEXT_INO,
};
use redb::{Database, ReadableTable};
use std::collections::{HashMap, HashSet};
use stripefs_wire::{FileType, InodeId};

/// Most problems listed in one report; the count is exact.
const MAX_LISTED: usize = 100;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub inodes: u64,
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// FIFOs, sockets and device nodes.
    pub specials: u64,
    pub dirents: u64,
    pub orphans: u64,
    pub purge_pending: u64,
}

#[derive(Default)]
struct Problems {
    count: usize,
    listed: Vec<String>,
}

impl Problems {
    fn add(&mut self, p: String) {
        self.count += 1;
        if self.listed.len() < MAX_LISTED {
            self.listed.push(p);
        }
    }
}

/// Checks the database at `path` (which no server may have open), after applying what
/// its metadata log holds beyond the last checkpoint, as a server start would.
pub fn check(path: &std::path::Path) -> Result<Report, String> {
    if !path.exists() {
        return Err(format!("no metadata database at {}", path.display()));
    }
    check_on(&crate::FsDisk, path)
}

/// [`check`] on a chosen disk (the simulator's).
pub fn check_on(disk: &dyn crate::MetaDisk, path: &std::path::Path) -> Result<Report, String> {
    let db = disk.open_db(path)?;
    crate::recover(disk, &db, path)
        .map_err(|e| format!("metadata database {}: {e}", path.display()))?;
    check_db(&db)
}

/// What the data servers should hold, for an offline check of objects against inodes.
#[derive(Clone, Debug, Default)]
pub struct Inventory {
    /// Every inode number.
    pub inodes: HashSet<u64>,
    /// Regular files: inode number, size and the data servers of the layout.
    pub files: Vec<(u64, u64, Vec<stripefs_wire::ServerId>)>,
    /// Inodes gone from the namespace whose objects the purge thread still has to
    /// remove (it does on the next start).
    pub purging: HashSet<u64>,
}

/// Reads the inodes and the purge queue of the database at `path` (which no server
/// may have open), after applying its metadata log as a server start would.
pub fn inventory(path: &std::path::Path) -> Result<Inventory, String> {
    if !path.exists() {
        return Err(format!("no metadata database at {}", path.display()));
    }
    use crate::MetaDisk;
    let disk = crate::FsDisk;
    let db = disk.open_db(path)?;
    crate::recover(&disk, &db, path)
        .map_err(|e| format!("metadata database {}: {e}", path.display()))?;
    let txn = db.begin_read().map_err(|e| format!("fsck: {e}"))?;
    let rd = Rd::open(&txn).map_err(|e| format!("fsck: {e}"))?;
    let mut p = Problems::default();
    let mut inv = Inventory::default();
    for (ino, i) in load_inodes(&rd, &mut p)? {
        inv.inodes.insert(ino);
        if let (FileType::File, Some(l)) = (i.ftype, &i.layout) {
            // An inline file's bytes are not on its data servers: none expected there.
            let on_servers = if i.inline.is_some() { 0 } else { i.size };
            inv.files.push((ino, on_servers, l.servers.clone()));
        }
    }
    for item in rd.purge.iter().map_err(|e| e.to_string())? {
        inv.purging
            .insert(item.map_err(|e| e.to_string())?.0.value());
    }
    inv.files.sort_unstable_by_key(|f| f.0);
    Ok(inv)
}

pub fn check_db(db: &Database) -> Result<Report, String> {
    let txn = db.begin_read().map_err(|e| format!("fsck: {e}"))?;
    let rd = Rd::open(&txn).map_err(|e| format!("fsck: {e}"))?;
    let mut p = Problems::default();
    let inodes = load_inodes(&rd, &mut p)?;
    let mut report = Report::default();
    for (ino, inode) in &inodes {
        if let Some(i) = &inode.inline {
            if let Err(e) = i.check(*ino) {
                p.add(e.message);
            }
            if inode.ftype != FileType::File || i.bytes.len() as u64 != inode.size {
                p.add(format!(
                    "inode {ino} ({:?}, size {}) holds {} inline bytes",
                    inode.ftype,
                    inode.size,
                    i.bytes.len()
                ));
            }
        }
        match inode.ftype {
            FileType::File => report.files += 1,
            FileType::Dir => report.dirs += 1,
            FileType::Symlink => report.symlinks += 1,
            FileType::Fifo | FileType::Socket | FileType::BlockDev | FileType::CharDev => {
                report.specials += 1
            }
        }
    }
    report.inodes = inodes.len() as u64;
    let links = check_dirents(&rd, &inodes, &mut p, &mut report)?;
    check_links(&rd, &inodes, &links, &mut p, &mut report)?;
    check_reachable(&inodes, &links, &mut p);
    check_counters(&rd, &inodes, &report, &mut p)?;
    if p.count == 0 {
        return Ok(report);
    }
    Err(format!(
        "fsck found {} problems:\n  {}",
        p.count,
        p.listed.join("\n  ")
    ))
}

fn load_inodes(rd: &Rd, p: &mut Problems) -> Result<HashMap<u64, Inode>, String> {
    let mut out = HashMap::new();
    for item in rd.inodes.iter().map_err(|e| e.to_string())? {
        let (k, v) = item.map_err(|e| e.to_string())?;
        match decode_inode(k.value(), v.value()) {
            Ok(i) => {
                out.insert(k.value(), i);
            }
            Err(e) => p.add(e.message),
        }
    }
    if !matches!(out.get(&InodeId::ROOT.0), Some(r) if r.is_dir()) {
        p.add("the root directory (inode 1) is missing".into());
    }
    Ok(out)
}

/// Entries naming each inode: (parent, name).
type Links = HashMap<u64, Vec<(u64, String)>>;

fn check_dirents(
    rd: &Rd,
    inodes: &HashMap<u64, Inode>,
    p: &mut Problems,
    report: &mut Report,
) -> Result<Links, String> {
    let mut links: Links = HashMap::new();
    for item in rd.dirents.iter().map_err(|e| e.to_string())? {
        let (k, v) = item.map_err(|e| e.to_string())?;
        let (parent, name) = k.value();
        let (child, code) = v.value();
        report.dirents += 1;
        if !matches!(inodes.get(&parent), Some(d) if d.is_dir()) {
            p.add(format!(
                "entry {name:?} is in inode {parent}, which is not a directory"
            ));
        }
        match (inodes.get(&child), type_from_code(parent, name, code)) {
            (None, _) => p.add(format!(
                "entry {name:?} in inode {parent} points to missing inode {child}"
            )),
            (Some(i), Ok(t)) if i.ftype != t => p.add(format!(
                "entry {name:?} in inode {parent} says {t:?} but inode {child} is {:?}",
                i.ftype
            )),
            (_, Err(e)) => p.add(e.message),
            _ => {}
        }
        links
            .entry(child)
            .or_default()
            .push((parent, name.to_string()));
    }
    Ok(links)
}

fn check_links(
    rd: &Rd,
    inodes: &HashMap<u64, Inode>,
    links: &Links,
    p: &mut Problems,
    report: &mut Report,
) -> Result<(), String> {
    let mut subdirs: HashMap<u64, u32> = HashMap::new();
    for (ino, i) in inodes {
        if i.is_dir() && *ino != InodeId::ROOT.0 {
            *subdirs.entry(i.parent).or_default() += 1;
        }
    }
    let mut orphans = HashSet::new();
    for item in rd.orphans.iter().map_err(|e| e.to_string())? {
        orphans.insert(item.map_err(|e| e.to_string())?.0.value());
    }
    report.orphans = orphans.len() as u64;
    for (ino, i) in inodes {
        let named = links.get(ino).map_or(0, |l| l.len()) as u32;
        if i.is_dir() {
            check_dir_links(*ino, i, links, subdirs.get(ino).copied().unwrap_or(0), p);
        } else if i.nlink != named {
            p.add(format!(
                "inode {ino} has nlink {} but {named} entries",
                i.nlink
            ));
        }
        if named == 0 && *ino != InodeId::ROOT.0 && !orphans.contains(ino) {
            p.add(format!("inode {ino} has no entry and is not an orphan"));
        }
    }
    for o in &orphans {
        if !matches!(inodes.get(o), Some(i) if i.nlink == 0) {
            p.add(format!(
                "orphan mark on inode {o}, which is missing or still linked"
            ));
        }
    }
    for item in rd.purge.iter().map_err(|e| e.to_string())? {
        let (k, v) = item.map_err(|e| e.to_string())?;
        report.purge_pending += 1;
        if inodes.contains_key(&k.value()) {
            p.add(format!(
                "inode {} is queued for purge but still exists",
                k.value()
            ));
        }
        if let Err(e) = decode_layout(k.value(), v.value()) {
            p.add(e.message);
        }
    }
    Ok(())
}

fn check_dir_links(ino: u64, i: &Inode, links: &Links, subdirs: u32, p: &mut Problems) {
    let names = links.get(&ino).map(|l| l.as_slice()).unwrap_or(&[]);
    let want = 2 + subdirs;
    if i.nlink != want {
        p.add(format!(
            "directory inode {ino} has nlink {} but should have {want}",
            i.nlink
        ));
    }
    let expected_entries = if ino == InodeId::ROOT.0 { 0 } else { 1 };
    if names.len() != expected_entries {
        p.add(format!(
            "directory inode {ino} has {} entries naming it",
            names.len()
        ));
    } else if let Some((parent, name)) = names.first() {
        if *parent != i.parent {
            p.add(format!(
                "directory inode {ino} is {name:?} in inode {parent} but records parent {}",
                i.parent
            ));
        }
    }
}

/// Every directory is reachable from the root by following recorded parents.
fn check_reachable(inodes: &HashMap<u64, Inode>, links: &Links, p: &mut Problems) {
    let mut ok: HashSet<u64> = HashSet::from([InodeId::ROOT.0]);
    for (&ino, i) in inodes {
        if !i.is_dir() || links.get(&ino).is_none() {
            continue;
        }
        let mut path = vec![ino];
        let mut at = i.parent;
        while !ok.contains(&at) {
            if path.contains(&at) || path.len() > inodes.len() {
                p.add(format!(
                    "directory inode {ino} is not reachable from the root"
                ));
                path.clear();
                break;
            }
            path.push(at);
            at = match inodes.get(&at) {
                Some(d) if d.is_dir() => d.parent,
                _ => {
                    p.add(format!("directory inode {ino} has a missing ancestor {at}"));
                    path.clear();
                    break;
                }
            };
        }
        ok.extend(path);
    }
}

fn check_counters(
    rd: &Rd,
    inodes: &HashMap<u64, Inode>,
    report: &Report,
    p: &mut Problems,
) -> Result<(), String> {
    let c = |k: &str| rd.counter(k).map_err(|e| e.to_string());
    if c(META_FILES)? != report.files || c(META_DIRS)? != report.dirs {
        p.add(format!(
            "counters say {} files and {} dirs, tables hold {} and {}",
            c(META_FILES)?,
            c(META_DIRS)?,
            report.files,
            report.dirs
        ));
    }
    let next = c(META_NEXT_INO)?;
    if let Some(max) = inodes.keys().max().filter(|&&m| m >= next) {
        p.add(format!(
            "next inode number {next} is not above the largest inode {max}"
        ));
    }
    Ok(())
}
