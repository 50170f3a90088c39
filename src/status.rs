//! What an owner reads about a running elector: [`ElectorStatus`] (from
//! [`crate::Probe::status`], never blocking on the network) and its
//! Prometheus text rendering with client-go's metric names. No I/O here.

use std::fmt::Write as _;
use std::time::{Duration, Instant, SystemTime};

use crate::client::failure::NoAnswer;
use crate::error::{Error, StatusKind};
use crate::text::escape as escape_text;

/// A snapshot of an elector's state, from [`Probe::status`](crate::Probe::status).
///
/// ```
/// use lease_elector::testing::TestApiServer;
/// use lease_elector::{Client, ClientConfig, LeaderElector, LeaseLock};
///
/// let server = TestApiServer::start()?;
/// let lock = LeaseLock::new(Client::new(ClientConfig::new(server.url()))?, "default", "jobs", "me");
/// let elector = LeaderElector::builder(lock).build()?;
/// let status = elector.probe().status();
/// assert!(!status.leading && status.attempts == 0); // not started yet
/// assert_eq!((status.namespace.as_str(), status.name.as_str()), ("default", "jobs"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ElectorStatus {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// This candidate's identity.
    pub identity: String,
    /// Leading now (and its last renew is younger than the renew deadline).
    pub leading: bool,
    /// The holder last observed on the Lease, if any (as the server holds
    /// it: escape it before showing it).
    pub holder: Option<String>,
    /// The fencing token of the term in progress, while leading
    /// ([`Term::token`](crate::Term::token)).
    pub term_token: Option<u64>,
    /// When the last successful acquire or renew request started, on the
    /// elector's clock.
    pub last_renew: Option<Instant>,
    /// The same, as wall-clock time (read now, less the time since).
    pub last_renew_wall: Option<SystemTime>,
    /// The last failed attempt's error, if the last attempt failed or an
    /// earlier one did since the last success.
    pub last_error: Option<LastError>,
    /// Why the last term was lost (`None` before any loss, and after a
    /// stop).
    pub last_loss: Option<String>,
    /// Attempts that failed since the last one that succeeded.
    pub consecutive_failures: u64,
    /// Acquire and renew attempts made.
    pub attempts: u64,
    /// Successful acquires and renews (writes of our record).
    pub renews: u64,
    /// Renews that needed the slow path (a read after the optimistic write
    /// failed), client-go's `slowpath`.
    pub slow_path_renews: u64,
    /// Changes of holder observed (including to this candidate).
    pub transitions: u64,
    /// Requests sent to the API server by acquires and renews (a read that
    /// a watch event answered sends none, and is not counted).
    pub requests: u64,
    /// Requests that failed: an error answer, no answer, a
    /// conflict on our renew. Finding the lease held by another candidate
    /// is not a failure (see `held_by_other`), nor losing the race to take
    /// it to another candidate (a 409 on an acquiring write).
    pub failed_requests: u64,
    /// Attempts that found the lease held by another candidate (a
    /// follower's every poll while a leader renews).
    pub held_by_other: u64,
    /// Another process was seen renewing the Lease under this identity.
    pub duplicate_identity: bool,
    /// Time since the last successful acquire or renew request started
    /// (`last_renew`), on the elector's clock; `None` before the first.
    pub since_last_renew: Option<Duration>,
    /// Time since a request last succeeded (since the start, before one did).
    pub since_last_success: Duration,
    /// When a request last succeeded (the start, before one did), as
    /// wall-clock time.
    pub last_success_wall: SystemTime,
    /// How changes of the Lease reach this candidate: through the watch,
    /// or by polling (and why).
    pub watch: WatchMode,
}

/// How changes of the Lease reach an elector ([`ElectorStatus::watch`]).
///
/// Watching, a release, a takeover or the last renew of a crashed leader
/// reaches the candidates within a round trip; polling, at their next
/// attempt, up to a retry period later (× 2.2 with jitter). Either way the
/// renew path decides who leads: the mode changes timing, never safety.
///
/// ```
/// use lease_elector::WatchMode;
/// let refused = WatchMode::Polling("the API server refused the watch (403 Forbidden)".into());
/// assert_eq!(refused.to_string(), "polling: the API server refused the watch (403 Forbidden)");
/// assert!(WatchMode::Watching.is_watching());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WatchMode {
    /// Not watching, by choice: turned off
    /// ([`watch(false)`](crate::ElectorBuilder::watch), `--no-watch`), or
    /// a lock that cannot be watched. Changes are seen by polling.
    Off,
    /// The watch is starting: its first stream is not open yet.
    Starting,
    /// The watch stream is open and brings events (or is being reopened
    /// after the server ended it): every change arrives within a round
    /// trip. A stream that sends bytes but no event for its silence bound
    /// is blind: [`Polling`](WatchMode::Polling) until one arrives.
    Watching,
    /// Watching was asked for but is not working, and why: the server
    /// refused it (RBAC without `watch` on leases), it was cut
    /// more often than its budget allows, or it fails. Changes are seen by
    /// polling meanwhile; the watch is tried again.
    Polling(String),
}

