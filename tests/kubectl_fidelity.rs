//! kubectl as the reference: the same kubeconfig handed to kubectl (client-go's
//! `clientcmd` in a binary) and to the crate, against a recording server and
//! a logging proxy, must show the same credentials, impersonation headers,
//! proxy route and TLS verdict; and with `KUBERNETES_SERVICE_HOST` set,
//! in and out of a pod, the same choice between a kubeconfig and the
//! in-cluster configuration. Ignored by plain `cargo test`; under
//! `--ignored`, skipped with a notice where kubectl is not
//! installed (`.ci/run` fails instead, so CI always runs these).

mod common;

use common::RawLeases;

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
    // Say which ran for `.ci/run`'s summary (tests/common/oracle.rs).
    match found {
        Some(_) => common::oracle::ran("kubectl"),
        None => common::oracle::skipped("kubectl", "kubectl is not installed"),
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
#[ignore = "needs kubectl"]
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
#[ignore = "needs kubectl"]
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
#[ignore = "needs kubectl"]
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
#[ignore = "needs kubectl"]
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
#[ignore = "needs kubectl"]
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

/// What kubectl and the crate make of a kubeconfig of the corpus.
#[derive(Clone, Copy, Debug)]
enum Outcome {
    /// The same view and the same first request.
    Same,
    /// Both refuse it; the crate's error says this.
    BothRefuse(&'static str),
    /// kubectl takes it, the crate refuses it with this reason (only
    /// basic auth, which the API server removed).
    CrateRefuses(&'static str),
}

/// `fixtures/kubeconfigs/`: the shapes real tools and people write.
const CORPUS: &[(&str, Outcome)] = &[
    ("kind.yaml", Outcome::Same),
    ("k3s.yaml", Outcome::Same),
    ("minikube/config", Outcome::Same),
    ("gke-exec.yaml", Outcome::Same),
    ("aks-kubelogin.yaml", Outcome::Same),
    ("eks.yaml", Outcome::Same),
    ("oc-login.yaml", Outcome::Same),
    ("rancher-prefix.yaml", Outcome::Same),
    ("kubectl-json.json", Outcome::Same),
    ("no-namespace.yaml", Outcome::Same),
    ("flow-multiline.yaml", Outcome::Same),
    ("anchors.yaml", Outcome::Same),
    ("impersonation.yaml", Outcome::Same),
    ("insecure.yaml", Outcome::Same),
    ("oidc.yaml", Outcome::Same),
    ("hand-edited.yaml", Outcome::Same),
    ("hand-written.yaml", Outcome::Same),
    // Shapes an independent check found kubectl reads and the crate had
    // refused: a flow collection closed at column 0 or below its key (as
    // hand-written JSON-like files have it), a `%YAML 1.1` directive, and
    // `sub/../token` where `sub` does not exist (Go cleans it lexically).
    ("flow-closed-at-column-0.yaml", Outcome::Same),
    ("flow-map-closed-below-its-key.yaml", Outcome::Same),
    ("yaml-directive.yaml", Outcome::Same),
    ("relative-paths/config", Outcome::Same),
    ("crlf-bom.yaml", Outcome::Same),
    ("tabs.yaml", Outcome::Same),
    ("odd-comments.yaml", Outcome::Same),
    ("block-scalars.yaml", Outcome::Same),
    ("merge-override-order.yaml", Outcome::Same),
    ("two-documents.yaml", Outcome::Same),
    // `HTTPS://`: TLS, with the token and CA, as Go's url.Parse reads it
    // (the crate had taken it for plain http and dropped both).
    ("upper-case-scheme.yaml", Outcome::Same),
    // `namespace: !team null`, `as: ! ~`: strings, as go-yaml reads a
    // scalar under a tag it cannot resolve (the crate had read null,
    // acting in `default` and dropping the impersonation).
    ("unresolved-tags.yaml", Outcome::Same),
    (
        "insecure-with-ca.yaml",
        Outcome::BothRefuse(
            "specifying a root certificates file with the insecure flag is not allowed",
        ),
    ),
    (
        "gcp-auth-provider.yaml",
        Outcome::BothRefuse("removed in 1.26: use the exec plugin gke-gcloud-auth-plugin"),
    ),
    (
        "azure-auth-provider.yaml",
        Outcome::BothRefuse("removed in 1.26: use the exec plugin kubelogin"),
    ),
    ("billion-laughs.yaml", Outcome::BothRefuse("billion laughs")),
    (
        "basic-auth.yaml",
        Outcome::CrateRefuses("basic auth, which Kubernetes removed"),
    ),
];

/// A copy of corpus file `name` (and the files next to it) in `dir`,
/// pointed at `server` (host:port), with each exec plugin replaced by a
/// script of the same name that answers `exec-<name>`.
fn corpus_copy(dir: &TempDir, name: &str, server: &str) -> PathBuf {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/kubeconfigs");
    let source = corpus.join(name);
    for entry in std::fs::read_dir(source.parent().unwrap()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() && path != source {
            dir.write(
                &path.file_name().unwrap().to_string_lossy(),
                std::fs::read(&path).unwrap(),
            );
        }
    }
    let mut text = std::fs::read_to_string(&source)
        .unwrap()
        .replace("127.0.0.1:6443", server);
    for plugin in ["gke-gcloud-auth-plugin", "kubelogin", "aws"] {
        let script = dir.script(
            plugin,
            "v=$(printf '%s' \"$KUBERNETES_EXEC_INFO\" | sed -n 's/.*\"apiVersion\":\"\\([^\"]*\\)\".*/\\1/p')\n\
             printf '{\"apiVersion\":\"%s\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"exec-%s\"}}' \"$v\" \"$(basename \"$0\")\"",
        );
        text = text.replace(
            &format!("command: {plugin}\n"),
            &format!("command: {}\n", script.display()),
        );
    }
    dir.write("config", text)
}

/// `kubectl config view --raw --minify -o json` of `config`, or its error.
fn kubectl_view(kubectl: &Path, config: &Path, home: &Path) -> Result<serde_json::Value, String> {
    let out = Command::new(kubectl)
        .args([
            "config",
            "view",
            "--raw",
            "--minify",
            "-o",
            "json",
            "--kubeconfig",
        ])
        .arg(config)
        .env("HOME", home)
        .env_remove("KUBECONFIG")
        .output()
        .expect("kubectl runs");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Some kubectl builds print a plugin's complaints before the JSON.
    let json = &stdout[stdout.find('{').ok_or_else(|| stdout.to_string())?..];
    serde_json::from_str(json).map_err(|e| format!("{e}: {stdout}"))
}

/// The crate's view of the config against kubectl's: server, namespace
/// (clientcmd's `default` when the context names none), kind of
/// credentials, impersonation, TLS settings.
fn compare_views(name: &str, view: &serde_json::Value, cfg: &ClientConfig) {
    let cluster = &view["clusters"][0]["cluster"];
    let user = &view["users"][0]["user"];
    let context = &view["contexts"][0]["context"];
    let ours = format!("{cfg:?}");
    // The scheme as Go reads it, in lower case (kubectl shows it as written).
    let server = cluster["server"].as_str().unwrap().trim_end_matches('/');
    let server = match server.split_once("://") {
        Some((scheme, rest)) => format!("{}://{rest}", scheme.to_ascii_lowercase()),
        None => server.to_string(),
    };
    assert_eq!(cfg.base_url(), server, "{name}: server");
    assert_eq!(
        cfg.namespace(),
        Some(context["namespace"].as_str().unwrap_or("default")),
        "{name}: namespace"
    );
    // A token file wins over an inline token, as in client-go.
    let credentials = if let Some(file) = user.get("tokenFile") {
        // kubectl shows the path as written; the crate's is resolved.
        let name = Path::new(file.as_str().unwrap()).file_name().unwrap();
        assert!(
            ours.contains(&format!("{}\"", name.to_string_lossy())),
            "{name:?} in {ours}"
        );
        "token: \"file /".to_string()
    } else if user.get("token").is_some() {
        "token: \"static (redacted)\"".to_string()
    } else if let Some(exec) = user.get("exec") {
        format!("token: \"exec plugin {}", exec["command"].as_str().unwrap())
    } else if let Some(provider) = user.get("auth-provider") {
        format!(
            "token: \"{} auth-provider",
            provider["name"].as_str().unwrap()
        )
    } else {
        "token: \"none\"".to_string()
    };
    assert!(
        ours.contains(&credentials),
        "{name}: {credentials} in {ours}"
    );
    let has_cert =
        user.get("client-certificate-data").is_some() || user.get("client-certificate").is_some();
    assert!(
        ours.contains(&format!("client_identity: {has_cert}")),
        "{name}: client certificate in {ours}"
    );
    if let Some(who) = user.get("as").and_then(|a| a.as_str()) {
        assert!(
            ours.contains(&format!("user: \"{who}\"")),
            "{name}: as in {ours}"
        );
    }
    let has_ca = cluster.get("certificate-authority-data").is_some()
        || cluster.get("certificate-authority").is_some();
    assert_eq!(
        ours.contains("ca_pem: Some("),
        has_ca,
        "{name}: CA in {ours}"
    );
    let insecure = cluster["insecure-skip-tls-verify"]
        .as_bool()
        .unwrap_or(false);
    assert!(
        ours.contains(&format!("insecure_skip_tls_verify: {insecure}")),
        "{name}: insecure in {ours}"
    );
    if let Some(sni) = cluster.get("tls-server-name").and_then(|s| s.as_str()) {
        assert!(
            ours.contains(&format!("tls_server_name: Some(\"{sni}\")")),
            "{name}: {ours}"
        );
    }
}

/// A request's server path prefix and namespace: what comes before and
/// after `/api/v1/namespaces/` or `/apis/coordination.k8s.io/v1/namespaces/`.
fn prefix_and_namespace(target: &str) -> Option<(String, String)> {
    let path = target.split('?').next()?;
    [
        "/api/v1/namespaces/",
        "/apis/coordination.k8s.io/v1/namespaces/",
    ]
    .iter()
    .find_map(|marker| {
        let (prefix, rest) = path.split_once(marker)?;
        Some((prefix.to_string(), rest.split('/').next()?.to_string()))
    })
}

/// kubectl's request in its namespace (`create configmap --dry-run=server`
/// posts to `<prefix>/api/v1/namespaces/<ns>/configmaps`), or its error.
fn kubectl_request(
    kubectl: &Path,
    config: &Path,
    home: &Path,
    server: &Recorder,
) -> Result<Recorded, String> {
    server.clear();
    let out = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(config)
        .args([
            "--request-timeout=5s",
            "create",
            "configmap",
            "probe",
            "--dry-run=server",
            "-o",
            "name",
        ])
        .env("HOME", home)
        .env_remove("KUBECONFIG")
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .output()
        .expect("kubectl runs");
    server
        .requests()
        .into_iter()
        .find(|r| r.method == "POST" && r.target.contains("/configmaps"))
        .ok_or_else(|| String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The crate's first request for the Lease in the config's namespace.
fn crate_request(cfg: ClientConfig, server: &Recorder) -> Result<Recorded, Error> {
    server.clear();
    let ns = cfg.namespace().unwrap_or("").to_string();
    let client = Client::new(cfg)?;
    match client.get_lease(&ns, "probe", &Deadline::from_now(Duration::from_secs(5))) {
        Err(e) if !e.is_not_found() => return Err(e),
        _ => {}
    }
    Ok(server
        .requests()
        .into_iter()
        .find(|r| r.target.contains("/leases/probe"))
        .expect("the crate's request"))
}

/// Every kubeconfig of the corpus, read by kubectl and by the crate: the
/// same view (`kubectl config view --raw --minify -o json`) and the same
/// first request (server path prefix, namespace, `Authorization`,
/// `Impersonate-*`, SNI, client certificate), or both refuse it.
#[test]
#[ignore = "needs kubectl"]
fn every_kubeconfig_of_the_corpus_reads_as_kubectl_reads_it() {
    let Some(kubectl) = kubectl() else { return };
    let server = Recorder::start("127.0.0.1", true);
    let addr = server.url.trim_start_matches("https://").to_string();
    for &(name, outcome) in CORPUS {
        let dir = TempDir::new();
        let config = corpus_copy(&dir, name, &addr);
        let view = kubectl_view(&kubectl, &config, &dir.0);
        let ours = ClientConfig::from_kubeconfig(&config, None);
        let theirs = kubectl_request(&kubectl, &config, &dir.0, &server);
        match outcome {
            Outcome::Same => {
                let view = view.unwrap_or_else(|e| panic!("{name}: kubectl view: {e}"));
                let ours = ours.unwrap_or_else(|e| panic!("{name}: the crate: {e}"));
                compare_views(name, &view, &ours);
                let theirs = theirs.unwrap_or_else(|e| panic!("{name}: kubectl's request: {e}"));
                let mine = crate_request(ours, &server)
                    .unwrap_or_else(|e| panic!("{name}: the crate's request: {e}"));
                assert_eq!(
                    prefix_and_namespace(&mine.target),
                    prefix_and_namespace(&theirs.target),
                    "{name}: path prefix and namespace"
                );
                assert_eq!(mine.identity_headers(), theirs.identity_headers(), "{name}");
                assert_eq!(mine.sni, theirs.sni, "{name}: SNI");
                assert_eq!(
                    mine.client_cert, theirs.client_cert,
                    "{name}: client certificate"
                );
            }
            Outcome::BothRefuse(reason) => {
                assert!(theirs.is_err(), "{name}: kubectl sent {theirs:?}");
                let err = ours
                    .and_then(|cfg| crate_request(cfg, &server))
                    .expect_err(name)
                    .to_string();
                assert!(err.contains(reason), "{name}: {err}");
            }
            Outcome::CrateRefuses(reason) => {
                assert!(theirs.is_ok(), "{name}: kubectl: {theirs:?}");
                let err = ours.expect_err(name).to_string();
                assert!(err.contains(reason), "{name}: {err}");
            }
        }
        eprintln!("{name}: {outcome:?} as expected");
    }
}

/// kubectl and both command-line tools act in `default` when the
/// context names no namespace.
#[test]
#[ignore = "needs kubectl"]
fn a_context_without_a_namespace_means_default_for_kubectl_and_both_tools() {
    let Some(kubectl) = kubectl() else { return };
    let server = lease_elector::testing::TestApiServer::start().unwrap();
    let dir = TempDir::new();
    let config = dir.write(
        "config",
        format!(
            "clusters:\n- name: c\n  cluster: {{server: '{}'}}\nusers:\n- name: u\n  user: {{}}\n\
             contexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
            server.url()
        ),
    );
    Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(&config)
        .args([
            "--request-timeout=5s",
            "create",
            "configmap",
            "probe",
            "--dry-run=server",
        ])
        .env("HOME", &dir.0)
        .output()
        .unwrap();
    let posted: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .map(|r| r.path)
        .collect();
    assert!(
        posted
            .iter()
            .any(|p| p.starts_with("/api/v1/namespaces/default/configmaps")),
        "kubectl: {posted:?}"
    );
    for (bin, lock) in [
        (
            PathBuf::from(env!("CARGO_BIN_EXE_lease-elect")),
            "by-lease-elect",
        ),
        (common::example("elect"), "by-elect"),
    ] {
        assert!(
            bin.exists(),
            "{} missing: run via `cargo test`",
            bin.display()
        );
        let mut child = Command::new(&bin)
            .arg("--kubeconfig")
            .arg(&config)
            .args(["--name", lock, "--identity", "me", "--ignore-stdin"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while server.lease_value("default", lock).is_none() && std::time::Instant::now() < deadline
        {
            if let Some(status) = child.try_wait().unwrap() {
                let mut err = String::new();
                std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
                panic!("{} exited {status}: {err}", bin.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            server.lease_value("default", lock).is_some(),
            "{}: no lease in namespace default",
            bin.display()
        );
    }
}

/// `insecure-skip-tls-verify: true`: kubectl connects to a server whose
/// certificate does not name the address it is reached at; so does the
/// crate, and sends the same request.
#[test]
#[ignore = "needs kubectl"]
fn insecure_skip_tls_verify_connects_as_kubectl_does() {
    let Some(kubectl) = kubectl() else { return };
    let dir = TempDir::new();
    // The certificate names 127.0.0.1, ::1 and localhost, not 127.0.0.2.
    let server = Recorder::start("127.0.0.2", true);
    let config = dir.write(
        "config",
        format!(
            "clusters:\n- name: lab\n  cluster: {{server: '{}', insecure-skip-tls-verify: true}}\n\
             users:\n- name: u\n  user: {{token: lab-token}}\n\
             contexts:\n- name: x\n  context: {{cluster: lab, user: u, namespace: ns}}\n\
             current-context: x\n",
            server.url
        ),
    );
    let (theirs, ours) = compare(&server, &config, &dir.0, &kubectl);
    assert!(theirs
        .identity_headers()
        .contains(&("authorization".into(), "Bearer lab-token".into())));
    assert_eq!(ours.identity_headers(), theirs.identity_headers());
    assert_eq!(ours.sni, theirs.sni);
}

/// A TLS server that presents the test server certificate but signs the
/// handshake with another key: it cannot prove it holds the certificate's
/// key. Returns its URL and how many request bytes it ever received.
fn imposter() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[derive(Debug)]
    struct Fixed(Arc<rustls::sign::CertifiedKey>);
    impl rustls::server::ResolvesServerCert for Fixed {
        fn resolve(
            &self,
            _: rustls::server::ClientHello<'_>,
        ) -> Option<Arc<rustls::sign::CertifiedKey>> {
            Some(self.0.clone())
        }
    }
    let certs = CertificateDer::pem_slice_iter(include_bytes!("../fixtures/tls/server.pem"))
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let wrong_key =
        PrivateKeyDer::from_pem_slice(include_bytes!("../fixtures/tls/ca-key.pem")).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let signer = provider.key_provider.load_private_key(wrong_key).unwrap();
    let resolver = Fixed(Arc::new(rustls::sign::CertifiedKey::new(certs, signer)));
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(resolver)),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let received = Arc::new(AtomicUsize::new(0));
    let counter = received.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let (config, counter) = (config.clone(), counter.clone());
            std::thread::spawn(move || {
                let Ok(session) = rustls::ServerConnection::new(config) else {
                    return;
                };
                let mut stream = rustls::StreamOwned::new(session, conn);
                let mut buf = [0u8; 1024];
                if let Ok(n) = std::io::Read::read(&mut stream, &mut buf) {
                    counter.fetch_add(n, Ordering::SeqCst);
                }
            });
        }
    });
    (url, received)
}

/// Go's `InsecureSkipVerify` skips the certificate's chain and name, not
/// the handshake: a server that cannot sign with its certificate's key is
/// refused by kubectl and by the crate, and gets no request (and so no
/// token).
#[test]
#[ignore = "needs kubectl"]
fn insecure_skip_tls_verify_still_checks_the_handshake_as_kubectl_does() {
    use std::sync::atomic::Ordering;
    let Some(kubectl) = kubectl() else { return };
    let dir = TempDir::new();
    let (url, received) = imposter();
    let config = dir.write(
        "config",
        format!(
            "clusters:\n- name: lab\n  cluster: {{server: '{url}', insecure-skip-tls-verify: true}}\n\
             users:\n- name: u\n  user: {{token: lab-token}}\n\
             contexts:\n- name: x\n  context: {{cluster: lab, user: u, namespace: ns}}\n\
             current-context: x\n"
        ),
    );
    assert!(!run_kubectl(&kubectl, &config, &dir.0), "kubectl connected");
    let err = run_crate(&config).expect_err("the crate connected");
    assert!(err.is_transport(), "{err}");
    assert_eq!(
        received.load(Ordering::SeqCst),
        0,
        "a request reached the imposter"
    );
}

/// Which of two servers a client talked to: the kubeconfig's, or the one
/// `KUBERNETES_SERVICE_HOST`/`_PORT` name (the in-cluster configuration).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chose {
    Kubeconfig,
    InCluster,
    /// Neither: an error, or (kubectl) its last resort `http://localhost:8080`.
    Neither,
}

/// What kubectl does in a case, as seen running kubectl 1.32: a
/// kubeconfig that leads to a server comes first; a missing one, or one
/// that leads nowhere, gives way to the in-cluster configuration where a
/// pod's service-account token is mounted; without it there is nothing.
#[derive(Clone, Copy, Debug)]
enum Expect {
    Kubeconfig,
    /// The in-cluster configuration in a pod, nothing elsewhere.
    InClusterInAPod,
    Neither,
}

/// The kubeconfig server (plain HTTP, no credentials) and the "in-cluster"
/// one (TLS, the certificate the fixtures' CA signed for 127.0.0.1).
struct TwoServers {
    kubeconfig: Recorder,
    in_cluster: Recorder,
}

impl TwoServers {
    fn clear(&self) {
        self.kubeconfig.clear();
        self.in_cluster.clear();
    }

    /// Which was talked to since the last `clear`. An "in-cluster" client
    /// that refuses the certificate (a real pod's CA did not sign it) still
    /// connected: the server accepts before it answers the handshake.
    fn chosen(&self, who: &str) -> Chose {
        let (kubeconfig, in_cluster) = (
            !self.kubeconfig.requests().is_empty(),
            self.in_cluster.connections() > 0,
        );
        assert!(!(kubeconfig && in_cluster), "{who} talked to both servers");
        match (kubeconfig, in_cluster) {
            (true, _) => Chose::Kubeconfig,
            (_, true) => Chose::InCluster,
            _ => Chose::Neither,
        }
    }

    fn service_env(&self) -> [(&'static str, String); 2] {
        let port = self.in_cluster.url.rsplit(':').next().unwrap().to_string();
        [
            ("KUBERNETES_SERVICE_HOST", "127.0.0.1".to_string()),
            ("KUBERNETES_SERVICE_PORT", port),
        ]
    }
}

/// Where the pod's service account would be.
const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// How to give both clients a pod's service-account folder: a private
/// mount namespace in which a tmpfs over `/var/run` holds the token, the
/// fixtures' CA and a namespace (`unshare`; as root, or in a user namespace
/// of its own). `None` where neither is allowed.
fn pod_wrapper(sa: &Path) -> Option<Vec<String>> {
    let script = "src=$1; shift; mount -t tmpfs tmpfs /var/run && \
                  d=/var/run/secrets/kubernetes.io/serviceaccount && mkdir -p \"$d\" && \
                  cp \"$src/token\" \"$src/ca.crt\" \"$src/namespace\" \"$d/\" && exec \"$@\"";
    let sa = sa.display().to_string();
    [
        vec!["--mount", "--propagation", "private"],
        vec![
            "--user",
            "--map-root-user",
            "--mount",
            "--propagation",
            "private",
        ],
    ]
    .into_iter()
    .map(|flags| {
        let mut words: Vec<String> = vec!["unshare".into()];
        words.extend(flags.iter().map(|f| f.to_string()));
        words.extend(["--", "sh", "-c", script, "sh", &sa].map(String::from));
        words
    })
    .find(|words| {
        let probe = format!("test -s {SERVICE_ACCOUNT}/token");
        Command::new(&words[0])
            .args(&words[1..])
            .args(["sh", "-c", &probe])
            .output()
            .is_ok_and(|out| out.status.success())
    })
}

/// `program args` with exactly `env` (and PATH), inside `wrapper` if any.
fn command_in(
    wrapper: Option<&[String]>,
    env: &[(&str, String)],
    program: &Path,
    args: &[String],
) -> Command {
    let mut cmd = match wrapper {
        Some(words) => {
            let mut cmd = Command::new(&words[0]);
            cmd.args(&words[1..]).arg(program);
            cmd
        }
        None => Command::new(program),
    };
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k, v)));
    cmd
}

/// Each case of kubectl's choice between a kubeconfig and the in-cluster
/// configuration, with `KUBERNETES_SERVICE_HOST`/`_PORT` set, run by
/// kubectl and by `lease-elect` (whose default is `ClientConfig::infer`)
/// in the same environment: both must talk to the same server, and to the
/// one kubectl was seen to choose. `in_a_pod`: whether a service-account
/// token is mounted, so that the in-cluster configuration is possible.
fn both_choose_as_kubectl(kubectl: &Path, wrapper: Option<&[String]>, in_a_pod: bool) {
    let dir = TempDir::new();
    let servers = TwoServers {
        kubeconfig: Recorder::start("127.0.0.1", false),
        in_cluster: Recorder::start("127.0.0.1", true),
    };
    let config = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: '{}'}}\n\
         users:\n- name: u\n  user: {{}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u, namespace: ns}}\n\
         current-context: x\n",
        servers.kubeconfig.url
    );
    let path = |p: PathBuf| p.display().to_string();
    let kubeconfig = path(dir.write("kubeconfig", &config));
    let home_with = path(dir.0.join("home-with"));
    dir.write("home-with/.kube/config", &config);
    let home_without = path(dir.0.join("home-without"));
    std::fs::create_dir_all(&home_without).unwrap();
    let missing = path(dir.0.join("missing"));
    let empty = path(dir.write("empty", ""));
    let no_current = path(dir.write("no-current", config.replace("current-context: x\n", "")));
    let names_no_context = path(dir.write(
        "names-no-context",
        config.replace("current-context: x", "current-context: nope"),
    ));
    let list = format!("{missing}:{kubeconfig}");

    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, Option<&'a str>, Expect);
    let cases: Vec<Case> = vec![
        (
            "KUBECONFIG names a kubeconfig",
            vec![("KUBECONFIG", &kubeconfig), ("HOME", &home_without)],
            None,
            Expect::Kubeconfig,
        ),
        (
            "KUBECONFIG lists a missing file, then a kubeconfig",
            vec![("KUBECONFIG", &list), ("HOME", &home_without)],
            None,
            Expect::Kubeconfig,
        ),
        (
            "KUBECONFIG names a missing file (~/.kube/config is not read then)",
            vec![("KUBECONFIG", &missing), ("HOME", &home_with)],
            None,
            Expect::InClusterInAPod,
        ),
        (
            "no KUBECONFIG, ~/.kube/config",
            vec![("HOME", &home_with)],
            None,
            Expect::Kubeconfig,
        ),
        (
            "an empty KUBECONFIG, ~/.kube/config",
            vec![("KUBECONFIG", ""), ("HOME", &home_with)],
            None,
            Expect::Kubeconfig,
        ),
        (
            "no kubeconfig anywhere",
            vec![("HOME", &home_without)],
            None,
            Expect::InClusterInAPod,
        ),
        (
            "KUBECONFIG names an empty file",
            vec![("KUBECONFIG", &empty), ("HOME", &home_with)],
            None,
            Expect::InClusterInAPod,
        ),
        (
            "KUBECONFIG names a kubeconfig without a current context",
            vec![("KUBECONFIG", &no_current), ("HOME", &home_with)],
            None,
            Expect::InClusterInAPod,
        ),
        (
            "KUBECONFIG's current context names no context",
            vec![("KUBECONFIG", &names_no_context), ("HOME", &home_with)],
            None,
            Expect::Neither,
        ),
        (
            "--kubeconfig names a kubeconfig",
            vec![("HOME", &home_without)],
            Some(&kubeconfig),
            Expect::Kubeconfig,
        ),
        (
            "--kubeconfig names a missing file",
            vec![("HOME", &home_with)],
            Some(&missing),
            Expect::Neither,
        ),
    ];
    let lease_elect = PathBuf::from(env!("CARGO_BIN_EXE_lease-elect"));
    for (case, vars, explicit, expect) in cases {
        let mut env: Vec<(&str, String)> = servers.service_env().to_vec();
        env.extend(vars.iter().map(|(k, v)| (*k, v.to_string())));
        let explicit: Vec<String> = explicit
            .map(|f| vec!["--kubeconfig".to_string(), f.to_string()])
            .unwrap_or_default();

        // No --request-timeout: a flag that sets a client option makes
        // kubectl's configuration differ from clientcmd's default, and
        // kubectl then never tries the in-cluster one (seen with 1.32).
        let mut args: Vec<String> = ["-v=6", "get", "--raw", PATH].map(String::from).to_vec();
        args.extend(explicit.iter().cloned());
        servers.clear();
        let out = command_in(wrapper, &env, kubectl, &args)
            .output()
            .expect("kubectl runs");
        let theirs = servers.chosen("kubectl");
        let kubectl_said = String::from_utf8_lossy(&out.stderr).into_owned();
        let their_request = servers.in_cluster.requests().first().cloned();

        // One attempt, then exit: which server it asked is all this looks at.
        let mut args: Vec<String> = [
            "--namespace",
            "ns",
            "--name",
            "probe",
            "--identity",
            "me",
            "--no-events",
            "--acquire-timeout",
            "0",
        ]
        .map(String::from)
        .to_vec();
        args.extend(explicit);
        args.extend(["--", "true"].map(String::from));
        servers.clear();
        let out = command_in(wrapper, &env, &lease_elect, &args)
            .output()
            .expect("lease-elect runs");
        let ours = servers.chosen("lease-elect");
        let we_said = String::from_utf8_lossy(&out.stderr).into_owned();
        let our_request = servers.in_cluster.requests().first().cloned();

        let want = match expect {
            Expect::Kubeconfig => Chose::Kubeconfig,
            Expect::InClusterInAPod if in_a_pod => Chose::InCluster,
            Expect::InClusterInAPod | Expect::Neither => Chose::Neither,
        };
        assert_eq!(
            theirs, want,
            "{case}: kubectl chose otherwise:\n{kubectl_said}"
        );
        assert_eq!(
            ours, theirs,
            "{case}: lease-elect chose otherwise than kubectl:\n{we_said}\nkubectl:\n{kubectl_said}"
        );
        // Where the in-cluster server's certificate verified (a faked
        // pod), both sent the service account's token.
        if let (Some(theirs), Some(ours)) = (&their_request, &our_request) {
            assert_eq!(ours.identity_headers(), theirs.identity_headers(), "{case}");
        }
        eprintln!("{case}: {ours:?}, as kubectl");
    }
}

