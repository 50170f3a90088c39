//! The `lease-elect` tool as a user runs it: real processes against the
//! embedded API server, its exact stdout lines and exit statuses, and
//! real COMMANDs (shell scripts that record when they ran).
//!
//! The COMMAND script appends `start`, `beat` (every 50 ms), `got TERM` /
//! `got INT` and `exit` lines, each with the run's pid and a nanosecond
//! wall-clock time, to one log shared by every candidate, and holds an
//! exclusive `flock` on a shared file for as long as it (or anything in its
//! process group) lives: a second run that starts while another is alive
//! writes `overlap`. Runs are judged from those lines: a run lasted at
//! least from its `start` to its last line.

#![cfg(feature = "cli")]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use lease_elector::testing::{Fault, TestApiServer};

mod common;

use common::procs::{alive, args, holder};
use common::tempdir::TempDir;
use common::RawLeases;

const WAIT: Duration = Duration::from_secs(20);
/// Stands for `--server=http://127.0.0.1:1 --namespace=n --name=x` in
/// argument lists.
const NAMED: &str = "<named>";
const BIN: &str = env!("CARGO_BIN_EXE_lease-elect");

/// lease 2 s, renew deadline 1.5 s, retry period 0.5 s.
const TIMINGS: [&str; 6] = [
    "--lease-duration",
    "2",
    "--renew-deadline",
    "1.5s",
    "--retry-period",
    "0.5",
];

/// The COMMAND: `$1` the shared folder, `$2` a name for the log; `$3`
/// `ignore` makes it ignore SIGTERM and SIGINT, `exit:N` makes it exit
/// with N after its first beat.
const WORKER: &str = r#"
dir=$1; name=$2; mode=$3
# A signal to the process group can kill `date` too: then ask again.
log() {
  t=$(date +%s%N); [ -n "$t" ] || t=$(date +%s%N)
  echo "$1 $name $$ $t" >> "$dir/log"
}
exec 9>>"$dir/lock"
flock -n 9 || log overlap
log start
case $mode in
ignore) trap 'log "got TERM"' TERM; trap 'log "got INT"' INT ;;
*) trap 'log "got TERM"; log exit; exit 0' TERM; trap 'log "got INT"; log exit; exit 0' INT ;;
esac
while :; do
  log beat
  case $mode in exit:*) log exit; exit "${mode#exit:}" ;; esac
  sleep 0.05
done
"#;

struct Elect {
    child: Child,
    lines: mpsc::Receiver<(String, Instant)>,
    stderr: mpsc::Receiver<String>,
}

impl Elect {
    fn start(server: &TestApiServer, identity: &str, extra: &[&str]) -> Elect {
        Elect::start_env(server, identity, extra, &[])
    }

    fn start_env(
        server: &TestApiServer,
        identity: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Elect {
        let mut child = Command::new(BIN)
            .args(["--server", &server.url(), "--namespace", "cli"])
            .args(["--name", "lock", "--identity", identity])
            .args(TIMINGS)
            .args(extra)
            .envs(env.iter().copied())
            .env_remove("LEASE_ELECT_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = mpsc::channel();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if tx.send((line, Instant::now())).is_err() {
                    break;
                }
            }
        });
        let (tx, stderr) = mpsc::channel();
        let err = BufReader::new(child.stderr.take().unwrap());
        thread::spawn(move || {
            for line in err.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Elect {
            child,
            lines,
            stderr,
        }
    }

    /// The next stdout line, which must be `line`; when it came.
    fn expect(&self, line: &str) -> Instant {
        let (got, at) = self
            .lines
            .recv_timeout(WAIT)
            .unwrap_or_else(|e| panic!("waiting for {line:?}: {e}; stderr: {}", self.log()));
        assert_eq!(got, line, "stderr: {}", self.log());
        at
    }

    /// Skip `NEW_LEADER` lines up to `line`.
    fn expect_after_new_leaders(&self, line: &str) -> Instant {
        loop {
            let (got, at) = self
                .lines
                .recv_timeout(WAIT)
                .unwrap_or_else(|e| panic!("waiting for {line:?}: {e}; stderr: {}", self.log()));
            if got == line {
                return at;
            }
            assert!(got.starts_with("NEW_LEADER "), "{got:?} before {line:?}");
        }
    }

    /// What it wrote on stderr so far.
    fn log(&self) -> String {
        self.stderr.try_iter().collect::<Vec<_>>().join("\n")
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Its exit code, once it exits (within `WAIT`); stdout must have
    /// nothing left.
    fn exit_code(self) -> Option<i32> {
        self.exit().0
    }

    /// Its exit code, once it exits, and all it wrote on stderr.
    fn exit_with_log(self) -> (Option<i32>, String) {
        let deadline = Instant::now() + WAIT;
        let mut log = String::new();
        let mut this = self;
        let code = loop {
            log.push_str(&this.log());
            log.push('\n');
            if let Some(status) = this.child.try_wait().unwrap() {
                break status.code();
            }
            assert!(Instant::now() < deadline, "lease-elect did not exit: {log}");
            thread::sleep(Duration::from_millis(10));
        };
        // The reader thread has what was written before the exit.
        thread::sleep(Duration::from_millis(50));
        log.push_str(&this.log());
        (code, log)
    }

    /// Its exit code and when it exited (to 10 ms).
    fn exit(mut self) -> (Option<i32>, Instant) {
        let deadline = Instant::now() + WAIT;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "lease-elect did not exit; stderr: {}",
                self.log()
            );
            thread::sleep(Duration::from_millis(10));
        };
        let exited = Instant::now();
        thread::sleep(Duration::from_millis(50));
        let rest: Vec<String> = self.lines.try_iter().map(|(l, _)| l).collect();
        assert!(rest.is_empty(), "unexpected output after exit: {rest:?}");
        (status.code(), exited)
    }
}

