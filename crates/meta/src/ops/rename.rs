//! Rename: moves an entry, atomically replacing an existing destination as POSIX
//! rename(2) does (a directory only over an empty directory, a non-directory only over a
//! non-directory), refusing to move a directory into its own subtree. Exchange swaps two
//! entries (renameat2 RENAME_EXCHANGE).

use super::remove::{check_empty, check_remove, delete_inode, drop_link};
use super::{need_entry, touch_dir, Ctx, MAX_LINKS};
use crate::perm;
use crate::store::{need, need_dir, Inode, Tables};
use stripefs_wire::{validate_name, ErrorCode, InodeId, Response, WireError};

/// Longest chain of parents walked by the subtree check; deeper means a corrupt cycle.
const MAX_DEPTH: usize = 1 << 16;

pub fn rename(
    ctx: &mut Ctx,
    src_parent: u64,
    src_name: &str,
    dst_parent: u64,
    dst_name: &str,
    noreplace: bool,
) -> Result<Response, WireError> {
    validate_name(src_name)?;
    validate_name(dst_name)?;
    let sdir = super::need_searchable_dir(ctx.w, ctx.cred, src_parent)?;
    let ddir = super::need_searchable_dir(ctx.w, ctx.cred, dst_parent)?;
    let (ino, inode) = need_entry(ctx.w, src_parent, src_name)?;
    let dst = match ctx.w.entry(dst_parent, dst_name)? {
        Some(_) => Some(need_entry(ctx.w, dst_parent, dst_name)?),
        None => None,
    };
    // The checks in the order Linux makes them, so that each case gets its errno.
    if dst.is_some() && noreplace {
        return Err(WireError::new(
            ErrorCode::Exists,
            format!("{dst_name:?} already exists in inode {dst_parent}"),
        ));
    }
    let moves_dir = inode.is_dir() && src_parent != dst_parent;
    if moves_dir {
        check_not_into_itself(ctx, ino, dst_parent)?;
    }
    if let Some((dino, dinode)) = &dst {
        // A destination above the source is not empty (Linux says so before any check
        // of the two types).
        if dinode.is_dir() && *dino != ino && within(ctx, *dino, src_parent)? {
            return Err(WireError::new(
                ErrorCode::NotEmpty,
                format!("{dst_name:?} in inode {dst_parent} contains {src_name:?}"),
            ));
        }
    }
    if dst.as_ref().is_some_and(|(dino, _)| *dino == ino) {
        // Two links to one inode (or one name to itself): POSIX says do nothing.
        return Ok(Response::Done);
    }
    check_remove(ctx, src_parent, &sdir, src_name, &inode)?;
    perm::check_dir_change(ctx.cred, &ddir, dst_parent)?;
    if let Some((dino, dinode)) = &dst {
        check_replace(ctx, &inode, dst_parent, &ddir, dst_name, *dino, dinode)?;
    }
    if moves_dir {
        check_move_dir(ctx, ino, &inode, dst_parent, &ddir)?;
    }
    apply(
        ctx,
        Move {
            src_parent,
            src_name,
            dst_parent,
            dst_name,
            ino,
            inode,
            dst,
        },
    )
}

