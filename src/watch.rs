//! A Lease watch that wakes a waiting candidate as soon as the Lease changes.
//!
//! Kubernetes streams watch events as JSON lines over one long HTTP
//! response. The stream rides on the client's request building, TLS and
//! credentials ([`Client::open_stream`]) over a connection pool of its own,
//! on a thread of its own; stopping closes that pool, which ends a blocked
//! read at once, and the thread is joined. A change only makes the next
//! attempt earlier (or ends a term the leader sees taken): the expiry rule
//! and the renew path still decide, so a watch that is down, late or cut
//! costs time, never safety. While it is down the elector polls, as it
//! does without a watch.
//!
//! What the stream costs, and its bounds:
//! - one thread and one connection per watching elector;
//! - reconnects: the server ends each stream after `timeoutSeconds`, drawn
//!   in [5, 10) min as client-go's reflectors draw it (6 to 12 an hour);
//!   bookmarks (asked for) keep a quiet stream alive; a stream silent for
//!   90 s (longer than kube-apiserver's minute between bookmarks), whatever
//!   the Lease holds, is presumed dead (a peer gone without a FIN) and
//!   reopened: a Lease nobody renews (its holder crashed) is no reason to
//!   reopen a healthy stream. Before its first event the bound is 3 retry
//!   periods for bytes that are not events and for the response head; a
//!   stream that sends nothing at all is given up at 90 s (a Lease that
//!   does not exist yet sends nothing). Silence counts events, not
//!   bytes: blank lines, the same bookmark again (only one that moves the
//!   version on counts) or a trickle keep nothing alive, and a response
//!   head must be whole within the same bound. While a stream is past its
//!   bound the status says polling, and a stream after one that brought
//!   nothing says watching only from its first event;
//! - a follower reads no more than the stream tells: while the stream
//!   vouches that it has brought every change up to the newest version the
//!   lock knows (a sign of life, or a read that showed it caught up, in
//!   the last 30 s or 3 retry periods), a follower's read is answered from
//!   what the lock holds, a deletion the watch brought included. A read
//!   for a term, or while the work of one runs, still asks the server
//!   unless a change was delivered; a stream that died without a sign is
//!   believed at most that window;
//! - a delivery wakes the elector only when it is news: our Lease (not
//!   another, as a proxy that drops the field selector sends), at a version
//!   newer than the lock has read or written; one the lock cannot answer
//!   from (an object it cannot decode) wakes it at most once per retry
//!   period, as it costs a `GET`;
//! - it resumes from the last `resourceVersion` seen, and starts afresh
//!   (the Lease as it is now, then its changes) after a 410;
//! - failed reopens back off from 100 ms, doubling up to the retry period;
//!   and whatever the server or the network does, at most
//!   [`OPEN_BUDGET`] watch requests in [`OPEN_WINDOW`];
//! - a server that refuses the watch (403, 404, 405: RBAC without `watch`
//!   on leases, or a proxy that does not pass it) is asked again only
//!   every [`REFUSED_RETRY`], and polling goes on as if the watch were off.
//!
//! Falling back to polling (refused, or cut more often than the budget
//! allows) is logged once at warn with what to fix, and shows in
//! [`ElectorStatus::watch`](crate::ElectorStatus::watch) and `/metrics`
//! (`lease_elector_watching`).

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::client::{lease_path, lease_target, segment, Client, Patience, Target, MAX_BODY};
use crate::clock::{Wake, Wakeup};
use crate::error::{Error, Result};
use crate::lease::{newer, Lease};
use crate::status::WatchMode;
use crate::text::Escaped;

/// The server-side cap on one watch request (`timeoutSeconds`) is drawn
/// from `[WATCH_TIMEOUT_SECS, 2 × WATCH_TIMEOUT_SECS)` for each request,
/// as client-go's reflector draws it, so a fleet does not reconnect in step.
const WATCH_TIMEOUT_SECS: u64 = 300;
const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// A stream that stayed open this long was healthy: reconnect quickly.
const HEALTHY_STREAM: Duration = Duration::from_secs(1);
/// A stream that has not yet brought an event is presumed dead (a peer
/// that vanished without a FIN, a load balancer that dropped the flow, a
/// proxy that sends bytes but no events) after this many retry periods,
/// and reopened.
const SILENT_PERIODS: u32 = 3;
const MIN_SILENCE: Duration = Duration::from_secs(1);
/// A stream that has brought events is presumed dead after this long
/// without one (or [`SILENT_PERIODS`] retry periods, if longer): longer
/// than the minute between kube-apiserver's bookmarks, whatever the Lease
/// holds, so that a Lease nobody renews (its holder gone) is no reason to
/// reopen a healthy stream.
const QUIET_SILENCE: Duration = Duration::from_secs(90);
/// How long a stream's word that nothing changed stands after its last
/// sign of life, or after a read that showed it caught up (or
/// [`SILENT_PERIODS`] retry periods, if longer): a follower whose stream
/// died without a sign reads the server at least this often.
const VOUCH_WINDOW: Duration = Duration::from_secs(30);
/// Failed reopens in a row (no answer, an error status, a stream that
/// lived less than [`HEALTHY_STREAM`]) after which the status says polling.
const FAILURES_BEFORE_POLLING: u32 = 3;
/// At most this many watch requests in [`OPEN_WINDOW`], whatever happens:
/// a healthy watch needs one every 5 to 10 min.
pub(crate) const OPEN_BUDGET: usize = 10;
/// See [`OPEN_BUDGET`].
pub(crate) const OPEN_WINDOW: Duration = Duration::from_secs(600);
/// How long after a refusal (403, 404, 405) the watch is asked for again,
/// so that a Role fixed later is picked up without a restart.
pub(crate) const REFUSED_RETRY: Duration = Duration::from_secs(600);

