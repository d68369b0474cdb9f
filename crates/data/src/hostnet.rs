//! An emulated host network interface (`cluster up --host-net RATE`, `host_net` in a
//! data server's config; issue 14).
//!
//! Bytes this server receives from (Write data) or sends to (Read data) a client on
//! another host wait on one token bucket per direction ([`Throttle`], as for the disks);
//! bytes of clients on the server's own host pass free. A client's host is what it
//! announced on the connection (`ClientHost`); a connection that announced none counts
//! as another host's.
//!
//! Several data servers of one emulated host are separate processes, so they do not
//! share a bucket: each gets an equal share of the host's rate (`cluster up` writes
//! RATE/n into each of the host's n server configs). The host never exceeds RATE; when
//! only some of its servers are busy it gets less (k busy servers of n: k/n of RATE).
//! With one data server per host, as in `--servers K --hosts K`, the emulation is exact.

use crate::service::DataService;
use crate::throttle::Throttle;
use stripefs_rpc::{ConnInfo, Reply};

/// One host link's two directions, as seen by one data server.
pub struct HostNet {
    host: String,
    /// To clients on other hosts (Read data).
    send: Throttle,
    /// From clients on other hosts (Write data).
    recv: Throttle,
}

impl HostNet {
    pub fn new(
        host: String,
        rate_bytes_s: u64,
        clock: std::sync::Arc<dyn crate::Clock>,
    ) -> HostNet {
        HostNet {
            host,
            send: Throttle::new(rate_bytes_s, clock.clone()),
            recv: Throttle::new(rate_bytes_s, clock),
        }
    }

    /// Whether bytes of a client on `peer` cross this host's link.
    pub fn crosses(&self, peer: Option<&str>) -> bool {
        peer != Some(self.host.as_str())
    }

    /// Waits until `received` request bytes and `sent` answer bytes of a client on
    /// `peer` have passed the link (at once for a client on this host).
    pub fn charge(&self, peer: Option<&str>, received: u64, sent: u64) {
        if !self.crosses(peer) {
            return;
        }
        let mut until = None;
        if received > 0 {
            until = Some(self.recv.reserve(received));
        }
        if sent > 0 {
            let end = self.send.reserve(sent);
            until = Some(until.map_or(end, |u: std::time::Duration| u.max(end)));
        }
        if let Some(u) = until {
            self.send.wait(u);
        }
    }

    pub fn rate_bytes_s(&self) -> u64 {
        self.send.rate_bytes_s()
    }
}

impl DataService {
    /// Emulates this server's share of its host's network interface from now on.
    /// Refused if already set.
    pub fn set_host_net(&self, host: String, rate_bytes_s: u64) -> Result<(), String> {
        if rate_bytes_s == 0 {
            return Err("a host network rate must be above zero".into());
        }
        let net = HostNet::new(host, rate_bytes_s, self.clock.clone());
        self.host_net
            .set(net)
            .map_err(|_| "the host network is already set".to_string())
    }

    /// The hook of `handle`: charges a request's data and its answer's to the host link.
    pub(crate) fn charge_host_net(&self, conn: &ConnInfo, received: usize, reply: &Reply) {
        let Some(net) = self.host_net.get() else {
            return;
        };
        // A zero-copy answer holds its blocks' shared range lock while it waits here, so
        // writers of those blocks wait for the emulated link too (as they would behind a
        // slow real link, which the send itself waits for).
        let sent = reply.data.len();
        net.charge(conn.host.as_deref(), received as u64, sent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Clock, VirtualClock};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn only_cross_host_bytes_wait() {
        let clock = Arc::new(VirtualClock::new());
        let net = HostNet::new("host0".into(), 1 << 20, clock.clone());
        let t0 = clock.monotonic();
        // Same host: free, however many bytes.
        net.charge(Some("host0"), 64 << 20, 64 << 20);
        assert_eq!(clock.monotonic(), t0);
        // Another host: 4 MiB each way at 1 MiB/s per direction; the directions run at
        // once.
        net.charge(Some("host1"), 4 << 20, 4 << 20);
        assert_eq!(clock.monotonic() - t0, Duration::from_secs(4));
        // No host announced counts as another host; the bucket is shared by all of them.
        net.charge(None, 2 << 20, 0);
        assert_eq!(clock.monotonic() - t0, Duration::from_secs(6));
    }
}
