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

/// What reading a document may allocate, and has: the tree and the stacks
/// it is built on, the lines and strings it copies, anchored nodes and
/// their copies, and what [`from_node`] allocates for the typed value.
/// Charged before (or as) the allocation is made; never credited, so that
/// memory freed but still resident counts too.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Memory {
    used: usize,
    limit: usize,
    exceeded: bool,
}

impl Memory {
    /// At most `limit` bytes.
    pub(crate) fn new(limit: usize) -> Self {
        Memory {
            used: 0,
            limit,
            exceeded: false,
        }
    }

    /// Whether reading stopped because it would need more than the limit.
    pub(crate) fn exceeded(&self) -> bool {
        self.exceeded
    }

    /// What reading has charged so far (bytes).
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used
    }

    fn charge(&mut self, bytes: usize) -> std::result::Result<(), String> {
        self.used = self.used.saturating_add(bytes);
        if self.used > self.limit {
            self.exceeded = true;
            return Err(format!(
                "reading the document needs more than {} KiB of memory",
                self.limit >> 10
            ));
        }
        Ok(())
    }
}

/// What an allocation of `bytes` takes on the heap: glibc's chunk, the
/// request and an 8-byte header rounded up to 16, at least 32.
fn heap(bytes: usize) -> usize {
    if bytes == 0 {
        return 0;
    }
    (bytes.saturating_add(8 + 15) & !15).max(32)
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

impl<'a> Parser<'a> {
    fn document(&mut self) -> Result<Node<'a>> {
        if let Some(0) = self.next_content()? {
            if self.line().starts_with('%') {
                return Err(self.err("YAML directives are not supported"));
            }
            match doc_marker(self.line()) {
                Some("---") => {
                    self.marker_alone()?;
                    self.advance();
                }
                // `...` first: an empty first document.
                Some(_) => return self.marker_alone().map(|()| Node::Null),
                None => {}
            }
        }
        let value = match self.next_content()? {
            None => Node::Null,
            Some(0) if doc_marker(self.line()).is_some() => Node::Null,
            Some(ind) => self.node(ind, 0)?,
        };
        match self.next_content()? {
            None => Ok(value),
            // As kubectl's go-yaml: only the first document is read, whatever
            // follows its end.
            Some(0) if doc_marker(self.line()).is_some() => Ok(value),
            Some(_) => {
                Err(self.err("unexpected content after the document (check the indentation)"))
            }
        }
    }
}

/// A document marker: `---` or `...` at the start of a line, followed by
/// whitespace or nothing.
fn doc_marker(line: &str) -> Option<&'static str> {
    ["---", "..."].into_iter().find(|m| {
        line.strip_prefix(m)
            .is_some_and(|r| r.is_empty() || r.starts_with([' ', '\t']))
    })
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// Blank, or only a comment.
fn is_blank(line: &str) -> bool {
    let t = line.trim_start();
    t.is_empty() || t.starts_with('#')
}

/// What may follow a complete value on its line: nothing, or a comment
/// after whitespace.
fn ends_line(rest: &str) -> bool {
    rest.trim().is_empty() || (rest.starts_with([' ', '\t']) && is_blank(rest))
}

/// `- x` or a lone `-`.
fn is_entry(content: &str) -> bool {
    content == "-" || content.starts_with("- ") || content.starts_with("-\t")
}

/// Text before a comment (`#` after whitespace), trailing blanks removed.
fn strip_comment(s: &str) -> (&str, bool) {
    let bytes = s.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'#' && (i == 0 || bytes[i - 1] == b' ' || bytes[i - 1] == b'\t') {
            return (s[..i].trim_end(), true);
        }
    }
    (s.trim_end(), false)
}

/// A plain scalar's value: `null`, `~` and nothing are null.
fn plain_node(s: Cow<'_, str>) -> Node<'_> {
    match &*s {
        "" | "~" | "null" | "Null" | "NULL" => Node::Null,
        _ => Node::Str(s),
    }
}

/// What a plain scalar may not contain in block context.
fn check_plain(s: &str) -> std::result::Result<(), String> {
    if s.contains(": ") || s.contains(":\t") || s.ends_with(':') {
        return Err(format!(
            "`: ` inside the unquoted value {s:?}; quote the value (or check the indentation)"
        ));
    }
    check_plain_start(s)
}

/// Indicators a plain scalar (value or key) may not start with.
fn check_plain_start(s: &str) -> std::result::Result<(), String> {
    if s == "?" || s.starts_with("? ") || s.starts_with("?\t") {
        return Err("complex mapping keys (`? `) are not supported".into());
    }
    match s.chars().next() {
        Some(c @ (',' | '[' | ']' | '{' | '}' | '@' | '`' | '%' | '|' | '>' | '#')) => Err(
            format!("an unquoted value may not start with {c:?}; quote it"),
        ),
        Some('&' | '*') => Err("an anchor or alias is not supported here".into()),
        Some('!') => Err("tags are not supported".into()),
        _ => Ok(()),
    }
}

/// The scanned text of a quoted scalar on one line, from just after its
/// opening quote.
struct Scan<'s> {
    /// Borrowed from the line until an escape or a doubled quote makes it
    /// differ from what is written.
    text: Cow<'s, str>,
    /// Byte offset just past the closing quote, if it is on this line.
    end: Option<usize>,
    /// The line ended with a `\` in a double-quoted scalar: no folding space.
    escaped_break: bool,
    /// `text` up to here came from escapes or content; line folding may
    /// only trim whitespace after it.
    protected: usize,
}

fn scan_quoted(s: &str, quote: char) -> std::result::Result<Scan<'_>, String> {
    let mut owned: Option<String> = None;
    let text = |owned: Option<String>, upto: usize| match owned {
        Some(t) => Cow::Owned(t),
        None => Cow::Borrowed(&s[..upto]),
    };
    let mut protected = 0;
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\'' if quote == '\'' => {
                if let Some((_, '\'')) = chars.peek() {
                    chars.next();
                    owned.get_or_insert_with(|| s[..i].to_owned()).push('\'');
                } else {
                    return Ok(Scan {
                        text: text(owned, i),
                        end: Some(i + 1),
                        escaped_break: false,
                        protected: 0,
                    });
                }
            }
            '"' if quote == '"' => {
                return Ok(Scan {
                    text: text(owned, i),
                    end: Some(i + 1),
                    escaped_break: false,
                    protected: 0,
                })
            }
            '\\' if quote == '"' => match chars.next() {
                None => {
                    let text = text(owned, i);
                    return Ok(Scan {
                        protected: text.len(),
                        text,
                        end: None,
                        escaped_break: true,
                    });
                }
                Some((_, e)) => {
                    let c = unescape(e, &mut chars)?;
                    let t = owned.get_or_insert_with(|| s[..i].to_owned());
                    t.push(c);
                    protected = t.len();
                }
            },
            _ => {
                if let Some(t) = owned.as_mut() {
                    t.push(c);
                }
            }
        }
    }
    Ok(Scan {
        text: text(owned, s.len()),
        end: None,
        escaped_break: false,
        protected,
    })
}

fn unescape(
    e: char,
    chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>,
) -> std::result::Result<char, String> {
    let hex = |chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>, n: usize| {
        let digits: String = (0..n)
            .filter_map(|_| chars.next().map(|(_, c)| c))
            .collect();
        Some(&digits)
            .filter(|d| d.len() == n && d.chars().all(|c| c.is_ascii_hexdigit()))
            .and_then(|d| u32::from_str_radix(d, 16).ok())
            .and_then(char::from_u32)
            .ok_or_else(|| format!("invalid escape \\{e}{digits}"))
    };
    Ok(match e {
        '0' => '\0',
        'a' => '\u{7}',
        'b' => '\u{8}',
        't' | '\t' => '\t',
        'n' => '\n',
        'v' => '\u{b}',
        'f' => '\u{c}',
        'r' => '\r',
        'e' => '\u{1b}',
        ' ' => ' ',
        '"' => '"',
        '/' => '/',
        '\\' => '\\',
        'N' => '\u{85}',
        '_' => '\u{a0}',
        'L' => '\u{2028}',
        'P' => '\u{2029}',
        'x' => hex(chars, 2)?,
        'u' => hex(chars, 4)?,
        'U' => hex(chars, 8)?,
        other => return Err(format!("invalid escape \\{other}")),
    })
}

/// An anchor (`&name`) or alias (`*name`) at the start of `s`: its name
/// and the text after it. Names are what libyaml (and so kubectl's
/// go-yaml) scans: ASCII letters, digits, `_` and `-`.
fn property_name(s: &str) -> std::result::Result<(&str, &str), String> {
    let body = s.get(1..).unwrap_or("");
    let end = body
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .unwrap_or(body.len());
    if end == 0 {
        return Err(format!("{:?} without a name", &s[..1]));
    }
    Ok(body.split_at(end))
}

