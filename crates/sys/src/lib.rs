//! stripefs's system interfaces (docs/ARCHITECTURE.md "The system-interface crate").
//!
//! Everything a server asks of the operating system that a simulation must be able to
//! replace goes through this crate, once, for the metadata server, the data server, the
//! client's same-host path and the simulator alike. Each interface comes with its real
//! implementation and its simulated twin.

pub mod clock;
pub mod fence;
pub mod fileio;
pub mod memdisk;
pub mod memstore;
pub mod metadisk;
pub mod powercut;
pub mod signals;
pub mod storage;
