//! A minimal blocking Kubernetes client: in-cluster or explicit config, bearer
//! tokens re-read as they rotate, verified TLS, and the few Lease and Event
//! requests leader election needs.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use ureq::http;
use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig, TlsProvider};
use ureq::RequestExt;

use crate::clock::{Clock, SystemClock};
use crate::deadline::Deadline;
use crate::error::{ApiStatus, Error, Result};
use crate::exec::{ExecPlugin, ExecSource};
use crate::lease::{Lease, Status};

/// Where a pod's service-account credentials are mounted.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// How often a token file is re-read even without a 401 (as client-go does).
pub const TOKEN_REFRESH: Duration = Duration::from_secs(60);

/// Largest answer body read; anything longer is an error, not an allocation.
pub const MAX_BODY: u64 = 1 << 20;

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest TCP connect: past the SYN retries a reachable server needs, and
/// the most a `stop()` can wait on a connect in progress.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest `Retry-After` honoured; a larger (or absurd) value is read
/// as this, so no server answer can park a candidate for long or overflow
/// the clock.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

#[derive(Clone)]
enum TokenConfig {
    None,
    Static(String),
    File(PathBuf),
    Exec(ExecPlugin),
}

/// How to reach and authenticate to the API server.
///
/// ```
/// use lease_elector::ClientConfig;
/// use std::time::Duration;
/// // `kubectl proxy` on its default port: plain HTTP, no credentials.
/// let cfg = ClientConfig::new("http://127.0.0.1:8001").timeout(Duration::from_secs(5));
/// assert_eq!(cfg.base_url(), "http://127.0.0.1:8001");
/// ```
#[derive(Clone)]
pub struct ClientConfig {
    base_url: String,
    token: TokenConfig,
    ca_pem: Option<Vec<u8>>,
    client_identity: Option<(Vec<u8>, Vec<u8>)>,
    timeout: Duration,
    namespace: Option<String>,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let token = match &self.token {
            TokenConfig::None => "none".to_string(),
            TokenConfig::Static(_) => "static (redacted)".to_string(),
            TokenConfig::File(p) => format!("file {}", p.display()),
            TokenConfig::Exec(e) => format!("exec plugin {}", e.command.display()),
        };
        f.debug_struct("ClientConfig")
            .field("base_url", &self.base_url)
            .field("token", &token)
            .field("ca_pem", &self.ca_pem.as_ref().map(|c| c.len()))
            .field("client_identity", &self.client_identity.is_some())
            .field("timeout", &self.timeout)
            .field("namespace", &self.namespace)
            .finish()
    }
}

impl ClientConfig {
    /// Explicit config for `base_url` (`http://` for `kubectl proxy`, `https://`
    /// with [`ClientConfig::ca_pem`] or [`ClientConfig::ca_file`]).
    pub fn new(base_url: impl Into<String>) -> Self {
        ClientConfig {
            base_url: base_url.into().trim_end_matches('/').to_string(),
            token: TokenConfig::None,
            ca_pem: None,
            client_identity: None,
            timeout: DEFAULT_TIMEOUT,
            namespace: None,
            clock: Arc::new(SystemClock),
        }
    }

    /// In-cluster config from `KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT`
    /// and the service-account folder [`SERVICE_ACCOUNT_DIR`].
    pub fn in_cluster() -> Result<Self> {
        let var = |k: &str| {
            std::env::var(k).map_err(|_| {
                Error::InvalidConfig(format!(
                    "{k} is not set: not running in a cluster (use ClientConfig::new for out-of-cluster)"
                ))
            })
        };
        let host = var("KUBERNETES_SERVICE_HOST")?;
        let port = var("KUBERNETES_SERVICE_PORT")?;
        Self::in_cluster_from(&host, &port, Path::new(SERVICE_ACCOUNT_DIR))
    }

