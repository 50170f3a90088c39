//! The committed TLS fixtures (`fixtures/tls/`, see `regen.sh`) and the
//! rustls server configuration built from them.

use std::io;
use std::sync::Arc;

use rustls::crypto::ring;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

/// CA that signed the server certificate.
pub(crate) const CA_PEM: &[u8] = include_bytes!("../../fixtures/tls/ca.pem");
const SERVER_CERT_PEM: &[u8] = include_bytes!("../../fixtures/tls/server.pem");
const SERVER_KEY_PEM: &[u8] = include_bytes!("../../fixtures/tls/server-key.pem");
const CLIENT_CA_PEM: &[u8] = include_bytes!("../../fixtures/tls/client-ca.pem");
/// Client certificate signed by the client CA.
pub(crate) const CLIENT_CERT_PEM: &[u8] = include_bytes!("../../fixtures/tls/client.pem");
/// Key of [`CLIENT_CERT_PEM`].
pub(crate) const CLIENT_KEY_PEM: &[u8] = include_bytes!("../../fixtures/tls/client-key.pem");

fn invalid(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{what}: {e}"))
}

fn certs(pem: &[u8], what: &str) -> io::Result<Vec<CertificateDer<'static>>> {
    CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(what, e))
}

/// Server config for the fixture certificate; with `client_ca`, client
/// certificates signed by the fixture client CA are required and verified.
pub(crate) fn server_config(client_ca: bool) -> io::Result<Arc<ServerConfig>> {
    // An explicit provider: installing a process-wide default would leak into
    // the program under test. ring's, as the client's (for size): rustls
    // 0.23.48 deprecates it for lacking post-quantum key exchange, which a
    // loopback test server does not need.
    #[allow(deprecated)]
    let provider = Arc::new(ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("TLS protocol versions", e))?;
    let builder = if client_ca {
        let mut roots = RootCertStore::empty();
        for cert in certs(CLIENT_CA_PEM, "fixture client CA")? {
            roots
                .add(cert)
                .map_err(|e| invalid("fixture client CA", e))?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| invalid("client certificate verifier", e))?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let key = PrivateKeyDer::from_pem_slice(SERVER_KEY_PEM)
        .map_err(|e| invalid("fixture server key", e))?;
    let config = builder
        .with_single_cert(certs(SERVER_CERT_PEM, "fixture server certificate")?, key)
        .map_err(|e| invalid("fixture server certificate", e))?;
    Ok(Arc::new(config))
}
