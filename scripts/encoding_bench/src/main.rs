//! Same-run comparison: the old path (bincode 1 fixint, CRC lists as Vec<u32>, body then
//! copied behind the header) against the new one (postcard, encode_request/decode_body).
use bincode::Options;
use serde::{Deserialize, Serialize};
use std::hint::black_box;
use std::time::Instant;
use stripefs_wire::*;
fn bc() -> impl bincode::Options { bincode::DefaultOptions::new().with_fixint_encoding().with_little_endian().with_limit(4<<20).reject_trailing_bytes() }
#[derive(Serialize, Deserialize)] struct OldWrite { cred: Cred, variant: u32, fid: u64, unit: u32, offset: u64, crcs: Vec<u32> }
#[derive(Serialize, Deserialize)] struct OldReadData { variant: u32, crcs: Vec<u32> }
fn old_frame<T: Serialize>(v: &T) -> Vec<u8> { let body = bc().serialize(v).unwrap(); let mut f = Vec::with_capacity(40 + body.len()); f.extend_from_slice(&[0u8; 40]); f.extend_from_slice(&body); black_box(crc32c(&body)); f }
fn time<F: FnMut()>(n: u32, mut f: F) -> f64 { let t = Instant::now(); for _ in 0..n { f() } t.elapsed().as_nanos() as f64 / n as f64 }
fn main() {
    let crcs: Vec<u32> = (0..256u32).map(|i| i.wrapping_mul(2654435761)).collect();
    let cred = Cred { uid: 1000, gid: 1000, groups: vec![4, 27] };
    let n = 300_000;
    let reps = 5;
    let mut rows = vec![];
    for _ in 0..reps {
        let w = Envelope { cred: cred.clone(), req: Request::Write { fid: InodeId(123456), unit: 1<<20, offset: 7<<20, crcs: crcs.clone() } };
        let ow = OldWrite { cred: cred.clone(), variant: 25, fid: 123456, unit: 1<<20, offset: 7<<20, crcs: crcs.clone() };
        let ob = bc().serialize(&ow).unwrap(); let nb = encode_body(&w);
        let r = Envelope { cred: cred.clone(), req: Request::Read { fid: InodeId(123456), unit: 1<<20, offset: 7<<20, len: 1<<20 } };
        let rb_old = bc().serialize(&r).unwrap(); let rb_new = encode_body(&r);
        let c = Envelope { cred: cred.clone(), req: Request::CreateOpen { parent: InodeId(77), name: "file.000123".into(), mode: 0o644, exclusive: true, layout: LayoutHint::default(), session: 0xdead_beef_1234, read: true, write: true } };
        let cb_old = bc().serialize(&c).unwrap(); let cb_new = encode_body(&c);
        let rd = Response::ReadData { crcs: crcs.clone() }; let ord = OldReadData { variant: 7, crcs: crcs.clone() };
        let db_old = bc().serialize(&ord).unwrap(); let db_new = encode_body(&rd);
        rows.push(vec![
            ("Write 1 MiB encode", time(n, || { black_box(old_frame(black_box(&ow))); }), time(n, || { black_box(encode_request(1, black_box(&w), 1<<20)); })),
            ("Write 1 MiB decode", time(n, || { black_box(bc().deserialize::<OldWrite>(black_box(&ob)).unwrap()); }), time(n, || { black_box(decode_body::<Envelope>(black_box(&nb)).unwrap()); })),
            ("Read encode", time(n, || { black_box(old_frame(black_box(&r))); }), time(n, || { black_box(encode_request(1, black_box(&r), 0)); })),
            ("Read decode", time(n, || { black_box(bc().deserialize::<Envelope>(black_box(&rb_old)).unwrap()); }), time(n, || { black_box(decode_body::<Envelope>(black_box(&rb_new)).unwrap()); })),
            ("CreateOpen encode", time(n, || { black_box(old_frame(black_box(&c))); }), time(n, || { black_box(encode_request(1, black_box(&c), 0)); })),
            ("CreateOpen decode", time(n, || { black_box(bc().deserialize::<Envelope>(black_box(&cb_old)).unwrap()); }), time(n, || { black_box(decode_body::<Envelope>(black_box(&cb_new)).unwrap()); })),
            ("ReadData encode", time(n, || { black_box(old_frame(black_box(&ord))); }), time(n, || { black_box(encode_response(1, Opcode::Read, black_box(&Ok(rd.clone())), 0)); })),
            ("ReadData decode", time(n, || { black_box(bc().deserialize::<OldReadData>(black_box(&db_old)).unwrap()); }), time(n, || { black_box(decode_body::<Response>(black_box(&db_new)).unwrap()); })),
        ]);
        if rows.len() == 1 { println!("sizes: Write {} -> {} B, Read {} -> {}, CreateOpen {} -> {}, ReadData {} -> {}", ob.len(), nb.len(), rb_old.len(), rb_new.len(), cb_old.len(), cb_new.len(), db_old.len(), db_new.len()); }
    }
    println!("{:24} {:>10} {:>10} {:>6}   (median of {reps} runs of {n})", "", "bincode ns", "postcard", "ratio");
    for i in 0..rows[0].len() {
        let mut o: Vec<f64> = rows.iter().map(|r| r[i].1).collect(); o.sort_by(|a,b| a.partial_cmp(b).unwrap());
        let mut p: Vec<f64> = rows.iter().map(|r| r[i].2).collect(); p.sort_by(|a,b| a.partial_cmp(b).unwrap());
        println!("{:24} {:10.0} {:10.0} {:6.2}", rows[0][i].0, o[reps/2], p[reps/2], p[reps/2]/o[reps/2]);
    }
}
