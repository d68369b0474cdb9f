//! The operation table: one row per operation, stating everything about it. From the
//! table come the [`Request`] enum (its variant order is the wire encoding: append new
//! rows at the end, never reorder), the numbered [`Opcode`]s and their properties, the
//! per-server operation enums the servers dispatch on ([`Request::route`]), the token
//! scope of each request ([`Request::scope`]) and its validation ([`Request::validate`]).
//!
//! A row reads
//!
//! ```text
//! (Group NUMBER => Name { fields } -> Reply | Reply [Flags] feature(F)
//!     scope(fields) => expression, check(fields; data_len) => expression)
//! ```
//!
//! - `Group` says who serves it: [`ConnectionOp`] the rpc layer of every server (the
//!   handshake and connection settings), [`AnyOp`] every server, [`MetaReadOp`] the
//!   metadata server from a snapshot of its database, [`MetaWriteOp`] the metadata
//!   server's writer (a change of the namespace, group-committed through its log),
//!   [`MetaOp`] the rest of the metadata server (opens, sessions, administration),
//!   [`DataOp`] a data server, [`SameHostOp`] a data server's same-host socket (a
//!   client on its host; refused over TCP). Each group is an enum that its server matches without a
//!   catch-all arm: a new row does not compile until it has a handler.
//! - The replies are the [`Response`](crate::Response) variants a success may be; the
//!   client refuses any other, and a server's debug build asserts it.
//! - Flags: `Idempotent` (safe to send again on a fresh connection), `BulkIn` and
//!   `BulkOut` (the request or its answer carries bulk data), `Uncounted` (left out of the server's request statistics).
//! - `feature(F)`: the operation came after the protocol's feature negotiation began;
//!   a client sends it only to a server that announced [`Features`] `F`.
//! - `scope`: what a connection authenticated with a scoped token needs to make it
//!   (see [`Scope`]).
//! - `check`: the checks that need no server state; `data_len` is the bulk data's length.

use crate::check;
use crate::msg::crc_list;
use crate::{
    check_path, validate_hint, validate_host, validate_inline_pieces, validate_name as name_ok,
    xattr_name_ok, FileType, InlinePiece, InodeId, LayoutHint, ReplyKind, Response, SetAttrs,
    WireError,
};
use crate::{check_range, check_unit};
use serde::{Deserialize, Serialize};

/// Who serves an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServedBy {
    /// The rpc layer of any server: the handshake and the connection's settings.
    Connection,
    /// Every server.
    Any,
    Meta,
    Data,
    /// A data server's same-host socket (docs/protocol.md "Short-circuit socket").
    SameHost,
}

/// The table's groups: one enum of operations each (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    ConnectionOp,
    AnyOp,
    MetaReadOp,
    MetaWriteOp,
    MetaOp,
    DataOp,
    SameHostOp,
}

impl Group {
    pub const fn served_by(self) -> ServedBy {
        match self {
            Group::ConnectionOp => ServedBy::Connection,
            Group::AnyOp => ServedBy::Any,
            Group::MetaReadOp | Group::MetaWriteOp | Group::MetaOp => ServedBy::Meta,
            Group::DataOp => ServedBy::Data,
            Group::SameHostOp => ServedBy::SameHost,
        }
    }
}

/// A request taken apart by who serves it ([`Request::route`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Route {
    ConnectionOp(ConnectionOp),
    AnyOp(AnyOp),
    MetaReadOp(MetaReadOp),
    MetaWriteOp(MetaWriteOp),
    MetaOp(MetaOp),
    DataOp(DataOp),
    SameHostOp(SameHostOp),
}

/// Properties an operation's row names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flag {
    /// Doing it twice leaves what doing it once does: safe to send again on a fresh
    /// connection when a reused one turns out closed.
    Idempotent,
    /// The request carries bulk data (after its body).
    BulkIn,
    /// The answer carries bulk data.
    BulkOut,
    /// Not counted in the server's request statistics (status queries of monitors).
    Uncounted,
}

/// Protocol features, announced by each side with the `Features` request right after
/// the handshake (docs/protocol.md, "Features"). A server that predates the request
/// refuses it, and has none of them. One bit per feature; never reuse a bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Features(pub u64);

impl Features {
    pub const NONE: Features = Features(0);
    /// ReadDirPlus: a directory page with each entry's attributes.
    pub const READDIR_PLUS: Features = Features(1 << 0);
    /// Space: each data target's size and free bytes, without walking the objects.
    pub const SPACE: Features = Features(1 << 1);
    /// Statfs: the namespace's inode counts in one request.
    pub const STATFS: Features = Features(1 << 2);
    /// Every feature this build knows, with its name.
    pub const KNOWN: &'static [(Features, &'static str)] = &[
        (Features::READDIR_PLUS, "readdir-plus"),
        (Features::SPACE, "space"),
        (Features::STATFS, "statfs"),
    ];

    /// Every feature this build has.
    pub const fn all() -> Features {
        let mut bits = 0;
        let mut i = 0;
        while i < Features::KNOWN.len() {
            bits |= Features::KNOWN[i].0 .0;
            i += 1;
        }
        Features(bits)
    }

    pub const fn has(self, f: Features) -> bool {
        self.0 & f.0 == f.0
    }

    pub const fn and(self, other: Features) -> Features {
        Features(self.0 & other.0)
    }

    pub const fn without(self, other: Features) -> Features {
        Features(self.0 & !other.0)
    }

    /// The feature called `name` (as in [`Features::KNOWN`]).
    pub fn named(name: &str) -> Option<Features> {
        Features::KNOWN
            .iter()
            .find(|(_, n)| *n == name)
            .map(|&(f, _)| f)
    }

    /// The names of the features set, in bit order.
    pub fn names(self) -> Vec<&'static str> {
        Features::KNOWN
            .iter()
            .filter(|(f, _)| self.has(*f))
            .map(|&(_, n)| n)
            .collect()
    }
}

