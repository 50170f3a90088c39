//! Threads: the acceptor, one thread per connection, and the shared state
//! they work on. Shutdown wakes and joins all of them.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rustls::{ServerConfig, ServerConnection, StreamOwned};

use super::api;
use super::faults::{self, Action, Fault, Probe};
use super::hang;
use super::http::{self, Incoming, Request, Response};
use super::record::{Recording, Skip};
use super::resource::Route;
use super::stats::{Kind, Recorder, RequestLog};
use super::status::{self, Target};
use super::store::Store;
use super::watch;
use crate::clock::SystemClock;
use crate::deadline::Deadline;
use crate::http_server::{Admission, Connections, Limits, Phase, Transport};

/// Everything requests read and write, under one lock.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) store: Store,
    pub(crate) faults: Vec<Fault>,
    pub(crate) recorder: Recorder,
    pub(crate) tokens: Vec<String>,
    /// The tokens of the candidates `client_config` made: accepted too.
    pub(crate) candidates: Vec<String>,
    pub(crate) forbidden: Vec<String>,
    /// The id the next queued fault rule gets.
    pub(crate) next_rule: u64,
    pub(crate) outage: bool,
    /// How many times the fault rules were cleared: a hung request waits
    /// for it to change.
    pub(crate) faults_cleared: u64,
    /// What was served, when `LEASE_ELECTOR_RECORD_DIR` is set.
    pub(crate) recording: Option<Recording>,
}

/// State shared by the handle and every server thread.
pub(crate) struct Shared {
    state: Mutex<State>,
    /// Signalled on every store change, outage change and shutdown.
    changed: Condvar,
    stopping: AtomicBool,
    tls: Option<Arc<ServerConfig>>,
    /// At most `Timeouts::max_connections`, the silent ones closed first.
    pub(crate) conns: Mutex<Connections>,
    next_conn: AtomicU64,
    timeouts: Timeouts,
}

/// How long a connection may keep a thread without a request, and how
/// many may.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// Close a keep-alive connection that waits this long for its next
    /// request.
    pub(crate) idle: Duration,
    /// A request head must be complete this long after its first byte,
    /// and a connection's first one this long after the accept.
    pub(crate) head: Duration,
    /// Connections served at once: a thread each. One more closes the
    /// oldest that has not sent a complete head (then the oldest whose
    /// answer is written); when every one is busy, the new one is closed.
    pub(crate) max_connections: usize,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            idle: http::IDLE_TIMEOUT,
            head: http::HEAD_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
        }
    }
}

/// A connection's thread costs about 28 kB of memory: 512 is 14 MB, and
/// more than every test and fake cluster here opens (a candidate keeps
/// two, kubectl one per command).
pub(crate) const MAX_CONNECTIONS: usize = 512;

