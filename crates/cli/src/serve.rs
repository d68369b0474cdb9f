//! `stripefs serve meta|data --config FILE`: one server in the foreground.

use anyhow::{anyhow, Result};
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(Clone, Copy, ValueEnum)]
pub enum Role {
    Meta,
    Data,
}

#[derive(Args)]
pub struct ServeArgs {
    /// Which server to run.
    role: Role,
    /// The server's config file (names the cluster file, targets, throttle, database).
    #[arg(long)]
    config: PathBuf,
    /// Append logs to this file instead of standard error.
    #[arg(long)]
    log: Option<PathBuf>,
    /// A data server's background scrub rate (e.g. 8MiB; 0 = off). Overrides
    /// `scrub_rate` of the config file; default 8MiB.
    #[arg(long, value_parser = stripefs_rpc::parse_rate_or_off)]
    scrub_rate: Option<u64>,
    /// A data server copies read replies through memory instead of sending them from
    /// its files with sendfile (overrides `zero_copy` of the config file; for comparison).
    #[arg(long)]
    no_zero_copy: bool,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

pub fn run(a: ServeArgs) -> Result<()> {
    init_logging(a.log.as_deref(), true)?;
    let mut cfg = stripefs_rpc::ServerConfig::load(&a.config).map_err(|e| anyhow!(e))?;
    if a.scrub_rate.is_some() {
        cfg.scrub_rate_bytes_s = a.scrub_rate;
    }
    if a.no_zero_copy {
        cfg.zero_copy = false;
    }
    let shutdown = Arc::new(AtomicBool::new(false));
    // SAFETY: installing an async-signal-safe handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    let flag = shutdown.clone();
    std::thread::spawn(move || loop {
        if STOP.load(Ordering::SeqCst) {
            tracing::info!("signal received, shutting down");
            flag.store(true, Ordering::SeqCst);
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    });
    let r = match a.role {
        Role::Meta => stripefs_meta::run(&cfg, shutdown),
        Role::Data => stripefs_data::run(&cfg, shutdown),
    };
    match r {
        Ok(()) => {
            tracing::info!("stopped");
            Ok(())
        }
        Err(e) => {
            tracing::error!("{e}");
            Err(anyhow!(e))
        }
    }
}

/// Sends log lines (filtered by `STRIPEFS_LOG`, default `info`) to the file `log`, else
/// to stderr when `to_stderr`, else nowhere. Shared by the servers and the mount.
pub(crate) fn init_logging(log: Option<&std::path::Path>, to_stderr: bool) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_env("STRIPEFS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match log {
        Some(p) => {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| anyhow!("cannot open log file {}: {e}", p.display()))?;
            builder
                .with_ansi(false)
                .with_writer(std::sync::Mutex::new(f))
                .init();
        }
        None if to_stderr => builder.with_writer(std::io::stderr).init(),
        None => {}
    }
    Ok(())
}
