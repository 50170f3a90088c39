//! kubectl, the reference client, against the embedded API server: every
//! command an engineer points at a fake cluster works as on a real one,
//! through a kubeconfig written by `TestApiServer::write_kubeconfig`.
//!
//! Ignored by plain `cargo test` (they need kubectl); `cargo test --
//! --ignored` runs them, skipped with a note on stderr (and a marker
//! `.ci/run` reports) where kubectl is not on `PATH`. Each
//! test gives kubectl its own `HOME` (for its discovery cache) and
//! `KUBECONFIG`, so a real `~/.kube` is never read or written.

mod common;

use common::RawLeases;

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::tempdir::TempDir;
use lease_elector::testing::TestApiServer;
use lease_elector::{
    Client, ClientConfig, EventRecorder, LeaderElector, LeaderEvent, LeaseLock, MicroTime,
};
use serde_json::{json, Value};

/// Longest any one kubectl run may take; only reached on failure.
const RUN_LIMIT: Duration = Duration::from_secs(30);
/// Longest wait for a line from `kubectl get -w` or an elector event.
const WAIT: Duration = Duration::from_secs(20);
const TOKEN: &str = "kubectl-s3cret";

/// kubectl on `PATH`, if any.
fn find_kubectl() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("kubectl"))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| {
                use std::os::unix::fs::PermissionsExt;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            })
        })
}

macro_rules! kubectl_or_skip {
    ($server:expr, $token:expr) => {
        match Kubectl::new($server, $token) {
            Some(k) => {
                common::oracle::ran("kubectl");
                k
            }
            None => {
                common::oracle::skipped("kubectl", "kubectl not installed");
                return;
            }
        }
    };
}

/// What one kubectl run printed.
#[derive(Debug)]
struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// kubectl with its own home and a kubeconfig for one server.
struct Kubectl {
    bin: PathBuf,
    dir: TempDir,
}

impl Kubectl {
    fn new(server: &TestApiServer, token: Option<&str>) -> Option<Kubectl> {
        let bin = find_kubectl()?;
        let dir = TempDir::new();
        server
            .write_kubeconfig(dir.0.join("kubeconfig"), token)
            .unwrap();
        Some(Kubectl { bin, dir })
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.0.join("kubeconfig")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.dir.0)
            .env("KUBECONFIG", self.kubeconfig())
            .current_dir(&self.dir.0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// Run to completion within [`RUN_LIMIT`] (killed and failed past it).
    fn run_with(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut cmd = self.command(args);
        cmd.envs(env.iter().copied());
        let mut child = cmd.spawn().expect("kubectl starts");
        let out = drain(child.stdout.take());
        let err = drain(child.stderr.take());
        let deadline = Instant::now() + RUN_LIMIT;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("kubectl {args:?} ran longer than {RUN_LIMIT:?}");
            }
            thread::sleep(Duration::from_millis(5));
        };
        Run {
            ok: status.success(),
            stdout: out.join().unwrap(),
            stderr: err.join().unwrap(),
        }
    }

    fn run(&self, args: &[&str]) -> Run {
        self.run_with(args, &[])
    }

    /// Run, insisting on success; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let r = self.run(args);
        assert!(r.ok, "kubectl {args:?} failed: {r:?}");
        r.stdout
    }

    /// Run, insisting on failure; its stderr.
    fn fails(&self, args: &[&str]) -> String {
        let r = self.run(args);
        assert!(!r.ok, "kubectl {args:?} succeeded: {r:?}");
        r.stderr
    }

    /// Write `text` to a file in kubectl's folder; its path as a string.
    fn file(&self, name: &str, text: &str) -> String {
        self.dir.write(name, text).to_string_lossy().into_owned()
    }
}

fn drain(pipe: Option<impl Read + Send + 'static>) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_string(&mut s);
        }
        s
    })
}

/// A long-running kubectl whose stdout lines arrive on a channel; killed
/// on drop.
struct Streaming {
    child: Child,
    lines: Receiver<String>,
}

