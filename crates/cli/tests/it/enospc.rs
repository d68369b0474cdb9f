//! A write that fails for lack of space, through a real mount, damages nothing: the
//! data server's only target is a small tmpfs this test mounts itself (as root).

use crate::common;

use common::{exe, fuse_unavailable, random_bytes, skip, Cluster, FuseMount};
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
        // The stopped data server may take a moment to let go of its files.
        let ok = (0..20).any(|_| {
            let done = Command::new("umount")
                .arg(&self.mnt)
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !done {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            done
        });
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
    }
}

/// A one-server cluster whose data server's only target is a tmpfs of `size`, or
/// `None` (with the reason printed) when not root.
fn cluster_on_tmpfs(extra: &[&str], size: &str) -> Option<(Cluster, Tmpfs)> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        skip("mounting a tmpfs needs root");
        return None;
    }
    let c = Cluster::up(1, 1, extra);
    c.down();
    let target = c.path().join("data0/t0");
    std::fs::remove_dir_all(&target).unwrap();
    std::fs::create_dir(&target).unwrap();
    let disk = Tmpfs::mount(&target, size, c.path());
    c.restart();
    Some((c, disk))
}

/// [`cluster_on_tmpfs`] with a mount of it, or `None` (with the reason printed) when
/// FUSE or root is missing. Bound in this order, the mount goes first when dropped.
fn mounted_on_tmpfs(size: &str) -> Option<(Cluster, Tmpfs, FuseMount)> {
    if let Some(why) = fuse_unavailable() {
        skip(&why);
        return None;
    }
    let (c, disk) = cluster_on_tmpfs(&[], size)?;
    let m = FuseMount::new(&c.cluster_file());
    Some((c, disk, m))
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

/// What a failure message needs to tell how a full disk took a write: the file system's
/// free space, every file on it with its size and allocated bytes, and the end of the
/// data server's log.
fn disk_report(dir: &Path, log: &Path) -> String {
    let df = Command::new("df")
        .args(["-k"])
        .arg(dir)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_else(|e| format!("df: {e}"));
    let mut files = String::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                todo.push(e.path());
            } else {
                use std::os::unix::fs::MetadataExt;
                files += &format!(
                    "{} {} bytes, {} allocated\n",
                    e.path().display(),
                    m.len(),
                    m.blocks() * 512
                );
            }
        }
    }
    let log = std::fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(40).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    format!("{df}{files}data server log (end):\n{}", tail.join("\n"))
}

