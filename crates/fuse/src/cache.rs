//! The mount's own caches of what the metadata server said: the change stamps that
//! decide whether an open keeps the kernel's cached pages (`CacheStamps`), and
//! directory attributes for the kernel's permission checks (`DirAttrs`).

use crate::ATTR_TTL;
use std::collections::HashMap;
use std::sync::Mutex;
use stripefs_client::{Attr, FileType};

/// What the metadata server says of a file's state: every change of its data or
/// attributes moves its ctime (a write, at the writer's flush, also mtime and maybe
/// size), so equal stamps mean an unchanged file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    ctime_ns: i64,
    mtime_ns: i64,
    size: u64,
}

impl Stamp {
    pub(crate) fn of(a: &Attr) -> Stamp {
        Stamp {
            ctime_ns: a.ctime_ns,
            mtime_ns: a.mtime_ns,
            size: a.size,
        }
    }
}

/// Most files whose stamps are remembered; past it all are forgotten (their next opens
/// drop the cache, as without stamps).
const MAX_STAMPS: usize = 1 << 18;

/// The stamp each file had when the kernel's cached pages of it were read: an open that
/// finds the same stamp keeps the cache (FOPEN_KEEP_CACHE), any other drops it.
#[derive(Default)]
pub(crate) struct CacheStamps(Mutex<HashMap<u64, Stamp>>);

impl CacheStamps {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Stamp>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether pages cached under the previous stamp of `ino` are still right at `now`;
    /// remembers `now` for the pages read from here on.
    pub(crate) fn keep(&self, ino: u64, now: Stamp) -> bool {
        let mut m = self.lock();
        if m.get(&ino) == Some(&now) {
            return true;
        }
        if m.len() >= MAX_STAMPS {
            m.clear();
        }
        m.insert(ino, now);
        false
    }

    pub(crate) fn forget(&self, ino: u64) {
        self.lock().remove(&ino);
    }
}

/// Most directories whose attributes [`DirAttrs`] keeps; past it all are forgotten.
const MAX_DIR_ATTRS: usize = 1 << 16;

/// Directory attributes as the metadata server last gave them, for at most [`ATTR_TTL`]
/// after it gave them, kept exact across this mount's own entry changes.
///
/// Why: with `default_permissions` the kernel checks a directory's mode before each
/// create or unlink in it, and each entry change makes it forget the directory's
/// attributes, so every create or unlink would cost a GETATTR round trip to the
/// metadata server. Answered from here, it costs none. Staleness is what the kernel's
/// own attribute cache allows (changes by other clients are seen within [`ATTR_TTL`]).
#[derive(Default)]
pub(crate) struct DirAttrs(Mutex<HashMap<u64, (std::time::Instant, Attr)>>);

impl DirAttrs {
    pub(crate) fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<u64, (std::time::Instant, Attr)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The attributes of directory `ino`, if fetched less than [`ATTR_TTL`] ago.
    pub(crate) fn fresh(&self, ino: u64) -> Option<Attr> {
        let m = self.lock();
        let (at, a) = m.get(&ino)?;
        (at.elapsed() < ATTR_TTL).then(|| a.clone())
    }

    /// Attributes just given by the metadata server; only directories are kept.
    pub(crate) fn store(&self, a: &Attr) {
        if a.ftype != FileType::Dir {
            return;
        }
        let mut m = self.lock();
        if m.len() >= MAX_DIR_ATTRS {
            m.clear();
        }
        m.insert(a.ino.0, (std::time::Instant::now(), a.clone()));
    }

    /// This mount added `child` to `parent`: the metadata server set the directory's
    /// mtime and ctime to the new entry's ctime (one operation, one clock reading) and
    /// counted a new subdirectory's `..` link. (A create that found an existing file,
    /// made meanwhile by another client, gives that file's ctime: within the staleness
    /// allowed across clients.)
    pub(crate) fn entry_added(&self, parent: u64, child: &Attr) {
        if let Some((_, a)) = self.lock().get_mut(&parent) {
            a.mtime_ns = a.mtime_ns.max(child.ctime_ns);
            a.ctime_ns = a.ctime_ns.max(child.ctime_ns);
            if child.ftype == FileType::Dir {
                a.nlink += 1;
            }
        }
    }

    pub(crate) fn forget(&self, ino: u64) {
        self.lock().remove(&ino);
    }
}
