//! Striping math for stripefs, pure functions only.
//!
//! A file's bytes are dealt round-robin in units of `unit` bytes over `width` places.
//! The same mapping is used at two levels: a file over its data servers (the layout's
//! stripe size and stripe count), and a server's share of a file over the server's
//! storage targets, RAID-0 style (the same unit, `width` = number of targets).
//!
//! For each place, its pieces of the file are packed one after another into a *local*
//! byte space, so a contiguous file range maps to exactly one contiguous local range per
//! place. That is what lets the client send one request per server for any range.
//!
//! Invariants (tested exhaustively for small shapes and by property tests):
//! `to_global(locate(x)) == x`; `split` covers a range exactly once, in order;
//! the `local_size`s of all places add up to the global size; a search through the
//! places (`seek_starts`, `seek_result`) finds the same first byte as a search of the
//! global space.

/// A round-robin striping of a byte space over `width` places in units of `unit` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stripe {
    unit: u64,
    width: u32,
}

/// Where one global byte lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    pub place: u32,
    pub local: u64,
}

/// A piece of a global range that lies in one unit of one place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub place: u32,
    pub local: u64,
    pub global: u64,
    pub len: u64,
}

/// The contiguous local range of one place that a global range touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub place: u32,
    pub local: u64,
    pub len: u64,
}

/// Why a striping shape is invalid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShapeError {
    ZeroUnit,
    ZeroWidth,
}

impl std::fmt::Display for ShapeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShapeError::ZeroUnit => write!(f, "stripe unit must be at least 1 byte"),
            ShapeError::ZeroWidth => write!(f, "stripe width must be at least 1"),
        }
    }
}

impl std::error::Error for ShapeError {}

impl Stripe {
    pub fn new(unit: u64, width: u32) -> Result<Stripe, ShapeError> {
        if unit == 0 {
            return Err(ShapeError::ZeroUnit);
        }
        if width == 0 {
            return Err(ShapeError::ZeroWidth);
        }
        Ok(Stripe { unit, width })
    }

    pub fn unit(&self) -> u64 {
        self.unit
    }

    pub fn width(&self) -> u32 {
        self.width
    }

    /// Bytes in one full round over all places.
    fn round(&self) -> u64 {
        self.unit * self.width as u64
    }

    /// Where global offset `global` lives.
    pub fn locate(&self, global: u64) -> Location {
        let unit_no = global / self.unit;
        let place = (unit_no % self.width as u64) as u32;
        let local = (unit_no / self.width as u64) * self.unit + global % self.unit;
        Location { place, local }
    }

    /// The global offset of local offset `local` of `place`.
    pub fn to_global(&self, place: u32, local: u64) -> u64 {
        assert!(place < self.width, "place {place} >= width {}", self.width);
        let round_no = local / self.unit;
        round_no * self.round() + place as u64 * self.unit + local % self.unit
    }

