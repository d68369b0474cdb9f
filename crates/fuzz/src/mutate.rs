//! Mutations of encoded frames. Most real bugs hide behind the checksums, so many
//! mutations end by recomputing the body and header CRCs; the rest leave them stale so
//! that the checksum paths are exercised too.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use stripefs_wire::{crc32c, ErrorCode, Opcode, HEADER_LEN, MAX_BODY_BYTES, MAX_DATA_BYTES};

/// Most mutations stacked on one input.
const MAX_STACKED: u32 = 4;
/// Most random bytes appended, inserted or used as a random body.
const MAX_RANDOM_BYTES: usize = 256;

/// Header fields as (offset, width in bytes).
const FIELDS: &[(usize, usize)] = &[
    (4, 2),  // version
    (6, 2),  // opcode
    (8, 2),  // flags
    (10, 2), // reserved
    (12, 8), // request_id
    (20, 4), // status
    (24, 4), // body_len
    (28, 4), // data_len
    (32, 4), // body_crc
];

/// Values that tend to hit boundaries: limits and their neighbours, sign bits, all ones,
/// and the length prefixes that make a decoder allocate.
fn interesting(rng: &mut StdRng) -> u64 {
    const VALUES: &[u64] = &[
        0,
        1,
        2,
        3,
        4,
        8,
        31,
        32,
        255,
        256,
        4095,
        4096,
        4097,
        0x7fff,
        0x8000,
        0xffff,
        0x1_0000,
        MAX_BODY_BYTES as u64,
        MAX_BODY_BYTES as u64 + 1,
        MAX_DATA_BYTES as u64,
        MAX_DATA_BYTES as u64 + 1,
        0x7fff_ffff,
        0x8000_0000,
        0xffff_ffff,
        1 << 32,
        1 << 60,
        i64::MAX as u64,
        u64::MAX - 4096,
        u64::MAX - 1,
        u64::MAX,
    ];
    match rng.gen_range(0..4) {
        0 => Opcode::ALL.choose(rng).map_or(0, |&o| o as u64),
        1 => ErrorCode::ALL.choose(rng).map_or(0, |&c| c as u64),
        _ => *VALUES.choose(rng).unwrap_or(&0),
    }
}

fn put(buf: &mut [u8], at: usize, width: usize, value: u64) {
    let bytes = value.to_le_bytes();
    let end = (at + width).min(buf.len());
    if at < end {
        buf[at..end].copy_from_slice(&bytes[..end - at]);
    }
}

/// Recomputes the header checksum so that a mutated header passes the CRC check.
pub fn fix_header_crc(buf: &mut [u8]) {
    if buf.len() >= HEADER_LEN {
        let crc = crc32c(&buf[..36]);
        buf[36..40].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Recomputes the body checksum over the bytes present (at most `body_len`), then the
/// header checksum.
pub fn fix_crcs(buf: &mut [u8]) {
    if buf.len() < HEADER_LEN {
        return;
    }
    let body_len = u32::from_le_bytes([buf[24], buf[25], buf[26], buf[27]]) as usize;
    let end = HEADER_LEN.saturating_add(body_len).min(buf.len());
    let crc = crc32c(&buf[HEADER_LEN..end]);
    buf[32..36].copy_from_slice(&crc.to_le_bytes());
    fix_header_crc(buf);
}

fn set_body_len(buf: &mut [u8]) {
    if buf.len() >= HEADER_LEN {
        put(buf, 24, 4, (buf.len() - HEADER_LEN) as u64);
    }
}

/// How much checksum repair a mutation needs to get past the checks.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fix {
    Maybe,
    Header,
    All,
}

/// Replaces `out` with a mutation of a random corpus frame.
pub fn mutate(rng: &mut StdRng, corpus: &[Vec<u8>], out: &mut Vec<u8>) {
    assert!(!corpus.is_empty());
    out.clear();
    out.extend_from_slice(&corpus[rng.gen_range(0..corpus.len())]);
    let mut fix = Fix::Maybe;
    for _ in 0..rng.gen_range(1..=MAX_STACKED) {
        fix = fix.max(mutate_once(rng, corpus, out));
    }
    let roll = rng.gen_range(0..10);
    match fix {
        Fix::All => fix_crcs(out),
        Fix::Header if roll < 9 => fix_header_crc(out),
        Fix::Maybe if roll < 4 => fix_crcs(out),
        Fix::Maybe if roll < 6 => fix_header_crc(out),
        _ => {}
    }
}

fn mutate_once(rng: &mut StdRng, corpus: &[Vec<u8>], out: &mut Vec<u8>) -> Fix {
    let len = out.len();
    match rng.gen_range(0..10) {
        0 if len > 0 => {
            let bit = rng.gen_range(0..len * 8);
            out[bit / 8] ^= 1 << (bit % 8);
            Fix::Maybe
        }
        1 if len > 0 => {
            let at = rng.gen_range(0..len);
            out[at] = *[0, 1, 0x7f, 0x80, 0xff, rng.gen()]
                .choose(rng)
                .unwrap_or(&0);
            Fix::Maybe
        }
        2 => {
            out.truncate(rng.gen_range(0..=len));
            Fix::Maybe
        }
        3 => {
            let other = &corpus[rng.gen_range(0..corpus.len())];
            out.truncate(rng.gen_range(0..=len));
            out.extend_from_slice(&other[rng.gen_range(0..=other.len())..]);
            Fix::Maybe
        }
        4 => {
            let &(at, width) = FIELDS.choose(rng).unwrap_or(&(6, 2));
            let v = match rng.gen_range(0..4) {
                0 => (len.saturating_sub(HEADER_LEN) as u64 + rng.gen_range(0..3)).wrapping_sub(1),
                _ => interesting(rng),
            };
            put(out, at, width, v);
            Fix::Header
        }
        5 => {
            // A random body under a valid header of a random opcode and direction.
            out.truncate(HEADER_LEN.min(len));
            let keep = rng.gen_range(0..=MAX_RANDOM_BYTES);
            out.extend((0..keep).map(|_| rng.gen::<u8>()));
            set_body_len(out);
            Fix::All
        }
        6 => {
            let n = rng.gen_range(1..=MAX_RANDOM_BYTES);
            out.extend((0..n).map(|_| rng.gen::<u8>()));
            if rng.gen() {
                set_body_len(out);
            }
            Fix::Maybe
        }
        7 if len > HEADER_LEN => {
            // An edited integer inside the body: a length prefix, variant index or tag.
            let at = rng.gen_range(HEADER_LEN..len);
            let width = *[1, 4, 8].choose(rng).unwrap_or(&8);
            put(out, at, width, interesting(rng));
            Fix::All
        }
        8 if len > HEADER_LEN => {
            // Bytes inserted into or removed from the body, with body_len following.
            let at = rng.gen_range(HEADER_LEN..=len);
            if rng.gen() {
                let n = rng.gen_range(1..=8);
                out.splice(at..at, (0..n).map(|_| rng.gen::<u8>()));
            } else {
                let end = rng.gen_range(at..=len);
                out.drain(at..end);
            }
            set_body_len(out);
            Fix::All
        }
        _ => {
            set_body_len(out);
            Fix::All
        }
    }
}
