//! The lock abstraction the elector drives, and its Lease implementation.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::{lease_target, Client};
use crate::clock::Wakeup;
use crate::deadline::Deadline;
use crate::error::{Error, Result, NOTHING_WRITTEN};
use crate::events::{EventRecorder, EventSink};
use crate::lease::{newer, LeaderElectionRecord, Lease, MicroTime};
pub use crate::watch::Watcher;
use crate::watch::{Answer, LatestLease};

/// A resource lock holding a [`LeaderElectionRecord`], as client-go's
/// `resourcelock.Interface`: what [`LeaderElector::builder`] elects on.
/// [`LeaseLock`] is the one for a Kubernetes Lease; implement it to plug
/// in another lock kind (a row in a database, an object in a store with
/// conditional writes) or a test double.
///
/// Each call gets a [`Deadline`]: the time left for this one request (the
/// elector's per-request cap within what is left of the round); an
/// implementation must not block past it ([`Deadline::remaining`] is the
/// time-out to give its own request).
///
/// `update` is optimistic: it writes against the version last seen by `get`,
/// `create` or `update`, and fails with a conflict when someone else wrote
/// in between. `create` and `update` return `Ok` only when the store
/// confirmed the write: the elector leads on that word. Errors say what
/// happened in the elector's terms: [`Error::is_not_found`] from `get`
/// when there is no lock object yet (the elector then creates it),
/// [`Error::is_already_exists`] from `create` when another candidate
/// created it first, [`Error::is_conflict`] from `update` when the
/// version changed; anything else counts as a failed attempt.
///
/// A lock kept in this process's memory, shared by its candidates:
///
/// ```
/// use lease_elector::{ApiStatus, Deadline, Error, LeaderElectionRecord, LeaderElector, LeaderEvent, Lock};
/// use std::sync::{Arc, Mutex};
///
/// /// The lock object: a version and the record, once created.
/// type Store = Arc<Mutex<Option<(u64, LeaderElectionRecord)>>>;
///
/// #[derive(Debug)]
/// struct MemoryLock {
///     store: Store,
///     seen: u64,
///     identity: String,
/// }
///
/// fn refused(code: u16, reason: &str, action: &'static str) -> Error {
///     let status = ApiStatus::new(code, reason, "the memory lock refused");
///     Error::Api { target: "memory lock".into(), action, status }
/// }
///
/// impl Lock for MemoryLock {
///     fn get(&mut self, _: &Deadline) -> lease_elector::Result<LeaderElectionRecord> {
///         let store = self.store.lock().unwrap();
///         let (version, record) = store.as_ref().ok_or_else(|| refused(404, "NotFound", "get"))?;
///         self.seen = *version;
///         Ok(record.clone())
///     }
///     fn create(&mut self, record: &LeaderElectionRecord, _: &Deadline) -> lease_elector::Result<()> {
///         let mut store = self.store.lock().unwrap();
///         if store.is_some() {
///             return Err(refused(409, "AlreadyExists", "create"));
///         }
///         *store = Some((1, record.clone()));
///         self.seen = 1;
///         Ok(())
///     }
///     fn update(&mut self, record: &LeaderElectionRecord, _: &Deadline) -> lease_elector::Result<()> {
///         let mut store = self.store.lock().unwrap();
///         match store.as_mut() {
///             Some((version, stored)) if *version == self.seen => {
///                 *version += 1;
///                 *stored = record.clone();
///                 self.seen = *version;
///                 Ok(())
///             }
///             _ => Err(refused(409, "Conflict", "update")),
///         }
///     }
///     fn identity(&self) -> &str {
///         &self.identity
///     }
///     fn describe(&self) -> String {
///         "memory/lock".into()
///     }
/// }
///
/// let store = Store::default();
/// let lock = MemoryLock { store: store.clone(), seen: 0, identity: "pod-a".into() };
/// let (elector, events) = LeaderElector::builder(lock).build()?.spawn()?;
/// while !matches!(events.recv()?, LeaderEvent::StartedLeading { .. }) {}
/// let holder = store.lock().unwrap().as_ref().map(|(_, r)| r.holder_identity.clone());
/// assert_eq!(holder.as_deref(), Some("pod-a"));
/// elector.stop()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// [`LeaderElector::builder`]: crate::LeaderElector::builder
pub trait Lock: Send + fmt::Debug {
    /// Read the current record (and remember the object's version).
    fn get(&mut self, deadline: &Deadline) -> Result<LeaderElectionRecord>;
    /// Create the lock object holding `record`; `Ok` only when the server
    /// answered with it stored.
    fn create(&mut self, record: &LeaderElectionRecord, deadline: &Deadline) -> Result<()>;
    /// Replace the record, conditional on the remembered version; `Ok` only
    /// when the server answered with it stored.
    fn update(&mut self, record: &LeaderElectionRecord, deadline: &Deadline) -> Result<()>;
    /// This candidate's identity.
    fn identity(&self) -> &str;
    /// `namespace/name` of the lock object, for logs, errors and thread names.
    fn describe(&self) -> String;
    /// Whether the last [`get`](Lock::get) was answered without a request
    /// (from what a watch delivered), so that the elector counts only the
    /// requests sent (`lease_elector_requests_total`). The default: every
    /// `get` is a request.
    fn last_get_was_local(&self) -> bool {
        false
    }
    /// The lock object's version (its `resourceVersion`) as last read or
    /// written, if the lock kind has one. The elector counts a new version
    /// as a change of the record even when the record reads the same (a
    /// holder whose clock stands still writes the same times). The
    /// default: unknown, and only the record is compared.
    fn version(&self) -> Option<String> {
        None
    }
    /// Whether the last [`get`](Lock::get) found another object than the
    /// one seen before it (a new uid: the Lease was deleted and created
    /// again since). A leader then steps down even if the record is one
    /// it wrote (a write of its own that landed late can recreate it).
    /// The default: never.
    fn last_get_recreated(&self) -> bool {
        false
    }
    /// Whether the last [`update`](Lock::update) created the object anew
    /// (Leases allow create-on-update: a `PUT` to a deleted Lease creates
    /// it). The elector then knows the Lease had been deleted. The default:
    /// never.
    fn last_update_created(&self) -> bool {
        false
    }
    /// Refuse names the server would refuse, before any thread or request
    /// is named after them ([`LeaderElector`](crate::LeaderElector)'s
    /// `build()` calls it). The default accepts everything.
    fn validate(&self) -> Result<()> {
        Ok(())
    }
    /// Record a transition (`"<identity> became leader"`); must not block.
    fn record_event(&self, _message: &str) {}
    /// Start watching the lock object, poking `on_change` on every change
    /// (`_backoff` is the elector's retry period: failed reconnects back
    /// off up to it); `None` when this lock kind cannot be watched (the
    /// elector then polls, and its status says the watch is off). Not part
    /// of the API: only [`LeaseLock`] watches.
    #[doc(hidden)]
    fn watch(&self, _on_change: Wakeup, _backoff: Duration) -> Option<Result<Watcher>> {
        None
    }
    /// Whether the next [`get`](Lock::get) would be answered from what a
    /// watch delivered, without a request. Not part of the API: only
    /// [`LeaseLock`] watches.
    #[doc(hidden)]
    fn has_delivery(&self) -> bool {
        false
    }
    /// Read the record as a follower (a candidate that holds no term and
    /// whose work does not run): as [`get`](Lock::get), but it may be
    /// answered, without a request, from a watch that vouches nothing
    /// changed since the last read. Not part of the API: only
    /// [`LeaseLock`] watches.
    #[doc(hidden)]
    fn follow(&mut self, deadline: &Deadline) -> Result<LeaderElectionRecord> {
        self.get(deadline)
    }
}

