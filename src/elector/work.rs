//! [`LeaderElector::run`]: the work run while leading, in one blocking
//! call, in the order that is safe.
//!
//! Each term's work runs on a thread of its own with the term's [`Term`].
//! When the term ends (lost, or a stop) the work is told through the term
//! (`is_current()` turns false, `wait_ended` wakes), the call waits for it
//! to return, and only then is the lease released: the next leader never
//! starts while this one's work still runs. (client-go's `RunOrDie` with
//! `ReleaseOnCancel` leaves that ordering to the caller.)

use std::sync::atomic::Ordering;
use std::thread;

use super::builder::LeaderElector;
use super::handle::Stopper;
use super::leader_event::LeaderEvent;
use super::term::StopReason;
use super::term::Term;
use crate::error::{Error, Result};

impl LeaderElector {
    /// Run `work` while this candidate leads; block until the elector ends.
    ///
    /// Each term, `work` is called on a thread of its own
    /// (`lease-work/<namespace>/<name>`) with the term: loop while
    /// [`Term::is_current`], send [`Term::token`] with every write to a
    /// store that can refuse stale tokens, and return once the term has
    /// ended. The call returns when the elector ends, after the work has
    /// returned and (with `release_on_cancel`) the lease was released:
    ///
    /// - `Ok(StopReason::Released)`: a [`Stopper`](super::Stopper) (from
    ///   [`LeaderElector::stopper`], on a signal) stopped it, or `work`
    ///   returned while its term was still current (its job done: the
    ///   elector stops), and the lease was released (`release_on_cancel`):
    ///   the next candidate may lead at once;
    /// - `Ok(StopReason::Stopped)`: stopped the same way, with nothing
    ///   released: it was not leading at the stop, or ran without
    ///   `release_on_cancel`, or another writer had changed the Lease;
    /// - `Ok(StopReason::Lost)`: leadership was lost (without `rejoin`;
    ///   with it, the next term calls `work` again, once the work of the
    ///   lost one has returned: one piece of work at a time);
    /// - `Err(Error::NotReleased)`: stopped with `release_on_cancel`, but
    ///   the work still ran when `release_grace` ran out: the lease was
    ///   left to expire (the next candidate leads a lease duration after
    ///   the last renew, not at once);
    /// - `Err(Error::AcquireTimeout)`: it never led within the builder's
    ///   `acquire_timeout`; other errors: the thread could not start, or
    ///   the release failed (the lease then expires by itself).
    ///
    /// The work's time budget: after a term ends at its deadline, another
    /// candidate may lead `lease_duration − renew_deadline` later: 5 s by
    /// default (4 s after a margin of 1 s for clock rates), 30 s with
    /// OpenShift's 137 s / 107 s (29 s). [`Term::time_to_stop`] counts it
    /// down, margin taken, and is zero once the term was
    /// [taken over](Term::taken_over). Begin a step only if it fits, and
    /// pause with [`Term::wait_ended`].
    ///
    /// `work` may borrow from the caller (the threads are scoped). If it
    /// panics, the elector stops without releasing and the panic goes on
    /// in the caller.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// use lease_elector::{Client, ClientConfig, LeaderElector, LeaseLock, StopReason};
    /// use std::time::Duration;
    ///
    /// let server = TestApiServer::start()?;
    /// let lock = LeaseLock::new(Client::new(ClientConfig::new(server.url()))?, "default", "jobs", "me");
    /// let elector = LeaderElector::builder(lock).release_on_cancel(true).build()?;
    /// let stopper = elector.stopper();
    /// let mut steps = 0;
    /// let ended = elector.run(|term| {
    ///     while term.is_current() {
    ///         steps += 1; // one step of the work, fenced with term.token()
    ///         if steps == 3 {
    ///             stopper.stop(); // as a SIGTERM handler would
    ///         }
    ///     }
    /// })?;
    /// assert_eq!(ended, StopReason::Released);
    /// assert_eq!(steps, 3);
    /// assert_eq!(server.holder("default", "jobs"), None); // released, after the work
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn run<F>(self, work: F) -> Result<StopReason>
    where
        F: FnMut(Term) + Send,
    {
        let stopper = self.stopper();
        let shared = self.shared.clone();
        let describe = self.shared.describe.clone();
        // Every event is read here: a term is the work's from its send.
        stopper.read_every_event();
        let acquire_timeout = self.shared.config.acquire_timeout;
        let (handle, events) = self.spawn()?;
        let name = crate::names::thread_name(&["lease-work", &describe]);
        // One term's work at a time: each term's thread takes it.
        let work = std::sync::Mutex::new(work);
        let mut ended = None;
        let mut led = false;
        let outcome = thread::scope(|s| -> Result<()> {
            let work = &work;
            let mut running: Option<thread::ScopedJoinHandle<'_, ()>> = None;
            for event in &events {
                match event {
                    LeaderEvent::StartedLeading { term, .. } => {
                        led = true;
                        let stopper = stopper.clone();
                        running = Some(
                            thread::Builder::new()
                                .name(name.clone())
                                .spawn_scoped(s, move || {
                                    // The guard holds the thread's own hold on
                                    // the term: it marks the stop "no release"
                                    // before that hold goes (see its Drop).
                                    let guard = AbandonOnPanic(stopper.clone(), term.clone());
                                    let mut work = work.lock().unwrap_or_else(|e| e.into_inner());
                                    (*work)(term);
                                    // Returned on its own while leading: its
                                    // job is done, and so is the election.
                                    if guard.1.is_current() {
                                        stopper.stop();
                                    }
                                })
                                .map_err(Error::Spawn)?,
                        );
                    }
                    LeaderEvent::StoppedLeading { reason, .. } => {
                        ended = Some(reason);
                        // The release (after this event) waits for the
                        // work to let go of its term; here the call waits
                        // for it to return.
                        if let Some(t) = running.take() {
                            if let Err(panic) = t.join() {
                                std::panic::resume_unwind(panic);
                            }
                        }
                    }
                    _ => {}
                }
            }
            if let Some(t) = running.take() {
                if let Err(panic) = t.join() {
                    std::panic::resume_unwind(panic);
                }
            }
            Ok(())
        });
        let asked_to_stop = stopper.is_stopped();
        let stopped = handle.stop();
        outcome?;
        stopped?;
        let reason = match ended {
            Some(reason) => reason,
            None if led || asked_to_stop => StopReason::Stopped,
            None => {
                return Err(Error::AcquireTimeout {
                    lock: describe,
                    waited: acquire_timeout.unwrap_or_default(),
                })
            }
        };
        // Only a stop releases; the flag tells a release written from a
        // follower's stop with nothing to write.
        if reason == StopReason::Stopped && shared.released.load(Ordering::Relaxed) {
            return Ok(StopReason::Released);
        }
        Ok(reason)
    }
}

