//! Create, Mkdir, Mknod, Symlink and Link: operations that add a directory entry, and the
//! placement of a new file's stripes.

use super::{placement, touch_dir, Ctx, MAX_LINKS};
use crate::overlay::Wr;
use crate::perm;
use crate::store::META_NEXT_SERVER;
use crate::store::{
    need, need_dir, InlineData, Inode, Tables, META_DIRS, META_FILES, META_NEXT_INO,
};
use stripefs_wire::{
    validate_name, ErrorCode, FileType, Layout, LayoutHint, Response, ServerId, WireError,
};

/// Checks that `name` may be added to directory `parent`; returns the directory.
fn prepare(ctx: &Ctx, parent: u64, name: &str) -> Result<Inode, WireError> {
    validate_name(name)?;
    // Linux's order: search permission for the lookup, EEXIST, then write permission.
    let dir = super::need_searchable_dir(ctx.w, ctx.cred, parent)?;
    if ctx.w.entry(parent, name)?.is_some() {
        return Err(WireError::new(
            ErrorCode::Exists,
            format!("{name:?} already exists in inode {parent}"),
        ));
    }
    perm::check_dir_change(ctx.cred, &dir, parent)?;
    Ok(dir)
}

/// A new inode owned by the caller; the group comes from a setgid parent, as does the
/// setgid bit of a new directory. As Linux does, a new group-executable non-directory
/// that takes a setgid directory's group, which the caller is not in, loses a requested
/// setgid bit (unless the caller is root).
fn new_inode(ctx: &Ctx, dir: &Inode, ftype: FileType, mode: u32) -> Inode {
    let setgid = dir.mode & perm::S_ISGID != 0;
    let gid = if setgid { dir.gid } else { ctx.cred.gid };
    let mut mode = mode & 0o7777;
    if setgid && ftype == FileType::Dir {
        mode |= perm::S_ISGID;
    } else if setgid
        && ftype != FileType::Dir
        && mode & (perm::S_ISGID | 0o010) == perm::S_ISGID | 0o010
        && ctx.cred.uid != 0
        && !perm::in_group(ctx.cred, gid)
    {
        mode &= !perm::S_ISGID;
    }
    let now = ctx.now_ns;
    Inode {
        ftype,
        mode,
        nlink: 1,
        uid: ctx.cred.uid,
        gid,
        size: 0,
        atime_ns: now,
        mtime_ns: now,
        ctime_ns: now,
        layout: None,
        dir_layout: LayoutHint::default(),
        target: None,
        parent: 0,
        rdev: 0,
        inline: None,
        xattrs: Vec::new(),
    }
}

fn alloc_ino(w: &mut Wr) -> Result<u64, WireError> {
    let ino = w.counter(META_NEXT_INO)?;
    assert!(ino > 1, "inode counter starts above the root");
    w.set_counter(META_NEXT_INO, ino + 1)?;
    Ok(ino)
}

/// Writes the new inode and its entry, and updates the parent.
fn link_new(
    ctx: &mut Ctx,
    parent: u64,
    mut dir: Inode,
    name: &str,
    inode: &Inode,
) -> Result<u64, WireError> {
    let ino = alloc_ino(ctx.w)?;
    ctx.w.put_inode(ino, inode)?;
    ctx.w.put_entry(parent, name, ino, inode.ftype)?;
    if inode.is_dir() {
        dir.nlink += 1;
    }
    touch_dir(&mut dir, ctx.now_ns);
    ctx.w.put_inode(parent, &dir)?;
    match inode.ftype {
        FileType::Dir => ctx.w.bump(META_DIRS, 1)?,
        FileType::File => ctx.w.bump(META_FILES, 1)?,
        _ => {}
    }
    Ok(ino)
}

fn check_subdirs(dir: &Inode, parent: u64) -> Result<(), WireError> {
    if dir.nlink >= MAX_LINKS {
        return Err(WireError::new(
            ErrorCode::TooManyLinks,
            format!("inode {parent} has {MAX_LINKS} subdirectories"),
        ));
    }
    Ok(())
}

pub fn mkdir(ctx: &mut Ctx, parent: u64, name: &str, mode: u32) -> Result<Response, WireError> {
    let dir = prepare(ctx, parent, name)?;
    check_subdirs(&dir, parent)?;
    let mut inode = new_inode(ctx, &dir, FileType::Dir, mode);
    inode.nlink = 2;
    inode.parent = parent;
    inode.dir_layout = dir.dir_layout.clone();
    let ino = link_new(ctx, parent, dir, name, &inode)?;
    Ok(Response::Attr(inode.attr(ino)))
}

pub fn create(
    ctx: &mut Ctx,
    parent: u64,
    name: &str,
    mode: u32,
    exclusive: bool,
    hint: &LayoutHint,
) -> Result<Response, WireError> {
    stripefs_wire::validate_hint(hint)?;
    validate_name(name)?;
    // Only directories have entries, so a hit here means `parent` is a directory.
    if let Some((ino, _)) = ctx.w.entry(parent, name)? {
        return existing(ctx, parent, name, ino, exclusive);
    }
    let dir = prepare(ctx, parent, name)?;
    let mut inode = new_inode(ctx, &dir, FileType::File, mode);
    inode.layout = Some(place(ctx, hint, &dir.dir_layout)?);
    // The layout is placed now all the same: the file takes it when it outgrows its
    // inline threshold.
    let inline_max = hint
        .inline_bytes
        .or(dir.dir_layout.inline_bytes)
        .unwrap_or(ctx.placement.defaults.inline_bytes);
    if inline_max > 0 {
        inode.inline = Some(InlineData::empty(inline_max));
    }
    let ino = link_new(ctx, parent, dir, name, &inode)?;
    Ok(Response::Attr(inode.attr(ino)))
}

