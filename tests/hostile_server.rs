//! A hostile world in front of the API server, over real HTTP on loopback:
//! a proxy that redirects writes or forges their answers, and a server
//! whose error bodies try to forge log lines. A write counts only when the
//! answer is the Lease written; server text reaches logs and errors
//! escaped, one line each.

mod common;

use common::RawLeases;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::logs::logs;
use common::{eventually, timings, Cluster, LEASE, NS};
use lease_elector::status::FailureKind;
use lease_elector::testing::{Fault, TestApiServer};
use lease_elector::{Client, ClientConfig, Deadline, Error, LeaseLock, MicroTime};
use serde_json::{json, Value};

const STEP: Duration = Duration::from_secs(2);

/// What the proxy does to a `PUT` or `POST` of a Lease.
#[derive(Clone)]
enum OnWrite {
    /// Carry it to the server and back unchanged.
    Pass,
    /// Answer with this 3xx and a `Location` naming the object's own URL
    /// (with credentials in it), without asking the server.
    Redirect(u16),
    /// Carry it, then change the server's answer: `(answer, request body)`.
    Forge(fn(&mut Value, &Value)),
    /// Carry writes; answer every watch with a 307 to its own URL.
    RedirectWatches,
}

/// An HTTP/1.1 proxy in front of `upstream` (plain `http://` URLs, not a
/// CONNECT proxy: the client talks to it as to the API server).
struct HostileProxy {
    url: String,
    mode: Arc<Mutex<OnWrite>>,
}

impl HostileProxy {
    fn start(upstream: &str, mode: OnWrite) -> HostileProxy {
        let upstream: SocketAddr = upstream
            .strip_prefix("http://")
            .expect("a plain-http test server")
            .parse()
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mode = Arc::new(Mutex::new(mode));
        let m = mode.clone();
        thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let m = m.clone();
                thread::spawn(move || serve(conn, upstream, addr, &m));
            }
        });
        HostileProxy {
            url: format!("http://{addr}"),
            mode,
        }
    }

    fn set(&self, mode: OnWrite) {
        *self.mode.lock().unwrap() = mode;
    }

    fn client(&self) -> Client {
        Client::new(ClientConfig::new(&self.url).timeout(Duration::from_secs(5))).unwrap()
    }
}

/// Serve requests on one client connection until it closes.
fn serve(conn: TcpStream, upstream: SocketAddr, me: SocketAddr, mode: &Mutex<OnWrite>) {
    let mut r = BufReader::new(conn.try_clone().unwrap());
    let mut w = conn;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, path) = match (parts.next(), parts.next()) {
            (Some(m), Some(p)) => (m.to_string(), p.to_string()),
            _ => return,
        };
        let mut headers = Vec::new();
        let mut length = 0;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end().to_string();
            if h.is_empty() {
                break;
            }
            if let Some((n, v)) = h.split_once(':') {
                if n.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().unwrap();
                }
                if !n.eq_ignore_ascii_case("connection") {
                    headers.push(h.clone());
                }
            }
        }
        let mut body = vec![0; length];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let write = (method == "PUT" || method == "POST") && path.contains("/leases");
        let watch = path.contains("watch=true");
        let mode = mode.lock().unwrap().clone();
        let answer = match (write, mode) {
            (false, OnWrite::RedirectWatches) if watch => format!(
                "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://alice:L0cS3cret@{me}{path}\r\nContent-Length: 0\r\n\r\n"
            )
            .into_bytes(),
            (true, OnWrite::Redirect(code)) => {
                // The object's own URL: a POST goes to the collection.
                let mut object = path.clone();
                if method == "POST" {
                    let name = serde_json::from_slice::<Value>(&body).unwrap()["metadata"]["name"]
                        .as_str()
                        .unwrap()
                        .to_string();
                    object = format!("{object}/{name}");
                }
                format!(
                    "HTTP/1.1 {code} Moved\r\nLocation: http://alice:L0cS3cret@{me}{object}\r\nContent-Length: 0\r\n\r\n"
                )
                .into_bytes()
            }
            (true, OnWrite::Forge(forge)) => {
                let (status, answer) = forward(upstream, &method, &path, &headers, &body);
                let mut answer: Value = serde_json::from_slice(&answer).unwrap();
                if (200..300).contains(&status) {
                    forge(&mut answer, &serde_json::from_slice(&body).unwrap());
                }
                respond(status, &serde_json::to_vec(&answer).unwrap())
            }
            _ => {
                let (status, answer) = forward(upstream, &method, &path, &headers, &body);
                respond(status, &answer)
            }
        };
        if w.write_all(&answer).is_err() {
            return;
        }
    }
}