/// Swaps entry `a_name` of `a_parent` and entry `b_name` of `b_parent` in one commit
/// (renameat2 RENAME_EXCHANGE): each name then names the other's inode, whatever their
/// types. Checks in Linux's order: both exist; a directory is not swapped under itself
/// (`InvalidArgument`); one inode twice changes nothing; both entries may be removed
/// from their directories (write and search permission, the sticky rule); a directory
/// that changes parent needs write permission on itself (its `..` changes), and a
/// parent that gains a subdirectory room for its link.
///
/// Each side is `(parent, name, inode the client found there)`: a name that names
/// another inode now is `StaleHandle`, so that the same request arriving twice cannot
/// swap the names back.
pub fn exchange(
    ctx: &mut Ctx,
    (a_parent, a_name, a_seen): (u64, &str, u64),
    (b_parent, b_name, b_seen): (u64, &str, u64),
) -> Result<Response, WireError> {
    validate_name(a_name)?;
    validate_name(b_name)?;
    let adir = super::need_searchable_dir(ctx.w, ctx.cred, a_parent)?;
    let bdir = super::need_searchable_dir(ctx.w, ctx.cred, b_parent)?;
    let (a_ino, a) = need_entry(ctx.w, a_parent, a_name)?;
    let (b_ino, b) = need_entry(ctx.w, b_parent, b_name)?;
    for (parent, name, seen, now) in [
        (a_parent, a_name, a_seen, a_ino),
        (b_parent, b_name, b_seen, b_ino),
    ] {
        if seen != now {
            return Err(WireError::new(
                ErrorCode::StaleHandle,
                format!("{name:?} in inode {parent} names inode {now}, not {seen} any more"),
            ));
        }
    }
    let moves = a_parent != b_parent;
    if moves {
        if a.is_dir() {
            check_not_into_itself(ctx, a_ino, b_parent)?;
        }
        if b.is_dir() {
            check_not_into_itself(ctx, b_ino, a_parent)?;
        }
    }
    if a_ino == b_ino {
        return Ok(Response::Done);
    }
    check_remove(ctx, a_parent, &adir, a_name, &a)?;
    check_remove(ctx, b_parent, &bdir, b_name, &b)?;
    // A directory swapped with a non-directory across parents moves one link.
    let a_gains = moves && b.is_dir() && !a.is_dir();
    let b_gains = moves && a.is_dir() && !b.is_dir();
    if moves {
        for (ino, inode) in [(a_ino, &a), (b_ino, &b)] {
            if inode.is_dir() {
                perm::check(ctx.cred, inode, ino, perm::W)?;
            }
        }
        for (gains, dir, ino) in [(a_gains, &adir, a_parent), (b_gains, &bdir, b_parent)] {
            if gains && dir.nlink >= MAX_LINKS {
                return Err(WireError::new(
                    ErrorCode::TooManyLinks,
                    format!("inode {ino} has {MAX_LINKS} subdirectories"),
                ));
            }
        }
    }
    let now = ctx.now_ns;
    ctx.w.put_entry(a_parent, a_name, b_ino, b.ftype)?;
    ctx.w.put_entry(b_parent, b_name, a_ino, a.ftype)?;
    for (ino, mut inode, new_parent) in [(a_ino, a, b_parent), (b_ino, b, a_parent)] {
        inode.ctime_ns = now;
        if inode.is_dir() {
            inode.parent = new_parent;
        }
        ctx.w.put_inode(ino, &inode)?;
    }
    // Parents are re-read: they may be one directory (then no link moves).
    for (ino, gains, loses) in [(a_parent, a_gains, b_gains), (b_parent, b_gains, a_gains)] {
        let mut dir = need_dir(ctx.w, ino)?;
        if gains {
            dir.nlink += 1;
        }
        if loses {
            dir.nlink = dir.nlink.saturating_sub(1).max(2);
        }
        touch_dir(&mut dir, now);
        ctx.w.put_inode(ino, &dir)?;
    }
    Ok(Response::Done)
}

/// The checks for replacing the existing destination `dino`.
fn check_replace(
    ctx: &Ctx,
    src: &Inode,
    dst_parent: u64,
    ddir: &Inode,
    dst_name: &str,
    dino: u64,
    dinode: &Inode,
) -> Result<(), WireError> {
    match (src.is_dir(), dinode.is_dir()) {
        (false, true) => {
            return Err(WireError::new(
                ErrorCode::IsDir,
                format!(
                "cannot replace directory {dst_name:?} in inode {dst_parent} by a non-directory"
            ),
            ))
        }
        (true, false) => {
            return Err(WireError::new(
                ErrorCode::NotDir,
                format!(
                "cannot replace non-directory {dst_name:?} in inode {dst_parent} by a directory"
            ),
            ))
        }
        (true, true) => check_empty(ctx.w, dino)?,
        (false, false) => {}
    }
    perm::check_sticky(ctx.cred, ddir, dst_parent, dinode, dst_name)
}

