//! Log lines captured in the crate's unit tests, with the name of the
//! thread that wrote them (libtest names each test's thread after the
//! test, so a test reads its own lines, and a worker thread's by its name).

use std::sync::{Mutex, OnceLock};
use std::thread;

pub(crate) struct Capture(Mutex<Vec<(String, log::Level, String)>>);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, r: &log::Record<'_>) {
        let thread = thread::current().name().unwrap_or("").to_string();
        self.0
            .lock()
            .unwrap()
            .push((thread, r.level(), r.args().to_string()));
    }
    fn flush(&self) {}
}

/// The process's logger for the unit tests, installed on first use (call
/// it before the lines to capture are logged).
pub(crate) fn logs() -> &'static Capture {
    static LOGS: OnceLock<&'static Capture> = OnceLock::new();
    LOGS.get_or_init(|| {
        let c: &'static Capture = Box::leak(Box::new(Capture(Mutex::new(Vec::new()))));
        let _ = log::set_logger(c);
        log::set_max_level(log::LevelFilter::Debug);
        c
    })
}

/// The lines at `level` that thread `thread` logged.
pub(crate) fn lines_from(thread: &str, level: log::Level) -> Vec<String> {
    logs()
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(t, l, _)| t == thread && *l == level)
        .map(|(_, _, m)| m.clone())
        .collect()
}

/// The lines at `level` this thread logged.
pub(crate) fn lines_here(level: log::Level) -> Vec<String> {
    lines_from(thread::current().name().unwrap_or(""), level)
}
