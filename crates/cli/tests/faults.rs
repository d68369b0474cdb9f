//! Faults the design claims to survive, injected into real server processes: a metadata
//! server killed with SIGKILL in the middle of a create storm, and a killed data server.

mod common;
use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use stripefs_client::{Client, OpenOptions};
use stripefs_rpc::ClusterConfig;

fn client(c: &Cluster) -> Client {
    Client::connect(&ClusterConfig::load(&c.cluster_file()).unwrap()).unwrap()
}

#[test]
fn kill9_meta_during_create_storm_loses_no_acknowledged_create() {
    let c = Cluster::up(2, 1, &[]);
    let cl = client(&c);
    cl.mkdir("/storm", 0o755).unwrap();
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (acked, stop) = (acked.clone(), stop.clone());
            let cfg = ClusterConfig::load(&c.cluster_file()).unwrap();
            std::thread::spawn(move || {
                let cl = Client::connect(&cfg).unwrap();
                for i in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let p = format!("/storm/w{w}-{i}");
                    match cl.open(&p, &OpenOptions::create_new(0o644)) {
                        Ok(f) => {
                            acked.lock().unwrap().push(p);
                            let _ = f.close();
                        }
                        Err(_) => break,
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    let before = acked.lock().unwrap().len();
    stripefs_launch::kill9(c.path(), "meta").unwrap();
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(
        before > 100,
        "the storm made only {before} files before the kill"
    );
    c.restart();
    let cl = client(&c);
    let names: std::collections::HashSet<String> = cl
        .readdir("/storm")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    for p in &acked {
        let name = p.rsplit('/').next().unwrap();
        assert!(
            names.contains(name),
            "acknowledged create {p} lost after kill -9"
        );
    }
    eprintln!(
        "{} acknowledged creates all present after kill -9 ({} entries)",
        acked.len(),
        names.len()
    );
    // Nothing dangles: the offline consistency check of the store passes.
    c.down();
    let report = stripefs_meta::check(&c.path().join("meta/meta.redb")).unwrap();
    eprintln!("fsck: {report:?}");
}

#[test]
fn killed_data_server_fails_fast_naming_it_and_other_files_work() {
    let c = Cluster::up(2, 1, &["--stripe-count", "1"]);
    let cl = client(&c);
    let cfg = ClusterConfig::load(&c.cluster_file()).unwrap();
    // With one stripe each, files rotate over the servers; keep one on each.
    let mut on: [Option<String>; 2] = [None, None];
    for i in 0..8 {
        let p = format!("/f{i}");
        let f = cl.open(&p, &OpenOptions::create_new(0o644)).unwrap();
        f.write_at(0, &vec![i as u8; 300_000]).unwrap();
        let s = f.layout().servers[0].0 as usize;
        f.close().unwrap();
        on[s].get_or_insert(p);
    }
    let (dead, alive) = (on[0].clone().unwrap(), on[1].clone().unwrap());
    stripefs_launch::kill9(c.path(), "data0").unwrap();
    let start = Instant::now();
    let f = cl.open(&dead, &OpenOptions::read_only()).unwrap();
    let mut buf = vec![0u8; 300_000];
    let err = f.read_at(0, &mut buf).unwrap_err();
    let took = start.elapsed();
    assert!(took < Duration::from_secs(10), "failing took {took:?}");
    assert!(
        err.to_string().contains(&cfg.data[0].addr),
        "error does not name the server: {err}"
    );
    let f = cl.open(&alive, &OpenOptions::read_only()).unwrap();
    assert_eq!(f.read_at(0, &mut buf).unwrap(), 300_000);
}
