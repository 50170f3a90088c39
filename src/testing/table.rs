//! Server-side printing: the `meta.k8s.io` `Table` that `kubectl get` asks
//! for (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io,...`), with
//! the columns the real API server prints for Leases (`NAME HOLDER AGE`)
//! and Events (`LAST SEEN TYPE REASON OBJECT MESSAGE`, more with `-o
//! wide`). Without it kubectl falls back to `NAME AGE`.

use std::time::SystemTime;

use serde_json::{json, Value};

use super::http::Request;
use crate::lease::MicroTime;

/// The Table version to answer with, if the request's `Accept` prefers a
/// Table (`meta.k8s.io/v1` or `v1beta1`) to plain JSON; offers are taken
/// in the order sent, as the real server takes them.
pub(crate) fn wanted(req: &Request) -> Option<&'static str> {
    for offer in req.header("accept")?.split(',') {
        let params: Vec<&str> = offer.split(';').map(str::trim).collect();
        let has = |p: &str| params.contains(&p);
        if has("as=Table") && has("g=meta.k8s.io") {
            if has("v=v1") {
                return Some("meta.k8s.io/v1");
            }
            if has("v=v1beta1") {
                return Some("meta.k8s.io/v1beta1");
            }
        } else if !params.iter().any(|p| p.starts_with("as="))
            && matches!(params[0], "application/json" | "application/*" | "*/*")
        {
            return None;
        }
    }
    None
}

/// A printed resource: its columns and how an object fills them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Printer {
    columns: &'static [(&'static str, &'static str, u8)],
    cells: fn(&Value, SystemTime) -> Vec<Value>,
}

/// `NAME HOLDER AGE`, as `printLease` prints.
pub(crate) const LEASES: Printer = Printer {
    columns: &[("Name", "name", 0), ("Holder", "", 0), ("Age", "", 0)],
    cells: lease_cells,
};

/// `NAME STATUS AGE`, as `printNamespace` prints.
pub(crate) const NAMESPACES: Printer = Printer {
    columns: &[("Name", "name", 0), ("Status", "", 0), ("Age", "", 0)],
    cells: namespace_cells,
};

/// The columns of `printEvent`; those of priority 1 show with `-o wide`.
pub(crate) const EVENTS: Printer = Printer {
    columns: &[
        ("Last Seen", "", 0),
        ("Type", "", 0),
        ("Reason", "", 0),
        ("Object", "", 0),
        ("Subobject", "", 1),
        ("Source", "", 1),
        ("Message", "", 0),
        ("First Seen", "", 1),
        ("Count", "", 1),
        ("Name", "name", 1),
    ],
    cells: event_cells,
};

impl Printer {
    /// A Table of `objects` (the items of a list, or one object), as
    /// `apiVersion` (`meta.k8s.io/v1` or `v1beta1`); rows carry the
    /// objects' metadata, from which kubectl prints `NAMESPACE` with `-A`.
    pub(crate) fn table(
        &self,
        api_version: &str,
        resource_version: &str,
        objects: &[Value],
    ) -> Value {
        let now = SystemTime::now();
        let columns: Vec<Value> = self
            .columns
            .iter()
            .map(|(name, format, priority)| {
                json!({
                    "name": name,
                    "type": "string",
                    "format": format,
                    "description": "",
                    "priority": priority,
                })
            })
            .collect();
        let rows: Vec<Value> = objects
            .iter()
            .map(|o| {
                json!({
                    "cells": (self.cells)(o, now),
                    "object": {
                        "kind": "PartialObjectMetadata",
                        "apiVersion": api_version,
                        "metadata": o.get("metadata").cloned().unwrap_or_else(|| json!({})),
                    },
                })
            })
            .collect();
        json!({
            "kind": "Table",
            "apiVersion": api_version,
            "metadata": { "resourceVersion": resource_version },
            "columnDefinitions": columns,
            "rows": rows,
        })
    }
}

