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
    let mut obj = decode_typed(body, kind, api.api_version())?;
    let unknown = schema::prune(&mut obj, api.shape());
    let mut warnings = Vec::new();
    if !unknown.is_empty() {
        let named: Vec<String> = unknown
            .iter()
            .map(|f| format!("unknown field \"{f}\""))
            .collect();
        match validation {
            Validation::Strict => {
                return Err(cannot_handle(
                    kind,
                    &format!("strict decoding error: {}", named.join(", ")),
                ))
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
    let mut obj = decode_object(body, kind)?;
    matches_expected(obj.get("apiVersion"), api_version, "API version")?;
    if let Some(m) = obj.as_object_mut() {
        m.insert("kind".into(), kind.into());
        m.insert("apiVersion".into(), api_version.into());
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
