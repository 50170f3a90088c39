//! Routing and the Lease/Event endpoints, with the API server's validation.

use serde_json::{json, Map, Value};

use super::discovery::Doc;
use super::http::{Request, Response};
use super::openapi;
use super::selector::{Selection, EVENT_FIELDS, LEASE_FIELDS};
use super::stats::Kind;
use super::status::{self, Resource, Target, EVENTS, LEASES};
use super::store::{meta_str, Store};
use super::table;
use super::yaml_body;
use crate::lease::{MicroTime, LEASE_API_VERSION};

/// What a request addresses. An empty `ns` is every namespace (the
/// API's `NamespaceAll`): the cluster-scoped list and watch paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// `/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}`
    Lease { ns: String, name: String },
    /// `/apis/coordination.k8s.io/v1/namespaces/{ns}/leases`, or
    /// `/apis/coordination.k8s.io/v1/leases` (`ns` empty)
    Leases { ns: String },
    /// `/api/v1/namespaces/{ns}/events/{name}`
    Event { ns: String, name: String },
    /// `/api/v1/namespaces/{ns}/events`, or `/api/v1/events` (`ns` empty)
    Events { ns: String },
    /// A discovery document (`/version`, `/api`, `/apis`, ...).
    Discovery(Doc),
    /// `/openapi/v3`
    OpenApi,
    /// `/openapi/v3/apis/coordination.k8s.io/v1`
    OpenApiLeases,
    /// Anything else.
    Unknown,
}

