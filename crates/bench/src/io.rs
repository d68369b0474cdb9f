//! `stripefs bench io`: mpi-io-test (seed 003).
//!
//! N clients run at once, each with its own connections. Each writes a contiguous block of
//! `--block` bytes in `--xfer` transfers to its own region of one shared file (or to a
//! file of its own with `--file-per-process`), then fsyncs. Then, after the page cache is
//! dropped (as root), each client reads back the block another client wrote and verifies
//! every byte. The same pattern, sizes, fsyncs and cache drops run on a local directory
//! with `--baseline DIR`, in the same run, as the reference.

use crate::pattern::Pattern;
use crate::util::{drop_caches, free_bytes, mib_s, pct, progress, write_json};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use indicatif::ProgressBar;
use serde_json::json;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use stripefs_client::{Client, OpenOptions};
use stripefs_rpc::units::{format_size, parse_size};
use stripefs_rpc::ClusterConfig;
use stripefs_wire::LayoutHint;

/// Most clients one run starts.
pub const MAX_CLIENTS: u32 = 1024;

#[derive(Args, Clone, Debug)]
pub struct IoArgs {
    /// Cluster description file.
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    pub cluster: PathBuf,
    /// Number of concurrent clients (threads, each with its own client and connections).
    #[arg(long, default_value_t = 4)]
    pub clients: u32,
    /// Bytes each client writes and reads.
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    pub block: u64,
    /// Bytes per write or read call.
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    pub xfer: u64,
    /// One file per client instead of one shared file.
    #[arg(long)]
    pub file_per_process: bool,
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
}

/// One open file of a client, on stripefs or locally.
trait Handle: Send {
    /// The caller will read `[off, off + len)` sequentially (a hint, like posix_fadvise).
    fn advise_sequential(&mut self, _off: u64, _len: u64) {}
    fn write_at(&mut self, off: u64, buf: &[u8]) -> Result<()>;
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<()>;
    fn fsync(&mut self) -> Result<()>;
    fn close(self: Box<Self>) -> Result<()>;
}

/// Where the pattern runs.
trait Backend: Sync {
    fn open(&self, rank: u32, file: u32, write: bool) -> Result<Box<dyn Handle>>;
}

fn validate(a: &IoArgs) -> Result<()> {
    if a.clients == 0 || a.clients > MAX_CLIENTS {
        bail!("--clients must be between 1 and {MAX_CLIENTS}");
    }
    if a.xfer == 0 || a.xfer % 4096 != 0 || a.xfer > 64 << 20 {
        bail!("--xfer must be a multiple of 4K up to 64M");
    }
    if a.block < a.xfer || a.block % a.xfer != 0 {
        bail!("--block must be a positive multiple of --xfer");
    }
    Ok(())
}

/// Runs the benchmark and prints its table; returns the JSON object it reports.
pub fn run(a: IoArgs) -> Result<serde_json::Value> {
    validate(&a)?;
    let cluster = ClusterConfig::load(&a.cluster).map_err(|e| anyhow!(e))?;
    let seed = crate::util::seed();
    let pattern = Arc::new(Pattern::new(seed, a.xfer as usize));
    let files = if a.file_per_process { a.clients } else { 1 };
    let remote = Remote::prepare(&cluster, &a, files)?;
    let ceiling = remote.ceiling_mib_s()?;
    let ours = run_pattern(&remote, &a, &pattern, "stripefs")?;
    if !a.keep {
        remote.cleanup();
    }
    let baseline = match &a.baseline {
        Some(dir) => {
            let local = Local::prepare(dir, files, a.clients as u64 * a.block)?;
            let r = run_pattern(&local, &a, &pattern, "baseline");
            local.cleanup();
            Some(r?)
        }
        None => None,
    };
    let report = json!({
        "benchmark": "io",
        "clients": a.clients,
        "block_bytes": a.block,
        "xfer_bytes": a.xfer,
        "file_per_process": a.file_per_process,
        "stripe_size_bytes": remote.stripe_size,
        "stripe_count": remote.stripe_count,
        "seed": seed,
        "write_mib_s": ours.write_mib_s,
        "read_mib_s": ours.read_mib_s,
        "write_s": ours.write_s,
        "read_s": ours.read_s,
        "verified": true,
        "caches_dropped": ours.caches_dropped,
        "ceiling_mib_s": ceiling,
        "baseline_dir": a.baseline.as_ref().map(|d| d.display().to_string()),
        "baseline_write_mib_s": baseline.map(|b| b.write_mib_s),
        "baseline_read_mib_s": baseline.map(|b| b.read_mib_s),
    });
    print_table(&a, &remote, &ours, ceiling, baseline.as_ref());
    if let Some(p) = &a.json {
        write_json(p, &report)?;
    }
    Ok(report)
}

