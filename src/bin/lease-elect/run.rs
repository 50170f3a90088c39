//! The elector, and what `lease-elect` does with its events: print them
//! and, given a COMMAND, run it only while leading.
//!
//! # When COMMAND may run
//!
//! COMMAND starts on `StartedLeading` while the handle says we lead, and is
//! stopped (SIGTERM, SIGKILL after `--grace`) on `StoppedLeading`, on a
//! signal to `lease-elect`, or when the handle stops saying we lead. The
//! lease is released only after COMMAND (its supervisor) has been reaped:
//! `ElectorHandle::stop` sends `StoppedLeading` and releases at once, so it
//! is called last.
//!
//! While COMMAND is being stopped the elector keeps renewing, so `--grace`
//! may be long. But nobody else can take the lease before `leaseDuration`
//! after our last successful renew started (others time expiry from when
//! *they* saw that renew), and that is the one bound a term that ran out
//! leaves: COMMAND gets SIGKILL no later than [`kill_margin`] before it,
//! whatever `--grace` says. The term ends at most `renewDeadline` after
//! that renew, so a term that ran out leaves `leaseDuration - renewDeadline
//! - margin` for a graceful exit (4 s at 15s/10s/2s). A term lost because
//! another holder was seen leaves nothing (that holder may run COMMAND
//! already): SIGKILL at once. `--grace` is for orderly ends.
//!
//! # Act first, tell after
//!
//! Where a term ends, COMMAND is signalled before anything is logged or
//! printed, and no log line or event line ever waits for its stream: both
//! go through bounded queues (`outlet.rs`), so a stderr or stdout nobody
//! drains cannot hold up the end of a term. The supervisor holds the
//! term's end too (`supervise.rs`): this loop hands it every renewed
//! `valid_until`, so COMMAND is ended on time also while `lease-elect` is
//! stopped, frozen or stuck. With COMMAND, SIGTSTP (Ctrl-Z) is ignored: a
//! stopped candidate cannot renew, and its COMMAND would only be killed at
//! the term's end; SIGINT or SIGTERM stop it.
//!
//! With COMMAND the elector does not rejoin after a loss: `lease-elect`
//! exits 1 once COMMAND has ended, and the orchestrator restarts it as a
//! fresh candidate (client-go's and library-go's components exit too).

use std::ffi::OsString;
use std::io::Read;
use std::net::SocketAddr;
use std::process::{ExitCode, ExitStatus};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use lease_elector::events::EventRecorder;
use lease_elector::text::Escaped;
use lease_elector::{
    Client, Clock, ElectorHandle, LeaderElector, LeaderEvent, LeaderEvents, LeaseLock, Probe,
    SystemClock, Term,
};
use log::LevelFilter;
use signal_hook::consts::{SIGCHLD, SIGINT, SIGTERM, SIGTSTP};
use signal_hook::iterator::Signals;

use crate::args::Args;
use crate::logger;
use crate::outlet::Outlet;
use crate::procs;
use crate::procs::Signal;
use crate::supervise::{self, Supervised};

type BoxError = Box<dyn std::error::Error>;

/// What the threads tell the main loop.
enum Msg {
    Event(LeaderEvent),
    /// The elector ended (its channel closed).
    ElectorEnded,
    /// SIGTERM or SIGINT.
    Signal(Signal),
    /// SIGCHLD: the supervisor may have ended.
    Child,
    /// SIGTSTP (Ctrl-Z), with COMMAND: ignored.
    Suspend,
    /// Without COMMAND: stdin closed.
    StdinClosed,
}

/// Event lines waiting for stdout at most; more are dropped and counted.
const EVENT_QUEUE: usize = 64;

/// How long the last lines may wait for a stuck stdout or stderr when
/// `lease-elect` exits (everything else is done by then).
pub const EXIT_FLUSH: Duration = Duration::from_millis(500);

/// Run with parsed arguments; `logger` is set up.
pub fn main(args: Args, logger: &logger::Stderr) -> ExitCode {
    let events = Outlet::stdout(
        EVENT_QUEUE,
        Box::new(|n| {
            log::warn!("{n} event lines were dropped: stdout was not being read");
            None
        }),
    );
    let code = match run(args, logger, &events) {
        Ok(code) => code,
        Err(e) => {
            // Whatever the log level. The error may carry the server's
            // words: escaped.
            logger.say(format!("lease-elect: {}", Escaped(&e.to_string())));
            ExitCode::FAILURE
        }
    };
    events.flush(EXIT_FLUSH);
    log::logger().flush();
    code
}

