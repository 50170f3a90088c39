//! Request bodies decoded as kube-apiserver decodes them: the media type,
//! `kind` and `apiVersion` (defaulted from the URL), the types of the
//! fields, unknown fields and explicit nulls dropped (or refused with
//! `fieldValidation=Strict`), and the write options (`dryRun`,
//! `fieldValidation`, `fieldManager`).

use serde_json::{Map, Value};

use super::http::{Request, Response};
use super::resource::Api;
use super::schema;
use super::status::{self, Cause};
use super::store::meta_str;
use crate::lease::MicroTime;

/// How unknown fields are handled (`?fieldValidation=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Validation {
    Ignore,
    /// The default: dropped, each named in a `Warning` header.
    Warn,
    Strict,
}

/// The options of a write (`CreateOptions`, `UpdateOptions`,
/// `PatchOptions`, `DeleteOptions`), read from the query.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) dry_run: bool,
    pub(crate) validation: Validation,
    /// `fieldManager`, or what the API server derives from the
    /// `User-Agent` (its part before the first `/`).
    pub(crate) manager: String,
    /// `fieldManager` was given.
    pub(crate) manager_given: bool,
    /// `force` (apply only).
    pub(crate) force: Option<bool>,
}

impl Options {
    /// The options of `req`, or the 422 kube-apiserver answers for a
    /// value it does not support; `kind` is `CreateOptions`, ...
    pub(crate) fn of(req: &Request, kind: &str) -> Result<Options, Response> {
        let mut causes = Vec::new();
        let dry: Vec<&str> = req
            .query
            .iter()
            .filter(|(k, _)| k == "dryRun")
            .map(|(_, v)| v.as_str())
            .collect();
        if dry.iter().any(|d| *d != "All") {
            let shown: Vec<String> = dry.iter().map(|d| format!("{d:?}")).collect();
            causes.push(Cause::not_supported(
                "dryRun",
                &format!("[]string{{{}}}", shown.join(", ")),
                &["All"],
            ));
        }
        let validation = match req.query("fieldValidation").unwrap_or("") {
            "" | "Warn" => Validation::Warn,
            "Ignore" => Validation::Ignore,
            "Strict" => Validation::Strict,
            other => {
                causes.push(Cause::not_supported(
                    "fieldValidation",
                    &format!("{other:?}"),
                    &["", "Ignore", "Strict", "Warn"],
                ));
                Validation::Warn
            }
        };
        let given = req.query("fieldManager").filter(|m| !m.is_empty());
        if given.is_some_and(|m| m.len() > 128) {
            causes.push(Cause::invalid(
                "fieldManager",
                &format!("{:?}", given.unwrap_or_default()),
                "must be no more than 128 characters",
            ));
        }
        let manager = given.map(str::to_string).unwrap_or_else(|| {
            let agent = req.header("user-agent").unwrap_or("");
            agent
                .split('/')
                .next()
                .unwrap_or("")
                .chars()
                .take(128)
                .collect()
        });
        let force = req.query("force").map(|f| f == "true" || f == "1");
        if !causes.is_empty() {
            return Err(status::invalid_object("meta.k8s.io", kind, "", &causes));
        }
        Ok(Options {
            dry_run: !dry.is_empty(),
            validation,
            manager,
            manager_given: given.is_some(),
            force,
        })
    }
}

/// A decoded object to store, what its type's validation found wrong
/// outside `metadata` (answered after an update's preconditions, with
/// what `meta` finds, as the API server orders them), and the warnings to
/// send.
#[derive(Debug)]
pub(crate) struct Decoded {
    pub(crate) object: Value,
    pub(crate) invalid: Vec<Cause>,
    pub(crate) warnings: Vec<String>,
}

/// Decode `body` as an object of `api` for namespace `ns`.
pub(crate) fn decode(
    api: Api,
    body: &[u8],
    ns: &str,
    validation: Validation,
) -> Result<Decoded, Response> {
    let kind = api.kind();
    decode_with(api, body, ns, validation, |detail| {
        cannot_handle(kind, detail)
    })
}

