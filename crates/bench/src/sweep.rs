//! `stripefs bench sweep`: repeats `bench io` over values of one parameter.
//!
//! Each run is an ordinary `bench io` built from `--base-args` plus the varied option, parsed
//! by the same parser as the command line, so every point can be reproduced by hand with
//! the command recorded beside it. For `--vary servers` the sweep starts one throwaway
//! cluster per value, one at a time, and stops each (also on failure or Ctrl-C) before
//! starting the next, so that idle servers never share the machine with a measurement.
//! Each point carries its same-run reference: the sum of the throttle rates of the targets
//! it used, or the local baseline with `--baseline`.

use crate::io::IoArgs;
use crate::plot::{Chart, Series, XAxis};
use crate::util::{parse_args, pct, shell_words, write_json, ClusterGuard};
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use stripefs_rpc::units::{format_size, parse_size};

/// Most values one sweep runs.
pub const MAX_VALUES: usize = 32;

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Vary {
    StripeSize,
    Servers,
    Clients,
    Xfer,
    /// Fraction of the clients on their data servers' hosts (`bench io
    /// --colocate-fraction`), on the given cluster.
    Locality,
    /// Emulated hosts: one throwaway cluster per value (`cluster up --hosts K`).
    Hosts,
}

impl Vary {
    fn name(self) -> &'static str {
        match self {
            Vary::StripeSize => "stripe-size",
            Vary::Servers => "servers",
            Vary::Clients => "clients",
            Vary::Xfer => "xfer",
            Vary::Locality => "locality",
            Vary::Hosts => "hosts",
        }
    }

    /// The `bench io` option a point sets (`None`: it starts a cluster instead).
    fn io_option(self) -> Option<&'static str> {
        match self {
            Vary::Servers | Vary::Hosts => None,
            Vary::Locality => Some("colocate-fraction"),
            v => Some(v.name()),
        }
    }

    /// Whether each point starts a cluster of its own.
    fn starts_clusters(self) -> bool {
        matches!(self, Vary::Servers | Vary::Hosts)
    }

    /// The parameter in words, for titles.
    fn words(self) -> &'static str {
        match self {
            Vary::StripeSize => "stripe size",
            Vary::Servers => "data servers",
            Vary::Clients => "clients",
            Vary::Xfer => "transfer size",
            Vary::Locality => "fraction of clients colocated",
            Vary::Hosts => "hosts",
        }
    }

    fn is_size(self) -> bool {
        matches!(self, Vary::StripeSize | Vary::Xfer)
    }

    fn axis_label(self) -> &'static str {
        match self {
            Vary::StripeSize => "stripe size (bytes, log scale)",
            Vary::Servers => "data servers",
            Vary::Clients => "clients",
            Vary::Xfer => "transfer size per call (bytes, log scale)",
            Vary::Locality => "fraction of clients on their data servers' hosts",
            Vary::Hosts => "emulated hosts",
        }
    }
}

