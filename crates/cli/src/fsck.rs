//! `stripefs fsck`: checks a cluster, live (`--cluster FILE`, through the servers) or
//! stopped (`--dir DIR`, reading the metadata database and the data directories).
//!
//! It checks the namespace (offline only: `stripefs_meta::check` needs the database to
//! itself), finds objects no inode owns (orphans) and files whose size says they have
//! data but no data server holds an object of them, and scrubs every stored block
//! against its checksum at `--rate`. Exit status 1 on damage (a failed block, an orphan,
//! a namespace problem) or when a server cannot be checked.

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use stripefs_client::Client;
use stripefs_rpc::units::format_size;
use stripefs_rpc::{ClusterConfig, Conn, ServerConfig};
use stripefs_wire::{
    Cred, Damage, ErrorCode, FileType, InodeId, Request, Response, ServerId, WireError,
    MAX_LIST_OBJECTS,
};

#[derive(Args)]
pub struct FsckArgs {
    /// A stopped cluster's directory (as made by `cluster up --dir`): the metadata
    /// database and the data directories are read directly.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// A live cluster's description file (default: $STRIPEFS_CLUSTER); ignored with --dir.
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    cluster: Option<PathBuf>,
    /// Most stored bytes scrubbed per second, over all servers (0 = no limit).
    #[arg(long, default_value = "256MiB", value_parser = stripefs_rpc::parse_rate_or_off)]
    rate: u64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// One data server as fsck sees it: through RPC, or opened in this process.
trait DataSide {
    fn name(&self) -> String;
    fn targets(&mut self) -> Result<u32, WireError>;
    fn list(&mut self, after: Option<InodeId>) -> Result<(Vec<InodeId>, bool), WireError>;
    fn scrub(
        &mut self,
        fid: InodeId,
        target: u32,
        offset: u64,
    ) -> Result<(u64, Option<u64>, Vec<Damage>), WireError>;
}

struct Live {
    id: u32,
    addr: String,
    conn: Conn,
}

impl Live {
    fn call(&mut self, req: Request) -> Result<Response, WireError> {
        Ok(self.conn.call(&Cred::root(), req, &[], &mut [])?.0)
    }
}

fn unexpected(who: &str, r: Response) -> WireError {
    WireError::new(
        ErrorCode::UnexpectedMessage,
        format!("{who} answered {r:?}"),
    )
}

impl DataSide for Live {
    fn name(&self) -> String {
        format!("data server {} ({})", self.id, self.addr)
    }

    fn targets(&mut self) -> Result<u32, WireError> {
        match self.call(Request::DataStatus {})? {
            Response::DataStatus { targets, .. } => Ok(targets.len() as u32),
            r => Err(unexpected(&self.name(), r)),
        }
    }

    fn list(&mut self, after: Option<InodeId>) -> Result<(Vec<InodeId>, bool), WireError> {
        let req = Request::ListObjects {
            after,
            limit: MAX_LIST_OBJECTS,
        };
        match self.call(req)? {
            Response::Objects { fids, done } => Ok((fids, done)),
            r => Err(unexpected(&self.name(), r)),
        }
    }

    fn scrub(
        &mut self,
        fid: InodeId,
        target: u32,
        offset: u64,
    ) -> Result<(u64, Option<u64>, Vec<Damage>), WireError> {
        match self.call(Request::Scrub {
            fid,
            target,
            offset,
        })? {
            Response::Scrubbed {
                bytes,
                next,
                damaged,
            } => Ok((bytes, next, damaged)),
            r => Err(unexpected(&self.name(), r)),
        }
    }
}

struct Offline {
    id: u32,
    svc: Arc<stripefs_data::DataService>,
}

impl DataSide for Offline {
    fn name(&self) -> String {
        format!("data server {} (offline)", self.id)
    }

    fn targets(&mut self) -> Result<u32, WireError> {
        Ok(self.svc.target_count() as u32)
    }

    fn list(&mut self, after: Option<InodeId>) -> Result<(Vec<InodeId>, bool), WireError> {
        self.svc.list_objects(after, MAX_LIST_OBJECTS)
    }

