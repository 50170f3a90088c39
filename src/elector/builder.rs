//! [`ElectorBuilder`] and [`LeaderElector`]: validate, then start the thread.

use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use super::config::ElectorConfig;
use super::handle::{ElectorHandle, Stopper};
use super::io::{block_on, ThreadIo};
use super::receiver::LeaderEvents;
use super::run::Run;
use super::shared::Shared;
use super::LeaderEvent;
use crate::clock::{Clock, SystemClock, Wakeup};
use crate::error::{Error, Result};
use crate::lock::Lock;

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

    /// Watch the Lease to act on every change within a round trip: on by
    /// default; `false` polls only, as client-go does (see
    /// [`ElectorConfig::watch`]). A server that refuses the watch gets
    /// polling anyway, with one warning naming the RBAC to grant.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// use lease_elector::{Client, ClientConfig, LeaderElector, LeaseLock, WatchMode};
    ///
    /// let server = TestApiServer::start()?;
    /// let lock = LeaseLock::new(Client::new(ClientConfig::new(server.url()))?, "default", "x", "me");
    /// let (handle, _events) = LeaderElector::builder(lock).watch(false).build()?.spawn()?;
    /// assert_eq!(handle.probe().status().watch, WatchMode::Off);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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

    /// Wait at most `d` for the work to let go of its term before a
    /// release on stop (see [`ElectorConfig::release_grace`]).
    pub fn release_grace(mut self, d: Duration) -> Self {
        self.config.release_grace = d;
        self
    }

    /// Give up acquiring after `d` without leading (see
    /// [`ElectorConfig::acquire_timeout`]).
    pub fn acquire_timeout(mut self, d: Duration) -> Self {
        self.config.acquire_timeout = Some(d);
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
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared::new(
            Wakeup::new(),
            self.clock,
            self.config,
            self.lock.describe(),
            self.lock.identity().to_string(),
            tx,
        ));
        Ok(LeaderElector {
            lock: self.lock,
            shared,
            rx,
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
///         other => unreachable!("never led: {other:?}"),
///     }
/// }
/// assert!(handle.probe().is_leader());
/// handle.stop()?; // releases the lease
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct LeaderElector {
    lock: Box<dyn Lock>,
    pub(super) shared: Arc<Shared>,
    rx: Receiver<LeaderEvent>,
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
    #[doc(hidden)]
    pub fn config(&self) -> &ElectorConfig {
        &self.shared.config
    }

    /// A stop for this elector that another thread (a SIGTERM handler's)
    /// can use once it runs, by [`run`](LeaderElector::run) or
    /// [`spawn`](LeaderElector::spawn). A stop asked for before it runs
    /// ends it at its start.
    pub fn stopper(&self) -> Stopper {
        Stopper::new(self.shared.clone())
    }

    /// Start the elector thread (`lease-elector/<namespace>/<name>`).
    ///
    /// Events arrive on the returned channel; it disconnects when the
    /// elector ends (after stop, or after losing leadership without `rejoin`).
    pub fn spawn(self) -> Result<(ElectorHandle, LeaderEvents)> {
        let shared = self.shared;
        let config = &shared.config;
        let watcher = if config.watch {
            match self.lock.watch(shared.wake.clone(), config.retry_period) {
                Some(w) => Some(w?),
                // A lock of the caller's without a watch: it polls, as asked
                // of it (the status says `Off`).
                None => {
                    log::debug!(
                        "lock {} cannot be watched; polling only",
                        self.lock.describe()
                    );
                    None
                }
            }
        } else {
            None
        };
        let describe = shared.describe.clone();
        let io = ThreadIo {
            lock: self.lock,
            clock: shared.clock.clone(),
        };
        let run = Run::new(io, shared.clone(), crate::random::seed());
        let thread = thread::Builder::new()
            .name(crate::names::thread_name(&["lease-elector", &describe]))
            .spawn(move || block_on(run.run()))
            .map_err(Error::Spawn)?;
        let events = LeaderEvents::new(self.rx, shared.clone());
        Ok((ElectorHandle::new(shared, thread, watcher), events))
    }
}
