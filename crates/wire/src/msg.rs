//! Messages: the types requests and responses carry, the responses, and the codec.
//! The requests themselves come from the operation table (ops.rs).

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

/// Checks a host id: 1..=[`MAX_HOST_BYTES`] bytes of ASCII letters, digits, `-`, `_`, `.`.
pub fn validate_host(host: &str) -> Result<(), WireError> {
    let ok = !host.is_empty()
        && host.len() <= MAX_HOST_BYTES
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!(
                "bad host id {:?}: 1 to {MAX_HOST_BYTES} letters, digits, '-', '_' or '.'",
                host.chars().take(64).collect::<String>()
            ),
        ))
    }
}

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

/// CRC lists (Write, ReadData) travel as bytes: a varint byte count, then each CRC as
/// 4 little-endian bytes. CRCs are random 32-bit numbers, which as varints would take
/// 5 bytes each and a loop per number; as bytes they cost one copy (measured: see
/// docs/protocol.md, Body encoding).
pub(crate) mod crc_list {
    use serde::{de, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(crcs: &[u32], s: S) -> Result<S::Ok, S::Error> {
        #[cfg(target_endian = "little")]
        {
            // SAFETY: u32 has no padding and u8 no alignment, so the list's memory is
            // 4 * len initialised bytes, and on a little-endian machine they are the
            // wire form.
            let bytes = unsafe {
                std::slice::from_raw_parts(crcs.as_ptr().cast::<u8>(), std::mem::size_of_val(crcs))
            };
            s.serialize_bytes(bytes)
        }
        #[cfg(not(target_endian = "little"))]
        {
            let bytes: Vec<u8> = crcs.iter().flat_map(|c| c.to_le_bytes()).collect();
            s.serialize_bytes(&bytes)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u32>, D::Error> {
        d.deserialize_bytes(Visitor)
    }

    struct Visitor;

    impl de::Visitor<'_> for Visitor {
        type Value = Vec<u32>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a CRC list: a multiple of 4 bytes")
        }

        fn visit_bytes<E: de::Error>(self, b: &[u8]) -> Result<Vec<u32>, E> {
            if b.len() % 4 != 0 {
                return Err(E::custom(format!(
                    "CRC list of {} bytes is not a multiple of 4",
                    b.len()
                )));
            }
            Ok(b.chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().expect("chunks of 4")))
                .collect())
        }
    }
}

