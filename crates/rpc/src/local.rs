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
//! | client | pipe | op u8 = 2, with the read end of a pipe attached (once per connection, before its first write) |
//! | server | verdict | status u8, then a UTF-8 reason |
//! | client | write | op u8 = 3, file id u64, unit u32, local offset u64, length u32, CRC count u16, one CRC32C u32 per 4 KiB block; sent once the client has put the `length` bytes into the pipe (`vmsplice`) |
//! | server | written | status u8, then for status 0 the server's boot id u64; otherwise a UTF-8 reason |
//! | client | write list | op u8 = 4, file id u64, unit u32, extent count u16, per extent its local offset u64 and length u32, CRC count u16, one CRC32C u32 per block-bounded piece of each extent in order; sent once the client has put all the extents' bytes into the pipe, in order |
//! | server | written | as for write |
//! | client | direct | op u8 = 5, file id u64, unit u32, local offset u64, length u32 (whole blocks) |
//! | server | grant | status u8, then for status 0: piece count u16, per piece a descriptor index u16, object offset u64 and length u32, the range's pieces in order, with the pieces' write descriptors attached; otherwise a UTF-8 reason |
//! | client | direct done | op u8 = 6, written u8 (1 every piece written whole, 0 not), CRC count u16, one CRC32C u32 per block of the range (none for 0) |
//! | server | written | as for write |
//!
//! A direct write is a client writing a range of hole blocks into the object files
//! itself, with `O_DIRECT` from its own buffer (no copy by either side, no page cache):
//! the server locks the range, checks that its blocks are holes and hands out write
//! descriptors of the files; the client writes, then sends the CRCs it computed, which
//! the server stores as the blocks' entries before it unlocks. Until then the blocks are
//! holes, which read as zeros whatever the data file holds.
//!
//! A write is of whole blocks (offset and length multiples of 4 KiB, at most
//! [`MAX_LOCAL_WRITE`] bytes). The server moves the bytes from the pipe into the object's
//! files with `splice` (no copy through its memory), checks them against the CRCs, and
//! answers; whatever happens it first takes exactly `length` bytes out of the pipe, so the
//! next write starts clean.
//!
//! A write list carries a client's gathered writes to one server (any offsets and
//! lengths, at most [`MAX_LOCAL_WRITE`] bytes in all, its message at most
//! [`MAX_MESSAGE`] bytes): the server reads the bytes out of the pipe and writes them as
//! it writes a `WriteList` that came over TCP (every CRC checked before anything is
//! written), so only the TCP stack and the client's copy into a socket are saved. It
//! too takes exactly the list's bytes out of the pipe whatever happens.
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
pub const OP_PIPE: u8 = 2;
pub const OP_WRITE: u8 = 3;
pub const OP_WRITE_LIST: u8 = 4;
/// A direct write: the client asks for the places of a range of whole blocks, writes
/// them itself with `O_DIRECT`, then says it is done.
pub const OP_DIRECT: u8 = 5;
pub const OP_DIRECT_DONE: u8 = 6;
/// Most pieces one direct-write grant names (its answer fits one message).
pub const MAX_GRANT_PIECES: usize = 256;
/// Most bytes one short-circuit write carries (its CRCs fit in one message).
pub const MAX_LOCAL_WRITE: usize = 2 << 20;
const BLOCK: usize = 4096;
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

/// A `pipe` message (the pipe's read end goes with it as a descriptor).
pub fn pipe_request() -> Vec<u8> {
    vec![OP_PIPE]
}

/// One short-circuit write: whole blocks of file `fid` at local `offset`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalWrite {
    pub fid: u64,
    pub unit: u32,
    pub offset: u64,
    pub len: u32,
    pub crcs: Vec<u32>,
}

/// A `write` message.
pub fn write_request(w: &LocalWrite) -> Vec<u8> {
    let mut v = Vec::with_capacity(27 + 4 * w.crcs.len());
    v.push(OP_WRITE);
    v.extend_from_slice(&w.fid.to_le_bytes());
    v.extend_from_slice(&w.unit.to_le_bytes());
    v.extend_from_slice(&w.offset.to_le_bytes());
    v.extend_from_slice(&w.len.to_le_bytes());
    v.extend_from_slice(&(w.crcs.len() as u16).to_le_bytes());
    for c in &w.crcs {
        v.extend_from_slice(&c.to_le_bytes());
    }
    assert!(v.len() <= MAX_MESSAGE);
    v
}

