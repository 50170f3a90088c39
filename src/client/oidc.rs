//! kubeconfig `auth-provider: {name: oidc}`, as client-go's oidc provider
//! (`plugin/pkg/client/auth/oidc`) reads it: the `id-token` is sent as the
//! bearer token while its `exp` claim is more than 10 s away. Once it has
//! expired, and given a `refresh-token`, new tokens come from the issuer's
//! token endpoint (found in `<idp-issuer-url>/.well-known/openid-configuration`)
//! with the `refresh_token` grant and the client's id and secret (in a
//! Basic header, then in the form if the issuer refuses that, as Go's
//! oauth2 does), over TLS verified with `idp-certificate-authority(-data)`
//! or the system's CA bundle.
//!
//! Unlike kubectl, the new tokens are kept in memory only: the kubeconfig
//! is never written. When the id-token cannot be refreshed, the error says
//! to run kubectl once, which refreshes the tokens in the kubeconfig.
//!
//! A refresh draws from the budget of the request that needs it (each of
//! its two HTTP requests gets what is left); other requests wait for it
//! no longer than their own budgets.

use std::io::Read;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ureq::http;
use ureq::RequestExt;

use super::config::OidcConfig;
use super::file::{read_capped, MAX_PEM};
use super::tls;
use super::wire::{is_loopback, segment, socket_budget, MAX_BODY};
use crate::clock::Clock;
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::text::Escaped;

/// An id-token this close to its `exp` counts as expired (client-go's
/// `expiryDelta`).
const EXPIRY_MARGIN: Duration = Duration::from_secs(10);

/// Where Linux distributions keep the system CA bundle (Go's list), after
/// `$SSL_CERT_FILE`.
const SYSTEM_CA_FILES: [&str; 6] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// What to do when the tokens cannot be renewed here.
const RUN_KUBECTL: &str =
    "run kubectl once (e.g. `kubectl get pods`) to refresh the kubeconfig's tokens";

struct Tokens {
    id_token: String,
    refresh_token: String,
    /// A request is refreshing them; others wait for it.
    refreshing: bool,
}

/// The id-token of an oidc user, refreshed when it expires.
pub(crate) struct OidcSource {
    config: OidcConfig,
    tokens: Mutex<Tokens>,
    refreshed: Condvar,
    clock: Arc<dyn Clock>,
}

