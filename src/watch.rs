//! A Lease watch that wakes a waiting candidate as soon as the Lease changes.
//!
//! Kubernetes streams watch events as JSON lines over one long HTTP
//! response. The stream runs on its own thread over a socket this module
//! owns, so stopping shuts the socket down and the thread is joined at
//! once instead of sitting in a blocking read. It reconnects (from the
//! last resourceVersion seen) on close or error; while it is down the
//! elector's polling carries on as before. A change only makes the next
//! acquisition attempt earlier: the expiry rule still decides.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::client::{segment, Client, CONNECT_TIMEOUT, MAX_BODY};
use crate::clock::{Wake, Wakeup};
use crate::error::{Error, Result};
use crate::lease::Lease;

/// Server-side cap on one watch request; the stream is simply reopened.
const WATCH_TIMEOUT_SECS: u64 = 300;
const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// A stream that stayed open this long was healthy: reconnect quickly.
const HEALTHY_STREAM: Duration = Duration::from_secs(1);
/// A watch silent for this many retry periods is presumed dead (a peer
/// that vanished without a FIN, a load balancer that dropped the flow) and
/// reopened. A held Lease changes every retry period, so a live watch on
/// it is never this quiet; on a free Lease the cost is one reconnect.
const SILENT_PERIODS: u32 = 3;
const MIN_SILENCE: Duration = Duration::from_secs(1);

/// The newest Lease a watch delivered and nobody has read yet; shared
/// between a [`Watcher`] and the lock that will use it instead of a `GET`.
#[derive(Debug, Clone, Default)]
pub struct LatestLease {
    slot: Arc<Mutex<Option<Lease>>>,
}

impl LatestLease {
    /// An empty slot.
    pub fn new() -> Self {
        Self::default()
    }

    /// Take the delivered Lease, if any.
    pub fn take(&self) -> Option<Lease> {
        self.slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Forget any delivered Lease (after a write, it is stale).
    pub fn clear(&self) {
        self.take();
    }

    fn set(&self, lease: Option<Lease>) {
        *self.slot.lock().unwrap_or_else(PoisonError::into_inner) = lease;
    }
}

#[derive(Debug)]
struct WatchShared {
    stop: Wakeup,
    /// A second handle to the live socket, to shut it down on stop.
    conn: Mutex<Option<TcpStream>>,
    changes: AtomicU64,
    connects: AtomicU64,
}

/// A running Lease watch; stops and joins its thread when dropped.
#[derive(Debug)]
pub struct Watcher {
    shared: Arc<WatchShared>,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    /// Watch Lease `namespace/name`: store each delivered object in
    /// `latest`, then poke `on_change`. Failed reconnects back off from
    /// 100ms up to `backoff`.
    pub fn spawn(
        client: Client,
        namespace: &str,
        name: &str,
        latest: LatestLease,
        on_change: Wakeup,
        backoff: Duration,
    ) -> Result<Watcher> {
        let shared = Arc::new(WatchShared {
            stop: Wakeup::new(),
            conn: Mutex::new(None),
            changes: AtomicU64::new(0),
            connects: AtomicU64::new(0),
        });
        let stream = WatchStream {
            client,
            namespace: namespace.to_string(),
            name: name.to_string(),
            shared: shared.clone(),
            latest,
            on_change,
            resource_version: None,
            refresh_token: false,
            silence: (backoff * SILENT_PERIODS).max(MIN_SILENCE),
        };
        let thread = thread::Builder::new()
            .name(format!("lease-watch/{namespace}/{name}"))
            .spawn(move || stream.run(backoff))
            .map_err(Error::Spawn)?;
        Ok(Watcher {
            shared,
            thread: Some(thread),
        })
    }

    /// How many Lease changes the watch has reported.
    pub fn changes(&self) -> u64 {
        self.shared.changes.load(Ordering::Relaxed)
    }

    /// How many times the watch (re)connected.
    pub fn connects(&self) -> u64 {
        self.shared.connects.load(Ordering::Relaxed)
    }

