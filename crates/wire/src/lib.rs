//! The stripefs wire protocol, with no I/O in it.
//!
//! Every message is a *frame*: a fixed 40-byte little-endian [`Header`], then a body of
//! `body_len` bytes (a [`Request`] or [`Response`] encoded with postcard: varint
//! integers, so byte order does not depend on the machine), then `data_len` bytes of bulk data. Bulk data follows the body so that a
//! server can send file bytes straight from disk (sendfile) and a receiver can read them
//! straight into place. The header carries a CRC32C of itself and of the body; bulk data
//! is covered by per-block CRC32Cs carried in the body (see [`BLOCK_BYTES`]), which the
//! data server stores at write time so that integrity is end-to-end.
//!
//! Fault model: every byte that arrives from the network is untrusted. [`Header::decode`]
//! and [`Header::validate`] return the reason a frame is bad; [`decode_body`] bounds every
//! allocation by the frame limits. Nothing here panics on bad input.

mod check;
mod error;
mod header;
mod msg;
mod ops;
mod samehost;
pub mod sidecar;

pub use error::{ErrorCode, WireError};
pub use header::{
    FrameError, Header, FLAG_COMPRESSED, FLAG_NO_REPLY, FLAG_RESPONSE, HEADER_LEN, MAGIC, VERSION,
};
pub use msg::*;
pub use ops::*;
pub use samehost::*;

/// Largest encoded body (requests and responses without bulk data), in bytes.
pub const MAX_BODY_BYTES: u32 = 4 << 20;
/// Largest bulk data payload of one frame, in bytes.
pub const MAX_DATA_BYTES: u32 = 16 << 20;
/// Data integrity block: one CRC32C per block of this many bytes of an object.
pub const BLOCK_BYTES: u32 = 4096;
/// Largest stripe size (a file's stripe unit). Up to [`MAX_DATA_BYTES`] any multiple of
/// [`BLOCK_BYTES`]; above it a multiple of [`LARGE_STRIPE_STEP`], so that a unit always
/// divides into requests of at least 1 MiB that each stay in the unit
/// ([`stripe_size_error`]). Large units let a shared file put each rank's whole block on
/// one server (stripe size = block size, as seed 000's runs did).
pub const MAX_STRIPE_BYTES: u32 = 1 << 30;
/// Stripe sizes above [`MAX_DATA_BYTES`] are multiples of this.
pub const LARGE_STRIPE_STEP: u32 = 1 << 20;

/// A stripe size given as a byte count (a command-line argument): the size, or why it
/// cannot be one, saying which sizes can.
pub fn stripe_size_of(bytes: u64) -> Result<u32, String> {
    let why = match u32::try_from(bytes) {
        Ok(s) => match stripe_size_error(s) {
            None => return Ok(s),
            Some(why) => why,
        },
        Err(_) => format!("stripe size {bytes} is over {MAX_STRIPE_BYTES}"),
    };
    Err(format!(
        "{why} (stripe sizes are multiples of 4K up to 16M, or of 1M up to 1G)"
    ))
}

/// Why `size` cannot be a stripe size, `None` if it can.
pub fn stripe_size_error(size: u32) -> Option<String> {
    if size == 0 || size % BLOCK_BYTES != 0 || size > MAX_STRIPE_BYTES {
        return Some(format!(
            "stripe size {size} must be a multiple of {BLOCK_BYTES} between {BLOCK_BYTES} and {MAX_STRIPE_BYTES}"
        ));
    }
    if size > MAX_DATA_BYTES && size % LARGE_STRIPE_STEP != 0 {
        return Some(format!(
            "stripe size {size} is over {MAX_DATA_BYTES}, so it must be a multiple of {LARGE_STRIPE_STEP}"
        ));
    }
    None
}

/// Longest name of a directory entry, in bytes (as POSIX NAME_MAX).
pub const MAX_NAME_BYTES: usize = 255;
/// Longest path or symlink target, in bytes (as POSIX PATH_MAX - 1).
pub const MAX_PATH_BYTES: usize = 4095;
/// Most entries returned by one ReadDir (or ReadDirPlus).
pub const MAX_READDIR_ENTRIES: u32 = 4096;
/// A ReadDirPlus answer stops adding entries once its body holds this many bytes (an
/// entry's attributes carry its layout, whose server list may be long).
pub const READDIRPLUS_BODY_BYTES: usize = 1 << 20;

/// Set-user-ID and set-group-ID mode bits.
pub const S_ISUID: u32 = 0o4000;
pub const S_ISGID: u32 = 0o2000;

/// The mode a regular file keeps after a write, truncate or fallocate by a caller without
/// CAP_FSETID (anyone but root), as Linux does: set-user-ID goes; set-group-ID goes too
/// when the group may execute or the caller (primary group `gid`, supplementary
/// `groups`) is not in the file's group `file_gid`. One rule for the metadata server
/// (truncate, size changes) and the mount (writes in place).
pub fn mode_after_write(mode: u32, file_gid: u32, gid: u32, groups: &[u32]) -> u32 {
    let mut m = mode & !S_ISUID;
    let in_group = gid == file_gid || groups.contains(&file_gid);
    if m & 0o010 != 0 || !in_group {
        m &= !S_ISGID;
    }
    m
}

