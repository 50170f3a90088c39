//! The elector, and what `lease-elect` does with its events: print them
//! and, given a COMMAND, run it only while leading.
//!
//! # When COMMAND may run
//!
//! The rules (when COMMAND starts, is signalled, gets its `--grace`, is
//! killed) are the library's `lease_elector::session`, which the seeded
//! simulation runs too; [`Driver`] carries them out on real processes.
//! COMMAND starts on `StartedLeading` while the handle says we lead. The
//! lease is released only after COMMAND (its supervisor) has been reaped:
//! `ElectorHandle::stop` sends `StoppedLeading` and releases at once, so it
//! is called last. While COMMAND is being stopped the elector keeps
//! renewing, so `--grace` may be long; a Lease seen taken over (another
//! holder, freed by another writer, deleted) kills it at once, whatever
//! is being done.
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
use std::time::Duration;

use lease_elector::events::EventRecorder;
use lease_elector::session::{Action, End, Input, Session, SessionConfig};
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
use crate::procs::{signal_from_raw, Signal};
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
                        sig => signal_from_raw(sig).map_or(Msg::Child, Msg::Signal),
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
        Driver::new(&args, probe, clock).run(&rx)?
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

/// With COMMAND: run it while leading. The decisions are the library's
/// [`Session`] (the seeded simulation runs the same); this carries them
/// out on real processes.
struct Driver {
    command: Vec<OsString>,
    level: LevelFilter,
    session: Session,
    /// The elector's clock: every instant here is on it.
    clock: Arc<dyn Clock>,
    child: Option<Supervised>,
    /// An input that came while COMMAND's end was told first.
    stashed: Option<Input>,
}

impl Driver {
    fn new(args: &Args, probe: Probe, clock: Arc<dyn Clock>) -> Driver {
        let timings = args.elector_config();
        let config = SessionConfig {
            grace: args.grace,
            restart: args.restart,
            acquire_timeout: args.acquire_timeout.is_some(),
            lease_duration: timings.lease_duration,
            renew_deadline: timings.renew_deadline,
        };
        Driver {
            command: args.command.clone(),
            level: log::max_level(),
            session: Session::new(config, probe),
            clock,
            child: None,
            stashed: None,
        }
    }

    /// Until the session ends: feed it what happens, do what it says.
    fn run(&mut self, rx: &Receiver<Msg>) -> Result<End, BoxError> {
        let mut input = Input::Tick;
        loop {
            let now = self.clock.now();
            for action in self.session.step(now, input) {
                self.act(action)?;
            }
            if let Some(end) = self.session.end() {
                return Ok(end.clone());
            }
            input = self.next_input(rx);
        }
    }

    fn act(&mut self, action: Action) -> Result<(), BoxError> {
        match action {
            Action::Start { term, kill_after } => {
                let child = Supervised::start(
                    &self.command,
                    self.level,
                    &term_env(&term),
                    &term,
                    &*self.clock,
                    kill_after,
                )
                .map_err(|e| format!("cannot start COMMAND: {e}"))?;
                self.child = Some(child);
            }
            Action::Signal(sig) => {
                if let Some(child) = &mut self.child {
                    child.signal(sig);
                }
            }
            Action::Relay(until) => {
                if let Some(child) = &mut self.child {
                    child.relay(until, &*self.clock);
                }
            }
            Action::KillBelow => {
                // The supervisor is left for `child` to reap (when dropped).
                let pid = self.child.as_ref().map(Supervised::pid);
                let n = procs::kill_all_below(pid.as_slice());
                log::error!("killed every process below lease-elect ({n} processes)");
            }
            Action::Log(level, line) => match line.strip_prefix("leading (term") {
                // COMMAND named as the user gave it.
                Some(rest) => log::log!(
                    level,
                    "leading (term{}",
                    rest.replace("COMMAND", &supervise::show(&self.command).to_string())
                ),
                None => log::log!(level, "{line}"),
            },
        }
        Ok(())
    }

    /// What happens next: COMMAND's end (looked at first, also after a
    /// wait: a process that was stopped and thawed finds the supervisor's
    /// doing before its own), a message, or the time the session asked to
    /// be woken at.
    fn next_input(&mut self, rx: &Receiver<Msg>) -> Input {
        if let Some(exited) = self.exited() {
            return exited;
        }
        if let Some(input) = self.stashed.take() {
            return input;
        }
        let msg = match self.session.wake_in(self.clock.now()) {
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(wait) => rx.recv_timeout(wait),
        };
        let input = match msg {
            Ok(Msg::Event(LeaderEvent::StartedLeading { term, .. })) => Input::Started(term),
            Ok(Msg::Signal(sig)) => Input::Signal(sig),
            Ok(Msg::ElectorEnded) | Err(RecvTimeoutError::Disconnected) => Input::ElectorEnded,
            Ok(Msg::Suspend) => {
                ignored_suspend();
                Input::Tick
            }
            Ok(_) | Err(RecvTimeoutError::Timeout) => Input::Tick,
        };
        match self.exited() {
            Some(exited) => {
                self.stashed = Some(input);
                exited
            }
            None => input,
        }
    }

    /// COMMAND's end, once: its supervisor's status.
    fn exited(&mut self) -> Option<Input> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => {
                self.child = None;
                Some(Input::Exited(command_status(status)))
            }
            Ok(None) => None,
            Err(e) => {
                log::error!("waiting for COMMAND's supervisor: {e}");
                None
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
