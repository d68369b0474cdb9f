//! `stripefs`, the one binary: servers, the local cluster launcher, file commands and
//! benchmarks. It is a thin layer: argument parsing, output formatting and process
//! management here; everything else lives in the library crates.

mod cluster;
mod fsops;
mod mount;
mod serve;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "stripefs",
    version,
    about = "A parallel file system for clusters of commodity machines",
    long_about = "stripefs turns the disks of many nodes into one fast namespace: files are \
                  striped over data servers, and inside a server over its local disks.\n\n\
                  Start a throwaway local cluster with `stripefs cluster up --dir DIR`, then \
                  point client commands at DIR/cluster.toml with --cluster or STRIPEFS_CLUSTER."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start, stop and inspect a cluster of servers on this machine.
    #[command(subcommand)]
    Cluster(cluster::ClusterCmd),
    /// Run one server in the foreground (for real multi-host deployments).
    Serve(serve::ServeArgs),
    /// Copy a local file into stripefs.
    Put(fsops::PutArgs),
    /// Copy a file out of stripefs.
    Get(fsops::GetArgs),
    /// List a directory.
    Ls(fsops::LsArgs),
    /// Show a file's attributes.
    Stat(fsops::PathArgs),
    /// Make a directory.
    Mkdir(fsops::MkdirArgs),
    /// Remove files (and directories with -r).
    Rm(fsops::RmArgs),
    /// Rename or move a file or directory.
    Mv(fsops::MvArgs),
    /// Set the striping of a file (before it has data) or the default of a directory.
    Setstripe(fsops::SetstripeArgs),
    /// Show the striping of a file or directory.
    Getstripe(fsops::PathArgs),
    /// Mount the cluster as a POSIX file system (FUSE).
    Mount(mount::MountArgs),
    /// Unmount a stripefs mount.
    Umount(mount::UmountArgs),
    /// Benchmarks (each prints a table; --json FILE writes the figures).
    #[command(subcommand)]
    Bench(stripefs_bench::BenchCmd),
    /// The main job: start a throwaway local cluster, run the headline benchmarks, stop it.
    Demo(stripefs_bench::demo::DemoArgs),
}

fn main() {
    let cli = Cli::parse();
    let result: Result<()> = match cli.cmd {
        Cmd::Cluster(c) => cluster::run(c),
        Cmd::Serve(a) => serve::run(a),
        Cmd::Put(a) => fsops::put(a),
        Cmd::Get(a) => fsops::get(a),
        Cmd::Ls(a) => fsops::ls(a),
        Cmd::Stat(a) => fsops::stat(a),
        Cmd::Mkdir(a) => fsops::mkdir(a),
        Cmd::Rm(a) => fsops::rm(a),
        Cmd::Mv(a) => fsops::mv(a),
        Cmd::Setstripe(a) => fsops::setstripe(a),
        Cmd::Getstripe(a) => fsops::getstripe(a),
        Cmd::Mount(a) => mount::mount(a),
        Cmd::Umount(a) => mount::umount(a),
        Cmd::Bench(b) => stripefs_bench::run(b, exe()),
        Cmd::Demo(a) => stripefs_bench::demo::run(a, exe()),
    };
    if let Err(e) = result {
        eprintln!("stripefs: error: {e:#}");
        std::process::exit(1);
    }
}

fn exe() -> PathBuf {
    std::env::current_exe().unwrap_or_else(|_| PathBuf::from("stripefs"))
}
