//! `application/yaml` request bodies, read as kube-apiserver reads them:
//! the YAML becomes the JSON the handlers decode.
//!
//! The crate's YAML reader leaves every scalar a string (the kubeconfig
//! reader types them); here the fields of the objects this server stores
//! that are numbers or booleans in their Go types are typed back, as the
//! real decoder's YAML-to-JSON step and its structs do.

use serde_json::Value;

use super::http::Response;
use super::status;
use crate::client::yaml;

/// Fields of `Lease`, `Event` and `DeleteOptions` that are integers.
const INTEGERS: &[&str] = &[
    "leaseDurationSeconds",
    "leaseTransitions",
    "count",
    "generation",
    "gracePeriodSeconds",
];

/// Fields that are booleans.
const BOOLEANS: &[&str] = &["orphanDependents"];

/// Whether `content_type` names YAML.
pub(crate) fn is_yaml(content_type: Option<&str>) -> bool {
    content_type
        .and_then(|ct| ct.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/yaml"))
}

/// The JSON of a YAML body, or the 400 kube-apiserver answers.
pub(crate) fn to_json(body: &[u8]) -> Result<Vec<u8>, Response> {
    let text = std::str::from_utf8(body)
        .map_err(|e| status::bad_request(&format!("yaml: invalid UTF-8: {e}")))?;
    let mut value = yaml::parse(text).map_err(|e| status::bad_request(&format!("yaml: {e}")))?;
    typed(&mut value);
    serde_json::to_vec(&value).map_err(|e| status::bad_request(&format!("yaml: {e}")))
}

fn typed(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if let Value::String(s) = v {
                    if INTEGERS.contains(&key.as_str()) {
                        if let Ok(n) = s.parse::<i64>() {
                            *v = Value::from(n);
                        }
                    } else if BOOLEANS.contains(&key.as_str()) {
                        match s.as_str() {
                            "true" | "True" | "TRUE" => *v = Value::Bool(true),
                            "false" | "False" | "FALSE" => *v = Value::Bool(false),
                            _ => {}
                        }
                    }
                } else if key != "labels" && key != "annotations" {
                    // Label and annotation values are strings, whatever
                    // their keys.
                    typed(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(typed),
        _ => {}
    }
}
