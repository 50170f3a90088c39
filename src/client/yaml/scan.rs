//! The pieces of one line: document markers, indentation, comments,
//! plain and quoted scalars and their escapes, anchor names and tags.

use std::borrow::Cow;

use super::node::Node;

/// A document marker: `---` or `...` at the start of a line, followed by
/// whitespace or nothing.
pub(super) fn doc_marker(line: &str) -> Option<&'static str> {
    ["---", "..."].into_iter().find(|m| {
        line.strip_prefix(m)
            .is_some_and(|r| r.is_empty() || r.starts_with([' ', '\t']))
    })
}

pub(super) fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// Blank, or only a comment.
pub(super) fn is_blank(line: &str) -> bool {
    let t = line.trim_start();
    t.is_empty() || t.starts_with('#')
}

/// What may follow a complete value on its line: nothing, or a comment
/// after whitespace.
pub(super) fn ends_line(rest: &str) -> bool {
    rest.trim().is_empty() || (rest.starts_with([' ', '\t']) && is_blank(rest))
}

/// `- x` or a lone `-`.
pub(super) fn is_entry(content: &str) -> bool {
    content == "-" || content.starts_with("- ") || content.starts_with("-\t")
}

/// Text before a comment (`#` after whitespace), trailing blanks removed.
pub(super) fn strip_comment(s: &str) -> (&str, bool) {
    let bytes = s.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'#' && (i == 0 || bytes[i - 1] == b' ' || bytes[i - 1] == b'\t') {
            return (s[..i].trim_end(), true);
        }
    }
    (s.trim_end(), false)
}

/// A plain scalar's value: `null`, `~` and nothing are null.
pub(super) fn plain_node(s: Cow<'_, str>) -> Node<'_> {
    match &*s {
        "" | "~" | "null" | "Null" | "NULL" => Node::Null,
        _ => Node::Str(s),
    }
}

/// What a plain scalar may not contain in block context.
pub(super) fn check_plain(s: &str) -> std::result::Result<(), String> {
    if s.contains(": ") || s.contains(":\t") || s.ends_with(':') {
        return Err(format!(
            "`: ` inside the unquoted value {s:?}; quote the value (or check the indentation)"
        ));
    }
    check_plain_start(s)
}

/// Indicators a plain scalar (value or key) may not start with.
pub(super) fn check_plain_start(s: &str) -> std::result::Result<(), String> {
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
pub(super) struct Scan<'s> {
    /// Borrowed from the line until an escape or a doubled quote makes it
    /// differ from what is written.
    pub(super) text: Cow<'s, str>,
    /// Byte offset just past the closing quote, if it is on this line.
    pub(super) end: Option<usize>,
    /// The line ended with a `\` in a double-quoted scalar: no folding space.
    pub(super) escaped_break: bool,
    /// `text` up to here came from escapes or content; line folding may
    /// only trim whitespace after it.
    pub(super) protected: usize,
}

pub(super) fn scan_quoted(s: &str, quote: char) -> std::result::Result<Scan<'_>, String> {
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

pub(super) fn unescape(
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
pub(super) fn property_name(s: &str) -> std::result::Result<(&str, &str), String> {
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
/// reads them: `!!str` and every tag it cannot resolve keep `null`, `~` and
/// nothing a string; the tags it resolves to a type change nothing in a
/// kubeconfig, whose fields have their own types, except `!!binary`
/// (base64 it would decode), refused.
pub(super) fn tag(s: &str) -> std::result::Result<(bool, &str), String> {
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
        Some("!!binary") => Err(format!("the tag {tag} is not supported")),
        Some(n) if n[1..].contains('!') && !n.starts_with("!!") => Err(format!(
            "the tag {tag} names a handle no %TAG directive defines"
        )),
        // The tags go-yaml resolves to a type: the value's own reading.
        Some("!!null" | "!!bool" | "!!int" | "!!float" | "!!timestamp" | "!!map" | "!!seq") => {
            Ok((false, rest))
        }
        // `!!str`, and every tag it does not resolve (`!`, `!local`,
        // `!!other`, `!<uri>`): the scalar as written (`!foo null` is the
        // string "null").
        _ => Ok((true, rest)),
    }
}
