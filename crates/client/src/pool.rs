//! A pool of authenticated connections to one server.
//!
//! Callers take an idle connection or open a new one (up to a named maximum), make one
//! call, and give it back. A connection that failed in transport is dropped, never reused.
//! A call on a *reused* connection that finds it closed by the server (for instance after
//! the server restarted) is retried once on a fresh connection when the request is
//! idempotent; timeouts are never retried, so a call is bounded by one timeout per
//! socket operation.
//!
//! Servers close connections idle for `limits::IDLE_TIMEOUT`. That never reaches the
//! caller: the pool drops connections idle for `limits::CLIENT_IDLE_MAX` (half of it)
//! before using them, and one the server has closed (seen without waiting, at checkout);
//! and should a request still cross the server's `ConnectionClosed` notice, the server
//! did not handle it, so it is sent again on a fresh connection whatever it is, with the
//! deferred requests that went with it.
//!
//! Requests nobody waits for (Close) are deferred: they go out with the next request on
//! their connection, so a create + close loop costs the server one wake-up per file,
//! or, when the connection stays idle, within [`DEFER_MAX`] by the pool's flusher
//! thread.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use stripefs_rpc::limits::CLIENT_IDLE_MAX;
use stripefs_rpc::{Conn, Secret};
use stripefs_wire::{Cred, ErrorCode, Request, Response, ServerId, WireError};

/// A pooled connection idle for less than this is used without first asking the kernel
/// whether the server closed it (servers close connections idle for far longer).
const PEEK_AFTER: Duration = Duration::from_millis(10);

/// Longest a deferred request waits on an idle connection before the flusher sends it.
pub const DEFER_MAX: Duration = Duration::from_millis(2);

struct State {
    /// Idle connections and when each was given back.
    idle: Vec<(Conn, Instant)>,
    /// Connections in existence: idle, lent out, or being opened.
    open: usize,
    /// An idle connection holds deferred requests.
    deferred: bool,
    /// The pool is being dropped: the flusher ends.
    closing: bool,
}

/// What the pool shares with its flusher thread.
struct Shared {
    state: Mutex<State>,
    returned: Condvar,
    /// Wakes the flusher (deferred requests, or closing).
    kick: Condvar,
}

