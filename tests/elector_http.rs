//! Electors over real HTTP against the embedded API server, time stepped by
//! a shared manual clock.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use lease_elector::testing::{Fault, TestApiServer};
use lease_elector::{
    Client, ClientConfig, Clock, Deadline, Error, LeaderEvent, LeaseLock, ManualClock, StatusKind,
};

const STEP: Duration = Duration::from_millis(500);
const SECOND: Duration = Duration::from_secs(1);

fn leader_index(c: &Cluster) -> usize {
    let leaders = c.leaders();
    assert_eq!(leaders.len(), 1, "exactly one leader, got {leaders:?}");
    c.index(leaders[0])
}

#[test]
fn single_candidate_creates_the_lease_and_renews_with_one_put() {
    let mut c = Cluster::new();
    c.add("solo", timings());
    c.step_until(STEP, SECOND * 5, |c| c.candidates[0].started() == 1);
    let spec = c.lease_spec();
    assert_eq!(spec["holderIdentity"], "solo");
    assert_eq!(spec["leaseDurationSeconds"], 15);
    assert_eq!(spec["leaseTransitions"], 0);
    let acquired = spec["acquireTime"].as_str().unwrap().to_string();
    // Six fractional digits and Z, exactly as the API server writes them.
    assert_eq!(
        acquired.len(),
        "2026-12-02T10:00:00.000000Z".len(),
        "{acquired}"
    );
    assert!(acquired.ends_with('Z'));
    let first = c.candidates[0].log.clone();
    assert!(matches!(&first[0], Seen::NewLeader { identity, .. } if identity == "solo"));
    assert!(matches!(first[1], Seen::Started { .. }));

    c.server.reset_stats();
    for _ in 0..10 {
        c.step(Duration::from_secs(2));
    }
    let stats = c.server.stats();
    assert_eq!(stats.updates, 10, "one PUT per renew: {stats:?}");
    assert_eq!(stats.gets, 0, "the fast path needs no GET: {stats:?}");
    let spec = c.lease_spec();
    assert_eq!(
        spec["acquireTime"],
        acquired.as_str(),
        "renewals keep acquireTime"
    );
    assert!(spec["renewTime"].as_str().unwrap() > acquired.as_str());
    assert_eq!(
        c.candidates[0].handle().probe().leader().as_deref(),
        Some("solo")
    );
}

#[test]
fn three_candidates_elect_exactly_one_leader() {
    let mut c = Cluster::new();
    for id in ["a", "b", "c", "d"] {
        c.add(id, timings());
    }
    c.step_until(STEP, SECOND * 10, |c| c.leaders().len() == 1);
    let leader = c.leaders()[0].to_string();
    for _ in 0..40 {
        c.step(STEP);
        assert_eq!(
            c.leaders(),
            vec![leader.as_str()],
            "leadership must be stable"
        );
    }
    assert_eq!(c.holder(), leader);
    for cand in &c.candidates {
        let expect = if cand.id == leader { 1 } else { 0 };
        assert_eq!(cand.started(), expect, "{}", cand.id);
        assert_eq!(cand.stopped(), 0);
        assert_eq!(
            cand.handle().probe().leader().as_deref(),
            Some(leader.as_str())
        );
    }
}

#[test]
fn graceful_release_hands_over_within_one_jittered_retry() {
    let mut c = Cluster::new();
    c.add("a", timings());
    c.step_until(STEP, SECOND * 5, |c| c.leaders() == ["a"]);
    c.add("b", timings());
    c.add("c", timings());
    c.step(STEP);
    c.stop(0);
    assert_eq!(c.candidates[0].stopped(), 1);
    let spec = c.lease_spec();
    assert_eq!(spec["holderIdentity"], "", "released: {spec}");
    assert_eq!(spec["leaseDurationSeconds"], 1);
    assert_eq!(spec["leaseTransitions"], 0, "release keeps transitions");
    let waited = c.step_until(STEP, SECOND * 15, |c| c.leaders().len() == 1);
    // retryPeriod × (1 + 1.2) at most, far less than the 15s lease.
    assert!(
        waited <= Duration::from_millis(4500),
        "handover took {waited:?}"
    );
    let new = leader_index(&c);
    assert_ne!(new, 0);
    assert_eq!(c.lease_spec()["leaseTransitions"], 1);
}

