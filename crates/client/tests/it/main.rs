//! The client's integration tests against in-process clusters, gathered in one test binary:
//! each test binary links the whole stack, and one link costs much less than many.

#[path = "../common/mod.rs"]
mod common;

mod compress;
mod faults;
mod gather;
mod idle;
mod inline;
mod io;
mod namespace;
mod pipeline;
mod sessions;
mod short_circuit;
mod sparse;
