//! What the crate promises about a cluster, each test one body that runs
//! on the embedded test server (plain `cargo test`) and on kube-apiserver
//! with etcd (`LEASE_ELECTOR_CONTROL_PLANE=DIR`, as `.ci/control-plane
//! test` runs it): acquire, renew, release, handover through the watch and
//! by polling, an operator taking, freeing or deleting the Lease, tokens
//! across a deletion, racing candidates, the 403 fallback under RBAC,
//! Events, `run()`, `lease-elect`, the README's program, OpenShift's
//! configuration and kubeconfig shapes.
//!
//! Real time and the system clock throughout (kube-apiserver cannot be
//! stepped): timings of 4/3/1 s, waits bounded by [`WAIT`]. What only the
//! embedded server can do (injected faults, hung requests, a stepped
//! clock) stays in the other test files; `docs/architecture.md` lists them.

mod common;

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use common::api::{Api, User};
use common::overlap::{Timeline, TICKER};
use common::spawned::Spawned;
use common::{eventually, example, WAIT};
use lease_elector::openshift::LeaderElection;
use lease_elector::{
    ElectorHandle, EventRecorder, LeaderElector, LeaderEvent, LeaderEvents, StopReason, Term,
    WatchMode,
};
use serde_json::Value;

const LEASE: &str = "the-lease";

/// Lease 4 s, renew deadline 3 s, retry period 1 s; the watch as `watch`.
fn elector(api: &Api, user: User, id: &str, watch: bool) -> (ElectorHandle, LeaderEvents) {
    rejoining(api, user, id, watch, false)
}

/// [`elector`], seeking the lease again after a lost term with `rejoin`.
fn rejoining(
    api: &Api,
    user: User,
    id: &str,
    watch: bool,
    rejoin: bool,
) -> (ElectorHandle, LeaderEvents) {
    short(api.lock(user, LEASE, id))
        .rejoin(rejoin)
        .watch(watch)
        .build()
        .unwrap()
        .spawn()
        .unwrap()
}

/// Lease 4 s, renew deadline 3 s, retry period 1 s, releasing on stop.
fn short(lock: lease_elector::LeaseLock) -> lease_elector::ElectorBuilder {
    LeaderElector::builder(lock)
        .lease_duration(Duration::from_secs(4))
        .renew_deadline(Duration::from_secs(3))
        .retry_period(Duration::from_secs(1))
        .release_on_cancel(true)
}

/// [`short`], spawned.
fn spawn_short(lock: lease_elector::LeaseLock) -> (ElectorHandle, LeaderEvents) {
    short(lock).build().unwrap().spawn().unwrap()
}

/// The next `StartedLeading`, its term and when it came.
fn started(events: &LeaderEvents) -> (Term, Instant) {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(LeaderEvent::StartedLeading { term, .. }) => return (term, Instant::now()),
            Ok(_) => {}
            Err(e) => panic!("no StartedLeading within {WAIT:?}: {e}"),
        }
    }
}

/// The next `StoppedLeading`'s reason and when it came.
fn stopped(events: &LeaderEvents) -> (StopReason, Instant) {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(LeaderEvent::StoppedLeading { reason, .. }) => return (reason, Instant::now()),
            Ok(_) => {}
            Err(e) => panic!("no StoppedLeading within {WAIT:?}: {e}"),
        }
    }
}

fn spec(api: &Api) -> Value {
    api.lease(LEASE).expect("the Lease exists")["spec"].clone()
}

/// client-go's MicroTime: `2006-01-02T15:04:05.000000Z07:00`.
fn is_micro_time(v: &Value) -> bool {
    let s = v.as_str().unwrap_or("");
    s.len() == 27 && s.ends_with('Z') && s.as_bytes()[19] == b'.'
}

#[test]
fn a_candidate_creates_the_missing_lease_with_client_go_s_record() {
    let api = Api::new();
    let (handle, events) = elector(&api, User::Elector, "a", true);
    let (term, _) = started(&events);
    let spec = spec(&api);
    assert_eq!(spec["holderIdentity"], "a");
    assert_eq!(spec["leaseDurationSeconds"], 4);
    assert_eq!(spec["leaseTransitions"], 0, "{spec}");
    assert!(is_micro_time(&spec["acquireTime"]), "{spec}");
    assert!(is_micro_time(&spec["renewTime"]), "{spec}");
    // The term's token is the resourceVersion of the write that began it.
    assert_eq!(Some(term.token()), api.version(LEASE));
    drop(term);
    handle.stop().unwrap();
}

