//! Compression of bulk data on a connection (`--compress off|lz4|zstd[:level]|auto`).
//!
//! A client asks for a codec once per connection (`SetCompression`, answered by the rpc
//! layer); from then on both sides may send the bulk data of a frame compressed, marked by
//! [`FLAG_COMPRESSED`] in the header. The data section of such a frame is an 8-byte
//! prefix (codec byte, three zero bytes, the uncompressed length as u32 LE) followed by
//! the compressed bytes; `data_len` in the header counts the prefix and the compressed
//! bytes. A sender may always send a frame uncompressed, and does so when compression
//! would not shrink it (`auto` first tries a cheap sample, so that random data costs
//! almost nothing). Checksums are untouched: the block CRCs in the message bodies cover
//! the uncompressed bytes and are checked after decompression, end to end, so a bad
//! compressor, a flipped bit on the wire or a lying peer is a checksum error.
//!
//! The codec is pure computation, kept here (not in the wire crate) because it needs the
//! compression libraries; the wire crate knows only the flag and the opcode.

use std::fmt;
use std::str::FromStr;
use stripefs_wire::{ErrorCode, WireError, MAX_DATA_BYTES};

pub use stripefs_wire::FLAG_COMPRESSED;

/// Bytes before the compressed bytes in a compressed data section.
pub const PREFIX_BYTES: usize = 8;
/// Data shorter than this is always sent as it is: the saving could not pay for the
/// prefix and the work.
pub const MIN_COMPRESS_BYTES: usize = 1024;
/// `auto` compresses this many bytes from each of three places of a chunk first, and
/// sends the chunk as it is when they do not shrink below [`AUTO_SAMPLE_RATIO`].
pub const AUTO_SAMPLE_BYTES: usize = 4096;
/// Largest compressed-to-plain ratio of the sample for which `auto` compresses.
pub const AUTO_SAMPLE_RATIO: f64 = 0.9;
/// Highest zstd level accepted (zstd's own maximum is 22; above 19 needs far more
/// memory for little gain).
pub const MAX_ZSTD_LEVEL: i32 = 19;
/// The zstd level of `auto` and of a plain `zstd`: fast enough for any link this is
/// used on (hundreds of MB/s per core), about 4:1 on text.
pub const DEFAULT_ZSTD_LEVEL: i32 = 1;

/// Codec numbers on the wire (the prefix's first byte and `SetCompression`'s `codec`).
const WIRE_OFF: u8 = 0;
const WIRE_LZ4: u8 = 1;
const WIRE_ZSTD: u8 = 2;
const WIRE_AUTO: u8 = 3;

/// What a connection does with bulk data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Codec {
    /// Sent as it is.
    #[default]
    Off,
    /// LZ4 block format: fastest, about 2:1 on text.
    Lz4,
    /// Zstandard at a level (1..=19).
    Zstd(i32),
    /// zstd at [`DEFAULT_ZSTD_LEVEL`] where a sample shows the data shrinks, else as it is.
    Auto,
}

impl Codec {
    /// The codec's number and level in `SetCompression`.
    pub fn to_wire(self) -> (u8, i8) {
        match self {
            Codec::Off => (WIRE_OFF, 0),
            Codec::Lz4 => (WIRE_LZ4, 0),
            // Levels are checked to be 1..=19 when made.
            Codec::Zstd(l) => (WIRE_ZSTD, l as i8),
            Codec::Auto => (WIRE_AUTO, 0),
        }
    }

    /// The codec a peer asked for; an unknown number or level is an error naming it.
    pub fn from_wire(codec: u8, level: i8) -> Result<Codec, WireError> {
        let level = i32::from(level);
        match codec {
            WIRE_OFF => Ok(Codec::Off),
            WIRE_LZ4 => Ok(Codec::Lz4),
            WIRE_ZSTD if (1..=MAX_ZSTD_LEVEL).contains(&level) => Ok(Codec::Zstd(level)),
            WIRE_ZSTD => Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!("zstd level {level} is not 1 to {MAX_ZSTD_LEVEL}"),
            )),
            WIRE_AUTO => Ok(Codec::Auto),
            n => Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!("unknown compression codec {n}"),
            )),
        }
    }

    /// Compresses `data` for the wire, or `None` when it is to go as it is (codec off,
    /// too short, or it would not shrink). The result starts with the prefix.
    pub fn compress(self, data: &[u8]) -> Option<Vec<u8>> {
        if self == Codec::Off || data.len() < MIN_COMPRESS_BYTES {
            return None;
        }
        if self == Codec::Auto && !sample_shrinks(data) {
            return None;
        }
        let (wire, body) = match self {
            Codec::Off => return None,
            Codec::Lz4 => (WIRE_LZ4, lz4_flex::block::compress(data)),
            Codec::Zstd(level) => (WIRE_ZSTD, zstd::bulk::compress(data, level).ok()?),
            Codec::Auto => (
                WIRE_ZSTD,
                zstd::bulk::compress(data, DEFAULT_ZSTD_LEVEL).ok()?,
            ),
        };
        // Not worth it unless the frame gets shorter, prefix included.
        if body.len() + PREFIX_BYTES >= data.len() {
            return None;
        }
        let raw_len = u32::try_from(data.len()).ok()?;
        let mut out = Vec::with_capacity(PREFIX_BYTES + body.len());
        out.push(wire);
        out.extend_from_slice(&[0; 3]);
        out.extend_from_slice(&raw_len.to_le_bytes());
        out.extend_from_slice(&body);
        Some(out)
    }
}

