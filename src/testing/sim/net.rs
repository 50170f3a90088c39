//! The simulated API server and network: one Lease with `resourceVersion`
//! semantics (etcd's revision: one counter for every write, across
//! deletions), requests that take time each way (or never arrive, or lose
//! their answer after the write applied), spurious 409s and 5xx, a watch
//! whose events come late, twice, out of order or not at all, and the
//! queue of everything that is due. It also keeps the world's own record
//! of what each process did and suffered (`Seen`), from which the checker
//! judges: the elector's reports about itself are never the judge.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::clock::{SimClock, TrueTime};
use super::plan::{Cut, Net as NetPlan, Rng, Timing, SIM_RETRY_AFTER_MAX};
use crate::lease::LeaderElectionRecord;

/// The Lease as the server stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stored {
    pub(super) record: LeaderElectionRecord,
    pub(super) version: u64,
    /// The process that wrote it; `None` for another writer.
    pub(super) writer: Option<usize>,
    /// Which creation of the Lease this is (its `uid`).
    pub(super) uid: u64,
}

#[derive(Debug, Clone)]
pub(super) enum Op {
    Get,
    Create(LeaderElectionRecord),
    /// Conditional on the version the lock last saw, and on its uid when
    /// it sends one (`LeaseLock` sends the Lease it read, uid included).
    Update(LeaderElectionRecord, Option<u64>, Option<u64>),
}

/// What the server answered.
#[derive(Debug, Clone)]
pub(super) enum Answer {
    Lease(Stored),
    Status {
        code: u16,
        reason: &'static str,
        retry_after: Option<Duration>,
    },
    /// Nothing listens: connection refused.
    Refused,
}

/// Something due at a true time.
#[derive(Debug)]
pub(super) enum Due {
    /// Look at process `p` again (a sleep or a deadline ends).
    Poll(usize),
    /// Request `call` of process `p` reaches the server.
    Arrive {
        p: usize,
        call: u64,
        op: Op,
        /// When it was sent (true time).
        sent: Duration,
    },
    /// Its answer reaches the process.
    Answer {
        p: usize,
        call: u64,
        answer: Answer,
        /// When the request was sent (true time).
        sent: Duration,
    },
    /// A watch event reaches process `p` (`None`: DELETED).
    /// A delivery: the Lease (none for a deletion, of the object with
    /// `uid`: none for one a proxy made up) at `revision`.
    Watch {
        p: usize,
        lease: Option<Stored>,
        revision: u64,
        uid: Option<u64>,
    },
    /// Fault `i` of the plan begins.
    Fault(usize),
    /// Fault `i` ends.
    Heal(usize),
    /// Candidate slot `c` starts a process.
    Start(usize),
    /// The faults are over: everything heals.
    Calm,
    /// A piece of work's next step (its index among the world's pieces).
    Work(usize),
    /// Process `p`'s `lease-elect` looks at its session again (the wake
    /// it asked for, of this generation).
    Session(usize, u64),
    /// Process `p`'s COMMAND exits (its supervisor reports it).
    CommandExit(usize),
    /// Process `p`'s supervisor looks at the term's end it holds.
    DeadMan(usize),
    /// Process `p`'s program reads its events (it reads late).
    Drain(usize),
    /// Process `p`'s `lease-elect` is sent SIGTERM a second time.
    Again(usize),
    /// The supervisor of process `p`'s COMMAND (piece of work) is killed.
    SupervisorKilled(usize, usize),
    /// The supervisor of process `p`'s COMMAND (piece of work) is stopped.
    SupervisorStopped(usize, usize),
}

struct Item {
    at: Duration,
    seq: u64,
    due: Due,
}

