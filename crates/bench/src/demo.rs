//! `stripefs demo`: the main job on an embedded default. Starts a throwaway local cluster
//! of throttled targets (so the figures mean something on any machine: the ceiling is the
//! sum of the emulated disk rates), runs the headline benchmarks (io with a local baseline,
//! md, balance and a stripe-size sweep), prints one summary table with every figure beside
//! its reference, writes a report directory (index.html, JSON, each benchmark's own output,
//! PNG plots) and stops the cluster, also on failure or Ctrl-C.
//!
//! Each benchmark runs through the same argument parser as `stripefs bench NAME`, so the
//! command the report shows beside a figure is exactly what measured it. A benchmark that
//! fails (or panics) is reported as failed with its error; the others still run, and the
//! demo exits non-zero at the end.

use crate::report::{self, Report, Row, Section};
use crate::util::{parse_args, shell_words, with_stdout_to, ClusterGuard};
use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;
use stripefs_rpc::units::{format_size, parse_rate, parse_size};

#[derive(Args, Clone, Debug)]
pub struct DemoArgs {
    /// Data servers of the throwaway cluster.
    #[arg(long, default_value_t = 8)]
    pub servers: u32,
    /// Targets (emulated disks) per data server.
    #[arg(long, default_value_t = 2)]
    pub targets: u32,
    /// Rate of each emulated disk.
    #[arg(long, default_value = "25MiB", value_parser = parse_rate)]
    pub throttle: u64,
    /// Bytes each client writes and reads in `bench io`.
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    pub block: u64,
    /// Where to put the throwaway cluster (default: a new temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Where to write the report (index.html, JSON results, plots).
    #[arg(long, default_value = "stripefs-report")]
    pub report: PathBuf,
    /// Concurrent clients of io, md and the sweep.
    #[arg(long, default_value_t = 4)]
    pub clients: u32,
    /// Files per client in `bench md`.
    #[arg(long, default_value_t = 500, hide = true)]
    pub files: u32,
    /// File sizes of `bench balance`.
    #[arg(long, default_value = "1M,4M,16M", hide = true)]
    pub balance_sizes: String,
    /// Files each producer copies per measurement in `bench balance`.
    #[arg(long, default_value_t = 2, hide = true)]
    pub balance_files: u32,
    /// Stripe sizes of the sweep.
    #[arg(long, default_value = "64K,256K,1M", hide = true)]
    pub sweep_values: String,
    /// Bytes each client writes and reads at each point of the sweep.
    #[arg(long, default_value = "64M", value_parser = parse_size, hide = true)]
    pub sweep_block: u64,
    /// Bytes each client writes and reads in the locality runs.
    #[arg(long, default_value = "64M", value_parser = parse_size, hide = true)]
    pub locality_block: u64,
    /// Bytes the remote client writes and reads per row of the wide-area section.
    #[arg(long, default_value = "32M", value_parser = parse_size, hide = true)]
    pub wan_size: u64,
    /// Bytes written and read per measurement of the TLS section.
    #[arg(long, default_value = "128M", value_parser = parse_size, hide = true)]
    pub tls_size: u64,
}

/// Hosts (one data server each) of the locality section's cluster.
const LOCALITY_HOSTS: u32 = 4;

/// What every step needs.
struct Ctx<'a> {
    a: &'a DemoArgs,
    cluster_file: PathBuf,
    cluster_dir: PathBuf,
    report: PathBuf,
    exe: PathBuf,
}

impl Ctx<'_> {
    fn out(&self, file: &str) -> String {
        self.report.join(file).display().to_string()
    }

    /// A command as the report shows it: the cluster directory is `D`.
    fn command(&self, bench: &str, argv: &[String]) -> String {
        let mut words = vec!["stripefs".to_string(), "bench".into(), bench.into()];
        words.extend(argv.iter().cloned());
        shell_words(&words).replace(&self.cluster_dir.display().to_string(), "D")
    }

    fn cluster_args(&self) -> Vec<String> {
        vec!["--cluster".into(), self.cluster_file.display().to_string()]
    }
}

