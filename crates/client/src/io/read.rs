//! Reads: the local short-circuit path, the read plan over cached cells and pending
//! writes, readahead, and the submission of each chunk's read.

use super::*;

impl InodeIo {
    /// Reads into `buf` at `offset`; short only at end of file. `sequential` says the
    /// read starts where the handle's previous read ended, which enables readahead;
    /// `iobuf` that `buf` lies in an [`IoBuf`].
    pub fn read(
        &self,
        cred: &Cred,
        offset: u64,
        buf: &mut [u8],
        sequential: bool,
        iobuf: bool,
    ) -> Result<usize, WireError> {
        if let Some(b) = self.read_inline(cred, offset, buf.len() as u64, false)? {
            buf[..b.len()].copy_from_slice(&b);
            return Ok(b.len());
        }
        let (n, size) = self.clamp(cred, offset, buf.len() as u64, false)?;
        if n == 0 {
            return Ok(0);
        }
        if self.read_local(offset, &mut buf[..n as usize], iobuf) {
            return Ok(n as usize);
        }
        let parts = self.fetch(cred, offset, n, size, sequential)?;
        let out = &mut buf[..n as usize];
        let mut copied = 0;
        for (chunk, base, data) in &parts {
            copied += self.scatter(chunk, *base, data, offset, out);
        }
        assert_eq!(copied, n, "read pieces add up to the read");
        Ok(n as usize)
    }

    /// Reads `[offset, offset + out.len())` straight into `out` through the short-circuit
    /// path when every server holding those bytes offers it (the file's other servers may
    /// be anywhere), on the caller's thread: the kernel reads ahead in the object files,
    /// so no readahead cell, worker thread or buffer of ours stands between the server's
    /// files and the caller's buffer (only a partial first or last block goes through a
    /// block of its own). `false` when the
    /// read must go the usual way (some server is remote or refuses, or a block fails its
    /// checksum, which the server's path then reports); `out` is then rewritten by it.
    pub(super) fn read_local(&self, offset: u64, out: &mut [u8], iobuf: bool) -> bool {
        let block = BLOCK_BYTES as u64;
        let end = offset + out.len() as u64;
        let stripe = self.geo.stripe();
        let local_of = |place: u32| self.pool(place).local.as_ref().filter(|l| l.usable());
        let touched = stripe.extents(offset, out.len() as u64);
        if !touched.iter().all(|e| local_of(e.place).is_some()) {
            return false;
        }
        self.wait_overlapping(offset, end);
        let (fid, unit) = (self.ino.0, self.geo.unit());
        let mut edge = vec![0u8; 0];
        for piece in stripe.split(offset, out.len() as u64) {
            let Some(sc) = local_of(piece.place) else {
                return false;
            };
            let dst = &mut out[(piece.global - offset) as usize..][..piece.len as usize];
            // A unit is whole blocks, so local and global offsets share their block
            // alignment: the whole blocks `[a, b)` go straight into `dst`, a partial first
            // block `[lo, a)` and last block `[b, hi)` through `edge` (inside one block,
            // `[lo, hi)` is all first block; across one boundary, first and last).
            let (lo, hi) = (piece.local, piece.local + piece.len);
            let a = (lo.div_ceil(block) * block).min(hi);
            let b = (hi / block * block).max(a);
            let mut edge_read = |from: u64, to: u64, dst: &mut [u8]| {
                if from == to {
                    return true;
                }
                let start = from / block * block;
                edge.resize(block as usize, 0);
                if !sc.read(fid, unit, start, &mut edge, false) {
                    return false;
                }
                dst.copy_from_slice(&edge[(from - start) as usize..(to - start) as usize]);
                true
            };
            let (head, rest) = dst.split_at_mut((a - lo) as usize);
            let (middle, tail) = rest.split_at_mut((b - a) as usize);
            if !edge_read(lo, a, head)
                || (b > a && !sc.read(fid, unit, a, middle, iobuf))
                || !edge_read(b, hi, tail)
            {
                return false;
            }
        }
        true
    }

    /// Reads up to `len` bytes at `offset` like [`InodeIo::read`], but hands `f` the
    /// bytes where they arrived, in file order, instead of copying them into a buffer:
    /// for callers that copy them on anyway (a FUSE reply is copied by the kernel).
    pub fn read_with<R>(
        &self,
        cred: &Cred,
        offset: u64,
        len: u64,
        sequential: bool,
        f: impl FnOnce(&[&[u8]]) -> R,
    ) -> Result<R, WireError> {
        if let Some(b) = self.read_inline(cred, offset, len, false)? {
            return Ok(if b.is_empty() { f(&[]) } else { f(&[&b]) });
        }
        let (n, size) = self.clamp(cred, offset, len, false)?;
        if n == 0 {
            return Ok(f(&[]));
        }
        let parts = self.fetch(cred, offset, n, size, sequential)?;
        let mut pieces: Vec<(u64, &[u8])> = Vec::new();
        for (chunk, base, data) in &parts {
            pieces.extend(self.pieces(chunk, *base, data, offset, offset + n));
        }
        pieces.sort_unstable_by_key(|(at, _)| *at);
        let total: usize = pieces.iter().map(|(_, p)| p.len()).sum();
        assert_eq!(total as u64, n, "read pieces add up to the read");
        let slices: Vec<&[u8]> = pieces.into_iter().map(|(_, p)| p).collect();
        Ok(f(&slices))
    }

