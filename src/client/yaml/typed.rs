//! A tree read into serde types, what they allocate accounted.

use std::borrow::Cow;

use serde::de::{self, DeserializeSeed, Visitor};

use super::memory::{heap, Memory};
use super::node::{Entry, Node};

/// `T` read from `node` as serde reads JSON (every scalar a string), what
/// it allocates charged to `memory`. The `null` entries of mappings are
/// left out (Go's decoder leaves such a field at its zero value, and serde
/// then takes the field's default); a struct is read from a mapping only
/// and a string from a scalar only, as Go's decoder reads them. Consumes
/// the tree as it goes.
pub(crate) fn from_node<'a, T: de::Deserialize<'a>>(
    node: Node<'a>,
    memory: &mut Memory,
) -> std::result::Result<T, serde_json::Error> {
    T::deserialize(Reader { node, memory })
}

/// A node as a serde deserializer (JSON's error type: the one the crate's
/// serde errors have anyway).
pub(super) struct Reader<'a, 'm> {
    node: Node<'a>,
    memory: &'m mut Memory,
}

pub(super) fn charge(
    memory: &mut Memory,
    bytes: usize,
) -> std::result::Result<(), serde_json::Error> {
    memory.charge(bytes).map_err(de::Error::custom)
}

/// The error for `node` where `expected` was: one function for every
/// type read (each visitor's own would be code for each).
pub(super) fn invalid(node: &Node<'_>, expected: &dyn de::Expected) -> serde_json::Error {
    let unexpected = match node {
        Node::Null => de::Unexpected::Unit,
        Node::Str(s) => de::Unexpected::Str(s),
        Node::Seq(_) => de::Unexpected::Seq,
        Node::Map(_) => de::Unexpected::Map,
    };
    de::Error::invalid_type(unexpected, expected)
}

impl<'de> Reader<'de, '_> {
    fn seq<V: Visitor<'de>>(
        self,
        typed: bool,
        visitor: V,
    ) -> std::result::Result<V::Value, serde_json::Error> {
        match self.node {
            Node::Seq(items) => visitor.visit_seq(Items {
                items: items.into_vec().into_iter(),
                memory: self.memory,
                first: true,
                typed,
            }),
            node => Err(invalid(&node, &visitor)),
        }
    }

    fn map<V: Visitor<'de>>(
        self,
        fields: bool,
        visitor: V,
    ) -> std::result::Result<V::Value, serde_json::Error> {
        match self.node {
            Node::Map(entries) => visitor.visit_map(Entries {
                entries: entries.into_vec().into_iter(),
                value: None,
                memory: self.memory,
                fields,
                key_size: 0,
                first: true,
            }),
            node => Err(invalid(&node, &visitor)),
        }
    }

    /// A scalar; where the visitor keeps it, it copies it (`charged`).
    fn str<V: Visitor<'de>>(
        self,
        charged: bool,
        visitor: V,
    ) -> std::result::Result<V::Value, serde_json::Error> {
        match self.node {
            Node::Str(Cow::Borrowed(s)) => {
                if charged {
                    charge(self.memory, heap(s.len()))?;
                }
                visitor.visit_borrowed_str(s)
            }
            Node::Str(Cow::Owned(s)) => visitor.visit_string(s),
            node => Err(invalid(&node, &visitor)),
        }
    }
}

impl<'de> de::Deserializer<'de> for Reader<'de, '_> {
    type Error = serde_json::Error;

