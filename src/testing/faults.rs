//! Fault rules: what to do instead of (or before) serving a request.

use std::time::Duration;

/// A fault rule for [`TestApiServer::inject`](super::TestApiServer::inject).
///
/// Built from one of the constructors, then narrowed with
/// [`times`](Fault::times) or [`forever`](Fault::forever),
/// [`candidate`](Fault::candidate), [`method`](Fault::method),
/// [`path_contains`](Fault::path_contains), [`header`](Fault::header) and
/// [`bearer`](Fault::bearer). The one-line forms for one candidate are
/// [`TestApiServer::cut_off`](super::TestApiServer::cut_off),
/// [`hang`](super::TestApiServer::hang) and
/// [`slow`](super::TestApiServer::slow).
///
/// ```
/// use lease_elector::testing::Fault;
/// use std::time::Duration;
/// // The next two PUTs of lease "my-lease" get 409 Conflict.
/// let conflict = Fault::status(409).method("PUT").path_contains("/leases/my-lease").times(2);
/// // Every request is delayed by 100 ms until the faults are cleared.
/// let slow = Fault::latency(Duration::from_millis(100)).forever();
/// // Only candidate "pod-b" (see `TestApiServer::client_config`) is
/// // throttled, with a Retry-After no client should take at its word.
/// let throttled = Fault::retry_after(429, "18446744073709551615").candidate("pod-b");
/// // The next request of "pod-a" is never answered.
/// let black_hole = Fault::hang().candidate("pod-a");
/// # let _ = (conflict, slow, throttled, black_hole);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub(crate) action: Action,
    /// `FOREVER` for a rule that fires until cleared.
    pub(crate) remaining: usize,
    pub(crate) method: Option<String>,
    pub(crate) path_contains: Option<String>,
    /// Lower-cased name and exact value; every pair must be present.
    pub(crate) headers: Vec<(String, String)>,
    /// The candidate the rule singles out, for
    /// [`restore`](super::TestApiServer::restore).
    pub(crate) candidate: Option<String>,
    /// Set by the server when the rule is queued.
    pub(crate) id: u64,
}

/// The count of a rule that fires until it is cleared.
const FOREVER: usize = usize::MAX;

/// What a fault does when it fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    Status(u16),
    Latency(Duration),
    Drop,
    Raw(u16, Vec<u8>),
    Hang,
    RetryAfter(u16, String),
}

impl Fault {
    fn new(action: Action) -> Self {
        Fault {
            action,
            remaining: 1,
            method: None,
            path_contains: None,
            headers: Vec::new(),
            candidate: None,
            id: 0,
        }
    }

    /// Answer with status `code` and a Kubernetes `Status` body whose reason
    /// matches the code (409 `Conflict`, 429 `TooManyRequests` plus
    /// `Retry-After: 1`, 500 `InternalError`, 503 `ServiceUnavailable`,
    /// 401 `Unauthorized`, 403 `Forbidden`, 404 `NotFound`).
    ///
    /// ```
    /// use lease_elector::testing::Fault;
    /// let conflict = Fault::status(409).method("PUT");
    /// # let _ = conflict;
    /// ```
    pub fn status(code: u16) -> Self {
        Self::new(Action::Status(code))
    }

    /// Delay the request by `delay`, then go on matching the rules after
    /// this one and serve normally if none of them fires.
    ///
    /// The delay composes with the rule that fires after it: queue a
    /// latency rule, then a status (or raw, drop, hang, retry-after) rule
    /// matching the same requests, and the request is answered with that
    /// fault once the delay has passed. The sleeping connection holds no
    /// lock: other connections are served meanwhile. Shutdown cuts the
    /// delay short.
    ///
    /// ```
    /// use lease_elector::testing::{Fault, TestApiServer};
    /// use std::time::Duration;
    ///
    /// let server = TestApiServer::start()?;
    /// // The next PUT gets a 500, but only after 1.9 s: a renewal that
    /// // fails late in its deadline.
    /// server.inject(Fault::latency(Duration::from_millis(1900)).method("PUT"));
    /// server.inject(Fault::status(500).method("PUT"));
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn latency(delay: Duration) -> Self {
        Self::new(Action::Latency(delay))
    }

