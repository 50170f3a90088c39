//! The embedded API server over real HTTP and TLS on loopback, driven with
//! a plain ureq client.

mod common;

use common::RawLeases;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use lease_elector::testing::{client_cert_pem, client_key_pem, Fault, TestApiServer};
use lease_elector::Status;
use serde_json::{json, Value};
use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig, TlsProvider};

const NS: &str = "ns1";

fn leases(server: &TestApiServer) -> String {
    format!(
        "{}/apis/coordination.k8s.io/v1/namespaces/{NS}/leases",
        server.url()
    )
}

fn lease_url(server: &TestApiServer, name: &str) -> String {
    format!("{}/{name}", leases(server))
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .new_agent()
}

fn tls_agent(server: &TestApiServer, client_cert: bool) -> ureq::Agent {
    let ca = Certificate::from_pem(server.ca_pem()).unwrap();
    let mut tls = TlsConfig::builder()
        .provider(TlsProvider::Rustls)
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .root_certs(RootCerts::new_with_certs(&[ca]));
    if client_cert {
        let cert = Certificate::from_pem(client_cert_pem()).unwrap();
        let key = PrivateKey::from_pem(client_key_pem()).unwrap();
        tls = tls.client_cert(Some(ClientCert::new_with_certs(&[cert], key)));
    }
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .tls_config(tls.build())
        .build()
        .new_agent()
}

#[derive(Debug)]
struct Answer {
    code: u16,
    retry_after: Option<String>,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
    fn status(&self) -> Status {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
    fn rv(&self) -> u64 {
        self.json()["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    }
}

fn call(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Result<Answer, ureq::Error> {
    let auth = token.map(|t| format!("Bearer {t}"));
    let resp = match (method, body) {
        ("GET" | "DELETE", None) => {
            let mut req = if method == "GET" {
                agent.get(url)
            } else {
                agent.delete(url)
            };
            if let Some(a) = &auth {
                req = req.header("Authorization", a);
            }
            req.call()?
        }
        ("POST" | "PUT", Some(b)) => {
            let mut req = if method == "POST" {
                agent.post(url)
            } else {
                agent.put(url)
            };
            if let Some(a) = &auth {
                req = req.header("Authorization", a);
            }
            req.header("Content-Type", "application/json")
                .send(b.to_string())?
        }
        _ => panic!("unsupported call {method} with body {body:?}"),
    };
    let code = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let body = resp.into_body().read_to_string()?;
    Ok(Answer {
        code,
        retry_after,
        body,
    })
}

fn lease(name: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": { "name": name, "namespace": NS },
        "spec": {
            "holderIdentity": "pod-a",
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-01-01T00:00:00.000000Z",
            "renewTime": "2026-01-01T00:00:01.000000Z",
            "leaseTransitions": 0
        }
    })
}

/// Poll `cond` (a condition, not a guessed delay) until it holds.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(2));
    }
}

/// kube-apiserver decodes `application/yaml` bodies (`curl --data-binary
/// @lease.yaml -H 'Content-Type: application/yaml'`): so does the test
/// server, its numbers typed as the Lease's Go types have them, and
/// YAML it cannot read is a 400.
#[test]
fn yaml_bodies_are_read_as_kube_apiserver_reads_them() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let a = agent();
    let send = |method: &str, url: &str, body: &str| {
        a.run(
            ureq::http::Request::builder()
                .method(method)
                .uri(url)
                .header("Content-Type", "application/yaml")
                .body(body.to_string())
                .unwrap(),
        )
        .unwrap()
    };
    let created = send(
        "POST",
        &leases(&server),
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: y\n\
         \x20 labels: {count: '3'}\n\
         spec:\n  holderIdentity: yaml\n  leaseDurationSeconds: 15\n  leaseTransitions: 2\n",
    );
    assert_eq!(created.status().as_u16(), 201);
    let stored = server.lease_value(NS, "y").unwrap();
    assert_eq!(stored["spec"]["holderIdentity"], "yaml");
    assert_eq!(stored["spec"]["leaseDurationSeconds"], 15);
    assert_eq!(stored["spec"]["leaseTransitions"], 2);
    assert_eq!(stored["metadata"]["labels"]["count"], "3");

    let rv = stored["metadata"]["resourceVersion"].as_str().unwrap();
    let updated = send(
        "PUT",
        &lease_url(&server, "y"),
        &format!(
            "metadata: {{name: y, resourceVersion: '{rv}'}}\n\
             spec: {{holderIdentity: other, leaseDurationSeconds: 20}}\n"
        ),
    );
    assert_eq!(updated.status().as_u16(), 200);
    assert_eq!(
        server.lease_value(NS, "y").unwrap()["spec"]["holderIdentity"],
        "other"
    );

    let mut broken = send("POST", &leases(&server), "metadata: {name: [z\n");
    assert_eq!(broken.status().as_u16(), 400);
    let text = broken.body_mut().read_to_string().unwrap();
    assert!(text.contains("yaml"), "{text}");
}

fn raw_exchange(server: &TestApiServer, request: &[u8]) -> String {
    let addr = server.url().trim_start_matches("http://").to_string();
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    conn.write_all(request).unwrap();
    let mut out = String::new();
    let _ = conn.read_to_string(&mut out);
    out
}

