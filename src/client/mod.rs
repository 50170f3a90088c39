//! A minimal blocking Kubernetes client: in-cluster or explicit config, bearer
//! tokens re-read as they rotate, verified TLS, and the few Lease and Event
//! requests leader election needs.
//!
//! # What it refuses
//!
//! It follows no redirect: the API server never sends one, and a followed
//! redirect turns a `PUT` into a `GET` whose answer looks like the answer
//! to the write. A 3xx is an [`Error::Api`] naming the status and the
//! `Location`. Errors say what happened in the client's words and name the
//! server URL ("no answer from the API server at URL within 5 s"); URLs are
//! shown without the `user:password@` they may carry, and every [`Error`]
//! is one line with control characters escaped.
//!
//! # Logging and credentials
//!
//! The crate logs through the [`log`] facade and never logs a token or a
//! proxy password, at any level. The HTTP library under it does at
//! **trace** level: the log targets `ureq` and `ureq_proto` dump the bytes
//! of each request there, the `Authorization: Bearer` header included. A
//! program that turns trace on must keep those two targets at `debug` or
//! below (ureq's debug records show headers redacted), e.g. with
//! `env_logger`: `RUST_LOG=trace,ureq=debug,ureq_proto=debug`.

use std::fmt;
use std::io::Read;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ureq::http;
use ureq::RequestExt;

use crate::deadline::Deadline;
use crate::error::{ApiStatus, Error, Result};
use crate::lease::{Lease, Status};
use crate::text::Escaped;

mod auth;
pub(crate) mod base64;
mod config;
mod connect;
mod crypto;
pub(crate) mod exec;
pub(crate) mod failure;
pub(crate) mod file;
pub mod kubeconfig;
mod oidc;
mod proxy;
mod stream;
mod tls;
mod wire;
pub(crate) mod yaml;

use auth::Auth;
pub(crate) use config::namespace_from_dir;
use config::TokenConfig;
pub use config::{ClientConfig, SERVICE_ACCOUNT_DIR};
pub use connect::ConnectOptions;
use failure::{shown_url, NoAnswer};
use wire::{is_loopback, socket_budget};
pub(crate) use wire::{segment, Patience, Target, MAX_BODY};

/// Longest TCP connect: past the SYN retries a reachable server needs, and
/// the most a `stop()` can wait on a connect in progress.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an idle connection is kept for the next request: longer than
/// the retry periods electors use (client-go's users, OpenShift's 26 s and
/// single-node 60 s) with room to spare; Go's transport keeps 90 s.
pub const POOL_IDLE: Duration = Duration::from_secs(180);

/// Idle connections kept per host (and in all) by one [`Client`].
const IDLE_PER_HOST: usize = 4;

/// Per-connection I/O buffer: headers and a Lease fit many times over.
const IO_BUFFER: usize = 16 * 1024;

/// The longest `Retry-After` honoured; a larger (or absurd) value is read
/// as this, so no server answer can park a candidate for long or overflow
/// the clock.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

struct Inner {
    /// The agent and its generation: a stop retires the agent a request is
    /// blocked in (closing its connections) and puts a fresh one in place.
    agent: Mutex<(u64, ureq::Agent)>,
    base_url: String,
    auth: Auth,
    timeout: Duration,
    /// The TLS session cache every agent of this client shares.
    shared_tls: tls::SharedTls,
    /// Sent on every request: the impersonation headers.
    headers: Vec<(String, String)>,
}

/// A blocking client for the Lease and Event endpoints; cheap to clone.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base_url", &shown_url(&self.inner.base_url))
            .finish_non_exhaustive()
    }
}

/// A raw answer: status, `Retry-After`, body.
struct Answer {
    code: u16,
    retry_after: Option<Duration>,
    body: Vec<u8>,
}

