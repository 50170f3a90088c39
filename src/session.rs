//! When COMMAND may run: `lease-elect`'s decisions (start COMMAND, signal
//! it, give it its grace, kill it, and the supervisor's dead-man switch),
//! as logic with no process in it, so that the tool and the seeded
//! simulation run the same code. The tool (`src/bin/lease-elect/run.rs`)
//! carries the actions out on real processes, the simulation
//! (`testing::sim`) on simulated ones.
//!
//! # The rules
//!
//! COMMAND starts when a term starts and this candidate leads. Its term
//! ends for it in one of three ways:
//!
//! - **Taken over**: another writer took, freed or deleted the Lease
//!   ([`Term::taken_over`], or the elector saw another holder). Another
//!   candidate may run COMMAND already: SIGKILL at once, whatever
//!   `lease-elect` is doing (running COMMAND, in its grace, pausing
//!   before a restart).
//! - **Run out** (no renew within the renew deadline): SIGTERM, then
//!   SIGKILL after `--grace`, but never later than one and a half margins
//!   ([`stop_margin`]) before the lease could expire for anyone else: the
//!   supervisor has half a margin to report COMMAND's end, and if it does
//!   not, `lease-elect` kills it and everything below itself, so that
//!   COMMAND has ended a margin before the lease could expire.
//! - **Stopped** (SIGTERM or SIGINT to `lease-elect`, the Lease still
//!   ours): the signal is passed on, then SIGKILL after `--grace` or at
//!   that same bound; a second signal means SIGKILL. The elector keeps
//!   renewing meanwhile, so `--grace` may be long; the lease is released
//!   only once COMMAND has ended.
//!
//! The supervisor ([`DeadMan`]) holds the term's end where COMMAND runs,
//! as `lease-elect` relays it after every renew: SIGTERM a moment after
//! the end, SIGKILL `kill_after` after it, whatever state `lease-elect`
//! is in.

use std::fmt;
use std::time::{Duration, Instant};

use crate::clock::add_saturating;
use crate::elector::{Probe, Term};

pub use crate::elector::stop_margin;

/// A signal for COMMAND's process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM.
    Term,
    /// SIGINT.
    Int,
    /// SIGKILL.
    Kill,
}

impl Signal {
    /// The name the supervisor's protocol uses.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Term => "TERM",
            Signal::Int => "INT",
            Signal::Kill => "KILL",
        }
    }

    /// The signal named `name` in the protocol.
    pub fn from_name(name: &str) -> Option<Signal> {
        [Signal::Term, Signal::Int, Signal::Kill]
            .into_iter()
            .find(|s| s.name() == name)
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SIG{}", self.name())
    }
}

/// The timings and flags a session runs with.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// `--grace`: from SIGTERM to SIGKILL on an orderly end.
    pub grace: Duration,
    /// `--restart`: start COMMAND again when it exits while leading.
    pub restart: bool,
    /// `--acquire-timeout` was given: an elector that ends before leading
    /// gave up.
    pub acquire_timeout: bool,
    /// The election's lease duration and renew deadline.
    pub lease_duration: Duration,
    /// See `lease_duration`.
    pub renew_deadline: Duration,
}

/// What the session is told.
#[derive(Debug)]
pub enum Input {
    /// `StartedLeading`, with its term.
    Started(Term),
    /// SIGTERM or SIGINT reached `lease-elect`.
    Signal(Signal),
    /// COMMAND's supervisor exited: with COMMAND's status, or `None` when
    /// the supervisor itself was killed (COMMAND may still run).
    Exited(Option<u8>),
    /// The elector ended (its event channel closed).
    ElectorEnded,
    /// Time passed, or an event the session only looks at the term for.
    Tick,
}

/// What the driver must do, in order.
#[derive(Debug)]
pub enum Action {
    /// Start COMMAND under a supervisor, with the term's token in its
    /// environment; the supervisor ends it by itself `kill_after` past the
    /// term's end ([`Term::valid_until`]) unless told a later end.
    Start {
        /// The term COMMAND runs in.
        term: Term,
        /// From the term's end to SIGKILL, as the supervisor enforces it.
        kill_after: Duration,
    },
    /// Send this signal to COMMAND's process group.
    Signal(Signal),
    /// Tell the supervisor the term's new end (a renew moved it).
    Relay(Instant),
    /// The supervisor has not reported COMMAND's end in time after SIGKILL
    /// was ordered: kill it and every process below `lease-elect`.
    KillBelow,
    /// A line for the log, after the actions before it.
    Log(log::Level, String),
}

