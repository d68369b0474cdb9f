//! File commands: put, get, ls, stat, mkdir, rm, mv, setstripe, getstripe.

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;
use stripefs_client::{Client, OpenOptions};
use stripefs_rpc::units::{format_size, parse_size};
use stripefs_rpc::ClusterConfig;
use stripefs_wire::{Attr, ErrorCode, FileType, LayoutHint, Policy};

/// Bytes moved per call by put and get; several stripes, so that all servers work at once.
const COPY_CHUNK_BYTES: usize = 8 << 20;

#[derive(Args)]
pub struct ClusterArg {
    /// Cluster description file (default: $STRIPEFS_CLUSTER).
    #[arg(long, env = "STRIPEFS_CLUSTER", global = true)]
    cluster: Option<PathBuf>,
    /// This client's host id (default: `host` in the cluster file, else the hostname);
    /// data servers on other hosts count its bytes against their host network, and the
    /// local layout places new files on this host's data servers.
    #[arg(long, env = "STRIPEFS_HOST", global = true)]
    host: Option<String>,
    /// Connections (streams) to each data server (default: `streams` in the cluster
    /// file, else 4); more keep more requests in flight on a long link.
    #[arg(long, env = "STRIPEFS_STREAMS", global = true)]
    streams: Option<u32>,
    /// Data requests kept in flight on each data-server connection (default:
    /// `pipeline` in the cluster file, else 1); more hide a long link's round trip.
    /// Plain connections only: with TLS each connection carries one at a time.
    #[arg(long, env = "STRIPEFS_PIPELINE", global = true)]
    pipeline: Option<u32>,
    /// Compression of bulk data to and from data servers: off, lz4, zstd, zstd:LEVEL
    /// (1-19) or auto (zstd where a sample of each chunk shrinks). Default: `compress` in
    /// the cluster file, else off. Checksums still cover the uncompressed bytes.
    #[arg(long, env = "STRIPEFS_COMPRESS", global = true, value_parser = parse_codec)]
    compress: Option<stripefs_rpc::compress::Codec>,
    /// Authenticate with this scoped token (`stripefs token create`) instead of the
    /// cluster secret, even if the cluster file holds the secret.
    #[arg(long, env = "STRIPEFS_TOKEN", global = true, hide_env_values = true)]
    token: Option<String>,
}

fn parse_codec(text: &str) -> Result<stripefs_rpc::compress::Codec, String> {
    text.parse()
}

impl ClusterArg {
    pub(crate) fn connect(&self) -> Result<Client> {
        let path = self.cluster.as_ref().ok_or_else(|| {
            anyhow!("no cluster given: pass --cluster FILE or set STRIPEFS_CLUSTER (cluster up prints it)")
        })?;
        let mut cfg = ClusterConfig::load(path).map_err(|e| anyhow!(e))?;
        cfg.set_client_host(self.host.as_deref())
            .map_err(|e| anyhow!(e))?;
        if let Some(n) = self.streams {
            stripefs_rpc::config::check_streams(n).map_err(|e| anyhow!(e))?;
            cfg.streams = Some(n);
        }
        if let Some(n) = self.pipeline {
            stripefs_rpc::config::check_pipeline(n).map_err(|e| anyhow!(e))?;
            cfg.pipeline = Some(n);
        }
        if let Some(c) = self.compress {
            cfg.compress = Some(c);
        }
        if let Some(t) = &self.token {
            stripefs_rpc::token::Token::parse(t).map_err(|e| anyhow!("--token: {e}"))?;
            cfg.token = Some(t.clone());
        }
        Ok(Client::connect(&cfg)?)
    }
}

#[derive(Args)]
pub struct PathArgs {
    /// Path in stripefs (absolute).
    path: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    c: ClusterArg,
}

#[derive(Args)]
pub struct PutArgs {
    /// Local file to copy.
    local: PathBuf,
    /// Destination path in stripefs (a directory keeps the local name).
    path: String,
    /// Stripe size of the new file (e.g. 1M).
    #[arg(long, value_parser = parse_size)]
    stripe_size: Option<u64>,
    /// Stripe count of the new file (0 = all data servers).
    #[arg(long)]
    stripe_count: Option<u32>,
    #[command(flatten)]
    c: ClusterArg,
}