/// A [`Lock`] on a `coordination.k8s.io/v1` Lease.
///
/// ```no_run
/// use lease_elector::{Client, ClientConfig, LeaseLock};
/// let client = Client::new(ClientConfig::in_cluster()?)?;
/// let lock = LeaseLock::new(client, "kube-system", "my-operator", "pod-a");
/// # Ok::<(), lease_elector::Error>(())
/// ```
#[derive(Debug)]
pub struct LeaseLock {
    client: Client,
    namespace: String,
    name: String,
    identity: String,
    cached: Option<Lease>,
    events: Option<Arc<dyn EventSink>>,
    labels: std::collections::BTreeMap<String, String>,
    /// What a watch on this Lease delivered since our last read or write.
    watched: LatestLease,
    /// The last `get` was answered from `watched`, without a request.
    local_get: bool,
    /// An update met a conflict (or a create found the Lease there) and no
    /// answer from the server has come since: what the watch delivered may
    /// lag behind the server too, so the next `get` asks the server.
    behind: bool,
    /// The last update created the Lease anew (its uid changed).
    created: bool,
    /// The last get found a Lease with another uid than the one cached.
    recreated: bool,
    /// The last read found the Lease gone (a 404, or a deletion the watch
    /// brought), and nothing since stored it.
    gone: bool,
}

