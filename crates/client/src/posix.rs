//! What POSIX-facing clients (the FUSE mount, the interception library) report for the
//! cluster's attributes and errors: one definition, so that a `stat` answered by the
//! library natively shows exactly what the same `stat` through the mount shows.

use stripefs_wire::{Attr, ErrorCode, FileType, WireError};

/// The block size `stat` reports: programs size their buffers by it.
pub const BLKSIZE_BYTES: u32 = 1 << 20;

/// The errno for a client error. Transport failures (a server down, timed out or
/// speaking nonsense) are EIO, which programs treat as "the storage failed".
pub fn posix_errno(e: &WireError) -> i32 {
    match e.code {
        ErrorCode::Timeout
        | ErrorCode::Unreachable
        | ErrorCode::BadFrame
        | ErrorCode::VersionMismatch
        | ErrorCode::UnexpectedMessage
        | ErrorCode::AuthFailed => libc::EIO,
        code => code.errno(),
    }
}

/// A file's attributes as `stat(2)` shows them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PosixAttr {
    pub ino: u64,
    pub ftype: FileType,
    /// Permission bits (07777), without the file type.
    pub perm: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub size: u64,
    /// 512-byte blocks the file occupies on the data servers (data and checksums).
    pub blocks: u64,
    pub blksize: u32,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

impl PosixAttr {
    /// `st_mode`: the file type bits and the permission bits.
    pub fn mode(&self) -> u32 {
        type_bits(self.ftype) | self.perm
    }
}

/// The `st_mode` file type bits (`S_IFREG`...) of a file type.
pub fn type_bits(t: FileType) -> u32 {
    match t {
        FileType::File => libc::S_IFREG,
        FileType::Dir => libc::S_IFDIR,
        FileType::Symlink => libc::S_IFLNK,
        FileType::Fifo => libc::S_IFIFO,
        FileType::Socket => libc::S_IFSOCK,
        FileType::BlockDev => libc::S_IFBLK,
        FileType::CharDev => libc::S_IFCHR,
    }
}

/// The attributes `stat` shows for `a`; `allocated_bytes` is what the file occupies on
/// the data servers (`Client::allocated_bytes`), reported as `st_blocks` so that `du`
/// is true. Directories show 4096 bytes, special files 0.
pub fn posix_attr(a: &Attr, allocated_bytes: u64) -> PosixAttr {
    let size = match a.ftype {
        FileType::Symlink | FileType::File => a.size,
        FileType::Dir => 4096,
        FileType::Fifo | FileType::Socket | FileType::BlockDev | FileType::CharDev => 0,
    };
    PosixAttr {
        ino: a.ino.0,
        ftype: a.ftype,
        perm: a.mode & 0o7777,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        size,
        blocks: allocated_bytes.div_ceil(512),
        blksize: BLKSIZE_BYTES,
        atime_ns: a.atime_ns,
        mtime_ns: a.mtime_ns,
        ctime_ns: a.ctime_ns,
    }
}
