//! The endpoints of every served resource (Leases, core/v1 and
//! events.k8s.io/v1 Events, Namespaces): get, list, create, update,
//! patch (merge, strategic, JSON, apply), delete and delete-collection,
//! with the API server's order of checks and its answers: preconditions
//! (`uid`, `resourceVersion`), then validation (`meta` and each type's
//! own), then storage.

use serde_json::{json, Value};

use super::apply;
use super::decode::{self, Decoded, Options};
use super::deletion::{self, Deleted};
use super::events_v1;
use super::http::{Request, Response};
use super::meta;
use super::namespaces;
use super::openapi;
use super::owners::Owners;
use super::patch::{self, PatchType};
use super::protobuf;
use super::resource::{Api, Route};
use super::selector::Selection;
use super::stats::Kind;
use super::status::{self, Cause, Target};
use super::store::{meta_str, random_suffix, Collection, Store};
use super::table;
use super::yaml_body;

/// True for a watch request.
pub(crate) fn is_watch(req: &Request) -> bool {
    req.query("watch").is_some_and(|w| w == "true" || w == "1")
}

/// How a request counts in the stats, and what RBAC messages call it.
pub(crate) fn classify(route: &Route, req: &Request) -> (Kind, Option<Target>) {
    let target = |verb, api: Api, ns: &str, name: &str| {
        Some(Target {
            verb,
            resource: api.resource(),
            namespace: ns.to_string(),
            name: name.to_string(),
        })
    };
    let method = req.method.as_str();
    match route {
        Route::Object { api, ns, name } => {
            let kind = match (api, method) {
                (Api::Leases, "GET") => Kind::Get,
                (Api::Leases, "PUT") => Kind::Update,
                _ => Kind::Other,
            };
            (kind, target(verb(method), *api, ns, name))
        }
        Route::Collection { api, ns } => {
            let (kind, verb) = match (api, method) {
                (Api::Leases, "GET") if is_watch(req) => (Kind::Watch, "watch"),
                (_, "GET") if is_watch(req) => (Kind::Other, "watch"),
                (_, "GET") => (Kind::Other, "list"),
                (Api::Leases, "POST") => (Kind::Create, "create"),
                (Api::Events | Api::EventsV1, "POST") => (Kind::Event, "create"),
                (_, "POST") => (Kind::Other, "create"),
                (_, "DELETE") => (Kind::Other, "deletecollection"),
                (_, m) => (Kind::Other, verb(m)),
            };
            let name = if method == "POST" && *api == Api::Leases {
                body_name(&req.body)
            } else {
                String::new()
            };
            (kind, target(verb, *api, ns, &name))
        }
        Route::Discovery(_) | Route::OpenApi | Route::OpenApiLeases | Route::Unknown => {
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

/// `resp` with one `Warning` header per warning, as the API server sends
/// them (`299 - "text"`).
fn warned(mut resp: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let quoted = w.replace('\\', "\\\\").replace('"', "\\\"");
        resp.headers
            .push(("Warning", format!("299 - \"{quoted}\"")));
    }
    resp
}

/// A stored object as `api` shows it.
pub(crate) fn view(api: Api, stored: Value) -> Value {
    match api {
        Api::EventsV1 => {
            let mut e = events_v1::from_core(stored);
            if let Some(m) = e.as_object_mut() {
                for (field, empty) in [
                    ("deprecatedSource", json!({})),
                    ("deprecatedFirstTimestamp", Value::Null),
                    ("deprecatedLastTimestamp", Value::Null),
                ] {
                    m.entry(field).or_insert(empty);
                }
            }
            e
        }
        Api::Events => core_event_fields(stored),
        // A Lease's spec is a struct Go never omits.
        Api::Leases => {
            let mut l = stored;
            if let Some(m) = l.as_object_mut() {
                m.entry("spec").or_insert_with(|| json!({}));
            }
            l
        }
        _ => stored,
    }
}

/// The group a 422 names: an events.k8s.io/v1 Event is validated as the
/// core Event it is stored as (`Event "x" is invalid`, no group).
fn invalid_group(api: Api) -> &'static str {
    match api {
        Api::EventsV1 => "",
        _ => api.group(),
    }
}

/// A core/v1 Event as kube-apiserver serialises it: the fields Go's types
/// do not omit when empty are there, as `null`, `""` or `{}`.
fn core_event_fields(mut e: Value) -> Value {
    if let Some(m) = e.as_object_mut() {
        for (field, empty) in [
            ("source", json!({})),
            ("firstTimestamp", Value::Null),
            ("lastTimestamp", Value::Null),
            ("eventTime", Value::Null),
            ("reportingComponent", json!("")),
            ("reportingInstance", json!("")),
        ] {
            m.entry(field).or_insert(empty);
        }
    }
    e
}

/// One object, or its Table when the client asked for one.
fn object_response(req: &Request, api: Api, code: u16, stored: &Value) -> Response {
    match table::wanted(req) {
        Some(version) => {
            let rv = meta_str(stored, "resourceVersion").unwrap_or_default();
            let t = api
                .printer()
                .table(version, rv, std::slice::from_ref(stored));
            json_response(code, &t)
        }
        None => json_response(code, &view(api, stored.clone())),
    }
}

/// A list of `items` (stored objects) at version `rv`, or its Table when
/// the client asked for one.
fn list_response(req: &Request, api: Api, rv: u64, items: Vec<Value>) -> Response {
    let rv = rv.to_string();
    if let Some(version) = table::wanted(req) {
        return json_response(200, &api.printer().table(version, &rv, &items));
    }
    let items: Vec<Value> = items.into_iter().map(|o| list_item(view(api, o))).collect();
    json_response(
        200,
        &json!({
            "kind": format!("{}List", api.kind()),
            "apiVersion": api.api_version(),
            "metadata": { "resourceVersion": rv },
            "items": items,
        }),
    )
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

/// A JSON or YAML body (YAML turned into JSON), or the 415; for a
/// Namespace, the protobuf `kubectl create namespace` sends, too.
fn object_body(req: &Request, api: Api) -> Result<Vec<u8>, Response> {
    let content_type = req.header("content-type");
    let media = content_type
        .and_then(|ct| ct.split(';').next())
        .map_or("", str::trim);
    if yaml_body::is_yaml(content_type) {
        yaml_body::to_json(&req.body)
    } else if decode::is_json(content_type) {
        Ok(req.body.clone())
    } else if let Some(ns) = (api == Api::Namespaces && media == protobuf::MEDIA_TYPE)
        .then(|| protobuf::namespace(&req.body))
        .flatten()
    {
        Ok(ns.to_string().into_bytes())
    } else {
        Err(status::unsupported_media_type())
    }
}

/// Serve a non-watch request. Writes to `store` bump its resourceVersion;
/// the caller wakes watchers.
pub(crate) fn handle(store: &mut Store, route: &Route, req: &Request) -> Response {
    let result = match (route, req.method.as_str()) {
        (Route::Object { api, ns, name }, "GET") => match store.get(api.collection(), ns, name) {
            Some(obj) => Ok(object_response(req, *api, 200, obj)),
            None => Ok(status::not_found(api.resource(), name)),
        },
        (Route::Collection { api, ns }, "GET") if !is_watch(req) => list(store, *api, ns, req),
        (Route::Collection { api, ns }, "POST") if !ns.is_empty() || !api.namespaced() => {
            Options::of(req, "CreateOptions").and_then(|opts| {
                let body = object_body(req, *api)?;
                let d = decode::decode(*api, &body, ns, opts.validation)?;
                create(store, *api, ns, d, &opts, None)
            })
        }
        (Route::Object { api, ns, name }, "PUT") => {
            Options::of(req, "UpdateOptions").and_then(|opts| {
                let body = object_body(req, *api)?;
                let d = decode::decode(*api, &body, ns, opts.validation)?;
                update(store, *api, ns, name, d, &opts)
            })
        }
        (Route::Object { api, ns, name }, "PATCH") => Options::of(req, "PatchOptions")
            .and_then(|opts| patch(store, *api, ns, name, req, &opts)),
        (Route::Object { api, ns, name }, "DELETE") => Options::of(req, "DeleteOptions")
            .and_then(|opts| delete(store, *api, ns, name, req, &opts)),
        // kube-apiserver routes deletecollection on a namespace's path only:
        // `DELETE .../leases` across namespaces is a 405.
        (Route::Collection { api, ns }, "DELETE") if api.delete_collection() && !ns.is_empty() => {
            Options::of(req, "DeleteOptions")
                .and_then(|opts| delete_collection(store, *api, ns, req, &opts))
        }
        (Route::Discovery(doc), "GET") => Ok(json_response(200, &doc.body())),
        (Route::OpenApi, "GET") => Ok(json_response(200, &openapi::root())),
        (Route::OpenApiLeases, "GET") => Ok(json_response(200, &openapi::lease_doc())),
        (Route::Unknown, _) => Ok(status::path_not_found()),
        _ => Ok(status::method_not_allowed()),
    };
    result.unwrap_or_else(|resp| resp)
}

/// Store `obj` as `ns/name` with `owners`, or (dry run) only show what
/// would be stored.
fn commit(
    store: &mut Store,
    api: Api,
    ns: &str,
    name: &str,
    obj: Value,
    opts: &Options,
    owners: Owners,
) -> Value {
    if opts.dry_run {
        store.preview(api.collection(), ns, name, obj)
    } else {
        store.write_owned(api.collection(), ns, name, obj, owners)
    }
}

/// Create from a decoded body: the name (or `generateName`), the
/// namespace's existence, validation, then storage. `owners` overrides
/// the ownership a plain create records (apply).
fn create(
    store: &mut Store,
    api: Api,
    ns: &str,
    d: Decoded,
    opts: &Options,
    owners: Option<Owners>,
) -> Result<Response, Response> {
    let Decoded {
        object: mut obj,
        invalid,
        warnings,
    } = d;
    let mut name = meta_str(&obj, "name").unwrap_or_default().to_string();
    if name.is_empty() {
        match meta_str(&obj, "generateName").filter(|g| !g.is_empty()) {
            Some(prefix) => name = format!("{prefix}{}", random_suffix()),
            None => {
                return Err(status::invalid_object(
                    invalid_group(api),
                    api.kind(),
                    "",
                    &[Cause::required(
                        "metadata.name",
                        "name or generateName is required",
                    )],
                ))
            }
        }
    }
    if api.namespaced() && !store.has_namespace(ns) {
        return Err(namespaces::missing(ns));
    }
    obj["metadata"]["name"] = name.clone().into();
    let mut causes = meta::on_create(api, &obj);
    causes.extend(invalid);
    if api == Api::EventsV1 {
        causes.extend(events_v1::validate_create(&obj));
    }
    if !causes.is_empty() {
        return Err(status::invalid_object(
            invalid_group(api),
            api.kind(),
            &name,
            &causes,
        ));
    }
    match api {
        Api::Namespaces => obj = namespaces::complete(obj),
        Api::EventsV1 => obj = events_v1::to_core(obj),
        Api::Leases | Api::Events => {}
    }
    if store.get(api.collection(), ns, &name).is_some() {
        return Err(status::already_exists(api.resource(), &name));
    }
    // The server owns these (a stale resourceVersion from the client must
    // not stick), and a new object is not being deleted (`BeforeCreate`).
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            m.remove(field);
        }
    }
    let owners = owners.unwrap_or_else(|| {
        let mut o = Owners::default();
        o.updated(&opts.manager, None, &obj);
        o
    });
    let stored = commit(store, api, ns, &name, obj, opts, owners);
    Ok(warned(json_response(201, &view(api, stored)), &warnings))
}

