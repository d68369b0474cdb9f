//! The offline check and repair of the metadata log (`stripefs meta-log check|repair`).
//!
//! A server refuses to start when its log shows lost acknowledged work: a damaged record
//! with valid records behind it, a gap in the numbers, or a missing log file
//! (`wal::recover`). [`inspect`] says what the log holds: every file, the ranges of
//! valid records in it, where it is damaged, which records replay cleanly after the
//! last checkpoint, and which valid records lie beyond the damage and would be lost,
//! with their operations summarised. [`repair`] keeps what is valid: the records before
//! the damage and, if the namespace checks clean with them, the valid records beyond it
//! (else it drops those, saying which); it writes them into the tables, moves the
//! damaged log files aside (never deletes them) and starts a fresh log.

use crate::disk::{dir_of, read_all, MetaDisk};
use crate::overlay::Gen;
use crate::store::{self, Rd, Tables};
use crate::wal::{self, paths};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Most names listed per record in a summary.
const NAMES_LISTED: usize = 8;

/// One valid record found in a log file.
#[derive(Clone, Debug, Serialize)]
pub struct RecordInfo {
    pub seq: u64,
    pub file: PathBuf,
    pub byte: u64,
    /// The record's operations, summarised.
    pub summary: String,
}

/// One log file.
#[derive(Clone, Debug, Serialize)]
pub struct FileInfo {
    pub path: PathBuf,
    pub present: bool,
    pub bytes: u64,
    /// Runs of consecutively numbered valid records: (first, last, first byte, end byte).
    pub runs: Vec<(u64, u64, u64, u64)>,
    /// Where the file's chain of records from its start is damaged, when valid records
    /// numbered above the chain's end lie beyond it (a torn last record is not damage).
    pub damaged_at_byte: Option<u64>,
}

/// What the log of one database holds.
#[derive(Clone, Debug, Serialize)]
pub struct LogReport {
    pub db: PathBuf,
    /// The last log record the tables include.
    pub checkpoint: u64,
    pub files: Vec<FileInfo>,
    /// Records after the checkpoint that replay cleanly: (first, last), if any.
    pub replayable: Option<(u64, u64)>,
    /// Numbers after the replayable records with no valid record: (first, last).
    pub missing: Vec<(u64, u64)>,
    /// Valid records beyond the first missing number: acknowledged work a start
    /// truncated at the damage would lose.
    pub beyond: Vec<RecordInfo>,
    /// Why a server would refuse to start, `None` if it would start.
    pub refusal: Option<String>,
}

impl LogReport {
    pub fn is_clean(&self) -> bool {
        self.refusal.is_none()
    }

    /// The report for people.
    pub fn render(&self) -> String {
        let mut out = format!(
            "metadata log of {}: the tables hold records up to {}\n",
            self.db.display(),
            self.checkpoint
        );
        for f in &self.files {
            if !f.present {
                out += &format!("  {}: MISSING\n", f.path.display());
                continue;
            }
            out += &format!("  {}: {} bytes\n", f.path.display(), f.bytes);
            for (a, b, from, to) in &f.runs {
                out += &format!("    records {a}..={b} at bytes {from}..{to}\n");
            }
            if let Some(at) = f.damaged_at_byte {
                out += &format!("    DAMAGED at byte {at}\n");
            }
        }
        match self.replayable {
            Some((a, b)) => out += &format!("  replayable: records {a}..={b}\n"),
            None => out += "  replayable: none (nothing after the checkpoint)\n",
        }
        for (a, b) in &self.missing {
            out += &format!("  missing: records {a}..={b}\n");
        }
        if !self.beyond.is_empty() {
            out += &format!(
                "  {} valid records beyond the damage (lost if the log is cut there):\n",
                self.beyond.len()
            );
            for r in &self.beyond {
                out += &format!(
                    "    record {} ({} byte {}): {}\n",
                    r.seq,
                    r.file.display(),
                    r.byte,
                    r.summary
                );
            }
        }
        match &self.refusal {
            None => out += "  clean: a server starts on it\n",
            Some(why) => out += &format!("  a server refuses to start: {why}\n"),
        }
        out
    }
}