/// Reads a `write` message, checking its shape: whole blocks, one CRC per block, at
/// most [`MAX_LOCAL_WRITE`] bytes, an end that fits.
pub fn parse_write(m: &[u8]) -> io::Result<LocalWrite> {
    if m.first() != Some(&OP_WRITE) || m.len() < 27 {
        return Err(bad("not a short-circuit write"));
    }
    let fid = u64::from_le_bytes(take(m, 1)?);
    let unit = u32::from_le_bytes(take(m, 9)?);
    let offset = u64::from_le_bytes(take(m, 13)?);
    let len = u32::from_le_bytes(take(m, 21)?);
    let n = u16::from_le_bytes(take(m, 25)?) as usize;
    if m.len() != 27 + 4 * n {
        return Err(bad("short-circuit write: CRC count and length disagree"));
    }
    let whole = offset % BLOCK as u64 == 0 && len as usize % BLOCK == 0 && len > 0;
    if !whole
        || len as usize > MAX_LOCAL_WRITE
        || n != len as usize / BLOCK
        || offset.checked_add(len as u64).is_none()
    {
        return Err(bad(&format!(
            "short-circuit write of {len} bytes at {offset} with {n} CRCs: not whole blocks of at most {MAX_LOCAL_WRITE} bytes"
        )));
    }
    let crcs = m[27..]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("chunks of 4")))
        .collect();
    Ok(LocalWrite {
        fid,
        unit,
        offset,
        len,
        crcs,
    })
}

/// One short-circuit write list: extents `(local offset, length)` of file `fid`, their
/// bytes in the pipe in order, `crcs` one per block-bounded piece of each extent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalWriteList {
    pub fid: u64,
    pub unit: u32,
    pub extents: Vec<(u64, u32)>,
    pub crcs: Vec<u32>,
}

/// Bytes of a `write list` message with `extents` extents and `crcs` CRCs.
pub fn write_list_bytes(extents: usize, crcs: usize) -> usize {
    17 + 12 * extents + 4 * crcs
}

/// Block-bounded pieces of `len` bytes at `offset`: the CRCs an extent carries.
pub fn pieces_of(offset: u64, len: u64) -> u64 {
    let b = BLOCK as u64;
    (offset + len).div_ceil(b) - offset / b
}

/// A `write list` message.
pub fn write_list_request(w: &LocalWriteList) -> Vec<u8> {
    let mut v = Vec::with_capacity(write_list_bytes(w.extents.len(), w.crcs.len()));
    v.push(OP_WRITE_LIST);
    v.extend_from_slice(&w.fid.to_le_bytes());
    v.extend_from_slice(&w.unit.to_le_bytes());
    v.extend_from_slice(&(w.extents.len() as u16).to_le_bytes());
    for &(offset, len) in &w.extents {
        v.extend_from_slice(&offset.to_le_bytes());
        v.extend_from_slice(&len.to_le_bytes());
    }
    v.extend_from_slice(&(w.crcs.len() as u16).to_le_bytes());
    for c in &w.crcs {
        v.extend_from_slice(&c.to_le_bytes());
    }
    assert!(v.len() <= MAX_MESSAGE);
    v
}

