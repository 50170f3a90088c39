//! A schedule drawn from its seed: the timings, the candidates, the
//! network's habits and the faults, each with its own probability per
//! schedule. Everything the world does that is not the elector's own
//! decision comes from here, or from a draw keyed by the seed.

use std::fmt;
use std::time::Duration;

use crate::random::SplitMix64;

/// The draws of one schedule.
#[derive(Debug)]
pub(super) struct Rng(SplitMix64);

impl Rng {
    pub(super) fn new(seed: u64, stream: u64) -> Rng {
        // Streams of one seed must not overlap: mix the stream in first.
        let mut mix = SplitMix64::new(seed ^ stream.wrapping_mul(0xd1b5_4a32_d192_ed03));
        Rng(SplitMix64::new(mix.next_u64()))
    }

    pub(super) fn chance(&mut self, p: f64) -> bool {
        self.0.unit() < p
    }

    pub(super) fn unit(&mut self) -> f64 {
        self.0.unit()
    }

    /// Uniform in `[lo, hi)` (`lo` when empty).
    pub(super) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.0.next_u64() % (hi - lo)
    }

    pub(super) fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.range(lo, hi))
    }

    /// A duration uniform in `[lo, hi)`.
    pub(super) fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        if hi <= lo {
            return lo;
        }
        lo + (hi - lo).mul_f64(self.unit())
    }

    pub(super) fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.range(0, items.len() as u64) as usize]
    }
}

/// The election's timings, as all candidates are configured.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timing {
    pub(super) lease: Duration,
    pub(super) renew: Duration,
    pub(super) retry: Duration,
}

impl Timing {
    /// client-go's per-request cap, as the elector computes it.
    pub(super) fn cap(&self) -> Duration {
        (self.renew / 2).max(Duration::from_secs(1))
    }

    /// The drift bound the docs state: clock rates within `±(LD − RD) /
    /// (LD + RD)` of true time keep a term's end (RD on the leader's
    /// clock) before any follower's takeover (LD on its own).
    pub(super) fn drift_bound(&self) -> f64 {
        let (ld, rd) = (self.lease.as_secs_f64(), self.renew.as_secs_f64());
        (ld - rd) / (ld + rd)
    }
}

/// One candidate's set-up.
#[derive(Debug, Clone)]
pub(super) struct Candidate {
    pub(super) identity: String,
    pub(super) watch: bool,
    pub(super) release_on_cancel: bool,
    pub(super) rejoin: bool,
    /// Its monotonic clock's rate, parts per million off true time.
    pub(super) rate_ppm: i64,
    /// Its wall clock's offset from true wall time, in ms.
    pub(super) wall_offset_ms: i64,
    /// When it starts; `None` for a latecomer, started only by a `Join`.
    pub(super) start: Option<Duration>,
    /// What the user runs around the elector.
    pub(super) mode: Mode,
    /// Its program's event thread lags this long behind the elector (it
    /// reads `StartedLeading` after a stop may have come).
    pub(super) reads_late: Option<Duration>,
}

/// What a candidate's program is: the layer a user runs around the
/// elector, whose pieces of work the checker judges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Mode {
    /// `spawn()` and a loop of one's own over the events: the work holds
    /// the received `Term`, and lets go `lag` after it was told the term
    /// ended (by `StoppedLeading`, or by `Term::is_current`).
    Spawn { lag: Duration },
    /// `LeaderElector::run` with its work threads.
    Run { work: Work, release_grace: Duration },
    /// `lease-elect` with COMMAND (the library's `session`), its
    /// supervisor and COMMAND as processes of their own.
    Command(Command),
}

