//! Namespace calls of [`Client`], by path and by inode, and cluster status.
//!
//! Path calls resolve the parent directory with one `Resolve` round trip and then act on
//! the final name, so every path call costs two round trips at most. Errors keep the
//! server's code and gain a prefix naming the operation and the path or inode.

use crate::file::{File, OpenOptions};
use crate::io::context;
use crate::path::{child, components, normalize, split_parent};
use crate::{Client, READDIR_PAGE};
use stripefs_wire::{
    op, validate_name, Attr, Counters, DirEntry, ErrorCode, FileType, InodeId, Layout, LayoutHint,
    Operation, ServerId, SetAttrs, SetTime, TargetSpace, TargetStatus, WireError,
};

/// Attempts of an exchange whose names another client changes between its lookups and
/// the swap (see [`Client::exchange_at`]).
pub const EXCHANGE_TRIES: u32 = 3;

/// Space over all data servers (sum of their targets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatFs {
    pub bytes_total: u64,
    pub bytes_free: u64,
    pub data_servers: u32,
    pub targets: u32,
    /// Inodes in use in the namespace (what `df -i` shows as used).
    pub inodes: u64,
}

/// One data server's answer to `DataStatus`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataStatus {
    pub server_id: ServerId,
    pub addr: String,
    pub targets: Vec<TargetStatus>,
    pub counters: Counters,
}

/// The metadata server's answer to `MetaStatus`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaStatus {
    pub addr: String,
    pub inodes: u64,
    pub files: u64,
    pub dirs: u64,
    pub open_files: u64,
    pub db_bytes: u64,
    pub counters: Counters,
}

fn ctx<T>(r: Result<T, WireError>, what: impl FnOnce() -> String) -> Result<T, WireError> {
    r.map_err(|e| context(e, what()))
}

fn name_ok(name: &str) -> Result<(), WireError> {
    validate_name(name)
}

impl Client {
    /// One metadata operation, answered with its row's reply type.
    fn meta<O: Operation>(&self, op: O) -> Result<O::Reply, WireError> {
        self.inner.meta_op(&self.cred, op)
    }

    /// An operation answered with attributes, which show this client's unflushed writes.
    fn attr_of<O: Operation<Reply = Attr>>(&self, op: O) -> Result<Attr, WireError> {
        let attr = self.meta(op)?;
        Ok(self.with_local_size(attr))
    }

    /// Shows writes made in this client that the metadata server has not seen yet: their
    /// end, and their time as the mtime and ctime, as the server will record them.
    fn with_local_size(&self, mut attr: Attr) -> Attr {
        if let Some((end, mtime_ns)) = self.inner.live_io(attr.ino).and_then(|io| io.unflushed()) {
            attr.size = attr.size.max(end);
            attr.mtime_ns = attr.mtime_ns.max(mtime_ns);
            attr.ctime_ns = attr.ctime_ns.max(mtime_ns);
        }
        attr
    }

    // ---- inode-level calls ----

    /// Attributes of `name` in directory `parent`.
    pub fn lookup(&self, parent: InodeId, name: &str) -> Result<Attr, WireError> {
        name_ok(name)?;
        ctx(
            self.attr_of(op::Lookup {
                parent,
                name: name.into(),
            }),
            || format!("lookup {name:?} in {parent}"),
        )
    }

    /// Attributes of `ino`.
    pub fn getattr(&self, ino: InodeId) -> Result<Attr, WireError> {
        ctx(self.attr_of(op::GetAttr { ino }), || {
            format!("getattr {ino}")
        })
    }

    /// Bytes the file of `attr` occupies on its data servers, data and checksums (for
    /// `st_blocks`, so that `du` is true). Costs nothing for anything but a regular file
    /// of size above 0, and one parallel round trip to its servers for those.
    pub fn allocated_bytes(&self, attr: &Attr) -> Result<u64, WireError> {
        crate::io::allocated_bytes(&self.inner, &self.cred, attr)
    }

    /// [`Client::allocated_bytes`] when the attributes alone tell it (directories,
    /// empty and inline files...), without asking the data servers; `None` otherwise.
    pub fn allocated_known(attr: &Attr) -> Option<u64> {
        crate::io::allocated_known(attr)
    }

