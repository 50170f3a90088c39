//! TLS, always verified: the cluster CA (or a pinned root) and an optional
//! client certificate, built once per [`super::Client`] and shared by every
//! request it sends, the watch stream included.

use std::sync::Arc;

use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig, TlsProvider};

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
