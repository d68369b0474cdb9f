//! Time, behind a trait so that the throttle can be tested in virtual time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A monotonic clock that threads can sleep on.
pub trait Clock: Send + Sync + 'static {
    /// Time since the clock's own epoch.
    fn now(&self) -> Duration;
    /// Blocks until `now() >= deadline`. A deadline, not a duration, so that a virtual
    /// clock shared by many threads advances to the latest deadline, not to a sum.
    fn sleep_until(&self, deadline: Duration);
    /// Blocks for `d`.
    fn sleep(&self, d: Duration) {
        self.sleep_until(self.now() + d);
    }
}

/// The real monotonic clock.
#[derive(Debug)]
pub struct SystemClock {
    epoch: Instant,
}

impl SystemClock {
    pub fn new() -> SystemClock {
        SystemClock {
            epoch: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> SystemClock {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    fn sleep_until(&self, deadline: Duration) {
        let now = self.now();
        if deadline > now {
            std::thread::sleep(deadline - now);
        }
    }
}

/// Virtual time for tests: sleeping returns at once and moves the clock to the deadline
/// if it is later, so the clock ends at the latest deadline anyone waited for.
#[derive(Debug, Default)]
pub struct VirtualClock {
    now_ns: AtomicU64,
}

impl VirtualClock {
    pub fn new() -> VirtualClock {
        VirtualClock::default()
    }

    /// Moves time forward by `d`, as if the system had been idle.
    pub fn advance(&self, d: Duration) {
        self.now_ns.fetch_add(nanos(d), Ordering::SeqCst);
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.now_ns.load(Ordering::SeqCst))
    }

    fn sleep_until(&self, deadline: Duration) {
        self.now_ns.fetch_max(nanos(deadline), Ordering::SeqCst);
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