/// The uncompressed length a compressed data section announces, checked against the
/// frame limit (so that no peer makes us allocate more than a frame's worth).
pub fn raw_len(section: &[u8]) -> Result<usize, WireError> {
    if section.len() < PREFIX_BYTES {
        return Err(bad(format!(
            "compressed data of {} bytes is shorter than its {PREFIX_BYTES}-byte prefix",
            section.len()
        )));
    }
    if section[1..4] != [0, 0, 0] {
        return Err(bad(
            "compressed data prefix has nonzero reserved bytes".into()
        ));
    }
    let mut n = [0u8; 4];
    n.copy_from_slice(&section[4..8]);
    let n = u32::from_le_bytes(n);
    if n > MAX_DATA_BYTES {
        return Err(bad(format!(
            "compressed data claims {n} bytes, over the frame limit {MAX_DATA_BYTES}"
        )));
    }
    Ok(n as usize)
}

/// Decompresses a data section (prefix and compressed bytes) into `out`, which must be
/// exactly [`raw_len`] bytes. Anything that does not decode to exactly that many bytes is
/// an error, never a partial buffer passed on.
pub fn decompress_into(section: &[u8], out: &mut [u8]) -> Result<(), WireError> {
    let want = raw_len(section)?;
    assert_eq!(out.len(), want, "the caller sizes the buffer by raw_len");
    let body = &section[PREFIX_BYTES..];
    let got = match section[0] {
        WIRE_LZ4 => lz4_flex::block::decompress_into(body, out)
            .map_err(|e| bad(format!("lz4 data does not decode: {e}")))?,
        WIRE_ZSTD => zstd::bulk::decompress_to_buffer(body, out)
            .map_err(|e| bad(format!("zstd data does not decode: {e}")))?,
        n => return Err(bad(format!("compressed data with unknown codec {n}"))),
    };
    if got != want {
        return Err(bad(format!(
            "compressed data decoded to {got} bytes, its prefix says {want}"
        )));
    }
    Ok(())
}

fn bad(msg: String) -> WireError {
    WireError::new(ErrorCode::BadFrame, msg)
}

/// Whether three samples of `data` (start, middle, end) shrink under LZ4 to at most
/// [`AUTO_SAMPLE_RATIO`]: a few microseconds, against compressing a whole chunk of
/// random bytes for nothing.
fn sample_shrinks(data: &[u8]) -> bool {
    let n = AUTO_SAMPLE_BYTES.min(data.len());
    let starts = [0, (data.len() - n) / 2, data.len() - n];
    let (mut plain, mut packed) = (0usize, 0usize);
    for s in starts {
        let sample = &data[s..s + n];
        plain += sample.len();
        packed += lz4_flex::block::compress(sample).len();
    }
    (packed as f64) <= AUTO_SAMPLE_RATIO * plain as f64
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Codec::Off => f.write_str("off"),
            Codec::Lz4 => f.write_str("lz4"),
            Codec::Zstd(l) => write!(f, "zstd:{l}"),
            Codec::Auto => f.write_str("auto"),
        }
    }
}

impl FromStr for Codec {
    type Err = String;

