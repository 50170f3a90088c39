//! `lease-elect`'s manifests and image (`docs/deploy/lease-elect/`): they
//! name one another, the Deployment runs the image as its Containerfile
//! builds it (its entrypoint, its user), probes the port `--health-addr`
//! listens on, gives COMMAND its `--grace` and the release their time
//! before SIGKILL, and the Role grants exactly what `lease-elect` asks of
//! the API server with the Deployment's flags.
//!
//! `lease-elect` runs with the Deployment's own arguments, expanded as the
//! kubelet expands them (`$(POD_NAME)` from the downward API), against the
//! embedded API server with every verb no Role grants refused (403, as
//! RBAC answers); only what a test must change is changed: the API server
//! (a kubeconfig, where a pod has its service account), the health port (a
//! free one) and COMMAND (a sleep). Every request it made is then mapped
//! to the RBAC verb kube-apiserver would check: the set must be the
//! Role's, no more and no less; with `--no-watch` and `--no-events`, the
//! Role's less those two. `tests/real_deploy_manifests.rs` applies the
//! same files to kube-apiserver and runs `lease-elect` as their service
//! account there.

#![cfg(feature = "cli")]

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::health_program::{api_server, TOKEN};
use common::manifests::{
    assert_nothing_refused, expanded_args, flag, forbid_all_but_the_role, grant,
    lease_elect_container, lease_elect_deployment, lease_elect_lease, manifest, role_grants,
    str_of, strings, text, used, Deployed, Grant, LEASE_ELECT, POD,
};
use common::tempdir::TempDir;
use lease_elector::testing::TestApiServer;

const BIN: &str = env!("CARGO_BIN_EXE_lease-elect");

/// The image's `INSTRUCTION` line of the Containerfile.
fn containerfile(instruction: &str) -> String {
    let prefix = format!("{instruction} ");
    let lines: Vec<String> = text(LEASE_ELECT, "Containerfile")
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix).map(str::to_string))
        .collect();
    assert_eq!(lines.len(), 1, "one {instruction}: {lines:?}");
    lines[0].clone()
}

