//! The world of one schedule: candidates as processes (started, paused,
//! crashed, stopped, restarted), the faults of the plan applied and healed
//! at their times, each process's state machine polled when something it
//! waits for is due, its events read as a program would read them, and
//! the checker asked after every step.

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::check::{Checker, Holding, TermSeen};
use super::clock::SimClock;
use super::io::SimIo;
use super::net::{show_store, Answer, Due, Net, Revocation, RevokedBy};
use super::plan::{Fault, Plan, Write};
use crate::clock::Clock;
use crate::elector::driven::{drive, Driven};
use crate::elector::{ElectorConfig, LeaderEvent, StopReason, Term};
use crate::lease::{LeaderElectionRecord, MicroTime};

/// One run of a candidate.
struct Proc {
    slot: usize,
    identity: String,
    clock: Arc<SimClock>,
    /// The state machine, until it ends or the process is killed.
    driven: Option<Driven>,
    paused: bool,
    /// Its elector thread stalls; its work runs on.
    stalled: bool,
    /// Since when, and how long it has been paused in all.
    paused_at: Duration,
    paused_total: Duration,
    resumed_at: Option<Duration>,
    killed: bool,
    /// The term its work holds.
    term: Option<Term>,
    /// The terms its work still holds (each a hold the release waits for).
    work: Vec<Term>,
    holding: Holding,
    /// When the world stopped it, and how long it had been paused then
    /// (a stop's bound counts only the time it could run).
    stop_at: Option<(Duration, Duration)>,
    /// When the work was told its term ended, and the process's config.
    config: ElectorConfig,
}

/// What the world remembers of a fault that lasts.
#[derive(Clone, Copy)]
enum Applied {
    Nothing,
    Paused(usize),
    Stalled(usize),
}

pub(super) struct World {
    plan: Plan,
    net: Rc<RefCell<Net>>,
    base: Instant,
    procs: Vec<Proc>,
    /// Per candidate slot: its current process, and how many it has had.
    slots: Vec<(Option<usize>, u32)>,
    applied: Vec<Applied>,
    check: Checker,
    /// A leader holds at the last step after the faults ended.
    settled_leader: bool,
    pub(super) events: u64,
}

/// What a schedule's run found.
pub(super) struct Found {
    pub(super) violations: Vec<String>,
    pub(super) trace: Vec<String>,
    pub(super) terms: usize,
    pub(super) events: u64,
}

impl World {
    pub(super) fn new(plan: Plan, trace: bool) -> World {
        let slots = plan.candidates.len();
        let mut net = Net::new(plan.seed, plan.net, plan.timing, slots);
        if trace {
            net.trace = Some(Vec::new());
        }
        let applied = vec![Applied::Nothing; plan.faults.len()];
        World {
            net: Rc::new(RefCell::new(net)),
            base: Instant::now(),
            procs: Vec::new(),
            slots: vec![(None, 0); slots],
            applied,
            check: Checker::default(),
            settled_leader: false,
            events: 0,
            plan,
        }
    }

    pub(super) fn run(mut self) -> Found {
        self.describe_plan();
        {
            let mut net = self.net.borrow_mut();
            for (c, cand) in self.plan.candidates.iter().enumerate() {
                net.at(cand.start, Due::Start(c));
            }
            for (i, f) in self.plan.faults.iter().enumerate() {
                net.at(f.at, Due::Fault(i));
            }
            net.at(self.plan.faults_end, Due::Calm);
        }
        let end = self.plan.end;
        loop {
            let due = self.net.borrow_mut().pop(end);
            let Some(due) = due else { break };
            self.events += 1;
            let outcome = catch_unwind(AssertUnwindSafe(|| self.step(due)));
            if outcome.is_err() {
                let now = self.now();
                self.check
                    .violation(now, "a panic in the elector or the world".into());
                break;
            }
            self.check_now();
        }
        let now = self.now();
        if !self.settled_leader {
            self.check.violation(
                now,
                format!(
                    "no leader by the end, {:.3}s after the faults ended",
                    (now - self.plan.faults_end).as_secs_f64()
                ),
            );
        }
        let trace = self.net.borrow_mut().trace.take().unwrap_or_default();
        Found {
            violations: std::mem::take(&mut self.check.violations),
            trace,
            terms: self.check.terms.len(),
            events: self.events,
        }
    }

