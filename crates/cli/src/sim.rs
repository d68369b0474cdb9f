//! `stripefs sim`: the whole-cluster simulator (crates/sim) from the command line.

use anyhow::{bail, Context, Result};
use clap::Args;
use std::io::IsTerminal;
use std::path::PathBuf;
use stripefs_sim::{run_seeds, Options, Report};

#[derive(Args)]
pub struct SimArgs {
    /// How many seeds to run.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// The first seed (seeds run are FIRST, FIRST+1, ...). With --seeds 1, replays one seed.
    #[arg(long, default_value_t = 1)]
    first: u64,
    /// Steps (client operations and faults) per seed.
    #[arg(long, default_value_t = 200)]
    steps: usize,
    /// Simulated clients.
    #[arg(long, default_value_t = 2)]
    clients: usize,
    /// Simulated data servers.
    #[arg(long, default_value_t = 3)]
    data_servers: usize,
    /// Seeds run at once (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
    /// Fault kinds not to inject (comma-separated names as in the report), to tell causes
    /// apart.
    #[arg(long, value_delimiter = ',', value_name = "KIND,...")]
    without: Vec<String>,
    /// Swap a known-broken rule into the servers (fsync-before-durable, skip-dir-sync,
    /// checksum-before-data, meta-sync-noop, meta-dir-sync-noop): the run must find
    /// violations, which shows that the checker can fail. Exit status 1 if it does not.
    #[arg(long, value_name = "NAME")]
    canary: Option<String>,
    /// Replay only these steps (indices, comma-separated) of the plan of seed --first, as a
    /// shortened reproduction prints them.
    #[arg(long, value_delimiter = ',', value_name = "I,J,...")]
    keep: Option<Vec<usize>>,
    /// Re-runs spent shortening each failing plan (0: report the full plan).
    #[arg(long, default_value_t = 200)]
    shrink_runs: usize,
    /// Print the report as JSON on stdout (or write it to FILE with --json-file).
    #[arg(long)]
    json: bool,
    /// Write the JSON report to FILE.
    #[arg(long, value_name = "FILE")]
    json_file: Option<PathBuf>,
}

pub fn run(a: SimArgs) -> Result<()> {
    if a.seeds == 0 {
        bail!("--seeds must be at least 1");
    }
    if a.steps == 0 || a.clients == 0 || a.data_servers == 0 {
        bail!("--steps, --clients and --data-servers must be at least 1");
    }
    if a.clients > 8 || a.data_servers > 16 {
        bail!("the simulator runs at most 8 clients and 16 data servers");
    }
    for w in &a.without {
        if !stripefs_sim::FAULT_KINDS.contains(&w.as_str()) {
            bail!(
                "--without {w}: no such fault kind (kinds: {})",
                stripefs_sim::FAULT_KINDS.join(", ")
            );
        }
    }
    let canary = match &a.canary {
        None => None,
        Some(n) => Some(stripefs_sim::Canary::from_name(n).ok_or_else(|| {
            let names: Vec<&str> = stripefs_sim::Canary::ALL.iter().map(|c| c.name()).collect();
            anyhow::anyhow!(
                "--canary {n}: no such canary (canaries: {})",
                names.join(", ")
            )
        })?),
    };
    let mut opts = Options {
        shrink_runs: a.shrink_runs,
        canary,
        without: a.without.clone(),
        clients: a.clients,
        data_servers: a.data_servers,
        steps: a.steps,
        ..Options::default()
    };
    if let Some(t) = a.threads {
        if t == 0 {
            bail!("--threads must be at least 1");
        }
        opts.threads = t;
    }
    if let Some(keep) = &a.keep {
        return match stripefs_sim::run_plan(a.first, Some(keep), &opts)
            .map_err(anyhow::Error::msg)?
        {
            None => {
                println!("seed {}, steps {keep:?}: no violation", a.first);
                Ok(())
            }
            Some(v) => bail!(
                "seed {}, steps {keep:?}: after step {}: {}",
                a.first,
                v.step,
                v.message
            ),
        };
    }
    let tty = std::io::stderr().is_terminal();
    let progress = |done: u64, total: u64| {
        if tty {
            eprint!("\rsim: {done}/{total} seeds");
        } else if done % 50 == 0 || done == total {
            eprintln!("sim: {done}/{total} seeds");
        }
    };
    let report = run_seeds(a.first, a.seeds, &opts, &progress);
    if tty {
        eprintln!();
    }
    if let Some(f) = &a.json_file {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(f, text + "\n").with_context(|| format!("writing {}", f.display()))?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    if !report.errors.is_empty() {
        bail!(
            "{} seeds could not run: {}",
            report.errors.len(),
            report.errors[0]
        );
    }
    if let Some(c) = canary {
        // A canary run succeeds when the checker caught the broken rule.
        if report.violations.is_empty() {
            bail!(
                "canary {}: no violation in {} seeds: the checker did not catch the broken rule",
                c.name(),
                report.seeds
            );
        }
        eprintln!(
            "canary {}: caught in {} of {} seeds (first: seed {})",
            c.name(),
            report.violations.len(),
            report.seeds,
            report.violations[0].seed
        );
        return Ok(());
    }
    if !report.violations.is_empty() {
        bail!(
            "{} of {} seeds found violations (first: seed {})",
            report.violations.len(),
            report.seeds,
            report.violations[0].seed
        );
    }
    Ok(())
}

fn print_table(r: &Report) {
    println!(
        "seeds {}..{}  steps/seed {}  operations {}  {:.1} s",
        r.first_seed,
        r.first_seed + r.seeds - 1,
        r.steps_per_seed,
        r.operations,
        r.elapsed_s
    );
    println!("faults injected:");
    for (k, v) in &r.faults {
        println!("  {k:<14} {v}");
    }
    println!("violations: {}", r.violations.len());
    for v in &r.violations {
        println!("  seed {} after step {}: {}", v.seed, v.step, v.message);
        let keep: Vec<String> = v.keep.iter().map(|i| i.to_string()).collect();
        println!(
            "    reproduce: stripefs sim --first {} --seeds 1 --steps {} (shortened: add --keep {})",
            v.seed,
            r.steps_per_seed,
            keep.join(",")
        );
        println!(
            "    shortened plan ({} steps), which shows: {}",
            v.reproduction.len(),
            v.reproduction_message
        );
        for s in &v.reproduction {
            println!("      {s}");
        }
    }
}
