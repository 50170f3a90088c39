//! What kube-apiserver refuses, the embedded API server refuses too (issue
//! 38): people test their own programs on it, and a program that passes
//! here must not be one a cluster would turn down. Each test names the
//! kube-apiserver behaviour it pins, over real HTTP on loopback.

mod common;

use common::RawLeases;

use std::io::{BufRead, BufReader};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use lease_elector::testing::TestApiServer;
use serde_json::{json, Value};

const NS: &str = "ns1";
const WAIT: Duration = Duration::from_secs(10);
const APPLY: &str = "application/apply-patch+yaml";
const MERGE: &str = "application/merge-patch+json";
const JSON: &str = "application/json";

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .new_agent()
}

fn server() -> TestApiServer {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    server
}

fn leases(server: &TestApiServer) -> String {
    format!(
        "{}/apis/coordination.k8s.io/v1/namespaces/{NS}/leases",
        server.url()
    )
}

fn lease_url(server: &TestApiServer, name: &str) -> String {
    format!("{}/{name}", leases(server))
}

/// One request; its status and JSON body (`Null` when there is none).
fn send(method: &str, url: &str, content_type: &str, body: Option<&Value>) -> (u16, Value) {
    let a = agent();
    let resp = match (method, body) {
        ("GET", _) => a.get(url).call(),
        ("DELETE", None) => a.delete(url).call(),
        ("DELETE", Some(b)) => a
            .delete(url)
            .header("Content-Type", content_type)
            .force_send_body()
            .send(b.to_string()),
        ("POST", Some(b)) => a
            .post(url)
            .header("Content-Type", content_type)
            .send(b.to_string()),
        ("PUT", Some(b)) => a
            .put(url)
            .header("Content-Type", content_type)
            .send(b.to_string()),
        ("PATCH", Some(b)) => a
            .patch(url)
            .header("Content-Type", content_type)
            .send(b.to_string()),
        _ => panic!("unsupported call {method} {body:?}"),
    };
    let mut resp = resp.unwrap();
    let code = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap();
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn lease(name: &str, holder: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": { "name": name },
        "spec": { "holderIdentity": holder, "leaseDurationSeconds": 15 },
    })
}

fn create(server: &TestApiServer, body: &Value) -> Value {
    let (code, created) = send("POST", &leases(server), JSON, Some(body));
    assert_eq!(code, 201, "{created}");
    created
}

fn rv_of(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_else(|| panic!("no resourceVersion in {obj}"))
        .parse()
        .unwrap()
}

fn holder(server: &TestApiServer, name: &str) -> Option<String> {
    server
        .lease_value(NS, name)
        .map(|l| l["spec"]["holderIdentity"].as_str().unwrap_or("").into())
}

/// A watch from `url`: each event as it arrives.
fn watch(url: &str) -> mpsc::Receiver<Value> {
    let resp = agent().get(url).call().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let r = BufReader::new(resp.into_body().into_reader());
        for line in r.lines().map_while(Result::ok) {
            if tx.send(serde_json::from_str(&line).unwrap()).is_err() {
                return;
            }
        }
    });
    rx
}

/// The one cause of a 422 `Invalid` Status, after checking its shape.
fn only_cause(code: u16, status: &Value) -> &Value {
    assert_eq!(
        (code, status["reason"].as_str()),
        (422, Some("Invalid")),
        "{status}"
    );
    let causes = status["details"]["causes"].as_array().expect("causes");
    assert_eq!(causes.len(), 1, "{status}");
    &causes[0]
}

