//! Benchmarks of stripefs, run as `stripefs bench <name>`, and the `stripefs demo`.
//!
//! Every benchmark prints a human table and, with `--json FILE`, writes one JSON object
//! holding its parameters and measured figures. Figures are only meaningful as ratios
//! to a reference measured in the same run (the sum of the emulated disk rates, or the
//! same access pattern on a local directory), because the machines we run on are shared
//! and noisy; each benchmark measures and reports that reference beside its own figure.

#![recursion_limit = "256"]

pub mod balance;
pub mod cpu;
pub mod demo;
pub mod disk;
pub mod io;
pub mod md;
pub mod mpiio;
mod pattern;
pub mod plan;
pub mod plot;
pub mod ranks;
pub mod remote;
pub mod report;
pub mod scan;
pub mod sweep;
pub mod transpose;
mod util;
pub mod worker;

use anyhow::Result;
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum BenchCmd {
    /// mpi-io-test: N clients each write a contiguous block of one shared file (or one file
    /// each, or interleaved transfers of any size), fsync, then read back another
    /// client's transfers and verify them; natively and with --mount through a mount.
    Io(io::IoArgs),
    /// mpi-md-test and mdtest-easy: collective create/open/resize, then per-client and
    /// shared-directory create (+ write), stat, (read) and remove rates.
    Md(md::MdArgs),
    /// Disk/Net balance: producer-consumer pairs copying files within a server and
    /// between servers, for every mix of pairs and several file sizes.
    Balance(balance::BalanceArgs),
    /// bonnie-like test of a local directory: block write, rewrite, read, seeks, and
    /// file create/stat/delete rates, to calibrate each node's disks.
    Disk(disk::DiskArgs),
    /// Streaming scan: select the records whose key falls in a range into a new file.
    Scan(scan::ScanArgs),
    /// Streaming transpose of a blocked M x M matrix, one block row per client.
    Transpose(transpose::TransposeArgs),
    /// Repeat `bench io` over values of one parameter; JSON array and a plot.
    Sweep(sweep::SweepArgs),
    /// A remote client (e.g. through `cluster up --wan`'s client file) writes and reads
    /// back a file per stream count, against the emulated link's rate.
    Remote(remote::RemoteArgs),
    /// Starts a throwaway cluster behind an emulated wide-area link (RTT, rate, window)
    /// and measures a remote client's write and read per stream count and compression,
    /// and plain put/get, against the link rate.
    Wan(remote::WanArgs),
    /// Starts a throwaway cluster that accepts TLS and plain clients and measures one
    /// client's write and read over the network both ways, in alternating rounds: TLS
    /// throughput against plain in the same run.
    Tls(remote::TlsArgs),
    /// NAS BT-IO on the MPI-IO layer (ranks as threads): time steps of a 3-D array
    /// written through subarray views, collectively and independently, then verified.
    Btio(mpiio::BtioArgs),
    /// MPI-BLAST's pattern: asynchronous reads overlapped with computation.
    Overlap(mpiio::OverlapArgs),
    /// ROMIO perf on the MPI-IO layer: each rank writes and reads its array at its
    /// rank's offset, without and with sync (ranks as threads; `stripefs-mpi perf` runs
    /// it under mpirun).
    Perf(mpiio::PerfArgs),
    /// mpi-md-test: collective create, open and resize of files, timed per call (ranks
    /// as threads; `stripefs-mpi md` runs it under mpirun).
    MpiMd(mpiio::MpiMdArgs),
    /// One client process of a `--mount` run (started by `bench io` and `bench md`).
    #[command(hide = true)]
    ClientWorker(worker::WorkerArgs),
}

pub fn run(cmd: BenchCmd, exe: PathBuf) -> Result<()> {
    match cmd {
        BenchCmd::Io(a) => io::run(a).map(|_| ()),
        BenchCmd::Md(a) => md::run(a).map(|_| ()),
        BenchCmd::Balance(a) => balance::run(a).map(|_| ()),
        BenchCmd::Disk(a) => disk::run(a).map(|_| ()),
        BenchCmd::Scan(a) => scan::run(a).map(|_| ()),
        BenchCmd::Transpose(a) => transpose::run(a).map(|_| ()),
        BenchCmd::Sweep(a) => sweep::run(a, exe).map(|_| ()),
        BenchCmd::Remote(a) => remote::run(a).map(|_| ()),
        BenchCmd::Wan(a) => remote::run_wan(a, &exe).map(|_| ()),
        BenchCmd::Tls(a) => remote::run_tls(a, &exe).map(|_| ()),
        BenchCmd::Btio(a) => mpiio::btio(a).map(|_| ()),
        BenchCmd::Overlap(a) => mpiio::overlap(a).map(|_| ()),
        BenchCmd::Perf(a) => mpiio::perf(a).map(|_| ()),
        BenchCmd::MpiMd(a) => mpiio::mpi_md(a).map(|_| ()),
        BenchCmd::ClientWorker(a) => worker::serve(a),
    }
}