    /// Close the connection without answering.
    ///
    /// ```
    /// use lease_elector::testing::Fault;
    /// let gone = Fault::drop_connection().times(3);
    /// # let _ = gone;
    /// ```
    pub fn drop_connection() -> Self {
        Self::new(Action::Drop)
    }

    /// Read the request and never answer it, keeping the connection open
    /// (a server that accepted the work and went silent).
    ///
    /// The request is held until
    /// [`clear_faults`](super::TestApiServer::clear_faults) is called after
    /// the rule fired (or, for a [`forever`](Fault::forever) rule of one
    /// [`candidate`](Fault::candidate),
    /// [`restore`](super::TestApiServer::restore) of that candidate), an
    /// outage starts, the server shuts down, or the client closes its side; the connection is then closed without an
    /// answer and the request logged with status 0. Only the hung
    /// connection waits: every connection has its own thread, and the
    /// waiting one holds no lock.
    ///
    /// ```
    /// use lease_elector::testing::{Fault, TestApiServer};
    ///
    /// let server = TestApiServer::start()?;
    /// // The next renewal of "pod-a" never comes back; everyone else is
    /// // served normally.
    /// server.inject(Fault::hang().method("PUT").candidate("pod-a"));
    /// // ... assert pod-a's own deadline gives up on the request ...
    /// server.clear_faults(); // releases (closes) the hung connection
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn hang() -> Self {
        Self::new(Action::Hang)
    }

    /// Answer with status `code` and the same Kubernetes `Status` body as
    /// [`status(code)`](Fault::status), plus the header `Retry-After:
    /// <value>` sent verbatim, whatever `value` is (`"-1"`, `"soon"`,
    /// `"18446744073709551615"`); a CR or LF in it would end the header line
    /// early, which is the test's own business.
    ///
    /// The body's `details.retryAfterSeconds` is `value` when that is a
    /// positive `int32` (what the real API server can send) and absent
    /// otherwise, so the header alone carries an absurd value.
    ///
    /// ```
    /// use lease_elector::testing::Fault;
    /// let overflow = Fault::retry_after(429, "99999999999999999999");
    /// let nonsense = Fault::retry_after(503, "soon");
    /// # let _ = (overflow, nonsense);
    /// ```
    pub fn retry_after(code: u16, value: &str) -> Self {
        Self::new(Action::RetryAfter(code, value.to_string()))
    }

    /// Answer with exactly `code` and `body` (`Content-Type:
    /// application/json`), e.g. for malformed, truncated or huge bodies.
    ///
    /// ```
    /// use lease_elector::testing::Fault;
    /// let truncated = Fault::raw(200, r#"{"kind": "Lease", "spec": {"#);
    /// # let _ = truncated;
    /// ```
    pub fn raw(code: u16, body: impl Into<Vec<u8>>) -> Self {
        Self::new(Action::Raw(code, body.into()))
    }

    /// Fire for `n` requests (default 1).
    ///
    /// ```
    /// use lease_elector::testing::Fault;
    /// let next_three_puts = Fault::status(503).method("PUT").times(3);
    /// # let _ = next_three_puts;
    /// ```
    pub fn times(mut self, n: usize) -> Self {
        self.remaining = n;
        self
    }

    /// Fire for every matching request until
    /// [`clear_faults`](super::TestApiServer::clear_faults) (or, for a rule
    /// of one [`candidate`](Fault::candidate),
    /// [`restore`](super::TestApiServer::restore)).
    ///
    /// ```
    /// use lease_elector::testing::Fault;
    /// let every_get = Fault::status(500).method("GET").forever();
    /// # let _ = every_get;
    /// ```
    pub fn forever(mut self) -> Self {
        self.remaining = FOREVER;
        self
    }

