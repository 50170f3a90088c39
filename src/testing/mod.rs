//! An embedded Kubernetes API server for tests (feature `testing`).
//!
//! [`TestApiServer`] serves the Lease subset of the Kubernetes API on
//! `127.0.0.1` (an ephemeral port), over plain HTTP or TLS, from ordinary
//! threads: `coordination.k8s.io/v1` Leases with optimistic concurrency,
//! core/v1 and `events.k8s.io/v1` Events, Namespaces, watches, bearer-token
//! and client-certificate authentication. It answers the calls the
//! official Go, Python and JavaScript clients make as kube-apiserver does
//! (it reports itself as v1.32.0), validates like it and answers errors with real `Status` bodies,
//! so a program that works against it behaves the same against a cluster,
//! and one that a cluster would refuse is refused here too. Faults (error
//! statuses, latency, dropped connections, garbage bodies, outages, token
//! rotation) can be injected while a test runs.
//!
//! # Testing your own leader-elected program
//!
//! Start a server, give each candidate of your program a client
//! configuration of its own ([`client_config`](TestApiServer::client_config):
//! the URL, the CA when TLS is on, a token naming the candidate), then read
//! the Lease they write and break things underneath one of them:
//!
//! ```
//! use lease_elector::testing::{Fault, TestApiServer};
//! use lease_elector::{Client, LeaderElector, LeaderEvent, LeaderEvents, LeaseLock};
//! use std::time::Duration;
//!
//! let server = TestApiServer::builder().tls(true).build()?;
//! // Your program's candidates, each with a configuration of its own
//! // (short timings, so that the test is quick).
//! let candidate = |id: &str| -> lease_elector::Result<_> {
//!     let client = Client::new(server.client_config(id))?;
//!     LeaderElector::builder(LeaseLock::new(client, "default", "my-lease", id))
//!         .lease_duration(Duration::from_secs(2))
//!         .renew_deadline(Duration::from_secs(1))
//!         .retry_period(Duration::from_millis(200))
//!         .build()?
//!         .spawn()
//! };
//! let wait_until_leading = |events: &LeaderEvents| {
//!     events.iter().find(|e| matches!(e, LeaderEvent::StartedLeading { .. }))
//! };
//! let (_a, a_events) = candidate("pod-a")?;
//! wait_until_leading(&a_events);
//! let (_b, b_events) = candidate("pod-b")?;
//! assert_eq!(server.holder("default", "my-lease").as_deref(), Some("pod-a"));
//!
//! // pod-a alone loses the API server: pod-b takes over once the lease
//! // has gone unrenewed for its duration.
//! server.cut_off("pod-a");
//! wait_until_leading(&b_events);
//! server.restore("pod-a");
//!
//! // pod-b's next two renewals fail with 500; it rides them out.
//! server.inject(Fault::status(500).method("PUT").candidate("pod-b").times(2));
//!
//! // Someone else takes the lease over behind the program's back: pod-b's
//! // term ends.
//! let mut record = server.record("default", "my-lease").expect("the program created its lease");
//! record.holder_identity = "intruder".into();
//! server.put_record("default", "my-lease", &record);
//! let lost = b_events.iter().find(|e| matches!(e, LeaderEvent::StoppedLeading { .. }));
//! assert!(lost.is_some());
//! assert!(server.stats().updates > 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A complete, runnable round trip with a plain HTTP client:
//!
//! ```
//! use lease_elector::testing::TestApiServer;
//! use std::io::{Read, Write};
//!
//! let server = TestApiServer::start()?;
//! let addr = server.url().trim_start_matches("http://").to_string();
//! let mut conn = std::net::TcpStream::connect(addr)?;
//! write!(
//!     conn,
//!     "GET /apis/coordination.k8s.io/v1/namespaces/default/leases/x HTTP/1.1\r\n\
//!      Host: test\r\nConnection: close\r\n\r\n"
//! )?;
//! let mut answer = String::new();
//! conn.read_to_string(&mut answer)?;
//! assert!(answer.starts_with("HTTP/1.1 404"));
//! assert!(answer.contains(r#"leases.coordination.k8s.io \"x\" not found"#));
//! server.shutdown();
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! # Faults
//!
//! [`inject`](TestApiServer::inject) queues [`Fault`] rules. When a request
//! arrives (after the outage check and authentication), the rules are
//! matched against it in insertion order, all at once:
//!
//! - each matching **latency** rule fires: it uses up one of its counts and
//!   adds its delay; matching goes on with the next rule;
//! - the first matching **status**, **retry-after**, **raw**, **drop** or
//!   **hang** rule fires, uses up one count and ends the matching; rules
//!   after it are not looked at.
//!
//! A rule matches a request when its method, path fragment and headers (see
//! [`Fault::header`]; [`Fault::candidate`] singles out one candidate made by
//! [`client_config`](TestApiServer::client_config), [`Fault::bearer`] one
//! with a token of its own) all match.
//!
//! The summed delay is then slept (shutdown cuts it short and the
//! connection is closed without an answer; an outage that started during
//! it drops the request), and the request gets the fired rule's answer, or
//! is served normally when none fired. Rules whose counts are used up are
//! removed. For "slow and then failing" queue the latency rule first; a
//! latency rule queued behind a status rule that matches the same request
//! does not delay it. A hung request is held until
//! [`clear_faults`](TestApiServer::clear_faults), an outage or shutdown.
//! Each connection has its own thread and none of them sleeps or hangs
//! holding a lock, so a delayed or hung request never holds up another
//! connection.
//!
//! # Endpoints
//!
//! - Leases: `/apis/coordination.k8s.io/v1/namespaces/{ns}/leases[/{name}]`
//!   and `/apis/coordination.k8s.io/v1/leases` (every namespace)
//! - core/v1 Events: `/api/v1/namespaces/{ns}/events[/{name}]` and
//!   `/api/v1/events`; `events.k8s.io/v1` Events:
//!   `/apis/events.k8s.io/v1/namespaces/{ns}/events[/{name}]` and
//!   `/apis/events.k8s.io/v1/events`, the same objects under the other
//!   group's field names (`regarding`, `note`, `reportingController`,
//!   `deprecated*`), created with that group's stricter validation
//! - Namespaces: `/api/v1/namespaces[/{name}]`
//!
//! On each: `GET` (one object, or a list filtered by a `fieldSelector`
//! on the fields the API server allows and a `labelSelector`: `app=x`,
//! `app!=x`, `app in (x,y)`, `app notin (x)`, `app`, `!app`, `n>1`), `POST`,
//! `PUT`, `PATCH`, `DELETE` (`DeleteOptions` preconditions are checked),
//! `DELETE` of a namespace's collection (not of Namespaces, nor across
//! namespaces: a 405, as kube-apiserver routes it), and
//! `GET ...?watch=true`.
//!
//! - **Namespaces** exist as objects: `default`, `kube-system`,
//!   `kube-public` and `kube-node-lease` at start;
//!   [`add_namespace`](TestApiServer::add_namespace) or a `POST` adds one.
//!   Creating an object in a namespace that does not exist is a 404
//!   (`namespaces "x" not found`, the `NamespaceLifecycle` admission's
//!   answer); the first three may not be deleted (403). Deleting a
//!   namespace is immediate here (its objects go with it, finalizers or
//!   not; a cluster shows it `Terminating` meanwhile).
//! - **Writes** are decoded as the API server decodes them: explicit
//!   `null`s are dropped, and so are unknown fields, each named in a
//!   `Warning: 299 - "unknown field \"spec.foo\""` header (the default
//!   `fieldValidation=Warn`; `Strict` refuses them with a 400, `Ignore`
//!   drops them silently). `dryRun=All` answers as the write would and
//!   stores nothing. A `PUT` of a Lease must carry `metadata.resourceVersion`
//!   (422 otherwise: Leases allow no unconditional update); a `PUT` of a
//!   missing Lease or Event creates it.
//! - **Validation** as kube-apiserver's, each broken rule a cause of a 422
//!   `Invalid` Status (`details.causes`: field, `FieldValueInvalid`,
//!   message): names (a Lease's and an `events.k8s.io/v1` Event's a
//!   DNS-1123 subdomain, a Namespace's a DNS-1123 label, a core/v1
//!   Event's without `/` or `%`), label keys and annotation keys
//!   (qualified names: an optional DNS-1123 subdomain prefix and `/`, then
//!   at most 63 of `[A-Za-z0-9._-]`, alphanumeric at both ends), label
//!   values (empty, or the same up to 63), finalizer names; an update may
//!   not change `metadata.uid`.
//! - **Finalizers** hold an object: a `DELETE` of a Lease or Event that
//!   has some sets `metadata.deletionTimestamp` (and
//!   `deletionGracePeriodSeconds: 0`) and answers with the object; the
//!   update that empties them removes it (watchers see `MODIFIED`, then
//!   `DELETED`), and none may be added meanwhile (422).
//! - **`PATCH`** takes JSON patch (`application/json-patch+json`, RFC 6902;
//!   an operation that does not apply is a 422), JSON merge patch, a
//!   strategic merge patch (which for these types' maps and scalars merges
//!   the same way; its `$patch`-style directives are refused with a 400),
//!   and server-side apply.
//! - **Server-side apply** (`application/apply-patch+yaml`) is a subset:
//!   `fieldManager` is required (422); a missing object is created from the
//!   configuration; otherwise the applied fields are merged in, the fields
//!   this manager applied before and no longer applies are removed unless
//!   another manager owns them, and changing a field another manager owns
//!   (by apply, or by a create, update or patch, whose manager is
//!   `fieldManager` or the `User-Agent` up to its first `/`) is a 409
//!   `Apply failed with 1 conflict: conflict with "m" ...` unless
//!   `force=true`. The configuration's `metadata.resourceVersion` is a
//!   precondition, as on a cluster (a stale one is a 409 `Conflict`: apply
//!   can be a compare-and-swap), and so is its `metadata.uid` (another
//!   object's is a 422, one where there is no object a 409). Not modelled, and refused with a 400 that says so: lists
//!   in the configuration (kube-apiserver merges `ownerReferences` by uid
//!   and `finalizers` as a set) and apply through `events.k8s.io/v1`.
//!   Ownership is kept by the server but not shown in
//!   `metadata.managedFields`.
//! - **Watches** (`resourceVersion`, `timeoutSeconds`, both selectors):
//!   without a `resourceVersion` (or with `0`) the current objects come
//!   first as `ADDED`; with one, every change after it is replayed from a
//!   window of the last 1,000 changes per resource, and an older one gets
//!   a single `ERROR` event carrying a 410 `Expired` Status (`too old
//!   resource version: 1 (1204)`), as kube-apiserver's watch cache answers.
//!   A change that takes an object out of the label selection is sent as
//!   `DELETED`, one that brings it in as `ADDED`. With
//!   `allowWatchBookmarks=true`, `BOOKMARK` events come every minute and
//!   2 s before `timeoutSeconds` runs out; `sendInitialEvents=true`, and
//!   (as kube-apiserver 1.37 does) a watch without a version or from `"0"`,
//!   ends the initial `ADDED` events with the `k8s.io/initial-events-end`
//!   bookmark. What differs from kube-apiserver is listed, with why no
//!   client can tell, in `docs/test-server-deviations.md`.
//! - Discovery for kubectl and the clients: `/version`, `/api`, `/api/v1`,
//!   `/apis`, `/apis/{coordination.k8s.io,events.k8s.io}[/v1]` (legacy
//!   discovery; kubectl falls back to it from the aggregated form), and
//!   `/openapi/v3` for the Lease paths only, so kubectl validates on the
//!   server (`fieldValidation=Strict`).
//!
//! A `GET` that accepts `application/json;as=Table;v=v1;g=meta.k8s.io` (as
//! `kubectl get` does) gets a `Table` with the columns the real API server
//! prints (`NAME HOLDER AGE` for Leases, `NAME STATUS AGE` for
//! Namespaces), also in watch events.
//!
//! Everything else is a 404 `Status`; a wrong method a 405 `Status`.
//! Bodies are capped at 1 MiB (413) and must be JSON (`Content-Type:
//! application/json`, or none at all, which kube-apiserver also takes as
//! JSON) or YAML (`application/yaml`); another media type, protobuf
//! included, is a 415. Objects without `kind` or
//! `apiVersion` get them from the URL, as the real decoder defaults them;
//! a different one is a 400. `acquireTime` and `renewTime` are stored and
//! returned as kube-apiserver re-serialises a MicroTime: UTC, six digits,
//! `Z` (`...T02:00:00.123456+02:00` is stored as `...T00:00:00.123456Z`).
//!
//! Requests are read by the small HTTP/1.1 core the crate's health
//! endpoint also uses: a request head (request line and header fields)
//! may be at most 1 MiB (431 beyond) and must arrive whole within 32 s:
//! of the connect for a connection's first request, of its first byte for
//! a later one; a connection waits at most 90 s for its next request
//! (kube-apiserver's `MaxHeaderBytes`, `ReadHeaderTimeout` and
//! `IdleTimeout`, as 1.37.2 was measured to close them), and at most 512
//! connections are served at once, the oldest silent one closed for a new
//! one; a head that is not HTTP/1.1 or HTTP/1.0 is a 400 or 505, as Go's
//! `net/http` answers it.
//!
//! # kubectl
//!
//! [`write_kubeconfig`](TestApiServer::write_kubeconfig) writes a
//! kubeconfig for the server; with it `kubectl get leases -A`, `get lease
//! X -o jsonpath=...`, `get lease X -w`, `describe lease X`, `create -f`,
//! `replace -f`, `edit`, `patch`, `label`, `annotate`, `delete lease X`,
//! `create namespace`, `get namespaces` and `get events` work as against a
//! cluster. The `lease-elector-test-server` binary runs one on its own, a
//! fake cluster for kubectl and your program: `cargo install --path .
//! --features testing --bin lease-elector-test-server` in a clone of the
//! repository (once the crate is published, `cargo install lease-elector
//! --features testing --bin lease-elector-test-server` without one), then
//! `lease-elector-test-server --kubeconfig PATH [--tls] [--token T]`.

