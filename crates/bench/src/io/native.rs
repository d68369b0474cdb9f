//! bench io on the native client: the test files on the cluster, each client's handles,
//! and the placement of clients and files by host (`--colocate`, `--layout local`).

use super::*;

/// The pattern on stripefs: one client (own connections) per rank.
pub(super) struct Remote {
    pub(super) cluster: ClusterConfig,
    pub(super) dir: String,
    /// The test files are `{dir}/{prefix}{n}`.
    pub(super) prefix: String,
    pub(super) files: u32,
    pub(super) stripe_size: u32,
    pub(super) stripe_count: u32,
    pub(super) servers: Vec<u32>,
    pub(super) admin: Client,
    /// The host of each client (`--colocate`); `None`: the cluster file's client host.
    pub(super) hosts: Option<Vec<String>>,
    /// What the clients moved, added up as each handle closes.
    pub(super) traffic: Arc<Mutex<Traffic>>,
}

impl Remote {
    pub(super) fn prepare(
        cluster: &ClusterConfig,
        a: &IoArgs,
        files: u32,
        prefix: &str,
    ) -> Result<Remote> {
        let hosts = match colocate_fraction(a) {
            Some(f) => Some(colocated_hosts(cluster, a.clients, f)?),
            None => None,
        };
        let admin = Client::connect(cluster)?;
        let dir = a.path.trim_end_matches('/').to_string();
        if admin.stat(&dir).is_err() {
            admin
                .mkdir(&dir, 0o755)
                .with_context(|| format!("cannot create {dir}"))?;
        }
        let stripe_size = match a.stripe_size {
            Some(s) => Some(
                stripefs_wire::stripe_size_of(s).map_err(|why| anyhow!("--stripe-size: {why}"))?,
            ),
            None => None,
        };
        let policy = a.layout.as_deref().and_then(Policy::parse);
        let mut hint = LayoutHint {
            stripe_size_bytes: stripe_size,
            stripe_count: a.stripe_count,
            policy,
            ..LayoutHint::default()
        };
        // A shared file under the local policy, with clients on the servers' hosts: laid
        // out by rank, so that each rank's transfers land on its own host.
        if let (Some(Policy::Local), Some(h), 1) = (policy, &hosts, files) {
            match by_rank(cluster, &shape(a)?, h, stripe_size) {
                Ok((unit, order)) => {
                    println!(
                        "local layout of a shared file: stripe size {}, data servers {order:?} in rank order, so that each client's transfers stay on its host",
                        format_size(unit as u64)
                    );
                    hint.stripe_size_bytes = Some(unit);
                    hint.stripe_count = None;
                    hint.policy = None;
                    hint.servers = Some(order);
                }
                Err(why) => println!(
                    "local layout of a shared file: {why}; the file is placed on the first client's host"
                ),
            }
        }
        let mut servers = std::collections::BTreeSet::new();
        let (mut ss, mut sc) = (0, 0);
        for f in 0..files {
            let path = format!("{dir}/{prefix}{f}");
            let _ = admin.unlink(&path);
            let opts = OpenOptions {
                layout: hint.clone(),
                ..OpenOptions::create_new(0o644)
            };
            // Created from the host of the client that writes it first, which a local
            // layout places the file on.
            let creator = match &hosts {
                Some(h) => Some(client_on(cluster, &h[f as usize])?),
                None => None,
            };
            let file = creator
                .as_ref()
                .unwrap_or(&admin)
                .open(&path, &opts)
                .with_context(|| format!("cannot create {path}"))?;
            let attr = file.attr()?;
            let layout = attr
                .layout
                .clone()
                .ok_or_else(|| anyhow!("{path} has no layout"))?;
            ss = layout.stripe_size_bytes;
            sc = layout.servers.len() as u32;
            servers.extend(layout.servers.iter().map(|s| s.0));
            file.close()?;
        }
        Ok(Remote::assemble(
            cluster,
            dir,
            prefix,
            files,
            (ss, sc, servers),
            admin,
            hosts,
        ))
    }

