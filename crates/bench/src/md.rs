//! `stripefs bench md`: mpi-md-test (seed 003) and the mdtest-easy pattern.
//!
//! N clients run as threads, each with its own [`Client`] (own connections, no shared
//! caches). First the collective operations of mpi-md-test, repeated `--iterations`
//! times: create (client 0 creates a file, the others open it once it exists), open (all
//! open it), resize (client 0 sets its size, the others see the new size). Then the
//! mdtest-easy pattern: every client creates (create + close), stats and removes
//! `--files` files in a directory of its own, and then all in one shared directory, the
//! way mdtest does from a working directory (inode-level calls on the directory's
//! inode). Every create is durable when it is acknowledged: the metadata server commits
//! it before answering. The same-run references are the same create/stat/remove pattern
//! on a local directory (`--baseline DIR`) and the latency of one small local
//! write + fdatasync, the floor of any durable create.
//!
//! With `--file-bytes N` each create also writes N bytes (before the close), and after
//! the stat phase every file is opened, read back whole and verified, then closed (the
//! read phase). `--shared-dir` runs only the shared-directory arrangement. With `--mount
//! DIR` the same phases run again through a FUSE mount of the same cluster, with plain
//! system calls, one process per client (see `worker.rs` for how they are timed).

use crate::pattern::Pattern;
use crate::util::{join_all, progress_ops, write_json};
use crate::worker::{Done, Spec, Workers};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use indicatif::ProgressBar;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};
use stripefs_client::{Client, InodeId, OpenOptions};
use stripefs_rpc::units::parse_size;
use stripefs_rpc::ClusterConfig;

/// Most clients one run starts.
pub const MAX_CLIENTS: u32 = 1024;
/// Most files per client and phase.
pub const MAX_FILES: u32 = 1_000_000;
/// Most repetitions of the collective operations.
pub const MAX_ITERATIONS: u32 = 100_000;
/// Largest `--file-bytes`.
pub const MAX_FILE_BYTES: u64 = 64 << 20;
/// Small writes + fdatasync timed for the local sync latency reference.
pub const FSYNC_SAMPLES: u32 = 200;

#[derive(Args, Clone, Debug)]
pub struct MdArgs {
    /// Cluster description file.
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    pub cluster: PathBuf,
    /// Concurrent clients (threads, each with its own client and connections).
    #[arg(long, default_value_t = 4)]
    pub clients: u32,
    /// Files each client creates, stats and removes in each phase.
    #[arg(long, default_value_t = 1000)]
    pub files: u32,
    /// Directory in stripefs for the test.
    #[arg(long, default_value = "/bench-md")]
    pub path: String,
    /// Repetitions of each collective operation (create, open, resize).
    #[arg(long, default_value_t = 100)]
    pub iterations: u32,
    /// Run the same create/stat/remove pattern on this local directory as the same-run
    /// reference (the local fsync latency is measured there too).
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Bytes written into each file at create (before its close); after the stat phase
    /// every file is read back whole and verified (a read phase). 0: empty files, no
    /// read phase.
    #[arg(long, default_value = "0", value_parser = parse_size)]
    pub file_bytes: u64,
    /// Only the shared-directory arrangement: all clients create, stat, [read] and
    /// remove their files in one directory (without it: first a directory per client,
    /// then one shared directory). The baseline follows the same arrangement.
    #[arg(long)]
    pub shared_dir: bool,
    /// Also run the same file phases through this FUSE mount of the same cluster
    /// (`stripefs mount DIR`) with plain system calls, one process per client, after the
    /// native run; reported as `mount_*` beside it.
    #[arg(long)]
    pub mount: Option<PathBuf>,
    /// Write the figures as one JSON object to FILE.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One timed phase: operations per second over the wall time of all clients, and the
/// mean latency of one operation.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rate {
    pub ops_s: f64,
    pub latency_s: f64,
}

/// Create, stat, read (with `--file-bytes`) and remove rates of one directory
/// arrangement.
#[derive(Clone, Copy, Debug, Default)]
pub struct Trio {
    pub create: Rate,
    pub stat: Rate,
    pub read: Option<Rate>,
    pub remove: Rate,
}

/// Mean wall time of one collective operation (first start to last finish), and the
/// mean time each client spent in it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Collective {
    pub mean_s: f64,
    pub client_latency_s: f64,
}