impl PartialEq for Item {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Item {
    /// Earliest first (the heap is a max-heap), then in the order queued.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// A write that revokes every term begun before it (at a lower
/// revision): another writer's free or change of holder, or a creation
/// after a deletion, which revokes only the terms its process never read.
#[derive(Debug, Clone)]
pub(super) struct Revocation {
    pub(super) revision: u64,
    pub(super) by: RevokedBy,
}

/// Who revoked the terms before a revision.
#[derive(Debug, Clone)]
pub(super) enum RevokedBy {
    /// Another writer, writing this holder ("" for a free).
    Writer(String),
    /// A process creating the Lease after a deletion: the terms it had
    /// read are not revoked.
    Creation { read: Vec<TermId> },
}

/// What a process read of another's records: the writer, the Lease's
/// creation (uid), and the highest revision read of the writer's records
/// on it. A term (begun at a revision) was read when a record of the
/// writer's at that revision or later was: its own records, or those of
/// a later term of the writer's, begun after it ended. (Not
/// `leaseTransitions`: pinned at its edge, it is the same for every term.)
pub(super) type TermId = (usize, u64, u64);

impl Revocation {
    /// Whether it revokes the term of process `p` begun at `revision` on
    /// the Lease's creation `uid`.
    pub(super) fn revokes(&self, p: usize, uid: u64, revision: u64) -> bool {
        self.revision > revision
            && match &self.by {
                RevokedBy::Writer(_) => true,
                RevokedBy::Creation { read } => !read
                    .iter()
                    .any(|&(w, u, r)| (w, u) == (p, uid) && r >= revision),
            }
    }
}

/// A call in flight, as its process sees it.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) call: u64,
    /// The request's deadline on the process's clock.
    pub(super) deadline: Instant,
    pub(super) answer: Option<Answer>,
}

/// One process's side of the network (what `LeaseLock` keeps).
#[derive(Debug)]
pub(super) struct ProcNet {
    pub(super) slot: usize,
    pub(super) clock: Arc<SimClock>,
    pub(super) alive: bool,
    pub(super) watch: bool,
    /// The Lease as last read or written, and its version.
    pub(super) cached: Option<Stored>,
    /// What the watch delivered since the last read or write.
    pub(super) watched: Option<Stored>,
    /// The watch delivered a deletion since the last read or write: its
    /// revision.
    pub(super) deleted: Option<u64>,
    /// The revision the lock's own answer stands at (as `LatestLease`'s
    /// held version): the stream's word answers for it only while it is
    /// the newest known.
    pub(super) held: u64,
    /// The newest revision a delivery showed (as `LatestLease`'s known
    /// version, with the cached one).
    pub(super) delivered: u64,
    /// The stream's word (as `LatestLease`'s reach): it has brought every
    /// change up to this revision, believed until then (true time).
    pub(super) reach: Option<(u64, Duration)>,
    /// The newest revision the stream missed (an event dropped, or sent
    /// while the watch was off or cut off): a stream that missed one has
    /// broken, and vouches again only from a later event (as a stream
    /// reopened from the version it had reached).
    pub(super) missed: u64,
    /// The last read found the Lease gone, and nothing since stored it.
    pub(super) gone: bool,
    /// The uid of the Lease as last read, written or delivered (as
    /// `LatestLease`'s): only its deletion is believed.
    pub(super) uid: Option<u64>,
    /// When a delivery the lock cannot answer from (a deletion of another
    /// object) last woke the elector (true time).
    pub(super) costly_at: Option<Duration>,
    /// An update met a conflict since the server last answered: the next
    /// read asks the server (as `LeaseLock`).
    pub(super) behind: bool,
    pub(super) pending: Option<Pending>,
    pub(super) calls: u64,
    /// The highest `leaseTransitions` this process has read in a record
    /// other than one it wrote (the checker's).
    pub(super) max_seen: Option<i32>,
    /// Reads answered with a Lease.
    pub(super) reads: u64,
    /// Every record this process sent in a write.
    pub(super) sent: Vec<LeaderElectionRecord>,
    /// Whose records it has read, and how far (see `TermId`).
    pub(super) read_from: Vec<TermId>,
    /// The world's record of this process (the checker's).
    pub(super) seen: Seen,
    /// Calls made in the current poll (a process that spins without
    /// waiting is a livelock).
    pub(super) calls_this_poll: u32,
    /// The world's view: it leads (between its `StartedLeading` and
    /// `StoppedLeading` as its program read them), it was told to stop.
    pub(super) leading: bool,
    pub(super) stopping: bool,
    /// The call in flight was sent while acquiring.
    pub(super) sent_acquiring: bool,
    /// Its last read found another Lease (uid) than the one it held.
    pub(super) recreated: bool,
    rng: Rng,
}

/// What the world saw of one process: the checker judges from this, not
/// from what the elector says of itself.
#[derive(Debug, Default)]
pub(super) struct Seen {
    /// Writes whose stored answer the process took, in order.
    pub(super) writes: Vec<WriteTaken>,
    /// How many of `writes` the world has looked at.
    pub(super) writes_judged: usize,
    /// When (true time) it took an answer showing the Lease not its own
    /// (another's record, or none), with its place among what it took.
    pub(super) foreign: Vec<(Duration, u64)>,
    /// How many of `foreign` the world has looked at.
    pub(super) foreign_judged: usize,
    /// What it took, counted: orders writes and foreign answers.
    pub(super) seq: u64,
    /// True-time intervals in which something hampered it: a request
    /// failed, was slow, lost its answer or was cut off; it was paused or
    /// its elector thread stalled.
    pub(super) impaired: Vec<(Duration, Duration)>,
    /// Its last call to complete.
    pub(super) last_done: Option<Done>,
    /// Until when (true time) the server asked it to wait (`Retry-After`).
    pub(super) retry_until: Duration,
    /// Requests sent since `last_done`.
    pub(super) sent_since_done: u32,
    /// Every request sent: when (true time).
    pub(super) sends: Vec<Duration>,
}

/// A call of a process that completed.
#[derive(Debug, Clone, Copy)]
pub(super) struct Done {
    /// When, in true time and on the process's clock.
    pub(super) at: Duration,
    pub(super) local: Instant,
    /// It got no usable answer (an error other than 404 and 409, or none).
    pub(super) failed: bool,
    /// The server's `Retry-After`, if it sent one.
    pub(super) retry_after: Duration,
    /// The process was acquiring (not leading, not stopping) then.
    pub(super) acquiring: bool,
    /// It was an update (an attempt's optimistic `PUT` falls back to a
    /// `GET` at once, as client-go's does).
    pub(super) update: bool,
}

/// A write the process sent and took the stored answer of.
#[derive(Debug, Clone)]
pub(super) struct WriteTaken {
    /// Its place among what the process took.
    pub(super) seq: u64,
    /// Sent and taken, on the process's clock.
    pub(super) sent: Instant,
    pub(super) taken: Instant,
    pub(super) record: LeaderElectionRecord,
    pub(super) revision: u64,
    /// The Lease's creation it landed on.
    pub(super) uid: u64,
}

/// One write the store took, as the checker needs it.
#[derive(Debug, Clone)]
pub(super) struct StoreWrite {
    pub(super) revision: u64,
    pub(super) at: Duration,
    /// The process that wrote it; `None` for another writer.
    pub(super) writer: Option<usize>,
    /// The holder it left (`None`: deleted).
    pub(super) holder: Option<String>,
    /// What was stored before.
    pub(super) before: Option<LeaderElectionRecord>,
}

/// Server, network, queue.
pub(super) struct Net {
    pub(super) time: Arc<TrueTime>,
    pub(super) now: Duration,
    queue: BinaryHeap<Item>,
    seq: u64,
    pub(super) store: Option<Stored>,
    pub(super) revision: u64,
    /// The uid of the Lease's current (or next) creation.
    uid: u64,
    pub(super) procs: Vec<ProcNet>,
    /// Per candidate slot: cut off, and how.
    pub(super) cut: Vec<Option<Cut>>,
    pub(super) watch_off: Vec<bool>,
    plan: NetPlan,
    pub(super) timing: Timing,
    /// The longest one-way latency of a quick request.
    quick: Duration,
    seed: u64,
    pub(super) trace: Option<Vec<String>>,
    /// The revision at which another writer last deleted the Lease or
    /// lowered its transitions.
    pub(super) lowered: Option<u64>,
    /// Another writer deleted the Lease.
    pub(super) deleted: bool,
    /// Writes that revoke the terms begun before them (see `check.rs`).
    pub(super) revocations: Vec<Revocation>,
    /// Every write the store took.
    pub(super) history: Vec<StoreWrite>,
    /// Pacing violations seen at a send, for the checker.
    pub(super) pacing: Vec<String>,
}

impl Net {
    pub(super) fn new(seed: u64, plan: NetPlan, timing: Timing, slots: usize) -> Net {
        Net {
            time: Arc::new(TrueTime::default()),
            now: Duration::ZERO,
            queue: BinaryHeap::new(),
            seq: 0,
            store: None,
            revision: 100,
            uid: 0,
            procs: Vec::new(),
            cut: vec![None; slots],
            watch_off: vec![false; slots],
            plan,
            timing,
            quick: Duration::from_millis(30),
            seed,
            trace: None,
            lowered: None,
            deleted: false,
            revocations: Vec::new(),
            history: Vec::new(),
            pacing: Vec::new(),
        }
    }

