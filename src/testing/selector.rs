//! Field selectors (`?fieldSelector=metadata.name=x,type!=Normal`), with
//! the fields the real API server allows for each resource.

use serde_json::Value;

use super::http::{Request, Response};
use super::status;

/// Fields a Lease can be selected by.
pub(crate) const LEASE_FIELDS: &[&str] = &["metadata.name", "metadata.namespace"];

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
}
