//! The checker: what must hold, judged on what the simulated world saw
//! (when a request was sent, when the store took a write, when an answer
//! was taken, when a piece of work started and stopped), never on what
//! the elector says of itself. What the elector reports (`Probe`, its
//! events) is checked *against* the world.
//!
//! Safety, about the users' work:
//! - **One piece of work at a time.** A piece of work is a `run()` work
//!   thread, the hold of a `spawn()` program's loop on its `Term`, or a
//!   COMMAND under `lease-elect`, from its start to its end. Two pieces of
//!   one process never run at once. Two pieces of different processes run
//!   at once only where the earlier one's term was taken away (another
//!   writer freed the Lease or wrote another holder, or a candidate that
//!   never read the term created the Lease anew after a deletion) and the
//!   later one's token is greater, and then only until the earlier one's
//!   holder learns of it (the first answer it takes that shows the Lease
//!   not its own: its next renew or watch event) plus the time the work
//!   takes to stop (SIGKILL for COMMAND: at once; a step for `run()`'s
//!   work); learned or not, no later than a retry period and a round trip
//!   (plus that time to stop) after the takeover or after the last thing
//!   since that kept its process from hearing (a request failing, slow or
//!   cut off, an answer lost: until that request's deadline), and not at
//!   all while the process is paused or its elector stalled: a process
//!   keeps reading the Lease while its work runs, also after its term ran
//!   out (issue 44).
//!   Or where the candidates' clocks run further apart than the work's
//!   budget tolerates. Work that ignores its term is judged only
//!   within its process (a release and a new term wait for it).
//! - **The work's budget.** A piece of work that honours its term ends by
//!   the lease duration less the margin after the last renew the world
//!   saw its process take (`Term::time_to_stop`), unless its whole
//!   process was frozen (then only a fenced store keeps it out).
//! - **One leader.** Never two processes holding a current term at once
//!   (unless the earlier term was taken away, as above).
//! - **Tokens.** Terms' tokens grow strictly in the order the store took
//!   the writes that began them, across deletions and whatever anyone
//!   writes into `leaseTransitions`. (With a lock that reports no
//!   versions, tokens are `leaseTransitions`: they may fall back after a
//!   deletion, a writer lowering them, or at `i32::MAX`.)
//! - **Term ends, on the world's clock.** A term's deadline is the renew
//!   deadline after the send, on its process's clock, of the last write of
//!   the term that the store took and whose answer the process took before
//!   that deadline. A term is never current past it; its `StoppedLeading`
//!   comes by then (at the resume of a paused process); a term never turns
//!   current again. The probe never reports a renew later than the world
//!   saw one.
//! - **Learning.** A leader that takes an answer showing the Lease not its
//!   own (another's record, or none) has ended its term by the end of that
//!   step.
//! - **Release.** A release is written only once every piece of work of
//!   its process has ended, only over a record that process wrote, at
//!   most once per process; and a stop with a release asked for, whose
//!   work let go within its grace, whose record was still the Lease's and
//!   whose link was healthy, does release.
//! - **What COMMAND is owed** (`owed.rs`). Never signalled while its term
//!   is current and nothing stops its process; on an orderly end, SIGTERM
//!   first and SIGKILL no earlier than `--grace` after it or the lease
//!   bound (a margin and a half before the lease could expire: half a
//!   margin for the supervisor to report it, so that COMMAND has ended
//!   within the work's budget even when `lease-elect` must kill
//!   everything below it), unless the term was taken or the operator
//!   signalled again (a second SIGTERM kills at once); its end noticed at
//!   once (the release follows it, not the grace's end); everything below
//!   `lease-elect` killed only after the supervisor had half the margin
//!   to report a SIGKILL; a supervisor killed ends the session as such. Some
//!   schedules turn the supervisor's own switch off, so the budget rule
//!   judges the session's deadlines alone, kill or stop the supervisor
//!   (stopped, it passes nothing on, and `lease-elect` must kill
//!   everything below it half the margin after its SIGKILL, not later),
//!   or send `lease-elect` a second SIGTERM.
//!
//! Liveness and stability:
//! - **A healthy leader keeps its term.** A term is lost to a takeover
//!   only if someone else wrote the Lease during it, and at its deadline
//!   only if something hampered its process during its last round (a
//!   request failed, was slow, lost its answer or was cut off, a foreign
//!   write, a pause or a stalled elector thread).
//! - **Handover.** After a release, when some candidate was acquiring
//!   unhampered throughout, someone leads within 2.2 retry periods (plus
//!   a round trip or two) of it.
//! - **Pacing.** After a failed request while acquiring, the next request
//!   of that process comes at least a retry period (and the server's
//!   `Retry-After`) later; a running elector never goes longer than 2.2
//!   retry periods (or the `Retry-After`) without an attempt.
//! - **Settling.** Once the faults are over and the world has settled, a
//!   leader.
//! - **No hangs.** A schedule has at most [`MAX_STEPS`] steps, and at
//!   most [`MAX_STEPS_AT_ONCE`] at one instant of virtual time; a process
//!   that calls its lock thousands of times in one poll without waiting
//!   is stopped. Each is a violation with the seed, never a stuck test.
//! - **Bounds.** A stop ends the elector within the release's budget
//!   (after the work let go); nothing panics.

use std::time::{Duration, Instant};

use crate::elector::Term;

