//! Go duration strings (`"137s"`, `"1m30s"`, `"1.5h"`), as OpenShift and
//! Kubernetes config files write them.
//!
//! [`parse_go_duration`] accepts what Go's `time.ParseDuration` accepts, for
//! non-negative values; [`format_go_duration`] writes what Go's
//! `Duration.String()` writes, so a value read and written back reads the
//! same to Go tooling.
//!
//! `humantime` (which the crate uses for wire times) cannot stand in here:
//! it accepts what Go rejects (`2days`, `1m 30s` with a space), rejects
//! what Go accepts (`.5h`, a fraction without a leading digit), and writes
//! `2m 17s` where Go writes `2m17s`.
//!
//! ```
//! use lease_elector::duration::{format_go_duration, parse_go_duration};
//! use std::time::Duration;
//!
//! let d = parse_go_duration("1h2m3.5s")?;
//! assert_eq!(d, Duration::from_millis(3_723_500));
//! assert_eq!(format_go_duration(Duration::from_secs(137)), "2m17s");
//! assert!(parse_go_duration("-5s").is_err());
//! # Ok::<(), lease_elector::duration::GoDurationError>(())
//! ```

use std::fmt;
use std::time::Duration;

/// Go's largest duration: `i64::MAX` nanoseconds (about 292 years).
pub const MAX_GO_DURATION: Duration = Duration::from_nanos(i64::MAX as u64);

/// Why a string is not a (non-negative) Go duration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoDurationError {
    input: String,
    kind: GoDurationErrorKind,
}

/// The rule a rejected duration string broke.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GoDurationErrorKind {
    /// The string was empty.
    Empty,
    /// The value was below zero; lease timings cannot be negative.
    Negative,
    /// A number had no unit after it (`"10"`); only `"0"` may omit it.
    MissingUnit,
    /// The unit is not one of `ns`, `us`, `µs`, `μs`, `ms`, `s`, `m`, `h`.
    UnknownUnit(String),
    /// Not of the form `[+]<number><unit>...`.
    Invalid,
    /// More than [`MAX_GO_DURATION`].
    Overflow,
}

impl GoDurationError {
    fn new(input: &str, kind: GoDurationErrorKind) -> Self {
        // Bounded so a huge bad value cannot flood logs and error messages.
        let mut shown: String = input.chars().take(64).collect();
        if shown.len() < input.len() {
            shown.push('…');
        }
        GoDurationError { input: shown, kind }
    }

    /// The rule the input broke.
    pub fn kind(&self) -> &GoDurationErrorKind {
        &self.kind
    }

    /// The rejected input (its first 64 characters, then `…`, when longer).
    pub fn input(&self) -> &str {
        &self.input
    }
}

impl fmt::Display for GoDurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: ", self.input)?;
        match &self.kind {
            GoDurationErrorKind::Empty => f.write_str("empty duration"),
            GoDurationErrorKind::Negative => f.write_str("negative durations are not allowed"),
            GoDurationErrorKind::MissingUnit => {
                f.write_str("missing unit (one of ns, us, µs, ms, s, m, h)")
            }
            GoDurationErrorKind::UnknownUnit(u) => write!(f, "unknown unit {u:?}"),
            GoDurationErrorKind::Invalid => {
                f.write_str("invalid duration (expected e.g. \"137s\", \"1m30s\" or \"1.5h\")")
            }
            GoDurationErrorKind::Overflow => write!(
                f,
                "duration too large (at most {})",
                format_go_duration(MAX_GO_DURATION)
            ),
        }
    }
}

impl std::error::Error for GoDurationError {}

