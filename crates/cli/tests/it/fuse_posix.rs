//! A real FUSE mount (`stripefs mount`) over a real cluster, used through the kernel with
//! ordinary system calls: the POSIX semantics programs rely on, two mounts with
//! close-to-open consistency, a large directory, permission errors as a non-root user,
//! and a cluster that goes away and comes back. Each test skips, saying why, where FUSE
//! is unavailable.

use crate::common;
use common::*;
use std::ffi::CString;
use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

macro_rules! need_fuse {
    () => {
        if let Some(why) = fuse_unavailable() {
            skip(&why);
            return;
        }
    };
}

/// Skips the test, saying why, unless it runs as root.
macro_rules! need_root {
    ($why:expr) => {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            skip(&$why);
            return;
        }
    };
}

fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

#[test]
fn read_write_append_truncate_and_stat() {
    need_fuse!();
    let c = Cluster::up(2, 1, &[]);
    let m = FuseMount::new(&c.cluster_file());
    let data = random_bytes(3 << 20);
    fs::write(m.p("a"), &data).unwrap();
    assert_eq!(fs::read(m.p("a")).unwrap(), data);

    // Writes and reads at odd offsets, past the end (a hole reads as zeros).
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.p("a"))
        .unwrap();
    f.seek(SeekFrom::Start(12345)).unwrap();
    f.write_all(b"hello").unwrap();
    f.seek(SeekFrom::Start((4 << 20) + 7)).unwrap();
    f.write_all(b"tail").unwrap();
    f.sync_all().unwrap();
    let mut buf = [0u8; 5];
    f.seek(SeekFrom::Start(12345)).unwrap();
    f.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"hello");
    drop(f);
    let got = fs::read(m.p("a")).unwrap();
    assert_eq!(got.len(), (4 << 20) + 11);
    assert!(got[3 << 20..(4 << 20) + 7].iter().all(|&b| b == 0));
    assert_eq!(&got[..12345], &data[..12345]);

    // O_APPEND from two handles interleaves without overwriting.
    fs::write(m.p("log"), b"0").unwrap();
    let mut x = OpenOptions::new().append(true).open(m.p("log")).unwrap();
    let mut y = OpenOptions::new().append(true).open(m.p("log")).unwrap();
    for _ in 0..3 {
        x.write_all(b"x").unwrap();
        y.write_all(b"yy").unwrap();
    }
    drop((x, y));
    assert_eq!(fs::read(m.p("log")).unwrap(), b"0xyyxyyxyy");

    // truncate and ftruncate, shrinking and growing.
    let f = OpenOptions::new().write(true).open(m.p("a")).unwrap();
    f.set_len(100).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 100);
    f.set_len(5000).unwrap();
    drop(f);
    let got = fs::read(m.p("a")).unwrap();
    assert_eq!(got.len(), 5000);
    assert_eq!(&got[..100], &data[..100]);
    assert!(got[100..].iter().all(|&b| b == 0));
    let cpath = cstr(&m.p("a"));
    // SAFETY: a valid path string.
    assert_eq!(unsafe { libc::truncate(cpath.as_ptr(), 10) }, 0);
    assert_eq!(fs::metadata(m.p("a")).unwrap().len(), 10);

    // stat: type, mode, size, links, times; chmod, chown, utimens.
    let md = fs::metadata(m.p("a")).unwrap();
    assert!(md.is_file());
    assert_eq!(md.nlink(), 1);
    fs::set_permissions(m.p("a"), fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(fs::metadata(m.p("a")).unwrap().mode() & 0o7777, 0o640);
    std::os::unix::fs::chown(m.p("a"), Some(1234), Some(5678)).unwrap();
    let md = fs::metadata(m.p("a")).unwrap();
    assert_eq!((md.uid(), md.gid()), (1234, 5678));
    let t = [
        libc::timespec {
            tv_sec: 1_000_000_000,
            tv_nsec: 5,
        },
        libc::timespec {
            tv_sec: 1_200_000_000,
            tv_nsec: 7,
        },
    ];
    // SAFETY: a valid path and two timespecs.
    let r = unsafe { libc::utimensat(libc::AT_FDCWD, cpath.as_ptr(), t.as_ptr(), 0) };
    assert_eq!(r, 0);
    let md = fs::metadata(m.p("a")).unwrap();
    assert_eq!((md.atime(), md.mtime()), (1_000_000_000, 1_200_000_000));
    assert_eq!(md.mtime_nsec(), 7);

    // statfs shows the cluster's capacity.
    let mut sv: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid path and out-pointer.
    assert_eq!(
        unsafe { libc::statvfs(cstr(m.path()).as_ptr(), &mut sv) },
        0
    );
    assert!(sv.f_blocks > 0 && sv.f_bfree <= sv.f_blocks);
    assert_eq!(sv.f_namemax, 255);
}

