//! [`Knowledge`]: what this process knows of its Lease, in one place. The
//! elector thread writes it (what it read, what it wrote, what the server
//! answered), and everything that reads a fact of the Lease reads it here:
//! the state machine's decisions, the status and the probe, the events.
//!
//! Three parts, each a paragraph of fields:
//! - what was last read (the record, its version, when either last changed
//!   by our clock, whether the Lease was gone and who still holds it until
//!   when, whether a write of ours was refused by one we have not read);
//! - what this process wrote (the last write the server confirmed, those
//!   sent since without an answer, this acquire's, the last `renewTime`);
//! - what the caller and the log were told (the holder last announced, a
//!   warning given once).
//!
//! What follows from both is asked, never stored: who holds the Lease,
//! until when by our clock, whether a record under our identity is ours,
//! what the next write must hold. Expiry is judged by when *we* saw the
//! record change, never by its `renewTime` (client-go's rule).
//!
//! No clock here: each change and question gets `now`, so that the rules
//! are tested on instants chosen by the test.

use std::time::{Duration, Instant};

use crate::clock::add_saturating;
use crate::lease::{LeaderElectionRecord, MicroTime};

/// At most this many unconfirmed writes are remembered as ours (and as
/// this acquire's).
const MAX_PENDING_WRITES: usize = 8;

/// What this process knows of its Lease (see the module docs).
#[derive(Debug)]
pub(super) struct Knowledge {
    identity: String,

    /// The record as last read (or written and confirmed), its version,
    /// and when (our clock) either last changed, or the Lease was seen
    /// gone.
    record: Option<LeaderElectionRecord>,
    version: Option<String>,
    changed_at: Instant,
    /// The last read found no Lease: until when its last holder (seen or
    /// not) still holds it (`changed_at`, if none did).
    gone_until: Option<Instant>,
    /// Our last write was refused because someone else wrote: the Lease
    /// holds a record we have not read.
    unseen_write: bool,
    /// The highest `leaseTransitions` seen on this Lease (read or written).
    max_transitions: Option<i32>,
    /// The Lease was seen deleted and created again during the term.
    recreated: bool,
    /// A record under our identity that this process did not write was
    /// seen renewed: another process uses our identity.
    duplicate_identity: bool,

    /// Records this process wrote: the last the server confirmed, and any
    /// sent since without an answer (a write whose answer was lost may
    /// still have landed).
    confirmed: Option<LeaderElectionRecord>,
    unanswered: Vec<LeaderElectionRecord>,
    /// Records written since this acquire phase began (a term's start
    /// ends it): read back, such a record is ours to keep as it is.
    acquire_writes: Vec<LeaderElectionRecord>,
    /// The `renewTime` this process last sent, answered or not.
    last_written: Option<MicroTime>,

    /// The holder last announced (`NewLeader`, the transitions counter).
    told_holder: Option<String>,
    /// A lock version that is not a decimal integer was warned about.
    warned_unordered: bool,
}

/// What a record read under our identity, not written by this process,
/// tells (for the log: the rule is the same either way, it is waited out
/// like any other holder's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SameIdentity {
    /// Not such a record.
    No,
    /// Seen for the first time: a previous run of ours, perhaps.
    Seen,
    /// Seen renewed: another process uses our identity (`first` time
    /// noticed since the last term began).
    Renewed { first: bool },
}

impl Knowledge {
    pub(super) fn new(identity: &str, now: Instant) -> Knowledge {
        Knowledge {
            identity: identity.to_string(),
            record: None,
            version: None,
            changed_at: now,
            gone_until: None,
            unseen_write: false,
            max_transitions: None,
            recreated: false,
            duplicate_identity: false,
            confirmed: None,
            unanswered: Vec::new(),
            acquire_writes: Vec::new(),
            last_written: None,
            told_holder: None,
            warned_unordered: false,
        }
    }

    // ---- what was read ------------------------------------------------------

