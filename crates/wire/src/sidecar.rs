//! The data server's checksum sidecar entry (docs/objects.md, "Sidecar entry"): one
//! 8-byte entry per 4 KiB block of an object, the block's CRC32C and a flag. Kept here,
//! without I/O, because the data server writes entries and short-circuit clients read
//! them from the server's files (issue 14).

/// Bytes of one sidecar entry.
pub const ENTRY_BYTES: u64 = 8;
/// The flag of a hole (reads as zeros whatever the data file holds).
pub const FLAG_HOLE: u32 = 0;
/// The flag of a written block: the CRC covers the block's bytes in the data file.
pub const FLAG_WRITTEN: u32 = 1;
/// The flag of a written block with pieces in the object's log (the delta log): the CRC
/// covers the block's bytes in the data file (its base), and the pieces, newer, lie on
/// top of them. Only the data server, which holds the pieces, can serve such a block.
pub const FLAG_PIECES: u32 = 2;
/// The flag of a hole with pieces in the object's log: zeros, with the pieces on top.
pub const FLAG_PIECES_ON_HOLE: u32 = 3;

/// What an entry says of its block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    Hole,
    /// Written; the CRC32C of its bytes.
    Written(u32),
    /// Pieces in the log on top of a base: written with this CRC, or a hole (`None`).
    Pieces(Option<u32>),
}

impl Entry {
    /// Whether the block holds stored data (anything but a plain hole).
    pub fn is_data(self) -> bool {
        self != Entry::Hole
    }

    /// The block's bytes as the data file holds them: the CRC of a written base,
    /// `None` for zeros.
    pub fn base(self) -> Option<u32> {
        match self {
            Entry::Hole | Entry::Pieces(None) => None,
            Entry::Written(crc) | Entry::Pieces(Some(crc)) => Some(crc),
        }
    }

    pub fn encode(self) -> [u8; ENTRY_BYTES as usize] {
        let (crc, flag) = match self {
            Entry::Hole => (0, FLAG_HOLE),
            Entry::Written(crc) => (crc, FLAG_WRITTEN),
            Entry::Pieces(Some(crc)) => (crc, FLAG_PIECES),
            Entry::Pieces(None) => (0, FLAG_PIECES_ON_HOLE),
        };
        let mut e = [0u8; ENTRY_BYTES as usize];
        e[..4].copy_from_slice(&crc.to_le_bytes());
        e[4..].copy_from_slice(&flag.to_le_bytes());
        e
    }

    /// The entry in `e` (one whole entry); `Err(flag)` for a flag this version does not
    /// know (a newer format): never guessed at.
    pub fn decode(e: &[u8]) -> Result<Entry, u32> {
        assert_eq!(e.len(), ENTRY_BYTES as usize, "a sidecar entry is 8 bytes");
        let word = |at: usize| u32::from_le_bytes([e[at], e[at + 1], e[at + 2], e[at + 3]]);
        match word(4) {
            FLAG_HOLE => Ok(Entry::Hole),
            FLAG_WRITTEN => Ok(Entry::Written(word(0))),
            FLAG_PIECES => Ok(Entry::Pieces(Some(word(0)))),
            FLAG_PIECES_ON_HOLE => Ok(Entry::Pieces(None)),
            other => Err(other),
        }
    }
}

/// The entry of a written block with CRC `crc`.
pub fn encode_entry(crc: u32) -> [u8; ENTRY_BYTES as usize] {
    Entry::Written(crc).encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_zeros_are_holes() {
        for crc in [0, 1, 0xdead_beef, u32::MAX] {
            for e in [Entry::Written(crc), Entry::Pieces(Some(crc))] {
                assert_eq!(Entry::decode(&e.encode()), Ok(e));
            }
            assert_eq!(Entry::decode(&encode_entry(crc)), Ok(Entry::Written(crc)));
        }
        assert_eq!(
            Entry::decode(&Entry::Pieces(None).encode()),
            Ok(Entry::Pieces(None))
        );
        assert_eq!(Entry::decode(&[0; 8]), Ok(Entry::Hole));
        assert_eq!(Entry::decode(&[1, 2, 3, 4, 0, 0, 0, 0]), Ok(Entry::Hole));
        assert_eq!(Entry::decode(&[1, 2, 3, 4, 9, 0, 0, 0]), Err(9));
        assert_eq!(Entry::Pieces(None).base(), None);
        assert_eq!(Entry::Pieces(Some(7)).base(), Some(7));
        assert!(!Entry::Hole.is_data() && Entry::Pieces(None).is_data());
    }
}
