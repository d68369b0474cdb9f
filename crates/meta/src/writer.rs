//! The single writer: group commit of all mutations.
//!
//! Connection threads queue mutations on a bounded channel and wait. The writer takes
//! everything queued (up to [`MAX_BATCH`]), applies each operation in order to ONE write
//! transaction, commits it with `Durability::Immediate`, and only then answers them all:
//! nothing is acknowledged before it is durable, and one fsync serves the whole batch.
//!
//! Each operation's result is its own: an operation refused by its checks has written
//! nothing (see `ops`), so the others in the batch proceed. A storage or corruption error
//! (`store::is_fatal`) or a panic aborts the transaction and fails the whole batch, since
//! a half-applied operation must never be committed.

use crate::ops::{self, remove, Ctx};
use crate::store::{io, is_fatal, Wr};
use crate::Core;
use redb::Durability;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use stripefs_wire::{Cred, ErrorCode, Request, Response, WireError};

/// Most operations committed by one transaction.
pub const MAX_BATCH: usize = 256;
/// Most operations waiting for the writer; senders block beyond it (back-pressure).
pub const MAX_QUEUE: usize = 4096;

pub type Answer = Result<Response, WireError>;

pub enum Job {
    /// A client's mutation.
    Client { cred: Cred, req: Request },
    /// The last Close of an inode that lost its last link while open.
    Reap(u64),
    /// The purge thread removed these files' data objects.
    PurgeDone(Vec<u64>),
}

pub struct Item {
    pub job: Job,
    pub reply: Option<SyncSender<Answer>>,
}

/// How long the writer waits for the clients of the previous batch to send their next
/// operation before committing a smaller batch. Clients answered together send again
/// together, but not at the same instant; without this wait the batch would split into
/// an early small one and a late one, each paying a full fsync.
pub const GATHER_WAIT: Duration = Duration::from_micros(150);

pub fn run(core: Arc<Core>, rx: Receiver<Item>) {
    let mut last_len = 1;
    while let Ok(first) = rx.recv() {
        let batch = gather(&rx, first, last_len);
        last_len = batch.len();
        let (answers, purged) = if core.halted.load(Ordering::SeqCst) {
            let e = WireError::new(ErrorCode::Busy, "metadata server is stopping");
            (vec![Err(e); batch.len()], false)
        } else {
            commit_guarded(&core, &batch)
        };
        // The batch is committed (or not): Opens may look at these inodes again.
        core.opens.lock().dying.clear();
        assert_eq!(answers.len(), batch.len(), "one answer per operation");
        for (item, answer) in batch.into_iter().zip(answers) {
            if let Some(reply) = item.reply {
                // The waiter may have given up; nothing to do then.
                let _ = reply.send(answer);
            }
        }
        if purged {
            core.kick_purge();
        }
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

fn commit_guarded(core: &Core, batch: &[Item]) -> (Vec<Answer>, bool) {
    match catch_unwind(AssertUnwindSafe(|| commit(core, batch))) {
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

/// Applies and commits one batch; `Err` means nothing of it was committed.
fn commit(core: &Core, batch: &[Item]) -> Result<(Vec<Answer>, bool), WireError> {
    let mut txn = core
        .db
        .begin_write()
        .map_err(|e| io("starting a write", e))?;
    txn.set_durability(Durability::Immediate);
    let mut answers = Vec::with_capacity(batch.len());
    let mut purged = false;
    {
        let mut w = Wr::open(&txn)?;
        for item in batch {
            let (answer, p) = apply(core, &mut w, &item.job);
            if let Err(e) = &answer {
                if is_fatal(e) {
                    return Err(e.clone());
                }
            }
            purged |= p;
            answers.push(answer);
        }
    }
    txn.commit().map_err(|e| io("committing", e))?;
    core.commits.fetch_add(1, Ordering::Relaxed);
    core.committed_ops
        .fetch_add(batch.len() as u64, Ordering::Relaxed);
    Ok((answers, purged))
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
    };
    (answer, ctx.purged)
}

fn purge_done(ctx: &mut Ctx, inos: &[u64]) -> Answer {
    for &ino in inos {
        ctx.w
            .purge
            .remove(ino)
            .map_err(|e| io(format!("removing inode {ino} from the purge queue"), e))?;
    }
    Ok(Response::Done)
}