/// How a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// SIGTERM or SIGINT, and COMMAND (if it ran) has ended.
    Stopped(String),
    /// COMMAND exited on its own (without `--restart`) with this status.
    CommandExited(u8),
    /// Leadership was lost, and COMMAND has ended.
    Lost,
    /// The elector ended before leading, unexpectedly.
    ElectorEnded,
    /// The supervisor died of a signal: COMMAND may still run.
    SupervisorKilled,
    /// `--acquire-timeout` passed without leading.
    GaveUp,
}

/// The first pause before `--restart` starts COMMAND again, the longest,
/// and how long a run must last for the pause to start again from the first.
const RESTART_FIRST: Duration = Duration::from_secs(1);
const RESTART_MAX: Duration = Duration::from_secs(30);
const RESTART_RESET: Duration = Duration::from_secs(10);

/// How often a killed COMMAND is looked at besides its exit being told.
pub const KILLED_POLL: Duration = Duration::from_millis(100);

#[derive(Debug)]
enum State {
    /// Not leading yet.
    Waiting,
    /// COMMAND runs in `term`.
    Running {
        term: Term,
        started: Instant,
    },
    /// COMMAND exited with `--restart`: it starts again at `until`.
    Pausing {
        term: Term,
        until: Instant,
        pause: Duration,
    },
    /// COMMAND was sent its first signal; `end` once it has ended.
    Ending {
        term: Term,
        end: End,
        grace_end: Instant,
        killed_at: Option<Instant>,
    },
    Done(End),
}

/// One `lease-elect` run with COMMAND: its decisions, step by step.
#[derive(Debug)]
pub struct Session {
    config: SessionConfig,
    probe: Probe,
    state: State,
    margin: Duration,
    /// From a term's end to SIGKILL, as the supervisor enforces it: the
    /// grace, but never closer than `margin` and the supervisor's time to
    /// answer ([`Session::answer_within`]) to the lease's expiry.
    kill_after: Duration,
    /// The term's end the supervisor was last told.
    told: Option<Instant>,
    /// The next pause before a restart.
    pause: Duration,
}

impl Session {
    /// A session reading the elector through `probe`.
    pub fn new(config: SessionConfig, probe: Probe) -> Session {
        let (ld, rd) = (config.lease_duration, config.renew_deadline);
        let margin = stop_margin(ld, rd);
        let kill_after = config.grace.min(
            ld.saturating_sub(rd)
                .saturating_sub(margin)
                .saturating_sub(answer_within(margin)),
        );
        Session {
            config,
            probe,
            state: State::Waiting,
            margin,
            kill_after,
            told: None,
            pause: RESTART_FIRST,
        }
    }

    /// How the session ended, once it has.
    pub fn end(&self) -> Option<&End> {
        match &self.state {
            State::Done(end) => Some(end),
            _ => None,
        }
    }

    /// Whether COMMAND runs (or is being ended) now.
    pub fn command_running(&self) -> bool {
        matches!(self.state, State::Running { .. } | State::Ending { .. })
    }

    /// How long the driver may wait for the next input at most (`None`:
    /// until one comes), at `now` on the elector's clock.
    pub fn wake_in(&self, now: Instant) -> Option<Duration> {
        let tick = self.margin.max(Duration::from_millis(10));
        let to = |at: Instant| at.saturating_duration_since(now);
        match &self.state {
            State::Waiting | State::Done(_) => None,
            // Never past the end of the term: a wait begun before a freeze
            // ends the moment the process runs again if the term ended
            // meanwhile, and a renew that lands just before the end
            // reaches the supervisor at the end.
            State::Running { term, .. } => Some(to(term.valid_until()).min(tick)),
            State::Pausing { term, until, .. } => {
                Some(to(*until).min(to(term.valid_until())).min(tick))
            }
            State::Ending {
                term,
                grace_end,
                killed_at,
                ..
            } => Some(match killed_at {
                None => to((*grace_end).min(self.lease_deadline(now)))
                    .min(tick)
                    .min(to(term.valid_until()).max(KILLED_POLL)),
                Some(at) => to(add_saturating(*at, self.answer_within())).min(KILLED_POLL),
            }),
        }
    }