#[test]
fn namespace_rename_unlink_links_fifo_and_errno() {
    need_fuse!();
    let c = Cluster::up(2, 1, &[]);
    let m = FuseMount::new(&c.cluster_file());

    fs::create_dir(m.p("d")).unwrap();
    fs::write(m.p("d/f"), b"one").unwrap();
    fs::write(m.p("d/g"), b"two").unwrap();
    // rename over an existing file replaces it atomically.
    fs::rename(m.p("d/g"), m.p("d/f")).unwrap();
    assert_eq!(fs::read(m.p("d/f")).unwrap(), b"two");
    assert_eq!(
        errno_of(&fs::metadata(m.p("d/g")).unwrap_err()),
        libc::ENOENT
    );
    // rename of a directory, and over an empty directory.
    fs::create_dir(m.p("e")).unwrap();
    fs::rename(m.p("d"), m.p("e")).unwrap();
    assert_eq!(fs::read(m.p("e/f")).unwrap(), b"two");

    // unlink of an open file: still readable and writable until closed.
    fs::write(m.p("open"), b"still here").unwrap();
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.p("open"))
        .unwrap();
    fs::remove_file(m.p("open")).unwrap();
    assert_eq!(
        errno_of(&fs::metadata(m.p("open")).unwrap_err()),
        libc::ENOENT
    );
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "still here");
    f.write_all(b"!").unwrap();
    f.sync_all().unwrap();
    drop(f);

    // Hard links share data and count links; symlinks resolve.
    fs::hard_link(m.p("e/f"), m.p("h")).unwrap();
    assert_eq!(fs::metadata(m.p("h")).unwrap().nlink(), 2);
    assert_eq!(
        fs::metadata(m.p("e/f")).unwrap().ino(),
        fs::metadata(m.p("h")).unwrap().ino()
    );
    std::os::unix::fs::symlink("e/f", m.p("s")).unwrap();
    assert_eq!(fs::read_link(m.p("s")).unwrap(), Path::new("e/f"));
    assert_eq!(fs::read(m.p("s")).unwrap(), b"two");
    assert!(fs::symlink_metadata(m.p("s"))
        .unwrap()
        .file_type()
        .is_symlink());

    // A FIFO is created and has the right type.
    let fifo = cstr(&m.p("fifo"));
    // SAFETY: valid path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    use std::os::unix::fs::FileTypeExt;
    assert!(fs::metadata(m.p("fifo")).unwrap().file_type().is_fifo());

    // Long names and paths: 255 bytes work, 256 fail with ENAMETOOLONG.
    let n255 = "n".repeat(255);
    fs::write(m.p(&n255), b"x").unwrap();
    assert_eq!(fs::read(m.p(&n255)).unwrap(), b"x");
    let e = fs::write(m.p(&"n".repeat(256)), b"x").unwrap_err();
    assert_eq!(errno_of(&e), libc::ENAMETOOLONG);
    let mut deep = m.path().to_path_buf();
    let comp = "d".repeat(200);
    while deep.as_os_str().len() + comp.len() < 3900 {
        deep.push(&comp);
        fs::create_dir(&deep).unwrap();
    }
    fs::write(deep.join("leaf"), b"deep").unwrap();
    assert_eq!(fs::read(deep.join("leaf")).unwrap(), b"deep");

    // errno values POSIX names.
    assert_eq!(
        errno_of(&fs::create_dir(m.p("e")).unwrap_err()),
        libc::EEXIST
    );
    assert_eq!(
        errno_of(&fs::remove_dir(m.p("e")).unwrap_err()),
        libc::ENOTEMPTY
    );
    assert_eq!(errno_of(&fs::read(m.p("nope")).unwrap_err()), libc::ENOENT);
    assert_eq!(
        errno_of(&fs::remove_dir(m.p("h")).unwrap_err()),
        libc::ENOTDIR
    );
    let excl = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(m.p("h"));
    assert_eq!(errno_of(&excl.unwrap_err()), libc::EEXIST);
    assert_eq!(
        errno_of(&fs::write(m.p("h/x"), b"").unwrap_err()),
        libc::ENOTDIR
    );
    fs::remove_file(m.p("e/f")).unwrap();
    fs::remove_dir(m.p("e")).unwrap();
    assert_eq!(fs::metadata(m.p("h")).unwrap().nlink(), 1);
}

