//! The processes below this one: found through `/proc`, signalled with
//! kill(2), reaped with pid-specific waits.
//!
//! Both `lease-elect` and its supervisor are child subreapers
//! (`PR_SET_CHILD_SUBREAPER`): a process that COMMAND (or anything below
//! it) started stays a descendant when its parent dies, also when it left
//! COMMAND's process group or session (`setsid`), instead of being handed
//! to PID 1. So "everything COMMAND started" is exactly "every process
//! below the supervisor", which `/proc`'s parent links tell.
//!
//! Reaping never uses `waitpid(-1)`: std's `Child` owns the exit status of
//! the process it started (COMMAND, the supervisor, an exec plugin), and a
//! wait for any child could take it first. Only zombies that the caller
//! names as not owned are reaped, each by its pid.

use std::collections::HashMap;
use std::io;
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal as Sig, WaitOptions};

use signal_hook::consts::{SIGINT, SIGTERM};

/// What can be asked of COMMAND (the library's, which the session decides with).
pub use lease_elector::session::Signal;

/// SIGTERM and SIGINT, as signal-hook reports them.
pub fn signal_from_raw(sig: i32) -> Option<Signal> {
    match sig {
        SIGTERM => Some(Signal::Term),
        SIGINT => Some(Signal::Int),
        _ => None,
    }
}

/// One process, as `/proc/PID/stat` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    pub ppid: u32,
    pub pgid: u32,
    /// Ended, not yet reaped by its parent.
    pub zombie: bool,
}

fn raw_pid(pid: u32) -> Option<Pid> {
    // Never 0 or negative: kill(2) would read those as process groups.
    i32::try_from(pid).ok().and_then(Pid::from_raw)
}

fn sig(signal: Signal) -> Sig {
    match signal {
        Signal::Term => Sig::TERM,
        Signal::Int => Sig::INT,
        Signal::Kill => Sig::KILL,
    }
}

/// This process's pid.
pub fn own_pid() -> u32 {
    std::process::id()
}

/// Become a child subreaper: orphans below this process are reparented to
/// it rather than to PID 1 (Linux 3.4).
pub fn become_subreaper() -> io::Result<()> {
    rustix::process::set_child_subreaper(raw_pid(own_pid()))?;
    Ok(())
}

/// Ask the kernel for SIGKILL when the parent (the thread that forked
/// this process) dies; kept across an exec of a program that gains no
/// privileges.
pub fn die_with_parent() -> io::Result<()> {
    rustix::process::set_parent_process_death_signal(Some(Sig::KILL))?;
    Ok(())
}

/// This process's parent, as the kernel sees it now.
pub fn parent_pid() -> Option<u32> {
    rustix::process::getppid().and_then(|p| u32::try_from(p.as_raw_nonzero().get()).ok())
}

/// `kill(pid, signal)`.
pub fn signal(pid: u32, signal: Signal) -> io::Result<()> {
    let pid = raw_pid(pid).ok_or_else(|| io::Error::other("not a pid"))?;
    rustix::process::kill_process(pid, sig(signal))?;
    Ok(())
}

/// `kill(-pgid, signal)`.
pub fn signal_group(pgid: u32, signal: Signal) -> io::Result<()> {
    let pgid = raw_pid(pgid).ok_or_else(|| io::Error::other("not a process group"))?;
    rustix::process::kill_process_group(pgid, sig(signal))?;
    Ok(())
}

/// `/proc/PID/stat`, or `None` when the process is gone.
fn stat(pid: u32) -> Option<Proc> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold anything, `)` too.
    let rest = text.get(text.rfind(')')? + 1..)?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgid = fields.next()?.parse().ok()?;
    Some(Proc {
        pid,
        ppid,
        pgid,
        zombie: matches!(state, "Z" | "X"),
    })
}

