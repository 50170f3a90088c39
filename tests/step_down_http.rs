//! The step-down promise over real HTTP (and TLS) on the real clock, with
//! the leader's requests faulted while a follower talks to a healthy
//! server: the leader must report `StoppedLeading` before the follower can
//! start leading, no later than `renew_deadline` after the start of its
//! last successful renew; one held request must not cost the term; and
//! `stop()` must not wait for a hung request.

mod common;

use lease_elector::LeaderEvents;
use std::time::{Duration, Instant};

use common::tempdir::TempDir;
use common::*;
use lease_elector::testing::{Fault, TestApiServer};
use lease_elector::{
    Client, ClientConfig, ElectorConfig, ElectorHandle, LeaderElector, LeaderEvent, LeaseLock,
    StopReason,
};

/// Short timings so a lost term plays out in seconds: 4 s / 3 s / 1 s,
/// request cap 1.5 s.
fn short() -> ElectorConfig {
    ElectorConfig {
        lease_duration: Duration::from_secs(4),
        renew_deadline: Duration::from_secs(3),
        retry_period: Duration::from_secs(1),
        release_on_cancel: false,
        ..ElectorConfig::default()
    }
}

fn spawn(config: ClientConfig, id: &str, timings: ElectorConfig) -> (ElectorHandle, LeaderEvents) {
    let lock = LeaseLock::new(Client::new(config).unwrap(), NS, LEASE, id);
    LeaderElector::builder(lock)
        .config(timings)
        .build()
        .unwrap()
        .spawn()
        .unwrap()
}

/// Scheduling slack allowed past the bound.
const SLACK: Duration = Duration::from_millis(50);

/// The leader "a" (token from a file, so a 401 makes the client re-read it
/// and retry) and a follower "b" (static token) on one server; then `fault`
/// is applied to a's requests only. Returns how late a's `StoppedLeading`
/// came past `last renew + renew_deadline`, and asserts b started leading
/// only after it.
fn leader_faulted_while_follower_is_healthy(faults: &[Fault]) -> Duration {
    let server = TestApiServer::builder()
        .tokens(&["a", "b"])
        .build()
        .unwrap();
    server.add_namespace(NS);
    let dir = TempDir::new();
    dir.write("token", "a");
    let (a, a_rx) = spawn(
        ClientConfig::new(server.url()).token_file(dir.0.join("token")),
        "a",
        short(),
    );
    wait_started(&a_rx);
    let (b, b_rx) = spawn(ClientConfig::new(server.url()).token("b"), "b", short());
    eventually("b to see a lead", || {
        b.probe().leader().as_deref() == Some("a")
    });
    for f in faults {
        server.inject(f.clone().bearer("a"));
    }
    let (a_stopped, reason) = wait_stopped(&a_rx);
    assert_eq!(reason, StopReason::Lost);
    let b_started = wait_started(&b_rx);
    assert!(
        a_stopped < b_started,
        "two leaders for {:?}",
        a_stopped - b_started
    );
    let bound = a.probe().last_renew().unwrap() + short().renew_deadline;
    let late = a_stopped.saturating_duration_since(bound);
    eprintln!("StoppedLeading {late:?} after last renew + renewDeadline");
    late
}

#[test]
fn slow_401s_with_a_token_retry_end_the_term_in_time() {
    // Each request, and the retry after the 401 with a re-read token, is
    // answered 401 after 1.2 s: before one budget per request, the retry
    // got the whole budget again and the leader stepped down seconds after
    // the follower took over.
    let late = leader_faulted_while_follower_is_healthy(&[
        Fault::latency(Duration::from_millis(1200)).forever(),
        Fault::status(401).forever(),
    ]);
    assert!(late <= SLACK, "StoppedLeading {late:?} after the bound");
}

#[test]
fn a_failed_put_then_a_hung_get_ends_the_term_in_time() {
    let late = leader_faulted_while_follower_is_healthy(&[
        Fault::latency(Duration::from_millis(1400))
            .method("PUT")
            .forever(),
        Fault::status(500).method("PUT").forever(),
        Fault::hang().method("GET").forever(),
    ]);
    assert!(late <= SLACK, "StoppedLeading {late:?} after the bound");
}

#[test]
fn slow_conflicts_end_the_term_in_time() {
    let late = leader_faulted_while_follower_is_healthy(&[
        Fault::latency(Duration::from_millis(1400)).forever(),
        Fault::status(409).method("PUT").forever(),
    ]);
    assert!(late <= SLACK, "StoppedLeading {late:?} after the bound");
}

