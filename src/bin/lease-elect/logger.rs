//! A `log::Log` that writes one line per record to stderr: small enough
//! not to earn a dependency.
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

use std::io::Write;
use std::time::SystemTime;

use lease_elector::text::escape;
use log::{Level, LevelFilter, Log, Metadata, Record};

/// The environment variable holding the base level.
pub const ENV: &str = "LEASE_ELECT_LOG";

/// Writes to stderr, each line naming the process it comes from.
pub struct Stderr {
    name: &'static str,
}

/// The logger of `lease-elect`.
pub static ELECT: Stderr = Stderr {
    name: "lease-elect",
};

/// The logger of the supervisor process (see `supervise.rs`).
pub static SUPERVISOR: Stderr = Stderr {
    name: "lease-elect supervisor",
};

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

impl Log for Stderr {
    fn enabled(&self, metadata: &Metadata) -> bool {
        let max = if is_http_library(metadata.target()) {
            log::max_level().min(HTTP_LIBRARY_MAX)
        } else {
            log::max_level()
        };
        metadata.level() <= max
    }

    fn log(&self, record: &Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let now = humantime::format_rfc3339_millis(SystemTime::now());
        let message = record.args().to_string();
        let message = escape(&message);
        let mut err = std::io::stderr().lock();
        // Debug and trace name the module; info and above read as sentences.
        let _ = if record.level() >= Level::Debug {
            writeln!(
                err,
                "{now} {:<5} {} [{}]: {}",
                record.level(),
                self.name,
                record.target(),
                message
            )
        } else {
            writeln!(
                err,
                "{now} {:<5} {}: {}",
                record.level(),
                self.name,
                message
            )
        };
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
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

/// Install `logger` at `level`.
pub fn init(logger: &'static Stderr, level: LevelFilter) {
    // Fails only when a logger is already set, which main never does.
    let _ = log::set_logger(logger);
    log::set_max_level(level);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_http_library_never_logs_below_debug() {
        let at = |target: &'static str, level| {
            let meta = Metadata::builder().target(target).level(level).build();
            ELECT.enabled(&meta)
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