impl Drop for Elect {
    /// A failed test leaves no candidate behind (its supervisor then kills
    /// its COMMAND).
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The shared folder of the COMMAND runs and the script.
struct Runs {
    dir: TempDir,
    script: PathBuf,
}

/// One run of the COMMAND, as its log lines tell it.
#[derive(Debug, Default, Clone)]
struct Run {
    name: String,
    pid: u32,
    first: u128,
    last: u128,
    lines: Vec<String>,
}

impl Drop for Runs {
    /// A failed test leaves no COMMAND behind.
    fn drop(&mut self) {
        for run in self.try_runs().unwrap_or_default() {
            let cmdline = std::fs::read(format!("/proc/{}/cmdline", run.pid)).unwrap_or_default();
            if alive(run.pid) && String::from_utf8_lossy(&cmdline).contains("worker.sh") {
                let _ = Command::new("kill")
                    .args(["-KILL", &run.pid.to_string()])
                    .status();
            }
        }
    }
}

impl Runs {
    fn new() -> Runs {
        let dir = TempDir::new();
        let script = dir.script("worker.sh", WORKER);
        Runs { dir, script }
    }

    /// `-- sh worker.sh DIR NAME [MODE]`.
    fn command(&self, name: &str, mode: &str) -> Vec<String> {
        let mut c = vec![
            "--".to_string(),
            "/bin/sh".to_string(),
            self.script.display().to_string(),
            self.dir.0.display().to_string(),
            name.to_string(),
        ];
        if !mode.is_empty() {
            c.push(mode.to_string());
        }
        c
    }

    /// Every run so far, by pid, in the order they started.
    fn runs(&self) -> Vec<Run> {
        self.try_runs().unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_runs(&self) -> Result<Vec<Run>, String> {
        let mut by_pid: BTreeMap<u32, Run> = BTreeMap::new();
        let text = self.dir.read("log");
        // A line still being written is left for the next look.
        for line in text.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
            let line = line.trim_end();
            let words: Vec<&str> = line.rsplitn(4, ' ').collect();
            let parsed = match words[..] {
                [t, pid, name, what] => t
                    .parse::<u128>()
                    .ok()
                    .zip(pid.parse::<u32>().ok())
                    .map(|tp| (tp, name, what)),
                _ => None,
            };
            let Some(((t, pid), name, what)) = parsed else {
                return Err(format!("bad log line {line:?}"));
            };
            let run = by_pid.entry(pid).or_insert_with(|| Run {
                name: name.to_string(),
                pid,
                first: t,
                ..Run::default()
            });
            run.first = run.first.min(t);
            run.last = run.last.max(t);
            run.lines.push(what.to_string());
        }
        let mut runs: Vec<Run> = by_pid.into_values().collect();
        runs.sort_by_key(|r| r.first);
        Ok(runs)
    }

