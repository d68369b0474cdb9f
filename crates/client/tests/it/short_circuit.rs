//! Short-circuit reads (issue 14, item 3): a client on a data server's host reads the
//! server's files through descriptors passed over its Unix socket, verifies every block
//! itself, falls back to the server on any mismatch (so damage is still reported, never
//! passed on), and gets descriptors only for files it could open.

use crate::common;

use common::{hint, pattern, seed, Cluster};
use rand::{Rng, SeedableRng};
use std::os::unix::fs::FileExt;
use stripefs_client::{Client, Cred, DirectReads, ErrorCode, OpenOptions};
use stripefs_data::LocalServer;
use stripefs_rpc::samehost::{Attached, LocalDial, LocalLink, PipeOut, SocketDial};
use stripefs_sys::storage::ObjectFile;
use stripefs_wire::{GrantPiece, Request, Response};

/// The cluster's servers all on host "h0", each with a short-circuit socket; the
/// returned config is that of a client on h0.
fn on_one_host(cl: &Cluster) -> (stripefs_rpc::ClusterConfig, Vec<LocalServer>) {
    let mut cfg = cl.config.clone();
    let mut socks = Vec::new();
    for (i, d) in cfg.data.iter_mut().enumerate() {
        let path = cl.dir.path().join(format!("d{i}.sock"));
        socks.push(
            LocalServer::start(cl.data[i].clone(), &path, cfg.secret.clone()).expect("socket"),
        );
        d.host = Some("h0".into());
        d.local_socket = Some(path);
    }
    cfg.host = Some("h0".into());
    (cfg, socks)
}

/// One data server (one target, 64 KiB units) on host h0, with its socket; a root
/// client of it; and the inode of a file it holds.
struct OneServer {
    cl: Cluster,
    cfg: stripefs_rpc::ClusterConfig,
    socks: Vec<LocalServer>,
    c: Client,
    ino: stripefs_client::InodeId,
}

/// [`OneServer`] with `path` holding `bytes` (mode 0644).
fn one_server_with(path: &str, bytes: &[u8]) -> OneServer {
    let cl = Cluster::with(1, 1, 64 << 10);
    let (cfg, socks) = on_one_host(&cl);
    let c = client(&cfg);
    c.write_file(path, bytes, 0o644).unwrap();
    let ino = c.stat(path).unwrap().ino;
    OneServer {
        cl,
        cfg,
        socks,
        c,
        ino,
    }
}

/// A connection of our own to data server 0's same-host endpoint, its handshake done:
/// the requests the tests send are what a client sends, or what a broken one might.
fn link(cfg: &stripefs_rpc::ClusterConfig) -> Box<dyn LocalLink> {
    SocketDial {
        path: cfg.data[0].local_socket.clone().unwrap(),
        secret: cfg.secret.clone(),
        timeout: std::time::Duration::from_secs(5),
    }
    .dial()
    .unwrap()
}

/// [`link`] with its pipe handed over: the connection and the pipe's end we write.
fn piped_link(cfg: &stripefs_rpc::ClusterConfig) -> (Box<dyn LocalLink>, Box<dyn PipeOut>) {
    let mut l = link(cfg);
    let (out, end) = l.pipe().unwrap();
    let (r, _) = l.call(Request::LocalPipe {}, end).unwrap();
    assert!(matches!(r, Ok(Response::Done)), "{r:?}");
    (l, out)
}

/// Whether a same-host write was stored.
fn stored_ok(r: Result<Response, stripefs_wire::WireError>) -> bool {
    match r {
        Ok(Response::Written { .. }) => true,
        Ok(other) => panic!("a write answered {other:?}"),
        Err(_) => false,
    }
}

/// Creates (or truncates) `path` for reading and writing, striped `unit` x `count`.
fn create(c: &Client, path: &str, unit: u32, count: u32) -> stripefs_client::File {
    c.open(
        path,
        &OpenOptions::create_truncate()
            .read(true)
            .layout(hint(unit, count)),
    )
    .unwrap()
}

/// Writes `data` durably into a new `path` striped `unit` x `count`; returns the path of
/// its object on data server 0's first target.
fn stored(
    cl: &Cluster,
    cfg: &stripefs_rpc::ClusterConfig,
    path: &str,
    data: &[u8],
    unit: u32,
    count: u32,
) -> std::path::PathBuf {
    let c = client(cfg);
    let f = create(&c, path, unit, count);
    f.write_at(0, data).unwrap();
    f.fsync().unwrap();
    f.close().unwrap();
    let ino = c.stat(path).unwrap().ino;
    cl.data[0].object_paths(0, ino).0
}

fn client(cfg: &stripefs_rpc::ClusterConfig) -> Client {
    Client::connect(cfg).unwrap().with_cred(Cred::root())
}

