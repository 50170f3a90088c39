//! The decision code, run on a bench: the elector's state machine (`Run`)
//! against an in-memory Lease and a manual clock, every call answered at
//! once and logged with its time, faults scripted call by call. Fast and
//! exact: the tests below pin what the seeded simulation judges only in
//! aggregate (the pauses between attempts, the counters, what a release
//! writes) or cannot reach.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::io::{block_on, Io, Read, Reader, Written};
use super::run::Run;
use super::shared::Shared;
use super::term::TermEnd;
use super::term::{LetGo, Term};
use super::{ElectorConfig, LeaderEvent, Probe};
use crate::clock::{Clock, ManualClock, Wake, Wakeup};
use crate::deadline::Deadline;
use crate::error::{ApiStatus, Error, Result};
use crate::lease::{LeaderElectionRecord, MicroTime};

/// What the bench saw the elector do.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Call {
    Get,
    Create(LeaderElectionRecord),
    Update(LeaderElectionRecord),
    Sleep(Duration),
}

/// The Lease, as the bench's server stores it.
#[derive(Debug, Clone)]
pub(super) struct Stored {
    pub(super) record: LeaderElectionRecord,
    pub(super) version: u64,
    pub(super) uid: u64,
}

/// What the bench's server holds and saw.
#[derive(Debug, Default)]
pub(super) struct Server {
    pub(super) lease: Option<Stored>,
    pub(super) revision: u64,
    uid: u64,
    /// Every call, with its time since the bench began.
    pub(super) log: Vec<(Duration, Call)>,
    /// Answers to give instead of the store's, in order (`None`: the
    /// store's own).
    pub(super) script: VecDeque<Option<Error>>,
    /// Updates create a missing Lease (no uid precondition).
    pub(super) create_on_update: bool,
    /// The answer of the next write is lost after it applied.
    pub(super) lose_next_answer: bool,
    /// What another writer does, and when (time since the bench began).
    pub(super) later: VecDeque<(Duration, Later)>,
    /// The next write's answer comes this long after it was sent.
    pub(super) slow_next_write: Option<Duration>,
    /// See [`Later::StallInNextRead`].
    pub(super) stall_next_read: Option<Duration>,
    /// What the waits for the work answer, in order, before `Lab::let_go`.
    pub(super) let_go: VecDeque<LetGo>,
    /// The elector is stopped (as `stop()` does, from another thread)
    /// while the next write is on its way; the write lands.
    pub(super) stop_in_next_write: bool,
    /// A watch delivered the stored Lease, and the lock holds it: the next
    /// read is answered from it, with no request.
    pub(super) delivered: bool,
    /// The versions the lock reports: decimal (the store's revision, as
    /// the API server's), opaque (not a decimal integer), or none.
    pub(super) versions: Versions,
}

/// See [`Server::versions`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum Versions {
    #[default]
    Decimal,
    Opaque,
    None,
}

impl Versions {
    fn of(self, revision: u64) -> Option<String> {
        match self {
            Versions::Decimal => Some(revision.to_string()),
            Versions::Opaque => Some(format!("v{revision}")),
            Versions::None => None,
        }
    }
}

/// What another writer does to the Lease.
#[derive(Debug, Clone)]
pub(super) enum Later {
    Put(LeaderElectionRecord),
    Delete,
    LoseNextAnswer,
    /// The next write's answer comes this long after it was sent.
    SlowNextWrite(Duration),
    /// The next write is answered, the elector stopped meanwhile.
    StopInNextWrite,
    /// The elector's thread stalls this long in its next read (the answer
    /// is in, the thread does not run); meanwhile the caller's thread
    /// ends the term if its deadline passed, as `LeaderEvents` does.
    StallInNextRead(Duration),
    /// A watch event: the elector's sleep ends, poked.
    Poke,
    /// Another writer stores this record, and the watch delivers it: the
    /// lock holds it for the next read, and the elector's sleep ends,
    /// poked.
    Deliver(LeaderElectionRecord),
}

impl Server {
    /// Store `record` as another writer would.
    pub(super) fn put(&mut self, record: LeaderElectionRecord) {
        self.revision += 1;
        if self.lease.is_none() {
            self.uid += 1;
        }
        self.lease = Some(Stored {
            record,
            version: self.revision,
            uid: self.uid,
        });
    }

    pub(super) fn delete(&mut self) {
        self.revision += 1;
        self.lease = None;
    }

    /// The calls of one kind, with their times.
    pub(super) fn calls(&self, kind: fn(&Call) -> bool) -> Vec<(Duration, Call)> {
        self.log.iter().filter(|(_, c)| kind(c)).cloned().collect()
    }
}

pub(super) fn api(code: u16, reason: &str) -> Error {
    Error::Api {
        target: "lease lab/lease".into(),
        action: "test",
        status: ApiStatus::new(code, reason, ""),
    }
}

pub(super) fn transport() -> Error {
    Error::Transport {
        target: "lease lab/lease".into(),
        action: "test",
        source: "no answer".into(),
    }
}

/// The elector's lock and clock on the bench.
pub(super) struct LabIo {
    server: Rc<RefCell<Server>>,
    clock: ManualClock,
    origin: Instant,
    identity: String,
    /// The Lease as last read or written (the version an update is
    /// conditional on).
    seen: Option<(u64, u64)>,
    /// The bench stops the elector once its clock reaches this.
    stop_at: Instant,
    /// What a wait for the work answers.
    let_go: LetGo,
    /// The last read was answered from a delivery: no request.
    read_local: bool,
    /// The elector's state, as the thread that stops it has it.
    shared: Arc<Shared>,
}

impl LabIo {
    fn now(&self) -> Duration {
        self.clock.now().saturating_duration_since(self.origin)
    }

    fn log(&self, call: Call) {
        let at = self.now();
        let mut server = self.server.borrow_mut();
        // An elector that calls without its clock moving, over and over,
        // spins: a failure, not a hung test.
        let spinning = server.log.len() > 100_000;
        server.log.push((at, call));
        drop(server);
        assert!(!spinning, "the elector spins: 100,000 calls to its lock");
    }

    fn scripted(&self) -> Option<Error> {
        self.server.borrow_mut().script.pop_front().flatten()
    }

    fn write(&mut self, record: &LeaderElectionRecord, create: bool) -> Result<Written> {
        let mut server = self.server.borrow_mut();
        match (&server.lease, create) {
            (Some(_), true) => return Err(api(409, "AlreadyExists")),
            (None, false) if !server.create_on_update => return Err(api(404, "NotFound")),
            (Some(s), false) if Some(s.version) != self.seen.map(|(v, _)| v) => {
                return Err(api(409, "Conflict"))
            }
            _ => {}
        }
        let recreated = !create && server.lease.is_none();
        if let Some(d) = server.slow_next_write.take() {
            self.clock.advance(d);
        }
        server.put(record.clone());
        let stored = server.lease.clone().expect("just stored");
        let lost = std::mem::take(&mut server.lose_next_answer);
        let versions = server.versions;
        let stop = std::mem::take(&mut server.stop_in_next_write);
        drop(server);
        if stop {
            self.shared.request_stop();
        }
        if lost {
            return Err(transport());
        }
        self.seen = Some((stored.version, stored.uid));
        Ok(Written {
            version: versions.of(stored.version),
            recreated,
        })
    }
}

