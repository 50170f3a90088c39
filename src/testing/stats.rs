//! Request counters and the request log.

use std::collections::VecDeque;

/// How many entries [`Recorder`] keeps in its request log.
const LOG_CAP: usize = 10_000;

/// Counters since the server started or since the last
/// [`reset_stats`](super::TestApiServer::reset_stats).
///
/// Requests are classified when they are parsed, whatever their answer
/// (an update that got a 409 or an injected fault is still an update).
///
/// ```
/// use lease_elector::testing::TestApiServer;
///
/// let server = TestApiServer::start()?;
/// // ... run a candidate for a while ...
/// let s = server.stats();
/// println!("{} requests, {} renewals, {} connections", s.requests, s.updates, s.connections);
/// # server.shutdown();
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Every request parsed, including ones answered by faults or dropped.
    pub requests: u64,
    /// `GET` of a single Lease.
    pub gets: u64,
    /// `POST` of a Lease.
    pub creates: u64,
    /// `PUT` of a Lease.
    pub updates: u64,
    /// Watch requests on Leases.
    pub watches: u64,
    /// `POST` of a core/v1 Event.
    pub events: u64,
    /// Request bytes read (request line, headers and body).
    pub bytes_in: u64,
    /// Response bytes written (status line, headers and body).
    pub bytes_out: u64,
    /// Fault rules that fired (a latency rule counts each time it delays).
    pub faults_fired: u64,
    /// TCP connections accepted, including ones closed at once during an
    /// outage: with keep-alive, fewer than `requests`; a client that
    /// reconnects for every request shows as many as `requests`.
    pub connections: u64,
    /// TLS connections whose first request arrived after a full handshake.
    pub tls_full_handshakes: u64,
    /// TLS connections that resumed an earlier session (no certificate
    /// exchange, no signature on the server).
    pub tls_resumed_handshakes: u64,
}

/// One request as the server saw it; see
/// [`TestApiServer::requests`](super::TestApiServer::requests).
///
/// ```
/// use lease_elector::testing::TestApiServer;
///
/// let server = TestApiServer::start()?;
/// for r in server.requests() {
///     println!("{} {} -> {}", r.method, r.path, r.status);
/// }
/// # server.shutdown();
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestLog {
    /// Request method (`GET`, `PUT`, ...).
    pub method: String,
    /// Request target: path with query string.
    pub path: String,
    /// Response status; 0 when the connection was dropped without one.
    pub status: u16,
    /// Request bytes read.
    pub bytes_in: u64,
    /// Response bytes written.
    pub bytes_out: u64,
}

/// What a request counts as in [`Stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Get,
    Create,
    Update,
    Watch,
    Event,
    Other,
}

#[derive(Debug, Default)]
pub(crate) struct Recorder {
    pub(crate) stats: Stats,
    log: VecDeque<RequestLog>,
}

impl Recorder {
    /// Count a request as soon as it is parsed, so a running watch shows up.
    pub(crate) fn start(&mut self, kind: Kind, bytes_in: u64) {
        let s = &mut self.stats;
        s.requests += 1;
        match kind {
            Kind::Get => s.gets += 1,
            Kind::Create => s.creates += 1,
            Kind::Update => s.updates += 1,
            Kind::Watch => s.watches += 1,
            Kind::Event => s.events += 1,
            Kind::Other => {}
        }
        s.bytes_in += bytes_in;
    }

    /// Count an accepted TCP connection.
    pub(crate) fn accepted(&mut self) {
        self.stats.connections += 1;
    }

    /// Log a request once its answer is written (or dropped).
    pub(crate) fn finish(&mut self, entry: RequestLog) {
        self.stats.bytes_out += entry.bytes_out;
        if self.log.len() == LOG_CAP {
            self.log.pop_front();
        }
        self.log.push_back(entry);
    }

    pub(crate) fn reset(&mut self) {
        self.stats = Stats::default();
        self.log.clear();
    }

    pub(crate) fn log(&self) -> Vec<RequestLog> {
        self.log.iter().cloned().collect()
    }
}
