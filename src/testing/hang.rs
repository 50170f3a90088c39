//! `Fault::hang`: hold a request unanswered without holding up anyone else.

use std::io::BufReader;
use std::time::Duration;

use super::server::{Shared, State, Stream};

/// How often a hung request checks whether its client went away.
const PROBE_EVERY: Duration = Duration::from_millis(100);

/// Answer nothing until the rules are cleared after the hang rule fired
/// (`cleared` is [`State::faults_cleared`] as it was then), the rule
/// `forever_rule` (a candidate's, which `restore` removes) is gone, an
/// outage starts, the server stops, or the client closes its side. The
/// caller then closes the connection without an answer.
///
/// Waiting on the change signal releases the state lock, so every other
/// connection is served meanwhile; probing the peer bounds how long a
/// thread outlives a client that gave up.
pub(crate) fn hold(
    shared: &Shared,
    conn: &mut BufReader<Stream>,
    cleared: u64,
    forever_rule: Option<u64>,
) {
    let released = |st: &State| {
        shared.stopping()
            || st.outage
            || st.faults_cleared != cleared
            || forever_rule.is_some_and(|id| !st.faults.iter().any(|f| f.id == id))
    };
    loop {
        let st = shared.lock();
        if released(&st) {
            return;
        }
        let st = shared.wait(st, PROBE_EVERY);
        if released(&st) {
            return;
        }
        drop(st);
        if conn.get_mut().peer_gone() {
            log::debug!("test-apiserver: the client of a hung request went away");
            return;
        }
    }
}