    pub(super) fn at(&mut self, at: Duration, due: Due) {
        self.seq += 1;
        self.queue.push(Item {
            at: at.max(self.now),
            seq: self.seq,
            due,
        });
    }

    pub(super) fn pop(&mut self, end: Duration) -> Option<Due> {
        if self.queue.peek()?.at > end {
            return None;
        }
        let item = self.queue.pop()?;
        self.now = item.at;
        self.time.set(item.at);
        Some(item.due)
    }

    pub(super) fn log(&mut self, line: impl FnOnce() -> String) {
        if let Some(trace) = &mut self.trace {
            trace.push(format!("{:>12.6}s  {}", self.now.as_secs_f64(), line()));
        }
    }

    /// The faults are over: no more slow answers, hangs, lost answers,
    /// injected errors or watch mishaps, and round trips well inside the
    /// time a renew has (`renew deadline - retry period`: with a deadline
    /// just above 1.2 retry periods, a renew slower than that loses the
    /// lease, by design).
    pub(super) fn calm(&mut self) {
        let slack = self.timing.renew.saturating_sub(self.timing.retry) / 8;
        self.quick = self.quick.min(slack).max(Duration::from_micros(300));
        self.cut.iter_mut().for_each(|c| *c = None);
        self.watch_off.iter_mut().for_each(|w| *w = false);
        self.plan = NetPlan {
            p_slow: 0.0,
            p_hang: 0.0,
            p_lost: 0.0,
            p_conflict: 0.0,
            p_5xx: 0.0,
            p_watch_drop: 0.0,
            p_watch_repeat: 0.0,
            p_watch_stale: 0.0,
            ..self.plan
        };
    }

