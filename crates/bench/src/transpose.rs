//! `stripefs bench transpose`: the transpose streaming application of seed 002 (figure 2).
//!
//! An M x M matrix of u64 is stored as (M/B) x (M/B) blocks of B x B elements, each block
//! contiguous and the blocks in row-major order; element (i, j) holds i*M + j, so any
//! element's expected value is known without storing a copy. Setup writes the input,
//! fsyncs it and has the servers drop their cached pages. In the timed phase the clients
//! take block rows round-robin; for block (r, c) of its rows a client reads the block,
//! transposes it in memory and writes it as block (c, r) of the output. The stream rate is
//! D = (MiB read + MiB written) / s. The output is then checked: entirely when it is
//! small, otherwise a random set of whole blocks from a printed seed. The same run on a
//! local directory (`--baseline`) and the sum of the throttle rates of the targets used
//! are the same-run references.

use crate::scan::{print_stream_table, splitmix64, SFile, Store, MAX_CLIENTS};
use crate::util::run_clients;
use crate::util::{mib_s, progress, write_json};
use anyhow::{bail, Result};
use clap::Args;
use indicatif::ProgressBar;
use serde_json::json;
use std::path::PathBuf;
use stripefs_rpc::units::format_size;

/// Largest block: each client holds two in memory.
const MAX_BLOCK_BYTES: u64 = 64 << 20;
/// Largest matrix, to catch a typo before it fills the disks.
const MAX_MATRIX_BYTES: u64 = 1 << 40;
/// Outputs up to this size are verified entirely; larger ones by sampling blocks.
const FULL_VERIFY_BYTES: u64 = 256 << 20;
/// Fewest blocks a sampled verification checks (all of them if there are fewer).
const MIN_SAMPLE_BLOCKS: u64 = 256;
/// Side of the square tiles the in-memory transposition works in, for cache locality.
const TILE: usize = 32;

#[derive(Args, Clone, Debug)]
pub struct TransposeArgs {
    /// Cluster description file.
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    pub cluster: PathBuf,
    /// Matrix side M, in 8-byte elements (the matrix is M x M).
    #[arg(long, default_value_t = 8192)]
    pub m: u64,
    /// Block side B, in elements (the matrix is stored as (M/B) x (M/B) blocks of B x B).
    #[arg(long, default_value_t = 512)]
    pub b: u64,
    /// Concurrent clients; block rows are dealt to them round-robin.
    #[arg(long, default_value_t = 4)]
    pub clients: u32,
    /// Directory in stripefs for the test.
    #[arg(long, default_value = "/bench-transpose")]
    pub path: String,
    /// Write the figures as one JSON object to FILE.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Seed of the sampled verification (default: random; printed, so it can be replayed).
    #[arg(long, env = "STRIPEFS_SEED")]
    pub seed: Option<u64>,
    /// Run the same transposition on this local directory as the same-run reference.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Keep the input and output files afterwards.
    #[arg(long)]
    pub keep: bool,
    /// Also run the transposition twice more, relayed (every read through the data
    /// servers) and direct (short-circuit reads where a data server is on the client's
    /// host), and report both (`relayed`, `direct` in the JSON).
    #[arg(long)]
    pub compare_direct: bool,
}

fn validate(a: &TransposeArgs) -> Result<()> {
    if a.clients == 0 || a.clients > MAX_CLIENTS {
        bail!("--clients must be between 1 and {MAX_CLIENTS}");
    }
    if a.m == 0 || a.b == 0 {
        bail!("--m and --b must be positive");
    }
    if a.m % a.b != 0 {
        bail!(
            "--m ({}) must be a multiple of --b ({}): the matrix is stored as whole B x B blocks",
            a.m,
            a.b
        );
    }
    let block = a.b.checked_mul(a.b).and_then(|x| x.checked_mul(8));
    if block.map_or(true, |x| x > MAX_BLOCK_BYTES) {
        bail!(
            "a block of {} x {} elements exceeds {}",
            a.b,
            a.b,
            format_size(MAX_BLOCK_BYTES)
        );
    }
    let matrix = a.m.checked_mul(a.m).and_then(|x| x.checked_mul(8));
    if matrix.map_or(true, |x| x > MAX_MATRIX_BYTES) {
        bail!(
            "a matrix of {} x {} elements exceeds {}",
            a.m,
            a.m,
            format_size(MAX_MATRIX_BYTES)
        );
    }
    if (a.m / a.b) < a.clients as u64 {
        bail!(
            "--clients ({}) exceeds the {} block rows (M/B): some clients would have no work",
            a.clients,
            a.m / a.b
        );
    }
    Ok(())
}

