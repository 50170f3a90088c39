//! What the YAML reader's parts share, below all of them: a parsed
//! [`Node`], what of a document to [`Keep`], and a [`YamlError`].

use std::borrow::Cow;
use std::fmt;

use serde_json::Value;

/// A YAML document this reader does not accept, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct YamlError {
    /// 1-based line number.
    pub(crate) line: usize,
    pub(crate) message: String,
}

impl fmt::Display for YamlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

pub(super) type Result<T> = std::result::Result<T, YamlError>;

/// Nesting beyond this is refused rather than risking the stack.
pub(super) const MAX_DEPTH: usize = 64;

/// What anchors and aliases may copy at least, whatever the document's size.
pub(super) const MIN_ALIAS_BUDGET: usize = 1 << 20;

/// A parsed document: like [`serde_json::Value`] with every scalar a
/// string, but smaller. A scalar written as it reads (most of them, and
/// most keys) borrows the document's text; a collection is one boxed
/// slice of its exact length; a node is 24 bytes. (A `BTreeMap` costs
/// ~600 bytes however few its keys, and kubeconfigs are made of small
/// mappings.)
#[derive(Debug, Clone)]
pub(crate) enum Node<'a> {
    Null,
    Str(Cow<'a, str>),
    Seq(Box<[Node<'a>]>),
    /// Entries in order, each key once.
    Map(Box<[Entry<'a>]>),
}

pub(super) type Entry<'a> = (Cow<'a, str>, Node<'a>);

/// What of a document to store. All of it is parsed (a syntax error
/// anywhere is an error, as kubectl's go-yaml reads the whole file), but
/// a value that is not kept costs no memory.
#[derive(Debug)]
pub(crate) enum Keep {
    /// The whole value.
    All,
    /// Of a mapping, these keys, each value kept as its `Keep` says; the
    /// other entries are dropped. A list passes it on to its items; a
    /// scalar is kept.
    Keys(&'static [(&'static str, Keep)]),
}

/// What a `<<` merge key's value keeps where its mapping is not stored:
/// its shape, which must be checked (a mapping or a list of them).
pub(super) static SHAPE_ONLY: Keep = Keep::Keys(&[]);

/// What to keep of the value of `key` in a mapping kept as `keep` (`None`:
/// not stored).
pub(super) fn child(keep: Option<&'static Keep>, key: &str) -> Option<&'static Keep> {
    match keep? {
        Keep::All => Some(&Keep::All),
        Keep::Keys(keys) => keys.iter().find(|(k, _)| *k == key).map(|(_, c)| c),
    }
}

impl From<Node<'_>> for Value {
    fn from(node: Node<'_>) -> Value {
        match node {
            Node::Null => Value::Null,
            Node::Str(s) => Value::String(s.into_owned()),
            Node::Seq(items) => {
                Value::Array(items.into_vec().into_iter().map(Value::from).collect())
            }
            Node::Map(entries) => Value::Object(
                entries
                    .into_vec()
                    .into_iter()
                    .map(|(k, v)| (k.into_owned(), Value::from(v)))
                    .collect(),
            ),
        }
    }
}
