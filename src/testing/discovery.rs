//! The discovery documents clients read before anything else: `/version`,
//! `/api`, `/api/v1`, `/apis`, `/apis/{group}` and `/apis/{group}/v1` for
//! `coordination.k8s.io` and `events.k8s.io`, listing only what this
//! server serves.
//!
//! Legacy discovery only: kubectl asks for the aggregated
//! `APIGroupDiscoveryList` first, and reads these plain JSON documents
//! (told apart by their `Content-Type`) as it does from API servers older
//! than 1.26.

use serde_json::{json, Value};

use super::status::LEASE_GROUP;

/// The version `/version` reports: the minor of the kubectl the crate's
/// tests run where the machine has one (1.32.4 on the project's), so that
/// `kubectl version` warns of no skew. A dispatching kubectl (the Google
/// Cloud SDK's, which that one is) also picks the binary it runs by this
/// version: 1.32 runs its own. `tests/reported_version.rs` holds the crate
/// page and the `testing` page to it.
const MAJOR: &str = "1";
const MINOR: &str = "32";

/// The release the server says it is, `v1.32.0`: `/version`'s
/// `gitVersion` before its build suffix, and the OpenAPI document's
/// version.
pub(crate) fn release() -> String {
    format!("v{MAJOR}.{MINOR}.0")
}

/// The API groups served besides core, each in version `v1`.
const GROUPS: &[&str] = &[LEASE_GROUP, "events.k8s.io"];

/// The verbs of every served resource (`namespaces` has no
/// `deletecollection`).
const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// A discovery document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Doc {
    /// `/version`
    Version,
    /// `/api`
    CoreVersions,
    /// `/api/v1`
    CoreResources,
    /// `/apis`
    Groups,
    /// `/apis/{group}`
    Group(&'static str),
    /// `/apis/{group}/v1`
    GroupResources(&'static str),
}

fn group_doc(name: &str) -> Value {
    let gv = json!({ "groupVersion": format!("{name}/v1"), "version": "v1" });
    json!({ "name": name, "versions": [gv], "preferredVersion": gv })
}

fn resource(name: &str, singular: &str, kind: &str, namespaced: bool, short: &[&str]) -> Value {
    let verbs: Vec<&str> = VERBS
        .iter()
        .copied()
        .filter(|v| namespaced || *v != "deletecollection")
        .collect();
    let mut r = json!({
        "name": name,
        "singularName": singular,
        "namespaced": namespaced,
        "kind": kind,
        "verbs": verbs,
    });
    if !short.is_empty() {
        r["shortNames"] = json!(short);
    }
    r
}

impl Doc {
    /// The document at these path segments, if any.
    pub(crate) fn at(segments: &[&str]) -> Option<Doc> {
        let group = |g: &str| GROUPS.iter().copied().find(|k| *k == g);
        Some(match segments {
            ["version"] => Doc::Version,
            ["api"] => Doc::CoreVersions,
            ["api", "v1"] => Doc::CoreResources,
            ["apis"] => Doc::Groups,
            ["apis", g] => Doc::Group(group(g)?),
            ["apis", g, "v1"] => Doc::GroupResources(group(g)?),
            _ => return None,
        })
    }

    /// The document's body, as the real API server words it.
    pub(crate) fn body(self) -> Value {
        match self {
            Doc::Version => json!({
                "major": MAJOR,
                "minor": MINOR,
                "gitVersion": format!("{}+lease-elector-testing", release()),
                "gitCommit": "",
                "gitTreeState": "clean",
                "buildDate": "1970-01-01T00:00:00Z",
                "goVersion": "rust",
                "compiler": "rustc",
                "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
            }),
            Doc::CoreVersions => json!({ "kind": "APIVersions", "versions": ["v1"] }),
            Doc::CoreResources => json!({
                "kind": "APIResourceList",
                "groupVersion": "v1",
                "resources": [
                    resource("events", "event", "Event", true, &["ev"]),
                    resource("namespaces", "namespace", "Namespace", false, &["ns"]),
                ],
            }),
            Doc::Groups => json!({
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": GROUPS.iter().map(|g| group_doc(g)).collect::<Vec<_>>(),
            }),
            Doc::Group(name) => {
                let mut g = group_doc(name);
                g["kind"] = "APIGroup".into();
                g["apiVersion"] = "v1".into();
                g
            }
            Doc::GroupResources(name) => {
                let r = if name == LEASE_GROUP {
                    resource("leases", "lease", "Lease", true, &[])
                } else {
                    resource("events", "event", "Event", true, &["ev"])
                };
                json!({
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": format!("{name}/v1"),
                    "resources": [r],
                })
            }
        }
    }
}
