//! What `lease-elect`'s COMMAND is owed, judged as what it must not do is:
//! it is signalled only once its term is over or its process stops; an
//! orderly end (a stop, a term run out) gives it SIGTERM and its
//! `--grace`, up to the lease bound, before SIGKILL, unless the term was
//! taken or the operator asked twice; its end is noticed at once (the
//! release follows it, not the grace's end); everything below
//! `lease-elect` is killed only when the supervisor failed to report a
//! SIGKILL in time. Schedules where the supervisor's own switch is off
//! leave the session's deadlines to be judged alone (the budget rule in
//! `judge.rs`).

use std::time::Duration;

use super::judge::SLACK;
use super::plan::Mode;
use super::world::{Cmd, Layer, World};
use crate::session::{stop_margin, End, Input, Signal, END_SLACK};

impl World {
    fn cmd(&self, p: usize) -> Option<&Cmd> {
        match &self.procs[p].layer {
            Layer::Command { cmd: Some(c), .. } => Some(c),
            _ => None,
        }
    }

    fn cmd_mut(&mut self, p: usize) -> Option<&mut Cmd> {
        match &mut self.procs[p].layer {
            Layer::Command { cmd: Some(c), .. } => Some(c),
            _ => None,
        }
    }

    /// Process `p`'s COMMAND of `piece`, while the process and that
    /// COMMAND live.
    fn live_cmd(&mut self, p: usize, piece: usize) -> Option<&mut Cmd> {
        let pr = &self.procs[p];
        if pr.killed || pr.exited {
            return None;
        }
        self.cmd_mut(p).filter(|c| c.piece == piece && !c.exited)
    }

    /// `sig` reaches process `p`'s COMMAND, sent `by` its session or its
    /// supervisor's switch.
    pub(super) fn owed_signal(&mut self, p: usize, sig: Signal, by: &str) {
        let now = self.now();
        // The session's order counts whether COMMAND still runs or not:
        // it cannot know (a stopped supervisor reports nothing).
        if sig == Signal::Kill && by == "lease-elect" {
            if let Some(c) = self.cmd_mut(p) {
                c.kill_ordered_at.get_or_insert(now);
            }
        }
        let Some(c) = self.cmd(p).filter(|c| !c.exited) else {
            return;
        };
        let (piece, signalled_at, again_at) = (c.piece, c.signalled_at, c.again_at);
        let rec = &self.check.terms[self.check.pieces[piece].term];
        let (current, taken) = (rec.term.is_current(), rec.term.taken_over());
        let stopping = self.procs[p].stop_at.is_some();
        if current && !taken && !stopping {
            self.check.violation(
                now,
                format!("p{p}'s COMMAND was sent {sig} by {by} while its term was current and nothing stopped it"),
            );
        }
        if sig != Signal::Kill {
            if let Some(c) = self.cmd_mut(p) {
                c.signalled_at.get_or_insert(now);
            }
            return;
        }
        // SIGKILL: at once when the term was taken (by the world's
        // truth: the Lease is another's, free or gone) or the operator
        // asked twice; else not before the grace, or the lease bound.
        let identity = self.procs[p].identity.clone();
        let others = {
            let net = self.net.borrow();
            net.store
                .as_ref()
                .is_none_or(|s| s.record.holder_identity != identity)
        };
        if taken || others || again_at.is_some() {
            return;
        }
        let timing = self.plan.timing;
        let rate = self.rate(p);
        let margin = stop_margin(timing.lease, timing.renew);
        // The bound as the term knows it: its end is a renew deadline
        // after the start of its last successful attempt (client-go's
        // count, earlier than the write's send), so the lease may expire
        // the lease duration after that start. COMMAND must have ended a
        // margin before, and the supervisor may take half a margin to
        // report a SIGKILL: it comes a margin and a half before.
        let clock = self.procs[p].clock.clone();
        let slack = timing
            .lease
            .saturating_sub(timing.renew)
            .saturating_sub(margin)
            .saturating_sub(margin / 2);
        let lease_bound = clock.true_time_of(term_end(self, piece) + slack);
        let grace = match self.mode(p) {
            Mode::Command(c) => c.grace,
            _ => Duration::ZERO,
        };
        let Some(first) = signalled_at else {
            self.check.violation(
                now,
                format!("p{p}'s COMMAND was sent SIGKILL by {by} without a SIGTERM first, its term not taken"),
            );
            return;
        };
        let owed = (first + grace.div_f64(rate)).min(lease_bound);
        let early = owed.saturating_sub(now);
        if early > END_SLACK.div_f64(rate) + SLACK {
            self.check.violation(
                now,
                format!(
                    "p{p}'s COMMAND was sent SIGKILL by {by} {:.6}s before its grace or the lease bound, its term not taken",
                    early.as_secs_f64()
                ),
            );
        }
    }