impl WatchMode {
    /// True when changes arrive through the watch.
    pub fn is_watching(&self) -> bool {
        matches!(self, WatchMode::Watching)
    }
}

impl std::fmt::Display for WatchMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WatchMode::Off => f.write_str("off (polling)"),
            WatchMode::Starting => f.write_str("starting"),
            WatchMode::Watching => f.write_str("watching"),
            WatchMode::Polling(why) => write!(f, "polling: {why}"),
        }
    }
}

/// The last failure, classified for an owner.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LastError {
    /// What kind of failure.
    pub kind: FailureKind,
    /// The error's message.
    pub message: String,
    /// What to check ([`FailureKind::hint_for`]).
    pub hint: String,
    /// When it happened, on the elector's clock.
    pub at: Instant,
}

/// What kind of failure an attempt met; each kind names what to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// 403: the identity lacks RBAC on Leases.
    Forbidden,
    /// 401: the credentials are wrong or expired.
    Unauthorized,
    /// 404 on create: the namespace does not exist.
    NotFound,
    /// TLS failed: the server certificate does not chain to the CA given.
    Tls,
    /// No answer: unreachable, reset, timed out.
    Transport,
    /// 5xx or 429.
    Server,
    /// An answer that could not be used (bad body, wrong object).
    BadAnswer,
    /// Anything else.
    Other,
}

impl FailureKind {
    /// Classify `e`.
    pub fn of(e: &Error) -> FailureKind {
        match e {
            // A redirect: the client follows none, the answer is unusable.
            Error::Api { status, .. } if (300..400).contains(&status.code) => {
                FailureKind::BadAnswer
            }
            Error::Api { status, .. } => match status.kind {
                StatusKind::Forbidden => FailureKind::Forbidden,
                StatusKind::Unauthorized => FailureKind::Unauthorized,
                StatusKind::NotFound => FailureKind::NotFound,
                StatusKind::ServerError | StatusKind::TooManyRequests => FailureKind::Server,
                _ => FailureKind::Other,
            },
            Error::Transport { source, .. } => {
                let tls = match source.downcast_ref::<NoAnswer>() {
                    Some(why) => why.is_tls(),
                    // A cause from a Lock of the caller's: by its words.
                    None => {
                        let text = format!("{source:?} {source}").to_ascii_lowercase();
                        ["certificate", "tls", "unknownissuer", "handshake"]
                            .iter()
                            .any(|w| text.contains(w))
                    }
                };
                if tls {
                    FailureKind::Tls
                } else {
                    FailureKind::Transport
                }
            }
            Error::Decode { .. } | Error::WriteNotConfirmed { .. } => FailureKind::BadAnswer,
            _ => FailureKind::Other,
        }
    }

    /// What to check for a failure of this kind, for a log line or a
    /// status page; [`FailureKind::hint_for`] says it for one error, with
    /// the server URL or file it names.
    pub fn hint(self, namespace: &str) -> String {
        match self {
            FailureKind::Forbidden => format!(
                "check RBAC: the identity needs get, create and update on leases.coordination.k8s.io in namespace {namespace} (and watch, for the Lease watch)"
            ),
            FailureKind::Unauthorized => {
                "check the credentials: the token or certificate is missing, wrong or expired".into()
            }
            FailureKind::NotFound => format!("check that namespace {namespace} exists"),
            FailureKind::Tls => {
                "check the CA bundle: the server certificate must chain to it and name the host".into()
            }
            FailureKind::Transport => {
                "check that the API server URL is reachable from here (address, port, firewall, proxy)".into()
            }
            FailureKind::Server => "the API server is failing or throttling; retrying".into(),
            FailureKind::BadAnswer => {
                "the answer was not the Lease asked for or written: check that the URL is the API server's and that no proxy in between redirects or rewrites answers".into()
            }
            FailureKind::Other => "see the error".into(),
        }
    }

