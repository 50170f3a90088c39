//! End to end over HTTP: an OpenShift `LeaderElection` config through
//! `from_config`, an elector acquiring and releasing the Lease on the
//! embedded API server, and the LeaderElection Events it records there.

mod common;

use common::RawLeases;

use std::time::Duration;

use lease_elector::openshift::LeaderElection;
use lease_elector::testing::TestApiServer;
use lease_elector::{Client, ClientConfig, LeaderEvent};

#[test]
fn config_to_leadership_and_events() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("team-a");
    let file = LeaderElection::from_json(
        r#"{"namespace": "team-a", "name": "e2e-lock",
            "leaseDuration": "15s", "renewDeadline": "10s", "retryPeriod": "2s"}"#,
    )
    .unwrap();
    let cfg = file.defaulted("ignored", "ignored");
    let client = Client::new(ClientConfig::new(server.url())).unwrap();
    let builder = cfg
        .elector(client, "e2e-operator", "pod-a")
        .unwrap()
        .expect("election is enabled in this config");
    let (handle, events) = builder.build().unwrap().spawn().unwrap();
    loop {
        match events.recv_timeout(Duration::from_secs(10)).unwrap() {
            LeaderEvent::StartedLeading { .. } => break,
            LeaderEvent::NewLeader { identity, .. } => assert_eq!(identity, "pod-a"),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(handle.probe().is_leader());
    // Stop releases the Lease; the elector thread ends, which drops the
    // event recorder, which sends what is queued and joins its thread.
    handle.stop().unwrap();
    assert!(events
        .iter()
        .any(|e| matches!(e, LeaderEvent::StoppedLeading { .. })));

    let lease = server
        .lease_value("team-a", "e2e-lock")
        .expect("the lease was created");
    assert_eq!(lease["spec"]["holderIdentity"].as_str().unwrap_or(""), "");
    let recorded = server.event_values();
    let messages: Vec<&str> = recorded
        .iter()
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    assert_eq!(messages, ["pod-a became leader", "pod-a stopped leading"]);
    for e in &recorded {
        assert_eq!(e["reason"], "LeaderElection");
        assert_eq!(e["metadata"]["namespace"], "team-a");
        assert_eq!(e["involvedObject"]["kind"], "Lease");
        assert_eq!(e["involvedObject"]["name"], "e2e-lock");
        assert_eq!(e["involvedObject"]["uid"], lease["metadata"]["uid"]);
        assert_eq!(e["involvedObject"]["namespace"], "team-a");
        assert_eq!(e["source"]["component"], "e2e-operator");
        assert_eq!(e["reportingInstance"], "pod-a");
    }
}

#[test]
fn disabled_config_talks_to_nobody() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("team-a");
    let cfg = LeaderElection::from_json(r#"{"disable": true}"#).unwrap();
    let client = Client::new(ClientConfig::new(server.url())).unwrap();
    let election = cfg.elector(client, "c", "").unwrap();
    assert!(election.is_none());
    assert_eq!(server.stats().requests, 0);
}
