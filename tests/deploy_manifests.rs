//! The manifests for library users (`docs/deploy/`): they parse, name one
//! another, probe the health endpoint, give the release time to finish,
//! and the Role grants exactly what the program they deploy
//! (`docs/in-cluster-health.rs`) asks of the API server.
//!
//! The program runs against the embedded API server with the verbs the
//! Role does not grant refused (403, as RBAC answers), and every request it
//! made is then mapped to the RBAC verb kube-apiserver would check: the set
//! must be the Role's, no more and no less. Then each verb is taken away in
//! turn, and the program must fail, or carry on degraded, as the Role's
//! comments say.

mod common;

use std::time::Duration;

use common::eventually;
use common::health_program::{api_server, HealthProgram, LEASE};
use common::manifests::{self, forbid_all_but_the_role, grant, str_of, used, Grant, PROGRAM};
use lease_elector::testing::{Fault, TestApiServer};

fn manifest(file: &str) -> yaml_rust2::Yaml {
    manifests::manifest(PROGRAM, file)
}

fn role_grants() -> std::collections::BTreeSet<Grant> {
    manifests::role_grants(PROGRAM)
}

/// A 403 for every request that needs `(group, resource, verb)`, as RBAC
/// answers a verb the Role lacks.
fn forbid(server: &TestApiServer, verb: &Grant) {
    let fault = match (verb.0.as_str(), verb.1.as_str(), verb.2.as_str()) {
        ("coordination.k8s.io", "leases", "get") => Fault::status(403)
            .method("GET")
            .path_contains(&format!("/leases/{LEASE}")),
        ("coordination.k8s.io", "leases", "watch") => {
            Fault::status(403).method("GET").path_contains("watch=true")
        }
        ("coordination.k8s.io", "leases", "create") => {
            Fault::status(403).method("POST").path_contains("/leases")
        }
        ("coordination.k8s.io", "leases", "update") => {
            Fault::status(403).method("PUT").path_contains("/leases/")
        }
        ("", "events", "create") => Fault::status(403).method("POST").path_contains("/events"),
        _ => panic!("no fault for {verb:?}"),
    };
    server.inject(fault.forever());
}

#[test]
fn the_manifests_parse_and_name_one_another() {
    let sa = manifest("serviceaccount.yaml");
    let role = manifest("role.yaml");
    let binding = manifest("rolebinding.yaml");
    let deployment = manifest("deployment.yaml");
    assert_eq!(str_of(&sa["kind"], "kind"), "ServiceAccount");
    assert_eq!(str_of(&binding["kind"], "kind"), "RoleBinding");
    assert_eq!(str_of(&deployment["kind"], "kind"), "Deployment");
    let account = str_of(&sa["metadata"]["name"], "the account's name");

    // The binding grants this Role to this account (in its own namespace).
    assert_eq!(str_of(&binding["roleRef"]["kind"], "roleRef.kind"), "Role");
    assert_eq!(
        binding["roleRef"]["name"], role["metadata"]["name"],
        "roleRef names the Role"
    );
    let subjects = binding["subjects"].as_vec().unwrap();
    assert_eq!(subjects.len(), 1);
    assert_eq!(
        str_of(&subjects[0]["kind"], "subject kind"),
        "ServiceAccount"
    );
    assert_eq!(str_of(&subjects[0]["name"], "subject name"), account);
    assert!(
        subjects[0]["namespace"].is_badvalue(),
        "the binding's own namespace"
    );

    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        str_of(&pod["serviceAccountName"], "serviceAccountName"),
        account
    );
    let selector = &deployment["spec"]["selector"]["matchLabels"];
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    assert_eq!(selector, labels, "the selector matches the pods");

    // The probes point at the program's endpoint: /healthz for liveness,
    // /readyz for readiness, on the port it listens on (HEALTH_ADDR, by
    // default 0.0.0.0:8080).
    let program = include_str!("../docs/in-cluster-health.rs");
    assert!(
        program.contains(r#""0.0.0.0:8080""#),
        "the program's default address"
    );
    let containers = pod["containers"].as_vec().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    let env: Vec<(&str, &str)> = c["env"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|e| {
            (
                str_of(&e["name"], "env name"),
                str_of(&e["value"], "env value"),
            )
        })
        .collect();
    assert!(env.contains(&("HEALTH_ADDR", "0.0.0.0:8080")), "{env:?}");
    let port = &c["ports"].as_vec().unwrap()[0];
    assert_eq!(port["containerPort"].as_i64(), Some(8080));
    let port_name = str_of(&port["name"], "port name");
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &c[probe]["httpGet"];
        assert_eq!(str_of(&get["path"], probe), path, "{probe}");
        assert_eq!(str_of(&get["port"], probe), port_name, "{probe}");
    }

    // The pod gets the time the release may take after SIGTERM: the work's
    // release grace, the release's own budget, the Events still queued and
    // one TCP connect (see `ElectorHandle::stop`), before SIGKILL.
    let needed = lease_elector::elector::DEFAULT_RELEASE_GRACE
        + lease_elector::elector::DEFAULT_RELEASE_TIMEOUT
        + lease_elector::events::DEFAULT_REQUEST_TIMEOUT
        + Duration::from_secs(5);
    let grace = pod["terminationGracePeriodSeconds"].as_i64().unwrap();
    assert!(
        Duration::from_secs(grace as u64) >= needed,
        "terminationGracePeriodSeconds {grace} < {needed:?}"
    );
}