pub fn run(a: DemoArgs, exe: PathBuf) -> Result<()> {
    let started = Instant::now();
    if a.sweep_block % (256 << 10) != 0
        || a.block % (1 << 20) != 0
        || a.locality_block % (1 << 20) != 0
    {
        bail!("--block and --locality-block must be multiples of 1M and --sweep-block of 256K");
    }
    crate::util::interrupt_stops_clusters();
    std::fs::create_dir_all(&a.report)
        .with_context(|| format!("cannot create {}", a.report.display()))?;
    let ceiling = a.servers as u64 * a.targets as u64 * a.throttle;
    println!(
        "stripefs demo: starting a local cluster of {} data servers x {} targets, each target throttled to {}/s (ceiling {}/s)",
        a.servers,
        a.targets,
        format_size(a.throttle),
        format_size(ceiling)
    );
    let guard = ClusterGuard::start(
        a.dir.as_deref(),
        a.servers,
        a.targets,
        Some(a.throttle),
        None,
        &exe,
    )?;
    let ctx = Ctx {
        a: &a,
        cluster_file: guard.cluster_file.clone(),
        cluster_dir: guard.dir.clone(),
        report: a.report.clone(),
        exe,
    };
    println!(
        "  cluster in {}; each benchmark's output goes to {}/NAME.txt",
        guard.dir.display(),
        a.report.display()
    );
    let mut sections = vec![io(&ctx), md(&ctx), balance(&ctx), sweep(&ctx)];
    println!();
    print!("stopping the cluster ... ");
    let _ = std::io::stdout().flush();
    drop(guard);
    println!("done");
    // Locality runs on a cluster of its own, with emulated hosts and host network;
    // remote access on one behind an emulated wide-area link.
    sections.push(locality(&ctx));
    sections.push(wan(&ctx));
    sections.push(tls(&ctx));
    let mut rep = Report {
        title: "stripefs demo report".into(),
        setup: setup_text(&a, ceiling),
        setup_commands: vec![
            "cargo build --release && alias stripefs=$PWD/target/release/stripefs".into(),
            format!(
                "stripefs cluster up --dir D --servers {} --targets {} --throttle {}",
                a.servers,
                a.targets,
                rate_arg(a.throttle)
            ),
            "# ... the commands of each section ...".into(),
            "stripefs cluster down --dir D".into(),
        ],
        sections,
        wall_s: 0.0,
    };
    rep.wall_s = started.elapsed().as_secs_f64();
    println!();
    report::print_summary(&rep);
    report::write(&rep, &a.report)?;
    println!();
    println!(
        "demo finished in {:.0} s; report: {}/index.html",
        rep.wall_s,
        a.report.display()
    );
    let failed: Vec<&str> = rep
        .sections
        .iter()
        .filter(|s| s.error.is_some())
        .map(|s| s.name.as_str())
        .collect();
    if !failed.is_empty() {
        bail!(
            "{} of {} benchmarks failed ({}); see {}/index.html",
            failed.len(),
            rep.sections.len(),
            failed.join(", "),
            a.report.display()
        );
    }
    Ok(())
}

fn setup_text(a: &DemoArgs, ceiling: u64) -> Vec<String> {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    vec![
        format!(
            "A throwaway local cluster: 1 metadata server and {} data servers x {} targets, every \
             target throttled to {}/s to emulate a commodity disk, so the data ceiling is {}/s \
             (the sum of the target rates). Metadata is not throttled.",
            a.servers,
            a.targets,
            format_size(a.throttle),
            format_size(ceiling)
        ),
        format!(
            "All servers and clients share this machine ({cores} cores, loopback network). \
             Every figure is compared with a reference measured in the same run; absolute \
             figures move by tens of percent between runs on a shared machine."
        ),
    ]
}

/// Runs one benchmark with its output captured into the report; a failure or a panic
/// becomes `Err(message)`.
fn step(
    ctx: &Ctx,
    name: &str,
    f: impl FnOnce() -> Result<Value>,
) -> (std::result::Result<Value, String>, f64) {
    print!("  {name:<8} ... ");
    let _ = std::io::stdout().flush();
    let t = Instant::now();
    let log = ctx.report.join(format!("{name}.txt"));
    let caught = with_stdout_to(&log, || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
    });
    let out = match caught {
        Ok(Ok(Ok(v))) => Ok(v),
        Ok(Ok(Err(e))) => Err(format!("{e:#}")),
        Ok(Err(_)) => Err(format!("{name} panicked (see the message above)")),
        Err(e) => Err(format!("{e:#}")),
    };
    let secs = t.elapsed().as_secs_f64();
    match &out {
        Ok(_) => println!("ok ({secs:.1} s)"),
        Err(e) => println!("FAILED ({secs:.1} s): {}", e.lines().next().unwrap_or("")),
    }
    (out, secs)
}

