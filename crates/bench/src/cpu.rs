//! CPU time of the benchmark's own process and of a local cluster's servers, read from
//! the kernel (`getrusage` for this process, `/proc/PID/stat` for the servers), so that a
//! run can report CPU seconds per GiB moved (issue 14: what a copy-free or short-circuit
//! data path saves).
//!
//! The servers are found through the pid files that `cluster up` keeps beside the
//! cluster file (`DIR/run/*.pid`, read by `stripefs_launch::processes`). A cluster started some other way,
//! or on other machines, has none: its server CPU is unknown and reported as such.

use std::path::Path;

/// User plus system CPU seconds of this process, all its threads (ended ones included).
pub fn self_cpu_s() -> f64 {
    // SAFETY: getrusage fills the struct we pass; RUSAGE_SELF cannot fail.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// User plus system CPU seconds of process `pid` (all its threads), `None` if it is gone.
pub fn pid_cpu_s(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_cpu_ticks(&stat).map(|t| t as f64 / clock_ticks())
}

fn clock_ticks() -> f64 {
    rustix::param::clock_ticks_per_second() as f64
}

/// utime + stime (fields 14 and 15) of a `/proc/PID/stat` line, in clock ticks. The
/// command name (field 2) is in parentheses and may hold spaces or parentheses itself,
/// so fields are counted from the last `)`.
fn parse_stat_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, index 11 here.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// The servers of the local cluster whose file is `cluster_file`: the live processes
/// `cluster up` recorded beside it (`run/*.pid`, checked to be that cluster's servers;
/// an emulated wide-area relay is not a server). Empty when there are none.
pub fn cluster_server_pids(cluster_file: &Path) -> Vec<u32> {
    let dir = cluster_file.parent().unwrap_or(Path::new("."));
    let mut pids: Vec<u32> = stripefs_launch::processes(dir)
        .map(|ps| {
            ps.into_iter()
                .filter(|(s, _)| s.role != "wan")
                .filter_map(|(_, pid)| pid)
                .collect()
        })
        .unwrap_or_default();
    pids.sort_unstable();
    pids
}

/// CPU seconds of a set of server processes, read together.
#[derive(Clone, Debug)]
pub struct Servers {
    pids: Vec<u32>,
}

impl Servers {
    pub fn of_cluster(cluster_file: &Path) -> Servers {
        Servers {
            pids: cluster_server_pids(cluster_file),
        }
    }

    /// No servers: their CPU is unknown (runs that do not use the cluster).
    pub fn none() -> Servers {
        Servers { pids: Vec::new() }
    }

    pub fn known(&self) -> bool {
        !self.pids.is_empty()
    }

    /// The sum of the servers' CPU seconds; `None` when unknown or a server is gone
    /// (a sum that lost a process would understate the run).
    pub fn cpu_s(&self) -> Option<f64> {
        if self.pids.is_empty() {
            return None;
        }
        self.pids.iter().map(|&p| pid_cpu_s(p)).sum()
    }
}

/// CPU seconds spent during one phase: by the servers (if known) and by this process.
#[derive(Clone, Copy, Debug, Default)]
pub struct PhaseCpu {
    pub server_s: Option<f64>,
    pub client_s: f64,
}

impl PhaseCpu {
    /// Servers plus this process, `None` when the servers' share is unknown.
    pub fn total_s(&self) -> Option<f64> {
        self.server_s.map(|s| s + self.client_s)
    }
}

/// A reading taken at the start of a phase.
pub struct Mark {
    server: Option<f64>,
    client: f64,
}

impl Mark {
    pub fn now(servers: &Servers) -> Mark {
        Mark {
            server: servers.cpu_s(),
            client: self_cpu_s(),
        }
    }

    /// CPU seconds since the mark.
    pub fn elapsed(&self, servers: &Servers) -> PhaseCpu {
        let server_s = match (self.server, servers.cpu_s()) {
            (Some(a), Some(b)) => Some((b - a).max(0.0)),
            _ => None,
        };
        PhaseCpu {
            server_s,
            client_s: (self_cpu_s() - self.client).max(0.0),
        }
    }
}

/// Seconds per GiB of `bytes`, `None` when either is unknown or nothing moved.
pub fn per_gib(seconds: Option<f64>, bytes: u64) -> Option<f64> {
    let s = seconds?;
    (bytes > 0).then(|| s / (bytes as f64 / (1u64 << 30) as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_parsed_past_odd_command_names() {
        // Fields 14 and 15 are 7 and 5 here; the name holds a space and a parenthesis.
        let line = "1234 (a b) c)) S 1 2 3 4 5 6 7 8 9 10 7 5 0 0 20 0 1 0 100 0 0";
        assert_eq!(parse_stat_cpu_ticks(line), Some(12));
        assert_eq!(parse_stat_cpu_ticks("garbage"), None);
        assert_eq!(parse_stat_cpu_ticks("1 (x) S 1 2"), None);
    }

    #[test]
    fn this_process_burns_measurable_cpu() {
        let before = self_cpu_s();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(200) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let spent = self_cpu_s() - before;
        assert!(spent > 0.05, "{spent} s of CPU in a 200 ms busy loop");
        let own = pid_cpu_s(std::process::id()).expect("our own /proc entry");
        assert!(own >= spent - 0.05, "{own} < {spent}");
    }

    #[test]
    fn per_gib_scales_and_handles_unknowns() {
        assert_eq!(per_gib(Some(2.0), 2 << 30), Some(1.0));
        assert_eq!(per_gib(None, 1 << 30), None);
        assert_eq!(per_gib(Some(1.0), 0), None);
    }
}
