//! `stripefs bench scan`: the scan streaming application of seed 002.
//!
//! Setup writes a file of fixed-size records; record `i` starts with a random u64 key and
//! its index, and every byte of it is a function of (seed, i), so the expected output is
//! recomputed from the printed seed rather than stored. The input is fsynced and the
//! servers drop their cached pages, so the scan reads from the (emulated) disks. Then each
//! client scans a contiguous part of the input, keeps the records whose key falls in a
//! range that holds fraction `--select` of all keys, and writes them in order to an output
//! file of its own; the stream rate is D = (MiB read + MiB written) / s, as in the seed.
//! Every output is read back and compared with the recomputed selection. The same run on a
//! local directory (`--baseline`) and the sum of the throttle rates of the targets used are
//! the same-run references.
//!
//! The stream helpers here ([`Store`], [`SFile`]) are shared with
//! `bench transpose`, which has the same shape: setup, cold streaming phase, verification.

use crate::util::{mib_s, pct, progress, write_json};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use indicatif::ProgressBar;
use serde_json::json;
use std::collections::BTreeSet;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use stripefs_client::{Client, OpenOptions, Traffic};
use stripefs_rpc::units::{format_size, parse_size};
use stripefs_rpc::ClusterConfig;
use stripefs_wire::ServerId;

/// Most clients one run starts.
pub const MAX_CLIENTS: u32 = 256;
/// Bytes a client reads per call, and buffers of selected records before writing them.
const CHUNK_BYTES: u64 = 1 << 20;
/// A record holds at least its key and its index.
const MIN_RECORD_BYTES: u64 = 16;
/// Largest record: a few of them must fit in a client's buffers.
const MAX_RECORD_BYTES: u64 = 16 << 20;
/// Largest input file, to catch a unit typo before it fills the disks.
const MAX_INPUT_BYTES: u64 = 1 << 40;

#[derive(Args, Clone, Debug)]
pub struct ScanArgs {
    /// Cluster description file.
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    pub cluster: PathBuf,
    /// Bytes of records in the input file.
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    pub size: u64,
    /// Bytes per record.
    #[arg(long, default_value = "4K", value_parser = parse_size)]
    pub record: u64,
    /// Fraction of records selected (their key falls in the range).
    #[arg(long, default_value_t = 0.1)]
    pub select: f64,
    /// Concurrent clients, each scanning a contiguous part of the input.
    #[arg(long, default_value_t = 4)]
    pub clients: u32,
    /// Directory in stripefs for the test.
    #[arg(long, default_value = "/bench-scan")]
    pub path: String,
    /// Write the figures as one JSON object to FILE.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Seed of the record keys (default: random; printed, so a run can be replayed).
    #[arg(long, env = "STRIPEFS_SEED")]
    pub seed: Option<u64>,
    /// Run the same scan on this local directory as the same-run reference.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Keep the input and output files afterwards.
    #[arg(long)]
    pub keep: bool,
    /// Also run the scan twice more, relayed (every read through the data servers) and
    /// direct (short-circuit reads where a data server is on the client's host), and
    /// report both (`relayed`, `direct` in the JSON).
    #[arg(long)]
    pub compare_direct: bool,
}

fn validate(a: &ScanArgs) -> Result<()> {
    if a.clients == 0 || a.clients > MAX_CLIENTS {
        bail!("--clients must be between 1 and {MAX_CLIENTS}");
    }
    if a.record < MIN_RECORD_BYTES || a.record > MAX_RECORD_BYTES || a.record % 8 != 0 {
        bail!("--record must be a multiple of 8 bytes between {MIN_RECORD_BYTES} and 16M");
    }
    if a.size == 0 || a.size > MAX_INPUT_BYTES || a.size % a.record != 0 {
        bail!("--size must be a positive multiple of --record, at most 1T");
    }
    if a.size / a.record < a.clients as u64 {
        bail!("--size holds fewer records than there are clients");
    }
    if !(0.0..=1.0).contains(&a.select) {
        bail!("--select must be a fraction between 0 and 1");
    }
    Ok(())
}

