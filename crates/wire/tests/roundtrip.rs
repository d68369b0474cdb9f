//! Property tests of the wire encoding: every valid request and response survives an
//! encode/decode round trip unchanged, and decoding arbitrary or mutated bytes never
//! panics (it succeeds or returns a `FrameError`). Proptest prints the failing case and
//! its seed; set PROPTEST_RNG_SEED to replay one.

use proptest::collection::vec;
use proptest::prelude::*;
use stripefs_wire::*;

fn inode() -> impl Strategy<Value = InodeId> {
    any::<u64>().prop_map(InodeId)
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof!["[a-z0-9._-]{1,20}", "\\PC{0,12}", Just(String::new())]
}

fn cred() -> impl Strategy<Value = Cred> {
    (any::<u32>(), any::<u32>(), vec(any::<u32>(), 0..8)).prop_map(|(uid, gid, groups)| Cred {
        uid,
        gid,
        groups,
    })
}

fn hint() -> impl Strategy<Value = LayoutHint> {
    (
        any::<Option<u32>>(),
        any::<Option<u32>>(),
        any::<Option<u32>>(),
        proptest::option::of(proptest::collection::vec(any::<u32>(), 0..6)),
        proptest::option::of(prop_oneof![Just(Policy::Spread), Just(Policy::Local)]),
        any::<Option<u32>>(),
    )
        .prop_map(|(s, c, i, servers, policy, inline_bytes)| LayoutHint {
            stripe_size_bytes: s,
            stripe_count: c,
            start_server: i,
            servers,
            policy,
            inline_bytes,
        })
}

fn ftype() -> impl Strategy<Value = FileType> {
    prop_oneof![
        Just(FileType::File),
        Just(FileType::Dir),
        Just(FileType::Symlink),
        Just(FileType::Fifo),
        Just(FileType::Socket),
        Just(FileType::BlockDev),
        Just(FileType::CharDev)
    ]
}

fn set_time() -> impl Strategy<Value = Option<SetTime>> {
    prop_oneof![
        Just(None),
        Just(Some(SetTime::Now)),
        any::<i64>().prop_map(|t| Some(SetTime::AtNs(t)))
    ]
}

fn set_attrs() -> impl Strategy<Value = SetAttrs> {
    (
        any::<Option<u32>>(),
        any::<Option<u32>>(),
        any::<Option<u32>>(),
        any::<Option<u64>>(),
        set_time(),
        set_time(),
        any::<bool>(),
    )
        .prop_map(|(mode, uid, gid, size, atime, mtime, via)| SetAttrs {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            via_write_handle: via,
        })
}

fn namespace_request() -> impl Strategy<Value = Request> {
    prop_oneof![
        any::<[u8; 32]>().prop_map(|nonce| Request::Hello { nonce }),
        any::<[u8; 32]>().prop_map(|proof| Request::Auth { proof }),
        Just(Request::Ping {}),
        (inode(), name()).prop_map(|(parent, name)| Request::Lookup { parent, name }),
        inode().prop_map(|ino| Request::GetAttr { ino }),
        ("\\PC{0,40}", any::<bool>()).prop_map(|(path, follow)| Request::Resolve { path, follow }),
        (inode(), name(), any::<u32>()).prop_map(|(parent, name, mode)| Request::Mkdir {
            parent,
            name,
            mode
        }),
        (inode(), name(), any::<u32>(), any::<bool>(), hint()).prop_map(
            |(parent, name, mode, exclusive, layout)| Request::Create {
                parent,
                name,
                mode,
                exclusive,
                layout
            }
        ),
        (
            inode(),
            name(),
            any::<u32>(),
            hint(),
            any::<u64>(),
            any::<(bool, bool, bool)>()
        )
            .prop_map(
                |(parent, name, mode, layout, session, (exclusive, read, write))| {
                    Request::CreateOpen {
                        parent,
                        name,
                        mode,
                        exclusive,
                        layout,
                        session,
                        read,
                        write,
                    }
                }
            ),
        (inode(), name(), any::<u32>(), ftype(), any::<u32>()).prop_map(
            |(parent, name, mode, ftype, rdev)| Request::Mknod {
                parent,
                name,
                mode,
                ftype,
                rdev,
            }
        ),
        (inode(), name(), name()).prop_map(|(parent, name, target)| Request::Symlink {
            parent,
            name,
            target
        }),
        inode().prop_map(|ino| Request::Readlink { ino }),
        (inode(), inode(), name()).prop_map(|(ino, parent, name)| Request::Link {
            ino,
            parent,
            name
        }),
        (inode(), name()).prop_map(|(parent, name)| Request::Unlink { parent, name }),
        (inode(), name()).prop_map(|(parent, name)| Request::Rmdir { parent, name }),
    ]
}