fn run(args: Args, logger: &logger::Stderr, out: &Outlet) -> Result<ExitCode, BoxError> {
    if let Some(program) = args.command.first() {
        if let Err((code, why)) = supervise::find_program(program) {
            logger.say(format!("lease-elect: COMMAND: {why}"));
            return Ok(ExitCode::from(code));
        }
    }
    // Listening first: from now on SIGTERM and SIGINT stop us cleanly.
    let (tx, rx) = mpsc::channel();
    let mut wanted = vec![SIGTERM, SIGINT];
    if !args.command.is_empty() {
        wanted.extend([SIGCHLD, SIGTSTP]);
    }
    let mut signals = Signals::new(wanted)?;
    let signals_handle = signals.handle();
    let signals_thread = {
        let tx = tx.clone();
        thread::Builder::new()
            .name("lease-elect/signals".into())
            .spawn(move || {
                for sig in signals.forever() {
                    let msg = match sig {
                        SIGTSTP => Msg::Suspend,
                        sig => Signal::from_raw(sig).map_or(Msg::Child, Msg::Signal),
                    };
                    if tx.send(msg).is_err() {
                        break;
                    }
                }
            })?
    };

    // With COMMAND: if its supervisor is killed, what COMMAND started comes
    // to us rather than to PID 1, so that we can end it before releasing.
    let subreaper = !args.command.is_empty()
        && procs::become_subreaper()
            .map_err(|e| log::warn!("cannot become a child subreaper ({e}): if COMMAND's supervisor is killed, the lease is left to expire"))
            .is_ok();

    // The elector's clock, kept to read its now: a term's end is an
    // instant on it.
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let (handle, events, identity) = spawn_elector(&args, clock.clone())?;
    let probe = handle.probe();
    // Feature `cli` turns on `health`.
    let _health = match &args.health_addr {
        Some(addr) => {
            let server = lease_elector::health::HealthServer::start(
                health_addrs(addr)?.as_slice(),
                vec![probe.clone()],
                args.health_tolerance,
            )
            .map_err(|e| format!("--health-addr {addr}: {e}"))?;
            log::info!("health endpoint on {}", server.local_addr());
            Some(server)
        }
        None => None,
    };

    let forward = forward_events(events, identity, tx.clone(), out.clone())?;
    if args.command.is_empty() && !args.ignore_stdin && lease_elector::tool::stdin_is_a_pipe() {
        let tx = tx.clone();
        // Blocked in read(2) until stdin closes; not joined.
        thread::Builder::new()
            .name("lease-elect/stdin".into())
            .spawn(move || {
                let mut sink = [0u8; 256];
                let mut stdin = std::io::stdin();
                while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
                let _ = tx.send(Msg::StdinClosed);
            })?;
    }
    drop(tx);

    let acquire_timeout = args.acquire_timeout.unwrap_or_default();
    let end = if args.command.is_empty() {
        follow(&rx)
    } else {
        Session::new(&args, probe, clock).run(&rx)
    };
    if let End::SupervisorKilled = end {
        if !subreaper {
            // COMMAND may outlive its supervisor: exit without releasing,
            // so that the lease expires rather than passing on at once.
            log::error!(
                "COMMAND's supervisor was killed; COMMAND may still run: not releasing the lease"
            );
            out.flush(EXIT_FLUSH);
            log::logger().flush();
            std::process::exit(1);
        }
        // The supervisor is reaped; everything below us now is what
        // COMMAND left (and an exec plugin run, if one was in flight).
        let n = procs::kill_all_below(&[]);
        log::error!("COMMAND's supervisor was killed; killed the {n} processes it left, releasing the lease");
    }
    // Whether the last attempt was answered: giving up because another
    // candidate holds the lease (75) is not giving up because the API
    // server could not be asked (an error).
    let last_failure = match handle.probe().status() {
        s if s.consecutive_failures > 0 => s.last_error,
        _ => None,
    };
    // COMMAND has ended (or never ran): now the lease may be released.
    // Events not read hold their terms, which a release waits for.
    drop(rx);
    let stopped = handle.stop();
    // The elector's thread is gone, so its channel is closed and the
    // forwarder has printed every event (STOPPED included).
    let _ = forward.join();
    signals_handle.close();
    let _ = signals_thread.join();
    match end {
        End::Stopped(why) => {
            log::info!("stopped: {why}");
            stopped?;
            Ok(ExitCode::SUCCESS)
        }
        End::CommandExited(code) => {
            if let Err(e) = stopped {
                log::error!("releasing the lease after COMMAND exited: {e}");
            }
            Ok(ExitCode::from(code))
        }
        End::Lost => {
            stopped?;
            log::warn!("leader election lost; exiting so that a fresh candidate starts");
            Ok(ExitCode::FAILURE)
        }
        End::ElectorEnded => {
            stopped?;
            Err("the elector ended unexpectedly".into())
        }
        End::Failed(e) => {
            stopped?;
            Err(e)
        }
        End::SupervisorKilled => {
            stopped?;
            Ok(ExitCode::FAILURE)
        }
        End::GaveUp => {
            // A panic of the elector thread is not a give-up.
            stopped?;
            if let Some(e) = last_failure {
                return Err(format!(
                    "not leading within --acquire-timeout {}: the API server could not be asked: {} ({})",
                    humantime::format_duration(acquire_timeout),
                    Escaped(&e.message),
                    Escaped(&e.hint)
                )
                .into());
            }
            log::warn!(
                "not leading within --acquire-timeout {}: giving up (exit {EXIT_GAVE_UP})",
                humantime::format_duration(acquire_timeout)
            );
            Ok(ExitCode::from(EXIT_GAVE_UP))
        }
    }
}

