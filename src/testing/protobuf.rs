//! The one protobuf body this server reads: a Namespace, which `kubectl
//! create namespace` sends as `application/vnd.kubernetes.protobuf` (its
//! typed client prefers protobuf for built-in types). Only the fields that
//! command sets are read (the name, `generateName`, labels, annotations);
//! any other protobuf body stays a 415, as before.

use serde_json::{json, Map, Value};

/// The media type of Kubernetes protobuf bodies.
pub(crate) const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The envelope's magic prefix (`k8s\0`).
const MAGIC: &[u8] = b"k8s\0";

/// One protobuf field: its number and, for a length-delimited field, its
/// bytes (varints and fixed-width values are skipped).
fn fields(mut b: &[u8]) -> Option<Vec<(u64, &[u8])>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let (key, rest) = varint(b)?;
        b = rest;
        match key & 7 {
            0 => b = varint(b)?.1,
            1 => b = b.get(8..)?,
            5 => b = b.get(4..)?,
            2 => {
                let (len, rest) = varint(b)?;
                let len = usize::try_from(len).ok()?;
                out.push((key >> 3, rest.get(..len)?));
                b = rest.get(len..)?;
            }
            _ => return None,
        }
    }
    Some(out)
}

fn varint(b: &[u8]) -> Option<(u64, &[u8])> {
    let mut v = 0u64;
    for (i, byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, &b[i + 1..]));
        }
    }
    None
}

fn text(b: &[u8]) -> Option<String> {
    String::from_utf8(b.to_vec()).ok()
}

/// A map entry (`key = 1`, `value = 2`).
fn entry(b: &[u8]) -> Option<(String, String)> {
    let mut key = String::new();
    let mut value = String::new();
    for (n, v) in fields(b)? {
        match n {
            1 => key = text(v)?,
            2 => value = text(v)?,
            _ => {}
        }
    }
    Some((key, value))
}

/// The JSON of a protobuf-encoded Namespace, or `None` when `body` is not
/// one (or is malformed).
pub(crate) fn namespace(body: &[u8]) -> Option<Value> {
    let envelope = fields(body.strip_prefix(MAGIC)?)?;
    let mut kind = String::new();
    let mut raw: &[u8] = &[];
    for (n, v) in envelope {
        match n {
            1 => {
                for (m, t) in fields(v)? {
                    if m == 2 {
                        kind = text(t)?;
                    }
                }
            }
            2 => raw = v,
            _ => {}
        }
    }
    if kind != "Namespace" {
        return None;
    }
    let mut meta = Map::new();
    for (n, v) in fields(raw)? {
        if n != 1 {
            continue; // spec and status: the server sets both.
        }
        let mut labels = Map::new();
        let mut annotations = Map::new();
        for (m, f) in fields(v)? {
            match m {
                1 => drop(meta.insert("name".into(), text(f)?.into())),
                2 => drop(meta.insert("generateName".into(), text(f)?.into())),
                11 => {
                    let (k, val) = entry(f)?;
                    labels.insert(k, val.into());
                }
                12 => {
                    let (k, val) = entry(f)?;
                    annotations.insert(k, val.into());
                }
                _ => {}
            }
        }
        if !labels.is_empty() {
            meta.insert("labels".into(), Value::Object(labels));
        }
        if !annotations.is_empty() {
            meta.insert("annotations".into(), Value::Object(annotations));
        }
    }
    Some(json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": meta }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(n: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![(n << 3) | 2, u8::try_from(bytes.len()).unwrap()];
        out.extend_from_slice(bytes);
        out
    }

    #[test]
    fn reads_the_namespace_kubectl_create_namespace_sends() {
        let label = [field(1, b"team"), field(2, b"a")].concat();
        let meta = [field(1, b"team-a"), field(11, &label)].concat();
        let raw = [field(1, &meta), field(2, b"")].concat();
        let type_meta = [field(1, b"v1"), field(2, b"Namespace")].concat();
        let body = [MAGIC.to_vec(), field(1, &type_meta), field(2, &raw)].concat();
        assert_eq!(
            namespace(&body),
            Some(json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "team-a", "labels": {"team": "a"}}}))
        );
        assert_eq!(namespace(b"k8s\0\x0a"), None);
        assert_eq!(namespace(b"{}"), None);
    }
}
