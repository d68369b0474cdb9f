//! The same-host socket's limits and the parts of its answers (docs/protocol.md
//! "Short-circuit socket"). Its requests are the [`SameHostOp`](crate::SameHostOp) rows
//! of the operation table and travel in the same frames as over TCP; a data server
//! serves them only on its Unix socket, to a client on its own host that proved it
//! knows the cluster secret, and refuses them over TCP.

use serde::{Deserialize, Serialize};

/// The longest frame either side sends or accepts on the socket (one packet).
pub const MAX_LOCAL_MESSAGE: usize = 8192;
/// Most targets a data server may have for short-circuit reads (an `LocalFiles` answer
/// carries two descriptors per target).
pub const MAX_LOCAL_TARGETS: usize = 64;
/// Most descriptors one answer carries: two per target, or a grant's data files and
/// its fence.
pub const MAX_LOCAL_FDS: usize = 2 * MAX_LOCAL_TARGETS + 1;
/// Most bytes one short-circuit write, write list or direct write carries.
pub const MAX_LOCAL_WRITE: usize = 2 << 20;
/// Most pieces one direct-write grant names (its answer fits one packet).
pub const MAX_GRANT_PIECES: usize = 256;
/// [`LocalFiles`](crate::Response::LocalFiles) flag: the target's data file is attached.
pub const HAS_DATA: u8 = 1;
/// [`LocalFiles`](crate::Response::LocalFiles) flag: the target's checksum sidecar is
/// attached.
pub const HAS_SIDECAR: u8 = 2;

/// One piece of a direct-write grant: `len` bytes of the range, in order, go to object
/// offset `offset` of the file attached as descriptor `fd` of the answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantPiece {
    pub fd: u16,
    pub offset: u64,
    pub len: u32,
}

/// CRCs a write list of these extents carries: one per block-bounded piece of each.
pub fn list_pieces(extents: &[(u64, u32)]) -> usize {
    extents
        .iter()
        .map(|&(o, len)| crate::pieces(o, len as usize).count())
        .sum()
}
