//! Fault rules: what to do instead of (or before) serving a request.

use std::time::Duration;

/// A fault rule for [`TestApiServer::inject`](super::TestApiServer::inject).
///
/// Built from one of the constructors, then narrowed with
/// [`times`](Fault::times), [`method`](Fault::method) and
/// [`path_contains`](Fault::path_contains).
///
/// ```
/// use lease_elector::testing::Fault;
/// use std::time::Duration;
/// // The next two PUTs of lease "my-lease" get 409 Conflict.
/// let conflict = Fault::status(409).method("PUT").path_contains("/leases/my-lease").times(2);
/// // Every request is delayed by 100 ms until the faults are cleared.
/// let slow = Fault::latency(Duration::from_millis(100)).times(usize::MAX);
/// # let _ = (conflict, slow);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub(crate) action: Action,
    pub(crate) remaining: usize,
    pub(crate) method: Option<String>,
    pub(crate) path_contains: Option<String>,
}

/// What a fault does when it fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    Status(u16),
    Latency(Duration),
    Drop,
    Raw(u16, Vec<u8>),
}

impl Fault {
    fn new(action: Action) -> Self {
        Fault {
            action,
            remaining: 1,
            method: None,
            path_contains: None,
        }
    }

    /// Answer with status `code` and a Kubernetes `Status` body whose reason
    /// matches the code (409 `Conflict`, 429 `TooManyRequests` plus
    /// `Retry-After: 1`, 500 `InternalError`, 503 `ServiceUnavailable`,
    /// 401 `Unauthorized`, 403 `Forbidden`, 404 `NotFound`).
    pub fn status(code: u16) -> Self {
        Self::new(Action::Status(code))
    }

    /// Delay the request by `delay`, then go on matching the rules after
    /// this one and serve normally if none of them fires.
    pub fn latency(delay: Duration) -> Self {
        Self::new(Action::Latency(delay))
    }

    /// Close the connection without answering.
    pub fn drop_connection() -> Self {
        Self::new(Action::Drop)
    }

    /// Answer with exactly `code` and `body` (`Content-Type:
    /// application/json`), e.g. for malformed, truncated or huge bodies.
    pub fn raw(code: u16, body: impl Into<Vec<u8>>) -> Self {
        Self::new(Action::Raw(code, body.into()))
    }

    /// Fire for `n` requests (default 1); `usize::MAX` means until
    /// [`clear_faults`](super::TestApiServer::clear_faults).
    pub fn times(mut self, n: usize) -> Self {
        self.remaining = n;
        self
    }

    /// Only match requests with this method (case-insensitive).
    pub fn method(mut self, method: &str) -> Self {
        self.method = Some(method.to_ascii_uppercase());
        self
    }

    /// Only match requests whose target (path and query) contains `fragment`.
    pub fn path_contains(mut self, fragment: &str) -> Self {
        self.path_contains = Some(fragment.to_string());
        self
    }

    fn matches(&self, method: &str, target: &str) -> bool {
        self.remaining > 0
            && self
                .method
                .as_deref()
                .is_none_or(|m| m.eq_ignore_ascii_case(method))
            && self
                .path_contains
                .as_deref()
                .is_none_or(|p| target.contains(p))
    }
}

/// What the rules decided for one request.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Decision {
    /// Sum of the delays of every latency rule that fired.
    pub(crate) delay: Duration,
    /// The first non-latency rule that fired, if any.
    pub(crate) action: Option<Action>,
    /// How many rules fired.
    pub(crate) fired: u64,
}

/// Match `rules` in insertion order against a request: every matching
/// latency rule fires (adding its delay) until the first matching
/// non-latency rule, which fires and ends the matching. Each rule that
/// fires uses up one of its counts; used-up rules are removed.
pub(crate) fn decide(rules: &mut Vec<Fault>, method: &str, target: &str) -> Decision {
    let mut d = Decision::default();
    for rule in rules.iter_mut() {
        if !rule.matches(method, target) {
            continue;
        }
        if rule.remaining != usize::MAX {
            rule.remaining -= 1;
        }
        d.fired += 1;
        match &rule.action {
            Action::Latency(delay) => d.delay = d.delay.saturating_add(*delay),
            other => {
                d.action = Some(other.clone());
                break;
            }
        }
    }
    rules.retain(|r| r.remaining > 0);
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_combines_with_the_next_rule() {
        let mut rules = vec![
            Fault::latency(Duration::from_millis(5)).times(2),
            Fault::status(500).method("PUT"),
            Fault::latency(Duration::from_millis(7)),
        ];
        let d = decide(&mut rules, "PUT", "/x");
        assert_eq!(d.delay, Duration::from_millis(5));
        assert_eq!(d.action, Some(Action::Status(500)));
        assert_eq!(rules.len(), 2);
        let d = decide(&mut rules, "GET", "/x");
        assert_eq!(d.delay, Duration::from_millis(12));
        assert_eq!(d.action, None);
        assert!(rules.is_empty());
    }

    #[test]
    fn filters_and_unlimited() {
        let mut rules = vec![Fault::drop_connection()
            .path_contains("/leases/a")
            .times(usize::MAX)];
        assert_eq!(decide(&mut rules, "GET", "/leases/b").action, None);
        for _ in 0..3 {
            assert_eq!(
                decide(&mut rules, "GET", "/leases/a").action,
                Some(Action::Drop)
            );
        }
        assert_eq!(rules.len(), 1);
    }
}