impl Shared {
    pub(crate) fn new(state: State, tls: Option<Arc<ServerConfig>>, timeouts: Timeouts) -> Self {
        Shared {
            state: Mutex::new(state),
            changed: Condvar::new(),
            stopping: AtomicBool::new(false),
            tls,
            conns: Mutex::new(Connections::new(limits(&timeouts))),
            next_conn: AtomicU64::new(0),
            timeouts,
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // Every update of State is a single step: a panicking holder cannot
        // leave it half-written in a way later requests would trip over.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wake watchers and sleepers; call after changing `State`.
    pub(crate) fn notify(&self) {
        self.changed.notify_all();
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Wait on the change signal for at most `d`.
    pub(crate) fn wait<'a>(
        &self,
        guard: MutexGuard<'a, State>,
        d: Duration,
    ) -> MutexGuard<'a, State> {
        self.changed
            .wait_timeout(guard, d)
            .unwrap_or_else(PoisonError::into_inner)
            .0
    }

    /// Sleep `d`, returning early (false) when the server stops.
    fn sleep(&self, d: Duration) -> bool {
        let deadline = crate::clock::add_saturating(Instant::now(), d);
        let mut st = self.lock();
        loop {
            if self.stopping() {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            st = self.wait(st, deadline - now);
        }
    }
}

/// One peer (loopback) is every peer of a test server: the total is the
/// only bound.
fn limits(t: &Timeouts) -> Limits {
    Limits {
        total: t.max_connections.max(1),
        per_peer: usize::MAX,
    }
}

/// Start the acceptor thread on `listener`.
pub(crate) fn spawn_acceptor(
    shared: Arc<Shared>,
    listener: TcpListener,
) -> io::Result<JoinHandle<()>> {
    thread::Builder::new()
        .name("test-apiserver/acceptor".into())
        .spawn(move || accept_loop(&shared, &listener))
}

fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener) {
    for stream in listener.incoming() {
        if shared.stopping() {
            break;
        }
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                log::debug!("test-apiserver: accept failed: {e}");
                // Do not spin on a persistent error (e.g. out of descriptors).
                shared.sleep(Duration::from_millis(10));
                continue;
            }
        };
        let outage = {
            let mut st = shared.lock();
            st.recorder.accepted();
            st.outage
        };
        if outage {
            log::debug!("test-apiserver: outage, closing new connection");
            drop(stream);
            continue;
        }
        let socket = match stream.try_clone() {
            Ok(s) => s,
            Err(e) => {
                log::debug!("test-apiserver: cannot clone socket: {e}");
                continue;
            }
        };
        let peer = socket
            .peer_addr()
            .map_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED), |a| a.ip());
        let mut conns = shared.conns.lock().unwrap_or_else(PoisonError::into_inner);
        // Joins the connections that ended, and makes room within the cap
        // before a thread is started.
        if conns.admit(peer) == Admission::Busy {
            log::warn!(
                "test-apiserver: {} connections, each serving a request: closing a new one",
                shared.timeouts.max_connections
            );
            drop(stream);
            continue;
        }
        let accepted = Instant::now();
        let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
        let sh = shared.clone();
        let phase = Phase::default();
        let spawned = thread::Builder::new()
            .name(format!("test-apiserver/conn-{id}"))
            .spawn({
                let phase = phase.clone();
                move || serve_connection(&sh, stream, &phase, accepted)
            });
        match spawned {
            Ok(thread) => conns.insert(peer, socket, thread, phase),
            Err(e) => log::warn!("test-apiserver: cannot start connection thread: {e}"),
        }
    }
}

/// Stop accepting, wake every thread and join them all.
pub(crate) fn stop(shared: &Shared, addr: SocketAddr, acceptor: JoinHandle<()>) {
    {
        let _st = shared.lock();
        shared.stopping.store(true, Ordering::SeqCst);
        shared.notify();
    }
    // The acceptor is blocked in accept(): one connection wakes it.
    if let Err(e) = TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
        log::warn!("test-apiserver: cannot wake the acceptor: {e}");
    }
    let _ = acceptor.join();
    // Unblocks reads and writes; the threads see `stopping` and return.
    let mut conns = std::mem::replace(
        &mut *shared.conns.lock().unwrap_or_else(PoisonError::into_inner),
        Connections::new(limits(&shared.timeouts)),
    );
    conns.close_all();
}

/// A connection, plain or TLS.
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ServerConnection, TcpStream>>),
}

impl Stream {
    fn socket(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => &s.sock,
        }
    }

    /// The peer authenticated with a (verified) client certificate.
    fn has_client_cert(&self) -> bool {
        match self {
            Stream::Plain(_) => false,
            Stream::Tls(s) => s.conn.peer_certificates().is_some_and(|c| !c.is_empty()),
        }
    }

    /// Close now: the acceptor keeps a clone of the socket (for shutdown),
    /// so dropping this one would not close the connection.
    fn close(&mut self) {
        if let Stream::Tls(s) = self {
            s.conn.send_close_notify();
            let _ = s.flush();
        }
        let _ = self.socket().shutdown(Shutdown::Both);
    }

    /// Without blocking: has the peer closed the connection?
    pub(crate) fn peer_gone(&mut self) -> bool {
        if self.socket().set_nonblocking(true).is_err() {
            return true;
        }
        let mut buf = [0u8; 512];
        // Read through TLS so a close_notify counts as the end.
        let gone = match self.read(&mut buf) {
            Ok(0) => true,
            Ok(_) => false, // nothing is expected here; ignore it
            Err(e) => e.kind() != io::ErrorKind::WouldBlock,
        };
        gone || self.socket().set_nonblocking(false).is_err()
    }
}

