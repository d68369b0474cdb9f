//! Set-ID bits on write: which files have them (`SetIdFiles`), and clearing them before
//! a write by a writer without CAP_FSETID, as Linux does (`kill_setid`; the kernel
//! leaves it to the daemon with `FUSE_HANDLE_KILLPRIV_V2`).

use crate::fs::{setattr, Shared};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use stripefs_client::{Attr, Client, FileType, InodeId, SetAttrs, WireError};
use stripefs_wire::{mode_after_write, S_ISGID, S_ISUID};

/// Regular files whose attributes, as the metadata server last gave them to this mount,
/// have set-ID bits: a write to one of them by a writer without CAP_FSETID clears them
/// first (see [`kill_setid`]). Usually empty; kept up to date wherever attributes
/// arrive (lookups, getattr, open, create, setattr), so that a chmod seen here counts
/// from then on.
#[derive(Default)]
pub(crate) struct SetIdFiles {
    /// Mode and group of each such file.
    map: Mutex<HashMap<u64, (u32, u32)>>,
    /// Whether `map` may hold anything: writes skip its lock while it is empty.
    any: AtomicBool,
}

impl SetIdFiles {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (u32, u32)>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn note(&self, a: &Attr) {
        if a.ftype != FileType::File {
            return;
        }
        if a.mode & SETID_BITS != 0 {
            self.lock().insert(a.ino.0, (a.mode, a.gid));
            self.any.store(true, Ordering::Release);
        } else if self.any.load(Ordering::Acquire) {
            let mut m = self.lock();
            m.remove(&a.ino.0);
            if m.is_empty() {
                self.any.store(false, Ordering::Release);
            }
        }
    }

    /// Whether a write to `ino` by a writer of primary group `gid`, with these FUSE
    /// write flags, may have set-ID bits to clear first: set-user-ID, or set-group-ID
    /// with group execute or a writer whose primary group is not the file's (its
    /// supplementary groups are looked at by [`kill_setid`]).
    pub(crate) fn must_kill(&self, ino: u64, gid: u32, write_flags: u32) -> bool {
        if write_flags & FUSE_WRITE_KILL_SUIDGID == 0 || !self.any.load(Ordering::Acquire) {
            return false;
        }
        self.lock()
            .get(&ino)
            .is_some_and(|&(mode, file_gid)| mode_after_write(mode, file_gid, gid, &[]) != mode)
    }
}

const SETID_BITS: u32 = S_ISUID | S_ISGID;

/// Write flag (FUSE 7.31): the writer may not keep set-ID bits (it lacks CAP_FSETID).
/// Sent with `FUSE_HANDLE_KILLPRIV_V2`, where clearing them is the daemon's work.
pub(crate) const FUSE_WRITE_KILL_SUIDGID: u32 = 1 << 2;

/// Before a write by `cred` through handle `fh`, which lacks CAP_FSETID: clears the
/// set-user-ID bit, and the set-group-ID bit when the group may execute or the writer is
/// not in the file's group, as Linux does on a write (the kernel leaves it to us with
/// `FUSE_HANDLE_KILLPRIV_V2`). The mode is read fresh, so that only those bits change;
/// the metadata server lets whoever may write clear them.
pub(crate) fn kill_setid(
    sh: &Shared,
    c: &Client,
    cred: &stripefs_wire::Cred,
    ino: u64,
    fh: u64,
) -> Result<(), WireError> {
    let a = c.getattr(InodeId(ino))?;
    let mode = a.mode & 0o7777;
    let kept = mode_after_write(mode, a.gid, cred.gid, &cred.groups);
    if kept == mode {
        sh.seen(&a);
        return Ok(());
    }
    let attrs = SetAttrs {
        mode: Some(kept),
        ..SetAttrs::default()
    };
    let a = setattr(sh, c, InodeId(ino), attrs, Some(fh))?;
    sh.seen(&a);
    // The kernel's cached mode still has the bits.
    sh.forget_attrs(ino);
    Ok(())
}