    /// Wait until `name` has a run that beats.
    fn wait_running(&self, name: &str) -> Run {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(run) = self
                .runs()
                .into_iter()
                .find(|r| r.name == name && r.lines.iter().any(|l| l == "beat"))
            {
                return run;
            }
            assert!(
                Instant::now() < deadline,
                "{name} never ran: {:?}",
                self.runs()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// No two runs ever overlapped: none saw another's lock, and each
    /// started after the one before it had written its last line.
    fn assert_never_overlapped(&self) {
        let runs = self.runs();
        for run in &runs {
            assert!(
                !run.lines.iter().any(|l| l == "overlap"),
                "{} started while another run held the lock: {runs:#?}",
                run.name
            );
        }
        for pair in runs.windows(2) {
            assert!(
                pair[0].last < pair[1].first,
                "{} (pid {}) still ran when {} (pid {}) started: {runs:#?}",
                pair[0].name,
                pair[0].pid,
                pair[1].name,
                pair[1].pid
            );
        }
    }
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[test]
fn help_documents_the_exit_statuses_and_mistakes_exit_two() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "usage: lease-elect",
        "Exit status:",
        "-- COMMAND",
        "--grace S",
        "--acquire-timeout S",
        "75 ",
        "LEASE_ELECT_TERM",
    ] {
        assert!(help.contains(needle), "{needle:?} missing from --help");
    }
    // The token is the resourceVersion (leaseTransitions was the old one).
    let words = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("LEASE_ELECT_TERM (the fencing token: the Lease's resourceVersion"),
        "{help}"
    );
    for bad in [
        &["--bogus"][..],
        &["--name", "x", "--grace", "1"],
        &["--name", "x", "--restart"],
        &["--name", "x", "--"],
        &["--server", "http://127.0.0.1:1", "--name", "x"],
        // TLS is always verified: an https:// --server needs --ca-file.
        &[
            "--server",
            "https://127.0.0.1:1",
            "--namespace",
            "ns",
            "--name",
            "x",
        ],
        // Values the command line alone gets wrong, found before any
        // request (they exited 1, "invalid configuration"): timings that
        // break client-go's rules, a lease duration that is not whole
        // seconds, a server without a scheme, names Kubernetes refuses.
        &[NAMED, "--lease-duration", "0"],
        &[NAMED, "--lease-duration", "1.5"],
        &[NAMED, "--retry-period", "0"],
        // Under the 100 ms floor, though client-go's rules pass it beside
        // the default 10 s renew deadline (issue 54 #2: 457 GETs/s).
        &[NAMED, "--retry-period", "1ns"],
        &[NAMED, "--retry-period", "2ms"],
        &[NAMED, "--lease-duration", "5"],
        &[NAMED, "--identity", ""],
        &["--server=127.0.0.1:6443", "--namespace=n", "--name=x"],
        &["--server=http://h:1", "--namespace=n", "--name=Bad_Name"],
        &["--server=http://h:1", "--namespace=N", "--name=x"],
    ] {
        let named = ["--server=http://127.0.0.1:1", "--namespace=n", "--name=x"];
        let out = Command::new(BIN)
            .args(bad.iter().flat_map(|a| {
                if *a == NAMED {
                    &named[..]
                } else {
                    std::slice::from_ref(a)
                }
            }))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("usage: lease-elect"));
    }
}

/// Issue 54 #2: a retry period under 100 ms is refused before any
/// request, naming the floor and what was given.
#[test]
fn a_retry_period_under_100ms_is_refused_naming_the_floor() {
    for (typo, got) in [("2ms", "2ms"), ("1ns", "1ns"), ("0.099", "99ms")] {
        let out = Command::new(BIN)
            .args(["--server=http://127.0.0.1:1", "--namespace=n", "--name=x"])
            .args(["--retry-period", typo])
            // Closed at once: a lease-elect that took the flag stops at
            // end-of-file rather than competing for ever.
            .stdin(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{typo}: {stderr}");
        let says = format!("retryPeriod must be at least 100ms (got {got})");
        assert!(
            stderr.contains("--retry-period") && stderr.contains(&says),
            "{typo}: {stderr}"
        );
    }
}

#[test]
fn a_command_that_does_not_exist_exits_127_before_competing() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    let out = Command::new(BIN)
        .args([
            "--server",
            &server.url(),
            "--namespace",
            "cli",
            "--name",
            "lock",
        ])
        .args(["--", "/nonexistent/command"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/command not found"));
    assert!(
        server.lease_value("cli", "lock").is_none(),
        "it never competed"
    );
}

#[test]
fn errors_are_on_stderr_by_default_and_v_adds_the_transitions() {
    // Nothing listens on port 1: every attempt fails, and says so.
    let out = Command::new(BIN)
        .args([
            "--server",
            "http://127.0.0.1:1",
            "--namespace",
            "cli",
            "--name",
            "x",
        ])
        .args(TIMINGS)
        .arg("--ignore-stdin")
        .env_remove("LEASE_ELECT_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = out.id().to_string();
    thread::sleep(Duration::from_millis(700));
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let out = out.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("WARN  lease-elect: error acquiring lease cli/x"),
        "{err}"
    );
    assert!(!err.contains("INFO"), "{err}");

    let server = TestApiServer::start().unwrap();

    server.add_namespace("cli");
    for (lease, env) in [("v0", None), ("v1", Some("info"))] {
        let mut cmd = Command::new(BIN);
        cmd.args([
            "--server",
            &server.url(),
            "--namespace",
            "cli",
            "--name",
            lease,
        ])
        .args(TIMINGS)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        match env {
            None => cmd.arg("-v").env_remove("LEASE_ELECT_LOG"),
            Some(level) => cmd.env("LEASE_ELECT_LOG", level),
        };
        let mut child = cmd.spawn().unwrap();
        thread::sleep(Duration::from_millis(500));
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!(
                "INFO  lease-elect: successfully acquired lease cli/{lease}"
            )),
            "{env:?}: {err}"
        );
    }
}

