//! The rules of `check.rs`, applied to the world: after every step, and
//! where the world sees something happen (a term start or end, a write
//! stored, a poll, a process's end). Every rule is judged on what the
//! world saw; the elector's own reports are checked against it.

use std::time::Duration;

use super::check::TermRec;
use super::net::{show_store, Revocation};
use super::plan::{LockKind, Mode};
use super::world::{Layer, World};
use crate::clock::Clock;
use crate::elector::{stop_margin, Term, JITTER_FACTOR};

/// Virtual time is exact but for rounding to nanoseconds.
const EXACT: Duration = Duration::from_micros(1);
/// What a step of the world may take beyond an instant it is due.
pub(super) const SLACK: Duration = Duration::from_millis(1);

impl World {
    pub(super) fn rate(&self, p: usize) -> f64 {
        1.0 + self.plan.candidates[self.procs[p].slot].rate_ppm as f64 / 1e6
    }

    /// How long piece `i` may take to stop once its process learned its
    /// term ended (true time): its own latency, and for a COMMAND whose
    /// supervisor is stopped, the half margin before `lease-elect` kills
    /// everything below it.
    fn stop_latency(&self, i: usize) -> Duration {
        let piece = &self.check.pieces[i];
        let own = piece.latency.div_f64(self.rate(piece.p));
        if piece.command && self.command_supervisor_stopped(piece.p) {
            own + self.answer_within(piece.p)
        } else {
            own
        }
    }

    /// A term started: the world's record of it, from the write that began
    /// it (the last write of the process whose answer it took), and its
    /// token against every other term's.
    pub(super) fn term_started(&mut self, p: usize, term: &Term) {
        let now = self.now();
        let rd = self.plan.timing.renew;
        let identity = self.procs[p].identity.clone();
        // The write that began it: the first of its own the process took
        // since the attempt began (its program may read the event late,
        // after renews).
        let (first, later) = {
            let mut net = self.net.borrow_mut();
            let seen = &mut net.procs[p].seen;
            let began = term.started_at();
            let i = seen
                .writes
                .iter()
                .position(|w| w.sent >= began && w.record.holder_identity == identity);
            let first = i.map(|i| seen.writes[i].clone());
            let later = i.map_or(Vec::new(), |i| seen.writes[i + 1..].to_vec());
            seen.writes_judged = seen.writes.len();
            (first, later)
        };
        let Some(w) = first else {
            self.check.violation(
                now,
                format!("p{p} started a term without a write of its own the store took"),
            );
            return;
        };
        // One piece of work at a time: a new term is not sought while the
        // work of an earlier one still runs (it holds its `Term`).
        if self.has_running_piece(p) {
            self.check.violation(
                now,
                format!(
                    "p{p} began a term (token {}) while the work of an earlier term still ran",
                    term.token()
                ),
            );
        }
        let mut rec = TermRec {
            p,
            token: term.token(),
            version: w.revision,
            uid: w.uid,
            transitions: w.record.leader_transitions,
            term: term.share(),
            last_renew_sent: w.sent,
            deadline: w.sent + rd,
            ended: None,
            seq: w.seq,
        };
        for w in later {
            rec.renewed(&w, &identity, rd);
        }
        self.check.terms.push(rec);
        let t = self.check.terms.len() - 1;
        let pr = &mut self.procs[p];
        pr.term = Some(t);
        pr.in_term = true;
        pr.was_current = true;
        self.net.borrow_mut().procs[p].leading = true;
        let ordered = self.plan.lock != LockKind::Unversioned;
        let excused = self.net.borrow().lowered;
        self.check.tokens(now, t, ordered, excused);
    }

