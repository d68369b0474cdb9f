//! `stripefs xattr`: extended attributes of a file without a mount (the mount serves
//! getfattr/setfattr and friends itself).

use crate::fsops::ClusterArg;
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use std::io::Write;

#[derive(Subcommand)]
pub enum XattrCmd {
    /// List the attribute names of a file (trusted.* only for root).
    List(XattrPath),
    /// Print an attribute's value (raw bytes; --hex for hexadecimal).
    Get(XattrGet),
    /// Set an attribute (names carry their namespace: user.NAME, trusted.NAME,
    /// security.NAME).
    Set(XattrSet),
    /// Remove an attribute.
    Rm(XattrName),
}

#[derive(Args)]
pub struct XattrPath {
    /// Path in stripefs (absolute; a symlink is followed).
    path: String,
    #[command(flatten)]
    c: ClusterArg,
}

#[derive(Args)]
pub struct XattrName {
    /// Path in stripefs (absolute; a symlink is followed).
    path: String,
    /// Attribute name with its namespace, e.g. user.checksum.
    name: String,
    #[command(flatten)]
    c: ClusterArg,
}

#[derive(Args)]
pub struct XattrGet {
    #[command(flatten)]
    n: XattrName,
    /// Print the value in hexadecimal.
    #[arg(long)]
    hex: bool,
}

#[derive(Args)]
pub struct XattrSet {
    #[command(flatten)]
    n: XattrName,
    /// The value (UTF-8 text as given).
    value: String,
    /// Fail if the attribute exists (XATTR_CREATE).
    #[arg(long, conflicts_with = "replace")]
    create: bool,
    /// Fail if the attribute does not exist (XATTR_REPLACE).
    #[arg(long)]
    replace: bool,
}

pub fn run(cmd: XattrCmd) -> Result<()> {
    match cmd {
        XattrCmd::List(a) => {
            let c = a.c.connect()?;
            for n in c.list_xattr(&a.path).context("cannot list attributes")? {
                println!("{n}");
            }
        }
        XattrCmd::Get(a) => {
            let c = a.n.c.connect()?;
            let v = c
                .get_xattr(&a.n.path, &a.n.name)
                .context("cannot read the attribute")?;
            if a.hex {
                let hex: String = v.iter().map(|b| format!("{b:02x}")).collect();
                println!("{hex}");
            } else {
                let mut out = std::io::stdout().lock();
                out.write_all(&v)?;
                if std::io::IsTerminal::is_terminal(&out) {
                    out.write_all(b"\n")?;
                }
            }
        }
        XattrCmd::Set(a) => {
            let mode = match (a.create, a.replace) {
                (true, false) => stripefs_client::XATTR_SET_CREATE,
                (false, true) => stripefs_client::XATTR_SET_REPLACE,
                (false, false) => stripefs_client::XATTR_SET_ANY,
                (true, true) => bail!("--create and --replace exclude each other"),
            };
            let c = a.n.c.connect()?;
            c.set_xattr(&a.n.path, &a.n.name, a.value.as_bytes(), mode)
                .context("cannot set the attribute")?;
        }
        XattrCmd::Rm(a) => {
            let c = a.c.connect()?;
            c.remove_xattr(&a.path, &a.name)
                .context("cannot remove the attribute")?;
        }
    }
    Ok(())
}
