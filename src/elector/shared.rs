//! The state the elector thread writes and the views ([`Probe`], the
//! handle, a [`Stopper`]) read, and the one place a term starts and ends,
//! so that `StartedLeading` and `StoppedLeading` are sent exactly once each
//! and in order, by whichever thread ends the term first.
//!
//! Each fact has one home: the Lease's in [`Knowledge`], a term's in its
//! [`Term`] (the latest is kept after it ends, for what the status says of
//! it), the requests' here.
//!
//! [`Probe`]: super::Probe
//! [`Stopper`]: super::Stopper

use std::sync::atomic::AtomicBool;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::config::ElectorConfig;
use super::knowledge::Knowledge;
use super::leader_event::LeaderEvent;
use super::term::StopReason;
use super::term::{Term, TermEnd};
use crate::clock::{Clock, Wakeup};
use crate::status::{FailureKind, LastError};

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) attempts: u64,
    pub(super) renews: u64,
    pub(super) slow_path_renews: u64,
    pub(super) transitions: u64,
    pub(super) requests: u64,
    pub(super) failed_requests: u64,
    pub(super) held_by_other: u64,
    pub(super) consecutive_failures: u64,
}

#[derive(Debug)]
pub(super) struct SharedState {
    /// The last term started, also once over: in progress until the
    /// elector closed it ([`Term::close`]).
    pub(super) latest: Option<Term>,
    /// The last term lost (closed as lost, or found taken after it was
    /// closed): why, the status says until another is lost.
    pub(super) last_lost: Option<Term>,
    /// What this process knows of its Lease.
    pub(super) lease: Knowledge,
    /// When a request last succeeded (or the elector started, before one did).
    pub(super) last_success: Instant,
    pub(super) counters: Counters,
    pub(super) last_error: Option<LastError>,
    /// The kind of failure last logged at warn, and when.
    pub(super) logged_failure: Option<(FailureKind, Instant)>,
    /// The caller's channel, until the elector ends. Sent to under this
    /// lock, so that the thread that starts a term and the one that ends
    /// it cannot reorder `StartedLeading` and `StoppedLeading`.
    events: Option<Sender<LeaderEvent>>,
}

impl SharedState {
    /// The term in progress (current or past its deadline, not yet
    /// closed); `None` between terms.
    pub(super) fn term(&self) -> Option<&Term> {
        self.latest.as_ref().filter(|t| !t.is_closed())
    }
}

#[derive(Debug)]
pub(super) struct Shared {
    state: Mutex<SharedState>,
    pub(super) wake: Wakeup,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) config: ElectorConfig,
    pub(super) describe: String,
    pub(super) identity: String,
    /// Set by a `Drop` during a panic: stop without releasing.
    pub(super) skip_release: AtomicBool,
    /// The Lease watch's state, once the elector runs with one.
    pub(super) watch: Mutex<Option<Arc<crate::watch::WatchState>>>,
    /// The caller reads every event (`LeaderElector::run` does): a term
    /// sent with `StartedLeading` is a hold from the moment it is sent, so
    /// that a stop between the send and the read does not release before
    /// the work that read will start has returned.
    pub(super) hold_on_send: AtomicBool,
    /// A release was written (what `LeaderElector::run` reports).
    pub(super) released: AtomicBool,
}