#[test]
fn the_leader_renews_with_one_update_per_renew_and_keeps_its_acquire_time() {
    let api = Api::new();
    let (handle, events) = elector(&api, User::Elector, "a", true);
    let (term, _) = started(&events);
    let first = spec(&api);
    eventually("three renews", || handle.probe().status().renews >= 3);
    let later = spec(&api);
    assert_eq!(later["acquireTime"], first["acquireTime"]);
    assert_ne!(later["renewTime"], first["renewTime"]);
    assert!(term.is_current());
    let status = handle.probe().status();
    let writes = api
        .requests(LEASE)
        .iter()
        .filter(|r| r.verb == "update" || r.verb == "create")
        .count() as u64;
    // The acquire one POST, every renew one PUT, and nothing else but the
    // first read.
    assert_eq!(writes, status.renews, "{:?}", api.requests(LEASE));
    let gets = api
        .requests(LEASE)
        .iter()
        .filter(|r| r.verb == "get")
        .count();
    assert!(gets <= 1, "reads while renewing: {:?}", api.requests(LEASE));
    drop(term);
    handle.stop().unwrap();
}

#[test]
fn a_stop_releases_the_lease_as_client_go_does() {
    let api = Api::new();
    let (handle, events) = elector(&api, User::Elector, "a", true);
    let (term, _) = started(&events);
    drop(term);
    handle.stop().unwrap();
    let spec = spec(&api);
    assert_eq!(spec["holderIdentity"], "", "{spec}");
    assert_eq!(spec["leaseDurationSeconds"], 1, "{spec}");
}

#[test]
fn a_watching_follower_leads_within_a_round_trip_of_the_release() {
    let api = Api::new();
    let (a, a_events) = elector(&api, User::Elector, "a", true);
    let (a_term, _) = started(&a_events);
    let (b, b_events) = elector(&api, User::Elector, "b", true);
    eventually("b to watch", || {
        b.probe().status().watch == WatchMode::Watching
    });
    eventually("b to see a lead", || {
        b.probe().leader().as_deref() == Some("a")
    });
    drop(a_term);
    let released = Instant::now();
    a.stop().unwrap();
    let (b_term, led) = started(&b_events);
    let handover = led.duration_since(released);
    // The stop's own release is in the measured time: well under a retry
    // period (1 s), which is what polling would cost.
    assert!(
        handover < Duration::from_millis(500),
        "handover took {handover:?} on {}",
        api.server_name()
    );
    assert_eq!(api.holder(LEASE).as_deref(), Some("b"));
    drop(b_term);
    b.stop().unwrap();
}

#[test]
fn a_user_without_watch_falls_back_to_polling_and_still_takes_over() {
    let api = Api::new();
    let (a, a_events) = elector(&api, User::Elector, "a", true);
    let (a_term, _) = started(&a_events);
    let (b, b_events) = elector(&api, User::NoWatch, "b", true);
    eventually(
        "b to be refused the watch",
        || matches!(b.probe().status().watch, WatchMode::Polling(ref why) if why.contains("403")),
    );
    assert!(!b.probe().status().watch.is_watching());
    drop(a_term);
    a.stop().unwrap();
    let (b_term, _) = started(&b_events);
    drop(b_term);
    b.stop().unwrap();
}

#[test]
fn a_polling_follower_sends_at_most_one_get_per_retry_period() {
    let api = Api::new();
    // Another program holds the Lease, renewed by the admin.
    api.create_held(LEASE, "someone-else", 60);
    let (b, _events) = elector(&api, User::NoWatch, "b", true);
    eventually("b to see the holder", || {
        b.probe().leader().as_deref() == Some("someone-else")
    });
    let start = Instant::now();
    let before = api.requests(LEASE).len();
    thread::sleep(Duration::from_secs(5));
    let window = start.elapsed();
    let sent: Vec<_> = api.requests(LEASE)[before..].to_vec();
    let gets = sent.iter().filter(|r| r.verb == "get").count();
    // One retry period is 1 s; a jittered wait is at least that long.
    let most = window.as_secs() as usize + 1;
    assert!(
        gets <= most,
        "{gets} GETs in {window:?} (at most {most}): {sent:?}"
    );
    assert!(gets >= 2, "it polls: {sent:?}");
    assert!(
        sent.iter().all(|r| r.verb == "get" || r.verb == "watch"),
        "a follower writes nothing to a held Lease: {sent:?}"
    );
    b.stop().unwrap();
}