    fn now(&self) -> Duration {
        self.net.borrow().now
    }

    fn log(&self, line: impl FnOnce() -> String) {
        self.net.borrow_mut().log(line);
    }

    fn describe_plan(&self) {
        let plan = &self.plan;
        self.log(|| format!("seed {}: {}", plan.seed, plan.timing));
        for (c, cand) in plan.candidates.iter().enumerate() {
            self.log(|| {
                format!(
                    "candidate {c} {:?}: watch {}, release on cancel {}, rejoin {}, clock {:+} ppm, wall {:+} ms, starts at {:.3}s, work lets go {:.3}s after its term ends",
                    cand.identity, cand.watch, cand.release_on_cancel, cand.rejoin,
                    cand.rate_ppm, cand.wall_offset_ms, cand.start.as_secs_f64(), cand.work_lag.as_secs_f64()
                )
            });
        }
        let n = &plan.net;
        self.log(|| format!("network: {n:?}"));
        for (i, f) in plan.faults.iter().enumerate() {
            self.log(|| format!("fault {i} at {:.3}s: {:?}", f.at.as_secs_f64(), f.fault));
        }
        self.log(|| {
            format!(
                "faults end at {:.3}s; the schedule ends at {:.3}s",
                plan.faults_end.as_secs_f64(),
                plan.end.as_secs_f64()
            )
        });
    }

    fn step(&mut self, due: Due) {
        match due {
            Due::Poll(p) => self.poll(p),
            Due::Arrive { p, call, op, sent } => {
                let before = self.net.borrow().revision;
                self.net.borrow_mut().serve(p, call, op);
                self.check_write(p, before, sent);
            }
            Due::Answer { p, call, answer } => self.answer(p, call, answer),
            Due::Watch { p, lease } => {
                let delivered = self.net.borrow_mut().deliver(p, lease);
                if delivered {
                    if let Some(d) = &self.procs[p].driven {
                        d.wake.poke();
                    }
                    self.poll(p);
                }
            }
            Due::Fault(i) => self.fault(i),
            Due::Heal(i) => self.heal(i),
            Due::Start(c) => self.start(c),
            Due::Calm => self.calm(),
            Due::LetGo(p, token) => {
                let work = &mut self.procs[p].work;
                if let Some(i) = work.iter().position(|t| t.token() == token) {
                    work.remove(i);
                    self.log(|| format!("p{p}: its work lets go of the term"));
                }
                self.poll(p);
            }
        }
    }

    fn answer(&mut self, p: usize, call: u64, answer: Answer) {
        {
            let mut net = self.net.borrow_mut();
            let pn = &mut net.procs[p];
            let now = pn.clock.now();
            match &mut pn.pending {
                // Taken only before its deadline: after it, the process
                // has given up on the request.
                Some(c) if c.call == call && now < c.deadline => c.answer = Some(answer),
                _ => return,
            }
        }
        self.poll(p);
    }

