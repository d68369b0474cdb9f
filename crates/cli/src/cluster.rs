//! `stripefs cluster up|down|status`.

use anyhow::{anyhow, Result};
use clap::{Args, Subcommand};
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;
use stripefs_rpc::units::{format_size, parse_rate, parse_size};
use stripefs_rpc::{ClusterConfig, Defaults};
use stripefs_wire::{Cred, Request, Response};

#[derive(Subcommand)]
pub enum ClusterCmd {
    /// Start a metadata server and N data servers here in the background (or restart the
    /// stopped cluster in DIR on its existing data), and wait until all serve.
    Up(UpArgs),
    /// Stop exactly the server processes of the cluster in DIR.
    Down {
        #[arg(long)]
        dir: PathBuf,
    },
    /// List the servers with their health and counters.
    Status(StatusArgs),
}

#[derive(Args)]
pub struct UpArgs {
    /// Directory for configuration, data, logs and pid files.
    #[arg(long)]
    dir: PathBuf,
    /// Number of data servers [default: 4].
    #[arg(long)]
    servers: Option<u32>,
    /// Storage targets (directories, one per emulated disk) per data server [default: 1].
    #[arg(long)]
    targets: Option<u32>,
    /// Emulate a commodity disk: limit each target to RATE (e.g. 25MiB) for reads and writes.
    #[arg(long, value_parser = parse_rate)]
    throttle: Option<u64>,
    /// Default stripe size of new files.
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    stripe_size: u64,
    /// Default stripe count of new files (0 = all data servers).
    #[arg(long, default_value_t = 0)]
    stripe_count: u32,
    /// Default inline threshold: new files keep up to this many bytes on the metadata
    /// server, with their inode, instead of on data servers (0 = never; at most 64K).
    #[arg(long, default_value = "4K", value_parser = parse_size)]
    inline_bytes: u64,
    /// Address the servers listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Data servers copy read replies through memory instead of sending them from their
    /// files with sendfile (zero-copy, the default); for comparison.
    #[arg(long)]
    no_zero_copy: bool,
    /// Make a cluster CA and a server certificate (DIR/tls/) and write them into
    /// cluster.toml (tls_ca, tls_cert, tls_key): servers accept TLS, and clients using
    /// the file connect with TLS, checking the servers' certificate.
    #[arg(long)]
    tls: bool,
    /// As --tls, and every server refuses plain connections (require_tls = true).
    #[arg(long)]
    require_tls: bool,
    /// Emulate K hosts: data server i runs as host `host{i % K}`, the metadata server as
    /// host0 (written into cluster.toml); clients pick theirs with --host.
    #[arg(long)]
    hosts: Option<u32>,
    /// Emulate each host's network interface (needs --hosts): the bytes a host's data
    /// servers exchange with clients on other hosts are limited to RATE per direction
    /// (e.g. 40MiB), shared equally by the host's data servers; same-host bytes are free.
    #[arg(long, value_parser = parse_rate)]
    host_net: Option<u64>,
    /// Put an emulated wide-area link in front of every server (`stripefs wan-emu`, one
    /// relay sharing RATE among all connections): RTT,RATE,WINDOW, e.g. 50ms,200Mbit,256K.
    /// Remote clients use DIR/client-wan.toml, whose addresses go through it.
    #[arg(long, value_parser = parse_wan)]
    wan: Option<stripefs_launch::WanLink>,
}

fn parse_wan(text: &str) -> Result<stripefs_launch::WanLink, String> {
    let parts: Vec<&str> = text.split(',').map(str::trim).collect();
    let [rtt, rate, window] = parts[..] else {
        return Err(format!(
            "--wan {text:?} is not RTT,RATE,WINDOW (e.g. 50ms,200Mbit,256K)"
        ));
    };
    let window = parse_size(window)?;
    if window == 0 {
        return Err("the --wan window must be above zero".into());
    }
    Ok(stripefs_launch::WanLink {
        rtt_us: crate::wan::parse_duration(rtt)?.as_micros() as u64,
        rate_bytes_s: crate::wan::parse_link_rate(rate)?,
        window_bytes: window,
    })
}