fn section(
    name: &str,
    title: &str,
    about: &str,
    command: String,
    out: &(std::result::Result<Value, String>, f64),
) -> Section {
    Section {
        name: name.into(),
        title: title.into(),
        about: about.into(),
        commands: vec![command],
        error: out.0.as_ref().err().cloned(),
        secs: out.1,
        output: Some(format!("{name}.txt")),
        ..Section::default()
    }
}

fn f(v: &Value, k: &str) -> Option<f64> {
    v.get(k).and_then(Value::as_f64)
}

fn io(ctx: &Ctx) -> Section {
    let a = ctx.a;
    let mut argv = ctx.cluster_args();
    let baseline = ctx.cluster_dir.join("baseline").display().to_string();
    for (k, v) in [
        ("--clients", a.clients.to_string()),
        ("--block", format_size_arg(a.block)),
        ("--xfer", "1M".into()),
        ("--baseline", baseline),
        ("--json", ctx.out("io.json")),
    ] {
        argv.extend([k.to_string(), v]);
    }
    let out = step(ctx, "io", || crate::io::run(parse_args(&argv)?));
    let mut s = section(
        "io",
        "bench io (mpi-io-test, seed 003)",
        "Each client writes a contiguous block of one shared file in 1 MiB transfers and \
         fsyncs; then each reads back and verifies the block another client wrote. The same \
         pattern runs on a local directory of this machine as the baseline.",
        ctx.command("io", &argv),
        &out,
    );
    if let Ok(v) = &out.0 {
        s.json = Some("io.json".into());
        let ceiling = f(v, "ceiling_mib_s");
        let ceiling_label = format!(
            "ceiling: {} targets x {}/s",
            a.servers * a.targets,
            format_size(a.throttle)
        );
        for (phase, key) in [("write", "write_mib_s"), ("read", "read_mib_s")] {
            s.rows.push(
                Row::new(
                    format!("{} clients {phase}", a.clients),
                    "MiB/s",
                    f(v, key).unwrap_or(0.0),
                )
                .vs(&ceiling_label, ceiling)
                .vs("local disk, same pattern", f(v, &format!("baseline_{key}"))),
            );
        }
    }
    s
}

/// A rate as `cluster up --throttle` takes it.
fn rate_arg(bytes_s: u64) -> String {
    match bytes_s {
        b if b % (1 << 20) == 0 => format!("{}MiB", b >> 20),
        b if b % (1 << 10) == 0 => format!("{}KiB", b >> 10),
        b => b.to_string(),
    }
}

/// A size as the benchmarks' options take it.
fn format_size_arg(bytes: u64) -> String {
    if bytes % (1 << 20) == 0 {
        format!("{}M", bytes >> 20)
    } else if bytes % (1 << 10) == 0 {
        format!("{}K", bytes >> 10)
    } else {
        bytes.to_string()
    }
}

/// The metadata rates issue 4 asks for (on 4 servers with 2500 files per client).
const MD_TARGETS: [(&str, f64); 3] = [
    ("create_ops_s", 10_000.0),
    ("stat_ops_s", 30_000.0),
    ("remove_ops_s", 10_000.0),
];