#[derive(Args, Clone, Debug)]
pub struct SweepArgs {
    /// The parameter to vary.
    #[arg(long, value_enum)]
    pub vary: Vary,
    /// Its values, comma-separated (sizes like 64K,1M for stripe-size and xfer).
    #[arg(long, value_delimiter = ',', required = true)]
    pub values: Vec<String>,
    /// Further `bench io` arguments, as one string (e.g. "--clients 4 --block 64M").
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    pub base_args: String,
    /// Cluster description file (not used with --vary servers, which starts its own).
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    pub cluster: Option<PathBuf>,
    /// For --vary servers: targets per data server of the clusters it starts.
    #[arg(long, default_value_t = 1)]
    pub targets: u32,
    /// For --vary hosts: data servers of the clusters it starts.
    #[arg(long, default_value_t = 4)]
    pub servers: u32,
    /// For --vary hosts: each emulated host's network rate (`cluster up --host-net`).
    #[arg(long, value_parser = stripefs_rpc::units::parse_rate)]
    pub host_net: Option<u64>,
    /// For --vary servers: per-target throttle of the clusters it starts.
    #[arg(long, value_parser = stripefs_rpc::units::parse_rate)]
    pub throttle: Option<u64>,
    /// Run the same pattern on this local directory as the same-run reference.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Write the results as one JSON array to FILE.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw write and read throughput against the parameter to FILE.png.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// One value of the sweep, parsed.
struct Point {
    text: String,
    number: f64,
}

impl Point {
    /// The value for the JSON: a whole number as an integer (servers, sizes), a fraction
    /// as a float (locality).
    fn json(&self) -> Value {
        if self.number.fract() == 0.0 && self.number <= u64::MAX as f64 {
            json!(self.number as u64)
        } else {
            json!(self.number)
        }
    }
}

fn points(a: &SweepArgs) -> Result<Vec<Point>> {
    if a.values.is_empty() || a.values.len() > MAX_VALUES {
        bail!("--values takes 1 to {MAX_VALUES} values");
    }
    a.values
        .iter()
        .map(|v| {
            let v = v.trim();
            let number = if a.vary.is_size() {
                parse_size(v).map_err(|e| anyhow::anyhow!("{e}"))? as f64
            } else if a.vary == Vary::Locality {
                v.parse::<f64>()
                    .ok()
                    .filter(|f| (0.0..=1.0).contains(f))
                    .with_context(|| {
                        format!("--values for locality: {v:?} is not a fraction from 0 to 1")
                    })?
            } else {
                v.parse::<u64>().ok().filter(|&n| n > 0).with_context(|| {
                    format!(
                        "--values for {}: {v:?} is not a positive number",
                        a.vary.name()
                    )
                })? as f64
            };
            Ok(Point {
                text: v.to_string(),
                number,
            })
        })
        .collect()
}

/// The `bench io` arguments of one point. Later words override earlier ones: the base
/// arguments override the sweep's `--cluster`, and the varied value (or the cluster a
/// servers sweep started) overrides the base arguments.
fn io_argv(a: &SweepArgs, p: &Point, started: Option<&Path>) -> Vec<String> {
    let mut argv = vec![];
    if let Some(c) = &a.cluster {
        argv.extend(["--cluster".into(), c.display().to_string()]);
    }
    let mut words = a.base_args.split_whitespace();
    while let Some(w) = words.next() {
        // Each point goes into the sweep's JSON, never into a file of its own.
        if w == "--json" {
            words.next();
        } else if !w.starts_with("--json=") {
            argv.push(w.to_string());
        }
    }
    if let Some(b) = &a.baseline {
        argv.extend(["--baseline".into(), b.display().to_string()]);
    }
    match (started, a.vary.io_option()) {
        (Some(c), _) => argv.extend(["--cluster".into(), c.display().to_string()]),
        (None, Some(opt)) => argv.extend([format!("--{opt}"), p.text.clone()]),
        (None, None) => {}
    }
    argv
}

/// Runs the sweep, prints each run and a summary table; returns the JSON array.
pub fn run(a: SweepArgs, exe: PathBuf) -> Result<Value> {
    let pts = points(&a)?;
    if a.vary.starts_clusters() {
        crate::util::interrupt_stops_clusters();
    } else if a.cluster.is_none() {
        bail!("--cluster (or STRIPEFS_CLUSTER) is needed unless --vary servers or hosts");
    }
    if a.host_net.is_some() && a.vary != Vary::Hosts {
        bail!("--host-net goes with --vary hosts (other sweeps use the given cluster)");
    }
    // Check the arguments of every point before the first measurement.
    for p in &pts {
        let placeholder = Path::new("cluster.toml");
        let cluster = a.vary.starts_clusters().then_some(placeholder);
        parse_args::<IoArgs>(&io_argv(&a, p, cluster))?;
    }
    let mut rows = Vec::with_capacity(pts.len());
    for p in &pts {
        println!("bench sweep: {} = {}", a.vary.name(), p.text);
        rows.push(run_point(&a, p, &exe)?);
        println!();
    }
    print_summary(&a, &rows);
    let out = Value::Array(rows);
    if let Some(path) = &a.json {
        write_json(path, &out)?;
    }
    if let Some(path) = &a.plot {
        plot(&a, &out, path)?;
    }
    Ok(out)
}

fn run_point(a: &SweepArgs, p: &Point, exe: &Path) -> Result<Value> {
    let guard = match a.vary {
        Vary::Servers => {
            let servers = u32::try_from(p.number as u64).context("--values: too many servers")?;
            Some(ClusterGuard::start(
                None, servers, a.targets, a.throttle, None, exe,
            )?)
        }
        Vary::Hosts => {
            let hosts = u32::try_from(p.number as u64).context("--values: too many hosts")?;
            let net = Some(crate::util::HostsNet {
                hosts,
                host_net_bytes_s: a.host_net,
            });
            Some(ClusterGuard::start(
                None, a.servers, a.targets, a.throttle, net, exe,
            )?)
        }
        _ => None,
    };
    let argv = io_argv(a, p, guard.as_ref().map(|g| g.cluster_file.as_path()));
    let io = parse_args::<IoArgs>(&argv)?;
    let mut report = crate::io::run(io)
        .with_context(|| format!("bench io with {} = {}", a.vary.name(), p.text))?;
    drop(guard);
    let mut command = vec!["stripefs".to_string(), "bench".into(), "io".into()];
    command.extend(argv);
    if let Some(o) = report.as_object_mut() {
        o.insert("vary".into(), json!(a.vary.name()));
        o.insert("value".into(), p.json());
        o.insert("value_text".into(), json!(p.text));
        if a.vary == Vary::Hosts {
            o.insert("hosts".into(), p.json());
            o.insert("host_net_bytes_s".into(), json!(a.host_net));
        }
        if a.vary == Vary::Servers {
            o.insert("servers".into(), p.json());
            o.insert("targets".into(), json!(a.targets));
            o.insert("throttle_bytes_s".into(), json!(a.throttle));
        }
        o.insert("command".into(), json!(shell_words(&command)));
    }
    Ok(report)
}

fn f(v: &Value, k: &str) -> Option<f64> {
    v.get(k).and_then(Value::as_f64)
}

fn print_summary(a: &SweepArgs, rows: &[Value]) {
    println!("bench sweep over {}:", a.vary.name());
    println!(
        "{:>12} {:>12} {:>11} {:>10} {:>8} {:>8} {:>11} {:>11}",
        a.vary.name(),
        "write MiB/s",
        "read MiB/s",
        "ceiling",
        "% ceil w",
        "% ceil r",
        "% baseline w",
        "% baseline r"
    );
    for r in rows {
        let (w, rd) = (
            f(r, "write_mib_s").unwrap_or(0.0),
            f(r, "read_mib_s").unwrap_or(0.0),
        );
        let ceil = f(r, "ceiling_mib_s");
        println!(
            "{:>12} {:>12.0} {:>11.0} {:>10} {:>8} {:>8} {:>11} {:>11}",
            r["value_text"].as_str().unwrap_or("?"),
            w,
            rd,
            ceil.map(|c| format!("{c:.0}")).unwrap_or("-".into()),
            pct(w, ceil),
            pct(rd, ceil),
            pct(w, f(r, "baseline_write_mib_s")),
            pct(rd, f(r, "baseline_read_mib_s")),
        );
    }
}

/// Draws write and read throughput against the varied parameter, with the same-run
/// reference: the ceiling when every point had one, else the local baseline if measured.
pub fn plot(a: &SweepArgs, rows: &Value, path: &Path) -> Result<()> {
    let rows = rows.as_array().context("sweep results are not a list")?;
    let series_of = |k: &str| -> Option<Vec<(f64, f64)>> {
        rows.iter()
            .map(|r| Some((r["value"].as_f64()?, f(r, k)?)))
            .collect()
    };
    let line = |label: &str, key: &str, color: usize, reference: bool| {
        series_of(key).map(|points| Series {
            label: label.into(),
            points,
            color,
            reference,
        })
    };
    let mut series: Vec<Series> = [
        line("stripefs write", "write_mib_s", 0, false),
        line("stripefs read", "read_mib_s", 1, false),
    ]
    .into_iter()
    .flatten()
    .collect();
    match line(
        "ceiling: sum of target throttle rates",
        "ceiling_mib_s",
        5,
        true,
    ) {
        Some(c) => series.push(c),
        None => series.extend(
            [
                line("local baseline write", "baseline_write_mib_s", 0, true),
                line("local baseline read", "baseline_read_mib_s", 1, true),
            ]
            .into_iter()
            .flatten(),
        ),
    }
    let first = rows.first().cloned().unwrap_or_default();
    let fixed = match a.vary {
        Vary::Clients => format!(
            "{} per client",
            format_size(first["block_bytes"].as_u64().unwrap_or(0))
        ),
        _ => format!(
            "{} clients x {}",
            first["clients"].as_u64().unwrap_or(0),
            format_size(first["block_bytes"].as_u64().unwrap_or(0))
        ),
    };
    let chart = Chart {
        title: format!("bench io: throughput vs {} ({fixed})", a.vary.words()),
        x_label: a.vary.axis_label().into(),
        y_label: "throughput (MiB/s)".into(),
        x_axis: if a.vary.is_size() {
            XAxis::Log2Bytes
        } else {
            XAxis::Linear
        },
        series,
    };
    crate::plot::line_chart(path, &chart)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(vary: Vary, values: &[&str], base: &str) -> SweepArgs {
        SweepArgs {
            vary,
            values: values.iter().map(|s| s.to_string()).collect(),
            base_args: base.into(),
            cluster: Some("c.toml".into()),
            targets: 1,
            servers: 4,
            host_net: None,
            throttle: None,
            baseline: None,
            json: None,
            plot: None,
        }
    }

    #[test]
    fn varied_value_overrides_base_args() {
        let a = args(
            Vary::Clients,
            &["2", "8"],
            "--clients 4 --block 8M --json x.json",
        );
        let p = &points(&a).unwrap()[1];
        let io: IoArgs = parse_args(&io_argv(&a, p, None)).unwrap();
        assert_eq!(io.clients, 8);
        assert_eq!(io.block, Some(8 << 20));
        assert!(io.json.is_none());
        assert_eq!(io.cluster, PathBuf::from("c.toml"));
    }

    #[test]
    fn sizes_parse_and_bad_values_are_refused() {
        let a = args(Vary::StripeSize, &["64K", "1M"], "");
        let n: Vec<f64> = points(&a).unwrap().iter().map(|p| p.number).collect();
        assert_eq!(n, [(64 << 10) as f64, (1 << 20) as f64]);
        let a = args(Vary::Locality, &["0", "0.5", "1"], "");
        let n: Vec<f64> = points(&a).unwrap().iter().map(|p| p.number).collect();
        assert_eq!(n, [0.0, 0.5, 1.0]);
        let io: IoArgs = parse_args(&io_argv(&a, &points(&a).unwrap()[1], None)).unwrap();
        assert_eq!(io.colocate_fraction, Some(0.5));
        assert!(points(&args(Vary::Locality, &["1.5"], "")).is_err());
        assert!(points(&args(Vary::Hosts, &["0"], "")).is_err());
        assert!(points(&args(Vary::Servers, &["0"], "")).is_err());
        assert!(points(&args(Vary::Xfer, &["lots"], "")).is_err());
        let bad = args(Vary::Clients, &["2"], "--no-such-option");
        assert!(parse_args::<IoArgs>(&io_argv(&bad, &points(&bad).unwrap()[0], None)).is_err());
    }
}