#[test]
fn stopped_is_printed_before_the_release_completes() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    let a = Elect::start(&server, "a", &["--release-on-cancel", "--ignore-stdin"]);
    a.expect("NEW_LEADER a");
    a.expect("LEADING a");
    // Every PUT is answered 0.8 s late, the release too (renews still
    // succeed: the per-request cap is 1 s).
    server.inject(
        Fault::latency(Duration::from_millis(800))
            .method("PUT")
            .forever(),
    );
    thread::sleep(Duration::from_millis(300));
    a.signal("-TERM");
    let stopped = a.expect("STOPPED a");
    let (code, exited) = a.exit();
    assert_eq!(code, Some(0));
    // The release took a round trip of at least 0.8 s after STOPPED.
    assert!(
        exited - stopped >= Duration::from_millis(600),
        "STOPPED came only {:?} before the exit: after the release",
        exited - stopped
    );
    assert_eq!(holder(&server, "cli", "lock"), "", "released");
}

#[test]
fn the_command_runs_while_leading_and_sigterm_stops_it_before_the_release() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    let runs = Runs::new();
    let a_cmd = runs.command("a", "");
    let a = Elect::start(&server, "a", &args(&a_cmd, &["--watch"]));
    a.expect("NEW_LEADER a");
    a.expect("LEADING a");
    runs.wait_running("a");
    let b_cmd = runs.command("b", "");
    let b = Elect::start(&server, "b", &args(&b_cmd, &["--watch"]));
    b.expect("NEW_LEADER a");
    thread::sleep(Duration::from_millis(300));
    assert!(runs.runs().iter().all(|r| r.name == "a"), "b must not run");

    a.signal("-TERM");
    a.expect("STOPPED a");
    assert_eq!(a.exit_code(), Some(0));
    b.expect("NEW_LEADER b");
    b.expect("LEADING b");
    let run_b = runs.wait_running("b");
    let run_a = &runs.runs()[0];
    assert_eq!(run_a.lines.last().map(String::as_str), Some("exit"));
    assert!(run_a.lines.iter().any(|l| l == "got TERM"));
    assert!(!alive(run_a.pid));
    // Watching, b took over within a round trip of the release.
    assert!(
        run_b.first - run_a.last < 1_000_000_000,
        "{:?}",
        runs.runs()
    );

    b.signal("-INT");
    b.expect("STOPPED b");
    assert_eq!(b.exit_code(), Some(0));
    let run_b = runs.runs().pop().unwrap();
    assert!(
        run_b.lines.iter().any(|l| l == "got INT"),
        "SIGINT passed on as SIGINT"
    );
    assert_eq!(
        holder(&server, "cli", "lock"),
        "",
        "released after the command ended"
    );
    runs.assert_never_overlapped();
}

#[test]
fn no_two_commands_ever_run_at_once_even_when_the_leader_is_killed() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    let runs = Runs::new();
    let cmds: Vec<Vec<String>> = ["a", "b", "c"]
        .iter()
        .map(|n| runs.command(n, ""))
        .collect();
    let a = Elect::start(&server, "a", &args(&cmds[0], &[]));
    a.expect("NEW_LEADER a");
    a.expect("LEADING a");
    runs.wait_running("a");
    let mut others: Vec<(String, Elect)> = ["b", "c"]
        .iter()
        .zip(&cmds[1..])
        .map(|(n, cmd)| (n.to_string(), Elect::start(&server, n, &args(cmd, &[]))))
        .collect();
    for (_, e) in &others {
        e.expect("NEW_LEADER a");
    }

    // A graceful handover.
    a.signal("-TERM");
    a.expect("STOPPED a");
    assert_eq!(a.exit_code(), Some(0));
    let next = wait_for(|| Some(holder(&server, "cli", "lock")).filter(|h| h == "b" || h == "c"));
    let i = others.iter().position(|(n, _)| *n == next).unwrap();
    let (name, leader) = others.remove(i);
    let (other_name, other) = others.pop().unwrap();
    leader.expect(&format!("NEW_LEADER {name}"));
    leader.expect(&format!("LEADING {name}"));
    let run = runs.wait_running(&name);

    // The leader crashes (SIGKILL): its command dies with it at once, long
    // before the lease can pass to the other candidate.
    let mut leader = leader;
    leader.child.kill().unwrap();
    let killed_at = now_ns();
    leader.child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_millis(500);
    while alive(run.pid) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    let outlived = alive(run.pid);

    // It may or may not have seen the crashed leader's term.
    other.expect_after_new_leaders(&format!("LEADING {other_name}"));
    runs.wait_running(&other_name);
    thread::sleep(Duration::from_millis(300));
    runs.assert_never_overlapped();
    assert!(!outlived, "the command outlived its lease-elect by 500 ms");
    let crashed = runs.runs().into_iter().find(|r| r.pid == run.pid).unwrap();
    assert!(
        crashed.last <= killed_at + 100_000_000,
        "the command went on beating after its lease-elect died: {crashed:?}"
    );
    other.signal("-TERM");
    other.expect(&format!("STOPPED {other_name}"));
    assert_eq!(other.exit_code(), Some(0));
    assert_eq!(runs.runs().len(), 3);
    runs.assert_never_overlapped();
}

