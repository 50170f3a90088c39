//! A kubeconfig for the embedded server, for kubectl and for programs that
//! load their client from a kubeconfig.
//!
//! The CA goes in inline (`certificate-authority-data`), so the file stands
//! alone and can be copied. Strings are written as JSON strings, which YAML
//! reads as double-quoted scalars: a token with `:` or `#` stays one value.

use std::io;
use std::path::Path;

/// The names of the cluster, user and context in the written file.
pub(crate) const NAME: &str = "lease-elector-test";

/// The kubeconfig text for `url`, trusting `ca_pem` when given and
/// sending `token` when given; its context's namespace is `default`.
pub(crate) fn render(url: &str, ca_pem: Option<&[u8]>, token: Option<&str>) -> String {
    let q = |s: &str| serde_json::Value::from(s).to_string();
    let mut out = String::from("apiVersion: v1\nkind: Config\nclusters:\n");
    out.push_str(&format!(
        "- name: {NAME}\n  cluster:\n    server: {}\n",
        q(url)
    ));
    if let Some(ca) = ca_pem {
        out.push_str(&format!(
            "    certificate-authority-data: {}\n",
            crate::client::base64::encode(ca)
        ));
    }
    out.push_str(&format!("users:\n- name: {NAME}\n"));
    match token {
        Some(t) => out.push_str(&format!("  user:\n    token: {}\n", q(t))),
        None => out.push_str("  user: {}\n"),
    }
    out.push_str(&format!(
        "contexts:\n- name: {NAME}\n  context:\n    cluster: {NAME}\n    user: {NAME}\n    \
         namespace: default\ncurrent-context: {NAME}\n"
    ));
    out
}

/// Write `text` to `path`, readable by its owner only: it may hold a token.
pub(crate) fn write(path: &Path, text: &str) -> io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut file = opts.open(path)?;
    io::Write::write_all(&mut file, text.as_bytes())?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_quoted_and_plain_http_has_no_ca() {
        let text = render("http://127.0.0.1:1", None, Some("a: b#c\"d"));
        assert!(text.contains(r#"token: "a: b#c\"d""#), "{text}");
        assert!(!text.contains("certificate-authority"));
        assert!(text.contains("namespace: default"));
    }
}
