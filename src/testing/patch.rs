//! Patch documents: JSON merge patch (RFC 7386), strategic merge patch
//! (which for the maps and scalars of the served types merges the same
//! way; its directives are refused) and JSON patch (RFC 6902), with the
//! errors kube-apiserver answers.

use serde_json::{Map, Value};

use super::http::Response;
use super::status;

/// The patch types served, by media type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

impl PatchType {
    pub(crate) fn of(content_type: &str) -> Option<PatchType> {
        let media = content_type.split(';').next().unwrap_or("").trim();
        [
            ("application/json-patch+json", PatchType::Json),
            ("application/merge-patch+json", PatchType::Merge),
            (
                "application/strategic-merge-patch+json",
                PatchType::Strategic,
            ),
            ("application/apply-patch+yaml", PatchType::Apply),
        ]
        .iter()
        .find(|(m, _)| media.eq_ignore_ascii_case(m))
        .map(|(_, t)| *t)
    }
}

/// `current` with the merge or strategic merge `patch` applied.
pub(crate) fn merge(current: &Value, body: &[u8], strategic: bool) -> Result<Value, Response> {
    let patch: Value = match serde_json::from_slice(body) {
        Ok(p @ Value::Object(_)) => p,
        Ok(_) => return Err(status::bad_request("the patch is not a JSON object")),
        Err(e) => return Err(status::bad_request(&format!("error decoding patch: {e}"))),
    };
    if strategic && has_directive(&patch) {
        return Err(status::bad_request(
            "strategic merge patch directives ($patch, $retainKeys, $setElementOrder, ...) \
             are not supported by this test server",
        ));
    }
    let mut out = current.clone();
    merge_patch(&mut out, &patch);
    Ok(out)
}

fn has_directive(v: &Value) -> bool {
    match v {
        Value::Object(m) => m
            .iter()
            .any(|(k, v)| k.starts_with('$') || has_directive(v)),
        Value::Array(a) => a.iter().any(has_directive),
        _ => false,
    }
}

/// RFC 7386: objects merge key by key, `null` removes, anything else
/// replaces.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// `current` with the RFC 6902 JSON `patch` applied: a 400 when the patch
/// cannot be read, a 422 when an operation does not apply (a failed
/// `test`, a missing path), as kube-apiserver answers them.
pub(crate) fn json_patch(current: &Value, body: &[u8]) -> Result<Value, Response> {
    let ops: Vec<Map<String, Value>> = serde_json::from_slice(body).map_err(|e| {
        status::bad_request(&format!(
            "json: cannot unmarshal the patch into a JSON patch (a list of operations): {e}"
        ))
    })?;
    let mut doc = current.clone();
    for op in &ops {
        apply_op(&mut doc, op).map_err(|e| status::patch_failed(&e))?;
    }
    Ok(doc)
}

fn apply_op(doc: &mut Value, op: &Map<String, Value>) -> Result<(), String> {
    let text = |k: &str| op.get(k).and_then(Value::as_str);
    let kind = text("op").unwrap_or("");
    let path = text("path").ok_or_else(|| format!("{kind} operation is missing its path"))?;
    let value = || {
        op.get("value")
            .cloned()
            .ok_or_else(|| format!("{kind} operation has no value: missing value"))
    };
    let from = || text("from").ok_or_else(|| format!("{kind} operation is missing from"));
    match kind {
        "add" => add(doc, path, value()?),
        "remove" => remove(doc, path).map(|_| ()),
        "replace" => {
            let target = lookup_mut(doc, path).ok_or_else(|| {
                format!(
                    "replace operation does not apply: doc is missing key: {path}: missing value"
                )
            })?;
            *target = value()?;
            Ok(())
        }
        "move" => {
            let moved = remove(doc, from()?)?;
            add(doc, path, moved)
        }
        "copy" => {
            let copied = lookup_mut(doc, from()?).map(|v| v.clone()).ok_or_else(|| {
                format!(
                    "copy operation does not apply: doc is missing from path: {}: missing value",
                    from().unwrap_or("")
                )
            })?;
            add(doc, path, copied)
        }
        "test" => {
            let want = value()?;
            match lookup_mut(doc, path) {
                Some(have) if *have == want => Ok(()),
                _ => Err(format!("testing value {path} failed: test failed")),
            }
        }
        other => Err(format!("Unexpected kind: {other}")),
    }
}

