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

use serde_json::Value;

mod block;
mod build;
mod flow;
mod memory;
mod node;
mod scan;
#[cfg(test)]
mod tests;
mod typed;

use self::block::Parser;
pub(crate) use self::memory::Memory;
use self::node::Result;
pub(crate) use self::node::{Keep, Node};
pub(crate) use self::typed::from_node;

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
