//! What a service owner sees: `ElectorHandle::status()`, the log lines of a
//! failing set-up, the Prometheus text, and Lease labels, over real HTTP.

use lease_elector::LeaderEvents;
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::logs::logs;
use common::*;
use lease_elector::testing::{Fault, TestApiServer};
use lease_elector::{
    render_prometheus, Client, ClientConfig, ElectorConfig, ElectorHandle, FailureKind,
    LeaderElector, LeaderEvent, LeaseLock, ManualClock,
};

fn lines_about(lease: &str, level: log::Level, needle: &str) -> usize {
    logs()
        .lock()
        .unwrap()
        .iter()
        .filter(|(l, m)| *l == level && m.contains(lease) && m.contains(needle))
        .count()
}

fn spawn(
    server: &TestApiServer,
    name: &str,
    id: &str,
    clock: &ManualClock,
    lock: impl FnOnce(LeaseLock) -> LeaseLock,
) -> (ElectorHandle, LeaderEvents) {
    let client = Client::new(ClientConfig::new(server.url())).unwrap();
    LeaderElector::builder(lock(LeaseLock::new(client, NS, name, id)))
        .config(ElectorConfig {
            release_on_cancel: false,
            // Polling: the slow path below is a renew that conflicts with
            // a write the leader has not seen (the watch would show it).
            watch: false,
            ..ElectorConfig::default()
        })
        .clock(Arc::new(clock.clone()))
        .build()
        .unwrap()
        .spawn()
        .unwrap()
}

#[test]
fn a_forbidden_setup_is_visible_in_status_and_logged_once_with_what_to_check() {
    logs();
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    server.inject(Fault::status(403).forever());
    let clock = ManualClock::auto_advancing();
    let (handle, _events) = spawn(&server, "rbac", "a", &clock, |l| l);
    eventually("three failed attempts", || {
        handle.probe().status().consecutive_failures >= 3
    });
    let s = handle.probe().status();
    assert!(!s.leading);
    let e = s.last_error.expect("the error is kept");
    assert_eq!(e.kind, FailureKind::Forbidden);
    assert!(e.message.contains("403"), "{}", e.message);
    assert_eq!((s.namespace.as_str(), s.name.as_str()), (NS, "rbac"));
    assert_eq!(s.renews, 0);
    assert!(s.attempts >= 3 && s.requests >= 3);
    // One warning (the repeats inside a minute are rate-limited), naming
    // the lease and the RBAC verbs to grant.
    assert_eq!(
        lines_about(&format!("{NS}/rbac"), log::Level::Warn, "RBAC"),
        1
    );
    // Recovery from a warned failure is logged once, at warn too (the
    // default level tells the whole story), and clears the failure.
    server.clear_faults();
    eventually("leading", || handle.probe().status().leading);
    let s = handle.probe().status();
    assert_eq!(s.consecutive_failures, 0);
    assert!(s.renews >= 1 && s.last_renew_wall.is_some());
    assert_eq!(
        lines_about(&format!("{NS}/rbac"), log::Level::Warn, "succeed again"),
        1
    );
    assert_eq!(
        lines_about(&format!("{NS}/rbac"), log::Level::Info, "succeed again"),
        0
    );
}

#[test]
fn labels_are_kept_on_every_write_and_the_slow_path_is_counted() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let clock = ManualClock::new();
    let (handle, events) = spawn(&server, "labelled", "a", &clock, |l| {
        l.with_labels([("app.kubernetes.io/name", "op")])
    });
    while !matches!(
        events.recv_timeout(WAIT).unwrap(),
        LeaderEvent::StartedLeading { .. }
    ) {}
    let label =
        |s: &TestApiServer| s.lease_value(NS, "labelled").unwrap()["metadata"]["labels"].clone();
    assert_eq!(label(&server)["app.kubernetes.io/name"], "op");
    // Another writer strips the labels (and so changes the version): the
    // leader's optimistic renew conflicts, the slow path writes again,
    // labels restored.
    let mut lease = server.lease_value(NS, "labelled").unwrap();
    lease["metadata"]["labels"] = serde_json::json!({"other": "kept"});
    server.put_value(NS, lease);
    assert!(clock.wait_for_sleepers(1, WAIT));
    clock.advance(Duration::from_secs(2));
    eventually("the slow-path renew", || {
        handle.probe().status().slow_path_renews == 1
    });
    let labels = label(&server);
    assert_eq!(labels["app.kubernetes.io/name"], "op");
    assert_eq!(labels["other"], "kept");
}