    /// Process `p`'s session was told COMMAND ended: it is not running
    /// any more (the session ends, or pauses before a restart); told its
    /// supervisor was killed, the session ends so.
    pub(super) fn owed_exit_noticed(&mut self, p: usize, current: bool) {
        let now = self.now();
        let (running, end) = match &self.procs[p].layer {
            Layer::Command { session, .. } => (session.command_running(), session.end().cloned()),
            _ => (false, None),
        };
        if running {
            self.check.violation(
                now,
                format!("p{p}'s lease-elect was told COMMAND ended and still takes it as running"),
            );
        }
        // Its end is the session's, and the elector is stopped (the
        // release follows at once), unless COMMAND exited by itself with
        // --restart while its term runs.
        let signalled = self
            .cmd(p)
            .is_some_and(|c| c.signalled_at.is_some() || c.kill_ordered_at.is_some());
        let restarts = matches!(self.mode(p), Mode::Command(c) if c.restart);
        let stopped = self.procs[p].stop_called.is_some();
        if !running && (signalled || !restarts || !current) && !stopped {
            self.check.violation(
                now,
                format!("p{p}'s lease-elect was told COMMAND ended and did not stop its elector"),
            );
        }
        // With --restart, COMMAND ending by itself in a current term is
        // started again after a pause: the session waits, it does not end.
        let killed = self.cmd(p).is_some_and(|c| c.supervisor_killed);
        let stopping = self.procs[p].stop_at.is_some();
        if restarts && current && !signalled && !killed && !stopping && end.is_some() {
            self.check.violation(
                now,
                format!("p{p}'s lease-elect ended when COMMAND exited by itself in a current term, with --restart"),
            );
        }
        if killed && end.is_some_and(|e| e != End::SupervisorKilled) {
            self.check.violation(
                now,
                format!("p{p}'s lease-elect was told its supervisor was killed and ended as if it were not"),
            );
        }
    }

    /// The supervisor of process `p`'s COMMAND (`piece`) is killed:
    /// `lease-elect` (a subreaper) kills what it left, COMMAND with it,
    /// and learns it as an exit without status.
    pub(super) fn supervisor_killed(&mut self, p: usize, piece: usize) {
        let Some(c) = self.live_cmd(p, piece) else {
            return;
        };
        c.supervisor_killed = true;
        // Stopped or not, its death is end-of-file on lease-elect's pipe.
        c.supervisor_stopped = false;
        self.log(|| format!("p{p}'s supervisor is killed"));
        self.command_dies(p);
    }

    /// How long the supervisor has to report a SIGKILL (half the margin),
    /// in true time for process `p`.
    pub(super) fn answer_within(&self, p: usize) -> Duration {
        let timing = self.plan.timing;
        (stop_margin(timing.lease, timing.renew) / 2).div_f64(self.rate(p))
    }

    /// Whether the term of process `p`'s COMMAND (its last) is current.
    pub(super) fn command_term_current(&self, p: usize) -> bool {
        self.cmd(p).is_some_and(|c| {
            let rec = &self.check.terms[self.check.pieces[c.piece].term];
            rec.term.is_current() && !rec.term.taken_over()
        })
    }

    /// Whether process `p`'s COMMAND's supervisor is stopped.
    pub(super) fn command_supervisor_stopped(&self, p: usize) -> bool {
        self.cmd(p).is_some_and(|c| c.supervisor_stopped)
    }

    /// Process `p`'s session kills everything below it: once its
    /// supervisor failed to report a SIGKILL within half the margin, not
    /// before and not later (unless `lease-elect` was paused meanwhile).
    pub(super) fn owed_kill_below(&mut self, p: usize) {
        let now = self.now();
        let within = self.answer_within(p);
        let ordered = self.cmd(p).and_then(|c| c.kill_ordered_at);
        let reported = self.cmd(p).is_some_and(|c| c.reported);
        let early = ordered.is_none_or(|at| now + SLACK < at + within);
        if early && !reported {
            self.check.violation(
                now,
                format!("p{p}'s lease-elect killed everything below it before its supervisor had half the margin to report COMMAND's end"),
            );
        }
        let resumed = self.procs[p].resumed_at;
        if let Some(at) = ordered.filter(|&at| resumed.is_none_or(|r| r < at)) {
            let late = now.saturating_sub(at + within);
            if late > SLACK {
                self.check.violation(
                    now,
                    format!(
                        "p{p}'s lease-elect killed everything below it {:.6}s after its supervisor's half margin to report the SIGKILL ran out",
                        late.as_secs_f64()
                    ),
                );
            }
        }
    }

