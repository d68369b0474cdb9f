//! An in-memory [`MetaDisk`] for tests and the whole-cluster simulator, with the faults
//! the metadata server claims to survive or to report:
//!
//! - **Power cut** ([`MemDisk::power_cut`]): the page cache is lost. Each file's changes
//!   since its last sync are treated by the model the data server's disk shares
//!   ([`crate::powercut`]: a write kept, lost, or torn at 512-byte sectors, chosen by a
//!   seed; a size change kept or lost; direct writes, `O_DIRECT | O_DSYNC`, durable when
//!   they return); each directory whose entries changed since its last sync keeps either
//!   its old or its new entries; files left without a name are gone.
//! - **Process crash** ([`MemDisk::kill`]): the page cache survives.
//! - **Chosen calls fail** (a fault plan): the next N calls of a kind (optionally on paths
//!   containing a string), or any call a predicate picks, return ENOSPC or EIO, or (for
//!   writes) are torn: a random subset of their sectors reaches the file and the call
//!   returns EIO, as a crash in the middle of the write would leave it.
//! - **A full disk** ([`MemDisk::set_capacity`]): a write or size change that would take
//!   the files past the capacity fails with ENOSPC and changes nothing; writes inside
//!   space already allocated still work, as on a real file system.
//!
//! Canaries ([`MemDisk::break_rule`]) swap in a known-broken disk, so that a checker can
//! show it catches what it claims to: syncs that return before anything is durable, or
//! directory syncs that do nothing.
//!
//! After a power cut or crash, handles opened before it (the dead process's, including
//! its redb database) fail every call with EIO, so nothing the old process does after its
//! death reaches the disk. The same calls with the same seed give the same disk.

use crate::metadisk::{dir_of, LogFile, MetaDisk};
use crate::powercut::{CutCounts, CutFile, SplitMix};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

pub use crate::powercut::SECTOR_BYTES;

/// The kinds of disk calls a fault plan can pick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskOp {
    /// Opening a file (creating it, or the redb database).
    Open,
    Read,
    /// Writes: positional, direct, and redb's page writes.
    Write,
    /// Size changes (redb grows its file with them).
    SetLen,
    /// File syncs (`fdatasync`, `fsync`, redb's commit syncs).
    Sync,
    SyncDir,
    Rename,
    Remove,
}

/// What a failing call does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskFault {
    /// ENOSPC, changing nothing.
    NoSpace,
    /// EIO, changing nothing.
    Io,
    /// For writes: a random subset of the write's sectors is stored, then EIO. Other
    /// calls: EIO.
    Torn,
}

/// One call, as a fault predicate sees it.
#[derive(Clone, Copy, Debug)]
pub struct DiskCall<'a> {
    pub op: DiskOp,
    pub path: &'a Path,
    pub offset: u64,
    pub len: u64,
}

/// Faults injected so far, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskFaultCounts {
    pub no_space: u64,
    pub io: u64,
    pub torn_calls: u64,
    pub power_cuts: u64,
    pub kills: u64,
    /// Unsynced writes lost, and torn, by power cuts.
    pub writes_lost: u64,
    pub writes_torn: u64,
}

/// A known-broken behaviour, for canaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BrokenRule {
    /// File syncs and direct writes return at once and make nothing durable.
    SyncIsNoop,
    /// Directory syncs return at once and make no name durable.
    DirSyncIsNoop,
}

type Predicate = Box<dyn Fn(&DiskCall) -> Option<DiskFault> + Send + Sync>;

struct Rule {
    op: DiskOp,
    path_contains: String,
    remaining: u32,
    fault: DiskFault,
}

#[derive(Default)]
struct State {
    /// Bumped by each power cut or crash; handles of an older epoch are dead.
    epoch: u64,
    files: BTreeMap<u64, CutFile>,
    names: BTreeMap<PathBuf, u64>,
    /// The names as the last directory syncs left them.
    durable: BTreeMap<PathBuf, u64>,
    next_id: u64,
    capacity_bytes: Option<u64>,
    rules: Vec<Rule>,
    predicate: Option<Predicate>,
    counts: DiskFaultCounts,
    rng: SplitMix,
    broken: Vec<BrokenRule>,
}

