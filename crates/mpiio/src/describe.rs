//! A compact text form of datatypes, for the C ABI (`stripefs_mpi_set_view`) and for
//! command lines: `parse` reads it, `Display` writes it (and `parse` of what `Display`
//! wrote gives the same type back).
//!
//! ```text
//! type := byte | char | short | int | float | long | double | bytes(N)
//!       | contiguous(count, type)
//!       | vector(count, blocklen, stride, type)          stride in elements
//!       | hvector(count, blocklen, stride_bytes, type)
//!       | indexed([len, ...], [disp, ...], type)          disp in elements
//!       | hindexed([len, ...], [disp_bytes, ...], type)
//!       | struct([count, ...], [disp_bytes, ...], [type, ...])
//!       | subarray([size, ...], [subsize, ...], [start, ...], C|F, type)
//!       | resized(lb, extent, type)
//! ```
//!
//! For example rank r's block of a 2-D array of doubles, 100 x 100 split 2 x 2:
//! `subarray([100,100],[50,50],[50,0],C,double)`. Whitespace is free. Basic types are
//! their C sizes on Linux x86-64 (`long` is 8 bytes).

use crate::datatype::{Datatype, Order, TypeError};
use std::fmt;

/// Longest description accepted.
pub const MAX_DESCRIPTION_BYTES: usize = 64 << 10;
/// Deepest nesting accepted.
const MAX_DEPTH: usize = 32;

struct Parser<'a> {
    s: &'a [u8],
    at: usize,
    depth: usize,
}

