//! Changes the metadata server answered before they were durable (a close's inline bytes
//! or size: WriteInlineUnsynced, ExtendSizeUnsynced), per inode, each with the session
//! it was answered under, as NFS keeps its unstable writes until a COMMIT.
//!
//! The server writes such a change with its next log record, within milliseconds; one
//! killed before that loses it. An fsync of the inode then sends SyncMeta naming the
//! session of its oldest such change: a server that did not start that session (it
//! restarted since) answers `ServerRestarted`, so the fsync fails rather than report the
//! lost bytes durable (test `fsync_after_a_metadata_restart_never_reports_lost_unsynced_bytes_durable`).
//! Entries leave when an fsync checked them, or when a SyncMeta the client sends itself
//! confirmed them: after each session renewal that finds entries of its session (so a
//! server that lived on never fails an fsync for long), and at once past
//! [`MAX_UNSYNCED`] entries; entries of an ended session past that bound are dropped
//! with a warning (their fsync then reports nothing).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use stripefs_wire::{Cred, InodeId, Layout};

/// Files whose data servers' boot identities are kept after their last handle closed.
pub(crate) const MAX_KEPT_BOOTS: usize = 65_536;

/// Per place of a layout, the boot identity its data server answered writes with.
type Boots = HashMap<u32, u64>;

/// How long a file's boot identities are kept after its last handle closed. A data
/// server's acknowledged writes are in its kernel's page cache, which writes them back
/// within about 30 s (Linux's `dirty_expire_centisecs`); keeping them longer would mostly
/// turn a restart long after the writes into a false alarm at the next write or fsync.
pub(crate) const KEEP_BOOTS_FOR: Duration = Duration::from_secs(60);

/// The data-server side of the same rule: a file's boot identities per place (the data
/// servers that answered its writes since its last fsync, `InodeIo::boots`) outlive its
/// last handle, so that an fsync through a handle opened later still fails if one of
/// those servers restarted in between (write, close, reopen, fsync). Kept while the
/// layout stays the same, for [`KEEP_BOOTS_FOR`] and at most [`MAX_KEPT_BOOTS`] files
/// (past it, the expired go, then arbitrary ones, whose later fsync cannot tell).
#[derive(Default)]
pub(crate) struct KeptBoots {
    inner: Mutex<HashMap<InodeId, Kept>>,
}

struct Kept {
    layout: Layout,
    boots: Boots,
    at: Instant,
}

impl KeptBoots {
    fn lock(&self) -> MutexGuard<'_, HashMap<InodeId, Kept>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps the boot identities of a file whose I/O state goes away.
    pub fn keep(&self, ino: InodeId, layout: &Layout, boots: Boots) {
        if boots.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut m = self.lock();
        if m.len() >= MAX_KEPT_BOOTS && !m.contains_key(&ino) {
            m.retain(|_, k| now.duration_since(k.at) < KEEP_BOOTS_FOR);
            if m.len() >= MAX_KEPT_BOOTS {
                if let Some(k) = m.keys().next().copied() {
                    m.remove(&k);
                }
            }
        }
        let kept = Kept {
            layout: layout.clone(),
            boots,
            at: now,
        };
        m.insert(ino, kept);
    }

    /// Takes back what was kept for `ino` under the same layout, if not expired.
    pub fn take(&self, ino: InodeId, layout: &Layout) -> Boots {
        self.take_at(ino, layout, Instant::now())
    }

    fn take_at(&self, ino: InodeId, layout: &Layout, now: Instant) -> Boots {
        match self.lock().remove(&ino) {
            Some(k) if &k.layout == layout && now.duration_since(k.at) < KEEP_BOOTS_FOR => k.boots,
            _ => HashMap::new(),
        }
    }
}

/// Entries kept before the client confirms them all with one SyncMeta.
pub(crate) const MAX_UNSYNCED: usize = 4096;

/// The session a change was answered under, and the order it was noted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mark {
    pub session: u64,
    pub seq: u64,
}

#[derive(Default)]
pub(crate) struct Unsynced {
    inner: Mutex<(HashMap<InodeId, Mark>, u64)>,
}

impl Unsynced {
    fn lock(&self) -> MutexGuard<'_, (HashMap<InodeId, Mark>, u64)> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes a change of `ino` answered under `session`; whether the entries are past
    /// [`MAX_UNSYNCED`]. An entry keeps the session of its oldest unconfirmed change (the
    /// one whose server must still be running) and the order of its newest (a SyncMeta
    /// confirms the entry only if sent after it).
    pub fn note(&self, ino: InodeId, session: u64) -> bool {
        let mut g = self.lock();
        g.1 += 1;
        let seq = g.1;
        g.0.entry(ino)
            .and_modify(|m| m.seq = seq)
            .or_insert(Mark { session, seq });
        g.0.len() > MAX_UNSYNCED
    }

    /// The oldest unconfirmed change of `ino`, if any.
    pub fn mark(&self, ino: InodeId) -> Option<Mark> {
        self.lock().0.get(&ino).copied()
    }

    /// The latest mark handed out (a SyncMeta sent after it covers every change up to it).
    pub fn now(&self, session: u64) -> Mark {
        Mark {
            session,
            seq: self.lock().1,
        }
    }

