//! The client-wide I/O worker pool.
//!
//! Jobs are tagged with the data server they talk to. A worker takes the oldest job whose
//! server has fewer than its streams (connections, [`MAX_CONNS_PER_SERVER`] unless the
//! cluster file says `streams`) jobs running, so a slow or hung server
//! can hold at most that many workers and requests to the other servers keep flowing.
//! Workers are started on demand up to [`IO_WORKERS`] and stop when the client is dropped.
//! A job's result travels through a [`Promise`] / [`Completion`] pair; a job that panics
//! (a bug) still completes, with an `Internal` error, so no caller waits forever.

#[cfg(test)]
use crate::{IO_WORKERS, MAX_CONNS_PER_SERVER};
use crate::{MAX_QUEUED_JOBS, WORKER_STACK_BYTES};
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use stripefs_wire::{ErrorCode, WireError};

type Outcome<T> = Result<T, WireError>;

struct Slot<T> {
    value: Mutex<Option<Outcome<T>>>,
    cv: Condvar,
    /// Set once `value` holds the result: a look without the lock (write-behind looks at
    /// every pending write of a handle at each write it takes).
    ready: AtomicBool,
}

/// The receiving end of one job's result. Cheap to clone; every clone sees the result.
pub(crate) struct Completion<T>(Arc<Slot<T>>);

impl<T> Clone for Completion<T> {
    fn clone(&self) -> Self {
        Completion(self.0.clone())
    }
}

/// The sending end: fulfilled once. Dropped unfulfilled, it reports an internal error.
pub(crate) struct Promise<T: Clone>(Option<Arc<Slot<T>>>);

pub(crate) fn promise<T: Clone>() -> (Promise<T>, Completion<T>) {
    let slot = Arc::new(Slot {
        value: Mutex::new(None),
        cv: Condvar::new(),
        ready: AtomicBool::new(false),
    });
    (Promise(Some(slot.clone())), Completion(slot))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking job never holds these locks across user code, so poison carries no
    // broken invariant; keep going rather than cascade the panic.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<T: Clone> Promise<T> {
    pub fn fulfil(mut self, value: Outcome<T>) {
        if let Some(slot) = self.0.take() {
            *lock(&slot.value) = Some(value);
            slot.ready.store(true, Ordering::Release);
            slot.cv.notify_all();
        }
    }
}

impl<T: Clone> Drop for Promise<T> {
    fn drop(&mut self) {
        if let Some(slot) = self.0.take() {
            let err = WireError::new(ErrorCode::Internal, "client I/O job ended without a result");
            *lock(&slot.value) = Some(Err(err));
            slot.ready.store(true, Ordering::Release);
            slot.cv.notify_all();
        }
    }
}

