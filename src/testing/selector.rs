//! Field selectors (`?fieldSelector=metadata.name=x,type!=Normal`), with
//! the fields the real API server allows for each resource, and label
//! selectors (`?labelSelector=app=x,tier in (a,b),!canary`) with the
//! grammar and matching of apimachinery's `labels.Parse`.

use serde_json::Value;

use super::http::{Request, Response};
use super::status;

/// Fields a Lease can be selected by.
pub(crate) const LEASE_FIELDS: &[&str] = &["metadata.name", "metadata.namespace"];

/// Fields a Namespace can be selected by.
pub(crate) const NAMESPACE_FIELDS: &[&str] = &["metadata.name", "status.phase"];

/// Fields an Event can be selected by (the API server's
/// `EventToSelectableFields`), `kubectl describe` uses the
/// `involvedObject.*` ones.
pub(crate) const EVENT_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

#[derive(Debug, Clone, PartialEq, Eq)]
struct Term {
    field: String,
    value: String,
    equal: bool,
}

/// A parsed field selector; empty selects everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector {
    terms: Vec<Term>,
}

impl FieldSelector {
    /// The request's `fieldSelector`, checked against `allowed`; the 400
    /// the real server gives otherwise.
    pub(crate) fn of(req: &Request, allowed: &[&str]) -> Result<FieldSelector, Response> {
        let Some(sel) = req.query("fieldSelector").filter(|s| !s.is_empty()) else {
            return Ok(FieldSelector::default());
        };
        let mut terms = Vec::new();
        for term in sel.split(',') {
            let (field, value, equal) = if let Some((f, v)) = term.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, v, true)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, v, true)
            } else {
                return Err(status::bad_request(&format!(
                    "invalid selector: '{sel}'; can't understand '{term}'"
                )));
            };
            if !allowed.contains(&field) {
                let known: Vec<String> = allowed.iter().map(|f| format!("\"{f}\"")).collect();
                return Err(status::bad_request(&format!(
                    "\"{field}\" is not a known field selector: only {}",
                    known.join(", ")
                )));
            }
            terms.push(Term {
                field: field.to_string(),
                value: value.to_string(),
                equal,
            });
        }
        Ok(FieldSelector { terms })
    }

    /// The name an `metadata.name=` term pins, if any.
    pub(crate) fn name(&self) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.equal && t.field == "metadata.name")
            .map(|t| t.value.as_str())
    }

    /// Does `obj` satisfy every term? A missing field reads as `""`, as
    /// the API server's selectable fields do.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.terms.iter().all(|t| {
            let path = match t.field.as_str() {
                "source" => "source.component",
                f => f,
            };
            let value = path
                .split('.')
                .try_fold(obj, |v, key| v.get(key))
                .and_then(Value::as_str)
                .unwrap_or("");
            (value == t.value) == t.equal
        })
    }
}

/// A label selector requirement's operator and values.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelOp {
    Exists,
    DoesNotExist,
    /// `=`, `==` and `in`.
    In(Vec<String>),
    /// `!=` and `notin`.
    NotIn(Vec<String>),
    Gt(i64),
    Lt(i64),
}

/// A parsed label selector; empty selects everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector {
    requirements: Vec<(String, LabelOp)>,
}

/// A token of the label selector grammar.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    Not,
    Equals,
    NotEquals,
    Open,
    Close,
    Comma,
    Gt,
    Lt,
}

fn tokens(s: &str) -> Vec<Token> {
    const SPECIAL: &[char] = &['!', '=', '(', ')', ',', '<', '>'];
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        let token = match c {
            c if c.is_whitespace() => continue,
            '!' if chars.peek() == Some(&'=') => {
                chars.next();
                Token::NotEquals
            }
            '!' => Token::Not,
            '=' => {
                if chars.peek() == Some(&'=') {
                    chars.next();
                }
                Token::Equals
            }
            '(' => Token::Open,
            ')' => Token::Close,
            ',' => Token::Comma,
            '>' => Token::Gt,
            '<' => Token::Lt,
            c => {
                let mut ident = c.to_string();
                while let Some(&n) = chars.peek() {
                    if n.is_whitespace() || SPECIAL.contains(&n) {
                        break;
                    }
                    ident.push(n);
                    chars.next();
                }
                Token::Ident(ident)
            }
        };
        out.push(token);
    }
    out
}

/// A label value: at most 63 characters, empty or alphanumeric at both
/// ends with `-`, `_` and `.` between.
fn is_label_value(v: &str) -> bool {
    let b = v.as_bytes();
    v.is_empty()
        || (b.len() <= 63
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c)))
}

/// A label key: an optional DNS subdomain prefix and `/`, then a
/// non-empty label value.
fn is_label_key(k: &str) -> bool {
    let (prefix, name) = match k.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                let b = l.as_bytes();
                !b.is_empty()
                    && b.len() <= 63
                    && b[0].is_ascii_alphanumeric()
                    && b[b.len() - 1].is_ascii_alphanumeric()
                    && b.iter()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            })
    });
    prefix_ok && !name.is_empty() && is_label_value(name)
}

