//! The on-disk schema: redb tables, the inode record and typed access to both.
//!
//! Every value read from disk is decoded with bounded allocations and checked; a record
//! that does not decode is reported as `Internal` naming the inode, never unwrapped.
//! Storage failures are reported as `Io`; the writer treats `Io` and `Internal` as fatal
//! for the whole batch (see `writer.rs`), so an operation may fail half-way through its
//! writes only with one of those two codes.

use crate::legacy;
use crate::overlay::Gen;
use redb::{
    Database, Durability, ReadOnlyTable, ReadTransaction, ReadableTable, Table, TableDefinition,
};
use serde::{Deserialize, Serialize};
use stripefs_wire::{
    Attr, DirEntry, ErrorCode, FileType, InodeId, Layout, LayoutHint, Policy, WireError,
};

/// inode number -> encoded [`Inode`].
pub const INODES: TableDefinition<u64, &[u8]> = TableDefinition::new("inodes");
/// (parent inode, name) -> (child inode, file type code).
pub const DIRENTS: TableDefinition<(u64, &str), (u64, u8)> = TableDefinition::new("dirents");
/// Named counters, see the `META_*` keys.
pub const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// Files whose data objects must be removed: inode number -> encoded [`Layout`].
pub const PURGE: TableDefinition<u64, &[u8]> = TableDefinition::new("purge");
/// Inodes with no links left that are kept because a client had them open.
pub const ORPHANS: TableDefinition<u64, ()> = TableDefinition::new("orphans");

/// Next inode number to hand out; inode numbers are never reused.
pub const META_NEXT_INO: &str = "next_ino";
/// Data server where the next new file's stripes start (rotates for an even spread).
pub const META_NEXT_SERVER: &str = "next_server";
/// Number of live regular files and of directories, kept for MetaStatus.
pub const META_FILES: &str = "files";
pub const META_DIRS: &str = "dirs";
/// Sequence number of the last metadata-log record the tables include (see `wal.rs`).
pub const META_WAL_SEQ: &str = "wal_seq";

/// Leading byte of an encoded inode record, so that the format can evolve.
/// Format of inode records. 1: the first release's; 2: layout hints gained
/// `start_server`; 3: sockets and devices, with a device number; 4: the same fields in
/// postcard instead of bincode 1 (formats 1-3, read by `legacy.rs`); 5: layout hints
/// gained an explicit server list and a placement policy; 6: inline data and the
/// inline threshold of layout hints; 7: extended attributes. Old records are read and
/// rewritten in the new form when changed.
const RECORD_VERSION: u8 = 7;
/// Leading byte of an encoded purge-queue layout in postcard. Layouts written by
/// bincode 1 had no format byte; they start with the stripe size's low byte, which is
/// 0 in every valid layout (a multiple of 4096), so the two cannot be confused.
const LAYOUT_VERSION: u8 = 4;
/// Largest encoded record we accept from disk (a layout of many servers plus a target).
const MAX_RECORD_BYTES: u64 = 1 << 20;

/// Everything the server knows about one inode.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inode {
    pub ftype: FileType,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub layout: Option<Layout>,
    pub dir_layout: LayoutHint,
    pub target: Option<String>,
    /// For directories, the one directory that holds their entry (root: itself); it
    /// answers `..` and the "into its own subtree" rename check. 0 for other types.
    pub parent: u64,
    /// Device number of a block or character device; 0 for other types.
    pub rdev: u32,
    /// A regular file's bytes while they live here (docs/objects.md, "Inline files").
    pub inline: Option<InlineData>,
    /// Extended attributes (name with its namespace prefix, value), sorted by name.
    pub xattrs: Vec<(String, Vec<u8>)>,
}

/// The bytes of an inline file, with what keeps them right.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InlineData {
    /// Most bytes the file may hold inline (from its directory when it was created).
    pub max: u32,
    /// Counts the changes of the bytes, so that a move to the data servers can tell
    /// whether the bytes it copied are still the file's.
    pub gen: u64,
    /// A move to the data servers may have begun (and died): the file's objects may hold
    /// bytes, which the next move removes first. False for a file that never moved.
    pub spilled: bool,
    /// CRC32C of `bytes`, computed when they were written.
    pub crc: u32,
    /// The file's bytes; as long as the file.
    pub bytes: Vec<u8>,
}

impl InlineData {
    /// The bytes checked against their CRC: a damaged byte is an error, never served,
    /// moved or built upon (which would give it a fresh CRC).
    pub fn check(&self, ino: u64) -> Result<(), WireError> {
        let actual = stripefs_wire::crc32c(&self.bytes);
        if actual == self.crc {
            return Ok(());
        }
        Err(WireError::new(
            ErrorCode::Checksum,
            format!(
                "inline bytes of inode {ino} are damaged: {} bytes with CRC {actual:#010x}, \
                 stored {:#010x}",
                self.bytes.len(),
                self.crc
            ),
        ))
    }

    pub fn empty(max: u32) -> InlineData {
        InlineData {
            max,
            gen: 0,
            spilled: false,
            crc: stripefs_wire::crc32c(&[]),
            bytes: Vec::new(),
        }
    }
}

impl Inode {
    pub fn attr(&self, ino: u64) -> Attr {
        Attr {
            ino: InodeId(ino),
            ftype: self.ftype,
            mode: self.mode,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            size: self.size,
            atime_ns: self.atime_ns,
            mtime_ns: self.mtime_ns,
            ctime_ns: self.ctime_ns,
            rdev: self.rdev,
            layout: self.layout.clone(),
            dir_layout: self.dir_layout.clone(),
            inline: self.inline.as_ref().map(|i| stripefs_wire::Inline {
                max: i.max,
                crc: i.crc,
                data: None,
            }),
        }
    }

