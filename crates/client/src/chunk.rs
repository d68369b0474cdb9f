//! Pure planning of striped I/O: which requests one file range becomes.
//!
//! A file range maps (through `stripefs_layout::Stripe::extents`) to one contiguous local
//! extent per data server. Each extent is cut at *cell* boundaries: cells are fixed,
//! unit-aligned slices of a server's local space of `cell_bytes` each, so one request
//! never crosses a cell and, with cells of one stripe unit, hits one storage target.
//! The same cells are the unit of readahead caching.

use crate::CHUNK_TARGET_BYTES;
use stripefs_layout::Stripe;
use stripefs_wire::{
    ErrorCode, InodeId, Layout, WireError, BLOCK_BYTES, LARGE_STRIPE_STEP, MAX_DATA_BYTES,
};

/// One request's worth of a file range: `len` bytes at `local` in server `place`'s space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chunk {
    pub place: u32,
    pub local: u64,
    pub len: u64,
}

/// A piece of a chunk that is contiguous in both local and global space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Segment {
    pub local: u64,
    pub global: u64,
    pub len: u64,
}

/// The striping geometry of one file.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    stripe: Stripe,
    unit: u32,
    cell_bytes: u64,
}

impl Geometry {
    /// Checks a layout from the metadata server (untrusted input) and derives the cells.
    pub fn new(ino: InodeId, layout: &Layout) -> Result<Geometry, WireError> {
        let unit = layout.stripe_size_bytes;
        let bad = |why: String| {
            WireError::new(
                ErrorCode::BadFrame,
                format!("{ino} has an unusable layout: {why}"),
            )
        };
        if let Some(why) = stripefs_wire::stripe_size_error(unit) {
            return Err(bad(why));
        }
        let width =
            u32::try_from(layout.servers.len()).map_err(|_| bad("too many servers".into()))?;
        let stripe = Stripe::new(unit as u64, width).map_err(|e| bad(e.to_string()))?;
        Ok(Geometry {
            stripe,
            unit,
            cell_bytes: cell_bytes(unit as u64),
        })
    }

    pub fn stripe(&self) -> &Stripe {
        &self.stripe
    }

    pub fn unit(&self) -> u32 {
        self.unit
    }

    pub fn width(&self) -> u32 {
        self.stripe.width()
    }

    pub fn cell_bytes(&self) -> u64 {
        self.cell_bytes
    }

    /// The requests that write exactly the global range `[offset, offset + len)`.
    pub fn write_chunks(&self, offset: u64, len: u64) -> Vec<Chunk> {
        let mut out = Vec::new();
        for e in self.stripe.extents(offset, len) {
            self.cut(e.place, e.local, e.len, &mut out);
        }
        assert_eq!(
            out.iter().map(|c| c.len).sum::<u64>(),
            len,
            "chunks cover the range"
        );
        out
    }

    /// Block-aligned requests that together read at least `[offset, offset + len)`.
    /// Stripe units are multiples of a block, so aligning in local space stays inside
    /// the same units and the extra bytes are simply not copied out.
    pub fn read_chunks(&self, offset: u64, len: u64) -> Vec<Chunk> {
        let block = BLOCK_BYTES as u64;
        let mut out = Vec::new();
        for e in self.stripe.extents(offset, len) {
            let lo = e.local / block * block;
            let hi = (e.local + e.len).div_ceil(block) * block;
            self.cut(e.place, lo, hi - lo, &mut out);
        }
        for c in &out {
            assert!(
                c.local % block == 0 && c.len % block == 0,
                "read chunk {c:?} aligned"
            );
        }
        out
    }

    /// Cuts a local extent at cell boundaries.
    fn cut(&self, place: u32, local: u64, len: u64, out: &mut Vec<Chunk>) {
        let end = local + len;
        let mut pos = local;
        while pos < end {
            let cell_end = (pos / self.cell_bytes + 1) * self.cell_bytes;
            let n = cell_end.min(end) - pos;
            assert!(n <= MAX_DATA_BYTES as u64);
            out.push(Chunk {
                place,
                local: pos,
                len: n,
            });
            pos += n;
        }
    }

