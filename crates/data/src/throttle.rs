//! Emulated commodity disks: a per-target rate limit on reads and writes.
//!
//! Each I/O of `n` bytes reserves the next `n / rate` seconds of the target's time,
//! starting when the previous reservation ends (or now, if the target is idle), and its
//! caller sleeps until its reservation ends. Reservations are taken in arrival order
//! under a mutex, so service is FIFO-fair, and the long-run rate is exact: the only slack
//! is [`THROTTLE_BURST_BYTES`] of credit an idle target may bank, so that small I/O is not
//! charged a full round trip of waiting.

use crate::Clock;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Credit an idle target accumulates, in bytes.
pub const THROTTLE_BURST_BYTES: u64 = 256 << 10;

/// A token bucket kept as virtual time: the instant the target is next free.
pub struct Throttle {
    rate_bytes_s: u64,
    burst: Duration,
    next_free: Mutex<Duration>,
    clock: Arc<dyn Clock>,
}

impl Throttle {
    pub fn new(rate_bytes_s: u64, clock: Arc<dyn Clock>) -> Throttle {
        assert!(rate_bytes_s > 0, "a throttle rate must be positive");
        Throttle {
            rate_bytes_s,
            burst: transfer_time(THROTTLE_BURST_BYTES, rate_bytes_s),
            next_free: Mutex::new(Duration::ZERO),
            clock,
        }
    }

    pub fn rate_bytes_s(&self) -> u64 {
        self.rate_bytes_s
    }

    /// Reserves the target for `bytes` and returns when the reservation ends. The caller
    /// must sleep until then (see [`Throttle::wait`]) without holding any lock.
    pub fn reserve(&self, bytes: u64) -> Duration {
        let now = self.clock.monotonic();
        // A poisoned mutex only means another thread panicked between two plain stores;
        // the value is still a valid instant.
        let mut next = self.next_free.lock().unwrap_or_else(|p| p.into_inner());
        let start = (*next).max(now.saturating_sub(self.burst));
        let end = start + transfer_time(bytes, self.rate_bytes_s);
        *next = end;
        end
    }

    /// Sleeps until `deadline`, typically the latest of several reservations.
    pub fn wait(&self, deadline: Duration) {
        self.clock.sleep_until(deadline);
    }

    /// Reserves and waits.
    pub fn acquire(&self, bytes: u64) {
        let end = self.reserve(bytes);
        self.wait(end);
    }
}

/// Bytes written to one object of an emulated disk after which its data is flushed to
/// the device in the background ([`FlushBehind`]).
pub const FLUSH_BEHIND_BYTES: u64 = 16 << 20;

/// Flush behind for emulated disks. A disk of the emulated rate holds little written
/// data that is not yet stable; the real device under an emulated one may hold a great
/// deal (a virtual machine's disk cache), which a client's fsync then flushes all at
/// once, at the end of a stream that the emulated rate had paced: measured on the test
/// machine, four streams paced at 60 MiB/s each waited 0.5-1.5 s in their final
/// `fdatasync` for 256 MiB each, and 0.01-0.07 s when each stream's data was flushed
/// every 16 MiB along the way. So every [`FLUSH_BEHIND_BYTES`] written to an object of a
/// throttled target, its data file is flushed (`fdatasync`) on a background thread.
/// The flushes make nothing durable that the server counts on: a client's fsync still
/// syncs as ever; they only take the device's backlog off the fsync's time.
#[derive(Default)]
pub struct FlushBehind {
    queue: Mutex<Option<std::sync::mpsc::Sender<Arc<dyn stripefs_sys::storage::ObjectFile>>>>,
}

impl FlushBehind {
    /// Counts `bytes` written to `obj`, and queues its flush when they reach the mark.
    pub fn wrote(&self, obj: &crate::cache::Object, bytes: u64) {
        use std::sync::atomic::Ordering;
        let before = obj.unflushed.fetch_add(bytes, Ordering::Relaxed);
        if before + bytes < FLUSH_BEHIND_BYTES {
            return;
        }
        obj.unflushed.store(0, Ordering::Relaxed);
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        if q.is_none() {
            let (tx, rx) = std::sync::mpsc::channel::<Arc<dyn stripefs_sys::storage::ObjectFile>>();
            let spawned = std::thread::Builder::new()
                .name("flush-behind".into())
                .spawn(move || {
                    // Ends when the server (the only sender) is dropped.
                    while let Ok(f) = rx.recv() {
                        if let Err(e) = f.sync_data() {
                            tracing::debug!("flush behind: {e}");
                        }
                    }
                });
            if spawned.is_err() {
                return;
            }
            *q = Some(tx);
        }
        if let Some(tx) = q.as_ref() {
            let _ = tx.send(obj.data.clone());
        }
    }
}

fn transfer_time(bytes: u64, rate_bytes_s: u64) -> Duration {
    let ns = bytes as u128 * 1_000_000_000 / rate_bytes_s as u128;
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}
