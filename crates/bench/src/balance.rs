//! `stripefs bench balance`: the Disk/Net balance test of seed 001.

use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Clone, Debug)]
pub struct BalanceArgs {
    /// Cluster description file.
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    pub cluster: PathBuf,
    /// Producer-consumer pairs (default: half the data servers, at least 1).
    #[arg(long)]
    pub pairs: Option<u32>,
    /// File sizes to copy, comma-separated.
    #[arg(long, default_value = "1M,2M,4M,8M,16M", value_delimiter = ',', value_parser = stripefs_rpc::units::parse_size)]
    pub sizes: Vec<u64>,
    /// Files each producer copies per measurement.
    #[arg(long, default_value_t = 4)]
    pub files: u32,
    /// Directory in stripefs for the test.
    #[arg(long, default_value = "/bench-balance")]
    pub path: String,
    /// Write the figures as one JSON object to FILE.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw throughput against the mix of pairs to FILE.png.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

pub fn run(_a: BalanceArgs) -> Result<serde_json::Value> {
    bail!("bench balance: not implemented yet")
}