    fn stop_and_join(&mut self) {
        self.signal_stop();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                log::error!("lease watch thread panicked");
            }
        }
    }

    /// Tell the watch thread to end (without waiting for it).
    pub(crate) fn signal_stop(&self) {
        self.shared.stop.stop();
        if let Some(conn) = self
            .shared
            .conn
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            // Unblocks the read in the watch thread; an error means it is closed already.
            let _ = conn.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

struct WatchStream {
    client: Client,
    namespace: String,
    name: String,
    shared: Arc<WatchShared>,
    latest: LatestLease,
    on_change: Wakeup,
    resource_version: Option<String>,
    refresh_token: bool,
    /// No byte for this long ends the stream (see [`SILENT_PERIODS`]).
    silence: Duration,
}

/// One event line: `{"type":"MODIFIED","object":{...}}`.
#[derive(serde::Deserialize)]
struct WatchEvent {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    object: serde_json::Value,
}

impl WatchStream {
    /// Watch until stopped. Reconnects wait 100ms, doubling up to
    /// `max_backoff` while attempts keep failing fast; a stream that lived
    /// a while resets the wait.
    fn run(mut self, max_backoff: Duration) {
        let target = format!("lease {}/{}", self.namespace, self.name);
        let mut delay = MIN_BACKOFF;
        while !self.shared.stop.is_stopped() {
            let opened = Instant::now();
            let result = self.watch_once();
            if self.shared.stop.is_stopped() {
                break;
            }
            if opened.elapsed() >= HEALTHY_STREAM {
                delay = MIN_BACKOFF;
            }
            match result {
                Ok(()) => log::debug!("watch on {target} ended; reopening in {delay:?}"),
                Err(e) => log::debug!("watch on {target}: {e}; retrying in {delay:?}"),
            }
            if self.shared.stop.wait_timeout(delay) == Wake::Stopped {
                break;
            }
            delay = (delay * 2).min(max_backoff.max(MIN_BACKOFF));
        }
    }

    fn watch_once(&mut self) -> io::Result<()> {
        let url = Url::parse(self.client.base_url())?;
        let mut path = format!(
            "{}/apis/coordination.k8s.io/v1/namespaces/{}/leases?watch=true&fieldSelector=metadata.name%3D{}&timeoutSeconds={WATCH_TIMEOUT_SECS}",
            url.prefix,
            segment(&self.namespace),
            segment(&self.name)
        );
        if let Some(rv) = &self.resource_version {
            path.push_str("&resourceVersion=");
            path.push_str(&segment(rv));
        }
        let tcp = connect(&url.host, url.port)?;
        tcp.set_read_timeout(Some(self.silence))?;
        tcp.set_write_timeout(Some(self.silence))?;
        {
            let mut slot = self
                .shared
                .conn
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if self.shared.stop.is_stopped() {
                return Ok(());
            }
            *slot = Some(tcp.try_clone()?);
        }
        self.shared.connects.fetch_add(1, Ordering::Relaxed);
        let auth = self
            .client
            .auth_header(std::mem::take(&mut self.refresh_token), &self.shared.stop)
            .map_err(io::Error::other)?;
        let mut request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nUser-Agent: lease-elector/{}\r\nConnection: close\r\n",
            url.host_header,
            env!("CARGO_PKG_VERSION")
        );
        if let Some(auth) = auth {
            request.push_str("Authorization: ");
            request.push_str(&auth);
            request.push_str("\r\n");
        }
        request.push_str("\r\n");
        match (url.tls, self.client.watch_tls()) {
            (false, _) => self.stream(tcp, &request),
            (true, Some(config)) => {
                let server_name = rustls::pki_types::ServerName::try_from(url.host.clone())
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
                let conn =
                    rustls::ClientConnection::new(config, server_name).map_err(io::Error::other)?;
                self.stream(rustls::StreamOwned::new(conn, tcp), &request)
            }
            (true, None) => Err(io::Error::other("https watch without TLS configuration")),
        }
    }

    fn stream<S: Read + Write>(&mut self, mut sock: S, request: &str) -> io::Result<()> {
        sock.write_all(request.as_bytes())?;
        sock.flush()?;
        let mut reader = BufReader::new(sock);
        let (code, chunked) = read_head(&mut reader)?;
        match code {
            200 => {}
            401 => {
                self.refresh_token = true;
                return Err(io::Error::other("watch refused: 401 Unauthorized"));
            }
            410 => {
                self.resource_version = None;
                return Err(io::Error::other("watch: resourceVersion too old (410)"));
            }
            _ => {
                return Err(io::Error::other(format!(
                    "watch refused with status {code}"
                )))
            }
        }
        let mut body: Box<dyn BufRead + '_> = if chunked {
            Box::new(BufReader::new(Chunked::new(reader)))
        } else {
            Box::new(reader)
        };
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = (&mut body).take(MAX_BODY).read_until(b'\n', &mut line)?;
            if n == 0 {
                return Ok(());
            }
            if line.last() != Some(&b'\n') && n as u64 >= MAX_BODY {
                return Err(io::Error::other("watch event larger than the body cap"));
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            self.handle_event(&line)?;
        }
    }

    fn handle_event(&mut self, line: &[u8]) -> io::Result<()> {
        let event: WatchEvent = serde_json::from_slice(line)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("watch event: {e}")))?;
        match event.kind.as_str() {
            "ADDED" | "MODIFIED" | "DELETED" => {
                if let Some(rv) = event.object["metadata"]["resourceVersion"].as_str() {
                    self.resource_version = Some(rv.to_string());
                }
                // A deleted or undecodable object leaves the slot empty: the
                // woken candidate then asks the server.
                let lease = match event.kind.as_str() {
                    "DELETED" => None,
                    _ => serde_json::from_value::<Lease>(event.object).ok(),
                };
                self.latest.set(lease);
                self.shared.changes.fetch_add(1, Ordering::Relaxed);
                self.on_change.poke();
                Ok(())
            }
            "BOOKMARK" => {
                if let Some(rv) = event.object["metadata"]["resourceVersion"].as_str() {
                    self.resource_version = Some(rv.to_string());
                }
                Ok(())
            }
            "ERROR" => {
                if event.object["code"].as_u64() == Some(410) {
                    self.resource_version = None;
                }
                Err(io::Error::other(format!(
                    "watch error: {}",
                    event.object["message"].as_str().unwrap_or("no message")
                )))
            }
            other => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unknown watch event type {other:?}"),
            )),
        }
    }
}

