//! Which data servers a new file's stripes go to (pure; `create::place` applies it).
//!
//! The placement fields of a hint (`servers`, `start_server`, `policy`) are taken as a
//! group: the file's own hint if it sets any of them, else the directory default's, else
//! none (spread). So a file's `--start` or `--layout spread` overrides a directory's
//! `--layout local` or server list whole, never field by field. The stripe count is
//! inherited field by field as before (hint, directory, cluster), except that a server
//! list fixes it to the list's length and the local policy defaults it to 1.
//!
//! Policies:
//! - explicit list: exactly these servers in this order.
//! - spread (default): `count` consecutive servers from `start_server`, or from a start
//!   that rotates per file.
//! - local: the data servers on the creating client's host first (rotating among them
//!   per file), then the others in id order after the last local one, `count` in all
//!   (default 1: the file lives on one server of the client's host). If the client sent
//!   no host, or its host has no data server up, the file is placed spread and a note says
//!   why (the metadata server logs it).
//!
//! Servers the metadata server found down (`Cluster::up`, from its heartbeats) get no
//! new files: spread and local placement skip them, and a stripe count larger than the
//! servers up is cut to those up, with a note (a file is never placed on a server known
//! to be dead, where its first write would fail). An explicit server list is kept as
//! given. With every server down, nothing is known to be better: placement is as if
//! all were up.

use stripefs_wire::{ErrorCode, LayoutHint, Policy, WireError};

/// What the cluster looks like to placement.
pub struct Cluster<'a> {
    /// The host of each data server (`[[data]] host` in cluster.toml), by id.
    pub hosts: &'a [Option<String>],
    /// The cluster's default stripe count (0 = all).
    pub default_count: u32,
    /// Whether each data server is up, by id; empty: all are.
    pub up: &'a [bool],
}

impl Cluster<'_> {
    fn is_up(&self, id: u32) -> bool {
        self.up.get(id as usize).copied().unwrap_or(true)
    }
}

/// The chosen servers, and a note when they differ from what was asked (the local
/// policy fell back to spread, or the count was cut to the servers up).
#[derive(Debug, PartialEq, Eq)]
pub struct Chosen {
    pub servers: Vec<u32>,
    pub note: Option<String>,
}

fn invalid(why: String) -> WireError {
    WireError::new(ErrorCode::InvalidArgument, why)
}

fn sets_placement(h: &LayoutHint) -> bool {
    h.servers.is_some() || h.start_server.is_some() || h.policy.is_some()
}

/// Checks a hint's server ids and stripe count against a cluster of `n` data servers.
pub fn check_hint(hint: &LayoutHint, n: u32) -> Result<(), WireError> {
    if let Some(c) = hint.stripe_count {
        if c > n {
            return Err(invalid(format!(
                "stripe count {c} exceeds the number of data servers ({n})"
            )));
        }
    }
    if let Some(s) = hint.start_server {
        if s >= n {
            return Err(invalid(format!(
                "start server {s} does not exist: the cluster has {n} data servers"
            )));
        }
    }
    if let Some(list) = &hint.servers {
        if let Some(s) = list.iter().find(|&&s| s >= n) {
            return Err(invalid(format!(
                "data server {s} does not exist: the cluster has {n} data servers (ids 0 to {})",
                n.saturating_sub(1)
            )));
        }
    }
    Ok(())
}

