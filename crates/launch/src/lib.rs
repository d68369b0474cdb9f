//! The local cluster launcher behind `stripefs cluster up/down`.
//!
//! A cluster directory holds everything of one cluster:
//!
//! ```text
//! DIR/cluster.toml           what clients read (mode 0600: it holds the secret)
//! DIR/layout.toml            how many data servers and targets, the throttle, the
//!                            emulated hosts and their network rate
//! DIR/meta/server.toml       the metadata server's config; DIR/meta/meta.redb its store,
//!                            meta.redb.wal0 and .wal1 its log
//! DIR/dataN/server.toml      data server N's config; DIR/dataN/tK its targets
//! DIR/logs/NAME.log          each server's log
//! DIR/run/NAME.pid           each running server's process id
//! ```
//!
//! `up` on a directory that already holds a cluster restarts the stopped servers on their
//! existing data. `down` stops exactly the processes recorded in `run/`, after checking
//! that each pid still belongs to a stripefs server of this directory.

use anyhow::{anyhow, bail, Context, Result};
use rustix::process::{Pid, Signal};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use stripefs_rpc::{ClusterConfig, Defaults};
use stripefs_wire::{Cred, Request, Response};

/// How long `up` waits for all servers to serve.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long `down` waits after SIGTERM before SIGKILL.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Most data servers one `up` starts.
pub const MAX_SERVERS: u32 = 256;
/// Most targets per data server.
pub const MAX_TARGETS: u32 = 64;
/// Most emulated hosts.
pub const MAX_HOSTS: u32 = 256;

/// The name of emulated host `i` (`cluster up --hosts`).
pub fn host_name(i: u32) -> String {
    format!("host{i}")
}

/// What `up` is asked for.
#[derive(Clone, Debug)]
pub struct UpOptions {
    pub dir: PathBuf,
    pub servers: u32,
    pub targets: u32,
    pub throttle_bytes_s: Option<u64>,
    /// Emulated hosts (`--hosts K`): data server i on `host{i % K}`, the metadata server
    /// on `host0`. `None`: every server on the machine's hostname.
    pub hosts: Option<u32>,
    /// Emulated host network (`--host-net RATE`): per host and direction, the rate of
    /// bytes its data servers exchange with clients on other hosts. Each of a host's n
    /// data servers gets RATE/n (see docs/ARCHITECTURE.md, "Hosts").
    pub host_net_bytes_s: Option<u64>,
    pub defaults: Defaults,
    /// Address to bind every server to.
    pub host: String,
    /// The stripefs executable to start servers with.
    pub exe: PathBuf,
    /// Start the data servers with `--no-zero-copy` (read replies copied through memory
    /// instead of sent with sendfile), for comparison.
    pub no_zero_copy: bool,
    /// Put an emulated wide-area link (`stripefs wan-emu`) in front of every server and
    /// write `DIR/client-wan.toml`, a client file whose addresses go through it.
    pub wan: Option<WanLink>,
    /// Make a cluster CA and a server certificate (`DIR/tls/`) and write them into
    /// cluster.toml: servers accept TLS, clients use it.
    pub tls: bool,
    /// As `tls`, and servers refuse plain connections (`require_tls = true`).
    pub require_tls: bool,
}

/// An emulated wide-area link (`cluster up --wan RTT,RATE,WINDOW`).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct WanLink {
    /// Round-trip time added, in microseconds.
    pub rtt_us: u64,
    /// Bytes per second per direction, shared by every connection to every server.
    pub rate_bytes_s: u64,
    /// Most bytes in flight per connection and direction.
    pub window_bytes: u64,
}

/// Requests in flight per connection in the `--wan` client file (`pipeline`).
pub const WAN_PIPELINE: u32 = 4;

/// The client file of a cluster with `--wan`: its addresses are the relay's.
pub const WAN_CLIENT_FILE: &str = "client-wan.toml";

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
struct Shape {
    servers: u32,
    targets: u32,
    throttle_bytes_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hosts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    host_net_bytes_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    wan: Option<WanLink>,
    /// "on" or "required".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tls: Option<String>,
}

/// Data server `i`'s short-circuit socket, `DIR/run/data{i}.sock`, or none when that
/// path is too long for a Unix socket (clients then read through the server).
fn local_socket(dir: &Path, i: usize) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let p = dir.join("run").join(format!("data{i}.sock"));
    (p.as_os_str().as_bytes().len() < 100).then_some(p)
}

