//! The data server's checksum sidecar entry (docs/objects.md, "Sidecar entry"): one
//! 8-byte entry per 4 KiB block of an object, the block's CRC32C and a flag. Kept here,
//! without I/O, because the data server writes entries and short-circuit clients read
//! them from the server's files (issue 14).

/// Bytes of one sidecar entry.
pub const ENTRY_BYTES: u64 = 8;
/// The flag of a written block (0 is a hole).
pub const FLAG_WRITTEN: u32 = 1;

/// The entry of a written block with CRC `crc`.
pub fn encode_entry(crc: u32) -> [u8; ENTRY_BYTES as usize] {
    let mut e = [0u8; ENTRY_BYTES as usize];
    e[..4].copy_from_slice(&crc.to_le_bytes());
    e[4..].copy_from_slice(&FLAG_WRITTEN.to_le_bytes());
    e
}

/// The stored CRC of a written block, `None` for a hole. `e` is one whole entry.
pub fn decode_entry(e: &[u8]) -> Option<u32> {
    assert_eq!(e.len(), ENTRY_BYTES as usize, "a sidecar entry is 8 bytes");
    let word = |at: usize| u32::from_le_bytes([e[at], e[at + 1], e[at + 2], e[at + 3]]);
    (word(4) != 0).then(|| word(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_zeros_are_holes() {
        for crc in [0, 1, 0xdead_beef, u32::MAX] {
            assert_eq!(decode_entry(&encode_entry(crc)), Some(crc));
        }
        assert_eq!(decode_entry(&[0; 8]), None);
        assert_eq!(decode_entry(&[1, 2, 3, 4, 0, 0, 0, 0]), None);
    }
}
