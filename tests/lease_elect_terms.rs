//! `lease-elect` and terms: COMMAND gets its term's fencing token, a frozen
//! leader's COMMAND is stopped the moment it thaws and its writes are
//! refused by a fenced store, and `--acquire-timeout` gives up without
//! touching the Lease.
//!
//! The fenced store lives in the test: COMMAND drops each write as a file
//! `req-WHO-N` (holding `WHO TOKEN N`) into a spool folder, and a thread of
//! the test takes them in order of arrival, accepting a token no lower than
//! the highest it has seen. Nothing the frozen writer holds can block it.

#![cfg(feature = "cli")]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use lease_elector::testing::{Fault, TestApiServer};
use serde_json::json;

mod common;

use common::procs::{alive, kill, stat_field};
use common::spawned::Spawned;
use common::tempdir::TempDir;
use common::RawLeases;
use common::{eventually, WAIT};

const BIN: &str = env!("CARGO_BIN_EXE_lease-elect");

const TIMINGS: [&str; 6] = [
    "--lease-duration",
    "2",
    "--renew-deadline",
    "1.5",
    "--retry-period",
    "0.3",
];

/// COMMAND: `$1` the spool folder, `$2` its name. It records its
/// environment, then writes through the store every 50 ms.
const WRITER: &str = r#"
spool=$1; who=$2
echo "$LEASE_ELECT_TERM $LEASE_ELECT_IDENTITY $LEASE_ELECT_LEASE" > "$spool/../env-$who"
echo $$ > "$spool/../pid-$who"
n=0
while :; do
  n=$((n + 1))
  echo "$who $LEASE_ELECT_TERM $n" > "$spool/.tmp-$who-$n"
  mv "$spool/.tmp-$who-$n" "$spool/req-$who-$n"
  sleep 0.05
done
"#;

/// One write as the store judged it.
#[derive(Debug, Clone)]
struct Judged {
    who: String,
    token: String,
    n: u64,
    accepted: bool,
    at: Instant,
}

/// The fenced store: takes a write only with a token no lower than the
/// highest it has seen.
struct Store {
    judged: Arc<Mutex<Vec<Judged>>>,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Store {
    fn start(spool: PathBuf) -> Store {
        let judged = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (judged, stop) = (judged.clone(), stop.clone());
            thread::spawn(move || {
                let mut highest: Option<u64> = None;
                while !stop.load(Ordering::Relaxed) {
                    let mut requests: Vec<(std::time::SystemTime, PathBuf)> =
                        std::fs::read_dir(&spool)
                            .unwrap()
                            .flatten()
                            .filter(|e| e.file_name().to_string_lossy().starts_with("req-"))
                            .map(|e| (e.metadata().unwrap().modified().unwrap(), e.path()))
                            .collect();
                    requests.sort();
                    for (_, path) in requests {
                        let text = std::fs::read_to_string(&path).unwrap();
                        std::fs::remove_file(&path).unwrap();
                        let words: Vec<&str> = text.split_whitespace().collect();
                        let (who, token, n) = match words[..] {
                            [who, token, n] => (who, token, n),
                            [who, n] => (who, "", n),
                            _ => panic!("bad request {text:?}"),
                        };
                        let accepted = match token.parse::<u64>() {
                            Ok(t) if highest.is_none_or(|h| t >= h) => {
                                highest = Some(t);
                                true
                            }
                            _ => false,
                        };
                        judged.lock().unwrap().push(Judged {
                            who: who.to_string(),
                            token: token.to_string(),
                            n: n.parse().unwrap(),
                            accepted,
                            at: Instant::now(),
                        });
                    }
                    thread::sleep(Duration::from_millis(2));
                }
            })
        };
        Store {
            judged,
            stop,
            thread: Some(thread),
        }
    }

    fn judged(&self) -> Vec<Judged> {
        self.judged.lock().unwrap().clone()
    }

