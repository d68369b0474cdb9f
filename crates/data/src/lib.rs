//! The stripefs data server: it stores this server's share of each file (a contiguous
//! *local* byte space per file, see stripefs-layout) striped RAID-0 style over its
//! storage targets, in units of the file's stripe size. Each target keeps one object file
//! per file (created on first write) and a checksum sidecar with a CRC32C per 4096-byte
//! block, recorded at write time and returned with every read, so that integrity is
//! end-to-end and the server never needs to look at the bytes it sends.
//!
//! Invariants: a written block's stored CRC matches its bytes whenever no range lock
//! covers it (data and CRC change under one block-range lock); a hole reads as zeros
//! with the CRC of a zero block; the stripe mapping is the pure one of stripefs-layout.
//!
//! Fault model: request data is verified against the client's CRCs before anything is
//! written (corruption in transit is refused); a partial-block write verifies the block
//! it merges into, so corruption on disk is never blessed with a fresh CRC; torn writes
//! after a crash show up as checksum mismatches or as old holes, never as silently wrong
//! bytes. A disk error fails only the request that met it, with a numbered code
//! (Io, NoSpace, Checksum) and a message naming server, file and target. Optional
//! per-target throttles emulate slow commodity disks. Storage and time are traits, with
//! in-memory and virtual implementations for tests.

mod cache;
mod hostnet;
mod intent;
mod local;
mod locks;
mod object;
mod pieces;
mod service;
mod throttle;
pub mod tokens;
mod zeros;

#[cfg(test)]
mod tests;

pub use cache::MAX_OPEN_OBJECTS;
pub use hostnet::HostNet;
pub use local::{After, Handles, LocalServer, LocalSession, MAX_LOCAL_CONNECTIONS};
pub use locks::LOCK_STRIPES;
pub use service::{DataService, Options, DEFAULT_SCRUB_RATE_BYTES_S};
pub use stripefs_sys::clock::{Clock, SystemClock, VirtualClock};
pub use stripefs_sys::memstore::{MemStore, SECTOR_BYTES};
pub use stripefs_sys::storage::{FsStore, ObjectFile, Storage, Usage};
pub use throttle::{Throttle, THROTTLE_BURST_BYTES};

/// A known-broken rule the data server can be told to follow instead of its own, so that
/// a checker (the whole-cluster simulator, the crash tests) proves it can fail. Only
/// reachable through [`Options::canary`]: no config file or command-line flag sets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Canary {
    /// Fsync answers without syncing anything.
    FsyncBeforeDurable,
    /// A new object's directory is never synced.
    SkipDirSync,
    /// A write stores its checksums before its data, and a failure part-way is not
    /// repaired.
    ChecksumBeforeData,
    /// A same-host pipe write stores the client's checksums without checking the bytes
    /// that came through the pipe.
    PipeUnchecked,
}

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use stripefs_wire::{Role, ServerId};

/// Binds `cfg.listen_addr(Role::Data)`, opens `cfg.targets` with `cfg.throttle_bytes_s`
/// and serves until `shutdown` is set.
pub fn run(cfg: &stripefs_rpc::ServerConfig, shutdown: Arc<AtomicBool>) -> Result<(), String> {
    let id = cfg.data_id()?;
    let addr = cfg.listen_addr(Role::Data)?;
    let service = DataService::open_with(
        ServerId(id),
        &cfg.targets,
        Options {
            throttle_bytes_s: cfg.throttle_bytes_s,
            no_zero_copy: !cfg.zero_copy,
            ..Options::default()
        },
    )?;
    let host = cfg.host_id(Role::Data)?;
    service.set_host(host.clone());
    service.set_token_checker(tokens::TokenChecker::new(
        cfg.cluster.clone(),
        service.clock.clone(),
    ));
    if let Some(rate) = cfg.host_net_bytes_s {
        service.set_host_net(host.clone(), rate)?;
    }
    raise_open_file_limit();
    let scrub_rate = cfg.scrub_rate_bytes_s.unwrap_or(DEFAULT_SCRUB_RATE_BYTES_S);
    let listener = std::net::TcpListener::bind(&addr)
        .map_err(|e| format!("data server {id}: cannot listen on {addr}: {e}"))?;
    let targets: Vec<String> = cfg
        .targets
        .iter()
        .map(|t| t.display().to_string())
        .collect();
    tracing::info!(
        "data server {id} on host {host} listening on {addr}, targets {targets:?}, throttle \
         {:?} bytes/s per target, host network {:?} bytes/s per direction, scrub \
         {scrub_rate} bytes/s, zero-copy reads {}, boot id {:016x}",
        cfg.throttle_bytes_s,
        cfg.host_net_bytes_s,
        if cfg.zero_copy { "on" } else { "off" },
        service.boot_id()
    );
    let scrubber = service.start_scrubber(scrub_rate, shutdown.clone());
    // The short-circuit socket of the cluster file's entry, for clients on this host.
    let _local = match &cfg.cluster.data[id as usize].local_socket {
        Some(path) => Some(
            LocalServer::start(service.clone(), path, cfg.cluster.secret.clone()).map_err(|e| {
                format!(
                    "data server {id}: cannot serve the short-circuit socket {}: {e}",
                    path.display()
                )
            })?,
        ),
        None => None,
    };
    if let Some(p) = &cfg.cluster.data[id as usize].local_socket {
        tracing::info!("data server {id}: short-circuit socket {}", p.display());
    }
    let tls = cfg
        .cluster
        .tls
        .server()
        .map_err(|e| format!("data server {id}: {e}"))?;
    let served = stripefs_rpc::serve_tls(
        listener,
        cfg.cluster.secret.clone(),
        service,
        shutdown.clone(),
        stripefs_rpc::Limits::default(),
        Default::default(),
        tls,
    )
    .map_err(|e| format!("data server {id} on {addr}: {e}"));
    shutdown.store(true, std::sync::atomic::Ordering::SeqCst);
    if let Some(h) = scrubber {
        let _ = h.join();
    }
    served
}

/// Raises the soft limit on open files to the hard limit: the server keeps up to
/// 2 * MAX_OPEN_OBJECTS object descriptors plus one per connection.
fn raise_open_file_limit() {
    // SAFETY: getrlimit/setrlimit only read and write the struct passed to them.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                tracing::warn!(
                    "cannot raise the open file limit: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
    }
}