    /// Splits the global range `[global, global + len)` into unit pieces, in global order.
    pub fn split(&self, global: u64, len: u64) -> impl Iterator<Item = Piece> + '_ {
        let end = global.checked_add(len).expect("range end overflows u64");
        let mut pos = global;
        std::iter::from_fn(move || {
            if pos >= end {
                return None;
            }
            let loc = self.locate(pos);
            let in_unit = self.unit - pos % self.unit;
            let n = in_unit.min(end - pos);
            let piece = Piece {
                place: loc.place,
                local: loc.local,
                global: pos,
                len: n,
            };
            pos += n;
            Some(piece)
        })
    }

    /// The one contiguous local extent of each place that `[global, global + len)` touches,
    /// ordered by place; places it does not touch are left out.
    pub fn extents(&self, global: u64, len: u64) -> Vec<Extent> {
        let mut out: Vec<Extent> = Vec::new();
        if len == 0 {
            return out;
        }
        let end = global + len;
        for place in 0..self.width {
            let lo = self.local_size_of(global, place);
            let hi = self.local_size_of(end, place);
            if hi > lo {
                out.push(Extent {
                    place,
                    local: lo,
                    len: hi - lo,
                });
            }
        }
        out
    }

    /// How many bytes of local space `place` holds for a global space of `size` bytes.
    pub fn local_size(&self, size: u64, place: u32) -> u64 {
        assert!(place < self.width, "place {place} >= width {}", self.width);
        self.local_size_of(size, place)
    }

    /// Where each place starts looking for the first byte at or after global offset
    /// `global` that has some property (stored data, or a hole): `(place, local)` with
    /// `local` the first local offset of `place` whose global offset is `global` or more.
    ///
    /// Local offsets map to global ones in increasing order, so the first match of a
    /// place at or after its start, mapped back by [`Stripe::seek_result`], is the
    /// place's first match at or after `global`; the smallest over all places is the
    /// first match of the whole byte space. Used twice, as the rest of this crate: a
    /// client asks each data server of a file (SEEK_DATA/SEEK_HOLE), and a data server
    /// asks each of its targets' objects.
    pub fn seek_starts(&self, global: u64) -> impl Iterator<Item = (u32, u64)> + '_ {
        (0..self.width).map(move |place| (place, self.local_size_of(global, place)))
    }

    /// Combines the places' answers to a search begun at [`Stripe::seek_starts`]:
    /// `(place, local)` for each place that found a match (at or after its start), and
    /// nothing for a place without one. Returns the smallest global offset among them,
    /// `None` if no place found one.
    pub fn seek_result(&self, found: impl IntoIterator<Item = (u32, u64)>) -> Option<u64> {
        found
            .into_iter()
            .map(|(place, local)| self.to_global(place, local))
            .min()
    }

    fn local_size_of(&self, size: u64, place: u32) -> u64 {
        let full_rounds = size / self.round();
        let rest = size % self.round();
        let start = place as u64 * self.unit;
        let partial = rest.saturating_sub(start).min(self.unit);
        full_rounds * self.unit + partial
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn shapes() {
        assert_eq!(Stripe::new(0, 1), Err(ShapeError::ZeroUnit));
        assert_eq!(Stripe::new(1, 0), Err(ShapeError::ZeroWidth));
    }

    #[test]
    fn known_values() {
        let s = Stripe::new(4, 3).unwrap();
        // Units: [0..4)->p0 l0, [4..8)->p1 l0, [8..12)->p2 l0, [12..16)->p0 l4.
        assert_eq!(s.locate(0), Location { place: 0, local: 0 });
        assert_eq!(s.locate(5), Location { place: 1, local: 1 });
        assert_eq!(s.locate(13), Location { place: 0, local: 5 });
        assert_eq!(s.local_size(13, 0), 5);
        assert_eq!(s.local_size(13, 1), 4);
        assert_eq!(s.local_size(13, 2), 4);
        assert_eq!(
            s.extents(3, 10),
            vec![
                Extent {
                    place: 0,
                    local: 3,
                    len: 2
                },
                Extent {
                    place: 1,
                    local: 0,
                    len: 4
                },
                Extent {
                    place: 2,
                    local: 0,
                    len: 4
                },
            ]
        );
    }

    /// Every byte of every small shape: bijection, sizes and splits.
    #[test]
    fn exhaustive_small_shapes() {
        for unit in 1..=6u64 {
            for width in 1..=5u32 {
                let s = Stripe::new(unit, width).unwrap();
                let span = unit * width as u64 * 3 + 2;
                let mut counts = vec![0u64; width as usize];
                for g in 0..span {
                    let loc = s.locate(g);
                    assert!(loc.place < width);
                    assert_eq!(loc.local, counts[loc.place as usize], "dense local space");
                    counts[loc.place as usize] += 1;
                    assert_eq!(s.to_global(loc.place, loc.local), g);
                    let total: u64 = (0..width).map(|p| s.local_size(g + 1, p)).sum();
                    assert_eq!(total, g + 1);
                    assert_eq!(s.local_size(g + 1, loc.place), loc.local + 1);
                }
                for start in 0..span {
                    for len in 0..(span - start) {
                        check_split(&s, start, len);
                    }
                }
            }
        }
    }

    fn check_split(s: &Stripe, start: u64, len: u64) {
        let mut pos = start;
        for p in s.split(start, len) {
            assert_eq!(p.global, pos);
            assert!(p.len > 0 && p.len <= s.unit());
            assert_eq!(
                s.locate(p.global),
                Location {
                    place: p.place,
                    local: p.local
                }
            );
            assert_eq!(s.locate(p.global + p.len - 1).local, p.local + p.len - 1);
            pos += p.len;
        }
        assert_eq!(pos, start + len);
        // Extents hold exactly the pieces of each place, contiguously.
        let ext = s.extents(start, len);
        let total: u64 = ext.iter().map(|e| e.len).sum();
        assert_eq!(total, len);
        for e in ext {
            let mut next = e.local;
            for p in s.split(start, len).filter(|p| p.place == e.place) {
                assert_eq!(p.local, next);
                next += p.len;
            }
            assert_eq!(next, e.local + e.len);
        }
    }

    /// Brute force: the first global offset at or after `from` whose byte is in `set`.
    fn first_in(set: &[bool], from: u64) -> Option<u64> {
        (from..set.len() as u64).find(|&g| set[g as usize])
    }

    /// Answers a seek through the places, as a client (or a data server) does: each
    /// place searches its own local space from its start, and the answers are combined.
    fn seek_by_places(s: &Stripe, set: &[bool], from: u64) -> Option<u64> {
        let local_len = |p: u32| s.local_size(set.len() as u64, p);
        let found = s.seek_starts(from).filter_map(|(place, start)| {
            (start..local_len(place))
                .find(|&l| set[s.to_global(place, l) as usize])
                .map(|l| (place, l))
        });
        s.seek_result(found)
    }

    /// Every set of marked bytes of small spaces, every start: searching through the
    /// places finds exactly the first marked byte (data), and on the complement the
    /// first unmarked one (a hole).
    #[test]
    fn seek_exhaustive_small_shapes() {
        for unit in 1..=3u64 {
            for width in 1..=4u32 {
                let s = Stripe::new(unit, width).unwrap();
                let span = (unit * width as u64 * 2 + 1).min(12);
                for mask in 0u32..(1 << span) {
                    let set: Vec<bool> = (0..span).map(|g| mask >> g & 1 == 1).collect();
                    let holes: Vec<bool> = set.iter().map(|b| !b).collect();
                    for from in 0..=span {
                        assert_eq!(seek_by_places(&s, &set, from), first_in(&set, from));
                        assert_eq!(seek_by_places(&s, &holes, from), first_in(&holes, from));
                    }
                }
            }
        }
    }

    #[test]
    fn seek_starts_are_first_local_at_or_after() {
        let s = Stripe::new(4, 3).unwrap();
        // 13 lies in place 0's second unit (local 5); places 1 and 2 start their
        // second units at global 16 and 20, local 4.
        assert_eq!(
            s.seek_starts(13).collect::<Vec<_>>(),
            vec![(0, 5), (1, 4), (2, 4)]
        );
        assert_eq!(s.seek_result([(1, 4), (2, 4)]), Some(16));
        assert_eq!(s.seek_result([]), None);
    }

    proptest! {
        /// Large shapes: each place's start maps to the first of its bytes at or after
        /// `from`, and the combined answer of marked extents is the brute-force one.
        #[test]
        fn seek_large(unit in 1u64..(1 << 22), width in 1u32..32, from in 0u64..(1 << 40),
                      marks in proptest::collection::vec((0u64..(1 << 41), 1u64..(1 << 24)), 0..6)) {
            let s = Stripe::new(unit, width).unwrap();
            for (place, start) in s.seek_starts(from) {
                let g = s.to_global(place, start);
                prop_assert!(g >= from);
                if start > 0 {
                    prop_assert!(s.to_global(place, start - 1) < from);
                }
            }
            // Marked extents: a place's first marked byte at or after its start is the
            // smallest over extents of the first local byte inside the extent.
            let found = s.seek_starts(from).filter_map(|(place, start)| {
                marks
                    .iter()
                    .filter_map(|&(g, len)| {
                        let lo = s.local_size(g, place).max(start);
                        (lo < s.local_size(g + len, place)).then_some(lo)
                    })
                    .min()
                    .map(|l| (place, l))
            });
            let want = marks
                .iter()
                .filter(|&&(g, len)| g + len > from)
                .map(|&(g, _)| g.max(from))
                .min();
            prop_assert_eq!(s.seek_result(found), want);
        }


        #[test]
        fn round_trip_large(unit in 1u64..(64 << 20), width in 1u32..256, g in 0u64..(1 << 50)) {
            let s = Stripe::new(unit, width).unwrap();
            let loc = s.locate(g);
            prop_assert!(loc.place < width);
            prop_assert_eq!(s.to_global(loc.place, loc.local), g);
        }

        #[test]
        fn sizes_add_up(unit in 1u64..(1 << 24), width in 1u32..64, size in 0u64..(1 << 44)) {
            let s = Stripe::new(unit, width).unwrap();
            let total: u64 = (0..width).map(|p| s.local_size(size, p)).sum();
            prop_assert_eq!(total, size);
        }

        #[test]
        fn splits_cover(unit in 1u64..5000, width in 1u32..9, start in 0u64..100_000, len in 0u64..50_000) {
            let s = Stripe::new(unit, width).unwrap();
            check_split(&s, start, len);
        }
    }
}
