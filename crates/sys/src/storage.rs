//! Where object bytes live: a small trait over object files, so that the server core runs
//! unchanged on the real file system and on the in-memory, fault-injecting
//! [`crate::memstore::MemStore`] used by tests.

use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;

/// One open object file (data or checksum sidecar), read and written by offset so that
/// many threads can share it without a seek position.
pub trait ObjectFile: Send + Sync {
    /// Reads up to `buf.len()` bytes at `offset`; returns fewer only at end of file.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Reads as [`ObjectFile::read_at`] does, but from the device where the store can
    /// (`O_DIRECT`, for a block-aligned `offset`): what the scrubber checks is then what
    /// the disk holds, not a cached copy of it, and the page cache keeps what clients
    /// read instead of filling with every object the scrubber passes. By default (and
    /// where the file system takes no `O_DIRECT`), `read_at`.
    fn read_stored(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.read_at(buf, offset)
    }
    /// Writes all of `buf` at `offset`, extending the file if needed.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    fn size_bytes(&self) -> io::Result<u64>;
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes the file's data durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
    /// Makes the file's data and all its metadata durable (`fsync`): also a length cut
    /// by `set_len`, which `sync_data` may leave behind on some file systems.
    fn sync_all(&self) -> io::Result<()> {
        self.sync_data()
    }
    /// Reserves disk space for `len` bytes at `offset` without changing the file's
    /// length or content (`FALLOC_FL_KEEP_SIZE`), so that writing there later cannot
    /// fail for lack of space. A file system without fallocate reserves nothing (Ok).
    fn reserve(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
    /// Starts writing `len` bytes at `offset` to the device without waiting, so that a
    /// later `sync_data` has little left to do. Only a hint: errors surface at sync.
    fn start_writeback(&self, _offset: u64, _len: u64) {}
    /// Drops the file's clean cached pages (a hint; benchmarks use it for cold reads).
    fn drop_cache(&self) {}
    /// Makes `len` bytes at `offset` read as zeros without changing the file's length,
    /// freeing their space where the file system can (`FALLOC_FL_PUNCH_HOLE`).
    fn punch(&self, offset: u64, len: u64) -> io::Result<()>;
    /// Reserves space for `len` bytes at `offset` (fallocate mode 0), extending the file
    /// if the range ends beyond it; the bytes read as before (zeros where new).
    fn allocate(&self, offset: u64, len: u64) -> io::Result<()>;
    /// Bytes the file occupies on disk (`st_blocks` * 512).
    fn allocated_bytes(&self) -> io::Result<u64>;
    /// The first offset at or after `offset` the file system may hold data at
    /// (`SEEK_DATA`), `None` if none. May be early (everything before the end counts as
    /// data where holes are not tracked), never late.
    fn seek_data(&self, offset: u64) -> io::Result<Option<u64>> {
        Ok((offset < self.size_bytes()?).then_some(offset))
    }
    /// The file's descriptor, for replies sent from it with `sendfile(2)`; `None` for
    /// stores without one (in memory), whose reads are copied.
    fn borrowed_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }
    /// Writes all of `buf` at the file's end, atomically with respect to other appends
    /// to the same file (through any handle): only for files opened with
    /// [`Storage::open_append`].
    fn append(&self, buf: &[u8]) -> io::Result<()> {
        self.write_at(buf, self.size_bytes()?)
    }
}

/// Reads up to `buf.len()` bytes of `f` at `offset` with `O_DIRECT`, on a new open of
/// the same file (`O_DIRECT` belongs to an open; `f`'s own stays as it is), through a
/// page-aligned buffer of its own; fewer only at the file's end.
fn read_direct(f: &std::fs::File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    const ALIGN: usize = 4096;
    if offset % ALIGN as u64 != 0 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let d = crate::fileio::open_direct_reader(f)?;
    let want = buf.len().div_ceil(ALIGN) * ALIGN;
    let mut space = vec![0u8; want + ALIGN];
    let at = space.as_ptr().align_offset(ALIGN);
    let tmp = &mut space[at..at + want];
    let n = crate::fileio::pread_direct(&d, tmp, offset)?.min(buf.len());
    buf[..n].copy_from_slice(&tmp[..n]);
    Ok(n)
}

