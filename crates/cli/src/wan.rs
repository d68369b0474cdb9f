//! `stripefs wan-emu`: a user-space TCP relay that emulates a wide-area link between its
//! clients and one server (the kernel's netem is not available everywhere; this runs on
//! any machine, for any TCP program).
//!
//! Each direction of each relayed connection is one reader and one writer thread. The
//! reader takes bytes from its socket only while the connection's bytes in flight in that
//! direction stay within `--window` (an untuned TCP window: a byte is in flight from when
//! it is read until one round trip later, when its acknowledgement would be back), so one
//! connection moves at most window / RTT. The writer hands each chunk on half a round trip
//! after it was read, and only when the link has room: all connections share one rate
//! limit per direction (`--rate`, the bottleneck link), a virtual-time token bucket.

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use stripefs_rpc::units::{format_size, parse_size};
pub use stripefs_rpc::units::{parse_duration, parse_link_rate};

/// Largest chunk a reader takes at once.
const CHUNK_BYTES: u64 = 64 << 10;

#[derive(Args, Debug, Clone)]
pub struct WanArgs {
    /// Address to accept connections on (host:port).
    #[arg(long)]
    pub listen: String,
    /// Address of the server each connection is relayed to (host:port).
    #[arg(long)]
    pub connect: String,
    /// Round-trip time added (each direction gets half): 50ms, 0.1s, 200us, 0.
    #[arg(long, value_parser = parse_duration)]
    pub rtt: Duration,
    /// The link's rate per direction, shared by all connections: bits (200Mbit, 1Gbit)
    /// or bytes (25MiB) per second.
    #[arg(long, value_parser = parse_link_rate)]
    pub rate: u64,
    /// Most bytes in flight per connection and direction (an untuned TCP window).
    #[arg(long, default_value = "256K", value_parser = parse_size)]
    pub window: u64,
    /// More relays through the same link, LISTEN=CONNECT (repeatable): every server of
    /// a cluster behind one bottleneck (`cluster up --wan` uses it).
    #[arg(long, value_parser = parse_route)]
    pub route: Vec<(String, String)>,
    /// A label that names this relay's process (`cluster up --wan` gives its client
    /// file, to find the process again).
    #[arg(long, hide = true)]
    pub tag: Option<String>,
}

fn parse_route(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((l, c)) if !l.is_empty() && !c.is_empty() => Ok((l.into(), c.into())),
        _ => Err(format!("route {text:?} is not LISTEN=CONNECT")),
    }
}

/// One direction of the link, shared by all connections: a virtual-time token bucket
/// (the time at which the link is next free).
struct Link {
    rate: u64,
    next_free: Mutex<Instant>,
}

impl Link {
    /// Waits until `n` more bytes have passed the link.
    fn pass(&self, n: u64) {
        let now = Instant::now();
        let at = {
            let mut free = self.next_free.lock().unwrap_or_else(|p| p.into_inner());
            let start = (*free).max(now);
            *free = start + Duration::from_secs_f64(n as f64 / self.rate as f64);
            start
        };
        if at > now {
            thread::sleep(at - now);
        }
    }
}

/// Runs the relay until the process is stopped.
pub fn run(a: WanArgs) -> Result<()> {
    if a.window == 0 {
        bail!("--window must be above zero");
    }
    let mut routes = vec![(a.listen.clone(), a.connect.clone())];
    routes.extend(a.route.iter().cloned());
    let mut listeners = Vec::with_capacity(routes.len());
    for (l, c) in &routes {
        let listener = TcpListener::bind(l).with_context(|| format!("cannot listen on {l}"))?;
        listeners.push((listener, c.clone()));
    }
    let links = Arc::new([new_link(a.rate), new_link(a.rate)]);
    let shown: Vec<String> = listeners
        .iter()
        .map(|(l, c)| {
            format!(
                "{} -> {c}",
                l.local_addr().map(|a| a.to_string()).unwrap_or_default()
            )
        })
        .collect();
    eprintln!(
        "wan-emu: {}, RTT {:?}, {}/s per direction shared, window {} per connection (one connection at most {}/s)",
        shown.join(", "),
        a.rtt,
        format_size(a.rate),
        format_size(a.window),
        if a.rtt.is_zero() {
            "unlimited".to_string()
        } else {
            format_size((a.window as f64 / a.rtt.as_secs_f64()) as u64)
        }
    );
    let accepters: Vec<_> = listeners
        .into_iter()
        .map(|(listener, connect)| {
            let (a, links) = (a.clone(), links.clone());
            thread::spawn(move || accept_loop(listener, &connect, &a, &links))
        })
        .collect();
    for t in accepters {
        t.join().map_err(|_| anyhow!("an accept thread panicked"))?;
    }
    Ok(())
}

