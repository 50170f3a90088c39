//! Stored objects, the global resourceVersion counter, recorded Events and
//! the change log watches read from.

use std::collections::{BTreeMap, VecDeque};
use std::time::SystemTime;

use serde_json::{Map, Value};

/// How many changes the watch log keeps; a watcher further behind than this
/// misses the oldest ones (it still sees the latest state afterwards).
const CHANGE_LOG_CAP: usize = 1024;

/// A watch event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change to a Lease, as a watch reports it.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub(crate) rv: u64,
    pub(crate) kind: EventType,
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) object: Value,
    /// The object before the change (none for a creation): a watch with a
    /// selector turns a change that makes an object stop or start matching
    /// into `DELETED` or `ADDED`, as kube-apiserver's watch cache does.
    pub(crate) previous: Option<Value>,
}

#[derive(Debug, Default)]
pub(crate) struct Store {
    rv: u64,
    leases: BTreeMap<(String, String), Value>,
    events: Vec<Value>,
    changes: VecDeque<Change>,
}

fn meta_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    let o = obj.as_object_mut()?;
    o.entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
}

/// `metadata.<field>` as a string.
pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// Five random characters, as `generateName` appends.
pub(crate) fn random_suffix() -> String {
    crate::random::uuid_v4()
        .simple()
        .to_string()
        .chars()
        .take(5)
        .collect()
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

impl Store {
    /// The current (last written) resourceVersion.
    pub(crate) fn rv(&self) -> u64 {
        self.rv
    }

    fn bump(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    pub(crate) fn get(&self, ns: &str, name: &str) -> Option<&Value> {
        self.leases.get(&(ns.to_string(), name.to_string()))
    }

    /// The Leases of `ns` (of every namespace when `ns` is empty), ordered
    /// by namespace and name.
    pub(crate) fn list(&self, ns: &str) -> Vec<Value> {
        self.leases
            .iter()
            .filter(|((n, _), _)| ns.is_empty() || n == ns)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Store `obj` as `ns/name`, stamping the server-owned metadata: a new
    /// resourceVersion, the namespace, and (kept from the stored object when
    /// there is one) uid and creationTimestamp. Returns the stored object.
    pub(crate) fn write(&mut self, ns: &str, name: &str, mut obj: Value) -> Value {
        let rv = self.bump();
        let key = (ns.to_string(), name.to_string());
        let old = self.leases.get(&key);
        let previous = old.cloned();
        let old_meta = |f: &str| old.and_then(|o| meta_str(o, f)).map(str::to_string);
        let (uid, created) = (old_meta("uid"), old_meta("creationTimestamp"));
        let kind = if old.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        if let Some(m) = meta_mut(&mut obj) {
            m.insert("name".into(), name.into());
            m.insert("namespace".into(), ns.into());
            m.insert("resourceVersion".into(), rv.to_string().into());
            let uid = uid
                .or_else(|| m.get("uid").and_then(Value::as_str).map(str::to_string))
                .unwrap_or_else(|| crate::random::uuid_v4().to_string());
            m.insert("uid".into(), uid.into());
            let created = created
                .or_else(|| {
                    m.get("creationTimestamp")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                })
                .unwrap_or_else(now_rfc3339);
            m.insert("creationTimestamp".into(), created.into());
        }
        self.leases.insert(key, obj.clone());
        self.record_change(rv, kind, ns, name, obj.clone(), previous);
        obj
    }

    /// Remove `ns/name`; true if it existed.
    pub(crate) fn delete(&mut self, ns: &str, name: &str) -> bool {
        let Some(mut obj) = self.leases.remove(&(ns.to_string(), name.to_string())) else {
            return false;
        };
        let rv = self.bump();
        let previous = obj.clone();
        // As in Kubernetes, the DELETED event carries the deletion's version.
        if let Some(m) = meta_mut(&mut obj) {
            m.insert("resourceVersion".into(), rv.to_string().into());
        }
        self.record_change(rv, EventType::Deleted, ns, name, obj, Some(previous));
        true
    }

    fn record_change(
        &mut self,
        rv: u64,
        kind: EventType,
        ns: &str,
        name: &str,
        object: Value,
        previous: Option<Value>,
    ) {
        if self.changes.len() == CHANGE_LOG_CAP {
            self.changes.pop_front();
        }
        self.changes.push_back(Change {
            rv,
            kind,
            namespace: ns.to_string(),
            name: name.to_string(),
            object,
            previous,
        });
    }

    /// Changes to `ns/name` (`ns` empty: in every namespace) after
    /// resourceVersion `after`.
    pub(crate) fn changes_since(&self, after: u64, ns: &str, name: Option<&str>) -> Vec<Change> {
        self.changes
            .iter()
            .filter(|c| {
                c.rv > after
                    && (ns.is_empty() || c.namespace == ns)
                    && name.is_none_or(|n| c.name == n)
            })
            .cloned()
            .collect()
    }

    /// Record a core/v1 Event, stamping metadata like a create; a missing
    /// name is generated from `generateName` as the API server does.
    pub(crate) fn add_event(&mut self, ns: &str, mut obj: Value) -> Value {
        let rv = self.bump();
        if let Some(m) = meta_mut(&mut obj) {
            if m.get("name")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                let prefix = m
                    .get("generateName")
                    .and_then(Value::as_str)
                    .unwrap_or("event-")
                    .to_string();
                m.insert("name".into(), format!("{prefix}{}", random_suffix()).into());
            }
            m.insert("namespace".into(), ns.into());
            m.insert("resourceVersion".into(), rv.to_string().into());
            m.insert("uid".into(), crate::random::uuid_v4().to_string().into());
            m.insert("creationTimestamp".into(), now_rfc3339().into());
        }
        self.events.push(obj.clone());
        obj
    }

    pub(crate) fn events(&self) -> Vec<Value> {
        self.events.clone()
    }

    /// The Events of `ns` (of every namespace when `ns` is empty), oldest
    /// first.
    pub(crate) fn events_in(&self, ns: &str) -> impl Iterator<Item = &Value> + '_ {
        let ns = ns.to_string();
        self.events
            .iter()
            .filter(move |e| ns.is_empty() || meta_str(e, "namespace") == Some(ns.as_str()))
    }

    /// The Event `ns/name`.
    pub(crate) fn event(&self, ns: &str, name: &str) -> Option<&Value> {
        self.events_in(ns)
            .find(|e| meta_str(e, "name") == Some(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn writes_bump_one_counter_and_keep_identity() {
        let mut s = Store::default();
        let a = s.write("ns", "l", json!({"kind": "Lease", "x": {"y": 1}}));
        assert_eq!(meta_str(&a, "resourceVersion"), Some("1"));
        s.add_event("ns", json!({"metadata": {"generateName": "l."}}));
        let b = s.write("ns", "l", json!({"kind": "Lease"}));
        assert_eq!(meta_str(&b, "resourceVersion"), Some("3"));
        assert_eq!(meta_str(&a, "uid"), meta_str(&b, "uid"));
        assert!(s.delete("ns", "l"));
        assert_eq!(s.rv(), 4);
        let kinds: Vec<_> = s
            .changes_since(0, "ns", Some("l"))
            .iter()
            .map(|c| c.kind)
            .collect();
        assert_eq!(
            kinds,
            [EventType::Added, EventType::Modified, EventType::Deleted]
        );
    }
}
