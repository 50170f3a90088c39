//! One acquire-or-renew attempt against the Lease, as client-go's
//! `tryAcquireOrRenew`, and what the elector thread tells its
//! [`Knowledge`](super::knowledge::Knowledge) of each read and write (which
//! decides whose the record is, when it expires by our clock, and what the
//! next write holds).

use std::time::Duration;

use super::io::{Io, Read, Reader};
use super::knowledge::SameIdentity;
use super::leader_event::LeaderEvent;
use super::run::Run;
use super::term::Term;
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::lease::{LeaderElectionRecord, MicroTime};

impl<I: Io> Run<I> {
    /// One attempt, as client-go's `tryAcquireOrRenew`, within `round`:
    /// each request gets the per-request cap, never more than is left.
    /// `Ok(true)` when the lease is held by us after this call. While a
    /// term is in progress, a record that is not ours ends it (`Ok(false)`):
    /// a leader renews its own record and takes no other.
    pub(super) async fn try_acquire_or_renew(&mut self, round: &Deadline) -> Result<bool> {
        let cap = self.cfg().request_cap();
        let wall = MicroTime::from_system_time(self.shared.clock.system_time());
        let wall = self.know(|k| k.write_time(wall));
        let seconds = self.cfg().lease_duration.as_secs() as i32;
        let in_term = self.term.is_some();
        let term_transitions = self.term.as_ref().map(Term::transitions);

        // 1. Fast path for the leader: one PUT against the cached version.
        let now = self.now();
        let fast = self.know(|k| k.leads() && k.valid_at(now) && !k.waiting_out(now, in_term));
        if fast {
            let record = self.know(|k| k.next_write(seconds, wall, k.record(), term_transitions));
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

        // 2. Obtain or create the record. A follower's read may be
        //    answered by a watch that vouches nothing changed.
        let slow_path = self.know(|k| k.leads());
        let reader = if in_term || slow_path {
            Reader::Term
        } else {
            Reader::Follower
        };
        let deadline = round.capped(cap);
        let old = match self.read(&deadline, reader).await {
            Ok(read) => read,
            Err(e) if e.is_not_found() => {
                return self.vanished(seconds, wall, &round.capped(cap)).await;
            }
            Err(e) => return Err(e),
        };

        // 3. Judge expiry by when *we* saw the record change (its content
        //    or its version: a holder whose wall clock stands still writes
        //    the same times), never by its renewTime.
        self.observe(old.record.clone(), old.version);
        self.note_recreated(old.recreated);
        let old = old.record;
        let now = self.now();
        let (ours, valid, waiting) = self.know(|k| {
            let ours = k.is_ours(&old) && !k.recreated();
            (ours, k.valid_at(now), k.waiting_out(now, in_term))
        });
        if in_term && !ours || waiting {
            return Ok(false);
        }
        if !old.holder_identity.is_empty() && valid && !ours {
            log::debug!(
                "lease {} is held by {} and has not yet expired",
                self.shared.describe,
                crate::text::Escaped(&old.holder_identity)
            );
            return Ok(false);
        }

        // 4. Ours to take or keep.
        let record = self.know(|k| k.next_write(seconds, wall, Some(&old), term_transitions));
        let written = match self.write(&record, &round.capped(cap), false).await {
            // Another candidate took it first (a release wakes every
            // watching follower at once): held by someone else, as the
            // next read shows. Not a failure, as a create that loses the
            // race is not.
            Err(e) if e.is_conflict() && !in_term => {
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
    /// leader that has not noticed.) Otherwise create it: a new term, at
    /// `wall`, for `seconds`.
    async fn vanished(
        &mut self,
        seconds: i32,
        wall: MicroTime,
        deadline: &Deadline,
    ) -> Result<bool> {
        self.lease_gone();
        let now = self.now();
        if self.term.is_some() || self.know(|k| k.gone_and_held(now)) {
            log::debug!(
                "lease {} is gone; its last holder holds it until it expires",
                self.shared.describe
            );
            return Ok(false);
        }
        // Forget the record seen before: its expiry, long past, would
        // otherwise still time the next attempt (at once, every
        // millisecond against a server answering 404 and then
        // AlreadyExists). A new term: one more transition than any seen.
        let record = self.know(|k| {
            k.forget_record();
            k.next_write(seconds, wall, None, None)
        });
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
            self.know(|k| k.seen_recreated());
        }
    }

    /// The Lease was found missing now (see `Knowledge::gone`).
    pub(super) fn lease_gone(&mut self) {
        let (now, duration) = (self.now(), self.cfg().lease_duration);
        self.know(|k| k.gone(now, duration));
    }

    /// Read the record, counted as a request unless the watch answered
    /// it: `lease_elector_requests_total` counts requests sent.
    pub(super) async fn read(&mut self, deadline: &Deadline, reader: Reader) -> Result<Read> {
        let result = self.io.get(deadline, reader).await;
        let sent = self.io.last_read_sent();
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
            self.pacing.sent(self.now(), failure.is_some(), asked);
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
        let acquiring = self.term.is_none();
        self.know(|k| k.sending(record, acquiring));
        let result = if create {
            self.io.create(record, deadline).await
        } else {
            self.io.update(record, deadline).await
        };
        self.count_request(true, result.as_ref().err());
        // Refused because someone else wrote: something we have not read.
        if matches!(&result, Err(e) if e.is_conflict() || e.is_already_exists()) {
            self.know(|k| k.refused_by_another());
        }
        let written = result?;
        let (now, duration) = (self.now(), self.cfg().lease_duration);
        let record = record.clone();
        Ok(self.know(|k| k.answered(record, written.version, written.recreated, now, duration)))
    }

    /// Tell the knowledge `record` (at `version`) was read now, and the log
    /// what a record under our identity that this process did not write
    /// means: seen once, a previous run of ours perhaps (it is waited out
    /// like any other holder's); seen changing, someone is renewing it.
    pub(super) fn observe(&mut self, record: LeaderElectionRecord, version: Option<String>) {
        let now = self.now();
        let same = self.know(|k| k.seen(record, version, now));
        let desc = &self.shared.describe;
        let identity = self.io.identity();
        match same {
            SameIdentity::Seen => log::info!(
                "lease {desc} is held under our identity {identity:?} by a record this process did not write (a previous run?); waiting for it to expire"
            ),
            SameIdentity::Renewed { first: true } => log::error!(
                "lease {desc} is being renewed under our identity {identity:?} by another process: two candidates share one identity; not leading until it stops (give each candidate a unique identity)"
            ),
            SameIdentity::Renewed { first: false } | SameIdentity::No => {}
        }
    }

    /// The record last read names a holder other than this process.
    pub(super) fn held_by_other(&self) -> bool {
        self.know(|k| k.held_by_other())
    }

    /// Tell a change of the observed holder: the transitions counter, a
    /// `NewLeader` event (and a log line when the new leader is not us).
    pub(super) fn maybe_report_transition(&mut self) {
        if let Some(holder) = self.publish_holder() {
            self.announce_holder(holder);
        }
    }

    /// The first half of `maybe_report_transition`, no log and no event:
    /// the transitions counter, so that whoever sees a term end (right
    /// after) also sees who holds the lease now. `Some(holder)` when it
    /// changed, to announce.
    pub(super) fn publish_holder(&mut self) -> Option<Option<String>> {
        let mut st = self.shared.lock();
        let holder = st.lease.holder_to_announce()?;
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