/// The 400 for a body (or a patched object) whose name is not the one on
/// the URL.
fn check_named(obj: &Value, name: &str) -> Result<(), Response> {
    let body_name = meta_str(obj, "name").unwrap_or_default();
    if body_name == name {
        return Ok(());
    }
    Err(status::bad_request(&format!(
        "the name of the object ({body_name}) does not match the name on the URL ({name})"
    )))
}

/// `PUT`: the body's `uid` is a precondition (as kube-apiserver's
/// `defaultUpdatedObjectInfo` makes it), so a `PUT` that names the uid of
/// an object deleted since is a 409, not a creation; a missing object is
/// created when the resource allows it; else see [`replace`].
fn update(
    store: &mut Store,
    api: Api,
    ns: &str,
    name: &str,
    d: Decoded,
    opts: &Options,
) -> Result<Response, Response> {
    check_named(&d.object, name)?;
    let stored = store.get(api.collection(), ns, name);
    if let Some(want) = meta_str(&d.object, "uid").filter(|u| !u.is_empty()) {
        let have = stored.and_then(|s| meta_str(s, "uid")).unwrap_or_default();
        if want != have {
            return Err(status::precondition_failed(
                api.resource(),
                ns,
                name,
                &format!("UID in precondition: {want}, UID in object meta: {have}"),
            ));
        }
    }
    if stored.is_none() {
        if api.create_on_update() {
            return create(store, api, ns, d, opts, None);
        }
        return Err(status::not_found(api.resource(), name));
    }
    replace(store, api, ns, name, d, opts, None)
}