pub(crate) struct ServerPool {
    /// `None` for the metadata server.
    pub id: Option<ServerId>,
    pub addr: String,
    secret: Secret,
    timeout: Duration,
    max_conns: usize,
    shared: Arc<Shared>,
    /// Started on the first deferred request.
    flusher: Mutex<Option<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ServerPool {
    pub fn new(
        id: Option<ServerId>,
        addr: &str,
        secret: &Secret,
        timeout: Duration,
        max_conns: usize,
    ) -> ServerPool {
        assert!(max_conns > 0);
        ServerPool {
            id,
            addr: addr.to_string(),
            secret: secret.clone(),
            timeout,
            max_conns,
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    idle: Vec::new(),
                    open: 0,
                    deferred: false,
                    closing: false,
                }),
                returned: Condvar::new(),
                kick: Condvar::new(),
            }),
            flusher: Mutex::new(None),
        }
    }

    /// How this server is named in error messages.
    pub fn name(&self) -> String {
        match self.id {
            Some(id) => format!("data server {} ({})", id.0, self.addr),
            None => format!("metadata server {}", self.addr),
        }
    }

    /// One request and its response; see [`Conn::call`].
    pub fn call(
        &self,
        cred: &Cred,
        req: Request,
        data: &[u8],
        recv: &mut [u8],
    ) -> Result<(Response, usize), WireError> {
        let again = req.clone();
        let (mut conn, reused) = self.checkout()?;
        let r = conn.call(cred, req, data, recv);
        let stale =
            reused && conn.is_broken() && matches!(&r, Err(e) if e.code == ErrorCode::Unreachable);
        // The server closed the connection before handling the request: safe to resend.
        let unhandled = matches!(&r, Err(e) if e.code == ErrorCode::ConnectionClosed);
        let carried = if unhandled {
            conn.take_unhandled()
        } else {
            Vec::new()
        };
        self.checkin(conn);
        if unhandled || (stale && idempotent(&again)) {
            let mut conn = self.connect_new()?;
            conn.requeue(carried);
            let r = conn.call(cred, again, data, recv);
            self.checkin(conn);
            return r;
        }
        r
    }

    /// Sends a request that gets no answer, deferred: with the next request on the same
    /// connection, or within [`DEFER_MAX`]; see [`Conn::defer`].
    pub fn send_deferred(&self, cred: &Cred, req: Request) -> Result<(), WireError> {
        self.start_flusher()?;
        let (mut conn, _) = self.checkout()?;
        let r = conn.defer(cred, req);
        self.checkin(conn);
        r
    }

    fn start_flusher(&self) -> Result<(), WireError> {
        let mut f = lock(&self.flusher);
        if f.is_none() {
            let shared = self.shared.clone();
            let thread = std::thread::Builder::new()
                .name("stripefs-flush".into())
                .spawn(move || flusher(&shared))
                .map_err(|e| {
                    WireError::new(
                        ErrorCode::Internal,
                        format!("cannot start a flusher thread: {e}"),
                    )
                })?;
            *f = Some(thread);
        }
        Ok(())
    }

    /// Connects once, outside the pool, to check that the server answers.
    pub fn probe(&self) -> Result<(), WireError> {
        let conn = self.checkout()?.0;
        self.checkin(conn);
        Ok(())
    }

    fn checkout(&self) -> Result<(Conn, bool), WireError> {
        let mut st = lock(&self.shared.state);
        let mut carried = Vec::new();
        loop {
            if let Some((mut c, since)) = st.idle.pop() {
                let idle = since.elapsed();
                // A connection given back moments ago cannot have been closed for being
                // idle: skip the system call on the hot path of back-to-back calls.
                if idle < CLIENT_IDLE_MAX && (idle < PEEK_AFTER || !c.closed_by_peer()) {
                    c.requeue(carried);
                    return Ok((c, true));
                }
                // Closed by the server, or about to be: never used again. Requests it
                // still holds go with the next connection.
                carried.extend(c.take_unhandled());
                st.open -= 1;
                drop(c);
                continue;
            }
            if st.open < self.max_conns {
                st.open += 1;
                break;
            }
            st = self
                .shared
                .returned
                .wait(st)
                .unwrap_or_else(|p| p.into_inner());
        }
        drop(st);
        match Conn::connect(&self.addr, &self.secret, self.timeout) {
            Ok(mut c) => {
                c.requeue(carried);
                Ok((c, false))
            }
            Err(e) => {
                lock(&self.shared.state).open -= 1;
                self.shared.returned.notify_one();
                Err(e)
            }
        }
    }

    /// A fresh connection for a retry; counted against the pool like any other.
    fn connect_new(&self) -> Result<Conn, WireError> {
        let mut st = lock(&self.shared.state);
        // Drop idle connections: if one was stale after a server restart, all are.
        let stale = std::mem::take(&mut st.idle);
        st.open -= stale.len();
        // Their deferred requests are written as they drop (best effort, as before).
        drop(st);
        drop(stale);
        self.shared.returned.notify_all();
        let (c, _) = self.checkout()?;
        Ok(c)
    }

    fn checkin(&self, conn: Conn) {
        let mut st = lock(&self.shared.state);
        if conn.is_broken() {
            st.open -= 1;
        } else {
            if conn.has_deferred() && !st.deferred {
                st.deferred = true;
                self.shared.kick.notify_one();
            }
            st.idle.push((conn, Instant::now()));
        }
        drop(st);
        self.shared.returned.notify_one();
    }
}

impl Drop for ServerPool {
    /// Ends the flusher; idle connections write their deferred requests as they close.
    fn drop(&mut self) {
        lock(&self.shared.state).closing = true;
        self.shared.kick.notify_all();
        if let Some(t) = lock(&self.flusher).take() {
            let _ = t.join();
        }
    }
}

/// Sends the deferred requests of idle connections [`DEFER_MAX`] after they were
/// deferred (a connection used meanwhile has sent them with its request).
fn flusher(shared: &Shared) {
    loop {
        let mut st = lock(&shared.state);
        while !st.deferred && !st.closing {
            st = shared.kick.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        if st.closing {
            return;
        }
        drop(st);
        std::thread::sleep(DEFER_MAX);
        let mut st = lock(&shared.state);
        st.deferred = false;
        for (c, _) in st.idle.iter_mut() {
            if let Err(e) = c.flush() {
                tracing::warn!("{e}");
            }
        }
        let before = st.idle.len();
        st.idle.retain(|(c, _)| !c.is_broken());
        st.open -= before - st.idle.len();
    }
}

/// Requests that do the same thing when sent twice.
fn idempotent(req: &Request) -> bool {
    use Request::*;
    matches!(
        req,
        Ping {}
            | Lookup { .. }
            | GetAttr { .. }
            | Resolve { .. }
            | Readlink { .. }
            | ReadDir { .. }
            | MetaStatus {}
            | Access { .. }
            | Write { .. }
            | Read { .. }
            | Truncate { .. }
            | Remove { .. }
            | Fsync { .. }
            | DataStatus {}
            | ExtendSize { .. }
    )
}
