//! Wire types: `coordination.k8s.io/v1` Lease, `MicroTime`, `Status`, and the
//! leader-election record the elector reasons about.
//!
//! Every object keeps the fields it does not know in an `extra` map so a
//! GET followed by a PUT never drops what another writer put there.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::calendar::{self, Digits};
use serde_json::{Map, Value};

/// `apiVersion` of the Lease objects this crate reads and writes.
pub const LEASE_API_VERSION: &str = "coordination.k8s.io/v1";

/// A Kubernetes `MicroTime`: microsecond precision, always written in UTC as
/// `2006-01-02T15:04:05.000000Z`, read leniently (any fraction, any offset).
///
/// ```
/// use lease_elector::MicroTime;
/// use std::time::{Duration, UNIX_EPOCH};
///
/// let t = MicroTime::from_system_time(UNIX_EPOCH + Duration::from_micros(1_796_205_600_500_000));
/// assert_eq!(t.to_string(), "2026-12-02T10:00:00.500000Z");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MicroTime {
    micros: i64,
}

impl MicroTime {
    /// The time `t`, truncated to microseconds (and held within the years
    /// 0000 to 9999, which RFC 3339 can write).
    pub fn from_system_time(t: SystemTime) -> Self {
        let micros = match t.duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
            Err(e) => i64::try_from(e.duration().as_micros())
                .map(|m| -m)
                .unwrap_or(i64::MIN),
        };
        MicroTime {
            micros: micros.clamp(MIN_MICROS, MAX_MICROS),
        }
    }

    /// The same instant as a [`SystemTime`].
    pub fn to_system_time(self) -> SystemTime {
        let magnitude = Duration::from_micros(self.micros.unsigned_abs());
        if self.micros >= 0 {
            UNIX_EPOCH + magnitude
        } else {
            UNIX_EPOCH - magnitude
        }
    }

    /// The `metav1.Time` wire form (Events): RFC 3339, whole seconds, UTC.
    pub(crate) fn rfc3339_seconds(self) -> String {
        self.rfc3339(Digits::Seconds)
    }

    /// Through the crate's one formatter of times (`calendar`), which has
    /// an answer for every value.
    fn rfc3339(self, digits: Digits) -> String {
        let micros = self.micros.clamp(MIN_MICROS, MAX_MICROS);
        // rem_euclid of 1_000_000 is below 1_000_000: the product fits.
        let nanos = micros.rem_euclid(1_000_000) as u32 * 1_000;
        calendar::from_unix(micros.div_euclid(1_000_000), nanos, digits)
    }

    /// The microsecond after this one (itself at the last writable one).
    pub(crate) fn next(self) -> Self {
        MicroTime {
            micros: self.micros.saturating_add(1).min(MAX_MICROS),
        }
    }

    /// The microsecond before this one (itself at the first writable one).
    pub(crate) fn prev(self) -> Self {
        MicroTime {
            micros: self.micros.saturating_sub(1).max(MIN_MICROS),
        }
    }

    /// Microseconds since the Unix epoch.
    pub fn unix_micros(self) -> i64 {
        self.micros
    }

    /// Parse strictly, as the API server does: RFC 3339, exactly six
    /// fractional digits, UTC `Z` or a numeric offset. For the crate's
    /// test server and tools: a program reads and writes records through
    /// serde, as the [`LeaseLock`](crate::LeaseLock) does.
    #[doc(hidden)]
    pub fn parse_strict(s: &str) -> Result<Self, MicroTimeError> {
        parse(s, true)
    }
}

/// Why a string is not a [`MicroTime`]: the text, and what is wrong with it.
/// Parsing is for the crate's tools and test server (an exec plugin's
/// expiry, a body the test server validates), so it is not in the docs.
///
/// ```
/// use lease_elector::MicroTime;
/// let e = "yesterday".parse::<MicroTime>().unwrap_err();
/// assert!(e.to_string().starts_with(r#""yesterday" is not an RFC 3339 time"#));
/// ```
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MicroTimeError {
    input: String,
    reason: &'static str,
}

impl fmt::Display for MicroTimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not an RFC 3339 time: {}",
            self.input, self.reason
        )
    }
}

impl std::error::Error for MicroTimeError {}

impl fmt::Display for MicroTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.rfc3339(Digits::Micros))
    }
}