const SUBDOMAIN_RULE: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
     alphanumeric characters, '-' or '.', and must start and end with an alphanumeric \
     character (e.g. 'example.com', regex used for validation is \
     '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

const LABEL_KEY_RULE: &str = "name part must consist of alphanumeric characters, '-', '_' or \
     '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or \
     'my.name',  or '123-abc', regex used for validation is \
     '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// A lock that uses server-side apply as its compare-and-swap sends the
/// `resourceVersion` it read: kube-apiserver's update path compares it with
/// the stored one (409 Conflict when stale), so of two appliers that read
/// the same version only the first wins. Without one, an apply is
/// unconditional.
#[test]
fn an_apply_with_a_stale_resource_version_is_a_conflict() {
    let server = server();
    let read = rv_of(&create(&server, &lease("l", "pod-a")));
    let url = format!("{}?fieldManager=locker&force=true", lease_url(&server, "l"));
    let mut mine = lease("l", "pod-b");
    mine["metadata"]["resourceVersion"] = read.to_string().into();
    let (code, won) = send("PATCH", &url, APPLY, Some(&mine));
    assert_eq!(code, 200, "{won}");
    assert!(rv_of(&won) > read);
    assert_eq!(holder(&server, "l").as_deref(), Some("pod-b"));

    // The second applier read the same version: its swap must fail.
    let mut theirs = lease("l", "pod-c");
    theirs["metadata"]["resourceVersion"] = read.to_string().into();
    let (code, lost) = send("PATCH", &url, APPLY, Some(&theirs));
    assert_eq!(
        (code, lost["reason"].as_str()),
        (409, Some("Conflict")),
        "{lost}"
    );
    assert_eq!(
        lost["message"],
        "Operation cannot be fulfilled on leases.coordination.k8s.io \"l\": the object has been \
         modified; please apply your changes to the latest version and try again"
    );
    assert_eq!(holder(&server, "l").as_deref(), Some("pod-b"));

    // Without a resourceVersion an apply is unconditional.
    let (code, applied) = send("PATCH", &url, APPLY, Some(&lease("l", "pod-c")));
    assert_eq!(code, 200, "{applied}");
    assert_eq!(holder(&server, "l").as_deref(), Some("pod-c"));
}

/// The `uid` of an applied object must be the stored object's: on an
/// existing object the merged uid fails kube-apiserver's `metadata.uid`
/// immutability check (422), and naming a uid where there is no object
/// is a 409 (`uid mismatch`), not a creation. A merge patch that changes
/// the uid is refused as immutable too; a `PUT` keeps it as a
/// precondition (409).
#[test]
fn an_apply_naming_another_uid_is_refused() {
    let server = server();
    let created = create(&server, &lease("l", "pod-a"));
    let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    let url = format!("{}?fieldManager=locker&force=true", lease_url(&server, "l"));

    let mut other = lease("l", "pod-b");
    other["metadata"]["uid"] = "0b0e6d9e-0000-4000-8000-000000000000".into();
    let (code, status) = send("PATCH", &url, APPLY, Some(&other));
    let cause = only_cause(code, &status);
    assert_eq!(
        *cause,
        json!({
            "reason": "FieldValueInvalid",
            "field": "metadata.uid",
            "message": "Invalid value: \"0b0e6d9e-0000-4000-8000-000000000000\": field is immutable",
        })
    );
    assert_eq!(holder(&server, "l").as_deref(), Some("pod-a"));

    // Its own uid applies.
    let mut same = lease("l", "pod-b");
    same["metadata"]["uid"] = uid.clone().into();
    let (code, applied) = send("PATCH", &url, APPLY, Some(&same));
    assert_eq!(code, 200, "{applied}");
    assert_eq!(applied["metadata"]["uid"], uid.as_str());

    // A merge patch that changes it.
    let (code, status) = send(
        "PATCH",
        &lease_url(&server, "l"),
        MERGE,
        Some(&json!({"metadata": {"uid": "another"}})),
    );
    assert_eq!(only_cause(code, &status)["field"], "metadata.uid");

    // No object: the uid names one that is gone, and nothing is created.
    let url = format!(
        "{}?fieldManager=locker&force=true",
        lease_url(&server, "gone")
    );
    let mut gone = lease("gone", "pod-b");
    gone["metadata"]["uid"] = uid.clone().into();
    let (code, status) = send("PATCH", &url, APPLY, Some(&gone));
    assert_eq!(
        (code, status["reason"].as_str()),
        (409, Some("Conflict")),
        "{status}"
    );
    assert_eq!(
        status["message"],
        format!(
            "Operation cannot be fulfilled on leases.coordination.k8s.io \"gone\": uid mismatch: \
             the provided object specified uid {uid}, and no existing object was found"
        )
    );
    assert!(server.lease_value(NS, "gone").is_none());
}

/// kube-apiserver routes `deletecollection` only on namespaced paths of a
/// namespaced resource: `DELETE` on the every-namespace path is a 405 and
/// deletes nothing, in `kube-system` or anywhere else.
#[test]
fn deleting_an_every_namespace_collection_is_not_allowed() {
    let server = server();
    create(&server, &lease("mine", "pod-a"));
    server.put_value("kube-system", lease("kube-controller-manager", "cp-0"));
    let event = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": { "name": "e1" },
        "involvedObject": { "kind": "Lease", "name": "mine", "namespace": NS },
        "reason": "R", "message": "m", "type": "Normal",
    });
    let (code, body) = send(
        "POST",
        &format!("{}/api/v1/namespaces/{NS}/events", server.url()),
        JSON,
        Some(&event),
    );
    assert_eq!(code, 201, "{body}");

    for path in [
        "/apis/coordination.k8s.io/v1/leases",
        "/api/v1/events",
        "/apis/events.k8s.io/v1/events",
    ] {
        let (code, status) = send("DELETE", &format!("{}{path}", server.url()), JSON, None);
        assert_eq!(
            (code, status["reason"].as_str()),
            (405, Some("MethodNotAllowed")),
            "{path}: {status}"
        );
    }
    assert!(server
        .lease_value("kube-system", "kube-controller-manager")
        .is_some());
    assert!(server.lease_value(NS, "mine").is_some());
    assert_eq!(server.event_values().len(), 1);

    // A namespace's collection is still deleted.
    let (code, list) = send("DELETE", &leases(&server), JSON, None);
    assert_eq!(code, 200, "{list}");
    assert!(server.lease_value(NS, "mine").is_none());
    assert!(server
        .lease_value("kube-system", "kube-controller-manager")
        .is_some());
}