fn err<T>(p: &Parser<'_>, why: impl fmt::Display) -> Result<T, TypeError> {
    Err(TypeError::Invalid(format!(
        "datatype description, at byte {}: {why}",
        p.at
    )))
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while self.at < self.s.len() && self.s[self.at].is_ascii_whitespace() {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Result<(), TypeError> {
        self.skip_ws();
        if self.s.get(self.at) == Some(&c) {
            self.at += 1;
            Ok(())
        } else {
            err(self, format!("expected '{}'", c as char))
        }
    }

    fn word(&mut self) -> String {
        self.skip_ws();
        let start = self.at;
        while self.at < self.s.len()
            && (self.s[self.at].is_ascii_alphanumeric() || self.s[self.at] == b'_')
        {
            self.at += 1;
        }
        String::from_utf8_lossy(&self.s[start..self.at]).to_ascii_lowercase()
    }

    fn int(&mut self) -> Result<i64, TypeError> {
        self.skip_ws();
        let start = self.at;
        if self.s.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        while self.at < self.s.len() && self.s[self.at].is_ascii_digit() {
            self.at += 1;
        }
        let text = std::str::from_utf8(&self.s[start..self.at]).unwrap_or("");
        match text.parse::<i64>() {
            Ok(v) => Ok(v),
            Err(_) => {
                self.at = start;
                err(self, "expected an integer")
            }
        }
    }

    fn uint(&mut self) -> Result<u64, TypeError> {
        let at = self.at;
        let v = self.int()?;
        u64::try_from(v).or_else(|_| {
            self.at = at;
            err(self, format!("{v} must not be negative"))
        })
    }

    fn list<T>(
        &mut self,
        mut item: impl FnMut(&mut Self) -> Result<T, TypeError>,
    ) -> Result<Vec<T>, TypeError> {
        self.eat(b'[')?;
        let mut out = Vec::new();
        self.skip_ws();
        if self.s.get(self.at) == Some(&b']') {
            self.at += 1;
            return Ok(out);
        }
        loop {
            out.push(item(self)?);
            self.skip_ws();
            match self.s.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(out);
                }
                _ => return err(self, "expected ',' or ']'"),
            }
        }
    }

    fn pairs(&mut self, what: &str) -> Result<Vec<(u64, i64)>, TypeError> {
        let lens = self.list(Self::uint)?;
        self.eat(b',')?;
        let disps = self.list(Self::int)?;
        if lens.len() != disps.len() {
            return err(
                self,
                format!(
                    "{what}: {} lengths but {} displacements",
                    lens.len(),
                    disps.len()
                ),
            );
        }
        Ok(lens.into_iter().zip(disps).collect())
    }

    fn datatype(&mut self) -> Result<Datatype, TypeError> {
        if self.depth >= MAX_DEPTH {
            return err(self, format!("nested deeper than {MAX_DEPTH}"));
        }
        self.depth += 1;
        let at = self.at;
        let name = self.word();
        let basic = |n| Ok(Datatype::bytes(n));
        let t = match name.as_str() {
            "byte" | "char" => basic(1),
            "short" => basic(2),
            "int" | "float" => basic(4),
            "long" | "double" => basic(8),
            "bytes" => {
                self.eat(b'(')?;
                let n = self.uint()?;
                self.eat(b')')?;
                basic(n)
            }
            "contiguous" => {
                self.eat(b'(')?;
                let c = self.uint()?;
                self.eat(b',')?;
                let of = self.datatype()?;
                self.eat(b')')?;
                Ok(Datatype::contiguous(c, of))
            }
            "vector" | "hvector" => {
                self.eat(b'(')?;
                let c = self.uint()?;
                self.eat(b',')?;
                let b = self.uint()?;
                self.eat(b',')?;
                let s = self.int()?;
                self.eat(b',')?;
                let of = self.datatype()?;
                self.eat(b')')?;
                Ok(if name == "vector" {
                    Datatype::vector(c, b, s, of)
                } else {
                    Datatype::hvector(c, b, s, of)
                })
            }
            "indexed" | "hindexed" => {
                self.eat(b'(')?;
                let blocks = self.pairs(&name)?;
                self.eat(b',')?;
                let of = self.datatype()?;
                self.eat(b')')?;
                Ok(if name == "indexed" {
                    Datatype::indexed(blocks, of)
                } else {
                    Datatype::hindexed(blocks, of)
                })
            }
            "struct" => {
                self.eat(b'(')?;
                let blocks = self.pairs("struct")?;
                self.eat(b',')?;
                let types = self.list(Self::datatype)?;
                self.eat(b')')?;
                if types.len() != blocks.len() {
                    return err(
                        self,
                        format!("struct: {} types for {} fields", types.len(), blocks.len()),
                    );
                }
                Ok(Datatype::structure(
                    blocks
                        .into_iter()
                        .zip(types)
                        .map(|((c, d), t)| (c, d, t))
                        .collect(),
                ))
            }
            "subarray" => {
                self.eat(b'(')?;
                let sizes = self.list(Self::uint)?;
                self.eat(b',')?;
                let subsizes = self.list(Self::uint)?;
                self.eat(b',')?;
                let starts = self.list(Self::uint)?;
                self.eat(b',')?;
                let order = match self.word().as_str() {
                    "c" => Order::C,
                    "f" | "fortran" => Order::Fortran,
                    o => return err(self, format!("order {o:?} is not C or F")),
                };
                self.eat(b',')?;
                let of = self.datatype()?;
                self.eat(b')')?;
                Datatype::subarray(sizes, subsizes, starts, order, of)
            }
            "resized" => {
                self.eat(b'(')?;
                let lb = self.int()?;
                self.eat(b',')?;
                let extent = self.uint()?;
                self.eat(b',')?;
                let of = self.datatype()?;
                self.eat(b')')?;
                Ok(Datatype::resized(lb, extent, of))
            }
            "" => {
                self.at = at;
                err(self, "expected a type name")
            }
            other => {
                self.at = at;
                err(self, format!("unknown type {other:?}"))
            }
        };
        self.depth -= 1;
        t
    }
}

impl Datatype {
    /// Reads the compact text form (see the module documentation).
    pub fn parse(text: &str) -> Result<Datatype, TypeError> {
        if text.len() > MAX_DESCRIPTION_BYTES {
            return Err(TypeError::Invalid(format!(
                "datatype description of {} bytes is over {MAX_DESCRIPTION_BYTES}",
                text.len()
            )));
        }
        let mut p = Parser {
            s: text.as_bytes(),
            at: 0,
            depth: 0,
        };
        let t = p.datatype()?;
        p.skip_ws();
        if p.at != p.s.len() {
            return err(&p, "unexpected text after the type");
        }
        Ok(t)
    }
}