#[test]
fn a_lost_lease_kills_the_command_before_anyone_else_can_lead_and_exits_one() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    let runs = Runs::new();
    let tokens = TempDir::new();
    let a_token = tokens.write("a", "token-a");
    let b_token = tokens.write("b", "token-b");
    // a ignores SIGTERM and asks for a grace period far longer than the lease.
    let a_cmd = runs.command("a", "ignore");
    let a_token = a_token.to_str().unwrap();
    let a = Elect::start(
        &server,
        "a",
        &args(&a_cmd, &["--token-file", a_token, "--grace", "30"]),
    );
    a.expect("NEW_LEADER a");
    a.expect("LEADING a");
    runs.wait_running("a");
    let b_cmd = runs.command("b", "");
    let b = Elect::start(
        &server,
        "b",
        &args(&b_cmd, &["--token-file", b_token.to_str().unwrap()]),
    );
    b.expect("NEW_LEADER a");

    // a's renews fail from now on; b is served.
    server.inject(Fault::status(500).bearer("token-a").forever());
    a.expect("STOPPED a");
    assert_eq!(a.exit_code(), Some(1));
    b.expect("NEW_LEADER b");
    b.expect("LEADING b");
    runs.wait_running("b");
    let run_a = runs.runs().into_iter().find(|r| r.name == "a").unwrap();
    assert!(run_a.lines.iter().any(|l| l == "got TERM"), "{run_a:?}");
    assert!(!alive(run_a.pid));
    b.signal("-TERM");
    b.expect("STOPPED b");
    assert_eq!(b.exit_code(), Some(0));
    runs.assert_never_overlapped();
}

#[test]
fn a_command_that_exits_releases_the_lease_and_passes_its_status_on() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    let runs = Runs::new();
    let cmd = runs.command("a", "exit:7");
    let a = Elect::start(&server, "a", &args(&cmd, &[]));
    a.expect("NEW_LEADER a");
    a.expect("LEADING a");
    a.expect("STOPPED a");
    assert_eq!(a.exit_code(), Some(7));
    assert_eq!(holder(&server, "cli", "lock"), "", "released");
    assert_eq!(runs.runs().len(), 1);
}

#[test]
fn restart_runs_the_command_again_while_leading() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    let runs = Runs::new();
    let cmd = runs.command("a", "exit:3");
    let a = Elect::start(&server, "a", &args(&cmd, &["--restart"]));
    a.expect("NEW_LEADER a");
    a.expect("LEADING a");
    wait_for(|| (runs.runs().len() >= 2).then_some(()));
    a.signal("-TERM");
    a.expect("STOPPED a");
    assert_eq!(a.exit_code(), Some(0));
    assert_eq!(holder(&server, "cli", "lock"), "");
    runs.assert_never_overlapped();
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_after_the_grace_period() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    let runs = Runs::new();
    let cmd = runs.command("a", "ignore");
    let a = Elect::start(&server, "a", &args(&cmd, &["--grace", "1"]));
    a.expect("NEW_LEADER a");
    a.expect("LEADING a");
    let run = runs.wait_running("a");
    let sent = Instant::now();
    a.signal("-TERM");
    a.expect("STOPPED a");
    let took = sent.elapsed();
    assert_eq!(a.exit_code(), Some(0));
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "{took:?}"
    );
    let run = runs.runs().into_iter().find(|r| r.pid == run.pid).unwrap();
    assert!(run.lines.iter().any(|l| l == "got TERM"));
    assert!(!run.lines.iter().any(|l| l == "exit"), "killed, not exited");
    assert!(!alive(run.pid));
    assert_eq!(holder(&server, "cli", "lock"), "");
}

