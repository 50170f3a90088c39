//! `metadata` checked as kube-apiserver checks it (apimachinery's
//! `ValidateObjectMetaAccessor` on create, `ValidateObjectMetaAccessorUpdate`
//! on update): the name by its type's rule, label keys and values,
//! annotation keys, finalizer names; on update, the fields that may not
//! change and no new finalizer on an object being deleted. Each broken
//! rule is one [`Cause`], worded as apimachinery words it.
//!
//! The rules are kube-apiserver's, not the crate's own `names` (which
//! checks what the elector is given): a DNS-1123 subdomain here has no
//! limit on the length of its dot-separated parts, only on the whole.

use serde_json::Value;

use super::resource::Api;
use super::status::Cause;

const LABEL_MAX: usize = 63;
const SUBDOMAIN_MAX: usize = 253;
/// apimachinery's `TotalAnnotationSizeLimitB`.
const ANNOTATIONS_MAX: usize = 256 * 1024;

const LABEL_RULE: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric \
     characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  \
     or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const SUBDOMAIN_RULE: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
     alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character \
     (e.g. 'example.com', regex used for validation is \
     '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const KEY_RULE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must \
     start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', \
     regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const VALUE_RULE: &str = "a valid label must be an empty string or consist of alphanumeric \
     characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. \
     'MyValue',  or 'my_value',  or '12345', regex used for validation is \
     '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

fn too_long(max: usize) -> String {
    format!("must be no more than {max} characters")
}

/// What kube-apiserver 1.37 says of a label key's name part or a label
/// value that is too long (names keep "characters").
fn too_many_bytes(max: usize) -> String {
    format!("must be no more than {max} bytes")
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, any length.
fn label_shaped(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
        && b.iter().all(|c| alnum(c) || *c == b'-')
}

/// apimachinery's `IsDNS1123Subdomain`.
fn subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > SUBDOMAIN_MAX {
        errs.push(too_long(SUBDOMAIN_MAX));
    }
    if !s.split('.').all(label_shaped) {
        errs.push(SUBDOMAIN_RULE.to_string());
    }
    errs
}

/// apimachinery's `IsDNS1123Label`.
fn label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > LABEL_MAX {
        errs.push(too_long(LABEL_MAX));
    }
    if !label_shaped(s) {
        errs.push(if s.split('.').all(label_shaped) {
            "must not contain dots".to_string()
        } else {
            LABEL_RULE.to_string()
        });
    }
    errs
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn key_shaped(s: &str) -> bool {
    let b = s.as_bytes();
    b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// apimachinery's `IsQualifiedName` (a label key, an annotation key, a
/// finalizer): an optional DNS-1123 subdomain prefix and `/`, then a name
/// part of at most 63 characters.
pub(crate) fn qualified_name(value: &str) -> Vec<String> {
    let parts: Vec<&str> = value.split('/').collect();
    let mut errs = Vec::new();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            return vec![format!(
                "a valid label key {KEY_RULE} with an optional DNS subdomain prefix and '/' \
                 (e.g. 'example.com/MyName')"
            )]
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > LABEL_MAX {
        errs.push(format!("name part {}", too_many_bytes(LABEL_MAX)));
    }
    if !key_shaped(name) {
        errs.push(format!("name part {KEY_RULE}"));
    }
    errs
}

/// apimachinery's `IsValidLabelValue`.
fn label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_MAX {
        errs.push(too_many_bytes(LABEL_MAX));
    }
    if !value.is_empty() && !key_shaped(value) {
        errs.push(VALUE_RULE.to_string());
    }
    errs
}

/// apimachinery's `IsValidPathSegmentName` (`prefix`: for a
/// `generateName`, `IsValidPathSegmentPrefix`).
fn path_segment(name: &str, prefix: bool) -> Vec<String> {
    if !prefix {
        for bad in [".", ".."] {
            if name == bad {
                return vec![format!("may not be '{bad}'")];
            }
        }
    }
    ["/", "%"]
        .iter()
        .filter(|c| name.contains(*c))
        .map(|c| format!("may not contain '{c}'"))
        .collect()
}

/// What a name of `api` must be; `prefix` for a `generateName`, whose
/// trailing `-` is allowed (apimachinery's `maskTrailingDash`).
fn name_errors(api: Api, name: &str, prefix: bool) -> Vec<String> {
    let masked = match name.strip_suffix('-') {
        Some(rest) if prefix && !rest.is_empty() => format!("{rest}a"),
        _ => name.to_string(),
    };
    match api {
        // `ValidateLease`; events.k8s.io/v1's strict `ValidateEventCreate`.
        Api::Leases | Api::EventsV1 => subdomain(&masked),
        // `ValidateNamespace`: `ValidateNamespaceName`.
        Api::Namespaces => label(&masked),
        // core/v1 Events: only the generic registry's check.
        Api::Events => path_segment(name, prefix),
    }
}

fn text<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj["metadata"][field].as_str().unwrap_or_default()
}

/// One `Invalid value` cause of `field` per broken rule of `value`.
fn invalid(field: &str, value: &str, errs: Vec<String>) -> Vec<Cause> {
    let shown = format!("{value:?}");
    errs.iter()
        .map(|e| Cause::invalid(field, &shown, e))
        .collect()
}

