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
                // Every failure counted is warned of (its kind's first at
                // least), so a recovery is told exactly when one was.
                return warned.then(|| (log::Level::Warn, line()));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elector::lab::{api, transport, Lab};

    fn level(line: &Option<(log::Level, String)>) -> Option<log::Level> {
        line.as_ref().map(|(level, _)| *level)
    }

    /// A failing set-up at warn, once a minute for a repeat of its kind,
    /// at once for another kind, and its recovery at warn; the counters
    /// and the last error as the status shows them; a request a stop cut
    /// short is not a failure.
    #[test]
    fn failures_are_told_at_warn_once_a_minute_per_kind_and_their_recovery_too() {
        let lab = Lab::new();
        let (mut run, shared, _events) = lab.elector(Duration::from_secs(600));
        let failures = || shared.lock().counters.consecutive_failures;

        assert_eq!(run.count_attempt(&Ok(true), "renewing"), None, "all well");
        let first = run.count_attempt(&Err(api(500, "boom")), "renewing");
        assert_eq!(level(&first), Some(log::Level::Warn));
        let line = first.map(|(_, line)| line).unwrap_or_default();
        assert!(
            line.starts_with("error renewing lease lab/lease: "),
            "{line}"
        );
        assert!(line.ends_with("; 1 failed attempt(s) in a row)"), "{line}");
        assert_eq!(failures(), 1);
        assert!(shared.lock().last_error.is_some());

        lab.clock
            .advance(FAILURE_LOG_EVERY - Duration::from_nanos(1));
        let repeat = run.count_attempt(&Err(api(500, "boom")), "renewing");
        assert_eq!(level(&repeat), Some(log::Level::Debug), "within the minute");
        lab.clock.advance(Duration::from_nanos(1));
        let repeat = run.count_attempt(&Err(api(500, "boom")), "renewing");
        assert_eq!(level(&repeat), Some(log::Level::Warn), "a minute on");
        let other = run.count_attempt(&Err(transport()), "renewing");
        assert_eq!(level(&other), Some(log::Level::Warn), "another kind");
        assert_eq!(failures(), 4);

        let back = run.count_attempt(&Ok(true), "renewing");
        assert_eq!(
            back,
            Some((
                log::Level::Warn,
                "lease lab/lease: requests succeed again after 4 failed attempt(s)".into()
            ))
        );
        assert_eq!((failures(), shared.lock().counters.renews), (0, 2));

        shared.wake.stop();
        let cut = run.count_attempt(&Err(transport()), "renewing");
        assert_eq!((cut, failures()), (None, 0), "a stop cut it short");
    }
}
