//! `stripefs mount` and `stripefs umount`.
//!
//! Without `--foreground`, `mount` starts itself again as a detached daemon (a new
//! session, standard streams on /dev/null or the log file) and waits on a pipe until the
//! daemon reports that the mount is up, or why it failed. So `stripefs mount` returns
//! only once the mount works, fails at once with the daemon's reason (bad cluster file,
//! metadata server unreachable, wrong secret), and no daemon forks while it has threads.

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use stripefs_client::{Client, ClusterConfig};

#[derive(Args)]
pub struct MountArgs {
    /// Directory to mount the cluster on.
    mountpoint: PathBuf,
    /// Cluster description file (default: $STRIPEFS_CLUSTER).
    #[arg(long, env = "STRIPEFS_CLUSTER")]
    cluster: Option<PathBuf>,
    /// This client's host id (default: `host` in the cluster file, else the hostname).
    #[arg(long, env = "STRIPEFS_HOST")]
    host: Option<String>,
    /// Stay in the foreground (Ctrl-C or SIGTERM unmounts).
    #[arg(long)]
    foreground: bool,
    /// Append the daemon's log to this file.
    #[arg(long)]
    log: Option<PathBuf>,
    /// Let device nodes in the mount be opened as devices (mount option `dev`; root
    /// only). Off by default: they can be made, listed and archived, not opened.
    #[arg(long)]
    dev: bool,
    /// Honour set-user-ID and set-group-ID bits on exec (mount option `suid`; root only).
    #[arg(long)]
    suid: bool,
    /// Use the kernel's writeback cache: small writes (4 KiB from dd, cp, stdio) gather
    /// in the page cache and go out as large ones, several times faster. The kernel then
    /// trusts its own size and times of the files it caches, so a file another client
    /// grows or truncates meanwhile shows a stale size here, and it writes back whole
    /// 4 KiB pages, overwriting bytes another client wrote into the same page: only for
    /// files no other client touches while this mount writes them (one job's own
    /// output, for example), never for a file several nodes write at once.
    #[arg(long)]
    writeback_cache: bool,
    /// Internal: the pipe on which a daemon reports that the mount is up.
    #[arg(long, hide = true)]
    ready_fd: Option<i32>,
}

#[derive(Args)]
pub struct UmountArgs {
    /// The mount point.
    mountpoint: PathBuf,
    /// Detach now even if files are open (they keep working until closed).
    #[arg(short = 'z', long)]
    lazy: bool,
}

pub fn umount(a: UmountArgs) -> Result<()> {
    stripefs_fuse::unmount(&a.mountpoint, a.lazy)?;
    Ok(())
}

pub fn mount(a: MountArgs) -> Result<()> {
    if a.foreground || a.ready_fd.is_some() {
        return serve(a);
    }
    daemonize(a)
}

fn cluster_path(a: &MountArgs) -> Result<PathBuf> {
    let p = a
        .cluster
        .clone()
        .ok_or_else(|| anyhow!("no cluster given: pass --cluster FILE or set STRIPEFS_CLUSTER"))?;
    std::path::absolute(&p).with_context(|| format!("cluster file {}", p.display()))
}