fn md(ctx: &Ctx) -> Section {
    let a = ctx.a;
    let mut argv = ctx.cluster_args();
    for (k, v) in [
        ("--clients", a.clients.to_string()),
        ("--files", a.files.to_string()),
        (
            "--baseline",
            ctx.cluster_dir.join("md-baseline").display().to_string(),
        ),
        ("--json", ctx.out("md.json")),
    ] {
        argv.extend([k.to_string(), v]);
    }
    let out = step(ctx, "md", || crate::md::run(parse_args(&argv)?));
    let mut s = section(
        "md",
        "bench md (mpi-md-test, seed 003, and mdtest-easy)",
        "Collective create, open and resize of one file by all clients; then every client \
         creates, stats and removes its files in its own directory, and creates in one shared \
         directory. Every create is durable when acknowledged.",
        ctx.command("md", &argv),
        &out,
    );
    if let Ok(v) = &out.0 {
        s.json = Some("md.json".into());
        for (key, what) in [
            ("create_ops_s", "creates"),
            ("stat_ops_s", "stats"),
            ("remove_ops_s", "removes"),
            ("shared_dir_create_ops_s", "creates, shared dir"),
        ] {
            let target = MD_TARGETS.iter().find(|t| t.0 == key).map(|t| t.1);
            let Some(value) = f(v, key) else { continue };
            s.rows.push(
                Row::new(what, "ops/s", value)
                    .vs(
                        "local file system, same pattern",
                        f(v, &format!("baseline_{key}")),
                    )
                    .vs("target (4 servers, 2,500 files)", target),
            );
        }
        for key in [
            "collective_create_s",
            "collective_open_s",
            "collective_resize_s",
        ] {
            let what = key.trim_end_matches("_s").replace('_', " ");
            if let Some(secs) = f(v, key) {
                s.rows.push(Row::new(what, "ms, mean", secs * 1e3));
            }
        }
    }
    s
}

fn balance(ctx: &Ctx) -> Section {
    let a = ctx.a;
    let png = ctx.report.join("balance.png");
    let _ = std::fs::remove_file(&png);
    let mut argv = ctx.cluster_args();
    for (k, v) in [
        ("--sizes", a.balance_sizes.clone()),
        ("--files", a.balance_files.to_string()),
        ("--json", ctx.out("balance.json")),
        ("--plot", png.display().to_string()),
    ] {
        argv.extend([k.to_string(), v]);
    }
    let out = step(ctx, "balance", || crate::balance::run(parse_args(&argv)?));
    let mut s = section(
        "balance",
        "bench balance (Disk/Net balance test, seed 001)",
        "Producer-consumer pairs each read a file placed on one data server and write it to a \
         file on the same server (intranode) or another (internode), for every mix of pairs and \
         several file sizes; throughput = files x size / time.",
        ctx.command("balance", &argv),
        &out,
    );
    if let Ok(v) = &out.0 {
        s.json = Some("balance.json".into());
        // The benchmark may not draw its own plot; the report needs one either way.
        if !png.exists() {
            if let Err(e) = crate::plot::balance(v, &png) {
                s.error = Some(format!("balance plot: {e:#}"));
                return s;
            }
        }
        s.images.push("balance.png".into());
        s.rows = balance_rows(v);
    }
    s
}

/// How the balance benchmark names the rate limit of the servers a mix uses.
const CEIL: &str = "ceiling: throttle of the servers used";

/// For each size: all pairs intranode, and all pairs internode (the seed's comparison),
/// each against the ceiling the benchmark reports for its mix, and internode also against
/// intranode.
fn balance_rows(v: &Value) -> Vec<Row> {
    let rows = v["rows"].as_array().cloned().unwrap_or_default();
    let get = |r: &Value, k: &str| r[k].as_u64().unwrap_or(0);
    let mut sizes: Vec<u64> = rows.iter().map(|r| get(r, "size_bytes")).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut out = vec![];
    for size in sizes {
        let of_size: Vec<&Value> = rows
            .iter()
            .filter(|r| get(r, "size_bytes") == size)
            .collect();
        let pure = |intra: bool| {
            of_size
                .iter()
                .filter(|r| get(r, if intra { "internode" } else { "intranode" }) == 0)
                .max_by_key(|r| get(r, if intra { "intranode" } else { "internode" }))
                .copied()
        };
        let (Some(intra), Some(inter)) = (pure(true), pure(false)) else {
            continue;
        };
        let (ni, ne) = (get(intra, "intranode"), get(inter, "internode"));
        let intra_v = intra["mib_s"].as_f64();
        out.push(
            Row::new(
                format!("{} files, {ni} intranode pairs", format_size(size)),
                "MiB/s",
                intra_v.unwrap_or(f64::NAN),
            )
            .vs(CEIL, f(intra, "ceiling_mib_s")),
        );
        out.push(
            Row::new(
                format!("{} files, {ne} internode pairs", format_size(size)),
                "MiB/s",
                inter["mib_s"].as_f64().unwrap_or(f64::NAN),
            )
            .vs(CEIL, f(inter, "ceiling_mib_s"))
            .vs(format!("{ni} intranode pairs, same size"), intra_v),
        );
    }
    out
}

