//! File views: which bytes of a file a process sees, as MPI_File_set_view sets them.
//!
//! A view is a displacement, an elementary type (the unit of offsets) and a file type
//! (tiled from the displacement on, again and again). The view's data is the file
//! type's pieces, tile after tile, in typemap order; a read or write of `len` bytes at
//! view offset `off` (in etypes) touches the file extents `extents` returns.

use crate::datatype::{Datatype, TypeError};

/// A file view with its file type flattened once.
#[derive(Clone, Debug)]
pub struct View {
    disp: u64,
    etype_size: u64,
    /// The file type's pieces (offset from the tile's start, length).
    pieces: Vec<(u64, u64)>,
    /// Data bytes before each piece within a tile.
    before: Vec<u64>,
    /// Data bytes of one tile, and the tile's extent in the file.
    tile_bytes: u64,
    tile_extent: u64,
}

impl View {
    /// The whole file as bytes from `disp` (MPI's default view: etype and file type
    /// MPI_BYTE).
    pub fn bytes(disp: u64) -> View {
        // One contiguous tile as large as any file: a range maps to one extent in one
        // step (a 1-byte tile would cost a step per byte).
        const WHOLE: u64 = 1 << 62;
        View {
            disp,
            etype_size: 1,
            pieces: vec![(0, WHOLE)],
            before: vec![0],
            tile_bytes: WHOLE,
            tile_extent: WHOLE,
        }
    }

    /// A view as MPI requires it: the file type's displacements are non-negative and
    /// never go backwards (so tiles do not overlap), and its size is a whole number of
    /// etypes.
    pub fn new(disp: u64, etype: &Datatype, filetype: &Datatype) -> Result<View, TypeError> {
        let etype_size = etype.size();
        let tile_bytes = filetype.size();
        let bad = |why: String| Err(TypeError::Invalid(why));
        if etype_size == 0 {
            return bad("the etype holds no data".into());
        }
        if tile_bytes == 0 || tile_bytes % etype_size != 0 {
            return bad(format!(
                "the file type holds {tile_bytes} bytes, not a positive multiple of the etype's {etype_size}"
            ));
        }
        let flat = filetype.flatten(1)?;
        let mut pieces = Vec::with_capacity(flat.len());
        let mut end = 0i64;
        for &(at, len) in &flat {
            if at < end {
                return bad(format!(
                    "the file type's pieces go backwards or overlap (a piece at {at} after one ending at {end}); file views need increasing offsets"
                ));
            }
            end = at + len as i64;
            pieces.push((at as u64, len));
        }
        let tile_extent = filetype.extent().max(end as u64);
        let mut before = Vec::with_capacity(pieces.len());
        let mut acc = 0;
        for &(_, len) in &pieces {
            before.push(acc);
            acc += len;
        }
        Ok(View {
            disp,
            etype_size,
            pieces,
            before,
            tile_bytes,
            tile_extent,
        })
    }

    pub fn etype_size(&self) -> u64 {
        self.etype_size
    }

    /// The file offset of view data byte `b`.
    fn file_offset(&self, b: u64) -> u64 {
        let (tile, r) = (b / self.tile_bytes, b % self.tile_bytes);
        let i = self.before.partition_point(|&x| x <= r) - 1;
        self.disp + tile * self.tile_extent + self.pieces[i].0 + (r - self.before[i])
    }