    /// Take `input` at `now` (the elector's clock); what to do, in order.
    pub fn step(&mut self, now: Instant, input: Input) -> Vec<Action> {
        let mut act = Vec::new();
        let state = std::mem::replace(&mut self.state, State::Waiting);
        self.state = match state {
            State::Waiting => self.waiting(now, input, &mut act),
            State::Running { term, started } => self.running(now, input, term, started, &mut act),
            State::Pausing { term, until, pause } => {
                self.pausing(now, input, term, until, pause, &mut act)
            }
            State::Ending {
                term,
                end,
                grace_end,
                killed_at,
            } => self.ending(now, input, term, end, grace_end, killed_at, &mut act),
            done @ State::Done(_) => done,
        };
        act
    }

    fn waiting(&mut self, now: Instant, input: Input, act: &mut Vec<Action>) -> State {
        match input {
            Input::Started(term) => self.start(now, term, act),
            Input::Signal(sig) => State::Done(End::Stopped(sig.to_string())),
            // Before leading, the elector ends by itself only when
            // --acquire-timeout passed (it never wrote the Lease).
            Input::ElectorEnded if self.config.acquire_timeout => State::Done(End::GaveUp),
            Input::ElectorEnded => State::Done(End::ElectorEnded),
            Input::Exited(_) | Input::Tick => State::Waiting,
        }
    }

    /// Start COMMAND in `term` (the term in progress, with `--restart`),
    /// if this candidate still leads.
    fn start(&mut self, now: Instant, term: Term, act: &mut Vec<Action>) -> State {
        let term = self.probe.term().unwrap_or(term);
        if !self.probe.is_leader() || !term.is_current() {
            return State::Done(End::Lost);
        }
        self.told = Some(term.valid_until());
        act.push(Action::Start {
            term: term.clone(),
            kill_after: self.kill_after,
        });
        act.push(Action::Log(
            log::Level::Info,
            format!("leading (term {}): started COMMAND", term.token()),
        ));
        State::Running { term, started: now }
    }

    fn running(
        &mut self,
        now: Instant,
        input: Input,
        term: Term,
        started: Instant,
        act: &mut Vec<Action>,
    ) -> State {
        self.relay(&term, act);
        match input {
            Input::Exited(status) => return self.exited(now, term, started, status, act),
            Input::Signal(sig) => {
                act.push(Action::Signal(sig));
                act.push(Action::Log(
                    log::Level::Info,
                    format!("{sig}: stopping COMMAND"),
                ));
                let grace_end = add_saturating(now, self.config.grace);
                let end = End::Stopped(sig.to_string());
                return self.ending(now, Input::Tick, term, end, grace_end, None, act);
            }
            _ => {}
        }
        if self.taken(&term) {
            // Act first: the log line after.
            act.push(Action::Signal(Signal::Kill));
            act.push(Action::Log(
                log::Level::Warn,
                format!(
                    "leadership lost ({}): killed COMMAND at once (SIGKILL, no --grace: the new holder may be running it)",
                    self.loss_reason(&term, now)
                ),
            ));
            return State::Ending {
                term,
                end: End::Lost,
                grace_end: now,
                killed_at: Some(now),
            };
        }
        if !term.is_current() || !self.probe.is_leader() || matches!(input, Input::ElectorEnded) {
            act.push(Action::Signal(Signal::Term));
            act.push(Action::Log(
                log::Level::Warn,
                format!(
                    "leadership lost ({}): stopping COMMAND",
                    self.loss_reason(&term, now)
                ),
            ));
            let grace_end = add_saturating(now, self.config.grace);
            return self.ending(now, Input::Tick, term, End::Lost, grace_end, None, act);
        }
        State::Running { term, started }
    }

