//! A small blocking HTTP endpoint for probes and scrapers (feature
//! `health`): `/healthz`, `/readyz`, `/leader` and `/metrics` for one or
//! more electors in this process, on a thread of its own, with `std::net`
//! only.
//!
//! | request | answer |
//! |---|---|
//! | `GET /healthz` | `200 ok` when every elector's [`Probe::check`] passes with the server's tolerance, else `500` with one line per failing elector (client-go's `HealthzAdaptor`): point the **liveness** probe here |
//! | `GET /readyz` | the same verdict as `/healthz`: followers are ready (see below) |
//! | `GET /leader` | `200` when this replica leads every lease it runs for, else `503`; the body is a JSON array, one object per elector in the order given: `[{"leading":true,"holder":"pod-a","lease":"ns/name","identity":"pod-a"}]` (`holder` is `null` until a holder is known) |
//! | `GET /metrics` | `200`, [`render_prometheus`] of every elector (`text/plain; version=0.0.4`) |
//! | `HEAD` of any of these | the same status and headers, no body |
//! | another method on these paths | `405` with `Allow: GET, HEAD` |
//! | another path | `404` (the query string is ignored: `/healthz?verbose` is `/healthz`) |
//! | a malformed request line or header, an HTTP/1.1 request without `Host`, a request head over [`MAX_REQUEST_HEAD`] bytes | `400` |
//! | a version other than HTTP/1.0 and HTTP/1.1 | `505` |
//! | more than [`MAX_CONNECTIONS`] connections at once | `503` with `Retry-After: 1`, at once |
//! | no complete request head within [`CONNECTION_TIMEOUT`] | the connection is closed without an answer (as Go's `net/http` and nginx do) |
//!
//! **Why `/readyz` is not "leading".** Readiness gates rollouts: a
//! Deployment counts a pod that is not ready as unavailable, so if only the
//! leader were ready, a rolling update would wait forever for a new pod
//! that cannot lead while an old one holds the lease, and a
//! PodDisruptionBudget would see every follower as down. A follower is a
//! ready standby. To send traffic to the leader only, make `/leader` the
//! readiness probe deliberately (and allow `maxUnavailable: 1`).
//!
//! **Why `/leader` needs every lease.** With one elector it is simply
//! "this replica leads". With several leases in one process, routing to
//! "the leader" only makes sense for the replica that holds all of them;
//! the body says which ones it holds.
//!
//! **Connections.** Every answer carries `Connection: close` and the
//! connection is closed after it: probes and scrapers open one connection
//! per request anyway, and it keeps the server free of keep-alive state.
//! The accepting thread only accepts; each connection is served on a
//! short-lived thread of its own (at most [`MAX_CONNECTIONS`] at once) with
//! one budget of [`CONNECTION_TIMEOUT`] for reading the request, writing the
//! answer and a short lingering close, so a client that connects and sends
//! nothing, or sends a byte a second, delays no one else and holds its
//! thread no longer than that. Beyond the limit the accepting thread
//! answers 503 itself, without waiting for the request.
//!
//! **The elector is never blocked.** Answers read [`Probe`]s only, which
//! take an elector's state lock for a copy and never touch the network; the
//! Kubernetes API is never called from here.
//!
//! # Example
//!
//! ```
//! use lease_elector::health::HealthServer;
//! use lease_elector::testing::TestApiServer;
//! use lease_elector::{Client, ClientConfig, LeaderElector, LeaderEvent, LeaseLock};
//! use std::io::{Read, Write};
//! use std::time::Duration;
//!
//! let api = TestApiServer::start()?;
//! let lock = LeaseLock::new(Client::new(ClientConfig::new(api.url()))?, "default", "op", "pod-a");
//! let (elector, events) = LeaderElector::builder(lock).build()?.spawn()?;
//! while !matches!(events.recv()?, LeaderEvent::StartedLeading { .. }) {}
//!
//! // In a pod: HealthServer::start("0.0.0.0:8080", ...).
//! let health = HealthServer::start("127.0.0.1:0", vec![elector.probe()], Duration::from_secs(20))?;
//! let mut conn = std::net::TcpStream::connect(health.local_addr())?;
//! conn.write_all(b"GET /leader HTTP/1.1\r\nHost: probe\r\n\r\n")?;
//! let mut answer = String::new();
//! conn.read_to_string(&mut answer)?; // the server closes after answering
//! assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
//! assert!(answer.ends_with(r#"[{"leading":true,"holder":"pod-a","lease":"default/op","identity":"pod-a"}]"#), "{answer}");
//!
//! health.stop();
//! elector.stop()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{
    IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use serde_json::Value;

