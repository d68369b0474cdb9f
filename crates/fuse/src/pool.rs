//! The worker threads that serve kernel requests off the reading thread.
//!
//! A job that panics fails only its own request: the panic is caught and logged, the
//! worker goes on serving, and the request's reply, dropped while unwinding, answers the
//! kernel EIO (fuser replies EIO for a reply dropped unsent). The state workers share
//! is behind locks that are taken past poisoning, so nothing stays locked.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() + Send>;

/// The queue: jobs waiting for a worker, bounded; `closed` once the pool is dropped.
struct Queue {
    jobs: VecDeque<Job>,
    /// Submitters waiting for room, and workers waiting for a job: each side wakes the
    /// other only when someone waits (a condition variable's signal is a system call).
    held: usize,
    idle: usize,
    closed: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Signalled for each job queued (one idle worker wakes) and at closing (all do).
    work: Condvar,
    /// Signalled when a job leaves a full queue.
    room: Condvar,
    max: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A fixed set of worker threads and a bounded queue of jobs. A job queued wakes one
/// idle worker, which takes it: one wake-up per request. (Workers that took turns on a
/// channel's receiver behind a mutex cost a second one: the worker that received a job
/// woke the next to receive.)
pub struct Pool {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl Pool {
    /// `workers` threads sharing a queue of at most `queue` jobs; `submit` waits when the
    /// queue is full, which in turn holds back the kernel.
    pub fn new(workers: usize, queue: usize) -> Pool {
        assert!(workers > 0 && queue > 0);
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                jobs: VecDeque::with_capacity(queue),
                held: 0,
                idle: 0,
                closed: false,
            }),
            work: Condvar::new(),
            room: Condvar::new(),
            max: queue,
        });
        let threads = (0..workers)
            .map(|i| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("fuse-worker-{i}"))
                    .spawn(move || work(&shared))
                    .expect("spawning a FUSE worker thread")
            })
            .collect();
        Pool { shared, threads }
    }

    pub fn submit(&self, job: impl FnOnce() + Send + 'static) {
        let sh = &self.shared;
        let mut q = sh.lock();
        assert!(!q.closed, "pool is running");
        while q.jobs.len() >= sh.max {
            q.held += 1;
            q = sh.room.wait(q).unwrap_or_else(|p| p.into_inner());
            q.held -= 1;
        }
        q.jobs.push_back(Box::new(job));
        let wake = q.idle > 0;
        drop(q);
        if wake {
            sh.work.notify_one();
        }
    }
}

fn work(sh: &Shared) {
    loop {
        let job = {
            let mut q = sh.lock();
            loop {
                if let Some(job) = q.jobs.pop_front() {
                    if q.held > 0 {
                        sh.room.notify_one();
                    }
                    break job;
                }
                if q.closed {
                    return;
                }
                q.idle += 1;
                q = sh.work.wait(q).unwrap_or_else(|p| p.into_inner());
                q.idle -= 1;
            }
        };
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)) {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            tracing::error!("a FUSE request panicked and failed with EIO: {what}");
        }
    }
}

impl Drop for Pool {
    /// Lets the workers finish what is queued, then joins them.
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.work.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Panicking jobs, more than there are workers, leave every worker serving.
    #[test]
    fn a_panicking_job_fails_alone() {
        let pool = Pool::new(2, 4);
        let done = Arc::new(AtomicUsize::new(0));
        for i in 0..10 {
            let done = done.clone();
            pool.submit(move || {
                if i % 2 == 0 {
                    panic!("injected panic {i}");
                }
                done.fetch_add(1, Ordering::SeqCst);
            });
        }
        drop(pool);
        assert_eq!(done.load(Ordering::SeqCst), 5);
    }

    /// A queue bounded at 2 with one worker: submitters wait for room and every job
    /// runs once, in order, including those queued when the pool is dropped.
    #[test]
    fn a_full_queue_holds_submitters_back_and_loses_nothing() {
        let pool = Pool::new(1, 2);
        let order = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        {
            let gate = gate.clone();
            pool.submit(move || {
                let (m, cv) = &*gate;
                let mut open = m.lock().unwrap();
                while !*open {
                    open = cv.wait(open).unwrap();
                }
            });
        }
        let pool = Arc::new(pool);
        let submitter = {
            let (pool, order) = (pool.clone(), order.clone());
            std::thread::spawn(move || {
                for i in 0..50 {
                    let order = order.clone();
                    pool.submit(move || order.lock().unwrap().push(i));
                }
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        // The worker is held: at most 2 jobs are queued and the submitter waits.
        assert!(order.lock().unwrap().is_empty());
        assert!(!submitter.is_finished());
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
        submitter.join().unwrap();
        drop(Arc::try_unwrap(pool).ok().expect("the only handle"));
        assert_eq!(*order.lock().unwrap(), (0..50).collect::<Vec<_>>());
    }
}
