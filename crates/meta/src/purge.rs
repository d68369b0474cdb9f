//! The purge thread: removes the data objects of deleted files from the data servers.
//!
//! A file's last link and its purge-queue entry change in one transaction, so a crash
//! never loses an entry; Remove is idempotent on the data servers, so a crash after the
//! removal but before the entry is deleted only repeats it. Unreachable servers get
//! retried with exponential backoff per file, and metadata operations never wait for
//! this thread.

use crate::writer::{Item, Job};
use crate::Core;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};
use stripefs_rpc::{ClusterConfig, Conn};
use stripefs_wire::{Cred, InodeId, Layout, Request, WireError};

/// Most files purged per round.
pub const PURGE_BATCH: usize = 64;
/// Most queue entries looked at per round while skipping files that wait for a retry.
const PURGE_SCAN: usize = 4096;
/// How long the thread sleeps when there is nothing to do and nobody wakes it.
const PURGE_POLL: Duration = Duration::from_secs(1);
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

pub struct Purger {
    core: Arc<Core>,
    cluster: ClusterConfig,
    writer: SyncSender<Item>,
    /// Per inode: when to try again and the current delay.
    retry: HashMap<u64, (Instant, Duration)>,
}

impl Purger {
    pub fn new(core: Arc<Core>, cluster: ClusterConfig, writer: SyncSender<Item>) -> Purger {
        Purger {
            core,
            cluster,
            writer,
            retry: HashMap::new(),
        }
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
            self.purge_round(due);
        }
    }

    /// Queue entries whose retry time has come.
    fn due(&self) -> Result<Vec<(u64, Layout)>, WireError> {
        let queue = self
            .core
            .with_view(|v| v.stack().purge_entries(PURGE_SCAN))?;
        let now = Instant::now();
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

    fn purge_round(&mut self, due: Vec<(u64, Layout)>) {
        let mut conns: HashMap<u32, Option<Conn>> = HashMap::new();
        let mut done = Vec::new();
        for (ino, layout) in due {
            if self.core.stop_purge.load(Ordering::SeqCst) {
                break;
            }
            let ok = layout
                .servers
                .iter()
                .all(|s| self.remove_on(&mut conns, s.0, ino));
            if ok {
                self.retry.remove(&ino);
                done.push(ino);
            } else {
                let delay = self
                    .retry
                    .get(&ino)
                    .map_or(BACKOFF_MIN, |(_, d)| (*d * 2).min(BACKOFF_MAX));
                self.retry.insert(ino, (Instant::now() + delay, delay));
            }
        }
        if !done.is_empty() {
            self.finish(done);
        } else if !self.retry.is_empty() {
            // Everything failed: do not spin; the earliest retry is at least BACKOFF_MIN.
            self.core.wait_for_kick(BACKOFF_MIN);
        }
    }

    /// Sends Remove for `ino` to data server `id`, connecting once per round.
    fn remove_on(&self, conns: &mut HashMap<u32, Option<Conn>>, id: u32, ino: u64) -> bool {
        let conn = conns.entry(id).or_insert_with(|| self.connect(id));
        let Some(c) = conn else {
            return false;
        };
        match c.call(
            &Cred::root(),
            Request::Remove { fid: InodeId(ino) },
            &[],
            &mut [],
        ) {
            Ok(_) => true,
            Err(e) => {
                tracing::info!("purge of inode {ino} on data server {id}: {e}; will retry");
                if c.is_broken() {
                    *conn = None;
                }
                false
            }
        }
    }

    fn connect(&self, id: u32) -> Option<Conn> {
        let Some(entry) = self.cluster.data.get(id as usize) else {
            tracing::warn!("purge: data server {id} is not in the cluster file");
            return None;
        };
        let timeout = Duration::from_millis(self.cluster.timeout_ms.max(1));
        match Conn::connect(&entry.addr, &self.cluster.secret, timeout) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::info!("purge: data server {id}: {e}; will retry");
                None
            }
        }
    }

    /// Deletes the queue entries of purged files, through the writer.
    fn finish(&mut self, done: Vec<u64>) {
        let (tx, rx) = sync_channel(1);
        let item = Item {
            job: Job::PurgeDone(done),
            reply: Some(tx),
        };
        if self.writer.send(item).is_err() {
            return;
        }
        match rx.recv() {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!("purge: cannot update the queue: {e}"),
            Err(_) => {}
        }
    }
}
