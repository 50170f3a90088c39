//! A logger is the caller's code, and it runs on the elector's thread: one
//! that blocks (a stderr pipe nobody reads, a terminal held with Ctrl-S)
//! must not hold up the end of a term. The term ends at its deadline, the
//! receiver of the events gets `StoppedLeading` then, and the status can
//! still be read, while the elector thread is stuck in the logger.
//!
//! One test per binary: a process has one logger.

mod common;

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use common::*;
use lease_elector::testing::TestApiServer;
use lease_elector::{LeaderElector, LeaderEvent, LeaseLock, StopReason};

/// Blocks every warning from the crate once armed, until released.
struct StuckLogger {
    state: Mutex<(bool, bool, usize)>, // armed, released, writers stuck
    cv: Condvar,
}

static LOGGER: StuckLogger = StuckLogger {
    state: Mutex::new((false, false, 0)),
    cv: Condvar::new(),
};

impl log::Log for StuckLogger {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.target().starts_with("lease_elector") && m.level() <= log::Level::Info
    }
    fn log(&self, r: &log::Record) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let mut st = self.state.lock().unwrap();
        if !st.0 {
            return;
        }
        st.2 += 1;
        self.cv.notify_all();
        while !st.1 {
            st = self.cv.wait(st).unwrap();
        }
    }
    fn flush(&self) {}
}

/// Lets the stuck logger go when dropped (also when an assertion fails,
/// before the handle's drop joins the elector thread).
struct Unstick;

impl Drop for Unstick {
    fn drop(&mut self) {
        let mut st = LOGGER.state.lock().unwrap_or_else(|e| e.into_inner());
        st.1 = true;
        LOGGER.cv.notify_all();
    }
}

#[test]
fn a_logger_that_blocks_does_not_hold_up_the_end_of_a_term() {
    log::set_logger(&LOGGER).unwrap();
    log::set_max_level(log::LevelFilter::Info);
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let lock = LeaseLock::new(client(&server), NS, LEASE, "a");
    let (handle, events) = LeaderElector::builder(lock)
        .lease_duration(Duration::from_secs(4))
        .renew_deadline(Duration::from_secs(3))
        .retry_period(Duration::from_secs(1))
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    let term = loop {
        if let LeaderEvent::StartedLeading { term, .. } = events.recv_timeout(WAIT).unwrap() {
            break term;
        }
    };
    let probe = handle.probe();
    let _unstick = Unstick;

    // The stream stops draining, and the API server goes away: the next
    // failed renew is logged at warn, and the elector thread is stuck there.
    LOGGER.state.lock().unwrap().0 = true;
    server.set_outage(true);
    {
        let st = LOGGER.state.lock().unwrap();
        let (st, _) = LOGGER
            .cv
            .wait_timeout_while(st, WAIT, |st| st.2 == 0)
            .unwrap();
        assert!(st.2 > 0, "the elector thread should be stuck in the logger");
    }
    // The term's own deadline (the status would wait for the stuck
    // thread on an elector that logs with its state locked).
    let deadline = term.valid_until();
    drop(term);

    // The end of the term does not wait for it.
    let started = Instant::now();
    let event = events
        .recv_timeout(WAIT)
        .expect("StoppedLeading while the elector thread is stuck");
    assert!(
        matches!(
            event,
            LeaderEvent::StoppedLeading {
                reason: StopReason::Lost,
                ..
            }
        ),
        "{event:?}"
    );
    let late = Instant::now().saturating_duration_since(deadline);
    assert!(
        late < Duration::from_millis(500),
        "StoppedLeading {late:?} after the renew deadline (waited {:?})",
        started.elapsed()
    );
    assert!(!probe.is_leader());
    // Reading the status does not wait for the stuck thread either.
    assert!(!probe.status().leading);

    drop(_unstick);
    server.set_outage(false);
    handle.stop().unwrap();
}
