//! What users run around the elector, in the world: the loop of a
//! `spawn()` program over its events, `LeaderElector::run`'s work threads
//! (`elector/work.rs`: one thread per term, `stop()` when the work
//! returns while its term is current, a stop without release when it
//! panics), and `lease-elect` with COMMAND (the library's `session`, the
//! code the tool runs, with COMMAND and its supervisor as processes of
//! their own). Each start of a work thread or of COMMAND is a piece of
//! work the checker judges.

use std::time::Duration;

use super::check::Piece;
use super::net::Due;
use super::plan::{Command, Mode, Work};
use super::world::{Cmd, Layer, RunWork, World};
use crate::clock::Clock;
use crate::elector::Term;
use crate::session::{Action, DeadMan, Input, Signal};

impl World {
    /// The true time at which `d` on process `p`'s clock from now has
    /// passed: work, COMMAND and its supervisor run on their machine's
    /// clock, as the elector does.
    fn after(&self, p: usize, d: Duration) -> Duration {
        let clock = &self.procs[p].clock;
        clock.true_time_of(crate::clock::add_saturating(clock.now(), d))
    }

    pub(super) fn mode(&self, p: usize) -> &Mode {
        &self.plan.candidates[self.procs[p].slot].mode
    }

    /// A piece of work of process `p` starts, in its current term.
    fn start_piece(
        &mut self,
        p: usize,
        term: &Term,
        honours: bool,
        latency: Duration,
        command: bool,
    ) -> usize {
        let now = self.now();
        let term = self.term_index(p, term).unwrap_or(usize::MAX);
        let what = format!("{:?}", self.mode(p));
        let earlier = self
            .check
            .running()
            .find(|(_, piece)| piece.p == p)
            .map(|(i, _)| i);
        if let Some(i) = earlier {
            let token = self.check.terms.get(term).map_or(0, |t| t.token);
            self.check.violation(
                now,
                format!("p{p} started the work of its term with token {token} while the work of an earlier term (piece {i}) still ran"),
            );
        }
        // A program paused whole since its term began starts its work
        // late: only a fenced store keeps that work out.
        let frozen = !command
            && self.check.terms.get(term).is_some_and(|t| {
                let began = self.procs[p].clock.true_time_of(t.term.started_at());
                self.procs[p].paused_total > Duration::ZERO && self.procs[p].paused_at >= began
            });
        self.check.pieces.push(Piece {
            p,
            term,
            start: now,
            end: None,
            honours,
            latency,
            frozen,
            command,
            what,
        });
        let i = self.check.pieces.len() - 1;
        self.log(|| format!("p{p}: its work starts (piece {i})"));
        i
    }

    pub(super) fn end_piece(&mut self, i: usize, now: Duration) {
        if self.check.pieces[i].end.is_none() {
            self.check.pieces[i].end = Some(now);
            let p = self.check.pieces[i].p;
            self.log(|| format!("p{p}: its work ends (piece {i})"));
            // Its program reads on.
            if self.procs[p].joining && !self.has_running_piece(p) {
                self.procs[p].joining = false;
                self.at(now, Due::Poll(p));
            }
        }
    }

