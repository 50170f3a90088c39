//! OpenShift-style leader-election configuration: the
//! `config.openshift.io/v1` [`LeaderElection`] stanza, library-go's
//! defaulting (137s / 107s / 26s, or 270s / 240s / 60s on single-node
//! clusters), the [`Tolerances`] those timings buy, and
//! [`LeaderElection::elector`] to turn it into an elector.
//!
//! ```no_run
//! use lease_elector::openshift::LeaderElection;
//! use lease_elector::{Client, ClientConfig};
//!
//! let file = LeaderElection::from_json(r#"{"name": "my-operator-lock"}"#)?;
//! // Zero timings become OpenShift's defaults; the namespace comes from the
//! // service account when neither the file nor the caller gives one.
//! let cfg = file.defaulted("", "my-operator-lock");
//! let client = Client::new(ClientConfig::in_cluster()?)?;
//! match cfg.elector(client, "my-operator", "")? {
//!     None => { /* disabled: run as leader without electing */ }
//!     Some(builder) => {
//!         builder.build()?.run(|term| {
//!             while term.is_current() { /* one step of the work */ }
//!         })?;
//!     }
//! }
//! # Ok::<(), lease_elector::Error>(())
//! ```

use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::client::{namespace_from_dir, Client, SERVICE_ACCOUNT_DIR};
use crate::duration::{format_go_duration, go_duration, parse_go_duration};
use crate::elector::{ElectorBuilder, ElectorConfig, LeaderElector};
use crate::error::{Error, Result};
use crate::events::EventRecorder;
use crate::lock::{identity, LeaseLock, Lock};

/// OpenShift's default lease duration (`137s`).
const DEFAULT_LEASE_DURATION: Duration = LeaderElection::DEFAULT_LEASE_DURATION;
/// OpenShift's default renew deadline (`107s`).
const DEFAULT_RENEW_DEADLINE: Duration = LeaderElection::DEFAULT_RENEW_DEADLINE;
/// OpenShift's default retry period (`26s`).
const DEFAULT_RETRY_PERIOD: Duration = LeaderElection::DEFAULT_RETRY_PERIOD;
/// Single-node OpenShift lease duration (`270s`).
const SNO_LEASE_DURATION: Duration = LeaderElection::SINGLE_NODE_LEASE_DURATION;
/// Single-node OpenShift renew deadline (`240s`).
const SNO_RENEW_DEADLINE: Duration = LeaderElection::SINGLE_NODE_RENEW_DEADLINE;
/// Single-node OpenShift retry period (`60s`).
const SNO_RETRY_PERIOD: Duration = LeaderElection::SINGLE_NODE_RETRY_PERIOD;

/// The `config.openshift.io/v1` `LeaderElection` stanza.
///
/// Reads JSON like
/// `{"namespace": "ns", "name": "lock", "leaseDuration": "137s", "renewDeadline": "1m47s", "retryPeriod": "26s"}`;
/// every field may be absent (zero or empty), unknown fields are ignored,
/// durations are Go strings (or Go's `{"Duration": <nanoseconds>}`) and
/// may not be negative. Zero durations mean "use the default": see
/// [`LeaderElection::defaulted`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", try_from = "Map<String, Value>")]
#[non_exhaustive]
pub struct LeaderElection {
    /// Do not elect: [`LeaderElection::elector`] gives `None`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub disable: bool,
    /// Namespace of the Lease.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name of the Lease.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// How long non-leaders wait after the last renew before taking over.
    #[serde(with = "go_duration")]
    pub lease_duration: Duration,
    /// How long the leader retries a failing renew before stepping down.
    #[serde(with = "go_duration")]
    pub renew_deadline: Duration,
    /// Wait between attempts.
    #[serde(with = "go_duration")]
    pub retry_period: Duration,
}

/// Read field by field from a JSON object so that errors name the field
/// and the value; unknown fields are ignored.
impl TryFrom<Map<String, Value>> for LeaderElection {
    type Error = String;

