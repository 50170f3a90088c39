//! Stored objects (Leases, Events, Namespaces), the one resourceVersion
//! counter they share, and each collection's window of past changes that
//! watches replay from.

use std::collections::{BTreeMap, VecDeque};
use std::time::SystemTime;

use serde_json::{Map, Value};

use super::owners::Owners;

/// How many changes of each collection the watch window keeps: a watch
/// that resumes from an older resourceVersion gets 410 `Expired`.
pub(crate) const WATCH_WINDOW: usize = 1000;

/// The namespaces a new server has, as a cluster has them.
pub(crate) const INITIAL_NAMESPACES: &[&str] =
    &["default", "kube-node-lease", "kube-public", "kube-system"];

/// What a stored object is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Collection {
    Leases,
    /// core/v1 Events; `events.k8s.io/v1` reads and writes the same ones.
    Events,
    /// Cluster-scoped: stored under the namespace `""`.
    Namespaces,
}

impl Collection {
    fn index(self) -> usize {
        match self {
            Collection::Leases => 0,
            Collection::Events => 1,
            Collection::Namespaces => 2,
        }
    }
}

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

/// One change to an object, as a watch reports it.
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

/// A resourceVersion older than a collection's watch window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expired {
    /// The oldest version a watch can still resume from.
    pub(crate) oldest: u64,
}

/// A stored object, with what only the server keeps about it.
#[derive(Debug, Clone)]
struct Entry {
    object: Value,
    /// The version it was created at: [`Store::created_order`] sorts by it.
    created: u64,
    /// Who set which fields (server-side apply).
    owners: Owners,
}

type Key = (Collection, String, String);

#[derive(Debug)]
pub(crate) struct Store {
    rv: u64,
    objects: BTreeMap<Key, Entry>,
    /// Per collection (see [`Collection::index`]): the last changes.
    changes: [VecDeque<Change>; 3],
    /// Per collection: the version of the newest change dropped from the
    /// window (0: none dropped).
    dropped: [u64; 3],
}

impl Default for Store {
    fn default() -> Self {
        let mut s = Store {
            rv: 0,
            objects: BTreeMap::new(),
            changes: Default::default(),
            dropped: [0; 3],
        };
        for ns in INITIAL_NAMESPACES {
            s.write(Collection::Namespaces, "", ns, super::namespaces::new(ns));
        }
        s
    }
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

pub(crate) fn now_rfc3339() -> String {
    crate::calendar::rfc3339(SystemTime::now(), crate::calendar::Digits::Seconds)
}

/// Metadata lists and maps kube-apiserver does not keep when empty (Go's
/// `omitempty`): `"finalizers": []` is stored, and read back, as no field.
fn drop_empty(m: &mut Map<String, Value>) {
    m.retain(|k, v| {
        let empty = match v {
            Value::Null => true,
            Value::Array(a) => a.is_empty(),
            Value::Object(o) => o.is_empty(),
            _ => false,
        };
        !(empty
            && matches!(
                k.as_str(),
                "labels" | "annotations" | "finalizers" | "ownerReferences"
            ))
    });
}

fn key(c: Collection, ns: &str, name: &str) -> Key {
    (c, ns.to_string(), name.to_string())
}

impl Store {
    /// The current (last written) resourceVersion.
    pub(crate) fn rv(&self) -> u64 {
        self.rv
    }

    pub(crate) fn get(&self, c: Collection, ns: &str, name: &str) -> Option<&Value> {
        self.objects.get(&key(c, ns, name)).map(|e| &e.object)
    }

    /// Who set which fields of `ns/name`.
    pub(crate) fn owners(&self, c: Collection, ns: &str, name: &str) -> Owners {
        self.objects
            .get(&key(c, ns, name))
            .map(|e| e.owners.clone())
            .unwrap_or_default()
    }

    /// Does the namespace `ns` exist?
    pub(crate) fn has_namespace(&self, ns: &str) -> bool {
        self.get(Collection::Namespaces, "", ns).is_some()
    }

    /// The objects of `ns` (of every namespace when `ns` is empty), ordered
    /// by namespace and name, as etcd lists them.
    pub(crate) fn list(&self, c: Collection, ns: &str) -> Vec<Value> {
        self.objects
            .range(key(c, "", "")..)
            .take_while(|((col, _, _), _)| *col == c)
            .filter(|((_, n, _), _)| ns.is_empty() || n == ns)
            .map(|(_, e)| e.object.clone())
            .collect()
    }

