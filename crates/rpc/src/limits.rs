//! Every limit a server puts on its peers, in one place.
//!
//! A peer may be slow, silent, hostile or gone; each constant below bounds what such a
//! peer can cost a server (a thread, a file descriptor, memory, time). Servers take them
//! through [`Limits`], whose `Default` is these constants; tests pass smaller values
//! (`serve_with`) to play a misbehaving peer without waiting minutes. The table in
//! docs/ARCHITECTURE.md ("Limits") lists them with their reasons; keep both in step.

use std::time::Duration;

/// Most authenticated connections a server serves at once (one thread each); a peer
/// that authenticates beyond it is answered `Busy` and closed.
pub const MAX_CONNECTIONS: usize = 4096;

/// Most connections still in their handshake, in all. They cost no thread (the
/// acceptor drives them), only a file descriptor and a few hundred bytes; when full,
/// the oldest is closed to admit the new one, so a flood cannot keep a real client out:
/// a real client finishes its handshake in one round trip, long before it is oldest.
pub const MAX_UNAUTH_CONNECTIONS: usize = 8192;

/// Most connections in their handshake from one IP address; when full, that address's
/// oldest is closed to admit the new one (so the flood only displaces itself, also when
/// it comes from the real client's own address).
pub const MAX_UNAUTH_PER_ADDR: usize = 2048;

/// How long a new connection may take to finish the whole handshake (Hello, Auth),
/// however it trickles its bytes.
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);

/// Patience for a frame a peer has begun: it must arrive whole within this plus its
/// length at [`MIN_PEER_RATE_BYTES_S`] (see [`frame_deadline`]).
pub const PEER_TIMEOUT: Duration = Duration::from_secs(10);

/// The slowest a peer may send a frame it has begun, so that a peer trickling bytes
/// cannot hold a connection (and its thread) forever.
pub const MIN_PEER_RATE_BYTES_S: u64 = 64 << 10;

/// An authenticated connection with no request for this long is closed by the server
/// (with a `ConnectionClosed` notice, so the client knows nothing was lost).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// Clients drop a pooled connection idle for this long instead of using it: well
/// before the server's [`IDLE_TIMEOUT`], so a client never sends on a connection the
/// server is closing.
pub const CLIENT_IDLE_MAX: Duration = Duration::from_secs(IDLE_TIMEOUT.as_secs() / 2);

/// Bytes of receive buffer a connection keeps once it is idle; a buffer that grew for a
/// large frame (up to 20 MiB) shrinks back to this.
pub const KEPT_BUFFER_BYTES: usize = 1 << 20;

/// Largest body read before a peer has authenticated.
pub const MAX_HANDSHAKE_BODY_BYTES: u32 = 2048;

/// How often an idle connection thread, and the acceptor, look at the shutdown flag
/// and the clock.
pub const IDLE_POLL: Duration = Duration::from_millis(500);

/// Backlog of the listening socket (the kernel caps it at `net.core.somaxconn`): room
/// for a burst of connections while the acceptor drains them.
pub const LISTEN_BACKLOG: i32 = 4096;

// Room for session limits (lease length) beside these.

// The limits fit together: a small frame's deadline, noticed within an idle poll, and the
// handshake's stay within 15 s; clients give up a pooled connection before the server
// would close it.
const _: () = assert!(PEER_TIMEOUT.as_millis() + IDLE_POLL.as_millis() <= 15_000);
const _: () = assert!(HANDSHAKE_DEADLINE.as_secs() <= 15);
const _: () = assert!(CLIENT_IDLE_MAX.as_secs() < IDLE_TIMEOUT.as_secs());
const _: () = assert!(MAX_UNAUTH_PER_ADDR <= MAX_UNAUTH_CONNECTIONS);

/// How long a peer may take over a frame of `len` bytes, given `patience`.
pub fn frame_deadline(patience: Duration, len: usize) -> Duration {
    patience + Duration::from_millis(len as u64 * 1000 / MIN_PEER_RATE_BYTES_S)
}

