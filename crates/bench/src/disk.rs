//! `stripefs bench disk DIR`: a bonnie-like local disk test (seeds 000 and 003).

use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;
use stripefs_rpc::units::parse_size;

#[derive(Args, Clone, Debug)]
pub struct DiskArgs {
    /// Local directory (or storage target) to test.
    pub dir: PathBuf,
    /// Size of the test file for block write, rewrite, read and seeks.
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    pub size: u64,
    /// Block size of the sequential phases.
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    pub block: u64,
    /// Random seeks to time.
    #[arg(long, default_value_t = 4000)]
    pub seeks: u32,
    /// Files for the sequential create, stat and delete phases.
    #[arg(long, default_value_t = 10000)]
    pub files: u32,
    /// Write the figures as one JSON object to FILE.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

pub fn run(_a: DiskArgs) -> Result<serde_json::Value> {
    bail!("bench disk: not implemented yet")
}
