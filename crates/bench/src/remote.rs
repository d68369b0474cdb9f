//! `stripefs bench remote` and `stripefs bench wan`: a client far from the cluster writes
//! a file and reads it back, once per (streams, compression, data), against the emulated
//! link's rate in the same run.
//!
//! Each row is one (streams, compress, data, direction): a fresh client with that many
//! connections per data server and that codec writes `--size` bytes (fsync and close
//! included) or reads them back and verifies every byte. The reference is the link:
//! `--link RATE`, or the rate of the `--wan` link recorded beside the client file
//! (`layout.toml` of `cluster up`). `bench remote` runs against a cluster you started
//! (`cluster up --wan`, or a real remote one); `bench wan` starts a throwaway cluster
//! behind an emulated link of the given RTT, rate and window, adds rows for the plain
//! `stripefs put` and `get` commands (run as processes, as a user would), can plot, and
//! stops the cluster. Each row's `wire_bytes` is what crossed the link for its data
//! (after compression; the table's `wire` column is that over the plain bytes).

use crate::util::{mib_s, pct, progress, write_json, ClusterGuard};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;
use stripefs_client::{Client, OpenOptions};
use stripefs_rpc::compress::Codec;
use stripefs_rpc::units::{format_size, parse_duration, parse_link_rate, parse_size};
use stripefs_rpc::ClusterConfig;

/// Bytes per write or read call.
const XFER_BYTES: usize = 8 << 20;
/// Largest file, to catch a unit typo.
const MAX_SIZE: u64 = 64 << 30;

fn parse_codec(text: &str) -> Result<Codec, String> {
    text.parse()
}

fn parse_data(text: &str) -> Result<String, String> {
    match text {
        "random" | "text" => Ok(text.to_string()),
        _ => Err(format!("data {text:?} is not random or text")),
    }
}

/// What every row set has: stream counts, codecs, data kinds, size.
#[derive(Args, Debug, Clone)]
pub struct RowArgs {
    /// Stream counts to measure (connections per data server), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub streams: Vec<u32>,
    /// Requests in flight per connection to measure, comma-separated (default: the
    /// client file's `pipeline`, which `cluster up --wan` sets to 4, else 1).
    #[arg(long, value_delimiter = ',')]
    pub pipeline: Vec<u32>,
    /// Compression to measure, comma-separated: off, lz4, zstd, zstd:LEVEL, auto.
    #[arg(long, value_delimiter = ',', default_value = "off", value_parser = parse_codec)]
    pub compress: Vec<Codec>,
    /// What the file holds, comma-separated: random bytes, or text-like bytes (words
    /// from a small vocabulary, compressible about 4:1).
    #[arg(long, value_delimiter = ',', default_value = "random", value_parser = parse_data)]
    pub data: Vec<String>,
    /// Bytes written and read per row.
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    pub size: u64,
    /// Path of the test file in stripefs.
    #[arg(long, default_value = "/bench-remote")]
    pub path: String,
    /// Write the figures as one JSON object to FILE.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct RemoteArgs {
    /// Client file of the remote cluster (e.g. DIR/client-wan.toml of `cluster up --wan`).
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    pub cluster: PathBuf,
    /// The link's rate (bits like 200Mbit or bytes like 25MiB per second); default: the
    /// `--wan` rate in layout.toml beside the client file.
    #[arg(long, value_parser = parse_link_rate)]
    pub link: Option<u64>,
    #[command(flatten)]
    pub rows: RowArgs,
}

#[derive(Args, Debug, Clone)]
pub struct WanArgs {
    /// Round-trip time the emulated link adds (e.g. 50ms).
    #[arg(long, default_value = "50ms", value_parser = parse_duration)]
    pub rtt: std::time::Duration,
    /// The link's rate, shared by all connections (e.g. 200Mbit or 25MiB).
    #[arg(long, default_value = "200Mbit", value_parser = parse_link_rate)]
    pub rate: u64,
    /// Most bytes in flight per connection and direction (an untuned TCP window).
    #[arg(long, default_value = "256K", value_parser = parse_size)]
    pub window: u64,
    /// Data servers of the throwaway cluster.
    #[arg(long, default_value_t = 2)]
    pub servers: u32,
    /// Skip the `put`/`get` rows.
    #[arg(long)]
    pub no_put: bool,
    /// Plot MiB/s against streams, with the link rate, to this PNG file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Cluster directory (default: a temporary one, removed afterwards).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    #[command(flatten)]
    pub rows: RowArgs,
}