#[test]
fn without_kill_on_path_sigterm_is_passed_on_and_the_command_ends_gracefully() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    let runs = Runs::new();
    // What the worker needs, and no kill(1).
    let bin = TempDir::new();
    for tool in ["date", "flock", "sleep"] {
        let out = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .unwrap();
        let real = String::from_utf8(out.stdout).unwrap();
        std::os::unix::fs::symlink(real.trim(), bin.0.join(tool)).unwrap();
    }
    let path = bin.0.display().to_string();
    let cmd = runs.command("a", "");
    let a = Elect::start_env(
        &server,
        "a",
        &args(&cmd, &["--grace", "10"]),
        &[("PATH", &path)],
    );
    a.expect("NEW_LEADER a");
    a.expect("LEADING a");
    let run = runs.wait_running("a");
    a.signal("-TERM");
    a.expect("STOPPED a");
    let log = a.log();
    assert!(!log.contains("kill(1)"), "{log}");
    assert_eq!(a.exit_code(), Some(0));
    let run = runs.runs().into_iter().find(|r| r.pid == run.pid).unwrap();
    assert!(run.lines.iter().any(|l| l == "got TERM"), "{run:?}");
    assert_eq!(
        run.lines.last().map(String::as_str),
        Some("exit"),
        "{run:?}"
    );
    assert!(!alive(run.pid));
    assert_eq!(holder(&server, "cli", "lock"), "");
}

#[test]
fn the_health_endpoint_serves_while_electing() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let a = Elect::start(&server, "a", &["--ignore-stdin", "--health-addr", &addr]);
    a.expect("NEW_LEADER a");
    a.expect("LEADING a");
    let answer = http_get(&addr, "/leader");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#""identity":"a""#), "{answer}");
    assert!(http_get(&addr, "/healthz").starts_with("HTTP/1.1 200"));
    a.signal("-TERM");
    a.expect("STOPPED a");
    assert_eq!(a.exit_code(), Some(0));
}

/// The watch is on by default and `/metrics` says so; `--no-watch` polls
/// (no watch request at all); a server that refuses the watch gets
/// polling and one warning on stderr naming the verbs to grant.
#[test]
fn the_watch_is_on_by_default_off_with_no_watch_and_a_refusal_is_told_once() {
    let free_addr = || {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        format!("127.0.0.1:{port}")
    };
    let watching = |addr: &str| {
        http_get(addr, "/metrics")
            .lines()
            .find(|l| l.starts_with("lease_elector_watching{"))
            .map(|l| l.ends_with(" 1"))
    };
    for (flags, refused) in [
        (&[][..], false),
        (&["--no-watch"][..], false),
        (&[][..], true),
    ] {
        let server = TestApiServer::start().unwrap();
        server.add_namespace("cli");
        if refused {
            server.inject(
                lease_elector::testing::Fault::status(403)
                    .path_contains("watch=true")
                    .forever(),
            );
        }
        let addr = free_addr();
        let mut extra = vec!["--ignore-stdin", "--health-addr", &addr];
        extra.extend_from_slice(flags);
        let a = Elect::start(&server, "a", &extra);
        a.expect("NEW_LEADER a");
        a.expect("LEADING a");
        let want = flags.is_empty() && !refused;
        wait_for(|| (watching(&addr) == Some(want)).then_some(()));
        if refused {
            wait_for(|| (server.stats().watches >= 1).then_some(()));
        }
        a.signal("-TERM");
        a.expect("STOPPED a");
        let (code, log) = a.exit_with_log();
        assert_eq!(code, Some(0), "{log}");
        let told = log
            .lines()
            .filter(|l| l.contains("grant watch on leases"))
            .count();
        assert_eq!(told, usize::from(refused), "{flags:?}: {log}");
        if !flags.is_empty() {
            assert_eq!(server.stats().watches, 0, "--no-watch");
        }
    }
}

fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    answer
}

fn wait_for<T>(mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out");
        thread::sleep(Duration::from_millis(20));
    }
}

/// A `holderIdentity` written by anyone allowed to update the Lease: a
/// newline, a line separator (a line break to Python's `splitlines` and to
/// JavaScript), a terminal escape.
const FORGED: &str = "x\nLEADING me\n\u{1b}[2J\u{2028}LEADING me";

#[test]
fn a_forged_holder_identity_yields_one_escaped_event_line_and_no_escape() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    let now = lease_elector::lease::MicroTime::from_system_time(std::time::SystemTime::now());
    server.put_value(
        "cli",
        serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "lock"},
            "spec": {
                "holderIdentity": FORGED,
                "leaseDurationSeconds": 3600,
                "acquireTime": now.to_string(),
                "renewTime": now.to_string(),
                "leaseTransitions": 0,
            },
        }),
    );
    let a = Elect::start(&server, "a", &["--ignore-stdin"]);
    let first = a.lines.recv_timeout(WAIT).unwrap().0;
    // A few more polls of the same holder: still nothing else.
    thread::sleep(Duration::from_millis(1200));
    a.signal("-TERM");
    let mut all = vec![first.clone()];
    all.extend(a.lines.try_iter().map(|(l, _)| l));
    assert_eq!(a.exit_code(), Some(0), "no line after the exit either");
    assert_eq!(
        all,
        [format!(
            "NEW_LEADER {}",
            lease_elector::text::escape(FORGED)
        )]
    );
    assert!(!first.contains('\u{1b}'), "{first:?}");
    assert!(!first.contains('\u{2028}'), "{first:?}");
}