    /// Makes directory `name` in `parent`.
    pub fn mkdir_at(&self, parent: InodeId, name: &str, mode: u32) -> Result<Attr, WireError> {
        name_ok(name)?;
        ctx(
            self.attr_of(op::Mkdir {
                parent,
                name: name.into(),
                mode,
            }),
            || format!("mkdir {name:?} in {parent}"),
        )
    }

    /// Makes a FIFO, socket or device node (`rdev` from [`stripefs_wire::make_rdev`] for
    /// devices, which only root may make; 0 otherwise).
    pub fn mknod_at(
        &self,
        parent: InodeId,
        name: &str,
        mode: u32,
        ftype: FileType,
        rdev: u32,
    ) -> Result<Attr, WireError> {
        name_ok(name)?;
        let req = op::Mknod {
            parent,
            name: name.into(),
            mode,
            ftype,
            rdev,
        };
        ctx(self.attr_of(req), || format!("mknod {name:?} in {parent}"))
    }

    /// Creates (or with `!opts.exclusive`, opens an existing) `name` in `parent`.
    pub fn create_at(
        &self,
        parent: InodeId,
        name: &str,
        opts: &OpenOptions,
    ) -> Result<File, WireError> {
        self.create_named(parent, name, opts, None)
    }

    fn create_named(
        &self,
        parent: InodeId,
        name: &str,
        opts: &OpenOptions,
        path: Option<&str>,
    ) -> Result<File, WireError> {
        opts.validate()?;
        name_ok(name)?;
        let what = || match path {
            Some(p) => format!("create {p}"),
            None => format!("create {name:?} in {parent}"),
        };
        // One round trip and one commit: the metadata server creates (or, without
        // `exclusive`, finds) the file and counts our open.
        let make = |session| op::CreateOpen {
            parent,
            name: name.into(),
            mode: opts.mode,
            exclusive: opts.exclusive,
            layout: opts.layout.clone(),
            session,
            read: opts.read,
            write: opts.write,
        };
        let attr = ctx(self.inner.open_counted(&self.cred, make), what)?;
        self.file_of(attr, opts, path, true)
    }

    /// Opens the file `ino`. `opts.create` is ignored: the inode exists. One round trip:
    /// the metadata server checks the type and the access, counts the open and answers
    /// the attributes (refusing anything but a regular file).
    pub fn open_ino(&self, ino: InodeId, opts: &OpenOptions) -> Result<File, WireError> {
        opts.validate()?;
        let make = |session| op::Open {
            ino,
            session,
            read: opts.read,
            write: opts.write,
        };
        let attr = ctx(self.inner.open_counted(&self.cred, make), || {
            format!("open {ino}")
        })?;
        self.file_of(attr, opts, None, false)
    }

    /// A handle on the regular file `attr`, whose open the metadata server counted
    /// (Open, OpenPath or CreateOpen, which refuse other types); `created`: by CreateOpen.
    fn file_of(
        &self,
        attr: Attr,
        opts: &OpenOptions,
        path: Option<&str>,
        created: bool,
    ) -> Result<File, WireError> {
        let ino = attr.ino;
        let what = || match path {
            Some(p) => format!("open {p}"),
            None => format!("open {ino}"),
        };
        let io = match self.inner.inode_io(&attr, path) {
            Ok(io) => io,
            Err(e) => {
                // The open was counted: uncount it, or the file could never be purged.
                let _ = self.inner.close_counted(&self.cred, ino);
                return Err(e);
            }
        };
        io.note_meta_size(attr.size);
        io.note_open(&attr);
        let file = File::new(
            self.inner.clone(),
            self.cred.clone(),
            io.clone(),
            path.map(str::to_string),
            opts,
            attr,
        );
        if opts.truncate && io.size() > 0 {
            // On failure the handle is dropped, which closes it on the server.
            file.set_len(0)?;
        } else if opts.truncate && !created {
            // O_TRUNC of an existing empty file still marks it modified, as Linux does.
            let now = SetAttrs {
                mtime: Some(SetTime::Now),
                ..SetAttrs::default()
            };
            ctx(self.setattr_ino(ino, now), what)?;
        }
        Ok(file)
    }

