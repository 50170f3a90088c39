//! What a leader costs the API server in connections: one kept across
//! renews, and when the server (or a load balancer) closes it while idle,
//! a reconnect that costs nothing else (the renew succeeds at its first
//! attempt) and resumes the TLS session instead of a full handshake.

mod common;

use lease_elector::LeaderEvents;
use std::time::{Duration, Instant};

use common::*;
use lease_elector::testing::TestApiServer;
use lease_elector::{Client, ClientConfig, ElectorConfig, LeaderElector, LeaderEvent, LeaseLock};

fn quick() -> ElectorConfig {
    ElectorConfig {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(500),
        ..ElectorConfig::default()
    }
}

fn lead(server: &TestApiServer) -> (lease_elector::ElectorHandle, LeaderEvents) {
    let config = ClientConfig::new(server.url()).ca_pem(server.ca_pem());
    let lock = LeaseLock::new(Client::new(config).unwrap(), NS, LEASE, "a");
    let (handle, events) = LeaderElector::builder(lock)
        .config(quick())
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    loop {
        match events.recv_timeout(WAIT).expect("leads") {
            LeaderEvent::StartedLeading { .. } => return (handle, events),
            LeaderEvent::NewLeader { .. } => {}
            other => panic!("{other:?}"),
        }
    }
}

fn wait_for_updates(server: &TestApiServer, n: u64) {
    let deadline = Instant::now() + WAIT;
    while server.stats().updates < n {
        assert!(Instant::now() < deadline, "only {:?}", server.stats());
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn renews_ride_one_connection() {
    let server = TestApiServer::builder().tls(true).build().unwrap();
    server.add_namespace(NS);
    let (handle, _events) = lead(&server);
    server.reset_stats();
    wait_for_updates(&server, 4);
    let stats = server.stats();
    assert_eq!(
        stats.connections, 0,
        "a renew opened a connection: {stats:?}"
    );
    drop(handle);
}

#[test]
fn a_connection_closed_while_idle_costs_a_resumed_handshake_and_nothing_else() {
    // The server closes connections idle for 200 ms; the leader renews every
    // 500 ms, so every renew finds its pooled connection closed.
    let server = TestApiServer::builder()
        .tls(true)
        .idle_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    server.add_namespace(NS);
    let (handle, events) = lead(&server);
    server.reset_stats();
    wait_for_updates(&server, 5);
    let stats = server.stats();
    // Every renew was one PUT answered 200: none failed, none was retried.
    let log = server.requests();
    assert!(
        log.iter().all(|r| r.method == "PUT" && r.status == 200),
        "{log:?}"
    );
    assert!(stats.connections >= 4, "{stats:?}");
    // The reconnects resumed the TLS session.
    assert!(stats.tls_resumed_handshakes >= 4, "{stats:?}");
    assert!(stats.tls_full_handshakes <= 1, "{stats:?}");
    assert!(handle.probe().is_leader());
    assert!(events
        .try_iter()
        .all(|e| !matches!(e, LeaderEvent::StoppedLeading { .. })));
}
