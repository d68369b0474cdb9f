//! This client's session with the metadata server.
//!
//! The server makes the session id at first contact (`SessionOpen`) and ends the
//! session when its lease runs out without a renewal, releasing its opens (so an
//! unlinked file held open by a client that vanished is purged within a lease). A
//! background thread renews the session [`LEASE_RENEWALS`] times per lease; a failed
//! renewal is retried sooner.
//!
//! The client keeps its own count of the opens it made (`opens`), which is what it
//! reclaims when it learns that its session ended while it still lived (a renewal that
//! came too late after a long pause or partition, or a restart of the metadata
//! server): it opens a new session, opens every inode it has open again under it, and
//! goes on. An inode that cannot be opened again (an unlinked file purged in between)
//! is *lost*: every later call on its handles fails with `StaleHandle`, saying why. So
//! the client never runs silently on opens the server released.
//!
//! Opens and closes hold the session's read lock across their request and their count
//! change, and re-establishing holds the write lock, so the reclaimed counts are
//! exactly those of the opens the old session had.

use crate::Inner;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, Weak};
use std::thread::JoinHandle;
use std::time::Duration;
use stripefs_rpc::limits::LEASE_RENEWALS;
use stripefs_wire::{op, Attr, Cred, ErrorCode, InodeId, Operation, WireError};

/// Attempts of one reclaiming Open that fails in transport.
const RECLAIM_TRIES: u32 = 3;

/// Errors that say nothing about the inode: the request or its answer was lost, or the
/// server was briefly unable.
fn transient(e: &WireError) -> bool {
    matches!(
        e.code,
        ErrorCode::Timeout | ErrorCode::Unreachable | ErrorCode::Busy | ErrorCode::ConnectionClosed
    )
}

/// Shortest wait between renewal attempts after a failure.
const RETRY_MIN: Duration = Duration::from_millis(20);

pub(crate) struct Session {
    /// The current session id; write-locked only while re-establishing.
    id: RwLock<u64>,
    /// Opens this client counts under the current session, per inode (ordered: a
    /// reclaim sends its Opens in inode order, the same on every run).
    opens: Mutex<BTreeMap<InodeId, u32>>,
    lease_ms: AtomicU64,
    stop: Arc<(Mutex<bool>, Condvar)>,
    renewer: Mutex<Option<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts a session on the metadata server: its id and lease.
fn session_open(inner_meta: &crate::pool::ServerPool) -> Result<(u64, u64), WireError> {
    let s = inner_meta.op(&Cred::root(), op::SessionOpen {})?;
    Ok((s.session, s.lease_ms.max(1)))
}

impl Session {
    /// Opens a session on the metadata server of `meta`.
    pub fn open(meta: &crate::pool::ServerPool) -> Result<Session, WireError> {
        let (id, lease_ms) = session_open(meta)?;
        Ok(Session {
            id: RwLock::new(id),
            opens: Mutex::new(BTreeMap::new()),
            lease_ms: AtomicU64::new(lease_ms),
            stop: Arc::new((Mutex::new(false), Condvar::new())),
            renewer: Mutex::new(None),
        })
    }

    pub fn id(&self) -> u64 {
        *self.id.read().unwrap_or_else(|p| p.into_inner())
    }

    fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms.load(Ordering::Relaxed))
    }

    /// Starts the renewal thread; it holds `inner` weakly and ends with it.
    pub fn start_renewer(inner: &Arc<Inner>) -> Result<(), WireError> {
        let weak = Arc::downgrade(inner);
        let stop = inner.session.stop.clone();
        let thread = std::thread::Builder::new()
            .name("stripefs-lease".into())
            .spawn(move || renewer(weak, &stop))
            .map_err(|e| {
                WireError::new(
                    ErrorCode::Internal,
                    format!("cannot start the session renewal thread: {e}"),
                )
            })?;
        *lock(&inner.session.renewer) = Some(thread);
        Ok(())
    }

    /// Stops the renewal thread (without waiting: it may be in a call) and ends the
    /// session on the server, releasing its opens at once. The request is not waited
    /// for: it goes out (after the Closes deferred before it) when the pool closes its
    /// connections; if it is lost, the lease ends the session.
    pub fn end(&self, meta: &crate::pool::ServerPool) {
        *lock(&self.stop.0) = true;
        self.stop.1.notify_all();
        let session = self.id();
        if let Err(e) = meta.send_deferred(&Cred::root(), op::SessionEnd { session }.into()) {
            tracing::info!("ending session {session:#x}: {e}; its lease will end it");
        }
    }
}

/// Renews every lease / [`LEASE_RENEWALS`]; after a failure, retries sooner.
fn renewer(inner: Weak<Inner>, stop: &(Mutex<bool>, Condvar)) {
    let mut wait = Duration::ZERO;
    loop {
        let stopped = lock(&stop.0);
        let (stopped, _) = stop
            .1
            .wait_timeout_while(stopped, wait, |s| !*s)
            .unwrap_or_else(|p| p.into_inner());
        if *stopped {
            return;
        }
        drop(stopped);
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let lease = inner.session.lease();
        wait = match inner.renew_session() {
            Ok(()) => {
                // The session's server still runs: what it answered unsynced is
                // durable by now (written within milliseconds).
                inner.confirm_unsynced();
                lease / LEASE_RENEWALS as u32
            }
            Err(e) => {
                tracing::warn!("renewing the session with {}: {e}", inner.meta.name());
                (lease / (4 * LEASE_RENEWALS as u32)).max(RETRY_MIN)
            }
        };
    }
}