/// The blocked matrix geometry.
#[derive(Clone, Copy, Debug)]
struct Grid {
    m: u64,
    b: u64,
    /// Blocks per side, M / B.
    n: u64,
}

impl Grid {
    fn block_bytes(&self) -> u64 {
        self.b * self.b * 8
    }

    fn matrix_bytes(&self) -> u64 {
        self.m * self.m * 8
    }

    /// Byte offset of block (r, c).
    fn offset(&self, r: u64, c: u64) -> u64 {
        assert!(r < self.n && c < self.n);
        (r * self.n + c) * self.block_bytes()
    }

    /// Block (r, c) of the input: element (i, j) of the matrix is i*M + j.
    fn fill_input(&self, r: u64, c: u64, buf: &mut [u8]) {
        self.fill(r, c, buf, false);
    }

    /// Block (r, c) of the transposed matrix: element (i, j) is j*M + i.
    fn fill_output(&self, r: u64, c: u64, buf: &mut [u8]) {
        self.fill(r, c, buf, true);
    }

    fn fill(&self, r: u64, c: u64, buf: &mut [u8], transposed: bool) {
        assert_eq!(buf.len() as u64, self.block_bytes());
        for (k, w) in buf.chunks_exact_mut(8).enumerate() {
            let (i, j) = (
                r * self.b + k as u64 / self.b,
                c * self.b + k as u64 % self.b,
            );
            let v = if transposed {
                j * self.m + i
            } else {
                i * self.m + j
            };
            w.copy_from_slice(&v.to_le_bytes());
        }
    }

    /// Block rows of client `rank`: r = rank, rank + clients, ...
    fn rows(&self, rank: u32, clients: u32) -> impl Iterator<Item = u64> {
        (rank as u64..self.n).step_by(clients as usize)
    }
}

/// Transposes the B x B block of u64 `src` into `dst`, tile by tile.
fn transpose_block(b: usize, src: &[u8], dst: &mut [u8]) {
    assert_eq!(src.len(), b * b * 8);
    assert_eq!(dst.len(), src.len());
    for ti in (0..b).step_by(TILE) {
        for tj in (0..b).step_by(TILE) {
            for i in ti..(ti + TILE).min(b) {
                for j in tj..(tj + TILE).min(b) {
                    let s = (i * b + j) * 8;
                    let d = (j * b + i) * 8;
                    dst[d..d + 8].copy_from_slice(&src[s..s + 8]);
                }
            }
        }
    }
}

/// Measured figures of one transposition.
#[derive(Clone, Copy, Debug)]
struct Run {
    secs: f64,
    verified_blocks: u64,
}

