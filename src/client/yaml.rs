//! The YAML that kubeconfig files are written in, read into a
//! [`serde_json::Value`].
//!
//! Not a general YAML parser, and no dependency: it reads what kubectl,
//! kind, minikube and cloud CLIs write, and what people write by hand in
//! the same style. Block mappings and sequences (also a sequence at its
//! key's indentation, as kubectl writes `clusters:`), plain, single- and
//! double-quoted scalars (also over several lines), literal and folded
//! block scalars, one-line flow collections (`{}`, `[a, "b"]`), comments
//! and one document. Anchors, aliases, tags, complex keys, directives and
//! several documents are refused with the line they are on, never guessed.
//!
//! Plain scalars are strings, except `null`, `~` and nothing, which are
//! null: the kubeconfig reader gives fields their types, as client-go's
//! YAML-to-JSON step does with its Go structs (a namespace `0123` stays a
//! string).

use std::fmt;

use serde_json::{Map, Value};

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

/// Parse one YAML document.
pub(crate) fn parse(text: &str) -> Result<Value> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut p = Parser {
        lines: text.lines().map(str::to_owned).collect(),
        pos: 0,
        depth: 0,
    };
    if let Some(0) = p.next_content()? {
        if p.line().starts_with('%') {
            return Err(p.err("YAML directives are not supported"));
        }
        match doc_marker(p.line()) {
            Some("---") => {
                p.marker_alone()?;
                p.pos += 1;
            }
            Some(_) => {
                p.marker_alone()?;
                p.pos += 1;
                return match p.next_content()? {
                    None => Ok(Value::Null),
                    Some(_) => Err(p.err("only one YAML document is supported")),
                };
            }
            None => {}
        }
    }
    let value = match p.next_content()? {
        None => Value::Null,
        Some(0) if doc_marker(p.line()).is_some() => Value::Null,
        Some(ind) => p.node(ind, 0)?,
    };
    match p.next_content()? {
        None => Ok(value),
        Some(0) if doc_marker(p.line()) == Some("...") => {
            p.marker_alone()?;
            p.pos += 1;
            match p.next_content()? {
                None => Ok(value),
                Some(_) => Err(p.err("only one YAML document is supported")),
            }
        }
        Some(0) if doc_marker(p.line()) == Some("---") => {
            Err(p.err("only one YAML document is supported"))
        }
        Some(_) => Err(p.err("unexpected content after the document (check the indentation)")),
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
fn plain_value(s: &str) -> Value {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => Value::Null,
        _ => Value::String(s.to_owned()),
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
        Some('&' | '*' | '!') => Err("anchors, aliases and tags are not supported".into()),
        _ => Ok(()),
    }
}

/// The scanned text of a quoted scalar on one line, from just after its
/// opening quote.
struct Scan {
    text: String,
    /// Byte offset just past the closing quote, if it is on this line.
    end: Option<usize>,
    /// The line ended with a `\` in a double-quoted scalar: no folding space.
    escaped_break: bool,
    /// `text` up to here came from escapes or content; line folding may
    /// only trim whitespace after it.
    protected: usize,
}

