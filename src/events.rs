//! Kubernetes Events for leadership transitions, as client-go's resourcelock
//! records them (`reason: LeaderElection`, on the Lease).
//!
//! Recording must never slow or break the election: [`EventRecorder::record`]
//! only puts the event on a bounded queue (dropping it, with a warning, when
//! the queue is full) and one sender thread, `lease-events/<component>`,
//! POSTs them with a short time-out. Failures are logged, never returned.
//! Dropping the recorder ends and joins that thread, waiting at most about
//! one request time-out.
//!
//! ```no_run
//! use lease_elector::{Client, ClientConfig, EventRecorder, LeaseLock};
//!
//! let client = Client::new(ClientConfig::in_cluster()?)?;
//! let events = EventRecorder::new(client.clone(), "my-operator").with_instance("pod-a");
//! let lock = LeaseLock::new(client, "my-namespace", "my-operator-lock", "pod-a")
//!     .with_events(events);
//! # Ok::<(), lease_elector::Error>(())
//! ```

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::client::Client;
use crate::clock::{Clock, SystemClock};
use crate::deadline::Deadline;
use crate::lease::{Lease, MicroTime, LEASE_API_VERSION};
use crate::status::FailureKind;
use crate::text::Escaped;

/// Events waiting to be sent before new ones are dropped.
pub const DEFAULT_QUEUE_CAPACITY: usize = 64;

/// Upper bound for one Event POST.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The `reason` client-go gives leader-election events.
pub const EVENT_REASON: &str = "LeaderElection";

/// Counts of what happened to recorded events, for tests and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventStats {
    /// Accepted by the API server.
    pub sent: u64,
    /// Sent, but the server refused or did not answer (each logged).
    pub failed: u64,
    /// Never sent: the queue was full, the sender thread could not start,
    /// or the recorder was dropped before their turn came.
    pub dropped: u64,
}

#[derive(Debug, Default)]
struct Counters {
    sent: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
    /// Set on drop: events still queued after this instant are dropped so
    /// that drop waits about one request time-out at most.
    give_up_at: Mutex<Option<Instant>>,
}

impl Counters {
    fn give_up_at(&self) -> Option<Instant> {
        *self
            .give_up_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

struct Queued {
    namespace: String,
    lease: String,
    event: Value,
}

struct Worker {
    queue: SyncSender<Queued>,
    thread: JoinHandle<()>,
}

/// Where a [`LeaseLock`](crate::LeaseLock) reports transitions, e.g. as Kubernetes Events.
///
/// Called on the elector thread: implementations must return at once
/// (queue the work elsewhere) and never fail the election.
pub trait EventSink: Send + Sync + fmt::Debug {
    /// Report `message` about `lease`.
    fn record(&self, lease: &Lease, message: &str);
}

/// Records each leadership transition as a core/v1 Event on the Lease
/// (`reason: LeaderElection`, `"pod-a became leader"`), as client-go's
/// `resourcelock` does with an event recorder; hand it to
/// [`LeaseLock::with_events`](crate::LeaseLock::with_events). The service
/// account needs `create` on `events` (the core API group, `""`) in the
/// Lease's namespace.
///
/// Recording never slows or breaks the election: the elector thread only
/// queues an Event (at most 64 wait; beyond, it is dropped with a warning),
/// and a thread of the recorder's own, `lease-events/<component>`, POSTs
/// them, each within 5 s. Failures are logged, never returned. Dropping
/// the recorder (with the lock, when the elector ends) ends and joins that
/// thread, waiting about one request time-out at most.
///
/// ```no_run
/// use lease_elector::{Client, ClientConfig, EventRecorder, LeaderElector, LeaseLock};
///
/// let client = Client::new(ClientConfig::in_cluster()?)?;
/// let events = EventRecorder::new(client.clone(), "my-operator").with_instance("pod-a");
/// let lock = LeaseLock::new(client, "my-namespace", "my-operator", "pod-a").with_events(events);
/// let elector = LeaderElector::builder(lock).build()?;
/// # Ok::<(), lease_elector::Error>(())
/// ```
pub struct EventRecorder {
    client: Client,
    component: String,
    instance: String,
    clock: Arc<dyn Clock>,
    request_timeout: Duration,
    capacity: usize,
    counters: Arc<Counters>,
    /// Started by the first `record`, so a recorder that never records
    /// costs no thread.
    worker: Mutex<Option<Worker>>,
}

impl fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventRecorder")
            .field("component", &self.component)
            .field("instance", &self.instance)
            .field("request_timeout", &self.request_timeout)
            .field("capacity", &self.capacity)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl EventRecorder {
    /// A recorder reporting as `component` (`source.component` and
    /// `reportingComponent` of each Event).
    pub fn new(client: Client, component: impl Into<String>) -> Self {
        EventRecorder {
            client,
            component: component.into(),
            instance: String::new(),
            clock: Arc::new(SystemClock),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            capacity: DEFAULT_QUEUE_CAPACITY,
            counters: Arc::new(Counters::default()),
            worker: Mutex::new(None),
        }
    }

    /// Set `reportingInstance` (usually the candidate identity); empty omits it.
    pub fn with_instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = instance.into();
        self
    }

    /// Read event timestamps from this clock.
    #[doc(hidden)]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Upper bound for one POST (default 5 s); also about the longest that
    /// dropping the recorder waits.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// How many events may wait to be sent (default 64, at least 1); one
    /// recorded while that many wait is dropped, with a warning.
    pub fn with_capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity.max(1);
        self
    }