    /// The file extents (offset, length), in view order with touching ones merged, of
    /// `len` bytes of data at view offset `off` etypes.
    pub fn extents(&self, off: u64, len: u64) -> Result<Vec<(u64, u64)>, TypeError> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        let mut b = off
            .checked_mul(self.etype_size)
            .ok_or_else(|| TypeError::Invalid("view offset overflows".into()))?;
        let end = b
            .checked_add(len)
            .ok_or_else(|| TypeError::Invalid("view range overflows".into()))?;
        while b < end {
            let (tile, r) = (b / self.tile_bytes, b % self.tile_bytes);
            let i = self.before.partition_point(|&x| x <= r) - 1;
            let in_piece = r - self.before[i];
            let n = (self.pieces[i].1 - in_piece).min(end - b);
            let at = self
                .disp
                .checked_add(tile.checked_mul(self.tile_extent).ok_or_else(|| {
                    TypeError::Invalid("view range lies past the largest file offset".into())
                })?)
                .and_then(|x| x.checked_add(self.pieces[i].0 + in_piece))
                .ok_or_else(|| {
                    TypeError::Invalid("view range lies past the largest file offset".into())
                })?;
            match out.last_mut() {
                Some(last) if last.0 + last.1 == at => last.1 += n,
                _ => {
                    if out.len() >= crate::datatype::MAX_PIECES {
                        return Err(TypeError::Invalid(
                            "the access touches too many file extents".into(),
                        ));
                    }
                    out.push((at, n))
                }
            }
            b += n;
        }
        debug_assert!(out.is_empty() || out[0].0 == self.file_offset(off * self.etype_size));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datatype::tests::{datatype, expand, naive_bytes};
    use proptest::prelude::*;

    /// The file offset of every view byte in `[off, off + len)`, by tiling the naive
    /// expansion of the file type.
    fn naive_view(disp: u64, ft: &Datatype, off_bytes: u64, len: u64) -> Vec<u64> {
        let tile: Vec<i64> = naive_bytes(ft, 1);
        let ext = ft
            .extent()
            .max(tile.iter().map(|&b| b as u64 + 1).max().unwrap_or(0));
        (off_bytes..off_bytes + len)
            .map(|b| {
                let (t, r) = (b / tile.len() as u64, (b % tile.len() as u64) as usize);
                disp + t * ext + tile[r] as u64
            })
            .collect()
    }

    proptest! {
        // Any increasing file type (made increasing by resorting its pieces through an
        // hindexed type) gives the extents of the byte-by-byte tiling.
        #[test]
        fn extents_match_the_naive_tiling(
            t in datatype(),
            disp in 0u64..100,
            off in 0u64..50,
            len in 0u64..300,
        ) {
            let mut flat = t.flatten(1).unwrap();
            prop_assume!(!flat.is_empty());
            flat.sort();
            let mut end = i64::MIN;
            let mut blocks = Vec::new();
            let base = flat[0].0.min(0);
            for (at, l) in flat {
                let at = at - base;
                if at >= end {
                    blocks.push((l, at));
                    end = at + l as i64;
                }
            }
            let ft = Datatype::hindexed(blocks, Datatype::bytes(1));
            let view = View::new(disp, &Datatype::bytes(1), &ft).unwrap();
            let got = view.extents(off, len).unwrap();
            let want = naive_view(disp, &ft, off, len);
            prop_assert_eq!(expand(&got.iter().map(|&(a, l)| (a as i64, l)).collect::<Vec<_>>())
                .into_iter().map(|b| b as u64).collect::<Vec<_>>(), want);
        }
    }

    #[test]
    fn a_strided_view_reads_every_other_block() {
        // etype 8 bytes; file type: 2 etypes of data then 2 of gap (resized vector).
        let e = Datatype::bytes(8);
        let ft = Datatype::resized(0, 32, Datatype::contiguous(2, e.clone()));
        let v = View::new(100, &e, &ft).unwrap();
        assert_eq!(
            v.extents(0, 40).unwrap(),
            vec![(100, 16), (132, 16), (164, 8)]
        );
        // Offsets count etypes: etype 3 is the second of the second tile.
        assert_eq!(v.extents(3, 8).unwrap(), vec![(140, 8)]);
        assert_eq!(View::bytes(7).extents(5, 10).unwrap(), vec![(12, 10)]);
    }

    #[test]
    fn bad_views_are_refused() {
        let e = Datatype::bytes(8);
        assert!(View::new(0, &e, &Datatype::bytes(12)).is_err());
        assert!(View::new(0, &Datatype::bytes(0), &Datatype::bytes(8)).is_err());
        let backwards = Datatype::hindexed(vec![(8, 16), (8, 0)], Datatype::bytes(1));
        assert!(View::new(0, &Datatype::bytes(1), &backwards).is_err());
        let v = View::new(0, &e, &Datatype::bytes(8)).unwrap();
        assert!(v.extents(u64::MAX / 4, 16).is_err());
    }
}