fn more_request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (inode(), name(), inode(), name(), any::<bool>()).prop_map(|(sp, sn, dp, dn, nr)| {
            Request::Rename {
                src_parent: sp,
                src_name: sn,
                dst_parent: dp,
                dst_name: dn,
                noreplace: nr,
            }
        }),
        (inode(), set_attrs()).prop_map(|(ino, attrs)| Request::SetAttr { ino, attrs }),
        (inode(), name(), any::<u32>()).prop_map(|(ino, after, limit)| Request::ReadDir {
            ino,
            after,
            limit
        }),
        (inode(), any::<u64>(), any::<bool>(), any::<bool>()).prop_map(
            |(ino, session, read, write)| Request::Open {
                ino,
                session,
                read,
                write
            }
        ),
        (inode(), any::<u64>()).prop_map(|(ino, session)| Request::Close { ino, session }),
        (inode(), any::<u64>(), any::<i64>()).prop_map(|(ino, size, mtime_ns)| {
            Request::ExtendSize {
                ino,
                size,
                mtime_ns,
            }
        }),
        (inode(), any::<u64>(), any::<i64>()).prop_map(|(ino, size, mtime_ns)| {
            Request::ExtendSizeUnsynced {
                ino,
                size,
                mtime_ns,
            }
        }),
        (inode(), hint()).prop_map(|(ino, hint)| Request::SetLayout { ino, hint }),
        Just(Request::MetaStatus {}),
        (inode(), any::<u32>()).prop_map(|(ino, mask)| Request::Access { ino, mask }),
        (inode(), any::<u32>(), any::<u64>(), any::<u32>()).prop_map(|(fid, unit, offset, len)| {
            Request::Read {
                fid,
                unit,
                offset,
                len,
            }
        }),
        (inode(), any::<u32>(), any::<u64>()).prop_map(|(fid, unit, local_size)| {
            Request::Truncate {
                fid,
                unit,
                local_size,
            }
        }),
        inode().prop_map(|fid| Request::Remove { fid }),
        inode().prop_map(|fid| Request::Fsync { fid }),
        Just(Request::DataStatus {}),
        inode().prop_map(|fid| Request::DropCache { fid }),
        sparse_request(),
    ]
}

fn sparse_request() -> impl Strategy<Value = Request> {
    let range = || (inode(), any::<u32>(), any::<u64>(), any::<u64>());
    prop_oneof![
        range().prop_map(|(fid, unit, offset, len)| Request::Punch {
            fid,
            unit,
            offset,
            len
        }),
        range().prop_map(|(fid, unit, offset, len)| Request::Allocate {
            fid,
            unit,
            offset,
            len
        }),
        (inode(), any::<u32>(), any::<u64>(), any::<bool>()).prop_map(
            |(fid, unit, offset, hole)| Request::Seek {
                fid,
                unit,
                offset,
                hole
            }
        ),
        inode().prop_map(|fid| Request::Allocated { fid }),
        Just(Request::SessionOpen {}),
        any::<u64>().prop_map(|session| Request::SessionRenew { session }),
        any::<u64>().prop_map(|session| Request::SessionEnd { session }),
        "[a-z0-9.-]{0,40}".prop_map(|host| Request::ClientHost { host }),
        (any::<[u8; 32]>(), prop::collection::vec(any::<u8>(), 0..64))
            .prop_map(|(nonce, token)| Request::TokenHello { nonce, token }),
        any::<u64>().prop_map(|id| Request::TokenRevoke { id }),
        (any::<u8>(), any::<i8>())
            .prop_map(|(codec, level)| Request::SetCompression { codec, level }),
        (
            any::<u64>(),
            any::<u32>(),
            prop::collection::vec((any::<u64>(), any::<u32>()), 0..4)
        )
            .prop_map(|(f, unit, ranges)| Request::ReadList {
                fid: InodeId(f),
                unit,
                ranges
            }),
        (
            any::<u64>(),
            prop::collection::vec((any::<u64>(), any::<u32>(), vec(any::<u8>(), 0..32)), 0..4),
            any::<i64>(),
            any::<bool>()
        )
            .prop_map(|(i, pieces, mtime_ns, durable)| {
                let pieces = pieces
                    .into_iter()
                    .map(|(offset, crc, data)| InlinePiece { offset, crc, data })
                    .collect();
                Request::write_inline(InodeId(i), pieces, mtime_ns, durable)
            }),
        any::<u64>().prop_map(|session| Request::SyncMeta { session }),
        any::<u64>().prop_map(|i| Request::ReadInline { ino: InodeId(i) }),
        any::<u64>().prop_map(|i| Request::Uninline { ino: InodeId(i) }),
    ]
}

/// A request and the bulk data length its frame announces (only writes carry data).
fn request() -> impl Strategy<Value = (Request, u32)> {
    let write = (
        inode(),
        any::<u32>(),
        any::<u64>(),
        vec(any::<u8>(), 0..20_000),
    )
        .prop_map(|(fid, unit, offset, data)| {
            let offset = offset % (1 << 50);
            let req = Request::Write {
                fid,
                unit,
                offset,
                crcs: piece_crcs(offset, &data),
            };
            (req, data.len() as u32)
        });
    prop_oneof![
        namespace_request().prop_map(|r| (r, 0)),
        more_request().prop_map(|r| (r, 0)),
        write
    ]
}

fn counters() -> impl Strategy<Value = Counters> {
    any::<[u64; 5]>().prop_map(
        |[requests, errors, bytes_read, bytes_written, write_requests]| Counters {
            requests,
            errors,
            bytes_read,
            bytes_written,
            write_requests,
        },
    )
}

