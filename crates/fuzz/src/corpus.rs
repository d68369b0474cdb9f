//! The seed corpus: valid encoded frames of every opcode, requests and responses, ok and
//! error. The matches below have no wildcard arm, so adding an opcode without a sample
//! here fails to compile instead of leaving the new message unfuzzed.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use stripefs_wire::*;

/// Samples generated per opcode, with different random fields.
const SAMPLES_PER_OPCODE: usize = 4;

/// Builds the corpus: for each opcode, requests and an ok response; for each error code,
/// an error response under a random opcode.
pub fn frames(rng: &mut StdRng) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for &op in Opcode::ALL {
        for _ in 0..SAMPLES_PER_OPCODE {
            let (req, data_len) = request(op, rng);
            assert_eq!(req.opcode(), op);
            let env = Envelope {
                cred: cred(rng),
                req,
            };
            // Some requests ask for no answer (as Close does).
            let flags = if rng.gen_bool(0.25) { FLAG_NO_REPLY } else { 0 };
            out.push(encode_request_flags(rng.gen(), &env, data_len, flags));
            let (resp, data_len) = response(op, rng);
            out.push(encode_response(rng.gen(), op, &Ok(resp), data_len));
        }
    }
    for &code in ErrorCode::ALL {
        let op = *Opcode::ALL.choose(rng).expect("opcodes exist");
        let err = WireError::new(code, text(rng));
        out.push(encode_response(rng.gen(), op, &Err(err), 0));
    }
    out
}

fn cred(rng: &mut StdRng) -> Cred {
    let n = rng.gen_range(0..4);
    Cred {
        uid: rng.gen(),
        gid: rng.gen(),
        groups: (0..n).map(|_| rng.gen()).collect(),
    }
}

/// A name, sometimes an invalid one, so that `Request::validate` sees both kinds.
fn text(rng: &mut StdRng) -> String {
    const FIXED: &[&str] = &["a", "file.txt", "", ".", "..", "a/b", "a\0b", "é🦀"];
    match rng.gen_range(0..4) {
        0 => FIXED.choose(rng).expect("non-empty").to_string(),
        1 => "x".repeat(rng.gen_range(250..260)),
        _ => {
            let n = rng.gen_range(1..24);
            (0..n).map(|_| rng.gen_range(b'a'..=b'z') as char).collect()
        }
    }
}

fn ino(rng: &mut StdRng) -> InodeId {
    InodeId(rng.gen_range(0..1000))
}

fn unit(rng: &mut StdRng) -> u32 {
    *[4096, 65536, 1 << 20, 1000, 0]
        .choose(rng)
        .expect("non-empty")
}

fn hint(rng: &mut StdRng) -> LayoutHint {
    LayoutHint {
        stripe_size_bytes: rng.gen_bool(0.5).then(|| unit(rng)),
        stripe_count: rng.gen_bool(0.5).then(|| rng.gen_range(0..8)),
        start_server: rng.gen_bool(0.3).then(|| rng.gen_range(0..8)),
        servers: rng
            .gen_bool(0.2)
            .then(|| (0..rng.gen_range(1..5)).map(|i| i * 2 + 1).collect()),
        policy: match rng.gen_range(0..3) {
            0 => None,
            1 => Some(Policy::Spread),
            _ => Some(Policy::Local),
        },
        inline_bytes: rng.gen_bool(0.3).then(|| rng.gen_range(0..70_000)),
    }
}

fn set_time(rng: &mut StdRng) -> Option<SetTime> {
    match rng.gen_range(0..3) {
        0 => None,
        1 => Some(SetTime::Now),
        _ => Some(SetTime::AtNs(rng.gen())),
    }
}

fn ftype(rng: &mut StdRng) -> FileType {
    *[
        FileType::File,
        FileType::Dir,
        FileType::Symlink,
        FileType::Fifo,
        FileType::Socket,
        FileType::BlockDev,
        FileType::CharDev,
    ]
    .choose(rng)
    .expect("non-empty")
}