fn sweep(ctx: &Ctx) -> Section {
    let a = ctx.a;
    let base = format!(
        "--clients {} --block {} --xfer 256K",
        a.clients,
        format_size_arg(a.sweep_block)
    );
    let mut argv = vec![];
    for (k, v) in [
        ("--vary", "stripe-size".to_string()),
        ("--values", a.sweep_values.clone()),
        ("--base-args", base),
        ("--cluster", ctx.cluster_file.display().to_string()),
        ("--json", ctx.out("sweep-stripe-size.json")),
        ("--plot", ctx.out("sweep-stripe-size.png")),
    ] {
        argv.extend([k.to_string(), v]);
    }
    let exe = ctx.exe.clone();
    let out = step(ctx, "sweep", || crate::sweep::run(parse_args(&argv)?, exe));
    let mut s = section(
        "sweep",
        "bench sweep --vary stripe-size",
        "bench io repeated over stripe sizes, at a smaller block and 256 KiB transfers; the \
         ceiling (sum of the target rates) is drawn as the reference.",
        ctx.command("sweep", &argv),
        &out,
    );
    if let Ok(v) = &out.0 {
        s.json = Some("sweep-stripe-size.json".into());
        s.images.push("sweep-stripe-size.png".into());
        for r in v.as_array().into_iter().flatten() {
            let value = r["value_text"].as_str().unwrap_or("?");
            for (phase, key) in [("write", "write_mib_s"), ("read", "read_mib_s")] {
                s.rows.push(
                    Row::new(
                        format!("stripe {value} {phase}"),
                        "MiB/s",
                        f(r, key).unwrap_or(f64::NAN),
                    )
                    .vs("ceiling: sum of target rates", f(r, "ceiling_mib_s")),
                );
            }
        }
    }
    s
}

