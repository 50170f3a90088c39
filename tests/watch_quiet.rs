//! A watching follower while nobody renews the Lease (issue 56): its
//! healthy watch tells it everything, so it sends no read while the
//! Lease runs out, is deleted or stays silent, and keeps that watch open
//! (a Lease nobody renews is no reason to reopen a stream). Every request
//! in these tests is the follower's: the Lease's holder is a process
//! stopped without a release, or a record put into the server.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::{client, eventually, NS};
use lease_elector::testing::{Fault, TestApiServer};
use lease_elector::{
    ElectorHandle, LeaderElectionRecord, LeaderElector, LeaderEvents, LeaseLock, MicroTime,
};

const LEASE_DURATION: Duration = Duration::from_secs(2);
const RETRY: Duration = Duration::from_millis(500);

/// Lease 2 s, renew deadline 1.5 s, retry period 0.5 s, watching.
fn elector(lock: LeaseLock) -> lease_elector::ElectorBuilder {
    LeaderElector::builder(lock)
        .lease_duration(LEASE_DURATION)
        .renew_deadline(Duration::from_millis(1500))
        .retry_period(RETRY)
        .release_on_cancel(false)
        .watch(true)
}

/// A Lease held by `holder`, who will never renew it.
fn put_held(server: &TestApiServer, name: &str, holder: &str) {
    let now = MicroTime::from_system_time(std::time::SystemTime::now());
    let record = LeaderElectionRecord {
        holder_identity: holder.into(),
        lease_duration_seconds: LEASE_DURATION.as_secs() as i32,
        acquire_time: Some(now),
        renew_time: Some(now),
        leader_transitions: 1,
        ..Default::default()
    };
    server.put_record(NS, name, &record);
}

/// Candidate `b` on Lease `name`, once it has seen the ghost's Lease
/// through its watch.
fn follower_of_ghost(server: &TestApiServer, name: &str) -> (ElectorHandle, LeaderEvents) {
    let (b, events) = elector(LeaseLock::new(client(server), NS, name, "b"))
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    eventually("b to see the ghost's Lease through its watch", || {
        b.probe().leader().as_deref() == Some("ghost")
            && b.probe().status().watch.is_watching()
            && b.watch_changes() >= 1
    });
    (b, events)
}

/// A holder crashes (stopped, nothing released): the watching follower
/// takes over at the expiry of what it saw, having read nothing and
/// opened no watch meanwhile: one write, its acquire.
#[test]
fn a_crashed_holders_lease_runs_out_without_a_read_or_a_new_watch() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let (a, _a_events) = elector(LeaseLock::new(client(&server), NS, "crash", "a"))
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    eventually("a leads", || a.probe().is_leader());
    let (b, _b_events) = elector(LeaseLock::new(client(&server), NS, "crash", "b"))
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    // b follows a through its watch: it has seen one of a's renews come.
    let seen = b.watch_changes();
    eventually("b to see a renew through its watch", || {
        b.probe().leader().as_deref() == Some("a")
            && b.probe().status().watch.is_watching()
            && b.watch_changes() > seen
    });
    a.stop().unwrap();
    server.reset_stats();
    eventually("b leads", || b.probe().is_leader());
    let s = server.stats();
    b.stop().unwrap();
    assert_eq!(
        (s.gets, s.watches, s.creates),
        (0, 0, 0),
        "while a's Lease ran out, b sent {} GETs and {} watch requests: {s:?}",
        s.gets,
        s.watches
    );
    assert!(s.updates >= 1, "b's acquire: {s:?}");
}

/// A Lease held by a holder that never renews, and a follower whose
/// writes are refused: nobody takes the Lease, which stays silent well
/// past its expiry (two and a half times the silence bound a held
/// Lease's watch had before: its lease duration). The follower's watch
/// stays open and it reads nothing; its refused writes are all it sends.
#[test]
fn a_silent_lease_is_no_reason_to_reopen_the_watch_or_to_read() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    put_held(&server, "silent", "ghost");
    for method in ["PUT", "POST"] {
        server.inject(Fault::status(403).method(method).forever());
    }
    let (b, _b_events) = follower_of_ghost(&server, "silent");
    server.reset_stats();
    let window = LEASE_DURATION * 5 / 2;
    thread::sleep(window);
    let s = server.stats();
    let watching = b.probe().status().watch.is_watching();
    b.stop().unwrap();
    assert_eq!(
        (s.gets, s.watches),
        (0, 0),
        "in {window:?} of a silent Lease b sent {} GETs and {} watch requests: {s:?}",
        s.gets,
        s.watches
    );
    assert!(watching, "b's watch is not watching");
    // Its refused writes: at most one a retry period, after the expiry.
    let most = (window.as_millis() / RETRY.as_millis()) as u64 + 1;
    assert!(s.updates <= most, "{s:?}");
}

/// The Lease of a holder that never renews is deleted: the deletion comes
/// through the watch, and the follower answers its reads from it (no
/// `GET` answered 404), waits out what the holder may still believe, and
/// creates the Lease.
#[test]
fn a_deletion_through_the_watch_costs_no_read() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    put_held(&server, "deleted", "ghost");
    let (b, _b_events) = follower_of_ghost(&server, "deleted");
    let changes = b.watch_changes();
    server.reset_stats();
    let deleted = Instant::now();
    server.delete_lease(NS, "deleted");
    eventually("b to hear of the deletion", || b.watch_changes() > changes);
    eventually("b leads", || b.probe().is_leader());
    let waited = deleted.elapsed();
    let s = server.stats();
    b.stop().unwrap();
    assert_eq!(
        (s.gets, s.watches),
        (0, 0),
        "after the deletion b sent {} GETs and {} watch requests: {s:?}",
        s.gets,
        s.watches
    );
    assert_eq!(s.creates, 1, "b creates the Lease once: {s:?}");
    assert!(
        waited >= LEASE_DURATION,
        "b created the Lease {waited:?} after the deletion, before the ghost's term could have ended"
    );
}
