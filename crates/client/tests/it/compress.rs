//! Compression on data-server connections (`compress` in the cluster file): every codec
//! carries the same bytes both ways through real data servers, which check each block's
//! CRC against the decompressed bytes before storing it; small gathered writes (list
//! writes), unaligned writes, list reads and random (incompressible) data included.

use crate::common;

use common::{hint, pattern, seed, Cluster};
use rand::{Rng, SeedableRng};
use stripefs_client::{Client, Cred, OpenOptions};
use stripefs_rpc::compress::Codec;

fn text(len: usize, seed: u64) -> Vec<u8> {
    const WORDS: [&str; 8] = [
        "stripe ", "server ", "client ", "object ", "block ", "inode ", "layout ", "write ",
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(WORDS[rng.gen_range(0..8)].as_bytes());
    }
    out.truncate(len);
    out
}

#[test]
fn every_codec_round_trips_through_the_data_servers() {
    let s = seed("every_codec_round_trips_through_the_data_servers");
    let cl = Cluster::with(2, 1, 64 << 10);
    for codec in [Codec::Lz4, Codec::Zstd(3), Codec::Auto] {
        let mut cfg = cl.config.clone();
        cfg.compress = Some(codec);
        for (kind, data) in [("text", text(3 << 20, s)), ("random", pattern(s, 3 << 20))] {
            let c = Client::connect(&cfg).unwrap().with_cred(Cred::root());
            let path = format!("/z-{codec}-{kind}");
            let f = c
                .open(
                    &path,
                    &OpenOptions::create_truncate()
                        .read(true)
                        .layout(hint(64 << 10, 2)),
                )
                .unwrap();
            // Large aligned writes, then small unaligned ones over them (gathered into
            // list writes), then the rest.
            f.write_at(0, &data[..2 << 20]).unwrap();
            for k in 0..200u64 {
                let at = (k * 9_973) as usize;
                f.write_at(at as u64, &data[at..at + 777]).unwrap();
            }
            f.write_at(2 << 20, &data[2 << 20..]).unwrap();
            f.fsync().unwrap();
            f.close().unwrap();
            // A fresh client reads it back whole, and as a list read.
            let r = Client::connect(&cfg).unwrap().with_cred(Cred::root());
            assert!(
                r.read_file(&path).unwrap() == data,
                "{codec} {kind}: bytes differ (seed {s})"
            );
            // On the wire: text shrinks both ways, random data goes as it is.
            let (plain_sent, plain_got) = (c.traffic().total_written(), r.traffic().total_read());
            let (wire_sent, wire_got) = (c.wire_bytes().0, r.wire_bytes().1);
            if kind == "text" {
                assert!(
                    wire_sent * 2 < plain_sent,
                    "{codec}: sent {wire_sent} of {plain_sent}"
                );
                assert!(
                    wire_got * 2 < plain_got,
                    "{codec}: got {wire_got} of {plain_got}"
                );
            } else {
                assert!(
                    wire_sent >= plain_sent && wire_got >= plain_got,
                    "{codec} random"
                );
            }
            let g = r.open(&path, &OpenOptions::read_only()).unwrap();
            let extents: Vec<(u64, u64)> = (0..50).map(|k| (k * 60_001, 5_000)).collect();
            let mut got = vec![0u8; 50 * 5_000];
            g.read_list(&extents, &mut got).unwrap();
            for (i, &(o, l)) in extents.iter().enumerate() {
                let want = &data[o as usize..(o + l) as usize];
                assert!(
                    &got[i * 5_000..(i + 1) * 5_000] == want,
                    "{codec} {kind} list read"
                );
            }
            g.close().unwrap();
        }
    }
}