fn unit_nanos(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => 1,
        "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// Parse a Go duration string, as Go's `time.ParseDuration`, refusing
/// negative values.
///
/// Accepts an optional `+`, then one or more `<number><unit>` parts where the
/// number may have a fraction (`"1.5s"`, `".5h"`, `"1."`); `"0"` needs no
/// unit. `"-0s"` is zero, so it is accepted; any other `-` value is refused.
/// Never panics.
pub fn parse_go_duration(s: &str) -> Result<Duration, GoDurationError> {
    use GoDurationErrorKind as K;
    let err = |kind| GoDurationError::new(s, kind);
    let mut rest = s.as_bytes();
    let mut negative = false;
    if let Some((&c, tail)) = rest.split_first() {
        if c == b'-' || c == b'+' {
            negative = c == b'-';
            rest = tail;
        }
    }
    if rest == b"0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(err(if s.is_empty() { K::Empty } else { K::Invalid }));
    }
    // Go's bound: the sum may reach 1<<63 only to be negated.
    const LIMIT: u64 = 1 << 63;
    let mut total: u64 = 0;
    while !rest.is_empty() {
        if !(rest[0] == b'.' || rest[0].is_ascii_digit()) {
            return Err(err(K::Invalid));
        }
        // Integer part.
        let digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
        let mut whole: u64 = 0;
        for &c in &rest[..digits] {
            whole = whole
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(c - b'0')))
                .filter(|&v| v <= LIMIT)
                .ok_or_else(|| err(K::Overflow))?;
        }
        rest = &rest[digits..];
        // Fraction: keeps only the precision that fits, like Go's leadingFraction.
        let mut frac: u64 = 0;
        let mut scale: f64 = 1.0;
        let mut frac_digits = 0;
        if rest.first() == Some(&b'.') {
            rest = &rest[1..];
            frac_digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
            let mut overflow = false;
            for &c in &rest[..frac_digits] {
                if overflow {
                    continue;
                }
                match frac
                    .checked_mul(10)
                    .and_then(|v| v.checked_add(u64::from(c - b'0')))
                    .filter(|&v| v <= LIMIT)
                {
                    Some(v) => {
                        frac = v;
                        scale *= 10.0;
                    }
                    None => overflow = true,
                }
            }
            rest = &rest[frac_digits..];
        }
        if digits == 0 && frac_digits == 0 {
            return Err(err(K::Invalid));
        }
        // Unit: everything up to the next number.
        let unit_len = rest
            .iter()
            .take_while(|&&c| c != b'.' && !c.is_ascii_digit())
            .count();
        if unit_len == 0 {
            return Err(err(K::MissingUnit));
        }
        // Splitting at an ASCII byte keeps both halves valid UTF-8.
        let unit = std::str::from_utf8(&rest[..unit_len]).map_err(|_| err(K::Invalid))?;
        rest = &rest[unit_len..];
        let per = unit_nanos(unit).ok_or_else(|| err(K::UnknownUnit(unit.to_string())))?;
        let mut part = whole
            .checked_mul(per)
            .filter(|&v| v <= LIMIT)
            .ok_or_else(|| err(K::Overflow))?;
        if frac > 0 {
            // f64 is exact enough: frac*per/scale is at most 3.6e12 (one hour).
            part = part
                .checked_add((frac as f64 * (per as f64 / scale)) as u64)
                .filter(|&v| v <= LIMIT)
                .ok_or_else(|| err(K::Overflow))?;
        }
        total = total
            .checked_add(part)
            .filter(|&v| v <= LIMIT)
            .ok_or_else(|| err(K::Overflow))?;
    }
    if negative && total > 0 {
        return Err(err(K::Negative));
    }
    if total > i64::MAX as u64 {
        return Err(err(K::Overflow));
    }
    Ok(Duration::from_nanos(total))
}

