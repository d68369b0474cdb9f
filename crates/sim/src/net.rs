//! The simulated network: every client request goes through the wire encoding, then to
//! the server's `Service` in this process, under message faults decided by the seed and
//! the request itself (so that they do not depend on thread timing): dropped requests,
//! dropped answers, duplicates, delays, reordering, partitions and slow disks.

use crate::cluster::Servers;
use crate::rng::{hash_bytes, mix};
use crate::Stats;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use stripefs_client::Transport;
use stripefs_rpc::ConnInfo;
use stripefs_wire::{
    decode_request, decode_response, encode_request, encode_response, Cred, Envelope, ErrorCode,
    Header, Request, Response, ServerId, WireError, HEADER_LEN,
};

/// A message fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsgFault {
    /// The request never arrives.
    DropRequest,
    /// The server does the work; its answer never arrives.
    DropReply,
    /// The request arrives twice.
    Duplicate,
    /// The request arrives late (simulated time passes).
    Delay,
    /// A request nobody waits for (Close) arrives after the sender's next request to the
    /// same server.
    Reorder,
    /// The disk is so slow that the client gives up (the work is done).
    SlowDisk,
}

impl MsgFault {
    /// The name in reports and `--without`.
    pub fn name(self) -> &'static str {
        match self {
            MsgFault::DropRequest => "drop_request",
            MsgFault::DropReply => "drop_reply",
            MsgFault::Duplicate => "duplicate",
            MsgFault::Delay => "delay",
            MsgFault::Reorder => "reorder",
            MsgFault::SlowDisk => "slow_disk",
        }
    }
}

/// Per-mille chance that a request nobody waits for is overtaken.
const REORDER_PER_MILLE: u64 = 100;

/// Per-mille chances of each message fault (requests to data servers get all of them;
/// the metadata server's disk is not slowed).
const FAULTS: &[(MsgFault, u64)] = &[
    (MsgFault::DropRequest, 6),
    (MsgFault::DropReply, 6),
    (MsgFault::Duplicate, 6),
    (MsgFault::Delay, 6),
    (MsgFault::SlowDisk, 4),
];

#[derive(Default)]
struct State {
    /// How often each request key was seen: the fault decision of a request is a function
    /// of its key and this count.
    seen: HashMap<u64, u32>,
    /// (client, server) pairs cut apart; server `None` is the metadata server.
    partitions: HashSet<(u8, Option<u32>)>,
    /// No message faults (the checker's own reads).
    clean: bool,
    next_request_id: u64,
}