impl Client {
    /// Build a client; fails on unusable TLS material or an `https` URL without a CA.
    pub fn new(config: ClientConfig) -> Result<Client> {
        let https = config.base_url.starts_with("https://");
        let shown = shown_url(&config.base_url);
        if !https && !config.base_url.starts_with("http://") {
            return Err(Error::InvalidConfig(format!(
                "API server URL {shown:?} must start with http:// or https://"
            )));
        }
        let uri: http::Uri = config
            .base_url
            .parse()
            .map_err(|e| Error::InvalidConfig(format!("API server URL {shown:?}: {e}")))?;
        let host = uri.host().unwrap_or_default().to_string();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let has_credentials = !matches!(config.token, TokenConfig::None);
        if !https && has_credentials && !config.token_over_http && !is_loopback(&host) {
            return Err(Error::InvalidConfig(format!(
                "refusing to send a bearer token in clear text to {shown}: use https, or ClientConfig::allow_token_over_http(true)"
            )));
        }
        let proxy =
            match proxy::choose(&config.proxy, https, &host, port, &|k| {
                std::env::var(k).ok()
            }) {
                None => None,
                // Proxy URLs may carry a password: shown without it.
                Some(url) if url.starts_with("socks") => {
                    return Err(Error::InvalidConfig(format!(
                    "proxy {}: SOCKS proxies are not supported (use an http:// or https:// proxy)",
                    shown_url(&url)
                )))
                }
                Some(url) => Some(ureq::Proxy::new(&url).map_err(|e| {
                    Error::InvalidConfig(format!("proxy {:?}: {e}", shown_url(&url)))
                })?),
            };
        if let Some(p) = &proxy {
            log::debug!(
                "requests to {} go through the proxy {}:{}",
                Escaped(&shown),
                Escaped(p.host()),
                p.port()
            );
        }
        let headers = impersonation_headers(config.impersonate.as_ref());
        let tls = tls::tls_config(&config, https)?;
        let shared_tls = tls::SharedTls::with_server_name(&host, config.tls_server_name.as_deref());
        let agent_config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            // The API server never redirects; ureq would follow a
            // redirected PUT as a GET and hand back a read as the answer to
            // the write. A 3xx is an error (see `send_once`).
            .max_redirects(0)
            .https_only(https)
            .proxy(proxy)
            .user_agent(concat!("lease-elector/", env!("CARGO_PKG_VERSION")))
            .timeout_global(Some(config.timeout))
            // Keep the connection across renews at any retry period up to
            // POOL_IDLE (ureq's default, 15 s, is shorter than OpenShift's
            // 26 s and 60 s, and cost a TCP + TLS handshake per renew). One
            // idle connection is all an elector needs; a few let electors
            // sharing a Client reuse connections when renews overlap.
            .max_idle_age(POOL_IDLE)
            .max_idle_connections_per_host(IDLE_PER_HOST)
            .max_idle_connections(IDLE_PER_HOST)
            // ureq's 128 KiB buffers per connection were most of an
            // elector's memory; Lease answers and headers are a few KiB.
            .input_buffer_size(IO_BUFFER)
            .output_buffer_size(IO_BUFFER)
            .tls_config(tls)
            .build();
        let agent = shared_tls.agent(agent_config);
        let auth = Auth::new(config.token, config.clock, config.timeout)?;
        Ok(Client {
            inner: Arc::new(Inner {
                agent: Mutex::new((0, agent)),
                base_url: config.base_url,
                auth,
                timeout: config.timeout,
                shared_tls,
                headers,
            }),
        })
    }

    /// The API server URL, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.inner.base_url
    }

    /// The configured upper bound for one request.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// `GET` a Lease.
    #[doc(hidden)]
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
    #[doc(hidden)]
    pub fn create_lease(&self, lease: &Lease, deadline: &Deadline) -> Result<Lease> {
        self.write_lease(http::Method::POST, "create", lease, deadline)
    }

    /// `PUT` a Lease, conditional on its `metadata.resourceVersion`.
    #[doc(hidden)]
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
    #[doc(hidden)]
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
                Escaped(target.what)
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
            let fresh = self.inner.shared_tls.agent(slot.1.config().clone());
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
        let server = self.inner.base_url.as_str();
        let transport = |why: NoAnswer| Error::Transport {
            target: target.what.to_string(),
            action: target.action,
            source: Box::new(why),
        };
        let out_of_time = || {
            let why = if deadline.is_cancelled() {
                "stopped before an answer"
            } else {
                "no time left in the budget"
            };
            transport(NoAnswer::unsent(server, why))
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
        for (name, value) in &self.inner.headers {
            req = req.header(name, value);
        }
        let req = req
            .body(body.unwrap_or_default())
            .map_err(|e| transport(NoAnswer::unbuilt(server, e)))?;
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
        let socket_time = socket_budget(timeout);
        let connect_time = socket_time.min(CONNECT_TIMEOUT);
        let mut resp = match req
            .with_agent(&agent)
            .configure()
            .timeout_global(Some(socket_time))
            // A connect in progress is the one step a stop cannot cut short.
            .timeout_connect(Some(connect_time))
            .build()
            .run()
        {
            Ok(resp) => resp,
            Err(_) if deadline.is_cancelled() => return Err(out_of_time()),
            Err(e) => {
                return Err(transport(NoAnswer::from_ureq(
                    server,
                    e,
                    timeout,
                    connect_time,
                )))
            }
        };
        let code = resp.status().as_u16();
        if (300..400).contains(&code) {
            let location = resp.headers().get("location").map(|v| v.as_bytes());
            return Err(failure::redirect(target, code, location));
        }
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
            return Err(transport(NoAnswer::from_body(server, e, timeout)));
        }
        if body.len() as u64 > MAX_BODY {
            return Err(Error::Decode {
                target: target.what.to_string(),
                action: target.action,
                detail: format!("answer body is larger than {MAX_BODY} bytes"),
            });
        }
        log::trace!("{} {}: {code}", target.action, Escaped(target.what));
        Ok(Answer {
            code,
            retry_after,
            body,
        })
    }
}

/// `Impersonate-*` headers, as client-go's transport sets them: extra keys
/// percent-encoded where a header name could not carry them.
fn impersonation_headers(imp: Option<&config::Impersonation>) -> Vec<(String, String)> {
    let Some(imp) = imp.filter(|i| !i.user.is_empty()) else {
        return Vec::new();
    };
    let mut h = vec![("Impersonate-User".to_string(), imp.user.clone())];
    if let Some(uid) = &imp.uid {
        h.push(("Impersonate-Uid".into(), uid.clone()));
    }
    for g in &imp.groups {
        h.push(("Impersonate-Group".into(), g.clone()));
    }
    for (key, values) in &imp.extra {
        let key = segment(key);
        for v in values {
            h.push((format!("Impersonate-Extra-{key}"), v.clone()));
        }
    }
    h
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

pub(crate) fn lease_path(namespace: &str, name: Option<&str>) -> String {
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

fn decode_ok(t: Target<'_>, answer: Answer) -> Result<Lease> {
    check_ok(t, &answer)?;
    Lease::from_json(&answer.body).map_err(|e| Error::Decode {
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