    /// Start a process for slot `c` (unless one runs and is not stopping).
    fn start(&mut self, c: usize) {
        if let (Some(p), _) = self.slots[c] {
            let pr = &self.procs[p];
            if pr.driven.is_some() && pr.stop_at.is_none() {
                return;
            }
        }
        let cand = self.plan.candidates[c].clone();
        let generation = self.slots[c].1;
        self.slots[c].1 += 1;
        let identity = if generation == 0 || !self.fresh_identity(c) {
            cand.identity.clone()
        } else {
            format!("{}-{generation}", cand.identity)
        };
        let net_time = self.net.borrow().time.clone();
        let clock = Arc::new(SimClock::new(
            net_time,
            self.base,
            cand.rate_ppm,
            cand.wall_offset_ms,
        ));
        let p = self.net.borrow_mut().add_proc(c, clock.clone(), cand.watch);
        let timing = self.plan.timing;
        let config = ElectorConfig {
            lease_duration: timing.lease,
            renew_deadline: timing.renew,
            retry_period: timing.retry,
            release_on_cancel: cand.release_on_cancel,
            rejoin: cand.rejoin,
            watch: cand.watch,
            ..ElectorConfig::default()
        };
        let io = SimIo {
            net: self.net.clone(),
            p,
            identity: identity.clone(),
            clock: clock.clone(),
        };
        let jitter_seed = self.plan.seed ^ (p as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let driven = drive(io, config.clone(), clock.clone(), "sim/lease", jitter_seed).ok();
        self.log(|| format!("p{p} starts as candidate {c} {identity:?}"));
        self.procs.push(Proc {
            slot: c,
            identity,
            clock,
            driven,
            paused: false,
            stalled: false,
            paused_at: Duration::ZERO,
            paused_total: Duration::ZERO,
            resumed_at: None,
            killed: false,
            term: None,
            work: Vec::new(),
            holding: Holding::default(),
            stop_at: None,
            config,
        });
        self.slots[c].0 = Some(p);
        self.poll(p);
    }

    /// Whether the last crash of slot `c` asked for a new identity.
    fn fresh_identity(&self, c: usize) -> bool {
        let now = self.now();
        self.plan
            .faults
            .iter()
            .rev()
            .find(|f| f.at <= now && matches!(f.fault, Fault::Crash { who, .. } if who == c))
            .is_some_and(|f| matches!(f.fault, Fault::Crash { fresh: true, .. }))
    }

    /// Poll process `p`'s state machine, then read its events.
    fn poll(&mut self, p: usize) {
        let pr = &mut self.procs[p];
        if pr.paused || pr.killed || pr.stalled {
            return;
        }
        let Some(driven) = &mut pr.driven else {
            return;
        };
        let mut cx = Context::from_waker(Waker::noop());
        let done = match driven.run.as_mut().poll(&mut cx) {
            Poll::Ready(result) => Some(result),
            Poll::Pending => None,
        };
        self.drain(p);
        if let Some(result) = done {
            self.ended(p, result.err().map(|e| e.to_string()));
        }
    }

    /// Read process `p`'s events as its program would.
    fn drain(&mut self, p: usize) {
        loop {
            let event = match &self.procs[p].driven {
                Some(d) => d.events.try_recv().ok(),
                None => None,
            };
            let Some(event) = event else { return };
            let now = self.now();
            match event {
                LeaderEvent::StartedLeading { term, .. } => {
                    let token = term.token();
                    self.log(|| format!("p{p}: StartedLeading, token {token}"));
                    let (max_seen, lowered, version, uid) = {
                        let net = self.net.borrow();
                        let pn = &net.procs[p];
                        let (version, uid) =
                            pn.cached.as_ref().map_or((0, 0), |s| (s.version, s.uid));
                        (pn.max_seen, net.lowered, version, uid)
                    };
                    self.check
                        .started(now, TermSeen { p, token, version }, max_seen, lowered);
                    let pr = &mut self.procs[p];
                    // The world's own copy, to ask is_current (not a
                    // hold); the work's is the received one.
                    pr.term = Some(term.share());
                    pr.work.push(term);
                    pr.holding = Holding {
                        leading: true,
                        was_current: true,
                        version,
                        uid,
                    };
                }
                LeaderEvent::StoppedLeading { reason, .. } => {
                    let why = match &self.procs[p].driven {
                        Some(d) => d.probe.status().last_loss.unwrap_or_default(),
                        None => String::new(),
                    };
                    self.log(|| format!("p{p}: StoppedLeading ({reason:?}) {why}"));
                    self.stopped_leading(p, reason);
                }
                LeaderEvent::NewLeader { identity, .. } => {
                    self.log(|| format!("p{p}: NewLeader {identity}"));
                }
            }
        }
    }

    fn stopped_leading(&mut self, p: usize, reason: StopReason) {
        let now = self.now();
        let pr = &mut self.procs[p];
        pr.holding.leading = false;
        let lag = self.plan.candidates[pr.slot].work_lag;
        if reason == StopReason::Lost && pr.resumed_at != Some(now) {
            // Ended on time: by the renew deadline after the start of the
            // last successful renew, on its own clock.
            let probe = pr.driven.as_ref().map(|d| d.probe.clone());
            if let Some(last) = probe.and_then(|pb| pb.last_renew()) {
                let deadline = last + pr.config.renew_deadline;
                let at = pr.clock.now();
                // Virtual time is exact but for rounding to nanoseconds.
                if at > deadline + Duration::from_micros(1) {
                    let late = at - deadline;
                    self.check.violation(
                        now,
                        format!(
                            "p{p}'s term ended {:.6}s after its renew deadline",
                            late.as_secs_f64()
                        ),
                    );
                }
            }
        }
        let token = self.procs[p].term.as_ref().map_or(0, Term::token);
        self.net.borrow_mut().at(now + lag, Due::LetGo(p, token));
    }

    /// Process `p`'s state machine returned.
    fn ended(&mut self, p: usize, error: Option<String>) {
        let now = self.now();
        let pr = &mut self.procs[p];
        pr.driven = None;
        let slot = pr.slot;
        let stop_at = pr.stop_at;
        self.net.borrow_mut().procs[p].alive = false;
        self.log(|| format!("p{p} ends ({})", error.as_deref().unwrap_or("ok")));
        let paused_total = self.procs[p].paused_total;
        match stop_at.map(|(at, paused)| at + (paused_total - paused)) {
            Some(at) => {
                // The release's budget is on the process's clock.
                let cand = &self.plan.candidates[slot];
                let rate = 1.0 + cand.rate_ppm as f64 / 1e6;
                let bound = self.procs[p].config.release_timeout.div_f64(rate) + cand.work_lag;
                if now - at > bound + Duration::from_millis(1) {
                    self.check.violation(
                        now,
                        format!(
                            "p{p}'s stop took {:.3}s, beyond its bound of {:.3}s",
                            (now - at).as_secs_f64(),
                            bound.as_secs_f64()
                        ),
                    );
                }
            }
            // Ended by itself (lost without rejoin): its orchestrator
            // starts it again.
            None => {
                let at = now + self.plan.restart_delay;
                self.net.borrow_mut().at(at, Due::Start(slot));
            }
        }
    }

    fn current(&self, c: usize) -> Option<usize> {
        self.slots[c].0.filter(|&p| {
            let pr = &self.procs[p];
            pr.driven.is_some() && !pr.killed
        })
    }

    fn fault(&mut self, i: usize) {
        let fault = self.plan.faults[i].fault.clone();
        let now = self.now();
        self.log(|| format!("fault {i}: {fault:?}"));
        match fault {
            Fault::Cut { who, how, until } => {
                self.net.borrow_mut().cut[who] = Some(how);
                self.net.borrow_mut().at(until, Due::Heal(i));
            }
            Fault::Stall { who, until } => {
                let free = |pr: &Proc| !pr.paused && !pr.stalled && pr.stop_at.is_none();
                if let Some(p) = self.current(who).filter(|&p| free(&self.procs[p])) {
                    self.procs[p].stalled = true;
                    self.applied[i] = Applied::Stalled(p);
                    self.net.borrow_mut().at(until, Due::Heal(i));
                }
            }
            Fault::Pause { who, until } => {
                if let Some(p) = self.current(who).filter(|&p| !self.procs[p].paused) {
                    self.procs[p].paused = true;
                    self.procs[p].paused_at = now;
                    self.applied[i] = Applied::Paused(p);
                    self.net.borrow_mut().at(until, Due::Heal(i));
                }
            }
            Fault::Crash { who, restart, .. } => {
                if let Some(p) = self.current(who) {
                    let pr = &mut self.procs[p];
                    pr.killed = true;
                    // The process and its work die at once.
                    pr.driven = None;
                    pr.term = None;
                    pr.work.clear();
                    pr.holding = Holding::default();
                    self.net.borrow_mut().procs[p].alive = false;
                    self.net.borrow_mut().at(now + restart, Due::Start(who));
                }
            }
            Fault::Stop { who, restart } => {
                // A paused process cannot take a stop (its signal thread
                // is paused too).
                let free = |pr: &Proc| !pr.paused && !pr.stalled;
                if let Some(p) = self.current(who).filter(|&p| free(&self.procs[p])) {
                    if self.procs[p].stop_at.is_none() {
                        self.procs[p].stop_at = Some((now, self.procs[p].paused_total));
                        if let Some(d) = &self.procs[p].driven {
                            d.stopper.stop();
                        }
                        self.poll(p);
                        self.net.borrow_mut().at(now + restart, Due::Start(who));
                    }
                }
            }
            Fault::Wall { who, how } => {
                if let Some(p) = self.current(who) {
                    self.procs[p].clock.set_wall(how);
                }
            }
            Fault::WatchOff { who, until } => {
                self.net.borrow_mut().watch_off[who] = true;
                self.net.borrow_mut().at(until, Due::Heal(i));
            }
            Fault::Other(write) => self.other_writer(write),
        }
    }

    fn heal(&mut self, i: usize) {
        let fault = self.plan.faults[i].fault.clone();
        match fault {
            Fault::Cut { who, .. } => self.net.borrow_mut().cut[who] = None,
            Fault::WatchOff { who, .. } => self.net.borrow_mut().watch_off[who] = false,
            Fault::Pause { .. } => {
                if let Applied::Paused(p) = self.applied[i] {
                    self.resume(p);
                }
            }
            Fault::Stall { .. } => {
                if let Applied::Stalled(p) = self.applied[i] {
                    self.unstall(p);
                }
            }
            _ => {}
        }
    }

    fn resume(&mut self, p: usize) {
        if !self.procs[p].paused {
            return;
        }
        let now = self.now();
        self.procs[p].paused = false;
        let paused = now - self.procs[p].paused_at;
        self.procs[p].paused_total += paused;
        self.procs[p].resumed_at = Some(now);
        self.log(|| format!("p{p} resumes"));
        self.poll(p);
    }

    fn unstall(&mut self, p: usize) {
        if !self.procs[p].stalled {
            return;
        }
        self.procs[p].stalled = false;
        self.procs[p].resumed_at = Some(self.now());
        self.log(|| format!("p{p}'s elector thread runs again"));
        self.poll(p);
    }

    /// The faults are over: everything heals, everyone runs.
    fn calm(&mut self) {
        self.log(|| "calm: every fault healed".into());
        self.net.borrow_mut().calm();
        for p in 0..self.procs.len() {
            let offset = self.plan.candidates[self.procs[p].slot].wall_offset_ms;
            self.procs[p].clock.heal_wall(offset);
            self.unstall(p);
            self.resume(p);
        }
        for c in 0..self.slots.len() {
            self.start(c);
        }
    }

    fn other_writer(&mut self, write: Write) {
        let now = self.now();
        let mut net = self.net.borrow_mut();
        let Some(stored) = net.store.clone() else {
            return;
        };
        let mut record = stored.record;
        let wall = MicroTime::from_system_time(
            std::time::UNIX_EPOCH + Duration::from_secs(1_767_225_600) + now,
        );
        match write {
            Write::Delete => {
                net.lowered = Some(net.revision + 1);
                net.deleted = true;
                net.store_record(None, None);
                return;
            }
            Write::Transitions(t) => {
                if t < record.leader_transitions {
                    net.lowered = Some(net.revision + 1);
                }
                record.leader_transitions = t;
            }
            Write::Holder(h) => {
                let revision = net.revision + 1;
                net.revocations.push(Revocation {
                    revision,
                    by: RevokedBy::Writer(h.clone()),
                });
                record = LeaderElectionRecord {
                    holder_identity: h,
                    lease_duration_seconds: self.plan.timing.lease.as_secs() as i32,
                    acquire_time: Some(wall),
                    renew_time: Some(wall),
                    leader_transitions: record.leader_transitions.saturating_add(1),
                    ..record
                };
            }
            Write::Free => {
                let revision = net.revision + 1;
                net.revocations.push(Revocation {
                    revision,
                    by: RevokedBy::Writer(String::new()),
                });
                record.holder_identity = String::new();
                record.lease_duration_seconds = 1;
                record.renew_time = Some(wall);
            }
        }
        net.store_record(Some(record), None);
    }

    /// A write that process `p` landed while it leads stores its term's
    /// token as `leaseTransitions`: the Lease names the term its holder
    /// runs (a term that went on under another value would sit, in the
    /// Lease's history, after terms with greater tokens).
    /// (A write sent before the term began, landing late, is a leftover of
    /// an earlier attempt, not a write of this term.)
    fn check_write(&mut self, p: usize, before: u64, sent: Duration) {
        let now = self.now();
        let net = self.net.borrow();
        let Some(stored) = net.store.as_ref().filter(|_| net.revision != before) else {
            return;
        };
        let pr = &self.procs[p];
        // A release: only once the work has let go of its terms.
        if stored.writer == Some(p)
            && stored.record.holder_identity.is_empty()
            && !pr.work.is_empty()
        {
            drop(net);
            self.check.violation(
                now,
                format!("p{p} released the lease while its work still held its term"),
            );
            return;
        }
        let (Some(term), true) = (&pr.term, pr.holding.leading) else {
            return;
        };
        if sent < pr.clock.true_time_of(term.started_at()) {
            return;
        }
        // A term another writer took away (freed, or gave to someone
        // else) is over for good: the Lease taken back is a new term.
        if stored.writer == Some(p) && stored.record.holder_identity == pr.identity {
            let taken = net.revocations.iter().find(|r| {
                matches!(&r.by, RevokedBy::Writer(h) if *h != pr.identity)
                    && r.revision > pr.holding.version
                    && r.revision < stored.version
            });
            if let Some(revision) = taken.map(|r| r.revision) {
                let token = term.token();
                drop(net);
                self.check.violation(
                    now,
                    format!(
                        "p{p} wrote the Lease as its own under its term with token {token}, \
                         which another writer took from it at revision {revision}"
                    ),
                );
                return;
            }
        }
        let written = stored.record.leader_transitions;
        if stored.writer == Some(p)
            && i64::from(written) != i64::try_from(term.token()).unwrap_or(i64::MAX)
        {
            let token = term.token();
            drop(net);
            self.check.violation(
                now,
                format!("p{p} wrote leaseTransitions {written} during its term with token {token}"),
            );
        }
    }

    /// After every step: the one-leader rule, revived terms, terms that
    /// outlived their end, and a leader once settled.
    fn check_now(&mut self) {
        let now = self.now();
        let net = self.net.borrow();
        let mut holders = Vec::new();
        let mut any_holder = false;
        for p in 0..self.procs.len() {
            let pr = &mut self.procs[p];
            if pr.killed || pr.paused {
                continue;
            }
            let current = pr.term.as_ref().is_some_and(Term::is_current);
            if current && !pr.holding.was_current {
                self.check
                    .violation(now, format!("p{p}'s term is current again after it ended"));
            }
            pr.holding.was_current = current;
            // A stalled elector cannot tell its work: the work holds while
            // its term is current (it reads `Term::is_current`).
            let leading = pr.holding.leading && !pr.stalled;
            let held = leading || current;
            let token = pr.term.as_ref().map_or(0, Term::token);
            let version = pr.holding.version;
            let uid = pr.holding.uid;
            let revoked = net
                .revocations
                .iter()
                .any(|r| r.revokes(p, uid, token, version));
            any_holder |= held;
            if held && !revoked {
                holders.push((p, format!("p{p} {:?} (token {token})", pr.identity)));
            }
            // A term past its end must have been stepped down from by now.
            if pr.holding.leading && !current && !pr.stalled && pr.resumed_at != Some(now) {
                if let Some(term) = &pr.term {
                    let end = pr.clock.true_time_of(term.valid_until());
                    if now > end + Duration::from_millis(1) {
                        self.check.violation(
                            now,
                            format!(
                                "p{p}'s term ended at {:.6}s but it has not stepped down",
                                end.as_secs_f64()
                            ),
                        );
                    }
                }
            }
        }
        if now >= self.plan.faults_end {
            self.settled_leader = any_holder;
        }
        drop(net);
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
}
