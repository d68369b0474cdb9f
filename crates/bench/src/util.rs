//! Helpers shared by the benchmarks.

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::Path;

/// Empties the kernel's page cache so that reads come from the disks: `sync`, then
/// `echo 3 > /proc/sys/vm/drop_caches`. Returns whether it worked (it needs root).
pub fn drop_caches() -> bool {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    // SAFETY: geteuid(2) cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return false;
    }
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

/// A byte progress bar on a terminal; hidden otherwise.
pub fn progress(total_bytes: u64, what: &str) -> ProgressBar {
    if !std::io::stdout().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total_bytes);
    pb.set_style(
        ProgressStyle::with_template("{msg:>8} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec}")
            .expect("static template")
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}

/// Writes `value` as pretty JSON to `path`.
pub fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}

/// MiB per second.
pub fn mib_s(bytes: u64, secs: f64) -> f64 {
    if secs <= 0.0 {
        return 0.0;
    }
    bytes as f64 / (1u64 << 20) as f64 / secs
}

/// A percentage string, or "-" without a reference.
pub fn pct(v: f64, reference: Option<f64>) -> String {
    match reference {
        Some(r) if r > 0.0 => format!("{:.0}%", 100.0 * v / r),
        _ => "-".into(),
    }
}

/// A random seed, printed by the caller so that a run can be replayed.
pub fn seed() -> u64 {
    let mut b = [0u8; 8];
    // The time is a fine fallback: a seed only needs to differ between runs.
    if getrandom(&mut b).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        return t;
    }
    u64::from_le_bytes(b)
}

fn getrandom(b: &mut [u8]) -> std::io::Result<()> {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")?.read_exact(b)
}
