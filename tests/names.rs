//! Names from outside (a kubeconfig, a config file, a caller) are checked
//! as Kubernetes checks them before they name a thread or a request: a NUL
//! or an over-long name is a clear error through every constructor, never
//! a panic (an abort under `panic = "abort"`).

mod common;

use common::*;
use lease_elector::openshift::LeaderElection;
use lease_elector::testing::TestApiServer;
use lease_elector::{ClientConfig, Error, EventRecorder, LeaderElector, LeaseLock};

fn build(namespace: &str, name: &str, identity: &str) -> lease_elector::Result<()> {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let lock = LeaseLock::new(client(&server), namespace, name, identity);
    let (handle, _events) = LeaderElector::builder(lock).build()?.spawn()?;
    handle.stop()
}

fn refused(result: lease_elector::Result<()>, needle: &str) {
    match result {
        Err(Error::InvalidConfig(msg)) => {
            assert!(msg.contains(needle), "{msg}");
            assert!(!msg.chars().any(char::is_control), "escaped: {msg:?}");
        }
        other => panic!("expected InvalidConfig about {needle}, got {other:?}"),
    }
}

#[test]
fn bad_namespaces_names_and_identities_are_errors_at_build() {
    refused(build("a\0b", "lock", "me"), "namespace");
    refused(build(&"n".repeat(64), "lock", "me"), "namespace");
    refused(build("Team-A", "lock", "me"), "namespace");
    refused(build("ns", "lo\0ck", "me"), "lease name");
    refused(build("ns", &"l".repeat(254), "me"), "lease name");
    refused(build("ns", "a/b", "me"), "lease name");
    refused(build("ns", "lock", "m\0e"), "identity");
    refused(build("ns", "lock", ""), "identity");
    // What Kubernetes accepts is accepted: a Lease name is a DNS-1123
    // subdomain as apimachinery checks it, with no limit of 63 on a part.
    build("kube-system", "cert-manager.io-controller", "pod-a_ü 1").unwrap();
    build("kube-system", &format!("{}.lock", "p".repeat(70)), "me").unwrap();
}

#[test]
fn the_openshift_config_refuses_them_too() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    for (namespace, name) in [("a\0b", "lock"), ("ns", "lo\0ck"), ("ns", "UPPER")] {
        let cfg = LeaderElection::default().defaulted(namespace, name);
        let result = cfg.elector(client(&server), "component", "me").map(|_| ());
        assert!(
            matches!(result, Err(Error::InvalidConfig(_))),
            "{namespace:?}/{name:?}: {result:?}"
        );
    }
}

#[test]
fn a_kubeconfig_namespace_with_a_nul_is_an_error_not_a_panic() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let dir = common::tempdir::TempDir::new();
    let json = serde_json::json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server.url()}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": "a\u{0}b"}}],
    });
    let path = dir.write("kubeconfig.json", json.to_string());
    // Either the kubeconfig is refused, or the elector built on it is.
    let result = ClientConfig::from_kubeconfig(&path, None).and_then(|config| {
        let namespace = config.namespace().unwrap_or("default").to_string();
        let lock = LeaseLock::new(lease_elector::Client::new(config)?, namespace, "lock", "me");
        LeaderElector::builder(lock).build().map(|_| ())
    });
    let err = result.expect_err("a NUL in the namespace");
    assert!(!err.to_string().contains('\0'), "{err}");
}

#[test]
fn thread_names_never_panic_whatever_they_are_given() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    // An event recorder names its thread after the component.
    let recorder = EventRecorder::new(client(&server), "comp\0onent");
    let lock = LeaseLock::new(client(&server), NS, LEASE, "me")
        .with_event_sink(std::sync::Arc::new(recorder));
    let (handle, events) = LeaderElector::builder(lock)
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    wait_started(&events);
    handle.stop().unwrap();
}