#[test]
fn an_operator_taking_the_lease_ends_the_term_within_a_round_trip() {
    let api = Api::new();
    let (a, events) = elector(&api, User::Elector, "a", true);
    let (term, _) = started(&events);
    eventually("a to watch", || {
        a.probe().status().watch == WatchMode::Watching
    });
    let taken = Instant::now();
    api.take(LEASE, "operator", 60);
    let ended = term.wait_ended(WAIT);
    let seen = taken.elapsed();
    assert!(ended, "the term outlived the takeover");
    assert!(term.taken_over());
    // kubectl's own start-up is in the measured time.
    assert!(seen < Duration::from_secs(2), "seen after {seen:?}");
    let (reason, _) = stopped(&events);
    assert_eq!(reason, StopReason::Lost);
    assert_eq!(api.holder(LEASE).as_deref(), Some("operator"));
    drop(term);
    a.stop().unwrap();
    // The release after a loss leaves the operator's record alone.
    assert_eq!(api.holder(LEASE).as_deref(), Some("operator"));
}

#[test]
fn an_operator_patching_holder_identity_alone_ends_the_term() {
    let api = Api::new();
    let (a, events) = elector(&api, User::Elector, "a", true);
    let (term, _) = started(&events);
    eventually("a to watch", || {
        a.probe().status().watch == WatchMode::Watching
    });
    api.patch_spec(LEASE, serde_json::json!({"holderIdentity": "operator"}));
    assert!(term.wait_ended(WAIT), "the term outlived the patch");
    assert!(term.taken_over());
    drop(term);
    a.stop().unwrap();
    assert_eq!(api.holder(LEASE).as_deref(), Some("operator"));
}

#[test]
fn a_freed_lease_ends_the_term_and_the_leader_takes_it_again_with_a_greater_token() {
    let api = Api::new();
    let (a, events) = rejoining(&api, User::Elector, "a", true, true);
    let (term, _) = started(&events);
    eventually("a to watch", || {
        a.probe().status().watch == WatchMode::Watching
    });
    api.free(LEASE);
    assert!(term.wait_ended(WAIT), "the term outlived the free");
    let first = term.token();
    drop(term);
    let (again, _) = started(&events);
    assert!(again.token() > first, "{} after {first}", again.token());
    drop(again);
    a.stop().unwrap();
}

#[test]
fn deleting_the_lease_during_a_term_ends_it_and_the_next_term_s_token_is_greater() {
    let api = Api::new();
    let (a, events) = rejoining(&api, User::Elector, "a", true, true);
    let (term, _) = started(&events);
    eventually("a to watch", || {
        a.probe().status().watch == WatchMode::Watching
    });
    let first = term.token();
    api.delete(LEASE);
    assert!(term.wait_ended(WAIT), "the term outlived the deletion");
    assert!(term.taken_over());
    drop(term);
    let (next, _) = started(&events);
    // etcd's revision moved on: the recreated Lease's version is greater.
    assert!(next.token() > first, "{} after {first}", next.token());
    assert_eq!(Some(next.token()), api.version(LEASE));
    drop(next);
    a.stop().unwrap();
}

#[test]
fn tokens_grow_strictly_across_deletions_and_takeovers() {
    let api = Api::new();
    let (a, events) = rejoining(&api, User::Elector, "a", true, true);
    let mut tokens = Vec::new();
    for round in 0..4 {
        let (term, _) = started(&events);
        tokens.push(term.token());
        if round % 2 == 0 {
            api.delete(LEASE);
        } else {
            api.free(LEASE);
        }
        assert!(term.wait_ended(WAIT));
    }
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens went back: {tokens:?}"
    );
    a.stop().unwrap();
}