    /// `record` at `version` was read (or written and confirmed) `now`. A
    /// change of either restarts its expiry from now; the highest
    /// `leaseTransitions` seen is kept for the next term's.
    pub(super) fn seen(
        &mut self,
        record: LeaderElectionRecord,
        version: Option<String>,
        now: Instant,
    ) -> SameIdentity {
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
        if self.record.as_ref() == Some(&record) && self.version == version {
            return SameIdentity::No;
        }
        self.gone_until = None;
        let same = self.same_identity(&record);
        self.record = Some(record);
        self.version = version;
        self.changed_at = now;
        same
    }

    /// A record under our identity that this process did not write means
    /// another process uses the same identity. Seen once, it may be a
    /// previous run of ours; seen changing, someone is renewing it.
    fn same_identity(&mut self, new: &LeaderElectionRecord) -> SameIdentity {
        if new.holder_identity != self.identity || self.is_ours(new) {
            return SameIdentity::No;
        }
        let renewed = self
            .record
            .as_ref()
            .is_some_and(|old| old.holder_identity == new.holder_identity && !self.is_ours(old));
        if !renewed {
            return SameIdentity::Seen;
        }
        let first = !std::mem::replace(&mut self.duplicate_identity, true);
        SameIdentity::Renewed { first }
    }

    /// The Lease was found missing `now`: unless already so, it is held
    /// from now on for a lease duration (the record's, at least ours,
    /// `lease_duration`) by whoever held it last (the holder we saw, or
    /// one unseen after our write was refused), or by nobody.
    pub(super) fn gone(&mut self, now: Instant, lease_duration: Duration) {
        if self.gone_until.is_some() {
            return;
        }
        let last = self.record.as_ref();
        let held = self.unseen_write || last.is_some_and(|r| !r.holder_identity.is_empty());
        let duration = last
            .map_or(Duration::ZERO, LeaderElectionRecord::lease_duration)
            .max(lease_duration);
        self.gone_until = Some(if held {
            add_saturating(now, duration)
        } else {
            now
        });
        self.changed_at = now;
    }

    /// Forget the record seen before the Lease went: its expiry, long
    /// past, would otherwise still time the next attempt.
    pub(super) fn forget_record(&mut self) {
        self.record = None;
        self.version = None;
    }

    /// A read during the term found the Lease deleted and created again
    /// since the last one (a new uid).
    pub(super) fn seen_recreated(&mut self) {
        self.recreated = true;
    }

    // ---- what was written ---------------------------------------------------

    /// `record` is being sent (`acquiring`: no term is in progress):
    /// remembered as ours whatever the answer.
    pub(super) fn sending(&mut self, record: &LeaderElectionRecord, acquiring: bool) {
        remember(&mut self.unanswered, record);
        if record.renew_time.is_some() {
            self.last_written = record.renew_time;
        }
        if acquiring {
            remember(&mut self.acquire_writes, record);
        }
    }

    /// Our write was refused because someone else wrote (a conflict, or
    /// the Lease already exists): something we have not read.
    pub(super) fn refused_by_another(&mut self) {
        self.unseen_write = true;
    }

    /// The server stored `record` at `version` (`recreated`: an update
    /// created the Lease anew, so it had been deleted: that is a deletion
    /// seen now, held for a lease duration, at least ours). True when it
    /// holds the Lease for us.
    pub(super) fn answered(
        &mut self,
        record: LeaderElectionRecord,
        version: Option<String>,
        recreated: bool,
        now: Instant,
        lease_duration: Duration,
    ) -> bool {
        self.confirmed = Some(record.clone());
        self.unanswered.clear();
        let duration = record.lease_duration().max(lease_duration);
        self.seen(record, version, now);
        if recreated {
            self.gone_until = Some(add_saturating(self.changed_at, duration));
            return false;
        }
        true
    }

    /// A term began: its acquire phase is over.
    pub(super) fn term_began(&mut self) {
        self.recreated = false;
        self.duplicate_identity = false;
        self.acquire_writes.clear();
    }

    // ---- what follows -------------------------------------------------------

