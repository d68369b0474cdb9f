//! Where the descriptors the client opens for itself go: sockets to servers, the
//! short-circuit socket and the descriptors it receives, pipes. By default they stay where
//! the kernel put them (the lowest free number). A process that shares its descriptor
//! table with a program that knows nothing of them (the interception library, inside an
//! unmodified program) moves them out of the program's way with [`set`]: the program's
//! descriptor numbers are then what they would be without the library, and its
//! `close_range` over its own numbers does not close the client's sockets under it.

use std::os::fd::OwnedFd;
use std::sync::OnceLock;

static PLACE: OnceLock<fn(OwnedFd) -> OwnedFd> = OnceLock::new();

/// Sets where descriptors go, once per process; later calls change nothing.
pub fn set(place: fn(OwnedFd) -> OwnedFd) {
    let _ = PLACE.set(place);
}

/// `fd` where the process wants its own descriptors.
pub fn place(fd: OwnedFd) -> OwnedFd {
    match PLACE.get() {
        Some(p) => p(fd),
        None => fd,
    }
}

/// As [`place`], for a TCP stream.
pub fn place_tcp(s: std::net::TcpStream) -> std::net::TcpStream {
    if PLACE.get().is_none() {
        return s;
    }
    std::net::TcpStream::from(place(OwnedFd::from(s)))
}

/// As [`place`], for a Unix stream socket.
pub fn place_unix(s: std::os::unix::net::UnixStream) -> std::os::unix::net::UnixStream {
    if PLACE.get().is_none() {
        return s;
    }
    std::os::unix::net::UnixStream::from(place(OwnedFd::from(s)))
}