#[test]
fn crashed_leader_is_replaced_only_after_the_lease_expires() {
    let mut c = Cluster::new();
    let mut crashy = timings();
    crashy.release_on_cancel = false; // a crash releases nothing
    c.add("a", crashy);
    c.step_until(STEP, SECOND * 5, |c| c.leaders() == ["a"]);
    c.add("b", timings());
    c.step(STEP);
    c.stop(0);
    assert_eq!(c.holder(), "a", "nothing released");
    let waited = c.step_until(STEP, SECOND * 30, |c| c.leaders() == ["b"]);
    // b last saw the record change at most one jittered retry (4.4s) before
    // the crash, and must then wait out the full 15s from that observation.
    assert!(
        waited > Duration::from_secs(10),
        "took over after {waited:?}: before expiry"
    );
    assert!(
        waited <= Duration::from_secs(15) + Duration::from_millis(4500),
        "{waited:?}"
    );
    assert_eq!(c.lease_spec()["leaseTransitions"], 1);
    assert_eq!(c.holder(), "b");
}

#[test]
fn outage_shorter_than_downtime_tolerance_keeps_the_leader() {
    // 15/10/2: retries = 5, downtime tolerance = (5 - 1) × 2s = 8s.
    let mut c = Cluster::new();
    c.add("a", timings());
    c.step_until(STEP, SECOND * 5, |c| c.leaders() == ["a"]);
    // Right after a renew: step a full retry period so one happens now.
    c.step(Duration::from_secs(2));
    c.server.set_outage(true);
    for _ in 0..3 {
        c.step(Duration::from_secs(2)); // 3 failed renews: 6s of outage
        assert!(c.candidates[0].handle().probe().is_leader());
    }
    c.clock.advance(Duration::from_millis(1900)); // 7.9s
    c.server.set_outage(false);
    c.step(Duration::from_millis(100)); // renew at 8s succeeds
    assert!(c.candidates[0].handle().probe().is_leader());
    for _ in 0..10 {
        c.step(Duration::from_secs(2));
    }
    assert!(c.candidates[0].handle().probe().is_leader());
    assert_eq!(c.candidates[0].stopped(), 0);
}

#[test]
fn outage_longer_than_renew_deadline_steps_down_before_the_lease_expires() {
    let mut c = Cluster::new();
    c.add("a", timings());
    c.step_until(STEP, SECOND * 5, |c| c.leaders() == ["a"]);
    // This step's renew succeeds at exactly this clock reading.
    c.step(Duration::from_secs(2));
    let last_renew = c.clock.now();
    c.server.set_outage(true);
    c.step_until(STEP, SECOND * 20, |c| c.candidates[0].stopped() == 1);
    let stopped_at = match c.candidates[0].log.last() {
        Some(Seen::Stopped { at, .. }) => *at,
        other => panic!("{other:?}"),
    };
    let since = stopped_at - last_renew;
    assert!(
        since <= Duration::from_secs(10),
        "stepped down {since:?} after the last renew"
    );
    assert!(
        since < Duration::from_secs(15),
        "before the lease could expire for others"
    );
    c.server.set_outage(false);
    assert!(!c.candidates[0].handle().probe().is_leader());
}

#[test]
fn hung_api_server_cannot_delay_step_down_past_the_deadline() {
    // Real time here: the server hangs every request for far longer than
    // the renew deadline, which must bound the request.
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let client =
        Client::new(ClientConfig::new(server.url()).timeout(Duration::from_secs(30))).unwrap();
    let lock = LeaseLock::new(client, NS, LEASE, "a");
    let (handle, events) = lease_elector::LeaderElector::builder(lock)
        .lease_duration(Duration::from_secs(3))
        .renew_deadline(Duration::from_millis(1500))
        .retry_period(Duration::from_millis(300))
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    let started = loop {
        match events.recv_timeout(WAIT).unwrap() {
            LeaderEvent::StartedLeading { at, .. } => break at,
            _ => continue,
        }
    };
    server.inject(Fault::latency(Duration::from_secs(60)).forever());
    let stopped = loop {
        match events.recv_timeout(WAIT).unwrap() {
            LeaderEvent::StoppedLeading { at, .. } => break at,
            _ => continue,
        }
    };
    // The last successful renew started at or after `started`.
    let lead = stopped - started;
    assert!(
        lead < Duration::from_secs(3),
        "led for {lead:?} through a hung server"
    );
    server.clear_faults();
    drop(handle);
    server.shutdown();
}

