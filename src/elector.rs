//! The leader-election state machine and the thread that runs it.
//!
//! Read top to bottom like client-go's `leaderelection.go`: configuration
//! and validation, the handle the caller keeps, then the thread's loop:
//! `acquire`, `renew`, `release`, all built on `try_acquire_or_renew`.
//!
//! # Time budgets
//!
//! A renew round has one deadline on the elector's clock, `start of the last
//! successful renew + renew_deadline`; an acquire attempt has `its start +
//! renew_deadline`. Each request draws from it a [`Deadline`] of at most the
//! per-request cap ([`ElectorConfig::request_cap`], by default
//! `max(renew_deadline / 2, 1 s)` as client-go's `NewFromKubeconfig` sets),
//! and the client's 401 retry and exec-plugin run share that request's
//! budget. So `StoppedLeading` comes no later than `renew_deadline` (plus
//! scheduling slack) after the start of the last successful renew, however
//! the server fails, and one request that hangs is abandoned at the cap with
//! room for a retry inside the deadline.
//!
//! After a failed acquire attempt the next is one jittered retry period
//! away (or the server's `Retry-After`, clamped to
//! [`MAX_RETRY_AFTER`]); only an answered attempt that showed a held lease
//! may wake earlier, at its observed expiry. Renew attempts are a retry
//! period apart, start to start, as client-go's `PollImmediateUntil`.
//!
//! `stop()` interrupts the request in flight; the release then gets its own
//! budget, [`ElectorConfig::release_timeout`]. Dropping the handle during a
//! panic stops without releasing: the caller's workers may still run, and
//! the guarded work must have stopped before the lease is handed over.
//!
//! # Identity
//!
//! A record under this candidate's identity counts as its own only if this
//! process wrote it (the last confirmed write, or one sent since whose
//! answer was lost). Any other such record is another process using the
//! same identity, or a previous run: it is waited out like another
//! holder's, and if it is seen renewed the duplicate is logged at error
//! level and reported by [`ElectorHandle::duplicate_identity`]. A restart
//! with a stable identity thus takes over after one lease duration, or at
//! once when the previous run released (`release_on_cancel`). client-go
//! takes over at once, which is also how two processes with one identity
//! both lead.
//!
//! Deliberate differences from client-go, each on the safe side:
//! - The renew deadline counts from the *start* of the last successful renew
//!   request, not from the start of the current renew round, so
//!   `StoppedLeading` comes no later than `renew_deadline` after the last
//!   renew that others can have seen.
//! - A leader that reads the Lease and finds another holder steps down at
//!   once instead of retrying until the deadline.
//! - `StoppedLeading` is sent only by an elector that was leading.
//! - `NewLeader` is not sent for a released (holder-less) Lease.
//! - When the leader's optimistic `PUT` fails in transport (no answer),
//!   the attempt ends there and is retried after the pause; client-go
//!   follows at once with a `GET`, which against an unreachable server only
//!   spends the renew deadline faster. A `409` still falls back to
//!   `GET` + `PUT` at once.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::client::MAX_RETRY_AFTER;
use crate::clock::{add_saturating, Clock, SystemClock, Wake, Wakeup};
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::lease::{LeaderElectionRecord, MicroTime};
use crate::lock::Lock;
use crate::status::{ElectorStatus, FailureKind, LastError};
use crate::watch::Watcher;

/// client-go's `JitterFactor`: acquire retries wait `retry_period * [1, 2.2)`.
pub const JITTER_FACTOR: f64 = 1.2;

/// What the elector tells the caller. `at` is the elector clock's reading
/// when the state changed, so events from several electors sharing a clock
/// can be ordered exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderEvent {
    /// This candidate now holds the lease: start working.
    StartedLeading {
        /// When the lease was acquired.
        at: Instant,
    },
    /// This candidate no longer leads: stop working.
    StoppedLeading {
        /// When leadership ended.
        at: Instant,
        /// Whether it was lost or given up through `stop()`.
        reason: StopReason,
    },
    /// Another (or this) identity was observed holding the lease.
    NewLeader {
        /// The holder's identity.
        identity: String,
        /// When it was observed.
        at: Instant,
    },
}

/// Why leadership ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// No renew succeeded within the renew deadline, or another holder
    /// took the lease.
    Lost,
    /// [`ElectorHandle::stop`] (or dropping the handle) ended it.
    Stopped,
}

/// Timing and behaviour of an elector; see [`LeaderElector::builder`].
#[derive(Debug, Clone)]
pub struct ElectorConfig {
    /// How long non-leaders wait after the last observed change before taking over.
    pub lease_duration: Duration,
    /// How long the leader keeps retrying a renew before it steps down.
    pub renew_deadline: Duration,
    /// Wait between attempts.
    pub retry_period: Duration,
    /// Release the lease when stopped while leading, so a candidate takes over at once.
    pub release_on_cancel: bool,
    /// After losing leadership (not after stop), go back to acquiring
    /// instead of ending. client-go ends; so does the default.
    pub rejoin: bool,
    /// Watch the Lease (one more thread) so a release or an expiry is acted
    /// on within a round trip instead of up to a retry period. Polling
    /// continues underneath; the expiry rule is unchanged.
    pub watch: bool,
    /// The longest one request may take (each is also bounded by what is
    /// left of its renew round). `None`: `max(renew_deadline / 2, 1 s)`, as
    /// client-go's `NewFromKubeconfig` and controller-runtime set, so one
    /// hung request is abandoned in time for a retry inside the deadline.
    ///
    /// The trade-off: a server slower than the cap on *every* request
    /// loses the lease, where an uncapped client would have kept it;
    /// raise the cap (or the renew deadline) for such a server.
    pub request_timeout: Option<Duration>,
    /// The budget of the release on stop (its own, not what was left of a
    /// round): with the default 5 s, and 5 s for queued Events, `stop()`
    /// returns within about 10 s whatever the server does.
    pub release_timeout: Duration,
}