impl Inner {
    /// One renewal; re-establishes the session if the server ended it.
    fn renew_session(&self) -> Result<(), WireError> {
        let session = self.session.id();
        match self.meta_op(&Cred::root(), op::SessionRenew { session }) {
            Ok(s) => {
                self.session
                    .lease_ms
                    .store(s.lease_ms.max(1), Ordering::Relaxed);
                Ok(())
            }
            Err(e) if e.code == ErrorCode::SessionExpired => self.reestablish(session),
            Err(e) => Err(e),
        }
    }

    /// One reclaiming Open, tried again after a transient failure (a lost answer, a
    /// timeout): a reclaim is not lost for a dropped message.
    fn reclaim(&self, req: op::Open) -> Result<(), WireError> {
        let mut tries = 0;
        loop {
            match self.meta_op(&Cred::root(), req.clone()) {
                Err(e) if transient(&e) && tries < RECLAIM_TRIES => tries += 1,
                r => return r.map(|_| ()),
            }
        }
    }

    /// After the server ended session `old`: opens a new session and opens again under
    /// it every inode this client has open. Inodes that cannot be opened again are
    /// marked lost on their handles. Does nothing if another thread did it already.
    fn reestablish(&self, old: u64) -> Result<(), WireError> {
        let mut id = self.session.id.write().unwrap_or_else(|p| p.into_inner());
        if *id != old {
            return Ok(());
        }
        let (new, lease_ms) = session_open(&self.meta)?;
        self.session.lease_ms.store(lease_ms, Ordering::Relaxed);
        let mut opens = lock(&self.session.opens);
        let mut lost = Vec::new();
        for (&ino, &n) in opens.iter() {
            for _ in 0..n {
                // Root and no access asked: the handles were checked when opened.
                let req = op::Open {
                    ino,
                    session: new,
                    read: false,
                    write: false,
                };
                match self.reclaim(req) {
                    Ok(()) => {}
                    // Gone for good (purged while the session was lapsed).
                    Err(e) if !transient(&e) => {
                        lost.push((ino, e));
                        break;
                    }
                    // The server or the way to it failed: nothing is known lost. The new
                    // session is abandoned (its lease releases what it holds) and the
                    // next call tries again from the start.
                    Err(e) => return Err(e),
                }
            }
        }
        for (ino, e) in &lost {
            opens.remove(ino);
            let why = WireError::new(
                ErrorCode::StaleHandle,
                format!(
                    "{ino} was released by {} while this client's session lease had run \
                     out (the client could not renew it in time, or the server \
                     restarted), and cannot be opened again ({e}): its handles are lost",
                    self.meta.name()
                ),
            );
            tracing::error!("{why}");
            if let Some(io) = self.live_io(*ino) {
                io.mark_lost(why);
            }
        }
        tracing::warn!(
            "session {old:#x} with {} had ended (lease of {lease_ms} ms ran out, or the \
             server restarted); continuing in session {new:#x} with {} inodes reopened, \
             {} lost",
            self.meta.name(),
            opens.len(),
            lost.len()
        );
        *id = new;
        Ok(())
    }

    /// Sends the open made by `make(session)` and counts it; if the server ended the
    /// session meanwhile, re-establishes it and tries once more.
    pub fn open_counted<O: Operation<Reply = Attr>>(
        &self,
        cred: &Cred,
        make: impl Fn(u64) -> O,
    ) -> Result<Attr, WireError> {
        for attempt in 0..2 {
            let id = self.session.id.read().unwrap_or_else(|p| p.into_inner());
            match self.meta_op(cred, make(*id)) {
                Ok(attr) => {
                    *lock(&self.session.opens).entry(attr.ino).or_default() += 1;
                    return Ok(attr);
                }
                Err(e) if e.code == ErrorCode::SessionExpired && attempt == 0 => {
                    let old = *id;
                    drop(id);
                    self.reestablish(old)?;
                }
                Err(e) => return Err(e),
            }
        }
        unreachable!("the second attempt returns")
    }

    /// Closes one open of `ino` in the current session: uncounted, and its Close
    /// deferred (see `pool.rs`). An inode lost with an ended session has nothing to
    /// close.
    pub fn close_counted(&self, cred: &Cred, ino: InodeId) -> Result<(), WireError> {
        let id = self.session.id.read().unwrap_or_else(|p| p.into_inner());
        {
            let mut opens = lock(&self.session.opens);
            match opens.get_mut(&ino) {
                Some(n) if *n > 1 => *n -= 1,
                Some(_) => {
                    opens.remove(&ino);
                }
                None => return Ok(()),
            }
        }
        self.meta
            .send_deferred(cred, op::Close { ino, session: *id }.into())
    }
}