/// Parse the exposition: every sample's family has HELP and TYPE, every
/// value is a number; returns (name, labels, value).
fn parse(text: &str) -> Vec<(String, String, f64)> {
    let mut typed = std::collections::HashSet::new();
    let mut helped = std::collections::HashSet::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            helped.insert(rest.split_whitespace().next().unwrap().to_string());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut p = rest.split_whitespace();
            let name = p.next().unwrap().to_string();
            assert!(matches!(p.next(), Some("gauge" | "counter")), "{line}");
            typed.insert(name);
        } else {
            let (series, value) = line.rsplit_once(' ').expect(line);
            let (name, labels) = series.split_once('{').expect(line);
            assert!(labels.ends_with('}'), "{line}");
            assert!(typed.contains(name) && helped.contains(name), "{line}");
            samples.push((
                name.to_string(),
                labels.to_string(),
                value.parse().expect(line),
            ));
        }
    }
    samples
}

#[test]
fn prometheus_text_carries_client_go_names_and_ours() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let clock = ManualClock::new();
    let (a, a_events) = spawn(&server, "metrics", "a", &clock, |l| l);
    while !matches!(
        a_events.recv_timeout(WAIT).unwrap(),
        LeaderEvent::StartedLeading { .. }
    ) {}
    let (b, _b_events) = spawn(&server, "metrics", "b", &clock, |l| l);
    eventually("b to see a", || {
        b.probe().status().holder.as_deref() == Some("a")
    });
    let text = render_prometheus(&[a.probe().status(), b.probe().status()]);
    let samples = parse(&text);
    let get = |name: &str, labels: &str| {
        samples
            .iter()
            .find(|(n, l, _)| n == name && l.contains(labels))
            .map(|s| s.2)
    };
    // client-go's names, labelled by the lease name only.
    let status: Vec<_> = samples
        .iter()
        .filter(|s| s.0 == "leader_election_master_status")
        .map(|s| (s.1.clone(), s.2))
        .collect();
    assert_eq!(
        status,
        vec![
            ("name=\"metrics\"}".to_string(), 1.0),
            ("name=\"metrics\"}".to_string(), 0.0)
        ]
    );
    assert_eq!(get("leader_election_slowpath_total", "metrics"), Some(0.0));
    assert_eq!(
        get("lease_elector_renews_total", "name=\"metrics\""),
        Some(1.0)
    );
    assert!(get("lease_elector_leader_transitions_total", "metrics").unwrap() >= 1.0);
    // Times are Unix timestamps: the last renew's is the status's wall time.
    let wall = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    let renewed = get("lease_elector_last_renew_timestamp_seconds", "metrics").unwrap();
    assert_eq!(renewed, wall(a.probe().status().last_renew_wall.unwrap()));
    let succeeded = get("lease_elector_last_success_timestamp_seconds", "metrics").unwrap();
    assert!(succeeded >= renewed, "{succeeded} < {renewed}");
    assert_eq!(
        get("lease_elector_duplicate_identity", "metrics"),
        Some(0.0)
    );
}

/// Every series follows Prometheus's naming rules: client-go's two names,
/// else the `lease_elector_` prefix; snake case; counters and only counters
/// end in `_total`; a unit is a base unit and the suffix (`_seconds`,
/// before `_total`); a time is a timestamp, not a time since (Prometheus's
/// "timestamps, not time since": an age keeps changing when nothing does).
#[test]
fn metric_names_follow_prometheus_naming_rules() {
    let text = render_prometheus(&[]);
    let types: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .collect();
    assert!(types.len() >= 10, "{text}");
    for (name, kind) in types {
        assert!(
            name.starts_with("lease_elector_")
                || [
                    "leader_election_master_status",
                    "leader_election_slowpath_total"
                ]
                .contains(&name),
            "{name}: not ours and not client-go's"
        );
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "{name}: snake case"
        );
        assert_eq!(
            kind == "counter",
            name.ends_with("_total"),
            "{name} is a {kind}"
        );
        let base = name.strip_suffix("_total").unwrap_or(name);
        for unit in ["seconds", "bytes"] {
            if name.contains(unit) {
                assert!(
                    base.ends_with(&format!("_{unit}")),
                    "{name}: unit not a suffix"
                );
            }
        }
        for word in ["milliseconds", "millis", "_ms", "since", "age"] {
            assert!(!name.contains(word), "{name}: {word}");
        }
    }
}

