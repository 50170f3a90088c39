//! Text from outside is data: identities, `Status` messages, error bodies
//! and names came from a server or a file, and anyone allowed to update a
//! Lease can write its `holderIdentity`. Before such text reaches stdout or
//! a log line, [`escape`] makes every control character (and every other
//! character that breaks a line or reorders text) visible, so that it can
//! neither start a forged line nor drive the terminal.
//!
//! ```
//! use lease_elector::text::escape;
//! assert_eq!(escape("pod-a"), "pod-a");
//! assert_eq!(escape("x\nLEADING me\u{1b}[2J"), "x\\nLEADING me\\u{1b}[2J");
//! ```

use std::borrow::Cow;
use std::fmt::{self, Write as _};

/// `s` with every control character (C0, DEL, C1), every Unicode
/// bidirectional mark, override or isolate, and the Unicode line and
/// paragraph separators (U+2028, U+2029) written as an escape (`\n`, `\r`,
/// `\t`, else `\u{..}`); everything else, including non-ASCII letters, as
/// it is. Borrows when there is nothing to escape.
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        push_escaped(&mut out, c);
    }
    Cow::Owned(out)
}

/// A [`fmt::Display`] of `s` escaped as [`escape`] does, without allocating.
///
/// ```
/// use lease_elector::text::Escaped;
/// assert_eq!(format!("NEW_LEADER {}", Escaped("a\rb")), "NEW_LEADER a\\rb");
/// ```
#[derive(Debug, Clone, Copy)]
#[doc(hidden)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(at) = rest.find(needs_escape) {
            f.write_str(&rest[..at])?;
            let c = rest[at..].chars().next().unwrap_or_default();
            let mut buf = String::new();
            push_escaped(&mut buf, c);
            f.write_str(&buf)?;
            rest = &rest[at + c.len_utf8()..];
        }
        f.write_str(rest)
    }
}

fn needs_escape(c: char) -> bool {
    c.is_control()
        // Bidirectional marks, embeddings, overrides and isolates.
        || matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        // Line and paragraph separators: line breaks to Python's
        // `splitlines`, JavaScript and many log viewers.
        || matches!(c, '\u{2028}' | '\u{2029}')
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if needs_escape(c) => {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        }
        c => out.push(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_become_visible_and_nothing_else_changes() {
        assert!(matches!(escape("kube-system/my-lock"), Cow::Borrowed(_)));
        assert_eq!(escape("ü ß 漢字 \\n"), "ü ß 漢字 \\n");
        assert_eq!(escape("a\0b"), "a\\u{0}b");
        assert_eq!(escape("\u{7f}\u{85}\u{9b}"), "\\u{7f}\\u{85}\\u{9b}");
        assert_eq!(escape("abc\u{202e}fed"), "abc\\u{202e}fed");
        let forged = "other\nLEADING me\n\u{1b}[2J";
        let shown = escape(forged);
        assert!(
            !shown.contains('\n') && !shown.contains('\u{1b}'),
            "{shown}"
        );
        assert_eq!(shown, "other\\nLEADING me\\n\\u{1b}[2J");
        assert_eq!(Escaped(forged).to_string(), shown);
        assert_eq!(Escaped("plain").to_string(), "plain");
        assert_eq!(Escaped("\t").to_string(), "\\t");
    }

    /// Python's `str.splitlines`, JavaScript and many log viewers end a
    /// line at U+2028 and U+2029 too: a holder identity holding one would
    /// forge an event line for a consumer that splits lines that way.
    #[test]
    fn unicode_line_and_paragraph_separators_are_escaped_too() {
        let forged = "x\u{2028}LEADING me\u{2029}LEADING you\u{61c}";
        let shown = escape(forged);
        assert_eq!(shown, "x\\u{2028}LEADING me\\u{2029}LEADING you\\u{61c}");
        assert_eq!(Escaped(forged).to_string(), shown);
    }
}