/// The work a `run()` program does each term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Work {
    /// Steps of `step`, each begun only while `is_current()` (and, when
    /// `budgeted`, while `time_to_stop() > step`, as the README's loop).
    Steps { step: Duration, budgeted: bool },
    /// Runs `len`, never looking at its term.
    Ignores(Duration),
    /// Steps of `step`, then a panic at the first step boundary `after`
    /// its start (`abort`: the process dies with it, as under
    /// `panic = "abort"`).
    Panics {
        step: Duration,
        after: Duration,
        abort: bool,
    },
    /// Returns at once: its job is done.
    AtOnce,
    /// Blocks in `wait_ended`, then returns `lag` later.
    WaitEnded { lag: Duration },
}

/// `lease-elect`'s flags and COMMAND's habits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Command {
    pub(super) grace: Duration,
    pub(super) restart: bool,
    /// COMMAND exits by itself this long after it starts.
    pub(super) exits_after: Option<Duration>,
    /// How long after SIGTERM (or SIGINT) it exits; `None`: it ignores them.
    pub(super) on_term: Option<Duration>,
    /// The supervisor's own switch runs (SIGTERM at the term's end,
    /// SIGKILL `kill_after` later); off, as a supervisor starved of CPU,
    /// the session's own deadlines are all that stands.
    pub(super) backstop: bool,
    /// A stop of `lease-elect` is followed by a second SIGTERM this long
    /// after the first (an impatient operator): SIGKILL owed at once.
    pub(super) again: Option<Duration>,
    /// The supervisor is killed (the OOM killer) this long after COMMAND
    /// starts: `lease-elect` learns it from end-of-file, as no status.
    pub(super) supervisor_killed: Option<Duration>,
    /// The supervisor is stopped (SIGSTOP) this long after COMMAND
    /// starts: it passes no signal on, reports nothing and its switch
    /// stands; only `lease-elect` killing everything below it ends
    /// COMMAND.
    pub(super) supervisor_stopped: Option<Duration>,
}

/// What the candidates' lock is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LockKind {
    /// `LeaseLock`: updates carry the uid read (a Lease deleted since is
    /// a 409), versions are the server's.
    Lease,
    /// Updates without a uid: a `PUT` to a deleted Lease creates it again
    /// (kube-apiserver allows create-on-update for Leases).
    NoUid,
    /// A lock of the user's that reports no versions (`Lock::version`
    /// left at its default): expiry by the record alone, tokens from
    /// `leaseTransitions`.
    Unversioned,
}

/// How a cut-off candidate's requests fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cut {
    /// Connection refused at once.
    Refused,
    /// Packets dropped: no answer until the request's deadline.
    Silent,
}

/// What another writer does to the Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Write {
    Delete,
    /// `leaseTransitions` dropped (read as 0) or set lower.
    Transitions(i32),
    /// The holder rewritten (to a candidate's identity, or a stranger's),
    /// renewed now, as a tool taking the lease would.
    Holder(String),
    /// Holder emptied, as a release.
    Free,
}

/// What happens to a candidate's wall clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wall {
    /// Stands still from now.
    Freeze,
    /// Stepped by this many ms (back when negative).
    Step(i64),
    /// Jumps past the year 9999.
    FarFuture,
}

/// One fault of the schedule, from `at` (and until `until` where it lasts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Fault {
    Cut {
        who: usize,
        how: Cut,
        until: Duration,
    },
    /// The elector thread stalls (descheduled, a blocked logger) while
    /// the work runs on and reads its `Term`.
    Stall {
        who: usize,
        until: Duration,
    },
    /// The whole process stops (SIGSTOP, a VM pause) and resumes.
    Pause {
        who: usize,
        until: Duration,
    },
    /// Killed; restarted after `restart`, under a new identity if `fresh`.
    Crash {
        who: usize,
        restart: Duration,
        fresh: bool,
    },
    /// Stopped through its `Stopper` (releasing if so configured), or by
    /// SIGTERM to `lease-elect`, and started again after `restart`.
    Stop {
        who: usize,
        restart: Duration,
    },
    /// A latecomer slot starts its first process: a candidate with no
    /// memory of the Lease (also just after a deletion).
    Join(usize),
    Wall {
        who: usize,
        how: Wall,
    },
    /// Its watch stops delivering.
    WatchOff {
        who: usize,
        until: Duration,
    },
    Other(Write),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Timed {
    pub(super) at: Duration,
    pub(super) fault: Fault,
}