use crate::deadline::Deadline;
use crate::elector::Probe;
use crate::status::render_prometheus;

/// Connections served at once; one more is answered 503 by the accepting
/// thread. Probes and a scraper need a handful.
pub const MAX_CONNECTIONS: usize = 16;

/// Budget of one connection from its accept: the request head must arrive,
/// the answer be written and the client read it within this time.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest request head (request line and headers) read, in bytes.
pub const MAX_REQUEST_HEAD: usize = 8 * 1024;

/// How long a closed connection waits for the client to read the answer
/// (and stop sending), so that unread request bytes do not turn the close
/// into a reset that destroys the answer; drawn from the connection's budget.
const LINGER: Duration = Duration::from_secs(1);

/// How long `stop` waits to connect to its own listener to wake the
/// accepting thread.
const WAKE_TIMEOUT: Duration = Duration::from_secs(1);

/// The health endpoint: a listening socket and the thread serving it.
/// Dropping it (or [`stop`](HealthServer::stop)) stops accepting, cuts off
/// the connections in progress and joins every thread it started.
///
/// See the [module docs](self) for what each path answers.
pub struct HealthServer {
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl fmt::Debug for HealthServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HealthServer")
            .field("addr", &self.addr)
            .field("running", &self.acceptor.is_some())
            .finish()
    }
}

impl HealthServer {
    /// Listen on `addr` (port 0 picks a free port; see
    /// [`local_addr`](HealthServer::local_addr)) and serve `probes` from a
    /// thread named `lease-health/<addr>`.
    ///
    /// `tolerance` is what `/healthz` hands to [`Probe::check`]: how long
    /// past its lease a leader may go without renewing, and how long a
    /// process may keep running after losing its term, before it is
    /// reported unhealthy (client-go's `NewLeaderHealthzAdaptor(timeout)`;
    /// 20 s is a common choice).
    ///
    /// Fails when the address cannot be bound, the thread cannot be
    /// started, or `probes` is empty (`/leader` would then claim this
    /// replica leads).
    pub fn start(
        addr: impl ToSocketAddrs,
        probes: Vec<Probe>,
        tolerance: Duration,
    ) -> io::Result<HealthServer> {
        if probes.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a health endpoint needs at least one elector's probe",
            ));
        }
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let stopping = Arc::new(AtomicBool::new(false));
        let endpoints = Arc::new(Endpoints { probes, tolerance });
        let name = format!("lease-health/{addr}");
        let acceptor = thread::Builder::new().name(name.clone()).spawn({
            let stopping = stopping.clone();
            move || accept_loop(&listener, &endpoints, &stopping, &name)
        })?;
        log::debug!("health endpoint listening on {addr}");
        Ok(HealthServer {
            addr,
            stopping,
            acceptor: Some(acceptor),
        })
    }

    /// The address actually bound (with the port picked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop accepting, close the connections in progress and join every
    /// thread; returns within milliseconds (at most about a second if the
    /// listener cannot be reached from this host, in which case the
    /// accepting thread is left to end at its next connection and a
    /// warning is logged). The same happens on drop.
    pub fn stop(self) {}
}

impl Drop for HealthServer {
    fn drop(&mut self) {
        let Some(acceptor) = self.acceptor.take() else {
            return;
        };
        self.stopping.store(true, Ordering::SeqCst);
        // The acceptor sleeps in accept(): one connection wakes it, and it
        // sees the flag before serving that connection.
        match TcpStream::connect_timeout(&wake_addr(self.addr), WAKE_TIMEOUT) {
            Ok(_) => {
                if acceptor.join().is_err() {
                    log::warn!("health endpoint {}: its thread panicked", self.addr);
                }
            }
            Err(e) => log::warn!(
                "health endpoint {}: cannot connect to it to stop it ({e}); it stops at its next connection",
                self.addr
            ),
        }
    }
}