    /// [`Inode::attr`] with the inline bytes, if any and if they pass their CRC
    /// (answers to opens and ReadInline; a reader of damaged bytes asks ReadInline,
    /// which reports the damage).
    pub fn attr_with_data(&self, ino: u64) -> Attr {
        let mut a = self.attr(ino);
        if let (Some(out), Some(i)) = (a.inline.as_mut(), self.inline.as_ref()) {
            if i.check(ino).is_ok() {
                out.data = Some(i.bytes.clone());
            }
        }
        a
    }

    pub fn is_dir(&self) -> bool {
        self.ftype == FileType::Dir
    }
}

/// Decodes all of `bytes` (postcard), refusing trailing bytes and oversized records.
pub fn decode_postcard<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    limit: u64,
) -> Result<T, String> {
    if bytes.len() as u64 > limit {
        return Err(format!(
            "{} bytes, beyond the limit of {limit}",
            bytes.len()
        ));
    }
    let (v, rest) = postcard::take_from_bytes(bytes).map_err(|e| e.to_string())?;
    if !rest.is_empty() {
        return Err(format!("{} trailing bytes", rest.len()));
    }
    Ok(v)
}

/// Appends the postcard encoding of `value` to `out`.
pub fn encode_postcard_into<T: Serialize>(out: Vec<u8>, value: &T) -> Vec<u8> {
    // Encoding into a growing Vec cannot fail.
    postcard::to_extend(value, out).expect("postcard encodes into a growing Vec")
}

/// The on-disk form of an inode: its own types, so that a change of the wire protocol
/// can never silently change the database format.
#[derive(Serialize, Deserialize)]
struct DiskInode {
    ftype: u8,
    mode: u32,
    nlink: u32,
    uid: u32,
    gid: u32,
    size: u64,
    atime_ns: i64,
    mtime_ns: i64,
    ctime_ns: i64,
    layout: Option<DiskLayout>,
    dir_layout: DiskHint,
    target: Option<String>,
    parent: u64,
    rdev: u32,
    inline: Option<DiskInline>,
    xattrs: Vec<(String, Vec<u8>)>,
}

/// Version 6 records: no extended attributes.
#[derive(Serialize, Deserialize)]
struct DiskInodeV6 {
    ftype: u8,
    mode: u32,
    nlink: u32,
    uid: u32,
    gid: u32,
    size: u64,
    atime_ns: i64,
    mtime_ns: i64,
    ctime_ns: i64,
    layout: Option<DiskLayout>,
    dir_layout: DiskHint,
    target: Option<String>,
    parent: u64,
    rdev: u32,
    inline: Option<DiskInline>,
}

#[derive(Serialize, Deserialize)]
struct DiskInline {
    max: u32,
    gen: u64,
    spilled: bool,
    crc: u32,
    #[serde(with = "serde_bytes")]
    bytes: Vec<u8>,
}

/// Version 5 records: no inline data, no inline threshold.
#[derive(Serialize, Deserialize)]
struct DiskInodeV5 {
    ftype: u8,
    mode: u32,
    nlink: u32,
    uid: u32,
    gid: u32,
    size: u64,
    atime_ns: i64,
    mtime_ns: i64,
    ctime_ns: i64,
    layout: Option<DiskLayout>,
    dir_layout: DiskHintV5,
    target: Option<String>,
    parent: u64,
    rdev: u32,
}

/// Version 3 and 4 records: the hint had no server list and no policy.
#[derive(Serialize, Deserialize)]
struct DiskInodeV4 {
    ftype: u8,
    mode: u32,
    nlink: u32,
    uid: u32,
    gid: u32,
    size: u64,
    atime_ns: i64,
    mtime_ns: i64,
    ctime_ns: i64,
    layout: Option<DiskLayout>,
    dir_layout: DiskHintV4,
    target: Option<String>,
    parent: u64,
    rdev: u32,
}

/// Version 2 records: no device number.
#[derive(Serialize, Deserialize)]
struct DiskInodeV2 {
    ftype: u8,
    mode: u32,
    nlink: u32,
    uid: u32,
    gid: u32,
    size: u64,
    atime_ns: i64,
    mtime_ns: i64,
    ctime_ns: i64,
    layout: Option<DiskLayout>,
    dir_layout: DiskHintV4,
    target: Option<String>,
    parent: u64,
}

#[derive(Serialize, Deserialize)]
struct DiskLayout {
    stripe_size_bytes: u32,
    servers: Vec<u32>,
}

#[derive(Serialize, Deserialize)]
struct DiskHint {
    stripe_size_bytes: Option<u32>,
    stripe_count: Option<u32>,
    start_server: Option<u32>,
    servers: Option<Vec<u32>>,
    /// 0 spread, 1 local.
    policy: Option<u8>,
    inline_bytes: Option<u32>,
}

/// A hint of format 5.
#[derive(Serialize, Deserialize)]
struct DiskHintV5 {
    stripe_size_bytes: Option<u32>,
    stripe_count: Option<u32>,
    start_server: Option<u32>,
    servers: Option<Vec<u32>>,
    policy: Option<u8>,
}

