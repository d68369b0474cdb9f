//! Group commit of all mutations, by a leader among the waiting threads.
//!
//! A thread with a mutation (a connection thread, the purge thread) queues it and waits.
//! If no commit is running, it becomes the *leader*: it takes every queued operation (up
//! to [`MAX_BATCH`]), applies them in order to one batch delta (an in-memory layer over
//! the namespace, `overlay.rs`), appends the delta to the metadata log as one record
//! made durable by one synchronous write (`wal.rs`), publishes it to readers, hands every
//! waiter its answer and wakes them; one of those that queued meanwhile leads the next
//! batch. A gathering leader is woken only when as many operations as its last batch
//! held are queued, or after [`GATHER_WAIT`].
//! Nothing is acknowledged before it is durable, one sync serves every operation that
//! arrived while the previous one ran, and no operation passes through another thread
//! on its way (each hand-over costs a wake-up).
//!
//! Early jobs are the exception ([`Job::early`]: WriteInlineUnsynced, a close's inline
//! bytes, which need not be durable before fsync). A batch holding one is published
//! before its record is written, and its early jobs are answered then, so its other
//! changes are visible (not acknowledged) before they are durable too. The log stays one
//! sequence in the order of application, so whatever a later answer acknowledges as
//! durable has everything published before it durable too. A leader whose own job is
//! early answers it and does not write: a batch with other waiters is left *pending*
//! and the next leader (one of them) writes it before anything else; a batch of early
//! jobs only joins the *carry*, written with the next record (the next create's, say)
//! or, if none comes within [`CARRY_WAIT`], by the sync thread. A small file's create,
//! write and close thus cost one log write. A `Sync` job (SyncMeta, an fsync of an
//! inline file) is answered once everything before it is written.
//!
//! An early job does not wait for a leader's log write either: its own thread applies
//! it beside the commit (`Writer::side_path`), joins it to the carry and answers it.
//! An early job changes only its own inode, and the batch being written is not visible
//! yet, so the job is taken that way only when its inode is not one the batch changes
//! (`Side::unpublished`): it is then ordered before that batch, which changes none of
//! what it read or wrote, and its change goes in a later record. Otherwise it queues as
//! any other. Before the side path, a close waited for the write of whatever commit was
//! running when it came (on a busy server, most of one sync).
//!
//! The redb tables are brought up to date by checkpoints: when the active layer is large
//! or old enough (and the previous checkpoint is done), the leader freezes it, continues
//! the log in the other file, and a checkpoint thread writes the frozen layer into redb
//! in one durable transaction, then drops it. Checkpoints carry thousands of operations
//! each, so the store's page writes are shared by many operations and never delay an
//! answer.
//!
//! Back-pressure: a checkpoint that fails (a full disk) is retried with backoff, and the
//! log keeps everything meanwhile, but the layers in memory and the log file grow with
//! each batch. Past a bound ([`Tuning::max_overlay_keys`], [`Tuning::max_overlay_log_bytes`])
//! clients' mutations are refused with the checkpoint's error (`NoSpace` for a full
//! disk) while reads go on; once a retry succeeds, mutations are accepted again. A stop
//! makes one last attempt and otherwise leaves the log to be replayed at the next start.
//! A log file that cannot grow (a full disk) refuses the batch without halting: nothing
//! was written.
//!
//! Each operation's result is its own: an operation refused by its checks has written
//! nothing (see `ops`), so the others in the batch proceed. A storage or corruption error
//! (`store::is_fatal`) or a panic discards the batch delta and fails the whole batch,
//! since a half-applied operation must never be committed. A failed log write stops all
//! further changes (`halted`): after it the log's contents are unknown.
//!
//! A batch whose log record would pass the log's limit (operations on many inodes with
//! large attributes or inline bytes) is committed again an operation at a time; a single
//! operation that large is refused. Neither halts the server.