#[test]
fn the_manifests_name_one_another_and_run_the_image_as_its_containerfile_builds_it() {
    let sa = manifest(LEASE_ELECT, "serviceaccount.yaml");
    let role = manifest(LEASE_ELECT, "role.yaml");
    let binding = manifest(LEASE_ELECT, "rolebinding.yaml");
    let deployment = lease_elect_deployment();
    assert_eq!(str_of(&sa["kind"], "kind"), "ServiceAccount");
    assert_eq!(str_of(&binding["kind"], "kind"), "RoleBinding");
    assert_eq!(str_of(&deployment["kind"], "kind"), "Deployment");
    let account = str_of(&sa["metadata"]["name"], "the account's name");

    // The binding grants this Role to this account (in its own namespace).
    assert_eq!(str_of(&binding["roleRef"]["kind"], "roleRef.kind"), "Role");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    let subjects = binding["subjects"].as_vec().unwrap();
    assert_eq!(subjects.len(), 1);
    assert_eq!(str_of(&subjects[0]["kind"], "kind"), "ServiceAccount");
    assert_eq!(str_of(&subjects[0]["name"], "subject name"), account);
    assert!(subjects[0]["namespace"].is_badvalue());

    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(str_of(&pod["serviceAccountName"], "account"), account);
    assert_eq!(
        deployment["spec"]["selector"]["matchLabels"],
        deployment["spec"]["template"]["metadata"]["labels"],
        "the selector matches the pods"
    );

    // The image's entrypoint runs: no `command` to replace it, `args` are
    // lease-elect's flags, then `--` and COMMAND.
    let c = lease_elect_container();
    assert_eq!(containerfile("ENTRYPOINT"), r#"["/lease-elect"]"#);
    assert!(
        c["command"].is_badvalue(),
        "command replaces the entrypoint"
    );
    let args = expanded_args(&c);
    let command = args.iter().skip_while(|a| *a != "--").skip(1).count();
    assert!(command > 0, "COMMAND after `--`: {args:?}");

    // The Lease is the one the Role names; the identity the pod's name.
    let leases: Vec<String> = role["rules"]
        .as_vec()
        .unwrap()
        .iter()
        .filter(|r| !r["resourceNames"].is_badvalue())
        .flat_map(|r| strings(&r["resourceNames"]))
        .collect();
    assert_eq!(
        flag(&args, "--name"),
        Some(leases[0].as_str()),
        "{leases:?}"
    );
    assert_eq!(flag(&args, "--identity"), Some(POD));

    // The probes: /healthz and /readyz on the port --health-addr listens on.
    let port = &c["ports"].as_vec().unwrap()[0];
    let listens = flag(&args, "--health-addr").expect("--health-addr");
    assert_eq!(
        listens,
        format!(":{}", port["containerPort"].as_i64().unwrap()),
        "every interface, the container's port"
    );
    let port_name = str_of(&port["name"], "port name");
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &c[probe]["httpGet"];
        assert_eq!(str_of(&get["path"], probe), path, "{probe}");
        assert_eq!(str_of(&get["port"], probe), port_name, "{probe}");
    }

    // Not root, as the image's USER; nothing written, nothing gained.
    let user = containerfile("USER");
    let (uid, gid) = user.split_once(':').expect("USER uid:gid");
    let security = &pod["securityContext"];
    assert_eq!(security["runAsNonRoot"].as_bool(), Some(true));
    assert_eq!(security["runAsUser"].as_i64(), uid.parse().ok());
    assert_eq!(security["runAsGroup"].as_i64(), gid.parse().ok());
    assert_ne!(uid, "0");
    let own = &c["securityContext"];
    assert_eq!(own["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(own["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(strings(&own["capabilities"]["drop"]), ["ALL"]);
    for (kind, what) in [
        ("requests", "cpu"),
        ("requests", "memory"),
        ("limits", "memory"),
    ] {
        assert!(
            c["resources"][kind][what].as_str().is_some(),
            "resources.{kind}.{what}"
        );
    }
}

#[test]
fn the_pod_gets_commands_grace_and_the_release_before_sigkill() {
    let deployment = lease_elect_deployment();
    let args = expanded_args(&lease_elect_container());
    let grace = lease_elector::tool::duration_flag(
        "--grace",
        flag(&args, "--grace").expect("--grace, said where the grace period is"),
    )
    .unwrap();
    // After SIGTERM: COMMAND's --grace, then once it has ended the
    // release, the Events still queued and a TCP connect in progress (see
    // `ElectorHandle::stop`), half a second for the supervisor to report
    // COMMAND's end and half a second to flush lease-elect's last lines.
    let needed = grace
        + lease_elector::elector::DEFAULT_RELEASE_TIMEOUT
        + lease_elector::events::DEFAULT_REQUEST_TIMEOUT
        + Duration::from_secs(5)
        + Duration::from_secs(1);
    let period = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        .as_i64()
        .unwrap();
    assert!(
        Duration::from_secs(period as u64) >= needed,
        "terminationGracePeriodSeconds {period} < {needed:?}"
    );
}

/// `lease-elect` as deployed, against `server`: it leads under the pod's
/// name, renews, answers its probes, and on SIGTERM ends COMMAND, releases
/// and exits 0, nothing refused.
fn lead_renew_and_stop(server: &TestApiServer, extra: &[&str]) -> Deployed {
    let dir = TempDir::new();
    let kubeconfig = dir.0.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig, Some(TOKEN)).unwrap();
    let mut run = Deployed::start(BIN, &kubeconfig, extra);
    run.lead_renew_and_stop();
    assert_eq!(
        server.holder("default", &lease_elect_lease()),
        None,
        "released"
    );
    assert_nothing_refused(server);
    run
}

/// What `server` was asked once it is `expected` (a watch is logged once
/// its stream has ended: the server sees the connection close a moment
/// after lease-elect exits), or after 20 s.
fn used_settled(server: &TestApiServer, expected: &BTreeSet<Grant>) -> BTreeSet<Grant> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while used(server) != *expected && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    used(server)
}

#[test]
fn the_role_grants_exactly_what_lease_elect_asks_with_the_deployments_flags() {
    let role = role_grants(LEASE_ELECT);
    let server = api_server();
    forbid_all_but_the_role(&server);
    let run = lead_renew_and_stop(&server, &[]);
    assert!(
        !server.events().is_empty(),
        "an Event: {}",
        run.process.log()
    );
    let used = used_settled(&server, &role);
    assert_eq!(
        used,
        role,
        "lease-elect used {used:?}; the Role grants {role:?}\n{}",
        run.process.log()
    );
}

#[test]
fn with_no_watch_and_no_events_lease_elect_needs_neither_verb_the_role_names_for_them() {
    let lease = lease_elect_lease();
    let mut needed = role_grants(LEASE_ELECT);
    for dropped in [
        grant("coordination.k8s.io", "leases", "watch", &lease),
        grant("", "events", "create", ""),
    ] {
        assert!(needed.remove(&dropped), "the Role grants {dropped:?}");
    }
    let server = api_server();
    forbid_all_but_the_role(&server);
    let run = lead_renew_and_stop(&server, &["--no-watch", "--no-events"]);
    assert!(server.events().is_empty());
    let used = used_settled(&server, &needed);
    assert_eq!(used, needed, "{}", run.process.log());
}
