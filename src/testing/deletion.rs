//! Deletion as kube-apiserver's generic registry does it for a type
//! without graceful deletion (Leases, Events): an object with finalizers
//! is not removed by `DELETE` but marked (`deletionTimestamp`, and
//! `deletionGracePeriodSeconds: 0`: the registry's `markAsDeleting`) and
//! kept until an update empties its finalizers, which removes it
//! (`shouldDeleteDuringUpdate`). Watchers see MODIFIED for the mark and
//! DELETED for the removal. Namespaces are deleted their own way (see
//! `namespaces`).

use serde_json::Value;

use super::meta::finalizers;
use super::store::{now_rfc3339, Collection, Store};

/// What a `DELETE` did.
#[derive(Debug)]
pub(crate) enum Deleted {
    /// Removed.
    Removed,
    /// Kept for its finalizers: the object as it is now, marked.
    Marked(Value),
}

fn is_marked(obj: &Value) -> bool {
    !obj["metadata"]["deletionTimestamp"].is_null()
}

/// `DELETE` of `ns/name` (with `dry_run`, only what it would do); `None`
/// when there is no such object.
pub(crate) fn delete(
    store: &mut Store,
    c: Collection,
    ns: &str,
    name: &str,
    dry_run: bool,
) -> Option<Deleted> {
    let stored = store.get(c, ns, name)?.clone();
    if finalizers(&stored).is_empty() {
        if !dry_run {
            store.delete(c, ns, name);
        }
        return Some(Deleted::Removed);
    }
    let mut marked = stored.clone();
    if let Some(m) = marked.get_mut("metadata").and_then(Value::as_object_mut) {
        if m.get("deletionTimestamp").is_none_or(Value::is_null) {
            m.insert("deletionTimestamp".into(), now_rfc3339().into());
        }
        m.insert("deletionGracePeriodSeconds".into(), 0.into());
    }
    // Marking a marked object again changes nothing, and writes nothing.
    if dry_run || marked == stored {
        return Some(Deleted::Marked(marked));
    }
    Some(Deleted::Marked(store.write(c, ns, name, marked)))
}

/// Carry the deletion mark of `old` onto `new`, its update: an update
/// never removes or changes it (the registry's `BeforeUpdate`).
pub(crate) fn carry(new: &mut Value, old: &Value) {
    if !is_marked(old) {
        return;
    }
    let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    m.insert(
        "deletionTimestamp".into(),
        old["metadata"]["deletionTimestamp"].clone(),
    );
    let grace = &old["metadata"]["deletionGracePeriodSeconds"];
    if m.get("deletionGracePeriodSeconds")
        .is_none_or(Value::is_null)
        && !grace.is_null()
    {
        m.insert("deletionGracePeriodSeconds".into(), grace.clone());
    }
}

/// Does updating `old` to `new` complete its deletion: `old` is marked
/// and `new` has no finalizer left?
pub(crate) fn completes(new: &Value, old: &Value) -> bool {
    let grace = &old["metadata"]["deletionGracePeriodSeconds"];
    is_marked(old) && finalizers(new).is_empty() && (grace.is_null() || grace.as_i64() == Some(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const L: Collection = Collection::Leases;

    #[test]
    fn a_finalized_object_is_marked_once_then_removed_by_the_update_that_empties_it() {
        let mut s = Store::default();
        s.write(L, "ns", "plain", json!({}));
        assert!(matches!(
            delete(&mut s, L, "ns", "plain", false),
            Some(Deleted::Removed)
        ));
        assert!(s.get(L, "ns", "plain").is_none());

        s.write(L, "ns", "held", json!({"metadata": {"finalizers": ["x"]}}));
        let Some(Deleted::Marked(marked)) = delete(&mut s, L, "ns", "held", false) else {
            panic!("a finalized object is kept");
        };
        assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 0);
        let rv = s.rv();
        let Some(Deleted::Marked(again)) = delete(&mut s, L, "ns", "held", false) else {
            panic!("still kept");
        };
        assert_eq!((again, s.rv()), (marked.clone(), rv));

        let mut update = json!({"metadata": {"finalizers": ["x"]}});
        carry(&mut update, &marked);
        assert_eq!(
            update["metadata"]["deletionTimestamp"],
            marked["metadata"]["deletionTimestamp"]
        );
        assert!(!completes(&update, &marked));
        update["metadata"]["finalizers"] = json!([]);
        assert!(completes(&update, &marked));
        assert!(!completes(&update, &json!({"metadata": {}})));
    }
}
