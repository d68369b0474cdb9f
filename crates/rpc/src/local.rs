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
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
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

fn sockaddr(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data; all zeros is a valid value.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= a.sun_path.len() {
        return Err(err(
            io::ErrorKind::InvalidInput,
            format!(
                "socket path {} is {} bytes; Unix sockets allow at most {}",
                path.display(),
                bytes.len(),
                a.sun_path.len() - 1
            ),
        ));
    }
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in a.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((a, len as libc::socklen_t))
}

fn new_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket call; the descriptor is owned at once.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(crate::fdplace::place(unsafe { OwnedFd::from_raw_fd(fd) }))
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
        let (a, len) = sockaddr(path)?;
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
        // SAFETY: a valid address of `len` bytes on the stack.
        let rc =
            unsafe { libc::bind(fd.as_raw_fd(), &a as *const _ as *const libc::sockaddr, len) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: listen on our bound socket.
        if unsafe { libc::listen(fd.as_raw_fd(), 128) } != 0 {
            return Err(io::Error::last_os_error());
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
        Ok(Listener { fd })
    }

    /// Waits up to `wait` for a connection; `None` when none came.
    pub fn accept_timeout(&self, wait: Duration) -> io::Result<Option<Seqpacket>> {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = wait.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(None)
            } else {
                Err(e)
            };
        }
        if n == 0 {
            return Ok(None);
        }
        // SAFETY: accept on our listening socket; the new descriptor is owned at once.
        let fd = unsafe {
            libc::accept4(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EINTR | libc::ECONNABORTED) => Ok(None),
                _ => Err(e),
            };
        }
        // SAFETY: a fresh descriptor nobody else owns.
        Ok(Some(Seqpacket {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        }))
    }
}