impl Route {
    pub(crate) fn of(segments: &[String]) -> Route {
        let s: Vec<&str> = segments.iter().map(String::as_str).collect();
        let ns = |ns: &str| ns.to_string();
        match s.as_slice() {
            ["apis", "coordination.k8s.io", "v1", "leases"] => Route::Leases { ns: ns("") },
            ["apis", "coordination.k8s.io", "v1", "namespaces", n, "leases"] => {
                Route::Leases { ns: ns(n) }
            }
            ["apis", "coordination.k8s.io", "v1", "namespaces", n, "leases", name] => {
                Route::Lease {
                    ns: ns(n),
                    name: name.to_string(),
                }
            }
            ["api", "v1", "events"] => Route::Events { ns: ns("") },
            ["api", "v1", "namespaces", n, "events"] => Route::Events { ns: ns(n) },
            ["api", "v1", "namespaces", n, "events", name] => Route::Event {
                ns: ns(n),
                name: name.to_string(),
            },
            ["openapi", "v3"] => Route::OpenApi,
            other if openapi::is_lease_doc(other) => Route::OpenApiLeases,
            other => Doc::at(other).map_or(Route::Unknown, Route::Discovery),
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
        (Route::Event { ns, name }, m) => (Kind::Other, target(verb(m), EVENTS, ns, name)),
        (Route::Events { ns }, "POST") => (Kind::Event, target("create", EVENTS, ns, "")),
        (Route::Events { ns }, "GET") if is_watch(req) => {
            (Kind::Other, target("watch", EVENTS, ns, ""))
        }
        (Route::Events { ns }, "GET") => (Kind::Other, target("list", EVENTS, ns, "")),
        (Route::Events { ns }, m) => (Kind::Other, target(verb(m), EVENTS, ns, "")),
        (Route::Discovery(_) | Route::OpenApi | Route::OpenApiLeases | Route::Unknown, _) => {
            (Kind::Other, None)
        }
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

/// One object, or its Table when the client asked for one.
fn object_response(req: &Request, printer: table::Printer, obj: &Value) -> Response {
    match table::wanted(req) {
        Some(version) => {
            let rv = meta_str(obj, "resourceVersion").unwrap_or_default();
            json_response(200, &printer.table(version, rv, std::slice::from_ref(obj)))
        }
        None => json_response(200, obj),
    }
}

/// A list (`kind`, `apiVersion`) of `items` at the store's current
/// version, or its Table when the client asked for one.
fn list_response(
    req: &Request,
    store: &Store,
    printer: table::Printer,
    kind: &str,
    api_version: &str,
    items: Vec<Value>,
) -> Response {
    let rv = store.rv().to_string();
    if let Some(version) = table::wanted(req) {
        return json_response(200, &printer.table(version, &rv, &items));
    }
    let items: Vec<Value> = items.into_iter().map(list_item).collect();
    json_response(
        200,
        &json!({
            "kind": kind,
            "apiVersion": api_version,
            "metadata": { "resourceVersion": rv },
            "items": items,
        }),
    )
}

/// Serve a non-watch request. Writes to `store` bump its resourceVersion;
/// the caller wakes watchers.
pub(crate) fn handle(store: &mut Store, route: &Route, req: &Request) -> Response {
    let writes = match (route, req.method.as_str()) {
        (Route::Lease { .. }, "PUT") => true,
        (Route::Leases { ns } | Route::Events { ns }, "POST") => !ns.is_empty(),
        // DeleteOptions are optional; when sent, they are JSON.
        (Route::Lease { .. }, "DELETE") => !req.body.is_empty(),
        _ => false,
    };
    let any_write = writes || matches!(req.method.as_str(), "PATCH" | "DELETE");
    if any_write && req.query("dryRun").is_some_and(|d| !d.is_empty()) {
        // Refused rather than carried out: a dry run must never write.
        return status::bad_request("dryRun is not supported by this test server");
    }
    let content_type = req.header("content-type");
    let from_yaml: Vec<u8>;
    let body: &[u8] = if writes && yaml_body::is_yaml(content_type) {
        from_yaml = match yaml_body::to_json(&req.body) {
            Ok(json) => json,
            Err(resp) => return resp,
        };
        &from_yaml
    } else if writes && !is_json(content_type) {
        return status::unsupported_media_type(content_type.unwrap_or(""));
    } else {
        &req.body
    };
    match (route, req.method.as_str()) {
        (Route::Lease { ns, name }, "GET") => match store.get(ns, name) {
            Some(obj) => object_response(req, table::LEASES, obj),
            None => status::not_found(LEASES, name),
        },
        (Route::Lease { ns, name }, "PUT") => update(store, ns, name, body, strict(req)),
        (Route::Lease { ns, name }, "PATCH") => patch(store, ns, name, req),
        (Route::Lease { ns, name }, "DELETE") => delete(store, ns, name, body),
        (Route::Leases { ns }, "POST") if !ns.is_empty() => create(store, ns, body, strict(req)),
        (Route::Leases { ns }, "GET") => list(store, ns, req),
        (Route::Events { ns }, "POST") if !ns.is_empty() => {
            match decode_typed(body, "Event", "v1") {
                Ok(obj) => json_response(201, &store.add_event(ns, obj)),
                Err(resp) => resp,
            }
        }
        (Route::Events { ns }, "GET") if !is_watch(req) => list_events(store, ns, req),
        (Route::Event { ns, name }, "GET") => match store.event(ns, name) {
            Some(obj) => object_response(req, table::EVENTS, obj),
            None => status::not_found(EVENTS, name),
        },
        (Route::Discovery(doc), "GET") => json_response(200, &doc.body()),
        (Route::OpenApi, "GET") => json_response(200, &openapi::root()),
        (Route::OpenApiLeases, "GET") => json_response(200, &openapi::lease_doc()),
        (Route::Unknown, _) => status::path_not_found(),
        _ => status::method_not_allowed(),
    }
}

fn cannot_handle(kind: &str, detail: &str) -> Response {
    status::bad_request(&format!(
        "{kind} in version \"v1\" cannot be handled as a {kind}: {detail}"
    ))
}

/// JSON bodies are accepted, and YAML ones (see `yaml_body`); protobuf,
/// which the real server also takes, is not. A body without a media
/// type is JSON, as kube-apiserver takes it (apimachinery's
/// `NegotiateInputSerializerForMediaType` picks its first serializer):
/// the official Python client sends none.
fn is_json(content_type: Option<&str>) -> bool {
    let media = content_type
        .and_then(|ct| ct.split(';').next())
        .map_or("", str::trim);
    media.is_empty() || media.eq_ignore_ascii_case("application/json")
}

/// Decode a JSON object whose `kind`, when it names one, must be `kind`.
fn decode_object(body: &[u8], kind: &str) -> Result<Value, Response> {
    let obj: Value = serde_json::from_slice(body).map_err(|e| {
        status::bad_request(&format!("couldn't get version/kind; json parse error: {e}"))
    })?;
    let Some(map) = obj.as_object() else {
        return Err(status::bad_request(
            "couldn't get version/kind; json parse error: expected an object",
        ));
    };
    match map.get("kind") {
        None | Some(Value::Null) => {}
        Some(Value::String(k)) if k.is_empty() || k == kind => {}
        Some(other) => {
            let other = other
                .as_str()
                .map_or_else(|| other.to_string(), str::to_string);
            return Err(status::bad_request(&format!(
                "the kind in the data ({other}) does not match the expected kind ({kind})"
            )));
        }
    }
    if map.get("metadata").is_some_and(|m| !m.is_object()) {
        return Err(cannot_handle(kind, "metadata must be an object"));
    }
    Ok(obj)
}

/// Decode an object of `kind` in `api_version` to be stored: a missing or
/// empty `kind` or `apiVersion` is defaulted to them, as the real decoder
/// defaults them from the URL (the Python client's `LeaseLock.create`
/// sends neither); a different one is refused.
fn decode_typed(body: &[u8], kind: &str, api_version: &str) -> Result<Value, Response> {
    let mut obj = decode_object(body, kind)?;
    match obj.get("apiVersion") {
        None | Some(Value::Null) => {}
        Some(Value::String(v)) if v.is_empty() || v == api_version => {}
        Some(other) => {
            let other = other
                .as_str()
                .map_or_else(|| other.to_string(), str::to_string);
            return Err(status::bad_request(&format!(
                "the API version in the data ({other}) does not match the expected API version ({api_version})"
            )));
        }
    }
    if let Some(m) = obj.as_object_mut() {
        m.insert("kind".into(), kind.into());
        m.insert("apiVersion".into(), api_version.into());
    }
    Ok(obj)
}

/// Decode and check a Lease body for `ns` as the API server's decoder and
/// `ValidateLease` would; the 422 checks are returned separately because
/// the API server runs them after the precondition checks of an update.
fn decode_lease(
    body: &[u8],
    ns: &str,
    strict: bool,
) -> Result<(Value, Option<Response>), Response> {
    let mut obj = decode_typed(body, "Lease", LEASE_API_VERSION)?;
    if strict {
        let unknown = unknown_lease_fields(&obj);
        if !unknown.is_empty() {
            let list: Vec<String> = unknown
                .iter()
                .map(|f| format!("unknown field \"{f}\""))
                .collect();
            return Err(cannot_handle(
                "Lease",
                &format!("strict decoding error: {}", list.join(", ")),
            ));
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
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        for (field, t) in times {
            spec.insert(field.into(), t.into());
        }
    }
    Ok((obj, invalid))
}

fn create(store: &mut Store, ns: &str, body: &[u8], strict: bool) -> Response {
    let (mut obj, invalid) = match decode_lease(body, ns, strict) {
        Ok(d) => d,
        Err(resp) => return resp,
    };
    let mut name = meta_str(&obj, "name").unwrap_or_default().to_string();
    if name.is_empty() {
        match meta_str(&obj, "generateName").filter(|g| !g.is_empty()) {
            Some(prefix) => {
                name = format!(
                    "{prefix}{}",
                    &crate::random::uuid_v4().simple().to_string()[..5]
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

fn update(store: &mut Store, ns: &str, name: &str, body: &[u8], strict: bool) -> Response {
    let (obj, invalid) = match decode_lease(body, ns, strict) {
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

/// `?fieldValidation=Strict`: unknown fields are refused. Otherwise (as
/// before this server knew the parameter) they are stored as sent, where
/// the real server would drop them.
fn strict(req: &Request) -> bool {
    req.query("fieldValidation") == Some("Strict")
}

/// The fields of a Lease, its metadata and its spec the API server does
/// not know, as strict decoding names them (`spec.foo`).
fn unknown_lease_fields(obj: &Value) -> Vec<String> {
    const TOP: &[&str] = &["apiVersion", "kind", "metadata", "spec"];
    const META: &[&str] = &[
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    ];
    const SPEC: &[&str] = &[
        "holderIdentity",
        "leaseDurationSeconds",
        "acquireTime",
        "renewTime",
        "leaseTransitions",
        "strategy",
        "preferredHolder",
    ];
    let mut unknown = Vec::new();
    let mut check = |prefix: &str, v: Option<&Value>, known: &[&str]| {
        for key in v
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|m| m.keys())
        {
            if !known.contains(&key.as_str()) {
                unknown.push(format!("{prefix}{key}"));
            }
        }
    };
    check("", Some(obj), TOP);
    check("metadata.", obj.get("metadata"), META);
    check("spec.", obj.get("spec"), SPEC);
    unknown
}

/// `PATCH` with a JSON merge patch (RFC 7386), or a strategic merge patch,
/// which for a Lease (scalars only in its spec) merges the same way; the
/// strategic directives (`$patch`, `$retainKeys`, ...) are refused. The
/// patched object is then updated as a `PUT` would be: a
/// `metadata.resourceVersion` in the patch is a precondition.
fn patch(store: &mut Store, ns: &str, name: &str, req: &Request) -> Response {
    let content_type = req.header("content-type").unwrap_or("");
    let media = content_type.split(';').next().unwrap_or("").trim();
    let strategic = media.eq_ignore_ascii_case("application/strategic-merge-patch+json");
    if !strategic && !media.eq_ignore_ascii_case("application/merge-patch+json") {
        return status::unsupported_patch_type(content_type);
    }
    let patch: Value = match serde_json::from_slice(&req.body) {
        Ok(p @ Value::Object(_)) => p,
        Ok(_) => return status::bad_request("the patch is not a JSON object"),
        Err(e) => return status::bad_request(&format!("error decoding patch: {e}")),
    };
    if strategic && has_directive(&patch) {
        return status::bad_request(
            "strategic merge patch directives ($patch, $retainKeys, $setElementOrder, ...) \
             are not supported by this test server",
        );
    }
    let Some(stored) = store.get(ns, name) else {
        return status::not_found(LEASES, name);
    };
    let mut merged = stored.clone();
    merge_patch(&mut merged, &patch);
    update(store, ns, name, merged.to_string().as_bytes(), strict(req))
}

fn has_directive(v: &Value) -> bool {
    match v {
        Value::Object(m) => m
            .iter()
            .any(|(k, v)| k.starts_with('$') || has_directive(v)),
        Value::Array(a) => a.iter().any(has_directive),
        _ => false,
    }
}

/// RFC 7386: objects merge key by key, `null` removes, anything else
/// replaces.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// `DELETE` with optional `DeleteOptions`: its preconditions are checked,
/// everything else (grace period, propagation) means nothing for a Lease,
/// which has no finalizers or dependents here. Answered, as for every
/// resource whose registry does not return the deleted object, with a
/// Success `Status` naming it.
fn delete(store: &mut Store, ns: &str, name: &str, body: &[u8]) -> Response {
    let options = if body.is_empty() {
        Value::Null
    } else {
        match decode_object(body, "DeleteOptions") {
            Ok(o) => o,
            Err(resp) => return resp,
        }
    };
    if options["dryRun"].as_array().is_some_and(|d| !d.is_empty()) {
        return status::bad_request("dryRun is not supported by this test server");
    }
    let Some(stored) = store.get(ns, name) else {
        return status::not_found(LEASES, name);
    };
    let uid = meta_str(stored, "uid").unwrap_or_default().to_string();
    for (field, what) in [("uid", "UID"), ("resourceVersion", "ResourceVersion")] {
        let Some(want) = options["preconditions"][field].as_str() else {
            continue;
        };
        let have = meta_str(stored, field).unwrap_or_default();
        if want != have {
            return status::precondition_failed(
                LEASES,
                ns,
                name,
                &format!("{what} in precondition: {want}, {what} in object meta: {have}"),
            );
        }
    }
    store.delete(ns, name);
    json_response(200, &status::deleted(LEASES, name, &uid))
}

/// Items as a list carries them: without their own `kind`/`apiVersion`,
/// which the list's type already says.
fn list_item(mut obj: Value) -> Value {
    if let Some(m) = obj.as_object_mut() {
        m.remove("kind");
        m.remove("apiVersion");
    }
    obj
}

fn list(store: &Store, ns: &str, req: &Request) -> Response {
    let selector = match Selection::of(req, LEASE_FIELDS) {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    let items: Vec<Value> = store
        .list(ns)
        .into_iter()
        .filter(|o| selector.matches(o))
        .collect();
    list_response(
        req,
        store,
        table::LEASES,
        "LeaseList",
        LEASE_API_VERSION,
        items,
    )
}

fn list_events(store: &Store, ns: &str, req: &Request) -> Response {
    let selector = match Selection::of(req, EVENT_FIELDS) {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    let items: Vec<Value> = store
        .events_in(ns)
        .filter(|o| selector.matches(o))
        .cloned()
        .collect();
    list_response(req, store, table::EVENTS, "EventList", "v1", items)
}