    pub(super) fn add_proc(&mut self, slot: usize, clock: Arc<SimClock>, watch: bool) -> usize {
        let p = self.procs.len();
        self.procs.push(ProcNet {
            slot,
            clock,
            alive: true,
            watch,
            cached: None,
            watched: None,
            deleted: None,
            held: 0,
            delivered: 0,
            reach: None,
            missed: 0,
            gone: false,
            uid: None,
            costly_at: None,
            behind: false,
            pending: None,
            calls: 0,
            max_seen: None,
            reads: 0,
            sent: Vec::new(),
            read_from: Vec::new(),
            seen: Seen::default(),
            calls_this_poll: 0,
            leading: false,
            stopping: false,
            sent_acquiring: false,
            recreated: false,
            rng: Rng::new(self.seed, 1 + p as u64),
        });
        p
    }

    /// Something hampered process `p` from `from` to `to` (true time).
    pub(super) fn impair(&mut self, p: usize, from: Duration, to: Duration) {
        self.procs[p].seen.impaired.push((from, to.max(from)));
    }

    /// A round trip slower than this hampers a renew: a renew has
    /// `renew deadline − retry period` to come back in.
    pub(super) fn slow_round_trip(&self) -> Duration {
        self.timing.renew.saturating_sub(self.timing.retry) / 2
    }

    /// Whether `record` is one process `p` wrote (under `identity`, with
    /// times it sent), whoever stored it last.
    pub(super) fn written_by(
        &self,
        p: usize,
        identity: &str,
        record: &LeaderElectionRecord,
    ) -> bool {
        record.holder_identity == identity
            && self.procs[p]
                .sent
                .iter()
                .any(|r| r.renew_time == record.renew_time && r.acquire_time == record.acquire_time)
    }