/// One server of a local cluster.
#[derive(Clone, Debug)]
pub struct ServerProc {
    pub name: String,
    pub role: &'static str,
    pub config: PathBuf,
    pub log: PathBuf,
    pub pid_file: PathBuf,
}

/// The result of `up`.
pub struct Up {
    pub cluster_file: PathBuf,
    /// Data servers and targets per server of the cluster as it runs.
    pub data_servers: u32,
    pub targets: u32,
    /// Emulated hosts and host network rate of the cluster as it runs.
    pub hosts: Option<u32>,
    pub host_net_bytes_s: Option<u64>,
    /// The emulated wide-area link, if the cluster has one (`DIR/client-wan.toml`).
    pub wan: Option<WanLink>,
    pub servers: Vec<ServerProc>,
    pub restarted: bool,
    pub already_running: usize,
}

fn servers_of(dir: &Path, shape: &Shape) -> Vec<ServerProc> {
    let mut v = vec![server(dir, "meta", "meta")];
    for i in 0..shape.servers {
        v.push(server(dir, &format!("data{i}"), "data"));
    }
    if shape.wan.is_some() {
        // Its "config" is the client file it serves; started after the servers.
        let mut w = server(dir, "wan", "wan");
        w.config = dir.join(WAN_CLIENT_FILE);
        v.push(w);
    }
    v
}

fn server(dir: &Path, name: &str, role: &'static str) -> ServerProc {
    ServerProc {
        name: name.to_string(),
        role,
        config: dir.join(name).join("server.toml"),
        log: dir.join("logs").join(format!("{name}.log")),
        pid_file: dir.join("run").join(format!("{name}.pid")),
    }
}

/// Chooses `n` ports on a host; [`free_ports`] unless a test gives its own.
pub type PortPicker<'a> = &'a mut dyn FnMut(&str, usize) -> Result<Vec<u16>>;

/// How many times a new cluster's servers are started on fresh ports when a port chosen
/// for them was taken before they bound it (another program, or another `up` at once).
const PORT_TRIES: usize = 5;

/// Starts a cluster in `opts.dir`, or restarts the one there, and waits until it serves.
pub fn up(opts: &UpOptions) -> Result<Up> {
    up_picking(opts, &mut free_ports)
}

/// [`up`] with the ports chosen by `pick`. A port can be taken between its choice and
/// the server's bind; a new cluster then starts again on ports chosen anew (at most
/// [`PORT_TRIES`] times). A restarted cluster keeps its ports: its clients know them.
pub fn up_picking(opts: &UpOptions, pick: PortPicker) -> Result<Up> {
    let dir = absolute(&opts.dir)?;
    let cluster_file = dir.join("cluster.toml");
    let restarted = cluster_file.exists();
    let shape = if restarted {
        // A restart keeps the cluster's own shape; the caller compares and may say so.
        load_shape(&dir)?
    } else {
        create(&dir, opts, pick)?
    };
    let servers = servers_of(&dir, &shape);
    let mut tries = 1;
    let already_running = loop {
        match start(opts, &dir, &shape, &servers) {
            Ok(n) => break n,
            Err(e) if !restarted && tries < PORT_TRIES && port_was_taken(&e) => {
                tries += 1;
                repick_ports(&dir, &opts.host, pick)?;
            }
            Err(e) => return Err(e),
        }
    };
    Ok(Up {
        cluster_file,
        data_servers: shape.servers,
        targets: shape.targets,
        hosts: shape.hosts,
        host_net_bytes_s: shape.host_net_bytes_s,
        wan: shape.wan,
        servers,
        restarted,
        already_running,
    })
}

/// Whether a start failed because a server could not bind its port (EADDRINUSE).
fn port_was_taken(e: &anyhow::Error) -> bool {
    format!("{e:#}").contains(&format!("(os error {})", libc::EADDRINUSE))
}