fn tls_client(server: &TestApiServer) -> ClientConfig {
    ClientConfig::new(server.url())
        .ca_pem(server.ca_pem())
        .timeout(Duration::from_secs(10))
}

/// One renew request held far past the per-request cap (the rest answered
/// at once) is abandoned at the cap, and the retry inside the renew
/// deadline keeps the term. Before the cap, the held request took the
/// whole renew deadline and the leader stepped down.
#[test]
fn one_held_request_over_tls_does_not_cost_the_term() {
    let server = TestApiServer::builder().tls(true).build().unwrap();
    server.add_namespace(NS);
    let timings = ElectorConfig {
        lease_duration: Duration::from_secs(6),
        renew_deadline: Duration::from_secs(4),
        retry_period: Duration::from_secs(1),
        ..short()
    };
    let cap = timings.request_cap();
    assert_eq!(cap, Duration::from_secs(2));
    let (a, a_rx) = spawn(tls_client(&server), "a", timings.clone());
    wait_started(&a_rx);
    let renew_time = || server.lease_value(NS, LEASE).unwrap()["spec"]["renewTime"].clone();
    let before = server.stats();
    server.inject(Fault::hang().method("PUT"));
    eventually("the held PUT", || {
        server.stats().faults_fired > before.faults_fired
    });
    let held_at = Instant::now();
    let held_renew = renew_time();
    eventually("a renew after the held one", || renew_time() != held_renew);
    let renewed_after = held_at.elapsed();
    assert!(
        renewed_after <= cap + timings.retry_period + SLACK * 2,
        "the retry landed {renewed_after:?} after the held request"
    );
    // The abandoned connection is not reused: the retry opened a new one.
    assert!(server.stats().connections > before.connections);
    assert!(a.probe().is_leader());
    assert!(
        a_rx.try_iter()
            .all(|e| !matches!(e, LeaderEvent::StoppedLeading { .. })),
        "one held request cost the term"
    );
    server.clear_faults();
}

#[test]
fn a_server_that_hangs_every_request_ends_the_term_within_the_renew_deadline() {
    let server = TestApiServer::builder().tls(true).build().unwrap();
    server.add_namespace(NS);
    let (a, a_rx) = spawn(tls_client(&server), "a", short());
    wait_started(&a_rx);
    server.inject(Fault::hang().forever());
    let (at, reason) = wait_stopped(&a_rx);
    assert_eq!(reason, StopReason::Lost);
    let bound = a.probe().last_renew().unwrap() + short().renew_deadline;
    let late = at.saturating_duration_since(bound);
    assert!(late <= SLACK, "StoppedLeading {late:?} after the bound");
    server.clear_faults();
}

/// `stop()` abandons the request in flight instead of waiting out its
/// budget, and the release gets its own short budget: with a server that
/// hangs, it returns within `release_timeout` plus slack.
#[test]
fn stop_does_not_wait_for_a_hung_request() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let timings = ElectorConfig {
        release_on_cancel: true,
        release_timeout: Duration::from_millis(500),
        ..ElectorConfig::default()
    };
    let (a, a_rx) = spawn(
        ClientConfig::new(server.url()).timeout(Duration::from_secs(30)),
        "a",
        timings,
    );
    wait_started(&a_rx);
    let before = server.stats();
    server.inject(Fault::hang().forever());
    eventually("a renew to hang", || {
        server.stats().updates > before.updates
    });
    let t = Instant::now();
    let result = a.stop();
    let took = t.elapsed();
    assert!(
        result.is_err(),
        "the release cannot succeed against a hung server"
    );
    assert!(
        took < Duration::from_millis(500) + SLACK * 3,
        "stop() took {took:?}"
    );
    let (_, reason) = wait_stopped(&a_rx);
    assert_eq!(reason, StopReason::Stopped);
    server.clear_faults();
}

/// A release cut short... and a stop while the server is healthy still
/// releases at once so the next candidate takes over.
#[test]
fn stop_while_healthy_still_releases() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let timings = ElectorConfig {
        release_on_cancel: true,
        ..short()
    };
    let (a, a_rx) = spawn(ClientConfig::new(server.url()), "a", timings);
    wait_started(&a_rx);
    a.stop().unwrap();
    let holder = server.lease_value(NS, LEASE).unwrap()["spec"]["holderIdentity"].clone();
    assert!(holder.is_null() || holder == "", "not released: {holder}");
}