/// A request of opcode `op` and the bulk data length its frame announces.
fn request(op: Opcode, rng: &mut StdRng) -> (Request, u32) {
    let r = match op {
        Opcode::Hello => Request::Hello { nonce: rng.gen() },
        Opcode::Auth => Request::Auth { proof: rng.gen() },
        Opcode::Ping => Request::Ping {},
        Opcode::Features => Request::Features {
            features: Features(rng.gen()),
        },
        Opcode::Statfs => Request::Statfs {},
        Opcode::Lookup => Request::Lookup {
            parent: ino(rng),
            name: text(rng),
        },
        Opcode::GetAttr => Request::GetAttr { ino: ino(rng) },
        Opcode::Resolve => Request::Resolve {
            path: format!("/{}/{}", text(rng), text(rng)),
            follow: rng.gen(),
        },
        Opcode::Mkdir => Request::Mkdir {
            parent: ino(rng),
            name: text(rng),
            mode: rng.gen_range(0..0o10000),
        },
        Opcode::Create => Request::Create {
            parent: ino(rng),
            name: text(rng),
            mode: 0o644,
            exclusive: rng.gen(),
            layout: hint(rng),
        },
        Opcode::CreateOpen => Request::CreateOpen {
            parent: ino(rng),
            name: text(rng),
            mode: 0o644,
            exclusive: rng.gen(),
            layout: hint(rng),
            session: rng.gen(),
            read: rng.gen(),
            write: rng.gen(),
        },
        Opcode::Mknod => Request::Mknod {
            parent: ino(rng),
            name: text(rng),
            mode: 0o600,
            ftype: ftype(rng),
            rdev: rng.gen(),
        },
        Opcode::Symlink => Request::Symlink {
            parent: ino(rng),
            name: text(rng),
            target: text(rng),
        },
        Opcode::Readlink => Request::Readlink { ino: ino(rng) },
        Opcode::Link => Request::Link {
            ino: ino(rng),
            parent: ino(rng),
            name: text(rng),
        },
        Opcode::Unlink => Request::Unlink {
            parent: ino(rng),
            name: text(rng),
        },
        Opcode::Rmdir => Request::Rmdir {
            parent: ino(rng),
            name: text(rng),
        },
        Opcode::Rename => Request::Rename {
            src_parent: ino(rng),
            src_name: text(rng),
            dst_parent: ino(rng),
            dst_name: text(rng),
            noreplace: rng.gen(),
        },
        Opcode::SetAttr => Request::SetAttr {
            ino: ino(rng),
            attrs: SetAttrs {
                mode: rng.gen_bool(0.5).then(|| rng.gen()),
                uid: rng.gen_bool(0.5).then(|| rng.gen()),
                gid: rng.gen_bool(0.5).then(|| rng.gen()),
                size: rng.gen_bool(0.5).then(|| rng.gen()),
                atime: set_time(rng),
                mtime: set_time(rng),
                via_write_handle: rng.gen(),
            },
        },
        Opcode::ReadDir => Request::ReadDir {
            ino: ino(rng),
            after: if rng.gen() { String::new() } else { text(rng) },
            limit: rng.gen_range(0..5000),
        },
        Opcode::ReadDirPlus => Request::ReadDirPlus {
            ino: ino(rng),
            after: if rng.gen() { String::new() } else { text(rng) },
            limit: rng.gen_range(0..5000),
        },
        Opcode::Exchange => Request::Exchange {
            a_parent: ino(rng),
            a_name: text(rng),
            a_ino: ino(rng),
            b_parent: ino(rng),
            b_name: text(rng),
            b_ino: ino(rng),
        },
        Opcode::OpenPath => Request::OpenPath {
            path: format!("/{}/{}", text(rng), text(rng)),
            session: rng.gen(),
            read: rng.gen(),
            write: rng.gen(),
        },
        Opcode::Open => Request::Open {
            ino: ino(rng),
            session: rng.gen(),
            read: rng.gen(),
            write: rng.gen(),
        },
        Opcode::Close => Request::Close {
            ino: ino(rng),
            session: rng.gen(),
        },
        Opcode::ExtendSize => Request::ExtendSize {
            ino: ino(rng),
            size: rng.gen(),
            mtime_ns: rng.gen(),
        },
        Opcode::ExtendSizeUnsynced => Request::ExtendSizeUnsynced {
            ino: ino(rng),
            size: rng.gen(),
            mtime_ns: rng.gen(),
        },
        Opcode::SetLayout => Request::SetLayout {
            ino: ino(rng),
            hint: hint(rng),
        },
        Opcode::MetaStatus => Request::MetaStatus {},
        Opcode::Access => Request::Access {
            ino: ino(rng),
            mask: rng.gen_range(0..8),
        },
        Opcode::Write => return write_request(rng),
        Opcode::WriteList => return write_list_request(rng),
        Opcode::Read => Request::Read {
            fid: ino(rng),
            unit: unit(rng),
            offset: rng.gen_range(0..64) * BLOCK_BYTES as u64,
            len: rng.gen_range(0..64) * BLOCK_BYTES,
        },
        Opcode::ReadList => Request::ReadList {
            fid: ino(rng),
            unit: unit(rng),
            ranges: (0..rng.gen_range(0..5))
                .map(|_| {
                    (
                        rng.gen_range(0..64) * BLOCK_BYTES as u64,
                        rng.gen_range(0..16) * BLOCK_BYTES,
                    )
                })
                .collect(),
        },
        Opcode::Truncate => Request::Truncate {
            fid: ino(rng),
            unit: unit(rng),
            local_size: rng.gen(),
        },
        Opcode::Remove => Request::Remove { fid: ino(rng) },
        Opcode::Fsync => Request::Fsync { fid: ino(rng) },
        Opcode::DataStatus => Request::DataStatus {},
        Opcode::Space => Request::Space {},
        Opcode::DropCache => Request::DropCache { fid: ino(rng) },
        Opcode::SessionOpen => Request::SessionOpen {},
        Opcode::SessionRenew => Request::SessionRenew { session: rng.gen() },
        Opcode::SessionEnd => Request::SessionEnd { session: rng.gen() },
        Opcode::ClientHost => Request::ClientHost {
            host: format!("host{}", rng.gen_range(0..64)),
        },
        Opcode::Punch => Request::Punch {
            fid: ino(rng),
            unit: unit(rng),
            offset: rng.gen(),
            len: rng.gen_range(0..1 << 40),
        },
        Opcode::Allocate => Request::Allocate {
            fid: ino(rng),
            unit: unit(rng),
            offset: rng.gen(),
            len: rng.gen_range(0..1 << 40),
        },
        Opcode::Seek => Request::Seek {
            fid: ino(rng),
            unit: unit(rng),
            offset: rng.gen(),
            hole: rng.gen(),
        },
        Opcode::Allocated => Request::Allocated { fid: ino(rng) },
        Opcode::ListObjects => Request::ListObjects {
            after: rng.gen_bool(0.5).then(|| ino(rng)),
            limit: rng.gen_range(0..5000),
        },
        Opcode::Scrub => Request::Scrub {
            fid: ino(rng),
            target: rng.gen_range(0..4),
            offset: rng.gen_range(0..64) * BLOCK_BYTES as u64,
        },
        Opcode::ScrubStatus => Request::ScrubStatus {},
        Opcode::LocalityStatus => Request::LocalityStatus {},
        Opcode::DataServers => Request::DataServers {},
        Opcode::TokenHello => Request::TokenHello {
            nonce: rng.gen(),
            token: (0..rng.gen_range(0..64)).map(|_| rng.gen()).collect(),
        },
        Opcode::TokenRevoke => Request::TokenRevoke { id: rng.gen() },
        Opcode::WriteInline | Opcode::WriteInlineUnsynced => {
            let (ino, mtime_ns) = (ino(rng), rng.gen());
            let pieces = (0..rng.gen_range(0..4))
                .map(|_| {
                    let data: Vec<u8> = (0..rng.gen_range(0..64)).map(|_| rng.gen()).collect();
                    InlinePiece {
                        offset: rng.gen_range(0..70_000),
                        crc: if rng.gen_bool(0.8) {
                            crc32c(&data)
                        } else {
                            rng.gen()
                        },
                        data,
                    }
                })
                .collect();
            Request::write_inline(ino, pieces, mtime_ns, op == Opcode::WriteInline)
        }
        Opcode::SyncMeta => Request::SyncMeta {
            session: if rng.gen() { 0 } else { rng.gen() },
        },
        Opcode::ReadInline => Request::ReadInline { ino: ino(rng) },
        Opcode::Uninline => Request::Uninline { ino: ino(rng) },
        Opcode::GetXattr => Request::GetXattr {
            ino: ino(rng),
            name: format!("user.{}", text(rng)),
        },
        Opcode::ListXattr => Request::ListXattr { ino: ino(rng) },
        Opcode::SetXattr => Request::SetXattr {
            ino: ino(rng),
            name: format!("user.{}", text(rng)),
            value: (0..rng.gen_range(0..64)).map(|_| rng.gen()).collect(),
            mode: rng.gen_range(0..3),
        },
        Opcode::RemoveXattr => Request::RemoveXattr {
            ino: ino(rng),
            name: format!("trusted.{}", text(rng)),
        },
        Opcode::TokenAllows => Request::TokenAllows {
            token: (0..rng.gen_range(0..64)).map(|_| rng.gen()).collect(),
            fid: ino(rng),
            write: rng.gen(),
        },
        Opcode::SetCompression => Request::SetCompression {
            codec: rng.gen_range(0..5),
            level: rng.gen_range(-2..24),
        },
        Opcode::LocalOpen => Request::LocalOpen { fid: ino(rng) },
        Opcode::LocalPipe => Request::LocalPipe {},
        Opcode::LocalWrite => {
            let offset = rng.gen_range(0..1 << 30);
            let len = rng.gen_range(0..4 * BLOCK_BYTES);
            let n = pieces(offset, len as usize).count();
            Request::LocalWrite {
                fid: ino(rng),
                unit: rng.gen_range(0..64),
                offset,
                len,
                crcs: (0..n).map(|_| rng.gen()).collect(),
            }
        }
        Opcode::LocalWriteList => {
            let extents: Vec<(u64, u32)> = (0..rng.gen_range(1..4))
                .map(|i| (i * 2 * BLOCK_BYTES as u64, rng.gen_range(1..BLOCK_BYTES)))
                .collect();
            let n = stripefs_wire::list_pieces(&extents);
            Request::LocalWriteList {
                fid: ino(rng),
                unit: rng.gen_range(0..64),
                extents,
                crcs: (0..n).map(|_| rng.gen()).collect(),
            }
        }
        Opcode::LocalDirect => Request::LocalDirect {
            fid: ino(rng),
            unit: rng.gen_range(0..64),
            offset: rng.gen_range(0..1 << 30),
            len: rng.gen_range(1..1 << 21),
        },
        Opcode::LocalDirectDone => Request::LocalDirectDone {
            crcs: rng
                .gen_bool(0.5)
                .then(|| (0..rng.gen_range(0..8)).map(|_| rng.gen()).collect()),
        },
    };
    (r, 0)
}

