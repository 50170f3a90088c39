//! The fields of each served type, as the API server's Go structs know
//! them: a body is decoded into those structs, so an explicit `null` is
//! dropped and an unknown field is dropped (with a `Warning` header, the
//! default `fieldValidation=Warn`), or refused with `Strict`.

use serde_json::Value;

/// The shape of a field.
#[derive(Debug)]
pub(crate) enum Shape {
    /// A string, number, boolean or time (types are checked elsewhere).
    Scalar,
    /// A struct with these fields.
    Object(&'static [(&'static str, Shape)]),
    /// `map[string]string` (labels, annotations).
    StringMap,
    /// A list of these.
    List(&'static Shape),
    /// Anything (`managedFields[].fieldsV1`).
    Free,
}

use Shape::{Free, List, Object, Scalar, StringMap};

const OWNER_REFERENCE: Shape = Object(&[
    ("apiVersion", Scalar),
    ("kind", Scalar),
    ("name", Scalar),
    ("uid", Scalar),
    ("controller", Scalar),
    ("blockOwnerDeletion", Scalar),
]);

const MANAGED_FIELDS: Shape = Object(&[
    ("manager", Scalar),
    ("operation", Scalar),
    ("apiVersion", Scalar),
    ("time", Scalar),
    ("fieldsType", Scalar),
    ("fieldsV1", Free),
    ("subresource", Scalar),
]);

const OBJECT_META: Shape = Object(&[
    ("name", Scalar),
    ("generateName", Scalar),
    ("namespace", Scalar),
    ("selfLink", Scalar),
    ("uid", Scalar),
    ("resourceVersion", Scalar),
    ("generation", Scalar),
    ("creationTimestamp", Scalar),
    ("deletionTimestamp", Scalar),
    ("deletionGracePeriodSeconds", Scalar),
    ("labels", StringMap),
    ("annotations", StringMap),
    ("ownerReferences", List(&OWNER_REFERENCE)),
    ("finalizers", List(&Scalar)),
    ("managedFields", List(&MANAGED_FIELDS)),
]);

const OBJECT_REFERENCE: Shape = Object(&[
    ("kind", Scalar),
    ("namespace", Scalar),
    ("name", Scalar),
    ("uid", Scalar),
    ("apiVersion", Scalar),
    ("resourceVersion", Scalar),
    ("fieldPath", Scalar),
]);

const EVENT_SOURCE: Shape = Object(&[("component", Scalar), ("host", Scalar)]);
const EVENT_SERIES: Shape = Object(&[("count", Scalar), ("lastObservedTime", Scalar)]);

/// `coordination.k8s.io/v1` `Lease`.
pub(crate) static LEASE: Shape = Object(&[
    ("apiVersion", Scalar),
    ("kind", Scalar),
    ("metadata", OBJECT_META),
    (
        "spec",
        Object(&[
            ("holderIdentity", Scalar),
            ("leaseDurationSeconds", Scalar),
            ("acquireTime", Scalar),
            ("renewTime", Scalar),
            ("leaseTransitions", Scalar),
            ("strategy", Scalar),
            ("preferredHolder", Scalar),
        ]),
    ),
]);

/// core/v1 `Event`.
pub(crate) static EVENT: Shape = Object(&[
    ("apiVersion", Scalar),
    ("kind", Scalar),
    ("metadata", OBJECT_META),
    ("involvedObject", OBJECT_REFERENCE),
    ("reason", Scalar),
    ("message", Scalar),
    ("source", EVENT_SOURCE),
    ("firstTimestamp", Scalar),
    ("lastTimestamp", Scalar),
    ("count", Scalar),
    ("type", Scalar),
    ("eventTime", Scalar),
    ("series", EVENT_SERIES),
    ("action", Scalar),
    ("related", OBJECT_REFERENCE),
    ("reportingComponent", Scalar),
    ("reportingInstance", Scalar),
]);

/// `events.k8s.io/v1` `Event`.
pub(crate) static EVENT_V1: Shape = Object(&[
    ("apiVersion", Scalar),
    ("kind", Scalar),
    ("metadata", OBJECT_META),
    ("eventTime", Scalar),
    ("series", EVENT_SERIES),
    ("reportingController", Scalar),
    ("reportingInstance", Scalar),
    ("action", Scalar),
    ("reason", Scalar),
    ("regarding", OBJECT_REFERENCE),
    ("related", OBJECT_REFERENCE),
    ("note", Scalar),
    ("type", Scalar),
    ("deprecatedSource", EVENT_SOURCE),
    ("deprecatedFirstTimestamp", Scalar),
    ("deprecatedLastTimestamp", Scalar),
    ("deprecatedCount", Scalar),
]);

/// core/v1 `Namespace`.
pub(crate) static NAMESPACE: Shape = Object(&[
    ("apiVersion", Scalar),
    ("kind", Scalar),
    ("metadata", OBJECT_META),
    ("spec", Object(&[("finalizers", List(&Scalar))])),
    (
        "status",
        Object(&[
            ("phase", Scalar),
            (
                "conditions",
                List(&Object(&[
                    ("type", Scalar),
                    ("status", Scalar),
                    ("lastTransitionTime", Scalar),
                    ("reason", Scalar),
                    ("message", Scalar),
                ])),
            ),
        ]),
    ),
]);

/// Drop explicit nulls and unknown fields from `obj`, as decoding into the
/// Go structs and encoding them again does; returns the unknown fields.
pub(crate) fn prune(obj: &mut Value, shape: &Shape) -> Vec<String> {
    let mut unknown = Vec::new();
    walk(obj, shape, "", &mut unknown);
    unknown
}

fn walk(v: &mut Value, shape: &Shape, path: &str, unknown: &mut Vec<String>) {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    match (shape, v) {
        (Object(fields), Value::Object(map)) => {
            map.retain(|key, value| {
                if value.is_null() {
                    return false;
                }
                let known = fields.iter().any(|(f, _)| f == key);
                if !known {
                    unknown.push(join(key));
                }
                known
            });
            for (key, value) in map.iter_mut() {
                if let Some((_, s)) = fields.iter().find(|(f, _)| f == key) {
                    walk(value, s, &join(key), unknown);
                }
            }
        }
        (StringMap, Value::Object(map)) => {
            // A null value decodes to Go's zero value.
            for value in map.values_mut() {
                if value.is_null() {
                    *value = Value::String(String::new());
                }
            }
        }
        (List(item), Value::Array(items)) => {
            for (i, value) in items.iter_mut().enumerate() {
                walk(value, item, &format!("{path}[{i}]"), unknown);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nulls_and_unknown_fields_are_dropped_and_named() {
        let mut lease = json!({
            "metadata": {"name": "l", "labels": {"a": null}, "bogus": 1,
                "ownerReferences": [{"name": "o", "x": 2}]},
            "spec": {"holderIdentity": null, "foo": "bar", "leaseDurationSeconds": 15},
            "extra": {},
        });
        let unknown = prune(&mut lease, &LEASE);
        assert_eq!(
            unknown,
            [
                "extra",
                "metadata.bogus",
                "metadata.ownerReferences[0].x",
                "spec.foo",
            ]
        );
        assert_eq!(
            lease,
            json!({
                "metadata": {"name": "l", "labels": {"a": ""}, "ownerReferences": [{"name": "o"}]},
                "spec": {"leaseDurationSeconds": 15},
            })
        );
    }
}
