//! COMMAND runs under a supervisor: `lease-elect` re-executed as
//! `lease-elect --supervise LEVEL UNTIL KILL_AFTER -- COMMAND [ARGS...]`,
//! whose stdin is a pipe that only `lease-elect` holds.
//!
//! # Why a supervisor
//!
//! Guarded work must have stopped before anyone else can take the lease.
//! While `lease-elect` runs it sees to that itself (`run.rs`). But it may
//! not run: killed (`kill -9`, the OOM killer, a panic, which aborts),
//! stopped (SIGSTOP, SIGTTOU, a debugger), or stuck. A plain child would
//! keep running meanwhile, while another replica takes over one lease
//! duration later. So the supervisor, which runs where COMMAND runs, holds
//! the term's end itself (a dead-man switch):
//!
//! - `lease-elect` hands it the term's end (`Term::valid_until`) at start
//!   and after every renew, as an instant on `CLOCK_BOOTTIME`
//!   (`boottime.rs`: it counts a suspend, and a line read late cannot make
//!   it later). When that instant passes without a newer one, the
//!   supervisor does what `lease-elect` does with a term that ended: SIGTERM
//!   to COMMAND's group (`session::END_SLACK` later, so that a renew that landed
//!   just before the end can be passed on first), then SIGKILL to the group
//!   and everything below it `KILL_AFTER` after the end: the `--grace`, cut
//!   to end one and a half margins (a margin is 1 s, or half of
//!   `leaseDuration - renewDeadline`) before anyone else could take the
//!   lease, the SIGKILL `lease-elect` orders itself. When the supervisor
//!   does not report COMMAND's end within half a margin of that SIGKILL
//!   (stopped, hung), `lease-elect` kills it and everything below itself:
//!   either way, and whatever state `lease-elect` is in, COMMAND has ended
//!   a margin before another replica can start.
//! - If `lease-elect` dies, the kernel closes its end of the pipe: the
//!   supervisor reads end-of-file and kills everything below it at once.
//!
//! The supervisor acts first and logs after: its log lines go through a
//! bounded queue (`outlet.rs`) to a stderr that may not be drained, and a
//! kill never waits for one.
//!
//! # Everything COMMAND started
//!
//! The supervisor is a child subreaper (`PR_SET_CHILD_SUBREAPER`, see
//! `procs.rs`): whatever COMMAND starts stays below the supervisor when its
//! parent dies, also in a process group or session of its own (`setsid`),
//! so none of it can slip away to PID 1. Signals go out with kill(2) (via
//! rustix, a safe wrapper: nothing is needed on `PATH`, a `FROM scratch`
//! image works as well as any). When COMMAND has ended, for whatever
//! reason, every process still below the supervisor gets SIGKILL and is
//! reaped, in a loop until none is left; only then does the supervisor
//! exit, and `lease-elect` releases the lease only after it has reaped the
//! supervisor. So nothing COMMAND started runs when the lease is released.
//!
//! The supervisor itself does not use `PR_SET_PDEATHSIG`: end-of-file on
//! the pipe says the same (and is not tied, as PDEATHSIG is, to the
//! *thread* that forked), and a death signal could only end the
//! supervisor, not what it must kill. COMMAND does: it starts as this
//! executable (`--exec-dying-with`), which asks for SIGKILL on the
//! supervisor's death and then execs COMMAND (the request survives the
//! exec), so COMMAND ends with its supervisor even when `lease-elect`
//! cannot act; no code runs between fork and exec, which would need
//! `unsafe`. `lease-elect` is a subreaper too: if the supervisor itself is
//! killed, COMMAND's processes come to `lease-elect`, which kills them all
//! before it releases (`run.rs`). And `lease-elect` does not rely on the
//! supervisor alone to kill COMMAND: if it has not reported COMMAND's end
//! shortly after `KILL` was ordered (COMMAND stopped it with `kill -STOP
//! $PPID`, or it hangs), `lease-elect` SIGKILLs the supervisor and every
//! process below it itself, and reaps them.
//!
//! Covered thus: `lease-elect` killed, stopped, frozen or stuck while the
//! supervisor runs; the supervisor killed, stopped or stuck while
//! `lease-elect` runs; both gone at once (the supervisor killed while
//! `lease-elect` is stopped), COMMAND itself. Not covered: what COMMAND
//! started, in that case, until `lease-elect` runs again (it is their
//! subreaper), where only a store that checks `LEASE_ELECT_TERM` keeps
//! their late writes out.
//!
//! # The protocol
//!
//! `UNTIL` and `KILL_AFTER` on the command line are nanoseconds: the
//! term's end on `CLOCK_BOOTTIME`, and the time from it to SIGKILL. Then
//! `lease-elect` writes one order per line: `TERM`, `INT` or `KILL`, which
//! the supervisor sends to COMMAND's process group (COMMAND leads a group
//! of its own, so a shell's children get it too) and to each process below
//! it that left that group; or `UNTIL N`, the term's new end. End-of-file
//! means `KILL`. When COMMAND ends, what is left below the supervisor is
//! killed. The supervisor exits with COMMAND's status: its code, or 128 +
//! the signal that killed it, 127 when COMMAND was not found and 126 when
//! it could not be run. A SIGTERM or SIGINT sent to the supervisor itself
//! is passed on as `lease-elect`'s orders are.

