//! The TLS crypto provider: ring, as rustls's own ring provider, with the
//! AES-GCM cipher suites only.
//!
//! Every API server offers AES-GCM (Go's crypto/tls always does, in TLS
//! 1.3 and 1.2). Leaving ChaCha20-Poly1305 out keeps its assembly (about
//! 45 KB) out of every static binary, which is what keeps `elect` under its
//! 3 MB budget. rustls's `ring::default_provider()` cannot be trimmed
//! after the fact: calling it links every suite it lists. So the provider
//! is assembled here from the same public parts: its key exchange groups,
//! webpki's ring signature algorithms (the table rustls uses), ring's
//! system random and rustls's ring key loader.

use std::sync::Arc;

use rustls::crypto::ring::{cipher_suite as suite, kx_group, sign};
use rustls::crypto::{
    CryptoProvider, GetRandomFailed, KeyProvider, SecureRandom, WebPkiSupportedAlgorithms,
};
use rustls::pki_types::PrivateKeyDer;
use rustls::sign::SigningKey;
use rustls::SignatureScheme;
use webpki::ring as alg;

/// The provider every TLS connection of the crate uses.
pub(super) fn provider() -> CryptoProvider {
    CryptoProvider {
        cipher_suites: vec![
            suite::TLS13_AES_128_GCM_SHA256,
            suite::TLS13_AES_256_GCM_SHA384,
            suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
            suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        ],
        kx_groups: vec![kx_group::X25519, kx_group::SECP256R1, kx_group::SECP384R1],
        signature_verification_algorithms: SIGNATURES,
        secure_random: &Ring,
        key_provider: &Ring,
    }
}

#[derive(Debug)]
struct Ring;

impl SecureRandom for Ring {
    fn fill(&self, buf: &mut [u8]) -> Result<(), GetRandomFailed> {
        use ring::rand::SecureRandom as _;
        ring::rand::SystemRandom::new()
            .fill(buf)
            .map_err(|_| GetRandomFailed)
    }
}

impl KeyProvider for Ring {
    fn load_private_key(
        &self,
        key_der: PrivateKeyDer<'static>,
    ) -> Result<Arc<dyn SigningKey>, rustls::Error> {
        sign::any_supported_type(&key_der)
    }
}

/// rustls's `SUPPORTED_SIG_ALGS` for ring, as rustls 0.23 defines it.
static SIGNATURES: WebPkiSupportedAlgorithms = WebPkiSupportedAlgorithms {
    all: &[
        alg::ECDSA_P256_SHA256,
        alg::ECDSA_P256_SHA384,
        alg::ECDSA_P384_SHA256,
        alg::ECDSA_P384_SHA384,
        alg::ED25519,
        alg::RSA_PSS_2048_8192_SHA256_LEGACY_KEY,
        alg::RSA_PSS_2048_8192_SHA384_LEGACY_KEY,
        alg::RSA_PSS_2048_8192_SHA512_LEGACY_KEY,
        alg::RSA_PKCS1_2048_8192_SHA256,
        alg::RSA_PKCS1_2048_8192_SHA384,
        alg::RSA_PKCS1_2048_8192_SHA512,
        alg::RSA_PKCS1_2048_8192_SHA256_ABSENT_PARAMS,
        alg::RSA_PKCS1_2048_8192_SHA384_ABSENT_PARAMS,
        alg::RSA_PKCS1_2048_8192_SHA512_ABSENT_PARAMS,
    ],
    mapping: &[
        // For TLS 1.2 the curve is not fixed by the SignatureScheme.
        (
            SignatureScheme::ECDSA_NISTP384_SHA384,
            &[alg::ECDSA_P384_SHA384, alg::ECDSA_P256_SHA384],
        ),
        (
            SignatureScheme::ECDSA_NISTP256_SHA256,
            &[alg::ECDSA_P256_SHA256, alg::ECDSA_P384_SHA256],
        ),
        (SignatureScheme::ED25519, &[alg::ED25519]),
        (
            SignatureScheme::RSA_PSS_SHA512,
            &[alg::RSA_PSS_2048_8192_SHA512_LEGACY_KEY],
        ),
        (
            SignatureScheme::RSA_PSS_SHA384,
            &[alg::RSA_PSS_2048_8192_SHA384_LEGACY_KEY],
        ),
        (
            SignatureScheme::RSA_PSS_SHA256,
            &[alg::RSA_PSS_2048_8192_SHA256_LEGACY_KEY],
        ),
        (
            SignatureScheme::RSA_PKCS1_SHA512,
            &[alg::RSA_PKCS1_2048_8192_SHA512],
        ),
        (
            SignatureScheme::RSA_PKCS1_SHA384,
            &[alg::RSA_PKCS1_2048_8192_SHA384],
        ),
        (
            SignatureScheme::RSA_PKCS1_SHA256,
            &[alg::RSA_PKCS1_2048_8192_SHA256],
        ),
    ],
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provider_is_rings_without_chacha() {
        let ours = provider();
        // Deprecated from rustls 0.23.48 (no post-quantum key exchange).
        #[allow(deprecated)]
        let rings = rustls::crypto::ring::default_provider();
        let names = |p: &CryptoProvider| -> Vec<String> {
            p.cipher_suites
                .iter()
                .map(|s| format!("{:?}", s.suite()))
                .collect()
        };
        let expected: Vec<String> = names(&rings)
            .into_iter()
            .filter(|n| !n.contains("CHACHA20"))
            .collect();
        let mut got = names(&ours);
        got.sort();
        let mut want = expected;
        want.sort();
        assert_eq!(got, want);
        let kx = |p: &CryptoProvider| -> Vec<String> {
            p.kx_groups
                .iter()
                .map(|g| format!("{:?}", g.name()))
                .collect()
        };
        assert_eq!(kx(&ours), kx(&rings));
        let sig = |p: &CryptoProvider| format!("{:?}", p.signature_verification_algorithms);
        assert_eq!(sig(&ours), sig(&rings));
        let mut random = [0u8; 32];
        ours.secure_random.fill(&mut random).unwrap();
        assert_ne!(random, [0u8; 32]);
        assert!(ours.fips() == rings.fips());
    }
}
