//! `stripefs bench io`: mpi-io-test (seed 003) and IOR's segmented/strided shape.
//!
//! N clients run at once, each with its own connections. Each makes `--segments`
//! transfers of `--xfer` bytes (any byte count: 47008 is as good as 1M), then fsyncs.
//! Client r's k-th transfer goes to offset `r * block + k * xfer` of one shared file
//! (a contiguous block of `block = segments * xfer` bytes per client), to `k * xfer` of a
//! file of its own with `--file-per-process`, or with `--interleaved` to
//! `(k * clients + r) * xfer` of one shared file, the clients' transfers interleaved.
//! Then, after the page cache is dropped (as root), each client reads back the transfers
//! another client wrote and verifies every byte. The same pattern, sizes, fsyncs and cache
//! drops run on a local directory with `--baseline DIR`, in the same run, as the
//! reference, and with `--mount DIR` through a FUSE mount of the same cluster with plain
//! system calls, one process per client.

use crate::cpu::{self, PhaseCpu};
use crate::pattern::Pattern;
use crate::ranks::Ranks;
use crate::util::{client_on, drop_caches, free_bytes, mib_s, pct, progress, write_json};
use crate::worker::{Done, Spec, Workers};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use indicatif::ProgressBar;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use stripefs_client::{Client, IoBuf, OpenOptions, Traffic};
use stripefs_rpc::units::{format_size, parse_size};
use stripefs_rpc::ClusterConfig;
use stripefs_wire::{LayoutHint, Policy};

mod local;
mod mount;
mod native;
mod report;

use local::*;
pub use mount::*;
use native::*;
use report::*;
/// Most clients one run starts.
pub const MAX_CLIENTS: u32 = 1024;
/// Largest transfer.
pub const MAX_XFER: u64 = 64 << 20;
/// Block per client when neither `--block` nor `--segments` is given.
pub const DEFAULT_BLOCK: u64 = 64 << 20;

#[derive(Args, Clone, Debug)]
pub struct IoArgs {
    /// Cluster description file.
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    pub cluster: PathBuf,
    /// The clients' host id (default: `host` in the cluster file, else the hostname):
    /// which emulated host of `cluster up --hosts` they run on.
    #[arg(long, env = "STRIPEFS_HOST")]
    pub host: Option<String>,
    /// Number of concurrent clients (threads, each with its own client and connections).
    #[arg(long, default_value_t = 4)]
    pub clients: u32,
    /// Bytes each client writes and reads (default 64M; a multiple of --xfer). With
    /// --segments it must equal segments x xfer, or be left out.
    #[arg(long, value_parser = parse_size)]
    pub block: Option<u64>,
    /// Bytes per write or read call: any byte count up to 64M (47008, 4096, 1M, ...).
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    pub xfer: u64,
    /// Transfers each client makes: its block is segments x xfer bytes (default: --block
    /// / --xfer).
    #[arg(long)]
    pub segments: Option<u64>,
    /// Interleave the clients' transfers in one shared file: client r's k-th transfer
    /// goes to offset (k * clients + r) * xfer (IOR's segmented shape). Without it each
    /// client writes a contiguous block (or its own file with --file-per-process).
    #[arg(long, conflicts_with = "file_per_process")]
    pub interleaved: bool,
    /// One file per client instead of one shared file.
    #[arg(long)]
    pub file_per_process: bool,
    /// Run client i on the host of data server i (modulo the data servers, by the
    /// cluster file's host ids, as `cluster up --hosts` writes them), and have each client
    /// read back its own transfers instead of its neighbour's, so that with a local
    /// layout both phases stay on each client's host. The JSON's local_bytes_fraction
    /// says how many bytes did.
    #[arg(long, conflicts_with = "colocate_fraction")]
    pub colocate: bool,
    /// Colocate only this fraction of the clients (0 to 1; `--colocate` is 1): the first
    /// round(F x clients) run on their data servers' hosts as with `--colocate`, the
    /// others on a host with no data server (`remote-client`). Every client reads back
    /// its own transfers.
    #[arg(long)]
    pub colocate_fraction: Option<f64>,
    /// Placement policy of the test files (`setstripe --layout`): local puts a file on
    /// the data servers of the host of the client that creates it first (with
    /// --file-per-process, client i creates file i); a shared file with --colocate (or
    /// --colocate-fraction) is laid out by rank instead: one data server per client in
    /// rank order, each client's own where its host has one, with a stripe size of the
    /// bytes each client writes contiguously (--block, or --xfer with --interleaved)
    /// unless --stripe-size is given. spread rotates (default: the directory's or the
    /// cluster's).
    #[arg(long, value_parser = ["local", "spread"])]
    pub layout: Option<String>,
    /// Also run the same pattern through this FUSE mount of the same cluster
    /// (`stripefs mount DIR`) with plain system calls (pwrite, pread, fsync), one process
    /// per client, right after the native run; reported as `mount_*` beside it.
    #[arg(long)]
    pub mount: Option<PathBuf>,
    /// Stripe size of the test file(s) (default: the cluster's).
    #[arg(long, value_parser = parse_size)]
    pub stripe_size: Option<u64>,
    /// Stripe count of the test file(s) (0 = all data servers; default: the cluster's).
    #[arg(long)]
    pub stripe_count: Option<u32>,
    /// Directory in stripefs for the test files.
    #[arg(long, default_value = "/bench-io")]
    pub path: String,
    /// Run the same pattern on this local directory as the same-run reference.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Write the figures as one JSON object to FILE.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Keep the test files afterwards.
    #[arg(long)]
    pub keep: bool,
}