fn print_table(a: &IoArgs, r: &Remote, ours: &Phases, ceiling: Option<f64>, base: Option<&Phases>) {
    println!(
        "bench io: {} clients x {} blocks in {} transfers, {}, stripe {} x {}",
        a.clients,
        format_size(a.block),
        format_size(a.xfer),
        if a.file_per_process {
            "file per process"
        } else {
            "one shared file"
        },
        format_size(r.stripe_size as u64),
        r.stripe_count
    );
    println!(
        "{:<6} {:>14} {:>12} {:>10} {:>16} {:>11}",
        "phase", "stripefs MiB/s", "ceiling", "% ceiling", "baseline MiB/s", "% baseline"
    );
    let ceil = ceiling.map(|c| format!("{c:.0}")).unwrap_or("-".into());
    for (name, v, b) in [
        ("write", ours.write_mib_s, base.map(|b| b.write_mib_s)),
        ("read", ours.read_mib_s, base.map(|b| b.read_mib_s)),
    ] {
        println!(
            "{:<6} {:>14.0} {:>12} {:>10} {:>16} {:>11}",
            name,
            v,
            ceil,
            pct(v, ceiling),
            b.map(|b| format!("{b:.0}")).unwrap_or("-".into()),
            pct(v, b)
        );
    }
    println!(
        "verified: yes   page cache dropped before reads: {}",
        if ours.caches_dropped {
            "yes"
        } else {
            "no (not root)"
        }
    );
}

/// Writes, fsyncs, drops caches, reads back and verifies; returns the timings.
fn run_pattern(b: &dyn Backend, a: &IoArgs, pattern: &Arc<Pattern>, label: &str) -> Result<Phases> {
    let total = a.clients as u64 * a.block;
    let pb = progress(total, &format!("{label} w"));
    let write_s = phase(b, a, pattern, true, &pb)?;
    pb.finish_and_clear();
    let caches_dropped = drop_caches();
    let pb = progress(total, &format!("{label} r"));
    let read_s = phase(b, a, pattern, false, &pb)?;
    pb.finish_and_clear();
    Ok(Phases {
        write_mib_s: mib_s(total, write_s),
        read_mib_s: mib_s(total, read_s),
        write_s,
        read_s,
        caches_dropped,
    })
}

/// Runs one phase on all clients at once; returns seconds from the first start to the
/// last finish (opens, fsyncs and closes included).
fn phase(
    b: &dyn Backend,
    a: &IoArgs,
    pattern: &Arc<Pattern>,
    write: bool,
    pb: &ProgressBar,
) -> Result<f64> {
    let (secs, _) = crate::util::run_clients(a.clients, |rank| {
        // In the read phase each client reads the block its neighbour wrote.
        let owner = if write { rank } else { (rank + 1) % a.clients };
        client_phase(b, a, pattern, owner, write, pb)
    })?;
    Ok(secs)
}

