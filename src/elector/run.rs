//! The elector thread's state machine, read top to bottom like client-go's
//! `leaderelection.go`: `run`, then `acquire` and `renew` (each a loop of
//! attempts), `step_down` and `release`, and how long to pause between
//! attempts. One attempt against the Lease is `attempt.rs`
//! (`try_acquire_or_renew`); what its outcome tells the status and the log is
//! `report.rs`. The rules it keeps are in the module docs of
//! [`crate::elector`].

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config::{ElectorConfig, JITTER_FACTOR};
use super::io::Io;
use super::shared::Shared;
use super::term::Term;
use super::StopReason;
use crate::client::MAX_RETRY_AFTER;
use crate::clock::{add_saturating, Wake};
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::lease::{LeaderElectionRecord, MicroTime};
use crate::random::SplitMix64;

/// How a leadership term ended.
enum TermEnd {
    Stopped,
    /// Lost, and why (for the log line and `ElectorStatus::last_loss`).
    Lost(String),
}

/// The state owned by the elector thread. Its methods are in three files:
/// this one (the state machine), `attempt.rs` (one attempt, and the record
/// as observed) and `report.rs` (the outcome told); the fields those two
/// use are `pub(super)`.
pub(super) struct Run<I: Io> {
    pub(super) io: I,
    pub(super) shared: Arc<Shared>,
    /// The term in progress (the thread's own copy: a stop may end it
    /// from another thread first).
    pub(super) term: Option<Term>,
    /// The token of this process's last term: a new term on a record we
    /// wrote with that token must take a greater one.
    pub(super) last_token: Option<u64>,
    /// The record as last observed, and when (local clock) it last changed.
    pub(super) observed: Option<LeaderElectionRecord>,
    pub(super) observed_at: Instant,
    /// Records this process wrote: the last confirmed one first, then any
    /// sent since without a confirmed answer (a write whose answer was lost
    /// may still have landed). A record under our identity that is none of
    /// these was written by someone else using the same identity.
    pub(super) written: Vec<LeaderElectionRecord>,
    pub(super) reported_leader: Option<String>,
    /// Jitter for the pauses: seeded from the OS when the thread runs,
    /// from the schedule in the simulation.
    jitter: SplitMix64,
}

impl<I: Io> Drop for Run<I> {
    /// However the thread ends (also by a panic), the caller's channel
    /// disconnects with it.
    fn drop(&mut self) {
        self.shared.close_events();
    }
}

impl<I: Io> Run<I> {
    pub(super) fn new(io: I, shared: Arc<Shared>, jitter_seed: u64) -> Run<I> {
        Run {
            io,
            term: None,
            last_token: None,
            observed: None,
            observed_at: shared.now(),
            written: Vec::new(),
            reported_leader: None,
            jitter: SplitMix64::new(jitter_seed),
            shared,
        }
    }

    pub(super) fn cfg(&self) -> &ElectorConfig {
        &self.shared.config
    }

    pub(super) fn now(&self) -> Instant {
        self.shared.now()
    }

    /// A budget on the elector's clock, ended early by `stop()`.
    fn deadline(&self, at: Instant) -> Deadline {
        Deadline::at(self.shared.clock.clone(), at).cancelled_by(&self.shared.wake)
    }

    pub(super) async fn run(mut self) -> Result<()> {
        // Only the first term is waited for within the time-out.
        let mut give_up_at = self
            .cfg()
            .acquire_timeout
            .map(|t| add_saturating(self.now(), t));
        loop {
            if !self.acquire(give_up_at.take()).await {
                return Ok(());
            }
            match self.renew().await {
                TermEnd::Stopped => {
                    self.step_down(StopReason::Stopped, None);
                    return self.release().await;
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
    async fn acquire(&mut self, give_up_at: Option<Instant>) -> bool {
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
            let attempt = self
                .try_acquire_or_renew(&self.deadline(start + self.cfg().renew_deadline))
                .await;
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
                    self.io.sleep(pause, &self.shared.wake).await == Wake::Stopped
                }
                // After a failure, nothing shortens the pause (but giving
                // up): a failing server sees at most one attempt per retry
                // period.
                Err(_) => {
                    let pause = self
                        .jittered(self.cfg().retry_period)
                        .max(retry_after(&attempt))
                        .min(self.until(give_up_at));
                    self.pause(pause).await
                }
            };
            if stopped {
                return false;
            }
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
            self.io.identity(),
            &self.shared.describe,
            start,
            self.cfg().renew_deadline,
            self.shared.clock.clone(),
        );
        self.last_token = Some(token);
        self.io
            .record_event(&format!("{} became leader", self.io.identity()));
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
    async fn renew(&mut self) -> TermEnd {
        let desc = self.shared.describe.clone();
        let Some(term) = self.term.clone() else {
            return TermEnd::Lost("no term in progress".into());
        };
        loop {
            let round_end = term.valid_until();
            // Never sleep past the deadline: after a slow renew, less than a
            // retry period may be left before we must step down.
            let left = round_end.saturating_duration_since(self.now());
            if self.pause(self.cfg().retry_period.min(left)).await {
                return TermEnd::Stopped;
            }
            loop {
                let start = self.now();
                if start >= round_end {
                    log::info!("failed to renew lease {desc}: timed out waiting for the condition");
                    return TermEnd::Lost(self.deadline_passed());
                }
                let attempt = self.try_acquire_or_renew(&self.deadline(round_end)).await;
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
                if self.pause(pause).await {
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
        self.io
            .record_event(&format!("{} stopped leading", self.io.identity()));
        let desc = &self.shared.describe;
        match why {
            Some(why) => log::warn!("lost lease {desc}: {why}; stopped leading"),
            None => log::info!("stopped leading lease {desc}"),
        }
    }

    /// Hand the lease back (when configured): empty holder, 1s duration,
    /// transitions kept. Its own budget, `release_timeout`, not cut by the
    /// stop that asked for it.
    async fn release(&mut self) -> Result<()> {
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
        let mut result = self.io.update(&record, &deadline).await;
        // A renew that stop() cut short may have landed after all: the
        // conflict is then with ourselves, and a fresh read shows it.
        if matches!(&result, Err(e) if e.is_conflict())
            && matches!(self.io.get(&deadline).await, Ok(current) if self.is_ours(&current.record))
        {
            result = self.io.update(&record, &deadline).await;
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

    /// Time until `at` (none left once it has passed); forever for `None`.
    fn until(&self, at: Option<Instant>) -> Duration {
        at.map_or(Duration::MAX, |at| at.saturating_duration_since(self.now()))
    }

    /// Sleep `d`, ignoring pokes; true when stopped.
    async fn pause(&mut self, d: Duration) -> bool {
        let until = self.now() + d;
        loop {
            let left = until.saturating_duration_since(self.now());
            if left.is_zero() {
                return self.shared.wake.is_stopped();
            }
            match self.io.sleep(left, &self.shared.wake).await {
                Wake::Stopped => return true,
                Wake::Elapsed => return false,
                Wake::Poked => continue,
            }
        }
    }

    /// `d * [1, 1 + JITTER_FACTOR)`, as `wait.Jitter`.
    fn jittered(&mut self, d: Duration) -> Duration {
        d.mul_f64(1.0 + self.jitter.unit() * JITTER_FACTOR)
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
