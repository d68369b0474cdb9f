//! Helpers shared by the benchmarks.

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::Instant;

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

/// Parses benchmark arguments from an argument list, exactly as `stripefs bench NAME` would
/// (defaults, units, checks), so that sweeps and the demo build a run from the same words
/// a user would type, and can print them as the command that reproduces a figure. A later
/// occurrence of an option overrides an earlier one.
pub fn parse_args<T: clap::Args>(argv: &[String]) -> Result<T> {
    #[derive(clap::Parser)]
    #[command(no_binary_name = true, args_override_self = true)]
    struct Wrap<T: clap::Args> {
        #[command(flatten)]
        inner: T,
    }
    use clap::Parser;
    Wrap::<T>::try_parse_from(argv)
        .map(|w| w.inner)
        .map_err(|e| anyhow::anyhow!("bad arguments {:?}: {}", argv.join(" "), e.render()))
}

/// A shell-ready rendering of a command line (arguments with spaces or quotes are quoted).
pub fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=,:+@%".contains(c));
            if plain {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `cluster up` of `servers` data servers with one unthrottled target each on
/// 127.0.0.1, nothing else.
fn one_target_each(servers: u32, exe: &Path) -> stripefs_launch::UpOptions {
    stripefs_launch::UpOptions {
        dir: PathBuf::new(),
        servers,
        targets: 1,
        throttle_bytes_s: None,
        hosts: None,
        host_net_bytes_s: None,
        defaults: stripefs_rpc::Defaults::default(),
        host: "127.0.0.1".into(),
        exe: exe.to_path_buf(),
        no_zero_copy: false,
        wan: None,
        tls: false,
        require_tls: false,
    }
}

/// Clusters that this process started and must stop, also when interrupted.
static LIVE_CLUSTERS: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());

/// A throwaway local cluster, stopped when dropped, so that a failing benchmark or an
/// early return leaves no servers behind; with `interrupt_stops_clusters` also on Ctrl-C.
pub struct ClusterGuard {
    pub dir: std::path::PathBuf,
    pub cluster_file: std::path::PathBuf,
    // Dropped after `drop` has stopped the servers: removes the temporary directory.
    _tmp: Option<tempfile::TempDir>,
}

/// Emulated hosts of a cluster a benchmark starts (`cluster up --hosts --host-net`).
#[derive(Clone, Copy, Debug)]
pub struct HostsNet {
    pub hosts: u32,
    pub host_net_bytes_s: Option<u64>,
}

impl ClusterGuard {
    /// Starts a cluster in `dir`, or in a new temporary directory (removed on drop).
    pub fn start(
        dir: Option<&Path>,
        servers: u32,
        targets: u32,
        throttle_bytes_s: Option<u64>,
        hosts: Option<HostsNet>,
        exe: &Path,
    ) -> Result<ClusterGuard> {
        let opts = stripefs_launch::UpOptions {
            targets,
            throttle_bytes_s,
            hosts: hosts.map(|h| h.hosts),
            host_net_bytes_s: hosts.and_then(|h| h.host_net_bytes_s),
            ..one_target_each(servers, exe)
        };
        ClusterGuard::launch(dir, opts)
    }

    /// Starts `servers` data servers (one target each) with a cluster CA and a server
    /// certificate (`cluster up --tls`): they accept TLS and plain clients alike.
    pub fn start_tls(dir: Option<&Path>, servers: u32, exe: &Path) -> Result<ClusterGuard> {
        let opts = stripefs_launch::UpOptions {
            tls: true,
            ..one_target_each(servers, exe)
        };
        ClusterGuard::launch(dir, opts)
    }

    /// Starts `servers` data servers (one target each) behind an emulated wide-area link
    /// (`cluster up --wan`); remote clients use `DIR/client-wan.toml`.
    pub fn start_wan(
        dir: Option<&Path>,
        servers: u32,
        wan: stripefs_launch::WanLink,
        exe: &Path,
    ) -> Result<ClusterGuard> {
        let opts = stripefs_launch::UpOptions {
            wan: Some(wan),
            ..one_target_each(servers, exe)
        };
        let mut g = ClusterGuard::launch(dir, opts)?;
        g.cluster_file = g.dir.join(stripefs_launch::WAN_CLIENT_FILE);
        Ok(g)
    }

    /// Starts the cluster `opts` describes in `dir`, or in a new temporary directory.
    fn launch(dir: Option<&Path>, mut opts: stripefs_launch::UpOptions) -> Result<ClusterGuard> {
        let (dir, tmp) = match dir {
            Some(d) => (d.to_path_buf(), None),
            None => {
                let t = tempfile::Builder::new()
                    .prefix("stripefs-bench-")
                    .tempdir()
                    .context("cannot create a temporary directory for the cluster")?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        lock_live().push(dir.clone());
        // Built before `up` so that a half-started cluster is stopped too.
        let mut guard = ClusterGuard {
            cluster_file: dir.join("cluster.toml"),
            dir,
            _tmp: tmp,
        };
        opts.dir = guard.dir.clone();
        let up = stripefs_launch::up(&opts)
            .with_context(|| format!("cannot start a cluster in {}", guard.dir.display()))?;
        guard.cluster_file = up.cluster_file;
        Ok(guard)
    }
}

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        lock_live().retain(|d| d != &self.dir);
        stop_cluster(&self.dir);
    }
}

