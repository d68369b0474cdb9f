//! Checks of requests that need no server state: names, paths, limits, alignment and
//! that a write's CRC list matches its data. Each row of the operation table (ops.rs)
//! names the check of its request; these are the ones longer than a call.

use crate::{
    check_path, check_unit, pieces, validate_name, xattr_name_ok, ErrorCode, WireError,
    BLOCK_BYTES, MAX_DATA_BYTES, MAX_LIST_EXTENTS, MAX_LIST_OBJECTS, MAX_LOCAL_WRITE,
    MAX_READDIR_ENTRIES, MAX_SEEK_OFFSET, MAX_XATTR_VALUE, XATTR_SET_REPLACE,
};

fn invalid(m: String) -> Result<(), WireError> {
    Err(WireError::new(ErrorCode::InvalidArgument, m))
}

/// A list request's extents or ranges: 1 to `MAX_LIST_EXTENTS` of them.
fn list_length(what: &str, parts: &str, n: usize) -> Result<(), WireError> {
    if n == 0 || n > MAX_LIST_EXTENTS {
        return invalid(format!(
            "a list {what} has {n} {parts}, not 1..={MAX_LIST_EXTENTS}"
        ));
    }
    Ok(())
}

fn too_far(what: &str) -> WireError {
    WireError::new(
        ErrorCode::FileTooBig,
        format!("{what} beyond the largest offset"),
    )
}

pub(crate) fn symlink(name: &str, target: &str) -> Result<(), WireError> {
    validate_name(name)?;
    check_path(target)?;
    if target.is_empty() {
        return Err(WireError::new(ErrorCode::NotFound, "empty symlink target"));
    }
    Ok(())
}

/// A directory page: the name it continues after (empty: from the start) and its size.
pub(crate) fn page(after: &str, limit: u32) -> Result<(), WireError> {
    if !after.is_empty() {
        validate_name(after)?;
    }
    if limit == 0 || limit > MAX_READDIR_ENTRIES {
        return invalid(format!(
            "readdir limit {limit} not in 1..={MAX_READDIR_ENTRIES}"
        ));
    }
    Ok(())
}

pub(crate) fn set_xattr(name: &str, value: &[u8], mode: u8) -> Result<(), WireError> {
    xattr_name_ok(name)?;
    if value.len() > MAX_XATTR_VALUE {
        return Err(WireError::new(
            ErrorCode::AttrTooBig,
            format!(
                "extended attribute value of {} bytes (at most {MAX_XATTR_VALUE})",
                value.len()
            ),
        ));
    }
    if mode > XATTR_SET_REPLACE {
        return invalid(format!("SetXattr mode {mode} (0 any, 1 create, 2 replace)"));
    }
    Ok(())
}

pub(crate) fn write(unit: u32, offset: u64, crcs: &[u32], data_len: u32) -> Result<(), WireError> {
    check_unit(unit)?;
    if offset.checked_add(data_len as u64).is_none() {
        return Err(too_far("write"));
    }
    let n = pieces(offset, data_len as usize).count();
    if crcs.len() != n {
        return invalid(format!(
            "write of {data_len} bytes has {} checksums, needs {n}",
            crcs.len()
        ));
    }
    Ok(())
}

pub(crate) fn write_list(
    unit: u32,
    extents: &[(u64, u32)],
    crcs: &[u32],
    data_len: u32,
) -> Result<(), WireError> {
    check_unit(unit)?;
    list_length("write", "extents", extents.len())?;
    let mut total: u64 = 0;
    let mut n = 0;
    for &(offset, len) in extents {
        if len == 0 {
            return invalid(format!("a list write has an empty extent at {offset}"));
        }
        if offset.checked_add(len as u64).is_none() {
            return Err(too_far("write"));
        }
        total += len as u64;
        n += pieces(offset, len as usize).count();
    }
    if total != data_len as u64 {
        return invalid(format!(
            "a list write's extents hold {total} bytes, its data {data_len}"
        ));
    }
    if crcs.len() != n {
        return invalid(format!(
            "a list write of {} extents has {} checksums, needs {n}",
            extents.len(),
            crcs.len()
        ));
    }
    Ok(())
}

