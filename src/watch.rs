//! A Lease watch that wakes a waiting candidate as soon as the Lease changes.
//!
//! Kubernetes streams watch events as JSON lines over one long HTTP
//! response. The stream rides on the client's request building, TLS and
//! credentials ([`Client::open_stream`]) over a connection pool of its own,
//! on a thread of its own; stopping closes that pool, which ends a blocked
//! read at once, and the thread is joined. It reconnects (from the last
//! resourceVersion seen) on close, error or silence; while it is down the
//! elector's polling carries on as before. A change only makes the next
//! acquisition attempt earlier: the expiry rule still decides.

use std::io::{self, BufRead, BufReader, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::client::{lease_path, lease_target, segment, Client, Target, MAX_BODY};
use crate::clock::{Wake, Wakeup};
use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::text::Escaped;

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
pub(crate) struct LatestLease {
    slot: Arc<Mutex<Option<Lease>>>,
}

impl LatestLease {
    /// An empty slot.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Take the delivered Lease, if any.
    pub(crate) fn take(&self) -> Option<Lease> {
        self.slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Forget any delivered Lease (after a write, it is stale).
    pub(crate) fn clear(&self) {
        self.take();
    }

    fn set(&self, lease: Option<Lease>) {
        *self.slot.lock().unwrap_or_else(PoisonError::into_inner) = lease;
    }
}

struct WatchShared {
    stop: Wakeup,
    /// The stream's own connection pool: closed on stop.
    pool: Mutex<Option<ureq::Agent>>,
    changes: AtomicU64,
}

impl std::fmt::Debug for WatchShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchShared")
            .field("changes", &self.changes)
            .finish_non_exhaustive()
    }
}

/// A running Lease watch; stops and joins its thread when dropped. Opaque:
/// only the crate's locks start one (see [`crate::Lock::watch`]).
#[derive(Debug)]
pub struct Watcher {
    shared: Arc<WatchShared>,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    /// Watch Lease `namespace/name`: store each delivered object in
    /// `latest`, then poke `on_change`. Failed reconnects back off from
    /// 100ms up to `backoff`.
    pub(crate) fn spawn(
        client: Client,
        namespace: &str,
        name: &str,
        latest: LatestLease,
        on_change: Wakeup,
        backoff: Duration,
    ) -> Result<Watcher> {
        let shared = Arc::new(WatchShared {
            stop: Wakeup::new(),
            pool: Mutex::new(Some(client.stream_pool())),
            changes: AtomicU64::new(0),
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
            .name(crate::names::thread_name(&["lease-watch", namespace, name]))
            .spawn(move || stream.run(backoff))
            .map_err(Error::Spawn)?;
        Ok(Watcher {
            shared,
            thread: Some(thread),
        })
    }

    /// How many Lease changes the watch has reported.
    pub(crate) fn changes(&self) -> u64 {
        self.shared.changes.load(Ordering::Relaxed)
    }

    fn stop_and_join(&mut self) {
        self.signal_stop();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                log::error!("lease watch thread panicked");
            }
        }
    }

    /// Tell the watch thread to end (without waiting for it): closing the
    /// stream's pool ends a read blocked in it.
    pub(crate) fn signal_stop(&self) {
        self.shared.stop.stop();
        let pool = self
            .shared
            .pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(pool) = pool {
            pool.shutdown();
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
            // Names, Status messages and error bodies are the server's text.
            match result {
                Ok(()) => log::debug!(
                    "watch on {} ended; reopening in {delay:?}",
                    Escaped(&target)
                ),
                Err(e) => log::debug!(
                    "watch on {}: {}; retrying in {delay:?}",
                    Escaped(&target),
                    Escaped(&e.to_string())
                ),
            }
            if self.shared.stop.wait_timeout(delay) == Wake::Stopped {
                break;
            }
            delay = (delay * 2).min(max_backoff.max(MIN_BACKOFF));
        }
    }

    fn watch_once(&mut self) -> io::Result<()> {
        let mut path = format!(
            "{}?watch=true&fieldSelector=metadata.name%3D{}&timeoutSeconds={WATCH_TIMEOUT_SECS}",
            lease_path(&self.namespace, None),
            segment(&self.name)
        );
        if let Some(rv) = &self.resource_version {
            path.push_str("&resourceVersion=");
            path.push_str(&segment(rv));
        }
        let Some(pool) = self
            .shared
            .pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        else {
            return Ok(()); // stopped
        };
        let what = lease_target(&self.namespace, &self.name);
        let target = Target {
            what: &what,
            action: "watch",
        };
        let refresh = std::mem::take(&mut self.refresh_token);
        let (code, body) = self
            .client
            .open_stream(
                &pool,
                &path,
                target,
                self.silence,
                refresh,
                &self.shared.stop,
            )
            .map_err(io::Error::other)?;
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
        self.read_events(BufReader::new(body))
    }

    fn read_events(&mut self, mut body: impl BufRead) -> io::Result<()> {
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
