//! Inline files on the metadata server: pieces are checked against their CRCs, the
//! threshold holds, write-only opens get no bytes, and a flipped stored byte is a
//! checksum error that nothing serves, moves or builds upon.

use std::net::SocketAddr;
use std::sync::Arc;
use stripefs_meta::MetaService;
use stripefs_rpc::{ClusterConfig, ConnInfo, DataServerEntry, Defaults, Secret, Service};
use stripefs_wire::*;

fn cluster() -> ClusterConfig {
    ClusterConfig {
        secret: Secret::generate(),
        timeout_ms: 1000,
        meta_addr: "127.0.0.1:1".into(),
        // Nothing listens there: a move to the data servers cannot happen.
        data: vec![DataServerEntry::new("127.0.0.1:1".into())],
        defaults: Defaults::default(),
        lease_ms: stripefs_rpc::limits::LEASE_MS,
        host: None,
        meta_host: None,
        streams: None,
        pipeline: None,
        compress: None,
        token: None,
        has_secret: true,
        tls: Default::default(),
    }
}

fn call(svc: &MetaService, req: Request) -> Result<Response, WireError> {
    let conn = ConnInfo {
        peer: SocketAddr::from(([127, 0, 0, 1], 9)),
        host: None,
        token: None,
    };
    let env = Envelope {
        cred: Cred::root(),
        req,
    };
    svc.handle(&conn, env, &[]).result
}

fn attr(r: Result<Response, WireError>) -> Attr {
    match r {
        Ok(Response::Attr(a)) => a,
        other => panic!("expected attributes, got {other:?}"),
    }
}

fn piece(offset: u64, data: &[u8]) -> InlinePiece {
    InlinePiece {
        offset,
        crc: crc32c(data),
        data: data.to_vec(),
    }
}

fn open(svc: &MetaService, ino: InodeId, read: bool) -> Attr {
    let session = match call(svc, Request::SessionOpen {}) {
        Ok(Response::Session { session, .. }) => session,
        other => panic!("no session: {other:?}"),
    };
    attr(call(
        svc,
        Request::Open {
            ino,
            session,
            read,
            write: true,
        },
    ))
}

const MARKER: &[u8] = b"inline-marker-0123456789abcdef";

#[test]
fn inline_bytes_are_checked_at_every_step() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("meta.redb");
    let config = cluster();
    let svc = MetaService::open(&db, &config).unwrap();
    let f = attr(call(
        &svc,
        Request::Create {
            parent: InodeId::ROOT,
            name: "f".into(),
            mode: 0o644,
            exclusive: true,
            layout: LayoutHint::default(),
        },
    ));
    let ino = f.ino;
    assert_eq!(f.inline.as_ref().map(|i| i.max), Some(4096));
    let a = attr(call(
        &svc,
        Request::WriteInline {
            ino,
            pieces: vec![piece(0, MARKER), piece(100, b"xyz")],
            mtime_ns: 0,
        },
    ));
    assert_eq!(a.size, 103);
    // A piece that arrived damaged is refused, and changes nothing.
    let mut bad = piece(0, b"damaged");
    bad.crc ^= 1;
    let e = call(
        &svc,
        Request::WriteInline {
            ino,
            pieces: vec![bad],
            mtime_ns: 0,
        },
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::Checksum);
    // Past the threshold: NotInline, for the client to move the file.
    let e = call(
        &svc,
        Request::WriteInline {
            ino,
            pieces: vec![piece(4000, &[1; 200])],
            mtime_ns: 0,
        },
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::NotInline);
    // Readers get the bytes with their open, write-only openers do not.
    let want = {
        let mut v = MARKER.to_vec();
        v.resize(100, 0);
        v.extend_from_slice(b"xyz");
        v
    };
    let r = open(&svc, ino, true);
    let i = r.inline.unwrap();
    assert_eq!(i.data.as_deref(), Some(&want[..]));
    assert_eq!(i.crc, crc32c(&want));
    assert_eq!(open(&svc, ino, false).inline.unwrap().data, None);
    drop(svc);

    // Flip one stored byte of the inline bytes in the store of record.
    {
        let table: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("inodes");
        let rdb = redb::Database::open(&db).unwrap();
        let txn = rdb.begin_write().unwrap();
        {
            let mut t = txn.open_table(table).unwrap();
            let mut rec = redb::ReadableTable::get(&t, ino.0)
                .unwrap()
                .unwrap()
                .value()
                .to_vec();
            let at = rec
                .windows(MARKER.len())
                .position(|w| w == MARKER)
                .expect("the inline bytes are in the inode record");
            rec[at + 5] ^= 0x20;
            t.insert(ino.0, &rec[..]).unwrap();
        }
        txn.commit().unwrap();
    }

    let svc: Arc<MetaService> = MetaService::open(&db, &config).unwrap();
    let e = call(&svc, Request::ReadInline { ino }).unwrap_err();
    assert_eq!(e.code, ErrorCode::Checksum, "{e}");
    // An open still works (a reader learns of the damage at its read) but sends no bytes.
    assert_eq!(open(&svc, ino, true).inline.unwrap().data, None);
    // Neither a write nor a truncate nor a move gives the damaged bytes a fresh CRC.
    let e = call(
        &svc,
        Request::WriteInline {
            ino,
            pieces: vec![piece(0, b"a")],
            mtime_ns: 0,
        },
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::Checksum);
    let cut = SetAttrs {
        size: Some(50),
        ..SetAttrs::default()
    };
    let e = call(&svc, Request::SetAttr { ino, attrs: cut }).unwrap_err();
    assert_eq!(e.code, ErrorCode::Checksum);
    let e = call(&svc, Request::Uninline { ino }).unwrap_err();
    assert_eq!(e.code, ErrorCode::Checksum);
    let e = call(&svc, Request::ReadInline { ino }).unwrap_err();
    assert_eq!(e.code, ErrorCode::Checksum);
}
