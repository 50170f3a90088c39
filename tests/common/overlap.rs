//! Candidates of `lease-elect` on one Lease whose COMMANDs write
//! timestamps, faults applied to them, and the overlap of their COMMANDs
//! measured from what the COMMANDs wrote: the harness of
//! `tests/lease_elect_overlap.rs`, `tests/lease_elect_world.rs` and
//! `benches/overlap.rs`.
//!
//! Each COMMAND (`TICKER`) appends `start`, `tick` (every 10 ms), `term`
//! and `exit` lines to one log, each with its name, pid, term token
//! (`LEASE_ELECT_TERM`) and a microsecond wall-clock time read without a
//! fork (bash's `$EPOCHREALTIME`). A run lasted at least from its first line
//! to its last, and at most 10 ms (one tick) more: the overlap of two runs
//! measured from their lines is a lower bound, short by at most a tick.
//! COMMAND runs without `LD_PRELOAD`, so that a candidate whose clock is
//! faked (libfaketime) still writes true times.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use lease_elector::testing::{Fault, TestApiServer};
use serde_json::json;

use super::procs::alive;
use super::spawned::Spawned;
pub use super::spawned::WAIT;
use super::tempdir::TempDir;
use super::RawLeases;

pub const NS: &str = "overlap";
pub const LEASE: &str = "lock";

/// The COMMAND: `$1` the log, `$2` its name, `$3` what SIGTERM does:
/// `exit` (at once), `ignore` (logged only), or `linger:S` (keep running S
/// seconds, then exit: a job that finishes slowly).
pub const TICKER: &str = r#"#!/bin/bash
log=$1; who=$2; mode=${3:-exit}
say() { echo "$1 $who $$ ${LEASE_ELECT_TERM:--} $EPOCHREALTIME" >> "$log"; }
stop_at=
on_term() {
  say term
  case $mode in
  exit) say exit; exit 0 ;;
  linger:*) t=$EPOCHREALTIME; stop_at=$(( ${t/./} + ${mode#linger:} * 1000000 )) ;;
  esac
}
trap on_term TERM
trap 'say int; say exit; exit 0' INT
say start
while :; do
  say tick
  if [ -n "$stop_at" ]; then
    t=$EPOCHREALTIME
    if [ "${t/./}" -ge "$stop_at" ]; then say exit; exit 0; fi
  fi
  sleep 0.01
done
"#;

/// Fill stderr (a pipe) until a write would block, through a description
/// of the pipe of its own (so that `O_NONBLOCK` stays there), then run the
/// candidate: its stderr is full from its first line.
const FILL_STDERR_THEN_EXEC: &str = "dd if=/dev/zero of=/proc/self/fd/3 bs=4096 oflag=nonblock status=none 3>&2 2>/dev/null; exec \"$@\"";

/// libfaketime's preload library (Debian's `faketime` package), if
/// installed.
pub fn libfaketime() -> Option<PathBuf> {
    let lib = Path::new("faketime/libfaketime.so.1");
    let mut dirs = vec![PathBuf::from("/usr/lib")];
    if let Ok(entries) = std::fs::read_dir("/usr/lib") {
        dirs.extend(entries.flatten().map(|e| e.path()));
    }
    dirs.into_iter().map(|d| d.join(lib)).find(|p| p.exists())
}

/// Options for a candidate whose wall clock stands still at `frozen`
/// (`YYYY-MM-DD HH:MM:SS`, UTC) through `lib` (libfaketime); its monotonic
/// clock runs as ever.
pub fn frozen_wall_clock(lib: &Path, frozen: &str) -> Options {
    faked_wall_clock(lib, frozen)
}

/// Options for a candidate whose wall clock libfaketime (`lib`) fakes as
/// `faketime` says (`FAKETIME`: `@YYYY-MM-DD HH:MM:SS` starts there and
/// runs, `+Nd` runs N days ahead, no `@` stands still); its monotonic
/// clock runs as ever.
pub fn faked_wall_clock(lib: &Path, faketime: &str) -> Options {
    Options {
        env: vec![
            ("LD_PRELOAD".into(), lib.display().to_string()),
            ("FAKETIME".into(), faketime.into()),
            ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
            ("TZ".into(), "UTC".into()),
        ],
        ..Options::default()
    }
}

/// A lease duration, renew deadline and retry period, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    pub lease: u64,
    pub renew: u64,
    pub retry: u64,
}

/// Lease 4 s, renew deadline 3 s, retry 1 s: the tests' timings.
pub const SHORT: Timings = Timings {
    lease: 4,
    renew: 3,
    retry: 1,
};

/// client-go's 15 s / 10 s / 2 s.
pub const CLIENT_GO: Timings = Timings {
    lease: 15,
    renew: 10,
    retry: 2,
};

impl Timings {
    fn args(self) -> Vec<String> {
        [
            "--lease-duration",
            &self.lease.to_string(),
            "--renew-deadline",
            &self.renew.to_string(),
            "--retry-period",
            &self.retry.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    pub fn lease_duration(self) -> Duration {
        Duration::from_secs(self.lease)
    }
}

impl std::fmt::Display for Timings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{} s", self.lease, self.renew, self.retry)
    }
}

/// How a candidate is started.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Its stderr is a pipe that is full and never read.
    pub stuck_stderr: bool,
    /// What its COMMAND does on SIGTERM (`TICKER`'s `$3`); `exit` if empty.
    pub on_term: String,
    /// More flags (`--grace 30`).
    pub flags: Vec<String>,
    /// More environment for `lease-elect` (COMMAND runs without
    /// `LD_PRELOAD` and `FAKETIME`).
    pub env: Vec<(String, String)>,
}

