//! A small blocking HTTP endpoint for probes and scrapers (feature
//! `health`): `/healthz`, `/readyz`, `/leader` and `/metrics` for one or
//! more electors in this process, on a thread of its own, with `std::net`
//! only.
//!
//! | request | answer |
//! |---|---|
//! | `GET /healthz` | `200 ok` when every elector's [`Probe::check`] passes with the server's tolerance, else `500` with one line per failing elector (client-go's `HealthzAdaptor`): point the **liveness** probe here |
//! | `GET /readyz` | `200 ok` when every elector passes [`Probe::check`] and [`Probe::check_ready`] with the server's tolerance, else `503` with one line per failing elector: not ready when a candidate, leader or follower, has had no successful request to the API server for longer than the tolerance, or its last attempt was refused 403 Forbidden (beyond client-go); followers are ready (see below): point the **readiness** probe here |
//! | `GET /leader` | `200` when this replica leads every lease it runs for, else `503`; the body is a JSON array, one object per elector in the order given: `[{"leading":true,"holder":"pod-a","lease":"ns/name","identity":"pod-a"}]` (`holder` is `null` until a holder is known) |
//! | `GET /metrics` | `200`, [`render_prometheus`] of every elector (`text/plain; version=0.0.4`) |
//! | `HEAD` of any of these | the same status and headers, no body |
//! | another method on these paths | `405` with `Allow: GET, HEAD` |
//! | another path | `404` (the query string is ignored: `/healthz?verbose` is `/healthz`) |
//! | a malformed request line or header, an HTTP/1.1 request without `Host` | `400` |
//! | a request head over [`MAX_REQUEST_HEAD`] bytes | `431` |
//! | a version other than HTTP/1.0 and HTTP/1.1 | `505` |
//! | no complete request head within [`CONNECTION_TIMEOUT`] of the accept | the connection is closed without an answer (as Go's `net/http` and nginx do) |
//! | a new connection over [`MAX_CONNECTIONS_PER_PEER`] from one address, or over [`MAX_CONNECTIONS`] in all | the oldest connection in the way that has not sent a complete request head is closed without an answer, and the new one is served; `503` with `Retry-After: 1`, at once, only when every connection in the way is being answered |
//!
//! **Why `/healthz` keeps client-go's meaning.** A liveness failure
//! restarts the container, which does not mend broken RBAC or a cut-off
//! API server: client-go's `HealthzAdaptor` stays green for a follower in
//! that state, and so does `/healthz`. `/readyz` is where it shows: the
//! pod goes unready (a rollout stops, `kubectl get pods` says `0/1`, an
//! alert on unready pods fires) without a restart loop.
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
//! short-lived thread of its own with one budget of [`CONNECTION_TIMEOUT`]
//! for reading the request, writing the answer and a short lingering close,
//! so a client that connects and sends nothing, or sends a byte a second,
//! delays no one else and holds its thread no longer than that.
//!
//! **Idle and slow connections cannot hold the probes off.** At most
//! [`MAX_CONNECTIONS`] connections are served at once, at most
//! [`MAX_CONNECTIONS_PER_PEER`] of them from one address. A new connection
//! that would go over either limit does not wait and is not refused: the
//! oldest connection in its way that is still waiting for its request head
//! (idle, or dripping a slow-loris head) is closed to make room, and a peer
//! over its share only ever closes its own. So a peer holding 64 idle
//! sockets open keeps 8 of them, and the kubelet's next probe is answered
//! at once. The limits, the head parsing and the time-out come from the
//! small HTTP/1.1 core this endpoint shares with the test API server.
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
use std::io::{self, BufReader, Read, Write};
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
use crate::http_server::{self, Admission, Connections, Incoming, Limits, Phase};
use crate::status::render_prometheus;
use crate::text;

/// Connections served at once. Probes and a scraper need a handful; a new
/// connection beyond this closes the oldest one still waiting for its
/// request (see the [module docs](self)).
pub const MAX_CONNECTIONS: usize = 16;

/// Connections served at once from one peer address (an IPv4-mapped IPv6
/// address counts as its IPv4 address): a flood from one address never
/// closes another address's connections.
pub const MAX_CONNECTIONS_PER_PEER: usize = 8;

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
    /// 20 s is a common choice). `/readyz` also hands it to
    /// [`Probe::check_ready`]: how long a candidate may go without a
    /// successful request before it is reported unready.
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

