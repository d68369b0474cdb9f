//! `stripefs bench remote`: a client far from the cluster (through `cluster up --wan`, or
//! any client file) writes a file and reads it back, once per stream count, against the
//! emulated link's rate in the same run.
//!
//! Each row is one (streams, data, direction): a fresh client with that many connections
//! per data server writes `--size` bytes (fsync and close included) or reads them back
//! and verifies every byte. The reference is the link: `--link RATE`, or the rate of the
//! `--wan` link recorded beside the client file (`layout.toml` of `cluster up`).
//! Compression is not built: every row says `"compress": "off"`.

use crate::util::{mib_s, pct, progress, write_json};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;
use stripefs_client::{Client, OpenOptions};
use stripefs_rpc::units::{format_size, parse_link_rate, parse_size};
use stripefs_rpc::ClusterConfig;

/// Bytes per write or read call.
const XFER_BYTES: usize = 8 << 20;
/// Largest file, to catch a unit typo.
const MAX_SIZE: u64 = 64 << 30;

#[derive(Args, Debug, Clone)]
pub struct RemoteArgs {
    /// Client file of the remote cluster (e.g. DIR/client-wan.toml of `cluster up --wan`).
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    pub cluster: PathBuf,
    /// Stream counts to measure (connections per data server), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub streams: Vec<u32>,
    /// Bytes written and read per row.
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    pub size: u64,
    /// What the file holds: random bytes, or text-like bytes (words from a small
    /// vocabulary, compressible about 4:1).
    #[arg(long, default_value = "random", value_parser = ["random", "text"])]
    pub data: String,
    /// The link's rate (bits like 200Mbit or bytes like 25MiB per second); default: the
    /// `--wan` rate in layout.toml beside the client file.
    #[arg(long, value_parser = parse_link_rate)]
    pub link: Option<u64>,
    /// Path of the test file in stripefs.
    #[arg(long, default_value = "/bench-remote")]
    pub path: String,
    /// Write the figures as one JSON object to FILE.
    #[arg(long)]
    pub json: Option<PathBuf>,
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

pub fn run(a: RemoteArgs) -> Result<serde_json::Value> {
    if a.size == 0 || a.size > MAX_SIZE {
        bail!("--size must be between 1 byte and 64G");
    }
    if a.streams.is_empty() {
        bail!("--streams needs at least one count");
    }
    for &n in &a.streams {
        stripefs_rpc::config::check_streams(n).map_err(|e| anyhow!(e))?;
    }
    let cluster = ClusterConfig::load(&a.cluster).map_err(|e| anyhow!(e))?;
    let link = a.link.or_else(|| recorded_link(&a.cluster));
    let seed = crate::util::seed();
    let link_mib = link.map(|r| r as f64 / (1u64 << 20) as f64);
    println!(
        "bench remote: {} of {} data per row, link {}",
        format_size(a.size),
        a.data,
        link.map(|r| format!("{}/s", format_size(r)))
            .unwrap_or("unknown (give --link)".into())
    );
    println!(
        "{:>8} {:>9} {:>7} {:>10} {:>10} {:>8}",
        "streams", "direction", "data", "MiB/s", "link", "% link"
    );
    let mut rows = Vec::new();
    for &n in &a.streams {
        let mut cfg = cluster.clone();
        cfg.streams = Some(n);
        for direction in ["write", "read"] {
            let client = Client::connect(&cfg)
                .with_context(|| format!("cannot connect with {}", a.cluster.display()))?;
            let secs = if direction == "write" {
                write_file(&client, &a, seed)?
            } else {
                read_file(&client, &a, seed)?
            };
            let rate = mib_s(a.size, secs);
            println!(
                "{:>8} {:>9} {:>7} {:>10.1} {:>10} {:>8}",
                n,
                direction,
                a.data,
                rate,
                link_mib.map(|l| format!("{l:.1}")).unwrap_or("-".into()),
                pct(rate, link_mib)
            );
            rows.push(json!({
                "streams": n,
                "compress": "off",
                "data": a.data,
                "direction": direction,
                "mib_s": rate,
                "seconds": secs,
                "link_mib_s": link_mib,
                "verified": direction == "read",
            }));
        }
    }
    if let Ok(c) = Client::connect(&cluster) {
        let _ = c.unlink(&a.path);
    }
    let report = json!({
        "benchmark": "remote",
        "size_bytes": a.size,
        "data": a.data,
        "seed": seed,
        "link_mib_s": link_mib,
        "rows": rows,
    });
    if let Some(p) = &a.json {
        write_json(p, &report)?;
    }
    Ok(report)
}

/// Writes the test file (fsync and close included); returns the seconds.
fn write_file(c: &Client, a: &RemoteArgs, seed: u64) -> Result<f64> {
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
        fill(&a.data, seed, off, &mut buf[..n]);
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
fn read_file(c: &Client, a: &RemoteArgs, seed: u64) -> Result<f64> {
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
        fill(&a.data, seed, off, &mut want[..n]);
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