/// Where to connect to reach a listener bound to `addr` (a wildcard
/// address is reached through loopback).
fn wake_addr(addr: SocketAddr) -> SocketAddr {
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port())
}

/// A connection being served: a handle on its socket (to cut it off on
/// stop) and its thread.
struct Conn {
    socket: TcpStream,
    thread: JoinHandle<()>,
}

fn accept_loop(
    listener: &TcpListener,
    endpoints: &Arc<Endpoints>,
    stopping: &AtomicBool,
    name: &str,
) {
    let mut conns: Vec<Conn> = Vec::new();
    let mut warned = false;
    for stream in listener.incoming() {
        if stopping.load(Ordering::SeqCst) {
            break;
        }
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                // Out of descriptors, typically: say so once, and do not spin.
                if warned {
                    log::debug!("{name}: accept failed: {e}");
                } else {
                    log::warn!("{name}: accept failed: {e} (check the process's open file limit)");
                    warned = true;
                }
                thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let (done, live): (Vec<_>, Vec<_>) = conns.drain(..).partition(|c| c.thread.is_finished());
        conns = live;
        for c in done {
            let _ = c.thread.join();
        }
        if conns.len() >= MAX_CONNECTIONS {
            log::debug!("{name}: {MAX_CONNECTIONS} connections in progress, answering 503");
            refuse_busy(stream);
            continue;
        }
        let socket = match stream.try_clone() {
            Ok(s) => s,
            Err(e) => {
                log::debug!("{name}: cannot clone a connection's socket: {e}");
                continue;
            }
        };
        // The budget counts from the accept.
        let budget = Deadline::from_now(CONNECTION_TIMEOUT);
        let endpoints = endpoints.clone();
        let spawned = thread::Builder::new()
            .name(format!("{name}/conn"))
            .spawn(move || serve(stream, &endpoints, &budget));
        match spawned {
            Ok(thread) => conns.push(Conn { socket, thread }),
            Err(e) => log::warn!("{name}: cannot start a connection thread: {e}"),
        }
    }
    for c in &conns {
        // Unblocks the thread's read or write; it then ends.
        let _ = c.socket.shutdown(Shutdown::Both);
    }
    for c in conns {
        let _ = c.thread.join();
    }
}

/// Answer 503 on the accepting thread without ever blocking it: whatever
/// part of the request already arrived is read (so the close is not a
/// reset), the answer fits in the empty send buffer, and nothing waits.
fn refuse_busy(mut stream: TcpStream) {
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let mut buf = [0u8; 4096];
    let _ = stream.read(&mut buf);
    let answer = Response::text(503, "too many connections\n").header("Retry-After", "1");
    let _ = stream.write_all(&answer.to_bytes(false));
    let _ = stream.shutdown(Shutdown::Write);
}

/// Serve one request on `stream` within `budget`, then close.
fn serve(mut stream: TcpStream, endpoints: &Endpoints, budget: &Deadline) {
    respond(&mut stream, endpoints, budget);
    // Close now: the accepting thread keeps a clone of the socket (to cut
    // it off on stop), so dropping this one would not close it.
    let _ = stream.shutdown(Shutdown::Both);
}

fn respond(stream: &mut TcpStream, endpoints: &Endpoints, budget: &Deadline) {
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "?".to_string(), |a| a.to_string());
    let head = match read_head(stream, budget) {
        Ok(Head::Complete(head)) => head,
        Ok(Head::TooLarge) => {
            log::debug!("health endpoint: request head from {peer} over {MAX_REQUEST_HEAD} bytes");
            let answer = Response::text(
                400,
                format!("bad request: request head larger than {MAX_REQUEST_HEAD} bytes\n"),
            );
            answer_and_close(stream, &answer, false, budget);
            return;
        }
        Ok(Head::Closed) => return,
        Err(e) => {
            // Timed out (the budget is spent) or reset: no one to answer.
            log::debug!("health endpoint: no request from {peer}: {e}");
            return;
        }
    };
    let (answer, head_only) = match parse(&head) {
        Ok(req) => (endpoints.route(&req), req.method == "HEAD"),
        Err(bad) => {
            log::debug!("health endpoint: bad request from {peer}: {}", bad.reason);
            (
                Response::text(bad.status, format!("{}\n", bad.reason)),
                false,
            )
        }
    };
    answer_and_close(stream, &answer, head_only, budget);
}