#[test]
fn same_host_reads_bypass_the_server_and_read_back_exactly() {
    let cl = Cluster::with(2, 2, 64 << 10);
    let (cfg, _socks) = on_one_host(&cl);
    let c = client(&cfg);
    let data = pattern(11, (3 << 20) + 12345);
    let f = create(&c, "/sc", 64 << 10, 2);
    f.write_at(0, &data).unwrap();
    // A hole in the middle: reads as zeros.
    f.write_at((5 << 20) + 7, b"tail").unwrap();
    f.fsync().unwrap();
    f.close().unwrap();

    let reader = client(&cfg);
    let before = reader.traffic();
    let got = reader.read_file("/sc").unwrap();
    let t = reader.traffic().since(&before);
    assert_eq!(got.len(), (5 << 20) + 11);
    assert!(got[..data.len()] == data[..], "data read back wrong");
    assert!(got[data.len()..(5 << 20) + 7].iter().all(|&b| b == 0));
    assert_eq!(&got[(5 << 20) + 7..], b"tail");
    assert!(t.direct_read >= data.len() as u64, "{t:?}");
    assert_eq!(
        t.local_read + t.remote_read,
        0,
        "read through a server: {t:?}"
    );
    assert!(cl.data.iter().all(|d| d.local_opens() > 0));

    // Turned off, the same read goes through the servers.
    reader.set_short_circuit(false);
    let before = reader.traffic();
    assert!(reader.read_file("/sc").unwrap() == got);
    let t = reader.traffic().since(&before);
    assert_eq!(t.direct_read, 0, "{t:?}");
    assert!(t.local_read > 0, "{t:?}");
}

/// A file striped over a server on the client's host and one on another host: a read
/// of the local server's units goes on the caller's thread straight from the disk into
/// the caller's buffer, as for a wholly local file; reads of the other's units, or across
/// both, go through the servers; all read back exactly.
#[test]
fn reads_of_a_partly_local_file_go_short_circuit_where_they_can() {
    let cl = Cluster::with(2, 1, 64 << 10);
    let (mut cfg, _socks) = on_one_host(&cl);
    cfg.data[1].host = Some("h1".into());
    cfg.data[1].local_socket = None;
    let unit: usize = 1 << 20;
    let data = pattern(21, 4 * unit);
    let obj = stored(&cl, &cfg, "/half", &data, unit as u32, 2);

    let reader = client(&cfg);
    reader.set_direct_reads(DirectReads::Any);
    let f = reader.open("/half", &OpenOptions::new()).unwrap();
    let mut buf = stripefs_client::IoBuf::new(512 << 10);
    // (offset, held by server 0 alone): units 0 and 2 are on server 0.
    for (at, local) in [
        (0, true),
        (2 * unit + (256 << 10), true),
        (unit + 8192, false),
        (unit - (128 << 10), false),
    ] {
        if !uncache(&obj) {
            common::skip(&format!(
                "the page cache keeps {obj:?} (tmpfs?) or cannot say"
            ));
            return;
        }
        let before = reader.traffic();
        assert_eq!(f.read_buf(at as u64, &mut buf).unwrap(), buf.len());
        let t = reader.traffic().since(&before);
        assert!(
            buf[..] == data[at..at + buf.len()],
            "at {at}: read back wrong"
        );
        if local {
            assert_eq!(t.self_read, buf.len() as u64, "at {at}: not direct: {t:?}");
            assert_eq!(t.local_read + t.remote_read, 0, "at {at}: {t:?}");
        } else {
            assert!(t.remote_read > 0, "at {at}: {t:?}");
        }
    }
    f.close().unwrap();
}

/// Reads at any offset and length, inside a block, across blocks and units, over holes
/// and past the end, go straight from the files into the caller's buffer and equal the
/// bytes written.
#[test]
fn unaligned_short_circuit_reads_return_exactly_the_written_bytes() {
    let seed = seed("unaligned_short_circuit_reads_return_exactly_the_written_bytes");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let cl = Cluster::with(3, 2, 64 << 10);
    let (cfg, _socks) = on_one_host(&cl);
    let c = client(&cfg);
    let size = (1 << 20) + 54_321;
    let mut want = pattern(seed, size);
    // A hole of 50,000 bytes: never written, reads as zeros.
    want[300_001..350_001].fill(0);
    let f = create(&c, "/u", 64 << 10, 3);
    f.write_at(0, &want[..300_001]).unwrap();
    f.write_at(350_001, &want[350_001..]).unwrap();
    f.close().unwrap();

    let reader = client(&cfg);
    let r = reader.open("/u", &OpenOptions::read_only()).unwrap();
    let before = reader.traffic();
    for i in 0..300 {
        let offset = match i % 3 {
            0 => rng.gen_range(0..size as u64 + 5_000),
            1 => rng.gen_range(0..size as u64 / 4096) * 4096 + rng.gen_range(4090..4096),
            _ => rng.gen_range(1..=size as u64 / 65_536) * 65_536 - 1,
        };
        let len = match i % 4 {
            0 => rng.gen_range(1..20),
            1 => rng.gen_range(1..10_000),
            2 => rng.gen_range(60_000..200_000),
            _ => 4096,
        };
        let mut buf = vec![0xEEu8; len];
        let n = r.read_at(offset, &mut buf).unwrap();
        let lo = (offset as usize).min(size);
        let hi = (offset as usize + len).min(size);
        assert_eq!(n, hi - lo, "read {len} at {offset}: length (seed {seed})");
        assert!(
            buf[..n] == want[lo..hi],
            "read {len} at {offset}: wrong bytes (seed {seed})"
        );
    }
    let t = reader.traffic().since(&before);
    assert!(t.direct_read > 0, "{t:?}");
    assert_eq!(
        t.local_read + t.remote_read,
        0,
        "read through a server: {t:?}"
    );
}

