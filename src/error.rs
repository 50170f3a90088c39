//! The crate's single error type.
//!
//! Its `Display` is one line with every control character escaped
//! ([`crate::text::escape`]): names, `Status` messages, error bodies,
//! `Location`s and file paths came from a server or a file, and an error
//! is made to be logged. Its `Debug` is the same text with the variant's
//! name, so that `main` returning `Result<(), Box<dyn Error>>` prints what
//! to fix rather than a structure dump.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::duration::tenths;

/// What the detail of an [`Error::WriteNotConfirmed`] for an update that
/// changed nothing (and so was not written) says.
pub(crate) const NOTHING_WRITTEN: &str = "nothing written";

/// Boxed underlying cause, kept so [`std::error::Error::source`] can expose it.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong while configuring or running an elector.
///
/// Each variant says what was attempted, on which lease (as `namespace/name`),
/// and what the server or the system answered. Tokens and the passwords of
/// URLs never appear here, and the `Display` text has its control
/// characters escaped: it is always one line, whatever the server sent.
///
/// `Debug` prints the `Display` text followed by the variant's name, so
/// that an error returned from `main` (which Rust prints with `Debug`)
/// reads as the message:
///
/// ```
/// use lease_elector::Error;
/// let e = Error::InvalidConfig("namespace may not be empty".into());
/// assert_eq!(e.to_string(), "invalid configuration: namespace may not be empty");
/// assert_eq!(format!("{e:?}"), "invalid configuration: namespace may not be empty (InvalidConfig)");
/// ```
#[non_exhaustive]
pub enum Error {
    /// A configuration value broke a rule; the message names the rule and the values.
    InvalidConfig(String),
    /// A credential or configuration file could not be read.
    ReadFile {
        /// What the file was for (`"service-account token"`, `"CA bundle"`, ...).
        what: &'static str,
        /// The path that was read.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A TLS credential (CA bundle, client certificate or key) is unusable.
    InvalidCredentials {
        /// What the credential was for.
        what: String,
        /// Why it is unusable.
        detail: String,
    },
    /// The API server answered with a non-success status. A redirect
    /// (3xx) is one too: the client follows none, and its message names
    /// where it pointed.
    Api {
        /// The object acted on, e.g. `lease kube-system/my-operator`.
        target: String,
        /// The action attempted (`get`, `create`, `update`, `watch`, ...).
        action: &'static str,
        /// The decoded Kubernetes `Status`.
        status: ApiStatus,
    },
    /// The request got no usable answer: connection refused or reset, TLS
    /// failure, time-out.
    ///
    /// When the crate's [`Client`](crate::Client) made the request, `source`
    /// says what happened in these words and names the API server's URL
    /// (without credentials): "no answer from the API server at URL within
    /// 5 s", "the server at URL did not answer in HTTP ...: use https://...";
    /// the HTTP library's own error is its `source()`. The message is
    /// `"{action} {target}: {source}"`, so a [`Lock`](crate::Lock) of your
    /// own should give a `source` that says as much.
    Transport {
        /// The object acted on.
        target: String,
        /// The action attempted.
        action: &'static str,
        /// The underlying cause.
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The server answered, but the body could not be decoded.
    Decode {
        /// The object acted on.
        target: String,
        /// The action attempted.
        action: &'static str,
        /// What was wrong with the body.
        detail: String,
    },
    /// The server answered a write with a Lease that is not the one
    /// written (another holder, other times or duration, or a
    /// `resourceVersion` no newer than the one written against): the write
    /// is not counted as done. A proxy that rewrites or redirects writes, or
    /// something that is not the API server, answers like this.
    WriteNotConfirmed {
        /// The object acted on.
        target: String,
        /// The action attempted (`create`, `update`).
        action: &'static str,
        /// What differed between the Lease written and the answer.
        detail: String,
    },
    /// The lock was used before `get` or `create` loaded the object.
    NotInitialized {
        /// The lock, as `namespace/name`.
        lock: String,
    },
    /// The elector thread could not be started.
    Spawn(std::io::Error),
    /// [`LeaderElector::run`](crate::LeaderElector::run) ended without
    /// leading: another candidate held the lease (or the API server could
    /// not be asked) for the whole `acquire_timeout`.
    AcquireTimeout {
        /// The lock, as `namespace/name`.
        lock: String,
        /// The acquire time-out it was given.
        waited: Duration,
    },
    /// A stop asked for a release (`release_on_cancel`), but the work
    /// still held its term when `release_grace` ran out: the lease was not
    /// released, and expires by itself one lease duration after the last
    /// renew (the next candidate leads then, not at once).
    NotReleased {
        /// The lock, as `namespace/name`.
        lock: String,
        /// How long the release waited for the work (`release_grace`).
        waited: Duration,
    },
    /// The elector thread panicked (a bug); its lease was not released.
    ThreadPanicked {
        /// The lock, as `namespace/name`.
        lock: String,
    },
    /// [`Probe::check`](crate::Probe::check) (the `/healthz` check) failed:
    /// the last term ended `Lost` and this candidate has not led since,
    /// for longer than the tolerance, so the process is still running
    /// when it should have exited.
    ///
    /// A loss itself is not an error: [`LeaderElector::run`](crate::LeaderElector::run)
    /// returns `Ok(StopReason::Lost)`, and a spawned elector sends
    /// `StoppedLeading { reason: StopReason::Lost, .. }` (see
    /// [`StopReason::Lost`](crate::StopReason::Lost)).
    LostLeadership {
        /// The lock, as `namespace/name`.
        lock: String,
        /// How long ago the term ended.
        since_loss: Duration,
        /// The tolerance the caller accepted.
        allowed: Duration,
    },
    /// [`Probe::check_ready`](crate::Probe::check_ready) (the `/readyz`
    /// check) failed: no successful request for too long, or the API
    /// server forbids this candidate's requests.
    NotReady {
        /// The lock, as `namespace/name`.
        lock: String,
        /// Why, with what to check.
        detail: String,
    },
    /// [`Probe::check`](crate::Probe::check) (the `/healthz` check) failed:
    /// the elector believes it leads but has not renewed for longer than
    /// the lease duration and the tolerance.
    Unhealthy {
        /// The lock, as `namespace/name`.
        lock: String,
        /// How long ago the last successful renew was.
        since_renew: Duration,
        /// The lease duration plus the tolerance the caller accepted.
        allowed: Duration,
    },
}

/// How the API server classified a failed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StatusKind {
    /// 400 (`BadRequest`) or 422 (`Invalid`).
    BadRequest,
    /// 401: the token is missing, expired or wrong.
    Unauthorized,
    /// 403: the identity lacks RBAC on leases.
    Forbidden,
    /// 404.
    NotFound,
    /// 409 with reason `AlreadyExists`.
    AlreadyExists,
    /// 409 (any other reason): stale `resourceVersion`.
    Conflict,
    /// 429: throttled; see [`ApiStatus::retry_after`].
    TooManyRequests,
    /// 5xx.
    ServerError,
    /// Any other status.
    Other,
}

/// A Kubernetes `Status` answer, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApiStatus {
    /// The HTTP status code.
    pub code: u16,
    /// The classification of `code` and `reason`.
    pub kind: StatusKind,
    /// The `reason` field (`NotFound`, `Conflict`, ...), empty when absent.
    pub reason: String,
    /// The `message` field, or the start of the raw body when it was not a `Status`.
    pub message: String,
    /// The `Retry-After` header, when the server sent one.
    pub retry_after: Option<Duration>,
}