/// How the network and the API server behave in this schedule.
#[derive(Debug, Clone, Copy)]
pub(super) struct Net {
    /// A request takes near the cap, or past it.
    pub(super) p_slow: f64,
    pub(super) p_hang: f64,
    /// The write applied, its answer lost.
    pub(super) p_lost: f64,
    /// A spurious 409 Conflict on an update.
    pub(super) p_conflict: f64,
    /// A 5xx (with `Retry-After` half the time: a 503).
    pub(super) p_5xx: f64,
    pub(super) watch_max_delay: Duration,
    pub(super) p_watch_drop: f64,
    pub(super) p_watch_repeat: f64,
    /// A delivery replaying the Lease as it was before a write, or a
    /// deletion it never had (a proxy replaying events, issue 44).
    pub(super) p_watch_stale: f64,
}

/// A whole schedule.
pub(super) struct Plan {
    pub(super) seed: u64,
    pub(super) timing: Timing,
    pub(super) lock: LockKind,
    pub(super) candidates: Vec<Candidate>,
    pub(super) net: Net,
    pub(super) faults: Vec<Timed>,
    /// Faults begin before this; all of them are healed at it.
    pub(super) faults_end: Duration,
    pub(super) end: Duration,
    /// How long after a candidate ends by itself it is started again (an
    /// orchestrator restarting a pod).
    pub(super) restart_delay: Duration,
}

impl Plan {
    /// COMMAND's world as before [`draw_command_extras`]: the supervisor's
    /// switch on, one SIGTERM per stop.
    pub(super) fn without_command_extras(&mut self) {
        for c in &mut self.candidates {
            if let Mode::Command(cmd) = &mut c.mode {
                cmd.backstop = true;
                cmd.again = None;
                cmd.supervisor_killed = None;
                cmd.supervisor_stopped = None;
            }
        }
    }

    pub(super) fn draw(seed: u64) -> Plan {
        let mut r = Rng::new(seed, 0);
        let timing = draw_timing(&mut r);
        let bound = timing.drift_bound();
        let n = r.range(2, 8) as usize;
        // Runs of a fault kind: each kind is in a schedule or not.
        let on = |r: &mut Rng, p: f64| if r.chance(p) { 1.0 } else { 0.0 };
        let net = Net {
            p_slow: on(&mut r, 0.5) * 0.08,
            p_hang: on(&mut r, 0.3) * 0.04,
            p_lost: on(&mut r, 0.4) * r.unit() * 0.2,
            p_conflict: on(&mut r, 0.3) * 0.05,
            p_5xx: on(&mut r, 0.4) * r.unit() * 0.3,
            watch_max_delay: timing.retry.mul_f64(r.unit() * 2.0),
            p_watch_drop: on(&mut r, 0.4) * 0.3,
            p_watch_repeat: on(&mut r, 0.3) * 0.2,
            p_watch_stale: on(&mut r, 0.3) * 0.5,
        };
        let drift = r.chance(0.7);
        let lock = match r.range(0, 10) {
            0..=5 => LockKind::Lease,
            6 | 7 => LockKind::NoUid,
            _ => LockKind::Unversioned,
        };
        // Latecomers: slots that start only when a `Join` says so.
        let late = r.range(0, 3) as usize;
        let mut candidates: Vec<Candidate> = (0..n + late)
            .map(|i| {
                let mode = draw_mode(&mut r, &timing);
                let command = matches!(mode, Mode::Command(_));
                Candidate {
                    identity: format!("c{i}"),
                    watch: r.chance(0.5),
                    // lease-elect always releases once COMMAND has ended.
                    release_on_cancel: command || r.chance(0.6),
                    // ... and exits after a loss, to be started afresh.
                    rejoin: !command && r.chance(0.5),
                    rate_ppm: if drift {
                        // Within the documented bound, up to its edge.
                        ((r.unit() * 2.0 - 1.0) * bound * 0.999 * 1e6) as i64
                    } else {
                        0
                    },
                    wall_offset_ms: r.range(0, 4000) as i64 - 2000,
                    start: if i >= n {
                        None
                    } else if r.chance(0.5) {
                        Some(Duration::ZERO)
                    } else {
                        Some(r.between(Duration::ZERO, timing.lease * 2))
                    },
                    reads_late: (!command && r.chance(0.2))
                        .then(|| r.between(Duration::ZERO, timing.retry)),
                    mode,
                }
            })
            .collect();
        draw_command_extras(seed, &mut candidates);
        let faults_end = timing.lease.mul_f64(3.0 + r.unit() * 7.0);
        let faults = draw_faults(&mut r, n, late, lock, &timing, faults_end);
        let restart_delay = r.between(Duration::ZERO, timing.retry * 2);
        // Time for the world to settle: a lease left behind expires, a
        // clamped Retry-After passes, a restart comes back.
        let settle = timing.lease * 2 + timing.retry * 6 + restart_delay + SIM_RETRY_AFTER_MAX;
        Plan {
            seed,
            timing,
            lock,
            candidates,
            net,
            faults,
            faults_end,
            end: faults_end + settle,
            restart_delay,
        }
    }
}