impl Transport for Stream {
    fn tcp(&self) -> &TcpStream {
        self.socket()
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// What to do with the connection after a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    KeepAlive,
    Close,
}

fn serve_connection(shared: &Arc<Shared>, socket: TcpStream, phase: &Phase, accepted: Instant) {
    let stream = match &shared.tls {
        None => Stream::Plain(socket),
        Some(cfg) => match ServerConnection::new(cfg.clone()) {
            Ok(conn) => Stream::Tls(Box::new(StreamOwned::new(conn, socket))),
            Err(e) => {
                log::debug!("test-apiserver: TLS setup failed: {e}");
                return;
            }
        },
    };
    let mut conn = BufReader::new(stream);
    let mut handshake_counted = false;
    let timeouts = shared.timeouts;
    let mut first = true;
    while !shared.stopping() {
        phase.waiting();
        // The first request's head is due a head time-out after the
        // accept, the TLS handshake included; a later one's, after its
        // first byte. The first byte may take up to the idle time-out
        // (counted from the accept, or from the last answer) to come.
        let head_due = crate::clock::add_saturating(accepted, timeouts.head);
        let wait = if first {
            head_due
                .saturating_duration_since(Instant::now())
                .min(timeouts.idle)
        } else {
            timeouts.idle
        };
        if !next_request(&mut conn, wait) {
            break;
        }
        let deadline = if first {
            Deadline::at(Arc::new(SystemClock), head_due)
        } else {
            Deadline::from_now(timeouts.head)
        };
        first = false;
        let incoming = match http::read_request(&mut conn, &deadline) {
            Ok(i) => i,
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                // A malformed chunked body: answer it, the framing is lost.
                let resp = status::bad_request(&format!("malformed request body: {e}"));
                let _ = http::send(conn.get_mut(), &http::encode_response(&resp, true));
                break;
            }
            Err(e) => {
                log::debug!("test-apiserver: connection ended: {e}");
                break;
            }
        };
        phase.busy();
        if !handshake_counted && matches!(incoming, Incoming::Request(_)) {
            handshake_counted = true;
            if let Stream::Tls(tls) = conn.get_ref() {
                let resumed = tls.conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
                let stats = &mut shared.lock().recorder.stats;
                if resumed {
                    stats.tls_resumed_handshakes += 1;
                } else {
                    stats.tls_full_handshakes += 1;
                }
            }
        }
        let next = match incoming {
            Incoming::Closed => break,
            Incoming::Request(req) => handle(shared, &mut conn, req),
            Incoming::Bad {
                status: code,
                message,
                method,
                target,
                bytes_in,
            } => {
                let resp = match code {
                    413 => status::too_large(),
                    400 => status::bad_request(&message),
                    _ => status::failure(code, "", &message, serde_json::json!({})),
                };
                shared.lock().recorder.start(Kind::Other, bytes_in);
                let _ = answer(
                    shared,
                    conn.get_mut(),
                    &method,
                    &target,
                    bytes_in,
                    &resp,
                    true,
                );
                Next::Close
            }
        };
        if next == Next::Close {
            break;
        }
    }
    conn.get_mut().close();
}

/// Wait for the first byte of the next request, at most `idle`; false
/// when none came (or the connection failed), and the caller closes it.
/// The wait is bounded by `idle` alone; the head, once started, by its own
/// deadline (as kube-apiserver's `IdleTimeout` and `ReadHeaderTimeout`);
/// the body and the answer are not timed.
fn next_request(conn: &mut BufReader<Stream>, idle: Duration) -> bool {
    if !conn.buffer().is_empty() {
        return true; // a pipelined request is already here
    }
    if idle.is_zero() {
        log::debug!("test-apiserver: closing a connection that sent no request in time");
        return false;
    }
    if conn
        .get_ref()
        .socket()
        .set_read_timeout(Some(idle))
        .is_err()
    {
        return false;
    }
    loop {
        match conn.fill_buf() {
            // Bytes, or the end of the stream, which read_request reports.
            Ok(_) => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) {
                    log::debug!("test-apiserver: closing a connection idle for {idle:?}");
                } else {
                    log::debug!("test-apiserver: connection ended: {e}");
                }
                return false;
            }
        }
    }
}

pub(crate) fn finish(
    shared: &Shared,
    method: &str,
    target: &str,
    status: u16,
    bytes_in: u64,
    bytes_out: u64,
) {
    log::debug!("test-apiserver: {method} {target} -> {status}");
    shared.lock().recorder.finish(RequestLog {
        method: method.to_string(),
        path: target.to_string(),
        status,
        bytes_in,
        bytes_out,
    });
}

