//! `stripefs-mpi`: stripefs's MPI-IO benchmarks as an MPI program, one client per rank.
//!
//! ```text
//! mpirun -n 4 target/release/stripefs-mpi io --cluster DIR/cluster.toml --block 8M
//! mpirun -n 4 target/release/stripefs-mpi md|perf|btio|overlap --cluster ... [--json F]
//! ```
//!
//! The benchmarks are those of `stripefs bench` (crates/bench), written once against its
//! `Ranks` trait; here the ranks are the job's processes and the communicator is MPI's
//! (`MpiComm`), where `stripefs bench` runs them as threads. Rank 0 prints the table and
//! writes the JSON. A rank that fails prints its error and aborts the job, as MPI
//! programs do, so that no rank waits forever in a collective call.

mod comm;

use anyhow::Result;
use clap::{Parser, Subcommand};
use comm::MpiRanks;
use stripefs_bench::{io, mpiio};
use stripefs_mpiio::Communicator as _;

#[derive(Parser)]
#[command(
    name = "stripefs-mpi",
    version,
    about = "stripefs MPI-IO benchmarks under mpirun: one client per rank",
    after_help = "Run under mpirun, e.g.: mpirun -n 4 stripefs-mpi io --cluster DIR/cluster.toml\n(as root, OpenMPI needs --allow-run-as-root; more ranks than cores need --oversubscribe)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// mpi-io-test: each rank writes its block, syncs, reads back its neighbour's and
    /// verifies (`stripefs bench io`'s options; the ranks are the clients; the block is
    /// 8 MiB unless --block or --segments says, as in the seed).
    Io(io::IoArgs),
    /// mpi-md-test: collective create, open and resize, timed per call.
    Md(mpiio::MpiMdArgs),
    /// ROMIO perf: each rank writes and reads its array, without and with sync.
    Perf(mpiio::PerfArgs),
    /// NAS BT-IO: collective writes through subarray views, verified (square rank count).
    Btio(mpiio::BtioArgs),
    /// MPI-BLAST pattern: compute overlapped with asynchronous reads.
    Overlap(mpiio::OverlapArgs),
}

/// mpi-io-test's default block per rank (seed 003).
const MPI_IO_TEST_BLOCK: u64 = 8 << 20;

fn main() {
    let Some(ranks) = MpiRanks::init() else {
        eprintln!("stripefs-mpi: MPI could not be initialised (run it under mpirun)");
        std::process::exit(1);
    };
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // Help and version are printed once; a usage error stops every rank.
            if ranks.comm().rank() == 0 {
                let _ = e.print();
            }
            let code = e.exit_code();
            drop(ranks);
            std::process::exit(code);
        }
    };
    if ranks.comm().rank() == 0 {
        if let Some(note) = binding_note() {
            eprintln!("{note}");
        }
    }
    if let Err(e) = run(cli.cmd, &ranks) {
        eprintln!("stripefs-mpi: rank {}: {e:#}", ranks.comm().rank());
        ranks.abort(1);
    }
}

/// A note when this process may run on only one core while the machine has more:
/// OpenMPI binds each rank to a core by default for small jobs, and then the client's
/// I/O threads (asynchronous requests, write-behind, readahead) share that core with the
/// rank's computation, so I/O no longer overlaps it.
fn binding_note() -> Option<String> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is this thread; the size is that of `set`.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        return None;
    }
    // SAFETY: `set` was filled by the kernel.
    let allowed = unsafe { libc::CPU_COUNT(&set) } as usize;
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cores = std::fs::read_to_string("/proc/cpuinfo")
        .map(|t| t.lines().filter(|l| l.starts_with("processor")).count())
        .unwrap_or(online);
    (allowed == 1 && cores > 1).then(|| {
        format!(
            "stripefs-mpi: note: each rank is bound to one core of {cores}, so the client's I/O threads share it with the computation; `mpirun --bind-to none` (or more cores per rank) lets asynchronous I/O overlap computation"
        )
    })
}

fn run(cmd: Cmd, ranks: &MpiRanks) -> Result<()> {
    match cmd {
        Cmd::Io(mut a) => {
            if a.block.is_none() && a.segments.is_none() {
                a.block = Some(MPI_IO_TEST_BLOCK);
            }
            io::run_on(a, ranks).map(|_| ())
        }
        Cmd::Md(a) => mpiio::mpi_md_on(&a, ranks).map(|_| ()),
        Cmd::Perf(a) => mpiio::perf_on(&a, ranks).map(|_| ()),
        Cmd::Btio(a) => mpiio::btio_on(&a, ranks).map(|_| ()),
        Cmd::Overlap(a) => mpiio::overlap_on(&a, ranks).map(|_| ()),
    }
}
