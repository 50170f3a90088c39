//! The `elect` example as a user runs it: a real process against the
//! embedded API server, its exact stdout lines, and a clean exit.
//!
//! `cargo test` builds the examples first; the binary is found next to
//! this test's own executable (`target/<profile>/examples/elect`).

use std::io::{BufRead, BufReader, Lines};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use lease_elector::testing::TestApiServer;

mod common;

use common::tempdir::TempDir;
use common::RawLeases;

const WAIT: Duration = Duration::from_secs(20);

fn elect_binary() -> PathBuf {
    common::example("elect")
}

struct Elect {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Elect {
    fn start(server: &TestApiServer, identity: &str, extra: &[&str]) -> Elect {
        let url = server.url();
        Elect::spawn(
            &["--server", &url, "--namespace", "cli"],
            &[],
            identity,
            extra,
        )
    }

    /// `elect` reaching the API server through `target` arguments and
    /// environment variables.
    fn spawn(target: &[&str], env: &[(&str, &str)], identity: &str, extra: &[&str]) -> Elect {
        let mut child = Command::new(elect_binary())
            .envs(env.iter().copied())
            .args(target)
            .args(["--name", "lock"])
            .args(["--identity", identity])
            .args([
                "--lease-duration",
                "4",
                "--renew-deadline",
                "3s",
                "--retry-period",
                "0.2",
            ])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout: Lines<BufReader<ChildStdout>> =
            BufReader::new(child.stdout.take().unwrap()).lines();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in stdout.map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Elect { child, lines }
    }

