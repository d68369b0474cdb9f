//! Writes: write-behind within a window, gathering of small writes into list writes,
//! and the submission of each chunk to its data server (TCP, pipe or direct).

use super::*;

impl InodeIo {
    /// Queues `data` for writing at `offset`; returns once it is queued and in-flight
    /// bytes are under `window`.
    pub fn write(
        &self,
        cred: &Cred,
        offset: u64,
        data: &[u8],
        window: u64,
    ) -> Result<(), WireError> {
        self.write_from(cred, offset, Src::Slice(data), window)
    }

    /// As [`InodeIo::write`], with the bytes in a buffer the client may keep: when they
    /// all go to one server as one extent, that buffer is sent as it is (no copy).
    pub fn write_buf(
        &self,
        cred: &Cred,
        offset: u64,
        buf: IoBuf,
        window: u64,
    ) -> Result<(), WireError> {
        self.write_from(cred, offset, Src::Owned(Some(buf)), window)
    }

    pub(super) fn write_from(
        &self,
        cred: &Cred,
        offset: u64,
        mut src: Src<'_>,
        window: u64,
    ) -> Result<(), WireError> {
        let total = src.bytes().len();
        let end = offset
            .checked_add(total as u64)
            .filter(|&e| e <= MAX_FILE_BYTES)
            .ok_or_else(|| {
                WireError::new(
                    ErrorCode::FileTooBig,
                    format!(
                        "write of {total} bytes at {offset} to {} ends beyond {MAX_FILE_BYTES}",
                        self.describe()
                    ),
                )
            })?;
        self.take_latched()?;
        if total == 0 {
            return Ok(());
        }
        if self.write_inline(cred, offset, src.bytes())? {
            return Ok(());
        }
        // Only writes that share a byte with this one must land before it: writers of
        // other records of the same blocks or stripes (interleaved ranks) do not wait.
        let chunks = self.spanned_write_chunks(offset, total as u64);
        self.wait_for(|p| p.touches_any(&chunks));
        {
            let mut st = lock(&self.state);
            st.unflushed_end = Some(st.unflushed_end.unwrap_or(0).max(end));
            st.unflushed_mtime_ns = now_ns();
        }
        let mut queued = 0;
        for (chunk, (lo, hi)) in chunks {
            // A direct write goes at the disk's pace with the buffer held until then: a
            // deeper queue than DIRECT_WINDOW_BYTES keeps the disk no busier, only more
            // memory in buffers (fresh ones cost page faults and zeroing).
            let local = self.pool(chunk.place).local.as_ref();
            let window = match local {
                Some(l) if l.writes_direct(chunk.len as usize) => window.min(DIRECT_WINDOW_BYTES),
                _ => window,
            };
            self.wait_room(chunk.len, window);
            if chunk.len < GATHER_BELOW_BYTES {
                let bytes = self.gather(&chunk, offset, src.bytes());
                self.gather_write(cred, chunk, bytes, lo, hi);
                queued += chunk.len;
                continue;
            }
            // Page-aligned, so that a short-circuit direct write sends it to the disk
            // as it is. The caller's own buffer when it is this chunk, in order.
            let bytes = match &mut src {
                Src::Owned(b) if chunk.len as usize == total && self.in_order(&chunk, offset) => {
                    b.take().expect("taken by the only chunk")
                }
                _ => IoBuf::gathered(
                    chunk.len as usize,
                    self.parts_of(&chunk, offset, src.bytes()),
                ),
            };
            // A large chunk goes out alone; what is gathered for its place goes first,
            // so that the server sees the place's writes in order.
            let place = chunk.place;
            self.send_gathers(|p| p.gather == Some(place));
            let done = self.submit_write(cred, chunk, bytes);
            let mut st = lock(&self.state);
            // Under the same lock as the push: no cell overlapping a pending write stays
            // cached (it may hold bytes from before the write), and `plan_read` and
            // `prefetch` create none while the write is pending.
            st.drop_cells(|c| !overlaps(c.span, lo, hi));
            st.pending.push_back(Pending {
                lo,
                hi,
                bytes: chunk.len,
                done,
                gather: None,
                exact: Some((place, vec![(chunk.local, chunk.local + chunk.len)])),
            });
            st.inflight_bytes += chunk.len;
            queued += chunk.len;
        }
        assert_eq!(queued, total as u64, "write chunks add up to the write");
        self.take_latched()
    }