    /// The data of the chunks covering `[offset, offset + n)`: (chunk, local start of
    /// its buffer, buffer).
    pub(super) fn fetch(
        &self,
        cred: &Cred,
        offset: u64,
        n: u64,
        size: u64,
        sequential: bool,
    ) -> Result<Vec<Fetched>, WireError> {
        let end = offset + n;
        self.wait_overlapping(offset, end);
        let parts = self.plan_read(cred, offset, n, size, sequential);
        let mut out = Vec::with_capacity(parts.len());
        for (chunk, base, done, cell) in parts {
            match done.wait() {
                Ok(d) => out.push((chunk, base, d)),
                Err(e) => {
                    // A failed cell must not stay cached, or every retry would fail too.
                    lock(&self.state).drop_cells(|c| !matches!(c.data.try_get(), Some(Err(_))));
                    // A damaged block elsewhere in a cell (a whole stretch read for the
                    // cache) must not fail a read of other bytes: read just this read's
                    // blocks; their own damage is still an error.
                    if e.code != ErrorCode::Checksum || !cell {
                        return Err(e);
                    }
                    let own = self.submit_read(cred, chunk.place, chunk.local, chunk.len);
                    out.push((chunk, chunk.local, own.wait()?));
                }
            }
        }
        if sequential {
            lock(&self.state).drop_cells(|c| c.span.1 > end);
        }
        Ok(out)
    }

    /// How many of `len` bytes at `offset` exist, and the size that says so. A read
    /// that reaches past the known size asks the metadata server, since another client
    /// may have extended the file; without `whole` only one that starts at or past it
    /// does: one that starts before it returns what the known size holds (a short read,
    /// after which a reader asks again from the end, so no end of file is reported
    /// without asking).
    pub(super) fn clamp(
        &self,
        cred: &Cred,
        offset: u64,
        len: u64,
        whole: bool,
    ) -> Result<(u64, u64), WireError> {
        let mut size = self.size();
        if must_ask(offset, len, size, whole) {
            let attr = self.inner.getattr(cred, self.ino)?;
            self.note_meta_size(attr.size);
            size = self.size();
        }
        Ok((size.saturating_sub(offset).min(len), size))
    }

    /// Finds or issues the requests for a read: `(chunk, local start of its buffer,
    /// completion)`. Sequential reads go through whole cells, which are cached, and
    /// prefetch the cells ahead.
    pub(super) fn plan_read(
        &self,
        cred: &Cred,
        offset: u64,
        n: u64,
        size: u64,
        sequential: bool,
    ) -> Vec<ReadPart> {
        let mut st = lock(&self.state);
        if !sequential {
            st.drop_cells(|_| false);
            st.ra_window = 0;
        }
        let mut parts = Vec::new();
        for chunk in self.geo.read_chunks(offset, n) {
            let idx = chunk.local / self.geo.cell_bytes();
            let key = (chunk.place, idx);
            let cached = st
                .cells
                .get(&key)
                .filter(|c| c.local <= chunk.local && chunk.local + chunk.len <= c.local + c.len);
            if let Some(c) = cached {
                parts.push((chunk, c.local, c.data.clone(), true));
                continue;
            }
            let span = self.geo.cell_span(chunk.place, idx);
            let cell = self
                .geo
                .cell_range(chunk.place, idx, size)
                .filter(|_| sequential && st.first_overlap(span.0, span.1).is_none());
            match cell {
                Some((lo, len)) if lo <= chunk.local && chunk.local + chunk.len <= lo + len => {
                    let data = self.insert_cell(&mut st, cred, key, lo, len);
                    parts.push((chunk, lo, data, true));
                }
                _ => parts.push((
                    chunk,
                    chunk.local,
                    self.submit_read(cred, chunk.place, chunk.local, chunk.len),
                    false,
                )),
            }
        }
        if sequential {
            self.prefetch(&mut st, cred, offset + n, size);
        }
        parts
    }

    pub(super) fn insert_cell(
        &self,
        st: &mut State,
        cred: &Cred,
        key: (u32, u64),
        local: u64,
        len: u64,
    ) -> Completion<Arc<Vec<u8>>> {
        let data = self.submit_read(cred, key.0, local, len);
        let span = self.geo.cell_span(key.0, key.1);
        let old = st.cells.insert(
            key,
            Cell {
                local,
                len,
                span,
                data: data.clone(),
            },
        );
        st.cell_bytes_held += len;
        if let Some(old) = old {
            st.cell_bytes_held -= old.len;
        }
        data
    }

