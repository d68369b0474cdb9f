//! Helpers shared by the metadata server's tests: a service on a temporary database,
//! requests through `Service::handle` without a network.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use stripefs_meta::{FixedClock, MetaService, Tuning};
use stripefs_rpc::{ClusterConfig, ConnInfo, DataServerEntry, Defaults, Service};
use stripefs_wire::*;

pub const T0: i64 = 1_700_000_000_000_000_000;

/// A cluster of `data_servers` data servers that listen nowhere (port 1 refuses
/// connections), with `defaults`: for tests that drive the metadata server alone.
pub fn unreachable_cluster(data_servers: usize, defaults: Defaults) -> ClusterConfig {
    ClusterConfig {
        timeout_ms: 1000,
        defaults,
        ..ClusterConfig::new(
            "127.0.0.1:1".into(),
            vec![DataServerEntry::new("127.0.0.1:1".into()); data_servers],
        )
    }
}

/// Files here are recorded as data servers hold them (ExtendSize, SetAttr sizes of any
/// length): not inline, which tests/it/inline.rs covers.
pub fn cluster(data_servers: usize) -> ClusterConfig {
    let defaults = Defaults {
        inline_bytes: 0,
        ..Defaults::default()
    };
    unreachable_cluster(data_servers, defaults)
}

pub struct Fs {
    pub svc: Arc<MetaService>,
    pub clock: Arc<FixedClock>,
    pub dir: tempfile::TempDir,
    pub cluster: ClusterConfig,
    pub tuning: Tuning,
    /// Sessions the tests named by small numbers: number -> the server's session id.
    pub sessions: std::sync::Mutex<std::collections::HashMap<u64, u64>>,
}

impl Fs {
    pub fn new() -> Fs {
        Fs::with_cluster(cluster(4))
    }

    pub fn with_cluster(cluster: ClusterConfig) -> Fs {
        Fs::tuned(cluster, Tuning::default())
    }

    /// A service that checkpoints as `tuning` says (freeze_age zero: after nearly
    /// every batch, so reads cross every layer).
    pub fn tuned(cluster: ClusterConfig, tuning: Tuning) -> Fs {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(FixedClock::new(T0));
        let svc = MetaService::open_tuned(
            &dir.path().join("meta.redb"),
            &cluster,
            clock.clone(),
            tuning,
        )
        .unwrap();
        Fs {
            svc,
            clock,
            dir,
            cluster,
            tuning,
            sessions: Default::default(),
        }
    }

    /// Stops as a crash would (nothing more is committed, no final checkpoint) and
    /// reopens: the metadata log is replayed.
    pub fn crash(&mut self) {
        self.svc.halt();
        self.reopen();
    }

    /// The server's id of the session tests call `n`, opened on first use (and again
    /// after a restart, which ends every session).
    pub fn sess(&self, n: u64) -> u64 {
        let mut m = self.sessions.lock().unwrap();
        *m.entry(n)
            .or_insert_with(|| match self.root(Request::SessionOpen {}) {
                Ok(Response::Session { session, .. }) => session,
                other => panic!("SessionOpen answered {other:?}"),
            })
    }

    pub fn db(&self) -> PathBuf {
        self.dir.path().join("meta.redb")
    }

    /// Closes and reopens the database, as a restart does.
    pub fn reopen(&mut self) {
        self.reopen_changed(|_| {});
    }

    /// Closes the database, lets `change` edit the file at the path it is given (to
    /// damage it, say), and opens it again.
    pub fn reopen_changed(&mut self, change: impl FnOnce(&std::path::Path)) {
        let clock = self.clock.clone();
        let placeholder = MetaService::open_with_clock(
            &self.dir.path().join("other.redb"),
            &self.cluster,
            clock.clone(),
        )
        .unwrap();
        drop(std::mem::replace(&mut self.svc, placeholder));
        change(&self.db());
        let fresh = MetaService::open_tuned(&self.db(), &self.cluster, clock, self.tuning).unwrap();
        self.svc = fresh;
        self.sessions.lock().unwrap().clear();
    }

    pub fn call(&self, cred: &Cred, req: Request) -> Result<Response, WireError> {
        call(&self.svc, cred, req)
    }

    pub fn root(&self, req: Request) -> Result<Response, WireError> {
        self.call(&Cred::root(), req)
    }

    pub fn attr(&self, cred: &Cred, req: Request) -> Result<Attr, WireError> {
        match self.call(cred, req)? {
            Response::Attr(a) => Ok(a),
            other => panic!("expected Attr, got {other:?}"),
        }
    }