impl Seqpacket {
    pub fn connect(path: &Path, timeout: Duration) -> io::Result<Seqpacket> {
        let (a, len) = sockaddr(path)?;
        let fd = new_socket()?;
        // SAFETY: a valid address of `len` bytes on the stack.
        let rc =
            unsafe { libc::connect(fd.as_raw_fd(), &a as *const _ as *const libc::sockaddr, len) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let s = Seqpacket { fd };
        s.set_timeout(timeout)?;
        Ok(s)
    }

    /// Send and receive timeouts (a peer that stops answering fails the call).
    pub fn set_timeout(&self, t: Duration) -> io::Result<()> {
        let tv = libc::timeval {
            tv_sec: t.as_secs() as libc::time_t,
            tv_usec: t.subsec_micros() as libc::suseconds_t,
        };
        for opt in [libc::SO_RCVTIMEO, libc::SO_SNDTIMEO] {
            // SAFETY: setsockopt with a timeval of the right size.
            let rc = unsafe {
                libc::setsockopt(
                    self.fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    &tv as *const _ as *const libc::c_void,
                    std::mem::size_of::<libc::timeval>() as libc::socklen_t,
                )
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// Ends the connection both ways now (the peer's calls see its end), although the
    /// descriptor stays open until dropped.
    /// Whether the peer closed the connection or has something unasked to say (for a
    /// client: the server ended it), without waiting.
    pub fn ended(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd on a descriptor this socket owns; no waiting.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n != 0 && (n < 0 || p.revents != 0)
    }

    pub fn shutdown(&self) {
        // SAFETY: shutdown of a socket we own; an error (already shut) changes nothing.
        unsafe { libc::shutdown(self.fd.as_raw_fd(), libc::SHUT_RDWR) };
    }

    /// Sends one message with `fds` attached.
    pub fn send(&self, msg: &[u8], fds: &[RawFd]) -> io::Result<()> {
        assert!(msg.len() <= MAX_MESSAGE && fds.len() <= MAX_FDS);
        let mut iov = libc::iovec {
            iov_base: msg.as_ptr() as *mut libc::c_void,
            iov_len: msg.len(),
        };
        let space = cmsg_space(fds.len());
        let mut control = vec![0u8; space];
        // SAFETY: msghdr is plain data; the pointers set below stay valid for the call.
        let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        if !fds.is_empty() {
            hdr.msg_control = control.as_mut_ptr() as *mut libc::c_void;
            hdr.msg_controllen = space as _;
            // SAFETY: the control buffer is CMSG_SPACE(n fds) bytes, so the first header
            // and its data fit.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&hdr);
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of_val(fds) as u32) as _;
                std::ptr::copy_nonoverlapping(
                    fds.as_ptr() as *const u8,
                    libc::CMSG_DATA(c),
                    std::mem::size_of_val(fds),
                );
            }
        }
        loop {
            // SAFETY: a valid msghdr describing live buffers.
            let n = unsafe { libc::sendmsg(self.fd.as_raw_fd(), &hdr, libc::MSG_NOSIGNAL) };
            if n >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Receives one message and the descriptors attached to it. A closed peer is
    /// `UnexpectedEof`; a message longer than [`MAX_MESSAGE`] is an error.
    pub fn recv(&self) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
        let mut buf = vec![0u8; MAX_MESSAGE + 1];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr() as *mut libc::c_void,
            iov_len: buf.len(),
        };
        let space = cmsg_space(MAX_FDS);
        let mut control = vec![0u8; space];
        // SAFETY: as in `send`.
        let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        hdr.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        hdr.msg_controllen = space as _;
        let n = loop {
            // SAFETY: a valid msghdr describing live buffers; received descriptors are
            // close-on-exec.
            let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut hdr, libc::MSG_CMSG_CLOEXEC) };
            if n >= 0 {
                break n as usize;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        };
        let mut fds = Vec::new();
        // SAFETY: walking the control messages the kernel wrote into `control`; each
        // SCM_RIGHTS payload is an array of descriptors now owned by this process.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&hdr);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(c);
                    let bytes = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                    for i in 0..bytes / std::mem::size_of::<RawFd>() {
                        let mut fd: RawFd = 0;
                        std::ptr::copy_nonoverlapping(
                            data.add(i * std::mem::size_of::<RawFd>()),
                            &mut fd as *mut RawFd as *mut u8,
                            std::mem::size_of::<RawFd>(),
                        );
                        fds.push(crate::fdplace::place(OwnedFd::from_raw_fd(fd)));
                    }
                }
                c = libc::CMSG_NXTHDR(&hdr, c);
            }
        }
        if hdr.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(err(
                io::ErrorKind::InvalidData,
                "too many descriptors attached to a message".into(),
            ));
        }
        if n == 0 && fds.is_empty() {
            return Err(err(io::ErrorKind::UnexpectedEof, "peer closed".into()));
        }
        if n > MAX_MESSAGE || hdr.msg_flags & libc::MSG_TRUNC != 0 {
            return Err(err(
                io::ErrorKind::InvalidData,
                format!("message longer than {MAX_MESSAGE} bytes"),
            ));
        }
        buf.truncate(n);
        Ok((buf, fds))
    }
}

fn cmsg_space(fds: usize) -> usize {
    // SAFETY: CMSG_SPACE is arithmetic.
    unsafe { libc::CMSG_SPACE((fds.max(1) * std::mem::size_of::<RawFd>()) as u32) as usize }
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
pub fn send_request(s: &Seqpacket, id: u64, req: Request, fds: &[RawFd]) -> io::Result<()> {
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
    fds: &[RawFd],
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
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 fills two descriptors on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors are new and ours alone.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let (r, w) = (crate::fdplace::place(r), crate::fdplace::place(w));
    // The largest size the system grants unprivileged pipes (`/proc/sys/fs/pipe-max-size`,
    // 1 MiB by default) or less; a refusal of every size keeps the default (64 KiB).
    for size in [MAX_LOCAL_WRITE, MAX_LOCAL_WRITE / 2, MAX_LOCAL_WRITE / 4] {
        // SAFETY: fcntl on our own descriptor.
        if unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, size as libc::c_int) } > 0 {
            break;
        }
    }
    // SAFETY: fcntl on our own descriptor.
    let cap = unsafe { libc::fcntl(w.as_raw_fd(), libc::F_GETPIPE_SZ) };
    if cap <= 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((r, w, cap as usize))
}

