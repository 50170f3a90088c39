//! The state machine's timing rules, driven by a manual clock and an
//! in-memory lock so every decision is deterministic and fast. (The same
//! behaviour over real HTTP is covered in `elector_http.rs`.)

use lease_elector::LeaderEvents;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use lease_elector::{
    ApiStatus, Clock, Deadline, ElectorConfig, ElectorHandle, Error, LeaderElectionRecord,
    LeaderElector, LeaderEvent, Lock, ManualClock, MicroTime, Result, StatusKind,
};

const WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct Store {
    record: Option<LeaderElectionRecord>,
    version: u64,
    /// Fail every request while set.
    down: bool,
    /// Block every request while set (a hung API server).
    hang: bool,
    /// Successful writes by identity, with the clock reading at the write.
    writes: Vec<(String, Instant)>,
    /// Every record written, in order.
    history: Vec<LeaderElectionRecord>,
}

#[derive(Debug, Clone)]
struct Shared {
    store: Arc<(Mutex<Store>, Condvar)>,
    clock: ManualClock,
}

impl Shared {
    fn new(clock: ManualClock) -> Self {
        Shared {
            store: Arc::new((Mutex::new(Store::default()), Condvar::new())),
            clock,
        }
    }
    fn with<R>(&self, f: impl FnOnce(&mut Store) -> R) -> R {
        let r = f(&mut self.store.0.lock().unwrap());
        self.store.1.notify_all();
        r
    }
    /// An elector on this store, on the store's clock.
    fn spawn(&self, identity: &str, config: ElectorConfig) -> (ElectorHandle, LeaderEvents) {
        LeaderElector::builder(self.lock_for(identity))
            .config(config)
            .clock(Arc::new(self.clock.clone()))
            .build()
            .unwrap()
            .spawn()
            .unwrap()
    }

    fn lock_for(&self, identity: &str) -> FakeLock {
        FakeLock {
            shared: self.clone(),
            identity: identity.to_string(),
            seen_version: None,
        }
    }
}

#[derive(Debug)]
struct FakeLock {
    shared: Shared,
    identity: String,
    seen_version: Option<u64>,
}

fn api(code: u16, reason: &str) -> Error {
    Error::Api {
        target: "lease test/fake".into(),
        action: "test",
        status: ApiStatus::new(code, reason, ""),
    }
}

type StoreCell = Arc<(Mutex<Store>, Condvar)>;

fn enter(store: &StoreCell) -> Result<std::sync::MutexGuard<'_, Store>> {
    let (m, cv) = &**store;
    let mut st = m.lock().unwrap();
    while st.hang {
        st = cv.wait(st).unwrap();
    }
    if st.down {
        return Err(api(503, "ServiceUnavailable"));
    }
    Ok(st)
}

impl FakeLock {
    /// Store `record` if `check` (given the store and the version this lock
    /// last saw) allows it.
    fn write(
        &mut self,
        record: &LeaderElectionRecord,
        check: impl FnOnce(&Store, Option<u64>) -> Result<()>,
    ) -> Result<()> {
        let store = self.shared.store.clone();
        let mut st = enter(&store)?;
        check(&st, self.seen_version)?;
        st.record = Some(record.clone());
        st.version += 1;
        self.seen_version = Some(st.version);
        let now = self.shared.clock.now();
        st.writes.push((self.identity.clone(), now));
        st.history.push(record.clone());
        store.1.notify_all();
        Ok(())
    }
}

impl Lock for FakeLock {
    fn get(&mut self, _deadline: &Deadline) -> Result<LeaderElectionRecord> {
        let store = self.shared.store.clone();
        let st = enter(&store)?;
        let rec = st.record.clone().ok_or_else(|| api(404, "NotFound"))?;
        self.seen_version = Some(st.version);
        Ok(rec)
    }
    fn create(&mut self, record: &LeaderElectionRecord, _deadline: &Deadline) -> Result<()> {
        self.write(record, |st, _| match st.record {
            Some(_) => Err(api(409, "AlreadyExists")),
            None => Ok(()),
        })
    }
    fn update(&mut self, record: &LeaderElectionRecord, _deadline: &Deadline) -> Result<()> {
        self.write(record, |st, seen| match seen == Some(st.version) {
            true => Ok(()),
            false => Err(api(409, "Conflict")),
        })
    }
    fn identity(&self) -> &str {
        &self.identity
    }
    fn describe(&self) -> String {
        "test/fake".into()
    }
}

