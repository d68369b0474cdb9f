//! Time, behind one trait for every server and the simulator: the wall clock stamps inodes;
//! the monotonic clock times leases, sessions, token caches, the servers' own schedules and
//! the bandwidth throttles, which sleep on it. [`SystemClock`] is real time, [`FixedClock`]
//! fixes only the wall time (tests that compare inode times), [`VirtualClock`] is virtual
//! time for the simulator and for tests of timed rules: both clocks move only when told (or
//! when someone sleeps), together.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub trait Clock: Send + Sync + 'static {
    /// Wall time: nanoseconds since the Unix epoch.
    fn now_ns(&self) -> i64;
    /// Time since the clock's own epoch, never going back.
    fn monotonic(&self) -> Duration;
    /// Blocks until `monotonic() >= deadline`. A deadline, not a duration, so that a
    /// virtual clock shared by many threads advances to the latest deadline, not to a sum.
    fn sleep_until(&self, deadline: Duration);
    /// Blocks for `d`.
    fn sleep(&self, d: Duration) {
        self.sleep_until(self.monotonic().saturating_add(d));
    }
}

/// Real monotonic time since the first call in this process.
fn real_monotonic() -> Duration {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed()
}

fn real_sleep_until(deadline: Duration) {
    let now = real_monotonic();
    if deadline > now {
        std::thread::sleep(deadline - now);
    }
}

/// Nanoseconds since the Unix epoch of the system's wall clock.
fn real_now_ns() -> i64 {
    match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        // A clock set before 1970 is a misconfiguration; negative times are legal.
        Err(e) => -i64::try_from(e.duration().as_nanos()).unwrap_or(i64::MAX),
    }
}

/// The system's clocks.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ns(&self) -> i64 {
        real_now_ns()
    }

    fn monotonic(&self) -> Duration {
        real_monotonic()
    }

    fn sleep_until(&self, deadline: Duration) {
        real_sleep_until(deadline)
    }
}

/// A wall clock that says what it is told, for tests that compare inode times; the
/// monotonic clock (leases, schedules, sleeps) is real.
#[derive(Debug)]
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

    fn monotonic(&self) -> Duration {
        real_monotonic()
    }

    fn sleep_until(&self, deadline: Duration) {
        real_sleep_until(deadline)
    }
}

/// Virtual time: both clocks move only by [`VirtualClock::advance`] or by a sleep, which
/// returns at once and moves the clock to its deadline if that is later, so the clock ends
/// at the latest deadline anyone waited for.
#[derive(Debug, Default)]
pub struct VirtualClock {
    start_ns: i64,
    elapsed_ns: AtomicI64,
}

impl VirtualClock {
    /// A clock whose wall time starts at the Unix epoch.
    pub fn new() -> VirtualClock {
        VirtualClock::starting_at(0)
    }

    /// A clock whose wall time starts at `start_ns`.
    pub fn starting_at(start_ns: i64) -> VirtualClock {
        VirtualClock {
            start_ns,
            elapsed_ns: AtomicI64::new(0),
        }
    }

    /// Moves time forward by `d`, as if the system had been idle.
    pub fn advance(&self, d: Duration) {
        self.elapsed_ns.fetch_add(nanos(d), Ordering::SeqCst);
    }
}

impl Clock for VirtualClock {
    fn now_ns(&self) -> i64 {
        self.start_ns
            .saturating_add(self.elapsed_ns.load(Ordering::SeqCst))
    }

    fn monotonic(&self) -> Duration {
        Duration::from_nanos(self.elapsed_ns.load(Ordering::SeqCst).max(0) as u64)
    }

    fn sleep_until(&self, deadline: Duration) {
        self.elapsed_ns.fetch_max(nanos(deadline), Ordering::SeqCst);
    }
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_time_moves_only_when_told_and_sleeps_to_the_latest_deadline() {
        let c = VirtualClock::starting_at(1_000);
        assert_eq!(c.monotonic(), Duration::ZERO);
        assert_eq!(c.now_ns(), 1_000);
        c.advance(Duration::from_nanos(500));
        assert_eq!(c.monotonic(), Duration::from_nanos(500));
        assert_eq!(c.now_ns(), 1_500);
        c.sleep_until(Duration::from_secs(2));
        c.sleep_until(Duration::from_secs(1));
        assert_eq!(c.monotonic(), Duration::from_secs(2));
        c.sleep(Duration::from_secs(3));
        assert_eq!(c.monotonic(), Duration::from_secs(5));
        assert_eq!(c.now_ns(), 1_000 + 5_000_000_000);
    }

    #[test]
    fn fixed_clock_fixes_the_wall_time_only() {
        let c = FixedClock::new(42);
        let m0 = c.monotonic();
        c.sleep(Duration::from_millis(5));
        assert!(c.monotonic() >= m0 + Duration::from_millis(5));
        assert_eq!(c.now_ns(), 42);
        c.set(-7);
        assert_eq!(c.now_ns(), -7);
    }

    #[test]
    fn system_clock_is_near_the_wall_clock_and_monotonic() {
        let c = SystemClock;
        let a = c.monotonic();
        let b = c.monotonic();
        assert!(b >= a);
        let wall = real_now_ns();
        assert!((c.now_ns() - wall).abs() < 5_000_000_000);
    }
}
