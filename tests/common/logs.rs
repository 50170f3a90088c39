//! Every log record of a test binary, for the tests that check what is
//! logged: install with the first call to [`logs`].

use std::sync::{Mutex, OnceLock};

/// (level, message) of every record at debug or above since the first call.
pub fn logs() -> &'static Mutex<Vec<(log::Level, String)>> {
    static LOGS: OnceLock<Mutex<Vec<(log::Level, String)>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        struct Capture;
        impl log::Log for Capture {
            fn enabled(&self, _: &log::Metadata) -> bool {
                true
            }
            fn log(&self, r: &log::Record) {
                logs()
                    .lock()
                    .unwrap()
                    .push((r.level(), r.args().to_string()));
            }
            fn flush(&self) {}
        }
        static CAPTURE: Capture = Capture;
        let _ = log::set_logger(&CAPTURE);
        log::set_max_level(log::LevelFilter::Debug);
        Mutex::new(Vec::new())
    })
}