/// Write `answer`, then close gracefully: send FIN and read what the client
/// still sends until it closes (bounded), so a request body or an
/// oversized head we did not read does not turn our close into a reset
/// that would destroy the answer before the client reads it.
fn answer_and_close(stream: &mut TcpStream, answer: &Response, head_only: bool, budget: &Deadline) {
    let remaining = budget.remaining();
    if remaining.is_zero() || stream.set_write_timeout(Some(remaining)).is_err() {
        return;
    }
    if stream.write_all(&answer.to_bytes(head_only)).is_err() {
        return;
    }
    if stream.shutdown(Shutdown::Write).is_err() {
        return;
    }
    let linger = budget.capped(LINGER);
    let mut buf = [0u8; 4096];
    let mut drained = 0usize;
    while drained < 64 * 1024 {
        let left = linger.remaining();
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => drained += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// What came in before the blank line.
enum Head {
    /// The request head, without the blank line (and without empty lines
    /// before the request line).
    Complete(Vec<u8>),
    /// More than [`MAX_REQUEST_HEAD`] bytes and no end in sight.
    TooLarge,
    /// The client closed before finishing a request.
    Closed,
}

/// Read up to the blank line ending the request head, each read allowed
/// only what is left of `budget`: a client dripping one byte at a time
/// gets no more time than one that sends nothing.
fn read_head(stream: &mut TcpStream, budget: &Deadline) -> io::Result<Head> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        // RFC 9112 §2.2: ignore empty lines before the request line.
        let start = buf.iter().position(|&b| b != b'\r' && b != b'\n');
        if let Some((s, e)) = start.and_then(|s| head_end(&buf[s..]).map(|e| (s, s + e))) {
            if e - s > MAX_REQUEST_HEAD {
                return Ok(Head::TooLarge);
            }
            return Ok(Head::Complete(buf[s..e].to_vec()));
        }
        if buf.len() > MAX_REQUEST_HEAD {
            return Ok(Head::TooLarge);
        }
        let left = budget.remaining();
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "request head not received in time",
            ));
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(Head::Closed),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Where the head in `buf` ends: the index of the line feed that ends the
/// last header line (the blank line follows it). Bare LF line ends are
/// accepted as well as CRLF.
fn head_end(buf: &[u8]) -> Option<usize> {
    (0..buf.len()).find(|&i| {
        buf[i] == b'\n'
            && match buf.get(i + 1) {
                Some(b'\n') => true,
                Some(b'\r') => buf.get(i + 2) == Some(&b'\n'),
                _ => false,
            }
    })
}

/// A parsed request: what routing needs.
#[derive(Debug, PartialEq, Eq)]
struct Request {
    method: String,
    path: String,
}

/// A request answered with an error status.
#[derive(Debug, PartialEq, Eq)]
struct Bad {
    status: u16,
    reason: String,
}

