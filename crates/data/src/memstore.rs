//! An in-memory [`Storage`] for tests, with the faults the data server claims to survive:
//! a full disk (the next writes fail with ENOSPC) and a crash that loses or tears, at
//! 512-byte sector granularity, every write not yet made durable by `sync_data`, and
//! forgets every file and directory created since its parent directory was last synced
//! (with all below it). Simplification: removing a file is durable at once.

use crate::store::{ObjectFile, Storage, Usage};
use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Granularity at which a crash tears an unsynced write.
pub const SECTOR_BYTES: usize = 512;
/// Capacity the in-memory store reports.
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

#[derive(Default)]
struct Faults {
    /// How many of the next writes fail with ENOSPC.
    nospace_writes: AtomicU32,
}

enum Op {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

#[derive(Default)]
struct MemState {
    data: Vec<u8>,
    synced: Vec<u8>,
    /// Changes since the last sync, oldest first.
    pending: Vec<Op>,
}

pub struct MemFile {
    state: Mutex<MemState>,
    faults: Arc<Faults>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl MemStore {
    pub fn new() -> MemStore {
        MemStore::default()
    }

    /// Makes the next `n` writes (to any file) fail with ENOSPC, changing nothing.
    pub fn fail_next_writes(&self, n: u32) {
        self.faults.nospace_writes.store(n, Ordering::SeqCst);
    }

    /// Simulates a power loss: each write since the last sync of its file is kept, lost
    /// or torn (a random subset of its sectors kept), chosen by `seed`.
    pub fn crash(&self, seed: u64) {
        let mut rng = SplitMix(seed);
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
        for p in paths {
            lock(&files[p].state).crash(&mut rng);
        }
    }

    /// The current bytes of the file at `path`, if it exists.
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let files = lock(&self.files);
        files.get(path).map(|f| lock(&f.state).data.clone())
    }

    /// Replaces byte `offset` of the file at `path` with `f(byte)`, as a bad disk would.
    pub fn corrupt(&self, path: &Path, offset: usize, f: impl FnOnce(u8) -> u8) -> bool {
        let files = lock(&self.files);
        let Some(file) = files.get(path) else {
            return false;
        };
        let mut st = lock(&file.state);
        match st.data.get_mut(offset) {
            Some(b) => {
                *b = f(*b);
                true
            }
            None => false,
        }
    }
}

impl MemState {
    fn crash(&mut self, rng: &mut SplitMix) {
        let mut image = std::mem::take(&mut self.synced);
        for op in self.pending.drain(..) {
            match (op, rng.next() % 3) {
                (_, 0) => {}
                (Op::SetLen(n), _) => image.resize(n as usize, 0),
                (Op::Write { offset, bytes }, 1) => put(&mut image, offset as usize, &bytes),
                (Op::Write { offset, bytes }, _) => {
                    let start = offset as usize;
                    // Sectors are aligned to the file, not to the write.
                    let mut at = start;
                    while at < start + bytes.len() {
                        let end = ((at / SECTOR_BYTES + 1) * SECTOR_BYTES).min(start + bytes.len());
                        if rng.next() % 2 == 0 {
                            put(&mut image, at, &bytes[at - start..end - start]);
                        }
                        at = end;
                    }
                }
            }
        }
        self.synced = image.clone();
        self.data = image;
    }
}

fn put(image: &mut Vec<u8>, offset: usize, bytes: &[u8]) {
    if image.len() < offset + bytes.len() {
        image.resize(offset + bytes.len(), 0);
    }
    image[offset..offset + bytes.len()].copy_from_slice(bytes);
}

impl ObjectFile for MemFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let st = lock(&self.state);
        let start = (offset as usize).min(st.data.len());
        let n = buf.len().min(st.data.len() - start);
        buf[..n].copy_from_slice(&st.data[start..start + n]);
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let failing =
            self.faults
                .nospace_writes
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if failing.is_ok() {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        let mut st = lock(&self.state);
        put(&mut st.data, offset as usize, buf);
        st.pending.push(Op::Write {
            offset,
            bytes: buf.to_vec(),
        });
        Ok(())
    }

    fn size_bytes(&self) -> io::Result<u64> {
        Ok(lock(&self.state).data.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut st = lock(&self.state);
        st.data.resize(len as usize, 0);
        st.pending.push(Op::SetLen(len));
        Ok(())
    }

    fn punch(&self, offset: u64, len: u64) -> io::Result<()> {
        let mut st = lock(&self.state);
        let size = st.data.len() as u64;
        let end = offset.saturating_add(len).min(size);
        if offset < end {
            let bytes = vec![0u8; (end - offset) as usize];
            put(&mut st.data, offset as usize, &bytes);
            st.pending.push(Op::Write { offset, bytes });
        }
        Ok(())
    }

    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        let end = offset.saturating_add(len);
        if end > MEM_CAPACITY_BYTES {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        let mut st = lock(&self.state);
        if end > st.data.len() as u64 {
            st.data.resize(end as usize, 0);
            st.pending.push(Op::SetLen(end));
        }
        Ok(())
    }

    /// Memory files are dense: every byte up to the length is allocated.
    fn allocated_bytes(&self) -> io::Result<u64> {
        self.size_bytes()
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut st = lock(&self.state);
        st.synced = st.data.clone();
        st.pending.clear();
        Ok(())
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

    fn remove(&self, path: &Path) -> io::Result<()> {
        lock(&self.files).remove(path);
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
            .map(|(_, f)| lock(&f.state).data.len() as u64)
            .sum();
        Ok(Usage {
            used,
            total: MEM_CAPACITY_BYTES,
            free: MEM_CAPACITY_BYTES.saturating_sub(used),
        })
    }
}

/// A tiny deterministic generator, so that this module needs no random-number crate.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}
