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

/// The slowest a peer may send the rest of a frame it has begun: a frame of `n` bytes
/// must arrive within the patience plus `n` / this rate, so that a peer trickling bytes
/// cannot hold a connection (and its thread) forever.
pub const MIN_PEER_RATE_BYTES_S: u64 = 64 << 10;

/// How long a peer may take over a frame part of `len` bytes, given `patience`.
pub fn frame_deadline(patience: Duration, len: usize) -> Duration {
    patience + Duration::from_millis(len as u64 * 1000 / MIN_PEER_RATE_BYTES_S)
}

/// Fills `buf` from `r`. With a `patience`, the whole of `buf` must arrive within
/// [`frame_deadline`] of the call (servers poll with a short socket timeout so that they
/// notice shutdown, yet give a slow peer the full peer timeout; a peer trickling bytes
/// is cut off all the same). With zero patience (clients) the socket's own timeout is
/// the only limit: each read must make progress within it. With `idle_ok`, a clean close
/// or a timeout before the first byte are `Closed` and `Idle` rather than errors.
fn fill(
    r: &mut impl Read,
    buf: &mut [u8],
    patience: Duration,
    idle_ok: bool,
) -> Result<(), ReadError> {
    let start = Instant::now();
    let need = buf.len();
    let deadline = (!patience.is_zero()).then(|| frame_deadline(patience, need));
    let past = |d: Option<Duration>| d.is_some_and(|d| start.elapsed() >= d);
    let late = |got: usize| {
        ReadError::Io(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "{got} of {need} bytes of a frame in {:.1} s: the peer is too slow",
                start.elapsed().as_secs_f64()
            ),
        ))
    };
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
            Ok(n) => {
                got += n;
                if got < buf.len() && past(deadline) {
                    return Err(late(got));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if got == 0 && idle_ok && is_timeout(&e) => return Err(ReadError::Idle),
            Err(e) if is_timeout(&e) && deadline.is_some() && !past(deadline) => {}
            Err(e) if is_timeout(&e) && deadline.is_some() => return Err(late(got)),
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

#[cfg(test)]
mod trickle_tests {
    use super::*;

    /// A peer that sends one byte per read, `every` apart.
    struct Trickle {
        every: Duration,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            std::thread::sleep(self.every);
            buf[0] = 0;
            Ok(1)
        }
    }

    /// A header trickled a byte at a time is cut off at its deadline, not read to its
    /// end; a peer that sends in time is read whole.
    #[test]
    fn a_trickled_frame_is_cut_off_at_its_deadline() {
        let patience = Duration::from_millis(200);
        let mut buf = [0u8; HEADER_LEN];
        let t = Instant::now();
        let mut slow = Trickle {
            every: Duration::from_millis(20),
        };
        let e = fill(&mut slow, &mut buf, patience, true).unwrap_err();
        let took = t.elapsed();
        assert!(e.to_string().contains("too slow"), "{e}");
        assert!(
            took < frame_deadline(patience, HEADER_LEN) + Duration::from_millis(100),
            "{took:?}"
        );
        let mut quick = Trickle {
            every: Duration::from_millis(1),
        };
        fill(&mut quick, &mut buf, patience, true).unwrap();
        // Zero patience (a client): no frame deadline, however slow the pieces.
        let mut slow = Trickle {
            every: Duration::from_millis(5),
        };
        fill(&mut slow, &mut buf, Duration::ZERO, true).unwrap();
    }

    #[test]
    fn deadlines_grow_with_the_frame() {
        let p = Duration::from_secs(10);
        assert_eq!(frame_deadline(p, HEADER_LEN), Duration::from_millis(10_000));
        assert_eq!(frame_deadline(p, 4 << 20), Duration::from_secs(10 + 64));
    }
}
