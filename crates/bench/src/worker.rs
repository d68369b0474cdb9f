//! One process per client, for the `--mount` variants of `bench io` and `bench md`.
//!
//! The parent starts `stripefs bench client-worker --spec JSON` once per client (the
//! running executable, `std::env::current_exe()`), with pipes on its standard input and
//! output, and waits until every worker has printed `ready`. A phase then runs as: the
//! parent writes `go PHASE` to every worker, each runs its part of the phase with plain
//! system calls on the mounted path and prints one line `done JSON` (its operation
//! count, bytes and busy seconds) or `error MESSAGE`. The phase's time is from the
//! parent's `go` to the last worker's `done`: a common start and the last finish, as the
//! threads of the native runs are timed. Process start-up is outside every phase.

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

#[derive(Args, Clone, Debug)]
pub struct WorkerArgs {
    /// The worker's job as JSON (written by the parent).
    #[arg(long)]
    pub spec: String,
}

/// What one worker did in one phase.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Done {
    pub ops: u64,
    pub bytes: u64,
    pub busy_s: f64,
}

/// A worker's job: it runs `phase` for each `go PHASE` line.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Spec {
    Io(crate::io::MountSpec),
    Md(crate::md::MountSpec),
}

/// The hidden `bench client-worker` subcommand: serves phases until its input ends.
pub fn serve(a: WorkerArgs) -> Result<()> {
    let spec: Spec = serde_json::from_str(&a.spec).context("bad --spec")?;
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")?;
    out.flush()?;
    for line in stdin.lock().lines() {
        let line = line?;
        let Some(phase) = line.strip_prefix("go ") else {
            bail!("unexpected command {line:?}");
        };
        let t0 = Instant::now();
        let r = match &spec {
            Spec::Io(s) => crate::io::mount_phase(s, phase),
            Spec::Md(s) => crate::md::mount_phase(s, phase),
        };
        match r {
            Ok(mut d) => {
                d.busy_s = t0.elapsed().as_secs_f64();
                writeln!(out, "done {}", serde_json::to_string(&d)?)?;
            }
            Err(e) => {
                // One line: the parent reports it with the client's rank.
                let msg = format!("{e:#}").replace('\n', " ");
                writeln!(out, "error {msg}")?;
                out.flush()?;
                std::process::exit(1);
            }
        }
        out.flush()?;
    }
    Ok(())
}

struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

/// The running workers of one run, in rank order. Dropping them closes their input
/// (they exit) and waits for them; a worker that does not exit in time is killed.
pub struct Workers {
    ws: Vec<Worker>,
}

impl Workers {
    /// Starts one worker per spec and waits until all are ready.
    pub fn start(specs: &[Spec]) -> Result<Workers> {
        let exe = std::env::current_exe().context("cannot find the stripefs executable")?;
        let mut w = Workers { ws: Vec::new() };
        for s in specs {
            let mut child = Command::new(&exe)
                .args(["bench", "client-worker", "--spec"])
                .arg(serde_json::to_string(s)?)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .with_context(|| format!("cannot start {}", exe.display()))?;
            let stdin = child.stdin.take();
            let stdout = BufReader::new(child.stdout.take().expect("piped"));
            w.ws.push(Worker {
                child,
                stdin,
                stdout,
            });
        }
        for rank in 0..w.ws.len() {
            let line = w.line(rank)?;
            if line != "ready" {
                bail!("client process {rank}: unexpected {line:?}");
            }
        }
        Ok(w)
    }

    fn line(&mut self, rank: usize) -> Result<String> {
        let mut line = String::new();
        let n = self.ws[rank].stdout.read_line(&mut line)?;
        if n == 0 {
            let st = self.ws[rank].child.wait()?;
            bail!("client process {rank} exited ({st}) without answering");
        }
        Ok(line.trim_end().to_string())
    }

    /// Runs `phase` on every worker at once; returns the seconds from the common start
    /// to the last finish and each worker's report, in rank order.
    pub fn phase(&mut self, phase: &str) -> Result<(f64, Vec<Done>)> {
        let t0 = Instant::now();
        for (rank, w) in self.ws.iter_mut().enumerate() {
            let stdin = w.stdin.as_mut().ok_or_else(|| anyhow!("worker closed"))?;
            writeln!(stdin, "go {phase}")
                .and_then(|_| stdin.flush())
                .with_context(|| format!("client process {rank} is gone"))?;
        }
        let mut done = Vec::with_capacity(self.ws.len());
        for rank in 0..self.ws.len() {
            let line = self.line(rank)?;
            if let Some(json) = line.strip_prefix("done ") {
                done.push(serde_json::from_str(json)?);
            } else if let Some(msg) = line.strip_prefix("error ") {
                bail!("client process {rank}, {phase} phase: {msg}");
            } else {
                bail!("client process {rank}: unexpected {line:?}");
            }
        }
        Ok((t0.elapsed().as_secs_f64(), done))
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for w in &mut self.ws {
            w.stdin.take();
        }
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        for w in &mut self.ws {
            loop {
                match w.child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() > deadline => {
                        let _ = w.child.kill();
                        let _ = w.child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(std::time::Duration::from_millis(10)),
                }
            }
        }
    }
}

/// Closes `f`, reporting the error close(2) returns (a mount reports write errors
/// there), which dropping a `File` would ignore.
pub fn close_file(f: std::fs::File) -> Result<()> {
    use std::os::fd::IntoRawFd;
    let fd = f.into_raw_fd();
    // SAFETY: we own `fd` (taken from the File) and close it exactly once.
    if unsafe { libc::close(fd) } != 0 {
        return Err(std::io::Error::last_os_error()).context("close");
    }
    Ok(())
}