/// Stops the elector, without a release, when the work panics: the call
/// then learns of it (`StoppedLeading`) and goes on with the panic.
///
/// It owns the work thread's last hold on the term (the `Term` field): a
/// struct's fields drop after its `Drop::drop`, so "no release" is marked
/// before that hold goes. Were the hold dropped first, a stop already
/// waiting in the release (for the work to let go) would wake and release
/// before the mark (issue 44).
struct AbandonOnPanic(Stopper, Term);

impl Drop for AbandonOnPanic {
    fn drop(&mut self) {
        if thread::panicking() {
            self.0.stop_without_release();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::ManualClock;
    use crate::elector::lab::term_begun;
    use crate::elector::ElectorConfig;

    /// Work that panics stops its elector without a release; work that
    /// returns leaves that to the call.
    #[test]
    fn only_work_that_panics_abandons_the_lease() {
        for panics in [false, true] {
            let (shared, term, _events) =
                term_begun(Arc::new(ManualClock::new()), ElectorConfig::default());
            let stopper = Stopper::new(shared.clone());
            let work = thread::spawn(move || {
                let _guard = AbandonOnPanic(stopper, term);
                assert!(!panics, "the work panicked (on purpose)");
            });
            assert_eq!(work.join().is_err(), panics);
            let skip = shared.skip_release.load(Ordering::Relaxed);
            assert_eq!((shared.wake.is_stopped(), skip), (panics, panics));
        }
    }
}