/// Every valid record in `bytes` (at any offset), with its offset, in file order.
fn scan(bytes: &[u8]) -> Vec<(usize, u64, &[u8])> {
    let mut out = Vec::new();
    let mut off = 0usize;
    while off + wal::HEADER <= bytes.len() {
        match wal::record_at(bytes, off) {
            Some((seq, payload)) => {
                out.push((off, seq, payload));
                off += wal::HEADER + payload.len();
            }
            None => off += 1,
        }
    }
    out
}

/// A record's operations in a line.
fn summarise(seq: u64, payload: &[u8]) -> String {
    let mut g = Gen::default();
    if let Err(e) = wal::decode_into(seq, payload, &mut g) {
        return format!("does not decode: {e}");
    }
    let mut parts = Vec::new();
    let mut names = Vec::new();
    let (mut added, mut removed) = (0, 0);
    for (parent, entries) in &g.dirents {
        for (name, v) in entries {
            match v {
                Some((child, t)) => {
                    added += 1;
                    names.push(format!("+{name:?} in {parent} -> {child} ({t:?})"));
                }
                None => {
                    removed += 1;
                    names.push(format!("-{name:?} in {parent}"));
                }
            }
        }
    }
    if added + removed > 0 {
        let more = names.len().saturating_sub(NAMES_LISTED);
        names.truncate(NAMES_LISTED);
        let mut s = format!(
            "{added} entries added, {removed} removed [{}",
            names.join(", ")
        );
        if more > 0 {
            s += &format!(", {more} more");
        }
        parts.push(s + "]");
    }
    let written = g.inodes.values().filter(|v| v.is_some()).count();
    let deleted = g.inodes.len() - written;
    if !g.inodes.is_empty() {
        parts.push(format!("{written} inodes written, {deleted} deleted"));
    }
    if !g.purge.is_empty() {
        parts.push(format!("{} purge-queue changes", g.purge.len()));
    }
    if !g.orphans.is_empty() {
        parts.push(format!("{} orphan marks", g.orphans.len()));
    }
    if parts.is_empty() {
        parts.push("counters only".into());
    }
    parts.join("; ")
}

/// The last log record the tables of `db` include.
fn checkpoint_of(db: &redb::Database) -> Result<u64, String> {
    store::create_tables(db).map_err(|e| e.to_string())?;
    let txn = db.begin_read().map_err(|e| e.to_string())?;
    Rd::open(&txn)
        .and_then(|rd| rd.counter(store::META_WAL_SEQ))
        .map_err(|e| e.to_string())
}

/// The valid records after the checkpoint, by number.
type Found = BTreeMap<u64, (PathBuf, u64, Vec<u8>)>;

fn read_log(
    disk: &dyn MetaDisk,
    db: &Path,
    checkpoint: u64,
) -> Result<(Vec<FileInfo>, Found), String> {
    let mut files = Vec::new();
    let mut found = Found::new();
    for p in paths(db) {
        let Some(bytes) =
            read_all(disk, &p).map_err(|e| format!("reading {}: {e}", p.display()))?
        else {
            files.push(FileInfo {
                path: p,
                present: false,
                bytes: 0,
                runs: vec![],
                damaged_at_byte: None,
            });
            continue;
        };
        let (chain, end) = wal::chain_with_end(&bytes);
        let last = chain.last().map_or(0, |(seq, _)| *seq);
        let damaged = wal::record_beyond(&bytes, end, last.max(checkpoint)).map(|_| end as u64);
        let mut runs: Vec<(u64, u64, u64, u64)> = Vec::new();
        for (off, seq, payload) in scan(&bytes) {
            let to = (off + wal::HEADER + payload.len()) as u64;
            match runs.last_mut() {
                Some(r) if r.1.checked_add(1) == Some(seq) && r.3 == off as u64 => {
                    r.1 = seq;
                    r.3 = to;
                }
                _ => runs.push((seq, seq, off as u64, to)),
            }
            if seq > checkpoint {
                found
                    .entry(seq)
                    .or_insert_with(|| (p.clone(), off as u64, payload.to_vec()));
            }
        }
        files.push(FileInfo {
            path: p,
            present: true,
            bytes: bytes.len() as u64,
            runs,
            damaged_at_byte: damaged,
        });
    }
    Ok((files, found))
}

