//! An elector driven from outside: the same state machine the thread runs
//! (`Run`), handed to a scheduler as a future over an [`Io`] of the
//! scheduler's. The seeded simulation (`testing::sim`) runs candidates so.

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc;
use std::sync::Arc;

use super::config::ElectorConfig;
use super::handle::Stopper;
use super::io::Io;
use super::probe::Probe;
use super::receiver::LeaderEvents;
use super::run::Run;
use super::shared::Shared;
use crate::clock::{Clock, Wakeup};
use crate::error::Result;

/// A candidate's state machine as a future, with what its owner holds.
pub(crate) struct Driven {
    /// Ends as the elector thread's body would.
    pub(crate) run: Pin<Box<dyn Future<Output = Result<()>>>>,
    pub(crate) stopper: Stopper,
    pub(crate) probe: Probe,
    /// What the elector's sleeps wake on (a watch pokes it).
    pub(crate) wake: Wakeup,
    pub(crate) events: LeaderEvents,
}

/// An elector over `io` on `clock`, validated as `build()` validates.
pub(crate) fn drive<I: Io + 'static>(
    io: I,
    config: ElectorConfig,
    clock: Arc<dyn Clock>,
    describe: &str,
    jitter_seed: u64,
) -> Result<Driven> {
    let identity = io.identity().to_string();
    config.validate(&identity)?;
    let (tx, rx) = mpsc::channel();
    let wake = Wakeup::new();
    let shared = Arc::new(Shared::new(
        wake.clone(),
        clock,
        config,
        describe.to_string(),
        identity,
        tx,
    ));
    let run = Run::new(io, shared.clone(), jitter_seed);
    let events = LeaderEvents::new(rx, shared.clone());
    Ok(Driven {
        run: Box::pin(run.run()),
        stopper: Stopper::new(shared.clone()),
        probe: Probe::new(shared, None),
        wake,
        events,
    })
}