impl<T: Clone> Completion<T> {
    /// Blocks until the job has finished. Jobs bound their own time (connection
    /// timeouts), so this wait is bounded too.
    pub fn wait(&self) -> Outcome<T> {
        let mut v = lock(&self.0.value);
        loop {
            if let Some(r) = v.as_ref() {
                return r.clone();
            }
            v = self.0.cv.wait(v).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The result if the job has finished.
    pub fn try_get(&self) -> Option<Outcome<T>> {
        if !self.0.ready.load(Ordering::Acquire) {
            return None;
        }
        lock(&self.0.value).clone()
    }
}

type JobFn = Box<dyn FnOnce() + Send + 'static>;

struct Job {
    server: usize,
    run: JobFn,
}

struct State {
    /// Most jobs running for one server (its connections).
    per_server: usize,
    queue: VecDeque<Job>,
    /// Jobs running per server.
    busy: Vec<usize>,
    threads: usize,
    idle: usize,
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    work: Condvar,
    space: Condvar,
    /// Signalled when a job ends.
    done: Condvar,
}

/// The pool. Dropping it lets the workers finish queued jobs and exit.
pub(crate) struct Executor {
    shared: Arc<Shared>,
    /// Most worker threads.
    max_workers: usize,
}

impl Executor {
    #[cfg(test)]
    pub fn new(servers: usize) -> Executor {
        Executor::with_workers(servers, IO_WORKERS, MAX_CONNS_PER_SERVER)
    }

    /// A pool of at most `max_workers` threads (one makes the order of all I/O the
    /// order it was submitted in: the simulator's runs repeat exactly).
    pub fn with_workers(servers: usize, max_workers: usize, per_server: usize) -> Executor {
        assert!(max_workers > 0 && per_server > 0);
        Executor {
            max_workers,
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    per_server,
                    queue: VecDeque::new(),
                    busy: vec![0; servers],
                    threads: 0,
                    idle: 0,
                    stop: false,
                }),
                work: Condvar::new(),
                space: Condvar::new(),
                done: Condvar::new(),
            }),
        }
    }

    /// Queues `run` for data server `server`; blocks while [`MAX_QUEUED_JOBS`] are queued.
    pub fn submit(&self, server: usize, run: impl FnOnce() + Send + 'static) {
        let mut st = lock(&self.shared.state);
        assert!(server < st.busy.len(), "job for unknown server {server}");
        while st.queue.len() >= MAX_QUEUED_JOBS {
            st = self
                .shared
                .space
                .wait(st)
                .unwrap_or_else(|p| p.into_inner());
        }
        st.queue.push_back(Job {
            server,
            run: Box::new(run),
        });
        if st.queue.len() > st.idle && st.threads < self.max_workers && self.spawn() {
            st.threads += 1;
        }
        drop(st);
        self.shared.work.notify_one();
    }

    /// Blocks until no job is queued or running.
    pub fn wait_idle(&self) {
        let mut st = lock(&self.shared.state);
        while !st.queue.is_empty() || st.busy.iter().any(|&b| b > 0) {
            st = self.shared.done.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn spawn(&self) -> bool {
        let shared = self.shared.clone();
        let r = std::thread::Builder::new()
            .name("stripefs-io".into())
            .stack_size(WORKER_STACK_BYTES)
            .spawn(move || worker(&shared));
        if let Err(e) = &r {
            // Running with the workers we have is still correct, only slower.
            tracing::warn!("cannot start an I/O worker thread: {e}");
        }
        r.is_ok()
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        lock(&self.shared.state).stop = true;
        self.shared.work.notify_all();
    }
}

fn next_job(shared: &Shared) -> Option<Job> {
    let mut st = lock(&shared.state);
    loop {
        let (busy, per_server) = (&st.busy, st.per_server);
        let pick = st.queue.iter().position(|j| busy[j.server] < per_server);
        if let Some(i) = pick {
            let job = st.queue.remove(i).expect("position is in the queue");
            st.busy[job.server] += 1;
            drop(st);
            shared.space.notify_one();
            return Some(job);
        }
        if st.stop && st.queue.is_empty() {
            st.threads -= 1;
            return None;
        }
        st.idle += 1;
        st = shared.work.wait(st).unwrap_or_else(|p| p.into_inner());
        st.idle -= 1;
    }
}

fn worker(shared: &Shared) {
    while let Some(job) = next_job(shared) {
        // The job's Promise reports a panic to its waiter when dropped during unwinding.
        let _ = catch_unwind(AssertUnwindSafe(job.run));
        let mut st = lock(&shared.state);
        st.busy[job.server] -= 1;
        let waiting = st.queue.iter().any(|j| j.server == job.server);
        // Only `wait_idle` waits on `done`, and only for the pool to empty: a wake-up
        // (a system call) per job on the I/O path would be wasted.
        let idle = st.queue.is_empty() && st.busy.iter().all(|&b| b == 0);
        drop(st);
        if idle {
            shared.done.notify_all();
        }
        if waiting {
            // This worker takes one of them next; others may have become runnable for
            // idle workers too, since our server now has a free slot.
            shared.work.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn runs_jobs_and_reports_panics() {
        let ex = Executor::new(2);
        let count = Arc::new(AtomicUsize::new(0));
        let mut done = Vec::new();
        for i in 0..200 {
            let (p, c) = promise::<usize>();
            let count = count.clone();
            ex.submit(i % 2, move || {
                count.fetch_add(1, Ordering::Relaxed);
                p.fulfil(Ok(i));
            });
            done.push(c);
        }
        for (i, c) in done.iter().enumerate() {
            assert_eq!(c.wait().unwrap(), i);
        }
        assert_eq!(count.load(Ordering::Relaxed), 200);
        let (p, c) = promise::<()>();
        ex.submit(0, move || {
            let _keep = p;
            panic!("test panic in a job");
        });
        assert_eq!(c.wait().unwrap_err().code, ErrorCode::Internal);
    }

    #[test]
    fn a_stuck_server_does_not_block_others() {
        let ex = Executor::new(2);
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        for _ in 0..MAX_CONNS_PER_SERVER * 2 {
            let gate = gate.clone();
            ex.submit(0, move || {
                let mut open = gate.0.lock().unwrap();
                while !*open {
                    open = gate.1.wait(open).unwrap();
                }
            });
        }
        let (p, c) = promise::<u8>();
        ex.submit(1, move || p.fulfil(Ok(7)));
        assert_eq!(c.wait().unwrap(), 7);
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
    }
}