#[test]
fn create_then_already_exists() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let a = agent();
    let created = call(&a, "POST", &leases(&server), None, Some(&lease("l1"))).unwrap();
    assert_eq!(created.code, 201);
    let obj = created.json();
    let meta = &obj["metadata"];
    assert_eq!(meta["namespace"], NS);
    assert!(!meta["uid"].as_str().unwrap().is_empty());
    assert!(meta["creationTimestamp"].as_str().unwrap().ends_with('Z'));
    assert!(created.rv() > 0);
    assert_eq!(server.lease_value(NS, "l1").unwrap(), obj);

    let again = call(&a, "POST", &leases(&server), None, Some(&lease("l1"))).unwrap();
    assert_eq!(again.code, 409);
    let st = again.status();
    assert_eq!(st.reason, "AlreadyExists");
    assert_eq!(
        st.message,
        r#"leases.coordination.k8s.io "l1" already exists"#
    );
    assert_eq!(st.code, 409);
}

#[test]
fn get_missing_is_a_real_status() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let got = call(&agent(), "GET", &lease_url(&server, "nope"), None, None).unwrap();
    assert_eq!(got.code, 404);
    assert_eq!(
        got.json(),
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "leases.coordination.k8s.io \"nope\" not found", "reason": "NotFound",
            "details": {"name": "nope", "group": "coordination.k8s.io", "kind": "leases"},
            "code": 404
        })
    );
}

#[test]
fn unknown_paths_and_methods() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let a = agent();
    let url = format!("{}/apis/apps/v1/deployments", server.url());
    let got = call(&a, "GET", &url, None, None).unwrap();
    assert_eq!((got.code, got.status().reason.as_str()), (404, "NotFound"));
    // DELETE of a Lease is served now (kubectl delete lease); POST to a
    // named Lease is not a verb the API server has.
    let got = call(&a, "POST", &lease_url(&server, "x"), None, Some(&json!({}))).unwrap();
    assert_eq!(
        (got.code, got.status().reason.as_str()),
        (405, "MethodNotAllowed")
    );
}

#[test]
fn update_conflicts_on_stale_resource_version() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let a = agent();
    let url = lease_url(&server, "l1");
    let rv1 = call(&a, "POST", &leases(&server), None, Some(&lease("l1")))
        .unwrap()
        .rv();

    let mut body = lease("l1");
    body["metadata"]["resourceVersion"] = rv1.to_string().into();
    body["spec"]["holderIdentity"] = "pod-b".into();
    let updated = call(&a, "PUT", &url, None, Some(&body)).unwrap();
    assert_eq!(updated.code, 200);
    let rv2 = updated.rv();
    assert!(rv2 > rv1);
    assert_eq!(updated.json()["spec"]["holderIdentity"], "pod-b");

    // Same stale body again: rv1 is no longer current.
    let stale = call(&a, "PUT", &url, None, Some(&body)).unwrap();
    assert_eq!(stale.code, 409);
    let st = stale.status();
    assert_eq!(st.reason, "Conflict");
    assert_eq!(
        st.message,
        "Operation cannot be fulfilled on leases.coordination.k8s.io \"l1\": the object has been \
         modified; please apply your changes to the latest version and try again"
    );
    assert_eq!(
        server.lease_value(NS, "l1").unwrap()["metadata"]["resourceVersion"],
        rv2.to_string()
    );

    // No resourceVersion: Leases allow no unconditional update (422).
    let unconditional = call(&a, "PUT", &url, None, Some(&lease("l1"))).unwrap();
    assert_eq!(unconditional.code, 422);
    let st = unconditional.status();
    assert_eq!(st.reason, "Invalid");
    assert_eq!(
        st.message,
        "leases.coordination.k8s.io \"l1\" is invalid: metadata.resourceVersion: \
         Invalid value: 0: must be specified for an update"
    );
    let mut current = lease("l1");
    current["metadata"]["resourceVersion"] = rv2.to_string().into();
    let updated = call(&a, "PUT", &url, None, Some(&current)).unwrap();
    assert_eq!(updated.code, 200);
    assert!(updated.rv() > rv2);

    // put_lease bumps the same counter (with a change: an unchanged
    // object is not written).
    let mut seed = lease("l1");
    seed["spec"]["holderIdentity"] = "pod-c".into();
    server.put_value(NS, seed);
    let seeded: u64 = server.lease_value(NS, "l1").unwrap()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let updated_rv = updated.rv();
    assert_eq!(seeded, updated_rv + 1);

    // A PUT of a missing Lease creates it (the strategy's AllowCreateOnUpdate).
    let missing = call(
        &a,
        "PUT",
        &lease_url(&server, "l2"),
        None,
        Some(&lease("l2")),
    )
    .unwrap();
    assert_eq!(missing.code, 201);
    assert!(server.lease_value(NS, "l2").is_some());
    let renamed = call(&a, "PUT", &url, None, Some(&lease("other"))).unwrap();
    assert_eq!(
        (renamed.code, renamed.status().reason.as_str()),
        (400, "BadRequest")
    );

    // The body's uid is a precondition: a PUT of the Lease as read before
    // it was deleted (a renew in flight) is a 409, not a creation.
    let before = server.lease_value(NS, "l1").unwrap();
    server.delete_lease(NS, "l1");
    assert!(server.lease_value(NS, "l1").is_none());
    let stale = call(&a, "PUT", &url, None, Some(&before)).unwrap();
    assert_eq!(stale.code, 409);
    let uid = before["metadata"]["uid"].as_str().unwrap();
    assert!(
        stale.status().message.contains(&format!(
            "Precondition failed: UID in precondition: {uid}, UID in object meta: "
        )),
        "{}",
        stale.status().message
    );
    assert!(server.lease_value(NS, "l1").is_none(), "not created again");
}