/// Runs the benchmark and prints its table; returns the JSON object it reports.
pub fn run(a: TransposeArgs) -> Result<serde_json::Value> {
    validate(&a)?;
    let g = Grid {
        m: a.m,
        b: a.b,
        n: a.m / a.b,
    };
    let seed = a.seed.unwrap_or_else(crate::util::seed);
    println!(
        "bench transpose: verification seed {seed} (--seed {seed} or STRIPEFS_SEED={seed} replays)"
    );
    let names = ["input".to_string(), "output".to_string()];
    let store = Store::remote(&a.cluster, &a.path)?;
    let ours = transpose_on(&store, &a, &g, seed);
    let ceiling = store.ceiling_mib_s(&names);
    if !a.keep {
        store.remove_all(&names);
    }
    let (ours, ceiling) = (ours?, ceiling?);
    let baseline = match &a.baseline {
        Some(dir) => {
            let local = Store::local(dir)?;
            let r = transpose_on(&local, &a, &g, seed);
            local.remove_all(&names);
            Some(r?)
        }
        None => None,
    };
    let d = |r: &Run| mib_s(2 * g.matrix_bytes(), r.secs);
    let mut report = json!({
        "benchmark": "transpose",
        "m": a.m,
        "b": a.b,
        "blocks_per_side": g.n,
        "clients": a.clients,
        "matrix_bytes": g.matrix_bytes(),
        "block_bytes": g.block_bytes(),
        "seed": seed,
        "read_mib": g.matrix_bytes() as f64 / (1u64 << 20) as f64,
        "written_mib": g.matrix_bytes() as f64 / (1u64 << 20) as f64,
        "transpose_s": ours.secs,
        "d_mib_s": d(&ours),
        "verified": true,
        "verified_blocks": ours.verified_blocks,
        "total_blocks": g.n * g.n,
        "caches_dropped": true,
        "ceiling_mib_s": ceiling,
        "baseline_dir": a.baseline.as_ref().map(|p| p.display().to_string()),
        "baseline_d_mib_s": baseline.as_ref().map(d),
        "baseline_transpose_s": baseline.as_ref().map(|b| b.secs),
    });
    println!(
        "bench transpose: {m} x {m} u64 ({}) in {b} x {b} blocks ({}), {} clients, {} of {} blocks verified",
        format_size(g.matrix_bytes()),
        format_size(g.block_bytes()),
        a.clients,
        ours.verified_blocks,
        g.n * g.n,
        m = a.m,
        b = a.b
    );
    print_stream_table(d(&ours), ours.secs, ceiling, baseline.as_ref().map(d));
    if a.compare_direct {
        let store = Store::remote(&a.cluster, &a.path)?;
        let both = crate::scan::relayed_and_direct(&store, || {
            transpose_on(&store, &a, &g, seed).map(|r| (r.secs, 2 * g.matrix_bytes()))
        });
        if !a.keep {
            store.remove_all(&names);
        }
        let both = both?;
        report["relayed"] = both["relayed"].clone();
        report["direct"] = both["direct"].clone();
    }
    if let Some(p) = &a.json {
        write_json(p, &report)?;
    }
    Ok(report)
}

/// Setup, cold transposition, verification on one store.
fn transpose_on(store: &Store, a: &TransposeArgs, g: &Grid, seed: u64) -> Result<Run> {
    store.create("input")?;
    store.create("output")?;
    let pb = progress(g.matrix_bytes(), &format!("{} setup", store.label()));
    run_clients(a.clients, |rank| write_rows(store, g, rank, a.clients, &pb))?;
    pb.finish_and_clear();
    store.drop_cache("input")?;
    let pb = progress(g.matrix_bytes(), &format!("{} transpose", store.label()));
    let (secs, _) = run_clients(a.clients, |rank| {
        transpose_rows(store, g, rank, a.clients, &pb)
    })?;
    pb.finish_and_clear();
    let verified_blocks = verify(store, g, seed)?;
    Ok(Run {
        secs,
        verified_blocks,
    })
}

/// Setup: client `rank` writes its block rows of the input and makes them durable.
fn write_rows(store: &Store, g: &Grid, rank: u32, clients: u32, pb: &ProgressBar) -> Result<()> {
    let f = store.open("input", true)?;
    let mut buf = vec![0u8; g.block_bytes() as usize];
    for r in g.rows(rank, clients) {
        for c in 0..g.n {
            g.fill_input(r, c, &mut buf);
            f.write_at(g.offset(r, c), &buf)?;
            pb.inc(buf.len() as u64);
        }
    }
    f.fsync()?;
    f.close()
}

/// The timed phase of client `rank`: each block (r, c) of its rows goes, transposed, to
/// block (c, r) of the output; the output is fsynced before the client stops its clock.
fn transpose_rows(
    store: &Store,
    g: &Grid,
    rank: u32,
    clients: u32,
    pb: &ProgressBar,
) -> Result<()> {
    let input = store.open("input", false)?;
    let out = store.open("output", true)?;
    let bb = g.block_bytes() as usize;
    let (mut src, mut dst) = (vec![0u8; bb], vec![0u8; bb]);
    for r in g.rows(rank, clients) {
        // A block row is contiguous in the input.
        input.advise_sequential(g.offset(r, 0), g.n * g.block_bytes());
        for c in 0..g.n {
            input.read_exact_at(g.offset(r, c), &mut src)?;
            transpose_block(g.b as usize, &src, &mut dst);
            out.write_at(g.offset(c, r), &dst)?;
            pb.inc(bb as u64);
        }
    }
    out.fsync()?;
    out.close()?;
    input.close()
}