    /// What to check about `e`: [`FailureKind::hint`] of its kind, made
    /// specific where the error says more (the server URL that could not
    /// be reached, `https://` for a TLS server asked in plain HTTP, the
    /// file that could not be read, a redirect).
    ///
    /// ```
    /// use lease_elector::{Client, ClientConfig, Deadline, FailureKind, LeaseLock, Lock};
    /// use std::time::Duration;
    ///
    /// // Nothing listens on port 1.
    /// let client = Client::new(ClientConfig::new("http://127.0.0.1:1"))?;
    /// let mut lock = LeaseLock::new(client, "ns", "name", "me");
    /// let err = lock.get(&Deadline::from_now(Duration::from_secs(2))).unwrap_err();
    /// assert_eq!(
    ///     FailureKind::hint_for(&err, "ns"),
    ///     "check that http://127.0.0.1:1 is reachable from here (address, port, firewall, proxy)"
    /// );
    /// # Ok::<(), lease_elector::Error>(())
    /// ```
    pub fn hint_for(e: &Error, namespace: &str) -> String {
        let kind = FailureKind::of(e);
        match e {
            Error::Transport { source, .. } => match source.downcast_ref::<NoAnswer>() {
                Some(why) if why.wants_https() => format!(
                    "the server speaks TLS: use https:// in the server URL ({})",
                    escape_text(why.server())
                ),
                Some(why) if why.wants_http() => format!(
                    "the server at {} does not speak TLS on that port: check the port, or use http:// for a plain-HTTP server",
                    escape_text(why.server())
                ),
                Some(why) if kind == FailureKind::Transport => format!(
                    "check that {} is reachable from here (address, port, firewall, proxy)",
                    escape_text(why.server())
                ),
                _ => kind.hint(namespace),
            },
            // Go's TLS servers (the API server) answer a plain-HTTP request so.
            Error::Api { status, .. }
                if status.code == 400
                    && status.message.contains("HTTP request to an HTTPS server") =>
            {
                "the server speaks TLS: use https:// in the server URL".into()
            }
            Error::Api { status, .. } if (300..400).contains(&status.code) => {
                "the API server never redirects: check that the server URL is the API server's and that no proxy in between redirects".into()
            }
            Error::WriteNotConfirmed { detail, .. }
                if detail.contains(crate::error::NOTHING_WRITTEN) =>
            {
                "an update that changes nothing is not written: the next renew writes a later renewTime".into()
            }
            Error::WriteNotConfirmed { .. } => {
                "check that the server URL is the API server's and that no proxy in between rewrites answers to writes".into()
            }
            Error::ReadFile { what, path, .. } => format!(
                "check that the {what} file {} exists and is readable",
                escape_text(&path.display().to_string())
            ),
            _ => kind.hint(namespace),
        }
    }

    fn label(self) -> &'static str {
        match self {
            FailureKind::Forbidden => "forbidden",
            FailureKind::Unauthorized => "unauthorized",
            FailureKind::NotFound => "not_found",
            FailureKind::Tls => "tls",
            FailureKind::Transport => "transport",
            FailureKind::Server => "server",
            FailureKind::BadAnswer => "bad_answer",
            FailureKind::Other => "other",
        }
    }
}

/// One metric family: name, type, help, and a value per elector.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    value: fn(&ElectorStatus) -> Option<f64>,
    /// client-go's families carry only `name`; ours `namespace` and `name`.
    client_go: bool,
}

const FAMILIES: &[Family] = &[
    Family {
        name: "leader_election_master_status",
        kind: "gauge",
        help: "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.",
        value: |s| Some(f64::from(u8::from(s.leading))),
        client_go: true,
    },
    Family {
        name: "leader_election_slowpath_total",
        kind: "counter",
        help: "Total number of slow path exercised in renewing leader leases. 'name' is the string used to identify the lease.",
        value: |s| Some(s.slow_path_renews as f64),
        client_go: true,
    },
    Family {
        name: "lease_elector_attempts_total",
        kind: "counter",
        help: "Acquire and renew attempts made.",
        value: |s| Some(s.attempts as f64),
        client_go: false,
    },
    Family {
        name: "lease_elector_renews_total",
        kind: "counter",
        help: "Successful acquires and renews.",
        value: |s| Some(s.renews as f64),
        client_go: false,
    },
    Family {
        name: "lease_elector_failed_requests_total",
        kind: "counter",
        help: "Requests to the API server that failed: an error answer, no answer within the budget, or a conflict on this candidate's renew. Finding the lease held by another candidate, or losing the race to take it, is not a failure.",
        value: |s| Some(s.failed_requests as f64),
        client_go: false,
    },
    Family {
        name: "lease_elector_held_by_other_total",
        kind: "counter",
        help: "Attempts that found the lease held by another candidate (a follower's polls while the leader renews).",
        value: |s| Some(s.held_by_other as f64),
        client_go: false,
    },
    Family {
        name: "lease_elector_consecutive_failures",
        kind: "gauge",
        help: "Attempts that failed (with an error or no answer) since the last one that succeeded.",
        value: |s| Some(s.consecutive_failures as f64),
        client_go: false,
    },
    Family {
        name: "lease_elector_leader_transitions_total",
        kind: "counter",
        help: "Changes of lease holder observed.",
        value: |s| Some(s.transitions as f64),
        client_go: false,
    },
    Family {
        name: "lease_elector_requests_total",
        kind: "counter",
        help: "Requests sent to the API server by acquires and renews (not the reads a watch event answered).",
        value: |s| Some(s.requests as f64),
        client_go: false,
    },
    Family {
        name: "lease_elector_last_renew_timestamp_seconds",
        kind: "gauge",
        help: "Unix time of the last successful acquire or renew; absent before the first.",
        value: |s| s.last_renew_wall.map(unix_seconds),
        client_go: false,
    },
    Family {
        name: "lease_elector_duplicate_identity",
        kind: "gauge",
        help: "1 when another process was seen renewing the lease under this candidate's identity.",
        value: |s| Some(f64::from(u8::from(s.duplicate_identity))),
        client_go: false,
    },
    Family {
        name: "lease_elector_last_success_timestamp_seconds",
        kind: "gauge",
        help: "Unix time a request to the API server last succeeded (the start, before one did).",
        value: |s| Some(unix_seconds(s.last_success_wall)),
        client_go: false,
    },
    Family {
        name: "lease_elector_watching",
        kind: "gauge",
        help: "1 when changes of the lease reach this candidate through its watch (within a round trip), 0 when it polls (the watch off, starting, refused or failing, or a stream that brought no event for its silence bound: blind).",
        value: |s| Some(f64::from(u8::from(s.watch.is_watching()))),
        client_go: false,
    },
    Family {
        name: "lease_elector_term_token",
        kind: "gauge",
        help: "The fencing token (the Lease's resourceVersion as the write that began it stored it) of the term in progress; absent while not leading.",
        value: |s| s.term_token.map(|t| t as f64),
        client_go: false,
    },
];

