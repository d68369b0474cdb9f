//! The metadata server's integration tests, gathered in one test binary:
//! each test binary links the whole stack, and one link costs much less than many.

#[path = "../common/mod.rs"]
mod common;

mod concurrency;
mod inline;
mod legacy_format;
mod meta_log;
mod model;
mod no_space;
mod ops;
mod perm;
mod power_cut;
mod purge;
mod sessions;
mod sim_hooks;
mod times_names;
mod xattr;