/// The API server, the COMMAND's log and the timings the candidates share.
pub struct World {
    pub server: TestApiServer,
    pub dir: TempDir,
    pub timings: Timings,
    bin: PathBuf,
    script: PathBuf,
}

/// The bearer token of candidate `who` (so that a fault can single it out).
pub fn token(who: &str) -> String {
    format!("token-{who}")
}

impl World {
    /// `bin` is the `lease-elect` to run.
    pub fn new(bin: &Path, timings: Timings) -> World {
        let dir = TempDir::new();
        // Run by /bin/bash: no need to be executable.
        let script = dir.write("ticker.sh", TICKER);
        let server = TestApiServer::start().unwrap();
        server.add_namespace(NS);
        World {
            server,
            dir,
            timings,
            bin: bin.to_path_buf(),
            script,
        }
    }

    /// Start candidate `who` (identity `who`, token [`token`]).
    pub fn start(&self, who: &str, options: &Options) -> Candidate {
        let token_file = self.dir.write(&format!("{who}.token"), token(who));
        let mut cmd = if options.stuck_stderr {
            let mut c = Command::new("/bin/sh");
            c.args(["-c", FILL_STDERR_THEN_EXEC, "lease-elect"])
                .arg(&self.bin);
            c
        } else {
            Command::new(&self.bin)
        };
        let on_term = if options.on_term.is_empty() {
            "exit"
        } else {
            &options.on_term
        };
        cmd.args(["--server", &self.server.url(), "--namespace", NS])
            .args(["--name", LEASE, "--identity", who])
            .arg("--token-file")
            .arg(&token_file)
            .args(self.timings.args())
            .args(&options.flags)
            .args(["--", "/usr/bin/env", "-u", "LD_PRELOAD", "-u", "FAKETIME"])
            .arg("/bin/bash")
            .arg(&self.script)
            .arg(self.log_path())
            .args([who, on_term])
            .envs(options.env.iter().map(|(k, v)| (k, v)))
            .env_remove("LEASE_ELECT_LOG")
            .stdin(Stdio::null())
            // A group of its own whose parent (this process) is in another
            // group of the session: not orphaned, so SIGTSTP, SIGTTIN and
            // SIGTTOU are not discarded (the kernel drops them for an
            // orphaned group), as for a job of an interactive shell.
            .process_group(0);
        Spawned::start(&mut cmd, !options.stuck_stderr)
    }

    /// Start A, and wait until it leads and its COMMAND runs.
    pub fn a_leads(&self, a: &Options) -> Candidate {
        let a = self.start("a", a);
        a.expect("LEADING a");
        self.wait_ticks("a", 1);
        a
    }

    /// A leads and its COMMAND runs; then B starts and follows.
    pub fn a_leads_b_follows(&self, a: &Options, b: &Options) -> (Candidate, Candidate) {
        let a = self.a_leads(a);
        let b = self.start("b", b);
        b.expect("NEW_LEADER a");
        (a, b)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.0.join("ticks")
    }

    /// Every run of a COMMAND so far.
    pub fn timeline(&self) -> Timeline {
        Timeline::parse(&std::fs::read_to_string(self.log_path()).unwrap_or_default())
    }