    /// Whether process `p` wrote revision `revision` (another writer's
    /// rewrite of its record, even one that keeps its holder and times, is
    /// not its own: its next update conflicts).
    pub(super) fn wrote_revision(&self, p: usize, revision: u64) -> bool {
        self.history
            .iter()
            .rev()
            .find(|w| w.revision == revision)
            .is_some_and(|w| w.writer == Some(p))
    }

    /// Whether anyone but process `p` wrote (or deleted) the Lease after
    /// revision `after`.
    pub(super) fn others_wrote_since(&self, p: usize, after: u64) -> bool {
        self.history
            .iter()
            .any(|w| w.revision > after && w.writer != Some(p))
    }

    /// The answer a watch can give in place of a `GET`, as `LeaseLock`
    /// gives it: a delivered Lease or deletion, or, for a `follower`, what
    /// the lock holds while the stream vouches nothing changed since
    /// (`Some((None, _))`: gone), with how the watch told it.
    pub(super) fn local_read(
        &mut self,
        p: usize,
        follower: bool,
    ) -> Option<(Option<Stored>, &'static str)> {
        let now = self.now;
        let listening = self.listening(p);
        let pn = &mut self.procs[p];
        let watched = pn.watched.take();
        let deleted = pn.deleted.take();
        if pn.behind {
            return None;
        }
        let seen = pn.cached.as_ref().map(|s| s.version);
        if let Some(w) = watched {
            return match seen {
                Some(v) if w.version < v => None,
                Some(v) if w.version == v => {
                    pn.recreated = false;
                    pn.gone = false;
                    pn.cached.clone().map(|c| (Some(c), "delivered"))
                }
                _ => {
                    pn.recreated = pn.cached.as_ref().is_some_and(|c| c.uid != w.uid);
                    pn.gone = false;
                    pn.held = w.version;
                    pn.cached = Some(w.clone());
                    Some((Some(w), "delivered"))
                }
            };
        }
        if let Some(revision) = deleted {
            pn.gone = true;
            pn.held = revision;
            return Some((None, "delivered"));
        }
        let known = seen.unwrap_or(0).max(pn.delivered);
        let vouched = follower
            && listening
            && known > 0
            && pn.held == known
            && pn
                .reach
                .is_some_and(|(reached, until)| reached >= known && now < until);
        if !vouched {
            return None;
        }
        if pn.gone {
            return Some((None, "vouched unchanged"));
        }
        pn.recreated = false;
        pn.cached.clone().map(|c| (Some(c), "vouched unchanged"))
    }

    /// Whether process `p`'s watch can bring events now.
    fn listening(&self, p: usize) -> bool {
        let pn = &self.procs[p];
        pn.alive && pn.watch && !self.watch_off[pn.slot] && self.cut[pn.slot].is_none()
    }

    /// A read the server answered at `version`: a stream that had reached
    /// it is believed another window (as `LatestLease::known`).
    pub(super) fn read_from_server(&mut self, p: usize, found: Option<&Stored>) {
        let until = self.now + crate::watch::vouch_window(self.timing.retry);
        let pn = &mut self.procs[p];
        pn.gone = found.is_none();
        if let Some(stored) = found {
            pn.uid = Some(stored.uid);
        }
        // Gone: as of the newest revision known.
        let known = pn
            .cached
            .as_ref()
            .map_or(0, |c| c.version)
            .max(pn.delivered);
        pn.held = found.map_or(known, |s| s.version);
        let version = Some(pn.held);
        if let (Some(v), Some(reach)) = (version, pn.reach.as_mut()) {
            if v <= reach.0 {
                reach.1 = until;
            }
        }
    }

