//! Requests in: the `Service` entry point, scoped-token checks, the dispatch to the
//! handlers, and the status and locality counters.

use super::write::Transit;
use super::DataService;
use std::sync::atomic::{AtomicU64, Ordering};
use stripefs_rpc::{ConnInfo, Payload, Reply, Service};
use stripefs_wire::{
    AnyOp, Counters, DataOp, ErrorCode, Reach, Request, Response, Role, Route, Scope, TargetStatus,
    Valid, WireError, BLOCK_BYTES, MAX_DATA_BYTES, SCRUB_REQUEST_BYTES,
};

impl DataService {
    /// A request made with a scoped token: what it may do here.
    fn token_allows(&self, t: &stripefs_rpc::token::Token, req: &Request) -> Result<(), WireError> {
        let denied = |why: String| {
            WireError::new(
                ErrorCode::PermissionDenied,
                format!("token {:016x} (for {}): {why}", t.id, t.path),
            )
        };
        let Scope { reach, writes } = req.scope();
        let fid = match reach {
            Reach::Nothing => return Ok(()),
            Reach::Fid(fid) => fid,
            Reach::Secret
            | Reach::Dir(_)
            | Reach::Dirs(..)
            | Reach::Ino(_)
            | Reach::InoAndDir(..)
            | Reach::Path(_)
            | Reach::OpenPath(_) => {
                return Err(denied(format!(
                    "{} needs the cluster secret",
                    req.opcode().name()
                )))
            }
        };
        let write = writes;
        if write && t.read_only {
            return Err(denied(format!(
                "read-only: {} refused",
                req.opcode().name()
            )));
        }
        match self.tokens.get() {
            Some(c) => c.check(t, fid, write),
            None => Err(denied(
                "this data server cannot check tokens (no metadata server known)".into(),
            )),
        }
    }

    /// Counts a request's bulk bytes by whether its client is on this server's host.
    fn count_locality(&self, conn: &ConnInfo, received: u64, sent: u64) {
        if received == 0 && sent == 0 {
            return;
        }
        let same = self
            .host
            .get()
            .is_some_and(|h| conn.host.as_deref() == Some(h));
        let (r, s) = if same {
            (&self.stats.same_host_received, &self.stats.same_host_sent)
        } else {
            (&self.stats.other_host_received, &self.stats.other_host_sent)
        };
        r.fetch_add(received, Ordering::Relaxed);
        s.fetch_add(sent, Ordering::Relaxed);
    }

    fn status(&self) -> Result<Response, WireError> {
        let mut targets = Vec::with_capacity(self.targets.len());
        for t in &self.targets {
            let u = self.store.usage(&t.root).map_err(|e| {
                WireError::io(
                    format!(
                        "data server {}: usage of target {}",
                        self.id.0,
                        t.root.display()
                    ),
                    &e,
                )
            })?;
            targets.push(TargetStatus {
                path: t.root.display().to_string(),
                bytes_used: u.used,
                bytes_total: u.total,
                bytes_free: u.free,
                throttle_bytes_s: t.throttle.as_ref().map(|th| th.rate_bytes_s()),
            });
        }
        let s = &self.stats;
        let counters = Counters {
            requests: s.requests.load(Ordering::Relaxed),
            errors: s.errors.load(Ordering::Relaxed),
            bytes_read: s.bytes_read.load(Ordering::Relaxed),
            bytes_written: s.bytes_written.load(Ordering::Relaxed),
            write_requests: s.write_requests.load(Ordering::Relaxed),
        };
        Ok(Response::DataStatus {
            server_id: self.id,
            targets,
            counters,
        })
    }