/// One request to the server on a connection of its own; its status and body.
fn forward(
    upstream: SocketAddr,
    method: &str,
    path: &str,
    headers: &[String],
    body: &[u8],
) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(upstream).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, raw[split + 4..].to_vec())
}

fn respond(status: u16, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// A Lease nobody holds, so that a candidate takes it with a `PUT`.
fn released_lease() -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": LEASE, "namespace": NS},
        "spec": {"holderIdentity": "", "leaseDurationSeconds": 15, "leaseTransitions": 3}
    })
}

/// `me` through `proxy`, stepped for five retry periods: it never leads,
/// and the error its status carries is returned.
fn never_leads(c: &mut Cluster, proxy: &HostileProxy) -> lease_elector::status::LastError {
    let i = c.add_lock(
        "me",
        LeaseLock::new(proxy.client(), NS, LEASE, "me"),
        timings(),
    );
    for _ in 0..5 {
        c.step(STEP);
        assert_eq!(c.candidates[i].started(), 0, "led on an unconfirmed write");
        assert!(!c.candidates[i].handle().probe().is_leader());
    }
    let status = c.candidates[i].handle().probe().status();
    assert!(status.renews == 0, "{status:?}");
    status.last_error.expect("the failed attempts are reported")
}

#[test]
fn a_write_answered_with_a_redirect_is_an_error_naming_it_and_never_leads() {
    for code in [301, 302, 303, 307, 308] {
        let mut c = Cluster::new();
        c.server.put_value(NS, released_lease());
        let proxy = HostileProxy::start(&c.server.url(), OnWrite::Redirect(code));
        let err = never_leads(&mut c, &proxy);
        let at = proxy.url.trim_start_matches("http://");
        let shown = format!(
            "redirected to http://***@{at}/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{LEASE}"
        );
        assert!(
            err.message.contains(&format!("server answered {code}"))
                && err.message.contains(&shown),
            "{code}: {}",
            err.message
        );
        assert!(!err.message.contains("L0cS3cret"), "{}", err.message);
        assert_eq!(err.kind, FailureKind::BadAnswer, "{code}");
        assert_eq!(c.holder(), "", "{code}: the stored Lease never changed");
    }
}

#[test]
fn a_created_lease_answered_with_a_redirect_never_leads() {
    let mut c = Cluster::new();
    let proxy = HostileProxy::start(&c.server.url(), OnWrite::Redirect(302));
    let err = never_leads(&mut c, &proxy);
    assert!(
        err.message.contains("server answered 302"),
        "{}",
        err.message
    );
    assert!(c.server.lease_value(NS, LEASE).is_none());
}

#[test]
fn a_read_answered_with_a_redirect_is_an_error_naming_it() {
    // A server that redirects every request somewhere else.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let mut r = BufReader::new(conn.try_clone().unwrap());
            let mut w = conn;
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                if line == "\r\n" {
                    let redirect = format!(
                        "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://{addr}/elsewhere\r\nContent-Length: 0\r\n\r\n"
                    );
                    if w.write_all(redirect.as_bytes()).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let client = Client::new(ClientConfig::new(format!("http://{addr}"))).unwrap();
    let err = client
        .get_lease(NS, LEASE, &Deadline::from_now(Duration::from_secs(5)))
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("server answered 307")
            && text.contains(&format!("redirected to http://{addr}/elsewhere")),
        "{text}"
    );
}

