//! Messages: the types requests and responses carry (here), the responses
//! (`response.rs`), the frame codec (`codec.rs`) and the checks of fields that need no
//! server state (`valid.rs`). The requests themselves come from the operation table
//! (ops.rs).

mod codec;
mod response;
mod valid;

pub(crate) use codec::crc_list;
pub use codec::*;
pub use response::*;
pub use valid::*;
pub(crate) use valid::{check_path, check_range, check_unit};

use crate::{
    ErrorCode, FrameError, Header, WireError, BLOCK_BYTES, FLAG_COMPRESSED, FLAG_NO_REPLY,
    FLAG_RESPONSE, VERSION,
};
use crate::{Opcode, Request};
use crate::{MAX_BODY_BYTES, MAX_DATA_BYTES, MAX_PATH_BYTES};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

/// An inode number. The root directory is [`InodeId::ROOT`]; 0 is never used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct InodeId(pub u64);

impl InodeId {
    pub const ROOT: InodeId = InodeId(1);
}

impl std::fmt::Display for InodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "inode {}", self.0)
    }
}

/// A data server's number: its index in the cluster description's list of data servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ServerId(pub u32);

/// Who is asking: checked against owner, group and mode bits by the metadata server.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

impl Cred {
    pub fn root() -> Cred {
        Cred::default()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FileType {
    File,
    Dir,
    Symlink,
    Fifo,
    /// A UNIX domain socket's name: the socket itself lives in the kernel that bound it.
    Socket,
    BlockDev,
    CharDev,
}

impl FileType {
    /// Types whose inode is only a name with attributes: no data, no entries, no target.
    pub fn is_special(self) -> bool {
        matches!(
            self,
            FileType::Fifo | FileType::Socket | FileType::BlockDev | FileType::CharDev
        )
    }

    /// Device nodes, which carry a device number (`rdev`).
    pub fn is_device(self) -> bool {
        matches!(self, FileType::BlockDev | FileType::CharDev)
    }
}

/// A device number in Linux's 32-bit encoding (`new_encode_dev`, as FUSE carries it):
/// minor bits 0-7 and 20-31, major bits 8-19.
pub fn make_rdev(major: u32, minor: u32) -> u32 {
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

/// The major and minor numbers of a device number made by [`make_rdev`].
pub fn split_rdev(rdev: u32) -> (u32, u32) {
    (
        (rdev & 0xfff00) >> 8,
        (rdev & 0xff) | ((rdev >> 12) & 0xfff00),
    )
}

/// Where a file's bytes live: striped round-robin in units of `stripe_size_bytes` over
/// `servers` in this order (the stripe count is `servers.len()`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    pub stripe_size_bytes: u32,
    pub servers: Vec<ServerId>,
}

/// A requested layout; unset fields are inherited (directory default, then cluster default).
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LayoutHint {
    pub stripe_size_bytes: Option<u32>,
    /// `Some(0)` means "all data servers".
    pub stripe_count: Option<u32>,
    /// The data server of the first stripe (as `lfs setstripe -i`); the others follow in
    /// order. Unset: the metadata server rotates the start so that files spread.
    pub start_server: Option<u32>,
    /// The data servers of the stripes, in this order (`setstripe --servers`); the stripe
    /// count is their number. Excludes `start_server` and the local policy. (Version 4.)
    pub servers: Option<Vec<u32>>,
    /// How the metadata server chooses the servers when `servers` is unset. (Version 4.)
    pub policy: Option<Policy>,
    /// Files up to this many bytes keep their data with their inode on the metadata
    /// server (`setstripe --inline-bytes`; 0: never). At most [`MAX_INLINE_BYTES`].
    /// (Version 5.)
    pub inline_bytes: Option<u32>,
}

/// Largest inline threshold a layout hint may set.
pub const MAX_INLINE_BYTES: u32 = 64 << 10;

/// The data of a small file kept with its inode on the metadata server (version 5).
/// The file moves to its data servers (`Uninline`) before it grows past `max`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inline {
    /// Most bytes the file may hold inline (fixed when it was created).
    pub max: u32,
    /// CRC32C of all the inline bytes, as stored when they were written.
    pub crc: u32,
    /// The bytes (as long as the file); sent only in answers to Open, CreateOpen and
    /// ReadInline.
    #[serde(with = "serde_bytes")]
    pub data: Option<Vec<u8>>,
}

/// One piece of a WriteInline: bytes at a file offset, with their CRC32C.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InlinePiece {
    pub offset: u64,
    pub crc: u32,
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
}

