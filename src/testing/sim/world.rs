//! The world of one schedule: candidates as processes (started, paused,
//! crashed, stopped, restarted, joining late), each running what its user
//! runs around the elector (`layers.rs`), the faults of the plan applied
//! and healed at their times, each process's state machine polled when
//! something it waits for is due, and the checker asked after every step
//! (`judge.rs`).

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::check::{Checker, MAX_STEPS, MAX_STEPS_AT_ONCE};
use super::clock::SimClock;
use super::io::SimIo;
use super::net::{Answer, Due, Net, Revocation, RevokedBy};
use super::plan::{Fault, Mode, Plan, Write};
use crate::clock::Clock;
use crate::elector::driven::{drive, Driven};
use crate::elector::{ElectorConfig, LeaderEvent, Term};
use crate::lease::{LeaderElectionRecord, MicroTime};
use crate::session::{DeadMan, Session, SessionConfig};

/// One run of a candidate.
pub(super) struct Proc {
    pub(super) slot: usize,
    pub(super) identity: String,
    pub(super) clock: Arc<SimClock>,
    /// The state machine, until it ends or the process is killed.
    pub(super) driven: Option<Driven>,
    /// Its events, as its program reads them (also after the elector
    /// ended), until the process exits or is killed.
    pub(super) events: Option<crate::elector::LeaderEvents>,
    pub(super) paused: bool,
    /// Its elector thread stalls; the rest of the process runs on.
    pub(super) stalled: bool,
    /// Since when, and how long it has been paused in all (or its elector
    /// thread stalled: time the elector could not run).
    pub(super) paused_at: Duration,
    pub(super) paused_total: Duration,
    pub(super) resumed_at: Option<Duration>,
    pub(super) killed: bool,
    /// The process has exited (its elector ended and its work returned).
    pub(super) exited: bool,
    /// The elector's latest term as the world tracks it (an index into the
    /// checker's terms).
    pub(super) term: Option<usize>,
    /// The elector has a term in progress (the world's view of it, taken
    /// after each of its steps).
    pub(super) in_term: bool,
    /// Between `StartedLeading` and `StoppedLeading` as its program read
    /// them.
    pub(super) leading: bool,
    /// The last `Term::is_current()` seen, to catch a revived term.
    pub(super) was_current: bool,
    /// When the world stopped it (its `Stopper`, or SIGTERM to
    /// `lease-elect`), and when the elector itself was told to stop, with
    /// how long the process had been paused then.
    pub(super) stop_at: Option<Duration>,
    pub(super) stop_called: Option<(Duration, Duration)>,
    /// It led when it was stopped (its term was current).
    pub(super) led_at_stop: bool,
    /// A fault that stopped it starts the slot again itself.
    pub(super) restart_scheduled: bool,
    /// The Lease when it was told to stop: its revision, and whether it
    /// held a record of this process.
    pub(super) store_at_stop: Option<(u64, bool)>,
    /// Told to stop without a release (its work panicked).
    pub(super) release_skipped: bool,
    /// Since when its elector thread has been stalled.
    pub(super) stalled_at: Duration,
    pub(super) config: ElectorConfig,
    pub(super) layer: Layer,
    /// Work steps that fell due while the process was paused.
    pub(super) deferred: Vec<usize>,
    /// Its program waits for the work of an ended term before it reads
    /// the next event (as `run()` joins its work thread).
    pub(super) joining: bool,
    /// A late read of its events is due.
    pub(super) reading: bool,
}

/// What the user runs around the elector, and its state.
pub(super) enum Layer {
    /// `spawn()` and a loop over the events: the terms the work holds,
    /// each with its piece, and when it lets go (once told the term ended).
    Spawn {
        lag: Duration,
        held: Vec<(Term, usize, Option<Duration>)>,
    },
    /// `run()`: its work threads (one, unless a term's work started while
    /// an earlier one's still ran).
    Run { running: Vec<RunWork> },
    /// `lease-elect` with COMMAND.
    Command {
        session: Box<Session>,
        cmd: Option<Cmd>,
        /// The session's wake-up in force (a generation: older ones are
        /// stale).
        wake: u64,
        /// `handle.stop()` was called (the session ended).
        stopped: bool,
    },
}

/// A `run()` work thread.
pub(super) struct RunWork {
    pub(super) piece: usize,
    /// The work's hold on its term.
    pub(super) term: Term,
    /// On the process's clock.
    pub(super) started: Instant,
    /// `WaitEnded`: it saw the end and returns at this time.
    pub(super) returning: Option<Duration>,
}