    /// The local range of cell `idx` of `place`, clipped to a file of `size` bytes
    /// (rounded up to a block); `None` if the cell holds no bytes of the file.
    pub fn cell_range(&self, place: u32, idx: u64, size: u64) -> Option<(u64, u64)> {
        let block = BLOCK_BYTES as u64;
        let local_end = self.stripe.local_size(size, place).div_ceil(block) * block;
        let lo = idx * self.cell_bytes;
        let hi = ((idx + 1) * self.cell_bytes).min(local_end);
        (hi > lo).then_some((lo, hi - lo))
    }

    /// Cells of all places that hold bytes of the global range `[offset, offset + len)`.
    pub fn cells_of(&self, offset: u64, len: u64) -> Vec<(u32, u64)> {
        let mut out = Vec::new();
        for e in self.stripe.extents(offset, len) {
            let first = e.local / self.cell_bytes;
            let last = (e.local + e.len - 1) / self.cell_bytes;
            out.extend((first..=last).map(|idx| (e.place, idx)));
        }
        out
    }

    /// The global span `[lo, hi)` that local range `[local, local + len)` of `place` lies
    /// in. Pieces of other places interleave inside it, so it is an over-estimate.
    pub fn global_span(&self, place: u32, local: u64, len: u64) -> (u64, u64) {
        assert!(len > 0);
        let lo = self.stripe.to_global(place, local);
        let hi = self.stripe.to_global(place, local + len - 1) + 1;
        (lo, hi)
    }

    /// The global span of a whole cell.
    pub fn cell_span(&self, place: u32, idx: u64) -> (u64, u64) {
        self.global_span(place, idx * self.cell_bytes, self.cell_bytes)
    }

    /// Splits a local range of `place` into pieces contiguous in global space.
    pub fn segments(&self, place: u32, local: u64, len: u64) -> impl Iterator<Item = Segment> + '_ {
        let unit = self.unit as u64;
        let end = local + len;
        let mut pos = local;
        std::iter::from_fn(move || {
            if pos >= end {
                return None;
            }
            let n = (unit - pos % unit).min(end - pos);
            let seg = Segment {
                local: pos,
                global: self.stripe.to_global(place, pos),
                len: n,
            };
            pos += n;
            Some(seg)
        })
    }
}

/// Cell size for a stripe unit: the unit itself when it is at least the target request
/// size and fits in one request, the largest multiple of the unit that fits in the
/// target when the unit is smaller, and for a unit larger than one request
/// ([`MAX_DATA_BYTES`]; a multiple of [`LARGE_STRIPE_STEP`]) its largest divisor that is
/// a multiple of that step and fits in one request, so that cells never cross a unit.
fn cell_bytes(unit: u64) -> u64 {
    let max = MAX_DATA_BYTES as u64;
    let cell = if unit > max {
        let step = LARGE_STRIPE_STEP as u64;
        assert!(
            unit % step == 0,
            "stripe unit {unit} over {max} not whole steps"
        );
        (1..=max / step)
            .rev()
            .map(|k| k * step)
            .find(|c| unit % c == 0)
            .expect("the step divides the unit")
    } else {
        let target = CHUNK_TARGET_BYTES.max(unit);
        target / unit * unit
    };
    assert!(
        unit % cell == 0 || cell % unit == 0,
        "cell {cell} of unit {unit}"
    );
    assert!(cell <= max && cell >= unit.min(CHUNK_TARGET_BYTES));
    cell
}

#[cfg(test)]
mod tests {
    use super::*;
    use stripefs_wire::ServerId;

    fn geo(unit: u32, width: u32) -> Geometry {
        let layout = Layout {
            stripe_size_bytes: unit,
            servers: (0..width).map(ServerId).collect(),
        };
        Geometry::new(InodeId(9), &layout).unwrap()
    }

    #[test]
    fn cells() {
        assert_eq!(cell_bytes(4096), 1 << 20);
        assert_eq!(cell_bytes(192 << 10), 960 << 10);
        assert_eq!(cell_bytes(4 << 20), 4 << 20);
        assert_eq!(cell_bytes(16 << 20), 16 << 20);
        // Units over one request: cut into the largest whole-MiB divisor that fits.
        assert_eq!(cell_bytes(256 << 20), 16 << 20);
        assert_eq!(cell_bytes(17 << 20), 1 << 20);
        assert_eq!(cell_bytes(24 << 20), 12 << 20);
        assert_eq!(cell_bytes(1 << 30), 16 << 20);
    }