fn validate(a: &MdArgs) -> Result<()> {
    if a.clients == 0 || a.clients > MAX_CLIENTS {
        bail!("--clients must be between 1 and {MAX_CLIENTS}");
    }
    if a.files == 0 || a.files > MAX_FILES {
        bail!("--files must be between 1 and {MAX_FILES}");
    }
    if a.iterations == 0 || a.iterations > MAX_ITERATIONS {
        bail!("--iterations must be between 1 and {MAX_ITERATIONS}");
    }
    if a.file_bytes > MAX_FILE_BYTES {
        bail!("--file-bytes must be at most 64M, not {}", a.file_bytes);
    }
    Ok(())
}

/// Runs the benchmark and prints its table; returns the JSON object it reports.
pub fn run(a: MdArgs) -> Result<serde_json::Value> {
    validate(&a)?;
    let cluster = ClusterConfig::load(&a.cluster).map_err(|e| anyhow!(e))?;
    let admin = Client::connect(&cluster)?;
    let seed = crate::util::seed();
    let content = Content::new(&a, seed);
    let run_dir = prepare(&admin, &a, seed)?;
    let clients = (0..a.clients)
        .map(|_| Client::connect(&cluster))
        .collect::<Result<Vec<_>, _>>()?;
    let result = measure(&admin, &clients, &a, &run_dir, &content).and_then(|m| {
        let mount = match &a.mount {
            Some(dir) => Some(mount_measure(&admin, &a, &run_dir, dir, seed)?),
            None => None,
        };
        Ok((m, mount))
    });
    remove_tree(&admin, &run_dir);
    let ((coll, own, shared), mount) = result?;
    let sync_dir = a.baseline.clone().unwrap_or_else(std::env::temp_dir);
    let fsync_s = local_fsync_s(&sync_dir)?;
    let base = match &a.baseline {
        Some(dir) => Some(local_pattern(dir, &a, &content)?),
        None => None,
    };
    let m = Measured {
        coll,
        own,
        shared,
        mount,
    };
    let report = report_json(&a, &m, base.as_ref(), fsync_s);
    print_table(&a, &m, base.as_ref(), fsync_s);
    if let Some(p) = &a.json {
        write_json(p, &report)?;
    }
    Ok(report)
}

/// One client's (start, end) of the collective create, open and resize of one round.
type Spans3 = [(Instant, Instant); 3];

/// Everything one run measured.
struct Measured {
    coll: [Collective; 3],
    /// A directory per client (not with `--shared-dir`).
    own: Option<Trio>,
    shared: Trio,
    /// Through the mount: (own directories, shared directory).
    mount: Option<(Option<Trio>, Trio)>,
}

fn measure(
    admin: &Client,
    clients: &[Client],
    a: &MdArgs,
    run_dir: &str,
    content: &Content,
) -> Result<([Collective; 3], Option<Trio>, Trio)> {
    let dir_ino = admin.stat(run_dir)?.ino;
    let coll = collective(clients, a, run_dir, dir_ino)?;
    let own = if a.shared_dir {
        None
    } else {
        let own_dirs = (0..a.clients)
            .map(|r| {
                let path = format!("{run_dir}/rank{r}");
                Ok((admin.mkdir(&path, 0o755)?.ino, path))
            })
            .collect::<Result<Vec<(InodeId, String)>>>()?;
        Some(trio(clients, a, &own_dirs, "own dir", content)?)
    };
    let shared_path = format!("{run_dir}/shared");
    let shared_ino = admin.mkdir(&shared_path, 0o755)?.ino;
    let shared_dirs = vec![(shared_ino, shared_path); a.clients as usize];
    let shared = trio(clients, a, &shared_dirs, "shared", content)?;
    Ok((coll, own, shared))
}

/// The bytes of the files: file `i` of client `rank` holds the pattern at a file offset
/// of its own, so that a file holding another file's bytes is caught.
pub struct Content {
    pattern: Pattern,
    files: u32,
    bytes: u64,
}

impl Content {
    fn new(a: &MdArgs, seed: u64) -> Content {
        Content::of(seed, a.files, a.file_bytes)
    }

    fn of(seed: u64, files: u32, bytes: u64) -> Content {
        Content {
            pattern: Pattern::new(seed, bytes as usize),
            files,
            bytes,
        }
    }

    /// Where in the pattern file `i` of client `rank` starts.
    pub fn offset(&self, rank: u32, i: u32) -> u64 {
        (rank as u64 * self.files as u64 + i as u64) * self.bytes
    }

    fn fill(&self, rank: u32, i: u32) -> Vec<u8> {
        let mut buf = vec![0u8; self.bytes as usize];
        self.pattern.fill(self.offset(rank, i), &mut buf);
        buf
    }