impl LeaseLock {
    /// A lock on Lease `namespace/name` for candidate `identity`.
    pub fn new(
        client: Client,
        namespace: impl Into<String>,
        name: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        LeaseLock {
            client,
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            cached: None,
            events: None,
            labels: Default::default(),
            watched: LatestLease::new(),
            local_get: false,
            behind: false,
            created: false,
            recreated: false,
            gone: false,
        }
    }

    /// Put these labels on the Lease, and keep them there on every write
    /// (client-go's `NewWithLabels`); other labels on the Lease are kept.
    ///
    /// ```
    /// use lease_elector::{Client, ClientConfig, LeaseLock};
    ///
    /// let client = Client::new(ClientConfig::new("http://127.0.0.1:8001"))?; // kubectl proxy
    /// let lock = LeaseLock::new(client, "ns", "my-operator", "pod-a")
    ///     .with_labels([("app.kubernetes.io/name", "my-operator")]);
    /// # Ok::<(), lease_elector::Error>(())
    /// ```
    pub fn with_labels<K: Into<String>, V: Into<String>>(
        mut self,
        labels: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.labels = labels
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        self
    }

    fn apply_labels(&self, lease: &mut Lease) {
        if self.labels.is_empty() {
            return;
        }
        let labels = lease.metadata.labels.get_or_insert_with(Default::default);
        for (k, v) in &self.labels {
            labels.insert(k.clone(), v.clone());
        }
    }

    /// Record each transition as a Kubernetes Event on the Lease
    /// (`"pod-a became leader"`, reason `LeaderElection`), as client-go's
    /// resourcelock does with an event recorder. The service account then
    /// also needs `create` on core `events` in the Lease's namespace.
    ///
    /// ```
    /// use lease_elector::{Client, ClientConfig, EventRecorder, LeaseLock};
    ///
    /// let client = Client::new(ClientConfig::new("http://127.0.0.1:8001"))?; // kubectl proxy
    /// let events = EventRecorder::new(client.clone(), "my-operator").with_instance("pod-a");
    /// let lock = LeaseLock::new(client, "ns", "my-operator", "pod-a").with_events(events);
    /// # Ok::<(), lease_elector::Error>(())
    /// ```
    pub fn with_events(self, recorder: EventRecorder) -> Self {
        self.with_event_sink(Arc::new(recorder))
    }

    /// Report transitions to `sink` as well ([`with_events`](Self::with_events)
    /// with a recorder of one's own).
    #[doc(hidden)]
    pub fn with_event_sink(mut self, sink: Arc<dyn EventSink>) -> Self {
        self.events = Some(sink);
        self
    }

