//! The API server and namespace as command-line tools name them
//! (`--server`, `--ca-file`, `--token-file`, `--kubeconfig`, `--context`,
//! `--namespace`): one reading for `lease-elect` and the `elect` example,
//! so that the two cannot find a different server, credential or namespace
//! in the same kubeconfig.

use std::path::PathBuf;

use super::config::ClientConfig;
use crate::error::{Error, Result};

/// Where the API server is, how to reach it, and the namespace, as a
/// command line gives them; [`resolve`](Self::resolve) turns them into a
/// [`ClientConfig`] and a namespace.
///
/// Which configuration is used:
///
/// | given | configuration |
/// |---|---|
/// | `server` | [`ClientConfig::new`] (plain `http://`, or `https://` with `ca_file`: the server's certificate is verified against exactly that CA) |
/// | `kubeconfig` | [`ClientConfig::from_kubeconfig`] with `context` |
/// | `context` alone | the default kubeconfig files (`$KUBECONFIG` or `~/.kube/config`), as kubectl's `--context` |
/// | nothing | [`ClientConfig::infer`]: the default kubeconfig where there is one, else in-cluster in a pod (kubectl's order) |
///
/// `token_file` (read again as it rotates) and `ca_file` replace what the
/// configuration had, as kubectl's `--token` and `--certificate-authority`
/// do. A token file that cannot be read is an error at once, naming it,
/// as client-go's in-cluster configuration fails.
///
/// The namespace is `namespace` if given, else the configuration's (the
/// pod's, or the kubeconfig context's); with `server` there is none, so
/// `namespace` must be given.
///
/// ```no_run
/// use lease_elector::client::ConnectOptions;
/// use lease_elector::{Client, LeaseLock};
///
/// let options = ConnectOptions {
///     kubeconfig: Some("/etc/ops/kubeconfig".into()),
///     context: Some("prod".into()),
///     ..ConnectOptions::default()
/// };
/// let (config, namespace) = options.resolve()?;
/// let lock = LeaseLock::new(Client::new(config)?, namespace, "my-lock", lease_elector::identity());
/// # Ok::<(), lease_elector::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectOptions {
    /// The API server's URL (`--server`).
    pub server: Option<String>,
    /// A CA bundle to trust, alone (`--ca-file`); needed for an `https://`
    /// `server`.
    pub ca_file: Option<PathBuf>,
    /// A file holding the bearer token (`--token-file`).
    pub token_file: Option<PathBuf>,
    /// A kubeconfig file, YAML or JSON (`--kubeconfig`).
    pub kubeconfig: Option<PathBuf>,
    /// A kubeconfig context (`--context`).
    pub context: Option<String>,
    /// The namespace (`--namespace`).
    pub namespace: Option<String>,
}

impl ConnectOptions {
    /// The mistakes a command line can make with these options, as a
    /// usage error (both tools exit 2 on it): `--server` without
    /// `--namespace`, and an `https://` `--server` without `--ca-file` (TLS
    /// is always verified). Reading files is left to [`resolve`](Self::resolve).
    pub fn check_flags(&self) -> std::result::Result<(), String> {
        if self.server.is_some() && self.namespace.is_none() {
            return Err("--namespace is required with --server".into());
        }
        let scheme = |url: &str, scheme: &str| {
            url.get(..scheme.len())
                .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
        };
        if let Some(url) = &self.server {
            if !scheme(url, "http://") && !scheme(url, "https://") {
                return Err(format!(
                    "--server {}: give the API server's URL with its scheme (https://HOST:PORT, or http:// for a local proxy)",
                    crate::text::Escaped(&crate::client::failure::shown_url(url))
                ));
            }
        }
        // TLS is always verified, and with --server nothing else names a CA.
        let https = self
            .server
            .as_deref()
            .is_some_and(|url| scheme(url, "https://"));
        if https && self.ca_file.is_none() {
            return Err("an https:// --server needs --ca-file (the CA that signed the server's certificate): TLS is always verified".into());
        }
        Ok(())
    }

    /// The client configuration and the namespace these options name.
    ///
    /// # Errors
    ///
    /// What reading the configuration fails with (a kubeconfig, the
    /// in-cluster files, the CA bundle), an unreadable token file, and
    /// [`Error::InvalidConfig`] when no namespace is given or configured.
    pub fn resolve(&self) -> Result<(ClientConfig, String)> {
        let mut config = match (&self.server, &self.kubeconfig) {
            (Some(url), _) => ClientConfig::new(url.clone()),
            (None, Some(path)) => ClientConfig::from_kubeconfig(path, self.context.as_deref())?,
            // Like kubectl: a context alone picks it from the default kubeconfig.
            (None, None) if self.context.is_some() => ClientConfig::from_kubeconfig_files(
                &ClientConfig::default_kubeconfig_paths()?,
                self.context.as_deref(),
            )?,
            (None, None) => ClientConfig::infer()?,
        };
        if let Some(ca) = &self.ca_file {
            config = config.ca_file(ca)?;
        }
        if let Some(path) = &self.token_file {
            check_token_file(path)?;
            config = config.token_file(path);
        }
        let namespace = match (&self.namespace, config.namespace()) {
            (Some(ns), _) => ns.clone(),
            (None, Some(ns)) => ns.to_string(),
            (None, None) if self.server.is_some() => {
                return Err(Error::InvalidConfig(
                    "a namespace is required with an explicit API server URL (--namespace)".into(),
                ))
            }
            (None, None) => {
                return Err(Error::InvalidConfig(
                    "no namespace: the configuration names none; give one (--namespace)".into(),
                ))
            }
        };
        Ok((config, namespace))
    }
}

/// Fail at start on a token file that cannot be read, rather than on every
/// request: read through the one bounded reader (a regular file, opened
/// without waiting on a FIFO, at most 64 KiB, not empty).
fn check_token_file(path: &std::path::Path) -> Result<()> {
    super::config::read_token(path).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_server_needs_an_explicit_namespace() {
        let options = ConnectOptions {
            server: Some("http://127.0.0.1:1".into()),
            ..ConnectOptions::default()
        };
        let err = options.resolve().unwrap_err().to_string();
        assert!(err.contains("--namespace"), "{err}");
        let (config, ns) = ConnectOptions {
            namespace: Some("ns".into()),
            ..options
        }
        .resolve()
        .unwrap();
        assert_eq!(ns, "ns");
        assert_eq!(config.namespace(), None);
    }

    #[test]
    fn a_token_file_that_cannot_be_read_is_an_error_naming_it() {
        for path in ["/nonexistent/token", "/"] {
            let err = ConnectOptions {
                server: Some("http://127.0.0.1:1".into()),
                namespace: Some("ns".into()),
                token_file: Some(path.into()),
                ..ConnectOptions::default()
            }
            .resolve()
            .unwrap_err();
            assert!(matches!(err, Error::ReadFile { .. }), "{err:?}");
            assert!(err.to_string().contains(path), "{err}");
        }
    }
}
