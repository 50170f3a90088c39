//! Kubernetes leader election on `coordination.k8s.io/v1` Leases for
//! programs without an async runtime: client-go's `tools/leaderelection`
//! semantics and OpenShift library-go's defaults, one thread per elector,
//! blocking calls (`ureq` and `rustls`).
//!
//! # In a cluster
//!
//! A whole program (`cargo add lease-elector env_logger log signal-hook`).
//! It works while this replica leads; on SIGTERM the work is told to stop,
//! and the Lease is released once the work has returned, so that the next
//! replica, which watches the Lease, takes over within a round trip, never
//! while this one works:
//!
//! ```no_run
#![doc = include_str!("../docs/in-cluster.rs")]
//! ```
//!
//! [`LeaderElector::run`] calls the closure on a thread of its own for each
//! term, with the [`Term`]: loop while [`Term::is_current`], and send
//! [`Term::token`] with every write to a store that can refuse stale tokens
//! (see [Terms and fencing](#terms-and-fencing)). A stop from the
//! [`Stopper`] ends the term at once; with
//! [`release_on_cancel`](ElectorBuilder::release_on_cancel) the release
//! waits for the closure to return, at most
//! [`release_grace`](ElectorBuilder::release_grace) (10 s), after which the
//! Lease is left to expire. A lost term (no renew within the renew
//! deadline, or another holder) ends the call with [`StopReason::Lost`]:
//! exit and let the orchestrator start a fresh candidate, as client-go's
//! users do, or build with [`rejoin`](ElectorBuilder::rejoin).
//!
//! For a loop of your own, [`LeaderElector::spawn`] gives an
//! [`ElectorHandle`] and the [`LeaderEvents`] channel (`StartedLeading`
//! with its [`Term`], `StoppedLeading`, `NewLeader`); no user code ever runs
//! on the elector's thread. [`LeaderElector::probe`] (before `run`) and
//! [`ElectorHandle::probe`] give a [`Probe`] for other threads:
//! [`Probe::is_leader`] answers without touching the network, and a health
//! endpoint serves it (see [Status and metrics](#status-and-metrics)).
//!
//! [`ClientConfig::infer`] reads `$KUBECONFIG` or `~/.kube/config` where
//! there is one, else the pod's service account, as kubectl does (see
//! [Connecting](#connecting)). The service account needs `get`, `create`,
//! `update` and `watch` on `leases` (`watch` for the Lease watch, which
//! asks for the one Lease by name: no `list`), and `create` on core
//! `events` with an [`EventRecorder`]; the repository's `docs/deploy/`
//! holds a ServiceAccount, Role, RoleBinding and Deployment to start from.
//! Without `watch` it polls, as client-go does: a release or a takeover is
//! then seen at the next attempt, up to 2.2 retry periods later, where the
//! watch brings it within a round trip (see
//! [Every change within a round trip](#every-change-within-a-round-trip)).
//!
//! A custom lock (a database row, a test double) implements [`Lock`], with
//! [`LeaderElectionRecord`], [`Deadline`] and [`MicroTime`].
//!
//! # Testing your program
//!
//! The `testing` feature embeds a Kubernetes API server ([`TestApiServer`]):
//! each candidate gets a client configuration of its own, and one line
//! breaks the API server for that candidate alone. Here the leader steps
//! down and releases, and the other, woken by its watch, takes over:
//!
//! ```
//! use lease_elector::testing::TestApiServer;
//! use lease_elector::{Client, LeaderElector, LeaderEvent, LeaseLock};
//! use std::time::Duration;
//!
//! let server = TestApiServer::start()?;
//! let candidate = |id: &str| -> lease_elector::Result<_> {
//!     let client = Client::new(server.client_config(id))?;
//!     LeaderElector::builder(LeaseLock::new(client, "default", "my-operator", id))
//!         .retry_period(Duration::from_millis(200))
//!         .release_on_cancel(true)
//!         .build()?
//!         .spawn()
//! };
//! let (a, a_events) = candidate("a")?;
//! while !matches!(a_events.recv()?, LeaderEvent::StartedLeading { .. }) {}
//! let (b, b_events) = candidate("b")?;
//! a.stop()?; // StoppedLeading for "a", then the Lease is released
//! while !matches!(b_events.recv()?, LeaderEvent::StartedLeading { .. }) {}
//! assert!(b.probe().is_leader());
//! assert_eq!(server.holder("default", "my-operator").as_deref(), Some("b"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! kubectl talks to it too ([`write_kubeconfig`]), and it
//! answers the calls the official Go, Python and JavaScript clients make
//! as kube-apiserver does; the crate's tests run all three against it.
//! It reports itself as v1.32.0, the minor of the kubectl the crate's
//! tests ran against it and against kube-apiserver (the project machine's:
//! the tests ran kubectl 1.32.4; where a machine has none,
//! `.ci/control-plane build` builds kubectl 1.37.2, the control plane's
//! release).
//! On its own it is a fake cluster for kubectl and a program run by hand,
//! installed from a clone of the repository (or, once the crate is
//! published, from crates.io with `cargo install lease-elector --features
//! testing --bin lease-elector-test-server`):
//!
//! ```sh
//! cargo install --path . --features testing --bin lease-elector-test-server
//! lease-elector-test-server --kubeconfig /tmp/fake.kubeconfig --tls --token t0k3n &
//! KUBECONFIG=/tmp/fake.kubeconfig cargo run   # your program, in your project
//! ```
//!
//! # How it behaves
//!
//! Timings are client-go's: `lease_duration > renew_deadline > 1.2 ×
//! retry_period` (15 s / 10 s / 2 s by default), expiry judged by the local
//! time a record was seen to change, never by the holder's `renewTime`.
//!
//! | situation | what happens |
//! |---|---|
//! | the Lease is missing | the first candidate creates it; the others get 409 and follow |
//! | the leader renews | one `PUT` with the cached `resourceVersion`; on 409, `GET` and `PUT` at once |
//! | the API server fails, hangs or is cut off | one deadline per renew round, the last successful renew's start + `renew_deadline`; every request, 401 retry and exec-plugin run draws from what is left, capped per request at `max(renew_deadline / 2, 1 s)` ([`request_timeout`](ElectorBuilder::request_timeout)). The term ends by that deadline, before the Lease can expire for anyone else |
//! | the API server is down, for a candidate | one attempt per jittered retry period (`× [1, 2.2)`), or the server's `Retry-After` (429, 503; clamped to 60 s) if longer |
//! | the process froze past its deadline (SIGSTOP, a pause, a suspend) | [`Term::is_current`] and [`Probe::is_leader`] are false from the deadline on; woken, the elector steps down before it sends anything; a renew confirmed late does not revive the term. The clock counts suspended time (`CLOCK_BOOTTIME`) |
//! | the elector thread is held up (a logger that blocks) | a thread waiting on [`LeaderEvents`] ends the term itself at its deadline; the elector acts first and logs after |
//! | a release, seen by a follower | it takes the Lease at once: the watch event wakes it (polling, at its next attempt) |
//! | another holder, a freed or a deleted Lease, seen by the leader | the term ends at once: at the watch event, without waiting for the next renew (polling, at the next renew) |
//! | the server refuses the watch (403, 404, 405), or it keeps being cut | the elector polls as with [`watch(false)`](ElectorBuilder::watch), warns once with the verbs to grant, and [`ElectorStatus::watch`] says why; the watch is asked again every 10 min, never more than 10 times in 10 min |
//! | the Lease deleted | its last holder is deemed to hold it for a lease duration from when it was seen missing; a leader whose `PUT` recreates it steps down (kube-apiserver creates a Lease on update) |
//! | a writer lowers or drops `leaseTransitions`, or sets it to `i32::MAX` | nothing changes for tokens: a term's token is the `resourceVersion` the write that began it got, which only grows; `leaseTransitions` counts takeovers as client-go does |
//! | a holder's wall clock stands still or steps | any change of `resourceVersion` counts as a renew seen; a renew writes a `renewTime` after the last written, never the stored record again |
//! | two processes with one identity | a record under our identity that this process did not write is waited out like another holder's; [`Probe::duplicate_identity`] turns true |
//! | [`ElectorHandle::stop`] or [`Stopper::stop`] | `StoppedLeading` at once, whatever the server is doing; the request in flight is abandoned; with `release_on_cancel`, the release (its own 5 s budget, [`release_timeout`](ElectorBuilder::release_timeout)) waits for the work to drop its `Term`s |
//! | the handle dropped during a panic, or the work panicking under `run` | the elector stops without releasing: the Lease expires |
//! | the leader crashed | a follower takes over a lease duration after it last saw the record change: watching, its last renew, within a round trip of the write; polling, up to 2.2 retry periods later |
//! | [`acquire_timeout`](ElectorBuilder::acquire_timeout) passes | the elector ends without leading (`run` returns [`Error::AcquireTimeout`]), judged between attempts |
//!
//! Limits: a candidate that never read the Lease and finds it missing
//! after a deletion creates it at once, as client-go does; a Lease freed,
//! retaken or deleted by another writer is learned of at the watch event,
//! or, while polling, at the holder's next renew, up to a retry period
//! later (its term then ends as [taken over](Term::taken_over), and the
//! next term's token is greater); each candidate's clock must run within
//! ±(LD − RD) / (LD + RD) of true time (±20 % at 15 s / 10 s, ±12.3 % at
//! 137 s / 107 s, ±5.9 % at 270 s / 240 s), and for the work's budget
//! after a term ([`Term::time_to_stop`]) within about ±1 s / 2LD of each
//! other (±3 % at 15 s).
//!
//! # Every change within a round trip
//!
//! Each candidate watches its Lease (one more thread and connection), so
//! a write reaches every candidate as the API server tells it, not at its
//! next poll: a graceful handover takes a round trip, a crash failover the
//! lease duration after the last renew to within milliseconds, and a
//! leader whose Lease another writer took, freed or deleted stops at that
//! write. The benchmark (`examples/bench.rs`) draws this picture from its
//! own run, on loopback with lease 4 s, renew deadline 3 s, retry period
//! 1 s, and prints the figures beside polling's (the README's Figures).
//! Polling stays underneath: a watch that is down, late or refused costs
//! time, never safety, since only the renew path decides who leads.
//!
#![doc = include_str!("../docs/timeline.svg")]
//!
//! # Terms and fencing
//!
//! | [`Term`] | what it says |
//! |---|---|
//! | [`token`](Term::token) | the fencing token: the Lease's `resourceVersion` as the write that began the term stored it (etcd's revision), greater than every earlier term's on this Lease, across deletions and whatever anyone writes into it |
//! | [`is_current`](Term::is_current) | false from the moment the renew deadline passes without a renew or the term ends, and never true again (reads the clock only) |
//! | [`time_to_stop`](Term::time_to_stop) | the work's time budget: how long it may still run before anyone else may lead (the lease duration after the last renew, less a margin; zero once taken over): begin a step only if it fits |
//! | [`taken_over`](Term::taken_over) | the term ended because another writer took, freed or deleted the Lease: stop at once |
//! | [`valid_until`](Term::valid_until) | when `is_current` turns false unless a renew succeeds first, on the elector's clock |
//! | [`wait_ended`](Term::wait_ended) | blocks until the term ends, at most a timeout: a pause between steps that the term's end cuts short |
//!
//! The work's budget: after a term ends at its deadline, the work has the
//! lease duration less the renew deadline before another candidate may
//! lead: 5 s with client-go's 15 s / 10 s (4 s after a margin of 1 s for
//! clock rates, which `time_to_stop()` takes), 30 s with OpenShift's
//! 137 s / 107 s (29 s).
//! `lease-elect` enforces it with SIGKILL; the library cannot stop a
//! thread, so the work keeps it by looking at its term between steps.
//!
//! A lease cannot stop a process that is not running: a leader frozen
//! whole (a stopped VM, a long pause) may write after another took over,
//! and checking `is_current()` first does not help if the freeze falls
//! between the check and the write. client-go offers no fencing; lock
//! services close the gap as Chubby's sequencers and etcd's election
//! revisions do: send `term.token()` with every write, and have the store
//! keep the highest token it has seen and refuse a lower one (a
//! conditional update in a database, a conditional put in an object
//! store). `cargo run --example fencing` shows it. The token fences only
//! the resources that check it. It is the Lease's `resourceVersion`, an
//! integer that grows with every write to the cluster (KEP-5504 documents
//! it as comparable since Kubernetes 1.35; on etcd it always was): a
//! deleted and recreated Lease, or a writer lowering `leaseTransitions`,
//! cannot make a later term's token smaller. A lock of your own that
//! reports no versions, or versions that are not integers, gets the
//! `leaseTransitions` it wrote instead, with a warning (a fallback that a
//! deletion restarts).
//!
//! # Connecting
//!
//! [`ClientConfig::in_cluster`] reads `KUBERNETES_SERVICE_HOST`/`_PORT`,
//! the service account's `ca.crt` and namespace, and its rotating token
//! (re-read every minute and after a 401). [`ClientConfig::from_kubeconfig`]
//! and [`ClientConfig::infer`] read kubeconfig files as kubectl does: YAML
//! as kubectl, kind, k3s, minikube, `oc login` and cloud CLIs write it (or
//! JSON), `$KUBECONFIG` lists merged, exec credential plugins (`aws eks
//! get-token`, `gke-gcloud-auth-plugin`, `kubelogin`) with their token
//! cached until it expires, the oidc auth-provider and its refresh,
//! impersonation, `proxy-url` and `HTTPS_PROXY`/`NO_PROXY`,
//! `tls-server-name`, `insecure-skip-tls-verify` (warned about at every
//! load). A context without a namespace means `default`; credentials are
//! used only over TLS. The crate's tests hand the same kubeconfigs to kubectl
//! and compare the requests. [`ClientConfig::new`] is an explicit
//! configuration (`kubectl proxy`: `ClientConfig::new("http://127.0.0.1:8001")`).
//!
//! [`ClientConfig::infer`] chooses as kubectl chooses: a kubeconfig that
//! leads to a server (`$KUBECONFIG`'s files, else `~/.kube/config`) comes
//! first, in a pod too; else the pod's service account, where
//! `KUBERNETES_SERVICE_HOST` and `_PORT` are set and its token is mounted;
//! else an error naming what each lacked. The crate's tests run kubectl
//! beside it in each case, in and out of a pod.
//!
//! # Security
//!
//! An elector leads on the API server's word that its write was stored,
//! and anyone allowed to update the Lease writes the text the others read.
//!
//! **Refused**, with an [`Error`] naming what and where, never a panic: a
//! redirect (a followed one turns a `PUT` into a `GET` whose answer looks
//! like the write's); a write whose answer is not the Lease written
//! ([`Error::WriteNotConfirmed`]); a bearer token over plain `http://` to a
//! host that is not loopback (unless
//! [`allow_token_over_http`](ClientConfig::allow_token_over_http)); SOCKS
//! proxies; a file to read that is not a regular file (a FIFO is never
//! waited on); credentials Kubernetes or kubectl removed (basic auth, the
//! `gcp` and `azure` auth-providers: the error names the exec plugin that
//! replaces each); `insecure-skip-tls-verify` with a CA; names Kubernetes
//! would refuse (checked when an elector is built).
//!
//! **Bounded**: an answer body or watch event, 1 MiB; `Retry-After`, 60 s;
//! an exec plugin run, the request's budget (its process group killed and
//! reaped after, with feature `process`); files read, 8 MiB for a
//! kubeconfig, 1 MiB for certificates and keys, 64 KiB for tokens; a
//! kubeconfig's YAML, linear time and at most 4 × the file's size and
//! 1 MiB of memory (a "billion laughs" file is an error).
//!
//! **Escaped**: text from a server or a file (identities, `Status`
//! messages, error bodies, names, paths) has its control characters,
//! bidirectional marks and Unicode line separators written as escapes
//! before it reaches a log line or an error's `Display`, which is always
//! one line ([`text::escape`] does the same for your own output).
//! [`ApiStatus`] keeps the raw text for programs that read it.
//!
//! **Never logged**, nor shown in an error or a `Debug` dump: bearer
//! tokens, oidc refresh tokens and client secrets, proxy passwords (shown
//! as `***@`). ureq, underneath, logs the bytes of every request at trace
//! level, the `Authorization` header among them: keep its targets at info
//! (see [Logging](#logging)).
//!
//! # Status and metrics
//!
//! [`Probe::status`] is a snapshot that never touches the network
//! ([`ElectorStatus`]: leading, holder, term token, the last error and its
//! [`FailureKind`] with what to check, why the last term was lost,
//! counters, and [`WatchMode`]: watching, or polling and why).
//! [`Probe::check`] is client-go's liveness check (leader not
//! renewed for the lease duration + a tolerance, or a lost term that
//! outlived it); [`Probe::check_ready`] also fails for a candidate with no
//! successful request for longer than the tolerance, or refused 403.
//!
//! The `health` feature's [`HealthServer`] serves them as
//! `/healthz`, `/readyz`, `/leader` and `/metrics`: client-go's
//! `leader_election_master_status` and `leader_election_slowpath_total`,
//! and the crate's `lease_elector_*` series (attempts, renews, failed
//! requests, held by another, consecutive failures, transitions, requests,
//! last renew and last success timestamps, duplicate identity, term token,
//! last error kind, and `lease_elector_watching`: 1 while the watch brings
//! the changes, 0 while polling, also while a stream sends no events for
//! its silence bound). A healthy follower's failure series stay
//! at 0: alert on `rate(lease_elector_failed_requests_total[5m]) > 0` or
//! `time() - lease_elector_last_success_timestamp_seconds > 60`. A program
//! with an HTTP server of its own serves [`render_prometheus`] of
//! [`Probe::status`] as its `/metrics`.
//!
//! The program above with the endpoint (`cargo add lease-elector
//! --features health`), and its Events recorded; the repository's
//! `docs/deploy/deployment.yaml` points the liveness probe at `/healthz`
//! and the readiness probe at `/readyz` on port 8080:
//!
//! ```no_run
#![doc = include_str!("../docs/in-cluster-health.rs")]
//! ```
//!
//! # Logging
//!
//! The crate logs through the [`log`](https://docs.rs/log) facade only, at
//! client-go's levels: info for transitions, debug for each renew, warn
//! once per kind of failure with what to check (and when requests succeed
//! again), warn for a lost lease with the reason. A lost term ends before
//! anything is logged, so a logger that blocks never delays it. Any logger
//! works; keep ureq's targets at info, since its trace output carries the
//! bearer token. With `env_logger`, as in the program above:
//!
//! ```
//! env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
//!     .filter_module("ureq", log::LevelFilter::Info)
//!     .init();
//! ```
//!
//! That also holds under `RUST_LOG=trace` or `RUST_LOG=ureq=trace`; a
//! `RUST_LOG` naming a longer target (`ureq_proto=trace`) overrides it.
//!
//! # OpenShift
//!
//! Operators configured the OpenShift way carry a `config.openshift.io/v1`
//! `LeaderElection` stanza; [`openshift::LeaderElection`] reads it (JSON or
//! YAML), applies library-go's defaults (137 s / 107 s / 26 s, or the
//! single-node 270 s / 240 s / 60 s) and turns it into an elector with
//! `release_on_cancel(true)` and an Event per transition. Its service
//! account needs `get`, `create` and `update` on `leases`
//! (`coordination.k8s.io`) and `create` on `events` (the core group, `""`:
//! the Events are core/v1) in the Lease's namespace. An empty namespace
//! falls back to the pod's service-account namespace; outside a pod, pass
//! it to `defaulted`:
//!
//! ```no_run
//! use lease_elector::openshift::LeaderElection;
//! use lease_elector::{Client, ClientConfig};
//!
//! let stanza = LeaderElection::from_file("/etc/my-operator/leader-election.json")?;
//! let stanza = stanza.defaulted("", "my-operator-lock"); // .single_node() on SNO
//! let client = Client::new(ClientConfig::in_cluster()?)?;
//! match stanza.elector(client, "my-operator", "")? {
//!     None => run_operator(|| true), // "disable": true: lead without electing
//!     Some(builder) => {
//!         builder.build()?.run(|term| run_operator(|| term.is_current()))?;
//!     }
//! }
//!
//! fn run_operator(keep_going: impl Fn() -> bool) {
//!     while keep_going() { /* one step of the operator's work */ }
//! }
//! # Ok::<(), lease_elector::Error>(())
//! ```
//!
//! [`LeaderElection::tolerances`](openshift::LeaderElection::tolerances)
//! says what the timings tolerate (retries, clock skew, API server
//! downtime, worst-case acquisition), as library-go logs it.
//!
//! # Features
//!
//! All off by default. `testing`: the embedded API server. `health`: the
//! `/healthz` endpoint (std only). `process`: exec plugins' process groups
//! killed and reaped (kill(2) through rustix). `cli`: the `lease-elect`
//! tool, which runs a command only while leading (turns on `health` and
//! `process`).
//!
#![cfg_attr(feature = "testing", doc = "[`TestApiServer`]: testing::TestApiServer")]
#![cfg_attr(
    feature = "testing",
    doc = "[`write_kubeconfig`]: testing::TestApiServer::write_kubeconfig"
)]
#![cfg_attr(
    not(feature = "testing"),
    doc = "[`TestApiServer`]: https://docs.rs/lease-elector/latest/lease_elector/testing/struct.TestApiServer.html"
)]
#![cfg_attr(
    not(feature = "testing"),
    doc = "[`write_kubeconfig`]: https://docs.rs/lease-elector/latest/lease_elector/testing/struct.TestApiServer.html#method.write_kubeconfig"
)]
#![cfg_attr(feature = "health", doc = "[`HealthServer`]: health::HealthServer")]
#![cfg_attr(
    not(feature = "health"),
    doc = "[`HealthServer`]: https://docs.rs/lease-elector/latest/lease_elector/health/struct.HealthServer.html"
)]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// The API is the items re-exported below (and the `openshift`, `text`,
// `health` and `testing` modules); the modules marked hidden are public
// only for the crate's own tools, examples and tests, which reach a few
// internals through them.
#[doc(hidden)]
pub mod calendar;
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
#[cfg(any(feature = "cli", feature = "testing"))]
#[doc(hidden)]
pub mod session;
#[doc(hidden)]
pub mod status;
#[cfg(test)]
mod test_dir;
#[cfg(test)]
mod test_log;
#[cfg(feature = "testing")]
pub mod testing;
pub mod text;
#[doc(hidden)]
pub mod tool;
mod watch;