/// client-go's 15s / 10s / 2s; the tests below measure against these.
fn config() -> ElectorConfig {
    let c = ElectorConfig::default();
    assert_eq!(
        (c.lease_duration, c.renew_deadline, c.retry_period),
        (
            Duration::from_secs(15),
            Duration::from_secs(10),
            Duration::from_secs(2)
        )
    );
    c
}

fn next(rx: &LeaderEvents) -> LeaderEvent {
    rx.recv_timeout(WAIT).expect("an elector event")
}

fn wait_started(rx: &LeaderEvents) -> Instant {
    loop {
        match next(rx) {
            LeaderEvent::StartedLeading { at, .. } => return at,
            LeaderEvent::NewLeader { .. } => continue,
            other => panic!("expected StartedLeading, got {other:?}"),
        }
    }
}

fn wait_stopped(rx: &LeaderEvents) -> Instant {
    loop {
        match next(rx) {
            LeaderEvent::StoppedLeading { at, .. } => return at,
            LeaderEvent::NewLeader { .. } => continue,
            other => panic!("expected StoppedLeading, got {other:?}"),
        }
    }
}

#[test]
fn expiry_is_judged_by_local_observation_not_remote_renew_time() {
    let clock = ManualClock::new();
    let shared = Shared::new(clock.clone());
    // A holder whose renewTime is ancient by the wall clock: client-go (and
    // we) must still wait a full leaseDuration from when we first saw it.
    let ancient: MicroTime = "2000-01-01T00:00:00.000000Z".parse().unwrap();
    shared.with(|s| {
        s.record = Some(LeaderElectionRecord {
            holder_identity: "old".into(),
            lease_duration_seconds: 15,
            acquire_time: Some(ancient),
            renew_time: Some(ancient),
            leader_transitions: 3,
            ..Default::default()
        })
    });
    let (handle, rx) = shared.spawn("new", config());
    match next(&rx) {
        LeaderEvent::NewLeader { identity, .. } => assert_eq!(identity, "old"),
        other => panic!("{other:?}"),
    }
    let first_seen = clock.now();
    // Step time one second at a time; the candidate may only take over once
    // 15s have passed since it first observed the record.
    let taken_at = loop {
        assert!(
            clock.wait_for_sleepers(1, WAIT),
            "elector should be waiting"
        );
        clock.advance(Duration::from_secs(1));
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(LeaderEvent::NewLeader { identity, .. }) => {
                assert_eq!(identity, "new");
                break wait_started(&rx);
            }
            Ok(other) => panic!("{other:?}"),
            Err(RecvTimeoutError::Timeout) => continue,
            Err(e) => panic!("{e}"),
        }
    };
    let waited = taken_at - first_seen;
    // client-go: expired once observedTime + leaseDuration is not after now.
    assert!(
        waited >= Duration::from_secs(15),
        "took over after only {waited:?}"
    );
    assert!(
        waited <= Duration::from_secs(15) + Duration::from_millis(4400),
        "{waited:?}"
    );
    let rec = shared.with(|s| s.record.clone().unwrap());
    assert_eq!(rec.holder_identity, "new");
    assert_eq!(
        rec.leader_transitions, 4,
        "takeover increments leaseTransitions"
    );
    assert!(handle.probe().is_leader());
    drop(handle);
}