#[test]
fn permissions_are_checked_for_a_non_root_caller() {
    need_fuse!();
    need_root!("needs root to act as another user");
    let c = Cluster::up(1, 1, &[]);
    let m = FuseMount::new(&c.cluster_file());
    fs::create_dir(m.p("private")).unwrap();
    fs::set_permissions(m.p("private"), fs::Permissions::from_mode(0o700)).unwrap();
    fs::write(m.p("ro"), b"root's").unwrap();
    fs::set_permissions(m.p("ro"), fs::Permissions::from_mode(0o644)).unwrap();
    fs::create_dir(m.p("pub")).unwrap();
    fs::set_permissions(m.p("pub"), fs::Permissions::from_mode(0o777)).unwrap();
    let as_nobody = |script: &str| {
        let out = Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(m.path())
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(as_nobody("echo x > ro").contains("Permission denied"));
    assert!(as_nobody("touch private/x").contains("Permission denied"));
    assert!(as_nobody("cat ro").is_empty());
    assert!(as_nobody("echo mine > pub/mine && cat pub/mine").is_empty());
    assert_eq!(fs::metadata(m.p("pub/mine")).unwrap().uid(), 65534);
    assert!(as_nobody("chmod 777 ro").contains("Operation not permitted"));
}

#[test]
fn two_mounts_see_each_other_close_to_open() {
    need_fuse!();
    let c = Cluster::up(2, 1, &[]);
    let a = FuseMount::new(&c.cluster_file());
    let b = FuseMount::new(&c.cluster_file());
    fs::write(a.p("shared"), b"version 1").unwrap();
    assert_eq!(fs::read(b.p("shared")).unwrap(), b"version 1");
    // Rewritten in place, longer: B's next open sees the new size and bytes.
    fs::write(a.p("shared"), b"version 2, longer").unwrap();
    assert_eq!(fs::read(b.p("shared")).unwrap(), b"version 2, longer");
    // Appended by B, read by A.
    let mut f = OpenOptions::new().append(true).open(b.p("shared")).unwrap();
    f.write_all(b" +b").unwrap();
    drop(f);
    assert_eq!(fs::read(a.p("shared")).unwrap(), b"version 2, longer +b");
    // Replaced by rename in A: B's next open gets the new file, not the old inode.
    fs::write(a.p("tmp"), b"renamed in").unwrap();
    fs::rename(a.p("tmp"), a.p("shared")).unwrap();
    assert_eq!(fs::read(b.p("shared")).unwrap(), b"renamed in");
    // Removed in B: gone in A once its cached entry expires (1 s).
    fs::remove_file(b.p("shared")).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(
        errno_of(&fs::metadata(a.p("shared")).unwrap_err()),
        libc::ENOENT
    );
}

#[test]
fn large_directory_lists_every_entry_once() {
    need_fuse!();
    const N: usize = 20_000;
    let c = Cluster::up(1, 1, &[]);
    let m = FuseMount::new(&c.cluster_file());
    fs::create_dir(m.p("big")).unwrap();
    let t = Instant::now();
    for i in 0..N {
        fs::File::create(m.p(&format!("big/f{i:06}"))).unwrap();
    }
    eprintln!("created {N} files through the mount in {:?}", t.elapsed());
    let mut names: Vec<String> = fs::read_dir(m.p("big"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let want: Vec<String> = (0..N).map(|i| format!("f{i:06}")).collect();
    assert_eq!(names, want);
    // Removing entries while listing neither skips nor repeats the survivors.
    let mut seen = std::collections::HashSet::new();
    for (k, e) in fs::read_dir(m.p("big")).unwrap().enumerate() {
        let name = e.unwrap().file_name().into_string().unwrap();
        assert!(seen.insert(name.clone()), "{name} listed twice");
        if k % 2 == 0 {
            fs::remove_file(m.p(&format!("big/{name}"))).unwrap();
        }
    }
    assert_eq!(seen.len(), N);
}

#[test]
fn cluster_down_gives_eio_in_time_and_the_mount_recovers() {
    need_fuse!();
    let c = Cluster::up(1, 1, &[]);
    // A short client timeout keeps the test quick; the bound scales with it.
    let mut cfg = stripefs_rpc::ClusterConfig::load(&c.cluster_file()).unwrap();
    cfg.timeout_ms = 2000;
    let short = c.path().join("short.toml");
    cfg.save(&short).unwrap();
    let m = FuseMount::new(&short);
    fs::write(m.p("before"), b"x").unwrap();
    c.down();
    let t = Instant::now();
    let e = fs::write(m.p("during"), b"y").unwrap_err();
    let took = t.elapsed();
    assert_eq!(errno_of(&e), libc::EIO, "{e}");
    assert!(took < Duration::from_secs(15), "failing took {took:?}");
    c.restart();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match fs::write(m.p("after"), b"z") {
            Ok(()) => break,
            Err(e) => assert!(Instant::now() < deadline, "mount did not recover: {e}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(fs::read(m.p("before")).unwrap(), b"x");
    assert_eq!(fs::read(m.p("after")).unwrap(), b"z");
}

/// 4 KiB writes through the mount (dd bs=4k, cp, stdio) reach the data servers gathered
/// into large requests, not one request per write: 16 MiB in 4096 writes by `dd`,
/// fsynced and closed, costs at most 64 write requests on the data servers (their
/// `write_requests` counter). The file reads back whole, in order, from another open.
///
/// The writer is a process of its own: a file open in this test process would be
/// inherited by every process the other tests start meanwhile, and each of them closing
/// it (at exec, close-on-exec) sends the daemon a FLUSH, which sends the gathered writes
/// early (20-617 requests instead of 17 when the tests ran side by side).
#[test]
fn small_writes_reach_the_data_servers_coalesced() {
    need_fuse!();
    const BLOCK: usize = 4096;
    const BLOCKS: usize = 4096;
    let c = Cluster::up(2, 1, &[]);
    let m = FuseMount::new(&c.cluster_file());
    // Each block names itself, so that reordered or lost blocks show.
    let block = |i: usize| -> Vec<u8> {
        (0..BLOCK)
            .map(|j| (i.wrapping_mul(31) ^ j.wrapping_mul(7)) as u8)
            .collect()
    };
    let src = tempfile::tempdir().unwrap();
    let pattern = src.path().join("pattern");
    fs::write(&pattern, (0..BLOCKS).flat_map(block).collect::<Vec<u8>>()).unwrap();
    let before = c.status_sums("data", &["write_requests", "bytes_written"]);
    let out = Command::new("dd")
        .arg(format!("if={}", pattern.display()))
        .arg(format!("of={}", m.p("small").display()))
        .args([&format!("bs={BLOCK}"), "conv=fsync", "status=none"])
        .output()
        .unwrap();
    assert!(out.status.success(), "dd failed: {}", text(&out));
    let after = c.status_sums("data", &["write_requests", "bytes_written"]);
    let (requests, bytes) = (after[0] - before[0], after[1] - before[1]);
    eprintln!("{BLOCKS} writes of {BLOCK} bytes: {requests} write requests, {bytes} bytes");
    assert!(
        requests <= 64,
        "{requests} write requests on the data servers for {BLOCKS} writes of {BLOCK} bytes"
    );
    // Every byte went to a data server (at most the first block went inline first and
    // was moved out once, by the metadata server), and none went twice.
    assert!(
        (BLOCK * (BLOCKS - 1)) as u64 <= bytes && bytes <= (BLOCK * BLOCKS) as u64,
        "{bytes} bytes written on the data servers for {} written",
        BLOCK * BLOCKS
    );
    let back = fs::read(m.p("small")).unwrap();
    assert_eq!(back.len(), BLOCK * BLOCKS);
    for (i, got) in back.chunks(BLOCK).enumerate() {
        assert!(got == block(i), "block {i} differs");
    }
}

/// `stripefs mount --writeback-cache`: 4 KiB writes gather in the kernel's page cache.
/// The bytes read back whole from another mount (close-to-open holds towards other
/// clients); a partial-page write through a write-only handle into existing data works
/// (the kernel reads the page through that handle first, which the daemon allows by
/// opening it read-write); appends land at the end.
#[test]
fn writeback_cache_mount_writes_small_pieces_right() {
    use std::os::unix::fs::FileExt;
    need_fuse!();
    const BLOCK: usize = 4096;
    const BLOCKS: usize = 2048;
    let c = Cluster::up(2, 1, &[]);
    let wb = FuseMount::with_args(&c.cluster_file(), &["--writeback-cache"]);
    let other = FuseMount::new(&c.cluster_file());
    let block = |i: usize| -> Vec<u8> {
        (0..BLOCK)
            .map(|j| (i.wrapping_mul(31) ^ j.wrapping_mul(7)) as u8)
            .collect()
    };
    let mut want = Vec::with_capacity(BLOCK * BLOCKS);
    let mut f = fs::File::create(wb.p("small")).unwrap();
    for i in 0..BLOCKS {
        f.write_all(&block(i)).unwrap();
        want.extend_from_slice(&block(i));
    }
    f.sync_all().unwrap();
    drop(f);
    assert!(
        fs::read(other.p("small")).unwrap() == want,
        "another mount reads other bytes"
    );

    // Not page-aligned, inside the file, through a write-only handle: the kernel
    // fills the page by reading through this handle.
    let f = OpenOptions::new().write(true).open(wb.p("small")).unwrap();
    f.write_all_at(b"partial", 10_001).unwrap();
    drop(f);
    want[10_001..10_008].copy_from_slice(b"partial");
    let mut f = OpenOptions::new().append(true).open(wb.p("small")).unwrap();
    f.write_all(b"appended").unwrap();
    drop(f);
    want.extend_from_slice(b"appended");
    assert!(
        fs::read(wb.p("small")).unwrap() == want,
        "this mount reads other bytes"
    );
    assert!(
        fs::read(other.p("small")).unwrap() == want,
        "another mount reads other bytes"
    );
    assert_eq!(
        fs::metadata(other.p("small")).unwrap().len(),
        want.len() as u64
    );
}

/// `--writeback-cache` as a user other than the mounting one: 4 KiB writes, a
/// partial-page write through a write-only handle of a readable file, both read back
/// whole. A file the user may write but not read (mode 0200) takes whole pages, and a
/// partial-page write into its data fails with EBADF (the kernel cannot fill the page
/// through that handle), as documented, without changing the file.
#[test]
fn writeback_cache_mount_as_an_unprivileged_user() {
    need_fuse!();
    need_root!("needs root to act as another user");
    let c = Cluster::up(1, 1, &[]);
    let m = FuseMount::with_args(&c.cluster_file(), &["--writeback-cache"]);
    fs::create_dir(m.p("pub")).unwrap();
    fs::set_permissions(m.p("pub"), fs::Permissions::from_mode(0o777)).unwrap();
    let script = r#"
import os, errno
data = bytes((i * 7) % 251 for i in range(64 * 1024))
with open("pub/a", "wb") as f:
    for i in range(0, len(data), 4096):
        f.write(data[i:i + 4096])
fd = os.open("pub/a", os.O_WRONLY)
os.pwrite(fd, b"xyz", 10001)
os.close(fd)
fd = os.open("pub/w", os.O_CREAT | os.O_WRONLY, 0o200)
os.write(fd, data)
os.close(fd)
fd = os.open("pub/w", os.O_WRONLY)
try:
    os.pwrite(fd, b"q", 5)
    os.fsync(fd)
    print("partial: ok")
except OSError as e:
    print("partial:", errno.errorcode[e.errno])
"#;
    let out = Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(script)
        .current_dir(m.path())
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let data: Vec<u8> = (0..64 * 1024).map(|i| ((i * 7) % 251) as u8).collect();
    let mut want = data.clone();
    want[10_001..10_004].copy_from_slice(b"xyz");
    assert!(
        fs::read(m.p("pub/a")).unwrap() == want,
        "pub/a reads other bytes"
    );
    assert_eq!(fs::metadata(m.p("pub/a")).unwrap().uid(), 65534);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "partial: EBADF",
        "{}",
        text(&out)
    );
    assert!(fs::read(m.p("pub/w")).unwrap() == data, "pub/w changed");
}

/// Small writes (4 KiB, as dd, cp and stdio make them) are absorbed by write-behind and
/// answered at once; an error sending them still reaches the program: at fsync, and at
/// close (the kernel's FLUSH), as EIO. Here the servers stop between the writes and the
/// fsync or close.
#[test]
fn small_writes_report_a_lost_cluster_at_fsync_and_at_close() {
    use std::os::fd::IntoRawFd;
    need_fuse!();
    let c = Cluster::up(2, 1, &[]);
    let mut cfg = stripefs_rpc::ClusterConfig::load(&c.cluster_file()).unwrap();
    cfg.timeout_ms = 2000;
    let short = c.path().join("short.toml");
    cfg.save(&short).unwrap();
    let m = FuseMount::new(&short);
    let block = vec![7u8; 4096];
    let mut synced = fs::File::create(m.p("synced")).unwrap();
    let mut closed = fs::File::create(m.p("closed")).unwrap();
    for _ in 0..64 {
        synced.write_all(&block).unwrap();
        closed.write_all(&block).unwrap();
    }
    // Stopping the cluster runs a program: its exec closes the inherited descriptors,
    // which flushes both files (a FLUSH per close, in any process). The block written
    // after that is the one to report.
    c.down();
    synced.write_all(&block).unwrap();
    closed.write_all(&block).unwrap();
    let t = Instant::now();
    let e = synced.sync_all().unwrap_err();
    assert_eq!(errno_of(&e), libc::EIO, "fsync: {e}");
    let fd = closed.into_raw_fd();
    // SAFETY: `fd` is an open descriptor this test owns; it is closed once, here.
    let rc = unsafe { libc::close(fd) };
    let e = std::io::Error::last_os_error();
    assert_eq!(rc, -1, "close after the cluster stopped succeeded");
    assert_eq!(errno_of(&e), libc::EIO, "close: {e}");
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t.elapsed()
    );
    drop(synced);
    drop(m);
}

#[test]
fn mount_daemon_returns_when_up_and_fails_clearly() {
    need_fuse!();
    let c = Cluster::up(1, 1, &[]);
    let mp = tempfile::tempdir().unwrap();
    let mount = |cluster: &Path| {
        Command::new(exe())
            .args(["mount", "--cluster"])
            .arg(cluster)
            .arg(mp.path())
            .output()
            .unwrap()
    };
    // Bad cluster file, wrong secret, unreachable metadata server: fail, nothing mounted.
    let bad = c.path().join("bad.toml");
    fs::write(&bad, "not toml [").unwrap();
    let out = mount(&bad);
    assert!(
        !out.status.success() && text(&out).contains("bad.toml"),
        "{}",
        text(&out)
    );
    let mut cfg = stripefs_rpc::ClusterConfig::load(&c.cluster_file()).unwrap();
    let good_meta = cfg.meta_addr.clone();
    let secret = c.path().join("secret.toml");
    let mut text_cfg = cfg.to_toml();
    let hex = text_cfg.split('"').nth(1).unwrap().to_string();
    text_cfg = text_cfg.replace(&hex, &"ab".repeat(32));
    fs::write(&secret, text_cfg).unwrap();
    let t = Instant::now();
    let out = mount(&secret);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).to_lowercase().contains("auth"), "{}", text(&out));
    cfg.meta_addr = "127.0.0.1:1".into();
    let unreachable = c.path().join("unreachable.toml");
    cfg.save(&unreachable).unwrap();
    let out = mount(&unreachable);
    assert!(
        !out.status.success() && text(&out).contains("127.0.0.1:1"),
        "{}",
        text(&out)
    );
    assert!(t.elapsed() < Duration::from_secs(30));
    assert!(!is_mounted(mp.path()));
    assert_ne!(good_meta, cfg.meta_addr);

    // A good mount returns once usable; umount ends the daemon.
    let out = mount(&c.cluster_file());
    assert!(out.status.success(), "{}", text(&out));
    let guard = Unmount(mp.path().to_path_buf());
    fs::write(mp.path().join("hello"), b"hi").unwrap();
    assert_eq!(c.ok(&["get", "/hello", "-"]), "hi");
    let out = Command::new(exe())
        .arg("umount")
        .arg(mp.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(!is_mounted(mp.path()));
    drop(guard);
    // After unmounting, the directory is an ordinary empty directory again.
    let e = fs::read(mp.path().join("hello")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
}

/// A user other than root with no fusermount3 on the PATH is told what to install, and
/// nothing is left mounted or running.
#[test]
fn non_root_mount_without_fusermount3_says_what_to_install() {
    need_fuse!();
    need_root!("needs root to run the mount as another user");
    let c = Cluster::up(1, 1, &[]);
    let mp = tempfile::tempdir().unwrap();
    let cluster = c.path().join("nobody.toml");
    fs::copy(c.cluster_file(), &cluster).unwrap();
    for p in [c.path(), cluster.as_path(), mp.path()] {
        let ok = Command::new("chmod").arg("a+rx").arg(p).status().unwrap();
        assert!(ok.success());
    }
    let empty_path = tempfile::tempdir().unwrap();
    let out = Command::new(exe())
        .args(["mount", "--cluster"])
        .arg(&cluster)
        .arg(mp.path())
        .env("PATH", empty_path.path())
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    let msg = text(&out);
    assert!(
        msg.contains("fusermount3") && msg.contains("fuse3"),
        "{msg}"
    );
    assert!(!is_mounted(mp.path()));
}

/// Lazily unmounts on drop, for mounts made by the daemon.
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        if is_mounted(&self.0) {
            let _ = Command::new(exe())
                .args(["umount", "-z"])
                .arg(&self.0)
                .output();
        }
    }
}

#[test]
fn created_file_keeps_its_mode() {
    need_fuse!();
    let c = Cluster::up(1, 1, &[]);
    let m = FuseMount::new(&c.cluster_file());
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(m.p("m"))
        .unwrap();
    drop(f);
    assert_eq!(fs::metadata(m.p("m")).unwrap().mode() & 0o777, 0o600);
    assert_eq!(
        fs::metadata(m.p("m")).unwrap().mode() & libc::S_IFMT,
        libc::S_IFREG
    );
}

/// A write-only handle may bypass the page cache (direct writes, see the FUSE adapter's
/// `open_flags`): a reader of the same mount that already holds pages of the file, read
/// or mapped shared, sees the new bytes at once, and a shared mapping's stores reach the
/// file.
#[test]
fn write_only_writes_are_seen_by_open_readers_and_mappings() {
    need_fuse!();
    let c = Cluster::up(1, 1, &[]);
    let m = FuseMount::new(&c.cluster_file());
    const LEN: usize = 64 << 10;
    fs::write(m.p("f"), vec![b'A'; LEN]).unwrap();
    let r = fs::File::open(m.p("f")).unwrap();
    let mut buf = vec![0u8; LEN];
    std::os::unix::fs::FileExt::read_exact_at(&r, &mut buf, 0).unwrap();
    assert!(buf.iter().all(|&b| b == b'A'));
    // SAFETY: a fresh shared read-only mapping of LEN bytes of an open file, unmapped
    // below; the file is not truncated while it is mapped.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            LEN,
            libc::PROT_READ,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(&r),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
    // SAFETY: the mapping is LEN bytes long and stays mapped while the slice lives.
    let mapped = |at: usize| unsafe { *(map as *const u8).add(at) };
    assert_eq!(mapped(100), b'A');

    let mut w = OpenOptions::new().write(true).open(m.p("f")).unwrap();
    w.write_all(&vec![b'B'; LEN]).unwrap();
    std::os::unix::fs::FileExt::read_exact_at(&r, &mut buf, 0).unwrap();
    assert!(buf.iter().all(|&b| b == b'B'), "the reader sees the write");
    assert_eq!(mapped(100), b'B', "the mapping sees the write");
    drop(w);
    // SAFETY: unmaps exactly the mapping made above.
    assert_eq!(unsafe { libc::munmap(map, LEN) }, 0);

    // Stores through a shared writable mapping reach the file.
    let rw = OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.p("f"))
        .unwrap();
    // SAFETY: as above, with write access through a read-write handle.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            LEN,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(&rw),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
    // SAFETY: the mapping is LEN bytes long and writable; msync and munmap take it whole.
    unsafe {
        std::ptr::write_bytes(map as *mut u8, b'C', 10);
        assert_eq!(libc::msync(map, LEN, libc::MS_SYNC), 0);
        assert_eq!(libc::munmap(map, LEN), 0);
    }
    drop(rw);
    let got = fs::read(m.p("f")).unwrap();
    assert_eq!(&got[..11], b"CCCCCCCCCCB");
}