    fn check(&self, rank: u32, i: u32, what: &dyn std::fmt::Display, buf: &[u8]) -> Result<()> {
        if buf.len() as u64 != self.bytes {
            bail!("{what}: read {} bytes, not {}", buf.len(), self.bytes);
        }
        self.pattern
            .verify(self.offset(rank, i), buf)
            .map_err(|bad| {
                let at = bad.saturating_sub(self.offset(rank, i));
                anyhow!("{what}: verification failed: wrong data near byte {at}")
            })
    }
}

fn file_name(rank: u32, i: u32) -> String {
    format!("f{rank}.{i}")
}

/// Creates the test directory and a fresh run directory inside it.
fn prepare(admin: &Client, a: &MdArgs, seed: u64) -> Result<String> {
    let dir = a.path.trim_end_matches('/');
    let dir = if dir.is_empty() { "/" } else { dir };
    admin
        .mkdir_all(dir, 0o755)
        .with_context(|| format!("cannot create {dir}"))?;
    let run_dir = format!("{}/run-{seed:x}", dir.trim_end_matches('/'));
    admin
        .mkdir(&run_dir, 0o755)
        .with_context(|| format!("cannot create {run_dir}"))?;
    Ok(run_dir)
}

/// Removes what a run left (files of a failed phase, the run directories); best effort.
fn remove_tree(admin: &Client, dir: &str) {
    if let Ok(entries) = admin.readdir(dir) {
        for e in entries {
            let p = format!("{dir}/{}", e.name);
            if e.ftype == stripefs_client::FileType::Dir {
                remove_tree(admin, &p);
            } else {
                let _ = admin.unlink(&p);
            }
        }
    }
    let _ = admin.rmdir(dir);
}

// ---- collective operations (mpi-md-test) ----

/// The three collective operations, `--iterations` times each; returns create, open and
/// resize figures.
fn collective(
    clients: &[Client],
    a: &MdArgs,
    run_dir: &str,
    dir_ino: InodeId,
) -> Result<[Collective; 3]> {
    let steps = Barrier::new(clients.len());
    let failed = AtomicBool::new(false);
    let pb = progress_ops(a.iterations as u64, "collective");
    let per_client: Vec<Result<Vec<Spans3>>> = std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(rank, c)| {
                let (steps, pb, failed) = (&steps, &pb, &failed);
                s.spawn(move || {
                    let mut out = Vec::with_capacity(a.iterations as usize);
                    for i in 0..a.iterations {
                        let mut round = Round {
                            c,
                            rank,
                            steps,
                            err: None,
                        };
                        let spans = round.run(i, run_dir, dir_ino);
                        // Every client passes the same barriers, so all see a failure
                        // flagged before the last one and stop together.
                        if round.err.is_some() {
                            failed.store(true, Ordering::SeqCst);
                        }
                        steps.wait();
                        if let Some(e) = round.err {
                            return Err(e);
                        }
                        if failed.load(Ordering::SeqCst) {
                            bail!("another client failed in collective round {i}");
                        }
                        out.push(spans);
                        if rank == 0 {
                            pb.inc(1);
                        }
                    }
                    Ok(out)
                })
            })
            .collect();
        join_all(handles)
    });
    pb.finish_and_clear();
    let per_client = per_client.into_iter().collect::<Result<Vec<_>>>()?;
    Ok([0, 1, 2].map(|op| summarize(&per_client, op)))
}

/// One client's part of one collective round. Every client passes every barrier even
/// after an error (skipping its work), so that no client waits forever.
struct Round<'a> {
    c: &'a Client,
    rank: usize,
    steps: &'a Barrier,
    err: Option<anyhow::Error>,
}