    /// Send `op` for process `p`, due back by `deadline` (its clock).
    pub(super) fn send(&mut self, p: usize, op: Op, deadline: Instant) -> u64 {
        let pn = &mut self.procs[p];
        if let Op::Create(r) | Op::Update(r, ..) = &op {
            pn.sent.push(r.clone());
        }
        pn.calls += 1;
        let call = pn.calls;
        let deadline_at = pn.clock.true_time_of(deadline);
        pn.pending = Some(Pending {
            call,
            deadline,
            answer: None,
        });
        let slot = pn.slot;
        let now = self.now;
        pn.seen.sends.push(now);
        pn.seen.sent_since_done += 1;
        let out = self.latency(p);
        // Known as slow from the moment it is sent.
        if out > self.slow_round_trip() / 2 || now + out >= deadline_at {
            self.impair(p, now, now + out);
        }
        match self.cut[slot] {
            Some(Cut::Refused) => {
                let back = self.now + Duration::from_millis(1);
                self.impair(p, now, back);
                self.at(
                    back,
                    Due::Answer {
                        p,
                        call,
                        answer: Answer::Refused,
                        sent: now,
                    },
                );
            }
            Some(Cut::Silent) => self.impair(p, now, deadline_at),
            None => {
                let at = self.now + out;
                let sent = self.now;
                self.at(at, Due::Arrive { p, call, op, sent });
            }
        }
        self.at(deadline_at, Due::Poll(p));
        call
    }

    /// One way's latency: mostly quick, sometimes near the per-request
    /// cap, sometimes past it.
    fn latency(&mut self, p: usize) -> Duration {
        let cap = self.timing.cap();
        let (p_slow, p_hang) = (self.plan.p_slow, self.plan.p_hang);
        let quick = self.quick;
        let rng = &mut self.procs[p].rng;
        if rng.chance(p_hang) {
            rng.between(cap, cap * 3)
        } else if rng.chance(p_slow) {
            rng.between(cap / 4, cap / 2 + cap / 8)
        } else {
            rng.between(Duration::from_micros(200), quick)
        }
    }

    /// The server takes request `op` of process `p` (it arrived now; it
    /// was sent at `sent`).
    pub(super) fn serve(&mut self, p: usize, call: u64, op: Op, sent: Duration) {
        let slot = self.procs[p].slot;
        let label = format!(
            "{} {call}",
            match op {
                Op::Get => "get",
                Op::Create(_) => "create",
                Op::Update(..) => "update",
            }
        );
        if self.cut[slot].is_some() {
            self.log(|| format!("p{p} {label} lost: cut off"));
            let now = self.now;
            self.impair(p, sent, now + self.timing.cap());
            return;
        }
        let plan = self.plan;
        let rng = &mut self.procs[p].rng;
        let injected = if rng.chance(plan.p_5xx) {
            Some(if rng.chance(0.5) {
                let after = rng.between(Duration::ZERO, SIM_RETRY_AFTER_MAX);
                Answer::Status {
                    code: 503,
                    reason: "ServiceUnavailable",
                    retry_after: Some(Duration::from_secs(after.as_secs())),
                }
            } else {
                Answer::Status {
                    code: 500,
                    reason: "InternalError",
                    retry_after: None,
                }
            })
        } else if matches!(op, Op::Update(..)) && rng.chance(plan.p_conflict) {
            Some(conflict())
        } else {
            None
        };
        let lost = rng.chance(plan.p_lost);
        let back = self.latency(p);
        let now = self.now;
        // Its answer comes too late for the request's own deadline.
        let late = self.procs[p].pending.as_ref().is_some_and(|c| {
            c.call == call && self.procs[p].clock.true_time_of(c.deadline) <= now + back
        });
        if injected.is_some() || lost || late || (now - sent) + back > self.slow_round_trip() / 2 {
            // A `Retry-After` hampers it for as long as it asks.
            let asked = match &injected {
                Some(Answer::Status { retry_after, .. }) => retry_after.unwrap_or_default(),
                _ => Duration::ZERO,
            };
            self.impair(p, sent, now + back + asked.mul_f64(1.5));
        }
        // An answer lost leaves the process waiting until the request's
        // own deadline: it hears nothing before that.
        if lost {
            if let Some(c) = self.procs[p].pending.as_ref().filter(|c| c.call == call) {
                let until = self.procs[p].clock.true_time_of(c.deadline);
                self.impair(p, sent, until);
            }
        }
        let answer = match injected {
            Some(a) => a,
            None => self.apply(p, op),
        };
        let show = describe(&answer);
        if lost {
            self.log(|| format!("p{p} {label}: {show}, answer lost"));
            return;
        }
        self.log(|| format!("p{p} {label}: {show}"));
        let at = self.now + back;
        self.at(
            at,
            Due::Answer {
                p,
                call,
                answer,
                sent,
            },
        );
    }

