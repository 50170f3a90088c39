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

use super::config::ElectorConfig;
use super::io::{Io, Reader};
use super::knowledge::Knowledge;
use super::pacing::Pacing;
use super::shared::Shared;
use super::term::{LetGo, Term, TermEnd};
use crate::client::MAX_RETRY_AFTER;
use crate::clock::{add_saturating, Wake, Wakeup};
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::lease::MicroTime;

/// The state owned by the elector thread: the term in progress and the
/// pacing of its requests, beside its I/O. What it knows of the Lease is in
/// [`Knowledge`](super::knowledge::Knowledge), which the views read too
/// (`self.know`). Its methods are in three files: this one (the state
/// machine), `attempt.rs` (one attempt, and what it tells the knowledge)
/// and `report.rs` (the outcome told).
pub(super) struct Run<I: Io> {
    pub(super) io: I,
    pub(super) shared: Arc<Shared>,
    /// The term in progress (the thread's own copy: a stop may end it
    /// from another thread first).
    pub(super) term: Option<Term>,
    pub(super) pacing: Pacing,
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
            shared,
            term: None,
            pacing: Pacing::new(jitter_seed),
        }
    }

    /// `f` on what this process knows of its Lease (see [`Shared::know`]).
    pub(super) fn know<R>(&self, f: impl FnOnce(&mut Knowledge) -> R) -> R {
        self.shared.know(f)
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
            let Some(term) = self.acquire(give_up_at.take()).await else {
                return Ok(());
            };
            let end = self.renew(&term).await;
            let term = self.step_down(&end);
            if end == TermEnd::Stopped {
                return self.release_after(term).await;
            }
            // Run out: the work may still run, in its time to stop. Until
            // it has let go, a takeover must reach it at once.
            if let (Some(term), TermEnd::Expired(_)) = (&term, &end) {
                if self.watch_over(term).await == LetGo::Stopped {
                    return Ok(());
                }
            }
            if !self.cfg().rejoin {
                return Ok(());
            }
            // One piece of work at a time: the next term is not sought
            // while the work of this one still runs (it holds a `Term`).
            if let Some(term) = term {
                if !self.wait_for_work(&term).await {
                    return Ok(());
                }
            }
        }
    }

    /// A term ran out while its work may still run (it holds a `Term`):
    /// keep observing the Lease, by reads (one a retry period, the first a
    /// retry period after the last attempt) or what the watch delivers,
    /// never by a write, until the work has let go. Another writer that
    /// takes, frees or deletes the Lease meanwhile makes the term taken
    /// over ([`Term::taken_over`]): the work has no time left (`lease-elect`
    /// kills COMMAND at once). Without it, the process stopped looking when
    /// the term ran out, and its work kept the rest of its time to stop
    /// while another candidate led. `Held` once seen taken over (nothing
    /// more to learn), `Stopped` when stopped meanwhile.
    async fn watch_over(&mut self, term: &Term) -> LetGo {
        let never = Wakeup::new();
        term.poke_when_let_go(&self.shared.wake);
        // The first read a retry period (and any Retry-After) after the
        // last request, as the renews' pacing had it.
        let retry_period = self.cfg().retry_period;
        let (mut failed, mut until) = match self.pacing.last() {
            Some(last) => {
                let pause = self.pacing.jittered(retry_period).max(last.asked);
                (last.failed, add_saturating(last.at, pause))
            }
            None => (false, self.now()),
        };
        loop {
            loop {
                if self.io.let_go(term, Duration::ZERO, &never).await == LetGo::Released {
                    return LetGo::Released;
                }
                // A delivery the lock holds costs no request: looked at
                // now, also one whose poke the renews' pause took as the
                // term ran out.
                let left = until.saturating_duration_since(self.now());
                if left.is_zero() || self.io.delivered() {
                    break;
                }
                match self.io.sleep(left, &self.shared.wake).await {
                    Wake::Stopped => return LetGo::Stopped,
                    Wake::Elapsed => {}
                    // The work let go, or the watch delivered a change.
                    // Looked at at once when the last request did not fail
                    // (a delivery that costs one wakes at most once a
                    // retry period): a failing server sees at most one
                    // request a retry period.
                    Wake::Poked if !failed => break,
                    Wake::Poked => {}
                }
            }
            if self.io.let_go(term, Duration::ZERO, &never).await == LetGo::Released {
                return LetGo::Released;
            }
            let deadline = self
                .deadline(add_saturating(self.now(), self.cfg().request_cap()))
                .capped(self.cfg().request_cap());
            let read = self.read(&deadline, Reader::Term).await;
            // A retry period from now, and no sooner than the server
            // asked when it last answered a request (counted from then:
            // a read the watch answered made none, and a `Retry-After`
            // taken again from now paced the next one twice over).
            let pause = self.pacing.jittered(retry_period);
            until = add_saturating(self.now(), pause);
            if let Some(last) = self.pacing.last() {
                until = until.max(last.asked_until());
            }
            failed = matches!(&read, Err(e) if !e.is_not_found());
            let recreated = match read {
                Ok(read) => {
                    self.observe(read.record.clone(), read.version);
                    if !read.recreated && self.know(|k| k.is_ours(&read.record)) {
                        continue;
                    }
                    read.recreated
                }
                Err(e) if e.is_not_found() => {
                    self.lease_gone();
                    false
                }
                Err(_) => continue,
            };
            let why = if recreated {
                "the lease was deleted and created again".to_string()
            } else {
                self.know(|k| k.why_not_ours())
            };
            log::debug!(
                "lease {}: {why} after the term ran out; its work has no time left",
                self.shared.describe
            );
            self.report_holder_ending(term, Some(&TermEnd::Taken(why)));
            return LetGo::Held;
        }
    }

    /// After a lost term, with `rejoin`: wait until the work has let go of
    /// `term` before acquiring again (saying so once if it takes longer
    /// than the lease's slack). False when stopped meanwhile.
    async fn wait_for_work(&mut self, term: &Term) -> bool {
        let wake = self.shared.wake.clone();
        let slack = self
            .cfg()
            .lease_duration
            .saturating_sub(self.cfg().renew_deadline);
        match self.io.let_go(term, slack, &wake).await {
            LetGo::Released => return true,
            LetGo::Stopped => return false,
            LetGo::Held => {}
        }
        log::warn!(
            "the work of the lost term on lease {} still runs {} after the term ended: not seeking the lease again until it returns",
            self.shared.describe,
            humantime::format_duration(slack)
        );
        self.io.let_go(term, Duration::MAX, &wake).await == LetGo::Released
    }

    /// A stop ended the term: release the lease (when configured) once the
    /// work has let go of it. A lease handed over while the work still runs
    /// would give the next leader company; work that outlives
    /// `release_grace` leaves the lease to expire (`Error::NotReleased`).
    async fn release_after(&mut self, term: Option<Term>) -> Result<()> {
        if !self.cfg().release_on_cancel {
            return Ok(());
        }
        let grace = self.cfg().release_grace;
        if let Some(term) = term {
            // The stop has fired: this wait is bounded by the grace alone.
            let never = Wakeup::new();
            if self.io.let_go(&term, grace, &never).await != LetGo::Released {
                log::warn!(
                    "the work still holds its term on lease {} {} after the stop: not releasing (the lease expires by itself)",
                    self.shared.describe,
                    humantime::format_duration(grace)
                );
                return Err(Error::NotReleased {
                    lock: self.shared.describe.clone(),
                    waited: grace,
                });
            }
        }
        self.release().await
    }

    /// Attempt until the lease is ours: the term begun; none when stopped,
    /// or at `give_up_at` without leading.
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
    async fn acquire(&mut self, give_up_at: Option<Instant>) -> Option<Term> {
        let desc = self.shared.describe.clone();
        log::info!("attempting to acquire leader lease {desc}...");
        // After a lost term whose last request failed (its renews, or the
        // reads watching over its work), the first attempt too waits a
        // retry period from that request.
        if let Some(at) = self.pacing.after_failure(self.cfg().retry_period) {
            let left = at.saturating_duration_since(self.now());
            if self.pause(left.min(self.until(give_up_at))).await {
                return None;
            }
        }
        let mut first = true;
        loop {
            if self.shared.wake.is_stopped() {
                return None;
            }
            if !first && give_up_at.is_some_and(|at| self.now() >= at) {
                log::info!("not leading lease {desc} within the acquire time-out: giving up");
                return None;
            }
            first = false;
            let start = self.now();
            let attempt = self
                .try_acquire_or_renew(&self.deadline(start + self.cfg().renew_deadline))
                .await;
            self.maybe_report_transition();
            self.note_attempt(&attempt, "acquiring");
            let stopped = match attempt {
                // Confirmed only after the term it would begin was over (the
                // process did not run meanwhile): no term; the record is
                // ours, and the next attempt, at once, renews it into one.
                Ok(true) if self.now() >= start + self.cfg().renew_deadline => {
                    log::debug!(
                        "the write acquiring lease {desc} was confirmed after its renew deadline: trying again"
                    );
                    false
                }
                Ok(true) => return Some(self.start_term(start)),
                // A poke (the watched Lease changed) only makes the next
                // attempt earlier; the expiry rule still decides.
                Ok(false) => {
                    let now = self.now();
                    let pause = self
                        .pacing
                        .jittered(self.cfg().retry_period)
                        .min(self.know(|k| k.until_free(now)))
                        .min(self.until(give_up_at));
                    self.io.sleep(pause, &self.shared.wake).await == Wake::Stopped
                }
                // After a failure, nothing shortens the pause (but giving
                // up): a failing server sees at most one attempt per retry
                // period.
                Err(_) => {
                    let pause = self
                        .pacing
                        .jittered(self.cfg().retry_period)
                        .max(retry_after(&attempt))
                        .min(self.until(give_up_at));
                    self.pause(pause).await
                }
            };
            if stopped {
                return None;
            }
        }
    }

    /// The lease is ours: a new term, whose token is the `resourceVersion`
    /// of the write that began it (see [`Term::token`]).
    fn start_term(&mut self, start: Instant) -> Term {
        let (version, transitions) = self.know(|k| {
            let transitions = k.record().map_or(0, |r| r.leader_transitions);
            (k.version().map(str::to_string), transitions)
        });
        let token = match version.as_deref().map(revision) {
            Some(Some(revision)) => revision,
            unordered => {
                if matches!(unordered, Some(None)) && self.know(|k| k.warn_unordered()) {
                    log::warn!(
                        "{}",
                        unordered_version(
                            &self.shared.describe,
                            version.as_deref().unwrap_or_default()
                        )
                    );
                }
                u64::try_from(transitions).unwrap_or(0)
            }
        };
        // Never lower than (nor equal to) a token this elector handed out
        // before: a server whose versions are decimal for some writes and
        // not for others would otherwise mix revisions with transitions
        // (1001, 1, 1005, 3).
        let last = self.shared.lock().latest.as_ref().map(Term::token);
        let token = match last {
            Some(last) if token <= last => last.saturating_add(1),
            _ => token,
        };
        let term = Term::new(
            (token, transitions),
            self.io.identity(),
            &self.shared.describe,
            start,
            self.cfg(),
            self.shared.clock.clone(),
        );
        self.shared.start_term(&term);
        let shared = term.share();
        self.term = Some(term);
        self.io
            .record_event(&format!("{} became leader", self.io.identity()));
        log::info!(
            "successfully acquired lease {} (term token {token})",
            self.shared.describe
        );
        shared
    }

    /// Renew every retry period until stopped, or until no renew succeeded
    /// for `renew_deadline` since the start of the last successful one.
    ///
    /// That instant is the round's one deadline (the term's `valid_until`):
    /// every request of every attempt in the round draws from it, so the
    /// round cannot overrun it. Woken past it (a freeze), the loop steps
    /// down before it sends anything.
    async fn renew(&mut self, term: &Term) -> TermEnd {
        let desc = self.shared.describe.clone();
        loop {
            let round_end = term.valid_until();
            // The next renew is a retry period after the last successful
            // one *started* (the acquire, first), as the deadline counts
            // from that start: counted from its end, a slow acquire with a
            // renew deadline just above 1.2 retry periods left no time for
            // the first renew. Never sleep past the deadline.
            let last_start = round_end
                .checked_sub(self.cfg().renew_deadline)
                .unwrap_or(round_end);
            let next = (last_start + self.cfg().retry_period).min(round_end);
            let pause = next.saturating_duration_since(self.now());
            if let Some(end) = self.renew_pause(pause, term, round_end).await {
                return end;
            }
            loop {
                let start = self.now();
                if start >= round_end {
                    let end = TermEnd::Expired(self.shared.deadline_passed());
                    self.shared.end_term(term, &end);
                    log::info!("failed to renew lease {desc}: timed out waiting for the condition");
                    return end;
                }
                let attempt = self.try_acquire_or_renew(&self.deadline(round_end)).await;
                let renewed = matches!(attempt, Ok(true)) && term.renewed(start);
                let stopped = self.shared.wake.is_stopped();
                let ended = match &attempt {
                    Ok(true) if renewed => None,
                    // Renewed after the term ended: by a stop, or by its
                    // deadline (the answer came too late).
                    Ok(true) if stopped => Some(TermEnd::Stopped),
                    Ok(true) => Some(TermEnd::Expired(self.shared.deadline_passed())),
                    // Not ours any more: taken, freed, deleted or created
                    // anew by someone else. The term is over; a new one
                    // (with `rejoin`) gets a new token.
                    Ok(false) => Some(TermEnd::Taken(self.know(|k| k.why_not_ours()))),
                    Err(_) if stopped => Some(TermEnd::Stopped),
                    Err(_) => None,
                };
                self.report_holder_ending(term, ended.as_ref());
                self.note_attempt(&attempt, "renewing");
                if let Some(end) = ended {
                    return end;
                }
                if renewed {
                    log::debug!("successfully renewed lease {desc}");
                    break;
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
                if let Some(end) = self.renew_pause(pause, term, round_end).await {
                    return end;
                }
            }
        }
    }

    /// Sleep `d` between renews. A poke (the watch saw the Lease change)
    /// is looked at at once, from what the watch delivered: a record that
    /// is not ours any more, or a Lease deleted, ends the term there rather
    /// than at the next renew (a retry period later). `None` when the
    /// pause ran out.
    async fn renew_pause(
        &mut self,
        d: Duration,
        term: &Term,
        round_end: Instant,
    ) -> Option<TermEnd> {
        let until = add_saturating(self.now(), d);
        loop {
            let left = until.saturating_duration_since(self.now());
            if left.is_zero() {
                return self.shared.wake.is_stopped().then_some(TermEnd::Stopped);
            }
            match self.io.sleep(left, &self.shared.wake).await {
                Wake::Stopped => return Some(TermEnd::Stopped),
                Wake::Elapsed => return None,
                Wake::Poked => {}
            }
            // Woken past the deadline (a stall): no time is left for a
            // read (it would be abandoned as soon as sent); the caller
            // ends the term.
            if self.now() >= round_end {
                return None;
            }
            let deadline = self.deadline(round_end).capped(self.cfg().request_cap());
            let ours = match self.read(&deadline, Reader::Term).await {
                Ok(read) => {
                    self.observe(read.record.clone(), read.version);
                    self.note_recreated(read.recreated);
                    self.know(|k| k.is_ours(&read.record) && !k.recreated())
                }
                Err(e) if e.is_not_found() => {
                    self.lease_gone();
                    false
                }
                Err(_) => true,
            };
            if !ours {
                let end = TermEnd::Taken(self.know(|k| k.why_not_ours()));
                self.report_holder_ending(term, Some(&end));
                return Some(end);
            }
        }
    }

    /// Report the observed holder, ending `term` on the way when `end`
    /// says it was lost. Act first, tell after: the term ends before
    /// anything is logged (a logger is the caller's code, and may block),
    /// and the new holder is in the status before it ends (whoever sees
    /// the end asks who holds the lease now, as `lease-elect` does to
    /// choose SIGKILL over the grace).
    fn report_holder_ending(&mut self, term: &Term, end: Option<&TermEnd>) {
        let holder = self.publish_holder();
        if let Some(end) = end.filter(|e| **e != TermEnd::Stopped) {
            self.shared.end_term(term, end);
        }
        if let Some(holder) = holder {
            self.announce_holder(holder);
        }
    }

    /// End the term and tell the caller (before any release, so the caller
    /// stops working before anyone else can start), then log it. A stop may
    /// have ended it already, from the stopping thread. The term ended.
    fn step_down(&mut self, end: &TermEnd) -> Option<Term> {
        let term = self.term.take()?;
        self.shared.end_term(&term, end);
        self.io
            .record_event(&format!("{} stopped leading", self.io.identity()));
        let desc = &self.shared.describe;
        match end.why() {
            Some(why) => log::warn!("lost lease {desc}: {why}; stopped leading"),
            None => log::info!("stopped leading lease {desc}"),
        }
        Some(term)
    }

    /// Hand the lease back (when configured): empty holder, 1s duration,
    /// transitions kept. Its own budget, `release_timeout`, not cut by the
    /// stop that asked for it.
    async fn release(&mut self) -> Result<()> {
        if self.shared.skip_release.load(Ordering::Relaxed) || !self.know(|k| k.leads()) {
            return Ok(());
        }
        let deadline = Deadline::after(self.shared.clock.clone(), self.cfg().release_timeout);
        let mut record = self.release_record();
        let mut result = self.io.update(&record, &deadline).await;
        self.count_request(true, result.as_ref().err());
        // A renew that stop() cut short may have landed after all: the
        // conflict is then with ourselves, and a fresh read shows it.
        if matches!(&result, Err(e) if e.is_conflict()) {
            if let Ok(current) = self.read(&deadline, Reader::Term).await {
                if self.know(|k| k.is_ours(&current.record)) {
                    self.observe(current.record, current.version);
                    record = self.release_record();
                    result = self.io.update(&record, &deadline).await;
                    self.count_request(true, result.as_ref().err());
                }
            }
        }
        match result {
            Ok(written) => {
                log::info!("released lease {}", self.shared.describe);
                self.shared.released.store(true, Ordering::Relaxed);
                self.observe(record, written.version);
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

    /// The release of the record observed, written now.
    fn release_record(&self) -> crate::lease::LeaderElectionRecord {
        let now = MicroTime::from_system_time(self.shared.clock.system_time());
        self.know(|k| k.release_record(now))
    }

    /// Time until `at` (none left once it has passed); forever for `None`.
    fn until(&self, at: Option<Instant>) -> Duration {
        at.map_or(Duration::MAX, |at| at.saturating_duration_since(self.now()))
    }

    /// Sleep `d`, ignoring pokes; true when stopped.
    async fn pause(&mut self, d: Duration) -> bool {
        let until = add_saturating(self.now(), d);
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
}

/// The warning for a lock whose versions are not decimal integers: the
/// version as text, quoted and escaped (not its wrapper's `Debug`).
fn unordered_version(describe: &str, version: &str) -> String {
    format!(
        "lease {describe}: the lock's version \"{}\" is not a decimal integer: term tokens are its leaseTransitions instead, which a writer can lower or a deletion restart",
        crate::text::Escaped(version)
    )
}

/// A `resourceVersion` as the revision it is: a decimal integer (KEP-5504:
/// no sign, no leading zero), or `None`.
pub(super) fn revision(version: &str) -> Option<u64> {
    let digits = version.bytes().all(|b| b.is_ascii_digit());
    if !digits || version.is_empty() || version.starts_with('0') {
        return None;
    }
    version.parse().ok()
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

#[cfg(test)]
mod tests {
    use super::{revision, unordered_version};

    #[test]
    fn a_revision_is_a_decimal_integer_without_sign_or_leading_zero() {
        assert_eq!(revision("42"), Some(42));
        assert_eq!(revision("18446744073709551615"), Some(u64::MAX));
        for not in [
            "",
            "0",
            "01",
            "+1",
            "-1",
            "1a",
            "1 ",
            "18446744073709551616",
        ] {
            assert_eq!(revision(not), None, "{not:?}");
        }
    }

    #[test]
    fn the_unordered_version_warning_shows_the_version_not_its_wrapper() {
        let said = unordered_version("default/x", "x1001\u{1b}");
        assert!(
            said.starts_with("lease default/x: the lock's version \"x1001\\u{1b}\" is not"),
            "{said}"
        );
        assert!(!said.contains("Escaped"), "{said}");
    }
}
