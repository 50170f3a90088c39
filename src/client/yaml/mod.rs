//! The YAML that kubeconfig files are written in, read into a [`Node`]
//! (and from it into serde types, see [`from_node`]) or a
//! [`serde_json::Value`].
//!
//! Not a general YAML parser, and no dependency: it reads what kubectl
//! (go-yaml v2) reads in the files kubectl, kind, minikube and cloud CLIs
//! write, and what people write by hand. Block mappings and sequences
//! (also a sequence at its key's indentation, as kubectl writes
//! `clusters:`), plain, single- and double-quoted scalars (also over
//! several lines, also inside flow collections), literal and folded block
//! scalars, flow collections (`{}`, `[a, "b"]`, on one line or over
//! several), comments, tabs after a key's `:`, anchors and aliases
//! (`&creds`, `*creds`), `<<` merge keys and tags on values (`!!str` keeps
//! `null` a string; the others change nothing a kubeconfig reads). A key
//! given twice keeps its last value, and only the first document is read
//! (what follows its `---` or `...` is not), as with kubectl. `!!binary`,
//! tags and anchors on keys, complex keys (`? `) and directives are refused
//! with the line they are on, never guessed.
//!
//! Memory is linear in the input, and bounded where the caller asks
//! ([`Memory`]): lines are read in place (no copy per line); scalars
//! written as they read borrow the document's text; values under keys the
//! reader does not use ([`Keep`]) are parsed (a syntax error anywhere is
//! an error, as with kubectl) but not stored; a collection is one
//! allocation of its exact size; what a typed reader allocates from the
//! tree is accounted too. What anchors and aliases copy is bounded by
//! twice the document's size (at least 1 MiB), so a "billion laughs"
//! document is an error rather than gigabytes.
//!
//! Plain scalars are strings, except `null`, `~` and nothing, which are
//! null: the kubeconfig reader gives fields their types, as client-go's
//! YAML-to-JSON step does with its Go structs (a namespace `0123` stays a
//! string).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::mem::size_of;

use serde::de::{self, DeserializeSeed, Visitor};
use serde_json::Value;

mod block;
mod build;
mod flow;
mod memory;
mod scan;
#[cfg(test)]
mod tests;
mod typed;

use self::block::*;
use self::build::*;
use self::flow::*;
pub(crate) use self::memory::Memory;
use self::memory::*;
use self::scan::*;
pub(crate) use self::typed::from_node;

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

type Result<T> = std::result::Result<T, YamlError>;

/// Nesting beyond this is refused rather than risking the stack.
const MAX_DEPTH: usize = 64;

/// What anchors and aliases may copy at least, whatever the document's size.
const MIN_ALIAS_BUDGET: usize = 1 << 20;

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

type Entry<'a> = (Cow<'a, str>, Node<'a>);

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
static SHAPE_ONLY: Keep = Keep::Keys(&[]);

/// What to keep of the value of `key` in a mapping kept as `keep` (`None`:
/// not stored).
fn child(keep: Option<&'static Keep>, key: &str) -> Option<&'static Keep> {
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

/// Parse one YAML document, all of it kept, without a memory bound (the
/// caller has capped the file).
pub(crate) fn parse(text: &str) -> Result<Value> {
    parse_node(text, &Keep::All, &mut Memory::new(usize::MAX)).map(Value::from)
}

/// Parse one YAML document into a [`Node`], storing what `keep` keeps,
/// within `memory`.
pub(crate) fn parse_node<'a>(
    text: &'a str,
    keep: &'static Keep,
    memory: &mut Memory,
) -> Result<Node<'a>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut p = Parser::new(text, keep, *memory);
    let result = p.document();
    *memory = p.b.memory;
    result
}
