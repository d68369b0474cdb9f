//! The interception library's shim, `libstripefs_preload.so`, is C (shim/shim.c), built
//! by this crate's build script into the profile's directory (target/release); the
//! native client behind it is crates/preload-engine. This crate holds no Rust code but
//! its tests (tests/preload.rs), which run unmodified programs with the library on a
//! real cluster and mount.