/// Lease names are DNS-1123 subdomains (`ValidateLease`), label keys
/// qualified names and label values at most 63 characters of the same
/// alphabet (`ValidateLabels`, for every type): kube-apiserver answers
/// 422 `Invalid` with one cause per failed rule, and stores nothing.
#[test]
fn names_and_labels_kube_apiserver_refuses_are_refused() {
    let server = server();

    let (code, status) = send(
        "POST",
        &leases(&server),
        JSON,
        Some(&lease("Bad_Name", "a")),
    );
    assert_eq!(
        *only_cause(code, &status),
        json!({
            "reason": "FieldValueInvalid",
            "field": "metadata.name",
            "message": format!("Invalid value: \"Bad_Name\": {SUBDOMAIN_RULE}"),
        })
    );
    assert_eq!(
        status["message"],
        format!(
            "Lease.coordination.k8s.io \"Bad_Name\" is invalid: metadata.name: Invalid value: \
             \"Bad_Name\": {SUBDOMAIN_RULE}"
        )
    );

    // A PUT that would create.
    let (code, status) = send(
        "PUT",
        &lease_url(&server, "UPPER"),
        JSON,
        Some(&lease("UPPER", "a")),
    );
    assert_eq!(only_cause(code, &status)["field"], "metadata.name");

    let long = "a".repeat(300);
    let (code, status) = send("POST", &leases(&server), JSON, Some(&lease(&long, "a")));
    assert_eq!(
        only_cause(code, &status)["message"],
        format!("Invalid value: \"{long}\": must be no more than 253 characters")
    );

    let mut labelled = lease("labelled", "a");
    labelled["metadata"]["labels"] = json!({"bad key!": "x"});
    let (code, status) = send("POST", &leases(&server), JSON, Some(&labelled));
    assert_eq!(
        *only_cause(code, &status),
        json!({
            "reason": "FieldValueInvalid",
            "field": "metadata.labels",
            "message": format!("Invalid value: \"bad key!\": {LABEL_KEY_RULE}"),
        })
    );
    labelled["metadata"]["labels"] = json!({"app": "v".repeat(64)});
    let (code, status) = send("POST", &leases(&server), JSON, Some(&labelled));
    assert!(
        only_cause(code, &status)["message"]
            .as_str()
            .unwrap()
            .ends_with(": must be no more than 63 bytes"),
        "{status}"
    );
    labelled["metadata"]["labels"] = json!({"example.com/app": "", "a.b_c-d": "X.y_z-0"});
    create(&server, &labelled);

    // An update that adds a bad label.
    let mut update = server.lease_value(NS, "labelled").unwrap();
    update["metadata"]["labels"]["-bad"] = "x".into();
    let (code, status) = send("PUT", &lease_url(&server, "labelled"), JSON, Some(&update));
    assert_eq!(only_cause(code, &status)["field"], "metadata.labels");

    for name in ["Bad_Name", "UPPER", long.as_str()] {
        assert!(server.lease_value(NS, name).is_none(), "{name} stored");
    }
}

