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
//! sequencers and ZooKeeper's zxid do it: each term carries a number that
//! only grows, and the shared resource refuses a number lower than one it
//! has seen. Here that number is the Lease's `leaseTransitions` as this
//! candidate wrote it when it acquired.

use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::clock::{add_saturating, Clock};

/// One leadership term of this candidate: its fencing token, and whether it
/// is still current. Cheap to clone (clones share the term), `Send + Sync`.
///
/// Hand it to the work: check [`Term::is_current`] (or
/// [`Term::valid_until`]) before each step, and send [`Term::token`] with
/// every write to a resource that can refuse stale tokens.
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
/// assert_eq!(term.token(), 0); // the Lease was created: leaseTransitions 0
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
    identity: String,
    lease: String,
    started: Instant,
    renew_deadline: Duration,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    ended_cv: Condvar,
}

struct State {
    /// The start of the last successful renew of this term.
    last_renew: Instant,
    ended: bool,
    /// `Term` values the caller holds.
    holders: usize,
}

impl Term {
    pub(super) fn new(
        token: u64,
        identity: &str,
        lease: &str,
        started: Instant,
        renew_deadline: Duration,
        clock: Arc<dyn Clock>,
    ) -> Term {
        Term {
            inner: Arc::new(Inner {
                token,
                identity: identity.to_string(),
                lease: lease.to_string(),
                started,
                renew_deadline,
                clock,
                state: Mutex::new(State {
                    last_renew: started,
                    ended: false,
                    holders: 0,
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

    /// How many `Term`s the caller holds.
    #[cfg(feature = "testing")]
    pub(crate) fn holders(&self) -> usize {
        self.lock().holders
    }

    /// Block until the caller holds no `Term` of this term, at most
    /// `grace` of real time (the work runs in real time, whatever clock
    /// the elector reads); true when it holds none.
    pub(super) fn wait_let_go(&self, grace: Duration) -> bool {
        let until = add_saturating(Instant::now(), grace);
        let mut st = self.lock();
        loop {
            if st.holders == 0 {
                return true;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
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

    /// The fencing token: the Lease's `leaseTransitions` that this
    /// candidate wrote when it acquired the lease for this term. It never
    /// changes during the term, and is greater than the token of every
    /// earlier term on this Lease, of any holder that increments
    /// `leaseTransitions` as client-go does (deleting the Lease starts it
    /// at 0 again; the field is an int32, which stops at `i32::MAX`).
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
    /// the elector's clock. Refuse to start an operation that would end
    /// after it. (The term can end sooner: a step-down, a stop.)
    pub fn valid_until(&self) -> Instant {
        self.deadline(&self.lock())
    }

    /// Block until the term ends, at most `timeout`; true when it has
    /// ended. Wakes at [`Term::valid_until`] even if the elector thread
    /// cannot run to end it.
    pub fn wait_ended(&self, timeout: Duration) -> bool {
        let give_up = Instant::now() + timeout;
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

    /// Mark the term over and wake its waiters.
    pub(super) fn end(&self) {
        self.lock().ended = true;
        self.inner.ended_cv.notify_all();
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