/// The tokens of a JSON pointer (`/a/b~1c` is `a`, `b/c`).
fn tokens(path: &str) -> Result<Vec<String>, String> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(format!("invalid JSON pointer: {path:?}"));
    };
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn lookup_mut<'a>(doc: &'a mut Value, path: &str) -> Option<&'a mut Value> {
    tokens(path).ok()?.iter().try_fold(doc, |v, t| match v {
        Value::Object(m) => m.get_mut(t),
        Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
        _ => None,
    })
}

/// The container of `path`'s last token, and that token.
fn parent<'a>(doc: &'a mut Value, path: &str, op: &str) -> Result<(&'a mut Value, String), String> {
    let mut toks = tokens(path)?;
    let missing =
        || format!("{op} operation does not apply: doc is missing path: {path:?}: missing value");
    let last = toks.pop().ok_or_else(missing)?;
    let mut at = doc;
    for t in &toks {
        at = match at {
            Value::Object(m) => m.get_mut(t),
            Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
            _ => None,
        }
        .ok_or_else(missing)?;
    }
    Ok((at, last))
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (container, last) = parent(doc, path, "add")?;
    match container {
        Value::Object(m) => {
            m.insert(last, value);
            Ok(())
        }
        Value::Array(a) => {
            let at = if last == "-" {
                a.len()
            } else {
                last.parse::<usize>()
                    .ok()
                    .filter(|i| *i <= a.len())
                    .ok_or_else(|| {
                        format!("add operation does not apply: index out of bounds: {path}")
                    })?
            };
            a.insert(at, value);
            Ok(())
        }
        _ => Err(format!(
            "add operation does not apply: doc is missing path: {path:?}: missing value"
        )),
    }
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, String> {
    let missing =
        || format!("remove operation does not apply: doc is missing path: {path:?}: missing value");
    let (container, last) = parent(doc, path, "remove")?;
    match container {
        Value::Object(m) => m.remove(&last).ok_or_else(missing),
        Value::Array(a) => match last.parse::<usize>() {
            Ok(i) if i < a.len() => Ok(a.remove(i)),
            _ => Err(missing()),
        },
        _ => Err(missing()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patched(doc: Value, ops: Value) -> Result<Value, u16> {
        json_patch(&doc, ops.to_string().as_bytes()).map_err(|r| r.status)
    }

    #[test]
    fn json_patch_operations() {
        let doc = json!({"spec": {"a": 1, "list": [1, 2]}, "metadata": {"labels": {"x/y": "1"}}});
        let out = patched(
            doc.clone(),
            json!([
                {"op": "test", "path": "/spec/a", "value": 1},
                {"op": "replace", "path": "/spec/a", "value": 2},
                {"op": "add", "path": "/spec/list/-", "value": 3},
                {"op": "remove", "path": "/metadata/labels/x~1y"},
                {"op": "copy", "from": "/spec/a", "path": "/spec/b"},
                {"op": "move", "from": "/spec/b", "path": "/spec/c"},
            ]),
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"spec": {"a": 2, "c": 2, "list": [1, 2, 3]}, "metadata": {"labels": {}}})
        );
        assert_eq!(
            patched(
                doc.clone(),
                json!([{"op": "test", "path": "/spec/a", "value": 9}])
            ),
            Err(422)
        );
        assert_eq!(
            patched(
                doc.clone(),
                json!([{"op": "replace", "path": "/spec/zz", "value": 9}])
            ),
            Err(422)
        );
        assert_eq!(patched(doc, json!({"op": "add"})), Err(400));
    }

    #[test]
    fn patch_types_by_media_type() {
        assert_eq!(
            PatchType::of("application/json-patch+json; charset=utf-8"),
            Some(PatchType::Json)
        );
        assert_eq!(
            PatchType::of("application/apply-patch+yaml"),
            Some(PatchType::Apply)
        );
        assert_eq!(PatchType::of("application/json"), None);
    }
}
