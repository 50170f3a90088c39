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
        out.push_str(&format!("    certificate-authority-data: {}\n", base64(ca)));
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

/// Standard base64 with padding (RFC 4648 §4), as kubeconfig's `-data`
/// fields hold.
fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                let six = (n >> (18 - 6 * i)) & 0x3f;
                out.push(char::from(ALPHABET[six as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_pads_as_rfc_4648_says() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), want);
        }
        assert_eq!(base64(&[0xfb, 0xff]), "+/8=");
    }

    #[test]
    fn tokens_are_quoted_and_plain_http_has_no_ca() {
        let text = render("http://127.0.0.1:1", None, Some("a: b#c\"d"));
        assert!(text.contains(r#"token: "a: b#c\"d""#), "{text}");
        assert!(!text.contains("certificate-authority"));
        assert!(text.contains("namespace: default"));
    }
}