#[derive(Args)]
pub struct GetArgs {
    /// Path in stripefs.
    path: String,
    /// Local destination file, or - for standard output.
    local: PathBuf,
    #[command(flatten)]
    c: ClusterArg,
}

#[derive(Args)]
pub struct LsArgs {
    /// Directory (default /).
    #[arg(default_value = "/")]
    path: String,
    /// Long listing: type, mode, links, owner, size, name.
    #[arg(short, long)]
    long: bool,
    #[command(flatten)]
    c: ClusterArg,
}

#[derive(Args)]
pub struct MkdirArgs {
    path: String,
    /// Create missing parents; no error if it exists.
    #[arg(short, long)]
    parents: bool,
    /// Permission bits, octal.
    #[arg(long, default_value = "755")]
    mode: String,
    #[command(flatten)]
    c: ClusterArg,
}

#[derive(Args)]
pub struct RmArgs {
    #[arg(required = true)]
    paths: Vec<String>,
    /// Remove directories and their contents.
    #[arg(short, long)]
    recursive: bool,
    #[command(flatten)]
    c: ClusterArg,
}

#[derive(Args)]
pub struct MvArgs {
    from: String,
    to: String,
    #[command(flatten)]
    c: ClusterArg,
}

#[derive(Args)]
pub struct SetstripeArgs {
    path: String,
    /// Stripe size: a multiple of 4K up to 16M, or of 1M up to 1G (e.g. 64K, 1M, 256M).
    #[arg(long, value_parser = parse_size)]
    size: Option<u64>,
    /// Stripe count (0 = all data servers).
    #[arg(long)]
    count: Option<u32>,
    /// The data servers of the stripes, in this order (ids as in `cluster status`, e.g.
    /// 2,0,1); the stripe count is their number.
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    servers: Option<Vec<u32>>,
    /// Placement policy: `local` puts a new file on the data servers of the creating
    /// client's host first (stripe count 1 unless --count), `spread` over all servers
    /// from a rotating start (the default).
    #[arg(long, value_parser = parse_policy)]
    layout: Option<Policy>,
    /// Inline threshold of new files in a directory: files up to this size keep their
    /// bytes on the metadata server with their inode (0 = never; at most 64K).
    #[arg(long, value_parser = parse_size)]
    inline_bytes: Option<u64>,
    #[command(flatten)]
    c: ClusterArg,
}

fn parse_policy(s: &str) -> Result<Policy, String> {
    Policy::parse(s).ok_or_else(|| format!("unknown layout {s:?}: use local or spread"))
}

/// Checks `--servers` against `--count`, itself and the cluster's `n` data servers.
fn check_servers(list: &[u32], count: Option<u32>, policy: Option<Policy>, n: usize) -> Result<()> {
    for (i, s) in list.iter().enumerate() {
        if *s as usize >= n {
            bail!(
                "--servers: data server {s} does not exist: the cluster has {n} data servers (ids 0 to {})",
                n.saturating_sub(1)
            );
        }
        if list[..i].contains(s) {
            bail!("--servers: data server {s} is named twice");
        }
    }
    if let Some(c) = count {
        if c as usize != list.len() {
            bail!(
                "--count {c} but --servers names {} servers: give one or make them agree",
                list.len()
            );
        }
    }
    if policy == Some(Policy::Local) {
        bail!("--servers fixes the servers: it cannot be combined with --layout local");
    }
    Ok(())
}

fn hint(size: Option<u64>, count: Option<u32>) -> Result<LayoutHint> {
    let stripe_size_bytes = match size {
        Some(s) => Some(stripefs_wire::stripe_size_of(s).map_err(|why| anyhow!(why))?),
        None => None,
    };
    Ok(LayoutHint {
        stripe_size_bytes,
        stripe_count: count,
        ..LayoutHint::default()
    })
}

fn bar(total: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template("[{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
            .expect("static template")
            .progress_chars("=> "),
    );
    pb
}

fn join(dir: &str, name: &str) -> String {
    format!("{}/{name}", dir.trim_end_matches('/'))
}

