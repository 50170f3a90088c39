//! One term, one piece of work, over real HTTP: `run()` with `rejoin`
//! neither leads again nor releases while an earlier term's work still
//! runs; tokens grow across a deletion, a writer lowering
//! `leaseTransitions` and `leaseTransitions` at `i32::MAX`; no public call
//! panics on a `Duration` it accepts.

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use lease_elector::testing::TestApiServer;
use lease_elector::{
    Client, ClientConfig, EventRecorder, LeaderEvent, LeaderEvents, ManualClock, Term,
};
use serde_json::json;

fn resource_version(server: &TestApiServer) -> Option<u64> {
    server.lease_value(NS, LEASE)?["metadata"]["resourceVersion"]
        .as_str()?
        .parse()
        .ok()
}

#[test]
fn run_with_rejoin_neither_leads_again_nor_releases_while_an_earlier_terms_work_runs() {
    let server = server_with_namespace();
    let elector = short_elector(&server, "a").rejoin(true).build().unwrap();
    let stopper = elector.stopper();
    let (term_tx, term_rx) = mpsc::channel::<Term>();
    let (go, gate) = mpsc::channel::<()>();
    let (done_tx, done) = mpsc::channel::<(u64, Instant)>();
    let runner = std::thread::spawn(move || {
        let mut first = true;
        elector.run(move |term| {
            if std::mem::take(&mut first) {
                // A step that outlives its term: it returns when told.
                term_tx.send(term.clone()).unwrap();
                gate.recv().unwrap();
            } else {
                while term.is_current() {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            done_tx.send((term.token(), Instant::now())).unwrap();
        })
    });
    let first = term_rx.recv_timeout(WAIT).expect("a leads");
    // The API server goes away for longer than the renew deadline: term 1
    // ends while its work is in the middle of its step.
    server.set_outage(true);
    assert!(first.wait_ended(WAIT), "term 1 ends at its deadline");
    drop(first);
    let version = resource_version(&server);
    server.set_outage(false);
    // The work of term 1 still runs: a seeks no new term (nothing is
    // written within a few retry periods), and a stop releases nothing.
    let quiet_until = Instant::now() + Duration::from_millis(3500);
    while Instant::now() < quiet_until {
        assert_eq!(
            resource_version(&server),
            version,
            "a wrote the Lease while its earlier term's work still ran: {:?}",
            server.lease_value(NS, LEASE)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    stopper.stop();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        server.holder(NS, LEASE).as_deref(),
        Some("a"),
        "released while the work of term 1 still ran"
    );
    assert!(!runner.is_finished(), "run returned before the work did");
    go.send(()).unwrap();
    let (_, returned) = done.recv_timeout(WAIT).expect("work 1 returns");
    runner.join().unwrap().unwrap();
    assert!(returned.elapsed() < WAIT);
    assert!(done.try_recv().is_err(), "no second term's work ran");
}

#[test]
fn run_with_rejoin_starts_the_next_term_only_once_the_earlier_work_has_returned() {
    let server = server_with_namespace();
    let elector = short_elector(&server, "a").rejoin(true).build().unwrap();
    let stopper = elector.stopper();
    let (term_tx, term_rx) = mpsc::channel::<Term>();
    let (go, gate) = mpsc::channel::<()>();
    let (log_tx, log) = mpsc::channel::<(u64, Instant, Instant)>();
    let runner = std::thread::spawn(move || {
        let mut first = true;
        elector.run(move |term| {
            let began = Instant::now();
            if std::mem::take(&mut first) {
                term_tx.send(term.clone()).unwrap();
                gate.recv().unwrap();
            } else {
                term_tx.send(term.clone()).unwrap();
                while term.is_current() {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            log_tx.send((term.token(), began, Instant::now())).unwrap();
        })
    });
    let first = term_rx.recv_timeout(WAIT).expect("a leads");
    server.set_outage(true);
    assert!(first.wait_ended(WAIT));
    let token_1 = first.token();
    drop(first);
    server.set_outage(false);
    go.send(()).unwrap();
    let second = term_rx.recv_timeout(WAIT).expect("a leads again");
    let token_2 = second.token();
    drop(second);
    stopper.stop();
    let (t1, _, end_1) = log.recv_timeout(WAIT).unwrap();
    let (t2, start_2, _) = log.recv_timeout(WAIT).unwrap();
    assert_eq!((t1, t2), (token_1, token_2));
    assert!(token_2 > token_1, "{token_2} > {token_1}");
    assert!(
        end_1 <= start_2,
        "term 2's work began before term 1's returned"
    );
    runner.join().unwrap().unwrap();
    assert_eq!(server.holder(NS, LEASE), None, "released after the work");
}

/// The events up to the next `StartedLeading`; its term.
fn started(events: &LeaderEvents) -> Term {
    loop {
        if let LeaderEvent::StartedLeading { term, .. } = events.recv_timeout(WAIT).unwrap() {
            return term;
        }
    }
}

/// A spec another writer stores: `holder` (empty: free), renewed now,
/// with `leaseTransitions` as given.
fn write_spec(server: &TestApiServer, holder: &str, transitions: i64) {
    let now = lease_elector::MicroTime::from_system_time(std::time::SystemTime::now()).to_string();
    server.put_value(
        NS,
        json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": LEASE},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": 1,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": transitions,
            },
        }),
    );
}

#[test]
fn tokens_grow_across_a_deletion_a_lowering_writer_and_lease_transitions_at_its_edge() {
    let server = server_with_namespace();
    let mut tokens = Vec::new();
    // A free Lease whose leaseTransitions another writer left at the
    // int32's edge: client-go's +1 cannot go above it.
    write_spec(&server, "", i64::from(i32::MAX));
    for (round, who) in ["a", "b", "c", "d"].into_iter().enumerate() {
        let (handle, events) = short_elector(&server, who)
            .retry_period(Duration::from_millis(200))
            .renew_deadline(Duration::from_millis(300))
            .lease_duration(Duration::from_secs(1))
            .build()
            .unwrap()
            .spawn()
            .unwrap();
        let term = started(&events);
        tokens.push(term.token());
        drop(term);
        handle.stop().unwrap();
        assert_eq!(server.holder(NS, LEASE), None, "{who} released");
        match round {
            // A writer lowers leaseTransitions to 0.
            0 => write_spec(&server, "", 0),
            // kubectl delete lease: the next candidate creates it anew.
            1 => server.delete_lease(NS, LEASE),
            // Back to the edge.
            _ => write_spec(&server, "", i64::from(i32::MAX)),
        }
    }
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens must grow strictly: {tokens:?}"
    );
}

#[test]
fn no_public_call_panics_on_the_longest_duration() {
    let server = server_with_namespace();
    let long = Duration::MAX;
    let (handle, events) = short_elector(&server, "a")
        .request_timeout(long)
        .release_timeout(long)
        .release_grace(long)
        .acquire_timeout(long)
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    let term = started(&events);
    assert!(!term.wait_ended(Duration::ZERO));
    let waiter = {
        let term = term.clone();
        std::thread::spawn(move || term.wait_ended(long))
    };
    assert!(term.time_to_stop() > Duration::ZERO);
    assert!(events.recv_timeout(Duration::ZERO).is_err());
    drop(term);
    handle.stop().unwrap();
    assert!(waiter.join().unwrap(), "the term ended");

    let recorder = EventRecorder::new(
        Client::new(ClientConfig::new(server.url())).unwrap(),
        "tests",
    )
    .with_request_timeout(long);
    drop(recorder);

    let clock = ManualClock::new();
    assert!(clock.wait_for_sleepers(0, long));
    clock.advance(long);
    clock.advance(long);
}
