//! The resources this server serves, what a request path addresses, and
//! what each resource is called in answers.

use super::discovery::Doc;
use super::openapi;
use super::schema::{self, Shape};
use super::selector::{EVENT_FIELDS, LEASE_FIELDS, NAMESPACE_FIELDS};
use super::status::{self, Resource};
use super::store::Collection;
use super::table;
use crate::lease::LEASE_API_VERSION;

/// A served resource, as clients see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    /// `coordination.k8s.io/v1` `leases`
    Leases,
    /// core/v1 `events`
    Events,
    /// `events.k8s.io/v1` `events`: the same objects as core/v1 Events,
    /// converted on the way in and out.
    EventsV1,
    /// core/v1 `namespaces` (cluster-scoped)
    Namespaces,
}

impl Api {
    pub(crate) fn collection(self) -> Collection {
        match self {
            Api::Leases => Collection::Leases,
            Api::Events | Api::EventsV1 => Collection::Events,
            Api::Namespaces => Collection::Namespaces,
        }
    }

    /// How Status messages name it.
    pub(crate) fn resource(self) -> Resource {
        match self {
            Api::Leases => status::LEASES,
            Api::Events => status::EVENTS,
            Api::EventsV1 => status::EVENTS_V1,
            Api::Namespaces => status::NAMESPACES,
        }
    }

    pub(crate) fn kind(self) -> &'static str {
        match self {
            Api::Leases => "Lease",
            Api::Events | Api::EventsV1 => "Event",
            Api::Namespaces => "Namespace",
        }
    }

    pub(crate) fn api_version(self) -> &'static str {
        match self {
            Api::Leases => LEASE_API_VERSION,
            Api::Events | Api::Namespaces => "v1",
            Api::EventsV1 => "events.k8s.io/v1",
        }
    }

    /// The API group (`""` for core).
    pub(crate) fn group(self) -> &'static str {
        self.resource().group
    }

    pub(crate) fn namespaced(self) -> bool {
        self != Api::Namespaces
    }

    pub(crate) fn shape(self) -> &'static Shape {
        match self {
            Api::Leases => &schema::LEASE,
            Api::Events => &schema::EVENT,
            Api::EventsV1 => &schema::EVENT_V1,
            Api::Namespaces => &schema::NAMESPACE,
        }
    }

    pub(crate) fn printer(self) -> table::Printer {
        match self {
            Api::Leases => table::LEASES,
            Api::Events | Api::EventsV1 => table::EVENTS,
            Api::Namespaces => table::NAMESPACES,
        }
    }

    /// The fields a field selector may name.
    pub(crate) fn selectable(self) -> &'static [&'static str] {
        match self {
            Api::Leases => LEASE_FIELDS,
            Api::Events | Api::EventsV1 => EVENT_FIELDS,
            Api::Namespaces => NAMESPACE_FIELDS,
        }
    }

    /// A `PUT` of a missing object creates it (the strategy's
    /// `AllowCreateOnUpdate`).
    pub(crate) fn create_on_update(self) -> bool {
        self != Api::Namespaces
    }

    /// A `PUT` without `metadata.resourceVersion` is taken (the strategy's
    /// `AllowUnconditionalUpdate`); Leases refuse it.
    pub(crate) fn unconditional_update(self) -> bool {
        self != Api::Leases
    }

    /// `DELETE` of the collection is served.
    pub(crate) fn delete_collection(self) -> bool {
        self != Api::Namespaces
    }
}

/// What a request addresses. An empty `ns` is every namespace (the API's
/// `NamespaceAll`), or no namespace for a cluster-scoped resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// One object: `.../namespaces/{ns}/leases/{name}`,
    /// `/api/v1/namespaces/{name}`, ...
    Object { api: Api, ns: String, name: String },
    /// A collection: `.../namespaces/{ns}/leases`, `.../leases`, ...
    Collection { api: Api, ns: String },
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
        let (api, rest): (Api, &[&str]) = match s.as_slice() {
            ["api", "v1", "namespaces"] => {
                return Route::Collection {
                    api: Api::Namespaces,
                    ns: String::new(),
                }
            }
            ["api", "v1", "namespaces", name] => {
                return Route::Object {
                    api: Api::Namespaces,
                    ns: String::new(),
                    name: name.to_string(),
                }
            }
            ["apis", "coordination.k8s.io", "v1", rest @ ..] => (Api::Leases, rest),
            ["apis", "events.k8s.io", "v1", rest @ ..] => (Api::EventsV1, rest),
            ["api", "v1", rest @ ..] => (Api::Events, rest),
            ["openapi", "v3"] => return Route::OpenApi,
            other if openapi::is_lease_doc(other) => return Route::OpenApiLeases,
            other => return Doc::at(other).map_or(Route::Unknown, Route::Discovery),
        };
        let plural = api.resource().plural;
        let ns = |n: &str| n.to_string();
        match rest {
            [p] if *p == plural => Route::Collection { api, ns: ns("") },
            ["namespaces", n, p] if *p == plural => Route::Collection { api, ns: ns(n) },
            ["namespaces", n, p, name] if *p == plural => Route::Object {
                api,
                ns: ns(n),
                name: name.to_string(),
            },
            [] => Doc::at(&s).map_or(Route::Unknown, Route::Discovery),
            _ => Route::Unknown,
        }
    }
}
