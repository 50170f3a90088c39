//! The checker: what must hold at every instant of true time, whatever
//! the schedule did.
//!
//! - **One leader.** Never two running processes holding a term at once.
//!   A process holds from `StartedLeading` while its `Term` is current or
//!   until its `StoppedLeading`, whichever is later. A paused process holds nothing while paused (it cannot act),
//!   and must step down the moment it resumes past its deadline. A term is
//!   *revoked*, and holds no more, when after its first write another
//!   writer frees the Lease or gives it to someone else, or, once another
//!   writer has deleted the Lease, a process creates it again without
//!   having read a record of that term: its holder cannot know before its
//!   next renew or its deadline (the next holder's greater token fences it
//!   meanwhile), and a deletion erases the history a candidate judges by
//!   (one that never saw a holder cannot tell a deleted Lease from a new
//!   one, and creates it at once, as client-go does).
//! - **Tokens.** A new term's token is greater than every
//!   `leaseTransitions` its process read in a record other than one it
//!   wrote,
//!   and than its own earlier terms'; and greater than the previous
//!   term's (of any process) unless another writer deleted the Lease or
//!   lowered its transitions since that term began. (A process that never
//!   read the higher value cannot know it: a Lease deleted and created
//!   anew by a fresh candidate starts again.)
//! - **Term ends.** `StoppedLeading` for a lost term comes no later than
//!   the renew deadline after the start of the last successful renew, on
//!   the process's clock (at its resume if it was paused then); a term
//!   never turns current again once it was not. A term another writer
//!   took away (the Lease freed, or given to someone else) is not taken
//!   back: a write of its holder's own record under it is a violation
//!   (retaking the Lease starts a new term).
//! - **Liveness.** Once the faults are over and the world has settled, a
//!   leader.
//! - **Release after the work.** A release is written only once the
//!   work has let go of its term.
//! - **Bounds.** A stop ends the process within the release's budget
//!   (after the work let go); nothing panics.

use std::time::Duration;

/// What one process holds, as the checker tracks it.
#[derive(Debug, Default)]
pub(super) struct Holding {
    /// Between `StartedLeading` and `StoppedLeading`.
    pub(super) leading: bool,
    /// The last `Term::is_current()` seen, to catch a revived term.
    pub(super) was_current: bool,
    /// The store revision of the write that began its term, and the
    /// Lease's creation (uid) it was on.
    pub(super) version: u64,
    pub(super) uid: u64,
}

/// A term, once started.
#[derive(Debug, Clone)]
pub(super) struct TermSeen {
    pub(super) p: usize,
    pub(super) token: u64,
    /// The store revision of the write that began it: terms in the order
    /// the Lease saw them, not the order their answers came back in.
    pub(super) version: u64,
}

#[derive(Debug, Default)]
pub(super) struct Checker {
    pub(super) violations: Vec<String>,
    pub(super) terms: Vec<TermSeen>,
    /// The pair of processes last reported holding at once (reported
    /// once per overlap, not at every event of it).
    overlapping: Option<(usize, usize)>,
}

/// At most this many violations are kept per schedule.
const KEEP: usize = 20;

impl Checker {
    pub(super) fn violation(&mut self, now: Duration, what: String) {
        if self.violations.len() < KEEP {
            self.violations
                .push(format!("at {:.6}s: {what}", now.as_secs_f64()));
        }
    }

    /// Holders at `now`: `(process, description)`.
    /// Holders at `now` (process, description), revoked terms left out.
    pub(super) fn one_leader(&mut self, now: Duration, holders: &[(usize, String)]) {
        let [a, b, ..] = holders else {
            self.overlapping = None;
            return;
        };
        let pair = (a.0, b.0);
        if self.overlapping == Some(pair) {
            return;
        }
        self.overlapping = Some(pair);
        self.violation(now, format!("two leaders at once: {} and {}", a.1, b.1));
    }

    /// A term started: check its token.
    pub(super) fn started(
        &mut self,
        now: Duration,
        term: TermSeen,
        max_foreign_seen: Option<i32>,
        lowered: Option<u64>,
    ) {
        let token = term.token;
        if let Some(max) = max_foreign_seen {
            if i64::try_from(token).unwrap_or(i64::MAX) <= i64::from(max) {
                self.violation(
                    now,
                    format!(
                        "p{} started a term with token {token}, not above leaseTransitions {max} it had read",
                        term.p
                    ),
                );
            }
        }
        if let Some(own) = self.terms.iter().rev().find(|t| t.p == term.p) {
            if token <= own.token {
                let prev = own.token;
                self.violation(
                    now,
                    format!(
                        "p{} started a term with token {token} after its own term {prev}",
                        term.p
                    ),
                );
            }
        }
        let prev = self
            .terms
            .iter()
            .filter(|t| t.version < term.version)
            .max_by_key(|t| t.version)
            .cloned();
        let next = self
            .terms
            .iter()
            .filter(|t| t.version > term.version)
            .min_by_key(|t| t.version)
            .cloned();
        for (earlier, later) in [(prev.as_ref(), Some(&term)), (Some(&term), next.as_ref())] {
            let (Some(earlier), Some(later)) = (earlier, later) else {
                continue;
            };
            let excused = lowered.is_some_and(|rev| rev > earlier.version);
            if later.token <= earlier.token && !excused {
                let msg = format!(
                    "p{} began a term with token {} after p{}'s with token {}",
                    later.p, later.token, earlier.p, earlier.token
                );
                self.violation(now, msg);
            }
        }
        self.terms.push(term);
    }
}
