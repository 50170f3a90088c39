//! Every instant the crate writes as text, in one function with an answer
//! for every value: a log line, a status line, an error and the wire all
//! format times through [`rfc3339`] (or [`MicroTime`](crate::MicroTime),
//! which calls it). A wall clock set before 1970 or past 9999 is a wrong
//! clock, not a reason to end a process: formatters that panic or fail
//! there (humantime's does both) ended `lease-elect`'s supervisor on a log
//! line, between the SIGTERM and the SIGKILL it owed COMMAND (issue 54).
//! `clippy.toml` keeps them out of the crate.
//!
//! Years past 9999 are written with as many digits as they need, years
//! before 0 with a `-`: RFC 3339 has no form for them, and a person reading
//! a log of a clock that far off is better told the truth. What goes on the
//! wire is held within 0000-9999 before it gets here
//! ([`MicroTime::from_system_time`](crate::MicroTime::from_system_time)).
//!
//! ```
//! use lease_elector::calendar::{rfc3339, Digits};
//! use std::time::{Duration, UNIX_EPOCH};
//!
//! let t = UNIX_EPOCH - Duration::from_secs(315_619_200); // 1960-01-01
//! assert_eq!(rfc3339(t, Digits::Millis), "1960-01-01T00:00:00.000Z");
//! let t = UNIX_EPOCH + Duration::from_secs(261_007_574_400); // 10241-01-01
//! assert_eq!(rfc3339(t, Digits::Seconds), "10241-01-01T00:00:00Z");
//! ```

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

/// How many digits of the second's fraction to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Digits {
    /// None: `2006-01-02T15:04:05Z` (`metav1.Time`).
    Seconds,
    /// Three: a log line's time.
    Millis,
    /// Six: `MicroTime`.
    Micros,
}

/// `t` in UTC as RFC 3339 text, truncated to `digits`. Never fails or
/// panics, whatever `t` is.
pub fn rfc3339(t: SystemTime, digits: Digits) -> String {
    let (secs, nanos) = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (
            i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            d.subsec_nanos(),
        ),
        Err(e) => {
            let d = e.duration();
            let whole = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            match d.subsec_nanos() {
                0 => (whole.saturating_neg(), 0),
                n => (whole.saturating_neg().saturating_sub(1), 1_000_000_000 - n),
            }
        }
    };
    from_unix(secs, nanos, digits)
}

/// Seconds since the Unix epoch (negative before it) and the nanoseconds
/// into that second, as [`rfc3339`] writes them.
pub(crate) fn from_unix(secs: i64, nanos: u32, digits: Digits) -> String {
    let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
    let of_day = secs.rem_euclid(86_400);
    let mut s = String::with_capacity(32);
    if year < 0 {
        s.push('-');
    }
    // Writing to a String cannot fail.
    let _ = write!(
        s,
        "{:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        year.unsigned_abs(),
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    );
    let nanos = nanos.min(999_999_999);
    let _ = match digits {
        Digits::Seconds => Ok(()),
        Digits::Millis => write!(s, ".{:03}", nanos / 1_000_000),
        Digits::Micros => write!(s, ".{:06}", nanos / 1_000),
    };
    s.push('Z');
    s
}

/// The proleptic Gregorian date of a day counted from 1970-01-01 (Howard
/// Hinnant's `civil_from_days`): exact for every day an `i64` of seconds
/// can name, with no overflow (`days` is at most 2^63 / 86,400).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], March first
    let day = doy - (153 * mp + 2) / 5 + 1; // [1, 31]
    let month = if mp < 10 { mp + 3 } else { mp - 9 }; // [1, 12]
    let year = yoe + era * 400 + i64::from(month <= 2);
    // Both in range by the bounds noted above.
    (year, month as u32, day as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: i64) -> SystemTime {
        if secs >= 0 {
            UNIX_EPOCH + Duration::from_secs(secs.unsigned_abs())
        } else {
            UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
        }
    }

    #[test]
    #[allow(clippy::disallowed_methods)] // humantime is the oracle here
    fn within_1970_to_9999_it_writes_what_humantime_writes() {
        // Every day boundary of a leap cycle, and a spread of instants to 9999.
        let mut secs: Vec<i64> = (0..4 * 366).map(|d| d * 86_400 - 1).skip(1).collect();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            secs.push((x % 253_402_300_800) as i64);
        }
        secs.push(253_402_300_799);
        for s in secs {
            let t = at(s) + Duration::from_nanos(s.unsigned_abs() % 1_000_000_000);
            assert_eq!(
                rfc3339(t, Digits::Micros),
                humantime::format_rfc3339_micros(t).to_string()
            );
            assert_eq!(
                rfc3339(t, Digits::Millis),
                humantime::format_rfc3339_millis(t).to_string()
            );
            assert_eq!(
                rfc3339(t, Digits::Seconds),
                humantime::format_rfc3339_seconds(t).to_string()
            );
        }
    }

    #[test]
    fn a_clock_before_1970_is_written_as_its_date() {
        assert_eq!(rfc3339(at(-1), Digits::Seconds), "1969-12-31T23:59:59Z");
        let t = UNIX_EPOCH - Duration::from_nanos(1);
        assert_eq!(rfc3339(t, Digits::Micros), "1969-12-31T23:59:59.999999Z");
        // 1960 is a leap year: its 29 February is there.
        assert_eq!(
            rfc3339(at(-315_619_200 + 59 * 86_400), Digits::Millis),
            "1960-02-29T00:00:00.000Z"
        );
        assert_eq!(
            rfc3339(at(-62_167_219_200), Digits::Seconds),
            "0000-01-01T00:00:00Z"
        );
        assert_eq!(
            rfc3339(at(-62_167_219_201), Digits::Seconds),
            "-0001-12-31T23:59:59Z"
        );
    }

    #[test]
    fn a_clock_past_9999_is_written_with_the_digits_its_year_needs() {
        assert_eq!(
            rfc3339(at(253_402_300_800), Digits::Seconds),
            "10000-01-01T00:00:00Z"
        );
        // The year-10240 clock of issue 54 (faketime +3000000d in 2026).
        assert_eq!(
            rfc3339(at(260_996_601_600), Digits::Millis),
            "10240-08-27T00:00:00.000Z"
        );
    }

    #[test]
    fn every_instant_a_system_time_can_hold_has_an_answer() {
        for secs in [i64::MIN, i64::MIN + 1, -1, 0, 1, i64::MAX - 1, i64::MAX] {
            for digits in [Digits::Seconds, Digits::Millis, Digits::Micros] {
                let s = from_unix(secs, 999_999_999, digits);
                assert!(s.ends_with('Z'), "{s}");
            }
        }
        // SystemTime's own extremes, as far as this platform lets one be made.
        let far = [u64::MAX / 2, 1 << 40, 1 << 35];
        for secs in far {
            if let Some(t) = UNIX_EPOCH.checked_add(Duration::from_secs(secs)) {
                assert!(rfc3339(t, Digits::Millis).ends_with('Z'));
            }
            if let Some(t) = UNIX_EPOCH.checked_sub(Duration::from_secs(secs)) {
                assert!(rfc3339(t, Digits::Millis).ends_with('Z'));
            }
        }
        assert_eq!(
            from_unix(i64::MAX, 0, Digits::Seconds),
            "292277026596-12-04T15:30:07Z"
        );
    }
}
