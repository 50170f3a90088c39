//! The leader-election state machine, its thread, and what the caller
//! holds while it runs.
//!
//! One concern per file:
//! - `config.rs`: [`ElectorConfig`] and client-go's rules on it;
//! - `builder.rs`: [`ElectorBuilder`] and [`LeaderElector::spawn`];
//! - `run.rs`: the thread's state machine, read top to bottom like
//!   client-go's `leaderelection.go`: `acquire`, `renew`, `step_down`,
//!   `release`, and the pauses between attempts;
//! - `attempt.rs`: one attempt against the Lease (`try_acquire_or_renew`)
//!   and what each read and write tells the knowledge;
//! - `knowledge.rs`: what this process knows of its Lease, in one place:
//!   what it read, what it wrote, and what follows (whose the record is,
//!   when it expires by our clock, what the next write holds);
//! - `pacing.rs`: when the next request may go (jittered retry periods,
//!   `Retry-After`);
//! - `report.rs`: what each attempt's outcome tells the status and the log
//!   (counters, the last error, failures and recovery at warn);
//! - `shared.rs`: the state the thread writes and the views read (the
//!   knowledge, the latest term, the requests' counters);
//! - `probe.rs`: [`Probe`], the read-only view (every accessor lives there);
//! - `term.rs`: [`Term`], one leadership term, its fencing token and how
//!   it ended ([`StopReason`]);
//! - `leader_event.rs`: [`LeaderEvent`], what the caller is told;
//! - `handle.rs`: [`ElectorHandle`] (a [`Probe`] that can also stop) and
//!   [`Stopper`];
//! - `lost.rs`: waiting for lost leadership, library-go style.
//!
//! # Time budgets
//!
//! A renew round has one deadline on the elector's clock, `start of the last
//! successful renew + renew_deadline`; an acquire attempt has `its start +
//! renew_deadline`. Each request draws from it a [`Deadline`](crate::Deadline)
//! of at most the per-request cap ([`ElectorConfig::request_cap`], by default
//! `max(renew_deadline / 2, 1 s)` as client-go's `NewFromKubeconfig` sets),
//! and the client's 401 retry and exec-plugin run share that request's
//! budget. So `StoppedLeading` comes no later than `renew_deadline` (plus
//! scheduling slack) after the start of the last successful renew, however
//! the server fails, and one request that hangs is abandoned at the cap with
//! room for a retry inside the deadline. A thread that wakes from a freeze
//! (a stopped process, a long pause) past that deadline steps down before
//! it sends anything, and a [`Term`] is never current past it.
//!
//! With [`ElectorConfig::acquire_timeout`] the thread gives up acquiring
//! between attempts, never by cutting one short: a write whose answer was
//! abandoned may still land, and a candidate that gave up would not
//! release it.
//!
//! After a failed acquire attempt the next is one jittered retry period
//! away (or the server's `Retry-After`, clamped to
//! [`MAX_RETRY_AFTER`](crate::client::MAX_RETRY_AFTER)); only an answered
//! attempt that showed a held lease may wake earlier, at its observed
//! expiry, or when the watch delivers a change (read from what it
//! delivered, without a request). Renew attempts are a retry period
//! apart, start to start, as client-go's `PollImmediateUntil`; between
//! them a leader looks at what its watch delivers, and a record not ours
//! ends the term there.
//!
//! A stop ([`ElectorHandle::stop`], [`Stopper::stop`]) ends the term at
//! once: `StoppedLeading` is sent from the stopping thread, whatever the
//! server is doing, and the request in flight is interrupted. The release
//! then gets its own budget, [`ElectorConfig::release_timeout`]. Dropping
//! the handle during a panic stops without releasing: the caller's workers
//! may still run, and the guarded work must have stopped before the lease
//! is handed over.
//!
//! # Identity
//!
//! A record under this candidate's identity counts as its own only if this
//! process wrote it (the last confirmed write, or one sent since whose
//! answer was lost). Any other such record is another process using the
//! same identity, or a previous run: it is waited out like another
//! holder's, and if it is seen renewed the duplicate is logged at error
//! level and reported by [`Probe::duplicate_identity`]. A restart with a
//! stable identity thus takes over after one lease duration, or at once
//! when the previous run released (`release_on_cancel`). client-go takes
//! over at once, which is also how two processes with one identity both
//! lead.
//!
//! # Terms and tokens
//!
//! Every term's [`Term::token`] is the `resourceVersion` the API server
//! gave the write that began it: etcd's revision, which grows with every
//! write to the cluster, across deletions and recreations of the Lease,
//! whatever anyone writes into `leaseTransitions` (KEP-5504 documents
//! resourceVersions as comparable integers since Kubernetes 1.35). So no
//! two terms share a token, and a later term's is greater. A lock that
//! reports no versions, or versions that are not decimal integers, gets
//! the `leaseTransitions` it wrote instead (with a warning). The
//! `leaseTransitions` this elector writes counts takeovers as client-go's
//! does (one more on a change of holder), and also on a new term on its own
//! earlier record.
//!
//! # One piece of work at a time
//!
//! A term the caller holds (a `Term` received, or cloned) is work running.
//! A release on stop waits for it (`release_grace`); with `rejoin`, a new
//! term is not sought while the work of the last one still holds its
//! `Term`: wait before acquiring, rather than hold a new term the work
//! cannot use yet. A term ends as [taken over](Term::taken_over) when
//! another writer took, freed or deleted the Lease (a deletion lets anyone
//! create it at once), also when a read finds it created anew: the work
//! has no time left. A term that ran out is still watched while its work
//! runs: the elector reads the Lease (once a retry period, or what the
//! watch delivers, never a write) until every `Term` of it was dropped, so
//! a takeover in the work's time to stop is a takeover all the same.
//!
//! Deliberate differences from client-go, each on the safe side:
//! - The renew deadline counts from the *start* of the last successful renew
//!   request, not from the start of the current renew round, so
//!   `StoppedLeading` comes no later than `renew_deadline` after the last
//!   renew that others can have seen.
//! - A leader that reads the Lease and finds another holder steps down at
//!   once instead of retrying until the deadline.
//! - `StoppedLeading` is sent only by an elector that was leading.
//! - `NewLeader` is not sent for a released (holder-less) Lease.
//! - When the leader's optimistic `PUT` fails in transport (no answer),
//!   the attempt ends there and is retried after the pause; client-go
//!   follows at once with a `GET`, which against an unreachable server only
//!   spends the renew deadline faster. A `409` still falls back to
//!   `GET` + `PUT` at once.
//! - A new term on our own earlier record adds one to `leaseTransitions`
//!   (see above).
//! - The Lease is watched by default (client-go polls): a change reaches
//!   every candidate within a round trip. An acquiring write that gets
//!   409 lost the race to another candidate (a release wakes every
//!   watching follower at once): not a failure, as a create's 409 is not.

mod attempt;
mod builder;
mod config;
#[cfg(feature = "testing")]
pub(crate) mod driven;
mod handle;
pub(crate) mod io;
mod knowledge;
#[cfg(test)]
mod lab;
mod leader_event;
#[cfg(test)]
pub(crate) use lab::leading;
mod lost;
mod pacing;
mod probe;
mod receiver;
mod report;
mod run;
mod shared;
mod term;
mod work;

pub use builder::{ElectorBuilder, LeaderElector};
pub use config::{
    ElectorConfig, DEFAULT_RELEASE_GRACE, DEFAULT_RELEASE_TIMEOUT, JITTER_FACTOR, MIN_RETRY_PERIOD,
};
pub use handle::{ElectorHandle, Stopper};
pub use leader_event::LeaderEvent;
pub use lost::{exit_on_lost_leadership, wait_for_lost_leadership, LeadershipEnd};
pub use probe::Probe;
pub use receiver::LeaderEvents;
#[cfg(feature = "testing")]
pub(crate) use term::LetGo;
pub use term::{stop_margin, StopReason, Term};