/// The in-memory disk; clones share it.
#[derive(Clone, Default)]
pub struct MemDisk {
    st: Arc<Mutex<State>>,
}

impl std::fmt::Debug for MemDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemDisk").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn err(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

impl MemDisk {
    pub fn new() -> MemDisk {
        MemDisk::default()
    }

    /// A disk whose torn writes are chosen by `seed`.
    pub fn with_seed(seed: u64) -> MemDisk {
        let d = MemDisk::default();
        lock(&d.st).rng = SplitMix::new(seed);
        d
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.st)
    }

    /// Makes the next `n` calls of kind `op` on paths containing `path_contains` (""
    /// for any) fail with `fault`.
    pub fn fail_next(&self, op: DiskOp, path_contains: &str, n: u32, fault: DiskFault) {
        self.state().rules.push(Rule {
            op,
            path_contains: path_contains.to_string(),
            remaining: n,
            fault,
        });
    }

    /// Makes every call `pick` returns a fault for fail with it (after the rules of
    /// [`MemDisk::fail_next`]). `pick` runs under the disk's lock: it must not call the
    /// disk.
    pub fn fail_when(&self, pick: impl Fn(&DiskCall) -> Option<DiskFault> + Send + Sync + 'static) {
        self.state().predicate = Some(Box::new(pick));
    }

    /// Swaps in a known-broken behaviour (a canary) from now on.
    pub fn break_rule(&self, rule: BrokenRule) {
        self.state().broken.push(rule);
    }

    /// Removes every rule and predicate.
    pub fn clear_faults(&self) {
        let mut st = self.state();
        st.rules.clear();
        st.predicate = None;
    }

    /// Limits the bytes all files may hold together (`None`: no limit).
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.state().capacity_bytes = bytes;
    }

    /// Bytes all files hold.
    pub fn used_bytes(&self) -> u64 {
        self.state().used()
    }

    /// Bytes written or resized since their file's last sync and not durable (direct
    /// writes excluded): what a power cut now could lose.
    pub fn unsynced_writes(&self) -> usize {
        let st = self.state();
        st.files.values().map(CutFile::unsynced).sum()
    }

    pub fn fault_counts(&self) -> DiskFaultCounts {
        self.state().counts
    }

    /// The file names that exist now, in order.
    pub fn names(&self) -> Vec<PathBuf> {
        self.state().names.keys().cloned().collect()
    }

    /// The process using the disk is gone (its handles fail from now on); the page
    /// cache survives.
    pub fn kill(&self) {
        let mut st = self.state();
        st.epoch += 1;
        st.counts.kills += 1;
    }

    /// Power is lost: the process's handles die and everything not durable is kept,
    /// lost or torn as `seed` chooses (see the module comment).
    pub fn power_cut(&self, seed: u64) {
        let mut st = self.state();
        let st = &mut *st;
        st.epoch += 1;
        st.counts.power_cuts += 1;
        let mut rng = SplitMix::new(seed);
        // Directories with unsynced entries keep their old or their new entries.
        let dirs: BTreeSet<PathBuf> = st
            .names
            .keys()
            .chain(st.durable.keys())
            .map(|p| dir_of(p).to_path_buf())
            .collect();
        for dir in dirs {
            let now = entries_in(&st.names, &dir);
            if now != entries_in(&st.durable, &dir) && rng.next_u64() % 2 == 0 {
                st.durable.retain(|p, _| dir_of(p) != dir);
                st.durable.extend(now);
            }
        }
        st.names = st.durable.clone();
        let named: BTreeSet<u64> = st.names.values().copied().collect();
        st.files.retain(|id, _| named.contains(id));
        let mut cut = CutCounts::default();
        for f in st.files.values_mut() {
            f.power_cut(&mut rng, &mut cut);
        }
        st.counts.writes_lost += cut.writes_lost;
        st.counts.writes_torn += cut.writes_torn;
    }

    fn handle(&self, path: &Path, id: u64, epoch: u64) -> MemHandle {
        MemHandle {
            st: self.st.clone(),
            path: path.to_path_buf(),
            id,
            epoch,
        }
    }
}