impl Round<'_> {
    /// Waits for all clients, then runs `f` unless an earlier step failed.
    fn step<T>(&mut self, f: impl FnOnce(&Client) -> Result<T>) -> Option<T> {
        self.steps.wait();
        self.now(f)
    }

    /// Runs `f` unless an earlier step failed.
    fn now<T>(&mut self, f: impl FnOnce(&Client) -> Result<T>) -> Option<T> {
        if self.err.is_some() {
            return None;
        }
        match f(self.c) {
            Ok(v) => Some(v),
            Err(e) => {
                self.err = Some(e);
                None
            }
        }
    }

    /// Collective create, open and resize of file `coll{i}`; each client's (start, end)
    /// of each. Client 0 removes the file afterwards (untimed).
    fn run(&mut self, i: u32, run_dir: &str, dir_ino: InodeId) -> Spans3 {
        let (rank, name) = (self.rank, format!("coll{i}"));
        let path = format!("{run_dir}/{name}");
        let rw = OpenOptions::new().write(true);
        let size = u64::from(i) + 1;
        // Create: client 0 makes the file, the others open it once it exists.
        let t0 = self.step(|_| Ok(Instant::now()));
        let made = self.now(|c| match rank {
            0 => Ok(Some(c.create_at(
                dir_ino,
                &name,
                &OpenOptions::create_new(0o644),
            )?)),
            _ => Ok(None),
        });
        let f = self.step(|c| match made.flatten() {
            Some(f) => Ok(f),
            None => Ok(c.open(&path, &rw)?),
        });
        let create = (t0.unwrap_or_else(Instant::now), Instant::now());
        self.now(|_| Ok(f.map(|f| f.close()).transpose()?));
        // Open: everyone opens the existing file.
        let t0 = self.step(|_| Ok(Instant::now()));
        let f = self.now(|c| Ok(c.open(&path, &rw)?));
        let open = (t0.unwrap_or_else(Instant::now), Instant::now());
        // Resize: client 0 sets the size, then the others see it.
        let t0 = self.step(|_| Ok(Instant::now()));
        self.now(|_| match (&f, rank) {
            (Some(f), 0) => Ok(f.set_len(size)?),
            _ => Ok(()),
        });
        self.step(|_| {
            let seen = f.as_ref().map(|f| f.attr()).transpose()?.map(|a| a.size);
            match seen {
                Some(s) if s != size => {
                    bail!("{path}: client {rank} sees size {s} after resize to {size}")
                }
                _ => Ok(()),
            }
        });
        let resize = (t0.unwrap_or_else(Instant::now), Instant::now());
        self.now(|_| Ok(f.map(|f| f.close()).transpose()?));
        self.step(|c| match rank {
            0 => Ok(c.unlink_at(dir_ino, &name).map(|_| ())?),
            _ => Ok(()),
        });
        [create, open, resize]
    }
}

fn summarize(per_client: &[Vec<Spans3>], op: usize) -> Collective {
    let rounds = per_client.iter().map(Vec::len).min().unwrap_or(0);
    if rounds == 0 {
        return Collective::default();
    }
    let (mut wall, mut own, mut count) = (0.0, 0.0, 0usize);
    for r in 0..rounds {
        let spans = per_client.iter().map(|c| c[r][op]);
        let first = spans
            .clone()
            .map(|s| s.0)
            .min()
            .expect("one client at least");
        let last = spans
            .clone()
            .map(|s| s.1)
            .max()
            .expect("one client at least");
        wall += (last - first).as_secs_f64();
        for (s, e) in spans {
            own += (e - s).as_secs_f64();
            count += 1;
        }
    }
    Collective {
        mean_s: wall / rounds as f64,
        client_latency_s: own / count as f64,
    }
}

// ---- per-client files (mdtest-easy) ----

/// Create (+ write), stat, read (with `--file-bytes`) and remove of `--files` files per
/// client, client `r` in `dirs[r]`.
fn trio(
    clients: &[Client],
    a: &MdArgs,
    dirs: &[(InodeId, String)],
    label: &str,
    content: &Content,
) -> Result<Trio> {
    let create = files_phase(
        clients,
        a,
        dirs,
        &format!("{label} create"),
        |c, (d, _), r, i| {
            let name = file_name(r, i);
            let f = c.create_at(d, &name, &OpenOptions::create_new(0o644))?;
            if content.bytes > 0 {
                f.write_at(0, &content.fill(r, i))?;
            }
            f.close()?;
            Ok(())
        },
    )?;
    let stat = files_phase(
        clients,
        a,
        dirs,
        &format!("{label} stat"),
        |c, (d, _), r, i| {
            c.lookup(d, &file_name(r, i))?;
            Ok(())
        },
    )?;
    let read = if content.bytes > 0 {
        Some(files_phase(
            clients,
            a,
            dirs,
            &format!("{label} read"),
            |c, (_, path), r, i| {
                let name = file_name(r, i);
                // By path, as a program opens a file: one round trip (OpenPath).
                let f = c.open(&format!("{path}/{name}"), &OpenOptions::read_only())?;
                let mut buf = vec![0u8; content.bytes as usize + 1];
                let mut got = 0;
                while got < buf.len() {
                    let n = f.read_at(got as u64, &mut buf[got..])?;
                    if n == 0 {
                        break;
                    }
                    got += n;
                }
                f.close()?;
                content.check(r, i, &name, &buf[..got])
            },
        )?)
    } else {
        None
    };
    let remove = files_phase(
        clients,
        a,
        dirs,
        &format!("{label} remove"),
        |c, (d, _), r, i| Ok(c.unlink_at(d, &file_name(r, i)).map(|_| ())?),
    )?;
    Ok(Trio {
        create,
        stat,
        read,
        remove,
    })
}