/// The stored `ns/name` replaced by `d` (a `PUT`, every patch, an apply
/// to an existing object): the resourceVersion precondition (required for
/// Leases), the deletion mark carried over, validation (a changed `uid`
/// is immutable), then storage; or, when `d` empties the finalizers of an
/// object being deleted, its removal, answered with `d` (the registry's
/// `deleteWithoutFinalizers`). `owners` overrides the ownership an update
/// records (apply).
fn replace(
    store: &mut Store,
    api: Api,
    ns: &str,
    name: &str,
    d: Decoded,
    opts: &Options,
    owners: Option<Owners>,
) -> Result<Response, Response> {
    let c = api.collection();
    let Some(stored) = store.get(c, ns, name) else {
        return Err(status::not_found(api.resource(), name));
    };
    let Decoded {
        object: mut obj,
        invalid,
        warnings,
    } = d;
    match meta_str(&obj, "resourceVersion").filter(|rv| !rv.is_empty()) {
        Some(rv) if Some(rv) != meta_str(stored, "resourceVersion") => {
            return Err(status::conflict(api.resource(), name));
        }
        Some(_) => {}
        None if api.unconditional_update() => {}
        None => {
            return Err(status::invalid_object(
                invalid_group(api),
                api.resource().plural,
                name,
                &[Cause::invalid(
                    "metadata.resourceVersion",
                    "0",
                    "must be specified for an update",
                )],
            ))
        }
    }
    deletion::carry(&mut obj, stored);
    let mut causes = meta::on_update(&obj, stored);
    causes.extend(invalid);
    if !causes.is_empty() {
        return Err(status::invalid_object(
            invalid_group(api),
            api.kind(),
            name,
            &causes,
        ));
    }
    match api {
        Api::EventsV1 => obj = events_v1::to_core(obj),
        Api::Namespaces => {
            // Finalizers and phase belong to the server.
            obj["spec"] = stored["spec"].clone();
            obj["status"] = stored["status"].clone();
        }
        Api::Leases | Api::Events => {}
    }
    if api != Api::Namespaces && deletion::completes(&obj, stored) {
        let last = store.preview(c, ns, name, obj);
        if !opts.dry_run {
            store.delete(c, ns, name);
        }
        return Ok(warned(json_response(200, &view(api, last)), &warnings));
    }
    let owners = owners.unwrap_or_else(|| {
        let mut o = store.owners(c, ns, name);
        o.updated(&opts.manager, Some(stored), &obj);
        o
    });
    let out = commit(store, api, ns, name, obj, opts, owners);
    Ok(warned(json_response(200, &view(api, out)), &warnings))
}

