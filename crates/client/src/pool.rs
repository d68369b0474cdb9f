//! A pool of authenticated connections to one server.
//!
//! Callers take an idle connection or open a new one (up to a named maximum), make one
//! call, and give it back. A connection that failed in transport is dropped, never reused.
//! A call on a *reused* connection that finds it closed by the server (for instance after
//! the server restarted) is retried once on a fresh connection when the request is
//! idempotent; timeouts are never retried, so a call is bounded by one timeout per
//! socket operation.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;
use stripefs_rpc::{Conn, Secret};
use stripefs_wire::{Cred, ErrorCode, Request, Response, ServerId, WireError};

struct State {
    idle: Vec<Conn>,
    /// Connections in existence: idle, lent out, or being opened.
    open: usize,
}

pub(crate) struct ServerPool {
    /// `None` for the metadata server.
    pub id: Option<ServerId>,
    pub addr: String,
    secret: Secret,
    timeout: Duration,
    max_conns: usize,
    state: Mutex<State>,
    returned: Condvar,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
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
            state: Mutex::new(State {
                idle: Vec::new(),
                open: 0,
            }),
            returned: Condvar::new(),
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
        let retry = idempotent(&req).then(|| req.clone());
        let (mut conn, reused) = self.checkout()?;
        let r = conn.call(cred, req, data, recv);
        let stale =
            reused && conn.is_broken() && matches!(&r, Err(e) if e.code == ErrorCode::Unreachable);
        self.checkin(conn);
        match (r, retry) {
            (Err(_), Some(req)) if stale => {
                let mut conn = self.connect_new()?;
                let r = conn.call(cred, req, data, recv);
                self.checkin(conn);
                r
            }
            (r, _) => r,
        }
    }

    /// Sends a request without waiting for its answer; see [`Conn::send`].
    pub fn send(&self, cred: &Cred, req: Request) -> Result<(), WireError> {
        let (mut conn, _) = self.checkout()?;
        let r = conn.send(cred, req);
        self.checkin(conn);
        r
    }

    /// Connects once, outside the pool, to check that the server answers.
    pub fn probe(&self) -> Result<(), WireError> {
        let conn = self.checkout()?.0;
        self.checkin(conn);
        Ok(())
    }

    fn checkout(&self) -> Result<(Conn, bool), WireError> {
        let mut st = lock(&self.state);
        loop {
            if let Some(c) = st.idle.pop() {
                return Ok((c, true));
            }
            if st.open < self.max_conns {
                st.open += 1;
                break;
            }
            st = self.returned.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        drop(st);
        match Conn::connect(&self.addr, &self.secret, self.timeout) {
            Ok(c) => Ok((c, false)),
            Err(e) => {
                lock(&self.state).open -= 1;
                self.returned.notify_one();
                Err(e)
            }
        }
    }

    /// A fresh connection for a retry; counted against the pool like any other.
    fn connect_new(&self) -> Result<Conn, WireError> {
        let mut st = lock(&self.state);
        // Drop idle connections: if one was stale after a server restart, all are.
        let stale = std::mem::take(&mut st.idle);
        st.open -= stale.len();
        drop(st);
        drop(stale);
        self.returned.notify_all();
        let (c, _) = self.checkout()?;
        Ok(c)
    }

    fn checkin(&self, conn: Conn) {
        let mut st = lock(&self.state);
        if conn.is_broken() {
            st.open -= 1;
        } else {
            st.idle.push(conn);
        }
        drop(st);
        self.returned.notify_one();
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
