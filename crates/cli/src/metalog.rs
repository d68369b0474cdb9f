//! `stripefs meta-log check|repair`: the offline check and repair of a metadata server's
//! log, for when the server refuses to start on it (see `stripefs_meta::logtool`).

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use stripefs_meta::{logtool, FsDisk};

#[derive(Subcommand)]
pub enum MetaLogCmd {
    /// List every log file and its records; for damage, which valid records beyond it
    /// would be lost, with their operations. Exit status 1 if a server would refuse to
    /// start.
    Check(CheckArgs),
    /// Keep what is valid: replay the records before the damage and, if the namespace
    /// checks clean with them, the valid records beyond it (else say which are dropped);
    /// move the damaged log files aside and start a fresh log. Without --yes, only says
    /// what it would do.
    Repair(RepairArgs),
}

#[derive(Args)]
pub struct CheckArgs {
    /// The metadata database (its log files are DB.wal0 and DB.wal1). The server must
    /// be stopped.
    #[arg(long)]
    db: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct RepairArgs {
    /// The metadata database. The server must be stopped.
    #[arg(long)]
    db: PathBuf,
    /// Repair (without it: a dry run that changes nothing).
    #[arg(long)]
    yes: bool,
    /// Print the outcome as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: MetaLogCmd) -> Result<()> {
    match cmd {
        MetaLogCmd::Check(a) => {
            let report = logtool::inspect(&FsDisk, &a.db).map_err(anyhow::Error::msg)?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report.render());
            }
            if !report.is_clean() {
                std::process::exit(1);
            }
            Ok(())
        }
        MetaLogCmd::Repair(a) => {
            let plan = logtool::repair(&FsDisk, &a.db, a.yes).map_err(anyhow::Error::msg)?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&plan)?);
            } else {
                print!("{}", plan.render());
            }
            if a.yes && !plan.report.is_clean() && !plan.applied {
                bail!("the repair was not applied");
            }
            Ok(())
        }
    }
}
