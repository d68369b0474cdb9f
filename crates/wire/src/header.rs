//! The fixed frame header.
//!
//! ```text
//! offset size field
//!  0     4    magic       0x53545246 ("STRF" read as a big-endian word)
//!  4     2    version     protocol version, currently 5 (see `VERSION`)
//!  6     2    opcode      numbered operation (see `Opcode`)
//!  8     2    flags       bit 0: this frame is a response; bit 1 (requests only): the
//!                          sender reads no response, and none is sent; bit 2: the bulk
//!                          data is compressed (after `SetCompression`, see
//!                          docs/protocol.md "Compression")
//! 10     2    reserved    must be zero
//! 12     8    request_id  chosen by the client, echoed in the response
//! 20     4    status      0 in requests and successful responses, else an ErrorCode
//! 24     4    body_len    bytes of encoded message after the header
//! 28     4    data_len    bytes of bulk data after the body
//! 32     4    body_crc    CRC32C of the body
//! 36     4    header_crc  CRC32C of bytes 0..36
//! ```
//! All integers are little-endian.

use crate::{ErrorCode, MAX_BODY_BYTES, MAX_DATA_BYTES};

pub const MAGIC: u32 = 0x5354_5246;
/// 3: bodies in postcard instead of bincode 1 (which is no longer maintained); data
/// servers answer Write and Fsync with their boot identity; sessions; fsck and scrub.
pub const VERSION: u16 = 5;
pub const HEADER_LEN: usize = 40;
pub const FLAG_RESPONSE: u16 = 1;
/// On a request: the sender reads no response, and the server sends none (an error is
/// only logged). For requests whose failure the sender could not act on, like Close.
pub const FLAG_NO_REPLY: u16 = 2;
/// The bulk data after the body is compressed: an 8-byte prefix (codec, three zero
/// bytes, uncompressed length u32 LE) and the compressed bytes, `data_len` in all. Sent
/// only on a connection whose client asked for compression (`SetCompression`).
pub const FLAG_COMPRESSED: u16 = 4;
const KNOWN_FLAGS: u16 = FLAG_RESPONSE | FLAG_NO_REPLY | FLAG_COMPRESSED;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Header {
    pub version: u16,
    pub opcode: u16,
    pub flags: u16,
    pub request_id: u64,
    pub status: u32,
    pub body_len: u32,
    pub data_len: u32,
    pub body_crc: u32,
}

/// Why a frame was refused. Each reason has a number so that logs and tests can name it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame truncated: {got} of {need} bytes")]
    Truncated { got: usize, need: usize },
    #[error("bad magic 0x{0:08x}: not a stripefs peer")]
    BadMagic(u32),
    #[error("unsupported protocol version {0} (this build speaks {VERSION})")]
    BadVersion(u16),
    #[error("header checksum mismatch (stored 0x{stored:08x}, computed 0x{computed:08x})")]
    HeaderChecksum { stored: u32, computed: u32 },
    #[error("unknown flags 0x{0:04x}")]
    BadFlags(u16),
    #[error("reserved header field is 0x{0:04x}, not zero")]
    Reserved(u16),
    #[error("unknown opcode {0}")]
    BadOpcode(u16),
    #[error("unknown status code {0}")]
    BadStatus(u32),
    #[error("status {0} set on a request")]
    StatusOnRequest(u32),
    #[error("body of {0} bytes exceeds the limit of {MAX_BODY_BYTES}")]
    BodyTooLarge(u32),
    #[error("bulk data of {0} bytes exceeds the limit of {MAX_DATA_BYTES}")]
    DataTooLarge(u32),
    #[error("body checksum mismatch (stored 0x{stored:08x}, computed 0x{computed:08x})")]
    BodyChecksum { stored: u32, computed: u32 },
    #[error("body does not decode: {0}")]
    BadBody(String),
    #[error("opcode {header} in the header does not match the body's {body}")]
    OpcodeMismatch { header: u16, body: u16 },
    #[error("data length {got} does not match the {expected} bytes the message describes")]
    DataLength { got: u32, expected: u32 },
    #[error("compressed data does not decode: {0}")]
    BadCompressed(String),
}