/// An update that changes nothing is not written, as kube-apiserver 1.37.2
/// does (settled on it: two unchanged `PUT`s answer 200 with the
/// resourceVersion as it was, and a watch sees neither): the resourceVersion
/// stays, no watch event is sent, and a stale version is still a conflict.
#[test]
fn an_update_that_changes_nothing_keeps_its_resource_version_and_sends_no_event() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let a = agent();
    let url = lease_url(&server, "l1");
    let created = call(&a, "POST", &leases(&server), None, Some(&lease("l1"))).unwrap();
    let rv = created.rv();
    let watch = format!(
        "{}?watch=true&fieldSelector=metadata.name%3Dl1",
        leases(&server)
    );
    let (events, _reader) = watch_lines(&agent(), &watch);
    let wait = Duration::from_secs(10);
    assert_eq!(events.recv_timeout(wait).unwrap()["type"], "ADDED");

    // The Lease as read, sent back twice.
    for _ in 0..2 {
        let same = call(&a, "PUT", &url, None, Some(&created.json())).unwrap();
        assert_eq!((same.code, same.rv()), (200, rv), "{}", same.body);
    }
    assert_eq!(
        server.lease_value(NS, "l1").unwrap()["metadata"]["resourceVersion"],
        rv.to_string()
    );
    // The same body under a version that is not current is refused.
    let mut stale = created.json();
    stale["metadata"]["resourceVersion"] = (rv - 1).to_string().into();
    assert_eq!(call(&a, "PUT", &url, None, Some(&stale)).unwrap().code, 409);

    // A change is written; it is the first event the watch sends.
    let mut body = created.json();
    body["spec"]["holderIdentity"] = "pod-b".into();
    let changed = call(&a, "PUT", &url, None, Some(&body)).unwrap();
    assert_eq!(changed.rv(), rv + 1);
    let next = events.recv_timeout(wait).unwrap();
    assert_eq!(next["type"], "MODIFIED");
    assert_eq!(
        next["object"]["metadata"]["resourceVersion"],
        (rv + 1).to_string()
    );
}

/// As kube-apiserver decodes into its Go types: an unknown field is
/// dropped and named in a `Warning` header (the default
/// `fieldValidation=Warn`), an explicit `null` is dropped, known fields
/// (labels, managedFields) are kept.
#[test]
fn unknown_fields_are_dropped_with_a_warning_and_nulls_are_not_stored() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let mut body = lease("l1");
    body["metadata"]["labels"] = json!({"app": "x"});
    body["metadata"]["annotations"] = Value::Null;
    body["metadata"]["managedFields"] = json!([{"manager": "kubectl", "operation": "Update"}]);
    body["spec"]["holderIdentity"] = Value::Null;
    body["spec"]["futureField"] = json!({"nested": [1, 2, 3]});
    body["status"] = json!({"somethingNew": true});
    let resp = agent()
        .post(&leases(&server))
        .header("Content-Type", "application/json")
        .send(body.to_string())
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let warnings: Vec<&str> = resp
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    // In the order the body gives them, as kube-apiserver sends them
    // (settled by tests/real_differential.rs).
    assert_eq!(
        warnings,
        [
            r#"299 - "unknown field \"spec.futureField\"""#,
            r#"299 - "unknown field \"status\"""#,
        ]
    );
    let got = server.lease_value(NS, "l1").unwrap();
    assert_eq!(got["metadata"]["labels"], body["metadata"]["labels"]);
    assert_eq!(
        got["metadata"]["managedFields"],
        body["metadata"]["managedFields"]
    );
    assert!(got["metadata"].get("annotations").is_none(), "{got}");
    assert!(got["spec"].get("holderIdentity").is_none(), "{got}");
    assert!(got["spec"].get("futureField").is_none(), "{got}");
    assert!(got.get("status").is_none(), "{got}");
}

#[test]
fn validation_is_strict() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let a = agent();
    let post = |body: &Value| call(&a, "POST", &leases(&server), None, Some(body)).unwrap();

    for bad_time in [
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:00:00.123Z",
        "yesterday",
    ] {
        let mut body = lease("t");
        body["spec"]["renewTime"] = bad_time.into();
        let got = post(&body);
        assert_eq!(got.code, 400, "{bad_time}: {}", got.body);
        assert_eq!(got.status().reason, "BadRequest");
        assert!(got.status().message.contains(bad_time));
    }
    let mut body = lease("t");
    body["spec"]["acquireTime"] = "2026-01-01T00:00:00.12345Z".into();
    assert_eq!(post(&body).code, 400);

    let mut body = lease("t");
    body["spec"]["leaseDurationSeconds"] = 0.into();
    let got = post(&body);
    assert_eq!((got.code, got.status().reason.as_str()), (422, "Invalid"));
    assert_eq!(
        got.status().message,
        "Lease.coordination.k8s.io \"t\" is invalid: spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"
    );
    let mut body = lease("t");
    body["spec"]["leaseTransitions"] = (-1).into();
    assert_eq!(post(&body).code, 422);

    let mut body = lease("t");
    body["kind"] = "ConfigMap".into();
    assert_eq!(post(&body).code, 400);
    let got = call(
        &a,
        "POST",
        &leases(&server),
        None,
        Some(&json!("not an object")),
    )
    .unwrap();
    assert_eq!(got.code, 400);
    assert!(server.lease_value(NS, "t").is_none());

    // JSON and YAML are understood; protobuf is not.
    let protobuf = a
        .post(leases(&server))
        .header("Content-Type", "application/vnd.kubernetes.protobuf")
        .send("k8s\0")
        .unwrap();
    assert_eq!(protobuf.status().as_u16(), 415);

    // The strict six-digit form passes.
    assert_eq!(post(&lease("t")).code, 201);
}