    /// The Lease namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The Lease name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The client this lock talks through.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The Lease as last read or written, if any.
    #[doc(hidden)]
    pub fn cached(&self) -> Option<&Lease> {
        self.cached.as_ref()
    }

    /// The answer must be this Lease: right kind (when stated), name and namespace.
    fn check_identity(&self, lease: &Lease, action: &'static str) -> Result<()> {
        let detail = if !lease.kind.is_empty() && lease.kind != "Lease" {
            format!(
                "the server answered with a {} instead of a Lease",
                lease.kind
            )
        } else if lease.metadata.name != self.name
            || !(lease.metadata.namespace.is_empty() || lease.metadata.namespace == self.namespace)
        {
            format!(
                "the server answered with Lease {}/{}",
                lease.metadata.namespace, lease.metadata.name
            )
        } else {
            return Ok(());
        };
        Err(Error::Decode {
            target: lease_target(&self.namespace, &self.name),
            action,
            detail,
        })
    }

    /// The answer to a write must be the Lease written, newly stored: our
    /// holder, renew and acquire times and duration, and a
    /// `resourceVersion` newer than the one written against. A redirect
    /// followed as a read, a proxy answering from a cache, or a server that
    /// is not the API server answers otherwise, and the write is then not
    /// counted: leading on it would be leading on a Lease that may name
    /// someone else. Times are compared as `MicroTime` values, not text
    /// (the API server re-writes them in its own form).
    fn check_written(&self, sent: &Lease, answer: &Lease, action: &'static str) -> Result<()> {
        let (want, got) = (sent.record(), answer.record());
        let time = |t: Option<MicroTime>| t.map_or_else(|| "none".to_string(), |t| t.to_string());
        let mut differs = Vec::new();
        if got.holder_identity != want.holder_identity {
            differs.push(format!(
                "holder {:?}, not {:?}",
                got.holder_identity, want.holder_identity
            ));
        }
        if got.renew_time != want.renew_time {
            differs.push(format!(
                "renewTime {}, not {}",
                time(got.renew_time),
                time(want.renew_time)
            ));
        }
        if got.acquire_time != want.acquire_time {
            differs.push(format!(
                "acquireTime {}, not {}",
                time(got.acquire_time),
                time(want.acquire_time)
            ));
        }
        if got.lease_duration_seconds != want.lease_duration_seconds {
            differs.push(format!(
                "leaseDurationSeconds {}, not {}",
                got.lease_duration_seconds, want.lease_duration_seconds
            ));
        }
        let written_against = sent.metadata.resource_version.as_deref();
        let stored = answer.metadata.resource_version.as_deref();
        let unchanged = differs.is_empty() && stored.is_some() && stored == written_against;
        if !newer(stored, written_against) {
            differs.push(match (stored, written_against) {
                (None, _) => "no resourceVersion".to_string(),
                (Some(rv), Some(was)) => {
                    format!("resourceVersion {rv:?}, not newer than {was:?} written against")
                }
                (Some(rv), None) => format!("resourceVersion {rv:?}"),
            });
        }
        if unchanged {
            // kube-apiserver writes nothing for an update that changes
            // nothing, and answers with the version it already had: the
            // Lease holds this record, but nobody saw it renewed.
            differs.push(format!(
                "{NOTHING_WRITTEN}: the Lease already held this record (an update that changes nothing keeps its version); nobody sees it renewed"
            ));
        }
        if differs.is_empty() {
            return Ok(());
        }
        Err(Error::WriteNotConfirmed {
            target: lease_target(&self.namespace, &self.name),
            action,
            detail: differs.join("; "),
        })
    }
}