    /// Only match requests of the candidate whose client came from
    /// [`TestApiServer::client_config(identity)`](super::TestApiServer::client_config):
    /// the candidate is told apart by the bearer token that config sends.
    ///
    /// ```
    /// use lease_elector::testing::{Fault, TestApiServer};
    ///
    /// let server = TestApiServer::start()?;
    /// let _for_b = server.client_config("pod-b");
    /// // pod-b's next two renewals fail; pod-a's go through.
    /// server.inject(Fault::status(500).method("PUT").candidate("pod-b").times(2));
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn candidate(mut self, identity: &str) -> Self {
        self.candidate = Some(identity.to_string());
        self.bearer(&super::candidates::token(identity))
    }

    /// Only match requests with this method (case-insensitive).
    ///
    /// ```
    /// use lease_elector::testing::Fault;
    /// let renewals_only = Fault::status(500).method("put");
    /// # let _ = renewals_only;
    /// ```
    pub fn method(mut self, method: &str) -> Self {
        self.method = Some(method.to_ascii_uppercase());
        self
    }

    /// Only match requests whose target (path and query) contains `fragment`.
    ///
    /// ```
    /// use lease_elector::testing::Fault;
    /// let one_lease = Fault::status(404).path_contains("/leases/my-lease");
    /// # let _ = one_lease;
    /// ```
    pub fn path_contains(mut self, fragment: &str) -> Self {
        self.path_contains = Some(fragment.to_string());
        self
    }

    /// Only match requests carrying header `name` (case-insensitive) with
    /// exactly `value` (case-sensitive, as the server read it: without
    /// surrounding whitespace). Calling it again adds a condition: every
    /// header given must match. A request that sends the header several
    /// times matches when any of its values does.
    ///
    /// Header matching works whether or not the server checks tokens;
    /// when it does, a request it rejects (401, 403) never reaches the
    /// rules.
    ///
    /// ```
    /// use lease_elector::testing::Fault;
    /// let only_b = Fault::status(500).header("User-Agent", "candidate-b/1.0");
    /// # let _ = only_b;
    /// ```
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers
            .push((name.to_ascii_lowercase(), value.to_string()));
        self
    }

    /// Only match requests sent with `Authorization: Bearer <token>`, i.e.
    /// by one candidate when each candidate has its own token (see
    /// [`tokens`](super::TestApiServerBuilder::tokens);
    /// [`candidate`](Fault::candidate) does this for the clients of
    /// [`client_config`](super::TestApiServer::client_config)). Same as
    /// [`header("authorization", "Bearer <token>")`](Fault::header), so a
    /// client spelling the scheme `bearer` does not match.
    ///
    /// ```
    /// use lease_elector::testing::Fault;
    /// // pod-b's next two requests are dropped; pod-a's go through.
    /// let cut_b = Fault::drop_connection().bearer("pod-b-token").times(2);
    /// # let _ = cut_b;
    /// ```
    pub fn bearer(self, token: &str) -> Self {
        self.header("authorization", &format!("Bearer {token}"))
    }

    fn matches(&self, req: &Probe<'_>) -> bool {
        self.remaining > 0
            && self
                .method
                .as_deref()
                .is_none_or(|m| m.eq_ignore_ascii_case(req.method))
            && self
                .path_contains
                .as_deref()
                .is_none_or(|p| req.target.contains(p))
            && self.headers.iter().all(|(name, value)| {
                req.headers
                    .iter()
                    .any(|(n, v)| n.eq_ignore_ascii_case(name) && v == value)
            })
    }
}

/// What the rules look at in a request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Probe<'a> {
    pub(crate) method: &'a str,
    /// Path and query, as sent.
    pub(crate) target: &'a str,
    /// Name and value pairs, in any case (names are compared ignoring it).
    pub(crate) headers: &'a [(String, String)],
}