    /// After each poll of process `p`: the writes it took extend its term
    /// on the world's clock; an answer showing the Lease not its own has
    /// ended its term.
    pub(super) fn polled(&mut self, p: usize) {
        let now = self.now();
        let rd = self.plan.timing.renew;
        let identity = self.procs[p].identity.clone();
        let (writes, foreign) = {
            let mut net = self.net.borrow_mut();
            let seen = &mut net.procs[p].seen;
            let writes = seen.writes[seen.writes_judged..].to_vec();
            seen.writes_judged = seen.writes.len();
            let foreign = seen.foreign[seen.foreign_judged..].to_vec();
            seen.foreign_judged = seen.foreign.len();
            (writes, foreign)
        };
        let Some(t) = self.procs[p].term else {
            return;
        };
        let rec = &mut self.check.terms[t];
        for w in writes {
            rec.renewed(&w, &identity, rd);
        }
        let learned = foreign.iter().any(|&(_, seq)| seq > rec.seq);
        if learned && rec.term.is_current() {
            let token = rec.token;
            self.check.violation(
                now,
                format!("p{p} took an answer showing the Lease not its own, and its term (token {token}) is still current"),
            );
        }
    }

    /// Look at process `p`'s elector: a term it started or ended since
    /// it was last looked at.
    pub(super) fn elector_view(&mut self, p: usize) {
        let (now_term, last) = match self.procs[p].driven.as_ref() {
            Some(d) => (d.probe.term_in_progress(), d.probe.last_term_started()),
            None => (None, None),
        };
        let seen = self.procs[p].term.map(|t| &self.check.terms[t].term);
        let same = match (seen, &now_term) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        };
        // A term that began and ended since the last look (within one
        // poll: the answer that began it came with a watch event that
        // ended it): recorded, and ended, now.
        let missed = last.filter(|l| seen != Some(l) && now_term.as_ref() != Some(l));
        if self.procs[p].in_term && (!same || missed.is_some()) {
            self.elector_term_ended(p);
        }
        if let Some(term) = missed {
            self.term_started(p, &term);
            if self.procs[p].in_term {
                self.elector_term_ended(p);
            }
        }
        if let Some(term) = now_term.filter(|_| !same) {
            self.term_started(p, &term);
        }
    }

    /// Process `p`'s elector ended its term: by its renew deadline on the
    /// world's clock (at the resume of a paused or stalled process), and,
    /// unless stopped, only for a reason the world saw.
    pub(super) fn elector_term_ended(&mut self, p: usize) {
        let now = self.now();
        self.procs[p].in_term = false;
        // A receiver that ended a stalled elector's term: the elector
        // thread is still in its renew loop until it runs again.
        if !self.procs[p].stalled {
            self.net.borrow_mut().procs[p].leading = false;
        }
        let Some(t) = self.procs[p].term else {
            return;
        };
        self.check.terms[t].ended = Some(now);
        self.last_term_end = now;
        let pr = &self.procs[p];
        let stopped = pr.stop_called.is_some() || pr.killed;
        if stopped || pr.resumed_at == Some(now) || pr.stalled {
            return;
        }
        let at = pr.clock.now();
        let deadline = self.check.terms[t].deadline;
        if at > deadline + EXACT {
            let late = at - deadline;
            self.check.violation(
                now,
                format!(
                    "p{p}'s term ended {:.6}s after its renew deadline (on the world's clock)",
                    late.as_secs_f64()
                ),
            );
        }
        // A healthy leader keeps its term.
        let rec = &self.check.terms[t];
        let (version, taken) = (rec.version, rec.term.taken_over());
        let from = self.procs[p].clock.true_time_of(rec.last_renew_sent);
        let net = self.net.borrow();
        let others = net.others_wrote_since(p, version);
        let hampered = net.procs[p]
            .seen
            .impaired
            .iter()
            .any(|&(a, b)| b >= from.saturating_sub(self.plan.timing.retry) && a <= now);
        drop(net);
        if taken && !others {
            self.check.violation(
                now,
                format!(
                    "p{p}'s term ended as taken over, but nobody else wrote the Lease during it"
                ),
            );
        }
        if !taken && !others && !hampered {
            self.check.violation(
                now,
                format!("p{p}'s term ran out although nothing hampered it (no failed, slow or lost request, no pause, no other writer)"),
            );
        }
    }

    /// The checker's record of process `p`'s term `term`.
    pub(super) fn term_index(&self, p: usize, term: &Term) -> Option<usize> {
        self.check
            .terms
            .iter()
            .rposition(|t| t.p == p && t.term == *term)
    }

    /// A write of process `p` the store took (it had revision `before`):
    /// releases only after the work, over a record of its own, once; and
    /// a leader's writes keep its term as it began.
    pub(super) fn check_write(&mut self, p: usize, before: u64, sent: Duration) {
        let now = self.now();
        let net = self.net.borrow();
        let Some(stored) = net.store.as_ref().filter(|_| net.revision != before) else {
            return;
        };
        if stored.writer != Some(p) {
            return;
        }
        let pr = &self.procs[p];
        let mut found = Vec::new();
        if stored.record.holder_identity.is_empty() {
            // (A release that created a deleted Lease anew, free, frees
            // nobody's.)
            let own = net.history.last().is_some_and(|w| {
                w.before
                    .as_ref()
                    .is_none_or(|r| net.written_by(p, &pr.identity, r))
            });
            if !own {
                found.push(format!(
                    "p{p} released a record it had not written ({})",
                    show_store(&net.store)
                ));
            }
            let releases = net
                .history
                .iter()
                .filter(|w| w.writer == Some(p) && w.holder.as_deref() == Some(""))
                .count();
            if releases > 1 {
                found.push(format!("p{p} released the lease {releases} times"));
            }
            drop(net);
            if self.has_running_piece(p) {
                found.push(format!("p{p} released the lease while its work still ran"));
            }
            if found.is_empty() {
                self.handovers.push((now, p));
            }
            for f in found {
                self.check.violation(now, f);
            }
            return;
        }
        let Some(rec) = pr
            .term
            .map(|t| &self.check.terms[t])
            .filter(|r| r.ended.is_none())
        else {
            return;
        };
        // A write sent before the term began is a leftover of an earlier
        // attempt, not a write of this term.
        if sent < pr.clock.true_time_of(rec.term.started_at()) {
            return;
        }
        // A term another writer took away (freed, or gave to someone
        // else) is over for good: the Lease taken back is a new term. (An
        // update that created a deleted Lease anew is not taking it back:
        // Leases allow create-on-update, and its writer steps down.)
        let created = net.history.last().is_some_and(|w| w.before.is_none());
        if stored.record.holder_identity == pr.identity && !created {
            let taken = net.revocations.iter().find(|r| {
                matches!(&r.by, super::net::RevokedBy::Writer(h) if *h != pr.identity)
                    && r.revision > rec.version
                    && r.revision < stored.version
            });
            if let Some(revision) = taken.map(|r| r.revision) {
                found.push(format!(
                    "p{p} wrote the Lease as its own under its term with token {}, which another writer took from it at revision {revision}",
                    rec.token
                ));
            }
            let written = stored.record.leader_transitions;
            if written != rec.transitions {
                found.push(format!(
                    "p{p} wrote leaseTransitions {written} during its term, which began with {}",
                    rec.transitions
                ));
            }
        }
        drop(net);
        for f in found {
            self.check.violation(now, f);
        }
    }

    /// After every step.
    pub(super) fn check_now(&mut self) {
        self.check_terms();
        self.check_leaders();
        self.check_pieces();
        self.check_pacing();
        self.check_handovers();
    }

    /// Terms against the world's clock; the probe against the world.
    fn check_terms(&mut self) {
        let now = self.now();
        let mut found = Vec::new();
        for p in 0..self.procs.len() {
            match self.procs[p].layer {
                Layer::Spawn { .. } => self.tell_spawn_work(p),
                Layer::Run { .. } => self.wake_waiting_work(p),
                Layer::Command { .. } => {}
            }
            let pr = &mut self.procs[p];
            if pr.killed || pr.paused {
                continue;
            }
            let Some(t) = pr.term else { continue };
            let rec = &self.check.terms[t];
            let current = rec.term.is_current();
            if current && !pr.was_current {
                found.push(format!("p{p}'s term is current again after it ended"));
            }
            pr.was_current = current;
            let at = pr.clock.now();
            if current && at >= rec.deadline + EXACT {
                found.push(format!(
                    "p{p}'s term (token {}) is current past its renew deadline on the world's clock",
                    rec.token
                ));
            }
            let just_ran = pr.resumed_at == Some(now);
            let end = pr.clock.true_time_of(rec.deadline);
            if pr.in_term && !current && !pr.stalled && !just_ran && now > end + SLACK {
                found.push(format!(
                    "p{p}'s term ended at {:.6}s but it has not stepped down",
                    end.as_secs_f64()
                ));
            }
            if pr.in_term {
                let reported = pr.driven.as_ref().and_then(|d| d.probe.last_renew());
                if reported.is_some_and(|r| r > rec.last_renew_sent + EXACT) {
                    found.push(format!(
                        "p{p}'s probe reports a renew later than any the world saw it take"
                    ));
                }
            }
        }
        for f in found {
            self.check.violation(now, f);
        }
    }

    /// Whether `rec`'s term was taken away by a write at or before
    /// revision `by`; its time, if so.
    fn revoked(&self, rec: &TermRec, by: u64) -> Option<Duration> {
        let net = self.net.borrow();
        let r: Option<&Revocation> = net
            .revocations
            .iter()
            .find(|r| r.revision <= by && r.revokes(rec.p, rec.uid, rec.version));
        let revision = r?.revision;
        net.history
            .iter()
            .find(|w| w.revision == revision)
            .map(|w| w.at)
    }

    /// One leader: never two processes holding a current term at once,
    /// unless the earlier term was taken away.
    fn check_leaders(&mut self) {
        let now = self.now();
        let mut holders = Vec::new();
        let mut any_holder = false;
        for p in 0..self.procs.len() {
            let pr = &self.procs[p];
            if pr.killed || pr.paused {
                continue;
            }
            let Some(t) = pr.term else { continue };
            let rec = &self.check.terms[t];
            let current = rec.term.is_current();
            // A stalled elector cannot tell its work: the work holds while
            // its term is current (it reads `Term::is_current`).
            let held = (pr.in_term && !pr.stalled) || current;
            any_holder |= held;
            if held && self.revoked(rec, u64::MAX).is_none() {
                holders.push((p, format!("p{p} {:?} (token {})", pr.identity, rec.token)));
            }
        }
        if now >= self.plan.faults_end {
            self.settled_leader = any_holder;
        }
        if holders.len() > 1 {
            let net = self.net.borrow();
            let store = show_store(&net.store);
            let revocations = format!("{:?}", net.revocations);
            drop(net);
            self.log(|| {
                format!(
                    "VIOLATION: two leaders; the store holds {store}; revocations {revocations}"
                )
            });
        }
        self.check.one_leader(now, &holders);
    }

    /// Pieces of work: within their budget, and at once only as the rules
    /// allow.
    fn check_pieces(&mut self) {
        let now = self.now();
        let timing = self.plan.timing;
        let margin = stop_margin(timing.lease, timing.renew);
        let running: Vec<usize> = self.check.running().map(|(i, _)| i).collect();
        // The budget.
        for &i in &running {
            let piece = &self.check.pieces[i];
            if !piece.honours || piece.frozen {
                continue;
            }
            let rec = &self.check.terms[piece.term];
            let pr = &self.procs[piece.p];
            let until = pr
                .clock
                .true_time_of(rec.last_renew_sent + (timing.lease - margin));
            // A COMMAND whose supervisor is stopped too: lease-elect kills
            // everything below it by then.
            if now > until + SLACK {
                let (p, token) = (piece.p, rec.token);
                let what = piece.what.clone();
                self.check.once(now, (i, i), || {
                    format!(
                        "p{p}'s work ({what}) of its term with token {token} ran past its budget, {:.6}s after the lease duration less the margin from its last renew",
                        (now - until).as_secs_f64()
                    )
                });
            }
        }
        // Two at once.
        for (x, &i) in running.iter().enumerate() {
            for &j in &running[x + 1..] {
                let (a, b) = (&self.check.pieces[i], &self.check.pieces[j]);
                if a.p == b.p || !a.honours || !b.honours || a.frozen || b.frozen {
                    continue;
                }
                let (ta, tb) = (&self.check.terms[a.term], &self.check.terms[b.term]);
                let (ea, eb, ra, rb) = if ta.version <= tb.version {
                    (i, j, ta, tb)
                } else {
                    (j, i, tb, ta)
                };
                let earlier = &self.check.pieces[ea];
                // Tokens of a lock without versions are not ordered.
                let fenced = rb.token > ra.token || self.plan.lock == LockKind::Unversioned;
                if let Some(revoked_at) = self.revoked(ra, rb.version).filter(|_| fenced) {
                    // Until its holder learns of it, and stops.
                    let net = self.net.borrow();
                    let learned = net.procs[earlier.p]
                        .seen
                        .foreign
                        .iter()
                        .find(|&&(at, seq)| seq > ra.seq && at >= revoked_at)
                        .map(|&(at, _)| at);
                    // Whether it learned or not, it could have: a process
                    // that runs, and whose requests are answered, reads
                    // the Lease at least once a retry period while its
                    // work runs (also after its term ran out), and a
                    // takeover ends the work at once. Hampered since the
                    // takeover (its requests failing, slow, cut off or
                    // their answers lost: a lost answer blocks it until
                    // the request's deadline), it could hear only from
                    // the end of the last hindrance on, and the next read
                    // waits a retry period; paused, or its elector
                    // stalled, since the takeover, it is excused.
                    let hampered_until = net.procs[earlier.p]
                        .seen
                        .impaired
                        .iter()
                        .filter(|&&(a, b)| b >= revoked_at && a <= now)
                        .map(|&(_, b)| b)
                        .max();
                    let deaf = hampered_until.is_some_and(|b| b >= now);
                    let heard_by = revoked_at
                        .max(earlier.start)
                        .max(hampered_until.unwrap_or_default())
                        + timing
                            .retry
                            .mul_f64(1.0 + JITTER_FACTOR)
                            .div_f64(self.rate(earlier.p))
                        + self.stop_latency(ea)
                        + net.slow_round_trip();
                    drop(net);
                    let pr = &self.procs[earlier.p];
                    let frozen = pr.paused
                        || pr.stalled
                        || pr.resumed_at.is_some_and(|at| at >= revoked_at)
                        || pr.stalled_at >= revoked_at
                        || pr.paused_at >= revoked_at;
                    let unheard = learned.is_none_or(|at| at > heard_by);
                    if unheard && !deaf && !frozen && now > heard_by + SLACK {
                        let (p, q) = (earlier.p, self.check.pieces[eb].p);
                        self.check.once(now, (ea, eb), || {
                            format!(
                                "p{p}'s work ran on {:.6}s after another writer took its term (at {:.6}s), beside p{q}'s: p{p} could have heard within a retry period and a round trip",
                                (now - revoked_at).as_secs_f64(),
                                revoked_at.as_secs_f64()
                            )
                        });
                        continue;
                    }
                    // (Or, for work that began after that, from its start.)
                    if let Some(at) = learned.map(|at| at.max(earlier.start)) {
                        // The work's time is its machine's.
                        let latency = self.stop_latency(ea);
                        if now > at + latency + SLACK {
                            let (p, q, latency) = (earlier.p, self.check.pieces[eb].p, latency);
                            self.check.once(now, (ea, eb), || {
                                format!(
                                    "p{p}'s work ran on {:.6}s after p{p} learned its term was taken (it may take {:.6}s to stop), beside p{q}'s",
                                    (now - at).as_secs_f64(),
                                    latency.as_secs_f64()
                                )
                            });
                        }
                    }
                    continue;
                }
                // Clocks further apart than the work's budget tolerates: the
                // earlier term's work may run until the lease duration less
                // the margin on its clock, and the fastest candidate's clock
                // may see the lease expire before that (the Lease may reach
                // the later term through it).
                let (ld, m) = (timing.lease.as_secs_f64(), margin.as_secs_f64());
                let fastest = self
                    .plan
                    .candidates
                    .iter()
                    .map(|c| 1.0 + c.rate_ppm as f64 / 1e6)
                    .fold(1.0, f64::max);
                if (ld - m) / self.rate(earlier.p) >= ld / fastest {
                    continue;
                }
                let (p, q) = (earlier.p, self.check.pieces[eb].p);
                let (tp, tq) = (ra.token, rb.token);
                let (wp, wq) = (earlier.what.clone(), self.check.pieces[eb].what.clone());
                self.check.once(now, (ea, eb), || {
                    format!("two pieces of work at once: p{p}'s ({wp}, token {tp}) and p{q}'s ({wq}, token {tq})")
                });
            }
        }
    }

    /// A running elector never goes longer than 2.2 retry periods (or the
    /// server's `Retry-After`) without an attempt.
    fn check_pacing(&mut self) {
        let now = self.now();
        let rp = self.plan.timing.retry;
        let mut found = Vec::new();
        for p in 0..self.procs.len() {
            let pr = &self.procs[p];
            if pr.driven.is_none()
                || pr.killed
                || pr.paused
                || pr.stalled
                || pr.stop_called.is_some()
            {
                continue;
            }
            if pr
                .resumed_at
                .is_some_and(|at| now.saturating_sub(at) <= SLACK)
            {
                continue;
            }
            // Waiting for the work of a lost term before seeking another.
            let current = pr
                .term
                .is_some_and(|t| self.check.terms[t].term.is_current());
            if !current && self.has_running_piece(p) {
                continue;
            }
            let net = self.net.borrow();
            let pn = &net.procs[p];
            if pn.pending.is_some() {
                continue;
            }
            let Some(done) = pn.seen.last_done else {
                continue;
            };
            let (done_at, retry_after) = (done.at, done.retry_after);
            let asked_until = pn.seen.retry_until;
            let longest = rp
                .mul_f64(1.0 + JITTER_FACTOR)
                .max(retry_after)
                .div_f64(self.rate(p));
            if now > (done_at + longest).max(asked_until) + SLACK {
                found.push(format!(
                    "p{p} went {:.6}s without an attempt (at most {:.6}s)",
                    (now - done_at).as_secs_f64(),
                    longest.as_secs_f64()
                ));
            }
        }
        for f in found {
            let p = self.procs.len();
            self.check.once(now, (p, usize::MAX), || f);
        }
        let late = std::mem::take(&mut self.net.borrow_mut().pacing);
        for f in late {
            self.check.violation(now, f);
        }
    }

    /// After a release, with a candidate acquiring unhampered throughout,
    /// someone leads within 2.2 retry periods and a round trip or two.
    fn check_handovers(&mut self) {
        let now = self.now();
        if self.handovers.is_empty() {
            return;
        }
        let leader = self.procs.iter().any(|pr| {
            !pr.killed
                && pr
                    .term
                    .is_some_and(|t| self.check.terms[t].term.is_current())
        });
        let timing = self.plan.timing;
        let slowest = self
            .plan
            .candidates
            .iter()
            .map(|c| 1.0 + c.rate_ppm as f64 / 1e6)
            .fold(1.0, f64::min);
        let within = timing.retry.mul_f64(1.0 + JITTER_FACTOR).div_f64(slowest) + timing.renew * 2;
        let mut found = Vec::new();
        let mut keep = Vec::new();
        for (at, by) in std::mem::take(&mut self.handovers) {
            // Handed over: someone leads, or a candidate's write took the
            // Lease (its answer may yet be lost on the way back).
            let taken = self.net.borrow().history.iter().any(|w| {
                w.at >= at
                    && w.writer.is_some()
                    && w.holder.as_deref().is_some_and(|h| !h.is_empty())
            });
            if leader || taken {
                continue;
            }
            if now <= at + within {
                keep.push((at, by));
                continue;
            }
            if let Some(q) = self.eligible_taker(at, by) {
                found.push(format!(
                    "nobody led {:.6}s after p{by}'s release, though p{q} was acquiring unhampered",
                    (now - at).as_secs_f64()
                ));
            }
        }
        self.handovers = keep;
        for f in found {
            self.check.violation(now, f);
        }
    }

    /// A candidate that was acquiring, unhampered, since well before `at`
    /// (a release by `by`) until now, with no other writer about.
    fn eligible_taker(&self, at: Duration, by: usize) -> Option<usize> {
        let now = self.now();
        let timing = self.plan.timing;
        let net = self.net.borrow();
        let quiet_from = at.saturating_sub(timing.lease * 2);
        let others = net.history.iter().any(|w| {
            w.at >= quiet_from && w.at <= now && (w.writer.is_none() || w.holder.is_none())
        });
        if others {
            return None;
        }
        let since = at.saturating_sub(timing.retry * 3);
        (0..self.procs.len()).find(|&q| {
            let pr = &self.procs[q];
            let pn = &net.procs[q];
            q != by
                && pr.driven.is_some()
                && !pr.killed
                && !pr.paused
                && !pr.stalled
                && pr.stop_called.is_none()
                && pr.resumed_at.is_none_or(|r| r < since)
                && pn.seen.sends.first().is_some_and(|&s| s < since)
                && !self.has_running_piece(q)
                && !pn
                    .seen
                    .impaired
                    .iter()
                    .any(|&(a, b)| b >= since && a <= now)
        })
    }

    /// A stop ends the elector within the release's budget, after the work
    /// let go.
    pub(super) fn elector_stop_bound(&mut self, p: usize) {
        let now = self.now();
        let pr = &self.procs[p];
        let Some((at, paused_then)) = pr.stop_called else {
            return;
        };
        let ran = now
            .saturating_sub(at)
            .saturating_sub(pr.paused_total - paused_then);
        let work = match &self.plan.candidates[pr.slot].mode {
            Mode::Spawn { lag } => lag.div_f64(self.rate(p)),
            Mode::Run { release_grace, .. } => release_grace.div_f64(self.rate(p)),
            Mode::Command(_) => Duration::ZERO,
        };
        let bound = pr.config.release_timeout.div_f64(self.rate(p)) + work;
        if ran > bound + SLACK {
            self.check.violation(
                now,
                format!(
                    "p{p}'s stop took {:.3}s, beyond its bound of {:.3}s",
                    ran.as_secs_f64(),
                    bound.as_secs_f64()
                ),
            );
        }
    }

    /// Process `p` exited: a stop that asked for a release, whose work let
    /// go within its grace, whose record was still the Lease's and whose
    /// link was healthy, released.
    pub(super) fn process_ended(&mut self, p: usize) {
        let now = self.now();
        let pr = &self.procs[p];
        let Some((stopped, _)) = pr.stop_called else {
            return;
        };
        if !pr.config.release_on_cancel || !pr.led_at_stop || pr.release_skipped {
            return;
        }
        let grace = pr.config.release_grace.div_f64(self.rate(p));
        let late_work = self
            .check
            .pieces
            .iter()
            .any(|piece| piece.p == p && piece.end.is_none_or(|e| e > stopped + grace));
        let net = self.net.borrow();
        let ours = pr
            .store_at_stop
            .is_some_and(|(version, own)| own && !net.others_wrote_since(p, version));
        let hampered = net.procs[p]
            .seen
            .impaired
            .iter()
            .any(|&(a, b)| b >= stopped && a <= now);
        let released = net
            .history
            .iter()
            .any(|w| w.writer == Some(p) && w.holder.as_deref() == Some(""));
        drop(net);
        if !late_work && ours && !hampered && !released {
            self.check.violation(
                now,
                format!("p{p} was stopped with a release asked for, its work had let go and its record was the Lease's, yet it did not release"),
            );
        }
    }

    /// At the end of the schedule: a leader, unless a term ended (work
    /// may end its own) too recently for the next to have begun.
    pub(super) fn check_end(&mut self) {
        let now = self.now();
        let t = self.plan.timing;
        let within = t.lease.mul_f64(1.5) + t.retry * 4 + self.plan.restart_delay;
        let since = now.saturating_sub(self.last_term_end.max(self.plan.faults_end));
        if !self.settled_leader && since > within {
            self.check.violation(
                now,
                format!(
                    "no leader by the end, {:.3}s after the faults ended",
                    (now - self.plan.faults_end).as_secs_f64()
                ),
            );
        }
    }
}