    /// Written by this process (matched on the times it wrote, which the
    /// server keeps as sent).
    pub(super) fn is_ours(&self, r: &LeaderElectionRecord) -> bool {
        r.holder_identity == self.identity
            && self
                .confirmed
                .iter()
                .chain(&self.unanswered)
                .any(|w| w.renew_time == r.renew_time && w.acquire_time == r.acquire_time)
    }

    /// The record last read is one this process wrote: we hold the Lease.
    pub(super) fn leads(&self) -> bool {
        self.record.as_ref().is_some_and(|r| self.is_ours(r))
    }

    /// The record last read names a holder other than this process.
    pub(super) fn held_by_other(&self) -> bool {
        self.record
            .as_ref()
            .is_some_and(|r| !r.holder_identity.is_empty() && !self.is_ours(r))
    }

    /// The holder the record last read names, if any.
    pub(super) fn holder(&self) -> Option<&str> {
        self.record
            .as_ref()
            .map(|r| r.holder_identity.as_str())
            .filter(|h| !h.is_empty())
    }

    /// Until when the record last read holds the Lease by our clock: its
    /// duration after we saw it change.
    pub(super) fn valid_until(&self) -> Instant {
        let duration = self
            .record
            .as_ref()
            .map_or(Duration::ZERO, LeaderElectionRecord::lease_duration);
        add_saturating(self.changed_at, duration)
    }

    /// The record last read still holds the Lease `now`.
    pub(super) fn valid_at(&self, now: Instant) -> bool {
        self.valid_until() > now
    }

    /// A candidate (`in_term` false) waits out a deleted Lease, also one
    /// it created again itself with an update: nobody leads on it before
    /// its last holder's lease duration has passed.
    pub(super) fn waiting_out(&self, now: Instant, in_term: bool) -> bool {
        !in_term && self.gone_until.is_some_and(|until| until > now)
    }

    /// The Lease was seen gone, and its last holder still holds it `now`.
    pub(super) fn gone_and_held(&self, now: Instant) -> bool {
        self.gone_until.is_some_and(|until| until > now)
    }

    /// Time from `now` until the Lease another holder holds is free (plus
    /// a millisecond so the attempt sees it expired); forever when nobody
    /// holds it. Waking then, rather than at the next jittered retry,
    /// makes a crash failover take a lease duration from the last observed
    /// change, not that plus a retry period.
    pub(super) fn until_free(&self, now: Instant) -> Duration {
        let until = match (&self.gone_until, &self.record) {
            (Some(until), _) => *until,
            (None, Some(r)) if !r.holder_identity.is_empty() => self.valid_until(),
            _ => return Duration::MAX,
        };
        until
            .saturating_duration_since(now)
            .saturating_add(Duration::from_millis(1))
    }

    /// Why the Lease is not ours any more, as the record last read tells.
    pub(super) fn why_not_ours(&self) -> String {
        match self.record.as_ref().map(|r| r.holder_identity.as_str()) {
            _ if self.recreated => "the lease was deleted and created again".to_string(),
            _ if self.gone_until.is_some() => "the lease was deleted".to_string(),
            Some("") => "the lease was freed by another writer".to_string(),
            Some(holder) => format!("the lease is now held by {}", crate::text::escape(holder)),
            None => "the lease was created anew by another candidate".to_string(),
        }
    }

    /// The record last read, if any.
    pub(super) fn record(&self) -> Option<&LeaderElectionRecord> {
        self.record.as_ref()
    }

    /// The version of the record last read, if the lock gives one.
    pub(super) fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    /// The Lease was seen deleted and created again during the term.
    pub(super) fn recreated(&self) -> bool {
        self.recreated
    }

    /// See [`SameIdentity::Renewed`].
    pub(super) fn duplicate_identity(&self) -> bool {
        self.duplicate_identity
    }

    /// The time an attempt writes, the wall clock reading `wall`: always
    /// after the last `renewTime` this process sent (a wall clock that
    /// stands still or steps back moves each write a microsecond on). One
    /// per attempt: its fast path and its slow path write the same.
    pub(super) fn write_time(&self, wall: MicroTime) -> MicroTime {
        match self.last_written {
            Some(last) if wall <= last => last.next(),
            _ => wall,
        }
    }

