//! Out-of-cluster config from a kubeconfig file (YAML, as kubectl writes
//! it, or its JSON form).
//!
//! The YAML is read by a small built-in reader for the subset kubeconfig
//! files use (see `src/yaml.rs`): anchors, aliases, tags and several
//! documents are refused with the line they are on. `null` values count as
//! absent, and `insecure-skip-tls-verify` takes `true`/`false` quoted or not.
//!
//! Supported: `server`, `certificate-authority(-data)`, `token`,
//! `tokenFile`, `client-certificate(-data)`/`client-key(-data)`, and the
//! context's namespace. Refused with a clear error: `insecure-skip-tls-verify`
//! (TLS is always verified), exec and auth-provider plugins, basic auth.
//! Only the first file of `$KUBECONFIG` is read; files are not merged.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::client::ClientConfig;
use crate::error::{Error, Result};

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "kebab-case")]
struct KubeConfig {
    clusters: Vec<Named<Cluster>>,
    users: Vec<Named<User>>,
    contexts: Vec<Named<Context>>,
    current_context: String,
}

#[derive(Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "user", alias = "context")]
    value: T,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "kebab-case")]
struct Cluster {
    server: String,
    certificate_authority: Option<PathBuf>,
    certificate_authority_data: Option<String>,
    #[serde(deserialize_with = "bool_or_string")]
    insecure_skip_tls_verify: bool,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "kebab-case")]
struct User {
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<PathBuf>,
    client_certificate: Option<PathBuf>,
    client_certificate_data: Option<String>,
    client_key: Option<PathBuf>,
    client_key_data: Option<String>,
    exec: Option<serde_json::Value>,
    auth_provider: Option<serde_json::Value>,
    username: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Context {
    cluster: String,
    user: String,
    namespace: Option<String>,
}

fn bad(path: &Path, detail: impl Into<String>) -> Error {
    Error::InvalidConfig(format!("kubeconfig {}: {}", path.display(), detail.into()))
}

fn find<'a, T>(list: &'a [Named<T>], name: &str, what: &str, path: &Path) -> Result<&'a T> {
    list.iter()
        .find(|n| n.name == name)
        .map(|n| &n.value)
        .ok_or_else(|| bad(path, format!("no {what} named {name:?}")))
}

impl ClientConfig {
    /// Config from the kubeconfig at `$KUBECONFIG` (its first entry) or
    /// `~/.kube/config`, using its current context.
    pub fn from_default_kubeconfig() -> Result<Self> {
        let path = std::env::var_os("KUBECONFIG")
            .and_then(|v| std::env::split_paths(&v).find(|p| !p.as_os_str().is_empty()))
            .or_else(|| {
                std::env::var_os("HOME").map(|h| Path::new(&h).join(".kube").join("config"))
            })
            .ok_or_else(|| Error::InvalidConfig("neither KUBECONFIG nor HOME is set".into()))?;
        Self::from_kubeconfig(&path, None)
    }

    /// Config from a kubeconfig file (YAML or JSON) and a context (`None`:
    /// the current context). Relative file paths are relative to the file.
    ///
    /// ```no_run
    /// let cfg = lease_elector::ClientConfig::from_kubeconfig("/home/me/.kube/config", None)?;
    /// let client = lease_elector::Client::new(cfg)?;
    /// # Ok::<(), lease_elector::Error>(())
    /// ```
    pub fn from_kubeconfig(path: impl AsRef<Path>, context: Option<&str>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read(path).map_err(|source| Error::ReadFile {
            what: "kubeconfig",
            path: path.to_path_buf(),
            source,
        })?;
        let kc = read(&text).map_err(|e| bad(path, e))?;
        let context_name = context.unwrap_or(&kc.current_context);
        if context_name.is_empty() {
            return Err(bad(path, "no context given and no current-context set"));
        }
        let ctx = find(&kc.contexts, context_name, "context", path)?;
        let cluster = find(&kc.clusters, &ctx.cluster, "cluster", path)?;
        let user = find(&kc.users, &ctx.user, "user", path)?;
        let base = path.parent().unwrap_or(Path::new("."));
        let resolve = |p: &Path| {
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                base.join(p)
            }
        };

        if cluster.insecure_skip_tls_verify {
            return Err(bad(path, format!(
                "cluster {:?} sets insecure-skip-tls-verify; TLS is always verified here, give its CA instead",
                ctx.cluster
            )));
        }
        if user.exec.is_some() || user.auth_provider.is_some() {
            return Err(bad(path, format!(
                "user {:?} uses an exec or auth-provider plugin, which is not supported: use a token or client certificate",
                ctx.user
            )));
        }
        if user.username.is_some() {
            return Err(bad(
                path,
                format!(
                    "user {:?} uses basic auth, which Kubernetes removed",
                    ctx.user
                ),
            ));
        }
        if cluster.server.is_empty() {
            return Err(bad(
                path,
                format!("cluster {:?} has no server", ctx.cluster),
            ));
        }