    /// `off`, `lz4`, `zstd`, `zstd:LEVEL` (1..=19) or `auto`.
    fn from_str(text: &str) -> Result<Codec, String> {
        let t = text.trim().to_ascii_lowercase();
        match t.as_str() {
            "off" | "none" => return Ok(Codec::Off),
            "lz4" => return Ok(Codec::Lz4),
            "zstd" => return Ok(Codec::Zstd(DEFAULT_ZSTD_LEVEL)),
            "auto" => return Ok(Codec::Auto),
            _ => {}
        }
        if let Some(level) = t.strip_prefix("zstd:") {
            let l: i32 = level.parse().map_err(|_| {
                format!("compression {text:?}: zstd level {level:?} is not a number")
            })?;
            if !(1..=MAX_ZSTD_LEVEL).contains(&l) {
                return Err(format!(
                    "compression {text:?}: zstd level {l} is not 1 to {MAX_ZSTD_LEVEL}"
                ));
            }
            return Ok(Codec::Zstd(l));
        }
        Err(format!(
            "compression {text:?} is not off, lz4, zstd, zstd:LEVEL (1-{MAX_ZSTD_LEVEL}) or auto"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(n: usize) -> Vec<u8> {
        let words = [
            "stripe ", "server ", "client ", "object ", "block ", "inode ",
        ];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            out.extend_from_slice(words[(x % 6) as usize].as_bytes());
        }
        out.truncate(n);
        out
    }

    fn random(n: usize) -> Vec<u8> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    fn round_trip(c: Codec, data: &[u8]) -> Option<usize> {
        let z = c.compress(data)?;
        let mut out = vec![0u8; raw_len(&z).unwrap()];
        decompress_into(&z, &mut out).unwrap();
        assert_eq!(out, data, "{c} round trip");
        Some(z.len())
    }

    #[test]
    fn every_codec_round_trips_and_shrinks_text() {
        let t = text(1 << 20);
        for c in [Codec::Lz4, Codec::Zstd(1), Codec::Zstd(9), Codec::Auto] {
            let n = round_trip(c, &t).expect("text shrinks");
            assert!(n < t.len() / 2, "{c}: {n} of {}", t.len());
        }
        assert_eq!(Codec::Off.compress(&t), None);
    }

    #[test]
    fn random_and_short_data_go_as_they_are() {
        let r = random(1 << 20);
        assert_eq!(Codec::Auto.compress(&r), None, "auto skips random data");
        assert_eq!(Codec::Lz4.compress(&r), None, "nothing that grows is sent");
        assert_eq!(Codec::Zstd(3).compress(&text(MIN_COMPRESS_BYTES - 1)), None);
    }

    #[test]
    fn bad_sections_are_errors_not_panics() {
        let t = text(64 << 10);
        let z = Codec::Zstd(1).compress(&t).unwrap();
        // Truncated, a bad codec, reserved bytes set, a lying length, garbage body.
        assert!(raw_len(&z[..5]).is_err());
        let mut bent = z.clone();
        bent[0] = 9;
        assert!(decompress_into(&bent, &mut vec![0; t.len()]).is_err());
        let mut bent = z.clone();
        bent[2] = 1;
        assert!(raw_len(&bent).is_err());
        let mut bent = z.clone();
        bent[4..8].copy_from_slice(&(t.len() as u32 - 1).to_le_bytes());
        assert!(decompress_into(&bent, &mut vec![0; t.len() - 1]).is_err());
        let mut bent = z.clone();
        bent[4..8].copy_from_slice(&(MAX_DATA_BYTES + 1).to_le_bytes());
        assert!(raw_len(&bent).is_err());
        let mut bent = z.clone();
        for b in &mut bent[PREFIX_BYTES..] {
            *b ^= 0x5a;
        }
        assert!(decompress_into(&bent, &mut vec![0; t.len()]).is_err());
        let l = Codec::Lz4.compress(&t).unwrap();
        let mut bent = l.clone();
        bent.truncate(l.len() / 2);
        assert!(decompress_into(&bent, &mut vec![0; t.len()]).is_err());
    }

    #[test]
    fn names_and_wire_numbers_round_trip() {
        for c in [
            Codec::Off,
            Codec::Lz4,
            Codec::Zstd(1),
            Codec::Zstd(19),
            Codec::Auto,
        ] {
            assert_eq!(c.to_string().parse::<Codec>().unwrap(), c);
            let (n, l) = c.to_wire();
            assert_eq!(Codec::from_wire(n, l).unwrap(), c);
        }
        assert_eq!("zstd".parse::<Codec>().unwrap(), Codec::Zstd(1));
        for bad in ["gzip", "zstd:0", "zstd:20", "zstd:x", ""] {
            assert!(bad.parse::<Codec>().is_err(), "{bad:?}");
        }
        assert!(Codec::from_wire(2, 0).is_err());
        assert!(Codec::from_wire(7, 0).is_err());
    }
}
