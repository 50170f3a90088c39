//! Where the API server is and how to authenticate to it: explicit,
//! in-cluster (service-account folder), or from a kubeconfig
//! ([`super::kubeconfig`]).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::exec::ExecPlugin;
use super::file::{read_capped, read_text, MAX_NAMESPACE, MAX_PEM, MAX_TOKEN};
use super::proxy::ProxyChoice;
use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};

/// Default [`ClientConfig::timeout`]: the most one request may take.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a pod's service-account credentials are mounted.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

#[derive(Clone)]
pub(super) enum TokenConfig {
    None,
    Static(String),
    File(PathBuf),
    Exec(ExecPlugin),
    Oidc(OidcConfig),
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
    pub(super) base_url: String,
    pub(super) token: TokenConfig,
    pub(super) ca_pem: Option<Vec<u8>>,
    pub(super) client_identity: Option<(Vec<u8>, Vec<u8>)>,
    pub(super) timeout: Duration,
    pub(super) namespace: Option<String>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) proxy: ProxyChoice,
    pub(super) impersonate: Option<Impersonation>,
    pub(super) tls_server_name: Option<String>,
    pub(super) token_over_http: bool,
    /// A kubeconfig's `insecure-skip-tls-verify: true` (see `tls.rs`).
    pub(super) insecure: bool,
    /// What reading the configuration warned about (see `warnings`).
    pub(super) warnings: Vec<String>,
}

/// Who requests act as (kubectl's `--as`, `--as-group`, `--as-uid`, and
/// the kubeconfig's `as`, `as-groups`, `as-uid`, `as-user-extra`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Impersonation {
    pub(super) user: String,
    pub(super) uid: Option<String>,
    pub(super) groups: Vec<String>,
    pub(super) extra: Vec<(String, Vec<String>)>,
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let token = match &self.token {
            TokenConfig::None => "none".to_string(),
            TokenConfig::Static(_) => "static (redacted)".to_string(),
            TokenConfig::File(p) => format!("file {}", p.display()),
            TokenConfig::Exec(e) => format!("exec plugin {}", e.command.display()),
            TokenConfig::Oidc(o) => format!("{o:?}"),
        };
        f.debug_struct("ClientConfig")
            // A URL may carry `user:password@`.
            .field("base_url", &super::failure::shown_url(&self.base_url))
            .field("token", &token)
            .field("ca_pem", &self.ca_pem.as_ref().map(|c| c.len()))
            .field("client_identity", &self.client_identity.is_some())
            .field("timeout", &self.timeout)
            .field("namespace", &self.namespace)
            .field("proxy", &self.proxy)
            .field("impersonate", &self.impersonate)
            .field("tls_server_name", &self.tls_server_name)
            .field("token_over_http", &self.token_over_http)
            .field("insecure_skip_tls_verify", &self.insecure)
            .finish()
    }
}

impl ClientConfig {
    /// Explicit config for `base_url` (`http://` for `kubectl proxy`, `https://`
    /// with [`ClientConfig::ca_pem`] or [`ClientConfig::ca_file`]).
    pub fn new(base_url: impl Into<String>) -> Self {
        ClientConfig {
            base_url: lower_scheme(base_url.into().trim_end_matches('/')),
            token: TokenConfig::None,
            ca_pem: None,
            client_identity: None,
            timeout: DEFAULT_TIMEOUT,
            namespace: None,
            clock: Arc::new(SystemClock),
            proxy: ProxyChoice::Environment,
            impersonate: None,
            tls_server_name: None,
            token_over_http: false,
            insecure: false,
            warnings: Vec::new(),
        }
    }

