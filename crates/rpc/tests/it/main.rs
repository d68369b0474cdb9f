//! The RPC layer's integration tests, gathered in one test binary: each test binary
//! links the whole stack, and one link costs much less than many. Two stay in binaries
//! of their own, as they change process-wide state the tests beside them would feel:
//! tests/limits.rs lowers RLIMIT_NOFILE to run out of descriptors (the other tests'
//! sockets and files would fail with EMFILE), and tests/flood.rs raises it and holds
//! MAX_CONNECTIONS + 100 connections at both ends in this process (about 8,400
//! descriptors of the process's table, on a time limit).

#[path = "../common/mod.rs"]
mod common;

mod pipe;
mod server;
mod tls;
