//! Field ownership, as server-side apply keeps it in `managedFields`: each
//! manager (a `fieldManager`, with the operation it wrote with) owns the
//! fields it set. An apply that changes a field another manager owns is a
//! conflict unless forced; a field an applier stops applying is removed
//! when nobody else owns it.
//!
//! The subset this test server models (see the module docs of
//! `testing`): fields are the paths to the leaves of an object's maps (a
//! list is one leaf, set or replaced whole), and ownership is kept by the
//! server without being shown in `metadata.managedFields`.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// A field: the keys from the object's root to a leaf.
pub(crate) type Field = Vec<String>;

/// How a manager wrote its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    Apply,
    Update,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Managed {
    manager: String,
    operation: Operation,
    fields: BTreeSet<Field>,
}

/// Who owns which fields of one object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Owners {
    managers: Vec<Managed>,
}

/// One field an apply would take from another manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Conflict {
    /// As kube-apiserver prints the manager: `"name"` for an applier,
    /// `"name" using group/version` for an updater.
    pub(crate) manager: String,
    /// `.spec.holderIdentity`
    pub(crate) field: String,
}

/// Fields the server sets, which nobody owns (the field manager's strip set).
fn stripped(path: &[String]) -> bool {
    match path {
        [top] => top == "apiVersion" || top == "kind",
        [m, f] if m == "metadata" => matches!(
            f.as_str(),
            "name"
                | "namespace"
                | "uid"
                | "resourceVersion"
                | "creationTimestamp"
                | "generation"
                | "managedFields"
                | "selfLink"
                | "deletionTimestamp"
                | "deletionGracePeriodSeconds"
        ),
        _ => false,
    }
}

/// The fields set in `obj`: paths to its leaves (scalars, lists, empty maps).
pub(crate) fn fields(obj: &Value) -> BTreeSet<Field> {
    fn walk(v: &Value, path: &mut Field, out: &mut BTreeSet<Field>) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, child) in m {
                    path.push(k.clone());
                    if !stripped(path) {
                        walk(child, path, out);
                    }
                    path.pop();
                }
            }
            _ if !path.is_empty() => {
                out.insert(path.clone());
            }
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    walk(obj, &mut Vec::new(), &mut out);
    out
}

/// The value at `field`, if set.
pub(crate) fn get<'a>(obj: &'a Value, field: &[String]) -> Option<&'a Value> {
    field.iter().try_fold(obj, |v, k| v.get(k))
}

/// Set `field` to `value`, creating the maps on the way.
pub(crate) fn set(obj: &mut Value, field: &[String], value: Value) {
    let Some((last, parents)) = field.split_last() else {
        return;
    };
    let mut at = obj;
    for k in parents {
        if !at.get(k).is_some_and(Value::is_object) {
            if let Some(m) = at.as_object_mut() {
                m.insert(k.clone(), Value::Object(Map::new()));
            }
        }
        match at.get_mut(k) {
            Some(next) => at = next,
            None => return,
        }
    }
    if let Some(m) = at.as_object_mut() {
        m.insert(last.clone(), value);
    }
}

/// Remove `field`, and the maps it leaves empty.
pub(crate) fn remove(obj: &mut Value, field: &[String]) {
    let Some((last, parents)) = field.split_last() else {
        return;
    };
    if let Some(m) = parents
        .iter()
        .try_fold(&mut *obj, |v, k| v.get_mut(k))
        .and_then(Value::as_object_mut)
    {
        m.remove(last);
        if m.is_empty() && !parents.is_empty() {
            remove(obj, parents);
        }
    }
}

/// `.spec.holderIdentity`, as structured-merge-diff prints a path.
pub(crate) fn show(field: &[String]) -> String {
    field.iter().map(|k| format!(".{k}")).collect()
}

impl Owners {
    fn entry(&mut self, manager: &str, operation: Operation) -> &mut Managed {
        let at = match self
            .managers
            .iter()
            .position(|m| m.manager == manager && m.operation == operation)
        {
            Some(i) => i,
            None => {
                self.managers.push(Managed {
                    manager: manager.to_string(),
                    operation,
                    fields: BTreeSet::new(),
                });
                self.managers.len() - 1
            }
        };
        &mut self.managers[at]
    }