/// The work's time budget after a term ends: `lease − renew − margin`.
pub(super) fn budget(t: &Timing) -> Duration {
    t.lease
        .saturating_sub(t.renew)
        .saturating_sub(crate::elector::stop_margin(t.lease, t.renew))
}

/// What a candidate runs around its elector.
fn draw_mode(r: &mut Rng, t: &Timing) -> Mode {
    let budget = budget(t);
    match r.range(0, 10) {
        0..=2 => Mode::Spawn {
            lag: r.between(Duration::ZERO, budget / 2),
        },
        3..=6 => Mode::Run {
            work: match r.range(0, 10) {
                0..=3 => {
                    let budgeted = r.chance(0.5);
                    // A loop that checks only `is_current` must keep its
                    // steps within the budget; one that checks
                    // `time_to_stop` may take any step.
                    let longest = if budgeted { t.lease * 2 } else { budget };
                    Work::Steps {
                        step: r.between(Duration::from_millis(1), longest),
                        budgeted,
                    }
                }
                4 => Work::Ignores(r.between(Duration::ZERO, t.lease * 3)),
                5 => Work::Panics {
                    step: r.between(Duration::from_millis(1), budget),
                    after: r.between(Duration::ZERO, t.lease * 3),
                    abort: r.chance(0.5),
                },
                6 => Work::AtOnce,
                _ => Work::WaitEnded {
                    lag: r.between(Duration::ZERO, budget / 2),
                },
            },
            release_grace: if r.chance(0.3) {
                Duration::ZERO
            } else {
                r.between(Duration::ZERO, t.lease * 2)
            },
        },
        _ => Mode::Command(Command {
            grace: r.between(Duration::ZERO, t.lease * 2),
            restart: r.chance(0.3),
            exits_after: r
                .chance(0.3)
                .then(|| r.between(Duration::ZERO, t.lease * 3)),
            on_term: r.chance(0.8).then(|| r.between(Duration::ZERO, t.lease)),
            backstop: true,
            again: None,
            supervisor_killed: None,
            supervisor_stopped: None,
        }),
    }
}

