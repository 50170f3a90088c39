//! TLS: the cluster CA (or a pinned root) and an optional client
//! certificate, built once per [`super::Client`] and shared by every
//! request it sends, the watch stream included.
//!
//! The server certificate is always verified, except for a kubeconfig
//! cluster with `insecure-skip-tls-verify: true`, which kubectl honours and
//! so does this crate (loudly: the kubeconfig reader warns each time). Then,
//! as Go's `InsecureSkipVerify`, the certificate chain and name are not
//! checked, but the handshake still is: the server must sign it with the
//! key of the certificate it presented.

use std::fmt;
use std::io::{Read, Write};
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConnection, DigitallySignedStruct, SignatureScheme, StreamOwned};
use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig, TlsProvider};
use ureq::unversioned::resolver::DefaultResolver;
use ureq::unversioned::transport::{
    Buffers, ConnectProxyConnector, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout,
    TcpConnector, Transport, TransportAdapter,
};

use super::config::ClientConfig;
use crate::error::{Error, Result};

/// The TLS set-up for `config`: its CA bundle (required for `https`) and
/// client certificate, with rustls and ring.
pub(super) fn tls_config(config: &ClientConfig, https: bool) -> Result<TlsConfig> {
    let mut tls = TlsConfig::builder()
        .provider(TlsProvider::Rustls)
        .unversioned_rustls_crypto_provider(Arc::new(super::crypto::provider()));
    if https && config.insecure {
        if config.ca_pem.is_some() {
            // client-go's words: kubectl refuses the same.
            return Err(Error::InvalidConfig(format!(
                "{}: specifying a root certificates file with the insecure flag is not allowed",
                super::failure::shown_url(&config.base_url)
            )));
        }
        // Seen by SharedTls, which then verifies the handshake only.
        tls = tls.disable_verification(true);
    } else if https {
        let pem = config.ca_pem.as_deref().ok_or_else(|| {
            Error::InvalidConfig(format!(
                "{} is https but no CA bundle was given (TLS is always verified)",
                super::failure::shown_url(&config.base_url)
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

/// TLS that trusts exactly the certificates in `pem` (for an oidc issuer);
/// none needed for a plain-http URL (`https` false).
pub(super) fn roots_only(what: &str, pem: &[u8], https: bool) -> Result<TlsConfig> {
    let mut tls = TlsConfig::builder()
        .provider(TlsProvider::Rustls)
        .unversioned_rustls_crypto_provider(Arc::new(super::crypto::provider()));
    if https {
        tls = tls.root_certs(RootCerts::new_with_certs(&parse_certs(what, pem)?));
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
/// ureq's own rustls connector treats a request whose settings were
/// adjusted (each of ours is: it carries its own time budget) as "request
/// level", and for those builds a new rustls configuration for every new
/// connection, throwing the session cache away, so no reconnect could
/// resume. Our TLS settings never vary per request, so this connector
/// (shared by all of the client's agents) builds the configuration once,
/// from the agent's TLS settings, and makes every TLS connection itself.
///
/// With a `tls-server-name`, the certificate of the server (not of a proxy
/// on the way) is verified against that name, which is also sent as SNI.
#[derive(Clone, Default)]
pub(super) struct SharedTls {
    /// (the URL's host, the name to verify instead)
    server_name: Option<Arc<(String, String)>>,
    config: Arc<OnceLock<Arc<rustls::ClientConfig>>>,
}

// By hand: a derived `Debug` would print (and link the formatting of) the
// whole rustls configuration.
impl fmt::Debug for SharedTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedTls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl<In: Transport> Connector<In> for SharedTls {
    type Out = Either<In, TlsTransport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> std::result::Result<Option<Self::Out>, ureq::Error> {
        let Some(transport) = chained else {
            return Ok(None);
        };
        if !details.needs_tls() || transport.is_tls() {
            return Ok(Some(Either::A(transport)));
        }
        let host = details.uri.authority().map_or("", |a| a.host());
        let name = match self.server_name.as_deref() {
            // Not for a proxy's own TLS.
            Some((server, name)) if server == host => name.as_str(),
            _ => host,
        };
        let name = ServerName::try_from(name.trim_start_matches('[').trim_end_matches(']'))
            .map_err(|_| ureq::Error::Tls("invalid server name for TLS"))?
            .to_owned();
        let config = match self.config.get() {
            Some(c) => c.clone(),
            None => {
                let built = Arc::new(rustls_config(details.config.tls_config())?);
                self.config.get_or_init(|| built).clone()
            }
        };
        let mut conn = ClientConnection::new(config, name)?;
        let mut sock = TransportAdapter::new(transport.boxed(), details.current_time.clone());
        sock.set_timeout(details.timeout);
        conn.complete_io(&mut sock)?;
        Ok(Some(Either::B(TlsTransport {
            buffers: LazyBuffers::new(
                details.config.input_buffer_size(),
                details.config.output_buffer_size(),
            ),
            stream: StreamOwned { conn, sock },
        })))
    }
}

impl SharedTls {
    /// Verify the server at `host` against `name` instead (see above).
    pub(super) fn with_server_name(host: &str, name: Option<&str>) -> Self {
        SharedTls {
            server_name: name.map(|n| Arc::new((host.to_string(), n.to_string()))),
            config: Arc::default(),
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

/// The rustls configuration of `tls` (ring, TLS 1.2 and 1.3, as ureq
/// builds it): its root certificates, or (`insecure-skip-tls-verify`)
/// any certificate with a checked handshake; its client certificate.
fn rustls_config(tls: &TlsConfig) -> std::result::Result<rustls::ClientConfig, ureq::Error> {
    let provider = Arc::new(super::crypto::provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(rustls::ALL_VERSIONS)?;
    let builder = match tls.root_certs() {
        _ if tls.disable_verification() => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider))),
        RootCerts::Specific(certs) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add_parsable_certificates(certs.iter().map(|c| CertificateDer::from(c.der())));
            builder.with_root_certificates(roots)
        }
        // Never set by this crate: every agent has its roots.
        _ => return Err(ureq::Error::Tls("no root certificates")),
    };
    let mut config = match tls.client_cert() {
        None => builder.with_no_client_auth(),
        Some(cert) => {
            let chain = cert
                .certs()
                .iter()
                .map(|c| CertificateDer::from(c.der().to_vec()))
                .collect();
            // The DER says which kind of key it is.
            let key = PrivateKeyDer::try_from(cert.private_key().der().to_vec())
                .map_err(|_| ureq::Error::Tls("unusable client key"))?;
            builder.with_client_auth_cert(chain, key)?
        }
    };
    config.enable_sni = tls.use_sni();
    Ok(config)
}

/// Go's `InsecureSkipVerify`: any certificate chain and name, but the
/// handshake signed with the presented certificate's key.
struct AnyCertificate(Arc<CryptoProvider>);

// By hand: the provider's derived `Debug` costs the static binary ~3 KB.
impl fmt::Debug for AnyCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AnyCertificate")
    }
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A TLS connection made by [`SharedTls`].
pub(super) struct TlsTransport {
    buffers: LazyBuffers,
    stream: StreamOwned<ClientConnection, TransportAdapter>,
}

impl fmt::Debug for TlsTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsTransport").finish_non_exhaustive()
    }
}

impl Transport for TlsTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(
        &mut self,
        amount: usize,
        timeout: NextTimeout,
    ) -> std::result::Result<(), ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let output = &self.buffers.output()[..amount];
        self.stream.write_all(output)?;
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> std::result::Result<bool, ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let input = self.buffers.input_append_buf();
        let amount = self.stream.read(input)?;
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        self.stream.get_mut().get_mut().is_open()
    }

    fn is_tls(&self) -> bool {
        true
    }
}