/// Every process below `root` (children, their children, ...), zombies
/// included, parents before their children.
pub fn below(root: u32) -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children: HashMap<u32, Vec<Proc>> = HashMap::new();
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        if let Some(p) = stat(pid) {
            children.entry(p.ppid).or_default().push(p);
        }
    }
    let mut found = Vec::new();
    let mut next = vec![root];
    while let Some(parent) = next.pop() {
        for p in children.remove(&parent).unwrap_or_default() {
            next.push(p.pid);
            found.push(p);
        }
    }
    found
}

/// Reap this process's zombie children, except `owned` (a child whose
/// exit status std's `Child` is to collect); how many were reaped.
pub fn reap_orphans(owned: &[u32]) -> usize {
    let me = own_pid();
    below(me)
        .into_iter()
        .filter(|p| p.ppid == me && p.zombie && !owned.contains(&p.pid))
        .filter(|p| reap(p.pid))
        .count()
}

/// `waitpid(pid, WNOHANG)`: true once `pid` has been reaped.
fn reap(pid: u32) -> bool {
    let Some(raw) = raw_pid(pid) else {
        return false;
    };
    match rustix::process::waitpid(Some(raw), WaitOptions::NOHANG) {
        Ok(Some(_)) => true,
        Ok(None) => false,
        // ECHILD: not (or no longer) our child.
        Err(_) => false,
    }
}

/// How often a process that survives SIGKILL is reported.
const STUCK_LOG_EVERY: Duration = Duration::from_secs(10);
/// The pause between two looks while killed processes are dying.
const DYING_POLL: Duration = Duration::from_millis(5);

/// SIGKILL every process below this one and reap each as it becomes our
/// child, until none is left; loops, since a process may fork while its
/// siblings are being killed. `owned` are children whose exit status
/// std's `Child` is to collect: they are killed too, but left unreaped
/// (done once they are zombies). Every other child std's `Child` owns must
/// have been reaped (or be reapable here without harm) first. Returns how
/// many processes were killed.
pub fn kill_all_below(owned: &[u32]) -> usize {
    let me = own_pid();
    let mut killed = std::collections::HashSet::new();
    let mut reported = Instant::now();
    loop {
        let procs: Vec<Proc> = below(me)
            .into_iter()
            .filter(|p| !(p.zombie && owned.contains(&p.pid)))
            .collect();
        if procs.is_empty() {
            return killed.len();
        }
        for p in &procs {
            if !p.zombie {
                // ESRCH: it ended meanwhile; the next look reaps it.
                let _ = signal(p.pid, Signal::Kill);
                killed.insert(p.pid);
            }
        }
        let reaped = procs
            .iter()
            .filter(|p| p.ppid == me && !owned.contains(&p.pid))
            .filter(|p| reap(p.pid))
            .count();
        if reaped == 0 {
            if reported.elapsed() >= STUCK_LOG_EVERY {
                let pids: Vec<String> = procs.iter().map(|p| p.pid.to_string()).collect();
                log::error!(
                    "processes {} have not ended since SIGKILL (in uninterruptible sleep?); waiting for them",
                    pids.join(", ")
                );
                reported = Instant::now();
            }
            thread::sleep(DYING_POLL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    #[test]
    fn a_child_and_its_child_are_found_below_this_process() {
        let mut child = Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .process_group(0)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        io::BufRead::read_line(
            &mut io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let grandchild: u32 = line.trim().parse().unwrap();
        let procs = below(own_pid());
        let pids: Vec<u32> = procs.iter().map(|p| p.pid).collect();
        assert!(pids.contains(&child.id()), "{procs:?}");
        assert!(pids.contains(&grandchild), "{procs:?}");
        let g = procs.iter().find(|p| p.pid == grandchild).unwrap();
        assert_eq!(g.ppid, child.id());
        assert_eq!(g.pgid, child.id(), "in the child's own group");
        signal_group(g.pgid, Signal::Kill).unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_pid_that_would_name_a_group_or_everyone_is_refused() {
        assert!(raw_pid(0).is_none());
        assert!(raw_pid(u32::MAX).is_none());
        assert!(signal(0, Signal::Term).is_err());
    }
}