/// Decode the object a JSON or merge patch made (`patched`): as
/// [`decode`], but strict validation's refusal is kube-apiserver's 422 on
/// the field `patch`, quoting the patched object.
pub(crate) fn decode_patched(
    api: Api,
    patched: &[u8],
    ns: &str,
    validation: Validation,
) -> Result<Decoded, Response> {
    decode_with(api, patched, ns, validation, |detail| {
        let quoted = Value::from(String::from_utf8_lossy(patched)).to_string();
        status::invalid_object("", "", "", &[Cause::invalid("patch", &quoted, detail)])
    })
}

fn decode_with(
    api: Api,
    body: &[u8],
    ns: &str,
    validation: Validation,
    strict: impl Fn(&str) -> Response,
) -> Result<Decoded, Response> {
    let kind = api.kind();
    let mut obj = decode_typed(body, kind, api.api_version())?;
    // Go's decoder keeps the last of a field given twice, as serde_json
    // does; strict validation names it first.
    let (dups, order) = fields(body);
    let mut named: Vec<String> = dups
        .iter()
        .map(|f| format!("duplicate field \"{f}\""))
        .collect();
    let mut unknown = schema::prune(&mut obj, api.shape());
    // In the order the body gives them, as Go's decoder meets them.
    unknown.sort_by_key(|f| order.iter().position(|o| o == f));
    named.extend(unknown.iter().map(|f| format!("unknown field \"{f}\"")));
    let mut warnings = Vec::new();
    if !named.is_empty() {
        match validation {
            Validation::Strict => {
                return Err(strict(&format!(
                    "strict decoding error: {}",
                    named.join(", ")
                )))
            }
            Validation::Warn => warnings = named,
            Validation::Ignore => {}
        }
    }
    if let Some(obj_ns) = meta_str(&obj, "namespace") {
        if !obj_ns.is_empty() && obj_ns != ns {
            return Err(status::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
    }
    let (object, invalid) = match api {
        Api::Leases => lease_checks(obj)?,
        Api::Events | Api::EventsV1 => (event_times(obj)?, Vec::new()),
        _ => (obj, Vec::new()),
    };
    Ok(Decoded {
        object,
        invalid,
        warnings,
    })
}

pub(crate) fn cannot_handle(kind: &str, detail: &str) -> Response {
    status::bad_request(&format!(
        "{kind} in version \"v1\" cannot be handled as a {kind}: {detail}"
    ))
}

/// JSON bodies are accepted, and YAML ones (see `yaml_body`); protobuf,
/// which the real server also takes, is not. A body without a media
/// type is JSON, as kube-apiserver takes it (apimachinery's
/// `NegotiateInputSerializerForMediaType` picks its first serializer):
/// the official Python client sends none.
pub(crate) fn is_json(content_type: Option<&str>) -> bool {
    let media = content_type
        .and_then(|ct| ct.split(';').next())
        .map_or("", str::trim);
    media.is_empty() || media.eq_ignore_ascii_case("application/json")
}

/// Decode a JSON object whose `kind`, when it names one, must be `kind`.
pub(crate) fn decode_object(body: &[u8], kind: &str) -> Result<Value, Response> {
    let obj: Value = serde_json::from_slice(body).map_err(|e| {
        status::bad_request(&format!("couldn't get version/kind; json parse error: {e}"))
    })?;
    let Some(map) = obj.as_object() else {
        return Err(status::bad_request(
            "couldn't get version/kind; json parse error: expected an object",
        ));
    };
    matches_expected(map.get("kind"), kind, "kind")?;
    if map.get("metadata").is_some_and(|m| !m.is_object()) {
        return Err(cannot_handle(kind, "metadata must be an object"));
    }
    Ok(obj)
}

/// A `kind` or `apiVersion` (`what`) that is absent, empty or `expected`;
/// the 400 the decoder answers for another one.
fn matches_expected(value: Option<&Value>, expected: &str, what: &str) -> Result<(), Response> {
    match value {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(v)) if v.is_empty() || v == expected => Ok(()),
        Some(other) => {
            let other = other
                .as_str()
                .map_or_else(|| other.to_string(), str::to_string);
            Err(status::bad_request(&format!(
                "the {what} in the data ({other}) does not match the expected {what} ({expected})"
            )))
        }
    }
}

/// Decode an object of `kind` in `api_version` to be stored: a missing or
/// empty `kind` or `apiVersion` is defaulted to them, as the real decoder
/// defaults them from the URL (the Python client's `LeaseLock.create`
/// sends neither); a different one is refused.
fn decode_typed(body: &[u8], kind: &str, api_version: &str) -> Result<Value, Response> {
    // kube-apiserver's words when the body names another kind or version
    // (its scheme finds no such kind there), or is not an object.
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => {
            let given = |f: &str| m.get(f).and_then(Value::as_str).filter(|s| !s.is_empty());
            let (k, v) = (
                given("kind").unwrap_or(kind),
                given("apiVersion").unwrap_or(api_version),
            );
            if k != kind || v != api_version {
                let version = v.rsplit('/').next().unwrap_or(v);
                return Err(status::bad_request(&format!(
                    "{k} in version \"{version}\" cannot be handled as a {kind}: no kind \"{k}\" \
                     is registered for version \"{v}\" in scheme \"pkg/runtime/scheme.go:111\""
                )));
            }
        }
        Ok(other) => {
            let what = match other {
                Value::String(_) => "string",
                Value::Array(_) => "array",
                Value::Number(_) => "number",
                Value::Bool(_) => "bool",
                _ => "null",
            };
            if what != "null" {
                let hex: String = body.iter().map(|b| format!("{b:02x}")).collect();
                return Err(status::bad_request(&format!(
                    "the object provided is unrecognized (must be of type {kind}): couldn't get \
                     version/kind; json parse error: json: cannot unmarshal {what} into Go value of \
                     type struct {{ APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind \
                     string \"json:\\\"kind,omitempty\\\"\" }} ({hex})"
                )));
            }
        }
        Err(_) => {}
    }
    let mut obj = decode_object(body, kind)?;
    matches_expected(obj.get("apiVersion"), api_version, "API version")?;
    if let Some(m) = obj.as_object_mut() {
        m.insert("kind".into(), kind.into());
        m.insert("apiVersion".into(), api_version.into());
    }
    Ok(obj)
}