/// The limits one server applies; `Default` gives the constants of this module.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_connections: usize,
    pub max_unauth: usize,
    pub max_unauth_per_addr: usize,
    pub handshake_deadline: Duration,
    pub peer_timeout: Duration,
    pub idle_timeout: Duration,
    pub kept_buffer_bytes: usize,
    pub idle_poll: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: MAX_CONNECTIONS,
            max_unauth: MAX_UNAUTH_CONNECTIONS,
            max_unauth_per_addr: MAX_UNAUTH_PER_ADDR,
            handshake_deadline: HANDSHAKE_DEADLINE,
            peer_timeout: PEER_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            kept_buffer_bytes: KEPT_BUFFER_BYTES,
            idle_poll: IDLE_POLL,
        }
    }
}

impl Limits {
    /// Checks that the limits make sense together (a programming error otherwise).
    pub fn check(&self) {
        assert!(self.max_connections > 0, "{self:?}");
        assert!(
            self.max_unauth > 0 && self.max_unauth_per_addr > 0,
            "{self:?}"
        );
        assert!(self.max_unauth_per_addr <= self.max_unauth, "{self:?}");
        assert!(!self.handshake_deadline.is_zero(), "{self:?}");
        assert!(!self.peer_timeout.is_zero(), "{self:?}");
        assert!(!self.idle_poll.is_zero(), "{self:?}");
        assert!(self.idle_timeout >= self.idle_poll, "{self:?}");
        // Clients use a connection idle for under 10 ms without checking it is open.
        assert!(self.idle_timeout >= Duration::from_millis(100), "{self:?}");
    }
}

/// Raises this process's limit of open files to its hard limit (once), so that a server
/// can hold its connection budgets; returns the limit now in force.
pub fn raise_nofile_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    // `None` is unlimited.
    let r = getrlimit(Resource::Nofile);
    let (cur, max) = (r.current.unwrap_or(u64::MAX), r.maximum.unwrap_or(u64::MAX));
    if cur < max {
        let want = Rlimit {
            current: r.maximum,
            maximum: r.maximum,
        };
        if setrlimit(Resource::Nofile, want).is_ok() {
            return max;
        }
    }
    cur
}

// Client sessions (item 10 of issue 12).

/// How long a client's session lives without a renewal, by default, in milliseconds.
/// When it runs out the metadata server releases the session's opens, so a client that
/// vanished (killed, its machine lost) keeps no unlinked file from being purged for
/// longer than this. A cluster may set its own (`lease_ms` in cluster.toml).
pub const LEASE_MS: u64 = 30_000;
/// Shortest lease a cluster may configure (tests use short ones), in milliseconds.
pub const MIN_LEASE_MS: u64 = 100;
/// Longest lease a cluster may configure, in milliseconds.
pub const MAX_LEASE_MS: u64 = 3_600_000;
/// A client renews its session this many times per lease, so that renewals that
/// are late or lost (up to this many minus one in a row) do not end it.
pub const LEASE_RENEWALS: u64 = 3;
/// Most sessions a metadata server keeps at once (a client has one).
pub const MAX_SESSIONS: usize = 1 << 16;

const _: () = {
    assert!(MIN_LEASE_MS <= LEASE_MS && LEASE_MS <= MAX_LEASE_MS);
    assert!(LEASE_RENEWALS >= 2);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_grow_with_the_frame_and_stay_short_for_small_ones() {
        let p = PEER_TIMEOUT;
        assert_eq!(frame_deadline(p, 40), Duration::from_millis(10_000));
        assert!(frame_deadline(p, 64 << 10) <= Duration::from_secs(15));
        assert_eq!(frame_deadline(p, 4 << 20), Duration::from_secs(10 + 64));
        Limits::default().check();
    }
}