/// Event names: through `events.k8s.io/v1` a DNS-1123 subdomain
/// (`ValidateEventCreate`'s strict validation); through core/v1 only what
/// every object's name must be (no `/` or `%`, not `.` or `..`), so
/// `Bad_Ev` is taken there, as kube-apiserver takes it. Labels are checked
/// on both.
#[test]
fn event_names_are_checked_as_each_api_group_checks_them() {
    let server = server();
    let v1 = format!(
        "{}/apis/events.k8s.io/v1/namespaces/{NS}/events",
        server.url()
    );
    let core = format!("{}/api/v1/namespaces/{NS}/events", server.url());
    let v1_event = |name: &str| {
        json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": { "name": name },
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "example.com/ctl", "reportingInstance": "ctl-1",
            "action": "Elect", "reason": "LeaderElection", "type": "Normal",
            "regarding": { "kind": "Lease", "name": "l", "namespace": NS },
        })
    };
    let (code, status) = send("POST", &v1, JSON, Some(&v1_event("Bad_Ev")));
    assert_eq!(
        *only_cause(code, &status),
        json!({
            "reason": "FieldValueInvalid",
            "field": "metadata.name",
            "message": format!("Invalid value: \"Bad_Ev\": {SUBDOMAIN_RULE}"),
        })
    );
    let (code, body) = send("POST", &v1, JSON, Some(&v1_event("good.ev")));
    assert_eq!(code, 201, "{body}");

    let core_event = |name: &str| {
        json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": { "name": name },
            "involvedObject": { "kind": "Lease", "name": "l", "namespace": NS },
            "reason": "R", "message": "m", "type": "Normal",
        })
    };
    let (code, body) = send("POST", &core, JSON, Some(&core_event("Bad_Ev")));
    assert_eq!(code, 201, "{body}");
    let (code, status) = send("POST", &core, JSON, Some(&core_event("a%b")));
    assert_eq!(
        only_cause(code, &status)["message"],
        "Invalid value: \"a%b\": may not contain '%'"
    );
    let mut labelled = core_event("labelled");
    labelled["metadata"]["labels"] = json!({"bad key!": "x"});
    let (code, status) = send("POST", &core, JSON, Some(&labelled));
    assert_eq!(only_cause(code, &status)["field"], "metadata.labels");
    let names: Vec<String> = server
        .event_values()
        .iter()
        .map(|e| e["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["good.ev", "Bad_Ev"]);
}

/// A Lease with a finalizer is not removed by `DELETE`: kube-apiserver
/// sets `deletionTimestamp` (and `deletionGracePeriodSeconds: 0`), answers
/// with the object, and removes it when an update empties its finalizers;
/// a watch sees MODIFIED, then DELETED. No finalizer may be added
/// meanwhile (422).
#[test]
fn a_lease_with_a_finalizer_is_kept_until_its_finalizers_are_removed() {
    let server = server();
    let mut held = lease("held", "pod-a");
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    let created = rv_of(&create(&server, &held));
    let events = watch(&format!(
        "{}?watch=true&resourceVersion={created}&fieldSelector=metadata.name%3Dheld",
        leases(&server)
    ));

    let (code, marked) = send("DELETE", &lease_url(&server, "held"), JSON, None);
    assert_eq!(code, 200, "{marked}");
    assert_eq!(
        marked["kind"], "Lease",
        "answered with the object: {marked}"
    );
    assert!(
        marked["metadata"]["deletionTimestamp"].is_string(),
        "{marked}"
    );
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 0);
    let stored = server
        .lease_value(NS, "held")
        .expect("kept while finalized");
    assert_eq!(stored, marked);
    let modified = events.recv_timeout(WAIT).unwrap();
    assert_eq!(modified["type"], "MODIFIED");
    assert_eq!(modified["object"], marked);

    // A second DELETE changes nothing.
    let (code, again) = send("DELETE", &lease_url(&server, "held"), JSON, None);
    assert_eq!((code, &again), (200, &marked));

    // No new finalizer while it is being deleted.
    let mut more = marked.clone();
    more["metadata"]["finalizers"] = json!(["example.com/hold", "example.com/more"]);
    let (code, status) = send("PUT", &lease_url(&server, "held"), JSON, Some(&more));
    assert_eq!(
        *only_cause(code, &status),
        json!({
            "reason": "FieldValueForbidden",
            "field": "metadata.finalizers",
            "message": "Forbidden: no new finalizers can be added if the object is being \
                        deleted, found new finalizers []string{\"example.com/more\"}",
        })
    );

    // Other updates go on, and the deletion mark stays.
    let mut renew = marked.clone();
    renew["spec"]["holderIdentity"] = "pod-b".into();
    renew["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("deletionTimestamp");
    let (code, renewed) = send("PUT", &lease_url(&server, "held"), JSON, Some(&renew));
    assert_eq!(code, 200, "{renewed}");
    assert_eq!(
        renewed["metadata"]["deletionTimestamp"],
        marked["metadata"]["deletionTimestamp"]
    );
    assert_eq!(events.recv_timeout(WAIT).unwrap()["type"], "MODIFIED");

    // Emptying the finalizers removes it.
    let (code, last) = send(
        "PATCH",
        &lease_url(&server, "held"),
        MERGE,
        Some(&json!({"metadata": {"finalizers": null}})),
    );
    assert_eq!(code, 200, "{last}");
    assert!(server.lease_value(NS, "held").is_none());
    let deleted = events.recv_timeout(WAIT).unwrap();
    assert_eq!(deleted["type"], "DELETED", "{deleted}");
    assert!(rv_of(&deleted["object"]) > rv_of(&renewed));
    let (code, _) = send("GET", &lease_url(&server, "held"), JSON, None);
    assert_eq!(code, 404);

    // Without finalizers a DELETE removes at once, as before.
    create(&server, &lease("plain", "pod-a"));
    let (code, status) = send("DELETE", &lease_url(&server, "plain"), JSON, None);
    assert_eq!((code, status["status"].as_str()), (200, Some("Success")));
    assert!(server.lease_value(NS, "plain").is_none());
}

/// A deletion mark is the server's: a created object never carries one,
/// a `DELETE` of the collection marks a finalized object instead of
/// removing it, and finalizer names are qualified names.
#[test]
fn deletion_marks_are_the_servers_and_finalizer_names_are_checked() {
    let server = server();
    let mut sneaky = lease("sneaky", "pod-a");
    sneaky["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
    sneaky["metadata"]["deletionGracePeriodSeconds"] = 0.into();
    let created = create(&server, &sneaky);
    assert!(
        created["metadata"].get("deletionTimestamp").is_none(),
        "{created}"
    );
    assert!(created["metadata"]
        .get("deletionGracePeriodSeconds")
        .is_none());

    let mut bad = lease("bad", "pod-a");
    bad["metadata"]["finalizers"] = json!(["no spaces allowed"]);
    let (code, status) = send("POST", &leases(&server), JSON, Some(&bad));
    assert_eq!(only_cause(code, &status)["field"], "metadata.finalizers");

    let mut held = lease("held", "pod-a");
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    create(&server, &held);
    let (code, list) = send("DELETE", &leases(&server), JSON, None);
    assert_eq!(code, 200, "{list}");
    assert!(server.lease_value(NS, "sneaky").is_none());
    let kept = server.lease_value(NS, "held").expect("finalized: kept");
    assert!(kept["metadata"]["deletionTimestamp"].is_string(), "{kept}");
}

/// resourceVersions are integers that only grow (KEP-5504 lets clients
/// compare them): one counter for every write, deletions included, so an
/// object deleted and created again has a greater version than every one
/// before, and the DELETED event's version lies between.
#[test]
fn resource_versions_grow_across_delete_and_recreate() {
    let server = server();
    let first = create(&server, &lease("l", "pod-a"));
    let before = rv_of(&first);
    let events = watch(&format!(
        "{}?watch=true&resourceVersion={before}&fieldSelector=metadata.name%3Dl",
        leases(&server)
    ));
    let (code, _) = send("DELETE", &lease_url(&server, "l"), JSON, None);
    assert_eq!(code, 200);
    let again = rv_of(&create(&server, &lease("l", "pod-b")));
    let deleted = events.recv_timeout(WAIT).unwrap();
    assert_eq!(deleted["type"], "DELETED");
    let deleted_at = rv_of(&deleted["object"]);
    let added = events.recv_timeout(WAIT).unwrap();
    assert_eq!(added["type"], "ADDED");
    assert_eq!(rv_of(&added["object"]), again);
    assert!(
        before < deleted_at && deleted_at < again,
        "{before} {deleted_at} {again}"
    );
    assert_ne!(first["metadata"]["uid"], added["object"]["metadata"]["uid"]);
}
