//! Time budgets as values: one absolute deadline on the elector's clock per
//! renew round or acquire attempt, from which every request, 401 retry and
//! exec-plugin run draws only what is left.
//!
//! Handing the same `Duration` to several steps is how a round overruns its
//! renew deadline (three requests, each given the whole budget, take three
//! times it); a [`Deadline`] cannot be spent twice.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clock::{add_saturating, Clock, SystemClock, Wakeup};

/// The time by which a piece of work must end, on the elector's clock,
/// and whether a stop cut it short: what each [`Lock`](crate::Lock) call
/// gets (the time left for that one request).
///
/// ```
/// use lease_elector::Deadline;
/// use std::time::Duration;
///
/// let round = Deadline::from_now(Duration::from_secs(10));
/// // One request of the round may take at most 5 s, and never more than is left.
/// let request = round.capped(Duration::from_secs(5));
/// assert!(request.remaining() <= Duration::from_secs(5));
/// assert!(!request.is_expired());
/// assert!(Deadline::from_now(Duration::ZERO).is_expired());
/// ```
#[derive(Clone)]
pub struct Deadline {
    at: Instant,
    clock: Arc<dyn Clock>,
    cancel: Option<Wakeup>,
}

impl fmt::Debug for Deadline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deadline")
            .field("remaining", &self.remaining())
            .field("cancellable", &self.cancel.is_some())
            .finish()
    }
}

impl Deadline {
    /// `d` from now on `clock` (saturating: a huge `d` never overflows).
    #[doc(hidden)]
    pub fn after(clock: Arc<dyn Clock>, d: Duration) -> Self {
        let now = clock.now();
        Deadline {
            at: add_saturating(now, d),
            clock,
            cancel: None,
        }
    }

    /// `d` from now (saturating: a huge `d` never overflows).
    pub fn from_now(d: Duration) -> Self {
        Self::after(Arc::new(SystemClock), d)
    }

    /// The deadline `at` on `clock`.
    #[doc(hidden)]
    pub fn at(clock: Arc<dyn Clock>, at: Instant) -> Self {
        Deadline {
            at,
            clock,
            cancel: None,
        }
    }

    /// The same deadline, also ended early when `stop` is stopped.
    #[doc(hidden)]
    pub fn cancelled_by(mut self, stop: &Wakeup) -> Self {
        self.cancel = Some(stop.clone());
        self
    }

    /// The earlier of this deadline and `cap` from now: the budget of one
    /// step of a larger piece of work.
    pub fn capped(&self, cap: Duration) -> Self {
        let mut d = self.clone();
        d.at = d.at.min(add_saturating(self.clock.now(), cap));
        d
    }

    /// The instant itself, on the deadline's clock.
    #[doc(hidden)]
    pub fn instant(&self) -> Instant {
        self.at
    }

    /// Time left (zero once passed).
    pub fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(self.clock.now())
    }

    /// True once the deadline has passed or a stop cut it short.
    pub fn is_expired(&self) -> bool {
        self.remaining().is_zero() || self.is_cancelled()
    }

    /// Run `f` when the stop signal this deadline carries fires while the
    /// guard lives (nothing for a deadline without one).
    pub(crate) fn on_cancel(
        &self,
        f: impl Fn() + Send + Sync + 'static,
    ) -> Option<crate::clock::StopHook> {
        self.cancel.as_ref().map(|w| w.on_stop(f))
    }

    /// True once a stop cut it short: the elector was stopped while the
    /// request was under way (its answer will not be used).
    pub fn is_cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(Wakeup::is_stopped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn a_request_draws_only_what_is_left_of_its_round() {
        let clock = ManualClock::new();
        let round = Deadline::after(Arc::new(clock.clone()), Duration::from_secs(10));
        let request = round.capped(Duration::from_secs(5));
        assert_eq!(request.remaining(), Duration::from_secs(5));
        clock.advance(Duration::from_secs(8));
        let later = round.capped(Duration::from_secs(5));
        assert_eq!(later.remaining(), Duration::from_secs(2));
        clock.advance(Duration::from_secs(3));
        assert!(round.is_expired() && request.is_expired());
    }

    #[test]
    fn huge_budgets_saturate_instead_of_panicking() {
        let clock = Arc::new(ManualClock::new());
        let d = Deadline::after(clock.clone(), Duration::MAX);
        assert!(d.remaining() > Duration::from_secs(3600 * 24 * 365));
        assert!(!d.capped(Duration::MAX).is_expired());
    }

    #[test]
    fn cancel_ends_the_budget() {
        let stop = Wakeup::new();
        let d = Deadline::from_now(Duration::from_secs(60)).cancelled_by(&stop);
        assert!(!d.is_expired());
        stop.stop();
        assert!(d.is_expired() && d.capped(Duration::from_secs(1)).is_cancelled());
    }
}
