//! A program that blocks in `run()` serves `/healthz`, `/readyz`,
//! `/leader` and `/metrics` over real HTTP: the documented program with a
//! health endpoint (`docs/in-cluster-health.rs`, through
//! `LeaderElector::probe`), run as a user runs it against the embedded API
//! server, answers what a kubelet's probes and a scraper ask while it leads,
//! records its Events, and on SIGTERM exits 0 having released the Lease.

mod common;

use common::eventually;
use common::health_program::{api_server, HealthProgram, LEASE};

#[test]
fn a_run_program_serves_healthz_readyz_leader_and_metrics_while_it_leads() {
    let server = api_server();
    let mut program = HealthProgram::start(&server);
    program.wait_leading();
    let log = program.log();

    let (status, body) = program.get("/healthz");
    assert_eq!((status, body.as_str()), (200, "ok\n"), "{log}");
    let (status, body) = program.get("/readyz");
    assert_eq!((status, body.as_str()), (200, "ok\n"), "{log}");
    let (status, body) = program.get("/leader");
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(r#""leading":true"#) && body.contains(r#""lease":"default/my-operator""#),
        "{body}"
    );

    let (status, metrics) = program.get("/metrics");
    assert_eq!(status, 200, "{metrics}");
    assert!(
        metrics.contains("leader_election_master_status{name=\"my-operator\"} 1\n"),
        "{metrics}"
    );
    // The term's token: the resourceVersion of the write that began it.
    let token: u64 = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("lease_elector_term_token{namespace=\"default\",name=\"my-operator\"} ")
        })
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no term token: {metrics}"));
    assert!(token > 0, "{metrics}");
    let renews = |metrics: &str| -> u64 {
        let line = metrics
            .lines()
            .find(|l| l.starts_with("lease_elector_renews_total{"))
            .unwrap_or_else(|| panic!("no renews: {metrics}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    // The counters move while it leads: a scrape later shows its renews.
    let first = renews(&metrics);
    eventually("a renew counted in /metrics", || {
        renews(&program.get("/metrics").1) > first
    });

    // Its transition recorded as an Event on the Lease.
    eventually("the 'became leader' Event", || {
        server
            .events()
            .iter()
            .any(|e| e.reason == "LeaderElection" && e.message.ends_with("became leader"))
    });

    assert_eq!(program.terminate(), Some(0), "{}", program.log());
    assert!(server.record("default", LEASE).is_some());
    assert_eq!(
        server.holder("default", LEASE),
        None,
        "released on the way out: {}",
        program.log()
    );
}

#[test]
fn a_follower_is_ready_and_healthy_but_not_the_leader() {
    let server = api_server();
    let leader = HealthProgram::start(&server);
    leader.wait_leading();
    let follower = HealthProgram::start(&server);
    // A follower has read the Lease (a successful request) once /readyz
    // passes, and the leader is named in its /leader answer.
    eventually("the follower sees the leader", || {
        follower.get("/leader").1.contains(r#""holder":""#)
    });
    assert_eq!(follower.get("/healthz").0, 200, "{}", follower.log());
    assert_eq!(follower.get("/readyz").0, 200, "{}", follower.log());
    let (status, body) = follower.get("/leader");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains(r#""leading":false"#), "{body}");
    let (_, metrics) = follower.get("/metrics");
    assert!(
        metrics.contains("leader_election_master_status{name=\"my-operator\"} 0\n"),
        "{metrics}"
    );
}
