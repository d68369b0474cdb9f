//! Benchmarks of stripefs, run as `stripefs bench <name>`, and the `stripefs demo`.
//!
//! Every benchmark prints a human table and, with `--json FILE`, writes one JSON object
//! holding its parameters and measured figures. Figures are only meaningful as ratios
//! to a reference measured in the same run (the sum of the emulated disk rates, or the
//! same access pattern on a local directory), because the machines we run on are shared
//! and noisy; each benchmark measures and reports that reference beside its own figure.

pub mod demo;
pub mod io;
mod pattern;
mod util;

use anyhow::Result;
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum BenchCmd {
    /// mpi-io-test: N clients each write a contiguous block of one shared file (or one file
    /// each), fsync, then read back another client's block and verify it.
    Io(io::IoArgs),
}

pub fn run(cmd: BenchCmd, _exe: PathBuf) -> Result<()> {
    match cmd {
        BenchCmd::Io(a) => io::run(a).map(|_| ()),
    }
}
