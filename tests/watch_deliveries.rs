//! Deliveries that say nothing new (issue 44 #3). A proxy in front of the
//! test server passes the real watch stream and mixes into it, 100 times
//! a second, deliveries the lock cannot use: the Lease at an old version,
//! another Lease (a proxy that dropped the field selector), and the Lease
//! DELETED while it exists. A candidate, follower or leader, must not turn
//! them into GETs (at most 2 a retry period), and must still see a
//! takeover within a round trip.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::{client, eventually, NS};
use lease_elector::testing::TestApiServer;
use lease_elector::{Client, ClientConfig, LeaderElector, LeaseLock};

const LEASE: &str = "noisy";
const RETRY: Duration = Duration::from_secs(1);

fn start_proxy(upstream: &str) -> String {
    let upstream: SocketAddr = upstream.strip_prefix("http://").unwrap().parse().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            thread::spawn(move || serve(conn, upstream));
        }
    });
    url
}

fn read_head(r: &mut impl BufRead) -> Option<Vec<String>> {
    let mut head = Vec::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            return Some(head);
        }
        head.push(line);
    }
}

fn serve(conn: TcpStream, upstream: SocketAddr) {
    let mut r = BufReader::new(conn.try_clone().unwrap());
    let mut w = conn;
    while let Some(head) = read_head(&mut r) {
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
        let mut s = TcpStream::connect(upstream).unwrap();
        for h in &head {
            if !h.to_ascii_lowercase().starts_with("connection:") {
                s.write_all(h.as_bytes()).unwrap();
            }
        }
        s.write_all(b"Connection: close\r\n\r\n").unwrap();
        s.write_all(&body).unwrap();
        if head[0].contains("watch=true") {
            noisy_watch(w, s);
            return;
        }
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).unwrap();
        if w.write_all(&answer).is_err() {
            return;
        }
    }
}

fn chunk(line: &str) -> Vec<u8> {
    format!("{:x}\r\n{line}\n\r\n", line.len() + 1).into_bytes()
}

/// The server's watch events, passed on, with noise mixed in.
fn noisy_watch(w: TcpStream, upstream: TcpStream) {
    let mut up = BufReader::new(upstream);
    let Some(head) = read_head(&mut up) else {
        return;
    };
    let w = Arc::new(Mutex::new(w));
    let mut out = head.concat();
    out.push_str("\r\n");
    if w.lock().unwrap().write_all(out.as_bytes()).is_err() {
        return;
    }
    let noise = w.clone();
    thread::spawn(move || {
        let lease = |name: &str, rv: u64, holder: &str| {
            format!(
                r#"{{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{{"name":"{name}","namespace":"{NS}","resourceVersion":"{rv}"}},"spec":{{"holderIdentity":"{holder}","leaseDurationSeconds":3}}}}"#
            )
        };
        for i in 0u64.. {
            let event = match i % 3 {
                0 => format!(
                    r#"{{"type":"MODIFIED","object":{}}}"#,
                    lease(LEASE, 1, "stale")
                ),
                1 => format!(
                    r#"{{"type":"MODIFIED","object":{}}}"#,
                    lease("another", 90_000_000 + i, "x")
                ),
                _ => format!(
                    r#"{{"type":"DELETED","object":{}}}"#,
                    lease(LEASE, 100_000_000 + i, "")
                ),
            };
            if noise.lock().unwrap().write_all(&chunk(&event)).is_err() {
                return;
            }
            thread::sleep(Duration::from_millis(10));
        }
    });
    // Chunked upstream: pass each chunk on whole.
    loop {
        let mut size = String::new();
        if up.read_line(&mut size).unwrap_or(0) == 0 {
            return;
        }
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        let mut data = vec![0; n + 2];
        if n == 0 || up.read_exact(&mut data).is_err() {
            return;
        }
        let mut out = size.into_bytes();
        out.extend_from_slice(&data);
        if w.lock().unwrap().write_all(&out).is_err() {
            return;
        }
    }
}

fn elector(lock: LeaseLock) -> lease_elector::ElectorBuilder {
    LeaderElector::builder(lock)
        .lease_duration(Duration::from_secs(3))
        .renew_deadline(Duration::from_secs(2))
        .retry_period(RETRY)
        .release_on_cancel(true)
}

#[test]
fn stale_foreign_and_deleted_deliveries_cost_no_gets_and_a_takeover_is_still_seen_at_once() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let proxy = start_proxy(&server.url());
    let (a, _a_events) = elector(LeaseLock::new(client(&server), NS, LEASE, "a"))
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    eventually("a leads", || a.probe().is_leader());
    let via_proxy = Client::new(ClientConfig::new(&proxy).timeout(Duration::from_secs(5))).unwrap();
    let (b, _b_events) = elector(LeaseLock::new(via_proxy, NS, LEASE, "b"))
        .watch(true)
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    eventually("b follows a, watching", || {
        b.probe().leader().as_deref() == Some("a") && b.probe().status().watch.is_watching()
    });
    // a leads without a watch and renews with PUTs alone: every GET is b's.
    let window = RETRY * 4;
    server.reset_stats();
    thread::sleep(window);
    let follower_gets = server.stats().gets;
    // A takeover (a's release) reaches b through the noise at once.
    let released = Instant::now();
    a.stop().unwrap();
    eventually("b leads", || b.probe().is_leader());
    let took = released.elapsed();
    server.reset_stats();
    thread::sleep(window);
    let leader_gets = server.stats().gets;
    b.stop().unwrap();
    let allowed = 2 * (window.as_millis() / RETRY.as_millis()) as u64;
    eprintln!("GETs in {window:?}: {follower_gets} as follower, {leader_gets} as leader; takeover seen after {took:?}");
    assert!(
        follower_gets <= allowed && leader_gets <= allowed,
        "GETs in {window:?} at a retry period of {RETRY:?}: {follower_gets} as follower, {leader_gets} as leader (at most {allowed})"
    );
    assert!(
        took < RETRY / 2,
        "b led {took:?} after a's release: not through the watch"
    );
}