#[test]
fn racing_candidates_elect_exactly_one_and_the_losers_are_refused_with_conflicts() {
    let api = Api::new();
    let ids = ["r0", "r1", "r2", "r3", "r4"];
    let (tx, rx) = mpsc::channel();
    let electors: Vec<_> = ids
        .iter()
        .map(|id| {
            let (h, ev) = elector(&api, User::Elector, id, true);
            let tx = tx.clone();
            let id = id.to_string();
            let t = thread::spawn(move || {
                for e in ev.iter() {
                    if let LeaderEvent::StartedLeading { term, .. } = e {
                        tx.send((id.clone(), term.token())).unwrap();
                    }
                }
            });
            (h, t)
        })
        .collect();
    let (winner, token) = rx.recv_timeout(WAIT).expect("somebody leads");
    // Three retry periods for a second, wrong, leader to show.
    assert!(
        rx.recv_timeout(Duration::from_secs(3)).is_err(),
        "two leaders"
    );
    assert_eq!(api.holder(LEASE).as_deref(), Some(winner.as_str()));
    assert!(token > 0);
    let refused = api.requests(LEASE).iter().filter(|r| r.code == 409).count();
    let creates = api
        .requests(LEASE)
        .iter()
        .filter(|r| r.verb == "create")
        .count();
    // Every create but the winner's was refused (409 AlreadyExists), or the
    // losers read the winner's Lease before they tried.
    assert!(creates >= 1);
    assert_eq!(
        refused,
        creates - 1,
        "creates and refusals: {:?}",
        api.requests(LEASE)
    );
    for (h, t) in electors {
        h.stop().unwrap();
        t.join().unwrap();
    }
}

#[test]
fn a_renew_against_a_record_rewritten_behind_its_back_is_refused_and_the_term_ends() {
    let api = Api::new();
    let (a, events) = elector(&api, User::NoWatch, "a", true);
    let (term, _) = started(&events);
    // Without the watch, a learns of the rewrite only from its renew: the
    // PUT names the resourceVersion it last wrote, and the server refuses it.
    api.take(LEASE, "operator", 60);
    assert!(term.wait_ended(WAIT));
    let conflicts = api
        .requests(LEASE)
        .iter()
        .filter(|r| r.verb == "update" && r.code == 409)
        .count();
    assert_eq!(conflicts, 1, "{:?}", api.requests(LEASE));
    drop(term);
    a.stop().unwrap();
    assert_eq!(api.holder(LEASE).as_deref(), Some("operator"));
}

#[test]
fn a_follower_waits_out_another_holder_s_lease_and_takes_it_when_it_expires() {
    let api = Api::new();
    api.create_held(LEASE, "crashed", 2);
    let created = Instant::now();
    let (b, events) = elector(&api, User::Elector, "b", true);
    let (term, at) = started(&events);
    let waited = at.duration_since(created);
    // Judged by when b observed the record, not by its renewTime.
    assert!(waited >= Duration::from_secs(2), "took it after {waited:?}");
    let spec = spec(&api);
    assert_eq!(spec["holderIdentity"], "b");
    assert_eq!(spec["leaseTransitions"], 1, "{spec}");
    drop(term);
    b.stop().unwrap();
}

#[test]
fn transitions_are_counted_as_the_lease_changes_hands() {
    let api = Api::new();
    let (a, a_events) = elector(&api, User::Elector, "a", true);
    let (a_term, _) = started(&a_events);
    let (b, b_events) = elector(&api, User::Elector, "b", true);
    eventually("b to see a", || b.probe().leader().as_deref() == Some("a"));
    drop(a_term);
    a.stop().unwrap();
    let (b_term, _) = started(&b_events);
    assert_eq!(spec(&api)["leaseTransitions"], 1);
    drop(b_term);
    b.stop().unwrap();
}

