//! What the state machine waits on: the Lease and the passing of time.
//!
//! The state machine (`run.rs`, `attempt.rs`) is written as `async` code
//! over [`Io`] so that one body of code serves two drivers. The elector
//! thread drives it with [`ThreadIo`], whose every call blocks and returns
//! a ready future, under [`block_on`]: nothing is ever pending, so there is
//! no executor, no waker and no runtime, only the state machine run to its
//! end in one poll. The seeded simulation (feature `testing`) drives the
//! same code with futures its scheduler completes on virtual time, so it
//! tests what ships rather than a model of it.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use super::term::{LetGo, Term};
use crate::clock::{Clock, Wake, Wakeup};
use crate::deadline::Deadline;
use crate::error::Result;
use crate::lease::LeaderElectionRecord;
use crate::lock::Lock;

/// Who reads the lock, and so what may answer without a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reader {
    /// A candidate that holds no term and whose work does not run: a
    /// watch that vouches nothing changed since the last read answers.
    Follower,
    /// A read for a term, or while the work of one runs: only a change
    /// the watch delivered answers without a request.
    Term,
}

/// A read of the lock: the record and the object's version.
#[derive(Debug, Clone)]
pub(crate) struct Read {
    pub(crate) record: LeaderElectionRecord,
    /// The lock object's `resourceVersion`, when the lock knows it.
    pub(crate) version: Option<String>,
    /// The object is another than the one last seen (a new uid): it was
    /// deleted and created again since.
    pub(crate) recreated: bool,
}

/// A write the server confirmed: the version it stored, and whether an
/// update created the object anew (it had been deleted).
#[derive(Debug, Clone, Default)]
pub(crate) struct Written {
    pub(crate) version: Option<String>,
    pub(crate) recreated: bool,
}

/// The lock and the clock, as the state machine uses them. Each call gets
/// the time it may take (a [`Deadline`]) and must not outlast it.
pub(crate) trait Io {
    /// Read the record (see [`Lock::get`], and [`Lock::follow`] for a
    /// follower).
    async fn get(&mut self, deadline: &Deadline, reader: Reader) -> Result<Read>;
    /// Whether the last [`get`](Io::get), found or not, sent a request
    /// (a watch answers some without one).
    fn last_read_sent(&self) -> bool;
    /// Create the lock object (see [`Lock::create`]).
    async fn create(
        &mut self,
        record: &LeaderElectionRecord,
        deadline: &Deadline,
    ) -> Result<Written>;
    /// Replace the record against the version last seen (see
    /// [`Lock::update`]).
    async fn update(
        &mut self,
        record: &LeaderElectionRecord,
        deadline: &Deadline,
    ) -> Result<Written>;
    /// Sleep `d` on the elector's clock, or until `wake` fires.
    async fn sleep(&mut self, d: Duration, wake: &Wakeup) -> Wake;
    /// Wait, at most `grace`, until the caller holds no `Term` of `term`,
    /// or until `stop` fires.
    async fn let_go(&mut self, term: &Term, grace: Duration, stop: &Wakeup) -> LetGo;
    /// A watch delivery waits that the next `get` answers without a
    /// request.
    fn delivered(&mut self) -> bool;
    /// This candidate's identity.
    fn identity(&self) -> &str;
    /// Record a transition (an Event); must not block.
    fn record_event(&self, message: &str);
}

/// The elector thread's [`Io`]: the caller's [`Lock`] and the elector's
/// clock, each call blocking until it is done.
#[derive(Debug)]
pub(crate) struct ThreadIo {
    pub(crate) lock: Box<dyn Lock>,
    pub(crate) clock: std::sync::Arc<dyn Clock>,
}

impl Io for ThreadIo {
    async fn get(&mut self, deadline: &Deadline, reader: Reader) -> Result<Read> {
        let record = match reader {
            Reader::Follower => self.lock.follow(deadline)?,
            Reader::Term => self.lock.get(deadline)?,
        };
        Ok(Read {
            record,
            version: self.lock.version(),
            recreated: self.lock.last_get_recreated(),
        })
    }

    fn last_read_sent(&self) -> bool {
        !self.lock.last_get_was_local()
    }

    async fn create(
        &mut self,
        record: &LeaderElectionRecord,
        deadline: &Deadline,
    ) -> Result<Written> {
        self.lock.create(record, deadline)?;
        Ok(Written {
            version: self.lock.version(),
            recreated: false,
        })
    }

    async fn update(
        &mut self,
        record: &LeaderElectionRecord,
        deadline: &Deadline,
    ) -> Result<Written> {
        self.lock.update(record, deadline)?;
        Ok(Written {
            version: self.lock.version(),
            recreated: self.lock.last_update_created(),
        })
    }

    async fn sleep(&mut self, d: Duration, wake: &Wakeup) -> Wake {
        self.clock.sleep(d, wake)
    }

    async fn let_go(&mut self, term: &Term, grace: Duration, stop: &Wakeup) -> LetGo {
        term.wait_let_go(grace, stop)
    }

    fn delivered(&mut self) -> bool {
        self.lock.has_delivery()
    }

    fn identity(&self) -> &str {
        self.lock.identity()
    }

    fn record_event(&self, message: &str) {
        self.lock.record_event(message);
    }
}

/// Run `future` to its end on this thread. With [`ThreadIo`] every await
/// is ready at once, so the first poll finishes it; were anything pending,
/// the loop would only yield and poll again.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;
    use crate::{Client, ClientConfig, LeaseLock};

    /// The thread's Io answers from the caller's lock: its identity, and
    /// no delivery waiting while nothing was watched (a poke during a
    /// failure's pause must then wait for the pause: see the lab's
    /// `a_poke_while_reads_fail_after_a_term_ran_out_brings_no_read_early`).
    #[test]
    fn the_threads_io_answers_from_the_lock() {
        let client = Client::new(ClientConfig::new("http://127.0.0.1:9")).expect("a client");
        let mut io = ThreadIo {
            lock: Box::new(LeaseLock::new(client, "ns", "l", "me")),
            clock: std::sync::Arc::new(SystemClock),
        };
        assert_eq!(io.identity(), "me");
        assert!(!io.delivered());
    }

    /// A lock with a watch delivery waiting: the thread's Io says so, so a
    /// poke during a failure's pause is looked at at once (the read it
    /// brings costs no request).
    #[test]
    fn the_threads_io_tells_of_a_delivery_the_lock_holds() {
        #[derive(Debug)]
        struct Delivered;
        impl crate::Lock for Delivered {
            fn get(&mut self, _: &Deadline) -> Result<LeaderElectionRecord> {
                Err(crate::Error::InvalidConfig("never read".into()))
            }
            fn create(&mut self, _: &LeaderElectionRecord, _: &Deadline) -> Result<()> {
                Ok(())
            }
            fn update(&mut self, _: &LeaderElectionRecord, _: &Deadline) -> Result<()> {
                Ok(())
            }
            fn identity(&self) -> &str {
                "me"
            }
            fn describe(&self) -> String {
                "a lock with a delivery".into()
            }
            fn has_delivery(&self) -> bool {
                true
            }
        }
        let mut io = ThreadIo {
            lock: Box::new(Delivered),
            clock: std::sync::Arc::new(SystemClock),
        };
        assert!(io.delivered());
    }
}
