//! `stripefs bench transpose`: the transpose streaming application of seed 002.

use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Clone, Debug)]
pub struct TransposeArgs {
    /// Cluster description file.
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    pub cluster: PathBuf,
    /// Matrix side M, in 8-byte elements (the matrix is M x M).
    #[arg(long, default_value_t = 8192)]
    pub m: u64,
    /// Block side B, in elements (the matrix is stored as (M/B) x (M/B) blocks of B x B).
    #[arg(long, default_value_t = 512)]
    pub b: u64,
    /// Concurrent clients; block rows are dealt to them round-robin.
    #[arg(long, default_value_t = 4)]
    pub clients: u32,
    /// Directory in stripefs for the test.
    #[arg(long, default_value = "/bench-transpose")]
    pub path: String,
    /// Write the figures as one JSON object to FILE.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

pub fn run(_a: TransposeArgs) -> Result<serde_json::Value> {
    bail!("bench transpose: not implemented yet")
}