/// Label keys and values, annotation keys and their total size: checked
/// on create and on update alike.
fn common(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(labels) = obj["metadata"]["labels"].as_object() {
        for (key, value) in labels {
            causes.extend(invalid("metadata.labels", key, qualified_name(key)));
            let value = value.as_str().unwrap_or_default();
            causes.extend(invalid("metadata.labels", value, label_value(value)));
        }
    }
    if let Some(annotations) = obj["metadata"]["annotations"].as_object() {
        let mut size = 0usize;
        for (key, value) in annotations {
            // Case does not matter in an annotation key.
            let errs = qualified_name(&key.to_ascii_lowercase());
            causes.extend(invalid("metadata.annotations", key, errs));
            size = size
                .saturating_add(key.len())
                .saturating_add(value.as_str().map_or(0, str::len));
        }
        if size > ANNOTATIONS_MAX {
            causes.push(Cause::too_long("metadata.annotations", ANNOTATIONS_MAX));
        }
    }
    causes
}

/// The finalizers of `obj`.
pub(crate) fn finalizers(obj: &Value) -> Vec<&str> {
    obj["metadata"]["finalizers"]
        .as_array()
        .map(|f| f.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// What is wrong with the metadata of `obj`, an `api` object being
/// created (its name already there or generated: an empty one is refused
/// before).
pub(crate) fn on_create(api: Api, obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let generate = text(obj, "generateName");
    if !generate.is_empty() {
        let errs = name_errors(api, generate, true);
        causes.extend(invalid("metadata.generateName", generate, errs));
    }
    let name = text(obj, "name");
    causes.extend(invalid(
        "metadata.name",
        name,
        name_errors(api, name, false),
    ));
    causes.extend(common(obj));
    for f in finalizers(obj) {
        causes.extend(invalid("metadata.finalizers", f, qualified_name(f)));
    }
    causes
}

/// What is wrong with the metadata of `new`, an update of `old` (after the
/// deletion mark was carried over, see `deletion::carry`).
pub(crate) fn on_update(new: &Value, old: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if !old["metadata"]["deletionTimestamp"].is_null() {
        let before = finalizers(old);
        let mut added: Vec<&str> = finalizers(new)
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        added.sort_unstable();
        added.dedup();
        if !added.is_empty() {
            let shown: Vec<String> = added.iter().map(|f| format!("{f:?}")).collect();
            causes.push(Cause::forbidden(
                "metadata.finalizers",
                &format!(
                    "no new finalizers can be added if the object is being deleted, \
                     found new finalizers []string{{{}}}",
                    shown.join(", ")
                ),
            ));
        }
    }
    // Name and namespace come from the URL; an empty uid is filled in.
    let uid = text(new, "uid");
    if !uid.is_empty() && uid != text(old, "uid") {
        causes.push(Cause::invalid(
            "metadata.uid",
            &format!("{uid:?}"),
            "field is immutable",
        ));
    }
    for field in ["deletionTimestamp", "deletionGracePeriodSeconds"] {
        let value = &new["metadata"][field];
        if *value != old["metadata"][field] {
            causes.push(Cause::invalid(
                &format!("metadata.{field}"),
                &value.to_string(),
                "field is immutable",
            ));
        }
    }
    causes.extend(common(new));
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_follow_kube_apiservers_rules_per_type() {
        let long_part = "a".repeat(64);
        assert!(name_errors(Api::Leases, &format!("{long_part}.b"), false).is_empty());
        assert_eq!(
            name_errors(Api::Leases, &"a".repeat(254), false),
            ["must be no more than 253 characters"]
        );
        assert_eq!(
            name_errors(Api::Namespaces, "a.b", false),
            ["must not contain dots"]
        );
        assert_eq!(name_errors(Api::Namespaces, "Bad", false), [LABEL_RULE]);
        assert!(name_errors(Api::Leases, "lock-", true).is_empty());
        assert_eq!(name_errors(Api::Leases, "lock-", false), [SUBDOMAIN_RULE]);
        assert!(name_errors(Api::Events, "Bad_Ev", false).is_empty());
        assert_eq!(name_errors(Api::Events, "..", false), ["may not be '..'"]);
        assert!(name_errors(Api::Events, "..", true).is_empty());
    }

    #[test]
    fn label_keys_and_values_are_qualified_names() {
        for ok in ["a", "A.b_c-9", "example.com/Key", &"k".repeat(63)] {
            assert!(qualified_name(ok).is_empty(), "{ok}");
        }
        assert_eq!(
            qualified_name("/x"),
            ["prefix part must be non-empty".to_string()]
        );
        assert_eq!(
            qualified_name("Ex.com/x"),
            [format!("prefix part {SUBDOMAIN_RULE}")]
        );
        assert_eq!(
            qualified_name("a/"),
            [
                "name part must be non-empty".to_string(),
                format!("name part {KEY_RULE}")
            ]
        );
        assert_eq!(qualified_name("a/b/c").len(), 1);
        assert_eq!(
            qualified_name(&"k".repeat(64)),
            ["name part must be no more than 63 bytes"]
        );
        assert!(label_value("").is_empty());
        assert_eq!(label_value("-x"), [VALUE_RULE]);
    }

    #[test]
    fn an_update_keeps_the_finalizers_of_an_object_being_deleted() {
        let old = json!({"metadata": {"uid": "u", "finalizers": ["a"],
            "deletionTimestamp": "2026-01-01T00:00:00Z", "deletionGracePeriodSeconds": 0}});
        let mut new = old.clone();
        assert!(on_update(&new, &old).is_empty());
        new["metadata"]["finalizers"] = json!(["b", "a", "c", "b"]);
        let causes = on_update(&new, &old);
        assert_eq!(causes.len(), 1);
        assert_eq!(
            causes[0].message,
            "Forbidden: no new finalizers can be added if the object is being deleted, \
             found new finalizers []string{\"b\", \"c\"}"
        );
        new["metadata"]["finalizers"] = json!([]);
        assert!(on_update(&new, &old).is_empty());
    }
}