impl Default for ElectorConfig {
    /// client-go's usual values: 15s / 10s / 2s.
    fn default() -> Self {
        ElectorConfig {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            release_on_cancel: false,
            rejoin: false,
            watch: false,
            request_timeout: None,
            release_timeout: DEFAULT_RELEASE_TIMEOUT,
        }
    }
}

/// Default [`ElectorConfig::release_timeout`].
pub const DEFAULT_RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

impl ElectorConfig {
    /// The per-request cap in force: [`ElectorConfig::request_timeout`], or
    /// `max(renew_deadline / 2, 1 s)`.
    pub fn request_cap(&self) -> Duration {
        self.request_timeout
            .unwrap_or_else(|| (self.renew_deadline / 2).max(Duration::from_secs(1)))
    }

    /// Check client-go's rules: `lease_duration > renew_deadline >
    /// 1.2 × retry_period`, whole seconds for the lease duration (the wire
    /// carries seconds), non-zero retry period.
    pub fn validate(&self, identity: &str) -> Result<()> {
        let bad = |msg: String| Err(Error::InvalidConfig(msg));
        let secs = |d: Duration| format!("{:?}", d);
        if self.lease_duration < Duration::from_secs(1) || self.lease_duration.subsec_nanos() != 0 {
            return bad(format!(
                "leaseDuration must be a whole number of seconds, at least 1s (got {})",
                secs(self.lease_duration)
            ));
        }
        if self.lease_duration.as_secs() > i32::MAX as u64 {
            return bad(format!(
                "leaseDuration {} is too long",
                secs(self.lease_duration)
            ));
        }
        if self.retry_period.is_zero() {
            return bad("retryPeriod must be greater than zero".into());
        }
        if self.lease_duration <= self.renew_deadline {
            return bad(format!(
                "leaseDuration must be greater than renewDeadline (leaseDuration {}, renewDeadline {})",
                secs(self.lease_duration),
                secs(self.renew_deadline)
            ));
        }
        if self.renew_deadline.as_secs_f64() <= JITTER_FACTOR * self.retry_period.as_secs_f64() {
            return bad(format!(
                "renewDeadline must be greater than retryPeriod*JitterFactor (renewDeadline {}, retryPeriod {}, JitterFactor {JITTER_FACTOR})",
                secs(self.renew_deadline),
                secs(self.retry_period)
            ));
        }
        crate::names::check_identity(identity)?;
        if self.request_timeout.is_some_and(|d| d.is_zero()) {
            return bad("requestTimeout must be greater than zero".into());
        }
        if self.release_timeout.is_zero() {
            return bad("releaseTimeout must be greater than zero".into());
        }
        Ok(())
    }
}

/// Builder for a [`LeaderElector`].
#[derive(Debug)]
pub struct ElectorBuilder {
    lock: Box<dyn Lock>,
    config: ElectorConfig,
    clock: Arc<dyn Clock>,
}

impl ElectorBuilder {
    /// Set how long non-leaders wait before taking over an unrenewed lease.
    pub fn lease_duration(mut self, d: Duration) -> Self {
        self.config.lease_duration = d;
        self
    }

    /// Set how long the leader retries a failing renew before stepping down.
    pub fn renew_deadline(mut self, d: Duration) -> Self {
        self.config.renew_deadline = d;
        self
    }

    /// Set the wait between attempts.
    pub fn retry_period(mut self, d: Duration) -> Self {
        self.config.retry_period = d;
        self
    }

    /// Release the lease on stop so the next candidate takes over at once.
    pub fn release_on_cancel(mut self, yes: bool) -> Self {
        self.config.release_on_cancel = yes;
        self
    }

    /// After losing leadership, compete again instead of ending.
    pub fn rejoin(mut self, yes: bool) -> Self {
        self.config.rejoin = yes;
        self
    }

    /// Watch the Lease to act on changes within a round trip (see [`ElectorConfig::watch`]).
    pub fn watch(mut self, yes: bool) -> Self {
        self.config.watch = yes;
        self
    }

    /// Cap each request at `d` (see [`ElectorConfig::request_timeout`]).
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.config.request_timeout = Some(d);
        self
    }

    /// Give the release on stop at most `d` (see [`ElectorConfig::release_timeout`]).
    pub fn release_timeout(mut self, d: Duration) -> Self {
        self.config.release_timeout = d;
        self
    }

    /// Replace all timing and behaviour settings at once.
    pub fn config(mut self, config: ElectorConfig) -> Self {
        self.config = config;
        self
    }

    /// Use this clock (tests pass a [`crate::ManualClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Validate and build.
    pub fn build(self) -> Result<LeaderElector> {
        self.lock.validate()?;
        self.config.validate(self.lock.identity())?;
        Ok(LeaderElector {
            lock: self.lock,
            config: self.config,
            clock: self.clock,
            wake: Wakeup::new(),
        })
    }
}

/// A leader elector for one lock, ready to [`spawn`](LeaderElector::spawn).
///
/// ```
/// use lease_elector::testing::TestApiServer;
/// use lease_elector::{Client, ClientConfig, LeaderElector, LeaderEvent, LeaseLock};
/// use std::time::Duration;
///
/// let server = TestApiServer::start()?;
/// let client = Client::new(ClientConfig::new(server.url()))?;
/// let lock = LeaseLock::new(client, "default", "doc-example", "me");
/// let (handle, events) = LeaderElector::builder(lock)
///     .lease_duration(Duration::from_secs(15))
///     .renew_deadline(Duration::from_secs(10))
///     .retry_period(Duration::from_secs(2))
///     .release_on_cancel(true)
///     .build()?
///     .spawn()?;
/// loop {
///     match events.recv().expect("elector running") {
///         LeaderEvent::StartedLeading { .. } => break,
///         LeaderEvent::NewLeader { identity, .. } => println!("leader is {identity}"),
///         LeaderEvent::StoppedLeading { .. } => unreachable!("never led"),
///     }
/// }
/// assert!(handle.is_leader());
/// handle.stop()?; // releases the lease
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct LeaderElector {
    lock: Box<dyn Lock>,
    config: ElectorConfig,
    clock: Arc<dyn Clock>,
    wake: Wakeup,
}