/// Format like Go's `Duration.String()`: `"2m17s"`, `"1.5s"`, `"500ms"`,
/// `"1h0m0s"`, `"0s"`.
///
/// Durations longer than Go can hold are still written in the same style
/// (Go never produces them).
pub fn format_go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < 1_000_000_000 {
        // Below one second Go picks the largest unit that keeps an integer part.
        let (unit, prec) = if nanos < 1_000 {
            ("ns", 0)
        } else if nanos < 1_000_000 {
            ("\u{b5}s", 3)
        } else {
            ("ms", 6)
        };
        return format!("{}{unit}", with_fraction(nanos, prec));
    }
    let secs = with_fraction(nanos % 60_000_000_000, 9);
    let minutes = nanos / 60_000_000_000;
    if minutes == 0 {
        return format!("{secs}s");
    }
    let hours = minutes / 60;
    if hours == 0 {
        return format!("{minutes}m{secs}s");
    }
    format!("{hours}h{}m{secs}s", minutes % 60)
}

/// `d` in seconds to a tenth, `"12.3s"`, for messages: integer arithmetic,
/// so that no float formatting is linked into a small static binary.
pub(crate) fn tenths(d: Duration) -> String {
    format!("{}.{}s", d.as_secs(), d.subsec_millis() / 100)
}

/// `v / 10^prec` with the fraction's trailing zeros (and a bare point) dropped.
fn with_fraction(v: u128, prec: u32) -> String {
    let div = 10u128.pow(prec);
    let (int, frac) = (v / div, v % div);
    if frac == 0 {
        return int.to_string();
    }
    let digits = format!("{frac:0width$}", width = prec as usize);
    format!("{int}.{}", digits.trim_end_matches('0'))
}

/// Serde helpers writing a [`Duration`] as a Go duration string.
///
/// Reading also accepts Go's struct form `{"Duration": <nanoseconds>}`
/// (what `encoding/json` writes for a bare `time.Duration` wrapper).
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use std::time::Duration;
///
/// #[derive(Serialize, Deserialize)]
/// struct Timing {
///     #[serde(with = "lease_elector::duration::go_duration")]
///     period: Duration,
/// }
///
/// let t: Timing = serde_json::from_str(r#"{"period": "1m30s"}"#)?;
/// assert_eq!(t.period, Duration::from_secs(90));
/// assert_eq!(serde_json::to_string(&t)?, r#"{"period":"1m30s"}"#);
/// # Ok::<(), serde_json::Error>(())
/// ```
pub mod go_duration {
    use std::fmt;
    use std::time::Duration;

    use serde::de::{self, MapAccess, Visitor};
    use serde::{Deserializer, Serializer};

    use super::{format_go_duration, parse_go_duration};