/// Seed 000's balance on emulated hosts: each host's network is half its disks' rate.
/// Clients on their data servers' hosts with a local layout, against the same clients
/// on a host with no data server; then `bench balance` on the same cluster.
fn locality(ctx: &Ctx) -> Section {
    let a = ctx.a;
    let net = a.throttle / 2;
    let mut s = Section {
        name: "locality".into(),
        title: "locality: colocated against remote clients, and Disk/Net balance on hosts (seeds 000, 001)"
            .into(),
        about: format!(
            "A second cluster: {LOCALITY_HOSTS} emulated hosts with one data server each, one \
             target throttled to {}/s per server and a host network of {}/s per host and \
             direction (slower than the disk, as in seed 000). bench io with one file per \
             client: colocated (client i on host i, local layout; reads short-circuit when \
             the disks are not throttled) against the same clients on a host without data \
             servers, which the host networks hold; then bench balance, whose pairs run on \
             their producers' hosts.",
            format_size(a.throttle),
            format_size(net)
        ),
        output: Some("locality.txt".into()),
        ..Section::default()
    };
    let dir = tempfile::Builder::new()
        .prefix("stripefs-demo-hosts-")
        .tempdir();
    let guard = dir.map_err(anyhow::Error::from).and_then(|d| {
        let g = ClusterGuard::start(
            Some(&d.path().join("cluster")),
            LOCALITY_HOSTS,
            1,
            Some(a.throttle),
            Some(crate::util::HostsNet {
                hosts: LOCALITY_HOSTS,
                host_net_bytes_s: Some(net),
            }),
            &ctx.exe,
        )?;
        Ok((d, g))
    });
    let (_tmp, guard) = match guard {
        Ok(g) => g,
        Err(e) => {
            s.error = Some(format!("cannot start the hosts cluster: {e:#}"));
            return s;
        }
    };
    s.commands.push(format!(
        "stripefs cluster up --dir H --servers {LOCALITY_HOSTS} --hosts {LOCALITY_HOSTS} --throttle {} --host-net {}",
        rate_arg(a.throttle),
        rate_arg(net)
    ));
    let cluster = guard.cluster_file.display().to_string();
    let hosts_dir = guard.dir.display().to_string();
    let io_argv = |json: &str, placement: &[&str]| {
        let mut v: Vec<String> = [
            "--cluster",
            &cluster,
            "--clients",
            &LOCALITY_HOSTS.to_string(),
            "--block",
            &format_size_arg(a.locality_block),
            "--file-per-process",
            "--json",
            &ctx.out(json),
        ]
        .iter()
        .map(|w| w.to_string())
        .collect();
        v.extend(placement.iter().map(|w| w.to_string()));
        v
    };
    let show = |bench: &str, argv: &[String]| {
        let mut words = vec!["stripefs".to_string(), "bench".into(), bench.into()];
        words.extend(argv.iter().cloned());
        shell_words(&words).replace(&hosts_dir, "H")
    };
    let near = io_argv("io-colocated.json", &["--colocate", "--layout", "local"]);
    let far = io_argv(
        "io-remote.json",
        &[
            "--host",
            "remote-client",
            "--layout",
            "spread",
            "--stripe-count",
            "1",
        ],
    );
    let png = ctx.report.join("balance-hosts.png");
    let _ = std::fs::remove_file(&png);
    let bal: Vec<String> = [
        "--cluster",
        &cluster,
        "--sizes",
        "4M",
        "--files",
        "2",
        "--json",
        &ctx.out("balance-hosts.json"),
        "--plot",
        &png.display().to_string(),
    ]
    .iter()
    .map(|w| w.to_string())
    .collect();
    s.commands
        .extend([show("io", &near), show("io", &far), show("balance", &bal)]);
    let out = step(ctx, "locality", || {
        let n = crate::io::run(parse_args(&near)?)?;
        let r = crate::io::run(parse_args(&far)?)?;
        let b = crate::balance::run(parse_args(&bal)?)?;
        Ok(serde_json::json!({"colocated": n, "remote": r, "balance": b}))
    });
    s.secs = out.1;
    match out.0 {
        Err(e) => s.error = Some(e),
        Ok(v) => {
            s.json = Some("io-colocated.json".into());
            if png.exists() {
                s.images.push("balance-hosts.png".into());
            }
            let (n, r) = (&v["colocated"], &v["remote"]);
            for (phase, key) in [("write", "write_mib_s"), ("read", "read_mib_s")] {
                s.rows.push(
                    Row::new(
                        format!("colocated {phase}"),
                        "MiB/s",
                        f(n, key).unwrap_or(f64::NAN),
                    )
                    .vs("ceiling: sum of target rates", f(n, "ceiling_mib_s"))
                    .vs("remote clients, same run", f(r, key)),
                );
            }
            for phase in ["write", "read"] {
                if let Some(x) = n["local_bytes_fraction"][phase].as_f64() {
                    s.rows.push(Row::new(
                        format!("colocated {phase}: bytes on the client's own host"),
                        "%",
                        100.0 * x,
                    ));
                }
            }
            s.rows.extend(balance_rows(&v["balance"]));
        }
    }
    s
}

/// The emulated wide-area link of the remote-access section: seed 004's setting.
const WAN_RTT: &str = "50ms";
const WAN_RATE: &str = "200Mbit";
const WAN_WINDOW: &str = "256K";

fn wan(ctx: &Ctx) -> Section {
    let png = ctx.report.join("wan.png");
    let _ = std::fs::remove_file(&png);
    let argv: Vec<String> = [
        "--rtt",
        WAN_RTT,
        "--rate",
        WAN_RATE,
        "--window",
        WAN_WINDOW,
        "--streams",
        "1,8",
        "--compress",
        "off,auto",
        "--data",
        "text",
        "--size",
        &format_size_arg(ctx.a.wan_size),
        "--no-put",
        "--plot",
        &png.display().to_string(),
        "--json",
        &ctx.out("wan.json"),
    ]
    .iter()
    .map(|w| w.to_string())
    .collect();
    let out = step(ctx, "wan", || {
        crate::remote::run_wan(parse_args(&argv)?, &ctx.exe)
    });
    let mut s = section(
        "wan",
        "wan: a remote client over an emulated wide-area link (seed 004)",
        "A third cluster (2 data servers) behind one emulated link of 50 ms round trip, \
         200 Mbit/s and a 256 KiB TCP window per connection (one connection gets at most \
         window / RTT = 5 MiB/s). A remote client writes and reads back text-like data with \
         1 and 8 connections (streams) per data server, each carrying up to 4 requests at \
         once (pipeline 4, as cluster up --wan's client file says), without compression and \
         with --compress auto.",
        bench_command(ctx, "wan", &argv),
        &out,
    );
    if let Ok(v) = &out.0 {
        s.json = Some("wan.json".into());
        if png.exists() {
            s.images.push("wan.png".into());
        }
        let link = f(v, "link_mib_s");
        let rows = v["rows"].as_array().cloned().unwrap_or_default();
        let rate = |streams: u64, codec: &str, dir: &str| {
            rows.iter()
                .find(|r| {
                    r["streams"].as_u64() == Some(streams)
                        && r["compress"] == codec
                        && r["direction"] == dir
                })
                .and_then(|r| r["mib_s"].as_f64())
        };
        for dir in ["write", "read"] {
            for streams in [1, 8] {
                s.rows.push(
                    Row::new(
                        format!("{streams} stream(s) per server, {dir}"),
                        "MiB/s",
                        rate(streams, "off", dir).unwrap_or(f64::NAN),
                    )
                    .vs("link rate", link),
                );
            }
            s.rows.push(
                Row::new(
                    format!("8 streams, --compress auto, text, {dir}"),
                    "MiB/s",
                    rate(8, "auto", dir).unwrap_or(f64::NAN),
                )
                .vs("the same uncompressed", rate(8, "off", dir))
                .vs("link rate", link),
            );
        }
    }
    s
}

