//! `stripefs`, the one binary: servers, the local cluster launcher, file commands and
//! benchmarks. It is a thin layer: argument parsing, output formatting and process
//! management here; everything else lives in the library crates.

mod cluster;
mod fsck;
mod fsops;
mod metalog;
mod mount;
mod run;
mod serve;
mod sim;
mod token;
mod wan;
mod xattr;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "stripefs",
    version,
    about = "A parallel file system for clusters of commodity machines",
    long_about = "stripefs turns the disks of many nodes into one fast namespace: files are \
                  striped over data servers, and inside a server over its local disks.\n\n\
                  Start a throwaway local cluster with `stripefs cluster up --dir DIR`, then \
                  point client commands at DIR/cluster.toml with --cluster (before or after \
                  the command) or STRIPEFS_CLUSTER."
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
    /// Check a cluster (live with --cluster, stopped with --dir): namespace, orphan
    /// objects, and a scrub of every stored block; exit status 1 on damage.
    Fsck(fsck::FsckArgs),
    /// Benchmarks (each prints a table; --json FILE writes the figures).
    #[command(subcommand)]
    Bench(stripefs_bench::BenchCmd),
    /// The main job: start a throwaway local cluster, run the headline benchmarks, stop it.
    Demo(stripefs_bench::demo::DemoArgs),
    /// Capacity planning with seed 002's bus model (READ2): the peak stream rate of a
    /// streaming application on given node rates, relayed through servers and direct, and
    /// which resource binds; --measured puts a bench run's figures beside it.
    Plan(stripefs_bench::plan::PlanArgs),
    /// Whole-cluster simulator: servers and clients in one process under injected faults
    /// (crashes, power cuts, ENOSPC, lost/duplicated/reordered messages, partitions),
    /// checked against what the file system promised. Exit status 1 on a violation.
    Sim(sim::SimArgs),
    /// Offline check and repair of a stopped metadata server's log.
    #[command(subcommand, name = "meta-log")]
    MetaLog(metalog::MetaLogCmd),
    /// Emulate a wide-area link in front of a server: a TCP relay adding a round-trip
    /// time, a window per connection and one shared rate limit (works for any TCP
    /// program).
    #[command(name = "wan-emu")]
    WanEmu(wan::WanArgs),
    /// Scoped tokens for collaborators: a subtree, read-only or not, an expiry; they
    /// authenticate instead of the cluster secret.
    #[command(subcommand)]
    Token(token::TokenCmd),
    /// Extended attributes of a file: list, get, set, rm (the mount serves getfattr and
    /// setfattr itself).
    #[command(subcommand)]
    Xattr(xattr::XattrCmd),
    /// Run a program with the interception library preloaded: its reads and writes of
    /// files on a stripefs mount go through the native client, past FUSE
    /// (`stripefs run -- dd if=... of=/mnt/sfs/x bs=4k`).
    Run(run::RunArgs),
}

fn main() {
    let cli = Cli::parse_from(hoist_cluster(std::env::args_os().collect()));
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
        Cmd::Fsck(a) => fsck::run(a),
        Cmd::Bench(b) => stripefs_bench::run(b, exe()),
        Cmd::Demo(a) => stripefs_bench::demo::run(a, exe()),
        Cmd::Plan(a) => stripefs_bench::plan::run(a).map(|_| ()),
        Cmd::Sim(a) => sim::run(a),
        Cmd::MetaLog(c) => metalog::run(c),
        Cmd::WanEmu(a) => wan::run(a),
        Cmd::Token(c) => token::run(c),
        Cmd::Xattr(c) => xattr::run(c),
        Cmd::Run(a) => run::run(a),
    };
    if let Err(e) = result {
        eprintln!("stripefs: error: {e:#}");
        std::process::exit(1);
    }
}

fn exe() -> PathBuf {
    std::env::current_exe().unwrap_or_else(|_| PathBuf::from("stripefs"))
}

/// Moves `--cluster FILE` (and the other client options: `--token`, `--host`,
/// `--streams`, `--compress`) given before the command to the end of the command's own
/// arguments (before a `--`), where every command that talks to a cluster declares it:
/// `stripefs --cluster F ls /` is `stripefs ls / --cluster F`. A clap global argument
/// cannot do this, since nested commands such as `bench md` require the option while
/// they are parsed, before a global value reaches them.
fn hoist_cluster(mut args: Vec<OsString>) -> Vec<OsString> {
    let mut moved = Vec::new();
    let mut i = 1;
    while i < args.len() {
        let a = args[i].to_string_lossy();
        let hoisted = [
            "--cluster",
            "--token",
            "--host",
            "--streams",
            "--pipeline",
            "--compress",
        ];
        if hoisted.contains(&a.as_ref()) && i + 1 < args.len() {
            moved.extend(args.drain(i..i + 2));
        } else if hoisted.iter().any(|h| a.starts_with(&format!("{h}="))) {
            moved.push(args.remove(i));
        } else if a.starts_with('-') {
            i += 1;
        } else {
            break;
        }
    }
    let end = args.iter().position(|a| a == "--").unwrap_or(args.len());
    args.splice(end..end, moved);
    args
}

#[cfg(test)]
mod tests {
    use super::hoist_cluster;

    fn hoist(line: &str) -> String {
        let args = line.split(' ').map(Into::into).collect();
        let out: Vec<String> = hoist_cluster(args)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        out.join(" ")
    }

    #[test]
    fn cluster_before_the_command_moves_after_it() {
        for (given, want) in [
            ("s --cluster F ls /", "s ls / --cluster F"),
            (
                "s --cluster=F bench md --files 3",
                "s bench md --files 3 --cluster=F",
            ),
            ("s --cluster F rm -r -- -x", "s rm -r --cluster F -- -x"),
            ("s ls / --cluster F", "s ls / --cluster F"),
            ("s ls --cluster", "s ls --cluster"),
            ("s --version", "s --version"),
        ] {
            assert_eq!(hoist(given), want, "{given}");
        }
    }
}