fn write_request(rng: &mut StdRng) -> (Request, u32) {
    let offset = if rng.gen() {
        rng.gen_range(0..1 << 30)
    } else {
        u64::MAX - rng.gen_range(0..3 * BLOCK_BYTES as u64)
    };
    let data_len = rng.gen_range(0..4 * BLOCK_BYTES);
    let n = pieces(offset, data_len as usize).count();
    let req = Request::Write {
        fid: ino(rng),
        unit: unit(rng),
        offset,
        crcs: (0..n).map(|_| rng.gen()).collect(),
    };
    (req, data_len)
}

fn write_list_request(rng: &mut StdRng) -> (Request, u32) {
    let count = rng.gen_range(0..6);
    let mut extents = Vec::with_capacity(count);
    let mut crcs = Vec::new();
    let mut data_len = 0u32;
    for _ in 0..count {
        let offset = rng.gen_range(0..1u64 << 30);
        let len = rng.gen_range(0..2 * BLOCK_BYTES);
        crcs.extend((0..pieces(offset, len as usize).count()).map(|_| rng.gen::<u32>()));
        extents.push((offset, len));
        data_len += len;
    }
    let req = Request::WriteList {
        fid: ino(rng),
        unit: unit(rng),
        extents,
        crcs,
    };
    (req, data_len)
}