impl LeaseLock {
    /// Read the Lease: from what the watch delivered since the last read
    /// or write (a Lease at least as new as what a `GET` sent before it
    /// would have returned, or its deletion), or, for a `follower`, what
    /// the lock holds while the watch vouches nothing changed since;
    /// unless an update met a conflict since the server last answered
    /// (the watch may lag behind what it conflicted with). Otherwise ask
    /// the server.
    fn read(&mut self, deadline: &Deadline, follower: bool) -> Result<LeaderElectionRecord> {
        let seen = self
            .cached
            .as_ref()
            .and_then(|l| l.metadata.resource_version.as_deref());
        // Taken whatever happens; after a conflict, not used: the watch
        // may lag behind what it conflicted with.
        let answer = self
            .watched
            .answer(follower, Instant::now())
            .filter(|_| !self.behind);
        // Some(None): gone.
        let local = match answer {
            Some(Answer::Lease(w)) if self.check_identity(&w, "watch").is_err() => None,
            Some(Answer::Lease(w)) if newer(w.metadata.resource_version.as_deref(), seen) => {
                Some(Some(*w))
            }
            // The watch confirms what we hold (e.g. its first ADDED event).
            Some(Answer::Lease(w)) if w.metadata.resource_version.as_deref() == seen => {
                self.cached.clone().map(Some)
            }
            Some(Answer::Lease(_)) | None => None,
            Some(Answer::Deleted) => Some(None),
            Some(Answer::Unchanged) if self.gone => Some(None),
            Some(Answer::Unchanged) => self.cached.clone().map(Some),
        };
        self.local_get = local.is_some();
        let lease = match local {
            Some(Some(lease)) => lease,
            Some(None) => {
                self.gone = true;
                return Err(Error::Api {
                    target: lease_target(&self.namespace, &self.name),
                    action: "get",
                    status: crate::error::ApiStatus::new(
                        404,
                        "NotFound",
                        &format!(
                            "leases.coordination.k8s.io {:?} not found (its deletion came through the watch)",
                            self.name
                        ),
                    ),
                });
            }
            None => match self.client.get_lease(&self.namespace, &self.name, deadline) {
                Ok(lease) => {
                    self.behind = false;
                    self.watched
                        .known(lease.metadata.resource_version.as_deref());
                    lease
                }
                Err(e) => {
                    // An answer: the Lease is gone, as of now.
                    if e.is_not_found() {
                        self.gone = true;
                        self.behind = false;
                        self.watched.lock_holds(None, Instant::now());
                    }
                    return Err(e);
                }
            },
        };
        self.gone = false;
        self.check_identity(&lease, "get")?;
        let record = lease.record();
        let uid = |l: &Lease| l.metadata.uid.clone();
        self.recreated = matches!(
            (self.cached.as_ref().and_then(uid), uid(&lease)),
            (Some(was), Some(now)) if was != now
        );
        self.hold(lease);
        Ok(record)
    }

    /// The Lease as the last read or write answered it: what the lock
    /// holds, and what the watch's word answers for.
    fn hold(&mut self, lease: Lease) {
        self.watched
            .lock_holds(lease.metadata.resource_version.as_deref(), Instant::now());
        self.watched.object_is(lease.metadata.uid.as_deref());
        self.cached = Some(lease);
    }

    /// A write was not stored: when the server holds something we have
    /// not read (a conflict, a create that found the Lease there), which
    /// the watch may not have brought yet (or told otherwise), or when the
    /// write got no answer (it may have landed), the next read asks the
    /// server.
    fn not_stored(&mut self, e: &Error) {
        if e.is_conflict() || e.is_already_exists() || e.is_transport() {
            self.behind = true;
        }
    }
}

impl Lock for LeaseLock {
    /// A Lease delivered by the watch since the last read or write stands
    /// in for the `GET` (it is at least as new as what a `GET` sent before
    /// it would have returned), and so does a deletion it delivered,
    /// unless an update met a conflict since the server last answered
    /// (the watch may lag behind what it conflicted with); otherwise ask
    /// the server.
    fn get(&mut self, deadline: &Deadline) -> Result<LeaderElectionRecord> {
        self.read(deadline, false)
    }