/// Measured figures of one pattern run.
#[derive(Clone, Copy, Debug)]
pub struct Phases {
    pub write_mib_s: f64,
    pub read_mib_s: f64,
    pub write_s: f64,
    pub read_s: f64,
    pub caches_dropped: bool,
    /// CPU seconds of each phase (servers when known, and this process).
    pub write_cpu: PhaseCpu,
    pub read_cpu: PhaseCpu,
    /// Where each phase's bytes went (native runs).
    pub write_traffic: Option<Traffic>,
    pub read_traffic: Option<Traffic>,
}

impl Phases {
    /// The timings of moving `total` bytes each way, with no CPU or traffic figures.
    fn timed(total: u64, write_s: f64, read_s: f64, caches_dropped: bool) -> Phases {
        Phases {
            write_mib_s: mib_s(total, write_s),
            read_mib_s: mib_s(total, read_s),
            write_s,
            read_s,
            caches_dropped,
            write_cpu: PhaseCpu::default(),
            read_cpu: PhaseCpu::default(),
            write_traffic: None,
            read_traffic: None,
        }
    }
}

/// One open file of a client, on stripefs or locally.
trait Handle: Send {
    /// The caller will read `[off, off + len)` sequentially (a hint, like posix_fadvise).
    fn advise_sequential(&mut self, _off: u64, _len: u64) {}
    fn write_at(&mut self, off: u64, buf: &[u8]) -> Result<()>;
    /// Writes a buffer the caller gives away (the native client sends it as it is when
    /// it can, as an application that fills its own aligned buffers would).
    fn write_buf(&mut self, off: u64, buf: IoBuf) -> Result<()> {
        self.write_at(off, &buf)
    }
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<()>;
    /// Reads into a buffer of the native client's (which may read it from the disk
    /// straight in).
    fn read_buf(&mut self, off: u64, buf: &mut IoBuf) -> Result<()> {
        self.read_at(off, buf)
    }
    fn fsync(&mut self) -> Result<()>;
    fn close(self: Box<Self>) -> Result<()>;
}

/// Where the pattern runs.
trait Backend: Sync {
    fn open(&self, rank: u32, file: u32, write: bool) -> Result<Box<dyn Handle>>;
    /// The bytes the backend's clients moved since the last call, by where they went;
    /// `None` where that is not counted.
    fn take_traffic(&self) -> Option<Traffic> {
        None
    }
}

/// Where every transfer of a run goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    pub clients: u32,
    /// Bytes per transfer.
    pub xfer: u64,
    /// Transfers per client.
    pub segments: u64,
    pub interleaved: bool,
    pub file_per_process: bool,
    /// Each client reads back its own transfers (`--colocate`), not its neighbour's.
    #[serde(default)]
    pub own_reads: bool,
}

impl Shape {
    /// Bytes each client writes (and reads).
    pub fn block(&self) -> u64 {
        self.segments * self.xfer
    }