/// A placement policy of a layout (`setstripe --layout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Policy {
    /// Consecutive servers from a start that rotates per file (the default).
    Spread,
    /// The data servers on the creating client's host first (its `ClientHost`); stripe
    /// count 1 unless set. Spread when that host has no data server.
    Local,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Spread => "spread",
            Policy::Local => "local",
        }
    }

    pub fn parse(s: &str) -> Option<Policy> {
        match s {
            "spread" => Some(Policy::Spread),
            "local" => Some(Policy::Local),
            _ => None,
        }
    }
}

/// Longest host id (`ClientHost`, `host` in config files).
pub const MAX_HOST_BYTES: usize = 255;
/// Most servers an explicit server list (`LayoutHint::servers`) names.
pub const MAX_LAYOUT_SERVERS: usize = 4096;

/// Attributes of an inode. Times are nanoseconds since the Unix epoch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attr {
    pub ino: InodeId,
    pub ftype: FileType,
    /// Permission bits (07777), without the file type.
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    /// Device number of a block or character device (see [`make_rdev`]); 0 otherwise.
    pub rdev: u32,
    /// Layout of a regular file.
    pub layout: Option<Layout>,
    /// Default layout a directory gives to new files in it.
    pub dir_layout: LayoutHint,
    /// Set while a regular file's bytes live on the metadata server (version 5).
    pub inline: Option<Inline>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    pub name: String,
    pub ino: InodeId,
    pub ftype: FileType,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SetTime {
    Now,
    AtNs(i64),
}

#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SetAttrs {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// Only recorded by the metadata server; the client truncates the data objects first.
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
    /// The caller acts through a handle it opened for writing (ftruncate, and the
    /// kernel's clearing of set-ID bits on write): POSIX judges these by the
    /// descriptor's access, so the metadata server skips the write-permission check
    /// while the inode is open.
    pub via_write_handle: bool,
}

impl SetAttrs {
    /// Whether it asks for no change at all (how the change is judged aside).
    pub fn changes_nothing(&self) -> bool {
        let SetAttrs {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            via_write_handle: _,
        } = self;
        mode.is_none()
            && uid.is_none()
            && gid.is_none()
            && size.is_none()
            && atime.is_none()
            && mtime.is_none()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetStatus {
    pub path: String,
    pub bytes_used: u64,
    pub bytes_total: u64,
    pub bytes_free: u64,
    /// Emulated disk rate, bytes per second, if throttled.
    pub throttle_bytes_s: Option<u64>,
}

/// A data target's file system: its size and the bytes free for the server to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetSpace {
    pub bytes_total: u64,
    pub bytes_free: u64,
}

/// Counters a server keeps since it started.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Counters {
    pub requests: u64,
    pub errors: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Write requests (Write and WriteList) served: with `bytes_written`, the mean
    /// size of the writes that reached this server. 0 on a metadata server.
    pub write_requests: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    Meta,
    Data,
}

/// Longest extended attribute name, namespace prefix included (Linux XATTR_NAME_MAX).
pub const MAX_XATTR_NAME: usize = 255;
/// Largest extended attribute value (Linux XATTR_SIZE_MAX).
pub const MAX_XATTR_VALUE: usize = 65536;
/// `SetXattr` modes.
pub const XATTR_SET_ANY: u8 = 0;
pub const XATTR_SET_CREATE: u8 = 1;
pub const XATTR_SET_REPLACE: u8 = 2;

/// Most extents one WriteList request carries.
pub const MAX_LIST_EXTENTS: usize = 1024;

/// Most object bytes one Scrub request reads.
pub const SCRUB_REQUEST_BYTES: u64 = 16 << 20;
/// Most file ids one ListObjects answer holds.
pub const MAX_LIST_OBJECTS: u32 = 4096;

/// A stored block that fails its checksum, found by a scrub.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Damage {
    pub fid: InodeId,
    /// Index of the data server's storage target.
    pub target: u32,
    /// Byte offset of the block in the object file.
    pub offset: u64,
    pub stored_crc: u32,
    pub actual_crc: u32,
}