#[test]
fn bodies_chunked_and_capped() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let body = lease("chunky").to_string();
    let (a, b) = body.split_at(body.len() / 2);
    let req = format!(
        "POST /apis/coordination.k8s.io/v1/namespaces/{NS}/leases HTTP/1.1\r\nHost: x\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
        a.len(),
        b.len()
    );
    let out = raw_exchange(&server, req.as_bytes());
    assert!(out.starts_with("HTTP/1.1 201 "), "{out}");
    assert!(server.lease_value(NS, "chunky").is_some());

    let req = format!(
        "POST /apis/coordination.k8s.io/v1/namespaces/{NS}/leases HTTP/1.1\r\nHost: x\r\n\
         Content-Length: {}\r\n\r\n",
        2 * 1024 * 1024
    );
    let out = raw_exchange(&server, req.as_bytes());
    assert!(out.starts_with("HTTP/1.1 413 "), "{out}");
    assert!(out.contains("RequestEntityTooLarge"));
}

#[test]
fn auth_tokens_rotation_and_forbidden() {
    let server = TestApiServer::builder().tokens(&["t1"]).build().unwrap();
    server.add_namespace(NS);
    let a = agent();
    let url = lease_url(&server, "l1");

    let none = call(&a, "GET", &url, None, None).unwrap();
    assert_eq!(none.code, 401);
    assert_eq!(none.status().reason, "Unauthorized");
    assert_eq!(none.status().message, "Unauthorized");
    assert_eq!(
        call(&a, "GET", &url, Some("wrong"), None).unwrap().code,
        401
    );
    assert_eq!(call(&a, "GET", &url, Some("t1"), None).unwrap().code, 404);

    server.set_tokens(&["t2", "t3"]);
    assert_eq!(call(&a, "GET", &url, Some("t1"), None).unwrap().code, 401);
    assert_eq!(call(&a, "GET", &url, Some("t2"), None).unwrap().code, 404);
    assert_eq!(call(&a, "GET", &url, Some("t3"), None).unwrap().code, 404);

    server.forbid_token("evil");
    let forbidden = call(&a, "PUT", &url, Some("evil"), Some(&lease("l1"))).unwrap();
    assert_eq!(forbidden.code, 403);
    let st = forbidden.status();
    assert_eq!(st.reason, "Forbidden");
    assert_eq!(
        st.message,
        "leases.coordination.k8s.io \"l1\" is forbidden: User \"system:serviceaccount:test:default\" \
         cannot update resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"ns1\""
    );

    server.set_tokens(&[]);
    assert_eq!(call(&a, "GET", &url, None, None).unwrap().code, 404);
}

#[test]
fn status_faults_with_filters_and_counts() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let a = agent();
    let url = lease_url(&server, "l1");
    assert_eq!(
        call(&a, "POST", &leases(&server), None, Some(&lease("l1")))
            .unwrap()
            .code,
        201
    );

    server.inject(Fault::status(429).method("GET").times(2));
    server.inject(Fault::status(500).path_contains("/leases/l1").method("PUT"));
    for _ in 0..2 {
        let got = call(&a, "GET", &url, None, None).unwrap();
        assert_eq!(got.code, 429);
        assert_eq!(got.retry_after.as_deref(), Some("1"));
        assert_eq!(got.status().reason, "TooManyRequests");
    }
    assert_eq!(call(&a, "GET", &url, None, None).unwrap().code, 200);

    // The PUT rule does not match another lease (a PUT of a missing Lease
    // creates it).
    let other = call(
        &a,
        "PUT",
        &lease_url(&server, "l2"),
        None,
        Some(&lease("l2")),
    )
    .unwrap();
    assert_eq!(other.code, 201);
    let failed = call(&a, "PUT", &url, None, Some(&lease("l1"))).unwrap();
    assert_eq!(
        (failed.code, failed.status().reason.as_str()),
        (500, "InternalError")
    );
    // Served again (and refused: the PUT carries no resourceVersion).
    assert_eq!(
        call(&a, "PUT", &url, None, Some(&lease("l1")))
            .unwrap()
            .code,
        422
    );

    for (code, reason) in [
        (409, "Conflict"),
        (503, "ServiceUnavailable"),
        (401, "Unauthorized"),
        (403, "Forbidden"),
        (404, "NotFound"),
    ] {
        server.inject(Fault::status(code));
        let got = call(&a, "GET", &url, None, None).unwrap();
        assert_eq!((got.code, got.status().reason.as_str()), (code, reason));
    }

    server.inject(Fault::status(503).forever());
    for _ in 0..3 {
        assert_eq!(call(&a, "GET", &url, None, None).unwrap().code, 503);
    }
    server.clear_faults();
    assert_eq!(call(&a, "GET", &url, None, None).unwrap().code, 200);
    assert_eq!(server.stats().faults_fired, 2 + 1 + 5 + 3);
}

#[test]
fn raw_and_drop_faults() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let a = agent();
    let url = lease_url(&server, "l1");

    server.inject(Fault::raw(200, b"{\"kind\":\"Lea".to_vec()));
    let got = call(&a, "GET", &url, None, None).unwrap();
    assert_eq!((got.code, got.body.as_str()), (200, "{\"kind\":\"Lea"));

    server.inject(Fault::drop_connection().method("GET"));
    assert!(call(&a, "GET", &url, None, None).is_err());
    assert_eq!(call(&a, "GET", &url, None, None).unwrap().code, 404);
    let log = server.requests();
    let statuses: Vec<u16> = log.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 0, 404]);
    assert!(log[0].path.ends_with("/leases/l1"));
}

