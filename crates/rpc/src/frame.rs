//! Reading and writing whole frames on a byte stream.

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};
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
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Fills `buf` from `r`. A socket timeout is tolerated until `patience` has passed since
/// the call began (servers poll with a short socket timeout so that they notice shutdown,
/// yet give a slow peer the full peer timeout). With `idle_ok`, a clean close or a timeout
/// before the first byte are `Closed` and `Idle` rather than errors.
fn fill(
    r: &mut impl Read,
    buf: &mut [u8],
    patience: Duration,
    idle_ok: bool,
) -> Result<(), ReadError> {
    let start = Instant::now();
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) if got == 0 && idle_ok => return Err(ReadError::Closed),
            Ok(0) => {
                return Err(ReadError::Frame(FrameError::Truncated {
                    got,
                    need: buf.len(),
                }))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if got == 0 && idle_ok && is_timeout(&e) => return Err(ReadError::Idle),
            Err(e) if is_timeout(&e) && start.elapsed() < patience => {}
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
    Ok(())
}

/// Reads a header. A clean close or a timeout before its first byte is reported as
/// `Closed` or `Idle`; once a frame has started, anything short of it is an error.
pub fn read_header(r: &mut impl Read, patience: Duration) -> Result<Header, ReadError> {
    let mut buf = [0u8; HEADER_LEN];
    fill(r, &mut buf, patience, true)?;
    Header::decode(&buf).map_err(ReadError::Frame)
}

/// Reads exactly `buf.len()` bytes.
pub fn read_exact(r: &mut impl Read, buf: &mut [u8], patience: Duration) -> Result<(), ReadError> {
    fill(r, buf, patience, false)
}

/// Discards `n` bytes.
pub fn skip(r: &mut impl Read, mut n: u64, patience: Duration) -> Result<(), ReadError> {
    let mut sink = [0u8; 8192];
    while n > 0 {
        let k = n.min(sink.len() as u64) as usize;
        read_exact(r, &mut sink[..k], patience)?;
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