/// Bytes of zeros written per call where a file system cannot punch holes.
const ZERO_FILL_BYTES: usize = 1 << 20;

/// Space on one target.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Bytes allocated to object files (data and sidecars) under the target.
    pub used: u64,
    pub total: u64,
    pub free: u64,
}

/// A place that holds object files by path.
pub trait Storage: Send + Sync + 'static {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Opens the file at `path`, creating it if `create`; `None` if it is absent and not
    /// to be created.
    fn open(&self, path: &Path, create: bool) -> io::Result<Option<Arc<dyn ObjectFile>>>;
    /// Deletes the file at `path`; success if it is absent.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes the entries of directory `dir` durable (after files were created in it).
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Space used by files under `root` and left on its device.
    fn usage(&self, root: &Path) -> io::Result<Usage>;
    /// The size of `root`'s device and the bytes left on it, `(total, free)`, without
    /// counting the files under `root` (which `usage` walks).
    fn space(&self, root: &Path) -> io::Result<(u64, u64)> {
        self.usage(root).map(|u| (u.total, u.free))
    }
    /// Names of the regular files in directory `dir` (empty if it is missing).
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Opens the file at `path` read-only, to hand to a same-host client; `None` if it is
    /// absent. Stores whose files cannot be shared answer `Unsupported`.
    fn open_read_only(&self, _path: &Path) -> io::Result<Option<Arc<dyn ObjectFile>>> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this store has no files to hand out",
        ))
    }
    /// The fence of direct writes in `root` (`fence.rs`), after every grant an earlier run
    /// handed out there is over; `None` for stores that take no direct writes.
    fn grant_fence(&self, _root: &Path) -> io::Result<Option<Arc<dyn crate::fence::Fence>>> {
        Ok(None)
    }
    /// Opens the file at `path` for [`ObjectFile::append`], creating it if absent.
    fn open_append(&self, path: &Path) -> io::Result<Arc<dyn ObjectFile>> {
        self.open(path, true)?
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "not created"))
    }
}

/// The real file system.
#[derive(Debug, Default)]
pub struct FsStore;

/// A file of the real file system as an [`ObjectFile`] (also a descriptor a same-host
/// client received).
pub struct FsFile(std::fs::File);

impl From<std::fs::File> for FsFile {
    fn from(f: std::fs::File) -> FsFile {
        FsFile(f)
    }
}

impl ObjectFile for FsFile {
    fn borrowed_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        Some(self.0.as_fd())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match self.0.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    fn read_stored(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        // Pages not yet written back are not on the disk: a direct read would first
        // write them back and wait (on the scrubber's time, under its range lock); the
        // cached copy is what the disk will get, so it is checked instead.
        let stat = crate::fileio::cachestat(&self.0, offset, buf.len() as u64);
        if !stat.is_some_and(|c| c.unwritten == 0) {
            return self.read_at(buf, offset);
        }
        match read_direct(&self.0, buf, offset) {
            Ok(n) => Ok(n),
            // No O_DIRECT on this file system (tmpfs before Linux 6.6), or an offset it
            // does not take: through the page cache.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.read_at(buf, offset),
            Err(e) => Err(e),
        }
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }

    /// The file was opened with `O_APPEND` (`open_append`): each write(2) lands at the
    /// end as a whole, under the inode lock. Records are far below a page, so one call
    /// writes all of one.
    fn append(&self, buf: &[u8]) -> io::Result<()> {
        use std::io::Write;
        (&self.0).write_all(buf)
    }

    fn size_bytes(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.0.sync_all()
    }

    fn reserve(&self, offset: u64, len: u64) -> io::Result<()> {
        match fallocate(&self.0, rustix::fs::FallocateFlags::KEEP_SIZE, offset, len) {
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(()),
            r => r,
        }
    }

    fn drop_cache(&self) {
        // Only a hint: a refusal changes nothing.
        let _ = rustix::fs::fadvise(&self.0, 0, None, rustix::fs::Advice::DontNeed);
    }

