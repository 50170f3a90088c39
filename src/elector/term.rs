//! [`Term`]: one leadership term, the value the guarded work holds.
//!
//! The work's hold on a term is counted: every `Term` the caller holds
//! (received with `StartedLeading`, cloned, or from `Probe::term`) counts
//! until dropped, and a release on stop waits for the count to reach zero
//! (`release_grace`), so the lease is never handed over while the guarded
//! work still runs. The elector's own copies do not count.
//!
//! A lease cannot stop a process that is not running: a leader frozen past
//! its lease (a long pause, a stopped VM) wakes up believing it leads while
//! another has taken over. What closes that gap is fencing, as Chubby's
//! sequencers and etcd's election revisions do it: each term carries a
//! number that only grows, and the shared resource refuses a number lower
//! than one it has seen. Here that number is the `resourceVersion` the API
//! server gave the write that began the term: etcd's revision, which grows
//! with every write to the cluster, across deletions and recreations of the
//! Lease, whatever anyone writes into it (KEP-5504 documents it as a
//! comparable integer since Kubernetes 1.35; on etcd it always was one).

use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::clock::{add_saturating, Clock, Wakeup};

/// One leadership term of this candidate: its fencing token, and whether it
/// is still current. Cheap to clone (clones share the term), `Send + Sync`.
///
/// Hand it to the work: before each step check [`Term::is_current`] and
/// that [`Term::time_to_stop`] leaves time for the step, pause between
/// steps with [`Term::wait_ended`] (never a bare sleep), stop at once when
/// [`Term::taken_over`], and send [`Term::token`] with every write to a
/// resource that can refuse stale tokens.
///
/// ```
/// use lease_elector::testing::TestApiServer;
/// use lease_elector::{Client, ClientConfig, LeaderElector, LeaderEvent, LeaseLock};
/// use std::time::Duration;
///
/// let server = TestApiServer::start()?;
/// let lock = LeaseLock::new(Client::new(ClientConfig::new(server.url()))?, "default", "jobs", "me");
/// let (handle, events) = LeaderElector::builder(lock).build()?.spawn()?;
/// let term = loop {
///     if let LeaderEvent::StartedLeading { term, .. } = events.recv()? {
///         break term;
///     }
/// };
/// // The Lease's resourceVersion after the write that began the term.
/// assert_eq!(server.resource_version("default", "jobs"), Some(term.token()));
/// assert!(term.is_current() && handle.probe().term().is_some());
/// handle.stop()?;
/// assert!(!term.is_current()); // and never again
/// assert!(term.wait_ended(Duration::ZERO));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Term {
    inner: Arc<Inner>,
    /// This value is the caller's: it counts as a hold on the term.
    counted: bool,
}

struct Inner {
    token: u64,
    /// The `leaseTransitions` the write that began it stored: its renews
    /// keep it.
    transitions: i32,
    identity: String,
    lease: String,
    started: Instant,
    renew_deadline: Duration,
    /// What the work has after the last renew before anyone else may lead:
    /// the lease duration less a margin for clock rates and for stopping.
    budget: Duration,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    ended_cv: Condvar,
}

struct State {
    /// The start of the last successful renew of this term.
    last_renew: Instant,
    ended: bool,
    /// Ended because the Lease was taken: another writer took, freed or
    /// deleted it. Another candidate may lead already.
    taken: bool,
    /// `Term` values the caller holds.
    holders: usize,
    /// Poked when the last of them is dropped (the elector watching over
    /// the Lease for the work of an ended term).
    on_let_go: Option<Wakeup>,
    /// When and how the elector ended it (`StoppedLeading` was sent).
    closed: Option<Closed>,
}

/// How a term ended, as the status tells it.
struct Closed {
    at: Instant,
    reason: StopReason,
    /// Why it was lost: the end's reason, or a takeover found after it.
    why: Option<String>,
}

/// Why leadership ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// No renew succeeded within the renew deadline, or another holder
    /// took the lease.
    Lost,
    /// A stop ([`ElectorHandle::stop`](super::ElectorHandle::stop), [`Stopper::stop`](super::Stopper::stop), dropping the
    /// handle) ended it. Returned by [`LeaderElector::run`](super::LeaderElector::run): a stop, and
    /// nothing was released (it was not leading, or without
    /// `release_on_cancel`, or another writer had changed the Lease).
    Stopped,
    /// Returned by [`LeaderElector::run`](super::LeaderElector::run) only (never in an event): a stop
    /// ended the term and the Lease was released, so the next candidate
    /// may lead at once.
    Released,
}