/// The input file, as a pure function of the seed.
#[derive(Clone, Copy, Debug)]
struct Records {
    seed: u64,
    record_bytes: u64,
    count: u64,
    /// Selected keys are in `[lo, hi)`; u128 so that the full range is expressible.
    lo: u128,
    hi: u128,
}

impl Records {
    fn new(seed: u64, a: &ScanArgs) -> Records {
        let width = ((a.select * 2f64.powi(64)) as u128).min(1 << 64);
        let lo = ((1u128 << 64) - width) / 2;
        Records {
            seed,
            record_bytes: a.record,
            count: a.size / a.record,
            lo,
            hi: lo + width,
        }
    }

    fn key(&self, i: u64) -> u64 {
        splitmix64(self.seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    fn selected(&self, key: u64) -> bool {
        (self.lo..self.hi).contains(&(key as u128))
    }

    /// Writes record `i` into `buf` (exactly one record long).
    fn fill(&self, i: u64, buf: &mut [u8]) {
        assert_eq!(buf.len() as u64, self.record_bytes);
        let key = self.key(i);
        let mix = splitmix64(key);
        for (k, w) in buf.chunks_exact_mut(8).enumerate() {
            let v = match k {
                0 => key,
                1 => i,
                _ => mix ^ (k as u64).wrapping_mul(0x0100_0000_01B3),
            };
            w.copy_from_slice(&v.to_le_bytes());
        }
    }

    /// The records client `rank` of `clients` scans.
    fn part(&self, rank: u32, clients: u32) -> std::ops::Range<u64> {
        let at = |r: u32| (self.count as u128 * r as u128 / clients as u128) as u64;
        at(rank)..at(rank + 1)
    }
}

/// A statistically good 64-bit mix (Steele et al.); keys are uniform over u64.
pub(crate) fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Measured figures of one scan.
#[derive(Clone, Copy, Debug)]
struct ScanRun {
    secs: f64,
    bytes_read: u64,
    bytes_written: u64,
    selected: u64,
}

impl ScanRun {
    fn d_mib_s(&self) -> f64 {
        mib_s(self.bytes_read + self.bytes_written, self.secs)
    }
}

/// Runs the benchmark and prints its table; returns the JSON object it reports.
pub fn run(a: ScanArgs) -> Result<serde_json::Value> {
    validate(&a)?;
    let seed = a.seed.unwrap_or_else(crate::util::seed);
    println!("bench scan: record seed {seed} (--seed {seed} or STRIPEFS_SEED={seed} replays)");
    let recs = Records::new(seed, &a);
    let store = Store::remote(&a.cluster, &a.path)?;
    let ours = scan_on(&store, &a, &recs);
    let ceiling = store.ceiling_mib_s(&file_names(a.clients));
    if !a.keep {
        store.remove_all(&file_names(a.clients));
    }
    let (ours, ceiling) = (ours?, ceiling?);
    let baseline = match &a.baseline {
        Some(dir) => {
            let local = Store::local(dir)?;
            let r = scan_on(&local, &a, &recs);
            local.remove_all(&file_names(a.clients));
            Some(r?)
        }
        None => None,
    };
    let mut report = report_json(&a, &recs, &ours, ceiling, baseline.as_ref());
    print_table(&a, &recs, &ours, ceiling, baseline.as_ref());
    if a.compare_direct {
        let store = Store::remote(&a.cluster, &a.path)?;
        let both = relayed_and_direct(&store, || {
            scan_on(&store, &a, &recs).map(|r| (r.secs, r.bytes_read + r.bytes_written))
        });
        if !a.keep {
            store.remove_all(&file_names(a.clients));
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

fn report_json(
    a: &ScanArgs,
    recs: &Records,
    ours: &ScanRun,
    ceiling: Option<f64>,
    base: Option<&ScanRun>,
) -> serde_json::Value {
    json!({
        "benchmark": "scan",
        "clients": a.clients,
        "size_bytes": a.size,
        "record_bytes": a.record,
        "records": recs.count,
        "select": a.select,
        "selected_records": ours.selected,
        "selected_fraction": ours.selected as f64 / recs.count as f64,
        "key_range": [recs.lo as u64, (recs.hi - 1).min(u64::MAX as u128) as u64],
        "seed": recs.seed,
        "read_mib": ours.bytes_read as f64 / (1u64 << 20) as f64,
        "written_mib": ours.bytes_written as f64 / (1u64 << 20) as f64,
        "scan_s": ours.secs,
        "d_mib_s": ours.d_mib_s(),
        "d_read_mib_s": mib_s(ours.bytes_read, ours.secs),
        "d_write_mib_s": mib_s(ours.bytes_written, ours.secs),
        "verified": true,
        "caches_dropped": true,
        "ceiling_mib_s": ceiling,
        "baseline_dir": a.baseline.as_ref().map(|d| d.display().to_string()),
        "baseline_d_mib_s": base.map(|b| b.d_mib_s()),
        "baseline_scan_s": base.map(|b| b.secs),
    })
}

fn print_table(
    a: &ScanArgs,
    recs: &Records,
    ours: &ScanRun,
    ceiling: Option<f64>,
    base: Option<&ScanRun>,
) {
    println!(
        "bench scan: {} clients, {} of {} records, {} selected ({:.4} of {:.4} asked), one output file per client",
        a.clients,
        format_size(a.size),
        format_size(a.record),
        ours.selected,
        ours.selected as f64 / recs.count as f64,
        a.select
    );
    print_stream_table(
        ours.d_mib_s(),
        ours.secs,
        ceiling,
        base.map(|b| b.d_mib_s()),
    );
}

/// Runs a whole benchmark pass twice on `store`, relayed (short-circuit off) and then
/// direct (on); `pass` returns its streaming seconds and the bytes it streamed. Returns
/// the JSON object `{"relayed": {...}, "direct": {...}}` and prints one line each.
pub(crate) fn relayed_and_direct(
    store: &Store,
    mut pass: impl FnMut() -> Result<(f64, u64)>,
) -> Result<serde_json::Value> {
    let mut out = serde_json::Map::new();
    for (label, on) in [("relayed", false), ("direct", true)] {
        store.set_direct(on);
        store.take_traffic();
        let r = pass();
        store.set_direct(true);
        let (secs, bytes) = r?;
        let t = store.take_traffic();
        let read = t.local_read + t.remote_read + t.direct_read;
        let frac = (read > 0).then(|| t.direct_read as f64 / read as f64);
        println!(
            "{label:<8} D {:>8.1} MiB/s in {secs:.2} s; reads short-circuit: {}",
            mib_s(bytes, secs),
            frac.map(|f| format!("{:.0}%", f * 100.0))
                .unwrap_or("-".into())
        );
        out.insert(
            label.into(),
            json!({
                "d_mib_s": mib_s(bytes, secs),
                "seconds": secs,
                "short_circuit_read_bytes": t.direct_read,
                "read_bytes": read,
                "short_circuit_fraction": frac,
            }),
        );
    }
    Ok(serde_json::Value::Object(out))
}

/// The table shared with `bench transpose`: D beside the ceiling and the baseline.
pub(crate) fn print_stream_table(d: f64, secs: f64, ceiling: Option<f64>, base: Option<f64>) {
    println!(
        "{:>16} {:>8} {:>12} {:>10} {:>16} {:>11}",
        "stripefs D MiB/s", "s", "ceiling", "% ceiling", "baseline D MiB/s", "% baseline"
    );
    println!(
        "{:>16.0} {:>8.2} {:>12} {:>10} {:>16} {:>11}",
        d,
        secs,
        ceiling.map(|c| format!("{c:.0}")).unwrap_or("-".into()),
        pct(d, ceiling),
        base.map(|b| format!("{b:.0}")).unwrap_or("-".into()),
        pct(d, base)
    );
    println!("verified: yes   server caches dropped before the timed phase: yes   D = (MiB read + MiB written) / s");
}

/// The input file, then one output file per client.
fn file_names(clients: u32) -> Vec<String> {
    let mut v = vec!["input".to_string()];
    v.extend((0..clients).map(|c| format!("out{c}")));
    v
}

/// Setup, cold scan, verification on one store.
fn scan_on(store: &Store, a: &ScanArgs, recs: &Records) -> Result<ScanRun> {
    let names = file_names(a.clients);
    for n in &names {
        store.create(n)?;
    }
    let pb = progress(a.size, &format!("{} setup", store.label()));
    crate::util::run_clients(a.clients, |rank| {
        write_part(store, recs, rank, a.clients, &pb)
    })?;
    pb.finish_and_clear();
    store.drop_cache("input")?;
    let pb = progress(a.size, &format!("{} scan", store.label()));
    let (secs, parts) = crate::util::run_clients(a.clients, |rank| {
        scan_part(store, recs, rank, a.clients, &pb)
    })?;
    pb.finish_and_clear();
    let mut run = ScanRun {
        secs,
        bytes_read: a.size,
        bytes_written: 0,
        selected: 0,
    };
    for (rank, selected) in parts.into_iter().enumerate() {
        verify_part(store, recs, rank as u32, a.clients, selected)?;
        run.selected += selected;
        run.bytes_written += selected * recs.record_bytes;
    }
    Ok(run)
}

/// Setup: client `rank` writes its part of the input and makes it durable.
fn write_part(
    store: &Store,
    recs: &Records,
    rank: u32,
    clients: u32,
    pb: &ProgressBar,
) -> Result<()> {
    let f = store.open("input", true)?;
    let part = recs.part(rank, clients);
    let per_chunk = (CHUNK_BYTES / recs.record_bytes).max(1);
    let mut buf = Vec::new();
    let mut i = part.start;
    while i < part.end {
        let n = per_chunk.min(part.end - i);
        buf.resize((n * recs.record_bytes) as usize, 0);
        for (k, r) in buf.chunks_exact_mut(recs.record_bytes as usize).enumerate() {
            recs.fill(i + k as u64, r);
        }
        f.write_at(i * recs.record_bytes, &buf)?;
        pb.inc(buf.len() as u64);
        i += n;
    }
    f.fsync()?;
    f.close()
}

/// The timed phase of client `rank`: scans its part, writes the selected records in
/// order to its output file, fsyncs it; returns how many it selected.
fn scan_part(
    store: &Store,
    recs: &Records,
    rank: u32,
    clients: u32,
    pb: &ProgressBar,
) -> Result<u64> {
    let input = store.open("input", false)?;
    let out = store.open(&format!("out{rank}"), true)?;
    let rb = recs.record_bytes;
    let part = recs.part(rank, clients);
    input.advise_sequential(part.start * rb, (part.end - part.start) * rb);
    let per_chunk = (CHUNK_BYTES / rb).max(1);
    let (mut buf, mut pending) = (Vec::new(), Vec::with_capacity(2 * CHUNK_BYTES as usize));
    let (mut i, mut out_off, mut selected) = (part.start, 0u64, 0u64);
    while i < part.end {
        let n = per_chunk.min(part.end - i);
        buf.resize((n * rb) as usize, 0);
        input.read_exact_at(i * rb, &mut buf)?;
        for r in buf.chunks_exact(rb as usize) {
            let key = u64::from_le_bytes(r[..8].try_into().expect("record holds a key"));
            if recs.selected(key) {
                pending.extend_from_slice(r);
                selected += 1;
            }
        }
        if pending.len() as u64 >= CHUNK_BYTES {
            out.write_at(out_off, &pending)?;
            out_off += pending.len() as u64;
            pending.clear();
        }
        pb.inc(buf.len() as u64);
        i += n;
    }
    if !pending.is_empty() {
        out.write_at(out_off, &pending)?;
    }
    out.fsync()?;
    out.close()?;
    input.close()?;
    Ok(selected)
}

/// Reads client `rank`'s output back and compares it, record by record, with the
/// selection recomputed from the seed; `selected` is what the client reported.
fn verify_part(
    store: &Store,
    recs: &Records,
    rank: u32,
    clients: u32,
    selected: u64,
) -> Result<()> {
    let name = format!("out{rank}");
    let f = store.open(&name, false)?;
    let rb = recs.record_bytes;
    let want: Vec<u64> = recs
        .part(rank, clients)
        .filter(|&i| recs.selected(recs.key(i)))
        .collect();
    if want.len() as u64 != selected {
        bail!(
            "scan client {rank} selected {selected} records, the seed says {}",
            want.len()
        );
    }
    let len = f.len()?;
    if len != selected * rb {
        bail!(
            "{} {name} holds {len} bytes, expected {}",
            store.label(),
            selected * rb
        );
    }
    let per_chunk = (CHUNK_BYTES / rb).max(1) as usize;
    let (mut got, mut exp) = (Vec::new(), vec![0u8; rb as usize]);
    for (c, idx) in want.chunks(per_chunk).enumerate() {
        let off = (c * per_chunk) as u64 * rb;
        got.resize(idx.len() * rb as usize, 0);
        f.read_exact_at(off, &mut got)?;
        for (k, (&i, r)) in idx.iter().zip(got.chunks_exact(rb as usize)).enumerate() {
            recs.fill(i, &mut exp);
            if r != &exp[..] {
                let at = off + k as u64 * rb;
                bail!(
                    "{} {name}: wrong record at offset {at} (expected record {i})",
                    store.label()
                );
            }
        }
    }
    f.close()
}

/// Where a streaming application runs: a directory of stripefs, or a local directory
/// for the same-run reference.
pub(crate) enum Store {
    Remote {
        cluster: Box<ClusterConfig>,
        dir: String,
        admin: Client,
        /// Clients it opens read short-circuit where they can.
        direct: AtomicBool,
        /// What the clients of closed files moved.
        traffic: Arc<Mutex<Traffic>>,
    },
    Local {
        dir: PathBuf,
    },
}

/// The client of an open stripefs file, and where its traffic is added at close.
pub(crate) struct Counted {
    client: Client,
    total: Arc<Mutex<Traffic>>,
}

/// An open file of a [`Store`].
pub(crate) enum SFile {
    // Boxed: a client file handle is large, and a local one small.
    Remote(Box<stripefs_client::File>, String, Box<Counted>),
    Local(std::fs::File, PathBuf),
}

impl Store {
    pub(crate) fn remote(cluster_file: &std::path::Path, dir: &str) -> Result<Store> {
        let cluster = ClusterConfig::load(cluster_file).map_err(|e| anyhow!(e))?;
        let admin = Client::connect(&cluster)?;
        let dir = dir.trim_end_matches('/').to_string();
        if admin.stat(&dir).is_err() {
            admin
                .mkdir_all(&dir, 0o755)
                .with_context(|| format!("cannot create {dir} on stripefs"))?;
        }
        Ok(Store::Remote {
            cluster: Box::new(cluster),
            dir,
            admin,
            direct: AtomicBool::new(true),
            traffic: Arc::default(),
        })
    }

    pub(crate) fn local(dir: &std::path::Path) -> Result<Store> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Store::Local {
            dir: dir.to_path_buf(),
        })
    }

    /// Whether the stripefs clients opened from now on read short-circuit.
    pub(crate) fn set_direct(&self, on: bool) {
        if let Store::Remote { direct, .. } = self {
            direct.store(on, Ordering::Relaxed);
        }
    }

    /// What the clients of files closed since the last call moved.
    pub(crate) fn take_traffic(&self) -> Traffic {
        match self {
            Store::Remote { traffic, .. } => {
                std::mem::take(&mut *traffic.lock().unwrap_or_else(|p| p.into_inner()))
            }
            Store::Local { .. } => Traffic::default(),
        }
    }

    pub(crate) fn label(&self) -> &'static str {
        match self {
            Store::Remote { .. } => "stripefs",
            Store::Local { .. } => "baseline",
        }
    }

    /// Creates `name` empty (replacing an old one), with the directory's default layout.
    pub(crate) fn create(&self, name: &str) -> Result<()> {
        match self {
            Store::Remote { dir, admin, .. } => {
                let path = format!("{dir}/{name}");
                let _ = admin.unlink(&path);
                let f = admin
                    .open(&path, &OpenOptions::create_new(0o644))
                    .with_context(|| format!("cannot create {path} on stripefs"))?;
                Ok(f.close()?)
            }
            Store::Local { dir, .. } => {
                let p = dir.join(name);
                std::fs::File::create(&p)
                    .with_context(|| format!("cannot create {}", p.display()))?;
                Ok(())
            }
        }
    }

    /// Opens `name` for reading, or for writing too; a stripefs file gets a client of
    /// its own, so that every caller has its own connections as a separate node would.
    pub(crate) fn open(&self, name: &str, write: bool) -> Result<SFile> {
        match self {
            Store::Remote {
                cluster,
                dir,
                direct,
                traffic,
                ..
            } => {
                let path = format!("{dir}/{name}");
                let client = Client::connect(cluster)?;
                client.set_short_circuit(direct.load(Ordering::Relaxed));
                let opts = OpenOptions::read_only().write(write);
                let f = client
                    .open(&path, &opts)
                    .with_context(|| format!("cannot open {path} on stripefs"))?;
                let counted = Box::new(Counted {
                    client,
                    total: traffic.clone(),
                });
                Ok(SFile::Remote(Box::new(f), path, counted))
            }
            Store::Local { dir } => {
                let p = dir.join(name);
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(write)
                    .open(&p)
                    .with_context(|| format!("cannot open {}", p.display()))?;
                Ok(SFile::Local(f, p))
            }
        }
    }

    /// Makes the next reads of `name` come from the disks: the data servers drop their
    /// cached pages of it, or locally the kernel drops the file's clean pages.
    pub(crate) fn drop_cache(&self, name: &str) -> Result<()> {
        match self.open(name, false)? {
            SFile::Remote(f, path, _) => {
                f.drop_server_cache()
                    .with_context(|| format!("cannot drop the server caches of {path}"))?;
                Ok((*f).close()?)
            }
            SFile::Local(f, p) => {
                f.sync_all()?;
                fadvise(&f, libc::POSIX_FADV_DONTNEED, 0, 0)
                    .with_context(|| format!("posix_fadvise(DONTNEED) on {}", p.display()))
            }
        }
    }

    pub(crate) fn remove_all(&self, names: &[String]) {
        for n in names {
            match self {
                Store::Remote { dir, admin, .. } => {
                    let _ = admin.unlink(&format!("{dir}/{n}"));
                }
                Store::Local { dir } => {
                    let _ = std::fs::remove_file(dir.join(n));
                }
            }
        }
    }

    /// The sum of the throttle rates of the targets of every data server that holds a
    /// piece of `names`, in MiB/s; `None` locally or when any target is unthrottled.
    pub(crate) fn ceiling_mib_s(&self, names: &[String]) -> Result<Option<f64>> {
        let Store::Remote { dir, admin, .. } = self else {
            return Ok(None);
        };
        let mut servers = BTreeSet::new();
        for n in names {
            let path = format!("{dir}/{n}");
            let layout = admin
                .get_layout(&path)
                .with_context(|| format!("cannot read the layout of {path}"))?;
            servers.extend(layout.servers.iter().map(|s| s.0));
        }
        let mut sum = 0u64;
        for s in servers {
            match server_rate_bytes_s(admin, s)? {
                Some(r) => sum += r,
                None => return Ok(None),
            }
        }
        Ok(Some(sum as f64 / (1u64 << 20) as f64))
    }
}

/// The sum of the throttle rates of data server `server`'s targets in bytes/s, or `None`
/// when any of them is unthrottled.
pub(crate) fn server_rate_bytes_s(admin: &Client, server: u32) -> Result<Option<u64>> {
    let st = admin
        .data_status(ServerId(server))
        .with_context(|| format!("cannot ask data server {server} for its status"))?;
    let mut sum = 0u64;
    for t in st.targets {
        match t.throttle_bytes_s {
            Some(r) => sum += r,
            None => return Ok(None),
        }
    }
    Ok(Some(sum))
}

fn fadvise(f: &std::fs::File, advice: libc::c_int, off: u64, len: u64) -> Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a hint on our own open descriptor; no memory is touched.
    let rc = unsafe {
        libc::posix_fadvise(
            f.as_raw_fd(),
            off as libc::off_t,
            len as libc::off_t,
            advice,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc).into());
    }
    Ok(())
}

