//! kubectl as the reference: the same kubeconfig handed to kubectl (client-go's
//! `clientcmd` in a binary) and to the crate, against a recording server and
//! a logging proxy, must show the same credentials, impersonation headers,
//! proxy route and TLS verdict. Skipped, with a notice, where kubectl is
//! not installed (`.ci/run` fails instead, so CI always runs these).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::recorder::{LoggingProxy, Recorded, Recorder, CA};
use common::tempdir::TempDir;
use lease_elector::{Client, ClientConfig, Deadline, Error};

const PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/probe";

fn kubectl() -> Option<PathBuf> {
    let found = std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file());
    if found.is_none() {
        eprintln!("skipped: kubectl is not installed");
    }
    found
}

/// A kubeconfig for `server` with extra `cluster:` and `user:` lines.
fn kubeconfig(dir: &TempDir, server: &str, cluster: &str, user: &str) -> PathBuf {
    dir.write("ca.pem", CA);
    dir.write(
        "config",
        format!(
            "apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: {server}
    certificate-authority: ca.pem
{cluster}
users:
- name: u
  user:
    token: s3cr3t
{user}
contexts:
- name: x
  context: {{cluster: c, user: u, namespace: ns}}
current-context: x
"
        ),
    )
}

/// Run `kubectl get --raw PATH` with this kubeconfig and no proxy variables.
fn run_kubectl(kubectl: &Path, config: &Path, home: &Path) -> bool {
    let mut cmd = Command::new(kubectl);
    cmd.args(["--kubeconfig"])
        .arg(config)
        .args(["--request-timeout=5s", "get", "--raw", PATH])
        .env("HOME", home)
        .env_remove("KUBECONFIG");
    for v in [
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "NO_PROXY",
        "https_proxy",
        "http_proxy",
        "no_proxy",
    ] {
        cmd.env_remove(v);
    }
    let out = cmd.output().expect("kubectl runs");
    eprintln!("kubectl: {}", String::from_utf8_lossy(&out.stderr).trim());
    out.status.success()
}

/// The crate's request with this kubeconfig: `Ok` when the server
/// answered (404 here), else the error.
fn run_crate(config: &Path) -> Result<(), Error> {
    let client = Client::new(ClientConfig::from_kubeconfig(config, None)?)?;
    match client.get_lease("ns", "probe", &Deadline::from_now(Duration::from_secs(5))) {
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e),
        Ok(_) => Ok(()),
    }
}

/// The one request each client sent (kubectl may send several; its
/// request for PATH is the one compared).
fn request_for_path(log: &[Recorded]) -> Option<Recorded> {
    // kubectl adds `?timeout=` from --request-timeout.
    log.iter()
        .find(|r| r.target.split('?').next() == Some(PATH))
        .cloned()
}

fn compare(server: &Recorder, config: &Path, home: &Path, kubectl: &Path) -> (Recorded, Recorded) {
    server.clear();
    run_kubectl(kubectl, config, home);
    let theirs = request_for_path(&server.requests()).expect("kubectl's request");
    server.clear();
    run_crate(config).expect("the crate's request is answered");
    let ours = request_for_path(&server.requests()).expect("the crate's request");
    (theirs, ours)
}

#[test]
fn credentials_never_cross_plain_http_as_with_kubectl() {
    let Some(kubectl) = kubectl() else { return };
    let dir = TempDir::new();
    let server = Recorder::start("127.0.0.1", false);
    let config = kubeconfig(&dir, &server.url, "", "    as: alice\n    as-groups: [ops]");
    let (theirs, ours) = compare(&server, &config, &dir.0, &kubectl);
    // kubectl sends the impersonation but not the token over http.
    let h = theirs.identity_headers();
    assert!(h.iter().all(|(n, _)| n != "authorization"), "{h:?}");
    assert!(
        h.iter()
            .any(|(n, v)| n == "impersonate-user" && v == "alice"),
        "{h:?}"
    );
    assert_eq!(ours.identity_headers(), h);
}

#[test]
fn impersonation_headers_match_kubectl() {
    let Some(kubectl) = kubectl() else { return };
    let dir = TempDir::new();
    let server = Recorder::start("127.0.0.1", true);
    let user = "    as: alice
    as-uid: \"1234\"
    as-groups: [ops, dev]
    as-user-extra:
      scopes: [view, edit]
      reason: [on-call]";
    let config = kubeconfig(&dir, &server.url, "", user);
    let (theirs, ours) = compare(&server, &config, &dir.0, &kubectl);
    let h = theirs.identity_headers();
    assert!(
        h.iter()
            .any(|(n, v)| n == "impersonate-user" && v == "alice"),
        "{h:?}"
    );
    assert!(h.iter().any(|(n, _)| n == "authorization"), "{h:?}");
    assert_eq!(ours.identity_headers(), h);
}