impl Io for LabIo {
    async fn get(&mut self, _deadline: &Deadline, _reader: Reader) -> Result<Read> {
        self.log(Call::Get);
        let local = std::mem::take(&mut self.server.borrow_mut().delivered);
        self.read_local = local;
        if let Some(e) = self.scripted().filter(|_| !local) {
            return Err(e);
        }
        let (lease, stall, versions) = {
            let mut server = self.server.borrow_mut();
            (
                server.lease.clone(),
                server.stall_next_read.take(),
                server.versions,
            )
        };
        if let Some(d) = stall {
            self.clock.advance(d);
            if let Some(term) = self.shared.current_term().filter(|t| !t.is_current()) {
                let why = self.shared.deadline_passed();
                self.shared.end_term(&term, &TermEnd::Expired(why));
            }
        }
        let Some(stored) = lease else {
            return Err(api(404, "NotFound"));
        };
        let recreated = self.seen.is_some_and(|(_, uid)| uid != stored.uid);
        self.seen = Some((stored.version, stored.uid));
        Ok(Read {
            record: stored.record,
            version: versions.of(stored.version),
            recreated,
        })
    }

    async fn create(&mut self, record: &LeaderElectionRecord, _d: &Deadline) -> Result<Written> {
        self.log(Call::Create(record.clone()));
        if let Some(e) = self.scripted() {
            return Err(e);
        }
        self.write(record, true)
    }

    async fn update(&mut self, record: &LeaderElectionRecord, _d: &Deadline) -> Result<Written> {
        self.log(Call::Update(record.clone()));
        if let Some(e) = self.scripted() {
            return Err(e);
        }
        self.write(record, false)
    }

    async fn sleep(&mut self, d: Duration, wake: &Wakeup) -> Wake {
        self.log(Call::Sleep(d));
        if let Some(w) = wake.take() {
            return w;
        }
        let until = crate::clock::add_saturating(self.clock.now(), d).min(self.stop_at);
        // Another writer's writes due meanwhile: at their time, waking a
        // sleeper as a watch would not (the bench polls).
        loop {
            let next = self
                .server
                .borrow()
                .later
                .front()
                .map(|(at, _)| self.origin + *at);
            match next {
                Some(at) if at <= until => {
                    self.clock
                        .advance(at.saturating_duration_since(self.clock.now()));
                    let (_, what) = self.server.borrow_mut().later.pop_front().expect("due");
                    let mut server = self.server.borrow_mut();
                    match what {
                        Later::Poke => return Wake::Poked,
                        Later::Deliver(r) => {
                            server.put(r);
                            server.delivered = true;
                            return Wake::Poked;
                        }
                        Later::Put(r) => server.put(r),
                        Later::Delete => server.delete(),
                        Later::LoseNextAnswer => server.lose_next_answer = true,
                        Later::SlowNextWrite(d) => server.slow_next_write = Some(d),
                        Later::StopInNextWrite => server.stop_in_next_write = true,
                        Later::StallInNextRead(d) => server.stall_next_read = Some(d),
                    }
                }
                _ => break,
            }
        }
        self.clock
            .advance(until.saturating_duration_since(self.clock.now()));
        if until >= self.stop_at {
            wake.stop();
            return Wake::Stopped;
        }
        Wake::Elapsed
    }

    async fn let_go(&mut self, _term: &Term, _grace: Duration, _stop: &Wakeup) -> LetGo {
        let next = self.server.borrow_mut().let_go.pop_front();
        next.unwrap_or(self.let_go)
    }

    fn delivered(&mut self) -> bool {
        self.server.borrow().delivered
    }

    fn last_read_sent(&self) -> bool {
        !self.read_local
    }

    fn identity(&self) -> &str {
        &self.identity
    }

    fn record_event(&self, _message: &str) {}
}

/// One elector on the bench.
pub(super) struct Lab {
    pub(super) server: Rc<RefCell<Server>>,
    pub(super) clock: ManualClock,
    pub(super) origin: Instant,
    pub(super) config: ElectorConfig,
    pub(super) identity: String,
    pub(super) let_go: LetGo,
    /// The stop asks for no release (as `stop_without_release()` does).
    pub(super) skip_release: bool,
    /// The elector's wall clock stands still here (a frozen or stepped-back
    /// system clock) while its monotonic clock moves; `None`: it moves too.
    pub(super) wall: Option<SystemTime>,
}

/// The bench's clock with a wall clock that stands still at `wall`.
#[derive(Debug)]
struct StillWall {
    clock: ManualClock,
    wall: SystemTime,
}

impl Clock for StillWall {
    fn now(&self) -> Instant {
        self.clock.now()
    }
    fn system_time(&self) -> SystemTime {
        self.wall
    }
    fn sleep(&self, d: Duration, wake: &Wakeup) -> Wake {
        self.clock.sleep(d, wake)
    }
}

/// What a run on the bench left.
pub(super) struct Ran {
    pub(super) result: Result<()>,
    pub(super) probe: Probe,
    pub(super) events: Vec<LeaderEvent>,
    /// The caller's channel was disconnected when the elector ended.
    pub(super) disconnected: bool,
}

impl Lab {
    /// client-go's 15 s / 10 s / 2 s, releasing on stop.
    pub(super) fn new() -> Lab {
        let clock = ManualClock::new();
        Lab {
            server: Rc::default(),
            origin: clock.now(),
            clock,
            config: ElectorConfig {
                release_on_cancel: true,
                watch: false,
                ..ElectorConfig::default()
            },
            identity: "me".into(),
            let_go: LetGo::Released,
            skip_release: false,
            wall: None,
        }
    }

    /// A record of `holder`'s, renewed now by its clock.
    pub(super) fn record(&self, holder: &str, transitions: i32) -> LeaderElectionRecord {
        let now = MicroTime::from_system_time(self.clock.system_time());
        LeaderElectionRecord {
            holder_identity: holder.into(),
            lease_duration_seconds: 15,
            acquire_time: Some(now),
            renew_time: Some(now),
            leader_transitions: transitions,
            ..LeaderElectionRecord::default()
        }
    }

    /// Have `what` happen `at` (time since the bench began).
    pub(super) fn later(&self, at: Duration, what: Later) {
        self.server.borrow_mut().later.push_back((at, what));
    }

    /// Run the elector from now until its clock has moved `for_`, then
    /// stop it (releasing as configured).
    pub(super) fn run_for(&self, for_: Duration) -> Ran {
        let (run, shared, rx) = self.elector(for_);
        let probe = Probe::new(shared);
        let result = block_on(run.run());
        let events = collect(&rx);
        let disconnected = matches!(rx.try_recv(), Err(mpsc::TryRecvError::Disconnected));
        Ran {
            result,
            probe,
            events,
            disconnected,
        }
    }

    /// The elector `run_for` runs, not started (stopped by the bench once
    /// its clock has moved `for_`): its state machine, its state and its
    /// events.
    pub(super) fn elector(
        &self,
        for_: Duration,
    ) -> (Run<LabIo>, Arc<Shared>, Receiver<LeaderEvent>) {
        let clock: Arc<dyn Clock> = match self.wall {
            Some(wall) => Arc::new(StillWall {
                clock: self.clock.clone(),
                wall,
            }),
            None => Arc::new(self.clock.clone()),
        };
        let (shared, rx) = state_of(clock, self.config.clone(), &self.identity);
        let io = LabIo {
            server: self.server.clone(),
            clock: self.clock.clone(),
            origin: self.origin,
            identity: self.identity.clone(),
            seen: None,
            stop_at: self.clock.now() + for_,
            let_go: self.let_go,
            read_local: false,
            shared: shared.clone(),
        };
        shared
            .skip_release
            .store(self.skip_release, std::sync::atomic::Ordering::Relaxed);
        (Run::new(io, shared.clone(), 7), shared, rx)
    }

