//! stripefs whole-cluster simulator.
//!
//! One metadata server, several data servers on in-memory disks (`MemStore`) and several
//! clients (the real client library, over a simulated network) run in one process. A
//! seed makes a plan of client operations and faults; after every step the outcome is
//! checked against a model of what the file system promised (see `model.rs`): every
//! acknowledged create, rename, link and unlink is there after a crash, every fsync'd
//! byte survives a power cut, no read returns bytes that were never written, a failed
//! write leaves the bytes outside it alone, and the metadata server's own check passes.
//! A violation prints the seed and a shortened plan that still shows it.
//!
//! Faults: metadata and data server process crashes, data server power cuts (writes not
//! yet synced are kept, lost or torn), ENOSPC, partitions between a client and a
//! server, and per message: dropped requests, dropped answers, duplicates, delays,
//! reordering and disks too slow for the client's patience. Half the client and data
//! server pairs share a host (chosen by the seed): their reads and writes take the
//! same-host paths (short-circuit reads of the server's files, writes through a pipe),
//! over the same server and client code as the real Unix socket (`samehost.rs`), where
//! bytes in a pipe may also arrive damaged.

mod cluster;
mod model;
mod net;
mod rng;
mod run;
mod samehost;

pub use run::{plan, Step, Violation, MAX_FILE_BYTES};

use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What to simulate.
#[derive(Clone, Debug)]
pub struct Options {
    pub clients: usize,
    pub data_servers: usize,
    /// Steps per seed.
    pub steps: usize,
    /// Seeds run at once.
    pub threads: usize,
    /// Re-runs spent shortening a failing plan.
    pub shrink_runs: usize,
    /// Fault kinds (names of [`FAULT_KINDS`]) not injected, to tell causes apart.
    pub without: Vec<String>,
    /// A known-broken rule swapped into the servers, which the checker must catch.
    pub canary: Option<Canary>,
}

/// Known-broken rules (`stripefs sim --canary NAME`): each one must make the simulator
/// report violations, or the checker could not fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Canary {
    /// Data servers answer fsync without syncing.
    FsyncBeforeDurable,
    /// Data servers never sync a new object's directory.
    SkipDirSync,
    /// Data servers store checksums before data and do not repair a failed write.
    ChecksumBeforeData,
    /// The metadata server's disk syncs nothing.
    MetaSyncNoop,
    /// The metadata server's directory syncs do nothing.
    MetaDirSyncNoop,
    /// Data servers store a same-host pipe write's checksums without checking the bytes
    /// that came through the pipe against them.
    PipeUnchecked,
}

impl Canary {
    pub const ALL: &'static [Canary] = &[
        Canary::FsyncBeforeDurable,
        Canary::SkipDirSync,
        Canary::ChecksumBeforeData,
        Canary::MetaSyncNoop,
        Canary::MetaDirSyncNoop,
        Canary::PipeUnchecked,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Canary::FsyncBeforeDurable => "fsync-before-durable",
            Canary::SkipDirSync => "skip-dir-sync",
            Canary::ChecksumBeforeData => "checksum-before-data",
            Canary::MetaSyncNoop => "meta-sync-noop",
            Canary::MetaDirSyncNoop => "meta-dir-sync-noop",
            Canary::PipeUnchecked => "pipe-unchecked",
        }
    }

    pub fn from_name(name: &str) -> Option<Canary> {
        Canary::ALL.iter().copied().find(|c| c.name() == name)
    }
}

impl Options {
    /// Fault kind `kind` is injected.
    pub fn injects(&self, kind: &str) -> bool {
        !self.without.iter().any(|w| w == kind)
    }
}

impl Default for Options {
    fn default() -> Options {
        Options {
            clients: 2,
            data_servers: 3,
            steps: 200,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            shrink_runs: 200,
            without: Vec::new(),
            canary: None,
        }
    }
}

/// Counts of faults by kind.
#[derive(Default, Debug)]
pub struct Stats {
    counts: Mutex<BTreeMap<String, u64>>,
}

impl Stats {
    pub fn count(&self, kind: &str) {
        *self
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(kind.to_string())
            .or_insert(0) += 1;
    }

    pub(crate) fn count_msg(&self, kind: &str) {
        self.count(kind);
    }