/// The newest Lease a watch delivered and nobody has read yet; shared
/// between a [`Watcher`] and the lock that will use it instead of a `GET`.
#[derive(Debug, Clone, Default)]
pub(crate) struct LatestLease {
    slot: Arc<Mutex<Slot>>,
}

#[derive(Debug, Default)]
struct Slot {
    lease: Option<Lease>,
    /// A deletion was delivered and nobody has read since: its version.
    deleted: Option<String>,
    /// The newest version the lock or a delivery has shown: a delivery no
    /// newer says nothing new.
    known: Option<String>,
    /// The version the lock's own answer stands at (the Lease it holds,
    /// or its deletion): the stream's word answers for it only while it
    /// is the newest known.
    held: Option<String>,
    /// The open stream's word: it has brought every change up to this
    /// version, and is taken at its word until then (see [`Reach`]).
    reach: Option<Reach>,
    /// The uid of the Lease as last read, written or delivered: a
    /// deletion of that object is believed; any other (a proxy's
    /// invention without a uid, an old one replayed) is only a reason to
    /// ask the server.
    uid: Option<String>,
}

/// How far an open stream has brought the Lease's changes, and until
/// when its word stands: a sign of life (an event, a bookmark that moves
/// the version on, the stream opened from a version) or a read that shows
/// the stream caught up stands for [`VOUCH_WINDOW`] (or 3 retry periods,
/// if longer). A stream that dies without a sign (a peer gone without a
/// FIN) is so believed at most that long, and a follower reads the server
/// at least that often.
#[derive(Debug, Clone, Copy)]
struct Reach {
    version: u64,
    until: Instant,
    window: Duration,
}

/// What the lock may answer a read with, without a request
/// ([`LatestLease::answer`]).
#[derive(Debug)]
pub(crate) enum Answer {
    /// The Lease as the watch delivered it.
    Lease(Box<Lease>),
    /// The watch delivered its deletion.
    Deleted,
    /// Nothing changed since the lock last read or wrote: the stream
    /// vouches for it.
    Unchanged,
}

impl LatestLease {
    /// An empty slot.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Take the delivered Lease, if any.
    #[cfg(test)]
    pub(crate) fn take(&self) -> Option<Lease> {
        self.lock().lease.take()
    }

    /// What a read may be answered with instead of a request: a delivered
    /// Lease or deletion (taken), else, for a `follower` (whose reads end
    /// no term and start no work's end), `Unchanged` while an open stream
    /// vouches that it has brought every change up to the newest version
    /// the lock knows. Versions that are not numbers are never vouched
    /// for: nothing says how far a stream has come.
    pub(crate) fn answer(&self, follower: bool, now: Instant) -> Option<Answer> {
        let mut slot = self.lock();
        if let Some(lease) = slot.lease.take() {
            return Some(Answer::Lease(Box::new(lease)));
        }
        if let Some(version) = slot.deleted.take() {
            slot.held = Some(version);
            return Some(Answer::Deleted);
        }
        let known = slot.known.as_deref().and_then(revision)?;
        let vouched = slot.held.as_deref().and_then(revision) == Some(known)
            && slot
                .reach
                .is_some_and(|r| r.version >= known && now < r.until);
        (follower && vouched).then_some(Answer::Unchanged)
    }

    /// The lock's answer now stands at `version`: the Lease it holds (read
    /// or written), or, for `None`, the deletion it learned of from the
    /// server (as of the newest version known: a change after it is newer).
    /// A read the stream had already reached is taken at its word for
    /// another window from `now` (the stream is caught up).
    pub(crate) fn lock_holds(&self, version: Option<&str>, now: Instant) {
        let mut slot = self.lock();
        let held = match version {
            Some(v) => Some(v.to_string()),
            None => slot.known.clone(),
        };
        let read = held.as_deref().and_then(revision);
        if let (Some(read), Some(reach)) = (read, slot.reach.as_mut()) {
            if read <= reach.version {
                reach.until = crate::clock::add_saturating(now, reach.window);
            }
        }
        slot.held = held;
    }

    /// Whether a read now would be answered by a delivery (a Lease or a
    /// deletion) at least as new as `seen`.
    pub(crate) fn holds(&self, seen: Option<&str>) -> bool {
        let slot = self.lock();
        let delivered = slot
            .lease
            .as_ref()
            .map(|l| l.metadata.resource_version.as_deref());
        match delivered {
            Some(w) => w == seen || newer(w, seen),
            None => slot.deleted.is_some(),
        }
    }

    /// The lock read or wrote `version`: deliveries no newer are not news.
    pub(crate) fn known(&self, version: Option<&str>) {
        let mut slot = self.lock();
        if let Some(v) = version.filter(|v| newer(Some(v), slot.known.as_deref())) {
            slot.known = Some(v.to_string());
        }
    }

