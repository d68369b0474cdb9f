//! The stripefs command's integration tests (real server processes, mounts), gathered
//! in one test binary: each test binary links the whole stack, and one link costs much
//! less than many. Two stay in binaries of their own, as they change process-wide state
//! the tests beside them would feel: tests/flood.rs raises RLIMIT_NOFILE and holds about
//! 6,000 connections in this process (its descriptor table, which children inherit
//! the limit of), and tests/fuse_times_names.rs moves the process's working directory
//! into a mount and then to / (children started meanwhile by other tests would hold
//! the mount busy, and relative paths would change under them).

#[path = "../common/mod.rs"]
mod common;

mod bench_md_disk;
mod bench_patterns;
mod bench_stream;
mod bench_sweep_demo;
mod cluster_cli;
mod enospc;
mod faults;
mod fsck;
mod fuse_cache;
mod fuse_fsx;
mod fuse_posix;
mod fuse_sparse;
mod hosts;
mod meta_log_cli;
mod netns;
mod posix_matrix;
mod tls;
mod tokens;
mod wan_emu;
