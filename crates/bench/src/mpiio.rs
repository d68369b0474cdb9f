//! MPI-IO benchmarks on the MPI-IO layer (`stripefs-mpiio`), ranks as threads:
//!
//! - `bench btio` (NAS BT-IO, seed 004): a 3-D array of cells of 5 doubles, split over a
//!   square grid of ranks in its first two dimensions; each time step is written as a
//!   whole array after the previous ones, every rank through a subarray view, once with
//!   collective (two-phase) writes and once with independent noncontiguous writes; then
//!   read back collectively and verified.
//! - `bench overlap` (the MPI-BLAST pattern of seed 004): each rank reads its chunks
//!   with asynchronous reads while it computes on the previous chunk; reported against
//!   the same reads alone and the same computation alone.

use crate::util::{mib_s, write_json};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use stripefs_client::Client;
use stripefs_mpiio::{Communicator, Datatype, File, Hints, Mode, Order, ThreadComm};
use stripefs_rpc::units::{format_size, parse_size};
use stripefs_rpc::ClusterConfig;

/// Bytes of one BT cell: 5 doubles.
const CELL: u64 = 40;
const RW_CREATE: Mode = Mode {
    read: true,
    write: true,
    create: true,
};

#[derive(Args, Debug, Clone)]
pub struct BtioArgs {
    /// Cluster description file.
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    pub cluster: PathBuf,
    /// Ranks (a square: 1, 4, 9, 16, ...).
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
        bail!("--ranks must be a square (1, 4, 9, 16, ...), not {ranks}");
    }
    Ok(p)
}

/// The value of cell byte `i` of step `t` in the whole array.
fn cell_byte(t: u64, i: u64) -> u8 {
    ((i.wrapping_mul(2654435761) >> 7) as u8) ^ (t as u8).wrapping_mul(37)
}

pub fn btio(a: BtioArgs) -> Result<serde_json::Value> {
    let p = side(a.ranks)?;
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
    println!(
        "bench btio: {} ranks ({p} x {p}), {n}^3 cells of 5 doubles ({} per step), {} steps",
        a.ranks,
        format_size(array),
        a.steps
    );
    let mut out = serde_json::Map::new();
    for (label, collective) in [("collective", true), ("independent", false)] {
        let path = format!("{}-{label}", a.path);
        if let Ok(c) = Client::connect(&cluster) {
            let _ = c.unlink(&path);
        }
        let (secs, verified) = run_ranks(a.ranks as usize, |comm| {
            let client = Client::connect(&cluster)?;
            let r = comm.rank() as u64;
            let view = Datatype::subarray(
                vec![n, n, n],
                vec![n / p, n / p, n],
                vec![(r / p) * (n / p), (r % p) * (n / p), 0],
                Order::C,
                Datatype::bytes(CELL),
            )?;
            let mut f = File::open(&client, &path, RW_CREATE, &hints)?;
            let data_of = |t: u64| -> Vec<u8> {
                // This rank's cells of step t, in view order.
                let ext = stripefs_mpiio::View::new(0, &Datatype::bytes(CELL), &view)
                    .and_then(|v| v.extents(0, mine))
                    .expect("a valid view");
                ext.iter()
                    .flat_map(|&(o, l)| (o..o + l).map(move |i| cell_byte(t, i)))
                    .collect()
            };
            comm.barrier();
            let start = Instant::now();
            for t in 0..a.steps {
                f.set_view(t * array, &Datatype::bytes(CELL), &view)?;
                let data = data_of(t);
                if collective {
                    f.write_at_all(comm, 0, &data)?;
                } else {
                    f.write_at(0, &data)?;
                }
            }
            f.sync()?;
            comm.barrier();
            let secs = start.elapsed().as_secs_f64();
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
        println!("{label:<12} {rate:>10.1} MiB/s  ({secs:.2} s, verified: {verified})");
        out.insert(format!("{label}_mib_s"), json!(rate));
        out.insert(format!("{label}_s"), json!(secs));
        if let Ok(c) = Client::connect(&cluster) {
            let _ = c.unlink(&path);
        }
    }
    let report = json!({
        "benchmark": "btio",
        "ranks": a.ranks,
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
    if let Some(p) = &a.json {
        write_json(p, &report)?;
    }
    Ok(report)
}

/// Runs `f` on `ranks` thread ranks; returns the largest of their results (the time
/// of the slowest) and whether all succeeded.
fn run_ranks(ranks: usize, f: impl Fn(&ThreadComm) -> Result<f64> + Sync) -> Result<(f64, bool)> {
    let comms = ThreadComm::group(ranks);
    let results: Vec<Result<f64>> = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .map(|c| {
                let f = &f;
                s.spawn(move || f(c))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(anyhow!("a rank panicked"))))
            .collect()
    });
    let mut worst = 0f64;
    for (r, res) in results.into_iter().enumerate() {
        worst = worst.max(res.with_context(|| format!("rank {r}"))?);
    }
    Ok((worst, true))
}

#[derive(Args, Debug, Clone)]
pub struct OverlapArgs {
    /// Cluster description file.
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    pub cluster: PathBuf,
    /// Ranks (threads, each with its own client).
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
    if a.chunk == 0 || a.size < a.chunk || a.size % a.chunk != 0 || a.ranks == 0 {
        bail!("--size must be a positive multiple of --chunk, --ranks at least 1");
    }
    let cluster = ClusterConfig::load(&a.cluster).map_err(|e| anyhow!(e))?;
    let chunks = a.size / a.chunk;
    let total = a.size * a.ranks as u64;
    // Setup: every rank's part of one file.
    {
        let c = Client::connect(&cluster)?;
        let _ = c.unlink(&a.path);
        let f = File::open(&c, &a.path, RW_CREATE, &Hints::default())?;
        let buf: Vec<u8> = (0..a.chunk).map(|i| (i % 251) as u8).collect();
        for k in 0..chunks * a.ranks as u64 {
            f.write_at(k * a.chunk, &buf)?;
        }
        f.sync()?;
        f.close()?;
    }
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
        let (secs, _) = run_ranks(a.ranks as usize, |comm| {
            let client = Client::connect(&cluster)?;
            let f = File::open(
                &client,
                &a.path,
                Mode {
                    read: true,
                    write: false,
                    create: false,
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
    println!(
        "bench overlap: {} ranks x {} in {} chunks; I/O alone {io_s:.2} s ({:.0} MiB/s), compute alone {compute_s:.2} s, both overlapped {total_s:.2} s: efficiency {eff:.2}",
        a.ranks,
        format_size(a.size),
        format_size(a.chunk),
        mib_s(total, io_s)
    );
    if let Ok(c) = Client::connect(&cluster) {
        let _ = c.unlink(&a.path);
    }
    let report = json!({
        "benchmark": "overlap",
        "ranks": a.ranks,
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
    if let Some(p) = &a.json {
        write_json(p, &report)?;
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