fn join<T: fmt::Display>(items: impl Iterator<Item = T>) -> String {
    items.map(|x| x.to_string()).collect::<Vec<_>>().join(",")
}

impl fmt::Display for Datatype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Datatype::Bytes(n) => write!(f, "bytes({n})"),
            Datatype::Contiguous { count, of } => write!(f, "contiguous({count},{of})"),
            Datatype::Vector {
                count,
                blocklen,
                stride,
                of,
            } => write!(f, "vector({count},{blocklen},{stride},{of})"),
            Datatype::Hvector {
                count,
                blocklen,
                stride_bytes,
                of,
            } => write!(f, "hvector({count},{blocklen},{stride_bytes},{of})"),
            Datatype::Indexed { blocks, of } | Datatype::Hindexed { blocks, of } => {
                let name = if matches!(self, Datatype::Indexed { .. }) {
                    "indexed"
                } else {
                    "hindexed"
                };
                write!(
                    f,
                    "{name}([{}],[{}],{of})",
                    join(blocks.iter().map(|b| b.0)),
                    join(blocks.iter().map(|b| b.1))
                )
            }
            Datatype::Struct { fields } => write!(
                f,
                "struct([{}],[{}],[{}])",
                join(fields.iter().map(|x| x.0)),
                join(fields.iter().map(|x| x.1)),
                join(fields.iter().map(|x| &x.2))
            ),
            Datatype::Subarray {
                sizes,
                subsizes,
                starts,
                order,
                of,
            } => write!(
                f,
                "subarray([{}],[{}],[{}],{},{of})",
                join(sizes.iter()),
                join(subsizes.iter()),
                join(starts.iter()),
                if *order == Order::C { "C" } else { "F" }
            ),
            Datatype::Resized { lb, extent, of } => write!(f, "resized({lb},{extent},{of})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_forms_parse() {
        let t = Datatype::parse("subarray([100, 100], [50,50], [50,0], C, double)").unwrap();
        assert_eq!(
            t,
            Datatype::subarray(
                vec![100, 100],
                vec![50, 50],
                vec![50, 0],
                Order::C,
                Datatype::bytes(8)
            )
            .unwrap()
        );
        assert_eq!(Datatype::parse(" int ").unwrap(), Datatype::bytes(4));
        let s = Datatype::parse("struct([1,2],[0,8],[int,double])").unwrap();
        assert_eq!(s.size(), 20);
        let v = Datatype::parse("resized(0, 64, vector(2, 1, 3, bytes(8)))").unwrap();
        assert_eq!(v.extent(), 64);
        assert_eq!(
            Datatype::parse("hindexed([2,1],[0,-16],float)").unwrap(),
            Datatype::hindexed(vec![(2, 0), (1, -16)], Datatype::bytes(4))
        );
    }

    #[test]
    fn bad_descriptions_name_the_place_and_the_reason() {
        for (text, want) in [
            ("", "expected a type name"),
            ("quad", "unknown type"),
            ("bytes(-1)", "must not be negative"),
            ("vector(1,2,int)", "expected an integer"),
            ("indexed([1,2],[0],int)", "2 lengths but 1 displacements"),
            ("struct([1],[0],[int,int])", "2 types for 1 fields"),
            ("subarray([4],[2],[3],C,int)", "must lie within size"),
            ("subarray([4],[2],[0],Z,int)", "is not C or F"),
            ("int int", "unexpected text"),
            ("contiguous(2,int", "expected ')'"),
        ] {
            let e = Datatype::parse(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        let deep = "contiguous(1,".repeat(40) + "int" + &")".repeat(40);
        assert!(Datatype::parse(&deep)
            .unwrap_err()
            .to_string()
            .contains("deeper"));
        let long = " ".repeat(MAX_DESCRIPTION_BYTES + 1);
        assert!(Datatype::parse(&long).is_err());
    }
}