    fn apply(&mut self, p: usize, op: Op) -> Answer {
        match op {
            Op::Get => match &self.store {
                Some(s) => Answer::Lease(s.clone()),
                None => not_found(),
            },
            Op::Create(record) => {
                if self.store.is_some() {
                    return Answer::Status {
                        code: 409,
                        reason: "AlreadyExists",
                        retry_after: None,
                    };
                }
                self.create(p, record)
            }
            // The uid in the body is a precondition (kube-apiserver's
            // `defaultUpdatedObjectInfo`): an update of a Lease deleted
            // since, or deleted and created again, is a 409. Without one, a
            // missing Lease is created (Leases allow create-on-update).
            Op::Update(_, _, Some(uid)) if self.store.as_ref().map(|s| s.uid) != Some(uid) => {
                conflict()
            }
            Op::Update(record, _, None) if self.store.is_none() => self.create(p, record),
            Op::Update(record, version, _) => match &self.store {
                None => not_found(),
                Some(s) if Some(s.version) != version => conflict(),
                // As kube-apiserver's etcd3 store: an update that changes
                // nothing is not written, and answered with the stored
                // Lease at the version it had.
                Some(s) if s.record == record => Answer::Lease(s.clone()),
                Some(_) => {
                    self.store_record(Some(record), Some(p));
                    Answer::Lease(self.store.clone().unwrap_or_else(empty))
                }
            },
        }
    }

    /// Create the Lease anew (a new uid): after another writer deleted it,
    /// a creation revokes the terms its process never read.
    fn create(&mut self, p: usize, record: LeaderElectionRecord) -> Answer {
        if self.deleted {
            self.revocations.push(Revocation {
                revision: self.revision + 1,
                by: RevokedBy::Creation {
                    read: self.procs[p].read_from.clone(),
                },
            });
        }
        self.uid += 1;
        self.store_record(Some(record), Some(p));
        Answer::Lease(self.store.clone().unwrap_or_else(empty))
    }

    /// Store `record` (or delete the Lease) under a new revision, and
    /// tell the watches.
    pub(super) fn store_record(
        &mut self,
        record: Option<LeaderElectionRecord>,
        writer: Option<usize>,
    ) {
        self.revision += 1;
        let version = self.revision;
        let uid = self.uid;
        let before = self.store.as_ref().map(|s| s.record.clone());
        self.history.push(StoreWrite {
            revision: version,
            at: self.now,
            writer,
            holder: record.as_ref().map(|r| r.holder_identity.clone()),
            before,
        });
        self.store = record.map(|record| Stored {
            record,
            version,
            writer,
            uid,
        });
        let shown = show_store(&self.store);
        let by = writer.map_or_else(|| "another writer".to_string(), |p| format!("p{p}"));
        self.log(|| format!("store <- {by}: {shown}"));
        let lease = self.store.clone();
        let before = self.history.last().and_then(|w| w.before.clone());
        let was = self
            .history
            .len()
            .checked_sub(2)
            .map_or(0, |i| self.history[i].revision);
        let uid_before = uid;
        for p in 0..self.procs.len() {
            if !self.listening(p) {
                self.missed(p, version);
                continue;
            }
            let (max, p_drop, p_repeat, p_stale) = (
                self.plan.watch_max_delay,
                self.plan.p_watch_drop,
                self.plan.p_watch_repeat,
                self.plan.p_watch_stale,
            );
            let rng = &mut self.procs[p].rng;
            if rng.chance(p_drop) {
                self.missed(p, version);
                continue;
            }
            let mut times = vec![rng.between(Duration::ZERO, max)];
            if rng.chance(p_repeat) {
                times.push(rng.between(Duration::ZERO, max * 2));
            }
            // A replay: the Lease as it was before this write, or a
            // deletion it never had, at the old revision.
            let stale = rng.chance(p_stale).then(|| {
                let old = before
                    .clone()
                    .filter(|_| rng.chance(0.5))
                    .map(|record| Stored {
                        record,
                        version: was,
                        writer: None,
                        uid: uid_before,
                    });
                (rng.between(Duration::ZERO, max * 2), old)
            });
            for delay in times {
                let at = self.now + delay;
                self.at(
                    at,
                    Due::Watch {
                        p,
                        lease: lease.clone(),
                        revision: version,
                        uid: Some(uid),
                    },
                );
            }
            if let Some((delay, old)) = stale {
                let at = self.now + delay;
                // A deletion it never had: a proxy's invention, no uid.
                self.at(
                    at,
                    Due::Watch {
                        p,
                        lease: old,
                        revision: was,
                        uid: None,
                    },
                );
            }
        }
    }

