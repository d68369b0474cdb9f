//! `stripefs bench disk DIR`: a bonnie-like local disk test (seeds 000 and 003).
//!
//! On one test file of `--size` bytes in DIR: block write (sequential `--block` writes,
//! then fsync, all timed), rewrite (read each block, change it, write it back in place,
//! then fsync), block read, and random seeks (4 KiB reads at random aligned offsets from
//! [`SEEK_THREADS`] threads, as bonnie's concurrent seekers); then sequential create,
//! stat and delete of `--files` empty files. Before rewrite, read and seeks the file's
//! cached pages are dropped (the whole page cache as root, and this file's clean pages
//! with posix_fadvise in any case) so that reads come from the disk. An operator runs it
//! on every storage target to calibrate the node's disks against stripefs's figures.

use crate::util::{drop_caches, free_bytes, mib_s, progress, progress_ops, write_json};
use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::json;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;
use stripefs_rpc::units::{format_size, parse_size};

/// Threads issuing random reads at once, as bonnie's seeker processes.
pub const SEEK_THREADS: u32 = 4;
/// Bytes of one random read.
pub const SEEK_BYTES: u64 = 4096;
/// Largest block of the sequential phases.
pub const MAX_BLOCK_BYTES: u64 = 64 << 20;
/// Most files of the create/stat/delete phases.
pub const MAX_FILES: u32 = 10_000_000;
/// Free space kept beyond the test file.
const HEADROOM_BYTES: u64 = 256 << 20;

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

/// The measured figures.
#[derive(Clone, Copy, Debug, Default)]
pub struct Figures {
    pub block_write_mib_s: f64,
    pub rewrite_mib_s: f64,
    pub block_read_mib_s: f64,
    pub seeks_s: f64,
    pub create_s: f64,
    pub stat_s: f64,
    pub delete_s: f64,
    pub caches_dropped: bool,
}

fn validate(a: &DiskArgs) -> Result<()> {
    if a.block == 0 || a.block % 4096 != 0 || a.block > MAX_BLOCK_BYTES {
        bail!(
            "--block must be a multiple of 4K up to {}",
            format_size(MAX_BLOCK_BYTES)
        );
    }
    if a.size < a.block || a.size % a.block != 0 {
        bail!("--size must be a positive multiple of --block");
    }
    if a.seeks == 0 {
        bail!("--seeks must be at least 1");
    }
    if a.files == 0 || a.files > MAX_FILES {
        bail!("--files must be between 1 and {MAX_FILES}");
    }
    Ok(())
}

/// Runs the benchmark and prints its table; returns the JSON object it reports.
pub fn run(a: DiskArgs) -> Result<serde_json::Value> {
    validate(&a)?;
    std::fs::create_dir_all(&a.dir)
        .with_context(|| format!("cannot create {}", a.dir.display()))?;
    let free = free_bytes(&a.dir)?;
    if free < a.size + HEADROOM_BYTES {
        bail!(
            "{} has {} free; the test file needs {} plus {} headroom",
            a.dir.display(),
            format_size(free),
            format_size(a.size),
            format_size(HEADROOM_BYTES)
        );
    }
    let seed = crate::util::seed();
    let file = a.dir.join(format!("stripefs-disk-{seed:x}"));
    let blocks = block_phases(&a, &file, seed);
    let _ = std::fs::remove_file(&file);
    let mut fig = blocks?;
    let files_dir = a.dir.join(format!("stripefs-disk-files-{seed:x}"));
    let files = file_phases(&a, &files_dir, &mut fig);
    let _ = std::fs::remove_dir_all(&files_dir);
    files?;
    let report = json!({
        "benchmark": "disk",
        "dir": a.dir.display().to_string(),
        "size_bytes": a.size,
        "block_bytes": a.block,
        "seeks": a.seeks,
        "seek_threads": SEEK_THREADS,
        "files": a.files,
        "seed": seed,
        "block_write_mib_s": fig.block_write_mib_s,
        "rewrite_mib_s": fig.rewrite_mib_s,
        "block_read_mib_s": fig.block_read_mib_s,
        "seeks_s": fig.seeks_s,
        "create_s": fig.create_s,
        "stat_s": fig.stat_s,
        "delete_s": fig.delete_s,
        "caches_dropped": fig.caches_dropped,
    });
    print_table(&a, &fig);
    if let Some(p) = &a.json {
        write_json(p, &report)?;
    }
    Ok(report)
}

/// Block write, rewrite, block read and seeks on `file`.
fn block_phases(a: &DiskArgs, file: &Path, seed: u64) -> Result<Figures> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(file)
        .with_context(|| format!("cannot create {}", file.display()))?;
    let mut fig = Figures::default();
    let mut buf = vec![0u8; a.block as usize];
    let pb = progress(a.size, "write");
    let t0 = Instant::now();
    for (i, off) in (0..a.size).step_by(a.block as usize).enumerate() {
        fill(&mut buf, seed ^ i as u64);
        f.write_all_at(&buf, off)?;
        pb.inc(a.block);
    }
    f.sync_all()?;
    fig.block_write_mib_s = mib_s(a.size, t0.elapsed().as_secs_f64());
    pb.finish_and_clear();
    fig.caches_dropped = evict(&f);
    fig.rewrite_mib_s = rewrite(a, &f, &mut buf)?;
    evict(&f);
    let pb = progress(a.size, "read");
    let t0 = Instant::now();
    advise(&f, libc::POSIX_FADV_SEQUENTIAL);
    for off in (0..a.size).step_by(a.block as usize) {
        f.read_exact_at(&mut buf, off)?;
        pb.inc(a.block);
    }
    fig.block_read_mib_s = mib_s(a.size, t0.elapsed().as_secs_f64());
    pb.finish_and_clear();
    evict(&f);
    advise(&f, libc::POSIX_FADV_RANDOM);
    fig.seeks_s = seeks(a, &f, seed)?;
    Ok(fig)
}