    /// COMMAND's supervisor exited while COMMAND ran in `term`.
    fn exited(
        &mut self,
        now: Instant,
        term: Term,
        started: Instant,
        status: Option<u8>,
        act: &mut Vec<Action>,
    ) -> State {
        let Some(code) = status else {
            return State::Done(End::SupervisorKilled);
        };
        if !term.is_current() {
            // The supervisor ended COMMAND at the term's end: this
            // process did not run then (stopped, frozen, stuck).
            act.push(Action::Log(
                log::Level::Warn,
                format!(
                    "leadership lost ({}): COMMAND's supervisor ended COMMAND at the end of the term ({})",
                    self.loss_reason(&term, now),
                    described(code)
                ),
            ));
            return State::Done(End::Lost);
        }
        if !self.config.restart {
            // A failure is news at the default level; a success is not (a
            // cron job would mail it every run).
            let level = if code == 0 {
                log::Level::Info
            } else {
                log::Level::Warn
            };
            act.push(Action::Log(
                level,
                format!(
                    "COMMAND exited with {}; releasing the lease",
                    described(code)
                ),
            ));
            return State::Done(End::CommandExited(code));
        }
        if now.saturating_duration_since(started) >= RESTART_RESET {
            self.pause = RESTART_FIRST;
        }
        let pause = self.pause;
        act.push(Action::Log(
            log::Level::Warn,
            format!(
                "COMMAND exited with {}; starting it again in {}",
                described(code),
                humantime::format_duration(pause)
            ),
        ));
        State::Pausing {
            term,
            until: add_saturating(now, pause),
            pause,
        }
    }

    fn pausing(
        &mut self,
        now: Instant,
        input: Input,
        term: Term,
        until: Instant,
        pause: Duration,
        act: &mut Vec<Action>,
    ) -> State {
        if let Input::Signal(sig) = input {
            return State::Done(End::Stopped(sig.to_string()));
        }
        if !term.is_current() || !self.probe.is_leader() || matches!(input, Input::ElectorEnded) {
            return State::Done(End::Lost);
        }
        if now < until {
            return State::Pausing { term, until, pause };
        }
        self.pause = (pause * 2).min(RESTART_MAX);
        self.start(now, term, act)
    }

    /// COMMAND was sent its first signal: SIGKILL after `--grace` or at
    /// the lease deadline, whichever is first, at once if the Lease is
    /// seen taken over, or at a second SIGTERM/SIGINT; `end` once COMMAND
    /// has ended (or, if the supervisor does not report it, once
    /// everything below `lease-elect` was killed). Renews go on being
    /// relayed (a stop leaves the term running until COMMAND has ended).
    #[allow(clippy::too_many_arguments)]
    fn ending(
        &mut self,
        now: Instant,
        input: Input,
        term: Term,
        end: End,
        grace_end: Instant,
        mut killed_at: Option<Instant>,
        act: &mut Vec<Action>,
    ) -> State {
        self.relay(&term, act);
        match input {
            Input::Exited(Some(code)) => {
                act.push(Action::Log(
                    log::Level::Info,
                    format!("COMMAND has ended (status {code})"),
                ));
                return State::Done(end);
            }
            Input::Exited(None) => return State::Done(End::SupervisorKilled),
            Input::Signal(again) if killed_at.is_none() => {
                act.push(Action::Signal(Signal::Kill));
                killed_at = Some(now);
                act.push(Action::Log(
                    log::Level::Warn,
                    format!("{again} again: SIGKILL"),
                ));
            }
            _ => {}
        }
        if killed_at.is_none() && self.taken(&term) {
            act.push(Action::Signal(Signal::Kill));
            killed_at = Some(now);
            act.push(Action::Log(
                log::Level::Warn,
                format!(
                    "the lease was taken over ({}) while COMMAND was being stopped: SIGKILL at once",
                    self.loss_reason(&term, now)
                ),
            ));
        }
        let lease_end = self.lease_deadline(now);
        if killed_at.is_none() && now >= grace_end.min(lease_end) {
            act.push(Action::Signal(Signal::Kill));
            killed_at = Some(now);
            act.push(Action::Log(
                log::Level::Warn,
                if lease_end < grace_end {
                    "COMMAND still ran and the lease could soon expire: SIGKILL".to_string()
                } else {
                    format!(
                        "COMMAND still ran after --grace {}: SIGKILL",
                        humantime::format_duration(self.config.grace)
                    )
                },
            ));
        }
        if let Some(at) = killed_at {
            if now >= add_saturating(at, self.answer_within()) {
                act.push(Action::KillBelow);
                act.push(Action::Log(
                    log::Level::Error,
                    format!(
                        "COMMAND's supervisor had not reported COMMAND's end {} after SIGKILL was ordered (stopped or hung?): killed it and every process below it",
                        humantime::format_duration(self.answer_within())
                    ),
                ));
                return State::Done(end);
            }
        }
        State::Ending {
            term,
            end,
            grace_end,
            killed_at,
        }
    }