/// What COMMAND's world adds (a supervisor without its switch, a second
/// SIGTERM), drawn from a stream of their own: the rest of every schedule
/// is what it was before they were drawn, so the seeds found before still
/// replay their schedules.
fn draw_command_extras(seed: u64, candidates: &mut [Candidate]) {
    let mut r = Rng::new(seed, COMMAND_EXTRAS_STREAM);
    for c in candidates {
        if let Mode::Command(cmd) = &mut c.mode {
            cmd.backstop = !r.chance(0.3);
            // Within the grace, or just after it (when a SIGKILL may be
            // ordered and not yet answered).
            cmd.again = r.chance(0.3).then(|| {
                if r.chance(0.5) {
                    r.between(Duration::ZERO, cmd.grace.max(Duration::from_millis(1)))
                } else {
                    r.between(cmd.grace, cmd.grace + Duration::from_secs(1))
                }
            });
            cmd.supervisor_killed = r
                .chance(0.1)
                .then(|| r.between(Duration::ZERO, cmd.grace + Duration::from_secs(30)));
            cmd.supervisor_stopped = r
                .chance(0.1)
                .then(|| r.between(Duration::ZERO, cmd.grace + Duration::from_secs(30)));
        }
    }
}

/// The random stream of [`draw_command_extras`] (the network's streams
/// are 1 + a process's number).
const COMMAND_EXTRAS_STREAM: u64 = 1 << 32;

/// The longest `Retry-After` the simulated server sends.
pub(super) const SIM_RETRY_AFTER_MAX: Duration = Duration::from_secs(10);

fn draw_timing(r: &mut Rng) -> Timing {
    let fixed = [
        (4, 3000, 1000),
        (15, 10_000, 2000),
        (137, 107_000, 26_000),
        (270, 240_000, 60_000),
    ];
    if r.chance(0.6) {
        let (ld, rd, rp) = r.pick(&fixed);
        return Timing {
            lease: Duration::from_secs(ld),
            renew: Duration::from_millis(rd),
            retry: Duration::from_millis(rp),
        };
    }
    // Any timing client-go's rules allow: LD > RD > 1.2 × RP, LD whole seconds.
    let retry = r.ms(200, 5000);
    let renew = retry.mul_f64(1.25 + r.unit() * 4.0);
    let lease_secs = (renew.as_secs_f64() * (1.05 + r.unit())).ceil() as u64 + 1;
    Timing {
        lease: Duration::from_secs(lease_secs),
        renew,
        retry,
    }
}

