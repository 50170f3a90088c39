//! A `log::Log` that writes one line per record to stderr: small enough
//! not to earn a dependency. Lines go through an [`Outlet`]: a log call
//! never waits for stderr, which nobody may be draining (a line is then
//! dropped and counted rather than holding up the end of a term).
//!
//! The base level comes from `$LEASE_ELECT_LOG` (`off`, `error`, `warn`,
//! `info`, `debug`, `trace`; default `warn`, so every warning and error
//! the crate logs is seen), and each `-v` raises it one step.
//!
//! Two rules hold whatever the level:
//! - the HTTP library's targets (`ureq`, `ureq_proto`) never log below
//!   debug: at trace ureq-proto hex-dumps each request, `Authorization`
//!   header included, and no credential may reach a log;
//! - every record is one line with its control characters escaped
//!   (`lease_elector::text`): a message carrying text from the server (an
//!   identity, an error body) can neither forge a line nor drive the
//!   terminal.

use std::time::{Duration, SystemTime};

use lease_elector::calendar::{rfc3339, Digits};
use lease_elector::text::escape;
use log::{Level, LevelFilter, Log, Metadata, Record};

use crate::outlet::Outlet;

/// The environment variable holding the base level.
pub const ENV: &str = "LEASE_ELECT_LOG";

/// The name on `lease-elect`'s own lines.
pub const ELECT: &str = "lease-elect";

/// The name on the supervisor's lines (see `supervise.rs`).
pub const SUPERVISOR: &str = "lease-elect supervisor";

/// Log lines waiting for stderr at most; more are dropped and counted.
const QUEUE: usize = 256;

/// Writes to stderr, each line naming the process it comes from.
pub struct Stderr {
    name: &'static str,
    out: Outlet,
    /// How long a flush may wait for a stuck stderr.
    flush_within: Duration,
}

/// The most the HTTP library may log: its trace output holds requests as
/// sent, credentials included (its debug output redacts them).
const HTTP_LIBRARY_MAX: LevelFilter = LevelFilter::Debug;

/// ureq's and ureq-proto's log targets.
fn is_http_library(target: &str) -> bool {
    ["ureq", "ureq_proto"].iter().any(|lib| {
        target
            .strip_prefix(lib)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
    })
}

/// Whether a record passes the level: `log::max_level()`, capped for the
/// HTTP library.
fn enabled(metadata: &Metadata) -> bool {
    let max = if is_http_library(metadata.target()) {
        log::max_level().min(HTTP_LIBRARY_MAX)
    } else {
        log::max_level()
    };
    metadata.level() <= max
}

/// One log line: a time, the level and who says it.
fn line(name: &str, level: Level, target: &str, message: &str) -> String {
    let now = rfc3339(SystemTime::now(), Digits::Millis);
    let message = escape(message);
    // Debug and trace name the module; info and above read as sentences.
    if level >= Level::Debug {
        format!("{now} {level:<5} {name} [{target}]: {message}")
    } else {
        format!("{now} {level:<5} {name}: {message}")
    }
}

impl Stderr {
    /// Queue `text` as it is, whatever the level (what `eprintln!` would
    /// print, without waiting for stderr).
    pub fn say(&self, text: String) {
        self.out.send(text);
    }
}

impl Log for Stderr {
    fn enabled(&self, metadata: &Metadata) -> bool {
        enabled(metadata)
    }

    fn log(&self, record: &Record) {
        if !enabled(record.metadata()) {
            return;
        }
        let message = record.args().to_string();
        self.out
            .send(line(self.name, record.level(), record.target(), &message));
    }

    /// Wait for the queued lines, at most the flush bound given to [`init`].
    fn flush(&self) {
        self.out.flush(self.flush_within);
    }
}

/// The level `$LEASE_ELECT_LOG` and `verbose` (the number of `-v`) ask for;
/// a value that is not a level is reported on stderr and ignored.
pub fn level_from_env(verbose: u8) -> LevelFilter {
    let base = match std::env::var(ENV) {
        Ok(v) if !v.trim().is_empty() => v.trim().parse().unwrap_or_else(|_| {
            eprintln!(
                "lease-elect: ignoring {ENV}={v:?}: not one of off, error, warn, info, debug, trace"
            );
            LevelFilter::Warn
        }),
        _ => LevelFilter::Warn,
    };
    raise(base, verbose)
}

fn raise(base: LevelFilter, steps: u8) -> LevelFilter {
    LevelFilter::iter()
        .skip_while(|l| *l != base)
        .nth(usize::from(steps))
        .unwrap_or(LevelFilter::Trace)
}

/// Install the logger of the process `name` at `level`; a flush waits at
/// most `flush_within` for a stuck stderr. Called once per process: the
/// logger lives as long as the process.
pub fn init(name: &'static str, level: LevelFilter, flush_within: Duration) -> &'static Stderr {
    let report = Box::new(move |n| {
        Some(line(
            name,
            Level::Warn,
            "",
            &format!("{n} log lines were dropped: stderr was not being read"),
        ))
    });
    let logger: &'static Stderr = Box::leak(Box::new(Stderr {
        name,
        out: Outlet::stderr(QUEUE, report),
        flush_within,
    }));
    // Fails only when a logger is already set, which main never does.
    let _ = log::set_logger(logger);
    log::set_max_level(level);
    logger
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_http_library_never_logs_below_debug() {
        let at = |target: &'static str, level| {
            let meta = Metadata::builder().target(target).level(level).build();
            enabled(&meta)
        };
        log::set_max_level(LevelFilter::Trace);
        assert!(!at("ureq_proto::client", Level::Trace));
        assert!(!at("ureq", Level::Trace));
        assert!(at("ureq::unversioned::transport::tcp", Level::Debug));
        assert!(at("lease_elector::elector", Level::Trace));
        assert!(at("ureqx", Level::Trace), "another crate");
    }

    #[test]
    fn each_v_raises_the_level_one_step_up_to_trace() {
        assert_eq!(raise(LevelFilter::Warn, 0), LevelFilter::Warn);
        assert_eq!(raise(LevelFilter::Warn, 1), LevelFilter::Info);
        assert_eq!(raise(LevelFilter::Warn, 2), LevelFilter::Debug);
        assert_eq!(raise(LevelFilter::Off, 1), LevelFilter::Error);
        assert_eq!(raise(LevelFilter::Info, 9), LevelFilter::Trace);
    }
}