    fn expect(&self, line: &str) {
        let got = self
            .lines
            .recv_timeout(WAIT)
            .unwrap_or_else(|e| panic!("waiting for {line:?}: {e}"));
        assert_eq!(got, line);
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn exit_code(mut self) -> Option<i32> {
        let (tx, rx) = mpsc::channel();
        let waiter = thread::spawn(move || {
            let status = self.child.wait().unwrap();
            let _ = tx.send(status.code());
            self
        });
        let code = rx.recv_timeout(WAIT).expect("elect exits");
        let rest: Vec<String> = waiter.join().unwrap().lines.try_iter().collect();
        assert!(rest.is_empty(), "unexpected output after exit: {rest:?}");
        code
    }
}

impl Drop for Elect {
    /// A failed test leaves no candidate behind.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[test]
fn sigterm_releases_and_exits_zero() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    let a = Elect::start(&server, "cli-a", &["--release-on-cancel"]);
    a.expect("NEW_LEADER cli-a");
    a.expect("LEADING cli-a");
    let b = Elect::start(&server, "cli-b", &["--ignore-stdin"]);
    b.expect("NEW_LEADER cli-a");
    a.signal("-TERM");
    a.expect("STOPPED cli-a");
    assert_eq!(a.exit_code(), Some(0));
    // Released, so b takes over on its next retry rather than after 4s.
    b.expect("NEW_LEADER cli-b");
    b.expect("LEADING cli-b");
    assert_eq!(
        server.lease_value("cli", "lock").unwrap()["spec"]["leaseTransitions"],
        1
    );
    b.signal("-INT");
    b.expect("STOPPED cli-b");
    assert_eq!(b.exit_code(), Some(0));
    let spec = &server.lease_value("cli", "lock").unwrap()["spec"];
    assert_eq!(
        spec["holderIdentity"], "cli-b",
        "no --release-on-cancel: kept"
    );
}

/// A script reading several candidates' lines from one stream (here one
/// file opened for appending: its order is the order of the writes) sees
/// each old leader's STOPPED before the next one's LEADING: `elect` writes
/// STOPPED when its term ends, and the release that lets the next
/// candidate lead (within a millisecond, watching) waits for it.
#[test]
fn through_sigterm_handovers_each_stopped_line_comes_before_the_next_leading() {
    /// A failed test leaves no candidate behind.
    struct Candidates(Vec<Child>);
    impl Drop for Candidates {
        fn drop(&mut self) {
            for child in &mut self.0 {
                if let Ok(None) = child.try_wait() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
    }
    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    let dir = TempDir::new();
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.0.join("stdout"))
        .unwrap();
    let url = server.url();
    let spawn = |id: &str| -> Child {
        Command::new(elect_binary())
            .args(["--server", &url, "--namespace", "cli", "--name", "lock"])
            .args(["--identity", id, "--release-on-cancel", "--ignore-stdin"])
            .args(["--lease-duration", "4", "--renew-deadline", "3s"])
            .args(["--retry-period", "0.2"])
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let sigterm = |child: &Child| {
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    let lines = || dir.read("stdout");
    let ids = ["h0", "h1", "h2", "h3", "h4"];
    let mut candidates = Candidates(vec![spawn(ids[0])]);
    common::eventually("h0 leads", || lines().contains("LEADING h0\n"));
    for (i, pair) in ids.windows(2).enumerate() {
        let (old, new) = (pair[0], pair[1]);
        candidates.0.push(spawn(new));
        // The next candidate follows (it has seen the leader) before the
        // SIGTERM: it leads within a round trip of the release.
        let seen = format!("NEW_LEADER {old}\n");
        common::eventually("the next candidate follows", || {
            lines().matches(&seen).count() >= 2
        });
        sigterm(&candidates.0[i]);
        let leading = format!("LEADING {new}\n");
        common::eventually("the next candidate leads", || lines().contains(&leading));
        assert_eq!(candidates.0[i].wait().unwrap().code(), Some(0));
        let text = lines();
        let stopped = text.find(&format!("STOPPED {old}\n"));
        let started = text.find(&leading);
        assert!(
            stopped.is_some() && stopped < started,
            "STOPPED {old} after LEADING {new}:\n{text}"
        );
    }
    let last = candidates.0.last().unwrap();
    sigterm(last);
    assert_eq!(
        candidates.0.last_mut().unwrap().wait().unwrap().code(),
        Some(0)
    );
}

/// The STOPPED line is written before the release, not after: while it
/// cannot be written (a stdout nobody drains, full), the Lease stays the
/// old leader's and the next candidate does not lead; once it is read,
/// the release follows.
#[test]
fn a_leader_whose_stopped_line_cannot_be_written_yet_has_not_released() {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    let (mut ours, theirs) = UnixStream::pair().unwrap();
    let filler = theirs.try_clone().unwrap();
    let url = server.url();
    let mut a = Command::new(elect_binary())
        .args(["--server", &url, "--namespace", "cli", "--name", "lock"])
        .args([
            "--identity",
            "full-a",
            "--release-on-cancel",
            "--ignore-stdin",
        ])
        .args(["--lease-duration", "4", "--renew-deadline", "3s"])
        .args(["--retry-period", "0.2"])
        .stdin(Stdio::null())
        .stdout(std::os::fd::OwnedFd::from(theirs))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut seen = Vec::new();
    let mut read_until = |ours: &mut UnixStream, text: &str| {
        let mut buf = [0u8; 65536];
        while !String::from_utf8_lossy(&seen).contains(text) {
            let n = ours.read(&mut buf).unwrap();
            assert!(n > 0, "stdout closed before {text:?}");
            seen.extend_from_slice(&buf[..n]);
        }
    };
    read_until(&mut ours, "LEADING full-a\n");
    let b = Elect::start(&server, "full-b", &["--ignore-stdin"]);
    b.expect("NEW_LEADER full-a");

    // Fill a's stdout: its next line blocks until this test reads.
    filler.set_nonblocking(true).unwrap();
    let chunk = [b'.'; 4096];
    loop {
        match (&filler).write(&chunk) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("{e}"),
        }
    }
    filler.set_nonblocking(false).unwrap();
    let status = Command::new("kill")
        .args(["-TERM", &a.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // a has stepped down (its term ended at the stop) but its STOPPED line
    // is not out: nothing is released, b does not lead.
    thread::sleep(Duration::from_millis(500));
    assert_eq!(
        server.lease_value("cli", "lock").unwrap()["spec"]["holderIdentity"],
        "full-a",
        "released before the STOPPED line was written"
    );
    read_until(&mut ours, "STOPPED full-a\n");
    b.expect("NEW_LEADER full-b");
    b.expect("LEADING full-b");
    assert_eq!(a.wait().unwrap().code(), Some(0));
}

#[test]
fn closing_stdin_stops_it() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    let mut a = Elect::start(&server, "cli-c", &["--release-on-cancel"]);
    a.expect("NEW_LEADER cli-c");
    a.expect("LEADING cli-c");
    drop(a.child.stdin.take());
    a.expect("STOPPED cli-c");
    assert_eq!(a.exit_code(), Some(0));
    assert_eq!(
        server.lease_value("cli", "lock").unwrap()["spec"]["holderIdentity"],
        ""
    );
}

#[test]
fn kubeconfig_yaml_over_tls_by_path_and_by_environment() {
    let server = TestApiServer::builder()
        .tls(true)
        .tokens(&["cli-token"])
        .build()
        .unwrap();
    server.add_namespace("cli");
    let dir = TempDir::new();
    dir.write("ca.crt", server.ca_pem());
    // The current context points nowhere: only --context reaches the server.
    let config = dir.write(
        "config",
        format!(
            "apiVersion: v1
clusters:
- cluster:
    certificate-authority: ca.crt
    server: {}
  name: test
- cluster:
    server: https://127.0.0.1:1
  name: nowhere
contexts:
- context:
    cluster: test
    namespace: cli
    user: me
  name: test
- context:
    cluster: nowhere
    user: me
  name: nowhere
current-context: nowhere
kind: Config
users:
- name: me
  user:
    token: cli-token
",
            server.url()
        ),
    );
    let path = config.to_str().unwrap();
    /// Arguments and environment of one run.
    type Run<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)]);
    let runs: [Run; 2] = [
        (&["--kubeconfig", path, "--context", "test"], &[]),
        (&["--context", "test"], &[("KUBECONFIG", path)]),
    ];
    for (i, (target, env)) in runs.into_iter().enumerate() {
        let id = format!("cli-k{i}");
        let mut a = Elect::spawn(target, env, &id, &["--release-on-cancel"]);
        a.expect(&format!("NEW_LEADER {id}"));
        a.expect(&format!("LEADING {id}"));
        // The namespace came from the kubeconfig context.
        assert_eq!(
            server.lease_value("cli", "lock").unwrap()["spec"]["holderIdentity"],
            id.as_str()
        );
        drop(a.child.stdin.take());
        a.expect(&format!("STOPPED {id}"));
        assert_eq!(a.exit_code(), Some(0));
    }
}

#[test]
fn bad_arguments_exit_two_with_usage() {
    let out = Command::new(elect_binary())
        .arg("--bogus")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage: elect"));
    let out = Command::new(elect_binary())
        .args([
            "--server",
            "http://127.0.0.1:1",
            "--name",
            "x",
            "--lease-duration",
            "1.5",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "a usage error: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("--namespace is required"));
}

#[test]
fn a_forged_holder_identity_yields_one_escaped_event_line_and_no_escape() {
    const FORGED: &str = "x\nLEADING me\n\u{1b}[2J";
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
    let a = Elect::start(&server, "me", &["--ignore-stdin"]);
    a.expect(&format!(
        "NEW_LEADER {}",
        lease_elector::text::escape(FORGED)
    ));
    // Several polls of the same holder later: nothing else was printed.
    thread::sleep(Duration::from_millis(800));
    a.signal("-TERM");
    assert_eq!(a.exit_code(), Some(0));
}

#[test]
fn version_and_help_go_to_stdout_and_exit_zero() {
    for flag in ["--version", "-V"] {
        let out = Command::new(elect_binary()).arg(flag).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{flag}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("elect {}", env!("CARGO_PKG_VERSION"))
        );
    }
    for flag in ["--help", "-h"] {
        let out = Command::new(elect_binary()).arg(flag).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{flag}");
        assert!(out.stderr.is_empty(), "{flag}");
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(help.contains("needed for an https:// --server"), "{help}");
    }
}

#[test]
fn every_usage_error_exits_two() {
    for bad in [
        &["--bogus"][..],
        &["--server", "http://127.0.0.1:1", "--namespace", "ns"],
        &["--name", "x", "--lease-duration", "abc"],
        &["--name"],
        // TLS is always verified: an https:// --server needs --ca-file.
        &[
            "--name",
            "x",
            "--server",
            "https://127.0.0.1:1",
            "--namespace",
            "ns",
        ],
        // Values the command line alone gets wrong, found before any
        // request (they exited 1): see lease_elect_cli.rs.
        &["--name", "x", "--lease-duration", "1.5"],
        &["--name", "x", "--lease-duration", "5"],
        &["--name", "x", "--server", "h:1", "--namespace", "n"],
        &["--name", "Bad_Name"],
        &["--name", "x", "--identity", ""],
        // `--flag=value` as lease-elect reads it; a switch takes none.
        &["--name=Bad_Name"],
        &["--name=x", "--no-events=1"],
    ] {
        // Each names a reachable-looking server, so that only the value
        // in question is wrong.
        let server = ["--server", "http://127.0.0.1:1", "--namespace", "n"];
        let named = bad.contains(&"--server") || bad.contains(&"--bogus") || bad.len() < 2;
        let out = Command::new(elect_binary())
            .args(bad)
            .args(if named { &[][..] } else { &server[..] })
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("usage: elect"), "{bad:?}: {err}");
        if bad == ["--name=Bad_Name"] {
            assert!(err.contains("--name: invalid"), "{err}");
        }
    }
    let out = Command::new(elect_binary())
        .args(["--name", "x", "--retry-period", "abc"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("15, 1.5") && err.contains("1m30s"), "{err}");
}

#[test]
fn a_token_file_that_cannot_be_read_at_start_is_an_error_naming_it() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    let mut child = Command::new(elect_binary())
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
    let deadline = std::time::Instant::now() + WAIT;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            panic!("still retrying after {WAIT:?}");
        }
        thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/token"));
    assert_eq!(server.stats().requests, 0, "it never tried");
}

#[test]
fn transitions_are_recorded_as_events_unless_no_events() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    let a = Elect::start(&server, "cli-ev", &["--ignore-stdin"]);
    a.expect("NEW_LEADER cli-ev");
    a.expect("LEADING cli-ev");
    let deadline = std::time::Instant::now() + WAIT;
    while server.event_values().is_empty() {
        assert!(std::time::Instant::now() < deadline, "no event recorded");
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(server.event_values()[0]["reason"], "LeaderElection");
    a.signal("-TERM");
    a.expect("STOPPED cli-ev");
    assert_eq!(a.exit_code(), Some(0));

    let server = TestApiServer::start().unwrap();

    server.add_namespace("cli");
    let b = Elect::start(&server, "cli-ne", &["--ignore-stdin", "--no-events"]);
    b.expect("NEW_LEADER cli-ne");
    b.expect("LEADING cli-ne");
    thread::sleep(Duration::from_millis(300));
    b.signal("-TERM");
    b.expect("STOPPED cli-ne");
    assert_eq!(b.exit_code(), Some(0));
    assert!(server.event_values().is_empty());
}

/// `elect` (the README's walk-through runs it) tells on stderr, at its
/// default level, what the crate warns about: a server it cannot talk to,
/// named with what to do, a lost lease with its reason, and recovery. It
/// used to set no logger, so a wrong URL or an outage left stderr empty.
#[test]
fn warnings_reach_stderr_naming_the_server_and_the_reason_for_a_lost_lease() {
    let stderr_lines = |child: &mut Child| {
        let (tx, rx) = mpsc::channel();
        let err = BufReader::new(child.stderr.take().unwrap());
        thread::spawn(move || {
            for line in err.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        rx
    };
    let wait_line = |rx: &mpsc::Receiver<String>, needles: &[&str]| -> String {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = rx
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("no stderr line with {needles:?}: {e}"));
            if needles.iter().all(|n| line.contains(n)) {
                return line;
            }
        }
    };
    /// Killed and reaped when dropped, a failed assertion included.
    struct Reap(Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let run = |url: &str| {
        let child = Command::new(elect_binary())
            .args(["--server", url, "--namespace", "cli", "--name", "lock"])
            .args([
                "--lease-duration",
                "4",
                "--renew-deadline",
                "3",
                "--retry-period",
                "0.5",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Reap(child)
    };

    // Plain HTTP to a TLS port: the warning names the URL to use.
    let tls = TestApiServer::builder().tls(true).build().unwrap();
    tls.add_namespace("cli");
    let https = tls.url();
    let http = https.replacen("https://", "http://", 1);
    let mut child = run(&http);
    let lines = stderr_lines(&mut child.0);
    let line = wait_line(&lines, &[&format!("use {https}")]);
    assert!(!line.contains('\u{1b}'), "{line}");
    drop(child);

    // An outage while leading: the lost lease with its reason, then recovery.
    let server = TestApiServer::start().unwrap();
    server.add_namespace("cli");
    let mut child = run(&server.url());
    let lines = stderr_lines(&mut child.0);
    common::eventually("elect leads", || {
        server.lease_value("cli", "lock").is_some_and(|l| {
            l["spec"]["holderIdentity"]
                .as_str()
                .is_some_and(|h| !h.is_empty())
        })
    });
    server.set_outage(true);
    wait_line(&lines, &["lost lease cli/lock", "renew deadline"]);
    server.set_outage(false);
    wait_line(&lines, &["cli/lock", "succeed again"]);
}

/// `elect` installs no logger (it would link every log line's formatting
/// into the small binary), yet a kubeconfig cluster that skips TLS
/// verification is warned about on stderr, naming the cluster and file, as
/// kubectl-like tools must (`ClientConfig::warnings`).
#[test]
fn an_insecure_kubeconfig_cluster_is_warned_about_on_stderr() {
    let dir = TempDir::new();
    let config = dir.write(
        "insecure.yaml",
        "apiVersion: v1\nclusters:\n- name: shaky\n  cluster: {server: 'https://127.0.0.1:1', \
         insecure-skip-tls-verify: true}\nusers: [{name: u, user: {token: t}}]\n\
         contexts: [{name: x, context: {cluster: shaky, user: u, namespace: n}}]\ncurrent-context: x\n",
    );
    let mut child = Command::new(elect_binary())
        .args(["--kubeconfig".as_ref(), config.as_os_str()])
        .args(["--name", "x", "--no-events"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        first.starts_with("elect: warning:")
            && first.contains("\"shaky\" sets insecure-skip-tls-verify")
            && first.contains("insecure.yaml"),
        "{first}"
    );
}
