//! Derived datatypes and their flattening.
//!
//! A datatype is a typemap: a sequence of (displacement, bytes) pieces, in the order MPI
//! defines for it, with a lower bound and an extent (the stride between consecutive
//! elements when several are laid out). `flatten` lists the pieces of `count` elements in
//! that order, merging pieces that touch, by pure arithmetic; `naive_bytes` (tests) walks
//! every byte instead.

use thiserror::Error;

/// Errors building a datatype: each names the argument that is wrong.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum TypeError {
    #[error("{0}")]
    Invalid(String),
}

fn invalid<T>(why: impl Into<String>) -> Result<T, TypeError> {
    Err(TypeError::Invalid(why.into()))
}

/// Array storage order of a subarray.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Row-major: the last dimension varies fastest.
    C,
    /// Column-major: the first dimension varies fastest.
    Fortran,
}

/// A derived datatype.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Datatype {
    /// `n` contiguous bytes (MPI_BYTE x n, or a basic type of that size).
    Bytes(u64),
    Contiguous {
        count: u64,
        of: Box<Datatype>,
    },
    /// `count` blocks of `blocklen` elements, block starts `stride` elements apart.
    Vector {
        count: u64,
        blocklen: u64,
        stride: i64,
        of: Box<Datatype>,
    },
    /// As `Vector` with the stride in bytes.
    Hvector {
        count: u64,
        blocklen: u64,
        stride_bytes: i64,
        of: Box<Datatype>,
    },
    /// Blocks of (length, displacement in elements).
    Indexed {
        blocks: Vec<(u64, i64)>,
        of: Box<Datatype>,
    },
    /// Blocks of (length, displacement in bytes).
    Hindexed {
        blocks: Vec<(u64, i64)>,
        of: Box<Datatype>,
    },
    /// Fields of (count, displacement in bytes, type).
    Struct {
        fields: Vec<(u64, i64, Datatype)>,
    },
    /// A subarray of a `sizes` array of `of` elements: `subsizes` starting at `starts`.
    Subarray {
        sizes: Vec<u64>,
        subsizes: Vec<u64>,
        starts: Vec<u64>,
        order: Order,
        of: Box<Datatype>,
    },
    /// `of` with its lower bound and extent set (MPI_Type_create_resized).
    Resized {
        lb: i64,
        extent: u64,
        of: Box<Datatype>,
    },
}

/// Most pieces one flattening produces, so that a typo cannot exhaust memory.
pub const MAX_PIECES: usize = 1 << 24;

impl Datatype {
    pub fn bytes(n: u64) -> Datatype {
        Datatype::Bytes(n)
    }

    pub fn contiguous(count: u64, of: Datatype) -> Datatype {
        Datatype::Contiguous {
            count,
            of: Box::new(of),
        }
    }

    pub fn vector(count: u64, blocklen: u64, stride: i64, of: Datatype) -> Datatype {
        Datatype::Vector {
            count,
            blocklen,
            stride,
            of: Box::new(of),
        }
    }

    pub fn hvector(count: u64, blocklen: u64, stride_bytes: i64, of: Datatype) -> Datatype {
        Datatype::Hvector {
            count,
            blocklen,
            stride_bytes,
            of: Box::new(of),
        }
    }

    pub fn indexed(blocks: Vec<(u64, i64)>, of: Datatype) -> Datatype {
        Datatype::Indexed {
            blocks,
            of: Box::new(of),
        }
    }

    pub fn hindexed(blocks: Vec<(u64, i64)>, of: Datatype) -> Datatype {
        Datatype::Hindexed {
            blocks,
            of: Box::new(of),
        }
    }

    pub fn structure(fields: Vec<(u64, i64, Datatype)>) -> Datatype {
        Datatype::Struct { fields }
    }

    pub fn resized(lb: i64, extent: u64, of: Datatype) -> Datatype {
        Datatype::Resized {
            lb,
            extent,
            of: Box::new(of),
        }
    }

    /// A subarray, checked as MPI_Type_create_subarray checks it.
    pub fn subarray(
        sizes: Vec<u64>,
        subsizes: Vec<u64>,
        starts: Vec<u64>,
        order: Order,
        of: Datatype,
    ) -> Result<Datatype, TypeError> {
        if sizes.is_empty() || sizes.len() != subsizes.len() || sizes.len() != starts.len() {
            return invalid("subarray: sizes, subsizes and starts need the same, nonzero length");
        }
        for (d, ((&n, &s), &st)) in sizes.iter().zip(&subsizes).zip(&starts).enumerate() {
            if n == 0 || s == 0 || st.checked_add(s).map_or(true, |e| e > n) {
                return invalid(format!(
                    "subarray dimension {d}: start {st} + subsize {s} must lie within size {n} (all nonzero)"
                ));
            }
        }
        Ok(Datatype::Subarray {
            sizes,
            subsizes,
            starts,
            order,
            of: Box::new(of),
        })
    }

