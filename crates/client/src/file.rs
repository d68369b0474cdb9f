//! Open files: [`OpenOptions`] and the [`File`] handle.

use crate::io::InodeIo;
use crate::{Inner, DEFAULT_WRITE_WINDOW_BYTES, MAX_WRITE_WINDOW_BYTES};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use stripefs_wire::{Attr, Cred, ErrorCode, InodeId, Layout, LayoutHint, WireError};

/// How to open a file, as with `std::fs::OpenOptions`. The default opens for reading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenOptions {
    pub read: bool,
    pub write: bool,
    /// Create the file if it does not exist.
    pub create: bool,
    /// With `create`: fail with `Exists` if it does exist.
    pub exclusive: bool,
    /// Cut an existing file to zero bytes (needs `write`).
    pub truncate: bool,
    /// Permission bits of a created file.
    pub mode: u32,
    /// Layout of a created file; unset fields come from the directory or the cluster.
    pub layout: LayoutHint,
    /// Most bytes of this handle's writes in flight before `write_at` waits.
    pub write_window_bytes: u64,
}

impl Default for OpenOptions {
    fn default() -> OpenOptions {
        OpenOptions {
            read: true,
            write: false,
            create: false,
            exclusive: false,
            truncate: false,
            mode: 0o644,
            layout: LayoutHint::default(),
            write_window_bytes: DEFAULT_WRITE_WINDOW_BYTES,
        }
    }
}

impl OpenOptions {
    /// Read-only, no creation.
    pub fn new() -> OpenOptions {
        OpenOptions::default()
    }

    /// Read and write, created if missing, truncated if present (as `File::create`).
    pub fn create_truncate() -> OpenOptions {
        OpenOptions::new().write(true).create(true).truncate(true)
    }

    /// Read-only, no creation (the same as `new`).
    pub fn read_only() -> OpenOptions {
        OpenOptions::new()
    }

    /// Write-only, no creation.
    pub fn write_only() -> OpenOptions {
        OpenOptions::new().read(false).write(true)
    }

    /// Read and write a new file with permission bits `mode`; fails if it exists.
    pub fn create_new(mode: u32) -> OpenOptions {
        OpenOptions::new()
            .write(true)
            .create(true)
            .exclusive(true)
            .mode(mode)
    }

    pub fn read(mut self, yes: bool) -> Self {
        self.read = yes;
        self
    }

    pub fn write(mut self, yes: bool) -> Self {
        self.write = yes;
        self
    }

    pub fn create(mut self, yes: bool) -> Self {
        self.create = yes;
        self
    }

    pub fn exclusive(mut self, yes: bool) -> Self {
        self.exclusive = yes;
        self
    }

    pub fn truncate(mut self, yes: bool) -> Self {
        self.truncate = yes;
        self
    }

    pub fn mode(mut self, mode: u32) -> Self {
        self.mode = mode;
        self
    }

    pub fn layout(mut self, hint: LayoutHint) -> Self {
        self.layout = hint;
        self
    }

    pub fn write_window_bytes(mut self, bytes: u64) -> Self {
        self.write_window_bytes = bytes;
        self
    }

    /// Checks the combination; returns the reason it is bad.
    pub(crate) fn validate(&self) -> Result<(), WireError> {
        let bad = |why: &str| Err(WireError::new(ErrorCode::InvalidArgument, why.to_string()));
        if !self.read && !self.write {
            return bad("open for neither reading nor writing");
        }
        if self.truncate && !self.write {
            return bad("truncate needs write access");
        }
        if self.exclusive && !self.create {
            return bad("exclusive needs create");
        }
        if self.write_window_bytes == 0 || self.write_window_bytes > MAX_WRITE_WINDOW_BYTES {
            return bad("write window must be between 1 byte and MAX_WRITE_WINDOW_BYTES");
        }
        if self.mode & !0o7777 != 0 {
            return bad("mode has bits outside 07777");
        }
        stripefs_wire::validate_hint(&self.layout)
    }
}

/// An open file. Thread-safe: `read_at` and `write_at` may be called from many threads
/// at once. Writes are write-behind: errors of background writes are reported by a later
/// `write_at`, `flush`, `fsync` or `close`. Dropping a handle closes it, best effort;
/// call [`File::close`] to see errors.
pub struct File {
    inner: Arc<Inner>,
    cred: Cred,
    io: Arc<InodeIo>,
    path: Option<String>,
    read: bool,
    write: bool,
    window: u64,
    last_read_end: AtomicU64,
    closed: AtomicBool,
    /// The inode's count of failed background writes this handle has reported with an
    /// fsync (from its open on): its flush, fsync and close report any failure after
    /// it, and an fsync moves it to now.
    seen_write_errors: AtomicU64,
    /// Attributes the metadata server returned when the handle was opened.
    opened_attr: Attr,
}

