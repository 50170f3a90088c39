//! Names checked as Kubernetes checks them, before they name a thread, a
//! path or a log line: a Lease name is a DNS-1123 subdomain, a namespace a
//! DNS-1123 label (apimachinery's `IsDNS1123Subdomain` / `IsDNS1123Label`),
//! and a candidate identity any non-empty string without NUL.

use crate::error::{Error, Result};
use crate::text::escape;

/// Longest DNS-1123 label (a namespace).
pub const MAX_LABEL: usize = 63;
/// Longest DNS-1123 subdomain (a Lease name).
pub const MAX_SUBDOMAIN: usize = 253;

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
fn is_label(s: &str) -> bool {
    s.len() <= MAX_LABEL && is_part(s)
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, of any length.
fn is_part(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
        && b.iter().all(|c| alnum(c) || *c == b'-')
}

/// Dot-separated parts, at most 253 characters in all: apimachinery's
/// `IsDNS1123Subdomain`, which (unlike DNS) puts no limit of 63 on a part.
fn is_subdomain(s: &str) -> bool {
    s.len() <= MAX_SUBDOMAIN && s.split('.').all(is_part)
}

fn invalid(what: &str, value: &str, rule: &str) -> Error {
    let shown: String = escape(value).chars().take(80).collect();
    let more = if value.chars().count() > 80 {
        "..."
    } else {
        ""
    };
    Error::InvalidConfig(format!("{what} \"{shown}{more}\" is invalid: {rule}"))
}

/// A namespace: a DNS-1123 label.
pub fn check_namespace(namespace: &str) -> Result<()> {
    if is_label(namespace) {
        return Ok(());
    }
    Err(invalid(
        "namespace",
        namespace,
        "a namespace must be a DNS-1123 label: at most 63 lower-case letters, digits or '-', starting and ending with a letter or digit",
    ))
}

/// A Lease name: a DNS-1123 subdomain.
pub fn check_lease_name(name: &str) -> Result<()> {
    if is_subdomain(name) {
        return Ok(());
    }
    Err(invalid(
        "lease name",
        name,
        "a Lease name must be a DNS-1123 subdomain: at most 253 lower-case letters, digits, '-' or '.', each dot-separated part starting and ending with a letter or digit",
    ))
}

/// A candidate identity: not empty, no NUL.
pub fn check_identity(identity: &str) -> Result<()> {
    if identity.is_empty() {
        return Err(Error::InvalidConfig("lock identity is empty".into()));
    }
    if identity.contains('\0') {
        return Err(invalid(
            "identity",
            identity,
            "an identity may not contain NUL",
        ));
    }
    Ok(())
}

/// A thread name made of `parts` joined by `/`: never panics on a NUL
/// (`thread::Builder::name` does), whatever the caller was given.
pub fn thread_name(parts: &[&str]) -> String {
    parts.join("/").replace('\0', "\\0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_apimachinery() {
        for ok in ["a", "kube-system", "0x", &"a".repeat(63)] {
            assert!(check_namespace(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "A",
            "-a",
            "a-",
            "a.b",
            "a\0b",
            "a b",
            &"a".repeat(64),
            "ü",
        ] {
            assert!(check_namespace(bad).is_err(), "{bad:?}");
        }
        let longest = format!(
            "{}{}",
            format!("{}.", "a".repeat(63)).repeat(3),
            "a".repeat(61)
        );
        assert_eq!(longest.len(), 253);
        // kube-apiserver takes a part longer than 63 (a DNS label's limit).
        let long_part = "a".repeat(64);
        for ok in [
            "a",
            "my-lock",
            "a.b.c",
            "cert-manager-controller",
            &longest,
            &long_part,
        ] {
            assert!(check_lease_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "a..b",
            ".a",
            "a.",
            "A",
            "a\0b",
            "a/b",
            &"a".repeat(254),
            &format!("{longest}a"),
        ] {
            assert!(check_lease_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_identity("pod-a_1234 any text ü").is_ok());
        assert!(check_identity("").is_err());
        let e = check_identity("a\0b").unwrap_err().to_string();
        assert!(e.contains("a\\u{0}b") && !e.contains('\0'), "{e}");
        let e = check_lease_name(&"x\n".repeat(100))
            .unwrap_err()
            .to_string();
        assert!(!e.contains('\n') && e.len() < 600, "{e}");
        assert_eq!(
            thread_name(&["lease-elector", "a\0b", "c"]),
            "lease-elector/a\\0b/c"
        );
    }
}
