//! Namespaces as objects: the four a cluster starts with, created, read,
//! listed and deleted like kube-apiserver's (its `NamespaceLifecycle`
//! admission refuses objects in a namespace that does not exist, and the
//! deletion of the system namespaces).
//!
//! Deleting a namespace here is immediate: its Leases and Events are
//! deleted with it, where a cluster's namespace controller does that in
//! the background while the namespace shows `Terminating`.

use serde_json::{json, Value};

use super::http::Response;
use super::status::{self, Cause, NAMESPACES};
use super::store::now_rfc3339;

/// The namespaces kube-apiserver does not let anyone delete.
const IMMORTAL: &[&str] = &["default", "kube-system", "kube-public"];

/// A new Namespace object named `name`, as the API server completes one.
pub(crate) fn new(name: &str) -> Value {
    complete(json!({ "metadata": { "name": name } }))
}

/// What the API server adds to a created Namespace: its name label, the
/// `kubernetes` finalizer and the `Active` phase.
pub(crate) fn complete(mut ns: Value) -> Value {
    let name = ns["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    ns["kind"] = "Namespace".into();
    ns["apiVersion"] = "v1".into();
    ns["metadata"]["labels"]["kubernetes.io/metadata.name"] = name.into();
    ns["spec"] = json!({ "finalizers": ["kubernetes"] });
    ns["status"] = json!({ "phase": "Active" });
    ns
}

/// A namespace name must be a DNS-1123 label.
pub(crate) fn check_name(name: &str) -> Option<Response> {
    if crate::names::check_namespace(name).is_ok() {
        return None;
    }
    Some(status::invalid_object(
        "",
        "Namespace",
        name,
        &[Cause::invalid(
            "metadata.name",
            &format!("{name:?}"),
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', \
             and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', \
             regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
        )],
    ))
}

/// The 403 for deleting `default`, `kube-system` or `kube-public`.
pub(crate) fn refuse_delete(name: &str) -> Option<Response> {
    IMMORTAL.contains(&name).then(|| {
        status::forbidden_by_admission(NAMESPACES, name, "this namespace may not be deleted")
    })
}

/// The 404 for an object created in a namespace that does not exist.
pub(crate) fn missing(ns: &str) -> Response {
    status::not_found(NAMESPACES, ns)
}

/// A namespace as a delete answers it: terminating.
pub(crate) fn terminating(mut ns: Value) -> Value {
    ns["metadata"]["deletionTimestamp"] = now_rfc3339().into();
    ns["status"]["phase"] = "Terminating".into();
    ns
}