    /// When each term of `ran` began, on the bench's clock.
    pub(super) fn started_at(&self, ran: &Ran) -> Vec<Duration> {
        ran.events
            .iter()
            .filter_map(|e| match e {
                LeaderEvent::StartedLeading { at, .. } => {
                    Some(at.saturating_duration_since(self.origin))
                }
                _ => None,
            })
            .collect()
    }
}

/// A candidate that began leading a term now on `clock`, with `config`'s
/// timings: what reads the elector (`lease-elect`'s session) gets.
pub(crate) fn leading(clock: &ManualClock, config: ElectorConfig) -> (Probe, Term) {
    let (shared, term, _events) = term_begun(Arc::new(clock.clone()), config);
    (Probe::new(shared), term)
}

/// The state of a candidate that began a term now on `clock` (see
/// [`elector_state`]), the term, and its events.
pub(super) fn term_begun(
    clock: Arc<dyn Clock>,
    config: ElectorConfig,
) -> (Arc<Shared>, Term, Receiver<LeaderEvent>) {
    let (shared, events) = elector_state(clock, config);
    let term = begin_term(&shared, 1);
    (shared, term, events)
}

/// A term with `token` of the candidate `shared` is the state of, begun
/// now.
pub(super) fn begin_term(shared: &Shared, token: u64) -> Term {
    let now = shared.now();
    let term = Term::new(
        (token, 0),
        "me",
        "lab/lease",
        now,
        &shared.config,
        shared.clock.clone(),
    );
    shared.start_term(&term);
    term
}

/// The state of a candidate "me" of `lab/lease` on `clock` that has not
/// run yet (what its views read), and its events.
pub(super) fn elector_state(
    clock: Arc<dyn Clock>,
    config: ElectorConfig,
) -> (Arc<Shared>, Receiver<LeaderEvent>) {
    state_of(clock, config, "me")
}

/// The state of candidate `identity` of `lab/lease`, and its events.
fn state_of(
    clock: Arc<dyn Clock>,
    config: ElectorConfig,
    identity: &str,
) -> (Arc<Shared>, Receiver<LeaderEvent>) {
    let (tx, rx) = mpsc::channel();
    let shared = Shared::new(
        Wakeup::new(),
        clock,
        config,
        "lab/lease".into(),
        identity.into(),
        tx,
    );
    (Arc::new(shared), rx)
}

/// Why each term of a run ended, in order.
fn stopped(events: &[LeaderEvent]) -> Vec<crate::elector::StopReason> {
    events
        .iter()
        .filter_map(|e| match e {
            LeaderEvent::StoppedLeading { reason, .. } => Some(*reason),
            _ => None,
        })
        .collect()
}

/// The first term a run began, as its `StartedLeading` carried it.
fn first_term(events: &[LeaderEvent]) -> Option<&Term> {
    events.iter().find_map(|e| match e {
        LeaderEvent::StartedLeading { term, .. } => Some(term),
        _ => None,
    })
}