#[test]
fn latency_is_observed_and_combines() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let a = agent();
    let url = lease_url(&server, "l1");
    let delay = Duration::from_millis(300);

    server.inject(Fault::latency(delay));
    let t = Instant::now();
    assert_eq!(call(&a, "GET", &url, None, None).unwrap().code, 404);
    assert!(t.elapsed() >= delay);

    // Latency first, then the status rule fires on the same request.
    server.inject(Fault::latency(delay));
    server.inject(Fault::status(503));
    let t = Instant::now();
    assert_eq!(call(&a, "GET", &url, None, None).unwrap().code, 503);
    assert!(t.elapsed() >= delay);
    assert_eq!(server.stats().faults_fired, 3);
}

#[test]
fn outage_drops_and_recovers() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let a = agent();
    let url = lease_url(&server, "l1");
    assert_eq!(call(&a, "GET", &url, None, None).unwrap().code, 404);

    server.set_outage(true);
    // Both the pooled keep-alive connection and a fresh one get no answer.
    assert!(call(&a, "GET", &url, None, None).is_err());
    assert!(call(&agent(), "GET", &url, None, None).is_err());

    server.set_outage(false);
    assert_eq!(call(&a, "GET", &url, None, None).unwrap().code, 404);
}

fn watch_lines(
    a: &ureq::Agent,
    url: &str,
) -> (
    mpsc::Receiver<Value>,
    thread::JoinHandle<Result<(), String>>,
) {
    let resp = a.get(url).call().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.headers()
            .get("transfer-encoding")
            .unwrap()
            .to_str()
            .unwrap(),
        "chunked"
    );
    let (tx, rx) = mpsc::channel();
    let reader = thread::spawn(move || {
        let mut r = BufReader::new(resp.into_body().into_reader());
        loop {
            let mut line = String::new();
            match r.read_line(&mut line) {
                Ok(0) => return Ok(()),
                Ok(_) => tx.send(serde_json::from_str(&line).unwrap()).unwrap(),
                Err(e) => return Err(e.to_string()),
            }
        }
    });
    (rx, reader)
}

#[test]
fn watch_streams_changes_and_ends_on_shutdown() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let a = agent();
    let rv1 = call(&a, "POST", &leases(&server), None, Some(&lease("l1")))
        .unwrap()
        .rv();
    let url = format!(
        "{}?watch=true&fieldSelector=metadata.name%3Dl1",
        leases(&server)
    );
    let (rx, reader) = watch_lines(&agent(), &url);
    let wait = Duration::from_secs(10);

    let added = rx.recv_timeout(wait).unwrap();
    assert_eq!(added["type"], "ADDED");
    assert_eq!(
        added["object"]["metadata"]["resourceVersion"],
        rv1.to_string()
    );

    // Changes to another lease are not sent.
    call(&a, "POST", &leases(&server), None, Some(&lease("l2"))).unwrap();
    let mut body = lease("l1");
    body["metadata"]["resourceVersion"] = rv1.to_string().into();
    body["spec"]["holderIdentity"] = "pod-b".into();
    let rv2 = call(&a, "PUT", &lease_url(&server, "l1"), None, Some(&body))
        .unwrap()
        .rv();
    let modified = rx.recv_timeout(wait).unwrap();
    assert_eq!(modified["type"], "MODIFIED");
    assert_eq!(modified["object"]["spec"]["holderIdentity"], "pod-b");
    assert_eq!(
        modified["object"]["metadata"]["resourceVersion"],
        rv2.to_string()
    );

    server.delete_lease(NS, "l1");
    assert_eq!(rx.recv_timeout(wait).unwrap()["type"], "DELETED");
    assert_eq!(server.stats().watches, 1);

    let t = Instant::now();
    server.shutdown();
    assert!(t.elapsed() < Duration::from_secs(5));
    // The stream ends (cleanly or with a cut connection) and nothing more arrives.
    let _ = reader.join().unwrap();
    assert!(rx.try_recv().is_err());
}

#[test]
fn watch_from_resource_version_and_timeout() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let a = agent();
    let rv1 = call(&a, "POST", &leases(&server), None, Some(&lease("l1")))
        .unwrap()
        .rv();
    let mut changed = lease("l1");
    changed["spec"]["holderIdentity"] = "pod-b".into();
    server.put_value(NS, changed);
    // Unencoded selector, an older resourceVersion, and a 1 s time-out.
    let url = format!(
        "{}?watch=true&fieldSelector=metadata.name=l1&resourceVersion={rv1}&timeoutSeconds=1",
        leases(&server)
    );
    let (rx, reader) = watch_lines(&a, &url);
    let first = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(first["type"], "MODIFIED");
    assert_eq!(
        first["object"]["metadata"]["resourceVersion"],
        (rv1 + 1).to_string()
    );
    // timeoutSeconds ends the body cleanly.
    assert_eq!(reader.join().unwrap(), Ok(()));
    assert!(rx.try_recv().is_err());
    assert_eq!(server.requests().last().unwrap().status, 200);
}