    /// As [`get`](Lock::get), and while the watch vouches that it has
    /// brought every change up to the version last read or written (a
    /// sign of life in the last 30 s, or a read that showed it caught up),
    /// answered from what the lock holds.
    fn follow(&mut self, deadline: &Deadline) -> Result<LeaderElectionRecord> {
        self.read(deadline, true)
    }

    fn last_get_recreated(&self) -> bool {
        self.recreated
    }

    fn has_delivery(&self) -> bool {
        let seen = self
            .cached
            .as_ref()
            .and_then(|l| l.metadata.resource_version.as_deref());
        !self.behind && self.watched.holds(seen)
    }

    fn last_get_was_local(&self) -> bool {
        self.local_get
    }

    fn version(&self) -> Option<String> {
        self.cached
            .as_ref()
            .and_then(|l| l.metadata.resource_version.clone())
    }

    fn create(&mut self, record: &LeaderElectionRecord, deadline: &Deadline) -> Result<()> {
        let mut lease = Lease::new(&self.namespace, &self.name, record);
        self.apply_labels(&mut lease);
        let stored = self
            .client
            .create_lease(&lease, deadline)
            .inspect_err(|e| self.not_stored(e))?;
        self.behind = false;
        self.gone = false;
        self.watched
            .forget_older_than(stored.metadata.resource_version.as_deref());
        self.check_identity(&stored, "create")?;
        self.check_written(&lease, &stored, "create")?;
        self.hold(stored);
        Ok(())
    }

    fn update(&mut self, record: &LeaderElectionRecord, deadline: &Deadline) -> Result<()> {
        let mut lease = self.cached.clone().ok_or_else(|| Error::NotInitialized {
            lock: self.describe(),
        })?;
        lease.set_record(record);
        self.apply_labels(&mut lease);
        let stored = self
            .client
            .replace_lease(&lease, deadline)
            .inspect_err(|e| self.not_stored(e))?;
        self.behind = false;
        self.gone = false;
        self.watched
            .forget_older_than(stored.metadata.resource_version.as_deref());
        self.check_identity(&stored, "update")?;
        self.check_written(&lease, &stored, "update")?;
        // A Lease created anew has a new uid: ours had been deleted.
        self.created = matches!(
            (&lease.metadata.uid, &stored.metadata.uid),
            (Some(was), Some(now)) if was != now
        );
        self.hold(stored);
        Ok(())
    }

    fn last_update_created(&self) -> bool {
        self.created
    }

    fn identity(&self) -> &str {
        &self.identity
    }

    fn describe(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The namespace must be a DNS-1123 label, the name a DNS-1123
    /// subdomain, the identity non-empty without NUL.
    fn validate(&self) -> Result<()> {
        let lease = || {
            lease_target(
                &crate::text::escape(&self.namespace),
                &crate::text::escape(&self.name),
            )
        };
        let named = |e: Error| match e {
            Error::InvalidConfig(msg) => Error::InvalidConfig(format!("{}: {msg}", lease())),
            other => other,
        };
        crate::names::check_namespace(&self.namespace).map_err(named)?;
        crate::names::check_lease_name(&self.name).map_err(named)?;
        crate::names::check_identity(&self.identity).map_err(named)
    }

    fn record_event(&self, message: &str) {
        if let (Some(sink), Some(lease)) = (&self.events, &self.cached) {
            sink.record(lease, message);
        }
    }

    fn watch(&self, on_change: Wakeup, backoff: Duration) -> Option<Result<Watcher>> {
        Some(Watcher::spawn(
            self.client.clone(),
            &self.namespace,
            &self.name,
            self.watched.clone(),
            on_change,
            backoff,
        ))
    }
}

/// A unique candidate identity, `<hostname>_<uuid>` as library-go builds it
/// (a bare uuid when the hostname is unknown).
///
/// The hostname is read from `/proc/sys/kernel/hostname`, else from `HOSTNAME`.
pub fn identity() -> String {
    identity_with_hostname(hostname().as_deref())
}

/// [`identity`] with the hostname given (trimmed; `None` or blank gives a bare uuid).
pub fn identity_with_hostname(hostname: Option<&str>) -> String {
    let id = crate::random::uuid_v4();
    match hostname.map(str::trim).filter(|h| !h.is_empty()) {
        Some(h) => format!("{h}_{id}"),
        None => id.to_string(),
    }
}

fn hostname() -> Option<String> {
    let from_proc = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    [from_proc, std::env::var("HOSTNAME").ok()]
        .into_iter()
        .flatten()
        .map(|h| h.trim().to_string())
        .find(|h| !h.is_empty())
}

#[cfg(test)]
mod tests {
    use super::{identity, identity_with_hostname, newer};

