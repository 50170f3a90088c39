//! The step-down promise and the pacing promise under slow and failing
//! servers, on a manual clock: a scripted in-memory lock whose requests
//! "take" virtual time (advancing the clock by what a real request would
//! spend of the budget it was given), so every bound is checked exactly.
//!
//! - `StoppedLeading` comes no later than `renew_deadline` after the start
//!   of the last successful renew, whatever each request costs.
//! - One request held past the per-request cap does not cost the term.
//! - A failing server sees at most one attempt per retry period.
//! - No answer (a huge `Retry-After`) can panic the elector or park it.
//! - Two candidates sharing one identity never both lead.

mod common;

use lease_elector::LeaderEvents;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{wait_started, wait_stopped, WAIT};
use lease_elector::{
    ApiStatus, Clock, Deadline, ElectorConfig, ElectorHandle, Error, LeaderElectionRecord,
    LeaderElector, LeaderEvent, Lock, ManualClock, Result, StopReason,
};

/// What the server does with one request.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Answer {
    /// Serve it at once.
    Serve,
    /// Spend `frac` of the request's budget, then answer this status.
    SlowStatus(f64, u16),
    /// Never answer: the request spends its whole budget and times out.
    Hang,
    /// 429 at once with this `Retry-After`.
    RetryAfter(Duration),
}

#[derive(Debug, Default)]
struct Store {
    record: Option<LeaderElectionRecord>,
    version: u64,
    /// Per identity, the answers to its next requests (then `Serve`).
    script: Vec<(String, VecDeque<Answer>)>,
    /// Per identity, the answer to every request once the script is used up.
    steady: Vec<(String, Answer)>,
    /// (identity, verb, clock reading at the start, budget given).
    requests: Vec<(String, &'static str, Instant, Duration)>,
    /// (identity, clock reading) of every successful write.
    writes: Vec<(String, Instant)>,
}

#[derive(Debug, Clone)]
struct Server {
    store: Arc<Mutex<Store>>,
    clock: ManualClock,
}

impl Server {
    fn new(clock: ManualClock) -> Self {
        Server {
            store: Arc::default(),
            clock,
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Store) -> R) -> R {
        f(&mut self.store.lock().unwrap())
    }

    /// From now on, answer every request of `identity` with `answer`.
    fn steady(&self, identity: &str, answer: Answer) {
        self.with(|st| {
            st.steady.retain(|(i, _)| i != identity);
            st.steady.push((identity.into(), answer));
        });
    }

    /// Answer the next requests of `identity` with `answers`, in order.
    fn script(&self, identity: &str, answers: &[Answer]) {
        self.with(|st| {
            st.script
                .push((identity.into(), answers.iter().copied().collect()))
        });
    }

    fn spawn(&self, identity: &str, config: ElectorConfig) -> (ElectorHandle, LeaderEvents) {
        let lock = ScriptedLock {
            server: self.clone(),
            identity: identity.into(),
            seen: None,
        };
        LeaderElector::builder(lock)
            .config(config)
            .clock(Arc::new(self.clock.clone()))
            .build()
            .unwrap()
            .spawn()
            .unwrap()
    }