impl LabelSelector {
    /// The request's `labelSelector`; the 400 the real server gives for
    /// one it cannot parse.
    pub(crate) fn of(req: &Request) -> Result<LabelSelector, Response> {
        let Some(sel) = req.query("labelSelector") else {
            return Ok(LabelSelector::default());
        };
        LabelSelector::parse(sel)
            .map_err(|e| status::bad_request(&format!("unable to parse requirement: {e}")))
    }

    fn parse(s: &str) -> Result<LabelSelector, String> {
        let mut p = Parser {
            toks: tokens(s),
            i: 0,
        };
        let mut requirements = Vec::new();
        while p.peek().is_some() {
            requirements.push(p.requirement()?);
            match p.next() {
                None => {}
                Some(Token::Comma) if p.peek().is_some() => {}
                other => return Err(found(other.as_ref(), "',' or 'end of string'")),
            }
        }
        Ok(LabelSelector { requirements })
    }

    /// Does `obj`'s `metadata.labels` satisfy every requirement?
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        let labels = obj.get("metadata").and_then(|m| m.get("labels"));
        let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.requirements.iter().all(|(key, op)| {
            let v = label(key);
            let int = || v.and_then(|v| v.parse::<i64>().ok());
            match op {
                LabelOp::Exists => v.is_some(),
                LabelOp::DoesNotExist => v.is_none(),
                LabelOp::In(vs) => v.is_some_and(|v| vs.iter().any(|x| x == v)),
                LabelOp::NotIn(vs) => v.is_none_or(|v| vs.iter().all(|x| x != v)),
                LabelOp::Gt(n) => int().is_some_and(|v| v > *n),
                LabelOp::Lt(n) => int().is_some_and(|v| v < *n),
            }
        })
    }
}

/// The grammar of apimachinery's `labels.Parse`, over [`tokens`].
struct Parser {
    toks: Vec<Token>,
    i: usize,
}

fn found(t: Option<&Token>, expected: &str) -> String {
    format!("found '{}' expected: {expected}", shown(t))
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.toks.get(self.i)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.toks.get(self.i).cloned();
        self.i += 1;
        t
    }

    fn ident(&mut self, expected: &str) -> Result<String, String> {
        match self.next() {
            Some(Token::Ident(v)) => Ok(v),
            other => Err(found(other.as_ref(), expected)),
        }
    }

    /// `!key`, `key`, `key OP value`, `key in|notin (values)`.
    fn requirement(&mut self) -> Result<(String, LabelOp), String> {
        let (key, op) = if self.peek() == Some(&Token::Not) {
            self.i += 1;
            (self.ident("identifier after '!'")?, LabelOp::DoesNotExist)
        } else {
            let key = self.ident("identifier")?;
            (key, self.operator()?)
        };
        if !is_label_key(&key) {
            return Err(format!(
                "key: Invalid value: {key:?}: a valid label key is an optional DNS subdomain \
                 prefix and '/', then at most 63 alphanumeric characters, '-', '_' or '.', \
                 starting and ending with an alphanumeric character"
            ));
        }
        if let LabelOp::In(vs) | LabelOp::NotIn(vs) = &op {
            if let Some(v) = vs.iter().find(|v| !is_label_value(v)) {
                return Err(format!(
                    "values[0][{key}]: Invalid value: {v:?}: a valid label must be an empty \
                     string or at most 63 alphanumeric characters, '-', '_' or '.', starting \
                     and ending with an alphanumeric character"
                ));
            }
        }
        Ok((key, op))
    }

    /// What follows a key.
    fn operator(&mut self) -> Result<LabelOp, String> {
        let op = match self.peek() {
            None | Some(Token::Comma) => return Ok(LabelOp::Exists),
            Some(t) => t.clone(),
        };
        self.i += 1;
        match op {
            Token::Equals | Token::NotEquals => {
                // `key=` selects an empty value.
                let value = match self.peek() {
                    None | Some(Token::Comma) => String::new(),
                    _ => self.ident("identifier")?,
                };
                Ok(if op == Token::Equals {
                    LabelOp::In(vec![value])
                } else {
                    LabelOp::NotIn(vec![value])
                })
            }
            Token::Gt | Token::Lt => {
                let v = self.ident("integer")?;
                let n: i64 = v.parse().map_err(|_| {
                    format!("for 'Gt', 'Lt' operators, the value must be an integer: {v:?}")
                })?;
                Ok(if op == Token::Gt {
                    LabelOp::Gt(n)
                } else {
                    LabelOp::Lt(n)
                })
            }
            Token::Ident(w) if w == "in" => Ok(LabelOp::In(self.set()?)),
            Token::Ident(w) if w == "notin" => Ok(LabelOp::NotIn(self.set()?)),
            other => Err(found(Some(&other), "in, notin, =, ==, !=, gt, lt")),
        }
    }

    /// `(v1, v2, ...)`, not empty.
    fn set(&mut self) -> Result<Vec<String>, String> {
        let open = self.next();
        if open != Some(Token::Open) {
            return Err(found(open.as_ref(), "'('"));
        }
        let mut values = Vec::new();
        loop {
            if values.is_empty() && self.peek() == Some(&Token::Close) {
                return Err("for 'in', 'notin' operators, values set can't be empty".into());
            }
            values.push(self.ident("identifier")?);
            match self.next() {
                Some(Token::Comma) => {}
                Some(Token::Close) => return Ok(values),
                other => return Err(found(other.as_ref(), "',' or ')'")),
            }
        }
    }
}

