//! Permission checks by uid, gid, supplementary groups and mode bits, as Linux does them
//! (root bypasses read and write checks, and execute checks when any x bit is set or the
//! inode is a directory).

use crate::store::Inode;
use stripefs_wire::{Cred, ErrorCode, FileType, WireError};

pub const R: u32 = 4;
pub const W: u32 = 2;
pub const X: u32 = 1;

pub use stripefs_wire::{S_ISGID, S_ISUID};
const S_ISVTX: u32 = 0o1000;

pub fn in_group(cred: &Cred, gid: u32) -> bool {
    cred.gid == gid || cred.groups.contains(&gid)
}

/// Whether `cred` may access `inode` with every bit of `mask` (R|W|X).
pub fn may(cred: &Cred, inode: &Inode, mask: u32) -> bool {
    let mask = mask & 7;
    if cred.uid == 0 {
        let exec_ok = inode.ftype == FileType::Dir || inode.mode & 0o111 != 0;
        return mask & X == 0 || exec_ok;
    }
    let bits = if cred.uid == inode.uid {
        inode.mode >> 6
    } else if in_group(cred, inode.gid) {
        inode.mode >> 3
    } else {
        inode.mode
    } & 7;
    bits & mask == mask
}

fn mask_text(mask: u32) -> String {
    let mut s = String::new();
    for (bit, c) in [(R, 'r'), (W, 'w'), (X, 'x')] {
        if mask & bit != 0 {
            s.push(c);
        }
    }
    s
}

/// `may`, or `PermissionDenied` naming the inode and the access.
pub fn check(cred: &Cred, inode: &Inode, ino: u64, mask: u32) -> Result<(), WireError> {
    if may(cred, inode, mask) {
        return Ok(());
    }
    Err(WireError::new(
        ErrorCode::PermissionDenied,
        format!(
            "uid {} may not {} inode {ino} (mode {:o}, owner {}:{})",
            cred.uid,
            mask_text(mask),
            inode.mode,
            inode.uid,
            inode.gid
        ),
    ))
}

/// Write and search permission on a directory whose entries change.
pub fn check_dir_change(cred: &Cred, dir: &Inode, ino: u64) -> Result<(), WireError> {
    check(cred, dir, ino, W | X)
}

/// The sticky-bit rule: in a sticky directory only the owner of the entry's inode, the
/// owner of the directory or root may remove or rename the entry.
pub fn check_sticky(
    cred: &Cred,
    dir: &Inode,
    dir_ino: u64,
    victim: &Inode,
    name: &str,
) -> Result<(), WireError> {
    if dir.mode & S_ISVTX == 0 || cred.uid == 0 || cred.uid == dir.uid || cred.uid == victim.uid {
        return Ok(());
    }
    Err(WireError::new(
        ErrorCode::NotPermitted,
        format!(
            "uid {} may not remove {name:?} from sticky directory inode {dir_ino}",
            cred.uid
        ),
    ))
}

pub fn is_owner(cred: &Cred, inode: &Inode) -> bool {
    cred.uid == 0 || cred.uid == inode.uid
}

pub fn require_owner(cred: &Cred, inode: &Inode, ino: u64, what: &str) -> Result<(), WireError> {
    if is_owner(cred, inode) {
        return Ok(());
    }
    Err(WireError::new(
        ErrorCode::NotPermitted,
        format!(
            "uid {} may not {what} inode {ino} owned by uid {}",
            cred.uid, inode.uid
        ),
    ))
}

/// Whether `new` is `old` with some of its set-user-ID and set-group-ID bits cleared
/// and nothing else changed.
pub fn only_clears_setid(old: u32, new: u32) -> bool {
    let (old, new) = (old & 0o7777, new & 0o7777);
    new & !old == 0 && (old & !new) & !(S_ISUID | S_ISGID) == 0
}

/// Bits cleared when someone other than root writes or truncates a file (as Linux
/// does): set-user-ID always; set-group-ID when the group may execute, or when the writer
/// is not in the file's group.
pub fn strip_setid_on_write(cred: &Cred, inode: &Inode) -> u32 {
    if cred.uid == 0 {
        return inode.mode;
    }
    stripefs_wire::mode_after_write(inode.mode, inode.gid, cred.gid, &cred.groups)
}

/// Bits cleared when ownership changes (as Linux does): set-user-ID always,
/// set-group-ID when the group may execute (without group execute it marks mandatory
/// locking, not privilege).
pub fn strip_setid_on_chown(mode: u32) -> u32 {
    let mut m = mode & !S_ISUID;
    if m & 0o010 != 0 {
        m &= !S_ISGID;
    }
    m
}
