//! Routing and the Lease/Event endpoints, with the API server's validation.

use serde_json::{json, Map, Value};

use super::http::{Request, Response};
use super::stats::Kind;
use super::status::{self, Resource, Target, EVENTS, LEASES};
use super::store::{meta_str, Store};
use crate::lease::{MicroTime, LEASE_API_VERSION};

/// What a request addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// `/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}`
    Lease { ns: String, name: String },
    /// `/apis/coordination.k8s.io/v1/namespaces/{ns}/leases`
    Leases { ns: String },
    /// `/api/v1/namespaces/{ns}/events`
    Events { ns: String },
    /// Anything else.
    Unknown,
}

impl Route {
    pub(crate) fn of(segments: &[String]) -> Route {
        let s: Vec<&str> = segments.iter().map(String::as_str).collect();
        match s.as_slice() {
            ["apis", "coordination.k8s.io", "v1", "namespaces", ns, "leases"] => {
                Route::Leases { ns: ns.to_string() }
            }
            ["apis", "coordination.k8s.io", "v1", "namespaces", ns, "leases", name] => {
                Route::Lease {
                    ns: ns.to_string(),
                    name: name.to_string(),
                }
            }
            ["api", "v1", "namespaces", ns, "events"] => Route::Events { ns: ns.to_string() },
            _ => Route::Unknown,
        }
    }
}

/// True for a watch request on the Lease collection.
pub(crate) fn is_watch(req: &Request) -> bool {
    req.query("watch").is_some_and(|w| w == "true" || w == "1")
}

/// How a request counts in the stats, and what RBAC messages call it.
pub(crate) fn classify(route: &Route, req: &Request) -> (Kind, Option<Target>) {
    let target = |verb, resource: Resource, ns: &str, name: &str| {
        Some(Target {
            verb,
            resource,
            namespace: ns.to_string(),
            name: name.to_string(),
        })
    };
    match (route, req.method.as_str()) {
        (Route::Lease { ns, name }, "GET") => (Kind::Get, target("get", LEASES, ns, name)),
        (Route::Lease { ns, name }, "PUT") => (Kind::Update, target("update", LEASES, ns, name)),
        (Route::Lease { ns, name }, m) => (Kind::Other, target(verb(m), LEASES, ns, name)),
        (Route::Leases { ns }, "GET") if is_watch(req) => {
            (Kind::Watch, target("watch", LEASES, ns, ""))
        }
        (Route::Leases { ns }, "GET") => (Kind::Other, target("list", LEASES, ns, "")),
        (Route::Leases { ns }, "POST") => {
            let name = body_name(&req.body);
            (Kind::Create, target("create", LEASES, ns, &name))
        }
        (Route::Leases { ns }, m) => (Kind::Other, target(verb(m), LEASES, ns, "")),
        (Route::Events { ns }, "POST") => (Kind::Event, target("create", EVENTS, ns, "")),
        (Route::Events { ns }, m) => (Kind::Other, target(verb(m), EVENTS, ns, "")),
        (Route::Unknown, _) => (Kind::Other, None),
    }
}

fn verb(method: &str) -> &'static str {
    match method {
        "GET" => "get",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "access",
    }
}

fn body_name(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| meta_str(&v, "name").map(str::to_string))
        .unwrap_or_default()
}

fn json_response(code: u16, v: &Value) -> Response {
    Response::json(code, v.to_string().into_bytes())
}

/// Serve a non-watch request. Writes to `store` bump its resourceVersion;
/// the caller wakes watchers.
pub(crate) fn handle(store: &mut Store, route: &Route, req: &Request) -> Response {
    let writes = matches!(
        (route, req.method.as_str()),
        (Route::Lease { .. }, "PUT") | (Route::Leases { .. } | Route::Events { .. }, "POST")
    );
    if writes && !is_json(req.header("content-type")) {
        return status::unsupported_media_type(req.header("content-type").unwrap_or(""));
    }
    match (route, req.method.as_str()) {
        (Route::Lease { ns, name }, "GET") => match store.get(ns, name) {
            Some(obj) => json_response(200, obj),
            None => status::not_found(LEASES, name),
        },
        (Route::Lease { ns, name }, "PUT") => update(store, ns, name, &req.body),
        (Route::Leases { ns }, "POST") => create(store, ns, &req.body),
        (Route::Leases { ns }, "GET") => list(store, ns, req),
        (Route::Events { ns }, "POST") => match decode_object(&req.body, "Event", false) {
            Ok(obj) => json_response(201, &store.add_event(ns, obj)),
            Err(resp) => resp,
        },
        (Route::Unknown, _) => status::path_not_found(),
        _ => status::method_not_allowed(),
    }
}

fn cannot_handle(kind: &str, detail: &str) -> Response {
    status::bad_request(&format!(
        "{kind} in version \"v1\" cannot be handled as a {kind}: {detail}"
    ))
}

/// Only JSON bodies are accepted (the real server also takes YAML and
/// protobuf, which no client of this crate sends).
fn is_json(content_type: Option<&str>) -> bool {
    content_type
        .and_then(|ct| ct.split(';').next())
        .is_some_and(|ct| ct.trim().eq_ignore_ascii_case("application/json"))
}