#[test]
fn the_role_grants_exactly_what_the_program_uses() {
    let role = role_grants();
    let server = api_server();
    forbid_all_but_the_role(&server);
    let mut program = HealthProgram::start(&server);
    program.wait_leading();
    // Its acquire and a renew (writes of its record), and its Event.
    eventually("a renew", || renews(&program) >= 2);
    eventually("the Event", || !server.events().is_empty());
    assert_eq!(program.get("/readyz").0, 200, "{}", program.log());
    assert_eq!(program.terminate(), Some(0), "{}", program.log());
    assert_eq!(
        server.holder("default", LEASE),
        None,
        "released: {}",
        program.log()
    );

    // A watch is logged once its stream has ended: the program has exited,
    // and the server sees the connection close a moment later.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while used(&server) != role && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let used = used(&server);
    assert_eq!(
        used,
        role,
        "the program used {used:?}; the Role grants {role:?}\n{}",
        program.log()
    );
    manifests::assert_nothing_refused(&server);
}

/// Writes of its record (acquires and renews) in its /metrics.
fn renews(program: &HealthProgram) -> u64 {
    manifests::renews_total(&program.get("/metrics").1)
}

/// The program with `verb` taken away from the Role.
fn without(verb: Grant) -> (TestApiServer, HealthProgram) {
    assert!(role_grants().contains(&verb), "the Role grants {verb:?}");
    let server = api_server();
    forbid_all_but_the_role(&server);
    forbid(&server, &verb);
    let program = HealthProgram::start(&server);
    (server, program)
}

/// Never leads, and says why where a rollout looks: /readyz is 503
/// "forbidden", while /healthz stays 200 (a restart would not help).
fn never_leads_and_is_unready(server: &TestApiServer, mut program: HealthProgram) {
    eventually("/readyz to say forbidden", || {
        let (status, body) = program.get("/readyz");
        status == 503 && body.contains("forbidden")
    });
    assert_eq!(program.get("/healthz").0, 200);
    assert_eq!(server.holder("default", LEASE), None);
    assert!(
        !program.log().contains("leading with token"),
        "{}",
        program.log()
    );
    assert_eq!(program.terminate(), Some(0), "{}", program.log());
}

#[test]
fn without_get_on_leases_no_pod_leads_and_readyz_says_forbidden() {
    let (server, program) = without(grant("coordination.k8s.io", "leases", "get", LEASE));
    never_leads_and_is_unready(&server, program);
}

#[test]
fn without_create_on_leases_no_pod_leads_and_readyz_says_forbidden() {
    let (server, program) = without(grant("coordination.k8s.io", "leases", "create", ""));
    never_leads_and_is_unready(&server, program);
    assert!(server.record("default", LEASE).is_none());
}

#[test]
fn without_update_on_leases_the_term_ends_at_the_renew_deadline_and_the_program_exits_1() {
    let (server, mut program) = without(grant("coordination.k8s.io", "leases", "update", LEASE));
    // It created the Lease, and so led, until its first renew was refused.
    program.wait_leading();
    eventually("/readyz to say forbidden", || {
        let (status, body) = program.get("/readyz");
        status == 503 && body.contains("forbidden")
    });
    // The term ends at the renew deadline (10 s); the program exits 1, to
    // be restarted afresh.
    assert_eq!(program.process.exit_code(), Some(1), "{}", program.log());
    assert!(
        program.log().contains("leadership lost"),
        "{}",
        program.log()
    );
    // The release, an update too, was refused: the Lease expires instead.
    assert!(server.holder("default", LEASE).is_some());
}

#[test]
fn without_watch_on_leases_the_program_still_leads_by_polling() {
    let (server, mut program) = without(grant("coordination.k8s.io", "leases", "watch", LEASE));
    program.wait_leading();
    eventually("a refused watch", || {
        server
            .requests()
            .iter()
            .any(|r| r.status == 403 && r.path.contains("watch=true"))
    });
    assert_eq!(program.get("/readyz").0, 200, "{}", program.log());
    assert_eq!(program.get("/leader").0, 200, "{}", program.log());
    assert_eq!(program.terminate(), Some(0), "{}", program.log());
    assert_eq!(
        server.holder("default", LEASE),
        None,
        "released: {}",
        program.log()
    );
}

#[test]
fn without_create_on_events_the_program_still_leads_and_records_no_event() {
    let (server, mut program) = without(grant("", "events", "create", ""));
    program.wait_leading();
    eventually("a refused Event", || {
        server
            .requests()
            .iter()
            .any(|r| r.status == 403 && r.path.contains("/events"))
    });
    assert!(server.events().is_empty());
    assert_eq!(program.get("/readyz").0, 200, "{}", program.log());
    assert_eq!(program.terminate(), Some(0), "{}", program.log());
    assert_eq!(
        server.holder("default", LEASE),
        None,
        "released: {}",
        program.log()
    );
    assert!(
        program.log().contains("WARN"),
        "the refusal is logged: {}",
        program.log()
    );
}