fn attr() -> impl Strategy<Value = Attr> {
    let layout = proptest::option::of((any::<u32>(), vec(any::<u32>(), 0..8)).prop_map(
        |(s, v)| Layout {
            stripe_size_bytes: s,
            servers: v.into_iter().map(ServerId).collect(),
        },
    ));
    (
        (inode(), ftype(), any::<[u32; 4]>(), any::<u64>()),
        (any::<[i64; 3]>(), any::<u32>()),
        layout,
        hint(),
        proptest::option::of((
            any::<u32>(),
            any::<u32>(),
            proptest::option::of(vec(any::<u8>(), 0..64)),
        )),
    )
        .prop_map(
            |(
                (ino, ftype, [mode, nlink, uid, gid], size),
                ([a, m, c], rdev),
                layout,
                dir_layout,
                inline,
            )| Attr {
                ino,
                ftype,
                mode,
                nlink,
                uid,
                gid,
                size,
                atime_ns: a,
                mtime_ns: m,
                ctime_ns: c,
                rdev,
                layout,
                dir_layout,
                inline: inline.map(|(max, crc, data)| Inline { max, crc, data }),
            },
        )
}

fn target_status() -> impl Strategy<Value = TargetStatus> {
    ("\\PC{0,30}", any::<[u64; 3]>(), any::<Option<u64>>()).prop_map(
        |(path, [bytes_used, bytes_total, bytes_free], throttle_bytes_s)| TargetStatus {
            path,
            bytes_used,
            bytes_total,
            bytes_free,
            throttle_bytes_s,
        },
    )
}

/// A successful response and the bulk data length its frame announces.
fn response() -> impl Strategy<Value = (Response, u32)> {
    let entry =
        (name(), inode(), ftype()).prop_map(|(name, ino, ftype)| DirEntry { name, ino, ftype });
    prop_oneof![
        Just((Response::Done, 0)),
        (any::<[u8; 32]>(), any::<[u8; 32]>())
            .prop_map(|(nonce, proof)| (Response::Challenge { nonce, proof }, 0)),
        (any::<bool>(), any::<Option<u32>>(), "\\PC{0,10}").prop_map(|(m, id, version)| {
            let role = if m { Role::Meta } else { Role::Data };
            let server_id = id.map(ServerId);
            (
                Response::Pong {
                    role,
                    server_id,
                    version,
                },
                0,
            )
        }),
        attr().prop_map(|a| (Response::Attr(a), 0)),
        "\\PC{0,50}".prop_map(|t| (Response::Target(t), 0)),
        (vec(entry, 0..10), any::<bool>())
            .prop_map(|(entries, done)| (Response::Entries { entries, done }, 0)),
        (any::<[u64; 5]>(), counters()).prop_map(|([i, f, d, o, db], counters)| {
            let r = Response::MetaStatus {
                inodes: i,
                files: f,
                dirs: d,
                open_files: o,
                db_bytes: db,
                counters,
            };
            (r, 0)
        }),
        vec(any::<u32>(), 0..64).prop_map(|crcs| {
            let n = crcs.len() as u32 * BLOCK_BYTES;
            (Response::ReadData { crcs }, n)
        }),
        (any::<u32>(), vec(target_status(), 0..4), counters()).prop_map(|(id, targets, c)| {
            let r = Response::DataStatus {
                server_id: ServerId(id),
                targets,
                counters: c,
            };
            (r, 0)
        }),
        any::<Option<u64>>().prop_map(|offset| (Response::Offset { offset }, 0)),
        any::<u64>().prop_map(|bytes| (Response::Allocated { bytes }, 0)),
        (any::<u64>(), any::<u64>())
            .prop_map(|(session, lease_ms)| (Response::Session { session, lease_ms }, 0)),
    ]
}

fn error_code() -> impl Strategy<Value = ErrorCode> {
    proptest::sample::select(ErrorCode::ALL)
}

fn opcode() -> impl Strategy<Value = Opcode> {
    proptest::sample::select(Opcode::ALL)
}

/// Splits a frame into its decoded header and body, as a receiver would.
fn split(frame: &[u8]) -> Result<(Header, &[u8]), FrameError> {
    let h = Header::decode(frame)?;
    let end = HEADER_LEN
        .saturating_add(h.body_len as usize)
        .min(frame.len());
    Ok((h, &frame[HEADER_LEN..end]))
}

/// The full receive path; `Ok` holds whether the frame was a response.
fn decode_any(frame: &[u8]) -> Result<bool, FrameError> {
    let (h, body) = split(frame)?;
    h.check_body(body)?;
    if h.is_response() {
        let _answer = decode_response(&h, body)?;
        Ok(true)
    } else {
        let env = decode_request(&h, body)?;
        // Validation refuses with a WireError; it must not panic either.
        let _ = env.req.validate(h.data_len);
        Ok(false)
    }
}

fn fix_crcs(frame: &mut [u8]) {
    if frame.len() < HEADER_LEN {
        return;
    }
    let body_len = u32::from_le_bytes([frame[24], frame[25], frame[26], frame[27]]) as usize;
    let end = HEADER_LEN.saturating_add(body_len).min(frame.len());
    let crc = crc32c(&frame[HEADER_LEN..end]);
    frame[32..36].copy_from_slice(&crc.to_le_bytes());
    let crc = crc32c(&frame[..36]);
    frame[36..40].copy_from_slice(&crc.to_le_bytes());
}

