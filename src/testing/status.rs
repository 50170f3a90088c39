//! `meta/v1` Status answers, worded as the real API server words them.

use serde_json::{json, Value};

use super::http::Response;

/// Group of Leases, as it appears in messages and details.
pub(crate) const LEASE_GROUP: &str = "coordination.k8s.io";
/// The identity RBAC messages name for a forbidden token.
const FORBIDDEN_USER: &str = "system:serviceaccount:test:default";

/// A resource as Status messages name it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resource {
    /// Plural resource (`leases`, `events`).
    pub(crate) plural: &'static str,
    /// API group (`""` for core).
    pub(crate) group: &'static str,
}

pub(crate) const LEASES: Resource = Resource {
    plural: "leases",
    group: LEASE_GROUP,
};
pub(crate) const EVENTS: Resource = Resource {
    plural: "events",
    group: "",
};
pub(crate) const EVENTS_V1: Resource = Resource {
    plural: "events",
    group: "events.k8s.io",
};
pub(crate) const NAMESPACES: Resource = Resource {
    plural: "namespaces",
    group: "",
};

impl Resource {
    /// `leases.coordination.k8s.io` or `events`.
    fn qualified(self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    pub(crate) fn details(self, name: &str) -> Value {
        let mut d = json!({ "name": name, "group": self.group, "kind": self.plural });
        if let Some(m) = d.as_object_mut() {
            if name.is_empty() {
                m.remove("name");
            }
            if self.group.is_empty() {
                m.remove("group");
            }
        }
        d
    }
}

/// A Failure Status response; `details` of `null` are left out, as
/// kube-apiserver leaves out those of a 400 or a 401 (an empty object is
/// sent as `{}`, as for a 405).
pub(crate) fn failure(code: u16, reason: &str, message: &str, details: Value) -> Response {
    let mut body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code,
    });
    if let Some(m) = body.as_object_mut().filter(|m| m["details"].is_null()) {
        m.remove("details");
    }
    Response::json(code, body.to_string().into_bytes())
}

pub(crate) fn not_found(res: Resource, name: &str) -> Response {
    failure(
        404,
        "NotFound",
        &format!("{} \"{name}\" not found", res.qualified()),
        res.details(name),
    )
}

pub(crate) fn already_exists(res: Resource, name: &str) -> Response {
    failure(
        409,
        "AlreadyExists",
        &format!("{} \"{name}\" already exists", res.qualified()),
        res.details(name),
    )
}

/// 409 for a stale `resourceVersion` (the registry's `OptimisticLockErrorMsg`).
pub(crate) fn conflict(res: Resource, name: &str) -> Response {
    conflict_because(
        res,
        name,
        "the object has been modified; please apply your changes to the latest version and \
         try again",
    )
}

/// 409 `Conflict` for `why` (apimachinery's `NewConflict`).
pub(crate) fn conflict_because(res: Resource, name: &str, why: &str) -> Response {
    failure(
        409,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on {} \"{name}\": {why}",
            res.qualified()
        ),
        res.details(name),
    )
}

/// 409 `Conflict` naming the object by its kind (`Lease.coordination.k8s.io`,
/// `Event`), as kube-apiserver answers a delete whose preconditions (`uid`,
/// `resourceVersion`) do not hold.
pub(crate) fn conflict_of_kind(kind: &str, group: &str, name: &str, why: &str) -> Response {
    let qualified = if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    };
    let mut details = json!({ "name": name, "group": group, "kind": kind });
    if let Some(d) = details.as_object_mut().filter(|_| group.is_empty()) {
        d.remove("group");
    }
    failure(
        409,
        "Conflict",
        &format!("Operation cannot be fulfilled on {qualified} \"{name}\": {why}"),
        details,
    )
}

/// 409 for an update whose `metadata.uid` names another object (`uid`, `resourceVersion`) do not
/// hold, with the storage error the real server lets through verbatim.
pub(crate) fn precondition_failed(res: Resource, ns: &str, name: &str, detail: &str) -> Response {
    failure(
        409,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on {} \"{name}\": StorageError: invalid object, \
             Code: 4, Key: /registry/{}/{ns}/{name}, ResourceVersion: 0, \
             AdditionalErrorMsg: Precondition failed: {detail}",
            res.qualified(),
            res.plural,
        ),
        res.details(name),
    )
}

/// The Success `Status` a delete answers with (the API server's
/// `finalizeDelete`: `kind` holds the resource, and no `code`).
pub(crate) fn deleted(res: Resource, name: &str, uid: &str) -> Value {
    let mut details = res.details(name);
    if let Some(d) = details.as_object_mut() {
        d.insert("uid".into(), uid.into());
    }
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    })
}

pub(crate) fn bad_request(message: &str) -> Response {
    failure(400, "BadRequest", message, Value::Null)
}