    /// `StartedLeading` reached process `p`'s program.
    pub(super) fn layer_started(&mut self, p: usize, term: Term) {
        let now = self.now();
        match self.mode(p).clone() {
            // A term read after it ended (its program reads late) is no
            // work: the loop looks at `is_current` before each step.
            Mode::Spawn { .. } if !term.is_current() => {}
            Mode::Spawn { lag } => {
                let piece = self.start_piece(p, &term, true, lag, false);
                // Its loop looks at `is_current` (by the term's end at
                // the latest), besides its events.
                let until = self.procs[p].clock.true_time_of(term.valid_until());
                if let Layer::Spawn { held, .. } = &mut self.procs[p].layer {
                    held.push((term, piece, None));
                }
                self.at(until, Due::Work(piece));
            }
            Mode::Run { work, .. } => {
                let (honours, latency) = match work {
                    Work::Steps { step, .. } | Work::Panics { step, .. } => (true, step),
                    Work::Ignores(_) => (false, Duration::ZERO),
                    Work::AtOnce => (true, Duration::ZERO),
                    Work::WaitEnded { lag } => (true, lag),
                };
                let piece = self.start_piece(p, &term, honours, latency, false);
                let first = match work {
                    Work::Ignores(len) => self.after(p, len),
                    _ => now,
                };
                let started = self.procs[p].clock.now();
                if let Layer::Run { running } = &mut self.procs[p].layer {
                    running.push(RunWork {
                        piece,
                        term,
                        started,
                        returning: None,
                    });
                }
                self.at(first, Due::Work(piece));
            }
            Mode::Command(_) => {
                // (Judged by the term as the session was given it: a
                // session that ends at once stops the elector, which ends
                // the term.)
                let current = term.is_current() && !term.taken_over();
                self.session_step(p, Input::Started(term));
                self.owed_start(p, current);
            }
        }
    }

    /// `StoppedLeading` reached process `p`'s program.
    pub(super) fn layer_stopped(&mut self, p: usize) {
        match &self.procs[p].layer {
            Layer::Spawn { .. } => self.tell_spawn_work(p),
            Layer::Run { .. } => {}
            Layer::Command { .. } => self.session_step(p, Input::Tick),
        }
    }

    /// After each poll of the elector: `lease-elect`'s loop looks again.
    pub(super) fn layer_after_poll(&mut self, p: usize) {
        if matches!(self.procs[p].layer, Layer::Command { .. }) {
            self.session_tick(p);
        }
    }

    /// The elector of process `p` ended.
    pub(super) fn layer_elector_ended(&mut self, p: usize) {
        if let Layer::Command { session, .. } = &self.procs[p].layer {
            if session.end().is_none() {
                self.session_step(p, Input::ElectorEnded);
            }
        }
    }

    /// Process `p` was killed: its supervisor reads end-of-file and kills
    /// COMMAND at once.
    pub(super) fn layer_killed(&mut self, p: usize) {
        match &mut self.procs[p].layer {
            Layer::Spawn { held, .. } => held.clear(),
            Layer::Run { running } => running.clear(),
            Layer::Command { cmd, .. } => {
                if let Some(c) = cmd {
                    c.exited = true;
                }
            }
        }
    }

    /// Process `p` is paused whole: its work is frozen with it (COMMAND
    /// runs on: it is a process of its own, held to its budget by its
    /// supervisor's switch; without one, nothing holds it while
    /// `lease-elect` is paused, and it counts as frozen).
    pub(super) fn freeze_work(&mut self, p: usize) {
        let backstop = !matches!(self.mode(p), Mode::Command(c) if !c.backstop)
            && !self.command_supervisor_stopped(p);
        let frozen: Vec<usize> = self
            .check
            .running()
            .filter(|(_, piece)| piece.p == p && (!piece.command || !backstop))
            .map(|(i, _)| i)
            .collect();
        for i in frozen {
            self.check.pieces[i].frozen = true;
        }
    }

    /// Stop process `p` as its program would on SIGTERM: `Stopper::stop`,
    /// or SIGTERM to `lease-elect`.
    pub(super) fn stop(&mut self, p: usize) {
        let now = self.now();
        self.procs[p].stop_at = Some(now);
        if matches!(self.procs[p].layer, Layer::Command { .. }) {
            self.signal_lease_elect(p);
            if let Mode::Command(Command { again: Some(d), .. }) = self.mode(p) {
                let at = self.after(p, *d);
                self.at(at, Due::Again(p));
            }
        } else {
            self.stop_elector(p, true);
        }
        self.poll(p);
    }

