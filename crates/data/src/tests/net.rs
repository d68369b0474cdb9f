use super::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use stripefs_rpc::{Conn, Secret, ServerConfig};

/// Stops the server thread even when the test fails.
struct Running {
    shutdown: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<(), String>>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn connect(addr: &str, secret: &Secret) -> Conn {
    for _ in 0..200 {
        if let Ok(c) = Conn::connect(addr, secret, Duration::from_secs(5)) {
            return c;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("data server at {addr} did not come up");
}

#[test]
fn run_serves_over_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let secret = Secret::generate();
    let cluster = format!(
        "secret = \"{}\"\n[meta]\naddr = \"127.0.0.1:1\"\n[[data]]\naddr = \"{addr}\"\n",
        secret.to_hex()
    );
    std::fs::write(dir.path().join("cluster.toml"), cluster).unwrap();
    let server = "cluster = \"cluster.toml\"\nid = 0\ntargets = [\"d0\", \"d1\"]\n";
    let cfg = ServerConfig::parse(server, dir.path()).unwrap();
    let shutdown = Arc::new(AtomicBool::new(false));
    let stop = shutdown.clone();
    let _running = Running {
        shutdown: shutdown.clone(),
        thread: Some(std::thread::spawn(move || crate::run(&cfg, stop))),
    };
    let mut conn = connect(&addr, &secret);
    let cred = Cred::root();
    let (pong, _) = conn.call(&cred, Request::Ping {}, &[], &mut []).unwrap();
    assert!(
        matches!(
            pong,
            Response::Pong {
                server_id: Some(ServerId(0)),
                ..
            }
        ),
        "{pong:?}"
    );
    let data = pattern(1, 300_000);
    let req = Request::Write {
        fid: InodeId(42),
        unit: 65536,
        offset: 5,
        crcs: piece_crcs(5, &data),
    };
    conn.call(&cred, req, &data, &mut []).unwrap();
    let mut buf = vec![0u8; 80 * B];
    let req = Request::Read {
        fid: InodeId(42),
        unit: 65536,
        offset: 0,
        len: buf.len() as u32,
    };
    let (resp, n) = conn.call(&cred, req, &[], &mut buf).unwrap();
    assert_eq!(n, buf.len());
    let Response::ReadData { crcs } = resp else {
        panic!("{resp:?}")
    };
    for (block, crc) in buf.chunks(B).zip(&crcs) {
        assert_eq!(crc32c(block), *crc);
    }
    assert_eq!(&buf[5..5 + data.len()], &data[..]);
    assert!(dir.path().join("d1/objects/2a/000000000000002a").exists());
}