/// One edit to a valid frame.
#[derive(Clone, Debug)]
enum Mutation {
    FlipBit(usize),
    SetByte(usize, u8),
    Truncate(usize),
    Append(Vec<u8>),
    /// Sets a header length field (24 = body_len, 28 = data_len) to a value.
    Length(usize, u32),
    /// Writes a little-endian u64 at an offset (a length prefix, tag or variant index).
    Word(usize, u64),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let len_value = prop_oneof![
        any::<u32>(),
        Just(0u32),
        Just(MAX_BODY_BYTES),
        Just(MAX_BODY_BYTES + 1),
        Just(MAX_DATA_BYTES + 1),
        Just(u32::MAX)
    ];
    let word = prop_oneof![any::<u64>(), Just(u64::MAX), Just(1u64 << 60), 0u64..64];
    prop_oneof![
        any::<usize>().prop_map(Mutation::FlipBit),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::SetByte(i, b)),
        any::<usize>().prop_map(Mutation::Truncate),
        vec(any::<u8>(), 1..64).prop_map(Mutation::Append),
        (prop_oneof![Just(24usize), Just(28usize)], len_value)
            .prop_map(|(at, v)| Mutation::Length(at, v)),
        (any::<usize>(), word).prop_map(|(i, w)| Mutation::Word(i, w)),
    ]
}

fn apply(frame: &mut Vec<u8>, m: &Mutation) {
    let len = frame.len();
    match m {
        Mutation::FlipBit(i) => frame[i % len] ^= 1 << (i % 8),
        Mutation::SetByte(i, b) => frame[i % len] = *b,
        Mutation::Truncate(i) => frame.truncate(i % len),
        Mutation::Append(bytes) => frame.extend_from_slice(bytes),
        Mutation::Length(at, v) if len >= HEADER_LEN => {
            frame[*at..*at + 4].copy_from_slice(&v.to_le_bytes())
        }
        Mutation::Length(..) => {}
        Mutation::Word(i, w) => {
            let at = HEADER_LEN + i % len.saturating_sub(HEADER_LEN).max(1);
            let end = (at + 8).min(len);
            if at < end {
                frame[at..end].copy_from_slice(&w.to_le_bytes()[..end - at]);
            }
        }
    }
}

fn any_frame() -> impl Strategy<Value = Vec<u8>> {
    let req = (any::<u64>(), cred(), request())
        .prop_map(|(id, cred, (req, n))| encode_request(id, &Envelope { cred, req }, n));
    let ok = (any::<u64>(), opcode(), response())
        .prop_map(|(id, op, (r, n))| encode_response(id, op, &Ok(r), n));
    let err = (any::<u64>(), opcode(), error_code(), "\\PC{0,40}")
        .prop_map(|(id, op, c, m)| encode_response(id, op, &Err(WireError::new(c, m)), 0));
    prop_oneof![req, ok, err]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn requests_round_trip(id in any::<u64>(), cred in cred(), (req, n) in request()) {
        let env = Envelope { cred, req };
        let frame = encode_request(id, &env, n);
        let (h, body) = split(&frame).unwrap();
        prop_assert_eq!(h.request_id, id);
        prop_assert_eq!(h.data_len, n);
        prop_assert!(!h.is_response());
        prop_assert_eq!(body.len(), frame.len() - HEADER_LEN);
        prop_assert_eq!(decode_request(&h, body).unwrap(), env.clone());
        if let Request::Write { .. } = env.req {
            prop_assert!(env.req.validate(n).is_ok() || env.req.validate(n).unwrap_err().code
                == ErrorCode::InvalidArgument);
        }
    }

    #[test]
    fn responses_round_trip(id in any::<u64>(), op in opcode(), (resp, n) in response()) {
        let ok = Ok(resp);
        let frame = encode_response(id, op, &ok, n);
        let (h, body) = split(&frame).unwrap();
        prop_assert_eq!((h.request_id, h.opcode, h.status, h.data_len), (id, op as u16, 0, n));
        prop_assert_eq!(decode_response(&h, body).unwrap(), ok);
    }

    #[test]
    fn errors_round_trip(id in any::<u64>(), op in opcode(), code in error_code(),
                         msg in "\\PC{0,5000}") {
        let err = Err(WireError::new(code, msg.clone()));
        let frame = encode_response(id, op, &err, 0);
        let (h, body) = split(&frame).unwrap();
        prop_assert_eq!(h.status, code as u32);
        let back = decode_response(&h, body).unwrap().unwrap_err();
        prop_assert_eq!(back.code, code);
        // Long messages are cut at a character boundary, never split a character.
        prop_assert!(msg.starts_with(&back.message));
        prop_assert!(back.message.len() <= 4096);
    }

    #[test]
    fn random_bytes_never_panic(bytes in vec(any::<u8>(), 0..512)) {
        let _ = decode_any(&bytes);
    }

    #[test]
    fn random_body_under_valid_header_never_panics(
        op in opcode(), response in any::<bool>(), body in vec(any::<u8>(), 0..512),
    ) {
        let h = Header {
            version: VERSION,
            opcode: op as u16,
            flags: if response { FLAG_RESPONSE } else { 0 },
            body_len: body.len() as u32,
            body_crc: crc32c(&body),
            ..Header::default()
        };
        let mut frame = h.encode().to_vec();
        frame.extend_from_slice(&body);
        let _ = decode_any(&frame);
    }

    #[test]
    fn mutated_frames_never_panic(
        frame in any_frame(), edits in vec(mutation(), 1..5), fix in any::<bool>(),
    ) {
        let mut frame = frame;
        for m in &edits {
            if frame.is_empty() {
                break;
            }
            apply(&mut frame, m);
        }
        if fix {
            fix_crcs(&mut frame);
        }
        let _ = decode_any(&frame);
    }

    #[test]
    fn single_edits_without_crc_repair_are_refused(
        frame in any_frame(), at in any::<usize>(), bit in 0u8..8,
    ) {
        let mut bad = frame.clone();
        let i = at % bad.len();
        bad[i] ^= 1 << bit;
        // CRC32C catches every single-bit error in the header and the body.
        prop_assert!(decode_any(&bad).is_err(), "bit {} of byte {} flipped: accepted", bit, i);
        prop_assert!(decode_any(&frame).is_ok());
    }
}