    /// Removes `name` from `parent`. The metadata server frees the data of a file whose
    /// last link this was (after its last close, if it is open). Returns the directory's
    /// attributes after the change, when the server sends them.
    pub fn unlink_at(&self, parent: InodeId, name: &str) -> Result<Option<Attr>, WireError> {
        name_ok(name)?;
        ctx(
            self.meta(op::Unlink {
                parent,
                name: name.into(),
            }),
            || format!("unlink {name:?} in {parent}"),
        )
    }

    /// Removes the empty directory `name` from `parent`; returns the directory's
    /// attributes after the change, when the server sends them.
    pub fn rmdir_at(&self, parent: InodeId, name: &str) -> Result<Option<Attr>, WireError> {
        name_ok(name)?;
        ctx(
            self.meta(op::Rmdir {
                parent,
                name: name.into(),
            }),
            || format!("rmdir {name:?} in {parent}"),
        )
    }

    /// Renames; with `noreplace`, fails with `Exists` instead of replacing the target.
    pub fn rename_at(
        &self,
        src_parent: InodeId,
        src_name: &str,
        dst_parent: InodeId,
        dst_name: &str,
        noreplace: bool,
    ) -> Result<(), WireError> {
        name_ok(src_name)?;
        name_ok(dst_name)?;
        let req = op::Rename {
            src_parent,
            src_name: src_name.into(),
            dst_parent,
            dst_name: dst_name.into(),
            noreplace,
        };
        ctx(self.meta(req), || {
            format!("rename {src_name:?} in {src_parent} to {dst_name:?} in {dst_parent}")
        })
    }

    /// Swaps two existing entries atomically (renameat2 RENAME_EXCHANGE). The request
    /// names the inodes found at both names just before (one lookup each), so that the
    /// server can refuse it if either name changed meanwhile, or if the request reached
    /// it twice; a change by another client between the lookups and the swap makes it
    /// look again, up to [`EXCHANGE_TRIES`] times.
    pub fn exchange_at(
        &self,
        a_parent: InodeId,
        a_name: &str,
        b_parent: InodeId,
        b_name: &str,
    ) -> Result<(), WireError> {
        name_ok(a_name)?;
        name_ok(b_name)?;
        let what = || format!("exchange {a_name:?} in {a_parent} with {b_name:?} in {b_parent}");
        let mut tries = 0;
        loop {
            let a_ino = ctx(self.lookup(a_parent, a_name), what)?.ino;
            let b_ino = ctx(self.lookup(b_parent, b_name), what)?.ino;
            let req = op::Exchange {
                a_parent,
                a_name: a_name.into(),
                a_ino,
                b_parent,
                b_name: b_name.into(),
                b_ino,
            };
            tries += 1;
            match self.meta(req) {
                Err(e) if e.code == ErrorCode::StaleHandle && tries < EXCHANGE_TRIES => {}
                r => return ctx(r, what),
            }
        }
    }

    /// Adds a hard link `name` in `parent` to `ino`.
    pub fn link_at(&self, ino: InodeId, parent: InodeId, name: &str) -> Result<Attr, WireError> {
        name_ok(name)?;
        ctx(
            self.attr_of(op::Link {
                ino,
                parent,
                name: name.into(),
            }),
            || format!("link {ino} as {name:?} in {parent}"),
        )
    }

    /// Makes symlink `name` in `parent` pointing to `target`.
    pub fn symlink_at(&self, parent: InodeId, name: &str, target: &str) -> Result<Attr, WireError> {
        name_ok(name)?;
        let req = op::Symlink {
            parent,
            name: name.into(),
            target: target.into(),
        };
        ctx(self.attr_of(req), || {
            format!("symlink {name:?} in {parent}")
        })
    }

    /// The target of symlink `ino`.
    pub fn readlink_ino(&self, ino: InodeId) -> Result<String, WireError> {
        ctx(self.meta(op::Readlink { ino }), || {
            format!("readlink {ino}")
        })
    }