    fn accepted_from(&self, who: &str) -> usize {
        self.judged()
            .iter()
            .filter(|j| j.who == who && j.accepted)
            .count()
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Start candidate `identity` with `extra` flags.
fn start(server: &TestApiServer, identity: &str, extra: &[&str]) -> Spawned {
    Spawned::start(
        Command::new(BIN)
            .args(["--server", &server.url(), "--namespace", "terms"])
            .args(["--name", "lock", "--identity", identity])
            .args(extra)
            .env_remove("LEASE_ELECT_LOG")
            .stdin(Stdio::null()),
        true,
    )
}

#[test]
fn a_frozen_leader_is_stopped_on_thawing_and_its_stale_writes_are_refused() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("terms");
    let dir = TempDir::new();
    let writer = dir.script("writer.sh", WRITER).display().to_string();
    let spool = dir.0.join("spool");
    std::fs::create_dir_all(&spool).unwrap();
    let store = Store::start(spool.clone());
    let command = |who: &str| {
        vec![
            "--".to_string(),
            "/bin/sh".into(),
            writer.clone(),
            spool.display().to_string(),
            who.into(),
        ]
    };
    let args = |who: &str| -> Vec<String> {
        TIMINGS
            .iter()
            .map(|s| s.to_string())
            .chain(command(who))
            .collect()
    };
    let a_args = args("a");
    let mut a = start(
        &server,
        "a",
        &a_args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    a.expect("LEADING a");
    eventually("a's first accepted write", || store.accepted_from("a") > 0);
    let b_args = args("b");
    let mut b = start(
        &server,
        "b",
        &b_args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    b.expect("NEW_LEADER a");

    // Freeze a whole: lease-elect, its supervisor and COMMAND's group.
    let writer_pid: u32 = dir.read("pid-a").trim().parse().unwrap();
    let supervisor = stat_field(writer_pid, 1).unwrap();
    assert_eq!(stat_field(supervisor, 1), Some(a.child.id()));
    let group = stat_field(writer_pid, 2).unwrap();
    let frozen = [
        a.child.id().to_string(),
        supervisor.to_string(),
        format!("-{group}"),
    ];
    let mut stop = vec!["-STOP".to_string(), "--".into()];
    stop.extend(frozen.iter().cloned());
    kill(&stop.iter().map(String::as_str).collect::<Vec<_>>());

    // b takes over once the lease has expired, and writes.
    b.expect("LEADING b");
    eventually("b's first accepted write", || store.accepted_from("b") > 0);

    // Thaw, COMMAND first (it runs ahead of its elector).
    let mut thaw = vec!["-CONT".to_string(), "--".into()];
    thaw.extend(frozen.iter().rev().cloned());
    kill(&thaw.iter().map(String::as_str).collect::<Vec<_>>());
    let thawed = Instant::now();
    while alive(writer_pid) && thawed.elapsed() < WAIT {
        thread::sleep(Duration::from_millis(2));
    }
    let took = thawed.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "a's COMMAND ran {took:?} after thawing; stderr: {}",
        a.log()
    );
    assert_eq!(a.exit_code(), Some(1), "{}", a.log());
    let log = a.log();
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("leadership lost (")),
        "{log}"
    );

    // The terms: b's token is greater, and each COMMAND knew its own.
    let env = |who: &str| -> Vec<String> {
        dir.read(&format!("env-{who}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let (env_a, env_b) = (env("a"), env("b"));
    assert_eq!(
        env_a.len(),
        3,
        "LEASE_ELECT_TERM, _IDENTITY, _LEASE: {env_a:?}"
    );
    assert_eq!(env_a[1..], ["a", "terms/lock"]);
    assert_eq!(env_b[1..], ["b", "terms/lock"]);
    let (token_a, token_b): (u64, u64) = (env_a[0].parse().unwrap(), env_b[0].parse().unwrap());
    assert!(token_b > token_a, "{token_b} > {token_a}");
    // Tokens are the resourceVersions of the writes that began the terms:
    // b's is no later than the Lease's now; leaseTransitions counts b's
    // takeover, as client-go counts it.
    let lease = server.lease_value("terms", "lock").unwrap();
    let stored = resource_version(&lease);
    assert!(token_b <= stored, "{token_b} <= {stored}");
    assert_eq!(lease["spec"]["leaseTransitions"], json!(1));

    // Every write a made after thawing was refused.
    thread::sleep(Duration::from_millis(50));
    let judged = store.judged();
    let stale: Vec<&Judged> = judged
        .iter()
        .filter(|j| j.who == "a" && j.at >= thawed)
        .collect();
    assert!(
        stale
            .iter()
            .all(|j| !j.accepted && j.token == token_a.to_string()),
        "{stale:#?}"
    );
    let by_who: BTreeMap<&str, usize> = judged.iter().fold(BTreeMap::new(), |mut m, j| {
        *m.entry(j.who.as_str()).or_default() += usize::from(j.accepted);
        m
    });
    eprintln!(
        "a's COMMAND ended {took:?} after thawing; accepted {by_who:?}; a's writes after thawing, all refused: {:?}",
        stale.iter().map(|j| j.n).collect::<Vec<_>>()
    );

    kill(&["-TERM", &b.child.id().to_string()]);
    b.expect("STOPPED b");
    assert_eq!(b.exit_code(), Some(0));
}

fn held_by_other(server: &TestApiServer) {
    held_by_other_for(server, 3600);
}

/// The Lease held by `other`, renewed now, for `seconds`.
fn held_by_other_for(server: &TestApiServer, seconds: u64) {
    let now = lease_elector::MicroTime::from_system_time(std::time::SystemTime::now());
    server.put_value(
        "terms",
        json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "lock"},
            "spec": {
                "holderIdentity": "other",
                "leaseDurationSeconds": seconds,
                "acquireTime": now.to_string(),
                "renewTime": now.to_string(),
                "leaseTransitions": 4,
            },
        }),
    );
}

/// Requests that wrote to a Lease.
fn lease_writes(server: &TestApiServer) -> Vec<String> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/leases") && r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

