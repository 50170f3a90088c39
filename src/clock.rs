//! Injectable time: the elector reads the clock and sleeps only through
//! [`Clock`], so tests can drive it with a [`ManualClock`].

use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

/// Why a [`Clock::sleep`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The full duration passed.
    Elapsed,
    /// [`Wakeup::stop`] was called.
    Stopped,
    /// [`Wakeup::poke`] was called (e.g. a watch saw the Lease change).
    Poked,
}

#[derive(Debug, Default)]
struct WakeState {
    stopped: bool,
    poked: bool,
}

type Hook = Arc<dyn Fn() + Send + Sync>;

#[derive(Default)]
struct WakeInner {
    state: Mutex<WakeState>,
    cv: Condvar,
    /// Run once by `stop()`: interrupt blocking work (a request in flight).
    hooks: Mutex<Vec<(u64, Hook)>>,
    next_hook: std::sync::atomic::AtomicU64,
}

impl fmt::Debug for WakeInner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WakeInner")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// Removes its hook from the [`Wakeup`] when dropped.
pub(crate) struct StopHook {
    inner: Arc<WakeInner>,
    id: u64,
}

impl Drop for StopHook {
    fn drop(&mut self) {
        self.inner
            .hooks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(id, _)| *id != self.id);
    }
}

/// A stop/poke signal a sleeping elector thread can be woken by; clones
/// share the signal.
#[derive(Debug, Default, Clone)]
pub struct Wakeup {
    inner: Arc<WakeInner>,
}

impl Wakeup {
    /// A new, unfired signal.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, WakeState> {
        // The state is two booleans: a panic elsewhere cannot leave it torn.
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// True when a stop or an untaken poke is pending.
    pub fn is_pending(&self) -> bool {
        let st = self.lock();
        st.stopped || st.poked
    }

    /// Wake every sleeper now and for ever after, and interrupt the
    /// request the elector may be blocked in.
    pub fn stop(&self) {
        self.lock().stopped = true;
        self.inner.cv.notify_all();
        let hooks: Vec<Hook> = self
            .inner
            .hooks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(_, h)| h.clone())
            .collect();
        for hook in hooks {
            hook();
        }
    }

    /// Run `f` if [`Wakeup::stop`] is called while the returned guard lives.
    /// A stop that came before is not replayed: look at
    /// [`Wakeup::is_stopped`] after registering.
    pub(crate) fn on_stop(&self, f: impl Fn() + Send + Sync + 'static) -> StopHook {
        let id = self
            .inner
            .next_hook
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner
            .hooks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((id, Arc::new(f)));
        StopHook {
            inner: self.inner.clone(),
            id,
        }
    }

    /// Wake the current (or next) sleeper once.
    pub fn poke(&self) {
        self.lock().poked = true;
        self.inner.cv.notify_all();
    }

    /// True once [`Wakeup::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.lock().stopped
    }

    /// Take a pending stop or poke without blocking.
    pub fn take(&self) -> Option<Wake> {
        let mut st = self.lock();
        Self::take_locked(&mut st)
    }

    fn take_locked(st: &mut WakeState) -> Option<Wake> {
        if st.stopped {
            Some(Wake::Stopped)
        } else if std::mem::take(&mut st.poked) {
            Some(Wake::Poked)
        } else {
            None
        }
    }

    /// Block for up to `d` real time, or until stopped or poked.
    pub fn wait_timeout(&self, d: Duration) -> Wake {
        let deadline = add_saturating(Instant::now(), d);
        let mut st = self.lock();
        loop {
            if let Some(w) = Self::take_locked(&mut st) {
                return w;
            }
            let now = Instant::now();
            if now >= deadline {
                return Wake::Elapsed;
            }
            st = self
                .inner
                .cv
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// A source of time.
///
/// `now` is monotonic and drives every expiry and deadline decision;
/// `system_time` is only written into the Lease (`acquireTime`, `renewTime`).
pub trait Clock: Send + Sync + fmt::Debug {
    /// Monotonic now.
    fn now(&self) -> Instant;
    /// Wall-clock now.
    fn system_time(&self) -> SystemTime;
    /// Sleep for `d` on this clock, returning early when `wake` fires.
    fn sleep(&self, d: Duration, wake: &Wakeup) -> Wake;
}

/// The real clock. Its `now` counts the time the machine was suspended:
/// std's `Instant` is `CLOCK_MONOTONIC`, which stands still during a
/// suspend, and a term judged on it would stay current after a resume
/// later than the lease (another candidate having taken over meanwhile).
/// On Linux it adds what `CLOCK_BOOTTIME` has counted beyond
/// `CLOCK_MONOTONIC` (the time suspended since boot); elsewhere it is
/// `Instant::now()`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        add_saturating(Instant::now(), suspended())
    }
    fn system_time(&self) -> SystemTime {
        SystemTime::now()
    }
    fn sleep(&self, d: Duration, wake: &Wakeup) -> Wake {
        wake.wait_timeout(d)
    }
}

