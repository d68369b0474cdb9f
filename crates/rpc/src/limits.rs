//! Named limits of connections and sessions, in one place: each is checked where it is
//! used, and each has a test that plays the misbehaving peer.

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
