//! The same-host transport in the simulator: a client on a data server's host reaches the
//! server's same-host endpoint in this process, through the same frames, checks and
//! server code (`stripefs_data::LocalSession`) as over the real Unix socket, with the
//! server's in-memory files handed over where the socket passes descriptors and an
//! in-memory pipe where it passes a kernel pipe. So short-circuit reads, pipe writes,
//! write lists and direct writes run under the simulator's faults: lost requests and
//! answers end the connection (a stream socket neither duplicates nor reorders), a
//! restarted server's old connections fail, partitions refuse new ones, and bytes in a
//! pipe may arrive damaged (`pipe_damage`), which the server must catch.

use crate::net::Net;
use crate::rng::{hash_bytes, mix};
use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use stripefs_data::{After, DataService, LocalSession};
use stripefs_rpc::samehost::{Attached, Liveness, LocalDial, LocalLink, PipeIn, PipeOut};
use stripefs_wire::{
    decode_request, decode_response, encode_request, encode_response, Cred, Envelope, ErrorCode,
    Header, Request, Response, Route, ServerId, Valid, WireError, HEADER_LEN, MAX_LOCAL_MESSAGE,
};

/// Bytes an in-memory pipe holds (as a kernel pipe grown to 1 MiB).
const PIPE_BYTES: usize = 1 << 20;

/// Per-mille chance that bytes put into a pipe arrive with one bit flipped.
const PIPE_DAMAGE_PER_MILLE: u64 = 20;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether client `client` runs on data server `server`'s host in the run of `seed`:
/// half the pairs, so that the same-host and the TCP paths both run.
pub fn same_host(seed: u64, client: u8, server: ServerId) -> bool {
    mix(seed ^ 0x5a17_0000 ^ (u64::from(client) << 40) ^ u64::from(server.0)) & 1 == 0
}

/// Client `client`'s way to data server `server`'s same-host endpoint.
pub struct SimDial {
    pub net: Arc<Net>,
    pub client: u8,
    pub server: ServerId,
}

impl LocalDial for SimDial {
    fn dial(&self) -> io::Result<Box<dyn LocalLink>> {
        if self.net.cut(self.client, Some(self.server)) {
            self.net.stats.count_msg("partition");
            return Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                "partitioned (simulated)",
            ));
        }
        let svc = self.net.servers.data_service(self.server).ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, "no such data server (simulated)")
        })?;
        Ok(Box::new(SimLink {
            net: self.net.clone(),
            client: self.client,
            server: self.server,
            svc: svc.clone(),
            session: Some(LocalSession::new(svc)),
            next_id: 1,
            puts: 0,
        }))
    }

    fn describe(&self) -> String {
        format!("sim-data-{}.sock", self.server.0)
    }
}

/// One connection: the server's session lives as long as the connection does.
struct SimLink {
    net: Arc<Net>,
    client: u8,
    server: ServerId,
    /// The server incarnation the connection was made to.
    svc: Arc<DataService>,
    /// `None` once the connection ended.
    session: Option<LocalSession>,
    next_id: u64,
    /// Pipes made on this connection (part of the pipe damage key).
    puts: u64,
}

fn broken(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, format!("{why} (simulated)"))
}

impl SimLink {
    /// Ends the connection: the server sees its end (and abandons a grant).
    fn end(&mut self) {
        self.session = None;
    }

    /// The request through the frame encoding and the checks the socket's server makes.
    fn receive(&self, id: u64, req: Request) -> io::Result<Result<Valid, WireError>> {
        let env = Envelope {
            cred: Cred::root(),
            req,
        };
        let frame = encode_request(id, &env, 0);
        if frame.len() > MAX_LOCAL_MESSAGE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a {} of {} bytes does not fit one short-circuit message",
                    env.req.opcode().name(),
                    frame.len()
                ),
            ));
        }
        let bad = |e: stripefs_wire::FrameError| {
            io::Error::new(io::ErrorKind::InvalidData, e.to_string())
        };
        let header = Header::decode(&frame[..HEADER_LEN]).map_err(bad)?;
        let env = decode_request(&header, &frame[HEADER_LEN..]).map_err(bad)?;
        Ok(Valid::check(env, 0))
    }

    /// The answer through the frame encoding and the checks the socket's client makes.
    fn answer(
        &self,
        id: u64,
        opcode: stripefs_wire::Opcode,
        result: &Result<Response, WireError>,
    ) -> io::Result<Result<Response, WireError>> {
        let mut frame = encode_response(id, opcode, result, 0);
        if frame.len() > MAX_LOCAL_MESSAGE {
            let e = WireError::new(
                ErrorCode::Internal,
                format!("an answer to {} too large for one message", opcode.name()),
            );
            frame = encode_response(id, opcode, &Err(e), 0);
        }
        let bad = |e: stripefs_wire::FrameError| {
            io::Error::new(io::ErrorKind::InvalidData, e.to_string())
        };
        let header = Header::decode(&frame[..HEADER_LEN]).map_err(bad)?;
        let got = decode_response(&header, &frame[HEADER_LEN..]).map_err(bad)?;
        if let Ok(r) = &got {
            if !opcode.answers(r.kind()) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("short-circuit answer {:?} to {}", r.kind(), opcode.name()),
                ));
            }
        }
        Ok(got)
    }
}