    /// Write `d` as a Go duration string.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_go_duration(*d))
    }

    /// Read a Go duration string or `{"Duration": <nanoseconds>}`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        d.deserialize_any(GoDurationVisitor)
    }

    struct GoDurationVisitor;

    impl<'de> Visitor<'de> for GoDurationVisitor {
        type Value = Duration;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a Go duration string such as \"137s\" or {\"Duration\": <nanoseconds>}")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
            parse_go_duration(v).map_err(E::custom)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Duration, A::Error> {
            let mut nanos: Option<i64> = None;
            while let Some(key) = map.next_key::<String>()? {
                if key == "Duration" {
                    nanos = Some(map.next_value()?);
                } else {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
            let nanos = nanos.ok_or_else(|| de::Error::missing_field("Duration"))?;
            nanos_to_duration(nanos).map_err(de::Error::custom)
        }
    }

    /// `{"Duration": n}`: nanoseconds, refused when negative.
    pub(crate) fn nanos_to_duration(nanos: i64) -> Result<Duration, String> {
        u64::try_from(nanos)
            .map(Duration::from_nanos)
            .map_err(|_| format!("{nanos}ns: negative durations are not allowed"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: u64 = 1;
    const US: u64 = 1_000;
    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;
    const M: u64 = 60 * S;
    const H: u64 = 60 * M;

    #[test]
    fn parses_go_examples() {
        // From Go's time_test.go parseDurationTests (non-negative ones).
        let cases: &[(&str, u64)] = &[
            ("0", 0),
            ("5s", 5 * S),
            ("30s", 30 * S),
            ("1478s", 1478 * S),
            ("+5s", 5 * S),
            ("-0", 0),
            ("+0", 0),
            ("5.0s", 5 * S),
            ("5.6s", 5 * S + 600 * MS),
            ("5.s", 5 * S),
            (".5s", 500 * MS),
            ("1.0s", S),
            ("1.00s", S),
            ("1.004s", S + 4 * MS),
            ("1.0040s", S + 4 * MS),
            ("100.00100s", 100 * S + MS),
            ("10ns", 10 * NS),
            ("11us", 11 * US),
            ("12\u{b5}s", 12 * US),
            ("12\u{3bc}s", 12 * US),
            ("13ms", 13 * MS),
            ("14s", 14 * S),
            ("15m", 15 * M),
            ("16h", 16 * H),
            ("3h30m", 3 * H + 30 * M),
            ("10.5s4m", 4 * M + 10 * S + 500 * MS),
            (
                "1h2m3s4ms5us6ns",
                H + 2 * M + 3 * S + 4 * MS + 5 * US + 6 * NS,
            ),
            ("39h9m14.425s", 39 * H + 9 * M + 14 * S + 425 * MS),
            ("52763797000ns", 52763797000 * NS),
            ("0.3333333333333333333h", 20 * M),
            ("9007199254740993ns", (1 << 53) + 1),
            ("9223372036854775807ns", i64::MAX as u64),
            ("9223372036854775.807us", i64::MAX as u64),
            ("9223372036s854ms775us807ns", i64::MAX as u64),
            ("0.100000000000000000000h", 6 * M),
            ("0.830103483285477580700h", 49 * M + 48 * S + 372539827 * NS),
            ("0s", 0),
            ("1.5s", 1500 * MS),
            (".5h", 30 * M),
            ("1h2m3.5s", H + 2 * M + 3500 * MS),
            ("137s", 137 * S),
            ("-0s", 0),
        ];
        for &(input, nanos) in cases {
            assert_eq!(
                parse_go_duration(input),
                Ok(Duration::from_nanos(nanos)),
                "{input}"
            );
        }
    }

    #[test]
    fn rejects_bad_input_with_a_reason() {
        use GoDurationErrorKind as K;
        let cases: &[(&str, GoDurationErrorKind)] = &[
            ("", K::Empty),
            ("3", K::MissingUnit),
            ("1h3", K::MissingUnit),
            ("-", K::Invalid),
            ("+", K::Invalid),
            ("s", K::Invalid),
            (".", K::Invalid),
            ("-.", K::Invalid),
            (".s", K::Invalid),
            ("+.s", K::Invalid),
            (" 1s", K::Invalid),
            ("1s ", K::UnknownUnit("s ".into())),
            ("13x", K::UnknownUnit("x".into())),
            ("1d", K::UnknownUnit("d".into())),
            ("1sec", K::UnknownUnit("sec".into())),
            ("1µ", K::UnknownUnit("µ".into())),
            ("-5s", K::Negative),
            ("-1ns", K::Negative),
            ("-1h2m", K::Negative),
            ("9223372036854775808ns", K::Overflow),
            ("9223372036854775.808us", K::Overflow),
            ("9223372036854ms775us808ns", K::Overflow),
            ("3000000h", K::Overflow),
            ("99999999999999999999999s", K::Overflow),
            ("2562047h48m", K::Overflow),
        ];
        for (input, kind) in cases {
            let err = parse_go_duration(input).unwrap_err();
            assert_eq!(err.kind(), kind, "{input}");
            assert!(
                err.to_string().starts_with(&format!("{input:?}: ")),
                "{err}"
            );
        }
        assert_eq!(
            parse_go_duration("13x").unwrap_err().to_string(),
            r#""13x": unknown unit "x""#
        );
        assert!(parse_go_duration("-5s")
            .unwrap_err()
            .to_string()
            .contains("negative"));
    }

    #[test]
    fn never_panics_on_odd_input() {
        for input in [
            "µ",
            "1µ",
            "1.µs",
            "\u{0}",
            "1e3s",
            "1_000s",
            "0x10s",
            "1..5s",
            "1.5.5s",
            "١s",
            "1s1",
            "1.",
            "99999999999999999999999999999999.9h",
            ".99999999999999999999999999s",
        ] {
            let _ = parse_go_duration(input);
        }
        assert_eq!(
            parse_go_duration("1."),
            Err(GoDurationError::new("1.", GoDurationErrorKind::MissingUnit))
        );
        let long = "9".repeat(1000) + "s";
        let err = parse_go_duration(&long).unwrap_err();
        assert!(err.to_string().len() < 200, "{err}");
    }

    #[test]
    fn formats_like_go() {
        let cases: &[(u64, &str)] = &[
            (0, "0s"),
            (NS, "1ns"),
            (1100 * NS, "1.1\u{b5}s"),
            (US, "1\u{b5}s"),
            (2200 * US, "2.2ms"),
            (500 * MS, "500ms"),
            (3300 * MS, "3.3s"),
            (1500 * MS, "1.5s"),
            (90 * S, "1m30s"),
            (137 * S, "2m17s"),
            (107 * S, "1m47s"),
            (26 * S, "26s"),
            (78 * S, "1m18s"),
            (163 * S, "2m43s"),
            (330 * S, "5m30s"),
            (4 * M + 5 * S, "4m5s"),
            (4 * M + 5001 * MS, "4m5.001s"),
            (5 * H + 6 * M + 7001 * MS, "5h6m7.001s"),
            (8 * M + NS, "8m0.000000001s"),
            (H, "1h0m0s"),
            (i64::MAX as u64, "2562047h47m16.854775807s"),
        ];
        for &(nanos, want) in cases {
            assert_eq!(format_go_duration(Duration::from_nanos(nanos)), want);
        }
        // Beyond Go's range: still readable, no panic.
        assert_eq!(
            format_go_duration(Duration::from_secs(u64::MAX)),
            "5124095576030431h0m15s"
        );
    }

    #[test]
    fn round_trips() {
        for nanos in [
            0,
            NS,
            999 * NS,
            US,
            1500 * US,
            MS,
            999_999_999,
            S,
            1500 * MS,
            59 * S,
            61 * S,
            137 * S,
            270 * S,
            H,
            H + NS,
            25 * H + 61 * S + 7 * MS,
            i64::MAX as u64,
        ] {
            let d = Duration::from_nanos(nanos);
            let text = format_go_duration(d);
            assert_eq!(parse_go_duration(&text), Ok(d), "{text}");
        }
        for text in ["1h0m0s", "2m17s", "1.5s", "500ms", "1µs", "1ns", "0s"] {
            let d = parse_go_duration(text).unwrap();
            assert_eq!(format_go_duration(d), text);
        }
    }

    #[test]
    fn serde_helpers() {
        #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
        struct T {
            #[serde(with = "go_duration")]
            d: Duration,
        }
        let t: T = serde_json::from_str(r#"{"d":"2m17s"}"#).unwrap();
        assert_eq!(t.d, Duration::from_secs(137));
        assert_eq!(serde_json::to_string(&t).unwrap(), r#"{"d":"2m17s"}"#);
        let t: T = serde_json::from_str(r#"{"d":{"Duration":1500000000}}"#).unwrap();
        assert_eq!(t.d, Duration::from_millis(1500));
        let e = serde_json::from_str::<T>(r#"{"d":"13x"}"#).unwrap_err();
        assert!(e.to_string().contains(r#"unknown unit "x""#), "{e}");
        let e = serde_json::from_str::<T>(r#"{"d":{"Duration":-1}}"#).unwrap_err();
        assert!(e.to_string().contains("negative"), "{e}");
        let e = serde_json::from_str::<T>(r#"{"d":15}"#).unwrap_err();
        assert!(e.to_string().contains("Go duration"), "{e}");
    }
}