    /// The component events are reported as.
    pub fn component(&self) -> &str {
        &self.component
    }

    /// What happened to the events recorded so far.
    #[doc(hidden)]
    pub fn stats(&self) -> EventStats {
        EventStats {
            sent: self.counters.sent.load(Ordering::Relaxed),
            failed: self.counters.failed.load(Ordering::Relaxed),
            dropped: self.counters.dropped.load(Ordering::Relaxed),
        }
    }

    /// The core/v1 Event for `message` about `lease`, as it is POSTed.
    #[doc(hidden)]
    pub fn event_for(&self, lease: &Lease, message: &str) -> Value {
        let meta = &lease.metadata;
        let mut involved = Map::new();
        involved.insert("kind".into(), "Lease".into());
        involved.insert("apiVersion".into(), LEASE_API_VERSION.into());
        involved.insert("namespace".into(), meta.namespace.clone().into());
        involved.insert("name".into(), meta.name.clone().into());
        if let Some(uid) = &meta.uid {
            involved.insert("uid".into(), uid.clone().into());
        }
        if let Some(rv) = &meta.resource_version {
            involved.insert("resourceVersion".into(), rv.clone().into());
        }
        let now = MicroTime::from_system_time(self.clock.system_time()).rfc3339_seconds();
        // client-go names events `<object>.<hex>`; random bits keep names
        // unique across replicas recording in the same nanosecond.
        let suffix = crate::random::uuid_v4().as_u64_pair().0;
        let mut event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": format!("{}.{suffix:016x}", meta.name),
                "namespace": meta.namespace,
            },
            "involvedObject": involved,
            "reason": EVENT_REASON,
            "message": message,
            "type": "Normal",
            "source": { "component": self.component },
            "firstTimestamp": now,
            "lastTimestamp": now,
            "eventTime": null,
            "count": 1,
            "reportingComponent": self.component,
        });
        if !self.instance.is_empty() {
            event["reportingInstance"] = self.instance.clone().into();
        }
        event
    }

    fn drop_event(&self, why: &str, lease: &str, message: &str) {
        self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        log::warn!(
            "dropping event \"{}\" on lease {}: {}",
            Escaped(message),
            Escaped(lease),
            Escaped(why)
        );
    }

    fn start_worker(&self) -> std::io::Result<Worker> {
        let (queue, rx) = mpsc::sync_channel(self.capacity);
        let client = self.client.clone();
        let counters = self.counters.clone();
        let timeout = self.request_timeout;
        let thread = thread::Builder::new()
            .name(crate::names::thread_name(&[
                "lease-events",
                &self.component,
            ]))
            .spawn(move || send_all(&client, &rx, &counters, timeout))?;
        Ok(Worker { queue, thread })
    }
}