pub use client::{Client, ClientConfig};
pub use deadline::Deadline;
pub use elector::{
    ElectorBuilder, ElectorHandle, LeaderElector, LeaderEvent, LeaderEvents, Probe, StopReason,
    Stopper, Term,
};
pub use error::{ApiStatus, Error, Result, StatusKind};
pub use events::EventRecorder;
pub use lease::{LeaderElectionRecord, MicroTime};
pub use lock::{identity, LeaseLock, Lock};
pub use status::{render_prometheus, ElectorStatus, FailureKind, LastError, WatchMode};

// Not part of the API: for the crate's own tools, examples and tests.
#[doc(hidden)]
pub use client::kubeconfig;
#[doc(hidden)]
pub use clock::{Clock, ManualClock, SystemClock, Wake, Wakeup};
#[doc(hidden)]
pub use duration::{format_go_duration, parse_go_duration, GoDurationError};
#[doc(hidden)]
pub use elector::{
    exit_on_lost_leadership, wait_for_lost_leadership, ElectorConfig, LeadershipEnd,
};
#[doc(hidden)]
pub use events::EventSink;
#[doc(hidden)]
pub use events::EventStats;
#[doc(hidden)]
pub use lease::{Lease, LeaseSpec, MicroTimeError, ObjectMeta, Status};
#[doc(hidden)]
pub use openshift::LeaderElection;

/// The README's Rust examples, compiled as doc tests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