/// Steps per schedule at most (a busy schedule takes some 10,000).
pub(super) const MAX_STEPS: u64 = 2_000_000;
/// Steps at one instant of virtual time at most.
pub(super) const MAX_STEPS_AT_ONCE: u64 = 100_000;

/// A term, once started, as the world saw it.
#[derive(Debug)]
pub(super) struct TermRec {
    pub(super) p: usize,
    pub(super) token: u64,
    /// The store revision of the write that began it, and the Lease's
    /// creation (uid) it was on: terms in the order the store saw them.
    pub(super) version: u64,
    pub(super) uid: u64,
    /// The `leaseTransitions` the term began with.
    pub(super) transitions: i32,
    /// The world's copy (not a hold).
    pub(super) term: Term,
    /// On the process's clock: the send of the last write of the term the
    /// process took the answer of, and the deadline that gives.
    pub(super) last_renew_sent: Instant,
    pub(super) deadline: Instant,
    /// When it stopped leading (true time).
    pub(super) ended: Option<Duration>,
    /// The place, among what its process took, of the write that began it.
    pub(super) seq: u64,
}

impl TermRec {
    /// A write of the process, `w`: a renew of this term if it is its own
    /// record, taken before the deadline (a renew confirmed late does not
    /// revive a term).
    pub(super) fn renewed(&mut self, w: &super::net::WriteTaken, identity: &str, rd: Duration) {
        if self.ended.is_none()
            && w.seq > self.seq
            && w.record.holder_identity == identity
            && w.taken < self.deadline
        {
            self.deadline = self.deadline.max(w.sent + rd);
            self.last_renew_sent = self.last_renew_sent.max(w.sent);
        }
    }
}

/// A piece of work, as the world saw it.
#[derive(Debug)]
pub(super) struct Piece {
    pub(super) p: usize,
    /// Its term (an index into the checker's terms).
    pub(super) term: usize,
    pub(super) start: Duration,
    pub(super) end: Option<Duration>,
    /// It stops when its term ends (not work that ignores it).
    pub(super) honours: bool,
    /// How long it may take to stop once its process learned the term
    /// ended.
    pub(super) latency: Duration,
    /// Its whole process was frozen while it ran: only a fenced store
    /// keeps it out after.
    pub(super) frozen: bool,
    /// A COMMAND (not frozen with `lease-elect`).
    pub(super) command: bool,
    pub(super) what: String,
}

#[derive(Debug, Default)]
pub(super) struct Checker {
    pub(super) violations: Vec<String>,
    pub(super) terms: Vec<TermRec>,
    pub(super) pieces: Vec<Piece>,
    /// Pairs already reported (once per overlap).
    reported: Vec<(usize, usize)>,
}

/// At most this many violations are kept per schedule.
const KEEP: usize = 20;

impl Checker {
    pub(super) fn violation(&mut self, now: Duration, what: String) {
        if self.violations.len() < KEEP {
            self.violations
                .push(format!("at {:.6}s: {what}", now.as_secs_f64()));
        }
    }

    /// Report the pair `(a, b)` once.
    pub(super) fn once(
        &mut self,
        now: Duration,
        pair: (usize, usize),
        what: impl FnOnce() -> String,
    ) {
        if !self.reported.contains(&pair) {
            self.reported.push(pair);
            self.violation(now, what());
        }
    }

    /// Holders at `now` (process, description), taken-away terms left out.
    pub(super) fn one_leader(&mut self, now: Duration, holders: &[(usize, String)]) {
        if let [a, b, ..] = holders {
            let (a, b) = (a.clone(), b.clone());
            self.once(now, (usize::MAX - a.0, usize::MAX - b.0), || {
                format!("two leaders at once: {} and {}", a.1, b.1)
            });
        }
    }

    /// A term started: its token against every other term's, in the order
    /// the store took the writes that began them. `ordered`: tokens are
    /// revisions (else `leaseTransitions`, excused after `excused_after` and at `i32::MAX`).
    pub(super) fn tokens(
        &mut self,
        now: Duration,
        t: usize,
        ordered: bool,
        excused_after: Option<u64>,
    ) {
        let (p, token, version) = (self.terms[t].p, self.terms[t].token, self.terms[t].version);
        let mut found = Vec::new();
        for (i, o) in self.terms.iter().enumerate() {
            if i == t || o.version == version {
                continue;
            }
            let (earlier, later) = if o.version < version {
                (o, &self.terms[t])
            } else {
                (&self.terms[t], o)
            };
            // Without versions, tokens are `leaseTransitions`: lowered by a
            // writer or restarted by a deletion since, or stuck at the
            // field's edge, they may repeat (the documented fallback).
            let excused = !ordered
                && (excused_after.is_some_and(|rev| rev > earlier.version)
                    || earlier.token >= i32::MAX as u64);
            if later.token <= earlier.token && !excused {
                found.push(format!(
                    "p{} began a term with token {} after p{}'s with token {} (store revisions {} then {})",
                    later.p, later.token, earlier.p, earlier.token, earlier.version, later.version
                ));
            }
        }
        if ordered && version != token {
            found.push(format!(
                "p{p}'s term has token {token}, not the revision {version} of the write that began it"
            ));
        }
        for f in found {
            self.violation(now, f);
        }
    }

    /// The pieces running at `now`.
    pub(super) fn running(&self) -> impl Iterator<Item = (usize, &Piece)> {
        self.pieces
            .iter()
            .enumerate()
            .filter(|(_, piece)| piece.end.is_none())
    }
}
