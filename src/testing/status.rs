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

impl Resource {
    /// `leases.coordination.k8s.io` or `events`.
    fn qualified(self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    fn details(self, name: &str) -> Value {
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

/// A Failure Status response.
pub(crate) fn failure(code: u16, reason: &str, message: &str, details: Value) -> Response {
    let body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code,
    });
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

pub(crate) fn conflict(res: Resource, name: &str) -> Response {
    failure(
        409,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; \
             please apply your changes to the latest version and try again",
            res.qualified()
        ),
        res.details(name),
    )
}

/// 409 for a delete whose preconditions (`uid`, `resourceVersion`) do not
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
    failure(400, "BadRequest", message, json!({}))
}

/// 422 for one invalid field, as the validation of `Lease` reports it.
pub(crate) fn invalid(name: &str, field: &str, value: &Value, detail: &str) -> Response {
    field_error(
        name,
        field,
        "FieldValueInvalid",
        format!("Invalid value: {value}: {detail}"),
    )
}

/// 422 for a missing required field.
pub(crate) fn required(name: &str, field: &str, detail: &str) -> Response {
    field_error(
        name,
        field,
        "FieldValueRequired",
        format!("Required value: {detail}"),
    )
}

fn field_error(name: &str, field: &str, reason: &str, cause: String) -> Response {
    failure(
        422,
        "Invalid",
        &format!("Lease.{LEASE_GROUP} \"{name}\" is invalid: {field}: {cause}"),
        json!({
            "name": name,
            "group": LEASE_GROUP,
            "kind": "Lease",
            "causes": [{ "reason": reason, "message": cause, "field": field }],
        }),
    )
}

pub(crate) fn unauthorized() -> Response {
    failure(401, "Unauthorized", "Unauthorized", json!({}))
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
pub(crate) fn unsupported_media_type(content_type: &str) -> Response {
    failure(
        415,
        "UnsupportedMediaType",
        &format!(
            "the body of the request was in an unknown format - accepted media types include: \
             application/json, application/yaml \
             (got {content_type:?})"
        ),
        json!({}),
    )
}

/// 415 for a `PATCH` whose patch type is not served.
pub(crate) fn unsupported_patch_type(content_type: &str) -> Response {
    failure(
        415,
        "UnsupportedMediaType",
        &format!(
            "the body of the request was in an unknown format - accepted media types include: \
             application/merge-patch+json, application/strategic-merge-patch+json \
             (got {content_type:?})"
        ),
        json!({}),
    )
}