/// One field error of a 422 (apimachinery's `field.Error`).
#[derive(Debug, Clone)]
pub(crate) struct Cause {
    pub(crate) field: String,
    pub(crate) reason: &'static str,
    /// The error's body: `Invalid value: ...`, `Required value`, ...
    pub(crate) message: String,
}

impl Cause {
    /// `value` as Go's `%#v` shows it (`"x"`, `0x0`, `[]string{"x"}`).
    pub(crate) fn invalid(field: &str, value: &str, detail: &str) -> Cause {
        Cause {
            field: field.to_string(),
            reason: "FieldValueInvalid",
            message: format!("Invalid value: {value}: {detail}"),
        }
    }

    pub(crate) fn required(field: &str, detail: &str) -> Cause {
        let message = if detail.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {detail}")
        };
        Cause {
            field: field.to_string(),
            reason: "FieldValueRequired",
            message,
        }
    }

    pub(crate) fn forbidden(field: &str, detail: &str) -> Cause {
        Cause {
            field: field.to_string(),
            reason: "FieldValueForbidden",
            message: format!("Forbidden: {detail}"),
        }
    }

    /// More than `max` bytes in all (`field.TooLong`).
    pub(crate) fn too_long(field: &str, max: usize) -> Cause {
        Cause {
            field: field.to_string(),
            reason: "FieldValueTooLong",
            message: format!("Too long: may not be more than {max} bytes"),
        }
    }

    /// `value` as Go's `%#v` shows it; `supported` quoted.
    pub(crate) fn not_supported(field: &str, value: &str, supported: &[&str]) -> Cause {
        let supported: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        Cause {
            field: field.to_string(),
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: {value}: supported values: {}",
                supported.join(", ")
            ),
        }
    }
}

/// 422 `Invalid` for an object of `kind` in `group` (apimachinery's
/// `NewInvalid`): one cause is printed alone, several as a list.
pub(crate) fn invalid_object(group: &str, kind: &str, name: &str, causes: &[Cause]) -> Response {
    let qualified = if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    };
    let errors: Vec<String> = causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    let listed = match errors.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    let mut details = json!({
        "name": name,
        "group": group,
        "kind": kind,
        "causes": causes
            .iter()
            .map(|c| json!({ "reason": c.reason, "message": c.message, "field": c.field }))
            .collect::<Vec<_>>(),
    });
    if let Some(d) = details.as_object_mut() {
        if name.is_empty() {
            d.remove("name");
        }
        if group.is_empty() {
            d.remove("group");
        }
        if kind.is_empty() {
            d.remove("kind");
        }
    }
    failure(
        422,
        "Invalid",
        &format!("{qualified} \"{name}\" is invalid: {listed}"),
        details,
    )
}

/// 403 from an admission plugin (`NewForbidden`): `namespaces "default"
/// is forbidden: this namespace may not be deleted`.
pub(crate) fn forbidden_by_admission(res: Resource, name: &str, why: &str) -> Response {
    failure(
        403,
        "Forbidden",
        &format!("{} \"{name}\" is forbidden: {why}", res.qualified()),
        res.details(name),
    )
}

/// The 410 a watch from a resourceVersion older than the window gets
/// (apimachinery's `NewResourceExpired`), as the body of an `ERROR` event.
pub(crate) fn expired(requested: u64, oldest: u64) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("too old resource version: {requested} ({oldest})"),
        "reason": "Expired",
        "code": 410,
    })
}

/// 409 for a server-side apply that would change fields other managers
/// own (structured-merge-diff's conflict message).
pub(crate) fn apply_conflict(conflicts: &[(String, String)]) -> Response {
    let message = match conflicts {
        [(manager, field)] => {
            format!("Apply failed with 1 conflict: conflict with {manager}: {field}")
        }
        _ => {
            let mut managers: Vec<&String> = conflicts.iter().map(|(m, _)| m).collect();
            managers.sort();
            managers.dedup();
            let mut lines = Vec::new();
            for m in managers {
                lines.push(format!("conflicts with {m}:"));
                for (_, field) in conflicts.iter().filter(|(who, _)| who == m) {
                    lines.push(format!("- {field}"));
                }
            }
            format!(
                "Apply failed with {} conflicts: {}",
                conflicts.len(),
                lines.join("\n")
            )
        }
    };
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(manager, field)| {
            json!({
                "reason": "FieldManagerConflict",
                "message": format!("conflict with {manager}"),
                "field": field,
            })
        })
        .collect();
    failure(409, "Conflict", &message, json!({ "causes": causes }))
}

/// 422 for a JSON patch that does not apply (the API server's
/// `NewGenericServerResponse`: a fixed message, and kube-apiserver 1.37
/// sends the cause nowhere: `details: {}`).
pub(crate) fn patch_failed(cause: &str) -> Response {
    log::debug!("test-apiserver: a JSON patch does not apply: {cause}");
    failure(
        422,
        "Invalid",
        "the server rejected our request due to an error in our request",
        json!({}),
    )
}