    /// Tell process `p`'s elector to stop (`release`: as asked; else
    /// `stop_without_release`, as a panicking work does).
    pub(super) fn stop_elector(&mut self, p: usize, release: bool) {
        let now = self.now();
        let pr = &mut self.procs[p];
        if pr.stop_called.is_none() {
            pr.stop_called = Some((now, pr.paused_total));
            pr.led_at_stop = pr.in_term
                && pr
                    .term
                    .and_then(|t| self.check.terms.get(t))
                    .is_some_and(|t| t.term.is_current());
            let net = self.net.borrow();
            pr.store_at_stop = net
                .store
                .as_ref()
                .map(|s| (s.version, net.wrote_revision(p, s.version)));
        }
        // A panicking work stops without a release, also after a stop.
        self.procs[p].release_skipped |= !release;
        self.net.borrow_mut().procs[p].stopping = true;
        if let Some(d) = &self.procs[p].driven {
            if release {
                d.stopper.stop();
            } else {
                d.stopper.stop_without_release();
            }
        }
    }

    /// A `spawn()` program's work is told its term ended (by its event, or
    /// by `is_current`): it lets go `lag` later.
    pub(super) fn tell_spawn_work(&mut self, p: usize) {
        let now = self.now();
        let Layer::Spawn { lag, held } = &mut self.procs[p].layer else {
            return;
        };
        let lag = *lag;
        let mut told = Vec::new();
        for (term, piece, release_at) in held.iter_mut() {
            if release_at.is_none() && !term.is_current() {
                told.push(*piece);
                *release_at = Some(Duration::MAX);
            }
        }
        let at = self.after(p, lag).max(now);
        if let Layer::Spawn { held, .. } = &mut self.procs[p].layer {
            for (_, piece, release_at) in held.iter_mut() {
                if told.contains(piece) {
                    *release_at = Some(at);
                }
            }
        }
        for piece in told {
            self.at(at, Due::Work(piece));
        }
    }

    /// A `run()` work blocked in `wait_ended` wakes the moment its term
    /// ends, and returns `lag` later.
    pub(super) fn wake_waiting_work(&mut self, p: usize) {
        let now = self.now();
        let lag = match self.mode(p) {
            Mode::Run {
                work: Work::WaitEnded { lag },
                ..
            } => *lag,
            _ => return,
        };
        if self.procs[p].paused {
            return;
        }
        let at = self.after(p, lag).max(now);
        let Layer::Run { running } = &mut self.procs[p].layer else {
            return;
        };
        let mut woken = Vec::new();
        for rw in running.iter_mut() {
            if rw.returning.is_none() && !rw.term.is_current() {
                rw.returning = Some(at);
                woken.push(rw.piece);
            }
        }
        for piece in woken {
            self.at(at, Due::Work(piece));
        }
    }

    /// A piece of work's step falls due.
    pub(super) fn work_step(&mut self, piece: usize) {
        let now = self.now();
        let p = self.check.pieces[piece].p;
        if self.check.pieces[piece].end.is_some() || self.procs[p].killed {
            return;
        }
        if self.procs[p].paused && !self.check.pieces[piece].command {
            self.procs[p].deferred.push(piece);
            return;
        }
        match self.mode(p).clone() {
            Mode::Spawn { .. } => {
                self.tell_spawn_work(p);
                let Layer::Spawn { held, .. } = &mut self.procs[p].layer else {
                    return;
                };
                let Some(i) = held.iter().position(|(_, i, _)| *i == piece) else {
                    return;
                };
                match held[i].2 {
                    Some(at) if at <= now => {}
                    Some(_) => return,
                    None => {
                        // Still current: look again at its end.
                        let until = held[i].0.valid_until();
                        let at = self.procs[p].clock.true_time_of(until);
                        self.at(at.max(now + Duration::from_micros(1)), Due::Work(piece));
                        return;
                    }
                }
                // The work drops its `Term`: the hold ends.
                held.remove(i);
                self.end_piece(piece, now);
                self.poll(p);
                self.maybe_exit(p);
            }
            Mode::Run { work, .. } => self.run_step(p, piece, work),
            Mode::Command(_) => {}
        }
    }