pub fn put(a: PutArgs) -> Result<()> {
    let client = a.c.connect()?;
    let mut src = std::fs::File::open(&a.local)
        .with_context(|| format!("cannot open {}", a.local.display()))?;
    let len = src.metadata()?.len();
    let mut dest = a.path.clone();
    if dest.ends_with('/') || matches!(client.stat(&dest), Ok(attr) if attr.ftype == FileType::Dir)
    {
        let name = a
            .local
            .file_name()
            .ok_or_else(|| anyhow!("{} has no file name", a.local.display()))?;
        dest = join(&dest, &name.to_string_lossy());
    }
    let opts = OpenOptions {
        layout: hint(a.stripe_size, a.stripe_count)?,
        ..OpenOptions::create_truncate()
    };
    let file = client
        .open(&dest, &opts)
        .with_context(|| format!("cannot create {dest}"))?;
    let pb = bar(len);
    let start = Instant::now();
    let mut buf = vec![0u8; COPY_CHUNK_BYTES];
    let mut off = 0u64;
    loop {
        let n = read_full(&mut src, &mut buf)?;
        if n == 0 {
            break;
        }
        file.write_at(off, &buf[..n])
            .with_context(|| format!("writing {dest} at offset {off}"))?;
        off += n as u64;
        pb.set_position(off);
    }
    file.fsync().with_context(|| format!("syncing {dest}"))?;
    file.close().with_context(|| format!("closing {dest}"))?;
    pb.finish_and_clear();
    report("put", &dest, off, start);
    Ok(())
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(got)
}

fn report(verb: &str, path: &str, bytes: u64, start: Instant) {
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "{verb} {path}: {} in {secs:.2} s ({:.0} MiB/s)",
        format_size(bytes),
        bytes as f64 / (1u64 << 20) as f64 / secs.max(1e-9)
    );
}

pub fn get(a: GetArgs) -> Result<()> {
    let client = a.c.connect()?;
    let file = client
        .open(&a.path, &OpenOptions::read_only())
        .with_context(|| format!("cannot open {}", a.path))?;
    let len = file.size();
    let to_stdout = a.local.as_os_str() == "-";
    let (mut out, tmp): (Box<dyn Write>, Option<(PathBuf, PathBuf)>) = if to_stdout {
        (Box::new(std::io::stdout().lock()), None)
    } else {
        match std::fs::metadata(&a.local) {
            Ok(m) if m.is_dir() => bail!(
                "{} is a directory; name the file to write",
                a.local.display()
            ),
            // A device, FIFO or socket (say /dev/null) is written to, never replaced.
            Ok(m) if !m.is_file() => {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&a.local)
                    .with_context(|| format!("cannot open {}", a.local.display()))?;
                (
                    Box::new(std::io::BufWriter::with_capacity(1 << 20, f)),
                    None,
                )
            }
            found => {
                // Written beside the destination (the file a symlink points to) and
                // renamed into place when complete, so that an error never leaves a
                // half-written file under the requested name.
                let dest = match found {
                    Ok(_) => std::fs::canonicalize(&a.local)
                        .with_context(|| format!("cannot resolve {}", a.local.display()))?,
                    Err(_) => a.local.clone(),
                };
                let tmp = temp_beside(&dest);
                let f = std::fs::File::create(&tmp)
                    .with_context(|| format!("cannot create {}", tmp.display()))?;
                (
                    Box::new(std::io::BufWriter::with_capacity(1 << 20, f)),
                    Some((tmp, dest)),
                )
            }
        }
    };
    let result = copy_out(&file, len, &mut out, &a.path);
    let result = result.and_then(|n| {
        out.flush()?;
        drop(out);
        Ok(n)
    });
    let _ = file.close();
    match (result, tmp) {
        (Ok(_), Some((tmp, dest))) => {
            std::fs::rename(&tmp, &dest)
                .with_context(|| format!("cannot move {} to {}", tmp.display(), dest.display()))?;
            Ok(())
        }
        (Ok(_), None) => Ok(()),
        (Err(e), tmp) => {
            if let Some((t, _)) = tmp {
                let _ = std::fs::remove_file(t);
            }
            Err(e)
        }
    }
}

fn temp_beside(p: &Path) -> PathBuf {
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    p.with_file_name(format!(".{name}.stripefs-partial-{}", std::process::id()))
}