impl ApiStatus {
    /// A status with `code` and `reason` (classified) and `message`, as a
    /// [`Lock`](crate::Lock) of one's own (or a test double) would answer.
    ///
    /// ```
    /// use lease_elector::{ApiStatus, Error, StatusKind};
    /// let status = ApiStatus::new(409, "Conflict", "the object has been modified");
    /// assert_eq!(status.kind, StatusKind::Conflict);
    /// let e = Error::Api { target: "lock ns/name".into(), action: "update", status };
    /// assert!(e.is_conflict());
    /// ```
    pub fn new(code: u16, reason: &str, message: &str) -> ApiStatus {
        ApiStatus {
            code,
            kind: ApiStatus::classify(code, reason),
            reason: reason.to_string(),
            message: message.to_string(),
            retry_after: None,
        }
    }

    /// Classify a status code and `Status.reason`.
    pub fn classify(code: u16, reason: &str) -> StatusKind {
        match code {
            400 | 422 => StatusKind::BadRequest,
            401 => StatusKind::Unauthorized,
            403 => StatusKind::Forbidden,
            404 => StatusKind::NotFound,
            409 if reason == "AlreadyExists" => StatusKind::AlreadyExists,
            409 => StatusKind::Conflict,
            429 => StatusKind::TooManyRequests,
            500..=599 => StatusKind::ServerError,
            _ => StatusKind::Other,
        }
    }
}

impl Error {
    /// The API status kind, when this is an [`Error::Api`].
    pub fn status_kind(&self) -> Option<StatusKind> {
        match self {
            Error::Api { status, .. } => Some(status.kind),
            _ => None,
        }
    }

    /// True for a 404 answer.
    pub fn is_not_found(&self) -> bool {
        self.status_kind() == Some(StatusKind::NotFound)
    }

    /// True for a 409 answer on a stale `resourceVersion`.
    pub fn is_conflict(&self) -> bool {
        self.status_kind() == Some(StatusKind::Conflict)
    }

