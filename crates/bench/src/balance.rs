//! `stripefs bench balance`: the Disk/Net balance test of seed 001.
//!
//! P producer-consumer pairs copy files at once. Pair k owns data servers 2k and 2k+1:
//! its source files live whole on server 2k (stripe count 1), and it copies each to a new
//! file on server 2k+1 (an internode copy, through the network) or on server 2k itself (an
//! intranode copy). Every mix is measured, i intranode and P-i internode pairs for
//! i = 0..=P, for every file size. Before each measurement the sources are durable and the
//! servers drop their cached pages, so reads come from the (emulated) disks; each copy
//! ends with an fsync of its destination. Throughput = P x files x size / time from the
//! first start to the last finish, as in the seed.
//!
//! The same-run reference is the copy ceiling of each mix, from the targets' throttle
//! rates: a copied byte is read once and written once, so an internode pair can copy at
//! min(rate of 2k, rate of 2k+1) while an intranode pair shares one server's targets
//! between its reads and its writes and can copy at half that server's rate; since the
//! time is that of the last copy to complete, the mix's ceiling is P x its slowest pair's.
//!
//! On a cluster with hosts (`cluster up --hosts K --host-net RATE`), each pair's client
//! runs on the host of its producer server, as the seed's pairs ran on their producer
//! nodes: an internode copy's writes cross the emulated host network and an intranode
//! copy's do not, so with RATE below the disk rate intranode pairs win, as in the seed.
//! The ceiling above counts only the disks.
//!
//! Every source block is checked against its pattern as it is read, every destination's
//! size is checked, and the first destination of every pair is read back and compared.

use crate::pattern::Pattern;
use crate::scan::server_rate_bytes_s;
use crate::util::{mib_s, pct, progress, write_json};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use indicatif::ProgressBar;
use serde_json::json;
use std::path::PathBuf;
use stripefs_client::{Client, OpenOptions};
use stripefs_rpc::units::format_size;
use stripefs_rpc::ClusterConfig;
use stripefs_wire::LayoutHint;

/// Bytes per read and write of a copy, as `cp` uses a large buffer.
const XFER_BYTES: u64 = 1 << 20;
/// Most producer-consumer pairs.
const MAX_PAIRS: u32 = 256;
/// Most files per pair and measurement.
const MAX_FILES: u32 = 1024;
/// Largest file size, to catch a unit typo.
const MAX_FILE_BYTES: u64 = 1 << 30;

