//! Tests through `DataService::handle`, as the server loop calls it, without a network.

mod concurrency;
mod delta;
mod durability;
mod faults;
mod io;
mod model;
mod net;
mod perf;
mod sparse;
mod throttle;
mod zero_copy;

use crate::{Clock, DataService, MemStore, SystemClock};
use std::path::PathBuf;
use std::sync::Arc;
use stripefs_rpc::{ConnInfo, Reply, Service};
use stripefs_wire::{
    crc32c, piece_crcs, Cred, Envelope, ErrorCode, InodeId, Request, Response, ServerId, WireError,
    BLOCK_BYTES,
};

pub const B: usize = BLOCK_BYTES as usize;

pub fn conn() -> ConnInfo {
    ConnInfo::new("127.0.0.1:40000".parse().unwrap())
}

pub fn call(svc: &DataService, req: Request, data: Vec<u8>) -> Reply {
    let env = Envelope {
        cred: Cred::root(),
        req,
    };
    // As the rpc layer does: a request is checked once, before any handler sees it.
    match stripefs_wire::Valid::check(env, data.len() as u32) {
        Ok(req) => svc.handle(&conn(), req, &data),
        Err(e) => Reply::err(e),
    }
}

/// A data server on real directories under a temporary directory.
pub fn fs_server(targets: usize, throttle: Option<u64>) -> (tempfile::TempDir, Arc<DataService>) {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..targets)
        .map(|i| dir.path().join(format!("t{i}")))
        .collect();
    let svc = DataService::open(ServerId(3), &paths, throttle).unwrap();
    (dir, svc)
}

/// A data server on the in-memory store.
pub fn mem_server(targets: usize) -> (Arc<MemStore>, Arc<DataService>) {
    let store = Arc::new(MemStore::new());
    let paths: Vec<PathBuf> = (0..targets)
        .map(|i| PathBuf::from(format!("/mem/t{i}")))
        .collect();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let svc = DataService::with_store(ServerId(3), &paths, None, store.clone(), clock).unwrap();
    (store, svc)
}

pub fn write(
    svc: &DataService,
    fid: u64,
    unit: u32,
    offset: u64,
    data: &[u8],
) -> Result<(), WireError> {
    let req = Request::Write {
        fid: InodeId(fid),
        unit,
        offset,
        crcs: piece_crcs(offset, data),
    };
    call(svc, req, data.to_vec()).result.map(|r| {
        assert_eq!(
            r,
            Response::Written {
                boot_id: svc.boot_id()
            }
        )
    })
}

/// Reads an aligned range; returns the stored CRCs and the data.
pub fn read_raw(
    svc: &DataService,
    fid: u64,
    unit: u32,
    offset: u64,
    len: u32,
) -> Result<(Vec<u32>, Vec<u8>), WireError> {
    let reply = call(
        svc,
        Request::Read {
            fid: InodeId(fid),
            unit,
            offset,
            len,
        },
        vec![],
    );
    let crcs = match reply.result? {
        Response::ReadData { crcs } => crcs,
        other => panic!("unexpected {other:?}"),
    };
    // File parts (zero-copy replies) are read as a socket's peer would get them.
    let data = reply.data.into_bytes().expect("a reply's file parts read");
    assert_eq!(data.len(), len as usize, "a read returns exactly len bytes");
    assert_eq!(crcs.len(), len as usize / B);
    Ok((crcs, data))
}

/// Reads any range as the client does: aligned, verifying every block end to end.
pub fn read(svc: &DataService, fid: u64, unit: u32, offset: u64, len: usize) -> Vec<u8> {
    let start = offset / B as u64 * B as u64;
    let end = (offset + len as u64).div_ceil(B as u64) * B as u64;
    let (crcs, data) = read_raw(svc, fid, unit, start, (end - start) as u32).unwrap();
    for (i, (block, crc)) in data.chunks(B).zip(&crcs).enumerate() {
        assert_eq!(
            crc32c(block),
            *crc,
            "block {i} of the read fails its checksum"
        );
    }
    let at = (offset - start) as usize;
    data[at..at + len].to_vec()
}

pub fn simple(svc: &DataService, req: Request) -> Result<Response, WireError> {
    call(svc, req, vec![]).result
}

pub use stripefs_testkit::{pattern, seed};

#[test]
fn ping_and_unsupported() {
    let (_s, svc) = mem_server(1);
    match simple(&svc, Request::Ping {}).unwrap() {
        Response::Pong {
            role,
            server_id,
            version,
        } => {
            assert_eq!(role, stripefs_wire::Role::Data);
            assert_eq!(server_id, Some(ServerId(3)));
            assert!(!version.is_empty());
        }
        other => panic!("{other:?}"),
    }
    let e = simple(&svc, Request::GetAttr { ino: InodeId(1) }).unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported);
    assert!(e.message.contains("GetAttr"), "{e}");
}

#[test]
fn open_refuses_duplicate_targets_and_names_bad_paths() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t");
    let e = DataService::open(ServerId(0), &[t.clone(), t.clone()], None)
        .err()
        .unwrap();
    assert!(e.contains("twice"), "{e}");
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let e = DataService::open(ServerId(0), &[file.join("sub")], None)
        .err()
        .unwrap();
    assert!(e.contains(&file.display().to_string()), "{e}");
}