    fn dispatch(&self, conn: &ConnInfo, req: Request, data: &[u8]) -> Reply {
        let opcode = req.opcode();
        if data.len() > MAX_DATA_BYTES as usize {
            let msg = format!(
                "request carries {} bytes, the limit is {MAX_DATA_BYTES}",
                data.len()
            );
            return Reply::err(WireError::new(ErrorCode::InvalidArgument, msg));
        }
        let op = match req.route() {
            Route::DataOp(op) => op,
            Route::AnyOp(AnyOp::Ping {}) => {
                return Reply::ok(Response::Pong {
                    role: Role::Data,
                    server_id: Some(self.id),
                    version: env!("CARGO_PKG_VERSION").to_string(),
                })
            }
            Route::ConnectionOp(op) => {
                return Reply::err(WireError::new(
                    ErrorCode::UnexpectedMessage,
                    format!(
                        "{} is not for this point of a connection",
                        op.opcode().name()
                    ),
                ))
            }
            Route::MetaReadOp(_) | Route::MetaWriteOp(_) | Route::MetaOp(_) => {
                return Reply::err(WireError::new(
                    ErrorCode::Unsupported,
                    format!(
                        "data server {} does not serve {} (the metadata server does)",
                        self.id.0,
                        opcode.name()
                    ),
                ))
            }
            // Descriptors and pipes cross only a Unix socket (local.rs).
            Route::SameHostOp(_) => {
                return Reply::err(WireError::new(
                    ErrorCode::UnexpectedMessage,
                    format!(
                        "data server {} serves {} only on its short-circuit socket",
                        self.id.0,
                        opcode.name()
                    ),
                ))
            }
        };
        let result = match op {
            DataOp::Write {
                fid,
                unit,
                offset,
                crcs,
            } => self.write(conn, fid, unit, offset, &crcs, data),
            DataOp::WriteList {
                fid,
                unit,
                extents,
                crcs,
            } => self.write_list(&Transit::Tcp(conn.peer), fid, unit, &extents, &crcs, data),
            DataOp::Read {
                fid,
                unit,
                offset,
                len,
            } => {
                let r = if self.zero_copy {
                    self.read_zero_copy(fid, unit, offset, len)
                } else {
                    self.read(fid, unit, offset, len)
                        .map(|(crcs, bytes)| (crcs, Payload::Bytes(bytes)))
                };
                return match r {
                    Ok((crcs, data)) => Reply {
                        result: Ok(Response::ReadData { crcs }),
                        data,
                    },
                    Err(e) => Reply::err(e),
                };
            }
            DataOp::ReadList { fid, unit, ranges } => {
                // Range by range through memory: each range's locks are released before
                // the next is taken, so a list read never waits holding a lock.
                let total: usize = ranges.iter().map(|r| r.1 as usize).sum();
                let mut all_crcs = Vec::with_capacity(total / BLOCK_BYTES as usize);
                let mut bytes = Vec::with_capacity(total);
                for (offset, len) in ranges {
                    match self.read(fid, unit, offset, len) {
                        Ok((crcs, b)) => {
                            all_crcs.extend(crcs);
                            bytes.extend_from_slice(&b);
                        }
                        Err(e) => return Reply::err(e),
                    }
                }
                return Reply {
                    result: Ok(Response::ReadData { crcs: all_crcs }),
                    data: Payload::Bytes(bytes),
                };
            }
            DataOp::Truncate {
                fid,
                unit,
                local_size,
            } => self.truncate(fid, unit, local_size),
            DataOp::Remove { fid } => self.remove(fid),
            DataOp::Fsync { fid } => self.fsync(fid),
            DataOp::DropCache { fid } => self.drop_cache(fid),
            DataOp::Punch {
                fid,
                unit,
                offset,
                len,
            } => self.punch(fid, unit, offset, len),
            DataOp::Allocate {
                fid,
                unit,
                offset,
                len,
            } => self.allocate(fid, unit, offset, len),
            DataOp::Seek {
                fid,
                unit,
                offset,
                hole,
            } => self.seek(fid, unit, offset, hole),
            DataOp::Allocated { fid } => self.allocated(fid),
            DataOp::DataStatus {} => self.status(),
            DataOp::ListObjects { after, limit } => self
                .list_objects(after, limit)
                .map(|(fids, done)| Response::Objects { fids, done }),
            DataOp::Scrub {
                fid,
                target,
                offset,
            } => self.scrub(fid, target, offset, SCRUB_REQUEST_BYTES).map(
                |(bytes, next, damaged)| Response::Scrubbed {
                    bytes,
                    next,
                    damaged,
                },
            ),
            DataOp::Space {} => self.space(),
            DataOp::LocalityStatus {} => {
                let s = &self.stats;
                let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
                Ok(Response::LocalityStatus {
                    host: self.host.get().cloned().unwrap_or_default(),
                    same_host_received: get(&s.same_host_received),
                    same_host_sent: get(&s.same_host_sent),
                    other_host_received: get(&s.other_host_received),
                    other_host_sent: get(&s.other_host_sent),
                    short_circuit_opens: get(&s.local_opens),
                })
            }
            DataOp::ScrubStatus {} => {
                let s = &self.stats;
                Ok(Response::ScrubStatus {
                    scrubbed_bytes: s.scrubbed_bytes.load(Ordering::Relaxed),
                    damaged_blocks: s.damaged_blocks.load(Ordering::Relaxed),
                    passes: s.scrub_passes.load(Ordering::Relaxed),
                    rate_bytes_s: s.scrub_rate_bytes_s.load(Ordering::Relaxed),
                })
            }
        };
        Reply::from_result(result)
    }
}

impl Service for DataService {
    fn handle(&self, conn: &ConnInfo, req: Valid, data: &[u8]) -> Reply {
        let env = req.into_env();
        // ScrubStatus rides along with DataStatus (`cluster status`) and is not counted
        // (its row says), so that one status moves the counters by one.
        if env.req.opcode().counted() {
            self.stats.requests.fetch_add(1, Ordering::Relaxed);
        }
        if matches!(env.req, Request::Write { .. } | Request::WriteList { .. }) {
            self.stats.write_requests.fetch_add(1, Ordering::Relaxed);
        }
        let op = env.req.opcode();
        if let Some(t) = &conn.token {
            if let Err(e) = self.token_allows(t, &env.req) {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("{} from {} refused: {e}", op.name(), conn.peer);
                return Reply::err(e);
            }
        }
        let reply = self.dispatch(conn, env.req, data);
        self.charge_host_net(conn, data.len(), &reply);
        if reply.result.is_ok() {
            self.count_locality(conn, data.len() as u64, reply.data.len());
        }
        if let Err(e) = &reply.result {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("{} from {} failed: {e}", op.name(), conn.peer);
        }
        reply
    }
}
