//! End to end over HTTP: an OpenShift `LeaderElection` config through
//! `from_config`, an elector acquiring and releasing the Lease, and the
//! LeaderElection Events it records.
//!
//! The API server here is a throwaway stub (`Stub`, below) answering just
//! the Lease GET/POST/PUT and Event POST; swap it for the embedded
//! `lease_elector::testing` server once that exists.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use lease_elector::config::{self, Election, LeaderElection};
use lease_elector::{Client, ClientConfig, LeaderEvent};
use serde_json::{json, Value};

#[test]
fn config_to_leadership_and_events() {
    let stub = Stub::start();
    let file = LeaderElection::from_json(
        r#"{"namespace": "team-a", "name": "e2e-lock",
            "leaseDuration": "15s", "renewDeadline": "10s", "retryPeriod": "2s"}"#,
    )
    .unwrap();
    let cfg = config::defaulted(&file, "ignored", "ignored");
    let client = Client::new(ClientConfig::new(stub.url())).unwrap();
    let Election::Enabled(builder) =
        config::from_config(client, &cfg, "e2e-operator", "pod-a").unwrap()
    else {
        panic!("election is enabled in this config");
    };
    let (handle, events) = builder.build().unwrap().spawn().unwrap();
    loop {
        match events.recv_timeout(Duration::from_secs(10)).unwrap() {
            LeaderEvent::StartedLeading { .. } => break,
            LeaderEvent::NewLeader { identity, .. } => assert_eq!(identity, "pod-a"),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(handle.is_leader());
    // Stop releases the Lease; the elector thread ends, which drops the
    // event recorder, which sends what is queued and joins its thread.
    handle.stop().unwrap();
    assert!(events
        .iter()
        .any(|e| matches!(e, LeaderEvent::StoppedLeading { .. })));

    let lease = stub.lease().expect("the lease was created");
    assert_eq!(lease["spec"]["holderIdentity"].as_str().unwrap_or(""), "");
    let recorded = stub.events();
    let messages: Vec<&str> = recorded
        .iter()
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    assert_eq!(messages, ["pod-a became leader", "pod-a stopped leading"]);
    for e in &recorded {
        assert_eq!(e["reason"], "LeaderElection");
        assert_eq!(e["metadata"]["namespace"], "team-a");
        assert_eq!(e["involvedObject"]["kind"], "Lease");
        assert_eq!(e["involvedObject"]["name"], "e2e-lock");
        assert_eq!(e["involvedObject"]["uid"], "uid-e2e-lock");
        assert_eq!(e["source"]["component"], "e2e-operator");
        assert_eq!(e["reportingInstance"], "pod-a");
    }
}

#[test]
fn disabled_config_talks_to_nobody() {
    let stub = Stub::start();
    let cfg = LeaderElection::from_json(r#"{"disable": true}"#).unwrap();
    let client = Client::new(ClientConfig::new(stub.url())).unwrap();
    let election = config::from_config(client, &cfg, "c", "").unwrap();
    assert!(matches!(election, Election::Disabled));
    assert_eq!(stub.requests(), 0);
}

/// A single-Lease, single-namespace stand-in for the API server.
struct Stub {
    url: String,
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    lease: Option<Value>,
    events: Vec<Value>,
    requests: usize,
}

impl Stub {
    fn start() -> Stub {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        // Serves one request per connection, forever; the test process
        // ending is what stops it.
        thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                serve(conn, &shared);
            }
        });
        Stub { url, state }
    }

    fn url(&self) -> &str {
        &self.url
    }

    fn lease(&self) -> Option<Value> {
        self.state.lock().unwrap().lease.clone()
    }

    fn events(&self) -> Vec<Value> {
        self.state.lock().unwrap().events.clone()
    }

    fn requests(&self) -> usize {
        self.state.lock().unwrap().requests
    }
}

fn serve(mut conn: TcpStream, state: &Mutex<State>) {
    let Some((method, path, body)) = read_request(&conn) else {
        return;
    };
    let mut st = state.lock().unwrap();
    st.requests += 1;
    let leases = "/apis/coordination.k8s.io/v1/namespaces/team-a/leases";
    let (code, answer) = match (method.as_str(), path.as_str()) {
        ("GET", p) if p.starts_with(leases) => match &st.lease {
            Some(l) => (200, l.clone()),
            None => (404, status(404, "NotFound")),
        },
        ("POST", p) if p == leases => {
            let mut l = body;
            l["metadata"]["uid"] = json!("uid-e2e-lock");
            l["metadata"]["resourceVersion"] = json!("1");
            st.lease = Some(l.clone());
            (201, l)
        }
        ("PUT", p) if p.starts_with(leases) => {
            let current = st
                .lease
                .as_ref()
                .map(|l| l["metadata"]["resourceVersion"].clone());
            if current != Some(body["metadata"]["resourceVersion"].clone()) {
                (409, status(409, "Conflict"))
            } else {
                let next = current
                    .and_then(|v| v.as_str().and_then(|s| s.parse::<u64>().ok()))
                    .unwrap_or(0)
                    + 1;
                let mut l = body;
                l["metadata"]["resourceVersion"] = json!(next.to_string());
                st.lease = Some(l.clone());
                (200, l)
            }
        }
        ("POST", "/api/v1/namespaces/team-a/events") => {
            st.events.push(body.clone());
            (201, body)
        }
        _ => (404, status(404, "NotFound")),
    };
    drop(st);
    let text = answer.to_string();
    let _ = write!(
        conn,
        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
}

fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason})
}

fn read_request(conn: &TcpStream) -> Option<(String, String, Value)> {
    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut len = 0;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        if header.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = header.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().ok()?;
            }
        }
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some((
        method,
        path,
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    ))
}
