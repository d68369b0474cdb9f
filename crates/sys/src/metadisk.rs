//! The metadata server's disk, behind a trait: the log files (`wal.rs`) and the redb
//! store of record, so that the server runs unchanged on the real file system
//! ([`FsDisk`]) and on the in-memory, fault-injecting [`crate::memdisk::MemDisk`] of tests and of
//! the whole-cluster simulator.
//!
//! The trait has exactly the calls the server makes: open (creating) a file, positional
//! reads and writes, data and size syncs, a direct synchronous write for log appends, a
//! directory sync, rename and remove (the offline log repair moves a damaged log aside),
//! and the redb database on a path.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// One open file of the metadata server (a log file), shared by offset.
pub trait LogFile: Send + Sync {
    fn size_bytes(&self) -> io::Result<u64>;
    /// Reads up to `buf.len()` bytes at `offset`; fewer only at the end of the file.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes all of `buf` at `offset` (into the page cache: durable after a sync).
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes the file's written data durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
    /// Makes the file's data and size durable (`fsync`).
    fn sync_all(&self) -> io::Result<()>;
    /// Writes `buf` (whole 4 KiB blocks from a 4 KiB-aligned address) at `offset`,
    /// durable when it returns (`O_DIRECT | O_DSYNC`). `EINVAL` where the medium refuses
    /// direct I/O; the caller then uses `write_at` + `sync_data`.
    fn write_direct(&self, buf: &[u8], offset: u64) -> io::Result<()>;
}

/// Where the metadata server keeps its files.
pub trait MetaDisk: Send + Sync + 'static {
    /// Opens the file at `path` for reading and writing, creating it (empty) if
    /// `create`; `None` if it is absent and not to be created. A created file's name is
    /// durable only after [`MetaDisk::sync_dir`] of its directory.
    fn open(&self, path: &Path, create: bool) -> io::Result<Option<Arc<dyn LogFile>>>;
    /// Makes the entries of directory `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Renames `from` to `to` (durable after a sync of both directories).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes the file at `path`; success if it is absent.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Bytes in the file at `path`, 0 if it is absent.
    fn file_bytes(&self, path: &Path) -> u64;
    /// The redb database at `path`, created if new.
    fn open_db(&self, path: &Path) -> Result<redb::Database, String>;
}

/// The real file system.
#[derive(Debug, Default)]
pub struct FsDisk;

struct FsFile {
    file: File,
    path: std::path::PathBuf,
    /// The same file opened for direct, synchronous writes, on first use; `None` where
    /// the file system refuses.
    direct: OnceLock<Option<File>>,
}

impl LogFile for FsFile {
    fn size_bytes(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    fn write_direct(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let direct = self.direct.get_or_init(|| {
            OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_DIRECT | libc::O_DSYNC)
                .open(&self.path)
                .ok()
        });
        match direct {
            Some(f) => f.write_all_at(buf, offset),
            None => Err(io::Error::from_raw_os_error(libc::EINVAL)),
        }
    }
}

impl MetaDisk for FsDisk {
    fn open(&self, path: &Path, create: bool) -> io::Result<Option<Arc<dyn LogFile>>> {
        let opened = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .mode(PRIVATE_MODE)
            .open(path);
        match opened {
            Ok(file) => Ok(Some(Arc::new(FsFile {
                file: private(file, path)?,
                path: path.to_path_buf(),
                direct: OnceLock::new(),
            }))),
            Err(e) if e.kind() == io::ErrorKind::NotFound && !create => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            r => r,
        }
    }

    fn file_bytes(&self, path: &Path) -> u64 {
        std::fs::metadata(path).map_or(0, |m| m.len())
    }

    fn open_db(&self, path: &Path) -> Result<redb::Database, String> {
        let cannot = |e: &dyn std::fmt::Display| {
            format!("cannot open metadata database {}: {e}", path.display())
        };
        // redb creates its file with the default mode (0644 under the usual umask):
        // made here first, private, so the namespace is never readable by other users.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(PRIVATE_MODE)
            .open(path)
            .map_err(|e| cannot(&e))?;
        private(file, path).map_err(|e| cannot(&e))?;
        redb::Database::create(path).map_err(|e| cannot(&e))
    }
}

/// The mode of every file the metadata server makes: its namespace, logs and token
/// revocations are for the server's user only.
pub const PRIVATE_MODE: u32 = 0o600;

/// `file` (at `path`), made private if an older build left it readable by others.
fn private(file: File, path: &Path) -> io::Result<File> {
    use std::os::unix::fs::PermissionsExt;
    let mode = file.metadata()?.permissions().mode();
    if mode & 0o077 != 0 {
        file.set_permissions(std::fs::Permissions::from_mode(mode & 0o700))
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot make {} private: {e}", path.display()),
                )
            })?;
        tracing::info!(
            "{}: mode {:o} -> {:o} (metadata files are private)",
            path.display(),
            mode & 0o777,
            mode & 0o700
        );
    }
    Ok(file)
}

/// The whole file at `path`, `None` if it is absent.
pub fn read_all(disk: &dyn MetaDisk, path: &Path) -> io::Result<Option<Vec<u8>>> {
    let Some(f) = disk.open(path, false)? else {
        return Ok(None);
    };
    let len = usize::try_from(f.size_bytes()?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file too large"))?;
    let mut buf = vec![0u8; len];
    let n = f.read_at(&mut buf, 0)?;
    buf.truncate(n);
    Ok(Some(buf))
}

/// The directory that holds `path` (the current one for a bare file name).
pub fn dir_of(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_metadata_servers_files_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("meta.log.0");
        let db = dir.path().join("meta.redb");
        FsDisk.open(&log, true).unwrap().unwrap();
        assert_eq!(mode(&log), 0o600);
        drop(FsDisk.open_db(&db).unwrap());
        assert_eq!(mode(&db), 0o600);
        // Files an older build left readable by others are made private when opened.
        let old = dir.path().join("meta.revoked");
        std::fs::write(&old, b"").unwrap();
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644)).unwrap();
        FsDisk.open(&old, false).unwrap().unwrap();
        assert_eq!(mode(&old), 0o600);
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o664)).unwrap();
        drop(FsDisk.open_db(&db).unwrap());
        assert_eq!(mode(&db), 0o600);
    }
}
