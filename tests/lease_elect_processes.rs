//! `lease-elect` owns every process COMMAND starts: in COMMAND's process
//! group, orphaned, or in a session of its own (`setsid`); with `PATH`
//! emptied, as in a `FROM scratch` image; also when COMMAND stops its
//! supervisor. None of them is alive when the lease is released: each test
//! holds the release at the API server (an injected latency on the `PUT`)
//! and looks at `/proc` while it waits.

#![cfg(feature = "cli")]

use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use lease_elector::testing::{Fault, TestApiServer};
use serde_json::json;

mod common;
use common::eventually;
use common::procs::{alive, args, holder, kill, stat_field, state, SHORT_RENEWS};
use common::spawned::Spawned;
use common::tempdir::TempDir;
use common::RawLeases;

const BIN: &str = env!("CARGO_BIN_EXE_lease-elect");

/// Renews 4 s apart: the first `PUT` after acquiring is the release.
const SLOW_RENEWS: [&str; 6] = [
    "--lease-duration",
    "10",
    "--renew-deadline",
    "8",
    "--retry-period",
    "4",
];

/// How long the API server holds the release (the per-request cap is 4 s).
const HOLD: Duration = Duration::from_millis(1500);

/// COMMAND: `$1` the folder, `$2` `wait` (until signalled), `exit` (exit
/// 3 once the folder has a `go` file) or `stop` (stop its supervisor with
/// SIGSTOP, writing its pid to `supervisor`, then wait). It starts three
/// processes that ignore SIGTERM and write their pids to `pids`: one in
/// COMMAND's process group, one orphaned at once (its parent subshell
/// exits), and one in a session of its own. Only absolute paths: `PATH` is
/// empty.
const COMMAND: &str = r#"
dir=$1; mode=$2
echo $$ > "$dir/command"
: > "$dir/pids"
child='trap "" TERM; echo $$ >> "$0/pids"; exec /bin/sleep 300'
/bin/sh -c "$child" "$dir" &
( /bin/sh -c "$child" "$dir" & )
/usr/bin/setsid /bin/sh -c "$child" "$dir" &
n=0
while [ "$n" -lt 3 ]; do
  n=0
  while read -r _; do n=$((n + 1)); done < "$dir/pids"
done
if [ "$mode" = stop ]; then
  echo $PPID > "$dir/supervisor"
  kill -STOP $PPID
fi
echo ready > "$dir/ready"
if [ "$mode" = exit ]; then
  while [ ! -e "$dir/go" ]; do /bin/sleep 0.02; done
  exit 3
fi
wait
"#;

/// Start candidate `identity` with `extra` flags, `PATH` emptied.
fn start(server: &TestApiServer, identity: &str, extra: &[&str]) -> Spawned {
    Spawned::start(
        Command::new(BIN)
            .args(["--server", &server.url(), "--namespace", "procs"])
            .args(["--name", "lock", "--identity", identity])
            .args(extra)
            .env("PATH", "")
            .env_remove("LEASE_ELECT_LOG")
            .stdin(Stdio::null()),
        true,
    )
}

/// The COMMAND's folder; on drop, kills whatever it recorded that lives
/// (what a failed test leaves behind).
struct Work {
    dir: TempDir,
    script: String,
}

impl Work {
    fn new() -> Work {
        let dir = TempDir::new();
        let script = dir.script("command.sh", COMMAND).display().to_string();
        Work { dir, script }
    }

    fn command(&self, mode: &str) -> Vec<String> {
        vec![
            "--".into(),
            "/bin/sh".into(),
            self.script.clone(),
            self.dir.0.display().to_string(),
            mode.into(),
        ]
    }

    /// Wait until the three processes run; COMMAND's pid and theirs.
    fn ready(&self) -> (u32, Vec<u32>) {
        eventually("COMMAND's three processes", || {
            !self.dir.read("ready").is_empty()
        });
        let command = self.dir.read("command").trim().parse().unwrap();
        let pids: Vec<u32> = self
            .dir
            .read("pids")
            .lines()
            .map(|l| l.trim().parse().unwrap())
            .collect();
        assert_eq!(pids.len(), 3);
        for &pid in &pids {
            assert!(alive(pid), "{pid} runs");
        }
        // One of them really is in a session of its own.
        assert!(
            pids.iter().any(|&p| stat_field(p, 3) == Some(p)),
            "no setsid process among {pids:?}"
        );
        (command, pids)
    }

    fn recorded(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .dir
            .read("pids")
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        pids.extend(self.dir.read("command").trim().parse::<u32>().ok());
        pids.extend(self.dir.read("supervisor").trim().parse::<u32>().ok());
        pids
    }

    /// COMMAND's supervisor, which COMMAND stopped (mode `stop`).
    fn stopped_supervisor(&self, elect: &Spawned) -> u32 {
        let supervisor = self.dir.read("supervisor").trim().parse().unwrap();
        assert_eq!(stat_field(supervisor, 1), Some(elect.child.id()));
        eventually("the supervisor is stopped", || {
            state(supervisor) == Some('T')
        });
        supervisor
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        for pid in self.recorded() {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            let ours = ["sleep", "command.sh", "--supervise"];
            if alive(pid) && ours.iter().any(|w| cmdline.contains(w)) {
                kill(&["-KILL", &pid.to_string()]);
            }
        }
    }
}