    /// A `Remote` from what `prepare` or `attach` found: the stripe size, stripe count
    /// and data servers of the test files.
    pub(super) fn assemble(
        cluster: &ClusterConfig,
        dir: String,
        prefix: &str,
        files: u32,
        layout: (u32, u32, std::collections::BTreeSet<u32>),
        admin: Client,
        hosts: Option<Vec<String>>,
    ) -> Remote {
        Remote {
            cluster: cluster.clone(),
            dir,
            prefix: prefix.to_string(),
            files,
            stripe_size: layout.0,
            stripe_count: layout.1,
            servers: layout.2.into_iter().collect(),
            admin,
            hosts,
            traffic: Arc::default(),
        }
    }

    /// The test files [`Remote::prepare`] made (in another process of the job): for the
    /// ranks of `stripefs-mpi io`, which open them but create nothing.
    pub(super) fn attach(
        cluster: &ClusterConfig,
        a: &IoArgs,
        files: u32,
        prefix: &str,
    ) -> Result<Remote> {
        let admin = Client::connect(cluster)?;
        let dir = a.path.trim_end_matches('/').to_string();
        let mut servers = std::collections::BTreeSet::new();
        let (mut ss, mut sc) = (0, 0);
        for f in 0..files {
            let path = format!("{dir}/{prefix}{f}");
            let layout = admin
                .get_layout(&path)
                .with_context(|| format!("cannot find {path}"))?;
            ss = layout.stripe_size_bytes;
            sc = layout.servers.len() as u32;
            servers.extend(layout.servers.iter().map(|s| s.0));
        }
        Ok(Remote::assemble(
            cluster,
            dir,
            prefix,
            files,
            (ss, sc, servers),
            admin,
            None,
        ))
    }