/// Chooses the servers of a new file from its `hint` and the directory default `inherit`;
/// `client_host` is the creating client's host, `rotate(k)` returns the next value of the
/// per-file rotation modulo `k` (and advances it).
pub fn choose(
    c: &Cluster,
    hint: &LayoutHint,
    inherit: &LayoutHint,
    client_host: Option<&str>,
    rotate: &mut dyn FnMut(u32) -> Result<u32, WireError>,
) -> Result<Chosen, WireError> {
    let n = c.hosts.len() as u32;
    check_hint(hint, n)?;
    check_hint(inherit, n)?;
    let group = if sets_placement(hint) { hint } else { inherit };
    if let Some(list) = &group.servers {
        return Ok(Chosen {
            servers: list.clone(),
            note: None,
        });
    }
    let local = group.policy == Some(Policy::Local);
    let count = hint
        .stripe_count
        .or(inherit.stripe_count)
        .unwrap_or(if local { 1 } else { c.default_count });
    let count = if count == 0 { n } else { count };
    if count > n {
        return Err(invalid(format!(
            "stripe count {count} exceeds the number of data servers ({n})"
        )));
    }
    let mut notes = Vec::new();
    let up = (0..n).filter(|&i| c.is_up(i)).count() as u32;
    let usable = |i: u32| up == 0 || c.is_up(i);
    let count = if up > 0 && count > up {
        notes.push(format!(
            "stripe count {count} cut to {up}: {} of {n} data servers are down",
            n - up
        ));
        up
    } else {
        count
    };
    if local {
        let mine: Vec<u32> = match client_host {
            Some(h) => (0..n)
                .filter(|&i| c.hosts[i as usize].as_deref() == Some(h) && usable(i))
                .collect(),
            None => vec![],
        };
        if !mine.is_empty() {
            let k = rotate(mine.len() as u32)? as usize;
            let mut order: Vec<u32> = mine[k..].iter().chain(&mine[..k]).copied().collect();
            let after = *order.last().expect("not empty");
            order.extend(
                (1..=n)
                    .map(|d| (after + d) % n)
                    .filter(|&s| !mine.contains(&s) && usable(s)),
            );
            order.truncate(count as usize);
            return Ok(Chosen {
                servers: order,
                note: join(notes),
            });
        }
        notes.push(match client_host {
            Some(h) if c.hosts.iter().any(|x| x.as_deref() == Some(h)) => {
                format!("local layout: client host {h:?} has no data server up; placed spread")
            }
            Some(h) => format!("local layout: client host {h:?} has no data server; placed spread"),
            None => "local layout: the client did not say its host; placed spread".into(),
        });
    }
    let start = match group.start_server {
        Some(s) => s,
        None => rotate(n)?,
    };
    // `count` servers up, in ring order from the start.
    let servers: Vec<u32> = (0..n)
        .map(|i| (start + i) % n)
        .filter(|&s| usable(s))
        .take(count as usize)
        .collect();
    assert_eq!(
        servers.len(),
        count as usize,
        "count is at most the servers up"
    );
    Ok(Chosen {
        servers,
        note: join(notes),
    })
}