impl Streaming {
    fn start(k: &Kubectl, args: &[&str]) -> Streaming {
        let mut child = k.command(args).spawn().expect("kubectl starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Streaming { child, lines }
    }

    /// The next line that contains `needle`, waiting at most `limit`.
    fn line_with(&self, needle: &str, limit: Duration) -> Option<String> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return Some(line),
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
    }
}

impl Streaming {
    /// How it exited, waiting at most `limit`; `None` while it runs.
    fn exit_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Streaming {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn lease(name: &str, holder: &str) -> Value {
    let now = MicroTime::from_system_time(std::time::SystemTime::now()).to_string();
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": { "name": name },
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": 0,
        },
    })
}

fn lease_yaml(name: &str, holder: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: {name}\n\
         spec:\n  holderIdentity: {holder}\n  leaseDurationSeconds: 15\n{extra_spec}"
    )
}

fn holder(server: &TestApiServer, ns: &str, name: &str) -> Option<String> {
    server.lease_value(ns, name).map(|l| {
        l["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or("")
            .to_string()
    })
}

/// The whitespace-separated cells of each line of a table.
fn rows(table: &str) -> Vec<Vec<&str>> {
    table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect()
}

#[test]
#[ignore = "needs kubectl"]
fn get_leases_all_namespaces_prints_each_lease_with_its_holder() {
    let server = TestApiServer::start().unwrap();
    let k = kubectl_or_skip!(&server, None);
    server.put_value("default", lease("web", "pod-a"));
    server.put_value("kube-system", lease("kube-scheduler", "node-1_abc"));

    let all = k.ok(&["get", "leases", "-A"]);
    let all = rows(&all);
    assert_eq!(all[0], ["NAMESPACE", "NAME", "HOLDER", "AGE"]);
    assert_eq!(all[1][..3], ["default", "web", "pod-a"]);
    assert_eq!(all[2][..3], ["kube-system", "kube-scheduler", "node-1_abc"]);
    assert!(all[1][3].ends_with('s'), "an age in seconds: {all:?}");
    assert_eq!(all.len(), 3);

    // Without -A: the context's namespace, `default`.
    let here = k.ok(&["get", "leases"]);
    let here = rows(&here);
    assert_eq!(here.len(), 2, "{here:?}");
    assert_eq!(here[0], ["NAME", "HOLDER", "AGE"]);
    assert_eq!(here[1][..2], ["web", "pod-a"]);
    let none = k.run(&["get", "leases", "-n", "empty"]);
    assert!(none.ok && none.stdout.is_empty(), "{none:?}");
    assert!(none
        .stderr
        .contains("No resources found in empty namespace."));
}

#[test]
#[ignore = "needs kubectl"]
fn get_lease_jsonpath_prints_the_holder_and_a_missing_lease_is_not_found() {
    let server = TestApiServer::start().unwrap();
    let k = kubectl_or_skip!(&server, None);
    server.put_value("default", lease("web", "pod-a"));

    let out = k.ok(&[
        "get",
        "lease",
        "web",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    assert_eq!(out, "pod-a");
    let json: Value = serde_json::from_str(&k.ok(&["get", "lease", "web", "-o", "json"])).unwrap();
    assert_eq!(json, server.lease_value("default", "web").unwrap());

    let err = k.fails(&["get", "lease", "nope"]);
    assert_eq!(
        err.trim(),
        r#"Error from server (NotFound): leases.coordination.k8s.io "nope" not found"#
    );
}

#[test]
#[ignore = "needs kubectl"]
fn create_replace_and_delete_from_files() {
    let server = TestApiServer::start().unwrap();
    let k = kubectl_or_skip!(&server, None);

    let a = k.file("a.yaml", &lease_yaml("a", "pod-a", ""));
    let out = k.ok(&["create", "--validate=false", "-f", &a]);
    assert_eq!(out.trim(), "lease.coordination.k8s.io/a created");
    assert_eq!(holder(&server, "default", "a").as_deref(), Some("pod-a"));
    let err = k.fails(&["create", "--validate=false", "-f", &a]);
    assert!(
        err.contains(r#"leases.coordination.k8s.io "a" already exists"#),
        "{err}"
    );

    // Validating (the default): on the server, through the OpenAPI it
    // publishes, so a misspelt field is refused as a cluster refuses it.
    let b = k.file("b.yaml", &lease_yaml("b", "pod-b", ""));
    assert_eq!(
        k.ok(&["create", "-f", &b]).trim(),
        "lease.coordination.k8s.io/b created"
    );
    let typo = k.file(
        "typo.yaml",
        &lease_yaml("a", "pod-x", "  leaseTransition: 1\n"),
    );
    let err = k.fails(&["replace", "-f", &typo]);
    assert!(
        err.contains(r#"strict decoding error: unknown field "spec.leaseTransition""#),
        "{err}"
    );
    let invalid = k.file(
        "invalid.yaml",
        &lease_yaml("a", "pod-x", "  leaseTransitions: -1\n"),
    );
    let err = k.fails(&["replace", "-f", &invalid]);
    assert!(
        err.contains(
            "spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0"
        ),
        "{err}"
    );
    assert_eq!(holder(&server, "default", "a").as_deref(), Some("pod-a"));

    // The file has no resourceVersion: kubectl reads the current one and
    // sends it.
    let replaced = k.file("a2.yaml", &lease_yaml("a", "pod-c", ""));
    assert_eq!(
        k.ok(&["replace", "-f", &replaced]).trim(),
        "lease.coordination.k8s.io/a replaced"
    );
    assert_eq!(holder(&server, "default", "a").as_deref(), Some("pod-c"));

    assert_eq!(
        k.ok(&["delete", "lease", "a"]).trim(),
        r#"lease.coordination.k8s.io "a" deleted"#
    );
    assert!(server.lease_value("default", "a").is_none());
    assert!(server.lease_value("default", "b").is_some());
    let err = k.fails(&["delete", "lease", "a"]);
    assert_eq!(
        err.trim(),
        r#"Error from server (NotFound): leases.coordination.k8s.io "a" not found"#
    );
}

#[test]
#[ignore = "needs kubectl"]
fn patch_edit_label_and_annotate_change_the_stored_lease() {
    let server = TestApiServer::start().unwrap();
    let k = kubectl_or_skip!(&server, None);
    server.put_value("default", lease("web", "pod-a"));

    k.ok(&[
        "patch",
        "lease",
        "web",
        "--type=merge",
        "-p",
        r#"{"spec":{"holderIdentity":"pod-b"}}"#,
    ]);
    assert_eq!(holder(&server, "default", "web").as_deref(), Some("pod-b"));
    // The strategic merge patch kubectl sends by default.
    k.ok(&[
        "patch",
        "lease",
        "web",
        "-p",
        r#"{"spec":{"holderIdentity":"pod-c"}}"#,
    ]);
    assert_eq!(holder(&server, "default", "web").as_deref(), Some("pod-c"));
    let edited = k.run_with(
        &["edit", "lease", "web"],
        &[("KUBE_EDITOR", "sed -i s/pod-c/pod-d/")],
    );
    assert!(edited.ok, "{edited:?}");
    assert_eq!(edited.stdout.trim(), "lease.coordination.k8s.io/web edited");
    assert_eq!(holder(&server, "default", "web").as_deref(), Some("pod-d"));

    k.ok(&["label", "lease", "web", "app=web"]);
    k.ok(&["annotate", "lease", "web", "owner=team-a"]);
    let stored = server.lease_value("default", "web").unwrap();
    assert_eq!(stored["metadata"]["labels"], json!({"app": "web"}));
    assert_eq!(
        stored["metadata"]["annotations"],
        json!({"owner": "team-a"})
    );

    // Validation still applies to what a patch makes.
    let err = k.fails(&[
        "patch",
        "lease",
        "web",
        "-p",
        r#"{"spec":{"leaseDurationSeconds":0}}"#,
    ]);
    assert!(
        err.contains("spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"),
        "{err}"
    );
}

#[test]
#[ignore = "needs kubectl"]
fn get_with_a_label_selector_lists_only_the_matching_leases() {
    let server = TestApiServer::start().unwrap();
    let k = kubectl_or_skip!(&server, None);
    for (name, app) in [("web", Some("web")), ("db", Some("db")), ("bare", None)] {
        let mut l = lease(name, "pod-a");
        if let Some(app) = app {
            l["metadata"]["labels"] = json!({ "app": app });
        }
        server.put_value("default", l);
    }
    let names = |selector: &str| {
        k.ok(&["get", "leases", "-l", selector, "-o", "name"])
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(names("app=web"), ["lease.coordination.k8s.io/web"]);
    assert_eq!(
        names("app in (web,db)"),
        [
            "lease.coordination.k8s.io/db",
            "lease.coordination.k8s.io/web"
        ]
    );
    assert_eq!(names("!app"), ["lease.coordination.k8s.io/bare"]);
    let none = k.run(&["get", "leases", "-l", "app=nothing"]);
    assert!(none.ok && none.stdout.is_empty(), "{none:?}");
}

#[test]
#[ignore = "needs kubectl"]
fn get_lease_watch_prints_each_change() {
    let server = TestApiServer::start().unwrap();
    let k = kubectl_or_skip!(&server, None);
    server.put_value("default", lease("web", "pod-a"));

    let watch = Streaming::start(&k, &["get", "lease", "web", "-w"]);
    let first = watch.line_with("web", WAIT).expect("the current state");
    assert_eq!(rows(&first)[0][..2], ["web", "pod-a"]);
    // kubectl drops the first event of its watch (the state it already
    // printed); a change made before the watch starts would be that
    // event. So change once it started, and again if it was too early.
    let deadline = Instant::now() + WAIT;
    while server.stats().watches == 0 {
        assert!(Instant::now() < deadline, "kubectl never started watching");
        thread::sleep(Duration::from_millis(10));
    }
    let mut seen = None;
    for attempt in 0..10 {
        let mut changed = server.lease_value("default", "web").unwrap();
        changed["spec"]["holderIdentity"] = format!("pod-b{attempt}").into();
        server.put_value("default", changed);
        seen = watch.line_with("pod-b", Duration::from_secs(2));
        if seen.is_some() {
            break;
        }
    }
    let seen = seen.expect("kubectl printed the change");
    assert_eq!(rows(&seen)[0][0], "web");
    assert!(rows(&seen)[0][1].starts_with("pod-b"), "{seen}");

    server.delete_lease("default", "web");
    // The deletion prints the last state once more, as against a cluster.
    assert!(watch.line_with("web", WAIT).is_some());
}

#[test]
#[ignore = "needs kubectl"]
fn get_events_and_describe_show_posted_events() {
    let server = TestApiServer::start().unwrap();
    let k = kubectl_or_skip!(&server, None);
    server.put_value("default", lease("web", "pod-a"));
    let uid = server.lease_value("default", "web").unwrap()["metadata"]["uid"].clone();
    let now = lease_elector::calendar::rfc3339(
        std::time::SystemTime::now(),
        lease_elector::calendar::Digits::Seconds,
    );
    let event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": { "generateName": "web." },
        "involvedObject": {
            "kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
            "namespace": "default", "name": "web", "uid": uid,
        },
        "reason": "LeaderElection",
        "message": "pod-a became leader",
        "type": "Normal",
        "source": { "component": "my-operator" },
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    });
    let url = format!("{}/api/v1/namespaces/default/events", server.url());
    let resp = ureq::post(&url)
        .header("Content-Type", "application/json")
        .send(event.to_string())
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);

    let events = k.ok(&["get", "events"]);
    let events = rows(&events);
    assert_eq!(
        events[0],
        ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    );
    assert_eq!(
        events[1][1..],
        [
            "Normal",
            "LeaderElection",
            "lease/web",
            "pod-a",
            "became",
            "leader"
        ]
    );
    let wide = k.ok(&["get", "events", "-A", "-o", "wide"]);
    assert!(wide.contains("my-operator"), "{wide}");
    assert!(rows(&wide)[1][0] == "default", "{wide}");

    let described = k.ok(&["describe", "lease", "web"]);
    let holder_line = described
        .lines()
        .find(|l| l.contains("Holder Identity:"))
        .unwrap_or_else(|| panic!("describe shows the spec: {described}"));
    assert_eq!(holder_line.split_whitespace().last(), Some("pod-a"));
    let event_line = described
        .lines()
        .find(|l| l.contains("LeaderElection"))
        .unwrap_or_else(|| panic!("describe lists the event: {described}"));
    assert!(event_line.contains("my-operator"), "{event_line}");
    assert!(event_line.contains("pod-a became leader"), "{event_line}");
}

/// An elector holds a Lease on a TLS server with a token; kubectl, with
/// the same kubeconfig, sees it, its Events, and takes the Lease away.
#[test]
#[ignore = "needs kubectl"]
fn kubectl_over_tls_sees_an_elector_and_hands_its_lease_to_another() {
    let server = TestApiServer::builder()
        .tls(true)
        .tokens(&[TOKEN])
        .build()
        .unwrap();
    let k = kubectl_or_skip!(&server, Some(TOKEN));

    // The elector reads the very kubeconfig kubectl uses.
    let config = ClientConfig::from_kubeconfig(k.kubeconfig(), None).unwrap();
    let client = Client::new(config).unwrap();
    let events = EventRecorder::new(client.clone(), "my-operator").with_instance("pod-a");
    let lock =
        LeaseLock::new(client, "default", "my-operator", "pod-a").with_event_sink(Arc::new(events));
    let (handle, leader_events) = LeaderElector::builder(lock)
        .lease_duration(Duration::from_secs(15))
        .renew_deadline(Duration::from_secs(10))
        .retry_period(Duration::from_secs(2))
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        let left = WAIT.checked_sub(started.elapsed()).expect("never led");
        match leader_events.recv_timeout(left).unwrap() {
            LeaderEvent::StartedLeading { .. } => break,
            LeaderEvent::NewLeader { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }

    assert_eq!(
        k.ok(&[
            "get",
            "lease",
            "my-operator",
            "-o",
            "jsonpath={.spec.holderIdentity}"
        ]),
        "pod-a"
    );
    // The recorder sends from its own thread: wait for the Event to land.
    let deadline = Instant::now() + WAIT;
    while server.event_values().is_empty() {
        assert!(Instant::now() < deadline, "the elector recorded no Event");
        thread::sleep(Duration::from_millis(10));
    }
    let events = k.ok(&["get", "events"]);
    assert!(events.contains("lease/my-operator"), "{events}");
    assert!(events.contains("pod-a became leader"), "{events}");
    let described = k.ok(&["describe", "lease", "my-operator"]);
    assert!(described.contains("pod-a became leader"), "{described}");

    // Edit the Lease as an operator would: read, change the holder, put it
    // back with the resourceVersion read. A renew in between makes that
    // a conflict, as on a cluster; read again then.
    let mut replaced = false;
    for _ in 0..10 {
        let current = k.ok(&["get", "lease", "my-operator", "-o", "json"]);
        let mut lease: Value = serde_json::from_str(&current).unwrap();
        assert!(lease["metadata"]["resourceVersion"].is_string());
        lease["spec"]["holderIdentity"] = "pod-b".into();
        lease["spec"]["leaseDurationSeconds"] = 3600.into();
        let file = k.file("taken.json", &lease.to_string());
        let r = k.run(&["replace", "-f", &file]);
        if r.ok {
            assert_eq!(
                r.stdout.trim(),
                "lease.coordination.k8s.io/my-operator replaced"
            );
            replaced = true;
            break;
        }
        assert!(
            r.stderr.contains("the object has been modified"),
            "only a conflict is expected: {r:?}"
        );
    }
    assert!(replaced, "kubectl replace kept conflicting");
    let replaced_at = Instant::now();
    let taken = server.lease_value("default", "my-operator").unwrap();
    let stopped_at = loop {
        let left = WAIT
            .checked_sub(replaced_at.elapsed())
            .expect("never stepped down");
        match leader_events.recv_timeout(left).unwrap() {
            LeaderEvent::StoppedLeading { at, .. } => break at,
            LeaderEvent::NewLeader { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    };
    // Within a retry period: its next renew conflicts, it reads the new
    // holder and steps down at once.
    let took = stopped_at.saturating_duration_since(replaced_at);
    assert!(
        took <= Duration::from_secs(2) + Duration::from_millis(500),
        "StoppedLeading {took:?} after the replace"
    );
    // And it never wrote over the new holder: the Lease is as kubectl left it.
    let deadline = Instant::now() + WAIT;
    while !handle.is_finished() {
        assert!(Instant::now() < deadline, "the elector did not end");
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(server.lease_value("default", "my-operator").unwrap(), taken);
    assert_eq!(
        holder(&server, "default", "my-operator").as_deref(),
        Some("pod-b")
    );
    handle.stop().unwrap();

    // The token is what lets kubectl in.
    let stranger = TempDir::new();
    server
        .write_kubeconfig(stranger.0.join("kubeconfig"), Some("wrong"))
        .unwrap();
    let wrong = stranger.0.join("kubeconfig");
    let r = k.run_with(
        &["get", "leases"],
        &[("KUBECONFIG", wrong.to_str().unwrap())],
    );
    assert!(!r.ok);
    assert!(
        r.stderr
            .contains("error: You must be logged in to the server (Unauthorized)"),
        "{r:?}"
    );
}

#[test]
#[ignore = "needs kubectl"]
fn version_reports_the_server() {
    let server = TestApiServer::start().unwrap();
    let k = kubectl_or_skip!(&server, None);
    let out = k.ok(&["version"]);
    assert!(
        out.contains("Server Version: v1.32.0+lease-elector-testing"),
        "{out}"
    );
}

/// What kubectl reads, byte for byte as the real API server words it: the
/// list body, and the Status a delete answers with or fails with.
#[test]
fn list_and_delete_answer_with_the_api_servers_bodies() {
    let server = TestApiServer::start().unwrap();
    server.put_value("ns1", lease("a", "pod-a"));
    server.put_value("ns2", lease("b", "pod-b"));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let base = format!("{}/apis/coordination.k8s.io/v1", server.url());
    let get = |url: &str| -> (u16, Value) {
        let mut resp = agent.get(url).call().unwrap();
        let body = resp.body_mut().read_to_string().unwrap();
        (resp.status().as_u16(), serde_json::from_str(&body).unwrap())
    };

    let (code, list) = get(&format!("{base}/leases"));
    assert_eq!(code, 200);
    assert_eq!(list["kind"], "LeaseList");
    assert_eq!(list["apiVersion"], "coordination.k8s.io/v1");
    // The version of the last write, b's.
    let last = server.lease_value("ns2", "b").unwrap()["metadata"]["resourceVersion"].clone();
    assert_eq!(list["metadata"], json!({ "resourceVersion": last }));
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
    // Items carry no kind of their own, as in a typed list.
    assert!(list["items"][0].get("kind").is_none());
    let (_, ns2) = get(&format!(
        "{base}/leases?fieldSelector=metadata.namespace%3Dns2"
    ));
    assert_eq!(ns2["items"].as_array().unwrap().len(), 1);

    let uid = server.lease_value("ns1", "a").unwrap()["metadata"]["uid"].clone();
    let url = format!("{base}/namespaces/ns1/leases/a");
    let delete = |options: Value| -> (u16, Value) {
        let mut resp = agent
            .delete(&url)
            .header("Content-Type", "application/json")
            .force_send_body()
            .send(options.to_string())
            .unwrap();
        let body = resp.body_mut().read_to_string().unwrap();
        (resp.status().as_u16(), serde_json::from_str(&body).unwrap())
    };
    let rv = server.lease_value("ns1", "a").unwrap()["metadata"]["resourceVersion"].clone();
    let (code, stale) = delete(json!({"preconditions": {"resourceVersion": "1000"}}));
    assert_eq!(code, 409);
    assert_eq!(stale["reason"], "Conflict");
    // As kube-apiserver 1.37 words it (settled by tests/real_differential.rs).
    assert_eq!(
        stale["message"],
        format!(
            "Operation cannot be fulfilled on Lease.coordination.k8s.io \"a\": the ResourceVersion \
             in the precondition (1000) does not match the ResourceVersion in record ({}). \
             The object might have been modified",
            rv.as_str().unwrap()
        ),
    );
    assert_eq!(
        stale["details"],
        json!({"name": "a", "group": "coordination.k8s.io", "kind": "Lease"})
    );
    assert!(server.lease_value("ns1", "a").is_some());
    let (code, done) = delete(json!({"preconditions": {"uid": uid}}));
    assert_eq!(code, 200);
    assert_eq!(
        done,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {"name": "a", "group": "coordination.k8s.io", "kind": "leases", "uid": uid},
        })
    );
    assert!(server.lease_value("ns1", "a").is_none());
    let (code, gone) = delete(json!({}));
    assert_eq!(code, 404);
    assert_eq!(
        gone["details"],
        json!({"name": "a", "group": "coordination.k8s.io", "kind": "leases"})
    );
}

/// Namespaces are objects, as on a cluster: `kubectl create namespace`,
/// `get namespaces`, `delete namespace`; a Lease in a namespace that does
/// not exist is refused with the API server's NotFound.
#[test]
#[ignore = "needs kubectl"]
fn create_namespace_then_create_a_lease_in_it_and_delete_it() {
    let server = TestApiServer::start().unwrap();
    let k = kubectl_or_skip!(&server, None);
    let file = k.file("lease.yaml", &lease_yaml("l", "pod-a", ""));

    let err = k.fails(&["create", "-f", &file, "-n", "team-a"]);
    assert_eq!(
        err.trim(),
        r#"Error from server (NotFound): error when creating "FILE": namespaces "team-a" not found"#
            .replace("FILE", &file)
    );
    assert_eq!(
        k.ok(&["create", "namespace", "team-a"]).trim(),
        "namespace/team-a created"
    );
    let all = k.ok(&["get", "namespaces"]);
    let all = rows(&all);
    assert_eq!(all[0], ["NAME", "STATUS", "AGE"]);
    let names: Vec<&str> = all[1..].iter().map(|r| r[0]).collect();
    assert_eq!(
        names,
        [
            "default",
            "kube-node-lease",
            "kube-public",
            "kube-system",
            "team-a"
        ]
    );
    assert!(all[1..].iter().all(|r| r[1] == "Active"), "{all:?}");
    k.ok(&["create", "-f", &file, "-n", "team-a"]);
    assert_eq!(holder(&server, "team-a", "l").as_deref(), Some("pod-a"));

    assert_eq!(
        k.ok(&["delete", "namespace", "team-a"]).trim(),
        r#"namespace "team-a" deleted"#
    );
    assert!(server.lease_value("team-a", "l").is_none());
    let err = k.fails(&["delete", "namespace", "default"]);
    assert_eq!(
        err.trim(),
        r#"Error from server (Forbidden): namespaces "default" is forbidden: this namespace may not be deleted"#
    );
}

/// Issue 38: `kubectl apply --server-side` sends the file's
/// `metadata.resourceVersion`, and kube-apiserver compares it with the
/// stored one: a lock that applies what it read is a compare-and-swap, and
/// the second of two appliers that read the same version is refused.
#[test]
#[ignore = "needs kubectl"]
fn apply_server_side_with_a_stale_resource_version_is_a_conflict() {
    let server = TestApiServer::start().unwrap();
    let k = kubectl_or_skip!(&server, None);
    let file = k.file("cas.yaml", &lease_yaml("cas", "pod-a", ""));
    k.ok(&["create", "-f", &file]);
    let read = k.ok(&[
        "get",
        "lease",
        "cas",
        "-o",
        "jsonpath={.metadata.resourceVersion}",
    ]);
    let applied = |holder: &str| {
        let yaml = lease_yaml("cas", holder, "").replace(
            "  name: cas\n",
            &format!("  name: cas\n  resourceVersion: \"{read}\"\n"),
        );
        k.file(&format!("{holder}.yaml"), &yaml)
    };
    let mine = applied("pod-b");
    assert_eq!(
        k.ok(&["apply", "--server-side", "--force-conflicts", "-f", &mine])
            .trim(),
        "lease.coordination.k8s.io/cas serverside-applied"
    );
    assert_eq!(holder(&server, "default", "cas").as_deref(), Some("pod-b"));
    let theirs = applied("pod-c");
    let err = k.fails(&["apply", "--server-side", "--force-conflicts", "-f", &theirs]);
    assert!(
        err.contains(
            r#"Operation cannot be fulfilled on leases.coordination.k8s.io "cas": the object has been modified; please apply your changes to the latest version and try again"#
        ),
        "{err}"
    );
    assert_eq!(holder(&server, "default", "cas").as_deref(), Some("pod-b"));
}

/// Issue 38: a Lease with a finalizer outlives `kubectl delete`, which
/// waits (as against a cluster) until a patch removes the finalizer.
#[test]
#[ignore = "needs kubectl"]
fn delete_of_a_finalized_lease_waits_until_its_finalizer_is_removed() {
    let server = TestApiServer::start().unwrap();
    let k = kubectl_or_skip!(&server, None);
    let mut held = lease("held", "pod-a");
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    server.put_value("default", held);

    let mut delete = Streaming::start(&k, &["delete", "lease", "held"]);
    let said = delete.line_with("held", WAIT).expect("kubectl deleted it");
    assert_eq!(said.trim(), r#"lease.coordination.k8s.io "held" deleted"#);
    let marked = k.ok(&[
        "get",
        "lease",
        "held",
        "-o",
        "jsonpath={.metadata.deletionTimestamp}",
    ]);
    assert!(!marked.trim().is_empty(), "not marked: {marked:?}");
    assert!(
        delete.exit_within(Duration::from_millis(200)).is_none(),
        "kubectl delete must wait while the finalizer holds the Lease"
    );

    k.ok(&[
        "patch",
        "lease",
        "held",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ]);
    let status = delete.exit_within(WAIT).expect("kubectl delete returns");
    assert!(status.success(), "{status:?}");
    assert!(server.lease_value("default", "held").is_none());
    let err = k.fails(&["get", "lease", "held"]);
    assert!(err.contains("NotFound"), "{err}");
}

/// Issue 38: names and label keys a cluster refuses are refused with its
/// 422, which kubectl prints as it prints a cluster's.
#[test]
#[ignore = "needs kubectl"]
fn create_refuses_a_name_or_a_label_a_cluster_refuses() {
    let server = TestApiServer::start().unwrap();
    let k = kubectl_or_skip!(&server, None);
    let bad_name = k.file("bad.yaml", &lease_yaml("Bad_Name", "pod-a", ""));
    let err = k.fails(&["create", "-f", &bad_name]);
    assert_eq!(
        err.trim(),
        r#"The Lease "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"#
    );
    let bad_label = k.file(
        "label.yaml",
        &lease_yaml("good", "pod-a", "").replace(
            "  name: good\n",
            "  name: good\n  labels:\n    \"bad key!\": x\n",
        ),
    );
    let err = k.fails(&["create", "-f", &bad_label]);
    assert!(
        err.contains(r#"metadata.labels: Invalid value: "bad key!": name part must consist of alphanumeric characters"#),
        "{err}"
    );
    assert!(server.lease_value("default", "Bad_Name").is_none());
    assert!(server.lease_value("default", "good").is_none());
}
