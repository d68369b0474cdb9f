//! The metadata server's calls to data servers (the purge thread's `Remove`s, and the
//! writes and fsyncs that move an inline file to its data servers), behind a trait so
//! that a simulator can route them to in-process data servers, drop or delay them.
//! [`TcpNet`] is the real network: one kept connection per data server.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use stripefs_rpc::{ClusterConfig, Conn};
use stripefs_wire::{Cred, ErrorCode, Request, Response, WireError};

/// The answers to a batch of requests: `Err` if the connection failed (none is known
/// to be done), else one result per request.
pub type Answers = Result<Vec<Result<Response, WireError>>, WireError>;

pub trait DataNet: Send + Sync + 'static {
    /// Sends `reqs` (at most [`stripefs_rpc::MAX_PENDING`]) to data server `server`,
    /// back to back, and returns their answers in order.
    fn call_many(&self, server: u32, cred: &Cred, reqs: Vec<Request>) -> Answers;

    /// Sends one request with bulk `data` (a Write of inline bytes moving to the data
    /// servers) and returns its answer.
    fn call_data(
        &self,
        server: u32,
        cred: &Cred,
        req: Request,
        data: &[u8],
    ) -> Result<Response, WireError> {
        let _ = (server, cred, data);
        Err(WireError::new(
            ErrorCode::Unsupported,
            format!("this network does not carry {}", req.opcode().name()),
        ))
    }
}

/// Data servers reached over TCP at the addresses of the cluster file.
pub struct TcpNet {
    cluster: ClusterConfig,
    /// Connections kept across calls; dropped when one fails.
    conns: Mutex<HashMap<u32, Conn>>,
}

impl TcpNet {
    pub fn new(cluster: &ClusterConfig) -> TcpNet {
        TcpNet {
            cluster: cluster.clone(),
            conns: Mutex::new(HashMap::new()),
        }
    }

    fn connect(&self, id: u32) -> Result<Conn, WireError> {
        let entry = self.cluster.data.get(id as usize).ok_or_else(|| {
            WireError::new(
                ErrorCode::InvalidArgument,
                format!("data server {id} is not in the cluster file"),
            )
        })?;
        let timeout = Duration::from_millis(self.cluster.timeout_ms.max(1));
        self.cluster.connect(&entry.addr, timeout)
    }
}

impl DataNet for TcpNet {
    fn call_many(&self, server: u32, cred: &Cred, reqs: Vec<Request>) -> Answers {
        let mut conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        let mut conn = match conns.remove(&server) {
            Some(c) => c,
            None => self.connect(server)?,
        };
        let answers = conn.call_many(cred, reqs)?;
        conns.insert(server, conn);
        Ok(answers)
    }

    fn call_data(
        &self,
        server: u32,
        cred: &Cred,
        req: Request,
        data: &[u8],
    ) -> Result<Response, WireError> {
        // Not under the lock while waiting: a connection is taken out and put back.
        let taken = self
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&server);
        let mut conn = match taken {
            Some(c) => c,
            None => self.connect(server)?,
        };
        let answer = conn.call(cred, req, data, &mut []);
        if !conn.is_broken() {
            self.conns
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(server, conn);
        }
        answer.map(|(r, _)| r)
    }
}