fn scan_quoted(s: &str, quote: char) -> std::result::Result<Scan, String> {
    let mut text = String::new();
    let mut protected = 0;
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\'' if quote == '\'' => {
                if let Some((_, '\'')) = chars.peek() {
                    chars.next();
                    text.push('\'');
                } else {
                    return Ok(Scan {
                        text,
                        end: Some(i + 1),
                        escaped_break: false,
                        protected: 0,
                    });
                }
            }
            '"' if quote == '"' => {
                return Ok(Scan {
                    text,
                    end: Some(i + 1),
                    escaped_break: false,
                    protected: 0,
                })
            }
            '\\' if quote == '"' => match chars.next() {
                None => {
                    return Ok(Scan {
                        protected: text.len(),
                        text,
                        end: None,
                        escaped_break: true,
                    })
                }
                Some((_, e)) => {
                    text.push(unescape(e, &mut chars)?);
                    protected = text.len();
                }
            },
            _ => text.push(c),
        }
    }
    Ok(Scan {
        text,
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

struct Parser {
    lines: Vec<String>,
    /// The line being read (0-based).
    pos: usize,
    depth: usize,
}

impl Parser {
    fn line(&self) -> &str {
        &self.lines[self.pos]
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
        while self.pos < self.lines.len() && is_blank(self.line()) {
            self.pos += 1;
        }
        if self.pos == self.lines.len() {
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
    fn node(&mut self, ind: usize, parent: usize) -> Result<Value> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err(format!("nested deeper than {MAX_DEPTH} levels")));
        }
        let content = &self.line()[ind..];
        let value = if is_entry(content) {
            self.sequence(ind)
        } else if self.key(content)?.is_some() {
            self.mapping(ind)
        } else {
            self.value(ind, parent, false)
        };
        self.depth -= 1;
        value
    }

    /// `Some((key, offset of the text after the colon))` when `content` is
    /// `key: ...`.
    fn key(&self, content: &str) -> Result<Option<(String, usize)>> {
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
            Some('&' | '*' | '!') => {
                return Err(self.err("anchors, aliases and tags are not supported"))
            }
            Some('[' | '{') | None => return Ok(None),
            Some(_) => {
                let (text, _) = strip_comment(content);
                let colon = text
                    .match_indices(':')
                    .map(|(i, _)| i)
                    .find(|&i| matches!(text.as_bytes().get(i + 1), None | Some(b' ')));
                let Some(i) = colon else {
                    return Ok(None);
                };
                let key = text[..i].trim_end();
                if key.is_empty() {
                    return Err(self.err("empty mapping keys are not supported"));
                }
                check_plain_start(key).map_err(|e| self.err(e))?;
                if text[..i].contains(":\t") || key == ":" {
                    return Err(self.err("`:` followed by a tab: use a space"));
                }
                (key.to_owned(), i)
            }
        };
        let rest = &content[after..];
        let gap = rest.len() - rest.trim_start_matches(' ').len();
        let rest = &rest[gap..];
        match rest.strip_prefix(':') {
            Some(v) if v.is_empty() || v.starts_with(' ') => Ok(Some((key, after + gap + 1))),
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

    fn mapping(&mut self, ind: usize) -> Result<Value> {
        let mut map = Map::new();
        while self.next_at(ind)? {
            let content = &self.line()[ind..];
            if is_entry(content) {
                return Err(self.err("a list item where a `key: value` was expected"));
            }
            let Some((key, after)) = self.key(content)? else {
                return Err(self.err(format!(
                    "expected `key: value` at this indentation, found {:?}",
                    strip_comment(content).0
                )));
            };
            if map.contains_key(&key) {
                return Err(self.err(format!("duplicate key {key:?}")));
            }
            let value = self.value(ind + after, ind, true)?;
            map.insert(key, value);
        }
        Ok(Value::Object(map))
    }

    fn sequence(&mut self, ind: usize) -> Result<Value> {
        let mut items = Vec::new();
        while self.next_at(ind)? {
            if !is_entry(&self.line()[ind..]) {
                break;
            }
            let after_dash = &self.line()[ind + 1..];
            if after_dash.starts_with('\t') {
                return Err(self.err("a tab after `-`: use a space"));
            }
            let col = ind + 1 + after_dash.len() - after_dash.trim_start_matches(' ').len();
            let content = &self.line()[col..];
            let item = if is_blank(content) {
                self.value(col, ind, false)?
            } else if is_entry(content) || self.key(content)?.is_some() {
                // A compact nested node (`- key: v` or `- - x`): blank out the
                // dash so the node reads as if it started on its own line.
                self.lines[self.pos].replace_range(ind..col, &" ".repeat(col - ind));
                self.node(col, ind)?
            } else {
                self.value(col, ind, false)?
            };
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    /// The value starting at column `col` of the current line (after
    /// `key:` or `- `), in a block at indentation `parent`. Leaves `pos` on
    /// the first line it did not consume.
    fn value(&mut self, col: usize, parent: usize, after_key: bool) -> Result<Value> {
        let line = self.line().to_owned();
        let text = line[col..].trim_start_matches(' ');
        if text.starts_with('\t') {
            return Err(self.err("a tab where a value was expected: use spaces"));
        }
        let col = line.len() - text.len();
        if is_blank(text) {
            self.pos += 1;
            return match self.next_content()? {
                Some(i) if i > parent => self.node(i, parent),
                // kubectl writes a mapping's list at the key's own indentation.
                Some(i) if after_key && i == parent && is_entry(&self.line()[i..]) => {
                    self.node(i, parent)
                }
                _ => Ok(Value::Null),
            };
        }
        match text.chars().next() {
            Some('"' | '\'') => self.quoted(col, parent),
            Some('|' | '>') => self.block_scalar(text, parent),
            Some('[' | '{') => {
                let mut flow = Flow {
                    s: text,
                    i: 0,
                    depth: self.depth,
                };
                let v = flow.node().map_err(|e| self.err(e))?;
                let rest = &text[flow.i..];
                if !ends_line(rest) {
                    return Err(self.err(format!(
                        "unexpected {:?} after a flow collection",
                        rest.trim()
                    )));
                }
                self.pos += 1;
                Ok(v)
            }
            Some('-') if is_entry(strip_comment(text).0) => {
                Err(self
                    .err("a list may not start on the line of its key; put `- ` on the next line"))
            }
            _ => self.plain(text, parent),
        }
    }

    /// A plain scalar, folded over more-indented continuation lines.
    fn plain(&mut self, first: &str, parent: usize) -> Result<Value> {
        let (first, mut ended) = strip_comment(first);
        check_plain(first).map_err(|e| self.err(e))?;
        let mut out = first.to_owned();
        self.pos += 1;
        let mut newlines = 0;
        while !ended && self.pos < self.lines.len() {
            let line = self.line();
            let t = line.trim();
            if t.is_empty() {
                newlines += 1;
                self.pos += 1;
                continue;
            }
            if indent_of(line) <= parent || t.starts_with('#') {
                break;
            }
            let (part, comment) = strip_comment(t);
            check_plain(part).map_err(|e| self.err(e))?;
            if newlines == 0 {
                out.push(' ');
            } else {
                out.push_str(&"\n".repeat(newlines));
            }
            out.push_str(part);
            newlines = 0;
            ended = comment;
            self.pos += 1;
        }
        Ok(plain_value(&out))
    }

    /// A quoted scalar starting at column `col`, folded over line breaks;
    /// continuation lines are indented deeper than the `parent` block.
    fn quoted(&mut self, col: usize, parent: usize) -> Result<Value> {
        let start = self.pos;
        let quote = self.line()[col..].chars().next().unwrap_or('"');
        let mut out = String::new();
        let mut from = col + 1;
        loop {
            let scan = scan_quoted(&self.line()[from..], quote).map_err(|e| self.err(e))?;
            if let Some(end) = scan.end {
                out.push_str(&scan.text);
                let rest = &self.line()[from + end..];
                if !ends_line(rest) {
                    return Err(
                        self.err(format!("unexpected {:?} after a quoted value", rest.trim()))
                    );
                }
                self.pos += 1;
                return Ok(Value::String(out));
            }
            let trimmed = scan.text.trim_end_matches([' ', '\t']).len();
            out.push_str(&scan.text[..trimmed.max(scan.protected)]);
            let mut newlines = 0;
            loop {
                self.pos += 1;
                if self.pos == self.lines.len() {
                    return Err(YamlError {
                        line: start + 1,
                        message: "unterminated quoted value".into(),
                    });
                }
                if self.line().trim().is_empty() {
                    if self.line().contains('\t') {
                        return Err(self.err("a tab on a blank line inside a quoted value"));
                    }
                    newlines += 1;
                } else {
                    break;
                }
            }
            if newlines > 0 {
                out.push_str(&"\n".repeat(newlines));
            } else if !scan.escaped_break {
                out.push(' ');
            }
            let line = self.line();
            if indent_of(line) <= parent {
                return Err(self
                    .err("the continuation of a quoted value must be indented more than its key"));
            }
            from = line.len() - line.trim_start_matches([' ', '\t']).len();
        }
    }

    /// `|` or `>` with optional chomping (`-`, `+`) and indentation digit.
    fn block_scalar(&mut self, header: &str, parent: usize) -> Result<Value> {
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
        self.pos += 1;
        let mut content_indent = explicit;
        let mut lines: Vec<String> = Vec::new();
        // The widest all-space line before the first content line.
        let mut leading_spaces = 0;
        while self.pos < self.lines.len() {
            let line = self.line();
            if line.trim().is_empty() {
                let margin = content_indent.unwrap_or(line.len()).min(line.len());
                if line[..margin].contains('\t') {
                    return Err(self.err("a tab in a block scalar's indentation: use spaces"));
                }
                // Whitespace past the content indentation is content.
                let kept = match content_indent {
                    Some(n) if line.len() > n => line[n..].to_owned(),
                    Some(_) => String::new(),
                    None => {
                        leading_spaces = leading_spaces.max(line.len());
                        String::new()
                    }
                };
                lines.push(kept);
                self.pos += 1;
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
            lines.push(line[want..].to_owned());
            self.pos += 1;
        }
        let kept = lines
            .iter()
            .rposition(|l| !l.is_empty())
            .map_or(0, |i| i + 1);
        let trailing = lines.len() - kept;
        let body = &lines[..kept];
        let mut out = if folded { fold(body) } else { body.join("\n") };
        match chomp {
            Some('-') => {}
            Some(_) => out.push_str(&"\n".repeat(trailing + usize::from(kept > 0))),
            None if kept > 0 => out.push('\n'),
            None => {}
        }
        Ok(Value::String(out))
    }
}

/// Folded block scalar lines: lines at the base indentation join with a
/// space, blank lines become line breaks, more-indented lines stay as
/// they are.
fn fold(lines: &[String]) -> String {
    let mut out = String::new();
    let mut prev_more = false;
    let mut i = 0;
    let mut first = true;
    while i < lines.len() {
        let mut blanks = 0;
        while lines[i].is_empty() {
            blanks += 1;
            i += 1;
        }
        let line = &lines[i];
        let more = line.starts_with([' ', '\t']);
        if first {
            out.push_str(&"\n".repeat(blanks));
        } else if more || prev_more {
            out.push_str(&"\n".repeat(blanks + 1));
        } else if blanks == 0 {
            out.push(' ');
        } else {
            out.push_str(&"\n".repeat(blanks));
        }
        out.push_str(line);
        prev_more = more;
        first = false;
        i += 1;
    }
    out
}

/// A flow collection on one line: `[a, "b"]`, `{k: v}`, nested.
struct Flow<'a> {
    s: &'a str,
    i: usize,
    depth: usize,
}

impl Flow<'_> {
    fn skip_ws(&mut self) {
        while self.s[self.i..].starts_with([' ', '\t']) {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<char> {
        self.s[self.i..].chars().next()
    }

    fn node(&mut self) -> std::result::Result<Value, String> {
        self.skip_ws();
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
                let scan = scan_quoted(&self.s[self.i + 1..], q)?;
                let end = scan
                    .end
                    .ok_or("a quoted value in a flow collection must end on its line")?;
                self.i += 1 + end;
                Ok(Value::String(scan.text))
            }
            _ => self.plain().map(plain_value),
        }
    }

    /// A plain scalar's text, untyped (keys stay text: `~: x` has key `~`).
    fn plain(&mut self) -> std::result::Result<&str, String> {
        let rest = &self.s[self.i..];
        // (`? ` is refused with every plain scalar by check_plain_start.)
        if rest.starts_with('-') && rest[1..].starts_with([' ', '\t']) {
            return Err("`- ` is not supported inside flow collections".into());
        }
        let mut end = rest.len();
        for (j, c) in rest.char_indices() {
            let next = rest[j + c.len_utf8()..].chars().next();
            if c == ':' && next == Some('\t') {
                return Err("`:` followed by a tab: use a space".into());
            }
            let stop = matches!(c, ',' | '[' | ']' | '{' | '}')
                || (c == ':' && matches!(next, None | Some(' ' | '\t' | ',' | ']' | '}')))
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

    fn list(&mut self) -> std::result::Result<Value, String> {
        let mut items = Vec::new();
        loop {
            self.skip_ws();
            if self.peek() == Some(']') {
                self.i += 1;
                return Ok(Value::Array(items));
            }
            items.push(self.node()?);
            self.skip_ws();
            match self.peek() {
                Some(',') => self.i += 1,
                Some(']') => {}
                Some(':') => {
                    return Err("`key: value` pairs inside `[...]` are not supported".into())
                }
                _ => return Err("a flow list `[...]` must end on its line with `]`".into()),
            }
        }
    }

    fn map(&mut self) -> std::result::Result<Value, String> {
        let mut map = Map::new();
        loop {
            self.skip_ws();
            if self.peek() == Some('}') {
                self.i += 1;
                return Ok(Value::Object(map));
            }
            let key = match self.peek() {
                Some('"' | '\'') => match self.node()? {
                    Value::String(k) => k,
                    _ => return Err("flow mapping keys must be scalars".into()),
                },
                Some('[' | '{') => return Err("flow mapping keys must be scalars".into()),
                _ => match self.plain()? {
                    "" => return Err("empty mapping keys are not supported".into()),
                    k => k.to_owned(),
                },
            };
            self.skip_ws();
            let value = if self.peek() == Some(':') {
                self.i += 1;
                self.skip_ws();
                match self.peek() {
                    Some(',' | '}') => Value::Null,
                    _ => self.node()?,
                }
            } else {
                return Err(format!("the flow mapping entry {key:?} has no `: value`"));
            };
            if map.insert(key.clone(), value).is_some() {
                return Err(format!("duplicate key {key:?}"));
            }
            self.skip_ws();
            match self.peek() {
                Some(',') => self.i += 1,
                Some('}') => {}
                _ => return Err("a flow mapping `{...}` must end on its line with `}`".into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
            ("a: 1\nb: &x 2\n", 2, "anchors"),
            ("a: 1\nb: *x\n", 2, "aliases"),
            ("a: !!str 1\n", 1, "tags"),
            ("a: 1\na: 2\n", 2, "duplicate key \"a\""),
            ("a:\n\tb: 1\n", 2, "tabs"),
            ("a: 1\n  b: 2\n", 2, "`: `"),
            ("a:\n  b: 1\n   c: 2\n", 3, "indentation"),
            ("a: 1\n---\nb: 2\n", 2, "one YAML document"),
            ("%YAML 1.2\n---\na: 1\n", 1, "directives"),
            ("a: \"open\n  b: 1\n", 1, "unterminated"),
            ("a: \"open\nb: 1\"\n", 2, "indented more"),
            ("a:\tb\n", 1, "`: `"),
            ("a: \tb\n", 1, "tab"),
            ("a: [1, 2\n", 1, "must end on its line"),
            ("a: {b: 1\n", 1, "must end on its line"),
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
    /// (plain `null`/`~`/empty are null, every other scalar a string);
    /// `None` when it refuses the text or it uses what this module refuses
    /// (anchors, aliases, tags, duplicate keys, several documents).
    fn oracle(text: &str) -> Option<Value> {
        use yaml_rust2::parser::{Event, Parser};
        let mut parser = Parser::new_from_str(text);
        let mut events = Vec::new();
        loop {
            match parser.next_token().ok()?.0 {
                Event::StreamEnd => break,
                Event::StreamStart | Event::DocumentStart | Event::DocumentEnd | Event::Nothing => {
                }
                e => events.push(e),
            }
        }
        fn build(e: Event, it: &mut std::vec::IntoIter<Event>) -> Option<Value> {
            match e {
                Event::Scalar(s, style, 0, None) => Some(match style {
                    yaml_rust2::scanner::TScalarStyle::Plain => plain_value(&s),
                    _ => Value::String(s),
                }),
                Event::SequenceStart(0, None) => {
                    let mut items = Vec::new();
                    loop {
                        match it.next()? {
                            Event::SequenceEnd => return Some(Value::Array(items)),
                            e => items.push(build(e, it)?),
                        }
                    }
                }
                Event::MappingStart(0, None) => {
                    let mut map = Map::new();
                    loop {
                        let key = match it.next()? {
                            Event::MappingEnd => return Some(Value::Object(map)),
                            Event::Scalar(k, _, 0, None) => k,
                            _ => return None,
                        };
                        let value = build(it.next()?, it)?;
                        if map.insert(key, value).is_some() {
                            return None;
                        }
                    }
                }
                _ => None,
            }
        }
        let mut it = events.into_iter();
        let value = match it.next() {
            None => Value::Null,
            Some(e) => build(e, &mut it)?,
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
