//! Credentials on each request: a static token, a token file re-read as
//! it rotates, or a kubeconfig exec plugin ([`super::exec`]).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::config::read_token;
use super::exec::ExecSource;
use crate::clock::Clock;
use crate::deadline::Deadline;
use crate::error::Result;

/// How often a token file is re-read even without a 401 (as client-go does).
pub(crate) const TOKEN_REFRESH: Duration = Duration::from_secs(60);

/// Bearer token, cached and re-read from its file at most every [`TOKEN_REFRESH`].
pub(super) struct TokenSource {
    pub(super) path: PathBuf,
    pub(super) cached: Mutex<Option<(String, Instant)>>,
    pub(super) clock: Arc<dyn Clock>,
}

impl TokenSource {
    fn current(&self, force: bool) -> Result<String> {
        let mut cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
        let now = self.clock.now();
        if let Some((token, read_at)) = cached.as_ref() {
            if !force && now.saturating_duration_since(*read_at) < TOKEN_REFRESH {
                return Ok(token.clone());
            }
        }
        match read_token(&self.path) {
            Ok(token) => {
                *cached = Some((token.clone(), now));
                Ok(token)
            }
            // A rotation in progress can leave the file briefly missing: keep
            // using the last good token rather than failing the renew.
            Err(e) => match cached.as_ref() {
                Some((token, _)) => {
                    log::warn!("{e}; keeping the previous token");
                    Ok(token.clone())
                }
                None => Err(e),
            },
        }
    }
}

pub(super) enum Auth {
    None,
    Static(String),
    File(TokenSource),
    Exec(ExecSource),
}

impl Auth {
    /// The header value; waiting for a plugin run ends at `deadline`.
    pub(super) fn header(
        &self,
        force_refresh: bool,
        deadline: &Deadline,
    ) -> Result<Option<String>> {
        Ok(match self {
            Auth::None => None,
            Auth::Static(t) => Some(format!("Bearer {t}")),
            Auth::File(src) => Some(format!("Bearer {}", src.current(force_refresh)?)),
            Auth::Exec(src) => Some(format!("Bearer {}", src.current(force_refresh, deadline)?)),
        })
    }

    pub(super) fn can_refresh(&self) -> bool {
        matches!(self, Auth::File(_) | Auth::Exec(_))
    }
}
