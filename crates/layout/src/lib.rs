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
//! the `local_size`s of all places add up to the global size.

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

    proptest! {
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