/// Moving directory `ino` under `dst_parent`: its `..` changes, so it needs write
/// permission itself, and the new parent gains a link.
fn check_move_dir(
    ctx: &Ctx,
    ino: u64,
    inode: &Inode,
    dst_parent: u64,
    ddir: &Inode,
) -> Result<(), WireError> {
    perm::check(ctx.cred, inode, ino, perm::W)?;
    if ddir.nlink >= MAX_LINKS {
        return Err(WireError::new(
            ErrorCode::TooManyLinks,
            format!("inode {dst_parent} has {MAX_LINKS} subdirectories"),
        ));
    }
    Ok(())
}

/// `InvalidArgument` if `dst_parent` is directory `ino` or lies below it: the move
/// would cut the subtree off from the root.
fn check_not_into_itself(ctx: &Ctx, ino: u64, dst_parent: u64) -> Result<(), WireError> {
    if within(ctx, ino, dst_parent)? {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("cannot move directory inode {ino} into its own subtree (inode {dst_parent})"),
        ));
    }
    Ok(())
}

/// Whether directory `ino` is `dir` or one of its ancestors.
fn within(ctx: &Ctx, ino: u64, dir: u64) -> Result<bool, WireError> {
    let mut at = dir;
    for _ in 0..MAX_DEPTH {
        if at == ino {
            return Ok(true);
        }
        if at == InodeId::ROOT.0 {
            return Ok(false);
        }
        at = need(ctx.w, at)?.parent;
    }
    Err(WireError::new(
        ErrorCode::Internal,
        format!("parents of inode {dir} do not lead to the root"),
    ))
}

struct Move<'n> {
    src_parent: u64,
    src_name: &'n str,
    dst_parent: u64,
    dst_name: &'n str,
    ino: u64,
    inode: Inode,
    dst: Option<(u64, Inode)>,
}

/// The writes of a checked rename.
fn apply(ctx: &mut Ctx, m: Move) -> Result<Response, WireError> {
    let now = ctx.now_ns;
    let is_dir = m.inode.is_dir();
    ctx.w.del_entry(m.src_parent, m.src_name)?;
    let mut replaced_dir = false;
    if let Some((dino, dinode)) = m.dst {
        ctx.w.del_entry(m.dst_parent, m.dst_name)?;
        if dinode.is_dir() {
            replaced_dir = true;
            ctx.opens.lock().dying.insert(dino);
            delete_inode(ctx, dino, &dinode)?;
        } else {
            drop_link(ctx, dino, dinode)?;
        }
    }
    ctx.w
        .put_entry(m.dst_parent, m.dst_name, m.ino, m.inode.ftype)?;
    let mut inode = m.inode;
    inode.ctime_ns = now;
    if is_dir {
        inode.parent = m.dst_parent;
    }
    ctx.w.put_inode(m.ino, &inode)?;
    // Parents are re-read: the source and destination may be one directory.
    let mut sdir = need_dir(ctx.w, m.src_parent)?;
    if is_dir && m.src_parent != m.dst_parent {
        sdir.nlink = sdir.nlink.saturating_sub(1).max(2);
    }
    touch_dir(&mut sdir, now);
    ctx.w.put_inode(m.src_parent, &sdir)?;
    let mut ddir = need_dir(ctx.w, m.dst_parent)?;
    if is_dir && m.src_parent != m.dst_parent {
        ddir.nlink += 1;
    }
    if replaced_dir {
        ddir.nlink = ddir.nlink.saturating_sub(1).max(2);
    }
    touch_dir(&mut ddir, now);
    ctx.w.put_inode(m.dst_parent, &ddir)?;
    Ok(Response::Done)
}
