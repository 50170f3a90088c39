//! Where the tree is built: anchored nodes and the bound on what
//! aliases copy, the stacks on which collections gather their children,
//! and the memory account.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::mem::size_of;

use super::memory::{heap, Memory};
use super::node::{child, Entry, Keep, Node, MAX_DEPTH, MIN_ALIAS_BUDGET};

/// Anchored nodes for the aliases that follow, and what copying may still
/// cost. An alias is a copy: without a bound, a few lines of nested
/// aliases ("billion laughs") would expand to gigabytes.
pub(super) struct Anchors<'a> {
    /// Each anchor's latest node in `nodes`.
    names: BTreeMap<&'a str, usize>,
    nodes: Vec<Anchored<'a>>,
    /// Estimated heap bytes that anchors and aliases may still copy.
    budget: usize,
    limit: usize,
}

pub(super) struct Anchored<'a> {
    value: Node<'a>,
    weight: usize,
    height: usize,
}

/// What an anchor costs besides its node: its place in `nodes` and in the
/// `names` B-tree (whose nodes are at least half full).
pub(super) const ANCHOR: usize = 2 * size_of::<Anchored<'static>>() + 96;

/// Estimated heap bytes and nesting levels of `v`.
pub(super) fn measure(v: &Node<'_>) -> (usize, usize) {
    const NODE: usize = 32;
    match v {
        Node::Str(s) => (NODE + s.len(), 0),
        Node::Seq(items) => items.iter().fold((NODE, 1), |(w, h), item| {
            let (iw, ih) = measure(item);
            (w + iw, h.max(ih + 1))
        }),
        Node::Map(map) => map.iter().fold((NODE, 1), |(w, h), (k, v)| {
            let (vw, vh) = measure(v);
            (w + NODE + k.len() + vw, h.max(vh + 1))
        }),
        _ => (NODE, 0),
    }
}

impl<'a> Anchors<'a> {
    pub(super) fn new(text_len: usize) -> Self {
        let limit = text_len.saturating_mul(2).max(MIN_ALIAS_BUDGET);
        Anchors {
            names: BTreeMap::new(),
            nodes: Vec::new(),
            budget: limit,
            limit,
        }
    }

    fn charge(&mut self, weight: usize) -> std::result::Result<(), String> {
        self.budget = self.budget.checked_sub(weight).ok_or_else(|| {
            format!(
                "anchors and aliases copy more than {} KiB, twice the document's size (a \"billion laughs\" document?)",
                self.limit >> 10
            )
        })?;
        Ok(())
    }

    /// The node anchored as `name`, to be copied `depth` levels deep (its
    /// copy charged to the budget).
    pub(super) fn alias(&mut self, name: &str, depth: usize) -> std::result::Result<usize, String> {
        let Some(&i) = self.names.get(name) else {
            return Err(format!("the alias *{name} has no anchor &{name} before it"));
        };
        let (weight, height) = (self.nodes[i].weight, self.nodes[i].height);
        if depth + height > MAX_DEPTH {
            return Err(format!(
                "the alias *{name} nests deeper than {MAX_DEPTH} levels"
            ));
        }
        self.charge(weight)?;
        Ok(i)
    }
}

/// Where the tree is built: anchored nodes, the two stacks on which the
/// collections being read keep their children (so that each collection
/// is then one allocation of its exact size), and the memory account.
pub(super) struct Build<'a> {
    pub(super) anchors: Anchors<'a>,
    pub(super) items: Vec<Node<'a>>,
    pub(super) entries: Vec<Entry<'a>>,
    pub(super) memory: Memory,
}

/// Make room for one more on a stack, charging its new buffer (the old
/// one is copied from, and then only reused as the heap sees fit).
pub(super) fn reserve<T>(
    stack: &mut Vec<T>,
    memory: &mut Memory,
) -> std::result::Result<(), String> {
    if stack.len() == stack.capacity() {
        let more = stack.capacity().max(4);
        memory.charge(heap(
            (stack.capacity() + more).saturating_mul(size_of::<T>()),
        ))?;
        stack.reserve_exact(more);
    }
    Ok(())
}