/// Connect as the `elect` example does (`ConnectOptions`), and start
/// electing on `clock`.
fn spawn_elector(
    args: &Args,
    clock: Arc<dyn Clock>,
) -> Result<(ElectorHandle, LeaderEvents, String), BoxError> {
    let (config, namespace) = args.connect.resolve()?;
    let name = args.name.clone().ok_or("--name is required")?;
    let identity = args
        .identity
        .clone()
        .unwrap_or_else(lease_elector::identity);
    let client = Client::new(config)?;
    let mut lock = LeaseLock::new(client.clone(), namespace, name, identity.clone());
    if !args.no_events {
        // As library-go records them; a refused Event never affects the
        // election (events.rs).
        let recorder = EventRecorder::new(client, "lease-elect").with_instance(identity.clone());
        lock = lock.with_event_sink(Arc::new(recorder));
    }
    let with_command = !args.command.is_empty();
    let mut builder = LeaderElector::builder(lock)
        // With COMMAND the release comes after COMMAND has ended: always safe.
        .release_on_cancel(args.release_on_cancel || with_command)
        .rejoin(!with_command)
        .watch(args.watch)
        .clock(clock);
    if let Some(d) = args.lease_duration {
        builder = builder.lease_duration(d);
    }
    if let Some(d) = args.renew_deadline {
        builder = builder.renew_deadline(d);
    }
    if let Some(d) = args.retry_period {
        builder = builder.retry_period(d);
    }
    if let Some(d) = args.acquire_timeout {
        // The elector judges it between attempts: one in flight decides.
        builder = builder.acquire_timeout(d);
    }
    let (handle, events) = builder.build()?.spawn()?;
    Ok((handle, events, identity))
}

/// Where `--health-addr` listens: `HOST:PORT` as given; `:PORT` (Go's
/// form) on every interface, IPv6 and IPv4 where the host has IPv6, else
/// IPv4.
fn health_addrs(addr: &str) -> Result<Vec<SocketAddr>, BoxError> {
    use std::net::{Ipv4Addr, Ipv6Addr, ToSocketAddrs};
    match addr.strip_prefix(':') {
        Some(port) => {
            let port: u16 = port
                .parse()
                .map_err(|_| format!("--health-addr {addr}: not a port"))?;
            Ok(vec![
                SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)),
                SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)),
            ])
        }
        None => Ok(addr
            .to_socket_addrs()
            .map_err(|e| format!("--health-addr {addr}: {e}"))?
            .collect()),
    }
}