impl LeaderElector {
    /// Start building an elector on `lock`, with [`ElectorConfig::default`] timings.
    pub fn builder(lock: impl Lock + 'static) -> ElectorBuilder {
        ElectorBuilder {
            lock: Box::new(lock),
            config: ElectorConfig::default(),
            clock: Arc::new(SystemClock),
        }
    }

    /// The validated configuration.
    pub fn config(&self) -> &ElectorConfig {
        &self.config
    }

    /// Start the elector thread (`lease-elector/<namespace>/<name>`).
    ///
    /// Events arrive on the returned channel; it disconnects when the
    /// elector ends (after stop, or after losing leadership without `rejoin`).
    pub fn spawn(self) -> Result<(ElectorHandle, Receiver<LeaderEvent>)> {
        let watcher = if self.config.watch {
            match self.lock.watch(self.wake.clone(), self.config.retry_period) {
                Some(w) => Some(w?),
                None => {
                    log::warn!(
                        "lock {} cannot be watched; polling only",
                        self.lock.describe()
                    );
                    None
                }
            }
        } else {
            None
        };
        let (tx, rx) = mpsc::channel();
        let describe = self.lock.describe();
        let shared = Arc::new(Shared {
            state: Mutex::new(SharedState::default()),
            wake: self.wake.clone(),
            clock: self.clock.clone(),
            config: self.config.clone(),
            describe: describe.clone(),
            identity: self.lock.identity().to_string(),
            skip_release: AtomicBool::new(false),
        });
        let run = Run {
            lock: self.lock,
            shared: shared.clone(),
            events: tx,
            observed: None,
            observed_at: self.clock.now(),
            written: Vec::new(),
            reported_leader: None,
            jitter: RandomState::new(),
            jitter_count: 0,
        };
        let thread = thread::Builder::new()
            .name(crate::names::thread_name(&["lease-elector", &describe]))
            .spawn(move || run.run())
            .map_err(Error::Spawn)?;
        Ok((
            ElectorHandle {
                shared,
                thread: Some(thread),
                watcher,
            },
            rx,
        ))
    }
}

#[derive(Debug, Default)]
struct Counters {
    attempts: u64,
    renews: u64,
    slow_path_renews: u64,
    transitions: u64,
    requests: u64,
    consecutive_failures: u64,
}