    /// The open stream showed a sign of life at `version` at `now` (its
    /// word now stands for `window`).
    fn reached(&self, version: Option<&str>, window: Duration, now: Instant) {
        let mut slot = self.lock();
        let until = crate::clock::add_saturating(now, window);
        slot.reach = match (version.and_then(revision), slot.reach) {
            (Some(v), Some(r)) => Some(Reach {
                version: v.max(r.version),
                until,
                window,
            }),
            (Some(v), None) => Some(Reach {
                version: v,
                until,
                window,
            }),
            // Opaque versions: nothing says how far the stream has come.
            (None, _) => None,
        };
    }

    /// The stream's word stands no more: it ended, or brought a change
    /// the lock cannot read from it.
    fn unreached(&self) {
        self.lock().reach = None;
    }

    /// Whether a delivery at `version` is older than what the lock or an
    /// earlier delivery has shown (or has no version).
    pub(crate) fn is_stale(&self, version: Option<&str>) -> bool {
        let slot = self.lock();
        !newer(version, slot.known.as_deref())
            && (version.is_none() || version != slot.known.as_deref())
    }

    /// A delivery of the Lease at `version` (`lease` none for a deletion):
    /// kept, and news (wake the elector), only when `version` is newer than
    /// any the lock or an earlier delivery has shown. One at the version
    /// known is the change the lock already has (its own write, answered
    /// first); an older one is stale.
    pub(crate) fn offer(&self, lease: Option<Lease>, version: Option<&str>) -> Delivery {
        let mut slot = self.lock();
        if !newer(version, slot.known.as_deref()) {
            return if version.is_some() && version == slot.known.as_deref() {
                Delivery::Known
            } else {
                Delivery::Stale
            };
        }
        slot.known = version.map(str::to_string);
        slot.deleted = None;
        if let Some(l) = &lease {
            slot.uid.clone_from(&l.metadata.uid);
        }
        slot.lease = lease;
        Delivery::News
    }

    /// A deletion delivered at `version`: as [`offer`](Self::offer), and
    /// kept as such, so that the read it wakes is answered without a
    /// request.
    pub(crate) fn offer_deletion(&self, version: Option<&str>) -> Delivery {
        let delivery = self.offer(None, version);
        if delivery == Delivery::News {
            self.lock().deleted = version.map(str::to_string);
        }
        delivery
    }

    /// Whether a deletion of the object with `uid` is one of the Lease as
    /// last read, written or delivered.
    fn is_ours(&self, uid: Option<&str>) -> bool {
        uid.is_some() && self.lock().uid.as_deref() == uid
    }

    /// The lock read or wrote the object with `uid`.
    pub(crate) fn object_is(&self, uid: Option<&str>) {
        self.lock().uid = uid.map(str::to_string);
    }

    /// After our write stored version `written`: forget a delivered Lease
    /// older than it (stale). One at least as new is kept: the event of
    /// this very write, which may arrive before its answer (then the read
    /// it wakes is answered locally, not by a `GET`), or a later write of
    /// someone else's. Versions that are not numbers cannot be ordered:
    /// then forget whatever was delivered.
    pub(crate) fn forget_older_than(&self, written: Option<&str>) {
        self.known(written);
        let mut slot = self.lock();
        // A deletion delivered before the write is over (one after it is
        // not).
        if slot
            .deleted
            .as_deref()
            .is_some_and(|d| !newer(Some(d), written))
        {
            slot.deleted = None;
        }
        let slot = &mut slot.lease;
        let version = |v: Option<&str>| v.and_then(|v| v.parse::<u64>().ok());
        let keep = slot.as_ref().is_some_and(|l| {
            match (
                version(l.metadata.resource_version.as_deref()),
                version(written),
            ) {
                (Some(delivered), Some(written)) => delivered >= written,
                _ => false,
            }
        });
        if !keep {
            *slot = None;
        }
    }

    /// Put `lease` in the slot (what the watch delivered), news or not.
    #[cfg(test)]
    pub(crate) fn set(&self, lease: Option<Lease>) {
        self.lock().lease = lease;
    }
}

/// What a delivery is to the lock (see [`LatestLease::offer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// Newer than anything seen: kept, and the elector woken.
    News,
    /// The version the lock already has: a change, but not news.
    Known,
    /// Older: nothing.
    Stale,
}

/// What a watch tells the elector's status: its mode, and how many
/// changes it delivered. Shared by the [`Watcher`] and the elector's
/// [`Probe`](crate::Probe)s.
#[derive(Debug)]
pub(crate) struct WatchState {
    mode: Mutex<WatchMode>,
    /// While the stream is open: until when it may go without an event
    /// (the silence bound from the last one), and that bound. Past it the
    /// stream is blind, whatever bytes it sends, and the status says so.
    alive: Mutex<Option<(Instant, Duration)>>,
    changes: AtomicU64,
}

impl WatchState {
    fn new() -> Self {
        WatchState {
            mode: Mutex::new(WatchMode::Starting),
            alive: Mutex::new(None),
            changes: AtomicU64::new(0),
        }
    }

    /// The mode now: "watching" only while events can arrive (an open
    /// stream within its silence bound).
    pub(crate) fn mode(&self) -> WatchMode {
        let mode = self
            .mode
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        match (&mode, self.blind_since()) {
            (WatchMode::Watching, Some(silence)) => WatchMode::Polling(blind(silence)),
            _ => mode,
        }
    }