fn attr(rng: &mut StdRng) -> Attr {
    let servers = rng.gen_range(0..4);
    Attr {
        ino: ino(rng),
        ftype: ftype(rng),
        mode: 0o755,
        nlink: rng.gen_range(1..4),
        uid: rng.gen(),
        gid: rng.gen(),
        size: rng.gen(),
        atime_ns: rng.gen(),
        mtime_ns: rng.gen(),
        ctime_ns: rng.gen(),
        rdev: rng.gen(),
        layout: rng.gen_bool(0.5).then(|| Layout {
            stripe_size_bytes: unit(rng),
            servers: (0..servers).map(ServerId).collect(),
        }),
        dir_layout: hint(rng),
        inline: rng.gen_bool(0.3).then(|| Inline {
            max: rng.gen_range(0..70_000),
            crc: rng.gen(),
            data: rng
                .gen_bool(0.5)
                .then(|| (0..rng.gen_range(0..64)).map(|_| rng.gen()).collect()),
        }),
    }
}

fn counters(rng: &mut StdRng) -> Counters {
    Counters {
        requests: rng.gen(),
        errors: rng.gen(),
        bytes_read: rng.gen(),
        bytes_written: rng.gen(),
        write_requests: rng.gen(),
    }
}

/// A plausible successful response to opcode `op` and its bulk data length: one of the
/// replies its row in the operation table allows, so the corpus and the servers agree.
fn response(op: Opcode, rng: &mut StdRng) -> (Response, u32) {
    let kind = *op.replies().choose(rng).expect("every row names a reply");
    let r = match kind {
        ReplyKind::Challenge => Response::Challenge {
            nonce: rng.gen(),
            proof: rng.gen(),
        },
        ReplyKind::Pong => Response::Pong {
            role: if rng.gen() { Role::Meta } else { Role::Data },
            server_id: rng.gen_bool(0.5).then(|| ServerId(rng.gen_range(0..16))),
            version: "0.1.0".into(),
        },
        ReplyKind::Attr => Response::Attr(attr(rng)),
        ReplyKind::Xattr => Response::Xattr {
            value: (0..rng.gen_range(0..64)).map(|_| rng.gen()).collect(),
        },
        ReplyKind::XattrNames => Response::XattrNames {
            names: (0..rng.gen_range(0..4))
                .map(|_| format!("user.{}", text(rng)))
                .collect(),
        },
        ReplyKind::Target => Response::Target(text(rng)),
        ReplyKind::Entries => Response::Entries {
            entries: (0..rng.gen_range(0..4))
                .map(|_| DirEntry {
                    name: text(rng),
                    ino: ino(rng),
                    ftype: ftype(rng),
                })
                .collect(),
            done: rng.gen(),
        },
        ReplyKind::EntriesPlus => Response::EntriesPlus {
            entries: (0..rng.gen_range(0..3))
                .map(|_| (text(rng), attr(rng)))
                .collect(),
            done: rng.gen(),
        },
        ReplyKind::DataServers => Response::DataServers {
            servers: (0..rng.gen_range(0..4))
                .map(|i| {
                    (
                        format!("10.0.0.{i}:7100"),
                        rng.gen_bool(0.5).then(|| "h".into()),
                    )
                })
                .collect(),
        },
        ReplyKind::LocalityStatus => Response::LocalityStatus {
            host: "h0".into(),
            same_host_received: rng.gen(),
            same_host_sent: rng.gen(),
            other_host_received: rng.gen(),
            other_host_sent: rng.gen(),
            short_circuit_opens: rng.gen(),
        },
        ReplyKind::Session => Response::Session {
            session: rng.gen(),
            lease_ms: rng.gen(),
        },
        ReplyKind::MetaStatus => Response::MetaStatus {
            inodes: rng.gen(),
            files: rng.gen(),
            dirs: rng.gen(),
            open_files: rng.gen(),
            db_bytes: rng.gen(),
            counters: counters(rng),
        },
        ReplyKind::ReadData => {
            let blocks = rng.gen_range(0..4u32);
            let crcs = (0..blocks).map(|_| rng.gen()).collect();
            return (Response::ReadData { crcs }, blocks * BLOCK_BYTES);
        }
        ReplyKind::DataStatus => Response::DataStatus {
            server_id: ServerId(rng.gen_range(0..16)),
            targets: vec![TargetStatus {
                path: format!("/disk/{}", text(rng)),
                bytes_used: rng.gen(),
                bytes_total: rng.gen(),
                bytes_free: rng.gen(),
                throttle_bytes_s: rng.gen_bool(0.5).then(|| rng.gen()),
            }],
            counters: counters(rng),
        },
        ReplyKind::Offset => Response::Offset {
            offset: rng.gen_bool(0.5).then(|| rng.gen()),
        },
        ReplyKind::Allocated => Response::Allocated { bytes: rng.gen() },
        ReplyKind::Written => Response::Written { boot_id: rng.gen() },
        ReplyKind::Objects => Response::Objects {
            fids: (0..rng.gen_range(0..4)).map(|_| ino(rng)).collect(),
            done: rng.gen(),
        },
        ReplyKind::Scrubbed => Response::Scrubbed {
            bytes: rng.gen(),
            next: rng.gen_bool(0.5).then(|| rng.gen()),
            damaged: (0..rng.gen_range(0..3))
                .map(|_| Damage {
                    fid: ino(rng),
                    target: rng.gen_range(0..4),
                    offset: rng.gen(),
                    stored_crc: rng.gen(),
                    actual_crc: rng.gen(),
                })
                .collect(),
        },
        ReplyKind::Space => Response::Space {
            targets: (0..rng.gen_range(0..4))
                .map(|_| TargetSpace {
                    bytes_total: rng.gen(),
                    bytes_free: rng.gen(),
                })
                .collect(),
        },
        ReplyKind::ScrubStatus => Response::ScrubStatus {
            scrubbed_bytes: rng.gen(),
            damaged_blocks: rng.gen(),
            passes: rng.gen(),
            rate_bytes_s: rng.gen(),
        },
        ReplyKind::Done => Response::Done,
        ReplyKind::LocalFiles => Response::LocalFiles {
            flags: (0..rng.gen_range(0..8))
                .map(|_| rng.gen_range(0..4))
                .collect(),
        },
        ReplyKind::Granted => Response::Granted {
            pieces: (0..rng.gen_range(0..4))
                .map(|i| stripefs_wire::GrantPiece {
                    fd: i,
                    offset: rng.gen_range(0..1 << 30),
                    len: rng.gen_range(1..1 << 20),
                })
                .collect(),
        },
        ReplyKind::Features => Response::Features {
            features: Features(rng.gen()),
        },
        ReplyKind::Statfs => Response::Statfs {
            inodes: rng.gen(),
            files: rng.gen(),
            dirs: rng.gen(),
        },
    };
    (r, 0)
}