    /// A watch event reaches process `p`: it replaces what was delivered
    /// before, as `LatestLease` does (a late, older one too: the lock's
    /// read then finds it stale and asks the server). False when the
    /// process does not watch now.
    pub(super) fn deliver(
        &mut self,
        p: usize,
        lease: Option<Stored>,
        revision: u64,
        uid: Option<u64>,
    ) -> bool {
        let now = self.now;
        let retry = self.timing.retry;
        let until = now + crate::watch::vouch_window(retry);
        if !self.listening(p) {
            self.missed(p, revision);
            return false;
        }
        let pn = &mut self.procs[p];
        // As `Watcher` and `LatestLease`: only news wakes the elector (a
        // revision newer than the lock or an earlier delivery has shown),
        // and one it cannot answer from (the deletion of another object
        // than the one it knows), which costs a read, at most once a
        // retry period.
        let known = pn
            .cached
            .as_ref()
            .map_or(0, |c| c.version)
            .max(pn.delivered);
        if revision <= known {
            return false;
        }
        let costly = lease.is_none() && (uid.is_none() || uid != pn.uid);
        if costly {
            pn.reach = None;
            if pn
                .costly_at
                .is_some_and(|at| now.saturating_sub(at) < retry)
            {
                // Not woken; but what the lock holds is no longer the
                // newest known.
                pn.delivered = revision;
                return false;
            }
            pn.costly_at = Some(now);
        }
        pn.delivered = revision;
        pn.deleted = (!costly && lease.is_none()).then_some(revision);
        if let Some(l) = &lease {
            pn.uid = Some(l.uid);
        }
        pn.watched = lease;
        // A sign of life: the stream has come this far, unless it missed
        // a later change (it broke, and vouches only from a later event).
        if !costly && revision > pn.missed {
            let reached = pn.reach.map_or(revision, |(r, _)| r.max(revision));
            pn.reach = Some((reached, until));
        }
        true
    }

    /// Process `p`'s stream missed the change at `revision`: it broke.
    fn missed(&mut self, p: usize, revision: u64) {
        let pn = &mut self.procs[p];
        pn.missed = pn.missed.max(revision);
        pn.reach = None;
    }
}

fn empty() -> Stored {
    Stored {
        record: LeaderElectionRecord::default(),
        version: 0,
        writer: None,
        uid: 0,
    }
}

fn not_found() -> Answer {
    Answer::Status {
        code: 404,
        reason: "NotFound",
        retry_after: None,
    }
}

fn conflict() -> Answer {
    Answer::Status {
        code: 409,
        reason: "Conflict",
        retry_after: None,
    }
}

pub(super) fn show_store(s: &Option<Stored>) -> String {
    match s {
        None => "no Lease".into(),
        Some(s) => format!("rv {} {}", s.version, show_record(&s.record)),
    }
}

pub(super) fn show_record(r: &LeaderElectionRecord) -> String {
    let holder = if r.holder_identity.is_empty() {
        "(free)"
    } else {
        &r.holder_identity
    };
    let renew = r.renew_time.map_or_else(|| "-".into(), |t| t.to_string());
    format!(
        "holder {holder} transitions {} duration {}s renewTime {renew}",
        r.leader_transitions, r.lease_duration_seconds
    )
}

fn describe(a: &Answer) -> String {
    match a {
        Answer::Lease(s) => format!("200 {}", show_store(&Some(s.clone()))),
        Answer::Status {
            code,
            reason,
            retry_after,
        } => match retry_after {
            Some(d) => format!("{code} {reason} Retry-After {}", d.as_secs()),
            None => format!("{code} {reason}"),
        },
        Answer::Refused => "connection refused".into(),
    }
}
