//! Scoped tokens on a data server: a connection authenticated with a token may touch
//! only the files its metadata server says the token reached inside its tree, and may
//! write only if the token is not read-only. The data server asks the metadata server
//! (`TokenAllows`, on a connection made with the cluster secret) and keeps each answer
//! for [`ANSWER_TTL`], so a revoked token loses access here within that time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stripefs_rpc::token::Token;
use stripefs_rpc::{ClusterConfig, Conn};
use stripefs_sys::clock::Clock;
use stripefs_wire::{Cred, ErrorCode, InodeId, Request, WireError};

/// How long an answer of the metadata server is trusted.
pub const ANSWER_TTL: Duration = Duration::from_secs(5);
/// Idle connections to the metadata server kept for token checks.
const MAX_IDLE_CONNS: usize = 8;
/// Most answers kept; past it the cache starts again.
const MAX_ANSWERS: usize = 1 << 16;

pub struct TokenChecker {
    /// The cluster file: the metadata server's address, the secret, TLS, the timeout.
    cluster: ClusterConfig,
    /// Idle connections to the metadata server (at most [`MAX_IDLE_CONNS`]).
    conns: Mutex<Vec<Conn>>,
    /// (token id, fid, write) -> when the metadata server allowed it (the clock's
    /// monotonic time).
    allowed: Mutex<HashMap<(u64, u64, bool), Duration>>,
    clock: Arc<dyn Clock>,
}

impl TokenChecker {
    pub fn new(cluster: ClusterConfig, clock: Arc<dyn Clock>) -> TokenChecker {
        TokenChecker {
            cluster,
            conns: Mutex::new(Vec::new()),
            allowed: Mutex::default(),
            clock,
        }
    }

    /// Whether token `t` may touch file `fid` (for writing if `write`).
    pub fn check(&self, t: &Token, fid: InodeId, write: bool) -> Result<(), WireError> {
        let key = (t.id, fid.0, write);
        {
            let mut a = self.allowed.lock().unwrap_or_else(|p| p.into_inner());
            let now = self.clock.monotonic();
            match a.get(&key) {
                Some(&at) if now.saturating_sub(at) < ANSWER_TTL => return Ok(()),
                Some(_) => {
                    a.remove(&key);
                }
                None => {}
            }
        }
        self.ask(t, fid, write)?;
        let mut a = self.allowed.lock().unwrap_or_else(|p| p.into_inner());
        if a.len() >= MAX_ANSWERS {
            a.clear();
        }
        a.insert(key, self.clock.monotonic());
        Ok(())
    }

    fn ask(&self, t: &Token, fid: InodeId, write: bool) -> Result<(), WireError> {
        let req = Request::TokenAllows {
            token: t.payload(),
            fid,
            write,
        };
        // An idle connection to the metadata server, or a new one: token requests on
        // many connections ask at once, none waits for another's answer. One that the
        // server closed while idle (or that a restart left dead) is replaced once.
        let idle = self.conns.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let reused = idle.is_some();
        let mut conn = match idle {
            Some(c) => c,
            None => self.connect()?,
        };
        let mut r = conn.call(&Cred::root(), req.clone(), &[], &mut []);
        if reused && conn.is_broken() {
            conn = self.connect()?;
            r = conn.call(&Cred::root(), req, &[], &mut []);
        }
        if !conn.is_broken() {
            let mut idle = self.conns.lock().unwrap_or_else(|p| p.into_inner());
            if idle.len() < MAX_IDLE_CONNS {
                idle.push(conn);
            }
        }
        r.map(|_| ())
    }

    fn connect(&self) -> Result<Conn, WireError> {
        let timeout = Duration::from_millis(self.cluster.timeout_ms);
        self.cluster
            .connect(&self.cluster.meta_addr, timeout)
            .map_err(|e| {
                WireError::new(
                    ErrorCode::Unreachable,
                    format!("cannot check the token with the metadata server: {e}"),
                )
            })
    }
}
