//! Electors that watch the Lease, over real HTTP on the embedded server.
//! The clock is manual and, in most tests, never advanced: anything that
//! happens was caused by the watch, not by a retry timer.

mod common;

use std::time::{Duration, Instant};

use common::*;
use lease_elector::testing::{self, TestApiServer};
use lease_elector::{Client, ClientConfig, Clock, ElectorConfig, LeaderEvent, LeaseLock};

const STEP: Duration = Duration::from_millis(500);

fn watching() -> ElectorConfig {
    ElectorConfig {
        watch: true,
        ..timings()
    }
}

fn leader_with_watching_follower() -> Cluster {
    let mut c = Cluster::new();
    c.add("a", timings());
    c.step_until(STEP, Duration::from_secs(5), |c| c.leaders() == ["a"]);
    c.add("b", watching());
    c.step_until(STEP, Duration::from_secs(5), |c| {
        c.candidates[1].handle().probe().leader().as_deref() == Some("a")
    });
    eventually("b's watch to connect", || c.server.stats().watches >= 1);
    c
}

#[test]
fn release_is_acted_on_without_any_timer_firing() {
    release_reaches_the_watcher(leader_with_watching_follower());
}

/// The watch runs on its own socket with its own TLS session: it must
/// verify the server and authenticate (client certificate, or bearer
/// token) just as the elector's requests do, or it silently degrades to
/// polling and the frozen clock below would never let the follower move.
#[test]
fn the_watch_works_over_tls_with_a_client_certificate_or_a_token() {
    for client_cert in [true, false] {
        let server = TestApiServer::builder()
            .tls(true)
            .client_ca(client_cert)
            .tokens(&["t0k3n"])
            .build()
            .unwrap();
        server.add_namespace(NS);
        let mut c = Cluster::with_server(server);
        let tls_lock = |c: &Cluster, id: &str| {
            let mut config = ClientConfig::new(c.server.url())
                .ca_pem(c.server.ca_pem())
                .timeout(Duration::from_secs(5));
            config = if client_cert {
                // A verified client certificate authenticates on its own.
                config.client_identity(testing::client_cert_pem(), testing::client_key_pem())
            } else {
                config.token("t0k3n")
            };
            LeaseLock::new(Client::new(config).unwrap(), NS, LEASE, id)
        };
        let a = tls_lock(&c, "a");
        c.add_lock("a", a, timings());
        c.step_until(STEP, Duration::from_secs(5), |c| c.leaders() == ["a"]);
        let b = tls_lock(&c, "b");
        c.add_lock("b", b, watching());
        c.step_until(STEP, Duration::from_secs(5), |c| {
            c.candidates[1].handle().probe().leader().as_deref() == Some("a")
        });
        eventually("b's watch to connect", || c.server.stats().watches >= 1);
        release_reaches_the_watcher(c);
    }
}

/// A watch connection that goes silent (here the server holds the watch
/// request unanswered, as a peer that vanished without a FIN would) is
/// noticed within a few retry periods and reopened: the release still
/// reaches the follower with the elector's clock frozen.
#[test]
fn a_silent_watch_connection_is_noticed_and_reopened() {
    let mut c = Cluster::new();
    c.add("a", timings());
    c.step_until(STEP, Duration::from_secs(5), |c| c.leaders() == ["a"]);
    c.server
        .inject(testing::Fault::hang().path_contains("watch=true"));
    let quick = ElectorConfig {
        retry_period: Duration::from_millis(300),
        ..watching()
    };
    c.add("b", quick);
    c.step_until(STEP, Duration::from_secs(5), |c| {
        c.candidates[1].handle().probe().leader().as_deref() == Some("a")
    });
    // The first watch hangs; only a reconnect can be served.
    eventually("b's watch to reconnect after silence", || {
        c.server.stats().watches >= 1
    });
    release_reaches_the_watcher(c);
}