/// What a request reaches, for a connection authenticated with a scoped token: the
/// token's holder may make it only if what it reaches is inside the token's tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach<'a> {
    /// Nothing of the namespace (status, sessions, Ping): any token may ask.
    Nothing,
    /// Only for holders of the cluster secret: refused to every token.
    Secret,
    /// A name in this directory.
    Dir(InodeId),
    /// A name in each of two directories (rename, exchange).
    Dirs(InodeId, InodeId),
    /// This inode.
    Ino(InodeId),
    /// This inode and a name in this directory (link).
    InoAndDir(InodeId, InodeId),
    /// What this path resolves to.
    Path(&'a str),
    /// The file this path resolves to, which the request opens as it runs.
    OpenPath(&'a str),
    /// A file's objects on a data server.
    Fid(InodeId),
}

/// A request's token scope: what it reaches and whether it changes it (refused to a
/// read-only token).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scope<'a> {
    pub reach: Reach<'a>,
    pub writes: bool,
}

const fn reads(reach: Reach<'_>) -> Scope<'_> {
    Scope {
        reach,
        writes: false,
    }
}

const fn writes(reach: Reach<'_>) -> Scope<'_> {
    Scope {
        reach,
        writes: true,
    }
}

const fn either(reach: Reach<'_>, write: bool) -> Scope<'_> {
    Scope {
        reach,
        writes: write,
    }
}

const ANY: Scope<'static> = reads(Reach::Nothing);
const SECRET: Scope<'static> = reads(Reach::Secret);
use Reach::{Dir, Dirs, Fid, Ino, InoAndDir, OpenPath, Path};

const fn ok() -> Result<(), WireError> {
    Ok(())
}

macro_rules! operations {
    ($( ( $($row:tt)* ) )*) => {
        operations!(@all $( ( $($row)* ) )*);
        operations!(@sort [] [] [] [] [] [] []; $( ( $($row)* ) )*);
    };

    // Sorts the rows into their groups, keeping their order.
    (@sort [$($c:tt)*] [$($a:tt)*] [$($r:tt)*] [$($w:tt)*] [$($m:tt)*] [$($d:tt)*] [$($l:tt)*];
        (ConnectionOp $($row:tt)*) $($rest:tt)*) => {
        operations!(@sort [$($c)* ($($row)*)] [$($a)*] [$($r)*] [$($w)*] [$($m)*] [$($d)*] [$($l)*]; $($rest)*);
    };
    (@sort [$($c:tt)*] [$($a:tt)*] [$($r:tt)*] [$($w:tt)*] [$($m:tt)*] [$($d:tt)*] [$($l:tt)*];
        (AnyOp $($row:tt)*) $($rest:tt)*) => {
        operations!(@sort [$($c)*] [$($a)* ($($row)*)] [$($r)*] [$($w)*] [$($m)*] [$($d)*] [$($l)*]; $($rest)*);
    };
    (@sort [$($c:tt)*] [$($a:tt)*] [$($r:tt)*] [$($w:tt)*] [$($m:tt)*] [$($d:tt)*] [$($l:tt)*];
        (MetaReadOp $($row:tt)*) $($rest:tt)*) => {
        operations!(@sort [$($c)*] [$($a)*] [$($r)* ($($row)*)] [$($w)*] [$($m)*] [$($d)*] [$($l)*]; $($rest)*);
    };
    (@sort [$($c:tt)*] [$($a:tt)*] [$($r:tt)*] [$($w:tt)*] [$($m:tt)*] [$($d:tt)*] [$($l:tt)*];
        (MetaWriteOp $($row:tt)*) $($rest:tt)*) => {
        operations!(@sort [$($c)*] [$($a)*] [$($r)*] [$($w)* ($($row)*)] [$($m)*] [$($d)*] [$($l)*]; $($rest)*);
    };
    (@sort [$($c:tt)*] [$($a:tt)*] [$($r:tt)*] [$($w:tt)*] [$($m:tt)*] [$($d:tt)*] [$($l:tt)*];
        (MetaOp $($row:tt)*) $($rest:tt)*) => {
        operations!(@sort [$($c)*] [$($a)*] [$($r)*] [$($w)*] [$($m)* ($($row)*)] [$($d)*] [$($l)*]; $($rest)*);
    };
    (@sort [$($c:tt)*] [$($a:tt)*] [$($r:tt)*] [$($w:tt)*] [$($m:tt)*] [$($d:tt)*] [$($l:tt)*];
        (DataOp $($row:tt)*) $($rest:tt)*) => {
        operations!(@sort [$($c)*] [$($a)*] [$($r)*] [$($w)*] [$($m)*] [$($d)* ($($row)*)] [$($l)*]; $($rest)*);
    };
    (@sort [$($c:tt)*] [$($a:tt)*] [$($r:tt)*] [$($w:tt)*] [$($m:tt)*] [$($d:tt)*] [$($l:tt)*];
        (SameHostOp $($row:tt)*) $($rest:tt)*) => {
        operations!(@sort [$($c)*] [$($a)*] [$($r)*] [$($w)*] [$($m)*] [$($d)*] [$($l)* ($($row)*)]; $($rest)*);
    };
    (@sort [$($c:tt)*] [$($a:tt)*] [$($r:tt)*] [$($w:tt)*] [$($m:tt)*] [$($d:tt)*] [$($l:tt)*];) => {
        operations!(@group ConnectionOp, "Served by the rpc layer of every server: the handshake and the connection's settings." ; $($c)*);
        operations!(@group AnyOp, "Served by every server." ; $($a)*);
        operations!(@group MetaReadOp, "Served by the metadata server from a snapshot of its database." ; $($r)*);
        operations!(@group MetaWriteOp, "Changes of the namespace, committed by the metadata server's writer through its log." ; $($w)*);
        operations!(@group MetaOp, "The metadata server's other operations: opens, sessions, administration." ; $($m)*);
        operations!(@group DataOp, "Served by a data server." ; $($d)*);
        operations!(@group SameHostOp, "Served by a data server on its same-host (short-circuit) socket only." ; $($l)*);
    };

    // One group's enum.
    (@group $group:ident, $doc:literal ;
        $( ($num:literal => $name:ident { $($(#[$fattr:meta])* $field:ident : $ty:ty),* $(,)? } $($rest:tt)*) )*) => {
        #[doc = $doc]
        #[derive(Clone, Debug, PartialEq)]
        pub enum $group {
            $($name { $($field: $ty),* },)*
        }

        impl $group {
            pub fn opcode(&self) -> Opcode {
                match self {
                    $($group::$name { .. } => Opcode::$name,)*
                }
            }
        }

        impl From<$group> for Request {
            fn from(op: $group) -> Request {
                match op {
                    $($group::$name { $($field),* } => Request::$name { $($field),* },)*
                }
            }
        }
    };

    // An operation's reply type from its row's replies: `()` for `Done`, the variant's
    // type from `reply` for one variant, `Option` of it for `Variant | Done`. Any other
    // combination matches no rule and does not compile.
    (@reply_ty Done) => { () };
    (@reply_ty $r:ident) => { crate::reply::$r };
    (@reply_ty $r:ident | Done) => { Option<crate::reply::$r> };

    (@feature) => { None };
    (@feature $f:ident) => { Some(Features::$f) };

    // Everything else, from all rows in order.
    (@all $( ($group:ident $num:literal => $name:ident { $($(#[$fattr:meta])* $field:ident : $ty:ty),* $(,)? }
        -> $($reply:ident)|+ [$($flag:ident),*] $(feature($feat:ident))?
        scope($($sf:ident),*) => $scope:expr,
        check($($cf:ident),* $(; $dl:ident)?) => $check:expr $(,)?) )*) => {
        /// One request type per operation, with its reply type ([`Operation`]):
        /// `op::Lookup { parent, name }` is answered with a `reply::Attr`.
        pub mod op {
            use super::*;
            $(
                #[derive(Clone, Debug, PartialEq)]
                pub struct $name { $(pub $field: $ty),* }

                impl From<$name> for Request {
                    fn from(op: $name) -> Request {
                        let $name { $($field),* } = op;
                        Request::$name { $($field),* }
                    }
                }

                impl Operation for $name {
                    const OPCODE: Opcode = Opcode::$name;
                    type Reply = operations!(@reply_ty $($reply)|+);
                }
            )*
        }

        /// A request. The variant determines the opcode.
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        pub enum Request {
            $($name { $($(#[$fattr])* $field: $ty),* },)*
        }

        /// Numbered operations. The numbers are part of the protocol: never reuse one.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum Opcode {
            $($name = $num,)*
        }

        impl Opcode {
            pub const ALL: &'static [Opcode] = &[$(Opcode::$name,)*];

            pub fn from_u16(n: u16) -> Option<Opcode> {
                match n {
                    $($num => Some(Opcode::$name),)*
                    _ => None,
                }
            }

            pub const fn name(self) -> &'static str {
                match self {
                    $(Opcode::$name => stringify!($name),)*
                }
            }

            /// The group that serves it.
            pub const fn group(self) -> Group {
                match self {
                    $(Opcode::$name => Group::$group,)*
                }
            }

            /// The flags of its row.
            pub const fn flags(self) -> &'static [Flag] {
                match self {
                    $(Opcode::$name => &[$(Flag::$flag),*],)*
                }
            }

            /// What a success may answer.
            pub const fn replies(self) -> &'static [ReplyKind] {
                match self {
                    $(Opcode::$name => &[$(ReplyKind::$reply),+],)*
                }
            }

            /// The feature a server must have announced for a client to send it.
            pub const fn feature(self) -> Option<Features> {
                match self {
                    $(Opcode::$name => operations!(@feature $($feat)?),)*
                }
            }
        }

        impl Request {
            pub fn opcode(&self) -> Opcode {
                match self {
                    $(Request::$name { .. } => Opcode::$name,)*
                }
            }

            /// The request as its server's operation.
            pub fn route(self) -> Route {
                match self {
                    $(Request::$name { $($field),* } => Route::$group($group::$name { $($field),* }),)*
                }
            }

            /// What a scoped token needs to make it.
            pub fn scope(&self) -> Scope<'_> {
                match self {
                    $(
                        #[allow(unused_variables)]
                        Request::$name { $($sf,)* .. } => $scope,
                    )*
                }
            }

            /// The checks that need no server state: names, paths, limits, alignment
            /// and that a write's CRC list matches its `data_len` bytes of data.
            /// Returns the reason the request is bad.
            pub fn validate(&self, data_len: u32) -> Result<(), WireError> {
                let _ = data_len;
                match self {
                    $(
                        Request::$name { $($cf,)* .. } => {
                            $(let $dl = data_len;)?
                            $check
                        }
                    )*
                }
            }
        }
    };
}

/// What a success answer converts into: the types of [`reply`](crate::reply), `()` for
/// `Done`, and `Option<T>` for an operation answered `T | Done`.
pub trait Reply: Sized {
    /// The answer as this type, or the kind of answer it was when it is another variant.
    fn from_response(r: Response) -> Result<Self, ReplyKind>;
}

impl Reply for () {
    fn from_response(r: Response) -> Result<(), ReplyKind> {
        match r {
            Response::Done => Ok(()),
            other => Err(other.kind()),
        }
    }
}

/// `T | Done`: `None` for `Done`.
impl<T: Reply> Reply for Option<T> {
    fn from_response(r: Response) -> Result<Option<T>, ReplyKind> {
        match r {
            Response::Done => Ok(None),
            other => T::from_response(other).map(Some),
        }
    }
}

/// One operation's request (the types of [`op`]) with the type its success answers, both
/// from its row of the table.
pub trait Operation: Into<Request> {
    const OPCODE: Opcode;
    type Reply: Reply;
}

/// The type of one [`Response`] variant in [`reply`](crate::reply) (used by `responses!`).
macro_rules! reply_item {
    ($(#[$vattr:meta])* $variant:ident) => {
        $(#[$vattr])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $variant;

        impl $crate::Reply for $variant {
            fn from_response(r: Response) -> Result<$variant, ReplyKind> {
                match r {
                    Response::$variant => Ok($variant),
                    other => Err(other.kind()),
                }
            }
        }
    };
    ($(#[$vattr:meta])* $variant:ident ( $t:ty )) => {
        $(#[$vattr])*
        pub type $variant = $t;

        impl $crate::Reply for $t {
            fn from_response(r: Response) -> Result<$t, ReplyKind> {
                match r {
                    Response::$variant(v) => Ok(v),
                    other => Err(other.kind()),
                }
            }
        }
    };
    ($(#[$vattr:meta])* $variant:ident { $( $(#[$fattr:meta])* $field:ident : $ty:ty ),* $(,)? }) => {
        $(#[$vattr])*
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        pub struct $variant {
            $( $(#[$fattr])* pub $field: $ty, )*
        }

        impl $crate::Reply for $variant {
            fn from_response(r: Response) -> Result<$variant, ReplyKind> {
                match r {
                    Response::$variant { $($field),* } => Ok($variant { $($field),* }),
                    other => Err(other.kind()),
                }
            }
        }
    };
}
pub(crate) use reply_item;

const fn flag_in(flags: &[Flag], f: Flag) -> bool {
    let mut i = 0;
    while i < flags.len() {
        if flags[i] as u8 == f as u8 {
            return true;
        }
        i += 1;
    }
    false
}

/// Properties derived from the rows.
impl Opcode {
    pub const fn idempotent(self) -> bool {
        flag_in(self.flags(), Flag::Idempotent)
    }

    /// Carries bulk data one way (a pipelined connection carries it).
    pub const fn bulk(self) -> bool {
        self.bulk_in() || flag_in(self.flags(), Flag::BulkOut)
    }

    /// The request carries bulk data; no other may.
    pub const fn bulk_in(self) -> bool {
        flag_in(self.flags(), Flag::BulkIn)
    }

    /// Counted in the server's request statistics.
    pub const fn counted(self) -> bool {
        !flag_in(self.flags(), Flag::Uncounted)
    }

    /// A change of the namespace that the metadata server commits through its writer
    /// (group commit, the metadata log).
    pub const fn metadata_mutation(self) -> bool {
        matches!(self.group(), Group::MetaWriteOp)
    }

    pub const fn served_by(self) -> ServedBy {
        self.group().served_by()
    }

    /// Whether `kind` is an answer its row allows.
    pub fn answers(self, kind: ReplyKind) -> bool {
        self.replies().contains(&kind)
    }
}

operations! {
    // Connection (1-9).
    (ConnectionOp 1 => Hello { nonce: [u8; 32] } -> Challenge [] scope() => SECRET, check() => ok())
    (ConnectionOp 2 => Auth { proof: [u8; 32] } -> Done [] scope() => SECRET, check() => ok())
    (AnyOp 3 => Ping {} -> Pong [Idempotent, Uncounted] scope() => ANY, check() => ok())
    // Metadata server (10-59).
    (MetaReadOp 10 => Lookup { parent: InodeId, name: String } -> Attr [Idempotent]
        scope(parent) => reads(Dir(*parent)), check(name) => name_ok(name))
    (MetaReadOp 11 => GetAttr { ino: InodeId } -> Attr [Idempotent]
        scope(ino) => reads(Ino(*ino)), check() => ok())
    (MetaReadOp 12 => Resolve { path: String, follow: bool } -> Attr [Idempotent]
        scope(path) => reads(Path(path)), check(path) => check_path(path))
    (MetaWriteOp 13 => Mkdir { parent: InodeId, name: String, mode: u32 } -> Attr []
        scope(parent) => writes(Dir(*parent)), check(name) => name_ok(name))
    (MetaWriteOp 14 => Create { parent: InodeId, name: String, mode: u32, exclusive: bool, layout: LayoutHint } -> Attr []
        scope(parent) => writes(Dir(*parent)), check(name, layout) => name_ok(name).and(validate_hint(layout)))
    // A FIFO, socket or device node (`rdev` for devices, else 0); devices need root.
    (MetaWriteOp 15 => Mknod { parent: InodeId, name: String, mode: u32, ftype: FileType, rdev: u32 } -> Attr []
        scope(parent) => writes(Dir(*parent)), check(name) => name_ok(name))
    (MetaWriteOp 16 => Symlink { parent: InodeId, name: String, target: String } -> Attr []
        scope(parent) => writes(Dir(*parent)), check(name, target) => check::symlink(name, target))
    (MetaReadOp 17 => Readlink { ino: InodeId } -> Target [Idempotent]
        scope(ino) => reads(Ino(*ino)), check() => ok())
    (MetaWriteOp 18 => Link { ino: InodeId, parent: InodeId, name: String } -> Attr []
        scope(ino, parent) => writes(InoAndDir(*ino, *parent)), check(name) => name_ok(name))
    // Answered with the parent directory's attributes after the removal.
    (MetaWriteOp 19 => Unlink { parent: InodeId, name: String } -> Attr | Done []
        scope(parent) => writes(Dir(*parent)), check(name) => name_ok(name))
    (MetaWriteOp 20 => Rmdir { parent: InodeId, name: String } -> Attr | Done []
        scope(parent) => writes(Dir(*parent)), check(name) => name_ok(name))
    (MetaWriteOp 21 => Rename { src_parent: InodeId, src_name: String, dst_parent: InodeId, dst_name: String, noreplace: bool } -> Done []
        scope(src_parent, dst_parent) => writes(Dirs(*src_parent, *dst_parent)),
        check(src_name, dst_name) => name_ok(src_name).and(name_ok(dst_name)))
    (MetaWriteOp 22 => SetAttr { ino: InodeId, attrs: SetAttrs } -> Attr []
        scope(ino) => writes(Ino(*ino)), check() => ok())
    (MetaReadOp 23 => ReadDir { ino: InodeId, after: String, limit: u32 } -> Entries [Idempotent]
        scope(ino) => reads(Ino(*ino)), check(after, limit) => check::page(after, *limit))
    (MetaOp 24 => Open { ino: InodeId, session: u64, read: bool, write: bool } -> Attr []
        scope(ino, write) => either(Ino(*ino), *write), check() => ok())
    (MetaOp 25 => Close { ino: InodeId, session: u64 } -> Done []
        scope(ino) => reads(Ino(*ino)), check() => ok())
    (MetaWriteOp 26 => ExtendSize { ino: InodeId, size: u64, mtime_ns: i64 } -> Attr | Done [Idempotent]
        scope(ino) => writes(Ino(*ino)), check() => ok())
    (MetaWriteOp 27 => SetLayout { ino: InodeId, hint: LayoutHint } -> Attr []
        scope(ino) => writes(Ino(*ino)), check(hint) => validate_hint(hint))
    (MetaOp 28 => MetaStatus {} -> MetaStatus [Idempotent] scope() => ANY, check() => ok())
    (MetaReadOp 29 => Access { ino: InodeId, mask: u32 } -> Done [Idempotent]
        scope(ino) => reads(Ino(*ino)), check() => ok())
    // Data server (60-99). Offsets and lengths are in the server's local byte space of
    // the file (see stripefs-layout); `unit` is the file's stripe size.
    (DataOp 60 => Write { fid: InodeId, unit: u32, offset: u64, #[serde(with = "crc_list")] crcs: Vec<u32> } -> Written [Idempotent, BulkIn]
        scope(fid) => writes(Fid(*fid)),
        check(unit, offset, crcs; data_len) => check::write(*unit, *offset, crcs, data_len))
    (DataOp 61 => Read { fid: InodeId, unit: u32, offset: u64, len: u32 } -> ReadData [Idempotent, BulkOut]
        scope(fid) => reads(Fid(*fid)), check(unit, offset, len) => check::read(*unit, *offset, *len))
    (DataOp 62 => Truncate { fid: InodeId, unit: u32, local_size: u64 } -> Done [Idempotent]
        scope(fid) => writes(Fid(*fid)), check(unit) => check_unit(*unit))
    (DataOp 63 => Remove { fid: InodeId } -> Done [Idempotent] scope() => SECRET, check() => ok())
    (DataOp 64 => Fsync { fid: InodeId } -> Written [Idempotent]
        scope(fid) => reads(Fid(*fid)), check() => ok())
    (DataOp 65 => DataStatus {} -> DataStatus [Idempotent] scope() => ANY, check() => ok())
    // Drops the server's cached pages of a file (posix_fadvise DONTNEED), so that the next
    // read comes from the disks. Benchmarks use it; it changes no data.
    (DataOp 66 => DropCache { fid: InodeId } -> Done []
        scope(fid) => reads(Fid(*fid)), check() => ok())
    // Metadata server: Create and Open in one round trip and one commit (open(O_CREAT)).
    // Without `exclusive`, an existing regular file is opened instead.
    (MetaOp 67 => CreateOpen { parent: InodeId, name: String, mode: u32, exclusive: bool, layout: LayoutHint, session: u64, read: bool, write: bool } -> Attr []
        scope(parent) => writes(Dir(*parent)), check(name, layout) => name_ok(name).and(validate_hint(layout)))
    // Data server: sparse files (fallocate, SEEK_DATA/SEEK_HOLE, st_blocks). Ranges are
    // in the server's local byte space, as for Write.
    // Frees `len` bytes at `offset`; they read as zeros after (FALLOC_FL_PUNCH_HOLE).
    (DataOp 70 => Punch { fid: InodeId, unit: u32, offset: u64, len: u64 } -> Done []
        scope(fid) => writes(Fid(*fid)), check(unit, offset, len) => check_unit(*unit).and(check_range(*offset, *len)))
    // Reserves space for `len` bytes at `offset` (fallocate mode 0); changes no data.
    (DataOp 71 => Allocate { fid: InodeId, unit: u32, offset: u64, len: u64 } -> Done []
        scope(fid) => writes(Fid(*fid)), check(unit, offset, len) => check_unit(*unit).and(check_range(*offset, *len)))
    // The first local offset at or after `offset` that holds stored data (`hole` false)
    // or is a hole (`hole` true).
    (DataOp 72 => Seek { fid: InodeId, unit: u32, offset: u64, hole: bool } -> Offset []
        scope(fid) => reads(Fid(*fid)), check(unit, offset) => check::seek(*unit, *offset))
    // Bytes the server's objects of `fid` occupy on its disks.
    (DataOp 73 => Allocated { fid: InodeId } -> Allocated []
        scope(fid) => reads(Fid(*fid)), check() => ok())
    // Data server, for fsck and scrub. Lists the file ids the server holds objects of,
    // in the order (fid % 256, fid), starting after the cursor `after` (None: from the
    // start).
    (DataOp 74 => ListObjects { after: Option<InodeId>, limit: u32 } -> Objects []
        scope() => SECRET, check(limit) => check::list_objects(*limit))
    // Reads up to `SCRUB_REQUEST_BYTES` of object bytes of `fid` on `target` from object
    // offset `offset` and checks every written block against its stored checksum.
    (DataOp 75 => Scrub { fid: InodeId, target: u32, offset: u64 } -> Scrubbed []
        scope() => SECRET, check(offset) => check::scrub(*offset))
    // The background scrubber's counters.
    (DataOp 76 => ScrubStatus {} -> ScrubStatus [Uncounted] scope() => SECRET, check() => ok())
    // Metadata server: client sessions with leases (see docs/protocol.md, Sessions).
    (MetaOp 30 => SessionOpen {} -> Session [] scope() => ANY, check() => ok())
    // Extends the session's lease; or `SessionExpired`.
    (MetaOp 31 => SessionRenew { session: u64 } -> Session [] scope() => ANY, check() => ok())
    // Ends the session: its opens are released at once.
    (MetaOp 32 => SessionEnd { session: u64 } -> Done [] scope() => ANY, check() => ok())
    // Version 4: the host the client runs on (sent once after the handshake, on any
    // server); the connection's later requests are that host's.
    (ConnectionOp 4 => ClientHost { host: String } -> Done [] scope() => ANY, check(host) => validate_host(host))
    // Data server: list I/O. One request writes many (offset, length) extents of the
    // server's local byte space; the data is the extents' bytes in order, and `crcs` one
    // CRC per block-bounded piece of each extent in turn (as Write's, extent by extent).
    // Extents are written in order (a later one wins where they overlap).
    (DataOp 80 => WriteList { fid: InodeId, unit: u32, extents: Vec<(u64, u32)>, #[serde(with = "crc_list")] crcs: Vec<u32> } -> Written [BulkIn]
        scope(fid) => writes(Fid(*fid)),
        check(unit, extents, crcs; data_len) => check::write_list(*unit, extents, crcs, data_len))
    // Data server: its locality counters (bulk bytes with clients on its own host and on
    // others, short-circuit opens).
    (DataOp 82 => LocalityStatus {} -> LocalityStatus [Uncounted] scope() => ANY, check() => ok())
    // Metadata server: the data servers, in id order, with the address remote clients
    // reach each at (its `advertise`, else its address) and its host. A client file may
    // then name only the metadata server.
    (MetaOp 33 => DataServers {} -> DataServers [] scope() => ANY, check() => ok())
    // From now on this connection's bulk data may be compressed with `codec` (0 off, 1
    // lz4, 2 zstd at `level`, 3 auto) in both directions, marked by FLAG_COMPRESSED
    // (docs/protocol.md "Compression"); InvalidArgument for a codec the server does not
    // know.
    (ConnectionOp 90 => SetCompression { codec: u8, level: i8 } -> Done [] scope() => ANY, check() => ok())
    // Data: many block-aligned ranges of one object in one request (list I/O for
    // noncontiguous reads). Answered with the checksums of every block of every range,
    // in order, and the ranges' bytes one after another as the data.
    (DataOp 81 => ReadList { fid: InodeId, unit: u32, ranges: Vec<(u64, u32)> } -> ReadData [Idempotent, BulkOut]
        scope(fid) => reads(Fid(*fid)), check(unit, ranges) => check::read_list(*unit, ranges))
    // Handshake with a scoped token instead of the cluster secret: `token` is the
    // token's payload; the challenge is keyed by the token (rpc token.rs).
    (ConnectionOp 5 => TokenHello { nonce: [u8; 32], token: Vec<u8> } -> Challenge [] scope() => SECRET, check() => ok())
    // Metadata: refuse the token with this id from now on (remembered across restarts).
    (MetaOp 91 => TokenRevoke { id: u64 } -> Done [] scope() => SECRET, check() => ok())
    // Metadata, from a data server: may a connection authenticated with this token
    // touch file `fid` (for writing if `write`)? `Done`, or the refusal.
    (MetaOp 92 => TokenAllows { token: Vec<u8>, fid: InodeId, write: bool } -> Done [] scope() => SECRET, check() => ok())
    // Metadata, version 5: inline files (docs/objects.md, "Inline files"). Writes pieces
    // into an inline file's bytes in one commit; the size grows to the last piece's end,
    // the mtime to `mtime_ns` (when the writes were made, as ExtendSize's). Or
    // `NotInline` when the file is not inline (any more) or the bytes would pass its
    // threshold: the writer then sends `Uninline` and writes to the data servers.
    (MetaWriteOp 34 => WriteInline { ino: InodeId, pieces: Vec<InlinePiece>, mtime_ns: i64 } -> Attr []
        scope(ino) => writes(Ino(*ino)), check(pieces) => validate_inline_pieces(pieces))
    // The inline bytes of a file (read access): its `Attr` carrying them, or without
    // `inline` if the file lives on its data servers.
    (MetaReadOp 35 => ReadInline { ino: InodeId } -> Attr [] scope(ino) => reads(Ino(*ino)), check() => ok())
    // Moves an inline file's bytes to its data servers (write access), durably, before
    // answering with its `Attr`; a file not inline is answered at once.
    (MetaOp 36 => Uninline { ino: InodeId } -> Attr [] scope(ino) => writes(Ino(*ino)), check() => ok())
    // Extended attributes (docs/protocol.md, "Extended attributes"). The value of
    // attribute `name`, or `NoAttr`.
    (MetaReadOp 37 => GetXattr { ino: InodeId, name: String } -> Xattr []
        scope(ino) => reads(Ino(*ino)), check(name) => xattr_name_ok(name))
    // The names of the attributes the caller may see.
    (MetaReadOp 38 => ListXattr { ino: InodeId } -> XattrNames [] scope(ino) => reads(Ino(*ino)), check() => ok())
    // Sets attribute `name` to `value`; `mode` 0 creates or replaces, 1 only creates
    // (`Exists` if present: XATTR_CREATE), 2 only replaces (`NoAttr` if absent:
    // XATTR_REPLACE). Answered with the inode's `Attr` (its ctime moved).
    (MetaWriteOp 39 => SetXattr { ino: InodeId, name: String, value: Vec<u8>, mode: u8 } -> Attr []
        scope(ino) => writes(Ino(*ino)), check(name, value, mode) => check::set_xattr(name, value, *mode))
    // Removes attribute `name`; `Attr`, or `NoAttr`.
    (MetaWriteOp 40 => RemoveXattr { ino: InodeId, name: String } -> Attr []
        scope(ino) => writes(Ino(*ino)), check(name) => xattr_name_ok(name))
    // Resolve (following symlinks, as open(2) without O_NOFOLLOW) and Open in one round
    // trip: opens the regular file `path` names; answered as Open is (`Attr`, with the
    // inline bytes for a reader).
    (MetaOp 41 => OpenPath { path: String, session: u64, read: bool, write: bool } -> Attr []
        scope(path, write) => either(OpenPath(path), *write), check(path) => check_path(path))
    // Swaps two existing entries atomically (renameat2 RENAME_EXCHANGE): `a_name` in
    // `a_parent` then names what `b_name` in `b_parent` named, and the other way round;
    // they may be of different types. `a_ino` and `b_ino` are the inodes the client found
    // at the names: unless the names still name them, the exchange is refused with
    // `StaleHandle` (so a repeated request cannot swap them back).
    (MetaWriteOp 42 => Exchange { a_parent: InodeId, a_name: String, a_ino: InodeId, b_parent: InodeId, b_name: String, b_ino: InodeId } -> Done []
        scope(a_parent, b_parent) => writes(Dirs(*a_parent, *b_parent)),
        check(a_name, b_name) => name_ok(a_name).and(name_ok(b_name)))
    // As WriteInline, but answered once the change is applied and visible to every
    // client, before it is durable (a close's bytes: close is not fsync). It is durable
    // once the log record of its batch is written, which happens before any later change
    // is answered, and before a SyncMeta is answered.
    (MetaWriteOp 43 => WriteInlineUnsynced { ino: InodeId, pieces: Vec<InlinePiece>, mtime_ns: i64 } -> Attr []
        scope(ino) => writes(Ino(*ino)), check(pieces) => validate_inline_pieces(pieces))
    // `Done` once every change answered before it arrived is durable (an fsync of an
    // inline file after WriteInlineUnsynced). `session`: the client's session when the
    // server answered the unsynced changes this fsync covers; a server that did not start
    // it (it restarted since, and may have lost them) answers `ServerRestarted`. 0:
    // nothing to check.
    (MetaOp 44 => SyncMeta { session: u64 } -> Done [] scope() => ANY, check() => ok())
    // As ExtendSize, answered once the change is applied and visible, before it is
    // durable (a close's or flush's size; fsync sends ExtendSize), written as
    // WriteInlineUnsynced's is.
    (MetaWriteOp 45 => ExtendSizeUnsynced { ino: InodeId, size: u64, mtime_ns: i64 } -> Attr | Done []
        scope(ino) => writes(Ino(*ino)), check() => ok())
    // Data server: each target's size and free bytes as its file system reports them
    // (statvfs), without counting what the objects occupy as DataStatus does (a walk of
    // every object file). What a client's statfs needs (`df` through the mount): one
    // system call per target, whatever the number of objects.
    (DataOp 83 => Space {} -> Space [Idempotent] feature(SPACE) scope() => ANY, check() => ok())
    // As ReadDir, each entry with its attributes (as Lookup answers them, inline bytes
    // not included), so that a listing followed by a stat of every entry (`ls -l`,
    // `find`, `du`) is one round trip per page, not one per entry. Needs read and search
    // permission on the directory. A page ends early (not `done`) before its body passes
    // `READDIRPLUS_BODY_BYTES`.
    (MetaReadOp 46 => ReadDirPlus { ino: InodeId, after: String, limit: u32 } -> EntriesPlus [Idempotent] feature(READDIR_PLUS)
        scope(ino) => reads(Ino(*ino)), check(after, limit) => check::page(after, *limit))
    // The features the sender has (a client's, then the server's in its answer); sent
    // right after the handshake. A server that predates it refuses it (BadFrame) and has
    // no features.
    (ConnectionOp 6 => Features { features: crate::Features } -> Features [Idempotent] scope() => ANY, check() => ok())
    // Metadata: the namespace's inodes in use, what `df -i` shows (statfs's f_files and
    // f_ffree).
    (MetaReadOp 47 => Statfs {} -> Statfs [Idempotent] feature(STATFS) scope() => ANY, check() => ok())
    // Same-host socket (100-109): a data server serves these only on its Unix socket
    // (docs/protocol.md "Short-circuit socket"), to a client on its host that proved it
    // knows the cluster secret; over TCP they are refused. Descriptors travel beside the
    // frames (SCM_RIGHTS).
    //
    // The read-only descriptors of `fid`'s data file and checksum sidecar on every
    // target, attached in target order as the answer's flags say.
    (SameHostOp 100 => LocalOpen { fid: InodeId } -> LocalFiles [Idempotent] scope() => SECRET, check() => ok())
    // The read end of the connection's pipe is attached (once, before its first write).
    (SameHostOp 101 => LocalPipe {} -> Done [] scope() => SECRET, check() => ok())
    // `len` bytes of whole blocks wait in the connection's pipe; `crcs` one per block.
    (SameHostOp 102 => LocalWrite { fid: InodeId, unit: u32, offset: u64, len: u32, #[serde(with = "crc_list")] crcs: Vec<u32> } -> Written []
        scope() => SECRET, check(unit, offset, len, crcs) => check::local_write(*unit, *offset, *len, crcs))
    // The extents' bytes wait in the pipe, in order; written as a WriteList from TCP.
    (SameHostOp 103 => LocalWriteList { fid: InodeId, unit: u32, extents: Vec<(u64, u32)>, #[serde(with = "crc_list")] crcs: Vec<u32> } -> Written []
        scope() => SECRET, check(unit, extents, crcs) => check::local_write_list(*unit, extents, crcs))
    // Asks for the places of a range of hole blocks, to write them itself (`Granted`,
    // with write descriptors of the data files and the fence attached).
    (SameHostOp 104 => LocalDirect { fid: InodeId, unit: u32, offset: u64, len: u32 } -> Granted []
        scope() => SECRET, check(unit, offset, len) => check::local_direct(*unit, *offset, *len))
    // Ends the connection's grant: the CRC of every block of its range, or `None` when
    // the client could not write every piece whole (the blocks stay holes).
    (SameHostOp 105 => LocalDirectDone { crcs: Option<Vec<u32>> } -> Written []
        scope() => SECRET, check(crcs) => check::local_direct_done(crcs))
}

/// A request that passed [`Request::validate`] with the bulk data that came with it:
/// made only by [`Valid::check`], so a server's handlers, which take this type, never
/// see an unchecked request and never check one again.
#[derive(Clone, Debug, PartialEq)]
pub struct Valid {
    env: crate::Envelope,
}

impl Valid {
    /// Checks `env`'s request for its `data_len` bytes of bulk data.
    pub fn check(env: crate::Envelope, data_len: u32) -> Result<Valid, WireError> {
        env.req.validate(data_len)?;
        Ok(Valid { env })
    }

    pub fn req(&self) -> &Request {
        &self.env.req
    }

    pub fn cred(&self) -> &crate::Cred {
        &self.env.cred
    }

    pub fn opcode(&self) -> Opcode {
        self.env.req.opcode()
    }

    /// Acts as `cred` instead (a scoped token's user).
    pub fn set_cred(&mut self, cred: crate::Cred) {
        self.env.cred = cred;
    }

    pub fn into_env(self) -> crate::Envelope {
        self.env
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{reply, Attr};

    fn attr() -> Attr {
        Attr {
            ino: InodeId(5),
            ftype: FileType::File,
            mode: 0o644,
            nlink: 1,
            uid: 1,
            gid: 2,
            size: 3,
            atime_ns: 4,
            mtime_ns: 5,
            ctime_ns: 6,
            rdev: 0,
            layout: None,
            dir_layout: LayoutHint::default(),
            inline: None,
        }
    }

    #[test]
    fn a_typed_request_is_its_rows_request() {
        let r: Request = op::Lookup {
            parent: InodeId(1),
            name: "a".into(),
        }
        .into();
        assert_eq!(r.opcode(), <op::Lookup as Operation>::OPCODE);
        assert_eq!(
            r,
            Request::Lookup {
                parent: InodeId(1),
                name: "a".into()
            }
        );
        let r: Request = op::Statfs {}.into();
        assert_eq!(r.opcode(), Opcode::Statfs);
    }

    #[test]
    fn a_reply_converts_only_from_its_variant() {
        let a = attr();
        // `-> Attr`: the attributes; anything else is given back.
        let got = <op::GetAttr as Operation>::Reply::from_response(Response::Attr(a.clone()));
        assert_eq!(got, Ok(a.clone()));
        let got = <op::GetAttr as Operation>::Reply::from_response(Response::Done);
        assert_eq!(got, Err(ReplyKind::Done));
        // `-> Attr | Done`: `Some` of the attributes, or `None`.
        type UnlinkReply = <op::Unlink as Operation>::Reply;
        assert_eq!(UnlinkReply::from_response(Response::Done), Ok(None));
        assert_eq!(
            UnlinkReply::from_response(Response::Attr(a.clone())),
            Ok(Some(a))
        );
        let pong = Response::Pong {
            role: crate::Role::Meta,
            server_id: None,
            version: "x".into(),
        };
        assert_eq!(
            UnlinkReply::from_response(pong.clone()),
            Err(ReplyKind::Pong)
        );
        // `-> Done`: the unit type.
        type RenameReply = <op::Rename as Operation>::Reply;
        assert_eq!(RenameReply::from_response(Response::Done), Ok(()));
        assert_eq!(RenameReply::from_response(pong), Err(ReplyKind::Pong));
        // A struct variant: its fields.
        let s = <op::Statfs as Operation>::Reply::from_response(Response::Statfs {
            inodes: 3,
            files: 2,
            dirs: 1,
        });
        assert_eq!(
            s,
            Ok(reply::Statfs {
                inodes: 3,
                files: 2,
                dirs: 1
            })
        );
    }
}