/// Entries of `dir` in `names`.
fn entries_in(names: &BTreeMap<PathBuf, u64>, dir: &Path) -> Vec<(PathBuf, u64)> {
    names
        .iter()
        .filter(|(p, _)| dir_of(p) == dir)
        .map(|(p, id)| (p.clone(), *id))
        .collect()
}

impl State {
    fn used(&self) -> u64 {
        self.files.values().map(CutFile::len).sum()
    }

    /// The fault for `call`, if the plan picks one (and counts it).
    fn fault(&mut self, call: DiskCall) -> Option<DiskFault> {
        let path = call.path.to_string_lossy();
        let by_rule = self.rules.iter_mut().find_map(|r| {
            (r.op == call.op && r.remaining > 0 && path.contains(r.path_contains.as_str())).then(
                || {
                    r.remaining -= 1;
                    r.fault
                },
            )
        });
        let fault = by_rule.or_else(|| self.predicate.as_ref().and_then(|p| p(&call)))?;
        match fault {
            DiskFault::NoSpace => self.counts.no_space += 1,
            DiskFault::Io => self.counts.io += 1,
            DiskFault::Torn => self.counts.torn_calls += 1,
        }
        Some(fault)
    }

    /// Fails a call of a kind that cannot be torn.
    fn check(&mut self, call: DiskCall) -> io::Result<()> {
        match self.fault(call) {
            None => Ok(()),
            Some(DiskFault::NoSpace) => Err(err(libc::ENOSPC)),
            Some(_) => Err(err(libc::EIO)),
        }
    }

    /// ENOSPC if growing file `id` to `new_len` would pass the capacity.
    fn room(&mut self, id: u64, new_len: u64) -> io::Result<()> {
        let Some(cap) = self.capacity_bytes else {
            return Ok(());
        };
        let cur = self.files.get(&id).map_or(0, CutFile::len);
        if new_len > cur && self.used() + (new_len - cur) > cap {
            self.counts.no_space += 1;
            return Err(err(libc::ENOSPC));
        }
        Ok(())
    }
}

/// An open file of a [`MemDisk`] (a log file, or the redb database).
struct MemHandle {
    st: Arc<Mutex<State>>,
    path: PathBuf,
    id: u64,
    epoch: u64,
}

impl std::fmt::Debug for MemHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemHandle({})", self.path.display())
    }
}

impl MemHandle {
    /// The disk's state, or EIO if this handle's process is gone.
    fn live(&self) -> io::Result<MutexGuard<'_, State>> {
        let st = lock(&self.st);
        if st.epoch != self.epoch || !st.files.contains_key(&self.id) {
            return Err(err(libc::EIO));
        }
        Ok(st)
    }

    fn call(&self, op: DiskOp, offset: u64, len: u64) -> DiskCall<'_> {
        DiskCall {
            op,
            path: &self.path,
            offset,
            len,
        }
    }

    fn write(&self, buf: &[u8], offset: u64, durable: bool) -> io::Result<()> {
        let mut st = self.live()?;
        let st = &mut *st;
        let fault = st.fault(self.call(DiskOp::Write, offset, buf.len() as u64));
        match fault {
            Some(DiskFault::NoSpace) => return Err(err(libc::ENOSPC)),
            Some(DiskFault::Io) => return Err(err(libc::EIO)),
            _ => {}
        }
        st.room(self.id, offset + buf.len() as u64)?;
        let durable = durable && !st.broken.contains(&BrokenRule::SyncIsNoop);
        let f = st.files.get_mut(&self.id).expect("checked by live()");
        if fault == Some(DiskFault::Torn) {
            f.write_torn(offset, buf, durable, &mut st.rng);
            return Err(err(libc::EIO));
        }
        f.write(offset, buf, durable);
        Ok(())
    }

    /// `fsync` if `all`, else the weak `fdatasync` (see [`crate::powercut`]).
    fn sync(&self, all: bool) -> io::Result<()> {
        let mut st = self.live()?;
        st.check(self.call(DiskOp::Sync, 0, 0))?;
        if st.broken.contains(&BrokenRule::SyncIsNoop) {
            return Ok(());
        }
        let f = st.files.get_mut(&self.id).expect("checked by live()");
        if all {
            f.sync_all();
        } else {
            f.sync_data();
        }
        Ok(())
    }

    fn size(&self) -> io::Result<u64> {
        let st = self.live()?;
        Ok(st.files[&self.id].len())
    }

    fn resize(&self, len: u64) -> io::Result<()> {
        let mut st = self.live()?;
        st.check(self.call(DiskOp::SetLen, len, 0))?;
        st.room(self.id, len)?;
        let f = st.files.get_mut(&self.id).expect("checked by live()");
        f.set_len(len);
        Ok(())
    }

    fn read(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut st = self.live()?;
        st.check(self.call(DiskOp::Read, offset, buf.len() as u64))?;
        Ok(st.files[&self.id].read(buf, offset))
    }
}