    /// One page of directory `ino`: up to `limit` entries after name `after` (`""` for
    /// the first page), and whether the listing is complete.
    pub fn readdir_page(
        &self,
        ino: InodeId,
        after: &str,
        limit: u32,
    ) -> Result<(Vec<DirEntry>, bool), WireError> {
        let req = op::ReadDir {
            ino,
            after: after.into(),
            limit,
        };
        let page = ctx(self.meta(req), || format!("readdir {ino}"))?;
        Ok((page.entries, page.done))
    }

    /// Up to `limit` entries of directory `ino` after the name `after`, each with its
    /// attributes (as [`Client::lookup`] gives them), and whether the listing is done.
    /// Needs read and search permission on the directory.
    pub fn readdir_plus_page(
        &self,
        ino: InodeId,
        after: &str,
        limit: u32,
    ) -> Result<(Vec<(String, Attr)>, bool), WireError> {
        // A server that predates ReadDirPlus did not announce it (its row's feature).
        if self.inner.meta.serves(stripefs_wire::Opcode::ReadDirPlus)? {
            let req = op::ReadDirPlus {
                ino,
                after: after.into(),
                limit,
            };
            let page = ctx(self.meta(req), || {
                format!("readdir (with attributes) {ino}")
            })?;
            // As a lookup's: writes of this client the server has not seen yet.
            let entries = page
                .entries
                .into_iter()
                .map(|(name, a)| (name, self.with_local_size(a)))
                .collect();
            return Ok((entries, page.done));
        }
        // The same answer from ReadDir and a Lookup per entry. The search permission
        // ReadDirPlus needs is the Lookups'.
        let (page, done) = self.readdir_page(ino, after, limit)?;
        let mut entries = Vec::with_capacity(page.len());
        for e in page {
            match self.lookup(ino, &e.name) {
                Ok(a) => entries.push((e.name, a)),
                // Removed since the listing: as a later page would not have it.
                Err(err) if err.code == ErrorCode::NotFound => {}
                Err(err) => return Err(err),
            }
        }
        Ok((entries, done))
    }

    /// All entries of directory `ino`, in pages of [`READDIR_PAGE`].
    pub fn readdir_ino(&self, ino: InodeId) -> Result<Vec<DirEntry>, WireError> {
        let mut all: Vec<DirEntry> = Vec::new();
        loop {
            let after = all.last().map(|e| e.name.clone()).unwrap_or_default();
            let (page, done) = self.readdir_page(ino, &after, READDIR_PAGE)?;
            if page.is_empty() && !done {
                return Err(WireError::new(
                    ErrorCode::UnexpectedMessage,
                    format!(
                        "{} returned an empty, unfinished page of {ino}",
                        self.inner.meta.name()
                    ),
                ));
            }
            all.extend(page);
            if done {
                return Ok(all);
            }
        }
    }

    /// Changes attributes. A new size is applied to the data servers first.
    pub fn setattr_ino(&self, ino: InodeId, attrs: SetAttrs) -> Result<Attr, WireError> {
        let what = || format!("setattr {ino}");
        if attrs.mtime.is_some() {
            // Writes still queued here would record their own mtime after this one
            // (`cp -p` writes, then sets the times): record them first.
            if let Some(io) = self.inner.live_io(ino) {
                ctx(io.flush(&self.cred, false), what)?;
            }
        }
        let mut rest = attrs;
        let mut attr = None;
        if let Some(size) = rest.size.take() {
            let a = self.getattr(ino)?;
            if a.ftype != FileType::File {
                return Err(WireError::new(
                    ErrorCode::IsDir,
                    format!("{}: only regular files have a size to set", what()),
                ));
            }
            let io = self.inner.inode_io(&a, None)?;
            attr = Some(ctx(io.truncate(&self.cred, size, false), what)?);
        }
        if rest.changes_nothing() {
            if let Some(a) = attr {
                return Ok(self.with_local_size(a));
            }
        }
        let touched = rest.mtime.is_some();
        let a = ctx(self.attr_of(op::SetAttr { ino, attrs: rest }), what)?;
        if touched {
            // A new mtime set from outside says the file changed elsewhere (the
            // interception library sets it after writing natively): this client's open
            // handles of it take the size the server has now and forget what they cached.
            if let Some(io) = self.inner.live_io(ino) {
                io.note_changed_elsewhere(a.size);
            }
        }
        Ok(a)
    }