    #[test]
    fn bad_layouts_are_refused() {
        let mut l = Layout {
            stripe_size_bytes: 1000,
            servers: vec![ServerId(0)],
        };
        assert!(Geometry::new(InodeId(3), &l).is_err());
        l.stripe_size_bytes = (16 << 20) + 4096;
        assert!(Geometry::new(InodeId(3), &l).is_err());
        l.stripe_size_bytes = 2 << 30;
        assert!(Geometry::new(InodeId(3), &l).is_err());
        l.stripe_size_bytes = 256 << 20;
        assert!(Geometry::new(InodeId(3), &l).is_ok());
        l.stripe_size_bytes = 4096;
        l.servers.clear();
        assert!(Geometry::new(InodeId(3), &l).is_err());
    }

    /// Every byte of a range is written once, through segments that map back to it.
    #[test]
    fn write_chunks_cover_exactly() {
        for (unit, width) in [
            (4096, 1),
            (4096, 3),
            (65536, 4),
            (1 << 20, 2),
            (192 << 10, 5),
            (24 << 20, 2),
        ] {
            let g = geo(unit, width);
            for (off, len) in [
                (0, 1),
                (5, 9000),
                (4095, 3 << 20),
                (123_456, 7 << 20),
                ((23 << 20) + 7, 3 << 20),
            ] {
                let mut seen = vec![false; len as usize];
                for c in g.write_chunks(off, len) {
                    assert!(c.len <= g.cell_bytes());
                    assert_eq!(
                        c.local / g.cell_bytes(),
                        (c.local + c.len - 1) / g.cell_bytes()
                    );
                    for s in g.segments(c.place, c.local, c.len) {
                        for i in 0..s.len {
                            let at = (s.global + i - off) as usize;
                            assert!(!seen[at]);
                            seen[at] = true;
                        }
                    }
                }
                assert!(
                    seen.iter().all(|&b| b),
                    "unit {unit} width {width} off {off} len {len}"
                );
            }
        }
    }

    #[test]
    fn read_chunks_are_aligned_and_cover() {
        let g = geo(65536, 4);
        let (off, len) = (70_000u64, 1_000_000u64);
        let mut covered = 0u64;
        for c in g.read_chunks(off, len) {
            for s in g.segments(c.place, c.local, c.len) {
                let lo = s.global.max(off);
                let hi = (s.global + s.len).min(off + len);
                covered += hi.saturating_sub(lo);
            }
        }
        assert_eq!(covered, len);
    }

    proptest::proptest! {
        /// Write chunks tile the range exactly, stay inside one cell, and read chunks
        /// are block-aligned and cover it, for random shapes and ranges.
        #[test]
        fn chunks_cover_random_ranges(
            blocks in 1u32..40, width in 1u32..9, off in 0u64..(1 << 26), len in 0u64..(1 << 22)
        ) {
            let g = geo(blocks * BLOCK_BYTES, width);
            let mut total = 0;
            for c in g.write_chunks(off, len) {
                proptest::prop_assert!(c.len > 0 && c.len <= g.cell_bytes());
                proptest::prop_assert_eq!(c.local / g.cell_bytes(), (c.local + c.len - 1) / g.cell_bytes());
                total += g.segments(c.place, c.local, c.len).map(|s| s.len).sum::<u64>();
            }
            proptest::prop_assert_eq!(total, len);
            let mut covered = 0;
            for c in g.read_chunks(off, len) {
                proptest::prop_assert!(c.local % 4096 == 0 && c.len % 4096 == 0);
                for s in g.segments(c.place, c.local, c.len) {
                    covered += (s.global + s.len).min(off + len).saturating_sub(s.global.max(off));
                }
            }
            proptest::prop_assert_eq!(covered, len);
        }
    }

    #[test]
    fn cell_ranges_clip_to_size() {
        let g = geo(65536, 4);
        // 100 KiB file: place 0 holds 64 KiB, place 1 holds 36 KiB (rounded to 36 KiB).
        assert_eq!(g.cell_range(0, 0, 100 << 10), Some((0, 65536)));
        assert_eq!(g.cell_range(1, 0, 100 << 10), Some((0, 36 << 10)));
        assert_eq!(g.cell_range(2, 0, 100 << 10), None);
        assert_eq!(g.cells_of(0, 100 << 10), vec![(0, 0), (1, 0)]);
    }
}
