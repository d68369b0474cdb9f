//! Which inodes clients have open, in memory only: after a restart no file is open, and
//! orphans (unlinked while open) are purged at startup.
//!
//! The writer and connection threads meet here under one mutex: the writer decides "open
//! or not" for an inode whose last link goes away while holding it, and an Open checks
//! "about to be deleted" (`dying`) and the committed inode while holding it, so an Open
//! never succeeds on an inode that a pending batch deletes.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

#[derive(Default)]
pub struct Entry {
    /// Open count per client session.
    pub sessions: HashMap<u64, u32>,
    /// The inode lost its last link while open: the last Close must purge it.
    pub unlinked: bool,
}

#[derive(Default)]
pub struct State {
    pub open: HashMap<u64, Entry>,
    /// Inodes deleted by the batch being committed.
    pub dying: HashSet<u64>,
}

impl State {
    pub fn is_open(&self, ino: u64) -> bool {
        self.open.get(&ino).is_some_and(|e| !e.sessions.is_empty())
    }
}

#[derive(Default)]
pub struct Opens(Mutex<State>);

impl Opens {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock would be a bug elsewhere; the state itself is
        // still meaningful, so keep serving rather than poisoning every later request.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn open_files(&self) -> u64 {
        self.lock().open.len() as u64
    }
}