    /// Wait until a COMMAND of `who` has ticked `n` times.
    pub fn wait_ticks(&self, who: &str, n: usize) {
        let deadline = Instant::now() + WAIT;
        while !self
            .timeline()
            .runs
            .iter()
            .any(|r| r.who == who && r.ticks >= n)
        {
            assert!(
                Instant::now() < deadline,
                "{who}'s COMMAND never ticked {n} times: {:?}",
                self.timeline()
            );
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Wait until a COMMAND of `who` has said `what` (`term`, `exit`).
    pub fn wait_said(&self, who: &str, what: &str) {
        let deadline = Instant::now() + WAIT;
        while !self
            .timeline()
            .runs
            .iter()
            .any(|r| r.who == who && r.said.iter().any(|s| s == what))
        {
            assert!(
                Instant::now() < deadline,
                "{who}'s COMMAND never said {what}: {:?}",
                self.timeline()
            );
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Every request of `who` from now on is dropped unanswered.
    pub fn cut_off(&self, who: &str) {
        self.server.inject(
            Fault::drop_connection()
                .bearer(&token(who))
                .times(usize::MAX),
        );
    }

    /// The stored Lease.
    pub fn lease(&self) -> serde_json::Value {
        self.server
            .lease_value(NS, LEASE)
            .expect("the Lease exists")
    }

    /// The stored Lease's spec.
    pub fn spec(&self) -> serde_json::Value {
        self.lease()["spec"].clone()
    }

    /// Another writer puts `holder` on the Lease, renewed now for a lease
    /// duration, with `leaseTransitions` as given (`None`: left out, as the
    /// official Python client writes it).
    pub fn overwrite(&self, holder: &str, transitions: Option<u64>) {
        let now = lease_elector::MicroTime::from_system_time(SystemTime::now()).to_string();
        let mut spec = json!({
            "holderIdentity": holder,
            "leaseDurationSeconds": self.timings.lease,
            "acquireTime": now,
            "renewTime": now,
        });
        if let Some(t) = transitions {
            spec["leaseTransitions"] = json!(t);
        }
        self.server.put_value(
            NS,
            json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": LEASE},
                "spec": spec,
            }),
        );
    }

    /// The Lease freed by someone else: holder empty, transitions kept.
    pub fn free(&self) {
        let mut lease = self.lease();
        lease["spec"]["holderIdentity"] = json!("");
        self.server.put_value(NS, lease);
    }

    /// `kubectl delete lease`, through the test server.
    pub fn delete(&self) {
        self.server.delete_lease(NS, LEASE);
    }
}

impl Drop for World {
    /// A failed test leaves no COMMAND behind.
    fn drop(&mut self) {
        for run in self.timeline().runs {
            let cmdline = std::fs::read(format!("/proc/{}/cmdline", run.pid)).unwrap_or_default();
            if alive(run.pid) && String::from_utf8_lossy(&cmdline).contains("ticker.sh") {
                let _ = Command::new("kill")
                    .args(["-KILL", &run.pid.to_string()])
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
}

/// One `lease-elect` process.
pub type Candidate = Spawned;

/// One run of a COMMAND: one term of one candidate.
#[derive(Debug, Clone, Default)]
pub struct Run {
    pub who: String,
    pub pid: u32,
    /// `LEASE_ELECT_TERM`.
    pub token: String,
    /// Microseconds since the epoch: the first and the last line.
    pub first: u64,
    pub last: u64,
    pub ticks: usize,
    /// The lines other than ticks (`start`, `term`, `int`, `exit`).
    pub said: Vec<String>,
}

/// Every run, in the order they started.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    pub runs: Vec<Run>,
}

impl Timeline {
    pub fn parse(text: &str) -> Timeline {
        let mut by_pid: BTreeMap<u32, Run> = BTreeMap::new();
        // A line still being written is left for the next look.
        for line in text.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
            let words: Vec<&str> = line.split_whitespace().collect();
            let [what, who, pid, token, time] = words[..] else {
                panic!("bad line {line:?}");
            };
            let (Ok(pid), Some(us)) = (pid.parse::<u32>(), micros(time)) else {
                panic!("bad line {line:?}");
            };
            let run = by_pid.entry(pid).or_insert_with(|| Run {
                who: who.to_string(),
                pid,
                token: token.to_string(),
                first: us,
                last: us,
                ..Run::default()
            });
            run.first = run.first.min(us);
            run.last = run.last.max(us);
            if what == "tick" {
                run.ticks += 1;
            } else {
                run.said.push(what.to_string());
            }
        }
        let mut runs: Vec<Run> = by_pid.into_values().collect();
        runs.sort_by_key(|r| r.first);
        Timeline { runs }
    }

    /// The longest time two runs of different candidates both ran, with
    /// the two runs.
    pub fn worst_overlap(&self) -> (Duration, Option<(Run, Run)>) {
        let mut worst = (Duration::ZERO, None);
        for (i, a) in self.runs.iter().enumerate() {
            for b in self.runs[i + 1..].iter().filter(|b| b.who != a.who) {
                let both = a.last.min(b.last).saturating_sub(a.first.max(b.first));
                let both = Duration::from_micros(both);
                if both > worst.0 {
                    worst = (both, Some((a.clone(), b.clone())));
                }
            }
        }
        worst
    }

    /// Every run ended before the next one started.
    pub fn assert_no_overlap(&self) {
        let (overlap, runs) = self.worst_overlap();
        assert_eq!(
            overlap,
            Duration::ZERO,
            "two COMMANDs ran at once for {overlap:?}: {runs:#?}"
        );
    }

    /// Each run's candidate and token, in the order they started.
    pub fn terms(&self) -> Vec<(String, String)> {
        self.runs
            .iter()
            .map(|r| (r.who.clone(), r.token.clone()))
            .collect()
    }

    /// The runs of `who`.
    pub fn of(&self, who: &str) -> Vec<Run> {
        self.runs.iter().filter(|r| r.who == who).cloned().collect()
    }
}

/// `1733300000.123456` as microseconds.
fn micros(time: &str) -> Option<u64> {
    let (s, us) = time.split_once('.')?;
    Some(s.parse::<u64>().ok()? * 1_000_000 + us.parse::<u64>().ok()?)
}
