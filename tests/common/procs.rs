//! Looking at and signalling processes the CLI tests start, through
//! `/proc` and kill(1) (the tests run on a full system; the tools under
//! test need neither).

use std::process::Command;

use lease_elector::testing::TestApiServer;

/// Field `n` (0: state, 1: ppid, 2: pgrp, 3: session) after the command
/// name in `/proc/PID/stat`.
pub fn stat_field(pid: u32, n: usize) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(n)?.parse().ok()
}

/// The process state letter (`R`, `S`, `T`, `Z`, ...).
pub fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.trim_start().chars().next()
}

/// Running: it exists and is no zombie (a zombie has ended; only its
/// parent has not reaped it yet).
pub fn alive(pid: u32) -> bool {
    state(pid).is_some_and(|s| s != 'Z')
}

/// `kill ARGS...`, which must succeed.
pub fn kill(args: &[&str]) {
    let status = Command::new("kill").args(args).status().unwrap();
    assert!(status.success(), "kill {args:?}");
}

/// The Lease's holder, empty when released.
pub fn holder(server: &TestApiServer, namespace: &str, name: &str) -> String {
    assert!(
        server.lease(namespace, name).is_some(),
        "no lease {namespace}/{name}"
    );
    server.holder(namespace, name).unwrap_or_default()
}

/// `more` then `words`, as one argument list.
pub fn args<'a>(words: &'a [String], more: &[&'a str]) -> Vec<&'a str> {
    more.iter()
        .copied()
        .chain(words.iter().map(String::as_str))
        .collect()
}

/// `lease-elect`'s timing flags for a lease of 4 s, renew deadline 3 s,
/// retry period 1 s.
pub const SHORT_RENEWS: [&str; 6] = [
    "--lease-duration",
    "4",
    "--renew-deadline",
    "3",
    "--retry-period",
    "1",
];
