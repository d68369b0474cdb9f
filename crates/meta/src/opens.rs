//! Which inodes clients have open, in memory only: after a restart no file is open, and
//! orphans (unlinked while open) are purged at startup. Opens are counted per client
//! session, and the sessions (`sessions.rs`) live here too, under the same lock.
//!
//! The writer and connection threads meet here under one mutex: the writer decides "open
//! or not" for an inode whose last link goes away while holding it, and an Open checks
//! "about to be deleted" (`dying`) and the committed inode while holding it, so an Open
//! never succeeds on an inode that a pending batch deletes.

use crate::sessions::{Session, Sessions};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

#[derive(Default)]
pub struct Entry {
    /// Open count per client session.
    pub sessions: HashMap<u64, u32>,
    /// The inode lost its last link while open: the last Close must purge it.
    pub unlinked: bool,
}

pub struct State {
    pub open: HashMap<u64, Entry>,
    /// Inodes deleted by batches applied but not yet durable.
    pub dying: Dying,
    pub sessions: Sessions,
    /// The grace period after a start (one lease): clients of the server's previous life
    /// reclaim their opens, so an inode whose last link goes away is kept as an orphan
    /// even when nobody is known to have it open, and orphans can be opened again.
    /// Orphans nobody reclaimed are reaped when it ends. Only inodes of an earlier
    /// start (numbers below `grace_below`) can be open in an old session.
    pub grace: bool,
    pub grace_below: u64,
}

impl State {
    /// `ino` may be held open by a client of the server's previous life that has not
    /// reclaimed it yet.
    pub fn may_be_reclaimed(&self, ino: u64) -> bool {
        self.grace && ino < self.grace_below
    }
}

/// Inodes deleted by batches in flight, with the batch that deletes each.
#[derive(Default)]
pub struct Dying {
    /// The batch the writer is applying; `insert` files inodes under it.
    pub batch: u64,
    inos: HashMap<u64, u64>,
}

impl Dying {
    pub fn insert(&mut self, ino: u64) {
        self.inos.insert(ino, self.batch);
    }

    pub fn contains(&self, ino: &u64) -> bool {
        self.inos.contains_key(ino)
    }

    /// Forgets the inodes of batches up to `batch`, which are now committed (or failed).
    pub fn settle(&mut self, batch: u64) {
        if !self.inos.is_empty() {
            self.inos.retain(|_, b| *b > batch);
        }
    }
}

impl State {
    pub fn is_open(&self, ino: u64) -> bool {
        self.open.get(&ino).is_some_and(|e| !e.sessions.is_empty())
    }

    /// Releases every open of session `id`, which ended (`session` was removed from the
    /// table); returns the unlinked inodes whose last open this was, to be reaped.
    pub fn release(&mut self, id: u64, session: Session) -> Vec<u64> {
        let mut reap = Vec::new();
        for ino in session.inodes {
            let Some(entry) = self.open.get_mut(&ino) else {
                continue;
            };
            entry.sessions.remove(&id);
            if entry.sessions.is_empty() {
                if entry.unlinked {
                    reap.push(ino);
                }
                self.open.remove(&ino);
            }
        }
        reap
    }
}

pub struct Opens(Mutex<State>);

impl Opens {
    /// An empty table whose sessions live `lease` without renewal; `earlier`: the first
    /// inode number of this start when the server had an earlier one (a grace period
    /// then runs, see `State::grace`).
    pub fn new(lease: Duration, earlier: Option<u64>) -> Opens {
        Opens(Mutex::new(State {
            open: HashMap::new(),
            dying: Dying::default(),
            sessions: Sessions::new(lease),
            grace: earlier.is_some(),
            grace_below: earlier.unwrap_or(0),
        }))
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock would be a bug elsewhere; the state itself is
        // still meaningful, so keep serving rather than poisoning every later request.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn open_files(&self) -> u64 {
        self.lock().open.len() as u64
    }
}