/// The body carries postcard's variant *index* (a varint) for Request, Response and
/// ErrorCode, not the opcode or code number. Appending variants keeps old indices; inserting one in the
/// middle would silently change the meaning of every later one for older peers. Pin them.
#[test]
fn variant_indices_are_pinned() {
    let cred_len = 3; // uid 0, gid 0, empty groups list: one varint byte each
    for (index, &op) in Opcode::ALL.iter().enumerate() {
        // The declaration order of Request is the order of Opcode::ALL.
        let frame = encode_request(
            1,
            &Envelope {
                cred: Cred::root(),
                req: ping_like(op),
            },
            0,
        );
        let body = &frame[HEADER_LEN..];
        let variant = varint_at(body, cred_len);
        assert_eq!(variant as usize, index, "{op:?}");
    }
    let expected_ops: Vec<(u16, &str)> =
        Opcode::ALL.iter().map(|&o| (o as u16, o.name())).collect();
    assert_eq!(
        expected_ops, PINNED_OPCODES,
        "opcode table changed: append, never renumber"
    );
    // Response variants, by index, as docs/protocol.md lists them.
    for (index, resp) in [
        (0u32, Response::Done),
        (7, Response::ReadData { crcs: vec![] }),
        (9, Response::Offset { offset: None }),
        (10, Response::Allocated { bytes: 0 }),
        (11, Response::Written { boot_id: 0 }),
        (
            12,
            Response::Objects {
                fids: vec![],
                done: true,
            },
        ),
        (
            13,
            Response::Scrubbed {
                bytes: 0,
                next: None,
                damaged: vec![],
            },
        ),
        (
            14,
            Response::ScrubStatus {
                scrubbed_bytes: 0,
                damaged_blocks: 0,
                passes: 0,
                rate_bytes_s: 0,
            },
        ),
        (
            15,
            Response::Session {
                session: 0,
                lease_ms: 0,
            },
        ),
        (
            16,
            Response::LocalityStatus {
                host: String::new(),
                same_host_received: 0,
                same_host_sent: 0,
                other_host_received: 0,
                other_host_sent: 0,
                short_circuit_opens: 0,
            },
        ),
        (17, Response::DataServers { servers: vec![] }),
        (18, Response::Xattr { value: vec![] }),
        (19, Response::XattrNames { names: vec![] }),
        (20, Response::Space { targets: vec![] }),
        (
            21,
            Response::EntriesPlus {
                entries: vec![],
                done: true,
            },
        ),
    ] {
        let frame = encode_response(1, Opcode::Ping, &Ok(resp.clone()), 0);
        let body = &frame[HEADER_LEN..];
        let variant = varint_at(body, 0);
        assert_eq!(variant, index, "{resp:?}");
    }
    let codes: Vec<u32> = ErrorCode::ALL.iter().map(|&c| c as u32).collect();
    assert_eq!(
        codes, PINNED_ERROR_CODES,
        "error table changed: append, never renumber"
    );
    for (index, &code) in ErrorCode::ALL.iter().enumerate() {
        let frame = encode_response(1, Opcode::Ping, &Err(WireError::new(code, "")), 0);
        let body = &frame[HEADER_LEN..];
        assert_eq!(varint_at(body, 0) as usize, index);
    }
}

/// The LEB128 varint (postcard's integer encoding) at `at`.
fn varint_at(bytes: &[u8], at: usize) -> u32 {
    let mut out = 0u32;
    for (i, b) in bytes[at..].iter().take(5).enumerate() {
        out |= ((b & 0x7f) as u32) << (7 * i);
        if b & 0x80 == 0 {
            return out;
        }
    }
    panic!("no varint at {at}")
}

