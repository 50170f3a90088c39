//! Out-of-cluster config from a kubeconfig (YAML as kubectl writes it, or
//! JSON), used for real against the embedded API server over TLS.

use std::path::PathBuf;
use std::time::Duration;

use lease_elector::testing::{self, TestApiServer};
use lease_elector::{Client, ClientConfig, Deadline, Error};
use serde_json::json;

mod common;

use common::logs::logs;
use common::tempdir::TempDir;
use common::RawLeases;

fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(A[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn kubeconfig(
    server: &str,
    cluster: serde_json::Value,
    user: serde_json::Value,
) -> serde_json::Value {
    let mut cluster = cluster;
    cluster["server"] = json!(server);
    json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "test", "cluster": cluster},
                     {"name": "other", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "me", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "test", "user": "me", "namespace": "from-context"}}],
        "current-context": "ctx"
    })
}

/// A kubeconfig laid out as `kubectl config view --raw` writes it, with
/// the cluster's and user's fields given as indented YAML lines.
fn yaml_kubeconfig(server: &str, cluster: &str, user: &str) -> String {
    format!(
        "apiVersion: v1
clusters:
- cluster:
    server: {server}
{cluster}
  name: test
- cluster:
    server: https://127.0.0.1:1
  name: other
contexts:
- context:
    cluster: test
    namespace: from-context
    user: me
  name: ctx
current-context: ctx
kind: Config
preferences: {{}}
users:
- name: me
  user:
{user}
"
    )
}

/// A TLS server that accepts `token`, and a folder for the kubeconfig.
fn token_server(token: &str) -> (TestApiServer, TempDir) {
    let server = TestApiServer::builder()
        .tls(true)
        .tokens(&[token])
        .build()
        .unwrap();
    server.add_namespace("ns");
    (server, TempDir::new())
}

/// A server that wants client certificates, and a folder holding its CA
/// (`ca.pem`) and a client certificate and key (`client.pem`,
/// `client-key.pem`).
fn mtls_server_and_files() -> (TestApiServer, TempDir) {
    let server = TestApiServer::builder()
        .tls(true)
        .client_ca(true)
        .build()
        .unwrap();
    server.add_namespace("ns");
    let dir = TempDir::new();
    dir.write("ca.pem", server.ca_pem());
    dir.write("client.pem", testing::client_cert_pem());
    dir.write("client-key.pem", testing::client_key_pem());
    (server, dir)
}