/// The parts of the API server URL a raw request needs.
#[derive(Debug, PartialEq)]
struct Url {
    tls: bool,
    host: String,
    host_header: String,
    port: u16,
    prefix: String,
}

impl Url {
    fn parse(base: &str) -> io::Result<Url> {
        let bad = || {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("bad API server URL {base:?}"),
            )
        };
        let (tls, rest) = if let Some(r) = base.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = base.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(bad());
        };
        let (authority, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/').to_string()),
            None => (rest, String::new()),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let end = v6.find(']').ok_or_else(bad)?;
            let port = v6[end + 1..].strip_prefix(':');
            (v6[..end].to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (authority.to_string(), None),
            }
        };
        let port = match port {
            Some(p) => p.parse().map_err(|_| bad())?,
            None if tls => 443,
            None => 80,
        };
        if host.is_empty() {
            return Err(bad());
        }
        Ok(Url {
            tls,
            host,
            host_header: authority.to_string(),
            port,
            prefix,
        })
    }
}

fn connect(host: &str, port: u16) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{host} did not resolve"));
    for addr in (host, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
            Ok(s) => {
                s.set_nodelay(true)?;
                return Ok(s);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Read the status line and headers; returns the status and whether the
/// body is chunked.
fn read_head(r: &mut impl BufRead) -> io::Result<(u16, bool)> {
    let mut line = String::new();
    let mut limited = r.take(16 * 1024);
    limited.read_line(&mut line)?;
    let code = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad HTTP status line"))?;
    let mut chunked = false;
    loop {
        line.clear();
        if limited.read_line(&mut line)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "headers cut short",
            ));
        }
        let h = line.trim_end();
        if h.is_empty() {
            return Ok((code, chunked));
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("transfer-encoding")
                && v.to_ascii_lowercase().contains("chunked")
            {
                chunked = true;
            }
        }
    }
}

/// `Transfer-Encoding: chunked` decoder.
struct Chunked<R> {
    inner: R,
    left: u64,
    done: bool,
}

impl<R: BufRead> Chunked<R> {
    fn new(inner: R) -> Self {
        Chunked {
            inner,
            left: 0,
            done: false,
        }
    }
}

impl<R: BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            let mut size = String::new();
            (&mut self.inner).take(1024).read_line(&mut size)?;
            if size.trim().is_empty() {
                // The CRLF after the previous chunk's data.
                size.clear();
                (&mut self.inner).take(1024).read_line(&mut size)?;
            }
            let hex = size.split(';').next().unwrap_or("").trim();
            if hex.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "chunked body cut short",
                ));
            }
            self.left = u64::from_str_radix(hex, 16)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad chunk size"))?;
            if self.left == 0 {
                self.done = true;
                return Ok(0);
            }
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "chunk cut short",
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_parts() {
        let u = Url::parse("https://[fd00::1]:6443").unwrap();
        assert_eq!((u.tls, u.host.as_str(), u.port), (true, "fd00::1", 6443));
        assert_eq!(u.host_header, "[fd00::1]:6443");
        let u = Url::parse("http://127.0.0.1:8001/k8s").unwrap();
        assert_eq!((u.tls, u.port, u.prefix.as_str()), (false, 8001, "/k8s"));
        assert_eq!(Url::parse("https://api.example").unwrap().port, 443);
        assert!(Url::parse("ftp://x").is_err());
        assert!(Url::parse("http://:80").is_err());
        assert!(Url::parse("http://h:notaport").is_err());
    }

    #[test]
    fn chunked_bodies_decode() {
        let raw = b"5\r\nhello\r\n7\r\n world\n\r\n0\r\n\r\n";
        let mut out = String::new();
        Chunked::new(&raw[..]).read_to_string(&mut out).unwrap();
        assert_eq!(out, "hello world\n");
        let mut out = String::new();
        assert!(Chunked::new(&b"zz\r\n"[..])
            .read_to_string(&mut out)
            .is_err());
        assert!(Chunked::new(&b"5\r\nhe"[..])
            .read_to_string(&mut out)
            .is_err());
    }

    #[test]
    fn heads_parse() {
        let mut r = &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"[..];
        assert_eq!(read_head(&mut r).unwrap(), (200, true));
        let mut r = &b"HTTP/1.1 410 Gone\r\nContent-Length: 0\r\n\r\n"[..];
        assert_eq!(read_head(&mut r).unwrap(), (410, false));
        let mut r = &b"garbage\r\n\r\n"[..];
        assert!(read_head(&mut r).is_err());
    }
}