/// The opcode table as released. Add new ones at the end of both the macro table and
/// this list.
const PINNED_OPCODES: &[(u16, &str)] = &[
    (1, "Hello"),
    (2, "Auth"),
    (3, "Ping"),
    (10, "Lookup"),
    (11, "GetAttr"),
    (12, "Resolve"),
    (13, "Mkdir"),
    (14, "Create"),
    (15, "Mknod"),
    (16, "Symlink"),
    (17, "Readlink"),
    (18, "Link"),
    (19, "Unlink"),
    (20, "Rmdir"),
    (21, "Rename"),
    (22, "SetAttr"),
    (23, "ReadDir"),
    (24, "Open"),
    (25, "Close"),
    (26, "ExtendSize"),
    (27, "SetLayout"),
    (28, "MetaStatus"),
    (29, "Access"),
    (60, "Write"),
    (61, "Read"),
    (62, "Truncate"),
    (63, "Remove"),
    (64, "Fsync"),
    (65, "DataStatus"),
    (66, "DropCache"),
    (67, "CreateOpen"),
    (70, "Punch"),
    (71, "Allocate"),
    (72, "Seek"),
    (73, "Allocated"),
    (74, "ListObjects"),
    (75, "Scrub"),
    (76, "ScrubStatus"),
    (30, "SessionOpen"),
    (31, "SessionRenew"),
    (32, "SessionEnd"),
    (4, "ClientHost"),
    (80, "WriteList"),
    (82, "LocalityStatus"),
    (33, "DataServers"),
    (90, "SetCompression"),
    (81, "ReadList"),
    (5, "TokenHello"),
    (91, "TokenRevoke"),
    (92, "TokenAllows"),
    (34, "WriteInline"),
    (35, "ReadInline"),
    (36, "Uninline"),
    (37, "GetXattr"),
    (38, "ListXattr"),
    (39, "SetXattr"),
    (40, "RemoveXattr"),
    (41, "OpenPath"),
    (42, "Exchange"),
    (43, "WriteInlineUnsynced"),
    (44, "SyncMeta"),
    (45, "ExtendSizeUnsynced"),
    (83, "Space"),
    (46, "ReadDirPlus"),
    (6, "Features"),
    (47, "Statfs"),
    (100, "LocalOpen"),
    (101, "LocalPipe"),
    (102, "LocalWrite"),
    (103, "LocalWriteList"),
    (104, "LocalDirect"),
    (105, "LocalDirectDone"),
];

const PINNED_ERROR_CODES: &[u32] = &[
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 100, 101, 102, 103, 104, 105, 200,
    201, 202, 203, 204, 106, 107, 18, 19, 20, 21, 22,
];