fn reaches(cfg: ClientConfig, server: &TestApiServer) {
    server.put_value(
        "ns",
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "probe"}}),
    );
    let lease = Client::new(cfg)
        .unwrap()
        .get_lease("ns", "probe", &Deadline::from_now(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(lease.metadata.name, "probe");
}

#[test]
fn inline_ca_and_token() {
    let (server, dir) = token_server("kc-token");
    let path = dir.write(
        "config.json",
        kubeconfig(
            &server.url(),
            json!({"certificate-authority-data": base64(server.ca_pem())}),
            json!({"token": "kc-token"}),
        )
        .to_string(),
    );
    let cfg = ClientConfig::from_kubeconfig(&path, None).unwrap();
    assert_eq!(cfg.namespace(), Some("from-context"));
    assert!(!format!("{cfg:?}").contains("kc-token"));
    reaches(cfg, &server);
}

#[test]
fn yaml_as_kubectl_writes_it() {
    let (server, dir) = token_server("kc-token");
    let path = dir.write(
        "config",
        yaml_kubeconfig(
            &server.url(),
            &format!(
                "    certificate-authority-data: {}\n    insecure-skip-tls-verify: false",
                base64(server.ca_pem())
            ),
            "    token: \"kc-token\"  # quoted, with a comment",
        ),
    );
    let cfg = ClientConfig::from_kubeconfig(&path, None).unwrap();
    assert_eq!(cfg.namespace(), Some("from-context"));
    reaches(cfg, &server);
}

#[test]
fn yaml_with_files_client_certificates_and_another_context() {
    let (server, dir) = mtls_server_and_files();
    // Hand-written style: indented lists, a second context that is not
    // the current one, and null where kubectl leaves fields empty.
    let text = format!(
        "# written by hand
apiVersion: v1
kind: Config
current-context: elsewhere
clusters:
  - name: local
    cluster:
      server: '{}'
      certificate-authority: ca.pem
      extensions: null
contexts:
  - name: elsewhere
    context: {{cluster: local, user: nobody}}
  - name: mine
    context:
      cluster: local
      user: cert-user
users:
  - name: cert-user
    user:
      client-certificate: client.pem
      client-key: >-
        client-key.pem
  - name: nobody
    user: {{}}
",
        server.url()
    );
    let path = dir.write("kubeconfig.yaml", text);
    let cfg = ClientConfig::from_kubeconfig(&path, Some("mine")).unwrap();
    // The context names no namespace: `default`, as kubectl uses.
    assert_eq!(cfg.namespace(), Some("default"));
    reaches(cfg, &server);
}

#[test]
fn files_relative_to_the_kubeconfig_and_client_certificates() {
    let (server, dir) = mtls_server_and_files();
    let path = dir.write(
        "config.json",
        kubeconfig(
            &server.url(),
            json!({"certificate-authority": "ca.pem"}),
            json!({"client-certificate": "client.pem", "client-key": "client-key.pem"}),
        )
        .to_string(),
    );
    reaches(
        ClientConfig::from_kubeconfig(&path, Some("ctx")).unwrap(),
        &server,
    );
}

#[test]
fn token_file_from_kubeconfig() {
    let (server, dir) = token_server("from-file");
    dir.write("token", "from-file\n");
    let path = dir.write(
        "config.json",
        kubeconfig(
            &server.url(),
            json!({"certificate-authority-data": base64(server.ca_pem())}),
            json!({"tokenFile": "token"}),
        )
        .to_string(),
    );
    reaches(ClientConfig::from_kubeconfig(&path, None).unwrap(), &server);
}

#[test]
fn unsupported_and_broken_kubeconfigs_are_clear_errors() {
    let dir = TempDir::new();
    let check = |name: &str, content: String, context: Option<&str>, expect: &str| {
        let path = dir.write(name, content);
        let err = ClientConfig::from_kubeconfig(&path, context).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(expect), "{name}: {msg}");
        assert!(msg.contains(name), "{name}: error names the file: {msg}");
    };
    check(
        "yaml-anchor",
        yaml_kubeconfig(
            "https://h:1",
            "    certificate-authority: *ca",
            "    token: t",
        ),
        None,
        "line 5: the alias *ca has no anchor &ca before it",
    );
    check(
        "yaml-password",
        yaml_kubeconfig(
            "https://h:1",
            "    certificate-authority-data: eA==",
            "    password: p",
        ),
        None,
        "basic auth",
    );
    check(
        "yaml-groups-without-as",
        yaml_kubeconfig(
            "https://h:1",
            "    certificate-authority-data: eA==",
            "    as-groups: [ops]",
        ),
        None,
        "without as",
    );
    check(
        "yaml-insecure-with-ca",
        yaml_kubeconfig(
            "https://h:1",
            "    insecure-skip-tls-verify: true\n    certificate-authority-data: eA==",
            "    token: t",
        ),
        None,
        "specifying a root certificates file with the insecure flag is not allowed",
    );
    check(
        "yaml-exec",
        yaml_kubeconfig(
            "https://h:1",
            "    certificate-authority-data: eA==",
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n      \
             command: aws\n      args:\n      - eks\n      - get-token\n      env: null\n      \
             interactiveMode: Always",
        ),
        None,
        "a terminal",
    );
    check(
        "auth-provider",
        kubeconfig(
            "https://h:1",
            json!({}),
            json!({"auth-provider": {"name": "gcp"}}),
        )
        .to_string(),
        None,
        "gcp auth-provider, which kubectl removed in 1.26: use the exec plugin gke-gcloud-auth-plugin",
    );
    check(
        "azure",
        kubeconfig(
            "https://h:1",
            json!({}),
            json!({"auth-provider": {"name": "azure", "config": {"tenant-id": "x"}}}),
        )
        .to_string(),
        None,
        "azure auth-provider, which kubectl removed in 1.26: use the exec plugin kubelogin",
    );
    check(
        "oidc-without-issuer",
        kubeconfig(
            "https://h:1",
            json!({"certificate-authority-data": base64(b"x")}),
            json!({"auth-provider": {"name": "oidc", "config": {"client-id": "c", "id-token": "t"}}}),
        )
        .to_string(),
        None,
        "the oidc auth-provider needs idp-issuer-url",
    );
    check(
        "oidc-over-http",
        kubeconfig(
            "https://h:1",
            json!({"certificate-authority-data": base64(b"x")}),
            json!({"auth-provider": {"name": "oidc", "config": {
                "client-id": "c", "idp-issuer-url": "http://idp.example.com"}}}),
        )
        .to_string(),
        None,
        "not an https URL",
    );
    check("yaml-list", "- a\n- b\n".into(), None, "not a mapping");
    // An empty kubeconfig, as clientcmd reads it: nothing is configured.
    check(
        "yaml-empty",
        "# nothing\n".into(),
        None,
        "no current-context",
    );
    check(
        "no-current",
        "apiVersion: v1\nkind: Config\n".into(),
        None,
        "no current-context",
    );
    std::fs::write(dir.0.join("latin1"), b"a: caf\xe9\n").unwrap();
    let err = ClientConfig::from_kubeconfig(dir.0.join("latin1"), None).unwrap_err();
    assert!(err.to_string().contains("not UTF-8"), "{err}");
    let ok_cluster = json!({"certificate-authority-data": base64(b"x")});
    check(
        "insecure",
        kubeconfig(
            "https://h:1",
            json!({"insecure-skip-tls-verify": true, "certificate-authority": "ca.pem"}),
            json!({}),
        )
        .to_string(),
        None,
        "with the insecure flag is not allowed",
    );
    check(
        "exec",
        kubeconfig(
            "https://h:1",
            ok_cluster.clone(),
            json!({"exec": {"command": "aws"}}),
        )
        .to_string(),
        None,
        "exec plugin apiVersion \"\" is not supported",
    );
    check(
        "nocontext",
        kubeconfig("https://h:1", ok_cluster.clone(), json!({})).to_string(),
        Some("nope"),
        "no context named \"nope\"",
    );
    check(
        "halfcert",
        kubeconfig(
            "https://h:1",
            ok_cluster.clone(),
            json!({"client-certificate-data": base64(b"x")}),
        )
        .to_string(),
        None,
        "both a client certificate and a key",
    );
    check(
        "badb64",
        kubeconfig(
            "https://h:1",
            json!({"certificate-authority-data": "!!"}),
            json!({}),
        )
        .to_string(),
        None,
        "base64",
    );
    check("truncated", "{\"clusters\": [".into(), None, "kubeconfig");
    let huge = dir.write("huge", vec![b' '; (8 << 20) + 1]);
    let err = ClientConfig::from_kubeconfig(&huge, None).unwrap_err();
    assert!(err.to_string().contains("larger than 8192 KiB"), "{err}");
    let missing = ClientConfig::from_kubeconfig(dir.0.join("absent.json"), None).unwrap_err();
    assert!(matches!(missing, Error::ReadFile { .. }), "{missing}");
}

