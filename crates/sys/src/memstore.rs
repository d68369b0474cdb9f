//! An in-memory [`Storage`] for tests, with the faults the data server claims to survive:
//! a disk of limited capacity (writes past it are cut short with ENOSPC; `reserve`
//! takes space ahead), chosen writes failing with ENOSPC or EIO (whole or cut short),
//! and a crash (a power cut) that treats each file's unsynced changes by the shared
//! model of [`crate::powercut`] (kept, lost or torn at 512-byte sectors; `sync_data` the
//! weak fdatasync that does not make a length cut durable), and forgets every file and
//! directory created since its parent directory was last synced (with all below it).
//! Simplification: removing a file is durable at once.

use crate::powercut::{CutCounts, CutFile, SplitMix};
use crate::storage::{ObjectFile, Storage, Usage};
use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

pub use crate::powercut::SECTOR_BYTES;
/// Capacity the in-memory store has unless told otherwise.
const MEM_CAPACITY_BYTES: u64 = 1 << 40;

#[derive(Default)]
pub struct MemStore {
    files: Mutex<HashMap<PathBuf, Arc<MemFile>>>,
    faults: Arc<Faults>,
    /// Directories made (with `create_dir_all`).
    dirs: Mutex<HashSet<PathBuf>>,
    /// Files and directories made since their parent directory was last synced.
    unsynced_names: Mutex<HashSet<PathBuf>>,
}

struct Faults {
    /// Writes let through before the injected failures start.
    pass_writes: AtomicU32,
    /// How many writes fail after those, changing nothing (or, if `cut_short`, after
    /// writing the first half of their bytes).
    fail_writes: AtomicU32,
    errno: AtomicI32,
    cut_short: AtomicBool,
    /// How many `set_len` calls fail with EIO (changing nothing) before one succeeds.
    fail_set_len: AtomicU32,
    space: Mutex<Space>,
}

struct Space {
    capacity: u64,
    /// Bytes allocated to all files: per file, the larger of its length and the end of
    /// its reservations.
    used: u64,
}

impl Default for Faults {
    fn default() -> Faults {
        Faults {
            pass_writes: AtomicU32::new(0),
            fail_writes: AtomicU32::new(0),
            errno: AtomicI32::new(libc::ENOSPC),
            cut_short: AtomicBool::new(false),
            fail_set_len: AtomicU32::new(0),
            space: Mutex::new(Space {
                capacity: MEM_CAPACITY_BYTES,
                used: 0,
            }),
        }
    }
}

impl Faults {
    /// The injected error for this write, if it is one of the chosen failures.
    fn injected(&self) -> Option<io::Error> {
        let dec = |a: &AtomicU32| {
            a.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        };
        if dec(&self.pass_writes) || !dec(&self.fail_writes) {
            return None;
        }
        Some(io::Error::from_raw_os_error(
            self.errno.load(Ordering::SeqCst),
        ))
    }

    /// Takes `grow` more bytes of space if the disk has them, else none.
    fn take(&self, grow: u64) -> Result<(), ()> {
        let mut sp = lock(&self.space);
        if grow > sp.capacity.saturating_sub(sp.used) {
            return Err(());
        }
        sp.used += grow;
        Ok(())
    }

    /// Takes up to `grow` more bytes of space; returns how many it got.
    fn take_upto(&self, grow: u64) -> u64 {
        let mut sp = lock(&self.space);
        let got = grow.min(sp.capacity.saturating_sub(sp.used));
        sp.used += got;
        got
    }

    fn give(&self, bytes: u64) {
        let mut sp = lock(&self.space);
        sp.used = sp.used.saturating_sub(bytes);
    }
}

#[derive(Default)]
struct MemState {
    file: CutFile,
    /// End of the space reserved for the file (it may lie past the length).
    reserved_end: u64,
}

impl MemState {
    fn alloc(&self) -> u64 {
        self.file.len().max(self.reserved_end)
    }
}

pub struct MemFile {
    state: Mutex<MemState>,
    faults: Arc<Faults>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn nospace() -> io::Error {
    io::Error::from_raw_os_error(libc::ENOSPC)
}

impl MemStore {
    pub fn new() -> MemStore {
        MemStore::default()
    }

    /// Makes the next `n` writes (to any file) fail with ENOSPC, changing nothing.
    pub fn fail_next_writes(&self, n: u32) {
        self.fail_writes(0, n, libc::ENOSPC, false);
    }

    /// Lets `pass` writes (to any file) through, then fails the `n` after them with
    /// `errno`: changing nothing, or, if `cut_short`, after writing half their bytes.
    pub fn fail_writes(&self, pass: u32, n: u32, errno: i32, cut_short: bool) {
        let f = &self.faults;
        f.errno.store(errno, Ordering::SeqCst);
        f.cut_short.store(cut_short, Ordering::SeqCst);
        f.pass_writes.store(pass, Ordering::SeqCst);
        f.fail_writes.store(n, Ordering::SeqCst);
    }