use std::ffi::OsString;
use std::io::{self, BufRead, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitCode, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use lease_elector::session::DeadMan;
use lease_elector::{Clock, Term};
use log::LevelFilter;
use signal_hook::consts::{SIGCHLD, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::boottime;
use crate::logger;
use crate::procs::{self, Signal};

/// The first argument that makes `lease-elect` a supervisor.
pub const FLAG: &str = "--supervise";

/// How long the supervisor waits for a stuck stderr before it exits: its
/// exit is what lets `lease-elect` release the lease.
pub const FLUSH_WITHIN: Duration = Duration::from_millis(50);

/// `lease-elect`'s side: the supervisor of one run of COMMAND.
///
/// Dropping it closes the pipe, so the supervisor kills COMMAND, and waits
/// for the supervisor: once dropped, COMMAND has ended, on every path out.
#[derive(Debug)]
pub struct Supervised {
    process: Child,
    control: Option<ChildStdin>,
    status: Option<ExitStatus>,
    /// The term's end the supervisor was last told, on the elector's clock.
    told: Instant,
}

/// `d` in nanoseconds, as the protocol writes instants and durations.
fn nanos(d: Duration) -> String {
    d.as_nanos().to_string()
}

/// The instant on `CLOCK_BOOTTIME` of `at` on the elector's `clock`.
fn on_boottime(at: Instant, clock: &dyn Clock) -> Duration {
    boottime::now() + at.saturating_duration_since(clock.now())
}

impl Supervised {
    /// Start COMMAND under a supervisor that logs at `level`, with `env`
    /// added to the environment it passes on, and that ends COMMAND by
    /// itself once `term`'s end (`valid_until`, on the elector's `clock`)
    /// has passed: SIGTERM, then SIGKILL `kill_after` after the end.
    pub fn start(
        command: &[OsString],
        level: LevelFilter,
        env: &[(&str, String)],
        term: &Term,
        clock: &dyn Clock,
        kill_after: Duration,
    ) -> io::Result<Supervised> {
        let told = term.valid_until();
        let mut process = Command::new(own_executable()?)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .arg0("lease-elect")
            .arg(FLAG)
            .arg(level.as_str())
            .arg(nanos(on_boottime(told, clock)))
            .arg(nanos(kill_after))
            .arg("--")
            .args(command)
            .stdin(Stdio::piped())
            // Away from the terminal's foreground group: a Ctrl-C reaches
            // lease-elect alone, which passes it on with the grace period.
            .process_group(0)
            .spawn()?;
        let control = process.stdin.take();
        if let Some(pipe) = &control {
            // Only lease-elect holds this end of the pipe, so O_NONBLOCK
            // changes no one else's writes: an order to a supervisor that
            // does not read (stopped) fails rather than blocking the main
            // loop, which then kills the supervisor itself (`run.rs`).
            if let Err(e) = rustix::io::ioctl_fionbio(pipe, true) {
                log::warn!("cannot make the pipe to COMMAND's supervisor non-blocking: {e}");
            }
        }
        Ok(Supervised {
            process,
            control,
            status: None,
            told,
        })
    }

    fn order(&mut self, line: &str) {
        let Some(pipe) = &mut self.control else {
            return;
        };
        // One write of a few bytes: a pipe takes it whole or not at all.
        if let Err(e) = pipe.write_all(format!("{line}\n").as_bytes()) {
            // Gone (try_wait reports how it ended), or not reading.
            log::debug!("telling the supervisor {line}: {e}");
        }
    }

    /// Ask for `signal` to be sent to COMMAND's process group.
    pub fn signal(&mut self, signal: Signal) {
        self.order(signal.name());
    }

    /// Tell the supervisor the term's end `until` (on the elector's
    /// `clock`), if it moved (a renew) since it was last told.
    pub fn relay(&mut self, until: Instant, clock: &dyn Clock) {
        if until != self.told {
            self.told = until;
            self.order(&format!("UNTIL {}", nanos(on_boottime(until, clock))));
        }
    }

    /// The supervisor's pid: its own until `try_wait` has reaped it.
    pub fn pid(&self) -> u32 {
        self.process.id()
    }

    /// The supervisor's exit status, once it has ended.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = self.process.try_wait()?;
        }
        Ok(self.status)
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        self.control = None;
        if let Err(e) = self.process.wait() {
            log::error!("waiting for COMMAND's supervisor: {e}");
        }
    }
}

