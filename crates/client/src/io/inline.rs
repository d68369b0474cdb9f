//! Inline files on the client side (docs/objects.md, "Inline files"): while the
//! metadata server holds a file's bytes, this client's writes to it are applied to a
//! copy here and sent as one WriteInline at flush, fsync or close (no data server; at
//! flush and close answered once visible, before the commit that makes it durable, which
//! an fsync waits for); reads are served from the bytes the open brought, or fetched with
//! ReadInline when they reach past what is known, as a striped read asks for the size.
//! A write past the file's threshold, or any operation on space (fallocate, punch),
//! first moves the file to its data servers (`Uninline`), after which it is striped for
//! good. Every byte received is checked against the CRC the metadata server stored.

use super::{context, lock as lock_state, InodeIo};
use crate::DEFAULT_WRITE_WINDOW_BYTES;
use std::sync::{Mutex, MutexGuard};
use stripefs_wire::{
    crc32c, Attr, Cred, ErrorCode, Inline, InlinePiece, Request, WireError, MAX_LIST_EXTENTS,
};

/// Most pieces of unsent inline writes kept before they are sent (the threshold bounds
/// their bytes already; this bounds many small scattered ones).
const MAX_DIRTY_PIECES: usize = MAX_LIST_EXTENTS;

/// What this client knows of an inline file.
pub(crate) struct InlineState {
    max: u32,
    /// The bytes (checked against their CRC), with the writes made here applied;
    /// `None` when not known (a write-only open) or not to be trusted.
    bytes: Option<Vec<u8>>,
    /// Writes made here not yet sent, in order.
    dirty: Vec<(u64, Vec<u8>)>,
}

pub(crate) type InlineSlot = Mutex<Option<InlineState>>;

/// The bytes of `i`, checked against their stored CRC; `None` if not sent.
fn checked(i: &Inline, what: &str) -> Result<Option<Vec<u8>>, WireError> {
    match &i.data {
        None => Ok(None),
        Some(d) if crc32c(d) == i.crc => Ok(Some(d.clone())),
        Some(d) => Err(WireError::new(
            ErrorCode::Checksum,
            format!(
                "inline bytes of {what} ({} bytes) fail their stored checksum {:#010x}",
                d.len(),
                i.crc
            ),
        )),
    }
}

impl InlineState {
    pub fn from_attr(attr: &Attr) -> Option<InlineState> {
        let i = attr.inline.as_ref()?;
        Some(InlineState {
            max: i.max,
            // A damaged copy is not kept: the first read fetches it again and reports it.
            bytes: checked(i, &attr.ino.to_string()).ok().flatten(),
            dirty: Vec::new(),
        })
    }
}

fn lock(m: &InlineSlot) -> MutexGuard<'_, Option<InlineState>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn is_not_inline(e: &WireError) -> bool {
    e.code == ErrorCode::NotInline
}

impl InodeIo {
    /// Whether the file's bytes are (as far as this client knows) inline.
    pub fn is_inline(&self) -> bool {
        lock(&self.inline).is_some()
    }

    /// Takes in what an open of this inode answered: fresh inline bytes, or that the
    /// file lives on its data servers now.
    pub fn note_open(&self, attr: &Attr) {
        let mut il = lock(&self.inline);
        let Some(st) = il.as_mut() else { return };
        if !st.dirty.is_empty() {
            // Our unsent writes go first; their send learns what became of the file.
            return;
        }
        match &attr.inline {
            None => *il = None,
            Some(i) => match checked(i, &self.describe()) {
                Ok(Some(b)) => st.bytes = Some(b),
                // A write-only open brings no bytes, but their size and CRC say
                // whether ours are still the file's.
                Ok(None)
                    if st
                        .bytes
                        .as_ref()
                        .is_some_and(|b| b.len() as u64 == attr.size && crc32c(b) == i.crc) => {}
                _ => st.bytes = None,
            },
        }
    }