    fn scrub(
        &mut self,
        fid: InodeId,
        target: u32,
        offset: u64,
    ) -> Result<(u64, Option<u64>, Vec<Damage>), WireError> {
        self.svc
            .scrub(fid, target, offset, stripefs_wire::SCRUB_REQUEST_BYTES)
    }
}

/// What the namespace says should be stored.
struct Expected {
    /// Regular files: size and data servers.
    files: HashMap<u64, (u64, Vec<ServerId>)>,
    /// Namespace problems found (offline check only).
    problems: Vec<String>,
    /// Whether the namespace itself was checked.
    checked: bool,
    /// Objects of these inodes await the purge thread (offline: the purge queue).
    purging: HashSet<u64>,
    /// Inodes known to exist (all of them offline; the walked ones live).
    inodes: HashSet<u64>,
    /// Live: asked about objects of inodes the walk did not meet (an open, unlinked
    /// file is in no directory).
    client: Option<Client>,
}

#[derive(Default)]
struct Found {
    objects: u64,
    scrubbed_bytes: u64,
    damaged: Vec<serde_json::Value>,
    /// fid -> servers holding an object of it.
    held: HashMap<u64, Vec<u32>>,
    errors: Vec<String>,
}

/// Scrub pacing over all servers, with progress on stderr.
struct Pace {
    rate: u64,
    start: Instant,
    bytes: u64,
    last_note: Instant,
}

impl Pace {
    fn charge(&mut self, bytes: u64, objects: u64) {
        self.bytes += bytes;
        if self.rate > 0 {
            let due = Duration::from_secs_f64(self.bytes as f64 / self.rate as f64);
            if let Some(wait) = due.checked_sub(self.start.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        if self.last_note.elapsed() >= Duration::from_secs(2) {
            self.last_note = Instant::now();
            eprintln!(
                "fsck: {objects} objects, {} scrubbed",
                format_size(self.bytes)
            );
        }
    }
}

pub fn run(a: FsckArgs) -> Result<()> {
    let (mode, expected, servers) = match &a.dir {
        Some(dir) => offline(dir)?,
        None => live(a.cluster.as_deref())?,
    };
    let mut found = Found::default();
    let mut pace = Pace {
        rate: a.rate,
        start: Instant::now(),
        bytes: 0,
        last_note: Instant::now(),
    };
    for (id, mut side) in servers {
        if let Err(e) = check_server(id, side.as_mut(), &mut found, &mut pace) {
            found.errors.push(format!("{}: {e}", side.name()));
        }
    }
    let report = judge(mode, &expected, found, a.json)?;
    if report["ok"] != json!(true) {
        std::process::exit(1);
    }
    Ok(())
}

/// Lists and scrubs every object of one data server.
fn check_server(
    id: u32,
    side: &mut dyn DataSide,
    found: &mut Found,
    pace: &mut Pace,
) -> Result<(), WireError> {
    let targets = side.targets()?;
    let mut cursor = None;
    loop {
        let (fids, done) = side.list(cursor)?;
        for fid in &fids {
            found.objects += 1;
            found.held.entry(fid.0).or_default().push(id);
            for t in 0..targets {
                let mut at = Some(0);
                while let Some(offset) = at {
                    let (bytes, next, damaged) = side.scrub(*fid, t, offset)?;
                    found.scrubbed_bytes += bytes;
                    for d in damaged {
                        found.damaged.push(json!({
                            "server": id, "fid": d.fid.0, "target": d.target,
                            "object_offset": d.offset, "stored_crc": format!("{:08x}", d.stored_crc),
                            "actual_crc": format!("{:08x}", d.actual_crc),
                        }));
                    }
                    pace.charge(bytes, found.objects);
                    at = next;
                }
            }
        }
        cursor = fids.last().copied().or(cursor);
        if done {
            return Ok(());
        }
    }
}

type Servers = Vec<(u32, Box<dyn DataSide>)>;

fn live(cluster: Option<&Path>) -> Result<(&'static str, Expected, Servers)> {
    let path = cluster.ok_or_else(|| {
        anyhow!("no cluster given: pass --cluster FILE (or set STRIPEFS_CLUSTER), or --dir DIR for a stopped one")
    })?;
    let cfg = ClusterConfig::load(path).map_err(|e| anyhow!(e))?;
    let client = Client::connect(&cfg)?;
    let mut expected = walk(&client)?;
    let timeout = Duration::from_millis(cfg.timeout_ms);
    let mut servers: Servers = Vec::new();
    for (id, d) in cfg.data.iter().enumerate() {
        let conn = cfg
            .connect(&d.addr, timeout)
            .with_context(|| format!("data server {id} ({})", d.addr))?;
        servers.push((
            id as u32,
            Box::new(Live {
                id: id as u32,
                addr: d.addr.clone(),
                conn,
            }),
        ));
    }
    expected.client = Some(client);
    Ok(("live", expected, servers))
}

/// Every regular file reachable from the root, as root sees them.
fn walk(client: &Client) -> Result<Expected> {
    let mut exp = Expected {
        files: HashMap::new(),
        problems: Vec::new(),
        checked: false,
        purging: HashSet::new(),
        inodes: HashSet::from([InodeId::ROOT.0]),
        client: None,
    };
    let mut dirs = vec![InodeId::ROOT];
    while let Some(dir) = dirs.pop() {
        for e in client.readdir_ino(dir)? {
            if !exp.inodes.insert(e.ino.0) {
                continue; // a hard link seen before
            }
            match e.ftype {
                FileType::Dir => dirs.push(e.ino),
                FileType::File => {
                    let a = client.getattr(e.ino)?;
                    let servers = a.layout.map(|l| l.servers).unwrap_or_default();
                    // An inline file's bytes live with its inode, not on data servers.
                    let size = if a.inline.is_some() { 0 } else { a.size };
                    exp.files.insert(e.ino.0, (size, servers));
                }
                _ => {}
            }
        }
    }
    Ok(exp)
}

fn offline(dir: &Path) -> Result<(&'static str, Expected, Servers)> {
    let meta = ServerConfig::load(&dir.join("meta/server.toml")).map_err(|e| anyhow!(e))?;
    let db = meta
        .db
        .ok_or_else(|| anyhow!("{}/meta/server.toml names no db", dir.display()))?;
    let mut problems = Vec::new();
    if let Err(e) = stripefs_meta::check(&db) {
        problems.push(e);
    }
    let inv = stripefs_meta::inventory(&db).map_err(|e| anyhow!(e))?;
    let expected = Expected {
        files: inv
            .files
            .into_iter()
            .map(|(ino, size, servers)| (ino, (size, servers)))
            .collect(),
        problems,
        checked: true,
        purging: inv.purging,
        inodes: inv.inodes,
        client: None,
    };
    let mut servers: Servers = Vec::new();
    for id in 0.. {
        let conf = dir.join(format!("data{id}/server.toml"));
        if !conf.exists() {
            break;
        }
        let cfg = ServerConfig::load(&conf).map_err(|e| anyhow!(e))?;
        let svc = stripefs_data::DataService::open(ServerId(id), &cfg.targets, None)
            .map_err(|e| anyhow!("data server {id}: {e}"))?;
        servers.push((id, Box::new(Offline { id, svc })));
    }
    if servers.is_empty() {
        bail!("{} holds no data server (data0/server.toml)", dir.display());
    }
    Ok(("stopped", expected, servers))
}

/// Whether inode `fid` exists although the walk did not meet it (live: asked of the
/// metadata server; offline: every inode is known).
fn exists_elsewhere(exp: &Expected, fid: u64) -> Result<bool, WireError> {
    match &exp.client {
        None => Ok(false),
        Some(client) => match client.getattr(InodeId(fid)) {
            Ok(_) => Ok(true),
            Err(e) if matches!(e.code, ErrorCode::NotFound | ErrorCode::StaleHandle) => Ok(false),
            Err(e) => Err(e),
        },
    }
}

/// Compares what was found with what should be there, prints the report and returns it.
fn judge(mode: &str, exp: &Expected, found: Found, as_json: bool) -> Result<serde_json::Value> {
    let mut errors = found.errors;
    let mut orphans = Vec::new();
    let mut purging = Vec::new();
    let mut fids: Vec<_> = found.held.iter().collect();
    fids.sort_unstable_by_key(|(fid, _)| **fid);
    for (fid, servers) in fids {
        if exp.inodes.contains(fid) {
            continue;
        }
        if exp.purging.contains(fid) {
            purging.push(json!({ "fid": fid, "servers": servers }));
            continue;
        }
        match exists_elsewhere(exp, *fid) {
            Ok(true) => {}
            Ok(false) => orphans.push(json!({ "fid": fid, "servers": servers })),
            Err(e) => errors.push(format!("asking about inode {fid}: {e}")),
        }
    }
    let mut without: Vec<u64> = exp
        .files
        .iter()
        .filter(|(ino, (size, _))| *size > 0 && !found.held.contains_key(ino))
        .map(|(ino, _)| *ino)
        .collect();
    without.sort_unstable();
    let ok = found.damaged.is_empty()
        && orphans.is_empty()
        && exp.problems.is_empty()
        && errors.is_empty();
    let report = json!({
        "mode": mode,
        "namespace_checked": exp.checked,
        "namespace_problems": exp.problems,
        "files": exp.files.len(),
        "objects": found.objects,
        "scrubbed_bytes": found.scrubbed_bytes,
        "damaged_blocks": found.damaged,
        "orphan_objects": orphans,
        "awaiting_purge": purging,
        "sized_without_objects": without,
        "errors": errors,
        "ok": ok,
    });
    if as_json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_human(&report);
    }
    Ok(report)
}

fn print_human(r: &serde_json::Value) {
    let n = |k: &str| r[k].as_array().map_or(0, |v| v.len());
    println!(
        "fsck ({}): {} files, {} objects, {} scrubbed",
        r["mode"].as_str().unwrap_or("?"),
        r["files"],
        r["objects"],
        format_size(r["scrubbed_bytes"].as_u64().unwrap_or(0))
    );
    if r["namespace_checked"] == json!(false) {
        println!("namespace: not checked live (stop the cluster and use --dir for that)");
    }
    for p in r["namespace_problems"].as_array().into_iter().flatten() {
        println!("NAMESPACE: {}", p.as_str().unwrap_or("?"));
    }
    for d in r["damaged_blocks"].as_array().into_iter().flatten() {
        println!(
            "DAMAGED: data server {} inode {} target {} object offset {}: stored crc {}, data has {}",
            d["server"], d["fid"], d["target"], d["object_offset"],
            d["stored_crc"].as_str().unwrap_or("?"), d["actual_crc"].as_str().unwrap_or("?")
        );
    }
    for o in r["orphan_objects"].as_array().into_iter().flatten() {
        println!(
            "ORPHAN: object of inode {} on data servers {}: no such inode",
            o["fid"], o["servers"]
        );
    }
    for o in r["awaiting_purge"].as_array().into_iter().flatten() {
        println!(
            "note: objects of removed inode {} await the purge thread",
            o["fid"]
        );
    }
    for ino in r["sized_without_objects"].as_array().into_iter().flatten() {
        println!(
            "note: inode {ino} has a size but no data server holds data of it \
             (normal for a file only extended by truncate; else its data is lost)"
        );
    }
    for e in r["errors"].as_array().into_iter().flatten() {
        println!("ERROR: {}", e.as_str().unwrap_or("?"));
    }
    println!(
        "{}: {} damaged blocks, {} orphan objects, {} namespace problems",
        if r["ok"] == json!(true) {
            "clean"
        } else {
            "DAMAGE FOUND"
        },
        n("damaged_blocks"),
        n("orphan_objects"),
        n("namespace_problems")
    );
}