pub(crate) fn read_list(unit: u32, ranges: &[(u64, u32)]) -> Result<(), WireError> {
    check_unit(unit)?;
    list_length("read", "ranges", ranges.len())?;
    let mut total: u64 = 0;
    for &(offset, len) in ranges {
        if len == 0 || offset % BLOCK_BYTES as u64 != 0 || len % BLOCK_BYTES != 0 {
            return invalid(format!(
                "list read range at {offset} of {len} bytes is empty or not block-aligned"
            ));
        }
        if offset.checked_add(len as u64).is_none() {
            return Err(too_far("read"));
        }
        total += len as u64;
    }
    if total > MAX_DATA_BYTES as u64 {
        return invalid(format!(
            "a list read of {total} bytes exceeds {MAX_DATA_BYTES}"
        ));
    }
    Ok(())
}

pub(crate) fn read(unit: u32, offset: u64, len: u32) -> Result<(), WireError> {
    check_unit(unit)?;
    if offset % BLOCK_BYTES as u64 != 0 || len % BLOCK_BYTES != 0 {
        return invalid(format!(
            "read at {offset} of {len} bytes is not block-aligned"
        ));
    }
    if len > MAX_DATA_BYTES {
        return invalid(format!("read of {len} bytes exceeds {MAX_DATA_BYTES}"));
    }
    offset
        .checked_add(len as u64)
        .map(|_| ())
        .ok_or_else(|| too_far("read"))
}

pub(crate) fn seek(unit: u32, offset: u64) -> Result<(), WireError> {
    check_unit(unit)?;
    if offset > MAX_SEEK_OFFSET {
        return Err(WireError::new(
            ErrorCode::FileTooBig,
            format!("seek from {offset}, beyond {MAX_SEEK_OFFSET}"),
        ));
    }
    Ok(())
}

pub(crate) fn list_objects(limit: u32) -> Result<(), WireError> {
    if limit == 0 || limit > MAX_LIST_OBJECTS {
        return invalid(format!(
            "object list limit {limit} not in 1..={MAX_LIST_OBJECTS}"
        ));
    }
    Ok(())
}

pub(crate) fn scrub(offset: u64) -> Result<(), WireError> {
    if offset % BLOCK_BYTES as u64 != 0 || offset > MAX_SEEK_OFFSET {
        return invalid(format!(
            "scrub from {offset}: not block-aligned or beyond {MAX_SEEK_OFFSET}"
        ));
    }
    Ok(())
}

const BLOCK: u64 = BLOCK_BYTES as u64;

/// Whole blocks, 1 to `MAX_LOCAL_WRITE` bytes: a same-host write's or direct write's
/// range.
fn local_range(what: &str, offset: u64, len: u32) -> Result<(), WireError> {
    if offset % BLOCK != 0 || len as u64 % BLOCK != 0 || len == 0 {
        return invalid(format!(
            "a short-circuit {what} of {len} bytes at {offset} is not of whole blocks"
        ));
    }
    if len as usize > MAX_LOCAL_WRITE {
        return invalid(format!(
            "a short-circuit {what} of {len} bytes; the most is {MAX_LOCAL_WRITE}"
        ));
    }
    if offset.checked_add(len as u64).is_none() {
        return Err(too_far(what));
    }
    Ok(())
}

pub(crate) fn local_write(unit: u32, offset: u64, len: u32, crcs: &[u32]) -> Result<(), WireError> {
    check_unit(unit)?;
    local_range("write", offset, len)?;
    let blocks = len as u64 / BLOCK;
    if crcs.len() as u64 != blocks {
        return invalid(format!(
            "a short-circuit write of {blocks} blocks has {} checksums",
            crcs.len()
        ));
    }
    Ok(())
}

pub(crate) fn local_write_list(
    unit: u32,
    extents: &[(u64, u32)],
    crcs: &[u32],
) -> Result<(), WireError> {
    let total: u64 = extents.iter().map(|&(_, len)| len as u64).sum();
    if total > MAX_LOCAL_WRITE as u64 {
        return invalid(format!(
            "a short-circuit write list of {total} bytes; the most is {MAX_LOCAL_WRITE}"
        ));
    }
    write_list(unit, extents, crcs, total as u32)
}

pub(crate) fn local_direct(unit: u32, offset: u64, len: u32) -> Result<(), WireError> {
    check_unit(unit)?;
    local_range("direct write", offset, len)
}

pub(crate) fn local_direct_done(crcs: &Option<Vec<u32>>) -> Result<(), WireError> {
    match crcs {
        Some(c) if c.is_empty() || c.len() > MAX_LOCAL_WRITE / BLOCK_BYTES as usize => {
            invalid(format!(
                "a direct write's end names {} checksums, not 1..={}",
                c.len(),
                MAX_LOCAL_WRITE / BLOCK_BYTES as usize
            ))
        }
        _ => Ok(()),
    }
}
