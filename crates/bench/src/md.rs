//! `stripefs bench md`: mpi-md-test (seed 003) and the mdtest-easy pattern.

use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Clone, Debug)]
pub struct MdArgs {
    /// Cluster description file.
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    pub cluster: PathBuf,
    /// Concurrent clients (threads, each with its own client and connections).
    #[arg(long, default_value_t = 4)]
    pub clients: u32,
    /// Files each client creates, stats and removes in each phase.
    #[arg(long, default_value_t = 1000)]
    pub files: u32,
    /// Directory in stripefs for the test.
    #[arg(long, default_value = "/bench-md")]
    pub path: String,
    /// Write the figures as one JSON object to FILE.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

pub fn run(_a: MdArgs) -> Result<serde_json::Value> {
    bail!("bench md: not implemented yet")
}