#[test]
fn a_corrupted_block_is_detected_and_reported_by_the_server() {
    let data = pattern(12, 256 << 10);
    let OneServer {
        cl,
        cfg,
        socks: _socks,
        c: _c,
        ino,
    } = one_server_with("/bad", &data);
    // Flip one byte of the second block in the stored object, under the server.
    let (obj, _) = cl.data[0].object_paths(0, ino);
    let f = std::fs::OpenOptions::new().write(true).open(&obj).unwrap();
    let mut b = [0u8; 1];
    std::fs::File::open(&obj)
        .unwrap()
        .read_at(&mut b, 5000)
        .unwrap();
    f.write_at(&[b[0] ^ 0x40], 5000).unwrap();
    drop(f);

    let reader = client(&cfg);
    let opens = cl.data[0].local_opens();
    let e = reader.read_file("/bad").unwrap_err();
    assert!(
        cl.data[0].local_opens() > opens,
        "the read did not try the files"
    );
    assert!(
        e.code == ErrorCode::Checksum,
        "not reported as damage: {e:?}"
    );
}

#[test]
fn no_descriptors_for_a_file_the_caller_may_not_open() {
    let cl = Cluster::with(1, 1, 64 << 10);
    let (cfg, _socks) = on_one_host(&cl);
    let root = client(&cfg);
    root.write_file("/secret", &pattern(13, 100_000), 0o600)
        .unwrap();
    let opens = cl.data[0].local_opens();
    let user = Client::connect(&cfg).unwrap().with_cred(Cred {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    });
    let e = user.read_file("/secret").unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{e:?}");
    assert_eq!(
        cl.data[0].local_opens(),
        opens,
        "descriptors were handed out"
    );
}

/// A short-circuit reader racing a writer of the same blocks (another client, whole-block
/// rewrites, so every block is always one version) sees each block whole, from one
/// version or another, never a torn mix: a block caught mid-rewrite fails its checksum
/// and is read again through the server, which holds the block's lock.
#[test]
fn reads_racing_rewrites_see_whole_blocks() {
    const LEN: usize = 512 << 10;
    const VERSIONS: u8 = 40;
    let cl = Cluster::with(1, 1, 64 << 10);
    let (cfg, _socks) = on_one_host(&cl);
    let block_of = |v: u8, b: usize| -> Vec<u8> {
        (0..4096)
            .map(|i| v ^ (b as u8) ^ (i as u8 & 0x0f))
            .collect()
    };
    let version = |v: u8| -> Vec<u8> { (0..LEN / 4096).flat_map(|b| block_of(v, b)).collect() };
    let w = client(&cfg);
    w.write_file("/race", &version(0), 0o644).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let st = stop.clone();
    let cfg2 = cfg.clone();
    let reader = std::thread::spawn(move || {
        let r = client(&cfg2);
        let mut reads = 0u64;
        while !st.load(std::sync::atomic::Ordering::Relaxed) {
            let got = r.read_file("/race").unwrap();
            assert_eq!(got.len(), LEN);
            for (b, blk) in got.chunks(4096).enumerate() {
                let v = blk[0] ^ (b as u8);
                assert!(
                    v < VERSIONS && blk == block_of(v, b).as_slice(),
                    "block {b} of read {reads} is no whole version"
                );
            }
            reads += 1;
        }
        (reads, r.traffic().direct_read)
    });
    let f = w.open("/race", &OpenOptions::write_only()).unwrap();
    for v in 1..VERSIONS {
        f.write_at(0, &version(v)).unwrap();
        f.fsync().unwrap();
    }
    f.close().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (reads, direct) = reader.join().unwrap();
    assert!(
        reads > 0 && direct > 0,
        "{reads} reads, {direct} bytes direct"
    );
}

