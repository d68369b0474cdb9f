//! Raising the kernel's readahead of the mount (root only): FUSE starts every mount at
//! the kernel's default window, far below what a striped file can deliver.

use crate::READAHEAD_BYTES;
use std::path::Path;

/// Sets /sys/class/bdi/MAJOR:MINOR/read_ahead_kb of the mount on `mountpoint`, best
/// effort: without it reads still work, only with a smaller window.
pub fn raise(mountpoint: &Path) {
    let Some(dev) = device_of(mountpoint) else {
        tracing::debug!("no mountinfo entry for {}", mountpoint.display());
        return;
    };
    let file = format!("/sys/class/bdi/{dev}/read_ahead_kb");
    match std::fs::write(&file, format!("{}\n", READAHEAD_BYTES >> 10)) {
        Ok(()) => tracing::info!(
            "readahead of {} set to {READAHEAD_BYTES} bytes",
            mountpoint.display()
        ),
        Err(e) => tracing::info!("keeping the kernel's readahead ({file}: {e})"),
    }
}

/// The `major:minor` of the mount on `mountpoint`, from /proc/self/mountinfo (reading
/// it does not touch the mount itself).
fn device_of(mountpoint: &Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = mountpoint.to_str()?;
    info.lines().rev().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.get(4) == Some(&want)).then(|| f.get(2).map(|d| d.to_string()))?
    })
}