#[test]
fn no_credential_reaches_stderr_even_at_trace_level() {
    // A token whose every 5 characters are unlikely anywhere else.
    let token = "Zq8Xk3Vt9Pw2Lm7Rj4Hs6Nb1Fc5";
    let server = TestApiServer::builder().tokens(&[token]).build().unwrap();
    server.add_namespace("cli");
    let dir = TempDir::new();
    let file = dir.write("token", token);
    let mut child = Command::new(BIN)
        .args(["--server", &server.url(), "--namespace", "cli"])
        .args(["--name", "lock", "--identity", "a", "-vvv"])
        .args(TIMINGS)
        .arg("--token-file")
        .arg(&file)
        .env("LEASE_ELECT_LOG", "trace")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(out.next().unwrap().unwrap(), "NEW_LEADER a");
    assert_eq!(out.next().unwrap().unwrap(), "LEADING a");
    drop(child.stdin.take());
    let done = child.wait_with_output().unwrap();
    assert_eq!(done.status.code(), Some(0));
    let err = String::from_utf8_lossy(&done.stderr);
    assert!(err.contains("TRACE"), "trace level is on: {err}");
    let leaked: Vec<&str> = (0..=token.len() - 5)
        .map(|i| &token[i..i + 5])
        .filter(|w| err.contains(w))
        .collect();
    assert!(
        leaked.is_empty(),
        "token pieces {leaked:?} in stderr: {err}"
    );
}

#[test]
fn a_server_error_body_is_logged_on_escaped_lines() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    server
        .inject(Fault::raw(500, "oops\nFORGED WARN  lease-elect: all is well\u{1b}[2J").forever());
    let a = Elect::start(&server, "a", &["--ignore-stdin"]);
    let deadline = Instant::now() + WAIT;
    let mut log = String::new();
    while !log.contains("oops") {
        assert!(Instant::now() < deadline, "no error logged: {log}");
        log.push_str(&a.log());
        thread::sleep(Duration::from_millis(20));
    }
    a.signal("-TERM");
    assert_eq!(a.exit_code(), Some(0));
    for line in log.lines() {
        assert!(!line.starts_with("FORGED"), "a forged line: {log}");
    }
    assert!(!log.contains('\u{1b}'), "an escape reached stderr: {log:?}");
}

#[test]
fn a_kubeconfig_context_gives_the_server_the_token_and_the_namespace() {
    let server = TestApiServer::builder()
        .tls(true)
        .tokens(&["kube-token"])
        .build()
        .unwrap();
    server.add_namespace("from-context");
    let dir = TempDir::new();
    dir.write("ca.crt", server.ca_pem());
    let config = dir.write(
        "config",
        format!(
            "apiVersion: v1
clusters:
- cluster: {{certificate-authority: ca.crt, server: '{}'}}
  name: test
contexts:
- context: {{cluster: test, namespace: from-context, user: me}}
  name: test
current-context: elsewhere
users:
- name: me
  user: {{token: kube-token}}
",
            server.url()
        ),
    );
    let mut child = Command::new(BIN)
        .arg("--kubeconfig")
        .arg(&config)
        .args(["--context", "test", "--name", "lock", "--identity", "k"])
        .args(TIMINGS)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(out.next().unwrap().unwrap(), "NEW_LEADER k");
    assert_eq!(out.next().unwrap().unwrap(), "LEADING k");
    assert_eq!(
        server.lease_value("from-context", "lock").unwrap()["spec"]["holderIdentity"],
        "k"
    );
    drop(child.stdin.take());
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn version_and_help_go_to_stdout_and_exit_zero() {
    for flag in ["--version", "-V"] {
        let out = Command::new(BIN).arg(flag).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{flag}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("lease-elect {}", env!("CARGO_PKG_VERSION"))
        );
    }
    let out = Command::new(BIN).arg("-h").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stderr.is_empty());
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "needed for an\n                          https:// --server",
        "--version",
        "--no-events",
        ":PORT",
    ] {
        assert!(help.contains(needle), "{needle:?} missing from --help");
    }
}

#[test]
fn a_bad_duration_shows_seconds_and_go_durations_as_examples() {
    let out = Command::new(BIN)
        .args(["--name", "x", "--grace", "abc", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--grace") && err.contains("15, 1.5") && err.contains("1m30s"),
        "{err}"
    );
}

#[test]
fn the_health_address_may_be_a_port_alone_as_in_go() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let a = Elect::start(
        &server,
        "a",
        &["--ignore-stdin", "--health-addr", &format!(":{port}")],
    );
    a.expect("NEW_LEADER a");
    a.expect("LEADING a");
    let answer = http_get(&format!("127.0.0.1:{port}"), "/healthz");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    a.signal("-TERM");
    a.expect("STOPPED a");
    assert_eq!(a.exit_code(), Some(0));
}