    /// True for a 409 `AlreadyExists` answer to a create.
    pub fn is_already_exists(&self) -> bool {
        self.status_kind() == Some(StatusKind::AlreadyExists)
    }

    /// True for a 401 answer.
    pub fn is_unauthorized(&self) -> bool {
        self.status_kind() == Some(StatusKind::Unauthorized)
    }

    /// True when the request got no answer (connection or time-out).
    pub fn is_transport(&self) -> bool {
        matches!(self, Error::Transport { .. })
    }
}

impl fmt::Display for Error {
    // One line: everything written goes through `Escaping`, since most
    // fields may hold text from a server or a file.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_to(&mut Escaping(f))
    }
}

/// Writes through to a formatter with control characters escaped.
struct Escaping<'a, 'b>(&'a mut fmt::Formatter<'b>);

impl fmt::Write for Escaping<'_, '_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        write!(self.0, "{}", crate::text::Escaped(s))
    }
}

impl Error {
    fn write_to(&self, f: &mut impl fmt::Write) -> fmt::Result {
        match self {
            Error::InvalidConfig(msg) => write!(f, "invalid configuration: {msg}"),
            Error::ReadFile { what, path, source } => {
                write!(f, "reading {what} from {}: {source}", path.display())
            }
            Error::InvalidCredentials { what, detail } => write!(f, "unusable {what}: {detail}"),
            Error::Api {
                target,
                action,
                status,
            } => {
                write!(f, "{action} {target}: server answered {}", status.code)?;
                if !status.reason.is_empty() {
                    write!(f, " {}", status.reason)?;
                }
                if !status.message.is_empty() {
                    write!(f, ": {}", status.message)?;
                }
                if let Some(after) = status.retry_after {
                    write!(f, " (retry after {}s)", after.as_secs())?;
                }
                Ok(())
            }
            // The cause says what happened (the crate's client says it in
            // its own words and names the server).
            Error::Transport {
                target,
                action,
                source,
            } => write!(f, "{action} {target}: {source}"),
            Error::Decode {
                target,
                action,
                detail,
            } => write!(f, "{action} {target}: undecodable answer: {detail}"),
            Error::WriteNotConfirmed {
                target,
                action,
                detail,
            } => write!(
                f,
                "{action} {target}: the answer is not the Lease written ({detail}); not counted as written"
            ),
            Error::NotInitialized { lock } => write!(
                f,
                "lease {lock} not initialized: call get or create before update"
            ),
            Error::Spawn(e) => write!(f, "starting the elector thread: {e}"),
            Error::AcquireTimeout { lock, waited } => write!(
                f,
                "did not lead lease {lock} within the acquire time-out of {}",
                humantime::format_duration(*waited)
            ),
            Error::NotReleased { lock, waited } => write!(
                f,
                "lease {lock} not released: the work still held its term {} after the stop (release_grace); the lease expires by itself one lease duration after the last renew",
                humantime::format_duration(*waited)
            ),
            Error::ThreadPanicked { lock } => write!(
                f,
                "the elector thread for lease {lock} panicked; the lease was not released"
            ),
            Error::Unhealthy {
                lock,
                since_renew,
                allowed,
            } => write!(
                f,
                "lease {lock}: leading but last renewed {} ago, more than the {} allowed",
                tenths(*since_renew),
                tenths(*allowed)
            ),
            Error::NotReady { lock, detail } => write!(f, "lease {lock}: not ready: {detail}"),
            Error::LostLeadership {
                lock,
                since_loss,
                allowed,
            } => write!(
                f,
                "lease {lock}: leadership was lost {} ago and this process is still running, more than the {} allowed",
                tenths(*since_loss),
                tenths(*allowed)
            ),
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self} ({})", self.variant())
    }
}

impl Error {
    fn variant(&self) -> &'static str {
        match self {
            Error::InvalidConfig(_) => "InvalidConfig",
            Error::ReadFile { .. } => "ReadFile",
            Error::InvalidCredentials { .. } => "InvalidCredentials",
            Error::Api { .. } => "Api",
            Error::Transport { .. } => "Transport",
            Error::Decode { .. } => "Decode",
            Error::WriteNotConfirmed { .. } => "WriteNotConfirmed",
            Error::NotInitialized { .. } => "NotInitialized",
            Error::Spawn(_) => "Spawn",
            Error::AcquireTimeout { .. } => "AcquireTimeout",
            Error::NotReleased { .. } => "NotReleased",
            Error::ThreadPanicked { .. } => "ThreadPanicked",
            Error::LostLeadership { .. } => "LostLeadership",
            Error::NotReady { .. } => "NotReady",
            Error::Unhealthy { .. } => "Unhealthy",
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::ReadFile { source, .. } => Some(source),
            Error::Transport { source, .. } => Some(source.as_ref()),
            Error::Spawn(e) => Some(e),
            _ => None,
        }
    }
}

/// Shorthand for results whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
