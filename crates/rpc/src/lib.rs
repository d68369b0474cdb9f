//! Connections between stripefs clients and servers.
//!
//! [`Conn`] is one authenticated TCP connection on which a client sends a request and
//! waits for its response (one in flight at a time; clients keep a pool per server for
//! parallelism). [`serve`] runs a server: an acceptor thread drives every new
//! connection's handshake without a thread of its own, within budgets that a flood
//! cannot use to lock real clients out; each authenticated connection then gets a
//! thread that passes decoded, validated requests to a [`Service`]. Every limit on
//! peers is named in [`limits`].
//!
//! Fault model: the peer may send anything, stall, or vanish. Every read and write has a
//! timeout; a bad frame gets an error response naming the reason and the connection is
//! closed; a server thread never panics on peer input, and one bad peer does not affect
//! others. Errors that reach callers name the address of the server involved.

mod accept;
pub mod auth;
pub mod compress;
pub mod config;
mod conn;
pub mod fdplace;
mod frame;
pub mod host;
pub mod limits;
pub mod local;
mod payload;
pub mod samehost;
mod server;
pub mod tls;
pub mod token;
pub mod units;

pub use auth::Secret;
pub use config::{
    parse_rate_or_off, ClusterConfig, DataServerEntry, Defaults, ServerConfig, DEFAULT_INLINE_BYTES,
};
pub use conn::{Conn, Pipe, DEFAULT_TIMEOUT_MS, MAX_PENDING};
pub use limits::Limits;
pub use server::{
    serve, serve_tls, serve_with, ConnInfo, ConnStats, Part, Payload, Reply, Service,
    MAX_CONNECTIONS,
};