/// Runs `op` on every file of every client at once; rate over the whole phase.
fn files_phase(
    clients: &[Client],
    a: &MdArgs,
    dirs: &[(InodeId, String)],
    label: &str,
    op: impl Fn(&Client, (InodeId, &str), u32, u32) -> Result<()> + Sync,
) -> Result<Rate> {
    let n = clients.len();
    let barrier = Barrier::new(n);
    let pb = progress_ops(n as u64 * a.files as u64, label);
    let results: Vec<Result<Span>> = std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(rank, c)| {
                let (barrier, pb, op) = (&barrier, &pb, &op);
                let dir = (dirs[rank].0, dirs[rank].1.as_str());
                s.spawn(move || {
                    barrier.wait();
                    timed_ops(a.files, pb, |i| op(c, dir, rank as u32, i))
                })
            })
            .collect();
        join_all(handles)
    });
    pb.finish_and_clear();
    rate_of(results)
}

/// One client's phase: when it started and ended, and the time spent in its operations.
struct Span {
    start: Instant,
    end: Instant,
    ops: u64,
    busy: Duration,
}

fn timed_ops(count: u32, pb: &ProgressBar, mut op: impl FnMut(u32) -> Result<()>) -> Result<Span> {
    let start = Instant::now();
    for i in 0..count {
        op(i)?;
        pb.inc(1);
    }
    let end = Instant::now();
    Ok(Span {
        start,
        end,
        ops: count as u64,
        busy: end - start,
    })
}

fn rate_of(results: Vec<Result<Span>>) -> Result<Rate> {
    let spans = results.into_iter().collect::<Result<Vec<_>>>()?;
    let first = spans.iter().map(|s| s.start).min();
    let last = spans.iter().map(|s| s.end).max();
    let (Some(first), Some(last)) = (first, last) else {
        bail!("no clients ran");
    };
    let ops: u64 = spans.iter().map(|s| s.ops).sum();
    let busy: f64 = spans.iter().map(|s| s.busy.as_secs_f64()).sum();
    let wall = (last - first).as_secs_f64().max(1e-9);
    Ok(Rate {
        ops_s: ops as f64 / wall,
        latency_s: busy / ops.max(1) as f64,
    })
}

// ---- same-run references ----

/// Mean seconds of one small write + fdatasync of a file in `dir`.
pub fn local_fsync_s(dir: &Path) -> Result<f64> {
    use std::os::unix::fs::FileExt;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let f = tempfile::tempfile_in(dir)
        .with_context(|| format!("cannot make a temporary file in {}", dir.display()))?;
    let block = [0x5au8; 512];
    // The first sync allocates the block; the timed ones overwrite it, as a log does.
    f.write_all_at(&block, 0)?;
    f.sync_all()?;
    let t0 = Instant::now();
    for _ in 0..FSYNC_SAMPLES {
        f.write_all_at(&block, 0)?;
        f.sync_data()?;
    }
    Ok(t0.elapsed().as_secs_f64() / FSYNC_SAMPLES as f64)
}

/// The create (+ write + close), stat, [read] and remove pattern on a local directory:
/// one subdirectory per client, or one for all with `--shared-dir`.
fn local_pattern(dir: &Path, a: &MdArgs, content: &Content) -> Result<Trio> {
    let top = dir.join(format!("stripefs-md-{:x}", crate::util::seed()));
    let dirs = (0..a.clients)
        .map(|r| {
            let d = if a.shared_dir {
                top.join("shared")
            } else {
                top.join(format!("rank{r}"))
            };
            std::fs::create_dir_all(&d)
                .with_context(|| format!("cannot create {}", d.display()))?;
            Ok(d)
        })
        .collect::<Result<Vec<_>>>()?;
    let r = local_trio(&dirs, a, content);
    let _ = std::fs::remove_dir_all(&top);
    r
}