    /// Every object of `c`, oldest first (by creation).
    pub(crate) fn created_order(&self, c: Collection) -> Vec<Value> {
        let mut all: Vec<&Entry> = self
            .objects
            .iter()
            .filter(|((col, _, _), _)| *col == c)
            .map(|(_, e)| e)
            .collect();
        all.sort_by_key(|e| e.created);
        all.into_iter().map(|e| e.object.clone()).collect()
    }

    /// Store `obj` as `ns/name`, stamping the server-owned metadata: a new
    /// resourceVersion, the namespace, and (kept from the stored object when
    /// there is one) uid and creationTimestamp. Returns the stored object.
    ///
    /// An update that changes nothing is not written, as kube-apiserver
    /// does (settled on 1.37.2: two unchanged `PUT`s of a Lease answer 200
    /// with its resourceVersion as it was, its managedFields untouched, and
    /// no watch event): the stored object is returned as it is, with its
    /// version and its field owners.
    pub(crate) fn write(&mut self, c: Collection, ns: &str, name: &str, obj: Value) -> Value {
        let owners = self.owners(c, ns, name);
        self.write_owned(c, ns, name, obj, owners)
    }

    /// [`write`](Self::write), recording who now owns which fields.
    pub(crate) fn write_owned(
        &mut self,
        c: Collection,
        ns: &str,
        name: &str,
        mut obj: Value,
        owners: Owners,
    ) -> Value {
        let k = key(c, ns, name);
        if let Some(old) = self.objects.get(&k) {
            if self.unchanged(&old.object, ns, name, &obj) {
                return old.object.clone();
            }
        }
        self.rv += 1;
        let rv = self.rv;
        let old = self.objects.get(&k);
        let previous = old.map(|e| e.object.clone());
        let created_at = old.map_or(rv, |e| e.created);
        let old_meta = |f: &str| old.and_then(|e| meta_str(&e.object, f)).map(str::to_string);
        let (uid, created) = (old_meta("uid"), old_meta("creationTimestamp"));
        if let Some(m) = meta_mut(&mut obj) {
            drop_empty(m);
            m.insert("name".into(), name.into());
            if ns.is_empty() {
                m.remove("namespace");
            } else {
                m.insert("namespace".into(), ns.into());
            }
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
        let kind = if previous.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.objects.insert(
            k,
            Entry {
                object: obj.clone(),
                created: created_at,
                owners,
            },
        );
        self.record(c, rv, kind, ns, name, obj.clone(), previous);
        obj
    }

    /// Whether `obj`, stamped as [`write`](Self::write) would stamp it over
    /// `old`, is `old` itself.
    fn unchanged(&self, old: &Value, ns: &str, name: &str, obj: &Value) -> bool {
        let stamped = self.preview_over(Some(old), ns, name, obj.clone());
        stamped == *old
    }

    /// What [`write`](Self::write) would store, without storing it (a dry
    /// run): a new object has no resourceVersion yet, an existing one
    /// keeps its current one.
    pub(crate) fn preview(&self, c: Collection, ns: &str, name: &str, obj: Value) -> Value {
        self.preview_over(self.get(c, ns, name), ns, name, obj)
    }

    fn preview_over(&self, old: Option<&Value>, ns: &str, name: &str, mut obj: Value) -> Value {
        let old_meta = |f: &str| old.and_then(|o| meta_str(o, f)).map(str::to_string);
        if let Some(m) = meta_mut(&mut obj) {
            drop_empty(m);
            m.insert("name".into(), name.into());
            if ns.is_empty() {
                m.remove("namespace");
            } else {
                m.insert("namespace".into(), ns.into());
            }
            match old_meta("resourceVersion") {
                Some(rv) => m.insert("resourceVersion".into(), rv.into()),
                None => m.remove("resourceVersion"),
            };
            let uid = old_meta("uid").unwrap_or_else(|| crate::random::uuid_v4().to_string());
            m.insert("uid".into(), uid.into());
            let created = old_meta("creationTimestamp").unwrap_or_else(now_rfc3339);
            m.insert("creationTimestamp".into(), created.into());
        }
        obj
    }

    /// Remove `ns/name`; the object as it was, if it existed.
    pub(crate) fn delete(&mut self, c: Collection, ns: &str, name: &str) -> Option<Value> {
        let entry = self.objects.remove(&key(c, ns, name))?;
        self.rv += 1;
        let rv = self.rv;
        let previous = entry.object.clone();
        let mut obj = entry.object;
        // As in Kubernetes, the DELETED event carries the deletion's version.
        if let Some(m) = meta_mut(&mut obj) {
            m.insert("resourceVersion".into(), rv.to_string().into());
        }
        self.record(
            c,
            rv,
            EventType::Deleted,
            ns,
            name,
            obj,
            Some(previous.clone()),
        );
        Some(previous)
    }

    /// Delete a namespace's objects of every namespaced collection.
    pub(crate) fn delete_contents(&mut self, ns: &str) {
        let doomed: Vec<Key> = self
            .objects
            .keys()
            .filter(|(c, n, _)| *c != Collection::Namespaces && n == ns)
            .cloned()
            .collect();
        for (c, n, name) in doomed {
            self.delete(c, &n, &name);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn record(
        &mut self,
        c: Collection,
        rv: u64,
        kind: EventType,
        ns: &str,
        name: &str,
        object: Value,
        previous: Option<Value>,
    ) {
        let log = &mut self.changes[c.index()];
        if log.len() == WATCH_WINDOW {
            if let Some(gone) = log.pop_front() {
                self.dropped[c.index()] = gone.rv;
            }
        }
        log.push_back(Change {
            rv,
            kind,
            namespace: ns.to_string(),
            name: name.to_string(),
            object,
            previous,
        });
    }

    /// Changes to `c` in `ns` (every namespace when empty), and to `name`
    /// when given, after resourceVersion `after`; `Expired` when changes
    /// after it have left the window (kube-apiserver's watch cache:
    /// `too old resource version`).
    pub(crate) fn changes_since(
        &self,
        c: Collection,
        after: u64,
        ns: &str,
        name: Option<&str>,
    ) -> Result<Vec<Change>, Expired> {
        let dropped = self.dropped[c.index()];
        if after < dropped {
            return Err(Expired { oldest: dropped });
        }
        Ok(self.changes[c.index()]
            .iter()
            .filter(|ch| {
                ch.rv > after
                    && (ns.is_empty() || ch.namespace == ns)
                    && name.is_none_or(|n| ch.name == n)
            })
            .cloned()
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const L: Collection = Collection::Leases;

    #[test]
    fn writes_bump_one_counter_and_keep_identity() {
        let mut s = Store::default();
        let start = s.rv();
        let a = s.write(L, "ns", "l", json!({"kind": "Lease", "x": {"y": 1}}));
        assert_eq!(
            meta_str(&a, "resourceVersion"),
            Some(&*(start + 1).to_string())
        );
        s.write(Collection::Events, "ns", "e", json!({}));
        let b = s.write(L, "ns", "l", json!({"kind": "Lease"}));
        assert_eq!(
            meta_str(&b, "resourceVersion"),
            Some(&*(start + 3).to_string())
        );
        assert_eq!(meta_str(&a, "uid"), meta_str(&b, "uid"));
        assert!(s.delete(L, "ns", "l").is_some());
        assert_eq!(s.rv(), start + 4);
        let kinds: Vec<_> = s
            .changes_since(L, 0, "ns", Some("l"))
            .unwrap()
            .iter()
            .map(|c| c.kind)
            .collect();
        assert_eq!(
            kinds,
            [EventType::Added, EventType::Modified, EventType::Deleted]
        );
    }

    #[test]
    fn an_update_that_changes_nothing_is_not_written() {
        let mut s = Store::default();
        let lease = json!({"kind": "Lease", "spec": {"holderIdentity": "a"}});
        let first = s.write(L, "ns", "l", lease.clone());
        let version = s.rv();
        // The same body again, and the stored object as a client sends it back.
        assert_eq!(s.write(L, "ns", "l", lease), first);
        assert_eq!(s.write(L, "ns", "l", first.clone()), first);
        assert_eq!(s.rv(), version, "no new resourceVersion");
        assert_eq!(s.changes_since(L, version, "ns", None).unwrap().len(), 0);
        // A change is written.
        let changed = s.write(L, "ns", "l", json!({"kind": "Lease", "spec": {}}));
        assert_eq!(s.rv(), version + 1);
        assert_eq!(meta_str(&changed, "uid"), meta_str(&first, "uid"));
    }

    #[test]
    fn a_version_older_than_the_window_is_expired() {
        let mut s = Store::default();
        for i in 0..=WATCH_WINDOW {
            s.write(L, "ns", &format!("l{i}"), json!({}));
        }
        let oldest_kept = s.changes[L.index()][0].rv;
        assert!(s.changes_since(L, oldest_kept - 1, "", None).is_ok());
        assert_eq!(
            s.changes_since(L, oldest_kept - 2, "", None).unwrap_err(),
            Expired {
                oldest: oldest_kept - 1
            }
        );
        // The other collections' windows are their own.
        for c in [Collection::Events, Collection::Namespaces] {
            assert!(s.changes_since(c, 0, "", None).is_ok());
        }
    }
}