/// The Prometheus text exposition (format 0.0.4, `Content-Type: text/plain;
/// version=0.0.4`) of these electors' [`status`](crate::Probe::status):
/// each metric family once, with `# HELP` and `# TYPE`, one sample per
/// elector. client-go's `leader_election_master_status` and
/// `leader_election_slowpath_total` (label `name`), and the crate's
/// `lease_elector_*` series (labels `namespace`, `name`): attempts, renews,
/// failed requests, held by another, consecutive failures, transitions,
/// requests, the last renew and last success as Unix times, duplicate
/// identity, the term's token, the last error's kind.
///
/// For a program with an HTTP server of its own; the `health` feature's
/// [`HealthServer`] serves it as `/metrics`. Render several electors
/// of one process in one call (a family must appear once).
///
/// ```
/// use lease_elector::testing::TestApiServer;
/// use lease_elector::{render_prometheus, Client, ClientConfig, LeaderElector, LeaderEvent, LeaseLock};
///
/// let server = TestApiServer::start()?;
/// let lock = LeaseLock::new(Client::new(ClientConfig::new(server.url()))?, "default", "jobs", "me");
/// let (handle, events) = LeaderElector::builder(lock).build()?.spawn()?;
/// while !matches!(events.recv()?, LeaderEvent::StartedLeading { .. }) {}
/// // In your server's handler for GET /metrics:
/// let body = render_prometheus(&[handle.probe().status()]);
/// assert!(body.contains("# TYPE leader_election_master_status gauge\n"));
/// assert!(body.contains("leader_election_master_status{name=\"jobs\"} 1\n"));
/// assert!(body.contains("lease_elector_term_token{namespace=\"default\",name=\"jobs\"} "));
/// handle.stop()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[cfg_attr(
    feature = "health",
    doc = "[`HealthServer`]: crate::health::HealthServer"
)]
#[cfg_attr(
    not(feature = "health"),
    doc = "[`HealthServer`]: https://docs.rs/lease-elector/latest/lease_elector/health/struct.HealthServer.html"
)]
pub fn render_prometheus(electors: &[ElectorStatus]) -> String {
    let mut out = String::new();
    for f in FAMILIES {
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        for s in electors {
            let Some(v) = (f.value)(s) else { continue };
            if f.client_go {
                let _ = writeln!(out, "{}{{name=\"{}\"}} {v}", f.name, escape(&s.name));
            } else {
                let _ = writeln!(
                    out,
                    "{}{{namespace=\"{}\",name=\"{}\"}} {v}",
                    f.name,
                    escape(&s.namespace),
                    escape(&s.name)
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "# HELP lease_elector_last_error_info The kind of the last failure (1), when the last attempt failed."
    );
    let _ = writeln!(out, "# TYPE lease_elector_last_error_info gauge");
    for s in electors {
        if let (Some(e), true) = (&s.last_error, s.consecutive_failures > 0) {
            let _ = writeln!(
                out,
                "lease_elector_last_error_info{{namespace=\"{}\",name=\"{}\",kind=\"{}\"}} 1",
                escape(&s.namespace),
                escape(&s.name),
                e.kind.label()
            );
        }
    }
    out
}

/// Seconds since the Unix epoch (0 before it), as Prometheus timestamps are.
fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Label values escape `\`, `"` and newlines.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