/// `tar` of a tree with device nodes, FIFOs, a socket's name, symlinks and hard links,
/// extracted again inside the mount as root: every type, mode, owner and device number
/// comes back (tar skips sockets, as it does everywhere).
#[test]
fn tar_recreates_devices_fifos_and_links() {
    need_fuse!();
    need_root!("device nodes need root");
    let c = Cluster::up(2, 1, &[]);
    let m = FuseMount::new(&c.cluster_file());
    let src = m.p("src");
    fs::create_dir(&src).unwrap();
    let sh = |script: &str| {
        let out = Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(&src)
            .output()
            .unwrap();
        assert!(out.status.success(), "{script}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    sh(
        "mknod blk b 8 17 && mknod chr c 1 259 && mkfifo -m 0640 fifo && \
        echo data > file && ln file hard && ln -s file sym && chown 7:8 chr && \
        chmod 0600 blk && mkdir -p d/e && echo deep > d/e/f",
    );
    let bound = std::os::unix::net::UnixListener::bind(src.join("sock")).unwrap();
    drop(bound);
    let archive = m.path().with_extension("tar");
    sh(&format!("tar -cf {} .", archive.display()));
    let dst = m.p("dst");
    fs::create_dir(&dst).unwrap();
    let out = Command::new("tar")
        .arg("-xpf")
        .arg(&archive)
        .arg("-C")
        .arg(&dst)
        .output()
        .unwrap();
    fs::remove_file(&archive).unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let md = |p: &str| fs::symlink_metadata(dst.join(p)).unwrap();
    use std::os::unix::fs::FileTypeExt;
    assert!(md("blk").file_type().is_block_device());
    assert_eq!(
        (md("blk").rdev(), md("blk").mode() & 0o7777),
        (libc::makedev(8, 17), 0o600)
    );
    assert!(md("chr").file_type().is_char_device());
    assert_eq!(md("chr").rdev(), libc::makedev(1, 259));
    assert_eq!((md("chr").uid(), md("chr").gid()), (7, 8));
    assert!(md("fifo").file_type().is_fifo());
    assert_eq!(md("fifo").mode() & 0o7777, 0o640);
    assert_eq!(md("hard").ino(), md("file").ino());
    assert_eq!(md("file").nlink(), 2);
    assert_eq!(fs::read_link(dst.join("sym")).unwrap(), Path::new("file"));
    assert_eq!(fs::read(dst.join("d/e/f")).unwrap(), b"deep\n");
    // The source's socket is a socket in the mount.
    assert!(fs::symlink_metadata(src.join("sock"))
        .unwrap()
        .file_type()
        .is_socket());
}

/// Makes one entry of each type at `dir/name`: a file, an empty directory, a symlink, a
/// FIFO, a socket's name and a character device.
fn make_typed(dir: &Path, name: &str, kind: &str) {
    let p = cstr(&dir.join(name));
    // SAFETY: `p` is a valid NUL-terminated path for each call.
    let rc = unsafe {
        match kind {
            "file" => libc::mknod(p.as_ptr(), libc::S_IFREG | 0o644, 0),
            "dir" => libc::mkdir(p.as_ptr(), 0o755),
            "symlink" => libc::symlink(c"target".as_ptr(), p.as_ptr()),
            "fifo" => libc::mknod(p.as_ptr(), libc::S_IFIFO | 0o644, 0),
            "socket" => libc::mknod(p.as_ptr(), libc::S_IFSOCK | 0o644, 0),
            "chardev" => libc::mknod(p.as_ptr(), libc::S_IFCHR | 0o644, libc::makedev(1, 3)),
            _ => unreachable!(),
        }
    };
    assert_eq!(rc, 0, "making a {kind} at {}", dir.join(name).display());
}

/// rename(2) of each file type over each other type, and what is left afterwards, as
/// on tmpfs: a directory replaces only an empty directory (else ENOTDIR), anything else
/// replaces anything but a directory (EISDIR).
#[test]
fn rename_of_each_type_over_each_type_matches_tmpfs() {
    need_fuse!();
    need_root!("device nodes need root");
    const KINDS: [&str; 6] = ["file", "dir", "symlink", "fifo", "socket", "chardev"];
    let run = |root: &Path| -> Vec<String> {
        let mut out = Vec::new();
        for a in KINDS {
            for b in KINDS {
                let d = root.join(format!("{a}-over-{b}"));
                fs::create_dir(&d).unwrap();
                make_typed(&d, "a", a);
                make_typed(&d, "b", b);
                let r = fs::rename(d.join("a"), d.join("b"));
                let left: Vec<_> = ["a", "b"]
                    .iter()
                    .map(|n| match fs::symlink_metadata(d.join(n)) {
                        Ok(m) => format!("{n}:{:o}", m.mode() & libc::S_IFMT),
                        Err(_) => format!("{n}:-"),
                    })
                    .collect();
                let errno = r.err().map(|e| errno_of(&e)).unwrap_or(0);
                out.push(format!("{a} over {b}: errno {errno}, left {left:?}"));
            }
        }
        out
    };
    let reference = tempfile::tempdir_in("/dev/shm").unwrap();
    let want = run(reference.path());
    let c = Cluster::up(1, 1, &[]);
    let m = FuseMount::new(&c.cluster_file());
    let got = run(m.path());
    let diff: Vec<_> = want
        .iter()
        .zip(&got)
        .filter(|(w, g)| w != g)
        .map(|(w, g)| format!("tmpfs: {w}\nmount: {g}"))
        .collect();
    assert!(diff.is_empty(), "{}", diff.join("\n"));
}

/// getxattr(2) into a buffer of `size` bytes: the value, or the errno.
fn getx(p: &Path, name: &str, size: usize) -> Result<Vec<u8>, i32> {
    let (p, n) = (cstr(p), CString::new(name).unwrap());
    let mut buf = vec![0u8; size];
    // SAFETY: valid C strings and a buffer of `size` bytes.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), size) };
    if r < 0 {
        return Err(errno_of(&std::io::Error::last_os_error()));
    }
    buf.truncate(r as usize);
    Ok(buf)
}

fn setx(p: &Path, name: &str, value: &[u8], flags: i32) -> Result<(), i32> {
    let (p, n) = (cstr(p), CString::new(name).unwrap());
    // SAFETY: valid C strings and a value of `value.len()` bytes.
    let r = unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    };
    if r < 0 {
        return Err(errno_of(&std::io::Error::last_os_error()));
    }
    Ok(())
}

