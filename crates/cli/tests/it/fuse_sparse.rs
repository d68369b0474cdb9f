//! Sparse files through a real FUSE mount over a real cluster (issue 11, point 6):
//! `st_blocks` (and so `du`) counts what the data servers store, SEEK_DATA/SEEK_HOLE
//! report the stored extents, fallocate punches holes that free space on the data
//! servers, and `cp --sparse=always` / `tar -S` copy a 3 GB file with 3 MB of data
//! without reading its holes. Each test skips, saying why, where FUSE is unavailable.

use crate::common;
use common::*;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const MIB: u64 = 1 << 20;
/// How long the kernel caches attributes (crates/fuse ATTR_TTL), and a margin.
const ATTR_TTL_PAST: Duration = Duration::from_millis(1200);
/// Checksum sidecars and file-system metadata: a few blocks per object touched.
const OVERHEAD_MAX_BYTES: u64 = 128 << 10;

macro_rules! need_fuse {
    () => {
        if let Some(why) = fuse_unavailable() {
            skip(&why);
            return;
        }
    };
}

/// `lseek(fd, offset, whence)`: the offset found, or the errno.
fn lseek(f: &File, offset: u64, whence: i32) -> Result<u64, i32> {
    // SAFETY: lseek on a descriptor we own; it touches no memory.
    let r = unsafe { libc::lseek(f.as_raw_fd(), offset as libc::off_t, whence) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(r as u64)
    }
}

fn fallocate(f: &File, mode: i32, offset: u64, len: u64) -> Result<(), i32> {
    // SAFETY: fallocate on a descriptor we own; it touches no memory.
    let r = unsafe { libc::fallocate(f.as_raw_fd(), mode, offset as i64, len as i64) };
    if r != 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    Ok(())
}

/// The stored extents `(start, len)` of `f`, walked with SEEK_DATA and SEEK_HOLE.
fn extents(f: &File) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let data = match lseek(f, at, libc::SEEK_DATA) {
            Ok(d) => d,
            Err(e) => {
                assert_eq!(e, libc::ENXIO, "SEEK_DATA from {at}");
                return out;
            }
        };
        let hole = lseek(f, data, libc::SEEK_HOLE).unwrap();
        assert!(hole > data, "SEEK_HOLE from data at {data} gave {hole}");
        out.push((data, hole - data));
        at = hole;
    }
}

/// Bytes allocated to the object files (data and checksums) of all data servers, by
/// summing st_blocks under the cluster directory.
fn object_bytes(dir: &Path) -> u64 {
    let mut sum = 0;
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        if meta.is_dir() {
            sum += object_bytes(&entry.path());
        } else if meta.is_file() && entry.path().to_string_lossy().contains("/objects/") {
            sum += meta.blocks() * 512;
        }
    }
    sum
}

/// `du -B1` of a path: bytes, as du computes them from st_blocks.
fn du_bytes(path: &Path) -> u64 {
    let out = Command::new("du").arg("-B1").arg(path).output().unwrap();
    assert!(out.status.success(), "du failed: {}", text(&out));
    let s = String::from_utf8_lossy(&out.stdout);
    s.split_whitespace().next().unwrap().parse().unwrap()
}

/// The data servers' request counters and bytes used, from `cluster status --json`.
fn data_status(c: &Cluster) -> (u64, u64) {
    let v = c.status_sums("data", &["requests", "bytes_used"]);
    (v[0], v[1])
}