/// Writes from a client on a data server's host go through the server (whole blocks;
/// the rest over TCP): through the pipe with direct writes off; by default, large
/// writes of new blocks written by the client into the files itself and rewrites of
/// written ones through the pipe; all read back exactly through the server.
#[test]
fn same_host_writes_go_through_the_pipe_and_read_back_exactly() {
    let cl = Cluster::with(2, 2, 64 << 10);
    let (cfg, _socks) = on_one_host(&cl);
    let w = client(&cfg);
    // Direct writes off: the pipe.
    w.set_direct_writes(false);
    let before = w.traffic();
    w.write_file("/p", &pattern(20, 1 << 20), 0o644).unwrap();
    let t = w.traffic().since(&before);
    assert!(t.direct_written >= 1 << 20 && t.self_written == 0, "{t:?}");
    // On by default.
    let w = client(&cfg);
    let mut data = pattern(21, (3 << 20) + 12345);
    let f = create(&w, "/w", 64 << 10, 2);
    let before = w.traffic();
    f.write_at(0, &data).unwrap();
    f.fsync().unwrap();
    let t = w.traffic().since(&before);
    assert!(t.direct_written >= 3 << 20, "{t:?}");
    assert!(
        t.local_written + t.remote_written < 64 << 10,
        "whole blocks went over TCP: {t:?}"
    );
    // New blocks in large writes: written by the client itself (direct writes).
    assert!(t.self_written >= 3 << 20, "{t:?}");
    // Rewrites of written blocks go through the pipe (the server reads them and checks
    // them before they replace anything).
    let new = pattern(22, 1 << 20);
    data[4096..4096 + new.len()].copy_from_slice(&new);
    f.write_at(4096, &new).unwrap();
    f.close().unwrap();
    let t2 = w.traffic().since(&before);
    assert!(t2.direct_written >= 4 << 20, "{t2:?}");
    assert_eq!(t2.self_written, t.self_written, "a rewrite went direct");

    let reader = client(&cfg);
    reader.set_short_circuit(false);
    assert!(reader.read_file("/w").unwrap() == data, "read back wrong");
    let written: u64 = (0..2)
        .map(|i| {
            reader
                .data_status(stripefs_client::ServerId(i))
                .unwrap()
                .counters
                .bytes_written
        })
        .sum();
    assert!(written >= t.direct_written, "servers counted {written}");
}

/// A short-circuit write whose bytes do not match their CRCs (a client that changed its
/// buffer under the transfer, or worse) changes nothing: new blocks stay holes, written
/// blocks keep their bytes, and the connection's next write lands right.
#[test]
fn a_damaged_short_circuit_write_changes_nothing() {
    let OneServer {
        cl,
        cfg,
        socks: _socks,
        c: _c,
        ino,
    } = one_server_with("/d", &pattern(31, 8192));
    let (mut l, mut pw) = piped_link(&cfg);
    let mut write = |offset: u64, bytes: &[u8], crcs: Vec<u32>| {
        pw.put(bytes).unwrap();
        let req = Request::LocalWrite {
            fid: ino,
            unit: 64 << 10,
            offset,
            len: bytes.len() as u32,
            crcs,
        };
        stored_ok(l.call(req, Attached::None).unwrap().0)
    };
    let crcs = |b: &[u8]| {
        b.chunks(4096)
            .map(stripefs_wire::crc32c)
            .collect::<Vec<_>>()
    };
    let fresh = pattern(32, 8192);
    let mut wrong = crcs(&fresh);
    wrong[1] ^= 1;
    // Over the two written blocks: refused before anything changes.
    assert!(!write(0, &fresh, wrong.clone()));
    // Past them, where blocks are holes: spliced, checked, left holes.
    assert!(!write(65536, &fresh, wrong));
    // The next write on the same connection starts at its own first byte.
    assert!(write(131072, &fresh, crcs(&fresh)));
    let obj = cl.data[0].object_paths(0, ino);
    let sidecar = std::fs::read(&obj.1).unwrap();
    let entry = |b: usize| &sidecar[8 * b..8 * b + 8];
    let stored = std::fs::read(&obj.0).unwrap();
    assert!(
        stored[..8192] == pattern(31, 8192)[..],
        "written blocks changed"
    );
    assert!(
        entry(16) == [0; 8] && entry(17) == [0; 8],
        "unchecked blocks blessed"
    );
    assert_eq!(entry(32)[..4], crcs(&fresh)[0].to_le_bytes());
    assert!(stored[131072..131072 + 8192] == fresh[..]);
}

/// Strided unaligned records (the interleaved 47,008-byte pattern, two writers on one
/// file) gathered by the client go to a server on its host as lists through its pipe,
/// not over TCP, and read back exactly through the server.
#[test]
fn same_host_gathered_unaligned_writes_go_through_the_pipe_as_lists() {
    let cl = Cluster::with(2, 2, 1 << 20);
    let (cfg, _socks) = on_one_host(&cl);
    let rec = 47_008usize;
    let recs = 60;
    let writers: Vec<_> = (0..2).map(|_| client(&cfg)).collect();
    let mut expect = vec![0u8; rec * recs];
    let opts = OpenOptions::create_truncate().layout(hint(1 << 20, 2));
    writers[0].open("/il", &opts).unwrap().close().unwrap();
    let handles: Vec<_> = writers
        .iter()
        .map(|c| c.open("/il", &OpenOptions::write_only()).unwrap())
        .collect();
    let before: Vec<_> = writers.iter().map(|c| c.traffic()).collect();
    for k in 0..recs {
        let p = pattern(40 + k as u64, rec);
        expect[k * rec..(k + 1) * rec].copy_from_slice(&p);
        handles[k % 2].write_at((k * rec) as u64, &p).unwrap();
    }
    for h in handles {
        h.fsync().unwrap();
        h.close().unwrap();
    }
    for (c, b) in writers.iter().zip(&before) {
        let t = c.traffic().since(b);
        assert!(t.direct_written >= (recs / 2 * rec) as u64, "{t:?}");
        assert_eq!(t.total_written(), 0, "list writes went over TCP: {t:?}");
    }
    let reader = client(&cfg);
    reader.set_short_circuit(false);
    assert!(
        reader.read_file("/il").unwrap() == expect,
        "read back wrong"
    );
}