fn listx(p: &Path) -> Vec<String> {
    let p = cstr(p);
    let mut buf = vec![0u8; 4096];
    // SAFETY: a valid C string and a buffer of 4096 bytes.
    let r = unsafe { libc::listxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(r >= 0, "listxattr: {}", std::io::Error::last_os_error());
    buf[..r as usize]
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8(n.to_vec()).unwrap())
        .collect()
}

#[test]
fn extended_attributes_work_through_the_mount() {
    need_fuse!();
    let c = Cluster::up(2, 1, &[]);
    let m = FuseMount::new(&c.cluster_file());
    let f = m.p("f");
    fs::write(&f, b"data").unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o644)).unwrap();
    setx(&f, "user.checksum", b"sha256:abc", 0).unwrap();
    setx(&f, "trusted.t", b"t", 0).unwrap();
    // The size alone, a buffer too small, then the value.
    // SAFETY: valid C strings, no buffer: asks for the size.
    let size = unsafe {
        libc::getxattr(
            cstr(&f).as_ptr(),
            CString::new("user.checksum").unwrap().as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    };
    assert_eq!(size, 10);
    assert_eq!(getx(&f, "user.checksum", 4), Err(libc::ERANGE));
    assert_eq!(getx(&f, "user.checksum", 64).unwrap(), b"sha256:abc");
    assert_eq!(listx(&f), ["trusted.t", "user.checksum"]);
    assert_eq!(
        setx(&f, "user.checksum", b"x", libc::XATTR_CREATE),
        Err(libc::EEXIST)
    );
    assert_eq!(
        setx(&f, "user.none", b"x", libc::XATTR_REPLACE),
        Err(libc::ENODATA)
    );
    assert_eq!(getx(&f, "user.none", 64), Err(libc::ENODATA));
    assert_eq!(
        setx(&f, "system.posix_acl_access", b"\x02\0\0\0", 0),
        Err(libc::EOPNOTSUPP)
    );
    // A directory's ctime moves with its attributes, also in the daemon's cache.
    fs::create_dir(m.p("d")).unwrap();
    let before = fs::metadata(m.p("d")).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    setx(&m.p("d"), "user.tag", b"x", 0).unwrap();
    let after = fs::metadata(m.p("d")).unwrap();
    assert!(
        (after.ctime(), after.ctime_nsec()) > (before.ctime(), before.ctime_nsec()),
        "ctime did not move"
    );
    // Another mount (another client) sees them; `cp -a` copies them.
    let other = FuseMount::new(&c.cluster_file());
    assert_eq!(
        getx(&other.p("f"), "user.checksum", 64).unwrap(),
        b"sha256:abc"
    );
    let cp = Command::new("cp")
        .arg("-a")
        .arg(&f)
        .arg(m.p("g"))
        .status()
        .unwrap();
    assert!(cp.success());
    assert_eq!(listx(&m.p("g")), ["trusted.t", "user.checksum"]);
    let p = cstr(&f);
    let n = CString::new("user.checksum").unwrap();
    // SAFETY: valid C strings.
    assert_eq!(unsafe { libc::removexattr(p.as_ptr(), n.as_ptr()) }, 0);
    assert_eq!(getx(&f, "user.checksum", 64), Err(libc::ENODATA));
    assert_eq!(listx(&f), ["trusted.t"]);

    // As another user: user attributes by the file's modes, trusted ones not at all.
    // SAFETY: geteuid cannot fail.
    let python = Path::new("/usr/bin/python3");
    if unsafe { libc::geteuid() } != 0 || !python.exists() {
        skip("the unprivileged part needs root and /usr/bin/python3");
        return;
    }
    setx(&f, "user.r", b"readable", 0).unwrap();
    let script = "import os, errno\n\
        def e(f):\n\
        \x20   try: return repr(f())\n\
        \x20   except OSError as x: return errno.errorcode[x.errno]\n\
        print(e(lambda: os.getxattr('f', 'user.r')))\n\
        print(e(lambda: os.setxattr('f', 'user.r', b'x')))\n\
        print(e(lambda: os.getxattr('f', 'trusted.t')))\n\
        print(e(lambda: sorted(os.listxattr('f'))))\n";
    let out = Command::new(python)
        .arg("-c")
        .arg(script)
        .current_dir(m.path())
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "b'readable'\nEACCES\nENODATA\n['user.r']\n",
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writers sharing one file through the mount, each with its own write-only handle
/// (direct and, inside the file's size, parallel writes), write interleaved unaligned
/// records, some over bytes another writer wrote before (the partial blocks they share
/// become pieces on the data servers): every byte reads back as its last writer wrote
/// it, also through a second mount; then again with threads sharing one descriptor.
#[test]
fn interleaved_writers_of_one_file_through_the_mount() {
    need_fuse!();
    let c = Cluster::up(2, 1, &[]);
    let m = FuseMount::new(&c.cluster_file());
    const REC: usize = 47_008;
    const RECS: usize = 64;
    const WRITERS: usize = 4;
    let path = m.p("shared");
    fs::write(&path, vec![7u8; REC * RECS / 2]).unwrap();
    let byte = |k: usize, i: usize| (k * 131 + i * 7 + i / 4096) as u8;
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let path = path.clone();
            s.spawn(move || {
                let f = OpenOptions::new().write(true).open(&path).unwrap();
                use std::os::unix::fs::FileExt;
                for k in (w..RECS).step_by(WRITERS) {
                    let rec: Vec<u8> = (0..REC).map(|i| byte(k, i)).collect();
                    f.write_all_at(&rec, (k * REC) as u64).unwrap();
                }
                f.sync_all().unwrap();
            });
        }
    });
    let expect: Vec<u8> = (0..RECS)
        .flat_map(|k| (0..REC).map(move |i| byte(k, i)))
        .collect();
    let got = fs::read(&path).unwrap();
    assert_eq!(got.len(), expect.len());
    assert!(got == expect, "a record reads back wrong through the mount");
    let other = FuseMount::new(&c.cluster_file());
    assert!(
        fs::read(other.p("shared")).unwrap() == expect,
        "through a second mount"
    );

    // Threads of one process sharing one write-only descriptor: their writes may reach
    // the daemon on one handle at once.
    let one = OpenOptions::new().write(true).open(&path).unwrap();
    let byte2 = |k: usize, i: usize| (k * 37 + i * 11 + 5) as u8;
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let one = &one;
            s.spawn(move || {
                use std::os::unix::fs::FileExt;
                for k in (w..RECS).step_by(WRITERS) {
                    let rec: Vec<u8> = (0..REC).map(|i| byte2(k, i)).collect();
                    one.write_all_at(&rec, (k * REC) as u64).unwrap();
                }
            });
        }
    });
    one.sync_all().unwrap();
    drop(one);
    let expect: Vec<u8> = (0..RECS)
        .flat_map(|k| (0..REC).map(move |i| byte2(k, i)))
        .collect();
    assert!(
        fs::read(other.p("shared")).unwrap() == expect,
        "writes of threads sharing one descriptor read back wrong"
    );
}

