//! `stripefs bench sweep`: repeats `bench io` over values of one parameter.

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Vary {
    StripeSize,
    Servers,
    Clients,
    Xfer,
}

#[derive(Args, Clone, Debug)]
pub struct SweepArgs {
    /// The parameter to vary.
    #[arg(long, value_enum)]
    pub vary: Vary,
    /// Its values, comma-separated (sizes like 64K,1M for stripe-size and xfer).
    #[arg(long, value_delimiter = ',', required = true)]
    pub values: Vec<String>,
    /// Further `bench io` arguments, as one string (e.g. "--clients 4 --block 64M").
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    pub base_args: String,
    /// Cluster description file (not used with --vary servers, which starts its own).
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    pub cluster: Option<PathBuf>,
    /// For --vary servers: targets per data server of the clusters it starts.
    #[arg(long, default_value_t = 1)]
    pub targets: u32,
    /// For --vary servers: per-target throttle of the clusters it starts.
    #[arg(long, value_parser = stripefs_rpc::units::parse_rate)]
    pub throttle: Option<u64>,
    /// Run the same pattern on this local directory as the same-run reference.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Write the results as one JSON array to FILE.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw write and read throughput against the parameter to FILE.png.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

pub fn run(_a: SweepArgs, _exe: PathBuf) -> Result<serde_json::Value> {
    bail!("bench sweep: not implemented yet")
}