    /// In-cluster config from an explicit host, port and service-account folder
    /// (holding `token`, `ca.crt` and optionally `namespace`).
    pub fn in_cluster_from(host: &str, port: &str, service_account_dir: &Path) -> Result<Self> {
        if host.is_empty() || port.is_empty() {
            return Err(Error::InvalidConfig(
                "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must not be empty".into(),
            ));
        }
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        let token_path = service_account_dir.join("token");
        // Fail early on an unreadable token rather than on the first request.
        read_token(&token_path)?;
        let mut cfg = Self::new(format!("https://{host}:{port}"))
            .token_file(token_path)
            .ca_file(service_account_dir.join("ca.crt"))?;
        cfg.namespace = namespace_from_dir(service_account_dir);
        Ok(cfg)
    }

    /// Send this bearer token on every request.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = TokenConfig::Static(token.into());
        self
    }

    /// Get the bearer token from a kubeconfig exec plugin.
    pub(crate) fn exec_plugin(mut self, plugin: ExecPlugin) -> Self {
        self.token = TokenConfig::Exec(plugin);
        self
    }

    /// Read the bearer token from this file, again every minute and after a 401.
    pub fn token_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.token = TokenConfig::File(path.into());
        self
    }

    /// Trust exactly the certificates in this PEM bundle (the cluster CA, or a pinned root).
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// Trust exactly the certificates in this PEM file.
    pub fn ca_file(self, path: impl AsRef<Path>) -> Result<Self> {
        let pem = read_file("CA bundle", path.as_ref())?;
        Ok(self.ca_pem(pem))
    }

    /// Present this client certificate chain and key (both PEM).
    pub fn client_identity(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.client_identity = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Upper bound for one request (the elector lowers it to what its deadline affords).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The clock used to decide when to re-read the token file.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The API server URL, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    pub(crate) fn with_namespace(mut self, namespace: Option<String>) -> Self {
        self.namespace = namespace;
        self
    }

    /// The default namespace: the pod's (in-cluster) or the kubeconfig context's.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }
}

/// The trimmed content of `dir/namespace`, or `None` when missing, unreadable or empty.
pub fn namespace_from_dir(dir: &Path) -> Option<String> {
    let ns = std::fs::read_to_string(dir.join("namespace")).ok()?;
    let ns = ns.trim();
    (!ns.is_empty()).then(|| ns.to_string())
}

fn read_file(what: &'static str, path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::ReadFile {
        what,
        path: path.to_path_buf(),
        source,
    })
}

fn read_token(path: &Path) -> Result<String> {
    let raw = read_file("bearer token", path)?;
    let token = String::from_utf8_lossy(&raw).trim().to_string();
    if token.is_empty() {
        return Err(Error::InvalidCredentials {
            what: format!("bearer token in {}", path.display()),
            detail: "the file is empty".into(),
        });
    }
    Ok(token)
}

/// Bearer token, cached and re-read from its file at most every [`TOKEN_REFRESH`].
struct TokenSource {
    path: PathBuf,
    cached: Mutex<Option<(String, Instant)>>,
    clock: Arc<dyn Clock>,
}

impl TokenSource {
    fn current(&self, force: bool) -> Result<String> {
        let mut cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
        let now = self.clock.now();
        if let Some((token, read_at)) = cached.as_ref() {
            if !force && now.saturating_duration_since(*read_at) < TOKEN_REFRESH {
                return Ok(token.clone());
            }
        }
        match read_token(&self.path) {
            Ok(token) => {
                *cached = Some((token.clone(), now));
                Ok(token)
            }
            // A rotation in progress can leave the file briefly missing: keep
            // using the last good token rather than failing the renew.
            Err(e) => match cached.as_ref() {
                Some((token, _)) => {
                    log::warn!("{e}; keeping the previous token");
                    Ok(token.clone())
                }
                None => Err(e),
            },
        }
    }
}

enum Auth {
    None,
    Static(String),
    File(TokenSource),
    Exec(ExecSource),
}

impl Auth {
    /// The header value; waiting for a plugin run ends at `deadline`.
    fn header(&self, force_refresh: bool, deadline: &Deadline) -> Result<Option<String>> {
        Ok(match self {
            Auth::None => None,
            Auth::Static(t) => Some(format!("Bearer {t}")),
            Auth::File(src) => Some(format!("Bearer {}", src.current(force_refresh)?)),
            Auth::Exec(src) => Some(format!("Bearer {}", src.current(force_refresh, deadline)?)),
        })
    }