#[derive(Args)]
pub struct StatusArgs {
    /// Cluster description file.
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    cluster: PathBuf,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: ClusterCmd) -> Result<()> {
    match cmd {
        ClusterCmd::Up(a) => up(a),
        ClusterCmd::Down { dir } => down(dir),
        ClusterCmd::Status(a) => status(a),
    }
}

fn up(a: UpArgs) -> Result<()> {
    let stripe_size = stripefs_wire::stripe_size_of(a.stripe_size)
        .map_err(|why| anyhow!("--stripe-size: {why}"))?;
    if a.inline_bytes > stripefs_wire::MAX_INLINE_BYTES as u64 {
        return Err(anyhow!(
            "--inline-bytes {} exceeds {}",
            a.inline_bytes,
            stripefs_wire::MAX_INLINE_BYTES
        ));
    }
    let servers = a.servers.unwrap_or(4);
    if a.stripe_count > servers {
        return Err(anyhow!(
            "--stripe-count {} exceeds the number of data servers ({servers})",
            a.stripe_count
        ));
    }
    let opts = stripefs_launch::UpOptions {
        dir: a.dir,
        servers,
        targets: a.targets.unwrap_or(1),
        throttle_bytes_s: a.throttle,
        hosts: a.hosts,
        host_net_bytes_s: a.host_net,
        defaults: Defaults {
            stripe_size_bytes: stripe_size,
            stripe_count: a.stripe_count,
            inline_bytes: a.inline_bytes as u32,
        },
        host: a.host,
        exe: crate::exe(),
        no_zero_copy: a.no_zero_copy,
        wan: a.wan,
        tls: a.tls,
        require_tls: a.require_tls,
    };
    let up = stripefs_launch::up(&opts)?;
    let differs = |asked: Option<u32>, has: u32| asked.is_some_and(|a| a != has);
    let hosts_differ = (a.hosts.is_some() && a.hosts != up.hosts)
        || (a.host_net.is_some() && a.host_net != up.host_net_bytes_s);
    if up.restarted
        && (differs(a.servers, up.data_servers) || differs(a.targets, up.targets) || hosts_differ)
    {
        eprintln!(
            "note: {} holds a cluster of {} data servers x {} targets{}; restarted it as it was, \
             with its files (for a cluster of the shape asked for, give another --dir, or \
             `cluster down` this one and remove its directory first)",
            up.cluster_file
                .parent()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            up.data_servers,
            up.targets,
            match (up.hosts, up.host_net_bytes_s) {
                (Some(k), Some(r)) => format!(" on {k} hosts, network {}/s", format_size(r)),
                (Some(k), None) => format!(" on {k} hosts"),
                _ => String::new(),
            }
        );
    }
    if up.restarted && (a.tls || a.require_tls) {
        // TLS is part of the cluster file, made with the cluster; a restart keeps it.
        let has = stripefs_rpc::ClusterConfig::load(&up.cluster_file)
            .map(|c| (c.tls.cert.is_some(), c.tls.require))
            .unwrap_or((false, false));
        if !has.0 || (a.require_tls && !has.1) {
            eprintln!(
                "note: {} was made {}; restarted it as it was (TLS is set when a cluster \
                 is made: `cluster down` and a new directory, or edit tls_* and require_tls \
                 in its cluster.toml)",
                up.cluster_file.display(),
                match has {
                    (true, true) => "with TLS required",
                    (true, false) => "with TLS accepted, not required",
                    _ => "without TLS",
                }
            );
        }
    }
    if a.no_zero_copy && up.already_running > 0 {
        eprintln!(
            "note: {} servers were already running and keep their read path; \
             `cluster down` first for --no-zero-copy to apply to them",
            up.already_running
        );
    }
    let verb = if up.restarted { "restarted" } else { "started" };
    let data = up.data_servers;
    println!(
        "{verb} stripefs cluster: 1 metadata server, {data} data servers{}",
        if up.already_running > 0 {
            format!(" ({} were already running)", up.already_running)
        } else {
            String::new()
        }
    );
    println!("  cluster file: {}", up.cluster_file.display());
    if let Some(k) = up.hosts {
        println!(
            "  hosts:        {k} emulated (host0..host{}), network {}",
            k - 1,
            up.host_net_bytes_s
                .map(|r| format!("{}/s per host and direction", format_size(r)))
                .unwrap_or_else(|| "not limited".into())
        );
    }
    if let Some(w) = up.wan {
        let file = up
            .cluster_file
            .with_file_name(stripefs_launch::WAN_CLIENT_FILE);
        println!(
            "  wide-area:    RTT {} ms, {}/s per direction shared, window {}; remote clients use {}",
            w.rtt_us as f64 / 1000.0,
            format_size(w.rate_bytes_s),
            format_size(w.window_bytes),
            file.display()
        );
    }
    if let Some(first) = up.servers.first() {
        if let Some(logs) = first.log.parent() {
            println!("  logs:         {}/{{meta,data0..}}.log", logs.display());
        }
    }
    println!(
        "use it with:  export STRIPEFS_CLUSTER={}",
        up.cluster_file.display()
    );
    Ok(())
}