fn bad(reason: impl Into<String>) -> Bad {
    Bad {
        status: 400,
        reason: format!("bad request: {}", reason.into()),
    }
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Parse a request head (RFC 9112): `METHOD SP target SP HTTP/1.x`, then
/// `name: value` lines.
fn parse(head: &[u8]) -> Result<Request, Bad> {
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let line = lines.next().unwrap_or_default();
    let line = std::str::from_utf8(line)
        .ok()
        .filter(|l| l.is_ascii())
        .ok_or_else(|| bad("request line is not ASCII"))?;
    let parts: Vec<&str> = line.split(' ').collect();
    let [method, target, version] = parts[..] else {
        return Err(bad("request line is not METHOD TARGET HTTP/1.1"));
    };
    if !is_token(method) {
        return Err(bad("malformed method"));
    }
    let http11 = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        v if v.len() == 8
            && v.starts_with("HTTP/")
            && v.as_bytes()[5].is_ascii_digit()
            && v.as_bytes()[6] == b'.'
            && v.as_bytes()[7].is_ascii_digit() =>
        {
            return Err(Bad {
                status: 505,
                reason: format!("{v} is not supported: use HTTP/1.1 or HTTP/1.0"),
            });
        }
        _ => return Err(bad("malformed HTTP version")),
    };
    let path = request_path(target).ok_or_else(|| bad("malformed request target"))?;
    let mut hosts = 0;
    for line in lines {
        if line.first().is_some_and(|b| *b == b' ' || *b == b'\t') {
            return Err(bad("folded header line"));
        }
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or_else(|| bad("header line without a colon"))?;
        let name = std::str::from_utf8(&line[..colon])
            .ok()
            .filter(|n| is_token(n))
            .ok_or_else(|| bad("malformed header name"))?;
        if line[colon + 1..]
            .iter()
            .any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f)
        {
            return Err(bad("control character in a header value"));
        }
        if name.eq_ignore_ascii_case("host") {
            hosts += 1;
        }
    }
    // RFC 9112 §3.2: an HTTP/1.1 request has exactly one Host.
    if (http11 && hosts == 0) || hosts > 1 {
        return Err(bad("an HTTP/1.1 request needs exactly one Host header"));
    }
    Ok(Request {
        method: method.to_string(),
        path,
    })
}

/// The path of an origin-form (`/healthz?x`) or absolute-form
/// (`http://host:8080/healthz`) target, without its query.
fn request_path(target: &str) -> Option<String> {
    let lower = target.to_ascii_lowercase();
    let rest = if target.starts_with('/') {
        target
    } else if lower.starts_with("http://") || lower.starts_with("https://") {
        let after_scheme = &target[target.find("://")? + 3..];
        match after_scheme.find(['/', '?']) {
            Some(i) if after_scheme[i..].starts_with('/') => &after_scheme[i..],
            _ => "/",
        }
    } else {
        return None;
    };
    let path = rest.split('?').next().unwrap_or(rest);
    (!path
        .bytes()
        .any(|b| b.is_ascii_control() || b == b' ' || b == b'#'))
    .then(|| path.to_string())
}

/// An answer, written whole with `Connection: close`.
#[derive(Debug)]
struct Response {
    status: u16,
    content_type: &'static str,
    extra: Vec<(&'static str, &'static str)>,
    body: Vec<u8>,
}