/// Reads each block, changes it and writes it back in place, then fsyncs; MiB/s of the
/// file's size (bonnie's rewrite).
fn rewrite(a: &DiskArgs, f: &std::fs::File, buf: &mut [u8]) -> Result<f64> {
    let pb = progress(a.size, "rewrite");
    let t0 = Instant::now();
    for off in (0..a.size).step_by(a.block as usize) {
        f.read_exact_at(buf, off)?;
        buf[0] = buf[0].wrapping_add(1);
        f.write_all_at(buf, off)?;
        pb.inc(a.block);
    }
    f.sync_all()?;
    pb.finish_and_clear();
    Ok(mib_s(a.size, t0.elapsed().as_secs_f64()))
}

/// Random aligned 4 KiB reads from several threads; reads per second.
fn seeks(a: &DiskArgs, f: &std::fs::File, seed: u64) -> Result<f64> {
    let slots = a.size / SEEK_BYTES;
    let pb = progress_ops(a.seeks as u64, "seeks");
    let t0 = Instant::now();
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..SEEK_THREADS)
            .map(|t| {
                let pb = &pb;
                let n = a.seeks / SEEK_THREADS + u32::from(t < a.seeks % SEEK_THREADS);
                s.spawn(move || {
                    let mut rng = seed ^ (u64::from(t) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                    let mut buf = vec![0u8; SEEK_BYTES as usize];
                    for _ in 0..n {
                        let off = (xorshift(&mut rng) % slots) * SEEK_BYTES;
                        f.read_exact_at(&mut buf, off)?;
                        pb.inc(1);
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| bail!("seek thread panicked")))
            .collect()
    });
    pb.finish_and_clear();
    results.into_iter().collect::<Result<()>>()?;
    Ok(a.seeks as f64 / t0.elapsed().as_secs_f64().max(1e-9))
}

/// Sequential create, stat and delete of empty files in `dir`.
fn file_phases(a: &DiskArgs, dir: &Path, fig: &mut Figures) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let name = |i: u32| dir.join(format!("{i:07}"));
    fig.create_s = files_rate(a.files, "create", |i| {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(name(i))
            .map(drop)
    })?;
    fig.stat_s = files_rate(a.files, "stat", |i| std::fs::metadata(name(i)).map(drop))?;
    fig.delete_s = files_rate(a.files, "delete", |i| std::fs::remove_file(name(i)))?;
    Ok(())
}

fn files_rate(n: u32, what: &str, op: impl Fn(u32) -> std::io::Result<()>) -> Result<f64> {
    let pb = progress_ops(n as u64, what);
    let t0 = Instant::now();
    for i in 0..n {
        op(i).with_context(|| format!("{what} of file {i}"))?;
        pb.inc(1);
    }
    pb.finish_and_clear();
    Ok(n as f64 / t0.elapsed().as_secs_f64().max(1e-9))
}

/// Drops the file's clean cached pages (any user) and, as root, the whole page cache;
/// returns whether the whole cache was dropped.
fn evict(f: &std::fs::File) -> bool {
    advise(f, libc::POSIX_FADV_DONTNEED);
    drop_caches()
}

fn advise(f: &std::fs::File, advice: libc::c_int) {
    // SAFETY: a hint on our own open descriptor over the whole file; no memory is touched.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, advice) };
}

/// Fills `buf` with bytes that differ per block, so no layer can compress or dedupe.
fn fill(buf: &mut [u8], seed: u64) {
    let mut x = seed | 1;
    for chunk in buf.chunks_mut(8) {
        let v = xorshift(&mut x).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn print_table(a: &DiskArgs, f: &Figures) {
    println!(
        "bench disk: {}, file {} in {} blocks, {} seeks from {} threads, {} files",
        a.dir.display(),
        format_size(a.size),
        format_size(a.block),
        a.seeks,
        SEEK_THREADS,
        a.files
    );
    println!(
        "{:>12} {:>12} {:>12} {:>10} {:>10} {:>10} {:>10}",
        "write MiB/s", "rewrite", "read MiB/s", "seeks/s", "create/s", "stat/s", "delete/s"
    );
    println!(
        "{:>12.0} {:>12.0} {:>12.0} {:>10.0} {:>10.0} {:>10.0} {:>10.0}",
        f.block_write_mib_s,
        f.rewrite_mib_s,
        f.block_read_mib_s,
        f.seeks_s,
        f.create_s,
        f.stat_s,
        f.delete_s
    );
    println!(
        "page cache dropped before rewrite, read and seeks: {}",
        if f.caches_dropped {
            "yes"
        } else {
            "this file's pages only (posix_fadvise; not root)"
        }
    );
}
