//! `stripefs run -- PROGRAM [ARGS]`: runs a program with the interception library
//! (`libstripefs_preload.so`, beside this binary) preloaded, so that its reads and
//! writes of files it opens on a stripefs mount go through the native client.

use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
#[command(trailing_var_arg = true)]
pub struct RunArgs {
    /// Log each file served natively and each that fell through, and counters at exit
    /// (STRIPEFS_PRELOAD_DEBUG=1).
    #[arg(long)]
    pub debug: bool,
    /// The program and its arguments (after `--`).
    #[arg(required = true, allow_hyphen_values = true)]
    pub command: Vec<OsString>,
}

/// The library beside the running binary (target/release/libstripefs_preload.so).
fn library() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("finding the stripefs binary")?;
    let lib = exe
        .parent()
        .map(|d| d.join("libstripefs_preload.so"))
        .context("the stripefs binary has no directory")?;
    if !lib.exists() {
        bail!(
            "{} is missing: build it with `cargo build --release` (it is the stripefs-preload crate)",
            lib.display()
        );
    }
    Ok(lib)
}

pub fn run(a: RunArgs) -> Result<()> {
    let lib = library()?;
    let mut preload = OsString::from(lib);
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let mut c = std::process::Command::new(&a.command[0]);
    c.args(&a.command[1..]).env("LD_PRELOAD", preload);
    if a.debug {
        c.env("STRIPEFS_PRELOAD_DEBUG", "1");
    }
    let e = c.exec();
    bail!("cannot run {}: {e}", a.command[0].to_string_lossy())
}