/// Gives the servers of the cluster in `dir`, and its wide-area relays if it has them,
/// newly chosen ports.
fn repick_ports(dir: &Path, host: &str, pick: PortPicker) -> Result<()> {
    let file = dir.join("cluster.toml");
    let mut cluster = ClusterConfig::load(&file).map_err(|e| anyhow!(e))?;
    let ports = pick(host, cluster.data.len() + 1)?;
    let addr = |p: u16| format!("{host}:{p}");
    cluster.meta_addr = addr(ports[0]);
    for (d, &p) in cluster.data.iter_mut().zip(&ports[1..]) {
        d.addr = addr(p);
    }
    let wan_file = dir.join(WAN_CLIENT_FILE);
    if wan_file.exists() {
        let relay = pick(host, cluster.data.len() + 1)?;
        for (d, &p) in cluster.data.iter_mut().zip(&relay[1..]) {
            d.advertise = Some(addr(p));
        }
        let mut remote = ClusterConfig::load(&wan_file).map_err(|e| anyhow!(e))?;
        remote.meta_addr = addr(relay[0]);
        remote
            .save(&wan_file)
            .with_context(|| format!("cannot write {}", wan_file.display()))?;
    }
    cluster
        .save(&file)
        .with_context(|| format!("cannot write {}", file.display()))
}

/// Starts the servers of the cluster in `dir` that are not running and waits until they
/// serve; on failure stops those it started. Returns how many were running already.
fn start(opts: &UpOptions, dir: &Path, shape: &Shape, servers: &[ServerProc]) -> Result<usize> {
    let cluster = ClusterConfig::load(&dir.join("cluster.toml")).map_err(|e| anyhow!(e))?;
    let mut started = Vec::new();
    let mut already_running = 0;
    for s in servers {
        if running_pid(s, dir).is_some() {
            already_running += 1;
            continue;
        }
        let spawned = if s.role == "wan" {
            wan_args(dir, &cluster, shape).and_then(|args| spawn_cmd(&opts.exe, s, &args))
        } else {
            spawn(&opts.exe, s, opts.no_zero_copy)
        };
        match spawned {
            Ok(pid) => started.push((s.clone(), pid)),
            Err(e) => {
                stop_started(&started);
                return Err(e);
            }
        }
    }
    if let Err(e) = wait_serving(&cluster, &started) {
        stop_started(&started);
        return Err(e);
    }
    Ok(already_running)
}

fn absolute(p: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(p).with_context(|| format!("cannot create {}", p.display()))?;
    p.canonicalize()
        .with_context(|| format!("cannot resolve {}", p.display()))
}

/// The emulated wide-area link of the cluster in `dir` (`cluster up --wan`), if any.
pub fn recorded_wan(dir: &Path) -> Option<WanLink> {
    load_shape(dir).ok()?.wan
}

fn load_shape(dir: &Path) -> Result<Shape> {
    let p = dir.join("layout.toml");
    let text = std::fs::read_to_string(&p).with_context(|| {
        format!(
            "{} has a cluster.toml but no layout.toml: not a cluster made by `stripefs cluster up`",
            dir.display()
        )
    })?;
    toml::from_str(&text).with_context(|| format!("bad {}", p.display()))
}

/// Picks free TCP ports on `host` for the servers. They come from below the kernel's
/// ephemeral range where it can be read (10000 up to it), so that no outgoing
/// connection of any program takes one between this choice and the server's bind (port
/// 0 would hand out ephemeral ports, which clients also get); each is checked by
/// binding it, and held until all are chosen.
pub fn free_ports(host: &str, n: usize) -> Result<Vec<u16>> {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(0);
    let mut held = Vec::new();
    if low > 11_000 {
        let span = u64::from(low - 10_000);
        let mut x = u64::from_le_bytes(
            stripefs_rpc::auth::random_nonce()[..8]
                .try_into()
                .expect("8 bytes"),
        );
        for _ in 0..n * 64 {
            if held.len() == n {
                break;
            }
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let port = 10_000 + (x % span) as u16;
            if let Ok(l) = std::net::TcpListener::bind((host, port)) {
                held.push(l);
            }
        }
    }
    while held.len() < n {
        let l = std::net::TcpListener::bind((host, 0))
            .with_context(|| format!("cannot bind a port on {host}"))?;
        held.push(l);
    }
    held.iter().map(|l| Ok(l.local_addr()?.port())).collect()
}