    fn can_refresh(&self) -> bool {
        matches!(self, Auth::File(_) | Auth::Exec(_))
    }
}

struct Inner {
    /// The agent and its generation: a stop retires the agent a request is
    /// blocked in (closing its connections) and puts a fresh one in place.
    agent: Mutex<(u64, ureq::Agent)>,
    base_url: String,
    auth: Auth,
    timeout: Duration,
    /// The same trust and identity as the agent's, for the watch stream
    /// (which owns its socket so it can be shut down on stop).
    watch_tls: Option<Arc<rustls::ClientConfig>>,
}

/// A blocking client for the Lease and Event endpoints; cheap to clone.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base_url", &self.inner.base_url)
            .finish_non_exhaustive()
    }
}

/// A raw answer: status, `Retry-After`, body.
struct Answer {
    code: u16,
    retry_after: Option<Duration>,
    body: Vec<u8>,
}

/// What a request is about, for error messages.
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) what: &'a str,
    pub(crate) action: &'static str,
}

impl Client {
    /// Build a client; fails on unusable TLS material or an `https` URL without a CA.
    pub fn new(config: ClientConfig) -> Result<Client> {
        let https = config.base_url.starts_with("https://");
        if !https && !config.base_url.starts_with("http://") {
            return Err(Error::InvalidConfig(format!(
                "API server URL {:?} must start with http:// or https://",
                config.base_url
            )));
        }
        let mut watch_roots = rustls::RootCertStore::empty();
        let mut watch_identity = None;
        let mut tls = TlsConfig::builder()
            .provider(TlsProvider::Rustls)
            .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()));
        if https {
            let pem = config.ca_pem.as_deref().ok_or_else(|| {
                Error::InvalidConfig(format!(
                    "{} is https but no CA bundle was given (TLS is always verified)",
                    config.base_url
                ))
            })?;
            let certs = parse_certs("CA bundle", pem)?;
            for c in &certs {
                watch_roots
                    .add(rustls::pki_types::CertificateDer::from(c.der().to_vec()))
                    .map_err(|e| Error::InvalidCredentials {
                        what: "CA bundle".into(),
                        detail: e.to_string(),
                    })?;
            }
            tls = tls.root_certs(RootCerts::new_with_certs(&certs));
        }
        if let Some((cert_pem, key_pem)) = &config.client_identity {
            let chain = parse_certs("client certificate", cert_pem)?;
            let key = PrivateKey::from_pem(key_pem).map_err(|e| Error::InvalidCredentials {
                what: "client key".into(),
                detail: e.to_string(),
            })?;
            watch_identity = Some((
                chain
                    .iter()
                    .map(|c| rustls::pki_types::CertificateDer::from(c.der().to_vec()))
                    .collect::<Vec<_>>(),
                rustls_key(key_pem)?,
            ));
            tls = tls.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
        }
        let watch_tls = if https {
            Some(Arc::new(watch_tls_config(watch_roots, watch_identity)?))
        } else {
            None
        };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .https_only(https)
            // Loopback tests and in-cluster traffic must not be sent to an
            // HTTP(S)_PROXY picked up from the environment.
            .proxy(None)
            .user_agent(concat!("lease-elector/", env!("CARGO_PKG_VERSION")))
            .timeout_global(Some(config.timeout))
            .tls_config(tls.build())
            .build()
            .into();
        let auth = match config.token {
            TokenConfig::None => Auth::None,
            TokenConfig::Static(t) => Auth::Static(t),
            TokenConfig::File(path) => Auth::File(TokenSource {
                path,
                cached: Mutex::new(None),
                clock: config.clock,
            }),
            TokenConfig::Exec(plugin) => {
                Auth::Exec(ExecSource::new(plugin, config.clock, config.timeout))
            }
        };
        Ok(Client {
            inner: Arc::new(Inner {
                agent: Mutex::new((0, agent)),
                base_url: config.base_url,
                auth,
                timeout: config.timeout,
                watch_tls,
            }),
        })
    }

    /// The API server URL, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.inner.base_url
    }

    pub(crate) fn watch_tls(&self) -> Option<Arc<rustls::ClientConfig>> {
        self.inner.watch_tls.clone()
    }

    /// The `Authorization` header value, re-reading the token file (or
    /// re-running the exec plugin) when `refresh`.
    pub(crate) fn auth_header(
        &self,
        refresh: bool,
        stop: &crate::clock::Wakeup,
    ) -> Result<Option<String>> {
        let deadline = Deadline::from_now(self.inner.timeout).cancelled_by(stop);
        self.inner.auth.header(refresh, &deadline)
    }

    /// The configured upper bound for one request.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// `GET` a Lease.
    pub fn get_lease(&self, namespace: &str, name: &str, deadline: &Deadline) -> Result<Lease> {
        let what = lease_target(namespace, name);
        let t = Target {
            what: &what,
            action: "get",
        };
        let answer = self.send(
            http::Method::GET,
            &lease_path(namespace, Some(name)),
            None,
            t,
            deadline,
        )?;
        decode_ok(t, answer)
    }

    /// `POST` a new Lease; answers the stored object.
    pub fn create_lease(&self, lease: &Lease, deadline: &Deadline) -> Result<Lease> {
        self.write_lease(http::Method::POST, "create", lease, deadline)
    }

    /// `PUT` a Lease, conditional on its `metadata.resourceVersion`.
    pub fn replace_lease(&self, lease: &Lease, deadline: &Deadline) -> Result<Lease> {
        self.write_lease(http::Method::PUT, "update", lease, deadline)
    }

    fn write_lease(
        &self,
        method: http::Method,
        action: &'static str,
        lease: &Lease,
        deadline: &Deadline,
    ) -> Result<Lease> {
        let meta = &lease.metadata;
        let what = lease_target(&meta.namespace, &meta.name);
        let t = Target {
            what: &what,
            action,
        };
        let body = encode(t, lease)?;
        // A create goes to the collection, an update to the object.
        let name = (method == http::Method::PUT).then_some(meta.name.as_str());
        let path = lease_path(&meta.namespace, name);
        let answer = self.send(method, &path, Some(body), t, deadline)?;
        decode_ok(t, answer)
    }

    /// `POST` a core/v1 Event into `namespace`.
    pub fn create_event(
        &self,
        namespace: &str,
        event: &serde_json::Value,
        deadline: &Deadline,
    ) -> Result<()> {
        let what = format!("event in namespace {namespace}");
        let t = Target {
            what: &what,
            action: "create",
        };
        let body = encode(t, event)?;
        let path = format!("/api/v1/namespaces/{}/events", segment(namespace));
        let answer = self.send(http::Method::POST, &path, Some(body), t, deadline)?;
        check_ok(t, &answer)
    }

    /// Send one request, retrying once with a re-read token after a 401.
    ///
    /// The request, its 401 retry and any exec-plugin run share one budget:
    /// `deadline`, capped by the client's own time-out.
    fn send(
        &self,
        method: http::Method,
        path: &str,
        body: Option<Vec<u8>>,
        target: Target<'_>,
        deadline: &Deadline,
    ) -> Result<Answer> {
        let deadline = deadline.capped(self.inner.timeout);
        let body = body.as_deref();
        let answer = self.send_once(method.clone(), path, body, target, &deadline, false)?;
        if answer.code == 401 && self.inner.auth.can_refresh() && !deadline.is_expired() {
            log::debug!(
                "{} {}: 401, refreshing the token",
                target.action,
                target.what
            );
            return self.send_once(method, path, body, target, &deadline, true);
        }
        Ok(answer)
    }

    /// Close every connection of the agent of generation `generation` (if
    /// it is still the current one, a fresh agent takes its place), which
    /// ends a request blocked in it at once.
    fn retire_agent(&self, generation: u64) {
        let old = {
            let mut slot = self
                .inner
                .agent
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if slot.0 != generation {
                return;
            }
            let fresh = ureq::Agent::new_with_config(slot.1.config().clone());
            std::mem::replace(&mut *slot, (generation + 1, fresh)).1
        };
        old.shutdown();
    }

    fn send_once(
        &self,
        method: http::Method,
        path: &str,
        body: Option<&[u8]>,
        target: Target<'_>,
        deadline: &Deadline,
        refresh_token: bool,
    ) -> Result<Answer> {
        let transport = |source: crate::error::Cause| Error::Transport {
            target: target.what.to_string(),
            action: target.action,
            source,
        };
        let out_of_time = || {
            let why = if deadline.is_cancelled() {
                "stopped before an answer"
            } else {
                "no time left in the budget"
            };
            transport(why.into())
        };
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("{}{}", self.inner.base_url, path))
            .header("Accept", "application/json");
        if body.is_some() {
            req = req.header("Content-Type", "application/json");
        }
        if let Some(auth) = self.inner.auth.header(refresh_token, deadline)? {
            req = req.header("Authorization", auth);
        }
        let req = req
            .body(body.unwrap_or_default())
            .map_err(|e| transport(Box::new(e)))?;
        let (generation, agent) = self
            .inner
            .agent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        // A stop ends the request at once rather than at its time-out. The
        // hook is in place before the last look at the signal, so a stop
        // can't slip in between.
        let _hook = deadline.on_cancel({
            let client = self.clone();
            move || client.retire_agent(generation)
        });
        let timeout = deadline.remaining();
        if timeout.is_zero() || deadline.is_cancelled() {
            return Err(out_of_time());
        }
        let mut resp = match req
            .with_agent(&agent)
            .configure()
            .timeout_global(Some(timeout))
            // A connect in progress is the one step a stop cannot cut short.
            .timeout_connect(Some(timeout.min(CONNECT_TIMEOUT)))
            .build()
            .run()
        {
            Ok(resp) => resp,
            Err(_) if deadline.is_cancelled() => return Err(out_of_time()),
            Err(e) => return Err(transport(Box::new(e))),
        };
        let code = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(parse_retry_after);
        let mut body = Vec::new();
        let read = resp
            .body_mut()
            .as_reader()
            .take(MAX_BODY + 1)
            .read_to_end(&mut body);
        if let Err(e) = read {
            if deadline.is_cancelled() {
                return Err(out_of_time());
            }
            return Err(transport(Box::new(e)));
        }
        if body.len() as u64 > MAX_BODY {
            return Err(Error::Decode {
                target: target.what.to_string(),
                action: target.action,
                detail: format!("answer body is larger than {MAX_BODY} bytes"),
            });
        }
        log::trace!("{} {}: {code}", target.action, target.what);
        Ok(Answer {
            code,
            retry_after,
            body,
        })
    }
}

