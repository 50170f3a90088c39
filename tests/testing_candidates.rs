//! The testing API per candidate (issue 25): each candidate's client comes
//! from `TestApiServer::client_config(identity)`, and one line cuts off,
//! hangs or slows that candidate alone; the Lease and its holder are read
//! typed.

mod common;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use lease_elector::testing::{Fault, TestApiServer};
use lease_elector::{Client, Deadline, LeaseLock};

const STEP: Duration = Duration::from_millis(500);

/// A TLS server that requires tokens nobody hands the candidates: they get
/// in with the ones `client_config` gives them.
fn server() -> TestApiServer {
    TestApiServer::builder()
        .tls(true)
        .tokens(&["someone-else"])
        .build()
        .unwrap()
}

fn candidate(c: &mut Cluster, id: &str) -> usize {
    let client = Client::new(c.server.client_config(id)).unwrap();
    let lock = LeaseLock::new(client, NS, LEASE, id);
    c.add_lock(id, lock, timings())
}

fn get(server: &TestApiServer, id: &str, timeout: Duration) -> lease_elector::Result<()> {
    let client = Client::new(server.client_config(id)).unwrap();
    match client.get_lease(NS, LEASE, &Deadline::from_now(timeout)) {
        Ok(_) => Ok(()),
        Err(e) if e.is_transport() => Err(e),
        // A 404 is an answer: the server served the request.
        Err(_) => Ok(()),
    }
}

#[test]
fn cutting_off_the_leader_alone_hands_the_lease_to_the_other_candidate() {
    let mut c = Cluster::with_server(server());
    candidate(&mut c, "a");
    c.step_until(STEP, Duration::from_secs(10), |c| c.leaders() == ["a"]);
    candidate(&mut c, "b");
    c.step(STEP);
    assert_eq!(c.server.holder(NS, LEASE).as_deref(), Some("a"));

    c.server.cut_off("a");
    c.step_until(STEP, Duration::from_secs(40), |c| c.leaders() == ["b"]);
    assert_eq!(c.server.holder(NS, LEASE).as_deref(), Some("b"));
    let lease = c.server.lease(NS, LEASE).expect("the lease");
    assert_eq!(lease.record().leader_transitions, 1);

    // Back on the wire, "a" follows.
    c.server.restore("a");
    c.step(Duration::from_secs(4));
    assert_eq!(c.leaders(), ["b"]);
}

#[test]
fn a_candidates_faults_leave_the_others_alone_until_restored() {
    let server = server();
    server.add_namespace(NS);
    let short = Duration::from_millis(400);
    assert!(
        get(&server, "a", short).is_ok(),
        "a candidate's token is accepted"
    );

    server.cut_off("a");
    assert!(get(&server, "a", short).is_err(), "a is cut off");
    assert!(get(&server, "b", short).is_ok(), "b is served");
    server.restore("a");
    assert!(get(&server, "a", short).is_ok(), "a is back");

    server.slow("b", Duration::from_millis(300));
    let started = Instant::now();
    assert!(get(&server, "b", Duration::from_secs(5)).is_ok());
    assert!(started.elapsed() >= Duration::from_millis(300));
    let started = Instant::now();
    assert!(get(&server, "a", Duration::from_secs(5)).is_ok());
    assert!(
        started.elapsed() < Duration::from_millis(300),
        "a is not slowed"
    );
    server.restore("b");
}

#[test]
fn restore_lets_go_of_that_candidates_hung_requests_and_no_one_elses() {
    let server = server();
    server.add_namespace(NS);
    server.hang("a");
    server.inject(Fault::hang().candidate("b").forever());
    let (tx, rx) = mpsc::channel();
    for id in ["a", "b"] {
        let (tx, server_config) = (tx.clone(), server.client_config(id));
        thread::spawn(move || {
            let client = Client::new(server_config).unwrap();
            let out = client.get_lease(NS, LEASE, &Deadline::from_now(WAIT));
            let _ = tx.send((id, out.map(|_| ()).map_err(|e| e.is_transport())));
        });
    }
    // Both are held.
    assert!(rx.recv_timeout(Duration::from_millis(500)).is_err());
    server.restore("a");
    let (id, out) = rx.recv_timeout(WAIT).expect("a is let go");
    assert_eq!((id, out), ("a", Err(true)), "closed without an answer");
    assert!(
        rx.recv_timeout(Duration::from_millis(500)).is_err(),
        "b is still held"
    );
    server.clear_faults();
    assert_eq!(rx.recv_timeout(WAIT).expect("b is let go").0, "b");
}

#[test]
fn forever_faults_fire_until_cleared() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    server.inject(Fault::drop_connection().candidate("a").forever());
    for _ in 0..5 {
        assert!(get(&server, "a", Duration::from_millis(400)).is_err());
    }
    server.clear_faults();
    assert!(get(&server, "a", Duration::from_millis(400)).is_ok());
}