impl File {
    pub(crate) fn new(
        inner: Arc<Inner>,
        cred: Cred,
        io: Arc<InodeIo>,
        path: Option<String>,
        opts: &OpenOptions,
        opened_attr: Attr,
    ) -> File {
        File {
            seen_write_errors: AtomicU64::new(io.write_errors()),
            inner,
            cred,
            io,
            path,
            read: opts.read,
            write: opts.write,
            window: opts.write_window_bytes,
            last_read_end: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            opened_attr,
        }
    }

    pub fn ino(&self) -> InodeId {
        self.io.ino
    }

    /// The path the file was opened by, if it was opened by path.
    pub fn path(&self) -> Option<&str> {
        self.path.as_deref()
    }

    /// Whether the handle was opened for writing.
    pub fn is_writable(&self) -> bool {
        self.write
    }

    pub fn layout(&self) -> &Layout {
        &self.io.layout
    }

    /// The size as this client knows it, without a round trip: the metadata server's
    /// size when last seen, or the end of writes made here if further.
    pub fn size(&self) -> u64 {
        self.io.size()
    }

    fn describe(&self) -> String {
        self.io.describe()
    }

    /// Reads up to `buf.len()` bytes at `offset`; fewer only at end of file, none at or
    /// past it. Holes read as zeros. Every block is checked against its stored CRC.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, WireError> {
        self.read_into(offset, buf, false)
    }

    /// As [`File::read_at`], into a buffer of the client's (huge pages, page-aligned):
    /// a large read of bytes a data server on this host holds and the page cache does
    /// not goes from the disk straight into it (`O_DIRECT`, see
    /// [`DirectReads`](crate::DirectReads)), with no copy.
    pub fn read_buf(&self, offset: u64, buf: &mut crate::IoBuf) -> Result<usize, WireError> {
        self.read_into(offset, buf, true)
    }

    fn read_into(&self, offset: u64, buf: &mut [u8], iobuf: bool) -> Result<usize, WireError> {
        if !self.read {
            return Err(WireError::new(
                ErrorCode::BadHandle,
                format!("{} is not open for reading", self.describe()),
            ));
        }
        self.io.check_lost()?;
        let sequential = self.last_read_end.load(Ordering::Relaxed) == offset;
        let n = self.io.read(&self.cred, offset, buf, sequential, iobuf)?;
        self.last_read_end
            .store(offset + n as u64, Ordering::Relaxed);
        Ok(n)
    }

    /// Reads the extents `(offset, length)` into `buf`, one after another (`buf` is as
    /// long as their lengths added up), with one list request per data server and batch
    /// instead of a request per extent: for noncontiguous reads (MPI-IO file views).
    /// Bytes at or past the end of the file read as zeros.
    pub fn read_list(&self, extents: &[(u64, u64)], buf: &mut [u8]) -> Result<(), WireError> {
        if !self.read {
            return Err(WireError::new(
                ErrorCode::BadHandle,
                format!("{} is not open for reading", self.describe()),
            ));
        }
        let total = extents
            .iter()
            .try_fold(0u64, |t, e| t.checked_add(e.1))
            .filter(|&t| t == buf.len() as u64);
        if total.is_none() || extents.iter().any(|e| e.0.checked_add(e.1).is_none()) {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "a list read of {} extents does not fit its buffer of {} bytes",
                    extents.len(),
                    buf.len()
                ),
            ));
        }
        self.io.check_lost()?;
        self.io.read_list(&self.cred, extents, buf)
    }

    /// Reads up to `len` bytes at `offset` and hands `f` the bytes where they arrived,
    /// in file order (fewer than `len` at the end of the file), instead of copying them
    /// into a buffer: for callers that copy them on anyway, as a FUSE reply does.
    pub fn read_with<R>(
        &self,
        offset: u64,
        len: usize,
        f: impl FnOnce(&[&[u8]]) -> R,
    ) -> Result<R, WireError> {
        if !self.read {
            return Err(WireError::new(
                ErrorCode::BadHandle,
                format!("{} is not open for reading", self.describe()),
            ));
        }
        self.io.check_lost()?;
        let sequential = self.last_read_end.load(Ordering::Relaxed) == offset;
        let mut n = 0;
        let r = self
            .io
            .read_with(&self.cred, offset, len as u64, sequential, |s| {
                n = s.iter().map(|p| p.len()).sum::<usize>();
                f(s)
            })?;
        self.last_read_end
            .store(offset + n as u64, Ordering::Relaxed);
        Ok(r)
    }

    /// Declares that this handle will read `[offset, offset + len)` from start to end,
    /// as `posix_fadvise(SEQUENTIAL)` on a range does: readahead starts with the first
    /// read and never fetches past the range, so no server works on bytes nobody reads.
    pub fn advise_sequential(&self, offset: u64, len: u64) {
        self.last_read_end.store(offset, Ordering::Relaxed);
        self.io
            .set_readahead_limit(Some(offset.saturating_add(len)));
    }

    /// Queues all of `data` for writing at `offset` and returns; waits only while the
    /// handle has more than its write window in flight, or for earlier writes that
    /// overlap. Returns an earlier background write's error if one is pending.
    pub fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), WireError> {
        self.writable()?;
        self.io.write(&self.cred, offset, data, self.window)
    }

    /// Refuses writes through a handle not open for writing, or whose file was lost.
    fn writable(&self) -> Result<(), WireError> {
        if !self.write {
            return Err(WireError::new(
                ErrorCode::BadHandle,
                format!("{} is not open for writing", self.describe()),
            ));
        }
        self.io.check_lost()
    }

    /// As [`File::write_at`], with the bytes in a buffer given to the client: when they
    /// all go to one server as one extent (a write inside one stripe, or any write to a
    /// file of stripe count 1), the buffer itself is sent, and on the short-circuit path
    /// written to the disk from where it lies (direct writes), with no copy on the way.
    /// Otherwise its bytes are copied as `write_at` copies them. Fill it from
    /// [`IoBuf::new`](crate::IoBuf::new); it goes back to the pool once written.
    pub fn write_buf(&self, offset: u64, buf: crate::IoBuf) -> Result<(), WireError> {
        self.writable()?;
        self.io.write_buf(&self.cred, offset, buf, self.window)
    }

    /// Whether [`File::write_at`] of `len` bytes at `offset` would return without waiting
    /// for earlier writes (it fits in the write-behind window). Advisory: another thread
    /// writing the same file may fill the window in between.
    pub fn write_would_not_wait(&self, offset: u64, len: u64) -> bool {
        self.io.write_would_not_wait(offset, len, self.window)
    }

    /// Whether [`File::flush`] (and so [`File::close`], whose Close is deferred) would
    /// return at once, without waiting or a round trip.
    pub fn flush_is_noop(&self) -> bool {
        self.io
            .flush_is_noop(self.seen_write_errors.load(Ordering::Acquire))
    }

    /// Waits for queued writes and records the file's size on the metadata server, so
    /// that other clients see it; data is not forced to disk.
    /// A read-only handle has no writes of its own: it neither waits for another
    /// handle's nor takes their errors.
    pub fn flush(&self) -> Result<(), WireError> {
        self.io.check_lost()?;
        if !self.write {
            return Ok(());
        }
        self.flushed(false)
    }

    /// `InodeIo::flush`, and then any background write that failed since this handle's
    /// last fsync (see `seen_write_errors`). Only an fsync moves that count on: a flush
    /// or close reports the failures without taking them, because through a mount the
    /// close of any descriptor of the open file sends one, a forked child's at exec
    /// included, whose caller never looks at it (as NFS's close checks for errors
    /// without consuming what the next fsync of the file reports).
    fn flushed(&self, data_sync: bool) -> Result<(), WireError> {
        let r = self.io.flush(&self.cred, data_sync);
        let lost = if data_sync {
            self.io.write_errors_since(&self.seen_write_errors)
        } else {
            self.io
                .write_errors_after(self.seen_write_errors.load(Ordering::Acquire))
        };
        r.and(lost)
    }

    /// Makes all writes so far durable on every data server of the layout, then records
    /// the size on the metadata server.
    pub fn fsync(&self) -> Result<(), WireError> {
        self.io.check_lost()?;
        self.flushed(true)
    }

    /// Makes the data servers drop their cached pages of this file, so that the next
    /// reads come from their disks (cold-read benchmarks). Changes no data; pending
    /// writes are made durable first, since the kernel keeps dirty pages.
    pub fn drop_server_cache(&self) -> Result<(), WireError> {
        if self.write {
            self.fsync()?;
        }
        self.io.drop_server_cache(&self.cred)
    }

    /// Sets the size, cutting or zero-extending the file.
    pub fn set_len(&self, size: u64) -> Result<(), WireError> {
        if !self.write {
            return Err(WireError::new(
                ErrorCode::BadHandle,
                format!("{} is not open for writing", self.describe()),
            ));
        }
        self.io.check_lost()?;
        self.io.truncate(&self.cred, size, true).map(|_| ())
    }

    fn need_write(&self, what: &str) -> Result<(), WireError> {
        if self.write {
            return Ok(());
        }
        Err(WireError::new(
            ErrorCode::BadHandle,
            format!("{what}: {} is not open for writing", self.describe()),
        ))
    }

    /// Reserves space on the data servers for `len` bytes at `offset`, so that writing
    /// them later does not fail for lack of space (fallocate mode 0); the size grows to
    /// the range's end unless `keep_size` (FALLOC_FL_KEEP_SIZE). The bytes do not change.
    pub fn allocate(&self, offset: u64, len: u64, keep_size: bool) -> Result<(), WireError> {
        self.need_write("fallocate")?;
        self.io.allocate(&self.cred, offset, len, keep_size)
    }

    /// Makes `len` bytes at `offset` read as zeros and frees their space on the data
    /// servers (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE); the size stays.
    pub fn punch_hole(&self, offset: u64, len: u64) -> Result<(), WireError> {
        self.need_write("punch hole")?;
        self.io.punch(&self.cred, offset, len)
    }

    /// Makes `len` bytes at `offset` read as zeros, with their space allocated
    /// (FALLOC_FL_ZERO_RANGE); the size grows to the range's end unless `keep_size`.
    pub fn zero_range(&self, offset: u64, len: u64, keep_size: bool) -> Result<(), WireError> {
        self.need_write("zero range")?;
        self.io.zero_range(&self.cred, offset, len, keep_size)
    }

    /// `lseek(SEEK_DATA)`: the first offset at or after `offset` that holds data stored
    /// on the data servers; `None` (ENXIO) if none does before the end of the file.
    pub fn seek_data(&self, offset: u64) -> Result<Option<u64>, WireError> {
        self.io.seek(&self.cred, offset, false)
    }

    /// `lseek(SEEK_HOLE)`: the first offset at or after `offset` in a hole, the end of
    /// the file at the latest; `None` (ENXIO) at or past the end of the file.
    pub fn seek_hole(&self, offset: u64) -> Result<Option<u64>, WireError> {
        self.io.seek(&self.cred, offset, true)
    }

    /// Bytes the file occupies on its data servers (for `st_blocks`).
    pub fn allocated_bytes(&self) -> Result<u64, WireError> {
        if self.io.is_inline() {
            return Ok(self.io.size());
        }
        self.io.wait_all();
        crate::io::allocated_bytes(&self.inner, &self.cred, &self.cached_attr())
    }

    /// The attributes seen at open, with the size as this client knows it now; no round
    /// trip. A FUSE adapter answers `create` with them.
    pub fn cached_attr(&self) -> Attr {
        let mut attr = self.opened_attr.clone();
        attr.size = self.io.size();
        if !self.io.is_inline() {
            attr.inline = None;
        }
        if let Some(i) = attr.inline.as_mut() {
            i.data = None;
        }
        attr
    }

    /// Fresh attributes from the metadata server, with the size including writes made
    /// in this client that it has not been told of yet.
    pub fn attr(&self) -> Result<Attr, WireError> {
        let mut attr = self.inner.getattr(&self.cred, self.io.ino)?;
        self.io.note_meta_size(attr.size);
        attr.size = self.io.size();
        Ok(attr)
    }

    /// Waits for queued writes, records the size, and closes the handle on the metadata
    /// server. Reports any error of a background write.
    pub fn close(self) -> Result<(), WireError> {
        self.close_inner()
    }

    fn close_inner(&self) -> Result<(), WireError> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // A read-only handle has no writes of its own to wait for; flushing would only
        // take errors that belong to a writer's handle.
        let flushed = if self.write {
            self.flushed(false)
        } else {
            Ok(())
        };
        // Close is not answered (it cannot fail for a handle we hold) and goes out with
        // the next request to the metadata server, or within DEFER_MAX: create + close
        // costs one round trip and one wake-up of the server. Requests sent meanwhile
        // may overtake it, which only moves the purge of a file unlinked meanwhile from
        // the Unlink to this Close. If it cannot be sent, the pool keeps it and retries.
        let closed = self.inner.close_counted(&self.cred, self.io.ino);
        flushed.and(closed)
    }
}

impl Drop for File {
    fn drop(&mut self) {
        if let Err(e) = self.close_inner() {
            tracing::warn!("closing {} on drop failed: {e}", self.describe());
        }
    }
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File")
            .field("ino", &self.io.ino)
            .field("path", &self.path)
            .field("read", &self.read)
            .field("write", &self.write)
            .finish()
    }
}