    /// One step of a `run()` work thread.
    fn run_step(&mut self, p: usize, piece: usize, work: Work) {
        let now = self.now();
        let clock = self.procs[p].clock.clone();
        let step_end =
            |d: Duration| clock.true_time_of(crate::clock::add_saturating(clock.now(), d));
        let Layer::Run { running } = &mut self.procs[p].layer else {
            return;
        };
        let Some(rw) = running.iter_mut().find(|rw| rw.piece == piece) else {
            return;
        };
        let current = rw.term.is_current();
        let next = match work {
            Work::Steps { step, budgeted } => {
                (current && (!budgeted || rw.term.time_to_stop() > step)).then(|| step_end(step))
            }
            Work::Panics { step, after, abort } => {
                if clock.now().saturating_duration_since(rw.started) >= after {
                    self.panic(p, piece, abort);
                    return;
                }
                current.then(|| step_end(step))
            }
            Work::Ignores(_) | Work::AtOnce => None,
            Work::WaitEnded { lag } => match rw.returning {
                Some(at) if now >= at => None,
                Some(at) => Some(at),
                None if current => {
                    let until = rw.term.valid_until();
                    Some(
                        clock
                            .true_time_of(until)
                            .max(now + Duration::from_micros(1)),
                    )
                }
                None => {
                    let at = step_end(lag);
                    rw.returning = Some(at);
                    Some(at)
                }
            },
        };
        match next {
            Some(at) => self.at(at.max(now), Due::Work(piece)),
            None => self.work_returned(p, piece),
        }
    }

    /// A `run()` work thread returned: its hold ends, and (as `run()`
    /// does) a work that returned while its term was current has done its
    /// job, and the elector stops.
    fn work_returned(&mut self, p: usize, piece: usize) {
        let now = self.now();
        let Layer::Run { running } = &mut self.procs[p].layer else {
            return;
        };
        let Some(i) = running.iter().position(|rw| rw.piece == piece) else {
            return;
        };
        let rw = running.remove(i);
        let current = rw.term.is_current();
        drop(rw);
        self.end_piece(piece, now);
        if current && self.procs[p].stop_called.is_none() {
            self.log(|| format!("p{p}: its work returned while leading: stop"));
            if self.procs[p].stop_at.is_none() {
                self.procs[p].stop_at = Some(now);
            }
            self.stop_elector(p, true);
        }
        self.poll(p);
        self.maybe_exit(p);
    }

    /// The work panicked: with `panic = "abort"` the process dies; else
    /// `run()` stops the elector without a release and the process ends
    /// with the panic once the elector has ended.
    fn panic(&mut self, p: usize, piece: usize, abort: bool) {
        let now = self.now();
        self.log(|| {
            format!(
                "p{p}: its work panics ({})",
                if abort { "abort" } else { "unwind" }
            )
        });
        if abort {
            self.kill(p);
            self.procs[p].restart_scheduled = true;
            let at = now + self.plan.restart_delay;
            let slot = self.procs[p].slot;
            self.at(at, Due::Start(slot));
            return;
        }
        if let Layer::Run { running } = &mut self.procs[p].layer {
            running.retain(|rw| rw.piece != piece);
        }
        self.end_piece(piece, now);
        self.stop_elector(p, false);
        self.poll(p);
        self.maybe_exit(p);
    }

    /// `lease-elect`'s loop looks at its session (no message: a tick, or
    /// the exit of COMMAND not yet told).
    pub(super) fn session_tick(&mut self, p: usize) {
        let exited = match &self.procs[p].layer {
            Layer::Command { cmd: Some(c), .. } => c.exited && !c.reported && !c.supervisor_stopped,
            _ => false,
        };
        let input = if exited {
            let mut status = Some(0);
            if let Layer::Command { cmd: Some(c), .. } = &mut self.procs[p].layer {
                c.reported = true;
                // A killed supervisor reports no status (end-of-file).
                status = (!c.supervisor_killed).then_some(0);
            }
            Input::Exited(status)
        } else {
            Input::Tick
        };
        self.session_step(p, input);
    }