    /// Bounds readahead to end at `end` (`None`: the file size).
    pub fn set_readahead_limit(&self, end: Option<u64>) {
        lock(&self.state).ra_limit = end;
    }

    /// Issues reads of the cells of `[from, from + window)` not yet cached, growing the
    /// window, never past `size`, never over pending writes, and holding at most
    /// `ra_max` bytes plus one cell per server.
    pub(super) fn prefetch(&self, st: &mut State, cred: &Cred, from: u64, size: u64) {
        let start = self.geo.width() as u64 * self.geo.cell_bytes();
        st.ra_window = (st.ra_window * 2).max(start).min(self.ra_max.max(start));
        let to = from
            .saturating_add(st.ra_window)
            .min(size)
            .min(st.ra_limit.unwrap_or(u64::MAX));
        if to <= from {
            return;
        }
        let budget = self.ra_max + start;
        for key in self.geo.cells_of(from, to - from) {
            if st.cells.contains_key(&key) {
                continue;
            }
            let Some((lo, len)) = self.geo.cell_range(key.0, key.1, size) else {
                continue;
            };
            let span = self.geo.cell_span(key.0, key.1);
            if st.cell_bytes_held + len > budget || st.first_overlap(span.0, span.1).is_some() {
                continue;
            }
            self.insert_cell(st, cred, key, lo, len);
        }
    }

    pub(super) fn submit_read(
        &self,
        cred: &Cred,
        place: u32,
        local: u64,
        len: u64,
    ) -> Completion<Arc<Vec<u8>>> {
        let (p, c) = promise();
        let pool = self.pool(place).clone();
        let (cred, fid, unit, geo) = (cred.clone(), self.ino, self.geo.unit(), self.geo);
        let what = self.describe();
        self.inner
            .exec
            .submit(self.places[place as usize], move || {
                let mut buf = vec![0u8; len as usize];
                if let Some(sc) = pool.local.as_ref().filter(|l| l.usable()) {
                    if sc.read(fid.0, unit, local, &mut buf, false) {
                        p.fulfil(Ok(Arc::new(buf)));
                        return;
                    }
                }
                let req = Request::Read {
                    fid,
                    unit,
                    offset: local,
                    len: len as u32,
                };
                let r = checksum_retried(&mut buf, |buf| {
                    match pool.call(&cred, req.clone(), &[], buf)? {
                        (Response::ReadData { crcs }, got) => {
                            verify(&crcs, &buf[..got], local, &pool, &geo, place, &what)
                        }
                        (other, _) => Err(unexpected(&pool, "Read", &other)),
                    }
                });
                // Bytes past what the server returned are holes or lie past its object's end:
                // zeros, which `buf` already holds.
                p.fulfil(r.map(|()| Arc::new(buf)).map_err(|e| {
                    context(
                        e,
                        format!(
                    "reading {len} bytes of {what} at file offset {} (local {local}) from {}",
                    geo.stripe().to_global(place, local), pool.name()
                ),
                    )
                }));
            });
        c
    }

    /// Copies the part of `chunk` inside `[offset, offset + out.len())` from `data`,
    /// which holds local bytes from `base` on; returns the bytes copied.
    pub(super) fn scatter(
        &self,
        chunk: &Chunk,
        base: u64,
        data: &[u8],
        offset: u64,
        out: &mut [u8],
    ) -> u64 {
        let end = offset + out.len() as u64;
        let mut copied = 0;
        for (at, piece) in self.pieces(chunk, base, data, offset, end) {
            let dst = (at - offset) as usize;
            out[dst..dst + piece.len()].copy_from_slice(piece);
            copied += piece.len() as u64;
        }
        copied
    }

    /// The parts of `chunk`'s buffer `data` (starting at local offset `base`) that hold
    /// bytes of `[offset, end)` of the file, each with its file offset.
    pub(super) fn pieces<'d>(
        &self,
        chunk: &Chunk,
        base: u64,
        data: &'d [u8],
        offset: u64,
        end: u64,
    ) -> impl Iterator<Item = (u64, &'d [u8])> + 'd {
        let segments: Vec<_> = self
            .geo
            .segments(chunk.place, chunk.local, chunk.len)
            .collect();
        segments.into_iter().filter_map(move |s| {
            let lo = s.global.max(offset);
            let hi = (s.global + s.len).min(end);
            (lo < hi).then(|| {
                let src = (s.local + (lo - s.global) - base) as usize;
                (lo, &data[src..src + (hi - lo) as usize])
            })
        })
    }

    // ---- durability and size ----
}