/// How a leadership term ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum TermEnd {
    /// A stop ended it.
    Stopped,
    /// No renew succeeded within the renew deadline; why.
    Expired(String),
    /// The Lease was taken from us: another holder, freed by another
    /// writer, deleted (or created anew by someone else); why.
    Taken(String),
}

impl TermEnd {
    pub(super) fn reason(&self) -> StopReason {
        match self {
            TermEnd::Stopped => StopReason::Stopped,
            TermEnd::Expired(_) | TermEnd::Taken(_) => StopReason::Lost,
        }
    }

    /// Why it was lost, for the log and `ElectorStatus::last_loss`.
    pub(super) fn why(&self) -> Option<&str> {
        match self {
            TermEnd::Stopped => None,
            TermEnd::Expired(why) | TermEnd::Taken(why) => Some(why),
        }
    }
}

impl Term {
    /// A term whose first write (begun at `started`) the server stored at
    /// `token`, with `transitions` as its `leaseTransitions`.
    pub(super) fn new(
        (token, transitions): (u64, i32),
        identity: &str,
        lease: &str,
        started: Instant,
        timings: &super::config::ElectorConfig,
        clock: Arc<dyn Clock>,
    ) -> Term {
        let (ld, rd) = (timings.lease_duration, timings.renew_deadline);
        Term {
            inner: Arc::new(Inner {
                token,
                transitions,
                identity: identity.to_string(),
                lease: lease.to_string(),
                started,
                renew_deadline: rd,
                budget: ld.saturating_sub(stop_margin(ld, rd)),
                clock,
                state: Mutex::new(State {
                    last_renew: started,
                    ended: false,
                    taken: false,
                    holders: 0,
                    on_let_go: None,
                    closed: None,
                }),
                ended_cv: Condvar::new(),
            }),
            counted: false,
        }
    }

    /// Another copy for the elector's own use: not a hold.
    pub(crate) fn share(&self) -> Term {
        Term {
            inner: self.inner.clone(),
            counted: false,
        }
    }

    /// The caller's copy of this term: a hold until dropped.
    pub(super) fn held(&self) -> Term {
        self.lock().holders += 1;
        Term {
            inner: self.inner.clone(),
            counted: true,
        }
    }

    /// Poke `wake` when the caller holds no `Term` of this term any more.
    pub(super) fn poke_when_let_go(&self, wake: &Wakeup) {
        self.lock().on_let_go = Some(wake.clone());
    }

    /// How many `Term`s the caller holds.
    #[cfg(feature = "testing")]
    pub(crate) fn holders(&self) -> usize {
        self.lock().holders
    }

    /// Block until the caller holds no `Term` of this term, at most
    /// `grace` of real time (the work runs in real time, whatever clock
    /// the elector reads), or until `stop` fires.
    pub(super) fn wait_let_go(&self, grace: Duration, stop: &Wakeup) -> LetGo {
        let until = add_saturating(Instant::now(), grace);
        // A stop wakes the wait (it holds the condition variable's lock
        // while it notifies, so the wake-up cannot fall between a look at
        // `is_stopped` and the wait).
        let inner = self.inner.clone();
        let _hook = stop.on_stop(move || {
            let _st = inner.state.lock().unwrap_or_else(PoisonError::into_inner);
            inner.ended_cv.notify_all();
        });
        let mut st = self.lock();
        loop {
            if st.holders == 0 {
                return LetGo::Released;
            }
            if stop.is_stopped() {
                return LetGo::Stopped;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return LetGo::Held;
            }
            st = self.wait(st, left);
        }
    }