/// A tag at the start of `s` (`!!str`, `!local`, `!`, `!<uri>`): whether
/// it makes the node a string, and the text after it. As kubectl's go-yaml
/// reads them: `!!str` keeps `null`, `~` and nothing a string; every other
/// tag it resolves changes nothing in a kubeconfig, whose fields have
/// their own types, except `!!binary` (base64 it would decode), refused.
fn tag(s: &str) -> std::result::Result<(bool, &str), String> {
    let end = s.find([' ', '\t', '\r', '\n']).unwrap_or(s.len());
    let (tag, rest) = s.split_at(end);
    let name = match tag.strip_prefix("!<").and_then(|t| t.strip_suffix('>')) {
        Some(uri) => uri
            .strip_prefix("tag:yaml.org,2002:")
            .map(|n| format!("!!{n}")),
        None => Some(tag.to_owned()),
    };
    let uri_char = |c: char| c.is_ascii_alphanumeric() || "-_#;/?:@&=+$.~*'()!".contains(c);
    if !tag.starts_with("!<") && !tag.chars().all(uri_char) {
        // Where it would end is read differently by YAML parsers.
        return Err(format!("the tag {tag:?} must be followed by a space"));
    }
    match name.as_deref() {
        Some("!!str") => Ok((true, rest)),
        Some("!!binary") => Err(format!("the tag {tag} is not supported")),
        Some(n) if n[1..].contains('!') && !n.starts_with("!!") => Err(format!(
            "the tag {tag} names a handle no %TAG directive defines"
        )),
        _ => Ok((false, rest)),
    }
}

/// Anchored nodes for the aliases that follow, and what copying may still
/// cost. An alias is a copy: without a bound, a few lines of nested
/// aliases ("billion laughs") would expand to gigabytes.
struct Anchors<'a> {
    /// Each anchor's latest node in `nodes`.
    names: BTreeMap<&'a str, usize>,
    nodes: Vec<Anchored<'a>>,
    /// Estimated heap bytes that anchors and aliases may still copy.
    budget: usize,
    limit: usize,
}

struct Anchored<'a> {
    value: Node<'a>,
    weight: usize,
    height: usize,
}

/// What an anchor costs besides its node: its place in `nodes` and in the
/// `names` B-tree (whose nodes are at least half full).
const ANCHOR: usize = 2 * size_of::<Anchored<'static>>() + 96;