    /// Applies a write to the inline bytes; `Ok(false)` when the file is striped (or
    /// has just been moved to its data servers, because the write passes its threshold):
    /// the caller writes to the data servers.
    pub(super) fn write_inline(
        &self,
        cred: &Cred,
        offset: u64,
        data: &[u8],
    ) -> Result<bool, WireError> {
        let mut il = lock(&self.inline);
        let Some(st) = il.as_mut() else {
            return Ok(false);
        };
        let end = offset + data.len() as u64;
        if end > st.max as u64 {
            drop(il);
            self.move_out(cred)?;
            return Ok(false);
        }
        if let Some(b) = st.bytes.as_mut() {
            if b.len() < end as usize {
                b.resize(end as usize, 0);
            }
            b[offset as usize..end as usize].copy_from_slice(data);
        }
        match st.dirty.last_mut() {
            // Sequential small writes (a stream of 4 KiB, stdio) become one piece.
            Some((at, piece)) if *at + piece.len() as u64 == offset => {
                piece.extend_from_slice(data)
            }
            _ => st.dirty.push((offset, data.to_vec())),
        }
        {
            let mut s = lock_state(&self.state);
            s.unflushed_end = Some(s.unflushed_end.unwrap_or(0).max(end));
            s.unflushed_mtime_ns = super::now_ns();
        }
        if st.dirty.len() >= MAX_DIRTY_PIECES {
            return match self.send_dirty(cred, st, false) {
                Err(e) if is_not_inline(&e) => {
                    drop(il);
                    self.move_out(cred).map(|()| true)
                }
                r => r.map(|()| true),
            };
        }
        Ok(true)
    }

    /// Sends the unsent inline writes as one request: WriteInline, durable when
    /// answered, if `durable`, else WriteInlineUnsynced, answered once the bytes are
    /// visible to every client (and durable with the metadata server's next commit).
    fn send_dirty(
        &self,
        cred: &Cred,
        st: &mut InlineState,
        durable: bool,
    ) -> Result<(), WireError> {
        if st.dirty.is_empty() {
            return Ok(());
        }
        let pieces: Vec<InlinePiece> = st
            .dirty
            .iter()
            .map(|(offset, data)| InlinePiece {
                offset: *offset,
                crc: crc32c(data),
                data: data.clone(),
            })
            .collect();
        let (ino, mtime_ns) = (self.ino, lock_state(&self.state).unflushed_mtime_ns);
        let session = self.inner.session.id();
        let req = Request::write_inline(ino, pieces, mtime_ns, durable);
        let attr = self.inner.meta_req::<Attr>(cred, req).map_err(|e| {
            if is_not_inline(&e) {
                e
            } else {
                context(
                    e,
                    format!("writing the inline bytes of {}", self.describe()),
                )
            }
        })?;
        st.dirty.clear();
        if !durable {
            self.note_unsynced(session);
        }
        // Another client's writes in between make our copy stale: fetched again when read.
        let same = match (&st.bytes, &attr.inline) {
            (Some(b), Some(i)) => crc32c(b) == i.crc && b.len() as u64 == attr.size,
            _ => false,
        };
        if !same {
            st.bytes = None;
        }
        let mut s = lock_state(&self.state);
        s.unflushed_end = None;
        s.meta_size = attr.size;
        Ok(())
    }

    /// Moves the file to its data servers: its unsent inline writes go first (or, if
    /// the metadata server says the file is striped already, to the data servers after
    /// the move), then Uninline. Afterwards the file is striped for this client.
    pub(super) fn move_out(&self, cred: &Cred) -> Result<(), WireError> {
        let mut il = lock(&self.inline);
        let Some(st) = il.as_mut() else {
            return Ok(());
        };
        // Uninline is durable when answered, and so is all that came before it.
        let left = match self.send_dirty(cred, st, false) {
            Ok(()) => Vec::new(),
            Err(e) if is_not_inline(&e) => std::mem::take(&mut st.dirty),
            Err(e) => return Err(e),
        };
        let attr = match self
            .inner
            .meta_op(cred, stripefs_wire::op::Uninline { ino: self.ino })
        {
            Ok(a) => a,
            Err(e) => {
                // Not moved: the writes stay to be sent again.
                st.dirty = left;
                return Err(context(
                    e,
                    format!("moving {} to its data servers", self.describe()),
                ));
            }
        };
        *il = None;
        drop(il);
        {
            let mut s = lock_state(&self.state);
            s.meta_size = attr.size;
        }
        for (offset, data) in left {
            self.write(cred, offset, &data, DEFAULT_WRITE_WINDOW_BYTES)?;
        }
        Ok(())
    }

