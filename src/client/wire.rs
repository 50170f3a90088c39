//! What every request of the client shares, below all of its parts: the
//! largest body read, a path segment as it is sent, what a request is
//! about (for its errors), the socket time-out that keeps it within its
//! budget, how long a stream may keep us waiting, and which hosts are
//! loopback.

use std::time::Duration;

/// Largest answer body read; anything longer is an error, not an allocation.
pub(crate) const MAX_BODY: u64 = 1 << 20;

/// Percent-encode one path segment (Kubernetes names are DNS labels, but a
/// bad config must produce a 404, not a request to another path).
pub(crate) fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// What a request is about, for error messages.
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) what: &'a str,
    pub(crate) action: &'static str,
}

/// Loopback: `localhost`, 127.0.0.0/8, `::1`.
pub(super) fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The socket time-out that ends a request within `budget`. Linux's timer
/// wheel may fire a long socket time-out up to 1/8 late (a 5 s read
/// time-out returns after ~5.2 s), which would carry a hung request past
/// the renew deadline; 7/8 of the budget, less a few ms, lands inside it.
pub(super) fn socket_budget(budget: Duration) -> Duration {
    budget
        .mul_f64(0.875)
        .saturating_sub(Duration::from_millis(5))
        .max(Duration::from_millis(1))
}

/// How long a stream may keep us waiting: for its response head, whole;
/// for each byte of its body after that.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Patience {
    pub(crate) head: Duration,
    pub(crate) silence: Duration,
}
