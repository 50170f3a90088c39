//! [`Probe`]: the read-only view of a running elector. Every accessor lives
//! here once; [`ElectorHandle::probe`](super::ElectorHandle::probe) and
//! [`LeaderElector::probe`](super::LeaderElector::probe) hand it out.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::shared::Shared;
use super::term::Term;
use crate::duration::tenths;
use crate::error::{Error, Result};
use crate::status::{ElectorStatus, FailureKind};

/// A cheap, cloneable, thread-safe view of a running elector, for a
/// health endpoint, a metrics thread or the work itself. Never blocks on
/// the network. [`ElectorHandle::probe`](super::ElectorHandle::probe) gives
/// one for an elector started with `spawn`, and
/// [`LeaderElector::probe`](super::LeaderElector::probe) one for an elector
/// about to [`run`](super::LeaderElector::run).
///
/// For metrics, [`render_prometheus`](crate::render_prometheus) of
/// [`status`](Probe::status) is the Prometheus text; the `health` feature's
/// [`HealthServer`] serves it with `/healthz` and `/readyz`.
///
/// ```
/// use lease_elector::testing::TestApiServer;
/// use lease_elector::{Client, ClientConfig, LeaderElector, LeaderEvent, LeaseLock};
///
/// let server = TestApiServer::start()?;
/// let lock = LeaseLock::new(Client::new(ClientConfig::new(server.url()))?, "default", "jobs", "me");
/// let (handle, events) = LeaderElector::builder(lock).build()?.spawn()?;
/// let probe = handle.probe(); // for another thread
/// let term = loop {
///     if let LeaderEvent::StartedLeading { term, .. } = events.recv()? {
///         break term;
///     }
/// };
/// assert!(probe.is_leader());
/// assert_eq!(probe.leader().as_deref(), Some("me"));
/// assert_eq!(probe.status().term_token, Some(term.token()));
/// drop(term);
/// handle.stop()?;
/// assert!(!probe.is_leader());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[cfg_attr(
    feature = "health",
    doc = "[`HealthServer`]: crate::health::HealthServer"
)]
#[cfg_attr(
    not(feature = "health"),
    doc = "[`HealthServer`]: https://docs.rs/lease-elector/latest/lease_elector/health/struct.HealthServer.html"
)]
pub struct Probe {
    shared: Arc<Shared>,
}

impl Probe {
    pub(super) fn new(shared: Arc<Shared>) -> Probe {
        Probe { shared }
    }

    /// True while this candidate leads and its last renew is younger than
    /// the renew deadline (the current [`Term`] is current).
    pub fn is_leader(&self) -> bool {
        let term = self.shared.current_term();
        term.is_some_and(|t| t.is_current())
    }

    /// The term in progress (current or not), without a hold.
    #[cfg(feature = "testing")]
    pub(crate) fn term_in_progress(&self) -> Option<Term> {
        self.shared.current_term()
    }

    /// The last term started, also once over, without a hold.
    #[cfg(feature = "testing")]
    pub(crate) fn last_term_started(&self) -> Option<Term> {
        self.shared.lock().latest.as_ref().map(Term::share)
    }

    /// The term in progress, while this candidate leads (it may have
    /// passed its deadline a moment ago: ask [`Term::is_current`]).
    pub fn term(&self) -> Option<Term> {
        self.shared.lock().term().map(Term::held)
    }

    /// When the last successful acquire or renew request started, on the
    /// elector's clock (of the current term, or the last one after it
    /// ended); `None` before it first led.
    pub fn last_renew(&self) -> Option<Instant> {
        self.shared.lock().latest.as_ref().map(Term::last_renew)
    }

    /// The last observed holder of the lease, if any, as the server holds
    /// it (escape it with [`crate::text::escape`] before showing it).
    pub fn leader(&self) -> Option<String> {
        self.shared.know(|lease| lease.holder().map(str::to_string))
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.shared.identity
    }

    /// `namespace/name` of the lock.
    pub fn describe(&self) -> &str {
        &self.shared.describe
    }