/// With `KUBERNETES_SERVICE_HOST`/`_PORT` set (in a pod, or as a CI runner
/// inside one sets them), an explicit `$KUBECONFIG`, `--kubeconfig` or
/// `~/.kube/config` is used before the in-cluster configuration, as kubectl
/// uses it, in this environment as it is (a pod's service account or none).
#[test]
#[ignore = "needs kubectl"]
fn with_kubernetes_service_host_set_infer_talks_to_the_server_kubectl_talks_to() {
    let Some(kubectl) = kubectl() else { return };
    let in_a_pod = Path::new(SERVICE_ACCOUNT).join("token").is_file();
    both_choose_as_kubectl(&kubectl, None, in_a_pod);
}

/// The same cases in a pod: a service-account token mounted where
/// client-go looks for it (faked in a mount namespace of the two clients'
/// own, or the real one in a pod). A kubeconfig that is missing or leads
/// nowhere gives way to the in-cluster configuration, for both.
#[test]
#[ignore = "needs kubectl"]
fn in_a_pod_infer_talks_to_the_server_kubectl_talks_to() {
    let Some(kubectl) = kubectl() else { return };
    let dir = TempDir::new();
    dir.write("sa/token", "sa-token");
    dir.write("sa/ca.crt", CA);
    dir.write("sa/namespace", "sa-ns");
    match pod_wrapper(&dir.0.join("sa")) {
        Some(wrapper) => both_choose_as_kubectl(&kubectl, Some(&wrapper), true),
        None if Path::new(SERVICE_ACCOUNT).join("token").is_file() => {
            both_choose_as_kubectl(&kubectl, None, true)
        }
        None => common::oracle::skipped(
            "kubectl",
            "no service-account token can be mounted for kubectl (unshare --mount is not allowed here) and this is no pod",
        ),
    }
}
