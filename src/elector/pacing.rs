//! [`Pacing`]: when the elector's next request may go. A failing server
//! sees at most one attempt a retry period from a candidate: pauses are
//! jittered retry periods (client-go's `wait.Jitter`, factor 1.2), counted
//! from the last request sent, and never shorter than what the server
//! asked for (`Retry-After`, clamped).

use std::time::{Duration, Instant};

use super::config::JITTER_FACTOR;
use crate::clock::add_saturating;
use crate::random::SplitMix64;

/// The last request sent, and the source of the pauses' jitter.
#[derive(Debug)]
pub(super) struct Pacing {
    last: Option<LastRequest>,
    /// Seeded from the OS when the thread runs, from the schedule in the
    /// simulation.
    jitter: SplitMix64,
}

/// The last request sent: when, whether it failed, and how long the
/// server asked us to wait (`Retry-After`, zero if it did not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LastRequest {
    pub(super) at: Instant,
    pub(super) failed: bool,
    pub(super) asked: Duration,
}

impl LastRequest {
    /// No sooner than the server asked, counted from this request.
    pub(super) fn asked_until(&self) -> Instant {
        add_saturating(self.at, self.asked)
    }
}

impl Pacing {
    pub(super) fn new(jitter_seed: u64) -> Pacing {
        Pacing {
            last: None,
            jitter: SplitMix64::new(jitter_seed),
        }
    }

    /// A request was sent `at`; it `failed`, and the server `asked` to
    /// wait so long.
    pub(super) fn sent(&mut self, at: Instant, failed: bool, asked: Duration) {
        self.last = Some(LastRequest { at, failed, asked });
    }

    /// The last request sent, if any.
    pub(super) fn last(&self) -> Option<LastRequest> {
        self.last
    }

    /// `d * [1, 1 + JITTER_FACTOR)`, as `wait.Jitter`.
    pub(super) fn jittered(&mut self, d: Duration) -> Duration {
        d.mul_f64(1.0 + self.jitter.unit() * JITTER_FACTOR)
    }

    /// When the first request after a failed one may go: a jittered
    /// `retry_period`, or what the server asked if longer, after it.
    /// `None` when the last request did not fail (or none was sent).
    pub(super) fn after_failure(&mut self, retry_period: Duration) -> Option<Instant> {
        let last = self.last.filter(|l| l.failed)?;
        let pause = self.jittered(retry_period).max(last.asked);
        Some(add_saturating(last.at, pause))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_a_failure_the_next_request_waits_a_jittered_retry_period_or_what_was_asked() {
        let t0 = Instant::now();
        let rp = Duration::from_secs(2);
        let mut p = Pacing::new(7);
        assert_eq!(p.after_failure(rp), None, "nothing sent");
        p.sent(t0, false, Duration::ZERO);
        assert_eq!(p.after_failure(rp), None, "the last did not fail");
        p.sent(t0, true, Duration::ZERO);
        for _ in 0..1000 {
            let at = p.after_failure(rp).expect("failed");
            let pause = at - t0;
            assert!(pause >= rp && pause < rp.mul_f64(2.2), "{pause:?}");
        }
        p.sent(t0, true, Duration::from_secs(9));
        assert_eq!(p.after_failure(rp), Some(t0 + Duration::from_secs(9)));
        assert_eq!(
            p.last().map(|l| l.asked_until()),
            Some(t0 + Duration::from_secs(9))
        );
    }
}