    /// Sets the layout of an empty file, or the default layout of a directory.
    pub fn set_layout_ino(&self, ino: InodeId, hint: LayoutHint) -> Result<Attr, WireError> {
        stripefs_wire::validate_hint(&hint)?;
        ctx(self.attr_of(op::SetLayout { ino, hint }), || {
            format!("set layout of {ino}")
        })
    }

    /// Checks access: `mask` of R_OK (4), W_OK (2), X_OK (1), or 0 for existence.
    pub fn access_ino(&self, ino: InodeId, mask: u32) -> Result<(), WireError> {
        ctx(self.meta(op::Access { ino, mask }), || {
            format!("access {ino}")
        })
    }

    // ---- path-level calls ----

    /// Attributes of `path`, following a final symlink if `follow`.
    pub fn resolve(&self, path: &str, follow: bool) -> Result<Attr, WireError> {
        let p = normalize(path)?;
        ctx(self.attr_of(op::Resolve { path: p, follow }), || {
            path.to_string()
        })
    }

    /// Attributes of `path`, following symlinks.
    pub fn stat(&self, path: &str) -> Result<Attr, WireError> {
        self.resolve(path, true)
    }

    /// Attributes of `path` itself, even if it is a symlink.
    pub fn lstat(&self, path: &str) -> Result<Attr, WireError> {
        self.resolve(path, false)
    }

    /// The parent directory's inode and the final name of `path`.
    fn parent_of(&self, path: &str) -> Result<(InodeId, String), WireError> {
        let (parent, name) = split_parent(path)?;
        let dir = ctx(
            self.meta(op::Resolve {
                path: parent.clone(),
                follow: true,
            }),
            || format!("{path}: parent"),
        )?;
        if dir.ftype != FileType::Dir {
            return Err(WireError::new(
                ErrorCode::NotDir,
                format!("{path}: {parent} is not a directory"),
            ));
        }
        Ok((dir.ino, name))
    }

    pub fn mkdir(&self, path: &str, mode: u32) -> Result<Attr, WireError> {
        let (dir, name) = self.parent_of(path)?;
        ctx(
            self.attr_of(op::Mkdir {
                parent: dir,
                name,
                mode,
            }),
            || format!("mkdir {path}"),
        )
    }

    /// Creates or truncates `path` for writing (and reading), as `std::fs::File::create`.
    pub fn create(&self, path: &str, mode: u32) -> Result<File, WireError> {
        self.open(path, &OpenOptions::create_truncate().read(true).mode(mode))
    }

    /// Opens `path` as `opts` says, creating it if asked.
    pub fn open(&self, path: &str, opts: &OpenOptions) -> Result<File, WireError> {
        opts.validate()?;
        let canon = normalize(path)?;
        if opts.create {
            let (dir, name) = self.parent_of(&canon)?;
            return self.create_named(dir, &name, opts, Some(&canon));
        }
        // One round trip: the metadata server resolves the path and counts the open.
        let make = |session| op::OpenPath {
            path: canon.clone(),
            session,
            read: opts.read,
            write: opts.write,
        };
        let attr = ctx(self.inner.open_counted(&self.cred, make), || {
            format!("open {canon}")
        })?;
        self.file_of(attr, opts, Some(&canon), false)
    }

    pub fn unlink(&self, path: &str) -> Result<(), WireError> {
        let (dir, name) = self.parent_of(path)?;
        ctx(self.unlink_at(dir, &name), || path.to_string()).map(|_| ())
    }

    pub fn rmdir(&self, path: &str) -> Result<(), WireError> {
        let (dir, name) = self.parent_of(path)?;
        ctx(self.rmdir_at(dir, &name), || path.to_string()).map(|_| ())
    }

