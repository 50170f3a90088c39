//! One acquire-or-renew attempt against the Lease, as client-go's
//! `tryAcquireOrRenew`, and what the elector thread keeps of the record it
//! last observed: whose it is (ours only if this process wrote it), when it
//! expires by our clock, and who leads.

use std::time::{Duration, Instant};

use super::io::{Io, Read};
use super::run::Run;
use super::LeaderEvent;
use crate::clock::add_saturating;
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::lease::{LeaderElectionRecord, MicroTime};

/// At most this many unconfirmed writes are remembered as ours.
const MAX_PENDING_WRITES: usize = 8;

impl<I: Io> Run<I> {
    /// One attempt, as client-go's `tryAcquireOrRenew`, within `round`:
    /// each request gets the per-request cap, never more than is left.
    /// `Ok(true)` when the lease is held by us after this call.
    pub(super) async fn try_acquire_or_renew(&mut self, round: &Deadline) -> Result<bool> {
        let cap = self.cfg().request_cap();
        let now_wall = MicroTime::from_system_time(self.shared.clock.system_time());
        let mut record = LeaderElectionRecord {
            holder_identity: self.io.identity().to_string(),
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
            match self.write(&record, &round.capped(cap), false).await {
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
        let old = match self.read(&deadline).await {
            Ok(read) => read.record,
            Err(e) if e.is_not_found() => {
                // No record exists: forget the one seen before, whose
                // expiry would otherwise still time the next attempt (an
                // expired one: at once, every millisecond against a server
                // answering 404 and then AlreadyExists).
                self.observed = None;
                return match self.write(&record, &round.capped(cap), true).await {
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
        self.write(&record, &round.capped(cap), false).await?;
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

    /// Read the record, counted as a request unless a watch event answered
    /// it: `lease_elector_requests_total` counts requests sent.
    async fn read(&mut self, deadline: &Deadline) -> Result<Read> {
        let result = self.io.get(deadline).await;
        let sent = result.as_ref().map_or(true, |read| !read.local);
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
    async fn write(
        &mut self,
        record: &LeaderElectionRecord,
        deadline: &Deadline,
        create: bool,
    ) -> Result<()> {
        if self.written.len() > MAX_PENDING_WRITES {
            self.written.remove(1);
        }
        self.written.push(record.clone());
        let result = if create {
            self.io.create(record, deadline).await
        } else {
            self.io.update(record, deadline).await
        };
        self.count_request(true, result.as_ref().err());
        result?;
        self.written = vec![record.clone()];
        self.set_observed(record.clone());
        Ok(())
    }

    /// A record under our identity that this process did not write means
    /// another process uses the same identity. Seen once, it may be a
    /// previous run of ours (it is waited out like any other holder's);
    /// seen changing, someone is renewing it: report it.
    fn note_same_identity(&mut self, new: &LeaderElectionRecord) {
        if new.holder_identity != self.io.identity() || self.is_ours(new) {
            return;
        }
        let renewed = self
            .observed
            .as_ref()
            .is_some_and(|old| old.holder_identity == new.holder_identity && !self.is_ours(old));
        let desc = &self.shared.describe;
        let identity = self.io.identity();
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

    /// Remember `record` as observed: its expiry counts from now.
    pub(super) fn set_observed(&mut self, record: LeaderElectionRecord) {
        self.observed = Some(record);
        self.observed_at = self.now();
    }

    /// Written by this process (matched on the times it wrote, which the
    /// server keeps as sent).
    pub(super) fn is_ours(&self, r: &LeaderElectionRecord) -> bool {
        r.holder_identity == self.io.identity()
            && self
                .written
                .iter()
                .any(|w| w.renew_time == r.renew_time && w.acquire_time == r.acquire_time)
    }

    /// The observed record is one this process wrote: we hold the lease.
    pub(super) fn is_leader_of_observed(&self) -> bool {
        self.observed.as_ref().is_some_and(|r| self.is_ours(r))
    }

    /// The observed record names a holder other than this process.
    pub(super) fn held_by_other(&self) -> bool {
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
    pub(super) fn until_expiry(&self) -> Duration {
        match &self.observed {
            Some(r) if !r.holder_identity.is_empty() => self
                .observed_expiry()
                .saturating_duration_since(self.now())
                .saturating_add(Duration::from_millis(1)),
            _ => Duration::MAX,
        }
    }

    /// Tell a change of the observed holder: the status's `leader`, the
    /// transitions counter, a `NewLeader` event (and a log line when the
    /// new leader is not us).
    pub(super) fn maybe_report_transition(&mut self) {
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
            if identity != self.io.identity() {
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
}
