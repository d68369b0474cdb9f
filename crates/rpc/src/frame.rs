//! Reading and writing whole frames on a byte stream.

use crate::limits::frame_deadline;
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

/// Fills `buf` from `r`. With a `deadline` (servers), the whole of `buf` must arrive
/// before it (servers poll with a short socket timeout so that they notice shutdown, yet
/// give a slow peer until the frame's deadline; a peer trickling bytes is cut off all the
/// same, at the first read that returns or times out past it). Without one (clients) the
/// socket's own timeout is the only limit: each read must make progress within it. With
/// `idle_ok`, a clean close or a timeout before the first byte are `Closed` and `Idle`
/// rather than errors.
fn fill(
    r: &mut impl Read,
    buf: &mut [u8],
    deadline: Option<Instant>,
    idle_ok: bool,
) -> Result<(), ReadError> {
    let start = Instant::now();
    let need = buf.len();
    let past = || deadline.is_some_and(|d| Instant::now() >= d);
    let late = |got: usize| {
        ReadError::Io(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "{got} of {need} bytes of a frame part in {:.1} s, past the frame's deadline: \
                 the peer is too slow",
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
                if got < buf.len() && past() {
                    return Err(late(got));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if got == 0 && idle_ok && is_timeout(&e) => return Err(ReadError::Idle),
            Err(e) if is_timeout(&e) && deadline.is_some() && !past() => {}
            Err(e) if is_timeout(&e) && deadline.is_some() => return Err(late(got)),
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
    Ok(())
}

/// Reads a header. A clean close or a timeout before its first byte is reported as
/// `Closed` or `Idle`; once a frame has started, anything short of it is an error. With
/// a non-zero `patience` (servers) the header must arrive within
/// [`frame_deadline`]`(patience, HEADER_LEN)` of the call, and the answer carries the
/// deadline for the rest of the frame: the whole frame (header, body and data) within
/// `frame_deadline(patience, its length)` of its start, so a peer cannot stretch a frame
/// by trickling each part just in time. Clients (zero patience) get `None`.
pub fn read_header(
    r: &mut impl Read,
    patience: Duration,
) -> Result<(Header, Option<Instant>), ReadError> {
    let start = Instant::now();
    let mut buf = [0u8; HEADER_LEN];
    let deadline = (!patience.is_zero()).then(|| start + frame_deadline(patience, HEADER_LEN));
    fill(r, &mut buf, deadline, true)?;
    let h = Header::decode(&buf).map_err(ReadError::Frame)?;
    let len = HEADER_LEN + h.body_len as usize + h.data_len as usize;
    let rest = (!patience.is_zero()).then(|| start + frame_deadline(patience, len));
    Ok((h, rest))
}

/// Reads exactly `buf.len()` bytes, before `deadline` if there is one.
pub fn read_exact(
    r: &mut impl Read,
    buf: &mut [u8],
    deadline: Option<Instant>,
) -> Result<(), ReadError> {
    fill(r, buf, deadline, false)
}

/// Discards `n` bytes.
pub fn skip(r: &mut impl Read, mut n: u64, deadline: Option<Instant>) -> Result<(), ReadError> {
    let mut sink = [0u8; 8192];
    while n > 0 {
        let k = n.min(sink.len() as u64) as usize;
        read_exact(r, &mut sink[..k], deadline)?;
        n -= k as u64;
    }
    Ok(())
}

/// Most slices one vectored write takes (Linux's IOV_MAX).
const MAX_SLICES: usize = 1024;

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
        // At most IOV_MAX (1,024 on Linux) slices per call; the rest go in the next.
        let take = (parts.len() - idx).min(MAX_SLICES);
        let mut slices: Vec<io::IoSlice> = Vec::with_capacity(take);
        slices.push(io::IoSlice::new(&parts[idx][off..]));
        for p in &parts[idx + 1..idx + take] {
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

    /// A writer that takes at most `max` bytes per call and records how many slices
    /// each vectored call was given (a socket may take less than it is offered; writev
    /// refuses more than IOV_MAX slices).
    struct Stingy {
        got: Vec<u8>,
        max: usize,
        most_slices: usize,
    }

    impl Write for Stingy {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let n = buf.len().min(self.max);
            self.got.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
            assert!(
                bufs.len() <= MAX_SLICES,
                "{} slices in one call",
                bufs.len()
            );
            self.most_slices = self.most_slices.max(bufs.len());
            let mut n = 0;
            for b in bufs {
                let k = b.len().min(self.max - n);
                self.got.extend_from_slice(&b[..k]);
                n += k;
                if n == self.max {
                    break;
                }
            }
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Many parts (more than one vectored call may take), empty ones among them, and
    /// short writes that end inside a part: every byte goes out once, in order.
    #[test]
    fn parts_go_out_whole_and_in_order() {
        let owned: Vec<Vec<u8>> = (0..3000u32)
            .map(|i| (0..(i % 7) as u8).map(|b| b ^ (i as u8)).collect())
            .collect();
        let parts: Vec<&[u8]> = owned.iter().map(|v| v.as_slice()).collect();
        for max in [1, 5, 64, usize::MAX] {
            let mut w = Stingy {
                got: Vec::new(),
                max,
                most_slices: 0,
            };
            write_all_parts(&mut w, &parts).unwrap();
            assert_eq!(w.got, owned.concat(), "max {max}");
            if max == usize::MAX {
                assert_eq!(w.most_slices, MAX_SLICES);
            }
        }
    }

    /// A peer that sends one byte per read, `every` apart.
    struct Trickle {
        every: Duration,
        left: usize,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            std::thread::sleep(self.every);
            if self.left == 0 {
                return Ok(0);
            }
            self.left -= 1;
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
            left: usize::MAX,
        };
        let e = fill(&mut slow, &mut buf, Some(t + patience), true).unwrap_err();
        let took = t.elapsed();
        assert!(e.to_string().contains("too slow"), "{e}");
        assert!(took < patience + Duration::from_millis(100), "{took:?}");
        let mut quick = Trickle {
            every: Duration::from_millis(1),
            left: usize::MAX,
        };
        let t = Instant::now();
        fill(&mut quick, &mut buf, Some(t + patience), true).unwrap();
        // No deadline (a client): no frame deadline, however slow the pieces.
        let mut slow = Trickle {
            every: Duration::from_millis(5),
            left: usize::MAX,
        };
        fill(&mut slow, &mut buf, None, true).unwrap();
    }

    /// A frame trickled through header and body is cut off at the deadline of the whole
    /// frame, counted from its start: the body does not get a fresh patience of its own
    /// once the header has (just) made it.
    #[test]
    fn the_deadline_covers_the_whole_frame() {
        // A valid header announcing 200 bytes of body; every byte 5 ms apart, so the
        // header takes 200 ms of the 300 ms patience and the body would take 1 s.
        let h = Header {
            version: stripefs_wire::VERSION,
            opcode: stripefs_wire::Opcode::Ping as u16,
            body_len: 200,
            ..Header::default()
        };
        let mut frame = h.encode().to_vec();
        frame.resize(HEADER_LEN + 200, 0);
        struct Slow(Vec<u8>, usize);
        impl Read for Slow {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                std::thread::sleep(Duration::from_millis(5));
                let Some(&b) = self.0.get(self.1) else {
                    return Ok(0);
                };
                self.1 += 1;
                buf[0] = b;
                Ok(1)
            }
        }
        let mut r = Slow(frame, 0);
        let patience = Duration::from_millis(300);
        let start = Instant::now();
        let (got, rest) = read_header(&mut r, patience).unwrap();
        assert_eq!(got.body_len, 200);
        let rest = rest.expect("a server read has a deadline");
        let mut body = vec![0u8; 200];
        let e = read_exact(&mut r, &mut body, Some(rest)).unwrap_err();
        assert!(e.to_string().contains("too slow"), "{e}");
        let took = start.elapsed();
        assert!(took < patience + Duration::from_millis(80), "{took:?}");
    }
}