    /// Adds a small chunk to its place's gathered writes (sending them first if it would
    /// not fit, or was gathered under other credentials), and sends them once full.
    pub(super) fn gather_write(&self, cred: &Cred, chunk: Chunk, bytes: Vec<u8>, lo: u64, hi: u64) {
        let place = chunk.place;
        let mut st = lock(&self.state);
        let full = st.gathers.get(&place).is_some_and(|g| {
            g.bytes + chunk.len > GATHER_MAX_BYTES
                || g.extents.len() >= GATHER_MAX_EXTENTS
                || g.cred != *cred
        });
        if full {
            drop(st);
            self.send_gathers(|p| p.gather == Some(place));
            st = lock(&self.state);
        }
        st.drop_cells(|c| !overlaps(c.span, lo, hi));
        st.inflight_bytes += chunk.len;
        let send = if let Some(g) = st.gathers.get_mut(&place) {
            match g.extents.last_mut() {
                Some((at, b)) if *at + b.len() as u64 == chunk.local => b.extend_from_slice(&bytes),
                _ => g.extents.push((chunk.local, bytes)),
            }
            g.bytes += chunk.len;
            let send = g.bytes >= GATHER_MAX_BYTES || g.extents.len() >= GATHER_MAX_EXTENTS;
            let p = st
                .pending
                .iter_mut()
                .find(|p| p.gather == Some(place))
                .expect("a gather has its pending entry");
            p.lo = p.lo.min(lo);
            p.hi = p.hi.max(hi);
            p.bytes += chunk.len;
            let (_, ranges) = p.exact.as_mut().expect("a gather knows its ranges");
            match ranges.last_mut() {
                Some(r) if r.1 == chunk.local => r.1 += chunk.len,
                _ => ranges.push((chunk.local, chunk.local + chunk.len)),
            }
            send
        } else {
            let (promise, done) = promise();
            st.gathers.insert(
                place,
                Gather {
                    cred: cred.clone(),
                    extents: vec![(chunk.local, bytes)],
                    bytes: chunk.len,
                    promise,
                },
            );
            st.pending.push_back(Pending {
                lo,
                hi,
                bytes: chunk.len,
                done,
                gather: Some(place),
                exact: Some((place, vec![(chunk.local, chunk.local + chunk.len)])),
            });
            false
        };
        drop(st);
        if send {
            self.send_gathers(|p| p.gather == Some(place));
        }
    }

    /// Sends one place's gathered writes: one Write if they are one extent, else one
    /// WriteList; the gather's promise reports the outcome.
    pub(super) fn submit_gather(&self, place: u32, g: Gather) {
        let pool = self.pool(place).clone();
        let (fid, unit) = (self.ino, self.geo.unit());
        let what = self.describe();
        let boots = self.boots.clone();
        let Gather {
            cred,
            extents,
            bytes,
            promise,
        } = g;
        self.inner
            .exec
            .submit(self.places[place as usize], move || {
                let first = extents[0].0;
                let mut crcs = Vec::new();
                for (at, b) in &extents {
                    crcs.extend(piece_crcs(*at, b));
                }
                // The extents go out from their own buffers, one after another (one
                // vectored write), never copied together.
                let n = extents.len();
                let parts: Vec<&[u8]> = extents.iter().map(|(_, b)| b.as_slice()).collect();
                // A server on this host takes the list through its pipe (no TCP stack, no
                // copy into a socket), and one extent of whole blocks the whole-block pipe
                // (spliced into the files where they are holes); anything but success
                // there goes over TCP.
                let block = BLOCK_BYTES as u64;
                let whole = n == 1 && first % block == 0 && parts[0].len() as u64 % block == 0;
                let piped = pool.local.as_ref().and_then(|sc| match whole {
                    true => sc.write(fid.0, unit, first, parts[0], &crcs),
                    false => {
                        let offsets: Vec<u64> = extents.iter().map(|(at, _)| *at).collect();
                        sc.write_list(fid.0, unit, &offsets, &parts, &crcs)
                    }
                });
                let tcp = || {
                    let req = if n == 1 {
                        Request::Write {
                            fid,
                            unit,
                            offset: first,
                            crcs,
                        }
                    } else {
                        Request::WriteList {
                            fid,
                            unit,
                            extents: extents
                                .iter()
                                .map(|(at, b)| (*at, b.len() as u32))
                                .collect(),
                            crcs,
                        }
                    };
                    pool.call_parts(&cred, req, &parts, &mut [])
                };
                let r = match piped {
                    Some(boot_id) => note_boot(&boots, place, boot_id, &pool),
                    None => tcp().and_then(|(resp, _)| match resp {
                        Response::Written { boot_id } => note_boot(&boots, place, boot_id, &pool),
                        other => Err(unexpected(&pool, "Write", &other)),
                    }),
                };
                promise.fulfil(r.map_err(|e| {
                    context(
                        e,
                        format!(
                            "writing {bytes} bytes of {what} in {n} extents from local offset \
                         {first} to {}",
                            pool.name()
                        ),
                    )
                }));
            });
    }