fn collect(rx: &Receiver<LeaderEvent>) -> Vec<LeaderEvent> {
    rx.try_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elector::StopReason;

    const S: fn(u64) -> Duration = Duration::from_secs;
    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// Each write of ours (the acquire and the renews, at least four of
    /// them), with its time since the bench began.
    fn our_writes(server: &Server) -> Vec<(Duration, LeaderElectionRecord)> {
        let ours: Vec<_> = updates(server)
            .into_iter()
            .filter(|(_, w)| w.holder_identity == "me")
            .collect();
        assert!(ours.len() >= 4, "an acquire and renews: {ours:?}");
        ours
    }

    /// The `renewTime` of each write of ours.
    fn our_renew_times(server: &Server) -> Vec<Option<MicroTime>> {
        our_writes(server)
            .into_iter()
            .map(|(_, w)| w.renew_time)
            .collect()
    }

    fn updates(server: &Server) -> Vec<(Duration, LeaderElectionRecord)> {
        server
            .log
            .iter()
            .filter_map(|(at, c)| match c {
                Call::Update(r) | Call::Create(r) => Some((*at, r.clone())),
                _ => None,
            })
            .collect()
    }

    fn gets(server: &Server) -> Vec<Duration> {
        server
            .log
            .iter()
            .filter_map(|(at, c)| matches!(c, Call::Get).then_some(*at))
            .collect()
    }

    fn started(events: &[LeaderEvent]) -> usize {
        events
            .iter()
            .filter(|e| matches!(e, LeaderEvent::StartedLeading { .. }))
            .count()
    }

    #[test]
    fn a_leader_renews_every_retry_period_from_the_start_of_the_last_renew_with_one_put_each() {
        let lab = Lab::new();
        let ran = lab.run_for(S(21));
        let server = lab.server.borrow();
        let writes = updates(&server);
        // A create at 0 s (after its GET), then one PUT every 2 s.
        assert!(matches!(server.log[0].1, Call::Get));
        assert!(matches!(server.log[1].1, Call::Create(_)));
        let times: Vec<Duration> = writes.iter().map(|(at, _)| *at).collect();
        assert_eq!(
            &times[..11],
            &(0..11).map(|i| S(2 * i)).collect::<Vec<_>>()[..]
        );
        // The renews keep the term's acquire time and transitions.
        let first = &writes[0].1;
        for (_, w) in &writes[1..10] {
            assert_eq!(w.acquire_time, first.acquire_time);
            assert_eq!(w.leader_transitions, first.leader_transitions);
            assert_eq!(w.holder_identity, "me");
            assert_eq!(w.lease_duration_seconds, 15);
        }
        let status = ran.probe.status();
        // The elector ended: its events channel is disconnected.
        assert!(ran.disconnected);
        assert_eq!(status.slow_path_renews, 0);
        assert_eq!(status.held_by_other, 0);
        // 1 GET + 1 create + 10 renews + the release.
        assert_eq!((status.attempts, status.renews), (11, 11));
        assert_eq!(status.requests, 13);
        assert_eq!(
            (status.failed_requests, status.consecutive_failures),
            (0, 0)
        );
        assert_eq!(started(&ran.events), 1);
        assert_eq!(stopped(&ran.events), [StopReason::Stopped]);
        assert!(ran.result.is_ok());
    }

    #[test]
    fn the_release_frees_the_record_for_a_second_keeping_its_transitions_and_times_now() {
        let lab = Lab::new();
        lab.server.borrow_mut().put(lab.record("", 4));
        lab.run_for(S(5));
        let server = lab.server.borrow();
        let writes = updates(&server);
        let (at, release) = writes.last().unwrap().clone();
        assert_eq!(release.holder_identity, "");
        assert_eq!(release.lease_duration_seconds, 1);
        assert_eq!(
            release.leader_transitions, 5,
            "one more than the 4 stored, kept"
        );
        let now = MicroTime::from_system_time(lab.clock.system_time());
        assert_eq!(
            (release.acquire_time, release.renew_time),
            (Some(now), Some(now))
        );
        assert_eq!(at, S(5));
        assert_eq!(server.lease.as_ref().unwrap().record, release);
    }

    /// The lease's times are the wall clock's as it is at each write (as
    /// client-go's `metav1.NowMicro()`): the acquire's and each renew's.
    #[test]
    fn each_write_carries_the_wall_clocks_time() {
        let lab = Lab::new();
        let wall = lab.clock.system_time();
        lab.run_for(S(9));
        let server = lab.server.borrow();
        for (at, w) in our_writes(&server) {
            let now = MicroTime::from_system_time(wall + at);
            assert_eq!(w.renew_time, Some(now), "written at {at:?}");
        }
    }

    /// A wall clock that stands still: each renew still writes a
    /// `renewTime` after the last one written, a microsecond on (an update
    /// that changes nothing, kube-apiserver writes nowhere and answers
    /// with the same version: nobody would see the lease renewed), and the
    /// term goes on.
    #[test]
    fn a_wall_clock_standing_still_moves_each_renew_a_microsecond_on() {
        let mut lab = Lab::new();
        let wall = lab.clock.system_time();
        lab.wall = Some(wall);
        let ran = lab.run_for(S(9));
        let server = lab.server.borrow();
        let times = our_renew_times(&server);
        let mut want = MicroTime::from_system_time(wall);
        for (i, t) in times.iter().enumerate() {
            assert_eq!(*t, Some(want), "write {i} of {times:?}");
            want = want.next();
        }
        assert_eq!(lab.started_at(&ran).len(), 1, "one term throughout");
    }

    /// A wall clock standing still past the last writable instant (the
    /// year 9999): no microsecond after it can be written, so each renew
    /// writes the one before the stored `renewTime` instead, never the
    /// stored one again (an update that changes nothing renews nothing on
    /// kube-apiserver), and an `acquireTime` equal to it steps back too.
    #[test]
    fn past_the_last_writable_instant_each_renew_still_changes_the_record() {
        let mut lab = Lab::new();
        let far = std::time::UNIX_EPOCH + Duration::from_secs(400_000_000_000);
        lab.wall = Some(far);
        lab.run_for(S(9));
        let server = lab.server.borrow();
        let last = MicroTime::from_system_time(far);
        let times = our_renew_times(&server);
        for (i, pair) in times.windows(2).enumerate() {
            assert_ne!(pair[0], pair[1], "write {} of {times:?}", i + 1);
            assert!(
                pair.iter()
                    .all(|t| *t == Some(last) || *t == Some(last.prev())),
                "{times:?}"
            );
        }
        // The acquireTime steps back with the renewTime it equalled: never
        // after it.
        for (at, w) in updates(&server) {
            assert!(w.acquire_time <= w.renew_time, "at {at:?}: {w:?}");
        }
    }

    #[test]
    fn no_release_without_release_on_cancel_nor_of_a_record_not_ours() {
        let mut lab = Lab::new();
        lab.config.release_on_cancel = false;
        lab.run_for(S(5));
        assert_eq!(
            lab.server
                .borrow()
                .lease
                .as_ref()
                .unwrap()
                .record
                .holder_identity,
            "me"
        );

        let lab = Lab::new();
        let other = lab.record("other", 9);
        // Another writer takes the Lease just before the stop: the leader
        // sees it at its next renew (it polls) and does not free it.
        lab.later(MS(4_500), Later::Put(other.clone()));
        let ran = lab.run_for(S(7));
        let server = lab.server.borrow();
        assert_eq!(server.lease.as_ref().unwrap().record, other);
        assert_eq!(stopped(&ran.events), [StopReason::Lost]);
        assert!(updates(&server)
            .iter()
            .all(|(_, w)| !w.holder_identity.is_empty()));
    }

    #[test]
    fn a_release_that_conflicts_with_a_renew_of_its_own_that_landed_reads_and_releases() {
        let lab = Lab::new();
        // The renew at 4 s lands, its answer lost: the release at 5 s is
        // written against an older version and conflicts with ourselves.
        lab.later(MS(3_900), Later::LoseNextAnswer);
        lab.run_for(MS(5_000));
        let server = lab.server.borrow();
        assert_eq!(server.lease.as_ref().unwrap().record.holder_identity, "");
        let tail: Vec<&Call> = server.log.iter().rev().take(3).map(|(_, c)| c).collect();
        assert!(
            matches!(tail[..], [Call::Update(_), Call::Get, Call::Update(_)]),
            "{tail:?}"
        );
    }

    #[test]
    fn after_a_failed_attempt_the_next_is_a_jittered_retry_period_later() {
        let lab = Lab::new();
        lab.server.borrow_mut().script = (0..12).map(|_| Some(api(500, "InternalError"))).collect();
        let ran = lab.run_for(S(40));
        let times = gets(&lab.server.borrow());
        let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).take(11).collect();
        assert!(
            gaps.iter().all(|g| *g >= S(2) && *g < MS(4_400)),
            "{gaps:?}"
        );
        // Jittered: not all the same, some in the upper half.
        assert!(gaps.iter().any(|g| *g > MS(3_300)), "{gaps:?}");
        assert!(gaps.iter().any(|g| *g < MS(3_300)), "{gaps:?}");
        let status = ran.probe.status();
        assert_eq!(status.failed_requests, 12);
        assert_eq!(status.consecutive_failures, 0, "led after the failures");
        assert_eq!(started(&ran.events), 1);
    }

    #[test]
    fn a_retry_after_longer_than_the_pause_is_waited_out() {
        let lab = Lab::new();
        let mut e = api(503, "ServiceUnavailable");
        if let Error::Api { status, .. } = &mut e {
            status.retry_after = Some(S(7));
        }
        lab.server.borrow_mut().script.push_back(Some(e));
        lab.run_for(S(10));
        let times = gets(&lab.server.borrow());
        assert_eq!(times[1] - times[0], S(7));
    }

    #[test]
    fn a_lease_held_by_another_is_taken_at_its_observed_expiry_not_a_retry_period_later() {
        let lab = Lab::new();
        lab.server.borrow_mut().put(lab.record("other", 2));
        let ran = lab.run_for(S(20));
        let server = lab.server.borrow();
        let (at, take) = updates(&server)[0].clone();
        // Seen at 0 s, unchanged: expired 15 s later; taken 1 ms after.
        assert_eq!(at, S(15) + MS(1));
        assert_eq!(take.leader_transitions, 3);
        assert_eq!(take.holder_identity, "me");
        // Polled meanwhile every 2 to 4.4 s.
        let polls = gets(&server);
        assert!(
            polls.windows(2).all(|w| w[1] - w[0] <= MS(4_400)),
            "{polls:?}"
        );
        assert!(ran.probe.status().held_by_other >= 4);
    }

    #[test]
    fn a_renew_that_conflicts_takes_the_slow_path_and_counts_it() {
        let lab = Lab::new();
        lab.server.borrow_mut().script = [None, None, Some(api(409, "Conflict"))]
            .into_iter()
            .collect();
        let ran = lab.run_for(S(7));
        assert_eq!(ran.probe.status().slow_path_renews, 1);
        let server = lab.server.borrow();
        // The conflicting PUT at 2 s, a GET and a PUT at once.
        let at_two: Vec<&Call> = server
            .log
            .iter()
            .filter(|(at, _)| *at == S(2))
            .map(|(_, c)| c)
            .collect();
        assert!(
            matches!(
                at_two[..],
                [Call::Update(_), Call::Get, Call::Update(_), ..]
            ),
            "{at_two:?}"
        );
        assert_eq!(stopped(&ran.events), [StopReason::Stopped]);
    }

    #[test]
    fn a_renew_that_fails_in_transport_is_retried_a_retry_period_after_it_began() {
        let lab = Lab::new();
        lab.server.borrow_mut().script = [None, None, Some(transport()), Some(transport())]
            .into_iter()
            .collect();
        let ran = lab.run_for(S(9));
        let server = lab.server.borrow();
        let times: Vec<Duration> = updates(&server).iter().map(|(at, _)| *at).collect();
        assert_eq!(&times[..5], &[S(0), S(2), S(4), S(6), S(8)]);
        let status = ran.probe.status();
        assert_eq!(status.failed_requests, 2);
        assert_eq!(stopped(&ran.events), [StopReason::Stopped], "kept its term");
    }

    #[test]
    fn renews_failing_past_the_renew_deadline_end_the_term_at_it() {
        let lab = Lab::new();
        lab.server.borrow_mut().script = [None, None]
            .into_iter()
            .chain((0..20).map(|_| Some(api(500, "InternalError"))))
            .collect();
        let ran = lab.run_for(S(30));
        let lost = ran.events.iter().find_map(|e| match e {
            LeaderEvent::StoppedLeading {
                at,
                reason: StopReason::Lost,
            } => Some(*at),
            _ => None,
        });
        // The last renew began at 0 s (the create): lost at 10 s.
        assert_eq!(
            lost.map(|at| at.saturating_duration_since(lab.origin)),
            Some(S(10))
        );
        assert!(ran
            .probe
            .status()
            .last_loss
            .is_some_and(|l| l.contains("renew deadline")));
    }

    #[test]
    fn a_lease_recreated_by_our_own_renew_is_not_led_on_before_a_lease_duration() {
        let mut lab = Lab::new();
        lab.config.rejoin = true;
        lab.server.borrow_mut().create_on_update = true;
        lab.later(MS(3_000), Later::Delete);
        let ran = lab.run_for(S(30));
        let starts = lab.started_at(&ran);
        // Led at 0 s; the renew at 4 s recreated the deleted Lease: lost
        // there, and not led again before 4 s + 15 s.
        assert_eq!(stopped(&ran.events)[0], StopReason::Lost);
        assert_eq!(starts.len(), 2, "{starts:?}");
        assert!(starts[1] >= S(19), "{starts:?}");
        assert!(starts[1] <= S(19) + MS(10), "{starts:?}");
        // Waiting out a record of its own: never counted as held by another.
        assert_eq!(ran.probe.status().held_by_other, 0);
    }

    #[test]
    fn a_missing_lease_last_held_by_another_is_waited_out_one_never_held_is_created_at_once() {
        let lab = Lab::new();
        lab.server.borrow_mut().put(lab.record("other", 2));
        lab.later(S(3), Later::Delete);
        lab.run_for(S(25));
        let server = lab.server.borrow();
        let creates: Vec<Duration> = server
            .calls(|c| matches!(c, Call::Create(_)))
            .iter()
            .map(|(at, _)| *at)
            .collect();
        // First seen missing at its next attempt after 3 s: held a lease
        // duration from then.
        let missing = gets(&server).into_iter().find(|at| *at > S(3)).unwrap();
        assert!(creates[0] >= missing + S(15), "{creates:?} {missing:?}");
        drop(server);

        let lab = Lab::new();
        lab.server.borrow_mut().put(lab.record("", 2));
        lab.later(S(1), Later::Delete);
        let mut lab = lab;
        lab.config.release_on_cancel = false;
        // The Lease is free at first: taken at 0 s; when it is deleted...
        let ran = lab.run_for(S(3));
        assert_eq!(started(&ran.events), 1);
    }

    #[test]
    fn a_new_term_writes_one_more_than_the_highest_transitions_seen_also_when_lowered() {
        let lab = Lab::new();
        lab.server.borrow_mut().put(lab.record("other", 7));
        // The holder is replaced by a writer that lowers the count; the
        // candidate saw 7 and writes 8 when it takes over.
        lab.later(S(1), Later::Put(lab.record("other2", 1)));
        lab.run_for(S(20));
        let server = lab.server.borrow();
        let take = &updates(&server)[0].1;
        assert_eq!(
            (take.holder_identity.as_str(), take.leader_transitions),
            ("me", 8)
        );
    }
}