    pub(super) fn session_wake(&mut self, p: usize, wake: u64) {
        if matches!(&self.procs[p].layer, Layer::Command { wake: w, .. } if *w == wake) {
            self.session_tick(p);
        }
    }

    /// Feed `input` to process `p`'s session (its main loop, which stands
    /// still while `lease-elect` is paused), and carry out what it says.
    pub(super) fn session_step(&mut self, p: usize, input: Input) {
        let pr = &self.procs[p];
        if pr.paused || pr.killed || pr.exited {
            return;
        }
        let now_p = pr.clock.now();
        let Layer::Command { session, .. } = &mut self.procs[p].layer else {
            return;
        };
        if session.end().is_some() {
            return;
        }
        let told_exit = matches!(input, Input::Exited(_));
        let actions = session.step(now_p, input);
        // (The term as the session saw it: a session that ends stops the
        // elector, which ends the term.)
        let current = self.command_term_current(p);
        for action in actions {
            self.act(p, action);
        }
        self.session_stepped(p, now_p);
        if told_exit {
            self.owed_exit_noticed(p, current);
        }
        self.owed_not_lost_while_current(p, current);
        self.owed_no_idle_pause(p);
    }

    /// After a step of process `p`'s session (at `now_p`, its clock): an
    /// ended session stops the elector (`handle.stop()`), a running one
    /// is looked at again when it asked.
    fn session_stepped(&mut self, p: usize, now_p: std::time::Instant) {
        let Layer::Command {
            session,
            wake,
            stopped,
            ..
        } = &mut self.procs[p].layer
        else {
            return;
        };
        if let Some(end) = session.end() {
            if !*stopped {
                *stopped = true;
                let end = end.clone();
                self.log(|| format!("p{p}: lease-elect's session ends: {end:?}; handle.stop()"));
                self.stop_elector(p, true);
                self.at(self.now(), Due::Poll(p));
            }
            return;
        }
        if let Some(d) = session.wake_in(now_p) {
            *wake += 1;
            let w = *wake;
            let at = self.procs[p]
                .clock
                .true_time_of(crate::clock::add_saturating(now_p, d));
            self.at(at.max(self.now()), Due::Session(p, w));
        }
    }

    /// Carry out one of the session's actions on the simulated COMMAND and
    /// supervisor.
    fn act(&mut self, p: usize, action: Action) {
        let now = self.now();
        let command = match self.mode(p) {
            Mode::Command(c) => c.clone(),
            _ => return,
        };
        // A stopped supervisor passes no signal on (but lease-elect's own
        // kill of everything below reaches COMMAND).
        let passed = !self.command_supervisor_stopped(p);
        match action {
            Action::Start { term, kill_after } => {
                let piece = self.start_piece(p, &term, true, Duration::ZERO, true);
                // The supervisor runs on the process's machine: its clock.
                let until = term.valid_until().saturating_duration_since(self.base);
                let exit_at = command.exits_after.map(|d| self.after(p, d));
                if let Layer::Command { cmd, .. } = &mut self.procs[p].layer {
                    *cmd = Some(Cmd {
                        piece,
                        dead_man: DeadMan::new(until, kill_after),
                        exit_at,
                        exited: false,
                        reported: false,
                        signalled_at: None,
                        kill_ordered_at: None,
                        again_at: None,
                        supervisor_killed: false,
                        supervisor_stopped: false,
                    });
                }
                if let Some(d) = command.supervisor_stopped {
                    let at = self.after(p, d);
                    self.at(at, Due::SupervisorStopped(p, piece));
                }
                if let Some(d) = command.supervisor_killed {
                    let at = self.after(p, d);
                    self.at(at, Due::SupervisorKilled(p, piece));
                }
                if let Some(at) = exit_at {
                    self.at(at, Due::CommandExit(p));
                }
                self.at(now, Due::DeadMan(p));
            }
            Action::Signal(Signal::Kill) => {
                self.owed_signal(p, Signal::Kill, "lease-elect");
                if passed {
                    self.command_dies(p);
                }
            }
            Action::KillBelow => {
                self.owed_kill_below(p);
                self.command_dies(p);
            }
            Action::Signal(sig) => {
                self.owed_signal(p, sig, "lease-elect");
                if let Some(lag) = command.on_term.filter(|_| passed) {
                    let at = self.after(p, lag);
                    self.command_exits_by(p, at);
                }
            }
            Action::Relay(until) => {
                let at = until.saturating_duration_since(self.base);
                if let Layer::Command { cmd: Some(c), .. } = &mut self.procs[p].layer {
                    c.dead_man.until = at;
                }
                self.at(now, Due::DeadMan(p));
            }
            Action::Log(_, line) => self.log(|| format!("p{p} lease-elect: {line}")),
        }
    }

