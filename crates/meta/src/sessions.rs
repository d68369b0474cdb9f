//! Client sessions with leases.
//!
//! A client opens a session at first contact (`SessionOpen`: the server makes the id),
//! counts its opens under it, and renews it well before its lease runs out. A session
//! whose lease runs out without a renewal ends: its opens are released as if closed,
//! so a client that vanished (killed, its machine or network lost) keeps no unlinked
//! file from being purged for longer than one lease. A request that names an ended or
//! unknown session (a lease that ran out, or a server restart: sessions are in memory)
//! gets `SessionExpired`, so a client never runs on opens the server released without
//! being told.
//!
//! The table lives beside the open counts, under the same lock (`opens.rs`): an open is
//! counted only in a live session, and a session ends and releases its opens in one
//! step, so no open can slip in between.
//!
//! Time is passed in (`now`, the server clock's monotonic time), so that the table is
//! tested without sleeping and a simulator can drive it.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;
use stripefs_rpc::limits::MAX_SESSIONS;
use stripefs_wire::{ErrorCode, WireError};

#[derive(Debug)]
pub struct Session {
    /// On the server clock's monotonic time.
    pub expires: Duration,
    /// Inodes this session has open (their counts are in the open table).
    pub inodes: HashSet<u64>,
}

pub struct Sessions {
    live: HashMap<u64, Session>,
    lease: Duration,
    /// Ids are `prefix` plus a counter: the prefix is random per server start, so an id
    /// of a session from before a restart is never handed out again.
    prefix: u64,
    counter: u64,
}

impl Sessions {
    pub fn new(lease: Duration) -> Sessions {
        assert!(!lease.is_zero());
        // A random 64-bit number from the standard library's hasher keys.
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        Sessions {
            live: HashMap::new(),
            lease,
            prefix: random & !0xffff_ffff,
            counter: 0,
        }
    }

    /// Whether session id `id` was made by this server since it started (live or
    /// ended since): the prefix is this start's.
    pub fn started_here(&self, id: u64) -> bool {
        id & !0xffff_ffff == self.prefix
    }

    pub fn lease(&self) -> Duration {
        self.lease
    }

    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// Starts a session; its lease runs from `now`.
    pub fn open(&mut self, now: Duration) -> Result<u64, WireError> {
        if self.live.len() >= MAX_SESSIONS {
            return Err(WireError::new(
                ErrorCode::Busy,
                format!("{MAX_SESSIONS} client sessions are open; try again later"),
            ));
        }
        self.counter += 1;
        let id = self.prefix | (self.counter & 0xffff_ffff);
        let session = Session {
            expires: now + self.lease,
            inodes: HashSet::new(),
        };
        assert!(
            self.live.insert(id, session).is_none(),
            "session ids are unique"
        );
        Ok(id)
    }

    /// The live session `id`, or `SessionExpired`. A session past its lease that the
    /// sweep has not ended yet counts as ended (the caller ends it with [`Sessions::end`]).
    pub fn get(&mut self, id: u64, now: Duration) -> Result<&mut Session, WireError> {
        match self.live.get_mut(&id) {
            Some(s) if s.expires > now => Ok(s),
            _ => Err(expired(id)),
        }
    }

    /// Extends the lease of `id` to `now` + lease.
    pub fn renew(&mut self, id: u64, now: Duration) -> Result<(), WireError> {
        let lease = self.lease;
        self.get(id, now)?.expires = now + lease;
        Ok(())
    }

    /// Removes session `id` and returns it (its inodes are released by the caller).
    pub fn end(&mut self, id: u64) -> Option<Session> {
        self.live.remove(&id)
    }

    /// Ids of the sessions whose lease ran out by `now`.
    pub fn overdue(&self, now: Duration) -> Vec<u64> {
        self.live
            .iter()
            .filter(|(_, s)| s.expires <= now)
            .map(|(&id, _)| id)
            .collect()
    }
}

pub fn expired(id: u64) -> WireError {
    WireError::new(
        ErrorCode::SessionExpired,
        format!(
            "session {id:#x} is not open on this metadata server: its lease ran out \
             (no renewal in time) or the server restarted; its opens were released"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_runs_out_unless_renewed() {
        let t0 = Duration::from_secs(7);
        let lease = Duration::from_millis(100);
        let mut s = Sessions::new(lease);
        let a = s.open(t0).unwrap();
        let b = s.open(t0).unwrap();
        assert_ne!(a, b);
        assert!(s.get(a, t0 + lease / 2).is_ok());
        s.renew(a, t0 + lease / 2).unwrap();
        // b ran out at t0 + lease; a was renewed to t0 + 1.5 lease.
        let t1 = t0 + lease + Duration::from_millis(1);
        assert_eq!(s.overdue(t1), vec![b]);
        assert_eq!(s.get(b, t1).unwrap_err().code, ErrorCode::SessionExpired);
        assert_eq!(s.renew(b, t1).unwrap_err().code, ErrorCode::SessionExpired);
        assert!(s.get(a, t1).is_ok());
        assert!(s.end(b).is_some());
        assert!(s.end(b).is_none());
        assert_eq!(s.get(0, t0).unwrap_err().code, ErrorCode::SessionExpired);
    }

    #[test]
    fn ids_differ_across_restarts() {
        let now = Duration::from_secs(7);
        let a = Sessions::new(Duration::from_secs(1)).open(now).unwrap();
        let b = Sessions::new(Duration::from_secs(1)).open(now).unwrap();
        assert_ne!(
            a, b,
            "a restarted server must not hand out an old session's id"
        );
    }
}