    /// Wait at most `d` for the term to end or its holders to change.
    fn wait<'a>(&'a self, st: MutexGuard<'a, State>, d: Duration) -> MutexGuard<'a, State> {
        self.inner
            .ended_cv
            .wait_timeout(st, d)
            .unwrap_or_else(PoisonError::into_inner)
            .0
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A timestamp and a flag: a poisoned guard is still consistent.
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The fencing token: the Lease's `resourceVersion` as the API server
    /// stored the write that began this term (etcd's revision). It never
    /// changes during the term, and is greater than the token of every
    /// earlier term on this Lease, of any candidate, across deletions and
    /// recreations of the Lease and whatever anyone writes into its
    /// `leaseTransitions`; a later term's is always greater.
    ///
    /// A lock whose versions are not decimal integers (not the API
    /// server's: kube-apiserver's are etcd revisions, and KEP-5504
    /// documents them as comparable integers since Kubernetes 1.35), or a
    /// [`Lock`](crate::Lock) of your own without versions, gets the
    /// `leaseTransitions` it wrote instead, which only candidates that
    /// increment it keep growing (a warning says so once). Either way a
    /// token is never lower than (nor equal to) one this elector handed
    /// out before: where the rule above would give less, it gives the last
    /// one plus one.
    pub fn token(&self) -> u64 {
        self.inner.token
    }

    /// True while the elector considers this term in progress: false from
    /// the moment the renew deadline passes without a renew, the elector
    /// steps down, or it is stopped, and never true again. Reads the clock
    /// only; never blocks on the network.
    pub fn is_current(&self) -> bool {
        let mut st = self.lock();
        if st.ended {
            return false;
        }
        if self.inner.clock.now() >= self.deadline(&st) {
            // Latched, so that no later renew can revive it.
            st.ended = true;
            self.inner.ended_cv.notify_all();
            return false;
        }
        true
    }

    /// When [`Term::is_current`] turns false unless a renew succeeds first:
    /// the start of the last successful renew plus the renew deadline, on
    /// the elector's clock. (The term can end sooner: a step-down, a stop.)
    ///
    /// The elector's clock counts the time the machine was suspended
    /// (`CLOCK_BOOTTIME`); `Instant::now()` does not, so after a suspend
    /// the two disagree: do not compare this with `Instant::now()`. Ask
    /// the term instead: [`Term::time_to_stop`] for the time the work has
    /// left, [`Term::wait_ended`] to wait.
    pub fn valid_until(&self) -> Instant {
        self.deadline(&self.lock())
    }

    /// Block until the term ends, at most `timeout`; true when it has
    /// ended. Wakes at [`Term::valid_until`] even if the elector thread
    /// cannot run to end it.
    pub fn wait_ended(&self, timeout: Duration) -> bool {
        let give_up = add_saturating(Instant::now(), timeout);
        let mut st = self.lock();
        loop {
            if st.ended {
                return true;
            }
            let left_in_term = self
                .deadline(&st)
                .saturating_duration_since(self.inner.clock.now());
            if left_in_term.is_zero() {
                st.ended = true;
                self.inner.ended_cv.notify_all();
                return true;
            }
            let left = give_up.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            // The elector's clock may not be the system's (a ManualClock in
            // tests): wake at least every 50 ms to look at it again.
            st = self.wait(st, left.min(left_in_term).min(Duration::from_millis(50)));
        }
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.inner.identity
    }

    /// The Lease this term is on, as `namespace/name`.
    pub fn lease(&self) -> &str {
        &self.inner.lease
    }

    /// When the term started (the start of the acquiring request), on the
    /// elector's clock.
    pub fn started_at(&self) -> Instant {
        self.inner.started
    }

    /// True once the term ended because the Lease was taken from this
    /// candidate: another writer took it, freed it or deleted it (anyone
    /// may create a deleted Lease at once). Another candidate may lead
    /// already, so the work has no time left ([`Term::time_to_stop`] is
    /// zero): stop at once, without finishing the step. False while the
    /// term is current, and when it ended by a stop or at its deadline,
    /// until the elector finds the Lease taken after all (an answer that
    /// came in after the term had ended): then true from that moment.
    pub fn taken_over(&self) -> bool {
        self.lock().taken
    }

    /// How long the work may still run before another candidate may lead:
    /// its time budget. Until the lease duration after the last renew, less
    /// a margin (1 s, or half of `lease_duration − renew_deadline` when
    /// that is less) for clock rates and for stopping; zero once the term
    /// was [taken over](Term::taken_over).
    ///
    /// While the term is current this is more than [`Term::valid_until`]
    /// leaves: after a term ends at its deadline the work still has
    /// `lease_duration − renew_deadline` less the margin (5 s less 1 s with
    /// client-go's 15 s / 10 s, 30 s less 1 s with OpenShift's
    /// 137 s / 107 s) to finish its step
    /// before anyone else can take the Lease. A step that may take longer
    /// than that must not start: check `time_to_stop() > step` first.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// use lease_elector::{Client, ClientConfig, LeaderElector, LeaseLock};
    /// use std::time::Duration;
    ///
    /// let server = TestApiServer::start()?;
    /// let lock = LeaseLock::new(Client::new(ClientConfig::new(server.url()))?, "default", "jobs", "me");
    /// let elector = LeaderElector::builder(lock).build()?;
    /// let stopper = elector.stopper();
    /// elector.run(|term| {
    ///     let step = Duration::from_secs(1);
    ///     while term.is_current() && term.time_to_stop() > step {
    ///         // one step of the work, at most `step` long
    ///         stopper.stop(); // here, after one step: as a SIGTERM handler would
    ///     }
    /// })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn time_to_stop(&self) -> Duration {
        let st = self.lock();
        if st.taken {
            return Duration::ZERO;
        }
        add_saturating(st.last_renew, self.inner.budget)
            .saturating_duration_since(self.inner.clock.now())
    }