fn client_phase(
    b: &dyn Backend,
    a: &IoArgs,
    pattern: &Pattern,
    owner: u32,
    write: bool,
    pb: &ProgressBar,
) -> Result<()> {
    let file = if a.file_per_process { owner } else { 0 };
    let region = if a.file_per_process {
        0
    } else {
        owner as u64 * a.block
    };
    let mut buf = vec![0u8; a.xfer as usize];
    let start = Instant::now();
    let mut h = b.open(owner, file, write)?;
    if !write {
        h.advise_sequential(region, a.block);
    }
    let mut off = region;
    while off < region + a.block {
        if write {
            pattern.fill(off, &mut buf);
            h.write_at(off, &buf)?;
        } else {
            h.read_at(off, &mut buf)?;
            pattern.verify(off, &buf).map_err(|bad| {
                anyhow!("verification failed: wrong data at offset {bad} of file {file}")
            })?;
        }
        pb.inc(a.xfer);
        off += a.xfer;
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

/// The pattern on stripefs: one client (own connections) per rank.
struct Remote {
    cluster: ClusterConfig,
    dir: String,
    files: u32,
    stripe_size: u32,
    stripe_count: u32,
    servers: Vec<u32>,
    admin: Client,
}

impl Remote {
    fn prepare(cluster: &ClusterConfig, a: &IoArgs, files: u32) -> Result<Remote> {
        let admin = Client::connect(cluster)?;
        let dir = a.path.trim_end_matches('/').to_string();
        if admin.stat(&dir).is_err() {
            admin
                .mkdir(&dir, 0o755)
                .with_context(|| format!("cannot create {dir}"))?;
        }
        let hint = LayoutHint {
            stripe_size_bytes: a.stripe_size.map(|s| s as u32),
            stripe_count: a.stripe_count,
            start_server: None,
        };
        let mut servers = std::collections::BTreeSet::new();
        let (mut ss, mut sc) = (0, 0);
        for f in 0..files {
            let path = format!("{dir}/file{f}");
            let _ = admin.unlink(&path);
            let opts = OpenOptions {
                layout: hint,
                ..OpenOptions::create_new(0o644)
            };
            let file = admin
                .open(&path, &opts)
                .with_context(|| format!("cannot create {path}"))?;
            let attr = file.attr()?;
            let layout = attr
                .layout
                .clone()
                .ok_or_else(|| anyhow!("{path} has no layout"))?;
            ss = layout.stripe_size_bytes;
            sc = layout.servers.len() as u32;
            servers.extend(layout.servers.iter().map(|s| s.0));
            file.close()?;
        }
        Ok(Remote {
            cluster: cluster.clone(),
            dir,
            files,
            stripe_size: ss,
            stripe_count: sc,
            servers: servers.into_iter().collect(),
            admin,
        })
    }

    /// The sum of the throttle rates of the targets the files use, in MiB/s, or `None`
    /// when any of them is unthrottled.
    fn ceiling_mib_s(&self) -> Result<Option<f64>> {
        let mut sum = 0u64;
        for &s in &self.servers {
            let st = self.admin.data_status(stripefs_wire::ServerId(s))?;
            for t in st.targets {
                match t.throttle_bytes_s {
                    Some(r) => sum += r,
                    None => return Ok(None),
                }
            }
        }
        Ok(Some(sum as f64 / (1u64 << 20) as f64))
    }

    fn cleanup(&self) {
        for f in 0..self.files {
            let _ = self.admin.unlink(&format!("{}/file{f}", self.dir));
        }
    }
}

struct RemoteHandle(Option<stripefs_client::File>);

impl Handle for RemoteHandle {
    fn advise_sequential(&mut self, off: u64, len: u64) {
        if let Some(f) = &self.0 {
            f.advise_sequential(off, len);
        }
    }
    fn write_at(&mut self, off: u64, buf: &[u8]) -> Result<()> {
        Ok(self.file()?.write_at(off, buf)?)
    }
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<()> {
        let n = self.file()?.read_at(off, buf)?;
        if n != buf.len() {
            bail!("short read: {n} of {} bytes at offset {off}", buf.len());
        }
        Ok(())
    }
    fn fsync(&mut self) -> Result<()> {
        Ok(self.file()?.fsync()?)
    }
    fn close(mut self: Box<Self>) -> Result<()> {
        match self.0.take() {
            Some(f) => Ok(f.close()?),
            None => Ok(()),
        }
    }
}

impl RemoteHandle {
    fn file(&self) -> Result<&stripefs_client::File> {
        self.0
            .as_ref()
            .ok_or_else(|| anyhow!("file already closed"))
    }
}

impl Backend for Remote {
    fn open(&self, _rank: u32, file: u32, write: bool) -> Result<Box<dyn Handle>> {
        // A client of its own per rank and phase: its own connections, no shared caches.
        let client = Client::connect(&self.cluster)?;
        let path = format!("{}/file{file}", self.dir);
        let opts = if write {
            OpenOptions::write_only()
        } else {
            OpenOptions::read_only()
        };
        let f = client
            .open(&path, &opts)
            .with_context(|| format!("cannot open {path}"))?;
        Ok(Box::new(RemoteHandle(Some(f))))
    }
}

/// The same pattern on a local directory.
struct Local {
    dir: PathBuf,
    files: u32,
}

impl Local {
    fn prepare(dir: &std::path::Path, files: u32, bytes: u64) -> Result<Local> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let free = free_bytes(dir)?;
        if free < bytes + (1 << 30) {
            bail!(
                "baseline directory {} has {} free; the run needs {} plus 1 GiB headroom",
                dir.display(),
                format_size(free),
                format_size(bytes)
            );
        }
        let l = Local {
            dir: dir.to_path_buf(),
            files,
        };
        for f in 0..files {
            std::fs::File::create(l.path(f))?;
        }
        Ok(l)
    }

    fn path(&self, file: u32) -> PathBuf {
        self.dir.join(format!("stripefs-baseline-{file}"))
    }

    fn cleanup(&self) {
        for f in 0..self.files {
            let _ = std::fs::remove_file(self.path(f));
        }
    }
}

struct LocalHandle(std::fs::File);

impl Handle for LocalHandle {
    fn write_at(&mut self, off: u64, buf: &[u8]) -> Result<()> {
        Ok(self.0.write_all_at(buf, off)?)
    }
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<()> {
        Ok(self.0.read_exact_at(buf, off)?)
    }
    fn fsync(&mut self) -> Result<()> {
        Ok(self.0.sync_all()?)
    }
    fn advise_sequential(&mut self, off: u64, len: u64) {
        use std::os::fd::AsRawFd;
        // SAFETY: a hint on our own open descriptor; no memory is touched.
        unsafe {
            libc::posix_fadvise(
                self.0.as_raw_fd(),
                off as libc::off_t,
                len as libc::off_t,
                libc::POSIX_FADV_SEQUENTIAL,
            )
        };
    }
    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

impl Backend for Local {
    fn open(&self, _rank: u32, file: u32, write: bool) -> Result<Box<dyn Handle>> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(write)
            .open(self.path(file))?;
        Ok(Box::new(LocalHandle(f)))
    }
}
