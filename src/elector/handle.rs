//! [`ElectorHandle`]: what the caller keeps while the elector runs (a
//! [`Probe`] that can also stop it), and [`Stopper`]: a stop that any
//! thread can ask for without owning the handle.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use super::probe::Probe;
use super::shared::Shared;
use crate::error::{Error, Result};
use crate::watch::Watcher;

/// Controls a running elector; dropping it stops the elector (releasing
/// the lease when configured) and joins its thread.
///
/// What it says about the election is on its [`Probe`]
/// (`handle.probe().is_leader()`, `.term()`, `.status()`, `.check()`), a
/// cheap view other threads can keep.
#[derive(Debug)]
pub struct ElectorHandle {
    probe: Probe,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<Result<()>>>,
    watcher: Option<Watcher>,
}

/// Asks a running elector to stop, from any thread (a signal-handling
/// thread, a worker, a timer) without owning its [`ElectorHandle`].
/// Cheap to clone, `Send + Sync`.
///
/// [`Stopper::stop`] returns at once: the term in progress ends there and
/// then (`StoppedLeading` is sent before it returns, whatever the API
/// server is doing), the request in flight is interrupted, and the elector
/// thread goes on to release the lease (with `release_on_cancel`) and end;
/// the event channel then disconnects. [`ElectorHandle::stop`] does the
/// same and waits for the release.
///
/// It takes locks, so call it from a thread, not from inside a raw signal
/// handler (signal-hook's iterator runs on a thread of its own):
///
/// ```
/// use lease_elector::testing::TestApiServer;
/// use lease_elector::{Client, ClientConfig, LeaderElector, LeaderEvent, LeaseLock, StopReason};
///
/// let server = TestApiServer::start()?;
/// let lock = LeaseLock::new(Client::new(ClientConfig::new(server.url()))?, "default", "x", "me");
/// let (handle, events) = LeaderElector::builder(lock).release_on_cancel(true).build()?.spawn()?;
/// let stopper = handle.stopper();
/// // e.g. on SIGTERM, from the thread that waits for signals:
/// std::thread::spawn(move || stopper.stop());
/// for event in events {
///     if let LeaderEvent::StoppedLeading { reason, .. } = event {
///         assert_eq!(reason, StopReason::Stopped);
///     }
/// }
/// // The channel closed: the elector has ended, the lease is released.
/// if let Err(e) = handle.stop() {
///     eprintln!("{e}"); // a failed release: the lease expires by itself
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Stopper {
    shared: Arc<Shared>,
}

impl Stopper {
    pub(super) fn new(shared: Arc<Shared>) -> Stopper {
        Stopper { shared }
    }

    /// Ask the elector to stop; returns at once. Idempotent.
    pub fn stop(&self) {
        self.shared.request_stop();
    }

    /// Stop without releasing: the work ended badly (a panic), and the
    /// lease must expire rather than pass on while it may have left
    /// things half done.
    pub(crate) fn stop_without_release(&self) {
        self.shared.skip_release.store(true, Ordering::Relaxed);
        self.shared.request_stop();
    }

    /// The caller reads every event (as `LeaderElector::run` does): a
    /// term is its hold from the moment `StartedLeading` is sent.
    pub(crate) fn read_every_event(&self) {
        self.shared
            .hold_on_send
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// True once a stop was asked for.
    pub fn is_stopped(&self) -> bool {
        self.shared.wake.is_stopped()
    }
}

impl ElectorHandle {
    pub(super) fn new(
        shared: Arc<Shared>,
        thread: JoinHandle<Result<()>>,
        watcher: Option<Watcher>,
    ) -> ElectorHandle {
        ElectorHandle {
            probe: Probe::new(shared.clone()),
            shared,
            thread: Some(thread),
            watcher,
        }
    }

    /// A view of this elector for other threads (see [`Probe`]).
    pub fn probe(&self) -> Probe {
        self.probe.clone()
    }

    /// A stop that other threads can ask for (see [`Stopper`]).
    pub fn stopper(&self) -> Stopper {
        Stopper::new(self.shared.clone())
    }

    /// True once the elector thread has ended.
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Lease changes reported by the watch (0 without one).
    pub fn watch_changes(&self) -> u64 {
        self.watcher.as_ref().map_or(0, Watcher::changes)
    }