    /// The supervisor of process `p`'s COMMAND (`piece`) is stopped.
    pub(super) fn supervisor_stopped(&mut self, p: usize, piece: usize) {
        let Some(c) = self.live_cmd(p, piece) else {
            return;
        };
        c.supervisor_stopped = true;
        self.log(|| format!("p{p}'s supervisor is stopped"));
        // Nothing holds COMMAND now while lease-elect is paused.
        if self.procs[p].paused {
            self.freeze_work(p);
        }
    }

    /// The world sends process `p`'s `lease-elect` SIGTERM a second time.
    pub(super) fn signal_again(&mut self, p: usize) {
        let pr = &self.procs[p];
        if pr.killed || pr.exited || pr.paused {
            return;
        }
        self.log(|| format!("p{p} gets SIGTERM again"));
        self.signal_lease_elect(p);
    }

    /// Process `p`'s session was told its term started: COMMAND runs
    /// (when the term is still current and nothing stops the process).
    pub(super) fn owed_start(&mut self, p: usize, current: bool) {
        let now = self.now();
        let pr = &self.procs[p];
        if pr.paused || pr.killed || pr.exited || pr.stop_at.is_some() {
            return;
        }
        let running = match &pr.layer {
            Layer::Command { session, .. } => session.command_running(),
            _ => true,
        };
        let started = self.cmd(p).is_some_and(|c| !c.exited);
        if current && !(running && started) {
            self.check.violation(
                now,
                format!("p{p}'s lease-elect was told its term started and did not start COMMAND"),
            );
        }
    }

    /// A session never ends as lost while its term was current (as it
    /// took its input) and the Lease is still its own.
    pub(super) fn owed_not_lost_while_current(&mut self, p: usize, current: bool) {
        let now = self.now();
        let lost = match &self.procs[p].layer {
            Layer::Command { session, .. } => session.end() == Some(&End::Lost),
            _ => false,
        };
        if lost && current && self.procs[p].stop_at.is_none() {
            self.check.once(now, (p, usize::MAX - 1), || {
                format!("p{p}'s lease-elect ended as lost while its term was current")
            });
        }
    }

    /// A session that waits to start COMMAND again (`--restart`) ends
    /// once its term has: nothing runs, and the Lease is released at
    /// once rather than at the pause's end.
    pub(super) fn owed_no_idle_pause(&mut self, p: usize) {
        let now = self.now();
        let (running, ended) = match &self.procs[p].layer {
            Layer::Command { session, .. } => (session.command_running(), session.end().is_some()),
            _ => return,
        };
        let Some(c) = self.cmd(p).filter(|c| c.exited) else {
            return;
        };
        let rec = &self.check.terms[self.check.pieces[c.piece].term];
        if !running && !ended && !rec.term.is_current() {
            self.check.violation(
                now,
                format!("p{p}'s lease-elect waits to start COMMAND again in a term that has ended"),
            );
        }
    }

    /// The world sends process `p`'s `lease-elect` SIGTERM: a COMMAND
    /// running unsignalled is sent it at once; one already signalled (by
    /// a stop before, or at its term's end) is owed SIGKILL at once, as a
    /// second signal means "now".
    pub(super) fn signal_lease_elect(&mut self, p: usize) {
        let now = self.now();
        let unsignalled = self
            .cmd(p)
            .is_some_and(|c| !c.exited && c.signalled_at.is_none() && c.kill_ordered_at.is_none());
        let signalled = self
            .cmd(p)
            .is_some_and(|c| !c.exited && c.signalled_at.is_some());
        if signalled {
            if let Some(c) = self.cmd_mut(p) {
                c.again_at = Some(now);
            }
        }
        self.session_step(p, Input::Signal(Signal::Term));
        let passed_on = self
            .cmd(p)
            .is_some_and(|c| c.exited || c.signalled_at.is_some() || c.kill_ordered_at.is_some());
        if unsignalled && !passed_on {
            self.check.violation(
                now,
                format!("p{p}'s lease-elect took SIGTERM and did not pass it on to COMMAND"),
            );
        }
        // (Through a stopped supervisor only the kill of everything below
        // reaches it, judged when ordered.)
        let stopped = self.command_supervisor_stopped(p);
        if signalled && !stopped && self.cmd(p).is_some_and(|c| !c.exited) {
            self.check.violation(
                now,
                format!("p{p}'s lease-elect took a second SIGTERM and COMMAND still runs"),
            );
        }
    }
}

/// The end of `piece`'s term, on its process's clock.
fn term_end(w: &World, piece: usize) -> std::time::Instant {
    w.check.terms[w.check.pieces[piece].term].term.valid_until()
}