impl FrameError {
    /// The stable number of this reason, for logs.
    pub fn number(&self) -> u32 {
        match self {
            FrameError::Truncated { .. } => 1,
            FrameError::BadMagic(_) => 2,
            FrameError::BadVersion(_) => 3,
            FrameError::HeaderChecksum { .. } => 4,
            FrameError::BadFlags(_) => 5,
            FrameError::Reserved(_) => 6,
            FrameError::BadOpcode(_) => 7,
            FrameError::BadStatus(_) => 8,
            FrameError::StatusOnRequest(_) => 9,
            FrameError::BodyTooLarge(_) => 10,
            FrameError::DataTooLarge(_) => 11,
            FrameError::BodyChecksum { .. } => 12,
            FrameError::BadBody(_) => 13,
            FrameError::OpcodeMismatch { .. } => 14,
            FrameError::DataLength { .. } => 15,
            FrameError::BadCompressed(_) => 16,
        }
    }

    /// The error code a server answers with before closing the connection.
    pub fn code(&self) -> ErrorCode {
        match self {
            FrameError::BadVersion(_) => ErrorCode::VersionMismatch,
            _ => ErrorCode::BadFrame,
        }
    }
}

impl Header {
    pub fn is_response(&self) -> bool {
        self.flags & FLAG_RESPONSE != 0
    }

    /// A request whose sender reads no response.
    pub fn wants_reply(&self) -> bool {
        self.flags & FLAG_NO_REPLY == 0
    }

