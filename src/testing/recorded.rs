//! Events as a test reads them back: [`RecordedEvent`].

use serde_json::Value;

/// An Event a program recorded on the test server (through core/v1 or
/// `events.k8s.io/v1`), read back by
/// [`TestApiServer::events`](super::TestApiServer::events).
///
/// ```
/// use lease_elector::testing::TestApiServer;
///
/// let server = TestApiServer::start()?;
/// // ... run a candidate that records its transitions ...
/// for e in server.events() {
///     println!("{} {} {}: {}", e.event_type, e.reason, e.involved_name, e.message);
/// }
/// # server.shutdown();
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordedEvent {
    /// The Event's namespace.
    pub namespace: String,
    /// The Event's name.
    pub name: String,
    /// `Normal` or `Warning`.
    pub event_type: String,
    /// `LeaderElection`, ...
    pub reason: String,
    /// What happened, in words (`pod-a became leader`).
    pub message: String,
    /// The kind of the object it is about (`Lease`).
    pub involved_kind: String,
    /// The name of the object it is about.
    pub involved_name: String,
    /// The namespace of the object it is about.
    pub involved_namespace: String,
    /// The uid of the object it is about.
    pub involved_uid: String,
    /// Who recorded it: `source.component`, else `reportingComponent`.
    pub component: String,
    /// How many times it happened (`count`, or `series.count`; at least 1).
    pub count: u32,
}

impl RecordedEvent {
    /// Read from a stored core/v1 Event.
    pub(crate) fn of(e: &Value) -> RecordedEvent {
        let text = |path: &[&str]| {
            path.iter()
                .try_fold(e, |v, k| v.get(k))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let component = match text(&["source", "component"]) {
            c if c.is_empty() => text(&["reportingComponent"]),
            c => c,
        };
        let count = e["series"]["count"]
            .as_u64()
            .or_else(|| e["count"].as_u64())
            .and_then(|c| u32::try_from(c).ok())
            .unwrap_or(1)
            .max(1);
        RecordedEvent {
            namespace: text(&["metadata", "namespace"]),
            name: text(&["metadata", "name"]),
            event_type: text(&["type"]),
            reason: text(&["reason"]),
            message: text(&["message"]),
            involved_kind: text(&["involvedObject", "kind"]),
            involved_name: text(&["involvedObject", "name"]),
            involved_namespace: text(&["involvedObject", "namespace"]),
            involved_uid: text(&["involvedObject", "uid"]),
            component,
            count,
        }
    }
}