    /// Any value (serde_json's `Value`).
    fn deserialize_any<V: Visitor<'de>>(
        self,
        visitor: V,
    ) -> std::result::Result<V::Value, Self::Error> {
        match self.node {
            Node::Null => visitor.visit_unit(),
            Node::Str(_) => self.str(true, visitor),
            Node::Seq(_) => self.seq(false, visitor),
            Node::Map(_) => self.map(false, visitor),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(
        self,
        visitor: V,
    ) -> std::result::Result<V::Value, Self::Error> {
        self.str(true, visitor)
    }

    fn deserialize_string<V: Visitor<'de>>(
        self,
        visitor: V,
    ) -> std::result::Result<V::Value, Self::Error> {
        self.str(true, visitor)
    }

    /// A field's name: compared, not kept.
    fn deserialize_identifier<V: Visitor<'de>>(
        self,
        visitor: V,
    ) -> std::result::Result<V::Value, Self::Error> {
        self.str(false, visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(
        self,
        visitor: V,
    ) -> std::result::Result<V::Value, Self::Error> {
        match self.node {
            Node::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    /// A typed list (serde's `Vec`): allocated once from the size hint.
    fn deserialize_seq<V: Visitor<'de>>(
        self,
        visitor: V,
    ) -> std::result::Result<V::Value, Self::Error> {
        self.seq(true, visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(
        self,
        visitor: V,
    ) -> std::result::Result<V::Value, Self::Error> {
        self.map(false, visitor)
    }

    /// A struct's fields are in its own place: only their values allocate.
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> std::result::Result<V::Value, Self::Error> {
        self.map(true, visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(
        self,
        visitor: V,
    ) -> std::result::Result<V::Value, Self::Error> {
        visitor.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> std::result::Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char
        bytes byte_buf unit unit_struct tuple tuple_struct enum
    }
}

pub(super) struct Items<'a, 'm> {
    items: std::vec::IntoIter<Node<'a>>,
    memory: &'m mut Memory,
    first: bool,
    /// Asked for as a sequence (serde's `Vec`), not as any value.
    typed: bool,
}

impl<'a> Items<'a, '_> {
    /// The next item, the vector the visitor fills charged with the first:
    /// serde's `Vec` takes its size from the hint, up to 1 MiB, and grows
    /// by doubling past it; serde_json's `Value` grows by doubling from 4.
    /// Doubling ends with up to twice the length, copied from a buffer
    /// half that.
    fn next(&mut self, size: usize) -> std::result::Result<Option<Node<'a>>, serde_json::Error> {
        let Some(node) = self.items.next() else {
            return Ok(None);
        };
        if std::mem::take(&mut self.first) {
            let len = self.items.len() + 1;
            let slots = if self.typed && len.saturating_mul(size) <= 1 << 20 {
                len
            } else {
                len.saturating_mul(3).max(4)
            };
            charge(self.memory, heap(slots.saturating_mul(size)))?;
        }
        Ok(Some(node))
    }
}

impl<'de> de::SeqAccess<'de> for Items<'de, '_> {
    type Error = serde_json::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> std::result::Result<Option<T::Value>, Self::Error> {
        match self.next(size_of::<T::Value>())? {
            None => Ok(None),
            Some(node) => seed
                .deserialize(Reader {
                    node,
                    memory: self.memory,
                })
                .map(Some),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

pub(super) struct Entries<'a, 'm> {
    entries: std::vec::IntoIter<Entry<'a>>,
    value: Option<Node<'a>>,
    memory: &'m mut Memory,
    /// A struct's fields, rather than a map's entries.
    fields: bool,
    key_size: usize,
    first: bool,
}

impl<'a> Entries<'a, '_> {
    /// The next key whose value is not null, its value kept for
    /// [`Entries::value`].
    fn key(&mut self, key_size: usize) -> Option<Cow<'a, str>> {
        let (key, value) = self
            .entries
            .by_ref()
            .find(|(_, v)| !matches!(v, Node::Null))?;
        self.value = Some(value);
        self.key_size = key_size;
        Some(key)
    }

    /// The value of the last key, and what a map (not a struct) spends on
    /// the entry: a B-tree's (serde_json's `Value`, `BTreeMap`) nodes of 11
    /// entries and 12 edges, each at least 5 full but the first, and
    /// internal nodes over them.
    fn value(&mut self, size: usize) -> std::result::Result<Node<'a>, serde_json::Error> {
        if !self.fields {
            let node = 11 * (self.key_size + size) + 12 * 8 + 16;
            let cost = if std::mem::take(&mut self.first) {
                heap(node)
            } else {
                node / 4
            };
            charge(self.memory, cost)?;
        }
        Ok(self.value.take().unwrap_or(Node::Null))
    }
}

impl<'de> de::MapAccess<'de> for Entries<'de, '_> {
    type Error = serde_json::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> std::result::Result<Option<K::Value>, Self::Error> {
        match self.key(size_of::<K::Value>()) {
            None => Ok(None),
            Some(key) => seed
                .deserialize(Reader {
                    node: Node::Str(key),
                    memory: self.memory,
                })
                .map(Some),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> std::result::Result<V::Value, Self::Error> {
        let node = self.value(size_of::<V::Value>())?;
        seed.deserialize(Reader {
            node,
            memory: self.memory,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}