fn create(dir: &Path, opts: &UpOptions, pick: PortPicker) -> Result<Shape> {
    if opts.servers == 0 || opts.servers > MAX_SERVERS {
        bail!("--servers must be between 1 and {MAX_SERVERS}");
    }
    if opts.targets == 0 || opts.targets > MAX_TARGETS {
        bail!("--targets must be between 1 and {MAX_TARGETS}");
    }
    if let Some(k) = opts.hosts {
        if k == 0 || k > MAX_HOSTS {
            bail!("--hosts must be between 1 and {MAX_HOSTS}");
        }
    }
    match opts.host_net_bytes_s {
        Some(0) => bail!("--host-net must be a positive rate"),
        Some(_) if opts.hosts.is_none() => bail!(
            "--host-net needs --hosts: without emulated hosts every client and server is on one host, and same-host bytes are not limited"
        ),
        _ => {}
    }
    let shape = Shape {
        servers: opts.servers,
        targets: opts.targets,
        throttle_bytes_s: opts.throttle_bytes_s,
        hosts: opts.hosts,
        host_net_bytes_s: opts.host_net_bytes_s,
        wan: opts.wan,
        tls: match (opts.tls, opts.require_tls) {
            (_, true) => Some("required".into()),
            (true, false) => Some("on".into()),
            _ => None,
        },
    };
    if let Some(w) = &opts.wan {
        if w.rate_bytes_s == 0 || w.window_bytes == 0 {
            bail!("--wan needs a positive rate and window");
        }
    }
    // Without emulated hosts every server is on this machine's host, so that clients
    // here know they are on the servers' host (short-circuit reads, the local layout).
    let here = stripefs_rpc::host::hostname();
    let host_of = |i: u32| {
        Some(match opts.hosts {
            Some(k) => host_name(i % k),
            None => here.clone(),
        })
    };
    let ports = pick(&opts.host, opts.servers as usize + 1)?;
    let addr = |p: u16| format!("{}:{p}", opts.host);
    let data = ports[1..]
        .iter()
        .enumerate()
        .map(|(i, &p)| stripefs_rpc::DataServerEntry {
            addr: addr(p),
            host: host_of(i as u32),
            local_socket: local_socket(dir, i),
            advertise: None,
        })
        .collect();
    let mut cluster = ClusterConfig {
        defaults: opts.defaults,
        meta_host: host_of(0),
        ..ClusterConfig::new(addr(ports[0]), data)
    };
    for sub in ["logs", "run", "meta"] {
        std::fs::create_dir_all(dir.join(sub))?;
    }
    write(
        &dir.join("meta/server.toml"),
        "cluster = \"../cluster.toml\"\ndb = \"meta.redb\"\n",
    )?;
    for i in 0..opts.servers {
        let d = dir.join(format!("data{i}"));
        std::fs::create_dir_all(&d)?;
        let targets: Vec<String> = (0..opts.targets).map(|t| format!("\"t{t}\"")).collect();
        let mut text = format!(
            "cluster = \"../cluster.toml\"\nid = {i}\ntargets = [{}]\n",
            targets.join(", ")
        );
        if let Some(r) = opts.throttle_bytes_s {
            text.push_str(&format!("throttle = \"{r}\"\n"));
        }
        if let (Some(k), Some(rate)) = (opts.hosts, opts.host_net_bytes_s) {
            // The host's link is shared by its data servers: each gets an equal share.
            let on_host = (0..opts.servers).filter(|j| j % k == i % k).count() as u64;
            text.push_str(&format!("host_net = \"{}\"\n", (rate / on_host).max(1)));
        }
        write(&d.join("server.toml"), &text)?;
    }
    if shape.tls.is_some() {
        // One certificate for every server, valid for every name a client here may use
        // to reach them (the wide-area relays listen on the same address).
        let mut names = vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
            opts.host.clone(),
            stripefs_rpc::host::hostname(),
        ];
        names.retain(|n| !n.is_empty() && n != "0.0.0.0");
        let certs = stripefs_rpc::tls::make_cluster_certs(&dir.join("tls"), &names)
            .map_err(|e| anyhow!(e))?;
        cluster.tls = stripefs_rpc::tls::TlsSettings {
            ca: Some(certs.ca.display().to_string()),
            cert: Some(certs.cert),
            key: Some(certs.key),
            require: opts.require_tls,
            name: None,
            client: None,
        };
        cluster.tls.check().map_err(|e| anyhow!(e))?;
    }
    if opts.wan.is_some() {
        // Each data server advertises its relay port to remote clients, whose file
        // names only the metadata server's relay port (they ask it for the rest), and a
        // host of their own.
        let relay = pick(&opts.host, opts.servers as usize + 1)?;
        for (d, &p) in cluster.data.iter_mut().zip(&relay[1..]) {
            d.advertise = Some(addr(p));
        }
        let mut remote = cluster.clone();
        remote.meta_addr = addr(relay[0]);
        remote.data.clear();
        remote.host = Some("remote".into());
        // Several requests in flight per connection hide the link's round trip.
        remote.pipeline = Some(WAN_PIPELINE);
        // Clients need the CA only; the server key stays with the servers.
        remote.tls.cert = None;
        remote.tls.key = None;
        remote.tls.require = false;
        remote
            .save(&dir.join(WAN_CLIENT_FILE))
            .with_context(|| format!("cannot write {}/{WAN_CLIENT_FILE}", dir.display()))?;
    }
    write(&dir.join("layout.toml"), &toml::to_string(&shape)?)?;
    // Written last: its presence marks a complete cluster directory.
    cluster
        .save(&dir.join("cluster.toml"))
        .with_context(|| format!("cannot write {}/cluster.toml", dir.display()))?;
    Ok(shape)
}

