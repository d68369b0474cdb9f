//! The mount's control socket (protocol: `stripefs_client::mountctl`): a program that
//! changed names or inodes with the native client (the interception library) tells the
//! daemon, which has the kernel drop its cached entries and attributes of them before
//! answering, so that every process using the mount sees the change at once.
//!
//! Anyone may connect: a message only drops caches. Each connection has a thread;
//! past [`MAX_CONNECTIONS`] a new one is closed at once, and its program keeps those
//! changes on the mount's own path.

use crate::fs::Shared;
use std::io::{Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use stripefs_client::mountctl::{self, Changed};

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 1024;

/// Starts listening for the mount at `mountpoint`, once the kernel answers a stat of it
/// (its device number names the socket). Runs on its own thread, and ends with the
/// process.
pub fn start(shared: Arc<Shared>, mountpoint: std::path::PathBuf) {
    let spawned = std::thread::Builder::new()
        .name("fuse-control".into())
        .spawn(move || {
            // The kernel asks this daemon's workers, which serve by now.
            let dev = match std::fs::metadata(&mountpoint) {
                Ok(m) => std::os::unix::fs::MetadataExt::dev(&m),
                Err(e) => {
                    tracing::warn!("control socket: stat {}: {e}", mountpoint.display());
                    return;
                }
            };
            let dev = (libc::major(dev), libc::minor(dev));
            let name = mountctl::socket_name(dev);
            let listener = match SocketAddr::from_abstract_name(name.as_bytes())
                .and_then(|a| UnixListener::bind_addr(&a))
            {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(
                        "control socket @{name}: {e}; programs using the interception \
                         library change names on this mount through the mount"
                    );
                    return;
                }
            };
            tracing::info!("control socket @{name}");
            let live = Arc::new(AtomicUsize::new(0));
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                if live.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
                    live.fetch_sub(1, Ordering::AcqRel);
                    continue;
                }
                let (sh, live) = (shared.clone(), live.clone());
                let started = std::thread::Builder::new()
                    .name("fuse-control-conn".into())
                    .spawn(move || {
                        serve(&sh, conn);
                        live.fetch_sub(1, Ordering::AcqRel);
                    });
                if started.is_err() {
                    tracing::warn!("control socket: cannot start a thread");
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("control socket: cannot start its thread: {e}");
    }
}

/// Serves one connection until it closes or sends what does not decode.
fn serve(shared: &Shared, mut conn: UnixStream) {
    loop {
        let mut prefix = [0u8; 4];
        if conn.read_exact(&mut prefix).is_err() {
            return;
        }
        let body = match mountctl::message_len(prefix) {
            Ok(n) => {
                let mut b = vec![0u8; n];
                if conn.read_exact(&mut b).is_err() {
                    return;
                }
                b
            }
            Err(e) => {
                tracing::warn!("control socket: {e}; connection closed");
                return;
            }
        };
        let hello = match mountctl::decode(&body) {
            Ok(changes) => {
                for c in &changes {
                    apply(shared, c);
                }
                changes.contains(&Changed::Hello)
            }
            Err(e) => {
                tracing::warn!("control socket: {e}; connection closed");
                return;
            }
        };
        let mut answer = vec![mountctl::DONE];
        if hello {
            answer.push(if shared.writeback_cache() {
                mountctl::FEATURE_WRITEBACK_CACHE
            } else {
                0
            });
        }
        if conn.write_all(&answer).is_err() {
            return;
        }
    }
}

fn apply(shared: &Shared, c: &Changed) {
    match c {
        Changed::Entry { parent, name } => {
            shared.changed_elsewhere(*parent, Some(name));
        }
        Changed::Inode { ino } => shared.changed_elsewhere(*ino, None),
        Changed::Hello => {}
    }
}