/// Stop the leader (it releases) and see the watching follower take over
/// with the clock frozen: only a watch event can have woken it.
fn release_reaches_the_watcher(mut c: Cluster) {
    c.settle();
    let frozen = c.clock.elapsed();
    c.server.reset_stats();
    c.stop(0); // releases
    let b = &c.candidates[1];
    loop {
        match b
            .events
            .recv_timeout(WAIT)
            .expect("b takes over via the watch")
        {
            LeaderEvent::StartedLeading { .. } => break,
            _ => continue,
        }
    }
    assert_eq!(c.clock.elapsed(), frozen, "no clock time passed");
    let stats = c.server.stats();
    // a's release and b's takeover: one PUT each, b read the Lease from the
    // watch event instead of a GET.
    assert_eq!((stats.updates, stats.gets), (2, 0), "{stats:?}");
    assert!(b.handle().probe().is_leader());
    assert_eq!(c.holder(), "b");
    assert!(b.handle().watch_changes() >= 1);
}

#[test]
fn crash_failover_takes_exactly_the_lease_duration_after_the_last_renew() {
    let mut c = Cluster::new();
    let mut crashy = timings();
    crashy.release_on_cancel = false;
    c.add("a", crashy);
    c.step_until(STEP, Duration::from_secs(5), |c| c.leaders() == ["a"]);
    c.add("b", watching());
    eventually("b's watch to connect", || c.server.stats().watches >= 1);
    // A few renewals by a, each seen by b through the watch (and acted on:
    // settle() counts a sleeper with a pending poke as not yet settled).
    for _ in 0..4 {
        let before = c.candidates[1].handle().watch_changes();
        c.step(Duration::from_secs(2));
        eventually("b to see a's renew", || {
            c.candidates[1].handle().watch_changes() > before
        });
        c.settle();
    }
    let last_renew = c.clock.now();
    c.stop(0); // a crash: nothing released
    let b = 1;
    let started = loop {
        c.step(Duration::from_millis(250));
        if let Some(at) = c.candidates[b].log.iter().find_map(|e| match e {
            Seen::Started { at, .. } => Some(*at),
            _ => None,
        }) {
            break at;
        }
        assert!(
            c.clock.now() - last_renew < Duration::from_secs(20),
            "no takeover"
        );
    };
    let failover = started - last_renew;
    // b woke at the expiry of what it observed, not at its next retry.
    assert!(
        failover >= Duration::from_secs(15),
        "{failover:?}: before expiry"
    );
    assert!(failover <= Duration::from_millis(15_250), "{failover:?}");
}

#[test]
fn watch_reconnects_after_an_outage() {
    let mut c = leader_with_watching_follower();
    c.server.set_outage(true);
    // The server cuts open watches when it notices the outage; the cut
    // stream is logged when it ends.
    eventually("the watch to be cut", || {
        c.server
            .requests()
            .iter()
            .any(|r| r.path.contains("watch=true"))
    });
    c.server.set_outage(false);
    eventually("the watch to reconnect", || c.server.stats().watches >= 2);
    c.settle();
    let frozen = c.clock.elapsed();
    c.stop(0);
    loop {
        match c.candidates[1]
            .events
            .recv_timeout(WAIT)
            .expect("takeover via the new watch")
        {
            LeaderEvent::StartedLeading { .. } => break,
            _ => continue,
        }
    }
    assert_eq!(c.clock.elapsed(), frozen);
}

#[test]
fn stop_joins_the_watch_at_once() {
    let mut c = leader_with_watching_follower();
    let t0 = Instant::now();
    c.stop(1);
    // The watch thread sat in a blocking read; shutting its socket down
    // ends it immediately rather than at the server's watch time-out.
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "stop took {:?}",
        t0.elapsed()
    );
}

/// A watching leader whose Lease another writer frees (or takes) steps
/// down on the watch event, with the clock frozen: not a retry period
/// later, at its next renew.
#[test]
fn a_watching_leader_steps_down_when_the_watch_shows_its_lease_taken() {
    use common::RawLeases;
    let mut c = Cluster::new();
    c.add("a", watching());
    c.step_until(STEP, Duration::from_secs(5), |c| c.leaders() == ["a"]);
    eventually("a's watch to connect", || c.server.stats().watches >= 1);
    c.settle();
    let frozen = c.clock.elapsed();
    let mut lease = c.server.lease_value(NS, LEASE).unwrap();
    lease["spec"]["holderIdentity"] = "someone-else".into();
    c.server.put_value(NS, lease);
    let (_, reason) = wait_stopped(&c.candidates[0].events);
    assert_eq!(reason, lease_elector::StopReason::Lost);
    assert_eq!(
        c.clock.elapsed(),
        frozen,
        "only the watch could have told it"
    );
    assert!(!c.candidates[0].handle().probe().is_leader());
}