/// A COMMAND under its supervisor.
pub(super) struct Cmd {
    pub(super) piece: usize,
    pub(super) dead_man: DeadMan,
    /// When it exits (by itself, or after a signal), if it will.
    pub(super) exit_at: Option<Duration>,
    pub(super) exited: bool,
    /// Its exit was told to `lease-elect`.
    pub(super) reported: bool,
    /// What it was sent, and when (true time): its first SIGTERM or
    /// SIGINT, the session's SIGKILL order, the world's second SIGTERM.
    pub(super) signalled_at: Option<Duration>,
    pub(super) kill_ordered_at: Option<Duration>,
    pub(super) again_at: Option<Duration>,
    /// Its supervisor was killed (lease-elect, a subreaper, then kills
    /// everything below it: COMMAND with it).
    pub(super) supervisor_killed: bool,
    /// Its supervisor is stopped: nothing passes through it.
    pub(super) supervisor_stopped: bool,
}

/// What the world remembers of a fault that lasts.
#[derive(Clone, Copy)]
enum Applied {
    Nothing,
    Paused(usize),
    Stalled(usize),
}

pub(super) struct World {
    pub(super) plan: Plan,
    pub(super) net: Rc<RefCell<Net>>,
    /// Every process clock's origin (read once, never to decide).
    pub(super) base: Instant,
    pub(super) procs: Vec<Proc>,
    /// Per candidate slot: its current process, and how many it has had.
    slots: Vec<(Option<usize>, u32)>,
    applied: Vec<Applied>,
    pub(super) check: Checker,
    /// A leader holds at the last step after the faults ended.
    pub(super) settled_leader: bool,
    pub(super) events: u64,
    /// Steps at the current instant.
    at_once: (Duration, u64),
    /// Releases whose handover is awaited: (when, by whom).
    pub(super) handovers: Vec<(Duration, usize)>,
    /// When a term last ended (a program may end its own: work that
    /// returns, panics, a COMMAND that exits).
    pub(super) last_term_end: Duration,
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
            at_once: (Duration::ZERO, 0),
            handovers: Vec::new(),
            last_term_end: Duration::ZERO,
            plan,
        }
    }

    pub(super) fn run(mut self) -> Found {
        self.describe_plan();
        {
            let mut net = self.net.borrow_mut();
            for (c, cand) in self.plan.candidates.iter().enumerate() {
                if let Some(start) = cand.start {
                    net.at(start, Due::Start(c));
                }
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
            if !self.count_step() {
                break;
            }
            let outcome = catch_unwind(AssertUnwindSafe(|| self.step(due)));
            if let Err(panic) = outcome {
                let now = self.now();
                let what = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("a panic");
                self.check
                    .violation(now, format!("a panic in the elector or the world: {what}"));
                break;
            }
            self.check_now();
        }
        self.check_end();
        let trace = self.net.borrow_mut().trace.take().unwrap_or_default();
        Found {
            violations: std::mem::take(&mut self.check.violations),
            trace,
            terms: self.check.terms.len(),
            events: self.events,
        }
    }

    /// Count a step; false (with a violation) past the caps: a livelock.
    fn count_step(&mut self) -> bool {
        self.events += 1;
        let now = self.now();
        if self.at_once.0 == now {
            self.at_once.1 += 1;
        } else {
            self.at_once = (now, 1);
        }
        let why = if self.events > MAX_STEPS {
            format!("livelock: more than {MAX_STEPS} steps in the schedule")
        } else if self.at_once.1 > MAX_STEPS_AT_ONCE {
            format!("livelock: more than {MAX_STEPS_AT_ONCE} steps at one instant")
        } else {
            return true;
        };
        self.check.violation(now, why);
        false
    }

    pub(super) fn now(&self) -> Duration {
        self.net.borrow().now
    }

    pub(super) fn log(&self, line: impl FnOnce() -> String) {
        self.net.borrow_mut().log(line);
    }

    pub(super) fn at(&self, at: Duration, due: Due) {
        self.net.borrow_mut().at(at, due);
    }

    fn describe_plan(&self) {
        let plan = &self.plan;
        self.log(|| format!("seed {}: {}, lock {:?}", plan.seed, plan.timing, plan.lock));
        for (c, cand) in plan.candidates.iter().enumerate() {
            self.log(|| {
                format!(
                    "candidate {c} {:?}: {:?}, watch {}, release on cancel {}, rejoin {}, clock {:+} ppm, wall {:+} ms, starts at {}",
                    cand.identity, cand.mode, cand.watch, cand.release_on_cancel, cand.rejoin,
                    cand.rate_ppm, cand.wall_offset_ms,
                    cand.start.map_or("its join".to_string(), |s| format!("{:.3}s", s.as_secs_f64()))
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
                self.net.borrow_mut().serve(p, call, op, sent);
                self.check_write(p, before, sent);
            }
            Due::Answer {
                p,
                call,
                answer,
                sent,
            } => self.answer(p, call, answer, sent),
            Due::Watch {
                p,
                lease,
                revision,
                uid,
            } => {
                let delivered = self.net.borrow_mut().deliver(p, lease, revision, uid);
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
            Due::Work(piece) => self.work_step(piece),
            Due::Session(p, wake) => self.session_wake(p, wake),
            Due::CommandExit(p) => self.command_exit(p),
            Due::DeadMan(p) => self.dead_man(p),
            Due::Drain(p) => self.late_drain(p),
            Due::Again(p) => self.signal_again(p),
            Due::SupervisorKilled(p, piece) => self.supervisor_killed(p, piece),
            Due::SupervisorStopped(p, piece) => self.supervisor_stopped(p, piece),
        }
    }

    fn answer(&mut self, p: usize, call: u64, answer: Answer, sent: Duration) {
        let in_time = {
            let mut net = self.net.borrow_mut();
            let now = net.now;
            let pn = &mut net.procs[p];
            let clock_now = pn.clock.now();
            match &mut pn.pending {
                // Taken only before its deadline: after it, the process
                // has given up on the request.
                Some(c) if c.call == call && clock_now < c.deadline => {
                    c.answer = Some(answer);
                    true
                }
                Some(c) if c.call == call => {
                    let _ = now;
                    false
                }
                _ => return,
            }
        };
        if !in_time {
            let now = self.now();
            self.net.borrow_mut().impair(p, sent, now);
            return;
        }
        self.poll(p);
    }

    /// Start a process for slot `c` (unless one runs and is not stopping).
    pub(super) fn start(&mut self, c: usize) {
        if let (Some(p), _) = self.slots[c] {
            let pr = &self.procs[p];
            if !pr.exited && !pr.killed && pr.stop_at.is_none() {
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
        let mut config = ElectorConfig {
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
            lock: self.plan.lock,
            read_local: false,
        };
        if let Mode::Run { release_grace, .. } = &cand.mode {
            config.release_grace = *release_grace;
        }
        let jitter_seed = self.plan.seed ^ (p as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut driven = drive(io, config.clone(), clock.clone(), "sim/lease", jitter_seed).ok();
        let events = driven.as_mut().and_then(|d| d.events.take());
        let layer = match (&cand.mode, &driven) {
            (Mode::Command(command), Some(d)) => Layer::Command {
                session: Box::new(Session::new(
                    SessionConfig {
                        grace: command.grace,
                        restart: command.restart,
                        acquire_timeout: false,
                        lease_duration: timing.lease,
                        renew_deadline: timing.renew,
                    },
                    d.probe.clone(),
                )),
                cmd: None,
                wake: 0,
                stopped: false,
            },
            (Mode::Spawn { lag }, _) => Layer::Spawn {
                lag: *lag,
                held: Vec::new(),
            },
            _ => Layer::Run {
                running: Vec::new(),
            },
        };
        self.log(|| format!("p{p} starts as candidate {c} {identity:?}"));
        self.procs.push(Proc {
            slot: c,
            identity,
            clock,
            driven,
            events,
            paused: false,
            stalled: false,
            paused_at: Duration::ZERO,
            paused_total: Duration::ZERO,
            resumed_at: None,
            killed: false,
            exited: false,
            term: None,
            in_term: false,
            leading: false,
            was_current: false,
            stop_at: None,
            stop_called: None,
            led_at_stop: false,
            restart_scheduled: false,
            store_at_stop: None,
            release_skipped: false,
            stalled_at: Duration::ZERO,
            config,
            layer,
            deferred: Vec::new(),
            joining: false,
            reading: false,
        });
        if let (Mode::Run { .. }, Some(d)) = (&cand.mode, &self.procs[p].driven) {
            // `run()` reads every event: a term is its work's from the send.
            d.stopper.read_every_event();
        }
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
    /// A stalled elector thread is not polled; its program still reads
    /// its events (the receiver ends an overdue term itself).
    pub(super) fn poll(&mut self, p: usize) {
        let pr = &mut self.procs[p];
        if pr.paused || pr.killed {
            return;
        }
        let stalled = pr.stalled;
        let Some(driven) = &mut pr.driven else {
            return;
        };
        self.net.borrow_mut().procs[p].calls_this_poll = 0;
        let mut cx = Context::from_waker(Waker::noop());
        let done = match driven.run.as_mut() {
            _ if stalled => None,
            run => match run.poll(&mut cx) {
                Poll::Ready(result) => Some(result),
                Poll::Pending => None,
            },
        };
        // The elector's own view of its terms (not its program's, which
        // may read events later).
        if !stalled {
            self.elector_view(p);
        }
        match self.plan.candidates[self.procs[p].slot].reads_late {
            // Its program's event thread lags: it reads a moment later.
            Some(lag) if !self.procs[p].reading => {
                self.procs[p].reading = true;
                let at = self.now() + lag;
                self.at(at, Due::Drain(p));
            }
            Some(_) => {}
            None => {
                self.drain(p);
                // Its receiver may have ended an overdue term.
                self.elector_view(p);
            }
        }
        self.polled(p);
        self.layer_after_poll(p);
        if let Some(result) = done {
            self.elector_ended(p, result.err().map(|e| e.to_string()));
        }
    }

    /// A late reader reads now.
    pub(super) fn late_drain(&mut self, p: usize) {
        // Paused: it reads when it runs again.
        if self.procs[p].paused || self.procs[p].killed {
            return;
        }
        self.procs[p].reading = false;
        self.drain(p);
        self.elector_view(p);
        self.layer_after_poll(p);
        self.maybe_exit(p);
    }

    /// Read process `p`'s events as its program would.
    fn drain(&mut self, p: usize) {
        loop {
            if self.procs[p].joining {
                return;
            }
            let event = match &self.procs[p].events {
                Some(events) => events.try_recv().ok(),
                None => None,
            };
            let Some(event) = event else { return };
            match event {
                LeaderEvent::StartedLeading { term, .. } => {
                    let token = term.token();
                    self.log(|| format!("p{p}: StartedLeading, token {token}"));
                    // Also when the elector has not been looked at since.
                    self.elector_view(p);
                    self.procs[p].leading = true;
                    self.layer_started(p, term);
                }
                LeaderEvent::StoppedLeading { reason, .. } => {
                    let why = match &self.procs[p].driven {
                        Some(d) => d.probe.status().last_loss.unwrap_or_default(),
                        None => String::new(),
                    };
                    self.log(|| format!("p{p}: StoppedLeading ({reason:?}) {why}"));
                    self.procs[p].leading = false;
                    self.layer_stopped(p);
                    if !matches!(self.procs[p].layer, Layer::Command { .. }) {
                        self.procs[p].joining = self.has_running_piece(p);
                    }
                }
                LeaderEvent::NewLeader { identity, .. } => {
                    self.log(|| format!("p{p}: NewLeader {identity}"));
                }
            }
        }
    }

    /// Process `p`'s state machine returned.
    fn elector_ended(&mut self, p: usize, error: Option<String>) {
        self.procs[p].driven = None;
        if self.plan.candidates[self.procs[p].slot]
            .reads_late
            .is_some()
            && !self.procs[p].reading
        {
            self.procs[p].reading = true;
            let lag = self.plan.candidates[self.procs[p].slot]
                .reads_late
                .unwrap_or_default();
            let at = self.now() + lag;
            self.at(at, Due::Drain(p));
        }
        self.net.borrow_mut().procs[p].alive = false;
        self.log(|| format!("p{p}'s elector ends ({})", error.as_deref().unwrap_or("ok")));
        self.elector_stop_bound(p);
        self.layer_elector_ended(p);
        self.maybe_exit(p);
    }

    /// The process exits once its elector has ended and its work
    /// returned (`run()` joins its work thread; `lease-elect` has ended
    /// COMMAND).
    pub(super) fn maybe_exit(&mut self, p: usize) {
        let pr = &self.procs[p];
        let unread = pr.reading || pr.joining;
        if pr.exited || pr.killed || pr.driven.is_some() || unread || self.has_running_piece(p) {
            return;
        }
        if let Layer::Command { cmd: Some(c), .. } = &pr.layer {
            if !c.exited {
                return;
            }
        }
        self.procs[p].exited = true;
        self.procs[p].events = None;
        self.log(|| format!("p{p} exits"));
        self.process_ended(p);
        // Ended by itself (lost without rejoin, its job done): its
        // orchestrator starts it again. (A stop has its own restart.)
        if !self.procs[p].restart_scheduled {
            let at = self.now() + self.plan.restart_delay;
            let slot = self.procs[p].slot;
            self.at(at, Due::Start(slot));
        }
    }

    pub(super) fn has_running_piece(&self, p: usize) -> bool {
        self.check.running().any(|(_, piece)| piece.p == p)
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
                self.at(until, Due::Heal(i));
            }
            Fault::Stall { who, until } => {
                let free = |pr: &Proc| !pr.paused && !pr.stalled && pr.stop_at.is_none();
                if let Some(p) = self.current(who).filter(|&p| free(&self.procs[p])) {
                    self.procs[p].stalled = true;
                    self.procs[p].stalled_at = now;
                    // Its program's receiver ends the term at its deadline.
                    let end = self.procs[p].driven.as_ref().and_then(|d| d.probe.term());
                    if let Some(term) = end {
                        let at = self.procs[p].clock.true_time_of(term.valid_until());
                        self.at(at, Due::Poll(p));
                    }
                    self.applied[i] = Applied::Stalled(p);
                    self.at(until, Due::Heal(i));
                }
            }
            Fault::Pause { who, until } => {
                if let Some(p) = self.current(who).filter(|&p| !self.procs[p].paused) {
                    self.procs[p].paused = true;
                    self.procs[p].paused_at = now;
                    self.applied[i] = Applied::Paused(p);
                    self.freeze_work(p);
                    self.at(until, Due::Heal(i));
                }
            }
            Fault::Crash { who, restart, .. } => {
                if let Some(p) = self.current(who) {
                    self.kill(p);
                    self.at(now + restart, Due::Start(who));
                }
            }
            Fault::Stop { who, restart } => {
                // A paused process cannot take a stop (its signal thread
                // is paused too).
                let free = |pr: &Proc| !pr.paused && !pr.stalled;
                if let Some(p) = self.current(who).filter(|&p| free(&self.procs[p])) {
                    if self.procs[p].stop_at.is_none() {
                        self.stop(p);
                        self.procs[p].restart_scheduled = true;
                        self.at(now + restart, Due::Start(who));
                    }
                }
            }
            Fault::Join(c) => {
                if self.slots[c].0.is_none() {
                    self.start(c);
                }
            }
            Fault::Wall { who, how } => {
                if let Some(p) = self.current(who) {
                    self.procs[p].clock.set_wall(how);
                }
            }
            Fault::WatchOff { who, until } => {
                self.net.borrow_mut().watch_off[who] = true;
                self.at(until, Due::Heal(i));
            }
            Fault::Other(write) => self.other_writer(write),
        }
    }

    /// Kill process `p` (kill -9, the OOM killer): it and its work die at
    /// once; a COMMAND's supervisor reads end-of-file and kills COMMAND.
    pub(super) fn kill(&mut self, p: usize) {
        let now = self.now();
        self.procs[p].killed = true;
        if self.procs[p].in_term {
            self.elector_term_ended(p);
        }
        let pr = &mut self.procs[p];
        pr.driven = None;
        pr.events = None;
        pr.leading = false;
        self.net.borrow_mut().procs[p].alive = false;
        self.log(|| format!("p{p} is killed"));
        self.layer_killed(p);
        let pieces: Vec<usize> = self
            .check
            .running()
            .filter(|(_, piece)| piece.p == p)
            .map(|(i, _)| i)
            .collect();
        for i in pieces {
            self.end_piece(i, now);
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
        let from = self.procs[p].paused_at;
        self.net.borrow_mut().impair(p, from, now);
        self.log(|| format!("p{p} resumes"));
        for piece in std::mem::take(&mut self.procs[p].deferred) {
            self.at(now, Due::Work(piece));
        }
        if self.procs[p].reading {
            self.at(now, Due::Drain(p));
        }
        self.poll(p);
        self.session_tick(p);
    }

    fn unstall(&mut self, p: usize) {
        if !self.procs[p].stalled {
            return;
        }
        let now = self.now();
        self.procs[p].stalled = false;
        self.procs[p].resumed_at = Some(now);
        let from = self.procs[p].stalled_at;
        self.procs[p].paused_total += now - from;
        self.net.borrow_mut().impair(p, from, now);
        self.log(|| format!("p{p}'s elector thread runs again"));
        self.poll(p);
        let in_term = self.procs[p].in_term;
        self.net.borrow_mut().procs[p].leading = in_term;
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
            if self.plan.candidates[c].start.is_some() || self.slots[c].0.is_some() {
                self.start(c);
            }
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
}