    /// Bytes of data in one element (the sum of its pieces).
    pub fn size(&self) -> u64 {
        match self {
            Datatype::Bytes(n) => *n,
            Datatype::Contiguous { count, of } => count * of.size(),
            Datatype::Vector {
                count,
                blocklen,
                of,
                ..
            }
            | Datatype::Hvector {
                count,
                blocklen,
                of,
                ..
            } => count * blocklen * of.size(),
            Datatype::Indexed { blocks, of } | Datatype::Hindexed { blocks, of } => {
                blocks.iter().map(|b| b.0).sum::<u64>() * of.size()
            }
            Datatype::Struct { fields } => fields.iter().map(|(c, _, t)| c * t.size()).sum(),
            Datatype::Subarray { subsizes, of, .. } => subsizes.iter().product::<u64>() * of.size(),
            Datatype::Resized { of, .. } => of.size(),
        }
    }

    /// (lower bound, upper bound) of one element's typemap, as MPI defines them (the
    /// smallest and largest byte touched, or a resized type's bounds).
    pub fn bounds(&self) -> (i64, i64) {
        match self {
            Datatype::Bytes(n) => (0, *n as i64),
            Datatype::Contiguous { count, of } => {
                let ext = of.extent() as i64;
                let (lb, ub) = of.bounds();
                if *count == 0 {
                    (0, 0)
                } else {
                    (lb, ub + (*count as i64 - 1) * ext)
                }
            }
            Datatype::Vector {
                count,
                blocklen,
                stride,
                of,
            } => strided_bounds(*count, *blocklen, *stride * of.extent() as i64, of),
            Datatype::Hvector {
                count,
                blocklen,
                stride_bytes,
                of,
            } => strided_bounds(*count, *blocklen, *stride_bytes, of),
            Datatype::Indexed { blocks, of } => {
                let ext = of.extent() as i64;
                blocks_bounds(blocks.iter().map(|&(l, d)| (l, d * ext)), of)
            }
            Datatype::Hindexed { blocks, of } => blocks_bounds(blocks.iter().copied(), of),
            Datatype::Struct { fields } => {
                let mut b: Option<(i64, i64)> = None;
                for (count, disp, t) in fields {
                    if *count == 0 {
                        continue;
                    }
                    let (lb, ub) = Datatype::contiguous(*count, t.clone()).bounds();
                    let (lo, hi) = (disp + lb, disp + ub);
                    b = Some(b.map_or((lo, hi), |(a, z)| (a.min(lo), z.max(hi))));
                }
                b.unwrap_or((0, 0))
            }
            Datatype::Subarray { sizes, of, .. } => {
                // The whole array: a subarray's extent is that of the full array.
                (0, sizes.iter().product::<u64>() as i64 * of.extent() as i64)
            }
            Datatype::Resized { lb, extent, .. } => (*lb, lb + *extent as i64),
        }
    }

    /// Whether the type is `extent` bytes without a gap, from its lower bound 0 (so
    /// that `n` of them side by side are one piece).
    fn is_dense(&self) -> bool {
        match self {
            Datatype::Bytes(_) => true,
            Datatype::Contiguous { of, .. } => of.is_dense(),
            _ => false,
        }
    }

    /// The stride between consecutive elements of this type.
    pub fn extent(&self) -> u64 {
        let (lb, ub) = self.bounds();
        (ub - lb).max(0) as u64
    }

    /// The pieces of `count` elements laid out from byte 0, in typemap order, with
    /// touching pieces merged; zero-length pieces are left out.
    pub fn flatten(&self, count: u64) -> Result<Vec<(i64, u64)>, TypeError> {
        let mut out = Vec::new();
        let ext = self.extent() as i64;
        for i in 0..count {
            self.walk(i as i64 * ext, &mut out)?;
        }
        Ok(out)
    }