#[cfg(test)]
mod more_tests {
    use super::*;
    use crate::elector::StopReason;

    const S: fn(u64) -> Duration = Duration::from_secs;
    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn at_of(server: &Server, pick: fn(&Call) -> bool) -> Vec<Duration> {
        server.calls(pick).iter().map(|(at, _)| *at).collect()
    }

    #[test]
    fn a_missing_lease_is_created_at_once_and_its_404_is_no_failure() {
        let lab = Lab::new();
        let ran = lab.run_for(S(1));
        let server = lab.server.borrow();
        assert!(matches!(server.log[0], (t, Call::Get) if t == S(0)));
        assert!(matches!(server.log[1], (t, Call::Create(_)) if t == S(0)));
        assert_eq!(ran.probe.status().failed_requests, 0);
        // Every request sent is counted: the GET, the create and the
        // release on stop.
        let sent = server
            .log
            .iter()
            .filter(|(_, c)| !matches!(c, Call::Sleep(_)))
            .count();
        assert_eq!((sent, ran.probe.status().requests), (3, 3));
    }

    #[test]
    fn an_unconfirmed_write_older_than_the_last_eight_is_no_longer_ours() {
        let lab = Lab::new();
        // The create lands, its answer lost. Every later update fails
        // (500) without landing: each attempt tries the fast path, reads
        // the create back (ours while remembered) and updates again.
        lab.server.borrow_mut().lose_next_answer = true;
        let refused = || Some(api(500, "InternalError"));
        let mut script = vec![None, None, None, refused()];
        for _ in 0..4 {
            script.extend([refused(), None, refused()]);
        }
        lab.server.borrow_mut().script = script.into_iter().collect();
        let ran = lab.run_for(S(20));
        let server = lab.server.borrow();
        let updates = at_of(&server, |c| matches!(c, Call::Update(_)));
        // The eighth update leaves the create the ninth write back:
        // forgotten, the create read next is someone else's record under
        // our identity, waited out for a lease duration, not renewed.
        assert_eq!(updates.len(), 8, "{:?}", server.log);
        assert!(!ran
            .events
            .iter()
            .any(|e| matches!(e, LeaderEvent::StartedLeading { .. })));
    }

    #[test]
    fn a_create_that_loses_the_race_reads_the_winner_at_once_and_is_no_failure() {
        let lab = Lab::new();
        lab.server.borrow_mut().script = [None, Some(api(409, "AlreadyExists"))]
            .into_iter()
            .collect();
        // The winner's record, stored as our create is refused.
        let winner = lab.record("winner", 0);
        lab.later(MS(0), Later::Put(winner));
        let ran = lab.run_for(S(3));
        let server = lab.server.borrow();
        let gets = at_of(&server, |c| matches!(c, Call::Get));
        // 404 at 0 s, create refused at 0 s, the winner read 1 ms later.
        assert_eq!(gets[1], MS(1), "{:?}", server.log);
        let status = ran.probe.status();
        assert_eq!(status.failed_requests, 0);
        assert_eq!(ran.probe.leader().as_deref(), Some("winner"));
    }

    #[test]
    fn a_takeover_that_loses_the_race_is_no_failure_and_the_winner_leads() {
        crate::test_log::logs();
        let lab = Lab::new();
        // Released: no holder, a duration of 1 s.
        let mut released = lab.record("", 3);
        released.lease_duration_seconds = 1;
        lab.server.borrow_mut().put(released);
        // The free Lease is read, then our update to take it is refused:
        // another candidate took it first.
        lab.server.borrow_mut().script = [None, Some(api(409, "Conflict"))].into_iter().collect();
        let winner = lab.record("winner", 4);
        lab.later(MS(0), Later::Put(winner));
        let ran = lab.run_for(S(3));
        let status = ran.probe.status();
        assert!(!ran
            .events
            .iter()
            .any(|e| matches!(e, LeaderEvent::StartedLeading { .. })));
        assert_eq!(
            (status.failed_requests, status.consecutive_failures),
            (0, 0),
            "{:?}",
            status.last_error
        );
        assert!(status.last_error.is_none(), "{:?}", status.last_error);
        assert_eq!(ran.probe.leader().as_deref(), Some("winner"));
        // Every request sent is counted, the reads among them.
        let server = lab.server.borrow();
        let sent = server
            .log
            .iter()
            .filter(|(_, c)| !matches!(c, Call::Sleep(_)))
            .count();
        let gets = at_of(&server, |c| matches!(c, Call::Get));
        assert_eq!(status.requests, sent as u64);
        // The next attempt a retry period later: a free record has no
        // expiry to wake at.
        assert!(gets.len() >= 2 && gets[1] >= S(2), "{gets:?}");
        // The winner announced: counted, an event, a line.
        assert_eq!(status.transitions, 1);
        assert!(ran
            .events
            .iter()
            .any(|e| matches!(e, LeaderEvent::NewLeader { identity, .. } if identity == "winner")));
        assert!(crate::test_log::lines_here(log::Level::Info)
            .iter()
            .any(|l| l.contains("new leader elected") && l.contains("winner")));
    }