/// An Event's times as its Go types read and write them: `eventTime` a
/// MicroTime (six digits, as a Lease's), the others `metav1.Time`, any
/// RFC 3339 time, stored in UTC to the second. A time neither reads is the
/// decoder's 400 (`Event in version "v1" cannot be handled as a Event`,
/// whichever API group it came through).
fn event_times(mut obj: Value) -> Result<Value, Response> {
    const MICRO: &str = "2006-01-02T15:04:05.000000Z07:00";
    const SECONDS: &str = "2006-01-02T15:04:05Z07:00";
    let fields = [
        ("eventTime", true),
        ("firstTimestamp", false),
        ("lastTimestamp", false),
        ("deprecatedFirstTimestamp", false),
        ("deprecatedLastTimestamp", false),
    ];
    let series = obj
        .get("series")
        .and_then(|s| s.get("lastObservedTime"))
        .and_then(Value::as_str)
        .map(str::to_string);
    if let Some(s) = series {
        if let Err(e) = MicroTime::parse_strict(&s) {
            return Err(cannot_handle(
                "Event",
                &format!("parsing time \"{s}\" as \"{MICRO}\": {e}"),
            ));
        }
    }
    for (field, micro) in fields {
        let Some(Value::String(s)) = obj.get(field) else {
            continue;
        };
        let parsed = if micro {
            MicroTime::parse_strict(s).map(|t| t.to_string())
        } else {
            s.parse::<MicroTime>().map(MicroTime::rfc3339_seconds)
        };
        match parsed {
            Ok(t) => obj[field] = t.into(),
            Err(e) => {
                let layout = if micro { MICRO } else { SECONDS };
                return Err(cannot_handle(
                    "Event",
                    &format!("parsing time \"{s}\" as \"{layout}\": {e}"),
                ));
            }
        }
    }
    Ok(obj)
}

