//! The elector thread's state machine, read top to bottom like client-go's
//! `leaderelection.go`: `run`, then `acquire` and `renew` (each a loop of
//! attempts), `step_down` and `release`, all built on
//! `try_acquire_or_renew`. The rules it keeps are in the module docs of
//! [`crate::elector`].

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config::{ElectorConfig, JITTER_FACTOR};
use super::shared::Shared;
use super::term::Term;
use super::{LeaderEvent, StopReason};
use crate::client::MAX_RETRY_AFTER;
use crate::clock::{add_saturating, Wake};
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::lease::{LeaderElectionRecord, MicroTime};
use crate::lock::Lock;
use crate::status::{FailureKind, LastError};

/// A failure of the same kind is logged at warn at most this often.
const FAILURE_LOG_EVERY: Duration = Duration::from_secs(60);

/// How a leadership term ended.
enum TermEnd {
    Stopped,
    /// Lost, and why (for the log line and `ElectorStatus::last_loss`).
    Lost(String),
}

/// At most this many unconfirmed writes are remembered as ours.
const MAX_PENDING_WRITES: usize = 8;

/// The state owned by the elector thread.
pub(super) struct Run {
    lock: Box<dyn Lock>,
    shared: Arc<Shared>,
    /// The term in progress (the thread's own copy: a stop may end it
    /// from another thread first).
    term: Option<Term>,
    /// The token of this process's last term: a new term on a record we
    /// wrote with that token must take a greater one.
    last_token: Option<u64>,
    /// The record as last observed, and when (local clock) it last changed.
    observed: Option<LeaderElectionRecord>,
    observed_at: Instant,
    /// Records this process wrote: the last confirmed one first, then any
    /// sent since without a confirmed answer (a write whose answer was lost
    /// may still have landed). A record under our identity that is none of
    /// these was written by someone else using the same identity.
    written: Vec<LeaderElectionRecord>,
    reported_leader: Option<String>,
    jitter: RandomState,
    jitter_count: u64,
}

impl Drop for Run {
    /// However the thread ends (also by a panic), the caller's channel
    /// disconnects with it.
    fn drop(&mut self) {
        self.shared.close_events();
    }
}

impl Run {
    pub(super) fn new(lock: Box<dyn Lock>, shared: Arc<Shared>) -> Run {
        Run {
            lock,
            term: None,
            last_token: None,
            observed: None,
            observed_at: shared.now(),
            written: Vec::new(),
            reported_leader: None,
            jitter: RandomState::new(),
            jitter_count: 0,
            shared,
        }
    }

    fn cfg(&self) -> &ElectorConfig {
        &self.shared.config
    }

    fn now(&self) -> Instant {
        self.shared.now()
    }

    /// A budget on the elector's clock, ended early by `stop()`.
    fn deadline(&self, at: Instant) -> Deadline {
        Deadline::at(self.shared.clock.clone(), at).cancelled_by(&self.shared.wake)
    }