impl LocalLink for SimLink {
    fn call(
        &mut self,
        req: Request,
        attach: Attached,
    ) -> io::Result<(Result<Response, WireError>, Attached)> {
        if self.session.is_none() {
            return Err(broken("the connection ended"));
        }
        self.net.stats.count_msg("same_host");
        let current = self.net.servers.data_service(self.server);
        if !current.is_some_and(|c| Arc::ptr_eq(&c, &self.svc)) {
            // The process that served this connection is gone.
            self.end();
            return Err(broken("the data server restarted"));
        }
        if self.net.cut(self.client, Some(self.server)) {
            self.net.stats.count_msg("partition");
            self.end();
            return Err(broken("partitioned"));
        }
        let fault = self.net.decide(self.client, Some(self.server), &req, false);
        let fault = fault.filter(|f| {
            !matches!(
                f,
                crate::net::MsgFault::Duplicate | crate::net::MsgFault::Reorder
            )
        });
        if let Some(f) = fault {
            self.net.stats.count_msg(f.name());
        }
        if self.net.trace {
            eprintln!(
                "  client {} => data server {} (same host): {req:?} [{fault:?}]",
                self.client, self.server.0
            );
        }
        match fault {
            Some(crate::net::MsgFault::DropRequest) => {
                self.end();
                return Err(broken("the request was lost"));
            }
            Some(crate::net::MsgFault::Delay) => {
                self.net.servers.advance(Duration::from_millis(200))
            }
            _ => {}
        }
        let id = self.next_id;
        self.next_id += 1;
        let opcode = req.opcode();
        let checked = self.receive(id, req)?;
        let session = self.session.as_mut().expect("checked above");
        let (result, out, after) = match checked.map(|v| v.into_env().req.route()) {
            Ok(Route::SameHostOp(op)) => session.call(op, attach),
            Ok(_) => (
                Err(WireError::new(
                    ErrorCode::UnexpectedMessage,
                    format!(
                        "{} is not served on the short-circuit socket",
                        opcode.name()
                    ),
                )),
                Attached::None,
                After::Close,
            ),
            Err(e) => (Err(e), Attached::None, After::Close),
        };
        let got = self.answer(id, opcode, &result)?;
        if matches!(
            fault,
            Some(crate::net::MsgFault::DropReply | crate::net::MsgFault::SlowDisk)
        ) {
            // The client never sees the files; the server then sees the end.
            drop(out);
            self.end();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the answer was lost (simulated)",
            ));
        }
        if after == After::Close {
            self.end();
        }
        Ok((got, out))
    }

    fn pipe(&mut self) -> io::Result<(Box<dyn PipeOut>, Attached)> {
        self.puts += 1;
        let shared = Arc::new(Mutex::new(VecDeque::new()));
        let out = SimPipeOut {
            bytes: shared.clone(),
            net: self.net.clone(),
            key: hash_bytes(
                self.net.seed(),
                format!("pipe {} {} {}", self.client, self.server.0, self.puts).as_bytes(),
            ),
            puts: 0,
        };
        Ok((
            Box::new(out),
            Attached::Pipe(Box::new(SimPipeIn { bytes: shared })),
        ))
    }

    fn shutdown(&self) {}

    fn liveness(&self) -> Arc<dyn Liveness> {
        Arc::new(SimLive {
            servers: self.net.servers.clone(),
            server: self.server,
            svc: Arc::downgrade(&self.svc),
        })
    }
}

/// A simulated connection is up while the server incarnation it was made to runs.
struct SimLive {
    servers: Arc<crate::cluster::Servers>,
    server: ServerId,
    svc: std::sync::Weak<DataService>,
}

impl Liveness for SimLive {
    fn alive(&self) -> bool {
        match (self.svc.upgrade(), self.servers.data_service(self.server)) {
            (Some(mine), Some(now)) => Arc::ptr_eq(&mine, &now),
            _ => false,
        }
    }
}

/// The client's end of an in-memory pipe.
struct SimPipeOut {
    bytes: Arc<Mutex<VecDeque<u8>>>,
    net: Arc<Net>,
    key: u64,
    puts: u64,
}

impl PipeOut for SimPipeOut {
    fn put(&mut self, data: &[u8]) -> io::Result<()> {
        let mut q = lock(&self.bytes);
        if q.len() + data.len() > PIPE_BYTES {
            // A kernel pipe would block until the server reads, which it does only
            // after the request: the client must never put more than a pipe holds.
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "{} bytes put into a pipe that holds {} of {PIPE_BYTES} (simulated: the client would wait forever)",
                    data.len(),
                    q.len()
                ),
            ));
        }
        self.puts += 1;
        let at = q.len();
        q.extend(data);
        let roll = mix(self.key ^ hash_bytes(self.puts, data)) % 1000;
        if !data.is_empty() && roll < PIPE_DAMAGE_PER_MILLE && self.net.injects("pipe_damage") {
            let i = at + (mix(roll ^ self.key) as usize % data.len());
            q[i] ^= 1 << (roll % 8);
            self.net.stats.count_msg("pipe_damage");
            if self.net.trace {
                eprintln!("    (pipe damage: byte {} of {})", i - at, data.len());
            }
        }
        Ok(())
    }

    fn capacity(&self) -> usize {
        PIPE_BYTES
    }
}

/// The server's end of an in-memory pipe.
struct SimPipeIn {
    bytes: Arc<Mutex<VecDeque<u8>>>,
}

impl PipeIn for SimPipeIn {
    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        let mut q = lock(&self.bytes);
        if q.len() < buf.len() {
            // The client sends a write's request after its bytes; a kernel pipe would
            // stall until the server's patience ran out.
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the pipe holds {} bytes, {} were announced (simulated stall)",
                    q.len(),
                    buf.len()
                ),
            ));
        }
        let n = buf.len();
        for (b, v) in buf.iter_mut().zip(q.drain(..n)) {
            *b = v;
        }
        Ok(())
    }
}