/// Hold the next `PUT` (the release) for [`HOLD`]; returns a check that
/// waits until it has reached the server.
fn hold_the_release(server: &TestApiServer) -> impl Fn() + '_ {
    let before = server.stats().faults_fired;
    server.inject(Fault::latency(HOLD).method("PUT"));
    move || {
        eventually("the release reaching the server", || {
            server.stats().faults_fired > before
        })
    }
}

/// While the release is held: not one of `pids` lives, and the lease is
/// still ours (so this really is before the release).
fn assert_all_gone_before_the_release(server: &TestApiServer, pids: &[u32], log: &str) {
    let living: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    assert!(
        living.is_empty(),
        "{living:?} still run while the lease is being released; stderr: {log}"
    );
    assert_eq!(
        holder(server, "procs", "lock"),
        "a",
        "the release has not completed yet"
    );
}

/// Those of `pids` still running at `deadline`; looks until then.
fn living_at(pids: &[u32], deadline: Instant) -> Vec<u32> {
    loop {
        let living: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
        if living.is_empty() || Instant::now() >= deadline {
            return living;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// `lease-elect`'s log says it killed a supervisor that did not answer,
/// and blames no process for surviving SIGKILL.
fn assert_logged_the_unanswering_supervisor(log: &str) {
    assert!(
        log.contains("supervisor had not reported COMMAND's end")
            && log.contains("killed it and every process below it"),
        "{log}"
    );
    assert!(!log.contains("uninterruptible"), "{log}");
}

#[test]
fn sigterm_ends_every_process_the_command_started_before_the_release_without_kill_on_path() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("procs");
    let work = Work::new();
    let cmd = work.command("wait");
    let mut a = start(&server, "a", &args(&cmd, &SLOW_RENEWS));
    a.expect("NEW_LEADER a");
    a.expect("LEADING a");
    let (command, pids) = work.ready();
    let arrived = hold_the_release(&server);
    a.signal("-TERM");
    a.expect("STOPPED a");
    arrived();
    let mut all = pids.clone();
    all.push(command);
    assert_all_gone_before_the_release(&server, &all, &a.log());
    assert_eq!(a.exit_code(), Some(0), "{}", a.log());
    assert_eq!(holder(&server, "procs", "lock"), "", "released");
}

#[test]
fn a_command_that_exits_leaves_nothing_running_when_the_lease_is_released() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("procs");
    let work = Work::new();
    let cmd = work.command("exit");
    let mut a = start(&server, "a", &args(&cmd, &SLOW_RENEWS));
    a.expect("NEW_LEADER a");
    a.expect("LEADING a");
    let (_, pids) = work.ready();
    let arrived = hold_the_release(&server);
    work.dir.write("go", "");
    arrived();
    assert_all_gone_before_the_release(&server, &pids, &a.log());
    assert_eq!(a.exit_code(), Some(3), "{}", a.log());
    assert_eq!(holder(&server, "procs", "lock"), "", "released");
}

#[test]
fn a_lost_lease_ends_every_process_the_command_started_before_lease_elect_exits() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("procs");
    let work = Work::new();
    let cmd = work.command("wait");
    let mut a = start(
        &server,
        "a",
        &args(
            &cmd,
            &[
                "--lease-duration",
                "2",
                "--renew-deadline",
                "1.5",
                "--retry-period",
                "0.5",
            ],
        ),
    );
    a.expect("NEW_LEADER a");
    a.expect("LEADING a");
    let (command, pids) = work.ready();
    // Another holder writes the Lease: a's next renew sees it and steps down.
    let mut lease = server.lease_value("procs", "lock").unwrap();
    lease["spec"]["holderIdentity"] = json!("other");
    server.put_value("procs", lease);
    a.expect("STOPPED a");
    let code = a.exit_code();
    let mut all = pids.clone();
    all.push(command);
    let living: Vec<u32> = all.iter().copied().filter(|&p| alive(p)).collect();
    assert!(
        living.is_empty(),
        "{living:?} outlived lease-elect; stderr: {}",
        a.log()
    );
    assert_eq!(code, Some(1), "{}", a.log());
    assert_eq!(
        holder(&server, "procs", "lock"),
        "other",
        "never released: it was not ours"
    );
}

#[test]
fn a_killed_lease_elect_takes_everything_the_command_started_with_it() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("procs");
    let work = Work::new();
    let cmd = work.command("wait");
    let mut a = start(&server, "a", &args(&cmd, &SLOW_RENEWS));
    a.expect("NEW_LEADER a");
    a.expect("LEADING a");
    let (command, pids) = work.ready();
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let mut all = pids.clone();
    all.push(command);
    let living = living_at(&all, Instant::now() + Duration::from_millis(500));
    assert!(
        living.is_empty(),
        "{living:?} outlived a killed lease-elect by 500 ms"
    );
}

