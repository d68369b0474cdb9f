//! List reads: many noncontiguous ranges of one file in one request per data server
//! (the MPI-IO layer's noncontiguous reads).

use super::*;

impl InodeIo {
    /// Reads many extents `(file offset, length)` into `out`, one after another (`out`
    /// holds their lengths added up): each data server gets one `ReadList` request per
    /// batch of up to `MAX_LIST_EXTENTS` block-aligned ranges instead of a request per
    /// extent. Bytes at or past the end of the file read as zeros. Every block is checked
    /// against its stored CRC, as in [`InodeIo::read`]; the handle's own writes still in
    /// flight to the extents are waited for first.
    pub fn read_list(
        &self,
        cred: &Cred,
        extents: &[(u64, u64)],
        out: &mut [u8],
    ) -> Result<(), WireError> {
        let total: u64 = extents.iter().map(|e| e.1).sum();
        assert_eq!(total, out.len() as u64, "out holds the extents");
        out.fill(0);
        let hi = extents.iter().map(|e| e.0 + e.1).max().unwrap_or(0);
        let lo = extents.iter().map(|e| e.0).min().unwrap_or(0);
        if hi == lo {
            return Ok(());
        }
        // Read whole (bytes past the end read as zeros): the size is asked for whenever
        // the extents reach past the known one.
        if let Some(b) = self.read_inline(cred, lo, hi - lo, true)? {
            let mut at = 0;
            for &(offset, len) in extents {
                let from = ((offset - lo) as usize).min(b.len());
                let to = ((offset - lo + len) as usize).min(b.len());
                out[at..at + (to - from)].copy_from_slice(&b[from..to]);
                at += len as usize;
            }
            return Ok(());
        }
        let (_, size) = self.clamp(cred, lo, hi - lo, true)?;
        self.wait_overlapping(lo, hi);
        // The block-aligned chunks of every extent, per server, merged where they meet.
        let clipped: Vec<(u64, u64)> = extents
            .iter()
            .map(|&(o, l)| (o, size.saturating_sub(o).min(l)))
            .collect();
        let mut wanted: Vec<Vec<(u64, u64)>> = vec![Vec::new(); self.places.len()];
        for &(o, l) in clipped.iter().filter(|e| e.1 > 0) {
            for c in self.geo.read_chunks(o, l) {
                wanted[c.place as usize].push((c.local, c.len));
            }
        }
        let mut ranges: Vec<Vec<(u64, u64)>> = Vec::with_capacity(wanted.len());
        for mut w in wanted {
            w.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::new();
            for (local, len) in w {
                match merged.last_mut() {
                    // Overlapping or touching, and still one request's worth.
                    Some((s, n))
                        if local <= *s + *n
                            && (local + len).max(*s + *n) - *s <= MAX_DATA_BYTES as u64 =>
                    {
                        *n = (local + len).max(*s + *n) - *s;
                    }
                    _ => merged.push((local, len)),
                }
            }
            ranges.push(merged);
        }
        // One job per batch: at most MAX_LIST_EXTENTS ranges and MAX_DATA_BYTES.
        let mut jobs = Vec::new();
        for (place, rs) in ranges.iter().enumerate() {
            let mut batch: Vec<(u64, u64)> = Vec::new();
            let mut bytes = 0u64;
            for &r in rs {
                if !batch.is_empty()
                    && (batch.len() == MAX_LIST_EXTENTS || bytes + r.1 > MAX_DATA_BYTES as u64)
                {
                    jobs.push((place as u32, std::mem::take(&mut batch)));
                    bytes = 0;
                }
                batch.push(r);
                bytes += r.1;
            }
            if !batch.is_empty() {
                jobs.push((place as u32, batch));
            }
        }
        let waits: Vec<_> = jobs
            .into_iter()
            .map(|(place, batch)| (place, self.submit_read_list(cred, place, batch)))
            .collect();
        // (place, local start, bytes) of every range, sorted for lookup.
        let mut got: Vec<Vec<(u64, Arc<Vec<u8>>)>> = vec![Vec::new(); self.places.len()];
        for (place, w) in waits {
            got[place as usize].extend(w.wait()?);
        }
        for g in &mut got {
            g.sort_unstable_by_key(|r| r.0);
        }
        let mut at = 0usize;
        for (&(o, l), &(_, n)) in extents.iter().zip(&clipped) {
            if n > 0 {
                let dst = &mut out[at..at + n as usize];
                for c in self.geo.read_chunks(o, n) {
                    let rs = &got[c.place as usize];
                    let i = rs.partition_point(|r| r.0 <= c.local) - 1;
                    let (base, data) = (rs[i].0, &rs[i].1);
                    self.scatter(&c, base, data, o, dst);
                }
            }
            at += l as usize;
        }
        Ok(())
    }

    /// One `ReadList` of `ranges` (local offsets) to the server of `place`: each range's
    /// bytes, checked against their CRCs.
    pub(super) fn submit_read_list(
        &self,
        cred: &Cred,
        place: u32,
        ranges: Vec<(u64, u64)>,
    ) -> Completion<Vec<(u64, Arc<Vec<u8>>)>> {
        let (p, c) = promise();
        let pool = self.pool(place).clone();
        let (cred, fid, unit, geo) = (cred.clone(), self.ino, self.geo.unit(), self.geo);
        let what = self.describe();
        self.inner
            .exec
            .submit(self.places[place as usize], move || {
                let total: u64 = ranges.iter().map(|r| r.1).sum();
                let mut buf = vec![0u8; total as usize];
                let req = Request::ReadList {
                    fid,
                    unit,
                    ranges: ranges.iter().map(|&(o, l)| (o, l as u32)).collect(),
                };
                let r = checksum_retried(&mut buf, |buf| {
                    let (resp, got) = pool.call(&cred, req.clone(), &[], buf)?;
                    let Response::ReadData { crcs } = resp else {
                        return Err(unexpected(&pool, "ReadList", &resp));
                    };
                    if got as u64 != total || crcs.len() as u64 != total / BLOCK_BYTES as u64 {
                        return Err(WireError::new(
                            ErrorCode::UnexpectedMessage,
                            format!(
                                "{} answered a list read of {total} bytes with {got} bytes and {} checksums",
                                pool.name(),
                                crcs.len()
                            ),
                        ));
                    }
                    let mut out = Vec::with_capacity(ranges.len());
                    let (mut at, mut ci) = (0usize, 0usize);
                    let buf = &*buf;
                    for &(local, len) in &ranges {
                        let (n, blocks) = (len as usize, (len / BLOCK_BYTES as u64) as usize);
                        let bytes = &buf[at..at + n];
                        verify(&crcs[ci..ci + blocks], bytes, local, &pool, &geo, place, &what)?;
                        out.push((local, Arc::new(bytes.to_vec())));
                        at += n;
                        ci += blocks;
                    }
                    Ok(out)
                });
                p.fulfil(r.map_err(|e| {
                    context(
                        e,
                        format!("list read of {} ranges of {what} from {}", ranges.len(), pool.name()),
                    )
                }));
            });
        c
    }
}
