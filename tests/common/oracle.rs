//! Oracle tests (kubectl, the official Python and JavaScript clients:
//! tools nobody here wrote; libfaketime; the real control plane) are
//! `#[ignore = "needs …"]`: plain `cargo test` lists each as ignored, with
//! what it needs, and `cargo test -- --ignored` runs them (`.ci/run`,
//! which installs the tools, and `.ci/control-plane test`). Run so, they
//! say whether they ran or found their tool missing, one file per test
//! under `target/tmp/oracles/`, so that `.ci/run` can print which ran and
//! fail in CI if one did not: a skip notice on stderr shows only with
//! `--nocapture`.
//!
//! A file is named `ORACLE--TEST` and holds `ran` or `skipped: WHY`.

use std::path::PathBuf;

fn record(oracle: &str, outcome: &str) {
    // `.ci/control-plane test` keeps the markers of its recording run
    // apart (`LEASE_ELECTOR_ORACLE_DIR`), to say which oracles it could
    // not record.
    let dir = std::env::var_os("LEASE_ELECTOR_ORACLE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("oracles"));
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