    pub fn merge(&self, other: &Stats) {
        let o = other.snapshot();
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        for (k, v) in o {
            *c.entry(k).or_insert(0) += v;
        }
    }

    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Every fault kind the simulator injects (the report lists each, also at zero).
pub const FAULT_KINDS: &[&str] = &[
    "crash_meta",
    "power_cut_meta",
    "crash_data",
    "power_cut",
    "torn_write",
    "no_space",
    "io_error",
    "partition",
    "drop_request",
    "drop_reply",
    "duplicate",
    "delay",
    "reorder",
    "slow_disk",
    "pipe_damage",
    "same_host",
];

/// One violation, with what it takes to see it again.
#[derive(Clone, Debug, Serialize)]
pub struct Found {
    pub seed: u64,
    pub step: usize,
    pub message: String,
    /// A shortened plan that still fails (`stripefs sim --seed S` replays the full one).
    pub reproduction: Vec<String>,
    /// The indices of the shortened plan's steps (`stripefs sim --first SEED --keep ...`).
    pub keep: Vec<usize>,
    /// What the shortened plan shows.
    pub reproduction_message: String,
}

/// The report of a run of many seeds.
#[derive(Debug, Serialize)]
pub struct Report {
    pub seeds: u64,
    pub first_seed: u64,
    pub steps_per_seed: usize,
    pub operations: u64,
    pub faults: BTreeMap<String, u64>,
    pub violations: Vec<Found>,
    /// Runs that could not start (a bug in the simulator's set-up, not a violation).
    pub errors: Vec<String>,
    pub elapsed_s: f64,
}

/// Runs `count` seeds from `first`; `progress` is called after each with (done, count).
pub fn run_seeds(
    first: u64,
    count: u64,
    opts: &Options,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Report {
    let start = Instant::now();
    let stats = Stats::default();
    let ops = AtomicU64::new(0);
    let next = AtomicU64::new(0);
    let done = AtomicUsize::new(0);
    let found = Mutex::new(Vec::new());
    let errors = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..opts.threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= count {
                    return;
                }
                let seed = first + i;
                let steps = plan(seed, opts);
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run::run(seed, &steps, opts, &stats)
                }))
                .unwrap_or_else(|p| {
                    let what = panic_text(p.as_ref());
                    Ok(run::Outcome {
                        ops: 0,
                        violation: Some(Violation {
                            step: 0,
                            message: format!("a panic in the simulated cluster: {what}"),
                        }),
                    })
                });
                match r {
                    Ok(out) => {
                        ops.fetch_add(out.ops, Ordering::Relaxed);
                        if let Some(v) = out.violation {
                            let (keep, repro_message) = shrink(seed, &steps, &v, opts);
                            found.lock().unwrap_or_else(|p| p.into_inner()).push(Found {
                                seed,
                                step: v.step,
                                message: v.message,
                                reproduction: keep
                                    .iter()
                                    .map(|&i| format!("{i}: {}", steps[i]))
                                    .collect(),
                                keep,
                                reproduction_message: repro_message,
                            });
                        }
                    }
                    Err(e) => errors
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(format!("seed {seed}: {e}")),
                }
                let d = done.fetch_add(1, Ordering::SeqCst) + 1;
                progress(d as u64, count);
            });
        }
    });
    let mut faults: BTreeMap<String, u64> =
        FAULT_KINDS.iter().map(|k| (k.to_string(), 0)).collect();
    for (k, v) in stats.snapshot() {
        *faults.entry(k).or_insert(0) += v;
    }
    let mut violations = found.into_inner().unwrap_or_else(|p| p.into_inner());
    violations.sort_by_key(|f| f.seed);
    Report {
        seeds: count,
        first_seed: first,
        steps_per_seed: opts.steps,
        operations: ops.load(Ordering::Relaxed),
        faults,
        violations,
        errors: errors.into_inner().unwrap_or_else(|p| p.into_inner()),
        elapsed_s: start.elapsed().as_secs_f64(),
    }
}

/// What a caught panic said.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// Shortens a failing plan: cuts it after the failing step, then drops chunks of steps
/// (halves, quarters, ... single steps) as long as the run still fails. Returns the
/// indices of the steps kept and what the shortened plan shows.
pub fn shrink(seed: u64, steps: &[Step], v: &Violation, opts: &Options) -> (Vec<usize>, String) {
    let mut best: Vec<usize> = (0..(v.step + 1).min(steps.len())).collect();
    let mut message = v.message.clone();
    let mut budget = opts.shrink_runs;
    let scratch = Arc::new(Stats::default());
    let fails = |keep: &[usize]| -> Option<String> {
        let candidate: Vec<Step> = keep.iter().map(|&i| steps[i]).collect();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run::run(seed, &candidate, opts, &scratch)
        })) {
            Ok(Ok(o)) => o.violation.map(|v| v.message),
            Ok(Err(_)) => None,
            Err(p) => Some(format!(
                "a panic in the simulated cluster: {}",
                panic_text(p.as_ref())
            )),
        }
    };
    let mut chunk = best.len().div_ceil(2).max(1);
    while budget > 0 && !best.is_empty() {
        let mut i = 0;
        let mut shrunk = false;
        while i < best.len() && budget > 0 {
            let mut candidate = best.clone();
            candidate.drain(i..(i + chunk).min(best.len()));
            budget -= 1;
            if let Some(m) = fails(&candidate) {
                best = candidate;
                message = m;
                shrunk = true;
            } else {
                i += chunk;
            }
        }
        if chunk == 1 && !shrunk {
            break;
        }
        chunk = (chunk / 2).max(1);
    }
    (best, message)
}

/// Runs an explicit plan for `seed` (the seed still decides message faults and how a
/// power cut tears); returns the violation, if any.
pub fn run_steps(seed: u64, steps: &[Step], opts: &Options) -> Result<Option<Violation>, String> {
    let stats = Stats::default();
    run::run(seed, steps, opts, &stats).map(|o| o.violation)
}

/// Runs the steps `keep` (indices) of `seed`'s plan, all of them if `None`; returns the
/// violation, if any (`stripefs sim --keep`).
pub fn run_plan(
    seed: u64,
    keep: Option<&[usize]>,
    opts: &Options,
) -> Result<Option<Violation>, String> {
    let stats = Stats::default();
    let all = plan(seed, opts);
    let steps: Vec<Step> = match keep {
        Some(k) => k
            .iter()
            .map(|&i| {
                all.get(i)
                    .copied()
                    .ok_or_else(|| format!("step {i} is beyond the plan's {} steps", all.len()))
            })
            .collect::<Result<_, _>>()?,
        None => all,
    };
    run::run(seed, &steps, opts, &stats).map(|o| o.violation)
}
