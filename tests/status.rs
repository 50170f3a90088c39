//! What a service owner sees: `ElectorHandle::status()`, the log lines of a
//! failing set-up, the Prometheus text, and Lease labels, over real HTTP.

mod common;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::*;
use lease_elector::testing::{Fault, TestApiServer};
use lease_elector::{
    render_prometheus, Client, ClientConfig, ElectorConfig, ElectorHandle, FailureKind,
    LeaderElector, LeaderEvent, LeaseLock, ManualClock,
};

/// Every log record of this test binary: (level, message).
fn logs() -> &'static Mutex<Vec<(log::Level, String)>> {
    static LOGS: OnceLock<Mutex<Vec<(log::Level, String)>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        struct Capture;
        impl log::Log for Capture {
            fn enabled(&self, _: &log::Metadata) -> bool {
                true
            }
            fn log(&self, r: &log::Record) {
                logs()
                    .lock()
                    .unwrap()
                    .push((r.level(), r.args().to_string()));
            }
            fn flush(&self) {}
        }
        static CAPTURE: Capture = Capture;
        let _ = log::set_logger(&CAPTURE);
        log::set_max_level(log::LevelFilter::Debug);
        Mutex::new(Vec::new())
    })
}

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
) -> (ElectorHandle, std::sync::mpsc::Receiver<LeaderEvent>) {
    let client = Client::new(ClientConfig::new(server.url())).unwrap();
    LeaderElector::builder(lock(LeaseLock::new(client, NS, name, id)))
        .config(ElectorConfig {
            release_on_cancel: false,
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
    server.inject(Fault::status(403).times(usize::MAX));
    let clock = ManualClock::auto_advancing();
    let (handle, _events) = spawn(&server, "rbac", "a", &clock, |l| l);
    eventually("three failed attempts", || {
        handle.status().consecutive_failures >= 3
    });
    let s = handle.status();
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
    eventually("leading", || handle.status().leading);
    let s = handle.status();
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
    let clock = ManualClock::new();
    let (handle, events) = spawn(&server, "labelled", "a", &clock, |l| {
        l.with_labels([("app.kubernetes.io/name", "op")])
    });
    while !matches!(
        events.recv_timeout(WAIT).unwrap(),
        LeaderEvent::StartedLeading { .. }
    ) {}
    let label = |s: &TestApiServer| s.lease(NS, "labelled").unwrap()["metadata"]["labels"].clone();
    assert_eq!(label(&server)["app.kubernetes.io/name"], "op");
    // Another writer strips the labels (and so changes the version): the
    // leader's optimistic renew conflicts, the slow path writes again,
    // labels restored.
    let mut lease = server.lease(NS, "labelled").unwrap();
    lease["metadata"]["labels"] = serde_json::json!({"other": "kept"});
    server.put_lease(NS, lease);
    assert!(clock.wait_for_sleepers(1, WAIT));
    clock.advance(Duration::from_secs(2));
    eventually("the slow-path renew", || {
        handle.status().slow_path_renews == 1
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
    let clock = ManualClock::new();
    let (a, a_events) = spawn(&server, "metrics", "a", &clock, |l| l);
    while !matches!(
        a_events.recv_timeout(WAIT).unwrap(),
        LeaderEvent::StartedLeading { .. }
    ) {}
    let (b, _b_events) = spawn(&server, "metrics", "b", &clock, |l| l);
    eventually("b to see a", || b.status().holder.as_deref() == Some("a"));
    let text = render_prometheus(&[a.status(), b.status()]);
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
    assert!(get("lease_elector_seconds_since_last_renew", "metrics").is_some());
    assert_eq!(
        get("lease_elector_duplicate_identity", "metrics"),
        Some(0.0)
    );
}