/// This very executable, even if its file was replaced since it started.
fn own_executable() -> io::Result<PathBuf> {
    let proc = Path::new("/proc/self/exe");
    if proc.exists() {
        Ok(proc.to_path_buf())
    } else {
        std::env::current_exe()
    }
}

/// Where `program` would be found as `Command::new(program)` finds it: a
/// path as it is, a bare name on `$PATH`. Err with the exit status to use
/// (127 not found, 126 not an executable file) and why.
pub fn find_program(program: &OsString) -> Result<PathBuf, (u8, String)> {
    let name = Path::new(program);
    let candidates: Vec<PathBuf> = if program.to_string_lossy().contains('/') {
        vec![name.to_path_buf()]
    } else {
        let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
        std::env::split_paths(&path).map(|d| d.join(name)).collect()
    };
    let mut not_executable = None;
    for c in candidates {
        match std::fs::metadata(&c) {
            Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => return Ok(c),
            Ok(_) => not_executable = Some(c),
            Err(_) => {}
        }
    }
    Err(match not_executable {
        Some(c) => (126, format!("{} is not an executable file", c.display())),
        None => (127, format!("{} not found", name.display())),
    })
}

/// What the supervisor's threads tell its main loop.
enum Order {
    Signal(Signal),
    /// The term's new end, on `CLOCK_BOOTTIME`.
    Until(Duration),
    /// `lease-elect` is gone (end-of-file on the pipe).
    Orphaned,
    /// SIGCHLD: COMMAND may have ended.
    Reap,
    /// The alarm rang: a step of the term's end may be due.
    Alarm,
}

/// One order line from `lease-elect`.
fn parse_order(line: &str) -> Option<Order> {
    match line.split_once(' ') {
        Some(("UNTIL", n)) => n
            .parse()
            .ok()
            .map(|n| Order::Until(Duration::from_nanos(n))),
        _ => Signal::from_name(line).map(Order::Signal),
    }
}

/// Act on the time `now` (the dead-man switch, `session::DeadMan`); when
/// the next step is due, if any.
fn enforce(term: &mut DeadMan, pid: u32, now: Duration) -> Option<Duration> {
    let (send, next) = term.enforce(now);
    match send {
        Some(Signal::Kill) => {
            kill_now(pid);
            log::warn!(
                "the term ended {} ago and COMMAND still ran: killed it and everything below it",
                show_duration(now.saturating_sub(term.until))
            );
        }
        Some(sig) => {
            pass_on(pid, sig);
            log::warn!(
                "the term ended {} ago and lease-elect passed on no renew (stopped, frozen or stuck?): sent SIGTERM to COMMAND, SIGKILL in {}",
                show_duration(now.saturating_sub(term.until)),
                show_duration(next.unwrap_or(now).saturating_sub(now))
            );
        }
        None => {}
    }
    next
}

fn show_duration(d: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_millis(
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
    ))
}

/// The first argument that makes `lease-elect` COMMAND's first step:
/// `lease-elect --exec-dying-with PID -- COMMAND [ARGS...]`.
pub const EXEC_FLAG: &str = "--exec-dying-with";