    /// Makes the next `n` length changes (`set_len`, of any file) fail with EIO.
    pub fn fail_next_set_len(&self, n: u32) {
        self.faults.fail_set_len.store(n, Ordering::SeqCst);
    }

    /// Sets the disk's size: writes that need more space than is left fail with ENOSPC
    /// after writing what fits.
    pub fn set_capacity(&self, bytes: u64) {
        lock(&self.faults.space).capacity = bytes;
    }

    /// Bytes allocated to all files.
    pub fn used_bytes(&self) -> u64 {
        lock(&self.faults.space).used
    }

    /// Simulates a power loss: each write since the last sync of its file is kept, lost
    /// or torn (a random subset of its sectors kept), chosen by `seed`.
    pub fn crash(&self, seed: u64) {
        let mut rng = SplitMix::new(seed);
        {
            let mut names = lock(&self.unsynced_names);
            let lost = |p: &Path| p.ancestors().any(|a| names.contains(a));
            lock(&self.files).retain(|p, _| !lost(p));
            lock(&self.dirs).retain(|p| !lost(p));
            names.clear();
        }
        let files = lock(&self.files);
        let mut paths: Vec<&PathBuf> = files.keys().collect();
        paths.sort();
        let mut used = 0;
        for p in paths {
            let mut st = lock(&files[p].state);
            st.file.power_cut(&mut rng, &mut CutCounts::default());
            used += st.alloc();
        }
        lock(&self.faults.space).used = used;
    }

    /// The current bytes of the file at `path`, if it exists.
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let files = lock(&self.files);
        files.get(path).map(|f| lock(&f.state).file.data().to_vec())
    }

    /// Replaces byte `offset` of the file at `path` with `f(byte)`, as a bad disk would.
    pub fn corrupt(&self, path: &Path, offset: usize, f: impl FnOnce(u8) -> u8) -> bool {
        let files = lock(&self.files);
        let Some(file) = files.get(path) else {
            return false;
        };
        let mut st = lock(&file.state);
        st.file.corrupt(offset as u64, f)
    }
}

impl ObjectFile for MemFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        Ok(lock(&self.state).file.read(buf, offset))
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut st = lock(&self.state);
        if let Some(e) = self.faults.injected() {
            if self.faults.cut_short.load(Ordering::SeqCst) {
                let half = &buf[..buf.len() / 2];
                let _ = self.put_within_space(&mut st, half, offset);
            }
            return Err(e);
        }
        self.put_within_space(&mut st, buf, offset)
    }

    fn size_bytes(&self) -> io::Result<u64> {
        Ok(lock(&self.state).file.len())
    }

    fn append(&self, buf: &[u8]) -> io::Result<()> {
        let mut st = lock(&self.state);
        let at = st.file.len();
        if let Some(e) = self.faults.injected() {
            return Err(e);
        }
        self.put_within_space(&mut st, buf, at)
    }

    /// Never fails for lack of space, as a sparse extension would not.
    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut st = lock(&self.state);
        let failing = &self.faults.fail_set_len;
        if failing
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        let before = st.alloc();
        st.file.set_len(len);
        // Space reserved past a cut is freed with it, as ext4 and XFS do.
        st.reserved_end = st.reserved_end.min(len);
        self.account(before, st.alloc());
        Ok(())
    }

    fn punch(&self, offset: u64, len: u64) -> io::Result<()> {
        let mut st = lock(&self.state);
        let end = offset.saturating_add(len).min(st.file.len());
        if offset < end {
            st.file
                .write(offset, &vec![0u8; (end - offset) as usize], false);
        }
        Ok(())
    }

    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        let end = offset.saturating_add(len);
        let mut st = lock(&self.state);
        self.reserve_locked(&mut st, end)?;
        if end > st.file.len() {
            st.file.set_len(end);
        }
        Ok(())
    }

    fn reserve(&self, offset: u64, len: u64) -> io::Result<()> {
        let mut st = lock(&self.state);
        self.reserve_locked(&mut st, offset.saturating_add(len))
    }

    /// Memory files are dense: every byte up to the length (or the end of the space
    /// reserved) is allocated.
    fn allocated_bytes(&self) -> io::Result<u64> {
        Ok(lock(&self.state).alloc())
    }

    /// fdatasync as some file systems give it: a length cut since the last sync is not
    /// made durable (the old tail comes back after a crash); see `sync_all`.
    fn sync_data(&self) -> io::Result<()> {
        lock(&self.state).file.sync_data();
        Ok(())
    }

    fn sync_all(&self) -> io::Result<()> {
        lock(&self.state).file.sync_all();
        Ok(())
    }
}