mod api;
mod apply;
mod candidates;
mod decode;
mod deletion;
mod discovery;
mod events_v1;
mod faults;
mod hang;
mod http;
mod kubeconfig;
mod meta;
mod namespaces;
mod openapi;
mod owners;
mod patch;
mod protobuf;
mod record;
mod recorded;
mod resource;
mod schema;
mod selector;
mod server;
#[doc(hidden)]
pub mod sim;
mod stats;
mod status;
mod store;
mod table;
mod tls;
mod watch;
mod yaml_body;

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

pub use faults::Fault;
pub use recorded::RecordedEvent;
pub use stats::{RequestLog, Stats};

use crate::{ClientConfig, LeaderElectionRecord, Lease};

use server::{Shared, State};
use store::Collection;

/// The client certificate (PEM) signed by the fixture client CA, for mTLS
/// tests against a server built with
/// [`client_ca(true)`](TestApiServerBuilder::client_ca).
///
/// ```
/// use lease_elector::testing::client_cert_pem;
/// assert!(client_cert_pem().starts_with(b"-----BEGIN CERTIFICATE-----"));
/// ```
pub fn client_cert_pem() -> &'static [u8] {
    tls::CLIENT_CERT_PEM
}

/// The PKCS#8 private key (PEM) of [`client_cert_pem`].
///
/// ```
/// use lease_elector::testing::{client_cert_pem, client_key_pem, TestApiServer};
/// use lease_elector::{Client, ClientConfig};
///
/// let server = TestApiServer::builder().tls(true).client_ca(true).build()?;
/// let config = ClientConfig::new(server.url())
///     .ca_pem(server.ca_pem())
///     .client_identity(client_cert_pem(), client_key_pem());
/// let _client = Client::new(config)?;
/// # server.shutdown();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn client_key_pem() -> &'static [u8] {
    tls::CLIENT_KEY_PEM
}

