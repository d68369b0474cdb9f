//! Cluster and server configuration files.
//!
//! `cluster.toml` describes a cluster to clients and servers alike:
//!
//! ```toml
//! secret = "64 hex digits"        # the file is mode 0600
//! token = "sft1...."              # instead of the secret, in a collaborator's client
//!                                 # file: a scoped token (`stripefs token create`)
//! timeout_ms = 10000              # optional, client and server I/O timeout
//! lease_ms = 30000                # optional, client session lease (limits::LEASE_MS)
//! host = "node7"                 # optional: the host of clients using this file
//! streams = 8                     # optional: connections per data server (default 4)
//! pipeline = 4                    # optional: requests in flight per data-server
//!                                 # connection (default 1)
//! compress = "auto"               # optional: bulk data to and from data servers: off
//!                                 # (default), lz4, zstd, zstd:LEVEL or auto
//! tls_ca = "/etc/stripefs/ca.pem" # optional: clients use TLS, checking servers against
//!                                 # this CA (a file, or the PEM text itself)
//! tls_cert = "server.pem"         # optional, servers: certificate chain and key (PEM);
//! tls_key = "server.key"          # a server with them accepts TLS connections
//! require_tls = true              # optional, servers: refuse plain connections
//! tls_name = "stripefs"           # optional: the name clients check in certificates
//!                                 # (default: the host of the address they connect to)
//! [meta]
//! addr = "127.0.0.1:7000"
//! host = "node0"                  # optional: the metadata server's host
//! [[data]]                        # data server ids are their order here: 0, 1, ...
//! addr = "127.0.0.1:7100"
//! host = "node0"                  # optional: the host this data server runs on
//! local_socket = "/run/stripefs/data0.sock"  # optional, absolute: short-circuit reads
//!                                 # for clients on the same host (docs/protocol.md)
//! advertise = "gw.example:7100"   # optional: the address remote clients use
//!
//! A client's file may leave out [[data]]: the client then asks the metadata server for
//! the data servers (their `advertise` addresses where set). Servers need the full list.
//! [defaults]                      # optional
//! stripe_size = "1M"
//! stripe_count = 0                # 0 = all data servers
//! inline_bytes = "4K"             # files up to this size live on the metadata server
//!                                 # (0 = never; at most 64K; see docs/objects.md)
//! ```
//!
//! A server's own file (`stripefs serve meta|data --config FILE`) names the cluster file
//! and what is local to the server; relative paths are relative to the server file.
//!
//! ```toml
//! cluster = "cluster.toml"
//! id = 0                          # data servers: index into [[data]]
//! listen = "0.0.0.0:7100"         # optional, default: the address in cluster.toml
//! targets = ["/disk0/stripefs", "/disk1/stripefs"]   # data servers
//! throttle = "25MiB"              # optional, per target
//! scrub_rate = "8MiB"             # optional, data servers' background scrub; "0" = off
//! zero_copy = true                # optional, data servers: reads sent with sendfile
//! host = "node0"                  # optional: this server's host (default: the cluster
//!                                 # file's entry, else the hostname)
//! host_net = "40MiB"              # optional, data servers: bytes to and from clients on
//!                                 # other hosts, per direction (an emulated host link)
//! db = "meta.redb"                # metadata server
//! ```

use crate::auth::Secret;
use crate::units::{parse_rate, parse_size};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Clone, Debug)]
pub struct ClusterConfig {
    pub secret: Secret,
    pub timeout_ms: u64,
    pub meta_addr: String,
    pub data: Vec<DataServerEntry>,
    pub defaults: Defaults,
    /// How long a client session lives without renewal (the metadata server's setting;
    /// clients learn it from the server). See [`crate::limits::LEASE_MS`].
    pub lease_ms: u64,
    /// The host of clients that use this file (top-level `host`); `None`: the hostname.
    /// `--host` and `STRIPEFS_HOST` override it.
    pub host: Option<String>,
    /// The metadata server's host (`[meta] host`), if the file says.
    pub meta_host: Option<String>,
    /// Connections (streams) a client keeps to each data server, each carrying one
    /// request at a time (top-level `streams`); `None`: the client's default. More
    /// streams keep more requests in flight on a long link.
    pub streams: Option<u32>,
    /// Bulk requests a client keeps in flight on each data-server connection (top-level
    /// `pipeline`; `None`: 1). More hide the round trip of a long link.
    pub pipeline: Option<u32>,
    /// How clients compress bulk data on their data-server connections (top-level
    /// `compress`); `None`: off. `--compress` and `STRIPEFS_COMPRESS` override it.
    pub compress: Option<crate::compress::Codec>,
    /// A scoped token (top-level `token`, or `--token` / `STRIPEFS_TOKEN`): clients
    /// authenticate with it instead of the secret, even when the file has the secret.
    /// A file with a token may leave the secret out; servers need the secret.
    pub token: Option<String>,
    /// Whether the file held the secret (`secret` is a random stand-in otherwise).
    pub has_secret: bool,
    /// TLS: the CA clients check servers against, the servers' certificate and key,
    /// whether servers refuse plain connections (`tls_ca`, `tls_cert`, `tls_key`,
    /// `require_tls`, `tls_name`; see tls.rs).
    pub tls: crate::tls::TlsSettings,
}