    /// The traffic added up since the last call (and starts counting anew).
    pub(super) fn take_traffic(&self) -> Traffic {
        std::mem::take(&mut *self.traffic.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The sum of the throttle rates of the targets the files use, in MiB/s, or `None`
    /// when any of them is unthrottled.
    pub(super) fn ceiling_mib_s(&self) -> Result<Option<f64>> {
        let mut sum = 0u64;
        for &s in &self.servers {
            let st = self.admin.data_status(stripefs_wire::ServerId(s))?;
            for t in st.targets {
                match t.throttle_bytes_s {
                    Some(r) => sum += r,
                    None => return Ok(None),
                }
            }
        }
        Ok(Some(sum as f64 / (1u64 << 20) as f64))
    }

    pub(super) fn cleanup(&self) {
        for f in 0..self.files {
            let _ = self
                .admin
                .unlink(&format!("{}/{}{f}", self.dir, self.prefix));
        }
    }
}

pub(super) struct RemoteHandle {
    pub(super) file: Option<stripefs_client::File>,
    pub(super) client: Client,
    /// Where the client's traffic is added when the handle closes.
    pub(super) traffic: Arc<Mutex<Traffic>>,
}

impl Handle for RemoteHandle {
    fn advise_sequential(&mut self, off: u64, len: u64) {
        if let Some(f) = &self.file {
            f.advise_sequential(off, len);
        }
    }
    fn write_at(&mut self, off: u64, buf: &[u8]) -> Result<()> {
        Ok(self.file()?.write_at(off, buf)?)
    }
    fn write_buf(&mut self, off: u64, buf: IoBuf) -> Result<()> {
        Ok(self.file()?.write_buf(off, buf)?)
    }
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<()> {
        let n = self.file()?.read_at(off, buf)?;
        if n != buf.len() {
            bail!("short read: {n} of {} bytes at offset {off}", buf.len());
        }
        Ok(())
    }
    fn read_buf(&mut self, off: u64, buf: &mut IoBuf) -> Result<()> {
        let n = self.file()?.read_buf(off, buf)?;
        if n != buf.len() {
            bail!("short read: {n} of {} bytes at offset {off}", buf.len());
        }
        Ok(())
    }
    fn fsync(&mut self) -> Result<()> {
        Ok(self.file()?.fsync()?)
    }
    fn close(mut self: Box<Self>) -> Result<()> {
        let r = match self.file.take() {
            Some(f) => f.close(),
            None => Ok(()),
        };
        self.traffic
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(&self.client.traffic());
        Ok(r?)
    }
}

impl RemoteHandle {
    pub(super) fn file(&self) -> Result<&stripefs_client::File> {
        self.file
            .as_ref()
            .ok_or_else(|| anyhow!("file already closed"))
    }
}

impl Backend for Remote {
    fn take_traffic(&self) -> Option<Traffic> {
        Some(Remote::take_traffic(self))
    }

    fn open(&self, rank: u32, file: u32, write: bool) -> Result<Box<dyn Handle>> {
        // A client of its own per rank and phase: its own connections, no shared caches.
        let client = match &self.hosts {
            Some(h) => client_on(&self.cluster, &h[rank as usize])?,
            None => Client::connect(&self.cluster)?,
        };
        let path = format!("{}/{}{file}", self.dir, self.prefix);
        let opts = if write {
            OpenOptions::write_only()
        } else {
            OpenOptions::read_only()
        };
        let f = client
            .open(&path, &opts)
            .with_context(|| format!("cannot open {path}"))?;
        Ok(Box::new(RemoteHandle {
            file: Some(f),
            client,
            traffic: self.traffic.clone(),
        }))
    }
}

/// The host of each of `clients` clients under `--colocate`: client i on the host of
/// data server i modulo the data servers (the cluster file's `[[data]] host`).
pub(super) fn colocated_hosts(
    cluster: &ClusterConfig,
    clients: u32,
    fraction: f64,
) -> Result<Vec<String>> {
    let hosts: Vec<&String> = cluster
        .data
        .iter()
        .map(|d| d.host.as_ref())
        .collect::<Option<_>>()
        .ok_or_else(|| {
            anyhow!(
                "--colocate needs the data servers' hosts in the cluster file ([[data]] host = ...), as `cluster up --hosts K` writes them"
            )
        })?;
    if hosts.iter().any(|h| *h == REMOTE_CLIENT_HOST) {
        bail!("a data server's host is {REMOTE_CLIENT_HOST:?}, the host --colocate-fraction gives the other clients");
    }
    let near = (fraction * clients as f64).round() as usize;
    Ok((0..clients as usize)
        .map(|i| {
            if i < near {
                hosts[i % hosts.len()].clone()
            } else {
                REMOTE_CLIENT_HOST.to_string()
            }
        })
        .collect())
}

/// The layout a shared file needs for each rank's transfers to stay on its own host, as
/// a user of mpi-io-test sets it with `setstripe --servers`: one data server per client,
/// in rank order, a server of the client's host where it has one (any unused server
/// otherwise), and a stripe size of the bytes each rank writes contiguously (its block,
/// or one transfer when interleaved) unless `stripe_size` is given. With as many stripes
/// as clients, rank r's k-th unit is the file's unit k x clients + r, on server r.
/// `Err` says why no such layout exists.
pub(super) fn by_rank(
    cluster: &ClusterConfig,
    sh: &Shape,
    hosts: &[String],
    stripe_size: Option<u32>,
) -> std::result::Result<(u32, Vec<u32>), String> {
    let unit = match stripe_size {
        Some(s) => s,
        None => {
            let per_rank = if sh.interleaved { sh.xfer } else { sh.block() };
            u32::try_from(per_rank)
                .map_err(|_| format!("{per_rank} bytes per rank is over a stripe"))?
        }
    };
    if let Some(why) = stripefs_wire::stripe_size_error(unit) {
        return Err(why);
    }
    let mut order: Vec<u32> = Vec::with_capacity(hosts.len());
    for h in hosts {
        let unused = |i: &usize| !order.contains(&(*i as u32));
        let own = (0..cluster.data.len())
            .filter(unused)
            .find(|&i| cluster.data[i].host.as_deref() == Some(h.as_str()));
        match own.or_else(|| (0..cluster.data.len()).find(unused)) {
            Some(i) => order.push(i as u32),
            None => {
                return Err(format!(
                    "{} clients but {} data servers",
                    hosts.len(),
                    cluster.data.len()
                ))
            }
        }
    }
    Ok((unit, order))
}

/// The host of the clients that `--colocate-fraction` does not colocate: one with no
/// data server.
pub(super) const REMOTE_CLIENT_HOST: &str = "remote-client";

/// The fraction of clients colocated: 1 with `--colocate`, else `--colocate-fraction`.
pub(super) fn colocate_fraction(a: &IoArgs) -> Option<f64> {
    if a.colocate {
        Some(1.0)
    } else {
        a.colocate_fraction
    }
}