    /// Test files of the run.
    pub fn files(&self) -> u32 {
        if self.file_per_process {
            self.clients
        } else {
            1
        }
    }

    /// The file and offset of client `owner`'s `k`-th transfer.
    pub fn transfer(&self, owner: u32, k: u64) -> (u32, u64) {
        if self.file_per_process {
            (owner, k * self.xfer)
        } else if self.interleaved {
            (0, (k * self.clients as u64 + owner as u64) * self.xfer)
        } else {
            (0, owner as u64 * self.block() + k * self.xfer)
        }
    }

    /// The range holding all of client `owner`'s transfers, when they are contiguous.
    fn contiguous(&self, owner: u32) -> Option<(u64, u64)> {
        (!self.interleaved).then(|| (self.transfer(owner, 0).1, self.block()))
    }
}

/// Checks the arguments and works out the shape: `--block` and `--segments` say the same
/// thing (block = segments x xfer), so either may be given, or both when they agree.
pub fn shape(a: &IoArgs) -> Result<Shape> {
    if a.clients == 0 || a.clients > MAX_CLIENTS {
        bail!("--clients must be between 1 and {MAX_CLIENTS}");
    }
    if a.xfer == 0 || a.xfer > MAX_XFER {
        bail!("--xfer must be between 1 byte and 64M, not {}", a.xfer);
    }
    if let Some(f) = a.colocate_fraction {
        if !(0.0..=1.0).contains(&f) {
            bail!("--colocate-fraction must be between 0 and 1, not {f}");
        }
    }
    if a.interleaved && a.file_per_process {
        bail!("--interleaved interleaves the clients in one shared file; it cannot go with --file-per-process");
    }
    let segments = match (a.block, a.segments) {
        (_, Some(0)) => bail!("--segments must be at least 1"),
        (Some(b), Some(s)) => {
            if s.checked_mul(a.xfer) != Some(b) {
                bail!(
                    "--block {b} contradicts --segments {s} x --xfer {} (block = segments x xfer): give one of them",
                    a.xfer
                );
            }
            s
        }
        (None, Some(s)) => s,
        (Some(b), None) => {
            if b < a.xfer || b % a.xfer != 0 {
                bail!(
                    "--block {b} must be a positive multiple of --xfer {}",
                    a.xfer
                );
            }
            b / a.xfer
        }
        (None, None) => {
            if DEFAULT_BLOCK % a.xfer != 0 {
                bail!(
                    "--xfer {} does not divide the default --block 64M: give --segments N (block = N x xfer) or a --block that is a multiple of it",
                    a.xfer
                );
            }
            DEFAULT_BLOCK / a.xfer
        }
    };
    let total = segments
        .checked_mul(a.xfer)
        .and_then(|b| b.checked_mul(a.clients as u64))
        .filter(|t| *t <= 1 << 50);
    if total.is_none() {
        bail!(
            "--segments {segments} x --xfer {} x --clients {} is too large",
            a.xfer,
            a.clients
        );
    }
    Ok(Shape {
        clients: a.clients,
        xfer: a.xfer,
        segments,
        interleaved: a.interleaved,
        file_per_process: a.file_per_process,
        own_reads: a.colocate || a.colocate_fraction.is_some(),
    })
}