impl EventSink for EventRecorder {
    /// Queue an Event; never blocks on the network.
    fn record(&self, lease: &Lease, message: &str) {
        let desc = format!("{}/{}", lease.metadata.namespace, lease.metadata.name);
        if lease.metadata.namespace.is_empty() {
            return self.drop_event("the Lease has no namespace", &desc, message);
        }
        let item = Queued {
            namespace: lease.metadata.namespace.clone(),
            lease: desc.clone(),
            event: self.event_for(lease, message),
        };
        let mut worker = self.worker.lock().unwrap_or_else(PoisonError::into_inner);
        if worker.is_none() {
            match self.start_worker() {
                Ok(w) => *worker = Some(w),
                Err(e) => {
                    return self.drop_event(
                        &format!("cannot start the event thread: {e}"),
                        &desc,
                        message,
                    )
                }
            }
        }
        let Some(w) = worker.as_ref() else { return };
        match w.queue.try_send(item) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => self.drop_event(
                &format!("{} events are already waiting", self.capacity),
                &desc,
                message,
            ),
            Err(TrySendError::Disconnected(_)) => {
                self.drop_event("the event thread has ended", &desc, message)
            }
        }
    }
}

impl Drop for EventRecorder {
    fn drop(&mut self) {
        let worker = self
            .worker
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(Worker { queue, thread }) = worker else {
            return;
        };
        *self
            .counters
            .give_up_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(crate::clock::add_saturating(
            Instant::now(),
            self.request_timeout,
        ));
        // Closing the queue ends the thread's loop once it is drained.
        drop(queue);
        if thread.join().is_err() {
            log::error!("event thread for {} panicked", Escaped(&self.component));
        }
    }
}