/// `stripefs bench NAME ARGV` as a shell line, the report directory shown as R.
fn bench_command(ctx: &Ctx, name: &str, argv: &[String]) -> String {
    let words: Vec<String> = ["stripefs", "bench", name]
        .iter()
        .map(|w| w.to_string())
        .chain(argv.iter().cloned())
        .collect();
    shell_words(&words).replace(&ctx.report.display().to_string(), "R")
}

fn tls(ctx: &Ctx) -> Section {
    let argv: Vec<String> = [
        "--servers",
        "2",
        "--rounds",
        "3",
        "--size",
        &format_size_arg(ctx.a.tls_size),
        "--json",
        &ctx.out("tls.json"),
    ]
    .iter()
    .map(|w| w.to_string())
    .collect();
    let out = step(ctx, "tls", || {
        crate::remote::run_tls(parse_args(&argv)?, &ctx.exe)
    });
    let mut s = section(
        "tls",
        "tls: encrypted connections against plain ones",
        "A fourth cluster (2 data servers, `cluster up --tls`: a cluster CA and server \
         certificate; servers accept TLS and plain clients). One client on another host \
         (every byte over a connection) writes and reads back the file with TLS and \
         without, alternating, three rounds; medians. Plain reads go by sendfile, TLS ones \
         through the cipher.",
        bench_command(ctx, "tls", &argv),
        &out,
    );
    if let Ok(v) = &out.0 {
        s.json = Some("tls.json".into());
        let rows = v["rows"].as_array().cloned().unwrap_or_default();
        let rate = |tls: bool, dir: &str| {
            rows.iter()
                .find(|r| r["tls"] == tls && r["direction"] == dir)
                .and_then(|r| r["mib_s"].as_f64())
        };
        for dir in ["write", "read"] {
            s.rows.push(
                Row::new(
                    format!("TLS, {dir}"),
                    "MiB/s",
                    rate(true, dir).unwrap_or(f64::NAN),
                )
                .vs("plain, same run", rate(false, dir)),
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_show_sizes_and_rates_the_parsers_take_back() {
        for b in [25u64 << 20, 512 << 10, 1000] {
            assert_eq!(parse_rate(&rate_arg(b)), Ok(b));
        }
        for b in [64u64 << 20, 256 << 10, 4097] {
            assert_eq!(parse_size(&format_size_arg(b)), Ok(b));
        }
    }

    #[test]
    fn balance_rows_compare_internode_with_intranode() {
        let mut rows = vec![];
        for i in 0..=2u64 {
            rows.push(serde_json::json!({"intranode": i, "internode": 2 - i,
                "size_bytes": 1u64 << 20, "mib_s": 10.0 * (i + 1) as f64,
                "ceiling_mib_s": 100.0}));
        }
        let out = balance_rows(&serde_json::json!({ "rows": rows }));
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].value, 30.0); // 2 intranode pairs
        assert_eq!(out[1].value, 10.0); // 2 internode pairs
        assert_eq!(out[1].refs.len(), 2);
        assert_eq!(out[1].refs[1].value, 30.0);
    }
}