#[derive(Args, Clone, Debug)]
pub struct BalanceArgs {
    /// Cluster description file.
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    pub cluster: PathBuf,
    /// Producer-consumer pairs (default: half the data servers, at least 1).
    #[arg(long)]
    pub pairs: Option<u32>,
    /// File sizes to copy, comma-separated.
    #[arg(long, default_value = "1M,2M,4M,8M,16M", value_delimiter = ',', value_parser = stripefs_rpc::units::parse_size)]
    pub sizes: Vec<u64>,
    /// Files each producer copies per measurement.
    #[arg(long, default_value_t = 4)]
    pub files: u32,
    /// Directory in stripefs for the test.
    #[arg(long, default_value = "/bench-balance")]
    pub path: String,
    /// Write the figures as one JSON object to FILE.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw throughput against the mix of pairs to FILE.png.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// One measurement: a mix of pairs at one file size.
#[derive(Clone, Copy, Debug)]
struct Row {
    intranode: u32,
    internode: u32,
    size_bytes: u64,
    secs: f64,
    mib_s: f64,
    ceiling_mib_s: Option<f64>,
    servers_rate_mib_s: Option<f64>,
}

/// What every pair needs to know.
struct Setup {
    cluster: ClusterConfig,
    dir: String,
    pairs: u32,
    files: u32,
    pattern: Pattern,
    /// Throttle rate of each data server (sum over its targets), bytes/s.
    rates: Vec<Option<u64>>,
}

fn validate(a: &BalanceArgs, servers: u32) -> Result<u32> {
    let pairs = a.pairs.unwrap_or((servers / 2).max(1));
    if pairs == 0 || pairs > MAX_PAIRS {
        bail!("--pairs must be between 1 and {MAX_PAIRS}");
    }
    if 2 * pairs > servers {
        bail!(
            "{pairs} pairs need {} data servers (pair k uses servers 2k and 2k+1), the cluster has {servers}",
            2 * pairs
        );
    }
    if a.files == 0 || a.files > MAX_FILES {
        bail!("--files must be between 1 and {MAX_FILES}");
    }
    if a.sizes.is_empty() || a.sizes.iter().any(|&s| s == 0 || s > MAX_FILE_BYTES) {
        bail!("--sizes must list sizes between 1 byte and 1G");
    }
    Ok(pairs)
}

/// Runs the benchmark and prints its table; returns the JSON object it reports.
pub fn run(a: BalanceArgs) -> Result<serde_json::Value> {
    let cluster = ClusterConfig::load(&a.cluster).map_err(|e| anyhow!(e))?;
    let pairs = validate(&a, cluster.data.len() as u32)?;
    let admin = Client::connect(&cluster)?;
    let dir = a.path.trim_end_matches('/').to_string();
    if admin.stat(&dir).is_err() {
        admin
            .mkdir_all(&dir, 0o755)
            .with_context(|| format!("cannot create {dir} on stripefs"))?;
    }
    let seed = crate::util::seed();
    let rates = (0..2 * pairs)
        .map(|s| server_rate_bytes_s(&admin, s))
        .collect::<Result<Vec<_>>>()?;
    let setup = Setup {
        cluster,
        dir,
        pairs,
        files: a.files,
        pattern: Pattern::new(seed, XFER_BYTES as usize),
        rates,
    };
    let total: u64 = a.sizes.iter().sum::<u64>() * (a.files * pairs * (pairs + 1)) as u64;
    let pb = progress(total, "copied");
    let rows = measure_all(&setup, &admin, &a.sizes, &pb);
    pb.finish_and_clear();
    remove_files(&admin, &setup);
    let rows = rows?;
    let report = report_json(&a, &setup, seed, &rows);
    print_table(&setup, &rows);
    if let Some(p) = &a.json {
        write_json(p, &report)?;
    }
    if let Some(p) = &a.plot {
        crate::plot::balance(&report, p)?;
    }
    Ok(report)
}

fn measure_all(s: &Setup, admin: &Client, sizes: &[u64], pb: &ProgressBar) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for &size in sizes {
        write_sources(s, size)?;
        for intra in 0..=s.pairs {
            drop_source_caches(s, admin)?;
            rows.push(measure(s, admin, size, intra, pb)?);
        }
    }
    Ok(rows)
}

fn report_json(a: &BalanceArgs, s: &Setup, seed: u64, rows: &[Row]) -> serde_json::Value {
    let mib = |r: Option<u64>| r.map(|r| r as f64 / (1u64 << 20) as f64);
    json!({
        "benchmark": "balance",
        "pairs": s.pairs,
        "files_per_pair": s.files,
        "sizes_bytes": a.sizes,
        "xfer_bytes": XFER_BYTES,
        "data_servers": s.cluster.data.len(),
        "server_rate_mib_s": s.rates.iter().map(|&r| mib(r)).collect::<Vec<_>>(),
        "seed": seed,
        "verified": true,
        "caches_dropped": true,
        "rows": rows.iter().map(|r| json!({
            "intranode": r.intranode,
            "internode": r.internode,
            "size_bytes": r.size_bytes,
            "mib_s": r.mib_s,
            "seconds": r.secs,
            "ceiling_mib_s": r.ceiling_mib_s,
            "servers_rate_mib_s": r.servers_rate_mib_s,
        })).collect::<Vec<_>>(),
    })
}

fn print_table(s: &Setup, rows: &[Row]) {
    println!(
        "bench balance: {} pairs, {} files per pair, sources dropped from the server caches before every copy",
        s.pairs, s.files
    );
    println!(
        "{:>8} {:>9} {:>9} {:>8} {:>8} {:>10} {:>10}",
        "size", "intranode", "internode", "MiB/s", "s", "ceiling", "% ceiling"
    );
    for r in rows {
        println!(
            "{:>8} {:>9} {:>9} {:>8.1} {:>8.2} {:>10} {:>10}",
            format_size(r.size_bytes),
            r.intranode,
            r.internode,
            r.mib_s,
            r.secs,
            r.ceiling_mib_s
                .map(|c| format!("{c:.0}"))
                .unwrap_or("-".into()),
            pct(r.mib_s, r.ceiling_mib_s)
        );
    }
    println!("verified: yes   ceiling: pairs x slowest pair; internode pair min(rate 2k, rate 2k+1), intranode pair rate(2k)/2 (its reads and writes share the targets)");
}

