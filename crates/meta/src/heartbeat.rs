//! Which data servers are up, as the metadata server sees them. A thread pings every
//! data server each [`HEARTBEAT`] (in parallel, each ping bounded by [`PING_TIMEOUT`]);
//! a server that answered none for [`DOWN_AFTER`] is down until it answers again. New
//! files are not placed on a server that is down (`ops/placement.rs`), so that with one
//! server dead, files created afterwards are written on the others. The metadata
//! server logs each change (`cluster status` asks every server itself).
//!
//! Only the metadata server's view: clients find a dead server themselves (their own
//! request timeout), and nothing here moves or protects data already on it.

use crate::net::DataNet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use stripefs_wire::{Cred, Request, Response, Role};

/// How often each data server is pinged.
pub const HEARTBEAT: Duration = Duration::from_millis(500);
/// How long a ping may take before it counts as unanswered.
pub const PING_TIMEOUT: Duration = Duration::from_millis(1000);
/// How long a server answers no ping before it is down.
pub const DOWN_AFTER: Duration = Duration::from_secs(2);

/// Up or down, per data server id; all up at the start.
#[derive(Debug)]
pub struct Liveness {
    up: Vec<AtomicBool>,
}

impl Liveness {
    pub fn new(servers: usize) -> Liveness {
        Liveness {
            up: (0..servers).map(|_| AtomicBool::new(true)).collect(),
        }
    }

    /// Whether each server is up, by id.
    pub fn snapshot(&self) -> Vec<bool> {
        self.up.iter().map(|u| u.load(Ordering::Relaxed)).collect()
    }

    /// Records server `id` as up or down; logs a change.
    fn set(&self, id: u32, up: bool, why: &str) {
        if self.up[id as usize].swap(up, Ordering::Relaxed) != up {
            if up {
                tracing::info!("data server {id} is up again: new files may be placed on it");
            } else {
                tracing::warn!(
                    "data server {id} is down ({why}): new files are placed on the others"
                );
            }
        }
    }
}

/// Pings every server each [`HEARTBEAT`] until `stop` returns true (it waits, and
/// returns whether to stop: the lease sweeper's stop signal).
pub fn run(live: &Liveness, net: &dyn DataNet, mut wait_or_stop: impl FnMut(Duration) -> bool) {
    let n = live.up.len() as u32;
    let now = Instant::now();
    // When each server last answered.
    let mut answered: Vec<Instant> = vec![now; n as usize];
    loop {
        if wait_or_stop(HEARTBEAT) {
            return;
        }
        let answers: Vec<Result<(), String>> = std::thread::scope(|s| {
            let pings: Vec<_> = (0..n).map(|id| s.spawn(move || ping(net, id))).collect();
            pings
                .into_iter()
                .map(|p| p.join().unwrap_or_else(|_| Err("the ping panicked".into())))
                .collect()
        });
        for (id, answer) in answers.into_iter().enumerate() {
            let id = id as u32;
            match answer {
                Ok(()) => {
                    answered[id as usize] = Instant::now();
                    live.set(id, true, "");
                }
                Err(why) => {
                    let silent = answered[id as usize].elapsed();
                    if silent >= DOWN_AFTER {
                        let why = format!("no answer for {} ms: {why}", silent.as_millis());
                        live.set(id, false, &why);
                    }
                }
            }
        }
    }
}

fn ping(net: &dyn DataNet, id: u32) -> Result<(), String> {
    match net.call_many(id, &Cred::root(), vec![Request::Ping {}]) {
        Ok(mut answers) => match answers.pop() {
            Some(Ok(Response::Pong {
                role: Role::Data, ..
            })) => Ok(()),
            Some(Ok(other)) => Err(format!("answered {other:?}")),
            Some(Err(e)) => Err(e.to_string()),
            None => Err("no answer".into()),
        },
        Err(e) => Err(e.to_string()),
    }
}