    pub fn mkdir(
        &self,
        cred: &Cred,
        parent: u64,
        name: &str,
        mode: u32,
    ) -> Result<Attr, WireError> {
        self.attr(
            cred,
            Request::Mkdir {
                parent: InodeId(parent),
                name: name.into(),
                mode,
            },
        )
    }

    pub fn create(
        &self,
        cred: &Cred,
        parent: u64,
        name: &str,
        mode: u32,
    ) -> Result<Attr, WireError> {
        self.attr(
            cred,
            Request::Create {
                parent: InodeId(parent),
                name: name.into(),
                mode,
                exclusive: true,
                layout: LayoutHint::default(),
            },
        )
    }

    pub fn lookup(&self, parent: u64, name: &str) -> Result<Attr, WireError> {
        self.attr(
            &Cred::root(),
            Request::Lookup {
                parent: InodeId(parent),
                name: name.into(),
            },
        )
    }

    pub fn getattr(&self, ino: u64) -> Result<Attr, WireError> {
        self.attr(&Cred::root(), Request::GetAttr { ino: InodeId(ino) })
    }

    pub fn unlink(&self, cred: &Cred, parent: u64, name: &str) -> Result<Response, WireError> {
        self.call(
            cred,
            Request::Unlink {
                parent: InodeId(parent),
                name: name.into(),
            },
        )
    }

    pub fn rename(
        &self,
        sp: u64,
        sn: &str,
        dp: u64,
        dn: &str,
        noreplace: bool,
    ) -> Result<Response, WireError> {
        self.root(Request::Rename {
            src_parent: InodeId(sp),
            src_name: sn.into(),
            dst_parent: InodeId(dp),
            dst_name: dn.into(),
            noreplace,
        })
    }

    /// renameat2 RENAME_EXCHANGE as `cred`, with the inodes found at both names now
    /// (0 where a name has none).
    pub fn exchange(
        &self,
        cred: &Cred,
        ap: u64,
        an: &str,
        bp: u64,
        bn: &str,
    ) -> Result<Response, WireError> {
        let seen = |p: u64, n: &str| self.lookup(p, n).map(|a| a.ino).unwrap_or(InodeId(0));
        let (a_ino, b_ino) = (seen(ap, an), seen(bp, bn));
        self.exchange_seen(cred, (ap, an, a_ino), (bp, bn, b_ino))
    }

    /// An Exchange request naming the inodes the caller believes are at the names.
    pub fn exchange_seen(
        &self,
        cred: &Cred,
        (ap, an, a_ino): (u64, &str, InodeId),
        (bp, bn, b_ino): (u64, &str, InodeId),
    ) -> Result<Response, WireError> {
        self.call(
            cred,
            Request::Exchange {
                a_parent: InodeId(ap),
                a_name: an.into(),
                a_ino,
                b_parent: InodeId(bp),
                b_name: bn.into(),
                b_ino,
            },
        )
    }

    pub fn resolve(&self, cred: &Cred, path: &str, follow: bool) -> Result<Attr, WireError> {
        self.attr(
            cred,
            Request::Resolve {
                path: path.into(),
                follow,
            },
        )
    }

    /// All entry names of a directory, through paginated ReadDir.
    pub fn list(&self, ino: u64, page: u32) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        loop {
            let after = out.last().cloned().unwrap_or_default();
            let r = self
                .root(Request::ReadDir {
                    ino: InodeId(ino),
                    after,
                    limit: page,
                })
                .unwrap();
            let Response::Entries { entries, done } = r else {
                panic!("{r:?}")
            };
            out.extend(entries.into_iter().map(|e| e.name));
            if done {
                return out;
            }
        }
    }

    pub fn status(&self) -> (u64, u64, u64, u64) {
        match self.root(Request::MetaStatus {}).unwrap() {
            Response::MetaStatus {
                inodes,
                files,
                dirs,
                open_files,
                ..
            } => (inodes, files, dirs, open_files),
            r => panic!("{r:?}"),
        }
    }

    pub fn check(&self) -> stripefs_meta::Report {
        self.svc.check().unwrap()
    }
}

pub fn call(svc: &MetaService, cred: &Cred, req: Request) -> Result<Response, WireError> {
    let conn = ConnInfo::new(SocketAddr::from(([127, 0, 0, 1], 9)));
    let env = Envelope {
        cred: cred.clone(),
        req,
    };
    let req = stripefs_wire::Valid::check(env, 0)?;
    svc.handle(&conn, req, &[]).result
}

pub fn user(uid: u32, gid: u32) -> Cred {
    Cred {
        uid,
        gid,
        groups: vec![],
    }
}

pub fn code<T: std::fmt::Debug>(r: Result<T, WireError>) -> ErrorCode {
    r.unwrap_err().code
}

#[allow(unused_imports)] // Each test binary uses a different part.
pub use stripefs_testkit::seed;