    /// The open stream brought no event within its silence bound: that
    /// bound.
    fn blind_since(&self) -> Option<Duration> {
        let alive = *self.alive.lock().unwrap_or_else(PoisonError::into_inner);
        alive.and_then(|(until, silence)| (Instant::now() >= until).then_some(silence))
    }

    /// An event (or the stream's opening) at `now`: events may be awaited
    /// for `silence` more; `None` once the stream has ended.
    fn alive_for(&self, silence: Option<Duration>) {
        *self.alive.lock().unwrap_or_else(PoisonError::into_inner) =
            silence.map(|d| (crate::clock::add_saturating(Instant::now(), d), d));
    }

    /// Set the mode; the one it replaces.
    fn set_mode(&self, mode: WatchMode) -> WatchMode {
        std::mem::replace(
            &mut *self.mode.lock().unwrap_or_else(PoisonError::into_inner),
            mode,
        )
    }

    /// How many Lease changes the watch has reported.
    pub(crate) fn changes(&self) -> u64 {
        self.changes.load(Ordering::Relaxed)
    }
}

/// Why a stream that sends bytes but no events is not watching.
fn blind(silence: Duration) -> String {
    format!(
        "the watch stream brought no event in {}: presumed blind, reopening it; polling meanwhile",
        humantime::format_duration(silence)
    )
}

struct WatchShared {
    stop: Wakeup,
    /// The stream's own connection pool: closed on stop.
    pool: Mutex<Option<ureq::Agent>>,
    state: Arc<WatchState>,
}

impl std::fmt::Debug for WatchShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchShared")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// A running Lease watch; stops and joins its thread when dropped. Opaque:
/// only the crate's locks start one (see [`crate::Lock::watch`]).
#[derive(Debug)]
pub struct Watcher {
    shared: Arc<WatchShared>,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    /// Watch Lease `namespace/name`: store each delivered object in
    /// `latest`, then poke `on_change`. `retry_period` is the elector's:
    /// failed reopens back off up to it, and a held Lease is expected to
    /// change at least every 3 of them.
    pub(crate) fn spawn(
        client: Client,
        namespace: &str,
        name: &str,
        latest: LatestLease,
        on_change: Wakeup,
        retry_period: Duration,
    ) -> Result<Watcher> {
        let shared = Arc::new(WatchShared {
            stop: Wakeup::new(),
            pool: Mutex::new(Some(client.stream_pool())),
            state: Arc::new(WatchState::new()),
        });
        let stream = WatchStream {
            client,
            namespace: namespace.to_string(),
            name: name.to_string(),
            shared: shared.clone(),
            latest,
            on_change,
            resource_version: None,
            refresh_token: false,
            retry_period,
            heard_ever: false,
            heard: false,
            unproven: false,
            ended_well: false,
            costly_poke: None,
            warned_refused: false,
            warned_cut: false,
            jitter: crate::random::SplitMix64::new(crate::random::seed()),
        };
        let thread = thread::Builder::new()
            .name(crate::names::thread_name(&["lease-watch", namespace, name]))
            .spawn(move || stream.run())
            .map_err(Error::Spawn)?;
        Ok(Watcher {
            shared,
            thread: Some(thread),
        })
    }

    /// How many Lease changes the watch has reported.
    pub(crate) fn changes(&self) -> u64 {
        self.shared.state.changes()
    }

    /// Its mode and counters, for the elector's status.
    pub(crate) fn state(&self) -> Arc<WatchState> {
        self.shared.state.clone()
    }