/// A cluster whose first candidate leads, and a second that watches it
/// (its index).
fn leader_and_watching_follower() -> (Cluster, usize) {
    let mut c = Cluster::new();
    c.add("leader", timings());
    c.step_until(Duration::from_millis(500), Duration::from_secs(5), |c| {
        c.candidates[0].started() == 1
    });
    let follower = c.add(
        "follower",
        ElectorConfig {
            watch: true,
            ..timings()
        },
    );
    (c, follower)
}

#[test]
fn a_healthy_follower_counts_no_failures_and_an_outage_does() {
    let (mut c, follower) = leader_and_watching_follower();
    // Ten seconds of a leader renewing and a follower watching it.
    for _ in 0..20 {
        c.step(Duration::from_millis(500));
    }
    let f = c.candidates[follower].handle().probe().status();
    // At least one attempt per 2.2 retry periods (jittered), each finding
    // the lease held.
    assert!(f.attempts >= 3 && f.held_by_other == f.attempts, "{f:?}");
    assert_eq!((f.failed_requests, f.consecutive_failures), (0, 0), "{f:?}");
    let text = render_prometheus(std::slice::from_ref(&f));
    let samples = parse(&text);
    let value = |name: &str| {
        samples
            .iter()
            .find(|s| s.0 == name)
            .map(|s| s.2)
            .unwrap_or_else(|| panic!("{name} in {text}"))
    };
    assert_eq!(value("lease_elector_failed_requests_total"), 0.0);
    assert_eq!(
        value("lease_elector_held_by_other_total"),
        f.held_by_other as f64
    );
    assert_eq!(value("lease_elector_attempts_total"), f.attempts as f64);
    // No metric is derived as attempts minus renews any more.
    assert!(!text.contains("renew_failures"), "{text}");
    // An outage: now the failures move, for leader and follower.
    c.server.set_outage(true);
    c.step_until(Duration::from_millis(500), Duration::from_secs(10), |c| {
        c.candidates.iter().all(|cand| {
            let s = cand.handle().probe().status();
            s.failed_requests >= 1 && s.consecutive_failures >= 1
        })
    });
}

/// Every new Lease starts with a `GET` answered 404 and a create; a
/// candidate that loses the create race gets 409 `AlreadyExists`. Neither
/// is a failed request (an alert on the failure counter fired for minutes
/// on every new Lease), nor a WARN: the loser simply follows.
#[test]
fn creating_the_lease_or_losing_the_create_race_is_not_a_failure() {
    let mut c = Cluster::new();
    c.add("creator", timings());
    c.step_until(Duration::from_millis(500), Duration::from_secs(5), |c| {
        c.candidates[0].started() == 1
    });
    let s = c.candidates[0].handle().probe().status();
    assert_eq!((s.failed_requests, s.consecutive_failures), (0, 0), "{s:?}");

    // The leader renews with PUTs only: the next GET, answered 404 as if
    // the Lease were not there yet, is the newcomer's, whose create then
    // loses to the Lease that exists.
    c.server.inject(Fault::status(404).method("GET").times(1));
    let late = c.add("late", timings());
    for _ in 0..10 {
        c.step(Duration::from_millis(500));
    }
    let l = c.candidates[late].handle().probe().status();
    assert!(l.attempts >= 2 && l.held_by_other >= 1, "{l:?}");
    assert_eq!((l.failed_requests, l.consecutive_failures), (0, 0), "{l:?}");
    assert!(l.last_error.is_none(), "{l:?}");
    let lease = c.candidates[late].handle().probe().status().name;
    assert_eq!(lines_about(&lease, log::Level::Warn, "AlreadyExists"), 0);
    assert_eq!(c.candidates[0].handle().probe().status().failed_requests, 0);
}