#[test]
fn sparse_3gb_file_du_seek_punch_and_copy() {
    need_fuse!();
    let c = Cluster::up(2, 2, &[]);
    let m = FuseMount::new(&c.cluster_file());
    let path = m.p("sparse");
    let size = 3u64 << 30;
    // Three 1 MB extents: on server 0, on server 1, and across a stripe edge (both).
    let offsets = [100 * MIB, 1501 * MIB, 2900 * MIB + 512 * 1024];
    let mut model: Vec<(u64, Vec<u8>)> = Vec::new();
    {
        let mut f = File::create(&path).unwrap();
        f.set_len(size).unwrap();
        for (i, &off) in offsets.iter().enumerate() {
            let mut data = random_bytes(MIB as usize);
            data[0] = i as u8;
            f.seek(SeekFrom::Start(off)).unwrap();
            f.write_all(&data).unwrap();
            model.push((off, data));
        }
        f.sync_all().unwrap();
    }
    let objects = object_bytes(c.path());
    assert!(
        (3 * MIB..3 * MIB + OVERHEAD_MAX_BYTES).contains(&objects),
        "data servers hold {objects} bytes for 3 MiB written"
    );

    // st_blocks and du: what the data servers store, not the 3 GB size.
    std::thread::sleep(ATTR_TTL_PAST);
    let meta = fs::metadata(&path).unwrap();
    assert_eq!(meta.len(), size);
    assert_eq!(
        meta.blocks() * 512,
        objects,
        "st_blocks is the objects' space"
    );
    let du = du_bytes(&path);
    assert_eq!(du, objects);
    eprintln!("du: {du} bytes for a {size}-byte file with 3 MiB written");

    // SEEK_DATA / SEEK_HOLE find the three extents, ENXIO past the last data and at
    // the end, and the implicit hole at the end of the file.
    let f = File::open(&path).unwrap();
    let want: Vec<(u64, u64)> = offsets.iter().map(|&o| (o, MIB)).collect();
    assert_eq!(extents(&f), want);
    assert_eq!(
        lseek(&f, offsets[2] + MIB, libc::SEEK_DATA),
        Err(libc::ENXIO)
    );
    assert_eq!(lseek(&f, size, libc::SEEK_DATA), Err(libc::ENXIO));
    assert_eq!(lseek(&f, size, libc::SEEK_HOLE), Err(libc::ENXIO));
    assert_eq!(lseek(&f, size - 1, libc::SEEK_HOLE), Ok(size - 1));
    assert_eq!(
        lseek(&f, offsets[1] + 5, libc::SEEK_DATA),
        Ok(offsets[1] + 5)
    );
    assert_eq!(
        lseek(&f, offsets[1] + 5, libc::SEEK_HOLE),
        Ok(offsets[1] + MIB)
    );
    drop(f);

    // Punch 512 KiB out of the middle extent, not block-aligned at either edge.
    let (p_off, p_len) = (offsets[1] + 3 * 4096 + 100, 512 * 1024);
    let (_, used_before) = data_status(&c);
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    fallocate(
        &f,
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        p_off,
        p_len,
    )
    .unwrap();
    let rel = (p_off - offsets[1]) as usize;
    model[1].1[rel..rel + p_len as usize].fill(0);
    for (off, data) in &model {
        let mut got = vec![0u8; data.len()];
        let mut g = &f;
        g.seek(SeekFrom::Start(*off)).unwrap();
        g.read_exact(&mut got).unwrap();
        assert!(
            got == *data,
            "extent at {off} reads back wrong after the punch"
        );
    }
    assert_eq!(f.metadata().unwrap().len(), size, "a punch keeps the size");
    // The punch rewrote its two edge blocks in place, logging their images first
    // (docs/objects.md, Writes); an fsync empties the objects' logs again.
    f.sync_all().unwrap();
    drop(f);
    let freed = objects - object_bytes(c.path());
    let (_, used_after) = data_status(&c);
    eprintln!(
        "punch of {p_len} bytes freed {freed} bytes of objects; cluster status bytes_used \
         {used_before} -> {used_after}"
    );
    assert!(
        freed >= p_len - 2 * 4096 && freed <= p_len,
        "punch of {p_len} bytes freed {freed}"
    );
    assert!(used_before - used_after >= p_len - 2 * 4096);
    // The hole is a hole to SEEK_HOLE too: whole blocks inside the punched range.
    let f = File::open(&path).unwrap();
    let hole_start = p_off.div_ceil(4096) * 4096;
    let hole_end = (p_off + p_len) / 4096 * 4096;
    assert_eq!(lseek(&f, offsets[1], libc::SEEK_HOLE), Ok(hole_start));
    assert_eq!(lseek(&f, hole_start, libc::SEEK_DATA), Ok(hole_end));
    drop(f);
    std::thread::sleep(ATTR_TTL_PAST);
    assert_eq!(du_bytes(&path), object_bytes(c.path()));

    // cp --sparse=always out of the mount makes a sparse copy with the same bytes.
    let out = tempfile::tempdir().unwrap();
    let copy = out.path().join("copy");
    let t = std::time::Instant::now();
    let st = Command::new("cp")
        .arg("--sparse=always")
        .arg(&path)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(st.success());
    eprintln!("cp --sparse=always of the 3 GB file: {:?}", t.elapsed());
    let cm = fs::metadata(&copy).unwrap();
    assert_eq!(cm.len(), size);
    assert!(
        cm.blocks() * 512 <= 3 * MIB,
        "the copy occupies {} bytes",
        cm.blocks() * 512
    );
    let cmp = Command::new("cmp").arg(&path).arg(&copy).output().unwrap();
    assert!(cmp.status.success(), "copy differs: {}", text(&cmp));

    // tar -S stores the holes as holes: the archive holds the data, not 3 GB.
    let tar = out.path().join("a.tar");
    let st = Command::new("tar")
        .arg("-S")
        .arg("-cf")
        .arg(&tar)
        .arg("-C")
        .arg(m.path())
        .arg("sparse")
        .status();
    if let Ok(st) = st {
        assert!(st.success());
        let n = fs::metadata(&tar).unwrap().len();
        assert!(n < 4 * MIB, "tar -S archive is {n} bytes");
    }
}