    fn tidy(&mut self) {
        self.managers.retain(|m| !m.fields.is_empty());
    }

    /// A write by `manager` (create, update, patch): it now owns every
    /// field whose value it changed (every field, for a create), which
    /// other managers lose; fields that are gone are nobody's.
    pub(crate) fn updated(&mut self, manager: &str, old: Option<&Value>, new: &Value) {
        let now = fields(new);
        let changed: BTreeSet<Field> = now
            .iter()
            .filter(|f| old.and_then(|o| get(o, f)) != get(new, f))
            .cloned()
            .collect();
        for m in &mut self.managers {
            m.fields.retain(|f| now.contains(f) && !changed.contains(f));
        }
        if !changed.is_empty() {
            self.entry(manager, Operation::Update)
                .fields
                .extend(changed);
        }
        self.tidy();
    }

    /// The fields of `config` whose value in `live` differs and that a
    /// manager other than `manager`'s apply owns.
    pub(crate) fn conflicts(&self, manager: &str, config: &Value, live: &Value) -> Vec<Conflict> {
        let mut out = Vec::new();
        for f in fields(config) {
            if get(config, &f) == get(live, &f) {
                continue;
            }
            for m in &self.managers {
                if (m.manager == manager && m.operation == Operation::Apply)
                    || !m.fields.contains(&f)
                {
                    continue;
                }
                let who = match m.operation {
                    Operation::Apply => format!("{:?}", m.manager),
                    Operation::Update => format!(
                        "{:?} using {}",
                        m.manager,
                        live["apiVersion"].as_str().unwrap_or("v1")
                    ),
                };
                out.push(Conflict {
                    manager: who,
                    field: show(&f),
                });
            }
        }
        out
    }

    /// Apply `config` by `manager` to `live` (conflicts already checked or
    /// forced): the applied fields are set and now `manager`'s; fields it
    /// applied before and no longer does are removed unless someone else
    /// owns them; forced fields are taken from their other owners.
    pub(crate) fn apply(&mut self, manager: &str, config: &Value, live: &Value) -> Value {
        let applied = fields(config);
        let mut out = live.clone();
        for f in &applied {
            match get(config, f) {
                // An empty map in the configuration keeps what is there.
                Some(Value::Object(m)) if m.is_empty() && get(&out, f).is_some() => {}
                Some(v) => set(&mut out, f, v.clone()),
                None => {}
            }
        }
        let before = self.entry(manager, Operation::Apply).fields.clone();
        for f in before.difference(&applied) {
            let shared = self.managers.iter().any(|m| {
                !(m.manager == manager && m.operation == Operation::Apply) && m.fields.contains(f)
            });
            if !shared {
                remove(&mut out, f);
            }
        }
        for m in &mut self.managers {
            if m.manager == manager && m.operation == Operation::Apply {
                continue;
            }
            // A field whose value changed is no longer theirs.
            m.fields
                .retain(|f| !applied.contains(f) || get(live, f) == get(config, f));
        }
        self.entry(manager, Operation::Apply).fields = applied;
        self.tidy();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_apply_conflicts_with_an_updater_then_takes_the_field_when_forced() {
        let live = json!({"apiVersion": "coordination.k8s.io/v1", "metadata": {"name": "l"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}});
        let mut owners = Owners::default();
        owners.updated("elector", None, &live);
        let config = json!({"spec": {"holderIdentity": "b", "leaseDurationSeconds": 15}});
        let conflicts = owners.conflicts("me", &config, &live);
        assert_eq!(
            conflicts,
            [Conflict {
                manager: "\"elector\" using coordination.k8s.io/v1".into(),
                field: ".spec.holderIdentity".into()
            }]
        );
        let out = owners.apply("me", &config, &live);
        assert_eq!(out["spec"]["holderIdentity"], "b");
        // The same value is shared, not taken.
        assert_eq!(owners.conflicts("elector2", &config, &out), []);
        // Dropping a field nobody else owns removes it; a shared one stays.
        let out = owners.apply("me", &json!({"spec": {}}), &out);
        assert!(out["spec"].get("holderIdentity").is_none());
        assert_eq!(out["spec"]["leaseDurationSeconds"], 15);
    }
}