/// Seconds (RFC 9110's delay form; the API server sends no dates),
/// clamped to [`MAX_RETRY_AFTER`]; anything else is ignored.
fn parse_retry_after(v: &http::HeaderValue) -> Option<Duration> {
    let v = v.to_str().ok()?.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // All digits: only overflow can fail, and that is "very long".
    let secs = v.parse::<u64>().unwrap_or(u64::MAX);
    Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER))
}

pub(crate) fn lease_target(namespace: &str, name: &str) -> String {
    format!("lease {namespace}/{name}")
}

fn lease_path(namespace: &str, name: Option<&str>) -> String {
    let mut p = format!(
        "/apis/coordination.k8s.io/v1/namespaces/{}/leases",
        segment(namespace)
    );
    if let Some(name) = name {
        p.push('/');
        p.push_str(&segment(name));
    }
    p
}

/// Percent-encode one path segment (Kubernetes names are DNS labels, but a
/// bad config must produce a 404, not a request to another path).
pub(crate) fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn parse_certs(what: &str, pem: &[u8]) -> Result<Vec<Certificate<'static>>> {
    let bad = |detail: String| Error::InvalidCredentials {
        what: what.to_string(),
        detail,
    };
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(pem) {
        match item.map_err(|e| bad(e.to_string()))? {
            PemItem::Certificate(c) => certs.push(c),
            _ => continue,
        }
    }
    if certs.is_empty() {
        return Err(bad("no PEM certificate found".into()));
    }
    Ok(certs)
}

