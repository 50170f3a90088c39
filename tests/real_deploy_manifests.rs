//! The manifests of `docs/deploy/` (the library program's) and
//! `docs/deploy/lease-elect/` (`lease-elect`'s) on kube-apiserver, the
//! reference: it accepts every object as written (a server-side dry run
//! with strict field validation, in a namespace whose Pod Security is
//! `restricted`: no warning either), and `lease-elect`, run with its
//! Deployment's arguments as the ServiceAccount those files create, leads,
//! renews, records its Events and releases, asking nothing the Role does
//! not grant and using every verb it grants (the server's own audit log
//! says which).
//!
//! Only against the real control plane (`.ci/control-plane test` sets
//! `LEASE_ELECTOR_CONTROL_PLANE=DIR`): the embedded test server serves no
//! Deployments, ServiceAccounts or RBAC. Under plain `cargo test` they are
//! listed as ignored, with what they need; `tests/deploy_manifests.rs` and
//! `tests/deploy_lease_elect.rs` check the same files against the embedded
//! server there.

#![cfg(feature = "cli")]

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use common::api::{control_plane, Api};
use common::manifests::{
    grant, lease_elect_lease, manifest, role_grants, str_of, Deployed, Grant, LEASE_ELECT, PROGRAM,
};

const BIN: &str = env!("CARGO_BIN_EXE_lease-elect");

/// A fresh namespace on the real control plane; a test asked to run
/// without one fails, saying so, rather than pass having checked nothing.
fn real_api() -> Api {
    assert!(
        control_plane().is_some(),
        "{} is not set: this test runs against the real control plane (.ci/control-plane test)",
        common::api::CONTROL_PLANE
    );
    Api::new()
}

fn folder(folder: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(folder)
}

/// The YAML files of `folder`, as `kubectl apply -f` reads them (not its
/// subfolders).
fn yaml_files(folder_name: &str) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(folder(folder_name))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{folder_name}: no manifests");
    files
}