#[test]
fn transitions_are_recorded_as_events_the_server_accepts() {
    let api = Api::new();
    let lock = api.lock(User::Elector, LEASE, "a").with_events(
        EventRecorder::new(api.client(User::Elector), "real-cluster-test").with_instance("a"),
    );
    let (handle, events) = spawn_short(lock);
    let (term, _) = started(&events);
    drop(term);
    handle.stop().unwrap();
    eventually("the Events to be stored", || api.events().len() >= 2);
    let events = api.events();
    let messages: Vec<&str> = events
        .iter()
        .filter_map(|e| e["message"].as_str())
        .collect();
    assert!(
        messages.iter().any(|m| m.contains("a became leader")),
        "{messages:?}"
    );
    assert!(
        messages.iter().any(|m| m.contains("a stopped leading")),
        "{messages:?}"
    );
    for e in &events {
        assert_eq!(e["involvedObject"]["kind"], "Lease", "{e}");
        assert_eq!(e["involvedObject"]["name"], LEASE, "{e}");
        assert_eq!(e["reason"], "LeaderElection", "{e}");
    }
}

#[test]
fn run_with_rejoin_runs_one_piece_of_work_at_a_time_across_a_deletion() {
    let api = Api::new();
    let elector = short(api.lock(User::Elector, LEASE, "a"))
        .rejoin(true)
        .build()
        .unwrap();
    let stopper = elector.stopper();
    let mut runs: Vec<(u64, Instant, Instant)> = Vec::new();
    let api_ref = &api;
    let ended = elector
        .run(|term| {
            let began = Instant::now();
            if runs.is_empty() {
                // The first term: an operator deletes the Lease under it.
                api_ref.delete(LEASE);
            }
            while term.is_current() {
                if !runs.is_empty() {
                    stopper.stop();
                }
                term.wait_ended(Duration::from_millis(50));
            }
            runs.push((term.token(), began, Instant::now()));
        })
        .unwrap();
    assert_eq!(ended, StopReason::Released);
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(runs[0].0 < runs[1].0, "{runs:?}");
    assert!(runs[0].2 <= runs[1].1, "the works overlapped: {runs:?}");
    assert_eq!(api.holder(LEASE), None, "released after the work");
}

#[test]
fn run_releases_only_after_the_work_has_returned() {
    let api = Api::new();
    let elector = short(api.lock(User::Elector, LEASE, "a")).build().unwrap();
    let stopper = elector.stopper();
    let mut held_while_working = None;
    let ended = elector
        .run(|term| {
            stopper.stop();
            term.wait_ended(WAIT);
            // The term has ended; the Lease is still ours until we return.
            held_while_working = api.holder(LEASE);
        })
        .unwrap();
    assert_eq!(ended, StopReason::Released);
    assert_eq!(held_while_working.as_deref(), Some("a"));
    assert_eq!(api.holder(LEASE), None);
}

#[test]
fn openshift_s_configuration_elects_on_the_server() {
    let api = Api::new();
    let config = LeaderElection::from_yaml(&format!(
        "namespace: {}\nname: {LEASE}\nleaseDuration: 4s\nrenewDeadline: 3s\nretryPeriod: 1s\n",
        api.ns()
    ))
    .unwrap();
    let (handle, events) = config
        .elector(api.client(User::Elector), "openshift-test", "os-a")
        .unwrap()
        .expect("enabled")
        .release_on_cancel(true)
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    let (term, _) = started(&events);
    assert_eq!(api.holder(LEASE).as_deref(), Some("os-a"));
    assert_eq!(spec(&api)["leaseDurationSeconds"], 4);
    drop(term);
    handle.stop().unwrap();
}