    fn walk(&self, base: i64, out: &mut Vec<(i64, u64)>) -> Result<(), TypeError> {
        match self {
            Datatype::Bytes(n) => push(out, base, *n)?,
            Datatype::Contiguous { count, of } => {
                let ext = of.extent() as i64;
                for i in 0..*count {
                    of.walk(base + i as i64 * ext, out)?;
                }
            }
            Datatype::Vector {
                count,
                blocklen,
                stride,
                of,
            } => {
                let ext = of.extent() as i64;
                walk_strided(*count, *blocklen, *stride * ext, of, base, out)?;
            }
            Datatype::Hvector {
                count,
                blocklen,
                stride_bytes,
                of,
            } => walk_strided(*count, *blocklen, *stride_bytes, of, base, out)?,
            Datatype::Indexed { blocks, of } => {
                let ext = of.extent() as i64;
                for &(len, disp) in blocks {
                    for j in 0..len {
                        of.walk(base + disp * ext + j as i64 * ext, out)?;
                    }
                }
            }
            Datatype::Hindexed { blocks, of } => {
                let ext = of.extent() as i64;
                for &(len, disp) in blocks {
                    for j in 0..len {
                        of.walk(base + disp + j as i64 * ext, out)?;
                    }
                }
            }
            Datatype::Struct { fields } => {
                for (count, disp, t) in fields {
                    let ext = t.extent() as i64;
                    for j in 0..*count {
                        t.walk(base + disp + j as i64 * ext, out)?;
                    }
                }
            }
            Datatype::Subarray {
                sizes,
                subsizes,
                starts,
                order,
                of,
            } => {
                // Dimensions from slowest to fastest varying.
                let dims: Vec<usize> = match order {
                    Order::C => (0..sizes.len()).collect(),
                    Order::Fortran => (0..sizes.len()).rev().collect(),
                };
                let ext = of.extent() as i64;
                // Elements between consecutive indices of each dimension.
                let mut stride = vec![0i64; sizes.len()];
                let mut acc = 1i64;
                for &d in dims.iter().rev() {
                    stride[d] = acc;
                    acc *= sizes[d] as i64;
                }
                // Elements of a dense type laid side by side along the fastest
                // dimension are one piece: a row at a time, not an element at a time.
                let fast = *dims.last().expect("a subarray has a dimension");
                let row = if of.is_dense() { subsizes[fast] } else { 1 };
                let mut idx = vec![0u64; sizes.len()];
                loop {
                    let elem: i64 = (0..sizes.len())
                        .map(|d| (starts[d] + idx[d]) as i64 * stride[d])
                        .sum();
                    if row > 1 {
                        push(out, base + elem * ext, row * ext as u64)?;
                    } else {
                        of.walk(base + elem * ext, out)?;
                    }
                    // Next index, fastest dimension first (a whole row at a time).
                    let mut k = dims.len();
                    loop {
                        if k == 0 {
                            return Ok(());
                        }
                        k -= 1;
                        let d = dims[k];
                        idx[d] += if d == fast { row } else { 1 };
                        if idx[d] < subsizes[d] {
                            break;
                        }
                        idx[d] = 0;
                    }
                }
            }
            Datatype::Resized { of, .. } => of.walk(base, out)?,
        }
        Ok(())
    }
}

fn strided_bounds(count: u64, blocklen: u64, stride_bytes: i64, of: &Datatype) -> (i64, i64) {
    if count == 0 || blocklen == 0 {
        return (0, 0);
    }
    let (lb, ub) = Datatype::contiguous(blocklen, of.clone()).bounds();
    let last = (count as i64 - 1) * stride_bytes;
    (lb + last.min(0), ub + last.max(0))
}

fn blocks_bounds(blocks: impl Iterator<Item = (u64, i64)>, of: &Datatype) -> (i64, i64) {
    let mut b: Option<(i64, i64)> = None;
    for (len, disp) in blocks {
        if len == 0 {
            continue;
        }
        let (lb, ub) = Datatype::contiguous(len, of.clone()).bounds();
        let (lo, hi) = (disp + lb, disp + ub);
        b = Some(b.map_or((lo, hi), |(a, z)| (a.min(lo), z.max(hi))));
    }
    b.unwrap_or((0, 0))
}

fn walk_strided(
    count: u64,
    blocklen: u64,
    stride_bytes: i64,
    of: &Datatype,
    base: i64,
    out: &mut Vec<(i64, u64)>,
) -> Result<(), TypeError> {
    let ext = of.extent() as i64;
    for i in 0..count {
        for j in 0..blocklen {
            of.walk(base + i as i64 * stride_bytes + j as i64 * ext, out)?;
        }
    }
    Ok(())
}