#[test]
fn the_watch_follows_no_redirect_either() {
    logs();
    let mut c = Cluster::new();
    let proxy = HostileProxy::start(&c.server.url(), OnWrite::RedirectWatches);
    let name = "redirected-watch";
    c.add_lock(
        "me",
        LeaseLock::new(proxy.client(), NS, name, "me"),
        lease_elector::ElectorConfig {
            watch: true,
            ..timings()
        },
    );
    let want = format!("watch on lease {NS}/{name}: watch lease {NS}/{name}: server answered 307");
    eventually("the refused watch is logged", || {
        logs()
            .lock()
            .unwrap()
            .iter()
            .any(|(_, l)| l.contains(&want) && l.contains("redirected to http://***@"))
    });
}

#[test]
fn a_release_answered_with_a_redirect_is_not_a_release() {
    let mut c = Cluster::new();
    let proxy = HostileProxy::start(&c.server.url(), OnWrite::Pass);
    let i = c.add_lock(
        "me",
        LeaseLock::new(proxy.client(), NS, LEASE, "me"),
        timings(),
    );
    c.step_until(STEP, STEP * 10, |c| c.leaders() == ["me"]);
    proxy.set(OnWrite::Redirect(302));
    c.settle();
    c.candidates[i].terms.clear(); // the work lets go: the release is tried
    let handle = c.candidates[i].handle.take().unwrap();
    let err = handle.stop().expect_err("the release was redirected");
    assert!(err.to_string().contains("server answered 302"), "{err}");
    assert_eq!(c.holder(), "me", "the stored Lease was never released");
}

fn another_holder(answer: &mut Value, _: &Value) {
    answer["spec"]["holderIdentity"] = "other".into();
}

fn an_old_renew_time(answer: &mut Value, _: &Value) {
    answer["spec"]["renewTime"] = "2020-01-01T00:00:00.000000Z".into();
}

fn the_same_resource_version(answer: &mut Value, sent: &Value) {
    answer["metadata"]["resourceVersion"] = sent["metadata"]["resourceVersion"].clone();
}

fn another_duration(answer: &mut Value, _: &Value) {
    answer["spec"]["leaseDurationSeconds"] = 3600.into();
}

#[test]
fn a_write_whose_answer_is_not_the_lease_written_never_counts() {
    for (forge, says) in [
        (
            another_holder as fn(&mut Value, &Value),
            r#"holder "other", not "me""#,
        ),
        (
            an_old_renew_time,
            "renewTime 2020-01-01T00:00:00.000000Z, not ",
        ),
        (the_same_resource_version, "not newer than"),
        (another_duration, "leaseDurationSeconds 3600, not 15"),
    ] {
        let mut c = Cluster::new();
        c.server.put_value(NS, released_lease());
        let proxy = HostileProxy::start(&c.server.url(), OnWrite::Forge(forge));
        let err = never_leads(&mut c, &proxy);
        assert!(
            err.message.contains("the answer is not the Lease written")
                && err.message.contains(says),
            "{says}: {}",
            err.message
        );
        assert_eq!(err.kind, FailureKind::BadAnswer);
    }
}

