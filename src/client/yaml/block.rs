//! The block structure, line by line: the document, mappings and
//! sequences by indentation, block scalars.

use std::borrow::Cow;

use super::build::{Anchors, Build};
use super::flow::Flow;
use super::memory::Memory;
use super::node::{child, Keep, Node, Result, YamlError, MAX_DEPTH, SHAPE_ONLY};
use super::scan::{
    check_plain, check_plain_start, doc_marker, ends_line, indent_of, is_blank, is_entry,
    plain_node, property_name, scan_quoted, strip_comment, tag,
};

impl<'a> Parser<'a> {
    pub(super) fn document(&mut self) -> Result<Node<'a>> {
        let (mut directives, mut yaml) = (false, false);
        while let Some(0) = self.next_content()? {
            let Some(directive) = self.line().strip_prefix('%') else {
                break;
            };
            check_directive(directive, &mut yaml).map_err(|e| self.err(e))?;
            directives = true;
            self.advance();
        }
        if directives && (self.next_content()? != Some(0) || doc_marker(self.line()) != Some("---"))
        {
            return Err(self.err("directives must be followed by `---`"));
        }
        if let Some(0) = self.next_content()? {
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

/// A directive (the line after its `%`), checked as kubectl's go-yaml v2
/// checks it: `%YAML 1.1` once (another version is "incompatible"), `%TAG`
/// any number of times (tags change nothing this reader keeps), nothing
/// else. `yaml`: whether a `%YAML` came before.
fn check_directive(directive: &str, yaml: &mut bool) -> std::result::Result<(), String> {
    let (directive, _) = strip_comment(directive);
    let mut words = directive.split_whitespace();
    match (words.next(), words.next(), words.next(), words.next()) {
        (Some("YAML"), _, _, _) if *yaml => Err("a second %YAML directive".into()),
        (Some("YAML"), Some("1.1"), None, _) => {
            *yaml = true;
            Ok(())
        }
        (Some("YAML"), version, ..) => Err(format!(
            "%YAML {}: an incompatible YAML document (kubectl reads YAML 1.1)",
            version.unwrap_or("")
        )),
        (Some("TAG"), Some(_), Some(_), None) => Ok(()),
        _ => Err(format!(
            "the directive %{} is not one kubectl reads",
            directive.trim()
        )),
    }
}

/// Reads the document line by line in place: memory is the [`Node`] it
/// builds plus the current line, whatever the number of lines.
pub(super) struct Parser<'a> {
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
    pub(super) b: Build<'a>,
    /// What to store of the node being read; `None`: read, not stored.
    keep: Option<&'static Keep>,
    /// An anchor ended its line: the node on the next lines is its.
    anchor_pending: bool,
    /// A `!!str` tag precedes the plain scalar about to be read.
    force_str: bool,
}

impl<'a> Parser<'a> {
    pub(super) fn new(text: &'a str, keep: &'static Keep, memory: Memory) -> Self {
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
            self.flow(ind)
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
            Some('"' | '\'') => self.quoted(col),
            Some('|' | '>') => self.block_scalar(text, parent),
            Some('[' | '{') => self.flow(col),
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
    /// over as many lines as it takes.
    fn flow(&mut self, col: usize) -> Result<Node<'a>> {
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

    /// A quoted scalar starting at column `col`, folded over line breaks.
    /// Its continuation lines may have any indentation, as kubectl's
    /// go-yaml (libyaml) reads them, but not be a document marker.
    fn quoted(&mut self, col: usize) -> Result<Node<'a>> {
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
            if doc_marker(line).is_some() {
                return Err(self.err("a document marker inside a quoted value"));
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
pub(super) struct BlockBody {
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
