//! The frame codec: request and response frames (header, body, flags), body encoding in
//! postcard with its bounds, and the per-block CRCs of bulk data.

use super::*;

/// CRC lists (Write, ReadData) travel as bytes: a varint byte count, then each CRC as
/// 4 little-endian bytes. CRCs are random 32-bit numbers, which as varints would take
/// 5 bytes each and a loop per number; as bytes they cost one copy (measured: see
/// docs/protocol.md, Body encoding).
pub(crate) mod crc_list {
    use serde::{de, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(crcs: &[u32], s: S) -> Result<S::Ok, S::Error> {
        #[cfg(target_endian = "little")]
        {
            // SAFETY: u32 has no padding and u8 no alignment, so the list's memory is
            // 4 * len initialised bytes, and on a little-endian machine they are the
            // wire form.
            let bytes = unsafe {
                std::slice::from_raw_parts(crcs.as_ptr().cast::<u8>(), std::mem::size_of_val(crcs))
            };
            s.serialize_bytes(bytes)
        }
        #[cfg(not(target_endian = "little"))]
        {
            let bytes: Vec<u8> = crcs.iter().flat_map(|c| c.to_le_bytes()).collect();
            s.serialize_bytes(&bytes)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u32>, D::Error> {
        d.deserialize_bytes(Visitor)
    }

    struct Visitor;

    impl de::Visitor<'_> for Visitor {
        type Value = Vec<u32>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a CRC list: a multiple of 4 bytes")
        }

        fn visit_bytes<E: de::Error>(self, b: &[u8]) -> Result<Vec<u32>, E> {
            if b.len() % 4 != 0 {
                return Err(E::custom(format!(
                    "CRC list of {} bytes is not a multiple of 4",
                    b.len()
                )));
            }
            Ok(b.chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().expect("chunks of 4")))
                .collect())
        }
    }
}

/// What a request body holds: the caller's credentials and the request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub cred: Cred,
    pub req: Request,
}

/// Bytes [`encode_body`] would give `value`, counted without encoding it.
pub fn encoded_len<T: Serialize>(value: &T) -> usize {
    postcard::serialize_with_flavor(value, postcard::ser_flavors::Size::default())
        .expect("counting bytes cannot fail")
}

/// Encodes a message body: postcard 1 (variable-length integers, see docs/protocol.md).
/// Exposed for the benchmarks of the encoding and the fuzzer; frames use it through
/// [`encode_request`] and [`encode_response`].
pub fn encode_body<T: Serialize>(value: &T) -> Vec<u8> {
    encode_body_after(Vec::new(), value)
}

/// Appends the encoding of `value` to `out` (a frame's header space).
fn encode_body_after<T: Serialize>(mut out: Vec<u8>, value: &T) -> Vec<u8> {
    // Most bodies are far smaller than this: one allocation, no measuring pass.
    out.reserve(BODY_GUESS_BYTES);
    let start = out.len();
    // Encoding our own in-memory values cannot fail (postcard fails only on a full
    // buffer, and this one grows); a body beyond the limit is a programming error
    // (callers bound names, lists and batches).
    let out = postcard::to_extend(value, out).expect("postcard encodes into a growing Vec");
    assert!(
        out.len() - start <= MAX_BODY_BYTES as usize,
        "message exceeds MAX_BODY_BYTES"
    );
    out
}

/// Room reserved for a body before encoding it (a Write of 1 MiB has 1,044 bytes).
const BODY_GUESS_BYTES: usize = 2048;

/// Decodes a message body. Refused: bodies over [`MAX_BODY_BYTES`], bytes that do not
/// decode, trailing bytes, and non-canonical encodings (an integer in more varint bytes
/// than it needs), so that every accepted body re-encodes to itself. Allocations are
/// bounded by the body: postcard preallocates at most a small cautious amount per
/// sequence and reads every element from the input.
pub fn decode_body<T: DeserializeOwned + Serialize>(body: &[u8]) -> Result<T, FrameError> {
    if body.len() > MAX_BODY_BYTES as usize {
        return Err(FrameError::BodyTooLarge(body.len() as u32));
    }
    let (value, rest) =
        postcard::take_from_bytes::<T>(body).map_err(|e| FrameError::BadBody(e.to_string()))?;
    if !rest.is_empty() {
        return Err(FrameError::BadBody(format!(
            "{} trailing bytes after the message",
            rest.len()
        )));
    }
    // A non-canonical varint is strictly longer than the canonical one, so equal
    // lengths mean equal bytes.
    let canonical = postcard::serialize_with_flavor(&value, postcard::ser_flavors::Size::default())
        .map_err(|e| FrameError::BadBody(e.to_string()))?;
    if canonical != body.len() {
        return Err(FrameError::BadBody(format!(
            "non-canonical encoding: {} bytes where {canonical} suffice",
            body.len()
        )));
    }
    Ok(value)
}

/// Encodes a request frame's header and body; `data_len` bytes of bulk data follow.
pub fn encode_request(request_id: u64, env: &Envelope, data_len: u32) -> Vec<u8> {
    encode_request_flags(request_id, env, data_len, 0)
}

