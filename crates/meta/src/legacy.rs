//! A reader (only) of bincode 1's fixed-width encoding, in which builds before record
//! format 4 wrote the metadata log and the tables: little-endian integers of their own
//! width, `bool` and `Option` tags as one byte, lengths as `u64`, enum variants as a
//! `u32` index, structs and tuples as their fields in order.
//!
//! bincode 1 is no longer maintained, so the server now writes postcard; this keeps
//! the databases and logs of existing users readable without the old crate. Nothing is
//! ever written in this encoding again: a record read from it is rewritten in the
//! current format when it changes. Bytes come from disk: every length is checked
//! against the bytes left before anything is allocated, and errors are returned, never
//! panics.

use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, Visitor};
use std::fmt;

/// Decodes all of `bytes` as a `T` in bincode 1's fixed-width little-endian encoding.
pub fn from_bytes<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let mut de = De { input: bytes };
    let v = T::deserialize(&mut de).map_err(|e| e.0)?;
    if !de.input.is_empty() {
        return Err(format!(
            "{} trailing bytes after a bincode 1 value",
            de.input.len()
        ));
    }
    Ok(v)
}

#[derive(Debug)]
pub struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Error {
        Error(msg.to_string())
    }
}

struct De<'de> {
    input: &'de [u8],
}

impl<'de> De<'de> {
    fn take(&mut self, n: usize) -> Result<&'de [u8], Error> {
        if self.input.len() < n {
            return Err(Error(format!(
                "truncated: {n} bytes needed, {} left",
                self.input.len()
            )));
        }
        let (head, rest) = self.input.split_at(n);
        self.input = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        Ok(self.take(N)?.try_into().expect("take returned N bytes"))
    }

    /// A sequence length: no element takes less than one byte here, so a length beyond
    /// the bytes left is corrupt, and is refused before anything is allocated.
    fn len(&mut self) -> Result<usize, Error> {
        let n = u64::from_le_bytes(self.array()?);
        if n > self.input.len() as u64 {
            return Err(Error(format!(
                "length {n} exceeds the {} bytes left",
                self.input.len()
            )));
        }
        Ok(n as usize)
    }

    fn bytes(&mut self) -> Result<&'de [u8], Error> {
        let n = self.len()?;
        self.take(n)
    }
}

macro_rules! ints {
    ($($method:ident $visit:ident $t:ty;)*) => {$(
        fn $method<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
            v.$visit(<$t>::from_le_bytes(self.array()?))
        }
    )*};
}

impl<'de> de::Deserializer<'de> for &mut De<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, _v: V) -> Result<V::Value, Error> {
        Err(Error("bincode 1 is not self-describing".into()))
    }

    ints! {
        deserialize_u8 visit_u8 u8;
        deserialize_u16 visit_u16 u16;
        deserialize_u32 visit_u32 u32;
        deserialize_u64 visit_u64 u64;
        deserialize_i8 visit_i8 i8;
        deserialize_i16 visit_i16 i16;
        deserialize_i32 visit_i32 i32;
        deserialize_i64 visit_i64 i64;
        deserialize_f32 visit_f32 f32;
        deserialize_f64 visit_f64 f64;
    }

    fn deserialize_bool<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        match self.take(1)?[0] {
            0 => v.visit_bool(false),
            1 => v.visit_bool(true),
            b => Err(Error(format!("bool byte {b}"))),
        }
    }

    fn deserialize_char<V: Visitor<'de>>(self, _v: V) -> Result<V::Value, Error> {
        Err(Error("char is not used in stored records".into()))
    }

    fn deserialize_str<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        let b = self.bytes()?;
        v.visit_borrowed_str(std::str::from_utf8(b).map_err(|e| Error(e.to_string()))?)
    }

    fn deserialize_string<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        self.deserialize_str(v)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_borrowed_bytes(self.bytes()?)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        self.deserialize_bytes(v)
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        match self.take(1)?[0] {
            0 => v.visit_none(),
            1 => v.visit_some(self),
            b => Err(Error(format!("option tag {b}"))),
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_unit()
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value, Error> {
        v.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value, Error> {
        v.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        let left = self.len()?;
        v.visit_seq(Items { de: self, left })
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, v: V) -> Result<V::Value, Error> {
        v.visit_seq(Items {
            de: self,
            left: len,
        })
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        len: usize,
        v: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_tuple(len, v)
    }

    fn deserialize_map<V: Visitor<'de>>(self, _v: V) -> Result<V::Value, Error> {
        Err(Error("maps are not used in stored records".into()))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_tuple(fields.len(), v)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Error> {
        v.visit_enum(self)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, _v: V) -> Result<V::Value, Error> {
        Err(Error("identifiers are not encoded by bincode".into()))
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, _v: V) -> Result<V::Value, Error> {
        Err(Error("bincode 1 is not self-describing".into()))
    }
}

/// The elements of a sequence, tuple or struct.
struct Items<'a, 'de> {
    de: &'a mut De<'de>,
    left: usize,
}

impl<'de> de::SeqAccess<'de> for Items<'_, 'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.de).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

impl<'de> de::EnumAccess<'de> for &mut De<'de> {
    type Error = Error;
    type Variant = Self;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self), Error> {
        let index = u32::from_le_bytes(self.array()?);
        let v = seed.deserialize(IntoDeserializer::<Error>::into_deserializer(index))?;
        Ok((v, self))
    }
}

impl<'de> de::VariantAccess<'de> for &mut De<'de> {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        Ok(())
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, v: V) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_tuple(self, len, v)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_tuple(self, fields.len(), v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes as bincode 1.3 (fixint, little-endian) wrote them, spelled out by hand.
    #[test]
    fn reads_what_bincode_1_wrote() {
        #[derive(serde::Deserialize, Debug, PartialEq)]
        enum E {
            A,
            B,
        }
        #[derive(serde::Deserialize, Debug, PartialEq)]
        struct S {
            a: u32,
            b: Option<i64>,
            c: String,
            d: Vec<(u64, bool)>,
            e: E,
        }
        let mut b = vec![];
        b.extend(7u32.to_le_bytes());
        b.push(1);
        b.extend((-2i64).to_le_bytes());
        b.extend(2u64.to_le_bytes());
        b.extend(b"hi");
        b.extend(1u64.to_le_bytes());
        b.extend(9u64.to_le_bytes());
        b.push(1);
        b.extend(1u32.to_le_bytes());
        let s: S = from_bytes(&b).unwrap();
        assert_eq!(
            s,
            S {
                a: 7,
                b: Some(-2),
                c: "hi".into(),
                d: vec![(9, true)],
                e: E::B
            }
        );
        // Every truncation and a trailing byte are errors, not panics.
        for n in 0..b.len() {
            assert!(from_bytes::<S>(&b[..n]).is_err(), "{n}");
        }
        b.push(0);
        assert!(from_bytes::<S>(&b).is_err());
    }

    #[test]
    fn huge_lengths_are_refused_before_allocating() {
        let mut b = vec![];
        b.extend(u64::MAX.to_le_bytes());
        let e = from_bytes::<Vec<u64>>(&b).unwrap_err();
        assert!(e.contains("exceeds"), "{e}");
    }
}