impl<'a> Build<'a> {
    /// Charge what a kept string holds on the heap.
    pub(super) fn string(&mut self, s: Cow<'a, str>) -> std::result::Result<Cow<'a, str>, String> {
        if let Cow::Owned(t) = &s {
            self.memory.charge(heap(t.capacity()))?;
        }
        Ok(s)
    }

    /// Charge the new buffer of a string being built, if it grew (as
    /// [`reserve`]).
    pub(super) fn grown(&mut self, before: usize, after: usize) -> std::result::Result<(), String> {
        if after > before {
            self.memory.charge(heap(after))?;
        }
        Ok(())
    }

    pub(super) fn push_item(&mut self, item: Node<'a>) -> std::result::Result<(), String> {
        reserve(&mut self.items, &mut self.memory)?;
        self.items.push(item);
        Ok(())
    }

    pub(super) fn push_entry(&mut self, entry: Entry<'a>) -> std::result::Result<(), String> {
        reserve(&mut self.entries, &mut self.memory)?;
        self.entries.push(entry);
        Ok(())
    }

    /// The list of the items from `base` on.
    pub(super) fn seq(&mut self, base: usize) -> std::result::Result<Node<'a>, String> {
        let len = self.items.len() - base;
        self.memory.charge(heap(len * size_of::<Node<'a>>()))?;
        Ok(Node::Seq(self.items.split_off(base).into_boxed_slice()))
    }

    /// The mapping of the entries from `base` on, in order, a key given
    /// twice (or set by a `<<` merge and then again) keeping its last
    /// value.
    pub(super) fn map(&mut self, base: usize) -> std::result::Result<Node<'a>, String> {
        let entries = &self.entries[base..];
        let n = entries.len();
        let dropped: Vec<bool> = if n <= 16 {
            (0..n)
                .map(|i| entries[i + 1..].iter().any(|(k, _)| *k == entries[i].0))
                .collect()
        } else {
            // A map of the same type as the anchors' (the static binary gets
            // one): its nodes of 11 keys and indexes, at least 5 full.
            self.memory
                .charge(heap(n) + n * (11 * 24 + 12 * 8 + 16) / 4)?;
            let mut last = BTreeMap::new();
            for (i, (k, _)) in entries.iter().enumerate() {
                last.insert(&**k, i);
            }
            let mut dropped = vec![true; n];
            for i in last.into_values() {
                dropped[i] = false;
            }
            dropped
        };
        let len = dropped.iter().filter(|d| !**d).count();
        self.memory.charge(heap(len * size_of::<Entry<'a>>()))?;
        if len == n {
            return Ok(Node::Map(self.entries.split_off(base).into_boxed_slice()));
        }
        let mut map = Vec::with_capacity(len);
        for (entry, dropped) in self.entries.drain(base..).zip(dropped) {
            if !dropped {
                map.push(entry);
            }
        }
        Ok(Node::Map(map.into_boxed_slice()))
    }

    /// A `<<` merge key's value, onto the entries of the mapping being
    /// read (kubectl's go-yaml v2 semantics): the merged keys are set at
    /// the `<<`'s place in the mapping, so they override the keys above it
    /// and the keys below override them; of a list of mappings, the first
    /// to name a key wins. Only checked when `store` is false.
    pub(super) fn merge(
        &mut self,
        value: Node<'a>,
        store: bool,
    ) -> std::result::Result<(), String> {
        let wrong = || "a `<<` merge key takes a mapping or a list of mappings".to_string();
        let maps = match value {
            Node::Map(m) => vec![m],
            Node::Seq(items) => {
                let mut maps = Vec::with_capacity(items.len());
                for item in items.into_vec().into_iter().rev() {
                    match item {
                        Node::Map(m) => maps.push(m),
                        _ => return Err(wrong()),
                    }
                }
                maps
            }
            _ => return Err(wrong()),
        };
        if store {
            for entry in maps.into_iter().flat_map(|m| m.into_vec()) {
                self.push_entry(entry)?;
            }
        }
        Ok(())
    }

    /// Remember `value` as the node anchored as `name`.
    pub(super) fn define(
        &mut self,
        name: &'a str,
        value: Node<'a>,
    ) -> std::result::Result<usize, String> {
        let (weight, height) = measure(&value);
        self.anchors.charge(weight)?;
        self.memory.charge(ANCHOR)?;
        let i = self.anchors.nodes.len();
        self.anchors.names.insert(name, i);
        self.anchors.nodes.push(Anchored {
            value,
            weight,
            height,
        });
        Ok(i)
    }

    /// A copy of anchored node `i`, with what `keep` keeps of it.
    pub(super) fn copy_anchored(
        &mut self,
        i: usize,
        keep: &'static Keep,
    ) -> std::result::Result<Node<'a>, String> {
        let node = std::mem::replace(&mut self.anchors.nodes[i].value, Node::Null);
        let copy = self.copy(&node, keep);
        self.anchors.nodes[i].value = node;
        copy
    }

    fn copy(
        &mut self,
        node: &Node<'a>,
        keep: &'static Keep,
    ) -> std::result::Result<Node<'a>, String> {
        Ok(match node {
            Node::Null => Node::Null,
            Node::Str(s) => Node::Str(self.string(s.clone())?),
            Node::Seq(items) => {
                let base = self.items.len();
                for item in items.iter() {
                    let item = self.copy(item, keep)?;
                    self.push_item(item)?;
                }
                self.seq(base)?
            }
            Node::Map(entries) => {
                let base = self.entries.len();
                for (k, v) in entries.iter() {
                    if let Some(keep) = child(Some(keep), k) {
                        let entry = (self.string(k.clone())?, self.copy(v, keep)?);
                        self.push_entry(entry)?;
                    }
                }
                self.map(base)?
            }
        })
    }
}
