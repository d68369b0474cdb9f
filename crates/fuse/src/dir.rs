//! Open directories. The metadata server pages a directory by name (the last name seen
//! is the cookie), which survives concurrent creates and removes; the kernel instead asks
//! by offset. A handle therefore keeps the entries it has fetched, in order, and offset
//! `k` means "after the k-th entry of this handle's listing" (0 and 1 are `.` and `..`).
//! Offsets stay valid for the handle's life; `rewinddir` (offset 0) starts a fresh listing.
//!
//! Where the kernel may ask for READDIRPLUS, pages are fetched with ReadDirPlus: each
//! entry comes with its attributes, which the kernel caches as a lookup's, so that a
//! stat of every entry after the listing (`ls -l`, `find`, `du`) needs no round trip.

use std::sync::Mutex;
use stripefs_client::{Attr, Client, DirEntry, ErrorCode, InodeId, WireError, READDIR_PAGE};

pub struct DirHandle {
    pub ino: InodeId,
    listing: Mutex<Listing>,
}

#[derive(Default)]
struct Listing {
    /// Entries, with their attributes when fetched with ReadDirPlus.
    entries: Vec<(DirEntry, Option<Attr>)>,
    done: bool,
}

/// One entry as the kernel wants it: inode, the offset of the next entry, type, name,
/// and its attributes if the listing has them (never for `.` and `..`).
pub type Item<'a> = (u64, i64, fuser::FileType, &'a str, Option<&'a Attr>);

/// How pages are fetched: names only, or with attributes (as `who`, then as `fallback`,
/// the mount's own credentials, if `who` may read the directory but not search it).
#[derive(Clone, Copy)]
pub enum Fetch<'a> {
    Names(&'a Client),
    Plus {
        who: &'a Client,
        fallback: &'a Client,
    },
}

impl DirHandle {
    pub fn new(ino: InodeId) -> DirHandle {
        DirHandle {
            ino,
            listing: Mutex::new(Listing::default()),
        }
    }

    /// Whether a read from `offset` is past the end of a listing fetched to its end:
    /// it returns nothing, and needs no round trip (the kernel's last READDIR of each
    /// listing is one).
    pub fn past_end(&self, offset: i64) -> bool {
        let l = self.listing.lock().unwrap_or_else(|p| p.into_inner());
        offset > 0 && l.done && offset as usize >= l.entries.len() + 2
    }

    /// Feeds entries from `offset` on to `add` until it reports a full buffer or the
    /// listing ends.
    pub fn fill(
        &self,
        fetch: Fetch<'_>,
        offset: i64,
        mut add: impl FnMut(Item<'_>) -> bool,
    ) -> Result<(), WireError> {
        let mut l = self.listing.lock().unwrap_or_else(|p| p.into_inner());
        if offset <= 0 {
            *l = Listing::default();
        }
        let mut pos = offset.max(0) as usize;
        loop {
            let full = match pos {
                0 => add((self.ino.0, 1, fuser::FileType::Directory, ".", None)),
                1 => add((self.ino.0, 2, fuser::FileType::Directory, "..", None)),
                _ => {
                    let i = pos - 2;
                    if i >= l.entries.len() {
                        if l.done {
                            return Ok(());
                        }
                        l.fetch(fetch, self.ino)?;
                        continue;
                    }
                    let (e, a) = &l.entries[i];
                    add((
                        e.ino.0,
                        pos as i64 + 1,
                        crate::errno::kind(e.ftype),
                        &e.name,
                        a.as_ref(),
                    ))
                }
            };
            if full {
                return Ok(());
            }
            pos += 1;
        }
    }
}

impl Listing {
    fn fetch(&mut self, fetch: Fetch<'_>, ino: InodeId) -> Result<(), WireError> {
        let after = self
            .entries
            .last()
            .map(|(e, _)| e.name.clone())
            .unwrap_or_default();
        let (page, done) = match fetch {
            Fetch::Names(c) => {
                let (page, done) = c.readdir_page(ino, &after, READDIR_PAGE)?;
                (
                    page.into_iter().map(|e| (e, None)).collect::<Vec<_>>(),
                    done,
                )
            }
            Fetch::Plus { who, fallback } => {
                let r = match who.readdir_plus_page(ino, &after, READDIR_PAGE) {
                    // Read but not search permission: the names are the caller's to see
                    // (ReadDir), the attributes only the kernel's to cache, which checks
                    // search permission itself before any use of them. If the mount's
                    // own credentials may not have them either, names only.
                    Err(e) if e.code == ErrorCode::PermissionDenied => {
                        let (names, done) = who.readdir_page(ino, &after, READDIR_PAGE)?;
                        match fallback.readdir_plus_page(ino, &after, READDIR_PAGE) {
                            Ok(r) => r,
                            Err(_) => {
                                let page = names.into_iter().map(|e| (e, None)).collect();
                                self.add_page(page, done);
                                return Ok(());
                            }
                        }
                    }
                    r => r?,
                };
                let (page, done) = r;
                let page = page
                    .into_iter()
                    .map(|(name, a)| {
                        let e = DirEntry {
                            name,
                            ino: a.ino,
                            ftype: a.ftype,
                        };
                        (e, Some(a))
                    })
                    .collect::<Vec<_>>();
                (page, done)
            }
        };
        self.add_page(page, done);
        Ok(())
    }

    fn add_page(&mut self, page: Vec<(DirEntry, Option<Attr>)>, done: bool) {
        // An empty page that is not the last would loop forever; treat it as the end.
        self.done = done || page.is_empty();
        self.entries.extend(page);
    }
}
