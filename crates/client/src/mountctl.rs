//! The mount daemon's control socket: how a program that changed the namespace with the
//! native client (the interception library) has the mount drop what its kernel caches
//! about those names and inodes, so that the mount shows the change at once.
//!
//! The socket is a Unix stream socket in the abstract namespace, named after the mount's
//! device number ([`socket_name`]), which both sides know: the daemon from a stat of its
//! mount point, a program from a stat of any file on the mount. Each message is a
//! little-endian `u32` length and that many bytes of [`Changed`] records; the daemon
//! answers each message with one byte ([`DONE`]) once the kernel has dropped them, and,
//! if the message held a [`Changed::Hello`], one byte of [`features`](FEATURE_WRITEBACK_CACHE)
//! after it. What it does on a message only drops caches, so it serves anyone who
//! connects; a message that does not decode closes the connection.

/// The abstract socket name (without its leading NUL) of the mount whose device number
/// is `major:minor`.
pub fn socket_name(dev: (u32, u32)) -> String {
    format!("stripefs-mount-{}:{}", dev.0, dev.1)
}

/// The daemon's answer to a message it applied.
pub const DONE: u8 = 0;

/// The mount uses the kernel's writeback cache: the kernel keeps its own size and
/// times of the files it caches, so nothing may change them past it (the interception
/// library leaves such a mount's files to the kernel).
pub const FEATURE_WRITEBACK_CACHE: u8 = 1;

/// Largest message accepted.
pub const MAX_MESSAGE_BYTES: usize = 64 << 10;

/// One thing the kernel may cache wrongly now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Changed {
    /// The name `name` in directory `parent` (removed, renamed, replaced).
    Entry { parent: u64, name: String },
    /// The attributes of inode `ino` (its link count, size, times changed).
    Inode { ino: u64 },
    /// Not a change: asks for the mount's features, answered after [`DONE`].
    Hello,
}

const ENTRY: u8 = 1;
const INODE: u8 = 2;
const HELLO: u8 = 3;
const MAX_NAME_BYTES: usize = 255;

/// The message (length prefix included) that names `changes`.
pub fn encode(changes: &[Changed]) -> Vec<u8> {
    let mut b = vec![0u8; 4];
    for c in changes {
        match c {
            Changed::Entry { parent, name } => {
                b.push(ENTRY);
                b.extend_from_slice(&parent.to_le_bytes());
                let n = name.as_bytes();
                b.extend_from_slice(&(n.len() as u16).to_le_bytes());
                b.extend_from_slice(n);
            }
            Changed::Inode { ino } => {
                b.push(INODE);
                b.extend_from_slice(&ino.to_le_bytes());
            }
            Changed::Hello => b.push(HELLO),
        }
    }
    let len = (b.len() - 4) as u32;
    b[..4].copy_from_slice(&len.to_le_bytes());
    debug_assert!(b.len() - 4 <= MAX_MESSAGE_BYTES);
    b
}

/// The length a message's 4-byte prefix announces, if acceptable.
pub fn message_len(prefix: [u8; 4]) -> Result<usize, String> {
    let n = u32::from_le_bytes(prefix) as usize;
    if n > MAX_MESSAGE_BYTES {
        return Err(format!(
            "message of {n} bytes (at most {MAX_MESSAGE_BYTES})"
        ));
    }
    Ok(n)
}

/// The records of a message's body (after its length prefix).
pub fn decode(mut b: &[u8]) -> Result<Vec<Changed>, String> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
        if b.len() < n {
            return Err("message ends inside a record".into());
        }
        let (h, t) = b.split_at(n);
        *b = t;
        Ok(h)
    }
    fn u64_of(b: &mut &[u8]) -> Result<u64, String> {
        let mut a = [0u8; 8];
        a.copy_from_slice(take(b, 8)?);
        Ok(u64::from_le_bytes(a))
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        match take(&mut b, 1)?[0] {
            ENTRY => {
                let parent = u64_of(&mut b)?;
                let mut l = [0u8; 2];
                l.copy_from_slice(take(&mut b, 2)?);
                let len = u16::from_le_bytes(l) as usize;
                if len == 0 || len > MAX_NAME_BYTES {
                    return Err(format!("name of {len} bytes"));
                }
                let name = std::str::from_utf8(take(&mut b, len)?)
                    .map_err(|_| "name not UTF-8".to_string())?;
                if name.contains('/') || name.contains('\0') || name == "." || name == ".." {
                    return Err(format!("{name:?} is not a name"));
                }
                out.push(Changed::Entry {
                    parent,
                    name: name.to_string(),
                });
            }
            INODE => out.push(Changed::Inode {
                ino: u64_of(&mut b)?,
            }),
            HELLO => out.push(Changed::Hello),
            t => return Err(format!("unknown record type {t}")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let c = vec![
            Changed::Entry {
                parent: 1,
                name: "a b".into(),
            },
            Changed::Inode { ino: u64::MAX },
            Changed::Hello,
            Changed::Entry {
                parent: 77,
                name: "é".repeat(100),
            },
        ];
        let m = encode(&c);
        let len = message_len(m[..4].try_into().unwrap()).unwrap();
        assert_eq!(len, m.len() - 4);
        assert_eq!(decode(&m[4..]).unwrap(), c);
        assert_eq!(decode(&[]).unwrap(), vec![]);
    }

    #[test]
    fn bad_messages_are_refused() {
        assert!(message_len(((MAX_MESSAGE_BYTES + 1) as u32).to_le_bytes()).is_err());
        let good = encode(&[Changed::Entry {
            parent: 5,
            name: "x".into(),
        }]);
        // Every truncation of a record is refused, never misread.
        for cut in 5..good.len() {
            assert!(decode(&good[4..cut]).is_err(), "cut at {cut}");
        }
        for bad in ["", ".", "..", "a/b", "a\0b"] {
            let mut m = vec![ENTRY];
            m.extend_from_slice(&1u64.to_le_bytes());
            m.extend_from_slice(&(bad.len() as u16).to_le_bytes());
            m.extend_from_slice(bad.as_bytes());
            assert!(decode(&m).is_err(), "{bad:?}");
        }
        assert!(decode(&[9]).is_err());
        assert!(decode(&[ENTRY, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0xff]).is_err());
    }

    #[test]
    fn the_name_follows_the_device() {
        assert_eq!(socket_name((0, 45)), "stripefs-mount-0:45");
    }
}