/// fallocate modes: mode 0 reserves space and extends the size, KEEP_SIZE does not
/// extend, ZERO_RANGE zeroes (with and without KEEP_SIZE), other modes are EOPNOTSUPP.
#[test]
fn fallocate_modes() {
    need_fuse!();
    let c = Cluster::up(2, 1, &[]);
    let m = FuseMount::new(&c.cluster_file());
    let path = m.p("f");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    let before = object_bytes(c.path());
    fallocate(&f, 0, 0, 8 * MIB).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 8 * MIB);
    let reserved = object_bytes(c.path()) - before;
    assert!(reserved >= 8 * MIB, "mode 0 reserved {reserved} bytes");
    // Reserved space reads as zeros and is not data.
    assert_eq!(lseek(&f, 0, libc::SEEK_DATA), Err(libc::ENXIO));
    assert_eq!(lseek(&f, 0, libc::SEEK_HOLE), Ok(0));
    fallocate(&f, libc::FALLOC_FL_KEEP_SIZE, 8 * MIB, 4 * MIB).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 8 * MIB);
    assert!(object_bytes(c.path()) - before >= 12 * MIB);

    let mut g = &f;
    g.seek(SeekFrom::Start(5000)).unwrap();
    g.write_all(b"hello world").unwrap();
    fallocate(&f, libc::FALLOC_FL_ZERO_RANGE, 5003, 3).unwrap();
    let mut buf = [0u8; 11];
    g.seek(SeekFrom::Start(5000)).unwrap();
    g.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"hel\0\0\0world");
    fallocate(&f, libc::FALLOC_FL_ZERO_RANGE, 10 * MIB, 2 * MIB).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 12 * MIB);
    fallocate(
        &f,
        libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
        20 * MIB,
        MIB,
    )
    .unwrap();
    assert_eq!(f.metadata().unwrap().len(), 12 * MIB);
    for mode in [
        libc::FALLOC_FL_COLLAPSE_RANGE,
        libc::FALLOC_FL_INSERT_RANGE,
        libc::FALLOC_FL_PUNCH_HOLE, // without KEEP_SIZE: refused, as by Linux
    ] {
        assert_eq!(
            fallocate(&f, mode, 0, 4096),
            Err(libc::EOPNOTSUPP),
            "{mode}"
        );
    }
    // A handle open for reading only may not fallocate.
    let r = File::open(&path).unwrap();
    assert_eq!(fallocate(&r, 0, 0, 4096), Err(libc::EBADF));
}