/// Some request with opcode `op`, fields zero.
fn ping_like(op: Opcode) -> Request {
    let ino = InodeId(0);
    let name = String::new();
    match op {
        Opcode::Hello => Request::Hello { nonce: [0; 32] },
        Opcode::Auth => Request::Auth { proof: [0; 32] },
        Opcode::Ping => Request::Ping {},
        Opcode::Lookup => Request::Lookup { parent: ino, name },
        Opcode::GetAttr => Request::GetAttr { ino },
        Opcode::Resolve => Request::Resolve {
            path: name,
            follow: false,
        },
        Opcode::Mkdir => Request::Mkdir {
            parent: ino,
            name,
            mode: 0,
        },
        Opcode::Create => Request::Create {
            parent: ino,
            name,
            mode: 0,
            exclusive: false,
            layout: LayoutHint::default(),
        },
        Opcode::Mknod => Request::Mknod {
            parent: ino,
            name,
            mode: 0,
            ftype: FileType::Fifo,
            rdev: 0,
        },
        Opcode::Symlink => Request::Symlink {
            parent: ino,
            name,
            target: String::new(),
        },
        Opcode::Readlink => Request::Readlink { ino },
        Opcode::Link => Request::Link {
            ino,
            parent: ino,
            name,
        },
        Opcode::Unlink => Request::Unlink { parent: ino, name },
        Opcode::Rmdir => Request::Rmdir { parent: ino, name },
        Opcode::Rename => Request::Rename {
            src_parent: ino,
            src_name: String::new(),
            dst_parent: ino,
            dst_name: name,
            noreplace: false,
        },
        Opcode::SetAttr => Request::SetAttr {
            ino,
            attrs: SetAttrs::default(),
        },
        Opcode::ReadDir => Request::ReadDir {
            ino,
            after: name,
            limit: 1,
        },
        Opcode::Open => Request::Open {
            ino,
            session: 0,
            read: true,
            write: false,
        },
        Opcode::Close => Request::Close { ino, session: 0 },
        Opcode::ExtendSize => Request::ExtendSize {
            ino,
            size: 0,
            mtime_ns: 0,
        },
        Opcode::ExtendSizeUnsynced => Request::ExtendSizeUnsynced {
            ino,
            size: 0,
            mtime_ns: 0,
        },
        Opcode::SetLayout => Request::SetLayout {
            ino,
            hint: LayoutHint::default(),
        },
        Opcode::ReadDirPlus => Request::ReadDirPlus {
            ino,
            after: String::new(),
            limit: 1,
        },
        Opcode::Space => Request::Space {},
        Opcode::Features => Request::Features {
            features: Features::NONE,
        },
        Opcode::Statfs => Request::Statfs {},
        Opcode::MetaStatus => Request::MetaStatus {},
        Opcode::Access => Request::Access { ino, mask: 0 },
        Opcode::Write => Request::Write {
            fid: ino,
            unit: 4096,
            offset: 0,
            crcs: vec![],
        },
        Opcode::WriteList => Request::WriteList {
            fid: ino,
            unit: 4096,
            extents: vec![(0, 1)],
            crcs: vec![0],
        },
        Opcode::Read => Request::Read {
            fid: ino,
            unit: 4096,
            offset: 0,
            len: 0,
        },
        Opcode::Truncate => Request::Truncate {
            fid: ino,
            unit: 4096,
            local_size: 0,
        },
        Opcode::Remove => Request::Remove { fid: ino },
        Opcode::Fsync => Request::Fsync { fid: ino },
        Opcode::DataStatus => Request::DataStatus {},
        Opcode::DropCache => Request::DropCache { fid: ino },
        Opcode::CreateOpen => Request::CreateOpen {
            parent: ino,
            name,
            mode: 0,
            exclusive: false,
            layout: LayoutHint::default(),
            session: 0,
            read: false,
            write: false,
        },
        Opcode::Punch => Request::Punch {
            fid: ino,
            unit: 4096,
            offset: 0,
            len: 1,
        },
        Opcode::Allocate => Request::Allocate {
            fid: ino,
            unit: 4096,
            offset: 0,
            len: 1,
        },
        Opcode::Seek => Request::Seek {
            fid: ino,
            unit: 4096,
            offset: 0,
            hole: false,
        },
        Opcode::Allocated => Request::Allocated { fid: ino },
        Opcode::ListObjects => Request::ListObjects {
            after: None,
            limit: 1,
        },
        Opcode::Scrub => Request::Scrub {
            fid: ino,
            target: 0,
            offset: 0,
        },
        Opcode::ScrubStatus => Request::ScrubStatus {},
        Opcode::SessionOpen => Request::SessionOpen {},
        Opcode::SessionRenew => Request::SessionRenew { session: 0 },
        Opcode::SessionEnd => Request::SessionEnd { session: 0 },
        Opcode::ClientHost => Request::ClientHost { host: "h".into() },
        Opcode::LocalityStatus => Request::LocalityStatus {},
        Opcode::DataServers => Request::DataServers {},
        Opcode::SetCompression => Request::SetCompression { codec: 0, level: 0 },
        Opcode::LocalOpen => Request::LocalOpen { fid: ino },
        Opcode::LocalPipe => Request::LocalPipe {},
        Opcode::LocalWrite => Request::LocalWrite {
            fid: ino,
            unit: 0,
            offset: 0,
            len: 0,
            crcs: vec![],
        },
        Opcode::LocalWriteList => Request::LocalWriteList {
            fid: ino,
            unit: 0,
            extents: vec![],
            crcs: vec![],
        },
        Opcode::LocalDirect => Request::LocalDirect {
            fid: ino,
            unit: 0,
            offset: 0,
            len: 0,
        },
        Opcode::LocalDirectDone => Request::LocalDirectDone { crcs: None },
        Opcode::ReadList => Request::ReadList {
            fid: ino,
            unit: 0,
            ranges: vec![],
        },
        Opcode::TokenHello => Request::TokenHello {
            nonce: [0; 32],
            token: vec![],
        },
        Opcode::TokenRevoke => Request::TokenRevoke { id: 0 },
        Opcode::TokenAllows => Request::TokenAllows {
            token: vec![],
            fid: ino,
            write: false,
        },
        Opcode::WriteInline => Request::WriteInline {
            ino,
            pieces: vec![],
            mtime_ns: 0,
        },
        Opcode::WriteInlineUnsynced => Request::WriteInlineUnsynced {
            ino,
            pieces: vec![],
            mtime_ns: 0,
        },
        Opcode::SyncMeta => Request::SyncMeta { session: 0 },
        Opcode::ReadInline => Request::ReadInline { ino },
        Opcode::Uninline => Request::Uninline { ino },
        Opcode::GetXattr => Request::GetXattr { ino, name },
        Opcode::ListXattr => Request::ListXattr { ino },
        Opcode::SetXattr => Request::SetXattr {
            ino,
            name,
            value: vec![],
            mode: 0,
        },
        Opcode::RemoveXattr => Request::RemoveXattr { ino, name },
        Opcode::OpenPath => Request::OpenPath {
            path: name,
            session: 7,
            read: true,
            write: false,
        },
        Opcode::Exchange => Request::Exchange {
            a_parent: ino,
            a_name: String::new(),
            a_ino: ino,
            b_parent: ino,
            b_name: name,
            b_ino: ino,
        },
    }
}

/// Regression: a write whose range runs past u64::MAX used to panic (overflow) inside
/// `pieces` before `validate` reached its range check. Found by stripefs-fuzz.
#[test]
fn write_past_the_largest_offset_is_refused_not_a_panic() {
    for (offset, len) in [
        (u64::MAX, 1u32),
        (u64::MAX - 10, 5),
        (u64::MAX - 4095, 4096),
    ] {
        let req = Request::Write {
            fid: InodeId(2),
            unit: 65536,
            offset,
            crcs: vec![0; 2],
        };
        let r = std::panic::catch_unwind(|| req.validate(len));
        assert!(r.is_ok(), "validate panicked at offset {offset} len {len}");
        let _ = pieces(offset, len as usize).count();
    }
    let req = Request::Write {
        fid: InodeId(2),
        unit: 65536,
        offset: u64::MAX,
        crcs: vec![0],
    };
    assert_eq!(req.validate(1).unwrap_err().code, ErrorCode::FileTooBig);
    // A write that ends exactly at the largest offset is still fine.
    let offset = u64::MAX - 5;
    let req = Request::Write {
        fid: InodeId(2),
        unit: 65536,
        offset,
        crcs: piece_crcs(offset, &[1; 5]),
    };
    assert!(req.validate(5).is_ok());
}