    fn try_from(mut obj: Map<String, Value>) -> Result<Self, String> {
        let mut take = |field: &str| obj.remove(field).unwrap_or(Value::Null);
        Ok(LeaderElection {
            disable: match take("disable") {
                Value::Null => false,
                Value::Bool(b) => b,
                other => return Err(format!("disable: expected true or false, got {other}")),
            },
            namespace: string_field("namespace", take("namespace"))?,
            name: string_field("name", take("name"))?,
            lease_duration: duration_field("leaseDuration", &take("leaseDuration"))?,
            renew_deadline: duration_field("renewDeadline", &take("renewDeadline"))?,
            retry_period: duration_field("retryPeriod", &take("retryPeriod"))?,
        })
    }
}

fn string_field(field: &str, v: Value) -> Result<String, String> {
    match v {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s),
        other => Err(format!("{field}: expected a string, got {other}")),
    }
}

fn duration_field(field: &str, v: &Value) -> Result<Duration, String> {
    match v {
        Value::Null => Ok(Duration::ZERO),
        Value::String(s) => parse_go_duration(s).map_err(|e| format!("{field}: {e}")),
        Value::Object(map) => match map.get("Duration").and_then(Value::as_i64) {
            Some(nanos) => {
                go_duration::nanos_to_duration(nanos).map_err(|e| format!("{field}: {e}"))
            }
            None => Err(format!(
                "{field}: expected a Go duration string such as \"137s\", got {v}"
            )),
        },
        other => Err(format!(
            "{field}: expected a Go duration string such as \"137s\", got {other}"
        )),
    }
}

impl LeaderElection {
    /// Read the stanza from JSON; errors name the field and the bad value.
    pub fn from_json(json: &str) -> Result<Self> {
        let obj: Map<String, Value> = serde_json::from_str(json)
            .map_err(|e| Error::InvalidConfig(format!("not a LeaderElection object: {e}")))?;
        LeaderElection::try_from(obj).map_err(Error::InvalidConfig)
    }

    /// Read the stanza from YAML, as operator configs mounted from a
    /// ConfigMap usually are:
    ///
    /// ```
    /// let c = lease_elector::openshift::LeaderElection::from_yaml(
    ///     "namespace: openshift-foo\nname: foo-lock\nleaseDuration: 137s\ndisable: false\n",
    /// )?;
    /// assert_eq!(c.lease_duration.as_secs(), 137);
    /// # Ok::<(), lease_elector::Error>(())
    /// ```
    ///
    /// Durations are Go strings as in JSON; `disable` is `true` or `false`.
    /// YAML the built-in reader does not take (anchors, tags, ...) is an
    /// error naming the line.
    pub fn from_yaml(yaml: &str) -> Result<Self> {
        let bad = |e: String| Error::InvalidConfig(format!("not a LeaderElection object: {e}"));
        let mut obj = match crate::client::yaml::parse(yaml).map_err(|e| bad(e.to_string()))? {
            Value::Object(obj) => obj,
            Value::Null => Map::new(),
            other => return Err(bad(format!("expected a mapping, got {other}"))),
        };
        // YAML scalars arrive as text; only `disable` is not a string.
        if let Some(v) = obj.get_mut("disable") {
            match v.as_str() {
                Some("true" | "True" | "TRUE") => *v = Value::Bool(true),
                Some("false" | "False" | "FALSE") => *v = Value::Bool(false),
                _ => {}
            }
        }
        LeaderElection::try_from(obj).map_err(Error::InvalidConfig)
    }

    /// Read the stanza from a file: JSON when it starts with `{`, else YAML.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = crate::client::file::read_capped(
            "leader election config",
            path,
            crate::client::file::MAX_CONFIG,
        )?;
        let text = String::from_utf8(text).map_err(|e| Error::ReadFile {
            what: "leader election config",
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        })?;
        let parsed = if text.trim_start().starts_with('{') {
            Self::from_json(&text)
        } else {
            Self::from_yaml(&text)
        };
        parsed.map_err(|e| match e {
            Error::InvalidConfig(msg) => Error::InvalidConfig(format!("{}: {msg}", path.display())),
            other => other,
        })
    }

    /// What these timings tolerate; see [`Tolerances`].
    pub fn tolerances(&self) -> Tolerances {
        Tolerances::of(self.lease_duration, self.renew_deadline, self.retry_period)
    }

    /// The elector settings these timings give, releasing the Lease on stop
    /// (as library-go does).
    #[doc(hidden)]
    pub fn elector_config(&self) -> ElectorConfig {
        ElectorConfig {
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
            release_on_cancel: true,
            ..ElectorConfig::default()
        }
    }
}