    /// Tell the supervisor `term`'s end if it moved since it was last told.
    fn relay(&mut self, term: &Term, act: &mut Vec<Action>) {
        let until = term.valid_until();
        if self.told != Some(until) {
            self.told = Some(until);
            act.push(Action::Relay(until));
        }
    }

    /// The term was taken from us: another writer took, freed or deleted
    /// the Lease (or the elector saw another holder after the term ran
    /// out). Nobody's grace is owed then.
    fn taken(&self, term: &Term) -> bool {
        term.taken_over()
            || (!term.is_current() && self.probe.leader().as_deref() != Some(self.probe.identity()))
    }

    /// SIGKILL COMMAND by then at the latest: `margin` and the
    /// supervisor's time to answer before the lease could expire for
    /// anyone else, so that COMMAND has ended `margin` before it even
    /// when everything below `lease-elect` must be killed.
    fn lease_deadline(&self, now: Instant) -> Instant {
        match self.probe.last_renew() {
            Some(at) => add_saturating(at, self.config.lease_duration)
                .checked_sub(self.margin + self.answer_within())
                .unwrap_or(at),
            None => now,
        }
    }

    /// See [`answer_within`].
    fn answer_within(&self) -> Duration {
        answer_within(self.margin)
    }

    /// Why the lease was lost, for the log: the elector's own reason, else
    /// the last failed request, else the deadline of `term`.
    fn loss_reason(&self, term: &Term, now: Instant) -> String {
        let status = self.probe.status();
        let late = now.saturating_duration_since(term.valid_until());
        match (status.last_loss, status.last_error) {
            (Some(why), _) => why,
            (None, Some(e)) => format!(
                "no renew within the renew deadline; last error: {}",
                e.message
            ),
            // Nothing failed: this process did not run (frozen, suspended).
            (None, None) if late > Duration::from_millis(100) => format!(
                "no renew within the renew deadline: this process did not run until {} past it",
                humantime::format_duration(Duration::from_millis(
                    u64::try_from(late.as_millis()).unwrap_or(u64::MAX)
                ))
            ),
            (None, None) => "no renew within the renew deadline".to_string(),
        }
    }
}

/// How long the supervisor has to report COMMAND's end once SIGKILL was
/// ordered: half the `margin`. The SIGKILL comes that much before the
/// margin, so that COMMAND has ended a margin before the lease could
/// expire even when `lease-elect` must kill everything below itself.
fn answer_within(margin: Duration) -> Duration {
    margin / 2
}

/// COMMAND's exit status said in words: 128 + S is how a shell (and the
/// supervisor) reports a kill by signal S.
pub fn described(code: u8) -> String {
    const NAMES: [(u8, &str); 6] = [
        (1, "SIGHUP"),
        (2, "SIGINT"),
        (6, "SIGABRT"),
        (9, "SIGKILL"),
        (11, "SIGSEGV"),
        (15, "SIGTERM"),
    ];
    match code.checked_sub(128).filter(|s| (1..=64).contains(s)) {
        Some(sig) => match NAMES.iter().find(|(n, _)| *n == sig) {
            Some((_, name)) => format!("status {code} (killed by {name})"),
            None => format!("status {code} (killed by signal {sig})"),
        },
        None => format!("status {code}"),
    }
}