/// `Some(answer)` when the request must not be served: 401 or 403.
fn authenticate(
    st: &State,
    req: &Request,
    stream: &Stream,
    target: Option<&Target>,
) -> Option<Response> {
    if stream.has_client_cert() {
        return None;
    }
    let token = req
        .header("authorization")
        .and_then(|h| {
            h.strip_prefix("Bearer ")
                .or_else(|| h.strip_prefix("bearer "))
        })
        .map(str::trim);
    if let Some(t) = token {
        if st.forbidden.iter().any(|f| f == t) {
            return Some(match target {
                Some(target) => status::forbidden(target),
                None => status::forbidden_path(&req.method, &req.target),
            });
        }
    }
    let known = |t: &str| st.tokens.iter().chain(&st.candidates).any(|k| k == t);
    if st.tokens.is_empty() || token.is_some_and(known) {
        None
    } else {
        Some(status::unauthorized())
    }
}

/// Serve one request: outage, auth, faults, then the endpoint.
fn handle(shared: &Arc<Shared>, conn: &mut BufReader<Stream>, req: Request) -> Next {
    let route = Route::of(&req.segments);
    let (kind, target) = api::classify(&route, &req);
    let keep = if req.keep_alive {
        Next::KeepAlive
    } else {
        Next::Close
    };
    let dropped = |shared: &Shared| {
        if let Some(r) = shared.lock().recording.as_mut() {
            r.dropped(&req);
        }
        finish(shared, &req.method, &req.target, 0, req.bytes_in, 0);
        Next::Close
    };

    let (decision, cleared) = {
        let mut st = shared.lock();
        st.recorder.start(kind, req.bytes_in);
        if st.outage {
            drop(st);
            return dropped(shared);
        }
        if let Some(resp) = authenticate(&st, &req, conn.get_ref(), target.as_ref()) {
            if let Some(r) = st.recording.as_mut() {
                r.exchange(&req, &resp, Some(Skip::Auth));
            }
            drop(st);
            return respond(shared, conn, &req, &resp, keep);
        }
        let probe = Probe {
            method: &req.method,
            target: &req.target,
            headers: &req.headers,
        };
        let d = faults::decide(&mut st.faults, &probe);
        st.recorder.stats.faults_fired += d.fired;
        // Read with the decision: a clear_faults racing with the latency
        // below must still release a hang.
        (d, st.faults_cleared)
    };
    if !decision.delay.is_zero() && !shared.sleep(decision.delay) {
        return dropped(shared);
    }
    if decision.delay > Duration::ZERO && shared.lock().outage {
        return dropped(shared);
    }
    let injected = |resp: Response| {
        if let Some(r) = shared.lock().recording.as_mut() {
            r.exchange(&req, &resp, Some(Skip::Fault));
        }
        resp
    };
    let resp = match decision.action {
        Some(Action::Drop) => return dropped(shared),
        Some(Action::Hang) => {
            hang::hold(shared, conn, cleared, decision.forever_rule);
            return dropped(shared);
        }
        Some(Action::RetryAfter(code, value)) => {
            injected(status::injected_retry_after(code, target.as_ref(), &value))
        }
        Some(Action::Status(code)) => injected(status::injected(code, target.as_ref())),
        Some(Action::Raw(code, body)) => injected(Response::json(code, body)),
        Some(Action::Latency(_)) | None => {
            if let Route::Collection { api, ns } = &route {
                if req.method == "GET" && api::is_watch(&req) {
                    return watch::serve(shared, conn, &req, *api, ns, keep);
                }
            }
            let mut st = shared.lock();
            let before = st.store.rv();
            let resp = api::handle(&mut st.store, &route, &req);
            if let Some(r) = st.recording.as_mut() {
                r.exchange(&req, &resp, None);
            }
            if st.store.rv() != before {
                shared.notify();
            }
            resp
        }
    };
    respond(shared, conn, &req, &resp, keep)
}

fn respond(
    shared: &Shared,
    conn: &mut BufReader<Stream>,
    req: &Request,
    resp: &Response,
    keep: Next,
) -> Next {
    let close = keep == Next::Close;
    match answer(
        shared,
        conn.get_mut(),
        &req.method,
        &req.target,
        req.bytes_in,
        resp,
        close,
    ) {
        Ok(()) => keep,
        Err(e) => {
            log::debug!("test-apiserver: writing the response failed: {e}");
            Next::Close
        }
    }
}