fn local_trio(dirs: &[PathBuf], a: &MdArgs, content: &Content) -> Result<Trio> {
    let phase = |name: &str| {
        local_phase(dirs, a, &format!("local {name}"), |p, r, i| {
            fs_op(name, p, r, i, content)
        })
    };
    Ok(Trio {
        create: phase("create")?,
        stat: phase("stat")?,
        read: if content.bytes > 0 {
            Some(phase("read")?)
        } else {
            None
        },
        remove: phase("remove")?,
    })
}

/// One file operation of phase `phase` with plain system calls (the local baseline and
/// the client processes of `--mount`).
fn fs_op(phase: &str, p: &Path, rank: u32, i: u32, content: &Content) -> Result<()> {
    use std::io::{Read, Write};
    let what = || format!("{phase} {}", p.display());
    match phase {
        "create" => {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(p)
                .with_context(what)?;
            if content.bytes > 0 {
                f.write_all(&content.fill(rank, i)).with_context(what)?;
            }
            crate::worker::close_file(f).with_context(what)
        }
        "stat" => std::fs::metadata(p).map(drop).with_context(what),
        "read" => {
            let mut f = std::fs::File::open(p).with_context(what)?;
            let mut buf = Vec::with_capacity(content.bytes as usize + 1);
            f.read_to_end(&mut buf).with_context(what)?;
            crate::worker::close_file(f).with_context(what)?;
            content.check(rank, i, &p.display(), &buf)
        }
        "remove" => std::fs::remove_file(p).with_context(what),
        _ => bail!("unknown md phase {phase:?}"),
    }
}

fn local_phase(
    dirs: &[PathBuf],
    a: &MdArgs,
    label: &str,
    op: impl Fn(&Path, u32, u32) -> Result<()> + Sync,
) -> Result<Rate> {
    let barrier = Barrier::new(dirs.len());
    let pb = progress_ops(dirs.len() as u64 * a.files as u64, label);
    let results: Vec<Result<Span>> = std::thread::scope(|s| {
        let handles: Vec<_> = dirs
            .iter()
            .enumerate()
            .map(|(rank, dir)| {
                let (barrier, pb, op) = (&barrier, &pb, &op);
                s.spawn(move || {
                    barrier.wait();
                    timed_ops(a.files, pb, |i| {
                        op(&dir.join(file_name(rank as u32, i)), rank as u32, i)
                    })
                })
            })
            .collect();
        join_all(handles)
    });
    pb.finish_and_clear();
    rate_of(results)
}

// ---- through a mount, one process per client ----

/// The job of one client process of `--mount`: its files are `{dir}/f{rank}.{i}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MountSpec {
    pub rank: u32,
    pub dir: PathBuf,
    pub files: u32,
    pub file_bytes: u64,
    pub seed: u64,
}

/// One phase (create, stat, read or remove) of one client process, on all its files.
pub fn mount_phase(s: &MountSpec, phase: &str) -> Result<Done> {
    let content = Content::of(s.seed, s.files, s.file_bytes);
    for i in 0..s.files {
        let p = s.dir.join(file_name(s.rank, i));
        fs_op(phase, &p, s.rank, i, &content)?;
    }
    let read = matches!(phase, "create" | "read");
    Ok(Done {
        ops: s.files as u64,
        bytes: if read {
            s.files as u64 * s.file_bytes
        } else {
            0
        },
        busy_s: 0.0,
    })
}

/// The file phases through the mount at `mount`: directories per client (unless
/// `--shared-dir`), then one shared directory, made natively in the run directory.
fn mount_measure(
    admin: &Client,
    a: &MdArgs,
    run_dir: &str,
    mount: &Path,
    seed: u64,
) -> Result<(Option<Trio>, Trio)> {
    let own = if a.shared_dir {
        None
    } else {
        let names: Vec<String> = (0..a.clients).map(|r| format!("mount-rank{r}")).collect();
        Some(mount_trio(admin, a, run_dir, mount, &names, seed)?)
    };
    let names = vec!["mount-shared".to_string(); a.clients as usize];
    let shared = mount_trio(admin, a, run_dir, mount, &names, seed)?;
    Ok((own, shared))
}