/// A running embedded API server; stopped by [`shutdown`](Self::shutdown)
/// or when dropped.
///
/// ```
/// use lease_elector::testing::TestApiServer;
///
/// let server = TestApiServer::start()?;
/// println!("serving {}", server.url());
/// server.shutdown();
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct TestApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    tls: bool,
    acceptor: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for TestApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestApiServer")
            .field("url", &self.url())
            .finish_non_exhaustive()
    }
}

/// Options for a [`TestApiServer`]; see [`TestApiServer::builder`].
#[derive(Debug, Clone, Default)]
///
/// ```
/// use lease_elector::testing::TestApiServer;
///
/// let server = TestApiServer::builder().tls(true).tokens(&["s3cret"]).build()?;
/// assert!(server.url().starts_with("https://127.0.0.1:"));
/// # server.shutdown();
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct TestApiServerBuilder {
    tls: bool,
    tokens: Vec<String>,
    client_ca: bool,
    idle_timeout: Option<Duration>,
    /// Not recorded even with `LEASE_ELECTOR_RECORD_DIR` set.
    unrecorded: bool,
    /// Test seams: the head time-out and the cap on connections.
    pub(crate) timeouts: server::Timeouts,
}

impl TestApiServerBuilder {
    /// Serve HTTPS with the fixture server certificate (valid for
    /// `127.0.0.1`, `::1` and `localhost`, signed by
    /// [`TestApiServer::ca_pem`]). Default: plain HTTP.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// let server = TestApiServer::builder().tls(true).build()?;
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn tls(mut self, on: bool) -> Self {
        self.tls = on;
        self
    }