    #[test]
    fn a_write_whose_answer_was_lost_is_ours_when_read_back_in_the_same_acquire() {
        let lab = Lab::new();
        lab.server.borrow_mut().lose_next_answer = true;
        let ran = lab.run_for(S(10));
        let server = lab.server.borrow();
        let writes: Vec<LeaderElectionRecord> = server
            .log
            .iter()
            .filter_map(|(_, c)| match c {
                Call::Create(r) | Call::Update(r) => Some(r.clone()),
                _ => None,
            })
            .collect();
        // The create landed, its answer lost; the next attempt reads it
        // back as ours and writes it again: same acquire time and
        // transitions (not a new term over a stranger's record).
        assert_eq!(writes[1].acquire_time, writes[0].acquire_time);
        assert_eq!(writes[1].leader_transitions, 0);
        let started = lab.started_at(&ran);
        // Led at the next attempt, not a lease duration later.
        assert_eq!(started.len(), 1);
        assert!(started[0] < S(5), "{started:?}");
        assert!(!ran.probe.duplicate_identity());
    }

    #[test]
    fn a_record_under_our_identity_renewed_by_another_process_is_a_duplicate_and_never_ours() {
        crate::test_log::logs();
        let lab = Lab::new();
        // A process with our identity holds the Lease and renews it.
        lab.server.borrow_mut().put(lab.record("me", 3));
        let mut later = VecDeque::new();
        for i in 1..10u64 {
            let mut r = lab.record("me", 3);
            let t = MicroTime::from_system_time(lab.clock.system_time() + S(2 * i));
            r.renew_time = Some(t);
            later.push_back((S(2 * i), Later::Put(r)));
        }
        lab.server.borrow_mut().later = later;
        let ran = lab.run_for(S(19));
        assert!(ran.probe.duplicate_identity());
        assert!(!ran
            .events
            .iter()
            .any(|e| matches!(e, LeaderEvent::StartedLeading { .. })));
        let server = lab.server.borrow();
        assert!(server
            .calls(|c| matches!(c, Call::Update(_) | Call::Create(_)))
            .is_empty());
        // Said once, at error, however often it is seen renewed.
        let said = crate::test_log::lines_here(log::Level::Error)
            .into_iter()
            .filter(|l| l.contains("by another process"))
            .count();
        assert_eq!(said, 1);
    }

    #[test]
    fn a_record_under_our_identity_seen_once_or_after_another_holder_is_no_duplicate() {
        crate::test_log::logs();
        let lab = Lab::new();
        // Held by another; then a record under our identity that this
        // process did not write (a previous run of ours, say) replaces it.
        lab.server.borrow_mut().put(lab.record("other", 3));
        let ours_not_written = lab.record("me", 4);
        lab.later(S(1), Later::Put(ours_not_written));
        let ran = lab.run_for(S(10));
        assert!(!ran.probe.duplicate_identity());
        assert!(crate::test_log::lines_here(log::Level::Info)
            .iter()
            .any(|l| l.contains("a previous run?")));
        assert!(crate::test_log::lines_here(log::Level::Error).is_empty());
    }

    #[test]
    fn a_record_under_our_identity_seen_once_is_waited_out_then_taken_as_a_new_term() {
        let lab = Lab::new();
        // A previous run of ours left it: never renewed again.
        lab.server.borrow_mut().put(lab.record("me", 3));
        let ran = lab.run_for(S(20));
        assert!(!ran.probe.duplicate_identity());
        let server = lab.server.borrow();
        let writes = server.calls(|c| matches!(c, Call::Update(_)));
        let (at, Call::Update(take)) = &writes[0] else {
            unreachable!()
        };
        assert_eq!(*at, S(15) + MS(1));
        assert_eq!(take.leader_transitions, 4, "a new term, not the old one's");
    }

    #[test]
    fn a_twin_renewing_our_record_with_our_acquire_time_ends_our_term() {
        let lab = Lab::new();
        // We lead from 0 s. At 5 s a twin under our identity renews the
        // record as client-go would renew its own: our acquire time kept,
        // its renew time new. That record is not ours.
        let mut twin = lab.record("me", 0);
        twin.renew_time = Some(MicroTime::from_system_time(lab.clock.system_time() + S(5)));
        lab.later(S(5), Later::Put(twin));
        let ran = lab.run_for(S(10));
        let reasons: Vec<StopReason> = ran
            .events
            .iter()
            .filter_map(|e| match e {
                LeaderEvent::StoppedLeading { reason, .. } => Some(*reason),
                _ => None,
            })
            .collect();
        assert_eq!(reasons.first(), Some(&StopReason::Lost), "{:?}", ran.events);
        let server = lab.server.borrow();
        let landed_after = server
            .calls(|c| matches!(c, Call::Update(r) if !r.holder_identity.is_empty()))
            .iter()
            .filter(|(at, _)| *at > S(5))
            .count();
        assert!(landed_after <= 1, "{:?}", server.log);
    }

    /// Another holder's record renewed every 2 s for `for_`.
    fn renewed_by_other(lab: &Lab, for_: u64) -> VecDeque<(Duration, Later)> {
        (1..for_ / 2)
            .map(|i| {
                let mut r = lab.record("other", 1);
                let t = MicroTime::from_system_time(lab.clock.system_time() + S(2 * i));
                r.renew_time = Some(t);
                (S(2 * i), Later::Put(r))
            })
            .collect()
    }

    #[test]
    fn an_acquire_time_out_gives_up_at_the_first_attempt_due_after_it() {
        let mut lab = Lab::new();
        lab.config.acquire_timeout = Some(S(7));
        lab.server.borrow_mut().put(lab.record("other", 1));
        let later = renewed_by_other(&lab, 30);
        lab.server.borrow_mut().later = later;
        let ran = lab.run_for(S(30));
        assert!(ran.result.is_ok());
        let ended = lab.clock.now().saturating_duration_since(lab.origin);
        let server = lab.server.borrow();
        let gets = at_of(&server, |c| matches!(c, Call::Get));
        // Attempts until 7 s; at the next one due (a jittered retry period
        // after the last), it gives up without asking.
        let last = *gets.last().unwrap();
        assert!(last < S(7) && last + MS(2_400) >= S(7), "{gets:?}");
        assert!(
            ended >= S(7) && ended <= last + MS(2_400),
            "{ended:?} {gets:?}"
        );
    }

    #[test]
    fn with_rejoin_a_lost_terms_work_that_outlives_the_slack_is_waited_for_then_the_lease_sought() {
        crate::test_log::logs();
        let mut lab = Lab::new();
        lab.config.rejoin = true;
        // The work lets go only after the slack (lease duration less renew
        // deadline) has passed.
        lab.server.borrow_mut().let_go = [LetGo::Held, LetGo::Released].into_iter().collect();
        let taken = lab.record("other", 1);
        lab.later(S(3), Later::Put(taken));
        let ran = lab.run_for(S(20));
        let ended = lab.clock.now().saturating_duration_since(lab.origin);
        // Lost at the renew after 3 s; then sought again (reads), until the
        // stop at 20 s.
        assert_eq!(ended, S(20));
        let server = lab.server.borrow();
        let gets = at_of(&server, |c| matches!(c, Call::Get));
        assert!(
            gets.iter().filter(|at| **at > S(5)).count() >= 2,
            "{gets:?}"
        );
        assert!(crate::test_log::lines_here(log::Level::Warn)
            .iter()
            .any(|l| l.contains("still runs")));
        assert!(ran.result.is_ok());
    }

