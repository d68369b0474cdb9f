//! Client errors as errno values, and client attributes as the kernel's.

use std::time::{Duration, SystemTime, UNIX_EPOCH};
use stripefs_client::{Attr, ErrorCode, FileType, WireError};

/// The errno for a client error (transport failures are EIO): the client's rule, which
/// the interception library follows too.
pub fn errno(e: &WireError) -> i32 {
    stripefs_client::posix_errno(e)
}

/// As [`errno`], for a call on an inode the kernel holds: an inode that no longer exists
/// (another client removed or replaced it) is ESTALE, so that the kernel looks the path
/// up again instead of reporting ENOENT for a name that exists.
pub fn errno_ino(e: &WireError) -> i32 {
    match e.code {
        ErrorCode::NotFound | ErrorCode::StaleHandle => libc::ESTALE,
        _ => errno(e),
    }
}

pub fn kind(t: FileType) -> fuser::FileType {
    match t {
        FileType::File => fuser::FileType::RegularFile,
        FileType::Dir => fuser::FileType::Directory,
        FileType::Symlink => fuser::FileType::Symlink,
        FileType::Fifo => fuser::FileType::NamedPipe,
        FileType::Socket => fuser::FileType::Socket,
        FileType::BlockDev => fuser::FileType::BlockDevice,
        FileType::CharDev => fuser::FileType::CharDevice,
    }
}

const NS_PER_S: i64 = 1_000_000_000;

/// The `SystemTime` that fuser turns into the kernel's timespec for `ns`.
///
/// Before 1970 fuser maps a timespec `(secs < 0, nsecs)` to `EPOCH - (-secs s + nsecs ns)`
/// (and back), not to `secs + nsecs`: for -1.25 s, the timespec (-2, 750000000), the
/// kernel would see -2.75 s. So a time before the epoch is handed over in that form.
pub fn time(ns: i64) -> SystemTime {
    if ns >= 0 {
        return UNIX_EPOCH + Duration::from_nanos(ns as u64);
    }
    let secs = ns.div_euclid(NS_PER_S).unsigned_abs();
    let nanos = ns.rem_euclid(NS_PER_S) as u32;
    UNIX_EPOCH - Duration::new(secs, nanos)
}

/// Nanoseconds since the epoch of a time from fuser: the inverse of [`time`].
pub fn time_ns(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => {
            let d = e.duration();
            let ns = -i128::from(d.as_secs()) * i128::from(NS_PER_S) + i128::from(d.subsec_nanos());
            i64::try_from(ns).unwrap_or(i64::MIN)
        }
    }
}

/// The kernel's attributes of `a`; `allocated_bytes` is what the file occupies on the
/// data servers (`Client::allocated_bytes`), reported as `st_blocks` so that `du` is true.
/// The values are [`stripefs_client::posix_attr`]'s, which the interception library
/// reports too.
pub fn file_attr(a: &Attr, allocated_bytes: u64) -> fuser::FileAttr {
    let p = stripefs_client::posix_attr(a, allocated_bytes);
    fuser::FileAttr {
        ino: p.ino,
        size: p.size,
        blocks: p.blocks,
        atime: time(p.atime_ns),
        mtime: time(p.mtime_ns),
        ctime: time(p.ctime_ns),
        crtime: time(p.ctime_ns),
        kind: kind(p.ftype),
        perm: p.perm as u16,
        nlink: p.nlink,
        uid: p.uid,
        gid: p.gid,
        rdev: p.rdev,
        blksize: p.blksize,
        flags: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip() {
        for ns in [
            0i64,
            1,
            1_700_000_000_123_456_789,
            -5_000_000_001,
            -1,
            i64::MIN,
        ] {
            assert_eq!(time_ns(time(ns)), ns);
        }
    }

    #[test]
    fn times_before_1970_reach_the_kernel_as_timespecs() {
        // fuser's conversion: (-(EPOCH - t).secs, (EPOCH - t).subsec_nanos).
        let kernel = |t: SystemTime| {
            let d = UNIX_EPOCH.duration_since(t).unwrap();
            (-(d.as_secs() as i64), d.subsec_nanos())
        };
        assert_eq!(kernel(time(-1_250_000_000)), (-2, 750_000_000));
        assert_eq!(kernel(time(-1_000_000_000)), (-1, 0));
        assert_eq!(kernel(time(-1)), (-1, 999_999_999));
    }

    #[test]
    fn transport_errors_are_eio_and_gone_inodes_stale() {
        let e = |c| WireError::new(c, "x");
        assert_eq!(errno(&e(ErrorCode::Timeout)), libc::EIO);
        assert_eq!(errno(&e(ErrorCode::Unreachable)), libc::EIO);
        assert_eq!(errno(&e(ErrorCode::NotFound)), libc::ENOENT);
        assert_eq!(errno_ino(&e(ErrorCode::NotFound)), libc::ESTALE);
        assert_eq!(errno(&e(ErrorCode::NoSpace)), libc::ENOSPC);
    }
}