    fn deadline(&self, st: &State) -> Instant {
        add_saturating(st.last_renew, self.inner.renew_deadline)
    }

    /// A renew that started at `start` succeeded: extend the term, unless
    /// it had already ended (its deadline passed while the renew was in
    /// flight, e.g. across a freeze): false then, and the term stays over.
    pub(super) fn renewed(&self, start: Instant) -> bool {
        let mut st = self.lock();
        if st.ended || self.inner.clock.now() >= self.deadline(&st) {
            st.ended = true;
            self.inner.ended_cv.notify_all();
            return false;
        }
        st.last_renew = st.last_renew.max(start);
        true
    }

    /// Mark the term over (`taken`: the Lease was taken from us) and wake
    /// its waiters.
    pub(super) fn end(&self, taken: bool) {
        let mut st = self.lock();
        st.ended = true;
        st.taken |= taken;
        self.inner.ended_cv.notify_all();
    }

    /// The elector ended it `at`, as `end` says (before telling the caller
    /// `StoppedLeading`); the term is over.
    pub(super) fn close(&self, at: Instant, end: &TermEnd) {
        let mut st = self.lock();
        st.closed = Some(Closed {
            at,
            reason: end.reason(),
            why: end.why().map(str::to_string),
        });
        drop(st);
        self.end(matches!(end, TermEnd::Taken(_)));
    }

    /// The elector has ended it ([`Term::close`]).
    pub(super) fn is_closed(&self) -> bool {
        self.lock().closed.is_some()
    }

    /// Found taken after it was closed (`why`): the work has no time left,
    /// and the loss is told as the takeover (the reason it was closed for
    /// would send whoever reads it after the wrong cause).
    pub(super) fn taken_after_close(&self, why: &str) {
        let mut st = self.lock();
        if let Some(closed) = &mut st.closed {
            closed.why = Some(why.to_string());
        }
        drop(st);
        self.end(true);
    }

    /// When it was closed as lost, if it was.
    pub(super) fn lost_at(&self) -> Option<Instant> {
        let st = self.lock();
        let closed = st.closed.as_ref()?;
        (closed.reason == StopReason::Lost).then_some(closed.at)
    }

    /// Why it was lost, once closed as lost or found taken after it.
    pub(super) fn loss(&self) -> Option<String> {
        self.lock().closed.as_ref().and_then(|c| c.why.clone())
    }

    /// The start of its last successful renew (its acquire, first).
    pub(super) fn last_renew(&self) -> Instant {
        self.lock().last_renew
    }

    /// The `leaseTransitions` it began with, which its renews keep.
    pub(super) fn transitions(&self) -> i32 {
        self.inner.transitions
    }

    pub(super) fn same_term(&self, other: &Term) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Clone for Term {
    /// Clones share the term; each one the caller holds counts until dropped.
    fn clone(&self) -> Term {
        self.held()
    }
}

impl Drop for Term {
    fn drop(&mut self) {
        if self.counted {
            let mut st = self.lock();
            st.holders = st.holders.saturating_sub(1);
            if st.holders == 0 {
                self.inner.ended_cv.notify_all();
                if let Some(wake) = &st.on_let_go {
                    wake.poke();
                }
            }
        }
    }
}

impl PartialEq for Term {
    /// Clones of one term are equal; two terms never are.
    fn eq(&self, other: &Term) -> bool {
        self.same_term(other)
    }
}

impl Eq for Term {}

impl fmt::Debug for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Term")
            .field("token", &self.inner.token)
            .field("lease", &self.inner.lease)
            .field("identity", &self.inner.identity)
            .field("ended", &self.lock().ended)
            .finish()
    }
}

/// How a wait for the work to let go of a term ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LetGo {
    /// The caller holds no `Term` of it any more.
    Released,
    /// Still held when the time ran out.
    Held,
    /// The elector was asked to stop meanwhile.
    Stopped,
}