fn write(p: &Path, text: &str) -> Result<()> {
    std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display()))
}

fn spawn(exe: &Path, s: &ServerProc, no_zero_copy: bool) -> Result<u32> {
    let mut args: Vec<String> = vec![
        "serve".into(),
        s.role.into(),
        "--config".into(),
        s.config.display().to_string(),
        "--log".into(),
        s.log.display().to_string(),
    ];
    if no_zero_copy && s.role == "data" {
        args.push("--no-zero-copy".into());
    }
    spawn_cmd(exe, s, &args)
}

/// The `stripefs wan-emu` arguments of a cluster's link: one relay process for every
/// server, so that all connections share one rate. `--tag` names the client file, so
/// that the process is recognised as this cluster's.
fn wan_args(dir: &Path, cluster: &ClusterConfig, shape: &Shape) -> Result<Vec<String>> {
    let w = shape.wan.context("no --wan link in layout.toml")?;
    let client_file = dir.join(WAN_CLIENT_FILE);
    let remote = ClusterConfig::load(&client_file).map_err(|e| anyhow!(e))?;
    let mut args: Vec<String> = vec![
        "wan-emu".into(),
        "--listen".into(),
        remote.meta_addr.clone(),
        "--connect".into(),
        cluster.meta_addr.clone(),
        "--rtt".into(),
        format!("{}us", w.rtt_us),
        "--rate".into(),
        w.rate_bytes_s.to_string(),
        "--window".into(),
        w.window_bytes.to_string(),
        "--tag".into(),
        client_file.display().to_string(),
    ];
    for d in &cluster.data {
        let to = d
            .advertise
            .as_ref()
            .context("a data server without its relay port")?;
        args.extend(["--route".into(), format!("{to}={}", d.addr)]);
    }
    Ok(args)
}

fn spawn_cmd(exe: &Path, s: &ServerProc, args: &[String]) -> Result<u32> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    use std::os::unix::process::CommandExt;
    // A server's log names files, users and sessions: for the cluster's owner only
    // (made so also when an older build left it readable).
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&s.log)
        .with_context(|| format!("cannot open log {}", s.log.display()))?;
    if log.metadata()?.permissions().mode() & 0o077 != 0 {
        log.set_permissions(std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("cannot make log {} private", s.log.display()))?;
    }
    let mut cmd = Command::new(exe);
    cmd.args(args);
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        // Own process group: the server outlives the launcher and ignores its ^C.
        .process_group(0)
        .spawn()
        .with_context(|| format!("cannot start {} ({})", s.name, exe.display()))?;
    // The child runs on in the background; `down` stops it by pid.
    let pid = child.id();
    write(&s.pid_file, &format!("{pid}\n"))?;
    Ok(pid)
}

/// The pid in `s.pid_file` if that process is alive and is this server.
fn running_pid(s: &ServerProc, _dir: &Path) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(&s.pid_file)
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    let verb = if s.role == "wan" {
        " wan-emu "
    } else {
        " serve "
    };
    let ours = cmdline.contains(verb) && cmdline.contains(&*s.config.to_string_lossy());
    let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|st| {
            st.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true);
    (ours && !zombie).then_some(pid)
}