/// Estimated heap bytes and nesting levels of `v`.
fn measure(v: &Node<'_>) -> (usize, usize) {
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
    fn new(text_len: usize) -> Self {
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
    fn alias(&mut self, name: &str, depth: usize) -> std::result::Result<usize, String> {
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
struct Build<'a> {
    anchors: Anchors<'a>,
    items: Vec<Node<'a>>,
    entries: Vec<Entry<'a>>,
    memory: Memory,
}

/// Make room for one more on a stack, charging its new buffer (the old
/// one is copied from, and then only reused as the heap sees fit).
fn reserve<T>(stack: &mut Vec<T>, memory: &mut Memory) -> std::result::Result<(), String> {
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
    fn string(&mut self, s: Cow<'a, str>) -> std::result::Result<Cow<'a, str>, String> {
        if let Cow::Owned(t) = &s {
            self.memory.charge(heap(t.capacity()))?;
        }
        Ok(s)
    }

    /// Charge the new buffer of a string being built, if it grew (as
    /// [`reserve`]).
    fn grown(&mut self, before: usize, after: usize) -> std::result::Result<(), String> {
        if after > before {
            self.memory.charge(heap(after))?;
        }
        Ok(())
    }

    fn push_item(&mut self, item: Node<'a>) -> std::result::Result<(), String> {
        reserve(&mut self.items, &mut self.memory)?;
        self.items.push(item);
        Ok(())
    }

    fn push_entry(&mut self, entry: Entry<'a>) -> std::result::Result<(), String> {
        reserve(&mut self.entries, &mut self.memory)?;
        self.entries.push(entry);
        Ok(())
    }

    /// The list of the items from `base` on.
    fn seq(&mut self, base: usize) -> std::result::Result<Node<'a>, String> {
        let len = self.items.len() - base;
        self.memory.charge(heap(len * size_of::<Node<'a>>()))?;
        Ok(Node::Seq(self.items.split_off(base).into_boxed_slice()))
    }

    /// The mapping of the entries from `base` on, in order, a key given
    /// twice (or set by a `<<` merge and then again) keeping its last
    /// value.
    fn map(&mut self, base: usize) -> std::result::Result<Node<'a>, String> {
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
    fn merge(&mut self, value: Node<'a>, store: bool) -> std::result::Result<(), String> {
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
    fn define(&mut self, name: &'a str, value: Node<'a>) -> std::result::Result<usize, String> {
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
    fn copy_anchored(
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

/// Reads the document line by line in place: memory is the [`Node`] it
/// builds plus the current line, whatever the number of lines.
struct Parser<'a> {
    text: &'a str,
    /// The current line: its byte range in `text`, without the line break.
    start: usize,
    end: usize,
    /// The current line's number (0-based).
    pos: usize,
    /// The current line with a compact entry's `- ` blanked out (see
    /// [`Parser::sequence`]), when `is_blanked`; one buffer for the whole
    /// document.
    blanked: String,
    is_blanked: bool,
    depth: usize,
    b: Build<'a>,
    /// What to store of the node being read; `None`: read, not stored.
    keep: Option<&'static Keep>,
    /// An anchor ended its line: the node on the next lines is its.
    anchor_pending: bool,
    /// A `!!str` tag precedes the plain scalar about to be read.
    force_str: bool,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str, keep: &'static Keep, memory: Memory) -> Self {
        let mut p = Parser {
            text,
            start: 0,
            end: 0,
            pos: 0,
            blanked: String::new(),
            is_blanked: false,
            depth: 0,
            b: Build {
                anchors: Anchors::new(text.len()),
                items: Vec::new(),
                entries: Vec::new(),
                memory,
            },
            keep: Some(keep),
            anchor_pending: false,
            force_str: false,
        };
        p.end = p.line_end(0);
        p
    }

    /// Where the line starting at `start` ends, before its `\n` or `\r\n`
    /// (as [`str::lines`] splits).
    fn line_end(&self, start: usize) -> usize {
        match self.text[start..].find('\n') {
            Some(i) if i > 0 && self.text.as_bytes()[start + i - 1] == b'\r' => start + i - 1,
            Some(i) => start + i,
            None => self.text.len(),
        }
    }

    fn at_end(&self) -> bool {
        self.start >= self.text.len()
    }

    /// On to the next line.
    fn advance(&mut self) {
        self.is_blanked = false;
        self.start = match self.text[self.end..].find('\n') {
            Some(i) => self.end + i + 1,
            None => self.text.len(),
        };
        self.end = self.line_end(self.start);
        self.pos += 1;
    }

    fn line(&self) -> &str {
        if self.is_blanked {
            &self.blanked
        } else {
            self.raw_line()
        }
    }

    /// The current line as written (the same as [`Parser::line`] past a
    /// blanked-out dash).
    fn raw_line(&self) -> &'a str {
        &self.text[self.start..self.end]
    }

    fn err(&self, message: impl Into<String>) -> YamlError {
        YamlError {
            line: self.pos + 1,
            message: message.into(),
        }
    }

    /// The document marker on this line has nothing after it but a comment.
    fn marker_alone(&self) -> Result<()> {
        if ends_line(&self.line()[3..]) {
            Ok(())
        } else {
            Err(self.err("content on a `---` or `...` line is not supported"))
        }
    }

    /// Skip blank and comment lines; the indentation of the next line.
    fn next_content(&mut self) -> Result<Option<usize>> {
        while !self.at_end() && is_blank(self.line()) {
            self.advance();
        }
        if self.at_end() {
            return Ok(None);
        }
        let ind = indent_of(self.line());
        if self.line()[ind..].starts_with('\t') {
            return Err(self.err("tabs are not allowed in indentation"));
        }
        Ok(Some(ind))
    }

    /// The node whose first line is the current one, starting at column
    /// `ind`; its parent block is at indentation `parent`.
    fn node(&mut self, ind: usize, parent: usize) -> Result<Node<'a>> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err(format!("nested deeper than {MAX_DEPTH} levels")));
        }
        let pending = std::mem::take(&mut self.anchor_pending);
        self.force_str = false;
        // Past a blanked-out dash, the line as written reads the same.
        let content = &self.raw_line()[ind..];
        if pending && content.starts_with(['&', '*']) {
            return Err(self.err("a node may have one anchor and an alias none"));
        }
        let value = if is_entry(content) {
            self.sequence(ind)
        } else if content.starts_with(['&', '*']) {
            self.value(ind, parent, false)
        } else if self.key(content)?.is_some() {
            self.mapping(ind)
        } else if self.depth == 1 && content.starts_with(['[', '{']) {
            // The whole document is a flow collection: its lines may
            // start anywhere.
            self.flow(ind, None)
        } else {
            self.value(ind, parent, false)
        };
        self.depth -= 1;
        value
    }

    /// `Some((key, offset of the text after the colon))` when `content` is
    /// `key: ...`.
    fn key<'s>(&self, content: &'s str) -> Result<Option<(Cow<'s, str>, usize)>> {
        let (key, after) = match content.chars().next() {
            Some(q @ ('"' | '\'')) => {
                let scan = scan_quoted(&content[1..], q).map_err(|e| self.err(e))?;
                let Some(end) = scan.end else {
                    return Ok(None);
                };
                (scan.text, 1 + end)
            }
            Some('?') if content.len() == 1 || content[1..].starts_with([' ', '\t']) => {
                return Err(self.err("complex mapping keys (`? `) are not supported"))
            }
            Some('&' | '*') => {
                return Err(self.err("anchors and aliases on mapping keys are not supported"))
            }
            Some('!') => return Err(self.err("a tag on a mapping key is not supported")),
            Some('[' | '{') | None => return Ok(None),
            Some(_) => {
                let (text, _) = strip_comment(content);
                let colon = text
                    .match_indices(':')
                    .map(|(i, _)| i)
                    .find(|&i| matches!(text.as_bytes().get(i + 1), None | Some(b' ' | b'\t')));
                let Some(i) = colon else {
                    return Ok(None);
                };
                let key = text[..i].trim_end();
                if key.is_empty() {
                    return Err(self.err("empty mapping keys are not supported"));
                }
                check_plain_start(key).map_err(|e| self.err(e))?;
                if key == ":" {
                    return Err(self.err("a lone `:` as a mapping key; quote it"));
                }
                (Cow::Borrowed(key), i)
            }
        };
        let rest = &content[after..];
        let gap = rest.len() - rest.trim_start_matches(' ').len();
        let rest = &rest[gap..];
        match rest.strip_prefix(':') {
            Some(v) if v.is_empty() || v.starts_with([' ', '\t']) => {
                Ok(Some((key, after + gap + 1)))
            }
            _ => Ok(None),
        }
    }

    /// Whether the block at indentation `ind` goes on: the next content
    /// line is at `ind` (less, or a document marker, ends the block).
    fn next_at(&mut self, ind: usize) -> Result<bool> {
        match self.next_content()? {
            None => Ok(false),
            Some(i) if i < ind || (i == 0 && doc_marker(self.line()).is_some()) => Ok(false),
            Some(i) if i > ind => Err(self.err(format!(
                "unexpected indentation: expected {ind} spaces, found {i}"
            ))),
            Some(_) => Ok(true),
        }
    }

    /// A block mapping. A key given twice keeps its last value, as kubectl
    /// reads it; `<<: *alias` merges (see [`Build::merge`]).
    fn mapping(&mut self, ind: usize) -> Result<Node<'a>> {
        let keep = self.keep;
        let base = self.b.entries.len();
        while self.next_at(ind)? {
            let content = &self.raw_line()[ind..];
            if is_entry(content) {
                return Err(self.err("a list item where a `key: value` was expected"));
            }
            let Some((key, after)) = self.key(content)? else {
                return Err(self.err(format!(
                    "expected `key: value` at this indentation, found {:?}",
                    strip_comment(content).0
                )));
            };
            let merge = key == "<<" && content.starts_with('<');
            let line = self.pos;
            let value_keep = if merge {
                Some(keep.unwrap_or(&SHAPE_ONLY))
            } else {
                child(keep, &key)
            };
            self.keep = value_keep;
            let value = self.value(ind + after, ind, true);
            self.keep = keep;
            let value = value?;
            let stored = if merge {
                self.b.merge(value, keep.is_some())
            } else if value_keep.is_some() {
                self.b
                    .string(key)
                    .and_then(|key| self.b.push_entry((key, value)))
            } else {
                Ok(())
            };
            stored.map_err(|message| YamlError {
                line: line + 1,
                message,
            })?;
        }
        if keep.is_none() {
            return Ok(Node::Map(Box::new([])));
        }
        self.b.map(base).map_err(|e| self.err(e))
    }

    fn sequence(&mut self, ind: usize) -> Result<Node<'a>> {
        let base = self.b.items.len();
        while self.next_at(ind)? {
            if !is_entry(&self.line()[ind..]) {
                break;
            }
            let after_dash = &self.line()[ind + 1..];
            if after_dash.starts_with('\t') {
                return Err(self.err("a tab after `-`: use a space"));
            }
            let col = ind + 1 + after_dash.len() - after_dash.trim_start_matches(' ').len();
            let content = &self.raw_line()[col..];
            let item = if is_blank(content) || content.starts_with(['&', '*']) {
                self.value(col, ind, false)?
            } else if is_entry(content) || self.key(content)?.is_some() {
                // A compact nested node (`- key: v` or `- - x`): blank out the
                // dash so the node reads as if it started on its own line.
                let before = self.blanked.capacity();
                self.blanked.clear();
                self.blanked.extend(std::iter::repeat_n(' ', col));
                self.blanked.push_str(content);
                self.is_blanked = true;
                let after = self.blanked.capacity();
                self.b.grown(before, after).map_err(|e| self.err(e))?;
                self.node(col, ind)?
            } else {
                self.value(col, ind, false)?
            };
            if self.keep.is_some() {
                self.b.push_item(item).map_err(|e| self.err(e))?;
            }
        }
        if self.keep.is_none() {
            return Ok(Node::Seq(Box::new([])));
        }
        self.b.seq(base).map_err(|e| self.err(e))
    }

    /// The value starting at column `col` of the current line (after
    /// `key:` or `- `), in a block at indentation `parent`. Leaves `pos` on
    /// the first line it did not consume.
    fn value(&mut self, col: usize, parent: usize, after_key: bool) -> Result<Node<'a>> {
        let line = self.raw_line();
        // As kubectl's go-yaml: tabs may follow a key's `:`, not a `- `.
        let text = if after_key {
            line[col..].trim_start_matches([' ', '\t'])
        } else {
            line[col..].trim_start_matches(' ')
        };
        if text.starts_with('\t') {
            return Err(self.err("a tab where a value was expected: use spaces"));
        }
        let col = line.len() - text.len();
        if is_blank(text) {
            self.advance();
            return match self.next_content()? {
                Some(i) if i > parent => self.node(i, parent),
                // kubectl writes a mapping's list at the key's own indentation.
                Some(i) if after_key && i == parent && is_entry(&self.line()[i..]) => {
                    self.node(i, parent)
                }
                _ => Ok(Node::Null),
            };
        }
        match text.chars().next() {
            Some('&') => self.anchored(col, parent, after_key),
            Some('!') => self.tagged(col, parent, after_key),
            Some('*') => self.alias(col),
            Some('"' | '\'') => self.quoted(col, parent),
            Some('|' | '>') => self.block_scalar(text, parent),
            Some('[' | '{') => self.flow(col, Some(parent)),
            Some('-') if is_entry(strip_comment(text).0) => {
                Err(self
                    .err("a list may not start on the line of its key; put `- ` on the next line"))
            }
            _ => self.plain(text, parent),
        }
    }

    /// `&name` at column `col` and the node it names, remembered (whole,
    /// whatever is kept here: an alias may be used where more is kept) for
    /// the aliases that follow.
    fn anchored(&mut self, col: usize, parent: usize, after_key: bool) -> Result<Node<'a>> {
        let line = self.raw_line();
        let (name, rest) = property_name(&line[col..]).map_err(|e| self.err(e))?;
        if !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
            return Err(self
                .err("an anchor name is ASCII letters, digits, `_` and `-`, followed by a space"));
        }
        let value_text = rest.trim_start_matches([' ', '\t']);
        if value_text.starts_with(['&', '*']) {
            return Err(self.err(format!(
                "&{name} must be followed by a value, not another anchor or an alias"
            )));
        }
        if !is_blank(value_text) && !value_text.starts_with('!') && self.key(value_text)?.is_some()
        {
            return Err(self.err(format!(
                "an anchor on a mapping key is not supported: to name the mapping, put &{name} at the end of the line before it"
            )));
        }
        let line_no = self.pos;
        let keep = self.keep.replace(&Keep::All);
        self.anchor_pending = is_blank(value_text);
        let value = self.value(line.len() - value_text.len(), parent, after_key);
        self.anchor_pending = false;
        self.keep = keep;
        let value = value?;
        let b = &mut self.b;
        let copy = b.define(name, value).and_then(|i| match keep {
            Some(keep) => b.copy_anchored(i, keep),
            None => Ok(Node::Null),
        });
        copy.map_err(|message| YamlError {
            line: line_no + 1,
            message,
        })
    }

    /// A tag at column `col` and the node it tags (see [`tag`]).
    fn tagged(&mut self, col: usize, parent: usize, after_key: bool) -> Result<Node<'a>> {
        let line = self.raw_line();
        let (is_str, rest) = tag(&line[col..]).map_err(|e| self.err(e))?;
        let value_text = rest.trim_start_matches([' ', '\t']);
        if value_text.starts_with(['!', '*']) {
            return Err(self.err("a tag must be followed by a value"));
        }
        if !is_blank(value_text) && !value_text.starts_with('&') && self.key(value_text)?.is_some()
        {
            return Err(self.err("a tag on a mapping key is not supported"));
        }
        self.force_str = is_str;
        let value = self.value(line.len() - value_text.len(), parent, after_key);
        self.force_str = false;
        match value? {
            Node::Null if is_str => Ok(Node::Str(Cow::Borrowed(""))),
            value => Ok(value),
        }
    }

    /// `*name` at column `col`: a copy of the node anchored as `name`.
    fn alias(&mut self, col: usize) -> Result<Node<'a>> {
        let line = self.raw_line();
        let (name, rest) = property_name(&line[col..]).map_err(|e| self.err(e))?;
        if !ends_line(rest) {
            return Err(self.err(format!(
                "unexpected {:?} after the alias *{name}",
                rest.trim()
            )));
        }
        let b = &mut self.b;
        let value = b
            .anchors
            .alias(name, self.depth)
            .and_then(|i| match self.keep {
                Some(keep) => b.copy_anchored(i, keep),
                None => Ok(Node::Null),
            });
        let value = value.map_err(|e| self.err(e))?;
        self.advance();
        Ok(value)
    }

    /// A flow collection starting at column `col` of the current line,
    /// over as many lines as it takes; its continuation lines are indented
    /// more than `parent` (`None`: the document is the collection).
    fn flow(&mut self, col: usize, parent: Option<usize>) -> Result<Node<'a>> {
        let text = self.text;
        let from = self.start + col;
        let s = &text[from..];
        let mut flow = Flow {
            s,
            i: 0,
            depth: self.depth,
            lines: 0,
            line_end: s.find('\n').unwrap_or(s.len()),
            first_line: self.pos + 1,
            parent,
            b: &mut self.b,
            keep: self.keep,
        };
        let value = flow.node();
        let (i, lines) = (flow.i, flow.lines);
        let line = self.pos + 1 + lines;
        let value = value.map_err(|message| YamlError { line, message })?;
        let rest = &text[from + i..];
        let rest = &rest[..rest.find('\n').unwrap_or(rest.len())];
        if !ends_line(rest) {
            return Err(YamlError {
                line,
                message: format!("unexpected {:?} after a flow collection", rest.trim()),
            });
        }
        for _ in 0..=lines {
            self.advance();
        }
        Ok(value)
    }

    /// A plain scalar, folded over more-indented continuation lines.
    fn plain(&mut self, first: &'a str, parent: usize) -> Result<Node<'a>> {
        let (first, mut ended) = strip_comment(first);
        check_plain(first).map_err(|e| self.err(e))?;
        let keeping = self.keep.is_some();
        // Owned once folded over several lines (and kept).
        let mut out: Option<String> = None;
        self.advance();
        let mut newlines = 0;
        while !ended && !self.at_end() {
            let line = self.raw_line();
            let t = line.trim();
            if t.is_empty() {
                newlines += 1;
                self.advance();
                continue;
            }
            if indent_of(line) <= parent || t.starts_with('#') {
                break;
            }
            let (part, comment) = strip_comment(t);
            check_plain(part).map_err(|e| self.err(e))?;
            if keeping {
                let before = out.as_ref().map_or(0, String::capacity);
                let out = out.get_or_insert_with(|| first.to_owned());
                if newlines == 0 {
                    out.push(' ');
                } else {
                    out.extend(std::iter::repeat_n('\n', newlines));
                }
                out.push_str(part);
                let after = out.capacity();
                self.b.grown(before, after).map_err(|e| self.err(e))?;
            }
            newlines = 0;
            ended = comment;
            self.advance();
        }
        let text = match out {
            Some(out) => Cow::Owned(out),
            None => Cow::Borrowed(first),
        };
        if std::mem::take(&mut self.force_str) {
            return Ok(Node::Str(text));
        }
        Ok(plain_node(text))
    }

    /// A quoted scalar starting at column `col`, folded over line breaks;
    /// continuation lines are indented deeper than the `parent` block.
    fn quoted(&mut self, col: usize, parent: usize) -> Result<Node<'a>> {
        let start = self.pos;
        let keeping = self.keep.is_some();
        let quote = self.raw_line()[col..].chars().next().unwrap_or('"');
        let mut out = String::new();
        let mut from = col + 1;
        let mut first = true;
        loop {
            let line = self.raw_line();
            let scan = scan_quoted(&line[from..], quote).map_err(|e| self.err(e))?;
            let before = out.capacity();
            if let Some(end) = scan.end {
                let rest = &line[from + end..];
                if !ends_line(rest) {
                    return Err(
                        self.err(format!("unexpected {:?} after a quoted value", rest.trim()))
                    );
                }
                let text = if !keeping {
                    Cow::Borrowed("")
                } else if first {
                    // On one line: as scanned (borrowed unless escaped).
                    self.b.string(scan.text).map_err(|e| self.err(e))?
                } else {
                    out.push_str(&scan.text);
                    let after = out.capacity();
                    self.b.grown(before, after).map_err(|e| self.err(e))?;
                    Cow::Owned(out)
                };
                self.advance();
                return Ok(Node::Str(text));
            }
            first = false;
            if keeping {
                let trimmed = scan.text.trim_end_matches([' ', '\t']).len();
                out.push_str(&scan.text[..trimmed.max(scan.protected)]);
            }
            let mut newlines = 0;
            loop {
                self.advance();
                if self.at_end() {
                    return Err(YamlError {
                        line: start + 1,
                        message: "unterminated quoted value".into(),
                    });
                }
                if self.raw_line().trim().is_empty() {
                    if self.raw_line().contains('\t') {
                        return Err(self.err("a tab on a blank line inside a quoted value"));
                    }
                    newlines += 1;
                } else {
                    break;
                }
            }
            if !keeping {
            } else if newlines > 0 {
                out.extend(std::iter::repeat_n('\n', newlines));
            } else if !scan.escaped_break {
                out.push(' ');
            }
            let after = out.capacity();
            self.b.grown(before, after).map_err(|e| self.err(e))?;
            let line = self.raw_line();
            if indent_of(line) <= parent {
                return Err(self
                    .err("the continuation of a quoted value must be indented more than its key"));
            }
            from = line.len() - line.trim_start_matches([' ', '\t']).len();
        }
    }

    /// `|` or `>` with optional chomping (`-`, `+`) and indentation digit.
    fn block_scalar(&mut self, header: &str, parent: usize) -> Result<Node<'a>> {
        let (header, _) = strip_comment(header);
        let folded = header.starts_with('>');
        let (mut chomp, mut explicit) = (None, None);
        for c in header[1..].chars() {
            match c {
                '-' | '+' if chomp.is_none() => chomp = Some(c),
                '1'..='9' if explicit.is_none() => {
                    explicit = c.to_digit(10).map(|d| parent + d as usize)
                }
                _ => return Err(self.err(format!("invalid block scalar header {header:?}"))),
            }
        }
        self.advance();
        let mut content_indent = explicit;
        // Not built where it is not kept.
        let mut body = self.keep.map(|_| BlockBody::new(folded));
        // The widest all-space line before the first content line.
        let mut leading_spaces = 0;
        while !self.at_end() {
            let line = self.raw_line();
            if line.trim().is_empty() {
                let margin = content_indent.unwrap_or(line.len()).min(line.len());
                if line[..margin].contains('\t') {
                    return Err(self.err("a tab in a block scalar's indentation: use spaces"));
                }
                // Whitespace past the content indentation is content.
                let content = match content_indent {
                    Some(n) if line.len() > n => &line[n..],
                    Some(_) => "",
                    None => {
                        leading_spaces = leading_spaces.max(line.len());
                        ""
                    }
                };
                self.body_line(&mut body, content)?;
                self.advance();
                continue;
            }
            let ind = indent_of(line);
            if content_indent.is_none() && ind > parent && leading_spaces > ind {
                return Err(self.err(
                    "a blank line before this block scalar's first line has more spaces than it",
                ));
            }
            let want = *content_indent.get_or_insert(ind);
            if ind < want || ind <= parent {
                break;
            }
            self.body_line(&mut body, &line[want..])?;
            self.advance();
        }
        let Some(body) = body else {
            return Ok(Node::Str(Cow::Borrowed("")));
        };
        let before = body.out.capacity();
        let text = body.finish(chomp);
        let after = text.capacity();
        self.b.grown(before, after).map_err(|e| self.err(e))?;
        Ok(Node::Str(Cow::Owned(text)))
    }

    /// One more line of a block scalar, if it is kept.
    fn body_line(&mut self, body: &mut Option<BlockBody>, line: &str) -> Result<()> {
        let Some(body) = body else { return Ok(()) };
        let before = body.out.capacity();
        body.line(line);
        let after = body.out.capacity();
        self.b.grown(before, after).map_err(|e| self.err(e))
    }
}