fn mount_trio(
    admin: &Client,
    a: &MdArgs,
    run_dir: &str,
    mount: &Path,
    names: &[String],
    seed: u64,
) -> Result<Trio> {
    let mut specs = Vec::with_capacity(names.len());
    for (rank, name) in names.iter().enumerate() {
        let path = format!("{run_dir}/{name}");
        if admin.stat(&path).is_err() {
            admin
                .mkdir(&path, 0o755)
                .with_context(|| format!("cannot create {path}"))?;
        }
        let dir = mount.join(path.trim_start_matches('/'));
        if let Err(e) = std::fs::metadata(&dir) {
            bail!(
                "--mount {}: {} (made through the cluster) is not there ({e}); is it a stripefs mount of this cluster?",
                mount.display(),
                dir.display()
            );
        }
        specs.push(Spec::Md(MountSpec {
            rank: rank as u32,
            dir,
            files: a.files,
            file_bytes: a.file_bytes,
            seed,
        }));
    }
    let mut workers = Workers::start(&specs)?;
    let mut phase = |name: &str| -> Result<Rate> {
        let (secs, done) = workers.phase(name)?;
        Ok(rate_of_done(secs, &done))
    };
    Ok(Trio {
        create: phase("create")?,
        stat: phase("stat")?,
        read: if a.file_bytes > 0 {
            Some(phase("read")?)
        } else {
            None
        },
        remove: phase("remove")?,
    })
}

/// All processes' operations over the phase's wall time (common start to last finish);
/// latency is the mean of each process's busy time per operation.
fn rate_of_done(secs: f64, done: &[Done]) -> Rate {
    let ops: u64 = done.iter().map(|d| d.ops).sum();
    let busy: f64 = done.iter().map(|d| d.busy_s).sum();
    Rate {
        ops_s: ops as f64 / secs.max(1e-9),
        latency_s: busy / ops.max(1) as f64,
    }
}

// ---- output ----

fn report_json(a: &MdArgs, m: &Measured, base: Option<&Trio>, fsync_s: f64) -> serde_json::Value {
    let [cc, co, cr] = &m.coll;
    let (own, shared) = (m.own.as_ref(), &m.shared);
    let mown = m.mount.as_ref().and_then(|(o, _)| o.as_ref());
    let mshared = m.mount.as_ref().map(|(_, s)| s);
    json!({
        "benchmark": "md",
        "clients": a.clients,
        "files_per_client": a.files,
        "iterations": a.iterations,
        "file_bytes": a.file_bytes,
        "shared_dir": a.shared_dir,
        "verified": (a.file_bytes > 0).then_some(true),
        "create_ops_s": own.map(|t| t.create.ops_s),
        "stat_ops_s": own.map(|t| t.stat.ops_s),
        "read_ops_s": own.and_then(|t| t.read).map(|r| r.ops_s),
        "remove_ops_s": own.map(|t| t.remove.ops_s),
        "create_latency_s": own.map(|t| t.create.latency_s),
        "stat_latency_s": own.map(|t| t.stat.latency_s),
        "read_latency_s": own.and_then(|t| t.read).map(|r| r.latency_s),
        "remove_latency_s": own.map(|t| t.remove.latency_s),
        "shared_dir_create_ops_s": shared.create.ops_s,
        "shared_dir_stat_ops_s": shared.stat.ops_s,
        "shared_dir_read_ops_s": shared.read.map(|r| r.ops_s),
        "shared_dir_remove_ops_s": shared.remove.ops_s,
        "shared_dir_create_latency_s": shared.create.latency_s,
        "shared_dir_stat_latency_s": shared.stat.latency_s,
        "shared_dir_read_latency_s": shared.read.map(|r| r.latency_s),
        "shared_dir_remove_latency_s": shared.remove.latency_s,
        "collective_create_s": cc.mean_s,
        "collective_open_s": co.mean_s,
        "collective_resize_s": cr.mean_s,
        "collective_create_ops_s": per_s(cc.mean_s),
        "collective_open_ops_s": per_s(co.mean_s),
        "collective_resize_ops_s": per_s(cr.mean_s),
        "collective_create_latency_s": cc.client_latency_s,
        "collective_open_latency_s": co.client_latency_s,
        "collective_resize_latency_s": cr.client_latency_s,
        "local_fsync_s": fsync_s,
        "mount": a.mount.as_ref().map(|d| d.display().to_string()),
        "mount_create_ops_s": mown.map(|t| t.create.ops_s),
        "mount_stat_ops_s": mown.map(|t| t.stat.ops_s),
        "mount_read_ops_s": mown.and_then(|t| t.read).map(|r| r.ops_s),
        "mount_remove_ops_s": mown.map(|t| t.remove.ops_s),
        "mount_shared_dir_create_ops_s": mshared.map(|t| t.create.ops_s),
        "mount_shared_dir_stat_ops_s": mshared.map(|t| t.stat.ops_s),
        "mount_shared_dir_read_ops_s": mshared.and_then(|t| t.read).map(|r| r.ops_s),
        "mount_shared_dir_remove_ops_s": mshared.map(|t| t.remove.ops_s),
        "baseline_dir": a.baseline.as_ref().map(|d| d.display().to_string()),
        "baseline_create_ops_s": base.map(|b| b.create.ops_s),
        "baseline_stat_ops_s": base.map(|b| b.stat.ops_s),
        "baseline_read_ops_s": base.and_then(|b| b.read).map(|r| r.ops_s),
        "baseline_remove_ops_s": base.map(|b| b.remove.ops_s),
    })
}