impl OidcSource {
    pub(crate) fn new(config: OidcConfig, clock: Arc<dyn Clock>) -> Self {
        let tokens = Tokens {
            id_token: config.id_token.clone(),
            refresh_token: config.refresh_token.clone(),
            refreshing: false,
        };
        OidcSource {
            config,
            tokens: Mutex::new(tokens),
            refreshed: Condvar::new(),
            clock,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Tokens> {
        self.tokens.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn error(&self, detail: impl Into<String>) -> Error {
        Error::InvalidCredentials {
            what: format!("oidc id-token of kubeconfig user {}", self.config.user),
            detail: detail.into(),
        }
    }

    /// The id-token to send; refreshed first (within `deadline`) when it
    /// has expired.
    pub(crate) fn token(&self, deadline: &Deadline) -> Result<String> {
        let mut tokens = self.lock();
        loop {
            if !tokens.id_token.is_empty()
                && !expired(&tokens.id_token, self.clock.system_time())
                    .map_err(|e| self.error(e))?
            {
                return Ok(tokens.id_token.clone());
            }
            if !tokens.refreshing {
                break;
            }
            let left = deadline.remaining();
            if left.is_zero() || deadline.is_cancelled() {
                return Err(self.error(
                    "the id-token has expired and another request's refresh did not end within this request's time budget",
                ));
            }
            // Short waits, so that a cancel is seen.
            tokens = self
                .refreshed
                .wait_timeout(tokens, left.min(Duration::from_millis(50)))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        if tokens.refresh_token.is_empty() {
            return Err(self.error(format!(
                "the id-token has expired (or there is none) and there is no refresh-token to get another: {RUN_KUBECTL}, or log in again"
            )));
        }
        tokens.refreshing = true;
        let refresh_token = tokens.refresh_token.clone();
        drop(tokens);
        let outcome = self.refresh(&refresh_token, deadline);
        let mut tokens = self.lock();
        tokens.refreshing = false;
        let result = match outcome {
            Ok(fresh) => {
                log::info!(
                    "refreshed the oidc id-token of kubeconfig user {} at {}",
                    self.config.user,
                    Escaped(&self.config.issuer)
                );
                tokens.id_token = fresh.id_token.clone();
                if let Some(rt) = fresh.refresh_token.filter(|t| !t.is_empty()) {
                    tokens.refresh_token = rt;
                }
                Ok(fresh.id_token)
            }
            Err(why) => Err(self.error(format!(
                "the id-token has expired and could not be refreshed at {}: {why}; {RUN_KUBECTL}",
                Escaped(&self.config.issuer)
            ))),
        };
        drop(tokens);
        self.refreshed.notify_all();
        result
    }

    /// New tokens from the issuer, within `deadline`.
    fn refresh(
        &self,
        refresh_token: &str,
        deadline: &Deadline,
    ) -> std::result::Result<Fresh, String> {
        let cfg = &self.config;
        let agent = issuer_agent(cfg).map_err(|e| e.to_string())?;
        let discovery = format!(
            "{}/.well-known/openid-configuration",
            cfg.issuer.trim_end_matches('/')
        );
        let (code, body) = send(&agent, http::Method::GET, &discovery, None, None, deadline)?;
        if code != 200 {
            return Err(format!(
                "its discovery document {} answered {code}",
                Escaped(&discovery)
            ));
        }
        let endpoint = json_field(&body, "token_endpoint").ok_or_else(|| {
            format!(
                "its discovery document {} names no token_endpoint",
                Escaped(&discovery)
            )
        })?;
        check_url("token endpoint", &endpoint)?;
        let form = format!(
            "grant_type=refresh_token&refresh_token={}",
            segment(refresh_token)
        );
        let basic = format!(
            "Basic {}",
            super::base64::encode(
                format!(
                    "{}:{}",
                    segment(&cfg.client_id),
                    segment(&cfg.client_secret)
                )
                .as_bytes()
            )
        );
        let post = |form: &str, auth: Option<&str>| {
            send(
                &agent,
                http::Method::POST,
                &endpoint,
                Some(form.as_bytes()),
                auth,
                deadline,
            )
        };
        let (mut code, mut body) = post(&form, Some(&basic))?;
        if code == 400 || code == 401 {
            // Go's oauth2 (AuthStyleAutoDetect): then the client in the form.
            let mut form = format!("{form}&client_id={}", segment(&cfg.client_id));
            if !cfg.client_secret.is_empty() {
                form += &format!("&client_secret={}", segment(&cfg.client_secret));
            }
            (code, body) = post(&form, None)?;
        }
        if !(200..300).contains(&code) {
            // Only the OAuth error fields: the body might echo a token.
            let why = json_field(&body, "error_description")
                .or_else(|| json_field(&body, "error"))
                .unwrap_or_default();
            return Err(format!(
                "the token endpoint {} answered {code} {}",
                Escaped(&endpoint),
                Escaped(&why)
            ));
        }
        match json_field(&body, "id_token").filter(|t| !t.is_empty()) {
            Some(id_token) => Ok(Fresh {
                id_token,
                refresh_token: json_field(&body, "refresh_token"),
            }),
            None => Err("the token endpoint's answer has no id_token".into()),
        }
    }
}

struct Fresh {
    id_token: String,
    refresh_token: Option<String>,
}

/// An `https` URL, or `http` to loopback only: the refresh token and the
/// client secret never cross a network in clear text.
pub(crate) fn check_url(what: &str, url: &str) -> std::result::Result<(), String> {
    if url.starts_with("https://") {
        return Ok(());
    }
    let host = url
        .starts_with("http://")
        .then(|| url.parse::<http::Uri>().ok())
        .flatten()
        .and_then(|u| u.host().map(str::to_string));
    match host {
        Some(h) if is_loopback(&h) => Ok(()),
        _ => Err(format!(
            "{what} {} is not an https URL (plain http only to loopback: the refresh token would cross the network in clear text)",
            Escaped(url)
        )),
    }
}

/// An agent for the issuer: its CA, else the system's; no redirects.
fn issuer_agent(cfg: &OidcConfig) -> Result<ureq::Agent> {
    let https = cfg.issuer.starts_with("https://");
    let pem = match (&cfg.idp_ca, https) {
        (Some(pem), _) => pem.clone(),
        (None, true) => system_ca()?,
        (None, false) => Vec::new(),
    };
    let host = cfg
        .issuer
        .parse::<http::Uri>()
        .ok()
        .and_then(|u| u.host().map(str::to_string))
        .unwrap_or_default();
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .tls_config(tls::roots_only("oidc issuer CA bundle", &pem, https)?)
        .build();
    Ok(tls::SharedTls::with_server_name(&host, None).agent(config))
}

/// `$SSL_CERT_FILE`, else the first system CA bundle that exists.
fn system_ca() -> Result<Vec<u8>> {
    if let Some(file) = std::env::var_os("SSL_CERT_FILE").filter(|f| !f.is_empty()) {
        return read_capped("system CA bundle", file.as_ref(), MAX_PEM);
    }
    SYSTEM_CA_FILES
        .iter()
        .map(std::path::Path::new)
        .find(|p| p.is_file())
        .map(|p| read_capped("system CA bundle", p, MAX_PEM))
        .unwrap_or_else(|| {
            Err(Error::InvalidConfig(
                "no system CA bundle found for the oidc issuer: set idp-certificate-authority in the kubeconfig or SSL_CERT_FILE".into(),
            ))
        })
}

/// One request to the issuer with what is left of `deadline`: the status
/// and the body (at most [`MAX_BODY`]).
fn send(
    agent: &ureq::Agent,
    method: http::Method,
    url: &str,
    form: Option<&[u8]>,
    auth: Option<&str>,
    deadline: &Deadline,
) -> std::result::Result<(u16, Vec<u8>), String> {
    let left = deadline.remaining();
    if left.is_zero() || deadline.is_cancelled() {
        return Err("no time left in the request's budget".into());
    }
    let mut req = http::Request::builder()
        .method(method)
        .uri(url)
        .header("Accept", "application/json");
    if form.is_some() {
        req = req.header("Content-Type", "application/x-www-form-urlencoded");
    }
    if let Some(auth) = auth {
        req = req.header("Authorization", auth);
    }
    let req = req
        .body(form.unwrap_or_default())
        .map_err(|e| format!("{}: {e}", Escaped(url)))?;
    let mut resp = req
        .with_agent(agent)
        .configure()
        .timeout_global(Some(socket_budget(left)))
        .build()
        .run()
        .map_err(|e| format!("no answer from {}: {e}", Escaped(url)))?;
    let code = resp.status().as_u16();
    let mut body = Vec::new();
    resp.body_mut()
        .as_reader()
        .take(MAX_BODY + 1)
        .read_to_end(&mut body)
        .map_err(|e| format!("reading the answer of {}: {e}", Escaped(url)))?;
    if body.len() as u64 > MAX_BODY {
        return Err(format!(
            "the answer of {} is larger than {MAX_BODY} bytes",
            Escaped(url)
        ));
    }
    Ok((code, body))
}

/// The string `field` of the JSON object `body`.
fn json_field(body: &[u8], field: &str) -> Option<String> {
    // A Value rather than a struct: the static binary has its parser anyway.
    let mut doc = serde_json::from_slice::<serde_json::Value>(body).ok()?;
    match doc.get_mut(field)?.take() {
        serde_json::Value::String(s) => Some(s),
        _ => None,
    }
}

/// Whether the JWT `token` expires within [`EXPIRY_MARGIN`] of `now`
/// (client-go's `idTokenExpired`: the payload's `exp`, unverified; the API
/// server verifies the token).
fn expired(token: &str, now: SystemTime) -> std::result::Result<bool, String> {
    let mut parts = token.split('.');
    let payload = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(_), Some(payload), Some(_), None) => payload,
        _ => return Err("the id-token is not a JWT".into()),
    };
    let standard: String = payload
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    let json =
        super::base64::decode(&standard).map_err(|e| format!("the id-token's payload: {e}"))?;
    let claims = serde_json::from_slice::<serde_json::Value>(&json)
        .map_err(|e| format!("the id-token's claims: {e}"))?;
    let exp = claims
        .get("exp")
        .and_then(serde_json::Value::as_f64)
        .ok_or("the id-token has no exp claim")?;
    let now = now
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .saturating_add(EXPIRY_MARGIN);
    Ok(now.as_secs_f64() > exp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(exp: u64) -> String {
        let payload =
            crate::client::base64::encode(format!("{{\"iss\":\"x\",\"exp\":{exp}}}").as_bytes())
                .trim_end_matches('=')
                .replace('+', "-")
                .replace('/', "_");
        format!("eyJhbGciOiJSUzI1NiJ9.{payload}.c2ln")
    }

    #[test]
    fn an_id_token_counts_as_expired_ten_seconds_before_its_exp() {
        let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        assert_eq!(expired(&jwt(1000), at(989)), Ok(false));
        assert_eq!(expired(&jwt(1000), at(991)), Ok(true));
        assert_eq!(expired(&jwt(1000), at(2000)), Ok(true));
        assert!(expired("not-a-jwt", at(0))
            .unwrap_err()
            .contains("not a JWT"));
        assert!(expired("a.!!.c", at(0)).unwrap_err().contains("payload"));
    }

    #[test]
    fn secrets_cross_a_network_only_over_https() {
        assert!(check_url("issuer", "https://idp.example.com").is_ok());
        assert!(check_url("issuer", "http://127.0.0.1:5556/dex").is_ok());
        assert!(check_url("issuer", "http://localhost:5556").is_ok());
        let e = check_url("issuer", "http://idp.example.com").unwrap_err();
        assert!(e.contains("clear text"), "{e}");
    }
}