/// Reads a `write list` message, checking its shape: at least one extent, none empty
/// or ending past 2^64, at most [`MAX_LOCAL_WRITE`] bytes in all, one CRC per
/// block-bounded piece of each extent, nothing left over.
pub fn parse_write_list(m: &[u8]) -> io::Result<LocalWriteList> {
    if m.first() != Some(&OP_WRITE_LIST) || m.len() < 17 {
        return Err(bad("not a short-circuit write list"));
    }
    let fid = u64::from_le_bytes(take(m, 1)?);
    let unit = u32::from_le_bytes(take(m, 9)?);
    let n = u16::from_le_bytes(take(m, 13)?) as usize;
    let at = 15 + 12 * n;
    if n == 0 || m.len() < at + 2 {
        return Err(bad("short-circuit write list: no extents, or cut short"));
    }
    let mut extents = Vec::with_capacity(n);
    let (mut total, mut pieces) = (0u64, 0u64);
    for i in 0..n {
        let offset = u64::from_le_bytes(take(m, 15 + 12 * i)?);
        let len = u32::from_le_bytes(take(m, 23 + 12 * i)?);
        if len == 0 || offset.checked_add(len as u64).is_none() {
            return Err(bad(&format!(
                "short-circuit write list: extent {i} of {len} bytes at {offset}"
            )));
        }
        total += len as u64;
        pieces += pieces_of(offset, len as u64);
        extents.push((offset, len));
    }
    let c = u16::from_le_bytes(take(m, at)?) as usize;
    if total > MAX_LOCAL_WRITE as u64 || c as u64 != pieces || m.len() != at + 2 + 4 * c {
        return Err(bad(&format!(
            "short-circuit write list of {total} bytes in {n} extents with {c} CRCs: \
             at most {MAX_LOCAL_WRITE} bytes, one CRC per block-bounded piece"
        )));
    }
    let crcs = m[at + 2..]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("chunks of 4")))
        .collect();
    Ok(LocalWriteList {
        fid,
        unit,
        extents,
        crcs,
    })
}

/// A `written` answer: success with the server's boot id.
pub fn written_answer(boot_id: u64) -> Vec<u8> {
    let mut v = vec![OK];
    v.extend_from_slice(&boot_id.to_le_bytes());
    v
}

/// What a short-circuit write came to.
pub enum Written {
    Done {
        boot_id: u64,
    },
    /// The server takes no short-circuit writes; do not send it more.
    Refused(String),
    Failed(String),
}

pub fn parse_written(m: &[u8]) -> io::Result<Written> {
    let status = *m.first().ok_or_else(|| bad("empty short-circuit answer"))?;
    let why = || String::from_utf8_lossy(&m[1..]).into_owned();
    match status {
        OK if m.len() == 9 => Ok(Written::Done {
            boot_id: u64::from_le_bytes(take(m, 1)?),
        }),
        REFUSED => Ok(Written::Refused(why())),
        FAILED => Ok(Written::Failed(why())),
        _ => Err(bad("malformed short-circuit written answer")),
    }
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

/// A direct write's request: `len` bytes of whole blocks of file `fid` (stripe unit
/// `unit`) at local `offset`, which the client will write into the object files itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirectWrite {
    pub fid: u64,
    pub unit: u32,
    pub offset: u64,
    pub len: u32,
}

/// A `direct` message.
pub fn direct_request(w: &DirectWrite) -> Vec<u8> {
    let mut v = Vec::with_capacity(25);
    v.push(OP_DIRECT);
    v.extend_from_slice(&w.fid.to_le_bytes());
    v.extend_from_slice(&w.unit.to_le_bytes());
    v.extend_from_slice(&w.offset.to_le_bytes());
    v.extend_from_slice(&w.len.to_le_bytes());
    v
}

/// Reads a `direct` message, checking its shape as [`parse_write`] does.
pub fn parse_direct(m: &[u8]) -> io::Result<DirectWrite> {
    if m.first() != Some(&OP_DIRECT) || m.len() != 25 {
        return Err(bad("not a short-circuit direct write"));
    }
    let w = DirectWrite {
        fid: u64::from_le_bytes(take(m, 1)?),
        unit: u32::from_le_bytes(take(m, 9)?),
        offset: u64::from_le_bytes(take(m, 13)?),
        len: u32::from_le_bytes(take(m, 21)?),
    };
    let whole = w.offset % BLOCK as u64 == 0 && w.len as usize % BLOCK == 0 && w.len > 0;
    if !whole || w.len as usize > MAX_LOCAL_WRITE || w.offset.checked_add(w.len as u64).is_none() {
        return Err(bad(&format!(
            "short-circuit direct write of {} bytes at {}: not whole blocks of at most {MAX_LOCAL_WRITE} bytes",
            w.len, w.offset
        )));
    }
    Ok(w)
}

/// Where one piece of a granted range goes: descriptor `fd` (an index into the
/// descriptors of the answer) at object offset `offset`, `len` bytes; the pieces follow
/// the range in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrantPiece {
    pub fd: u16,
    pub offset: u64,
    pub len: u32,
}

