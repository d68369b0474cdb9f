//! Stop signals, handled one way for every stripefs process.
//!
//! A server (`stripefs serve`), the mount daemon and the benchmarks each stop on a
//! signal and then do work no signal handler may do (log, unmount, stop child
//! clusters). [`on_signals`] installs signal-hook's handler, which only writes to a
//! self-pipe, and runs the caller's function for each signal in a thread of its own,
//! where anything is allowed. The handler is process-wide, so no thread needs a
//! blocked mask, and unlike a mask it is not inherited across `exec` by the programs
//! a process starts (the benchmarks' servers, the mount's helpers).

use std::io;

pub use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

/// Runs `f(signal)` in a thread named `name` for every one of `signals` this process
/// receives from now on. Returns once the handler is installed; an error means no
/// handler is (the signals keep their default action).
pub fn on_signals(
    signals: &[i32],
    name: &str,
    mut f: impl FnMut(i32) + Send + 'static,
) -> io::Result<()> {
    // signal-hook panics on these; an error is the caller's to report.
    if let Some(&s) = signals
        .iter()
        .find(|s| signal_hook::consts::FORBIDDEN.contains(s))
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} cannot be caught", self::name(s)),
        ));
    }
    let mut it = signal_hook::iterator::Signals::new(signals)?;
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            for sig in it.forever() {
                f(sig);
            }
        })?;
    Ok(())
}

/// The signal's name for messages (`SIGTERM`), or its number.
pub fn name(sig: i32) -> String {
    signal_hook::low_level::signal_name(sig)
        .map(str::to_string)
        .unwrap_or_else(|| format!("signal {sig}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn a_raised_signal_reaches_the_function_in_its_thread() {
        let (tx, rx) = mpsc::channel();
        let usr1 = signal_hook::consts::SIGUSR1;
        on_signals(&[usr1], "sig-test", move |s| {
            let me = std::thread::current().name().map(str::to_string);
            let _ = tx.send((s, me));
        })
        .unwrap();
        for _ in 0..2 {
            signal_hook::low_level::raise(usr1).unwrap();
            let (s, thread) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
            assert_eq!(s, usr1);
            assert_eq!(thread.as_deref(), Some("sig-test"));
        }
        assert_eq!(name(SIGTERM), "SIGTERM");
    }

    #[test]
    fn a_forbidden_signal_is_an_error() {
        // SIGKILL cannot be caught: an error, not a handler that never runs.
        assert!(on_signals(&[signal_hook::consts::SIGKILL], "never", |_| {}).is_err());
    }
}