impl LogFile for MemHandle {
    fn size_bytes(&self) -> io::Result<u64> {
        self.size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.read(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write(buf, offset, false)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.sync(false)
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync(true)
    }

    fn write_direct(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write(buf, offset, true)
    }
}

impl redb::StorageBackend for MemHandle {
    fn len(&self) -> io::Result<u64> {
        self.size()
    }

    fn read(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        if MemHandle::read(self, &mut buf, offset)? != len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("read past the end of {}", self.path.display()),
            ));
        }
        Ok(buf)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.resize(len)
    }

    fn sync_data(&self, _eventual: bool) -> io::Result<()> {
        // Eventual syncs are made durable at once, and as fsync (redb grows and cuts its
        // file and relies on the new length): stronger than redb asks.
        self.sync(true)
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        MemHandle::write(self, data, offset, false)
    }
}

impl MetaDisk for MemDisk {
    fn open(&self, path: &Path, create: bool) -> io::Result<Option<Arc<dyn LogFile>>> {
        let mut st = self.state();
        st.check(DiskCall {
            op: DiskOp::Open,
            path,
            offset: 0,
            len: 0,
        })?;
        let id = match st.names.get(path) {
            Some(&id) => id,
            None if create => {
                st.next_id += 1;
                let id = st.next_id;
                st.files.insert(id, CutFile::default());
                st.names.insert(path.to_path_buf(), id);
                id
            }
            None => return Ok(None),
        };
        let epoch = st.epoch;
        Ok(Some(Arc::new(self.handle(path, id, epoch))))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.state();
        let st = &mut *st;
        st.check(DiskCall {
            op: DiskOp::SyncDir,
            path: dir,
            offset: 0,
            len: 0,
        })?;
        if st.broken.contains(&BrokenRule::DirSyncIsNoop) {
            return Ok(());
        }
        let now = entries_in(&st.names, dir);
        st.durable.retain(|p, _| dir_of(p) != dir);
        st.durable.extend(now);
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.state();
        st.check(DiskCall {
            op: DiskOp::Rename,
            path: from,
            offset: 0,
            len: 0,
        })?;
        let id = st.names.remove(from).ok_or_else(|| err(libc::ENOENT))?;
        st.names.insert(to.to_path_buf(), id);
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut st = self.state();
        st.check(DiskCall {
            op: DiskOp::Remove,
            path,
            offset: 0,
            len: 0,
        })?;
        st.names.remove(path);
        Ok(())
    }

    fn file_bytes(&self, path: &Path) -> u64 {
        let st = self.state();
        st.names
            .get(path)
            .and_then(|id| st.files.get(id))
            .map_or(0, CutFile::len)
    }

    fn open_db(&self, path: &Path) -> Result<redb::Database, String> {
        let cannot = |e: String| format!("cannot open metadata database {}: {e}", path.display());
        self.open(path, true).map_err(|e| cannot(e.to_string()))?;
        let (id, epoch) = {
            let st = self.state();
            (st.names[path], st.epoch)
        };
        redb::Builder::new()
            .create_with_backend(self.handle(path, id, epoch))
            .map_err(|e| cannot(e.to_string()))
    }
}
