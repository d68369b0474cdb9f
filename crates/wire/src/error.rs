//! Numbered error codes. The numbers are part of the protocol: never renumber, only add.
//! Ranges: 1-99 namespace and generic errors (each maps to one errno), 100-199 protocol
//! and session errors, 200-299 data integrity and storage errors.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! error_codes {
    ($($name:ident = $num:literal, $errno:ident, $text:literal;)*) => {
        /// A stable, numbered error code carried in a response header's `status`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[repr(u32)]
        pub enum ErrorCode {
            $($name = $num,)*
        }

        impl ErrorCode {
            /// All codes, for exhaustive tests.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$name,)*];

            /// The code with this number, or `None` for an unknown number.
            pub fn from_u32(n: u32) -> Option<ErrorCode> {
                match n {
                    $($num => Some(ErrorCode::$name),)*
                    _ => None,
                }
            }

            /// The POSIX errno that a POSIX-facing client (FUSE) reports for this code.
            pub fn errno(self) -> i32 {
                match self {
                    $(ErrorCode::$name => libc_errno::$errno,)*
                }
            }

            /// A short description of the code.
            pub fn text(self) -> &'static str {
                match self {
                    $(ErrorCode::$name => $text,)*
                }
            }
        }
    };
}

/// errno values for Linux, spelled out so this crate needs no libc.
mod libc_errno {
    pub const EPERM: i32 = 1;
    pub const ENOENT: i32 = 2;
    pub const EIO: i32 = 5;
    pub const EBADF: i32 = 9;
    pub const EAGAIN: i32 = 11;
    pub const EACCES: i32 = 13;
    pub const EEXIST: i32 = 17;
    pub const EXDEV: i32 = 18;
    pub const ENOTDIR: i32 = 20;
    pub const EISDIR: i32 = 21;
    pub const EINVAL: i32 = 22;
    pub const EFBIG: i32 = 27;
    pub const ENOSPC: i32 = 28;
    pub const EMLINK: i32 = 31;
    pub const ENAMETOOLONG: i32 = 36;
    pub const ENOSYS: i32 = 38;
    pub const ENOTEMPTY: i32 = 39;
    pub const ELOOP: i32 = 40;
    pub const EPROTO: i32 = 71;
    pub const EBADMSG: i32 = 74;
    pub const ETIMEDOUT: i32 = 110;
    pub const ECONNRESET: i32 = 104;
    pub const ECONNREFUSED: i32 = 111;
    pub const ESTALE: i32 = 116;
    pub const E2BIG: i32 = 7;
    pub const ERANGE: i32 = 34;
    pub const ENODATA: i32 = 61;
    pub const EOPNOTSUPP: i32 = 95;
}

error_codes! {
    NotFound = 1, ENOENT, "no such file or directory";
    Exists = 2, EEXIST, "file exists";
    NotDir = 3, ENOTDIR, "not a directory";
    IsDir = 4, EISDIR, "is a directory";
    NotEmpty = 5, ENOTEMPTY, "directory not empty";
    PermissionDenied = 6, EACCES, "permission denied";
    NotPermitted = 7, EPERM, "operation not permitted";
    InvalidArgument = 8, EINVAL, "invalid argument";
    NameTooLong = 9, ENAMETOOLONG, "name too long";
    TooManyLinks = 10, EMLINK, "too many links";
    Loop = 11, ELOOP, "too many levels of symbolic links";
    CrossDevice = 12, EXDEV, "invalid cross-device link";
    FileTooBig = 13, EFBIG, "file too large";
    StaleHandle = 14, ESTALE, "stale file handle";
    BadHandle = 15, EBADF, "bad file handle";
    Busy = 16, EAGAIN, "resource temporarily unavailable";
    Unsupported = 17, ENOSYS, "operation not supported";
    BadFrame = 100, EPROTO, "malformed frame";
    VersionMismatch = 101, EPROTO, "protocol version mismatch";
    AuthFailed = 102, EACCES, "authentication failed";
    UnexpectedMessage = 103, EPROTO, "unexpected message";
    Timeout = 104, ETIMEDOUT, "timed out";
    Unreachable = 105, ECONNREFUSED, "server unreachable";
    Checksum = 200, EBADMSG, "checksum mismatch";
    NoSpace = 201, ENOSPC, "no space left on device";
    Io = 202, EIO, "input/output error";
    Internal = 203, EIO, "internal server error";
    ServerRestarted = 204, EIO, "data server restarted; unsynced writes may be lost";
    SessionExpired = 106, EIO, "client session expired";
    // Declared last: bodies carry the variant index (docs/protocol.md, Versioning).
    ConnectionClosed = 107, ECONNRESET, "connection closed by the server before the request was handled";
    // Version 5: a WriteInline to a file that is not inline, or that would pass its
    // inline threshold. Clients act on it (Uninline); users should not see it.
    NotInline = 18, EIO, "file data is not inline";
    // Extended attributes (GetXattr and friends): the attribute does not exist; its
    // value is too large; its name is empty or too long; its namespace is not kept.
    NoAttr = 19, ENODATA, "no such extended attribute";
    AttrTooBig = 20, E2BIG, "extended attribute value too large";
    AttrRange = 21, ERANGE, "extended attribute name out of range";
    AttrUnsupported = 22, EOPNOTSUPP, "extended attribute namespace not supported";
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "E{} {}", *self as u32, self.text())
    }
}

/// An error as carried on the wire: a code and a human message that names what failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message} ({code})")]
pub struct WireError {
    pub code: ErrorCode,
    pub message: String,
}

impl WireError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> WireError {
        WireError {
            code,
            message: message.into(),
        }
    }

    /// Wraps an I/O error from a local disk, keeping its cause in the message.
    pub fn io(context: impl fmt::Display, err: &std::io::Error) -> WireError {
        let code = match err.raw_os_error() {
            Some(28) | Some(122) => ErrorCode::NoSpace,
            _ => ErrorCode::Io,
        };
        WireError::new(code, format!("{context}: {err}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for &c in ErrorCode::ALL {
            assert!(seen.insert(c as u32), "duplicate number {}", c as u32);
            assert_eq!(ErrorCode::from_u32(c as u32), Some(c));
            assert!(c.errno() > 0);
        }
        assert_eq!(ErrorCode::from_u32(0), None);
        assert_eq!(ErrorCode::from_u32(99999), None);
    }
}
