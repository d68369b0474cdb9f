//! Short-circuit reads (issue 14; docs/objects.md "Reads", docs/protocol.md
//! "Short-circuit socket"): a client on the same host as a data server asks the server's
//! Unix socket for read-only descriptors of an object's files and reads them with
//! `pread`, verifying every block against the checksum the writing client computed and
//! the server stored. The server's CPU and memory are not in that data path.
//!
//! Anything unexpected sends the read through the server instead (the caller falls back
//! when [`ShortCircuit::read`] says no): a checksum mismatch (a block being rewritten
//! under the server's lock, or real damage, which the server then reports), an object
//! missing on a target, a socket error. A server that refuses short-circuit reads for
//! good (throttled targets) is not asked again.

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use stripefs_layout::Stripe;
use stripefs_rpc::local::{self, ObjectFiles, Opened, Seqpacket};
use stripefs_rpc::Secret;
use stripefs_wire::sidecar::{decode_entry, ENTRY_BYTES};
use stripefs_wire::{padded_block_crc, BLOCK_BYTES};

/// Objects whose descriptors a client keeps per server.
const MAX_CACHED_OBJECTS: usize = 256;
const BLOCK: u64 = BLOCK_BYTES as u64;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One data server's short-circuit path, as seen by one client.
pub(crate) struct ShortCircuit {
    socket: PathBuf,
    secret: Secret,
    timeout: Duration,
    conn: Mutex<Option<Seqpacket>>,
    /// Descriptors of objects that exist on every target, by file id.
    cache: Mutex<HashMap<u64, Arc<ObjectFiles>>>,
    /// The client wants short-circuit reads (`Client::set_short_circuit`).
    pub enabled: AtomicBool,
    /// The server refused them for good.
    refused: AtomicBool,
    /// Bytes read directly.
    pub bytes: AtomicU64,
    /// Reads that went through the server after all.
    pub fallbacks: AtomicU64,
}

impl ShortCircuit {
    pub fn new(socket: PathBuf, secret: Secret, timeout: Duration, enabled: bool) -> ShortCircuit {
        ShortCircuit {
            socket,
            secret,
            timeout,
            conn: Mutex::new(None),
            cache: Mutex::new(HashMap::new()),
            enabled: AtomicBool::new(enabled),
            refused: AtomicBool::new(false),
            bytes: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
        }
    }

    /// Whether a read should try this path.
    pub fn usable(&self) -> bool {
        self.enabled.load(Ordering::Relaxed) && !self.refused.load(Ordering::Relaxed)
    }

    /// Asks the server for `fid`'s descriptors (one reconnect on a broken connection).
    fn open(&self, fid: u64) -> Option<Arc<ObjectFiles>> {
        if let Some(f) = lock(&self.cache).get(&fid) {
            return Some(f.clone());
        }
        let mut conn = lock(&self.conn);
        for _ in 0..2 {
            if conn.is_none() {
                let c = Seqpacket::connect(&self.socket, self.timeout)
                    .and_then(|c| local::client_handshake(&c, &self.secret).map(|()| c));
                match c {
                    Ok(c) => *conn = Some(c),
                    Err(e) => {
                        tracing::debug!("short-circuit socket {}: {e}", self.socket.display());
                        return None;
                    }
                }
            }
            let c = conn.as_ref().expect("connected above");
            let answer = c
                .send(&local::open_request(fid), &[])
                .and_then(|()| c.recv())
                .and_then(|(m, fds)| local::parse_objects(&m, fds));
            match answer {
                Ok(Opened::Files(files)) => {
                    let complete = files.iter().all(|(d, s)| d.is_some() && s.is_some());
                    let files = Arc::new(files);
                    if complete {
                        let mut cache = lock(&self.cache);
                        if cache.len() >= MAX_CACHED_OBJECTS {
                            cache.clear();
                        }
                        cache.insert(fid, files.clone());
                    }
                    return Some(files);
                }
                Ok(Opened::Refused(why)) => {
                    tracing::info!(
                        "short-circuit reads refused by {}: {why}; reading through the server",
                        self.socket.display()
                    );
                    self.refused.store(true, Ordering::Relaxed);
                    return None;
                }
                Ok(Opened::Failed(why)) => {
                    tracing::debug!("short-circuit open of {fid:#x}: {why}");
                    return None;
                }
                Err(e) => {
                    tracing::debug!("short-circuit socket {}: {e}", self.socket.display());
                    *conn = None;
                }
            }
        }
        None
    }

    /// Reads `buf.len()` bytes of `fid`'s object at local offset `local` (both block
    /// aligned; the object striped over the server's targets with `unit`) directly from
    /// the server's files, holes as zeros, every written block verified. `false` when
    /// the caller must read through the server instead (`buf` is then zeroed again).
    pub fn read(&self, fid: u64, unit: u32, local: u64, buf: &mut [u8]) -> bool {
        let ok = self.try_read(fid, unit, local, buf);
        if ok {
            self.bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        } else {
            buf.fill(0);
            self.fallbacks.fetch_add(1, Ordering::Relaxed);
            // The cached descriptors may be the cause (never, by the rules, but a
            // fresh answer costs one round trip).
            lock(&self.cache).remove(&fid);
        }
        ok
    }

    fn try_read(&self, fid: u64, unit: u32, local: u64, buf: &mut [u8]) -> bool {
        if local % BLOCK != 0 || buf.len() as u64 % BLOCK != 0 || unit as u64 % BLOCK != 0 {
            return false;
        }
        let Some(files) = self.open(fid) else {
            return false;
        };
        let Ok(stripe) = Stripe::new(unit as u64, files.len() as u32) else {
            return false;
        };
        for p in stripe.split(local, buf.len() as u64) {
            let at = (p.global - local) as usize;
            let out = &mut buf[at..at + p.len as usize];
            let (data, sidecar) = &files[p.place as usize];
            if !read_target(data.as_ref(), sidecar.as_ref(), p.local, out) {
                return false;
            }
        }
        true
    }
}

/// Reads and verifies `out.len()` bytes at target offset `off` (block aligned).
fn read_target(
    data: Option<&std::fs::File>,
    sidecar: Option<&std::fs::File>,
    off: u64,
    out: &mut [u8],
) -> bool {
    let blocks = out.len() / BLOCK as usize;
    let mut entries = vec![0u8; blocks * ENTRY_BYTES as usize];
    // Checksums first, then data, as the server reads: a block rewritten in between
    // shows as a mismatch, never as wrong bytes passed on.
    if let Some(s) = sidecar {
        if read_full(s, &mut entries, off / BLOCK * ENTRY_BYTES).is_err() {
            return false;
        }
    }
    match data {
        Some(d) => {
            if read_full(d, out, off).is_err() {
                return false;
            }
        }
        None => out.fill(0),
    }
    for (block, entry) in out
        .chunks_mut(BLOCK as usize)
        .zip(entries.chunks(ENTRY_BYTES as usize))
    {
        match decode_entry(entry) {
            None => block.fill(0),
            Some(crc) => {
                if padded_block_crc(block) != crc {
                    return false;
                }
            }
        }
    }
    true
}

/// Fills `buf` from `f` at `off`; bytes past the file's end are zeros.
fn read_full(f: &std::fs::File, buf: &mut [u8], off: u64) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], off + done as u64) {
            Ok(0) => {
                buf[done..].fill(0);
                return Ok(());
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