/// Log a request, then send its answer: a client that has an answer always
/// finds its request in [`TestApiServer::requests`](super::TestApiServer::requests).
pub(crate) fn answer(
    shared: &Shared,
    stream: &mut Stream,
    method: &str,
    target: &str,
    bytes_in: u64,
    resp: &Response,
    close: bool,
) -> io::Result<()> {
    let bytes = http::encode_response(resp, close);
    finish(
        shared,
        method,
        target,
        resp.status,
        bytes_in,
        bytes.len() as u64,
    );
    http::send(stream, &bytes)
}

#[cfg(test)]
mod tests {
    use super::super::TestApiServer;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    fn connect(server: &TestApiServer) -> TcpStream {
        let addr = server.url().trim_start_matches("http://").to_string();
        let conn = TcpStream::connect(addr).unwrap();
        // Only a bound for a failing test: a closed connection reads 0 at once.
        conn.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        conn
    }

    /// The server closed `conn` (a read sees the end, not its own time-out).
    fn closed_by_server(conn: &mut TcpStream) -> bool {
        match conn.read(&mut [0u8; 256]) {
            Ok(n) => n == 0,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }

    /// `GET /version` on `conn`, its answer read whole: the status code.
    fn get_version(conn: &mut TcpStream) -> String {
        conn.write_all(b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut b = [0u8; 1];
            conn.read_exact(&mut b).unwrap();
            head.push(b[0]);
        }
        let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
        let length: usize = head
            .split("content-length: ")
            .nth(1)
            .and_then(|v| v.split("\r\n").next())
            .unwrap()
            .parse()
            .unwrap();
        conn.read_exact(&mut vec![0u8; length]).unwrap();
        head[9..12].to_string()
    }

    fn open_connections(server: &TestApiServer) -> usize {
        server
            .shared
            .conns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .open_count()
    }

    /// kube-apiserver 1.37.2 closes a connection that has not sent a
    /// whole request head 32 s after the connect (nothing sent, only half
    /// a head): so does the test server, at its head time-out (shortened
    /// here), also with no idle time-out set.
    #[test]
    fn a_connection_that_sends_no_request_head_in_time_is_closed() {
        let server = TestApiServer::builder()
            .head_timeout(Duration::from_millis(300))
            .build()
            .unwrap();
        let mut silent = connect(&server);
        let mut half = connect(&server);
        half.write_all(b"GET /version HTTP/1.1\r\nHost: x\r\n")
            .unwrap();
        assert!(closed_by_server(&mut silent), "a silent connection is kept");
        assert!(closed_by_server(&mut half), "half a head is waited for");
        // A head in time is served, and the connection kept for the next.
        let mut served = connect(&server);
        assert_eq!(get_version(&mut served), "200");
        server.shutdown();
    }

    /// A thread per connection, at most `max_connections` of them: one more
    /// closes the oldest that has sent no request, and when every one is
    /// busy (a watch) the new one is closed.
    #[test]
    fn connections_over_the_cap_close_the_oldest_silent_one_or_the_new_one() {
        let server = TestApiServer::builder().max_connections(3).build().unwrap();
        let mut conns: Vec<TcpStream> = (0..5).map(|_| connect(&server)).collect();
        assert!(closed_by_server(&mut conns[0]));
        assert!(closed_by_server(&mut conns[1]));
        for conn in &mut conns[2..] {
            assert_eq!(get_version(conn), "200");
        }
        assert!(open_connections(&server) <= 3);

        // Three watches: every connection busy.
        for conn in &mut conns[2..] {
            conn.write_all(
                b"GET /apis/coordination.k8s.io/v1/namespaces/default/leases?watch=true HTTP/1.1\r\nHost: x\r\n\r\n",
            )
            .unwrap();
            let mut buf = [0u8; 12];
            conn.read_exact(&mut buf).unwrap();
            assert_eq!(&buf[9..12], b"200");
        }
        let mut refused = connect(&server);
        assert!(closed_by_server(&mut refused));
        assert!(open_connections(&server) <= 3);
        server.shutdown();
    }
}