    /// Liveness, like client-go's `HealthzAdaptor`: an error when this
    /// candidate believes it leads but has not renewed for
    /// `lease_duration + max_tolerable_expired_lease`, and also when its
    /// last term ended `Lost` more than `max_tolerable_expired_lease` ago and
    /// it has not led since: a process that should have stopped working
    /// (client-go's users exit on loss) but is still running. With
    /// `rejoin`, leading again clears it; a rejoined follower that has not
    /// led again counts as unhealthy too, so pick the tolerance to match.
    ///
    /// A follower that cannot reach the API server, or is forbidden, is
    /// healthy here (client-go's rule: restarting it would not help); see
    /// [`Probe::check_ready`] for that.
    pub fn check(&self, max_tolerable_expired_lease: Duration) -> Result<()> {
        let st = self.shared.lock();
        let now = self.shared.now();
        let lock = || self.shared.describe.clone();
        let lost_at = st.latest.as_ref().and_then(Term::lost_at);
        if let (None, Some(lost_at)) = (st.term(), lost_at) {
            let since_loss = now.saturating_duration_since(lost_at);
            if since_loss > max_tolerable_expired_lease {
                return Err(Error::LostLeadership {
                    lock: lock(),
                    since_loss,
                    allowed: max_tolerable_expired_lease,
                });
            }
        }
        let Some(at) = st.term().map(Term::last_renew) else {
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

    /// Readiness, beyond client-go: an error when this candidate, leader
    /// or follower, has had no successful request to the API server for
    /// longer than `max_without_success` (counted from the start before the
    /// first), or its last attempt was refused with 403 Forbidden. So a
    /// Deployment whose RBAC is broken, or that is cut off from the API
    /// server, shows it (client-go's health check stays green for such a
    /// follower, as [`Probe::check`] does).
    pub fn check_ready(&self, max_without_success: Duration) -> Result<()> {
        let st = self.shared.lock();
        let not_ready = |detail: String| {
            Err(Error::NotReady {
                lock: self.shared.describe.clone(),
                detail,
            })
        };
        let failing = st.counters.consecutive_failures > 0;
        if let (true, Some(e)) = (failing, &st.last_error) {
            if e.kind == FailureKind::Forbidden {
                return not_ready(format!("forbidden ({}): {}", e.hint, e.message));
            }
        }
        let since = self.shared.since_success(&st);
        if since > max_without_success {
            let why = match (&st.last_error, failing) {
                (Some(e), true) => format!("; last error: {}", e.message),
                _ => String::new(),
            };
            return not_ready(format!(
                "no successful request to the API server for {}, more than the {} allowed{why}",
                tenths(since),
                tenths(max_without_success)
            ));
        }
        Ok(())
    }

    /// True when another process was seen renewing this lease under this
    /// candidate's identity (it then never leads on that record; see the
    /// module docs). Cleared when this candidate leads.
    pub fn duplicate_identity(&self) -> bool {
        self.shared.know(|lease| lease.duplicate_identity())
    }

    /// A snapshot of this elector's state and counters (never blocks on
    /// the network); see [`ElectorStatus`], and
    /// [`render_prometheus`](crate::render_prometheus) for metrics.
    pub fn status(&self) -> ElectorStatus {
        let leading = self.is_leader();
        let st = self.shared.lock();
        let (namespace, name) = self
            .shared
            .describe
            .split_once('/')
            .unwrap_or(("", &self.shared.describe));
        let c = &st.counters;
        let now = self.shared.now();
        let last_renew = st.latest.as_ref().map(Term::last_renew);
        // An instant on the elector's clock as wall-clock time, read now.
        let wall = self.shared.clock.system_time();
        let wall_at = |at: Instant| {
            let since = now.saturating_duration_since(at);
            wall.checked_sub(since).unwrap_or(wall)
        };
        ElectorStatus {
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: self.shared.identity.clone(),
            leading,
            holder: st.lease.holder().map(str::to_string),
            term_token: st.term().map(Term::token),
            last_renew,
            last_renew_wall: last_renew.map(wall_at),
            last_error: st.last_error.clone(),
            last_loss: st.last_lost.as_ref().and_then(Term::loss),
            consecutive_failures: c.consecutive_failures,
            attempts: c.attempts,
            renews: c.renews,
            slow_path_renews: c.slow_path_renews,
            transitions: c.transitions,
            requests: c.requests,
            failed_requests: c.failed_requests,
            held_by_other: c.held_by_other,
            duplicate_identity: st.lease.duplicate_identity(),
            since_last_renew: last_renew.map(|at| now.saturating_duration_since(at)),
            since_last_success: self.shared.since_success(&st),
            last_success_wall: wall_at(st.last_success),
            watch: self.shared.watch_mode(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::elector::lab::term_begun;
    use crate::elector::term::TermEnd;
    use crate::elector::ElectorConfig;
    use crate::status::LastError;

    const NS: Duration = Duration::from_nanos(1);

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// A candidate "me" of `lab/lease` (15 s / 10 s / 2 s), its probe, and
    /// the term it began now.
    fn leading(clock: &ManualClock) -> (Arc<Shared>, Probe, Term) {
        let (shared, term, _events) = term_begun(Arc::new(clock.clone()), ElectorConfig::default());
        (shared.clone(), Probe::new(shared), term)
    }

    #[test]
    fn a_probe_names_its_lock_and_candidate_and_shows_the_term() {
        let clock = ManualClock::new();
        let (_shared, probe, term) = leading(&clock);
        assert_eq!((probe.describe(), probe.identity()), ("lab/lease", "me"));
        assert!(probe.is_leader());
        assert_eq!(probe.term().map(|t| t.token()), Some(term.token()));
        clock.advance(secs(10));
        assert!(!probe.is_leader(), "the term ran out at the renew deadline");
    }

    /// Liveness: a leader unhealthy past the lease duration and the
    /// tolerance since its last renew, not at it; a lost one past the
    /// tolerance since the loss, not at it.
    #[test]
    fn liveness_fails_just_past_each_tolerance() {
        let clock = ManualClock::new();
        let (shared, probe, term) = leading(&clock);
        clock.advance(secs(15 + 3));
        assert!(probe.check(secs(3)).is_ok(), "at the tolerance");
        clock.advance(NS);
        assert!(matches!(probe.check(secs(3)), Err(Error::Unhealthy { .. })));

        shared.end_term(&term, &TermEnd::Expired("lab".into()));
        clock.advance(secs(3));
        assert!(probe.check(secs(3)).is_ok(), "at the tolerance");
        clock.advance(NS);
        match probe.check(secs(3)) {
            Err(Error::LostLeadership { lock, .. }) => assert_eq!(lock, "lab/lease"),
            other => panic!("{other:?}"),
        }
    }

    /// Readiness: failing past the allowance without a success, not at
    /// it; refused with 403, at once, until a request succeeds.
    #[test]
    fn readiness_fails_just_past_the_allowance_and_at_once_when_forbidden() {
        let clock = ManualClock::new();
        let (shared, probe, _term) = leading(&clock);
        clock.advance(secs(5));
        assert!(probe.check_ready(secs(5)).is_ok(), "at the allowance");
        clock.advance(NS);
        assert!(matches!(
            probe.check_ready(secs(5)),
            Err(Error::NotReady { .. })
        ));

        let mut st = shared.lock();
        st.last_success = shared.now();
        st.counters.consecutive_failures = 1;
        st.last_error = Some(LastError {
            kind: FailureKind::Forbidden,
            message: "leases is forbidden".into(),
            hint: "RBAC".into(),
            at: shared.now(),
        });
        drop(st);
        match probe.check_ready(secs(5)) {
            Err(Error::NotReady { detail, .. }) => {
                assert!(detail.contains("forbidden"), "{detail}")
            }
            other => panic!("{other:?}"),
        }
        shared.lock().counters.consecutive_failures = 0;
        assert!(probe.check_ready(secs(5)).is_ok(), "a 403 since answered");

        // Failing since: the last error is told.
        let mut st = shared.lock();
        st.counters.consecutive_failures = 2;
        if let Some(e) = st.last_error.as_mut() {
            e.kind = FailureKind::Transport;
            e.message = "connection refused".into();
        }
        drop(st);
        clock.advance(secs(5) + NS);
        match probe.check_ready(secs(5)) {
            Err(Error::NotReady { detail, .. }) => {
                assert!(
                    detail.ends_with("; last error: connection refused"),
                    "{detail}"
                )
            }
            other => panic!("{other:?}"),
        }
    }
}
