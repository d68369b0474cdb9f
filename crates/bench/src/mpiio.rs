//! MPI-IO benchmarks on the MPI-IO layer (`stripefs-mpiio`), written once against
//! [`Ranks`]: `stripefs bench ...` runs the ranks as threads, `mpirun stripefs-mpi ...`
//! as the processes of an MPI job.
//!
//! - `bench btio` (NAS BT-IO, seed 004): a 3-D array of cells of 5 doubles, split over a
//!   square grid of ranks in its first two dimensions; each time step is written as a
//!   whole array after the previous ones, every rank through a subarray view, once with
//!   collective (two-phase) writes and once with independent noncontiguous writes; then
//!   read back collectively and verified.
//! - `bench overlap` (the MPI-BLAST pattern of seed 004): each rank reads its chunks
//!   with asynchronous reads while it computes on the previous chunk; reported against
//!   the same reads alone and the same computation alone.
//! - `bench perf` (ROMIO's perf): each rank writes its array at its rank's offset of one
//!   file and reads it back, without and with a sync after the writes.
//! - `bench mpi-md` (mpi-md-test, seed 003): collective create, open and resize of
//!   files, each timed per operation (barrier to barrier) over iterations.

use crate::ranks::{Ranks, Threads};
use crate::util::{mib_s, write_json};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use stripefs_client::Client;
use stripefs_mpiio::{Datatype, File, Hints, Mode, Order};
use stripefs_rpc::units::{format_size, parse_size};
use stripefs_rpc::ClusterConfig;

/// Bytes of one BT cell: 5 doubles.
const CELL: u64 = 40;
const RW_CREATE: Mode = Mode {
    read: true,
    write: true,
    create: true,
    exclusive: false,
};