    fn punch(&self, offset: u64, len: u64) -> io::Result<()> {
        use rustix::fs::FallocateFlags;
        let mode = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
        match fallocate(&self.0, mode, offset, len) {
            // Without hole punching, zeros keep the promise (but not the space).
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                let end = offset.saturating_add(len).min(self.size_bytes()?);
                let zeros = vec![0u8; ZERO_FILL_BYTES];
                let mut at = offset;
                while at < end {
                    let n = (end - at).min(ZERO_FILL_BYTES as u64) as usize;
                    self.0.write_all_at(&zeros[..n], at)?;
                    at += n as u64;
                }
                Ok(())
            }
            r => r,
        }
    }

    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        fallocate(&self.0, rustix::fs::FallocateFlags::empty(), offset, len)
    }

    fn allocated_bytes(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.blocks() * 512)
    }

    fn seek_data(&self, offset: u64) -> io::Result<Option<u64>> {
        use rustix::{fs::SeekFrom, io::Errno};
        if i64::try_from(offset).is_err() {
            return Ok(None);
        }
        // The handle's position is never used (all I/O is positional), so moving it is
        // harmless.
        match rustix::fs::seek(&self.0, SeekFrom::Data(offset)) {
            Ok(at) => Ok(Some(at)),
            Err(Errno::NXIO) => Ok(None),
            // A file system without SEEK_DATA: everything before the end is data.
            Err(Errno::INVAL) => Ok((offset < self.size_bytes()?).then_some(offset)),
            Err(e) => Err(e.into()),
        }
    }

    fn start_writeback(&self, offset: u64, len: u64) {
        use std::os::fd::AsRawFd;
        // SAFETY: sync_file_range on our own open descriptor; it touches no memory.
        // SYNC_FILE_RANGE_WRITE only queues the write-out and does not wait for it.
        unsafe {
            libc::sync_file_range(
                self.0.as_raw_fd(),
                offset as libc::off64_t,
                len as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            )
        };
    }
}

impl Storage for FsStore {
    fn grant_fence(&self, root: &Path) -> io::Result<Option<Arc<dyn crate::fence::Fence>>> {
        Ok(Some(Arc::new(crate::fence::GrantFence::open(root)?)))
    }

    fn open_read_only(&self, path: &Path) -> io::Result<Option<Arc<dyn ObjectFile>>> {
        match std::fs::File::open(path) {
            Ok(f) => Ok(Some(Arc::new(FsFile(f)))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        // Object directories are the server's own: clients get descriptors from it,
        // never paths, so nobody else needs to list or traverse them.
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<Option<Arc<dyn ObjectFile>>> {
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .mode(0o600)
            .open(path);
        match opened {
            Ok(f) => Ok(Some(Arc::new(FsFile(f)))),
            Err(e) if e.kind() == io::ErrorKind::NotFound && !create => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn open_append(&self, path: &Path) -> io::Result<Arc<dyn ObjectFile>> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)?;
        Ok(Arc::new(FsFile(f)))
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            r => r,
        }
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::File::open(dir)?.sync_all()
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let entries = match std::fs::read_dir(dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            r => r?,
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                names.extend(entry.file_name().to_str().map(str::to_string));
            }
        }
        Ok(names)
    }

    fn space(&self, root: &Path) -> io::Result<(u64, u64)> {
        statvfs(root)
    }

    fn usage(&self, root: &Path) -> io::Result<Usage> {
        let (total, free) = statvfs(root)?;
        Ok(Usage {
            used: allocated_under(root)?,
            total,
            free,
        })
    }
}

fn fallocate(
    f: &std::fs::File,
    mode: rustix::fs::FallocateFlags,
    offset: u64,
    len: u64,
) -> io::Result<()> {
    if i64::try_from(offset).is_err() || i64::try_from(len).is_err() {
        return Err(io::Error::from_raw_os_error(libc::EFBIG));
    }
    loop {
        match rustix::fs::fallocate(f, mode, offset, len) {
            Err(rustix::io::Errno::INTR) => {}
            r => return r.map_err(Into::into),
        }
    }
}

/// Bytes allocated (st_blocks) to regular files under `dir`, recursively.
fn allocated_under(dir: &Path) -> io::Result<u64> {
    let mut sum = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_dir() {
            sum += allocated_under(&entry.path())?;
        } else if meta.is_file() {
            sum += meta.blocks() * 512;
        }
    }
    Ok(sum)
}

fn statvfs(path: &Path) -> io::Result<(u64, u64)> {
    let st = rustix::fs::statvfs(path)?;
    Ok((st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize))
}