fn copy_out(
    file: &stripefs_client::File,
    len: u64,
    out: &mut dyn Write,
    path: &str,
) -> Result<u64> {
    let pb = bar(len);
    let start = Instant::now();
    let mut buf = vec![0u8; COPY_CHUNK_BYTES];
    let mut off = 0u64;
    loop {
        let n = file
            .read_at(off, &mut buf)
            .with_context(|| format!("reading {path} at offset {off}"))?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])?;
        off += n as u64;
        pb.set_position(off);
    }
    pb.finish_and_clear();
    if off != len {
        bail!("{path}: read {off} bytes but the file is {len} bytes long");
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "get {path}: {} in {secs:.2} s ({:.0} MiB/s)",
        format_size(off),
        off as f64 / (1u64 << 20) as f64 / secs.max(1e-9)
    );
    Ok(off)
}

fn type_char(t: FileType) -> char {
    match t {
        FileType::Dir => 'd',
        FileType::File => '-',
        FileType::Symlink => 'l',
        FileType::Fifo => 'p',
        FileType::Socket => 's',
        FileType::BlockDev => 'b',
        FileType::CharDev => 'c',
    }
}

fn mode_string(attr: &Attr) -> String {
    let mut s = String::new();
    s.push(type_char(attr.ftype));
    for shift in [6, 3, 0] {
        let bits = (attr.mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    s
}

pub fn ls(a: LsArgs) -> Result<()> {
    let client = a.c.connect()?;
    let attr = client
        .stat(&a.path)
        .with_context(|| format!("cannot access {}", a.path))?;
    if attr.ftype != FileType::Dir {
        println!("{}", a.path);
        return Ok(());
    }
    let entries = client
        .readdir(&a.path)
        .with_context(|| format!("cannot list {}", a.path))?;
    let mut out = std::io::stdout().lock();
    for e in entries {
        if a.long {
            let p = join(&a.path, &e.name);
            match client.lstat(&p) {
                Ok(at) => writeln!(
                    out,
                    "{} {:>3} {:>5} {:>5} {:>12} {}",
                    mode_string(&at),
                    at.nlink,
                    at.uid,
                    at.gid,
                    at.size,
                    e.name
                )?,
                Err(err) => writeln!(out, "?????????? {} ({err})", e.name)?,
            }
        } else {
            writeln!(out, "{}", e.name)?;
        }
    }
    Ok(())
}

fn attr_json(a: &Attr) -> serde_json::Value {
    json!({
        "ino": a.ino.0,
        "type": format!("{:?}", a.ftype).to_lowercase(),
        "mode": format!("{:o}", a.mode),
        "nlink": a.nlink, "uid": a.uid, "gid": a.gid, "size": a.size,
        "atime_ns": a.atime_ns, "mtime_ns": a.mtime_ns, "ctime_ns": a.ctime_ns,
        "stripe_size": a.layout.as_ref().map(|l| l.stripe_size_bytes),
        "stripe_count": a.layout.as_ref().map(|l| l.servers.len()),
        "servers": a.layout.as_ref().map(|l| l.servers.iter().map(|s| s.0).collect::<Vec<_>>()),
        "device": a.ftype.is_device().then(|| {
            let (major, minor) = stripefs_client::split_rdev(a.rdev);
            json!({"major": major, "minor": minor})
        }),
    })
}

pub fn stat(a: PathArgs) -> Result<()> {
    let client = a.c.connect()?;
    let at = client
        .lstat(&a.path)
        .with_context(|| format!("cannot stat {}", a.path))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&attr_json(&at))?);
        return Ok(());
    }
    println!("  path: {}", a.path);
    println!(
        "  type: {:?}   inode: {}   links: {}",
        at.ftype, at.ino.0, at.nlink
    );
    println!("  size: {} ({} bytes)", format_size(at.size), at.size);
    if at.ftype.is_device() {
        let (major, minor) = stripefs_client::split_rdev(at.rdev);
        println!("  device: {major},{minor}");
    }
    println!(
        "  mode: {:04o} ({})   uid: {}   gid: {}",
        at.mode,
        mode_string(&at),
        at.uid,
        at.gid
    );
    println!("  atime: {}", fmt_time(at.atime_ns));
    println!("  mtime: {}", fmt_time(at.mtime_ns));
    println!("  ctime: {}", fmt_time(at.ctime_ns));
    if let Some(l) = &at.layout {
        println!(
            "  stripe: {} x {}",
            format_size(l.stripe_size_bytes as u64),
            l.servers.len()
        );
    }
    Ok(())
}