macro_rules! responses {
    ($( $(#[$vattr:meta])* $variant:ident $(( $($tuple:tt)* ))? $({ $($fields:tt)* })? ),* $(,)?) => {
        /// Responses. The response frame's opcode echoes the request's; the operation
        /// table names the variants each request's success may be.
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        pub enum Response {
            $( $(#[$vattr])* $variant $(( $($tuple)* ))? $({ $($fields)* })?, )*
        }

        /// The variants of [`Response`], without their fields: what the operation table's
        /// rows name as their replies.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ReplyKind {
            $($variant,)*
        }

        impl ReplyKind {
            pub const ALL: &'static [ReplyKind] = &[$(ReplyKind::$variant,)*];
        }

        impl Response {
            pub fn kind(&self) -> ReplyKind {
                match self {
                    $(Response::$variant { .. } => ReplyKind::$variant,)*
                }
            }
        }

        /// One type per [`Response`] variant: what a typed call's success gives
        /// ([`Operation::Reply`](crate::Operation::Reply)). A variant with one field is
        /// that field's type; one with none is a unit type.
        pub mod reply {
            use super::*;
            $( crate::ops::reply_item! { $(#[$vattr])* $variant $(( $($tuple)* ))? $({ $($fields)* })? } )*
        }
    };
}

responses! {
    /// Success with nothing to say.
    Done,
    /// Answer to Hello: the server's nonce and its proof of the secret.
    Challenge {
        nonce: [u8; 32],
        proof: [u8; 32],
    },
    Pong {
        role: Role,
        server_id: Option<ServerId>,
        version: String,
    },
    // `crate::` because the variant's type in `reply` has the same name.
    Attr(crate::Attr),
    Target(String),
    Entries {
        entries: Vec<DirEntry>,
        done: bool,
    },
    /// `db_bytes`: size of the metadata store on disk.
    MetaStatus {
        inodes: u64,
        files: u64,
        dirs: u64,
        open_files: u64,
        db_bytes: u64,
        counters: Counters,
    },
    /// Answer to Read: the stored CRC of each block of the returned data, which follows.
    ReadData {
        #[serde(with = "crc_list")]
        crcs: Vec<u32>,
    },
    DataStatus {
        server_id: ServerId,
        targets: Vec<TargetStatus>,
        counters: Counters,
    },
    /// Answer to Seek: the local offset found, `None` if there is no data at or after
    /// the offset asked about.
    Offset {
        offset: Option<u64>,
    },
    /// Answer to Allocated: bytes allocated on disk to the objects and their checksums.
    Allocated {
        bytes: u64,
    },
    /// Answer to Write and Fsync: the data server's boot identity, a random number drawn
    /// at each start. A client that sees it change between a write and the fsync that
    /// should make the write durable knows the write may be lost (the server restarted).
    Written {
        boot_id: u64,
    },
    /// Answer to ListObjects: file ids in cursor order; `done` when none follow.
    Objects {
        fids: Vec<InodeId>,
        done: bool,
    },
    /// Answer to Scrub: bytes read, the object offset to continue from (`None`: the
    /// object's end was reached) and the damaged blocks found.
    Scrubbed {
        bytes: u64,
        next: Option<u64>,
        damaged: Vec<Damage>,
    },
    /// Answer to ScrubStatus: what the background scrubber (and on-demand scrubs) read
    /// and found since the server started.
    ScrubStatus {
        scrubbed_bytes: u64,
        damaged_blocks: u64,
        /// Completed passes over every object.
        passes: u64,
        /// The background scrubber's rate, 0 when off.
        rate_bytes_s: u64,
    },
    /// Answer to SessionOpen and SessionRenew: the session's id and its lease; the
    /// session ends unless renewed within `lease_ms` of this answer.
    Session {
        session: u64,
        lease_ms: u64,
    },
    /// Answer to LocalityStatus: the data server's host and, since it started, the bulk
    /// bytes it received from (writes) and sent to (reads) clients on its own host and on
    /// other hosts (a connection that announced no host counts as another host's), and
    /// the short-circuit opens it answered with descriptors.
    LocalityStatus {
        host: String,
        same_host_received: u64,
        same_host_sent: u64,
        other_host_received: u64,
        other_host_sent: u64,
        short_circuit_opens: u64,
    },
    /// Answer to DataServers: (address, host) of each data server, by id.
    DataServers {
        servers: Vec<(String, Option<String>)>,
    },
    /// Answer to GetXattr: the attribute's value.
    Xattr {
        value: Vec<u8>,
    },
    /// Answer to ListXattr: attribute names, sorted.
    XattrNames {
        names: Vec<String>,
    },
    /// Answer to Space: each target's size and free bytes, in target order.
    Space {
        targets: Vec<TargetSpace>,
    },
    /// Answer to ReadDirPlus: (name, attributes) of each entry, in name order; `done`
    /// when none follow.
    EntriesPlus {
        entries: Vec<(String, Attr)>,
        done: bool,
    },
    /// Answer to Features: the server's.
    Features {
        features: crate::Features,
    },
    /// Answer to Statfs: inodes in use, and of them regular files and directories.
    Statfs {
        inodes: u64,
        files: u64,
        dirs: u64,
    },
    /// Answer to LocalOpen: per target, which of its files are attached
    /// ([`HAS_DATA`](crate::HAS_DATA), [`HAS_SIDECAR`](crate::HAS_SIDECAR)), in target
    /// order; the descriptors follow in that order.
    LocalFiles {
        flags: Vec<u8>,
    },
    /// Answer to LocalDirect: the range's pieces in order; the data files' write
    /// descriptors are attached, and after them the grant's fence.
    Granted {
        pieces: Vec<crate::GrantPiece>,
    },
}

/// What a request body holds: the caller's credentials and the request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub cred: Cred,
    pub req: Request,
}

/// Bytes [`encode_body`] would give `value`, counted without encoding it.
pub fn encoded_len<T: Serialize>(value: &T) -> usize {
    postcard::serialize_with_flavor(value, postcard::ser_flavors::Size::default())
        .expect("counting bytes cannot fail")
}

/// Encodes a message body: postcard 1 (variable-length integers, see docs/protocol.md).
/// Exposed for the benchmarks of the encoding and the fuzzer; frames use it through
/// [`encode_request`] and [`encode_response`].
pub fn encode_body<T: Serialize>(value: &T) -> Vec<u8> {
    encode_body_after(Vec::new(), value)
}

/// Appends the encoding of `value` to `out` (a frame's header space).
fn encode_body_after<T: Serialize>(mut out: Vec<u8>, value: &T) -> Vec<u8> {
    // Most bodies are far smaller than this: one allocation, no measuring pass.
    out.reserve(BODY_GUESS_BYTES);
    let start = out.len();
    // Encoding our own in-memory values cannot fail (postcard fails only on a full
    // buffer, and this one grows); a body beyond the limit is a programming error
    // (callers bound names, lists and batches).
    let out = postcard::to_extend(value, out).expect("postcard encodes into a growing Vec");
    assert!(
        out.len() - start <= MAX_BODY_BYTES as usize,
        "message exceeds MAX_BODY_BYTES"
    );
    out
}

/// Room reserved for a body before encoding it (a Write of 1 MiB has 1,044 bytes).
const BODY_GUESS_BYTES: usize = 2048;

/// Decodes a message body. Refused: bodies over [`MAX_BODY_BYTES`], bytes that do not
/// decode, trailing bytes, and non-canonical encodings (an integer in more varint bytes
/// than it needs), so that every accepted body re-encodes to itself. Allocations are
/// bounded by the body: postcard preallocates at most a small cautious amount per
/// sequence and reads every element from the input.
pub fn decode_body<T: DeserializeOwned + Serialize>(body: &[u8]) -> Result<T, FrameError> {
    if body.len() > MAX_BODY_BYTES as usize {
        return Err(FrameError::BodyTooLarge(body.len() as u32));
    }
    let (value, rest) =
        postcard::take_from_bytes::<T>(body).map_err(|e| FrameError::BadBody(e.to_string()))?;
    if !rest.is_empty() {
        return Err(FrameError::BadBody(format!(
            "{} trailing bytes after the message",
            rest.len()
        )));
    }
    // A non-canonical varint is strictly longer than the canonical one, so equal
    // lengths mean equal bytes.
    let canonical = postcard::serialize_with_flavor(&value, postcard::ser_flavors::Size::default())
        .map_err(|e| FrameError::BadBody(e.to_string()))?;
    if canonical != body.len() {
        return Err(FrameError::BadBody(format!(
            "non-canonical encoding: {} bytes where {canonical} suffice",
            body.len()
        )));
    }
    Ok(value)
}

/// Encodes a request frame's header and body; `data_len` bytes of bulk data follow.
pub fn encode_request(request_id: u64, env: &Envelope, data_len: u32) -> Vec<u8> {
    encode_request_flags(request_id, env, data_len, 0)
}

/// [`encode_request`] with header flags: 0, or [`FLAG_NO_REPLY`] for a request whose
/// sender reads no response.
pub fn encode_request_flags(request_id: u64, env: &Envelope, data_len: u32, flags: u16) -> Vec<u8> {
    assert!(data_len <= MAX_DATA_BYTES);
    assert_eq!(
        flags & !(FLAG_NO_REPLY | FLAG_COMPRESSED),
        0,
        "a request's flags"
    );
    let header = Header {
        version: VERSION,
        opcode: env.req.opcode() as u16,
        flags,
        request_id,
        status: 0,
        body_len: 0,
        data_len,
        body_crc: 0,
    };
    frame_with_body(header, env)
}

/// A frame of `header` (its body length and CRC filled in here) and `value` as body,
/// encoded in place after the header.
fn frame_with_body<T: Serialize>(mut header: Header, value: &T) -> Vec<u8> {
    let mut frame = encode_body_after(vec![0; crate::HEADER_LEN], value);
    let body = &frame[crate::HEADER_LEN..];
    header.body_len = body.len() as u32;
    header.body_crc = crate::crc32c(body);
    frame[..crate::HEADER_LEN].copy_from_slice(&header.encode());
    frame
}

/// Decodes a request body that arrived under `header`, checking checksum, opcode and the
/// bulk data length the request implies.
pub fn decode_request(header: &Header, body: &[u8]) -> Result<Envelope, FrameError> {
    if header.is_response() {
        return Err(FrameError::BadFlags(header.flags));
    }
    header.check_body(body)?;
    let env: Envelope = decode_body(body)?;
    let op = env.req.opcode();
    if op as u16 != header.opcode {
        return Err(FrameError::OpcodeMismatch {
            header: header.opcode,
            body: op as u16,
        });
    }
    let expected = if op.bulk_in() { header.data_len } else { 0 };
    if header.data_len != expected {
        return Err(FrameError::DataLength {
            got: header.data_len,
            expected,
        });
    }
    Ok(env)
}

/// Encodes a response frame's header and body; `data_len` bytes of bulk data follow.
pub fn encode_response(
    request_id: u64,
    opcode: Opcode,
    result: &Result<Response, WireError>,
    data_len: u32,
) -> Vec<u8> {
    encode_response_flags(request_id, opcode, result, data_len, 0)
}

/// [`encode_response`] with extra header flags: 0, or [`FLAG_COMPRESSED`] when the
/// `data_len` bytes that follow are a compressed data section.
pub fn encode_response_flags(
    request_id: u64,
    opcode: Opcode,
    result: &Result<Response, WireError>,
    data_len: u32,
    flags: u16,
) -> Vec<u8> {
    assert!(data_len <= MAX_DATA_BYTES);
    assert_eq!(flags & !FLAG_COMPRESSED, 0, "a response's extra flags");
    let header = |status| Header {
        version: VERSION,
        opcode: opcode as u16,
        flags: FLAG_RESPONSE | flags,
        request_id,
        status,
        body_len: 0,
        data_len,
        body_crc: 0,
    };
    match result {
        Ok(resp) => frame_with_body(header(0), resp),
        Err(err) => {
            assert!(data_len == 0, "an error response carries no data");
            // Error messages are bounded so that the frame always fits.
            let mut e = err.clone();
            if e.message.len() > 4096 {
                let mut cut = 4096;
                while !e.message.is_char_boundary(cut) {
                    cut -= 1;
                }
                e.message.truncate(cut);
            }
            frame_with_body(header(e.code as u32), &e)
        }
    }
}

/// Decodes a response body. The outer `Result` is a bad frame (close the connection); the
/// inner one is the server's answer.
pub fn decode_response(
    header: &Header,
    body: &[u8],
) -> Result<Result<Response, WireError>, FrameError> {
    if !header.is_response() {
        return Err(FrameError::BadFlags(header.flags));
    }
    header.check_body(body)?;
    if header.status != 0 {
        let err: WireError = decode_body(body)?;
        if err.code as u32 != header.status || header.data_len != 0 {
            return Err(FrameError::BadBody(
                "error body disagrees with header".into(),
            ));
        }
        return Ok(Err(err));
    }
    Ok(Ok(decode_body(body)?))
}

/// Splits `len` bytes starting at local offset `offset` at block boundaries; returns the
/// length of each piece. Write requests carry one plain CRC32C per piece.
pub fn pieces(offset: u64, len: usize) -> impl Iterator<Item = usize> {
    let block = BLOCK_BYTES as u64;
    let mut pos = offset;
    // Saturating: offsets come from the network, and a range running past u64::MAX must
    // not panic here (Request::validate refuses it with FileTooBig).
    let end = offset.saturating_add(len as u64);
    std::iter::from_fn(move || {
        if pos >= end {
            return None;
        }
        let next = (pos / block + 1).saturating_mul(block);
        let piece = next.min(end) - pos;
        pos += piece;
        Some(piece as usize)
    })
}

/// The CRC32C of each block-bounded piece of `data`, written at local offset `offset`.
pub fn piece_crcs(offset: u64, data: &[u8]) -> Vec<u32> {
    let mut crcs = Vec::with_capacity(data.len() / BLOCK_BYTES as usize + 2);
    let mut at = 0;
    for len in pieces(offset, data.len()) {
        crcs.push(crate::crc32c(&data[at..at + len]));
        at += len;
    }
    crcs
}

pub(crate) fn check_path(path: &str) -> Result<(), WireError> {
    if path.len() > MAX_PATH_BYTES {
        return Err(WireError::new(
            ErrorCode::NameTooLong,
            format!(
                "path is {} bytes, the limit is {MAX_PATH_BYTES}",
                path.len()
            ),
        ));
    }
    if path.contains('\0') {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            "path contains a NUL byte",
        ));
    }
    Ok(())
}

/// Checks a layout hint: a stripe size as [`crate::stripe_size_error`] allows.
pub fn validate_hint(hint: &LayoutHint) -> Result<(), WireError> {
    if let Some(n) = hint.inline_bytes.filter(|&n| n > MAX_INLINE_BYTES) {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("inline threshold {n} exceeds {MAX_INLINE_BYTES} bytes"),
        ));
    }
    if let Some(why) = hint.stripe_size_bytes.and_then(crate::stripe_size_error) {
        return Err(WireError::new(ErrorCode::InvalidArgument, why));
    }
    if let Some(servers) = &hint.servers {
        let bad = |why: String| Err(WireError::new(ErrorCode::InvalidArgument, why));
        if servers.is_empty() || servers.len() > MAX_LAYOUT_SERVERS {
            return bad(format!(
                "a server list names 1 to {MAX_LAYOUT_SERVERS} servers, not {}",
                servers.len()
            ));
        }
        for (i, s) in servers.iter().enumerate() {
            if servers[..i].contains(s) {
                return bad(format!(
                    "data server {s} is named twice in the server list {servers:?}"
                ));
            }
        }
        if let Some(c) = hint.stripe_count {
            if c as usize != servers.len() {
                return bad(format!(
                    "stripe count {c} but the server list {servers:?} names {} servers",
                    servers.len()
                ));
            }
        }
        if hint.start_server.is_some() {
            return bad("a server list and a start server cannot be given together".into());
        }
        if hint.policy == Some(Policy::Local) {
            return bad("a server list fixes the servers: it excludes the local policy".into());
        }
    }
    Ok(())
}

/// An extended attribute name: 1 to [`MAX_XATTR_NAME`] bytes, no NUL (the kernel's
/// list answer separates names with NULs).
pub fn xattr_name_ok(name: &str) -> Result<(), WireError> {
    if name.is_empty() || name.len() > MAX_XATTR_NAME {
        return Err(WireError::new(
            ErrorCode::AttrRange,
            format!(
                "extended attribute name of {} bytes (1 to {MAX_XATTR_NAME})",
                name.len()
            ),
        ));
    }
    if name.contains('\0') {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            "extended attribute name holds a NUL byte",
        ));
    }
    Ok(())
}