/// What the log of database `db` holds (see the module comment). Opens the database:
/// no server may be running on it.
pub fn inspect(disk: &dyn MetaDisk, db: &Path) -> Result<LogReport, String> {
    if disk.open(db, false).map_err(|e| e.to_string())?.is_none() {
        return Err(format!("no metadata database at {}", db.display()));
    }
    let checkpoint = checkpoint_of(&disk.open_db(db)?)?;
    let (files, found) = read_log(disk, db, checkpoint)?;
    let mut last = checkpoint;
    for &seq in found.keys() {
        if seq != last + 1 {
            break;
        }
        last = seq;
    }
    let mut missing = Vec::new();
    let mut beyond = Vec::new();
    let mut expect = last + 1;
    for (&seq, (file, byte, payload)) in found.range(last + 1..) {
        if seq != expect {
            missing.push((expect, seq - 1));
        }
        expect = seq + 1;
        beyond.push(RecordInfo {
            seq,
            file: file.clone(),
            byte: *byte,
            summary: summarise(seq, payload),
        });
    }
    let refusal = wal::recover(disk, db, checkpoint).err().map(|e| e.message);
    Ok(LogReport {
        db: db.to_path_buf(),
        checkpoint,
        files,
        replayable: (last > checkpoint).then_some((checkpoint + 1, last)),
        missing,
        beyond,
        refusal,
    })
}

/// What [`repair`] did or would do.
#[derive(Clone, Debug, Serialize)]
pub struct RepairPlan {
    pub report: LogReport,
    /// The records written into the tables.
    pub kept: Vec<u64>,
    /// Valid records dropped because the namespace did not check clean with them.
    pub dropped: Vec<RecordInfo>,
    /// Why they were dropped.
    pub dropped_because: Option<String>,
    /// Where the old log files were moved (empty for a dry run or nothing to repair).
    pub moved_aside: Vec<(PathBuf, PathBuf)>,
    pub applied: bool,
}

impl RepairPlan {
    pub fn render(&self) -> String {
        let mut out = self.report.render();
        if self.report.is_clean() {
            out += "nothing to repair\n";
            return out;
        }
        let range = |v: &[u64]| match (v.first(), v.last()) {
            (Some(a), Some(b)) => format!("{} records ({a}..={b})", v.len()),
            _ => "no records".into(),
        };
        out += &format!("repair keeps {}\n", range(&self.kept));
        if !self.dropped.is_empty() {
            out += &format!(
                "repair DROPS {} valid records beyond the damage ({}):\n",
                self.dropped.len(),
                self.dropped_because.as_deref().unwrap_or("")
            );
            for r in &self.dropped {
                out += &format!("    record {}: {}\n", r.seq, r.summary);
            }
        }
        for (from, to) in &self.moved_aside {
            out += &format!("moved {} to {}\n", from.display(), to.display());
        }
        out += if self.applied {
            "repaired: a server starts on it\n"
        } else {
            "nothing changed (dry run): run again with --yes to repair\n"
        };
        out
    }
}

/// Sets the file and directory counters to what the tables hold: a record dropped in the
/// middle of the log leaves the later records' counts off by its changes.
fn recount(db: &redb::Database) -> Result<(), String> {
    use redb::ReadableTable;
    let txn = db.begin_write().map_err(|e| e.to_string())?;
    {
        let inodes = txn.open_table(store::INODES).map_err(|e| e.to_string())?;
        let (mut files, mut dirs) = (0u64, 0u64);
        for item in inodes.iter().map_err(|e| e.to_string())? {
            let (k, v) = item.map_err(|e| e.to_string())?;
            match store::decode_inode(k.value(), v.value()).map(|i| i.ftype) {
                Ok(stripefs_wire::FileType::File) => files += 1,
                Ok(stripefs_wire::FileType::Dir) => dirs += 1,
                _ => {}
            }
        }
        let mut meta = txn.open_table(store::META).map_err(|e| e.to_string())?;
        meta.insert(store::META_FILES, files)
            .map_err(|e| e.to_string())?;
        meta.insert(store::META_DIRS, dirs)
            .map_err(|e| e.to_string())?;
    }
    txn.commit().map_err(|e| e.to_string())
}