    #[test]
    fn watched_versions_must_be_newer() {
        assert!(newer(Some("7"), Some("6")));
        assert!(!newer(Some("6"), Some("6")));
        assert!(!newer(Some("5"), Some("6")), "a late delivery is stale");
        assert!(newer(Some("5"), None));
        assert!(!newer(None, Some("5")));
        assert!(newer(Some("b"), Some("a")));
        assert!(!newer(Some("a"), Some("a")));
    }

    /// A write refused with a conflict says the server holds something
    /// newer than the version written against; the watch may not have
    /// caught up with it. Here our own renew landed (its answer lost)
    /// after a foreign release the watch delivered: answered from the
    /// watch, the read that follows the conflict would show the Lease
    /// free, and a release would not be written.
    #[cfg(feature = "testing")]
    #[test]
    fn after_a_conflict_the_next_read_asks_the_server_not_the_watch() {
        use super::{LeaseLock, Lock};
        use crate::deadline::Deadline;
        use crate::lease::{LeaderElectionRecord, Lease};
        use crate::testing::TestApiServer;
        use crate::Client;
        use std::time::Duration;

        let server = TestApiServer::start().unwrap();
        server.add_namespace("ns");
        let record = |holder: &str| LeaderElectionRecord {
            holder_identity: holder.into(),
            lease_duration_seconds: 15,
            ..Default::default()
        };
        let deadline = || Deadline::from_now(Duration::from_secs(5));
        let client = Client::new(server.client_config("a")).unwrap();
        let mut a = LeaseLock::new(client, "ns", "l", "a");
        a.create(&record("a"), &deadline()).unwrap();
        // Another writer frees it; the watch delivers that.
        server.put_lease("ns", &Lease::new("ns", "l", &record("")));
        a.watched.set(server.lease("ns", "l"));
        // A write of ours lands over it, its answer lost.
        server.put_lease("ns", &Lease::new("ns", "l", &record("a")));
        let err = a.update(&record("a"), &deadline()).unwrap_err();
        assert!(err.is_conflict(), "{err}");
        let read = a.get(&deadline()).unwrap();
        assert!(!a.last_get_was_local(), "answered from the watch");
        assert_eq!(read.holder_identity, "a");
        server.shutdown();
    }

    #[test]
    fn identity_is_hostname_and_uuid() {
        let id = identity_with_hostname(Some(" node-1\n"));
        let (host, rest) = id.split_once('_').unwrap();
        assert_eq!(host, "node-1");
        assert!(uuid::Uuid::parse_str(rest).is_ok(), "{id}");
        assert_ne!(
            identity_with_hostname(Some("h")),
            identity_with_hostname(Some("h"))
        );
        for none in [None, Some(""), Some("  ")] {
            let id = identity_with_hostname(none);
            assert!(uuid::Uuid::parse_str(&id).is_ok(), "{id}");
        }
        assert!(!identity().is_empty());
    }
}