/// CRC32C of `bytes`, the checksum used everywhere in stripefs.
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// CRC32C of the bytes whose CRC is `crc` followed by `bytes`.
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, bytes)
}

/// The per-block CRC list of `data`, which starts at a block boundary. A short last block
/// is checksummed as if padded with zeros to a full block, the form in which the data
/// server stores it.
pub fn block_crcs(data: &[u8]) -> Vec<u32> {
    data.chunks(BLOCK_BYTES as usize)
        .map(padded_block_crc)
        .collect()
}

/// CRC32C of one block, zero-padded to [`BLOCK_BYTES`].
pub fn padded_block_crc(block: &[u8]) -> u32 {
    assert!(block.len() <= BLOCK_BYTES as usize);
    let crc = crc32c::crc32c(block);
    let pad = BLOCK_BYTES as usize - block.len();
    if pad == 0 {
        crc
    } else {
        crc32c::crc32c_append(crc, &ZERO_BLOCK[..pad])
    }
}

static ZERO_BLOCK: [u8; BLOCK_BYTES as usize] = [0; BLOCK_BYTES as usize];

/// Checks a file or directory name: non-empty, not `.` or `..`, no `/` or NUL, at most
/// [`MAX_NAME_BYTES`]. Returns the reason it is bad.
pub fn validate_name(name: &str) -> Result<(), WireError> {
    if name.is_empty() {
        return Err(WireError::new(ErrorCode::InvalidArgument, "empty name"));
    }
    if name == "." || name == ".." {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("name {name:?} is reserved"),
        ));
    }
    if name.contains('/') {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("name {name:?} contains '/'"),
        ));
    }
    if name.contains('\0') {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            "name contains a NUL byte",
        ));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(WireError::new(
            ErrorCode::NameTooLong,
            format!(
                "name is {} bytes, the limit is {MAX_NAME_BYTES}",
                name.len()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_after_a_write_by_someone_without_cap_fsetid() {
        // (mode, file gid, writer gid, groups) -> kept
        for (mode, fg, g, groups, kept) in [
            (0o4755, 7, 7, &[][..], 0o755),
            (0o2755, 7, 7, &[][..], 0o755), // group execute: a privilege, goes
            (0o2745, 7, 7, &[][..], 0o2745), // no group execute, writer in group: stays
            (0o2745, 7, 8, &[7][..], 0o2745),
            (0o2745, 7, 8, &[9][..], 0o745), // writer outside the group: goes
            (0o6777, 7, 8, &[][..], 0o777),
            (0o644, 7, 8, &[][..], 0o644),
        ] {
            assert_eq!(mode_after_write(mode, fg, g, groups), kept, "{mode:o}");
        }
    }

    #[test]
    fn encoded_len_counts_what_encode_body_gives() {
        let names = vec!["a".repeat(300), String::new(), "é".into()];
        assert_eq!(encoded_len(&names), msg::encode_body(&names).len());
    }

    #[test]
    fn stripe_sizes() {
        for ok in [4096, 8192, 16 << 20, 17 << 20, 256 << 20, 1 << 30] {
            assert_eq!(stripe_size_error(ok), None, "{ok}");
            assert_eq!(stripe_size_of(ok as u64), Ok(ok));
        }
        for bad in [
            0,
            1,
            4095,
            4097,
            (16 << 20) + 4096,
            (1 << 30) + (1 << 20),
            u32::MAX,
        ] {
            assert!(stripe_size_error(bad).is_some(), "{bad}");
        }
        assert!(stripe_size_of(8 << 30).unwrap_err().contains("over"));
    }

    #[test]
    fn names() {
        assert!(validate_name("a").is_ok());
        assert!(validate_name(&"x".repeat(255)).is_ok());
        assert_eq!(
            validate_name(&"x".repeat(256)).unwrap_err().code,
            ErrorCode::NameTooLong
        );
        for bad in ["", ".", "..", "a/b", "a\0b", "/"] {
            assert_eq!(
                validate_name(bad).unwrap_err().code,
                ErrorCode::InvalidArgument,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn padded_crc_equals_crc_of_padded_block() {
        let mut full = vec![0u8; BLOCK_BYTES as usize];
        full[..5].copy_from_slice(b"hello");
        assert_eq!(padded_block_crc(b"hello"), crc32c(&full));
        assert_eq!(block_crcs(&full), vec![crc32c(&full)]);
        assert_eq!(block_crcs(&[]), Vec::<u32>::new());
        assert_eq!(block_crcs(&vec![1u8; 4097]).len(), 2);
    }
}
