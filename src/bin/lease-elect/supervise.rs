//! COMMAND runs under a supervisor: `lease-elect` re-executed as
//! `lease-elect --supervise LEVEL -- COMMAND [ARGS...]`, whose stdin is a
//! pipe that only `lease-elect` holds.
//!
//! # Why a supervisor
//!
//! Guarded work must have stopped before anyone else can take the lease.
//! While `lease-elect` lives it sees to that itself (`run.rs`). If it is
//! killed (`kill -9`, the OOM killer, a panic, which aborts), a plain child
//! would be orphaned and keep running while another replica takes over one
//! lease duration later. The kernel closes the dead process's end of the
//! pipe at once, the supervisor reads end-of-file and kills everything
//! below it with SIGKILL at once: COMMAND ends within milliseconds of
//! `lease-elect`.
//!
//! That is soon enough. While `lease-elect` lives, COMMAND runs only until
//! a margin (1 s, or half of `leaseDuration - renewDeadline`) before the
//! lease could expire for anyone else, who time expiry from when *they*
//! saw our last renew (`run.rs`): while leading, that moment is more than
//! `leaseDuration - renewDeadline` away (5 s at 15s/10s); while COMMAND is
//! being stopped after a loss, at least the margin. A crash at any moment
//! thus leaves at least the margin between COMMAND's SIGKILL, milliseconds
//! after the crash, and the earliest takeover.
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
//! `PR_SET_PDEATHSIG` is not used: end-of-file on the pipe says the same
//! (and is not tied, as PDEATHSIG is, to the *thread* that forked), and a
//! death signal could only end the supervisor, not what it must kill. It
//! cannot reach COMMAND either without code between fork and exec, which
//! would need `unsafe`. `lease-elect` is a subreaper too: if the supervisor
//! itself is killed, COMMAND's processes come to `lease-elect`, which kills
//! them all before it releases (`run.rs`). And `lease-elect` does not rely
//! on the supervisor alone to kill COMMAND: if it has not reported
//! COMMAND's end shortly after `KILL` was ordered (COMMAND stopped it with
//! `kill -STOP $PPID`, or it hangs), `lease-elect` SIGKILLs the supervisor
//! and every process below it itself, and reaps them.
//!
//! Not covered: a frozen (SIGSTOP, cgroup freezer) `lease-elect`, as for
//! any lease, and both `lease-elect` and the supervisor killed at once
//! (e.g. SIGKILL to the whole container but PID 1, which the kernel does
//! not do: a container's processes die together).
//!
//! # The protocol
//!
//! `lease-elect` writes `TERM`, `INT` or `KILL`, one per line; the
//! supervisor sends that signal to COMMAND's process group (COMMAND leads a
//! group of its own, so a shell's children get it too) and to each process
//! below it that left that group. End-of-file means `KILL`. When COMMAND
//! ends, what is left below the supervisor is killed. The supervisor exits
//! with COMMAND's status: its code, or 128 + the signal that killed it, 127
//! when COMMAND was not found and 126 when it could not be run. A SIGTERM
//! or SIGINT sent to the supervisor itself is passed on as `lease-elect`'s
//! orders are.

