//! The test server's adversarial faults, observed byte for byte with plain
//! HTTP/1.1 over std `TcpStream`s: per-candidate matching, hung requests,
//! hostile `Retry-After` values, delayed failures and idle timeouts.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use lease_elector::testing::{Fault, TestApiServer};
use serde_json::Value;

const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases/x";
/// Longest a test waits for something that should happen; only reached on
/// failure.
const WAIT: Duration = Duration::from_secs(2);

/// One parsed answer.
#[derive(Debug)]
struct Answer {
    code: u16,
    /// Header lines as sent (name and value unchanged).
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// A keep-alive client connection.
struct Conn {
    reader: BufReader<TcpStream>,
}

impl Conn {
    fn open(server: &TestApiServer) -> Conn {
        let addr = server.url().trim_start_matches("http://").to_string();
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(WAIT)).unwrap();
        Conn {
            reader: BufReader::new(stream),
        }
    }

    /// Send a request, with `Authorization: Bearer <token>` when given and
    /// a small JSON body for PUT.
    fn send(&mut self, method: &str, token: Option<&str>) {
        let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
        let body = if method == "PUT" { "{}" } else { "" };
        let req = format!(
            "{method} {LEASE} HTTP/1.1\r\nHost: test\r\n{auth}\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        self.reader.get_mut().write_all(req.as_bytes()).unwrap();
    }

    /// Read one Content-Length framed answer.
    fn answer(&mut self) -> Answer {
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        let code = line
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {line:?}"));
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            self.reader.read_line(&mut h).unwrap();
            let h = h.strip_suffix("\r\n").unwrap();
            if h.is_empty() {
                break;
            }
            let (name, value) = h.split_once(": ").unwrap();
            headers.push((name.to_string(), value.to_string()));
        }
        let len: usize = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .map(|(_, v)| v.parse().unwrap())
            .unwrap();
        let mut body = vec![0; len];
        self.reader.read_exact(&mut body).unwrap();
        Answer {
            code,
            headers,
            body,
        }
    }

    fn call(&mut self, method: &str, token: Option<&str>) -> Answer {
        self.send(method, token);
        self.answer()
    }

    /// Everything the server sends until it closes the connection.
    fn rest(&mut self) -> Vec<u8> {
        let mut rest = Vec::new();
        self.reader.read_to_end(&mut rest).unwrap();
        rest
    }

    /// Has the server neither answered nor closed yet?
    fn silent(&mut self) -> bool {
        let stream = self.reader.get_ref();
        stream.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 1];
        let silent = match self.reader.read(&mut buf) {
            Err(e) => e.kind() == io::ErrorKind::WouldBlock,
            Ok(_) => false,
        };
        self.reader.get_ref().set_nonblocking(false).unwrap();
        silent
    }
}

/// Poll `cond` until it holds; panics after [`WAIT`].
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_bearer_fault_fires_only_for_the_candidate_sending_that_token() {
    let without_auth = TestApiServer::start().unwrap();
    let with_auth = TestApiServer::builder()
        .tokens(&["pod-a", "pod-b"])
        .build()
        .unwrap();
    for server in [&without_auth, &with_auth] {
        server.inject(Fault::status(500).bearer("pod-b").forever());
        let mut a = Conn::open(server);
        let mut b = Conn::open(server);
        for _ in 0..2 {
            assert_eq!(a.call("GET", Some("pod-a")).code, 404, "{server:?}");
            let failed = b.call("GET", Some("pod-b"));
            assert_eq!(failed.code, 500, "{server:?}");
            assert_eq!(failed.json()["reason"], "InternalError");
        }
        assert_eq!(server.stats().faults_fired, 2);
    }
    // Without auth, a request with no token at all is not pod-b either.
    assert_eq!(Conn::open(&without_auth).call("GET", None).code, 404);
}

#[test]
fn a_hung_request_holds_while_other_connections_are_served_and_ends_on_clear_faults() {
    let server = TestApiServer::start().unwrap();
    server.inject(Fault::hang().bearer("pod-a"));
    let mut hung = Conn::open(&server);
    hung.send("GET", Some("pod-a"));
    wait_until("the hung request is read", || {
        server.stats().faults_fired == 1
    });

    let started = Instant::now();
    let mut other = Conn::open(&server);
    assert_eq!(other.call("GET", Some("pod-a")).code, 404);
    assert_eq!(other.call("GET", Some("pod-b")).code, 404);
    assert!(started.elapsed() < Duration::from_millis(500));
    assert!(hung.silent(), "the hung request got an answer");

    server.clear_faults();
    assert_eq!(hung.rest(), b"", "closed without an answer");
    wait_until("the hung request is logged", || {
        server.requests().iter().any(|r| r.status == 0)
    });
}