/// client-go's streaming list (`sendInitialEvents=true`): the current
/// objects as `ADDED`, then the bookmark that says they are all there; a
/// Namespace watch is served like a Lease one.
#[test]
fn a_streaming_list_ends_its_initial_events_with_a_bookmark() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let a = agent();
    for name in ["l1", "l2"] {
        call(&a, "POST", &leases(&server), None, Some(&lease(name))).unwrap();
    }
    let url = format!(
        "{}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan\
         &allowWatchBookmarks=true&timeoutSeconds=1",
        leases(&server)
    );
    let (rx, reader) = watch_lines(&a, &url);
    let events: Vec<Value> = (0..3)
        .map(|_| rx.recv_timeout(common::WAIT).unwrap())
        .collect();
    let got: Vec<(String, String)> = events
        .iter()
        .map(|e| {
            let name = e["object"]["metadata"]["name"].as_str().unwrap_or("");
            (e["type"].as_str().unwrap().to_string(), name.to_string())
        })
        .collect();
    assert_eq!(
        got,
        [
            ("ADDED".into(), "l1".into()),
            ("ADDED".into(), "l2".into()),
            ("BOOKMARK".into(), String::new())
        ]
    );
    assert_eq!(
        events[2]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(reader.join().unwrap(), Ok(()));

    let url = format!(
        "{}/api/v1/namespaces?watch=true&fieldSelector=metadata.name={NS}&timeoutSeconds=1",
        server.url()
    );
    let (rx, reader) = watch_lines(&a, &url);
    let first = rx.recv_timeout(common::WAIT).unwrap();
    assert_eq!(
        (first["type"].as_str(), first["object"]["kind"].as_str()),
        (Some("ADDED"), Some("Namespace"))
    );
    assert_eq!(reader.join().unwrap(), Ok(()));
}

#[test]
fn watch_is_cut_by_an_outage() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let url = format!("{}?watch=true", leases(&server));
    let (rx, reader) = watch_lines(&agent(), &url);
    server.put_value(NS, lease("l1"));
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(10)).unwrap()["type"],
        "ADDED"
    );
    server.set_outage(true);
    // Cut without the final chunk: the reader sees an error, not a clean end.
    assert!(reader.join().unwrap().is_err());
}

#[test]
fn events_are_recorded() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": { "generateName": "l1.", "namespace": NS },
        "involvedObject": { "kind": "Lease", "name": "l1", "namespace": NS },
        "reason": "LeaderElection",
        "message": "pod-a became leader",
        "type": "Normal"
    });
    let url = format!("{}/api/v1/namespaces/{NS}/events", server.url());
    let got = call(&agent(), "POST", &url, None, Some(&event)).unwrap();
    assert_eq!(got.code, 201);
    let events = server.event_values();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["message"], "pod-a became leader");
    assert!(events[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .starts_with("l1."));
    assert_eq!(events[0], got.json());
    assert_eq!(server.stats().events, 1);
}

#[test]
fn tls_serves_and_is_verified() {
    let server = TestApiServer::builder()
        .tls(true)
        .tokens(&["t"])
        .build()
        .unwrap();
    server.add_namespace(NS);
    assert!(server.url().starts_with("https://127.0.0.1:"));
    let url = lease_url(&server, "l1");
    let a = tls_agent(&server, false);
    assert_eq!(call(&a, "GET", &url, Some("t"), None).unwrap().code, 404);
    assert_eq!(call(&a, "GET", &url, None, None).unwrap().code, 401);
    let created = call(&a, "POST", &leases(&server), Some("t"), Some(&lease("l1"))).unwrap();
    assert_eq!(created.code, 201);

    // Without the fixture CA the server certificate is not trusted.
    let untrusting = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .tls_config(
            TlsConfig::builder()
                .provider(TlsProvider::Rustls)
                .unversioned_rustls_crypto_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .root_certs(RootCerts::new_with_certs(&[]))
                .build(),
        )
        .build()
        .new_agent();
    assert!(call(&untrusting, "GET", &url, Some("t"), None).is_err());
}

#[test]
fn mtls_client_cert_authenticates() {
    let server = TestApiServer::builder()
        .tls(true)
        .client_ca(true)
        .tokens(&["t"])
        .build()
        .unwrap();
    server.add_namespace(NS);
    let url = lease_url(&server, "l1");
    // The client certificate alone authenticates.
    let with_cert = tls_agent(&server, true);
    assert_eq!(call(&with_cert, "GET", &url, None, None).unwrap().code, 404);
    // Without one the handshake is refused, token or not.
    let without = tls_agent(&server, false);
    assert!(call(&without, "GET", &url, Some("t"), None).is_err());
    assert!(TestApiServer::builder().client_ca(true).build().is_err());
}

#[test]
fn shutdown_wakes_a_connection_stuck_in_latency() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    server.inject(Fault::latency(Duration::from_secs(3600)));
    let url = lease_url(&server, "l1");
    let client = thread::spawn(move || call(&agent(), "GET", &url, None, None).map(|a| a.code));
    eventually("the request to reach the server", || {
        server.stats().requests == 1
    });

    let t = Instant::now();
    server.shutdown();
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(client.join().unwrap().is_err());
}

#[test]
fn stats_count_requests() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let a = agent();
    let url = lease_url(&server, "l1");
    call(&a, "GET", &url, None, None).unwrap();
    call(&a, "POST", &leases(&server), None, Some(&lease("l1"))).unwrap();
    call(&a, "POST", &leases(&server), None, Some(&lease("l1"))).unwrap();
    call(&a, "PUT", &url, None, Some(&lease("l1"))).unwrap();
    call(&a, "GET", &url, None, None).unwrap();

    let s = server.stats();
    assert_eq!(
        (s.requests, s.gets, s.creates, s.updates, s.watches, s.events),
        (5, 2, 2, 1, 0, 0)
    );
    let log = server.requests();
    assert_eq!(log.len(), 5);
    let statuses: Vec<u16> = log.iter().map(|r| r.status).collect();
    // The PUT carries no resourceVersion: 422.
    assert_eq!(statuses, [404, 201, 409, 422, 200]);
    assert_eq!(log[1].method, "POST");
    assert_eq!(s.bytes_in, log.iter().map(|r| r.bytes_in).sum::<u64>());
    assert_eq!(s.bytes_out, log.iter().map(|r| r.bytes_out).sum::<u64>());
    assert!(log.iter().all(|r| r.bytes_out > 0));
    assert!(log[1].bytes_in > lease("l1").to_string().len() as u64);

    server.reset_stats();
    assert_eq!(server.stats().requests, 0);
    assert!(server.requests().is_empty());
}

