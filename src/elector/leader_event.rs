//! [`LeaderEvent`]: what the elector tells the caller.

use std::time::Instant;

use super::term::{StopReason, Term};

/// What the elector tells the caller. `at` is the elector clock's reading
/// when the state changed, so events from several electors sharing a clock
/// can be ordered exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaderEvent {
    /// This candidate now holds the lease: start working.
    StartedLeading {
        /// When the lease was acquired.
        at: Instant,
        /// The term that started: its fencing token, and whether it is
        /// still current (hand it to the work).
        term: Term,
    },
    /// This candidate no longer leads: stop working.
    StoppedLeading {
        /// When leadership ended.
        at: Instant,
        /// Whether it was lost or given up through a stop.
        reason: StopReason,
    },
    /// Another (or this) identity was observed holding the lease.
    NewLeader {
        /// The holder's identity, as the server holds it: escape it
        /// ([`crate::text::escape`]) before printing or logging it.
        identity: String,
        /// When it was observed.
        at: Instant,
    },
}
