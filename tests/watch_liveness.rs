//! A watch is alive while it brings events, not bytes (issue 44 #5). A
//! proxy in front of the test server answers every watch with a stream
//! that sends bytes but never an event: blank lines, the same BOOKMARK
//! 100 times a second, or a response head trickled a byte at a time. The
//! watch must be reopened within its silence bound, and the status must
//! not say "watching" while it is blind.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{client, NS};
use lease_elector::testing::TestApiServer;
use lease_elector::{Client, ClientConfig, LeaderElector, LeaseLock};

/// What the proxy answers a watch with.
#[derive(Clone, Copy, Debug)]
enum Blind {
    BlankLines,
    SameBookmark,
    TrickledHead,
}

struct Proxy {
    url: String,
    watches: Arc<AtomicUsize>,
}

impl Proxy {
    fn start(upstream: &str, blind: Blind) -> Proxy {
        let upstream: SocketAddr = upstream.strip_prefix("http://").unwrap().parse().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let watches = Arc::new(AtomicUsize::new(0));
        let counted = watches.clone();
        thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let counted = counted.clone();
                thread::spawn(move || serve(conn, upstream, blind, &counted));
            }
        });
        Proxy { url, watches }
    }

    fn watches(&self) -> usize {
        self.watches.load(Ordering::SeqCst)
    }
}

fn serve(conn: TcpStream, upstream: SocketAddr, blind: Blind, watches: &AtomicUsize) {
    let mut r = BufReader::new(conn.try_clone().unwrap());
    let mut w = conn;
    loop {
        let mut head = Vec::new();
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            head.push(line);
        }
        let length = head
            .iter()
            .find_map(|h| {
                let (n, v) = h.split_once(':')?;
                n.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().unwrap())
            })
            .unwrap_or(0);
        let mut body = vec![0; length];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        if head[0].contains("watch=true") {
            watches.fetch_add(1, Ordering::SeqCst);
            stream_blind(&mut w, blind);
            return;
        }
        // Anything else: to the server and back, on a connection of its own.
        let mut s = TcpStream::connect(upstream).unwrap();
        for h in &head {
            if !h.to_ascii_lowercase().starts_with("connection:") {
                s.write_all(h.as_bytes()).unwrap();
            }
        }
        s.write_all(b"Connection: close\r\n\r\n").unwrap();
        s.write_all(&body).unwrap();
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).unwrap();
        if w.write_all(&answer).is_err() {
            return;
        }
    }
}

/// Bytes, never an event, until the client hangs up.
fn stream_blind(w: &mut TcpStream, blind: Blind) {
    const HEAD: &[u8] =
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    const BOOKMARK: &str = r#"{"type":"BOOKMARK","object":{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"resourceVersion":"1"}}}"#;
    let (first, each, every): (&[u8], Vec<u8>, Duration) = match blind {
        Blind::BlankLines => (HEAD, b"1\r\n\n\r\n".to_vec(), Duration::from_millis(100)),
        Blind::SameBookmark => (
            HEAD,
            format!("{:x}\r\n{BOOKMARK}\n\r\n", BOOKMARK.len() + 1).into_bytes(),
            Duration::from_millis(10),
        ),
        Blind::TrickledHead => (
            b"HTTP/1.1 200 OK\r\nX-Slow: ",
            b"a".to_vec(),
            Duration::from_millis(200),
        ),
    };
    if w.write_all(first).is_err() {
        return;
    }
    while w.write_all(&each).is_ok() {
        thread::sleep(every);
    }
}

/// Lease 2 s, renew deadline 1.5 s, retry period 0.5 s: a silence bound
/// of 1.5 s (3 retry periods) before any event (these streams never
/// bring one).
fn elector(lock: LeaseLock) -> lease_elector::ElectorBuilder {
    LeaderElector::builder(lock)
        .lease_duration(Duration::from_secs(2))
        .renew_deadline(Duration::from_millis(1500))
        .retry_period(Duration::from_millis(500))
}

fn a_blind_watch_is_reopened_and_not_called_watching(blind: Blind) {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let proxy = Proxy::start(&server.url(), blind);
    let (a, _a_events) = elector(LeaseLock::new(client(&server), NS, "blind", "a"))
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    let via_proxy =
        Client::new(ClientConfig::new(&proxy.url).timeout(Duration::from_secs(5))).unwrap();
    let (b, _b_events) = elector(LeaseLock::new(via_proxy, NS, "blind", "b"))
        .watch(true)
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    let start = Instant::now();
    let silence = Duration::from_secs(2);
    let mut watching_after_first = Vec::new();
    while start.elapsed() < silence * 4 {
        let mode = b.probe().status().watch;
        if proxy.watches() >= 2 && mode.is_watching() {
            watching_after_first.push((start.elapsed(), proxy.watches()));
        }
        thread::sleep(Duration::from_millis(20));
    }
    let watches = proxy.watches();
    assert!(
        watches >= 3,
        "{blind:?}: {watches} watch requests in {:?}: a blind stream must be reopened within its silence bound ({silence:?})",
        silence * 4
    );
    assert!(
        watching_after_first.is_empty(),
        "{blind:?}: the status said watching while the watch was blind: {watching_after_first:?}"
    );
    b.stop().unwrap();
    a.stop().unwrap();
}

#[test]
fn a_stream_of_blank_lines_is_reopened_within_the_silence_bound() {
    a_blind_watch_is_reopened_and_not_called_watching(Blind::BlankLines);
}

#[test]
fn a_flood_of_the_same_bookmark_is_reopened_within_the_silence_bound() {
    a_blind_watch_is_reopened_and_not_called_watching(Blind::SameBookmark);
}

#[test]
fn a_response_head_trickled_a_byte_at_a_time_is_given_up_within_the_silence_bound() {
    a_blind_watch_is_reopened_and_not_called_watching(Blind::TrickledHead);
}