#[test]
fn leader_steps_down_within_renew_deadline_of_last_successful_renew() {
    let clock = ManualClock::auto_advancing();
    let shared = Shared::new(clock.clone());
    let (handle, rx) = shared.spawn("a", config());
    let started = wait_started(&rx);
    assert!(handle.probe().is_leader());
    shared.with(|s| s.down = true);
    let stopped = wait_stopped(&rx);
    let last_write = shared.with(|s| s.writes.last().unwrap().1);
    assert!(stopped >= started);
    // The renew that succeeded last started no later than it was written.
    let since_last = stopped - last_write;
    assert!(
        since_last <= config().renew_deadline,
        "stepped down {since_last:?} after the last renew"
    );
    assert!(since_last < config().lease_duration);
    assert!(!handle.probe().is_leader());
    // Without rejoin the elector ends and the channel disconnects.
    assert!(matches!(
        rx.recv_timeout(WAIT),
        Err(RecvTimeoutError::Disconnected)
    ));
    handle.stop().unwrap();
}

#[test]
fn is_leader_turns_false_at_the_deadline_even_if_the_thread_is_stuck() {
    let clock = ManualClock::new();
    let shared = Shared::new(clock.clone());
    let (handle, rx) = shared.spawn("a", config());
    wait_started(&rx);
    assert!(clock.wait_for_sleepers(1, WAIT));
    shared.with(|s| s.hang = true);
    clock.advance(Duration::from_secs(2)); // renew attempt starts and hangs
    assert!(handle.probe().is_leader());
    assert!(handle.probe().check(Duration::from_secs(20)).is_ok());
    clock.advance(Duration::from_secs(8)); // 10s since the last renew
    assert!(
        !handle.probe().is_leader(),
        "must not claim leadership past renewDeadline"
    );
    clock.advance(Duration::from_secs(26)); // 36s > 15s lease + 20s tolerance
    let err = handle.probe().check(Duration::from_secs(20)).unwrap_err();
    assert!(matches!(err, Error::Unhealthy { .. }), "{err}");
    assert!(err.to_string().contains("test/fake"), "{err}");
    shared.with(|s| {
        s.hang = false;
        s.down = true;
    });
    wait_stopped(&rx);
    handle.stop().unwrap();
}