#[test]
fn conflict_storm_shorter_than_deadline_is_ridden_out() {
    let mut c = Cluster::new();
    c.add("a", timings());
    c.step_until(STEP, SECOND * 5, |c| c.leaders() == ["a"]);
    // Every PUT conflicts for a while: the fast path and the GET+PUT fallback both fail.
    c.server.inject(Fault::status(409).method("PUT").times(6));
    for _ in 0..4 {
        c.step(Duration::from_secs(2));
    }
    for _ in 0..5 {
        c.step(Duration::from_secs(2));
        assert!(c.candidates[0].handle().probe().is_leader());
    }
    assert_eq!(c.candidates[0].stopped(), 0);
    assert_eq!(c.holder(), "a");
}

#[test]
fn failed_optimistic_renew_falls_back_at_once_only_on_conflict() {
    let mut c = Cluster::new();
    c.add("a", timings());
    c.step_until(STEP, SECOND * 5, |c| c.leaders() == ["a"]);
    let renews = |c: &mut Cluster, fault: Fault| {
        c.server.reset_stats();
        c.server.inject(fault.method("PUT"));
        for _ in 0..3 {
            c.step(Duration::from_secs(2));
        }
        let log = c.server.requests();
        log.iter()
            .map(|r| format!("{} {}", r.method, r.status))
            .collect::<Vec<_>>()
    };
    // A conflict: someone wrote, so read and write again at once.
    let seen = renews(&mut c, Fault::status(409));
    assert_eq!(seen[..3], ["PUT 409", "GET 200", "PUT 200"], "{seen:?}");
    // No answer at all: the next try comes after the pause, and since the
    // lease is still ours it is the one-request fast path again.
    let seen = renews(&mut c, Fault::drop_connection());
    assert_eq!(seen[0], "PUT 0", "{seen:?}");
    assert!(seen[1..].iter().all(|r| r == "PUT 200"), "{seen:?}");
    assert_eq!(c.holder(), "a");
    assert_eq!(c.candidates[0].stopped(), 0);
}

#[test]
fn conflict_storm_longer_than_deadline_steps_down() {
    let mut c = Cluster::new();
    c.add("a", timings());
    c.step_until(STEP, SECOND * 5, |c| c.leaders() == ["a"]);
    c.server.inject(Fault::status(409).method("PUT").forever());
    c.step_until(STEP, SECOND * 15, |c| c.candidates[0].stopped() == 1);
    assert!(c.leaders().is_empty());
}

