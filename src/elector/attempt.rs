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

/// At most this many unconfirmed writes are remembered as ours (and as
/// this acquire's).
const MAX_PENDING_WRITES: usize = 8;

/// Remember `record` in `writes`, forgetting the oldest beyond
/// [`MAX_PENDING_WRITES`].
fn remember(writes: &mut Vec<LeaderElectionRecord>, record: &LeaderElectionRecord) {
    if writes.len() >= MAX_PENDING_WRITES {
        writes.remove(0);
    }
    writes.push(record.clone());
}

/// An update must change the stored record, or kube-apiserver writes
/// nothing (and answers the version it had): a `renewTime` equal to the
/// stored one (a wall clock at the last writable instant, past the year
/// 9999, after a write of ours was refused) moves by a microsecond.
fn never_the_same(record: &mut LeaderElectionRecord, stored: &LeaderElectionRecord) {
    if let (Some(t), Some(s)) = (record.renew_time, stored.renew_time) {
        if t == s {
            let moved = if t.next() == t { t.prev() } else { t.next() };
            record.renew_time = Some(moved);
            if record.acquire_time == Some(t) {
                record.acquire_time = Some(moved);
            }
        }
    }
}

impl<I: Io> Run<I> {
    /// One attempt, as client-go's `tryAcquireOrRenew`, within `round`:
    /// each request gets the per-request cap, never more than is left.
    /// `Ok(true)` when the lease is held by us after this call. While a
    /// term is in progress, a record that is not ours ends it (`Ok(false)`):
    /// a leader renews its own record and takes no other.
    pub(super) async fn try_acquire_or_renew(&mut self, round: &Deadline) -> Result<bool> {
        let cap = self.cfg().request_cap();
        // Always after the last renewTime this process wrote: a wall clock
        // that stands still (or steps back) would otherwise write the
        // stored record again, an update that changes nothing, which
        // kube-apiserver answers with the same resourceVersion and writes
        // nowhere: nobody would see the lease renewed.
        let wall = MicroTime::from_system_time(self.shared.clock.system_time());
        let now_wall = match self.last_written {
            Some(last) if wall <= last => last.next(),
            _ => wall,
        };
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
        if self.is_leader_of_observed() && self.is_lease_valid(self.now()) && !self.waiting_out() {
            if let Some(old) = self.observed.clone() {
                self.carry_over(&mut record, &old);
                never_the_same(&mut record, &old);
            }
            match self.write(&record, &round.capped(cap), false).await {
                Ok(written) => return Ok(written),
                // No time left for the slow path (the answer came past
                // the round's deadline): a read now would be abandoned
                // as soon as sent.
                Err(e) if e.is_transport() || round.is_expired() => return Err(e),
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
            Ok(read) => read,
            Err(e) if e.is_not_found() => return self.vanished(record, &round.capped(cap)).await,
            Err(e) => return Err(e),
        };

        // 3. Judge expiry by when *we* saw the record change (its content
        //    or its version: a holder whose wall clock stands still writes
        //    the same times), never by its renewTime.
        self.observe(old.record.clone(), old.version);
        self.note_recreated(old.recreated);
        let old = old.record;
        let ours = self.is_ours(&old) && !self.recreated_seen;
        if self.term.is_some() && !ours || self.waiting_out() {
            return Ok(false);
        }
        if !old.holder_identity.is_empty() && self.is_lease_valid(self.now()) && !ours {
            log::debug!(
                "lease {} is held by {} and has not yet expired",
                self.shared.describe,
                crate::text::Escaped(&old.holder_identity)
            );
            return Ok(false);
        }

        // 4. Ours to take or keep.
        self.carry_over(&mut record, &old);
        never_the_same(&mut record, &old);
        let written = match self.write(&record, &round.capped(cap), false).await {
            // Another candidate took it first (a release wakes every
            // watching follower at once): held by someone else, as the
            // next read shows. Not a failure, as a create that loses the
            // race is not.
            Err(e) if e.is_conflict() && self.term.is_none() => {
                log::debug!(
                    "lease {} was taken by another candidate first",
                    self.shared.describe
                );
                return Ok(false);
            }
            written => written?,
        };
        if slow_path {
            self.shared.lock().counters.slow_path_renews += 1;
        }
        Ok(written)
    }

    /// A candidate waits out a deleted Lease (see `vanished`), also one it
    /// created again itself with an update: nobody leads on it before its
    /// last holder's lease duration has passed.
    fn waiting_out(&self) -> bool {
        self.term.is_none() && self.gone_until.is_some_and(|until| until > self.now())
    }

    /// The Lease is gone (404). That is a change, observed now: whoever
    /// held it last still holds it for a lease duration from now (it may
    /// be renewing and not have noticed yet, as with any change we see),
    /// and nobody creates it earlier. "Whoever" is the holder we last saw,
    /// or one we have not seen when our last write was refused (someone
    /// else wrote since our last read). A leader whose Lease is gone steps
    /// down, and waits as the others do: a Lease created again by its
    /// holder and deleted once more would hide that holder's term from a
    /// candidate that saw the Lease missing both times. (client-go creates
    /// it at once, leader or not, and a follower then leads beside a
    /// leader that has not noticed.)
    async fn vanished(
        &mut self,
        mut record: LeaderElectionRecord,
        deadline: &Deadline,
    ) -> Result<bool> {
        self.lease_gone();
        let now = self.now();
        let held = self.gone_until.is_some_and(|until| until > now);
        if self.term.is_some() || held {
            log::debug!(
                "lease {} is gone; its last holder holds it until it expires",
                self.shared.describe
            );
            return Ok(false);
        }
        // Forget the record seen before: its expiry, long past, would
        // otherwise still time the next attempt (at once, every
        // millisecond against a server answering 404 and then
        // AlreadyExists).
        self.observed = None;
        self.observed_version = None;
        // A new term: one more transition than any seen.
        record.leader_transitions = self.max_transitions.map_or(0, |m| m.saturating_add(1));
        match self.write(&record, deadline, true).await {
            // Another candidate created it first: held by someone else, as
            // a read would have shown (the next attempt reads it). Not a
            // failure.
            Err(e) if e.is_already_exists() => {
                log::debug!(
                    "lease {} was created by another candidate first",
                    self.shared.describe
                );
                Ok(false)
            }
            written => written,
        }
    }

    /// A read found the Lease deleted and created again since the last one
    /// (a new uid): under a term, that is a deletion seen, whatever record
    /// it holds (a write of ours that landed late, its answer lost, can
    /// have created it): the term is over.
    pub(super) fn note_recreated(&mut self, recreated: bool) {
        if recreated && self.term.is_some() {
            self.recreated_seen = true;
        }
    }

    /// The Lease was found missing: unless already so, it is held from now
    /// on for a lease duration by whoever held it last (the holder we saw,
    /// or one unseen after our write was refused), or by nobody.
    pub(super) fn lease_gone(&mut self) {
        if self.gone_until.is_some() {
            return;
        }
        let now = self.now();
        let last = self.observed.as_ref();
        let held = self.unseen_write || last.is_some_and(|r| !r.holder_identity.is_empty());
        let duration = last
            .map_or(Duration::ZERO, LeaderElectionRecord::lease_duration)
            .max(self.cfg().lease_duration);
        self.gone_until = Some(if held {
            add_saturating(now, duration)
        } else {
            now
        });
        self.observed_at = now;
    }

    /// What our write over `old` keeps of it. A renew keeps the term's
    /// acquire time and the `leaseTransitions` it began with. A record we
    /// wrote in this acquire phase (its answer lost) is kept as it is.
    /// Anything else is a new term, which writes one more than the highest
    /// `leaseTransitions` this candidate has seen on this Lease or finds
    /// stored (client-go adds one to the stored value on a change of
    /// holder; the term's token is the write's `resourceVersion`, not this).
    fn carry_over(&self, record: &mut LeaderElectionRecord, old: &LeaderElectionRecord) {
        if self.term.is_some() {
            record.acquire_time = old.acquire_time;
            record.leader_transitions = self.term_transitions;
        } else if self.acquire_writes.iter().any(|w| w == old) {
            record.acquire_time = old.acquire_time;
            record.leader_transitions = old.leader_transitions;
        } else {
            let seen = self
                .max_transitions
                .unwrap_or(0)
                .max(old.leader_transitions);
            record.leader_transitions = seen.saturating_add(1);
        }
        record.strategy = old.strategy.clone();
        record.preferred_holder = old.preferred_holder.clone();
    }

    /// Read the record, counted as a request unless a watch event answered
    /// it: `lease_elector_requests_total` counts requests sent.
    pub(super) async fn read(&mut self, deadline: &Deadline) -> Result<Read> {
        let result = self.io.get(deadline).await;
        let sent = result.as_ref().map_or(true, |read| !read.local);
        // A 404 is an answer: the Lease does not exist yet, the way into a
        // create (every new Lease starts so).
        let failure = result.as_ref().err().filter(|e| !e.is_not_found());
        self.count_request(sent, failure);
        result
    }

    /// Count a call to the lock: a request if `sent`, and a failed one on
    /// an error answer, no answer or a conflict on our renew, but not a
    /// write that lost the race to take the lease to another candidate (a
    /// create's 409, or an acquiring update's: the lease is then simply
    /// held by someone else) nor a request a stop cut short.
    pub(super) fn count_request(&mut self, sent: bool, failure: Option<&Error>) {
        if sent {
            let asked = match failure {
                Some(Error::Api { status, .. }) => status
                    .retry_after
                    .unwrap_or_default()
                    .min(crate::client::MAX_RETRY_AFTER),
                _ => Duration::ZERO,
            };
            self.last_request = Some((self.now(), failure.is_some(), asked));
        }
        let mut st = self.shared.lock();
        if sent {
            st.counters.requests += 1;
        }
        if let Some(e) = failure {
            let lost_race = e.is_already_exists() || e.is_conflict() && self.term.is_none();
            if !lost_race && !self.shared.wake.is_stopped() {
                st.counters.failed_requests += 1;
            }
        }
    }

    /// Create or update the lock with `record`, remembering it as ours
    /// whatever the answer (a write whose answer was lost may have landed).
    /// `Ok(true)` when it holds the lease for us; `Ok(false)` when an
    /// update found the Lease deleted (Leases allow create-on-update, so
    /// it created it anew): that is a deletion seen now, as a 404 is.
    async fn write(
        &mut self,
        record: &LeaderElectionRecord,
        deadline: &Deadline,
        create: bool,
    ) -> Result<bool> {
        remember(&mut self.unanswered, record);
        if record.renew_time.is_some() {
            self.last_written = record.renew_time;
        }
        if self.term.is_none() {
            remember(&mut self.acquire_writes, record);
        }
        let result = if create {
            self.io.create(record, deadline).await
        } else {
            self.io.update(record, deadline).await
        };
        self.count_request(true, result.as_ref().err());
        // Refused because someone else wrote: something we have not read.
        if matches!(&result, Err(e) if e.is_conflict() || e.is_already_exists()) {
            self.unseen_write = true;
        }
        let written = result?;
        self.confirmed = Some(record.clone());
        self.unanswered.clear();
        self.observe(record.clone(), written.version);
        if written.recreated {
            let duration = record.lease_duration().max(self.cfg().lease_duration);
            self.gone_until = Some(add_saturating(self.observed_at, duration));
            return Ok(false);
        }
        Ok(true)
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

    /// Remember `record` (at `version`) as observed. A change of either
    /// restarts its expiry from now; the highest `leaseTransitions` seen
    /// is kept for the next term's.
    pub(super) fn observe(&mut self, record: LeaderElectionRecord, version: Option<String>) {
        let t = record.leader_transitions;
        self.max_transitions = Some(self.max_transitions.map_or(t, |m| m.max(t)));
        self.unseen_write = false;
        // Someone else's record: our writes still unanswered were decided
        // on what we knew before it. A create among them may yet land (on
        // a Lease deleted meanwhile), and must then be waited out like a
        // stranger's, not led on: forget them.
        if !self.is_ours(&record) {
            self.unanswered.clear();
            self.acquire_writes.clear();
        }
        // The same record at the same version: no change (also of one we
        // created again, which is still being waited out).
        if self.observed.as_ref() == Some(&record) && self.observed_version == version {
            return;
        }
        self.gone_until = None;
        self.note_same_identity(&record);
        self.observed = Some(record);
        self.observed_version = version;
        self.observed_at = self.now();
    }

    /// Written by this process (matched on the times it wrote, which the
    /// server keeps as sent).
    pub(super) fn is_ours(&self, r: &LeaderElectionRecord) -> bool {
        r.holder_identity == self.io.identity()
            && self
                .confirmed
                .iter()
                .chain(&self.unanswered)
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
        if let Some(until) = self.gone_until {
            return until
                .saturating_duration_since(self.now())
                .saturating_add(Duration::from_millis(1));
        }
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
        if let Some(holder) = self.publish_holder() {
            self.announce_holder(holder);
        }
    }

    /// The first half of `maybe_report_transition`, no log and no event:
    /// the status's `leader` and the transitions counter, so that whoever
    /// sees a term end (right after) also sees who holds the lease now.
    /// `Some(holder)` when it changed, to announce.
    pub(super) fn publish_holder(&mut self) -> Option<Option<String>> {
        let holder = self
            .observed
            .as_ref()
            .map(|r| r.holder_identity.clone())
            .filter(|h| !h.is_empty());
        if holder == self.reported_leader {
            return None;
        }
        self.reported_leader = holder.clone();
        let mut st = self.shared.lock();
        st.leader = holder.clone();
        if holder.is_some() {
            st.counters.transitions += 1;
        }
        Some(holder)
    }

    /// The second half: the log line and the `NewLeader` event.
    pub(super) fn announce_holder(&self, holder: Option<String>) {
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
