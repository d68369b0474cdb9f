//! Time, behind a trait so that tests fix it and a simulator runs the server in virtual
//! time: the wall clock stamps inodes; the monotonic clock times the server's own
//! schedules (the checkpoint timer, purge retries, checkpoint retries).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub trait Clock: Send + Sync + 'static {
    /// Nanoseconds since the Unix epoch.
    fn now_ns(&self) -> i64;
    /// Time since a fixed point, never going back. By default the process's real
    /// monotonic time, so that a clock fixing only inode times (as tests do) leaves the
    /// server's schedules on real time.
    fn monotonic(&self) -> Duration {
        real_monotonic()
    }
}

/// Real time since the first call in this process.
fn real_monotonic() -> Duration {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed()
}

/// The system clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ns(&self) -> i64 {
        match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
            // A clock set before 1970 is a misconfiguration; negative times are legal.
            Err(e) => -i64::try_from(e.duration().as_nanos()).unwrap_or(i64::MAX),
        }
    }
}

/// A clock that says what it is told, for tests: inode times are fixed, the server's
/// schedules run on real time.
pub struct FixedClock(AtomicI64);

impl FixedClock {
    pub fn new(ns: i64) -> FixedClock {
        FixedClock(AtomicI64::new(ns))
    }

    pub fn set(&self, ns: i64) {
        self.0.store(ns, Ordering::SeqCst);
    }
}

impl Clock for FixedClock {
    fn now_ns(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Virtual time for a simulator: both clocks move only when told, together.
pub struct SimClock {
    start_ns: i64,
    elapsed_ns: AtomicI64,
}

impl SimClock {
    /// A clock whose wall time starts at `start_ns`.
    pub fn new(start_ns: i64) -> SimClock {
        SimClock {
            start_ns,
            elapsed_ns: AtomicI64::new(0),
        }
    }

    /// Moves time forward by `d`.
    pub fn advance(&self, d: Duration) {
        let ns = i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        self.elapsed_ns.fetch_add(ns, Ordering::SeqCst);
    }
}

impl Clock for SimClock {
    fn now_ns(&self) -> i64 {
        self.start_ns
            .saturating_add(self.elapsed_ns.load(Ordering::SeqCst))
    }

    fn monotonic(&self) -> Duration {
        Duration::from_nanos(self.elapsed_ns.load(Ordering::SeqCst).max(0) as u64)
    }
}
