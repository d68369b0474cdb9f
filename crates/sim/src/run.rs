//! One seed's run: a plan of steps (client operations and faults) made from the seed,
//! executed against the simulated cluster with the real client library, each outcome
//! checked against the model.

use crate::cluster::Servers;
use crate::model::{pattern, MFile, Pending};
use crate::net::Net;
use crate::rng::Rng;
use crate::{Options, Stats};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use stripefs_client::{Client, File, OpenOptions};
use stripefs_wire::{Cred, ErrorCode, WireError};

/// Most bytes a simulated file holds (a few stripes on every server).
pub const MAX_FILE_BYTES: usize = 96 << 10;
/// Longest single write.
const MAX_WRITE_BYTES: u64 = 24 << 10;
/// Most handles open at once (over all clients).
const MAX_HANDLES: usize = 4;
/// The block size of checksums and of whole-block writes.
const BLOCK: u64 = stripefs_wire::BLOCK_BYTES as u64;
/// Directories of the namespace; files are named `f0`..`f5` in each.
const DIRS: [&str; 3] = ["/", "/d0", "/d1"];
const NAMES: u32 = 6;

/// One step of a plan. Numbers pick among what exists when the step runs, so that a
/// plan with steps removed (when shortening a reproduction) still runs.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    Create {
        client: u8,
        dir: u8,
        name: u8,
    },
    Open {
        client: u8,
        pick: u32,
    },
    Write {
        pick: u32,
        offset: u32,
        len: u32,
    },
    Fsync {
        pick: u32,
    },
    Close {
        pick: u32,
    },
    SetLen {
        pick: u32,
        size: u32,
    },
    Truncate {
        client: u8,
        pick: u32,
        size: u32,
    },
    Rename {
        client: u8,
        pick: u32,
        dir: u8,
        name: u8,
    },
    /// Two names swap their files (renameat2 RENAME_EXCHANGE), in one commit.
    Exchange {
        client: u8,
        a: u32,
        b: u32,
    },
    Link {
        client: u8,
        pick: u32,
        dir: u8,
        name: u8,
    },
    Unlink {
        client: u8,
        pick: u32,
    },
    Read {
        client: u8,
        pick: u32,
    },
    CrashMeta,
    PowerCutMeta,
    /// The metadata server checkpoints its log and purges deleted files' objects.
    Checkpoint,
    CrashData {
        server: u8,
    },
    PowerCut {
        server: u8,
    },
    /// The server's disk is full for the next `steps` steps (`slack` bytes still fit).
    NoSpace {
        server: u8,
        steps: u8,
        slack: u16,
    },
    /// One of the server's next few disk writes fails with EIO.
    IoError {
        server: u8,
        pass: u8,
        cut_short: bool,
    },
    Partition {
        client: u8,
        server: u8,
    },
    Heal,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

