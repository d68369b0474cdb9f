//! Responses: the `Response` enum, its `ReplyKind`s and the typed reply of each variant
//! (`reply`), all from the one list below.

use super::*;
use serde::{Deserialize, Serialize};

macro_rules! responses {
    ($( $(#[$vattr:meta])* $variant:ident $(( $($tuple:tt)* ))? $({ $($fields:tt)* })? ),* $(,)?) => {
        /// Responses. The response frame's opcode echoes the request's; the operation
        /// table names the variants each request's success may be.
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        pub enum Response {
            $( $(#[$vattr])* $variant $(( $($tuple)* ))? $({ $($fields)* })?, )*
        }

        /// The variants of [`Response`], without their fields: what the operation table's
        /// rows name as their replies.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ReplyKind {
            $($variant,)*
        }

        impl ReplyKind {
            pub const ALL: &'static [ReplyKind] = &[$(ReplyKind::$variant,)*];
        }

        impl Response {
            pub fn kind(&self) -> ReplyKind {
                match self {
                    $(Response::$variant { .. } => ReplyKind::$variant,)*
                }
            }
        }

        /// One type per [`Response`] variant: what a typed call's success gives
        /// ([`Operation::Reply`](crate::Operation::Reply)). A variant with one field is
        /// that field's type; one with none is a unit type.
        pub mod reply {
            use super::*;
            $( crate::ops::reply_item! { $(#[$vattr])* $variant $(( $($tuple)* ))? $({ $($fields)* })? } )*
        }
    };
}

responses! {
    /// Success with nothing to say.
    Done,
    /// Answer to Hello: the server's nonce and its proof of the secret.
    Challenge {
        nonce: [u8; 32],
        proof: [u8; 32],
    },
    Pong {
        role: Role,
        server_id: Option<ServerId>,
        version: String,
    },
    // `crate::` because the variant's type in `reply` has the same name.
    Attr(crate::Attr),
    Target(String),
    Entries {
        entries: Vec<DirEntry>,
        done: bool,
    },
    /// `db_bytes`: size of the metadata store on disk.
    MetaStatus {
        inodes: u64,
        files: u64,
        dirs: u64,
        open_files: u64,
        db_bytes: u64,
        counters: Counters,
    },
    /// Answer to Read: the stored CRC of each block of the returned data, which follows.
    ReadData {
        #[serde(with = "crc_list")]
        crcs: Vec<u32>,
    },
    DataStatus {
        server_id: ServerId,
        targets: Vec<TargetStatus>,
        counters: Counters,
    },
    /// Answer to Seek: the local offset found, `None` if there is no data at or after
    /// the offset asked about.
    Offset {
        offset: Option<u64>,
    },
    /// Answer to Allocated: bytes allocated on disk to the objects and their checksums.
    Allocated {
        bytes: u64,
    },
    /// Answer to Write and Fsync: the data server's boot identity, a random number drawn
    /// at each start. A client that sees it change between a write and the fsync that
    /// should make the write durable knows the write may be lost (the server restarted).
    Written {
        boot_id: u64,
    },
    /// Answer to ListObjects: file ids in cursor order; `done` when none follow.
    Objects {
        fids: Vec<InodeId>,
        done: bool,
    },
    /// Answer to Scrub: bytes read, the object offset to continue from (`None`: the
    /// object's end was reached) and the damaged blocks found.
    Scrubbed {
        bytes: u64,
        next: Option<u64>,
        damaged: Vec<Damage>,
    },
    /// Answer to ScrubStatus: what the background scrubber (and on-demand scrubs) read
    /// and found since the server started.
    ScrubStatus {
        scrubbed_bytes: u64,
        damaged_blocks: u64,
        /// Completed passes over every object.
        passes: u64,
        /// The background scrubber's rate, 0 when off.
        rate_bytes_s: u64,
    },
    /// Answer to SessionOpen and SessionRenew: the session's id and its lease; the
    /// session ends unless renewed within `lease_ms` of this answer.
    Session {
        session: u64,
        lease_ms: u64,
    },
    /// Answer to LocalityStatus: the data server's host and, since it started, the bulk
    /// bytes it received from (writes) and sent to (reads) clients on its own host and on
    /// other hosts (a connection that announced no host counts as another host's), and
    /// the short-circuit opens it answered with descriptors.
    LocalityStatus {
        host: String,
        same_host_received: u64,
        same_host_sent: u64,
        other_host_received: u64,
        other_host_sent: u64,
        short_circuit_opens: u64,
    },
    /// Answer to DataServers: (address, host) of each data server, by id.
    DataServers {
        servers: Vec<(String, Option<String>)>,
    },
    /// Answer to GetXattr: the attribute's value.
    Xattr {
        value: Vec<u8>,
    },
    /// Answer to ListXattr: attribute names, sorted.
    XattrNames {
        names: Vec<String>,
    },
    /// Answer to Space: each target's size and free bytes, in target order.
    Space {
        targets: Vec<TargetSpace>,
    },
    /// Answer to ReadDirPlus: (name, attributes) of each entry, in name order; `done`
    /// when none follow.
    EntriesPlus {
        entries: Vec<(String, Attr)>,
        done: bool,
    },
    /// Answer to Features: the server's.
    Features {
        features: crate::Features,
    },
    /// Answer to Statfs: inodes in use, and of them regular files and directories.
    Statfs {
        inodes: u64,
        files: u64,
        dirs: u64,
    },
    /// Answer to LocalOpen: per target, which of its files are attached
    /// ([`HAS_DATA`](crate::HAS_DATA), [`HAS_SIDECAR`](crate::HAS_SIDECAR)), in target
    /// order; the descriptors follow in that order.
    LocalFiles {
        flags: Vec<u8>,
    },
    /// Answer to LocalDirect: the range's pieces in order; the data files' write
    /// descriptors are attached, and after them the grant's fence.
    Granted {
        pieces: Vec<crate::GrantPiece>,
    },
}
