//! Sparse files on one inode: fallocate (allocate, punch a hole, zero a range),
//! SEEK_DATA/SEEK_HOLE, and the space a file occupies on the data servers.
//!
//! A global range maps to one local extent per data server (stripefs-layout), so each
//! operation is one request per server touched, all in flight at once. A search for data
//! or a hole asks every server of the layout from its own start and keeps the smallest
//! answer (`Stripe::seek_starts` / `seek_result`): one parallel round trip.
//!
//! Invariant: a punch is fenced like a pending write over its range, so overlapping
//! reads and writes of this client wait for it and no readahead of the old bytes stays
//! cached.

use super::{call_servers, lock, now_ns, overlaps, unexpected, InodeIo, Pending};
use crate::exec::promise;
use crate::pool::ServerPool;
use crate::{Inner, MAX_FILE_BYTES};
use stripefs_wire::{op, Attr, Cred, ErrorCode, FileType, Request, Response, WireError};

fn done(pool: &ServerPool, resp: Response) -> Result<(), WireError> {
    match resp {
        Response::Done => Ok(()),
        other => Err(unexpected(pool, "fallocate", &other)),
    }
}

fn offset(pool: &ServerPool, resp: Response) -> Result<Option<u64>, WireError> {
    match resp {
        Response::Offset { offset } => Ok(offset),
        other => Err(unexpected(pool, "Seek", &other)),
    }
}

fn bytes(pool: &ServerPool, resp: Response) -> Result<u64, WireError> {
    match resp {
        Response::Allocated { bytes } => Ok(bytes),
        other => Err(unexpected(pool, "Allocated", &other)),
    }
}

/// Bytes the file of `attr` occupies on its data servers (data and checksums), for
/// `st_blocks`. Only the servers holding stripe units of `[0, size)` are asked (all at
/// once): the others hold no bytes of the file, since a write past the size moves it
/// and a truncate cuts every server's object. So a small file costs one round trip to
/// one server, not one to each server of its layout (a stat through the mount asks
/// this for every non-empty file). A file of size 0 costs none. Left out: space that
/// fallocate with KEEP_SIZE reserved past the end on servers holding nothing below it.
pub(crate) fn allocated_bytes(inner: &Inner, cred: &Cred, attr: &Attr) -> Result<u64, WireError> {
    if let Some(known) = allocated_known(attr) {
        return Ok(known);
    }
    let Some(layout) = attr.layout.as_ref() else {
        return Ok(0);
    };
    if let Some(s) = layout
        .servers
        .iter()
        .find(|s| s.0 as usize >= inner.data.len())
    {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!(
                "{} is striped over data server {}, which the cluster file does not list",
                attr.ino, s.0
            ),
        ));
    }
    let geo = crate::chunk::Geometry::new(attr.ino, layout)?;
    let reqs = geo.stripe().extents(0, attr.size).into_iter().map(|e| {
        let server = layout.servers[e.place as usize].0 as usize;
        (server, Request::Allocated { fid: attr.ino })
    });
    let per_server = call_servers(inner, cred, "Allocated", &attr.ino.to_string(), reqs, bytes)?;
    Ok(per_server.iter().sum())
}

/// [`allocated_bytes`] where the attributes alone tell it (anything but a regular file
/// with bytes on its data servers); `None` where the data servers must be asked.
pub(crate) fn allocated_known(attr: &Attr) -> Option<u64> {
    if attr.layout.is_none() || attr.ftype != FileType::File || attr.size == 0 {
        return Some(0);
    }
    // Kept with the inode: as many bytes as the file has.
    attr.inline.is_some().then_some(attr.size)
}