#[test]
fn leader_that_sees_another_holder_steps_down_at_once() {
    let clock = ManualClock::new();
    let shared = Shared::new(clock.clone());
    let (handle, rx) = shared.spawn("a", config());
    wait_started(&rx);
    assert!(clock.wait_for_sleepers(1, WAIT));
    let t0 = clock.now();
    // Someone overwrites the lease (an operator, or a split brain elsewhere).
    shared.with(|s| {
        let rec = s.record.as_mut().unwrap();
        rec.holder_identity = "intruder".into();
        s.version += 1;
    });
    clock.advance(Duration::from_secs(2));
    // The term ends first, then the new leader is told (act first, tell after).
    let stopped = wait_stopped(&rx);
    match next(&rx) {
        LeaderEvent::NewLeader { identity, .. } => assert_eq!(identity, "intruder"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        stopped - t0,
        Duration::from_secs(2),
        "one retry period, not the deadline"
    );
    assert_eq!(handle.probe().leader().as_deref(), Some("intruder"));
    handle.stop().unwrap();
}

#[test]
fn stop_before_leading_sends_no_stopped_leading() {
    let clock = ManualClock::new();
    let shared = Shared::new(clock.clone());
    shared.with(|s| {
        s.record = Some(LeaderElectionRecord {
            holder_identity: "other".into(),
            lease_duration_seconds: 15,
            ..Default::default()
        })
    });
    let (handle, rx) = shared.spawn(
        "b",
        ElectorConfig {
            release_on_cancel: true,
            ..config()
        },
    );
    assert!(matches!(next(&rx), LeaderEvent::NewLeader { .. }));
    assert!(clock.wait_for_sleepers(1, WAIT));
    handle.stop().unwrap();
    assert!(matches!(
        rx.recv_timeout(WAIT),
        Err(RecvTimeoutError::Disconnected)
    ));
    let rec = shared.with(|s| s.record.clone().unwrap());
    assert_eq!(
        rec.holder_identity, "other",
        "a non-leader must not release"
    );
}

#[test]
fn release_on_cancel_keeps_transitions_and_lets_the_next_take_over_at_once() {
    let clock = ManualClock::new();
    let shared = Shared::new(clock.clone());
    let (a, a_rx) = shared.spawn(
        "a",
        ElectorConfig {
            release_on_cancel: true,
            ..config()
        },
    );
    wait_started(&a_rx);
    assert!(clock.wait_for_sleepers(1, WAIT));
    let (b, b_rx) = shared.spawn("b", config());
    assert!(matches!(next(&b_rx), LeaderEvent::NewLeader { identity, .. } if identity == "a"));
    assert!(clock.wait_for_sleepers(2, WAIT));
    a.stop().unwrap();
    wait_stopped(&a_rx);
    let released = shared.with(|s| s.record.clone().unwrap());
    assert_eq!(released.holder_identity, "");
    assert_eq!(released.lease_duration_seconds, 1);
    assert_eq!(released.leader_transitions, 0);
    // b retries after its jittered period (< 2.2 × 2s) and sees an empty
    // holder: no need to wait out the 15s lease.
    let t0 = clock.now();
    let started = loop {
        clock.advance(Duration::from_millis(500));
        if let Ok(ev) = b_rx.recv_timeout(Duration::from_millis(50)) {
            if matches!(ev, LeaderEvent::NewLeader { .. }) {
                break wait_started(&b_rx);
            }
        }
        assert!(
            clock.now() - t0 < Duration::from_secs(15),
            "b waited for expiry"
        );
    };
    assert!(started - t0 <= Duration::from_millis(4500));
    let rec = shared.with(|s| s.record.clone().unwrap());
    assert_eq!(rec.holder_identity, "b");
    assert_eq!(rec.leader_transitions, 1);
    b.stop().unwrap();
}

#[test]
fn renewals_keep_acquire_time_and_transitions() {
    let clock = ManualClock::auto_advancing();
    let shared = Shared::new(clock.clone());
    let (handle, rx) = shared.spawn("a", config());
    wait_started(&rx);
    // Wait (on the store's condvar, not a sleep) for a few renewals.
    {
        let (m, cv) = &*shared.store;
        let mut st = m.lock().unwrap();
        while st.writes.len() < 5 {
            st = cv.wait_timeout(st, WAIT).unwrap().0;
        }
    }
    let (first, later) = shared.with(|s| (s.history[0].clone(), s.history[4].clone()));
    assert_eq!(later.acquire_time, first.acquire_time);
    assert_eq!(later.leader_transitions, first.leader_transitions);
    assert!(later.renew_time > first.renew_time);
    assert_eq!(later.lease_duration_seconds, 15);
    handle.stop().unwrap();
    wait_stopped(&rx);
}

#[test]
fn rejoin_competes_again_after_losing() {
    let clock = ManualClock::auto_advancing();
    let shared = Shared::new(clock.clone());
    let (handle, rx) = shared.spawn(
        "a",
        ElectorConfig {
            rejoin: true,
            ..config()
        },
    );
    wait_started(&rx);
    shared.with(|s| s.down = true);
    wait_stopped(&rx);
    shared.with(|s| s.down = false);
    wait_started(&rx);
    assert!(handle.probe().is_leader());
    handle.stop().unwrap();
}

#[test]
fn status_kinds_classify_as_kubernetes_does() {
    assert_eq!(
        ApiStatus::classify(409, "AlreadyExists"),
        StatusKind::AlreadyExists
    );
    assert_eq!(ApiStatus::classify(409, "Conflict"), StatusKind::Conflict);
    assert_eq!(ApiStatus::classify(503, ""), StatusKind::ServerError);
    assert_eq!(ApiStatus::classify(429, ""), StatusKind::TooManyRequests);
    assert_eq!(ApiStatus::classify(422, "Invalid"), StatusKind::BadRequest);
}
