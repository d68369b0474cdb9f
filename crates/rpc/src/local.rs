//! The short-circuit socket (issue 14, docs/protocol.md "Short-circuit socket"): a data
//! server hands a client on its own host read-only descriptors of an object's files over
//! a Unix socket (`SCM_RIGHTS`), so that the client reads them with `pread` and verifies
//! the stored checksums itself, without the server's CPU or memory in the data path.
//!
//! The socket is `SOCK_SEQPACKET`: every message keeps its boundaries and carries its
//! descriptors with it. Messages (all integers little-endian):
//!
//! | from | message | bytes |
//! |---|---|---|
//! | client | hello | `SFSC`, version u16, client nonce [32] |
//! | server | challenge | server nonce [32], server proof [32] |
//! | client | auth | client proof [32] |
//! | server | verdict | status u8 (0 ok), then a UTF-8 reason |
//! | client | open | op u8 = 1, file id u64 |
//! | server | objects | status u8, then for status 0: target count u16 and one flags byte per target (bit 0: data file attached, bit 1: sidecar attached), the descriptors attached in that order; otherwise a UTF-8 reason |
//!
//! The proofs are those of the TCP handshake (`auth.rs`): both sides prove they know the
//! cluster secret. Status 1 (`REFUSED`) means the server will not hand out descriptors at
//! all (its disks are throttled, or its store has no files): the client stops asking it.
//! Status 2 (`FAILED`) is an error about this request only.

use crate::auth::{random_nonce, Secret};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::time::Duration;

pub const MAGIC: [u8; 4] = *b"SFSC";
pub const VERSION: u16 = 1;
/// The longest message either side sends or accepts.
pub const MAX_MESSAGE: usize = 4096;
/// Most descriptors one answer carries (two per target).
pub const MAX_FDS: usize = 2 * MAX_TARGETS;
/// Most targets a data server may have for short-circuit reads.
pub const MAX_TARGETS: usize = 64;
pub const OP_OPEN: u8 = 1;
pub const OK: u8 = 0;
pub const REFUSED: u8 = 1;
pub const FAILED: u8 = 2;
/// Flags of one target in an `objects` answer.
pub const HAS_DATA: u8 = 1;
pub const HAS_SIDECAR: u8 = 2;

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
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
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
                        fds.push(OwnedFd::from_raw_fd(fd));
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

fn take<const N: usize>(b: &[u8], at: usize) -> io::Result<[u8; N]> {
    b.get(at..at + N)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| bad("short short-circuit message"))
}

/// The client's side of the handshake: both prove they know `secret`.
pub fn client_handshake(s: &Seqpacket, secret: &Secret) -> io::Result<()> {
    let nonce_c = random_nonce();
    let mut hello = Vec::with_capacity(38);
    hello.extend_from_slice(&MAGIC);
    hello.extend_from_slice(&VERSION.to_le_bytes());
    hello.extend_from_slice(&nonce_c);
    s.send(&hello, &[])?;
    let (m, _) = s.recv()?;
    let nonce_s: [u8; 32] = take(&m, 0)?;
    let proof: [u8; 32] = take(&m, 32)?;
    if !secret.verify_server_proof(&nonce_c, &nonce_s, &proof) {
        return Err(err(
            io::ErrorKind::PermissionDenied,
            "the short-circuit socket's server does not know the cluster secret".into(),
        ));
    }
    s.send(&secret.client_proof(&nonce_s, &nonce_c), &[])?;
    let (m, _) = s.recv()?;
    match m.first() {
        Some(&OK) => Ok(()),
        _ => Err(err(
            io::ErrorKind::PermissionDenied,
            format!(
                "short-circuit handshake refused: {}",
                String::from_utf8_lossy(m.get(1..).unwrap_or(&[]))
            ),
        )),
    }
}

/// The server's side of the handshake; an error means the peer is refused (and was told
/// why where it got that far).
pub fn server_handshake(s: &Seqpacket, secret: &Secret) -> io::Result<()> {
    let (m, _) = s.recv()?;
    if m.len() != 38 || m[..4] != MAGIC {
        return Err(bad("not a short-circuit hello"));
    }
    let version = u16::from_le_bytes([m[4], m[5]]);
    if version != VERSION {
        let why = format!("short-circuit version {version} (this server speaks {VERSION})");
        let _ = s.send(&verdict(FAILED, &why), &[]);
        return Err(bad(&why));
    }
    let nonce_c: [u8; 32] = take(&m, 6)?;
    let nonce_s = random_nonce();
    let mut ch = Vec::with_capacity(64);
    ch.extend_from_slice(&nonce_s);
    ch.extend_from_slice(&secret.server_proof(&nonce_c, &nonce_s));
    s.send(&ch, &[])?;
    let (m, _) = s.recv()?;
    let proof: [u8; 32] = take(&m, 0)?;
    if m.len() != 32 || !secret.verify_client_proof(&nonce_s, &nonce_c, &proof) {
        let _ = s.send(&verdict(FAILED, "wrong cluster secret"), &[]);
        return Err(err(
            io::ErrorKind::PermissionDenied,
            "wrong cluster secret".into(),
        ));
    }
    s.send(&verdict(OK, ""), &[])
}

