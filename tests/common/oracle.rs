//! Oracle tests (kubectl, the official Python client: tools nobody here
//! wrote) say whether they ran or were skipped, one file per test under
//! `target/tmp/oracles/`, so that `.ci/run` can print which ran: a skip
//! notice on stderr shows only with `--nocapture`.
//!
//! A file is named `ORACLE--TEST` and holds `ran` or `skipped: WHY`.

use std::path::PathBuf;

fn record(oracle: &str, outcome: &str) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("oracles");
    let thread = std::thread::current();
    // libtest names each test's thread after the test.
    let test = thread.name().unwrap_or("main").replace("::", "-");
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join(format!("{oracle}--{test}")), outcome);
}

/// `oracle` is there: this test runs against it.
pub fn ran(oracle: &str) {
    record(oracle, "ran\n");
}

/// `oracle` is missing: this test is skipped, with a notice on stderr.
pub fn skipped(oracle: &str, why: &str) {
    eprintln!("skipped: {why}");
    record(oracle, &format!("skipped: {why}\n"));
}
