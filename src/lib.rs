//! Synchronous, blocking Kubernetes leader election on `coordination.k8s.io/v1`
//! Leases: client-go's `tools/leaderelection` semantics and OpenShift
//! library-go's defaults, for programs without an async runtime.
//!
//! One thread per elector renews the Lease; the caller learns about
//! leadership through a channel of [`LeaderEvent`]s and never has code run
//! on that thread. [`ElectorHandle`] answers `is_leader()` without touching
//! the network and stops the elector, releasing the lease when asked.
//!
//! - [`client`]: in-cluster or explicit API server access ([`ClientConfig`];
//!   [`ClientConfig::infer`] picks in-cluster config in a pod, else the
//!   kubeconfig).
//! - [`kubeconfig`]: kubeconfig files (YAML as kubectl writes them, or
//!   JSON), `$KUBECONFIG` lists merged as kubectl merges them.
//! - [`lock`]: the [`Lock`] trait and the Lease implementation ([`LeaseLock`]).
//! - [`elector`]: the state machine and its thread ([`LeaderElector`]).
//! - [`openshift`]: OpenShift's `LeaderElection` stanza, defaults, the
//!   single-node profile and tolerances.
//! - [`events`]: Kubernetes Events for transitions.
//! - [`status`]: what an owner reads ([`ElectorStatus`]) and the Prometheus text.
//! - `health` (feature `health`): a small `/healthz` `/readyz` `/leader` `/metrics` endpoint.
//! - [`clock`]: injectable time ([`ManualClock`] for tests).
//! - [`deadline`]: time budgets as values ([`Deadline`]).
//! - [`text`]: text from a server or a file, escaped before it is shown.
//! - `testing` (feature `testing`): an embedded API server with fault injection.
//!
//! # Example
//!
//! Two candidates on the embedded test API server; the leader releases and
//! the other takes over on its next retry instead of waiting out the lease.
//!
//! ```
//! use lease_elector::testing::TestApiServer;
//! use lease_elector::{Client, ClientConfig, LeaderElector, LeaderEvent, LeaseLock};
//! use std::time::Duration;
//!
//! let server = TestApiServer::start()?;
//! let candidate = |id: &str| -> lease_elector::Result<_> {
//!     let client = Client::new(ClientConfig::new(server.url()))?;
//!     let lock = LeaseLock::new(client, "default", "my-operator", id);
//!     LeaderElector::builder(lock)
//!         .lease_duration(Duration::from_secs(15))
//!         .renew_deadline(Duration::from_secs(10))
//!         .retry_period(Duration::from_millis(200))
//!         .release_on_cancel(true)
//!         .build()?
//!         .spawn()
//! };
//! let (a, a_events) = candidate("a")?;
//! while !matches!(a_events.recv()?, LeaderEvent::StartedLeading { .. }) {}
//!
//! let (b, b_events) = candidate("b")?;
//! match b_events.recv()? {
//!     LeaderEvent::NewLeader { identity, .. } => assert_eq!(identity, "a"),
//!     other => panic!("{other:?}"),
//! }
//! a.stop()?; // StoppedLeading for a, then the lease is released
//! while !matches!(b_events.recv()?, LeaderEvent::StartedLeading { .. }) {}
//! assert!(b.is_leader());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Terms and stopping
//!
//! `StartedLeading` carries a [`Term`]: a fencing token and whether the term
//! is still current; hand it to the work. [`ElectorHandle::stopper`] gives a
//! [`Stopper`] that any thread (a SIGTERM handler's) can use to stop the
//! elector; `StoppedLeading` then comes at once.
//!
//! # Logging
//!
//! The crate logs through the [`log`](https://docs.rs/log) facade only, at
//! client-go's levels: info for transitions, debug for each renew, warn once
//! per kind of failure with what to check (and again when requests succeed
//! after it), warn for a lost lease with the reason. Without a logger none
//! of it shows; any `log` implementation works:
//!
//! ```
//! struct Stderr;
//! impl log::Log for Stderr {
//!     fn enabled(&self, m: &log::Metadata) -> bool {
//!         // ureq and ureq_proto write request headers (a bearer token
//!         // among them) at trace: keep those targets below trace.
//!         !(m.target().starts_with("ureq") && m.level() == log::Level::Trace)
//!     }
//!     fn log(&self, r: &log::Record) {
//!         if self.enabled(r.metadata()) {
//!             // One write per line, so that lines do not mix with stdout's
//!             // in a container log.
//!             let line = format!("{} {}: {}\n", r.level(), r.target(), r.args());
//!             let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
//!         }
//!     }
//!     fn flush(&self) {}
//! }
//! static LOGGER: Stderr = Stderr;
//! let _ = log::set_logger(&LOGGER);
//! log::set_max_level(log::LevelFilter::Warn);
//! ```
//!
//! Text from the server (holder identities, `Status` messages) is escaped
//! of control characters in the crate's own log lines and errors; escape it
//! with [`text::escape`] before you print it yourself.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// The API is the items re-exported below (and the `openshift`, `text`,
// `health` and `testing` modules); the modules marked hidden are public
// only for the crate's own tools, examples and tests, which reach a few
// internals through them.
#[doc(hidden)]
pub mod client;
#[doc(hidden)]
pub mod clock;
#[doc(hidden)]
pub mod deadline;
#[doc(hidden)]
pub mod duration;
#[doc(hidden)]
pub mod elector;
#[doc(hidden)]
pub mod error;
#[doc(hidden)]
pub mod events;
#[cfg(feature = "health")]
pub mod health;
#[cfg(any(feature = "health", feature = "testing"))]
mod http_server;
#[doc(hidden)]
pub mod lease;
#[doc(hidden)]
pub mod lock;
mod names;
pub mod openshift;
mod random;
#[doc(hidden)]
pub mod status;
#[cfg(test)]
mod test_dir;
#[cfg(feature = "testing")]
pub mod testing;
pub mod text;
#[doc(hidden)]
pub mod tool;
mod watch;

pub use client::{Client, ClientConfig};
pub use elector::{
    ElectorBuilder, ElectorHandle, LeaderElector, LeaderEvent, LeaderEvents, Probe, StopReason,
    Stopper, Term,
};
pub use error::{ApiStatus, Error, Result, StatusKind};
pub use events::EventRecorder;
pub use lock::{identity, LeaseLock};
pub use status::{ElectorStatus, FailureKind, LastError};

// Not part of the API: for the crate's own tools, examples and tests.
#[doc(hidden)]
pub use client::kubeconfig;
#[doc(hidden)]
pub use clock::{Clock, ManualClock, SystemClock, Wake, Wakeup};
#[doc(hidden)]
pub use deadline::Deadline;
#[doc(hidden)]
pub use duration::{format_go_duration, parse_go_duration, GoDurationError};
#[doc(hidden)]
pub use elector::{
    exit_on_lost_leadership, wait_for_lost_leadership, ElectorConfig, LeadershipEnd,
};
#[doc(hidden)]
pub use events::EventStats;
#[doc(hidden)]
pub use lease::{LeaderElectionRecord, Lease, LeaseSpec, MicroTime, ObjectMeta, Status};
#[doc(hidden)]
pub use lock::{EventSink, Lock};
#[doc(hidden)]
pub use openshift::LeaderElection;
#[doc(hidden)]
pub use status::render_prometheus;

/// The README's Rust examples, compiled as doc tests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
