//! The worker threads that serve kernel requests off the reading thread.
//!
//! A job that panics fails only its own request: the panic is caught and logged, the
//! worker goes on serving, and the request's reply, dropped while unwinding, answers the
//! kernel EIO (fuser replies EIO for a reply dropped unsent). The state workers share
//! is behind locks that are taken past poisoning, so nothing stays locked.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() + Send>;

pub struct Pool {
    tx: Option<SyncSender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl Pool {
    /// `workers` threads sharing a queue of at most `queue` jobs; `submit` waits when the
    /// queue is full, which in turn holds back the kernel.
    pub fn new(workers: usize, queue: usize) -> Pool {
        assert!(workers > 0 && queue > 0);
        let (tx, rx) = sync_channel::<Job>(queue);
        let rx = Arc::new(Mutex::new(rx));
        let threads = (0..workers)
            .map(|i| {
                let rx = rx.clone();
                std::thread::Builder::new()
                    .name(format!("fuse-worker-{i}"))
                    .spawn(move || work(&rx))
                    .expect("spawning a FUSE worker thread")
            })
            .collect();
        Pool {
            tx: Some(tx),
            threads,
        }
    }

    pub fn submit(&self, job: impl FnOnce() + Send + 'static) {
        let tx = self.tx.as_ref().expect("pool is running");
        // Workers only stop after `tx` is dropped, so the send cannot fail.
        tx.send(Box::new(job)).expect("FUSE workers are running");
    }
}

fn work(rx: &Mutex<Receiver<Job>>) {
    loop {
        let job = {
            let rx = rx.lock().unwrap_or_else(|p| p.into_inner());
            rx.recv()
        };
        match job {
            Ok(job) => {
                if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)) {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "a panic".into());
                    tracing::error!("a FUSE request panicked and failed with EIO: {what}");
                }
            }
            Err(_) => return,
        }
    }
}

impl Drop for Pool {
    /// Lets the workers finish what is queued, then joins them.
    fn drop(&mut self) {
        self.tx.take();
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
}