/// 127 when the program was not found, 126 when it could not be run, as a
/// shell says.
fn exec_failure_code(e: &io::Error) -> u8 {
    if e.kind() == io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

/// COMMAND's first step, in the process the supervisor started (`args`
/// follow [`EXEC_FLAG`]): ask for SIGKILL when the supervisor `PID` dies
/// (`PR_SET_PDEATHSIG`, kept across the exec), then become COMMAND. No
/// `unsafe` code runs between fork and exec this way: the request is made
/// by this program, before an exec that keeps it. It returns only when
/// COMMAND cannot be run, or the supervisor died before the request held.
pub fn exec_dying_with_parent(args: impl Iterator<Item = OsString>) -> ExitCode {
    let args: Vec<OsString> = args.collect();
    let (parent, command) = match args.as_slice() {
        [pid, dashes, command @ ..] if dashes == "--" && !command.is_empty() => {
            match pid.to_str().and_then(|p| p.parse::<u32>().ok()) {
                Some(pid) => (pid, command),
                None => return usage(),
            }
        }
        _ => return usage(),
    };
    let logger = || logger::init(logger::SUPERVISOR, LevelFilter::Warn, FLUSH_WITHIN);
    if let Err(e) = procs::die_with_parent() {
        logger();
        log::warn!(
            "cannot ask to end with the supervisor ({e}): {} may outlive it when lease-elect is stopped too",
            show(command)
        );
    }
    // The supervisor may have died before the request: then our parent is
    // another process, and nothing would end us.
    if procs::parent_pid() != Some(parent) {
        return ExitCode::from(137);
    }
    let e = Command::new(&command[0]).args(&command[1..]).exec();
    logger();
    log::error!("cannot run {}: {e}", show(command));
    log::logger().flush();
    ExitCode::from(exec_failure_code(&e))
}

/// The supervisor process: `args` are what follows [`FLAG`].
pub fn main(args: impl Iterator<Item = OsString>) -> ExitCode {
    let args: Vec<OsString> = args.collect();
    let number = |a: &OsString| a.to_str().and_then(|n| n.parse::<u64>().ok());
    let (level, until, kill_after, command) = match args.as_slice() {
        [level, until, kill_after, dashes, command @ ..]
            if dashes == "--" && !command.is_empty() =>
        {
            match (number(until), number(kill_after)) {
                (Some(u), Some(k)) => (
                    level.to_str().and_then(|l| l.parse().ok()),
                    Duration::from_nanos(u),
                    Duration::from_nanos(k),
                    command,
                ),
                _ => return usage(),
            }
        }
        _ => return usage(),
    };
    logger::init(
        logger::SUPERVISOR,
        level.unwrap_or(LevelFilter::Warn),
        FLUSH_WITHIN,
    );
    let code = supervise(command, DeadMan::new(until, kill_after));
    log::logger().flush();
    code
}

fn usage() -> ExitCode {
    eprintln!(
        "lease-elect: {FLAG} and {EXEC_FLAG} are internal: {FLAG} LEVEL UNTIL KILL_AFTER -- COMMAND [ARGS...], {EXEC_FLAG} PID -- COMMAND [ARGS...]"
    );
    ExitCode::from(2)
}

fn supervise(command: &[OsString], mut term: DeadMan) -> ExitCode {
    // Before COMMAND starts: from now on nothing it starts can leave us.
    if let Err(e) = procs::become_subreaper() {
        log::warn!(
            "cannot become a child subreaper ({e}): a process COMMAND starts in a session of its own may outlive it"
        );
    }
    let (tx, rx) = mpsc::channel();
    // Listening before COMMAND starts, so that its SIGCHLD cannot be missed.
    let signals = Signals::new([SIGCHLD, SIGTERM, SIGINT]);
    // COMMAND starts as this executable (`exec_dying_with_parent`), which
    // asks the kernel for SIGKILL when we die, then becomes COMMAND: so it
    // ends with us even when lease-elect cannot act (stopped, killed).
    // From the main thread, which lives as long as we do: the parent-death
    // signal follows the thread that forked.
    let mut child = match own_executable().and_then(|exe| {
        Command::new(exe)
            .arg0("lease-elect")
            .arg(EXEC_FLAG)
            .arg(procs::own_pid().to_string())
            .arg("--")
            .args(command)
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
    }) {
        Ok(child) => child,
        Err(e) => {
            log::error!("cannot run {}: {e}", show(command));
            return ExitCode::from(exec_failure_code(&e));
        }
    };
    let pid = child.id();
    log::info!("started {} (pid {pid})", show(command));

    let control = tx.clone();
    let reader = thread::Builder::new()
        .name("lease-elect/control".into())
        .spawn(move || {
            for line in io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                match parse_order(line.trim()) {
                    Some(order) => {
                        let _ = control.send(order);
                    }
                    None => log::warn!("ignoring {:?} from lease-elect", line),
                }
            }
            let _ = control.send(Order::Orphaned);
        });
    // Without SIGCHLD or the alarm (neither fails in practice) COMMAND's
    // end and the term's are noticed by polling.
    let mut poll = Duration::from_secs(1);
    let ring = tx.clone();
    let alarm =
        boottime::Alarm::start("lease-elect/alarm", move || ring.send(Order::Alarm).is_ok())
            .map_err(|e| {
                log::warn!(
                    "cannot set a timer on CLOCK_BOOTTIME ({e}); polling for the term's end"
                );
                poll = Duration::from_millis(20);
            })
            .ok();
    match signals {
        Ok(mut signals) => {
            let _ = thread::Builder::new()
                .name("lease-elect/signals".into())
                .spawn(move || {
                    for sig in signals.forever() {
                        let order = match procs::signal_from_raw(sig) {
                            Some(s) => Order::Signal(s),
                            None => Order::Reap,
                        };
                        if tx.send(order).is_err() {
                            break;
                        }
                    }
                });
        }
        Err(e) => {
            log::warn!("cannot listen for signals ({e}); polling for COMMAND's end");
            poll = poll.min(Duration::from_millis(50));
        }
    }
    if let Err(e) = reader {
        // Without the pipe we cannot notice lease-elect's death.
        kill_now(pid);
        log::error!("cannot read lease-elect's orders ({e}); killed COMMAND");
    }

    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                // COMMAND is reaped: every other process below us is a
                // leftover, and no wait can take a status std owns.
                let left = procs::kill_all_below(&[]);
                if left > 0 {
                    log::info!("killed {left} processes {} left behind", show(command));
                }
                return exit_code(status, command);
            }
            Ok(None) => {}
            Err(e) => log::error!("waiting for {}: {e}", show(command)),
        }
        // COMMAND is not reaped yet, so its pid (and group id) cannot have
        // been reused: signalling it is safe. The term's end first, whatever
        // lease-elect is doing.
        if let Some(next) = enforce(&mut term, pid, boottime::now()) {
            if let Some(alarm) = &alarm {
                if let Err(e) = alarm.set(next) {
                    log::warn!("cannot set the timer for the term's end ({e}); polling");
                    poll = poll.min(Duration::from_millis(20));
                }
            }
        }
        match rx.recv_timeout(poll) {
            Ok(Order::Orphaned) => {
                kill_now(pid);
                term.killed = true;
                log::warn!("lease-elect is gone; killed {}", show(command));
            }
            // COMMAND already had SIGTERM at the term's end: once is enough
            // (a second one means "now" to many programs).
            Ok(Order::Signal(sig)) => match term.ordered(sig) {
                Some(Signal::Kill) => kill_now(pid),
                Some(sig) => pass_on(pid, sig),
                None => {}
            },
            Ok(Order::Until(until)) => term.until = until,
            Ok(Order::Reap | Order::Alarm) | Err(_) => {
                // Orphans that ended while COMMAND runs; never COMMAND
                // itself, whose status is `child`'s.
                procs::reap_orphans(&[pid]);
            }
        }
    }
}