#[test]
fn watch_ends_when_the_client_goes_away() {
    for tls in [false, true] {
        let server = TestApiServer::builder().tls(tls).build().unwrap();
        server.add_namespace(NS);
        let a = if tls {
            tls_agent(&server, false)
        } else {
            agent()
        };
        let url = format!(
            "{}?watch=true&fieldSelector=metadata.name%3Dl1",
            leases(&server)
        );
        server.put_value(NS, lease("l1"));
        let resp = a.get(&url).call().unwrap();
        let mut r = BufReader::new(resp.into_body().into_reader());
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert!(line.contains("ADDED"), "{line}");
        drop(r);
        drop(a);
        // The server notices the closed connection and logs the finished watch.
        eventually("the watch to end", || server.requests().len() == 1);
        assert_eq!(server.requests()[0].status, 200);
    }
}

#[test]
fn keep_alive_serves_several_requests_per_connection() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let get = format!(
        "GET /apis/coordination.k8s.io/v1/namespaces/{NS}/leases/a HTTP/1.1\r\nHost: x\r\n\r\n"
    );
    let last = get.replace("Host: x\r\n", "Host: x\r\nConnection: close\r\n");
    let out = raw_exchange(&server, format!("{get}{get}{last}").as_bytes());
    assert_eq!(
        out.matches("HTTP/1.1 404 Not Found\r\n").count(),
        3,
        "{out}"
    );
    assert_eq!(server.stats().requests, 3);
}

#[test]
fn drop_stops_the_server() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let addr = server.url().trim_start_matches("http://").to_string();
    let url = format!("{}?watch=true", leases(&server));
    let (_rx, reader) = watch_lines(&agent(), &url);
    drop(server);
    let _ = reader.join().unwrap();
    assert!(TcpStream::connect(addr).is_err());
}

#[test]
fn request_heads_up_to_kube_apiservers_1_mib_are_read_and_larger_ones_get_431() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let head = |padding: usize| {
        format!(
            "GET /apis/coordination.k8s.io/v1/namespaces/{NS}/leases/a HTTP/1.1\r\nHost: x\r\n\
             Connection: close\r\nX-Padding: {}",
            "p".repeat(padding)
        )
    };
    // A long header line (a big token, say) is fine, as on a cluster.
    let out = raw_exchange(&server, format!("{}\r\n\r\n", head(64 * 1024)).as_bytes());
    assert!(out.starts_with("HTTP/1.1 404 "), "{out}");
    // 1 MiB without the end of the head: refused once it is all read (so
    // that the close does not reset the answer away).
    let short = head(0).len();
    let out = raw_exchange(&server, head(1024 * 1024 - short).as_bytes());
    assert!(out.starts_with("HTTP/1.1 431 "), "{out}");
    assert!(out.contains(r#""code":431"#), "{out}");
    // A request without Host is not HTTP/1.1.
    let out = raw_exchange(&server, b"GET /version HTTP/1.1\r\n\r\n");
    assert!(out.starts_with("HTTP/1.1 400 "), "{out}");
}

/// A request as the official Python client sends it: no `Content-Type`
/// (unless `content_type` is given), `Connection: close`; the answer's
/// status and JSON body.
fn raw_call(
    server: &TestApiServer,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &Value,
) -> (u16, Value) {
    let body = body.to_string();
    let ct = content_type.map_or(String::new(), |ct| format!("Content-Type: {ct}\r\n"));
    let out = raw_exchange(
        server,
        format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\n{ct}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
    let (head, body) = out.split_once("\r\n\r\n").expect(&out);
    let code = head[9..12].parse().expect(head);
    (code, serde_json::from_str(body).unwrap_or(Value::Null))
}

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/ns1/leases";

#[test]
fn writes_without_a_content_type_are_json_as_kube_apiserver_takes_them() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let (code, created) = raw_call(&server, "POST", LEASES, None, &lease("l1"));
    assert_eq!(code, 201, "{created}");
    let mut body = lease("l1");
    body["spec"]["holderIdentity"] = "pod-b".into();
    body["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"].clone();
    let (code, replaced) = raw_call(&server, "PUT", &format!("{LEASES}/l1"), None, &body);
    assert_eq!(code, 200, "{replaced}");
    assert_eq!(
        server.lease_value(NS, "l1").unwrap()["spec"]["holderIdentity"],
        "pod-b"
    );
    // A media type that is named and not JSON is still refused.
    let (code, status) = raw_call(
        &server,
        "PUT",
        &format!("{LEASES}/l1"),
        Some("text/plain"),
        &body,
    );
    assert_eq!(
        (code, status["reason"].as_str()),
        (415, Some("UnsupportedMediaType"))
    );
}

#[test]
fn kind_and_api_version_default_from_the_url_and_wrong_ones_are_refused() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    // What the Python client's LeaseLock.create sends: no kind, no apiVersion.
    let mut bare = lease("l1");
    bare.as_object_mut().unwrap().remove("kind");
    bare.as_object_mut().unwrap().remove("apiVersion");
    let (code, created) = raw_call(&server, "POST", LEASES, None, &bare);
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["kind"], "Lease");
    assert_eq!(created["apiVersion"], "coordination.k8s.io/v1");
    assert_eq!(server.lease_value(NS, "l1").unwrap()["kind"], "Lease");
    bare["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"].clone();
    let (code, replaced) = raw_call(&server, "PUT", &format!("{LEASES}/l1"), None, &bare);
    assert_eq!((code, &replaced["kind"]), (200, &json!("Lease")));

    let mut wrong_version = lease("l2");
    wrong_version["apiVersion"] = "v1".into();
    let (code, status) = raw_call(&server, "POST", LEASES, None, &wrong_version);
    assert_eq!(code, 400);
    // As kube-apiserver 1.37 words it (settled by tests/real_differential.rs).
    assert_eq!(
        status["message"],
        "Lease in version \"v1\" cannot be handled as a Lease: no kind \"Lease\" is registered \
         for version \"v1\" in scheme \"pkg/runtime/scheme.go:111\""
    );
    let mut wrong_kind = lease("l2");
    wrong_kind["kind"] = "ConfigMap".into();
    assert_eq!(raw_call(&server, "POST", LEASES, None, &wrong_kind).0, 400);
    assert!(server.lease_value(NS, "l2").is_none());
}