    #[test]
    fn a_write_confirmed_after_its_renew_deadline_begins_no_term_the_next_attempt_does() {
        let lab = Lab::new();
        // The create's answer comes 11 s after it was sent (renew
        // deadline 10 s).
        lab.server.borrow_mut().slow_next_write = Some(S(11));
        let ran = lab.run_for(S(15));
        let term = first_term(&ran.events).expect("a term");
        assert!(
            term.started_at() >= lab.origin + S(11),
            "{:?}",
            term.started_at().saturating_duration_since(lab.origin)
        );
        let server = lab.server.borrow();
        let updates = at_of(&server, |c| matches!(c, Call::Update(_)));
        assert_eq!(updates.first(), Some(&S(11)), "{:?}", server.log);
    }

    #[test]
    fn a_lease_recreated_under_a_term_ends_it_even_when_it_holds_our_own_record() {
        let lab = Lab::new();
        {
            let mut server = lab.server.borrow_mut();
            server.create_on_update = true;
            // The renew at 4 s lands on a Lease deleted just before (an
            // update creates it anew, with a new uid), its answer lost.
            server.later.push_back((MS(3_900), Later::LoseNextAnswer));
            server.later.push_back((MS(3_950), Later::Delete));
        }
        let ran = lab.run_for(S(12));
        let lost = ran.events.iter().find_map(|e| match e {
            LeaderEvent::StoppedLeading {
                at,
                reason: StopReason::Lost,
            } => Some(at.saturating_duration_since(lab.origin)),
            _ => None,
        });
        // The retry at 6 s conflicts, reads our record back on a new
        // Lease: the term is over there.
        assert_eq!(lost, Some(S(6)));
        let why = ran.probe.status().last_loss.unwrap_or_default();
        assert!(why.contains("deleted and created again"), "{why}");
    }

    fn holder(lab: &Lab) -> Option<String> {
        let server = lab.server.borrow();
        server
            .lease
            .as_ref()
            .map(|l| l.record.holder_identity.clone())
    }

    #[test]
    fn a_renew_confirmed_after_its_renew_deadline_loses_the_term_and_releases_nothing() {
        let lab = Lab::new();
        // The renew sent at 2 s is answered at 11 s, past the deadline at
        // 10 s: the term is lost there (not stopped), and a lost term is
        // not released (the stop at 20 s finds none).
        lab.later(S(1), Later::SlowNextWrite(S(9)));
        let ran = lab.run_for(S(20));
        assert_eq!(stopped(&ran.events), [StopReason::Lost]);
        assert_eq!(holder(&lab).as_deref(), Some("me"));
        assert!(ran.result.is_ok());
    }

    /// After renews failed, a renew confirmed past the deadline ends the
    /// term at that answer, as run out, telling the last error (and
    /// before its success is counted, which would forget the failures).
    #[test]
    fn a_renew_confirmed_late_after_failures_is_lost_telling_the_last_error() {
        let lab = Lab::new();
        // The read and the create succeed; the renews at 2 s and 4 s fail
        // (an update and a read each); the one sent at 6 s is answered at
        // 11 s, past the deadline at 10 s.
        lab.server.borrow_mut().script = [None, None]
            .into_iter()
            .chain((0..4).map(|_| Some(api(500, "InternalError"))))
            .collect();
        lab.later(S(5), Later::SlowNextWrite(S(5)));
        let ran = lab.run_for(S(20));
        assert_eq!(stopped(&ran.events), [StopReason::Lost]);
        let lost = ran.events.iter().find_map(|e| match e {
            LeaderEvent::StoppedLeading { at, .. } => Some(*at),
            _ => None,
        });
        assert_eq!(
            lost.map(|at| at.saturating_duration_since(lab.origin)),
            Some(S(11)),
            "ended at the late answer"
        );
        let why = ran.probe.status().last_loss.unwrap_or_default();
        assert!(
            why.contains("renew deadline") && why.contains("(last error: "),
            "{why}"
        );
    }

    #[test]
    fn a_stop_while_a_renew_is_on_its_way_releases_once_the_answer_is_in() {
        let lab = Lab::new();
        lab.later(S(3), Later::StopInNextWrite);
        let ran = lab.run_for(S(20));
        assert_eq!(stopped(&ran.events), [StopReason::Stopped]);
        assert_eq!(holder(&lab).as_deref(), Some(""));
        let updates = at_of(&lab.server.borrow(), |c| matches!(c, Call::Update(_)));
        assert_eq!(updates.last(), Some(&S(4)));
        assert!(ran.result.is_ok());
    }

    #[test]
    fn a_stop_that_asks_for_no_release_writes_none() {
        let mut lab = Lab::new();
        lab.skip_release = true;
        let ran = lab.run_for(S(5));
        assert_eq!(stopped(&ran.events), [StopReason::Stopped]);
        assert_eq!(holder(&lab).as_deref(), Some("me"));
        let updates = at_of(&lab.server.borrow(), |c| matches!(c, Call::Update(_)));
        assert_eq!(updates.last(), Some(&S(4)));
    }

    #[test]
    fn a_release_refused_because_another_wrote_is_no_error_and_leaves_their_record() {
        let lab = Lab::new();
        let other = lab.record("other", 9);
        // Written after the last renew (4 s), before the stop (5 s): the
        // release conflicts, a read shows the record is not ours.
        lab.later(MS(4_500), Later::Put(other.clone()));
        let ran = lab.run_for(S(5));
        assert!(ran.result.is_ok(), "{:?}", ran.result);
        assert_eq!(lab.server.borrow().lease.as_ref().unwrap().record, other);
    }

    #[test]
    fn a_release_that_fails_is_the_runs_error() {
        let lab = Lab::new();
        lab.later(MS(4_500), Later::LoseNextAnswer);
        let ran = lab.run_for(S(5));
        assert!(ran.result.is_err(), "{:?}", ran.result);
    }

    #[test]
    fn a_lost_term_says_why_freed_deleted_or_held_by_another() {
        let why = |later: Later| {
            let lab = Lab::new();
            lab.later(MS(4_500), later);
            let ran = lab.run_for(S(12));
            assert_eq!(stopped(&ran.events), [StopReason::Lost]);
            ran.probe.status().last_loss.unwrap_or_default()
        };
        let lab = Lab::new();
        assert_eq!(
            why(Later::Put(lab.record("", 3))),
            "the lease was freed by another writer"
        );
        assert_eq!(why(Later::Delete), "the lease was deleted");
        assert_eq!(
            why(Later::Put(lab.record("other", 3))),
            "the lease is now held by other"
        );
    }

    #[test]
    fn a_term_taken_by_another_ends_before_the_new_leader_is_announced() {
        let lab = Lab::new();
        let other = lab.record("other", 3);
        lab.later(MS(4_500), Later::Put(other));
        let ran = lab.run_for(S(12));
        let order: Vec<&str> = ran
            .events
            .iter()
            .filter_map(|e| match e {
                LeaderEvent::StoppedLeading { .. } => Some("stopped"),
                LeaderEvent::NewLeader { identity, .. } if identity == "other" => Some("other"),
                _ => None,
            })
            .collect();
        assert_eq!(order, ["stopped", "other"]);
    }

