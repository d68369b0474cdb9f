//! Block-range locks per object, so that a block's data and its stored CRC always change
//! together, while writers to disjoint blocks of one object run in parallel.
//!
//! The table is striped by object over [`LOCK_STRIPES`] mutexes; each stripe holds the
//! ranges currently locked in its objects. Waiting is on a condition variable per stripe.
//! Never sleep in the throttle while holding a range.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Number of independent stripes of the lock table.
pub const LOCK_STRIPES: usize = 64;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    Shared,
    Exclusive,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Held {
    fid: u64,
    target: u32,
    /// Blocks `[start, end)`.
    start: u64,
    end: u64,
    mode: Mode,
}

impl Held {
    fn conflicts(&self, other: &Held) -> bool {
        self.fid == other.fid
            && self.target == other.target
            && self.start < other.end
            && other.start < self.end
            && (self.mode == Mode::Exclusive || other.mode == Mode::Exclusive)
    }
}

struct Stripe {
    held: Mutex<Vec<Held>>,
    freed: Condvar,
    /// Threads waiting on `freed` (changed under `held`'s mutex): a release wakes
    /// anyone only when someone waits, so uncontended locking costs no wake-up calls.
    waiting: std::sync::atomic::AtomicUsize,
}

pub struct RangeLocks {
    stripes: Vec<Arc<Stripe>>,
}

/// A locked block range; unlocks on drop. It owns its share of the table, so that a
/// reply sent from the stored bytes (zero-copy) can keep the range until it is sent.
pub struct RangeGuard {
    stripe: Arc<Stripe>,
    held: Vec<Held>,
}

fn lock(m: &Mutex<Vec<Held>>) -> MutexGuard<'_, Vec<Held>> {
    // The list is only pushed to and removed from; a panicking holder leaves it valid.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl RangeLocks {
    pub fn new() -> RangeLocks {
        RangeLocks {
            stripes: (0..LOCK_STRIPES)
                .map(|_| {
                    Arc::new(Stripe {
                        held: Mutex::new(Vec::new()),
                        freed: Condvar::new(),
                        waiting: std::sync::atomic::AtomicUsize::new(0),
                    })
                })
                .collect(),
        }
    }

    /// Locks blocks `[start, end)` of object (`fid`, `target`), waiting for conflicting
    /// holders to finish.
    pub fn lock(&self, fid: u64, target: u32, start: u64, end: u64, mode: Mode) -> RangeGuard {
        self.lock_all(fid, target, &[(start, end, mode)])
    }

    /// Locks several disjoint block ranges of one object at once, each in its own mode
    /// (a write's partial first block shared, its whole blocks exclusive, ...): all of
    /// them, or none while any conflicts, so that no order among them can deadlock.
    pub fn lock_all(&self, fid: u64, target: u32, ranges: &[(u64, u64, Mode)]) -> RangeGuard {
        assert!(!ranges.is_empty());
        let hash = fid.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ target as u64;
        let stripe = &self.stripes[(hash >> 32) as usize % LOCK_STRIPES];
        let want: Vec<Held> = ranges
            .iter()
            .map(|&(start, end, mode)| {
                assert!(start < end, "empty block range {start}..{end}");
                Held {
                    fid,
                    target,
                    start,
                    end,
                    mode,
                }
            })
            .collect();
        let mut held = lock(&stripe.held);
        while held.iter().any(|h| want.iter().any(|w| h.conflicts(w))) {
            stripe.waiting.fetch_add(1, Ordering::Relaxed);
            held = stripe.freed.wait(held).unwrap_or_else(|p| p.into_inner());
            stripe.waiting.fetch_sub(1, Ordering::Relaxed);
        }
        held.extend_from_slice(&want);
        drop(held);
        RangeGuard {
            stripe: stripe.clone(),
            held: want,
        }
    }
}

impl Default for RangeLocks {
    fn default() -> RangeLocks {
        RangeLocks::new()
    }
}

impl Drop for RangeGuard {
    fn drop(&mut self) {
        let mut held = lock(&self.stripe.held);
        for mine in &self.held {
            let at = held.iter().position(|h| h == mine);
            assert!(at.is_some(), "released a range that was not held");
            if let Some(i) = at {
                held.swap_remove(i);
            }
        }
        // Read under the mutex: a waiter counts itself before it waits, under it too.
        let wake = self.stripe.waiting.load(Ordering::Relaxed) > 0;
        drop(held);
        if wake {
            self.stripe.freed.notify_all();
        }
    }
}