fn down(dir: PathBuf) -> Result<()> {
    let d = stripefs_launch::down(&dir)?;
    if !d.stopped.is_empty() {
        println!("stopped: {}", d.stopped.join(" "));
    }
    if !d.killed.is_empty() {
        println!(
            "killed after {} s: {}",
            stripefs_launch::STOP_TIMEOUT.as_secs(),
            d.killed.join(" ")
        );
    }
    if !d.not_running.is_empty() {
        println!("not running: {}", d.not_running.join(" "));
    }
    Ok(())
}

fn status(a: StatusArgs) -> Result<()> {
    let cluster = ClusterConfig::load(&a.cluster).map_err(|e| anyhow!(e))?;
    let timeout = Duration::from_millis(cluster.timeout_ms.min(5000));
    let mut servers = vec![meta_status(&cluster, timeout)];
    servers[0]["host"] = json!(cluster.meta_host);
    for d in &cluster.data {
        let mut v = data_status(&cluster, &d.addr, timeout);
        v["host"] = json!(d.host);
        servers.push(v);
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "servers": servers }))?
        );
        return Ok(());
    }
    println!(
        "{:<5} {:<22} {:<10} {:<8} {:>12} {:>10} {:>12}",
        "ROLE", "ADDRESS", "HOST", "HEALTH", "USED", "REQUESTS", "ERRORS"
    );
    for s in &servers {
        let used = s["bytes_used"]
            .as_u64()
            .map(format_size)
            .unwrap_or("-".into());
        println!(
            "{:<5} {:<22} {:<10} {:<8} {:>12} {:>10} {:>12}",
            s["role"].as_str().unwrap_or("?"),
            s["addr"].as_str().unwrap_or("?"),
            s["host"].as_str().unwrap_or("-"),
            if s["healthy"].as_bool() == Some(true) {
                "ok"
            } else {
                "DOWN"
            },
            used,
            s["requests"]
                .as_u64()
                .map(|n| n.to_string())
                .unwrap_or("-".into()),
            s["errors"]
                .as_u64()
                .map(|n| n.to_string())
                .unwrap_or("-".into()),
        );
        if let (Some(sw), Some(sr), Some(ow), Some(or)) = (
            s["same_host_bytes_written"].as_u64(),
            s["same_host_bytes_read"].as_u64(),
            s["other_host_bytes_written"].as_u64(),
            s["other_host_bytes_read"].as_u64(),
        ) {
            println!(
                "        bytes written/read: same host {} / {}, other hosts {} / {}; short-circuit opens {}",
                format_size(sw),
                format_size(sr),
                format_size(ow),
                format_size(or),
                s["short_circuit_opens"].as_u64().unwrap_or(0)
            );
        }
        if let Some(targets) = s["targets"].as_array() {
            for t in targets {
                println!(
                    "        target {:<40} {:>12}",
                    t["path"].as_str().unwrap_or("?"),
                    t["bytes_used"]
                        .as_u64()
                        .map(format_size)
                        .unwrap_or_default()
                );
            }
        }
        if let Some(scrubbed) = s["scrubbed_bytes"].as_u64() {
            println!(
                "        scrub: {} checked, {} damaged blocks, {} passes, rate {}/s",
                format_size(scrubbed),
                s["damaged_blocks"].as_u64().unwrap_or(0),
                s["scrub_passes"].as_u64().unwrap_or(0),
                format_size(s["scrub_rate_bytes_s"].as_u64().unwrap_or(0))
            );
        }
        if let Some(e) = s["error"].as_str() {
            println!("        {e}");
        }
    }
    Ok(())
}

