//! Namespace operations as pure functions over a transaction: mutations take a [`Ctx`]
//! holding the batch's write tables, reads take any [`Tables`]. One module per family.
//!
//! Every mutation checks everything it can before its first write, so that a refused
//! operation leaves the shared batch transaction untouched; after the first write it can
//! only fail with a storage error, which aborts the whole batch (`store::is_fatal`).

pub mod attr;
pub mod create;
pub mod placement;
pub mod read;
pub mod remove;
pub mod rename;
pub mod xattr;

use crate::opens::Opens;
use crate::overlay::Wr;
use crate::store::{Inode, Tables};
use stripefs_rpc::Defaults;
use stripefs_wire::{Cred, ErrorCode, MetaWriteOp, Response, WireError};

/// Most links to one inode (and subdirectories of one directory), as ext4.
pub const MAX_LINKS: u32 = 65_000;

/// What placement needs to know about the cluster.
#[derive(Clone, Debug)]
pub struct Placement {
    pub data_servers: u32,
    pub defaults: Defaults,
    /// The host of each data server (`[[data]] host`), for the local policy.
    pub hosts: std::sync::Arc<[Option<String>]>,
    /// The address remote clients reach each data server at (`advertise`, else its
    /// address), for DataServers.
    pub addrs: std::sync::Arc<[String]>,
    /// Which data servers are up (`heartbeat.rs`): new files go only to those.
    pub live: std::sync::Arc<crate::heartbeat::Liveness>,
}

/// One mutation's view of the batch.
pub struct Ctx<'a, 't> {
    pub w: &'a mut Wr<'t>,
    pub cred: &'a Cred,
    pub now_ns: i64,
    pub placement: &'a Placement,
    /// The host the client announced on its connection (`ClientHost`), if any.
    pub client_host: Option<&'a str>,
    pub opens: &'a Opens,
    /// Inline files whose bytes are moving to their data servers.
    pub moving: &'a crate::inline::Moving,
    /// Set when a file was queued for purge, so the purge thread is woken.
    pub purged: bool,
}

/// Applies one mutating request. Reads, Open and Close never come here.
pub fn apply(ctx: &mut Ctx, req: &MetaWriteOp) -> Result<Response, WireError> {
    match req {
        MetaWriteOp::Mkdir { parent, name, mode } => create::mkdir(ctx, parent.0, name, *mode),
        MetaWriteOp::Create {
            parent,
            name,
            mode,
            exclusive,
            layout,
        } => create::create(ctx, parent.0, name, *mode, *exclusive, layout),
        MetaWriteOp::Mknod {
            parent,
            name,
            mode,
            ftype,
            rdev,
        } => create::mknod(ctx, parent.0, name, *mode, *ftype, *rdev),
        MetaWriteOp::Symlink {
            parent,
            name,
            target,
        } => create::symlink(ctx, parent.0, name, target),
        MetaWriteOp::Link { ino, parent, name } => create::link(ctx, ino.0, parent.0, name),
        MetaWriteOp::Unlink { parent, name } => remove::unlink(ctx, parent.0, name),
        MetaWriteOp::Rmdir { parent, name } => remove::rmdir(ctx, parent.0, name),
        MetaWriteOp::Rename {
            src_parent,
            src_name,
            dst_parent,
            dst_name,
            noreplace,
        } => rename::rename(
            ctx,
            src_parent.0,
            src_name,
            dst_parent.0,
            dst_name,
            *noreplace,
        ),
        MetaWriteOp::Exchange {
            a_parent,
            a_name,
            a_ino,
            b_parent,
            b_name,
            b_ino,
        } => rename::exchange(
            ctx,
            (a_parent.0, a_name, a_ino.0),
            (b_parent.0, b_name, b_ino.0),
        ),
        MetaWriteOp::SetAttr { ino, attrs } => attr::set_attr(ctx, ino.0, attrs),
        MetaWriteOp::ExtendSize {
            ino,
            size,
            mtime_ns,
        }
        | MetaWriteOp::ExtendSizeUnsynced {
            ino,
            size,
            mtime_ns,
        } => attr::extend_size(ctx, ino.0, *size, *mtime_ns),
        MetaWriteOp::SetLayout { ino, hint } => attr::set_layout(ctx, ino.0, hint),
        MetaWriteOp::WriteInline {
            ino,
            pieces,
            mtime_ns,
        }
        | MetaWriteOp::WriteInlineUnsynced {
            ino,
            pieces,
            mtime_ns,
        } => crate::inline::write(ctx, ino.0, pieces, *mtime_ns),
        MetaWriteOp::SetXattr {
            ino,
            name,
            value,
            mode,
        } => xattr::set(ctx, ino.0, name, value, *mode),
        MetaWriteOp::RemoveXattr { ino, name } => xattr::remove(ctx, ino.0, name),
    }
}

/// Marks a directory's entries as changed.
pub fn touch_dir(dir: &mut Inode, now_ns: i64) {
    dir.mtime_ns = now_ns;
    dir.ctime_ns = now_ns;
}

/// Directory `ino`, which the caller may search: as Linux, a name is looked up in a
/// directory only with search permission on it, so that EACCES comes before ENOENT or
/// EEXIST (the kernel of a mount checks first; a native client's caller gets the same).
pub fn need_searchable_dir<T: Tables>(t: &T, cred: &Cred, ino: u64) -> Result<Inode, WireError> {
    let dir = crate::store::need_dir(t, ino)?;
    crate::perm::check(cred, &dir, ino, crate::perm::X)?;
    Ok(dir)
}

/// The entry `name` in directory `parent` and its inode, or `NotFound`.
pub fn need_entry<T: Tables>(t: &T, parent: u64, name: &str) -> Result<(u64, Inode), WireError> {
    let (child, _) = t.entry(parent, name)?.ok_or_else(|| {
        WireError::new(
            ErrorCode::NotFound,
            format!("no {name:?} in inode {parent}"),
        )
    })?;
    let inode = t.inode(child)?.ok_or_else(|| {
        WireError::new(
            ErrorCode::Internal,
            format!("entry {name:?} in inode {parent} points to missing inode {child}"),
        )
    })?;
    Ok((child, inode))
}
