//! Connection floods against real server processes (`cluster up`): 5,000 connections
//! that never authenticate held open to the metadata server and 200 to each data server
//! (each reopened as soon as the server closes it, from one thread over nonblocking
//! sockets, from the real client's own address), plus 100 connections trickling a frame
//! one byte a second (half before authenticating, half after). A real client must still
//! list, write and read back a file within 5 seconds, and every trickling connection must
//! be closed within 15 seconds (a frame deadline).
//!
//! Before the handshake acceptor, every accepted connection took a thread and a slot of
//! the 4,096-connection limit: the flood locked every real client out (`ls` failed at
//! once with "server busy").

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use stripefs_rpc::auth::{random_nonce, Secret};
use stripefs_rpc::ClusterConfig;
use stripefs_wire::*;

const META_FLOOD: usize = 5000;
const DATA_FLOOD: usize = 200;
const TRICKLERS: usize = 100;
/// The longest a trickling connection may live.
const FRAME_DEADLINE_MAX: Duration = Duration::from_secs(15);
/// The longest the real client's list, write and read back may take together.
const CLIENT_MAX: Duration = Duration::from_secs(5);
/// The servers are taken to be full once they closed this many of the flood.
const FULL_AFTER_REOPENED: u64 = 500;
/// The flood stops by itself after this, whatever happens to the test.
const FLOOD_MAX: Duration = Duration::from_secs(120);

fn v4(a: &str) -> SocketAddrV4 {
    match a.parse::<SocketAddr>().expect("an address") {
        SocketAddr::V4(v) => v,
        other => panic!("IPv4 only: {other}"),
    }
}

fn sockaddr(ip: Ipv4Addr, port: u16) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    }
}

const SOCKADDR_LEN: libc::socklen_t = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;

/// A nonblocking connect to `to` from `from` (bound first when given); the descriptor,
/// or -1 when the system refuses a socket.
fn open_nonblocking(to: &SocketAddrV4, from: Option<Ipv4Addr>) -> i32 {
    // SAFETY: plain socket calls on a descriptor this function owns; the addresses are
    // valid structs on the stack.
    unsafe {
        let fd = libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        );
        if fd < 0 {
            return -1;
        }
        if let Some(ip) = from {
            let a = sockaddr(ip, 0);
            if libc::bind(fd, &a as *const _ as *const libc::sockaddr, SOCKADDR_LEN) != 0 {
                libc::close(fd);
                return -1;
            }
        }
        let b = sockaddr(*to.ip(), to.port());
        libc::connect(fd, &b as *const _ as *const libc::sockaddr, SOCKADDR_LEN);
        fd
    }
}

/// Silent connections held open to several servers from one thread; each one the
/// server closes is reopened at once. Stopped (and every socket closed) on drop.
struct Flood {
    stop: Arc<AtomicBool>,
    counts: Arc<FloodCounts>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct FloodCounts {
    /// Connections the servers closed and the flood opened again.
    reopened: AtomicU64,
    /// Slots whose connection was established at least once.
    established: AtomicU64,
}

impl Flood {
    fn start(targets: Vec<(SocketAddrV4, usize)>) -> Flood {
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(FloodCounts::default());
        let (st, c) = (stop.clone(), counts.clone());
        let thread = std::thread::spawn(move || flood(&targets, &st, &c));
        Flood {
            stop,
            counts,
            thread: Some(thread),
        }
    }

