//! The health endpoint (feature `health`) over real HTTP: std `TcpStream`
//! clients against electors on the embedded API server.

#![cfg(feature = "health")]

mod common;

use lease_elector::LeaderEvents;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use lease_elector::health::{
    HealthServer, CONNECTION_TIMEOUT, MAX_CONNECTIONS, MAX_CONNECTIONS_PER_PEER,
};
use lease_elector::testing::{Fault, TestApiServer};
use lease_elector::{
    ElectorConfig, ElectorHandle, LeaderElector, LeaderEvent, LeaseLock, ManualClock, StopReason,
};

const TOLERANCE: Duration = Duration::from_secs(20);

fn spawn(
    server: &TestApiServer,
    name: &str,
    id: &str,
    clock: &ManualClock,
) -> (ElectorHandle, LeaderEvents) {
    LeaderElector::builder(LeaseLock::new(client(server), NS, name, id))
        .config(ElectorConfig {
            release_on_cancel: false,
            ..timings()
        })
        .clock(Arc::new(clock.clone()))
        .build()
        .unwrap()
        .spawn()
        .unwrap()
}

fn wait_started(events: &LeaderEvents) {
    while !matches!(
        events.recv_timeout(WAIT).unwrap(),
        LeaderEvent::StartedLeading { .. }
    ) {}
}

/// A leader "a" and a follower "b" of lease `name`, on a manual clock.
struct Pair {
    server: TestApiServer,
    clock: ManualClock,
    a: ElectorHandle,
    a_events: LeaderEvents,
    b: ElectorHandle,
}

fn pair(name: &str) -> Pair {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let clock = ManualClock::new();
    let (a, a_events) = spawn(&server, name, "a", &clock);
    wait_started(&a_events);
    let (b, _b_events) = spawn(&server, name, "b", &clock);
    eventually("b to see a lead", || {
        b.probe().leader().as_deref() == Some("a")
    });
    Pair {
        server,
        clock,
        a,
        a_events,
        b,
    }
}

fn health(probes: &[&ElectorHandle]) -> HealthServer {
    HealthServer::start(
        "127.0.0.1:0",
        probes.iter().map(|h| h.probe()).collect(),
        TOLERANCE,
    )
    .unwrap()
}

/// One answer, read until the server closes the connection.
#[derive(Debug)]
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

fn send(addr: SocketAddr, request: &[u8]) -> Answer {
    try_send(addr, request).unwrap()
}

fn try_send(addr: SocketAddr, request: &[u8]) -> std::io::Result<Answer> {
    let mut conn = TcpStream::connect(addr)?;
    conn.set_read_timeout(Some(WAIT))?;
    conn.write_all(request)?;
    try_read_answer(conn)
}

fn read_answer(conn: TcpStream) -> Answer {
    try_read_answer(conn).unwrap()
}

fn try_read_answer(mut conn: TcpStream) -> std::io::Result<Answer> {
    let mut raw = String::new();
    conn.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").expect(&raw);
    let status = head
        .strip_prefix("HTTP/1.1 ")
        .and_then(|s| s.get(..3))
        .and_then(|s| s.parse().ok())
        .expect(head);
    Ok(Answer {
        status,
        head: head.to_string(),
        body: body.to_string(),
    })
}

fn get(addr: SocketAddr, path: &str) -> Answer {
    send(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes(),
    )
}

fn leader_json(addr: SocketAddr) -> (u16, serde_json::Value) {
    let answer = get(addr, "/leader");
    assert_eq!(answer.header("Content-Type"), Some("application/json"));
    (answer.status, serde_json::from_str(&answer.body).unwrap())
}