fn draw_faults(
    r: &mut Rng,
    n: usize,
    late: usize,
    lock: LockKind,
    t: &Timing,
    end: Duration,
) -> Vec<Timed> {
    let mut faults = Vec::new();
    // Each kind is in this schedule with some probability, then comes at
    // a rate of its own.
    let kinds: [(f64, f64); 8] = [
        (0.5, 1.5),  // cut
        (0.4, 1.0),  // pause
        (0.4, 1.0),  // crash
        (0.4, 1.0),  // stop
        (0.35, 1.0), // wall clock
        (0.3, 1.0),  // watch off
        (0.45, 1.5), // another writer
        (0.3, 1.0),  // elector thread stalled
    ];
    let periods = (end.as_secs_f64() / t.lease.as_secs_f64()).max(1.0);
    // Faults name the slots that run from the start; latecomers join.
    for (kind, (p_in, per_lease)) in kinds.iter().enumerate() {
        if *p_in == 0.0 || !r.chance(*p_in) {
            continue;
        }
        let count = (periods * per_lease * r.unit()).ceil() as usize;
        for _ in 0..count {
            let at = r.between(Duration::ZERO, end);
            let who = r.range(0, (n + late) as u64) as usize;
            let lasting = |r: &mut Rng| (at + r.between(t.retry / 2, t.lease * 2)).min(end);
            let fault = match kind {
                0 => Fault::Cut {
                    who,
                    how: if r.chance(0.5) {
                        Cut::Refused
                    } else {
                        Cut::Silent
                    },
                    until: lasting(r),
                },
                1 => Fault::Pause {
                    who,
                    until: lasting(r),
                },
                2 => Fault::Crash {
                    who,
                    restart: r.between(Duration::ZERO, t.lease),
                    fresh: r.chance(0.5),
                },
                3 => Fault::Stop {
                    who,
                    restart: r.between(Duration::ZERO, t.lease),
                },
                // Without versions, a holder whose wall clock stands still
                // writes the same record each renew: it cannot be told
                // from a dead one (the documented limit of such a lock).
                4 if lock == LockKind::Unversioned => Fault::Wall {
                    who,
                    how: Wall::Step(r.range(1, 600_000) as i64 - 300_000),
                },
                4 => Fault::Wall {
                    who,
                    how: match r.range(0, 4) {
                        0 => Wall::Freeze,
                        1 => Wall::FarFuture,
                        2 => Wall::Step(-(r.range(1, 600_000) as i64)),
                        _ => Wall::Step(r.range(1, 600_000) as i64),
                    },
                },
                5 => Fault::WatchOff {
                    who,
                    until: lasting(r),
                },
                7 => Fault::Stall {
                    who,
                    until: lasting(r),
                },
                _ => Fault::Other(match r.range(0, 6) {
                    0 => Write::Delete,
                    1 => Write::Transitions(0),
                    2 => Write::Transitions(r.range(0, 3) as i32),
                    3 => Write::Holder(if r.chance(0.5) {
                        "stranger".into()
                    } else {
                        format!("c{}", r.range(0, n as u64))
                    }),
                    // The field's edge: a writer may store any int32.
                    4 => Write::Transitions(i32::MAX - r.range(0, 2) as i32),
                    _ => Write::Free,
                }),
            };
            // Renews that fail for a whole renew deadline, then succeed
            // again while another writer frees or takes the Lease: the
            // work of the run-out term is still winding down (issue 44).
            let fault = match fault {
                Fault::Cut { who, how, .. } if r.chance(0.3) => {
                    let until = (at + t.renew.mul_f64(1.0 + r.unit() * 0.3)).min(end);
                    let write = match r.range(0, 3) {
                        0 => Write::Free,
                        1 => Write::Holder(format!("c{}", r.range(0, n as u64))),
                        _ => Write::Delete,
                    };
                    let slack = t.lease.saturating_sub(t.renew);
                    faults.push(Timed {
                        at: (until + r.between(Duration::ZERO, slack)).min(end),
                        fault: Fault::Other(write),
                    });
                    Fault::Cut { who, how, until }
                }
                other => other,
            };
            // A takeover by another writer while a stopped candidate's work
            // is still winding down (a COMMAND in its grace).
            if matches!(fault, Fault::Stop { .. }) && r.chance(0.3) {
                let write = match r.range(0, 3) {
                    0 => Write::Delete,
                    1 => Write::Free,
                    _ => Write::Holder("stranger".into()),
                };
                faults.push(Timed {
                    at: (at + r.between(Duration::ZERO, t.lease)).min(end),
                    fault: Fault::Other(write),
                });
            }
            // A deletion is a common way to force a failover: a fresh
            // candidate often comes right after it.
            if fault == Fault::Other(Write::Delete) && late > 0 && r.chance(0.8) {
                let slot = n + r.range(0, late as u64) as usize;
                let join = (at + r.between(Duration::ZERO, t.retry)).min(end);
                faults.push(Timed {
                    at: join,
                    fault: Fault::Join(slot),
                });
            }
            faults.push(Timed { at, fault });
        }
    }
    // Latecomers not called by a deletion join at any instant.
    for slot in n..n + late {
        if !faults.iter().any(|f| f.fault == Fault::Join(slot)) {
            let at = r.between(Duration::ZERO, end);
            faults.push(Timed {
                at,
                fault: Fault::Join(slot),
            });
        }
    }
    faults.sort_by_key(|f| f.at);
    faults
}

impl fmt::Display for Timing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "lease {:?}, renew deadline {:?}, retry period {:?}",
            self.lease, self.renew, self.retry
        )
    }
}
