//! A write that fails for lack of space, through a real mount, damages nothing: the
//! data server's only target is a small tmpfs this test mounts itself (as root).

mod common;

use common::{exe, fuse_unavailable, random_bytes, Cluster, FuseMount};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs mounted on a cluster's target. Dropping it stops the cluster first (its
/// data server holds files there), then unmounts, also when the test failed.
struct Tmpfs {
    mnt: PathBuf,
    cluster_dir: PathBuf,
}

impl Tmpfs {
    fn mount(mnt: &Path, size: &str, cluster_dir: &Path) -> Tmpfs {
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size}"),
                "h-data-enospc",
            ])
            .arg(mnt)
            .output()
            .unwrap();
        assert!(out.status.success(), "mount tmpfs: {out:?}");
        Tmpfs {
            mnt: mnt.to_path_buf(),
            cluster_dir: cluster_dir.to_path_buf(),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new(exe())
            .args(["cluster", "down", "--dir"])
            .arg(&self.cluster_dir)
            .output();
        let ok = Command::new("umount")
            .arg(&self.mnt)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
    }
}

/// Fills the file system holding `dir` with a file of zeros until it is full.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 64 << 10];
    loop {
        match f.write(&chunk) {
            Ok(n) if n > 0 => {}
            Ok(_) => break,
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
                break;
            }
        }
    }
    path
}

/// The case of issue 12, item 1: an 8 KiB file, the disk full, a 4 MiB write at byte
/// 100 through the mount fails with ENOSPC; once space is freed the whole file reads,
/// the bytes outside the failed range unchanged. Before the fix, reading failed with a
/// checksum error (the head block was rewritten, its checksum never).
#[test]
fn failed_write_on_a_full_disk_leaves_the_file_whole() {
    if let Some(why) = fuse_unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    }
    let c = Cluster::up(1, 1, &[]);
    c.down();
    let target = c.path().join("data0/t0");
    std::fs::remove_dir_all(&target).unwrap();
    std::fs::create_dir(&target).unwrap();
    let disk = Tmpfs::mount(&target, "64m", c.path());
    c.restart();
    let m = FuseMount::new(&c.cluster_file());

    let old = random_bytes(8 << 10);
    std::fs::write(m.p("f"), &old).unwrap();
    let filler = fill(&target);
    let new = random_bytes(4 << 20);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(m.p("f"))
        .unwrap();
    let failed = f.write_all_at(&new, 100).and_then(|()| f.sync_all());
    let e = failed.expect_err("a 4 MiB write to a full disk succeeded");
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
    drop(f);
    std::fs::remove_file(filler).unwrap();

    let back = std::fs::read(m.p("f")).expect("the file reads once space is back");
    assert!(back.len() >= old.len(), "the file shrank to {}", back.len());
    assert_eq!(
        back[..100],
        old[..100],
        "bytes before the failed write changed"
    );
    for (i, b) in back.iter().enumerate().skip(100) {
        let was = old.get(i).copied().unwrap_or(0);
        let now = new.get(i - 100).copied();
        assert!(
            *b == was || Some(*b) == now,
            "byte {i} reads {b}: neither its old value {was} nor the new one"
        );
    }
    drop(m);
    drop(disk);
}