fn lock_live() -> std::sync::MutexGuard<'static, Vec<std::path::PathBuf>> {
    // A panic while holding the lock leaves a list that is still valid.
    LIVE_CLUSTERS.lock().unwrap_or_else(|p| p.into_inner())
}

fn stop_cluster(dir: &Path) {
    if !dir.join("layout.toml").exists() {
        return; // `up` failed before writing anything that could run.
    }
    if let Err(e) = stripefs_launch::down(dir) {
        eprintln!("warning: stopping the cluster in {}: {e:#}", dir.display());
    }
}

/// On SIGINT, SIGTERM or SIGHUP, stops every cluster a `ClusterGuard` holds, then exits
/// with status 130. Servers run in their own process group, so a Ctrl-C at the terminal
/// does not reach them: without this they would outlive an interrupted benchmark. A
/// handler (not a blocked mask) is used because a mask would be inherited by the servers.
pub fn interrupt_stops_clusters() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use stripefs_sys::signals::{self, SIGHUP, SIGINT, SIGTERM};
        let installed = signals::on_signals(&[SIGINT, SIGTERM, SIGHUP], "interrupt", |sig| {
            eprintln!("\n{}: stopping the benchmark clusters", signals::name(sig));
            let dirs = lock_live().clone();
            for d in dirs {
                stop_cluster(&d);
            }
            std::process::exit(130);
        });
        if let Err(e) = installed {
            eprintln!("warning: no interrupt handler: {e}");
        }
    });
}

/// Runs `f` with the process's standard output sent to the file `path` (the benchmarks'
/// own tables, kept in the report), so that the caller can print one summary. Output goes
/// back to where it was afterwards, also when `f` fails.
pub fn with_stdout_to<T>(path: &Path, f: impl FnOnce() -> T) -> Result<T> {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    std::io::stdout().flush()?;
    // SAFETY: dup/dup2 on descriptors that are open for the whole call.
    let saved = unsafe { libc::dup(1) };
    if saved < 0 || unsafe { libc::dup2(file.as_raw_fd(), 1) } < 0 {
        return Err(std::io::Error::last_os_error()).context("cannot redirect stdout");
    }
    let out = f();
    let _ = std::io::stdout().flush();
    // SAFETY: restores the saved descriptor, then closes our duplicate of it.
    unsafe {
        libc::dup2(saved, 1);
        libc::close(saved);
    }
    Ok(out)
}

/// An operation-count progress bar on a terminal; hidden otherwise.
pub fn progress_ops(total_ops: u64, what: &str) -> ProgressBar {
    if !std::io::stdout().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total_ops);
    pb.set_style(
        ProgressStyle::with_template("{msg:>18} [{bar:40}] {pos}/{len} {per_sec}")
            .expect("static template")
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}

/// Bytes available to unprivileged users on the file system holding `dir`.
pub(crate) fn free_bytes(dir: &std::path::Path) -> Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    // SAFETY: statvfs writes into a zeroed struct we own; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statvfs {}", dir.display()));
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Joins client threads; a panicked one becomes an error.
pub(crate) fn join_all<T>(
    handles: Vec<std::thread::ScopedJoinHandle<'_, Result<T>>>,
) -> Vec<Result<T>> {
    handles
        .into_iter()
        .map(|h| {
            h.join()
                .unwrap_or_else(|_| Err(anyhow!("client thread panicked")))
        })
        .collect()
}

/// Runs `f(rank)` on `clients` threads started together; returns the seconds from the
/// first start to the last finish, and each client's result in rank order.
pub(crate) fn run_clients<T: Send>(
    clients: u32,
    f: impl Fn(u32) -> Result<T> + Sync,
) -> Result<(f64, Vec<T>)> {
    let barrier = Barrier::new(clients as usize);
    let results: Vec<Result<(Instant, Instant, T)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|rank| {
                let (barrier, f) = (&barrier, &f);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    let v = f(rank)?;
                    Ok((start, Instant::now(), v))
                })
            })
            .collect();
        join_all(handles)
    });
    let (mut first, mut last, mut out) = (None::<Instant>, None::<Instant>, Vec::new());
    for r in results {
        let (s, e, v) = r?;
        first = Some(first.map_or(s, |f| f.min(s)));
        last = Some(last.map_or(e, |l| l.max(e)));
        out.push(v);
    }
    match (first, last) {
        (Some(f), Some(l)) => Ok(((l - f).as_secs_f64(), out)),
        _ => bail!("no clients ran"),
    }
}

/// A client that says it runs on `host`.
pub fn client_on(
    cluster: &stripefs_rpc::ClusterConfig,
    host: &str,
) -> anyhow::Result<stripefs_client::Client> {
    let mut c = cluster.clone();
    c.set_client_host(Some(host))
        .map_err(|e| anyhow::anyhow!(e))?;
    Ok(stripefs_client::Client::connect(&c)?)
}

/// A client on the host of data server `server` when the cluster file says which host
/// that is (`cluster up --hosts`), else one on the cluster file's client host.
pub fn client_beside(
    cluster: &stripefs_rpc::ClusterConfig,
    server: u32,
) -> anyhow::Result<stripefs_client::Client> {
    match cluster
        .data
        .get(server as usize)
        .and_then(|d| d.host.as_deref())
    {
        Some(h) => client_on(cluster, h),
        None => Ok(stripefs_client::Client::connect(cluster)?),
    }
}