    /// In-cluster config from `KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT`
    /// and the service-account folder
    /// `/var/run/secrets/kubernetes.io/serviceaccount` (`token`, `ca.crt`,
    /// `namespace`).
    pub fn in_cluster() -> Result<Self> {
        let var = |k: &str| {
            std::env::var(k).map_err(|_| {
                Error::InvalidConfig(format!(
                    "{k} is not set: not running in a cluster (ClientConfig::infer reads the kubeconfig outside one, as kubectl does)"
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

    /// Send the id-token of a kubeconfig's oidc auth-provider, refreshed
    /// when it expires.
    pub(crate) fn oidc(mut self, oidc: OidcConfig) -> Self {
        self.token = TokenConfig::Oidc(oidc);
        self
    }

    /// Read the bearer token from this file, again every minute and after a 401.
    ///
    /// [`Client::new`](super::Client::new) reads it first and fails with an
    /// error naming the file when it cannot (as client-go's in-cluster
    /// config does); a later re-read that fails keeps the last token and
    /// warns. The file must be a regular file of at most 64 KiB.
    pub fn token_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.token = TokenConfig::File(path.into());
        self
    }

    /// Trust exactly the certificates in this PEM bundle (the cluster CA, or a pinned root).
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// Trust exactly the certificates in this PEM file (a regular file of at
    /// most 1 MiB).
    pub fn ca_file(self, path: impl AsRef<Path>) -> Result<Self> {
        let pem = read_capped("CA bundle", path.as_ref(), MAX_PEM)?;
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

    /// Send every request through this proxy (`http://` or `https://`
    /// URL), as a kubeconfig's `proxy-url`. Without it, `HTTPS_PROXY` /
    /// `HTTP_PROXY` / `NO_PROXY` are read as client-go reads them (never
    /// for a loopback server); [`ClientConfig::no_proxy`] connects directly.
    pub fn proxy(mut self, url: impl Into<String>) -> Self {
        self.proxy = ProxyChoice::Url(url.into());
        self
    }

    /// Connect directly, whatever the environment's proxy variables say.
    pub fn no_proxy(mut self) -> Self {
        self.proxy = ProxyChoice::Direct;
        self
    }

    /// Act as `user` (`Impersonate-User` on every request, as kubectl's
    /// `--as`); the credentials must allow impersonating it.
    pub fn impersonate(mut self, user: impl Into<String>) -> Self {
        self.impersonate.get_or_insert_with(Default::default).user = user.into();
        self
    }

    /// With [`ClientConfig::impersonate`]: also act as these groups
    /// (one `Impersonate-Group` header each).
    pub fn impersonate_groups<S: Into<String>>(
        mut self,
        groups: impl IntoIterator<Item = S>,
    ) -> Self {
        self.impersonate.get_or_insert_with(Default::default).groups =
            groups.into_iter().map(Into::into).collect();
        self
    }

    /// With [`ClientConfig::impersonate`]: the user's UID (`Impersonate-Uid`).
    pub fn impersonate_uid(mut self, uid: impl Into<String>) -> Self {
        self.impersonate.get_or_insert_with(Default::default).uid = Some(uid.into());
        self
    }

    /// With [`ClientConfig::impersonate`]: an extra attribute
    /// (`Impersonate-Extra-<key>`, one header per value).
    pub fn impersonate_extra<S: Into<String>>(
        mut self,
        key: impl Into<String>,
        values: impl IntoIterator<Item = S>,
    ) -> Self {
        self.impersonate
            .get_or_insert_with(Default::default)
            .extra
            .push((key.into(), values.into_iter().map(Into::into).collect()));
        self
    }

    /// Verify the server certificate against `name` (and send it as SNI)
    /// instead of the URL's host, as a kubeconfig's `tls-server-name`: for
    /// a server reached at an IP whose certificate names only, say,
    /// `kubernetes.default.svc`.
    pub fn tls_server_name(mut self, name: impl Into<String>) -> Self {
        self.tls_server_name = Some(name.into());
        self
    }

    /// Allow a bearer token over plain `http://` to a host that is not
    /// loopback. Off by default: [`super::Client::new`] refuses to send a
    /// token in clear text across a network unless asked for exactly that
    /// (loopback, e.g. `kubectl proxy` or a test server, is always allowed).
    pub fn allow_token_over_http(mut self, yes: bool) -> Self {
        self.token_over_http = yes;
        self
    }

    /// The clock used to decide when to re-read the token file.
    #[doc(hidden)]
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

    /// The default namespace: in a pod, the service account's (`None` when
    /// its `namespace` file is missing or empty); from a kubeconfig, the
    /// context's, `default` when the context names none (as kubectl);
    /// `None` for an explicit config.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// What reading the configuration warned about, each also logged at
    /// warn level when it was read: a kubeconfig cluster that skips TLS
    /// verification, credentials withheld from a plain-HTTP server. For a
    /// program that shows them without installing a logger (one line
    /// each, escaped).
    ///
    /// ```
    /// let config = lease_elector::ClientConfig::new("http://127.0.0.1:8001");
    /// assert!(config.warnings().is_empty());
    /// ```
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Log `warning` and keep it for [`ClientConfig::warnings`].
    pub(super) fn warn(&mut self, warning: String) {
        log::warn!("{warning}");
        self.warnings.push(warning);
    }
}

/// `url` with its scheme in lower case (`HTTPS://h` is `https://h`), as
/// Go's `url.Parse` reads it for client-go: every later check compares
/// the scheme as written.
fn lower_scheme(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) if scheme.bytes().all(|b| b.is_ascii_alphabetic()) => {
            format!("{}://{rest}", scheme.to_ascii_lowercase())
        }
        _ => url.to_string(),
    }
}

/// The trimmed content of `dir/namespace`, or `None` when missing, unreadable or empty.
pub(crate) fn namespace_from_dir(dir: &Path) -> Option<String> {
    let ns = read_text(
        "service-account namespace",
        &dir.join("namespace"),
        MAX_NAMESPACE,
    )
    .ok()?;
    let ns = ns.trim();
    (!ns.is_empty()).then(|| ns.to_string())
}

/// A bearer token file: trimmed, and an error when empty.
pub(super) fn read_token(path: &Path) -> Result<String> {
    let token = read_text("bearer token", path, MAX_TOKEN)?;
    let token = token.trim();
    if token.is_empty() {
        return Err(Error::ReadFile {
            what: "bearer token",
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, "the file is empty"),
        });
    }
    Ok(token.to_string())
}

/// A kubeconfig user's oidc `auth-provider` config.
#[derive(Clone)]
pub(crate) struct OidcConfig {
    /// The kubeconfig user and file, for messages.
    pub(crate) user: String,
    pub(crate) issuer: String,
    pub(crate) client_id: String,
    pub(crate) client_secret: String,
    pub(crate) id_token: String,
    pub(crate) refresh_token: String,
    /// `idp-certificate-authority(-data)`, PEM.
    pub(crate) idp_ca: Option<Vec<u8>>,
}

impl fmt::Debug for OidcConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "oidc auth-provider of {} (issuer {})",
            self.user, self.issuer
        )
    }
}

#[cfg(test)]
mod tests {
    use super::ClientConfig;

    #[test]
    fn outside_a_cluster_the_error_points_to_infer() {
        if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
            eprintln!("skipped: running in a cluster");
            return;
        }
        let err = ClientConfig::in_cluster().unwrap_err().to_string();
        assert!(
            err.contains("not running in a cluster") && err.contains("ClientConfig::infer"),
            "{err}"
        );
    }
}