    fn stop_and_join(&mut self) {
        self.signal_stop();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                log::error!("lease watch thread panicked");
            }
        }
    }

    /// Tell the watch thread to end (without waiting for it): closing the
    /// stream's pool ends a read blocked in it.
    pub(crate) fn signal_stop(&self) {
        self.shared.stop.stop();
        let pool = self
            .shared
            .pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(pool) = pool {
            pool.shutdown();
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

struct WatchStream {
    client: Client,
    namespace: String,
    name: String,
    shared: Arc<WatchShared>,
    latest: LatestLease,
    on_change: Wakeup,
    resource_version: Option<String>,
    refresh_token: bool,
    retry_period: Duration,
    /// A stream of this watch has brought an event: the silence bound is
    /// then [`QUIET_SILENCE`].
    heard_ever: bool,
    /// The stream open now brought an event (one that counts: see
    /// `handle_event`).
    heard: bool,
    /// The last stream was presumed blind before it brought any event:
    /// the next one is "watching" only from its first event.
    unproven: bool,
    /// The last stream was ended by the server (its time-out), with no
    /// error: a stream reopened from its version is taken at its word.
    ended_well: bool,
    /// When a delivery the lock cannot answer from last woke the elector.
    costly_poke: Option<Instant>,
    /// Each kind of fallback is logged at warn once.
    warned_refused: bool,
    warned_cut: bool,
    jitter: crate::random::SplitMix64,
}

/// How one watch request ended.
enum Ended {
    /// The stream was open (200) and ended: the server's time-out, a
    /// close, silence, an error mid-stream or a 410 event.
    Stream { expired: bool, why: Option<String> },
    /// 403, 404 or 405: this server will not watch Leases for us.
    Refused(u16),
    /// No stream: no answer, or another error status.
    Failed(String),
}

/// One event line: `{"type":"MODIFIED","object":{...}}`.
#[derive(serde::Deserialize)]
struct WatchEvent {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    object: serde_json::Value,
}

impl WatchStream {
    /// Watch until stopped; see the module docs for the reconnect rules.
    fn run(mut self) {
        let target = format!("lease {}/{}", self.namespace, self.name);
        let max_backoff = self.retry_period.max(MIN_BACKOFF);
        let mut delay = MIN_BACKOFF;
        let mut failures = 0u32;
        let mut opens: VecDeque<Instant> = VecDeque::new();
        while !self.shared.stop.is_stopped() {
            let now = Instant::now();
            while opens
                .front()
                .is_some_and(|t| now.saturating_duration_since(*t) >= OPEN_WINDOW)
            {
                opens.pop_front();
            }
            if opens.len() >= OPEN_BUDGET {
                let until = opens.front().map_or(now, |t| *t + OPEN_WINDOW);
                self.fall_back_cut(opens.len());
                let wait = until.saturating_duration_since(now);
                if self.shared.stop.wait_timeout(wait) == Wake::Stopped {
                    break;
                }
                continue;
            }
            opens.push_back(now);
            let ended = self.watch_once();
            if self.shared.stop.is_stopped() {
                break;
            }
            let lived = now.elapsed();
            // Names, Status messages and error bodies are the server's text.
            let failed = match ended {
                Ended::Refused(code) => {
                    self.fall_back_refused(code);
                    failures = 0;
                    delay = MIN_BACKOFF;
                    if self.shared.stop.wait_timeout(REFUSED_RETRY) == Wake::Stopped {
                        break;
                    }
                    continue;
                }
                // Start afresh at once, from the Lease as it is now: the
                // version we resumed from has left the server's window (a
                // relist). Without a version to resume from, a 410 is the
                // server's fault and backs off like any failure.
                Ended::Stream { expired: true, .. } => {
                    log::debug!(
                        "watch on {}: resourceVersion too old (410); starting afresh",
                        Escaped(&target)
                    );
                    failures = 0;
                    delay = MIN_BACKOFF;
                    continue;
                }
                Ended::Stream { why, .. } => {
                    log::debug!(
                        "watch on {} ended{}",
                        Escaped(&target),
                        why.map(|w| format!(": {}", Escaped(&w)))
                            .unwrap_or_default()
                    );
                    lived < HEALTHY_STREAM
                }
                Ended::Failed(why) => {
                    log::debug!("watch on {}: {}", Escaped(&target), Escaped(&why));
                    if failures + 1 >= FAILURES_BEFORE_POLLING {
                        self.set_mode(WatchMode::Polling(format!(
                            "the watch fails ({}); polling meanwhile",
                            crate::text::escape(&why)
                        )));
                    }
                    true
                }
            };
            if failed {
                failures = failures.saturating_add(1);
            } else {
                failures = 0;
                delay = MIN_BACKOFF;
            }
            if self.shared.stop.wait_timeout(delay) == Wake::Stopped {
                break;
            }
            if failed {
                delay = (delay * 2).min(max_backoff);
            }
        }
    }

    fn set_mode(&self, mode: WatchMode) -> WatchMode {
        self.shared.state.set_mode(mode)
    }

    /// The server will not watch Leases for this candidate: poll, and say
    /// once what to fix.
    fn fall_back_refused(&mut self, code: u16) {
        let why = match code {
            403 => "403 Forbidden",
            404 => "404 Not Found",
            405 => "405 Method Not Allowed",
            _ => "refused",
        };
        let fix = format!(
            "grant watch on leases.coordination.k8s.io in namespace {}",
            crate::text::escape(&self.namespace)
        );
        self.set_mode(WatchMode::Polling(format!(
            "the API server refused the watch ({why}): {fix}"
        )));
        if !std::mem::replace(&mut self.warned_refused, true) {
            log::warn!(
                "lease {}/{}: the API server refused to watch it ({why}); polling instead, so a release or a takeover is seen up to a retry period late: {fix}",
                Escaped(&self.namespace),
                Escaped(&self.name)
            );
        }
    }

    /// More watch requests than the budget allows: poll until the window
    /// lets one more through, and say so once.
    fn fall_back_cut(&mut self, opens: usize) {
        let window = humantime::format_duration(OPEN_WINDOW);
        let was = self.set_mode(WatchMode::Polling(format!(
            "the watch was cut {opens} times in {window}: check proxies and load balancers between here and the API server (they must let a watch stream stay open)"
        )));
        if !matches!(was, WatchMode::Polling(_)) && !std::mem::replace(&mut self.warned_cut, true) {
            log::warn!(
                "lease {}/{}: the watch on it was cut {opens} times in {window}; polling instead until the window allows another: check proxies and load balancers between here and the API server (they must let a watch stream stay open)",
                Escaped(&self.namespace),
                Escaped(&self.name)
            );
        }
    }

    /// How long the stream may stay silent before it is presumed dead.
    fn silence(&self) -> Duration {
        let busy = self.periods();
        if self.heard_ever {
            QUIET_SILENCE.max(busy)
        } else {
            busy
        }
    }

    /// [`SILENT_PERIODS`] retry periods, at least [`MIN_SILENCE`].
    fn periods(&self) -> Duration {
        periods(self.retry_period)
    }

    /// How long the stream's word stands after a sign of life.
    fn vouch_window(&self) -> Duration {
        vouch_window(self.retry_period)
    }

    fn watch_once(&mut self) -> Ended {
        // Only the open that follows a stream the server ended well.
        let ended_well = std::mem::take(&mut self.ended_well);
        let timeout = WATCH_TIMEOUT_SECS + self.jitter.next_u64() % WATCH_TIMEOUT_SECS;
        let mut path = format!(
            "{}?watch=true&fieldSelector=metadata.name%3D{}&allowWatchBookmarks=true&timeoutSeconds={timeout}",
            lease_path(&self.namespace, None),
            segment(&self.name)
        );
        if let Some(rv) = &self.resource_version {
            path.push_str("&resourceVersion=");
            path.push_str(&segment(rv));
        }
        let Some(pool) = self
            .shared
            .pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        else {
            return Ended::Failed("stopped".into());
        };
        let what = lease_target(&self.namespace, &self.name);
        let target = Target {
            what: &what,
            action: "watch",
        };
        let refresh = std::mem::take(&mut self.refresh_token);
        let opened = self.client.open_stream(
            &pool,
            &path,
            target,
            Patience {
                head: self.silence(),
                // A byte: within the bound once the stream has brought an
                // event. Before one, what the bound asks is an event, and
                // bytes that are not events are refused as they come
                // (`EventBound`); a stream that sends nothing at all is
                // given up only at the longer bound, so that a Lease that
                // does not exist yet (nothing to send) does not reopen it
                // over and over.
                silence: QUIET_SILENCE.max(self.periods()),
            },
            refresh,
            &self.shared.stop,
        );
        let (code, body) = match opened {
            Ok(answer) => answer,
            Err(e) => return Ended::Failed(e.to_string()),
        };
        match code {
            200 => {}
            401 => {
                self.refresh_token = true;
                return Ended::Failed("refused: 401 Unauthorized".into());
            }
            403..=405 => return Ended::Refused(code),
            410 => {
                let resumed = self.resource_version.take().is_some();
                return if resumed {
                    Ended::Stream {
                        expired: true,
                        why: None,
                    }
                } else {
                    Ended::Failed("refused with status 410".into())
                };
            }
            _ => return Ended::Failed(format!("refused with status {code}")),
        }
        self.heard = false;
        self.shared.state.alive_for(Some(self.silence()));
        if !self.unproven {
            self.watching();
            // Opened from a version after a stream the server ended (its
            // time-out): the server brings every change after it, so the
            // stream has come that far. After any other end, its word
            // waits for a sign of life.
            let window = self.vouch_window();
            if let Some(rv) = self.resource_version.as_deref().filter(|_| ended_well) {
                self.latest.reached(Some(rv), window, Instant::now());
            }
        }
        let had_version = self.resource_version.is_some();
        let body = EventBound {
            inner: body,
            state: self.shared.state.clone(),
        };
        let read = self.read_events(BufReader::new(body));
        self.latest.unreached();
        self.ended_well = read.is_ok();
        let blind_for = self.shared.state.blind_since();
        self.unproven = !self.heard && blind_for.is_some();
        if let Some(silence) = blind_for {
            self.set_mode(WatchMode::Polling(blind(silence)));
        }
        self.shared.state.alive_for(None);
        match read {
            Ok(()) => Ended::Stream {
                expired: false,
                why: None,
            },
            Err(e) => Ended::Stream {
                // A 410 only tells something when we resumed: without a
                // version it is the server's fault, and backs off.
                expired: had_version && self.resource_version.is_none(),
                why: Some(e.to_string()),
            },
        }
    }

    /// The status says "watching" (and the log, once, that it is again).
    fn watching(&self) {
        let was = self.set_mode(WatchMode::Watching);
        if let WatchMode::Polling(why) = was {
            log::info!(
                "lease {}/{}: watching it again (was polling: {})",
                Escaped(&self.namespace),
                Escaped(&self.name),
                Escaped(&why)
            );
        }
    }

    /// An event that shows the stream alive: events may be awaited for
    /// another silence bound, and, when the lock can read the change from
    /// it (`readable`), the stream has brought every change up to the
    /// version it is at.
    fn heard(&mut self, readable: bool) {
        self.heard_ever = true;
        self.shared.state.alive_for(Some(self.silence()));
        if readable {
            let window = self.vouch_window();
            self.latest
                .reached(self.resource_version.as_deref(), window, Instant::now());
        }
        if !std::mem::replace(&mut self.heard, true) && self.unproven {
            self.unproven = false;
            self.watching();
        }
    }

    fn read_events(&mut self, mut body: impl BufRead) -> io::Result<()> {
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = (&mut body).take(MAX_BODY).read_until(b'\n', &mut line)?;
            if n == 0 {
                return Ok(());
            }
            if line.last() != Some(&b'\n') && n as u64 >= MAX_BODY {
                return Err(io::Error::other("watch event larger than the body cap"));
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            self.handle_event(&line)?;
        }
    }

    fn handle_event(&mut self, line: &[u8]) -> io::Result<()> {
        let event: WatchEvent = serde_json::from_slice(line)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("watch event: {e}")))?;
        match event.kind.as_str() {
            "ADDED" | "MODIFIED" | "DELETED" => {
                // Another object (a proxy that dropped the field
                // selector): nothing about our Lease.
                let meta = &event.object["metadata"];
                if meta["name"].as_str() != Some(&self.name)
                    || meta["namespace"]
                        .as_str()
                        .is_some_and(|ns| ns != self.namespace)
                {
                    return Ok(());
                }
                let version = meta["resourceVersion"].as_str().map(str::to_string);
                // Stale (older than the lock or an earlier delivery has
                // shown: a replay): nothing, not even a sign of life.
                if self.latest.is_stale(version.as_deref()) {
                    return Ok(());
                }
                if let Some(rv) = &version {
                    self.resource_version = Some(rv.clone());
                }
                // The deletion of the object the lock knows (its uid) is
                // kept as such: the lock answers "gone" from it. Another
                // deletion (no uid: a proxy's invention; another uid: an
                // old one replayed) and an undecodable object leave the
                // slot empty, and the stream's word stands no more: the
                // woken candidate then asks the server.
                let gone = event.kind == "DELETED";
                let deleted = gone && self.latest.is_ours(meta["uid"].as_str());
                let lease = if gone {
                    None
                } else {
                    // Through its text, as the client reads an answer: one
                    // copy of the Lease's decoding in the binary.
                    serde_json::to_vec(&event.object)
                        .ok()
                        .and_then(|json| Lease::from_json(&json).ok())
                };
                let costly = !deleted && lease.is_none();
                if costly {
                    self.latest.unreached();
                }
                // What the lock cannot answer from costs a GET when it
                // wakes the elector: at most one such wake per retry
                // period (the elector's own attempts see the Lease
                // meanwhile).
                let now = Instant::now();
                if costly
                    && self
                        .costly_poke
                        .is_some_and(|at| now.saturating_duration_since(at) < self.retry_period)
                {
                    // Not woken, but what the lock holds is not the newest
                    // any more: its reads ask the server.
                    self.latest.known(version.as_deref());
                    self.heard(false);
                    return Ok(());
                }
                let delivery = if deleted {
                    self.latest.offer_deletion(version.as_deref())
                } else {
                    self.latest.offer(lease, version.as_deref())
                };
                self.heard(!costly);
                match delivery {
                    Delivery::Stale => return Ok(()),
                    // A change the lock has (its own write): counted, but
                    // no wake.
                    Delivery::Known => {}
                    Delivery::News => {
                        if costly {
                            self.costly_poke = Some(now);
                        }
                        self.on_change.poke();
                    }
                }
                // Counted once told: whoever sees the count finds the
                // candidate woken.
                self.shared.state.changes.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            "BOOKMARK" => {
                // Only a bookmark that moves a known version on shows the
                // stream alive (kube-apiserver's do, about once a minute,
                // as its other Leases are written): the same one over and
                // over (a proxy replaying, a stuck cache) keeps nothing
                // alive.
                let rv = event.object["metadata"]["resourceVersion"].as_str();
                if let Some(rv) = rv.filter(|rv| self.resource_version.as_deref() != Some(*rv)) {
                    let moved = match (
                        revision(rv),
                        self.resource_version.as_deref().and_then(revision),
                    ) {
                        (Some(new), Some(old)) => new > old,
                        _ => false,
                    };
                    self.resource_version = Some(rv.to_string());
                    if moved {
                        self.heard(true);
                    }
                }
                Ok(())
            }
            "ERROR" => {
                if event.object["code"].as_u64() == Some(410) {
                    self.resource_version = None;
                }
                Err(io::Error::other(format!(
                    "watch error: {}",
                    event.object["message"].as_str().unwrap_or("no message")
                )))
            }
            other => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unknown watch event type {other:?}"),
            )),
        }
    }
}