impl MemFile {
    /// Writes what fits in the disk's space (all of `buf` when no new space is needed)
    /// and fails with ENOSPC if that was not all.
    fn put_within_space(&self, st: &mut MemState, buf: &[u8], offset: u64) -> io::Result<()> {
        let end = offset + buf.len() as u64;
        let before = st.alloc();
        let grow = end.saturating_sub(before);
        let got = self.faults.take_upto(grow);
        let n = if got == grow {
            buf.len()
        } else {
            (before + got).saturating_sub(offset).min(buf.len() as u64) as usize
        };
        if n == 0 {
            self.faults.give(got);
        } else {
            st.file.write(offset, &buf[..n], false);
        }
        if n < buf.len() {
            return Err(nospace());
        }
        Ok(())
    }

    fn reserve_locked(&self, st: &mut MemState, end: u64) -> io::Result<()> {
        let before = st.alloc();
        if end > before {
            self.faults.take(end - before).map_err(|_| nospace())?;
            st.reserved_end = end;
        }
        Ok(())
    }

    fn account(&self, before: u64, after: u64) {
        if after > before {
            // A length change never fails: the space may run over the capacity.
            lock(&self.faults.space).used += after - before;
        } else {
            self.faults.give(before - after);
        }
    }
}

impl Storage for MemStore {
    /// Directories under one this store made are new (their names unsynced); the first
    /// one of a path stands for a disk that was there before.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut dirs = lock(&self.dirs);
        let mut chain: Vec<&Path> = dir.ancestors().filter(|d| d.parent().is_some()).collect();
        chain.reverse();
        for d in chain {
            let made_here = d.parent().is_some_and(|p| dirs.contains(p));
            if dirs.insert(d.to_path_buf()) && made_here {
                lock(&self.unsynced_names).insert(d.to_path_buf());
            }
        }
        Ok(())
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<Option<Arc<dyn ObjectFile>>> {
        let mut files = lock(&self.files);
        if let Some(f) = files.get(path) {
            return Ok(Some(f.clone()));
        }
        if !create {
            return Ok(None);
        }
        let f = Arc::new(MemFile {
            state: Mutex::new(MemState::default()),
            faults: self.faults.clone(),
        });
        files.insert(path.to_path_buf(), f.clone());
        lock(&self.unsynced_names).insert(path.to_path_buf());
        Ok(Some(f))
    }

    /// The store's own file (a same-host client in the simulator shares it, as a real
    /// one shares the inode through its descriptor), behind a read-only view.
    fn open_read_only(&self, path: &Path) -> io::Result<Option<Arc<dyn ObjectFile>>> {
        let f = lock(&self.files).get(path).cloned();
        Ok(f.map(|f| Arc::new(ReadOnly(f)) as Arc<dyn ObjectFile>))
    }

    fn grant_fence(&self, _root: &Path) -> io::Result<Option<Arc<dyn crate::fence::Fence>>> {
        Ok(Some(Arc::new(crate::fence::MemFence::default())))
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        if let Some(f) = lock(&self.files).remove(path) {
            self.faults.give(lock(&f.state).alloc());
        }
        lock(&self.unsynced_names).remove(path);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        lock(&self.unsynced_names).retain(|p| p.parent() != Some(dir));
        Ok(())
    }

    fn usage(&self, root: &Path) -> io::Result<Usage> {
        let files = lock(&self.files);
        let used = files
            .iter()
            .filter(|(p, _)| p.starts_with(root))
            .map(|(_, f)| lock(&f.state).alloc())
            .sum();
        let sp = lock(&self.faults.space);
        Ok(Usage {
            used,
            total: sp.capacity,
            free: sp.capacity.saturating_sub(sp.used),
        })
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let files = lock(&self.files);
        Ok(files
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect())
    }
}

/// A read-only view of a file (what a same-host client of a store in memory gets): every
/// change fails with EBADF, as on a descriptor opened for reading.
struct ReadOnly(Arc<MemFile>);

fn read_only() -> io::Error {
    io::Error::from_raw_os_error(libc::EBADF)
}

impl ObjectFile for ReadOnly {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_at(&self, _buf: &[u8], _offset: u64) -> io::Result<()> {
        Err(read_only())
    }
    fn size_bytes(&self) -> io::Result<u64> {
        self.0.size_bytes()
    }
    fn set_len(&self, _len: u64) -> io::Result<()> {
        Err(read_only())
    }
    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }
    fn punch(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Err(read_only())
    }
    fn allocate(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Err(read_only())
    }
    fn allocated_bytes(&self) -> io::Result<u64> {
        self.0.allocated_bytes()
    }
}