#[test]
fn kubeconfig_shapes_reach_the_server() {
    let api = Api::new();
    let text = std::fs::read_to_string(api.kubeconfig(User::Elector)).unwrap();
    let kubeconfig: Value = yaml_to_json(&text);
    let server = kubeconfig["clusters"][0]["cluster"]["server"]
        .as_str()
        .unwrap()
        .to_string();
    let ca = kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"]
        .as_str()
        .unwrap()
        .to_string();
    let token = kubeconfig["users"][0]["user"]["token"]
        .as_str()
        .unwrap()
        .to_string();
    let dir = api.dir();
    std::fs::write(dir.join("token"), &token).unwrap();
    let ca_file = dir.join("ca.crt");
    let ca_pem = decode_base64(&ca);
    std::fs::write(&ca_file, ca_pem).unwrap();
    let exec = dir.join("exec.sh");
    std::fs::write(
        &exec,
        format!(
            "#!/bin/sh\nprintf '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"%s\"}}}}' \"$(cat {})\"\n",
            dir.join("token").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &exec,
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755),
    )
    .unwrap();
    // The shapes the zoo (fixtures/kubeconfigs) holds, with this server's
    // credentials: a token inline, a token file, an exec plugin; the CA
    // inline or as a file; a context other than the current one.
    let shapes = [
        ("inline", format!("certificate-authority-data: {ca}"), format!("token: {token}")),
        (
            "files",
            format!("certificate-authority: {}", ca_file.display()),
            format!("tokenFile: {}", dir.join("token").display()),
        ),
        (
            "exec",
            format!("certificate-authority-data: {ca}"),
            format!(
                "exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: {}\n      interactiveMode: Never",
                exec.display()
            ),
        ),
    ];
    for (shape, cluster, user) in shapes {
        let path = dir.join(format!("{shape}.kubeconfig"));
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: other\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    {cluster}\nusers:\n- name: u\n  user:\n    {user}\ncontexts:\n- name: other\n  context: {{cluster: nowhere, user: nobody}}\n- name: mine\n  context:\n    cluster: c\n    user: u\n    namespace: {}\n",
                api.ns()
            ),
        )
        .unwrap();
        let config = lease_elector::ClientConfig::from_kubeconfig(&path, Some("mine"))
            .unwrap_or_else(|e| panic!("{shape}: {e}"));
        assert_eq!(config.namespace(), Some(api.ns()), "{shape}");
        let client = lease_elector::Client::new(config).unwrap();
        let id = format!("kc-{shape}");
        let lock = lease_elector::LeaseLock::new(client, api.ns(), LEASE, &id);
        let (handle, events) = spawn_short(lock);
        let (term, _) = started(&events);
        assert_eq!(api.holder(LEASE).as_deref(), Some(id.as_str()), "{shape}");
        drop(term);
        handle.stop().unwrap();
    }
}

#[test]
fn names_the_crate_accepts_the_server_accepts() {
    let api = Api::new();
    let long = format!("{}.{}", "a".repeat(100), "b".repeat(100));
    for name in ["x", "a.b-c", long.as_str()] {
        let lock = api.lock(User::Elector, name, "n");
        let (handle, events) = spawn_short(lock);
        let (term, _) = started(&events);
        assert_eq!(api.holder(name).as_deref(), Some("n"), "{name}");
        drop(term);
        handle.stop().unwrap();
    }
}

// --- lease-elect ---------------------------------------------------------

/// `lease-elect` candidate `who` on [`LEASE`] with default flags (the
/// watch, release on stop) at 4/3/1 s, COMMAND the overlap harness's
/// ticker writing to `log`.
fn lease_elect(api: &Api, user: User, who: &str, log: &std::path::Path) -> Spawned {
    let ticker = api.dir().join("ticker.sh");
    if !ticker.exists() {
        std::fs::write(&ticker, TICKER).unwrap();
    }
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lease-elect"));
    cmd.arg("--kubeconfig")
        .arg(api.kubeconfig(user))
        .args(["--namespace", api.ns(), "--name", LEASE, "--identity", who])
        .args(common::procs::SHORT_RENEWS)
        .args(["--", "/bin/bash"])
        .arg(&ticker)
        .arg(log)
        .args([who, "exit"])
        .env_remove("LEASE_ELECT_LOG")
        .stdin(Stdio::null())
        .process_group(0);
    Spawned::start(&mut cmd, true)
}

/// `lease-elect` a leads and its COMMAND runs; then b starts and follows.
fn a_leads_b_follows(api: &Api, user: User, log: &std::path::Path) -> (Spawned, Spawned) {
    let a = lease_elect(api, user, "a", log);
    a.expect("LEADING a");
    wait_runs(log, "a", 1);
    let b = lease_elect(api, user, "b", log);
    b.expect("NEW_LEADER a");
    (a, b)
}

fn timeline(log: &std::path::Path) -> Timeline {
    Timeline::parse(&std::fs::read_to_string(log).unwrap_or_default())
}

fn wait_runs(log: &std::path::Path, who: &str, n: usize) {
    eventually(&format!("{n} runs of {who}'s COMMAND"), || {
        timeline(log)
            .runs
            .iter()
            .filter(|r| r.who == who && r.ticks >= 1)
            .count()
            >= n
    });
}