    /// Renames `from` to `to`, replacing a file at `to`.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), WireError> {
        let (sdir, sname) = self.parent_of(from)?;
        let (ddir, dname) = self.parent_of(to)?;
        ctx(self.rename_at(sdir, &sname, ddir, &dname, false), || {
            format!("rename {from} to {to}")
        })
    }

    /// Swaps the names `a` and `b` atomically (renameat2 RENAME_EXCHANGE).
    pub fn exchange(&self, a: &str, b: &str) -> Result<(), WireError> {
        let (adir, aname) = self.parent_of(a)?;
        let (bdir, bname) = self.parent_of(b)?;
        ctx(self.exchange_at(adir, &aname, bdir, &bname), || {
            format!("exchange {a} with {b}")
        })
    }

    /// Makes `new` another name of the file `existing`.
    pub fn link(&self, existing: &str, new: &str) -> Result<Attr, WireError> {
        let src = self.lstat(existing)?;
        let (dir, name) = self.parent_of(new)?;
        ctx(self.link_at(src.ino, dir, &name), || {
            format!("link {existing} to {new}")
        })
    }

    /// Makes a symlink at `linkpath` pointing to `target`.
    pub fn symlink(&self, target: &str, linkpath: &str) -> Result<Attr, WireError> {
        let (dir, name) = self.parent_of(linkpath)?;
        ctx(self.symlink_at(dir, &name, target), || {
            format!("symlink {linkpath}")
        })
    }

    pub fn readlink(&self, path: &str) -> Result<String, WireError> {
        let a = self.lstat(path)?;
        ctx(self.readlink_ino(a.ino), || path.to_string())
    }

    /// All entries of the directory at `path`.
    pub fn readdir(&self, path: &str) -> Result<Vec<DirEntry>, WireError> {
        let a = self.stat(path)?;
        ctx(self.readdir_ino(a.ino), || path.to_string())
    }

    pub fn setattr(&self, path: &str, attrs: SetAttrs) -> Result<Attr, WireError> {
        let a = self.stat(path)?;
        ctx(self.setattr_ino(a.ino, attrs), || path.to_string())
    }

    pub fn chmod(&self, path: &str, mode: u32) -> Result<Attr, WireError> {
        self.setattr(
            path,
            SetAttrs {
                mode: Some(mode),
                ..SetAttrs::default()
            },
        )
    }

    pub fn chown(&self, path: &str, uid: Option<u32>, gid: Option<u32>) -> Result<Attr, WireError> {
        self.setattr(
            path,
            SetAttrs {
                uid,
                gid,
                ..SetAttrs::default()
            },
        )
    }

    pub fn utimes(
        &self,
        path: &str,
        atime: Option<SetTime>,
        mtime: Option<SetTime>,
    ) -> Result<Attr, WireError> {
        self.setattr(
            path,
            SetAttrs {
                atime,
                mtime,
                ..SetAttrs::default()
            },
        )
    }

    /// Sets the size of the file at `path`.
    pub fn truncate(&self, path: &str, size: u64) -> Result<Attr, WireError> {
        self.setattr(
            path,
            SetAttrs {
                size: Some(size),
                ..SetAttrs::default()
            },
        )
    }

    /// Sets the layout of an empty file or the default layout of a directory
    /// (`lfs setstripe`).
    pub fn set_stripe(&self, path: &str, hint: LayoutHint) -> Result<Attr, WireError> {
        let a = self.stat(path)?;
        ctx(self.set_layout_ino(a.ino, hint), || path.to_string())
    }

    /// The layout of the file at `path`.
    pub fn get_layout(&self, path: &str) -> Result<Layout, WireError> {
        let a = self.stat(path)?;
        a.layout.ok_or_else(|| {
            WireError::new(
                ErrorCode::IsDir,
                format!("{path} has no data layout (not a regular file)"),
            )
        })
    }

    /// The value of extended attribute `name` (with its namespace: `user.x`) of `ino`;
    /// `NoAttr` (ENODATA) if it has none.
    pub fn get_xattr_ino(&self, ino: InodeId, name: &str) -> Result<Vec<u8>, WireError> {
        let req = op::GetXattr {
            ino,
            name: name.to_string(),
        };
        let x = ctx(self.meta(req), || format!("getxattr {name:?} of {ino}"))?;
        Ok(x.value)
    }

    /// The names of the extended attributes of `ino` the caller may see, sorted.
    pub fn list_xattr_ino(&self, ino: InodeId) -> Result<Vec<String>, WireError> {
        let x = ctx(self.meta(op::ListXattr { ino }), || {
            format!("listxattr of {ino}")
        })?;
        Ok(x.names)
    }

    /// Sets extended attribute `name` of `ino`; `mode` is `XATTR_SET_ANY`,
    /// `XATTR_SET_CREATE` (fails with `Exists` if present) or `XATTR_SET_REPLACE`
    /// (fails with `NoAttr` if absent). Returns the inode's new attributes.
    pub fn set_xattr_ino(
        &self,
        ino: InodeId,
        name: &str,
        value: &[u8],
        mode: u8,
    ) -> Result<Attr, WireError> {
        let req = op::SetXattr {
            ino,
            name: name.to_string(),
            value: value.to_vec(),
            mode,
        };
        ctx(self.attr_of(req), || format!("setxattr {name:?} of {ino}"))
    }

    /// Removes extended attribute `name` of `ino`.
    pub fn remove_xattr_ino(&self, ino: InodeId, name: &str) -> Result<Attr, WireError> {
        let req = op::RemoveXattr {
            ino,
            name: name.to_string(),
        };
        ctx(self.attr_of(req), || {
            format!("removexattr {name:?} of {ino}")
        })
    }

    /// [`Client::get_xattr_ino`] of the file `path` names (symlinks followed).
    pub fn get_xattr(&self, path: &str, name: &str) -> Result<Vec<u8>, WireError> {
        let a = self.stat(path)?;
        ctx(self.get_xattr_ino(a.ino, name), || path.to_string())
    }

    /// [`Client::list_xattr_ino`] of the file `path` names (symlinks followed).
    pub fn list_xattr(&self, path: &str) -> Result<Vec<String>, WireError> {
        let a = self.stat(path)?;
        ctx(self.list_xattr_ino(a.ino), || path.to_string())
    }

    /// [`Client::set_xattr_ino`] of the file `path` names (symlinks followed).
    pub fn set_xattr(
        &self,
        path: &str,
        name: &str,
        value: &[u8],
        mode: u8,
    ) -> Result<Attr, WireError> {
        let a = self.stat(path)?;
        ctx(self.set_xattr_ino(a.ino, name, value, mode), || {
            path.to_string()
        })
    }

    /// [`Client::remove_xattr_ino`] of the file `path` names (symlinks followed).
    pub fn remove_xattr(&self, path: &str, name: &str) -> Result<Attr, WireError> {
        let a = self.stat(path)?;
        ctx(self.remove_xattr_ino(a.ino, name), || path.to_string())
    }

    /// Checks access to `path` (see [`Client::access_ino`]).
    pub fn access(&self, path: &str, mask: u32) -> Result<(), WireError> {
        let a = self.stat(path)?;
        ctx(self.access_ino(a.ino, mask), || path.to_string())
    }

    /// Makes every missing directory of `path`.
    pub fn mkdir_all(&self, path: &str, mode: u32) -> Result<Attr, WireError> {
        let mut dir = self.stat("/")?;
        let mut at = String::new();
        for c in components(path)? {
            at = child(if at.is_empty() { "/" } else { &at }, c);
            dir = match self.lookup(dir.ino, c) {
                Ok(a) => a,
                Err(e) if e.code == ErrorCode::NotFound => match self.mkdir_at(dir.ino, c, mode) {
                    Err(e) if e.code == ErrorCode::Exists => self.lookup(dir.ino, c)?,
                    r => ctx(r, || format!("mkdir {at}"))?,
                },
                Err(e) => return Err(e),
            };
        }
        Ok(dir)
    }

    /// The whole content of the file at `path`.
    pub fn read_file(&self, path: &str) -> Result<Vec<u8>, WireError> {
        let f = self.open(path, &OpenOptions::new())?;
        let mut out = vec![0u8; f.size() as usize];
        let mut at = 0;
        loop {
            if at == out.len() {
                out.resize(at + (1 << 20), 0);
            }
            let n = f.read_at(at as u64, &mut out[at..])?;
            if n == 0 {
                break;
            }
            at += n;
        }
        out.truncate(at);
        f.close()?;
        Ok(out)
    }

    /// Creates or replaces the file at `path` with `data`, durably.
    pub fn write_file(&self, path: &str, data: &[u8], mode: u32) -> Result<(), WireError> {
        let f = self.open(path, &OpenOptions::create_truncate().mode(mode))?;
        f.write_at(0, data)?;
        f.fsync()?;
        f.close()
    }

    // ---- cluster status ----

    /// The metadata server's counters.
    pub fn meta_status(&self) -> Result<MetaStatus, WireError> {
        let s = self.meta(op::MetaStatus {})?;
        Ok(MetaStatus {
            addr: self.inner.meta.addr.clone(),
            inodes: s.inodes,
            files: s.files,
            dirs: s.dirs,
            open_files: s.open_files,
            db_bytes: s.db_bytes,
            counters: s.counters,
        })
    }

    /// Inodes in use in the namespace: `Statfs`, or from the status of a metadata server
    /// that predates it.
    pub fn inodes_in_use(&self) -> Result<u64, WireError> {
        if !self.inner.meta.serves(stripefs_wire::Opcode::Statfs)? {
            return self.meta_status().map(|s| s.inodes);
        }
        Ok(self.meta(op::Statfs {})?.inodes)
    }

    /// One data server's targets and counters.
    pub fn data_status(&self, server: ServerId) -> Result<DataStatus, WireError> {
        let pool = self.inner.data.get(server.0 as usize).ok_or_else(|| {
            WireError::new(
                ErrorCode::InvalidArgument,
                format!("no data server {} in the cluster file", server.0),
            )
        })?;
        let s = pool.op(&self.cred, op::DataStatus {})?;
        if s.server_id != server {
            return Err(WireError::new(
                ErrorCode::UnexpectedMessage,
                format!(
                    "{} says it is data server {}: the cluster file and the servers disagree",
                    pool.name(),
                    s.server_id.0
                ),
            ));
        }
        Ok(DataStatus {
            server_id: s.server_id,
            addr: pool.addr.clone(),
            targets: s.targets,
            counters: s.counters,
        })
    }

    /// The size and free bytes of one data server's targets (`Space`: one statvfs
    /// each on the server, however many objects it holds).
    pub fn data_space(&self, server: ServerId) -> Result<Vec<TargetSpace>, WireError> {
        let pool = self.inner.data.get(server.0 as usize).ok_or_else(|| {
            WireError::new(
                ErrorCode::InvalidArgument,
                format!("no data server {} in the cluster file", server.0),
            )
        })?;
        let from_status = |s: DataStatus| {
            let space = |t: &TargetStatus| TargetSpace {
                bytes_total: t.bytes_total,
                bytes_free: t.bytes_free,
            };
            s.targets.iter().map(space).collect()
        };
        // A server that predates Space did not announce it: its status says the same,
        // at the cost of a walk of its objects.
        if !pool.serves(stripefs_wire::Opcode::Space)? {
            return self.data_status(server).map(from_status);
        }
        Ok(pool.op(&self.cred, op::Space {})?.targets)
    }

    /// Space over all data servers, asked in parallel; fails naming any server that
    /// does not answer. What the objects occupy is not counted here (`data_status`
    /// walks them): this is what a statfs needs, and a program may call it often.
    pub fn statfs(&self) -> Result<StatFs, WireError> {
        let inodes = self.inodes_in_use()?;
        let n = self.inner.data.len();
        let mut waits = Vec::with_capacity(n);
        for i in 0..n {
            let (p, c) = crate::exec::promise::<Vec<TargetSpace>>();
            let me = self.clone();
            self.inner
                .exec
                .submit(i, move || p.fulfil(me.data_space(ServerId(i as u32))));
            waits.push(c);
        }
        let mut fs = StatFs {
            bytes_total: 0,
            bytes_free: 0,
            data_servers: n as u32,
            targets: 0,
            inodes,
        };
        for c in waits {
            for t in c.wait()? {
                fs.bytes_total += t.bytes_total;
                fs.bytes_free += t.bytes_free;
                fs.targets += 1;
            }
        }
        Ok(fs)
    }
}
