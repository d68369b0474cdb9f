//! `stripefs demo`: the main job on an embedded default. Starts a throwaway local cluster
//! of throttled targets (so the figures mean something on any machine: the ceiling is the
//! sum of the emulated disk rates), runs the headline benchmark against it and against a
//! local directory, prints the table, and stops the cluster, also on failure.

use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;
use stripefs_rpc::units::{parse_rate, parse_size};
use stripefs_rpc::Defaults;

#[derive(Args, Clone, Debug)]
pub struct DemoArgs {
    /// Data servers of the throwaway cluster.
    #[arg(long, default_value_t = 8)]
    pub servers: u32,
    /// Targets (emulated disks) per data server.
    #[arg(long, default_value_t = 2)]
    pub targets: u32,
    /// Rate of each emulated disk.
    #[arg(long, default_value = "25MiB", value_parser = parse_rate)]
    pub throttle: u64,
    /// Bytes each of the 4 clients writes and reads.
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    pub block: u64,
    /// Where to put the throwaway cluster (default: a new temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Where to write the JSON results.
    #[arg(long, default_value = "stripefs-report")]
    pub report: PathBuf,
}

/// Stops the cluster when dropped, so that a failing benchmark leaves no servers behind.
struct ClusterGuard(PathBuf);

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        if let Err(e) = stripefs_launch::down(&self.0) {
            eprintln!(
                "warning: stopping the demo cluster in {}: {e:#}",
                self.0.display()
            );
        }
    }
}

pub fn run(a: DemoArgs, exe: PathBuf) -> Result<()> {
    let tmp;
    let dir = match &a.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::Builder::new()
                .prefix("stripefs-demo-")
                .tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    println!(
        "stripefs demo: starting a local cluster of {} data servers x {} targets, each target throttled to {} MiB/s, in {}",
        a.servers,
        a.targets,
        a.throttle >> 20,
        dir.display()
    );
    let up = stripefs_launch::up(&stripefs_launch::UpOptions {
        dir: dir.clone(),
        servers: a.servers,
        targets: a.targets,
        throttle_bytes_s: Some(a.throttle),
        defaults: Defaults::default(),
        host: "127.0.0.1".into(),
        exe,
    })?;
    let _guard = ClusterGuard(dir.clone());
    std::fs::create_dir_all(&a.report)
        .with_context(|| format!("cannot create {}", a.report.display()))?;
    let baseline = dir.join("baseline");
    let io = crate::io::IoArgs {
        cluster: up.cluster_file.clone(),
        clients: 4,
        block: a.block,
        xfer: 1 << 20,
        file_per_process: false,
        stripe_size: None,
        stripe_count: None,
        path: "/bench-io".into(),
        baseline: Some(baseline),
        json: Some(a.report.join("io.json")),
        keep: false,
    };
    println!();
    crate::io::run(io)?;
    println!();
    println!("results written to {}/", a.report.display());
    Ok(())
}
