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

use super::net::{Answer, Done, Due, Net, Op, Stored, WriteTaken};
use super::plan::LockKind;
use crate::clock::{Clock, Wake, Wakeup};
use crate::deadline::Deadline;
use crate::elector::io::{Io, Read, Reader, Written};
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
    pub(super) lock: LockKind,
    /// The last read was answered without a request.
    pub(super) read_local: bool,
}

/// More calls than this in one poll, with nothing waited for, is a
/// process spinning: a livelock, reported with its seed.
const MAX_CALLS_PER_POLL: u32 = 10_000;

impl SimIo {
    /// Count a call of this poll; a process that spins is stopped with a
    /// panic (the world reports it as a violation, with the seed).
    fn count_call(&self) {
        let mut net = self.net.borrow_mut();
        let pn = &mut net.procs[self.p];
        pn.calls_this_poll += 1;
        let n = pn.calls_this_poll;
        assert!(
            n <= MAX_CALLS_PER_POLL,
            "livelock: p{} made {n} calls in one poll without waiting",
            self.p
        );
    }

    /// The version the elector is told: none for a lock without versions.
    fn version(&self, stored: &Stored) -> Option<String> {
        (self.lock != LockKind::Unversioned).then(|| stored.version.to_string())
    }

    /// A call completed at the world's now: `failed` (no usable answer),
    /// with the `Retry-After` it carried.
    fn done(&self, failed: bool, retry_after: Duration, update: bool) {
        let local = self.clock.now();
        let mut net = self.net.borrow_mut();
        let at = net.now;
        let pn = &mut net.procs[self.p];
        // Judged by the phase it was sent in: the elector's, not the
        // program's view (a receiver may end a stalled elector's term).
        let acquiring = pn.sent_acquiring && !pn.leading && !pn.stopping;
        let asked = pn.clock.true_time_of(local + retry_after);
        pn.seen.retry_until = pn.seen.retry_until.max(asked);
        pn.seen.last_done = Some(Done {
            at,
            local,
            failed,
            retry_after,
            acquiring,
            update,
        });
        pn.seen.sent_since_done = 0;
    }

    /// The process took an answer showing the Lease not its own.
    fn foreign(&self) {
        let mut net = self.net.borrow_mut();
        let now = net.now;
        let seen = &mut net.procs[self.p].seen;
        seen.seq += 1;
        let seq = seen.seq;
        seen.foreign.push((now, seq));
    }

    /// Pacing, at a send: after a failed request while acquiring, the
    /// next comes a retry period (and the `Retry-After`) later at least.
    fn paced(&self) {
        let now = self.clock.now();
        let mut net = self.net.borrow_mut();
        let retry = net.timing.retry;
        let pn = &net.procs[self.p];
        let Some(done) = pn.seen.last_done else {
            return;
        };
        if !done.failed || !done.acquiring || pn.leading || pn.stopping {
            return;
        }
        let least = retry.max(done.retry_after);
        let waited = now.saturating_duration_since(done.local);
        // The fallback of an optimistic update, in the same attempt.
        if done.update && waited.is_zero() {
            return;
        }
        if waited + Duration::from_nanos(1) < least {
            let p = self.p;
            net.pacing.push(format!(
                "p{p} sent a request {:.6}s after a failed one while acquiring (at least {:.6}s)",
                waited.as_secs_f64(),
                least.as_secs_f64()
            ));
        }
    }