/// stat of empty files asks no data server; stat of a file with data asks each of its
/// servers once.
#[test]
fn stat_costs_no_data_round_trip_for_empty_files() {
    need_fuse!();
    let c = Cluster::up(2, 1, &[]);
    let m = FuseMount::new(&c.cluster_file());
    const FILES: u64 = 20;
    for i in 0..FILES {
        File::create(m.p(&format!("e{i}"))).unwrap();
    }
    fs::write(m.p("d"), vec![1u8; 3 << 20]).unwrap();
    std::thread::sleep(ATTR_TTL_PAST);
    let (r0, _) = data_status(&c);
    for i in 0..FILES {
        assert_eq!(fs::metadata(m.p(&format!("e{i}"))).unwrap().blocks(), 0);
    }
    let (r1, _) = data_status(&c);
    // The status call itself is one request per data server.
    assert_eq!(r1 - r0, 2, "stat of empty files asked the data servers");
    let blocks = fs::metadata(m.p("d")).unwrap().blocks();
    assert!(blocks * 512 >= 3 << 20, "{blocks}");
    let (r2, _) = data_status(&c);
    assert!(
        r2 - r1 > 2 && r2 - r1 <= 2 + 2,
        "one stat of a file on 2 servers made {} data requests",
        r2 - r1 - 2
    );
}

/// With the cluster gone, a punch, a SEEK_DATA and an allocation through the mount fail
/// with EIO within the client timeout (never hang), and the file is unharmed and the
/// calls work again once the cluster is back.
#[test]
fn sparse_calls_fail_in_time_while_the_cluster_is_down_and_work_after() {
    need_fuse!();
    let c = Cluster::up(2, 1, &[]);
    let mut cfg = stripefs_rpc::ClusterConfig::load(&c.cluster_file()).unwrap();
    cfg.timeout_ms = 2000;
    let short = c.path().join("short.toml");
    cfg.save(&short).unwrap();
    let m = FuseMount::new(&short);
    let path = m.p("f");
    let data: Vec<u8> = (0..(3 << 20)).map(|i| (i % 251) as u8).collect();
    fs::write(&path, &data).unwrap();
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let fd = f.as_raw_fd();
    c.down();
    let t = std::time::Instant::now();
    // SAFETY: `fd` is open for the whole test; the calls take plain integers.
    let punched = unsafe {
        libc::fallocate(
            fd,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            4096,
            1 << 20,
        )
    };
    let e = std::io::Error::last_os_error();
    assert_eq!((punched, e.raw_os_error()), (-1, Some(libc::EIO)), "{e}");
    // SAFETY: as above.
    let sought = unsafe { libc::lseek(fd, 0, libc::SEEK_DATA) };
    let e = std::io::Error::last_os_error();
    assert_eq!((sought, e.raw_os_error()), (-1, Some(libc::EIO)), "{e}");
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "took {:?}",
        t.elapsed()
    );
    c.restart();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    // SAFETY: as above.
    while unsafe { libc::lseek(fd, 0, libc::SEEK_DATA) } != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the mount did not recover"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(f);
    assert!(
        fs::read(&path).unwrap() == data,
        "a failed punch changed the file"
    );
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    // SAFETY: as above, with the new descriptor.
    let punched = unsafe {
        libc::fallocate(
            f.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            4096,
            1 << 20,
        )
    };
    assert_eq!(punched, 0, "{}", std::io::Error::last_os_error());
    drop(f);
    let back = fs::read(&path).unwrap();
    assert!(back[4096..4096 + (1 << 20)].iter().all(|&b| b == 0));
    assert!(back[..4096] == data[..4096] && back[4096 + (1 << 20)..] == data[4096 + (1 << 20)..]);
}