/// The supervisor's dead-man switch: the term's end as it holds it (on
/// its clock, as time since some origin), and what it did about it.
/// SIGTERM [`END_SLACK`] after the end (time for a renew that landed just
/// before the end to be relayed), SIGKILL `kill_after` after it, unless
/// told a later end first.
#[derive(Debug, Clone)]
pub struct DeadMan {
    /// The term's end.
    pub until: Duration,
    /// From the end to SIGKILL.
    pub kill_after: Duration,
    /// SIGTERM or SIGINT was passed on (by order, or at the term's end).
    pub asked: bool,
    /// SIGTERM was passed on at the term's end, unordered.
    pub ended: bool,
    /// SIGKILL was sent.
    pub killed: bool,
}

/// How long after the term's end the supervisor passes SIGTERM on by
/// itself (at most half of `kill_after`).
pub const END_SLACK: Duration = Duration::from_millis(100);

impl DeadMan {
    /// A switch set to `until`, killing `kill_after` past it.
    pub fn new(until: Duration, kill_after: Duration) -> DeadMan {
        DeadMan {
            until,
            kill_after,
            asked: false,
            ended: false,
            killed: false,
        }
    }

    fn term_at(&self) -> Duration {
        self.until
            .saturating_add(END_SLACK.min(self.kill_after / 2))
    }

    fn kill_at(&self) -> Duration {
        self.until.saturating_add(self.kill_after)
    }

    /// What to send at `now`, if anything, and when to look again.
    pub fn enforce(&mut self, now: Duration) -> (Option<Signal>, Option<Duration>) {
        if self.killed {
            return (None, None);
        }
        if now >= self.kill_at() {
            self.killed = true;
            return (Some(Signal::Kill), None);
        }
        let mut send = None;
        if !self.asked && now >= self.term_at() {
            self.asked = true;
            self.ended = true;
            send = Some(Signal::Term);
        }
        let next = if self.asked {
            self.kill_at()
        } else {
            self.term_at()
        };
        (send, Some(next))
    }

