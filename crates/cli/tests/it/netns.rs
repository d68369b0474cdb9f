//! Many hosts on one machine: the metadata server and three data servers each in a
//! network namespace of its own with its own veth address, joined by a bridge, and a
//! client in a fifth namespace that round-trips data through them. Needs root and `ip`
//! (CI runs as root); elsewhere it says why it skipped.

use crate::common;
use common::*;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Namespaces, links and processes of the test, all removed on drop.
struct Hosts {
    tag: String,
    names: Vec<String>,
    children: Vec<Child>,
}

impl Hosts {
    fn ns(&self, host: &str) -> String {
        format!("sfs{}-{host}", self.tag)
    }

    fn exec(&self, host: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(host)]).args(args);
        c
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", text(&out));
}

fn can_run() -> Result<(), String> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root".into());
    }
    match Command::new("ip").arg("netns").arg("list").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err("`ip netns` unavailable".into()),
    }
}

const HOSTS: [&str; 5] = ["m", "d0", "d1", "d2", "c"];

fn setup() -> Hosts {
    let tag = format!("{}", std::process::id() % 100_000);
    let mut h = Hosts {
        tag,
        names: vec![],
        children: vec![],
    };
    let br = h.ns("br");
    sh(&["ip", "netns", "add", &br]);
    h.names.push(br.clone());
    sh(&["ip", "-n", &br, "link", "add", "br0", "type", "bridge"]);
    sh(&["ip", "-n", &br, "link", "set", "br0", "up"]);
    for (i, host) in HOSTS.iter().enumerate() {
        let ns = h.ns(host);
        sh(&["ip", "netns", "add", &ns]);
        h.names.push(ns.clone());
        let peer = format!("p-{host}");
        sh(&[
            "ip", "-n", &ns, "link", "add", "eth0", "type", "veth", "peer", "name", &peer, "netns",
            &br,
        ]);
        sh(&["ip", "-n", &br, "link", "set", &peer, "master", "br0", "up"]);
        let addr = format!("10.203.0.{}/24", i + 1);
        sh(&["ip", "-n", &ns, "addr", "add", &addr, "dev", "eth0"]);
        sh(&["ip", "-n", &ns, "link", "set", "eth0", "up"]);
        sh(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
    }
    h
}

#[test]
fn servers_and_client_in_separate_network_namespaces() {
    if let Err(why) = can_run() {
        skip(&why);
        return;
    }
    let mut h = setup();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let secret = "5a".repeat(32);
    let cluster = format!(
        "secret = \"{secret}\"\n[meta]\naddr = \"10.203.0.1:7000\"\n\
         [[data]]\naddr = \"10.203.0.2:7100\"\n[[data]]\naddr = \"10.203.0.3:7100\"\n\
         [[data]]\naddr = \"10.203.0.4:7100\"\n"
    );
    std::fs::write(d.join("cluster.toml"), cluster).unwrap();
    std::fs::write(
        d.join("meta.toml"),
        "cluster = \"cluster.toml\"\ndb = \"meta.redb\"\n",
    )
    .unwrap();
    for i in 0..3 {
        let cfg =
            format!("cluster = \"cluster.toml\"\nid = {i}\ntargets = [\"d{i}t0\", \"d{i}t1\"]\n");
        std::fs::write(d.join(format!("data{i}.toml")), cfg).unwrap();
    }
    let spawn = |h: &Hosts, host: &str, role: &str, cfg: &str| {
        h.exec(host, &[exe(), "serve", role, "--config"])
            .arg(d.join(cfg))
            .arg("--log")
            .arg(d.join(format!("{host}.log")))
            .spawn()
            .unwrap()
    };
    let m = spawn(&h, "m", "meta", "meta.toml");
    h.children.push(m);
    for i in 0..3 {
        let c = spawn(&h, &format!("d{i}"), "data", &format!("data{i}.toml"));
        h.children.push(c);
    }
    let data = random_bytes(5 << 20);
    std::fs::write(d.join("in"), &data).unwrap();
    let cluster_file = d.join("cluster.toml");
    let cf = cluster_file.to_str().unwrap();
    // Servers start in the background; wait until the client sees all of them healthy.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = h
            .exec(
                "c",
                &[exe(), "cluster", "status", "--json", "--cluster", cf],
            )
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let healthy = v["servers"]
            .as_array()
            .is_some_and(|s| s.len() == 4 && s.iter().all(|s| s["healthy"] == true));
        if healthy {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "cluster never served: {}",
            text(&out)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let put = h
        .exec(
            "c",
            &[
                exe(),
                "put",
                d.join("in").to_str().unwrap(),
                "/x",
                "--stripe-size",
                "64K",
                "--cluster",
                cf,
            ],
        )
        .output()
        .unwrap();
    assert!(put.status.success(), "{}", text(&put));
    let get = h
        .exec(
            "c",
            &[
                exe(),
                "get",
                "/x",
                d.join("out").to_str().unwrap(),
                "--cluster",
                cf,
            ],
        )
        .output()
        .unwrap();
    assert!(get.status.success(), "{}", text(&get));
    assert!(
        std::fs::read(d.join("out")).unwrap() == data,
        "bytes differ after the round trip"
    );
    let st = h
        .exec(
            "c",
            &[exe(), "cluster", "status", "--json", "--cluster", cf],
        )
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    for s in v["servers"].as_array().unwrap() {
        assert_eq!(s["healthy"], true, "{s}");
        if s["role"] == "data" {
            assert!(s["bytes_used"].as_u64().unwrap() > 1 << 20, "{s}");
        }
    }
    // The client namespace cannot reach loopback servers of another namespace: the
    // traffic really crossed the veth links.
    let lo = h.exec("c", &["ip", "-o", "addr"]).output().unwrap();
    assert!(String::from_utf8_lossy(&lo.stdout).contains("10.203.0.5"));
}
