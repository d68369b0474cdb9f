//! Bulk data of a response, and how it goes out: from memory, or from where it lies in a
//! file with `sendfile(2)` (zero-copy: the server's CPU never touches the bytes).

use std::any::Any;
use std::fs::File;
use std::io::{self, Write};
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::fs::FileExt;

/// One piece of a response's bulk data.
pub enum Part {
    Bytes(Vec<u8>),
    /// `len` bytes of an open file at `offset`. The descriptor stays open as long as the
    /// payload's `hold` lives.
    File {
        fd: RawFd,
        offset: u64,
        len: u64,
    },
    /// `len` zero bytes (a hole).
    Zeros(u64),
}

impl Part {
    pub fn len(&self) -> u64 {
        match self {
            Part::Bytes(b) => b.len() as u64,
            Part::File { len, .. } | Part::Zeros(len) => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Bulk data of a response.
pub enum Payload {
    None,
    Bytes(Vec<u8>),
    /// Sent part by part; `hold` keeps what the parts need (open files, locked ranges)
    /// until the last byte is on the socket, then is dropped.
    Parts {
        parts: Vec<Part>,
        hold: Box<dyn Any + Send>,
    },
}

impl Payload {
    pub fn len(&self) -> u64 {
        match self {
            Payload::None => 0,
            Payload::Bytes(b) => b.len() as u64,
            Payload::Parts { parts, .. } => parts.iter().map(Part::len).sum(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes in memory, reading file parts (for transports that are not a socket:
    /// the simulator). A file that ends early is an error, never padded.
    pub fn into_bytes(self) -> io::Result<Vec<u8>> {
        match self {
            Payload::None => Ok(Vec::new()),
            Payload::Bytes(b) => Ok(b),
            Payload::Parts { parts, hold } => {
                let mut out = Vec::with_capacity(parts.iter().map(Part::len).sum::<u64>() as usize);
                for p in parts {
                    match p {
                        Part::Bytes(b) => out.extend_from_slice(&b),
                        Part::Zeros(n) => out.resize(out.len() + n as usize, 0),
                        Part::File { fd, offset, len } => {
                            let at = out.len();
                            out.resize(at + len as usize, 0);
                            borrowed(fd).read_exact_at(&mut out[at..], offset)?;
                        }
                    }
                }
                drop(hold);
                Ok(out)
            }
        }
    }
}

/// A `File` on a descriptor someone else owns (never closed here).
fn borrowed(fd: RawFd) -> ManuallyDrop<File> {
    // SAFETY: the descriptor is open for as long as the payload's `hold` lives, which
    // outlives every use here; ManuallyDrop never closes it.
    ManuallyDrop::new(unsafe { File::from_raw_fd(fd) })
}

/// A stream a reply can be written to. File parts go with `sendfile` on the socket
/// [`ReplyStream::socket`] gives; a stream that gives none (TLS: bytes must pass through
/// the cipher) gets them read into memory first.
pub trait ReplyStream: Write {
    fn socket(&self) -> Option<RawFd>;
}

impl ReplyStream for std::net::TcpStream {
    fn socket(&self) -> Option<RawFd> {
        Some(self.as_raw_fd())
    }
}

impl ReplyStream for mio::net::TcpStream {
    fn socket(&self) -> Option<RawFd> {
        Some(self.as_raw_fd())
    }
}

impl ReplyStream for crate::tls::Stream {
    fn socket(&self) -> Option<RawFd> {
        (!self.is_tls()).then(|| self.as_raw_fd())
    }
}

/// Writes `frame`, then the payload. File parts go with `sendfile(2)`; the frame is sent
/// with `MSG_MORE` first so that it leaves in the same segment as the data after it.
pub fn send(stream: &mut impl ReplyStream, frame: &[u8], data: Payload) -> io::Result<()> {
    let Some(fd) = stream.socket() else {
        let data = data.into_bytes()?;
        return crate::frame::write_all_parts(stream, &[frame, &data]);
    };
    let (parts, hold) = match data {
        Payload::None => return crate::frame::write_all_parts(stream, &[frame]),
        Payload::Bytes(b) => return crate::frame::write_all_parts(stream, &[frame, &b]),
        Payload::Parts { parts, hold } => (parts, hold),
    };
    send_more(fd, frame)?;
    for p in parts {
        match p {
            Part::Bytes(b) => stream.write_all(&b)?,
            Part::Zeros(mut n) => {
                static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];
                while n > 0 {
                    let k = n.min(ZEROS.len() as u64) as usize;
                    stream.write_all(&ZEROS[..k])?;
                    n -= k as u64;
                }
            }
            Part::File {
                fd: file,
                offset,
                len,
            } => sendfile_all(fd, file, offset, len)?,
        }
    }
    stream.flush()?;
    drop(hold);
    Ok(())
}

/// `send(2)` of all of `buf` with `MSG_MORE`.
fn send_more(sock: RawFd, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: buf is a valid slice for its length; sock is an open socket.
        let n = unsafe {
            libc::send(
                sock,
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_MORE | libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

/// Sends `len` bytes of `file` at `offset` to `sock` with `sendfile(2)`. A file that
/// ends before `len` is an error: the frame already promised the bytes, so the
/// connection must close rather than carry anything else.
fn sendfile_all(sock: RawFd, file: RawFd, offset: u64, len: u64) -> io::Result<()> {
    let mut off = libc::off_t::try_from(offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file offset out of range"))?;
    let mut left = len;
    while left > 0 {
        let want = left.min(1 << 30) as usize;
        // SAFETY: both descriptors are open (the caller's hold keeps the file open);
        // `off` is a valid pointer the kernel advances.
        let n = unsafe { libc::sendfile(sock, file, &mut off, want) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the file ended {left} bytes before the promised end"),
            ));
        }
        left -= n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};

    fn file_with(bytes: &[u8]) -> File {
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, bytes).unwrap();
        f
    }

    fn parts(f: &File) -> Vec<Part> {
        vec![
            Part::Bytes(b"head".to_vec()),
            Part::File {
                fd: f.as_raw_fd(),
                offset: 3,
                len: 100_000,
            },
            Part::Zeros(70_000),
            Part::File {
                fd: f.as_raw_fd(),
                offset: 0,
                len: 5,
            },
        ]
    }

    fn expected(content: &[u8]) -> Vec<u8> {
        let mut want = b"head".to_vec();
        want.extend_from_slice(&content[3..100_003]);
        want.extend(std::iter::repeat(0u8).take(70_000));
        want.extend_from_slice(&content[..5]);
        want
    }

    #[test]
    fn parts_go_out_in_order_over_a_socket_and_read_back_the_same_in_memory() {
        let content: Vec<u8> = (0..200_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let f = std::sync::Arc::new(file_with(&content));
        let want = expected(&content);
        let payload = Payload::Parts {
            parts: parts(&f),
            hold: Box::new(f.clone()),
        };
        assert_eq!(payload.len(), want.len() as u64);
        assert_eq!(payload.into_bytes().unwrap(), want);

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            got
        });
        let mut out = TcpStream::connect(addr).unwrap();
        let payload = Payload::Parts {
            parts: parts(&f),
            hold: Box::new(f.clone()),
        };
        send(&mut out, b"FRAME", payload).unwrap();
        drop(out);
        let got = reader.join().unwrap();
        assert_eq!(&got[..5], b"FRAME");
        assert!(got[5..] == want[..], "sent bytes differ from the parts");
    }

    #[test]
    fn a_file_shorter_than_promised_is_an_error_not_padding() {
        let f = std::sync::Arc::new(file_with(&[1u8; 1000]));
        let short = || Payload::Parts {
            parts: vec![Part::File {
                fd: f.as_raw_fd(),
                offset: 500,
                len: 1000,
            }],
            hold: Box::new(f.clone()),
        };
        assert!(short().into_bytes().is_err());
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let t = std::thread::spawn(move || listener.accept().map(|_| ()));
        let mut out = TcpStream::connect(addr).unwrap();
        let e = send(&mut out, b"F", short()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        t.join().unwrap().unwrap();
    }
}