/// A hint of formats 2-4.
#[derive(Serialize, Deserialize)]
struct DiskHintV4 {
    stripe_size_bytes: Option<u32>,
    stripe_count: Option<u32>,
    start_server: Option<u32>,
}

impl From<DiskHintV4> for DiskHint {
    fn from(h: DiskHintV4) -> DiskHint {
        DiskHint {
            stripe_size_bytes: h.stripe_size_bytes,
            stripe_count: h.stripe_count,
            start_server: h.start_server,
            servers: None,
            policy: None,
            inline_bytes: None,
        }
    }
}

fn policy_code(p: Policy) -> u8 {
    match p {
        Policy::Spread => 0,
        Policy::Local => 1,
    }
}

fn policy_from_code(c: u8) -> Result<Policy, String> {
    match c {
        0 => Ok(Policy::Spread),
        1 => Ok(Policy::Local),
        c => Err(format!("unknown placement policy {c}")),
    }
}

/// Version 1 records: the hint had no start server.
#[derive(Serialize, Deserialize)]
struct DiskInodeV1 {
    ftype: FileType,
    mode: u32,
    nlink: u32,
    uid: u32,
    gid: u32,
    size: u64,
    atime_ns: i64,
    mtime_ns: i64,
    ctime_ns: i64,
    layout: Option<DiskLayout>,
    dir_layout: (Option<u32>, Option<u32>),
    target: Option<String>,
    parent: u64,
}

impl From<&Layout> for DiskLayout {
    fn from(l: &Layout) -> DiskLayout {
        DiskLayout {
            stripe_size_bytes: l.stripe_size_bytes,
            servers: l.servers.iter().map(|s| s.0).collect(),
        }
    }
}

impl From<DiskLayout> for Layout {
    fn from(l: DiskLayout) -> Layout {
        Layout {
            stripe_size_bytes: l.stripe_size_bytes,
            servers: l.servers.into_iter().map(stripefs_wire::ServerId).collect(),
        }
    }
}

fn to_disk(inode: &Inode) -> DiskInode {
    let h = &inode.dir_layout;
    DiskInode {
        ftype: type_code(inode.ftype),
        mode: inode.mode,
        nlink: inode.nlink,
        uid: inode.uid,
        gid: inode.gid,
        size: inode.size,
        atime_ns: inode.atime_ns,
        mtime_ns: inode.mtime_ns,
        ctime_ns: inode.ctime_ns,
        layout: inode.layout.as_ref().map(DiskLayout::from),
        dir_layout: DiskHint {
            stripe_size_bytes: h.stripe_size_bytes,
            stripe_count: h.stripe_count,
            start_server: h.start_server,
            servers: h.servers.clone(),
            policy: h.policy.map(policy_code),
            inline_bytes: h.inline_bytes,
        },
        target: inode.target.clone(),
        parent: inode.parent,
        rdev: inode.rdev,
        inline: inode.inline.as_ref().map(|i| DiskInline {
            max: i.max,
            gen: i.gen,
            spilled: i.spilled,
            crc: i.crc,
            bytes: i.bytes.clone(),
        }),
        xattrs: inode.xattrs.clone(),
    }
}

fn from_disk(d: DiskInode) -> Result<Inode, String> {
    Ok(Inode {
        ftype: type_from_code(0, "", d.ftype)
            .map_err(|_| format!("unknown file type {}", d.ftype))?,
        mode: d.mode,
        nlink: d.nlink,
        uid: d.uid,
        gid: d.gid,
        size: d.size,
        atime_ns: d.atime_ns,
        mtime_ns: d.mtime_ns,
        ctime_ns: d.ctime_ns,
        layout: d.layout.map(Layout::from),
        dir_layout: LayoutHint {
            stripe_size_bytes: d.dir_layout.stripe_size_bytes,
            stripe_count: d.dir_layout.stripe_count,
            start_server: d.dir_layout.start_server,
            servers: d.dir_layout.servers,
            policy: d.dir_layout.policy.map(policy_from_code).transpose()?,
            inline_bytes: d.dir_layout.inline_bytes,
        },
        target: d.target,
        parent: d.parent,
        rdev: d.rdev,
        inline: d.inline.map(|i| InlineData {
            max: i.max,
            gen: i.gen,
            spilled: i.spilled,
            crc: i.crc,
            bytes: i.bytes,
        }),
        xattrs: d.xattrs,
    })
}

/// A format 6 record in the current on-disk form (no extended attributes).
fn upgrade_v6(d: DiskInodeV6) -> DiskInode {
    DiskInode {
        ftype: d.ftype,
        mode: d.mode,
        nlink: d.nlink,
        uid: d.uid,
        gid: d.gid,
        size: d.size,
        atime_ns: d.atime_ns,
        mtime_ns: d.mtime_ns,
        ctime_ns: d.ctime_ns,
        layout: d.layout,
        dir_layout: d.dir_layout,
        target: d.target,
        parent: d.parent,
        rdev: d.rdev,
        inline: d.inline,
        xattrs: Vec::new(),
    }
}

/// A format 2 record in the current on-disk form (no device number: none had one).
fn upgrade_v2(d: DiskInodeV2) -> DiskInode {
    upgrade_v4(DiskInodeV4 {
        ftype: d.ftype,
        mode: d.mode,
        nlink: d.nlink,
        uid: d.uid,
        gid: d.gid,
        size: d.size,
        atime_ns: d.atime_ns,
        mtime_ns: d.mtime_ns,
        ctime_ns: d.ctime_ns,
        layout: d.layout,
        dir_layout: d.dir_layout,
        target: d.target,
        parent: d.parent,
        rdev: 0,
    })
}

