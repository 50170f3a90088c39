//! Stopping from another thread, against a server that answers nothing:
//! `StoppedLeading` comes at once, and a failed release is a one-line
//! value, not a reason to fail.

mod common;

use lease_elector::LeaderEvents;
use std::time::{Duration, Instant};

use common::*;
use lease_elector::testing::{Fault, TestApiServer};
use lease_elector::{ElectorHandle, LeaderElector, LeaseLock, StopReason};

/// A leader through `client` with 4s/3s/1s timings and a 1 s release
/// budget, once it leads.
fn leader(client: lease_elector::Client) -> (ElectorHandle, LeaderEvents) {
    let lock = LeaseLock::new(client, NS, LEASE, "a");
    let (handle, events) = LeaderElector::builder(lock)
        .lease_duration(Duration::from_secs(4))
        .renew_deadline(Duration::from_secs(3))
        .retry_period(Duration::from_secs(1))
        .release_on_cancel(true)
        .release_timeout(Duration::from_secs(1))
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    wait_started(&events);
    (handle, events)
}

/// A leader on `server` whose next renew hangs on the server.
fn leader_with_a_hung_renew(server: &TestApiServer) -> (ElectorHandle, LeaderEvents) {
    let (handle, events) = leader(client(server));
    server.reset_stats();
    server.inject(Fault::hang().forever());
    eventually("a renew hung on the server", || {
        server.stats().faults_fired >= 1
    });
    (handle, events)
}

/// Time from `stop` to `StoppedLeading`.
fn stopped_after(events: &LeaderEvents, stop: impl FnOnce()) -> Duration {
    let asked = Instant::now();
    stop();
    let (_, reason) = wait_stopped(events);
    assert_eq!(reason, StopReason::Stopped);
    asked.elapsed()
}

#[test]
fn a_stopper_ends_the_term_at_once_while_the_server_hangs() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let (handle, events) = leader_with_a_hung_renew(&server);
    let term = handle.probe().term().expect("leading");
    let stopper = handle.stopper();
    let took = stopped_after(&events, || stopper.stop());
    assert!(
        took < Duration::from_millis(100),
        "StoppedLeading after {took:?}"
    );
    assert!(!term.is_current() && !handle.probe().is_leader());
    drop(term); // the work lets go: now the release is tried
                // The release cannot get through: a value, one line, naming the lease.
    let err = handle.stop().expect_err("the release hangs");
    let text = err.to_string();
    assert!(
        !text.contains('\n') && text.contains("test/the-lease"),
        "{text}"
    );
}

#[test]
fn a_consuming_stop_on_another_thread_sends_stopped_leading_at_once_too() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let (handle, events) = leader_with_a_hung_renew(&server);
    let mut joiner = None;
    let took = stopped_after(&events, || {
        joiner = Some(std::thread::spawn(move || handle.stop()));
    });
    assert!(
        took < Duration::from_millis(100),
        "StoppedLeading after {took:?}"
    );
    assert!(joiner.unwrap().join().unwrap().is_err());
}

/// A TCP relay in front of `upstream` that can start dropping every new
/// connection attempt on the floor (its accept queue is filled and never
/// drained), the way a dead node or a firewall does: a connect then hangs.
struct Relay {
    addr: std::net::SocketAddr,
    blackhole: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Connections that fill the accept queue, kept open.
    fillers: Vec<std::net::TcpStream>,
}

impl Relay {
    fn start(upstream: std::net::SocketAddr) -> Relay {
        use std::io::copy;
        use std::net::{TcpListener, TcpStream};
        use std::sync::atomic::Ordering;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let blackhole = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop = blackhole.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    // Stop accepting: the queue fills and stays full.
                    std::mem::forget(listener);
                    return;
                }
                let Ok(down) = conn else { continue };
                let Ok(up) = TcpStream::connect(upstream) else {
                    continue;
                };
                let (mut d2, mut u2) = (down.try_clone().unwrap(), up.try_clone().unwrap());
                let (mut d, mut u) = (down, up);
                std::thread::spawn(move || {
                    let _ = copy(&mut d, &mut u);
                    let _ = u.shutdown(std::net::Shutdown::Both);
                });
                std::thread::spawn(move || {
                    let _ = copy(&mut u2, &mut d2);
                    let _ = d2.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        Relay {
            addr,
            blackhole,
            fillers: Vec::new(),
        }
    }

    /// From now on a connect to the relay hangs.
    fn drop_new_connections(&mut self) {
        use std::net::TcpStream;
        self.blackhole
            .store(true, std::sync::atomic::Ordering::SeqCst);
        // Wake the acceptor so that it stops, then fill its queue until a
        // connect no longer completes.
        let _ = TcpStream::connect(self.addr);
        loop {
            match TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)) {
                Ok(s) => self.fillers.push(s),
                Err(_) => return,
            }
            assert!(self.fillers.len() < 10_000, "the accept queue never filled");
        }
    }

    /// True while some socket is in SYN_SENT towards the relay.
    fn connect_in_progress(&self) -> bool {
        let port = format!(":{:04X} ", self.addr.port());
        std::fs::read_to_string("/proc/net/tcp")
            .unwrap_or_default()
            .lines()
            .skip(1)
            .any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 3 && f[3] == "02" && format!("{} ", f[2]).contains(&port)
            })
    }
}

