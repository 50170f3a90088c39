//! Virtual time: one true clock for the world, and each candidate's own
//! reading of it (a monotonic clock that runs fast or slow within the
//! drift bound, a wall clock that can stand still, be stepped or leap past
//! the year 9999).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::plan::Wall;
use crate::clock::{Clock, Wake, Wakeup};

/// True (simulation) time, in nanoseconds since the schedule began.
#[derive(Debug, Default)]
pub(super) struct TrueTime(AtomicU64);

impl TrueTime {
    pub(super) fn get(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }

    pub(super) fn set(&self, t: Duration) {
        self.0.store(t.as_nanos() as u64, Ordering::Relaxed);
    }
}

/// 2026-01-01T00:00:00Z: the wall clock's reading at true time zero.
const WALL_ORIGIN: Duration = Duration::from_secs(1_767_225_600);
/// Past the year 9999, which MicroTime clamps.
const FAR_FUTURE: Duration = Duration::from_secs(253_402_300_800 + 86_400 * 400);

#[derive(Debug)]
struct WallState {
    offset_ms: i64,
    frozen: Option<SystemTime>,
}

/// One process's clocks. `now()` is an `Instant` (the only kind there is),
/// from a base instant taken once per run as an origin; no decision reads
/// the real clock.
#[derive(Debug)]
pub(super) struct SimClock {
    time: Arc<TrueTime>,
    base: Instant,
    /// True time at which this process started: its clock reads `base`
    /// plus `origin` then, and runs at `1 + rate_ppm / 10^6` from there.
    origin: Duration,
    rate_ppm: i64,
    wall: Mutex<WallState>,
}

impl SimClock {
    pub(super) fn new(
        time: Arc<TrueTime>,
        base: Instant,
        rate_ppm: i64,
        wall_offset_ms: i64,
    ) -> SimClock {
        let origin = time.get();
        SimClock {
            time,
            base,
            origin,
            rate_ppm,
            wall: Mutex::new(WallState {
                offset_ms: wall_offset_ms,
                frozen: None,
            }),
        }
    }

    /// This clock's reading at true time `t`, as time since `base`.
    fn local(&self, t: Duration) -> Duration {
        let since = t.saturating_sub(self.origin).as_nanos() as i128;
        let scaled = since * (1_000_000 + self.rate_ppm as i128) / 1_000_000;
        self.origin + Duration::from_nanos(scaled.max(0) as u64)
    }

    /// The true time at which this clock reads `at` (the earliest such).
    pub(super) fn true_time_of(&self, at: Instant) -> Duration {
        let local = at.saturating_duration_since(self.base);
        let since = local.saturating_sub(self.origin).as_nanos() as i128;
        let rate = 1_000_000 + self.rate_ppm as i128;
        // Rounded up, so that the clock has reached `at` by then.
        let t = (since * 1_000_000 + rate - 1) / rate;
        self.origin + Duration::from_nanos(t.clamp(0, u64::MAX as i128) as u64)
    }

    pub(super) fn set_wall(&self, how: Wall) {
        let now = self.system_time();
        let mut w = self.wall.lock().unwrap_or_else(PoisonError::into_inner);
        match how {
            Wall::Freeze => w.frozen = Some(now),
            Wall::Step(ms) => {
                w.frozen = None;
                w.offset_ms = w.offset_ms.saturating_add(ms);
            }
            Wall::FarFuture => w.frozen = Some(UNIX_EPOCH + FAR_FUTURE),
        }
    }

    /// Back to true wall time (plus the candidate's own small offset).
    pub(super) fn heal_wall(&self, offset_ms: i64) {
        let mut w = self.wall.lock().unwrap_or_else(PoisonError::into_inner);
        *w = WallState {
            offset_ms,
            frozen: None,
        };
    }
}

impl Clock for SimClock {
    fn now(&self) -> Instant {
        self.base + self.local(self.time.get())
    }

    fn system_time(&self) -> SystemTime {
        let w = self.wall.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(at) = w.frozen {
            return at;
        }
        let local = self.local(self.time.get());
        let wall = UNIX_EPOCH + WALL_ORIGIN + local;
        let step = Duration::from_millis(w.offset_ms.unsigned_abs());
        if w.offset_ms >= 0 {
            wall + step
        } else {
            wall - step
        }
    }

    /// Never called: the simulation's `Io` sleeps on virtual time.
    fn sleep(&self, _d: Duration, wake: &Wakeup) -> Wake {
        wake.take().unwrap_or(Wake::Elapsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fast_clock_reaches_an_instant_sooner_in_true_time() {
        let time = Arc::new(TrueTime::default());
        let base = Instant::now();
        time.set(Duration::from_secs(10));
        let fast = SimClock::new(time.clone(), base, 100_000, 0);
        let start = fast.now();
        let at = start + Duration::from_secs(11);
        let t = fast.true_time_of(at);
        assert_eq!(t, Duration::from_secs(20));
        time.set(t);
        assert!(fast.now() >= at);
        time.set(t - Duration::from_nanos(2));
        assert!(fast.now() < at);
    }
}
