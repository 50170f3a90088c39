//! `LeaderElector::run`: the work runs while leading, on a thread of its
//! own per term; when the term ends the call waits for the work to return,
//! and only then releases the lease.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use common::*;
use lease_elector::{Error, StopReason};

#[test]
fn the_lease_is_released_only_after_the_work_has_returned() {
    let server = server_with_namespace();
    let elector = short_elector(&server, "a").build().unwrap();
    let stopper = elector.stopper();
    let (told_tx, told) = mpsc::channel();
    let (started_tx, started) = mpsc::channel();
    let (finish, finished) = mpsc::channel::<()>();
    let runner = std::thread::spawn(move || {
        elector.run(move |term| {
            started_tx.send(()).unwrap();
            while term.is_current() {
                std::thread::sleep(Duration::from_millis(5));
            }
            // Told: the term ended. The work finishes its step first.
            told_tx.send(()).unwrap();
            finished.recv().unwrap();
        })
    });
    // The work runs: a leads. (The Lease naming "a" is not enough: a stop
    // that comes before the elector has the answer to its write abandons
    // that write, and the work never starts.)
    started.recv_timeout(WAIT).expect("a leads");
    assert_eq!(server.holder(NS, LEASE).as_deref(), Some("a"));
    stopper.stop(); // as a SIGTERM handler would
    told.recv_timeout(WAIT)
        .expect("the work is told its term ended");
    // While the work runs, the lease stays a's (released at once, it
    // would change within milliseconds).
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        server.holder(NS, LEASE).as_deref(),
        Some("a"),
        "released before the work returned"
    );
    assert!(!runner.is_finished(), "run returned before the work did");
    finish.send(()).unwrap();
    let ended = runner.join().unwrap().unwrap();
    assert_eq!(ended, StopReason::Released);
    assert_eq!(
        server.holder(NS, LEASE),
        None,
        "released once the work returned"
    );
}

#[test]
fn work_that_returns_while_leading_ends_the_election_and_releases() {
    let server = server_with_namespace();
    let mut runs = 0;
    let ended = short_elector(&server, "a")
        .build()
        .unwrap()
        .run(|term| {
            runs += 1;
            assert!(term.is_current());
        })
        .unwrap();
    assert_eq!((ended, runs), (StopReason::Released, 1));
    assert_eq!(server.holder(NS, LEASE), None);
}

#[test]
fn without_rejoin_a_lost_lease_ends_the_call_after_the_work() {
    let server = server_with_namespace();
    let elector = short_elector(&server, "a").build().unwrap();
    let ended = elector
        .run(|term| {
            server.set_outage(true); // the API server goes away
            assert!(term.wait_ended(WAIT), "told at the renew deadline");
        })
        .unwrap();
    assert_eq!(ended, StopReason::Lost);
    server.set_outage(false);
    assert_eq!(
        server.holder(NS, LEASE).as_deref(),
        Some("a"),
        "a lost lease is not released"
    );
}

#[test]
fn with_rejoin_each_term_runs_the_work_again_with_its_token() {
    let server = server_with_namespace();
    let elector = short_elector(&server, "a").rejoin(true).build().unwrap();
    let stopper = elector.stopper();
    let mut tokens = Vec::new();
    let ended = elector
        .run(|term| {
            tokens.push(term.token());
            if tokens.len() == 1 {
                // Lose the first term to an outage; the second one stops.
                server.set_outage(true);
                assert!(term.wait_ended(WAIT));
                server.set_outage(false);
            } else {
                stopper.stop();
            }
        })
        .unwrap();
    assert_eq!(ended, StopReason::Released);
    assert_eq!(tokens.len(), 2);
    assert!(tokens[1] > tokens[0], "a new term, a new token: {tokens:?}");
}

/// A program that logs its shutdown learns from `run` whether it
/// released the Lease: `Released` after a release, `Stopped` when there
/// was nothing to release (a follower) or no release was asked for.
#[test]
fn a_stop_says_whether_the_lease_was_released() {
    let server = server_with_namespace();
    // A follower: "other" holds the Lease (for 15 s) when the stop comes.
    let held = lease_elector::LeaderElectionRecord {
        holder_identity: "other".into(),
        lease_duration_seconds: 15,
        ..Default::default()
    };
    server.put_record(NS, LEASE, &held);
    let elector = short_elector(&server, "a").build().unwrap();
    let stopper = elector.stopper();
    let ended = std::thread::scope(|s| {
        let running = s.spawn(|| elector.run(|_| panic!("a never leads")));
        common::eventually("a has read the Lease", || server.stats().gets > 0);
        stopper.stop();
        running.join().unwrap()
    })
    .unwrap();
    assert_eq!(ended, StopReason::Stopped, "a follower releases nothing");
    assert_eq!(server.holder(NS, LEASE).as_deref(), Some("other"));

    // A leader without release_on_cancel: stopped, the Lease left as it is.
    server.delete_lease(NS, LEASE);
    let ended = short_elector(&server, "b")
        .release_on_cancel(false)
        .build()
        .unwrap()
        .run(|_| {})
        .unwrap();
    assert_eq!(ended, StopReason::Stopped);
    assert_eq!(server.holder(NS, LEASE).as_deref(), Some("b"));

    // A leader with it: released.
    server.delete_lease(NS, LEASE);
    let ended = short_elector(&server, "c")
        .build()
        .unwrap()
        .run(|_| {})
        .unwrap();
    assert_eq!(ended, StopReason::Released);
    assert_eq!(server.holder(NS, LEASE), None);
}

#[test]
fn never_leading_within_the_acquire_timeout_is_an_error_naming_the_lease() {
    let server = server_with_namespace();
    let (holder, _events) = short_elector(&server, "holder")
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    eventually("holder leads", || holder.probe().is_leader());
    let err = short_elector(&server, "late")
        .acquire_timeout(Duration::from_millis(100))
        .build()
        .unwrap()
        .run(|_| panic!("never leads"))
        .unwrap_err();
    assert!(matches!(err, Error::AcquireTimeout { .. }), "{err}");
    assert!(err.to_string().contains("test/the-lease"), "{err}");
    holder.stop().unwrap();
}

#[test]
fn work_that_panics_stops_the_elector_without_a_release() {
    let server = server_with_namespace();
    let elector = short_elector(&server, "a").build().unwrap();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        elector.run(|_| panic!("the work failed"))
    }));
    assert!(outcome.is_err(), "the panic goes on in the caller");
    assert_eq!(
        server.holder(NS, LEASE).as_deref(),
        Some("a"),
        "not released: the work did not end cleanly"
    );
}