#[derive(Args, Debug, Clone)]
pub struct TlsArgs {
    /// Data servers of the throwaway cluster.
    #[arg(long, default_value_t = 2)]
    pub servers: u32,
    /// Connections per data server.
    #[arg(long, default_value_t = 4)]
    pub streams: u32,
    /// Rounds; each measures plain and TLS (in alternating order), and the medians are
    /// reported.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Bytes written and read per measurement.
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    pub size: u64,
    /// Cluster directory (default: a temporary one, removed afterwards).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Write the figures as one JSON object to FILE.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// `bench tls`: one cluster that accepts both, a client with the CA (TLS) and one
/// without (plain); both on another host than the servers, so that every byte crosses a
/// connection (no short-circuit reads). Plain reads go by sendfile, TLS ones through the
/// cipher: each as a user gets it.
pub fn run_tls(a: TlsArgs, exe: &Path) -> Result<serde_json::Value> {
    if a.servers == 0 || a.servers > 16 {
        bail!("--servers must be 1 to 16");
    }
    if a.rounds == 0 || a.size == 0 || a.size > MAX_SIZE {
        bail!("--rounds and --size must be above zero (size at most 64G)");
    }
    if a.streams == 0 || a.streams > stripefs_rpc::config::MAX_STREAMS {
        bail!(
            "--streams must be 1 to {}",
            stripefs_rpc::config::MAX_STREAMS
        );
    }
    crate::util::interrupt_stops_clusters();
    let cluster = ClusterGuard::start_tls(a.dir.as_deref(), a.servers, exe)?;
    let mut tls = ClusterConfig::load(&cluster.cluster_file).map_err(|e| anyhow!(e))?;
    if tls.tls.client.is_none() {
        bail!("the cluster file has no tls_ca: cannot measure TLS");
    }
    tls.host = Some("bench-elsewhere".into());
    tls.streams = Some(a.streams);
    let mut plain = tls.clone();
    plain.tls.ca = None;
    plain.tls.client = None;
    let rows_args = RowArgs {
        streams: vec![a.streams],
        pipeline: Vec::new(),
        compress: vec![Codec::Off],
        data: vec!["random".into()],
        size: a.size,
        path: "/bench-tls".into(),
        json: None,
    };
    let seed = crate::util::seed();
    println!(
        "bench tls: {} data servers on loopback, {} per measurement, {} streams, {} rounds, seed {seed}",
        a.servers,
        format_size(a.size),
        a.streams,
        a.rounds
    );
    println!("{:>6} {:>6} {:>10} {:>10}", "round", "tls", "write", "read");
    // [plain, tls] x [write, read]: MiB/s per round.
    let mut figures: [[Vec<f64>; 2]; 2] = Default::default();
    for round in 0..a.rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for mode in order {
            let cfg = if mode == 1 { &tls } else { &plain };
            let client = Client::connect(cfg).context("cannot connect")?;
            let w = mib_s(a.size, write_file(&client, &rows_args, "random", seed)?);
            let r = mib_s(a.size, read_file(&client, &rows_args, "random", seed)?);
            println!(
                "{:>6} {:>6} {:>10.1} {:>10.1}",
                round,
                if mode == 1 { "on" } else { "off" },
                w,
                r
            );
            figures[mode][0].push(w);
            figures[mode][1].push(r);
        }
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut rows = Vec::new();
    for (mode, name) in [(0, false), (1, true)] {
        for (d, direction) in ["write", "read"].iter().enumerate() {
            rows.push(json!({
                "tls": name,
                "direction": direction,
                "mib_s": median(&figures[mode][d]),
                "rounds_mib_s": figures[mode][d],
            }));
        }
    }
    let ratio = |d: usize| median(&figures[1][d]) / median(&figures[0][d]).max(1e-9);
    println!(
        "TLS / plain (medians): write {:.2}, read {:.2}; every read verified",
        ratio(0),
        ratio(1)
    );
    let report = json!({
        "benchmark": "tls",
        "servers": a.servers,
        "streams": a.streams,
        "size_bytes": a.size,
        "rounds": a.rounds,
        "seed": seed,
        "rows": rows,
        "tls_over_plain": {"write": ratio(0), "read": ratio(1)},
        "verified": true,
    });
    if let Some(p) = &a.json {
        write_json(p, &report)?;
    }
    Ok(report)
}

/// The link rate `cluster up --wan` recorded beside `client_file`, if any.
fn recorded_link(client_file: &Path) -> Option<u64> {
    stripefs_launch::recorded_wan(client_file.parent()?).map(|w| w.rate_bytes_s)
}

/// `len` bytes of the row's data, a function of `seed` and the offset.
fn fill(data: &str, seed: u64, off: u64, buf: &mut [u8]) {
    const WORDS: [&str; 16] = [
        "stripe ", "server ", "client ", "object ", "block ", "inode ", "write ", "read ", "sync ",
        "layout ", "target ", "host ", "link ", "window ", "stream ", "data ",
    ];
    let mut x = seed ^ off.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    if data == "text" {
        let mut i = 0;
        while i < buf.len() {
            let w = WORDS[(next() % 16) as usize].as_bytes();
            let n = w.len().min(buf.len() - i);
            buf[i..i + n].copy_from_slice(&w[..n]);
            i += n;
        }
    } else {
        for c in buf.chunks_mut(8) {
            let v = next().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

fn check_rows(r: &RowArgs) -> Result<()> {
    if r.size == 0 || r.size > MAX_SIZE {
        bail!("--size must be between 1 byte and 64G");
    }
    if r.streams.is_empty() || r.compress.is_empty() || r.data.is_empty() {
        bail!("--streams, --compress and --data each need at least one value");
    }
    for &n in &r.streams {
        stripefs_rpc::config::check_streams(n).map_err(|e| anyhow!(e))?;
    }
    for &n in &r.pipeline {
        stripefs_rpc::config::check_pipeline(n).map_err(|e| anyhow!(e))?;
    }
    Ok(())
}

pub fn run(a: RemoteArgs) -> Result<serde_json::Value> {
    check_rows(&a.rows)?;
    let link = a.link.or_else(|| recorded_link(&a.cluster));
    let rows = measure(&a.cluster, link, &a.rows)?;
    let report = json!({
        "benchmark": "remote",
        "size_bytes": a.rows.size,
        "seed": crate::util::seed(),
        "link_mib_s": link.map(to_mib),
        "rows": rows,
    });
    if let Some(p) = &a.rows.json {
        write_json(p, &report)?;
    }
    Ok(report)
}

fn to_mib(bytes_s: u64) -> f64 {
    bytes_s as f64 / (1u64 << 20) as f64
}

/// Every row of `r` against the cluster of `client_file`.
fn measure(client_file: &Path, link: Option<u64>, r: &RowArgs) -> Result<Vec<serde_json::Value>> {
    let cluster = ClusterConfig::load(client_file).map_err(|e| anyhow!(e))?;
    let seed = crate::util::seed();
    let link_mib = link.map(to_mib);
    println!(
        "bench remote: {} per row, link {}, seed {seed}",
        format_size(r.size),
        link.map(|r| format!("{}/s", format_size(r)))
            .unwrap_or("unknown (give --link)".into())
    );
    println!(
        "{:>8} {:>5} {:>9} {:>9} {:>7} {:>10} {:>10} {:>8} {:>6}",
        "streams", "pipe", "compress", "direction", "data", "MiB/s", "link", "% link", "wire"
    );
    let depths = if r.pipeline.is_empty() {
        vec![cluster.pipeline.unwrap_or(1)]
    } else {
        r.pipeline.clone()
    };
    let mut rows = Vec::new();
    for data in &r.data {
        for &codec in &r.compress {
            for (&n, &depth) in r
                .streams
                .iter()
                .flat_map(|n| depths.iter().map(move |d| (n, d)))
            {
                let mut cfg = cluster.clone();
                cfg.streams = Some(n);
                cfg.pipeline = Some(depth);
                cfg.compress = Some(codec);
                for direction in ["write", "read"] {
                    let client = Client::connect(&cfg).with_context(|| {
                        format!("cannot connect with {}", client_file.display())
                    })?;
                    let secs = if direction == "write" {
                        write_file(&client, r, data, seed)?
                    } else {
                        read_file(&client, r, data, seed)?
                    };
                    let rate = mib_s(r.size, secs);
                    let wire = if direction == "write" {
                        client.wire_bytes().0
                    } else {
                        client.wire_bytes().1
                    };
                    println!(
                        "{:>8} {:>5} {:>9} {:>9} {:>7} {:>10.1} {:>10} {:>8} {:>6.2}",
                        n,
                        depth,
                        codec.to_string(),
                        direction,
                        data,
                        rate,
                        link_mib.map(|l| format!("{l:.1}")).unwrap_or("-".into()),
                        pct(rate, link_mib),
                        wire as f64 / r.size as f64
                    );
                    rows.push(json!({
                        "streams": n,
                        "pipeline": depth,
                        "compress": codec.to_string(),
                        "data": data,
                        "direction": direction,
                        "mib_s": rate,
                        "seconds": secs,
                        "link_mib_s": link_mib,
                        "wire_bytes": wire,
                        "verified": direction == "read",
                    }));
                }
            }
        }
    }
    if let Ok(c) = Client::connect(&cluster) {
        let _ = c.unlink(&r.path);
    }
    Ok(rows)
}

pub fn run_wan(a: WanArgs, exe: &Path) -> Result<serde_json::Value> {
    check_rows(&a.rows)?;
    if a.window == 0 || a.rate == 0 {
        bail!("--window and --rate must be above zero");
    }
    if a.servers == 0 || a.servers > 16 {
        bail!("--servers must be 1 to 16");
    }
    let wan = stripefs_launch::WanLink {
        rtt_us: a.rtt.as_micros() as u64,
        rate_bytes_s: a.rate,
        window_bytes: a.window,
    };
    println!(
        "bench wan: {} data servers behind an emulated link of {} ms RTT, {}/s, window {}",
        a.servers,
        a.rtt.as_millis(),
        format_size(a.rate),
        format_size(a.window)
    );
    crate::util::interrupt_stops_clusters();
    let cluster = ClusterGuard::start_wan(a.dir.as_deref(), a.servers, wan, exe)?;
    let rows = measure(&cluster.cluster_file, Some(a.rate), &a.rows)?;
    let transfers = if a.no_put {
        Vec::new()
    } else {
        put_get(&a, &cluster.cluster_file, exe)?
    };
    let report = json!({
        "benchmark": "wan",
        "rtt_ms": a.rtt.as_secs_f64() * 1e3,
        "link_mib_s": to_mib(a.rate),
        "window_bytes": a.window,
        "one_stream_window_mib_s": to_mib(a.window) / a.rtt.as_secs_f64().max(1e-6),
        "servers": a.servers,
        "size_bytes": a.rows.size,
        "seed": crate::util::seed(),
        "rows": rows,
        "transfers": transfers,
    });
    if let Some(p) = &a.plot {
        plot(&report, p)?;
        println!("plot: {}", p.display());
    }
    if let Some(p) = &a.rows.json {
        write_json(p, &report)?;
    }
    Ok(report)
}

/// `stripefs put` and `stripefs get` of one file of `--size` bytes, as processes, with
/// the largest stream count, for each codec and data kind; the copy is compared with the
/// original byte for byte.
fn put_get(a: &WanArgs, client_file: &Path, exe: &Path) -> Result<Vec<serde_json::Value>> {
    let tmp = tempfile::Builder::new()
        .prefix("stripefs-wan-")
        .tempdir()
        .context("cannot create a temporary directory")?;
    let streams = *a.rows.streams.iter().max().expect("checked non-empty");
    let seed = crate::util::seed();
    let link_mib = to_mib(a.rate);
    let mut out = Vec::new();
    println!(
        "{:>8} {:>9} {:>9} {:>7} {:>10}",
        "streams", "compress", "command", "data", "MiB/s"
    );
    for data in &a.rows.data {
        let src = tmp.path().join(format!("src-{data}"));
        write_local(&src, data, seed, a.rows.size)?;
        for &codec in &a.rows.compress {
            let dst = tmp.path().join("copy");
            let _ = std::fs::remove_file(&dst);
            let remote = format!("{}-put", a.rows.path);
            let common = |cmd: &mut std::process::Command| {
                cmd.arg("--cluster")
                    .arg(client_file)
                    .arg("--streams")
                    .arg(streams.to_string())
                    .arg("--compress")
                    .arg(codec.to_string())
                    .stdout(std::process::Stdio::null());
            };
            let mut put = std::process::Command::new(exe);
            put.arg("put").arg(&src).arg(&remote);
            common(&mut put);
            let put_s = timed(&mut put)?;
            let mut get = std::process::Command::new(exe);
            get.arg("get").arg(&remote).arg(&dst);
            common(&mut get);
            let get_s = timed(&mut get)?;
            if !same_file(&src, &dst)? {
                bail!("get returned other bytes than put stored ({data}, {codec})");
            }
            for (cmd, secs) in [("put", put_s), ("get", get_s)] {
                let rate = mib_s(a.rows.size, secs);
                println!(
                    "{:>8} {:>9} {:>9} {:>7} {:>10.1} {:>8}",
                    streams,
                    codec.to_string(),
                    cmd,
                    data,
                    rate,
                    pct(rate, Some(link_mib))
                );
                out.push(json!({
                    "command": cmd,
                    "streams": streams,
                    "compress": codec.to_string(),
                    "data": data,
                    "direction": if cmd == "put" { "write" } else { "read" },
                    "mib_s": rate,
                    "seconds": secs,
                    "link_mib_s": link_mib,
                    "verified": true,
                }));
            }
            let mut rm = std::process::Command::new(exe);
            rm.arg("rm").arg(&remote).arg("--cluster").arg(client_file);
            let _ = rm.output();
        }
    }
    Ok(out)
}

/// Runs `cmd` to completion; its wall-clock seconds, or its stderr as the error.
fn timed(cmd: &mut std::process::Command) -> Result<f64> {
    let start = Instant::now();
    let out = cmd
        .stderr(std::process::Stdio::piped())
        .output()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    let secs = start.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(secs)
}

fn write_local(path: &Path, data: &str, seed: u64, size: u64) -> Result<()> {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
    );
    let mut buf = vec![0u8; XFER_BYTES];
    let mut off = 0;
    while off < size {
        let n = (size - off).min(XFER_BYTES as u64) as usize;
        fill(data, seed, off, &mut buf[..n]);
        f.write_all(&buf[..n])?;
        off += n as u64;
    }
    f.flush()?;
    Ok(())
}

fn same_file(a: &Path, b: &Path) -> Result<bool> {
    use std::io::Read;
    let (mut fa, mut fb) = (std::fs::File::open(a)?, std::fs::File::open(b)?);
    if fa.metadata()?.len() != fb.metadata()?.len() {
        return Ok(false);
    }
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = fa.read(&mut ba)?;
        if n == 0 {
            return Ok(true);
        }
        fb.read_exact(&mut bb[..n])?;
        if ba[..n] != bb[..n] {
            return Ok(false);
        }
    }
}

/// MiB/s against streams, one line per (direction, compress, data, pipeline), the link
/// dashed.
fn plot(report: &serde_json::Value, path: &Path) -> Result<()> {
    use crate::plot::{line_chart, Chart, Series, XAxis};
    let rows = report["rows"].as_array().cloned().unwrap_or_default();
    let mut keys: Vec<(String, String, String, u64)> = Vec::new();
    for r in &rows {
        let k = (
            r["direction"].as_str().unwrap_or("").to_string(),
            r["compress"].as_str().unwrap_or("").to_string(),
            r["data"].as_str().unwrap_or("").to_string(),
            r["pipeline"].as_u64().unwrap_or(1),
        );
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut series = Vec::new();
    let mut xs: Vec<f64> = Vec::new();
    let depths = keys
        .iter()
        .map(|k| k.3)
        .collect::<std::collections::BTreeSet<_>>();
    for (i, (dir, codec, data, depth)) in keys.iter().enumerate().take(crate::plot::MAX_SERIES - 1)
    {
        let points: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| {
                r["direction"] == *dir
                    && r["compress"] == *codec
                    && r["data"] == *data
                    && r["pipeline"].as_u64().unwrap_or(1) == *depth
            })
            .filter_map(|r| Some((r["streams"].as_f64()?, r["mib_s"].as_f64()?)))
            .collect();
        xs.extend(points.iter().map(|p| p.0));
        series.push(Series {
            label: if depths.len() > 1 {
                format!("{dir}, compress {codec}, {data} data, pipeline {depth}")
            } else {
                format!("{dir}, compress {codec}, {data} data")
            },
            points,
            // Grey (5) is the link's.
            color: if i >= 5 { i + 1 } else { i },
            reference: false,
        });
    }
    let link = report["link_mib_s"].as_f64().unwrap_or(0.0);
    let (lo, hi) = xs
        .iter()
        .fold((f64::MAX, 0f64), |(l, h), x| (l.min(*x), h.max(*x)));
    series.push(Series {
        label: "link rate".into(),
        points: vec![(lo.min(hi), link), (hi, link)],
        color: 5, // grey
        reference: true,
    });
    line_chart(
        path,
        &Chart {
            title: format!(
                "Remote client over an emulated link ({} ms RTT, window {})",
                report["rtt_ms"].as_f64().unwrap_or(0.0).round(),
                format_size(report["window_bytes"].as_u64().unwrap_or(0))
            ),
            x_label: "streams (connections per data server)".into(),
            y_label: "MiB/s".into(),
            x_axis: XAxis::Linear,
            series,
        },
    )
}

/// Writes the test file (fsync and close included); returns the seconds.
fn write_file(c: &Client, a: &RowArgs, data: &str, seed: u64) -> Result<f64> {
    let _ = c.unlink(&a.path);
    let pb = progress(a.size, "remote w");
    let start = Instant::now();
    let f = c
        .open(&a.path, &OpenOptions::create_new(0o644))
        .with_context(|| format!("cannot create {}", a.path))?;
    let mut buf = vec![0u8; XFER_BYTES];
    let mut off = 0;
    while off < a.size {
        let n = (a.size - off).min(XFER_BYTES as u64) as usize;
        fill(data, seed, off, &mut buf[..n]);
        f.write_at(off, &buf[..n])?;
        off += n as u64;
        pb.inc(n as u64);
    }
    f.fsync()?;
    f.close()?;
    pb.finish_and_clear();
    Ok(start.elapsed().as_secs_f64())
}

/// Reads the test file back and checks every byte; returns the seconds.
fn read_file(c: &Client, a: &RowArgs, data: &str, seed: u64) -> Result<f64> {
    let pb = progress(a.size, "remote r");
    let start = Instant::now();
    let f = c
        .open(&a.path, &OpenOptions::read_only())
        .with_context(|| format!("cannot open {}", a.path))?;
    f.advise_sequential(0, a.size);
    let (mut buf, mut want) = (vec![0u8; XFER_BYTES], vec![0u8; XFER_BYTES]);
    let mut off = 0;
    while off < a.size {
        let n = (a.size - off).min(XFER_BYTES as u64) as usize;
        let got = f.read_at(off, &mut buf[..n])?;
        if got != n {
            bail!("short read: {got} of {n} bytes at {off}");
        }
        fill(data, seed, off, &mut want[..n]);
        if buf[..n] != want[..n] {
            bail!("verification failed: wrong bytes in the {n} bytes at offset {off}");
        }
        off += n as u64;
        pb.inc(n as u64);
    }
    f.close()?;
    pb.finish_and_clear();
    Ok(start.elapsed().as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_is_repeatable_and_text_compresses() {
        let (mut a, mut b) = (vec![0u8; 4096], vec![0u8; 4096]);
        fill("random", 7, 8192, &mut a);
        fill("random", 7, 8192, &mut b);
        assert_eq!(a, b);
        fill("random", 7, 0, &mut b);
        assert_ne!(a, b);
        fill("text", 7, 0, &mut a);
        assert!(a.iter().all(|c| c.is_ascii_lowercase() || *c == b' '));
        // 16 words: 4 bits of choice per 5-7 byte word, so well under a quarter of the
        // bytes are information.
        let distinct: std::collections::HashSet<&[u8]> = a.split(|c| *c == b' ').collect();
        assert!(distinct.len() <= 17, "{}", distinct.len());
    }
}