    /// Stop the elector and wait for its thread. When it was leading,
    /// `StoppedLeading` is sent at once, then (with `release_on_cancel`)
    /// the lease is released; a failed release is returned (the lease then
    /// expires by itself, one lease duration after the last renew: print it
    /// and exit normally).
    ///
    /// Bounded whatever the server does: the request in flight is abandoned
    /// at once, the release has
    /// [`release_timeout`](super::ElectorBuilder::release_timeout) (5 s by
    /// default), queued Events at most their request time-out (5 s) when
    /// the lock holds the recorder's last reference, and a TCP connect in
    /// progress (the one step that cannot be cut short) at most 5 s: at
    /// most 15 s with default settings, inside a pod's 30 s grace period.
    pub fn stop(mut self) -> Result<()> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<()> {
        // The watch winds down (a connect in progress) while the elector
        // steps down and releases; it is joined after.
        if let Some(w) = &self.watcher {
            w.signal_stop();
        }
        self.shared.request_stop();
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

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;
    use crate::clock::{ManualClock, Wakeup};
    use crate::elector::lab::{begin_term, elector_state};
    use crate::elector::term::LetGo;
    use crate::elector::{ElectorConfig, LeaderEvent};

    fn shared() -> (Arc<Shared>, mpsc::Receiver<LeaderEvent>) {
        elector_state(Arc::new(ManualClock::new()), ElectorConfig::default())
    }

    #[test]
    fn a_stopper_tells_whether_a_stop_was_asked_for() {
        let (shared, _rx) = shared();
        let stopper = Stopper::new(shared);
        assert!(!stopper.is_stopped());
        stopper.clone().stop();
        assert!(stopper.is_stopped());
    }

    /// A caller that reads every event holds a term from the moment
    /// `StartedLeading` is sent (a release waits for it); one that may not
    /// read holds it only once it takes the event.
    #[test]
    fn a_caller_that_reads_every_event_holds_a_term_from_its_send() {
        for reads_every_event in [true, false] {
            let (shared, rx) = shared();
            if reads_every_event {
                Stopper::new(shared.clone()).read_every_event();
            }
            let term = begin_term(&shared, 1);
            let held = term.wait_let_go(Duration::ZERO, &Wakeup::new()) == LetGo::Held;
            assert_eq!(held, reads_every_event);
            drop(rx);
        }
    }

    /// Dropping a handle stops its elector and waits for the thread.
    #[test]
    fn a_dropped_handle_stops_its_elector_and_joins_its_thread() {
        let (shared, _rx) = shared();
        let (stopped_tx, stopped) = mpsc::channel::<()>();
        let _hook = shared.wake.on_stop(move || {
            let _ = stopped_tx.send(());
        });
        let (ended_tx, ended) = mpsc::channel::<()>();
        // The thread ends once stopped (or after 5 s: a drop that never
        // stops it then fails below instead of hanging the test).
        let thread = thread::spawn(move || {
            let _ = stopped.recv_timeout(Duration::from_secs(5));
            let _ = ended_tx.send(());
            Ok(())
        });
        drop(ElectorHandle::new(shared.clone(), thread, None));
        assert!(shared.wake.is_stopped(), "stopped");
        assert_eq!(ended.try_recv(), Ok(()), "joined");
    }

    /// A stop returns how the elector thread ended: its error, or that it
    /// panicked, naming the lease.
    #[test]
    fn a_stop_returns_the_threads_error_or_its_panic() {
        let (shared, _rx) = shared();
        let failed = thread::spawn(|| Err(Error::InvalidConfig("lab".into())));
        let handle = ElectorHandle::new(shared.clone(), failed, None);
        assert!(matches!(handle.stop(), Err(Error::InvalidConfig(m)) if m == "lab"));
        let panicked = thread::spawn(|| panic!("the elector thread panicked (on purpose)"));
        let handle = ElectorHandle::new(shared, panicked, None);
        match handle.stop() {
            Err(Error::ThreadPanicked { lock }) => assert_eq!(lock, "lab/lease"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_handle_is_finished_once_its_thread_has_ended() {
        let (shared, _rx) = shared();
        let (go, wait) = mpsc::channel::<()>();
        let thread = thread::spawn(move || {
            let _ = wait.recv();
            Ok(())
        });
        let handle = ElectorHandle::new(shared.clone(), thread, None);
        // Asked while the thread waits; asserted once it may end (a
        // failed assertion must not leave the handle's drop joining a
        // thread that never ends).
        let while_running = handle.is_finished();
        drop(go);
        handle.stop().expect("the thread ended well");
        assert!(!while_running, "its thread still ran");
        let joined = ElectorHandle {
            probe: Probe::new(shared.clone()),
            shared,
            thread: None,
            watcher: None,
        };
        assert!(joined.is_finished(), "its thread was joined");
    }
}