fn wait_exited(log: &std::path::Path, who: &str) -> Instant {
    eventually(&format!("{who}'s COMMAND to end"), || {
        timeline(log)
            .runs
            .iter()
            .filter(|r| r.who == who)
            .all(|r| !common::procs::alive(r.pid))
    });
    Instant::now()
}

#[test]
fn two_lease_elects_hand_over_command_to_command_within_a_quarter_second() {
    let api = Api::new();
    let log = api.dir().join("ticks");
    let (a, b) = a_leads_b_follows(&api, User::Elector, &log);
    a.signal("-TERM");
    b.expect("LEADING b");
    wait_runs(&log, "b", 1);
    let t = timeline(&log);
    t.assert_no_overlap();
    let (a_run, b_run) = (&t.of("a")[0], &t.of("b")[0]);
    let gap = Duration::from_micros(b_run.first.saturating_sub(a_run.last));
    assert!(
        gap <= Duration::from_millis(250),
        "COMMAND to COMMAND took {gap:?} on {}",
        api.server_name()
    );
    assert!(b_run.token.parse::<u64>().unwrap() > a_run.token.parse::<u64>().unwrap());
    b.signal("-TERM");
}

#[test]
fn kubectl_deleting_the_lease_ends_the_command_at_once_and_the_next_token_is_greater() {
    let api = Api::new();
    let log = api.dir().join("ticks");
    let (a, b) = a_leads_b_follows(&api, User::Elector, &log);
    let called = SystemTime::now();
    api.delete(LEASE);
    let gone = ran_after(&api, &log, "a", called);
    assert!(
        gone <= Duration::from_millis(250),
        "a's COMMAND ran {gone:?} after the deletion was stored"
    );
    eventually("a new term", || timeline(&log).runs.len() >= 2);
    let t = timeline(&log);
    t.assert_no_overlap();
    let tokens: Vec<u64> = t.runs.iter().map(|r| r.token.parse().unwrap()).collect();
    assert!(tokens[1] > tokens[0], "{tokens:?}");
    a.signal("-TERM");
    b.signal("-TERM");
}

#[test]
fn another_writer_taking_the_lease_ends_the_command_at_once() {
    let api = Api::new();
    let log = api.dir().join("ticks");
    let a = lease_elect(&api, User::Elector, "a", &log);
    a.expect("LEADING a");
    wait_runs(&log, "a", 1);
    let called = SystemTime::now();
    api.take(LEASE, "operator", 60);
    let gone = ran_after(&api, &log, "a", called);
    assert!(
        gone <= Duration::from_millis(250),
        "a's COMMAND ran {gone:?} after the takeover was stored"
    );
    assert_eq!(api.holder(LEASE).as_deref(), Some("operator"));
    a.signal("-TERM");
}

#[test]
fn lease_elects_without_watch_hand_over_by_polling_with_one_warning() {
    let api = Api::new();
    let log = api.dir().join("ticks");
    let (a, b) = a_leads_b_follows(&api, User::NoWatch, &log);
    let before = api.requests(LEASE).len();
    let start = Instant::now();
    thread::sleep(Duration::from_secs(3));
    let window = start.elapsed();
    a.signal("-TERM");
    b.expect("LEADING b");
    wait_runs(&log, "b", 1);
    timeline(&log).assert_no_overlap();
    // Both candidates' requests in the window: a renews (PUT) and b polls
    // (GET), each at most once per retry period.
    let sent = &api.requests(LEASE)[before..];
    let gets = sent.iter().filter(|r| r.verb == "get").count();
    assert!(
        gets <= window.as_secs() as usize + 2,
        "{gets} GETs in {window:?}: {sent:?}"
    );
    b.signal("-TERM");
    let warned = |s: &Spawned| {
        s.log()
            .lines()
            .filter(|l| l.contains("WARN") && l.contains("watch"))
            .count()
    };
    assert_eq!(warned(&b), 1, "b's log: {}", b.log());
}