/// The case of issue 12, item 1: an 8 KiB file, the disk full, a 4 MiB write at byte
/// 100 through the mount fails with ENOSPC; once space is freed the whole file reads,
/// the bytes outside the failed range unchanged. Before the fix, reading failed with a
/// checksum error (the head block was rewritten, its checksum never).
#[test]
fn failed_write_on_a_full_disk_leaves_the_file_whole() {
    let Some((c, disk, m)) = mounted_on_tmpfs("64m") else {
        return;
    };
    let target = c.path().join("data0/t0");

    let old = random_bytes(8 << 10);
    std::fs::write(m.p("f"), &old).unwrap();
    let filler = fill(&target);
    let new = random_bytes(4 << 20);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(m.p("f"))
        .unwrap();
    let failed = f.write_all_at(&new, 100).and_then(|()| f.sync_all());
    let e = failed.err().unwrap_or_else(|| {
        panic!(
            "a 4 MiB write to a full disk succeeded; the disk now:\n{}",
            disk_report(&target, &c.path().join("logs/data0.log"))
        )
    });
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

/// The close of another descriptor of the same open file does not take the error an
/// fsync must report: through the mount, a close of any descriptor sends a flush for the
/// open file, a forked child's at exec included (the CI failure of the test above, in
/// which another test's `Command` forked while the file was open: its exec flushed the
/// file, took the lost writes' error, and the fsync then succeeded). A 4 MiB write to a
/// full disk, a duplicate descriptor closed, then an fsync of the first: it fails; a
/// second fsync has nothing new to report.
#[test]
fn closing_a_duplicate_descriptor_leaves_the_lost_write_to_fsync() {
    let Some((c, disk, m)) = mounted_on_tmpfs("64m") else {
        return;
    };
    let target = c.path().join("data0/t0");
    std::fs::write(m.p("f"), random_bytes(8 << 10)).unwrap();
    let filler = fill(&target);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(m.p("f"))
        .unwrap();
    // The write itself may fail or not (the error may come back while it runs).
    let _ = f.write_all_at(&random_bytes(4 << 20), 100);
    // Its flush waits for every queued write, so all have failed by the fsync.
    let dup = f.try_clone().unwrap();
    drop(dup);
    let e = f
        .sync_all()
        .expect_err("the fsync succeeded: the close of a duplicate took the lost write's error");
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
    std::fs::remove_file(filler).unwrap();
    f.sync_all()
        .expect("nothing new was lost since the last fsync");
    drop(f);
    drop(m);
    drop(disk);
}

/// A full disk under the two transports that change how replies travel: a connection
/// pipelining 4 requests (plain TCP) and a TLS cluster. Native client: 2 MiB writes to
/// a full target fail with NoSpace (at the write, the fsync or the close); the error
/// replies keep the connection in step: once space is freed, the same client writes
/// and reads the file back exactly, over the same connections.
#[test]
fn full_disk_under_pipelining_and_tls_fails_cleanly_and_recovers() {
    use stripefs_client::{Client, ErrorCode, OpenOptions};
    for (name, extra, pipeline) in [
        ("pipelined", &[][..], Some(4)),
        ("tls", &["--tls"][..], None),
    ] {
        let Some((c, disk)) = cluster_on_tmpfs(extra, "48m") else {
            return;
        };
        let target = c.path().join("data0/t0");
        let mut cfg = stripefs_rpc::ClusterConfig::load(&c.cluster_file()).unwrap();
        cfg.pipeline = pipeline;
        let cl = Client::connect(&cfg).unwrap();
        let old = random_bytes(1 << 20);
        let f = cl.open("/f", &OpenOptions::create_new(0o644)).unwrap();
        f.write_at(0, &old).unwrap();
        f.fsync().unwrap();
        let filler = fill(&target);
        let big = random_bytes(2 << 20);
        let mut failed = None;
        for k in 0..8u64 {
            if let Err(e) = f.write_at((1 << 20) + k * (2 << 20), &big) {
                failed = Some(e);
                break;
            }
        }
        let failed = failed.or_else(|| f.fsync().err());
        let e = failed.unwrap_or_else(|| panic!("{name}: 16 MiB written to a full disk"));
        assert_eq!(e.code, ErrorCode::NoSpace, "{name}: {e:?}");
        let _ = f.close();
        std::fs::remove_file(filler).unwrap();

        // Same client, same connections: a new file, written and read back.
        let f = cl.open("/g", &OpenOptions::create_new(0o644)).unwrap();
        f.write_at(0, &big).unwrap();
        f.fsync().unwrap();
        f.close().unwrap();
        let f = cl.open("/g", &OpenOptions::read_only()).unwrap();
        let mut back = vec![0u8; big.len()];
        assert_eq!(f.read_at(0, &mut back).unwrap(), big.len(), "{name}");
        assert!(back == big, "{name}: /g reads other bytes");
        // The first file's fsynced megabyte is whole.
        let f = cl.open("/f", &OpenOptions::read_only()).unwrap();
        let mut back = vec![0u8; old.len()];
        assert_eq!(f.read_at(0, &mut back).unwrap(), old.len(), "{name}");
        assert!(back == old, "{name}: the fsynced bytes of /f changed");
        drop(f);
        drop(cl);
        drop(disk);
    }
}

/// A write the client acknowledged (write-behind) and the server then failed for lack
/// of space, whose error a later call took and its caller ignored: the next fsync of
/// every handle open at the time still fails. The mount does both: its kernel turns an
/// error after part of a write into a short count and drops it (the program retries
/// from there, never rewriting the lost bytes), and all processes writing a file through
/// one mount share its client's inode, so one process's write may take another's
/// error. Before the fix the fsync succeeded with the bytes gone (the CI failure of
/// `failed_write_on_a_full_disk_leaves_the_file_whole`). The fsync after that reports
/// nothing old: each handle reports a loss once, as Linux's write-back errors are.
#[test]
fn a_lost_background_write_fails_the_next_fsync_though_a_call_took_its_error() {
    use stripefs_client::{Client, ErrorCode, OpenOptions};
    let Some((c, disk)) = cluster_on_tmpfs(&[], "48m") else {
        return;
    };
    let target = c.path().join("data0/t0");
    let cl =
        Client::connect(&stripefs_rpc::ClusterConfig::load(&c.cluster_file()).unwrap()).unwrap();
    let f = cl.open("/f", &OpenOptions::create_new(0o644)).unwrap();
    f.write_at(0, &random_bytes(1 << 20)).unwrap();
    f.fsync().unwrap();
    // A second handle, as another process's on a mount; and a third opened after the
    // loss, which has nothing to report.
    let g = cl.open("/f", &OpenOptions::new().write(true)).unwrap();
    let filler = fill(&target);

    // Queued behind, the window holds it; its first 1 MiB chunk may fail before the
    // call returns, and then the call itself takes the error (as a caller that drops
    // it, like the kernel after part of a write, would). Otherwise a zero-length write
    // through the other handle takes it once the background write has failed: it
    // queues nothing.
    let taken = match f.write_at(1 << 20, &random_bytes(2 << 20)) {
        Err(e) => e,
        Ok(()) => {
            let t = std::time::Instant::now();
            loop {
                match g.write_at(3 << 20, &[]) {
                    Err(e) => break e,
                    Ok(()) if t.elapsed().as_secs() < 20 => {
                        std::thread::sleep(std::time::Duration::from_millis(10))
                    }
                    Ok(()) => panic!("2 MiB written to a full disk without an error"),
                }
            }
        }
    };
    assert_eq!(taken.code, ErrorCode::NoSpace, "{taken:?}");
    // The writer's fsync waits for what is still in flight, and fails.
    let e = f
        .fsync()
        .expect_err("the writer's fsync succeeded after a write was lost");
    assert_eq!(e.code, ErrorCode::NoSpace, "{e:?}");
    // Every write has ended: a handle opened now has nothing to report, and the other
    // one, open when the writes failed, reports them too.
    let later = cl.open("/f", &OpenOptions::new().write(true)).unwrap();
    later
        .fsync()
        .expect("a handle opened after the loss reports nothing");
    let e = g
        .fsync()
        .expect_err("the other handle's fsync succeeded after a write was lost");
    assert_eq!(e.code, ErrorCode::NoSpace, "{e:?}");
    std::fs::remove_file(filler).unwrap();
    f.fsync()
        .expect("nothing new was lost since the last fsync");
    g.close()
        .expect("nothing new was lost since the last fsync");
    let _ = f.close();
    drop(cl);
    drop(disk);
}