/// Checks the output's size and blocks: all of them when the output is small, otherwise
/// a random set drawn from `seed`. Returns how many blocks were checked.
fn verify(store: &Store, g: &Grid, seed: u64) -> Result<u64> {
    let f = store.open("output", false)?;
    let len = f.len()?;
    if len != g.matrix_bytes() {
        bail!(
            "{} transpose output holds {len} bytes, expected {}",
            store.label(),
            g.matrix_bytes()
        );
    }
    let total = g.n * g.n;
    let blocks: Vec<u64> = if g.matrix_bytes() <= FULL_VERIFY_BYTES || total <= MIN_SAMPLE_BLOCKS {
        (0..total).collect()
    } else {
        let want = (total / 8).max(MIN_SAMPLE_BLOCKS);
        let mut set = std::collections::BTreeSet::new();
        let mut x = seed;
        while (set.len() as u64) < want {
            x = splitmix64(x);
            set.insert(x % total);
        }
        set.into_iter().collect()
    };
    let bb = g.block_bytes() as usize;
    let (mut got, mut exp) = (vec![0u8; bb], vec![0u8; bb]);
    for &k in &blocks {
        let (r, c) = (k / g.n, k % g.n);
        read_block(&f, g, r, c, &mut got)?;
        g.fill_output(r, c, &mut exp);
        if got != exp {
            bail!(
                "{} transpose output: block ({r}, {c}) at offset {} is wrong (seed {seed})",
                store.label(),
                g.offset(r, c)
            );
        }
    }
    f.close()?;
    Ok(blocks.len() as u64)
}

fn read_block(f: &SFile, g: &Grid, r: u64, c: u64, buf: &mut [u8]) -> Result<()> {
    f.read_exact_at(g.offset(r, c), buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(m: u64, b: u64, clients: u32) -> TransposeArgs {
        TransposeArgs {
            cluster: PathBuf::new(),
            m,
            b,
            clients,
            path: "/x".into(),
            json: None,
            seed: None,
            baseline: None,
            keep: false,
            compare_direct: false,
        }
    }

    #[test]
    fn transposing_every_input_block_gives_the_transposed_matrix() {
        let g = Grid { m: 12, b: 4, n: 3 };
        let bb = g.block_bytes() as usize;
        let (mut src, mut dst, mut exp) = (vec![0u8; bb], vec![0u8; bb], vec![0u8; bb]);
        for r in 0..g.n {
            for c in 0..g.n {
                g.fill_input(r, c, &mut src);
                transpose_block(g.b as usize, &src, &mut dst);
                g.fill_output(c, r, &mut exp);
                assert_eq!(dst, exp, "block ({r}, {c})");
            }
        }
    }

    #[test]
    fn tiles_cover_blocks_that_are_not_a_multiple_of_the_tile() {
        let b = TILE + 3;
        let src: Vec<u8> = (0..b * b).flat_map(|k| (k as u64).to_le_bytes()).collect();
        let mut dst = vec![0u8; src.len()];
        transpose_block(b, &src, &mut dst);
        let at = |v: &[u8], i: usize, j: usize| {
            u64::from_le_bytes(v[(i * b + j) * 8..][..8].try_into().unwrap())
        };
        for i in 0..b {
            for j in 0..b {
                assert_eq!(at(&dst, j, i), at(&src, i, j));
            }
        }
    }

    #[test]
    fn bad_arguments_are_refused() {
        assert!(validate(&args(64, 16, 4)).is_ok());
        assert!(validate(&args(64, 24, 1)).is_err());
        assert!(validate(&args(0, 16, 1)).is_err());
        assert!(validate(&args(64, 16, 5)).is_err());
        assert!(validate(&args(1 << 20, 1 << 12, 1)).is_err());
        assert!(validate(&args(64, 16, 0)).is_err());
    }

    #[test]
    fn clients_share_block_rows_round_robin() {
        let g = Grid { m: 40, b: 8, n: 5 };
        let mut all: Vec<u64> = (0..2).flat_map(|r| g.rows(r, 2)).collect();
        all.sort();
        assert_eq!(all, vec![0, 1, 2, 3, 4]);
        assert_eq!(g.rows(1, 2).collect::<Vec<_>>(), vec![1, 3]);
    }
}
