//! `stripefs serve meta|data --config FILE`: one server in the foreground.

use anyhow::{anyhow, Context, Result};
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
    let flag = shutdown.clone();
    use stripefs_sys::signals;
    signals::on_signals(
        &[signals::SIGTERM, signals::SIGINT],
        "stop-signal",
        move |sig| {
            tracing::info!("{} received, shutting down", signals::name(sig));
            flag.store(true, Ordering::SeqCst);
        },
    )
    .context("installing the stop-signal handler")?;
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
                .with_writer(std::sync::Mutex::new(Lossy(f)))
                .init();
        }
        None if to_stderr => builder.with_writer(|| Lossy(std::io::stderr())).init(),
        None => {}
    }
    Ok(())
}

/// A log destination whose failures are dropped: a log line that cannot be written (its
/// disk full, often the same disk the server is full on) is lost, never an error. Given
/// an error, the logging library reports it with `eprintln!`, which panics when stderr
/// fails too (a server's stderr is its log file): a full disk then killed every
/// connection thread that logged (the client saw "connection closed" instead of ENOSPC).
struct Lossy<W>(W);

impl<W: std::io::Write> std::io::Write for Lossy<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = self.0.write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = self.0.flush();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Lossy;
    use std::io::Write;

    /// A writer that always fails, as a log file on a full disk does.
    struct Full;

    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
        }
    }

    #[test]
    fn a_log_that_cannot_be_written_is_dropped_not_an_error() {
        let mut w = Lossy(Full);
        assert_eq!(w.write(b"a line\n").unwrap(), 7);
        w.flush().unwrap();
        let mut ok = Lossy(Vec::new());
        writeln!(ok, "kept").unwrap();
        assert_eq!(ok.0, b"kept\n");
    }
}
