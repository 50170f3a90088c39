//! The elector's [`Io`] in the simulation: a read, a write or a sleep is a
//! future that stays pending until the world's queue brings its answer,
//! its deadline or a wake-up. The lock keeps what `LeaseLock` keeps (the
//! object last seen, what the watch delivered) and answers a read from
//! the watch as `LeaseLock` does.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::net::{Answer, Due, Net, Op, Stored};
use crate::clock::{Clock, Wake, Wakeup};
use crate::deadline::Deadline;
use crate::elector::io::{Io, Read, Written};
use crate::elector::{LetGo, Term};
use crate::error::{ApiStatus, Error, Result};
use crate::lease::LeaderElectionRecord;

pub(super) const TARGET: &str = "lease sim/lease";

/// One process's lock and clock.
pub(super) struct SimIo {
    pub(super) net: Rc<RefCell<Net>>,
    pub(super) p: usize,
    pub(super) identity: String,
    pub(super) clock: Arc<dyn Clock>,
}

impl SimIo {
    async fn call(&mut self, op: Op, action: &'static str, deadline: &Deadline) -> Result<Stored> {
        let call = self.net.borrow_mut().send(self.p, op, deadline.instant());
        let answer = Call {
            net: self.net.clone(),
            p: self.p,
            call,
            deadline: deadline.clone(),
        }
        .await;
        match answer {
            Some(Answer::Lease(stored)) => Ok(stored),
            Some(Answer::Status {
                code,
                reason,
                retry_after,
            }) => Err(Error::Api {
                target: TARGET.into(),
                action,
                status: ApiStatus {
                    code,
                    kind: ApiStatus::classify(code, reason),
                    reason: reason.into(),
                    message: String::new(),
                    retry_after,
                },
            }),
            Some(Answer::Refused) => Err(transport(action, "connection refused")),
            None if deadline.is_cancelled() => Err(transport(action, "stopped")),
            None => Err(transport(action, "no answer within the request's deadline")),
        }
    }

    /// A write's answer: the Lease now held and seen, as `LeaseLock`
    /// keeps it (an update that created it anew has a new uid).
    fn written(&mut self, stored: Stored) -> Written {
        let mut net = self.net.borrow_mut();
        let pn = &mut net.procs[self.p];
        let recreated = pn.cached.as_ref().is_some_and(|c| c.uid != stored.uid);
        let version = Some(stored.version.to_string());
        pn.watched = None;
        pn.cached = Some(stored);
        Written { version, recreated }
    }
}

fn transport(action: &'static str, why: &str) -> Error {
    Error::Transport {
        target: TARGET.into(),
        action,
        source: why.to_string().into(),
    }
}

impl Io for SimIo {
    async fn get(&mut self, deadline: &Deadline) -> Result<Read> {
        let local = self.net.borrow_mut().local_read(self.p);
        let (stored, local) = match local {
            Some(stored) => {
                let p = self.p;
                let shown = super::net::show_store(&Some(stored.clone()));
                self.net
                    .borrow_mut()
                    .log(|| format!("p{p} reads what its watch delivered: {shown}"));
                (stored, true)
            }
            None => {
                let stored = self.call(Op::Get, "get", deadline).await?;
                self.net.borrow_mut().procs[self.p].cached = Some(stored.clone());
                (stored, false)
            }
        };
        let mut net = self.net.borrow_mut();
        let pn = &mut net.procs[self.p];
        pn.reads += 1;
        if let Some(w) = stored.writer {
            let term = (w, stored.uid, stored.record.leader_transitions);
            if !pn.read_from.contains(&term) {
                pn.read_from.push(term);
            }
        }
        if !pn.sent.contains(&stored.record) {
            let t = stored.record.leader_transitions;
            pn.max_seen = Some(pn.max_seen.map_or(t, |m| m.max(t)));
        }
        Ok(Read {
            record: stored.record,
            version: Some(stored.version.to_string()),
            local,
        })
    }

    async fn create(
        &mut self,
        record: &LeaderElectionRecord,
        deadline: &Deadline,
    ) -> Result<Written> {
        let stored = self
            .call(Op::Create(record.clone()), "create", deadline)
            .await?;
        let mut written = self.written(stored);
        written.recreated = false;
        Ok(written)
    }

    async fn update(
        &mut self,
        record: &LeaderElectionRecord,
        deadline: &Deadline,
    ) -> Result<Written> {
        let seen = self.net.borrow().procs[self.p]
            .cached
            .as_ref()
            .map(|s| (s.version, s.uid));
        let Some((version, uid)) = seen else {
            return Err(Error::NotInitialized {
                lock: "sim/lease".into(),
            });
        };
        let op = Op::Update(record.clone(), Some(version), Some(uid));
        let stored = self.call(op, "update", deadline).await?;
        Ok(self.written(stored))
    }

    async fn sleep(&mut self, d: Duration, wake: &Wakeup) -> Wake {
        let until = crate::clock::add_saturating(self.clock.now(), d);
        {
            let mut net = self.net.borrow_mut();
            let at = net.procs[self.p].clock.true_time_of(until);
            net.at(at, Due::Poll(self.p));
        }
        Sleep {
            clock: self.clock.clone(),
            until,
            wake: wake.clone(),
        }
        .await
    }

    async fn let_go(&mut self, term: &Term, grace: Duration, stop: &Wakeup) -> LetGo {
        let until = crate::clock::add_saturating(self.clock.now(), grace);
        {
            let mut net = self.net.borrow_mut();
            let at = net.procs[self.p].clock.true_time_of(until);
            net.at(at, Due::Poll(self.p));
        }
        WaitLetGo {
            clock: self.clock.clone(),
            until,
            term: term.share(),
            stop: stop.clone(),
        }
        .await
    }

    fn identity(&self) -> &str {
        &self.identity
    }

    fn record_event(&self, _message: &str) {}
}

/// A request in flight: ready when its answer is in, its deadline passed
/// or its stop fired.
struct Call {
    net: Rc<RefCell<Net>>,
    p: usize,
    call: u64,
    deadline: Deadline,
}

impl Future for Call {
    type Output = Option<Answer>;

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Answer>> {
        let mut net = self.net.borrow_mut();
        let pn = &mut net.procs[self.p];
        let answered = pn
            .pending
            .as_ref()
            .is_some_and(|c| c.call == self.call && c.answer.is_some());
        if answered || self.deadline.is_expired() {
            let pending = pn.pending.take();
            return Poll::Ready(pending.and_then(|c| c.answer).filter(|_| answered));
        }
        Poll::Pending
    }
}

/// The work lets go of its term (the world drops its `Term`), the grace
/// ends, or a stop comes.
struct WaitLetGo {
    clock: Arc<dyn Clock>,
    until: Instant,
    term: Term,
    stop: Wakeup,
}

impl Future for WaitLetGo {
    type Output = LetGo;

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<LetGo> {
        if self.term.holders() == 0 {
            return Poll::Ready(LetGo::Released);
        }
        if self.stop.is_stopped() {
            return Poll::Ready(LetGo::Stopped);
        }
        if self.clock.now() >= self.until {
            return Poll::Ready(LetGo::Held);
        }
        Poll::Pending
    }
}

struct Sleep {
    clock: Arc<dyn Clock>,
    until: Instant,
    wake: Wakeup,
}

impl Future for Sleep {
    type Output = Wake;

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Wake> {
        if let Some(w) = self.wake.take() {
            return Poll::Ready(w);
        }
        if self.clock.now() >= self.until {
            return Poll::Ready(Wake::Elapsed);
        }
        Poll::Pending
    }
}