fn shown(t: Option<&Token>) -> String {
    match t {
        None => "end of string".into(),
        Some(Token::Ident(v)) => v.clone(),
        Some(Token::Not) => "!".into(),
        Some(Token::Equals) => "=".into(),
        Some(Token::NotEquals) => "!=".into(),
        Some(Token::Open) => "(".into(),
        Some(Token::Close) => ")".into(),
        Some(Token::Comma) => ",".into(),
        Some(Token::Gt) => ">".into(),
        Some(Token::Lt) => "<".into(),
    }
}

/// What a list or watch selects: both selectors must match.
#[derive(Debug, Clone, Default)]
pub(crate) struct Selection {
    pub(crate) fields: FieldSelector,
    pub(crate) labels: LabelSelector,
}

impl Selection {
    /// The request's `fieldSelector` (checked against `allowed`) and
    /// `labelSelector`; the real server's 400 for a bad one.
    pub(crate) fn of(req: &Request, allowed: &[&str]) -> Result<Selection, Response> {
        Ok(Selection {
            fields: FieldSelector::of(req, allowed)?,
            labels: LabelSelector::of(req)?,
        })
    }

    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.fields.matches(obj) && self.labels.matches(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn selector(sel: &str, allowed: &[&str]) -> Result<FieldSelector, Response> {
        let raw = format!("GET /x?fieldSelector={sel} HTTP/1.1\r\nHost: h\r\n\r\n");
        let super::super::http::Incoming::Request(req) =
            super::super::http::parse_raw(raw.as_bytes())
        else {
            panic!("not a request")
        };
        FieldSelector::of(&req, allowed)
    }

    #[test]
    fn describe_finds_the_events_of_one_object() {
        let s = selector(
            "involvedObject.name%3Dl,involvedObject.namespace%3Dns,involvedObject.kind%3DLease,type!%3DWarning",
            EVENT_FIELDS,
        )
        .unwrap();
        let ev = |name: &str, ty: &str| json!({"involvedObject": {"name": name, "namespace": "ns", "kind": "Lease"}, "type": ty});
        assert!(s.matches(&ev("l", "Normal")));
        assert!(!s.matches(&ev("l", "Warning")));
        assert!(!s.matches(&ev("m", "Normal")));
    }

    #[test]
    fn unknown_fields_are_refused_as_the_api_server_refuses_them() {
        let err = selector("spec.holderIdentity%3Da", LEASE_FIELDS).unwrap_err();
        assert_eq!(err.status, 400);
        let body = String::from_utf8(err.body).unwrap();
        assert!(body.contains(r#"\"spec.holderIdentity\" is not a known field selector"#));
    }

    fn labels(sel: &str) -> Result<LabelSelector, String> {
        LabelSelector::parse(sel)
    }

    #[test]
    fn label_selectors_match_as_apimachinery_matches_them() {
        let obj = |labels: Value| json!({"metadata": {"labels": labels}});
        let x = obj(json!({"app": "x", "tier": "web", "n": "5"}));
        let y = obj(json!({"app": "y"}));
        let none = json!({"metadata": {}});
        let cases: &[(&str, [bool; 3])] = &[
            ("", [true, true, true]),
            ("app=x", [true, false, false]),
            ("app==x", [true, false, false]),
            ("app!=x", [false, true, true]),
            ("app", [true, true, false]),
            ("!tier", [false, true, true]),
            ("app in (x, z)", [true, false, false]),
            ("app notin (x,z)", [false, true, true]),
            ("app=x,tier=web", [true, false, false]),
            ("n>4", [true, false, false]),
            ("n<5", [false, false, false]),
            ("example.com/role", [false, false, false]),
            ("app=", [false, false, false]),
        ];
        for (sel, want) in cases {
            let s = labels(sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
            let got = [s.matches(&x), s.matches(&y), s.matches(&none)];
            assert_eq!(&got, want, "{sel}");
        }
    }

    #[test]
    fn malformed_label_selectors_are_refused() {
        for bad in [
            "app=x=y",
            "app in x",
            "app in ()",
            "app in (a b)",
            "=x",
            "app=x,",
            "app==x y",
            "bad key=x",
            "app=not/valid",
            "n>x",
            "app=-x",
            "UPPER.example.com/a=b",
        ] {
            assert!(labels(bad).is_err(), "{bad}");
        }
    }
}