/// A block scalar's text, built line by line. Literal (`|`): lines joined
/// by line breaks. Folded (`>`): lines at the base indentation join with a
/// space, blank lines become line breaks, more-indented lines stay as they
/// are.
struct BlockBody {
    folded: bool,
    out: String,
    /// Empty lines since the last line with content.
    pending: usize,
    any: bool,
    /// The last content line was more indented (folded only).
    more: bool,
}

impl BlockBody {
    fn new(folded: bool) -> Self {
        BlockBody {
            folded,
            out: String::new(),
            pending: 0,
            any: false,
            more: false,
        }
    }

    fn line(&mut self, line: &str) {
        if line.is_empty() {
            self.pending += 1;
            return;
        }
        let breaks = if !self.folded {
            self.pending + usize::from(self.any)
        } else {
            let more = line.starts_with([' ', '\t']);
            let breaks = if !self.any {
                self.pending
            } else if more || self.more {
                self.pending + 1
            } else if self.pending == 0 {
                self.out.push(' ');
                0
            } else {
                self.pending
            };
            self.more = more;
            breaks
        };
        self.out.extend(std::iter::repeat_n('\n', breaks));
        self.out.push_str(line);
        self.pending = 0;
        self.any = true;
    }

    /// The text, its trailing line breaks chomped as asked (`-` strip, `+`
    /// keep, none: one).
    fn finish(mut self, chomp: Option<char>) -> String {
        let breaks = match chomp {
            Some('-') => 0,
            Some(_) => self.pending + usize::from(self.any),
            None => usize::from(self.any),
        };
        self.out.extend(std::iter::repeat_n('\n', breaks));
        self.out
    }
}