/// A short-circuit list write whose bytes do not match their CRCs changes nothing and
/// leaves the pipe clean for the next one; a malformed list ends the connection.
#[test]
fn a_damaged_short_circuit_list_write_changes_nothing() {
    let old = pattern(51, 20_000);
    let OneServer {
        cl: _cl,
        cfg,
        socks: _socks,
        c,
        ino,
    } = one_server_with("/l", &old);
    let (mut l, mut pw) = piped_link(&cfg);
    let a = pattern(52, 5000);
    let b = pattern(53, 300);
    let extents = vec![(100u64, 5000u32), (15_000, 300)];
    let mut crcs = stripefs_wire::piece_crcs(100, &a);
    crcs.extend(stripefs_wire::piece_crcs(15_000, &b));
    let mut send = |crcs: Vec<u32>| {
        for p in [&a[..], &b[..]] {
            pw.put(p).unwrap();
        }
        let req = Request::LocalWriteList {
            fid: ino,
            unit: 64 << 10,
            extents: extents.clone(),
            crcs,
        };
        stored_ok(l.call(req, Attached::None).unwrap().0)
    };
    let mut wrong = crcs.clone();
    *wrong.last_mut().unwrap() ^= 1;
    assert!(!send(wrong));
    assert!(
        c.read_file("/l").unwrap() == old,
        "a refused list changed bytes"
    );
    assert!(send(crcs));
    let mut expect = old.clone();
    expect[100..5100].copy_from_slice(&a);
    expect[15_000..15_300].copy_from_slice(&b);
    assert!(
        c.read_file("/l").unwrap() == expect,
        "the list landed wrong"
    );
    // A list whose CRC count does not match its extents: refused, connection closed.
    let bad = Request::LocalWriteList {
        fid: ino,
        unit: 64 << 10,
        extents: vec![(0, 10)],
        crcs: vec![],
    };
    let (r, _) = l.call(bad, Attached::None).unwrap();
    assert_eq!(r.unwrap_err().code, ErrorCode::InvalidArgument);
    assert!(
        l.call(Request::LocalPipe {}, Attached::None).is_err(),
        "the connection did not end"
    );
}

/// `len` bytes of `fill` at a page-aligned address (direct writes need one), kept alive
/// by the returned vector.
fn aligned(fill: &[u8]) -> (Vec<u8>, usize) {
    let mut v = vec![0u8; fill.len() + 4096];
    let at = (4096 - v.as_ptr() as usize % 4096) % 4096;
    v[at..at + fill.len()].copy_from_slice(fill);
    (v, at)
}

/// Asks for a direct write of 8 KiB at `offset` of `ino` (64 KiB units) on `l`: the
/// pieces and the files granted, or why not.
fn grant_8k(
    l: &mut dyn LocalLink,
    ino: stripefs_client::InodeId,
    offset: u64,
) -> Result<(Vec<GrantPiece>, stripefs_data::Handles), stripefs_wire::WireError> {
    let req = Request::LocalDirect {
        fid: ino,
        unit: 64 << 10,
        offset,
        len: 8192,
    };
    match l.call(req, Attached::None).unwrap() {
        (Ok(Response::Granted { pieces }), files) => Ok((pieces, files.files())),
        (Ok(other), _) => panic!("a direct write answered {other:?}"),
        (Err(e), _) => Err(e),
    }
}

/// Writes `bytes` (from a page-aligned copy) into a grant's pieces, as a client does.
fn put_pieces(pieces: &[GrantPiece], files: &[std::sync::Arc<dyn ObjectFile>], bytes: &[u8]) {
    let (buf, at) = aligned(bytes);
    let mut done = 0;
    for p in pieces {
        let part = &buf[at + done..at + done + p.len as usize];
        files[p.fd as usize].write_at(part, p.offset).unwrap();
        done += p.len as usize;
    }
    assert_eq!(done, bytes.len());
}

