//! Server-side apply (`PATCH` with `application/apply-patch+yaml`), the
//! subset this server models: `fieldManager` is required; a missing object
//! is created from the configuration; otherwise the applied fields are
//! merged into it, fields the manager applied before and no longer applies
//! are removed (unless another manager owns them), and changing a field
//! another manager owns is a 409 conflict unless `force=true`. The
//! configuration's `metadata.resourceVersion` and `uid` are preconditions,
//! as in kube-apiserver: a stale version is a 409, so apply can be a
//! compare-and-swap.
//!
//! Not modelled, and refused with a 400 that says so: lists in the
//! configuration (kube-apiserver merges `ownerReferences` by `uid`,
//! `finalizers` as a set) and apply through `events.k8s.io/v1`. Ownership
//! is kept but not shown in `metadata.managedFields`.

use serde_json::Value;

use super::decode::{self, Options, Validation};
use super::http::{Request, Response};
use super::owners::{self, Owners};
use super::resource::Api;
use super::status::{self, Cause};
use super::yaml_body;

/// The configuration an apply request sends, checked, or the answer that
/// refuses it.
pub(crate) struct Config {
    pub(crate) object: Value,
    pub(crate) warnings: Vec<String>,
}

/// Read and check the applied configuration for `api` object `name`.
pub(crate) fn config(
    api: Api,
    name: &str,
    req: &Request,
    opts: &Options,
) -> Result<Config, Response> {
    if !opts.manager_given {
        return Err(status::invalid_object(
            "meta.k8s.io",
            "PatchOptions",
            "",
            &[Cause::required(
                "fieldManager",
                "is required for apply patch",
            )],
        ));
    }
    if api == Api::EventsV1 {
        return Err(status::bad_request(
            "server-side apply through events.k8s.io/v1 is not supported by this test server",
        ));
    }
    // JSON is YAML; the crate's YAML reader covers the block style.
    let object: Value = match serde_json::from_slice(&req.body) {
        Ok(v) => v,
        Err(_) => {
            let json = yaml_body::to_json(&req.body)?;
            serde_json::from_slice(&json)
                .map_err(|e| status::bad_request(&format!("error decoding YAML: {e}")))?
        }
    };
    if !object.is_object() {
        return Err(status::bad_request(
            "error decoding YAML: the configuration is not an object",
        ));
    }
    let text = |f: &str| object.get(f).and_then(Value::as_str).unwrap_or("");
    if text("apiVersion") != api.api_version() {
        return Err(status::bad_request(&format!(
            "Incorrect version specified in apply patch. Specified patch version: {}, expected: {}",
            text("apiVersion"),
            api.api_version()
        )));
    }
    if text("kind") != api.kind() {
        return Err(status::bad_request(&format!(
            "Incorrect kind specified in apply patch. Specified patch kind: {}, expected: {}",
            text("kind"),
            api.kind()
        )));
    }
    let body_name = object["metadata"]["name"].as_str().unwrap_or_default();
    if body_name != name {
        return Err(status::bad_request(&format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    if let Some(list) = owners::fields(&object)
        .iter()
        .find(|f| owners::get(&object, f).is_some_and(Value::is_array))
    {
        return Err(status::bad_request(&format!(
            "server-side apply of a list ({}) is not supported by this test server",
            owners::show(list)
        )));
    }
    let mut object = object;
    let unknown = super::schema::prune(&mut object, api.shape());
    let named: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    let warnings = match opts.validation {
        Validation::Strict if !named.is_empty() => {
            return Err(decode::cannot_handle(
                api.kind(),
                &format!("strict decoding error: {}", named.join(", ")),
            ))
        }
        Validation::Warn => named,
        _ => Vec::new(),
    };
    Ok(Config { object, warnings })
}

/// The `metadata.resourceVersion` and `uid` a configuration names (when
/// not empty): nobody owns them, but the update compares them with the
/// stored object's.
#[derive(Debug, Default)]
pub(crate) struct Preconditions {
    pub(crate) resource_version: Option<String>,
    pub(crate) uid: Option<String>,
}

/// The preconditions of `config`, or the 400 for one that is not a string
/// (the typed conversion kube-apiserver makes refuses it).
pub(crate) fn preconditions(config: &Value) -> Result<Preconditions, Response> {
    let field = |f: &str| match &config["metadata"][f] {
        Value::Null => Ok(None),
        Value::String(s) if s.is_empty() => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        other => Err(status::bad_request(&format!(
            "failed to create typed patch object: .metadata.{f}: expected string, got {other}"
        ))),
    };
    Ok(Preconditions {
        resource_version: field("resourceVersion")?,
        uid: field("uid")?,
    })
}

/// The conflicts of applying `config` by `manager` over `live`, as the 409
/// kube-apiserver answers; none when forced.
pub(crate) fn check(
    owners: &Owners,
    manager: &str,
    config: &Value,
    live: &Value,
    force: bool,
) -> Option<Response> {
    if force {
        return None;
    }
    let conflicts: Vec<(String, String)> = owners
        .conflicts(manager, config, live)
        .into_iter()
        .map(|c| (c.manager, c.field))
        .collect();
    (!conflicts.is_empty()).then(|| status::apply_conflict(&conflicts))
}