/// A status byte and a reason.
pub fn verdict(status: u8, why: &str) -> Vec<u8> {
    let mut v = vec![status];
    v.extend_from_slice(&why.as_bytes()[..why.len().min(MAX_MESSAGE - 1)]);
    v
}

/// An `open` request for file id `fid`.
pub fn open_request(fid: u64) -> Vec<u8> {
    let mut v = vec![OP_OPEN];
    v.extend_from_slice(&fid.to_le_bytes());
    v
}

/// The file id of an `open` request.
pub fn parse_open(m: &[u8]) -> io::Result<u64> {
    if m.len() != 9 || m[0] != OP_OPEN {
        return Err(bad("not a short-circuit open request"));
    }
    Ok(u64::from_le_bytes(take(m, 1)?))
}

/// An `objects` answer: flags per target (descriptors attached separately).
pub fn objects_answer(flags: &[u8]) -> Vec<u8> {
    assert!(flags.len() <= MAX_TARGETS);
    let mut v = vec![OK];
    v.extend_from_slice(&(flags.len() as u16).to_le_bytes());
    v.extend_from_slice(flags);
    v
}

/// What a client got for one object: per target, its data file and sidecar, if any.
pub type ObjectFiles = Vec<(Option<std::fs::File>, Option<std::fs::File>)>;

/// What an `open` came to.
pub enum Opened {
    Files(ObjectFiles),
    /// The server hands out no descriptors; do not ask it again.
    Refused(String),
    Failed(String),
}

/// Reads an `objects` answer and pairs its descriptors with the targets.
pub fn parse_objects(m: &[u8], fds: Vec<OwnedFd>) -> io::Result<Opened> {
    let status = *m.first().ok_or_else(|| bad("empty short-circuit answer"))?;
    let why = || String::from_utf8_lossy(&m[1..]).into_owned();
    match status {
        OK => {}
        REFUSED => return Ok(Opened::Refused(why())),
        FAILED => return Ok(Opened::Failed(why())),
        s => return Err(bad(&format!("unknown short-circuit status {s}"))),
    }
    let n = u16::from_le_bytes(take(m, 1)?) as usize;
    if n == 0 || n > MAX_TARGETS || m.len() != 3 + n {
        return Err(bad("malformed short-circuit objects answer"));
    }
    let want: usize = m[3..]
        .iter()
        .map(|f| (f & HAS_DATA != 0) as usize + (f & HAS_SIDECAR != 0) as usize)
        .sum();
    if want != fds.len() {
        return Err(bad(&format!(
            "short-circuit answer announces {want} descriptors and carries {}",
            fds.len()
        )));
    }
    let mut fds = fds.into_iter().map(std::fs::File::from);
    let mut out = Vec::with_capacity(n);
    for &f in &m[3..] {
        let data = (f & HAS_DATA != 0).then(|| fds.next()).flatten();
        let crc = (f & HAS_SIDECAR != 0).then(|| fds.next()).flatten();
        out.push((data, crc));
    }
    Ok(Opened::Files(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

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
            let (m, _) = c.recv().unwrap();
            assert_eq!(parse_open(&m).unwrap(), 42);
            let f = std::fs::File::open(&f2).unwrap();
            c.send(&objects_answer(&[HAS_DATA, 0]), &[f.as_raw_fd()])
                .unwrap();
        });
        let c = Seqpacket::connect(&path, Duration::from_secs(5)).unwrap();
        client_handshake(&c, &secret).unwrap();
        c.send(&open_request(42), &[]).unwrap();
        let (m, fds) = c.recv().unwrap();
        let Opened::Files(files) = parse_objects(&m, fds).unwrap() else {
            panic!("not files");
        };
        server.join().unwrap();
        assert_eq!(files.len(), 2);
        let mut buf = [0u8; 5];
        files[0].0.as_ref().unwrap().read_at(&mut buf, 7).unwrap();
        assert_eq!(&buf, b"bytes");
        assert!(files[0].1.is_none() && files[1].0.is_none());
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

    #[test]
    fn malformed_answers_are_errors_not_panics() {
        assert!(parse_objects(&[], vec![]).is_err());
        assert!(parse_objects(&[9], vec![]).is_err());
        assert!(parse_objects(&[OK, 1], vec![]).is_err());
        assert!(parse_objects(&[OK, 2, 0, HAS_DATA, 0], vec![]).is_err());
        assert!(parse_objects(&[OK, 0, 0], vec![]).is_err());
        assert!(parse_open(&[OP_OPEN, 1, 2]).is_err());
        assert!(parse_open(&[7; 9]).is_err());
        let long = std::path::PathBuf::from(format!("/tmp/{}", "x".repeat(200)));
        assert!(Listener::bind(&long).is_err());
    }
}
