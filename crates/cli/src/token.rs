//! `stripefs token create|revoke`: scoped tokens for collaborators (see
//! stripefs_rpc::token). Creating one needs the cluster file with the secret; the token
//! is printed as the last line of output, and `--client-file` writes a cluster file
//! that holds the addresses and the token, never the secret.

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use stripefs_rpc::token::{normalise, now_s, Token};
use stripefs_rpc::units::parse_duration;
use stripefs_rpc::ClusterConfig;
use stripefs_wire::{Cred, Request};

#[derive(Subcommand)]
pub enum TokenCmd {
    /// Make a token for one subtree: read-only or not, valid for --ttl, acting as the
    /// owner of the path (or --uid/--gid). Prints it as the last line.
    Create(CreateArgs),
    /// Refuse a token from now on, on every server (by the id `create` printed).
    Revoke(RevokeArgs),
}

#[derive(Args)]
pub struct CreateArgs {
    /// The subtree the token may touch (an absolute path in stripefs).
    #[arg(long)]
    path: String,
    /// Reading only: every change is refused.
    #[arg(long)]
    read_only: bool,
    /// How long it is valid: a number with s, m, h or d (24h, 30m, 7d, 90s).
    #[arg(long, default_value = "24h", value_parser = parse_ttl)]
    ttl: std::time::Duration,
    /// The user its requests act as (default: the owner of --path).
    #[arg(long)]
    uid: Option<u32>,
    /// The group its requests act as (default: the group of --path).
    #[arg(long)]
    gid: Option<u32>,
    /// Also write a client file for the collaborator: the cluster's addresses and the
    /// token, without the secret (mode 0600).
    #[arg(long)]
    client_file: Option<PathBuf>,
    /// Cluster file with the secret (default: $STRIPEFS_CLUSTER).
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    cluster: PathBuf,
}

#[derive(Args)]
pub struct RevokeArgs {
    /// The token's id (16 hex digits, as `create` printed), or the token itself.
    id: String,
    /// Cluster file with the secret (default: $STRIPEFS_CLUSTER).
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    cluster: PathBuf,
}

/// `90s`, `30m`, `24h`, `7d` (or what `parse_duration` takes, like `1500ms`).
fn parse_ttl(text: &str) -> Result<std::time::Duration, String> {
    let t = text.trim();
    let unit = |suffix: &str, secs: u64| {
        t.strip_suffix(suffix)
            .and_then(|n| n.parse::<u64>().ok())
            .and_then(|n| n.checked_mul(secs))
    };
    if let Some(s) = unit("d", 86_400)
        .or_else(|| unit("h", 3_600))
        .or_else(|| unit("m", 60))
    {
        return Ok(std::time::Duration::from_secs(s));
    }
    parse_duration(t).map_err(|_| format!("--ttl {text:?} is not like 90s, 30m, 24h or 7d"))
}

fn load(path: &std::path::Path) -> Result<ClusterConfig> {
    let cfg = ClusterConfig::load(path).map_err(|e| anyhow!(e))?;
    if !cfg.has_secret {
        bail!(
            "{} holds no cluster secret: tokens are made and revoked with the cluster's own file",
            path.display()
        );
    }
    Ok(cfg)
}

pub fn run(cmd: TokenCmd) -> Result<()> {
    match cmd {
        TokenCmd::Create(a) => create(a),
        TokenCmd::Revoke(a) => revoke(a),
    }
}

fn create(a: CreateArgs) -> Result<()> {
    let cfg = load(&a.cluster)?;
    let path = normalise(&a.path).map_err(|e| anyhow!(e))?;
    if a.ttl.as_secs() == 0 {
        bail!("--ttl must be at least a second");
    }
    let mut plain = cfg.clone();
    plain.token = None;
    let client = stripefs_client::Client::connect(&plain)
        .with_context(|| format!("cannot connect with {}", a.cluster.display()))?;
    let attr = client
        .stat(&path)
        .with_context(|| format!("cannot find {path}"))?;
    if attr.ftype != stripefs_wire::FileType::Dir {
        bail!("{path} is not a directory: a token names a subtree");
    }
    let nonce = stripefs_rpc::auth::random_nonce();
    let token = Token {
        id: u64::from_le_bytes(nonce[..8].try_into().expect("8 bytes")),
        path: path.clone(),
        read_only: a.read_only,
        expires_s: now_s() + a.ttl.as_secs(),
        uid: a.uid.unwrap_or(attr.uid),
        gid: a.gid.unwrap_or(attr.gid),
    };
    let text = token.sign(&cfg.secret);
    eprintln!(
        "token {:016x}: {} {path} as uid {} gid {}, valid for {} s (revoke with `stripefs token revoke {:016x}`)",
        token.id,
        if token.read_only { "read-only" } else { "read-write" },
        token.uid,
        token.gid,
        a.ttl.as_secs(),
        token.id
    );
    if let Some(f) = &a.client_file {
        let mut theirs = cfg.clone();
        theirs.has_secret = false;
        theirs.token = Some(text.clone());
        // The CA itself goes into the file (the collaborator has no copy of ours); the
        // servers' certificate and key stay here.
        theirs.tls.ca = theirs.tls.ca_pem_text().map_err(|e| anyhow::anyhow!(e))?;
        theirs.tls.cert = None;
        theirs.tls.key = None;
        theirs.tls.require = false;
        write_private(f, &theirs.to_toml())?;
        eprintln!("client file (no secret): {}", f.display());
    }
    println!("{text}");
    Ok(())
}

/// Writes `text` to `path` readable by its owner only.
fn write_private(path: &std::path::Path, text: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    Ok(())
}

fn revoke(a: RevokeArgs) -> Result<()> {
    let cfg = load(&a.cluster)?;
    let id = match Token::parse(&a.id) {
        Ok((t, _)) => t.id,
        Err(_) => u64::from_str_radix(a.id.trim(), 16).map_err(|_| {
            anyhow!(
                "{:?} is neither a token id (16 hex digits) nor a token",
                a.id
            )
        })?,
    };
    let timeout = std::time::Duration::from_millis(cfg.timeout_ms);
    let mut c = cfg.connect(&cfg.meta_addr, timeout)?;
    c.call(&Cred::root(), Request::TokenRevoke { id }, &[], &mut [])?;
    println!("token {id:016x} revoked");
    Ok(())
}