#[test]
fn cloud_shaped_kubeconfig_reads_with_its_plugins() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/kubeconfig/cloud.yaml");
    // The plugin runs at the first request, not while reading the file.
    let gke = ClientConfig::from_kubeconfig(&path, Some("gke_project_europe-west1_prod")).unwrap();
    assert_eq!(gke.base_url(), "https://34.1.2.3");
    assert!(
        format!("{gke:?}").contains("exec plugin gke-gcloud-auth-plugin"),
        "{gke:?}"
    );
    // The current context (minikube) is read through to its CA file.
    match ClientConfig::from_kubeconfig(&path, None).unwrap_err() {
        Error::ReadFile { path, .. } => {
            assert_eq!(path, PathBuf::from("/home/u/.minikube/ca.crt"))
        }
        other => panic!("expected the CA file to be read: {other}"),
    }
}

#[test]
fn kubeconfig_lists_merge_as_kubectl_merges_them() {
    let (server, dir) = token_server("merged");
    std::fs::create_dir_all(dir.0.join("a")).unwrap();
    std::fs::create_dir_all(dir.0.join("b")).unwrap();
    std::fs::create_dir_all(dir.0.join("c")).unwrap();
    // a: the current context; its cluster and user live in b.
    let a = dir.write(
        "a/config",
        "current-context: ctx\n\
         contexts:\n\
         - name: ctx\n  context: {cluster: test, user: me, namespace: from-a}\n",
    );
    // b: relative paths resolve against b/, its own `ctx` and
    // current-context lose to a's.
    dir.write("b/ca.pem", server.ca_pem());
    dir.write("b/token", "merged\n");
    let b = dir.write(
        "b/config",
        format!(
            "current-context: other\n\
             contexts:\n\
             - name: ctx\n  context: {{cluster: nowhere, user: me}}\n\
             clusters:\n\
             - name: test\n  cluster:\n    server: {}\n    certificate-authority: ca.pem\n\
             users:\n\
             - name: me\n  user:\n    tokenFile: token\n",
            server.url()
        ),
    );
    let missing = dir.0.join("absent");
    // An empty file is an empty kubeconfig to clientcmd: merged, not refused.
    let empty = dir.write("c/empty", "");
    let cfg = ClientConfig::from_kubeconfig_files(&[&a, &missing, &empty, &b], None).unwrap();
    assert_eq!(cfg.namespace(), Some("from-a"));
    reaches(cfg, &server);

    // Entry errors name the file the entry came from.
    let c = dir.write(
        "c/config",
        "users:\n- name: me\n  user:\n    exec: {command: aws}\n",
    );
    let err = ClientConfig::from_kubeconfig_files(&[&a, &c, &b], None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("plugin") && err.contains("c/config"), "{err}");

    let none = ClientConfig::from_kubeconfig_files(&[&missing, &dir.0.join("also-absent")], None)
        .unwrap_err();
    assert!(
        matches!(&none, Error::ReadFile { path, .. } if *path == missing),
        "{none}"
    );
}

#[test]
fn insecure_skip_tls_verify_is_honoured_with_a_warning_naming_the_cluster_each_load() {
    logs();
    let (server, dir) = token_server("lab-token");
    let path = dir.write(
        "insecure-config",
        yaml_kubeconfig(
            &server.url(),
            "    insecure-skip-tls-verify: true",
            "    token: lab-token",
        ),
    );
    let warned = || {
        logs()
            .lock()
            .unwrap()
            .iter()
            .filter(|(level, m)| {
                *level == log::Level::Warn
                    && m.contains("cluster \"test\"")
                    && m.contains("insecure-skip-tls-verify")
                    && m.contains(&path.display().to_string())
            })
            .count()
    };
    for load in 1..=2 {
        let cfg = ClientConfig::from_kubeconfig(&path, None).unwrap();
        assert_eq!(warned(), load);
        // No CA given, and the server's certificate is not checked.
        reaches(cfg, &server);
    }
}