/// Decode a JSON object whose `kind` must be `kind` (or, unless
/// `require_kind`, absent: the real server defaults it from the URL).
fn decode_object(body: &[u8], kind: &str, require_kind: bool) -> Result<Value, Response> {
    let obj: Value = serde_json::from_slice(body).map_err(|e| {
        status::bad_request(&format!("couldn't get version/kind; json parse error: {e}"))
    })?;
    let Some(map) = obj.as_object() else {
        return Err(status::bad_request(
            "couldn't get version/kind; json parse error: expected an object",
        ));
    };
    match map.get("kind").and_then(Value::as_str) {
        Some(k) if k == kind => {}
        Some("") | None if !require_kind => {}
        Some("") | None => {
            let shown: String = String::from_utf8_lossy(body).chars().take(256).collect();
            return Err(status::bad_request(&format!(
                "Object 'Kind' is missing in '{shown}'"
            )));
        }
        Some(other) => {
            return Err(status::bad_request(&format!(
                "the kind in the data ({other}) does not match the expected kind ({kind})"
            )))
        }
    }
    if map.get("metadata").is_some_and(|m| !m.is_object()) {
        return Err(cannot_handle(kind, "metadata must be an object"));
    }
    Ok(obj)
}

/// Decode and check a Lease body for `ns` as the API server's decoder and
/// `ValidateLease` would; the 422 checks are returned separately because
/// the API server runs them after the precondition checks of an update.
fn decode_lease(body: &[u8], ns: &str) -> Result<(Value, Option<Response>), Response> {
    let obj = decode_object(body, "Lease", true)?;
    if let Some(v) = obj.get("apiVersion").and_then(Value::as_str) {
        if v != LEASE_API_VERSION {
            return Err(status::bad_request(&format!(
                "the API version in the data ({v}) does not match the expected API version ({LEASE_API_VERSION})"
            )));
        }
    }
    if let Some(obj_ns) = meta_str(&obj, "namespace") {
        if !obj_ns.is_empty() && obj_ns != ns {
            return Err(status::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
    }
    let empty = Map::new();
    let spec = match obj.get("spec") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(_) => return Err(cannot_handle("Lease", "spec must be an object")),
    };
    for field in ["acquireTime", "renewTime"] {
        match spec.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => {
                if let Err(e) = MicroTime::parse_strict(s) {
                    return Err(cannot_handle(
                        "Lease",
                        &format!(
                            "parsing time \"{s}\" as \"2006-01-02T15:04:05.000000Z07:00\": {e}"
                        ),
                    ));
                }
            }
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
    let name = meta_str(&obj, "name").unwrap_or_default().to_string();
    let mut invalid = None;
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
        if n < min && invalid.is_none() {
            invalid = Some(status::invalid(&name, &format!("spec.{field}"), v, detail));
        }
    }
    Ok((obj, invalid))
}

fn create(store: &mut Store, ns: &str, body: &[u8]) -> Response {
    let (mut obj, invalid) = match decode_lease(body, ns) {
        Ok(d) => d,
        Err(resp) => return resp,
    };
    let mut name = meta_str(&obj, "name").unwrap_or_default().to_string();
    if name.is_empty() {
        match meta_str(&obj, "generateName").filter(|g| !g.is_empty()) {
            Some(prefix) => {
                name = format!(
                    "{prefix}{}",
                    &uuid::Uuid::new_v4().simple().to_string()[..5]
                );
            }
            None => {
                return status::required("", "metadata.name", "name or generateName is required")
            }
        }
    }
    if let Some(resp) = invalid {
        return resp;
    }
    if store.get(ns, &name).is_some() {
        return status::already_exists(LEASES, &name);
    }
    // The server owns these; a stale resourceVersion from the client must not stick.
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
        m.remove("uid");
        m.remove("creationTimestamp");
    }
    json_response(201, &store.write(ns, &name, obj))
}

fn update(store: &mut Store, ns: &str, name: &str, body: &[u8]) -> Response {
    let (obj, invalid) = match decode_lease(body, ns) {
        Ok(d) => d,
        Err(resp) => return resp,
    };
    let body_name = meta_str(&obj, "name").unwrap_or_default();
    if body_name != name {
        return status::bad_request(&format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        ));
    }
    let Some(stored) = store.get(ns, name) else {
        return status::not_found(LEASES, name);
    };
    if let Some(rv) = meta_str(&obj, "resourceVersion").filter(|rv| !rv.is_empty()) {
        if Some(rv) != meta_str(stored, "resourceVersion") {
            return status::conflict(LEASES, name);
        }
    }
    if let Some(resp) = invalid {
        return resp;
    }
    json_response(200, &store.write(ns, name, obj))
}

/// `metadata.name` from a `fieldSelector`, `Ok(None)` when there is none.
pub(crate) fn name_selector(req: &Request) -> Result<Option<String>, Response> {
    let Some(sel) = req.query("fieldSelector").filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    let mut name = None;
    for term in sel.split(',') {
        let (field, value) = term
            .split_once("==")
            .or_else(|| term.split_once('='))
            .ok_or_else(|| {
                status::bad_request(&format!(
                    "invalid selector: '{sel}'; can't understand '{term}'"
                ))
            })?;
        match field {
            "metadata.name" => name = Some(value.to_string()),
            "metadata.namespace" => {}
            other => {
                return Err(status::bad_request(&format!(
                    "\"{other}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                )))
            }
        }
    }
    Ok(name)
}

fn list(store: &Store, ns: &str, req: &Request) -> Response {
    let name = match name_selector(req) {
        Ok(n) => n,
        Err(resp) => return resp,
    };
    let items: Vec<Value> = store
        .list(ns)
        .into_iter()
        .filter(|o| {
            name.as_deref()
                .is_none_or(|n| meta_str(o, "name") == Some(n))
        })
        .collect();
    json_response(
        200,
        &json!({
            "kind": "LeaseList",
            "apiVersion": LEASE_API_VERSION,
            "metadata": { "resourceVersion": store.rv().to_string() },
            "items": items,
        }),
    )
}