/// How long the machine has been suspended since boot, to the
/// millisecond (whole milliseconds, so that the two clocks read a few
/// nanoseconds apart do not make `now` step back and forth).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn suspended() -> Duration {
    use rustix::time::{clock_gettime, ClockId};
    let ns =
        |t: rustix::time::Timespec| i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec);
    let mono = ns(clock_gettime(ClockId::Monotonic));
    let boot = ns(clock_gettime(ClockId::Boottime));
    let ms = u64::try_from((boot - mono) / 1_000_000).unwrap_or(0);
    Duration::from_millis(ms)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn suspended() -> Duration {
    Duration::ZERO
}

#[derive(Debug)]
struct ManualState {
    offset: Duration,
    auto_advance: bool,
    /// The threads sleeping now: id, deadline, and what can wake them.
    sleeping: Vec<(u64, Duration, Wakeup)>,
    next_id: u64,
}

impl ManualState {
    /// Sleepers still blocked: ones whose deadline passed or that have a
    /// stop or poke pending are on their way out and don't count.
    fn blocked(&self) -> usize {
        self.sleeping
            .iter()
            .filter(|(_, d, w)| *d > self.offset && !w.is_pending())
            .count()
    }
}

/// A clock that only moves when told to, for deterministic tests.
///
/// In auto-advance mode every `sleep` jumps the clock forward by the full
/// duration at once, so an elector runs as fast as its HTTP round trips
/// allow while every decision still sees consistent virtual time. In manual
/// mode sleepers block until [`ManualClock::advance`] moves time past their
/// deadline.
///
/// ```
/// use lease_elector::{Clock, ManualClock};
/// use std::time::Duration;
/// let clock = ManualClock::new();
/// let t0 = clock.now();
/// clock.advance(Duration::from_secs(15));
/// assert_eq!(clock.now() - t0, Duration::from_secs(15));
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    inner: Arc<(Mutex<ManualState>, Condvar)>,
    base: Instant,
    base_wall: SystemTime,
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ManualClock {
    /// A clock in manual mode, starting at the real now.
    pub fn new() -> Self {
        ManualClock {
            inner: Arc::new((
                Mutex::new(ManualState {
                    offset: Duration::ZERO,
                    auto_advance: false,
                    sleeping: Vec::new(),
                    next_id: 0,
                }),
                Condvar::new(),
            )),
            base: Instant::now(),
            base_wall: SystemTime::now(),
        }
    }

    /// A clock in auto-advance mode.
    pub fn auto_advancing() -> Self {
        let c = Self::new();
        c.lock().auto_advance = true;
        c
    }

    fn lock(&self) -> MutexGuard<'_, ManualState> {
        self.inner.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Move time forward by `d`, waking sleepers whose deadline passed.
    pub fn advance(&self, d: Duration) {
        let mut st = self.lock();
        st.offset = st.offset.saturating_add(d);
        drop(st);
        self.inner.1.notify_all();
    }

    /// How far time has moved since the clock was made.
    pub fn elapsed(&self) -> Duration {
        self.lock().offset
    }

    /// How many threads are blocked sleeping on this clock right now (a
    /// sleeper whose deadline has passed no longer counts).
    pub fn sleepers(&self) -> usize {
        self.lock().blocked()
    }

    /// Block (real time, up to `timeout`) until at least `n` threads are
    /// blocked sleeping on this clock; true if they are. After
    /// [`ManualClock::advance`], this waits for the woken threads to finish
    /// their work and sleep again.
    pub fn wait_for_sleepers(&self, n: usize, timeout: Duration) -> bool {
        let deadline = add_saturating(Instant::now(), timeout);
        let mut st = self.lock();
        while st.blocked() < n {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            st = self
                .inner
                .1
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        add_saturating(self.base, self.lock().offset)
    }

    fn system_time(&self) -> SystemTime {
        let offset = self.lock().offset;
        self.base_wall.checked_add(offset).unwrap_or(self.base_wall)
    }

    fn sleep(&self, d: Duration, wake: &Wakeup) -> Wake {
        if let Some(w) = wake.take() {
            return w;
        }
        let mut st = self.lock();
        let deadline = st.offset.saturating_add(d);
        if st.auto_advance {
            st.offset = st.offset.max(deadline);
            drop(st);
            self.inner.1.notify_all();
            return Wake::Elapsed;
        }
        let id = st.next_id;
        st.next_id += 1;
        st.sleeping.push((id, deadline, wake.clone()));
        self.inner.1.notify_all();
        let result = loop {
            if st.offset >= deadline {
                break Wake::Elapsed;
            }
            // Stop/poke arrive on the Wakeup's own condvar; look at it between
            // short waits on ours so neither signal can be missed for long.
            drop(st);
            if let Some(w) = wake.take() {
                st = self.lock();
                break w;
            }
            st = self.lock();
            if st.offset >= deadline {
                break Wake::Elapsed;
            }
            st = self
                .inner
                .1
                .wait_timeout(st, Duration::from_millis(2))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        };
        st.sleeping.retain(|(i, _, _)| *i != id);
        drop(st);
        self.inner.1.notify_all();
        result
    }
}

/// `at + d`, or the farthest representable instant (about a century on)
/// when that overflows.
pub(crate) fn add_saturating(at: Instant, d: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    at.checked_add(d)
        .or_else(|| at.checked_add(FAR))
        .unwrap_or(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    #[test]
    fn manual_sleep_waits_for_advance() {
        let clock = ManualClock::new();
        let wake = Wakeup::new();
        let (c2, w2) = (clock.clone(), wake.clone());
        let t = thread::spawn(move || c2.sleep(Duration::from_secs(10), &w2));
        assert!(clock.wait_for_sleepers(1, Duration::from_secs(5)));
        clock.advance(Duration::from_secs(9));
        assert_eq!(clock.sleepers(), 1);
        clock.advance(Duration::from_secs(1));
        assert_eq!(t.join().unwrap(), Wake::Elapsed);
    }

    #[test]
    fn manual_sleep_is_stoppable() {
        let clock = ManualClock::new();
        let wake = Wakeup::new();
        let (c2, w2) = (clock.clone(), wake.clone());
        let t = thread::spawn(move || c2.sleep(Duration::from_secs(10), &w2));
        assert!(clock.wait_for_sleepers(1, Duration::from_secs(5)));
        wake.stop();
        assert_eq!(t.join().unwrap(), Wake::Stopped);
        assert_eq!(clock.sleepers(), 0);
    }

    #[test]
    fn auto_advance_jumps() {
        let clock = ManualClock::auto_advancing();
        let t0 = clock.now();
        let wake = Wakeup::new();
        assert_eq!(clock.sleep(Duration::from_secs(3), &wake), Wake::Elapsed);
        assert_eq!(clock.now() - t0, Duration::from_secs(3));
        wake.poke();
        assert_eq!(clock.sleep(Duration::from_secs(3), &wake), Wake::Poked);
        assert_eq!(clock.sleep(Duration::from_secs(1), &wake), Wake::Elapsed);
        assert_eq!(clock.now() - t0, Duration::from_secs(4));
    }

    #[test]
    fn real_wakeup_times_out_and_stops() {
        let w = Wakeup::new();
        assert_eq!(w.wait_timeout(Duration::from_millis(1)), Wake::Elapsed);
        w.stop();
        assert_eq!(w.wait_timeout(Duration::from_secs(60)), Wake::Stopped);
        assert!(w.is_stopped());
    }
}