    fn requests_of(&self, identity: &str) -> Vec<(&'static str, Instant, Duration)> {
        self.with(|st| {
            st.requests
                .iter()
                .filter(|r| r.0 == identity)
                .map(|r| (r.1, r.2, r.3))
                .collect()
        })
    }
}

fn api(code: u16, retry_after: Option<Duration>) -> Error {
    let reason = match code {
        409 => "Conflict",
        404 => "NotFound",
        429 => "TooManyRequests",
        _ => "InternalError",
    };
    Error::Api {
        target: "lease test/scripted".into(),
        action: "test",
        status: {
            let mut status = ApiStatus::new(code, reason, "");
            status.retry_after = retry_after;
            status
        },
    }
}

fn timed_out() -> Error {
    Error::Transport {
        target: "lease test/scripted".into(),
        action: "test",
        source: "timed out".into(),
    }
}

#[derive(Debug)]
struct ScriptedLock {
    server: Server,
    identity: String,
    seen: Option<u64>,
}

impl ScriptedLock {
    /// Log the request, spend its virtual time, and say whether to serve it.
    fn enter(&self, verb: &'static str, deadline: &Deadline) -> Result<()> {
        let budget = deadline.remaining();
        let answer = self.server.with(|st| {
            let clock = &self.server.clock;
            st.requests
                .push((self.identity.clone(), verb, clock.now(), budget));
            let scripted = st
                .script
                .iter_mut()
                .find(|(i, _)| *i == self.identity)
                .and_then(|(_, q)| q.pop_front());
            scripted.unwrap_or_else(|| {
                st.steady
                    .iter()
                    .find(|(i, _)| *i == self.identity)
                    .map_or(Answer::Serve, |(_, a)| *a)
            })
        });
        // A real client honours its deadline: an answer slower than the
        // budget is a time-out at the budget.
        match answer {
            Answer::Serve => Ok(()),
            Answer::SlowStatus(frac, code) => {
                self.server.clock.advance(budget.mul_f64(frac));
                Err(api(code, None))
            }
            Answer::Hang => {
                self.server.clock.advance(budget);
                Err(timed_out())
            }
            Answer::RetryAfter(d) => Err(api(429, Some(d))),
        }
    }