impl Request {
    /// A write of inline pieces: WriteInline (durable when answered) if `durable`,
    /// else WriteInlineUnsynced (answered once visible).
    pub fn write_inline(
        ino: InodeId,
        pieces: Vec<InlinePiece>,
        mtime_ns: i64,
        durable: bool,
    ) -> Request {
        if durable {
            Request::WriteInline {
                ino,
                pieces,
                mtime_ns,
            }
        } else {
            Request::WriteInlineUnsynced {
                ino,
                pieces,
                mtime_ns,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HEADER_LEN;

    /// Inline bytes are encoded as one run (`serde_bytes`), which in postcard is exactly
    /// what a plain `Vec<u8>` gave before: the same frames on the wire, both ways.
    #[test]
    fn inline_bytes_encode_as_a_plain_byte_vector_did() {
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct PlainInline {
            max: u32,
            crc: u32,
            data: Option<Vec<u8>>,
        }
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct PlainPiece {
            offset: u64,
            crc: u32,
            data: Vec<u8>,
        }
        let bytes: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
        for data in [None, Some(Vec::new()), Some(bytes.clone())] {
            let new = Inline {
                max: 4096,
                crc: 9,
                data: data.clone(),
            };
            let old = PlainInline {
                max: 4096,
                crc: 9,
                data,
            };
            let enc = postcard::to_allocvec(&new).unwrap();
            assert_eq!(enc, postcard::to_allocvec(&old).unwrap());
            assert_eq!(postcard::from_bytes::<Inline>(&enc).unwrap(), new);
        }
        let new = InlinePiece {
            offset: 1 << 40,
            crc: 3,
            data: bytes.clone(),
        };
        let old = PlainPiece {
            offset: 1 << 40,
            crc: 3,
            data: bytes,
        };
        let enc = postcard::to_allocvec(&old).unwrap();
        assert_eq!(postcard::to_allocvec(&new).unwrap(), enc);
        assert_eq!(postcard::from_bytes::<InlinePiece>(&enc).unwrap(), new);
    }

    fn env(req: Request) -> Envelope {
        Envelope {
            cred: Cred {
                uid: 1000,
                gid: 100,
                groups: vec![4, 27],
            },
            req,
        }
    }

    #[test]
    fn opcodes_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for &op in Opcode::ALL {
            assert!(seen.insert(op as u16));
            assert_eq!(Opcode::from_u16(op as u16), Some(op));
        }
    }

    #[test]
    fn request_round_trip() {
        let e = env(Request::Create {
            parent: InodeId::ROOT,
            name: "f".into(),
            mode: 0o644,
            exclusive: true,
            layout: LayoutHint {
                stripe_size_bytes: Some(1 << 20),
                stripe_count: Some(4),
                start_server: None,
                ..LayoutHint::default()
            },
        });
        let frame = encode_request(7, &e, 0);
        let h = Header::decode(&frame).unwrap();
        assert_eq!(h.request_id, 7);
        assert_eq!(decode_request(&h, &frame[HEADER_LEN..]).unwrap(), e);
    }

    #[test]
    fn response_round_trip_ok_and_error() {
        let ok: Result<Response, WireError> = Ok(Response::ReadData { crcs: vec![1, 2] });
        let frame = encode_response(9, Opcode::Read, &ok, 8192);
        let h = Header::decode(&frame).unwrap();
        assert_eq!(h.data_len, 8192);
        assert_eq!(decode_response(&h, &frame[HEADER_LEN..]).unwrap(), ok);

        let err: Result<Response, WireError> =
            Err(WireError::new(ErrorCode::NotFound, "no \"x\" in /"));
        let frame = encode_response(9, Opcode::Lookup, &err, 0);
        let h = Header::decode(&frame).unwrap();
        assert_eq!(h.status, ErrorCode::NotFound as u32);
        assert_eq!(decode_response(&h, &frame[HEADER_LEN..]).unwrap(), err);
    }

    #[test]
    fn opcode_mismatch_and_data_length_are_refused() {
        let frame = encode_request(1, &env(Request::Ping {}), 0);
        let mut h = Header::decode(&frame).unwrap();
        h.opcode = Opcode::GetAttr as u16;
        assert!(matches!(
            decode_request(&h, &frame[HEADER_LEN..]),
            Err(FrameError::OpcodeMismatch { .. })
        ));
        h.opcode = Opcode::Ping as u16;
        h.data_len = 5;
        assert!(matches!(
            decode_request(&h, &frame[HEADER_LEN..]),
            Err(FrameError::DataLength { .. })
        ));
    }

    #[test]
    fn huge_length_prefix_does_not_allocate() {
        // A body claiming a 2^60-byte name must fail fast with a clear reason.
        let mut body = encode_body(&env(Request::Lookup {
            parent: InodeId::ROOT,
            name: String::new(),
        }));
        assert_eq!(body.pop(), Some(0), "the empty name's length comes last");
        let mut n = 1u64 << 60;
        while n >= 0x80 {
            body.push(n as u8 | 0x80);
            n >>= 7;
        }
        body.push(n as u8);
        assert!(decode_body::<Envelope>(&body).is_err());
    }

    /// postcard accepts an integer in more varint bytes than it needs; the decoder
    /// refuses them, so every body has one encoding (the fuzzer relies on it).
    #[test]
    fn non_canonical_and_trailing_bodies_are_refused() {
        let e = env(Request::GetAttr { ino: InodeId(5) });
        let body = encode_body(&e);
        assert_eq!(decode_body::<Envelope>(&body).unwrap(), e);
        // The inode number 5 is the last byte; spell it in two bytes.
        let mut long = body.clone();
        let last = long.pop().unwrap();
        long.extend([last | 0x80, 0]);
        let err = decode_body::<Envelope>(&long).unwrap_err();
        assert!(err.to_string().contains("non-canonical"), "{err}");
        let mut trailing = body.clone();
        trailing.push(0);
        let err = decode_body::<Envelope>(&trailing).unwrap_err();
        assert!(err.to_string().contains("trailing"), "{err}");
    }

    #[test]
    fn pieces_split_at_block_boundaries() {
        assert_eq!(pieces(0, 0).count(), 0);
        assert_eq!(pieces(0, 4096).collect::<Vec<_>>(), vec![4096]);
        assert_eq!(pieces(100, 4096).collect::<Vec<_>>(), vec![3996, 100]);
        assert_eq!(pieces(4095, 2).collect::<Vec<_>>(), vec![1, 1]);
        assert_eq!(
            pieces(8192, 10000).collect::<Vec<_>>(),
            vec![4096, 4096, 1808]
        );
    }

    #[test]
    fn write_validation() {
        let data = vec![7u8; 5000];
        let good = Request::Write {
            fid: InodeId(5),
            unit: 65536,
            offset: 10,
            crcs: piece_crcs(10, &data),
        };
        assert!(good.validate(5000).is_ok());
        assert!(good.validate(9000).is_err());
        let bad_unit = Request::Write {
            fid: InodeId(5),
            unit: 1000,
            offset: 0,
            crcs: vec![],
        };
        assert!(bad_unit.validate(0).is_err());
        let unaligned = Request::Read {
            fid: InodeId(5),
            unit: 65536,
            offset: 1,
            len: 4096,
        };
        assert!(unaligned.validate(0).is_err());
    }

    #[test]
    fn punch_allocate_and_seek_validation() {
        let fid = InodeId(5);
        let ok = Request::Punch {
            fid,
            unit: 65536,
            offset: 1,
            len: 10,
        };
        assert!(ok.validate(0).is_ok());
        for (unit, offset, len) in [(65536, 0, 0), (65536, u64::MAX, 2), (100, 0, 1)] {
            let p = Request::Punch {
                fid,
                unit,
                offset,
                len,
            };
            let a = Request::Allocate {
                fid,
                unit,
                offset,
                len,
            };
            assert!(p.validate(0).is_err(), "{p:?}");
            assert!(a.validate(0).is_err(), "{a:?}");
        }
        for (unit, offset) in [(0, 0), (65536, MAX_SEEK_OFFSET + 1)] {
            let seek = Request::Seek {
                fid,
                unit,
                offset,
                hole: true,
            };
            assert!(seek.validate(0).is_err(), "{seek:?}");
        }
        let r: Result<Response, WireError> = Ok(Response::Offset { offset: Some(7) });
        let frame = encode_response(1, Opcode::Seek, &r, 0);
        let h = Header::decode(&frame).unwrap();
        assert_eq!(decode_response(&h, &frame[HEADER_LEN..]).unwrap(), r);
    }
}
