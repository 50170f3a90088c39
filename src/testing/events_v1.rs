//! `events.k8s.io/v1` Events: the same stored objects as core/v1 Events,
//! under other field names (client-go's `tools/events` recorder writes
//! them), converted on the way in and out, and the stricter validation
//! the API server gives Events created through this group.

use serde_json::{Map, Value};

use super::status::Cause;

/// events.k8s.io/v1 name and core/v1 name of each renamed field.
const RENAMED: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

fn rename(obj: Value, from_v1: bool, api_version: &str) -> Value {
    let Value::Object(map) = obj else {
        return obj;
    };
    let mut out = Map::new();
    for (key, value) in map {
        let renamed = RENAMED
            .iter()
            .find(|(v1, core)| if from_v1 { v1 == &key } else { core == &key })
            .map(|(v1, core)| if from_v1 { *core } else { *v1 });
        out.insert(renamed.map_or(key, str::to_string), value);
    }
    out.insert("apiVersion".into(), api_version.into());
    out.insert("kind".into(), "Event".into());
    Value::Object(out)
}

/// An events.k8s.io/v1 Event as the core/v1 Event it is stored as.
pub(crate) fn to_core(obj: Value) -> Value {
    rename(obj, true, "v1")
}

/// A stored (core/v1) Event as events.k8s.io/v1 shows it.
pub(crate) fn from_core(obj: Value) -> Value {
    rename(obj, false, "events.k8s.io/v1")
}

/// The checks of `ValidateEventCreate` for the events.k8s.io/v1 API, on
/// the v1 object, outside `metadata` (see `meta`): every failed field.
pub(crate) fn validate_create(ev: &Value) -> Vec<Cause> {
    let text = |f: &str| ev.get(f).and_then(Value::as_str).unwrap_or("");
    let mut causes = Vec::new();
    if ev.get("eventTime").is_none_or(Value::is_null) {
        causes.push(Cause::required("eventTime", ""));
    }
    for field in [
        "reportingController",
        "reportingInstance",
        "action",
        "reason",
    ] {
        if text(field).is_empty() {
            causes.push(Cause::required(field, ""));
        }
        // The controller is a qualified name, empty or not (kube-apiserver
        // 1.37 reports both for a missing one).
        if field == "reportingController" {
            let value = text(field);
            for why in super::meta::qualified_name(value) {
                causes.push(Cause::invalid(field, &format!("{value:?}"), &why));
            }
        }
        if text(field).len() > 128 {
            causes.push(Cause::invalid(
                field,
                "\"\"",
                "can have at most 128 characters",
            ));
        }
    }
    if text("note").len() > 1024 {
        causes.push(Cause::invalid(
            "note",
            "\"\"",
            "can have at most 1024 characters",
        ));
    }
    let kind = text("type");
    if kind != "Normal" && kind != "Warning" {
        causes.push(Cause::invalid(
            "type",
            "\"\"",
            &format!("has invalid value: {kind}"),
        ));
    }
    for field in [
        "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp",
        "deprecatedCount",
        "deprecatedSource",
    ] {
        let set = match ev.get(field) {
            None | Some(Value::Null) => false,
            Some(Value::Number(n)) => n.as_i64() != Some(0),
            Some(Value::Object(m)) => m
                .values()
                .any(|v| v.as_str().is_some_and(|s| !s.is_empty())),
            Some(_) => true,
        };
        if set {
            causes.push(Cause::invalid(field, "\"\"", "needs to be unset"));
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::status;
    use serde_json::json;

    #[test]
    fn renamed_fields_round_trip() {
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "regarding": {"name": "l"}, "note": "hi", "reportingController": "c", "reason": "R"});
        let core = to_core(v1.clone());
        assert_eq!(core["involvedObject"]["name"], "l");
        assert_eq!(core["message"], "hi");
        assert_eq!(core["reportingComponent"], "c");
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(from_core(core), v1);
    }

    #[test]
    fn creation_needs_the_v1_fields() {
        let causes = validate_create(&json!({"metadata": {"name": "e"}, "type": "Normal"}));
        let resp = status::invalid_object("", "Event", "e", &causes);
        let body: Value = serde_json::from_slice(&resp.body).unwrap();
        assert_eq!(resp.status, 422);
        let message = body["message"].as_str().unwrap();
        assert!(
            message.starts_with(
                "Event \"e\" is invalid: [eventTime: Required value, \
                 reportingController: Required value, reportingController: Invalid value: \
                 \"\": name part must be non-empty, reportingController: Invalid value: \"\": \
                 name part must consist of"
            ),
            "{message}"
        );
        assert!(
            message.ends_with(
                "reportingInstance: Required value, action: Required value, reason: Required value]"
            ),
            "{message}"
        );
    }
}