/// Writes `gen` (log records up to `seq`) into a copy of the database and checks the
/// namespace there; the copy is removed.
fn trial(disk: &dyn MetaDisk, db: &Path, gen: &Gen, seq: u64) -> Result<(), String> {
    let mut name = db.as_os_str().to_owned();
    name.push(".repair-trial");
    let copy = PathBuf::from(name);
    let _ = disk.remove(&copy);
    let bytes = read_all(disk, db)
        .map_err(|e| e.to_string())?
        .ok_or("database vanished")?;
    let result = (|| {
        let f = disk
            .open(&copy, true)
            .map_err(|e| e.to_string())?
            .ok_or("cannot create the trial copy")?;
        f.write_at(&bytes, 0).map_err(|e| e.to_string())?;
        drop(f);
        let trial_db = disk.open_db(&copy)?;
        store::commit_gen(&trial_db, gen, seq).map_err(|e| e.to_string())?;
        recount(&trial_db)?;
        crate::fsck::check_db(&trial_db).map(|_| ())
    })();
    let _ = disk.remove(&copy);
    result
}

/// Repairs the log of database `db` (see the module comment); with `apply` false only
/// says what it would do. No server may be running on the database.
pub fn repair(disk: &dyn MetaDisk, db: &Path, apply: bool) -> Result<RepairPlan, String> {
    let report = inspect(disk, db)?;
    let mut plan = RepairPlan {
        report,
        kept: vec![],
        dropped: vec![],
        dropped_because: None,
        moved_aside: vec![],
        applied: false,
    };
    if plan.report.is_clean() {
        return Ok(plan);
    }
    let checkpoint = plan.report.checkpoint;
    let (_, found) = read_log(disk, db, checkpoint)?;
    let mut before = Gen::default();
    let mut all = Gen::default();
    let (first_beyond, mut last_before) = (plan.report.beyond.first().map(|r| r.seq), checkpoint);
    for (&seq, (_, _, payload)) in &found {
        let target = if first_beyond.is_some_and(|b| seq >= b) {
            &mut all
        } else {
            last_before = seq;
            &mut before
        };
        wal::decode_into(seq, payload, target).map_err(|e| e.to_string())?;
    }
    let mut with_beyond = before.clone();
    with_beyond.absorb(all);
    let last_all = found.keys().last().copied().unwrap_or(checkpoint);
    let (gen, last) = if plan.report.beyond.is_empty() {
        (before, last_before)
    } else {
        match trial(disk, db, &with_beyond, last_all) {
            Ok(()) => (with_beyond, last_all),
            Err(why) => {
                plan.dropped = plan.report.beyond.clone();
                plan.dropped_because =
                    Some(format!("with them the namespace is not consistent: {why}"));
                (before, last_before)
            }
        }
    };
    plan.kept = found
        .keys()
        .copied()
        .filter(|&s| s <= last && !plan.dropped.iter().any(|d| d.seq == s))
        .collect();
    if !apply {
        return Ok(plan);
    }
    {
        let tables = disk.open_db(db)?;
        store::commit_gen(&tables, &gen, last).map_err(|e| e.to_string())?;
        recount(&tables)?;
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    for p in paths(db) {
        if disk.open(&p, false).map_err(|e| e.to_string())?.is_none() {
            continue;
        }
        let mut aside = p.as_os_str().to_owned();
        aside.push(format!(".damaged-{stamp}"));
        let aside = PathBuf::from(aside);
        disk.rename(&p, &aside)
            .map_err(|e| format!("moving {} aside: {e}", p.display()))?;
        plan.moved_aside.push((p, aside));
    }
    // A fresh, empty log continuing after `last` (its directory is synced, which makes
    // the renames durable too).
    wal::Wal::open(disk, db, last).map_err(|e| e.to_string())?;
    disk.sync_dir(dir_of(db)).map_err(|e| e.to_string())?;
    plan.applied = true;
    Ok(plan)
}