/// A format 5 record in the current on-disk form (no inline data or threshold).
fn upgrade_v5(d: DiskInodeV5) -> DiskInode {
    let h = d.dir_layout;
    DiskInode {
        ftype: d.ftype,
        mode: d.mode,
        nlink: d.nlink,
        uid: d.uid,
        gid: d.gid,
        size: d.size,
        atime_ns: d.atime_ns,
        mtime_ns: d.mtime_ns,
        ctime_ns: d.ctime_ns,
        layout: d.layout,
        dir_layout: DiskHint {
            stripe_size_bytes: h.stripe_size_bytes,
            stripe_count: h.stripe_count,
            start_server: h.start_server,
            servers: h.servers,
            policy: h.policy,
            inline_bytes: None,
        },
        target: d.target,
        parent: d.parent,
        rdev: d.rdev,
        inline: None,
        xattrs: Vec::new(),
    }
}

/// A format 3 or 4 record in the current on-disk form (no server list, no policy).
fn upgrade_v4(d: DiskInodeV4) -> DiskInode {
    DiskInode {
        ftype: d.ftype,
        mode: d.mode,
        nlink: d.nlink,
        uid: d.uid,
        gid: d.gid,
        size: d.size,
        atime_ns: d.atime_ns,
        mtime_ns: d.mtime_ns,
        ctime_ns: d.ctime_ns,
        layout: d.layout,
        dir_layout: d.dir_layout.into(),
        target: d.target,
        parent: d.parent,
        rdev: d.rdev,
        inline: None,
        xattrs: Vec::new(),
    }
}

/// A format 1 record in the current on-disk form (its hint had no start server).
fn upgrade_v1(d: DiskInodeV1) -> DiskInode {
    DiskInode {
        ftype: type_code(d.ftype),
        mode: d.mode,
        nlink: d.nlink,
        uid: d.uid,
        gid: d.gid,
        size: d.size,
        atime_ns: d.atime_ns,
        mtime_ns: d.mtime_ns,
        ctime_ns: d.ctime_ns,
        layout: d.layout,
        dir_layout: DiskHint {
            stripe_size_bytes: d.dir_layout.0,
            stripe_count: d.dir_layout.1,
            start_server: None,
            servers: None,
            policy: None,
            inline_bytes: None,
        },
        target: d.target,
        parent: d.parent,
        rdev: 0,
        inline: None,
        xattrs: Vec::new(),
    }
}

pub fn encode_inode(inode: &Inode) -> Vec<u8> {
    let out = encode_postcard_into(vec![RECORD_VERSION], &to_disk(inode));
    assert!(
        out.len() as u64 <= MAX_RECORD_BYTES,
        "inode record too large"
    );
    out
}

pub fn decode_inode(ino: u64, bytes: &[u8]) -> Result<Inode, WireError> {
    let corrupt = |why: String| {
        WireError::new(
            ErrorCode::Internal,
            format!("inode {ino} record is corrupt: {why}"),
        )
    };
    match bytes.split_first() {
        Some((&RECORD_VERSION, rest)) => decode_postcard::<DiskInode>(rest, MAX_RECORD_BYTES)
            .and_then(from_disk)
            .map_err(corrupt),
        Some((6, rest)) => decode_postcard::<DiskInodeV6>(rest, MAX_RECORD_BYTES)
            .and_then(|d| from_disk(upgrade_v6(d)))
            .map_err(corrupt),
        Some((5, rest)) => decode_postcard::<DiskInodeV5>(rest, MAX_RECORD_BYTES)
            .and_then(|d| from_disk(upgrade_v5(d)))
            .map_err(corrupt),
        Some((4, rest)) => decode_postcard::<DiskInodeV4>(rest, MAX_RECORD_BYTES)
            .and_then(|d| from_disk(upgrade_v4(d)))
            .map_err(corrupt),
        Some((3, rest)) => legacy::from_bytes::<DiskInodeV4>(rest)
            .and_then(|d| from_disk(upgrade_v4(d)))
            .map_err(corrupt),
        Some((2, rest)) => legacy::from_bytes::<DiskInodeV2>(rest)
            .and_then(|d| from_disk(upgrade_v2(d)))
            .map_err(corrupt),
        Some((1, rest)) => legacy::from_bytes::<DiskInodeV1>(rest)
            .and_then(|d| from_disk(upgrade_v1(d)))
            .map_err(corrupt),
        Some((v, _)) => Err(corrupt(format!(
            "record format {v} is newer than this build reads ({RECORD_VERSION}): upgrade stripefs"
        ))),
        None => Err(corrupt("empty record".into())),
    }
}

pub fn encode_layout(layout: &Layout) -> Vec<u8> {
    encode_postcard_into(vec![LAYOUT_VERSION], &DiskLayout::from(layout))
}

pub fn decode_layout(ino: u64, bytes: &[u8]) -> Result<Layout, WireError> {
    let decoded = match bytes.split_first() {
        Some((&LAYOUT_VERSION, rest)) => decode_postcard::<DiskLayout>(rest, MAX_RECORD_BYTES),
        // bincode 1 (no format byte): the stripe size's low byte comes first.
        Some((0, _)) => legacy::from_bytes::<DiskLayout>(bytes),
        Some((v, _)) => Err(format!(
            "layout format {v} is newer than this build reads ({LAYOUT_VERSION}): upgrade stripefs"
        )),
        None => Err("empty record".into()),
    };
    decoded.map(Layout::from).map_err(|e| {
        WireError::new(
            ErrorCode::Internal,
            format!("purge entry of inode {ino} is corrupt: {e}"),
        )
    })
}