    /// Require `Authorization: Bearer <token>` with one of `tokens`.
    /// Default (and empty): no authentication.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// let server = TestApiServer::builder().tls(true).tokens(&["pod-a-token", "pod-b-token"]).build()?;
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn tokens(mut self, tokens: &[&str]) -> Self {
        self.tokens = tokens.iter().map(|t| t.to_string()).collect();
        self
    }

    /// Require and verify a client certificate signed by the fixture client
    /// CA ([`client_cert_pem`] is one); a request over such a connection is
    /// authenticated without a token. Needs [`tls(true)`](Self::tls).
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// let server = TestApiServer::builder().tls(true).client_ca(true).build()?;
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn client_ca(mut self, on: bool) -> Self {
        self.client_ca = on;
        self
    }

    /// Close a keep-alive connection once it has waited `idle` for its next
    /// request (counted from the accept or from the end of the last answer
    /// to the first byte of the next request), with a clean FIN (after a
    /// TLS `close_notify`) and no answer, as real API servers and load
    /// balancers drop idle connections. A request once started, a running
    /// watch and a hung request are not cut. Durations under 1 ms count as
    /// 1 ms. Default: 90 s, kube-apiserver's `IdleTimeout`.
    ///
    /// Whatever it is, a connection's first request head must be complete
    /// within 32 s of the connect, and a later one within 32 s of its first
    /// byte (kube-apiserver's `ReadHeaderTimeout`), and at most 512
    /// connections are served at once (a thread each): one more closes the
    /// oldest that has not sent a complete request head.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// use std::io::Read;
    /// use std::time::Duration;
    ///
    /// let server = TestApiServer::builder()
    ///     .idle_timeout(Duration::from_millis(50))
    ///     .build()?;
    /// let addr = server.url().trim_start_matches("http://").to_string();
    /// let mut conn = std::net::TcpStream::connect(addr)?;
    /// conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    /// // Nothing sent: the server hangs up on its own.
    /// assert_eq!(conn.read(&mut [0u8; 16])?, 0);
    /// assert_eq!(server.stats().connections, 1);
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        // set_read_timeout rejects zero.
        self.idle_timeout = Some(idle.max(Duration::from_millis(1)));
        self
    }

    /// Whether to record what is served when `LEASE_ELECTOR_RECORD_DIR`
    /// is set (default: yes). The differential suite replays recordings
    /// on servers of its own, which must not add to them.
    #[doc(hidden)]
    pub fn record(mut self, on: bool) -> Self {
        self.unrecorded = !on;
        self
    }

    /// The head time-out (32 s) shortened, so that a test of it is quick.
    #[cfg(test)]
    pub(crate) fn head_timeout(mut self, head: Duration) -> Self {
        self.timeouts.head = head;
        self
    }

    /// The cap on connections (512) lowered, so that a test of it is quick.
    #[cfg(test)]
    pub(crate) fn max_connections(mut self, n: usize) -> Self {
        self.timeouts.max_connections = n;
        self
    }

    /// Bind `127.0.0.1:0` and start serving.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// // client_ca needs TLS.
    /// assert!(TestApiServer::builder().client_ca(true).build().is_err());
    /// let server = TestApiServer::builder().build()?;
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn build(self) -> io::Result<TestApiServer> {
        if self.client_ca && !self.tls {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "client_ca(true) needs tls(true)",
            ));
        }
        let tls = if self.tls {
            Some(tls::server_config(self.client_ca)?)
        } else {
            None
        };
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let addr = listener.local_addr()?;
        let state = State {
            tokens: self.tokens,
            recording: if !self.unrecorded {
                record::Recording::from_env(addr.port(), self.tls)
            } else {
                None
            },
            ..State::default()
        };
        let mut timeouts = self.timeouts;
        if let Some(idle) = self.idle_timeout {
            timeouts.idle = idle;
        }
        let shared = Arc::new(Shared::new(state, tls, timeouts));
        let acceptor = server::spawn_acceptor(shared.clone(), listener)?;
        log::debug!("test-apiserver: listening on {addr}");
        Ok(TestApiServer {
            shared,
            addr,
            tls: self.tls,
            acceptor: Some(acceptor),
        })
    }
}