fn src_path(s: &Setup, pair: u32, file: u32) -> String {
    format!("{}/src-{pair}-{file}", s.dir)
}

fn dst_path(s: &Setup, pair: u32, file: u32) -> String {
    format!("{}/dst-{pair}-{file}", s.dir)
}

/// A layout that puts a whole file on data server `server`.
fn on_server(server: u32) -> LayoutHint {
    LayoutHint {
        stripe_size_bytes: None,
        stripe_count: Some(1),
        start_server: Some(server),
        ..LayoutHint::default()
    }
}

/// Creates every source file of `size` bytes on its pair's producer server, durably.
fn write_sources(s: &Setup, size: u64) -> Result<()> {
    crate::util::run_clients(s.pairs, |pair| {
        let client = crate::util::client_beside(&s.cluster, 2 * pair)?;
        let mut buf = vec![0u8; XFER_BYTES as usize];
        for file in 0..s.files {
            let path = src_path(s, pair, file);
            let _ = client.unlink(&path);
            let opts = OpenOptions {
                layout: on_server(2 * pair),
                ..OpenOptions::create_new(0o644)
            };
            let f = client
                .open(&path, &opts)
                .with_context(|| format!("cannot create {path}"))?;
            let mut off = 0;
            while off < size {
                let n = XFER_BYTES.min(size - off) as usize;
                s.pattern.fill(off, &mut buf[..n]);
                f.write_at(off, &buf[..n])?;
                off += n as u64;
            }
            f.fsync().with_context(|| format!("fsync of {path}"))?;
            f.close()?;
        }
        Ok(())
    })?;
    Ok(())
}

fn drop_source_caches(s: &Setup, admin: &Client) -> Result<()> {
    for pair in 0..s.pairs {
        for file in 0..s.files {
            let path = src_path(s, pair, file);
            let f = admin.open(&path, &OpenOptions::read_only())?;
            f.drop_server_cache()
                .with_context(|| format!("cannot drop the server caches of {path}"))?;
            f.close()?;
        }
    }
    Ok(())
}

/// One mix: pairs below `intra` copy within their server, the others between servers.
fn measure(s: &Setup, admin: &Client, size: u64, intra: u32, pb: &ProgressBar) -> Result<Row> {
    let (secs, _) = crate::util::run_clients(s.pairs, |pair| {
        let consumer = if pair < intra { 2 * pair } else { 2 * pair + 1 };
        copy_files(s, pair, consumer, size, pb)
    })?;
    for pair in 0..s.pairs {
        verify_copy(s, admin, pair, size)?;
        for file in 0..s.files {
            let _ = admin.unlink(&dst_path(s, pair, file));
        }
    }
    let (ceiling, sum) = ceilings(&s.rates, s.pairs, intra);
    Ok(Row {
        intranode: intra,
        internode: s.pairs - intra,
        size_bytes: size,
        secs,
        mib_s: mib_s(size * (s.pairs * s.files) as u64, secs),
        ceiling_mib_s: ceiling,
        servers_rate_mib_s: sum,
    })
}

/// The copy ceiling of a mix and the sum of the rates of the servers it uses, MiB/s;
/// `None` when a server is unthrottled. Throughput counts every pair's bytes over the time
/// until the last copy completes, so the slowest pair sets the ceiling: P x the least
/// pair ceiling.
fn ceilings(rates: &[Option<u64>], pairs: u32, intra: u32) -> (Option<f64>, Option<f64>) {
    assert!(rates.len() >= 2 * pairs as usize);
    let (mut slowest, mut sum) = (u64::MAX, 0u64);
    for pair in 0..pairs {
        let (Some(p), Some(c)) = (rates[2 * pair as usize], rates[2 * pair as usize + 1]) else {
            return (None, None);
        };
        let (pair_ceiling, used) = if pair < intra {
            (p / 2, p)
        } else {
            (p.min(c), p + c)
        };
        slowest = slowest.min(pair_ceiling);
        sum += used;
    }
    let mib = |x: u64| Some(x as f64 / (1u64 << 20) as f64);
    (mib(slowest * pairs as u64), mib(sum))
}