/// `PATCH`: JSON patch, merge patch, strategic merge patch, or apply. The
/// patched object is then updated as a `PUT` would be: a different
/// `metadata.resourceVersion` in it is a conflict.
fn patch(
    store: &mut Store,
    api: Api,
    ns: &str,
    name: &str,
    req: &Request,
    opts: &Options,
) -> Result<Response, Response> {
    let content_type = req.header("content-type").unwrap_or("");
    let Some(kind) = PatchType::of(content_type) else {
        return Err(status::unsupported_patch_type());
    };
    if kind == PatchType::Apply {
        return apply(store, api, ns, name, req, opts);
    }
    if opts.force.is_some() {
        return Err(status::invalid_object(
            "meta.k8s.io",
            "PatchOptions",
            "",
            &[Cause::forbidden(
                "force",
                "may not be specified for non-apply patch",
            )],
        ));
    }
    let Some(stored) = store.get(api.collection(), ns, name) else {
        return Err(status::not_found(api.resource(), name));
    };
    let current = view(api, stored.clone());
    let mut patched = match kind {
        PatchType::Json => patch::json_patch(&current, &req.body)?,
        PatchType::Merge => patch::merge(&current, &req.body, false)?,
        PatchType::Strategic | PatchType::Apply => patch::merge(&current, &req.body, true)?,
    };
    if meta_str(&patched, "resourceVersion").is_none_or(str::is_empty) {
        // A patch that drops the version is applied to the current object.
        patched["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
    }
    let d = decode::decode_patched(api, patched.to_string().as_bytes(), ns, opts.validation)?;
    check_named(&d.object, name)?;
    replace(store, api, ns, name, d, opts, None)
}

/// Server-side apply (see `apply`): create when missing, else merge the
/// applied fields after checking for conflicts. The configuration's
/// `metadata.resourceVersion` and `uid`, which nobody owns, are kept in
/// the merged object, as structured-merge-diff keeps them: the update
/// then compares them with the stored object's (a stale version is a 409,
/// another uid a 422), and a uid where there is no object is a 409
/// (`uid mismatch`), not a creation.
fn apply(
    store: &mut Store,
    api: Api,
    ns: &str,
    name: &str,
    req: &Request,
    opts: &Options,
) -> Result<Response, Response> {
    let config = apply::config(api, name, req, opts)?;
    let c = api.collection();
    let mut owners = store.owners(c, ns, name);
    let live = store.get(c, ns, name).cloned();
    let force = opts.force.unwrap_or(false);
    let preconditions = apply::preconditions(&config.object)?;
    // Name, kind and version are nobody's fields, but they name the object.
    let named = json!({
        "apiVersion": api.api_version(),
        "kind": api.kind(),
        "metadata": { "name": name },
    });
    let mut merged = match &live {
        None => {
            if let Some(uid) = preconditions.uid {
                return Err(status::conflict_because(
                    api.resource(),
                    name,
                    &format!(
                        "uid mismatch: the provided object specified uid {uid}, and no \
                         existing object was found"
                    ),
                ));
            }
            owners.apply(&opts.manager, &config.object, &named)
        }
        Some(live) => {
            if let Some(resp) = apply::check(&owners, &opts.manager, &config.object, live, force) {
                return Err(resp);
            }
            owners.apply(&opts.manager, &config.object, live)
        }
    };
    if let Some(m) = merged.get_mut("metadata").and_then(Value::as_object_mut) {
        for (field, value) in [
            ("resourceVersion", preconditions.resource_version),
            ("uid", preconditions.uid),
        ] {
            if let Some(v) = value {
                m.insert(field.into(), v.into());
            }
        }
    }
    let d = decode::decode(api, merged.to_string().as_bytes(), ns, opts.validation)?;
    let resp = match live {
        None => create(store, api, ns, d, opts, Some(owners))?,
        Some(_) => replace(store, api, ns, name, d, opts, Some(owners))?,
    };
    Ok(warned(resp, &config.warnings))
}

/// `DELETE` with optional `DeleteOptions`: its preconditions are checked,
/// then the object is removed, or, when it has finalizers, marked as being
/// deleted and answered with itself (see `deletion`); grace periods and
/// propagation mean nothing here, where no object has dependents. A
/// removal is answered, as for every resource whose registry does not
/// return the deleted object, with a Success `Status` naming it; a
/// Namespace is answered with itself, terminating.
fn delete(
    store: &mut Store,
    api: Api,
    ns: &str,
    name: &str,
    req: &Request,
    opts: &Options,
) -> Result<Response, Response> {
    let options = delete_options(req)?;
    let dry_run = opts.dry_run || options["dryRun"].as_array().is_some_and(|d| !d.is_empty());
    let c = api.collection();
    let Some(stored) = store.get(c, ns, name) else {
        return Err(status::not_found(api.resource(), name));
    };
    let uid = meta_str(stored, "uid").unwrap_or_default().to_string();
    for (field, what) in [("uid", "UID"), ("resourceVersion", "ResourceVersion")] {
        let Some(want) = options["preconditions"][field].as_str() else {
            continue;
        };
        let have = meta_str(stored, field).unwrap_or_default();
        if want != have {
            let why = if field == "uid" {
                "The object might have been deleted and then recreated"
            } else {
                "The object might have been modified"
            };
            return Err(status::conflict_of_kind(
                api.kind(),
                api.resource().group,
                name,
                &format!(
                    "the {what} in the precondition ({want}) does not match the {what} in \
                     record ({have}). {why}"
                ),
            ));
        }
    }
    if api == Api::Namespaces {
        if let Some(resp) = namespaces::refuse_delete(name) {
            return Err(resp);
        }
        let mut gone = namespaces::terminating(stored.clone());
        if !dry_run {
            store.delete_contents(name);
            store.delete(c, ns, name);
            // Marking it terminating is a write, with a version of its own.
            gone["metadata"]["resourceVersion"] = store.rv().to_string().into();
        }
        return Ok(json_response(200, &gone));
    }
    match deletion::delete(store, c, ns, name, dry_run) {
        Some(Deleted::Marked(kept)) => Ok(json_response(200, &view(api, kept))),
        _ => Ok(json_response(
            200,
            &status::deleted(api.resource(), name, &uid),
        )),
    }
}

/// The request's `DeleteOptions` body (optional; JSON).
fn delete_options(req: &Request) -> Result<Value, Response> {
    if req.body.is_empty() {
        return Ok(Value::Null);
    }
    let options = decode::decode_object(&req.body, "DeleteOptions")?;
    if options["dryRun"]
        .as_array()
        .is_some_and(|d| d.iter().any(|v| v != "All"))
    {
        return Err(status::invalid_object(
            "meta.k8s.io",
            "DeleteOptions",
            "",
            &[Cause::not_supported(
                "dryRun",
                &options["dryRun"].to_string(),
                &["All"],
            )],
        ));
    }
    Ok(options)
}

/// `DELETE` of a namespace's collection: every object the selectors pick
/// is deleted as a `DELETE` of it would be (watchers see each `DELETED`,
/// or `MODIFIED` for one kept for its finalizers), and the list of them,
/// as they were, is the answer.
fn delete_collection(
    store: &mut Store,
    api: Api,
    ns: &str,
    req: &Request,
    opts: &Options,
) -> Result<Response, Response> {
    let options = delete_options(req)?;
    let dry_run = opts.dry_run || options["dryRun"].as_array().is_some_and(|d| !d.is_empty());
    let selector = Selection::of(req, api.selectable())?;
    let rv = store.rv();
    let c = api.collection();
    let doomed: Vec<Value> = store
        .list(c, ns)
        .into_iter()
        .filter(|o| selector.matches(o))
        .collect();
    for o in &doomed {
        let name = meta_str(o, "name").unwrap_or_default();
        deletion::delete(store, c, ns, name, dry_run);
    }
    Ok(list_response(req, api, rv, doomed))
}

fn list(store: &Store, api: Api, ns: &str, req: &Request) -> Result<Response, Response> {
    let selector = Selection::of(req, api.selectable())?;
    let items: Vec<Value> = store
        .list(api.collection(), ns)
        .into_iter()
        .filter(|o| selector.matches(o))
        .collect();
    Ok(list_response(req, api, store.rv(), items))
}

/// The Events of the store, oldest first, as core/v1 shows them.
pub(crate) fn events(store: &Store) -> Vec<Value> {
    store
        .created_order(Collection::Events)
        .into_iter()
        .map(|e| view(Api::Events, e))
        .collect()
}