        let mut cfg = ClientConfig::new(cluster.server.clone());
        if let Some(data) = &cluster.certificate_authority_data {
            cfg = cfg.ca_pem(
                decode_base64(data)
                    .map_err(|e| bad(path, format!("certificate-authority-data: {e}")))?,
            );
        } else if let Some(file) = &cluster.certificate_authority {
            cfg = cfg.ca_file(resolve(file))?;
        }
        if let Some(token) = &user.token {
            cfg = cfg.token(token.clone());
        } else if let Some(file) = &user.token_file {
            cfg = cfg.token_file(resolve(file));
        }
        let cert = pem_source(
            path,
            "client-certificate",
            &user.client_certificate_data,
            &user.client_certificate,
            &resolve,
        )?;
        let key = pem_source(
            path,
            "client-key",
            &user.client_key_data,
            &user.client_key,
            &resolve,
        )?;
        match (cert, key) {
            (Some(cert), Some(key)) => cfg = cfg.client_identity(cert, key),
            (None, None) => {}
            _ => {
                return Err(bad(
                    path,
                    format!(
                        "user {:?} needs both a client certificate and a key",
                        ctx.user
                    ),
                ))
            }
        }
        Ok(cfg.with_namespace(ctx.namespace.clone().filter(|n| !n.is_empty())))
    }
}

/// The document, JSON if it starts with `{`, else YAML; nulls count as
/// absent, as Go's decoder leaves a field at its zero value.
fn read(text: &[u8]) -> std::result::Result<KubeConfig, String> {
    let mut doc = if text.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        serde_json::from_slice(text).map_err(|e| e.to_string())?
    } else {
        let text = std::str::from_utf8(text).map_err(|e| format!("not UTF-8: {e}"))?;
        crate::yaml::parse(text).map_err(|e| e.to_string())?
    };
    drop_nulls(&mut doc);
    match doc {
        // Through text, not `from_value`: one deserializer for both forms
        // keeps the static binary ~5 KB smaller.
        serde_json::Value::Object(_) => serde_json::to_vec(&doc)
            .and_then(|json| serde_json::from_slice(&json))
            .map_err(|e| e.to_string()),
        serde_json::Value::Null => Err("empty document".into()),
        _ => Err("not a kubeconfig: the document is not a mapping".into()),
    }
}

fn drop_nulls(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// A YAML `true` reaches serde as a string; JSON has real booleans.
fn bool_or_string<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<bool, D::Error> {
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::Bool(b) => Ok(b),
        serde_json::Value::String(s) if s.eq_ignore_ascii_case("true") => Ok(true),
        serde_json::Value::String(s) if s.eq_ignore_ascii_case("false") => Ok(false),
        other => Err(serde::de::Error::custom(format!(
            "expected true or false, found {other}"
        ))),
    }
}

fn pem_source(
    path: &Path,
    field: &str,
    data: &Option<String>,
    file: &Option<PathBuf>,
    resolve: &dyn Fn(&Path) -> PathBuf,
) -> Result<Option<Vec<u8>>> {
    if let Some(data) = data {
        return decode_base64(data)
            .map(Some)
            .map_err(|e| bad(path, format!("{field}-data: {e}")));
    }
    match file {
        Some(f) => {
            let p = resolve(f);
            std::fs::read(&p)
                .map(Some)
                .map_err(|source| Error::ReadFile {
                    what: "kubeconfig client credential",
                    path: p,
                    source,
                })
        }
        None => Ok(None),
    }
}

/// Standard base64 with optional padding; whitespace ignored.
fn decode_base64(s: &str) -> std::result::Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    let mut padding = 0;
    for c in s.bytes().filter(|c| !c.is_ascii_whitespace()) {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => {
                padding += 1;
                continue;
            }
            _ => return Err(format!("invalid base64 character {:?}", char::from(c))),
        };
        if padding > 0 {
            return Err("base64 data after padding".into());
        }
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    if bits >= 6 || padding > 2 {
        return Err("truncated base64".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_rfc4648_vectors() {
        for (enc, dec) in [
            ("", ""),
            ("Zg==", "f"),
            ("Zm8=", "fo"),
            ("Zm9v", "foo"),
            ("Zm9vYg==", "foob"),
            ("Zm9vYmE=", "fooba"),
            ("Zm9vYmFy", "foobar"),
            ("Zm9v\nYmFy", "foobar"),
        ] {
            assert_eq!(decode_base64(enc).unwrap(), dec.as_bytes(), "{enc}");
        }
        assert!(decode_base64("Zm9v!").is_err());
        assert!(decode_base64("Z").is_err());
        assert!(decode_base64("Zg==Zg").is_err());
    }
}
