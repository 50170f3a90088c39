//! A `log::Log` that writes one line per record to stderr: small enough
//! not to earn a dependency.
//!
//! The base level comes from `$LEASE_ELECT_LOG` (`off`, `error`, `warn`,
//! `info`, `debug`, `trace`; default `warn`, so every warning and error
//! the crate logs is seen), and each `-v` raises it one step.

use std::io::Write;
use std::time::SystemTime;

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

impl Log for Stderr {
    fn enabled(&self, metadata: &Metadata) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let now = humantime::format_rfc3339_millis(SystemTime::now());
        let mut err = std::io::stderr().lock();
        // Debug and trace name the module; info and above read as sentences.
        let _ = if record.level() >= Level::Debug {
            writeln!(
                err,
                "{now} {:<5} {} [{}]: {}",
                record.level(),
                self.name,
                record.target(),
                record.args()
            )
        } else {
            writeln!(
                err,
                "{now} {:<5} {}: {}",
                record.level(),
                self.name,
                record.args()
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
    fn each_v_raises_the_level_one_step_up_to_trace() {
        assert_eq!(raise(LevelFilter::Warn, 0), LevelFilter::Warn);
        assert_eq!(raise(LevelFilter::Warn, 1), LevelFilter::Info);
        assert_eq!(raise(LevelFilter::Warn, 2), LevelFilter::Debug);
        assert_eq!(raise(LevelFilter::Off, 1), LevelFilter::Error);
        assert_eq!(raise(LevelFilter::Info, 9), LevelFilter::Trace);
    }
}
