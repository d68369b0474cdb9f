//! The short-circuit socket (issue 14, docs/protocol.md "Short-circuit socket"): a data
//! server hands a client on its own host descriptors of an object's files over a Unix
//! socket (`SCM_RIGHTS`), so that the client reads them with `pread` and verifies the
//! stored checksums itself, or writes hole blocks into them itself, without the server's
//! CPU or memory in the data path; and takes whole-block writes through a pipe.
//!
//! The socket is `SOCK_SEQPACKET`: every message keeps its boundaries and carries its
//! descriptors with it. Each message is one frame of the TCP protocol (the same header,
//! checksums and postcard body, `docs/protocol.md`), at most [`MAX_MESSAGE`] bytes and
//! without bulk data: the requests are the operation table's [`SameHostOp`] rows
//! (`stripefs_wire::ops`), the handshake is the TCP handshake's `Hello` and `Auth` (both
//! sides prove they know the cluster secret), and errors are error frames. An error
//! whose code is `Unsupported` means the server takes no requests of that kind at all
//! (its disks are throttled, its store has no files): the client stops asking it.
//!
//! This module is the socket, its frames and the pipes; [`crate::samehost`] is the
//! transport the client and the data server use over it (and the simulator in its
//! place).

use crate::auth::{random_nonce, Secret};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::net::{
    self, sockopt, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::Duration;
use stripefs_wire::{
    decode_request, decode_response, encode_request, encode_response, Cred, Envelope, ErrorCode,
    Header, Opcode, Request, Response, Valid, WireError, HEADER_LEN, MAX_LOCAL_FDS,
    MAX_LOCAL_MESSAGE, MAX_LOCAL_WRITE,
};

/// The longest message either side sends or accepts.
pub const MAX_MESSAGE: usize = MAX_LOCAL_MESSAGE;
/// Most descriptors one message carries.
pub const MAX_FDS: usize = MAX_LOCAL_FDS;

pub use stripefs_sys::fileio::{cachestat, open_direct_reader, pread_direct, CacheStat};

fn err(kind: io::ErrorKind, msg: String) -> io::Error {
    io::Error::new(kind, msg)
}

/// A connected `SOCK_SEQPACKET` Unix socket.
pub struct Seqpacket {
    fd: OwnedFd,
}

fn sockaddr(path: &Path) -> io::Result<net::SocketAddrUnix> {
    use std::os::unix::ffi::OsStrExt;
    /// `sizeof(sockaddr_un.sun_path)` on Linux, including the terminating zero.
    const SUN_PATH: usize = 108;
    let len = path.as_os_str().as_bytes().len();
    if len >= SUN_PATH {
        return Err(err(
            io::ErrorKind::InvalidInput,
            format!(
                "socket path {} is {len} bytes; Unix sockets allow at most {}",
                path.display(),
                SUN_PATH - 1
            ),
        ));
    }
    Ok(net::SocketAddrUnix::new(path)?)
}

fn new_socket() -> io::Result<OwnedFd> {
    let fd = net::socket_with(
        net::AddressFamily::UNIX,
        net::SocketType::SEQPACKET,
        net::SocketFlags::CLOEXEC,
        None,
    )?;
    Ok(crate::fdplace::place(fd))
}

/// Waits up to `timeout` (`None`: no wait) for `events` on `fd`: whether they came.
/// An interrupted wait counts as not yet.
fn poll_one(fd: BorrowedFd<'_>, events: PollFlags, timeout: Option<Duration>) -> io::Result<bool> {
    let ts = timeout.map(|t| Timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: t.subsec_nanos() as _,
    });
    let mut p = [PollFd::from_borrowed_fd(fd, events)];
    match poll(
        &mut p,
        Some(&ts.unwrap_or(Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        })),
    ) {
        Ok(n) => Ok(n > 0),
        Err(rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// A listening short-circuit socket.
pub struct Listener {
    fd: OwnedFd,
}

impl Listener {
    /// Binds `path` (a stale socket file there is replaced) with mode 0666: any local
    /// user may connect, and must then prove it knows the cluster secret.
    pub fn bind(path: &Path) -> io::Result<Listener> {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        let a = sockaddr(path)?;
        if let Ok(m) = std::fs::symlink_metadata(path) {
            if !m.file_type().is_socket() {
                return Err(err(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a socket", path.display()),
                ));
            }
            // A live listener there (another server given the same path) keeps it.
            if Seqpacket::connect(path, Duration::from_secs(1)).is_ok() {
                return Err(err(
                    io::ErrorKind::AddrInUse,
                    format!("{} is in use by a running server", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        let fd = new_socket()?;
        net::bind(&fd, &a)?;
        net::listen(&fd, 128)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
        Ok(Listener { fd })
    }

    /// Waits up to `wait` for a connection; `None` when none came.
    pub fn accept_timeout(&self, wait: Duration) -> io::Result<Option<Seqpacket>> {
        if !poll_one(self.fd.as_fd(), PollFlags::IN, Some(wait))? {
            return Ok(None);
        }
        match net::accept_with(&self.fd, net::SocketFlags::CLOEXEC) {
            Ok(fd) => Ok(Some(Seqpacket { fd })),
            Err(Errno::AGAIN | Errno::INTR | Errno::CONNABORTED) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

impl Seqpacket {
    pub fn connect(path: &Path, timeout: Duration) -> io::Result<Seqpacket> {
        let a = sockaddr(path)?;
        let fd = new_socket()?;
        net::connect(&fd, &a)?;
        let s = Seqpacket { fd };
        s.set_timeout(timeout)?;
        Ok(s)
    }

    /// Send and receive timeouts (a peer that stops answering fails the call); zero
    /// means none.
    pub fn set_timeout(&self, t: Duration) -> io::Result<()> {
        let t = (!t.is_zero()).then_some(t);
        for kind in [sockopt::Timeout::Recv, sockopt::Timeout::Send] {
            sockopt::set_socket_timeout(&self.fd, kind, t)?;
        }
        Ok(())
    }

    /// Whether the peer closed the connection or has something unasked to say (for a
    /// client: the server ended it), without waiting.
    pub fn ended(&self) -> bool {
        poll_one(self.fd.as_fd(), PollFlags::IN, None).unwrap_or(true)
    }

    /// Ends the connection both ways now (the peer's calls see its end), although the
    /// descriptor stays open until dropped.
    pub fn shutdown(&self) {
        // An error (already shut) changes nothing.
        let _ = net::shutdown(&self.fd, net::Shutdown::Both);
    }

    /// Sends one message with `fds` attached.
    pub fn send(&self, msg: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        assert!(msg.len() <= MAX_MESSAGE && fds.len() <= MAX_FDS);
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !fds.is_empty() {
            let pushed = control.push(SendAncillaryMessage::ScmRights(fds));
            assert!(pushed, "the control buffer holds MAX_FDS descriptors");
        }
        let iov = [io::IoSlice::new(msg)];
        loop {
            match net::sendmsg(&self.fd, &iov, &mut control, SendFlags::NOSIGNAL) {
                Ok(_) => return Ok(()),
                Err(Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Receives one message and the descriptors attached to it. A closed peer is
    /// `UnexpectedEof`; a message longer than [`MAX_MESSAGE`] is an error.
    pub fn recv(&self) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
        let mut buf = vec![0u8; MAX_MESSAGE + 1];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = loop {
            let mut iov = [io::IoSliceMut::new(&mut buf)];
            // Received descriptors are close-on-exec.
            match net::recvmsg(&self.fd, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
                Ok(got) => break got,
                Err(Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        };
        let mut fds = Vec::new();
        for m in control.drain() {
            if let RecvAncillaryMessage::ScmRights(rights) = m {
                fds.extend(rights.map(crate::fdplace::place));
            }
        }
        if got.flags.contains(ReturnFlags::CTRUNC) {
            return Err(err(
                io::ErrorKind::InvalidData,
                "too many descriptors attached to a message".into(),
            ));
        }
        let n = got.bytes;
        if n == 0 && fds.is_empty() {
            return Err(err(io::ErrorKind::UnexpectedEof, "peer closed".into()));
        }
        if n > MAX_MESSAGE || got.flags.contains(ReturnFlags::TRUNC) {
            return Err(err(
                io::ErrorKind::InvalidData,
                format!("message longer than {MAX_MESSAGE} bytes"),
            ));
        }
        buf.truncate(n);
        Ok((buf, fds))
    }
}

fn bad(msg: &str) -> io::Error {
    err(io::ErrorKind::InvalidData, msg.to_string())
}

/// The header and body of a received frame, checked to be exactly one frame without bulk
/// data.
fn frame(m: &[u8]) -> io::Result<(Header, &[u8])> {
    let header = Header::decode(m).map_err(|e| bad(&format!("short-circuit frame: {e}")))?;
    let end = HEADER_LEN + header.body_len as usize;
    if header.data_len != 0 || m.len() != end {
        return Err(bad(&format!(
            "short-circuit frame of {} bytes, its header says {end} and {} of data",
            m.len(),
            header.data_len
        )));
    }
    Ok((header, &m[HEADER_LEN..]))
}

/// Sends request `req` (numbered `id`) with `fds` attached.
pub fn send_request(
    s: &Seqpacket,
    id: u64,
    req: Request,
    fds: &[BorrowedFd<'_>],
) -> io::Result<()> {
    let env = Envelope {
        cred: Cred::root(),
        req,
    };
    let m = encode_request(id, &env, 0);
    if m.len() > MAX_MESSAGE {
        return Err(bad(&format!(
            "a {} of {} bytes does not fit one short-circuit message",
            env.req.opcode().name(),
            m.len()
        )));
    }
    s.send(&m, fds)
}

/// A request received: its number, its opcode and the request checked (or why it is
/// bad, which the server answers before it ends the connection).
pub struct Received {
    pub id: u64,
    pub opcode: Opcode,
    pub req: Result<Valid, WireError>,
    pub fds: Vec<OwnedFd>,
}

/// Receives one request. An error is a frame that does not decode (or the socket's):
/// the connection ends without an answer.
pub fn recv_request(s: &Seqpacket) -> io::Result<Received> {
    let (m, fds) = s.recv()?;
    let (header, body) = frame(&m)?;
    let env = decode_request(&header, body).map_err(|e| bad(&format!("short-circuit: {e}")))?;
    let opcode = env.req.opcode();
    Ok(Received {
        id: header.request_id,
        opcode,
        req: Valid::check(env, 0),
        fds,
    })
}

/// Sends the answer to request `id` (an `opcode`) with `fds` attached.
pub fn send_answer(
    s: &Seqpacket,
    id: u64,
    opcode: Opcode,
    result: &Result<Response, WireError>,
    fds: &[BorrowedFd<'_>],
) -> io::Result<()> {
    let mut m = encode_response(id, opcode, result, 0);
    if m.len() > MAX_MESSAGE {
        let e = WireError::new(
            ErrorCode::Internal,
            format!("an answer to {} too large for one message", opcode.name()),
        );
        m = encode_response(id, opcode, &Err(e), 0);
        return s.send(&m, &[]);
    }
    s.send(&m, fds)
}

/// Receives the answer to request `id` (an `opcode`): the server's result, which must be
/// a reply its row allows, and the descriptors that came with it.
pub fn recv_answer(
    s: &Seqpacket,
    id: u64,
    opcode: Opcode,
) -> io::Result<(Result<Response, WireError>, Vec<OwnedFd>)> {
    let (m, fds) = s.recv()?;
    let (header, body) = frame(&m)?;
    if header.request_id != id || header.opcode != opcode as u16 {
        return Err(bad(&format!(
            "short-circuit answer to request {} (opcode {}), expected {id} ({})",
            header.request_id,
            header.opcode,
            opcode.name()
        )));
    }
    let result = decode_response(&header, body).map_err(|e| bad(&format!("short-circuit: {e}")))?;
    if let Ok(r) = &result {
        if !opcode.answers(r.kind()) {
            return Err(bad(&format!(
                "short-circuit answer {:?} to {}",
                r.kind(),
                opcode.name()
            )));
        }
    }
    Ok((result, fds))
}

/// The client's side of the handshake: both prove they know `secret`.
pub fn client_handshake(s: &Seqpacket, secret: &Secret) -> io::Result<()> {
    let nonce_c = random_nonce();
    send_request(s, 1, Request::Hello { nonce: nonce_c }, &[])?;
    let (nonce_s, proof) = match recv_answer(s, 1, Opcode::Hello)?.0 {
        Ok(Response::Challenge { nonce, proof }) => (nonce, proof),
        Ok(_) => return Err(bad("short-circuit handshake: not a challenge")),
        Err(e) => return Err(refused(e)),
    };
    if !secret.verify_server_proof(&nonce_c, &nonce_s, &proof) {
        return Err(err(
            io::ErrorKind::PermissionDenied,
            "the short-circuit socket's server does not know the cluster secret".into(),
        ));
    }
    let proof = secret.client_proof(&nonce_s, &nonce_c);
    send_request(s, 2, Request::Auth { proof }, &[])?;
    match recv_answer(s, 2, Opcode::Auth)?.0 {
        Ok(_) => Ok(()),
        Err(e) => Err(refused(e)),
    }
}

fn refused(e: WireError) -> io::Error {
    err(
        io::ErrorKind::PermissionDenied,
        format!("short-circuit handshake refused: {e}"),
    )
}

/// The server's side of the handshake; an error means the peer is refused (and was told
/// why where it got that far).
pub fn server_handshake(s: &Seqpacket, secret: &Secret) -> io::Result<()> {
    let hello = recv_request(s)?;
    let Ok(Request::Hello { nonce: nonce_c }) = hello.req.as_ref().map(|v| v.req().clone()) else {
        let e = WireError::new(
            ErrorCode::UnexpectedMessage,
            "a short-circuit connection begins with Hello",
        );
        let _ = send_answer(s, hello.id, hello.opcode, &Err(e), &[]);
        return Err(bad("not a short-circuit hello"));
    };
    let nonce_s = random_nonce();
    let challenge = Response::Challenge {
        nonce: nonce_s,
        proof: secret.server_proof(&nonce_c, &nonce_s),
    };
    send_answer(s, hello.id, Opcode::Hello, &Ok(challenge), &[])?;
    let auth = recv_request(s)?;
    let proof = match auth.req.as_ref().map(|v| v.req().clone()) {
        Ok(Request::Auth { proof }) => proof,
        _ => {
            let e = WireError::new(ErrorCode::UnexpectedMessage, "Auth follows the challenge");
            let _ = send_answer(s, auth.id, auth.opcode, &Err(e), &[]);
            return Err(bad("not a short-circuit auth"));
        }
    };
    if !secret.verify_client_proof(&nonce_s, &nonce_c, &proof) {
        let e = WireError::new(ErrorCode::PermissionDenied, "wrong cluster secret");
        let _ = send_answer(s, auth.id, Opcode::Auth, &Err(e), &[]);
        return Err(err(
            io::ErrorKind::PermissionDenied,
            "wrong cluster secret".into(),
        ));
    }
    send_answer(s, auth.id, Opcode::Auth, &Ok(Response::Done), &[])
}

/// A pipe for short-circuit writes, `(read end, write end, capacity in bytes)`, both
/// ends close-on-exec and non-blocking, holding up to [`MAX_LOCAL_WRITE`] bytes where
/// the system allows (else less: writes larger than the capacity go over TCP).
pub fn write_pipe() -> io::Result<(OwnedFd, OwnedFd, usize)> {
    use rustix::pipe;
    let (r, w) = pipe::pipe_with(pipe::PipeFlags::CLOEXEC | pipe::PipeFlags::NONBLOCK)?;
    let (r, w) = (crate::fdplace::place(r), crate::fdplace::place(w));
    // The largest size the system grants unprivileged pipes (`/proc/sys/fs/pipe-max-size`,
    // 1 MiB by default) or less; a refusal of every size keeps the default (64 KiB).
    for size in [MAX_LOCAL_WRITE, MAX_LOCAL_WRITE / 2, MAX_LOCAL_WRITE / 4] {
        if pipe::fcntl_setpipe_size(&w, size).is_ok() {
            break;
        }
    }
    let cap = pipe::fcntl_getpipe_size(&w)?;
    Ok((r, w, cap))
}

/// Moves `len` bytes through a non-blocking pipe end `fd`: `step(done)` makes one
/// transfer system call for the bytes from `done` on and returns what it returned; when
/// the pipe is full (or empty) it waits for `events`, at most `timeout` each time. On an
/// error, also returns how many bytes had moved.
fn pump(
    fd: BorrowedFd<'_>,
    events: PollFlags,
    len: usize,
    timeout: Duration,
    mut step: impl FnMut(usize) -> rustix::io::Result<usize>,
) -> Result<(), (usize, io::Error)> {
    let mut done = 0;
    while done < len {
        match step(done) {
            Ok(0) => {
                let e = err(
                    io::ErrorKind::UnexpectedEof,
                    "short-circuit pipe closed".into(),
                );
                return Err((done, e));
            }
            Ok(n) => done += n,
            Err(Errno::AGAIN) => match poll_one(fd, events, Some(timeout)) {
                Ok(true) => {}
                Ok(false) => {
                    let e = err(io::ErrorKind::TimedOut, "short-circuit pipe stalled".into());
                    return Err((done, e));
                }
                Err(e) => return Err((done, e)),
            },
            Err(Errno::INTR) => {}
            Err(e) => return Err((done, e.into())),
        }
    }
    Ok(())
}

/// Puts all of `data` into the pipe by reference (`vmsplice`: the pipe holds the
/// caller's pages, not a copy). The caller must not change `data` until the reader has
/// taken it out (the server's answer says so). A client puts a write's bytes in before
/// it sends the write, so that the server finds them all there and moves them in one
/// go (no ping-pong of wake-ups between the two); `data` must then fit in the pipe.
pub fn vmsplice_all(pipe_w: &OwnedFd, data: &[u8], timeout: Duration) -> io::Result<()> {
    use rustix::pipe::{vmsplice, IoSliceRaw, SpliceFlags};
    pump(
        pipe_w.as_fd(),
        PollFlags::OUT,
        data.len(),
        timeout,
        |done| {
            let iov = [IoSliceRaw::from_slice(&data[done..])];
            // SAFETY: the slice lives across the call, and the caller keeps `data` unchanged
            // until the reader has taken it out of the pipe (see above); without GIFT the
            // pages stay the caller's.
            unsafe { vmsplice(pipe_w, &iov, SpliceFlags::NONBLOCK) }
        },
    )
    .map_err(|(_, e)| e)
}

/// Moves `len` bytes from the pipe into `file` at `offset` (`splice`: the kernel copies
/// them into the file's pages, never through user memory). On an error, returns how
/// many bytes it took out of the pipe before it.
pub fn splice_into(
    pipe_r: &OwnedFd,
    file: BorrowedFd<'_>,
    offset: u64,
    len: usize,
    timeout: Duration,
) -> Result<(), (usize, io::Error)> {
    use rustix::pipe::{splice, SpliceFlags};
    pump(pipe_r.as_fd(), PollFlags::IN, len, timeout, |done| {
        let mut off = offset + done as u64;
        let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
        splice(pipe_r, None, file, Some(&mut off), len - done, flags)
    })
}

/// Fills `buf` from the (non-blocking) pipe, waiting at most `timeout` for each part.
pub fn read_pipe(pipe_r: &OwnedFd, buf: &mut [u8], timeout: Duration) -> io::Result<()> {
    let len = buf.len();
    pump(pipe_r.as_fd(), PollFlags::IN, len, timeout, |done| {
        rustix::io::read(pipe_r, &mut buf[done..])
    })
    .map_err(|(_, e)| e)
}

/// Takes `len` bytes out of the pipe and drops them (after a write that failed part-way,
/// so that the next write starts at its own first byte).
pub fn drain(pipe_r: &OwnedFd, mut len: usize, timeout: Duration) -> io::Result<()> {
    let mut buf = vec![0u8; len.min(64 << 10)];
    while len > 0 {
        let n = len.min(buf.len());
        read_pipe(pipe_r, &mut buf[..n], timeout)?;
        len -= n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::FileExt;
    use stripefs_wire::{InodeId, HAS_DATA};

    fn pair(dir: &Path) -> (Listener, std::path::PathBuf) {
        let path = dir.join("s.sock");
        (Listener::bind(&path).unwrap(), path)
    }

    #[test]
    fn descriptors_cross_the_socket_after_the_handshake() {
        let dir = tempfile::tempdir().unwrap();
        let (l, path) = pair(dir.path());
        let secret = Secret::generate();
        let file = dir.path().join("obj");
        std::fs::File::create(&file)
            .unwrap()
            .write_all(b"stored bytes")
            .unwrap();
        let s2 = secret.clone();
        let f2 = file.clone();
        let server = std::thread::spawn(move || {
            let c = l.accept_timeout(Duration::from_secs(5)).unwrap().unwrap();
            server_handshake(&c, &s2).unwrap();
            let r = recv_request(&c).unwrap();
            assert_eq!(
                r.req.unwrap().req(),
                &Request::LocalOpen { fid: InodeId(42) }
            );
            let f = std::fs::File::open(&f2).unwrap();
            let answer = Ok(Response::LocalFiles {
                flags: vec![HAS_DATA, 0],
            });
            send_answer(&c, r.id, r.opcode, &answer, &[f.as_fd()]).unwrap();
        });
        let c = Seqpacket::connect(&path, Duration::from_secs(5)).unwrap();
        client_handshake(&c, &secret).unwrap();
        let open = Request::LocalOpen { fid: InodeId(42) };
        send_request(&c, 7, open, &[]).unwrap();
        let (answer, fds) = recv_answer(&c, 7, Opcode::LocalOpen).unwrap();
        server.join().unwrap();
        assert_eq!(
            answer.unwrap(),
            Response::LocalFiles {
                flags: vec![HAS_DATA, 0]
            }
        );
        assert_eq!(fds.len(), 1);
        let f = std::fs::File::from(fds.into_iter().next().unwrap());
        let mut buf = [0u8; 5];
        f.read_at(&mut buf, 7).unwrap();
        assert_eq!(&buf, b"bytes");
    }

    #[test]
    fn a_wrong_secret_is_refused_on_both_sides() {
        let dir = tempfile::tempdir().unwrap();
        let (l, path) = pair(dir.path());
        let server = std::thread::spawn(move || {
            let c = l.accept_timeout(Duration::from_secs(5)).unwrap().unwrap();
            server_handshake(&c, &Secret::generate())
        });
        let c = Seqpacket::connect(&path, Duration::from_secs(5)).unwrap();
        let e = client_handshake(&c, &Secret::generate()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        drop(c);
        assert!(server.join().unwrap().is_err());
    }

    #[test]
    fn a_live_socket_is_not_taken_over_and_a_stale_one_is() {
        let dir = tempfile::tempdir().unwrap();
        let (l, path) = pair(dir.path());
        let e = Listener::bind(&path)
            .err()
            .expect("a second bind of a live socket");
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
        drop(l);
        Listener::bind(&path).expect("the stale socket file is replaced");
    }

    /// Garbage, a frame of the wrong request, an answer of a kind its row does not allow
    /// and a request that fails its row's check are errors, never panics; the checked
    /// request's reason is kept for the answer.
    #[test]
    fn malformed_messages_are_errors_not_panics() {
        let (a, b) = socketpair();
        a.send(b"SFSC\x01\x00 an old client's hello", &[]).unwrap();
        assert!(recv_request(&b).is_err());
        send_request(&a, 3, Request::LocalPipe {}, &[]).unwrap();
        assert!(
            recv_answer(&b, 3, Opcode::LocalPipe).is_err(),
            "a request is no answer"
        );
        send_answer(&a, 4, Opcode::LocalOpen, &Ok(Response::Done), &[]).unwrap();
        assert!(
            recv_answer(&b, 4, Opcode::LocalOpen).is_err(),
            "Done does not answer LocalOpen"
        );
        send_answer(&a, 5, Opcode::LocalPipe, &Ok(Response::Done), &[]).unwrap();
        assert!(
            recv_answer(&b, 6, Opcode::LocalPipe).is_err(),
            "another request's answer"
        );
        let unaligned = Request::LocalWrite {
            fid: InodeId(1),
            unit: 1 << 20,
            offset: 100,
            len: 4096,
            crcs: vec![0],
        };
        send_request(&a, 8, unaligned, &[]).unwrap();
        let r = recv_request(&b).unwrap();
        assert_eq!(r.opcode, Opcode::LocalWrite);
        let e = r.req.unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{e}");
        let crcs = Request::LocalWrite {
            fid: InodeId(1),
            unit: 1 << 20,
            offset: 0,
            len: 8192,
            crcs: vec![0],
        };
        send_request(&a, 9, crcs, &[]).unwrap();
        assert!(
            recv_request(&b).unwrap().req.is_err(),
            "one CRC for two blocks"
        );
        let long = std::path::PathBuf::from(format!("/tmp/{}", "x".repeat(200)));
        assert!(Listener::bind(&long).is_err());
    }

    fn socketpair() -> (Seqpacket, Seqpacket) {
        let (a, b) = net::socketpair(
            net::AddressFamily::UNIX,
            net::SocketType::SEQPACKET,
            net::SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        (Seqpacket { fd: a }, Seqpacket { fd: b })
    }

    /// A connection has ended once the peer closed it (or sent something unasked), and
    /// not before; asking does not wait.
    #[test]
    fn a_connection_knows_when_its_peer_ended_it() {
        let (a, b) = socketpair();
        assert!(!a.ended());
        assert!(!b.ended());
        b.send(b"unasked", &[]).unwrap();
        assert!(a.ended(), "something to read: the server spoke unasked");
        let (c, d) = socketpair();
        drop(d);
        assert!(c.ended(), "the peer closed");
    }

    #[test]
    fn a_pipe_carries_a_write_and_drains() {
        let (r, w, cap) = write_pipe().unwrap();
        assert!(cap >= 64 << 10);
        let data: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
        vmsplice_all(&w, &data, Duration::from_secs(5)).unwrap();
        let mut got = vec![0u8; 30_000];
        read_pipe(&r, &mut got, Duration::from_secs(5)).unwrap();
        assert!(got[..] == data[..30_000]);
        drain(&r, 10_000, Duration::from_secs(5)).unwrap();
        let e = read_pipe(&r, &mut got[..1], Duration::from_millis(50)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }
}