    #[test]
    fn a_term_ended_at_its_deadline_then_found_deleted_is_taken_over() {
        let lab = Lab::new();
        // Deleted after the renew at 4 s; the renew at 6 s finds it gone
        // (404), and the read that follows is answered while the thread
        // stalls past the deadline (14 s): the caller's side ends the
        // term first, as run out. Its work owes nobody a grace: someone
        // may create the Lease and lead at once.
        lab.later(MS(4_500), Later::Delete);
        lab.later(MS(4_600), Later::StallInNextRead(S(11)));
        let ran = lab.run_for(S(20));
        assert_eq!(stopped(&ran.events), [StopReason::Lost]);
        assert!(first_term(&ran.events).expect("a term began").taken_over());
    }

    /// After a term ran out, its work still running, the elector reads
    /// the Lease once a retry period; with those reads failing, a watch's
    /// poke with nothing delivered (a change that would cost a request)
    /// brings no read early: a failing server sees one a retry period.
    #[test]
    fn a_poke_while_reads_fail_after_a_term_ran_out_brings_no_read_early() {
        let mut lab = Lab::new();
        lab.let_go = LetGo::Held;
        // The first read and the create succeed; every request after
        // them fails.
        lab.server.borrow_mut().script = [None, None]
            .into_iter()
            .chain((0..100).map(|_| Some(api(500, "InternalError"))))
            .collect();
        lab.later(MS(13_300), Later::Poke);
        let ran = lab.run_for(S(16));
        assert_eq!(stopped(&ran.events), [StopReason::Lost]);
        let server = lab.server.borrow();
        let gets = at_of(&server, |c| matches!(c, Call::Get));
        assert!(
            gets.iter().any(|at| *at > S(10)),
            "read after the term: {gets:?}"
        );
        assert!(!gets.contains(&MS(13_300)), "read at the poke: {gets:?}");
        let term = first_term(&ran.events).expect("a term");
        assert!(!term.taken_over(), "a failed read is no takeover");
    }

    /// After a term ran out (its renews failed), the work still holding
    /// it: once a read has not failed, a watch event is looked at at once;
    /// the Lease found deleted is a takeover (the work has no time left);
    /// and with `rejoin` the elector goes on to seek the Lease again.
    #[test]
    fn after_a_term_ran_out_a_deletion_the_watch_tells_of_is_read_at_once_and_taken_over() {
        let mut lab = Lab::new();
        // The work holds its term through the watch (five looks at it),
        // and lets go once told the term was taken over.
        lab.server.borrow_mut().let_go = std::iter::repeat_n(LetGo::Held, 5).collect();
        lab.config.rejoin = true;
        // The first read and the create succeed; the renews' 8 requests
        // (an update and a read at 2, 4, 6 and 8 s) fail, so the term runs
        // out at 10 s; the read after it (near 11 s) succeeds.
        lab.server.borrow_mut().script = [None, None]
            .into_iter()
            .chain((0..8).map(|_| Some(api(500, "InternalError"))))
            .collect();
        lab.later(MS(11_500), Later::Delete);
        lab.later(MS(11_500), Later::Poke);
        let ran = lab.run_for(S(16));
        let term = first_term(&ran.events).expect("a term");
        assert!(term.taken_over(), "the deleted Lease ends the work's time");
        let server = lab.server.borrow();
        let gets = at_of(&server, |c| matches!(c, Call::Get));
        assert!(
            gets.iter().any(|at| *at > S(10) && *at < MS(11_500)),
            "a read after the term ran out, before the deletion: {gets:?}"
        );
        assert!(gets.contains(&MS(11_500)), "read at the poke: {gets:?}");
        assert_eq!(
            lab.clock.now().saturating_duration_since(lab.origin),
            S(16),
            "with rejoin the elector runs on until stopped"
        );
    }

    /// A lock without versions gives tokens from `leaseTransitions`, and
    /// no warning (there is no version to warn of); one whose versions
    /// are not decimal warns once, however many terms.
    #[test]
    fn an_unordered_version_is_warned_of_once_and_a_missing_one_never() {
        crate::test_log::logs();
        let warned = || {
            crate::test_log::lines_here(log::Level::Warn)
                .into_iter()
                .filter(|l| l.contains("is not a decimal integer"))
                .count()
        };
        let lab = Lab::new();
        lab.server.borrow_mut().versions = Versions::None;
        lab.server.borrow_mut().put(lab.record("", 4));
        let ran = lab.run_for(S(5));
        assert_eq!(first_term(&ran.events).map(Term::token), Some(5));
        assert_eq!(warned(), 0, "no version, nothing to warn of");

        let mut lab = Lab::new();
        lab.config.rejoin = true;
        lab.server.borrow_mut().versions = Versions::Opaque;
        // Another writer takes the Lease at 3 s; its lease runs out 15 s
        // later and this candidate leads again.
        lab.later(S(3), Later::Put(lab.record("other", 7)));
        let ran = lab.run_for(S(30));
        let terms = ran
            .events
            .iter()
            .filter(|e| matches!(e, LeaderEvent::StartedLeading { .. }))
            .count();
        assert_eq!(terms, 2);
        assert_eq!(warned(), 1, "once");
    }

    /// Issue 54 #5: the watch delivers another writer's write just as the
    /// term runs out (the renews failing), so that the renews' pause is
    /// woken with no time left for a read and the term ends unread. The
    /// delivery the lock holds costs no request: the work learns of the
    /// takeover at once, not a jittered retry period after the last
    /// failed request (it waited up to 2.2 retry periods).
    #[test]
    fn a_delivery_that_came_as_the_term_ran_out_is_looked_at_at_once() {
        let mut lab = Lab::new();
        lab.let_go = LetGo::Held;
        // The first read and the create succeed; every request after
        // them fails: the term runs out at the renew deadline, 10 s.
        lab.server.borrow_mut().script = [None, None]
            .into_iter()
            .chain((0..100).map(|_| Some(api(500, "InternalError"))))
            .collect();
        let freed = LeaderElectionRecord {
            holder_identity: String::new(),
            ..lab.record("", 0)
        };
        lab.later(S(10), Later::Deliver(freed));
        // Stopped a microsecond after the delivery: what the elector does
        // about it, it does at once.
        let ran = lab.run_for(S(10) + Duration::from_micros(1));
        assert_eq!(stopped(&ran.events), [StopReason::Lost]);
        let term = first_term(&ran.events).expect("a term");
        assert!(
            term.taken_over(),
            "the freed Lease the watch delivered ends the work's time at once"
        );
        let server = lab.server.borrow();
        let gets = at_of(&server, |c| matches!(c, Call::Get));
        assert_eq!(
            gets.last(),
            Some(&S(10)),
            "read from the delivery: {gets:?}"
        );
    }

    #[test]
    fn a_poke_between_renews_is_looked_at_with_a_read_not_a_renew_sent_early() {
        let lab = Lab::new();
        // Another holder writes at 4.5 s and the watch pokes: the elector
        // reads at once and ends its term there, with no renew sent.
        lab.later(MS(4_500), Later::Put(lab.record("other", 3)));
        lab.later(MS(4_500), Later::Poke);
        let ran = lab.run_for(S(5));
        assert_eq!(stopped(&ran.events), [StopReason::Lost]);
        let server = lab.server.borrow();
        let at_poke: Vec<&Call> = server
            .log
            .iter()
            .filter(|(at, c)| *at == MS(4_500) && !matches!(c, Call::Sleep(_)))
            .map(|(_, c)| c)
            .collect();
        assert!(matches!(at_poke[..], [Call::Get]), "{at_poke:?}");
    }
}
