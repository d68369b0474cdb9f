//! The single writer: group commit of all mutations.
//!
//! Connection threads queue mutations on a bounded channel and wait. The writer takes
//! everything queued (up to [`MAX_BATCH`]), applies each operation in order to one batch
//! delta (an in-memory layer over the namespace, `overlay.rs`), appends the delta to the
//! metadata log as one record made durable by one `fdatasync` (`wal.rs`), publishes it
//! to readers, and only then answers them all: nothing is acknowledged or visible before
//! it is durable, and one sync serves the whole batch.
//!
//! The redb tables are brought up to date by checkpoints: when the active layer is large
//! or old enough (and the previous checkpoint is done), the writer freezes it, continues
//! the log in the other file, and a checkpoint thread writes the frozen layer into redb
//! in one durable transaction, then drops it. Checkpoints carry thousands of operations
//! each, so the store's page writes are shared by many operations and never delay an
//! answer.
//!
//! Each operation's result is its own: an operation refused by its checks has written
//! nothing (see `ops`), so the others in the batch proceed. A storage or corruption error
//! (`store::is_fatal`) or a panic discards the batch delta and fails the whole batch,
//! since a half-applied operation must never be committed. A failed log write stops all
//! further changes (`halted`): after it the log's contents are unknown.

use crate::ops::{self, remove, Ctx};
use crate::overlay::{Gen, View, Wr};
use crate::store::{commit_gen, io, is_fatal, Rd};
use crate::wal::{self, Wal};
use crate::Core;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Receiver, Sender, SyncSender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use stripefs_wire::{Cred, ErrorCode, Request, Response, WireError};

/// Most operations committed by one batch.
pub const MAX_BATCH: usize = 256;
/// Most operations waiting for the writer; senders block beyond it (back-pressure).
pub const MAX_QUEUE: usize = 4096;
/// The active layer is frozen for a checkpoint when it holds this many changed keys,
/// when its log file holds this many bytes, or when it is this old.
pub const FREEZE_KEYS: usize = 200_000;
pub const FREEZE_BYTES: u64 = wal::FILE_BYTES / 2;
pub const FREEZE_AGE: Duration = Duration::from_secs(2);

pub type Answer = Result<Response, WireError>;

pub enum Job {
    /// A client's mutation.
    Client { cred: Cred, req: Request },
    /// The last Close of an inode that lost its last link while open.
    Reap(u64),
    /// The purge thread removed these files' data objects.
    PurgeDone(Vec<u64>),
    /// Write everything acknowledged so far into the redb tables before answering.
    Checkpoint,
}

pub struct Item {
    pub job: Job,
    pub reply: Option<SyncSender<Answer>>,
}

/// How long the writer waits for the clients of the previous batch to send their next
/// operation before committing a smaller batch. Clients answered together send again
/// together, but not at the same instant; without this wait the batch would split into
/// an early small one and a late one, each paying a full sync.
pub const GATHER_WAIT: Duration = Duration::from_micros(150);

struct Writer {
    core: Arc<Core>,
    wal: Wal,
    last_freeze: Instant,
    ckpt_tx: Option<Sender<(Arc<Gen>, u64)>>,
}

pub fn run(core: Arc<Core>, wal: Wal, rx: Receiver<Item>) {
    let (ckpt_tx, ckpt_rx) = channel::<(Arc<Gen>, u64)>();
    let c = core.clone();
    let ckpt = std::thread::Builder::new()
        .name("meta-checkpoint".into())
        .spawn(move || {
            while let Ok((gen, seq)) = ckpt_rx.recv() {
                checkpoint(&c, &gen, seq);
            }
        });
    let ckpt = match ckpt {
        Ok(t) => Some(t),
        Err(e) => {
            // Checkpoints then run on the writer's thread.
            tracing::warn!("cannot start the checkpoint thread: {e}");
            None
        }
    };
    let mut w = Writer {
        core,
        wal,
        last_freeze: Instant::now(),
        ckpt_tx: ckpt.as_ref().map(|_| ckpt_tx),
    };
    w.serve(rx);
    w.ckpt_tx = None;
    if let Some(t) = ckpt {
        let _ = t.join();
    }
    // A clean stop leaves the tables complete and the log empty of news; a halt
    // (a simulated crash) leaves the log for the next start to replay.
    if !w.core.halted.load(Ordering::SeqCst) {
        w.checkpoint_now();
    }
}