#[test]
fn malformed_answers_are_errors_not_panics() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let client = client(&server);
    let t = &Deadline::from_now(Duration::from_secs(5));
    let seed = serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "l", "namespace": NS},
        "spec": {"holderIdentity": "x", "leaseDurationSeconds": 15}
    });
    server.put_value(NS, seed);
    let bodies: Vec<(&str, Vec<u8>)> = vec![
        ("truncated", br#"{"kind":"Lease","metadata":{"na"#.to_vec()),
        ("wrong types", br#"{"kind":"Lease","metadata":{"name":"l"},"spec":{"leaseDurationSeconds":"fifteen"}}"#.to_vec()),
        ("bad time", br#"{"kind":"Lease","metadata":{"name":"l"},"spec":{"renewTime":"yesterday"}}"#.to_vec()),
        ("not json", b"<html>proxy error</html>".to_vec()),
        ("huge", {
            let mut v = br#"{"kind":"Lease","metadata":{"name":"l","annotations":{"a":""#.to_vec();
            v.extend(std::iter::repeat_n(b'x', 3 << 20));
            v.extend(br#""}}}"#);
            v
        }),
        ("other object", br#"{"kind":"Lease","metadata":{"name":"someone-else","namespace":"test"}}"#.to_vec()),
        ("wrong kind", br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"l","namespace":"test"},"data":{}}"#.to_vec()),
    ];
    for (what, body) in bodies {
        server.inject(Fault::raw(200, body));
        let mut lock = LeaseLock::new(client.clone(), NS, "l", "me");
        let err = lease_elector::Lock::get(&mut lock, t).expect_err(what);
        assert!(matches!(err, Error::Decode { .. }), "{what}: {err}");
        let msg = err.to_string();
        assert!(msg.contains("lease test/l"), "{what}: {msg}");
    }
    // A non-Status error body still yields a typed error with the text.
    server.inject(Fault::raw(503, b"upstream connect error".to_vec()));
    let err = client.get_lease(NS, "l", t).unwrap_err();
    assert_eq!(err.status_kind(), Some(StatusKind::ServerError));
    assert!(err.to_string().contains("upstream connect error"), "{err}");
    // And an elector facing garbage keeps trying instead of dying.
    let mut c = Cluster::with_server(server);
    c.server.inject(Fault::raw(200, b"{]".to_vec()).times(3));
    c.add("me", timings());
    c.step_until(STEP, SECOND * 30, |c| c.leaders() == ["me"]);
}

#[test]
fn status_errors_are_typed_and_name_the_lease() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let client = client(&server);
    let t = &Deadline::from_now(Duration::from_secs(5));
    let err = client.get_lease(NS, "missing", t).unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert!(err.to_string().contains("lease test/missing"), "{err}");
    assert!(err.to_string().contains("not found"), "{err}");

    let rec = lease_elector::LeaderElectionRecord {
        holder_identity: "x".into(),
        lease_duration_seconds: 15,
        ..Default::default()
    };
    let lease = lease_elector::Lease::new(NS, "dup", &rec);
    client.create_lease(&lease, t).unwrap();
    let err = client.create_lease(&lease, t).unwrap_err();
    assert!(err.is_already_exists(), "{err}");

    let mut stale = client.get_lease(NS, "dup", t).unwrap();
    client.replace_lease(&stale, t).unwrap();
    stale.metadata.resource_version = Some("1".into());
    let err = client.replace_lease(&stale, t).unwrap_err();
    assert!(err.is_conflict(), "{err}");

    server.inject(Fault::status(429));
    let err = client.get_lease(NS, "dup", t).unwrap_err();
    match &err {
        Error::Api { status, .. } => {
            assert_eq!(status.kind, StatusKind::TooManyRequests);
            assert_eq!(status.retry_after, Some(Duration::from_secs(1)));
        }
        other => panic!("{other}"),
    }
    server.inject(Fault::drop_connection());
    let err = client.get_lease(NS, "dup", t).unwrap_err();
    assert!(err.is_transport(), "{err}");
}

#[test]
fn rotated_token_is_picked_up_after_a_401_without_losing_leadership() {
    let dir = std::env::temp_dir().join(format!("le-token-{}", common::tempdir::unique()));
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("token");
    std::fs::write(&token_file, "token-one\n").unwrap();
    let server = TestApiServer::builder()
        .tokens(&["token-one"])
        .build()
        .unwrap();
    server.add_namespace(NS);
    let mut c = Cluster::with_server(server);
    let client = Client::new(ClientConfig::new(c.server.url()).token_file(&token_file)).unwrap();
    c.add_lock("a", LeaseLock::new(client, NS, LEASE, "a"), timings());
    c.step_until(STEP, SECOND * 5, |c| c.leaders() == ["a"]);
    // Rotate: the kubelet writes a new token, the old one stops working.
    std::fs::write(&token_file, "token-two\n").unwrap();
    c.server.set_tokens(&["token-two"]);
    for _ in 0..5 {
        c.step(Duration::from_secs(2));
        assert!(c.candidates[0].handle().probe().is_leader());
    }
    assert_eq!(c.candidates[0].stopped(), 0);
    let log = c.server.requests();
    assert!(
        log.iter().any(|r| r.status == 401),
        "the old token was refused once"
    );
    assert_eq!(log.last().unwrap().status, 200);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn token_file_is_reread_every_minute_even_without_a_401() {
    let dir = std::env::temp_dir().join(format!("le-token-{}", common::tempdir::unique()));
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("token");
    std::fs::write(&token_file, "old\n").unwrap();
    let server = TestApiServer::builder()
        .tokens(&["old", "new"])
        .build()
        .unwrap();
    server.add_namespace(NS);
    server.put_value(
        NS,
        serde_json::json!({"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l"}}),
    );
    let clock = ManualClock::new();
    let client = Client::new(
        ClientConfig::new(server.url())
            .token_file(&token_file)
            .clock(Arc::new(clock.clone())),
    )
    .unwrap();
    let t = &Deadline::from_now(Duration::from_secs(5));
    client.get_lease(NS, "l", t).unwrap();
    std::fs::write(&token_file, "new\n").unwrap();
    // "old" now answers 403 (not 401), so only the timed re-read can help.
    server.forbid_token("old");
    let err = client.get_lease(NS, "l", t).unwrap_err();
    assert_eq!(err.status_kind(), Some(StatusKind::Forbidden), "{err}");
    assert!(
        !err.to_string().contains("old"),
        "no token in errors: {err}"
    );
    clock.advance(Duration::from_secs(61));
    client.get_lease(NS, "l", t).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tls_with_ca_and_client_certificate() {
    let server = TestApiServer::builder()
        .tls(true)
        .client_ca(true)
        .build()
        .unwrap();
    server.add_namespace(NS);
    assert!(server.url().starts_with("https://127.0.0.1:"));
    let mut c = Cluster::with_server(server);
    let client = Client::new(
        ClientConfig::new(c.server.url())
            .ca_pem(c.server.ca_pem())
            .client_identity(
                lease_elector::testing::client_cert_pem(),
                lease_elector::testing::client_key_pem(),
            ),
    )
    .unwrap();
    c.add_lock("tls", LeaseLock::new(client, NS, LEASE, "tls"), timings());
    c.step_until(STEP, SECOND * 5, |c| c.leaders() == ["tls"]);
    // Without a client certificate the handshake is refused: a transport error.
    let anonymous =
        Client::new(ClientConfig::new(c.server.url()).ca_pem(c.server.ca_pem())).unwrap();
    let err = anonymous
        .get_lease(NS, LEASE, &Deadline::from_now(Duration::from_secs(5)))
        .unwrap_err();
    assert!(err.is_transport(), "{err}");
    // A CA that did not sign the server's certificate is refused too.
    let wrong = Client::new(
        ClientConfig::new(c.server.url()).ca_pem(lease_elector::testing::client_cert_pem()),
    )
    .unwrap();
    assert!(wrong
        .get_lease(NS, LEASE, &Deadline::from_now(Duration::from_secs(5)))
        .unwrap_err()
        .is_transport());
}

/// Fields the elector's types do not model (an owner reference here; a
/// field of a newer Lease version on a newer cluster) go back as they came:
/// the test server, like kube-apiserver, drops fields its own version does
/// not know, so only known ones can be seen surviving.
#[test]
fn fields_the_elector_does_not_model_survive_renewals() {
    let mut c = Cluster::new();
    c.server.put_value(
        NS,
        serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": LEASE, "labels": {"team": "x"}, "annotations": {"note": "keep me"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                    "uid": "6f0c2d1e-0000-4000-8000-000000000001"}]},
            "spec": {}
        }),
    );
    c.add("a", timings());
    c.step_until(STEP, SECOND * 5, |c| c.leaders() == ["a"]);
    c.step(Duration::from_secs(2));
    let lease = c.server.lease_value(NS, LEASE).unwrap();
    assert_eq!(lease["metadata"]["ownerReferences"][0]["name"], "owner");
    assert_eq!(lease["metadata"]["annotations"]["note"], "keep me");
    assert_eq!(lease["metadata"]["labels"]["team"], "x");
    assert_eq!(lease["spec"]["holderIdentity"], "a");
}

#[test]
fn hostile_but_decodable_leases_do_not_wedge_the_elector() {
    // No spec at all: an empty record, free to take.
    let mut c = Cluster::new();
    c.server.put_value(
        NS,
        serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": LEASE}}),
    );
    c.add("a", timings());
    c.step_until(STEP, SECOND * 5, |c| c.leaders() == ["a"]);
    assert_eq!(c.lease_spec()["leaseTransitions"], 1);

    // A holder that wrote a negative duration: read as already expired
    // (as client-go does), so it cannot hold the lease for ever.
    let mut c = Cluster::new();
    c.server.put_value(
        NS,
        serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": LEASE},
            "spec": {"holderIdentity": "broken", "leaseDurationSeconds": -30, "leaseTransitions": 4}}),
    );
    c.add("a", timings());
    c.step_until(STEP, SECOND * 5, |c| c.leaders() == ["a"]);
    assert_eq!(c.lease_spec()["leaseTransitions"], 5);
    assert_eq!(c.lease_spec()["leaseDurationSeconds"], 15);
}