#[doc(hidden)]
impl std::str::FromStr for MicroTime {
    type Err = MicroTimeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s, false)
    }
}

impl Serialize for MicroTime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MicroTime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Seconds in 400 Gregorian years, after which the calendar repeats.
const CYCLE_SECS: i64 = 146_097 * 86_400;
/// `0000-01-01T00:00:00Z` and the last microsecond of year 9999, the range
/// RFC 3339 can write.
const MIN_MICROS: i64 = -62_167_219_200 * 1_000_000;
const MAX_MICROS: i64 = 253_402_300_800 * 1_000_000 - 1;

/// The zone, the separator and the fraction are checked here (the API
/// server's strict form, or the lenient one); the calendar is humantime's.
fn parse(s: &str, strict: bool) -> Result<MicroTime, MicroTimeError> {
    let err = |reason| MicroTimeError {
        input: s.chars().take(64).collect(),
        reason,
    };
    if !s.is_ascii() {
        return Err(err("expected digits"));
    }
    let b = s.as_bytes();
    let n = b.len();
    let two = |at: usize| -> Result<i64, MicroTimeError> {
        match (b[at], b[at + 1]) {
            (h @ b'0'..=b'9', l @ b'0'..=b'9') => {
                Ok(i64::from(h - b'0') * 10 + i64::from(l - b'0'))
            }
            _ => Err(err("expected digits")),
        }
    };
    let (body, offset_secs) = match b.last() {
        Some(b'Z' | b'z') => (&s[..n - 1], 0),
        _ if n >= 25 && matches!(b[n - 6], b'+' | b'-') && b[n - 3] == b':' => {
            let (oh, om) = (two(n - 5)?, two(n - 2)?);
            if oh > 23 || om > 59 {
                return Err(err("offset out of range"));
            }
            let off = oh * 3600 + om * 60;
            (&s[..n - 6], if b[n - 6] == b'+' { off } else { -off })
        }
        _ => return Err(err("expected Z or a ±hh:mm offset at the end")),
    };
    let body_b = body.as_bytes();
    if body_b.len() < 19 {
        return Err(err("too short"));
    }
    let allowed: &[u8] = if strict { b"T" } else { b"Tt " };
    if !allowed.contains(&body_b[10]) {
        return Err(err("bad separator"));
    }
    match body_b.get(19) {
        None if strict => return Err(err("fraction must have exactly six digits")),
        None => {}
        Some(b'.') => {
            let frac = &body_b[20..];
            if frac.is_empty() {
                return Err(err("empty fraction"));
            }
            if !frac.iter().all(u8::is_ascii_digit) {
                return Err(err("expected digits"));
            }
            if strict && frac.len() != 6 {
                return Err(err("fraction must have exactly six digits"));
            }
        }
        Some(_) => return Err(err("expected Z or a ±hh:mm offset at the end")),
    }
    let year = two(0)? * 100 + two(2)?;
    let cycles = if year < 1970 {
        (1970 - year + 399) / 400
    } else {
        0
    };
    let shifted = format!(
        "{:04}{}T{}Z",
        year + 400 * cycles,
        &body[4..10],
        &body[11..]
    );
    let t = humantime::parse_rfc3339(&shifted).map_err(|e| {
        err(match e {
            humantime::TimestampError::InvalidDigit => "expected digits",
            humantime::TimestampError::OutOfRange => "field out of range",
            _ => "bad separator",
        })
    })?;
    let since = t
        .duration_since(UNIX_EPOCH)
        .map_err(|_| err("field out of range"))?;
    let secs = i64::try_from(since.as_secs()).map_err(|_| err("field out of range"))?
        - cycles * CYCLE_SECS
        - offset_secs;
    let micros = secs
        .checked_mul(1_000_000)
        .and_then(|m| m.checked_add(i64::from(since.subsec_micros())))
        .filter(|m| (MIN_MICROS..=MAX_MICROS).contains(m))
        .ok_or(err("field out of range"))?;
    Ok(MicroTime { micros })
}