/// SIGKILL COMMAND's process group and every other process below us.
fn kill_now(pid: u32) {
    let group = procs::signal_group(pid, Signal::Kill);
    for p in procs::below(procs::own_pid()) {
        if !p.zombie {
            let _ = procs::signal(p.pid, Signal::Kill);
        }
    }
    if let Err(e) = group {
        log::debug!("killing process group {pid}: {e}");
    }
}

/// `signal` to COMMAND's process group, and to each process below us that
/// left it (a process group or session of its own); SIGKILL for all when
/// the group cannot be signalled.
fn pass_on(pid: u32, signal: Signal) {
    if let Err(e) = procs::signal_group(pid, signal) {
        kill_now(pid);
        log::warn!("cannot send {signal} to process group {pid} ({e}); killed it");
        return;
    }
    log::debug!("sent {signal} to process group {pid}");
    for p in procs::below(procs::own_pid()) {
        if p.pgid != pid && !p.zombie {
            let _ = procs::signal(p.pid, signal);
        }
    }
}

fn exit_code(status: ExitStatus, command: &[OsString]) -> ExitCode {
    let code = match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    };
    log::info!("{} ended: {status}", show(command));
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// COMMAND as a log line shows it.
pub fn show(command: &[OsString]) -> String {
    let words: Vec<_> = command.iter().map(|w| w.to_string_lossy()).collect();
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_are_a_signal_name_or_the_terms_new_end_in_nanoseconds() {
        assert!(matches!(
            parse_order("KILL"),
            Some(Order::Signal(Signal::Kill))
        ));
        assert!(matches!(
            parse_order("TERM"),
            Some(Order::Signal(Signal::Term))
        ));
        assert!(matches!(
            parse_order("UNTIL 1500000000"),
            Some(Order::Until(d)) if d == Duration::from_millis(1500)
        ));
        for bad in ["UNTIL", "UNTIL -1", "UNTIL 1.5", "STOP", ""] {
            assert!(parse_order(bad).is_none(), "{bad:?}");
        }
    }
}