/// What a set of timings tolerates, as reasoned in library-go's defaulting.
///
/// ```
/// use lease_elector::openshift::LeaderElection;
/// let t = LeaderElection::default().defaulted("ns", "lock").tolerances();
/// assert_eq!(t.to_string(), "leader election tolerates 4 retries \
///     (renewDeadline 1m47s / retryPeriod 26s), 30s of clock skew, 1m18s of \
///     API server downtime; worst-case acquisition 2m43s (non-graceful), 26s (graceful)");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tolerances {
    /// Renew attempts before the leader gives up: `floor(renewDeadline / retryPeriod)`
    /// (0 when the retry period is zero).
    pub retries: u64,
    /// Clock skew between candidates that is still safe: `leaseDuration − renewDeadline`.
    pub clock_skew: Duration,
    /// API server outage the leader survives: `(retries − 1) × retryPeriod`.
    pub api_server_downtime: Duration,
    /// Longest wait for a new leader when the old one died: `leaseDuration + retryPeriod`.
    pub worst_non_graceful_acquisition: Duration,
    /// Longest wait for a new leader when the old one released: `retryPeriod`.
    pub worst_graceful_acquisition: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
}

impl Tolerances {
    /// The tolerances of these timings.
    pub fn of(lease_duration: Duration, renew_deadline: Duration, retry_period: Duration) -> Self {
        let retries = if retry_period.is_zero() {
            0
        } else {
            u64::try_from(renew_deadline.as_nanos() / retry_period.as_nanos()).unwrap_or(u64::MAX)
        };
        let downtime = u32::try_from(retries.saturating_sub(1))
            .ok()
            .and_then(|n| retry_period.checked_mul(n))
            .unwrap_or(Duration::MAX);
        Tolerances {
            retries,
            clock_skew: lease_duration.saturating_sub(renew_deadline),
            api_server_downtime: downtime,
            worst_non_graceful_acquisition: lease_duration.saturating_add(retry_period),
            worst_graceful_acquisition: retry_period,
            renew_deadline,
            retry_period,
        }
    }
}

impl fmt::Display for Tolerances {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = format_go_duration;
        write!(
            f,
            "leader election tolerates {} retries (renewDeadline {} / retryPeriod {}), \
             {} of clock skew, {} of API server downtime; \
             worst-case acquisition {} (non-graceful), {} (graceful)",
            self.retries,
            g(self.renew_deadline),
            g(self.retry_period),
            g(self.clock_skew),
            g(self.api_server_downtime),
            g(self.worst_non_graceful_acquisition),
            g(self.worst_graceful_acquisition),
        )
    }
}

impl LeaderElection {
    /// OpenShift's default lease duration (`137s`).
    pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(137);
    /// OpenShift's default renew deadline (`107s`).
    pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(107);
    /// OpenShift's default retry period (`26s`).
    pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(26);
    /// The single-node lease duration (`270s`).
    pub const SINGLE_NODE_LEASE_DURATION: Duration = Duration::from_secs(270);
    /// The single-node renew deadline (`240s`).
    pub const SINGLE_NODE_RENEW_DEADLINE: Duration = Duration::from_secs(240);
    /// The single-node retry period (`60s`).
    pub const SINGLE_NODE_RETRY_PERIOD: Duration = Duration::from_secs(60);

    /// library-go's `LeaderElectionDefaulting`: a copy with zero durations
    /// set to 137s / 107s / 26s, an empty namespace set to
    /// `default_namespace` or else to the pod's service-account namespace
    /// (the file `/var/run/secrets/kubernetes.io/serviceaccount/namespace`;
    /// outside a pod there is none, the namespace stays empty and
    /// [`elector`](LeaderElection::elector) refuses it: pass one), and an
    /// empty name set to `default_name`.
    ///
    /// ```
    /// use lease_elector::openshift::LeaderElection;
    /// let c = LeaderElection::default().defaulted("ns", "lock");
    /// assert_eq!((c.namespace.as_str(), c.name.as_str()), ("ns", "lock"));
    /// assert_eq!(c.lease_duration, LeaderElection::DEFAULT_LEASE_DURATION);
    /// ```
    pub fn defaulted(&self, default_namespace: &str, default_name: &str) -> LeaderElection {
        self.defaulted_with_sa_dir(
            default_namespace,
            default_name,
            Path::new(SERVICE_ACCOUNT_DIR),
        )
    }