/// Whether a watched object's `resourceVersion` is newer than the one
/// last seen. Versions are opaque to clients, but are etcd revisions in
/// practice: compare them as numbers when both are, else just by equality
/// (a stale delivery then costs one conflicting write, never safety).
pub(crate) fn newer(watched: Option<&str>, seen: Option<&str>) -> bool {
    match (watched, seen) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(w), Some(s)) => match (w.parse::<u64>(), s.parse::<u64>()) {
            (Ok(w), Ok(s)) => w > s,
            _ => w != s,
        },
    }
}

/// Object metadata: the fields the elector uses, plus everything else untouched.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// Object name.
    #[serde(default)]
    pub name: String,
    /// Object namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Optimistic-concurrency token; sent back unchanged on update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// Server-assigned unique id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Fields this crate does not model (managedFields, ownerReferences, ...).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `LeaseSpec`, as in `coordination.k8s.io/v1`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseSpec {
    /// Current holder; empty or absent when released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_identity: Option<String>,
    /// How long others must wait after the last observed change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_duration_seconds: Option<i32>,
    /// When the current holder acquired the lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquire_time: Option<MicroTime>,
    /// When the holder last renewed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_time: Option<MicroTime>,
    /// How many times the lease changed hands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_transitions: Option<i32>,
    /// Coordinated leader election strategy (kept, not acted on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
    /// Coordinated leader election preferred holder (kept, not acted on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_holder: Option<String>,
    /// Fields this crate does not model.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A `coordination.k8s.io/v1` Lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// Always `coordination.k8s.io/v1` when written by this crate.
    #[serde(default)]
    pub api_version: String,
    /// Always `Lease` when written by this crate.
    #[serde(default)]
    pub kind: String,
    /// Metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Spec; absent on a freshly created empty Lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<LeaseSpec>,
    /// Fields this crate does not model.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Lease {
    /// A Lease read from its JSON: the one copy of its decoding in the
    /// binary, for the client's answers and the watch's deliveries alike
    /// (a second way in, from a `serde_json::Value`, was a second copy).
    #[inline(never)]
    pub(crate) fn from_json(json: &[u8]) -> serde_json::Result<Lease> {
        serde_json::from_slice(json)
    }

    /// A new Lease object named `namespace/name` holding `record`.
    pub fn new(namespace: &str, name: &str, record: &LeaderElectionRecord) -> Self {
        let mut spec = LeaseSpec::default();
        record.write_to(&mut spec);
        Lease {
            api_version: LEASE_API_VERSION.to_string(),
            kind: "Lease".to_string(),
            metadata: ObjectMeta {
                name: name.to_string(),
                namespace: namespace.to_string(),
                ..ObjectMeta::default()
            },
            spec: Some(spec),
            extra: Map::new(),
        }
    }

    /// The leader-election record this Lease holds (defaults for a missing spec).
    pub fn record(&self) -> LeaderElectionRecord {
        self.spec
            .as_ref()
            .map(LeaderElectionRecord::read_from)
            .unwrap_or_default()
    }

    /// Replace the election fields of the spec with `record`, keeping the rest.
    pub fn set_record(&mut self, record: &LeaderElectionRecord) {
        record.write_to(self.spec.get_or_insert_with(LeaseSpec::default));
    }
}

/// What the elector reasons about: the election fields of a Lease
/// (client-go's `LeaderElectionRecord`), what a [`Lock`](crate::Lock)
/// reads and writes.
///
/// ```
/// use lease_elector::{LeaderElectionRecord, MicroTime};
/// use std::time::{Duration, SystemTime};
///
/// let now = MicroTime::from_system_time(SystemTime::now());
/// let record = LeaderElectionRecord {
///     holder_identity: "pod-a".into(),
///     lease_duration_seconds: 15,
///     acquire_time: Some(now),
///     renew_time: Some(now),
///     ..LeaderElectionRecord::default()
/// };
/// assert_eq!(record.lease_duration(), Duration::from_secs(15));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderElectionRecord {
    /// Holder; empty when nobody holds the lease.
    pub holder_identity: String,
    /// Lease duration in seconds (may be ≤ 0 on a hostile server: treated as expired).
    pub lease_duration_seconds: i32,
    /// When the holder acquired the lease.
    pub acquire_time: Option<MicroTime>,
    /// When the holder last renewed.
    pub renew_time: Option<MicroTime>,
    /// How many times the lease changed hands.
    pub leader_transitions: i32,
    /// Coordinated leader election strategy (round-tripped).
    pub strategy: Option<String>,
    /// Coordinated leader election preferred holder (round-tripped).
    pub preferred_holder: Option<String>,
}

