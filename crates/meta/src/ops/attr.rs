//! SetAttr, ExtendSize and SetLayout: changes to one inode's attributes.

use super::Ctx;
use crate::perm;
use crate::store::{need, Inode};
use stripefs_wire::{ErrorCode, FileType, LayoutHint, Response, SetAttrs, SetTime, WireError};

fn require_file(inode: &Inode, ino: u64, what: &str) -> Result<(), WireError> {
    match inode.ftype {
        FileType::File => Ok(()),
        FileType::Dir => Err(WireError::new(
            ErrorCode::IsDir,
            format!("cannot {what} directory inode {ino}"),
        )),
        t => Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("cannot {what} inode {ino}: a {t:?}, not a regular file"),
        )),
    }
}

pub fn set_attr(ctx: &mut Ctx, ino: u64, a: &SetAttrs) -> Result<Response, WireError> {
    let mut inode = need(ctx.w, ino)?;
    check_set_attr(ctx, ino, &inode, a)?;
    let same_size = SetAttrs {
        size: Some(inode.size),
        ..SetAttrs::default()
    };
    if *a == same_size {
        // truncate(2) to the current size changes nothing, times included: POSIX marks
        // them "if the file size is changed" (ftruncate sends mtime "now" along).
        return Ok(Response::Attr(inode.attr(ino)));
    }
    let now = ctx.now_ns;
    let cred = ctx.cred;
    if let Some(mode) = a.mode {
        let mut mode = mode & 0o7777;
        if cred.uid != 0 && !perm::in_group(cred, a.gid.unwrap_or(inode.gid)) {
            mode &= !perm::S_ISGID;
        }
        inode.mode = mode;
    }
    let chown = a.uid.is_some_and(|u| u != inode.uid) || a.gid.is_some_and(|g| g != inode.gid);
    if chown && inode.ftype != FileType::Dir {
        inode.mode = perm::strip_setid_on_chown(inode.mode);
    }
    inode.uid = a.uid.unwrap_or(inode.uid);
    inode.gid = a.gid.unwrap_or(inode.gid);
    if let Some(size) = a.size.filter(|&s| s != inode.size) {
        crate::inline::resize(ctx, ino, &mut inode, size)?;
        inode.size = size;
        inode.mtime_ns = now;
        inode.mode = perm::strip_setid_on_write(cred, &inode);
    }
    let at = |t: SetTime| match t {
        SetTime::Now => now,
        SetTime::AtNs(ns) => ns,
    };
    if let Some(t) = a.atime {
        inode.atime_ns = at(t);
    }
    if let Some(t) = a.mtime {
        inode.mtime_ns = at(t);
    }
    inode.ctime_ns = now;
    ctx.w.put_inode(ino, &inode)?;
    Ok(Response::Attr(inode.attr(ino)))
}

/// All the permission and type checks of SetAttr, before anything changes.
fn check_set_attr(ctx: &Ctx, ino: u64, inode: &Inode, a: &SetAttrs) -> Result<(), WireError> {
    let cred = ctx.cred;
    // The right to write, judged by the handle it came through when it came through one.
    let may_write =
        || (a.via_write_handle && ctx.opens.lock().is_open(ino)) || perm::may(cred, inode, perm::W);
    if let Some(mode) = a.mode {
        // Clearing only set-ID bits is what the kernel asks on a write or truncate by
        // someone who is not the owner: allowed to whoever may write.
        let only_clears_setid = perm::only_clears_setid(inode.mode, mode);
        if !(only_clears_setid && may_write()) {
            perm::require_owner(cred, inode, ino, "change the mode of")?;
        }
    }
    if a.uid.is_some_and(|u| u != inode.uid) && cred.uid != 0 {
        return Err(WireError::new(
            ErrorCode::NotPermitted,
            format!("only root may change the owner of inode {ino}"),
        ));
    }
    if let Some(g) = a.gid.filter(|&g| g != inode.gid) {
        let ok = cred.uid == 0 || (cred.uid == inode.uid && perm::in_group(cred, g));
        if !ok {
            return Err(WireError::new(
                ErrorCode::NotPermitted,
                format!("uid {} may not give inode {ino} to group {g}", cred.uid),
            ));
        }
    }
    if a.size.is_some() {
        require_file(inode, ino, "truncate")?;
        if !may_write() {
            perm::check(cred, inode, ino, perm::W)?;
        }
    }
    for t in [a.atime, a.mtime].into_iter().flatten() {
        match t {
            SetTime::AtNs(_) => perm::require_owner(cred, inode, ino, "set the times of")?,
            SetTime::Now if !perm::is_owner(cred, inode) => perm::check(cred, inode, ino, perm::W)?,
            SetTime::Now => {}
        }
    }
    Ok(())
}

/// Records data written up to `size`: the size only grows, so that writers at different
/// offsets end with the largest end, in any order.
pub fn extend_size(
    ctx: &mut Ctx,
    ino: u64,
    size: u64,
    mtime_ns: i64,
) -> Result<Response, WireError> {
    let mut inode = need(ctx.w, ino)?;
    require_file(&inode, ino, "extend")?;
    let open = ctx.opens.lock().is_open(ino);
    if !open {
        perm::check(ctx.cred, &inode, ino, perm::W)?;
    }
    if size > inode.size {
        crate::inline::resize(ctx, ino, &mut inode, size)?;
    }
    inode.size = inode.size.max(size);
    inode.mtime_ns = inode.mtime_ns.max(mtime_ns);
    // Written by someone other than root: set-ID bits go, as on any write.
    inode.mode = perm::strip_setid_on_write(ctx.cred, &inode);
    inode.ctime_ns = inode.ctime_ns.max(ctx.now_ns);
    ctx.w.put_inode(ino, &inode)?;
    Ok(Response::Attr(inode.attr(ino)))
}

/// On a directory sets the default layout of new files in it; on a file with no data
/// yet, places the file anew.
pub fn set_layout(ctx: &mut Ctx, ino: u64, hint: &LayoutHint) -> Result<Response, WireError> {
    stripefs_wire::validate_hint(hint)?;
    let mut inode = need(ctx.w, ino)?;
    perm::require_owner(ctx.cred, &inode, ino, "set the layout of")?;
    match inode.ftype {
        FileType::Dir => {
            super::placement::check_hint(hint, ctx.placement.data_servers)?;
            inode.dir_layout = hint.clone();
        }
        FileType::File => {
            if inode.size != 0 {
                return Err(WireError::new(
                    ErrorCode::InvalidArgument,
                    format!(
                        "cannot change the layout of inode {ino}: file has data ({} bytes)",
                        inode.size
                    ),
                ));
            }
            let current = inode.layout.as_ref().map(|l| LayoutHint {
                stripe_size_bytes: Some(l.stripe_size_bytes),
                stripe_count: Some(l.servers.len() as u32),
                ..LayoutHint::default()
            });
            let layout = super::create::place(ctx, hint, &current.unwrap_or_default())?;
            inode.layout = Some(layout);
        }
        t => {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!("inode {ino} is a {t:?}: only files and directories have layouts"),
            ))
        }
    }
    inode.ctime_ns = ctx.now_ns;
    ctx.w.put_inode(ino, &inode)?;
    Ok(Response::Attr(inode.attr(ino)))
}