/// How long `who`'s COMMAND ran on after the admin's last write was
/// stored (kube-apiserver's audit log; on the embedded server, whose
/// writes are calls, from `called`): its last line, plus the tick it may
/// have slept after it.
fn ran_after(api: &Api, log: &std::path::Path, who: &str, called: SystemTime) -> Duration {
    wait_exited(log, who);
    let stored = api.admin_write_stored(LEASE);
    assert!(
        stored.is_some() || !api.is_real(),
        "no audit record of the write"
    );
    let stored = stored.unwrap_or(called);
    let last = timeline(log)
        .of(who)
        .iter()
        .map(|r| r.last)
        .max()
        .expect("it ran");
    let last = SystemTime::UNIX_EPOCH + Duration::from_micros(last) + Duration::from_millis(10);
    let gone = last.duration_since(stored).unwrap_or_default();
    eprintln!(
        "{}: {who}'s COMMAND ended {gone:?} after the write",
        api.server_name()
    );
    gone
}

// --- the README ----------------------------------------------------------

#[test]
fn the_readme_program_leads_and_releases_on_sigterm() {
    let api = Api::new();
    // The program's own Lease, default/my-operator: this is the only test
    // that uses the default namespace.
    let mut program = Spawned::start(
        Command::new(example("in_cluster")).env("KUBECONFIG", api.kubeconfig(User::Elector)),
        true,
    );
    eventually("the first step of the work", || {
        program.log().contains("leading with token ")
    });
    program.signal("-TERM");
    assert_eq!(program.exit_code(), Some(0), "{}", program.log());
    let lease = lease_in(&api, "default", "my-operator");
    assert_eq!(lease["spec"]["holderIdentity"], "", "{lease}");
}

fn lease_in(api: &Api, ns: &str, name: &str) -> Value {
    if api.is_real() {
        serde_json::from_str(&api.kubectl(&["get", "lease", name, "-n", ns, "-o", "json"])).unwrap()
    } else {
        use common::RawLeases;
        api.embedded().unwrap().lease_value(ns, name).unwrap()
    }
}

// --- helpers ---------------------------------------------------------------

fn decode_base64(s: &str) -> Vec<u8> {
    let out = Command::new("base64")
        .arg("-d")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(s.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    out.stdout
}

fn yaml_to_json(text: &str) -> Value {
    let docs = yaml_rust2::YamlLoader::load_from_str(text).unwrap();
    fn conv(y: &yaml_rust2::Yaml) -> Value {
        use yaml_rust2::Yaml;
        match y {
            Yaml::String(s) => Value::String(s.clone()),
            Yaml::Integer(i) => Value::from(*i),
            Yaml::Boolean(b) => Value::Bool(*b),
            Yaml::Array(a) => Value::Array(a.iter().map(conv).collect()),
            Yaml::Hash(h) => Value::Object(
                h.iter()
                    .map(|(k, v)| (k.as_str().unwrap_or_default().to_string(), conv(v)))
                    .collect(),
            ),
            _ => Value::Null,
        }
    }
    conv(&docs[0])
}

/// The README's walk-through (examples/fake-cluster.sh), steps 2 to 6 line
/// for line, on kube-apiserver: the candidates, kubectl's waits and reads,
/// and the Events, with the admin's kubeconfig (the walk-through's kubectl
/// lists Leases, which the Role does not grant). On the test server,
/// `.ci/run` runs the whole script.
#[test]
fn the_readme_walkthrough_holds_on_kube_apiserver() {
    let api = Api::new();
    if !api.is_real() {
        return;
    }
    // Its Lease, default/demo, as on a cluster that never had one.
    api.kubectl(&[
        "delete",
        "lease",
        "demo",
        "-n",
        "default",
        "--ignore-not-found",
    ]);
    let script = std::fs::read_to_string("examples/fake-cluster.sh").unwrap();
    let steps: String = script
        .lines()
        .skip_while(|l| !l.starts_with("# 2."))
        .filter(|l| !l.contains("SERVER") && !l.starts_with("unset KUBECONFIG"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(steps.contains("kill -KILL $POD_B"), "{steps}");
    let out = Command::new("bash")
        .args([
            "-e",
            "-c",
            &format!("trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{steps}"),
        ])
        .env("KUBECONFIG", api.admin_kubeconfig())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // leaseTransitions after the two takeovers, then the released holder.
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines.contains(&"2"), "{stdout}");
    assert!(stdout.contains("pod-a became leader"), "{stdout}");
    assert_eq!(lines.last().copied(), Some(""), "{stdout}");
}