/// A `grant` answer (the write descriptors go with it).
pub fn grant_answer(pieces: &[GrantPiece]) -> Vec<u8> {
    assert!(pieces.len() <= MAX_GRANT_PIECES);
    let mut v = Vec::with_capacity(3 + 14 * pieces.len());
    v.push(OK);
    v.extend_from_slice(&(pieces.len() as u16).to_le_bytes());
    for p in pieces {
        v.extend_from_slice(&p.fd.to_le_bytes());
        v.extend_from_slice(&p.offset.to_le_bytes());
        v.extend_from_slice(&p.len.to_le_bytes());
    }
    v
}

/// What a `direct` request came to.
pub enum Granted {
    /// Write each piece with `pwrite` on its descriptor, then send `direct done`.
    Go(Vec<GrantPiece>, Vec<std::fs::File>),
    /// The server takes no direct writes; do not ask it again.
    Refused(String),
    /// Not this range (blocks that hold bytes, an error): write it another way.
    Failed(String),
}

/// Reads a `grant` answer for a request of `len` bytes: the pieces must cover exactly
/// `len` bytes of whole blocks and name only descriptors that came with it.
pub fn parse_grant(m: &[u8], fds: Vec<OwnedFd>, len: u32) -> io::Result<Granted> {
    let status = *m.first().ok_or_else(|| bad("empty short-circuit answer"))?;
    let why = || String::from_utf8_lossy(&m[1..]).into_owned();
    match status {
        OK => {}
        REFUSED => return Ok(Granted::Refused(why())),
        FAILED => return Ok(Granted::Failed(why())),
        s => return Err(bad(&format!("unknown short-circuit status {s}"))),
    }
    let n = u16::from_le_bytes(take(m, 1)?) as usize;
    if n == 0 || n > MAX_GRANT_PIECES || m.len() != 3 + 14 * n {
        return Err(bad("malformed short-circuit grant"));
    }
    let pieces: Vec<GrantPiece> = m[3..]
        .chunks_exact(14)
        .map(|c| GrantPiece {
            fd: u16::from_le_bytes(c[0..2].try_into().expect("2 bytes")),
            offset: u64::from_le_bytes(c[2..10].try_into().expect("8 bytes")),
            len: u32::from_le_bytes(c[10..14].try_into().expect("4 bytes")),
        })
        .collect();
    let total: u64 = pieces.iter().map(|p| p.len as u64).sum();
    let shaped = pieces.iter().all(|p| {
        (p.fd as usize) < fds.len()
            && p.len > 0
            && p.offset % BLOCK as u64 == 0
            && p.len as usize % BLOCK == 0
            && p.offset.checked_add(p.len as u64).is_some()
    });
    if !shaped || total != len as u64 {
        return Err(bad(&format!(
            "short-circuit grant of {total} bytes in {n} pieces for {len} bytes, or a piece that is not whole blocks of a descriptor sent"
        )));
    }
    Ok(Granted::Go(
        pieces,
        fds.into_iter().map(std::fs::File::from).collect(),
    ))
}

/// A `direct done` message: `Some(crcs)` (one per block of the range, in order) when
/// every piece was written whole; `None` when not, so that the server stores nothing.
pub fn direct_done(crcs: Option<&[u32]>) -> Vec<u8> {
    let crcs = crcs.unwrap_or(&[]);
    let mut v = Vec::with_capacity(4 + 4 * crcs.len());
    v.push(OP_DIRECT_DONE);
    v.push(u8::from(!crcs.is_empty()));
    v.extend_from_slice(&(crcs.len() as u16).to_le_bytes());
    for c in crcs {
        v.extend_from_slice(&c.to_le_bytes());
    }
    assert!(v.len() <= MAX_MESSAGE);
    v
}