/// The rows of the table between `<!-- {tag}` and `<!-- /{tag} -->` in docs/protocol.md,
/// as (number, name, third column).
fn doc_table(tag: &str) -> Vec<(u32, String, String)> {
    let doc = include_str!("../../../docs/protocol.md");
    let start = doc
        .find(&format!("<!-- {tag}"))
        .expect("table start marker");
    let end = doc
        .find(&format!("<!-- /{tag} -->"))
        .expect("table end marker");
    doc[start..end]
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let n = cells.get(1)?.parse().ok()?;
            Some((n, cells.get(2)?.to_string(), cells.get(3)?.to_string()))
        })
        .collect()
}

#[test]
fn protocol_doc_matches_the_code() {
    let ops: Vec<(u32, String)> = doc_table("opcodes")
        .into_iter()
        .map(|(n, name, _)| (n, name))
        .collect();
    let code: Vec<(u32, String)> = Opcode::ALL
        .iter()
        .map(|&o| (o as u32, o.name().to_string()))
        .collect();
    assert_eq!(ops, code, "docs/protocol.md opcode table");
    let errors = doc_table("errors");
    assert_eq!(
        errors.len(),
        ErrorCode::ALL.len(),
        "docs/protocol.md error table"
    );
    for ((n, name, errno), &c) in errors.iter().zip(ErrorCode::ALL) {
        assert_eq!(*n, c as u32, "{name}");
        assert_eq!(name, &format!("{c:?}"));
        assert!(
            errno.ends_with(&format!("({})", c.errno())),
            "{name}: {errno}"
        );
    }
}

/// Device numbers survive Linux's 32-bit encoding for every major below 4096 and every
/// minor below 2^20, and the encoding is the kernel's (`new_encode_dev`).
#[test]
fn device_numbers_round_trip() {
    use stripefs_wire::{make_rdev, split_rdev};
    for major in (0..4096).step_by(7).chain([4095]) {
        for minor in (0..(1 << 20))
            .step_by(4099)
            .chain([255, 256, (1 << 20) - 1])
        {
            assert_eq!(split_rdev(make_rdev(major, minor)), (major, minor));
        }
    }
    // As libc's makedev folds them into 32 bits: 8:1 is 0x801, 1:259 is 0x100103.
    assert_eq!(make_rdev(8, 1), 0x801);
    assert_eq!(make_rdev(1, 259), 0x100103);
}

#[test]
fn list_writes_are_validated_against_their_data() {
    let list = |extents: Vec<(u64, u32)>, crcs: usize| Request::WriteList {
        fid: InodeId(9),
        unit: 65536,
        extents,
        crcs: vec![0; crcs],
    };
    // Two extents of 10 bytes each, one block piece each.
    assert!(list(vec![(0, 10), (8192, 10)], 2).validate(20).is_ok());
    // An extent across a block boundary has two pieces.
    assert!(list(vec![(4090, 10)], 2).validate(10).is_ok());
    for (req, data, what) in [
        (list(vec![], 0), 0, "no extents"),
        (list(vec![(0, 10)], 1), 11, "data longer than the extents"),
        (list(vec![(0, 10), (100, 0)], 1), 10, "an empty extent"),
        (list(vec![(4090, 10)], 1), 10, "a checksum short"),
        (
            list(vec![(u64::MAX - 2, 10)], 1),
            10,
            "past the largest offset",
        ),
        (
            list(vec![(0, 1); stripefs_wire::MAX_LIST_EXTENTS + 1], 1025),
            1025,
            "too many extents",
        ),
    ] {
        assert!(req.validate(data).is_err(), "{what} must be refused");
    }
}

/// What the operation table says of each row holds together: a change of the namespace
/// is a write for a scoped token and is never retried blindly unless its row says so;
/// only rows with bulk data carry it; every feature a row needs is a known one, with its
/// own bit; the group that serves a request is the one its route gives.
#[test]
fn the_operation_table_is_consistent() {
    let mut bits = 0u64;
    for &(f, name) in Features::KNOWN {
        assert_eq!(f.0.count_ones(), 1, "{name}");
        assert_eq!(bits & f.0, 0, "{name} reuses a bit");
        bits |= f.0;
        assert_eq!(Features::named(name), Some(f));
    }
    assert_eq!(Features::all().0, bits);
    for &op in Opcode::ALL {
        let req = ping_like(op);
        assert!(!op.replies().is_empty(), "{}", op.name());
        if op.metadata_mutation() {
            assert!(req.scope().writes, "{} changes the namespace", op.name());
        }
        if let Some(f) = op.feature() {
            assert!(Features::all().has(f), "{}: unknown feature", op.name());
        }
        assert!(
            !(op.bulk_in() && op.served_by() != ServedBy::Data),
            "{}",
            op.name()
        );
        let routed = match req.clone().route() {
            Route::ConnectionOp(o) => (Group::ConnectionOp, o.opcode(), Request::from(o)),
            Route::AnyOp(o) => (Group::AnyOp, o.opcode(), Request::from(o)),
            Route::MetaReadOp(o) => (Group::MetaReadOp, o.opcode(), Request::from(o)),
            Route::MetaWriteOp(o) => (Group::MetaWriteOp, o.opcode(), Request::from(o)),
            Route::MetaOp(o) => (Group::MetaOp, o.opcode(), Request::from(o)),
            Route::DataOp(o) => (Group::DataOp, o.opcode(), Request::from(o)),
            Route::SameHostOp(o) => (Group::SameHostOp, o.opcode(), Request::from(o)),
        };
        assert_eq!(routed, (op.group(), op, req), "{}", op.name());
    }
}