#[test]
fn a_killed_supervisor_leaves_its_processes_to_lease_elect_which_ends_them_then_releases() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("procs");
    let work = Work::new();
    let cmd = work.command("wait");
    let mut a = start(&server, "a", &args(&cmd, &SLOW_RENEWS));
    a.expect("NEW_LEADER a");
    a.expect("LEADING a");
    let (command, pids) = work.ready();
    // The supervisor: lease-elect's child, COMMAND's parent.
    let supervisor = stat_field(command, 1).unwrap();
    assert_eq!(stat_field(supervisor, 1), Some(a.child.id()));
    let arrived = hold_the_release(&server);
    kill(&["-KILL", &supervisor.to_string()]);
    arrived();
    let mut all = pids.clone();
    all.push(command);
    assert_all_gone_before_the_release(&server, &all, &a.log());
    assert_eq!(a.exit_code(), Some(1), "{}", a.log());
    assert_eq!(holder(&server, "procs", "lock"), "", "released");
}

#[test]
fn a_stopped_supervisor_does_not_keep_the_command_alive_past_a_lost_term() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("procs");
    let work = Work::new();
    let cmd = work.command("stop");
    // SIGKILL 0.5 s before the lease could expire for others, whatever
    // --grace says; the supervisor has a quarter second of it to answer
    // (SHORT_RENEWS).
    let mut a = start(&server, "a", &args(&cmd, &SHORT_RENEWS));
    a.expect("NEW_LEADER a");
    a.expect("LEADING a");
    let (command, pids) = work.ready();
    let supervisor = work.stopped_supervisor(&a);
    // Another candidate takes the lease: this term is over.
    let mut lease = server.lease_value("procs", "lock").unwrap();
    lease["spec"]["holderIdentity"] = json!("other");
    server.put_value("procs", lease);
    let lost = Instant::now();
    let mut all = pids.clone();
    all.extend([command, supervisor]);
    // Nothing may run once the lease could expire for the other candidate.
    let living = living_at(&all, lost + Duration::from_secs(4));
    assert!(
        living.is_empty(),
        "{living:?} still run a lease duration after the term was lost; stderr: {}",
        a.log()
    );
    assert_eq!(a.exit_code(), Some(1), "{}", a.log());
    assert_logged_the_unanswering_supervisor(&a.log());
    assert_eq!(holder(&server, "procs", "lock"), "other", "not ours");
}

#[test]
fn a_stopped_supervisor_is_killed_with_everything_below_it_before_the_release() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("procs");
    let work = Work::new();
    let cmd = work.command("stop");
    let mut a = start(
        &server,
        "a",
        &args(&cmd, &[&SLOW_RENEWS[..], &["--grace", "1"]].concat()),
    );
    a.expect("NEW_LEADER a");
    a.expect("LEADING a");
    let (command, pids) = work.ready();
    let supervisor = work.stopped_supervisor(&a);
    let arrived = hold_the_release(&server);
    a.signal("-TERM");
    a.expect("STOPPED a");
    arrived();
    let mut all = pids.clone();
    all.extend([command, supervisor]);
    assert_all_gone_before_the_release(&server, &all, &a.log());
    assert_eq!(a.exit_code(), Some(0), "{}", a.log());
    assert_eq!(holder(&server, "procs", "lock"), "", "released");
    assert_logged_the_unanswering_supervisor(&a.log());
}

/// Issue 54: COMMAND ends with its supervisor also when `lease-elect`
/// cannot act for it (stopped here): the kernel's parent-death signal,
/// which the supervisor asks for before COMMAND starts. It had run on
/// beside the next leader's until `lease-elect` was continued. What
/// COMMAND started is left to `lease-elect`, a subreaper, which ends it
/// once it runs again (docs/lease-elect.md).
#[test]
fn the_command_ends_with_its_supervisor_while_lease_elect_is_stopped() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("procs");
    let work = Work::new();
    let cmd = work.command("wait");
    let mut a = start(&server, "a", &args(&cmd, &SHORT_RENEWS));
    a.expect("NEW_LEADER a");
    a.expect("LEADING a");
    let (command, pids) = work.ready();
    let supervisor = stat_field(command, 1).unwrap();
    assert_eq!(stat_field(supervisor, 1), Some(a.child.id()));
    let b = start(&server, "b", &SHORT_RENEWS);
    b.expect("NEW_LEADER a");
    a.signal("-STOP");
    eventually("lease-elect is stopped", || {
        state(a.child.id()) == Some('T')
    });
    kill(&["-KILL", &supervisor.to_string()]);
    // The rule: COMMAND has ended before another candidate leads.
    b.expect("LEADING b");
    assert!(
        !alive(command),
        "COMMAND {command} ran on after its supervisor died, while b leads"
    );
    a.signal("-CONT");
    assert_eq!(a.exit_code(), Some(1), "{}", a.log());
    let living = living_at(&pids, Instant::now());
    assert!(
        living.is_empty(),
        "{living:?}, which COMMAND started, outlived lease-elect: {}",
        a.log()
    );
}