impl LeaderElectionRecord {
    /// The lease duration, with negative values read as zero.
    pub fn lease_duration(&self) -> Duration {
        Duration::from_secs(u64::try_from(self.lease_duration_seconds).unwrap_or(0))
    }

    fn read_from(spec: &LeaseSpec) -> Self {
        LeaderElectionRecord {
            holder_identity: spec.holder_identity.clone().unwrap_or_default(),
            lease_duration_seconds: spec.lease_duration_seconds.unwrap_or(0),
            acquire_time: spec.acquire_time,
            renew_time: spec.renew_time,
            leader_transitions: spec.lease_transitions.unwrap_or(0),
            strategy: spec.strategy.clone(),
            preferred_holder: spec.preferred_holder.clone(),
        }
    }

    fn write_to(&self, spec: &mut LeaseSpec) {
        // client-go writes holderIdentity even when empty (a release).
        spec.holder_identity = Some(self.holder_identity.clone());
        spec.lease_duration_seconds = Some(self.lease_duration_seconds);
        spec.acquire_time = self.acquire_time;
        spec.renew_time = self.renew_time;
        spec.lease_transitions = Some(self.leader_transitions);
        spec.strategy = self.strategy.clone();
        spec.preferred_holder = self.preferred_holder.clone();
    }
}