/// A failure of the same kind is logged at warn at most this often.
const FAILURE_LOG_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug, Default)]
struct SharedState {
    leading: bool,
    last_renew: Option<Instant>,
    leader: Option<String>,
    /// When the last term ended `Lost` (cleared when leading again).
    lost_at: Option<Instant>,
    last_renew_wall: Option<std::time::SystemTime>,
    counters: Counters,
    last_error: Option<LastError>,
    /// The kind of failure last logged at warn, and when.
    logged_failure: Option<(FailureKind, Instant)>,
    /// Another process renews the lease under our identity.
    duplicate_identity: bool,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<SharedState>,
    wake: Wakeup,
    clock: Arc<dyn Clock>,
    config: ElectorConfig,
    describe: String,
    identity: String,
    /// Set by a `Drop` during a panic: stop without releasing.
    skip_release: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, SharedState> {
        // Plain data, written whole: a poisoned guard is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Controls a running elector; dropping it stops the elector (releasing
/// the lease when configured) and joins its thread.
#[derive(Debug)]
pub struct ElectorHandle {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<Result<()>>>,
    watcher: Option<Watcher>,
}

/// A cheap, cloneable, thread-safe view of a running elector, for a
/// health endpoint or a metrics thread: everything [`ElectorHandle`]
/// answers without stopping it. Never blocks on the network.
#[derive(Debug, Clone)]
pub struct Probe {
    shared: Arc<Shared>,
}

impl Probe {
    /// True while this candidate leads and its last renew is younger than
    /// the renew deadline. Never blocks on the network.
    pub fn is_leader(&self) -> bool {
        let st = self.shared.lock();
        match (st.leading, st.last_renew) {
            (true, Some(at)) => {
                self.shared.clock.now() < add_saturating(at, self.shared.config.renew_deadline)
            }
            _ => false,
        }
    }

    /// When the last successful acquire or renew request started, on the
    /// elector's clock (of the current term, or the last one after it
    /// ended); `None` before it first led.
    pub fn last_renew(&self) -> Option<Instant> {
        self.shared.lock().last_renew
    }

    /// The last observed holder of the lease, if any. Never blocks on the network.
    pub fn leader(&self) -> Option<String> {
        self.shared.lock().leader.clone()
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.shared.identity
    }

    /// `namespace/name` of the lock.
    pub fn describe(&self) -> &str {
        &self.shared.describe
    }

    /// Health check like client-go's `HealthzAdaptor`: an error when this
    /// candidate believes it leads but has not renewed for
    /// `lease_duration + max_tolerable_expired_lease`, and also when its
    /// last term ended `Lost` more than `max_tolerable_expired_lease` ago and
    /// it has not led since: a process that should have stopped working
    /// (client-go's users exit on loss) but is still running. With
    /// `rejoin`, leading again clears it; a rejoined follower that has not
    /// led again counts as unhealthy too, so pick the tolerance to match.
    pub fn check(&self, max_tolerable_expired_lease: Duration) -> Result<()> {
        let st = self.shared.lock();
        let now = self.shared.clock.now();
        let lock = || self.shared.describe.clone();
        if let (false, Some(lost_at)) = (st.leading, st.lost_at) {
            let since_loss = now.saturating_duration_since(lost_at);
            if since_loss > max_tolerable_expired_lease {
                return Err(Error::LostLeadership {
                    lock: lock(),
                    since_loss,
                    allowed: max_tolerable_expired_lease,
                });
            }
        }
        let (true, Some(at)) = (st.leading, st.last_renew) else {
            return Ok(());
        };
        let since_renew = now.saturating_duration_since(at);
        let allowed = self
            .shared
            .config
            .lease_duration
            .saturating_add(max_tolerable_expired_lease);
        if since_renew > allowed {
            return Err(Error::Unhealthy {
                lock: lock(),
                since_renew,
                allowed,
            });
        }
        Ok(())
    }

    /// True when another process was seen renewing this lease under this
    /// candidate's identity (it then never leads on that record; see the
    /// module docs). Cleared when this candidate leads.
    pub fn duplicate_identity(&self) -> bool {
        self.shared.lock().duplicate_identity
    }

    /// A snapshot of this elector's state and counters (never blocks on
    /// the network); see [`ElectorStatus`], and
    /// [`crate::status::render_prometheus`] for metrics.
    pub fn status(&self) -> ElectorStatus {
        let leading = self.is_leader();
        let st = self.shared.lock();
        let (namespace, name) = self
            .shared
            .describe
            .split_once('/')
            .unwrap_or(("", &self.shared.describe));
        let c = &st.counters;
        ElectorStatus {
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: self.shared.identity.clone(),
            leading,
            holder: st.leader.clone(),
            last_renew: st.last_renew,
            last_renew_wall: st.last_renew_wall,
            last_error: st.last_error.clone(),
            consecutive_failures: c.consecutive_failures,
            attempts: c.attempts,
            renews: c.renews,
            slow_path_renews: c.slow_path_renews,
            transitions: c.transitions,
            requests: c.requests,
            duplicate_identity: st.duplicate_identity,
            since_last_renew: st
                .last_renew
                .map(|at| self.shared.clock.now().saturating_duration_since(at)),
        }
    }
}

impl ElectorHandle {
    /// A view of this elector for other threads (see [`Probe`]).
    pub fn probe(&self) -> Probe {
        Probe {
            shared: self.shared.clone(),
        }
    }

    /// True while this candidate leads and its last renew is younger than
    /// the renew deadline. Never blocks on the network.
    pub fn is_leader(&self) -> bool {
        self.probe().is_leader()
    }

    /// When the last successful acquire or renew request started, on the
    /// elector's clock (of the current term, or the last one after it
    /// ended); `None` before it first led.
    pub fn last_renew(&self) -> Option<Instant> {
        self.probe().last_renew()
    }

    /// The last observed holder of the lease, if any. Never blocks on the network.
    pub fn leader(&self) -> Option<String> {
        self.probe().leader()
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.shared.identity
    }

    /// `namespace/name` of the lock.
    pub fn describe(&self) -> &str {
        &self.shared.describe
    }

    /// Health check; see [`Probe::check`].
    pub fn check(&self, max_tolerable_expired_lease: Duration) -> Result<()> {
        self.probe().check(max_tolerable_expired_lease)
    }

    /// See [`Probe::duplicate_identity`].
    pub fn duplicate_identity(&self) -> bool {
        self.probe().duplicate_identity()
    }

    /// A snapshot of this elector's state and counters; see [`Probe::status`].
    pub fn status(&self) -> ElectorStatus {
        self.probe().status()
    }

    /// True once the elector thread has ended.
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Stop the elector and wait for its thread. When it was leading,
    /// `StoppedLeading` is sent, then (with `release_on_cancel`) the lease
    /// is released; a failed release is returned (the lease then expires
    /// normally).
    ///
    /// Bounded whatever the server does: the request in flight is abandoned
    /// at once, the release has [`ElectorConfig::release_timeout`] (5 s by
    /// default), queued Events at most their request time-out (5 s) when
    /// the lock holds the recorder's last reference, and a TCP connect in
    /// progress (the one step that cannot be cut short) at most 5 s: at
    /// most 15 s with default settings, inside a pod's 30 s grace period.
    pub fn stop(mut self) -> Result<()> {
        self.stop_and_join()
    }

    /// Lease changes reported by the watch (0 without one).
    pub fn watch_changes(&self) -> u64 {
        self.watcher.as_ref().map_or(0, Watcher::changes)
    }

    fn stop_and_join(&mut self) -> Result<()> {
        // The watch winds down (a connect in progress) while the elector
        // steps down and releases; it is joined after.
        if let Some(w) = &self.watcher {
            w.signal_stop();
        }
        self.shared.wake.stop();
        let result = match self.thread.take() {
            Some(t) => t.join().unwrap_or_else(|_| {
                Err(Error::ThreadPanicked {
                    lock: self.shared.describe.clone(),
                })
            }),
            None => Ok(()),
        };
        // After the elector (and its release) is done: drop joins the watch.
        self.watcher = None;
        result
    }
}

impl Drop for ElectorHandle {
    /// Stops the elector like [`ElectorHandle::stop`]. During a panic the
    /// lease is *not* released: the caller's workers may still be running,
    /// and client-go's rule is that the guarded work must have stopped
    /// before the lease is handed over. It then expires normally.
    fn drop(&mut self) {
        if thread::panicking() {
            self.shared.skip_release.store(true, Ordering::Relaxed);
        }
        if let Err(e) = self.stop_and_join() {
            log::error!("stopping leader election on {}: {e}", self.shared.describe);
        }
    }
}

/// How a leadership term ended.
enum TermEnd {
    Stopped,
    Lost,
}

/// At most this many unconfirmed writes are remembered as ours.
const MAX_PENDING_WRITES: usize = 8;

/// The state owned by the elector thread.
struct Run {
    lock: Box<dyn Lock>,
    shared: Arc<Shared>,
    events: Sender<LeaderEvent>,
    /// The record as last observed, and when (local clock) it last changed.
    observed: Option<LeaderElectionRecord>,
    observed_at: Instant,
    /// Records this process wrote: the last confirmed one first, then any
    /// sent since without a confirmed answer (a write whose answer was lost
    /// may still have landed). A record under our identity that is none of
    /// these was written by someone else using the same identity.
    written: Vec<LeaderElectionRecord>,
    reported_leader: Option<String>,
    jitter: RandomState,
    jitter_count: u64,
}

impl Run {
    fn cfg(&self) -> &ElectorConfig {
        &self.shared.config
    }

    fn now(&self) -> Instant {
        self.shared.clock.now()
    }

    fn emit(&self, event: LeaderEvent) {
        // A caller that dropped its receiver just doesn't listen.
        let _ = self.events.send(event);
    }

    /// A budget on the elector's clock, ended early by `stop()`.
    fn deadline(&self, at: Instant) -> Deadline {
        Deadline::at(self.shared.clock.clone(), at).cancelled_by(&self.shared.wake)
    }

    fn run(mut self) -> Result<()> {
        loop {
            if !self.acquire() {
                return Ok(());
            }
            match self.renew() {
                TermEnd::Stopped => {
                    self.step_down(StopReason::Stopped);
                    return self.release();
                }
                TermEnd::Lost => {
                    self.step_down(StopReason::Lost);
                    if !self.cfg().rejoin {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Attempt until the lease is ours; false when stopped.
    ///
    /// After an attempt that failed (an error, or no answer) the next one
    /// is a jittered retry period away (or the server's clamped
    /// `Retry-After`): a fleet of candidates is a gentle client of a failing
    /// API server. Only an answered attempt that showed a held lease may
    /// wake earlier, at that lease's observed expiry.
    fn acquire(&mut self) -> bool {
        let desc = self.shared.describe.clone();
        log::info!("attempting to acquire leader lease {desc}...");
        loop {
            if self.shared.wake.is_stopped() {
                return false;
            }
            let start = self.now();
            let attempt =
                self.try_acquire_or_renew(&self.deadline(start + self.cfg().renew_deadline));
            self.maybe_report_transition();
            self.note_attempt(&attempt, "acquiring");
            let stopped = match attempt {
                Ok(true) => {
                    self.start_term(start);
                    return true;
                }
                // A poke (the watched Lease changed) only makes the next
                // attempt earlier; the expiry rule still decides.
                Ok(false) => {
                    let pause = self
                        .jittered(self.cfg().retry_period)
                        .min(self.until_expiry());
                    self.shared.clock.sleep(pause, &self.shared.wake) == Wake::Stopped
                }
                // After a failure, nothing shortens the pause: a failing
                // server sees at most one attempt per retry period.
                Err(_) => {
                    let pause = self
                        .jittered(self.cfg().retry_period)
                        .max(retry_after(&attempt));
                    self.pause(pause)
                }
            };
            if stopped {
                return false;
            }
        }
    }

    /// Count an attempt, and make a failing set-up visible: the first
    /// failure of a kind is logged at warn with what to check, repeats of
    /// the same kind at most once a minute, and recovery once.
    fn note_attempt(&mut self, attempt: &Result<bool>, doing: &str) {
        let now = self.now();
        let desc = &self.shared.describe;
        let namespace = desc.split_once('/').map_or("", |(ns, _)| ns);
        let mut st = self.shared.lock();
        st.counters.attempts += 1;
        let e = match attempt {
            Ok(won) => {
                if *won {
                    st.counters.renews += 1;
                    st.last_renew_wall = Some(self.shared.clock.system_time());
                }
                if st.counters.consecutive_failures > 0 {
                    log::info!(
                        "lease {desc}: requests succeed again after {} failed attempt(s)",
                        st.counters.consecutive_failures
                    );
                }
                st.counters.consecutive_failures = 0;
                st.logged_failure = None;
                return;
            }
            // A stop cut the request short: not a failure of the set-up.
            Err(_) if self.shared.wake.is_stopped() => return,
            Err(e) => e,
        };
        let kind = FailureKind::of(e);
        st.counters.consecutive_failures += 1;
        st.last_error = Some(LastError {
            kind,
            message: e.to_string(),
            at: now,
        });
        let repeat_due = match st.logged_failure {
            Some((k, at)) => k != kind || now.saturating_duration_since(at) >= FAILURE_LOG_EVERY,
            None => true,
        };
        if repeat_due {
            st.logged_failure = Some((kind, now));
            log::warn!(
                "error {doing} lease {desc}: {e} ({}; {} failed attempt(s) in a row)",
                kind.hint(namespace),
                st.counters.consecutive_failures
            );
        } else {
            log::debug!("error {doing} lease {desc}: {e}");
        }
    }

    fn start_term(&mut self, start: Instant) {
        {
            let mut st = self.shared.lock();
            st.leading = true;
            st.last_renew = Some(start);
            st.lost_at = None;
            st.duplicate_identity = false;
        }
        self.lock
            .record_event(&format!("{} became leader", self.lock.identity()));
        log::info!("successfully acquired lease {}", self.shared.describe);
        // Stamped when the write is known to have succeeded: the attempt's
        // start can precede the previous holder's release, and `at` must
        // order terms exactly.
        let at = self.now();
        self.emit(LeaderEvent::StartedLeading { at });
    }

    /// Renew every retry period until stopped, or until no renew succeeded
    /// for `renew_deadline` since the start of the last successful one.
    ///
    /// That instant is the round's one deadline: every request of every
    /// attempt in the round draws from it, so the round cannot overrun it.
    fn renew(&mut self) -> TermEnd {
        let desc = self.shared.describe.clone();
        loop {
            let Some(last) = self.shared.lock().last_renew else {
                return TermEnd::Lost;
            };
            let round_end = last + self.cfg().renew_deadline;
            // Never sleep past the deadline: after a slow renew, less than a
            // retry period may be left before we must step down.
            let left = round_end.saturating_duration_since(self.now());
            if self.pause(self.cfg().retry_period.min(left)) {
                return TermEnd::Stopped;
            }
            loop {
                let start = self.now();
                if start >= round_end {
                    log::info!("failed to renew lease {desc}: timed out waiting for the condition");
                    return TermEnd::Lost;
                }
                let attempt = self.try_acquire_or_renew(&self.deadline(round_end));
                self.maybe_report_transition();
                self.note_attempt(&attempt, "renewing");
                match attempt {
                    Ok(true) => {
                        self.shared.lock().last_renew = Some(start);
                        log::debug!("successfully renewed lease {desc}");
                        break;
                    }
                    Ok(false) if self.held_by_other() => {
                        log::info!("lease {desc} is now held by another candidate; stepping down");
                        return TermEnd::Lost;
                    }
                    Ok(false) => {}
                    Err(_) if self.shared.wake.is_stopped() => return TermEnd::Stopped,
                    Err(_) => {}
                }
                // As client-go's PollImmediateUntil: the next attempt is a
                // retry period after this one *started* (at once if this
                // one took longer), so a request abandoned at the cap
                // leaves room for a retry inside the deadline.
                let now = self.now();
                let left = round_end.saturating_duration_since(now);
                let pause = (start + self.cfg().retry_period)
                    .saturating_duration_since(now)
                    .max(retry_after(&attempt))
                    .min(left);
                if self.pause(pause) {
                    return TermEnd::Stopped;
                }
            }
        }
    }

    /// Leave the leading state and tell the caller (before any release, so
    /// the caller stops working before anyone else can start).
    fn step_down(&mut self, reason: StopReason) {
        let at = self.now();
        {
            let mut st = self.shared.lock();
            st.leading = false;
            if reason == StopReason::Lost {
                st.lost_at = Some(at);
            }
        }
        self.lock
            .record_event(&format!("{} stopped leading", self.lock.identity()));
        log::info!("stopped leading lease {}", self.shared.describe);
        self.emit(LeaderEvent::StoppedLeading { at, reason });
    }

    /// Hand the lease back (when configured): empty holder, 1s duration,
    /// transitions kept. Its own budget, `release_timeout`, not cut by the
    /// stop that asked for it.
    fn release(&mut self) -> Result<()> {
        if !self.cfg().release_on_cancel
            || self.shared.skip_release.load(Ordering::Relaxed)
            || !self.is_leader_of_observed()
        {
            return Ok(());
        }
        let deadline = Deadline::after(self.shared.clock.clone(), self.cfg().release_timeout);
        let now = MicroTime::from_system_time(self.shared.clock.system_time());
        let observed = self.observed.clone().unwrap_or_default();
        let record = LeaderElectionRecord {
            holder_identity: String::new(),
            lease_duration_seconds: 1,
            acquire_time: Some(now),
            renew_time: Some(now),
            ..observed
        };
        let mut result = self.lock.update(&record, &deadline);
        // A renew that stop() cut short may have landed after all: the
        // conflict is then with ourselves, and a fresh read shows it.
        if matches!(&result, Err(e) if e.is_conflict())
            && matches!(self.lock.get(&deadline), Ok(current) if self.is_ours(&current))
        {
            result = self.lock.update(&record, &deadline);
        }
        match result {
            Ok(()) => {
                log::info!("released lease {}", self.shared.describe);
                self.set_observed(record);
                self.shared.lock().leader = None;
                Ok(())
            }
            // Someone else wrote since our last renew: the lease is not
            // ours to release any more.
            Err(e) if e.is_conflict() => {
                log::info!(
                    "lease {} changed since our last renew; not releasing",
                    self.shared.describe
                );
                Ok(())
            }
            Err(e) => {
                log::error!("failed to release lease {}: {e}", self.shared.describe);
                Err(e)
            }
        }
    }

    /// One attempt, as client-go's `tryAcquireOrRenew`, within `round`:
    /// each request gets the per-request cap, never more than is left.
    /// `Ok(true)` when the lease is held by us after this call.
    fn try_acquire_or_renew(&mut self, round: &Deadline) -> Result<bool> {
        let cap = self.cfg().request_cap();
        let now_wall = MicroTime::from_system_time(self.shared.clock.system_time());
        let mut record = LeaderElectionRecord {
            holder_identity: self.lock.identity().to_string(),
            lease_duration_seconds: self.cfg().lease_duration.as_secs() as i32,
            acquire_time: Some(now_wall),
            renew_time: Some(now_wall),
            leader_transitions: 0,
            strategy: None,
            preferred_holder: None,
        };

        // 1. Fast path for the leader: one PUT against the cached version.
        if self.is_leader_of_observed() && self.is_lease_valid(self.now()) {
            if let Some(old) = &self.observed {
                record.acquire_time = old.acquire_time;
                record.leader_transitions = old.leader_transitions;
                record.strategy = old.strategy.clone();
                record.preferred_holder = old.preferred_holder.clone();
            }
            match self.write(&record, &round.capped(cap), false) {
                Ok(()) => return Ok(true),
                Err(e) if e.is_transport() => return Err(e),
                Err(e) => log::debug!(
                    "failed to update lease {} optimistically: {e}, falling back to slow path",
                    self.shared.describe
                ),
            }
        }

        // 2. Obtain or create the record.
        let slow_path = self.is_leader_of_observed();
        self.shared.lock().counters.requests += 1;
        let old = match self.lock.get(&round.capped(cap)) {
            Ok(old) => old,
            Err(e) if e.is_not_found() => {
                self.write(&record, &round.capped(cap), true)?;
                return Ok(true);
            }
            Err(e) => return Err(e),
        };

        // 3. Judge expiry by when *we* saw the record change, never by its renewTime.
        if self.observed.as_ref() != Some(&old) {
            self.note_same_identity(&old);
            self.set_observed(old.clone());
        }
        let ours = self.is_ours(&old);
        if !old.holder_identity.is_empty() && self.is_lease_valid(self.now()) && !ours {
            log::debug!(
                "lease {} is held by {} and has not yet expired",
                self.shared.describe,
                old.holder_identity
            );
            return Ok(false);
        }

        // 4. Ours to take or keep.
        if ours {
            record.acquire_time = old.acquire_time;
            record.leader_transitions = old.leader_transitions;
        } else {
            record.leader_transitions = old.leader_transitions.saturating_add(1);
        }
        record.strategy = old.strategy.clone();
        record.preferred_holder = old.preferred_holder.clone();
        self.write(&record, &round.capped(cap), false)?;
        if slow_path {
            self.shared.lock().counters.slow_path_renews += 1;
        }
        Ok(true)
    }

    /// Create or update the lock with `record`, remembering it as ours
    /// whatever the answer (a write whose answer was lost may have landed).
    fn write(
        &mut self,
        record: &LeaderElectionRecord,
        deadline: &Deadline,
        create: bool,
    ) -> Result<()> {
        if self.written.len() > MAX_PENDING_WRITES {
            self.written.remove(1);
        }
        self.written.push(record.clone());
        self.shared.lock().counters.requests += 1;
        if create {
            self.lock.create(record, deadline)?;
        } else {
            self.lock.update(record, deadline)?;
        }
        self.written = vec![record.clone()];
        self.set_observed(record.clone());
        Ok(())
    }

    /// A record under our identity that this process did not write means
    /// another process uses the same identity. Seen once, it may be a
    /// previous run of ours (it is waited out like any other holder's);
    /// seen changing, someone is renewing it: report it.
    fn note_same_identity(&mut self, new: &LeaderElectionRecord) {
        if new.holder_identity != self.lock.identity() || self.is_ours(new) {
            return;
        }
        let renewed = self
            .observed
            .as_ref()
            .is_some_and(|old| old.holder_identity == new.holder_identity && !self.is_ours(old));
        let desc = &self.shared.describe;
        let identity = self.lock.identity();
        if !renewed {
            log::info!(
                "lease {desc} is held under our identity {identity:?} by a record this process did not write (a previous run?); waiting for it to expire"
            );
            return;
        }
        let first = !std::mem::replace(&mut self.shared.lock().duplicate_identity, true);
        if first {
            log::error!(
                "lease {desc} is being renewed under our identity {identity:?} by another process: two candidates share one identity; not leading until it stops (give each candidate a unique identity)"
            );
        }
    }

    fn set_observed(&mut self, record: LeaderElectionRecord) {
        self.observed = Some(record);
        self.observed_at = self.now();
    }

    /// Written by this process (matched on the times it wrote, which the
    /// server keeps as sent).
    fn is_ours(&self, r: &LeaderElectionRecord) -> bool {
        r.holder_identity == self.lock.identity()
            && self
                .written
                .iter()
                .any(|w| w.renew_time == r.renew_time && w.acquire_time == r.acquire_time)
    }

    fn is_leader_of_observed(&self) -> bool {
        self.observed.as_ref().is_some_and(|r| self.is_ours(r))
    }

    fn held_by_other(&self) -> bool {
        self.observed
            .as_ref()
            .is_some_and(|r| !r.holder_identity.is_empty() && !self.is_ours(r))
    }

    /// When the observed record expires: its duration after we saw it change.
    fn observed_expiry(&self) -> Instant {
        let duration = self
            .observed
            .as_ref()
            .map_or(Duration::ZERO, LeaderElectionRecord::lease_duration);
        add_saturating(self.observed_at, duration)
    }

    fn is_lease_valid(&self, now: Instant) -> bool {
        self.observed_expiry() > now
    }

    /// Time until the observed lease of another holder expires (plus a
    /// millisecond so the attempt sees it expired); waking then, rather than
    /// at the next jittered retry, makes crash failover take leaseDuration
    /// from the last observed change, not that plus a retry period.
    fn until_expiry(&self) -> Duration {
        match &self.observed {
            Some(r) if !r.holder_identity.is_empty() => self
                .observed_expiry()
                .saturating_duration_since(self.now())
                .saturating_add(Duration::from_millis(1)),
            _ => Duration::MAX,
        }
    }

    fn maybe_report_transition(&mut self) {
        let holder = self
            .observed
            .as_ref()
            .map(|r| r.holder_identity.clone())
            .filter(|h| !h.is_empty());
        if holder == self.reported_leader {
            return;
        }
        self.reported_leader = holder.clone();
        {
            let mut st = self.shared.lock();
            st.leader = holder.clone();
            if holder.is_some() {
                st.counters.transitions += 1;
            }
        }
        if let Some(identity) = holder {
            if identity != self.lock.identity() {
                log::info!("new leader elected on {}: {identity}", self.shared.describe);
            }
            let at = self.now();
            self.emit(LeaderEvent::NewLeader { identity, at });
        }
    }

    /// Sleep `d`, ignoring pokes; true when stopped.
    fn pause(&self, d: Duration) -> bool {
        let until = self.now() + d;
        loop {
            let left = until.saturating_duration_since(self.now());
            if left.is_zero() {
                return self.shared.wake.is_stopped();
            }
            match self.shared.clock.sleep(left, &self.shared.wake) {
                Wake::Stopped => return true,
                Wake::Elapsed => return false,
                Wake::Poked => continue,
            }
        }
    }

    /// `d * [1, 1 + JITTER_FACTOR)`, as `wait.Jitter`.
    fn jittered(&mut self, d: Duration) -> Duration {
        self.jitter_count += 1;
        let mut h = self.jitter.build_hasher();
        h.write_u64(self.jitter_count);
        let unit = (h.finish() >> 11) as f64 / (1u64 << 53) as f64;
        d.mul_f64(1.0 + unit * JITTER_FACTOR)
    }
}

/// The server's `Retry-After` (429, 503) clamped to
/// [`MAX_RETRY_AFTER`] (a [`Lock`] of the caller's may pass any value), or zero.
fn retry_after(attempt: &Result<bool>) -> Duration {
    match attempt {
        Err(Error::Api { status, .. }) => {
            status.retry_after.unwrap_or_default().min(MAX_RETRY_AFTER)
        }
        _ => Duration::ZERO,
    }
}

/// How the wait in [`wait_for_lost_leadership`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeadershipEnd {
    /// Leadership was lost (renew deadline passed, or another holder took over).
    Lost {
        /// When leadership ended, on the elector's clock.
        at: Instant,
    },
    /// The elector was stopped while leading (`ElectorHandle::stop` or drop).
    Stopped {
        /// When leadership ended, on the elector's clock.
        at: Instant,
    },
    /// The elector ended (its channel closed) without a `StoppedLeading`.
    ElectorEnded,
}

/// Block until `events` reports `StoppedLeading` or closes.
///
/// Other events are consumed (and logged at debug), so call this where
/// nothing else reads the channel, typically after `StartedLeading`.
pub fn wait_for_lost_leadership(events: &Receiver<LeaderEvent>) -> LeadershipEnd {
    loop {
        match events.recv() {
            Ok(LeaderEvent::StoppedLeading { at, reason }) => {
                return match reason {
                    StopReason::Lost => LeadershipEnd::Lost { at },
                    _ => LeadershipEnd::Stopped { at },
                }
            }
            Ok(other) => log::debug!("waiting for lost leadership: {other:?}"),
            Err(_) => return LeadershipEnd::ElectorEnded,
        }
    }
}

/// Opt-in, library-go style: block until leadership is lost, then log the
/// warning `leader election lost` and exit the process with status 0, so
/// the orchestrator restarts it as a fresh candidate.
///
/// Not the default: the elector itself only reports
/// [`LeaderEvent::StoppedLeading`]. Returns (without exiting) when the
/// elector was stopped deliberately or ended without leading.
pub fn exit_on_lost_leadership(events: &Receiver<LeaderEvent>) -> LeadershipEnd {
    match wait_for_lost_leadership(events) {
        LeadershipEnd::Lost { .. } => {
            log::warn!("leader election lost");
            log::logger().flush();
            std::process::exit(0)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(l: u64, r: u64, p: u64) -> ElectorConfig {
        ElectorConfig {
            lease_duration: Duration::from_secs(l),
            renew_deadline: Duration::from_secs(r),
            retry_period: Duration::from_secs(p),
            ..ElectorConfig::default()
        }
    }

    #[test]
    fn validation_follows_client_go() {
        assert!(cfg(15, 10, 2).validate("me").is_ok());
        assert!(cfg(137, 107, 26).validate("me").is_ok());
        assert!(cfg(270, 240, 60).validate("me").is_ok());
        let e = cfg(10, 10, 2).validate("me").unwrap_err().to_string();
        assert!(
            e.contains("leaseDuration must be greater than renewDeadline"),
            "{e}"
        );
        let e = cfg(15, 12, 10).validate("me").unwrap_err().to_string();
        assert!(
            e.contains("renewDeadline must be greater than retryPeriod*JitterFactor"),
            "{e}"
        );
        assert!(e.contains("12s") && e.contains("10s"), "{e}");
        // exactly 1.2x is not enough
        let mut c = cfg(15, 12, 10);
        c.renew_deadline = Duration::from_millis(1200);
        c.retry_period = Duration::from_secs(1);
        assert!(c.validate("me").is_err());
        let e = cfg(15, 10, 2).validate("").unwrap_err().to_string();
        assert!(e.contains("identity"), "{e}");
        let mut c = cfg(15, 10, 2);
        c.lease_duration = Duration::from_millis(15_500);
        assert!(c
            .validate("me")
            .unwrap_err()
            .to_string()
            .contains("whole number"));
        assert!(cfg(15, 10, 0).validate("me").is_err());
    }

    #[test]
    fn waits_for_stopped_leading() {
        let (tx, rx) = mpsc::channel();
        let at = Instant::now();
        tx.send(LeaderEvent::StartedLeading { at }).unwrap();
        tx.send(LeaderEvent::NewLeader {
            identity: "me".into(),
            at,
        })
        .unwrap();
        tx.send(LeaderEvent::StoppedLeading {
            at,
            reason: StopReason::Lost,
        })
        .unwrap();
        assert_eq!(wait_for_lost_leadership(&rx), LeadershipEnd::Lost { at });
        tx.send(LeaderEvent::StoppedLeading {
            at,
            reason: StopReason::Stopped,
        })
        .unwrap();
        // A deliberate stop is not a loss: the exiting helper returns.
        assert_eq!(exit_on_lost_leadership(&rx), LeadershipEnd::Stopped { at });
        tx.send(LeaderEvent::StartedLeading { at }).unwrap();
        drop(tx);
        assert_eq!(wait_for_lost_leadership(&rx), LeadershipEnd::ElectorEnded);
        // Blocks until the event arrives from another thread.
        let (tx, rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let sender = std::thread::spawn(move || {
            go_rx.recv().unwrap();
            tx.send(LeaderEvent::StoppedLeading {
                at,
                reason: StopReason::Lost,
            })
            .unwrap();
        });
        go_tx.send(()).unwrap();
        assert_eq!(wait_for_lost_leadership(&rx), LeadershipEnd::Lost { at });
        sender.join().unwrap();
    }
}