/// A direct write (the client writes hole blocks into the data file itself, the server
/// stores the CRCs it sends) changes what readers see only once the client says it wrote
/// every piece: blocks that hold bytes are refused, a write the client gives up or dies
/// in stays holes whatever it put in the file, and the range is free again afterwards.
/// CRCs that do not match the bytes are stored as sent, and every read of the block is
/// then a checksum error, never the wrong bytes.
#[test]
fn a_direct_write_stores_only_what_the_client_says_it_wrote() {
    let OneServer {
        cl,
        cfg,
        socks: _socks,
        c,
        ino,
    } = one_server_with("/d", &pattern(51, 8192));
    let connect = || link(&cfg);
    let put = |l: &mut Box<dyn LocalLink>, offset: u64, bytes: &[u8]| {
        let (pieces, files) = grant_8k(l.as_mut(), ino, offset).expect("a grant");
        put_pieces(&pieces, &files, bytes);
    };
    // The client's end: it lets go of the files before it says it is done.
    let finish = |l: &mut Box<dyn LocalLink>, crcs: Option<&[u32]>| {
        let req = Request::LocalDirectDone {
            crcs: crcs.map(|c| c.to_vec()),
        };
        stored_ok(l.call(req, Attached::None).unwrap().0)
    };
    let crcs = |b: &[u8]| {
        b.chunks(4096)
            .map(stripefs_wire::crc32c)
            .collect::<Vec<_>>()
    };
    let obj = cl.data[0].object_paths(0, ino);
    let entry = |b: usize| {
        let sidecar = std::fs::read(&obj.1).unwrap();
        sidecar
            .get(8 * b..8 * b + 8)
            .map(|e| e.to_vec())
            .unwrap_or(vec![0; 8])
    };
    let mut s = connect();
    // Over written blocks: refused, nothing granted.
    assert!(grant_8k(s.as_mut(), ino, 0).is_err());
    // Bytes put into holes but not confirmed: the blocks stay holes.
    let fresh = pattern(52, 8192);
    put(&mut s, 65536, &fresh);
    assert!(!finish(&mut s, None));
    assert!(
        entry(16) == [0; 8] && entry(17) == [0; 8],
        "unconfirmed blocks blessed"
    );
    // Confirmed: stored, and read back exactly through the server.
    put(&mut s, 131072, &fresh);
    assert!(finish(&mut s, Some(&crcs(&fresh))));
    assert_eq!(entry(32)[..4], crcs(&fresh)[0].to_le_bytes());
    // A client that dies holding a grant: its blocks stay holes, and the range is free
    // for the next writer.
    put(&mut s, 196608, &fresh);
    drop(s);
    let mut s = connect();
    assert!(entry(48) == [0; 8], "a dead client's blocks blessed");
    let other = pattern(53, 8192);
    put(&mut s, 196608, &other);
    assert!(finish(&mut s, Some(&crcs(&other))));
    // CRCs that do not match the bytes: stored as sent, and a checksum error to read.
    let mut wrong = crcs(&fresh);
    wrong[0] ^= 1;
    put(&mut s, 262144, &fresh);
    assert!(finish(&mut s, Some(&wrong)));
    // A malformed request (not of whole blocks) is answered, and ends the connection.
    let bad = Request::LocalDirect {
        fid: ino,
        unit: 64 << 10,
        offset: 100,
        len: 8192,
    };
    let (r, _) = s.call(bad, Attached::None).unwrap();
    assert_eq!(r.unwrap_err().code, ErrorCode::InvalidArgument);
    assert!(
        s.call(Request::LocalOpen { fid: ino }, Attached::None)
            .is_err(),
        "the connection did not end"
    );

    // The raw writes told the metadata server nothing: the file's size comes from here.
    let h = c.open("/d", &OpenOptions::write_only()).unwrap();
    h.set_len(270_336).unwrap();
    h.close().unwrap();
    let reader = client(&cfg);
    reader.set_short_circuit(false);
    let f = reader.open("/d", &OpenOptions::read_only()).unwrap();
    let mut got = vec![0u8; 8192];
    for (at, want) in [(131072u64, &fresh), (196608, &other)] {
        f.read_at(at, &mut got).unwrap();
        assert!(got == *want, "direct write at {at} read back wrong");
    }
    f.read_at(65536, &mut got).unwrap();
    assert!(got.iter().all(|&b| b == 0), "unconfirmed bytes visible");
    let e = f
        .read_at(262144, &mut got)
        .expect_err("a block under a wrong CRC read");
    assert_eq!(e.code, ErrorCode::Checksum, "{e}");
}