fn rustls_key(pem: &[u8]) -> Result<rustls::pki_types::PrivateKeyDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::PrivateKeyDer::from_pem_slice(pem).map_err(|e| Error::InvalidCredentials {
        what: "client key".into(),
        detail: e.to_string(),
    })
}

type Identity = (
    Vec<rustls::pki_types::CertificateDer<'static>>,
    rustls::pki_types::PrivateKeyDer<'static>,
);

fn watch_tls_config(
    roots: rustls::RootCertStore,
    identity: Option<Identity>,
) -> Result<rustls::ClientConfig> {
    let bad = |e: rustls::Error| Error::InvalidCredentials {
        what: "TLS configuration".into(),
        detail: e.to_string(),
    };
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(bad)?
    .with_root_certificates(roots);
    match identity {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key).map_err(bad),
        None => Ok(builder.with_no_client_auth()),
    }
}

fn encode<T: serde::Serialize>(t: Target<'_>, value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| Error::Decode {
        target: t.what.to_string(),
        action: t.action,
        detail: format!("encoding the request: {e}"),
    })
}

fn api_error(t: Target<'_>, answer: &Answer) -> Error {
    let (reason, message) = match serde_json::from_slice::<Status>(&answer.body) {
        Ok(s) if s.kind == "Status" => (s.reason, s.message),
        _ => {
            let text = String::from_utf8_lossy(&answer.body);
            (
                String::new(),
                text.chars()
                    .take(200)
                    .collect::<String>()
                    .trim()
                    .to_string(),
            )
        }
    };
    Error::Api {
        target: t.what.to_string(),
        action: t.action,
        status: ApiStatus {
            code: answer.code,
            kind: ApiStatus::classify(answer.code, &reason),
            reason,
            message,
            retry_after: answer.retry_after,
        },
    }
}

