//! Reading and writing whole frames on a byte stream.

use std::io::{self, Read, Write};
use stripefs_wire::{FrameError, Header, HEADER_LEN};

/// What went wrong while reading a frame.
#[derive(Debug)]
pub enum ReadError {
    /// The peer closed the connection cleanly between frames.
    Closed,
    /// No frame started before the read timeout (only between frames).
    Idle,
    Io(io::Error),
    Frame(FrameError),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Closed => write!(f, "connection closed by peer"),
            ReadError::Idle => write!(f, "no request before the timeout"),
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::Frame(e) => write!(f, "bad frame: {e} (reason {})", e.number()),
        }
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// Reads a header. A clean close or a timeout before its first byte is reported as
/// `Closed` or `Idle`; once a frame has started, anything short of it is an error.
pub fn read_header(r: &mut impl Read) -> Result<Header, ReadError> {
    let mut buf = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        match r.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Err(ReadError::Closed),
            Ok(0) => {
                return Err(ReadError::Frame(FrameError::Truncated {
                    got,
                    need: HEADER_LEN,
                }))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if got == 0 && is_timeout(&e) => return Err(ReadError::Idle),
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
    Header::decode(&buf).map_err(ReadError::Frame)
}

/// Reads exactly `buf.len()` bytes.
pub fn read_exact(r: &mut impl Read, buf: &mut [u8]) -> Result<(), ReadError> {
    r.read_exact(buf).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            ReadError::Frame(FrameError::Truncated {
                got: 0,
                need: buf.len(),
            })
        } else {
            ReadError::Io(e)
        }
    })
}

/// Discards `n` bytes.
pub fn skip(r: &mut impl Read, mut n: u64) -> Result<(), ReadError> {
    let mut sink = [0u8; 8192];
    while n > 0 {
        let k = n.min(sink.len() as u64) as usize;
        read_exact(r, &mut sink[..k])?;
        n -= k as u64;
    }
    Ok(())
}

/// Writes all `parts` in order, with as few system calls as the kernel allows.
pub fn write_all_parts(w: &mut impl Write, parts: &[&[u8]]) -> io::Result<()> {
    let mut idx = 0;
    let mut off = 0;
    while idx < parts.len() {
        if parts[idx].len() == off {
            idx += 1;
            off = 0;
            continue;
        }
        let mut slices: Vec<io::IoSlice> = Vec::with_capacity(parts.len() - idx);
        slices.push(io::IoSlice::new(&parts[idx][off..]));
        for p in &parts[idx + 1..] {
            slices.push(io::IoSlice::new(p));
        }
        let mut n = match w.write_vectored(&slices) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        while n > 0 {
            let left = parts[idx].len() - off;
            if n >= left {
                n -= left;
                idx += 1;
                off = 0;
            } else {
                off += n;
                n = 0;
            }
        }
    }
    w.flush()
}