/// Makes the plan of `seed`.
pub fn plan(seed: u64, opts: &Options) -> Vec<Step> {
    let mut rng = Rng::new(seed);
    let clients = opts.clients as u64;
    let servers = opts.data_servers as u64;
    let mut steps = Vec::with_capacity(opts.steps);
    for _ in 0..opts.steps {
        let c = rng.below(clients) as u8;
        let pick = rng.next_u64() as u32;
        let dir = rng.below(DIRS.len() as u64) as u8;
        let name = rng.below(u64::from(NAMES)) as u8;
        let roll = rng.below(1000);
        let step = match roll {
            0..=89 => Step::Create {
                client: c,
                dir,
                name,
            },
            90..=189 => Step::Open { client: c, pick },
            190..=399 => Step::Write {
                pick,
                offset: rng.next_u64() as u32,
                len: rng.next_u64() as u32,
            },
            400..=469 => Step::Fsync { pick },
            470..=539 => Step::Close { pick },
            540..=564 => Step::SetLen {
                pick,
                size: rng.next_u64() as u32,
            },
            565..=594 => Step::Truncate {
                client: c,
                pick,
                size: rng.next_u64() as u32,
            },
            595..=634 => Step::Rename {
                client: c,
                pick,
                dir,
                name,
            },
            635..=649 => Step::Exchange {
                client: c,
                a: pick,
                b: rng.next_u64() as u32,
            },
            650..=689 => Step::Link {
                client: c,
                pick,
                dir,
                name,
            },
            690..=739 => Step::Unlink { client: c, pick },
            740..=879 => Step::Read { client: c, pick },
            880..=889 => Step::CrashMeta,
            890..=899 => Step::PowerCutMeta,
            900..=919 => Step::CrashData {
                server: rng.below(servers) as u8,
            },
            920..=949 => Step::PowerCut {
                server: rng.below(servers) as u8,
            },
            950..=957 => Step::NoSpace {
                server: rng.below(servers) as u8,
                steps: 1 + rng.below(8) as u8,
                slack: rng.next_u64() as u16,
            },
            958..=964 => Step::IoError {
                server: rng.below(servers) as u8,
                pass: rng.below(4) as u8,
                cut_short: rng.below(2) == 1,
            },
            965..=979 => Step::Partition {
                client: c,
                server: rng.below(servers + 1) as u8,
            },
            980..=989 => Step::Checkpoint,
            _ => Step::Heal,
        };
        steps.push(step);
    }
    steps
}

/// A broken promise found by the checker.
#[derive(Clone, Debug)]
pub struct Violation {
    /// Index of the step after which it was found.
    pub step: usize,
    pub message: String,
}

/// What one run did.
#[derive(Default, Debug)]
pub struct Outcome {
    pub ops: u64,
    pub violation: Option<Violation>,
}

struct Handle {
    file: usize,
    f: File,
    /// Writes and truncations since the last successful fsync, in order.
    pending: Vec<Pending>,
    /// How many of `pending` (the first ones) a power cut may have undone: a close does
    /// not promise them, an fsync does (a data server's restart must fail it).
    cut: usize,
}

struct Sim<'a> {
    seed: u64,
    opts: &'a Options,
    servers: Arc<Servers>,
    net: Arc<Net>,
    clients: Vec<Client>,
    endpoints: Vec<Arc<crate::net::Endpoint>>,
    files: Vec<MFile>,
    /// Path -> file index.
    names: BTreeMap<String, usize>,
    handles: Vec<Handle>,
    /// Steps each data server's disk stays full.
    full: Vec<u32>,
    stats: &'a Stats,
    ops: u64,
}

fn path_of(dir: u8, name: u8) -> String {
    let d = DIRS[dir as usize % DIRS.len()];
    if d == "/" {
        format!("/f{name}")
    } else {
        format!("{d}/f{name}")
    }
}

/// Errors that say the request may or may not have been carried out (or a server was
/// unreachable): the model must allow both outcomes.
fn transport_error(e: &WireError) -> bool {
    matches!(
        e.code,
        ErrorCode::Timeout
            | ErrorCode::Unreachable
            | ErrorCode::Busy
            | ErrorCode::Io
            // A data server restarted since the handle's writes: they may be lost.
            | ErrorCode::ServerRestarted
    )
}

/// Runs `steps` of `seed`; the first violation ends the run.
pub fn run(seed: u64, steps: &[Step], opts: &Options, stats: &Stats) -> Result<Outcome, String> {
    let servers = Arc::new(Servers::start(opts.data_servers, seed, opts.canary)?);
    let net = Net::new(
        servers.clone(),
        seed,
        Arc::new(Stats::default()),
        opts.without.clone(),
    );
    let mut clients = Vec::new();
    let mut endpoints = Vec::new();
    // Clients connect before the faults start.
    net.set_clean(true);
    for c in 0..opts.clients {
        let end = net.endpoint(c as u8);
        endpoints.push(end.clone());
        let client = Client::connect_via(&servers.cluster, end)
            .map_err(|e| format!("simulated client {c} cannot connect: {e}"))?
            .with_cred(Cred::root());
        clients.push(client);
    }
    net.set_clean(false);
    let mut sim = Sim {
        seed,
        opts,
        servers: servers.clone(),
        net: net.clone(),
        clients,
        endpoints,
        files: Vec::new(),
        names: BTreeMap::new(),
        handles: Vec::new(),
        full: vec![0; opts.data_servers],
        stats,
        ops: 0,
    };
    let r = sim.setup().and_then(|()| sim.execute(steps));
    let outcome = match r {
        Ok(()) => Outcome {
            ops: sim.ops,
            violation: None,
        },
        Err(v) => Outcome {
            ops: sim.ops,
            violation: Some(v),
        },
    };
    // The network's message fault counts join the run's.
    stats.merge(&net.stats);
    let handles = std::mem::take(&mut sim.handles);
    drop(handles);
    drop(sim);
    servers.stop();
    Ok(outcome)
}

