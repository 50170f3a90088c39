//! TLS, always verified: the cluster CA (or a pinned root) and an optional
//! client certificate, built once per [`super::Client`] and shared by every
//! request it sends, the watch stream included.

use std::sync::Arc;

use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig, TlsProvider};
use ureq::unversioned::resolver::DefaultResolver;
use ureq::unversioned::transport::{
    ConnectProxyConnector, ConnectionDetails, Connector, RustlsConnector, TcpConnector, Transport,
};

use super::config::ClientConfig;
use crate::error::{Error, Result};

/// The TLS set-up for `config`: its CA bundle (required for `https`) and
/// client certificate, with rustls and ring.
pub(super) fn tls_config(config: &ClientConfig, https: bool) -> Result<TlsConfig> {
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
        tls = tls.root_certs(RootCerts::new_with_certs(&parse_certs("CA bundle", pem)?));
    }
    if let Some((cert_pem, key_pem)) = &config.client_identity {
        let chain = parse_certs("client certificate", cert_pem)?;
        let key = PrivateKey::from_pem(key_pem).map_err(|e| Error::InvalidCredentials {
            what: "client key".into(),
            detail: e.to_string(),
        })?;
        tls = tls.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
    }
    Ok(tls.build())
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

/// One rustls configuration, and so one TLS session cache, for every
/// connection of a [`super::Client`]: renews, Events, the watch stream, and
/// the fresh pool a `stop()` puts in place.
///
/// ureq treats a request whose settings were adjusted (each of ours is: it
/// carries its own time budget) as "request level", and for those builds a
/// new rustls configuration for every new connection, throwing the session
/// cache away, so no reconnect could resume. Our TLS settings never vary per
/// request, so they are presented as the agent's, and the connector that
/// caches the configuration is shared by all of the client's agents.
///
/// With a `tls-server-name`, the certificate of the server (not of a proxy
/// on the way) is verified against that name, which is also sent as SNI.
#[derive(Debug, Clone, Default)]
pub(super) struct SharedTls {
    connector: Arc<RustlsConnector>,
    /// (the URL's host, the name to verify instead)
    server_name: Option<Arc<(String, String)>>,
}

impl<In: Transport> Connector<In> for SharedTls {
    type Out = <RustlsConnector as Connector<In>>::Out;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> std::result::Result<Option<Self::Out>, ureq::Error> {
        let renamed = self.server_name.as_deref().and_then(|(host, name)| {
            let authority = details.uri.authority()?;
            if authority.host() != host.as_str() {
                return None; // a proxy's own TLS
            }
            let authority = match authority.port_u16() {
                Some(port) => format!("{name}:{port}"),
                None => name.clone(),
            };
            let mut parts = details.uri.clone().into_parts();
            parts.authority = authority.parse().ok();
            ureq::http::Uri::from_parts(parts).ok()
        });
        let agent_level = ConnectionDetails {
            uri: renamed.as_ref().unwrap_or(details.uri),
            addrs: details.addrs.clone(),
            config: details.config,
            request_level: false,
            resolver: details.resolver,
            now: details.now,
            timeout: details.timeout,
            current_time: details.current_time.clone(),
            run_connector: details.run_connector.clone(),
            register_shutdown: details.register_shutdown.clone(),
        };
        self.connector.connect(&agent_level, chained)
    }
}

impl SharedTls {
    /// Verify the server at `host` against `name` instead (see above).
    pub(super) fn with_server_name(host: &str, name: Option<&str>) -> Self {
        SharedTls {
            connector: Arc::default(),
            server_name: name.map(|n| Arc::new((host.to_string(), n.to_string()))),
        }
    }

    /// An agent with `config` whose TLS goes through this shared connector.
    pub(super) fn agent(&self, config: ureq::config::Config) -> ureq::Agent {
        let connector =
            ().chain(ConnectProxyConnector::default())
                .chain(TcpConnector::default())
                .chain(self.clone());
        ureq::Agent::with_parts(config, connector, DefaultResolver::default())
    }
}