/// Starts the daemon and waits for its verdict.
fn daemonize(a: MountArgs) -> Result<()> {
    let cluster = cluster_path(&a)?;
    let mountpoint = std::path::absolute(&a.mountpoint)?;
    let (rd, wr) = pipe()?;
    let exe = std::env::current_exe().context("finding the stripefs executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("mount")
        .arg(&mountpoint)
        .arg("--cluster")
        .arg(&cluster)
        .arg("--ready-fd")
        .arg(wr.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .current_dir("/");
    if let Some(log) = &a.log {
        cmd.arg("--log").arg(std::path::absolute(log)?);
    }
    if let Some(host) = &a.host {
        cmd.arg("--host").arg(host);
    }
    for (on, flag) in [
        (a.dev, "--dev"),
        (a.suid, "--suid"),
        (a.writeback_cache, "--writeback-cache"),
    ] {
        if on {
            cmd.arg(flag);
        }
    }
    // SAFETY: between fork and exec the closure only calls async-signal-safe functions.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            libc::setsid();
            // The write end must survive exec; the read end stays close-on-exec.
            if libc::fcntl(wr, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let spawned = cmd.spawn();
    // SAFETY: `wr` is our open descriptor; the child has its own copy.
    drop(unsafe { OwnedFd::from_raw_fd(wr) });
    let mut child = spawned.context("starting the mount daemon")?;
    let mut msg = String::new();
    std::fs::File::from(rd)
        .read_to_string(&mut msg)
        .context("waiting for the mount daemon")?;
    if msg.trim() == "ok" {
        return Ok(());
    }
    let status = child.wait().ok();
    match msg.strip_prefix("error: ") {
        Some(why) => bail!("{}", why.trim()),
        None => bail!("the mount daemon exited ({status:?}) before mounting"),
    }
}

fn pipe() -> Result<(OwnedFd, i32)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into `fds` on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("creating a pipe");
    }
    // SAFETY: fds[0] is a fresh descriptor that nothing else owns.
    Ok((unsafe { OwnedFd::from_raw_fd(fds[0]) }, fds[1]))
}

/// Tells the waiting parent (if any) how the mount went.
fn report(ready_fd: Option<i32>, r: &Result<()>) {
    let Some(fd) = ready_fd else { return };
    // SAFETY: the parent passed us this descriptor; we own it from here on.
    let mut f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let _ = match r {
        Ok(()) => f.write_all(b"ok\n"),
        Err(e) => f.write_all(format!("error: {e:#}\n").as_bytes()),
    };
}

/// Mounts and serves in this process until unmounted.
fn serve(a: MountArgs) -> Result<()> {
    let ready_fd = a.ready_fd;
    let started = crate::serve::init_logging(a.log.as_deref(), a.foreground)
        .and_then(|()| unmount_on_signals(a.mountpoint.clone()));
    if let Err(e) = started {
        let r = Err(e);
        report(ready_fd, &r);
        return r;
    }
    let mounted = connect_and_mount(&a);
    let r = mounted.as_ref().map(|_| ()).map_err(|e| anyhow!("{e:#}"));
    report(ready_fd, &r);
    let mounted = mounted?;
    // A stop signal that came while mounting found nothing to unmount yet.
    if STOPPING.load(std::sync::atomic::Ordering::SeqCst) {
        tracing::info!(
            "stopped while mounting: unmounting {}",
            a.mountpoint.display()
        );
        if let Err(e) = stripefs_fuse::unmount(&a.mountpoint, true) {
            tracing::debug!("unmounting after a stop while mounting: {e}");
        }
    }
    tracing::info!("serving {}", a.mountpoint.display());
    mounted.run().context("serving FUSE requests")?;
    tracing::info!("unmounted {}", a.mountpoint.display());
    Ok(())
}

fn connect_and_mount(a: &MountArgs) -> Result<stripefs_fuse::Mounted> {
    let path = cluster_path(a)?;
    let mut cfg = ClusterConfig::load(&path).map_err(|e| anyhow!(e))?;
    cfg.set_client_host(a.host.as_deref())
        .map_err(|e| anyhow!(e))?;
    // The mount's root is the namespace's root, which a token for a subtree may not
    // touch: say so plainly rather than fail on the first getattr.
    if let Some(t) = &cfg.token {
        let (t, _) = stripefs_rpc::token::Token::parse(t).map_err(|e| anyhow!("token: {e}"))?;
        if t.path != "/" {
            anyhow::bail!(
                "{} holds a token for {} only; a mount shows the whole namespace, so it needs the cluster secret or a token for /",
                path.display(),
                t.path
            );
        }
    }
    let client = Client::connect(&cfg).map_err(|e| anyhow!("{e}"))?;
    // The mount source names the cluster file, so that other programs on this machine
    // (the Open MPI components) can reach the same cluster natively.
    let fsname = std::fs::canonicalize(&path)
        .ok()
        .and_then(|p| stripefs_rpc::config::mount_source(&p))
        .unwrap_or_else(|| "stripefs".into());
    let opts = stripefs_fuse::MountOptions {
        fsname,
        dev: a.dev,
        suid: a.suid,
        writeback_cache: a.writeback_cache,
        ..stripefs_fuse::MountOptions::default()
    };
    Ok(stripefs_fuse::mount(client, &a.mountpoint, &opts)?)
}

/// Set by the first stop signal, for one that arrives before the mount exists.
static STOPPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// SIGINT, SIGTERM and SIGHUP unmount (lazily, so that open files do not keep a
/// stopping daemon's mount busy); the request loop then ends and the process exits.
/// Installed before mounting, so that no stop signal can leave a mount without its
/// daemon.
fn unmount_on_signals(mountpoint: PathBuf) -> Result<()> {
    use stripefs_sys::signals::{self, SIGHUP, SIGINT, SIGTERM};
    signals::on_signals(&[SIGINT, SIGTERM, SIGHUP], "unmount-signal", move |sig| {
        STOPPING.store(true, std::sync::atomic::Ordering::SeqCst);
        let sig = signals::name(sig);
        tracing::info!("{sig}: unmounting {}", mountpoint.display());
        if let Err(e) = stripefs_fuse::unmount(&mountpoint, true) {
            tracing::warn!("unmounting after {sig}: {e}");
        }
    })
    .context("installing the unmount-signal handler")
}