impl Sim<'_> {
    fn setup(&mut self) -> Result<(), Violation> {
        self.net.set_clean(true);
        for d in &DIRS[1..] {
            self.clients[0].mkdir(d, 0o755).map_err(|e| Violation {
                step: 0,
                message: format!("setup: mkdir {d}: {e}"),
            })?;
        }
        self.net.set_clean(false);
        Ok(())
    }

    fn execute(&mut self, steps: &[Step]) -> Result<(), Violation> {
        let trace = std::env::var_os("STRIPEFS_SIM_TRACE").is_some();
        for (i, step) in steps.iter().enumerate() {
            if trace {
                eprintln!(
                    "sim seed {} step {i}: {step} (handles {:?})",
                    self.seed,
                    self.handles
                        .iter()
                        .map(|h| self.files[h.file].ino.0)
                        .collect::<Vec<_>>()
                );
            }
            self.servers.advance(Duration::from_millis(1));
            self.step(*step)
                .map_err(|message| Violation { step: i, message })?;
            // A step's background I/O (write-behind, readahead) finishes before the next
            // step, so that no request of one step races one of the next: the order in
            // which requests reach the network, and with it every fault the network
            // draws, depends on the seed alone, never on thread timing.
            for c in &self.clients {
                c.quiesce();
            }
        }
        // The end: everything settles, every handle closes, and then everything the
        // model knows is checked once more, after one more crash of the metadata server.
        let last = steps.len();
        self.quiesce();
        self.net.heal();
        self.net.set_clean(true);
        for s in 0..self.full.len() {
            self.servers.space_back(s);
        }
        for h in std::mem::take(&mut self.handles) {
            let ok = h.f.close().is_ok();
            if ok {
                self.confirm(h.file, &h.pending[h.cut..]);
            }
        }
        self.final_check().map_err(|message| Violation {
            step: last,
            message: format!("final check: {message}"),
        })
    }

    fn final_check(&mut self) -> Result<(), String> {
        self.servers.crash_meta()?;
        self.check_namespace()?;
        let paths: Vec<String> = self.names.keys().cloned().collect();
        for p in paths {
            self.read_check(0, &p)?;
        }
        self.servers
            .check_meta()
            .map_err(|e| format!("metadata check: {e}"))
    }

    fn quiesce(&self) {
        for c in &self.clients {
            c.quiesce();
        }
        for e in &self.endpoints {
            e.flush();
        }
    }

    fn pick_path(&self, pick: u32) -> Option<String> {
        if self.names.is_empty() {
            return None;
        }
        self.names
            .keys()
            .nth(pick as usize % self.names.len())
            .cloned()
    }

    fn has_handle(&self, file: usize) -> bool {
        self.handles.iter().any(|h| h.file == file)
    }

    fn new_file(
        &mut self,
        ino: stripefs_wire::InodeId,
        layout: Option<&stripefs_wire::Layout>,
    ) -> usize {
        let key = self.files.len() as u64 + 1;
        let mut f = MFile::new(key, ino, MAX_FILE_BYTES);
        f.layout = layout.map(|l| {
            (
                u64::from(l.stripe_size_bytes),
                l.servers.iter().map(|s| s.0).collect(),
            )
        });
        self.files.push(f);
        self.files.len() - 1
    }

    fn step(&mut self, step: Step) -> Result<(), String> {
        let kind = match step {
            Step::CrashMeta => Some("crash_meta"),
            Step::PowerCutMeta => Some("power_cut_meta"),
            Step::CrashData { .. } => Some("crash_data"),
            Step::PowerCut { .. } => Some("power_cut"),
            Step::NoSpace { .. } => Some("no_space"),
            Step::IoError { .. } => Some("io_error"),
            Step::Partition { .. } => Some("partition"),
            _ => None,
        };
        if let Some(k) = kind {
            if !self.opts.injects(k) {
                return Ok(());
            }
        }
        match step {
            Step::Create { client, dir, name } => self.create(client as usize, path_of(dir, name)),
            Step::Open { client, pick } => self.open(client as usize, pick),
            Step::Write { pick, offset, len } => self.write(pick, offset, len),
            Step::Fsync { pick } => self.fsync(pick),
            Step::Close { pick } => self.close(pick),
            Step::SetLen { pick, size } => self.set_len(pick, size),
            Step::Truncate { client, pick, size } => self.truncate(client as usize, pick, size),
            Step::Rename {
                client,
                pick,
                dir,
                name,
            } => self.rename(client as usize, pick, path_of(dir, name)),
            Step::Exchange { client, a, b } => self.exchange(client as usize, a, b),
            Step::Link {
                client,
                pick,
                dir,
                name,
            } => self.link(client as usize, pick, path_of(dir, name)),
            Step::Unlink { client, pick } => self.unlink(client as usize, pick),
            Step::Read { client, pick } => {
                let Some(p) = self.pick_path(pick) else {
                    return Ok(());
                };
                let file = self.names[&p];
                if self.has_handle(file) {
                    return Ok(());
                }
                self.quiesce();
                self.read_check(client as usize, &p)
            }
            Step::CrashMeta => {
                self.quiesce();
                self.stats.count("crash_meta");
                self.servers.crash_meta()?;
                self.net.set_clean(true);
                let r = self.check_namespace();
                self.net.set_clean(false);
                r
            }
            Step::PowerCutMeta => {
                self.stats.count("power_cut_meta");
                let cut_seed = crate::rng::mix(self.seed ^ (self.ops << 20) ^ 0xFEED);
                self.servers.power_cut_meta(cut_seed)?;
                self.net.set_clean(true);
                let r = self.check_namespace();
                self.net.set_clean(false);
                r
            }
            Step::Checkpoint => {
                self.servers.checkpoint_meta();
                self.servers.purge();
                Ok(())
            }
            Step::CrashData { server } => {
                self.quiesce();
                self.stats.count("crash_data");
                self.servers
                    .crash_data(server as usize % self.servers.data_servers())
            }
            Step::PowerCut { server } => {
                self.quiesce();
                let s = server as usize % self.servers.data_servers();
                self.stats.count("power_cut");
                let mut torn = false;
                for f in &mut self.files {
                    let before = f.torn_ok;
                    f.torn_ok = false;
                    f.power_cut(s as u32);
                    torn |= f.torn_ok;
                    f.torn_ok |= before;
                }
                if torn {
                    self.stats.count("torn_write");
                }
                for h in &mut self.handles {
                    h.cut = h.pending.len();
                }
                let cut_seed = crate::rng::mix(self.seed ^ (self.ops << 20) ^ s as u64);
                self.servers.power_cut_data(s, cut_seed)
            }
            Step::NoSpace {
                server,
                steps,
                slack,
            } => {
                self.stats.count("no_space");
                let s = server as usize % self.servers.data_servers();
                self.servers.fill_disk(s, u64::from(slack));
                self.full[s] = self.full[s].max(u32::from(steps));
                Ok(())
            }
            Step::IoError {
                server,
                pass,
                cut_short,
            } => {
                self.stats.count("io_error");
                let s = server as usize % self.servers.data_servers();
                self.servers.io_error(s, u32::from(pass), cut_short);
                Ok(())
            }
            Step::Partition { client, server } => {
                self.quiesce();
                self.stats.count("partition");
                let s = server as usize % (self.servers.data_servers() + 1);
                let target = (s > 0).then(|| (s - 1) as u32);
                self.net
                    .partition(client % self.clients.len() as u8, target);
                Ok(())
            }
            Step::Heal => {
                self.quiesce();
                self.net.heal();
                Ok(())
            }
        }
    }

    /// Looks `path` up with faults off: the inode it names, if any.
    fn observe_path(&self, path: &str) -> Result<Option<stripefs_wire::Attr>, String> {
        self.net.set_clean(true);
        let r = self.clients[0].lstat(path);
        self.net.set_clean(false);
        match r {
            Ok(a) => Ok(Some(a)),
            Err(e) if e.code == ErrorCode::NotFound => Ok(None),
            Err(e) => Err(format!("observing {path} with faults off: {e}")),
        }
    }

    fn create(&mut self, c: usize, path: String) -> Result<(), String> {
        if self.names.contains_key(&path) || self.files.len() >= 40 {
            return Ok(());
        }
        self.ops += 1;
        match self.clients[c].create(&path, 0o644) {
            Ok(f) => {
                let idx = self.new_file(f.ino(), Some(f.layout()));
                self.names.insert(path, idx);
                if self.handles.len() < MAX_HANDLES {
                    self.handles.push(Handle {
                        file: idx,
                        f,
                        pending: Vec::new(),
                        cut: 0,
                    });
                } else {
                    let _ = f.close();
                }
                Ok(())
            }
            Err(e) if transport_error(&e) => {
                if let Some(a) = self.observe_path(&path)? {
                    let idx = self.new_file(a.ino, a.layout.as_ref());
                    self.names.insert(path, idx);
                }
                Ok(())
            }
            Err(e) => Err(format!("create {path}: unexpected error {e}")),
        }
    }

    fn open(&mut self, c: usize, pick: u32) -> Result<(), String> {
        let Some(p) = self.pick_path(pick) else {
            return Ok(());
        };
        let file = self.names[&p];
        if self.handles.len() >= MAX_HANDLES || self.has_handle(file) || self.files[file].damaged {
            return Ok(());
        }
        self.ops += 1;
        match self.clients[c].open(&p, &OpenOptions::new().read(true).write(true)) {
            Ok(f) => {
                if f.ino() != self.files[file].ino {
                    return Err(format!(
                        "open {p}: inode {} where the model has {}",
                        f.ino().0,
                        self.files[file].ino.0
                    ));
                }
                self.handles.push(Handle {
                    file,
                    f,
                    pending: Vec::new(),
                    cut: 0,
                });
                Ok(())
            }
            Err(e) if transport_error(&e) => Ok(()),
            Err(e) => Err(format!("open {p}: unexpected error {e}")),
        }
    }

    fn write(&mut self, pick: u32, offset: u32, len: u32) -> Result<(), String> {
        if self.handles.is_empty() {
            return Ok(());
        }
        let h = pick as usize % self.handles.len();
        let file = self.handles[h].file;
        let seed = self.seed;
        let m = &mut self.files[file];
        if m.damaged {
            return Ok(());
        }
        let Some(g) = m.take_gen() else {
            return Ok(());
        };
        let max = m.max_bytes();
        let mut offset = u64::from(offset) % max;
        let mut len = 1 + u64::from(len) % MAX_WRITE_BYTES.min(max - offset);
        // A quarter of the writes are of whole blocks, as most programs' are: a client
        // on the server's host writes those through its pipe.
        if pick >> 30 == 3 {
            offset -= offset % BLOCK;
            len = (len - len % BLOCK).max(BLOCK).min(max - offset);
        }
        let data: Vec<u8> = (offset..offset + len)
            .map(|i| pattern(seed, m.key, g, i))
            .collect();
        m.write_sent(offset, len, g);
        self.ops += 1;
        let r = self.handles[h].f.write_at(offset, &data);
        match r {
            Ok(()) => {
                self.handles[h].pending.push(Pending {
                    offset,
                    len,
                    gen: g,
                });
                Ok(())
            }
            // The write may have reached some servers: the model allows old or new. The
            // error may also be an earlier write's (write-behind): none of the handle's
            // unconfirmed writes can be confirmed any more.
            Err(e) if e.code == ErrorCode::NoSpace || transport_error(&e) => {
                self.handles[h].pending.clear();
                self.handles[h].cut = 0;
                Ok(())
            }
            Err(e) => self.data_error(file, "write", e),
        }
    }

    /// An error from a data operation that is not a transport error: a checksum error is
    /// allowed only on a file a power cut tore.
    fn data_error(&mut self, file: usize, what: &str, e: WireError) -> Result<(), String> {
        let m = &mut self.files[file];
        if e.code == ErrorCode::Checksum && m.torn_ok {
            m.damaged = true;
            return Ok(());
        }
        Err(format!("{what} of inode {}: unexpected error {e}", m.ino.0))
    }

    /// A handle's writes and truncations happened (a successful fsync or close): the
    /// model takes them as they were, and the size follows them in order.
    fn confirm(&mut self, file: usize, pending: &[Pending]) {
        let m = &mut self.files[file];
        for p in pending {
            m.confirm(p);
            if p.gen == 0 {
                m.size_is(p.offset);
            } else {
                m.size_lo = m.size_lo.max(p.offset + p.len);
                m.size_hi = m.size_hi.max(m.size_lo);
            }
        }
    }

    fn fsync(&mut self, pick: u32) -> Result<(), String> {
        if self.handles.is_empty() {
            return Ok(());
        }
        let h = pick as usize % self.handles.len();
        self.ops += 1;
        let r = self.handles[h].f.fsync();
        let file = self.handles[h].file;
        let pending = std::mem::take(&mut self.handles[h].pending);
        self.handles[h].cut = 0;
        match r {
            Ok(()) => {
                self.confirm(file, &pending);
                self.files[file].synced(&pending);
                Ok(())
            }
            // What the failed fsync covered stays uncertain for good.
            Err(e) if e.code == ErrorCode::NoSpace || transport_error(&e) => Ok(()),
            Err(e) => self.data_error(file, "fsync", e),
        }
    }

    fn close(&mut self, pick: u32) -> Result<(), String> {
        if self.handles.is_empty() {
            return Ok(());
        }
        let h = self.handles.remove(pick as usize % self.handles.len());
        self.ops += 1;
        match h.f.close() {
            Ok(()) => {
                self.confirm(h.file, &h.pending[h.cut..]);
                Ok(())
            }
            Err(e) if e.code == ErrorCode::NoSpace || transport_error(&e) => Ok(()),
            Err(e) => self.data_error(h.file, "close", e),
        }
    }

    fn set_len(&mut self, pick: u32, size: u32) -> Result<(), String> {
        if self.handles.is_empty() {
            return Ok(());
        }
        let h = pick as usize % self.handles.len();
        let file = self.handles[h].file;
        let size = u64::from(size) % self.files[file].max_bytes();
        self.files[file].truncate_sent(size);
        self.ops += 1;
        let r = self.handles[h].f.set_len(size);
        let p = Pending {
            offset: size,
            len: 0,
            gen: 0,
        };
        match r {
            Ok(()) => {
                self.handles[h].pending.push(p);
                self.files[file].confirm(&p);
                self.files[file].cut_durable(size);
                Ok(())
            }
            // As for a write: an earlier write's error may be the one reported.
            Err(e) if e.code == ErrorCode::NoSpace || transport_error(&e) => {
                self.handles[h].pending.clear();
                self.handles[h].cut = 0;
                Ok(())
            }
            Err(e) => self.data_error(file, "truncate (handle)", e),
        }
    }

    fn truncate(&mut self, c: usize, pick: u32, size: u32) -> Result<(), String> {
        let Some(p) = self.pick_path(pick) else {
            return Ok(());
        };
        let file = self.names[&p];
        if self.has_handle(file) || self.files[file].damaged {
            return Ok(());
        }
        let size = u64::from(size) % self.files[file].max_bytes();
        self.files[file].truncate_sent(size);
        self.ops += 1;
        match self.clients[c].truncate(&p, size) {
            Ok(_) => {
                self.confirm(
                    file,
                    &[Pending {
                        offset: size,
                        len: 0,
                        gen: 0,
                    }],
                );
                self.files[file].cut_durable(size);
                Ok(())
            }
            Err(e) if e.code == ErrorCode::NoSpace || transport_error(&e) => Ok(()),
            Err(e) => self.data_error(file, &format!("truncate {p}"), e),
        }
    }

    fn rename(&mut self, c: usize, pick: u32, to: String) -> Result<(), String> {
        let Some(from) = self.pick_path(pick) else {
            return Ok(());
        };
        if from == to {
            return Ok(());
        }
        self.ops += 1;
        let file = self.names[&from];
        // POSIX: a rename between two links of one inode does nothing.
        let same = self.names.get(&to) == Some(&file);
        match self.clients[c].rename(&from, &to) {
            Ok(()) if same => Ok(()),
            Ok(()) => {
                self.names.remove(&from);
                self.names.insert(to, file);
                Ok(())
            }
            Err(e) if transport_error(&e) => {
                let ino = self.files[file].ino;
                let a = self.observe_path(&from)?;
                let b = self.observe_path(&to)?;
                let old_to = self.names.get(&to).map(|&f| self.files[f].ino);
                match (a.map(|a| a.ino), b.map(|b| b.ino)) {
                    (Some(x), y) if x == ino && y == old_to => Ok(()),
                    _ if same => Ok(()),
                    (None, Some(y)) if y == ino => {
                        self.names.remove(&from);
                        self.names.insert(to, file);
                        Ok(())
                    }
                    (x, y) => Err(format!(
                        "rename {from} -> {to} failed ({e}); then {from} is {x:?} and {to} is \
                         {y:?}: neither before ({ino:?}, {old_to:?}) nor after"
                    )),
                }
            }
            Err(e) => Err(format!("rename {from} -> {to}: unexpected error {e}")),
        }
    }

    /// Swaps two names; after a transport error, both names must show the files either
    /// as before or swapped, never anything else (the exchange is one commit).
    fn exchange(&mut self, c: usize, pick_a: u32, pick_b: u32) -> Result<(), String> {
        let (Some(a), Some(b)) = (self.pick_path(pick_a), self.pick_path(pick_b)) else {
            return Ok(());
        };
        if a == b {
            return Ok(());
        }
        self.ops += 1;
        let (fa, fb) = (self.names[&a], self.names[&b]);
        match self.clients[c].exchange(&a, &b) {
            Ok(()) => {
                self.names.insert(a, fb);
                self.names.insert(b, fa);
                Ok(())
            }
            Err(e) if transport_error(&e) => {
                let (ia, ib) = (self.files[fa].ino, self.files[fb].ino);
                let x = self.observe_path(&a)?.map(|x| x.ino);
                let y = self.observe_path(&b)?.map(|y| y.ino);
                if x == Some(ia) && y == Some(ib) {
                    Ok(())
                } else if x == Some(ib) && y == Some(ia) {
                    self.names.insert(a, fb);
                    self.names.insert(b, fa);
                    Ok(())
                } else {
                    Err(format!(
                        "exchange {a} <-> {b} failed ({e}); then {a} is {x:?} and {b} is \
                         {y:?}: neither before ({ia:?}, {ib:?}) nor after"
                    ))
                }
            }
            Err(e) => Err(format!("exchange {a} <-> {b}: unexpected error {e}")),
        }
    }

    fn link(&mut self, c: usize, pick: u32, to: String) -> Result<(), String> {
        let Some(from) = self.pick_path(pick) else {
            return Ok(());
        };
        if self.names.contains_key(&to) {
            return Ok(());
        }
        self.ops += 1;
        let file = self.names[&from];
        match self.clients[c].link(&from, &to) {
            Ok(_) => {
                self.names.insert(to, file);
                Ok(())
            }
            Err(e) if transport_error(&e) => {
                match self.observe_path(&to)? {
                    None => {}
                    Some(a) if a.ino == self.files[file].ino => {
                        self.names.insert(to, file);
                    }
                    Some(a) => {
                        return Err(format!(
                            "link {from} -> {to} failed ({e}); then {to} is inode {}",
                            a.ino.0
                        ))
                    }
                }
                Ok(())
            }
            Err(e) => Err(format!("link {from} -> {to}: unexpected error {e}")),
        }
    }

    fn unlink(&mut self, c: usize, pick: u32) -> Result<(), String> {
        let Some(p) = self.pick_path(pick) else {
            return Ok(());
        };
        self.ops += 1;
        match self.clients[c].unlink(&p) {
            Ok(()) => {
                self.names.remove(&p);
                Ok(())
            }
            Err(e) if transport_error(&e) => {
                if self.observe_path(&p)?.is_none() {
                    self.names.remove(&p);
                }
                Ok(())
            }
            Err(e) => Err(format!("unlink {p}: unexpected error {e}")),
        }
    }

    /// Reads a whole file through a fresh handle and checks size and bytes.
    fn read_check(&mut self, c: usize, p: &str) -> Result<(), String> {
        let file = self.names[p];
        if self.files[file].damaged {
            return Ok(());
        }
        self.ops += 1;
        let f = match self.clients[c].open(p, &OpenOptions::read_only()) {
            Ok(f) => f,
            Err(e) if transport_error(&e) => return Ok(()),
            Err(e) => return Err(format!("open {p} to read: unexpected error {e}")),
        };
        let m = &mut self.files[file];
        if f.ino() != m.ino {
            return Err(format!(
                "{p} is inode {} where the model has {}",
                f.ino().0,
                m.ino.0
            ));
        }
        let size = f.size();
        if size < m.size_lo || size > m.size_hi {
            return Err(format!(
                "{p} (inode {}) has size {size}, allowed {}..={}",
                m.ino.0, m.size_lo, m.size_hi
            ));
        }
        let mut buf = vec![0u8; size as usize];
        let mut got = 0usize;
        while got < buf.len() {
            match f.read_at(got as u64, &mut buf[got..]) {
                Ok(0) => {
                    return Err(format!(
                        "{p} (inode {}) reads {got} of its {size} bytes",
                        m.ino.0
                    ))
                }
                Ok(n) => got += n,
                Err(e) if transport_error(&e) => {
                    let _ = f.close();
                    return Ok(());
                }
                Err(e) => {
                    let _ = f.close();
                    return self.data_error(file, &format!("read {p}"), e);
                }
            }
        }
        let _ = f.close();
        let seed = self.seed;
        let m = &mut self.files[file];
        m.size_is(size);
        m.observe(seed, &buf)
            .map_err(|e| format!("{p} (inode {}, size {size}): {e}", m.ino.0))
    }

    /// Every directory lists exactly the model's entries, with the model's inodes.
    fn check_namespace(&self) -> Result<(), String> {
        for d in DIRS {
            let listed = self.clients[0]
                .readdir(d)
                .map_err(|e| format!("readdir {d} with faults off: {e}"))?;
            let mut got: BTreeMap<String, u64> = BTreeMap::new();
            for e in listed {
                if e.name == "." || e.name == ".." {
                    continue;
                }
                let path = if d == "/" {
                    format!("/{}", e.name)
                } else {
                    format!("{d}/{}", e.name)
                };
                if DIRS.contains(&path.as_str()) {
                    continue;
                }
                got.insert(path, e.ino.0);
            }
            let want: BTreeMap<String, u64> = self
                .names
                .iter()
                .filter(|(p, _)| parent(p) == d)
                .map(|(p, &f)| (p.clone(), self.files[f].ino.0))
                .collect();
            if got != want {
                return Err(format!(
                    "directory {d} lists {got:?}; acknowledged operations say {want:?}"
                ));
            }
        }
        Ok(())
    }
}

fn parent(p: &str) -> &str {
    match p.rfind('/') {
        Some(0) => "/",
        Some(i) => &p[..i],
        None => "/",
    }
}