/// kubectl as the cluster's admin: its status, stdout and stderr.
fn kubectl(api: &Api, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(api.admin_kubeconfig())
        .args(args)
        .output()
        .expect("kubectl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
#[ignore = "needs the real control plane (.ci/control-plane test)"]
fn kube_apiserver_accepts_every_manifest_as_written_under_restricted_pod_security() {
    let api = real_api();
    let ns = api.ns().to_string();
    // In warn mode Pod Security judges a Deployment's pod template (a
    // workload is never refused, its pods would be) and says so in a
    // warning.
    api.kubectl(&[
        "label",
        "namespace",
        &ns,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/warn=restricted",
    ]);
    for name in [PROGRAM, LEASE_ELECT] {
        let dir = folder(name);
        let (ok, out, err) = kubectl(
            &api,
            &[
                "apply",
                "--dry-run=server",
                "--validate=strict",
                "-n",
                &ns,
                "-f",
                dir.to_str().unwrap(),
            ],
        );
        assert!(ok, "{name}: {err}");
        assert!(!err.contains("Warning"), "{name}: {err}");
        // One line per file, each object as the server would create it.
        let files = yaml_files(name);
        let created: Vec<&str> = out
            .lines()
            .filter(|l| l.ends_with(" created (server dry run)"))
            .collect();
        assert_eq!(created.len(), files.len(), "{name}: {out}");
        for file in files {
            let object = manifest(name, &file);
            let kind = str_of(&object["kind"], "kind").to_lowercase();
            let object_name = str_of(&object["metadata"]["name"], "name");
            assert!(
                created.iter().any(|l| l.starts_with(&kind)
                    && l.contains(&format!("/{object_name} created"))),
                "{name}/{file}: {kind} {object_name} in {out}"
            );
        }
    }
    // A dry run stores nothing.
    let (_, left, _) = kubectl(
        &api,
        &[
            "get",
            "serviceaccounts,roles,rolebindings,deployments",
            "-n",
            &ns,
            "-o",
            "name",
        ],
    );
    assert!(left.trim().is_empty(), "{left}");
}

/// What the service account `user` asked of the server, from its audit
/// log, as RBAC verbs, and the status of each request.
fn audited(cp: &Path, ns: &str, user: &str) -> (BTreeSet<Grant>, Vec<u64>) {
    let log = std::fs::read_to_string(cp.join("audit.log")).unwrap_or_default();
    let mut grants = BTreeSet::new();
    let mut codes = Vec::new();
    for line in log.lines() {
        let Ok(e) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if e["user"]["username"] != user || e["stage"] != "ResponseComplete" {
            continue;
        }
        let o = &e["objectRef"];
        assert_eq!(o["namespace"], ns, "{line}");
        let verb = e["verb"].as_str().unwrap_or_default();
        // A create names no object; a watch of one Lease names it in its
        // field selector.
        let uri = e["requestURI"].as_str().unwrap_or_default();
        let name = match (verb, o["name"].as_str()) {
            ("create", _) => String::new(),
            (_, Some(name)) => name.to_string(),
            (_, None) => uri
                .split_once("fieldSelector=metadata.name%3D")
                .map(|(_, rest)| rest.split('&').next().unwrap_or_default().to_string())
                .unwrap_or_default(),
        };
        grants.insert(grant(
            o["apiGroup"].as_str().unwrap_or_default(),
            o["resource"].as_str().unwrap_or_default(),
            verb,
            &name,
        ));
        codes.push(e["responseStatus"]["code"].as_u64().unwrap_or_default());
    }
    (grants, codes)
}

#[test]
#[ignore = "needs the real control plane (.ci/control-plane test)"]
fn lease_elect_as_its_service_account_uses_exactly_what_the_role_grants_on_kube_apiserver() {
    let api = real_api();
    let ns = api.ns().to_string();
    let cp = control_plane().unwrap();
    let dir = folder(LEASE_ELECT);
    api.kubectl(&["apply", "-n", &ns, "-f", dir.to_str().unwrap()]);

    // What the kubelet mounts in the pod: a token for the ServiceAccount
    // (TokenRequest), the cluster's CA, the namespace.
    let account = manifest(LEASE_ELECT, "serviceaccount.yaml");
    let account = str_of(&account["metadata"]["name"], "the account's name");
    let token = api.kubectl(&["create", "token", account, "-n", &ns, "--duration", "10m"]);
    let url = std::fs::read_to_string(cp.join("url")).unwrap();
    let kubeconfig = api.dir().join("service-account.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: {}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u, namespace: {ns}}}\ncurrent-context: c\n",
            url.trim(),
            cp.join("pki/ca.crt").display(),
            token.trim()
        ),
    )
    .unwrap();

    let mut run = Deployed::start(BIN, &kubeconfig, &[]);
    run.lead_renew_and_stop();
    let lease = lease_elect_lease();
    assert_eq!(api.holder(&lease), None, "released: {}", run.process.log());
    assert!(!api.events().is_empty(), "Events: {}", run.process.log());

    // The audit log has a request once it has completed: the watch's when
    // its stream ended, a moment after lease-elect exited.
    let role = role_grants(LEASE_ELECT);
    let user = format!("system:serviceaccount:{ns}:{account}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let (used, codes) = loop {
        let (used, codes) = audited(&cp, &ns, &user);
        if used == role || Instant::now() > deadline {
            break (used, codes);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        used,
        role,
        "lease-elect used {used:?}; the Role grants {role:?}\n{}",
        run.process.log()
    );
    // The first read finds no Lease (404) and the create follows; no
    // request was refused, none failed.
    assert!(
        codes.iter().all(|c| (200..300).contains(c) || *c == 404),
        "refused or failed: {codes:?}\n{}",
        run.process.log()
    );
}
