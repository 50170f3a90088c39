//! [`LeaderEvents`]: the caller's end of an elector's event channel.
//!
//! It reads like a `std::sync::mpsc::Receiver`, with two things of its own:
//! a `Term` received in `StartedLeading` counts as the caller's hold on
//! the term (a release on stop waits for it to be dropped), and a term
//! whose renew deadline has passed is ended here, by the receiving thread,
//! if the elector thread has not ended it yet. The elector thread can be
//! held up where the caller's code runs (a logger writing to a stderr
//! nobody reads), and the end of a term must not wait for it.

use std::sync::mpsc::{Receiver, RecvError, RecvTimeoutError, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::leader_event::LeaderEvent;
use super::shared::Shared;
use super::term::TermEnd;

/// The events of one elector, as [`LeaderElector::spawn`](super::LeaderElector::spawn)
/// returns them; it disconnects when the elector ends.
///
/// `StoppedLeading` comes no later than the term's renew deadline, also
/// when the elector thread is held up: a receiving thread that is waiting
/// ends the term itself at that instant.
///
/// ```
/// use lease_elector::testing::TestApiServer;
/// use lease_elector::{Client, ClientConfig, LeaderElector, LeaderEvent, LeaseLock};
/// use std::time::Duration;
///
/// let server = TestApiServer::start()?;
/// let lock = LeaseLock::new(Client::new(ClientConfig::new(server.url()))?, "default", "x", "me");
/// let (handle, events) = LeaderElector::builder(lock).build()?.spawn()?;
/// match events.recv_timeout(Duration::from_secs(10))? {
///     LeaderEvent::NewLeader { identity, .. } => assert_eq!(identity, "me"),
///     other => panic!("{other:?}"),
/// }
/// assert!(matches!(events.recv()?, LeaderEvent::StartedLeading { .. }));
/// handle.stop()?;
/// assert!(matches!(events.recv()?, LeaderEvent::StoppedLeading { .. }));
/// assert!(events.recv().is_err()); // the elector has ended
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct LeaderEvents {
    rx: Receiver<LeaderEvent>,
    shared: Arc<Shared>,
}

impl LeaderEvents {
    pub(super) fn new(rx: Receiver<LeaderEvent>, shared: Arc<Shared>) -> LeaderEvents {
        LeaderEvents { rx, shared }
    }

    /// Block until the next event; an error once the elector has ended
    /// and every event was read.
    pub fn recv(&self) -> Result<LeaderEvent, RecvError> {
        self.next(None).map_err(|_| RecvError)
    }

    /// Block until the next event, at most `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<LeaderEvent, RecvTimeoutError> {
        let give_up = Instant::now().checked_add(timeout);
        self.next(Some(give_up.unwrap_or_else(far_future)))
    }

    /// The next event if there is one now.
    pub fn try_recv(&self) -> Result<LeaderEvent, TryRecvError> {
        self.end_overdue_term();
        self.rx.try_recv().map(|e| self.hold(e))
    }

    /// The events there are now, without blocking.
    pub fn try_iter(&self) -> impl Iterator<Item = LeaderEvent> + '_ {
        std::iter::from_fn(move || self.try_recv().ok())
    }

    /// Blocking iterator over the events, until the elector ends.
    pub fn iter(&self) -> impl Iterator<Item = LeaderEvent> + '_ {
        std::iter::from_fn(move || self.recv().ok())
    }

    /// Received, a `StartedLeading`'s term is the caller's: a hold.
    fn hold(&self, event: LeaderEvent) -> LeaderEvent {
        match event {
            LeaderEvent::StartedLeading { at, term } => LeaderEvent::StartedLeading {
                at,
                term: term.held(),
            },
            other => other,
        }
    }

    /// End the term in progress if its deadline has passed (its
    /// `StoppedLeading` is then in the channel); else how long until it.
    fn end_overdue_term(&self) -> Option<Duration> {
        let term = self.shared.current_term()?;
        if term.is_current() {
            return Some(
                term.valid_until()
                    .saturating_duration_since(self.shared.now()),
            );
        }
        let why = self.shared.deadline_passed();
        self.shared.end_term(&term, &TermEnd::Expired(why));
        None
    }

    fn next(&self, give_up: Option<Instant>) -> Result<LeaderEvent, RecvTimeoutError> {
        loop {
            let to_deadline = self.end_overdue_term();
            let to_give_up = give_up.map(|at| at.saturating_duration_since(Instant::now()));
            let received = match (to_deadline, to_give_up) {
                (None, None) => self.rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                (a, b) => self
                    .rx
                    // A millisecond past the deadline, so the term has ended
                    // by the clock when this thread looks again.
                    .recv_timeout(
                        a.map_or(Duration::MAX, |d| d + Duration::from_millis(1))
                            .min(b.unwrap_or(Duration::MAX)),
                    ),
            };
            match received {
                Ok(event) => return Ok(self.hold(event)),
                Err(RecvTimeoutError::Timeout) if give_up.is_none_or(|at| Instant::now() < at) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

fn far_future() -> Instant {
    crate::clock::add_saturating(Instant::now(), Duration::MAX)
}

impl IntoIterator for LeaderEvents {
    type Item = LeaderEvent;
    type IntoIter = Box<dyn Iterator<Item = LeaderEvent> + Send>;

    /// The events, until the elector ends.
    fn into_iter(self) -> Self::IntoIter {
        Box::new(std::iter::from_fn(move || self.recv().ok()))
    }
}

impl<'a> IntoIterator for &'a LeaderEvents {
    type Item = LeaderEvent;
    type IntoIter = Box<dyn Iterator<Item = LeaderEvent> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

#[cfg(test)]
impl LeaderEvents {
    /// The events sent on `rx`, for a test, with no term in progress.
    pub(super) fn from_channel(rx: Receiver<LeaderEvent>) -> LeaderEvents {
        let (shared, _) = super::lab::elector_state(
            Arc::new(crate::clock::ManualClock::new()),
            super::ElectorConfig::default(),
        );
        LeaderEvents::new(rx, shared)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;
    use crate::clock::{ManualClock, SystemClock};
    use crate::elector::lab::term_begun;
    use crate::elector::{ElectorConfig, StopReason};

    /// A candidate that began a term now, its deadline `renew_deadline`
    /// on `clock`, and its events as the caller gets them.
    fn leading(clock: Arc<dyn crate::clock::Clock>, renew_deadline: Duration) -> LeaderEvents {
        let config = ElectorConfig {
            lease_duration: renew_deadline * 2,
            renew_deadline,
            ..ElectorConfig::default()
        };
        let (shared, _term, rx) = term_begun(clock, config);
        LeaderEvents::new(rx, shared)
    }

    fn lost(event: Option<LeaderEvent>) -> bool {
        matches!(
            event,
            Some(LeaderEvent::StoppedLeading {
                reason: StopReason::Lost,
                ..
            })
        )
    }

    /// What `f` returns, asked on a thread of its own; `None` when it has
    /// not answered within 10 s (a receive that never gives up).
    fn answered<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(10)).ok()
    }

    /// Looked at without blocking, a term past its deadline is ended by
    /// the receiving thread, its `StoppedLeading` read after its start.
    #[test]
    fn a_term_past_its_deadline_is_ended_where_the_events_are_read() {
        let clock = ManualClock::new();
        let events = leading(Arc::new(clock.clone()), Duration::from_secs(10));
        let first: Vec<_> = events.try_iter().collect();
        assert!(
            matches!(first[..], [LeaderEvent::StartedLeading { .. }]),
            "{first:?}"
        );
        clock.advance(Duration::from_secs(10) - Duration::from_nanos(1));
        assert_eq!(events.try_iter().count(), 0, "still current");
        clock.advance(Duration::from_nanos(1));
        assert!(lost(events.try_iter().next()), "ended at its deadline");

        let events = leading(Arc::new(clock.clone()), Duration::from_secs(10));
        assert!(matches!(
            events.iter().next(),
            Some(LeaderEvent::StartedLeading { .. })
        ));
    }

    /// A receiving thread that waits ends the term at its deadline and
    /// returns its `StoppedLeading`, before its own time-out.
    #[test]
    fn a_waiting_receiver_ends_the_term_at_its_deadline() {
        let events = leading(Arc::new(SystemClock), Duration::from_millis(50));
        assert!(matches!(
            events.recv_timeout(Duration::from_secs(5)),
            Ok(LeaderEvent::StartedLeading { .. })
        ));
        let got = answered(move || events.recv_timeout(Duration::from_secs(5)).ok());
        let shown = format!("{got:?}");
        assert!(lost(got.flatten()), "{shown}");
    }

    /// A time-out is kept when the deadline is nearer than the wait's
    /// millisecond past it, and when there is no term at all.
    #[test]
    fn a_receive_times_out_with_a_deadline_under_a_millisecond_away_or_none() {
        let clock = ManualClock::new();
        let events = leading(Arc::new(clock.clone()), Duration::from_secs(10));
        let _ = events.try_recv();
        clock.advance(Duration::from_secs(10) - Duration::from_micros(1));
        let got = answered(move || events.recv_timeout(Duration::from_millis(20)).err());
        assert_eq!(got, Some(Some(RecvTimeoutError::Timeout)));

        let (_tx, rx) = mpsc::channel();
        let events = LeaderEvents::from_channel(rx);
        let got = answered(move || events.recv_timeout(Duration::from_millis(1)).err());
        assert_eq!(got, Some(Some(RecvTimeoutError::Timeout)));
    }
}
