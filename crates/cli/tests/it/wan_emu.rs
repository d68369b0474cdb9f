//! `stripefs wan-emu` as a user would run it: a relay process in front of a TCP server.
//! One connection is held to about window / RTT; all connections together to the rate.

use crate::common;

use common::exe;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The relay process; killed (and reaped) on drop, also when the test fails.
struct Relay {
    child: Child,
    addr: String,
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A server that reads every connection to its end and answers with the byte count.
fn sink() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                let mut n = 0u64;
                let mut buf = vec![0u8; 1 << 16];
                while let Ok(k) = s.read(&mut buf) {
                    if k == 0 {
                        break;
                    }
                    n += k as u64;
                }
                let _ = s.write_all(&n.to_le_bytes());
            });
        }
    });
    addr
}

/// Starts a relay listening on a port the kernel picks (a port chosen here and freed
/// could be taken by someone else before the relay binds it, and a readiness check by
/// connecting would then reach the wrong listener); its address is the one it prints.
fn relay(to: &str, rtt: &str, rate: &str, window: &str) -> Relay {
    let mut child = Command::new(exe())
        .args(["wan-emu", "--listen", "127.0.0.1:0", "--connect", to])
        .args(["--rtt", rtt, "--rate", rate, "--window", window])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut err, &mut line).unwrap();
    // "wan-emu: 127.0.0.1:PORT -> TO, RTT ..."
    let addr = line
        .strip_prefix("wan-emu: ")
        .and_then(|r| r.split(" -> ").next())
        .unwrap_or_else(|| panic!("wan-emu printed no address: {line:?}"))
        .to_string();
    // Keep reading its stderr so that it never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    Relay { child, addr }
}

/// Sends `len` bytes through `addr`, waits for the sink's count; returns the seconds.
fn send(addr: &str, len: usize) -> f64 {
    let start = Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    let chunk = vec![0x5au8; 1 << 16];
    let mut left = len;
    while left > 0 {
        let n = left.min(chunk.len());
        s.write_all(&chunk[..n]).unwrap();
        left -= n;
    }
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut count = [0u8; 8];
    s.read_exact(&mut count).unwrap();
    assert_eq!(
        u64::from_le_bytes(count),
        len as u64,
        "bytes lost in the relay"
    );
    start.elapsed().as_secs_f64()
}

#[test]
fn one_connection_gets_about_window_per_rtt() {
    let r = relay(&sink(), "100ms", "100MiB", "64K");
    let len = 1536 << 10;
    // 64 KiB per 100 ms: 640 KiB/s, so 1.5 MiB in about 2.4 s (plus half an RTT each
    // way for the count).
    let expect = len as f64 / (64.0 * 1024.0 / 0.1);
    let took = send(&r.addr, len);
    eprintln!("1.5 MiB through a 64 KiB window at 100 ms: {took:.2} s (model {expect:.2} s)");
    assert!(took > 0.8 * expect, "{took:.2} s: faster than window / RTT");
    assert!(
        took < 1.6 * expect,
        "{took:.2} s: far slower than window / RTT"
    );
}

#[test]
fn connections_share_the_rate() {
    let r = relay(&sink(), "0", "2MiB", "16M");
    let len = 2 << 20;
    let start = Instant::now();
    let senders: Vec<_> = (0..2)
        .map(|_| {
            let a = r.addr.clone();
            std::thread::spawn(move || send(&a, len))
        })
        .collect();
    for s in senders {
        s.join().unwrap();
    }
    let took = start.elapsed().as_secs_f64();
    // 4 MiB at 2 MiB/s in all: about 2 s whatever the number of connections.
    eprintln!("2 x 2 MiB through a shared 2 MiB/s link: {took:.2} s");
    assert!(
        took > 1.7,
        "{took:.2} s: the connections did not share the rate"
    );
    assert!(took < 3.5, "{took:.2} s");
}

#[test]
fn bad_arguments_are_refused_clearly() {
    for (args, why) in [
        (vec!["--rtt", "50", "--rate", "1MiB"], "needs a unit"),
        (vec!["--rtt", "50ms", "--rate", "fast"], "rate"),
    ] {
        let out = Command::new(exe())
            .args([
                "wan-emu",
                "--listen",
                "127.0.0.1:0",
                "--connect",
                "127.0.0.1:1",
            ])
            .args(&args)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(why), "{args:?}: {err}");
    }
}

/// `cluster up --wan` starts one relay in front of every server and writes a client file
/// through it: a put and get over it are held by the emulated rate and return the same
/// bytes, while the cluster file's own clients are not slowed; `cluster down` stops the
/// relay too.
#[test]
fn cluster_up_wan_relays_every_server_and_down_stops_it() {
    const RATE: f64 = 8.0 * 1048576.0;
    let c = common::Cluster::up(2, 1, &["--wan", "10ms,8MiB,1M"]);
    let remote = c.path().join("client-wan.toml");
    let r = remote.to_str().unwrap();
    let len = 4 << 20;
    let src = c.path().join("wan-src");
    let back = c.path().join("wan-back");
    let data = common::random_bytes(len);
    std::fs::write(&src, &data).unwrap();
    let timed = |args: &[&str]| {
        let t = Instant::now();
        c.ok(args);
        t.elapsed().as_secs_f64()
    };
    let put = timed(&["put", src.to_str().unwrap(), "/far", "--cluster", r]);
    let get = timed(&["get", "/far", back.to_str().unwrap(), "--cluster", r]);
    assert!(
        std::fs::read(&back).unwrap() == data,
        "the file came back different"
    );
    let link = len as f64 / RATE;
    eprintln!("4 MiB over an 8 MiB/s link: put {put:.2} s, get {get:.2} s (link {link:.2} s)");
    assert!(put > 0.8 * link && get > 0.8 * link, "faster than the link");
    let local = timed(&["get", "/far", back.to_str().unwrap()]);
    assert!(
        local < 0.5 * link,
        "the local client was slowed: {local:.2} s"
    );
    let relay = std::fs::read_to_string(c.path().join("run/wan.pid")).unwrap();
    let pid: u32 = relay.trim().parse().unwrap();
    c.down();
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(
        state.is_empty() || state.contains(") Z"),
        "the relay {pid} still runs after cluster down"
    );
}

/// Write-behind over a slow link never hides a lost write: a remote client writes far
/// more than the link carries before its close, data server 0 is killed meanwhile, and
/// the close (which waits for every write) returns the error.
#[test]
fn a_server_killed_during_write_behind_fails_the_close() {
    let c = common::Cluster::up(2, 1, &["--wan", "5ms,4MiB,1M"]);
    let cfg =
        stripefs_rpc::ClusterConfig::load(&c.path().join("client-wan.toml")).expect("client file");
    let client = stripefs_client::Client::connect(&cfg).expect("connect over the link");
    let f = client
        .open("/behind", &stripefs_client::OpenOptions::create_new(0o644))
        .unwrap();
    // 16 MiB into the 64 MiB write-behind window: the writes return at once, while the
    // 4 MiB/s link needs about 4 s to carry them.
    let chunk = vec![0x42u8; 1 << 20];
    let start = Instant::now();
    for i in 0..16u64 {
        f.write_at(i << 20, &chunk).unwrap();
    }
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "the writes waited for the link: {:?}",
        start.elapsed()
    );
    stripefs_launch::kill9(c.path(), "data0").unwrap();
    let r = f.close();
    assert!(
        r.is_err(),
        "close acknowledged writes a killed server never stored"
    );
    eprintln!("close after the kill: {:?}", r.unwrap_err());
}