    /// Waits until every slot's connection was established once and the servers have
    /// begun closing the surplus (they are full), or `limit` passes.
    fn wait_full(&self, slots: u64, limit: Duration) {
        let start = Instant::now();
        let c = &self.counts;
        while (c.established.load(Ordering::Relaxed) < slots
            || c.reopened.load(Ordering::Relaxed) < FULL_AFTER_REOPENED)
            && start.elapsed() < limit
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        println!(
            "flood: {} of {slots} connections established, {} reopened, in {:?}",
            c.established.load(Ordering::Relaxed),
            c.reopened.load(Ordering::Relaxed),
            start.elapsed()
        );
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

const CLOSED: libc::c_short = libc::POLLIN | libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR;
const CONNECTING: libc::c_short = libc::POLLIN | libc::POLLRDHUP | libc::POLLOUT;

fn flood(targets: &[(SocketAddrV4, usize)], stop: &AtomicBool, counts: &FloodCounts) {
    let slots: Vec<&SocketAddrV4> = targets
        .iter()
        .flat_map(|(a, n)| std::iter::repeat(a).take(*n))
        .collect();
    let mut fds: Vec<libc::pollfd> = slots
        .iter()
        .map(|a| libc::pollfd {
            fd: open_nonblocking(a, None),
            events: CONNECTING,
            revents: 0,
        })
        .collect();
    let mut ever = vec![false; fds.len()];
    let start = Instant::now();
    while !stop.load(Ordering::Relaxed) && start.elapsed() < FLOOD_MAX {
        // SAFETY: a valid array of pollfds for the duration of the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 20) };
        if n <= 0 {
            continue;
        }
        for ((p, a), ever) in fds.iter_mut().zip(&slots).zip(ever.iter_mut()) {
            if p.revents & CLOSED != 0 || p.fd < 0 {
                if p.fd >= 0 {
                    // SAFETY: closing a descriptor this thread owns.
                    unsafe { libc::close(p.fd) };
                }
                p.fd = open_nonblocking(a, None);
                p.events = CONNECTING;
                counts.reopened.fetch_add(1, Ordering::Relaxed);
            } else if p.revents & libc::POLLOUT != 0 {
                // Established: from now on only a close matters.
                p.events = libc::POLLIN | libc::POLLRDHUP;
                if !*ever {
                    *ever = true;
                    counts.established.fetch_add(1, Ordering::Relaxed);
                }
            }
            p.revents = 0;
        }
    }
    for p in &fds {
        if p.fd >= 0 {
            // SAFETY: closing descriptors this thread owns.
            unsafe { libc::close(p.fd) };
        }
    }
}

/// Authenticates a raw stream as a client would.
fn handshake(s: &mut TcpStream, secret: &Secret) {
    let frame = |id, req| {
        encode_request(
            id,
            &Envelope {
                cred: Cred::root(),
                req,
            },
            0,
        )
    };
    let read = |s: &mut TcpStream| {
        let mut hb = [0u8; HEADER_LEN];
        s.read_exact(&mut hb).expect("a header");
        let h = Header::decode(&hb).expect("a valid header");
        let mut body = vec![0u8; h.body_len as usize];
        s.read_exact(&mut body).expect("a body");
        decode_response(&h, &body).expect("a valid answer")
    };
    let nonce_c = random_nonce();
    s.write_all(&frame(1, Request::Hello { nonce: nonce_c }))
        .expect("send Hello");
    let Ok(Response::Challenge { nonce, proof }) = read(s) else {
        panic!("no challenge");
    };
    assert_eq!(proof, secret.server_proof(&nonce_c, &nonce));
    let proof = secret.client_proof(&nonce, &nonce_c);
    s.write_all(&frame(2, Request::Auth { proof }))
        .expect("send Auth");
    assert!(matches!(read(s), Ok(Response::Done)), "Auth not accepted");
}

/// A connection that sends `frame` one byte a second; remembers when the server
/// closed it.
struct Trickler {
    stream: TcpStream,
    frame: Vec<u8>,
    sent: usize,
    start: Instant,
    closed_after: Option<Duration>,
}

impl Trickler {
    /// Sends the next byte, or notes that the server closed the connection.
    fn tick(&mut self) {
        if self.closed_after.is_some() {
            return;
        }
        let mut b = [0u8; 256];
        let gone = match self.stream.read(&mut b) {
            Ok(0) => true,
            Ok(_) => true, // an error answer, then the close follows
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
            Err(_) => true,
        };
        let gone = gone
            || self.sent >= self.frame.len()
            || self
                .stream
                .write(&self.frame[self.sent..=self.sent])
                .is_err();
        if gone {
            self.closed_after = Some(self.start.elapsed());
        } else {
            self.sent += 1;
        }
    }
}

/// Half the tricklers send a Hello before authenticating, half authenticate and then
/// send a Ping; from their own addresses, so that the flood's budget does not close
/// them before their deadline does.
fn tricklers(meta: &SocketAddrV4, secret: &Secret) -> Vec<Trickler> {
    (0..TRICKLERS)
        .map(|i| {
            let authenticated = i % 2 == 1;
            let from = Ipv4Addr::new(127, 0, 1, 1 + (i % 2) as u8);
            let fd = open_nonblocking(meta, Some(from));
            assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
            // SAFETY: the descriptor was just opened and is owned by the new stream.
            let mut stream = unsafe { <TcpStream as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            stream.set_nonblocking(false).expect("blocking");
            stream
                .set_write_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            wait_connected(&stream);
            let req = if authenticated {
                handshake(&mut stream, secret);
                Request::Ping {}
            } else {
                Request::Hello { nonce: [1; 32] }
            };
            let frame = encode_request(
                9,
                &Envelope {
                    cred: Cred::root(),
                    req,
                },
                0,
            );
            stream.set_nonblocking(true).expect("nonblocking");
            Trickler {
                stream,
                frame,
                sent: 0,
                start: Instant::now(),
                closed_after: None,
            }
        })
        .collect()
}

/// Waits until a nonblocking connect has completed (the socket is writable).
fn wait_connected(s: &TcpStream) {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd on the stack.
    let n = unsafe { libc::poll(&mut p, 1, 5000) };
    assert_eq!(n, 1, "connect did not finish");
}

#[test]
fn a_connection_flood_does_not_lock_clients_out() {
    raise_nofile();
    let cluster = Cluster::up(2, 1, &[]);
    let cfg = ClusterConfig::load(&cluster.cluster_file()).expect("cluster.toml");
    let meta = v4(&cfg.meta_addr);
    let mut targets = vec![(meta, META_FLOOD)];
    targets.extend(cfg.data.iter().map(|d| (v4(&d.addr), DATA_FLOOD)));
    let slots = targets.iter().map(|t| t.1 as u64).sum();
    let flood = Flood::start(targets);
    // Let the flood fill the servers first.
    flood.wait_full(slots, Duration::from_secs(30));
    let mut trick = tricklers(&meta, &cfg.secret);
    let ticker = std::thread::spawn(move || {
        let start = Instant::now();
        while trick.iter().any(|t| t.closed_after.is_none())
            && start.elapsed() < FRAME_DEADLINE_MAX + Duration::from_secs(5)
        {
            for t in trick.iter_mut() {
                t.tick();
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        trick
    });

    let data = random_bytes(3 << 20);
    let local = cluster.path().join("h-conn-flood.in");
    let back = cluster.path().join("h-conn-flood.out");
    std::fs::write(&local, &data).expect("write the local file");
    let start = Instant::now();
    cluster.ok(&["ls", "/"]);
    cluster.ok(&["put", local.to_str().unwrap(), "/flooded"]);
    cluster.ok(&["get", "/flooded", back.to_str().unwrap()]);
    let took = start.elapsed();
    let reopened = flood.counts.reopened.load(Ordering::Relaxed);
    println!("list, write and read back under the flood: {took:?}; flood reopened {reopened}");
    assert!(
        std::fs::read(&back).expect("read back") == data,
        "the file read back differs"
    );
    assert!(took < CLIENT_MAX, "{took:?}");
    assert!(reopened > 0, "the servers closed none of the flood");

    let trick = ticker.join().expect("trickle thread");
    let mut worst = Duration::ZERO;
    for (i, t) in trick.iter().enumerate() {
        let after = t
            .closed_after
            .unwrap_or_else(|| panic!("trickler {i} was never closed"));
        assert!(
            t.sent < t.frame.len(),
            "trickler {i} sent its whole frame of {} bytes",
            t.frame.len()
        );
        worst = worst.max(after);
    }
    println!("every trickler closed within {worst:?}");
    assert!(worst <= FRAME_DEADLINE_MAX, "{worst:?}");
    drop(flood);
}

/// The flood needs more descriptors than the usual soft limit of 1024.
fn raise_nofile() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit with a valid struct on the stack.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        r.rlim_cur = r.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
    }
    let need = (META_FLOOD + 4 * DATA_FLOOD + TRICKLERS + 256) as u64;
    assert!(
        r.rlim_cur >= need,
        "open file limit {} < {need}: raise the hard limit",
        r.rlim_cur
    );
}