    fn store(&mut self, record: &LeaderElectionRecord, create: bool) -> Result<()> {
        let now = self.server.clock.now();
        self.server.with(|st| {
            match (create, &st.record) {
                (true, Some(_)) => return Err(api(409, None)),
                (false, _) if self.seen != Some(st.version) => return Err(api(409, None)),
                _ => {}
            }
            st.record = Some(record.clone());
            st.version += 1;
            self.seen = Some(st.version);
            st.writes.push((self.identity.clone(), now));
            Ok(())
        })
    }
}

impl Lock for ScriptedLock {
    fn get(&mut self, deadline: &Deadline) -> Result<LeaderElectionRecord> {
        self.enter("get", deadline)?;
        self.server.with(|st| {
            self.seen = Some(st.version);
            st.record.clone().ok_or_else(|| api(404, None))
        })
    }
    fn create(&mut self, record: &LeaderElectionRecord, deadline: &Deadline) -> Result<()> {
        self.enter("create", deadline)?;
        self.store(record, true)
    }
    fn update(&mut self, record: &LeaderElectionRecord, deadline: &Deadline) -> Result<()> {
        self.enter("update", deadline)?;
        self.store(record, false)
    }
    fn identity(&self) -> &str {
        &self.identity
    }
    fn describe(&self) -> String {
        "test/scripted".into()
    }
}

/// client-go's 15s / 10s / 2s (request cap 5 s).
fn config() -> ElectorConfig {
    ElectorConfig::default()
}

/// Lead, then let `fault` answer every later request; the lateness of
/// `StoppedLeading` past `last successful renew + renew_deadline`.
fn lateness_under(answer: Answer) -> Duration {
    let clock = ManualClock::auto_advancing();
    let server = Server::new(clock.clone());
    let (handle, rx) = server.spawn("a", config());
    wait_started(&rx);
    server.steady("a", answer);
    let (at, reason) = wait_stopped(&rx);
    assert_eq!(reason, StopReason::Lost);
    let last = handle.probe().last_renew().expect("it led");
    at.saturating_duration_since(last + config().renew_deadline)
}

#[test]
fn slow_errors_just_under_each_budget_never_stretch_the_round() {
    // Each request answers 500 just before its budget runs out; the round
    // has up to three requests (PUT, GET, PUT) and retries. Before budgets
    // were one deadline, each request got the whole round: 2x late.
    for answer in [
        Answer::SlowStatus(0.99, 500),
        Answer::SlowStatus(0.99, 409),
        Answer::SlowStatus(0.5, 500),
        Answer::Hang,
    ] {
        let late = lateness_under(answer);
        assert!(
            late <= Duration::from_millis(5),
            "{answer:?}: StoppedLeading {late:?} after the renew deadline"
        );
    }
}

#[test]
fn every_request_of_a_round_gets_the_cap_and_never_more_than_is_left() {
    let clock = ManualClock::auto_advancing();
    let server = Server::new(clock.clone());
    let (handle, rx) = server.spawn("a", config());
    wait_started(&rx);
    server.steady("a", Answer::SlowStatus(0.99, 500));
    let (stopped, _) = wait_stopped(&rx);
    let last = handle.probe().last_renew().unwrap();
    let round_end = last + config().renew_deadline;
    let cap = config().request_cap();
    assert_eq!(cap, Duration::from_secs(5));
    for (verb, at, budget) in server.requests_of("a") {
        assert!(budget <= cap, "{verb} at {at:?} got {budget:?}");
        if at >= last && at < stopped {
            assert!(
                at + budget <= round_end,
                "{verb} got {budget:?}, past the round's end"
            );
        }
    }
}

#[test]
fn one_request_held_past_the_cap_does_not_cost_the_term() {
    let clock = ManualClock::auto_advancing();
    let server = Server::new(clock.clone());
    let (handle, rx) = server.spawn("a", config());
    wait_started(&rx);
    // The next renew's request is held far longer than the cap; the rest
    // are answered at once.
    let before = server.requests_of("a").len();
    server.script("a", &[Answer::Hang]);
    // Wait (in virtual time) well past one renew deadline.
    let t0 = clock.now();
    while clock.now() < t0 + Duration::from_secs(30) {
        assert!(
            rx.try_recv()
                .map_or(true, |e| !matches!(e, LeaderEvent::StoppedLeading { .. })),
            "one held request cost the term"
        );
        std::thread::yield_now();
    }
    assert!(handle.probe().is_leader() || !handle.is_finished());
    let reqs = server.requests_of("a");
    let (held_verb, held_at, held_budget) = reqs[before];
    assert_eq!(held_budget, config().request_cap(), "{held_verb}");
    // The attempt after the abandoned one goes out within one retry period
    // of its end, and succeeds.
    let (_, next_at, _) = reqs[before + 1];
    let gap = next_at.saturating_duration_since(held_at + held_budget);
    assert!(
        gap <= config().retry_period,
        "retry came {gap:?} after the abandoned request"
    );
    let writes = server.with(|st| st.writes.iter().filter(|w| w.1 >= next_at).count());
    assert!(writes >= 1);
    drop(handle);
}

#[test]
fn a_failing_server_gets_one_attempt_per_retry_period_after_the_lease_expired() {
    let clock = ManualClock::auto_advancing();
    let server = Server::new(clock.clone());
    // A holder that stopped renewing: its lease expires 15 s after we see it.
    server.with(|st| {
        st.record = Some(LeaderElectionRecord {
            holder_identity: "gone".into(),
            lease_duration_seconds: 15,
            ..LeaderElectionRecord::default()
        });
        st.version = 1;
    });
    // The first attempt sees the holder; every later one fails at once.
    server.script("b", &[Answer::Serve]);
    server.steady("b", Answer::SlowStatus(0.0, 503));
    let t0 = clock.now();
    let (handle, _rx) = server.spawn("b", config());
    while clock.now() < t0 + Duration::from_secs(120) {
        assert!(!handle.is_finished());
        std::thread::yield_now();
    }
    drop(handle);
    let reqs = server.requests_of("b");
    let in_window = reqs
        .iter()
        .filter(|r| r.1 >= t0 && r.1 < t0 + Duration::from_secs(120))
        .count();
    // At least one retry period (2 s) between attempts: at most 61 in 120 s.
    assert!(
        in_window <= 61,
        "{in_window} attempts in 120 s of a failing server (one per retry period is 60)"
    );
    for pair in reqs.windows(2).filter(|p| p[0].1 >= t0) {
        let gap = pair[1].1 - pair[0].1;
        assert!(
            gap >= config().retry_period,
            "attempts {gap:?} apart during an outage"
        );
    }
}

#[test]
fn a_huge_retry_after_neither_panics_nor_parks_the_candidate() {
    for retry_after in [
        Duration::MAX,
        Duration::from_secs(u64::MAX / 2),
        Duration::from_secs(86_400),
    ] {
        let clock = ManualClock::auto_advancing();
        let server = Server::new(clock.clone());
        server.script("a", &[Answer::RetryAfter(retry_after)]);
        let t0 = clock.now();
        let (handle, rx) = server.spawn("a", config());
        let started = wait_started(&rx);
        assert!(!handle.is_finished());
        let waited = started - t0;
        assert!(
            waited <= lease_elector::client::MAX_RETRY_AFTER + Duration::from_secs(1),
            "Retry-After {retry_after:?} parked the candidate for {waited:?}"
        );
        handle.stop().unwrap();
    }
}

#[test]
fn two_candidates_with_one_identity_never_both_lead() {
    let clock = ManualClock::new();
    let server = Server::new(clock.clone());
    let (a, a_rx) = server.spawn("same", config());
    wait_started(&a_rx);
    assert!(clock.wait_for_sleepers(1, WAIT));
    let (b, b_rx) = server.spawn("same", config());
    assert!(clock.wait_for_sleepers(2, WAIT));
    for _ in 0..40 {
        clock.advance(Duration::from_millis(500));
        assert!(clock.wait_for_sleepers(2, WAIT));
        assert!(
            !(a.probe().is_leader() && b.probe().is_leader()),
            "two leaders"
        );
        assert!(
            !b_rx
                .try_iter()
                .any(|e| matches!(e, LeaderEvent::StartedLeading { .. })),
            "the second process with the same identity started leading"
        );
    }
    assert!(a.probe().is_leader());
    assert!(b.probe().duplicate_identity(), "the duplicate is reported");
    // Once the first stops renewing (a crash), the second takes over after
    // one lease duration, like from any other holder.
    a.stop().unwrap();
    let last_write_of_a = server.with(|st| st.writes.last().unwrap().1);
    let writes_of_a = server.with(|st| st.writes.len());
    while !b.probe().is_leader() {
        clock.advance(Duration::from_millis(500));
        assert!(
            clock.elapsed() < Duration::from_secs(600),
            "never took over"
        );
        clock.wait_for_sleepers(1, Duration::from_millis(200));
    }
    let first_write_of_b = server.with(|st| st.writes[writes_of_a].1);
    assert!(first_write_of_b >= last_write_of_a + config().lease_duration);
    drop(b);
}

#[test]
fn a_restart_with_the_same_identity_takes_over_at_once_after_a_release() {
    for release in [true, false] {
        let clock = ManualClock::new();
        let server = Server::new(clock.clone());
        let cfg = ElectorConfig {
            release_on_cancel: release,
            ..config()
        };
        let (a, a_rx) = server.spawn("pod-0", cfg.clone());
        wait_started(&a_rx);
        a.stop().unwrap();
        let t = clock.now();
        let (b, b_rx) = server.spawn("pod-0", cfg);
        loop {
            if b_rx
                .try_iter()
                .any(|e| matches!(e, LeaderEvent::StartedLeading { .. }))
            {
                break;
            }
            clock.wait_for_sleepers(1, Duration::from_millis(200));
            clock.advance(Duration::from_millis(500));
            assert!(
                clock.now() - t < Duration::from_secs(600),
                "never took over"
            );
        }
        let waited = clock.now() - t;
        if release {
            assert!(
                waited < config().retry_period * 3,
                "released, yet waited {waited:?}"
            );
        } else {
            assert!(
                waited >= config().lease_duration,
                "took over after {waited:?}"
            );
        }
        assert!(!b.probe().duplicate_identity());
        drop(b);
    }
}

#[test]
fn check_reports_a_process_still_running_after_its_term_was_lost() {
    let clock = ManualClock::auto_advancing();
    let server = Server::new(clock.clone());
    let (handle, rx) = server.spawn("a", config());
    wait_started(&rx);
    assert!(handle.probe().check(Duration::from_secs(20)).is_ok());
    server.steady("a", Answer::Hang);
    let (lost_at, reason) = wait_stopped(&rx);
    assert_eq!(reason, StopReason::Lost);
    assert!(
        handle.probe().check(Duration::from_secs(20)).is_ok(),
        "within the tolerance"
    );
    clock.advance(Duration::from_secs(21));
    let err = handle.probe().check(Duration::from_secs(20)).unwrap_err();
    assert!(err.to_string().contains("lost"), "{err}");
    assert!(clock.now() > lost_at);
}
