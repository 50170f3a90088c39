//! Harness: electors over real HTTP against the embedded API server, all on
//! one manual clock that the test steps in lockstep with them.

#![allow(dead_code)]

use lease_elector::LeaderEvents;
use std::sync::Arc;
use std::time::Duration;

use lease_elector::testing::TestApiServer;
use lease_elector::{
    Client, ClientConfig, ElectorConfig, ElectorHandle, LeaderElector, LeaderEvent, LeaseLock,
    ManualClock,
};

pub mod api;
pub mod health_program;
pub mod logs;
pub mod manifests;
pub mod oracle;
pub mod overlap;
pub mod procs;
pub mod recorder;
pub mod spawned;
pub mod tempdir;

pub const NS: &str = "test";

/// The stored JSON, for tests that look at what the typed API does not
/// show (the wire format, hostile values) or seed such values.
pub trait RawLeases {
    fn lease_value(&self, ns: &str, name: &str) -> Option<serde_json::Value>;
    fn put_value(&self, ns: &str, lease: serde_json::Value);
    fn event_values(&self) -> Vec<serde_json::Value>;
}

impl RawLeases for TestApiServer {
    fn lease_value(&self, ns: &str, name: &str) -> Option<serde_json::Value> {
        self.lease_json(ns, name)
            .map(|text| serde_json::from_str(&text).unwrap())
    }

    fn put_value(&self, ns: &str, lease: serde_json::Value) {
        self.put_lease_json(ns, &lease.to_string());
    }

    fn event_values(&self) -> Vec<serde_json::Value> {
        self.events_json()
            .iter()
            .map(|text| serde_json::from_str(text).unwrap())
            .collect()
    }
}
pub const LEASE: &str = "the-lease";
/// Real time allowed for anything to happen; only reached on failure.
pub const WAIT: Duration = Duration::from_secs(20);

pub fn timings() -> ElectorConfig {
    ElectorConfig {
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
        release_on_cancel: true,
        rejoin: false,
        watch: false,
        ..ElectorConfig::default()
    }
}

/// A test server with the tests' namespace.
pub fn server_with_namespace() -> TestApiServer {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    server
}

/// Candidate `id` at lease 4 s, renew deadline 3 s, retry period 1 s,
/// releasing on stop.
pub fn short_elector(server: &TestApiServer, id: &str) -> lease_elector::ElectorBuilder {
    lease_elector::LeaderElector::builder(lease_elector::LeaseLock::new(
        client(server),
        NS,
        LEASE,
        id,
    ))
    .lease_duration(Duration::from_secs(4))
    .renew_deadline(Duration::from_secs(3))
    .retry_period(Duration::from_secs(1))
    .release_on_cancel(true)
}

pub fn client(server: &TestApiServer) -> Client {
    Client::new(ClientConfig::new(server.url()).timeout(Duration::from_secs(5))).unwrap()
}

pub struct Candidate {
    pub id: String,
    /// The terms it started, newest last: dropped before the handle, and
    /// by `forget_terms` (a release on stop waits for the program to let
    /// go of its term).
    pub terms: Vec<lease_elector::Term>,
    pub handle: Option<ElectorHandle>,
    pub events: LeaderEvents,
    pub log: Vec<Seen>,
}

/// An event as a candidate's program saw it, without the term it may have
/// carried: a test that keeps its events must not hold the term (a
/// release on stop waits for every `Term` the program holds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    Started {
        at: std::time::Instant,
        token: u64,
    },
    Stopped {
        at: std::time::Instant,
        reason: lease_elector::StopReason,
    },
    NewLeader {
        identity: String,
        at: std::time::Instant,
    },
}

impl From<LeaderEvent> for Seen {
    fn from(e: LeaderEvent) -> Seen {
        match e {
            LeaderEvent::StartedLeading { at, term } => Seen::Started {
                at,
                token: term.token(),
            },
            LeaderEvent::StoppedLeading { at, reason } => Seen::Stopped { at, reason },
            LeaderEvent::NewLeader { identity, at } => Seen::NewLeader { identity, at },
            other => panic!("an event the tests do not know: {other:?}"),
        }
    }
}

impl Candidate {
    pub fn handle(&self) -> &ElectorHandle {
        self.handle.as_ref().expect("candidate running")
    }

    /// Move every event already sent into `log`; returns how many arrived.
    pub fn drain(&mut self) -> usize {
        let before = self.log.len();
        while let Ok(ev) = self.events.try_recv() {
            if let LeaderEvent::StartedLeading { term, .. } = &ev {
                self.terms.push(term.clone());
            }
            self.log.push(ev.into());
        }
        self.log.len() - before
    }

    pub fn started(&self) -> usize {
        self.log
            .iter()
            .filter(|e| matches!(e, Seen::Started { .. }))
            .count()
    }

    pub fn stopped(&self) -> usize {
        self.log
            .iter()
            .filter(|e| matches!(e, Seen::Stopped { .. }))
            .count()
    }
}

