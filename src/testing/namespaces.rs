//! Namespaces as objects: the four a cluster starts with, created, read,
//! listed and deleted like kube-apiserver's (its `NamespaceLifecycle`
//! admission refuses objects in a namespace that does not exist, and the
//! deletion of the system namespaces).
//!
//! Deleting a namespace here is immediate: its Leases and Events are
//! deleted with it, finalizers or not, where a cluster's namespace
//! controller deletes them in the background while the namespace shows
//! `Terminating` (until their finalizers are gone). Its name is checked
//! with every object's (see `meta`).

use serde_json::{json, Value};

use super::http::Response;
use super::status::{self, NAMESPACES};
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