/// A direct write whose connection ends before the client says it is done (its peer
/// timed out, the server restarted) may still land: the server cannot take the
/// descriptors back. Its blocks stay locked until the client has closed them, so a
/// later writer's bytes are never overwritten by the late write; and a server started
/// again on the same disks waits for the grants of the run before it.
#[test]
fn a_late_direct_write_never_lands_over_a_later_writer() {
    let OneServer {
        cl,
        cfg,
        socks: _socks,
        c: _c,
        ino,
    } = one_server_with("/late", &pattern(61, 4096));
    // A grant of `[offset, offset + 8 KiB)` on a connection that then ends: the pieces
    // and the descriptors the client still holds.
    let abandoned = |offset: u64| grant_8k(link(&cfg).as_mut(), ino, offset).expect("a grant");
    let (pieces, files) = abandoned(65536);
    let writer = {
        let cfg = cfg.clone();
        std::thread::spawn(move || {
            let c = client(&cfg);
            c.set_short_circuit(false);
            let f = c.open("/late", &OpenOptions::write_only()).unwrap();
            f.write_at(65536, &pattern(62, 8192)).unwrap();
            f.fsync().unwrap();
            f.close().unwrap();
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        !writer.is_finished(),
        "another writer got the blocks of a grant whose descriptors are still open"
    );
    // The late write lands now; only then does the client close the descriptors.
    put_pieces(&pieces, &files, &pattern(63, 8192));
    drop(files);
    writer.join().unwrap();
    let reader = client(&cfg);
    reader.set_short_circuit(false);
    let f = reader.open("/late", &OpenOptions::read_only()).unwrap();
    let mut got = vec![0u8; 8192];
    f.read_at(65536, &mut got).unwrap();
    assert!(
        got == pattern(62, 8192),
        "the later writer's bytes were not kept"
    );

    // A server started again on these disks while a grant of its earlier run is held
    // serves nothing until that grant's descriptors are closed.
    let (_, files) = abandoned(131072);
    let targets = cl.targets[0].clone();
    let again = std::thread::spawn(move || {
        stripefs_data::DataService::open(stripefs_client::ServerId(0), &targets, None).map(|_| ())
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        !again.is_finished(),
        "a restarted server did not wait for a grant of its earlier run"
    );
    drop(files);
    again.join().unwrap().unwrap();
}

/// A client that may not open the server's files itself (another user's process; object
/// files are the server's, mode 0600) still reads short-circuit, through the server's
/// descriptors and the page cache, exactly, and never directly: the kernel refuses it
/// `cachestat` on them (Linux 6.18 allows it only to those who may write the file), and
/// the direct read's reopen through `/proc/self/fd` would check its access again. Run as
/// root, from a thread whose file-system uid is `nobody`.
#[test]
fn a_client_that_may_not_open_the_servers_files_reads_them_through_the_page_cache() {
    if unsafe { libc::geteuid() } != 0 {
        common::skip("needs root to take another file-system uid");
        return;
    }
    let cl = Cluster::with(1, 1, 1 << 20);
    let (cfg, _socks) = on_one_host(&cl);
    let data = pattern(71, 2 << 20);
    let obj = stored(&cl, &cfg, "/nobody", &data, 1 << 20, 1);

    let reader = client(&cfg);
    reader.set_direct_reads(DirectReads::Any);
    let r = reader.open("/nobody", &OpenOptions::read_only()).unwrap();
    // As root: the socket connected and the object's descriptors cached (a small read).
    let mut small = vec![0u8; 4096];
    r.read_at(0, &mut small).unwrap();
    if !uncache(&obj) {
        common::skip(&format!(
            "the page cache keeps {obj:?} (tmpfs?) or cannot say"
        ));
        return;
    }
    let before = reader.traffic();
    let got = std::thread::spawn(move || {
        // SAFETY: changes this thread's file-system uid only; the thread ends below.
        unsafe { libc::setfsuid(65534) };
        assert_eq!(unsafe { libc::setfsuid(u32::MAX) }, 65534);
        let mut buf = stripefs_client::IoBuf::new(2 << 20);
        let n = r.read_buf(0, &mut buf).unwrap();
        (n, buf[..n].to_vec())
    })
    .join()
    .unwrap();
    let t = reader.traffic().since(&before);
    assert_eq!(got.0, 2 << 20);
    assert!(got.1 == data, "read back wrong");
    assert_eq!(t.self_read, 0, "a direct read the caller may not do: {t:?}");
    assert_eq!(
        t.local_read + t.remote_read,
        0,
        "read through the server: {t:?}"
    );
    assert!(t.direct_read >= 2 << 20, "{t:?}");
}

/// Writes `f`'s dirty pages and drops its cached ones, as if the server's host had been
/// busy with other files since; `false` where the kernel keeps them (tmpfs) or cannot
/// say (no `cachestat`).
fn uncache(path: &std::path::Path) -> bool {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap();
    f.sync_all().unwrap();
    // SAFETY: advice on an open descriptor.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(r, 0);
    stripefs_rpc::local::cachestat(&f, 0, 0).is_some_and(|c| c.cached == 0)
}

/// Direct reads: a large read of bytes the page cache does not hold, into an IoBuf
/// (`File::read_buf`), goes from the server's disk straight into the buffer and reads
/// back exactly (holes as zeros, a short last block); a plain read, or one with direct
/// reads off, or into an unaligned buffer, goes through the page cache; and a byte
/// flipped on the disk is still reported as damage.
#[test]
fn large_reads_of_uncached_bytes_go_from_the_disk_into_an_aligned_buffer() {
    let cl = Cluster::with(1, 1, 1 << 20);
    let (cfg, _socks) = on_one_host(&cl);
    let c = client(&cfg);
    let len = (3 << 20) + 5000;
    let mut data = pattern(31, len);
    // Bytes [1 MiB, 1.5 MiB) are never written: a hole.
    data[1 << 20..(1 << 20) + (512 << 10)].fill(0);
    let f = create(&c, "/dr", 1 << 20, 1);
    f.write_at(0, &data[..1 << 20]).unwrap();
    f.write_at((1 << 20) + (512 << 10), &data[(1 << 20) + (512 << 10)..])
        .unwrap();
    f.fsync().unwrap();
    f.close().unwrap();
    let ino = c.stat("/dr").unwrap().ino;
    let (obj, _) = cl.data[0].object_paths(0, ino);
    if !uncache(&obj) {
        common::skip(&format!(
            "the page cache keeps {obj:?} (tmpfs?) or cannot say"
        ));
        return;
    }

    let reader = client(&cfg);
    let r = reader.open("/dr", &OpenOptions::read_only()).unwrap();
    let mut buf = stripefs_client::IoBuf::new(4 << 20);
    // A plain read goes through the page cache by default, even into an aligned buffer.
    let before = reader.traffic();
    assert_eq!(r.read_at(0, &mut buf).unwrap(), len);
    assert_eq!(reader.traffic().since(&before).self_read, 0);
    assert!(buf[..len] == data[..], "read back wrong");
    buf.fill(0);
    assert!(uncache(&obj));
    // A read into an IoBuf goes from the disk: by default where IoBufs are huge pages.
    let huge = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|s| s.contains("[always]") || s.contains("[madvise]"));
    if !huge {
        reader.set_direct_reads(DirectReads::Any);
    }
    let before = reader.traffic();
    assert_eq!(r.read_buf(0, &mut buf).unwrap(), len);
    let t = reader.traffic().since(&before);
    assert!(buf[..len] == data[..], "read back wrong");
    assert!(t.self_read >= 3 << 20, "not read directly: {t:?}");
    assert_eq!(t.local_read + t.remote_read, 0, "{t:?}");

    // Off, or into a buffer that is not page-aligned: through the page cache.
    assert!(uncache(&obj));
    reader.set_direct_reads(DirectReads::Off);
    let before = reader.traffic();
    assert_eq!(r.read_buf(0, &mut buf).unwrap(), len);
    assert_eq!(reader.traffic().since(&before).self_read, 0);
    reader.set_direct_reads(DirectReads::Any);
    assert!(uncache(&obj));
    let mut plain = vec![0u8; (2 << 20) + 1];
    let unaligned = &mut plain[1..];
    let before = reader.traffic();
    assert_eq!(r.read_at(0, unaligned).unwrap(), 2 << 20);
    assert_eq!(reader.traffic().since(&before).self_read, 0);
    assert!(unaligned[..] == data[..2 << 20]);

    // A byte flipped on the disk: reported as damage, never passed on.
    let w = std::fs::OpenOptions::new().write(true).open(&obj).unwrap();
    w.write_at(&[!data[(2 << 20) + 77]], (2 << 20) + 77)
        .unwrap();
    drop(w);
    assert!(uncache(&obj));
    let e = r.read_buf(0, &mut buf).unwrap_err();
    assert_eq!(e.code, ErrorCode::Checksum, "{e:?}");
}

/// A buffer given to the client (`File::write_buf`) is written as it is when its bytes
/// go to one server as one extent, and copied when they are spread: both read back
/// exactly, at aligned and unaligned offsets, through TCP and the short-circuit paths.
#[test]
fn given_buffers_are_written_exactly_whether_sent_as_they_are_or_copied() {
    let cl = Cluster::with(2, 2, 64 << 10);
    let (cfg, _socks) = on_one_host(&cl);
    for (name, short, direct) in [
        ("/g0", false, false),
        ("/g1", true, false),
        ("/g2", true, true),
    ] {
        let w = client(&cfg);
        w.set_short_circuit(short);
        w.set_direct_writes(direct);
        for (file, count) in [(format!("{name}-one"), 1), (format!("{name}-two"), 2)] {
            let f = w
                .open(
                    &file,
                    &OpenOptions::create_truncate()
                        .read(true)
                        .layout(hint(64 << 10, count)),
                )
                .unwrap();
            let end = (2 << 20) + 14 + (1 << 20);
            let mut want = vec![0u8; end];
            for (i, (at, n)) in [(0u64, 1usize << 20), (1 << 20, 300_000), (2 << 20, 1 << 20)]
                .into_iter()
                .enumerate()
            {
                let bytes = pattern(40 + i as u64, n);
                let mut b = stripefs_client::IoBuf::new(n);
                b.copy_from_slice(&bytes);
                f.write_buf(at + i as u64 * 7, b).unwrap();
                want[(at + i as u64 * 7) as usize..][..n].copy_from_slice(&bytes);
            }
            f.fsync().unwrap();
            f.close().unwrap();
            let got = client(&cfg).read_file(&file).unwrap();
            assert!(got == want, "{file} (short {short}, direct {direct})");
        }
    }
}
