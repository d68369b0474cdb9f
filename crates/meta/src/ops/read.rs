//! Lookup, GetAttr, ReadDir(Plus), Readlink, Resolve and Access: reads that run on a read
//! transaction in the connection's thread, never waiting for the writer.

use super::need_entry;
use crate::perm;
use crate::store::{need, need_dir, Tables};
use std::collections::VecDeque;
use stripefs_wire::{
    validate_name, Cred, ErrorCode, FileType, InodeId, Response, WireError, READDIRPLUS_BODY_BYTES,
};

/// Most symbolic links followed while resolving one path, as Linux's MAXSYMLINKS.
pub const MAX_SYMLINKS: u32 = 40;

pub fn lookup<T: Tables>(
    t: &T,
    cred: &Cred,
    parent: u64,
    name: &str,
) -> Result<Response, WireError> {
    validate_name(name)?;
    let dir = need_dir(t, parent)?;
    perm::check(cred, &dir, parent, perm::X)?;
    let (ino, inode) = need_entry(t, parent, name)?;
    Ok(Response::Attr(inode.attr(ino)))
}

pub fn get_attr<T: Tables>(t: &T, ino: u64) -> Result<Response, WireError> {
    Ok(Response::Attr(need(t, ino)?.attr(ino)))
}

pub fn read_dir<T: Tables>(
    t: &T,
    cred: &Cred,
    ino: u64,
    after: &str,
    limit: u32,
) -> Result<Response, WireError> {
    let (entries, done) = dir_page(t, cred, ino, after, limit, perm::R)?;
    Ok(Response::Entries { entries, done })
}

/// Up to `limit` entries of directory `ino` after `after`, for a caller with `mask`
/// permission on it.
fn dir_page<T: Tables>(
    t: &T,
    cred: &Cred,
    ino: u64,
    after: &str,
    limit: u32,
    mask: u32,
) -> Result<(Vec<stripefs_wire::DirEntry>, bool), WireError> {
    if !after.is_empty() {
        validate_name(after)?;
    }
    let limit = limit.clamp(1, stripefs_wire::MAX_READDIR_ENTRIES);
    let dir = need_dir(t, ino)?;
    perm::check(cred, &dir, ino, mask)?;
    t.entries(ino, after, limit as usize)
}

/// ReadDir with each entry's attributes (what a Lookup of each name answers): needs
/// read and search permission on the directory. A page ends early, not `done`, once its
/// encoded entries pass [`READDIRPLUS_BODY_BYTES`] (layouts can be long).
pub fn read_dir_plus<T: Tables>(
    t: &T,
    cred: &Cred,
    ino: u64,
    after: &str,
    limit: u32,
) -> Result<Response, WireError> {
    let (entries, mut done) = dir_page(t, cred, ino, after, limit, perm::R | perm::X)?;
    let mut out = Vec::with_capacity(entries.len());
    let mut bytes = 0;
    for e in entries {
        let attr = need(t, e.ino.0)?.attr(e.ino.0);
        // The name's bytes and its length (a varint of at most 2 bytes), the attributes.
        bytes += e.name.len() + 2 + stripefs_wire::encoded_len(&attr);
        if !out.is_empty() && bytes > READDIRPLUS_BODY_BYTES {
            done = false;
            break;
        }
        out.push((e.name, attr));
    }
    Ok(Response::EntriesPlus { entries: out, done })
}

pub fn readlink<T: Tables>(t: &T, ino: u64) -> Result<Response, WireError> {
    let inode = need(t, ino)?;
    match (inode.ftype, inode.target) {
        (FileType::Symlink, Some(target)) => Ok(Response::Target(target)),
        (FileType::Symlink, None) => Err(WireError::new(
            ErrorCode::Internal,
            format!("symlink inode {ino} has no target"),
        )),
        _ => Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("inode {ino} is not a symbolic link"),
        )),
    }
}

pub fn access<T: Tables>(t: &T, cred: &Cred, ino: u64, mask: u32) -> Result<Response, WireError> {
    let inode = need(t, ino)?;
    if mask & !7 != 0 {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("access mask {mask:#o} has bits other than R, W, X"),
        ));
    }
    perm::check(cred, &inode, ino, mask)?;
    Ok(Response::Done)
}

fn components(path: &str) -> VecDeque<String> {
    path.split('/')
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .collect()
}

/// Walks `path` from the root, checking search permission on every directory passed,
/// following symlinks in the middle (and at the end if `follow`).
pub fn resolve<T: Tables>(
    t: &T,
    cred: &Cred,
    path: &str,
    follow: bool,
) -> Result<Response, WireError> {
    if path.is_empty() {
        return Err(WireError::new(ErrorCode::NotFound, "empty path"));
    }
    let mut rest = components(path);
    let trailing_slash = path.ends_with('/');
    let mut cur = InodeId::ROOT.0;
    let mut cur_inode = need(t, cur)?;
    let mut links = 0;
    while let Some(c) = rest.pop_front() {
        if !cur_inode.is_dir() {
            return Err(WireError::new(
                ErrorCode::NotDir,
                format!("in path {path:?}: inode {cur} before {c:?} is not a directory"),
            ));
        }
        perm::check(cred, &cur_inode, cur, perm::X)?;
        if c == "." {
            continue;
        }
        if c == ".." {
            cur = cur_inode.parent;
            cur_inode = need(t, cur)?;
            continue;
        }
        validate_name(&c)?;
        let Some((child, _)) = t.entry(cur, &c)? else {
            return Err(WireError::new(
                ErrorCode::NotFound,
                format!("in path {path:?}: no {c:?} in inode {cur}"),
            ));
        };
        let inode = need(t, child)?;
        let last = rest.is_empty();
        if inode.ftype == FileType::Symlink && (!last || follow || trailing_slash) {
            links += 1;
            if links > MAX_SYMLINKS {
                return Err(WireError::new(
                    ErrorCode::Loop,
                    format!("path {path:?} passes more than {MAX_SYMLINKS} symbolic links"),
                ));
            }
            let target = inode.target.unwrap_or_default();
            let mut next = components(&target);
            next.extend(rest);
            rest = next;
            if target.starts_with('/') {
                cur = InodeId::ROOT.0;
                cur_inode = need(t, cur)?;
            }
            continue;
        }
        cur = child;
        cur_inode = inode;
    }
    if trailing_slash && !cur_inode.is_dir() {
        return Err(WireError::new(
            ErrorCode::NotDir,
            format!("path {path:?} ends with '/' but inode {cur} is not a directory"),
        ));
    }
    Ok(Response::Attr(cur_inode.attr(cur)))
}