#[derive(Args, Debug, Clone)]
pub struct BtioArgs {
    /// Cluster description file.
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    pub cluster: PathBuf,
    /// Ranks (a square: 1, 4, 9, 16, ...; threads, each with its own client; under
    /// mpirun, the job's ranks and this is ignored).
    #[arg(long, default_value_t = 4)]
    pub ranks: u32,
    /// Cells per side of the 3-D array (a multiple of the grid side).
    #[arg(long, default_value_t = 64)]
    pub grid: u64,
    /// Time steps written.
    #[arg(long, default_value_t = 5)]
    pub steps: u64,
    /// Aggregators of the collective writes (ROMIO's cb_nodes; default: one per data
    /// server of the file).
    #[arg(long)]
    pub cb_nodes: Option<u64>,
    /// Read back every step and compare (always done; the flag is accepted for the
    /// mpi-io benchmarks' command lines).
    #[arg(long)]
    pub verify: bool,
    /// Path of the test files in stripefs.
    #[arg(long, default_value = "/bench-btio")]
    pub path: String,
    /// Write the figures as one JSON object to FILE.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

fn side(ranks: u32) -> Result<u64> {
    let p = (ranks as f64).sqrt().round() as u64;
    if p == 0 || p * p != ranks as u64 {
        bail!("btio needs a square number of ranks (1, 4, 9, 16, ...), not {ranks}");
    }
    Ok(p)
}

/// The value of cell byte `i` of step `t` in the whole array.
fn cell_byte(t: u64, i: u64) -> u8 {
    ((i.wrapping_mul(2654435761) >> 7) as u8) ^ (t as u8).wrapping_mul(37)
}

pub fn btio(a: BtioArgs) -> Result<serde_json::Value> {
    btio_on(&a, &Threads(a.ranks as usize))
}

/// [`btio`] on `ranks` (their count, not `--ranks`, is the number of ranks).
pub fn btio_on(a: &BtioArgs, ranks: &dyn Ranks) -> Result<serde_json::Value> {
    let nranks = u32::try_from(ranks.size()).context("too many ranks")?;
    let p = side(nranks)?;
    let n = a.grid;
    if n == 0 || n % p != 0 || a.steps == 0 {
        bail!("--grid must be a positive multiple of the grid side {p}, --steps at least 1");
    }
    let array = n * n * n * CELL;
    if array.checked_mul(a.steps).map_or(true, |b| b > 1 << 40) {
        bail!("--grid {n} x --steps {} is too large", a.steps);
    }
    let cluster = ClusterConfig::load(&a.cluster).map_err(|e| anyhow!(e))?;
    let mut hints = Hints::default();
    if let Some(c) = a.cb_nodes {
        hints = hints.set("cb_nodes", &c.to_string());
    }
    let mine = (n / p) * (n / p) * n * CELL;
    let root = ranks.is_root();
    if root {
        println!(
            "bench btio: {nranks} ranks ({p} x {p}), {n}^3 cells of 5 doubles ({} per step), {} steps",
            format_size(array),
            a.steps
        );
    }
    let mut out = serde_json::Map::new();
    for (label, collective) in [("collective", true), ("independent", false)] {
        let path = format!("{}-{label}", a.path);
        ranks.once(&|| {
            if let Ok(c) = Client::connect(&cluster) {
                let _ = c.unlink(&path);
            }
            Ok(())
        })?;
        let secs = ranks.each(&|comm| {
            let client = Client::connect(&cluster)?;
            let r = comm.rank() as u64;
            let view = Datatype::subarray(
                vec![n, n, n],
                vec![n / p, n / p, n],
                vec![(r / p) * (n / p), (r % p) * (n / p), 0],
                Order::C,
                Datatype::bytes(CELL),
            )?;
            let mut f = File::open_all(comm, &client, &path, RW_CREATE, &hints)?;
            let data_of = |t: u64| -> Vec<u8> {
                // This rank's cells of step t, in view order.
                let ext = stripefs_mpiio::View::new(0, &Datatype::bytes(CELL), &view)
                    .and_then(|v| v.extents(0, mine))
                    .expect("a valid view");
                ext.iter()
                    .flat_map(|&(o, l)| (o..o + l).map(move |i| cell_byte(t, i)))
                    .collect()
            };
            // Only the I/O is timed, as BT-IO times it: each step's cells are made
            // (the solver's work here) before the ranks start its write together; the
            // final sync, which waits for the writes still behind, counts.
            let mut io = std::time::Duration::ZERO;
            for t in 0..a.steps {
                let data = data_of(t);
                comm.barrier();
                let start = Instant::now();
                f.set_view(t * array, &Datatype::bytes(CELL), &view)?;
                if collective {
                    f.write_at_all(comm, 0, &data)?;
                } else {
                    f.write_at(0, &data)?;
                }
                io += start.elapsed();
            }
            comm.barrier();
            let start = Instant::now();
            f.sync()?;
            comm.barrier();
            io += start.elapsed();
            let secs = io.as_secs_f64();
            // Verify: each rank reads its own block of every step back collectively.
            for t in 0..a.steps {
                f.set_view(t * array, &Datatype::bytes(CELL), &view)?;
                let mut got = vec![0u8; mine as usize];
                f.read_at_all(comm, 0, &mut got)?;
                if got != data_of(t) {
                    bail!("rank {r}: step {t} read back differs");
                }
            }
            f.close()?;
            Ok(secs)
        })?;
        let rate = mib_s(array * a.steps, secs);
        if root {
            println!("{label:<12} {rate:>10.1} MiB/s  ({secs:.2} s, verified)");
        }
        out.insert(format!("{label}_mib_s"), json!(rate));
        out.insert(format!("{label}_s"), json!(secs));
        ranks.once(&|| {
            if let Ok(c) = Client::connect(&cluster) {
                let _ = c.unlink(&path);
            }
            Ok(())
        })?;
    }
    let report = json!({
        "benchmark": "btio",
        "ranks": nranks,
        "grid": n,
        "steps": a.steps,
        "cell_bytes": CELL,
        "bytes_per_step": array,
        "collective_mib_s": out["collective_mib_s"],
        "independent_mib_s": out["independent_mib_s"],
        "collective_s": out["collective_s"],
        "independent_s": out["independent_s"],
        "verified": true,
    });
    if let (true, Some(p)) = (root, &a.json) {
        write_json(p, &report)?;
    }
    Ok(report)
}

#[derive(Args, Debug, Clone)]
pub struct OverlapArgs {
    /// Cluster description file.
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    pub cluster: PathBuf,
    /// Ranks (threads, each with its own client; under mpirun, the job's ranks and this is
    /// ignored).
    #[arg(long, default_value_t = 4)]
    pub ranks: u32,
    /// Bytes each rank reads.
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    pub size: u64,
    /// Bytes per chunk (one asynchronous read each).
    #[arg(long, default_value = "4M", value_parser = parse_size)]
    pub chunk: u64,
    /// Computation per chunk, in milliseconds (default: as long as reading a chunk took
    /// in the I/O-only pass, so that compute and I/O take about equally long).
    #[arg(long)]
    pub compute_ms: Option<f64>,
    /// Path of the test file in stripefs.
    #[arg(long, default_value = "/bench-overlap")]
    pub path: String,
    /// Write the figures as one JSON object to FILE.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Busy computation for `d` (a loop, not a sleep: it uses a core, as real work does).
fn compute(d: Duration) -> u64 {
    let start = Instant::now();
    let mut x = 1u64;
    while start.elapsed() < d {
        for _ in 0..1000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
        }
    }
    std::hint::black_box(x)
}

pub fn overlap(a: OverlapArgs) -> Result<serde_json::Value> {
    if a.ranks == 0 {
        bail!("--ranks must be at least 1");
    }
    overlap_on(&a, &Threads(a.ranks as usize))
}

/// [`overlap`] on `ranks`.
pub fn overlap_on(a: &OverlapArgs, ranks: &dyn Ranks) -> Result<serde_json::Value> {
    if a.chunk == 0 || a.size < a.chunk || a.size % a.chunk != 0 {
        bail!("--size must be a positive multiple of --chunk");
    }
    let cluster = ClusterConfig::load(&a.cluster).map_err(|e| anyhow!(e))?;
    let chunks = a.size / a.chunk;
    let nranks = ranks.size() as u64;
    let total = a.size * nranks;
    // Setup: every rank's part of one file.
    ranks.once(&|| {
        let c = Client::connect(&cluster)?;
        let _ = c.unlink(&a.path);
        let f = File::open(&c, &a.path, RW_CREATE, &Hints::default())?;
        let buf: Vec<u8> = (0..a.chunk).map(|i| (i % 251) as u8).collect();
        for k in 0..chunks * nranks {
            f.write_at(k * a.chunk, &buf)?;
        }
        f.sync()?;
        f.close()?;
        Ok(())
    })?;
    // Every chunk holds the same bytes: checking one is a memcmp, not a computation that
    // would run on the rank's own core beside its compute phase.
    let expected: Vec<u8> = (0..a.chunk).map(|i| (i % 251) as u8).collect();
    let check_chunk = |d: &[u8]| -> Result<()> {
        if d != expected.as_slice() {
            bail!("verification failed: a chunk read back differs");
        }
        Ok(())
    };
    let pass = |compute_per_chunk: Option<Duration>, overlapped: bool| -> Result<f64> {
        let secs = ranks.each(&|comm| {
            let client = Client::connect(&cluster)?;
            let f = File::open(
                &client,
                &a.path,
                Mode {
                    read: true,
                    write: false,
                    create: false,
                    exclusive: false,
                },
                &Hints::default(),
            )?;
            let base = comm.rank() as u64 * a.size;
            comm.barrier();
            let start = Instant::now();
            match (compute_per_chunk, overlapped) {
                (None, _) => {
                    for k in 0..chunks {
                        let r = f.iread_at(base + k * a.chunk, a.chunk as usize)?;
                        check_chunk(&r.wait()?)?;
                    }
                }
                (Some(d), false) => {
                    for _ in 0..chunks {
                        compute(d);
                    }
                }
                (Some(d), true) => {
                    let mut next = Some(f.iread_at(base, a.chunk as usize)?);
                    for k in 0..chunks {
                        let cur = next.take().expect("a read in flight");
                        let data = cur.wait()?;
                        if k + 1 < chunks {
                            next = Some(f.iread_at(base + (k + 1) * a.chunk, a.chunk as usize)?);
                        }
                        check_chunk(&data)?;
                        compute(d);
                    }
                }
            }
            let secs = start.elapsed().as_secs_f64();
            f.close()?;
            Ok(secs)
        })?;
        Ok(secs)
    };
    let io_s = pass(None, false)?;
    let per_chunk = Duration::from_secs_f64(match a.compute_ms {
        Some(ms) => ms / 1000.0,
        None => io_s / chunks as f64,
    });
    let compute_s = pass(Some(per_chunk), false)?;
    let total_s = pass(Some(per_chunk), true)?;
    let eff = io_s.max(compute_s) / total_s;
    let root = ranks.is_root();
    if root {
        println!(
        "bench overlap: {nranks} ranks x {} in {} chunks; I/O alone {io_s:.2} s ({:.0} MiB/s), compute alone {compute_s:.2} s, both overlapped {total_s:.2} s: efficiency {eff:.2}",
        format_size(a.size),
        format_size(a.chunk),
        mib_s(total, io_s)
    );
    }
    ranks.once(&|| {
        if let Ok(c) = Client::connect(&cluster) {
            let _ = c.unlink(&a.path);
        }
        Ok(())
    })?;
    let report = json!({
        "benchmark": "overlap",
        "ranks": nranks,
        "size_bytes": a.size,
        "chunk_bytes": a.chunk,
        "compute_ms_per_chunk": per_chunk.as_secs_f64() * 1e3,
        "compute_s": compute_s,
        "io_s": io_s,
        "total_s": total_s,
        "overlap_efficiency": eff,
        "io_mib_s": mib_s(total, io_s),
        "verified": true,
    });
    if let (true, Some(p)) = (root, &a.json) {
        write_json(p, &report)?;
    }
    Ok(report)
}

#[derive(Args, Debug, Clone)]
pub struct PerfArgs {
    /// Cluster description file.
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    pub cluster: PathBuf,
    /// Ranks (threads, each with its own client; under mpirun, the job's ranks and this is
    /// ignored).
    #[arg(long, default_value_t = 4)]
    pub ranks: u32,
    /// Bytes of each rank's array (ROMIO perf's default: 4 MiB).
    #[arg(long, default_value = "4M", value_parser = parse_size)]
    pub size: u64,
    /// Path of the test file in stripefs.
    #[arg(long, default_value = "/bench-perf")]
    pub path: String,
    /// Write the figures as one JSON object to FILE.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Byte `i` of rank `r`'s array in pass `pass`.
fn perf_byte(pass: u64, r: u64, i: u64) -> u8 {
    (i.wrapping_mul(131) ^ r.wrapping_mul(29) ^ pass.wrapping_mul(7)) as u8
}

pub fn perf(a: PerfArgs) -> Result<serde_json::Value> {
    if a.ranks == 0 {
        bail!("--ranks must be at least 1");
    }
    perf_on(&a, &Threads(a.ranks as usize))
}

/// ROMIO perf on `ranks`: each rank writes its array at offset rank x size of one file,
/// reads it back (verified), then the same with a sync after the writes; each phase is
/// timed barrier to barrier, so the rate is the slowest rank's.
pub fn perf_on(a: &PerfArgs, ranks: &dyn Ranks) -> Result<serde_json::Value> {
    if a.size == 0 || a.size > 1 << 30 {
        bail!("--size must be 1 byte to 1G");
    }
    let cluster = ClusterConfig::load(&a.cluster).map_err(|e| anyhow!(e))?;
    let n = ranks.size() as u64;
    let total = a.size * n;
    ranks.once(&|| {
        let _ = Client::connect(&cluster)?.unlink(&a.path);
        Ok(())
    })?;
    // Pass 0 without sync, pass 1 with; each a write and a read.
    let mut rates = Vec::new();
    for (pass, sync) in [(0u64, false), (1, true)] {
        for write in [true, false] {
            let secs = ranks.each(&|comm| {
                let client = Client::connect(&cluster)?;
                let r = comm.rank() as u64;
                let f = File::open_all(comm, &client, &a.path, RW_CREATE, &Hints::default())?;
                let mut buf: Vec<u8> = (0..a.size).map(|i| perf_byte(pass, r, i)).collect();
                comm.barrier();
                let start = Instant::now();
                if write {
                    f.write_at(r * a.size, &buf)?;
                    if sync {
                        f.sync()?;
                    }
                } else {
                    f.read_at(r * a.size, &mut buf)?;
                }
                comm.barrier();
                let secs = start.elapsed().as_secs_f64();
                if !write && (0..a.size).any(|i| buf[i as usize] != perf_byte(pass, r, i)) {
                    bail!("rank {r}: the array read back differs from what was written");
                }
                f.close()?;
                Ok(secs)
            })?;
            rates.push(mib_s(total, secs));
        }
    }
    ranks.once(&|| {
        let _ = Client::connect(&cluster)?.unlink(&a.path);
        Ok(())
    })?;
    let report = json!({
        "benchmark": "perf",
        "ranks": n,
        "size_bytes": a.size,
        "write_mib_s": rates[0],
        "read_mib_s": rates[1],
        "write_sync_mib_s": rates[2],
        "read_after_sync_mib_s": rates[3],
        "verified": true,
    });
    if ranks.is_root() {
        println!(
            "bench perf: {n} ranks x {}: write {:.1} MiB/s, read {:.1} MiB/s; with sync: write {:.1} MiB/s, read {:.1} MiB/s (verified)",
            format_size(a.size),
            rates[0],
            rates[1],
            rates[2],
            rates[3]
        );
        if let Some(p) = &a.json {
            write_json(p, &report)?;
        }
    }
    Ok(report)
}

#[derive(Args, Debug, Clone)]
pub struct MpiMdArgs {
    /// Cluster description file.
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    pub cluster: PathBuf,
    /// Ranks (threads, each with its own client; under mpirun, the job's ranks and this is
    /// ignored).
    #[arg(long, default_value_t = 4)]
    pub ranks: u32,
    /// Files created, opened and resized (one collective call each).
    #[arg(long, default_value_t = 20)]
    pub iterations: u64,
    /// Directory in stripefs for the test files.
    #[arg(long, default_value = "/bench-mpi-md")]
    pub path: String,
    /// Write the figures as one JSON object to FILE.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

pub fn mpi_md(a: MpiMdArgs) -> Result<serde_json::Value> {
    if a.ranks == 0 {
        bail!("--ranks must be at least 1");
    }
    mpi_md_on(&a, &Threads(a.ranks as usize))
}

/// mpi-md-test on `ranks`: `--iterations` files are each created collectively (rank 0
/// creates, all open), then each opened collectively, then each resized collectively;
/// every call is timed barrier to barrier and the JSON gives the mean seconds per call.
pub fn mpi_md_on(a: &MpiMdArgs, ranks: &dyn Ranks) -> Result<serde_json::Value> {
    if a.iterations == 0 || a.iterations > 100_000 {
        bail!("--iterations must be 1 to 100000");
    }
    let cluster = ClusterConfig::load(&a.cluster).map_err(|e| anyhow!(e))?;
    let dir = a.path.trim_end_matches('/').to_string();
    let name = |i: u64| format!("{dir}/f{i}");
    let clean = || -> Result<()> {
        let c = Client::connect(&cluster)?;
        for i in 0..a.iterations {
            let _ = c.unlink(&name(i));
        }
        Ok(())
    };
    ranks.once(&|| {
        let c = Client::connect(&cluster)?;
        if c.stat(&dir).is_err() {
            c.mkdir(&dir, 0o755)
                .with_context(|| format!("cannot create {dir}"))?;
        }
        clean()
    })?;
    let ro = Mode {
        read: true,
        write: false,
        create: false,
        exclusive: false,
    };
    let mut per_call = Vec::new();
    for op in ["create", "open", "resize"] {
        let secs = ranks.each(&|comm| {
            let client = Client::connect(&cluster)?;
            let mut spent = 0f64;
            for i in 0..a.iterations {
                let mode = if op == "create" { RW_CREATE } else { ro };
                let (f, secs) = if op == "resize" {
                    let f = File::open_all(comm, &client, &name(i), RW_CREATE, &Hints::default())?;
                    comm.barrier();
                    let start = Instant::now();
                    f.set_size_all(comm, (i + 1) * 4096)?;
                    comm.barrier();
                    (f, start.elapsed().as_secs_f64())
                } else {
                    comm.barrier();
                    let start = Instant::now();
                    let f = File::open_all(comm, &client, &name(i), mode, &Hints::default())?;
                    comm.barrier();
                    (f, start.elapsed().as_secs_f64())
                };
                spent += secs;
                f.close()?;
            }
            Ok(spent)
        })?;
        per_call.push(secs / a.iterations as f64);
    }
    // The resize must have happened: check every file's size once.
    ranks.once(&|| {
        let c = Client::connect(&cluster)?;
        for i in 0..a.iterations {
            let size = c.stat(&name(i))?.size;
            if size != (i + 1) * 4096 {
                bail!(
                    "{}: size {size} after the collective resize to {}",
                    name(i),
                    (i + 1) * 4096
                );
            }
        }
        clean()
    })?;
    let n = ranks.size();
    let report = json!({
        "benchmark": "mpi-md",
        "ranks": n,
        "iterations": a.iterations,
        "collective_create_s": per_call[0],
        "collective_open_s": per_call[1],
        "collective_resize_s": per_call[2],
        "collective_creates_per_s": 1.0 / per_call[0].max(1e-9),
        "collective_opens_per_s": 1.0 / per_call[1].max(1e-9),
        "collective_resizes_per_s": 1.0 / per_call[2].max(1e-9),
        "verified": true,
    });
    if ranks.is_root() {
        println!(
            "bench mpi-md: {n} ranks, {} files: collective create {:.3} ms, open {:.3} ms, resize {:.3} ms per call",
            a.iterations,
            per_call[0] * 1e3,
            per_call[1] * 1e3,
            per_call[2] * 1e3
        );
        if let Some(p) = &a.json {
            write_json(p, &report)?;
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_must_be_square() {
        assert_eq!(side(4).unwrap(), 2);
        assert_eq!(side(1).unwrap(), 1);
        assert!(side(6).is_err());
        assert!(side(0).is_err());
    }
}