/// Why the lease was lost, for the WARN line that says so: the elector's
/// own reason, else the last failed request, else the deadline of `term`
/// (`now` on the elector's clock).
fn loss_reason(probe: &Probe, term: &Term, now: Instant) -> String {
    let status = probe.status();
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

/// Pass events to the main loop, then print them: printing never delays
/// stopping COMMAND (nor waits for stdout: `out` queues), and STOPPED is
/// printed as soon as the elector sends it, before the release that
/// follows it completes.
fn forward_events(
    events: LeaderEvents,
    identity: String,
    tx: Sender<Msg>,
    out: Outlet,
) -> std::io::Result<thread::JoinHandle<()>> {
    thread::Builder::new()
        .name("lease-elect/events".into())
        .spawn(move || {
            for ev in events {
                let line = match &ev {
                    LeaderEvent::StartedLeading { .. } => format!("LEADING {}", Escaped(&identity)),
                    LeaderEvent::StoppedLeading { .. } => format!("STOPPED {}", Escaped(&identity)),
                    LeaderEvent::NewLeader { identity: who, .. } => {
                        format!("NEW_LEADER {}", Escaped(who))
                    }
                    _ => continue,
                };
                let _ = tx.send(Msg::Event(ev));
                out.send(line);
            }
            let _ = tx.send(Msg::ElectorEnded);
        })
}

/// How the main loop ended.
enum End {
    /// SIGTERM, SIGINT or stdin closing.
    Stopped(String),
    /// COMMAND exited on its own (without `--restart`) with this status.
    CommandExited(u8),
    Lost,
    ElectorEnded,
    /// COMMAND could not be started.
    Failed(BoxError),
    /// The supervisor died of a signal: COMMAND may still run.
    SupervisorKilled,
    /// `--acquire-timeout` passed without leading.
    GaveUp,
}

/// Without COMMAND: print (the forwarder does) until told to stop.
fn follow(rx: &Receiver<Msg>) -> End {
    loop {
        match rx.recv() {
            Ok(Msg::Signal(sig)) => return End::Stopped(sig.to_string()),
            Ok(Msg::StdinClosed) => return End::Stopped("stdin closed".into()),
            Ok(Msg::ElectorEnded) | Err(_) => return End::ElectorEnded,
            Ok(Msg::Event(_) | Msg::Child | Msg::Suspend) => {}
        }
    }
}

/// How watching a running COMMAND ended.
enum Watch {
    Exited(ExitStatus),
    Lost,
    Signal(Signal),
}

/// The first pause before `--restart` starts COMMAND again, the longest,
/// and how long a run must last for the pause to start again from the first.
const RESTART_FIRST: Duration = Duration::from_secs(1);
const RESTART_MAX: Duration = Duration::from_secs(30);
const RESTART_RESET: Duration = Duration::from_secs(10);

/// The exit status when `--acquire-timeout` passes without leading:
/// COMMAND's status as the supervisor passes it on, said in words: 128 +
/// S is how a shell (and the supervisor) reports a kill by signal S.
fn described(code: u8) -> String {
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

/// `EX_TEMPFAIL` (sysexits.h), "try again later".
const EXIT_GAVE_UP: u8 = 75;

/// COMMAND's environment for `term`: its fencing token, identity and Lease.
fn term_env(term: &Term) -> [(&'static str, String); 3] {
    [
        ("LEASE_ELECT_TERM", term.token().to_string()),
        ("LEASE_ELECT_IDENTITY", term.identity().to_string()),
        ("LEASE_ELECT_LEASE", term.lease().to_string()),
    ]
}

/// How long before the lease could expire for others COMMAND gets SIGKILL
/// at the latest: 1 s, or half of `leaseDuration - renewDeadline` if less.
/// It covers delivering SIGKILL and the supervisor reaping COMMAND.
fn kill_margin(lease_duration: Duration, renew_deadline: Duration) -> Duration {
    (lease_duration.saturating_sub(renew_deadline) / 2).min(Duration::from_secs(1))
}

/// With COMMAND: run it while leading.
struct Session {
    command: Vec<OsString>,
    grace: Duration,
    restart: bool,
    acquire_timeout: Option<Duration>,
    level: LevelFilter,
    probe: Probe,
    /// The elector's clock: every instant here is on it.
    clock: Arc<dyn Clock>,
    lease_duration: Duration,
    margin: Duration,
    /// From a term's end to SIGKILL, as the supervisor enforces it: the
    /// grace, but never closer than `margin` to the lease's expiry.
    kill_after: Duration,
}

/// How a term ended for COMMAND: what it was sent first.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// SIGTERM or SIGINT, then SIGKILL after the grace.
    Graceful,
    /// SIGKILL at once.
    Killed,
}

impl Session {
    fn new(args: &Args, probe: Probe, clock: Arc<dyn Clock>) -> Session {
        let timings = args.elector_config();
        let (lease_duration, renew_deadline) = (timings.lease_duration, timings.renew_deadline);
        let margin = kill_margin(lease_duration, renew_deadline);
        Session {
            command: args.command.clone(),
            grace: args.grace,
            restart: args.restart,
            acquire_timeout: args.acquire_timeout,
            level: log::max_level(),
            probe,
            clock,
            lease_duration,
            margin,
            kill_after: args.grace.min(
                lease_duration
                    .saturating_sub(renew_deadline)
                    .saturating_sub(margin),
            ),
        }
    }

    fn now(&self) -> Instant {
        self.clock.now()
    }

    /// SIGKILL COMMAND by then at the latest: `margin` before the lease
    /// could expire for anyone else.
    fn lease_deadline(&self) -> Instant {
        match self.probe.last_renew() {
            Some(at) => (at + self.lease_duration)
                .checked_sub(self.margin)
                .unwrap_or(at),
            None => self.now(),
        }
    }

    /// How often the main loop looks at the handle while COMMAND runs, in
    /// case no event comes: it sees a missed renew deadline with `margin`
    /// to spare (`margin` is at most half of leaseDuration - renewDeadline),
    /// and passes a renew on to the supervisor well before the term's old
    /// end.
    fn tick(&self) -> Duration {
        self.margin.max(Duration::from_millis(10))
    }

    /// Whether the term was lost to another holder (or to a Lease freed or
    /// gone under us), not just run out: the last holder the elector saw is
    /// not this candidate.
    fn seen_other_holder(&self) -> bool {
        self.probe.leader().as_deref() != Some(self.probe.identity())
    }

    fn run(&self, rx: &Receiver<Msg>) -> End {
        let mut term = loop {
            match rx.recv() {
                Ok(Msg::Event(LeaderEvent::StartedLeading { term, .. })) => break term,
                Ok(Msg::Signal(sig)) => return End::Stopped(sig.to_string()),
                Ok(Msg::Suspend) => ignored_suspend(),
                // Before leading, the elector ends by itself only when
                // --acquire-timeout passed (it never wrote the Lease).
                Ok(Msg::ElectorEnded) | Err(_) if self.acquire_timeout.is_some() => {
                    return End::GaveUp
                }
                Ok(Msg::ElectorEnded) | Err(_) => return End::ElectorEnded,
                Ok(_) => {}
            }
        };
        let mut pause = RESTART_FIRST;
        loop {
            // With --restart, the term in progress (the same one while it lasts).
            if let Some(current) = self.probe.term() {
                term = current;
            }
            if !self.probe.is_leader() || !term.is_current() {
                return End::Lost;
            }
            let mut child = match Supervised::start(
                &self.command,
                self.level,
                &term_env(&term),
                &term,
                &*self.clock,
                self.kill_after,
            ) {
                Ok(child) => child,
                Err(e) => return End::Failed(format!("cannot start COMMAND: {e}").into()),
            };
            let started = Instant::now();
            log::info!(
                "leading (term {}): started {}",
                term.token(),
                supervise::show(&self.command)
            );
            let status = match self.watch(rx, &mut child, &term) {
                Watch::Exited(status) => status,
                Watch::Lost => {
                    // Act first: the log line after.
                    let ending = if self.seen_other_holder() {
                        child.signal(Signal::Kill);
                        Ending::Killed
                    } else {
                        child.signal(Signal::Term);
                        Ending::Graceful
                    };
                    let why = loss_reason(&self.probe, &term, self.now());
                    match ending {
                        Ending::Killed => log::warn!(
                            "leadership lost ({why}): killed COMMAND at once (SIGKILL, no --grace: the new holder may be running it)"
                        ),
                        Ending::Graceful => log::warn!("leadership lost ({why}): stopping COMMAND"),
                    }
                    return self.terminate(rx, &mut child, &term, ending, End::Lost);
                }
                Watch::Signal(sig) => {
                    child.signal(sig);
                    log::info!("{sig}: stopping COMMAND");
                    return self.terminate(
                        rx,
                        &mut child,
                        &term,
                        Ending::Graceful,
                        End::Stopped(sig.to_string()),
                    );
                }
            };
            let Some(code) = command_status(status) else {
                return End::SupervisorKilled;
            };
            if !term.is_current() {
                // The supervisor ended COMMAND at the term's end: this
                // process did not run then (stopped, frozen, stuck).
                log::warn!(
                    "leadership lost ({}): COMMAND's supervisor ended COMMAND at the end of the term ({})",
                    loss_reason(&self.probe, &term, self.now()),
                    described(code)
                );
                return End::Lost;
            }
            if !self.restart {
                // A failure is news at the default level; a success is
                // not (a cron job would mail it every run).
                let level = if code == 0 {
                    log::Level::Info
                } else {
                    log::Level::Warn
                };
                log::log!(
                    level,
                    "COMMAND exited with {}; releasing the lease",
                    described(code)
                );
                return End::CommandExited(code);
            }
            pause = if started.elapsed() >= RESTART_RESET {
                RESTART_FIRST
            } else {
                pause
            };
            log::warn!(
                "COMMAND exited with {}; starting it again in {}",
                described(code),
                humantime::format_duration(pause)
            );
            if let Some(end) = self.pause(rx, pause, &term) {
                return match end {
                    Watch::Signal(sig) => End::Stopped(sig.to_string()),
                    _ => End::Lost,
                };
            }
            pause = (pause * 2).min(RESTART_MAX);
        }
    }

    /// How long to wait for the next message while COMMAND runs under
    /// `term`: a tick, and never past the end of the term, so that a wait
    /// begun before a freeze (SIGSTOP, a paused VM) ends the moment the
    /// process runs again if the term ended meanwhile, and a renew that
    /// lands just before the end reaches the supervisor at the end. A
    /// sleep's deadline is absolute: the kernel wakes the thread at once on
    /// thawing when that deadline has passed.
    fn wait_in(&self, term: &Term) -> Duration {
        term.valid_until()
            .saturating_duration_since(self.now())
            .min(self.tick())
    }

    /// Until COMMAND exits, leadership ends or a signal comes; every renew
    /// is passed on to the supervisor.
    fn watch(&self, rx: &Receiver<Msg>, child: &mut Supervised, term: &Term) -> Watch {
        loop {
            child.relay(term, &*self.clock);
            match child.try_wait() {
                Ok(Some(status)) => return Watch::Exited(status),
                Ok(None) => {}
                Err(e) => log::error!("waiting for COMMAND's supervisor: {e}"),
            }
            if !term.is_current() || !self.probe.is_leader() {
                return Watch::Lost;
            }
            match rx.recv_timeout(self.wait_in(term)) {
                Ok(Msg::Event(LeaderEvent::StoppedLeading { .. }) | Msg::ElectorEnded)
                | Err(RecvTimeoutError::Disconnected) => {
                    // The supervisor may have ended COMMAND already, at
                    // the term's end, while this process did not run.
                    return match child.try_wait() {
                        Ok(Some(status)) => Watch::Exited(status),
                        _ => Watch::Lost,
                    };
                }
                Ok(Msg::Signal(sig)) => return Watch::Signal(sig),
                Ok(Msg::Suspend) => ignored_suspend(),
                Ok(_) | Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// `d` between runs of COMMAND; `Some` if leadership ended or a signal came.
    fn pause(&self, rx: &Receiver<Msg>, d: Duration, term: &Term) -> Option<Watch> {
        let until = Instant::now() + d;
        loop {
            if !term.is_current() || !self.probe.is_leader() {
                return Some(Watch::Lost);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            match rx.recv_timeout(left.min(self.wait_in(term))) {
                Ok(Msg::Event(LeaderEvent::StoppedLeading { .. }) | Msg::ElectorEnded)
                | Err(RecvTimeoutError::Disconnected) => return Some(Watch::Lost),
                Ok(Msg::Signal(sig)) => return Some(Watch::Signal(sig)),
                Ok(Msg::Suspend) => ignored_suspend(),
                Ok(_) | Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// How long the supervisor has to report COMMAND's end once SIGKILL
    /// was ordered: half the margin, which leaves the other half for
    /// killing it and everything below it ourselves (`kill_below`).
    fn answer_within(&self) -> Duration {
        self.margin / 2
    }

    /// The supervisor has not reported COMMAND's end in time after SIGKILL
    /// was ordered: it is stopped (COMMAND may `kill -STOP $PPID`) or hung.
    /// SIGKILL it and every process below us (COMMAND's come to us, a child
    /// subreaper), reap them all, and return `end`.
    fn kill_below(&self, child: &mut Supervised, end: End) -> End {
        // The supervisor is left for `child` to reap (when dropped).
        let n = procs::kill_all_below(&[child.pid()]);
        log::error!(
            "COMMAND's supervisor had not reported COMMAND's end {} after SIGKILL was ordered (stopped or hung?): killed it and every process below it ({n} processes)",
            humantime::format_duration(self.answer_within())
        );
        end
    }

    /// COMMAND was sent its first signal (`ending`): SIGKILL after `--grace`
    /// or at the lease deadline, whichever is first (or at a second
    /// SIGTERM/SIGINT); return `end` once COMMAND has been reaped: by the
    /// supervisor, or by ourselves if the supervisor does not answer
    /// (`kill_below`). Renews go on being passed on to the supervisor (a
    /// stop leaves the term running until COMMAND has ended).
    fn terminate(
        &self,
        rx: &Receiver<Msg>,
        child: &mut Supervised,
        term: &Term,
        ending: Ending,
        end: End,
    ) -> End {
        let grace_end = self.now() + self.grace;
        let mut killed_at = (ending == Ending::Killed).then(|| self.now());
        loop {
            child.relay(term, &*self.clock);
            match child.try_wait() {
                Ok(Some(status)) => {
                    return match command_status(status) {
                        Some(code) => {
                            log::info!("COMMAND has ended (status {code})");
                            end
                        }
                        None => End::SupervisorKilled,
                    };
                }
                Ok(None) => {}
                Err(e) => log::error!("waiting for COMMAND's supervisor: {e}"),
            }
            let now = self.now();
            let lease_end = self.lease_deadline();
            let kill_by = grace_end.min(lease_end);
            let wait = match killed_at {
                None if now >= kill_by => {
                    child.signal(Signal::Kill);
                    killed_at = Some(now);
                    if lease_end < grace_end {
                        log::warn!("COMMAND still ran and the lease could soon expire: SIGKILL");
                    } else {
                        log::warn!(
                            "COMMAND still ran after --grace {}: SIGKILL",
                            humantime::format_duration(self.grace)
                        );
                    }
                    self.answer_within().min(KILLED_POLL)
                }
                None => kill_by.saturating_duration_since(now).min(self.tick()).min(
                    term.valid_until()
                        .saturating_duration_since(now)
                        .max(KILLED_POLL),
                ),
                Some(at) => {
                    let answer_by = at + self.answer_within();
                    if now >= answer_by {
                        return self.kill_below(child, end);
                    }
                    answer_by.saturating_duration_since(now).min(KILLED_POLL)
                }
            };
            match rx.recv_timeout(wait) {
                Ok(Msg::Signal(again)) if killed_at.is_none() => {
                    child.signal(Signal::Kill);
                    killed_at = Some(self.now());
                    log::warn!("{again} again: SIGKILL");
                }
                Ok(Msg::Suspend) => ignored_suspend(),
                _ => {}
            }
        }
    }
}

/// With COMMAND, SIGTSTP (Ctrl-Z) does not stop `lease-elect`.
fn ignored_suspend() {
    log::warn!(
        "SIGTSTP ignored: a stopped candidate cannot renew the lease, and its COMMAND would be killed at the end of the term; SIGINT or SIGTERM stop it"
    );
}

/// How often a killed COMMAND is looked at besides SIGCHLD.
const KILLED_POLL: Duration = Duration::from_millis(100);

/// COMMAND's exit status as its supervisor passes it on; `None` when the
/// supervisor itself was killed, so that COMMAND may still run.
fn command_status(supervisor: ExitStatus) -> Option<u8> {
    match supervisor.code() {
        Some(code) => Some(u8::try_from(code).unwrap_or(1)),
        None => {
            log::debug!("COMMAND's supervisor ended: {supervisor}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kill_margin_is_a_second_or_half_the_slack_of_the_lease() {
        let s = Duration::from_secs;
        assert_eq!(kill_margin(s(15), s(10)), s(1));
        assert_eq!(kill_margin(s(137), s(107)), s(1));
        assert_eq!(
            kill_margin(s(2), Duration::from_millis(1500)),
            Duration::from_millis(250)
        );
    }
}