    /// [`LeaderElection::defaulted`], reading the fallback namespace from
    /// `sa_dir/namespace` (trimmed; ignored when empty or unreadable).
    #[doc(hidden)]
    pub fn defaulted_with_sa_dir(
        &self,
        default_namespace: &str,
        default_name: &str,
        sa_dir: &Path,
    ) -> LeaderElection {
        let mut out = self.clone();
        // 137-107 = 30s of clock skew; 107/26 = 4 renew attempts, surviving 78s
        // of API server downtime; worst-case takeover 137+26 = 163s.
        if out.lease_duration.is_zero() {
            out.lease_duration = DEFAULT_LEASE_DURATION;
        }
        if out.renew_deadline.is_zero() {
            out.renew_deadline = DEFAULT_RENEW_DEADLINE;
        }
        if out.retry_period.is_zero() {
            out.retry_period = DEFAULT_RETRY_PERIOD;
        }
        if out.namespace.is_empty() {
            if !default_namespace.is_empty() {
                out.namespace = default_namespace.to_string();
            } else if let Some(ns) = namespace_from_dir(sa_dir) {
                out.namespace = ns;
            }
        }
        if out.name.is_empty() {
            out.name = default_name.to_string();
        }
        out
    }

    /// library-go's `LeaderElectionSNOConfig`: a copy with the single-node
    /// timings 270s / 240s / 60s (fewer API calls on a small control plane,
    /// still 30s of clock skew and 4 retries), everything else kept.
    ///
    /// ```
    /// use lease_elector::openshift::LeaderElection;
    /// let sno = LeaderElection::default().defaulted("ns", "lock").single_node();
    /// assert_eq!(sno.retry_period.as_secs(), 60);
    /// ```
    pub fn single_node(&self) -> LeaderElection {
        LeaderElection {
            lease_duration: SNO_LEASE_DURATION,
            renew_deadline: SNO_RENEW_DEADLINE,
            retry_period: SNO_RETRY_PERIOD,
            ..self.clone()
        }
    }