fn text(v: &Value, path: &[&str]) -> String {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// How long ago the timestamp at `path` was, as kubectl words it; `None`
/// when it is absent or unreadable.
fn since(v: &Value, path: &[&str], now: SystemTime) -> Option<String> {
    let t = text(v, path).parse::<MicroTime>().ok()?.to_system_time();
    Some(match now.duration_since(t) {
        Ok(d) => human_duration(d.as_secs()),
        // Up to a second ahead is clock skew, as the API server allows.
        Err(e) if e.duration().as_secs() < 2 => "0s".to_string(),
        Err(_) => "<invalid>".to_string(),
    })
}

fn lease_cells(lease: &Value, now: SystemTime) -> Vec<Value> {
    let age = since(lease, &["metadata", "creationTimestamp"], now);
    vec![
        text(lease, &["metadata", "name"]).into(),
        text(lease, &["spec", "holderIdentity"]).into(),
        age.unwrap_or_else(|| "<unknown>".into()).into(),
    ]
}

fn namespace_cells(ns: &Value, now: SystemTime) -> Vec<Value> {
    vec![
        text(ns, &["metadata", "name"]).into(),
        text(ns, &["status", "phase"]).into(),
        since(ns, &["metadata", "creationTimestamp"], now)
            .unwrap_or_else(|| "<unknown>".into())
            .into(),
    ]
}

fn event_cells(ev: &Value, now: SystemTime) -> Vec<Value> {
    let first = since(ev, &["firstTimestamp"], now)
        .or_else(|| since(ev, &["eventTime"], now))
        .unwrap_or_else(|| "<unknown>".into());
    let mut last = since(ev, &["lastTimestamp"], now).unwrap_or_else(|| first.clone());
    let mut count = ev.get("count").and_then(Value::as_i64).unwrap_or(0);
    if ev.get("series").is_some_and(Value::is_object) {
        last =
            since(ev, &["series", "lastObservedTime"], now).unwrap_or_else(|| "<unknown>".into());
        count = ev["series"]["count"].as_i64().unwrap_or(0);
    } else if count == 0 {
        count = 1;
    }
    let kind = text(ev, &["involvedObject", "kind"]).to_lowercase();
    let name = text(ev, &["involvedObject", "name"]);
    let object = if name.is_empty() {
        kind
    } else {
        format!("{kind}/{name}")
    };
    let or = |a: String, b: String| if a.is_empty() { b } else { a };
    let component = or(
        text(ev, &["source", "component"]),
        text(ev, &["reportingComponent"]),
    );
    let instance = or(
        text(ev, &["source", "host"]),
        text(ev, &["reportingInstance"]),
    );
    let source = if instance.is_empty() {
        component
    } else {
        format!("{component}, {instance}")
    };
    vec![
        last.into(),
        text(ev, &["type"]).into(),
        text(ev, &["reason"]).into(),
        object.into(),
        text(ev, &["involvedObject", "fieldPath"]).into(),
        source.into(),
        text(ev, &["message"]).trim().into(),
        first.into(),
        count.into(),
        text(ev, &["metadata", "name"]).into(),
    ]
}

/// apimachinery's `duration.HumanDuration`: two significant units at most,
/// fewer as the age grows.
fn human_duration(secs: u64) -> String {
    let (minutes, hours) = (secs / 60, secs / 3600);
    let days = hours / 24;
    match () {
        _ if secs < 120 => format!("{secs}s"),
        _ if minutes < 10 && secs % 60 == 0 => format!("{minutes}m"),
        _ if minutes < 10 => format!("{minutes}m{}s", secs % 60),
        _ if minutes < 180 => format!("{minutes}m"),
        _ if hours < 8 && minutes % 60 == 0 => format!("{hours}h"),
        _ if hours < 8 => format!("{hours}h{}m", minutes % 60),
        _ if hours < 48 => format!("{hours}h"),
        _ if hours < 192 && hours % 24 == 0 => format!("{days}d"),
        _ if hours < 192 => format!("{days}d{}h", hours % 24),
        _ if hours < 24 * 365 * 2 => format!("{days}d"),
        _ if hours < 24 * 365 * 8 && days % 365 == 0 => format!("{}y", days / 365),
        _ if hours < 24 * 365 * 8 => format!("{}y{}d", days / 365, days % 365),
        _ => format!("{}y", days / 365),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn accepting(accept: &str) -> Option<&'static str> {
        let raw = format!("GET / HTTP/1.1\r\nHost: h\r\nAccept: {accept}\r\n\r\n");
        match super::super::http::parse_raw(raw.as_bytes()) {
            super::super::http::Incoming::Request(req) => wanted(&req),
            other => panic!("not a request: {other:?}"),
        }
    }

    #[test]
    fn a_table_is_sent_only_when_preferred_to_plain_json() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,\
                       application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(accepting(kubectl), Some("meta.k8s.io/v1"));
        assert_eq!(
            accepting("application/json;as=Table;v=v1beta1;g=meta.k8s.io"),
            Some("meta.k8s.io/v1beta1")
        );
        assert_eq!(
            accepting("application/json, application/json;as=Table;v=v1;g=meta.k8s.io"),
            None
        );
        assert_eq!(accepting("application/json"), None);
    }

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        for (secs, want) in [
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60 * 7, "3h7m"),
            (47 * 3600, "47h"),
            (50 * 3600, "2d2h"),
            (10 * 86400, "10d"),
            (3 * 365 * 86400 + 86400, "3y1d"),
            (9 * 365 * 86400, "9y"),
        ] {
            assert_eq!(human_duration(secs), want, "{secs}s");
        }
    }

    #[test]
    fn a_lease_row_names_its_holder() {
        let created = MicroTime::from_system_time(SystemTime::now() - Duration::from_secs(65));
        let lease = json!({
            "metadata": {"name": "l", "namespace": "ns", "creationTimestamp": created.to_string()},
            "spec": {"holderIdentity": "pod-a"},
        });
        let t = LEASES.table("meta.k8s.io/v1", "7", &[lease]);
        assert_eq!(t["rows"][0]["cells"], json!(["l", "pod-a", "65s"]));
        assert_eq!(t["rows"][0]["object"]["metadata"]["namespace"], "ns");
        assert_eq!(t["columnDefinitions"][1]["name"], "Holder");
    }
}