/// An inode time (nanoseconds since the Unix epoch) as ISO 8601 in UTC with all nine
/// digits of the fraction, e.g. `2026-11-23T13:45:01.123456789Z`.
fn fmt_time(ns: i64) -> String {
    const NS_PER_S: i64 = 1_000_000_000;
    const S_PER_DAY: i64 = 86_400;
    let (secs, frac) = (ns.div_euclid(NS_PER_S), ns.rem_euclid(NS_PER_S));
    let (days, sod) = (secs.div_euclid(S_PER_DAY), secs.rem_euclid(S_PER_DAY));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{frac:09}Z",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}

/// The proleptic Gregorian (year, month, day) of a day count from 1970-01-01, by Howard
/// Hinnant's `civil_from_days`: eras of 400 years (146,097 days) starting on March 1, so
/// that the leap day ends a year.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    assert!((1..=12).contains(&m) && (1..=31).contains(&d), "{days}");
    (y, m, d)
}

pub fn mkdir(a: MkdirArgs) -> Result<()> {
    let client = a.c.connect()?;
    let mode =
        u32::from_str_radix(&a.mode, 8).map_err(|_| anyhow!("--mode {} is not octal", a.mode))?;
    if !a.parents {
        client
            .mkdir(&a.path, mode)
            .with_context(|| format!("cannot create directory {}", a.path))?;
        return Ok(());
    }
    let mut cur = String::new();
    for comp in a.path.split('/').filter(|c| !c.is_empty()) {
        cur = join(&cur, comp);
        match client.mkdir(&cur, mode) {
            Ok(_) => {}
            Err(e) if e.code == ErrorCode::Exists => {}
            Err(e) => return Err(e).with_context(|| format!("cannot create directory {cur}")),
        }
    }
    Ok(())
}

pub fn rm(a: RmArgs) -> Result<()> {
    let client = a.c.connect()?;
    for p in &a.paths {
        let at = client
            .lstat(p)
            .with_context(|| format!("cannot remove {p}"))?;
        if at.ftype == FileType::Dir {
            if !a.recursive {
                bail!("cannot remove {p}: is a directory (use -r)");
            }
            remove_tree(&client, p)?;
        } else {
            client
                .unlink(p)
                .with_context(|| format!("cannot remove {p}"))?;
        }
    }
    Ok(())
}

fn remove_tree(client: &Client, dir: &str) -> Result<()> {
    for e in client
        .readdir(dir)
        .with_context(|| format!("cannot list {dir}"))?
    {
        let p = join(dir, &e.name);
        if e.ftype == FileType::Dir {
            remove_tree(client, &p)?;
        } else {
            client
                .unlink(&p)
                .with_context(|| format!("cannot remove {p}"))?;
        }
    }
    client
        .rmdir(dir)
        .with_context(|| format!("cannot remove directory {dir}"))?;
    Ok(())
}

pub fn mv(a: MvArgs) -> Result<()> {
    let client = a.c.connect()?;
    let mut to = a.to.clone();
    if matches!(client.stat(&to), Ok(at) if at.ftype == FileType::Dir) {
        let name = a
            .from
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or("");
        to = join(&to, name);
    }
    client
        .rename(&a.from, &to)
        .with_context(|| format!("cannot move {} to {to}", a.from))?;
    Ok(())
}