/// The sender thread: POST each queued event until the queue is closed.
fn send_all(client: &Client, rx: &Receiver<Queued>, counters: &Counters, timeout: Duration) {
    let mut abandoned = 0u64;
    // Each kind of failure is warned once (a missing RBAC grant would
    // otherwise warn on every transition), again only after a success.
    let mut warned: Vec<FailureKind> = Vec::new();
    for item in rx {
        // Real time on purpose: this bounds network waits at shutdown, it
        // takes no part in the election's timing.
        let budget = match counters.give_up_at() {
            None => timeout,
            Some(at) => at.saturating_duration_since(Instant::now()).min(timeout),
        };
        if budget.is_zero() {
            counters.dropped.fetch_add(1, Ordering::Relaxed);
            abandoned += 1;
            continue;
        }
        // The message names identities and the lease: outside text.
        let message = Escaped(item.event["message"].as_str().unwrap_or_default());
        let lease = Escaped(&item.lease);
        match client.create_event(&item.namespace, &item.event, &Deadline::from_now(budget)) {
            Ok(()) => {
                counters.sent.fetch_add(1, Ordering::Relaxed);
                warned.clear();
                log::debug!("recorded event \"{message}\" on lease {lease}");
            }
            Err(e) => {
                counters.failed.fetch_add(1, Ordering::Relaxed);
                let kind = FailureKind::of(&e);
                if warned.contains(&kind) {
                    log::debug!("could not record event \"{message}\" on lease {lease}: {e}");
                } else {
                    warned.push(kind);
                    let hint = match kind {
                        FailureKind::Forbidden => format!(
                            "grant create on events in namespace {}",
                            Escaped(&item.namespace)
                        ),
                        _ => FailureKind::hint_for(&e, &item.namespace),
                    };
                    log::warn!(
                        "could not record event \"{message}\" on lease {lease}: {e} ({hint}; the election is not affected; further failures like this one are logged at debug)"
                    );
                }
            }
        }
    }
    if abandoned > 0 {
        log::warn!("dropped {abandoned} queued event(s) at shutdown: the API server was too slow");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ClientConfig;
    use crate::lease::LeaderElectionRecord;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::{SystemTime, UNIX_EPOCH};

    use crate::test_log::logs;

    fn warnings_from(thread: &str) -> Vec<String> {
        crate::test_log::lines_from(thread, log::Level::Warn)
    }

    #[derive(Clone, Copy)]
    enum Reply {
        Created,
        Fail500,
        Forbidden,
        Hang,
    }

    /// One request as the stub saw it.
    #[derive(Debug)]
    struct Seen {
        method: String,
        path: String,
        body: Value,
    }

    /// A throwaway HTTP server answering every request the same way.
    fn stub(reply: Reply) -> (String, Arc<Mutex<Vec<Seen>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        thread::spawn(move || {
            let mut hung = Vec::new();
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let Some(req) = read_request(&mut conn) else {
                    continue;
                };
                log.lock().unwrap().push(req);
                let (status, body) = match reply {
                    Reply::Created => ("201 Created", "{}"),
                    Reply::Fail500 => (
                        "500 Internal Server Error",
                        r#"{"kind":"Status","reason":"InternalError","message":"etcd is down"}"#,
                    ),
                    Reply::Forbidden => (
                        "403 Forbidden",
                        r#"{"kind":"Status","reason":"Forbidden","message":"events is forbidden: cannot create resource \"events\""}"#,
                    ),
                    Reply::Hang => {
                        hung.push(conn);
                        continue;
                    }
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        (url, seen)
    }

    fn read_request(conn: &mut TcpStream) -> Option<Seen> {
        let mut reader = BufReader::new(conn.try_clone().ok()?);
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let mut parts = line.split_whitespace();
        let method = parts.next()?.to_string();
        let path = parts.next()?.to_string();
        let mut len = 0;
        loop {
            let mut h = String::new();
            reader.read_line(&mut h).ok()?;
            if h.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().ok()?;
                }
            }
        }
        let mut body = vec![0; len];
        reader.read_exact(&mut body).ok()?;
        Some(Seen {
            method,
            path,
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        })
    }

    fn lease() -> Lease {
        let mut lease = Lease::new("team-a", "my-lock", &LeaderElectionRecord::default());
        lease.metadata.uid = Some("uid-1".into());
        lease.metadata.resource_version = Some("42".into());
        lease
    }

    fn recorder(url: &str, component: &str) -> EventRecorder {
        let client = Client::new(ClientConfig::new(url)).unwrap();
        EventRecorder::new(client, component)
            .with_instance("pod-a_1234")
            .with_request_timeout(Duration::from_millis(300))
    }

    #[test]
    fn posts_events_shaped_like_client_go() {
        let (url, seen) = stub(Reply::Created);
        let clock = Arc::new(crate::clock::ManualClock::new());
        let rec = recorder(&url, "shape-test").with_clock(clock.clone());
        rec.record(&lease(), "pod-a_1234 became leader");
        rec.record(&lease(), "pod-a_1234 stopped leading");
        // Dropping joins the thread, so everything queued was sent.
        drop(rec);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2);
        let first = &seen[0];
        assert_eq!(first.method, "POST");
        assert_eq!(first.path, "/api/v1/namespaces/team-a/events");
        let e = &first.body;
        let name = e["metadata"]["name"].as_str().unwrap();
        let (lease_name, suffix) = name.split_once('.').unwrap();
        assert_eq!(lease_name, "my-lock");
        assert_eq!(suffix.len(), 16);
        assert!(suffix.bytes().all(|c| c.is_ascii_hexdigit()), "{name}");
        assert_ne!(seen[1].body["metadata"]["name"], e["metadata"]["name"]);
        assert_eq!(e["metadata"]["namespace"], "team-a");
        assert_eq!(
            e["involvedObject"],
            json!({"kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
                   "namespace": "team-a", "name": "my-lock", "uid": "uid-1",
                   "resourceVersion": "42"})
        );
        assert_eq!(e["reason"], "LeaderElection");
        assert_eq!(e["type"], "Normal");
        assert_eq!(e["message"], "pod-a_1234 became leader");
        assert_eq!(seen[1].body["message"], "pod-a_1234 stopped leading");
        assert_eq!(e["source"]["component"], "shape-test");
        assert_eq!(e["reportingComponent"], "shape-test");
        assert_eq!(e["reportingInstance"], "pod-a_1234");
        assert_eq!(e["count"], 1);
        assert!(e["eventTime"].is_null());
        let want = MicroTime::from_system_time(clock.system_time()).rfc3339_seconds();
        assert_eq!(e["firstTimestamp"], want.as_str());
        assert_eq!(e["lastTimestamp"], want.as_str());
    }

    #[test]
    fn timestamps_are_whole_seconds_utc() {
        let t = UNIX_EPOCH + Duration::from_micros(1_764_680_400_123_456);
        assert_eq!(
            MicroTime::from_system_time(t).rfc3339_seconds(),
            "2025-12-02T13:00:00Z"
        );
        let now = MicroTime::from_system_time(SystemTime::now()).rfc3339_seconds();
        assert_eq!(now.len(), "2006-01-02T15:04:05Z".len(), "{now}");
    }

    #[test]
    fn server_errors_are_logged_not_returned() {
        logs();
        let (url, seen) = stub(Reply::Fail500);
        let rec = recorder(&url, "fail-500");
        rec.record(&lease(), "x became leader");
        drop(rec);
        assert_eq!(seen.lock().unwrap().len(), 1);
        let warnings = warnings_from("lease-events/fail-500");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("500"), "{warnings:?}");
        assert!(warnings[0].contains("team-a/my-lock"), "{warnings:?}");
    }

    #[test]
    fn a_forbidden_recorder_warns_once_with_the_grant_to_add() {
        logs();
        let (url, seen) = stub(Reply::Forbidden);
        let rec = recorder(&url, "forbidden");
        for who in ["a", "b", "c"] {
            rec.record(&lease(), &format!("{who} became leader"));
        }
        drop(rec);
        assert_eq!(seen.lock().unwrap().len(), 3, "every event is tried");
        let warnings = warnings_from("lease-events/forbidden");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("403") && warnings[0].contains("grant create on events"),
            "{warnings:?}"
        );
    }

    #[test]
    fn identities_in_logged_event_messages_are_escaped() {
        logs();
        let (url, _) = stub(Reply::Fail500);
        let rec = recorder(&url, "forged-identity");
        // A C1 CSI (\u{9b}) drives a terminal as ESC [ does.
        rec.record(&lease(), "x\u{9b}2J\nLEADING me became leader");
        drop(rec);
        let warnings = warnings_from("lease-events/forged-identity");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(!warnings[0].contains(char::is_control), "{warnings:?}");
        assert!(
            warnings[0].contains(r#"event "x\u{9b}2J\nLEADING me became leader""#),
            "{warnings:?}"
        );
    }

    #[test]
    fn connection_refused_is_logged_and_counted() {
        logs();
        let url = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}", l.local_addr().unwrap())
        };
        let rec = recorder(&url, "refused");
        rec.record(&lease(), "x became leader");
        // Wait for the attempt without dropping, to read the stats.
        let start = Instant::now();
        while rec.stats().failed == 0 && start.elapsed() < Duration::from_secs(5) {
            thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            rec.stats(),
            EventStats {
                sent: 0,
                failed: 1,
                dropped: 0
            }
        );
        drop(rec);
        let warnings = warnings_from("lease-events/refused");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
    }

    #[test]
    fn hanging_server_never_blocks_record_and_drop_is_bounded() {
        logs();
        let (url, seen) = stub(Reply::Hang);
        let rec = recorder(&url, "hang").with_capacity(2);
        let start = Instant::now();
        for i in 0..10 {
            rec.record(&lease(), &format!("event {i}"));
        }
        assert!(
            start.elapsed() < Duration::from_millis(200),
            "{:?}",
            start.elapsed()
        );
        // One in flight (or not yet taken), two queued: the rest dropped.
        let dropped = rec.stats().dropped;
        assert!((7..=8).contains(&dropped), "dropped {dropped}");
        let start = Instant::now();
        drop(rec);
        // One request time-out (300ms) for the request in flight; queued
        // events left after it are abandoned, not sent one by one.
        assert!(
            start.elapsed() < Duration::from_millis(1500),
            "drop took {:?}",
            start.elapsed()
        );
        assert!(seen.lock().unwrap().len() <= 3);
        // The queue-full warnings are logged by the recording thread.
        let me = thread::current().name().unwrap_or("").to_string();
        let full = warnings_from(&me)
            .into_iter()
            .filter(|w| w.contains("2 events are already waiting"))
            .count() as u64;
        assert!(full >= 7, "{full}");
    }

    #[test]
    fn unused_recorder_starts_no_thread() {
        let client = Client::new(ClientConfig::new("http://127.0.0.1:1")).unwrap();
        let rec = EventRecorder::new(client, "idle");
        assert!(rec.worker.lock().unwrap().is_none());
        drop(rec);
    }

    #[test]
    fn lease_without_namespace_is_dropped() {
        let client = Client::new(ClientConfig::new("http://127.0.0.1:1")).unwrap();
        let rec = EventRecorder::new(client, "no-ns");
        let mut l = lease();
        l.metadata.namespace.clear();
        rec.record(&l, "x became leader");
        assert_eq!(rec.stats().dropped, 1);
        assert!(rec.worker.lock().unwrap().is_none());
    }
}