/// Waits until `fd` is ready for `events`, at most `timeout`.
fn wait_ready(fd: RawFd, events: libc::c_short, timeout: Duration) -> io::Result<()> {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    loop {
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        match r {
            0 => {
                return Err(err(
                    io::ErrorKind::TimedOut,
                    "short-circuit pipe stalled".into(),
                ))
            }
            r if r > 0 => return Ok(()),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

/// Moves `len` bytes through a non-blocking pipe end `fd`: `step(done)` makes one
/// transfer system call for the bytes from `done` on and returns what it returned; when
/// the pipe is full (or empty) it waits for `events`, at most `timeout` each time. On an
/// error, also returns how many bytes had moved.
fn pump(
    fd: RawFd,
    events: libc::c_short,
    len: usize,
    timeout: Duration,
    mut step: impl FnMut(usize) -> isize,
) -> Result<(), (usize, io::Error)> {
    let mut done = 0;
    while done < len {
        let n = step(done);
        if n > 0 {
            done += n as usize;
            continue;
        }
        if n == 0 {
            let e = err(
                io::ErrorKind::UnexpectedEof,
                "short-circuit pipe closed".into(),
            );
            return Err((done, e));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => wait_ready(fd, events, timeout).map_err(|e| (done, e))?,
            io::ErrorKind::Interrupted => {}
            _ => return Err((done, e)),
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
    let fd = pipe_w.as_raw_fd();
    pump(fd, libc::POLLOUT, data.len(), timeout, |done| {
        let iov = libc::iovec {
            iov_base: data[done..].as_ptr() as *mut libc::c_void,
            iov_len: data.len() - done,
        };
        // SAFETY: one iovec over live memory that outlives the transfer (see above).
        unsafe { libc::vmsplice(fd, &iov, 1, libc::SPLICE_F_NONBLOCK) }
    })
    .map_err(|(_, e)| e)
}

/// Moves `len` bytes from the pipe into `file` at `offset` (`splice`: the kernel copies
/// them into the file's pages, never through user memory). On an error, returns how
/// many bytes it took out of the pipe before it.
pub fn splice_into(
    pipe_r: &OwnedFd,
    file: RawFd,
    offset: u64,
    len: usize,
    timeout: Duration,
) -> Result<(), (usize, io::Error)> {
    let fd = pipe_r.as_raw_fd();
    pump(fd, libc::POLLIN, len, timeout, |done| {
        let mut off = (offset + done as u64) as libc::loff_t;
        let flags = libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK;
        // SAFETY: valid descriptors and offset pointer.
        unsafe { libc::splice(fd, std::ptr::null_mut(), file, &mut off, len - done, flags) }
    })
}

/// Fills `buf` from the (non-blocking) pipe, waiting at most `timeout` for each part.
pub fn read_pipe(pipe_r: &OwnedFd, buf: &mut [u8], timeout: Duration) -> io::Result<()> {
    let (fd, len) = (pipe_r.as_raw_fd(), buf.len());
    pump(fd, libc::POLLIN, len, timeout, |done| {
        // SAFETY: reading into our own buffer of `len - done` bytes.
        unsafe { libc::read(fd, buf[done..].as_mut_ptr().cast(), len - done) }
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
            send_answer(&c, r.id, r.opcode, &answer, &[f.as_raw_fd()]).unwrap();
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
        let mut fds = [0 as RawFd; 2];
        // SAFETY: socketpair fills two descriptors on success.
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        assert_eq!(r, 0);
        // SAFETY: both descriptors are new and ours alone.
        unsafe {
            (
                Seqpacket {
                    fd: OwnedFd::from_raw_fd(fds[0]),
                },
                Seqpacket {
                    fd: OwnedFd::from_raw_fd(fds[1]),
                },
            )
        }
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
