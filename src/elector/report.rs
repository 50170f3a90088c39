//! What an attempt's outcome tells the elector's status and the log: the
//! counters, the last error with what to check, and a failing set-up told
//! at warn once (and again at most once a minute), its recovery too.

use std::time::Duration;

use super::io::Io;
use super::run::Run;
use crate::error::Result;
use crate::status::{FailureKind, LastError};

/// A failure of the same kind is logged at warn at most this often.
const FAILURE_LOG_EVERY: Duration = Duration::from_secs(60);

impl<I: Io> Run<I> {
    /// Count an attempt, and make a failing set-up visible: the first
    /// failure of a kind is logged at warn with what to check, repeats of
    /// the same kind at most once a minute, and recovery (after a warned
    /// failure) at warn too, so that the default level tells the story.
    pub(super) fn note_attempt(&mut self, attempt: &Result<bool>, doing: &str) {
        // Logged after the shared state is unlocked: a logger is the
        // caller's code, and may block (a stderr nobody reads); the state
        // it would hold locked is what ends a term from another thread.
        let line = self.count_attempt(attempt, doing);
        match line {
            Some((log::Level::Warn, line)) => log::warn!("{line}"),
            Some((log::Level::Info, line)) => log::info!("{line}"),
            Some((_, line)) => log::debug!("{line}"),
            None => {}
        }
    }

    /// Count the attempt; what to log about it, at which level.
    fn count_attempt(
        &mut self,
        attempt: &Result<bool>,
        doing: &str,
    ) -> Option<(log::Level, String)> {
        let now = self.now();
        let held_by_other = matches!(attempt, Ok(false)) && self.held_by_other();
        let desc = &self.shared.describe;
        let namespace = desc.split_once('/').map_or("", |(ns, _)| ns);
        let mut st = self.shared.lock();
        st.counters.attempts += 1;
        let e = match attempt {
            Ok(won) => {
                st.last_success = now;
                if *won {
                    st.counters.renews += 1;
                    st.last_renew_wall = Some(self.shared.clock.system_time());
                }
                if held_by_other {
                    st.counters.held_by_other += 1;
                }
                let failed = st.counters.consecutive_failures;
                let warned = st.logged_failure.is_some();
                st.counters.consecutive_failures = 0;
                st.logged_failure = None;
                let line = || {
                    format!("lease {desc}: requests succeed again after {failed} failed attempt(s)")
                };
                return if warned {
                    Some((log::Level::Warn, line()))
                } else if failed > 0 {
                    Some((log::Level::Info, line()))
                } else {
                    None
                };
            }
            // A stop cut the request short: not a failure of the set-up.
            Err(_) if self.shared.wake.is_stopped() => return None,
            Err(e) => e,
        };
        let kind = FailureKind::of(e);
        st.counters.consecutive_failures += 1;
        let hint = FailureKind::hint_for(e, namespace);
        st.last_error = Some(LastError {
            kind,
            message: e.to_string(),
            hint: hint.clone(),
            at: now,
        });
        let repeat_due = match st.logged_failure {
            Some((k, at)) => k != kind || now.saturating_duration_since(at) >= FAILURE_LOG_EVERY,
            None => true,
        };
        if repeat_due {
            st.logged_failure = Some((kind, now));
            Some((
                log::Level::Warn,
                format!(
                    "error {doing} lease {desc}: {e} ({hint}; {} failed attempt(s) in a row)",
                    st.counters.consecutive_failures
                ),
            ))
        } else {
            Some((
                log::Level::Debug,
                format!("error {doing} lease {desc}: {e}"),
            ))
        }
    }
}
