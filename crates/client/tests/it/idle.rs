//! Servers close connections that stay idle (`limits::IDLE_TIMEOUT`, short here); the
//! client's pools must not let that reach the caller: every kind of call, idempotent or
//! not, after the servers closed every pooled connection, succeeds.

use crate::common;

use common::Cluster;
use std::time::Duration;
use stripefs_rpc::Limits;

fn short_idle() -> Limits {
    Limits {
        idle_timeout: Duration::from_millis(400),
        idle_poll: Duration::from_millis(100),
        ..Limits::default()
    }
}

/// After the servers expired every pooled connection (metadata and data), a mkdir, a
/// create, a write, an fsync, a read, a rename and an unlink all succeed at once, on fresh
/// connections, with no error to the caller. Before the pools dropped closed
/// connections, the mkdir (not idempotent, so never retried) failed with a transport
/// error.
#[test]
fn calls_after_the_servers_closed_idle_connections_succeed() {
    let cl = Cluster::with_limits(2, 1, common::SMALL_STRIPE, &short_idle());
    let c = cl.client();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    c.write_file("/before", &data, 0o644)
        .expect("write before idling");
    for round in 0..2 {
        std::thread::sleep(Duration::from_millis(1200));
        let closed = cl.idle_closed();
        println!("round {round}: idle connections closed per server {closed:?}");
        assert!(closed.iter().all(|&n| n > 0), "{closed:?}");
        let dir = format!("/d{round}");
        c.mkdir(&dir, 0o755).expect("mkdir after idle close");
        let path = format!("{dir}/f");
        c.write_file(&path, &data, 0o644)
            .expect("create and write after idle close");
        std::thread::sleep(Duration::from_millis(1200));
        assert_eq!(c.read_file(&path).expect("read after idle close"), data);
        std::thread::sleep(Duration::from_millis(1200));
        c.rename(&path, &format!("{dir}/g")).expect("rename");
        std::thread::sleep(Duration::from_millis(1200));
        c.unlink(&format!("{dir}/g"))
            .expect("unlink after idle close");
    }
    assert_eq!(c.read_file("/before").expect("read"), data);
}
