//! The README's in-cluster program (`docs/in-cluster.rs`, built as
//! `examples/in_cluster.rs`) run as a user would run it outside a cluster:
//! `KUBECONFIG` names the embedded API server (TLS, a bearer token), and
//! `RUST_LOG=trace` is set, as a newcomer debugging it would. It leads,
//! works, and on SIGTERM exits 0 having released the Lease; its log never
//! shows the token, although the crate's own trace and debug lines do show.

mod common;

use std::process::Command;

use common::spawned::Spawned;
use common::tempdir::TempDir;
use common::{eventually, example};
use lease_elector::testing::TestApiServer;

const TOKEN: &str = "R3adm3-T0ken-9c1d";

#[test]
fn the_readme_program_leads_releases_on_sigterm_and_never_logs_its_token() {
    let server = TestApiServer::builder()
        .tls(true)
        .tokens(&[TOKEN])
        .build()
        .unwrap();
    let dir = TempDir::new();
    let kubeconfig = dir.0.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig, Some(TOKEN)).unwrap();

    let mut program = Spawned::start(
        Command::new(example("in_cluster"))
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "trace"),
        true,
    );
    // The log is the program's only output: wait for its first step.
    eventually("the first step of the work", || {
        program.log().contains("leading with token ")
    });
    assert!(
        server.holder("default", "my-operator").is_some(),
        "{}",
        program.log()
    );

    program.signal("-TERM");
    assert_eq!(program.exit_code(), Some(0), "{}", program.log());
    assert!(server.lease("default", "my-operator").is_some());
    assert_eq!(
        server.holder("default", "my-operator"),
        None,
        "released on the way out: {}",
        program.log()
    );

    let log = program.log();
    // Trace was on: the requests' lines below info would have shown.
    assert!(
        log.contains("DEBUG") || log.contains("TRACE"),
        "RUST_LOG=trace took no effect: {log}"
    );
    // ureq's trace dumps each request's bytes, the Authorization header
    // among them, 16 to a line (so a long token is cut across lines): the
    // program keeps every ureq target at info.
    let below_info = log
        .lines()
        .find(|l| l.starts_with("[DEBUG ureq") || l.starts_with("[TRACE ureq"));
    assert_eq!(below_info, None, "a ureq line below info: {log}");
    assert!(!log.contains(TOKEN), "the token was logged: {log}");
}

/// `main` returns `Box<dyn Error>`, which Rust prints with `Debug`: the
/// README program's error reads as the message that says what to fix, not
/// a dump of the enum (`InvalidConfig("...")`).
#[test]
fn the_readme_program_prints_what_to_fix_when_it_cannot_start() {
    let dir = TempDir::new();
    let missing = dir.0.join("no-such-kubeconfig");
    let out = Command::new(example("in_cluster"))
        .env("KUBECONFIG", &missing)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let want = format!(
        "Error: invalid configuration: not in a cluster (KUBERNETES_SERVICE_HOST is not set) \
         and no kubeconfig at {} (InvalidConfig)\n",
        missing.display()
    );
    assert!(stderr.ends_with(&want), "{stderr}");
}