impl InodeIo {
    /// The end of `[offset, offset + len)`, refusing an empty range or one past the
    /// largest file.
    fn range_end(&self, offset: u64, len: u64) -> Result<u64, WireError> {
        if len == 0 {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!("fallocate of 0 bytes on {}", self.describe()),
            ));
        }
        offset
            .checked_add(len)
            .filter(|&e| e <= MAX_FILE_BYTES)
            .ok_or_else(|| {
                WireError::new(
                    ErrorCode::FileTooBig,
                    format!(
                        "range of {len} bytes at {offset} of {} ends beyond {MAX_FILE_BYTES}",
                        self.describe()
                    ),
                )
            })
    }

    /// One request per server the global range touches, made by `make(local, len)`.
    fn on_range(
        &self,
        cred: &Cred,
        op: &'static str,
        offset: u64,
        len: u64,
        make: impl Fn(u64, u64) -> Request,
    ) -> Result<(), WireError> {
        let reqs = self.geo.stripe().extents(offset, len);
        let reqs = reqs.iter().map(|e| (e.place, make(e.local, e.len)));
        self.on_places(cred, op, reqs.collect(), done).map(|_| ())
    }

    /// Records on the metadata server a size of at least `size` and a new mtime.
    fn record_change(&self, cred: &Cred, size: u64) -> Result<(), WireError> {
        let req = op::ExtendSize {
            ino: self.ino,
            size,
            mtime_ns: now_ns(),
        };
        match self.inner.meta_op(cred, req)? {
            Some(a) => self.note_meta_size(a.size),
            None => {
                let mut st = lock(&self.state);
                st.meta_size = st.meta_size.max(size);
            }
        }
        Ok(())
    }

    /// Reserves space on the data servers for `[offset, offset + len)` (fallocate mode
    /// 0, or with `keep_size` FALLOC_FL_KEEP_SIZE), so that writing it later does not
    /// fail for lack of space; without `keep_size` the size grows to the range's end.
    pub fn allocate(
        &self,
        cred: &Cred,
        offset: u64,
        len: u64,
        keep_size: bool,
    ) -> Result<(), WireError> {
        let end = self.range_end(offset, len)?;
        // Space is the data servers': an inline file moves there first.
        self.move_out(cred)?;
        let unit = self.geo.unit();
        self.on_range(cred, "Allocate", offset, len, |local, len| {
            Request::Allocate {
                fid: self.ino,
                unit,
                offset: local,
                len,
            }
        })?;
        if !keep_size && end > self.size() {
            self.record_change(cred, end)?;
        }
        Ok(())
    }

    /// Makes `[offset, offset + len)` read as zeros and frees its space on the data
    /// servers (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE). The size does not change.
    pub fn punch(&self, cred: &Cred, offset: u64, len: u64) -> Result<(), WireError> {
        let end = self.range_end(offset, len)?;
        self.move_out(cred)?;
        self.fenced(offset, end, || self.punch_servers(cred, offset, len))?;
        self.record_change(cred, 0)
    }

    /// Makes `[offset, offset + len)` read as zeros with its space allocated
    /// (FALLOC_FL_ZERO_RANGE): a punch, then an allocation; without `keep_size` the size
    /// grows to the range's end.
    pub fn zero_range(
        &self,
        cred: &Cred,
        offset: u64,
        len: u64,
        keep_size: bool,
    ) -> Result<(), WireError> {
        let end = self.range_end(offset, len)?;
        self.move_out(cred)?;
        self.fenced(offset, end, || self.punch_servers(cred, offset, len))?;
        self.allocate(cred, offset, len, true)?;
        let size = if keep_size { 0 } else { end };
        self.record_change(cred, size)
    }

    fn punch_servers(&self, cred: &Cred, offset: u64, len: u64) -> Result<(), WireError> {
        let unit = self.geo.unit();
        self.on_range(cred, "Punch", offset, len, |local, len| Request::Punch {
            fid: self.ino,
            unit,
            offset: local,
            len,
        })
    }

    /// Runs `f`, which changes the bytes of `[lo, hi)` on the servers, fenced like a
    /// pending write: earlier overlapping writes land first, overlapping reads and
    /// writes wait for it, and readahead cells of the old bytes are dropped.
    fn fenced<T>(&self, lo: u64, hi: u64, f: impl FnOnce() -> T) -> T {
        self.wait_overlapping(lo, hi);
        let (p, c) = promise::<()>();
        {
            let mut st = lock(&self.state);
            st.drop_cells(|cell| !overlaps(cell.span, lo, hi));
            st.pending.push_back(Pending {
                lo,
                hi,
                bytes: 0,
                done: c,
                gather: None,
                exact: None,
            });
        }
        let r = f();
        // The fence only orders; its own error goes to the caller, not to the latch.
        p.fulfil(Ok(()));
        r
    }

    /// SEEK_DATA (`hole` false) or SEEK_HOLE (`hole` true) from `offset`: the first
    /// offset at or after it that holds stored data, or that is in a hole (the end of
    /// the file is one). `None` (ENXIO) at or past the end of the file, or when no data
    /// follows. Writes queued here are waited for first, so they count as data.
    pub fn seek(&self, cred: &Cred, offset: u64, hole: bool) -> Result<Option<u64>, WireError> {
        self.wait_all();
        let size = self.size();
        if offset >= size {
            return Ok(None);
        }
        if self.is_inline() {
            // Inline bytes are all data.
            return Ok(Some(if hole { size } else { offset }));
        }
        let (unit, stripe) = (self.geo.unit(), *self.geo.stripe());
        let reqs = stripe.seek_starts(offset).map(|(place, start)| {
            let req = Request::Seek {
                fid: self.ino,
                unit,
                offset: start,
                hole,
            };
            (place, req)
        });
        let answers = self.on_places(cred, "Seek", reqs.collect(), self::offset)?;
        // Places were asked in order, so the i-th answer is place i's.
        let found = answers
            .iter()
            .enumerate()
            .filter_map(|(place, a)| a.map(|local| (place as u32, local)));
        let at = stripe.seek_result(found);
        if at.is_some_and(|g| g < offset) {
            return Err(WireError::new(
                ErrorCode::UnexpectedMessage,
                format!(
                    "a data server answered a seek from {offset} of {} with an earlier offset",
                    self.describe()
                ),
            ));
        }
        Ok(if hole {
            Some(at.map_or(size, |g| g.min(size)))
        } else {
            at.filter(|&g| g < size)
        })
    }
}