#[test]
fn stopping_during_a_connect_that_hangs_sends_stopped_leading_at_once() {
    let server = TestApiServer::builder()
        // Every renew needs a new connection.
        .idle_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    server.add_namespace(NS);
    let upstream = server.url().trim_start_matches("http://").parse().unwrap();
    let mut relay = Relay::start(upstream);
    let config = lease_elector::ClientConfig::new(format!("http://{}", relay.addr));
    let (handle, events) = leader(lease_elector::Client::new(config).unwrap());
    relay.drop_new_connections();
    eventually("the next renew's connect to hang", || {
        relay.connect_in_progress()
    });
    let stopper = handle.stopper();
    let took = stopped_after(&events, || stopper.stop());
    assert!(
        took < Duration::from_millis(100),
        "StoppedLeading after {took:?}"
    );
    let _ = handle.stop();
}

/// The holder the test server stores for the lease.
fn stored_holder(server: &TestApiServer) -> String {
    server.holder(NS, LEASE).unwrap_or_default()
}

/// A leader with a release on stop that waits `grace` for the work, and
/// the term its work holds.
fn leader_with_work(
    server: &TestApiServer,
    grace: Duration,
) -> (ElectorHandle, LeaderEvents, lease_elector::Term) {
    server.add_namespace(NS);
    let lock = LeaseLock::new(client(server), NS, LEASE, "a");
    let (handle, events) = LeaderElector::builder(lock)
        .lease_duration(Duration::from_secs(4))
        .renew_deadline(Duration::from_secs(3))
        .retry_period(Duration::from_secs(1))
        .release_on_cancel(true)
        .release_grace(grace)
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    let term = loop {
        if let lease_elector::LeaderEvent::StartedLeading { term, .. } =
            events.recv_timeout(WAIT).unwrap()
        {
            break term;
        }
    };
    (handle, events, term)
}

#[test]
fn a_release_on_stop_waits_until_the_work_has_let_go_of_its_term() {
    let server = TestApiServer::start().unwrap();
    let (handle, events, term) = leader_with_work(&server, Duration::from_secs(60));
    // The work, on its own thread, finishing a step with the term.
    let (finish, finished) = std::sync::mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        finished.recv().unwrap();
        drop(term);
    });
    // As the README's program does: another thread stops the elector.
    handle.stopper().stop();
    let (_, reason) = wait_stopped(&events);
    assert_eq!(reason, StopReason::Stopped);
    // While the work runs, the lease stays ours: nobody else may start.
    // (Released at once, it changed within a few milliseconds.)
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(stored_holder(&server), "a", "released while the work ran");
    assert!(!handle.is_finished());
    // The work lets go: now the lease is released.
    finish.send(()).unwrap();
    worker.join().unwrap();
    handle.stop().unwrap();
    assert_eq!(stored_holder(&server), "", "released once the work ended");
}

#[test]
fn work_that_outlives_the_release_grace_leaves_the_lease_to_expire() {
    let server = TestApiServer::start().unwrap();
    let grace = Duration::from_millis(200);
    let (handle, events, term) = leader_with_work(&server, grace);
    let asked = Instant::now();
    handle.stopper().stop();
    wait_stopped(&events);
    // The work never lets go: past the grace, stop returns without a
    // release, says so, and the lease expires by itself.
    match handle.stop() {
        Err(lease_elector::Error::NotReleased { lock, waited }) => {
            assert_eq!((lock, waited), (format!("{NS}/{LEASE}"), grace));
        }
        other => panic!("stop() with the work still holding its term: {other:?}"),
    }
    assert!(asked.elapsed() >= grace);
    assert_eq!(stored_holder(&server), "a", "not released while held");
    drop(term);
}
