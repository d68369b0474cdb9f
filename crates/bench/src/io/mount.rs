//! bench io through a FUSE mount: one process per client (`stripefs bench io-mount-phase`
//! re-executed), plain system calls, the same pattern as the native run.

use super::*;

/// The job of one client process of the `--mount` run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MountSpec {
    pub rank: u32,
    pub shape: Shape,
    pub seed: u64,
    /// The test files: `{dir}/{prefix}{file}`.
    pub dir: PathBuf,
    pub prefix: String,
}

/// Runs the pattern through the mount at `mount`, one process per client; the files
/// were created (with the run's layout) by `files`, natively.
pub(super) fn run_mount(files: &Remote, mount: &Path, sh: &Shape, seed: u64) -> Result<Phases> {
    let rel = files.dir.trim_start_matches('/');
    let dir = mount.join(rel);
    let first = dir.join(format!("{}0", files.prefix));
    if let Err(e) = std::fs::metadata(&first) {
        bail!(
            "--mount {}: {} (created through the cluster) is not there ({e}); is it a stripefs mount of this cluster?",
            mount.display(),
            first.display()
        );
    }
    let specs: Vec<Spec> = (0..sh.clients)
        .map(|rank| {
            Spec::Io(MountSpec {
                rank,
                shape: *sh,
                seed,
                dir: dir.clone(),
                prefix: files.prefix.clone(),
            })
        })
        .collect();
    let mut workers = Workers::start(&specs)?;
    let total = sh.clients as u64 * sh.block();
    let (write_s, w) = workers.phase("write")?;
    check_bytes(&w, sh, "write")?;
    let caches_dropped = drop_caches();
    let (read_s, r) = workers.phase("read")?;
    check_bytes(&r, sh, "read")?;
    // The client processes' CPU and traffic are not collected from the mount run.
    Ok(Phases::timed(total, write_s, read_s, caches_dropped))
}

pub(super) fn check_bytes(done: &[Done], sh: &Shape, what: &str) -> Result<()> {
    for (rank, d) in done.iter().enumerate() {
        if d.bytes != sh.block() {
            bail!(
                "client process {rank} reports {} bytes in the {what} phase, not {}",
                d.bytes,
                sh.block()
            );
        }
    }
    Ok(())
}

/// One phase (`write` or `read`) of one client process through the mount.
pub fn mount_phase(s: &MountSpec, phase: &str) -> Result<Done> {
    let write = match phase {
        "write" => true,
        "read" => false,
        _ => bail!("unknown io phase {phase:?}"),
    };
    let files = Local {
        dir: s.dir.clone(),
        prefix: s.prefix.clone(),
        files: s.shape.files(),
    };
    let pattern = Pattern::new(s.seed, s.shape.xfer as usize);
    let owner = reader_of(&s.shape, s.rank, write);
    client_phase(
        &files,
        &s.shape,
        &pattern,
        owner,
        write,
        &ProgressBar::hidden(),
    )?;
    Ok(Done {
        ops: s.shape.segments,
        bytes: s.shape.block(),
        busy_s: 0.0,
    })
}