/// [`encode_request`] with header flags: 0, or [`FLAG_NO_REPLY`] for a request whose
/// sender reads no response.
pub fn encode_request_flags(request_id: u64, env: &Envelope, data_len: u32, flags: u16) -> Vec<u8> {
    assert!(data_len <= MAX_DATA_BYTES);
    assert_eq!(
        flags & !(FLAG_NO_REPLY | FLAG_COMPRESSED),
        0,
        "a request's flags"
    );
    let header = Header {
        version: VERSION,
        opcode: env.req.opcode() as u16,
        flags,
        request_id,
        status: 0,
        body_len: 0,
        data_len,
        body_crc: 0,
    };
    frame_with_body(header, env)
}

/// A frame of `header` (its body length and CRC filled in here) and `value` as body,
/// encoded in place after the header.
fn frame_with_body<T: Serialize>(mut header: Header, value: &T) -> Vec<u8> {
    let mut frame = encode_body_after(vec![0; crate::HEADER_LEN], value);
    let body = &frame[crate::HEADER_LEN..];
    header.body_len = body.len() as u32;
    header.body_crc = crate::crc32c(body);
    frame[..crate::HEADER_LEN].copy_from_slice(&header.encode());
    frame
}

/// Decodes a request body that arrived under `header`, checking checksum, opcode and the
/// bulk data length the request implies.
pub fn decode_request(header: &Header, body: &[u8]) -> Result<Envelope, FrameError> {
    if header.is_response() {
        return Err(FrameError::BadFlags(header.flags));
    }
    header.check_body(body)?;
    let env: Envelope = decode_body(body)?;
    let op = env.req.opcode();
    if op as u16 != header.opcode {
        return Err(FrameError::OpcodeMismatch {
            header: header.opcode,
            body: op as u16,
        });
    }
    let expected = if op.bulk_in() { header.data_len } else { 0 };
    if header.data_len != expected {
        return Err(FrameError::DataLength {
            got: header.data_len,
            expected,
        });
    }
    Ok(env)
}

/// Encodes a response frame's header and body; `data_len` bytes of bulk data follow.
pub fn encode_response(
    request_id: u64,
    opcode: Opcode,
    result: &Result<Response, WireError>,
    data_len: u32,
) -> Vec<u8> {
    encode_response_flags(request_id, opcode, result, data_len, 0)
}

/// [`encode_response`] with extra header flags: 0, or [`FLAG_COMPRESSED`] when the
/// `data_len` bytes that follow are a compressed data section.
pub fn encode_response_flags(
    request_id: u64,
    opcode: Opcode,
    result: &Result<Response, WireError>,
    data_len: u32,
    flags: u16,
) -> Vec<u8> {
    assert!(data_len <= MAX_DATA_BYTES);
    assert_eq!(flags & !FLAG_COMPRESSED, 0, "a response's extra flags");
    let header = |status| Header {
        version: VERSION,
        opcode: opcode as u16,
        flags: FLAG_RESPONSE | flags,
        request_id,
        status,
        body_len: 0,
        data_len,
        body_crc: 0,
    };
    match result {
        Ok(resp) => frame_with_body(header(0), resp),
        Err(err) => {
            assert!(data_len == 0, "an error response carries no data");
            // Error messages are bounded so that the frame always fits.
            let mut e = err.clone();
            if e.message.len() > 4096 {
                let mut cut = 4096;
                while !e.message.is_char_boundary(cut) {
                    cut -= 1;
                }
                e.message.truncate(cut);
            }
            frame_with_body(header(e.code as u32), &e)
        }
    }
}

/// Decodes a response body. The outer `Result` is a bad frame (close the connection); the
/// inner one is the server's answer.
pub fn decode_response(
    header: &Header,
    body: &[u8],
) -> Result<Result<Response, WireError>, FrameError> {
    if !header.is_response() {
        return Err(FrameError::BadFlags(header.flags));
    }
    header.check_body(body)?;
    if header.status != 0 {
        let err: WireError = decode_body(body)?;
        if err.code as u32 != header.status || header.data_len != 0 {
            return Err(FrameError::BadBody(
                "error body disagrees with header".into(),
            ));
        }
        return Ok(Err(err));
    }
    Ok(Ok(decode_body(body)?))
}

/// Splits `len` bytes starting at local offset `offset` at block boundaries; returns the
/// length of each piece. Write requests carry one plain CRC32C per piece.
pub fn pieces(offset: u64, len: usize) -> impl Iterator<Item = usize> {
    let block = BLOCK_BYTES as u64;
    let mut pos = offset;
    // Saturating: offsets come from the network, and a range running past u64::MAX must
    // not panic here (Request::validate refuses it with FileTooBig).
    let end = offset.saturating_add(len as u64);
    std::iter::from_fn(move || {
        if pos >= end {
            return None;
        }
        let next = (pos / block + 1).saturating_mul(block);
        let piece = next.min(end) - pos;
        pos += piece;
        Some(piece as usize)
    })
}

/// The CRC32C of each block-bounded piece of `data`, written at local offset `offset`.
pub fn piece_crcs(offset: u64, data: &[u8]) -> Vec<u32> {
    let mut crcs = Vec::with_capacity(data.len() / BLOCK_BYTES as usize + 2);
    let mut at = 0;
    for len in pieces(offset, data.len()) {
        crcs.push(crate::crc32c(&data[at..at + len]));
        at += len;
    }
    crcs
}
