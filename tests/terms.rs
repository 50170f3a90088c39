//! Terms and fencing tokens over real HTTP: every term's token is the
//! `resourceVersion` of the write that began it, grows with every term,
//! never changes during a term, and a term is never current past its
//! deadline, also when the elector's thread wakes from a freeze;
//! `leaseTransitions` counts the takeovers, as client-go counts them.

mod common;

use std::time::Duration;

use common::*;
use lease_elector::testing::Fault;
use lease_elector::{Clock, ElectorConfig, StopReason, Term};

const STEP: Duration = Duration::from_millis(500);
const SECOND: Duration = Duration::from_secs(1);

/// The term of the candidate's last `StartedLeading`.
fn last_term(c: &Candidate) -> Term {
    c.terms.last().cloned().expect("a StartedLeading")
}

fn stored_transitions(c: &Cluster) -> u64 {
    c.lease_spec()["leaseTransitions"].as_u64().unwrap_or(0)
}

/// The Lease's resourceVersion now.
fn stored_version(c: &Cluster) -> u64 {
    c.server.lease_value(NS, LEASE).expect("lease exists")["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .expect("a resourceVersion")
}

fn no_release() -> ElectorConfig {
    ElectorConfig {
        release_on_cancel: false,
        ..timings()
    }
}

/// A new candidate `who` waits for the lease and takes it over; its token
/// is greater than every earlier one, no later than the Lease's version,
/// and `leaseTransitions` counts one more takeover.
fn take_over(c: &mut Cluster, tokens: &mut Vec<u64>, who: &str) -> usize {
    let i = c.add(who, timings());
    c.step_until(STEP, SECOND * 40, |c| c.candidates[i].started() == 1);
    let term = last_term(&c.candidates[i]);
    let before = *tokens.last().expect("a first term");
    assert!(
        term.token() > before,
        "{who}'s token {} after {tokens:?}",
        term.token()
    );
    assert!(term.token() <= stored_version(c));
    assert_eq!(stored_transitions(c), tokens.len() as u64);
    tokens.push(term.token());
    i
}

#[test]
fn tokens_are_the_resource_versions_that_began_the_terms_and_grow_with_every_term() {
    let mut c = Cluster::new();
    let a = c.add("a", timings());
    c.step_until(STEP, SECOND * 5, |c| c.candidates[a].started() == 1);
    let first = last_term(&c.candidates[a]);
    let created = stored_version(&c);
    assert!(first.token() > 0 && first.token() <= created);
    assert_eq!(stored_transitions(&c), 0, "the creating term writes 0");
    assert_eq!((first.identity(), first.lease()), ("a", "test/the-lease"));
    assert_eq!(c.candidates[a].handle().probe().term(), Some(first.clone()));
    // Renews never change the token, though they move the version.
    let token = first.token();
    for _ in 0..5 {
        c.step(Duration::from_secs(2));
    }
    assert!(first.is_current());
    assert_eq!(first.token(), token);
    assert!(stored_version(&c) > created, "renewed");
    assert_eq!(stored_transitions(&c), 0);
    assert_eq!(
        c.candidates[a].handle().probe().status().term_token,
        Some(token)
    );

    let mut tokens = vec![first.token()];

    // A release: b takes over at once.
    let b_waiting = c.add("b", no_release());
    c.step(STEP);
    c.candidates[a].handle().stopper().stop();
    assert!(!first.is_current(), "a stopped term is over for good");
    // The work lets go of its term; only then is the lease released.
    let first_token = first.token();
    drop(first);
    c.stop(a);
    c.step_until(STEP, SECOND * 10, |c| {
        c.candidates[b_waiting].started() == 1
    });
    let b = last_term(&c.candidates[b_waiting]);
    assert!(b.token() > first_token);
    assert_eq!(stored_transitions(&c), 1);
    tokens.push(b.token());

    // A crash (b stops without releasing): the lease expires, c takes over.
    c.stop(b_waiting);
    assert!(!b.is_current());
    let ci = take_over(&mut c, &mut tokens, "c");
    // The same identity coming back after another holder: a new token.
    c.stop(ci);
    take_over(&mut c, &mut tokens, "a");
    assert_eq!(tokens.len(), 4);
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

#[test]
fn a_new_term_on_our_own_earlier_record_takes_a_new_token() {
    let mut c = Cluster::new();
    let a = c.add(
        "a",
        ElectorConfig {
            rejoin: true,
            ..timings()
        },
    );
    c.step_until(STEP, SECOND * 5, |c| c.candidates[a].started() == 1);
    let first = last_term(&c.candidates[a]);
    let first_token = first.token();
    // Its work holds no term (with `rejoin`, the next term is sought only
    // once the work of the last has let go).
    c.candidates[a].terms.clear();
    // An outage longer than the renew deadline: the term is lost, nobody
    // else takes over, and a rejoins on the record it wrote itself.
    c.server.set_outage(true);
    drop(first);
    c.step_until(STEP, SECOND * 15, |c| c.candidates[a].stopped() == 1);
    assert!(c.candidates[a].handle().probe().term().is_none());
    c.candidates[a].terms.clear();
    c.server.set_outage(false);
    c.step_until(STEP, SECOND * 30, |c| c.candidates[a].started() == 2);
    let second = last_term(&c.candidates[a]);
    assert!(second.token() > first_token);
    assert_eq!(
        stored_transitions(&c),
        1,
        "a new term on our own record counts"
    );
    let loss = c.candidates[a].handle().probe().status().last_loss;
    assert!(
        loss.as_deref()
            .is_some_and(|l| l.contains("renew deadline") && l.contains("10s")),
        "{loss:?}"
    );
}

#[test]
fn a_thread_woken_past_its_deadline_steps_down_before_any_request() {
    let mut c = Cluster::new();
    let a = c.add("a", timings());
    c.step_until(STEP, SECOND * 5, |c| c.candidates[a].started() == 1);
    let term = last_term(&c.candidates[a]);
    c.step(Duration::from_secs(2));
    let valid_until = term.valid_until();
    c.settle();
    c.server.reset_stats();
    // The whole process froze for longer than the renew deadline: the
    // clock jumps while the thread sleeps.
    c.clock.advance(Duration::from_secs(11));
    // Current no more, before the elector thread has even run.
    assert!(c.clock.now() > valid_until);
    assert!(!term.is_current());
    assert!(!c.candidates[a].handle().probe().is_leader());
    let (_, reason) = wait_stopped(&c.candidates[a].events);
    assert_eq!(reason, StopReason::Lost);
    assert!(term.wait_ended(Duration::ZERO));
    c.settle();
    // No renew was sent: the only requests are the reads that watch over
    // the run-out term while its work (this test) still holds it (issue 44).
    let sent = c.server.requests();
    assert!(
        sent.iter().all(|r| r.method == "GET"),
        "no write after waking past the deadline: {sent:?}"
    );
}

#[test]
fn a_renew_that_lands_after_a_freeze_does_not_revive_the_term() {
    let mut c = Cluster::new();
    let a = c.add("a", timings());
    c.step_until(STEP, SECOND * 5, |c| c.candidates[a].started() == 1);
    let term = last_term(&c.candidates[a]);
    // The next renew hangs on the server: the thread is blocked inside it
    // while the clock jumps past the deadline, then the answer comes.
    c.server
        .inject(Fault::latency(Duration::from_millis(500)).method("PUT"));
    c.settle();
    c.server.reset_stats();
    c.clock.advance(Duration::from_secs(2));
    eventually("the renew in flight", || c.server.stats().faults_fired == 1);
    c.clock.advance(Duration::from_secs(12));
    assert!(!term.is_current());
    let (_, reason) = wait_stopped(&c.candidates[a].events);
    assert_eq!(reason, StopReason::Lost);
    assert!(
        !term.is_current(),
        "latched: the landed renew changes nothing"
    );
    assert!(!c.candidates[a].handle().probe().is_leader());
    c.settle();
    let stats = c.server.stats();
    assert_eq!(
        (stats.updates, stats.requests),
        (1, 1),
        "the renew landed: {stats:?}"
    );
}

#[test]
fn wait_ended_blocks_until_the_term_ends() {
    let mut c = Cluster::new();
    let a = c.add("a", timings());
    c.step_until(STEP, SECOND * 5, |c| c.candidates[a].started() == 1);
    let term = last_term(&c.candidates[a]);
    assert!(!term.wait_ended(Duration::from_millis(20)));
    let waiter = {
        let term = term.clone();
        std::thread::spawn(move || term.wait_ended(WAIT))
    };
    let stopper = c.candidates[a].handle().stopper();
    stopper.stop();
    assert!(stopper.is_stopped());
    assert!(waiter.join().unwrap(), "woken by the stop");
    assert!(!term.is_current());
}

#[test]
fn an_acquire_timeout_ends_the_elector_between_attempts_without_a_write() {
    let mut c = Cluster::new();
    let a = c.add("a", timings());
    c.step_until(STEP, SECOND * 5, |c| c.candidates[a].started() == 1);
    let with_timeout = |t| ElectorConfig {
        acquire_timeout: Some(t),
        ..timings()
    };
    let once = c.add("once", with_timeout(Duration::ZERO));
    let five = c.add("five", with_timeout(SECOND * 5));
    c.settle();
    assert!(c.candidates[once].handle().is_finished(), "0: one attempt");
    assert_eq!(c.candidates[once].handle().probe().status().attempts, 1);
    let took = c.step_until(STEP, SECOND * 10, |c| {
        c.candidates[five].handle().is_finished()
    });
    assert!(took >= SECOND * 5, "gave up after {took:?}");
    assert!(c.candidates[five].handle().probe().status().attempts >= 2);
    for i in [once, five] {
        let cand = &mut c.candidates[i];
        cand.drain();
        assert_eq!(cand.started(), 0);
        assert!(cand.events.recv_timeout(WAIT).is_err(), "disconnected");
    }
    // Nobody but a wrote: the Lease is a's first term's, renewed.
    assert_eq!((c.holder(), stored_transitions(&c)), ("a".to_string(), 0));
}
