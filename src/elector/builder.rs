//! [`ElectorBuilder`] and [`LeaderElector`]: validate, then start the thread.

use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use super::config::ElectorConfig;
use super::handle::{ElectorHandle, Stopper};
use super::io::{block_on, ThreadIo};
use super::leader_event::LeaderEvent;
use super::probe::Probe;
use super::receiver::LeaderEvents;
use super::run::Run;
use super::shared::Shared;
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
    /// How long non-leaders wait before taking over an unrenewed lease,
    /// counted from when they last saw it change (default 15 s, whole
    /// seconds; more than the renew deadline).
    pub fn lease_duration(mut self, d: Duration) -> Self {
        self.config.lease_duration = d;
        self
    }

    /// How long the leader retries a failing renew before its term ends,
    /// counted from the start of its last successful renew (default 10 s;
    /// more than 1.2 × the retry period).
    pub fn renew_deadline(mut self, d: Duration) -> Self {
        self.config.renew_deadline = d;
        self
    }

    /// The wait between attempts (default 2 s): a leader renews this
    /// often, a candidate retries every `retry_period × [1, 2.2)`. Every
    /// request a candidate makes is paced by it, so [`build`](Self::build)
    /// refuses one under 100 ms (a typo such as `2ms` beside a 10 s renew
    /// deadline passes client-go's rules):
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// use lease_elector::{Client, LeaderElector, LeaseLock};
    /// use std::time::Duration;
    ///
    /// let server = TestApiServer::start()?;
    /// let lock = LeaseLock::new(Client::new(server.client_config("a"))?, "default", "x", "a");
    /// let err = LeaderElector::builder(lock)
    ///     .retry_period(Duration::from_millis(2))
    ///     .build()
    ///     .unwrap_err();
    /// assert!(err.to_string().contains("retryPeriod must be at least 100ms (got 2ms)"), "{err}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn retry_period(mut self, d: Duration) -> Self {
        self.config.retry_period = d;
        self
    }

    /// Release the Lease when the elector is stopped while leading (a
    /// [`Stopper`], [`ElectorHandle::stop`], dropping the handle), so that
    /// the next candidate takes over at its next attempt instead of after
    /// a lease duration (default off, as client-go's `ReleaseOnCancel`;
    /// "cancel" is client-go's word for the stop). The release waits for
    /// the work to let go of its term, at most
    /// [`release_grace`](Self::release_grace).
    #[doc(alias = "release_on_stop")]
    pub fn release_on_cancel(mut self, yes: bool) -> Self {
        self.config.release_on_cancel = yes;
        self
    }

    /// After losing leadership, compete again instead of ending (default
    /// off: the elector ends, as client-go's does, and the program exits
    /// to be restarted afresh). The next term is sought only once the work
    /// of the lost one has let go of it (every [`Term`](crate::Term) of it
    /// dropped): one piece of work at a time. With
    /// [`spawn`](LeaderElector::spawn), drop a term's `Term`s when the
    /// term ends.
    pub fn rejoin(mut self, yes: bool) -> Self {
        self.config.rejoin = yes;
        self
    }

    /// Watch the Lease to act on every change within a round trip (one
    /// more thread and connection): on by default; `false` polls only, as
    /// client-go does. A server that refuses the watch gets polling
    /// anyway, with one warning naming the RBAC to grant (`watch` on
    /// `leases`). Polling goes on underneath, and the expiry rule is
    /// unchanged.
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

    /// The longest one request may take (each is also bounded by what is
    /// left of its renew round). Default: `max(renew_deadline / 2, 1 s)`,
    /// as client-go's `NewFromKubeconfig` sets, so that one hung request is
    /// abandoned in time for a retry inside the renew deadline. A server
    /// slower than the cap on every request loses the lease where an
    /// uncapped client would have kept it: raise it for such a server.
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.config.request_timeout = Some(d);
        self
    }

    /// The budget of the release on stop, its own (not what was left of a
    /// round): default 5 s.
    pub fn release_timeout(mut self, d: Duration) -> Self {
        self.config.release_timeout = d;
        self
    }

    /// How long a release on stop waits for the work to let go of its
    /// term (every [`Term`](crate::Term) the caller holds dropped; under
    /// [`LeaderElector::run`], the work returned): default 10 s. Past it
    /// the Lease is not released: it expires by itself, one lease duration
    /// after the last renew, as after a crash.
    pub fn release_grace(mut self, d: Duration) -> Self {
        self.config.release_grace = d;
        self
    }

    /// Give up acquiring when not leading `d` after the elector starts
    /// (default: keep trying): the elector then ends without leading
    /// (`run` returns [`Error::AcquireTimeout`]), having written nothing
    /// more. Judged between attempts, so an attempt in flight decides, and
    /// `ZERO` makes exactly one attempt; only the first term is waited for.
    /// A Lease left by a holder that crashed is taken over only after a
    /// whole lease duration seen unchanged: a shorter time-out never takes
    /// one.
    pub fn acquire_timeout(mut self, d: Duration) -> Self {
        self.config.acquire_timeout = Some(d);
        self
    }

    /// Replace all timing and behaviour settings at once.
    #[doc(hidden)]
    pub fn config(mut self, config: ElectorConfig) -> Self {
        self.config = config;
        self
    }

    /// Use this clock (the crate's tests pass a manual clock).
    #[doc(hidden)]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Check the settings (client-go's rules: `lease_duration >
    /// renew_deadline > 1.2 × retry_period`, the lease duration whole
    /// seconds) and the lock's names, and make the elector; nothing is
    /// sent yet. An [`Error::InvalidConfig`] names the rule broken.
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
    /// Start building an elector on `lock` (a [`LeaseLock`](crate::LeaseLock),
    /// or a [`Lock`] of one's own), with client-go's timings: lease 15 s,
    /// renew deadline 10 s, retry period 2 s.
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

    /// A view of this elector for other threads (see [`Probe`]), taken
    /// before it runs: so that a program whose main thread blocks in
    /// [`run`](LeaderElector::run) can serve `/healthz`, `/readyz`,
    /// `/leader` and `/metrics` ([`HealthServer`], feature `health`)
    /// or render [`render_prometheus`](crate::render_prometheus) into an
    /// HTTP server of its own. Until it runs, the probe reports a
    /// follower that has not yet asked the API server.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// use lease_elector::{render_prometheus, Client, ClientConfig, LeaderElector, LeaseLock};
    ///
    /// let server = TestApiServer::start()?;
    /// let lock = LeaseLock::new(Client::new(ClientConfig::new(server.url()))?, "default", "jobs", "me");
    /// let elector = LeaderElector::builder(lock).build()?;
    /// let probe = elector.probe(); // e.g. for health::HealthServer::start("0.0.0.0:8080", vec![probe], ..)
    /// assert!(!probe.is_leader());
    /// let stopper = elector.stopper();
    /// elector.run(|term| {
    ///     assert!(probe.is_leader());
    ///     let metrics = render_prometheus(&[probe.status()]);
    ///     assert!(metrics.contains("leader_election_master_status{name=\"jobs\"} 1"));
    ///     # let _ = term;
    ///     stopper.stop();
    /// })?;
    /// assert!(!probe.is_leader());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg_attr(
        feature = "health",
        doc = "[`HealthServer`]: crate::health::HealthServer"
    )]
    #[cfg_attr(
        not(feature = "health"),
        doc = "[`HealthServer`]: https://docs.rs/lease-elector/latest/lease_elector/health/struct.HealthServer.html"
    )]
    pub fn probe(&self) -> Probe {
        Probe::new(self.shared.clone())
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
        if let Some(w) = &watcher {
            *shared
                .watch
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(w.state());
        }
        Ok((ElectorHandle::new(shared, thread, watcher), events))
    }
}