fn call(cluster: &ClusterConfig, addr: &str, timeout: Duration, req: Request) -> Result<Response> {
    let mut c = cluster.connect(addr, timeout)?;
    Ok(c.call(&Cred::root(), req, &[], &mut [])?.0)
}

fn meta_status(cluster: &ClusterConfig, timeout: Duration) -> serde_json::Value {
    let addr = &cluster.meta_addr;
    match call(cluster, addr, timeout, Request::MetaStatus {}) {
        Ok(Response::MetaStatus {
            inodes,
            files,
            dirs,
            open_files,
            db_bytes,
            counters,
        }) => json!({
            "role": "meta", "addr": addr, "healthy": true, "bytes_used": db_bytes,
            "inodes": inodes, "files": files, "dirs": dirs, "open_files": open_files,
            "requests": counters.requests, "errors": counters.errors,
        }),
        Ok(other) => unhealthy("meta", addr, format!("unexpected answer {other:?}")),
        Err(e) => unhealthy("meta", addr, format!("{e:#}")),
    }
}

fn data_status(cluster: &ClusterConfig, addr: &str, timeout: Duration) -> serde_json::Value {
    match call(cluster, addr, timeout, Request::DataStatus {}) {
        Ok(Response::DataStatus {
            server_id,
            targets,
            counters,
        }) => {
            let used: u64 = targets.iter().map(|t| t.bytes_used).sum();
            let t: Vec<_> = targets
                .iter()
                .map(|t| {
                    json!({
                        "path": t.path, "bytes_used": t.bytes_used, "bytes_total": t.bytes_total,
                        "bytes_free": t.bytes_free, "throttle_bytes_s": t.throttle_bytes_s,
                    })
                })
                .collect();
            let mut v = json!({
                "role": "data", "id": server_id.0, "addr": addr, "healthy": true,
                "bytes_used": used, "targets": t,
                "requests": counters.requests, "errors": counters.errors,
                "bytes_read": counters.bytes_read, "bytes_written": counters.bytes_written,
                "write_requests": counters.write_requests,
            });
            // Asked after DataStatus and not counted as a request by the server, so that
            // the request counters above move by exactly one per status.
            if let Ok(Response::ScrubStatus {
                scrubbed_bytes,
                damaged_blocks,
                passes,
                rate_bytes_s,
            }) = call(cluster, addr, timeout, Request::ScrubStatus {})
            {
                v["scrubbed_bytes"] = json!(scrubbed_bytes);
                v["damaged_blocks"] = json!(damaged_blocks);
                v["scrub_passes"] = json!(passes);
                v["scrub_rate_bytes_s"] = json!(rate_bytes_s);
            }
            // Also not counted; an older server refuses it and shows no locality.
            if let Ok(Response::LocalityStatus {
                same_host_received,
                same_host_sent,
                other_host_received,
                other_host_sent,
                short_circuit_opens,
                ..
            }) = call(cluster, addr, timeout, Request::LocalityStatus {})
            {
                v["same_host_bytes_written"] = json!(same_host_received);
                v["same_host_bytes_read"] = json!(same_host_sent);
                v["other_host_bytes_written"] = json!(other_host_received);
                v["other_host_bytes_read"] = json!(other_host_sent);
                v["short_circuit_opens"] = json!(short_circuit_opens);
            }
            v
        }
        Ok(other) => unhealthy("data", addr, format!("unexpected answer {other:?}")),
        Err(e) => unhealthy("data", addr, format!("{e:#}")),
    }
}

fn unhealthy(role: &str, addr: &str, error: String) -> serde_json::Value {
    json!({ "role": role, "addr": addr, "healthy": false, "bytes_used": null, "error": error })
}