    pub(super) fn run(mut self) -> Result<()> {
        // Only the first term is waited for within the time-out.
        let mut give_up_at = self
            .cfg()
            .acquire_timeout
            .map(|t| add_saturating(self.now(), t));
        loop {
            if !self.acquire(give_up_at.take()) {
                return Ok(());
            }
            match self.renew() {
                TermEnd::Stopped => {
                    self.step_down(StopReason::Stopped, None);
                    return self.release();
                }
                TermEnd::Lost(why) => {
                    self.step_down(StopReason::Lost, Some(why));
                    if !self.cfg().rejoin {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Attempt until the lease is ours; false when stopped, or at
    /// `give_up_at` without leading.
    ///
    /// After an attempt that failed (an error, or no answer) the next one
    /// is a jittered retry period away (or the server's clamped
    /// `Retry-After`): a fleet of candidates is a gentle client of a failing
    /// API server. Only an answered attempt that showed a held lease may
    /// wake earlier, at that lease's observed expiry.
    ///
    /// The time-out is judged here, between attempts, never by cutting one
    /// short: an attempt's write may land after its answer is abandoned,
    /// and a candidate that gave up would leave it unreleased.
    fn acquire(&mut self, give_up_at: Option<Instant>) -> bool {
        let desc = self.shared.describe.clone();
        log::info!("attempting to acquire leader lease {desc}...");
        let mut first = true;
        loop {
            if self.shared.wake.is_stopped() {
                return false;
            }
            if !first && give_up_at.is_some_and(|at| self.now() >= at) {
                log::info!("not leading lease {desc} within the acquire time-out: giving up");
                return false;
            }
            first = false;
            let start = self.now();
            let attempt =
                self.try_acquire_or_renew(&self.deadline(start + self.cfg().renew_deadline));
            self.maybe_report_transition();
            self.note_attempt(&attempt, "acquiring");
            let stopped = match attempt {
                Ok(true) => {
                    self.start_term(start);
                    return true;
                }
                // A poke (the watched Lease changed) only makes the next
                // attempt earlier; the expiry rule still decides.
                Ok(false) => {
                    let pause = self
                        .jittered(self.cfg().retry_period)
                        .min(self.until_expiry())
                        .min(self.until(give_up_at));
                    self.shared.clock.sleep(pause, &self.shared.wake) == Wake::Stopped
                }
                // After a failure, nothing shortens the pause (but giving
                // up): a failing server sees at most one attempt per retry
                // period.
                Err(_) => {
                    let pause = self
                        .jittered(self.cfg().retry_period)
                        .max(retry_after(&attempt))
                        .min(self.until(give_up_at));
                    self.pause(pause)
                }
            };
            if stopped {
                return false;
            }
        }
    }

    /// Count an attempt, and make a failing set-up visible: the first
    /// failure of a kind is logged at warn with what to check, repeats of
    /// the same kind at most once a minute, and recovery (after a warned
    /// failure) at warn too, so that the default level tells the story.
    fn note_attempt(&mut self, attempt: &Result<bool>, doing: &str) {
        let now = self.now();
        let held_by_other = matches!(attempt, Ok(false)) && self.held_by_other();
        let desc = &self.shared.describe;
        let namespace = desc.split_once('/').map_or("", |(ns, _)| ns);
        let mut st = self.shared.lock();
        st.counters.attempts += 1;
        let e = match attempt {
            Ok(won) => {
                st.last_success = now;
                if *won {
                    st.counters.renews += 1;
                    st.last_renew_wall = Some(self.shared.clock.system_time());
                }
                if held_by_other {
                    st.counters.held_by_other += 1;
                }
                let failed = st.counters.consecutive_failures;
                if st.logged_failure.is_some() {
                    log::warn!(
                        "lease {desc}: requests succeed again after {failed} failed attempt(s)"
                    );
                } else if failed > 0 {
                    log::info!(
                        "lease {desc}: requests succeed again after {failed} failed attempt(s)"
                    );
                }
                st.counters.consecutive_failures = 0;
                st.logged_failure = None;
                return;
            }
            // A stop cut the request short: not a failure of the set-up.
            Err(_) if self.shared.wake.is_stopped() => return,
            Err(e) => e,
        };
        let kind = FailureKind::of(e);
        st.counters.consecutive_failures += 1;
        let hint = FailureKind::hint_for(e, namespace);
        st.last_error = Some(LastError {
            kind,
            message: e.to_string(),
            hint: hint.clone(),
            at: now,
        });
        let repeat_due = match st.logged_failure {
            Some((k, at)) => k != kind || now.saturating_duration_since(at) >= FAILURE_LOG_EVERY,
            None => true,
        };
        if repeat_due {
            st.logged_failure = Some((kind, now));
            log::warn!(
                "error {doing} lease {desc}: {e} ({}; {} failed attempt(s) in a row)",
                hint,
                st.counters.consecutive_failures
            );
        } else {
            log::debug!("error {doing} lease {desc}: {e}");
        }
    }

    /// The lease is ours: a new term, whose token is the
    /// `leaseTransitions` we just wrote.
    fn start_term(&mut self, start: Instant) {
        let token = self
            .observed
            .as_ref()
            .map_or(0, |r| u64::try_from(r.leader_transitions).unwrap_or(0));
        let term = Term::new(
            token,
            self.lock.identity(),
            &self.shared.describe,
            start,
            self.cfg().renew_deadline,
            self.shared.clock.clone(),
        );
        self.last_token = Some(token);
        self.lock
            .record_event(&format!("{} became leader", self.lock.identity()));
        log::info!(
            "successfully acquired lease {} (term token {token})",
            self.shared.describe
        );
        self.shared.start_term(&term, start);
        self.term = Some(term);
    }

    /// Renew every retry period until stopped, or until no renew succeeded
    /// for `renew_deadline` since the start of the last successful one.
    ///
    /// That instant is the round's one deadline (the term's `valid_until`):
    /// every request of every attempt in the round draws from it, so the
    /// round cannot overrun it. Woken past it (a freeze), the loop steps
    /// down before it sends anything.
    fn renew(&mut self) -> TermEnd {
        let desc = self.shared.describe.clone();
        let Some(term) = self.term.clone() else {
            return TermEnd::Lost("no term in progress".into());
        };
        loop {
            let round_end = term.valid_until();
            // Never sleep past the deadline: after a slow renew, less than a
            // retry period may be left before we must step down.
            let left = round_end.saturating_duration_since(self.now());
            if self.pause(self.cfg().retry_period.min(left)) {
                return TermEnd::Stopped;
            }
            loop {
                let start = self.now();
                if start >= round_end {
                    log::info!("failed to renew lease {desc}: timed out waiting for the condition");
                    return TermEnd::Lost(self.deadline_passed());
                }
                let attempt = self.try_acquire_or_renew(&self.deadline(round_end));
                self.maybe_report_transition();
                self.note_attempt(&attempt, "renewing");
                match attempt {
                    Ok(true) if !term.renewed(start) => {
                        // Ended meanwhile: by a stop, or by its deadline.
                        if self.shared.wake.is_stopped() {
                            return TermEnd::Stopped;
                        }
                        return TermEnd::Lost(self.deadline_passed());
                    }
                    Ok(true) => {
                        self.shared.lock().last_renew = Some(start);
                        log::debug!("successfully renewed lease {desc}");
                        break;
                    }
                    Ok(false) if self.held_by_other() => {
                        let holder = self.observed.as_ref().map_or("", |r| &r.holder_identity);
                        log::info!("lease {desc} is now held by another candidate; stepping down");
                        return TermEnd::Lost(format!(
                            "the lease is now held by {}",
                            crate::text::escape(holder)
                        ));
                    }
                    Ok(false) => {}
                    Err(_) if self.shared.wake.is_stopped() => return TermEnd::Stopped,
                    Err(_) => {}
                }
                // As client-go's PollImmediateUntil: the next attempt is a
                // retry period after this one *started* (at once if this
                // one took longer), so a request abandoned at the cap
                // leaves room for a retry inside the deadline.
                let now = self.now();
                let left = round_end.saturating_duration_since(now);
                let pause = (start + self.cfg().retry_period)
                    .saturating_duration_since(now)
                    .max(retry_after(&attempt))
                    .min(left);
                if self.pause(pause) {
                    return TermEnd::Stopped;
                }
            }
        }
    }

    /// Why a term ended at its renew deadline, with the last error if any.
    fn deadline_passed(&self) -> String {
        let st = self.shared.lock();
        let last = match (&st.last_error, st.counters.consecutive_failures) {
            (Some(e), n) if n > 0 => format!(" (last error: {})", e.message),
            _ => String::new(),
        };
        format!(
            "no renew succeeded within the renew deadline of {}{last}",
            humantime::format_duration(self.cfg().renew_deadline)
        )
    }

    /// End the term and tell the caller (before any release, so the caller
    /// stops working before anyone else can start). A stop may have ended
    /// it already, from the stopping thread.
    fn step_down(&mut self, reason: StopReason, why: Option<String>) {
        let Some(term) = self.term.take() else {
            return;
        };
        self.shared.end_term(&term, reason, why.clone());
        self.lock
            .record_event(&format!("{} stopped leading", self.lock.identity()));
        let desc = &self.shared.describe;
        match why {
            Some(why) => log::warn!("lost lease {desc}: {why}; stopped leading"),
            None => log::info!("stopped leading lease {desc}"),
        }
    }

    /// Hand the lease back (when configured): empty holder, 1s duration,
    /// transitions kept. Its own budget, `release_timeout`, not cut by the
    /// stop that asked for it.
    fn release(&mut self) -> Result<()> {
        if !self.cfg().release_on_cancel
            || self.shared.skip_release.load(Ordering::Relaxed)
            || !self.is_leader_of_observed()
        {
            return Ok(());
        }
        let deadline = Deadline::after(self.shared.clock.clone(), self.cfg().release_timeout);
        let now = MicroTime::from_system_time(self.shared.clock.system_time());
        let observed = self.observed.clone().unwrap_or_default();
        let record = LeaderElectionRecord {
            holder_identity: String::new(),
            lease_duration_seconds: 1,
            acquire_time: Some(now),
            renew_time: Some(now),
            ..observed
        };
        let mut result = self.lock.update(&record, &deadline);
        // A renew that stop() cut short may have landed after all: the
        // conflict is then with ourselves, and a fresh read shows it.
        if matches!(&result, Err(e) if e.is_conflict())
            && matches!(self.lock.get(&deadline), Ok(current) if self.is_ours(&current))
        {
            result = self.lock.update(&record, &deadline);
        }
        match result {
            Ok(()) => {
                log::info!("released lease {}", self.shared.describe);
                self.set_observed(record);
                self.shared.lock().leader = None;
                Ok(())
            }
            // Someone else wrote since our last renew: the lease is not
            // ours to release any more.
            Err(e) if e.is_conflict() => {
                log::info!(
                    "lease {} changed since our last renew; not releasing",
                    self.shared.describe
                );
                Ok(())
            }
            Err(e) => {
                log::error!("failed to release lease {}: {e}", self.shared.describe);
                Err(e)
            }
        }
    }

    /// One attempt, as client-go's `tryAcquireOrRenew`, within `round`:
    /// each request gets the per-request cap, never more than is left.
    /// `Ok(true)` when the lease is held by us after this call.
    fn try_acquire_or_renew(&mut self, round: &Deadline) -> Result<bool> {
        let cap = self.cfg().request_cap();
        let now_wall = MicroTime::from_system_time(self.shared.clock.system_time());
        let mut record = LeaderElectionRecord {
            holder_identity: self.lock.identity().to_string(),
            lease_duration_seconds: self.cfg().lease_duration.as_secs() as i32,
            acquire_time: Some(now_wall),
            renew_time: Some(now_wall),
            leader_transitions: 0,
            strategy: None,
            preferred_holder: None,
        };

        // 1. Fast path for the leader: one PUT against the cached version.
        if self.is_leader_of_observed() && self.is_lease_valid(self.now()) {
            if let Some(old) = self.observed.clone() {
                self.carry_over(&mut record, &old, true);
            }
            match self.write(&record, &round.capped(cap), false) {
                Ok(()) => return Ok(true),
                Err(e) if e.is_transport() => return Err(e),
                Err(e) => log::debug!(
                    "failed to update lease {} optimistically: {e}, falling back to slow path",
                    self.shared.describe
                ),
            }
        }

        // 2. Obtain or create the record.
        let slow_path = self.is_leader_of_observed();
        let deadline = round.capped(cap);
        let old = match self.read(&deadline) {
            Ok(old) => old,
            Err(e) if e.is_not_found() => {
                return match self.write(&record, &round.capped(cap), true) {
                    // Another candidate created it first: held by someone
                    // else, as a read would have shown (the next attempt
                    // reads it). Not a failure.
                    Err(e) if e.is_already_exists() => {
                        log::debug!(
                            "lease {} was created by another candidate first",
                            self.shared.describe
                        );
                        Ok(false)
                    }
                    written => written.map(|()| true),
                };
            }
            Err(e) => return Err(e),
        };

        // 3. Judge expiry by when *we* saw the record change, never by its renewTime.
        if self.observed.as_ref() != Some(&old) {
            self.note_same_identity(&old);
            self.set_observed(old.clone());
        }
        let ours = self.is_ours(&old);
        if !old.holder_identity.is_empty() && self.is_lease_valid(self.now()) && !ours {
            log::debug!(
                "lease {} is held by {} and has not yet expired",
                self.shared.describe,
                crate::text::Escaped(&old.holder_identity)
            );
            return Ok(false);
        }

        // 4. Ours to take or keep.
        self.carry_over(&mut record, &old, ours);
        self.write(&record, &round.capped(cap), false)?;
        if slow_path {
            self.shared.lock().counters.slow_path_renews += 1;
        }
        Ok(true)
    }

    /// What our write over `old` keeps of it. client-go keeps
    /// `leaseTransitions` and `acquireTime` when the record is its own and
    /// adds one otherwise; here a new term on a record of our last term
    /// adds one too, so that no two terms share a token. A record we wrote
    /// in this acquire phase (an answer lost) is kept as it is.
    fn carry_over(
        &self,
        record: &mut LeaderElectionRecord,
        old: &LeaderElectionRecord,
        ours: bool,
    ) {
        let of_last_term = u64::try_from(old.leader_transitions).ok() == self.last_token;
        let keep = ours && (self.term.is_some() || !of_last_term);
        if keep {
            record.acquire_time = old.acquire_time;
            record.leader_transitions = old.leader_transitions;
        } else {
            record.leader_transitions = old.leader_transitions.saturating_add(1);
        }
        record.strategy = old.strategy.clone();
        record.preferred_holder = old.preferred_holder.clone();
    }

    /// One call to the lock that sends a request, counted (see `count`).
    fn request<T>(&mut self, call: impl FnOnce(&mut dyn Lock) -> Result<T>) -> Result<T> {
        let result = call(&mut *self.lock);
        self.count(&result, true);
        result
    }

    /// Read the record, counted as a request unless a watch event answered
    /// it: `lease_elector_requests_total` counts requests sent.
    fn read(&mut self, deadline: &Deadline) -> Result<LeaderElectionRecord> {
        let result = self.lock.get(deadline);
        let sent = result.is_err() || !self.lock.last_get_was_local();
        // A 404 is an answer: the Lease does not exist yet, the way into a
        // create (every new Lease starts so).
        let failure = result.as_ref().err().filter(|e| !e.is_not_found());
        self.count_request(sent, failure);
        result
    }

    /// Count a call to the lock: a request if `sent`, and a failed one on
    /// an error answer, no answer or a conflict on our write, but not a
    /// create that lost the race to another candidate (the lease is then
    /// simply held by someone else) nor a request a stop cut short.
    fn count<T>(&self, result: &Result<T>, sent: bool) {
        self.count_request(sent, result.as_ref().err());
    }

    fn count_request(&self, sent: bool, failure: Option<&Error>) {
        let mut st = self.shared.lock();
        if sent {
            st.counters.requests += 1;
        }
        if let Some(e) = failure {
            if !e.is_already_exists() && !self.shared.wake.is_stopped() {
                st.counters.failed_requests += 1;
            }
        }
    }

    /// Create or update the lock with `record`, remembering it as ours
    /// whatever the answer (a write whose answer was lost may have landed).
    fn write(
        &mut self,
        record: &LeaderElectionRecord,
        deadline: &Deadline,
        create: bool,
    ) -> Result<()> {
        if self.written.len() > MAX_PENDING_WRITES {
            self.written.remove(1);
        }
        self.written.push(record.clone());
        if create {
            self.request(|lock| lock.create(record, deadline))?;
        } else {
            self.request(|lock| lock.update(record, deadline))?;
        }
        self.written = vec![record.clone()];
        self.set_observed(record.clone());
        Ok(())
    }

    /// A record under our identity that this process did not write means
    /// another process uses the same identity. Seen once, it may be a
    /// previous run of ours (it is waited out like any other holder's);
    /// seen changing, someone is renewing it: report it.
    fn note_same_identity(&mut self, new: &LeaderElectionRecord) {
        if new.holder_identity != self.lock.identity() || self.is_ours(new) {
            return;
        }
        let renewed = self
            .observed
            .as_ref()
            .is_some_and(|old| old.holder_identity == new.holder_identity && !self.is_ours(old));
        let desc = &self.shared.describe;
        let identity = self.lock.identity();
        if !renewed {
            log::info!(
                "lease {desc} is held under our identity {identity:?} by a record this process did not write (a previous run?); waiting for it to expire"
            );
            return;
        }
        let first = !std::mem::replace(&mut self.shared.lock().duplicate_identity, true);
        if first {
            log::error!(
                "lease {desc} is being renewed under our identity {identity:?} by another process: two candidates share one identity; not leading until it stops (give each candidate a unique identity)"
            );
        }
    }

    fn set_observed(&mut self, record: LeaderElectionRecord) {
        self.observed = Some(record);
        self.observed_at = self.now();
    }

    /// Written by this process (matched on the times it wrote, which the
    /// server keeps as sent).
    fn is_ours(&self, r: &LeaderElectionRecord) -> bool {
        r.holder_identity == self.lock.identity()
            && self
                .written
                .iter()
                .any(|w| w.renew_time == r.renew_time && w.acquire_time == r.acquire_time)
    }

    fn is_leader_of_observed(&self) -> bool {
        self.observed.as_ref().is_some_and(|r| self.is_ours(r))
    }

    fn held_by_other(&self) -> bool {
        self.observed
            .as_ref()
            .is_some_and(|r| !r.holder_identity.is_empty() && !self.is_ours(r))
    }

    /// When the observed record expires: its duration after we saw it change.
    fn observed_expiry(&self) -> Instant {
        let duration = self
            .observed
            .as_ref()
            .map_or(Duration::ZERO, LeaderElectionRecord::lease_duration);
        add_saturating(self.observed_at, duration)
    }

    fn is_lease_valid(&self, now: Instant) -> bool {
        self.observed_expiry() > now
    }

    /// Time until the observed lease of another holder expires (plus a
    /// millisecond so the attempt sees it expired); waking then, rather than
    /// at the next jittered retry, makes crash failover take leaseDuration
    /// from the last observed change, not that plus a retry period.
    fn until_expiry(&self) -> Duration {
        match &self.observed {
            Some(r) if !r.holder_identity.is_empty() => self
                .observed_expiry()
                .saturating_duration_since(self.now())
                .saturating_add(Duration::from_millis(1)),
            _ => Duration::MAX,
        }
    }

    fn maybe_report_transition(&mut self) {
        let holder = self
            .observed
            .as_ref()
            .map(|r| r.holder_identity.clone())
            .filter(|h| !h.is_empty());
        if holder == self.reported_leader {
            return;
        }
        self.reported_leader = holder.clone();
        {
            let mut st = self.shared.lock();
            st.leader = holder.clone();
            if holder.is_some() {
                st.counters.transitions += 1;
            }
        }
        if let Some(identity) = holder {
            if identity != self.lock.identity() {
                log::info!(
                    "new leader elected on {}: {}",
                    self.shared.describe,
                    crate::text::Escaped(&identity)
                );
            }
            let at = self.now();
            self.shared.emit(LeaderEvent::NewLeader { identity, at });
        }
    }

    /// Time until `at` (none left once it has passed); forever for `None`.
    fn until(&self, at: Option<Instant>) -> Duration {
        at.map_or(Duration::MAX, |at| at.saturating_duration_since(self.now()))
    }

    /// Sleep `d`, ignoring pokes; true when stopped.
    fn pause(&self, d: Duration) -> bool {
        let until = self.now() + d;
        loop {
            let left = until.saturating_duration_since(self.now());
            if left.is_zero() {
                return self.shared.wake.is_stopped();
            }
            match self.shared.clock.sleep(left, &self.shared.wake) {
                Wake::Stopped => return true,
                Wake::Elapsed => return false,
                Wake::Poked => continue,
            }
        }
    }

    /// `d * [1, 1 + JITTER_FACTOR)`, as `wait.Jitter`.
    fn jittered(&mut self, d: Duration) -> Duration {
        self.jitter_count += 1;
        let mut h = self.jitter.build_hasher();
        h.write_u64(self.jitter_count);
        let unit = (h.finish() >> 11) as f64 / (1u64 << 53) as f64;
        d.mul_f64(1.0 + unit * JITTER_FACTOR)
    }
}

/// The server's `Retry-After` (429, 503) clamped to
/// [`MAX_RETRY_AFTER`] (a [`Lock`] of the caller's may pass any value), or zero.
fn retry_after(attempt: &Result<bool>) -> Duration {
    match attempt {
        Err(Error::Api { status, .. }) => {
            status.retry_after.unwrap_or_default().min(MAX_RETRY_AFTER)
        }
        _ => Duration::ZERO,
    }
}