pub fn setstripe(a: SetstripeArgs) -> Result<()> {
    if a.size.is_none()
        && a.count.is_none()
        && a.servers.is_none()
        && a.layout.is_none()
        && a.inline_bytes.is_none()
    {
        bail!("give --size, --count, --servers, --layout and/or --inline-bytes");
    }
    if let Some(n) = a
        .inline_bytes
        .filter(|&n| n > stripefs_wire::MAX_INLINE_BYTES as u64)
    {
        bail!(
            "--inline-bytes {n} exceeds {}",
            stripefs_wire::MAX_INLINE_BYTES
        );
    }
    let client = a.c.connect()?;
    let mut h = hint(a.size, a.count)?;
    if let Some(list) = &a.servers {
        check_servers(list, a.count, a.layout, client.cluster().data.len())?;
    }
    h.servers = a.servers.clone();
    h.policy = a.layout;
    h.inline_bytes = a.inline_bytes.map(|n| n as u32);
    match client.lstat(&a.path) {
        Ok(_) => client.set_stripe(&a.path, h).map(|_| ()),
        Err(e) if e.code == ErrorCode::NotFound => {
            // Like `lfs setstripe`: a missing path becomes an empty file with that layout.
            let opts = OpenOptions {
                layout: h,
                ..OpenOptions::create_new(0o644)
            };
            client.open(&a.path, &opts).and_then(|f| f.close())
        }
        Err(e) => Err(e),
    }
    .with_context(|| format!("cannot set the striping of {}", a.path))?;
    Ok(())
}

pub fn getstripe(a: PathArgs) -> Result<()> {
    let client = a.c.connect()?;
    let at = client
        .stat(&a.path)
        .with_context(|| format!("cannot stat {}", a.path))?;
    let (size, count, servers) = match (&at.layout, at.ftype) {
        (Some(l), _) => (
            Some(l.stripe_size_bytes as u64),
            Some(l.servers.len() as u32),
            Some(l.servers.iter().map(|s| s.0).collect::<Vec<_>>()),
        ),
        // A server list without a count fixes the count: one stripe per server listed.
        (None, FileType::Dir) => (
            at.dir_layout.stripe_size_bytes.map(u64::from),
            at.dir_layout
                .stripe_count
                .or_else(|| at.dir_layout.servers.as_ref().map(|s| s.len() as u32)),
            at.dir_layout.servers.clone(),
        ),
        _ => (None, None, None),
    };
    if a.json {
        let v = json!({
            "path": a.path,
            "type": format!("{:?}", at.ftype).to_lowercase(),
            "stripe_size": size,
            "stripe_count": count,
            "servers": servers,
            "layout": at.dir_layout.policy.map(|p| p.name()),
            "inline_bytes": at.dir_layout.inline_bytes,
            "inline": at.inline.as_ref().map(|i| i.max),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("{}", a.path);
    let dflt = if at.ftype == FileType::Dir {
        " (inherited by new files)"
    } else {
        ""
    };
    match size {
        Some(s) => println!("  stripe_size:  {}{dflt}", format_size(s)),
        None => println!("  stripe_size:  cluster default{dflt}"),
    }
    let listed = if at.layout.is_none() && at.dir_layout.stripe_count.is_none() {
        " (the servers listed)"
    } else {
        ""
    };
    match count {
        Some(0) => println!("  stripe_count: all data servers{dflt}"),
        Some(c) => println!("  stripe_count: {c}{listed}{dflt}"),
        None => println!("  stripe_count: cluster default{dflt}"),
    }
    if let Some(s) = servers {
        let list: Vec<String> = s.iter().map(|x| x.to_string()).collect();
        println!("  servers:      {}{dflt}", list.join(" "));
    }
    if let Some(p) = at.dir_layout.policy {
        println!("  layout:       {}{dflt}", p.name());
    }
    if let Some(n) = at.dir_layout.inline_bytes {
        println!("  inline_bytes: {n}{dflt}");
    }
    if let Some(i) = &at.inline {
        println!(
            "  inline:       {} bytes kept with the inode (up to {})",
            at.size, i.max
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::fmt_time;

    #[test]
    fn times_print_as_iso_8601_utc_with_nanoseconds() {
        let cases = [
            (0, "1970-01-01T00:00:00.000000000Z"),
            (-1, "1969-12-31T23:59:59.999999999Z"),
            (951_782_400_000_000_000, "2000-02-29T00:00:00.000000000Z"),
            (951_955_199_000_000_001, "2000-03-01T23:59:59.000000001Z"),
            (1_700_000_000_123_456_789, "2023-11-14T22:13:20.123456789Z"),
            (1_795_441_501_123_456_789, "2026-11-23T13:45:01.123456789Z"),
            (i64::MAX, "2262-04-11T23:47:16.854775807Z"),
            (i64::MIN, "1677-09-21T00:12:43.145224192Z"),
        ];
        for (ns, want) in cases {
            assert_eq!(fmt_time(ns), want, "{ns}");
        }
    }
}