/// Appends a piece, merged with the last one when they touch.
fn push(out: &mut Vec<(i64, u64)>, at: i64, len: u64) -> Result<(), TypeError> {
    if len == 0 {
        return Ok(());
    }
    if let Some(last) = out.last_mut() {
        if last.0 + last.1 as i64 == at {
            last.1 += len;
            return Ok(());
        }
    }
    if out.len() >= MAX_PIECES {
        return invalid(format!(
            "the datatype flattens to more than {MAX_PIECES} pieces"
        ));
    }
    out.push((at, len));
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every byte's offset, one by one, by the definition of each constructor.
    pub fn naive_bytes(t: &Datatype, count: u64) -> Vec<i64> {
        let mut out = Vec::new();
        let ext = t.extent() as i64;
        for i in 0..count {
            naive(t, i as i64 * ext, &mut out);
        }
        out
    }

    fn naive(t: &Datatype, base: i64, out: &mut Vec<i64>) {
        match t {
            Datatype::Bytes(n) => out.extend((0..*n as i64).map(|b| base + b)),
            Datatype::Contiguous { count, of } => {
                naive(&Datatype::vector(*count, 1, 1, (**of).clone()), base, out);
            }
            Datatype::Vector {
                count,
                blocklen,
                stride,
                of,
            } => {
                let ext = of.extent() as i64;
                let blocks = (0..*count)
                    .map(|i| (*blocklen, i as i64 * stride))
                    .collect();
                naive(
                    &Datatype::hindexed(blocks_in_bytes(blocks, ext), (**of).clone()),
                    base,
                    out,
                );
            }
            Datatype::Hvector {
                count,
                blocklen,
                stride_bytes,
                of,
            } => {
                let blocks = (0..*count)
                    .map(|i| (*blocklen, i as i64 * stride_bytes))
                    .collect();
                naive(&Datatype::hindexed(blocks, (**of).clone()), base, out);
            }
            Datatype::Indexed { blocks, of } => {
                let ext = of.extent() as i64;
                naive(
                    &Datatype::hindexed(blocks_in_bytes(blocks.clone(), ext), (**of).clone()),
                    base,
                    out,
                );
            }
            Datatype::Hindexed { blocks, of } => {
                let ext = of.extent() as i64;
                for &(len, disp) in blocks {
                    for j in 0..len as i64 {
                        naive(of, base + disp + j * ext, out);
                    }
                }
            }
            Datatype::Struct { fields } => {
                for (count, disp, ty) in fields {
                    let ext = ty.extent() as i64;
                    for j in 0..*count as i64 {
                        naive(ty, base + disp + j * ext, out);
                    }
                }
            }
            Datatype::Subarray {
                sizes,
                subsizes,
                starts,
                order,
                of,
            } => {
                // Enumerate every index of the full array in storage order and keep
                // those inside the subarray.
                let total: u64 = sizes.iter().product();
                let ext = of.extent() as i64;
                for lin in 0..total {
                    let mut rem = lin;
                    let mut idx = vec![0u64; sizes.len()];
                    let dims: Vec<usize> = match order {
                        Order::C => (0..sizes.len()).rev().collect(),
                        Order::Fortran => (0..sizes.len()).collect(),
                    };
                    for &d in &dims {
                        idx[d] = rem % sizes[d];
                        rem /= sizes[d];
                    }
                    let inside = (0..sizes.len())
                        .all(|d| idx[d] >= starts[d] && idx[d] < starts[d] + subsizes[d]);
                    if inside {
                        naive(of, base + lin as i64 * ext, out);
                    }
                }
            }
            Datatype::Resized { of, .. } => naive(of, base, out),
        }
    }

    fn blocks_in_bytes(blocks: Vec<(u64, i64)>, ext: i64) -> Vec<(u64, i64)> {
        blocks.into_iter().map(|(l, d)| (l, d * ext)).collect()
    }

    /// The bytes a flattening covers, in order.
    pub fn expand(pieces: &[(i64, u64)]) -> Vec<i64> {
        pieces
            .iter()
            .flat_map(|&(at, len)| (0..len as i64).map(move |b| at + b))
            .collect()
    }

    fn leaf() -> impl Strategy<Value = Datatype> {
        (1u64..9).prop_map(Datatype::Bytes)
    }

    pub fn datatype() -> impl Strategy<Value = Datatype> {
        leaf().prop_recursive(3, 40, 4, |inner| {
            prop_oneof![
                (0u64..4, inner.clone()).prop_map(|(c, t)| Datatype::contiguous(c, t)),
                (0u64..4, 0u64..3, -3i64..5, inner.clone())
                    .prop_map(|(c, b, s, t)| Datatype::vector(c, b, s, t)),
                (0u64..4, 0u64..3, -40i64..60, inner.clone())
                    .prop_map(|(c, b, s, t)| Datatype::hvector(c, b, s, t)),
                (
                    prop::collection::vec((0u64..3, -4i64..8), 0..4),
                    inner.clone()
                )
                    .prop_map(|(b, t)| Datatype::indexed(b, t)),
                (
                    prop::collection::vec((0u64..3, -30i64..60), 0..4),
                    inner.clone()
                )
                    .prop_map(|(b, t)| Datatype::hindexed(b, t)),
                prop::collection::vec((0u64..3, -20i64..40, inner.clone()), 1..4)
                    .prop_map(Datatype::structure),
                (
                    prop::collection::vec((1u64..4, 0u64..4, 0u64..4), 1..4),
                    prop::bool::ANY,
                    inner.clone()
                )
                    .prop_map(|(dims, c, t)| {
                        let sizes: Vec<u64> = dims.iter().map(|d| d.0 + 1).collect();
                        let subsizes: Vec<u64> = dims.iter().map(|d| 1 + d.1 % (d.0 + 1)).collect();
                        let starts: Vec<u64> = sizes
                            .iter()
                            .zip(&subsizes)
                            .zip(&dims)
                            .map(|((n, s), d)| d.2 % (n - s + 1))
                            .collect();
                        let order = if c { Order::C } else { Order::Fortran };
                        Datatype::subarray(sizes, subsizes, starts, order, t).unwrap()
                    }),
                (-16i64..16, 0u64..64, inner).prop_map(|(lb, e, t)| Datatype::resized(lb, e, t)),
            ]
        })
    }

    proptest! {
        // The compact text form reads back as the same type.
        #[test]
        fn descriptions_round_trip(t in datatype()) {
            let text = t.to_string();
            prop_assert_eq!(Datatype::parse(&text).unwrap(), t, "{}", text);
        }
    }

    proptest! {
        // Flattening equals the byte-by-byte definition, for nested types and several
        // elements; sizes agree; no piece is empty.
        #[test]
        fn flattening_matches_the_naive_reference(t in datatype(), count in 0u64..4) {
            let flat = t.flatten(count).unwrap();
            prop_assert_eq!(expand(&flat), naive_bytes(&t, count));
            prop_assert_eq!(flat.iter().map(|p| p.1).sum::<u64>(), t.size() * count);
            prop_assert!(flat.iter().all(|p| p.1 > 0));
            // Merged: no two consecutive pieces touch.
            prop_assert!(flat.windows(2).all(|w| w[0].0 + w[0].1 as i64 != w[1].0));
        }
    }

    #[test]
    fn a_c_subarray_of_a_matrix_is_its_rows() {
        // 4 x 6 matrix of 8-byte cells, the 2 x 3 block at (1, 2), row-major.
        let t = Datatype::subarray(
            vec![4, 6],
            vec![2, 3],
            vec![1, 2],
            Order::C,
            Datatype::bytes(8),
        )
        .unwrap();
        assert_eq!(t.flatten(1).unwrap(), vec![(64, 24), (112, 24)]);
        assert_eq!(t.extent(), 4 * 6 * 8);
        // Fortran order: the first index varies fastest, so columns are contiguous.
        let f = Datatype::subarray(
            vec![4, 6],
            vec![2, 3],
            vec![1, 2],
            Order::Fortran,
            Datatype::bytes(8),
        )
        .unwrap();
        assert_eq!(
            f.flatten(1).unwrap(),
            vec![(8 * 9, 16), (8 * 13, 16), (8 * 17, 16)]
        );
    }

    #[test]
    fn bad_subarrays_are_refused_naming_the_dimension() {
        let e = Datatype::subarray(vec![4], vec![3], vec![2], Order::C, Datatype::bytes(1));
        assert!(matches!(e, Err(TypeError::Invalid(m)) if m.contains("dimension 0")));
        assert!(Datatype::subarray(vec![], vec![], vec![], Order::C, Datatype::bytes(1)).is_err());
        assert!(
            Datatype::subarray(vec![2, 2], vec![1], vec![0], Order::C, Datatype::bytes(1)).is_err()
        );
    }
}