pub struct Cluster {
    pub server: TestApiServer,
    pub clock: ManualClock,
    pub candidates: Vec<Candidate>,
}

impl Cluster {
    pub fn new() -> Self {
        Self::with_server(TestApiServer::start().unwrap())
    }

    /// A cluster on `server`, with the namespace [`NS`] its candidates use.
    pub fn with_server(server: TestApiServer) -> Self {
        server.add_namespace(NS);
        Cluster {
            server,
            clock: ManualClock::new(),
            candidates: Vec::new(),
        }
    }

    pub fn add(&mut self, id: &str, config: ElectorConfig) -> usize {
        let lock = LeaseLock::new(client(&self.server), NS, LEASE, id);
        self.add_lock(id, lock, config)
    }

    pub fn add_lock(&mut self, id: &str, lock: LeaseLock, config: ElectorConfig) -> usize {
        let (handle, events) = LeaderElector::builder(lock)
            .config(config)
            .clock(Arc::new(self.clock.clone()))
            .build()
            .unwrap()
            .spawn()
            .unwrap();
        self.candidates.push(Candidate {
            id: id.to_string(),
            terms: Vec::new(),
            handle: Some(handle),
            events,
            log: Vec::new(),
        });
        self.candidates.len() - 1
    }

    fn running(&self) -> usize {
        self.candidates
            .iter()
            .filter(|c| c.handle.as_ref().is_some_and(|h| !h.is_finished()))
            .count()
    }

    /// Wait until every running elector sleeps on the clock (an elector
    /// that ends meanwhile stops counting).
    pub fn settle(&self) {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let n = self.running();
            if self.clock.wait_for_sleepers(n, Duration::from_millis(20)) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{n} electors should be waiting on the clock, {} are",
                self.clock.sleepers()
            );
        }
    }

    /// Let every elector act on the current time, then move the clock.
    pub fn step(&mut self, d: Duration) {
        self.settle();
        self.clock.advance(d);
        self.settle();
        for c in &mut self.candidates {
            c.drain();
        }
    }

    /// Step `d` at a time until `pred` holds; panics after `limit` of clock time.
    pub fn step_until(
        &mut self,
        d: Duration,
        limit: Duration,
        mut pred: impl FnMut(&Cluster) -> bool,
    ) -> Duration {
        let start = self.clock.elapsed();
        loop {
            for c in &mut self.candidates {
                c.drain();
            }
            if pred(self) {
                return self.clock.elapsed() - start;
            }
            assert!(
                self.clock.elapsed() - start <= limit,
                "condition not met within {limit:?} of clock time"
            );
            self.step(d);
        }
    }

    pub fn leaders(&self) -> Vec<&str> {
        self.candidates
            .iter()
            .filter(|c| c.handle.as_ref().is_some_and(|h| h.probe().is_leader()))
            .map(|c| c.id.as_str())
            .collect()
    }

    pub fn lease_spec(&self) -> serde_json::Value {
        self.server.lease_value(NS, LEASE).expect("lease exists")["spec"].clone()
    }

    pub fn holder(&self) -> String {
        self.server.holder(NS, LEASE).unwrap_or_default()
    }

    /// Stop candidate `i` as its program would: its work lets go of the
    /// term, then the elector stops (and releases).
    pub fn stop(&mut self, i: usize) {
        self.candidates[i].terms.clear();
        let h = self.candidates[i].handle.take().expect("running");
        h.stop().unwrap();
        self.candidates[i].drain();
    }

    pub fn index(&self, id: &str) -> usize {
        self.candidates
            .iter()
            .position(|c| c.id == id)
            .expect("known id")
    }
}

/// Wait for `StartedLeading` (skipping `NewLeader`); its `at`.
pub fn wait_started(rx: &LeaderEvents) -> std::time::Instant {
    loop {
        match rx.recv_timeout(WAIT).expect("an elector event") {
            LeaderEvent::StartedLeading { at, .. } => return at,
            LeaderEvent::NewLeader { .. } => continue,
            other => panic!("expected StartedLeading, got {other:?}"),
        }
    }
}

/// Wait for `StoppedLeading` (skipping `NewLeader`); its `at` and reason.
pub fn wait_stopped(rx: &LeaderEvents) -> (std::time::Instant, lease_elector::StopReason) {
    loop {
        match rx.recv_timeout(WAIT).expect("an elector event") {
            LeaderEvent::StoppedLeading { at, reason } => return (at, reason),
            LeaderEvent::NewLeader { .. } => continue,
            other => panic!("expected StoppedLeading, got {other:?}"),
        }
    }
}

/// Poll a condition that has no event to wait on; panics after [`WAIT`]
/// (only reached on failure).
pub fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + WAIT;
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The built example `name` (`cargo test` builds the examples next to the
/// test executables: target/<profile>/deps/<test>-<hash> →
/// target/<profile>/examples/<name>).
pub fn example(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    assert!(
        bin.exists(),
        "{} missing: run via `cargo test`",
        bin.display()
    );
    bin
}