pub fn type_code(t: FileType) -> u8 {
    match t {
        FileType::File => 0,
        FileType::Dir => 1,
        FileType::Symlink => 2,
        FileType::Fifo => 3,
        FileType::Socket => 4,
        FileType::BlockDev => 5,
        FileType::CharDev => 6,
    }
}

pub fn type_from_code(parent: u64, name: &str, code: u8) -> Result<FileType, WireError> {
    Ok(match code {
        0 => FileType::File,
        1 => FileType::Dir,
        2 => FileType::Symlink,
        3 => FileType::Fifo,
        4 => FileType::Socket,
        5 => FileType::BlockDev,
        6 => FileType::CharDev,
        _ => {
            return Err(WireError::new(
                ErrorCode::Internal,
                format!("entry {name:?} in inode {parent} has unknown type code {code}"),
            ))
        }
    })
}

/// Wraps a storage error with what we were doing.
pub fn io(what: impl std::fmt::Display, e: impl std::fmt::Display) -> WireError {
    WireError::new(ErrorCode::Io, format!("metadata store: {what}: {e}"))
}

/// Wraps a redb error with what we were doing: `NoSpace` when the disk is full, else
/// `Io`.
pub fn storage(what: impl std::fmt::Display, e: impl Into<redb::Error>) -> WireError {
    let e: redb::Error = e.into();
    let code = match &e {
        redb::Error::Io(io) => crate::wal::io_code(io),
        _ => ErrorCode::Io,
    };
    WireError::new(code, format!("metadata store: {what}: {e}"))
}

/// True for errors after which a write transaction cannot be trusted.
pub fn is_fatal(e: &WireError) -> bool {
    matches!(e.code, ErrorCode::Io | ErrorCode::Internal)
}

/// Read access shared by read and write transactions, so that every lookup rule is
/// written once.
pub trait Tables {
    fn inode(&self, ino: u64) -> Result<Option<Inode>, WireError>;
    fn entry(&self, parent: u64, name: &str) -> Result<Option<(u64, FileType)>, WireError>;
    /// Up to `limit` entries of `parent` named after `after`, and whether that was all.
    fn entries(
        &self,
        parent: u64,
        after: &str,
        limit: usize,
    ) -> Result<(Vec<DirEntry>, bool), WireError>;
    fn counter(&self, key: &str) -> Result<u64, WireError>;
}

fn get_inode<T: ReadableTable<u64, &'static [u8]>>(
    t: &T,
    ino: u64,
) -> Result<Option<Inode>, WireError> {
    match t
        .get(ino)
        .map_err(|e| io(format!("reading inode {ino}"), e))?
    {
        Some(v) => Ok(Some(decode_inode(ino, v.value())?)),
        None => Ok(None),
    }
}

fn get_entry<T: ReadableTable<(u64, &'static str), (u64, u8)>>(
    t: &T,
    parent: u64,
    name: &str,
) -> Result<Option<(u64, FileType)>, WireError> {
    let got = t
        .get((parent, name))
        .map_err(|e| io(format!("looking up {name:?} in inode {parent}"), e))?;
    match got {
        Some(v) => {
            let (child, code) = v.value();
            Ok(Some((child, type_from_code(parent, name, code)?)))
        }
        None => Ok(None),
    }
}

fn list_entries<T: ReadableTable<(u64, &'static str), (u64, u8)>>(
    t: &T,
    parent: u64,
    after: &str,
    limit: usize,
) -> Result<(Vec<DirEntry>, bool), WireError> {
    use std::ops::Bound::{Excluded, Unbounded};
    let what = || format!("listing inode {parent}");
    // (parent, "") sorts before every real name, and (parent + 1, "") after all of them.
    let upper = match parent.checked_add(1) {
        Some(next) => Excluded((next, "")),
        None => Unbounded,
    };
    let range = t
        .range::<(u64, &str)>((Excluded((parent, after)), upper))
        .map_err(|e| io(what(), e))?;
    let mut out = Vec::new();
    for item in range {
        let (k, v) = item.map_err(|e| io(what(), e))?;
        if out.len() == limit {
            return Ok((out, false));
        }
        let (_, name) = k.value();
        let (child, code) = v.value();
        out.push(DirEntry {
            name: name.to_string(),
            ino: InodeId(child),
            ftype: type_from_code(parent, name, code)?,
        });
    }
    Ok((out, true))
}

fn get_counter<T: ReadableTable<&'static str, u64>>(t: &T, key: &str) -> Result<u64, WireError> {
    let v = t
        .get(key)
        .map_err(|e| io(format!("reading counter {key}"), e))?;
    Ok(v.map(|v| v.value()).unwrap_or(0))
}