/// True once `conn` is closed by the server (EOF or reset), false while it
/// is still open after `within`.
fn closed_within(conn: &mut TcpStream, within: Duration) -> bool {
    conn.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 64];
    match conn.read(&mut buf) {
        Ok(0) => true,
        Ok(n) => panic!(
            "unexpected answer: {:?}",
            String::from_utf8_lossy(&buf[..n])
        ),
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

#[test]
fn healthz_is_ok_for_leader_and_follower_and_500_once_a_lost_term_outlives_the_tolerance() {
    let p = pair("healthz");
    let (ha, hb, both) = (health(&[&p.a]), health(&[&p.b]), health(&[&p.a, &p.b]));
    for h in [&ha, &hb, &both] {
        let answer = get(h.local_addr(), "/healthz");
        assert_eq!((answer.status, answer.body.as_str()), (200, "ok\n"));
        assert_eq!(
            answer.header("Content-Type"),
            Some("text/plain; charset=utf-8")
        );
        assert_eq!(answer.header("Connection"), Some("close"));
        assert_eq!(answer.header("Content-Length"), Some("3"));
        assert_eq!(get(h.local_addr(), "/readyz").status, 200);
    }

    // Every renew fails with 500 until a's renew deadline passes.
    p.server.inject(Fault::status(500).forever());
    loop {
        eventually("both electors asleep, or a ended", || {
            p.clock.sleepers() >= 2 || p.a.is_finished()
        });
        if p.a.is_finished() {
            break;
        }
        assert!(p.clock.elapsed() < Duration::from_secs(60), "a never lost");
        p.clock.advance(Duration::from_secs(2));
    }
    let reason = p
        .a_events
        .try_iter()
        .find_map(|e| match e {
            LeaderEvent::StoppedLeading { reason, .. } => Some(reason),
            _ => None,
        })
        .expect("a stopped leading");
    assert_eq!(reason, StopReason::Lost);
    assert_eq!(
        get(ha.local_addr(), "/healthz").status,
        200,
        "within the tolerance"
    );

    p.clock.advance(TOLERANCE + Duration::from_secs(1));
    let answer = get(ha.local_addr(), "/healthz");
    assert_eq!(answer.status, 500, "{answer:?}");
    assert!(
        answer.body.contains(&format!("lease {NS}/healthz")) && answer.body.contains("lost"),
        "{}",
        answer.body
    );
    // Not live, so not ready either.
    assert_eq!(get(ha.local_addr(), "/readyz").status, 503);
    // One unhealthy elector makes the process unhealthy; the follower that
    // never led is fine on its own.
    let answer = get(both.local_addr(), "/healthz");
    assert_eq!((answer.status, answer.body.lines().count()), (500, 1));
    assert_eq!(get(hb.local_addr(), "/healthz").status, 200);
}

/// Let every running elector act on the current time, then move the
/// clock by `d`.
fn step(clock: &ManualClock, electors: &[&ElectorHandle], d: Duration) {
    eventually("every running elector asleep on the clock", || {
        clock.sleepers() >= electors.iter().filter(|e| !e.is_finished()).count()
    });
    clock.advance(d);
}

/// Issue 19: an RBAC-broken Deployment looked healthy everywhere.
#[test]
fn readyz_is_503_for_a_follower_whose_every_request_is_forbidden_while_healthz_stays_200() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let clock = ManualClock::new();
    server.inject(Fault::status(403).forever());
    let (b, _events) = spawn(&server, "forbidden", "b", &clock);
    let h = health(&[&b]);
    let addr = h.local_addr();
    eventually("b's first attempt refused", || {
        b.probe().status().consecutive_failures > 0
    });
    let answer = get(addr, "/readyz");
    assert_eq!(answer.status, 503, "{answer:?}");
    assert!(
        answer
            .body
            .contains(&format!("lease {NS}/forbidden: not ready: forbidden")),
        "{}",
        answer.body
    );
    assert_eq!(answer.body.lines().count(), 1, "{}", answer.body);
    // Restarting it would not help: liveness keeps client-go's meaning.
    assert_eq!(get(addr, "/healthz").status, 200);

    // RBAC mended: the next successful request makes it ready again.
    server.clear_faults();
    while b.probe().status().consecutive_failures > 0 {
        assert!(
            clock.elapsed() < Duration::from_secs(60),
            "b never got through"
        );
        step(&clock, &[&b], Duration::from_secs(2));
    }
    assert_eq!(get(addr, "/readyz").status, 200);
}