/// Most streams a client may open to one data server.
pub const MAX_STREAMS: u32 = 64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataServerEntry {
    pub addr: String,
    /// The host the data server runs on (`host`), if the file says; the local placement
    /// policy uses it to find a client's own servers.
    pub host: Option<String>,
    /// The server's short-circuit socket (`local_socket`, an absolute path): clients on
    /// the same host get its objects' descriptors there and read them directly.
    pub local_socket: Option<PathBuf>,
    /// The address remote clients reach the server at (`advertise`, e.g. a gateway's),
    /// which the metadata server tells clients whose file lists no data servers.
    pub advertise: Option<String>,
}

impl DataServerEntry {
    pub fn new(addr: String) -> DataServerEntry {
        DataServerEntry {
            addr,
            host: None,
            local_socket: None,
            advertise: None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Defaults {
    pub stripe_size_bytes: u32,
    /// 0 = all data servers.
    pub stripe_count: u32,
    /// Inline threshold of new files whose directory sets none (0: never inline).
    pub inline_bytes: u32,
}

/// The default inline threshold: files up to 4 KiB keep their bytes with their inode.
pub const DEFAULT_INLINE_BYTES: u32 = 4 << 10;

impl Default for Defaults {
    fn default() -> Defaults {
        Defaults {
            stripe_size_bytes: 1 << 20,
            stripe_count: 0,
            inline_bytes: DEFAULT_INLINE_BYTES,
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    secret: Option<String>,
    timeout_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    streams: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pipeline: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    compress: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls_ca: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls_cert: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls_key: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    require_tls: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls_name: Option<String>,
    meta: RawMeta,
    #[serde(default)]
    data: Vec<RawData>,
    defaults: Option<RawDefaults>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMeta {
    addr: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    host: Option<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawData {
    addr: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    local_socket: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    advertise: Option<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    stripe_size: Option<String>,
    stripe_count: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    inline_bytes: Option<String>,
}

fn check_addr(addr: &str, what: &str) -> Result<(), String> {
    use std::net::ToSocketAddrs;
    addr.to_socket_addrs()
        .map(|_| ())
        .map_err(|e| format!("{what} address {addr:?} is not host:port: {e}"))
}

impl ClusterConfig {
    /// A cluster of the metadata server at `meta_addr` and the data servers `data`, with a
    /// fresh secret and every other setting as a cluster file that names nothing else
    /// gives it. What `cluster up`, the simulator and tests start from.
    pub fn new(meta_addr: String, data: Vec<DataServerEntry>) -> ClusterConfig {
        ClusterConfig {
            secret: Secret::generate(),
            timeout_ms: crate::DEFAULT_TIMEOUT_MS,
            meta_addr,
            data,
            defaults: Defaults::default(),
            lease_ms: crate::limits::LEASE_MS,
            host: None,
            meta_host: None,
            streams: None,
            pipeline: None,
            compress: None,
            token: None,
            has_secret: true,
            tls: crate::tls::TlsSettings::default(),
        }
    }

    /// Connects to the server at `addr` with the cluster secret, over TLS when the file
    /// has `tls_ca` (administrative tools and servers talking to servers).
    pub fn connect(
        &self,
        addr: &str,
        timeout: std::time::Duration,
    ) -> Result<crate::Conn, stripefs_wire::WireError> {
        crate::Conn::connect_with(addr, &self.secret, None, timeout, self.tls.client.as_ref())
    }

    /// Reads and checks a cluster file; the message names the file and the problem.
    pub fn load(path: &Path) -> Result<ClusterConfig, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read cluster file {}: {e}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        ClusterConfig::parse_in(&text, Some(base))
            .map_err(|e| format!("cluster file {}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<ClusterConfig, String> {
        ClusterConfig::parse_in(text, None)
    }

    /// Parses a cluster file's text; relative TLS file paths are relative to `base` (the
    /// file's directory) when given.
    fn parse_in(text: &str, base: Option<&Path>) -> Result<ClusterConfig, String> {
        let raw: RawCluster = toml::from_str(text).map_err(|e| e.to_string())?;
        if let Some(t) = &raw.token {
            crate::token::Token::parse(t).map_err(|e| format!("token: {e}"))?;
        }
        let has_secret = raw.secret.is_some();
        let secret = match (&raw.secret, &raw.token) {
            (Some(s), _) => Secret::from_hex(s)?,
            // Never used: a client with a token authenticates with it.
            (None, Some(_)) => Secret::generate(),
            (None, None) => {
                return Err(
                    "no `secret` and no `token`: a client authenticates with one of them".into(),
                )
            }
        };
        check_addr(&raw.meta.addr, "metadata server")?;
        for (i, d) in raw.data.iter().enumerate() {
            check_addr(&d.addr, &format!("data server {i}"))?;
            if let Some(h) = &d.host {
                crate::host::check_host(h, &format!("data server {i}'s host"))?;
            }
            if let Some(a) = &d.advertise {
                check_addr(a, &format!("data server {i}'s advertise"))?;
            }
            if let Some(p) = &d.local_socket {
                if !Path::new(p).is_absolute() {
                    return Err(format!(
                        "data server {i}'s local_socket {p:?} must be an absolute path"
                    ));
                }
            }
        }
        if let Some(h) = &raw.host {
            crate::host::check_host(h, "host")?;
        }
        if let Some(h) = &raw.meta.host {
            crate::host::check_host(h, "the metadata server's host")?;
        }

        let mut defaults = Defaults::default();
        if let Some(d) = raw.defaults {
            if let Some(s) = d.stripe_size {
                defaults.stripe_size_bytes = stripefs_wire::stripe_size_of(parse_size(&s)?)
                    .map_err(|why| format!("default stripe_size {s}: {why}"))?;
            }
            if let Some(c) = d.stripe_count {
                if !raw.data.is_empty() && c as usize > raw.data.len() {
                    return Err(format!(
                        "default stripe_count {c} exceeds the number of data servers ({})",
                        raw.data.len()
                    ));
                }
                defaults.stripe_count = c;
            }
            if let Some(s) = d.inline_bytes {
                let b = parse_size(&s)?;
                if b > stripefs_wire::MAX_INLINE_BYTES as u64 {
                    return Err(format!(
                        "default inline_bytes {s} exceeds {}",
                        stripefs_wire::MAX_INLINE_BYTES
                    ));
                }
                defaults.inline_bytes = b as u32;
            }
        }
        let timeout_ms = raw.timeout_ms.unwrap_or(crate::DEFAULT_TIMEOUT_MS);
        if timeout_ms == 0 {
            return Err("timeout_ms must be above zero".into());
        }
        let lease_ms = raw.lease_ms.unwrap_or(crate::limits::LEASE_MS);
        check_lease(lease_ms)?;
        if let Some(n) = raw.streams {
            check_streams(n)?;
        }
        if let Some(n) = raw.pipeline {
            check_pipeline(n)?;
        }
        let compress = match &raw.compress {
            Some(c) => Some(c.parse::<crate::compress::Codec>()?),
            None => None,
        };
        let at = |p: String| match base {
            Some(b) if Path::new(&p).is_relative() => b.join(p),
            _ => PathBuf::from(p),
        };
        let ca = raw.tls_ca.map(|c| {
            if crate::tls::is_pem_text(&c) {
                c
            } else {
                at(c).display().to_string()
            }
        });
        let mut tls = crate::tls::TlsSettings {
            ca,
            cert: raw.tls_cert.map(at),
            key: raw.tls_key.map(at),
            require: raw.require_tls,
            name: raw.tls_name,
            client: None,
        };
        tls.check()?;
        Ok(ClusterConfig {
            secret,
            timeout_ms,
            meta_addr: raw.meta.addr,
            data: raw
                .data
                .into_iter()
                .map(|d| DataServerEntry {
                    addr: d.addr,
                    host: d.host,
                    local_socket: d.local_socket.map(PathBuf::from),
                    advertise: d.advertise,
                })
                .collect(),
            defaults,
            lease_ms,
            host: raw.host,
            meta_host: raw.meta.host,
            streams: raw.streams,
            pipeline: raw.pipeline,
            compress,
            token: raw.token,
            has_secret,
            tls,
        })
    }

    pub fn to_toml(&self) -> String {
        let raw = RawCluster {
            secret: self.has_secret.then(|| self.secret.to_hex()),
            token: self.token.clone(),
            timeout_ms: Some(self.timeout_ms),
            lease_ms: (self.lease_ms != crate::limits::LEASE_MS).then_some(self.lease_ms),
            host: self.host.clone(),
            streams: self.streams,
            pipeline: self.pipeline,
            compress: self.compress.map(|c| c.to_string()),
            tls_ca: self.tls.ca.clone(),
            tls_cert: self
                .tls
                .cert
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned()),
            tls_key: self
                .tls
                .key
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned()),
            require_tls: self.tls.require,
            tls_name: self.tls.name.clone(),
            meta: RawMeta {
                addr: self.meta_addr.clone(),
                host: self.meta_host.clone(),
            },
            data: self
                .data
                .iter()
                .map(|d| RawData {
                    addr: d.addr.clone(),
                    host: d.host.clone(),
                    local_socket: d
                        .local_socket
                        .as_ref()
                        .map(|p| p.to_string_lossy().into_owned()),
                    advertise: d.advertise.clone(),
                })
                .collect(),
            defaults: Some(RawDefaults {
                stripe_size: Some(self.defaults.stripe_size_bytes.to_string()),
                stripe_count: Some(self.defaults.stripe_count),
                inline_bytes: Some(self.defaults.inline_bytes.to_string()),
            }),
        };
        toml::to_string(&raw).expect("cluster config serializes")
    }

    /// The host id of a client using this file: `host` (of the file, or set by
    /// [`ClusterConfig::set_client_host`] from `--host`), else `STRIPEFS_HOST`, else the
    /// machine's hostname.
    pub fn client_host(&self) -> String {
        self.host
            .clone()
            .or_else(|| {
                std::env::var(crate::host::HOST_ENV)
                    .ok()
                    .filter(|h| !h.is_empty())
            })
            .unwrap_or_else(crate::host::hostname)
    }

    /// Sets the client's host id (from `--host` or `STRIPEFS_HOST`), if given, after
    /// checking it.
    pub fn set_client_host(&mut self, host: Option<&str>) -> Result<(), String> {
        if let Some(h) = host {
            crate::host::check_host(h, "--host")?;
            self.host = Some(h.to_string());
        }
        Ok(())
    }

    /// Writes the file with mode 0600 (it holds the secret), atomically.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        write_private(path, self.to_toml().as_bytes())
    }
}

/// A lease length a cluster may use: within [`crate::limits::MIN_LEASE_MS`] and
/// [`crate::limits::MAX_LEASE_MS`].
pub fn check_lease(lease_ms: u64) -> Result<(), String> {
    use crate::limits::{MAX_LEASE_MS, MIN_LEASE_MS};
    if !(MIN_LEASE_MS..=MAX_LEASE_MS).contains(&lease_ms) {
        return Err(format!(
            "lease_ms {lease_ms} must be between {MIN_LEASE_MS} and {MAX_LEASE_MS}"
        ));
    }
    Ok(())
}

/// Writes `bytes` to `path` with mode 0600 through a temporary file and a rename, and
/// syncs both the file and its directory.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Checks a stream count (`streams`, `--streams`).
pub fn check_streams(n: u32) -> Result<(), String> {
    if n == 0 || n > MAX_STREAMS {
        return Err(format!(
            "streams {n}: a client keeps 1 to {MAX_STREAMS} connections to each data server"
        ));
    }
    Ok(())
}

/// Most requests in flight per connection (`pipeline`); answers of a read pipeline
/// wait in the socket buffers, so a few are enough to hide a round trip.
pub const MAX_PIPELINE: u32 = 32;

/// Checks a pipeline depth (`pipeline`, `--pipeline`).
pub fn check_pipeline(n: u32) -> Result<(), String> {
    if n == 0 || n > MAX_PIPELINE {
        return Err(format!(
            "pipeline {n}: a client keeps 1 to {MAX_PIPELINE} requests in flight per connection"
        ));
    }
    Ok(())
}

/// A rate, or 0 for "off" (`0`, `off`).
pub fn parse_rate_or_off(text: &str) -> Result<u64, String> {
    match text.trim() {
        "0" | "off" => Ok(0),
        t => parse_rate(t),
    }
}

/// One server's own configuration.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub cluster_path: PathBuf,
    pub cluster: ClusterConfig,
    pub id: Option<u32>,
    pub listen: Option<String>,
    pub targets: Vec<PathBuf>,
    pub throttle_bytes_s: Option<u64>,
    pub db: Option<PathBuf>,
    /// A data server's background scrub rate (`scrub_rate`, "0" = off); `None`: the
    /// server's default.
    pub scrub_rate_bytes_s: Option<u64>,
    /// A data server sends read replies from its files with `sendfile` (`zero_copy`,
    /// default true); false copies them through memory, for comparison.
    pub zero_copy: bool,
    /// `host`: the server's host id, if its own file says (see [`ServerConfig::host_id`]).
    pub host: Option<String>,
    /// `host_net`: a data server's limit, per direction, on bytes to and from clients on
    /// other hosts (its share of an emulated host link).
    pub host_net_bytes_s: Option<u64>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    cluster: String,
    id: Option<u32>,
    listen: Option<String>,
    #[serde(default)]
    targets: Vec<String>,
    throttle: Option<String>,
    db: Option<String>,
    scrub_rate: Option<String>,
    zero_copy: Option<bool>,
    host: Option<String>,
    host_net: Option<String>,
}

impl ServerConfig {
    pub fn load(path: &Path) -> Result<ServerConfig, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read server config {}: {e}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        ServerConfig::parse(&text, base)
            .map_err(|e| format!("server config {}: {e}", path.display()))
    }

    pub fn parse(text: &str, base: &Path) -> Result<ServerConfig, String> {
        let raw: RawServer = toml::from_str(text).map_err(|e| e.to_string())?;
        let cluster_path = base.join(&raw.cluster);
        let cluster = ClusterConfig::load(&cluster_path)?;
        if !cluster.has_secret {
            return Err(format!(
                "cluster file {}: a server needs the cluster `secret` (a token is for clients)",
                cluster_path.display()
            ));
        }
        if cluster.data.is_empty() {
            return Err(format!(
                "cluster file {} lists no [[data]] servers: a client file may leave them out, a server's may not",
                cluster_path.display()
            ));
        }
        if let Some(l) = &raw.listen {
            check_addr(l, "listen")?;
        }
        let throttle_bytes_s = raw.throttle.as_deref().map(parse_rate).transpose()?;
        if let Some(h) = &raw.host {
            crate::host::check_host(h, "host")?;
        }
        let host_net_bytes_s = raw
            .host_net
            .as_deref()
            .map(|r| parse_rate(r).map_err(|e| format!("host_net: {e}")))
            .transpose()?;
        Ok(ServerConfig {
            cluster_path,
            cluster,
            id: raw.id,
            listen: raw.listen,
            targets: raw.targets.iter().map(|t| base.join(t)).collect(),
            throttle_bytes_s,
            db: raw.db.map(|d| base.join(d)),
            scrub_rate_bytes_s: raw
                .scrub_rate
                .as_deref()
                .map(parse_rate_or_off)
                .transpose()?,
            zero_copy: raw.zero_copy.unwrap_or(true),
            host: raw.host,
            host_net_bytes_s,
        })
    }

    /// The server's host id: `host` of its own file, else its entry's `host` in the
    /// cluster file, else the machine's hostname. The two files may not disagree.
    pub fn host_id(&self, role: stripefs_wire::Role) -> Result<String, String> {
        let entry = match role {
            stripefs_wire::Role::Meta => self.cluster.meta_host.clone(),
            stripefs_wire::Role::Data => self.cluster.data[self.data_id()? as usize].host.clone(),
        };
        match (&self.host, entry) {
            (Some(own), Some(listed)) if *own != listed => Err(format!(
                "host {own:?} but the cluster file puts this server on host {listed:?}"
            )),
            (Some(own), _) => Ok(own.clone()),
            (None, Some(listed)) => Ok(listed),
            (None, None) => Ok(crate::host::hostname()),
        }
    }

    /// The data server id, checked against the cluster file.
    pub fn data_id(&self) -> Result<u32, String> {
        let id = self
            .id
            .ok_or("a data server needs `id` (its index in [[data]])")?;
        if id as usize >= self.cluster.data.len() {
            return Err(format!(
                "id {id} but the cluster file lists {} data servers",
                self.cluster.data.len()
            ));
        }
        if self.targets.is_empty() {
            return Err("a data server needs at least one entry in `targets`".into());
        }
        Ok(id)
    }

    /// The address to listen on.
    pub fn listen_addr(&self, role: stripefs_wire::Role) -> Result<String, String> {
        if let Some(l) = &self.listen {
            return Ok(l.clone());
        }
        match role {
            stripefs_wire::Role::Meta => Ok(self.cluster.meta_addr.clone()),
            stripefs_wire::Role::Data => {
                Ok(self.cluster.data[self.data_id()? as usize].addr.clone())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> String {
        format!(
            "secret = \"{}\"\n[meta]\naddr = \"127.0.0.1:7000\"\n[[data]]\naddr = \"127.0.0.1:7100\"\n",
            Secret::generate().to_hex()
        )
    }

    #[test]
    fn parse_and_round_trip() {
        let c = ClusterConfig::parse(&sample()).unwrap();
        assert_eq!(c.data.len(), 1);
        assert_eq!(c.defaults, Defaults::default());
        let again = ClusterConfig::parse(&c.to_toml()).unwrap();
        assert_eq!(again.secret, c.secret);
        assert_eq!(again.data, c.data);
    }

    #[test]
    fn clear_errors() {
        let no_secret = "[meta]\naddr = \"127.0.0.1:7000\"\n[[data]]\naddr = \"127.0.0.1:7100\"\n";
        assert!(ClusterConfig::parse(no_secret)
            .unwrap_err()
            .contains("secret"));
        let bad_addr = sample().replace("127.0.0.1:7000", "nowhere");
        assert!(ClusterConfig::parse(&bad_addr)
            .unwrap_err()
            .contains("metadata server"));
        let unknown = format!("{}bogus = 1\n", sample());
        assert!(ClusterConfig::parse(&unknown).is_err());
        let wide = format!("{}[defaults]\nstripe_count = 2\n", sample());
        let e = ClusterConfig::parse(&wide).unwrap_err();
        assert!(
            e.contains("stripe_count 2 exceeds the number of data servers (1)"),
            "{e}"
        );
        let all = format!("{}[defaults]\nstripe_count = 1\n", sample());
        assert_eq!(ClusterConfig::parse(&all).unwrap().defaults.stripe_count, 1);
    }

    #[test]
    fn scrub_rate_parses_rates_and_off() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cluster.toml"), sample()).unwrap();
        let server = |extra: &str| {
            let text = format!("cluster = \"cluster.toml\"\nid = 0\ntargets = [\"t\"]\n{extra}");
            ServerConfig::parse(&text, dir.path())
        };
        assert_eq!(server("").unwrap().scrub_rate_bytes_s, None);
        let rate =
            |v: &str| server(&format!("scrub_rate = \"{v}\"\n")).map(|c| c.scrub_rate_bytes_s);
        assert_eq!(rate("16MiB"), Ok(Some(16 << 20)));
        assert_eq!(rate("0"), Ok(Some(0)));
        assert_eq!(rate("off"), Ok(Some(0)));
        assert!(rate("fast").is_err());
    }

    #[test]
    fn saved_file_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cluster.toml");
        ClusterConfig::parse(&sample()).unwrap().save(&p).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(ClusterConfig::load(&p).is_ok());
    }
}

/// The prefix of a stripefs FUSE mount's source (`stripefs:/path/cluster.toml`), by
/// which programs on the machine (the Open MPI components) learn the cluster file of
/// the daemon serving a mount from the mount table.
pub const MOUNT_SOURCE_PREFIX: &str = "stripefs:";

/// The mount source a daemon of cluster file `cluster` (absolute) gives its mount, if
/// the path can be written in a mount option (no comma, whitespace or backslash).
pub fn mount_source(cluster: &Path) -> Option<String> {
    let s = cluster.to_str()?;
    (cluster.is_absolute() && !s.contains([',', ' ', '\t', '\n', '\\']))
        .then(|| format!("{MOUNT_SOURCE_PREFIX}{s}"))
}

#[cfg(test)]
mod mount_source_tests {
    use super::*;

    #[test]
    fn sources_are_written_only_for_paths_a_mount_option_holds() {
        assert_eq!(
            mount_source(Path::new("/a/cluster.toml")).as_deref(),
            Some("stripefs:/a/cluster.toml")
        );
        assert_eq!(mount_source(Path::new("/a b/c.toml")), None);
        assert_eq!(mount_source(Path::new("/a,b/c.toml")), None);
        assert_eq!(mount_source(Path::new("rel.toml")), None);
    }
}