/// Runs the benchmark and prints its table; returns the JSON object it reports.
pub fn run(a: IoArgs) -> Result<serde_json::Value> {
    let sh = shape(&a)?;
    let mut cluster = ClusterConfig::load(&a.cluster).map_err(|e| anyhow!(e))?;
    cluster
        .set_client_host(a.host.as_deref())
        .map_err(|e| anyhow!(e))?;
    let seed = crate::util::seed();
    let pattern = Arc::new(Pattern::new(seed, a.xfer as usize));
    let files = sh.files();
    let remote = Remote::prepare(&cluster, &a, files, "file")?;
    let ceiling = remote.ceiling_mib_s()?;
    let servers = cpu::Servers::of_cluster(&a.cluster);
    let total = sh.clients as u64 * sh.block();
    let ours = run_pattern(&remote, &sh, &pattern, "stripefs", &servers);
    if !a.keep {
        remote.cleanup();
    }
    let ours = ours?;
    let mount = match &a.mount {
        Some(dir) => {
            let files = Remote::prepare(&cluster, &a, files, "mount-file")?;
            let r = run_mount(&files, dir, &sh, seed);
            if !a.keep {
                files.cleanup();
            }
            Some(r?)
        }
        None => None,
    };
    let baseline = match &a.baseline {
        Some(dir) => {
            let local = Local::prepare(dir, files, a.clients as u64 * sh.block())?;
            let none = cpu::Servers::none();
            let r = run_pattern(&local, &sh, &pattern, "baseline", &none);
            local.cleanup();
            Some(r?)
        }
        None => None,
    };
    let mut report = shared_report(&a, &sh, &remote, &cluster, seed, &ours, ceiling);
    extend(
        &mut report,
        json!({
            "mount": a.mount.as_ref().map(|d| d.display().to_string()),
            "mount_write_mib_s": mount.map(|m| m.write_mib_s),
            "mount_read_mib_s": mount.map(|m| m.read_mib_s),
            "mount_write_s": mount.map(|m| m.write_s),
            "mount_read_s": mount.map(|m| m.read_s),
            "mount_caches_dropped": mount.map(|m| m.caches_dropped),
            "baseline_dir": a.baseline.as_ref().map(|d| d.display().to_string()),
            "baseline_write_mib_s": baseline.map(|b| b.write_mib_s),
            "baseline_read_mib_s": baseline.map(|b| b.read_mib_s),
            "colocate": a.colocate,
            "colocate_fraction": colocate_fraction(&a),
            "layout": a.layout,
            "client_hosts": remote.hosts,
            "local_bytes_fraction": {
                "write": ours.write_traffic.and_then(|t| local_fraction(&t, true)),
                "read": ours.read_traffic.and_then(|t| local_fraction(&t, false)),
            },
            "local_bytes": {
                "write": ours.write_traffic.map(|t| t.local_written + t.direct_written),
                "read": ours.read_traffic.map(|t| t.local_read + t.direct_read),
            },
            "short_circuit_bytes": {
                "write": ours.write_traffic.map(|t| t.direct_written),
                "read": ours.read_traffic.map(|t| t.direct_read),
            },
            "client_written_bytes": ours.write_traffic.map(|t| t.self_written),
            "client_direct_read_bytes": ours.read_traffic.map(|t| t.self_read),
            "remote_bytes": {
                "write": ours.write_traffic.map(|t| t.remote_written),
                "read": ours.read_traffic.map(|t| t.remote_read),
            },
            "server_cpu_s_per_gib": {
                "write": cpu::per_gib(ours.write_cpu.server_s, total),
                "read": cpu::per_gib(ours.read_cpu.server_s, total),
            },
            "total_cpu_s_per_gib": {
                "write": cpu::per_gib(ours.write_cpu.total_s(), total),
                "read": cpu::per_gib(ours.read_cpu.total_s(), total),
            },
            "client_cpu_s_per_gib": {
                "write": cpu::per_gib(Some(ours.write_cpu.client_s), total),
                "read": cpu::per_gib(Some(ours.read_cpu.client_s), total),
            },
            "server_cpu_known": servers.known(),
        }),
    );
    print_table(
        &sh,
        &remote,
        &ours,
        mount.as_ref(),
        ceiling,
        baseline.as_ref(),
    );
    print_locality(&ours, total, servers.known());
    if let Some(p) = &a.json {
        write_json(p, &report)?;
    }
    Ok(report)
}