    /// `lease-elect` ordered `sig`: what to pass on to COMMAND. A SIGTERM
    /// after the one sent at the term's end is not passed on (a second
    /// one means "now" to many programs).
    pub fn ordered(&mut self, sig: Signal) -> Option<Signal> {
        match sig {
            Signal::Kill => {
                self.killed = true;
                Some(Signal::Kill)
            }
            Signal::Term if self.ended => None,
            sig => {
                self.asked = true;
                Some(sig)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};
    use crate::elector::{leading, ElectorConfig};

    /// A session of a candidate leading now, at OpenShift's 137 s / 107 s
    /// (a term that outlasts the restarts below).
    fn session(clock: &ManualClock, restart: bool, acquire_timeout: bool) -> (Session, Term) {
        let config = ElectorConfig {
            lease_duration: Duration::from_secs(137),
            renew_deadline: Duration::from_secs(107),
            retry_period: Duration::from_secs(26),
            ..ElectorConfig::default()
        };
        let (probe, term) = leading(clock, config.clone());
        let session = Session::new(
            SessionConfig {
                grace: Duration::from_secs(10),
                restart,
                acquire_timeout,
                lease_duration: config.lease_duration,
                renew_deadline: config.renew_deadline,
            },
            probe,
        );
        (session, term)
    }

    fn started(act: &[Action]) -> bool {
        act.iter().any(|a| matches!(a, Action::Start { .. }))
    }

    /// The pause `--restart` announces in `act`'s log line.
    fn pause_told(act: &[Action]) -> Option<String> {
        act.iter().find_map(|a| match a {
            Action::Log(_, line) => line
                .split_once("starting it again in ")
                .map(|(_, pause)| pause.to_string()),
            _ => None,
        })
    }

    /// After a term's end COMMAND gets `--grace` up to `leaseDuration −
    /// renewDeadline − 1.5 × margin`, as docs/lease-elect.md says: 3.5 s
    /// at 15 s / 10 s, 28.5 s at 137 s / 107 s; a shorter grace as given.
    #[test]
    fn the_grace_after_a_terms_end_is_capped_a_margin_and_a_half_before_expiry() {
        let clock = ManualClock::new();
        for (ld, rd, grace, want) in [
            (15, 10, 60_000, 3_500),
            (137, 107, 60_000, 28_500),
            (137, 107, 10_000, 10_000),
        ] {
            let config = ElectorConfig {
                lease_duration: Duration::from_secs(ld),
                renew_deadline: Duration::from_secs(rd),
                ..ElectorConfig::default()
            };
            let (probe, term) = leading(&clock, config);
            let mut s = Session::new(
                SessionConfig {
                    grace: Duration::from_millis(grace),
                    restart: false,
                    acquire_timeout: false,
                    lease_duration: Duration::from_secs(ld),
                    renew_deadline: Duration::from_secs(rd),
                },
                probe,
            );
            let kill_after = s
                .step(clock.now(), Input::Started(term))
                .into_iter()
                .find_map(|a| match a {
                    Action::Start { kill_after, .. } => Some(kill_after),
                    _ => None,
                });
            assert_eq!(
                kill_after,
                Some(Duration::from_millis(want)),
                "{ld}s/{rd}s, grace {grace}ms"
            );
        }
    }

    /// An elector that ends before leading gave up only when
    /// `--acquire-timeout` was given (exit 75); otherwise it ended
    /// unexpectedly.
    #[test]
    fn an_elector_that_ends_before_leading_gave_up_only_with_acquire_timeout() {
        let clock = ManualClock::new();
        for (acquire_timeout, end) in [(true, End::GaveUp), (false, End::ElectorEnded)] {
            let (mut s, _term) = session(&clock, false, acquire_timeout);
            assert!(s.step(clock.now(), Input::ElectorEnded).is_empty());
            assert_eq!(s.end(), Some(&end), "acquire_timeout {acquire_timeout}");
        }
    }

    /// `--restart`: 1 s after the first exit, doubling while COMMAND keeps
    /// exiting within 10 s of its start, from 1 s again after a run that
    /// lasted 10 s; COMMAND starts again only once the pause is over.
    #[test]
    fn restart_pauses_double_while_command_keeps_exiting_and_reset_after_a_long_run() {
        let clock = ManualClock::new();
        let (mut s, term) = session(&clock, true, false);
        assert!(started(&s.step(clock.now(), Input::Started(term))));
        let mut told = Vec::new();
        for ran in [1, 1, 1, 10, 1] {
            clock.advance(Duration::from_secs(ran));
            let act = s.step(clock.now(), Input::Exited(Some(1)));
            let pause = pause_told(&act).expect("a restart is announced");
            let secs = humantime::parse_duration(&pause)
                .expect("a duration")
                .as_secs();
            clock.advance(Duration::from_secs(secs).saturating_sub(Duration::from_millis(1)));
            assert!(
                !started(&s.step(clock.now(), Input::Tick)),
                "not before the pause"
            );
            clock.advance(Duration::from_millis(1));
            assert!(
                started(&s.step(clock.now(), Input::Tick)),
                "at the pause's end"
            );
            told.push(secs);
        }
        assert_eq!(told, [1, 2, 4, 1, 2]);
    }

    /// The signals `act` sends COMMAND, and whether it kills everything
    /// below `lease-elect`.
    fn sent(act: &[Action]) -> (Vec<Signal>, bool) {
        let signals = act
            .iter()
            .filter_map(|a| match a {
                Action::Signal(sig) => Some(*sig),
                _ => None,
            })
            .collect();
        (signals, act.iter().any(|a| matches!(a, Action::KillBelow)))
    }

    /// A stop's SIGTERM, a second signal's SIGKILL, and then neither a
    /// third signal nor anything else sends more or moves the time the
    /// supervisor has to report COMMAND's end: half a margin after the
    /// first SIGKILL, everything below `lease-elect` is killed.
    #[test]
    fn a_signal_after_sigkill_sends_nothing_more_and_keeps_the_supervisors_time() {
        let clock = ManualClock::new();
        let (mut s, term) = session(&clock, false, false);
        assert!(started(&s.step(clock.now(), Input::Started(term))));
        let stop = s.step(clock.now(), Input::Signal(Signal::Term));
        assert_eq!(sent(&stop), (vec![Signal::Term], false));
        clock.advance(Duration::from_secs(1));
        let again = s.step(clock.now(), Input::Signal(Signal::Term));
        assert_eq!(sent(&again), (vec![Signal::Kill], false));
        let answer = s.answer_within();
        clock.advance(answer / 2);
        let third = s.step(clock.now(), Input::Signal(Signal::Int));
        assert_eq!(sent(&third), (vec![], false), "SIGKILL was sent already");
        clock.advance(answer - answer / 2 - Duration::from_millis(1));
        assert_eq!(sent(&s.step(clock.now(), Input::Tick)), (vec![], false));
        assert_eq!(s.end(), None, "the supervisor still has time to answer");
        clock.advance(Duration::from_millis(1));
        assert_eq!(sent(&s.step(clock.now(), Input::Tick)), (vec![], true));
        assert!(matches!(s.end(), Some(End::Stopped(_))), "{:?}", s.end());
    }

    /// An ordered SIGTERM is passed on, but not after the switch sent its
    /// own at the term's end (a second one means "now" to many
    /// programs); SIGINT and SIGKILL always are.
    #[test]
    fn an_ordered_sigterm_is_passed_on_unless_the_switch_already_sent_one() {
        let (until, kill_after) = (Duration::from_secs(10), Duration::from_secs(5));
        let mut d = DeadMan::new(until, kill_after);
        assert_eq!(d.ordered(Signal::Term), Some(Signal::Term));
        let mut d = DeadMan::new(until, kill_after);
        assert_eq!(d.enforce(until + END_SLACK).0, Some(Signal::Term));
        assert_eq!(d.ordered(Signal::Term), None);
        assert_eq!(d.ordered(Signal::Int), Some(Signal::Int));
        assert_eq!(d.ordered(Signal::Kill), Some(Signal::Kill));
        assert!(d.killed);
    }

    /// The supervisor is ordered by name over its pipe: every signal
    /// goes there and back, and nothing else is taken for one.
    #[test]
    fn a_signal_travels_to_the_supervisor_by_its_name_and_back() {
        for (sig, name) in [
            (Signal::Term, "TERM"),
            (Signal::Int, "INT"),
            (Signal::Kill, "KILL"),
        ] {
            assert_eq!(sig.name(), name);
            assert_eq!(Signal::from_name(name), Some(sig));
            assert_eq!(sig.to_string(), format!("SIG{name}"));
        }
        for other in ["", "HUP", "SIGTERM", "term", "xyzzy"] {
            assert_eq!(Signal::from_name(other), None, "{other:?}");
        }
    }

    #[test]
    fn the_dead_man_switch_terms_after_the_slack_and_kills_after_kill_after() {
        let s = Duration::from_secs;
        let mut d = DeadMan::new(s(10), s(4));
        assert_eq!(d.enforce(s(9)), (None, Some(s(10) + END_SLACK)));
        assert_eq!(
            d.enforce(s(10) + END_SLACK),
            (Some(Signal::Term), Some(s(14)))
        );
        assert_eq!(d.ordered(Signal::Term), None, "once is enough");
        assert_eq!(d.enforce(s(13)), (None, Some(s(14))));
        assert_eq!(d.enforce(s(14)), (Some(Signal::Kill), None));
        assert_eq!(d.enforce(s(15)), (None, None));
    }

    #[test]
    fn a_later_end_moves_the_switch() {
        let s = Duration::from_secs;
        let mut d = DeadMan::new(s(10), s(4));
        d.until = s(20);
        assert_eq!(d.enforce(s(11)), (None, Some(s(20) + END_SLACK)));
        assert_eq!(d.ordered(Signal::Int), Some(Signal::Int));
        assert_eq!(d.enforce(s(21)), (None, Some(s(24))), "asked already");
        assert_eq!(d.ordered(Signal::Kill), Some(Signal::Kill));
        assert_eq!(d.enforce(s(30)), (None, None));
    }

    #[test]
    fn a_short_kill_after_halves_the_slack() {
        let ms = Duration::from_millis;
        let mut d = DeadMan::new(ms(1000), ms(100));
        assert_eq!(d.enforce(ms(1000)), (None, Some(ms(1050))));
    }
}