    /// `ino`'s entry was checked by a SyncMeta (confirmed, or its loss reported): it
    /// leaves unless a newer change replaced it meanwhile.
    pub fn checked(&self, ino: InodeId, mark: Mark) {
        let mut g = self.lock();
        if g.0.get(&ino) == Some(&mark) {
            g.0.remove(&ino);
        }
    }

    /// A SyncMeta naming `upto.session` succeeded: every entry of that session noted up
    /// to `upto.seq` is durable.
    pub fn confirmed(&self, upto: Mark) {
        self.lock()
            .0
            .retain(|_, m| m.session != upto.session || m.seq > upto.seq);
    }

    /// Drops the entries of sessions other than `current` while there are more than
    /// [`MAX_UNSYNCED`]; how many went.
    pub fn drop_ended(&self, current: u64) -> usize {
        let mut g = self.lock();
        if g.0.len() <= MAX_UNSYNCED {
            return 0;
        }
        let before = g.0.len();
        g.0.retain(|_, m| m.session == current);
        before - g.0.len()
    }

    /// Whether any entry was answered under `session`.
    pub fn any_of(&self, session: u64) -> bool {
        self.lock().0.values().any(|m| m.session == session)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().0.len()
    }
}

impl crate::Inner {
    /// Confirms with one SyncMeta every entry of the current session (see the module
    /// comment); drops ended sessions' entries past the bound.
    pub(crate) fn confirm_unsynced(&self) {
        let current = self.session.id();
        if self.unsynced.any_of(current) {
            let upto = self.unsynced.now(current);
            match self.meta_op(
                &Cred::root(),
                stripefs_wire::op::SyncMeta { session: current },
            ) {
                Ok(_) => self.unsynced.confirmed(upto),
                Err(e) => tracing::debug!("confirming changes answered unsynced: {e}"),
            }
        }
        let dropped = self.unsynced.drop_ended(current);
        if dropped > 0 {
            tracing::warn!(
                "{dropped} files changed before the metadata server restarted (or this \
                 client's session ended) may have lost their last close's bytes or size; \
                 their fsync will not report it"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_change_stays_until_checked_and_newer_ones_are_not_confirmed_early() {
        let u = Unsynced::default();
        let (a, b) = (InodeId(1), InodeId(2));
        assert!(!u.note(a, 7));
        let first = u.mark(a).unwrap();
        let upto = u.now(7);
        u.note(a, 9);
        assert_eq!(u.mark(a).unwrap().session, 7, "the oldest session stays");
        u.confirmed(upto);
        assert!(
            u.mark(a).is_some(),
            "a change after the SyncMeta: not confirmed"
        );
        u.checked(a, first);
        assert!(u.mark(a).is_some(), "a stale mark removes nothing");
        let upto = u.now(7);
        u.note(b, 7);
        u.confirmed(upto);
        assert_eq!(u.mark(a), None, "noted before the SyncMeta: confirmed");
        assert!(u.mark(b).is_some(), "noted after it: not confirmed");
        let mb = u.mark(b).unwrap();
        u.checked(b, mb);
        assert_eq!(u.mark(b), None);
    }

    #[test]
    fn boots_come_back_once_under_the_same_layout_within_their_time() {
        use stripefs_wire::ServerId;
        let kept = KeptBoots::default();
        let a = Layout {
            stripe_size_bytes: 1 << 20,
            servers: vec![ServerId(0), ServerId(1)],
        };
        let b = Layout {
            stripe_size_bytes: 1 << 20,
            servers: vec![ServerId(1)],
        };
        let boots: Boots = [(0, 11), (1, 12)].into_iter().collect();
        kept.keep(InodeId(5), &a, HashMap::new());
        assert!(kept.take(InodeId(5), &a).is_empty(), "nothing to keep");
        kept.keep(InodeId(5), &a, boots.clone());
        assert_eq!(kept.take(InodeId(5), &a), boots);
        assert!(kept.take(InodeId(5), &a).is_empty(), "taken once");
        kept.keep(InodeId(5), &a, boots.clone());
        assert!(kept.take(InodeId(5), &b).is_empty(), "another layout");
        kept.keep(InodeId(5), &a, boots.clone());
        let later = Instant::now() + KEEP_BOOTS_FOR;
        assert!(kept.take_at(InodeId(5), &a, later).is_empty(), "expired");
        for i in 0..=MAX_KEPT_BOOTS as u64 {
            kept.keep(InodeId(100 + i), &a, boots.clone());
        }
        assert_eq!(kept.lock().len(), MAX_KEPT_BOOTS, "bounded");
    }

    #[test]
    fn the_bound_asks_for_a_sync_and_ended_sessions_go_past_it() {
        let u = Unsynced::default();
        for i in 0..MAX_UNSYNCED as u64 {
            assert!(!u.note(InodeId(i), 1));
        }
        assert!(u.note(InodeId(u64::MAX), 2));
        assert_eq!(u.drop_ended(2), MAX_UNSYNCED);
        assert_eq!(u.len(), 1);
        assert_eq!(u.drop_ended(3), 0, "under the bound nothing is dropped");
    }
}