impl SFile {
    pub(crate) fn read_exact_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        match self {
            SFile::Remote(f, path, _) => {
                let mut done = 0;
                while done < buf.len() {
                    let n = f.read_at(off + done as u64, &mut buf[done..])?;
                    if n == 0 {
                        bail!(
                            "short read of {path}: {done} of {} bytes at offset {off}",
                            buf.len()
                        );
                    }
                    done += n;
                }
                Ok(())
            }
            SFile::Local(f, p) => f
                .read_exact_at(buf, off)
                .with_context(|| format!("reading {} at offset {off}", p.display())),
        }
    }

    pub(crate) fn write_at(&self, off: u64, buf: &[u8]) -> Result<()> {
        match self {
            SFile::Remote(f, path, _) => f
                .write_at(off, buf)
                .with_context(|| format!("writing {path} at offset {off}")),
            SFile::Local(f, p) => f
                .write_all_at(buf, off)
                .with_context(|| format!("writing {} at offset {off}", p.display())),
        }
    }

    /// The caller will read `[off, off + len)` from start to end.
    pub(crate) fn advise_sequential(&self, off: u64, len: u64) {
        match self {
            SFile::Remote(f, _, _) => f.advise_sequential(off, len),
            // A hint: if the kernel refuses it, the reads are only slower.
            SFile::Local(f, _) => drop(fadvise(f, libc::POSIX_FADV_SEQUENTIAL, off, len)),
        }
    }

    pub(crate) fn fsync(&self) -> Result<()> {
        match self {
            SFile::Remote(f, path, _) => f.fsync().with_context(|| format!("fsync of {path}")),
            SFile::Local(f, p) => f
                .sync_all()
                .with_context(|| format!("fsync of {}", p.display())),
        }
    }

    pub(crate) fn len(&self) -> Result<u64> {
        match self {
            SFile::Remote(f, path, _) => {
                Ok(f.attr().with_context(|| format!("stat of {path}"))?.size)
            }
            SFile::Local(f, _) => Ok(f.metadata()?.len()),
        }
    }

    pub(crate) fn close(self) -> Result<()> {
        match self {
            SFile::Remote(f, path, counted) => {
                let r = (*f).close().with_context(|| format!("close of {path}"));
                counted
                    .total
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .add(&counted.client.traffic());
                r
            }
            SFile::Local(..) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(select: f64) -> ScanArgs {
        ScanArgs {
            cluster: PathBuf::new(),
            size: 1 << 20,
            record: 64,
            select,
            clients: 3,
            path: "/x".into(),
            json: None,
            seed: None,
            baseline: None,
            keep: false,
            compare_direct: false,
        }
    }

    #[test]
    fn selection_matches_the_requested_fraction() {
        for sel in [0.0, 0.01, 0.1, 0.5, 1.0] {
            let r = Records::new(42, &args(sel));
            let n = (0..r.count).filter(|&i| r.selected(r.key(i))).count() as f64;
            let got = n / r.count as f64;
            assert!((got - sel).abs() < 0.02, "asked {sel}, got {got}");
        }
    }

    #[test]
    fn parts_cover_the_input_exactly_once() {
        let r = Records::new(1, &args(0.1));
        let mut next = 0;
        for c in 0..3 {
            let p = r.part(c, 3);
            assert_eq!(p.start, next);
            next = p.end;
        }
        assert_eq!(next, r.count);
    }

    #[test]
    fn records_carry_their_key_and_index() {
        let r = Records::new(7, &args(0.1));
        let mut b = vec![0u8; 64];
        r.fill(5, &mut b);
        assert_eq!(u64::from_le_bytes(b[..8].try_into().unwrap()), r.key(5));
        assert_eq!(u64::from_le_bytes(b[8..16].try_into().unwrap()), 5);
        assert!(validate(&ScanArgs {
            record: 12,
            ..args(0.1)
        })
        .is_err());
        assert!(validate(&ScanArgs {
            select: 1.5,
            ..args(0.1)
        })
        .is_err());
    }
}