/// What the rules decided for one request.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Decision {
    /// Sum of the delays of every latency rule that fired.
    pub(crate) delay: Duration,
    /// The first non-latency rule that fired, if any.
    pub(crate) action: Option<Action>,
    /// That rule's id when it fires forever for one candidate: a request it
    /// hangs is let go once the rule is removed.
    pub(crate) forever_rule: Option<u64>,
    /// How many rules fired.
    pub(crate) fired: u64,
}

/// Match `rules` in insertion order against a request: every matching
/// latency rule fires (adding its delay) until the first matching
/// non-latency rule, which fires and ends the matching. Each rule that
/// fires uses up one of its counts; used-up rules are removed.
pub(crate) fn decide(rules: &mut Vec<Fault>, req: &Probe<'_>) -> Decision {
    let mut d = Decision::default();
    for rule in rules.iter_mut() {
        if !rule.matches(req) {
            continue;
        }
        if rule.remaining != FOREVER {
            rule.remaining -= 1;
        }
        d.fired += 1;
        match &rule.action {
            Action::Latency(delay) => d.delay = d.delay.saturating_add(*delay),
            other => {
                d.action = Some(other.clone());
                if rule.remaining == FOREVER && rule.candidate.is_some() {
                    d.forever_rule = Some(rule.id);
                }
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

    fn probe<'a>(method: &'a str, target: &'a str) -> Probe<'a> {
        Probe {
            method,
            target,
            headers: &[],
        }
    }

    #[test]
    fn latency_combines_with_the_next_rule() {
        let mut rules = vec![
            Fault::latency(Duration::from_millis(5)).times(2),
            Fault::status(500).method("PUT"),
            Fault::latency(Duration::from_millis(7)),
        ];
        let d = decide(&mut rules, &probe("PUT", "/x"));
        assert_eq!(d.delay, Duration::from_millis(5));
        assert_eq!(d.action, Some(Action::Status(500)));
        assert_eq!(rules.len(), 2);
        let d = decide(&mut rules, &probe("GET", "/x"));
        assert_eq!(d.delay, Duration::from_millis(12));
        assert_eq!(d.action, None);
        assert!(rules.is_empty());
    }

    #[test]
    fn filters_and_unlimited() {
        let mut rules = vec![Fault::drop_connection()
            .path_contains("/leases/a")
            .forever()];
        assert_eq!(decide(&mut rules, &probe("GET", "/leases/b")).action, None);
        for _ in 0..3 {
            assert_eq!(
                decide(&mut rules, &probe("GET", "/leases/a")).action,
                Some(Action::Drop)
            );
        }
        assert_eq!(rules.len(), 1);
    }

    #[test]
    fn header_rules_match_only_the_named_candidate() {
        let mut rules = vec![Fault::status(503).bearer("b").forever()];
        let a = [("authorization".to_string(), "Bearer a".to_string())];
        let b = [
            ("accept".to_string(), "application/json".to_string()),
            ("Authorization".to_string(), "Bearer b".to_string()),
        ];
        let lower_scheme = [("authorization".to_string(), "bearer b".to_string())];
        let with = |headers| Probe {
            method: "PUT",
            target: "/x",
            headers,
        };
        assert_eq!(decide(&mut rules, &probe("PUT", "/x")).action, None);
        assert_eq!(decide(&mut rules, &with(&a)).action, None);
        assert_eq!(decide(&mut rules, &with(&lower_scheme)).action, None);
        assert_eq!(
            decide(&mut rules, &with(&b)).action,
            Some(Action::Status(503))
        );
    }

    #[test]
    fn every_header_condition_must_hold() {
        let mut rules = vec![Fault::hang().header("X-A", "1").header("x-b", "2")];
        let only_a = [("x-a".to_string(), "1".to_string())];
        let both = [
            ("x-a".to_string(), "1".to_string()),
            ("x-b".to_string(), "2".to_string()),
        ];
        let with = |headers| Probe {
            method: "GET",
            target: "/",
            headers,
        };
        assert_eq!(decide(&mut rules, &with(&only_a)).action, None);
        assert_eq!(decide(&mut rules, &with(&both)).action, Some(Action::Hang));
        assert!(rules.is_empty());
    }
}