/// A WriteInline's pieces: 1 to 1024, none empty, all ending within
/// [`MAX_INLINE_BYTES`] (their CRCs are checked by the metadata server).
pub fn validate_inline_pieces(pieces: &[InlinePiece]) -> Result<(), WireError> {
    let bad = |m: String| Err(WireError::new(ErrorCode::InvalidArgument, m));
    if pieces.is_empty() || pieces.len() > MAX_LIST_EXTENTS {
        return bad(format!(
            "an inline write has {} pieces, not 1..={MAX_LIST_EXTENTS}",
            pieces.len()
        ));
    }
    for p in pieces {
        if p.data.is_empty() {
            return bad(format!(
                "an inline write has an empty piece at {}",
                p.offset
            ));
        }
        let end = p.offset.checked_add(p.data.len() as u64);
        if end.map_or(true, |e| e > MAX_INLINE_BYTES as u64) {
            return Err(WireError::new(
                ErrorCode::NotInline,
                format!(
                    "an inline piece of {} bytes at {} ends past {MAX_INLINE_BYTES}",
                    p.data.len(),
                    p.offset
                ),
            ));
        }
    }
    Ok(())
}

pub(crate) fn check_unit(unit: u32) -> Result<(), WireError> {
    validate_hint(&LayoutHint {
        stripe_size_bytes: Some(unit),
        ..LayoutHint::default()
    })
}

/// Largest offset a Seek may start from: far enough below `u64::MAX` that mapping
/// offsets between byte spaces (a file, a server's share, a target's object) cannot
/// overflow. Clients keep files far smaller.
pub const MAX_SEEK_OFFSET: u64 = 1 << 62;

/// A range of a Punch or Allocate: not empty, and its end fits in a u64.
pub(crate) fn check_range(offset: u64, len: u64) -> Result<(), WireError> {
    if len == 0 {
        return Err(WireError::new(ErrorCode::InvalidArgument, "empty range"));
    }
    offset.checked_add(len).map(|_| ()).ok_or_else(|| {
        WireError::new(
            ErrorCode::FileTooBig,
            format!("range of {len} bytes at {offset} ends beyond the largest offset"),
        )
    })
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