#[test]
fn acquire_timeout_zero_gives_up_at_once_with_75_when_another_holds_the_lease() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("terms");
    held_by_other(&server);
    let began = Instant::now();
    let mut a = start(
        &server,
        "a",
        &["--acquire-timeout", "0", "--", "/bin/sh", "-c", "echo ran"],
    );
    let code = a.exit_code();
    let took = began.elapsed();
    assert_eq!(code, Some(75), "{}", a.log());
    assert!(took < Duration::from_secs(2), "{took:?}");
    let out: Vec<String> = a.printed();
    assert!(
        !out.iter().any(|l| l == "ran" || l.starts_with("LEADING")),
        "{out:?}"
    );
    assert_eq!(lease_writes(&server), Vec::<String>::new());
    assert_eq!(
        server.lease_value("terms", "lock").unwrap()["spec"]["holderIdentity"],
        "other"
    );
}

/// 75 says "another run holds the lease" (the cron recipes skip on it);
/// an API server that refuses us (RBAC: 403) or cannot be reached is an
/// error (exit 1) that says why, not a skip.
#[test]
fn acquire_timeout_reports_an_api_server_it_cannot_ask_as_an_error_not_as_75() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("terms");
    server.inject(Fault::status(403).forever());
    let mut forbidden = start(&server, "a", &["--acquire-timeout", "0", "--", "true"]);
    assert_eq!(forbidden.exit_code(), Some(1), "{}", forbidden.log());
    assert!(
        forbidden.log().contains("could not be asked") && forbidden.log().contains("403"),
        "{}",
        forbidden.log()
    );

    let unreachable = Command::new(BIN)
        .args([
            "--server",
            "http://127.0.0.1:1",
            "--namespace",
            "terms",
            "--name",
            "lock",
        ])
        .args(["--no-events", "--acquire-timeout", "0", "--", "true"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&unreachable.stderr);
    assert_eq!(unreachable.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("could not be asked"), "{stderr}");
}

#[test]
fn acquire_timeout_waits_that_long_for_a_held_lease_then_gives_up_with_75() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("terms");
    held_by_other(&server);
    let began = Instant::now();
    let mut a = start(
        &server,
        "a",
        &[
            "--acquire-timeout",
            "1",
            "--retry-period",
            "0.2",
            "--",
            "true",
        ],
    );
    assert_eq!(a.exit_code(), Some(75), "{}", a.log());
    let took = began.elapsed();
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert_eq!(lease_writes(&server), Vec::<String>::new());
}

#[test]
fn acquire_timeout_on_a_free_lease_runs_the_command_with_its_term_and_passes_its_status_on() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("terms");
    let mut a = start(
        &server,
        "a",
        &[
            "--acquire-timeout",
            "2",
            "--",
            "/bin/sh",
            "-c",
            "echo \"term $LEASE_ELECT_TERM\"; exit 4",
        ],
    );
    a.expect("LEADING a");
    assert_eq!(a.exit_code(), Some(4), "{}", a.log());
    let out: Vec<String> = a.printed();
    // The token: the resourceVersion of the create that began the term,
    // below the release's.
    let lease = server.lease_value("terms", "lock").unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "", "released");
    let token = token_printed(&out, "term ");
    assert!(
        0 < token && token < resource_version(&lease),
        "{out:?} {lease}"
    );
}

/// The token COMMAND printed after `prefix`.
fn token_printed(out: &[String], prefix: &str) -> u64 {
    out.iter()
        .find_map(|l| l.strip_prefix(prefix)?.parse().ok())
        .unwrap_or_else(|| panic!("no {prefix:?} line: {out:?}"))
}

fn resource_version(lease: &serde_json::Value) -> u64 {
    lease["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no resourceVersion: {lease}"))
}

#[test]
fn an_attempt_in_flight_when_the_acquire_timeout_passes_decides_and_leaves_no_write_behind() {
    // The lease expires (for a) 1 s after a first sees it; a's attempt
    // then is in flight from 1 s to 2 s (its PUT is answered after 1 s),
    // across the time-out at 1.5 s. Giving up under it would leave the
    // write it sent in place, unreleased, behind an exit 75 that says
    // nothing was written: the attempt decides instead.
    let server = TestApiServer::start().unwrap();
    server.add_namespace("terms");
    held_by_other_for(&server, 1);
    server.inject(Fault::latency(Duration::from_secs(1)).method("PUT"));
    let mut a = start(
        &server,
        "a",
        &[
            "--acquire-timeout",
            "1.5",
            "--",
            "/bin/sh",
            "-c",
            "echo \"ran $LEASE_ELECT_TERM\"; exit 3",
        ],
    );
    let code = a.exit_code();
    let out: Vec<String> = a.printed();
    // The PUT sent at 1 s lands whatever lease-elect did meanwhile.
    eventually("a's PUT answered", || !lease_writes(&server).is_empty());
    let spec = server.lease_value("terms", "lock").unwrap()["spec"].clone();
    assert_eq!(
        (code, spec["holderIdentity"].as_str()),
        (Some(3), Some("")),
        "the attempt won: COMMAND ran, then the lease was released; {out:?} {spec}; {}",
        a.log()
    );
    let token = token_printed(&out, "ran ");
    let lease = server.lease_value("terms", "lock").unwrap();
    assert!(
        0 < token && token < resource_version(&lease),
        "{out:?} {lease}"
    );
}