#[test]
fn a_command_that_exits_by_itself_is_told_on_stderr_once_with_its_status() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    // COMMAND run to its end at the default log level: exit code, stderr.
    let run = |command: &[&str]| {
        let out = Command::new(BIN)
            .args(["--server", &server.url(), "--namespace", "cli"])
            .args(["--name", "lock", "--identity", "a"])
            .args(TIMINGS)
            .arg("--")
            .args(command)
            .env_remove("LEASE_ELECT_LOG")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["sh", "-c", "exit 3"]);
    assert_eq!(code, Some(3));
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("WARN") && lines[0].contains("status 3"),
        "{err}"
    );
    // Success is not news at the default level (a cron job mails stderr).
    assert_eq!(run(&["true"]), (Some(0), String::new()));
    // Killed by a signal: the status says which (128 + 9 is SIGKILL).
    let (code, err) = run(&["sh", "-c", "kill -KILL $$"]);
    assert_eq!(code, Some(137));
    assert!(err.contains("status 137 (killed by SIGKILL)"), "{err}");
}

#[test]
fn a_lost_lease_is_warned_with_its_reason_on_the_same_line() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    let runs = Runs::new();
    let cmd = runs.command("a", "");
    let a = Elect::start(&server, "a", &args(&cmd, &[]));
    a.expect("NEW_LEADER a");
    a.expect("LEADING a");
    runs.wait_running("a");
    server.set_outage(true);
    a.expect("STOPPED a");
    let (code, log) = a.exit_with_log();
    assert_eq!(code, Some(1));
    let line = log
        .lines()
        .find(|l| l.contains("leadership lost"))
        .unwrap_or_else(|| panic!("no lost-lease line: {log}"));
    assert!(line.contains("WARN"), "{line}");
    assert!(
        line.contains("renew") || line.contains("API server"),
        "no reason on the line: {line}"
    );
}

#[test]
fn transitions_are_recorded_as_events_unless_no_events() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    let a = Elect::start(&server, "a", &["--release-on-cancel"]);
    a.expect("NEW_LEADER a");
    a.expect("LEADING a");
    wait_for(|| {
        server
            .event_values()
            .iter()
            .any(|e| e["message"].as_str().is_some_and(|m| m.contains('a')))
            .then_some(())
    });
    let event = server.event_values().pop().unwrap();
    assert_eq!(event["reason"], "LeaderElection");
    assert_eq!(event["involvedObject"]["name"], "lock");
    a.signal("-TERM");
    a.expect("STOPPED a");
    assert_eq!(a.exit_code(), Some(0));

    let server = TestApiServer::start().unwrap();

    server.add_namespace("cli");
    let b = Elect::start(&server, "b", &["--no-events", "--ignore-stdin"]);
    b.expect("NEW_LEADER b");
    b.expect("LEADING b");
    thread::sleep(Duration::from_millis(300));
    b.signal("-TERM");
    b.expect("STOPPED b");
    assert_eq!(b.exit_code(), Some(0));
    assert!(
        server.event_values().is_empty(),
        "{:?}",
        server.event_values()
    );
}

#[test]
fn events_that_are_forbidden_never_affect_the_election() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    server.inject(
        Fault::status(403)
            .method("POST")
            .path_contains("/events")
            .forever(),
    );
    let a = Elect::start(&server, "a", &["--ignore-stdin"]);
    a.expect("NEW_LEADER a");
    a.expect("LEADING a");
    // Several renews later it still leads.
    let renewed =
        |s: &TestApiServer| s.lease_value("cli", "lock").unwrap()["spec"]["renewTime"].clone();
    let first = renewed(&server);
    wait_for(|| (renewed(&server) != first).then_some(()));
    assert_eq!(holder(&server, "cli", "lock"), "a");
    a.signal("-TERM");
    a.expect("STOPPED a");
    let (code, log) = a.exit_with_log();
    assert_eq!(code, Some(0));
    assert!(log.contains("event"), "the refusal is warned about: {log}");
}

#[test]
fn a_token_file_that_cannot_be_read_at_start_is_an_error_naming_it() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    let child = Command::new(BIN)
        .args([
            "--server",
            &server.url(),
            "--namespace",
            "cli",
            "--name",
            "x",
        ])
        .args(["--token-file", "/nonexistent/token", "--ignore-stdin"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_output(child);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/token"), "{err}");
    assert_eq!(server.stats().requests, 0, "it never tried");
}

/// `child`'s output once it exits; killed (and the test failed) if it
/// is still running after [`WAIT`].
fn wait_output(mut child: Child) -> std::process::Output {
    let deadline = Instant::now() + WAIT;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "still running after {WAIT:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}