/// How long before the lease could expire for others the work of a term
/// must have stopped at the latest: 1 s, or half of `lease_duration −
/// renew_deadline` if less. It covers clock rates within the documented
/// bound and the time to deliver a stop (`lease-elect`'s SIGKILL).
pub fn stop_margin(lease_duration: Duration, renew_deadline: Duration) -> Duration {
    (lease_duration.saturating_sub(renew_deadline) / 2).min(Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn term(clock: &ManualClock) -> Term {
        let timings = super::super::config::ElectorConfig::default();
        Term::new(
            (7, 0),
            "me",
            "ns/lease",
            clock.now(),
            &timings,
            Arc::new(clock.clone()),
        )
    }

    #[test]
    fn a_term_names_its_candidate_and_lease() {
        let t = term(&ManualClock::new());
        assert_eq!((t.identity(), t.lease(), t.token()), ("me", "ns/lease", 7));
        let shown = format!("{t:?}");
        assert!(
            shown.starts_with("Term { token: 7, lease: \"ns/lease\""),
            "{shown}"
        );
    }

    /// `wait_ended` answers false while the term is current, true once it
    /// was ended or its deadline passed (which ends it, elector or not).
    #[test]
    fn wait_ended_tells_a_current_term_from_an_ended_one() {
        let clock = ManualClock::new();
        let t = term(&clock);
        assert!(!t.wait_ended(Duration::ZERO), "current");
        clock.advance(Duration::from_secs(10));
        assert!(t.wait_ended(Duration::ZERO), "at its deadline");
        assert!(!t.is_current());

        let t = term(&clock);
        t.end(false);
        assert!(t.wait_ended(Duration::ZERO), "ended");
    }

    /// The elector asks to be poked when the caller lets go of the last
    /// `Term` it holds (a release waits for that), not before.
    #[test]
    fn letting_go_of_the_last_hold_pokes_the_elector() {
        let t = term(&ManualClock::new());
        let wake = Wakeup::new();
        t.poke_when_let_go(&wake);
        let (a, b) = (t.held(), t.held());
        drop(a);
        assert_eq!(wake.take(), None, "one hold left");
        drop(b);
        assert_eq!(wake.take(), Some(crate::clock::Wake::Poked));
        assert_eq!(
            t.wait_let_go(Duration::ZERO, &Wakeup::new()),
            LetGo::Released
        );
    }

    #[test]
    fn a_renew_answered_after_the_deadline_does_not_extend_the_term_even_unlooked_at() {
        let clock = ManualClock::new();
        let t = term(&clock);
        let renew_began = clock.now() + Duration::from_secs(9);
        // Nobody asked is_current(): the deadline (10 s) passes while the
        // renew that began at 9 s is in flight, and its answer comes at 11 s.
        clock.advance(Duration::from_secs(11));
        assert!(!t.renewed(renew_began), "a renew confirmed late counts");
        assert!(!t.is_current());
        assert_eq!(t.valid_until(), t.started_at() + Duration::from_secs(10));
    }

    #[test]
    fn a_renew_answered_in_time_extends_the_term_from_its_start() {
        let clock = ManualClock::new();
        let t = term(&clock);
        let renew_began = clock.now() + Duration::from_secs(9);
        clock.advance(Duration::from_millis(9_500));
        assert!(t.renewed(renew_began));
        assert_eq!(t.valid_until(), renew_began + Duration::from_secs(10));
        clock.advance(Duration::from_secs(9));
        assert!(t.is_current());
        clock.advance(Duration::from_millis(500));
        assert!(!t.is_current(), "at the renew's start + the renew deadline");
    }

    #[test]
    fn the_time_to_stop_is_the_lease_duration_less_the_margin_after_the_last_renew() {
        let clock = ManualClock::new();
        let t = term(&clock);
        // 15 s lease, 1 s margin.
        assert_eq!(t.time_to_stop(), Duration::from_secs(14));
        clock.advance(Duration::from_secs(12));
        assert!(!t.is_current());
        assert_eq!(t.time_to_stop(), Duration::from_secs(2));
        clock.advance(Duration::from_secs(5));
        assert_eq!(t.time_to_stop(), Duration::ZERO);
        let taken = term(&clock);
        assert!(!taken.taken_over());
        taken.end(true);
        assert!(taken.taken_over() && !taken.is_current());
        assert_eq!(taken.time_to_stop(), Duration::ZERO, "no time left");
    }

    #[test]
    fn the_stop_margin_is_a_second_or_half_the_slack_of_the_lease() {
        let s = Duration::from_secs;
        assert_eq!(stop_margin(s(15), s(10)), s(1));
        assert_eq!(stop_margin(s(137), s(107)), s(1));
        assert_eq!(
            stop_margin(s(2), Duration::from_millis(1500)),
            Duration::from_millis(250)
        );
    }
}
