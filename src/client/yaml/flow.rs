//! Flow collections (`[a, "b"]`, `{k: v}`), on one line or over several.

use std::borrow::Cow;

use super::build::Build;
use super::node::{child, Keep, Node, MAX_DEPTH, SHAPE_ONLY};
use super::scan::{check_plain_start, doc_marker, plain_node, property_name, scan_quoted, tag};

/// A flow collection: `[a, "b"]`, `{k: v}`, nested, on one line or over
/// several (`{apiVersion: v1,\n clusters: [...]}`). Keys stay on one line
/// (quoted values may not); a plain value over several lines is refused.
pub(super) struct Flow<'a, 'b> {
    /// The document from the collection's opening bracket on.
    pub(super) s: &'a str,
    pub(super) i: usize,
    pub(super) depth: usize,
    /// Line breaks passed so far.
    pub(super) lines: usize,
    /// Where the current line ends (its `\n`, or the end of `s`): found
    /// once per line, since looking for it from each entry of a long line
    /// took time quadratic in the line's length.
    pub(super) line_end: usize,
    /// The line the collection starts on (1-based), for messages.
    pub(super) first_line: usize,
    pub(super) b: &'b mut Build<'a>,
    /// What to store of the node being read; `None`: read, not stored.
    pub(super) keep: Option<&'static Keep>,
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

    /// Check the line just entered: anything but a document marker. Its
    /// indentation is not looked at: kubectl's go-yaml (libyaml) reads a
    /// flow collection's lines at any indentation, its closing `]` at
    /// column 0 included, as hand-written JSON-like files have them.
    fn new_line(&mut self) -> std::result::Result<(), String> {
        self.lines += 1;
        let rest = &self.s[self.i..];
        self.line_end = self.i + rest.find('\n').unwrap_or(rest.len());
        let line = &self.s[self.i..self.line_end];
        if doc_marker(line).is_some() {
            return Err(format!(
                "a document marker inside the flow collection started on line {}",
                self.first_line
            ));
        }
        Ok(())
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

    pub(super) fn node(&mut self) -> std::result::Result<Node<'a>, String> {
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
