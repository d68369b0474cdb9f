//! Inline files on the metadata server: pieces are checked against their CRCs, the
//! threshold holds, write-only opens get no bytes, and a flipped stored byte is a
//! checksum error that nothing serves, moves or builds upon.

use crate::common;

use common::{cluster, Fs};
use stripefs_rpc::Defaults;
use stripefs_wire::*;

/// A service whose cluster has the default inline threshold (4 KiB) and data servers
/// that listen nowhere: a move to the data servers cannot happen.
fn inline_fs() -> Fs {
    let mut c = cluster(1);
    c.defaults = Defaults::default();
    Fs::with_cluster(c)
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

fn open(fs: &Fs, ino: InodeId, read: bool) -> Attr {
    attr(fs.root(Request::Open {
        ino,
        session: fs.sess(1),
        read,
        write: true,
    }))
}

const MARKER: &[u8] = b"inline-marker-0123456789abcdef";

#[test]
fn inline_bytes_are_checked_at_every_step() {
    let mut fs = inline_fs();
    let f = attr(fs.root(Request::Create {
        parent: InodeId::ROOT,
        name: "f".into(),
        mode: 0o644,
        exclusive: true,
        layout: LayoutHint::default(),
    }));
    let ino = f.ino;
    assert_eq!(f.inline.as_ref().map(|i| i.max), Some(4096));
    let a = attr(fs.root(Request::WriteInline {
        ino,
        pieces: vec![piece(0, MARKER), piece(100, b"xyz")],
        mtime_ns: 0,
    }));
    assert_eq!(a.size, 103);
    // A piece that arrived damaged is refused, and changes nothing.
    let mut bad = piece(0, b"damaged");
    bad.crc ^= 1;
    let e = fs
        .root(Request::WriteInline {
            ino,
            pieces: vec![bad],
            mtime_ns: 0,
        })
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Checksum);
    // Past the threshold: NotInline, for the client to move the file.
    let e = fs
        .root(Request::WriteInline {
            ino,
            pieces: vec![piece(4000, &[1; 200])],
            mtime_ns: 0,
        })
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::NotInline);
    // Readers get the bytes with their open, write-only openers do not.
    let want = {
        let mut v = MARKER.to_vec();
        v.resize(100, 0);
        v.extend_from_slice(b"xyz");
        v
    };
    let r = open(&fs, ino, true);
    let i = r.inline.unwrap();
    assert_eq!(i.data.as_deref(), Some(&want[..]));
    assert_eq!(i.crc, crc32c(&want));
    assert_eq!(open(&fs, ino, false).inline.unwrap().data, None);
    // Flip one stored byte of the inline bytes in the store of record.
    fs.reopen_changed(|db| {
        let table: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("inodes");
        let rdb = redb::Database::open(db).unwrap();
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
    });
    let e = fs.root(Request::ReadInline { ino }).unwrap_err();
    assert_eq!(e.code, ErrorCode::Checksum, "{e}");
    // An open still works (a reader learns of the damage at its read) but sends no bytes.
    assert_eq!(open(&fs, ino, true).inline.unwrap().data, None);
    // Neither a write nor a truncate nor a move gives the damaged bytes a fresh CRC.
    let e = fs
        .root(Request::WriteInline {
            ino,
            pieces: vec![piece(0, b"a")],
            mtime_ns: 0,
        })
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Checksum);
    let cut = SetAttrs {
        size: Some(50),
        ..SetAttrs::default()
    };
    let e = fs.root(Request::SetAttr { ino, attrs: cut }).unwrap_err();
    assert_eq!(e.code, ErrorCode::Checksum);
    let e = fs.root(Request::Uninline { ino }).unwrap_err();
    assert_eq!(e.code, ErrorCode::Checksum);
    let e = fs.root(Request::ReadInline { ino }).unwrap_err();
    assert_eq!(e.code, ErrorCode::Checksum);
}
