//! Just enough OpenAPI v3 for kubectl to validate on the server: `kubectl
//! create -f` and `kubectl replace -f` validate by default, and send
//! `fieldValidation=Strict` instead of validating themselves once
//! `/openapi/v3` shows that the Lease `PATCH` takes that parameter (the
//! check client-go's `QueryParamVerifierV3` makes). Without it they fall
//! back to `/openapi/v2` (protobuf), which this server does not serve, and
//! stop unless given `--validate=false`.
//!
//! The document describes the Lease paths and operations this server
//! serves, without schemas: `kubectl explain` finds nothing here.

use serde_json::{json, Value};

use super::status::LEASE_GROUP;

/// Changes whenever the document does, so clients caching it by hash
/// refetch it.
const HASH: &str = concat!("lease-elector-", env!("CARGO_PKG_VERSION"), "-1");

/// The index: one entry per group version described.
pub(crate) fn root() -> Value {
    let gv = format!("apis/{LEASE_GROUP}/v1");
    json!({
        "paths": {
            gv.clone(): { "serverRelativeURL": format!("/openapi/v3/{gv}?hash={HASH}") },
        },
    })
}

/// The path segments of the one group-version document.
pub(crate) fn is_lease_doc(segments: &[&str]) -> bool {
    matches!(segments, ["openapi", "v3", "apis", LEASE_GROUP, "v1"])
}

/// The `coordination.k8s.io/v1` document.
pub(crate) fn lease_doc() -> Value {
    let gvk = json!({ "group": LEASE_GROUP, "version": "v1", "kind": "Lease" });
    let param = |name: &str, place: &str| json!({ "name": name, "in": place, "schema": { "type": "string", "uniqueItems": true } });
    let op = |id: &str, action: &str, writes: bool, bodies: &[&str]| {
        let mut params = vec![];
        // No `dryRun`: kubectl then refuses `--dry-run=server` itself.
        if writes {
            params.push(param("fieldManager", "query"));
            params.push(param("fieldValidation", "query"));
        }
        let mut o = json!({
            "operationId": id,
            "tags": ["coordination_v1"],
            "parameters": params,
            "responses": { "200": { "description": "OK" } },
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk,
        });
        if !bodies.is_empty() {
            let content: serde_json::Map<String, Value> = bodies
                .iter()
                .map(|b| (b.to_string(), json!({ "schema": { "type": "object" } })))
                .collect();
            o["requestBody"] = json!({ "content": content, "required": true });
        }
        o
    };
    let ns = param("namespace", "path");
    let name = param("name", "path");
    let base = format!("/apis/{LEASE_GROUP}/v1");
    json!({
        "openapi": "3.0.0",
        "info": { "title": "Kubernetes", "version": super::discovery::release() },
        "paths": {
            format!("{base}/leases"): {
                "get": op("listCoordinationV1LeaseForAllNamespaces", "list", false, &[]),
            },
            format!("{base}/namespaces/{{namespace}}/leases"): {
                "parameters": [ns.clone()],
                "get": op("listCoordinationV1NamespacedLease", "list", false, &[]),
                "post": op("createCoordinationV1NamespacedLease", "post", true, &["*/*"]),
            },
            format!("{base}/namespaces/{{namespace}}/leases/{{name}}"): {
                "parameters": [name, ns],
                "get": op("readCoordinationV1NamespacedLease", "get", false, &[]),
                "put": op("replaceCoordinationV1NamespacedLease", "put", true, &["*/*"]),
                "patch": op(
                    "patchCoordinationV1NamespacedLease",
                    "patch",
                    true,
                    &["application/merge-patch+json"],
                ),
                "delete": op("deleteCoordinationV1NamespacedLease", "delete", false, &["*/*"]),
            },
        },
    })
}
