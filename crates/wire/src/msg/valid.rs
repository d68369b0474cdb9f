//! Checks of message fields that need no server state: names, paths, hosts, layout
//! hints, extended attribute names, inline pieces, stripe units and ranges. The operation
//! table's `check` of each row calls them.

use super::*;

/// Checks a host id: 1..=[`MAX_HOST_BYTES`] bytes of ASCII letters, digits, `-`, `_`, `.`.
pub fn validate_host(host: &str) -> Result<(), WireError> {
    let ok = !host.is_empty()
        && host.len() <= MAX_HOST_BYTES
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!(
                "bad host id {:?}: 1 to {MAX_HOST_BYTES} letters, digits, '-', '_' or '.'",
                host.chars().take(64).collect::<String>()
            ),
        ))
    }
}

pub(crate) fn check_path(path: &str) -> Result<(), WireError> {
    if path.len() > MAX_PATH_BYTES {
        return Err(WireError::new(
            ErrorCode::NameTooLong,
            format!(
                "path is {} bytes, the limit is {MAX_PATH_BYTES}",
                path.len()
            ),
        ));
    }
    if path.contains('\0') {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            "path contains a NUL byte",
        ));
    }
    Ok(())
}

/// Checks a layout hint: a stripe size as [`crate::stripe_size_error`] allows.
pub fn validate_hint(hint: &LayoutHint) -> Result<(), WireError> {
    if let Some(n) = hint.inline_bytes.filter(|&n| n > MAX_INLINE_BYTES) {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("inline threshold {n} exceeds {MAX_INLINE_BYTES} bytes"),
        ));
    }
    if let Some(why) = hint.stripe_size_bytes.and_then(crate::stripe_size_error) {
        return Err(WireError::new(ErrorCode::InvalidArgument, why));
    }
    if let Some(servers) = &hint.servers {
        let bad = |why: String| Err(WireError::new(ErrorCode::InvalidArgument, why));
        if servers.is_empty() || servers.len() > MAX_LAYOUT_SERVERS {
            return bad(format!(
                "a server list names 1 to {MAX_LAYOUT_SERVERS} servers, not {}",
                servers.len()
            ));
        }
        for (i, s) in servers.iter().enumerate() {
            if servers[..i].contains(s) {
                return bad(format!(
                    "data server {s} is named twice in the server list {servers:?}"
                ));
            }
        }
        if let Some(c) = hint.stripe_count {
            if c as usize != servers.len() {
                return bad(format!(
                    "stripe count {c} but the server list {servers:?} names {} servers",
                    servers.len()
                ));
            }
        }
        if hint.start_server.is_some() {
            return bad("a server list and a start server cannot be given together".into());
        }
        if hint.policy == Some(Policy::Local) {
            return bad("a server list fixes the servers: it excludes the local policy".into());
        }
    }
    Ok(())
}

/// An extended attribute name: 1 to [`MAX_XATTR_NAME`] bytes, no NUL (the kernel's
/// list answer separates names with NULs).
pub fn xattr_name_ok(name: &str) -> Result<(), WireError> {
    if name.is_empty() || name.len() > MAX_XATTR_NAME {
        return Err(WireError::new(
            ErrorCode::AttrRange,
            format!(
                "extended attribute name of {} bytes (1 to {MAX_XATTR_NAME})",
                name.len()
            ),
        ));
    }
    if name.contains('\0') {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            "extended attribute name holds a NUL byte",
        ));
    }
    Ok(())
}

/// A WriteInline's pieces: 1 to 1024, none empty, all ending within
/// [`MAX_INLINE_BYTES`] (their CRCs are checked by the metadata server).
pub fn validate_inline_pieces(pieces: &[InlinePiece]) -> Result<(), WireError> {
    let bad = |m: String| Err(WireError::new(ErrorCode::InvalidArgument, m));
    if pieces.is_empty() || pieces.len() > MAX_LIST_EXTENTS {
        return bad(format!(
            "an inline write has {} pieces, not 1..={MAX_LIST_EXTENTS}",
            pieces.len()
        ));
    }
    for p in pieces {
        if p.data.is_empty() {
            return bad(format!(
                "an inline write has an empty piece at {}",
                p.offset
            ));
        }
        let end = p.offset.checked_add(p.data.len() as u64);
        if end.map_or(true, |e| e > MAX_INLINE_BYTES as u64) {
            return Err(WireError::new(
                ErrorCode::NotInline,
                format!(
                    "an inline piece of {} bytes at {} ends past {MAX_INLINE_BYTES}",
                    p.data.len(),
                    p.offset
                ),
            ));
        }
    }
    Ok(())
}

pub(crate) fn check_unit(unit: u32) -> Result<(), WireError> {
    validate_hint(&LayoutHint {
        stripe_size_bytes: Some(unit),
        ..LayoutHint::default()
    })
}

/// Largest offset a Seek may start from: far enough below `u64::MAX` that mapping
/// offsets between byte spaces (a file, a server's share, a target's object) cannot
/// overflow. Clients keep files far smaller.
pub const MAX_SEEK_OFFSET: u64 = 1 << 62;

/// A range of a Punch or Allocate: not empty, and its end fits in a u64.
pub(crate) fn check_range(offset: u64, len: u64) -> Result<(), WireError> {
    if len == 0 {
        return Err(WireError::new(ErrorCode::InvalidArgument, "empty range"));
    }
    offset.checked_add(len).map(|_| ()).ok_or_else(|| {
        WireError::new(
            ErrorCode::FileTooBig,
            format!("range of {len} bytes at {offset} ends beyond the largest offset"),
        )
    })
}