fn per_s(secs: f64) -> f64 {
    if secs > 0.0 {
        1.0 / secs
    } else {
        0.0
    }
}

fn print_table(a: &MdArgs, m: &Measured, base: Option<&Trio>, fsync_s: f64) {
    println!(
        "bench md: {} clients x {} files of {} bytes{}, {} collective rounds",
        a.clients,
        a.files,
        a.file_bytes,
        if a.shared_dir {
            ", shared directory only"
        } else {
            ""
        },
        a.iterations
    );
    println!(
        "{:<20} {:>12} {:>11} {:>12} {:>13}",
        "operation", "ops/s", "mean ms", "baseline/s", "% baseline"
    );
    // The baseline runs the arrangement of --shared-dir, else a directory per client.
    let base_of = |own: bool| base.filter(|_| own != a.shared_dir);
    let mut rows = Vec::new();
    let mut add = |prefix: &str, t: Option<&Trio>, b: Option<&Trio>| {
        let Some(t) = t else { return };
        let mut ops = vec![
            ("create", t.create, b.map(|b| b.create.ops_s)),
            ("stat", t.stat, b.map(|b| b.stat.ops_s)),
        ];
        if let Some(r) = t.read {
            ops.push(("read", r, b.and_then(|b| b.read).map(|r| r.ops_s)));
        }
        ops.push(("remove", t.remove, b.map(|b| b.remove.ops_s)));
        for (op, r, b) in ops {
            rows.push((format!("{prefix}{op}"), r, b));
        }
    };
    add("", m.own.as_ref(), base_of(true));
    add("shared ", Some(&m.shared), base_of(false));
    if let Some((own, shared)) = &m.mount {
        add("mount ", own.as_ref(), base_of(true));
        add("mount shared ", Some(shared), base_of(false));
    }
    for (name, r, b) in rows {
        println!(
            "{:<20} {:>12.0} {:>11.3} {:>12} {:>13}",
            name,
            r.ops_s,
            r.latency_s * 1e3,
            b.map(|b| format!("{b:.0}")).unwrap_or("-".into()),
            crate::util::pct(r.ops_s, b)
        );
    }
    for (name, c) in ["collective create", "collective open", "collective resize"]
        .iter()
        .zip(&m.coll)
    {
        println!(
            "{:<20} {:>12.0} {:>11.3}   (wall ms per collective op {:.3})",
            name,
            per_s(c.mean_s),
            c.client_latency_s * 1e3,
            c.mean_s * 1e3
        );
    }
    println!(
        "local fsync (small write + fdatasync): {:.3} ms; durable creates per local sync time: {:.2}",
        fsync_s * 1e3,
        m.own.as_ref().unwrap_or(&m.shared).create.ops_s * fsync_s
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file holds bytes of its own: another file's bytes, a short file or a flipped
    /// byte fail verification; odd sizes work.
    #[test]
    fn small_file_contents_are_distinct_and_verified() {
        let c = Content::of(42, 2500, 3901);
        assert_eq!(c.offset(0, 1), 3901);
        assert_eq!(c.offset(1, 0), 2500 * 3901);
        let mine = c.fill(3, 17);
        assert_eq!(mine.len(), 3901);
        assert!(c.check(3, 17, &"f3.17", &mine).is_ok());
        assert!(
            c.check(3, 18, &"f3.18", &mine).is_err(),
            "neighbour's bytes"
        );
        assert!(
            c.check(2, 17, &"f2.17", &mine).is_err(),
            "another client's file"
        );
        assert!(c.check(3, 17, &"f3.17", &mine[..3900]).is_err(), "short");
        let mut bad = mine.clone();
        bad[3900] ^= 1;
        assert!(c.check(3, 17, &"f3.17", &bad).is_err(), "last byte flipped");
    }
}