    /// Copies the bytes of `chunk` out of a caller's buffer that starts at `offset`.
    pub(super) fn gather(&self, chunk: &Chunk, offset: u64, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(chunk.len as usize);
        self.parts_of(chunk, offset, data)
            .for_each(|p| out.extend_from_slice(p));
        assert_eq!(out.len() as u64, chunk.len);
        out
    }

    /// The pieces of a caller's buffer that starts at `offset` that make `chunk`, in order.
    /// Whether `chunk`'s segments are the write at `offset` in order, from its first
    /// byte on: its bytes are then the caller's buffer as it is.
    pub(super) fn in_order(&self, chunk: &Chunk, offset: u64) -> bool {
        let mut at = offset;
        self.geo
            .segments(chunk.place, chunk.local, chunk.len)
            .all(|s| {
                let next = s.global == at;
                at += s.len;
                next
            })
    }

    pub(super) fn parts_of<'a>(
        &'a self,
        chunk: &Chunk,
        offset: u64,
        data: &'a [u8],
    ) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.geo
            .segments(chunk.place, chunk.local, chunk.len)
            .map(move |s| {
                let at = (s.global - offset) as usize;
                &data[at..at + s.len as usize]
            })
    }

    pub(super) fn submit_write(&self, cred: &Cred, chunk: Chunk, bytes: IoBuf) -> Completion<()> {
        let (p, c) = promise();
        let pool = self.pool(chunk.place).clone();
        let (cred, fid, unit) = (cred.clone(), self.ino, self.geo.unit());
        let what = self.describe();
        let global = self.geo.stripe().to_global(chunk.place, chunk.local);
        let boots = self.boots.clone();
        self.inner
            .exec
            .submit(self.places[chunk.place as usize], move || {
                // Checksums are computed here, on the worker, so that they run in parallel.
                let crcs = piece_crcs(chunk.local, &bytes);
                let tcp = |offset: u64, part: &[u8], crcs: Vec<u32>| {
                    let req = Request::Write {
                        fid,
                        unit,
                        offset,
                        crcs,
                    };
                    pool.call(&cred, req, part, &mut [])
                        .and_then(|(resp, _)| match resp {
                            Response::Written { boot_id } => {
                                note_boot(&boots, chunk.place, boot_id, &pool)
                            }
                            other => Err(unexpected(&pool, "Write", &other)),
                        })
                };
                // A server on this host takes the whole blocks through its pipe; a partial
                // first or last block goes over TCP, so a write with partial edges takes
                // the pipe only when its middle is large enough to pay for the extra
                // request (an unaligned record of tens of KiB goes over TCP whole).
                let block = BLOCK_BYTES as u64;
                let (lo, hi) = (chunk.local, chunk.local + bytes.len() as u64);
                let (a, b) = (lo.div_ceil(block) * block, hi / block * block);
                let worth = (a == lo && b == hi) || b.saturating_sub(a) >= MIN_SPLIT_PIPE_BYTES;
                let piped = match pool.local.as_ref() {
                    Some(sc) if a < b && worth => {
                        let head = (a - lo) as usize;
                        let skip = usize::from(head > 0);
                        let n = ((b - a) / block) as usize;
                        let mid = &bytes[head..head + (b - a) as usize];
                        sc.write(fid.0, unit, a, mid, &crcs[skip..skip + n])
                            .map(|boot_id| (boot_id, head, (b - lo) as usize))
                    }
                    _ => None,
                };
                let r = match piped {
                    Some((boot_id, head, tail)) => note_boot(&boots, chunk.place, boot_id, &pool)
                        .and_then(|()| {
                            if head == 0 {
                                return Ok(());
                            }
                            let part = &bytes[..head];
                            tcp(lo, part, piece_crcs(lo, part))
                        })
                        .and_then(|()| {
                            if tail == bytes.len() {
                                return Ok(());
                            }
                            let part = &bytes[tail..];
                            tcp(b, part, piece_crcs(b, part))
                        }),
                    None => tcp(lo, &bytes, crcs),
                };
                p.fulfil(r.map_err(|e| {
                    context(
                        e,
                        format!(
                            "writing {} bytes of {what} at file offset {global} (local {}) to {}",
                            chunk.len,
                            chunk.local,
                            pool.name()
                        ),
                    )
                }));
            });
        c
    }

    // ---- reads ----
}