/// Set-ID bits set while a writer already holds the file open (by root, through the
/// same mount) still go before that writer's next write, as on a local file system: the
/// mount clears them itself (the kernel leaves it to the daemon), from the file's
/// attributes as this mount last saw them, not as they were at the writer's open.
#[test]
fn setid_bits_set_after_a_writer_opened_go_at_its_next_write() {
    need_fuse!();
    need_root!("needs root to act as another user");
    let c = Cluster::up(1, 1, &[]);
    let m = FuseMount::new(&c.cluster_file());
    let f = m.p("f");
    // Past the inline threshold: the write goes to a data server only.
    fs::write(&f, vec![7u8; 100_000]).unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o666)).unwrap();
    let script = r#"
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
print("open", flush=True)
sys.stdin.readline()
os.pwrite(fd, b"x", 100)
print(oct(os.fstat(fd).st_mode & 0o7777), flush=True)
os.close(fd)
"#;
    let mut child = Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(script)
        .arg(&f)
        .uid(65534)
        .gid(65534)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line.trim(), "open");
    fs::set_permissions(&f, fs::Permissions::from_mode(0o6777)).unwrap();
    assert_eq!(fs::metadata(&f).unwrap().mode() & 0o7777, 0o6777);
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(
        line.trim(),
        "0o777",
        "mode seen by the writer after its write"
    );
    // What the metadata server holds.
    let json = c.ok(&["stat", "/f", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["mode"], "777", "{json}");
}

/// A listing's attributes (READDIRPLUS) of a file this mount is writing show the writes
/// not yet flushed to the metadata server, as a lookup's do: a stat after `ls` does not
/// see the file shrink back to what the server last recorded.
#[test]
fn a_listing_shows_the_size_of_unflushed_writes() {
    need_fuse!();
    let c = Cluster::up(2, 1, &[]);
    let m = FuseMount::new(&c.cluster_file());
    fs::create_dir(m.p("d")).unwrap();
    let p = m.p("d/f");
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    f.write_all(&vec![5u8; 300_000]).unwrap();
    // The kernel's entry and attributes from the create expire; the listing refreshes
    // them while the write is still behind.
    std::thread::sleep(Duration::from_millis(1100));
    let names: Vec<_> = fs::read_dir(m.p("d"))
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    assert_eq!(names.len(), 1);
    assert_eq!(fs::metadata(&p).unwrap().len(), 300_000);
    assert_eq!(names[0].metadata().unwrap().len(), 300_000);
    drop(f);
    assert_eq!(fs::metadata(&p).unwrap().len(), 300_000);
}