#[test]
fn proxy_url_routes_through_the_proxy_as_with_kubectl() {
    let Some(kubectl) = kubectl() else { return };
    let dir = TempDir::new();
    let server = Recorder::start("127.0.0.1", true);
    let proxy = LoggingProxy::start();
    let config = kubeconfig(
        &dir,
        &server.url,
        &format!("    proxy-url: {}", proxy.url),
        "",
    );
    let connect = format!("CONNECT {}", server.url.trim_start_matches("https://"));
    run_kubectl(&kubectl, &config, &dir.0);
    let carried = proxy.carried();
    assert!(
        !carried.is_empty() && carried.iter().all(|c| *c == connect),
        "kubectl: {carried:?}"
    );
    let theirs = request_for_path(&server.requests()).expect("kubectl's request");
    proxy.clear();
    server.clear();
    run_crate(&config).unwrap();
    assert_eq!(proxy.carried(), vec![connect], "the crate");
    let ours = request_for_path(&server.requests()).expect("the crate's request");
    assert_eq!(ours.identity_headers(), theirs.identity_headers());
}

#[test]
fn tls_server_name_gives_the_same_verdict_as_kubectl() {
    let Some(kubectl) = kubectl() else { return };
    let dir = TempDir::new();
    // The certificate names 127.0.0.1, ::1 and localhost; the server is
    // reached at 127.0.0.2, so only tls-server-name can make it verify.
    let server = Recorder::start("127.0.0.2", true);
    for (cluster, verifies) in [("    tls-server-name: localhost", true), ("", false)] {
        let config = kubeconfig(&dir, &server.url, cluster, "");
        server.clear();
        let kubectl_reached = run_kubectl(&kubectl, &config, &dir.0)
            || request_for_path(&server.requests()).is_some();
        server.clear();
        let ours = run_crate(&config);
        assert_eq!(kubectl_reached, verifies, "kubectl with {cluster:?}");
        assert_eq!(
            ours.is_ok(),
            verifies,
            "the crate with {cluster:?}: {ours:?}"
        );
    }
}

#[test]
fn an_exec_plugin_is_not_run_for_a_plain_http_server() {
    let Some(kubectl) = kubectl() else { return };
    let dir = TempDir::new();
    let server = Recorder::start("127.0.0.1", false);
    dir.script(
        "plugin.sh",
        &format!(
            "echo run >> {}/runs\necho '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"t\"}}}}'",
            dir.0.display()
        ),
    );
    let config = dir.write(
        "config",
        format!(
            "apiVersion: v1
clusters:
- name: c
  cluster: {{server: {}}}
users:
- name: u
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: {}
      interactiveMode: Never
contexts:
- name: x
  context: {{cluster: c, user: u}}
current-context: x
",
            server.url,
            dir.0.join("plugin.sh").display()
        ),
    );
    let (theirs, ours) = compare(&server, &config, &dir.0, &kubectl);
    assert_eq!(theirs.identity_headers(), Vec::new());
    assert_eq!(ours.identity_headers(), Vec::new());
    assert_eq!(dir.read("runs"), "", "the plugin ran");
}

#[test]
fn an_explicit_config_never_sends_a_token_in_clear_text_across_a_network() {
    // Not a kubeconfig: the caller's own rule. Loopback is fine (kubectl
    // proxy, a test server); elsewhere it must be asked for.
    let err = Client::new(ClientConfig::new("http://10.0.0.1:8080").token("t")).unwrap_err();
    assert!(err.to_string().contains("clear text"), "{err}");
    assert!(Client::new(
        ClientConfig::new("http://10.0.0.1:8080")
            .token("t")
            .allow_token_over_http(true)
    )
    .is_ok());
    assert!(Client::new(ClientConfig::new("http://127.0.0.1:8001").token("t")).is_ok());
    assert!(Client::new(ClientConfig::new("http://localhost:8001").token("t")).is_ok());
    let err = Client::new(ClientConfig::new("http://127.0.0.1:1").proxy("socks5://127.0.0.1:1080"))
        .unwrap_err();
    assert!(err.to_string().contains("SOCKS"), "{err}");
}
