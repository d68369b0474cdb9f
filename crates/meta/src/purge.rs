//! The purge thread: removes the data objects of deleted files from the data servers.
//!
//! A file's last link and its purge-queue entry change in one transaction, so a crash
//! never loses an entry; Remove is idempotent on the data servers, so a crash after the
//! removal but before the entry is deleted only repeats it. Unreachable servers get
//! retried with exponential backoff per file, and metadata operations never wait for
//! this thread. The calls go through [`DataNet`] and the retry times through the
//! server's clock, so that a simulator can run rounds itself (`MetaService::purge_once`).

use crate::net::DataNet;
use crate::writer::{Job, Writer};
use crate::Core;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use stripefs_wire::{Cred, InodeId, Layout, Request, WireError};

/// Most files purged per round (their Removes go to each server back to back).
pub const PURGE_BATCH: usize = stripefs_rpc::MAX_PENDING;
/// Most queue entries looked at per round while skipping files that wait for a retry.
const PURGE_SCAN: usize = 4096;
/// How long the thread sleeps when there is nothing to do and nobody wakes it.
const PURGE_POLL: Duration = Duration::from_secs(1);
/// See [`Purger::wait_quiet`].
const QUIET: Duration = Duration::from_millis(10);
const BUSY_GAP: Duration = Duration::from_millis(50);
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

pub struct Purger {
    core: Arc<Core>,
    net: Arc<dyn DataNet>,
    /// Per inode: when to try again (on the server's monotonic clock) and the current
    /// delay.
    retry: HashMap<u64, (Duration, Duration)>,
}

impl Purger {
    pub fn new(core: Arc<Core>, net: Arc<dyn DataNet>) -> Purger {
        Purger {
            core,
            net,
            retry: HashMap::new(),
        }
    }

    /// One round on the caller's thread: purges the files that are due; returns how
    /// many were purged.
    pub fn round_once(&mut self) -> Result<usize, WireError> {
        let due = self.due()?;
        if due.is_empty() {
            return Ok(0);
        }
        Ok(self.purge_round(due))
    }

    pub fn run(mut self) {
        while !self.core.stop_purge.load(Ordering::SeqCst) {
            let due = match self.due() {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!("purge: {e}");
                    Vec::new()
                }
            };
            if due.is_empty() {
                self.core.wait_for_kick(PURGE_POLL);
                continue;
            }
            self.wait_quiet();
            if self.purge_round(due) == 0 && !self.retry.is_empty() {
                // Everything failed: do not spin; the earliest retry is at least
                // BACKOFF_MIN away.
                self.core.wait_for_kick(BACKOFF_MIN);
            }
        }
    }

    /// Purging is background work: it waits until clients leave the metadata server
    /// quiet for [`QUIET`], but at most [`BUSY_GAP`] per round, so that under steady
    /// load it still removes [`PURGE_BATCH`] files per gap.
    fn wait_quiet(&self) {
        let start = std::time::Instant::now();
        loop {
            let before = self.core.requests.load(Ordering::Relaxed);
            std::thread::sleep(QUIET);
            let quiet = self.core.requests.load(Ordering::Relaxed) == before;
            if quiet || start.elapsed() >= BUSY_GAP || self.core.stop_purge.load(Ordering::SeqCst) {
                return;
            }
        }
    }

    /// Queue entries whose retry time has come.
    fn due(&self) -> Result<Vec<(u64, Layout)>, WireError> {
        // Only entries waiting for a retry are skipped, so this many suffice.
        let want = (PURGE_BATCH + self.retry.len()).min(PURGE_SCAN);
        let queue = self.core.with_view(|v| v.stack().purge_entries(want))?;
        let now = self.core.clock.monotonic();
        let mut out = Vec::new();
        for (ino, layout) in queue {
            if self.retry.get(&ino).is_some_and(|(at, _)| *at > now) {
                continue;
            }
            out.push((ino, layout));
            if out.len() == PURGE_BATCH {
                break;
            }
        }
        Ok(out)
    }

    /// Returns how many files were purged.
    fn purge_round(&mut self, due: Vec<(u64, Layout)>) -> usize {
        // Per server, the files with objects there; a file is done when every server
        // of its layout removed its object.
        let mut by_server: HashMap<u32, Vec<u64>> = HashMap::new();
        for (ino, layout) in &due {
            for s in &layout.servers {
                by_server.entry(s.0).or_default().push(*ino);
            }
        }
        let mut failed = std::collections::HashSet::new();
        for (id, inos) in by_server {
            if self.core.stop_purge.load(Ordering::SeqCst) {
                return 0;
            }
            for ino in self.remove_on(id, &inos) {
                failed.insert(ino);
            }
        }
        let mut done = Vec::new();
        for (ino, _) in due {
            if !failed.contains(&ino) {
                self.retry.remove(&ino);
                done.push(ino);
            } else {
                let delay = self
                    .retry
                    .get(&ino)
                    .map_or(BACKOFF_MIN, |(_, d)| (*d * 2).min(BACKOFF_MAX));
                let at = self.core.clock.monotonic() + delay;
                self.retry.insert(ino, (at, delay));
            }
        }
        let purged = done.len();
        if !done.is_empty() {
            self.finish(done);
        }
        purged
    }

    /// Sends Remove for each of `inos` to data server `id`, back to back; returns the
    /// inodes whose removal failed.
    fn remove_on(&mut self, id: u32, inos: &[u64]) -> Vec<u64> {
        let reqs = inos
            .iter()
            .map(|&ino| Request::Remove { fid: InodeId(ino) })
            .collect();
        match self.net.call_many(id, &Cred::root(), reqs) {
            Ok(results) if results.len() == inos.len() => inos
                .iter()
                .zip(results)
                .filter_map(|(&ino, r)| match r {
                    Ok(_) => None,
                    Err(e) => {
                        tracing::info!("purge of inode {ino} on data server {id}: {e}; will retry");
                        Some(ino)
                    }
                })
                .collect(),
            Ok(results) => {
                tracing::warn!(
                    "purge on data server {id}: {} answers to {} requests; will retry",
                    results.len(),
                    inos.len()
                );
                inos.to_vec()
            }
            Err(e) => {
                tracing::info!("purge on data server {id}: {e}; will retry");
                inos.to_vec()
            }
        }
    }

    /// Deletes the queue entries of purged files, through the writer.
    fn finish(&mut self, done: Vec<u64>) {
        if let Err(e) = Writer::submit(&self.core, Job::PurgeDone(done)) {
            tracing::warn!("purge: cannot update the queue: {e}");
        }
    }
}