fn join(notes: Vec<String>) -> Option<String> {
    (!notes.is_empty()).then(|| notes.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(v: &[&str]) -> Vec<Option<String>> {
        v.iter().map(|h| Some(h.to_string())).collect()
    }

    fn run(
        hosts: &[Option<String>],
        default_count: u32,
        hint: LayoutHint,
        inherit: LayoutHint,
        client: Option<&str>,
        next: u32,
    ) -> Result<Chosen, WireError> {
        run_up(hosts, &[], default_count, hint, inherit, client, next)
    }

    fn run_up(
        hosts: &[Option<String>],
        up: &[bool],
        default_count: u32,
        hint: LayoutHint,
        inherit: LayoutHint,
        client: Option<&str>,
        next: u32,
    ) -> Result<Chosen, WireError> {
        let c = Cluster {
            hosts,
            default_count,
            up,
        };
        let mut calls = 0;
        let r = choose(&c, &hint, &inherit, client, &mut |k| {
            calls += 1;
            Ok(next % k)
        });
        assert!(calls <= 1, "rotation advanced {calls} times");
        r
    }

    fn local() -> LayoutHint {
        LayoutHint {
            policy: Some(Policy::Local),
            ..LayoutHint::default()
        }
    }

    #[test]
    fn explicit_order_is_kept() {
        let h = hosts(&["a", "b", "c", "d"]);
        let hint = LayoutHint {
            servers: Some(vec![3, 1, 2]),
            ..LayoutHint::default()
        };
        let r = run(&h, 0, hint.clone(), LayoutHint::default(), None, 5).unwrap();
        assert_eq!(r.servers, vec![3, 1, 2]);
        // Inherited from the directory too, and a file's own list wins over it.
        let r = run(&h, 0, LayoutHint::default(), hint.clone(), None, 5).unwrap();
        assert_eq!(r.servers, vec![3, 1, 2]);
        let own = LayoutHint {
            servers: Some(vec![0]),
            ..LayoutHint::default()
        };
        assert_eq!(run(&h, 0, own, hint, None, 0).unwrap().servers, vec![0]);
    }

    #[test]
    fn unknown_server_ids_are_refused() {
        let h = hosts(&["a", "b"]);
        let hint = LayoutHint {
            servers: Some(vec![0, 2]),
            ..LayoutHint::default()
        };
        let e = run(&h, 0, hint, LayoutHint::default(), None, 0).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        assert!(e.message.contains("data server 2 does not exist"), "{e}");
    }

    #[test]
    fn spread_rotates_and_honours_the_start() {
        let h = hosts(&["a", "b", "c", "d"]);
        let two = LayoutHint {
            stripe_count: Some(2),
            ..LayoutHint::default()
        };
        let r = run(&h, 0, two.clone(), LayoutHint::default(), None, 3).unwrap();
        assert_eq!(r.servers, vec![3, 0]);
        let start = LayoutHint {
            start_server: Some(1),
            ..two
        };
        let r = run(&h, 0, start, LayoutHint::default(), None, 3).unwrap();
        assert_eq!(r.servers, vec![1, 2]);
        let all = run(&h, 0, LayoutHint::default(), LayoutHint::default(), None, 1).unwrap();
        assert_eq!(all.servers, vec![1, 2, 3, 0]);
    }

    #[test]
    fn local_places_on_the_clients_host() {
        let h = hosts(&["host0", "host1", "host0", "host1"]);
        // Count 1 by default: one server of the client's host, rotating among them.
        for (next, want) in [(0, 1), (1, 3), (2, 1)] {
            let r = run(&h, 0, local(), LayoutHint::default(), Some("host1"), next).unwrap();
            assert_eq!(r.servers, vec![want], "rotation {next}");
            assert_eq!(r.note, None);
        }
        // Inherited from the directory, whatever the cluster's default count.
        let r = run(&h, 0, LayoutHint::default(), local(), Some("host0"), 0).unwrap();
        assert_eq!(r.servers, vec![0]);
        // A larger count: the host's servers first, then the others after the last one.
        let three = LayoutHint {
            stripe_count: Some(3),
            ..local()
        };
        let r = run(&h, 0, three, LayoutHint::default(), Some("host0"), 1).unwrap();
        assert_eq!(r.servers, vec![2, 0, 1]);
        let all = LayoutHint {
            stripe_count: Some(0),
            ..local()
        };
        let r = run(&h, 0, all, LayoutHint::default(), Some("host1"), 0).unwrap();
        assert_eq!(r.servers, vec![1, 3, 0, 2]);
    }

    #[test]
    fn local_falls_back_to_spread_with_a_note() {
        let h = hosts(&["host0", "host1"]);
        let r = run(&h, 0, local(), LayoutHint::default(), Some("elsewhere"), 1).unwrap();
        assert_eq!(r.servers, vec![1]);
        assert!(r.note.unwrap().contains("\"elsewhere\" has no data server"));
        let r = run(&h, 0, local(), LayoutHint::default(), None, 0).unwrap();
        assert_eq!(r.servers, vec![0]);
        assert!(r.note.unwrap().contains("did not say its host"));
        // Servers without a host in the cluster file are nobody's local servers.
        let unknown = vec![None, None];
        let r = run(
            &unknown,
            0,
            local(),
            LayoutHint::default(),
            Some("host0"),
            0,
        )
        .unwrap();
        assert!(r.note.is_some());
    }

    #[test]
    fn a_files_own_policy_overrides_the_directorys_group() {
        let h = hosts(&["host0", "host1", "host2"]);
        let spread = LayoutHint {
            policy: Some(Policy::Spread),
            ..LayoutHint::default()
        };
        let r = run(&h, 0, spread, local(), Some("host2"), 0).unwrap();
        assert_eq!(r.servers, vec![0, 1, 2]);
        let start = LayoutHint {
            start_server: Some(1),
            stripe_count: Some(1),
            ..LayoutHint::default()
        };
        let dir = LayoutHint {
            servers: Some(vec![2, 0]),
            ..LayoutHint::default()
        };
        let r = run(&h, 0, start, dir, None, 0).unwrap();
        assert_eq!(r.servers, vec![1]);
    }

    /// Every cluster of up to 6 servers, every set of them down, every start and count:
    /// the file gets distinct servers, none down (unless all are), as many as asked or
    /// as are up, in ring order from the start; with all up, exactly the consecutive
    /// servers from the start, as before heartbeats existed.
    #[test]
    fn servers_down_get_no_new_files_exhaustively() {
        for n in 1..=6u32 {
            let h: Vec<Option<String>> = (0..n).map(|i| Some(format!("h{i}"))).collect();
            for mask in 0..(1u32 << n) {
                let up: Vec<bool> = (0..n).map(|i| mask & (1 << i) != 0).collect();
                let live = up.iter().filter(|&&u| u).count() as u32;
                for count in 0..=n {
                    for start in 0..n {
                        let hint = LayoutHint {
                            stripe_count: Some(count),
                            ..LayoutHint::default()
                        };
                        let r =
                            run_up(&h, &up, 0, hint, LayoutHint::default(), None, start).unwrap();
                        let want = if count == 0 { n } else { count };
                        let want = if live == 0 { want } else { want.min(live) };
                        let case = format!("n {n} up {up:?} count {count} start {start}");
                        assert_eq!(r.servers.len() as u32, want, "{case}");
                        let mut seen = r.servers.clone();
                        seen.sort();
                        seen.dedup();
                        assert_eq!(seen.len(), r.servers.len(), "{case}: a server twice");
                        if live > 0 {
                            assert!(r.servers.iter().all(|&s| up[s as usize]), "{case}");
                        }
                        // Ring order from the start: each next server is the next one
                        // usable after the previous.
                        let usable = |s: u32| live == 0 || up[s as usize];
                        let mut at = start;
                        for &s in &r.servers {
                            while !usable(at) {
                                at = (at + 1) % n;
                            }
                            assert_eq!(s, at, "{case}");
                            at = (at + 1) % n;
                        }
                        assert_eq!(
                            r.note.is_some(),
                            live > 0 && want < (if count == 0 { n } else { count }),
                            "{case}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn local_placement_skips_its_hosts_servers_that_are_down() {
        let h = hosts(&["a", "a", "b", "b"]);
        let up = [false, true, true, false];
        for next in 0..4 {
            let r = run_up(&h, &up, 0, local(), LayoutHint::default(), Some("a"), next).unwrap();
            assert_eq!(r.servers, vec![1], "next {next}");
            let two = LayoutHint {
                stripe_count: Some(3),
                ..local()
            };
            let r = run_up(&h, &up, 0, two, LayoutHint::default(), Some("a"), next).unwrap();
            assert_eq!(r.servers, vec![1, 2], "next {next}");
            assert!(r.note.unwrap().contains("cut to 2"));
        }
        // All of its host's servers down: spread over the others.
        let up = [false, false, true, true];
        let r = run_up(&h, &up, 1, local(), LayoutHint::default(), Some("a"), 0).unwrap();
        assert!(up[r.servers[0] as usize], "{r:?}");
        assert!(r.note.unwrap().contains("no data server up"));
    }
}