/// Reads a `direct done` message of a range of `blocks` blocks.
pub fn parse_direct_done(m: &[u8], blocks: usize) -> io::Result<Option<Vec<u32>>> {
    if m.first() != Some(&OP_DIRECT_DONE) || m.len() < 4 {
        return Err(bad("not a short-circuit direct-done message"));
    }
    let n = u16::from_le_bytes(take(m, 2)?) as usize;
    match m[1] {
        0 if n == 0 && m.len() == 4 => Ok(None),
        1 if n == blocks && m.len() == 4 + 4 * n => Ok(Some(
            m[4..]
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().expect("chunks of 4")))
                .collect(),
        )),
        _ => Err(bad(&format!(
            "short-circuit direct-done message with {n} CRCs for {blocks} blocks"
        ))),
    }
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

    #[test]
    fn write_messages_round_trip_and_bad_shapes_are_refused() {
        let w = LocalWrite {
            fid: 7,
            unit: 65536,
            offset: 8192,
            len: 8192,
            crcs: vec![1, 2],
        };
        assert_eq!(parse_write(&write_request(&w)).unwrap(), w);
        for bad in [
            LocalWrite {
                offset: 100,
                ..w.clone()
            },
            LocalWrite {
                len: 100,
                crcs: vec![1],
                ..w.clone()
            },
            LocalWrite {
                crcs: vec![1],
                ..w.clone()
            },
            LocalWrite {
                offset: u64::MAX - 4095,
                ..w.clone()
            },
            LocalWrite {
                len: 0,
                crcs: vec![],
                ..w.clone()
            },
        ] {
            assert!(parse_write(&write_request(&bad)).is_err(), "{bad:?}");
        }
        let mut m = write_request(&w);
        m.pop();
        assert!(parse_write(&m).is_err());
        assert!(parse_write(&[OP_WRITE]).is_err());
        assert!(matches!(
            parse_written(&written_answer(9)).unwrap(),
            Written::Done { boot_id: 9 }
        ));
        assert!(parse_written(&[OK, 1]).is_err());
    }

    #[test]
    fn write_list_messages_round_trip_and_bad_shapes_are_refused() {
        // 47,008 bytes at 100 (12 pieces) and 10 bytes inside one block (1 piece).
        let w = LocalWriteList {
            fid: 7,
            unit: 1 << 20,
            extents: vec![(100, 47_008), (200_000, 10)],
            crcs: (0..13).collect(),
        };
        assert_eq!(pieces_of(100, 47_008), 12);
        assert_eq!(pieces_of(4096, 4096), 1);
        let m = write_list_request(&w);
        assert_eq!(m.len(), write_list_bytes(2, 13));
        assert_eq!(parse_write_list(&m).unwrap(), w);
        for bad in [
            LocalWriteList {
                extents: vec![],
                crcs: vec![],
                ..w.clone()
            },
            LocalWriteList {
                extents: vec![(100, 0), (200_000, 10)],
                ..w.clone()
            },
            LocalWriteList {
                crcs: (0..12).collect(),
                ..w.clone()
            },
            LocalWriteList {
                extents: vec![(u64::MAX - 5, 10)],
                crcs: vec![1],
                ..w.clone()
            },
            LocalWriteList {
                extents: vec![
                    (0, MAX_LOCAL_WRITE as u32 / 2 + 1),
                    (1 << 30, MAX_LOCAL_WRITE as u32 / 2),
                ],
                crcs: vec![0; 2 * (MAX_LOCAL_WRITE / 2 / BLOCK) + 1],
                ..w.clone()
            },
        ] {
            assert!(
                parse_write_list(&write_list_request(&bad)).is_err(),
                "{bad:?}"
            );
        }
        let mut m = write_list_request(&w);
        m.pop();
        assert!(parse_write_list(&m).is_err());
        m.extend_from_slice(&[0, 0, 0, 0, 0]);
        assert!(parse_write_list(&m).is_err());
        assert!(parse_write_list(&[OP_WRITE_LIST]).is_err());
        assert!(parse_write_list(&write_request(&LocalWrite {
            fid: 1,
            unit: 4096,
            offset: 0,
            len: 4096,
            crcs: vec![1],
        }))
        .is_err());
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

    #[test]
    fn direct_messages_round_trip_and_bad_ones_are_refused() {
        let w = DirectWrite {
            fid: 9,
            unit: 65536,
            offset: 8192,
            len: 3 * 4096,
        };
        assert_eq!(parse_direct(&direct_request(&w)).unwrap(), w);
        for bad in [
            DirectWrite { offset: 100, ..w },
            DirectWrite { len: 4000, ..w },
            DirectWrite { len: 0, ..w },
            DirectWrite {
                len: (MAX_LOCAL_WRITE + 4096) as u32,
                ..w
            },
            DirectWrite {
                offset: u64::MAX - 4095,
                ..w
            },
        ] {
            assert!(parse_direct(&direct_request(&bad)).is_err(), "{bad:?}");
        }
        assert!(parse_direct(&direct_request(&w)[..24]).is_err());

        // A grant: pieces must cover the request exactly, in whole blocks, and name
        // descriptors that came with it.
        let fd = || OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        let pieces = [
            GrantPiece {
                fd: 0,
                offset: 0,
                len: 8192,
            },
            GrantPiece {
                fd: 1,
                offset: 4096,
                len: 4096,
            },
        ];
        match parse_grant(&grant_answer(&pieces), vec![fd(), fd()], 3 * 4096).unwrap() {
            Granted::Go(p, f) => assert!(p == pieces && f.len() == 2),
            _ => panic!("not a grant"),
        }
        let m = grant_answer(&pieces);
        assert!(
            parse_grant(&m, vec![fd()], 3 * 4096).is_err(),
            "descriptor missing"
        );
        assert!(
            parse_grant(&m, vec![fd(), fd()], 4 * 4096).is_err(),
            "short"
        );
        let odd = [GrantPiece {
            fd: 0,
            offset: 100,
            len: 4096,
        }];
        assert!(parse_grant(&grant_answer(&odd), vec![fd()], 4096).is_err());
        assert!(parse_grant(&grant_answer(&[]), vec![], 0).is_err());
        assert!(matches!(
            parse_grant(&verdict(REFUSED, "no"), vec![], 4096).unwrap(),
            Granted::Refused(_)
        ));
        assert!(matches!(
            parse_grant(&verdict(FAILED, "no"), vec![], 4096).unwrap(),
            Granted::Failed(_)
        ));

        // Done: the CRC count must be the range's block count; none when not written.
        assert_eq!(
            parse_direct_done(&direct_done(Some(&[1, 2, 3])), 3).unwrap(),
            Some(vec![1, 2, 3])
        );
        assert_eq!(parse_direct_done(&direct_done(None), 3).unwrap(), None);
        assert!(parse_direct_done(&direct_done(Some(&[1, 2])), 3).is_err());
        let mut m = direct_done(Some(&[1, 2, 3]));
        m.pop();
        assert!(parse_direct_done(&m, 3).is_err());
        m = direct_done(None);
        m[1] = 7;
        assert!(parse_direct_done(&m, 0).is_err());
    }
}