#[test]
fn a_create_whose_answer_names_another_holder_never_counts() {
    let mut c = Cluster::new();
    let proxy = HostileProxy::start(&c.server.url(), OnWrite::Forge(another_holder));
    let err = never_leads(&mut c, &proxy);
    // The create landed (the answer alone was forged): later attempts are
    // updates, answered the same way.
    assert_eq!(c.server.requests()[1].method, "POST");
    assert!(
        err.message
            .contains(r#"the answer is not the Lease written (holder "other", not "me")"#),
        "{}",
        err.message
    );
}

#[test]
fn times_are_compared_as_times_not_as_text() {
    // The API server writes MicroTime back in its own form: the same
    // instant with another offset and more digits is the same time.
    fn reworded(answer: &mut Value, _: &Value) {
        for field in ["renewTime", "acquireTime"] {
            let t: MicroTime = answer["spec"][field].as_str().unwrap().parse().unwrap();
            let an_hour_on =
                MicroTime::from_system_time(t.to_system_time() + Duration::from_secs(3600));
            let text = an_hour_on.to_string().replace('Z', "000+01:00");
            answer["spec"][field] = text.into();
        }
    }
    let mut c = Cluster::new();
    let proxy = HostileProxy::start(&c.server.url(), OnWrite::Forge(reworded));
    c.add_lock(
        "me",
        LeaseLock::new(proxy.client(), NS, LEASE, "me"),
        timings(),
    );
    c.step_until(STEP, STEP * 10, |c| c.leaders() == ["me"]);
    // And it keeps renewing.
    c.step(STEP * 3);
    assert_eq!(c.leaders(), ["me"]);
}

const FORGED: &str = "oops\nW0101 lease-elect: LEADING me\n\u{1b}[2J";

#[test]
fn an_error_body_that_forges_a_log_line_is_logged_as_one_escaped_line() {
    logs();
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    server.inject(Fault::raw(500, FORGED.as_bytes().to_vec()).forever());

    // The error itself: one line, no control character.
    let client = Client::new(ClientConfig::new(server.url())).unwrap();
    let err = client
        .get_lease(
            NS,
            "forged-500",
            &Deadline::from_now(Duration::from_secs(5)),
        )
        .unwrap_err();
    let text = err.to_string();
    assert!(!text.contains(char::is_control), "{text:?}");
    assert!(
        text.contains(r"oops\nW0101 lease-elect: LEADING me\n\u{1b}[2J"),
        "{text}"
    );

    // An elector meeting it logs it escaped, on one line.
    let mut c = Cluster::with_server(server);
    let i = c.add_lock(
        "me",
        LeaseLock::new(common::client(&c.server), NS, "forged-500", "me"),
        timings(),
    );
    eventually("the failure is reported", || {
        c.candidates[i]
            .handle()
            .probe()
            .status()
            .last_error
            .is_some()
    });
    let status = c.candidates[i].handle().probe().status();
    let message = status.last_error.unwrap().message;
    assert!(!message.contains(char::is_control), "{message:?}");
    let logged: Vec<String> = logs()
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, l)| l.contains("forged-500") && l.contains("oops"))
        .map(|(_, l)| l.clone())
        .collect();
    assert!(!logged.is_empty(), "the failure is logged");
    for line in &logged {
        assert!(!line.contains(char::is_control), "{line:?}");
        assert!(line.contains(r"LEADING me\n\u{1b}[2J"), "{line}");
    }
}

#[test]
fn a_forged_status_message_and_reason_are_escaped() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409,
        "reason": "Conflict\r\nX", "message": "the object\u{85} has been \u{202e}modified\n\u{1b}]0;pwned\u{7}"
    });
    server.inject(Fault::raw(409, serde_json::to_vec(&body).unwrap()));
    let client = Client::new(ClientConfig::new(server.url())).unwrap();
    let err = client
        .get_lease(NS, LEASE, &Deadline::from_now(Duration::from_secs(5)))
        .unwrap_err();
    let text = err.to_string();
    assert!(
        !text.contains(|c: char| c.is_control() || c == '\u{202e}'),
        "{text:?}"
    );
    assert!(text.contains(r"Conflict\r\nX"), "{text}");
    // The parts stay raw for programs that read them.
    match &err {
        Error::Api { status, .. } => assert_eq!(status.reason, "Conflict\r\nX"),
        other => panic!("{other:?}"),
    }
    server.shutdown();
}