    /// Encodes the header, computing its checksum.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&self.version.to_le_bytes());
        b[6..8].copy_from_slice(&self.opcode.to_le_bytes());
        b[8..10].copy_from_slice(&self.flags.to_le_bytes());
        // 10..12 reserved, zero.
        b[12..20].copy_from_slice(&self.request_id.to_le_bytes());
        b[20..24].copy_from_slice(&self.status.to_le_bytes());
        b[24..28].copy_from_slice(&self.body_len.to_le_bytes());
        b[28..32].copy_from_slice(&self.data_len.to_le_bytes());
        b[32..36].copy_from_slice(&self.body_crc.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..36]);
        b[36..40].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and validates a header from the first [`HEADER_LEN`] bytes of `bytes`.
    pub fn decode(bytes: &[u8]) -> Result<Header, FrameError> {
        if bytes.len() < HEADER_LEN {
            return Err(FrameError::Truncated {
                got: bytes.len(),
                need: HEADER_LEN,
            });
        }
        let u16_at = |i: usize| u16::from_le_bytes([bytes[i], bytes[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap_or([0; 4]));
        let magic = u32_at(0);
        if magic != MAGIC {
            return Err(FrameError::BadMagic(magic));
        }
        let stored = u32_at(36);
        let computed = crc32c::crc32c(&bytes[0..36]);
        if stored != computed {
            return Err(FrameError::HeaderChecksum { stored, computed });
        }
        let reserved = u16_at(10);
        if reserved != 0 {
            return Err(FrameError::Reserved(reserved));
        }
        let mut id = [0u8; 8];
        id.copy_from_slice(&bytes[12..20]);
        let h = Header {
            version: u16_at(4),
            opcode: u16_at(6),
            flags: u16_at(8),
            request_id: u64::from_le_bytes(id),
            status: u32_at(20),
            body_len: u32_at(24),
            data_len: u32_at(28),
            body_crc: u32_at(32),
        };
        h.validate()?;
        Ok(h)
    }

    /// Checks the fields of a header: version, flags, opcode, status and limits. Returns
    /// the reason the header is bad.
    pub fn validate(&self) -> Result<(), FrameError> {
        if self.version != VERSION {
            return Err(FrameError::BadVersion(self.version));
        }
        let both = FLAG_RESPONSE | FLAG_NO_REPLY;
        if self.flags & !KNOWN_FLAGS != 0
            || self.flags & both == both
            || (self.flags & FLAG_COMPRESSED != 0 && self.data_len == 0)
        {
            return Err(FrameError::BadFlags(self.flags));
        }
        if crate::Opcode::from_u16(self.opcode).is_none() {
            return Err(FrameError::BadOpcode(self.opcode));
        }
        if self.status != 0 {
            if !self.is_response() {
                return Err(FrameError::StatusOnRequest(self.status));
            }
            if ErrorCode::from_u32(self.status).is_none() {
                return Err(FrameError::BadStatus(self.status));
            }
        }
        if self.body_len > MAX_BODY_BYTES {
            return Err(FrameError::BodyTooLarge(self.body_len));
        }
        if self.data_len > MAX_DATA_BYTES {
            return Err(FrameError::DataTooLarge(self.data_len));
        }
        Ok(())
    }

    /// Checks the body against the header's checksum.
    pub fn check_body(&self, body: &[u8]) -> Result<(), FrameError> {
        if body.len() != self.body_len as usize {
            return Err(FrameError::Truncated {
                got: body.len(),
                need: self.body_len as usize,
            });
        }
        let computed = crc32c::crc32c(body);
        if computed != self.body_crc {
            return Err(FrameError::BodyChecksum {
                stored: self.body_crc,
                computed,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Opcode;

    fn sample() -> Header {
        Header {
            version: VERSION,
            opcode: Opcode::Write as u16,
            flags: 0,
            request_id: 0x0102_0304_0506_0708,
            status: 0,
            body_len: 12,
            data_len: 4096,
            body_crc: 0xdead_beef,
        }
    }

    #[test]
    fn round_trip() {
        let h = sample();
        assert_eq!(Header::decode(&h.encode()), Ok(h));
    }

    #[test]
    fn every_single_bit_flip_is_caught() {
        let bytes = sample().encode();
        for bit in 0..HEADER_LEN * 8 {
            let mut b = bytes;
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(Header::decode(&b).is_err(), "bit {bit} flip accepted");
        }
    }

    #[test]
    fn each_reason() {
        let h = sample();
        assert!(matches!(
            Header::decode(&h.encode()[..39]),
            Err(FrameError::Truncated { got: 39, need: 40 })
        ));
        let mut b = h.encode();
        b[0] = 0;
        assert!(matches!(Header::decode(&b), Err(FrameError::BadMagic(_))));
        let cases: Vec<(Header, u32)> = vec![
            (
                Header {
                    version: VERSION + 1,
                    ..h
                },
                3,
            ),
            (Header { flags: 8, ..h }, 5),
            (Header { flags: 3, ..h }, 5),
            // Compressed data needs data; with data it is accepted.
            (
                Header {
                    flags: 4,
                    data_len: 0,
                    ..h
                },
                5,
            ),
            (
                Header {
                    flags: 4,
                    data_len: 100,
                    ..h
                },
                0,
            ),
            (Header { opcode: 9999, ..h }, 7),
            (
                Header {
                    status: 1,
                    flags: 1,
                    ..h
                },
                0,
            ),
            (
                Header {
                    status: 9999,
                    flags: 1,
                    ..h
                },
                8,
            ),
            (Header { status: 1, ..h }, 9),
            (
                Header {
                    body_len: MAX_BODY_BYTES + 1,
                    ..h
                },
                10,
            ),
            (
                Header {
                    data_len: MAX_DATA_BYTES + 1,
                    ..h
                },
                11,
            ),
        ];
        for (bad, reason) in cases {
            match Header::decode(&bad.encode()) {
                Ok(_) => assert_eq!(reason, 0, "{bad:?} accepted"),
                Err(e) => assert_eq!(e.number(), reason, "{bad:?}: {e}"),
            }
        }
    }

    #[test]
    fn body_checksum() {
        let body = b"hello world!";
        let h = Header {
            body_crc: crc32c::crc32c(body),
            ..sample()
        };
        assert!(h.check_body(body).is_ok());
        assert!(matches!(
            h.check_body(b"hello world?"),
            Err(FrameError::BodyChecksum { .. })
        ));
        assert!(matches!(
            h.check_body(b"short"),
            Err(FrameError::Truncated { .. })
        ));
    }
}