/// mpi-io-test (seed 003) on `ranks`, one client per rank: each rank writes its
/// transfers (its contiguous block by default, as `bench io`), fsyncs, and after a
/// barrier reads back its neighbour's and verifies; each phase is timed from the
/// barrier before it to the barrier after it. `--clients` is the number of ranks. The
/// JSON has `bench io`'s keys for what both measure; the mount, the baseline and
/// colocation belong to `bench io` alone.
pub fn run_on(mut a: IoArgs, ranks: &dyn Ranks) -> Result<serde_json::Value> {
    if a.mount.is_some() || a.baseline.is_some() || a.colocate || a.colocate_fraction.is_some() {
        bail!("--mount, --baseline, --colocate and --colocate-fraction are options of stripefs bench io; under mpirun, io takes the pattern and layout options");
    }
    a.clients = u32::try_from(ranks.size()).context("too many ranks")?;
    let sh = shape(&a)?;
    let mut cluster = ClusterConfig::load(&a.cluster).map_err(|e| anyhow!(e))?;
    cluster
        .set_client_host(a.host.as_deref())
        .map_err(|e| anyhow!(e))?;
    let seed = ranks.root_value(crate::util::seed());
    let pattern = Pattern::new(seed, a.xfer as usize);
    let files = sh.files();
    ranks.once(&|| Remote::prepare(&cluster, &a, files, "file").map(|_| ()))?;
    let remote = Remote::attach(&cluster, &a, files, "file")?;
    let hidden = ProgressBar::hidden();
    let mut secs = [0f64; 2];
    let dropped = std::sync::atomic::AtomicBool::new(false);
    for (i, write) in [true, false].into_iter().enumerate() {
        if !write {
            ranks.once(&|| {
                dropped.store(drop_caches(), std::sync::atomic::Ordering::Relaxed);
                Ok(())
            })?;
        }
        secs[i] = ranks.each(&|comm| {
            let rank = comm.rank() as u32;
            comm.barrier();
            let start = Instant::now();
            client_phase(
                &remote,
                &sh,
                &pattern,
                reader_of(&sh, rank, write),
                write,
                &hidden,
            )?;
            comm.barrier();
            Ok(start.elapsed().as_secs_f64())
        })?;
    }
    let ceiling = remote.ceiling_mib_s()?;
    if !a.keep {
        ranks.once(&|| {
            remote.cleanup();
            Ok(())
        })?;
    }
    let total = sh.clients as u64 * sh.block();
    let ours = Phases::timed(total, secs[0], secs[1], dropped.into_inner());
    let mut report = shared_report(&a, &sh, &remote, &cluster, seed, &ours, ceiling);
    extend(
        &mut report,
        json!({
            "ranks": "mpi",
            "layout": a.layout,
        }),
    );
    if ranks.is_root() {
        println!(
            "io: {} ranks x {} in {} transfers of {}: write {:.1} MiB/s{}, read {:.1} MiB/s{} (verified{})",
            a.clients,
            format_size(sh.block()),
            sh.segments,
            format_size(sh.xfer),
            ours.write_mib_s,
            ceiling.map(|c| format!(" ({} of the disk ceiling)", pct(ours.write_mib_s, Some(c)))).unwrap_or_default(),
            ours.read_mib_s,
            ceiling.map(|c| format!(" ({})", pct(ours.read_mib_s, Some(c)))).unwrap_or_default(),
            if ours.caches_dropped { ", caches dropped" } else { "" }
        );
        if let Some(p) = &a.json {
            write_json(p, &report)?;
        }
    }
    Ok(report)
}

/// Writes, fsyncs, drops caches, reads back and verifies; returns the timings.
fn run_pattern(
    b: &dyn Backend,
    sh: &Shape,
    pattern: &Arc<Pattern>,
    label: &str,
    servers: &cpu::Servers,
) -> Result<Phases> {
    let total = sh.clients as u64 * sh.block();
    let pb = progress(total, &format!("{label} w"));
    b.take_traffic();
    let mark = cpu::Mark::now(servers);
    let write_s = phase(b, sh, pattern, true, &pb)?;
    let write_cpu = mark.elapsed(servers);
    let write_traffic = b.take_traffic();
    pb.finish_and_clear();
    let caches_dropped = drop_caches();
    let pb = progress(total, &format!("{label} r"));
    let mark = cpu::Mark::now(servers);
    let read_s = phase(b, sh, pattern, false, &pb)?;
    let read_cpu = mark.elapsed(servers);
    let read_traffic = b.take_traffic();
    pb.finish_and_clear();
    Ok(Phases {
        write_cpu,
        read_cpu,
        write_traffic,
        read_traffic,
        ..Phases::timed(total, write_s, read_s, caches_dropped)
    })
}

/// Runs one phase on all clients at once; returns seconds from the first start to the
/// last finish (opens, fsyncs and closes included).
fn phase(
    b: &dyn Backend,
    sh: &Shape,
    pattern: &Arc<Pattern>,
    write: bool,
    pb: &ProgressBar,
) -> Result<f64> {
    let (secs, _) = crate::util::run_clients(sh.clients, |rank| {
        client_phase(b, sh, pattern, reader_of(sh, rank, write), write, pb)
    })?;
    Ok(secs)
}