impl TestApiServer {
    /// Start a plain HTTP server without authentication.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// let server = TestApiServer::start()?;
    /// assert!(server.url().starts_with("http://127.0.0.1:"));
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn start() -> io::Result<TestApiServer> {
        Self::builder().build()
    }

    /// Options: TLS, tokens, client certificates, idle timeout.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// let server = TestApiServer::builder().tls(true).build()?;
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn builder() -> TestApiServerBuilder {
        TestApiServerBuilder::default()
    }

    /// `http://127.0.0.1:PORT` or `https://127.0.0.1:PORT`.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// use lease_elector::{Client, ClientConfig};
    /// let server = TestApiServer::start()?;
    /// let _client = Client::new(ClientConfig::new(server.url()))?;
    /// # server.shutdown();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The CA bundle (PEM) clients must trust to talk TLS to this server.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// use lease_elector::ClientConfig;
    /// let server = TestApiServer::builder().tls(true).build()?;
    /// let _config = ClientConfig::new(server.url()).ca_pem(server.ca_pem());
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn ca_pem(&self) -> &'static [u8] {
        tls::CA_PEM
    }

    /// Write a kubeconfig for this server to `path` (replacing it; mode
    /// `0600` on Unix, since it may hold a token), so kubectl, and any
    /// program that reads a kubeconfig, can talk to it: the server URL, the
    /// CA inline (`certificate-authority-data`) when TLS is on, `token`
    /// when given, and a current context whose namespace is `default`.
    ///
    /// As with a real cluster, kubectl sends the token only over TLS.
    ///
    /// ```no_run
    /// use lease_elector::testing::TestApiServer;
    ///
    /// let server = TestApiServer::builder().tls(true).tokens(&["s3cret"]).build()?;
    /// server.write_kubeconfig("/tmp/test-apiserver.kubeconfig", Some("s3cret"))?;
    /// // KUBECONFIG=/tmp/test-apiserver.kubeconfig kubectl get leases -A
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn write_kubeconfig(
        &self,
        path: impl AsRef<std::path::Path>,
        token: Option<&str>,
    ) -> io::Result<()> {
        let ca = self.tls.then(|| self.ca_pem());
        kubeconfig::write(path.as_ref(), &kubeconfig::render(&self.url(), ca, token))
    }

    /// The stored Lease `namespace/name`, as the crate's typed `Lease`;
    /// `None` when there is none (or what is stored does not decode as a
    /// Lease: see [`lease_json`](Self::lease_json) for that).
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    ///
    /// let server = TestApiServer::start()?;
    /// assert!(server.lease("default", "my-lease").is_none());
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[doc(hidden)]
    pub fn lease(&self, namespace: &str, name: &str) -> Option<Lease> {
        let st = self.shared.lock();
        let stored = st.store.get(Collection::Leases, namespace, name)?;
        serde_json::from_value(stored.clone()).ok()
    }

    /// The stored Lease `namespace/name` as JSON text, exactly as the API
    /// would return it: for a test that checks the wire format.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    ///
    /// let server = TestApiServer::start()?;
    /// server.put_lease_json("default", r#"{"metadata": {"name": "l"}, "spec": {"futureField": 1}}"#);
    /// let text = server.lease_json("default", "l").expect("stored");
    /// assert!(text.contains("futureField"));
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn lease_json(&self, namespace: &str, name: &str) -> Option<String> {
        let st = self.shared.lock();
        let stored = st.store.get(Collection::Leases, namespace, name)?;
        Some(stored.to_string())
    }

    /// The `metadata.resourceVersion` of the stored Lease `namespace/name`
    /// as a number (on this server, as on etcd, a revision that grows
    /// with every write): a [`Term::token`](crate::Term::token) is the one
    /// the write that began its term stored. `None` when there is no such
    /// Lease.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// use lease_elector::LeaderElectionRecord;
    ///
    /// let server = TestApiServer::start()?;
    /// assert_eq!(server.resource_version("default", "my-lease"), None);
    /// server.put_record("default", "my-lease", &LeaderElectionRecord::default());
    /// let first = server.resource_version("default", "my-lease").expect("stored");
    /// let record = LeaderElectionRecord {
    ///     holder_identity: "someone".into(),
    ///     ..LeaderElectionRecord::default()
    /// };
    /// server.put_record("default", "my-lease", &record);
    /// assert!(server.resource_version("default", "my-lease") > Some(first));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn resource_version(&self, namespace: &str, name: &str) -> Option<u64> {
        let st = self.shared.lock();
        let stored = st.store.get(Collection::Leases, namespace, name)?;
        store::meta_str(stored, "resourceVersion")?.parse().ok()
    }

    /// Who holds the Lease `namespace/name`: `None` when there is no such
    /// Lease or nobody holds it (an empty or absent `holderIdentity`).
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    ///
    /// let server = TestApiServer::start()?;
    /// // ... start candidates on "my-lease" ...
    /// assert_eq!(server.holder("default", "my-lease"), None);
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn holder(&self, namespace: &str, name: &str) -> Option<String> {
        let st = self.shared.lock();
        let stored = st.store.get(Collection::Leases, namespace, name)?;
        stored["spec"]["holderIdentity"]
            .as_str()
            .filter(|h| !h.is_empty())
            .map(str::to_string)
    }

    /// The leader-election record of the stored Lease `namespace/name`
    /// (holder, times, duration, transitions); `None` when there is no
    /// such Lease, or what is stored does not decode as one (see
    /// [`lease_json`](Self::lease_json) for that).
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    ///
    /// let server = TestApiServer::start()?;
    /// assert!(server.record("default", "my-lease").is_none());
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn record(&self, namespace: &str, name: &str) -> Option<LeaderElectionRecord> {
        self.lease(namespace, name).map(|l| l.record())
    }

    /// Write `record` into the Lease `namespace/name` as another writer
    /// would: creating it, or replacing the election fields of the stored
    /// one and keeping the rest (labels, annotations, fields this crate
    /// does not know), without validation; the resourceVersion is bumped
    /// and watchers see the change (a write that changes nothing is not
    /// written, as kube-apiserver does).
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// use lease_elector::LeaderElectionRecord;
    ///
    /// let server = TestApiServer::start()?;
    /// // Someone else took the lease behind the program's back.
    /// let record = LeaderElectionRecord {
    ///     holder_identity: "intruder".into(),
    ///     lease_duration_seconds: 15,
    ///     ..LeaderElectionRecord::default()
    /// };
    /// server.put_record("default", "my-lease", &record);
    /// assert_eq!(server.holder("default", "my-lease").as_deref(), Some("intruder"));
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn put_record(&self, namespace: &str, name: &str, record: &LeaderElectionRecord) {
        let mut st = self.shared.lock();
        let stored = st.store.get(Collection::Leases, namespace, name);
        let mut lease = stored
            .and_then(|v| serde_json::from_value::<Lease>(v.clone()).ok())
            .unwrap_or_else(|| Lease::new(namespace, name, record));
        lease.set_record(record);
        let stored = match serde_json::to_value(&lease) {
            Ok(v) => st.store.write(Collection::Leases, namespace, name, v),
            Err(e) => panic!("TestApiServer::put_record: the lease does not encode: {e}"),
        };
        if let Some(r) = st.recording.as_mut() {
            r.seed("put", "leases", namespace, name, &stored);
        }
        drop(st);
        self.shared.notify();
    }

    /// Store `lease` (named by its `metadata.name`) in `namespace`, creating
    /// or overwriting it without validation and bumping the
    /// resourceVersion; watchers see the change (unless nothing changed:
    /// that is not written, as kube-apiserver does). Its
    /// `metadata.resourceVersion` is replaced by the new version.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    ///
    /// let server = TestApiServer::start()?;
    /// // Someone else took the lease behind the program's back.
    /// let mut record = lease_elector::LeaderElectionRecord::default();
    /// record.holder_identity = "intruder".into();
    /// server.put_lease("default", &lease_elector::Lease::new("default", "my-lease", &record));
    /// assert_eq!(server.holder("default", "my-lease").as_deref(), Some("intruder"));
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Panics
    ///
    /// When `lease` has an empty `metadata.name`: a test bug.
    #[doc(hidden)]
    pub fn put_lease(&self, namespace: &str, lease: &Lease) {
        match serde_json::to_value(lease) {
            Ok(v) => self.store_lease(namespace, v),
            Err(e) => panic!("TestApiServer::put_lease: the lease does not encode: {e}"),
        }
    }

    /// Store the Lease written as JSON `text` (named by its
    /// `metadata.name`) in `namespace`, creating or overwriting it without
    /// validation and bumping the resourceVersion (watchers see the
    /// change), whatever its fields: a test can seed values no typed Lease
    /// holds (a time in the wrong format, a field of a newer version).
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    ///
    /// let server = TestApiServer::start()?;
    /// server.put_lease_json(
    ///     "default",
    ///     r#"{"metadata": {"name": "my-lease"}, "spec": {"renewTime": "yesterday"}}"#,
    /// );
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Panics
    ///
    /// When `text` is not a JSON object with a non-empty string
    /// `metadata.name`: a test bug.
    pub fn put_lease_json(&self, namespace: &str, text: &str) {
        match serde_json::from_str(text) {
            Ok(v) => self.store_lease(namespace, v),
            Err(e) => panic!("TestApiServer::put_lease_json: not JSON ({e}): {text}"),
        }
    }

    fn store_lease(&self, namespace: &str, lease: serde_json::Value) {
        let Some(name) = store::meta_str(&lease, "name")
            .filter(|n| !n.is_empty())
            .map(str::to_string)
        else {
            panic!("TestApiServer::put_lease: the lease has no metadata.name: {lease}");
        };
        let mut st = self.shared.lock();
        let stored = st.store.write(Collection::Leases, namespace, &name, lease);
        if let Some(r) = st.recording.as_mut() {
            r.seed("put", "leases", namespace, &name, &stored);
        }
        drop(st);
        self.shared.notify();
    }

    /// Delete the Lease `namespace/name` if it exists (watchers see `DELETED`).
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    ///
    /// let server = TestApiServer::start()?;
    /// server.delete_lease("default", "my-lease"); // nothing there: a no-op
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn delete_lease(&self, namespace: &str, name: &str) {
        let mut st = self.shared.lock();
        let deleted = st.store.delete(Collection::Leases, namespace, name);
        if let Some(r) = st.recording.as_mut() {
            r.seed(
                "delete",
                "leases",
                namespace,
                name,
                &serde_json::Value::Null,
            );
        }
        drop(st);
        if deleted.is_some() {
            self.shared.notify();
        }
    }

    /// The Events recorded so far (through core/v1 or events.k8s.io/v1),
    /// oldest first.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    ///
    /// let server = TestApiServer::start()?;
    /// assert!(server.events().is_empty());
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn events(&self) -> Vec<RecordedEvent> {
        api::events(&self.shared.lock().store)
            .iter()
            .map(RecordedEvent::of)
            .collect()
    }

    /// The Events recorded so far, oldest first, each as JSON text as
    /// core/v1 returns it: for a test that checks the wire format.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    ///
    /// let server = TestApiServer::start()?;
    /// assert!(server.events_json().is_empty());
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn events_json(&self) -> Vec<String> {
        api::events(&self.shared.lock().store)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// A client configuration for candidate `identity`: this server's URL,
    /// its CA when TLS is on, and a bearer token of the candidate's own,
    /// which this server accepts (also when it requires
    /// [`tokens`](TestApiServerBuilder::tokens)) and by which
    /// [`cut_off`](Self::cut_off), [`hang`](Self::hang),
    /// [`slow`](Self::slow) and [`Fault::candidate`] single it out.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// use lease_elector::{Client, LeaseLock};
    ///
    /// let server = TestApiServer::builder().tls(true).build()?;
    /// let a = LeaseLock::new(Client::new(server.client_config("a"))?, "default", "my-lease", "a");
    /// let b = LeaseLock::new(Client::new(server.client_config("b"))?, "default", "my-lease", "b");
    /// # let _ = (a, b);
    /// # server.shutdown();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn client_config(&self, identity: &str) -> ClientConfig {
        let token = candidates::token(identity);
        {
            let mut st = self.shared.lock();
            if !st.candidates.contains(&token) {
                st.candidates.push(token.clone());
            }
        }
        let config = ClientConfig::new(self.url()).token(token);
        if self.tls {
            config.ca_pem(self.ca_pem())
        } else {
            // Loopback: a token in the clear harms no one here.
            config.allow_token_over_http(true)
        }
    }

    /// Cut candidate `identity` (see [`client_config`](Self::client_config))
    /// off: each of its requests is dropped without an answer, while every
    /// other candidate is served, until [`restore`](Self::restore) (or
    /// [`clear_faults`](Self::clear_faults)). Its lease then expires and
    /// another candidate takes over.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    ///
    /// let server = TestApiServer::start()?;
    /// let config_a = server.client_config("a");
    /// // ... candidates "a" (leading) and "b" run ...
    /// server.cut_off("a");
    /// // ... "b" takes over once the lease expires ...
    /// server.restore("a");
    /// # let _ = config_a;
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn cut_off(&self, identity: &str) {
        self.inject(Fault::drop_connection().candidate(identity).forever());
    }

    /// Hold every request of candidate `identity` unanswered (a server
    /// that went silent for it alone) until [`restore`](Self::restore) (or
    /// [`clear_faults`](Self::clear_faults)), which closes the held
    /// connections.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    ///
    /// let server = TestApiServer::start()?;
    /// server.hang("a");
    /// // ... "a"'s own deadlines must give up on its requests ...
    /// server.restore("a");
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn hang(&self, identity: &str) {
        self.inject(Fault::hang().candidate(identity).forever());
    }

    /// Delay every request of candidate `identity` by `delay` until
    /// [`restore`](Self::restore) (or [`clear_faults`](Self::clear_faults)).
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// use std::time::Duration;
    ///
    /// let server = TestApiServer::start()?;
    /// server.slow("a", Duration::from_millis(800));
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn slow(&self, identity: &str, delay: Duration) {
        self.inject(Fault::latency(delay).candidate(identity).forever());
    }

    /// Remove every fault rule of candidate `identity` (those of
    /// [`cut_off`](Self::cut_off), [`hang`](Self::hang),
    /// [`slow`](Self::slow) and [`Fault::candidate`]); its hung requests are
    /// let go (closed without an answer). Other candidates' rules stay.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    ///
    /// let server = TestApiServer::start()?;
    /// server.cut_off("a");
    /// server.hang("b");
    /// server.restore("a"); // "b" still hangs
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn restore(&self, identity: &str) {
        self.shared
            .lock()
            .faults
            .retain(|f| f.candidate.as_deref() != Some(identity));
        self.shared.notify();
    }

    /// Create the namespace `name` (a no-op when it exists), for a test
    /// whose objects live outside the four namespaces a server starts with
    /// (`default`, `kube-system`, `kube-public`, `kube-node-lease`): as on
    /// a cluster, creating an object in a namespace that does not exist is
    /// a 404.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    ///
    /// let server = TestApiServer::start()?;
    /// server.add_namespace("team-a");
    /// // Leases can now be created in "team-a".
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Panics
    ///
    /// When `name` is not a DNS-1123 label: a test bug.
    pub fn add_namespace(&self, name: &str) {
        assert!(
            crate::names::check_namespace(name).is_ok(),
            "TestApiServer::add_namespace: {name:?} is not a valid namespace name"
        );
        let mut st = self.shared.lock();
        if !st.store.has_namespace(name) {
            let stored = st
                .store
                .write(Collection::Namespaces, "", name, namespaces::new(name));
            if let Some(r) = st.recording.as_mut() {
                r.seed("namespace", "namespaces", "", name, &stored);
            }
            drop(st);
            self.shared.notify();
        }
    }

    /// Queue a fault rule (see [the module docs](self#faults) for matching).
    ///
    /// ```
    /// use lease_elector::testing::{Fault, TestApiServer};
    ///
    /// let server = TestApiServer::start()?;
    /// server.inject(Fault::status(503).method("PUT").times(2));
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn inject(&self, mut fault: Fault) {
        let mut st = self.shared.lock();
        st.next_rule += 1;
        fault.id = st.next_rule;
        st.faults.push(fault);
    }

    /// Remove every queued fault rule, and release every request held by a
    /// [`Fault::hang`] that fired before (its connection is closed without
    /// an answer).
    ///
    /// ```
    /// use lease_elector::testing::{Fault, TestApiServer};
    /// let server = TestApiServer::start()?;
    /// server.inject(Fault::status(500).forever());
    /// server.clear_faults();
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn clear_faults(&self) {
        let mut st = self.shared.lock();
        st.faults.clear();
        st.faults_cleared = st.faults_cleared.wrapping_add(1);
        drop(st);
        self.shared.notify();
    }

    /// While `down`, every new connection is accepted and closed at once
    /// without an answer, open keep-alive connections are closed on their
    /// next request, and watch streams are cut.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// let server = TestApiServer::start()?;
    /// server.set_outage(true);
    /// // ... every candidate loses the API server ...
    /// server.set_outage(false);
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_outage(&self, down: bool) {
        self.shared.lock().outage = down;
        self.shared.notify();
    }

    /// Replace the accepted bearer tokens (rotation); an empty slice turns
    /// authentication off.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// let server = TestApiServer::builder().tls(true).tokens(&["old"]).build()?;
    /// server.set_tokens(&["new"]); // "old" now gets 401
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_tokens(&self, tokens: &[&str]) {
        self.shared.lock().tokens = tokens.iter().map(|t| t.to_string()).collect();
    }

    /// Requests bearing `token` are authenticated but get 403 `Forbidden`
    /// on everything, with the message RBAC would give.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// let server = TestApiServer::builder().tls(true).tokens(&["pod-a"]).build()?;
    /// server.forbid_token("pod-a"); // RBAC took pod-a's rights away
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn forbid_token(&self, token: &str) {
        self.shared.lock().forbidden.push(token.to_string());
    }

    /// Counters since start or the last [`reset_stats`](Self::reset_stats).
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// let server = TestApiServer::start()?;
    /// assert_eq!(server.stats().requests, 0);
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn stats(&self) -> Stats {
        self.shared.lock().recorder.stats.clone()
    }

    /// Zero the counters and empty the request log.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// let server = TestApiServer::start()?;
    /// server.reset_stats();
    /// assert!(server.requests().is_empty());
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn reset_stats(&self) {
        self.shared.lock().recorder.reset();
    }

    /// The last (up to 10 000) finished requests, oldest first. A watch
    /// appears once its stream has ended.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// let server = TestApiServer::start()?;
    /// let puts = server.requests().iter().filter(|r| r.method == "PUT").count();
    /// assert_eq!(puts, 0);
    /// # server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn requests(&self) -> Vec<RequestLog> {
        self.shared.lock().recorder.log()
    }

    /// Stop serving: close every connection (ending watches) and join
    /// every server thread, including ones sleeping in injected latency.
    ///
    /// ```
    /// use lease_elector::testing::TestApiServer;
    /// let server = TestApiServer::start()?;
    /// server.shutdown();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(acceptor) = self.acceptor.take() {
            server::stop(&self.shared, self.addr, acceptor);
            log::debug!("test-apiserver: {} stopped", self.addr);
        }
    }
}

impl Drop for TestApiServer {
    fn drop(&mut self) {
        self.stop();
    }
}
