//! `stripefs-fuzz [--iters N] [--seed S]`: fuzzes the frame decoder and exits non-zero
//! with a hex dump of the first input that panics. The seed is printed so that a run can
//! be replayed; STRIPEFS_SEED sets it too.

use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use stripefs_fuzz::{hex_dump, run, Stats};
use stripefs_wire::ErrorCode;

const DEFAULT_ITERS: u64 = 10_000_000;
const PROGRESS_EVERY: u64 = 1_000_000;
const USAGE: &str = "usage: stripefs-fuzz [--iters N] [--seed S]";

fn parse_args() -> Result<(u64, u64), String> {
    let mut iters = DEFAULT_ITERS;
    let mut seed = std::env::var("STRIPEFS_SEED")
        .ok()
        .map(|s| parse_u64(&s))
        .transpose()?;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value\n{USAGE}"));
        match flag.as_str() {
            "--iters" => iters = parse_u64(&value()?)?,
            "--seed" => seed = Some(parse_u64(&value()?)?),
            "-h" | "--help" => return Err(USAGE.into()),
            _ => return Err(format!("unknown argument {flag:?}\n{USAGE}")),
        }
    }
    let seed = seed.unwrap_or_else(|| {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        now.as_nanos() as u64 ^ u64::from(std::process::id())
    });
    Ok((iters, seed))
}

fn parse_u64(s: &str) -> Result<u64, String> {
    let s = s.replace('_', "");
    let parsed = match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map_err(|e| format!("{s:?} is not a number: {e}"))
}

fn summary(stats: &Stats) -> String {
    let mut out = format!(
        "inputs {}, accepted {}, refused by Request::validate {}, rejected {}\n",
        stats.inputs,
        stats.accepted,
        stats.invalid_total(),
        stats.rejected_total()
    );
    for (reason, n) in &stats.rejected {
        out.push_str(&format!("  rejected, FrameError reason {reason:2}: {n}\n"));
    }
    for (code, n) in &stats.invalid {
        let name = ErrorCode::from_u32(*code).map_or("?", |c| c.text());
        out.push_str(&format!("  refused by validate, E{code} {name}: {n}\n"));
    }
    out
}

fn main() -> ExitCode {
    let (iters, seed) = match parse_args() {
        Ok(x) => x,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    println!("stripefs-fuzz: seed {seed}, {iters} inputs (replay with --seed {seed})");
    let start = Instant::now();
    let result = run(seed, iters, PROGRESS_EVERY, |s| {
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{} inputs, {} accepted, {:.0} inputs/s",
            s.inputs,
            s.accepted,
            s.inputs as f64 / secs
        );
    });
    let secs = start.elapsed().as_secs_f64();
    match result {
        Ok(stats) => {
            print!("{}", summary(&stats));
            println!(
                "no panics in {:.1} s ({:.0} inputs/s)",
                secs,
                stats.inputs as f64 / secs
            );
            ExitCode::SUCCESS
        }
        Err(f) => {
            eprintln!(
                "PANIC at iteration {} (seed {seed}): {}\ninput ({} bytes):\n{}",
                f.iteration,
                f.message,
                f.input.len(),
                hex_dump(&f.input)
            );
            ExitCode::FAILURE
        }
    }
}