fn accept_loop(
    listener: &TcpListener,
    endpoints: &Arc<Endpoints>,
    stopping: &AtomicBool,
    name: &str,
) {
    let mut conns = Connections::new(Limits {
        total: MAX_CONNECTIONS,
        per_peer: MAX_CONNECTIONS_PER_PEER,
    });
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
        let peer = stream
            .peer_addr()
            .map_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED), |a| a.ip());
        if conns.admit(peer) == Admission::Busy {
            log::debug!("{name}: every connection in the way of {peer} is busy, answering 503");
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
        let phase = Phase::default();
        let spawned = thread::Builder::new().name(format!("{name}/conn")).spawn({
            let phase = phase.clone();
            move || serve(stream, &endpoints, &budget, &phase)
        });
        match spawned {
            Ok(thread) => conns.insert(peer, socket, thread, phase),
            Err(e) => log::warn!("{name}: cannot start a connection thread: {e}"),
        }
    }
    conns.close_all();
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
fn serve(stream: TcpStream, endpoints: &Endpoints, budget: &Deadline, phase: &Phase) {
    let mut conn = BufReader::new(stream);
    respond(&mut conn, endpoints, budget, phase);
    // Close now: the accepting thread keeps a clone of the socket (to cut
    // it off on stop), so dropping this one would not close it.
    let _ = conn.get_ref().shutdown(Shutdown::Both);
}

fn respond(
    conn: &mut BufReader<TcpStream>,
    endpoints: &Endpoints,
    budget: &Deadline,
    phase: &Phase,
) {
    let peer = conn
        .get_ref()
        .peer_addr()
        .map_or_else(|_| "?".to_string(), |a| a.to_string());
    let (answer, head_only) = match http_server::read_head(conn, MAX_REQUEST_HEAD, budget) {
        Ok(Incoming::Head(head)) => {
            phase.busy();
            (endpoints.route(&head), head.method == "HEAD")
        }
        Ok(Incoming::Bad(bad)) => {
            phase.busy();
            log::debug!("health endpoint: bad request from {peer}: {}", bad.reason);
            let phrase = http_server::reason_phrase(bad.status).to_ascii_lowercase();
            let body = format!("{phrase}: {}\n", bad.reason);
            (Response::text(bad.status, body), false)
        }
        Ok(Incoming::Closed) => return,
        Err(e) => {
            // Timed out (the budget is spent), reset, or closed to make
            // room: no one to answer.
            log::debug!("health endpoint: no request from {peer}: {e}");
            return;
        }
    };
    answer_and_close(conn.get_mut(), &answer, head_only, budget, phase);
}

/// Write `answer`, then close gracefully: send FIN and read what the client
/// still sends until it closes (bounded), so a request body or an
/// oversized head we did not read does not turn our close into a reset
/// that would destroy the answer before the client reads it.
fn answer_and_close(
    stream: &mut TcpStream,
    answer: &Response,
    head_only: bool,
    budget: &Deadline,
    phase: &Phase,
) {
    let remaining = budget.remaining();
    if remaining.is_zero() || stream.set_write_timeout(Some(remaining)).is_err() {
        return;
    }
    if stream.write_all(&answer.to_bytes(head_only)).is_err() {
        return;
    }
    phase.answered();
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
        let reason = http_server::reason_phrase(self.status);
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
    fn route(&self, req: &http_server::Head) -> Response {
        let answer: fn(&Self) -> Response = match req.path() {
            "/healthz" => Self::healthz,
            "/readyz" => Self::readyz,
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
        self.verdict(500, |p| p.check(self.tolerance))
    }

    fn readyz(&self) -> Response {
        self.verdict(503, |p| {
            p.check(self.tolerance)
                .and_then(|()| p.check_ready(self.tolerance))
        })
    }

    /// `200 ok`, or `failed` with one line per elector that fails `check`
    /// (escaped: the reasons carry the server's words).
    fn verdict(&self, failed: u16, check: impl Fn(&Probe) -> crate::error::Result<()>) -> Response {
        let failures: String = self
            .probes
            .iter()
            .filter_map(|p| check(p).err())
            .map(|e| format!("{}\n", text::escape(&e.to_string())))
            .collect();
        if failures.is_empty() {
            Response::text(200, "ok\n")
        } else {
            Response::text(failed, failures)
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