#[test]
fn microtime_is_stored_in_utc_with_six_digits_whatever_offset_it_was_written_with() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let mut body = lease("l1");
    // Python's datetime.isoformat() of an aware UTC time, and another offset.
    body["spec"]["acquireTime"] = "2026-01-01T00:00:00.000001+00:00".into();
    body["spec"]["renewTime"] = "2026-01-01T02:30:00.123456+02:30".into();
    let (code, created) = raw_call(&server, "POST", LEASES, None, &body);
    assert_eq!(code, 201, "{created}");
    let want = json!({"acquireTime": "2026-01-01T00:00:00.000001Z", "renewTime": "2026-01-01T00:00:00.123456Z"});
    for obj in [&created, &server.lease_value(NS, "l1").unwrap()] {
        assert_eq!(obj["spec"]["acquireTime"], want["acquireTime"], "{obj}");
        assert_eq!(obj["spec"]["renewTime"], want["renewTime"], "{obj}");
    }
}

#[test]
fn label_selectors_filter_lists_and_watches() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let labelled = |name: &str, labels: Value| {
        let mut l = lease(name);
        l["metadata"]["labels"] = labels;
        l
    };
    for (name, labels) in [
        ("a", json!({"app": "x", "tier": "web"})),
        ("b", json!({"app": "y"})),
        ("c", json!({})),
    ] {
        assert_eq!(
            raw_call(&server, "POST", LEASES, None, &labelled(name, labels)).0,
            201
        );
    }
    let names = |selector: &str| -> Vec<String> {
        let url = format!("{}?labelSelector={selector}", leases(&server));
        let got = call(&agent(), "GET", &url, None, None).unwrap();
        assert_eq!(got.code, 200, "{selector}: {}", got.body);
        got.json()["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names("app%3Dx"), ["a"]);
    assert_eq!(names("app!%3Dx"), ["b", "c"]);
    assert_eq!(names("app"), ["a", "b"]);
    assert_eq!(names("!app"), ["c"]);
    assert_eq!(names("app%20in%20(x,y),tier%20notin%20(db)"), ["a", "b"]);
    assert_eq!(names("app=x,tier=web"), ["a"]);
    let bad = call(
        &agent(),
        "GET",
        &format!("{}?labelSelector=app%20in%20x", leases(&server)),
        None,
        None,
    )
    .unwrap();
    assert_eq!(
        (bad.code, bad.status().reason.as_str()),
        (400, "BadRequest")
    );

    // A watch sees an object enter and leave its selection.
    let url = format!("{}?watch=true&labelSelector=app%3Dx", leases(&server));
    let (rx, _reader) = watch_lines(&agent(), &url);
    let wait = Duration::from_secs(10);
    let first = rx.recv_timeout(wait).unwrap();
    assert_eq!(
        (
            first["type"].as_str(),
            first["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("a"))
    );
    let relabel = |name: &str, app: &str| {
        let mut l = server.lease_value(NS, name).unwrap();
        l["metadata"]["labels"]["app"] = app.into();
        let (code, body) = raw_call(&server, "PUT", &format!("{LEASES}/{name}"), None, &l);
        assert_eq!(code, 200, "{body}");
        body["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string()
    };
    relabel("b", "x");
    let ev = rx.recv_timeout(wait).unwrap();
    assert_eq!(
        (
            ev["type"].as_str(),
            ev["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("b"))
    );
    let rv = relabel("a", "z");
    let ev = rx.recv_timeout(wait).unwrap();
    assert_eq!(
        (
            ev["type"].as_str(),
            ev["object"]["metadata"]["name"].as_str()
        ),
        (Some("DELETED"), Some("a"))
    );
    // As it was, at the version of the change that took it out.
    assert_eq!(ev["object"]["metadata"]["labels"]["app"], "x");
    assert_eq!(ev["object"]["metadata"]["resourceVersion"], rv.as_str());
    relabel("b", "x2");
    assert_eq!(rx.recv_timeout(wait).unwrap()["type"], "DELETED");
    // Changes outside the selection are not sent.
    relabel("c", "q");
    server.put_value(NS, labelled("d", json!({"app": "x"})));
    let ev = rx.recv_timeout(wait).unwrap();
    assert_eq!(
        (
            ev["type"].as_str(),
            ev["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("d"))
    );
}
