//! [`ElectorConfig`]: timing and behaviour, and client-go's rules on them.

use std::time::Duration;

use crate::error::{Error, Result};

/// client-go's `JitterFactor`: acquire retries wait `retry_period * [1, 2.2)`.
pub const JITTER_FACTOR: f64 = 1.2;

/// The shortest retry period an elector accepts: 100 ms. Every request a
/// candidate makes is paced by the retry period (a renew each, a poll
/// each, a retry after each failure), so a typo such as `2ms` or `1ns`,
/// which client-go's rules let through beside a 10 s renew deadline, would
/// send hundreds of requests a second; 100 ms still lets a test run
/// elections of a second or two.
pub const MIN_RETRY_PERIOD: Duration = Duration::from_millis(100);

/// Timing and behaviour of an elector; see [`LeaderElector::builder`](super::LeaderElector::builder).
#[derive(Debug, Clone)]
pub struct ElectorConfig {
    /// How long non-leaders wait after the last observed change before taking over.
    pub lease_duration: Duration,
    /// How long the leader keeps retrying a renew before it steps down.
    pub renew_deadline: Duration,
    /// Wait between attempts.
    pub retry_period: Duration,
    /// Release the lease when stopped while leading, so a candidate takes over at once.
    pub release_on_cancel: bool,
    /// After losing leadership (not after stop), go back to acquiring
    /// instead of ending. client-go ends; so does the default.
    pub rejoin: bool,
    /// Watch the Lease (one more thread and connection) so that every
    /// change reaches this candidate within a round trip: a release or a
    /// takeover wakes a follower at once, a leader whose Lease another
    /// writer took, freed or deleted ends its term at the event, and a
    /// follower times a crashed leader's expiry from its last renew as
    /// delivered. On by default (it needs `watch` on leases);
    /// where the server refuses it, or it keeps being cut, the elector
    /// polls as with `false`, logs that once with the fix, and
    /// [`ElectorStatus::watch`](crate::ElectorStatus::watch) says so. The
    /// renew path decides who leads either way: the watch changes timing,
    /// never safety.
    pub watch: bool,
    /// The longest one request may take (each is also bounded by what is
    /// left of its renew round). `None`: `max(renew_deadline / 2, 1 s)`, as
    /// client-go's `NewFromKubeconfig` and controller-runtime set, so one
    /// hung request is abandoned in time for a retry inside the deadline.
    ///
    /// The trade-off: a server slower than the cap on *every* request
    /// loses the lease, where an uncapped client would have kept it;
    /// raise the cap (or the renew deadline) for such a server.
    pub request_timeout: Option<Duration>,
    /// The budget of the release on stop (its own, not what was left of a
    /// round): with the default 5 s, and 5 s for queued Events, `stop()`
    /// returns within about 10 s whatever the server does, once the work
    /// has let go of its term.
    pub release_timeout: Duration,
    /// How long a release on stop waits for the work to let go of its
    /// term (every [`Term`](super::Term) the caller holds dropped). Past
    /// it, the lease is not released: it expires by itself, one lease
    /// duration after the last renew, as after a crash.
    pub release_grace: Duration,
    /// Give up acquiring when not leading this long after the elector
    /// starts: the elector then ends (its event channel disconnects without
    /// a `StartedLeading`) having written nothing more to the Lease. Judged
    /// by the elector thread between attempts, so an attempt in flight at
    /// that moment decides (its write may land), and `Some(ZERO)` makes
    /// exactly one attempt. Only the first term is waited for (a `rejoin`
    /// after a loss has no time-out). `None` (the default): keep trying.
    ///
    /// A lease left by a holder that crashed is taken over only after a
    /// whole `lease_duration` during which this candidate saw it unchanged
    /// (expiry is never judged by the holder's clock): with a time-out
    /// shorter than that, such a lease is never taken.
    pub acquire_timeout: Option<Duration>,
}

impl Default for ElectorConfig {
    /// client-go's usual values: 15s / 10s / 2s, and the watch on.
    fn default() -> Self {
        ElectorConfig {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            release_on_cancel: false,
            rejoin: false,
            watch: true,
            request_timeout: None,
            release_timeout: DEFAULT_RELEASE_TIMEOUT,
            release_grace: DEFAULT_RELEASE_GRACE,
            acquire_timeout: None,
        }
    }
}

/// Default [`ElectorConfig::release_timeout`].
pub const DEFAULT_RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Default [`ElectorConfig::release_grace`].
pub const DEFAULT_RELEASE_GRACE: Duration = Duration::from_secs(10);

impl ElectorConfig {
    /// The per-request cap in force: [`ElectorConfig::request_timeout`], or
    /// `max(renew_deadline / 2, 1 s)`.
    pub fn request_cap(&self) -> Duration {
        self.request_timeout
            .unwrap_or_else(|| (self.renew_deadline / 2).max(Duration::from_secs(1)))
    }

