//! Extended attributes: GetXattr and ListXattr (reads), SetXattr and RemoveXattr
//! (mutations). They live in the inode record, sorted by name. The namespaces and who
//! may touch them follow Linux (`xattr_permission` in fs/xattr.c, and the capability
//! rules for `security.*` without a security module):
//!
//! - `user.*`: regular files and directories only (other types: no such attribute to
//!   read, EPERM to write); reading needs read permission, writing write permission,
//!   and in a sticky directory only its owner or root may write them;
//! - `trusted.*`: root only (others read no such attribute, get EPERM on writes, and
//!   do not see them listed);
//! - `security.*`: anyone reads, root writes;
//! - `system.*` (POSIX ACLs) and unknown namespaces: not supported (EOPNOTSUPP), so
//!   tools fall back to the mode bits.

use super::Ctx;
use crate::perm;
use crate::store::{need, Inode, Tables};
use stripefs_wire::{
    xattr_name_ok, Cred, ErrorCode, FileType, Response, WireError, XATTR_SET_CREATE,
    XATTR_SET_REPLACE,
};

/// Most bytes of names and values one inode holds (past it a set answers ENOSPC, as a
/// full ext4 attribute space does). The attributes live in the inode's record, which a
/// directory rewrites at every change of its entries: kept small, they cost creates
/// nothing.
pub const MAX_XATTR_TOTAL: usize = 64 << 10;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Space {
    User,
    Trusted,
    Security,
}

fn space(name: &str) -> Result<Space, WireError> {
    xattr_name_ok(name)?;
    let (prefix, rest) = name.split_once('.').unwrap_or((name, ""));
    let space = match prefix {
        "user" => Space::User,
        "trusted" => Space::Trusted,
        "security" => Space::Security,
        _ => {
            return Err(WireError::new(
                ErrorCode::AttrUnsupported,
                format!("extended attribute {name:?}: namespace {prefix:?} is not kept (user, trusted and security are)"),
            ))
        }
    };
    if rest.is_empty() {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("extended attribute {name:?} has no name after its namespace"),
        ));
    }
    Ok(space)
}

fn no_attr(ino: u64, name: &str) -> WireError {
    WireError::new(
        ErrorCode::NoAttr,
        format!("inode {ino} has no extended attribute {name:?}"),
    )
}

fn not_permitted(cred: &Cred, ino: u64, name: &str, why: &str) -> WireError {
    WireError::new(
        ErrorCode::NotPermitted,
        format!(
            "uid {} may not change extended attribute {name:?} of inode {ino}: {why}",
            cred.uid
        ),
    )
}

/// Whether `cred` may read attribute `name` of `inode`: `Ok(false)` when the attribute
/// is to read as absent (Linux answers ENODATA there), an error when refused.
fn may_read(cred: &Cred, inode: &Inode, ino: u64, name: &str) -> Result<bool, WireError> {
    match space(name)? {
        Space::Trusted => Ok(cred.uid == 0),
        Space::Security => Ok(true),
        Space::User => {
            if !matches!(inode.ftype, FileType::File | FileType::Dir) {
                return Ok(false);
            }
            perm::check(cred, inode, ino, perm::R)?;
            Ok(true)
        }
    }
}

fn check_write(cred: &Cred, inode: &Inode, ino: u64, name: &str) -> Result<(), WireError> {
    match space(name)? {
        Space::Trusted | Space::Security if cred.uid != 0 => Err(not_permitted(
            cred,
            ino,
            name,
            "only root writes this namespace",
        )),
        Space::Trusted | Space::Security => Ok(()),
        Space::User => {
            if !matches!(inode.ftype, FileType::File | FileType::Dir) {
                return Err(not_permitted(
                    cred,
                    ino,
                    name,
                    "user attributes belong to regular files and directories",
                ));
            }
            if inode.ftype == FileType::Dir
                && inode.mode & 0o1000 != 0
                && !perm::is_owner(cred, inode)
            {
                return Err(not_permitted(
                    cred,
                    ino,
                    name,
                    "the directory is sticky and not the caller's",
                ));
            }
            perm::check(cred, inode, ino, perm::W)
        }
    }
}

fn find(inode: &Inode, name: &str) -> Result<usize, usize> {
    inode.xattrs.binary_search_by(|(n, _)| n.as_str().cmp(name))
}

pub fn get<T: Tables>(t: &T, cred: &Cred, ino: u64, name: &str) -> Result<Response, WireError> {
    let inode = need(t, ino)?;
    if !may_read(cred, &inode, ino, name)? {
        return Err(no_attr(ino, name));
    }
    match find(&inode, name) {
        Ok(i) => Ok(Response::Xattr {
            value: inode.xattrs[i].1.clone(),
        }),
        Err(_) => Err(no_attr(ino, name)),
    }
}

pub fn list<T: Tables>(t: &T, cred: &Cred, ino: u64) -> Result<Response, WireError> {
    let inode = need(t, ino)?;
    let names = inode
        .xattrs
        .iter()
        .map(|(n, _)| n)
        .filter(|n| cred.uid == 0 || !n.starts_with("trusted."))
        .cloned()
        .collect();
    Ok(Response::XattrNames { names })
}

pub fn set(
    ctx: &mut Ctx,
    ino: u64,
    name: &str,
    value: &[u8],
    mode: u8,
) -> Result<Response, WireError> {
    let mut inode = need(ctx.w, ino)?;
    check_write(ctx.cred, &inode, ino, name)?;
    let at = find(&inode, name);
    match (at, mode) {
        (Ok(_), XATTR_SET_CREATE) => {
            return Err(WireError::new(
                ErrorCode::Exists,
                format!("inode {ino} has extended attribute {name:?} already"),
            ))
        }
        (Err(_), XATTR_SET_REPLACE) => return Err(no_attr(ino, name)),
        _ => {}
    }
    let used: usize = inode.xattrs.iter().map(|(n, v)| n.len() + v.len()).sum();
    let freed = at.map_or(0, |i| name.len() + inode.xattrs[i].1.len());
    let total = used - freed + name.len() + value.len();
    if total > MAX_XATTR_TOTAL {
        return Err(WireError::new(
            ErrorCode::NoSpace,
            format!(
                "inode {ino}: extended attributes would take {total} bytes (at most {MAX_XATTR_TOTAL})"
            ),
        ));
    }
    match at {
        Ok(i) => inode.xattrs[i].1 = value.to_vec(),
        Err(i) => inode.xattrs.insert(i, (name.to_string(), value.to_vec())),
    }
    inode.ctime_ns = inode.ctime_ns.max(ctx.now_ns);
    ctx.w.put_inode(ino, &inode)?;
    Ok(Response::Attr(inode.attr(ino)))
}

pub fn remove(ctx: &mut Ctx, ino: u64, name: &str) -> Result<Response, WireError> {
    let mut inode = need(ctx.w, ino)?;
    check_write(ctx.cred, &inode, ino, name)?;
    let i = find(&inode, name).map_err(|_| no_attr(ino, name))?;
    inode.xattrs.remove(i);
    inode.ctime_ns = inode.ctime_ns.max(ctx.now_ns);
    ctx.w.put_inode(ino, &inode)?;
    Ok(Response::Attr(inode.attr(ino)))
}