pub(crate) fn unauthorized() -> Response {
    failure(401, "Unauthorized", "Unauthorized", Value::Null)
}

/// What a request was trying to do, for RBAC-style messages.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) verb: &'static str,
    pub(crate) resource: Resource,
    pub(crate) namespace: String,
    pub(crate) name: String,
}

pub(crate) fn forbidden(t: &Target) -> Response {
    let subject = if t.name.is_empty() {
        t.resource.qualified()
    } else {
        format!("{} \"{}\"", t.resource.qualified(), t.name)
    };
    let scope = if t.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{}\"", t.namespace)
    };
    failure(
        403,
        "Forbidden",
        &format!(
            "{subject} is forbidden: User \"{FORBIDDEN_USER}\" cannot {} resource \"{}\" \
             in API group \"{}\" {scope}",
            t.verb, t.resource.plural, t.resource.group
        ),
        t.resource.details(&t.name),
    )
}

pub(crate) fn path_not_found() -> Response {
    failure(
        404,
        "NotFound",
        "the server could not find the requested resource",
        json!({}),
    )
}

pub(crate) fn method_not_allowed() -> Response {
    failure(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        json!({}),
    )
}

pub(crate) fn too_large() -> Response {
    failure(
        413,
        "RequestEntityTooLarge",
        &format!(
            "Request entity too large: limit is {}",
            super::http::MAX_BODY
        ),
        json!({}),
    )
}

/// The answer of an injected `Fault::status(code)` for a request on `t`.
pub(crate) fn injected(code: u16, t: Option<&Target>) -> Response {
    let (res, name) = t.map_or((LEASES, ""), |t| (t.resource, t.name.as_str()));
    match code {
        401 => unauthorized(),
        403 => match t {
            Some(t) => forbidden(t),
            None => failure(403, "Forbidden", "forbidden", json!({})),
        },
        404 => not_found(res, name),
        409 => conflict(res, name),
        429 => {
            let mut r = failure(
                429,
                "TooManyRequests",
                "Too many requests, please try again later.",
                json!({ "retryAfterSeconds": 1 }),
            );
            r.headers.push(("Retry-After", "1".to_string()));
            r
        }
        500 => failure(
            500,
            "InternalError",
            "Internal error occurred: injected fault",
            json!({ "causes": [{ "message": "injected fault" }] }),
        ),
        503 => failure(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
            json!({}),
        ),
        400 => bad_request("injected fault"),
        410 => failure(410, "Expired", "injected fault", json!({})),
        504 => failure(504, "Timeout", "injected fault", json!({})),
        _ => failure(code, "", "injected fault", json!({})),
    }
}

/// The answer of an injected `Fault::retry_after(code, value)`: that of
/// `Fault::status(code)` with `Retry-After: value` verbatim, and
/// `details.retryAfterSeconds` only when `value` is one the real server
/// could send (a positive int32).
pub(crate) fn injected_retry_after(code: u16, t: Option<&Target>, value: &str) -> Response {
    let mut r = injected(code, t);
    r.headers
        .retain(|(n, _)| !n.eq_ignore_ascii_case("retry-after"));
    r.headers.push(("Retry-After", value.to_string()));
    // Re-encoding is simpler than threading a details override through
    // every Status constructor `injected` picks from.
    if let Ok(mut body) = serde_json::from_slice::<Value>(&r.body) {
        if let Some(details) = body.get_mut("details").and_then(Value::as_object_mut) {
            details.remove("retryAfterSeconds");
            if let Some(secs) = value.parse::<i32>().ok().filter(|s| *s > 0) {
                details.insert("retryAfterSeconds".into(), secs.into());
            }
        }
        r.body = body.to_string().into_bytes();
    }
    r
}

/// 403 for a path that names no resource.
pub(crate) fn forbidden_path(method: &str, path: &str) -> Response {
    failure(
        403,
        "Forbidden",
        &format!(
            "forbidden: User \"{FORBIDDEN_USER}\" cannot {} path \"{path}\"",
            method.to_ascii_lowercase()
        ),
        json!({}),
    )
}

/// 415 for a body that is neither JSON nor YAML.
pub(crate) fn unsupported_media_type() -> Response {
    failure(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: \
         application/json, application/yaml, application/vnd.kubernetes.protobuf",
        Value::Null,
    )
}

/// 415 for a `PATCH` whose patch type is not served, as kube-apiserver
/// words it (the status text, `details: {}`).
pub(crate) fn unsupported_patch_type() -> Response {
    failure(
        415,
        "UnsupportedMediaType",
        "415: Unsupported Media Type",
        json!({}),
    )
}