    /// Check client-go's rules: `lease_duration > renew_deadline >
    /// 1.2 × retry_period`, whole seconds for the lease duration (the wire
    /// carries seconds), and a retry period of at least
    /// [`MIN_RETRY_PERIOD`] (100 ms).
    pub fn validate(&self, identity: &str) -> Result<()> {
        let bad = |msg: String| Err(Error::InvalidConfig(msg));
        let secs = |d: Duration| format!("{:?}", d);
        if self.lease_duration < Duration::from_secs(1) || self.lease_duration.subsec_nanos() != 0 {
            return bad(format!(
                "leaseDuration must be a whole number of seconds, at least 1s (got {})",
                secs(self.lease_duration)
            ));
        }
        if self.lease_duration.as_secs() > i32::MAX as u64 {
            return bad(format!(
                "leaseDuration {} is too long",
                secs(self.lease_duration)
            ));
        }
        if self.retry_period < MIN_RETRY_PERIOD {
            return bad(format!(
                "retryPeriod must be at least {} (got {}): every request a candidate makes is paced by it",
                secs(MIN_RETRY_PERIOD),
                secs(self.retry_period)
            ));
        }
        if self.lease_duration <= self.renew_deadline {
            return bad(format!(
                "leaseDuration must be greater than renewDeadline (leaseDuration {}, renewDeadline {})",
                secs(self.lease_duration),
                secs(self.renew_deadline)
            ));
        }
        if self.renew_deadline.as_secs_f64() <= JITTER_FACTOR * self.retry_period.as_secs_f64() {
            return bad(format!(
                // JITTER_FACTOR written out: formatting an f64 would link
                // float formatting into every static binary.
                "renewDeadline must be greater than retryPeriod*JitterFactor (renewDeadline {}, retryPeriod {}, JitterFactor 1.2)",
                secs(self.renew_deadline),
                secs(self.retry_period)
            ));
        }
        crate::names::check_identity(identity)?;
        if self.request_timeout.is_some_and(|d| d.is_zero()) {
            return bad("requestTimeout must be greater than zero".into());
        }
        if self.release_timeout.is_zero() {
            return bad("releaseTimeout must be greater than zero".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One timing changed, with what the case is (and what the refusal
    /// says).
    type Change = (&'static str, fn(&mut ElectorConfig));
    type Refused = (&'static str, fn(&mut ElectorConfig), &'static str);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// client-go's 15 s / 10 s / 2 s with one timing changed.
    fn with(change: impl Fn(&mut ElectorConfig)) -> Result<()> {
        let mut c = ElectorConfig::default();
        change(&mut c);
        c.validate("me")
    }

    /// Each rule holds up to its edge, both sides of it: the edge itself
    /// is refused where client-go's rule is strict.
    #[test]
    fn each_rule_is_checked_at_its_edge() {
        assert!(with(|_| {}).is_ok());
        let ok: [Change; 4] = [
            ("lease 1s", |c| {
                c.lease_duration = ms(1000);
                c.renew_deadline = ms(900);
                c.retry_period = ms(100);
            }),
            ("lease at i32::MAX seconds", |c| {
                c.lease_duration = Duration::from_secs(i32::MAX as u64)
            }),
            ("lease just over the deadline", |c| {
                c.lease_duration = Duration::from_secs(11)
            }),
            ("deadline just over 1.2 × retry", |c| {
                c.renew_deadline = ms(2401)
            }),
        ];
        for (what, change) in ok {
            assert!(with(change).is_ok(), "{what}: {:?}", with(change));
        }
        let refused: [Refused; 10] = [
            (
                "lease under 1s",
                |c| c.lease_duration = ms(999),
                "whole number",
            ),
            (
                "lease not whole",
                |c| c.lease_duration = ms(15_500),
                "whole number",
            ),
            (
                "lease over i32::MAX seconds",
                |c| c.lease_duration = Duration::from_secs(i32::MAX as u64 + 1),
                "too long",
            ),
            (
                "retry zero",
                |c| c.retry_period = Duration::ZERO,
                "retryPeriod must be at least 100ms (got 0ns)",
            ),
            (
                "retry just under the floor",
                |c| c.retry_period = ms(100) - Duration::from_nanos(1),
                "retryPeriod must be at least 100ms (got 99.999999ms)",
            ),
            (
                "retry a typo of 2 ms beside the default deadline",
                |c| c.retry_period = ms(2),
                "retryPeriod must be at least 100ms",
            ),
            (
                "lease equal to the deadline",
                |c| c.lease_duration = Duration::from_secs(10),
                "greater than renewDeadline",
            ),
            (
                "deadline equal to 1.2 × retry",
                |c| c.renew_deadline = ms(2400),
                "JitterFactor",
            ),
            (
                "request timeout zero",
                |c| c.request_timeout = Some(Duration::ZERO),
                "requestTimeout",
            ),
            (
                "release timeout zero",
                |c| c.release_timeout = Duration::ZERO,
                "releaseTimeout",
            ),
        ];
        for (what, change, says) in refused {
            match with(change) {
                Err(Error::InvalidConfig(msg)) => assert!(msg.contains(says), "{what}: {msg}"),
                other => panic!("{what}: {other:?}"),
            }
        }
    }

    /// Half the renew deadline, at least 1 s, unless a timeout is given.
    #[test]
    fn the_request_cap_is_half_the_renew_deadline_at_least_a_second() {
        let cap = |rd: u64, timeout: Option<u64>| {
            ElectorConfig {
                renew_deadline: ms(rd),
                request_timeout: timeout.map(ms),
                ..ElectorConfig::default()
            }
            .request_cap()
        };
        assert_eq!(cap(10_000, None), ms(5000));
        assert_eq!(cap(1500, None), ms(1000));
        assert_eq!(cap(10_000, Some(300)), ms(300));
    }
}