    /// Flush of an inline file: its unsent writes are sent, visible to every client
    /// once answered; with `durable` (fsync) also durable, and with nothing to send a
    /// SyncMeta makes what earlier closes sent durable (this client's, from any handle,
    /// and others'). `Ok(false)` when the file is striped: the caller flushes the data
    /// servers' way.
    pub(super) fn flush_inline(&self, cred: &Cred, durable: bool) -> Result<bool, WireError> {
        let mut il = lock(&self.inline);
        let Some(st) = il.as_mut() else {
            return Ok(false);
        };
        let nothing = st.dirty.is_empty();
        match self.send_dirty(cred, st, durable) {
            Ok(()) if durable => self.sync_meta_after(cred, !nothing).map(|()| true),
            Ok(()) => Ok(true),
            Err(e) if is_not_inline(&e) => {
                drop(il);
                self.move_out(cred)?;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Up to `len` bytes at `offset` of an inline file; `None` when the file is striped.
    /// A read reaching past the end of the bytes known here (or with none known)
    /// fetches them again (ReadInline), after sending this client's unsent writes;
    /// without `whole` only one starting at or past it does, one that starts before it
    /// returns what is known (a short read, as `clamp` does for striped files).
    pub(super) fn read_inline(
        &self,
        cred: &Cred,
        offset: u64,
        len: u64,
        whole: bool,
    ) -> Result<Option<Vec<u8>>, WireError> {
        let mut il = lock(&self.inline);
        let Some(st) = il.as_mut() else {
            return Ok(None);
        };
        let known = st.bytes.as_ref().map(|b| b.len() as u64);
        if known.map_or(true, |n| super::must_ask(offset, len, n, whole)) {
            match self.send_dirty(cred, st, false) {
                Ok(()) => {}
                Err(e) if is_not_inline(&e) => {
                    drop(il);
                    self.move_out(cred)?;
                    return Ok(None);
                }
                Err(e) => return Err(e),
            }
            let attr = self
                .inner
                .meta_op(cred, stripefs_wire::op::ReadInline { ino: self.ino })?;
            lock_state(&self.state).meta_size = attr.size;
            match &attr.inline {
                None => {
                    *il = None;
                    return Ok(None);
                }
                Some(i) => st.bytes = checked(i, &self.describe())?,
            }
        }
        let b = st.bytes.as_deref().unwrap_or_default();
        let from = (offset as usize).min(b.len());
        let to = (offset.saturating_add(len) as usize).min(b.len());
        Ok(Some(b[from..to].to_vec()))
    }

    /// A truncate of an inline file to `size` within its threshold (SetAttr, which cuts
    /// or zero-extends the inline bytes); `None` when the file is striped, or has just
    /// been moved because `size` passes the threshold: the caller truncates the data
    /// servers' way.
    pub(super) fn truncate_inline(
        &self,
        cred: &Cred,
        req: Request,
        size: u64,
    ) -> Result<Option<Attr>, WireError> {
        let mut il = lock(&self.inline);
        let Some(st) = il.as_mut() else {
            return Ok(None);
        };
        let sent = self.send_dirty(cred, st, false);
        let fits = size <= st.max as u64;
        let answer = match sent {
            Ok(()) if fits => Some(self.inner.meta_req::<Attr>(cred, req)),
            Ok(()) => None,
            Err(e) if is_not_inline(&e) => None,
            Err(e) => return Err(e),
        };
        match answer {
            Some(Ok(attr)) => {
                if let Some(b) = st.bytes.as_mut() {
                    b.resize(size as usize, 0);
                }
                let mut s = lock_state(&self.state);
                s.meta_size = attr.size;
                s.unflushed_end = None;
                Ok(Some(attr))
            }
            Some(Err(e)) if !is_not_inline(&e) => Err(e),
            _ => {
                drop(il);
                self.move_out(cred)?;
                Ok(None)
            }
        }
    }
}
