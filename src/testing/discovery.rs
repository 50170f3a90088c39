//! The discovery documents kubectl reads before anything else: `/version`,
//! `/api`, `/api/v1`, `/apis`, `/apis/coordination.k8s.io` and
//! `/apis/coordination.k8s.io/v1`, listing only what this server serves.
//!
//! Legacy discovery only: kubectl asks for the aggregated
//! `APIGroupDiscoveryList` first, and reads these plain JSON documents
//! (told apart by their `Content-Type`) as it does from API servers older
//! than 1.26.

use serde_json::{json, Value};

use super::status::LEASE_GROUP;

/// The version `/version` reports: a current minor, so kubectl does not
/// warn about version skew.
const MAJOR: &str = "1";
const MINOR: &str = "32";

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
    /// `/apis/coordination.k8s.io`
    LeaseGroup,
    /// `/apis/coordination.k8s.io/v1`
    LeaseResources,
}

impl Doc {
    /// The document at these path segments, if any.
    pub(crate) fn at(segments: &[&str]) -> Option<Doc> {
        Some(match segments {
            ["version"] => Doc::Version,
            ["api"] => Doc::CoreVersions,
            ["api", "v1"] => Doc::CoreResources,
            ["apis"] => Doc::Groups,
            ["apis", LEASE_GROUP] => Doc::LeaseGroup,
            ["apis", LEASE_GROUP, "v1"] => Doc::LeaseResources,
            _ => return None,
        })
    }

    /// The document's body, as the real API server words it.
    pub(crate) fn body(self) -> Value {
        let lease_gv = json!({ "groupVersion": format!("{LEASE_GROUP}/v1"), "version": "v1" });
        let lease_group = json!({
            "name": LEASE_GROUP,
            "versions": [lease_gv],
            "preferredVersion": lease_gv,
        });
        match self {
            Doc::Version => json!({
                "major": MAJOR,
                "minor": MINOR,
                "gitVersion": format!("v{MAJOR}.{MINOR}.0+lease-elector-testing"),
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
                "resources": [{
                    "name": "events",
                    "singularName": "event",
                    "namespaced": true,
                    "kind": "Event",
                    "verbs": ["create", "get", "list"],
                    "shortNames": ["ev"],
                }],
            }),
            Doc::Groups => json!({
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [lease_group],
            }),
            Doc::LeaseGroup => {
                let mut g = lease_group;
                if let Some(m) = g.as_object_mut() {
                    m.insert("kind".into(), "APIGroup".into());
                    m.insert("apiVersion".into(), "v1".into());
                }
                g
            }
            Doc::LeaseResources => json!({
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": format!("{LEASE_GROUP}/v1"),
                "resources": [{
                    "name": "leases",
                    "singularName": "lease",
                    "namespaced": true,
                    "kind": "Lease",
                    "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                }],
            }),
        }
    }
}