impl Shared {
    pub(super) fn new(
        wake: Wakeup,
        clock: Arc<dyn Clock>,
        config: ElectorConfig,
        describe: String,
        identity: String,
        events: Sender<LeaderEvent>,
    ) -> Shared {
        let now = clock.now();
        Shared {
            state: Mutex::new(SharedState {
                latest: None,
                last_lost: None,
                lease: Knowledge::new(&identity, now),
                last_success: now,
                counters: Counters::default(),
                last_error: None,
                logged_failure: None,
                events: Some(events),
            }),
            wake,
            clock,
            config,
            describe,
            identity,
            skip_release: AtomicBool::new(false),
            watch: Mutex::new(None),
            hold_on_send: AtomicBool::new(false),
            released: AtomicBool::new(false),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, SharedState> {
        // Plain data, written whole: a poisoned guard is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `f` on what this process knows of its Lease, under the lock (held
    /// for `f` alone: never across a request, a log line or an event).
    pub(super) fn know<R>(&self, f: impl FnOnce(&mut Knowledge) -> R) -> R {
        f(&mut self.lock().lease)
    }

    pub(super) fn now(&self) -> Instant {
        self.clock.now()
    }

    /// How the elector learns of the Lease's changes now.
    pub(super) fn watch_mode(&self) -> crate::status::WatchMode {
        self.watch
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map_or(crate::status::WatchMode::Off, |w| w.mode())
    }

    /// Send `event`; a caller that dropped its receiver just doesn't listen.
    pub(super) fn emit(&self, event: LeaderEvent) {
        Self::send(&self.lock(), event);
    }

    fn send(st: &SharedState, event: LeaderEvent) {
        if let Some(events) = &st.events {
            let _ = events.send(event);
        }
    }

    /// The elector has ended: disconnect the caller's channel.
    pub(super) fn close_events(&self) {
        self.lock().events = None;
    }

    /// Start `term` and tell the caller.
    pub(super) fn start_term(&self, term: &Term) {
        let mut st = self.lock();
        st.latest = Some(term.share());
        st.lease.term_began();
        // Stamped when the write is known to have succeeded: the attempt's
        // start can precede the previous holder's release, and `at` must
        // order terms exactly.
        let at = self.now();
        // Not a hold until the caller receives it (`LeaderEvents`), unless
        // the caller reads every event.
        let sent = if self.hold_on_send.load(std::sync::atomic::Ordering::Relaxed) {
            term.held()
        } else {
            term.share()
        };
        Self::send(&st, LeaderEvent::StartedLeading { at, term: sent });
    }

    /// End `term` if it is still in progress: close it (over, with its
    /// loss and reason) and send `StoppedLeading`. False when it had
    /// already been ended (by a stop, or by its deadline on the receiving
    /// thread); a term found taken since is still marked so, as its work
    /// owes nobody a grace any more ([`Term::taken_over`]).
    pub(super) fn end_term(&self, term: &Term, end: &TermEnd) -> bool {
        let mut st = self.lock();
        if st.term().is_none_or(|t| !t.same_term(term)) {
            if let TermEnd::Taken(why) = end {
                // Taken after it ran out, with no term since: the loss is
                // now a takeover.
                if st.latest.as_ref().is_some_and(|t| t.same_term(term)) {
                    term.taken_after_close(why);
                    st.last_lost = Some(term.share());
                } else {
                    term.end(true);
                }
            }
            return false;
        }
        let at = self.now();
        term.close(at, end);
        if end.reason() == StopReason::Lost {
            st.last_lost = Some(term.share());
        }
        Self::send(
            &st,
            LeaderEvent::StoppedLeading {
                at,
                reason: end.reason(),
            },
        );
        true
    }

    /// Ask the elector to stop: wake the thread and interrupt its request,
    /// then end the term in progress at once (so `StoppedLeading` does not
    /// wait for a request to a hung server). In that order: a thread that
    /// finds its term ended also finds the stop, and so releases.
    pub(super) fn request_stop(&self) {
        self.wake.stop();
        if let Some(term) = self.current_term() {
            self.end_term(&term, &TermEnd::Stopped);
        }
    }

    /// The term in progress, if any (not a hold).
    pub(super) fn current_term(&self) -> Option<Term> {
        self.lock().term().map(Term::share)
    }

    /// Why a term ended at its renew deadline, with the last error if any.
    pub(super) fn deadline_passed(&self) -> String {
        let st = self.lock();
        let last = match (&st.last_error, st.counters.consecutive_failures) {
            (Some(e), n) if n > 0 => format!(" (last error: {})", e.message),
            _ => String::new(),
        };
        format!(
            "no renew succeeded within the renew deadline of {}{last}",
            humantime::format_duration(self.config.renew_deadline)
        )
    }

    /// How long since the last successful request (or the start).
    pub(super) fn since_success(&self, st: &SharedState) -> Duration {
        self.now().saturating_duration_since(st.last_success)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::elector::lab::{begin_term, elector_state};

    /// A term's end at its deadline says so, with the last error only
    /// while requests were failing.
    #[test]
    fn a_deadline_passed_tells_the_last_error_while_requests_fail() {
        let (shared, _events) =
            elector_state(Arc::new(ManualClock::new()), ElectorConfig::default());
        let plain = "no renew succeeded within the renew deadline of 10s";
        assert_eq!(shared.deadline_passed(), plain);
        shared.lock().last_error = Some(LastError {
            kind: FailureKind::Server,
            message: "server answered 500".into(),
            hint: "retrying".into(),
            at: shared.now(),
        });
        assert_eq!(shared.deadline_passed(), plain, "no failure since");
        shared.lock().counters.consecutive_failures = 1;
        assert_eq!(
            shared.deadline_passed(),
            format!("{plain} (last error: server answered 500)")
        );
    }

    /// A term that ran out and is then found taken gives the takeover as
    /// the last loss's reason, unless a term has begun since (whose
    /// status it would misreport).
    #[test]
    fn a_run_out_term_found_taken_tells_the_takeover_unless_another_began() {
        let clock = ManualClock::new();
        for begun_since in [false, true] {
            let (shared, _events) =
                elector_state(Arc::new(clock.clone()), ElectorConfig::default());
            let first = begin_term(&shared, 1);
            assert!(shared.end_term(&first, &TermEnd::Expired("ran out".into())));
            if begun_since {
                begin_term(&shared, 2);
            }
            assert!(!shared.end_term(&first, &TermEnd::Taken("deleted".into())));
            assert!(first.taken_over());
            let told = shared.lock().last_lost.as_ref().and_then(Term::loss);
            let want = if begun_since { "ran out" } else { "deleted" };
            assert_eq!(told.as_deref(), Some(want), "begun since: {begun_since}");
        }
    }
}
