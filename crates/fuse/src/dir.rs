//! Open directories. The metadata server pages a directory by name (the last name seen
//! is the cookie), which survives concurrent creates and removes; the kernel instead asks
//! by offset. A handle therefore keeps the entries it has fetched, in order, and offset
//! `k` means "after the k-th entry of this handle's listing" (0 and 1 are `.` and `..`).
//! Offsets stay valid for the handle's life; `rewinddir` (offset 0) starts a fresh listing.

use std::sync::Mutex;
use stripefs_client::{Client, DirEntry, InodeId, WireError, READDIR_PAGE};

pub struct DirHandle {
    pub ino: InodeId,
    listing: Mutex<Listing>,
}

#[derive(Default)]
struct Listing {
    entries: Vec<DirEntry>,
    done: bool,
}

/// One entry as the kernel wants it: inode, the offset of the next entry, type, name.
pub type Item = (u64, i64, fuser::FileType, String);

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
        client: &Client,
        offset: i64,
        mut add: impl FnMut(Item) -> bool,
    ) -> Result<(), WireError> {
        let mut l = self.listing.lock().unwrap_or_else(|p| p.into_inner());
        if offset <= 0 {
            *l = Listing::default();
        }
        let mut pos = offset.max(0) as usize;
        loop {
            let item = match pos {
                0 => (self.ino.0, 1, fuser::FileType::Directory, ".".to_string()),
                1 => (self.ino.0, 2, fuser::FileType::Directory, "..".to_string()),
                _ => {
                    let i = pos - 2;
                    if i >= l.entries.len() {
                        if l.done {
                            return Ok(());
                        }
                        l.fetch(client, self.ino)?;
                        continue;
                    }
                    let e = &l.entries[i];
                    (
                        e.ino.0,
                        pos as i64 + 1,
                        crate::errno::kind(e.ftype),
                        e.name.clone(),
                    )
                }
            };
            if add(item) {
                return Ok(());
            }
            pos += 1;
        }
    }
}

impl Listing {
    fn fetch(&mut self, client: &Client, ino: InodeId) -> Result<(), WireError> {
        let after = self
            .entries
            .last()
            .map(|e| e.name.clone())
            .unwrap_or_default();
        let (page, done) = client.readdir_page(ino, &after, READDIR_PAGE)?;
        // An empty page that is not the last would loop forever; treat it as the end.
        self.done = done || page.is_empty();
        self.entries.extend(page);
        Ok(())
    }
}
