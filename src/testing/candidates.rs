//! Candidates with an identity of their own on the wire: the bearer token
//! [`TestApiServer::client_config`](super::TestApiServer::client_config)
//! gives each, which the server accepts and
//! [`Fault::candidate`](super::Fault::candidate) matches.

/// The token of candidate `identity`: its bytes outside `[A-Za-z0-9._-]`
/// percent-encoded, so any identity makes a valid header value.
pub(crate) fn token(identity: &str) -> String {
    let mut out = String::from("lease-elector-testing.candidate.");
    for b in identity.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_identity_makes_a_header_safe_token() {
        assert_eq!(
            super::token("pod-a"),
            "lease-elector-testing.candidate.pod-a"
        );
        assert_eq!(
            super::token("a b\n/é"),
            "lease-elector-testing.candidate.a%20b%0A%2F%C3%A9"
        );
    }
}