#[test]
fn a_hung_request_ends_when_the_server_shuts_down() {
    let server = TestApiServer::start().unwrap();
    server.inject(Fault::hang());
    let mut hung = Conn::open(&server);
    hung.send("PUT", None);
    wait_until("the hung request is read", || {
        server.stats().faults_fired == 1
    });
    let started = Instant::now();
    server.shutdown();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(hung.rest(), b"");
}

#[test]
fn a_hung_request_ends_when_its_client_gives_up() {
    let server = TestApiServer::start().unwrap();
    server.inject(Fault::hang().forever());
    let mut hung = Conn::open(&server);
    hung.send("GET", None);
    wait_until("the hung request is read", || {
        server.stats().faults_fired == 1
    });
    drop(hung);
    // The server thread notices, logs the request unanswered and ends
    // while the rule is still in force.
    wait_until("the abandoned request is logged", || {
        server.requests().iter().any(|r| r.status == 0)
    });
}

#[test]
fn retry_after_sends_any_value_verbatim_with_a_status_body() {
    let server = TestApiServer::start().unwrap();
    let values = [
        "18446744073709551615",
        "99999999999999999999",
        "-1",
        "soon",
        "0",
    ];
    let mut conn = Conn::open(&server);
    for code in [429, 503] {
        for value in values {
            server.inject(Fault::retry_after(code, value));
            let a = conn.call("GET", None);
            assert_eq!(a.code, code);
            assert_eq!(a.header("retry-after"), [value], "{:?}", a.headers);
            let status = a.json();
            assert_eq!(status["kind"], "Status");
            assert_eq!(status["code"], code);
            assert!(status["details"].get("retryAfterSeconds").is_none());
        }
    }
    server.inject(Fault::retry_after(429, "7"));
    let a = conn.call("GET", None);
    assert_eq!(a.header("Retry-After"), ["7"]);
    assert_eq!(a.json()["reason"], "TooManyRequests");
    assert_eq!(a.json()["details"]["retryAfterSeconds"], 7);
}

#[test]
fn latency_then_status_fails_late_without_delaying_another_connection() {
    let delay = Duration::from_millis(600);
    let server = TestApiServer::start().unwrap();
    server.inject(Fault::latency(delay).method("PUT"));
    server.inject(Fault::status(500).method("PUT"));

    let started = Instant::now();
    let mut slow = Conn::open(&server);
    slow.send("PUT", None);
    wait_until("the slow request is read", || {
        server.stats().faults_fired == 2
    });

    let mut fast = Conn::open(&server);
    assert_eq!(fast.call("GET", None).code, 404);
    assert!(
        started.elapsed() < delay,
        "the GET waited for the other connection's latency: {:?}",
        started.elapsed()
    );

    assert_eq!(slow.answer().code, 500);
    assert!(started.elapsed() >= delay);
}

#[test]
fn an_idle_keep_alive_connection_is_closed_with_a_fin_and_counted() {
    let idle = Duration::from_millis(150);
    let server = TestApiServer::builder().idle_timeout(idle).build().unwrap();
    let mut conn = Conn::open(&server);
    // Requests within the timeout keep the connection.
    for _ in 0..3 {
        assert_eq!(conn.call("GET", None).code, 404);
        std::thread::sleep(idle / 3);
    }
    let answered = Instant::now();
    assert_eq!(conn.call("GET", None).code, 404);
    assert_eq!(conn.rest(), b"", "EOF without a byte between requests");
    let waited = answered.elapsed();
    assert!(waited >= idle / 2, "closed early: {waited:?}");
    assert!(waited < WAIT);

    let stats = server.stats();
    assert_eq!((stats.connections, stats.requests), (1, 4));
    assert_eq!(Conn::open(&server).call("GET", None).code, 404);
    assert_eq!(server.stats().connections, 2);
}

#[test]
fn without_an_idle_timeout_an_idle_connection_stays_open() {
    let server = TestApiServer::start().unwrap();
    let mut conn = Conn::open(&server);
    assert_eq!(conn.call("GET", None).code, 404);
    std::thread::sleep(Duration::from_millis(200));
    assert!(conn.silent(), "the server closed an idle connection");
    assert_eq!(conn.call("GET", None).code, 404);
    assert_eq!(server.stats().connections, 1);
}