    /// COMMAND will exit by `at` (after a SIGTERM).
    fn command_exits_by(&mut self, p: usize, at: Duration) {
        if let Layer::Command { cmd: Some(c), .. } = &mut self.procs[p].layer {
            if !c.exited && c.exit_at.is_none_or(|t| at < t) {
                c.exit_at = Some(at);
                self.at(at, Due::CommandExit(p));
            }
        }
    }

    /// SIGKILL: COMMAND is gone now; its supervisor reports it.
    pub(super) fn command_dies(&mut self, p: usize) {
        let now = self.now();
        let piece = match &mut self.procs[p].layer {
            Layer::Command { cmd: Some(c), .. } if !c.exited => {
                c.exited = true;
                Some(c.piece)
            }
            _ => None,
        };
        if let Some(piece) = piece {
            self.end_piece(piece, now);
            self.at(now, Due::CommandExit(p));
        }
    }

    /// COMMAND's exit falls due (or was reported): the supervisor tells
    /// `lease-elect`.
    pub(super) fn command_exit(&mut self, p: usize) {
        let now = self.now();
        let ending = match &mut self.procs[p].layer {
            Layer::Command { cmd: Some(c), .. } => {
                if !c.exited && c.exit_at.is_some_and(|t| t <= now) {
                    c.exited = true;
                    Some(c.piece)
                } else {
                    None
                }
            }
            _ => return,
        };
        if let Some(piece) = ending {
            self.end_piece(piece, now);
        }
        self.session_tick(p);
        self.maybe_exit(p);
    }

    /// The supervisor's dead-man switch (it runs whatever `lease-elect`
    /// is doing).
    pub(super) fn dead_man(&mut self, p: usize) {
        let now = self.now();
        let on_term = match self.mode(p) {
            Mode::Command(c) if c.backstop => c.on_term,
            _ => return,
        };
        let clock = self.procs[p].clock.clone();
        let local = clock.now().saturating_duration_since(self.base);
        let (send, next) = match &mut self.procs[p].layer {
            Layer::Command { cmd: Some(c), .. } if !c.exited && !c.supervisor_stopped => {
                c.dead_man.enforce(local)
            }
            _ => return,
        };
        match send {
            Some(Signal::Kill) => {
                self.log(|| format!("p{p}'s supervisor: the term ended, SIGKILL"));
                self.owed_signal(p, Signal::Kill, "its supervisor");
                self.command_dies(p);
            }
            Some(sig) => {
                self.log(|| format!("p{p}'s supervisor: the term ended, SIGTERM"));
                self.owed_signal(p, sig, "its supervisor");
                if let Some(lag) = on_term {
                    let at = self.after(p, lag);
                    self.command_exits_by(p, at);
                }
            }
            None => {}
        }
        if let Some(at) = next {
            let at = clock.true_time_of(self.base + at);
            self.at(at.max(now), Due::DeadMan(p));
        }
    }
}