    /// The record this process writes next, holder `identity` for
    /// `lease_duration_seconds`, at `now` (from [`Knowledge::write_time`]), over `stored`
    /// (`None`: a create, over nothing). A renew (`term_transitions`, the
    /// `leaseTransitions` the term began with) keeps the term's acquire
    /// time and transitions; a record we wrote in this acquire phase (its
    /// answer lost) is kept as it is; anything else is a new term, which
    /// writes one more than the highest `leaseTransitions` seen on this
    /// Lease or stored (client-go adds one to the stored value on a change
    /// of holder).
    ///
    /// An update must change the stored record, or kube-apiserver writes
    /// nothing (and answers the version it had): the `renewTime`, after
    /// the last one this process sent (`write_time`), is never the stored
    /// one (at the last writable instant it steps back instead, an acquire
    /// time that equals it with it).
    pub(super) fn next_write(
        &self,
        lease_duration_seconds: i32,
        now: MicroTime,
        stored: Option<&LeaderElectionRecord>,
        term_transitions: Option<i32>,
    ) -> LeaderElectionRecord {
        let mut record = LeaderElectionRecord {
            holder_identity: self.identity.clone(),
            lease_duration_seconds,
            acquire_time: Some(now),
            renew_time: Some(now),
            leader_transitions: self.max_transitions.map_or(0, |m| m.saturating_add(1)),
            strategy: None,
            preferred_holder: None,
        };
        let Some(old) = stored else {
            return record;
        };
        if let Some(transitions) = term_transitions {
            record.acquire_time = old.acquire_time;
            record.leader_transitions = transitions;
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
        if old.renew_time == Some(now) {
            let moved = if now.next() == now {
                now.prev()
            } else {
                now.next()
            };
            record.renew_time = Some(moved);
            if record.acquire_time == Some(now) {
                record.acquire_time = Some(moved);
            }
        }
        record
    }

    /// The release of the record last read, written at `wall`: no holder,
    /// a 1 s duration, the times `wall`, the rest (`leaseTransitions`
    /// among it) kept.
    pub(super) fn release_record(&self, wall: MicroTime) -> LeaderElectionRecord {
        LeaderElectionRecord {
            holder_identity: String::new(),
            lease_duration_seconds: 1,
            acquire_time: Some(wall),
            renew_time: Some(wall),
            ..self.record.clone().unwrap_or_default()
        }
    }

    // ---- what was told ------------------------------------------------------

    /// The holder, if it changed since it was last announced: to announce
    /// now (`Some(None)`: nobody holds it any more).
    pub(super) fn holder_to_announce(&mut self) -> Option<Option<String>> {
        let holder = self.holder().map(str::to_string);
        if holder == self.told_holder {
            return None;
        }
        self.told_holder = holder.clone();
        Some(holder)
    }

    /// True the first time only: a version that is not a decimal integer
    /// is warned about once.
    pub(super) fn warn_unordered(&mut self) -> bool {
        !std::mem::replace(&mut self.warned_unordered, true)
    }
}

/// Remember `record` in `writes`, forgetting the oldest beyond
/// [`MAX_PENDING_WRITES`].
fn remember(writes: &mut Vec<LeaderElectionRecord>, record: &LeaderElectionRecord) {
    if writes.len() >= MAX_PENDING_WRITES {
        writes.remove(0);
    }
    writes.push(record.clone());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    const S: fn(u64) -> Duration = Duration::from_secs;

    /// A record of `holder`'s for 15 s, acquired and renewed at second
    /// `at` of the wall clock, with `transitions`.
    fn record(holder: &str, at: u64, transitions: i32) -> LeaderElectionRecord {
        let t = MicroTime::from_system_time(UNIX_EPOCH + S(1_800_000_000 + at));
        LeaderElectionRecord {
            holder_identity: holder.into(),
            lease_duration_seconds: 15,
            acquire_time: Some(t),
            renew_time: Some(t),
            leader_transitions: transitions,
            ..LeaderElectionRecord::default()
        }
    }

    fn wall(at: u64) -> MicroTime {
        MicroTime::from_system_time(UNIX_EPOCH + S(1_800_000_000 + at))
    }

    fn v(n: u64) -> Option<String> {
        Some(n.to_string())
    }

    /// "me" knowing nothing yet, at `t0`.
    fn knowing() -> (Knowledge, Instant) {
        let t0 = Instant::now();
        (Knowledge::new("me", t0), t0)
    }

    /// "me" having written `r`, which the server stored at version 1.
    fn wrote(k: &mut Knowledge, r: &LeaderElectionRecord, now: Instant) {
        k.sending(r, true);
        assert!(k.answered(r.clone(), v(1), false, now, S(15)));
    }

    #[test]
    fn expiry_is_judged_by_when_we_saw_the_record_change_not_its_renew_time() {
        let (mut k, t0) = knowing();
        k.seen(record("other", 0, 1), v(5), t0);
        assert_eq!(k.valid_until(), t0 + S(15));
        // The same record at the same version later: no change.
        k.seen(record("other", 0, 1), v(5), t0 + S(10));
        assert_eq!(k.valid_until(), t0 + S(15));
        assert!(k.valid_at(t0 + S(15) - Duration::from_nanos(1)));
        assert!(!k.valid_at(t0 + S(15)), "expired at the instant");
        // A new version of the same record (a frozen wall clock's renew)
        // is a change.
        k.seen(record("other", 0, 1), v(6), t0 + S(12));
        assert_eq!(k.valid_until(), t0 + S(27));
        assert_eq!(k.until_free(t0 + S(12)), S(15) + Duration::from_millis(1));
        assert_eq!(k.holder(), Some("other"));
        assert!(k.held_by_other() && !k.leads());
    }

    #[test]
    fn a_record_is_ours_only_if_this_process_wrote_it() {
        let (mut k, t0) = knowing();
        let mine = record("me", 0, 0);
        assert!(!k.is_ours(&mine), "nothing written yet");
        wrote(&mut k, &mine, t0);
        assert!(k.is_ours(&mine) && k.leads() && !k.held_by_other());
        // The same identity, other times: another process (or an old run).
        assert!(!k.is_ours(&record("me", 1, 0)));
        // Sent without an answer: ours too, until someone else's record is
        // read (what we sent was decided before it).
        let unanswered = record("me", 2, 0);
        k.sending(&unanswered, false);
        assert!(k.is_ours(&unanswered) && k.is_ours(&mine));
        k.seen(record("other", 3, 1), v(2), t0);
        assert!(!k.is_ours(&unanswered), "forgotten");
        assert!(k.is_ours(&mine), "the confirmed one stays ours");
    }

    #[test]
    fn a_lease_gone_is_held_a_lease_duration_by_whoever_held_it_last() {
        let (mut k, t0) = knowing();
        // Its last holder held it for 30 s, more than our 15.
        let mut held = record("other", 0, 1);
        held.lease_duration_seconds = 30;
        k.seen(held, v(5), t0);
        k.gone(t0 + S(1), S(15));
        assert!(k.waiting_out(t0 + S(1), false) && k.gone_and_held(t0 + S(30)));
        assert!(
            !k.waiting_out(t0 + S(1), true),
            "a term does not wait it out"
        );
        assert!(!k.gone_and_held(t0 + S(31)));
        assert_eq!(k.until_free(t0 + S(1)), S(30) + Duration::from_millis(1));
        // Seen gone again: nothing moves.
        k.gone(t0 + S(20), S(15));
        assert!(!k.gone_and_held(t0 + S(31)));
        assert_eq!(k.why_not_ours(), "the lease was deleted");
        // Waited out, the candidate creates it: the record seen before is
        // forgotten (nobody holds a Lease that is gone), not its
        // transitions.
        k.forget_record();
        assert_eq!((k.holder(), k.record(), k.version()), (None, None, None));
        assert!(!k.held_by_other());
        assert_eq!(k.next_write(15, wall(40), None, None).leader_transitions, 2);
        // A record read again ends it.
        k.seen(record("other", 40, 1), v(9), t0 + S(2));
        assert!(!k.gone_and_held(t0 + S(2)));

        // Nobody held it: free at once.
        let (mut k, t0) = knowing();
        k.seen(record("", 0, 1), v(5), t0);
        k.gone(t0 + S(1), S(15));
        assert!(!k.waiting_out(t0 + S(1), false));
        // Nothing read, but our write was refused by one we have not read:
        // that writer holds it for our lease duration.
        let (mut k, t0) = knowing();
        k.refused_by_another();
        k.gone(t0, S(15));
        assert!(k.gone_and_held(t0 + S(15) - Duration::from_nanos(1)));
        assert!(!k.gone_and_held(t0 + S(15)));
    }

    #[test]
    fn an_update_that_created_the_lease_anew_is_a_deletion_seen() {
        let (mut k, t0) = knowing();
        let mine = record("me", 0, 0);
        k.sending(&mine, true);
        assert!(!k.answered(mine.clone(), v(3), true, t0, S(20)));
        assert!(k.leads(), "the record is ours");
        assert!(k.waiting_out(t0 + S(20) - Duration::from_nanos(1), false));
        assert!(
            !k.waiting_out(t0 + S(20), false),
            "our 20 s, more than its 15"
        );
    }

    #[test]
    fn why_the_lease_is_not_ours_is_told_from_what_was_read() {
        let (mut k, t0) = knowing();
        assert_eq!(
            k.why_not_ours(),
            "the lease was created anew by another candidate"
        );
        k.seen(record("", 0, 1), v(1), t0);
        assert_eq!(k.why_not_ours(), "the lease was freed by another writer");
        k.seen(record("b\nc", 0, 1), v(2), t0);
        assert_eq!(k.why_not_ours(), "the lease is now held by b\\nc");
        k.seen_recreated();
        assert_eq!(k.why_not_ours(), "the lease was deleted and created again");
        k.term_began();
        assert!(!k.recreated());
    }

    #[test]
    fn a_renew_keeps_the_terms_acquire_time_and_transitions() {
        let (mut k, t0) = knowing();
        let first = record("me", 0, 4);
        wrote(&mut k, &first, t0);
        k.term_began();
        // The stored record says 5 (another writer raised it, keeping our
        // times): the term's 4 is kept.
        let raised = LeaderElectionRecord {
            leader_transitions: 5,
            ..first.clone()
        };
        let renew = k.next_write(15, k.write_time(wall(2)), Some(&raised), Some(4));
        assert_eq!(renew.acquire_time, first.acquire_time);
        assert_eq!(renew.renew_time, Some(wall(2)));
        assert_eq!(renew.leader_transitions, 4);
        assert_eq!(renew.holder_identity, "me");
    }

    #[test]
    fn a_new_term_writes_one_more_than_the_highest_transitions_seen() {
        let (mut k, t0) = knowing();
        k.seen(record("other", 0, 7), v(1), t0);
        // Lowered by another writer since: the highest seen counts.
        k.seen(record("other", 1, 2), v(2), t0);
        let take = k.next_write(15, wall(20), k.record(), None);
        assert_eq!(take.leader_transitions, 8);
        assert_eq!(take.acquire_time, Some(wall(20)));
        // A create: one more than any seen; nothing seen, 0.
        assert_eq!(k.next_write(15, wall(20), None, None).leader_transitions, 8);
        let (k, _) = knowing();
        assert_eq!(k.next_write(15, wall(20), None, None).leader_transitions, 0);
    }

    #[test]
    fn a_record_written_in_this_acquire_is_kept_as_it_is() {
        let (mut k, t0) = knowing();
        let sent = record("me", 0, 3);
        k.sending(&sent, true);
        // Its answer lost; read back, it is ours to keep: not a new term.
        k.seen(sent.clone(), v(4), t0);
        let again = k.next_write(15, wall(1), Some(&sent), None);
        assert_eq!(again.acquire_time, sent.acquire_time);
        assert_eq!(again.leader_transitions, 3);
        // A term's start ends the acquire phase.
        k.term_began();
        let next = k.next_write(15, wall(1), Some(&sent), None);
        assert_eq!(next.leader_transitions, 4);
    }

    #[test]
    fn every_write_is_after_the_last_renew_time_sent_and_never_the_stored_one() {
        let (mut k, t0) = knowing();
        let first = record("me", 5, 0);
        wrote(&mut k, &first, t0);
        // The wall clock stands still, then steps back: a microsecond on,
        // one time for the attempt however many writes it makes.
        for w in [wall(5), wall(1)] {
            assert_eq!(k.write_time(w), wall(5).next());
        }
        assert_eq!(k.write_time(wall(6)), wall(6), "the wall clock again");
        // A record this process did not write (an old run's, under our
        // identity) at our wall clock's instant: not written over with
        // the same time.
        let (mut k, t0) = knowing();
        k.seen(record("me", 9, 0), v(1), t0);
        let r = k.next_write(15, k.write_time(wall(9)), k.record(), None);
        assert_eq!(r.renew_time, Some(wall(9).next()));
        assert_eq!(r.acquire_time, Some(wall(9).next()), "moved with it");
        // At the last writable instant no later one exists: a step back,
        // the acquire time with it, so that it never follows the renew.
        let last = MicroTime::from_system_time(UNIX_EPOCH + S(1 << 38));
        let (mut k, t0) = knowing();
        let at_last = LeaderElectionRecord {
            acquire_time: Some(last),
            renew_time: Some(last),
            ..record("me", 0, 0)
        };
        wrote(&mut k, &at_last, t0);
        assert_eq!(k.write_time(last), last, "no later instant is writable");
        let r = k.next_write(15, k.write_time(last), k.record(), None);
        assert_eq!(r.renew_time, Some(last.prev()));
        assert_eq!(r.acquire_time, Some(last.prev()));
        let renew = k.next_write(15, k.write_time(last), k.record(), Some(0));
        assert_eq!(renew.renew_time, Some(last.prev()));
        assert_eq!(renew.acquire_time, Some(last.prev()));
    }

    #[test]
    fn a_release_frees_the_record_keeping_its_transitions() {
        let (mut k, t0) = knowing();
        k.seen(record("me", 0, 6), v(1), t0);
        let r = k.release_record(wall(3));
        assert_eq!(r.holder_identity, "");
        assert_eq!(r.lease_duration_seconds, 1);
        assert_eq!(
            (r.acquire_time, r.renew_time),
            (Some(wall(3)), Some(wall(3)))
        );
        assert_eq!(r.leader_transitions, 6);
    }

    #[test]
    fn a_change_of_holder_is_announced_once() {
        let (mut k, t0) = knowing();
        assert_eq!(k.holder_to_announce(), None, "nobody, as told");
        k.seen(record("a", 0, 1), v(1), t0);
        assert_eq!(k.holder_to_announce(), Some(Some("a".into())));
        assert_eq!(k.holder_to_announce(), None);
        k.seen(record("a", 1, 1), v(2), t0);
        assert_eq!(k.holder_to_announce(), None, "renewed, not changed");
        k.seen(record("", 2, 1), v(3), t0);
        assert_eq!(k.holder_to_announce(), Some(None));
    }

    #[test]
    fn a_record_under_our_identity_not_ours_seen_renewed_is_a_duplicate() {
        let (mut k, t0) = knowing();
        assert_eq!(k.seen(record("me", 0, 1), v(1), t0), SameIdentity::Seen);
        assert!(!k.duplicate_identity());
        let renewed = k.seen(record("me", 2, 1), v(2), t0);
        assert_eq!(renewed, SameIdentity::Renewed { first: true });
        let again = k.seen(record("me", 4, 1), v(3), t0);
        assert_eq!(again, SameIdentity::Renewed { first: false });
        assert!(k.duplicate_identity());
        k.term_began();
        assert!(!k.duplicate_identity());
        assert_eq!(k.seen(record("x", 6, 1), v(4), t0), SameIdentity::No);
    }

    #[test]
    fn an_unordered_version_is_warned_about_once() {
        let (mut k, _) = knowing();
        assert!(k.warn_unordered());
        assert!(!k.warn_unordered());
    }
}
