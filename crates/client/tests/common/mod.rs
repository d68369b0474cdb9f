//! The test kit's in-process cluster (crates/testkit/src/cluster.rs) and helpers, as the
//! client's integration tests name them.

#[allow(unused_imports)] // Each test binary uses a different part.
pub use stripefs_testkit::cluster::*;
#[allow(unused_imports)]
pub use stripefs_testkit::{pattern, seed, skip};