#[test]
fn readyz_turns_503_once_a_follower_has_not_reached_the_api_server_for_the_tolerance() {
    let p = pair("cut-off");
    let h = health(&[&p.b]);
    let addr = h.local_addr();
    assert_eq!(get(addr, "/readyz").status, 200);
    p.server.set_outage(true);
    let cut = p.clock.elapsed();
    let elapsed = || p.clock.elapsed() - cut;
    // Within the tolerance a failing follower is still ready.
    while elapsed() < TOLERANCE / 2 {
        step(&p.clock, &[&p.a, &p.b], Duration::from_secs(2));
    }
    assert!(
        p.b.probe().status().consecutive_failures > 0,
        "b noticed the outage"
    );
    assert_eq!(get(addr, "/readyz").status, 200);
    while elapsed() < TOLERANCE + Duration::from_secs(4) {
        step(&p.clock, &[&p.a, &p.b], Duration::from_secs(2));
    }
    let answer = get(addr, "/readyz");
    assert_eq!(answer.status, 503, "{answer:?}");
    assert!(
        answer
            .body
            .contains("no successful request to the API server"),
        "{}",
        answer.body
    );
    assert_eq!(get(addr, "/healthz").status, 200, "liveness as client-go's");
}

#[test]
fn leader_is_200_for_the_leader_and_503_for_a_follower_and_names_the_holder() {
    let p = pair("leader");
    let (ha, hb, both) = (health(&[&p.a]), health(&[&p.b]), health(&[&p.a, &p.b]));
    let lease = format!("{NS}/leader");
    let (status, json) = leader_json(ha.local_addr());
    assert_eq!(status, 200);
    assert_eq!(
        json,
        serde_json::json!([{"leading": true, "holder": "a", "lease": lease, "identity": "a"}])
    );
    let (status, json) = leader_json(hb.local_addr());
    assert_eq!(status, 503);
    assert_eq!(
        json,
        serde_json::json!([{"leading": false, "holder": "a", "lease": lease, "identity": "b"}])
    );
    // Several electors: 200 only when this process leads all of them.
    let (status, json) = leader_json(both.local_addr());
    assert_eq!(status, 503);
    assert_eq!(json.as_array().unwrap().len(), 2);
    // Readiness is not leadership: the follower is a ready standby.
    assert_eq!(get(hb.local_addr(), "/readyz").status, 200);
    // The body keeps the documented key order.
    assert_eq!(
        get(ha.local_addr(), "/leader").body,
        format!(r#"[{{"leading":true,"holder":"a","lease":"{lease}","identity":"a"}}]"#)
    );
}

#[test]
fn metrics_are_the_prometheus_text_of_every_elector_served() {
    let p = pair("metrics");
    let h = health(&[&p.a, &p.b]);
    let answer = get(h.local_addr(), "/metrics");
    assert_eq!(answer.status, 200);
    assert_eq!(
        answer.header("Content-Type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let mut samples = Vec::new();
    for line in answer.body.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').expect(line);
        let value: f64 = value.parse().expect(line);
        samples.push((series.to_string(), value));
    }
    let master: Vec<_> = samples
        .iter()
        .filter(|(s, _)| s.starts_with("leader_election_master_status{"))
        .collect();
    assert_eq!(
        master,
        [
            &(
                r#"leader_election_master_status{name="metrics"}"#.to_string(),
                1.0
            ),
            &(
                r#"leader_election_master_status{name="metrics"}"#.to_string(),
                0.0
            ),
        ]
    );
    assert!(answer
        .body
        .contains("# TYPE leader_election_master_status gauge"));
}

/// `lease_elector_watching`: 1 for a candidate whose watch brings the
/// changes, 0 for one the server refuses the watch (a Role without `watch`
/// on leases, for it alone), which polls.
#[test]
fn metrics_say_which_elector_watches_and_which_polls_refused() {
    use lease_elector::testing::Fault;
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    server.inject(
        Fault::status(403)
            .path_contains("watch=true")
            .candidate("b")
            .forever(),
    );
    let spawn = |id: &str| {
        let client = lease_elector::Client::new(server.client_config(id)).unwrap();
        LeaderElector::builder(LeaseLock::new(client, NS, "watching", id))
            .build()
            .unwrap()
            .spawn()
            .unwrap()
    };
    let (a, a_events) = spawn("a");
    wait_started(&a_events);
    let (b, _b_events) = spawn("b");
    eventually("a to watch and b to poll", || {
        a.probe().status().watch == lease_elector::WatchMode::Watching
            && matches!(
                b.probe().status().watch,
                lease_elector::WatchMode::Polling(_)
            )
    });
    let h = health(&[&a, &b]);
    let answer = get(h.local_addr(), "/metrics");
    let watching: Vec<&str> = answer
        .body
        .lines()
        .filter(|l| l.starts_with("lease_elector_watching{"))
        .collect();
    let series = format!(r#"lease_elector_watching{{namespace="{NS}",name="watching"}}"#);
    assert_eq!(
        watching,
        [format!("{series} 1"), format!("{series} 0")],
        "{}",
        answer.body
    );
    assert!(answer.body.contains("# TYPE lease_elector_watching gauge"));
}

#[test]
fn head_answers_like_get_without_the_body() {
    let p = pair("head");
    let h = health(&[&p.a]);
    for path in ["/healthz", "/leader", "/metrics"] {
        let full = get(h.local_addr(), path);
        let head = send(
            h.local_addr(),
            format!("HEAD {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes(),
        );
        assert_eq!(head.status, full.status, "{path}");
        assert_eq!(head.body, "", "{path}");
        assert_eq!(
            head.header("Content-Length"),
            full.header("Content-Length"),
            "{path}"
        );
        assert_eq!(
            head.header("Content-Length")
                .unwrap()
                .parse::<usize>()
                .unwrap(),
            full.body.len()
        );
    }
}

#[test]
fn unknown_paths_get_404_other_methods_405_and_queries_are_ignored() {
    let p = pair("routes");
    let addr = health(&[&p.a]);
    let addr = addr.local_addr();
    assert_eq!(get(addr, "/").status, 404);
    assert_eq!(get(addr, "/healthz/").status, 404);
    assert_eq!(get(addr, "/nope").status, 404);
    assert_eq!(get(addr, "/healthz?verbose").status, 200);
    // HTTP/1.0 needs no Host; absolute-form targets are understood.
    let answer = send(addr, b"GET /healthz HTTP/1.0\r\n\r\n");
    assert_eq!((answer.status, answer.body.as_str()), (200, "ok\n"));
    let answer = send(
        addr,
        format!("GET http://{addr}/leader HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes(),
    );
    assert_eq!(answer.status, 200);
    for method in ["POST", "PUT", "DELETE", "OPTIONS", "get"] {
        let answer = send(
            addr,
            format!("{method} /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
                .as_bytes(),
        );
        assert_eq!(answer.status, 405, "{method}");
        assert_eq!(answer.header("Allow"), Some("GET, HEAD"), "{method}");
    }
}

#[test]
fn malformed_requests_get_400_oversized_heads_431_and_other_versions_505() {
    let p = pair("garbage");
    let h = health(&[&p.a]);
    let addr = h.local_addr();
    for request in [
        &b"hello\r\n\r\n"[..],
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", // a TLS hello, more or less
        b"GET /healthz HTTP/1.1\r\n\r\n",                        // no Host
        b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: t\r\nno colon here\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: t\r\n folded: x\r\n\r\n",
        b"GET healthz HTTP/1.1\r\nHost: t\r\n\r\n",
        b"GET /healthz HTTP/1.1 extra\r\nHost: t\r\n\r\n",
        b"GET /healthz HTTP/one\r\nHost: t\r\n\r\n",
    ] {
        let answer = send(addr, request);
        assert_eq!(answer.status, 400, "{:?}", String::from_utf8_lossy(request));
        assert!(answer.body.starts_with("bad request: "), "{}", answer.body);
    }
    // A head over the limit is refused, and the answer still arrives
    // although the server did not read all of it.
    let big = format!(
        "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Padding: {}\r\n\r\n",
        "x".repeat(16 * 1024)
    );
    let answer = send(addr, big.as_bytes());
    assert_eq!(answer.status, 431, "as Go's net/http answers it");
    assert!(answer.body.contains("8192 bytes"), "{}", answer.body);

    let answer = send(addr, b"GET /healthz HTTP/2.0\r\nHost: t\r\n\r\n");
    assert_eq!(answer.status, 505);
    // The server is still there.
    assert_eq!(get(addr, "/healthz").status, 200);
}

#[test]
fn silent_and_dripping_clients_delay_no_one_and_are_cut_off_at_the_timeout() {
    let p = pair("slow");
    let h = health(&[&p.a]);
    let addr = h.local_addr();
    let started = Instant::now();
    let mut silent = TcpStream::connect(addr).unwrap();
    let mut dripping = TcpStream::connect(addr).unwrap();
    let drip = {
        let mut conn = dripping.try_clone().unwrap();
        std::thread::spawn(move || {
            // One byte every 100 ms: each read succeeds, the head never ends.
            for b in b"GET /healthz HTTP/1.1\r\nX-Slow: "
                .iter()
                .chain([b'x'; 200].iter())
            {
                if conn.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    // Others are answered at once meanwhile.
    for _ in 0..3 {
        let t = Instant::now();
        assert_eq!(get(addr, "/healthz").status, 200);
        assert!(t.elapsed() < CONNECTION_TIMEOUT / 2, "{:?}", t.elapsed());
    }
    // Both slow clients are closed without an answer once their budget is
    // spent: the dripping one gets no more time than the silent one.
    let slack = Duration::from_secs(3);
    assert!(closed_within(&mut silent, CONNECTION_TIMEOUT + slack));
    assert!(closed_within(&mut dripping, CONNECTION_TIMEOUT + slack));
    let waited = started.elapsed();
    assert!(
        waited >= CONNECTION_TIMEOUT - Duration::from_millis(500),
        "closed early, after {waited:?}"
    );
    assert!(waited < CONNECTION_TIMEOUT + slack, "{waited:?}");
    drip.join().unwrap();
}

/// A flood of connections that never send a request, from this host.
fn idle_flood(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n).map(|_| TcpStream::connect(addr).unwrap()).collect()
}

/// Issue 17: a peer holding idle sockets open made every probe 503.
#[test]
fn healthz_answers_200_while_64_idle_connections_are_held_open() {
    let p = pair("idle-flood");
    let h = health(&[&p.a]);
    let addr = h.local_addr();
    let _idle = idle_flood(addr, 64);
    for _ in 0..5 {
        let t = Instant::now();
        let answer = try_send(addr, b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            .expect("an answer, not a reset");
        assert_eq!((answer.status, answer.body.as_str()), (200, "ok\n"));
        assert!(t.elapsed() < CONNECTION_TIMEOUT / 2, "{:?}", t.elapsed());
    }
}

#[test]
fn healthz_answers_200_while_slow_loris_connections_dribble_a_byte_at_a_time() {
    let p = pair("slow-loris");
    let h = health(&[&p.a]);
    let addr = h.local_addr();
    let mut slow = idle_flood(addr, 64);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dribbler = {
        let stop = stop.clone();
        let mut conns: Vec<TcpStream> = slow.iter_mut().map(|c| c.try_clone().unwrap()).collect();
        std::thread::spawn(move || {
            // Each connection sends its head one byte at a time, round
            // robin, and never finishes it; a closed one stops counting.
            let head = b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: ";
            let mut sent = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let b = head.get(sent).copied().unwrap_or(b'x');
                conns.retain_mut(|c| c.write_all(&[b]).is_ok());
                sent += 1;
                // The pace of the attack, not a synchronisation.
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    for _ in 0..5 {
        let t = Instant::now();
        let answer = try_send(addr, b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            .expect("an answer, not a reset");
        assert_eq!((answer.status, answer.body.as_str()), (200, "ok\n"));
        assert!(t.elapsed() < CONNECTION_TIMEOUT / 2, "{:?}", t.elapsed());
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    dribbler.join().unwrap();
}

/// The endpoint listens on every address (IPv4 and IPv6), so that `::1`
/// and `127.0.0.1` are two peers on one host; `None` where this host has no
/// dual-stack loopback.
fn dual_stack_health(probes: &[&ElectorHandle]) -> Option<HealthServer> {
    let h = HealthServer::start(
        "[::]:0",
        probes.iter().map(|h| h.probe()).collect(),
        TOLERANCE,
    )
    .ok()?;
    let port = h.local_addr().port();
    let both = TcpStream::connect(("::1", port)).is_ok()
        && TcpStream::connect(("127.0.0.1", port)).is_ok();
    both.then_some(h)
}

#[test]
fn a_peer_holds_at_most_its_share_and_its_flood_never_closes_another_peers_connection() {
    let p = pair("per-peer");
    let Some(h) = dual_stack_health(&[&p.a]) else {
        eprintln!("skipped: no dual-stack loopback ([::] reached through ::1 and 127.0.0.1)");
        return;
    };
    let port = h.local_addr().port();
    let v4: SocketAddr = ([127, 0, 0, 1], port).into();
    let v6: SocketAddr = (std::net::Ipv6Addr::LOCALHOST, port).into();
    // A slow client on 127.0.0.1 (the oldest connection of all) ...
    let mut other = TcpStream::connect(v4).unwrap();
    // ... then 64 idle connections from ::1.
    let mut flood = idle_flood(v6, 64);
    // Once a later request is answered, the acceptor has seen every one.
    assert_eq!(get(v4, "/healthz").status, 200);
    // ::1 keeps its newest MAX_CONNECTIONS_PER_PEER; the older ones were
    // closed without an answer.
    let kept = flood.split_off(64 - MAX_CONNECTIONS_PER_PEER);
    for conn in &mut flood {
        assert!(closed_within(conn, WAIT), "an old idle connection was kept");
    }
    for mut conn in kept {
        assert!(!closed_within(&mut conn, Duration::from_millis(50)));
    }
    // The other peer's connection was never touched: it still gets its answer.
    other
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    other.set_read_timeout(Some(WAIT)).unwrap();
    assert_eq!(read_answer(other).status, 200);
}

#[test]
fn a_full_peer_makes_room_by_closing_its_oldest_idle_connection_at_once() {
    let p = pair("busy");
    let h = health(&[&p.a]);
    let addr = h.local_addr();
    let opened = Instant::now();
    let mut idle = idle_flood(addr, MAX_CONNECTIONS_PER_PEER);
    // One more connection: the oldest idle one is closed, well before its
    // time-out, and the new one is served.
    assert_eq!(get(addr, "/healthz").status, 200);
    assert!(closed_within(&mut idle[0], WAIT));
    assert!(
        opened.elapsed() < CONNECTION_TIMEOUT / 2,
        "{:?}",
        opened.elapsed()
    );
    // One peer alone never fills the whole table.
    const { assert!(MAX_CONNECTIONS_PER_PEER < MAX_CONNECTIONS) };
}

#[test]
fn stop_returns_promptly_cuts_off_connections_and_closes_the_port() {
    let p = pair("stop");
    let h = health(&[&p.a]);
    let addr = h.local_addr();
    let mut silent = TcpStream::connect(addr).unwrap();
    assert_eq!(get(addr, "/healthz").status, 200);
    let t = Instant::now();
    h.stop();
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert!(closed_within(&mut silent, Duration::from_secs(1)));
    assert!(TcpStream::connect(addr).is_err(), "still listening");
    // Dropping does the same.
    let h = health(&[&p.a]);
    let addr = h.local_addr();
    let t = Instant::now();
    drop(h);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert!(TcpStream::connect(addr).is_err(), "still listening");
}

#[test]
fn the_endpoint_refuses_to_start_without_an_elector() {
    let err = HealthServer::start("127.0.0.1:0", Vec::new(), TOLERANCE).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
}