/// The tables of a read transaction.
pub struct Rd {
    pub inodes: ReadOnlyTable<u64, &'static [u8]>,
    pub dirents: ReadOnlyTable<(u64, &'static str), (u64, u8)>,
    pub meta: ReadOnlyTable<&'static str, u64>,
    pub purge: ReadOnlyTable<u64, &'static [u8]>,
    pub orphans: ReadOnlyTable<u64, ()>,
}

impl Rd {
    pub fn open(txn: &ReadTransaction) -> Result<Rd, WireError> {
        let e = |e| io("opening tables for reading", e);
        Ok(Rd {
            inodes: txn.open_table(INODES).map_err(e)?,
            dirents: txn.open_table(DIRENTS).map_err(e)?,
            meta: txn.open_table(META).map_err(e)?,
            purge: txn.open_table(PURGE).map_err(e)?,
            orphans: txn.open_table(ORPHANS).map_err(e)?,
        })
    }
}

impl Tables for Rd {
    fn inode(&self, ino: u64) -> Result<Option<Inode>, WireError> {
        get_inode(&self.inodes, ino)
    }
    fn entry(&self, parent: u64, name: &str) -> Result<Option<(u64, FileType)>, WireError> {
        get_entry(&self.dirents, parent, name)
    }
    fn entries(
        &self,
        parent: u64,
        after: &str,
        limit: usize,
    ) -> Result<(Vec<DirEntry>, bool), WireError> {
        list_entries(&self.dirents, parent, after, limit)
    }
    fn counter(&self, key: &str) -> Result<u64, WireError> {
        get_counter(&self.meta, key)
    }
}

/// Creates the tables of a new database (empty); no-op for an existing one.
pub fn create_tables(db: &Database) -> Result<(), WireError> {
    let txn = db.begin_write().map_err(|e| io("starting init", e))?;
    {
        let e = |e| io("creating tables", e);
        txn.open_table(INODES).map_err(e)?;
        txn.open_table(DIRENTS).map_err(e)?;
        txn.open_table(META).map_err(e)?;
        txn.open_table(PURGE).map_err(e)?;
        txn.open_table(ORPHANS).map_err(e)?;
    }
    txn.commit().map_err(|e| io("committing init", e))
}

/// Inserts `value` at `key`, or removes `key` for `None`.
fn set<'k, 'v, K: redb::Key + 'static, V: redb::Value + 'static>(
    t: &mut Table<K, V>,
    key: K::SelfType<'k>,
    value: Option<V::SelfType<'v>>,
) -> Result<(), redb::StorageError> {
    match value {
        Some(v) => t.insert(key, v).map(|_| ()),
        None => t.remove(key).map(|_| ()),
    }
}

/// Writes a layer of changes into redb, with the log position it covers, in one durable
/// transaction (a checkpoint).
pub fn commit_gen(db: &Database, gen: &Gen, wal_seq: u64) -> Result<(), WireError> {
    let mut txn = db
        .begin_write()
        .map_err(|e| storage("starting a checkpoint", e))?;
    txn.set_durability(Durability::Immediate);
    {
        let e = |e| storage("opening tables for a checkpoint", e);
        let mut inodes: Table<u64, &[u8]> = txn.open_table(INODES).map_err(e)?;
        let mut dirents: Table<(u64, &str), (u64, u8)> = txn.open_table(DIRENTS).map_err(e)?;
        let mut meta: Table<&str, u64> = txn.open_table(META).map_err(e)?;
        let mut purge: Table<u64, &[u8]> = txn.open_table(PURGE).map_err(e)?;
        let mut orphans: Table<u64, ()> = txn.open_table(ORPHANS).map_err(e)?;
        let w = |what: String| move |e: redb::StorageError| storage(what, e);
        for (&ino, v) in &gen.inodes {
            let bytes = v.as_ref().map(encode_inode);
            set(&mut inodes, ino, bytes.as_deref()).map_err(w(format!("updating inode {ino}")))?;
        }
        for (&parent, names) in &gen.dirents {
            for (name, v) in names {
                let v = v.map(|(child, t)| (child, type_code(t)));
                set(&mut dirents, (parent, name.as_str()), v)
                    .map_err(w(format!("updating {name:?} in inode {parent}")))?;
            }
        }
        for (key, v) in &gen.counters {
            set(&mut meta, key.as_str(), Some(*v)).map_err(w(format!("writing counter {key}")))?;
        }
        set(&mut meta, META_WAL_SEQ, Some(wal_seq))
            .map_err(w("writing the log position".into()))?;
        for (&ino, v) in &gen.purge {
            let bytes = v.as_ref().map(encode_layout);
            set(&mut purge, ino, bytes.as_deref())
                .map_err(w(format!("updating the purge entry of inode {ino}")))?;
        }
        for (&ino, &mark) in &gen.orphans {
            set(&mut orphans, ino, mark.then_some(()))
                .map_err(w(format!("updating orphan mark of inode {ino}")))?;
        }
    }
    txn.commit()
        .map_err(|e| storage("committing a checkpoint", e))
}

/// The inode `ino`, or `StaleHandle` naming it (inode numbers come from clients that
/// may hold them after the inode was removed).
pub fn need<T: Tables>(t: &T, ino: u64) -> Result<Inode, WireError> {
    t.inode(ino)?.ok_or_else(|| {
        WireError::new(
            ErrorCode::StaleHandle,
            format!("inode {ino} does not exist"),
        )
    })
}

/// The directory `ino`, or `StaleHandle` / `NotDir`.
pub fn need_dir<T: Tables>(t: &T, ino: u64) -> Result<Inode, WireError> {
    let inode = need(t, ino)?;
    if !inode.is_dir() {
        return Err(WireError::new(
            ErrorCode::NotDir,
            format!("inode {ino} is not a directory"),
        ));
    }
    Ok(inode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use stripefs_wire::ServerId;

    /// Inline bytes are encoded as one run (`serde_bytes`), which in postcard is exactly
    /// what a plain `Vec<u8>` gave before: stored inodes read and write as they did.
    #[test]
    fn inline_bytes_are_stored_as_a_plain_byte_vector_was() {
        #[derive(Serialize, Deserialize)]
        struct PlainInline {
            max: u32,
            gen: u64,
            spilled: bool,
            crc: u32,
            bytes: Vec<u8>,
        }
        let bytes: Vec<u8> = (0..3901u32).map(|i| (i * 13) as u8).collect();
        let new = DiskInline {
            max: 4096,
            gen: 7,
            spilled: true,
            crc: crc32c::crc32c(&bytes),
            bytes: bytes.clone(),
        };
        let old = PlainInline {
            max: 4096,
            gen: 7,
            spilled: true,
            crc: crc32c::crc32c(&bytes),
            bytes,
        };
        let enc = postcard::to_allocvec(&old).unwrap();
        assert_eq!(postcard::to_allocvec(&new).unwrap(), enc);
        let back: DiskInline = postcard::from_bytes(&enc).unwrap();
        assert_eq!(back.bytes, old.bytes);
    }

    /// bincode 1 (fixint, little-endian) by hand, to make records of formats 1-3 as
    /// the old builds wrote them (the whole-database fixture in tests/ has real ones).
    #[derive(Default)]
    struct Bin(Vec<u8>);

    impl Bin {
        fn u8(mut self, v: u8) -> Bin {
            self.0.push(v);
            self
        }
        fn u32(mut self, v: u32) -> Bin {
            self.0.extend(v.to_le_bytes());
            self
        }
        fn u64(mut self, v: u64) -> Bin {
            self.0.extend(v.to_le_bytes());
            self
        }
        fn opt_u32(self, v: Option<u32>) -> Bin {
            match v {
                Some(v) => self.u8(1).u32(v),
                None => self.u8(0),
            }
        }
        /// mode 0o755, nlink 2, uid 1, gid 2, size 0, atime 3, mtime 4, ctime 5,
        /// no layout.
        fn common(self) -> Bin {
            self.u32(0o755)
                .u32(2)
                .u32(1)
                .u32(2)
                .u64(0)
                .u64(3)
                .u64(4)
                .u64(5)
                .u8(0)
        }
    }

    /// Databases written by the first release (record format 1) still read.
    #[test]
    fn reads_format_1_records() {
        // ftype Dir (enum index 1), dir_layout (Some(65536), Some(2)), no target,
        // parent 1.
        let b = Bin::default().u8(1).u32(1).common();
        let b = b.opt_u32(Some(65536)).opt_u32(Some(2)).u8(0).u64(1);
        let i = decode_inode(7, &b.0).unwrap();
        assert_eq!(i.ftype, FileType::Dir);
        assert_eq!((i.mode, i.nlink, i.ctime_ns, i.parent), (0o755, 2, 5, 1));
        assert_eq!(i.dir_layout.stripe_size_bytes, Some(65536));
        assert_eq!(i.dir_layout.stripe_count, Some(2));
        assert_eq!(i.dir_layout.start_server, None);
        assert_eq!(decode_inode(7, &encode_inode(&i)).unwrap(), i);
        let mut future = encode_inode(&i);
        future[0] = 9;
        let err = decode_inode(7, &future).unwrap_err();
        assert!(err.message.contains("upgrade"), "{err}");
    }

    fn inode(mode: u32, size: u64, servers: Vec<u32>, target: Option<String>) -> Inode {
        Inode {
            ftype: FileType::File,
            mode,
            nlink: 1,
            uid: 5,
            gid: 6,
            size,
            atime_ns: -1,
            mtime_ns: 2,
            ctime_ns: 3,
            layout: Some(Layout {
                stripe_size_bytes: 4096,
                servers: servers.into_iter().map(ServerId).collect(),
            }),
            dir_layout: LayoutHint::default(),
            target,
            parent: 0,
            rdev: 0,
            inline: None,
            xattrs: Vec::new(),
        }
    }

    #[test]
    fn inline_bytes_round_trip_and_format_5_records_are_not_inline() {
        let mut i = inode(0o644, 5, vec![1], None);
        i.inline = Some(InlineData {
            max: 4096,
            gen: 7,
            spilled: true,
            crc: stripefs_wire::crc32c(b"hello"),
            bytes: b"hello".to_vec(),
        });
        i.dir_layout.inline_bytes = Some(100);
        assert_eq!(decode_inode(3, &encode_inode(&i)).unwrap(), i);
        // A format 5 record: the current one without the trailing fields.
        let plain = inode(0o644, 5, vec![1], None);
        let d = to_disk(&plain);
        let h = d.dir_layout;
        let old = DiskInodeV5 {
            ftype: d.ftype,
            mode: d.mode,
            nlink: d.nlink,
            uid: d.uid,
            gid: d.gid,
            size: d.size,
            atime_ns: d.atime_ns,
            mtime_ns: d.mtime_ns,
            ctime_ns: d.ctime_ns,
            layout: d.layout,
            dir_layout: DiskHintV5 {
                stripe_size_bytes: h.stripe_size_bytes,
                stripe_count: h.stripe_count,
                start_server: h.start_server,
                servers: h.servers,
                policy: h.policy,
            },
            target: d.target,
            parent: d.parent,
            rdev: d.rdev,
        };
        let v5 = encode_postcard_into(vec![5], &old);
        assert_eq!(decode_inode(3, &v5).unwrap(), plain);
    }

    #[test]
    fn xattrs_round_trip_and_format_6_records_have_none() {
        let mut i = inode(0o644, 5, vec![1], None);
        i.inline = Some(InlineData::empty(4096));
        i.xattrs = vec![
            ("trusted.t".into(), vec![]),
            ("user.a".into(), b"1".to_vec()),
        ];
        assert_eq!(decode_inode(3, &encode_inode(&i)).unwrap(), i);
        // A format 6 record: the current one without the attributes.
        i.xattrs.clear();
        let d = to_disk(&i);
        let old = DiskInodeV6 {
            ftype: d.ftype,
            mode: d.mode,
            nlink: d.nlink,
            uid: d.uid,
            gid: d.gid,
            size: d.size,
            atime_ns: d.atime_ns,
            mtime_ns: d.mtime_ns,
            ctime_ns: d.ctime_ns,
            layout: d.layout,
            dir_layout: d.dir_layout,
            target: d.target,
            parent: d.parent,
            rdev: d.rdev,
            inline: d.inline,
        };
        let v6 = encode_postcard_into(vec![6], &old);
        assert_eq!(decode_inode(3, &v6).unwrap(), i);
    }

    /// Records of formats 2 (no device number) and 3 (bincode 1) still read, as what
    /// they were; purge-queue layouts of bincode 1 too.
    #[test]
    fn reads_format_2_and_3_records() {
        // ftype Fifo (code 3), hint (None, None, Some(1)), no target, parent 0.
        let v2 = Bin::default().u8(2).u8(type_code(FileType::Fifo)).common();
        let v2 = v2.opt_u32(None).opt_u32(None).opt_u32(Some(1)).u8(0).u64(0);
        let i = decode_inode(7, &v2.0).unwrap();
        assert_eq!((i.ftype, i.mode, i.rdev), (FileType::Fifo, 0o755, 0));
        assert_eq!(i.dir_layout.start_server, Some(1));
        assert_eq!(decode_inode(7, &encode_inode(&i)).unwrap(), i);
        let mut v3 = v2;
        v3.0[0] = 3;
        let v3 = v3.u32(0x0801);
        let i = decode_inode(7, &v3.0).unwrap();
        assert_eq!((i.ftype, i.rdev), (FileType::Fifo, 0x0801));
        let old_layout = Bin::default().u32(65536).u64(2).u32(3).u32(0);
        let l = decode_layout(7, &old_layout.0).unwrap();
        assert_eq!(l.stripe_size_bytes, 65536);
        assert_eq!(l.servers, vec![ServerId(3), ServerId(0)]);
        assert_eq!(decode_layout(7, &encode_layout(&l)).unwrap(), l);
    }

    /// Format 4 (postcard, hint without server list and policy) still reads; format 5
    /// keeps a directory's server list and policy.
    #[test]
    fn reads_format_4_records_and_keeps_placement_fields() {
        let v4 = DiskInodeV4 {
            ftype: type_code(FileType::Dir),
            mode: 0o755,
            nlink: 2,
            uid: 1,
            gid: 2,
            size: 0,
            atime_ns: 3,
            mtime_ns: 4,
            ctime_ns: 5,
            layout: None,
            dir_layout: DiskHintV4 {
                stripe_size_bytes: Some(65536),
                stripe_count: Some(2),
                start_server: None,
            },
            target: None,
            parent: 1,
            rdev: 0,
        };
        let bytes = encode_postcard_into(vec![4], &v4);
        let i = decode_inode(7, &bytes).unwrap();
        assert_eq!(i.dir_layout.stripe_size_bytes, Some(65536));
        assert_eq!(i.dir_layout.stripe_count, Some(2));
        assert_eq!(
            (i.dir_layout.servers.clone(), i.dir_layout.policy),
            (None, None)
        );
        let mut d = i;
        d.dir_layout.servers = Some(vec![3, 1]);
        d.dir_layout.policy = Some(Policy::Local);
        let enc = encode_inode(&d);
        assert_eq!(enc[0], RECORD_VERSION);
        assert_eq!(decode_inode(7, &enc).unwrap(), d);
        d.dir_layout.policy = Some(Policy::Spread);
        assert_eq!(decode_inode(7, &encode_inode(&d)).unwrap(), d);
    }

    #[test]
    fn device_records_keep_type_and_number() {
        for (t, rdev) in [
            (FileType::BlockDev, stripefs_wire::make_rdev(8, 1)),
            (FileType::CharDev, stripefs_wire::make_rdev(4095, 0xfffff)),
            (FileType::Socket, 0),
        ] {
            let mut i = inode(0o600, 0, vec![], None);
            i.ftype = t;
            i.layout = None;
            i.rdev = rdev;
            assert_eq!(decode_inode(3, &encode_inode(&i)).unwrap(), i);
        }
    }

    proptest! {
        #[test]
        fn inode_records_round_trip(mode in 0u32..0o7777, size: u64,
                                    servers in proptest::collection::vec(0u32..64, 0..16),
                                    target in proptest::option::of(".{0,40}"),
                                    rdev: u32) {
            let mut i = inode(mode, size, servers, target);
            i.rdev = rdev;
            prop_assert_eq!(decode_inode(9, &encode_inode(&i)).unwrap(), i);
        }

        #[test]
        fn corrupt_records_are_errors_not_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Err(e) = decode_inode(9, &bytes) {
                prop_assert_eq!(e.code, ErrorCode::Internal);
                prop_assert!(e.message.contains("inode 9"));
            }
            let _ = decode_layout(9, &bytes);
        }
    }
}