/// What `cachestat(2)` says of a file range's pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStat {
    /// Pages of the range in the page cache.
    pub cached: u64,
    /// Of those, pages dirty or under writeback: not on the disk yet.
    pub unwritten: u64,
}

/// The page cache's hold on `f`'s range `[offset, offset + len)` (`len` 0: to the end),
/// by `cachestat(2)` (Linux 6.5); `None` where the kernel cannot say.
pub fn cachestat(f: &impl AsRawFd, offset: u64, len: u64) -> Option<CacheStat> {
    /// The same number on every architecture (the common syscall table).
    const SYS_CACHESTAT: libc::c_long = 451;
    // struct cachestat_range { off, len } and struct cachestat { nr_cache, nr_dirty,
    // nr_writeback, nr_evicted, nr_recently_evicted }: all u64.
    let range = [offset, len];
    let mut st = [0u64; 5];
    // SAFETY: both arrays have the kernel's layouts and live across the call; flags 0.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            f.as_raw_fd(),
            range.as_ptr(),
            st.as_mut_ptr(),
            0u32,
        )
    };
    (r == 0).then_some(CacheStat {
        cached: st[0],
        unwritten: st[1] + st[2],
    })
}

/// A new open of `f`'s file for reading with `O_DIRECT` (through `/proc/self/fd`, so the
/// caller's access is checked again; `O_DIRECT` belongs to an open, so `f`'s own stays as
/// it is).
pub fn open_direct_reader(f: &impl AsRawFd) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT | libc::O_CLOEXEC)
        .open(format!("/proc/self/fd/{}", f.as_raw_fd()))
}

/// Reads into `buf` (page-aligned, a whole number of pages) from `d` (opened with
/// `O_DIRECT`) at `offset` (page-aligned) until it is full or the file ends; returns the
/// bytes read. A read short of a page is the file's end (another would need an
/// unaligned offset, which `O_DIRECT` refuses).
pub fn pread_direct(d: &std::fs::File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    const PAGE: usize = 4096;
    let mut done = 0;
    while done < buf.len() {
        match d.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) if n % PAGE != 0 => return Ok(done + n),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}