/// A flow collection: `[a, "b"]`, `{k: v}`, nested, on one line or over
/// several (`{apiVersion: v1,\n clusters: [...]}`). Keys stay on one line
/// (quoted values may not); a plain value over several lines is refused.
struct Flow<'a, 'b> {
    /// The document from the collection's opening bracket on.
    s: &'a str,
    i: usize,
    depth: usize,
    /// Line breaks passed so far.
    lines: usize,
    /// Where the current line ends (its `\n`, or the end of `s`): found
    /// once per line, since looking for it from each entry of a long line
    /// took time quadratic in the line's length.
    line_end: usize,
    /// The line the collection starts on (1-based), for messages.
    first_line: usize,
    /// Continuation lines are indented more than this (`None`: the
    /// collection is the document).
    parent: Option<usize>,
    b: &'b mut Build<'a>,
    /// What to store of the node being read; `None`: read, not stored.
    keep: Option<&'static Keep>,
}

impl<'a> Flow<'a, '_> {
    /// Skip spaces and tabs on this line.
    fn skip_blanks(&mut self) {
        while self.s[self.i..].starts_with([' ', '\t']) {
            self.i += 1;
        }
    }

    /// Skip spaces, tabs, comments and line breaks.
    fn skip_ws(&mut self) -> std::result::Result<(), String> {
        loop {
            self.skip_blanks();
            let rest = &self.s[self.i..];
            if rest.starts_with("\r\n") {
                self.i += 1;
            } else if rest.starts_with('\n') {
                self.i += 1;
                self.new_line()?;
            } else if rest.starts_with('#')
                && (self.i == 0 || matches!(self.s.as_bytes()[self.i - 1], b' ' | b'\t' | b'\n'))
            {
                self.i += rest.find(['\r', '\n']).unwrap_or(rest.len());
            } else {
                return Ok(());
            }
        }
    }

    /// Check the line just entered: indented more than the parent block
    /// (in spaces; tabs may follow, as in tab-indented JSON), and not a
    /// document marker.
    fn new_line(&mut self) -> std::result::Result<(), String> {
        self.lines += 1;
        let rest = &self.s[self.i..];
        self.line_end = self.i + rest.find('\n').unwrap_or(rest.len());
        let line = &self.s[self.i..self.line_end];
        let ind = indent_of(line);
        if line[ind..].trim().is_empty() {
            return Ok(());
        }
        if ind == 0 && doc_marker(line).is_some() {
            return Err(format!(
                "a document marker inside the flow collection started on line {}",
                self.first_line
            ));
        }
        match self.parent {
            Some(p) if ind <= p => Err(format!(
                "this line continues the flow collection started on line {}, so it must be indented more than {p} spaces",
                self.first_line
            )),
            _ => Ok(()),
        }
    }

    fn peek(&self) -> Option<char> {
        self.s[self.i..].chars().next()
    }

    /// What is left of the current line.
    fn rest_of_line(&self) -> &'a str {
        &self.s[self.i..self.line_end]
    }

    fn not_closed(&self, open: char, line: usize) -> String {
        let close = if open == '[' { ']' } else { '}' };
        format!("the flow collection `{open}` opened on line {line} is not closed with `{close}`")
    }

    /// The node here, read with `keep` (the flow's own restored after).
    fn node_keeping(
        &mut self,
        keep: Option<&'static Keep>,
    ) -> std::result::Result<Node<'a>, String> {
        let outer = std::mem::replace(&mut self.keep, keep);
        let node = self.node();
        self.keep = outer;
        node
    }

    fn node(&mut self) -> std::result::Result<Node<'a>, String> {
        self.skip_ws()?;
        match self.peek() {
            Some(',') => Err("an empty entry in a flow collection".into()),
            Some(open @ ('[' | '{')) => {
                self.depth += 1;
                if self.depth > MAX_DEPTH {
                    return Err(format!("nested deeper than {MAX_DEPTH} levels"));
                }
                self.i += 1;
                let v = if open == '[' {
                    self.list()?
                } else {
                    self.map()?
                };
                self.depth -= 1;
                Ok(v)
            }
            Some(q @ ('"' | '\'')) => {
                self.i += 1;
                let keeping = self.keep.is_some();
                let text = self.quoted(q, keeping)?;
                self.b.string(text).map(Node::Str)
            }
            Some('&') => {
                let s = self.s;
                let (name, after) = property_name(&s[self.i..])?;
                if !after.starts_with([' ', '\t']) {
                    return Err(
                        "an anchor name is ASCII letters, digits, `_` and `-`, followed by a space"
                            .into(),
                    );
                }
                self.i = s.len() - after.len();
                self.skip_blanks();
                let next = self.rest_of_line().trim_end_matches('\r');
                if next.is_empty() || next.starts_with(['#', ',', ']', '}', '&', '*']) {
                    return Err(format!("&{name} must be followed by a value on its line"));
                }
                // Whole, whatever is kept here (see `Parser::anchored`).
                let value = self.node_keeping(Some(&Keep::All))?;
                let i = self.b.define(name, value)?;
                match self.keep {
                    Some(keep) => self.b.copy_anchored(i, keep),
                    None => Ok(Node::Null),
                }
            }
            Some('!') => {
                let s = self.s;
                let (is_str, after) = tag(&s[self.i..])?;
                self.i = s.len() - after.len();
                self.skip_ws()?;
                match self.peek() {
                    None | Some(',' | ']' | '}') => Ok(if is_str {
                        Node::Str(Cow::Borrowed(""))
                    } else {
                        Node::Null
                    }),
                    Some('!' | '*') => Err("a tag must be followed by a value".into()),
                    Some('[' | '{' | '"' | '\'' | '&') => self.node(),
                    Some(_) if is_str => self.plain().map(|t| Node::Str(Cow::Borrowed(t))),
                    Some(_) => self.node(),
                }
            }
            Some('*') => {
                let s = self.s;
                let (name, after) = property_name(&s[self.i..])?;
                if !(after.is_empty() || after.starts_with([' ', '\t', '\r', '\n', ',', ']', '}']))
                {
                    return Err(format!("unexpected text after the alias *{name}"));
                }
                self.i = s.len() - after.len();
                let i = self.b.anchors.alias(name, self.depth)?;
                match self.keep {
                    Some(keep) => self.b.copy_anchored(i, keep),
                    None => Ok(Node::Null),
                }
            }
            _ => self.plain().map(|t| plain_node(Cow::Borrowed(t))),
        }
    }

    /// A plain scalar's text, untyped (keys stay text: `~: x` has key `~`).
    fn plain(&mut self) -> std::result::Result<&'a str, String> {
        let rest = self.rest_of_line();
        // (`? ` is refused with every plain scalar by check_plain_start.)
        if rest.starts_with('-') && rest[1..].starts_with([' ', '\t']) {
            return Err("`- ` is not supported inside flow collections".into());
        }
        let mut end = rest.len();
        for (j, c) in rest.char_indices() {
            let next = rest[j + c.len_utf8()..].chars().next();
            let stop = matches!(c, ',' | '[' | ']' | '{' | '}' | '\r')
                || (c == ':' && matches!(next, None | Some(' ' | '\t' | ',' | ']' | '}' | '\r')))
                || (c == '#' && j > 0 && rest[..j].ends_with([' ', '\t']));
            if stop {
                end = j;
                break;
            }
        }
        let text = rest[..end].trim();
        check_plain_start(text)?;
        if matches!(text, "-" | ":") {
            return Err(format!("a lone {text:?} in a flow collection; quote it"));
        }
        self.i += end;
        Ok(text)
    }

    /// A quoted value from just after its opening quote, folded over line
    /// breaks as in block context (see [`Parser::quoted`]); its text only
    /// where `keep_text` (else nothing), for the caller to charge if kept.
    fn quoted(
        &mut self,
        quote: char,
        keep_text: bool,
    ) -> std::result::Result<Cow<'a, str>, String> {
        let first_line = self.first_line + self.lines;
        let mut out = String::new();
        let mut first = true;
        loop {
            let line = self.rest_of_line();
            let scan = scan_quoted(line.strip_suffix('\r').unwrap_or(line), quote)?;
            if let Some(end) = scan.end {
                self.i += end;
                return Ok(if !keep_text {
                    Cow::Borrowed("")
                } else if first {
                    scan.text
                } else {
                    out.push_str(&scan.text);
                    Cow::Owned(out)
                });
            }
            first = false;
            if keep_text {
                let trimmed = scan.text.trim_end_matches([' ', '\t']).len();
                out.push_str(&scan.text[..trimmed.max(scan.protected)]);
            }
            self.i += line.len();
            let mut newlines = 0;
            loop {
                if self.i >= self.s.len() {
                    return Err(format!(
                        "the quoted value opened on line {first_line} is not closed"
                    ));
                }
                // At the line break: on to the next line.
                self.i += 1;
                self.new_line()?;
                self.skip_blanks();
                if !self.rest_of_line().trim().is_empty() {
                    break;
                }
                self.i += self.rest_of_line().len();
                newlines += 1;
            }
            if !keep_text {
            } else if newlines > 0 {
                out.extend(std::iter::repeat_n('\n', newlines));
            } else if !scan.escaped_break {
                out.push(' ');
            }
        }
    }

    fn list(&mut self) -> std::result::Result<Node<'a>, String> {
        let opened = self.first_line + self.lines;
        let base = self.b.items.len();
        loop {
            self.skip_ws()?;
            match self.peek() {
                Some(']') => {
                    self.i += 1;
                    return match self.keep {
                        Some(_) => self.b.seq(base),
                        None => Ok(Node::Seq(Box::new([]))),
                    };
                }
                None => return Err(self.not_closed('[', opened)),
                _ => {}
            }
            let item = self.node()?;
            if self.keep.is_some() {
                self.b.push_item(item)?;
            }
            self.skip_ws()?;
            match self.peek() {
                Some(',') => self.i += 1,
                Some(']') => {}
                Some(':') => {
                    return Err("`key: value` pairs inside `[...]` are not supported".into())
                }
                None => return Err(self.not_closed('[', opened)),
                Some(c) => {
                    return Err(format!(
                        "expected `,` or `]` in the flow list opened on line {opened}, found {c:?} (a value over several lines must be quoted)"
                    ))
                }
            }
        }
    }

    fn map(&mut self) -> std::result::Result<Node<'a>, String> {
        let opened = self.first_line + self.lines;
        let keep = self.keep;
        let base = self.b.entries.len();
        loop {
            self.skip_ws()?;
            let (key, merge) = match self.peek() {
                Some('}') => {
                    self.i += 1;
                    return match keep {
                        Some(_) => self.b.map(base),
                        None => Ok(Node::Map(Box::new([]))),
                    };
                }
                None => return Err(self.not_closed('{', opened)),
                Some(q @ ('"' | '\'')) => {
                    self.i += 1;
                    (self.quoted(q, true)?, false)
                }
                Some('[' | '{') => return Err("flow mapping keys must be scalars".into()),
                Some('&' | '*') => {
                    return Err("anchors and aliases on mapping keys are not supported".into())
                }
                _ => match self.plain()? {
                    "" => return Err("empty mapping keys are not supported".into()),
                    k => (Cow::Borrowed(k), k == "<<"),
                },
            };
            // A key and its `:` share a line.
            self.skip_blanks();
            if self.peek() != Some(':') {
                return Err(format!("the flow mapping entry {key:?} has no `: value`"));
            }
            self.i += 1;
            self.skip_ws()?;
            let value_keep = if merge {
                Some(keep.unwrap_or(&SHAPE_ONLY))
            } else {
                child(keep, &key)
            };
            let value = match self.peek() {
                Some(',' | '}') => Node::Null,
                _ => self.node_keeping(value_keep)?,
            };
            if merge {
                self.b.merge(value, keep.is_some())?;
            } else if value_keep.is_some() {
                let key = self.b.string(key)?;
                self.b.push_entry((key, value))?;
            }
            self.skip_ws()?;
            match self.peek() {
                Some(',') => self.i += 1,
                Some('}') => {}
                None => return Err(self.not_closed('{', opened)),
                Some(c) => {
                    return Err(format!(
                        "expected `,` or `}}` in the flow mapping opened on line {opened}, found {c:?} (a value over several lines must be quoted)"
                    ))
                }
            }
        }
    }
}

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
struct Reader<'a, 'm> {
    node: Node<'a>,
    memory: &'m mut Memory,
}

