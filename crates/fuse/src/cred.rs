//! The credentials of the process behind a kernel request: uid and gid come with the
//! request; supplementary groups are read from /proc/PID/status and cached briefly, since
//! one process usually sends many requests in a row.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use stripefs_client::Cred;

/// How long the groups read for a process are reused.
const GROUPS_TTL: Duration = Duration::from_secs(1);
/// Processes remembered before the cache is cleared.
const MAX_CACHED_PIDS: usize = 4096;

#[derive(Default)]
pub struct CredCache {
    groups: Mutex<HashMap<u32, (Instant, Vec<u32>)>>,
}

impl CredCache {
    pub fn cred(&self, uid: u32, gid: u32, pid: u32) -> Cred {
        Cred {
            uid,
            gid,
            groups: self.groups_of(pid, gid),
        }
    }

    fn groups_of(&self, pid: u32, gid: u32) -> Vec<u32> {
        if pid == 0 {
            return Vec::new();
        }
        let now = Instant::now();
        {
            let map = self.groups.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((at, g)) = map.get(&pid) {
                if now.duration_since(*at) < GROUPS_TTL {
                    return g.clone();
                }
            }
        }
        // A process that is gone already has no groups to add; the uid and gid still count.
        let mut groups = read_groups(pid).unwrap_or_default();
        groups.retain(|&g| g != gid);
        let mut map = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_CACHED_PIDS {
            map.clear();
        }
        map.insert(pid, (now, groups.clone()));
        groups
    }
}

fn read_groups(pid: u32) -> Option<Vec<u32>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Groups:"))?;
    Some(
        line["Groups:".len()..]
            .split_whitespace()
            .filter_map(|g| g.parse().ok())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_groups_are_read() {
        let me = std::process::id();
        assert!(read_groups(me).is_some());
        let c = CredCache::default();
        let cred = c.cred(5, 6, me);
        assert_eq!((cred.uid, cred.gid), (5, 6));
        assert!(!cred.groups.contains(&6));
        assert!(c.cred(5, 6, 0).groups.is_empty());
    }
}