/// The checks the Lease's Go types and `ValidateLeaseSpec` make; what the
/// latter finds is returned separately because the API server answers it
/// after the precondition checks of an update.
fn lease_checks(mut obj: Value) -> Result<(Value, Vec<Cause>), Response> {
    let empty = Map::new();
    let spec = match obj.get("spec") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(_) => return Err(cannot_handle("Lease", "spec must be an object")),
    };
    // MicroTimes are stored as kube-apiserver re-serialises them: UTC,
    // six digits, `Z`, whatever offset they were written with.
    let mut times = Vec::new();
    for field in ["acquireTime", "renewTime"] {
        match spec.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => match MicroTime::parse_strict(s) {
                Ok(t) => times.push((field, t.to_string())),
                Err(e) => {
                    return Err(cannot_handle(
                        "Lease",
                        &format!(
                            "parsing time \"{s}\" as \"2006-01-02T15:04:05.000000Z07:00\": {e}"
                        ),
                    ));
                }
            },
            Some(other) => {
                return Err(cannot_handle(
                    "Lease",
                    &format!("spec.{field}: expected a time string, got {other}"),
                ))
            }
        }
    }
    for field in ["holderIdentity", "strategy", "preferredHolder"] {
        if spec
            .get(field)
            .is_some_and(|v| !v.is_null() && !v.is_string())
        {
            return Err(cannot_handle(
                "Lease",
                &format!("spec.{field}: expected a string"),
            ));
        }
    }
    let mut invalid = Vec::new();
    for (field, min, detail) in [
        ("leaseDurationSeconds", 1, "must be greater than 0"),
        ("leaseTransitions", 0, "must be greater than or equal to 0"),
    ] {
        let v = match spec.get(field) {
            None | Some(Value::Null) => continue,
            Some(v) => v,
        };
        let Some(n) = v.as_i64().filter(|n| i32::try_from(*n).is_ok()) else {
            return Err(cannot_handle(
                "Lease",
                &format!("spec.{field}: expected a 32-bit integer, got {v}"),
            ));
        };
        if n < min {
            invalid.push(Cause::invalid(
                &format!("spec.{field}"),
                &v.to_string(),
                detail,
            ));
        }
    }
    // `spec` is a struct: it is always there, if empty.
    if !obj.get("spec").is_some_and(Value::is_object) {
        obj["spec"] = Value::Object(Map::new());
    }
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        for (field, t) in times {
            spec.insert(field.into(), t.into());
        }
    }
    Ok((obj, invalid))
}

/// The paths (`spec.holderIdentity`, `metadata.labels.a`) of the fields
/// `body` gives more than once in one object, in the order met; none when
/// it is not JSON.
#[cfg(test)]
fn duplicates(body: &[u8]) -> Vec<String> {
    fields(body).0
}

/// The paths of the fields `body` gives more than once, and of every
/// field, in the order met; none when it is not JSON.
fn fields(body: &[u8]) -> (Vec<String>, Vec<String>) {
    use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
    use std::fmt;

    struct Walk<'a> {
        path: String,
        out: &'a mut Vec<String>,
        all: &'a mut Vec<String>,
    }

    impl<'de> DeserializeSeed<'de> for Walk<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Walk<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("JSON")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen = std::collections::BTreeSet::new();
            while let Some(key) = map.next_key::<String>()? {
                let path = if self.path.is_empty() {
                    key.clone()
                } else {
                    format!("{}.{key}", self.path)
                };
                if !seen.insert(key) {
                    self.out.push(path.clone());
                }
                self.all.push(path.clone());
                map.next_value_seed(Walk {
                    path,
                    out: &mut *self.out,
                    all: &mut *self.all,
                })?;
            }
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let mut i = 0;
            while seq
                .next_element_seed(Walk {
                    path: format!("{}[{i}]", self.path),
                    out: &mut *self.out,
                    all: &mut *self.all,
                })?
                .is_some()
            {
                i += 1;
            }
            Ok(())
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
    }

    let (mut out, mut all) = (Vec::new(), Vec::new());
    let mut de = serde_json::Deserializer::from_slice(body);
    let walked = Walk {
        path: String::new(),
        out: &mut out,
        all: &mut all,
    }
    .deserialize(&mut de);
    if walked.is_err() {
        return (Vec::new(), Vec::new());
    }
    (out, all)
}

#[cfg(test)]
mod duplicate_tests {
    use super::duplicates;

    #[test]
    fn a_field_given_twice_is_named_by_its_path() {
        let body = br#"{"metadata":{"name":"a","name":"a"},"spec":{"holderIdentity":"a","x":[{"k":1,"k":2}],"holderIdentity":"b"}}"#;
        assert_eq!(
            duplicates(body),
            ["metadata.name", "spec.x[0].k", "spec.holderIdentity"]
        );
        assert!(duplicates(br#"{"a":{"b":1},"c":{"b":1}}"#).is_empty());
        assert!(duplicates(b"not json").is_empty());
    }
}
