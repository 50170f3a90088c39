//! `CLOCK_BOOTTIME`, the clock of a term's end as the supervisor keeps it.
//!
//! std's `Instant` is `CLOCK_MONOTONIC`, which stands still while the
//! machine is suspended: a deadline on it would pass a whole suspend late,
//! while another replica took the lease on a machine that kept running.
//! `CLOCK_BOOTTIME` counts the suspend. It is one clock for every process
//! of the machine (of a time namespace), so `lease-elect` hands its
//! supervisor instants on it, not durations: a line read late (the
//! supervisor stopped, or not scheduled) cannot push a deadline later.
//!
//! [`Alarm`] wakes a thread at such an instant: a timerfd on
//! `CLOCK_BOOTTIME`, which fires on resume when its time passed during a
//! suspend (a sleep on `CLOCK_MONOTONIC` would go on for what was left).

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use rustix::time::{
    clock_gettime, timerfd_create, timerfd_settime, ClockId, Itimerspec, TimerfdClockId,
    TimerfdFlags, TimerfdTimerFlags, Timespec,
};

/// Now on `CLOCK_BOOTTIME`: the time since boot, suspends included.
pub fn now() -> Duration {
    let t = clock_gettime(ClockId::Boottime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// A timer on `CLOCK_BOOTTIME`, and the thread that waits for it.
pub struct Alarm {
    timer: Arc<OwnedFd>,
}

impl Alarm {
    /// Start the waiting thread, named `name`; it calls `ring` each time
    /// the time set passes, and ends when `ring` returns false.
    pub fn start(name: &str, ring: impl Fn() -> bool + Send + 'static) -> io::Result<Alarm> {
        let timer = Arc::new(timerfd_create(
            TimerfdClockId::Boottime,
            TimerfdFlags::CLOEXEC,
        )?);
        let fd = timer.clone();
        thread::Builder::new().name(name.into()).spawn(move || {
            let mut expirations = [0u8; 8];
            loop {
                match rustix::io::read(&*fd, &mut expirations) {
                    Ok(_) => {
                        if !ring() {
                            return;
                        }
                    }
                    Err(rustix::io::Errno::INTR) => {}
                    Err(_) => return,
                }
            }
        })?;
        Ok(Alarm { timer })
    }

    /// Ring at `at` (an instant on `CLOCK_BOOTTIME`), instead of any time
    /// set before; at once if `at` has passed.
    pub fn set(&self, at: Duration) -> io::Result<()> {
        // A zero it_value disarms the timer: the earliest instant instead.
        let at = at.max(Duration::from_nanos(1));
        let spec = Itimerspec {
            it_interval: Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: Timespec {
                tv_sec: i64::try_from(at.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: at.subsec_nanos().into(),
            },
        };
        timerfd_settime(&*self.timer, TimerfdTimerFlags::ABSTIME, &spec)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Instant;

    #[test]
    fn boottime_moves_at_least_as_fast_as_the_monotonic_clock() {
        let (b0, m0) = (now(), Instant::now());
        thread::sleep(Duration::from_millis(20));
        let (b1, m1) = (now(), Instant::now());
        assert!(b1 - b0 + Duration::from_millis(1) >= m1 - m0);
    }

    #[test]
    fn the_alarm_rings_at_the_time_set_last_and_at_once_for_a_time_past() {
        let (tx, rx) = mpsc::channel();
        let alarm = Alarm::start("test-alarm", move || tx.send(now()).is_ok()).unwrap();
        let far = now() + Duration::from_secs(3600);
        alarm.set(far).unwrap();
        let soon = now() + Duration::from_millis(30);
        alarm.set(soon).unwrap();
        let rang = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(rang >= soon, "not before the time set");
        alarm.set(Duration::from_secs(1)).unwrap();
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
    }
}