use crate::ops::{self, remove, Ctx};
use crate::overlay::{Gen, View, Wr};
use crate::store::{commit_gen, is_fatal, Rd};
use crate::wal::{self, Wal};
use crate::{Core, Tuning};
use std::collections::{HashMap, HashSet, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use stripefs_wire::{Cred, ErrorCode, MetaWriteOp, Response, WireError};

/// Most operations committed by one batch.
pub const MAX_BATCH: usize = 256;
/// The active layer is frozen for a checkpoint when it holds this many changed keys,
/// when its log file holds this many bytes, or when it is this old.
pub const FREEZE_KEYS: usize = 200_000;
pub const FREEZE_BYTES: u64 = 8 << 20;
pub const FREEZE_AGE: Duration = Duration::from_secs(2);
/// How long a leader waits for more operations when fewer are queued than the last
/// batch held. Clients answered together send again together, but not at the same
/// instant; without this wait their operations would split over two syncs.
pub const GATHER_WAIT: Duration = Duration::from_micros(200);
/// How long a batch of early jobs only (a close's inline bytes, not fsync) waits to be
/// written with a later commit before the sync thread writes it alone (between one and
/// two of these, as the thread checks the carry it saw begin).
pub const CARRY_WAIT: Duration = Duration::from_millis(5);
/// A carry holding this many changed keys is written at once.
const CARRY_MAX_KEYS: usize = 4096;
/// Retries of a failed checkpoint wait this long at first, doubling up to the maximum.
pub const CHECKPOINT_RETRY_MIN: Duration = Duration::from_millis(100);
pub const CHECKPOINT_RETRY_MAX: Duration = Duration::from_secs(5);
/// Back-pressure bounds (see the module comment): changed keys held in memory, and bytes
/// in the current log file.
pub const MAX_OVERLAY_KEYS: usize = 4 * FREEZE_KEYS;
pub const MAX_OVERLAY_LOG_BYTES: u64 = 8 * FREEZE_BYTES;
/// Longest a batch over the bound waits for a running (not failing) checkpoint before it
/// is refused with `Busy`.
const PRESSURE_WAIT: Duration = Duration::from_secs(10);

pub type Answer = Result<Response, WireError>;

/// A batch applied: its answers, whether it queued files for purging, and its log
/// record when that is still to be written (published already, see `commit_batch`).
type Applied = (Vec<Answer>, bool, Option<Vec<u8>>);

pub enum Job {
    /// A client's mutation.
    /// `host`: the client's host (`ClientHost` on its connection), for placement.
    Client {
        cred: Cred,
        req: MetaWriteOp,
        host: Option<String>,
    },
    /// The last Close of an inode that lost its last link while open.
    Reap(u64),
    /// The purge thread removed these files' data objects.
    PurgeDone(Vec<u64>),
    /// Write everything acknowledged so far into the redb tables before answering.
    Checkpoint,
    /// A move of an inline file's bytes to its data servers begins (`inline.rs`).
    BeginMove(u64),
    /// The move is done: the bytes of change count `gen` are durable there.
    EndMove { ino: u64, gen: u64 },
    /// Changes nothing: answered once everything answered before it is durable (SyncMeta).
    Sync,
}

impl Job {
    /// Answered once its batch is applied and visible, before the batch is durable
    /// (WriteInlineUnsynced and ExtendSizeUnsynced: a close's inline bytes or size).
    fn early(&self) -> bool {
        matches!(
            self,
            Job::Client {
                req: MetaWriteOp::WriteInlineUnsynced { .. }
                    | MetaWriteOp::ExtendSizeUnsynced { .. },
                ..
            }
        )
    }
}

#[derive(Default)]
struct Queue {
    /// Operations waiting for a leader, by ticket, in arrival order.
    jobs: VecDeque<(u64, Job)>,
    /// Answers not yet collected by their waiters.
    answers: HashMap<u64, Answer>,
    next_ticket: u64,
    /// A leader is committing.
    leading: bool,
    /// Operations in the last batch.
    last_len: usize,
    /// A batch is applied, visible and partly answered, but its log record is not
    /// written yet (`Log::pending`): the next leader writes it before anything else.
    pending: bool,
    /// Threads asleep waiting for their answer (or to lead), by ticket.
    sleepers: HashMap<u64, std::thread::Thread>,
}

impl Queue {
    /// Wakes exactly who has something to do: each sleeper whose answer is in, and,
    /// when no leader runs but work waits (queued jobs or a pending batch), one more
    /// to lead. (Waking every waiter on each batch cost a trip through the scheduler
    /// for each one that found nothing.)
    fn wake(&mut self) {
        let ready: Vec<u64> = self
            .sleepers
            .keys()
            .filter(|t| self.answers.contains_key(t))
            .copied()
            .collect();
        for t in ready {
            if let Some(th) = self.sleepers.remove(&t) {
                th.unpark();
            }
        }
        if !self.leading && (self.pending || !self.jobs.is_empty()) {
            if let Some(&t) = self.sleepers.keys().min() {
                if let Some(th) = self.sleepers.remove(&t) {
                    th.unpark();
                }
            }
        }
    }
}

/// The group-commit queue and the leader's state.
pub struct Writer {
    queue: Mutex<Queue>,
    /// Signalled when an operation is queued (a gathering leader waits for it).
    arrived: Condvar,
    /// The leader's state; locked only by the leader and at shutdown.
    log: Mutex<Option<Log>>,
    /// Set (and signalled) when a carry begins (`Side::carry`): the sync thread writes
    /// it after [`CARRY_WAIT`] unless a commit has taken it along.
    sync_wanted: Mutex<bool>,
    sync_cv: Condvar,
    /// A carry is waiting to be written.
    carrying: AtomicBool,
    /// Carries begun so far (the sync thread writes only one at least CARRY_WAIT old).
    carries: AtomicU64,
    /// The carry and the side path of early jobs (lock order: `log`, then this, then
    /// the layers).
    side: Mutex<Side>,
}

/// Changes visible but in no log record yet (the *carry*), and what an early job needs
/// to know to be applied beside a commit ([`Writer::side_path`]).
#[derive(Default)]
struct Side {
    /// Batches of early jobs, applied and visible (and answered) but not written: the
    /// next record written holds them too, or the sync thread's after CARRY_WAIT.
    carry: Option<Gen>,
    /// Operations in the carry.
    carry_ops: u64,
    /// Inodes the batch being written changes; its changes are not visible yet. The
    /// leader applies its batch under this lock, so no early job is applied meanwhile.
    unpublished: HashSet<u64>,
    /// The writer is stopping: nothing joins the carry any more.
    closed: bool,
}

impl Side {
    /// Takes `delta` into the carry and makes it visible; returns whether the carry is
    /// now large enough to be written at once.
    fn absorb(&mut self, core: &Core, delta: Gen, ops: u64) -> bool {
        let first = self.carry.is_none();
        let c = self.carry.get_or_insert_with(Gen::default);
        c.absorb(delta.clone());
        let big = c.len() >= CARRY_MAX_KEYS;
        self.carry_ops += ops;
        core.layers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .active
            .absorb(delta);
        if first {
            Side::began(core);
        }
        big
    }

    /// A carry began: the sync thread writes it after CARRY_WAIT unless a commit takes
    /// it along first.
    fn began(core: &Core) {
        let w = &core.writer;
        w.carries.fetch_add(1, Ordering::SeqCst);
        w.carrying.store(true, Ordering::SeqCst);
        *lock(&w.sync_wanted) = true;
        w.sync_cv.notify_one();
    }

    /// Takes the carry out for a record, with its operation count.
    fn take(&mut self, core: &Core) -> Option<(Gen, u64)> {
        let c = self.carry.take()?;
        core.writer.carrying.store(false, Ordering::SeqCst);
        Some((c, std::mem::take(&mut self.carry_ops)))
    }

    /// Puts back a carry taken out whose record was not written: older than whatever
    /// joined since, which overrides it.
    fn put_back(&mut self, core: &Core, (mut c, ops): (Gen, u64)) {
        if let Some(newer) = self.carry.take() {
            c.absorb(newer);
        }
        self.carry = Some(c);
        self.carry_ops += ops;
        Side::began(core);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Writer {
    pub fn new() -> Writer {
        Writer {
            queue: Mutex::default(),
            arrived: Condvar::new(),
            log: Mutex::new(None),
            sync_wanted: Mutex::new(false),
            sync_cv: Condvar::new(),
            carrying: AtomicBool::new(false),
            carries: AtomicU64::new(0),
            side: Mutex::default(),
        }
    }

    /// Hands the log to the writer and starts the checkpoint thread.
    /// Hands the log to the writer and starts the checkpoint thread (unless the tuning
    /// asks for checkpoints on the committing thread).
    pub fn start(core: &Arc<Core>, wal: Wal) -> Result<(), String> {
        let ckpt = if core.tuning.background {
            let (tx, rx) = channel::<(Arc<Gen>, u64)>();
            let c = core.clone();
            let thread = std::thread::Builder::new()
                .name("meta-checkpoint".into())
                .spawn(move || {
                    while let Ok((gen, seq)) = rx.recv() {
                        checkpoint_retrying(&c, &gen, seq);
                    }
                })
                .map_err(|e| format!("cannot start the checkpoint thread: {e}"))?;
            Some((tx, thread))
        } else {
            None
        };
        // A carry (early jobs only, visible, not yet written) goes out with the next
        // commit; if none comes within CARRY_WAIT, this thread commits a Sync for it.
        // Without background threads there is no carry: such a batch is written at once.
        let syncer = if core.tuning.background {
            let c = core.clone();
            let thread = std::thread::Builder::new()
                .name("meta-sync".into())
                .spawn(move || loop {
                    let w = &c.writer;
                    let mut want = lock(&w.sync_wanted);
                    while !*want && !c.stopping.load(Ordering::SeqCst) {
                        want = w.sync_cv.wait(want).unwrap_or_else(|p| p.into_inner());
                    }
                    *want = false;
                    drop(want);
                    let seen = w.carries.load(Ordering::SeqCst);
                    c.wait_stop(c.tuning.carry_wait);
                    if c.stopping.load(Ordering::SeqCst) {
                        return;
                    }
                    // A newer carry has its own CARRY_WAIT (it set `sync_wanted` again).
                    if w.carrying.load(Ordering::SeqCst) && w.carries.load(Ordering::SeqCst) == seen
                    {
                        let _ = Writer::submit(&c, Job::Sync);
                    }
                })
                .map_err(|e| format!("cannot start the metadata sync thread: {e}"))?;
            Some(thread)
        } else {
            None
        };
        *lock(&core.writer.log) = Some(Log {
            wal,
            last_freeze: core.clock.monotonic(),
            ckpt,
            frozen_seq: 0,
            retry: None,
            batch_id: 0,
            pending: None,
            syncer,
        });
        Ok(())
    }

    /// Stops: waits for a running commit, ends the checkpoint thread (after its current
    /// attempt), and unless halted (a simulated crash leaves the log for the next start)
    /// makes one attempt to checkpoint everything; if that fails, the log keeps it all
    /// for the next start. Never waits for a disk to come back.
    pub fn stop(core: &Core) {
        let Some(mut log) = lock(&core.writer.log).take() else {
            return;
        };
        // No early job joins the carry from now on (they queue, and are refused).
        lock(&core.writer.side).closed = true;
        core.stopping.store(true, Ordering::SeqCst);
        core.wake_stop();
        if let Some(p) = log.pending.take() {
            // Its waiters are answered (the sync thread may be one): with its record
            // written, or (halted) an error.
            let done = log.finish(core, p);
            core.writer.deliver(done);
        }
        {
            let _g = lock(&core.writer.sync_wanted);
            core.writer.sync_cv.notify_all();
        }
        if let Some(thread) = log.syncer.take() {
            let _ = thread.join();
        }
        if let Some((tx, thread)) = log.ckpt.take() {
            drop(tx);
            let _ = thread.join();
        }
        if !core.halted.load(Ordering::SeqCst) {
            let _ = log.write_carry(core);
            log.final_checkpoint(core);
        }
    }

    /// Hands answers to their waiters.
    fn deliver(&self, answers: Vec<(u64, Answer)>) {
        if answers.is_empty() {
            return;
        }
        let mut q = lock(&self.queue);
        q.answers.extend(answers);
        q.wake();
    }

    /// Writes the log record of the batch left pending (if `stop` has not), and returns
    /// the answers still owed for it.
    fn finish_pending(&self, core: &Core) -> Vec<(u64, Answer)> {
        let mut g = lock(&self.log);
        let Some(log) = g.as_mut() else {
            return Vec::new();
        };
        let Some(p) = log.pending.take() else {
            return Vec::new();
        };
        let owed = p.owed_tickets();
        catch_unwind(AssertUnwindSafe(|| log.finish(core, p))).unwrap_or_else(|_| {
            core.halted.store(true, Ordering::SeqCst);
            let e = WireError::new(
                ErrorCode::Internal,
                "metadata writer panicked writing a batch; accepting no more changes",
            );
            tracing::error!("{e}");
            owed.into_iter().map(|t| (t, Err(e.clone()))).collect()
        })
    }

    /// Queues `job` and returns its answer once it is committed (or has failed); an
    /// early job's ([`Job::early`]) once its batch is visible.
    pub fn submit(core: &Core, job: Job) -> Answer {
        let w = &core.writer;
        let mine_early = job.early();
        // Without background threads (a deterministic simulator) there is no carry.
        if mine_early && core.tuning.background {
            if let Some(answer) = Writer::side_path(core, &job) {
                return answer;
            }
        }
        let mut q = lock(&w.queue);
        let ticket = q.next_ticket;
        q.next_ticket += 1;
        q.jobs.push_back((ticket, job));
        if q.jobs.len() >= q.last_len.min(MAX_BATCH) {
            // A gathering leader waits for this many: waking it for fewer would cost a
            // wake-up per operation for nothing (it gives up after GATHER_WAIT anyway).
            w.arrived.notify_one();
        }
        loop {
            if let Some(answer) = q.answers.remove(&ticket) {
                return answer;
            }
            if q.leading {
                // Asleep until `Queue::wake` finds an answer for us or work to lead; a
                // wake-up before the park is kept by the thread's token.
                q.sleepers.insert(ticket, std::thread::current());
                drop(q);
                std::thread::park();
                q = lock(&w.queue);
                q.sleepers.remove(&ticket);
                continue;
            }
            q.leading = true;
            if q.pending {
                // The last batch was answered in part and waits for its log record:
                // written before anything else, then this thread leads only if its own
                // answer is still to come.
                q.pending = false;
                drop(q);
                let done = w.finish_pending(core);
                q = lock(&w.queue);
                q.answers.extend(done);
                q.leading = false;
                q.wake();
                continue;
            }
            // Lead the next batch, first letting the stragglers of the last one arrive
            // (not for an early job: it writes nothing now, and the durable jobs that
            // arrive meanwhile form the next batch).
            let deadline = Instant::now()
                + if mine_early {
                    Duration::ZERO
                } else {
                    GATHER_WAIT
                };
            while q.jobs.len() < q.last_len.min(MAX_BATCH) {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                q = w
                    .arrived
                    .wait_timeout(q, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            let n = q.jobs.len().min(MAX_BATCH);
            let batch: Vec<(u64, Job)> = q.jobs.drain(..n).collect();
            q.last_len = batch.len();
            drop(q);
            // An early job of its own lets the leader answer it and leave the log write
            // to the batch's other waiters, who wait for it anyway.
            let defer = mine_early && batch.iter().any(|(t, _)| *t == ticket);
            let fail_all = |e: WireError| batch.iter().map(|(t, _)| (*t, Err(e.clone()))).collect();
            let answers: Option<Vec<(u64, Answer)>> = match lock(&w.log).as_mut() {
                // A panic here (outside an operation, which `commit` guards itself) must
                // not leave `leading` set, or every later mutation would wait forever.
                Some(log) => catch_unwind(AssertUnwindSafe(|| {
                    log.commit(core, &batch, defer, &|a| w.deliver(a))
                }))
                .unwrap_or_else(|_| {
                    core.halted.store(true, Ordering::SeqCst);
                    let e = WireError::new(
                        ErrorCode::Internal,
                        "metadata writer panicked after a batch; accepting no more changes",
                    );
                    tracing::error!("{e}");
                    Some(fail_all(e))
                }),
                None => Some(fail_all(WireError::new(
                    ErrorCode::Busy,
                    "metadata server is stopping",
                ))),
            };
            q = lock(&w.queue);
            match answers {
                Some(a) => q.answers.extend(a),
                None => q.pending = true,
            }
            q.leading = false;
            q.wake();
        }
    }
}

impl Writer {
    /// The side path of an early job (a close's inline bytes or size; see the module
    /// comment): applied, made visible and answered on the calling thread, beside any
    /// commit, and written with the next record (the carry). `None`: not taken, the job
    /// goes through the queue (its inode is in the batch being written, the job changed
    /// more than inodes, the carry is full, back-pressure, or a stop).
    fn side_path(core: &Core, job: &Job) -> Option<Answer> {
        let mut side = lock(&core.writer.side);
        if side.closed || core.halted.load(Ordering::SeqCst) || core.stopping.load(Ordering::SeqCst)
        {
            return None;
        }
        if side.carry.as_ref().map_or(0, Gen::len) + 1 >= CARRY_MAX_KEYS {
            return None;
        }
        let (answer, delta) = {
            let layers = core.layers();
            // Back-pressure (refusing changes while checkpoints fail) is the leader's.
            let keys = layers.active.len() + layers.frozen.as_ref().map_or(0, |f| f.len());
            if keys >= core.tuning.max_overlay_keys {
                return None;
            }
            // Begun under the lock, so no checkpoint can drop a layer this view misses.
            let (_db, txn) = core.read_txn().ok()?;
            let rd = Rd::open(&txn).ok()?;
            let mut w = Wr::new(View::new(&layers, &rd));
            // A panic leaves nothing applied; the queue's leader meets it again and
            // fails the batch as it fails any.
            let (answer, purged) =
                catch_unwind(AssertUnwindSafe(|| apply(core, &mut w, job))).ok()?;
            if purged {
                return None;
            }
            (answer, w.delta)
        };
        if matches!(&answer, Err(e) if is_fatal(e)) {
            return None;
        }
        if !delta.only_inodes() || delta.inodes.keys().any(|i| side.unpublished.contains(i)) {
            return None;
        }
        // A refused operation changed nothing.
        if !delta.is_empty() {
            side.absorb(core, delta, 1);
        }
        Some(answer)
    }
}

/// Frozen layers (and the log record they end at) for the checkpoint thread.
type CheckpointTx = Sender<(Arc<Gen>, u64)>;

/// The leader's state: the log, the freeze schedule and the checkpoint thread.
pub struct Log {
    wal: Wal,
    /// When the active layer was last frozen (the server clock's monotonic time).
    last_freeze: Duration,
    /// `None` when checkpoints run on the committing thread (`Tuning::background`).
    ckpt: Option<(CheckpointTx, JoinHandle<()>)>,
    /// The last log record the frozen layer holds.
    frozen_seq: u64,
    /// Without a checkpoint thread, after a failed checkpoint: when to retry it and the
    /// current delay.
    retry: Option<(Duration, Duration)>,
    batch_id: u64,
    /// A batch applied and visible, its early jobs answered, whose record is not written
    /// yet: its leader answered its own early job and left the write to the next leader
    /// (one of the batch's other waiters, or whoever comes first).
    pending: Option<Pending>,
    /// The sync thread (with background threads only).
    syncer: Option<JoinHandle<()>>,
}

/// A batch between its application and its end (see [`Log::finish`]).
struct Pending {
    id: u64,
    tickets: Vec<u64>,
    answers: Vec<Answer>,
    /// Answered already (early jobs of a batch published before its record is written).
    delivered: Vec<bool>,
    /// The log record still to be written; `None` when written (or nothing to write).
    payload: Option<Vec<u8>>,
    purged: bool,
    /// Which operations are Checkpoint jobs (done after the record is written).
    checkpoints: Vec<bool>,
}

impl Pending {
    fn owed_tickets(&self) -> Vec<u64> {
        self.tickets
            .iter()
            .zip(&self.delivered)
            .filter(|(_, d)| !**d)
            .map(|(t, _)| *t)
            .collect()
    }
}

impl Log {
    /// Applies, logs and publishes one batch, then does what it asked for, and returns
    /// the answers (ticket, answer) not handed out yet. A batch with early jobs is
    /// published before its record is written and their answers go to `early` at once;
    /// then, if `defer`, the batch is left in `self.pending` for the next leader to
    /// write and finish, and `None` is returned.
    fn commit(
        &mut self,
        core: &Core,
        batch: &[(u64, Job)],
        defer: bool,
        early: &dyn Fn(Vec<(u64, Answer)>),
    ) -> Option<Vec<(u64, Answer)>> {
        if let Some(p) = self.pending.take() {
            // Never reached through `submit`, which finishes a pending batch first.
            let done = self.finish(core, p);
            early(done);
        }
        self.batch_id += 1;
        let id = self.batch_id;
        self.retry_due_checkpoint(core);
        // A leader with an early job of its own and nobody else waiting may carry the
        // batch (see `carry`): the sync thread bounds how long it stays unwritten.
        let carry_ok = defer && self.syncer.is_some() && batch.iter().all(|(_, j)| j.early());
        let (answers, purged, payload) = if core.halted.load(Ordering::SeqCst) {
            let e = WireError::new(ErrorCode::Busy, "metadata server is stopping");
            (vec![Err(e); batch.len()], false, None)
        } else {
            let refuse = self.pressure(core);
            self.commit_guarded(core, id, batch, refuse.as_ref(), carry_ok)
        };
        let mut p = Pending {
            id,
            tickets: batch.iter().map(|(t, _)| *t).collect(),
            delivered: vec![false; batch.len()],
            answers,
            payload,
            purged,
            checkpoints: batch
                .iter()
                .map(|(_, j)| matches!(j, Job::Checkpoint))
                .collect(),
        };
        if p.payload.is_some() {
            let mut now = Vec::new();
            for (i, (t, job)) in batch.iter().enumerate() {
                if job.early() {
                    p.delivered[i] = true;
                    now.push((*t, p.answers[i].clone()));
                }
            }
            early(now);
            if defer && p.delivered.iter().any(|d| !d) {
                self.pending = Some(p);
                return None;
            }
        }
        Some(self.finish(core, p))
    }

    /// Writes the batch's log record if it is still to be written, then does what the
    /// batch asked for; returns the answers not handed out yet. A failed write (or a
    /// halt meanwhile) fails every operation not answered yet; those answered early
    /// are then lost as in a crash, which their rule allows (they were not fsync).
    fn finish(&mut self, core: &Core, mut p: Pending) -> Vec<(u64, Answer)> {
        if let Some(payload) = p.payload.take() {
            let written = if core.halted.load(Ordering::SeqCst) {
                Err(WireError::new(
                    ErrorCode::Busy,
                    "metadata server is stopping",
                ))
            } else {
                self.append(core, &payload)
            };
            match written {
                Ok(()) => {
                    core.commits.fetch_add(1, Ordering::Relaxed);
                    core.committed_ops
                        .fetch_add(p.tickets.len() as u64, Ordering::Relaxed);
                }
                Err(e) => {
                    for a in p.answers.iter_mut() {
                        *a = Err(e.clone());
                    }
                }
            }
        }
        // The batch is committed (or not): Opens may look at its inodes again.
        core.opens.lock().dying.settle(p.id);
        if p.checkpoints.iter().any(|c| *c) {
            if let Err(e) = self.checkpoint_now(core) {
                // Only Checkpoint jobs are told: the rest is durable in the log.
                for (a, c) in p.answers.iter_mut().zip(&p.checkpoints) {
                    if *c {
                        *a = Err(e.clone());
                    }
                }
            }
        }
        if p.purged {
            core.kick_purge();
        }
        self.maybe_freeze(core);
        p.tickets
            .into_iter()
            .zip(p.answers)
            .zip(p.delivered)
            .filter(|(_, d)| !d)
            .map(|(ta, _)| ta)
            .collect()
    }

    /// Writes the carry in a record of its own.
    fn write_carry(&mut self, core: &Core) -> Result<(), WireError> {
        let mut side = lock(&core.writer.side);
        self.write_carry_locked(core, &mut side)
    }

    /// [`Log::write_carry`] under the side lock (no early job joins it meanwhile).
    fn write_carry_locked(&mut self, core: &Core, side: &mut Side) -> Result<(), WireError> {
        let Some(taken) = side.take(core) else {
            return Ok(());
        };
        let payload = wal::encode(&taken.0);
        let written = self
            .wal
            .make_room(payload.len())
            .and_then(|()| self.append(core, &payload));
        match written {
            Ok(()) => {
                core.committed_ops.fetch_add(taken.1, Ordering::Relaxed);
                core.commits.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                side.put_back(core, taken);
                Err(e)
            }
        }
    }

    /// Appends one record; a failure halts the server (the log's contents are unknown).
    fn append(&mut self, core: &Core, payload: &[u8]) -> Result<(), WireError> {
        if !core.tuning.log_write_delay.is_zero() {
            std::thread::sleep(core.tuning.log_write_delay);
        }
        if let Err(e) = self.wal.append(payload) {
            core.halted.store(true, Ordering::SeqCst);
            tracing::error!("{e}; the metadata server accepts no more changes");
            return Err(e);
        }
        Ok(())
    }

    fn commit_guarded(
        &mut self,
        core: &Core,
        id: u64,
        batch: &[(u64, Job)],
        refuse: Option<&WireError>,
        carry_ok: bool,
    ) -> Applied {
        match catch_unwind(AssertUnwindSafe(|| {
            self.commit_batch(core, id, batch, refuse, true, carry_ok)
        })) {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => {
                tracing::error!("batch of {} operations failed: {e}", batch.len());
                (vec![Err(e); batch.len()], false, None)
            }
            Err(_) => {
                let e = WireError::new(
                    ErrorCode::Internal,
                    "metadata writer panicked; batch discarded",
                );
                tracing::error!("{e}");
                (vec![Err(e); batch.len()], false, None)
            }
        }
    }

    /// `Err` means nothing of the batch was committed. Clients' mutations are answered
    /// `refuse` without being applied when it is given (back-pressure). With
    /// `early_ok`, a batch holding early jobs is published before its record is
    /// written, and the record is returned to be written by the caller; with
    /// `carry_ok` too (early jobs only), it joins the carry and nothing is written.
    /// Any carry is written in this batch's record.
    fn commit_batch(
        &mut self,
        core: &Core,
        id: u64,
        batch: &[(u64, Job)],
        refuse: Option<&WireError>,
        early_ok: bool,
        carry_ok: bool,
    ) -> Result<Applied, WireError> {
        let mut answers = Vec::with_capacity(batch.len());
        let mut purged = false;
        // Applied under the side lock: no early job is applied beside the application
        // (`Writer::side_path`); those applied before are visible to it.
        let mut side = lock(&core.writer.side);
        let delta = {
            let layers = core.layers();
            // Begun under the lock, so no checkpoint can drop a layer this view misses.
            let (_db, txn) = core.read_txn()?;
            let rd = Rd::open(&txn)?;
            let mut w = Wr::new(View::new(&layers, &rd));
            core.opens.lock().dying.batch = id;
            for (_, job) in batch {
                if let (Some(e), Job::Client { .. }) = (refuse, job) {
                    answers.push(Err(e.clone()));
                    continue;
                }
                let (answer, p) = apply(core, &mut w, job);
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
        if carry_ok && early_ok && !delta.is_empty() {
            // Visible now, written with the next record (the log is one sequence, so
            // nothing answered after it is durable without it).
            let big = side.absorb(core, delta, batch.len() as u64);
            drop(side);
            if big {
                self.write_carry(core)?;
            }
            return Ok((answers, purged, None));
        }
        // The record holds the carry (already visible) and this batch's changes.
        let taken = side.take(core);
        let record = taken.as_ref().map(|(c, _)| {
            let mut r = c.clone();
            r.absorb(delta.clone());
            r
        });
        let to_log = record.as_ref().unwrap_or(&delta);
        if !to_log.is_empty() {
            let payload = wal::encode(to_log);
            if payload.len() > core.tuning.max_log_record.min(wal::MAX_RECORD as usize - 1) {
                // Nothing of the batch was written: the carry goes alone, then the
                // batch's operations one record each.
                if let Some(t) = taken {
                    side.put_back(core, t);
                }
                drop(side);
                self.write_carry(core)?;
                return self.commit_one_by_one(core, id, batch, refuse, payload.len());
            }
            // A file that cannot grow has had nothing written: refuse the batch only
            // (the carry stays for the next).
            if let Err(e) = self.wal.make_room(payload.len()) {
                if let Some(t) = taken {
                    side.put_back(core, t);
                }
                return Err(e);
            }
            let carried = taken.map_or(0, |(_, n)| n);
            if early_ok && batch.iter().any(|(_, j)| j.early()) {
                // Visible before durable, so that the early jobs can be answered; the
                // log is one sequence, so nothing after it is durable without it.
                core.committed_ops.fetch_add(carried, Ordering::Relaxed);
                let mut l = core.layers.write().unwrap_or_else(|p| p.into_inner());
                l.active.absorb(delta);
                return Ok((answers, purged, Some(payload)));
            }
            // Written with the side path open: early jobs on inodes this batch does not
            // change are applied and answered meanwhile.
            side.unpublished = delta.inodes.keys().copied().collect();
            drop(side);
            // What the log holds after a failure is unknown: accept no further change.
            let written = self.append(core, &payload);
            let mut side = lock(&core.writer.side);
            if written.is_ok() {
                let mut l = core.layers.write().unwrap_or_else(|p| p.into_inner());
                l.active.absorb(delta);
            }
            side.unpublished.clear();
            drop(side);
            written?;
            core.committed_ops.fetch_add(carried, Ordering::Relaxed);
        }
        core.commits.fetch_add(1, Ordering::Relaxed);
        core.committed_ops
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok((answers, purged, None))
    }

    /// A batch whose record would be too large for the log (many inodes with large
    /// attributes or inline bytes), committed an operation at a time; an operation whose
    /// own record is too large is refused, never halts the server.
    fn commit_one_by_one(
        &mut self,
        core: &Core,
        id: u64,
        batch: &[(u64, Job)],
        refuse: Option<&WireError>,
        len: usize,
    ) -> Result<Applied, WireError> {
        if batch.len() == 1 {
            return Ok((
                vec![Err(WireError::new(
                    ErrorCode::InvalidArgument,
                    format!("one change of {len} bytes is too large for the metadata log"),
                ))],
                false,
                None,
            ));
        }
        tracing::info!(
            "a batch of {} changes would make a log record of {len} bytes; committing them one by one",
            batch.len()
        );
        let (mut answers, mut purged) = (Vec::with_capacity(batch.len()), false);
        for one in batch.chunks(1) {
            let (a, p, _) = self.commit_batch(core, id, one, refuse, false, false)?;
            answers.extend(a);
            purged |= p;
        }
        Ok((answers, purged, None))
    }

    /// Freezes the active layer for a checkpoint when it is due and the previous
    /// checkpoint is done: by size, or by age when checkpoints run in the background.
    fn maybe_freeze(&mut self, core: &Core) {
        let due = {
            let l = core.layers();
            l.frozen.is_none()
                && !l.active.is_empty()
                && (l.active.len() >= FREEZE_KEYS
                    || self.wal.offset() >= FREEZE_BYTES
                    || (core.tuning.background
                        && core.clock.monotonic().saturating_sub(self.last_freeze)
                            >= core.tuning.freeze_age))
        };
        if due {
            self.start_checkpoint(core);
        }
    }

    /// Freezes the active layer and checkpoints it: on the checkpoint thread, or here
    /// (one attempt; a failure is retried by later batches).
    fn start_checkpoint(&mut self, core: &Core) {
        let gen = self.freeze(core);
        let seq = self.frozen_seq;
        match &self.ckpt {
            Some((tx, _)) => {
                if let Err(e) = tx.send((gen, seq)) {
                    let (gen, seq) = e.0;
                    checkpoint_retrying(core, &gen, seq);
                }
            }
            None => {
                if checkpoint(core, &gen, seq).is_err() {
                    self.schedule_retry(core);
                }
            }
        }
    }

    /// Without a checkpoint thread: the next retry of the failed checkpoint, with
    /// doubling delays.
    fn schedule_retry(&mut self, core: &Core) {
        let delay = self.retry.map_or(CHECKPOINT_RETRY_MIN, |(_, d)| {
            (d * 2).min(CHECKPOINT_RETRY_MAX)
        });
        self.retry = Some((core.clock.monotonic() + delay, delay));
    }

    /// Without a checkpoint thread: retries a failed checkpoint of the frozen layer if
    /// its time has come.
    fn retry_due_checkpoint(&mut self, core: &Core) {
        let Some((at, _)) = self.retry else {
            return;
        };
        if core.clock.monotonic() < at {
            return;
        }
        // A failure is recorded and the next retry scheduled.
        let _ = self.retry_frozen(core);
    }

    /// Checkpoints the frozen layer on this thread (one attempt).
    fn retry_frozen(&mut self, core: &Core) -> Result<(), WireError> {
        let frozen = core.layers().frozen.clone();
        let Some(gen) = frozen else {
            self.retry = None;
            return Ok(());
        };
        match checkpoint(core, &gen, self.frozen_seq) {
            Ok(()) => {
                self.retry = None;
                Ok(())
            }
            Err(e) => {
                self.schedule_retry(core);
                Err(e)
            }
        }
    }

    /// Back-pressure: `Some(error)` to refuse clients' mutations with, when the layers in
    /// memory or the log file are past their bounds and the checkpoint is failing. A
    /// checkpoint that is merely running is waited for (at most [`PRESSURE_WAIT`]).
    fn pressure(&mut self, core: &Core) -> Option<WireError> {
        let t: &Tuning = &core.tuning;
        let started = std::time::Instant::now();
        loop {
            let (keys, frozen) = {
                let l = core.layers();
                let frozen = l.frozen.as_ref().map(|f| f.len());
                (l.active.len() + frozen.unwrap_or(0), frozen.is_some())
            };
            if keys < t.max_overlay_keys && self.wal.offset() < t.max_overlay_log_bytes {
                return None;
            }
            if let Some(e) = core.checkpoint_failure() {
                let code = if e.code == ErrorCode::NoSpace {
                    ErrorCode::NoSpace
                } else {
                    ErrorCode::Io
                };
                return Some(WireError::new(
                    code,
                    format!(
                        "metadata server: {keys} changes wait for a checkpoint, which fails \
                         ({e}); changes are refused until it succeeds"
                    ),
                ));
            }
            if !frozen {
                // Over the bound with nothing being checkpointed: start one now.
                self.start_checkpoint(core);
                continue;
            }
            if core.halted.load(Ordering::SeqCst) || started.elapsed() >= PRESSURE_WAIT {
                return Some(WireError::new(
                    ErrorCode::Busy,
                    format!("metadata server: {keys} changes wait for a slow checkpoint"),
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Moves the active layer to `frozen` and continues the log in the other file.
    /// Only when no checkpoint is running: the other file's records are all in redb.
    fn freeze(&mut self, core: &Core) -> Arc<Gen> {
        // The carry goes into the file it belongs to first. If it cannot (a full disk,
        // or a failed write, which halts the server), it is frozen with the layer and
        // reaches the tables with its checkpoint, or is lost as in a crash, which its
        // rule allows.
        // Under the side lock, so that no early job joins the carry between its write
        // and the freeze.
        let mut side = lock(&core.writer.side);
        if self.write_carry_locked(core, &mut side).is_err() {
            if let Some((_, ops)) = side.take(core) {
                core.committed_ops.fetch_add(ops, Ordering::Relaxed);
            }
        }
        let mut l = core.layers.write().unwrap_or_else(|p| p.into_inner());
        assert!(l.frozen.is_none(), "freeze while a checkpoint runs");
        let gen = Arc::new(std::mem::take(&mut l.active));
        l.frozen = Some(gen.clone());
        self.wal.switch();
        self.frozen_seq = self.wal.last_seq();
        self.last_freeze = core.clock.monotonic();
        gen
    }

    /// Checkpoints everything acknowledged so far, on this thread: waits for a running
    /// checkpoint, then checkpoints the active layer. Fails at once, without waiting,
    /// while checkpoints fail.
    fn checkpoint_now(&mut self, core: &Core) -> Result<(), WireError> {
        loop {
            let l = core.layers();
            if l.frozen.is_none() {
                if l.active.is_empty() {
                    return Ok(());
                }
                break;
            }
            drop(l);
            if core.halted.load(Ordering::SeqCst) {
                return Err(WireError::new(
                    ErrorCode::Busy,
                    "metadata server is stopping",
                ));
            }
            if self.ckpt.is_none() {
                self.retry_frozen(core)?;
                continue;
            }
            if let Some(e) = core.checkpoint_failure() {
                return Err(e);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let gen = self.freeze(core);
        let seq = self.frozen_seq;
        checkpoint(core, &gen, seq).inspect_err(|_| match &self.ckpt {
            // The thread retries it from now on.
            Some((tx, _)) => {
                let _ = tx.send((gen.clone(), seq));
            }
            None => self.schedule_retry(core),
        })
    }

    /// At a stop: one attempt to write the frozen and active layers into redb.
    fn final_checkpoint(&mut self, core: &Core) {
        let mut all = {
            let l = core.layers();
            if l.frozen.is_none() && l.active.is_empty() {
                return;
            }
            l.frozen.as_deref().cloned().unwrap_or_default()
        };
        all.absorb(core.layers().active.clone());
        let done = commit_gen(&core.db(), &all, self.wal.last_seq());
        match done {
            Ok(()) => {
                let mut l = core.layers.write().unwrap_or_else(|p| p.into_inner());
                l.frozen = None;
                l.active = Gen::default();
                core.checkpoints.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => tracing::warn!(
                "stopping without a final checkpoint ({e}): the metadata log keeps {} \
                 changes, which the next start replays",
                all.len()
            ),
        }
    }
}

/// One attempt to write `gen` (log records up to `seq`), the frozen layer, into redb;
/// on success drops the frozen layer. The outcome is recorded for back-pressure.
fn checkpoint(core: &Core, gen: &Gen, seq: u64) -> Result<(), WireError> {
    let done = commit_gen(&core.db(), gen, seq);
    match done {
        Ok(()) => {
            let mut l = core.layers.write().unwrap_or_else(|p| p.into_inner());
            assert!(
                l.frozen.as_deref().is_some_and(|f| std::ptr::eq(f, gen)),
                "the checkpointed layer is the frozen one"
            );
            l.frozen = None;
            drop(l);
            core.set_checkpoint_failure(None);
            core.checkpoints.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        Err(e) => {
            tracing::error!("checkpoint up to log record {seq} failed (will retry): {e}");
            core.set_checkpoint_failure(Some(e.clone()));
            // redb refuses everything after an I/O error, reads included, until the
            // database is opened again; the layers in memory keep what it lost.
            if let Err(r) = core.reopen_db() {
                tracing::error!("reopening the metadata database after a failed checkpoint: {r}");
            }
            Err(e)
        }
    }
}

/// [`checkpoint`], retried with doubling delays until it succeeds or the server halts
/// or stops: the log keeps everything meanwhile.
fn checkpoint_retrying(core: &Core, gen: &Gen, seq: u64) {
    let mut delay = CHECKPOINT_RETRY_MIN;
    while checkpoint(core, gen, seq).is_err() {
        if core.halted.load(Ordering::SeqCst) || core.stopping.load(Ordering::SeqCst) {
            return;
        }
        core.wait_stop(delay);
        delay = (delay * 2).min(CHECKPOINT_RETRY_MAX);
    }
}

fn apply(core: &Core, w: &mut Wr, job: &Job) -> (Answer, bool) {
    let root = Cred::root();
    let (cred, client_host) = match job {
        Job::Client { cred, host, .. } => (cred, host.as_deref()),
        _ => (&root, None),
    };
    let mut ctx = Ctx {
        w,
        cred,
        now_ns: core.clock.now_ns(),
        placement: &core.placement,
        client_host,
        opens: &core.opens,
        moving: &core.moving,
        purged: false,
    };
    let answer = match job {
        Job::Client { req, .. } => ops::apply(&mut ctx, req),
        Job::Reap(ino) => remove::reap(&mut ctx, *ino).map(|_| Response::Done),
        Job::PurgeDone(inos) => purge_done(&mut ctx, inos),
        Job::Checkpoint | Job::Sync => Ok(Response::Done),
        Job::BeginMove(ino) => crate::inline::begin_move(&mut ctx, *ino),
        Job::EndMove { ino, gen } => crate::inline::end_move(&mut ctx, *ino, *gen),
    };
    (answer, ctx.purged)
}

fn purge_done(ctx: &mut Ctx, inos: &[u64]) -> Answer {
    for &ino in inos {
        ctx.w.del_purge(ino)?;
    }
    Ok(Response::Done)
}
