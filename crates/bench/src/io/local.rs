//! bench io on a local directory: the same-run reference (`--baseline`).

use super::*;

/// The same pattern on a local directory (the baseline), or on a mounted one (each
/// client process of `--mount`): plain system calls on `{dir}/{prefix}{n}`.
pub(super) struct Local {
    pub(super) dir: PathBuf,
    pub(super) prefix: String,
    pub(super) files: u32,
}

impl Local {
    pub(super) fn prepare(dir: &std::path::Path, files: u32, bytes: u64) -> Result<Local> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let free = free_bytes(dir)?;
        if free < bytes + (1 << 30) {
            bail!(
                "baseline directory {} has {} free; the run needs {} plus 1 GiB headroom",
                dir.display(),
                format_size(free),
                format_size(bytes)
            );
        }
        let l = Local {
            dir: dir.to_path_buf(),
            prefix: "stripefs-baseline-".into(),
            files,
        };
        for f in 0..files {
            std::fs::File::create(l.path(f))?;
        }
        Ok(l)
    }

    pub(super) fn path(&self, file: u32) -> PathBuf {
        self.dir.join(format!("{}{file}", self.prefix))
    }

    pub(super) fn cleanup(&self) {
        for f in 0..self.files {
            let _ = std::fs::remove_file(self.path(f));
        }
    }
}

pub(super) struct LocalHandle(std::fs::File);

impl Handle for LocalHandle {
    fn write_at(&mut self, off: u64, buf: &[u8]) -> Result<()> {
        Ok(self.0.write_all_at(buf, off)?)
    }
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<()> {
        Ok(self.0.read_exact_at(buf, off)?)
    }
    fn fsync(&mut self) -> Result<()> {
        Ok(self.0.sync_all()?)
    }
    fn advise_sequential(&mut self, off: u64, len: u64) {
        use std::os::fd::AsRawFd;
        // SAFETY: a hint on our own open descriptor; no memory is touched.
        unsafe {
            libc::posix_fadvise(
                self.0.as_raw_fd(),
                off as libc::off_t,
                len as libc::off_t,
                libc::POSIX_FADV_SEQUENTIAL,
            )
        };
    }
    fn close(self: Box<Self>) -> Result<()> {
        crate::worker::close_file(self.0)
    }
}

impl Backend for Local {
    fn open(&self, _rank: u32, file: u32, write: bool) -> Result<Box<dyn Handle>> {
        // Write-only for the write phase, as programs that only write open their
        // files (and as the mount's write-only handles skip the page cache).
        let f = std::fs::OpenOptions::new()
            .read(!write)
            .write(write)
            .open(self.path(file))
            .with_context(|| format!("cannot open {}", self.path(file).display()))?;
        Ok(Box::new(LocalHandle(f)))
    }
}
