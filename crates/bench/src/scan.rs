//! `stripefs bench scan`: the scan streaming application of seed 002.

use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;
use stripefs_rpc::units::parse_size;

#[derive(Args, Clone, Debug)]
pub struct ScanArgs {
    /// Cluster description file.
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    pub cluster: PathBuf,
    /// Bytes of records in the input file.
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    pub size: u64,
    /// Bytes per record.
    #[arg(long, default_value = "4K", value_parser = parse_size)]
    pub record: u64,
    /// Fraction of records selected (their key falls in the range).
    #[arg(long, default_value_t = 0.1)]
    pub select: f64,
    /// Concurrent clients, each scanning a contiguous part of the input.
    #[arg(long, default_value_t = 4)]
    pub clients: u32,
    /// Directory in stripefs for the test.
    #[arg(long, default_value = "/bench-scan")]
    pub path: String,
    /// Write the figures as one JSON object to FILE.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

pub fn run(_a: ScanArgs) -> Result<serde_json::Value> {
    bail!("bench scan: not implemented yet")
}