pub struct Net {
    pub servers: Arc<Servers>,
    seed: u64,
    state: Mutex<State>,
    pub stats: Arc<Stats>,
    /// Print every request (STRIPEFS_SIM_TRACE).
    pub(crate) trace: bool,
    /// Message fault kinds not injected.
    without: Vec<String>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Net {
    pub fn new(
        servers: Arc<Servers>,
        seed: u64,
        stats: Arc<Stats>,
        without: Vec<String>,
    ) -> Arc<Net> {
        Arc::new(Net {
            servers,
            seed,
            state: Mutex::new(State::default()),
            stats,
            trace: std::env::var_os("STRIPEFS_SIM_TRACE").is_some(),
            without,
        })
    }

    /// Turns message faults off (`true`) or back on.
    pub fn set_clean(&self, clean: bool) {
        lock(&self.state).clean = clean;
    }

    pub fn partition(&self, client: u8, server: Option<u32>) {
        lock(&self.state).partitions.insert((client, server));
    }

    pub fn heal(&self) {
        lock(&self.state).partitions.clear();
    }

    /// Whether `client` and `server` are cut apart now.
    pub(crate) fn cut(&self, client: u8, server: Option<ServerId>) -> bool {
        let st = lock(&self.state);
        !st.clean && st.partitions.contains(&(client, server.map(|s| s.0)))
    }

    pub(crate) fn seed(&self) -> u64 {
        self.seed
    }

    /// Fault kind `kind` is injected now (not left out, and not a clean phase).
    pub(crate) fn injects(&self, kind: &str) -> bool {
        !lock(&self.state).clean && !self.without.iter().any(|w| w == kind)
    }

    /// The transport of client `client`.
    pub fn endpoint(self: &Arc<Net>, client: u8) -> Arc<Endpoint> {
        Arc::new(Endpoint {
            net: self.clone(),
            client,
            late: Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn decide(
        &self,
        client: u8,
        server: Option<ServerId>,
        req: &Request,
        deferred: bool,
    ) -> Option<MsgFault> {
        let mut st = lock(&self.state);
        if st.clean || matches!(req, Request::Ping {}) {
            return None;
        }
        // The key: who, to whom, and what (without session ids, which are random).
        let text = strip_sessions(&format!("{client} {server:?} {req:?}"));
        let key = hash_bytes(self.seed, text.as_bytes());
        let n = st.seen.entry(key).or_insert(0);
        *n += 1;
        let mut roll = mix(key ^ u64::from(*n).wrapping_mul(0x9E37_79B9)) % 1000;
        if deferred {
            // Only a request nobody waits for can be overtaken by later ones.
            let f = MsgFault::Reorder;
            return (roll < REORDER_PER_MILLE && !self.without.iter().any(|w| w == f.name()))
                .then_some(f);
        }
        for &(fault, per_mille) in FAULTS {
            if server.is_none() && fault == MsgFault::SlowDisk {
                continue;
            }
            if roll < per_mille {
                return (!self.without.iter().any(|w| w == fault.name())).then_some(fault);
            }
            roll -= per_mille;
        }
        None
    }

    fn deliver(
        &self,
        server: Option<ServerId>,
        cred: &Cred,
        req: Request,
        data: &[u8],
    ) -> Result<(Response, Vec<u8>), WireError> {
        let Some(svc) = self.servers.service(server) else {
            return Err(unreachable(server, "server down"));
        };
        let id = {
            let mut st = lock(&self.state);
            st.next_request_id += 1;
            st.next_request_id
        };
        // Through the wire encoding and the checks a server makes, as over TCP.
        let env = Envelope {
            cred: cred.clone(),
            req,
        };
        let frame = encode_request(id, &env, data.len() as u32);
        let header = Header::decode(&frame[..HEADER_LEN]).map_err(bad_frame)?;
        let env = decode_request(&header, &frame[HEADER_LEN..]).map_err(bad_frame)?;
        let opcode = env.req.opcode();
        let req = stripefs_wire::Valid::check(env, data.len() as u32)?;
        let conn = ConnInfo::new("127.0.0.1:1".parse().expect("a socket address"));
        let reply = svc.handle(&conn, req, data);
        let bytes = reply.data.into_bytes().map_err(|e| {
            WireError::io("reading a reply's data from its files (simulated send)", &e)
        })?;
        let frame = encode_response(id, opcode, &reply.result, bytes.len() as u32);
        let header = Header::decode(&frame[..HEADER_LEN]).map_err(bad_frame)?;
        let result = decode_response(&header, &frame[HEADER_LEN..]).map_err(bad_frame)?;
        result.map(|r| (r, bytes))
    }
}

/// Session ids are random per client and times come from the client's clock: leave
/// them out of fault keys (fields `session` and `*_ns`).
fn strip_sessions(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(": ") {
        let name_start = rest[..i]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |j| j + 1);
        let name = &rest[name_start..i];
        out.push_str(&rest[..i + 2]);
        rest = &rest[i + 2..];
        if name == "session" || name.ends_with("_ns") {
            let digits = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '-'))
                .unwrap_or(rest.len());
            rest = &rest[digits..];
        }
    }
    out.push_str(rest);
    out
}

fn bad_frame(e: stripefs_wire::FrameError) -> WireError {
    WireError::new(ErrorCode::BadFrame, format!("simulated network: {e}"))
}

fn unreachable(server: Option<ServerId>, why: &str) -> WireError {
    let name = match server {
        Some(s) => format!("data server {}", s.0),
        None => "metadata server".to_string(),
    };
    WireError::new(ErrorCode::Unreachable, format!("{name}: {why} (simulated)"))
}

/// A request held back to arrive late.
type Late = (Option<ServerId>, Cred, Request);

/// One client's end of the network.
pub struct Endpoint {
    net: Arc<Net>,
    client: u8,
    /// Requests overtaken by later ones (the Reorder fault), delivered after this
    /// client's next request to their server, or at [`Endpoint::flush`].
    late: Mutex<Vec<Late>>,
}

impl Endpoint {
    /// Delivers every late request now (the simulator does it between steps).
    pub fn flush(&self) {
        let late = std::mem::take(&mut *lock(&self.late));
        for (server, cred, req) in late {
            let _ = self.net.deliver(server, &cred, req, &[]);
        }
    }

    /// Delivers the late requests to `server`.
    fn flush_to(&self, server: Option<ServerId>) {
        let mut due = Vec::new();
        lock(&self.late).retain(|l| {
            if l.0 == server {
                due.push(l.clone());
                false
            } else {
                true
            }
        });
        for (server, cred, req) in due {
            let _ = self.net.deliver(server, &cred, req, &[]);
        }
    }
}

impl Transport for Endpoint {
    fn same_host(&self, server: ServerId) -> Option<Arc<dyn stripefs_rpc::samehost::LocalDial>> {
        let on = self.net.without.iter().all(|w| w != "same_host")
            && crate::samehost::same_host(self.net.seed, self.client, server);
        on.then(|| {
            Arc::new(crate::samehost::SimDial {
                net: self.net.clone(),
                client: self.client,
                server,
            }) as Arc<dyn stripefs_rpc::samehost::LocalDial>
        })
    }