impl Response {
    fn text(status: u16, body: impl Into<String>) -> Self {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            extra: Vec::new(),
            body: body.into().into_bytes(),
        }
    }

    fn header(mut self, name: &'static str, value: &'static str) -> Self {
        self.extra.push((name, value));
        self
    }

    fn to_bytes(&self, head_only: bool) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            500 => "Internal Server Error",
            503 => "Service Unavailable",
            505 => "HTTP Version Not Supported",
            _ => "",
        };
        let mut out = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n",
            self.status,
            self.content_type,
            self.body.len()
        );
        for (name, value) in &self.extra {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
        out.push_str("\r\n");
        let mut out = out.into_bytes();
        if !head_only {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

/// What the paths answer, from the probes alone.
struct Endpoints {
    probes: Vec<Probe>,
    tolerance: Duration,
}

impl Endpoints {
    fn route(&self, req: &Request) -> Response {
        let answer: fn(&Self) -> Response = match req.path.as_str() {
            "/healthz" | "/readyz" => Self::healthz,
            "/leader" => Self::leader,
            "/metrics" => Self::metrics,
            _ => return Response::text(404, "not found\n"),
        };
        match req.method.as_str() {
            "GET" | "HEAD" => answer(self),
            _ => Response::text(405, "method not allowed: use GET or HEAD\n")
                .header("Allow", "GET, HEAD"),
        }
    }

    fn healthz(&self) -> Response {
        let failures: String = self
            .probes
            .iter()
            .filter_map(|p| p.check(self.tolerance).err())
            .map(|e| format!("{e}\n"))
            .collect();
        if failures.is_empty() {
            Response::text(200, "ok\n")
        } else {
            Response::text(500, failures)
        }
    }

    fn leader(&self) -> Response {
        let mut all = true;
        let electors: Vec<String> = self
            .probes
            .iter()
            .map(|p| {
                let s = p.status();
                all &= s.leading;
                // Written by hand to keep the documented key order.
                let holder = s.holder.map_or(Value::Null, Value::from);
                format!(
                    r#"{{"leading":{},"holder":{holder},"lease":{},"identity":{}}}"#,
                    s.leading,
                    Value::from(p.describe()),
                    Value::from(s.identity)
                )
            })
            .collect();
        let body = format!("[{}]", electors.join(","));
        Response {
            status: if all { 200 } else { 503 },
            content_type: "application/json",
            extra: Vec::new(),
            body: body.into_bytes(),
        }
    }

    fn metrics(&self) -> Response {
        let statuses: Vec<_> = self.probes.iter().map(Probe::status).collect();
        Response {
            status: 200,
            content_type: "text/plain; version=0.0.4; charset=utf-8",
            extra: Vec::new(),
            body: render_prometheus(&statuses).into_bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path_of(head: &str) -> Result<String, u16> {
        parse(head.as_bytes()).map(|r| r.path).map_err(|b| b.status)
    }

    #[test]
    fn request_lines_and_targets_parse_as_rfc_9112_says() {
        assert_eq!(
            path_of("GET /healthz HTTP/1.1\r\nHost: x"),
            Ok("/healthz".into())
        );
        assert_eq!(
            path_of("GET /healthz?verbose HTTP/1.0"),
            Ok("/healthz".into())
        );
        assert_eq!(
            path_of("GET http://h:8080/metrics?a HTTP/1.1\nHost: h"),
            Ok("/metrics".into())
        );
        assert_eq!(
            path_of("GET http://h:8080 HTTP/1.1\nHost: h"),
            Ok("/".into())
        );
        assert_eq!(path_of("GET /healthz HTTP/2.0\r\nHost: x"), Err(505));
        for bad in [
            "GET /healthz HTTP/1.1", // no Host
            "GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b",
            "GET  /healthz HTTP/1.1\r\nHost: x", // two spaces
            "GET /healthz\r\nHost: x",           // HTTP/0.9
            "GET healthz HTTP/1.1\r\nHost: x",
            "G(T /healthz HTTP/1.1\r\nHost: x",
            "GET /healthz HTTP/1.1\r\nHost: x\r\n folded",
            "GET /healthz HTTP/1.1\r\nHost: x\r\nno colon",
            "GET /healthz HTTP/1.1\r\nHost: x\r\nBad Name: v",
            "GET /healthz HTTP/1.1\r\nHost: x\r\nA: \x01",
            "GET /h\u{e9} HTTP/1.1\r\nHost: x",
            "\u{0}\u{1}garbage",
        ] {
            assert_eq!(path_of(bad), Err(400), "{bad:?}");
        }
    }

    #[test]
    fn the_head_ends_at_the_first_blank_line_with_crlf_or_lf() {
        assert_eq!(head_end(b"GET / HTTP/1.0\r\n\r\nbody"), Some(15));
        assert_eq!(head_end(b"GET / HTTP/1.0\n\n"), Some(14));
        assert_eq!(head_end(b"GET / HTTP/1.0\r\nHost: x\r\n"), None);
    }

    #[test]
    fn head_answers_carry_the_length_of_the_body_they_omit() {
        let r = Response::text(200, "ok\n");
        let full = String::from_utf8(r.to_bytes(false)).unwrap();
        let head = String::from_utf8(r.to_bytes(true)).unwrap();
        assert!(full.ends_with("\r\n\r\nok\n"), "{full}");
        assert!(
            head.ends_with(
                "Content-Length: 3\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
            ),
            "{head}"
        );
    }
}