/// Create without `exclusive` on an existing name: the existing file, if the caller may
/// open it at all (the Open that follows checks the exact access).
fn existing(
    ctx: &Ctx,
    parent: u64,
    name: &str,
    ino: u64,
    exclusive: bool,
) -> Result<Response, WireError> {
    let exists = || {
        WireError::new(
            ErrorCode::Exists,
            format!("{name:?} already exists in inode {parent}"),
        )
    };
    if exclusive {
        return Err(exists());
    }
    let dir = need_dir(ctx.w, parent)?;
    perm::check(ctx.cred, &dir, parent, perm::X)?;
    let inode = need(ctx.w, ino)?;
    match inode.ftype {
        FileType::File => {}
        FileType::Dir => {
            return Err(WireError::new(
                ErrorCode::IsDir,
                format!("{name:?} in inode {parent} is a directory"),
            ))
        }
        _ => return Err(exists()),
    }
    if !perm::may(ctx.cred, &inode, perm::R) && !perm::may(ctx.cred, &inode, perm::W) {
        perm::check(ctx.cred, &inode, ino, perm::W)?;
    }
    Ok(Response::Attr(inode.attr(ino)))
}

/// Chooses a new file's layout: fields of `hint`, else of the directory's default, else
/// the cluster's; the servers by the rules of `placement.rs` (by default `count`
/// consecutive servers from a start that advances by one per file, so that first stripes
/// and small files spread evenly over the servers).
pub fn place(ctx: &mut Ctx, hint: &LayoutHint, inherit: &LayoutHint) -> Result<Layout, WireError> {
    let p = ctx.placement;
    let w = &mut *ctx.w;
    let n = p.data_servers;
    if n == 0 {
        return Err(WireError::new(
            ErrorCode::Unsupported,
            "the cluster has no data servers to place a file on",
        ));
    }
    let unit = hint
        .stripe_size_bytes
        .or(inherit.stripe_size_bytes)
        .unwrap_or(p.defaults.stripe_size_bytes);
    let up = p.live.snapshot();
    let cluster = placement::Cluster {
        hosts: &p.hosts,
        default_count: p.defaults.stripe_count,
        up: &up,
    };
    // The rotation: one counter for the whole cluster, advanced by one per placed file.
    let mut rotate = |k: u32| -> Result<u32, WireError> {
        let c = w.counter(META_NEXT_SERVER)?;
        w.set_counter(META_NEXT_SERVER, (c + 1) % n as u64)?;
        Ok((c % k as u64) as u32)
    };
    let chosen = placement::choose(&cluster, hint, inherit, ctx.client_host, &mut rotate)?;
    if let Some(note) = chosen.note {
        tracing::info!("{note}");
    }
    Ok(Layout {
        stripe_size_bytes: unit,
        servers: chosen.servers.into_iter().map(ServerId).collect(),
    })
}

pub fn mknod(
    ctx: &mut Ctx,
    parent: u64,
    name: &str,
    mode: u32,
    ftype: FileType,
    rdev: u32,
) -> Result<Response, WireError> {
    if !ftype.is_special() {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("mknod makes FIFOs, sockets and devices, not a {ftype:?}"),
        ));
    }
    if ftype.is_device() && ctx.cred.uid != 0 {
        return Err(WireError::new(
            ErrorCode::NotPermitted,
            format!(
                "only root may make device node {name:?} (uid {})",
                ctx.cred.uid
            ),
        ));
    }
    if !ftype.is_device() && rdev != 0 {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("a {ftype:?} has no device number (got {rdev:#x})"),
        ));
    }
    let dir = prepare(ctx, parent, name)?;
    let mut inode = new_inode(ctx, &dir, ftype, mode);
    inode.rdev = rdev;
    let ino = link_new(ctx, parent, dir, name, &inode)?;
    Ok(Response::Attr(inode.attr(ino)))
}

pub fn symlink(
    ctx: &mut Ctx,
    parent: u64,
    name: &str,
    target: &str,
) -> Result<Response, WireError> {
    if target.is_empty() || target.len() > stripefs_wire::MAX_PATH_BYTES || target.contains('\0') {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("bad symlink target for {name:?} ({} bytes)", target.len()),
        ));
    }
    let dir = prepare(ctx, parent, name)?;
    let mut inode = new_inode(ctx, &dir, FileType::Symlink, 0o777);
    inode.size = target.len() as u64;
    inode.target = Some(target.to_string());
    let ino = link_new(ctx, parent, dir, name, &inode)?;
    Ok(Response::Attr(inode.attr(ino)))
}

pub fn link(ctx: &mut Ctx, ino: u64, parent: u64, name: &str) -> Result<Response, WireError> {
    let mut inode = need(ctx.w, ino)?;
    if inode.is_dir() {
        return Err(WireError::new(
            ErrorCode::NotPermitted,
            format!("inode {ino} is a directory: hard links to directories are not allowed"),
        ));
    }
    if inode.nlink == 0 {
        return Err(WireError::new(
            ErrorCode::NotFound,
            format!("inode {ino} has been unlinked"),
        ));
    }
    if inode.nlink >= MAX_LINKS {
        return Err(WireError::new(
            ErrorCode::TooManyLinks,
            format!("inode {ino} already has {MAX_LINKS} links"),
        ));
    }
    let mut dir = prepare(ctx, parent, name)?;
    inode.nlink += 1;
    inode.ctime_ns = ctx.now_ns;
    ctx.w.put_inode(ino, &inode)?;
    ctx.w.put_entry(parent, name, ino, inode.ftype)?;
    touch_dir(&mut dir, ctx.now_ns);
    ctx.w.put_inode(parent, &dir)?;
    Ok(Response::Attr(inode.attr(ino)))
}