fn charge(memory: &mut Memory, bytes: usize) -> std::result::Result<(), serde_json::Error> {
    memory.charge(bytes).map_err(de::Error::custom)
}

/// The error for `node` where `expected` was: one function for every
/// type read (each visitor's own would be code for each).
fn invalid(node: &Node<'_>, expected: &dyn de::Expected) -> serde_json::Error {
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

struct Items<'a, 'm> {
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

struct Entries<'a, 'm> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Map};

    fn ok(text: &str) -> Value {
        parse(text).unwrap_or_else(|e| panic!("{e}\n---\n{text}"))
    }

    fn fails(text: &str) -> YamlError {
        match parse(text) {
            Ok(v) => panic!("accepted {text:?} as {v}"),
            Err(e) => e,
        }
    }

    #[test]
    fn kubectl_layout() {
        let text = "\
apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: LS0tLS1CRUdJTg==
    server: https://127.0.0.1:6443
  name: kind-kind
contexts:
- context:
    cluster: kind-kind
    namespace: team-a
    user: kind-kind
  name: kind-kind
current-context: kind-kind
kind: Config
preferences: {}
users:
- name: kind-kind
  user:
    token: abc.def
";
        assert_eq!(
            ok(text),
            json!({
                "apiVersion": "v1",
                "clusters": [{"cluster": {"certificate-authority-data": "LS0tLS1CRUdJTg==",
                                          "server": "https://127.0.0.1:6443"},
                              "name": "kind-kind"}],
                "contexts": [{"context": {"cluster": "kind-kind", "namespace": "team-a",
                                          "user": "kind-kind"},
                              "name": "kind-kind"}],
                "current-context": "kind-kind",
                "kind": "Config",
                "preferences": {},
                "users": [{"name": "kind-kind", "user": {"token": "abc.def"}}]
            })
        );
    }

    /// What cloud CLIs and minikube write reads as the same document as
    /// its JSON form (plain `true` stays a string; see the module docs).
    #[test]
    fn cloud_kubeconfig_matches_its_json_form() {
        let yaml = include_str!("../../fixtures/kubeconfig/cloud.yaml");
        let json: Value =
            serde_json::from_str(include_str!("../../fixtures/kubeconfig/cloud.json")).unwrap();
        assert_eq!(ok(yaml), json);
        assert_eq!(ok(&yaml.replace('\n', "\r\n")), json);
    }

    #[test]
    fn indented_lists_comments_markers_and_nulls() {
        let text = "\
# written by hand
---
users:   # the users
  - name: a   # first
    user:
      exec:
        args:
          - --region
          - \"us-east-1\"
        env: null
        command: aws
  -
    name: b
empty:
tilde: ~
list: [a, 'b c', [1, 2], {k: v, n: }]
...
";
        assert_eq!(
            ok(text),
            json!({
                "users": [
                    {"name": "a", "user": {"exec": {"args": ["--region", "us-east-1"],
                                                    "env": null, "command": "aws"}}},
                    {"name": "b"}
                ],
                "empty": null,
                "tilde": null,
                "list": ["a", "b c", ["1", "2"], {"k": "v", "n": null}]
            })
        );
    }

    #[test]
    fn scalars() {
        let text = r#"plain: a b#c  # comment
url: http://h:1/x
num: 0123
yes: true
sq: 'it''s # not a comment'
dq: "tab\there \"q\" \u00e9 \x41 \\"
folded_plain: one
  two

  three
folded_dq: "a
  b \
  c"
lit: |
  line 1
    indented

keep: |+
  x

strip: >-
  a
  b

  c
    d
  e
"#;
        assert_eq!(
            ok(text),
            json!({
                "plain": "a b#c",
                "url": "http://h:1/x",
                "num": "0123",
                "yes": "true",
                "sq": "it's # not a comment",
                "dq": "tab\there \"q\" é A \\",
                "folded_plain": "one two\nthree",
                "folded_dq": "a b c",
                "lit": "line 1\n  indented\n",
                "keep": "x\n\n",
                "strip": "a b\nc\n  d\ne"
            })
        );
    }

    #[test]
    fn documents_without_a_mapping() {
        assert_eq!(ok(""), Value::Null);
        assert_eq!(ok("# only a comment\n"), Value::Null);
        assert_eq!(ok("---\n"), Value::Null);
        assert_eq!(ok("- a\n- - b\n  - c\n"), json!(["a", ["b", "c"]]));
        assert_eq!(ok("\u{feff}a: 1\r\nb: 2\r\n"), json!({"a": "1", "b": "2"}));
    }

    #[test]
    fn refusals_name_the_line() {
        for (text, line, needle) in [
            (
                "a: 1\nb: *x\n",
                2,
                "the alias *x has no anchor &x before it",
            ),
            ("a: &x\n  *x\n", 2, "one anchor"),
            ("&x a: 1\n", 1, "an anchor on a mapping key"),
            ("a: 1\n*x : 2\n", 2, "anchors and aliases on mapping keys"),
            ("- &x a: 1\n", 1, "an anchor on a mapping key"),
            ("a: &x.y 1\n", 1, "anchor name"),
            ("a: *x y\n", 1, "after the alias"),
            ("a: [&x ]\n", 1, "followed by a value"),
            ("a: !!binary aGk=\n", 1, "!!binary is not supported"),
            ("a: !e!x y\n", 1, "%TAG"),
            ("!!str a: b\n", 1, "a tag on a mapping key"),
            ("- \tx\n", 1, "tab"),
            ("a:\n\tb: 1\n", 2, "tabs"),
            ("a: 1\n  b: 2\n", 2, "`: `"),
            ("a:\n  b: 1\n   c: 2\n", 3, "indentation"),
            ("%YAML 1.2\n---\na: 1\n", 1, "directives"),
            ("a: \"open\n  b: 1\n", 1, "unterminated"),
            ("a: \"open\nb: 1\"\n", 2, "indented more"),
            ("a: [1, 2\n", 2, "`[` opened on line 1 is not closed"),
            ("a: {b: 1\n", 2, "`{` opened on line 1 is not closed"),
            ("a: [1,\n2]\n", 2, "indented more than 0 spaces"),
            ("a:\n  b: [1,\n  2]\n", 3, "indented more than 2 spaces"),
            ("a: [1,\n---\n]\n", 2, "document marker"),
            ("a: [1,\n\t2]\n", 2, "indented more than 0 spaces"),
            ("a: [\"x\n  y\n", 3, "opened on line 1 is not closed"),
            ("a: [!x, y]\n", 1, "must be followed by a space"),
            (
                "a: [x\n  y]\n",
                2,
                "a value over several lines must be quoted",
            ),
            ("a: <<\n<<: x\n", 2, "a mapping or a list of mappings"),
            ("a: \"\\q\"\n", 1, "invalid escape"),
            ("a: b: c\n", 1, "`: `"),
            ("a: - b\n", 1, "next line"),
            ("? a\n: b\n", 1, "complex"),
            ("a: |x\n  b\n", 1, "block scalar header"),
            ("a: \"x\" y\n", 1, "after a quoted value"),
            ("a: @x\n", 1, "may not start"),
        ] {
            let e = fails(text);
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.message.contains(needle), "{text:?}: {e}");
        }
    }

    /// The shape kubectl reads and the JSON fast path used to take for
    /// JSON: a flow mapping over several lines, with comments.
    #[test]
    fn flow_collections_over_several_lines() {
        let text = "\
{apiVersion: v1, kind: Config,
 clusters: [{name: c, cluster: {server: \"https://h:1\",   # a comment
   insecure-skip-tls-verify: true}}],
 users: [
   {name: u, user: {token: t}},
 ],
 contexts: [{name: x, context: {cluster: c, user: u}}],
 current-context: x
}
";
        assert_eq!(
            ok(text),
            json!({
                "apiVersion": "v1", "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://h:1",
                                                       "insecure-skip-tls-verify": "true"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x"
            })
        );
        assert_eq!(ok(&text.replace('\n', "\r\n")), ok(text));
        // JSON is YAML, also indented with tabs (kubectl reads it).
        let json = "{\n\t\"a\": [\n\t\t\"b\", true, 1.5, null\n\t],\n\t\"c\": {}\n}\n";
        assert_eq!(ok(json), json!({"a": ["b", "true", "1.5", null], "c": {}}));
        // Inside a block: continuation lines deeper than the key.
        assert_eq!(
            ok("a:\n  b: [x,\n    y]  # c\n  c: {d:\n      e}\nf: g\n"),
            json!({"a": {"b": ["x", "y"], "c": {"d": "e"}}, "f": "g"})
        );
    }

    /// Shapes kubectl 1.32 reads that this reader refused; each expected
    /// value is what `kubectl config view` showed for the same text.
    #[test]
    fn tabs_tags_documents_and_quoted_flow_lines_read_as_kubectl_reads_them() {
        // A tab separates a key's `:` from its value (not a `- ` from its item).
        assert_eq!(
            ok("a:\tb\nc: \td\ne:\t\tf\t# x\ng: [1,\t2]\nh:\t\n  i: 1\nj: &k\tv\nl:\t*k\n"),
            json!({"a": "b", "c": "d", "e": "f", "g": ["1", "2"], "h": {"i": "1"},
                   "j": "v", "l": "v"})
        );
        assert_eq!(ok("{a:\tb}\n"), json!({"a": "b"}));
        // Tags: `!!str` keeps a string a string; others change nothing here.
        assert_eq!(
            ok(
                "a: !!str 1\nb: !!map {c: d}\nd: &x !!str e\nf: !!str &y g\nh: *y\ni: !!str\n\
                j: !!str null\nk: !!str ~\nl: ! x\nm: !local y\nn: !!seq [a]\n\
                o: !<tag:yaml.org,2002:str> null\nt: !!map\n  u: v\nw: [!!str null, !!str 1]\n\
                p: {q: !!str null, r: !!str , s: 1}\n"
            ),
            json!({"a": "1", "b": {"c": "d"}, "d": "e", "f": "g", "h": "g", "i": "",
                   "j": "null", "k": "~", "l": "x", "m": "y", "n": ["a"], "o": "null",
                   "t": {"u": "v"}, "w": ["null", "1"], "p": {"q": "null", "r": "", "s": "1"}})
        );
        // The first document is the kubeconfig; what follows is not read.
        assert_eq!(ok("a: 1\n---\nb: 2\n"), json!({"a": "1"}));
        assert_eq!(ok("a: 1\n...\n--- {{{ [ garbage\n"), json!({"a": "1"}));
        assert_eq!(ok("---\n---\na: 1\n"), Value::Null);
        // Quoted values over several lines inside flow collections.
        assert_eq!(
            ok("x: {a: 'line1\n    line2', b: \"x\\\n    y\", c: 'u\n\n    v', d: [\"q\n     r\"], \
                e: \"s \n  t\", f: 'w  \n  \n  z'}\n"),
            json!({"x": {"a": "line1 line2", "b": "xy", "c": "u\nv", "d": ["q r"],
                         "e": "s t", "f": "w\nz"}})
        );
    }

    /// kubectl (go-yaml v2) expands aliases and `<<` merge keys; a key
    /// given twice keeps its last value. (Checked against kubectl 1.32.)
    #[test]
    fn anchors_aliases_and_merge_keys_read_as_kubectl_reads_them() {
        let text = "\
users:
- name: base
  user: &creds {token: from-anchor, as: alice}
- name: other
  user: &other
    token: from-other
    as: bob
    as-uid: \"7\"
- name: u
  user:
    token: explicit-before
    <<: [*creds, *other]
    as-groups: [g]
- name: same
  user: *creds
- &entry
  name: copy
  user: {<<: *other, as: carol}
list: [&x a, *x, {k: *x}]
twice: 1
twice: 2
";
        assert_eq!(
            ok(text),
            json!({
                "users": [
                    {"name": "base", "user": {"token": "from-anchor", "as": "alice"}},
                    {"name": "other", "user": {"token": "from-other", "as": "bob", "as-uid": "7"}},
                    {"name": "u", "user": {"token": "from-anchor", "as": "alice",
                                           "as-uid": "7", "as-groups": ["g"]}},
                    {"name": "same", "user": {"token": "from-anchor", "as": "alice"}},
                    {"name": "copy", "user": {"token": "from-other", "as": "carol", "as-uid": "7"}}
                ],
                "list": ["a", "a", {"k": "a"}],
                "twice": "2"
            })
        );
    }

    /// Nine levels of ten aliases each would be a billion copies: refused
    /// once the copies pass twice the document's size (at least 1 MiB),
    /// quickly and without the memory.
    #[test]
    fn a_billion_laughs_is_refused_with_a_clear_error() {
        let mut text = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for i in 1..10 {
            let p = i - 1;
            text += &format!("a{i}: &a{i} [{}]\n", vec![format!("*a{p}"); 10].join(", "));
        }
        let started = std::time::Instant::now();
        let e = fails(&text);
        assert!(e.message.contains("billion laughs"), "{e}");
        assert!(e.message.contains("1024 KiB"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        // The same in block style.
        let mut block = String::from("a0: &a0\n- lol\n- lol\n- lol\n- lol\n- lol\n");
        for i in 1..20 {
            block += &format!("a{i}: &a{i}\n- *a{}\n- *a{}\n- *a{}\n", i - 1, i - 1, i - 1);
        }
        assert!(fails(&block).message.contains("billion laughs"));
        // Aliases nested in aliases cannot go deeper than the stack allows.
        let mut deep = String::from("a0: &a0 [x]\n");
        for i in 1..80 {
            deep += &format!("a{i}: &a{i} [*a{}]\n", i - 1);
        }
        assert!(fails(&deep).message.contains("nests deeper"));
    }

    /// Each entry of a flow collection used to look for the end of its
    /// line: a long one-line collection took time quadratic in its length
    /// (an 8 MiB `[a,a,...]`, under the kubeconfig cap, ran for minutes).
    #[test]
    fn a_long_one_line_flow_collection_is_read_in_linear_time() {
        let n = 400_000;
        let docs = [
            format!("x: [{}]\n", vec!["a"; n].join(",")),
            format!("x: [{}]\n", vec!["'a'"; n].join(",")),
            format!("x: [{}]\n", vec!["[a]"; n / 2].join(",")),
            format!(
                "x: {{{}}}\n",
                (0..n / 2)
                    .map(|i| format!("k{i}: v"))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        ];
        for doc in docs {
            let (tx, rx) = std::sync::mpsc::channel();
            let shape = doc[..8].to_string();
            std::thread::spawn(move || {
                let _ = tx.send(parse(&doc).is_ok());
            });
            let parsed = rx.recv_timeout(std::time::Duration::from_secs(10));
            assert_eq!(parsed, Ok(true), "{shape}...: not read within 10 s");
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let flow = format!("a: {}{}\n", "[".repeat(10_000), "]".repeat(10_000));
        assert!(fails(&flow).message.contains("nested deeper"));
        let block: String = (0..10_000)
            .map(|i| format!("{}k:\n", " ".repeat(i)))
            .collect();
        assert!(fails(&block).message.contains("nested deeper"));
        let dashes = format!("{}x\n", "- ".repeat(10_000));
        assert!(fails(&dashes).message.contains("nested deeper"));
    }

    /// A full YAML parser's reading of `text` in this module's terms
    /// (plain `null`/`~`/empty are null, every other scalar a string, a
    /// `!!str` scalar a string, other tags ignored, only the first document
    /// read); `None` when it refuses the text or it uses what this module
    /// refuses (`!!binary`, tags or anchors on keys).
    fn oracle(text: &str) -> Option<Value> {
        // kubectl's go-yaml takes a tab after a key's `:` as a space; this
        // parser refuses it.
        oracle_strict(text).or_else(|| oracle_strict(&text.replace(":\t", ": ")))
    }

    fn oracle_strict(text: &str) -> Option<Value> {
        use yaml_rust2::parser::{Event, Parser};
        let mut parser = Parser::new_from_str(text);
        let mut events = Vec::new();
        loop {
            match parser.next_token().ok()?.0 {
                Event::StreamEnd | Event::DocumentEnd => break,
                Event::StreamStart | Event::DocumentStart | Event::Nothing => {}
                e => events.push(e),
            }
        }
        type Anchors = std::collections::HashMap<usize, Value>;
        fn build(e: Event, it: &mut std::vec::IntoIter<Event>, a: &mut Anchors) -> Option<Value> {
            let is = |tag: &Option<yaml_rust2::parser::Tag>, name: &str| {
                tag.as_ref().is_some_and(|t| {
                    (t.handle == "tag:yaml.org,2002:" || t.handle == "!!") && t.suffix == name
                })
            };
            let (value, anchor) = match e {
                Event::Scalar(_, _, _, ref tag) if is(tag, "binary") => return None,
                Event::Scalar(s, style, anchor, tag) => (
                    match style {
                        yaml_rust2::scanner::TScalarStyle::Plain if !is(&tag, "str") => {
                            Value::from(plain_node(Cow::Borrowed(&s)))
                        }
                        _ => Value::String(s),
                    },
                    anchor,
                ),
                Event::Alias(id) => return a.get(&id).cloned(),
                Event::SequenceStart(anchor, _) => {
                    let mut items = Vec::new();
                    loop {
                        match it.next()? {
                            Event::SequenceEnd => break,
                            e => items.push(build(e, it, a)?),
                        }
                    }
                    (Value::Array(items), anchor)
                }
                Event::MappingStart(anchor, _) => {
                    let mut map = Map::new();
                    loop {
                        let key = match it.next()? {
                            Event::MappingEnd => break,
                            Event::Scalar(k, _, 0, None) => k,
                            _ => return None,
                        };
                        // A key given twice keeps its last value, as kubectl reads it.
                        let value = build(it.next()?, it, a)?;
                        map.insert(key, value);
                    }
                    (Value::Object(map), anchor)
                }
                _ => return None,
            };
            if anchor != 0 {
                a.insert(anchor, value.clone());
            }
            Some(value)
        }
        let mut it = events.into_iter();
        let value = match it.next() {
            None => Value::Null,
            Some(e) => build(e, &mut it, &mut Anchors::new())?,
        };
        it.next().is_none().then_some(value)
    }

    const SEEDS: &[&str] = &[
        include_str!("../../fixtures/kubeconfig/cloud.yaml"),
        "apiVersion: v1\nclusters:\n- cluster:\n    server: \"https://h:1\"\n    \
         certificate-authority-data: QUJD\n  name: c\nusers:\n  - name: u\n    user:\n      \
         token: 't'\n      exec: {args: [a, \"b\"]}\nlit: |-\n  x\n  y\n",
        "a: 'it''s'\nb: \"x\\ty \\u00e9\"\nc: one\n  two\n\n  three\nd: >-\n  a\n  b\n\n  c\n\
         e: |+\n  x\n\nf: [a, 'b c', {k: v}]\ng:\n- h\n- - i\n  - j: k\n    l: \"m\\\n      n\"\n",
        "# c\n---\nusers:   # u\n  - name: a   # n\n    user:\n      exec:\n        args:\n\
         \x20         - --region\n          - \"x\"\n        env: null\n  -\n    name: b\n\
         empty:\ntilde: ~\n...\n",
        "{apiVersion: v1, kind: Config,\n clusters: [{name: c, cluster: {server: \"https://h:1\",\n   \
         insecure-skip-tls-verify: true}}],  # c\n users: [\n   {name: u, user: {token: t}}\n ],\n \
         current-context: x}\n",
        "clusters:\n- name: c\n  cluster: &cl\n    server: https://h:1\n- name: d\n  cluster: *cl\n\
         users:\n- name: u\n  user: &creds {token: t, as: alice}\n- &v\n  name: v\n  user: *creds\n\
         list: [&x a, *x, {k: *x}]\nm: &m\n  - a\n  - *x\nn: *m\n",
        "a:\n  b: [x,\n    y, {c: d,\n      e: f}]\n  g: {h: i,\n    j: [k]}   # c\nl: [\n  'm', \"n\"\n  ]\n",
    ];

    /// Every seed, and thousands of deterministic mutations of them: none
    /// panics, and whatever this module accepts, a full YAML parser reads
    /// the same way.
    #[test]
    fn mutations_agree_with_a_full_parser_or_are_refused() {
        for seed in SEEDS {
            assert_eq!(Some(ok(seed)), oracle(seed), "{seed}");
        }
        // `LEASE_ELECTOR_FUZZ_ROUNDS=1000000 LEASE_ELECTOR_FUZZ_SEED=7
        // cargo test --release --lib yaml` digs deeper.
        let var = |name: &str| std::env::var(name).ok().and_then(|r| r.parse::<u64>().ok());
        let rounds = var("LEASE_ELECTOR_FUZZ_ROUNDS").map_or(30_000, |r| r as usize);
        let alphabet = b" -:#\"'\\|>[]{},\n\tax&*!?%~.0";
        let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ var("LEASE_ELECTOR_FUZZ_SEED").unwrap_or(0);
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut accepted, mut refused) = (0, 0);
        for round in 0..rounds {
            let seed = SEEDS[round % SEEDS.len()];
            let mut bytes = seed.as_bytes().to_vec();
            for _ in 0..1 + next() % 4 {
                let at = (next() % bytes.len() as u64) as usize;
                let c = alphabet[(next() % alphabet.len() as u64) as usize];
                match next() % 3 {
                    0 => bytes[at] = c,
                    1 => bytes.insert(at, c),
                    _ => {
                        bytes.remove(at);
                    }
                }
            }
            let text = String::from_utf8_lossy(&bytes);
            match parse(&text) {
                Ok(mine) => {
                    accepted += 1;
                    assert_eq!(
                        Some(&mine),
                        oracle(&text).as_ref(),
                        "read differently:\n{text}"
                    );
                }
                Err(_) => refused += 1,
            }
        }
        // The mutations must exercise both outcomes to mean anything.
        assert!(
            accepted > 3_000 && refused > 3_000,
            "{accepted} / {refused}"
        );
    }
}
