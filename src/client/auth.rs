//! Credentials on each request: a static token, a token file re-read as
//! it rotates, a kubeconfig exec plugin ([`super::exec`]) or oidc
//! auth-provider ([`super::oidc`]).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::config::{read_token, TokenConfig};
use super::exec::ExecSource;
use super::oidc::OidcSource;
use crate::clock::Clock;
use crate::deadline::Deadline;
use crate::error::{Error, Result};

/// How often a token file is re-read even without a 401 (as client-go does).
pub(crate) const TOKEN_REFRESH: Duration = Duration::from_secs(60);

/// Bearer token, cached and re-read from its file at most every [`TOKEN_REFRESH`].
///
/// The file is read once when the client is built: a token file that
/// cannot be read then is an error naming it, as client-go's in-cluster
/// config and kubectl's `tokenFile` fail. A re-read that fails later (a
/// rotation in progress can leave the file briefly missing) keeps the last
/// token and warns once per kind of failure until a read succeeds again.
pub(super) struct TokenSource {
    path: PathBuf,
    state: Mutex<FileState>,
    clock: Arc<dyn Clock>,
}

struct FileState {
    token: String,
    read_at: Instant,
    /// The kinds of failure warned about since the last good read.
    warned: Vec<std::io::ErrorKind>,
}

impl TokenSource {
    /// Read the file now; an error when it cannot be.
    pub(super) fn new(path: PathBuf, clock: Arc<dyn Clock>) -> Result<Self> {
        let token = read_token(&path)?;
        let state = Mutex::new(FileState {
            token,
            read_at: clock.now(),
            warned: Vec::new(),
        });
        Ok(TokenSource { path, state, clock })
    }

    fn current(&self, force: bool) -> String {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = self.clock.now();
        if !force && now.saturating_duration_since(st.read_at) < TOKEN_REFRESH {
            return st.token.clone();
        }
        match read_token(&self.path) {
            Ok(token) => {
                if !st.warned.is_empty() {
                    log::warn!(
                        "bearer token file {} is readable again",
                        self.path.display()
                    );
                }
                *st = FileState {
                    token,
                    read_at: now,
                    warned: Vec::new(),
                };
            }
            Err(e) => {
                // Try again at the next request rather than in a minute.
                let kind = match &e {
                    Error::ReadFile { source, .. } => source.kind(),
                    _ => std::io::ErrorKind::Other,
                };
                if st.warned.contains(&kind) {
                    log::debug!("{e}; keeping the previous token");
                } else {
                    st.warned.push(kind);
                    log::warn!("{e}; keeping the previous token");
                }
            }
        }
        st.token.clone()
    }
}

pub(super) enum Auth {
    None,
    Static(String),
    File(TokenSource),
    Exec(ExecSource),
    Oidc(OidcSource),
}

impl Auth {
    /// The credentials `token` configures; a token file is read now.
    pub(super) fn new(
        token: TokenConfig,
        clock: Arc<dyn Clock>,
        timeout: Duration,
    ) -> Result<Auth> {
        Ok(match token {
            TokenConfig::None => Auth::None,
            TokenConfig::Static(t) => Auth::Static(t),
            TokenConfig::File(path) => Auth::File(TokenSource::new(path, clock)?),
            TokenConfig::Exec(plugin) => Auth::Exec(ExecSource::new(plugin, clock, timeout)),
            TokenConfig::Oidc(oidc) => Auth::Oidc(OidcSource::new(oidc, clock)),
        })
    }

    /// The header value; waiting for a plugin run ends at `deadline`.
    pub(super) fn header(
        &self,
        force_refresh: bool,
        deadline: &Deadline,
    ) -> Result<Option<String>> {
        Ok(match self {
            Auth::None => None,
            Auth::Static(t) => Some(format!("Bearer {t}")),
            Auth::File(src) => Some(format!("Bearer {}", src.current(force_refresh))),
            Auth::Exec(src) => Some(format!("Bearer {}", src.current(force_refresh, deadline)?)),
            Auth::Oidc(src) => Some(format!("Bearer {}", src.token(deadline)?)),
        })
    }

    pub(super) fn can_refresh(&self) -> bool {
        matches!(self, Auth::File(_) | Auth::Exec(_))
    }
}