/// A server that answers every read 404 and every create 409
/// AlreadyExists (a stale cache or proxy in front of it, or a hostile one)
/// gets at most one attempt per retry period, like any failing server: the
/// record seen before the 404, long expired, no longer times the next
/// attempt (it was one attempt per millisecond).
#[test]
fn a_server_answering_not_found_then_already_exists_is_paced_by_the_retry_period() {
    let mut c = Cluster::new();
    let now = lease_elector::MicroTime::from_system_time(std::time::SystemTime::now()).to_string();
    c.server.put_value(
        NS,
        serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": LEASE},
            "spec": {"holderIdentity": "other", "leaseDurationSeconds": 1,
                     "acquireTime": now, "renewTime": now}
        }),
    );
    c.add("me", timings());
    // The first attempt sees "other" holding it for 1 s; from then on the
    // Lease reads as absent, and creating it as already done.
    c.step(Duration::from_millis(0));
    let already = serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "reason": "AlreadyExists", "code": 409,
        "message": format!("leases.coordination.k8s.io \"{LEASE}\" already exists")});
    c.server.inject(Fault::status(404).method("GET").forever());
    c.server.inject(
        Fault::raw(409, already.to_string())
            .method("POST")
            .forever(),
    );
    let before = c.server.requests().len();
    // 4 s of clock time, the retry period 2 s: at most 3 attempts of 2
    // requests each.
    for _ in 0..400 {
        c.step(Duration::from_millis(10));
    }
    let sent = c.server.requests().len() - before;
    assert!(sent <= 6, "{sent} requests in 4 s");
}

/// `lease_elector_requests_total` counts requests sent to the API server:
/// a watching follower whose reads the watch events answer sends none, and
/// its counter must say so (it used to count every call to the lock).
#[test]
fn a_watching_follower_counts_only_the_requests_it_sent() {
    let (mut c, follower) = leader_and_watching_follower();
    c.step(Duration::from_secs(2));
    // Reads the follower sent (the leader renews with a PUT alone; the
    // watch's own GET is not a read of the Lease).
    let reads = |c: &Cluster| {
        c.server
            .requests()
            .iter()
            .filter(|r| r.method == "GET" && !r.path.contains("watch=true"))
            .count() as u64
    };
    let (before, sent_before) = (c.candidates[follower].handle().probe().status(), reads(&c));
    for _ in 0..20 {
        c.step(Duration::from_millis(500));
    }
    let after = c.candidates[follower].handle().probe().status();
    assert!(after.attempts - before.attempts >= 3, "{after:?}");
    assert_eq!(
        after.requests - before.requests,
        reads(&c) - sent_before,
        "requests counted vs reads the server saw from the follower"
    );
}

#[test]
fn readiness_fails_for_a_forbidden_or_cut_off_candidate_where_health_does_not() {
    let mut c = Cluster::new();
    c.add("leader", timings());
    c.step_until(Duration::from_millis(500), Duration::from_secs(5), |c| {
        c.candidates[0].started() == 1
    });
    let follower = c.add("follower", timings());
    c.step(Duration::from_secs(2));
    let tolerance = Duration::from_secs(20);
    let probe = c.candidates[follower].handle().probe();
    probe
        .check_ready(tolerance)
        .expect("a healthy follower is ready");
    // Forbidden (RBAC broken): not ready at once, though healthy by
    // client-go's rule.
    c.server.inject(Fault::status(403).forever());
    c.step_until(Duration::from_millis(500), Duration::from_secs(10), |c| {
        c.candidates[follower]
            .handle()
            .probe()
            .status()
            .consecutive_failures
            >= 1
    });
    let err = probe.check_ready(tolerance).unwrap_err().to_string();
    assert!(err.contains("forbidden") && err.contains("RBAC"), "{err}");
    assert!(probe.check(tolerance).is_ok());
    // Cut off: ready until no request has succeeded for the tolerance.
    c.server.clear_faults();
    c.step_until(Duration::from_millis(500), Duration::from_secs(10), |c| {
        c.candidates[follower]
            .handle()
            .probe()
            .status()
            .consecutive_failures
            == 0
    });
    probe.check_ready(tolerance).expect("ready again");
    c.server.set_outage(true);
    c.step(Duration::from_secs(10));
    probe.check_ready(tolerance).expect("within the tolerance");
    c.step_until(Duration::from_secs(1), Duration::from_secs(20), |c| {
        c.candidates[follower]
            .handle()
            .probe()
            .check_ready(tolerance)
            .is_err()
    });
    let err = probe.check_ready(tolerance).unwrap_err().to_string();
    assert!(
        err.contains("no successful request") && err.contains("test/the-lease"),
        "{err}"
    );
    assert!(
        probe.check(tolerance).is_ok(),
        "liveness keeps client-go's meaning"
    );
    c.server.set_outage(false);
    c.step_until(Duration::from_secs(1), Duration::from_secs(10), |c| {
        c.candidates[follower]
            .handle()
            .probe()
            .check_ready(tolerance)
            .is_ok()
    });
}