/// Pair `pair` copies each of its sources to a new file on server `consumer`: read a
/// block, check it, write it; fsync at the end of each file, as a durable copy must.
fn copy_files(s: &Setup, pair: u32, consumer: u32, size: u64, pb: &ProgressBar) -> Result<()> {
    // On the producer's host (with `cluster up --hosts`): reading the source is local,
    // an internode copy's writes cross the host network, an intranode copy's do not.
    let client = crate::util::client_beside(&s.cluster, 2 * pair)?;
    let mut buf = vec![0u8; XFER_BYTES as usize];
    for file in 0..s.files {
        let (from, to) = (src_path(s, pair, file), dst_path(s, pair, file));
        let src = client
            .open(&from, &OpenOptions::read_only())
            .with_context(|| format!("cannot open {from}"))?;
        src.advise_sequential(0, size);
        let opts = OpenOptions {
            layout: on_server(consumer),
            ..OpenOptions::create_new(0o644)
        };
        let dst = client
            .open(&to, &opts)
            .with_context(|| format!("cannot create {to}"))?;
        let mut off = 0;
        while off < size {
            let n = XFER_BYTES.min(size - off) as usize;
            read_full(&src, &from, off, &mut buf[..n])?;
            s.pattern
                .verify(off, &buf[..n])
                .map_err(|bad| anyhow!("{from}: wrong data at offset {bad}"))?;
            dst.write_at(off, &buf[..n])?;
            pb.inc(n as u64);
            off += n as u64;
        }
        dst.fsync().with_context(|| format!("fsync of {to}"))?;
        dst.close()?;
        src.close()?;
    }
    Ok(())
}

fn read_full(f: &stripefs_client::File, path: &str, off: u64, buf: &mut [u8]) -> Result<()> {
    let n = f
        .read_at(off, buf)
        .with_context(|| format!("reading {path} at offset {off}"))?;
    if n != buf.len() {
        bail!(
            "short read of {path}: {n} of {} bytes at offset {off}",
            buf.len()
        );
    }
    Ok(())
}

/// Checks every destination's size, and the first one's bytes.
fn verify_copy(s: &Setup, admin: &Client, pair: u32, size: u64) -> Result<()> {
    for file in 0..s.files {
        let path = dst_path(s, pair, file);
        let got = admin.stat(&path)?.size;
        if got != size {
            bail!("copy {path} holds {got} bytes, expected {size}");
        }
    }
    let path = dst_path(s, pair, 0);
    let f = admin.open(&path, &OpenOptions::read_only())?;
    let mut buf = vec![0u8; XFER_BYTES as usize];
    let mut off = 0;
    while off < size {
        let n = XFER_BYTES.min(size - off) as usize;
        read_full(&f, &path, off, &mut buf[..n])?;
        s.pattern
            .verify(off, &buf[..n])
            .map_err(|bad| anyhow!("copy {path}: wrong data at offset {bad}"))?;
        off += n as u64;
    }
    f.close()?;
    Ok(())
}

fn remove_files(admin: &Client, s: &Setup) {
    for pair in 0..s.pairs {
        for file in 0..s.files {
            let _ = admin.unlink(&src_path(s, pair, file));
            let _ = admin.unlink(&dst_path(s, pair, file));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(pairs: Option<u32>, sizes: Vec<u64>, files: u32) -> BalanceArgs {
        BalanceArgs {
            cluster: PathBuf::new(),
            pairs,
            sizes,
            files,
            path: "/x".into(),
            json: None,
            plot: None,
        }
    }

    #[test]
    fn pairs_default_to_half_the_servers_and_need_two_servers_each() {
        assert_eq!(validate(&args(None, vec![1 << 20], 1), 4).unwrap(), 2);
        assert_eq!(validate(&args(None, vec![1 << 20], 1), 5).unwrap(), 2);
        assert!(validate(&args(None, vec![1 << 20], 1), 1).is_err());
        assert!(validate(&args(Some(3), vec![1 << 20], 1), 4).is_err());
        assert!(validate(&args(Some(1), vec![], 1), 4).is_err());
        assert!(validate(&args(Some(1), vec![0], 1), 4).is_err());
        assert!(validate(&args(Some(1), vec![1 << 20], 0), 4).is_err());
    }

    #[test]
    fn an_intranode_pair_gets_half_its_server() {
        let r = vec![Some(50 << 20); 4];
        assert_eq!(ceilings(&r, 2, 0), (Some(100.0), Some(200.0)));
        assert_eq!(ceilings(&r, 2, 1), (Some(50.0), Some(150.0)));
        assert_eq!(ceilings(&r, 2, 2), (Some(50.0), Some(100.0)));
        let u = vec![Some(1), None, Some(1), Some(1)];
        assert_eq!(ceilings(&u, 2, 0), (None, None));
    }
}