/// [`SILENT_PERIODS`] retry periods, at least [`MIN_SILENCE`].
fn periods(retry_period: Duration) -> Duration {
    (retry_period.saturating_mul(SILENT_PERIODS)).max(MIN_SILENCE)
}

/// How long a stream's word that nothing changed stands after its last
/// sign of life, for an elector whose retry period is `retry_period`.
pub(crate) fn vouch_window(retry_period: Duration) -> Duration {
    VOUCH_WINDOW.max(periods(retry_period))
}

/// A resourceVersion as a number, where it is one.
fn revision(v: &str) -> Option<u64> {
    v.parse().ok()
}

/// The stream's body, refusing to read on once the stream went a silence
/// bound without an event: bytes that are not events (blank lines, the
/// same bookmark again, a trickle) do not keep a blind stream open. (A read
/// blocked with nothing arriving ends at the per-read silence time-out.)
struct EventBound {
    inner: Box<dyn Read + Send>,
    state: Arc<WatchState>,
}

impl Read for EventBound {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(silence) = self.state.blind_since() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, blind(silence)));
        }
        self.inner.read(buf)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{Answer, LatestLease};
    use crate::lease::Lease;

    const WINDOW: Duration = Duration::from_secs(30);

    /// The server answered a read with `version` at `at`, as `LeaseLock`
    /// tells the slot.
    fn read(slot: &LatestLease, version: &str, at: Instant) {
        slot.known(Some(version));
        slot.lock_holds(Some(version), at);
    }

    fn answer(slot: &LatestLease, follower: bool, at: Instant) -> &'static str {
        match slot.answer(follower, at) {
            Some(Answer::Lease(_)) => "lease",
            Some(Answer::Deleted) => "deleted",
            Some(Answer::Unchanged) => "unchanged",
            None => "ask",
        }
    }

    /// A follower's read is answered "unchanged" while the stream has
    /// reached the newest version the lock knows and its word stands; a
    /// read for a term never is. A read that shows the server ahead of the
    /// stream, a stream that ended, one whose word lapsed, or opaque
    /// versions: the server is asked.
    #[test]
    fn a_stream_vouches_for_a_follower_only_while_it_has_reached_what_the_lock_knows() {
        let t0 = Instant::now();
        let slot = LatestLease::new();
        // Nothing known yet: nothing to vouch for.
        assert_eq!(answer(&slot, true, t0), "ask");
        read(&slot, "7", t0);
        assert_eq!(answer(&slot, true, t0), "ask", "no stream yet");
        slot.reached(Some("7"), WINDOW, t0);
        assert_eq!(answer(&slot, true, t0), "unchanged");
        assert_eq!(answer(&slot, false, t0), "ask", "a read for a term");
        // The word lapses a window after the last sign of life...
        let late = t0 + WINDOW;
        assert_eq!(
            answer(&slot, true, late - Duration::from_millis(1)),
            "unchanged"
        );
        assert_eq!(answer(&slot, true, late), "ask");
        // ... and a read the stream had reached renews it.
        read(&slot, "7", late);
        assert_eq!(answer(&slot, true, late), "unchanged");
        // A bookmark further on: still vouched for.
        slot.reached(Some("40"), WINDOW, late);
        assert_eq!(answer(&slot, true, late), "unchanged");
        // The server ahead of the stream: ask until the stream catches up.
        read(&slot, "41", late);
        assert_eq!(answer(&slot, true, late), "ask");
        slot.reached(Some("41"), WINDOW, late);
        assert_eq!(answer(&slot, true, late), "unchanged");
        // Our own write, its event not yet come.
        slot.forget_older_than(Some("42"));
        slot.lock_holds(Some("42"), late);
        assert_eq!(answer(&slot, true, late), "ask");
        slot.reached(Some("42"), WINDOW, late);
        assert_eq!(answer(&slot, true, late), "unchanged");
        // A change the lock cannot read from the stream (an undecodable
        // object): what the lock holds is no longer the newest, whatever
        // the stream says after it, until the lock reads.
        slot.known(Some("43"));
        slot.reached(Some("60"), WINDOW, late);
        assert_eq!(answer(&slot, true, late), "ask");
        read(&slot, "43", late);
        assert_eq!(answer(&slot, true, late), "unchanged");
        // The server says gone: answered as of the newest version known.
        slot.lock_holds(None, late);
        assert_eq!(answer(&slot, true, late), "unchanged");
        // The stream ended.
        slot.unreached();
        assert_eq!(answer(&slot, true, late), "ask");
        // Opaque versions say nothing of how far a stream has come.
        let opaque = LatestLease::new();
        read(&opaque, "a", t0);
        opaque.reached(Some("a"), WINDOW, t0);
        assert_eq!(answer(&opaque, true, t0), "ask");
    }

    /// A delivered change answers any read, once; a deletion is kept as
    /// such until read or written over.
    #[test]
    fn a_delivery_answers_before_the_streams_word_and_a_deletion_is_kept() {
        let t0 = Instant::now();
        let slot = LatestLease::new();
        read(&slot, "7", t0);
        slot.reached(Some("7"), WINDOW, t0);
        assert_eq!(
            slot.offer(Some(lease("8")), Some("8")),
            super::Delivery::News
        );
        assert!(slot.holds(Some("7")));
        assert_eq!(answer(&slot, false, t0), "lease");
        assert_eq!(
            answer(&slot, true, t0),
            "ask",
            "8 delivered, not yet reached"
        );
        assert_eq!(slot.offer_deletion(Some("9")), super::Delivery::News);
        assert!(slot.holds(Some("8")));
        assert_eq!(answer(&slot, false, t0), "deleted");
        assert_eq!(answer(&slot, false, t0), "ask", "taken");
        assert_eq!(slot.offer_deletion(Some("10")), super::Delivery::News);
        slot.forget_older_than(Some("11"));
        assert!(!slot.holds(Some("11")), "written over");
        assert_eq!(answer(&slot, false, t0), "ask");
        // A deletion after our write (its answer still coming) stays.
        assert_eq!(slot.offer_deletion(Some("13")), super::Delivery::News);
        slot.forget_older_than(Some("12"));
        assert_eq!(answer(&slot, false, t0), "deleted");
    }

    fn lease(version: &str) -> Lease {
        let mut l = Lease::new("ns", "name", &Default::default());
        l.metadata.resource_version = Some(version.to_string());
        l
    }

    fn held(slot: &LatestLease) -> Option<String> {
        slot.take().and_then(|l| l.metadata.resource_version)
    }

    /// The event of our own write can arrive before the write's answer:
    /// kept, the read it wakes is answered from it instead of by a `GET`
    /// (one request per renew). Older deliveries are stale.
    #[test]
    fn a_write_forgets_only_what_is_older_than_it() {
        let slot = LatestLease::new();
        for (delivered, written, kept) in [
            ("7", "7", true),
            ("8", "7", true),
            ("6", "7", false),
            ("a", "a", false),
            ("7", "b", false),
        ] {
            slot.set(Some(lease(delivered)));
            slot.forget_older_than(Some(written));
            let want = kept.then(|| delivered.to_string());
            assert_eq!(held(&slot), want, "{delivered} after a write of {written}");
        }
        slot.set(Some(lease("7")));
        slot.forget_older_than(None);
        assert_eq!(held(&slot), None);
    }
}