fn accept_loop(listener: TcpListener, connect: &str, a: &WanArgs, links: &Arc<[Link; 2]>) {
    for conn in listener.incoming() {
        let client = match conn {
            Ok(c) => c,
            Err(e) => {
                eprintln!("wan-emu: accept failed: {e}");
                thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let (a, links, connect) = (a.clone(), links.clone(), connect.to_string());
        thread::spawn(move || {
            if let Err(e) = relay(client, &connect, &a, &links) {
                eprintln!("wan-emu: connection ended: {e:#}");
            }
        });
    }
}

fn new_link(rate: u64) -> Link {
    Link {
        rate,
        next_free: Mutex::new(Instant::now()),
    }
}

/// Relays one client connection to the server, both directions, until both end.
fn relay(client: TcpStream, connect: &str, a: &WanArgs, links: &Arc<[Link; 2]>) -> Result<()> {
    let server =
        TcpStream::connect(connect).with_context(|| format!("cannot connect to {connect}"))?;
    for s in [&client, &server] {
        let _ = s.set_nodelay(true);
    }
    let up = direction(
        client.try_clone()?,
        server.try_clone()?,
        a,
        links.clone(),
        0,
    );
    let down = direction(server, client, a, links.clone(), 1);
    for h in up.into_iter().chain(down) {
        h.join().map_err(|_| anyhow!("a relay thread panicked"))?;
    }
    Ok(())
}

/// Starts the reader and writer threads of one direction, `from` to `to`.
fn direction(
    mut from: TcpStream,
    mut to: TcpStream,
    a: &WanArgs,
    links: Arc<[Link; 2]>,
    which: usize,
) -> Vec<thread::JoinHandle<()>> {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let (rtt, window) = (a.rtt, a.window);
    let reader = thread::spawn(move || {
        // (when the acknowledgement is back, bytes) of what is in flight.
        let mut flight: VecDeque<(Instant, u64)> = VecDeque::new();
        let mut in_flight = 0u64;
        loop {
            let now = Instant::now();
            while flight.front().is_some_and(|(t, _)| *t <= now) {
                in_flight -= flight.pop_front().expect("checked").1;
            }
            if in_flight >= window {
                let (t, _) = *flight.front().expect("bytes in flight");
                thread::sleep(t.saturating_duration_since(now));
                continue;
            }
            let room = (window - in_flight).min(CHUNK_BYTES) as usize;
            let mut buf = vec![0u8; room];
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            buf.truncate(n);
            let read_at = Instant::now();
            in_flight += n as u64;
            flight.push_back((read_at + rtt, n as u64));
            if tx.send((read_at + rtt / 2, buf)).is_err() {
                break;
            }
        }
        // End of stream (or error): the writer passes it on once the bytes are out.
        drop(tx);
    });
    let writer = thread::spawn(move || {
        for (due, chunk) in rx {
            let now = Instant::now();
            if due > now {
                thread::sleep(due - now);
            }
            links[which].pass(chunk.len() as u64);
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
    vec![reader, writer]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_link_spaces_bytes_at_its_rate() {
        let link = new_link(1 << 20);
        let start = Instant::now();
        for _ in 0..4 {
            link.pass(64 << 10);
        }
        // 256 KiB at 1 MiB/s: the fourth chunk starts after 3 x 62.5 ms.
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(180), "{took:?}");
        assert!(took < Duration::from_millis(400), "{took:?}");
    }
}