    fn renews_in_background(&self) -> bool {
        // Sessions outlive every run (30 s leases against well under a second of
        // simulated time); a renewal thread on real time would only add requests at
        // moments that depend on the machine's load.
        false
    }

    fn io_workers(&self) -> Option<usize> {
        // One I/O thread: a client's requests go out in the order it made them, so a
        // seed's run repeats exactly.
        Some(1)
    }

    fn send(&self, server: Option<ServerId>, cred: &Cred, req: Request) -> Result<(), WireError> {
        let net = &self.net;
        let cut = {
            let st = lock(&net.state);
            !st.clean && st.partitions.contains(&(self.client, server.map(|s| s.0)))
        };
        if cut {
            net.stats.count_msg("partition");
            return Ok(());
        }
        if net.decide(self.client, server, &req, true) == Some(MsgFault::Reorder) {
            net.stats.count_msg(MsgFault::Reorder.name());
            if net.trace {
                eprintln!("  client {} -> {server:?}: {req:?} [late]", self.client);
            }
            lock(&self.late).push((server, cred.clone(), req));
            return Ok(());
        }
        if net.trace {
            eprintln!(
                "  client {} -> {server:?}: {req:?} [no answer]",
                self.client
            );
        }
        let _ = net.deliver(server, cred, req, &[]);
        self.flush_to(server);
        Ok(())
    }

    fn call(
        &self,
        server: Option<ServerId>,
        cred: &Cred,
        req: Request,
        data: &[u8],
        recv: &mut [u8],
    ) -> Result<(Response, usize), WireError> {
        let net = &self.net;
        let cut = {
            let st = lock(&net.state);
            !st.clean && st.partitions.contains(&(self.client, server.map(|s| s.0)))
        };
        if cut {
            net.stats.count_msg("partition");
            if net.trace {
                eprintln!(
                    "  client {} -> {server:?}: {req:?} [partitioned]",
                    self.client
                );
            }
            return Err(unreachable(server, "partitioned"));
        }
        let fault = net.decide(self.client, server, &req, false);
        if net.trace {
            eprintln!(
                "  client {} -> {server:?}: {req:?} [{fault:?}]",
                self.client
            );
        }
        if let Some(f) = fault {
            net.stats.count_msg(f.name());
        }
        let out = match fault {
            Some(MsgFault::DropRequest) => return Err(unreachable(server, "request lost")),
            Some(MsgFault::Delay) => {
                net.servers.advance(Duration::from_millis(200));
                net.deliver(server, cred, req, data)
            }
            Some(MsgFault::Duplicate) => {
                let first = net.deliver(server, cred, req.clone(), data);
                let _ = net.deliver(server, cred, req, data);
                first
            }
            Some(MsgFault::DropReply)
            | Some(MsgFault::SlowDisk)
            | Some(MsgFault::Reorder)
            | None => net.deliver(server, cred, req, data),
        };
        self.flush_to(server);
        match fault {
            Some(MsgFault::DropReply) => {
                return Err(WireError::new(
                    ErrorCode::Timeout,
                    "the answer was lost (simulated)",
                ))
            }
            Some(MsgFault::SlowDisk) => {
                return Err(WireError::new(
                    ErrorCode::Timeout,
                    "the server's disk was too slow (simulated)",
                ))
            }
            _ => {}
        }
        if net.trace {
            if let Err(e) = &out {
                eprintln!("    -> error {e}");
            }
        }
        let (resp, bytes) = out?;
        if bytes.len() > recv.len() {
            return Err(WireError::new(
                ErrorCode::UnexpectedMessage,
                format!(
                    "sent {} bytes of data where {} were expected",
                    bytes.len(),
                    recv.len()
                ),
            ));
        }
        recv[..bytes.len()].copy_from_slice(&bytes);
        Ok((resp, bytes.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::strip_sessions;

    #[test]
    fn session_ids_are_left_out_of_keys() {
        assert_eq!(
            strip_sessions("Open { ino: 5, session: 1234567, x: 1 }"),
            "Open { ino: 5, session: , x: 1 }"
        );
        assert_eq!(strip_sessions("no ids"), "no ids");
        assert_eq!(strip_sessions("session: 9"), "session: ");
        assert_eq!(
            strip_sessions("ExtendSize { ino: 4, size: 9, mtime_ns: 1795450432338390880 }"),
            "ExtendSize { ino: 4, size: 9, mtime_ns:  }"
        );
    }
}
