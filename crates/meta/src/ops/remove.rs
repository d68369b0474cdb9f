//! Unlink and Rmdir, and what happens to an inode whose last link goes away: deleted at
//! once (its data objects queued for purge in the same transaction), or kept as an
//! orphan while a client has it open and purged by the last Close (`reap`).

use super::{need_entry, touch_dir, Ctx};
use crate::perm;
use crate::store::{Inode, Tables, META_DIRS, META_FILES};
use stripefs_wire::{validate_name, ErrorCode, FileType, Response, WireError};

/// Removes one link of `ino`; deletes or orphans it when it was the last.
pub fn drop_link(ctx: &mut Ctx, ino: u64, mut inode: Inode) -> Result<(), WireError> {
    // Data from disk: a record with no links behind an entry is corruption, not a bug.
    inode.nlink = inode.nlink.checked_sub(1).ok_or_else(|| {
        WireError::new(
            ErrorCode::Internal,
            format!("inode {ino} has an entry but nlink 0"),
        )
    })?;
    inode.ctime_ns = ctx.now_ns;
    if inode.nlink > 0 {
        return ctx.w.put_inode(ino, &inode);
    }
    let mut st = ctx.opens.lock();
    if let Some(e) = st.open.get_mut(&ino).filter(|e| !e.sessions.is_empty()) {
        e.unlinked = true;
        drop(st);
        ctx.w.put_inode(ino, &inode)?;
        return ctx.w.set_orphan(ino, true);
    }
    if st.may_be_reclaimed(ino) {
        // A client of the server's previous life may hold it open and not have
        // reclaimed it yet: kept until the grace period ends (see opens.rs).
        drop(st);
        ctx.w.put_inode(ino, &inode)?;
        return ctx.w.set_orphan(ino, true);
    }
    st.dying.insert(ino);
    drop(st);
    delete_inode(ctx, ino, &inode)
}

/// Deletes an inode with no links and queues its data objects for removal.
pub fn delete_inode(ctx: &mut Ctx, ino: u64, inode: &Inode) -> Result<(), WireError> {
    ctx.w.del_inode(ino)?;
    ctx.w.set_orphan(ino, false)?;
    match inode.ftype {
        FileType::File => ctx.w.bump(META_FILES, -1)?,
        FileType::Dir => ctx.w.bump(META_DIRS, -1)?,
        _ => {}
    }
    // An inline file that never began a move has no objects: nothing to purge.
    let no_objects = inode.inline.as_ref().is_some_and(|i| !i.spilled);
    if let Some(layout) = inode.layout.as_ref().filter(|_| !no_objects) {
        ctx.w.enqueue_purge(ino, layout)?;
        ctx.purged = true;
    }
    Ok(())
}

/// Checks that the caller may remove entry `name` (inode `victim`) from `parent`.
pub fn check_remove(
    ctx: &Ctx,
    parent: u64,
    dir: &Inode,
    name: &str,
    victim: &Inode,
) -> Result<(), WireError> {
    perm::check_dir_change(ctx.cred, dir, parent)?;
    perm::check_sticky(ctx.cred, dir, parent, victim, name)
}

pub fn unlink(ctx: &mut Ctx, parent: u64, name: &str) -> Result<Response, WireError> {
    validate_name(name)?;
    let mut dir = super::need_searchable_dir(ctx.w, ctx.cred, parent)?;
    let (ino, inode) = need_entry(ctx.w, parent, name)?;
    if inode.is_dir() {
        return Err(WireError::new(
            ErrorCode::IsDir,
            format!("{name:?} in inode {parent} is a directory (use rmdir)"),
        ));
    }
    check_remove(ctx, parent, &dir, name, &inode)?;
    ctx.w.del_entry(parent, name)?;
    drop_link(ctx, ino, inode)?;
    touch_dir(&mut dir, ctx.now_ns);
    ctx.w.put_inode(parent, &dir)?;
    // The directory as changed, so that a client caching its attributes stays exact.
    Ok(Response::Attr(dir.attr(parent)))
}

/// `NotEmpty` unless directory `ino` has no entries.
pub fn check_empty<T: Tables>(t: &T, ino: u64) -> Result<(), WireError> {
    let (first, _) = t.entries(ino, "", 1)?;
    if let Some(e) = first.first() {
        return Err(WireError::new(
            ErrorCode::NotEmpty,
            format!("directory inode {ino} is not empty (holds {:?})", e.name),
        ));
    }
    Ok(())
}

pub fn rmdir(ctx: &mut Ctx, parent: u64, name: &str) -> Result<Response, WireError> {
    validate_name(name)?;
    let mut dir = super::need_searchable_dir(ctx.w, ctx.cred, parent)?;
    let (ino, inode) = need_entry(ctx.w, parent, name)?;
    if !inode.is_dir() {
        return Err(WireError::new(
            ErrorCode::NotDir,
            format!("{name:?} in inode {parent} is not a directory"),
        ));
    }
    check_empty(ctx.w, ino)?;
    check_remove(ctx, parent, &dir, name, &inode)?;
    ctx.w.del_entry(parent, name)?;
    ctx.opens.lock().dying.insert(ino);
    delete_inode(ctx, ino, &inode)?;
    dir.nlink = dir.nlink.saturating_sub(1).max(2);
    touch_dir(&mut dir, ctx.now_ns);
    ctx.w.put_inode(parent, &dir)?;
    // The directory as changed, so that a client caching its attributes stays exact.
    Ok(Response::Attr(dir.attr(parent)))
}

/// After the last Close of an inode that lost its last link while open: purge it,
/// unless it was opened again meanwhile or never lost its links after all.
pub fn reap(ctx: &mut Ctx, ino: u64) -> Result<(), WireError> {
    let Some(inode) = ctx.w.inode(ino)? else {
        return Ok(());
    };
    if inode.nlink > 0 {
        return Ok(());
    }
    {
        let mut st = ctx.opens.lock();
        if st.is_open(ino) {
            return Ok(());
        }
        st.dying.insert(ino);
    }
    delete_inode(ctx, ino, &inode)
}
