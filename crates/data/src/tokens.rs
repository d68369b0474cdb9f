//! Scoped tokens on a data server: a connection authenticated with a token may touch
//! only the files its metadata server says the token reached inside its tree, and may
//! write only if the token is not read-only. The data server asks the metadata server
//! (`TokenAllows`, on a connection made with the cluster secret) and keeps each answer
//! for [`ANSWER_TTL`], so a revoked token loses access here within that time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use stripefs_rpc::tls::TlsClient;
use stripefs_rpc::token::Token;
use stripefs_rpc::{Conn, Secret};
use stripefs_wire::{Cred, ErrorCode, InodeId, Request, WireError};

/// How long an answer of the metadata server is trusted.
pub const ANSWER_TTL: Duration = Duration::from_secs(5);
/// Most answers kept; past it the cache starts again.
const MAX_ANSWERS: usize = 1 << 16;

pub struct TokenChecker {
    meta_addr: String,
    secret: Secret,
    timeout: Duration,
    /// TLS to the metadata server, when the cluster file has `tls_ca`.
    tls: Option<TlsClient>,
    conn: Mutex<Option<Conn>>,
    /// (token id, fid, write) -> when the metadata server allowed it.
    allowed: Mutex<HashMap<(u64, u64, bool), Instant>>,
}

impl TokenChecker {
    pub fn new(
        meta_addr: String,
        secret: Secret,
        timeout: Duration,
        tls: Option<TlsClient>,
    ) -> TokenChecker {
        TokenChecker {
            meta_addr,
            secret,
            timeout,
            tls,
            conn: Mutex::new(None),
            allowed: Mutex::default(),
        }
    }

    /// Whether token `t` may touch file `fid` (for writing if `write`).
    pub fn check(&self, t: &Token, fid: InodeId, write: bool) -> Result<(), WireError> {
        let key = (t.id, fid.0, write);
        {
            let mut a = self.allowed.lock().unwrap_or_else(|p| p.into_inner());
            match a.get(&key) {
                Some(at) if at.elapsed() < ANSWER_TTL => return Ok(()),
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
        a.insert(key, Instant::now());
        Ok(())
    }

    fn ask(&self, t: &Token, fid: InodeId, write: bool) -> Result<(), WireError> {
        let mut slot = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if slot.as_ref().map_or(true, |c| c.is_broken()) {
            *slot = Some(
                Conn::connect_with(
                    &self.meta_addr,
                    &self.secret,
                    None,
                    self.timeout,
                    self.tls.as_ref(),
                )
                .map_err(|e| {
                    WireError::new(
                        ErrorCode::Unreachable,
                        format!("cannot check the token with the metadata server: {e}"),
                    )
                })?,
            );
        }
        let conn = slot.as_mut().expect("connected above");
        let req = Request::TokenAllows {
            token: t.payload(),
            fid,
            write,
        };
        conn.call(&Cred::root(), req, &[], &mut []).map(|_| ())
    }
}