use std::ffi::OsString;
use std::io::{self, BufRead, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitCode, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use log::LevelFilter;
use signal_hook::consts::{SIGCHLD, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::logger;
use crate::procs::{self, Signal};

/// The first argument that makes `lease-elect` a supervisor.
pub const FLAG: &str = "--supervise";

/// `lease-elect`'s side: the supervisor of one run of COMMAND.
///
/// Dropping it closes the pipe, so the supervisor kills COMMAND, and waits
/// for the supervisor: once dropped, COMMAND has ended, on every path out.
#[derive(Debug)]
pub struct Supervised {
    process: Child,
    control: Option<ChildStdin>,
    status: Option<ExitStatus>,
}

impl Supervised {
    /// Start COMMAND under a supervisor that logs at `level`, with `env`
    /// added to the environment it passes on.
    pub fn start(
        command: &[OsString],
        level: LevelFilter,
        env: &[(&str, String)],
    ) -> io::Result<Supervised> {
        let mut process = Command::new(own_executable()?)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .arg0("lease-elect")
            .arg(FLAG)
            .arg(level.as_str())
            .arg("--")
            .args(command)
            .stdin(Stdio::piped())
            // Away from the terminal's foreground group: a Ctrl-C reaches
            // lease-elect alone, which passes it on with the grace period.
            .process_group(0)
            .spawn()?;
        let control = process.stdin.take();
        Ok(Supervised {
            process,
            control,
            status: None,
        })
    }

    /// Ask for `signal` to be sent to COMMAND's process group.
    pub fn signal(&mut self, signal: Signal) {
        let Some(pipe) = &mut self.control else {
            return;
        };
        if let Err(e) = writeln!(pipe, "{}", signal.name()).and_then(|()| pipe.flush()) {
            // The supervisor is gone; try_wait reports how it ended.
            log::debug!("telling the supervisor {signal}: {e}");
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
    /// `lease-elect` is gone (end-of-file on the pipe).
    Orphaned,
    /// SIGCHLD: COMMAND may have ended.
    Reap,
}

/// The supervisor process: `args` are what follows [`FLAG`].
pub fn main(args: impl Iterator<Item = OsString>) -> ExitCode {
    let args: Vec<OsString> = args.collect();
    let (level, command) = match args.as_slice() {
        [level, dashes, command @ ..] if dashes == "--" && !command.is_empty() => {
            (level.to_str().and_then(|l| l.parse().ok()), command)
        }
        _ => {
            eprintln!("lease-elect: {FLAG} is internal: {FLAG} LEVEL -- COMMAND [ARGS...]");
            return ExitCode::from(2);
        }
    };
    logger::init(&logger::SUPERVISOR, level.unwrap_or(LevelFilter::Warn));
    // Before COMMAND starts: from now on nothing it starts can leave us.
    if let Err(e) = procs::become_subreaper() {
        log::warn!(
            "cannot become a child subreaper ({e}): a process COMMAND starts in a session of its own may outlive it"
        );
    }
    let (tx, rx) = mpsc::channel();
    // Listening before COMMAND starts, so that its SIGCHLD cannot be missed.
    let signals = Signals::new([SIGCHLD, SIGTERM, SIGINT]);
    let mut child = match Command::new(&command[0])
        .args(&command[1..])
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            let code = if e.kind() == io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            log::error!("cannot run {}: {e}", show(command));
            return ExitCode::from(code);
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
                match Signal::from_name(line.trim()) {
                    Some(sig) => {
                        let _ = control.send(Order::Signal(sig));
                    }
                    None => log::warn!("ignoring {:?} from lease-elect", line),
                }
            }
            let _ = control.send(Order::Orphaned);
        });
    // Without SIGCHLD (it cannot fail in practice) COMMAND's end is noticed
    // by polling.
    let mut poll = Duration::from_secs(1);
    match signals {
        Ok(mut signals) => {
            let _ = thread::Builder::new()
                .name("lease-elect/signals".into())
                .spawn(move || {
                    for sig in signals.forever() {
                        let order = match Signal::from_raw(sig) {
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
            poll = Duration::from_millis(50);
        }
    }
    if let Err(e) = reader {
        // Without the pipe we cannot notice lease-elect's death.
        log::error!("cannot read lease-elect's orders ({e}); killing COMMAND");
        kill_now(pid);
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
        // been reused: signalling it is safe.
        match rx.recv_timeout(poll) {
            Ok(Order::Signal(Signal::Kill)) => kill_now(pid),
            Ok(Order::Orphaned) => {
                log::warn!("lease-elect is gone; killing {} now", show(command));
                kill_now(pid);
            }
            Ok(Order::Signal(sig)) => pass_on(pid, sig),
            Ok(Order::Reap) | Err(_) => {
                // Orphans that ended while COMMAND runs; never COMMAND
                // itself, whose status is `child`'s.
                procs::reap_orphans(&[pid]);
            }
        }
    }
}

/// SIGKILL COMMAND's process group and every other process below us.
fn kill_now(pid: u32) {
    if let Err(e) = procs::signal_group(pid, Signal::Kill) {
        log::debug!("killing process group {pid}: {e}");
    }
    for p in procs::below(procs::own_pid()) {
        if !p.zombie {
            let _ = procs::signal(p.pid, Signal::Kill);
        }
    }
}

/// `signal` to COMMAND's process group, and to each process below us that
/// left it (a process group or session of its own); SIGKILL for all when
/// the group cannot be signalled.
fn pass_on(pid: u32, signal: Signal) {
    if let Err(e) = procs::signal_group(pid, signal) {
        log::warn!("cannot send {signal} to process group {pid} ({e}); killing it");
        kill_now(pid);
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