    /// An elector builder for this (usually [defaulted](LeaderElection::defaulted))
    /// stanza, as library-go's `ToLeaderElectionWithLease`: its Lease and
    /// timings, `release_on_cancel(true)`, transitions recorded as Events
    /// from `component` (the Lease name when empty) reported by `identity`
    /// ([`identity()`](crate::identity) when empty). Add settings, then
    /// `build()?.run(..)` or `spawn()`.
    ///
    /// - `disable: true` gives `None`: run as the leader straight away,
    ///   without a Lease (what library-go's controller command does); no
    ///   elector, thread or API request is made, and nothing else is checked.
    /// - An empty namespace or name is an [`Error::InvalidConfig`] (outside
    ///   a pod, [`defaulted`](LeaderElection::defaulted) has no
    ///   service-account namespace to fall back to: pass the namespace);
    ///   so are timings the elector would refuse (checked here, before
    ///   anything starts).
    /// - The [`Tolerances`] are logged once at info level.
    ///
    /// ```
    /// use lease_elector::openshift::LeaderElection;
    /// use lease_elector::{Client, ClientConfig};
    /// let client = Client::new(ClientConfig::new("http://127.0.0.1:8001"))?;
    /// let cfg = LeaderElection::from_json(r#"{"disable": true}"#)?;
    /// assert!(cfg.elector(client, "my-operator", "")?.is_none());
    /// # Ok::<(), lease_elector::Error>(())
    /// ```
    pub fn elector(
        &self,
        client: Client,
        component: &str,
        identity: &str,
    ) -> Result<Option<ElectorBuilder>> {
        if self.disable {
            log::info!("leader election is disabled: running as leader without electing");
            return Ok(None);
        }
        if self.namespace.is_empty() {
            // Outside a pod, defaulted("", ..) has no service-account file
            // to fall back to: say where the namespace can come from.
            return Err(Error::InvalidConfig(format!(
                "namespace may not be empty: set \"namespace\" in the LeaderElection stanza, \
                 or pass it as the first argument of defaulted(namespace, name); an empty one \
                 falls back to the service account's namespace file ({SERVICE_ACCOUNT_DIR}/namespace), \
                 which exists only in a pod"
            )));
        }
        if self.name.is_empty() {
            return Err(Error::InvalidConfig("name may not be empty".into()));
        }
        let identity = if identity.is_empty() {
            self::identity()
        } else {
            identity.to_string()
        };
        let elector_config = self.elector_config();
        elector_config.validate(&identity)?;
        let component = if component.is_empty() {
            &self.name
        } else {
            component
        };
        let events = EventRecorder::new(client.clone(), component).with_instance(identity.clone());
        let lock =
            LeaseLock::new(client, &self.namespace, &self.name, identity).with_events(events);
        lock.validate()?;
        log::info!("lease {}: {}", lock.describe(), self.tolerances());
        Ok(Some(LeaderElector::builder(lock).config(elector_config)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ClientConfig;
    use crate::test_dir::TempDir;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn reads_openshift_json() {
        let c = LeaderElection::from_json(
            r#"{"disable": false, "namespace": "openshift-foo", "name": "foo-lock",
                "leaseDuration": "137s", "renewDeadline": "1m47s", "retryPeriod": "26s",
                "someFutureField": {"x": 1}}"#,
        )
        .unwrap();
        assert_eq!(
            c,
            LeaderElection {
                disable: false,
                namespace: "openshift-foo".into(),
                name: "foo-lock".into(),
                lease_duration: secs(137),
                renew_deadline: secs(107),
                retry_period: secs(26),
            }
        );
        assert_eq!(
            LeaderElection::from_json("{}").unwrap(),
            LeaderElection::default()
        );
        let c = LeaderElection::from_json(
            r#"{"disable": true, "namespace": null, "leaseDuration": {"Duration": 1500000000}}"#,
        )
        .unwrap();
        assert!(c.disable);
        assert_eq!(c.lease_duration, Duration::from_millis(1500));
        // The same through serde, for configs embedding the stanza.
        let c: LeaderElection = serde_json::from_str(r#"{"retryPeriod": "1m"}"#).unwrap();
        assert_eq!(c.retry_period, secs(60));
        let e = serde_json::from_str::<LeaderElection>(r#"{"retryPeriod": "1x"}"#).unwrap_err();
        assert!(e.to_string().contains("retryPeriod: \"1x\""), "{e}");
        assert!(serde_json::from_str::<LeaderElection>("[false]").is_err());
    }

    #[test]
    fn errors_name_field_and_value() {
        let cases = [
            (
                r#"{"leaseDuration": "13x"}"#,
                r#"leaseDuration: "13x": unknown unit "x""#,
            ),
            (
                r#"{"renewDeadline": "-5s"}"#,
                r#"renewDeadline: "-5s": negative"#,
            ),
            (
                r#"{"retryPeriod": "10"}"#,
                r#"retryPeriod: "10": missing unit"#,
            ),
            (
                r#"{"retryPeriod": 10}"#,
                "retryPeriod: expected a Go duration string",
            ),
            (
                r#"{"leaseDuration": {"Duration": -1}}"#,
                "leaseDuration: -1ns: negative",
            ),
            (
                r#"{"disable": "yes"}"#,
                r#"disable: expected true or false, got "yes""#,
            ),
            (r#"{"name": 3}"#, "name: expected a string, got 3"),
            ("[1]", "not a LeaderElection object"),
            ("{", "not a LeaderElection object"),
        ];
        for (json, want) in cases {
            let err = LeaderElection::from_json(json).unwrap_err();
            assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
            assert!(err.to_string().contains(want), "{json}: {err}");
        }
    }

    #[test]
    fn yaml_reads_like_json() {
        let json = LeaderElection::from_json(
            r#"{"disable": true, "namespace": "openshift-foo", "name": "foo-lock",
                "leaseDuration": "137s", "renewDeadline": "1m47s", "retryPeriod": "26s"}"#,
        )
        .unwrap();
        let yaml = LeaderElection::from_yaml(
            "# from a ConfigMap\ndisable: true\nnamespace: openshift-foo\nname: 'foo-lock'\n\
             leaseDuration: 137s\nrenewDeadline: \"1m47s\"\nretryPeriod: 26s  # default\n\
             someFutureField: {x: 1}\n",
        )
        .unwrap();
        assert_eq!(yaml, json);
        assert_eq!(
            LeaderElection::from_yaml("").unwrap(),
            LeaderElection::default()
        );
        assert_eq!(
            LeaderElection::from_yaml("namespace: ~\ndisable: False\n").unwrap(),
            LeaderElection::default()
        );
        for (yaml, want) in [
            (
                "leaseDuration: 13x\n",
                r#"leaseDuration: "13x": unknown unit "x""#,
            ),
            (
                "disable: yes\n",
                r#"disable: expected true or false, got "yes""#,
            ),
            ("name: [a]\n", "name: expected a string"),
            ("name: *a\n", "line 1: the alias *a has no anchor"),
            ("- a\n", "expected a mapping"),
        ] {
            let err = LeaderElection::from_yaml(yaml).unwrap_err();
            assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
            assert!(err.to_string().contains(want), "{yaml}: {err}");
        }
    }

    #[test]
    fn from_file_reports_path() {
        let tmp = TempDir::new();
        let dir = &tmp.0;
        let path = dir.join("le.json");
        std::fs::write(&path, r#"{"name": "x", "retryPeriod": "2s"}"#).unwrap();
        let c = LeaderElection::from_file(&path).unwrap();
        assert_eq!((c.name.as_str(), c.retry_period), ("x", secs(2)));
        std::fs::write(&path, r#"{"leaseDuration": "13x"}"#).unwrap();
        let err = LeaderElection::from_file(&path).unwrap_err().to_string();
        assert!(
            err.contains("le.json") && err.contains("unknown unit"),
            "{err}"
        );
        let yaml = dir.join("le.yaml");
        std::fs::write(&yaml, "name: x\nretryPeriod: 2s\n").unwrap();
        let c = LeaderElection::from_file(&yaml).unwrap();
        assert_eq!((c.name.as_str(), c.retry_period), ("x", secs(2)));
        std::fs::write(&yaml, "name: x\n  retryPeriod: 2s\n").unwrap();
        let err = LeaderElection::from_file(&yaml).unwrap_err().to_string();
        assert!(err.contains("le.yaml") && err.contains("line 2"), "{err}");
        let err = LeaderElection::from_file(dir.join("missing.json")).unwrap_err();
        assert!(matches!(err, Error::ReadFile { .. }), "{err:?}");
        assert!(err.to_string().contains("missing.json"), "{err}");
    }

    #[test]
    fn serializes_as_go_would() {
        let c = LeaderElection::default().defaulted("ns", "lock");
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            r#"{"namespace":"ns","name":"lock","leaseDuration":"2m17s","renewDeadline":"1m47s","retryPeriod":"26s"}"#
        );
        let back: LeaderElection =
            serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn defaulting_follows_library_go() {
        let tmp = TempDir::new();
        let sa = &tmp.0;
        std::fs::write(sa.join("namespace"), " from-sa \n").unwrap();
        let input = LeaderElection::default();
        let d = input.defaulted_with_sa_dir("", "my-lock", sa);
        assert_eq!(input, LeaderElection::default(), "input untouched");
        assert_eq!(
            (d.lease_duration, d.renew_deadline, d.retry_period),
            (secs(137), secs(107), secs(26))
        );
        assert_eq!(d.namespace, "from-sa");
        assert_eq!(d.name, "my-lock");
        // The caller's default namespace wins over the service account.
        let d = input.defaulted_with_sa_dir("given", "my-lock", sa);
        assert_eq!(d.namespace, "given");
        // Set values are kept.
        let set = LeaderElection {
            namespace: "mine".into(),
            name: "lock".into(),
            lease_duration: secs(60),
            renew_deadline: Duration::ZERO,
            retry_period: secs(5),
            disable: true,
        };
        let d = set.defaulted_with_sa_dir("given", "other", sa);
        assert_eq!(
            d,
            LeaderElection {
                renew_deadline: secs(107),
                ..set.clone()
            }
        );
        // Blank or missing service-account namespace is ignored.
        std::fs::write(sa.join("namespace"), "  \n").unwrap();
        assert_eq!(input.defaulted_with_sa_dir("", "n", sa).namespace, "");
        std::fs::remove_file(sa.join("namespace")).unwrap();
        assert_eq!(input.defaulted_with_sa_dir("", "n", sa).namespace, "");
    }

    #[test]
    fn single_node_overrides_timings_only() {
        let c = LeaderElection {
            namespace: "ns".into(),
            name: "n".into(),
            lease_duration: secs(1),
            ..LeaderElection::default()
        };
        let s = c.single_node();
        assert_eq!(
            (s.lease_duration, s.renew_deadline, s.retry_period),
            (secs(270), secs(240), secs(60))
        );
        assert_eq!((s.namespace.as_str(), s.name.as_str()), ("ns", "n"));
    }

    #[test]
    fn tolerances_match_library_go_reasoning() {
        let d = LeaderElection::default().defaulted("ns", "n").tolerances();
        assert_eq!(
            (
                d.retries,
                d.clock_skew,
                d.api_server_downtime,
                d.worst_non_graceful_acquisition,
                d.worst_graceful_acquisition
            ),
            (4, secs(30), secs(78), secs(163), secs(26))
        );
        let s = LeaderElection::default().single_node().tolerances();
        assert_eq!(
            (
                s.retries,
                s.clock_skew,
                s.api_server_downtime,
                s.worst_non_graceful_acquisition,
                s.worst_graceful_acquisition
            ),
            (4, secs(30), secs(180), secs(330), secs(60))
        );
        assert_eq!(
            s.to_string(),
            "leader election tolerates 4 retries (renewDeadline 4m0s / retryPeriod 1m0s), \
             30s of clock skew, 3m0s of API server downtime; \
             worst-case acquisition 5m30s (non-graceful), 1m0s (graceful)"
        );
        // Degenerate timings saturate instead of panicking.
        let z = Tolerances::of(Duration::ZERO, secs(10), Duration::ZERO);
        assert_eq!(
            (z.retries, z.clock_skew, z.api_server_downtime),
            (0, Duration::ZERO, Duration::ZERO)
        );
        let big = Tolerances::of(Duration::MAX, Duration::MAX, Duration::from_nanos(1));
        assert_eq!(big.api_server_downtime, Duration::MAX);
        assert_eq!(big.worst_non_graceful_acquisition, Duration::MAX);
    }

    fn client() -> Client {
        Client::new(ClientConfig::new("http://127.0.0.1:1")).unwrap()
    }

    #[test]
    fn outside_a_pod_an_empty_namespace_is_refused_with_where_to_give_it() {
        // No service-account namespace file: as on a laptop or in CI.
        let no_pod = TempDir::new();
        let cfg = LeaderElection::default().defaulted_with_sa_dir("", "lock", &no_pod.0);
        assert_eq!(cfg.namespace, "");
        let err = cfg.elector(client(), "c", "me").unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
        for fix in [
            "namespace may not be empty",
            "\"namespace\" in the LeaderElection stanza",
            "first argument of defaulted(namespace, name)",
            "/var/run/secrets/kubernetes.io/serviceaccount/namespace",
        ] {
            assert!(text.contains(fix), "{fix:?} missing from: {text}");
        }
    }

    #[test]
    fn elector_checks_and_builds() {
        let good = LeaderElection::default().defaulted("ns", "lock");
        let disabled = LeaderElection {
            disable: true,
            ..LeaderElection::default()
        };
        assert!(disabled.elector(client(), "c", "me").unwrap().is_none());
        for (cfg, want) in [
            (
                LeaderElection {
                    namespace: String::new(),
                    ..good.clone()
                },
                "namespace may not be empty",
            ),
            (
                LeaderElection {
                    name: String::new(),
                    ..good.clone()
                },
                "name may not be empty",
            ),
            // Not defaulted: zero timings are refused before anything starts.
            (
                LeaderElection {
                    namespace: "ns".into(),
                    name: "n".into(),
                    ..LeaderElection::default()
                },
                "leaseDuration",
            ),
        ] {
            let err = cfg.elector(client(), "c", "me").unwrap_err();
            assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
            assert!(err.to_string().contains(want), "{err}");
        }
        let builder = good.elector(client(), "c", "me").unwrap().unwrap();
        let elector = builder.build().unwrap();
        let c = elector.config();
        assert_eq!(
            (
                c.lease_duration,
                c.renew_deadline,
                c.retry_period,
                c.release_on_cancel
            ),
            (secs(137), secs(107), secs(26), true)
        );
        // An empty identity is generated.
        assert!(good
            .elector(client(), "c", "")
            .unwrap()
            .unwrap()
            .build()
            .is_ok());
    }
}