fn alive(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"));
    match stat {
        Ok(st) => !st
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

fn addr_of(cluster: &ClusterConfig, s: &ServerProc) -> String {
    if s.role == "wan" {
        // The metadata server through the link: the relay is up when a ping passes it.
        return ClusterConfig::load(&s.config)
            .map(|c| c.meta_addr)
            .unwrap_or_default();
    }
    match s.name.strip_prefix("data") {
        Some(i) => cluster.data[i.parse::<usize>().unwrap_or(0)].addr.clone(),
        None => cluster.meta_addr.clone(),
    }
}

fn wait_serving(cluster: &ClusterConfig, started: &[(ServerProc, u32)]) -> Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    for (s, pid) in started {
        let addr = addr_of(cluster, s);
        loop {
            if ping(cluster, &addr, Duration::from_millis(500)).is_ok() {
                break;
            }
            if !alive(*pid) {
                bail!(
                    "{} exited during start-up; its log {} ends with:\n{}",
                    s.name,
                    s.log.display(),
                    tail(&s.log, 15)
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "{} did not serve on {addr} within {} s; see {}",
                    s.name,
                    START_TIMEOUT.as_secs(),
                    s.log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}

/// Connects, authenticates and pings one server.
pub fn ping(cluster: &ClusterConfig, addr: &str, timeout: Duration) -> Result<Response> {
    let mut c = cluster.connect(addr, timeout)?;
    let (r, _) = c.call(&Cred::root(), Request::Ping {}, &[], &mut [])?;
    Ok(r)
}

/// The last `n` lines of a file.
pub fn tail(p: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn stop_started(started: &[(ServerProc, u32)]) {
    for (s, pid) in started {
        stop_pid(*pid, STOP_TIMEOUT);
        let _ = std::fs::remove_file(&s.pid_file);
    }
}

/// SIGTERM, wait, then SIGKILL. Returns whether the process had to be killed.
fn stop_pid(pid: u32, grace: Duration) -> bool {
    signal(pid, Signal::TERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        reap(pid);
        if !alive(pid) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(pid, Signal::KILL);
    reap(pid);
    true
}

/// Collects the exit status of our own child, if it is one, so that it does not linger
/// as a zombie while the launcher lives on (tests, benchmarks).
fn reap(pid: u32) {
    use rustix::process::{waitpid, WaitOptions};
    // Fails harmlessly if it is not our child.
    let _ = waitpid(to_pid(pid), WaitOptions::NOHANG);
}

fn to_pid(pid: u32) -> Option<Pid> {
    i32::try_from(pid).ok().and_then(Pid::from_raw)
}

/// Sends `sig` to `pid` (one this launcher started and checked); a process already gone
/// is no error.
fn signal(pid: u32, sig: Signal) {
    if let Some(p) = to_pid(pid) {
        let _ = rustix::process::kill_process(p, sig);
    }
}

/// What `down` did.
pub struct Down {
    pub stopped: Vec<String>,
    pub killed: Vec<String>,
    pub not_running: Vec<String>,
}

/// Stops exactly the servers of the cluster in `dir`.
pub fn down(dir: &Path) -> Result<Down> {
    let dir = dir
        .canonicalize()
        .with_context(|| format!("no cluster directory {}", dir.display()))?;
    let shape = load_shape(&dir)?;
    let mut out = Down {
        stopped: vec![],
        killed: vec![],
        not_running: vec![],
    };
    for s in servers_of(&dir, &shape) {
        match running_pid(&s, &dir) {
            Some(pid) => {
                if stop_pid(pid, STOP_TIMEOUT) {
                    out.killed.push(s.name.clone());
                } else {
                    out.stopped.push(s.name.clone());
                }
            }
            None => out.not_running.push(s.name.clone()),
        }
        let _ = std::fs::remove_file(&s.pid_file);
    }
    Ok(out)
}

/// The servers of the cluster in `dir`, with their pids if running.
pub fn processes(dir: &Path) -> Result<Vec<(ServerProc, Option<u32>)>> {
    let dir = dir.canonicalize()?;
    let shape = load_shape(&dir)?;
    Ok(servers_of(&dir, &shape)
        .into_iter()
        .map(|s| {
            let pid = running_pid(&s, &dir);
            (s, pid)
        })
        .collect())
}

/// Kills one server with SIGKILL (fault-injection tests). Returns its pid.
pub fn kill9(dir: &Path, name: &str) -> Result<u32> {
    let (s, pid) = processes(dir)?
        .into_iter()
        .find(|(s, _)| s.name == name)
        .ok_or_else(|| anyhow!("no server {name} in {}", dir.display()))?;
    let pid = pid.ok_or_else(|| anyhow!("{name} is not running"))?;
    // A pid verified to be this cluster's server.
    signal(pid, Signal::KILL);
    let deadline = Instant::now() + STOP_TIMEOUT;
    while alive(pid) && Instant::now() < deadline {
        reap(pid);
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = std::fs::remove_file(&s.pid_file);
    Ok(pid)
}