/// Whose transfers client `rank` handles: its own when writing; when reading, those
/// its neighbour wrote.
fn reader_of(sh: &Shape, rank: u32, write: bool) -> u32 {
    if write || sh.own_reads {
        rank
    } else {
        (rank + 1) % sh.clients
    }
}

/// Writes (or reads back and verifies) all transfers of client `owner`.
fn client_phase(
    b: &dyn Backend,
    sh: &Shape,
    pattern: &Pattern,
    owner: u32,
    write: bool,
    pb: &ProgressBar,
) -> Result<()> {
    let (file, _) = sh.transfer(owner, 0);
    // Page-aligned, as IOR's are: a read into it may go from the disk straight in.
    let mut buf = IoBuf::new(if write { 0 } else { sh.xfer as usize });
    let start = Instant::now();
    let mut h = b.open(owner, file, write)?;
    if let (false, Some((off, len))) = (write, sh.contiguous(owner)) {
        h.advise_sequential(off, len);
    }
    for k in 0..sh.segments {
        let (_, off) = sh.transfer(owner, k);
        if write {
            // A fresh buffer per write (from the client's pool): the client may send
            // it as it is, after this returns.
            let mut out = IoBuf::new(sh.xfer as usize);
            pattern.fill(off, &mut out);
            h.write_buf(off, out)?;
        } else {
            h.read_buf(off, &mut buf)?;
            pattern.verify(off, &buf).map_err(|bad| {
                anyhow!("verification failed: wrong data in the 4 KiB block at offset {bad} of file {file} (transfer at {off})")
            })?;
        }
        pb.inc(sh.xfer);
    }
    let sync_start = Instant::now();
    if write {
        h.fsync()?;
    }
    h.close()?;
    if std::env::var_os("STRIPEFS_BENCH_TRACE").is_some() {
        eprintln!(
            "client {owner} {}: {:.3} s moving data, {:.3} s in fsync+close",
            if write { "write" } else { "read" },
            (sync_start - start).as_secs_f64(),
            sync_start.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Result<IoArgs> {
        let mut argv: Vec<String> = vec!["--cluster".into(), "c.toml".into()];
        argv.extend(extra.iter().map(|s| s.to_string()));
        crate::util::parse_args::<IoArgs>(&argv)
    }

    fn shape_of(extra: &[&str]) -> Result<Shape> {
        shape(&args(extra)?)
    }

    /// A cluster file of data servers on the given hosts.
    fn cluster_on(hosts: &[&str]) -> ClusterConfig {
        let mut text = format!(
            "secret = \"{}\"\n[meta]\naddr = \"127.0.0.1:1\"\n",
            "ab".repeat(32)
        );
        for (i, h) in hosts.iter().enumerate() {
            text += &format!("[[data]]\naddr = \"127.0.0.1:{}\"\nhost = \"{h}\"\n", i + 2);
        }
        ClusterConfig::parse(&text).unwrap()
    }

    /// Laid out by rank, every transfer of every colocated rank is on a data server of
    /// its own host, for contiguous blocks and for interleaved transfers.
    #[test]
    fn a_shared_file_laid_out_by_rank_keeps_each_rank_on_its_host() {
        let cl = cluster_on(&["h1", "h0", "h1", "h2"]);
        for extra in [
            &["--clients", "3", "--block", "8M", "--xfer", "1M"][..],
            &[
                "--clients",
                "4",
                "--xfer",
                "64K",
                "--segments",
                "9",
                "--interleaved",
            ],
        ] {
            let a = args(extra).unwrap();
            let sh = shape(&a).unwrap();
            let hosts = colocated_hosts(&cl, sh.clients, 1.0).unwrap();
            let (unit, order) = by_rank(&cl, &sh, &hosts, None).unwrap();
            assert_eq!(order.len(), sh.clients as usize);
            let stripe = stripefs_layout::Stripe::new(unit as u64, order.len() as u32).unwrap();
            for r in 0..sh.clients {
                for k in 0..sh.segments {
                    let (_, off) = sh.transfer(r, k);
                    for p in stripe.split(off, sh.xfer) {
                        let server = order[p.place as usize] as usize;
                        assert_eq!(
                            cl.data[server].host.as_deref(),
                            Some(hosts[r as usize].as_str()),
                            "{extra:?}: rank {r} transfer {k}"
                        );
                    }
                }
            }
        }
        // More clients than servers, or a unit no stripe can have: no such layout.
        let a = args(&["--clients", "5", "--block", "1M"]).unwrap();
        let hosts = colocated_hosts(&cl, 5, 1.0).unwrap();
        assert!(by_rank(&cl, &shape(&a).unwrap(), &hosts, None).is_err());
        let a = args(&[
            "--clients",
            "4",
            "--xfer",
            "47008",
            "--segments",
            "2",
            "--interleaved",
        ]);
        let hosts = colocated_hosts(&cl, 4, 1.0).unwrap();
        assert!(by_rank(&cl, &shape(&a.unwrap()).unwrap(), &hosts, None).is_err());
    }

    #[test]
    fn interleaved_offsets_cover_the_file_once() {
        let sh = shape_of(&[
            "--clients",
            "3",
            "--xfer",
            "47008",
            "--segments",
            "20",
            "--interleaved",
        ])
        .unwrap();
        assert_eq!((sh.segments, sh.block(), sh.files()), (20, 20 * 47008, 1));
        assert_eq!(sh.transfer(0, 0), (0, 0));
        assert_eq!(sh.transfer(1, 0), (0, 47008));
        assert_eq!(sh.transfer(2, 0), (0, 2 * 47008));
        assert_eq!(sh.transfer(0, 1), (0, 3 * 47008));
        assert_eq!(sh.transfer(2, 19), (0, (19 * 3 + 2) * 47008));
        let mut offs: Vec<u64> = (0..3)
            .flat_map(|r| (0..20).map(move |k| sh.transfer(r, k).1))
            .collect();
        offs.sort_unstable();
        let want: Vec<u64> = (0..60).map(|i| i * 47008).collect();
        assert_eq!(offs, want, "every transfer slot once, no gap, no overlap");
        assert_eq!(sh.contiguous(1), None);
    }

    #[test]
    fn contiguous_and_file_per_process_layouts() {
        let sh = shape_of(&["--clients", "2", "--xfer", "1000", "--block", "5000"]).unwrap();
        assert_eq!(sh.segments, 5);
        assert_eq!(sh.transfer(1, 0), (0, 5000));
        assert_eq!(sh.transfer(1, 4), (0, 9000));
        assert_eq!(sh.contiguous(1), Some((5000, 5000)));
        let fpp = shape_of(&[
            "--clients",
            "2",
            "--xfer",
            "3",
            "--segments",
            "7",
            "--file-per-process",
        ])
        .unwrap();
        assert_eq!((fpp.block(), fpp.files()), (21, 2));
        assert_eq!(fpp.transfer(1, 2), (1, 6));
        // Today's defaults: 64M blocks of 1M transfers; suffixes still work.
        let d = shape_of(&[]).unwrap();
        assert_eq!((d.xfer, d.segments), (1 << 20, 64));
        let k = shape_of(&["--xfer", "256K", "--block", "1M"]).unwrap();
        assert_eq!((k.xfer, k.segments), (256 << 10, 4));
    }

    #[test]
    fn block_and_segments_must_agree() {
        let ok = shape_of(&["--xfer", "47008", "--segments", "2", "--block", "94016"]).unwrap();
        assert_eq!(ok.block(), 94016);
        let err = |extra: &[&str]| format!("{:#}", shape_of(extra).unwrap_err());
        assert!(
            err(&["--xfer", "47008", "--segments", "2", "--block", "1M"])
                .contains("contradicts --segments")
        );
        assert!(err(&["--xfer", "47008"]).contains("does not divide the default --block"));
        assert!(err(&["--xfer", "1000", "--block", "1500"]).contains("multiple of --xfer"));
        assert!(err(&["--segments", "0"]).contains("--segments must be at least 1"));
        assert!(err(&["--xfer", "0"]).contains("--xfer must be between"));
        assert!(err(&["--xfer", "65M"]).contains("--xfer must be between"));
        assert!(err(&["--interleaved", "--file-per-process"]).contains("cannot be used with"));
    }
}