fn check_ok(t: Target<'_>, answer: &Answer) -> Result<()> {
    if (200..300).contains(&answer.code) {
        Ok(())
    } else {
        Err(api_error(t, answer))
    }
}

fn decode_ok<T: DeserializeOwned>(t: Target<'_>, answer: Answer) -> Result<T> {
    check_ok(t, &answer)?;
    serde_json::from_slice(&answer.body).map_err(|e| Error::Decode {
        target: t.what.to_string(),
        action: t.action,
        detail: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_encoded() {
        assert_eq!(segment("kube-system"), "kube-system");
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
        assert_eq!(
            lease_path("ns", Some("x")),
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases/x"
        );
    }

    #[test]
    fn https_without_ca_is_refused() {
        let err = Client::new(ClientConfig::new("https://127.0.0.1:6443")).unwrap_err();
        assert!(err.to_string().contains("no CA bundle"), "{err}");
        let err = Client::new(ClientConfig::new("ftp://x")).unwrap_err();
        assert!(matches!(err, Error::InvalidConfig(_)));
    }

    #[test]
    fn debug_never_shows_the_token() {
        let cfg = ClientConfig::new("http://127.0.0.1:1").token("s3cr3t-token");
        assert!(!format!("{cfg:?}").contains("s3cr3t"));
    }

    #[test]
    fn in_cluster_reads_the_folder_and_brackets_ipv6() {
        let tmp = crate::test_dir::TempDir::new();
        let dir = &tmp.0;
        std::fs::write(dir.join("token"), "tok\n").unwrap();
        std::fs::write(dir.join("ca.crt"), "not used until connect").unwrap();
        std::fs::write(dir.join("namespace"), " team-a \n").unwrap();
        let cfg = ClientConfig::in_cluster_from("fd00::1", "443", dir).unwrap();
        assert_eq!(cfg.base_url(), "https://[fd00::1]:443");
        assert_eq!(cfg.namespace(), Some("team-a"));
        std::fs::write(dir.join("namespace"), "  \n").unwrap();
        let cfg = ClientConfig::in_cluster_from("10.0.0.1", "443", dir).unwrap();
        assert_eq!(cfg.namespace(), None);
        std::fs::remove_file(dir.join("token")).unwrap();
        let err = ClientConfig::in_cluster_from("10.0.0.1", "443", dir).unwrap_err();
        assert!(err.to_string().contains("bearer token"), "{err}");
    }
}