/// Writes `gen` (log records up to `seq`) into redb, then drops the frozen layer.
/// Retries until it succeeds or the server halts: the log keeps everything meanwhile.
fn checkpoint(core: &Core, gen: &Gen, seq: u64) {
    let mut delay = Duration::from_millis(100);
    loop {
        match commit_gen(&core.db, gen, seq) {
            Ok(()) => {
                let mut l = core.layers.write().unwrap_or_else(|p| p.into_inner());
                debug_assert!(l.frozen.as_deref().is_some_and(|f| std::ptr::eq(f, gen)));
                l.frozen = None;
                core.checkpoints.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(e) => {
                tracing::error!("checkpoint up to log record {seq} failed (will retry): {e}");
                if core.halted.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}

impl Writer {
    fn serve(&mut self, rx: Receiver<Item>) {
        let mut last_len = 1;
        while let Ok(first) = rx.recv() {
            let batch = gather(&rx, first, last_len);
            last_len = batch.len();
            let (answers, purged) = if self.core.halted.load(Ordering::SeqCst) {
                let e = WireError::new(ErrorCode::Busy, "metadata server is stopping");
                (vec![Err(e); batch.len()], false)
            } else {
                self.commit_guarded(&batch)
            };
            // The batch is committed (or not): Opens may look at these inodes again.
            self.core.opens.lock().dying.clear();
            if batch.iter().any(|i| matches!(i.job, Job::Checkpoint)) {
                self.checkpoint_now();
            }
            assert_eq!(answers.len(), batch.len(), "one answer per operation");
            for (item, answer) in batch.into_iter().zip(answers) {
                if let Some(reply) = item.reply {
                    // The waiter may have given up; nothing to do then.
                    let _ = reply.send(answer);
                }
            }
            if purged {
                self.core.kick_purge();
            }
            self.maybe_freeze();
        }
    }

    /// Freezes the active layer for the checkpoint thread when it is due and the
    /// previous checkpoint is done.
    fn maybe_freeze(&mut self) {
        let due = {
            let l = self.core.layers.read().unwrap_or_else(|p| p.into_inner());
            l.frozen.is_none()
                && !l.active.is_empty()
                && (l.active.len() >= FREEZE_KEYS
                    || self.wal.offset() >= FREEZE_BYTES
                    || self.last_freeze.elapsed() >= self.core.tuning.freeze_age)
        };
        if !due {
            return;
        }
        let gen = self.freeze();
        let seq = self.wal.last_seq();
        match &self.ckpt_tx {
            Some(tx) => {
                if let Err(e) = tx.send((gen, seq)) {
                    let (gen, seq) = e.0;
                    checkpoint(&self.core, &gen, seq);
                }
            }
            None => checkpoint(&self.core, &gen, seq),
        }
    }

    /// Moves the active layer to `frozen` and continues the log in the other file.
    /// Only when no checkpoint is running: the other file's records are all in redb.
    fn freeze(&mut self) -> Arc<Gen> {
        let mut l = self.core.layers.write().unwrap_or_else(|p| p.into_inner());
        assert!(l.frozen.is_none(), "freeze while a checkpoint runs");
        let gen = Arc::new(std::mem::take(&mut l.active));
        l.frozen = Some(gen.clone());
        self.wal.switch();
        self.last_freeze = Instant::now();
        gen
    }

    /// Waits for a running checkpoint, then checkpoints the active layer on this thread.
    fn checkpoint_now(&mut self) {
        loop {
            let l = self.core.layers.read().unwrap_or_else(|p| p.into_inner());
            if l.frozen.is_none() {
                if l.active.is_empty() {
                    return;
                }
                break;
            }
            drop(l);
            if self.core.halted.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let gen = self.freeze();
        checkpoint(&self.core, &gen, self.wal.last_seq());
    }

    fn commit_guarded(&mut self, batch: &[Item]) -> (Vec<Answer>, bool) {
        match catch_unwind(AssertUnwindSafe(|| self.commit(batch))) {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => {
                tracing::error!("batch of {} operations failed: {e}", batch.len());
                (vec![Err(e); batch.len()], false)
            }
            Err(_) => {
                let e = WireError::new(
                    ErrorCode::Internal,
                    "metadata writer panicked; batch discarded",
                );
                tracing::error!("{e}");
                (vec![Err(e); batch.len()], false)
            }
        }
    }

    /// Applies, logs and publishes one batch; `Err` means nothing of it was committed.
    fn commit(&mut self, batch: &[Item]) -> Result<(Vec<Answer>, bool), WireError> {
        let mut answers = Vec::with_capacity(batch.len());
        let mut purged = false;
        let delta = {
            let layers = self.core.layers.read().unwrap_or_else(|p| p.into_inner());
            // Begun under the lock, so no checkpoint can drop a layer this view misses.
            let txn = self
                .core
                .db
                .begin_read()
                .map_err(|e| io("starting a read", e))?;
            let rd = Rd::open(&txn)?;
            let mut w = Wr::new(View::new(&layers, &rd));
            for item in batch {
                let (answer, p) = apply(&self.core, &mut w, &item.job);
                if let Err(e) = &answer {
                    if is_fatal(e) {
                        return Err(e.clone());
                    }
                }
                purged |= p;
                answers.push(answer);
            }
            w.delta
        };
        if !delta.is_empty() {
            if let Err(e) = self.wal.append(&wal::encode(&delta)) {
                // What the log holds now is unknown: accept no further change.
                self.core.halted.store(true, Ordering::SeqCst);
                tracing::error!("{e}; the metadata server accepts no more changes");
                return Err(e);
            }
            let mut l = self.core.layers.write().unwrap_or_else(|p| p.into_inner());
            l.active.absorb(delta);
        }
        self.core.commits.fetch_add(1, Ordering::Relaxed);
        self.core
            .committed_ops
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok((answers, purged))
    }
}

/// The batch starting with `first`: everything queued, waiting up to [`GATHER_WAIT`]
/// while it is smaller than the previous one.
fn gather(rx: &Receiver<Item>, first: Item, last_len: usize) -> Vec<Item> {
    let mut batch = vec![first];
    let deadline = Instant::now() + GATHER_WAIT;
    while batch.len() < MAX_BATCH {
        match rx.try_recv() {
            Ok(item) => batch.push(item),
            Err(TryRecvError::Disconnected) => break,
            Err(TryRecvError::Empty) if batch.len() >= last_len => break,
            Err(TryRecvError::Empty) => {
                let left = deadline.saturating_duration_since(Instant::now());
                match rx.recv_timeout(left) {
                    Ok(item) => batch.push(item),
                    Err(_) => break,
                }
            }
        }
    }
    batch
}

fn apply(core: &Core, w: &mut Wr, job: &Job) -> (Answer, bool) {
    let root = Cred::root();
    let cred = match job {
        Job::Client { cred, .. } => cred,
        _ => &root,
    };
    let mut ctx = Ctx {
        w,
        cred,
        now_ns: core.clock.now_ns(),
        placement: core.placement,
        opens: &core.opens,
        purged: false,
    };
    let answer = match job {
        Job::Client { req, .. } => ops::apply(&mut ctx, req),
        Job::Reap(ino) => remove::reap(&mut ctx, *ino).map(|_| Response::Done),
        Job::PurgeDone(inos) => purge_done(&mut ctx, inos),
        Job::Checkpoint => Ok(Response::Done),
    };
    (answer, ctx.purged)
}

fn purge_done(ctx: &mut Ctx, inos: &[u64]) -> Answer {
    for &ino in inos {
        ctx.w.del_purge(ino)?;
    }
    Ok(Response::Done)
}
