//! Object-only parsing for request bodies.
//!
//! serde's derived `Deserialize` for a struct also accepts a sequence of its fields in
//! declaration order, so `["<clientId>", [...]]` would parse as a `WriteRequest`. The protocol
//! sends objects only, and a positional form would silently change meaning whenever a field is
//! added or reordered, so request bodies refuse it.
//!
//! Each such type's fields are declared a second time on a private `remote` definition (the
//! compiler checks that the two agree: same names, same types, no field missing) which carries
//! the parsing attributes. [`object_only!`] then implements the public type's `Deserialize` by
//! running that definition through [`ObjectOnly`], a deserializer wrapper whose visitor takes a
//! map and nothing else. Everything else is unchanged: the format's own error positions, and the
//! field paths `serde_path_to_error` reports, since the wrapper only forwards.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Unexpected, Visitor};

/// Implements `Deserialize` for `$ty` through its `remote` definition `$def`, refusing anything
/// but a map (a JSON object).
macro_rules! object_only {
    ($ty:ty => $def:ident) => {
        impl<'de> ::serde::Deserialize<'de> for $ty {
            fn deserialize<D: ::serde::Deserializer<'de>>(
                deserializer: D,
            ) -> ::std::result::Result<Self, D::Error> {
                $def::deserialize($crate::strict::ObjectOnly(deserializer))
            }
        }
    };
}
pub(crate) use object_only;

/// A deserializer that hands its visitor only maps: a sequence (or any other value) where a
/// struct is expected is an "invalid type" error naming the struct.
pub(crate) struct ObjectOnly<D>(pub(crate) D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for ObjectOnly<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(MapOnly(visitor))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_struct(name, fields, MapOnly(visitor))
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// A visitor that accepts a map and refuses everything else, including a sequence.
struct MapOnly<V>(V);

impl<'de, V: Visitor<'de>> Visitor<'de> for MapOnly<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object for ")?;
        self.0.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.0.visit_map(map)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<V::Value, A::Error> {
        Err(de::Error::invalid_type(Unexpected::Other("array"), &self))
    }
}