    async fn call(&mut self, op: Op, action: &'static str, deadline: &Deadline) -> Result<Stored> {
        self.count_call();
        self.paced();
        let sent = self.clock.now();
        {
            let mut net = self.net.borrow_mut();
            let pn = &mut net.procs[self.p];
            pn.sent_acquiring = !pn.leading && !pn.stopping;
        }
        let write = matches!(op, Op::Create(_) | Op::Update(..));
        let update = matches!(op, Op::Update(..));
        let call = self.net.borrow_mut().send(self.p, op, deadline.instant());
        let answer = Call {
            net: self.net.clone(),
            p: self.p,
            call,
            deadline: deadline.clone(),
        }
        .await;
        let (failed, retry_after) = match &answer {
            Some(Answer::Lease(_)) => (false, Duration::ZERO),
            Some(Answer::Status {
                code, retry_after, ..
            }) => (![404, 409].contains(code), retry_after.unwrap_or_default()),
            _ => (true, Duration::ZERO),
        };
        self.done(failed, retry_after, update);
        if let (true, Some(Answer::Lease(stored))) = (write, &answer) {
            let taken = self.clock.now();
            let mut net = self.net.borrow_mut();
            let seen = &mut net.procs[self.p].seen;
            seen.seq += 1;
            let seq = seen.seq;
            seen.writes.push(WriteTaken {
                seq,
                sent,
                taken,
                record: stored.record.clone(),
                revision: stored.version,
                uid: stored.uid,
            });
        }
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
    fn written(&mut self, stored: Stored, created: bool) -> Written {
        let version = self.version(&stored);
        let recreated = {
            let mut net = self.net.borrow_mut();
            let pn = &mut net.procs[self.p];
            let recreated = !created && pn.cached.as_ref().is_some_and(|c| c.uid != stored.uid);
            let stored_version = stored.version;
            // As `LeaseLock`: a delivery at least as new as the write is
            // kept (the event of this very write may come before its answer).
            if pn
                .watched
                .as_ref()
                .is_none_or(|w| w.version < stored.version)
            {
                pn.watched = None;
            }
            pn.cached = Some(stored);
            pn.behind = false;
            pn.gone = false;
            // A deletion after the write (its answer late) stays.
            if pn.deleted.is_some_and(|d| d <= stored_version) {
                pn.deleted = None;
            }
            pn.held = stored_version;
            pn.uid = pn.cached.as_ref().map(|c| c.uid);
            recreated
        };
        if recreated {
            // An update that created a deleted Lease anew: a deletion seen.
            self.foreign();
        }
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
    async fn get(&mut self, deadline: &Deadline, reader: Reader) -> Result<Read> {
        self.count_call();
        let local = self
            .net
            .borrow_mut()
            .local_read(self.p, reader == Reader::Follower);
        self.read_local = local.is_some();
        let stored = match local {
            Some((found, how)) => {
                let p = self.p;
                let shown = super::net::show_store(&found);
                self.net
                    .borrow_mut()
                    .log(|| format!("p{p} reads what its watch {how}: {shown}"));
                self.done(false, Duration::ZERO, false);
                let Some(stored) = found else {
                    self.foreign();
                    return Err(Error::Api {
                        target: TARGET.into(),
                        action: "get",
                        status: ApiStatus::new(404, "NotFound", "gone, as the watch showed"),
                    });
                };
                stored
            }
            None => match self.call(Op::Get, "get", deadline).await {
                Ok(stored) => {
                    let mut net = self.net.borrow_mut();
                    net.read_from_server(self.p, Some(&stored));
                    let pn = &mut net.procs[self.p];
                    pn.behind = false;
                    pn.recreated = pn.cached.as_ref().is_some_and(|c| c.uid != stored.uid);
                    pn.cached = Some(stored.clone());
                    stored
                }
                Err(e) => {
                    if e.is_not_found() {
                        self.net.borrow_mut().read_from_server(self.p, None);
                        self.foreign();
                    }
                    return Err(e);
                }
            },
        };
        // Not its own: another holder, or times it never wrote (a writer
        // that changes only `leaseTransitions` leaves the record its own).
        let own = self
            .net
            .borrow()
            .written_by(self.p, &self.identity, &stored.record);
        if !own {
            self.foreign();
        }
        let mut net = self.net.borrow_mut();
        let pn = &mut net.procs[self.p];
        pn.reads += 1;
        if let Some(w) = stored.writer {
            let far = pn
                .read_from
                .iter_mut()
                .find(|(pw, pu, _)| (*pw, *pu) == (w, stored.uid));
            match far {
                Some(far) => far.2 = far.2.max(stored.version),
                None => pn.read_from.push((w, stored.uid, stored.version)),
            }
        }
        if !pn.sent.contains(&stored.record) {
            let t = stored.record.leader_transitions;
            pn.max_seen = Some(pn.max_seen.map_or(t, |m| m.max(t)));
        }
        let recreated = pn.recreated;
        drop(net);
        let version = self.version(&stored);
        Ok(Read {
            record: stored.record,
            version,
            recreated,
        })
    }

    async fn create(
        &mut self,
        record: &LeaderElectionRecord,
        deadline: &Deadline,
    ) -> Result<Written> {
        let stored = self
            .call(Op::Create(record.clone()), "create", deadline)
            .await
            .inspect_err(|e| {
                // As `LeaseLock`: the Lease exists (or the write got no
                // answer), and the next read asks the server.
                if e.is_already_exists() || e.is_transport() {
                    self.net.borrow_mut().procs[self.p].behind = true;
                }
            })?;
        Ok(self.written(stored, true))
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
        // `LeaseLock` sends the Lease it read, uid included: a Lease
        // deleted since is a 409. Without it, a deleted Lease is created.
        let uid = (self.lock != LockKind::NoUid).then_some(uid);
        let op = Op::Update(record.clone(), Some(version), uid);
        let stored = self.call(op, "update", deadline).await.inspect_err(|e| {
            // As `LeaseLock`: after a conflict (or no answer), the next
            // read asks the server (the watch may lag behind what it
            // conflicted with).
            if e.is_conflict() || e.is_transport() {
                self.net.borrow_mut().procs[self.p].behind = true;
            }
        })?;
        // As `LeaseLock`: an answer at the version written against is
        // not a write (the server wrote nothing: nobody saw a renew).
        if stored.version == version && stored.uid == uid.unwrap_or(stored.uid) {
            return Err(Error::WriteNotConfirmed {
                target: TARGET.into(),
                action: "update",
                detail: crate::error::NOTHING_WRITTEN.into(),
            });
        }
        Ok(self.written(stored, false))
    }

    fn delivered(&mut self) -> bool {
        let net = self.net.borrow();
        let pn = &net.procs[self.p];
        let seen = pn.cached.as_ref().map(|s| s.version);
        !pn.behind
            && (pn.deleted.is_some()
                || pn
                    .watched
                    .as_ref()
                    .is_some_and(|w| seen.is_none_or(|v| w.version >= v)))
    }

    fn last_read_sent(&self) -> bool {
        !self.read_local
    }

    async fn sleep(&mut self, d: Duration, wake: &Wakeup) -> Wake {
        self.count_call();
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
        self.count_call();
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