/// A Kubernetes `meta/v1` `Status`, the body of every error answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// Always `Status`.
    #[serde(default)]
    pub kind: String,
    /// Always `v1`.
    #[serde(default)]
    pub api_version: String,
    /// `Failure` or `Success`.
    #[serde(default)]
    pub status: String,
    /// Human-readable description.
    #[serde(default)]
    pub message: String,
    /// Machine-readable reason (`NotFound`, `Conflict`, `AlreadyExists`, ...).
    #[serde(default)]
    pub reason: String,
    /// HTTP status code.
    #[serde(default)]
    pub code: u16,
    /// Reason details (kind, name, ...), kept as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microtime_writes_six_digits_utc() {
        let t: MicroTime = "2026-12-02T10:00:00Z".parse().unwrap();
        assert_eq!(t.to_string(), "2026-12-02T10:00:00.000000Z");
        let t: MicroTime = "2026-12-02T10:00:00.1234567891Z".parse().unwrap();
        assert_eq!(t.to_string(), "2026-12-02T10:00:00.123456Z");
        let t: MicroTime = "1969-12-31T23:59:59.999999Z".parse().unwrap();
        assert_eq!(t.unix_micros(), -1);
        assert_eq!(t.to_string(), "1969-12-31T23:59:59.999999Z");
    }

    #[test]
    fn microtime_round_trips_across_the_rfc3339_range() {
        // A deterministic spread over years 0000-9999, through the 400-year
        // shift before 1970 and humantime's calendar after.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let span = (MAX_MICROS - MIN_MICROS) as u64;
            let micros = MIN_MICROS + (x % span) as i64;
            let t = MicroTime { micros };
            let text = t.to_string();
            assert_eq!(text.len(), 27, "{text}");
            assert_eq!(MicroTime::parse_strict(&text), Ok(t), "{text}");
        }
        for (text, ok) in [
            ("1600-02-29T00:00:00.000000Z", true),
            ("1900-02-29T00:00:00.000000Z", false),
            ("0000-01-01T00:00:00.000000Z", true),
            ("9999-12-31T23:59:59.999999Z", true),
            ("9999-12-31T23:59:59.999999-00:01", false),
        ] {
            assert_eq!(MicroTime::parse_strict(text).is_ok(), ok, "{text}");
            if ok {
                assert_eq!(MicroTime::parse_strict(text).unwrap().to_string(), text);
            }
        }
        let far = MicroTime::from_system_time(UNIX_EPOCH + Duration::from_secs(u64::MAX / 4));
        assert_eq!(far.to_string(), "9999-12-31T23:59:59.999999Z");
    }

    #[test]
    fn microtime_reads_offsets() {
        let a: MicroTime = "2026-01-01T00:30:00.000000-01:30".parse().unwrap();
        assert_eq!(a.to_string(), "2026-01-01T02:00:00.000000Z");
        let b: MicroTime = "2024-02-29T23:00:00+02:00".parse().unwrap();
        assert_eq!(b.to_string(), "2024-02-29T21:00:00.000000Z");
    }

    #[test]
    fn microtime_round_trips_system_time() {
        let now = SystemTime::now();
        let t = MicroTime::from_system_time(now);
        let back: MicroTime = t.to_string().parse().unwrap();
        assert_eq!(t, back);
        let diff = now.duration_since(back.to_system_time()).unwrap();
        assert!(diff < Duration::from_micros(1));
    }

    #[test]
    fn microtime_rejects_garbage() {
        for bad in [
            "",
            "2026",
            "2026-13-01T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-01-01T24:00:00Z",
            "2026-01-01T00:00:00",
            "2026-01-01T00:00:00.Z",
            "2026-01-01T00:00:00Zjunk",
            "2026-01-01T00:00:00+0100",
            "２０２６-01-01T00:00:00Z",
        ] {
            assert!(bad.parse::<MicroTime>().is_err(), "{bad:?} accepted");
        }
        assert!(MicroTime::parse_strict("2026-01-01T00:00:00.123Z").is_err());
        assert!(MicroTime::parse_strict("2026-01-01T00:00:00Z").is_err());
        assert!(MicroTime::parse_strict("2026-01-01T00:00:00.123456Z").is_ok());
    }

    #[test]
    fn lease_round_trips_unknown_fields() {
        let raw = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease",
            "metadata":{"name":"l","namespace":"ns","resourceVersion":"7","managedFields":[{"manager":"x"}],"labels":{"a":"b"}},
            "spec":{"holderIdentity":"me","leaseDurationSeconds":15,"renewTime":"2026-12-02T10:00:00.000000Z","futureField":{"k":1}},
            "status":{"whatever":true}}"#;
        let mut lease: Lease = serde_json::from_str(raw).unwrap();
        let mut rec = lease.record();
        assert_eq!(rec.holder_identity, "me");
        rec.holder_identity = "you".into();
        lease.set_record(&rec);
        let out = serde_json::to_value(&lease).unwrap();
        assert_eq!(out["metadata"]["managedFields"][0]["manager"], "x");
        assert_eq!(out["spec"]["futureField"]["k"], 1);
        assert_eq!(out["status"]["whatever"], true);
        assert_eq!(out["spec"]["holderIdentity"], "you");
        assert_eq!(out["metadata"]["resourceVersion"], "7");
    }

    #[test]
    fn a_watched_object_decodes_through_its_text_as_from_the_value() {
        // The watch decodes a delivered object (a `Value`) through its
        // text: the same Lease, or the same refusal, as from the value.
        let ok = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease",
            "metadata":{"name":"l","namespace":"ns","resourceVersion":"7","managedFields":[{"manager":"x","n":1.5}],"labels":{"a":"b"}},
            "spec":{"holderIdentity":"me\u001b","leaseDurationSeconds":15,"renewTime":"2026-12-02T10:00:00.123456Z","leaseTransitions":3,"futureField":{"k":-1}},
            "status":{"whatever":true}}"#;
        let bad = [
            r#"{"metadata":{"name":"l"},"spec":{"leaseDurationSeconds":"15"}}"#,
            r#"{"metadata":{"name":"l"},"spec":{"leaseDurationSeconds":15.0}}"#,
            r#"{"metadata":{"name":"l"},"spec":{"renewTime":"yesterday"}}"#,
            r#"{"metadata":[]}"#,
        ];
        for raw in std::iter::once(ok).chain(bad) {
            let value: serde_json::Value = serde_json::from_str(raw).unwrap();
            let from_value = serde_json::from_value::<Lease>(value.clone()).ok();
            let from_text = Lease::from_json(&serde_json::to_vec(&value).unwrap()).ok();
            assert_eq!(from_text, from_value, "{raw}");
            assert_eq!(from_text.is_some(), raw == ok, "{raw}");
        }
    }

    #[test]
    fn negative_duration_reads_as_zero() {
        let rec = LeaderElectionRecord {
            lease_duration_seconds: -5,
            ..Default::default()
        };
        assert_eq!(rec.lease_duration(), Duration::ZERO);
    }
}
