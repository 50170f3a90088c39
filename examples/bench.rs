//! Figures for the README: request cost, handover, failover and takeover
//! latency with the watch and with polling (and its picture,
//! `docs/timeline.svg`), what the watch costs, threads, the load a fleet
//! puts on a failing API server, how late a leader steps down under each
//! kind of fault, one held request at client-go's timings, connections and
//! wire bytes per renew over TLS at short and long retry periods, what the
//! API server sees from one lease as candidates are added, what one
//! process pays per lease it holds, and (given the `elect` binary) its
//! resident memory.
//!
//! ```text
//! cargo run --release --example bench                       # everything (about half an hour)
//! cargo run --release --example bench -- --quick            # without the minute-long TLS cases,
//!                                                           # the watch's cost over 60 s, not 200
//! cargo run --release --example bench -- --only tls,shards  # some sections: steady, handover,
//!                                                           # watch-cost, threads, storm, lateness,
//!                                                           # held, tls, candidates, shards
//! cargo run --release --example bench -- --only handover --timings short,client-go
//!                                                           # some timings: short (4/3/1 s),
//!                                                           # client-go (15/10/2 s), OpenShift
//!                                                           # (137/107/26 s, about 5 minutes)
//! cargo run --release --example bench -- --only servers --control-plane DIR
//!                                                           # handover, failover, takeover and
//!                                                           # requests on the test server and on
//!                                                           # kube-apiserver + etcd (DIR from
//!                                                           # `.ci/control-plane up DIR`)
//! cargo run --release --example bench -- --elect PATH       # plus elect's RSS and threads
//! cargo run --release --example bench -- --lease-elect PATH # plus lease-elect's RSS, threads,
//!                                                           # COMMAND start and stop latency
//!                                                           # (also with --only lease-elect)
//! ```
//!
//! The per-lease figures (`shards`) come from child processes of this
//! bench, started with `--serve` (the API server) and `--hold` (the
//! electors), so that neither the server's threads nor the other sections'
//! memory count against the electors; the crash failovers of `handover`
//! kill candidates started with `--candidate`.
//!
//! `handover` (`bench/handover.rs`) runs at three timings, each with the
//! watch (the default), polling, and a server refusing the watch, and
//! draws the picture (`bench/timeline.rs`) from the short timings' run.
//! The other latencies use short timings (lease 2s, renew deadline 1.5s,
//! retry 0.5s) and are reported as multiples of those timings, which is
//! what carries over to a cluster. The step-down figures use lease 4s /
//! renew 3s / retry 1s (so that a request can be slowed to just under the
//! 1.5s cap), the held-request figure client-go's 15s / 10s / 2s.

#[path = "bench/handover.rs"]
mod handover;
#[path = "bench/servers.rs"]
mod servers;
#[path = "bench/timeline.rs"]
mod timeline;

use lease_elector::LeaderEvents;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use lease_elector::lock::Watcher;
use lease_elector::testing::{Fault, TestApiServer};
use lease_elector::{
    Client, ClientConfig, Deadline, ElectorConfig, ElectorHandle, LeaderElectionRecord,
    LeaderElector, LeaderEvent, LeaseLock, Lock, Wakeup,
};

const LEASE: Duration = Duration::from_secs(2);
const DEADLINE: Duration = Duration::from_millis(1500);
const RETRY: Duration = Duration::from_millis(500);
const NS: &str = "bench";

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn spawn(
    server: &TestApiServer,
    name: &str,
    id: &str,
    watch: bool,
    release: bool,
) -> Res<(ElectorHandle, LeaderEvents)> {
    let client = Client::new(ClientConfig::new(server.url()))?;
    Ok(LeaderElector::builder(LeaseLock::new(client, NS, name, id))
        .lease_duration(LEASE)
        .renew_deadline(DEADLINE)
        .retry_period(RETRY)
        .release_on_cancel(release)
        .watch(watch)
        .build()?
        .spawn()?)
}

fn wait_leading(rx: &LeaderEvents) -> Res<Instant> {
    loop {
        match rx.recv_timeout(Duration::from_secs(30))? {
            LeaderEvent::StartedLeading { at, .. } => return Ok(at),
            _ => continue,
        }
    }
}

/// Threads of this process the crate started (`lease-elector/…`,
/// `lease-watch/…`); the embedded server's own threads don't count.
fn elector_threads() -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("lease-elector") || name.starts_with("lease-watch"))
        .count()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn max(v: &[Duration]) -> Duration {
    v.iter().copied().max().unwrap_or_default()
}

fn steady_state(server: &TestApiServer) -> Res<()> {
    println!("\n| who | requests | bytes |");
    println!("|---|---|---|");
    let window = RETRY * 20;
    // A watching leader's own renews come back through its watch, and
    // are read from it: still one request per renew.
    for watch in [true, false] {
        let (leader, rx) = spawn(server, "steady-leader", "leader", watch, true)?;
        wait_leading(&rx)?;
        // Let the first renew happen so the cache is warm, then count.
        std::thread::sleep(RETRY * 2);
        server.reset_stats();
        std::thread::sleep(window);
        let s = server.stats();
        let renews = s.updates.max(1);
        println!("| leader, steady state, {} | {:.2} requests per renew ({} GET, {} PUT, {} watch over {} renews) | {} B sent + {} B received per renew |",
            if watch { "watching (the default)" } else { "polling" },
            s.requests as f64 / renews as f64, s.gets, s.updates, s.watches, renews, s.bytes_in / renews, s.bytes_out / renews);
        leader.stop()?;
    }
    let (leader, rx) = spawn(server, "steady", "leader", false, true)?;
    wait_leading(&rx)?;
    for watch in [false, true] {
        let (f, _frx) = spawn(server, "steady", "follower", watch, false)?;
        std::thread::sleep(RETRY * 2);
        server.reset_stats();
        std::thread::sleep(window);
        let s = server.stats();
        let periods = window.as_secs_f64() / RETRY.as_secs_f64();
        let follower = s.requests.saturating_sub(s.updates);
        println!(
            "| follower, {} | {:.2} requests per retry period ({} GET) | the leader's {} renews woke it {} times |",
            if watch { "watching" } else { "polling" },
            follower as f64 / periods,
            s.gets,
            s.updates,
            f.watch_changes()
        );
        f.stop()?;
    }
    leader.stop()?;
    Ok(())
}

fn thread_table(server: &TestApiServer) -> Res<()> {
    let before = elector_threads();
    let (a, arx) = spawn(server, "threads", "a", false, true)?;
    wait_leading(&arx)?;
    let polling = elector_threads() - before;
    let (b, brx) = spawn(server, "threads", "b", true, true)?;
    // A thread names itself once it runs: let both of b's start.
    brx.recv_timeout(Duration::from_secs(5))?;
    std::thread::sleep(RETRY);
    let watching = elector_threads() - before - polling;
    println!("\n| threads per elector | polling: {polling} | watching: {watching} |");
    b.stop()?;
    a.stop()?;
    Ok(())
}

fn timings(lease: Duration, deadline: Duration, retry: Duration) -> ElectorConfig {
    ElectorConfig {
        lease_duration: lease,
        renew_deadline: deadline,
        retry_period: retry,
        ..ElectorConfig::default()
    }
}

/// One call the elector made on its lock: a request (two after a 401 with
/// a token file), timed on the real clock the elector also uses.
#[derive(Debug, Clone)]
struct Call {
    what: &'static str,
    start: Instant,
    end: Instant,
    ok: bool,
}

type Calls = Arc<Mutex<Vec<Call>>>;

/// A `LeaseLock` that logs every call, so attempts can be counted and timed
/// per candidate (the server's counters only have totals).
#[derive(Debug)]
struct Recorded {
    inner: LeaseLock,
    calls: Calls,
}

impl Recorded {
    fn note<T>(
        &self,
        what: &'static str,
        start: Instant,
        r: lease_elector::Result<T>,
    ) -> lease_elector::Result<T> {
        let call = Call {
            what,
            start,
            end: Instant::now(),
            ok: r.is_ok(),
        };
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(call);
        r
    }
}

impl Recorded {
    /// A read, as a follower or not, noted as a `GET` or as answered from
    /// the watch (a change it brought, or its word that nothing changed:
    /// no request was sent).
    fn read(
        &mut self,
        deadline: &Deadline,
        follower: bool,
    ) -> lease_elector::Result<LeaderElectionRecord> {
        let start = Instant::now();
        let r = if follower {
            self.inner.follow(deadline)
        } else {
            self.inner.get(deadline)
        };
        let what = if self.inner.last_get_was_local() {
            "GET (from the watch)"
        } else {
            "GET"
        };
        self.note(what, start, r)
    }
}

impl Lock for Recorded {
    fn get(&mut self, deadline: &Deadline) -> lease_elector::Result<LeaderElectionRecord> {
        self.read(deadline, false)
    }

    fn follow(&mut self, deadline: &Deadline) -> lease_elector::Result<LeaderElectionRecord> {
        self.read(deadline, true)
    }

    fn last_get_was_local(&self) -> bool {
        self.inner.last_get_was_local()
    }

    fn version(&self) -> Option<String> {
        self.inner.version()
    }

    fn last_update_created(&self) -> bool {
        self.inner.last_update_created()
    }

    fn create(
        &mut self,
        record: &LeaderElectionRecord,
        deadline: &Deadline,
    ) -> lease_elector::Result<()> {
        let start = Instant::now();
        let r = self.inner.create(record, deadline);
        self.note("POST", start, r)
    }

    fn update(
        &mut self,
        record: &LeaderElectionRecord,
        deadline: &Deadline,
    ) -> lease_elector::Result<()> {
        let start = Instant::now();
        let r = self.inner.update(record, deadline);
        self.note("PUT", start, r)
    }

    fn identity(&self) -> &str {
        self.inner.identity()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn record_event(&self, message: &str) {
        self.inner.record_event(message)
    }

    fn watch(
        &self,
        on_change: Wakeup,
        backoff: Duration,
    ) -> Option<lease_elector::Result<Watcher>> {
        self.inner.watch(on_change, backoff)
    }
}

fn candidate(
    client: ClientConfig,
    name: &str,
    id: &str,
    cfg: &ElectorConfig,
) -> Res<(ElectorHandle, LeaderEvents, Calls)> {
    let calls = Calls::default();
    let lock = Recorded {
        inner: LeaseLock::new(Client::new(client)?, NS, name, id),
        calls: calls.clone(),
    };
    let (handle, events) = LeaderElector::builder(lock)
        .config(cfg.clone())
        .build()?
        .spawn()?;
    Ok((handle, events, calls))
}

/// `StoppedLeading.at`, or `None` when it did not come within `within`.
fn wait_stopped(rx: &LeaderEvents, within: Duration) -> Option<Instant> {
    let until = Instant::now() + within;
    loop {
        let left = until.checked_duration_since(Instant::now())?;
        match rx.recv_timeout(left) {
            Ok(LeaderEvent::StoppedLeading { at, .. }) => return Some(at),
            Ok(_) => continue,
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
        }
    }
}

const STORM_CANDIDATES: usize = 3;
const STORM_PERIODS: u32 = 16;

/// A fleet against a failing API server, counted once every candidate's
/// observed lease has expired (so none has a lease expiry left to wait
/// for, which is when retries used to come every millisecond): each
/// candidate may make at most one attempt per retry period, and an attempt
/// is one request in these faults (a `GET` that fails).
fn storm_table(server: &TestApiServer) -> Res<()> {
    let cfg = ElectorConfig {
        rejoin: true, // the leader that steps down keeps competing too
        ..timings(LEASE, DEADLINE, RETRY)
    };
    let window = RETRY * STORM_PERIODS;
    let periods = f64::from(STORM_PERIODS);
    println!("\n| {STORM_CANDIDATES} candidates, lease expired, {STORM_PERIODS} retry periods | requests per candidate per retry period: mean, worst candidate | server saw, per candidate per retry period | budget |");
    println!("|---|---|---|---|");
    type Apply = fn(&TestApiServer);
    let faults: [(&str, Apply, Apply); 3] = [
        (
            "outage (connections closed unanswered)",
            |s| s.set_outage(true),
            |s| s.set_outage(false),
        ),
        (
            "500 storm",
            |s| s.inject(Fault::status(500).forever()),
            TestApiServer::clear_faults,
        ),
        (
            "connections dropped after the request",
            |s| s.inject(Fault::drop_connection().forever()),
            TestApiServer::clear_faults,
        ),
    ];
    for (i, (what, apply, clear)) in faults.iter().enumerate() {
        let name = format!("storm-{i}");
        let mut fleet = Vec::new();
        for c in 0..STORM_CANDIDATES {
            let (h, rx, calls) = candidate(
                ClientConfig::new(server.url()),
                &name,
                &format!("c{c}"),
                &cfg,
            )?;
            if c == 0 {
                wait_leading(&rx)?;
            }
            fleet.push((h, rx, calls));
        }
        // Let the followers observe the leader's renewals.
        std::thread::sleep(RETRY * 3);
        apply(server);
        // Every observation predates the fault: after leaseDuration every
        // candidate holds an expired lease (and the leader has stepped
        // down, renewDeadline < leaseDuration).
        std::thread::sleep(LEASE + RETRY);
        server.reset_stats();
        let from = Instant::now();
        std::thread::sleep(window);
        let to = Instant::now();
        let s = server.stats();
        clear(server);
        let per_candidate: Vec<f64> = fleet
            .iter()
            .map(|(_, _, calls)| {
                let calls = calls.lock().unwrap_or_else(PoisonError::into_inner);
                calls
                    .iter()
                    .filter(|c| c.start >= from && c.start < to)
                    .count() as f64
                    / periods
            })
            .collect();
        let mean = per_candidate.iter().sum::<f64>() / per_candidate.len() as f64;
        let worst = per_candidate.iter().copied().fold(0.0, f64::max);
        let fleet_periods = periods * STORM_CANDIDATES as f64;
        let seen = if s.requests == 0 {
            format!(
                "{:.2} connections ({} in all, 0 requests read)",
                s.connections as f64 / fleet_periods,
                s.connections
            )
        } else {
            format!(
                "{:.2} requests ({} in all, {} of them watches, {} new connections)",
                s.requests as f64 / fleet_periods,
                s.requests,
                s.watches,
                s.connections
            )
        };
        println!(
            "| {what} | {mean:.2}, worst {worst:.2} | {seen} | ≤ 1 attempt (1 request) per retry period; jitter makes the mean 1/1.6 = 0.63 |"
        );
        for (h, _, _) in fleet {
            h.stop()?;
        }
    }
    Ok(())
}

/// The bench's own temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Res<TempDir> {
        let dir =
            std::env::temp_dir().join(format!("lease-elector-bench-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How late `StoppedLeading` comes, from the start of the last successful
/// renew, for faults that hit only the leader (matched by its token; it
/// reads its token from a file, as in a pod, so a 401 makes it re-read the
/// file and retry once within the same budget). A follower is served
/// normally throughout.
fn lateness_table() -> Res<()> {
    let cfg = timings(
        Duration::from_secs(4),
        Duration::from_secs(3),
        Duration::from_secs(1),
    );
    let deadline = cfg.renew_deadline;
    let cap = cfg.request_cap();
    let slow = cap.saturating_sub(Duration::from_millis(100));
    let server = TestApiServer::builder()
        .tokens(&["leader", "follower"])
        .build()?;
    server.add_namespace(NS);
    let dir = TempDir::new("lateness")?;
    let token_file = dir.0.join("token");
    std::fs::write(&token_file, "leader")?;
    let cases: [(String, Vec<Fault>); 7] = [
        (
            format!("500 after {slow:?}"),
            vec![Fault::latency(slow), Fault::status(500)],
        ),
        (
            format!("401 after {slow:?} (token file re-read, retried in the same budget)"),
            vec![Fault::latency(slow), Fault::status(401)],
        ),
        (
            format!("409 on every PUT, every request {slow:?} late"),
            vec![Fault::latency(slow), Fault::status(409).method("PUT")],
        ),
        (
            "500 on PUT, then the GET hangs".to_string(),
            vec![
                Fault::status(500).method("PUT"),
                Fault::hang().method("GET"),
            ],
        ),
        ("every request hangs".to_string(), vec![Fault::hang()]),
        (
            "connection dropped".to_string(),
            vec![Fault::drop_connection()],
        ),
        (
            "503 with Retry-After: 18446744073709551615".to_string(),
            vec![Fault::retry_after(503, "18446744073709551615")],
        ),
    ];
    println!(
        "\n| fault on the leader only (lease {:?}, renew deadline {deadline:?}, retry {:?}, per-request cap {cap:?}) | last successful renew began → StoppedLeading | / renewDeadline |",
        cfg.lease_duration, cfg.retry_period
    );
    println!("|---|---|---|");
    let mut worst: Option<f64> = Some(0.0);
    for (i, (what, faults)) in cases.into_iter().enumerate() {
        let name = format!("late-{i}");
        let url = server.url();
        let (leader, lrx, _) = candidate(
            ClientConfig::new(url.clone()).token_file(&token_file),
            &name,
            "leader",
            &cfg,
        )?;
        wait_leading(&lrx)?;
        let (follower, _frx, _) = candidate(
            ClientConfig::new(url).token("follower"),
            &name,
            "follower",
            &cfg,
        )?;
        // Into steady renewing before the fault.
        std::thread::sleep(cfg.retry_period * 3 / 2);
        for f in faults {
            server.inject(f.bearer("leader").forever());
        }
        let stopped = wait_stopped(&lrx, deadline * 3);
        server.clear_faults();
        let ratio = match (stopped, leader.probe().last_renew()) {
            (Some(at), Some(last)) => {
                let late = at.saturating_duration_since(last);
                let ratio = late.as_secs_f64() / deadline.as_secs_f64();
                println!("| {what} | {} ms | {ratio:.3} |", late.as_millis());
                Some(ratio)
            }
            _ => {
                println!(
                    "| {what} | no StoppedLeading within {:?} | — |",
                    deadline * 3
                );
                None
            }
        };
        worst = worst.zip(ratio).map(|(w, r)| w.max(r));
        leader.stop()?;
        follower.stop()?;
    }
    match worst {
        Some(w) => println!("| worst | | {w:.3} × renewDeadline (goal ≤ 1.000 + a few ms) |"),
        None => {
            println!("| worst | a leader never stepped down | (goal ≤ 1.000 × renewDeadline) |")
        }
    }
    server.shutdown();
    Ok(())
}

/// client-go's timings (request cap 5 s), one renew held by the server:
/// the request is abandoned at the cap and the retry comes a retry period
/// after the held attempt *started* (at once, since it took longer), so the
/// term goes on. Then, for comparison, every request of the leader hangs:
/// how late `StoppedLeading` comes when the last request is cut by the
/// round's deadline after seconds, not milliseconds.
fn held_request(server: &TestApiServer) -> Res<()> {
    let cfg = ElectorConfig::default();
    let (lease, deadline, retry, cap) = (
        cfg.lease_duration,
        cfg.renew_deadline,
        cfg.retry_period,
        cfg.request_cap(),
    );
    let (leader, rx, calls) = candidate(ClientConfig::new(server.url()), "held", "leader", &cfg)?;
    wait_leading(&rx)?;
    // The next renew (a retry period from now) is held until cleared.
    server.inject(Fault::hang().method("PUT").path_contains("/leases/held"));
    let stopped = wait_stopped(&rx, lease);
    server.clear_faults();
    let calls = calls.lock().unwrap_or_else(PoisonError::into_inner).clone();
    leader.stop()?;
    let held = calls
        .iter()
        .find(|c| c.what == "PUT" && !c.ok)
        .ok_or("the held PUT failed")?;
    let before = calls
        .iter()
        .rev()
        .find(|c| c.ok && c.end <= held.start)
        .ok_or("a renew succeeded before the held one")?;
    let after = calls
        .iter()
        .find(|c| c.what == "PUT" && c.ok && c.start > held.start)
        .ok_or("a renew succeeded after the held one")?;
    let secs = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64();
    println!(
        "\n| client-go's timings (lease {lease:?}, renew deadline {deadline:?}, retry {retry:?}, per-request cap {cap:?}) | value |"
    );
    println!("|---|---|");
    println!(
        "| one renew held: abandoned after | {:.3} s = {:.3} × cap |",
        secs(held.start, held.end),
        secs(held.start, held.end) / cap.as_secs_f64()
    );
    println!(
        "| one renew held: held PUT began → successful retry began | {:.3} s = {:.2} × retryPeriod |",
        secs(held.start, after.start),
        secs(held.start, after.start) / retry.as_secs_f64()
    );
    println!(
        "| one renew held: last renew before it began → successful retry began | {:.3} s = {:.3} × renewDeadline |",
        secs(before.start, after.start),
        secs(before.start, after.start) / deadline.as_secs_f64()
    );
    println!(
        "| one renew held: term survived (no StoppedLeading within {lease:?} of the fault) | {} |",
        if stopped.is_none() { "yes" } else { "no" }
    );

    let (leader, rx, _) = candidate(ClientConfig::new(server.url()), "hung", "leader", &cfg)?;
    wait_leading(&rx)?;
    server.inject(Fault::hang().path_contains("/leases/hung").forever());
    let stopped = wait_stopped(&rx, deadline * 2);
    server.clear_faults();
    match (stopped, leader.probe().last_renew()) {
        (Some(at), Some(last)) => {
            let late = at.saturating_duration_since(last);
            println!(
                "| every request hangs: last successful renew began → StoppedLeading | {} ms = {:.3} × renewDeadline |",
                late.as_millis(),
                late.as_secs_f64() / deadline.as_secs_f64()
            );
        }
        _ => println!(
            "| every request hangs: last successful renew began → StoppedLeading | none within {:?} |",
            deadline * 2
        ),
    }
    leader.stop()?;
    Ok(())
}

fn status_field(pid: u32, field: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))
        .map(|l| l[field.len()..].trim().to_string())
}

fn elect_footprint(server: &TestApiServer, path: &str) -> Res<()> {
    println!("\n| elect binary while leading (lease 2 s, renew deadline 1.5 s, retry 0.5 s) | peak RSS (VmHWM) | threads | exit, lease released |");
    println!("|---|---|---|---|");
    for (flags, threads_are) in [
        (&[][..], "main, elector, watch, stdin, signals, forwarder"),
        (
            &["--no-watch"][..],
            "main, elector, stdin, signals, forwarder",
        ),
    ] {
        let name = format!("footprint{}", flags.len());
        let mut child = Command::new(path)
            .args([
                "--server",
                &server.url(),
                "--namespace",
                NS,
                "--name",
                &name,
                "--identity",
                "elect-1",
            ])
            .args([
                "--lease-duration",
                "2",
                "--renew-deadline",
                "1.5",
                "--retry-period",
                "0.5",
                "--release-on-cancel",
            ])
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        loop {
            let line = lines.next().ok_or("elect exited before leading")??;
            if line.starts_with("LEADING") {
                break;
            }
        }
        // Lead through a few renewals before sampling.
        std::thread::sleep(RETRY * 6);
        let hwm = status_field(child.id(), "VmHWM:").unwrap_or_default();
        let threads = status_field(child.id(), "Threads:").unwrap_or_default();
        drop(child.stdin.take()); // stdin closes: elect releases and exits
        let status = child.wait()?;
        let released = server
            .lease(NS, &name)
            .map(|l| l.record().holder_identity.is_empty());
        let mode = if flags.is_empty() {
            "watching (the default)"
        } else {
            "`--no-watch`"
        };
        println!("| {mode} | {hwm} | {threads} ({threads_are}) | {status}, {released:?} |");
    }
    Ok(())
}

/// A `lease-elect` started by the bench against a TLS server with a
/// bearer token, its stdout read line by line.
struct LeaseElect {
    child: std::process::Child,
    lines: std::io::Lines<BufReader<ChildStdout>>,
}

impl LeaseElect {
    fn start(
        path: &str,
        server: &TestApiServer,
        dir: &Path,
        name: &str,
        extra: &[&str],
        command: &[&str],
    ) -> Res<LeaseElect> {
        let mut child = Command::new(path)
            .args(["--server", &server.url()])
            .arg("--ca-file")
            .arg(dir.join("ca.pem"))
            .arg("--token-file")
            .arg(dir.join("token"))
            .args(["--namespace", NS, "--name", name, "--identity", name])
            .args([
                "--lease-duration",
                "2",
                "--renew-deadline",
                "1.5",
                "--retry-period",
                "0.5",
            ])
            .args(extra)
            .arg("--")
            .args(command)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            // Its warnings (failed renews, the loss) would break the table.
            .stderr(Stdio::null())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        Ok(LeaseElect {
            child,
            lines: BufReader::new(stdout).lines(),
        })
    }

    /// Wall-clock time at which a line starting with `word` was read.
    fn wait_line(&mut self, word: &str) -> Res<SystemTime> {
        loop {
            let line = self
                .lines
                .next()
                .ok_or_else(|| format!("lease-elect exited before {word}"))??;
            if line.starts_with(word) {
                return Ok(SystemTime::now());
            }
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for LeaseElect {
    fn drop(&mut self) {
        // Only if the bench bailed out: the supervisor then kills COMMAND.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Processes whose parent is `pid` (from `/proc/*/stat`).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .filter_map(|p| {
            let child: u32 = p.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).ok()?;
            // `pid (comm) state ppid ...`; comm may hold spaces.
            let ppid: u32 = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            (ppid == pid).then_some(child)
        })
        .collect()
}

/// The names of a process's threads (`/proc/PID/task/*/comm`).
fn thread_names(pid: u32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = tasks
        .filter_map(|t| {
            let comm = std::fs::read_to_string(t.ok()?.path().join("comm")).ok()?;
            Some(comm.trim().to_string())
        })
        .collect();
    names.sort();
    names
}

/// `GET path` on a plain HTTP endpoint: the status line, if any.
fn http_status(addr: &str, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    answer.lines().next().map(str::to_string)
}

/// A nanosecond wall-clock timestamp (`date +%s%N`) a script wrote to
/// `file`, once it is there in full.
fn wait_stamp(file: &Path, within: Duration) -> Res<SystemTime> {
    let until = Instant::now() + within;
    loop {
        if let Ok(text) = std::fs::read_to_string(file) {
            if let Some(ns) = text.strip_suffix('\n').and_then(|t| t.parse::<u64>().ok()) {
                return Ok(SystemTime::UNIX_EPOCH + Duration::from_nanos(ns));
            }
        }
        if Instant::now() > until {
            return Err(format!("no timestamp in {} within {within:?}", file.display()).into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn since(from: SystemTime, to: SystemTime) -> Duration {
    to.duration_since(from).unwrap_or_default()
}

const LEASE_ELECT_RUNS: usize = 5;

/// `lease-elect` over TLS with a bearer token (lease 2s, renew deadline
/// 1.5s, retry 0.5s): its footprint and its supervisor's while leading with
/// `--health-addr` and `-- sleep 1000`, then, over a few runs, how soon
/// COMMAND starts after `LEADING` and how soon it has stopped after
/// `STOPPED` when every request fails with 500. COMMAND is a shell script
/// that writes `date +%s%N` at start and from its TERM trap, so both
/// latencies include a `date` fork and exec (about a millisecond).
fn lease_elect_table(path: &str) -> Res<()> {
    let server = TestApiServer::builder()
        .tls(true)
        .tokens(&["leader"])
        .build()?;
    server.add_namespace(NS);
    let dir = TempDir::new("lease-elect")?;
    std::fs::write(dir.0.join("ca.pem"), server.ca_pem())?;
    std::fs::write(dir.0.join("token"), "leader")?;

    // 1. Footprint while leading.
    let health = {
        let free = TcpListener::bind("127.0.0.1:0")?;
        free.local_addr()?.to_string()
    };
    let mut le = LeaseElect::start(
        path,
        &server,
        &dir.0,
        "footprint",
        &["--health-addr", &health],
        &["sleep", "1000"],
    )?;
    le.wait_line("LEADING")?;
    // Lead through a few renewals before sampling.
    std::thread::sleep(RETRY * 6);
    let pid = le.pid();
    let hwm = status_field(pid, "VmHWM:").unwrap_or_default();
    let threads = status_field(pid, "Threads:").unwrap_or_default();
    let names = thread_names(pid).join(", ");
    let supervisors = children_of(pid);
    let supervisor = *supervisors.first().ok_or("lease-elect has no child")?;
    let sup_hwm = status_field(supervisor, "VmHWM:").unwrap_or_default();
    let sup_threads = status_field(supervisor, "Threads:").unwrap_or_default();
    let sup_names = thread_names(supervisor).join(", ");
    let command = children_of(supervisor);
    // After sampling: the endpoint serves a connection on a thread of its own.
    let healthz = http_status(&health, "/healthz").unwrap_or_else(|| "no answer".into());
    let command_hwm = command
        .first()
        .and_then(|&c| status_field(c, "VmHWM:"))
        .unwrap_or_default();
    // SIGTERM is passed on to `sleep`; lease-elect releases and exits 0.
    Command::new("kill").arg(pid.to_string()).status()?;
    let status = le.child.wait()?;
    let released = server
        .lease(NS, "footprint")
        .map(|l| l.record().holder_identity.is_empty());
    println!("\n| lease-elect over TLS with a token, `--health-addr`, `-- sleep 1000`, while leading | peak RSS (VmHWM) | threads |");
    println!("|---|---|---|");
    println!("| lease-elect (GET /healthz: {healthz}) | {hwm} | {threads} ({names}) |");
    println!("| its supervisor (`lease-elect --supervise`, {} child of lease-elect) | {sup_hwm} | {sup_threads} ({sup_names}) |", supervisors.len());
    println!("| COMMAND (`sleep 1000`, for scale) | {command_hwm} | |");
    println!("\nlease-elect on SIGTERM: {status}, lease released: {released:?}");

    // 2 and 3. COMMAND's start and stop latencies.
    let script = dir.0.join("child.sh");
    std::fs::write(
        &script,
        "trap 'date +%s%N > \"$1.stop\"; exit 0' TERM\ndate +%s%N > \"$1.start\"\nsleep 1000 &\nwait\n",
    )?;
    let script = script.to_str().ok_or("temp path is not UTF-8")?.to_string();
    let (mut start, mut stop, mut exit) = (Vec::new(), Vec::new(), Vec::new());
    let mut exits = Vec::new();
    for run in 0..LEASE_ELECT_RUNS {
        let name = format!("latency-{run}");
        let stamp = dir.0.join(&name);
        let stamp_arg = stamp.to_str().ok_or("temp path is not UTF-8")?;
        let mut le = LeaseElect::start(
            path,
            &server,
            &dir.0,
            &name,
            &[],
            &["sh", &script, stamp_arg],
        )?;
        let leading = le.wait_line("LEADING")?;
        let started = wait_stamp(&stamp.with_extension("start"), Duration::from_secs(5))?;
        start.push(since(leading, started));
        // Lead for a few renewals, then fail every request.
        std::thread::sleep(RETRY * 4);
        server.inject(Fault::status(500).forever());
        let stopped = le.wait_line("STOPPED")?;
        let ended = wait_stamp(&stamp.with_extension("stop"), LEASE)?;
        stop.push(since(stopped, ended));
        let status = le.child.wait()?;
        exit.push(since(stopped, SystemTime::now()));
        exits.push(
            status
                .code()
                .map_or("signal".to_string(), |c| c.to_string()),
        );
        server.clear_faults();
    }
    exits.dedup();
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
    println!("\n| lease-elect with COMMAND, {LEASE_ELECT_RUNS} runs (lease {LEASE:?}, renew deadline {DEADLINE:?}, retry {RETRY:?}) | median | worst |");
    println!("|---|---|---|");
    println!(
        "| `LEADING` on stdout → COMMAND's first action (`date +%s%N` in a shell script) | {} | {} |",
        ms(median(start.clone())),
        ms(max(&start))
    );
    println!(
        "| every request 500: `STOPPED` on stdout → COMMAND's TERM trap ran (`date +%s%N`, then exit) | {} | {} |",
        ms(median(stop.clone())),
        ms(max(&stop))
    );
    println!(
        "| every request 500: `STOPPED` on stdout → lease-elect exited (status {}; release fails, lease left to expire) | {} | {} |",
        exits.join(", "),
        ms(median(exit.clone())),
        ms(max(&exit))
    );
    server.shutdown();
    Ok(())
}

/// Port of a server URL (`http(s)://127.0.0.1:PORT`).
fn port_of(url: &str) -> Res<u16> {
    let port = url.rsplit(':').next().ok_or("URL has a port")?;
    Ok(port.parse()?)
}

/// Established TCP connections whose local port is `port`: on loopback,
/// the server's ends of the connections open to it.
fn open_connections(port: u16) -> usize {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return 0;
    };
    let local = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let mut cols = l.split_whitespace().skip(1);
            let (Some(addr), _, Some(state)) = (cols.next(), cols.next(), cols.next()) else {
                return false;
            };
            addr.ends_with(&local) && state == "01"
        })
        .count()
}

/// CPU time of this process's live threads, in ns (each thread's
/// `schedstat`: exact, where `/proc/self/stat` counts 10 ms ticks).
fn cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| {
            let stat = std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok()?;
            stat.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

/// A `/proc/PID/status` field in kB (`VmRSS:`, `VmHWM:`) or a count
/// (`Threads:`), as a number.
fn status_number(pid: u32, field: &str) -> u64 {
    status_field(pid, field)
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// `key=value` pairs of a line the child processes print.
fn fields(line: &str) -> std::collections::HashMap<String, u64> {
    line.split_whitespace()
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// A TCP relay in front of a server that counts the bytes each way: what
/// TLS puts on the wire (records, handshakes), which the server's own
/// counters (HTTP bytes) cannot see.
struct Relay {
    addr: SocketAddr,
    up: Arc<AtomicU64>,
    down: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl Relay {
    fn start(target: SocketAddr) -> Res<Relay> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let addr = listener.local_addr()?;
        let (up, down) = (Arc::<AtomicU64>::default(), Arc::<AtomicU64>::default());
        let stop = Arc::<AtomicBool>::default();
        let acceptor = {
            let (up, down, stop) = (up.clone(), down.clone(), stop.clone());
            std::thread::Builder::new()
                .name("bench/relay".into())
                .spawn(move || {
                    for client in listener.incoming() {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        if let Ok(client) = client {
                            // A failed connect closes the client's side:
                            // the same as a server that went away.
                            let _ = Relay::pair(client, target, &up, &down);
                        }
                    }
                })?
        };
        Ok(Relay {
            addr,
            up,
            down,
            stop,
            acceptor: Some(acceptor),
        })
    }

    /// Two pumps for one connection; each ends when its side closes.
    fn pair(
        client: TcpStream,
        target: SocketAddr,
        up: &Arc<AtomicU64>,
        down: &Arc<AtomicU64>,
    ) -> std::io::Result<()> {
        let server = TcpStream::connect(target)?;
        client.set_nodelay(true)?;
        server.set_nodelay(true)?;
        let (client2, server2) = (client.try_clone()?, server.try_clone()?);
        let (up, down) = (up.clone(), down.clone());
        std::thread::Builder::new()
            .name("bench/relay-up".into())
            .spawn(move || Relay::pump(client, server, &up))?;
        std::thread::Builder::new()
            .name("bench/relay-down".into())
            .spawn(move || Relay::pump(server2, client2, &down))?;
        Ok(())
    }

    fn pump(mut from: TcpStream, mut to: TcpStream, count: &AtomicU64) {
        let mut buf = [0u8; 16 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buf) {
            count.fetch_add(n as u64, Ordering::Relaxed);
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        // Pass the FIN on (a server's idle close reaches the client).
        let _ = to.shutdown(Shutdown::Write);
    }

    fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Bytes (client → server, server → client) so far.
    fn bytes(&self) -> (u64, u64) {
        (
            self.up.load(Ordering::Relaxed),
            self.down.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

/// Long enough for an answer the client has read to be counted by the
/// server too (it counts once the answer is written).
const SETTLE: Duration = Duration::from_millis(100);

/// One leader alone over TLS with a bearer token: what a renew costs on
/// the wire and in connections at a given retry period.
struct TlsCase {
    what: String,
    cfg: ElectorConfig,
    /// The server closes connections idle this long.
    idle: Option<Duration>,
    renews: usize,
}

/// What a [`TlsCase`] measured, over its renews (the acquisition excluded).
#[derive(Debug, Default, Clone)]
struct TlsRow {
    renews: u64,
    failed: u64,
    requests: u64,
    connections: u64,
    connections_in_all: u64,
    full: u64,
    resumed: u64,
    http_sent: u64,
    http_received: u64,
    tcp_sent: u64,
    tcp_received: u64,
}

impl TlsRow {
    fn per_renew(&self, v: u64) -> f64 {
        v as f64 / self.renews.max(1) as f64
    }

    fn tcp_per_renew(&self) -> f64 {
        self.per_renew(self.tcp_sent + self.tcp_received)
    }
}

fn tls_case(case: &TlsCase) -> Res<TlsRow> {
    let mut builder = TestApiServer::builder().tls(true).tokens(&["leader"]);
    if let Some(idle) = case.idle {
        builder = builder.idle_timeout(idle);
    }
    let server = builder.build()?;
    server.add_namespace(NS);
    let relay = Relay::start(server.url().trim_start_matches("https://").parse()?)?;
    let client = ClientConfig::new(relay.url())
        .ca_pem(server.ca_pem())
        .token("leader");
    let (leader, rx, calls) = candidate(client, "cost", "leader", &case.cfg)?;
    wait_leading(&rx)?;
    std::thread::sleep(SETTLE);
    let (s0, b0, from) = (server.stats(), relay.bytes(), Instant::now());
    let give_up = from + case.cfg.retry_period * (case.renews as u32 + 3);
    let renewed = || {
        calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|c| c.what == "PUT" && c.ok && c.start >= from)
            .count()
    };
    while renewed() < case.renews {
        if Instant::now() > give_up {
            return Err(format!("{}: only {} renews in time", case.what, renewed()).into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(SETTLE);
    let (s1, b1, to) = (server.stats(), relay.bytes(), Instant::now());
    leader.stop()?;
    let calls = calls.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let window: Vec<&Call> = calls
        .iter()
        .filter(|c| c.start >= from && c.start < to)
        .collect();
    server.shutdown();
    drop(relay);
    Ok(TlsRow {
        renews: window.iter().filter(|c| c.what == "PUT" && c.ok).count() as u64,
        failed: window.iter().filter(|c| !c.ok).count() as u64,
        requests: s1.requests - s0.requests,
        connections: s1.connections - s0.connections,
        connections_in_all: s1.connections,
        full: s1.tls_full_handshakes - s0.tls_full_handshakes,
        resumed: s1.tls_resumed_handshakes - s0.tls_resumed_handshakes,
        http_sent: s1.bytes_in - s0.bytes_in,
        http_received: s1.bytes_out - s0.bytes_out,
        tcp_sent: b1.0 - b0.0,
        tcp_received: b1.1 - b0.1,
    })
}

/// Connections and bytes per renew for a leader alone over TLS with a
/// bearer token: at a short retry period, at one longer than ureq's
/// default idle age (15 s), and against a server that closes idle
/// connections before the next renew. The cases run side by side, each
/// against its own server; `quick` leaves out the two long ones.
fn tls_table(quick: bool) -> Res<()> {
    let secs = Duration::from_secs;
    let mut cases = vec![TlsCase {
        what: format!("retry {RETRY:?} (lease {LEASE:?}, renew deadline {DEADLINE:?})"),
        cfg: timings(LEASE, DEADLINE, RETRY),
        idle: None,
        renews: 20,
    }];
    if !quick {
        cases.push(TlsCase {
            what: "retry 20s (lease 60s, renew deadline 40s): past ureq's default 15 s idle age"
                .into(),
            cfg: timings(secs(60), secs(40), secs(20)),
            idle: None,
            renews: 3,
        });
        cases.push(TlsCase {
            what: "retry 12s, the server closes connections idle for 5s (lease 30s, renew deadline 20s)"
                .into(),
            cfg: timings(secs(30), secs(20), secs(12)),
            idle: Some(secs(5)),
            renews: 3,
        });
    }
    // Minutes of waiting each: run them side by side.
    let rows: Vec<Result<TlsRow, String>> = std::thread::scope(|s| {
        let running: Vec<_> = cases
            .iter()
            .map(|c| s.spawn(move || tls_case(c).map_err(|e| e.to_string())))
            .collect();
        running
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("case panicked".into())))
            .collect()
    });
    println!("\n| leader alone, TLS + bearer token | renews | new connections per renew (in all, acquisition included) | TLS handshakes in the window: full / resumed | requests per renew | HTTP bytes per renew: sent + received | TCP bytes per renew (TLS records): sent + received |");
    println!("|---|---|---|---|---|---|---|");
    let mut measured = Vec::new();
    for (case, row) in cases.iter().zip(rows) {
        let r = row?;
        println!(
            "| {} | {}{} | {:.2} ({}) | {} / {} | {:.2} | {:.0} + {:.0} B | {:.0} + {:.0} B |",
            case.what,
            r.renews,
            if r.failed > 0 {
                format!(" ({} failed calls)", r.failed)
            } else {
                String::new()
            },
            r.per_renew(r.connections),
            r.connections_in_all,
            r.full,
            r.resumed,
            r.per_renew(r.requests),
            r.per_renew(r.http_sent),
            r.per_renew(r.http_received),
            r.per_renew(r.tcp_sent),
            r.per_renew(r.tcp_received),
        );
        measured.push(r);
    }
    let kept = &measured[0];
    print!(
        "\nA leader keeps the one connection it acquired with for its whole term ({:.2} new connections per renew at {RETRY:?}",
        kept.per_renew(kept.connections)
    );
    if let [_, long, idle] = measured.as_slice() {
        println!(
            ", {:.2} at 20s): a renew is one PUT, {:.0} B of TLS records. Where the server (or a load balancer) closes idle connections before the next renew, each renew reconnects ({:.2} new connections per renew) and resumes TLS ({} full, {} resumed handshakes): {:.0} B on the wire per renew, {:.1} × a kept connection's.",
            long.per_renew(long.connections),
            long.tcp_per_renew(),
            idle.per_renew(idle.connections),
            idle.full,
            idle.resumed,
            idle.tcp_per_renew(),
            idle.tcp_per_renew() / long.tcp_per_renew().max(1.0)
        );
    } else {
        println!(
            "): a renew is one PUT, {:.0} B of TLS records.",
            kept.tcp_per_renew()
        );
    }
    Ok(())
}

const CANDIDATES: [usize; 3] = [1, 3, 10];
const CANDIDATE_PERIODS: u32 = 30;

/// What the API server sees from one lease and its candidates.
#[derive(Debug, Clone)]
struct CandidatesRow {
    n: usize,
    watch: bool,
    leader: f64,
    /// The server's requests less the leader's, per follower.
    follower_mean: f64,
    /// Lock calls of the busiest follower: its requests when polling; when
    /// watching, its reads of the Lease the watch delivered.
    follower_worst: f64,
    server: f64,
    accepted: u64,
    open: usize,
    watches_open: u64,
    watches_opened: u64,
}

fn candidates_row(n: usize, watch: bool) -> Res<CandidatesRow> {
    let tokens: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
    let token_refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    let server = TestApiServer::builder()
        .tls(true)
        .tokens(&token_refs)
        .build()?;
    server.add_namespace(NS);
    let port = port_of(&server.url())?;
    let cfg = ElectorConfig {
        watch,
        ..timings(LEASE, DEADLINE, RETRY)
    };
    let mut fleet = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        let client = ClientConfig::new(server.url())
            .ca_pem(server.ca_pem())
            .token(token.as_str());
        let (h, rx, calls) = candidate(client, "one-lease", token, &cfg)?;
        if i == 0 {
            wait_leading(&rx)?;
        }
        fleet.push((h, rx, calls));
    }
    // Every follower has read the Lease and opened its watch.
    std::thread::sleep(LEASE);
    let (s0, from) = (server.stats(), Instant::now());
    let mut open = 0;
    for k in 1..=CANDIDATE_PERIODS {
        let next = from + RETRY * k;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        open = open.max(open_connections(port));
    }
    let (s1, to) = (server.stats(), Instant::now());
    let ended = server
        .requests()
        .iter()
        .filter(|r| r.path.contains("watch=true"))
        .count() as u64;
    let secs = to.duration_since(from).as_secs_f64();
    if !fleet[0].0.probe().is_leader() {
        return Err(format!("{n} candidates: the first one lost the lease").into());
    }
    // Lock calls per second; with `sent`, only those that sent a request.
    let rate = |calls: &Calls, sent: bool| {
        let calls = calls.lock().unwrap_or_else(PoisonError::into_inner);
        calls
            .iter()
            .filter(|c| c.start >= from && c.start < to)
            .filter(|c| !sent || c.what != "GET (from the watch)")
            .count() as f64
            / secs
    };
    let rates: Vec<f64> = fleet
        .iter()
        .map(|(_, _, calls)| rate(calls, false))
        .collect();
    let leader = rate(&fleet[0].2, true);
    for (h, _, _) in fleet {
        h.stop()?;
    }
    server.shutdown();
    let all = (s1.requests - s0.requests) as f64 / secs;
    Ok(CandidatesRow {
        n,
        watch,
        leader,
        follower_mean: (all - leader).max(0.0) / (n - 1).max(1) as f64,
        follower_worst: rates[1..].iter().copied().fold(0.0, f64::max),
        server: all,
        accepted: s1.connections - s0.connections,
        open,
        watches_open: s1.watches.saturating_sub(ended),
        watches_opened: s1.watches - s0.watches,
    })
}

/// One lease, 1, 3 and 10 candidates, polling and watching: requests per
/// second by the leader (counted by its lock) and per follower (the
/// server's count less the leader's: a watching follower's lock reads are
/// mostly served from the watch, not sent), and what the API server sees
/// (all requests, watch requests included; connections accepted in the
/// window; open connections, the most seen in a sample each retry period;
/// watches open at the end).
fn candidates_table() -> Res<()> {
    println!("\n| one lease, TLS, a token per candidate ({CANDIDATE_PERIODS} retry periods of {RETRY:?}, lease {LEASE:?}) | leader: requests/s | per follower: requests/s (busiest follower's Lock calls/s) | API server: requests/s in all | connections accepted in the window | open connections | open watches (opened in the window) |");
    println!("|---|---|---|---|---|---|---|");
    let mut rows = Vec::new();
    for watch in [false, true] {
        for n in CANDIDATES {
            let r = candidates_row(n, watch)?;
            let followers = if n == 1 {
                "—".to_string()
            } else {
                let reads = if r.watch {
                    ", the Lease read from the watch"
                } else {
                    ""
                };
                format!("{:.2} ({:.2}{reads})", r.follower_mean, r.follower_worst)
            };
            println!(
                "| {} candidate{}, {} | {:.2} | {followers} | {:.2} | {} | {} | {} ({}) |",
                r.n,
                if r.n == 1 { "" } else { "s" },
                if r.watch { "watching" } else { "polling" },
                r.leader,
                r.server,
                r.accepted,
                r.open,
                r.watches_open,
                r.watches_opened
            );
            rows.push(r);
        }
    }
    let grow = |watch: bool| -> Option<(f64, f64)> {
        let one = rows.iter().find(|r| r.watch == watch && r.n == 1)?;
        let ten = rows.iter().find(|r| r.watch == watch && r.n == 10)?;
        Some((
            ((ten.server - one.server) / 9.0).max(0.0),
            (ten.open as f64 - one.open as f64) / 9.0,
        ))
    };
    if let (Some((poll_rps, poll_conns)), Some((watch_rps, watch_conns))) =
        (grow(false), grow(true))
    {
        println!(
            "\nThe leader sends one PUT per retry period ({:.2}/s here) whatever the number of candidates. Each polling follower adds {poll_rps:.2} requests/s ({:.2} per retry period: one GET every 1–2.2 periods) and {poll_conns:.0} open connection; each watching follower adds {watch_rps:.2} requests/s and {watch_conns:.0} open connections (its requests' and its watch's), since the leader's renews reach it through the watch. {}",
            1.0 / RETRY.as_secs_f64(),
            poll_rps * RETRY.as_secs_f64(),
            match rows.iter().map(|r| r.accepted).sum::<u64>() {
                0 => "No connection is opened while the candidates run.".to_string(),
                k => format!("{k} connections were opened in the windows in all."),
            }
        );
    }
    Ok(())
}

/// Lease counts for the per-lease table, and whether they share one
/// `Client`.
const SHARDS: [(usize, bool); 6] = [
    (0, false),
    (1, false),
    (10, false),
    (100, false),
    (10, true),
    (100, true),
];
const SHARD_WINDOW: Duration = Duration::from_secs(10);

/// `--serve DIR`: the API server as a child process (TLS, one token),
/// writing `DIR/kubeconfig`; answers `stats` on stdin with its counters,
/// exits when stdin closes.
fn serve(dir: &Path) -> Res<()> {
    let server = TestApiServer::builder()
        .tls(true)
        .tokens(&["shards"])
        .build()?;
    server.add_namespace(NS);
    let kubeconfig = dir.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig, Some("shards"))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "READY {} {}", server.url(), kubeconfig.display())?;
    out.flush()?;
    for line in std::io::stdin().lock().lines() {
        if line?.trim() == "stats" {
            let s = server.stats();
            writeln!(
                out,
                "STATS requests={} updates={} connections={} full={} resumed={}",
                s.requests,
                s.updates,
                s.connections,
                s.tls_full_handshakes,
                s.tls_resumed_handshakes
            )?;
            out.flush()?;
        }
    }
    server.shutdown();
    Ok(())
}

/// `--hold N --kubeconfig F [--shared-client]`: N polling electors, each
/// on a Lease of its own, a `Client` each or one shared. Prints `START`
/// when all lead and have settled, then after [`SHARD_WINDOW`] a line of
/// its threads, memory and CPU time in the window; stops them and exits.
fn hold(n: usize, kubeconfig: &Path, shared: bool) -> Res<()> {
    let config = ClientConfig::from_kubeconfig(kubeconfig, None)?;
    // Polling, as these figures always were: the watch adds a thread and
    // a connection per lease (`--only watch-cost`).
    let cfg = ElectorConfig {
        watch: false,
        ..timings(LEASE, DEADLINE, RETRY)
    };
    let one = if shared {
        Some(Client::new(config.clone())?)
    } else {
        None
    };
    let mut fleet = Vec::with_capacity(n);
    for i in 0..n {
        let client = match &one {
            Some(c) => c.clone(),
            None => Client::new(config.clone())?,
        };
        let lock = LeaseLock::new(client, NS, format!("shard-{i}"), "holder");
        fleet.push(
            LeaderElector::builder(lock)
                .config(cfg.clone())
                .build()?
                .spawn()?,
        );
    }
    for (_, rx) in &fleet {
        wait_leading(rx)?;
    }
    std::thread::sleep(RETRY * 4);
    let (cpu0, from) = (cpu_ns(), Instant::now());
    let mut out = std::io::stdout().lock();
    writeln!(out, "START")?;
    out.flush()?;
    std::thread::sleep(SHARD_WINDOW);
    let (cpu1, to) = (cpu_ns(), Instant::now());
    let me = std::process::id();
    writeln!(
        out,
        "END threads={} elector_threads={} rss_kb={} hwm_kb={} cpu_ns={} window_ms={}",
        status_number(me, "Threads:"),
        elector_threads(),
        status_number(me, "VmRSS:"),
        status_number(me, "VmHWM:"),
        cpu1.saturating_sub(cpu0),
        to.duration_since(from).as_millis()
    )?;
    out.flush()?;
    for (h, _) in fleet {
        h.stop()?;
    }
    Ok(())
}

/// One row of the per-lease table.
#[derive(Debug, Clone)]
struct ShardRow {
    n: usize,
    shared: bool,
    threads: u64,
    elector_threads: u64,
    rss_kb: u64,
    hwm_kb: u64,
    cpu_per_renew_us: f64,
    renews: u64,
    requests: u64,
    accepted: u64,
    resumed: u64,
    open: usize,
}

/// The server child's counters.
fn server_counters(
    to: &mut ChildStdin,
    from: &mut std::io::Lines<BufReader<ChildStdout>>,
) -> Res<std::collections::HashMap<String, u64>> {
    writeln!(to, "stats")?;
    to.flush()?;
    let line = from.next().ok_or("the server child exited")??;
    Ok(fields(line.strip_prefix("STATS ").ok_or("a STATS line")?))
}

/// One process holding 1, 10 and 100 leases (a sharded controller): its
/// threads, resident memory and CPU time per renew, against an API server
/// in another process so that only the electors are counted.
fn shards_table() -> Res<()> {
    let dir = TempDir::new("shards")?;
    let exe = std::env::current_exe()?;
    let mut server = Command::new(&exe)
        .arg("--serve")
        .arg(&dir.0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut to_server = server.stdin.take().ok_or("no stdin")?;
    let mut from_server = BufReader::new(server.stdout.take().ok_or("no stdout")?).lines();
    let ready = from_server.next().ok_or("the server child exited")??;
    let (url, kubeconfig) = ready
        .strip_prefix("READY ")
        .and_then(|r| r.split_once(' '))
        .ok_or("a READY line")?;
    let (port, kubeconfig) = (port_of(url)?, kubeconfig.to_string());
    let mut rows = Vec::new();
    for (n, shared) in SHARDS {
        let mut child = Command::new(&exe)
            .args(["--hold", &n.to_string(), "--kubeconfig", &kubeconfig])
            .args(shared.then_some("--shared-client"))
            .stdout(Stdio::piped())
            .spawn()?;
        let mut lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        let mut next = || -> Res<String> { Ok(lines.next().ok_or("the hold child exited")??) };
        if next()? != "START" {
            return Err("the hold child's first line is START".into());
        }
        let s0 = server_counters(&mut to_server, &mut from_server)?;
        std::thread::sleep(SHARD_WINDOW / 2);
        let open = open_connections(port);
        let end = next()?;
        let s1 = server_counters(&mut to_server, &mut from_server)?;
        child.wait()?;
        let e = fields(end.strip_prefix("END ").ok_or("an END line")?);
        let get =
            |m: &std::collections::HashMap<String, u64>, k: &str| m.get(k).copied().unwrap_or(0);
        let delta = |k: &str| get(&s1, k).saturating_sub(get(&s0, k));
        let renews = delta("updates");
        rows.push(ShardRow {
            n,
            shared,
            threads: get(&e, "threads"),
            elector_threads: get(&e, "elector_threads"),
            rss_kb: get(&e, "rss_kb"),
            hwm_kb: get(&e, "hwm_kb"),
            cpu_per_renew_us: get(&e, "cpu_ns") as f64 / 1000.0 / renews.max(1) as f64,
            renews,
            requests: delta("requests"),
            accepted: delta("connections"),
            resumed: delta("resumed"),
            open,
        });
    }
    drop(to_server); // the server child exits
    server.wait()?;
    println!("\n| leases held by one process (polling, TLS; lease {LEASE:?}, renew deadline {DEADLINE:?}, retry {RETRY:?}; API server in another process) | threads (elector threads) | VmRSS | peak RSS (VmHWM) | CPU per renew | renews in {SHARD_WINDOW:?} (requests) | API server: open connections; accepted in the window (TLS resumed) |");
    println!("|---|---|---|---|---|---|---|");
    for r in &rows {
        let who = match (r.n, r.shared) {
            (0, _) => "0 (the process, nothing started)".to_string(),
            (1, _) => "1".to_string(),
            (n, false) => format!("{n}, a Client each"),
            (n, true) => format!("{n}, one shared Client"),
        };
        let cpu = if r.renews == 0 {
            "—".to_string()
        } else {
            format!("{:.0} µs", r.cpu_per_renew_us)
        };
        println!(
            "| {who} | {} ({}) | {} kB | {} kB | {cpu} | {} ({}) | {}; {} ({}) |",
            r.threads,
            r.elector_threads,
            r.rss_kb,
            r.hwm_kb,
            r.renews,
            r.requests,
            r.open,
            r.accepted,
            r.resumed
        );
    }
    let find = |n: usize, shared: bool| rows.iter().find(|r| r.n == n && r.shared == shared);
    if let (Some(base), Some(one), Some(hundred), Some(shared10), Some(shared100)) = (
        find(0, false),
        find(1, false),
        find(100, false),
        find(10, true),
        find(100, true),
    ) {
        let per_lease =
            |a: &ShardRow, b: &ShardRow| (b.rss_kb as f64 - a.rss_kb as f64) / (b.n - a.n) as f64;
        let threads_per_lease =
            (hundred.elector_threads as f64 - one.elector_threads as f64) / 99.0;
        // At client-go's 2 s retry period, 100 leases renew 50 times a second.
        let core_at_2s = hundred.cpu_per_renew_us * 100.0 / 2.0 / 1e6 * 100.0;
        println!(
            "\nThe first lease costs {} kB over the bare process ({} kB); each further lease costs {threads_per_lease:.0} thread and {:.0} kB of RSS with a Client of its own (one TLS connection each, kept open), {:.0} kB when all share one Client. A renew costs {:.0} µs of CPU at 100 leases ({:.0} µs with one), so 100 leases at client-go's 2 s retry period take {core_at_2s:.1}% of one core. Sharing one Client keeps {} connection(s) open instead of {} but, with a few idle connections kept, reconnects (TLS resumed) whenever renews overlap: {} connections in {SHARD_WINDOW:?} at 100 leases.",
            one.rss_kb.saturating_sub(base.rss_kb),
            base.rss_kb,
            per_lease(one, hundred),
            per_lease(shared10, shared100),
            hundred.cpu_per_renew_us,
            one.cpu_per_renew_us,
            shared100.open,
            hundred.open,
            shared100.accepted
        );
    }
    Ok(())
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    // The child processes of the per-lease section, and the handover
    // section's candidates that are killed.
    if let Some(i) = args.iter().position(|a| a == "--candidate") {
        return handover::candidate(&args[i + 1..]);
    }
    if let Some(dir) = value("--serve") {
        return serve(Path::new(&dir));
    }
    if let Some(n) = value("--hold") {
        let kubeconfig = value("--kubeconfig").ok_or("--hold needs --kubeconfig")?;
        let shared = args.iter().any(|a| a == "--shared-client");
        return hold(n.parse()?, Path::new(&kubeconfig), shared);
    }
    let elect = value("--elect");
    let lease_elect = value("--lease-elect");
    let quick = args.iter().any(|a| a == "--quick");
    let only: Option<Vec<String>> =
        value("--only").map(|s| s.split(',').map(str::to_string).collect());
    let run = |section: &str| only.as_ref().is_none_or(|o| o.iter().any(|s| s == section));
    handover::install_logger();
    let server = TestApiServer::start()?;
    server.add_namespace(NS);
    println!(
        "lease {LEASE:?}, renew deadline {DEADLINE:?}, retry period {RETRY:?}, per-request cap {:?}; embedded API server on loopback",
        timings(LEASE, DEADLINE, RETRY).request_cap()
    );
    if run("steady") {
        steady_state(&server)?;
    }
    if run("handover") || run("latency") {
        // `--timings short,client-go` for some of them (the OpenShift
        // timings take about 5 minutes).
        let names = value("--timings");
        let timings: Vec<handover::Timing> = handover::TIMINGS
            .into_iter()
            .filter(|t| {
                names
                    .as_deref()
                    .is_none_or(|n| n.split(',').any(|n| n.eq_ignore_ascii_case(t.name)))
            })
            .collect();
        handover::section(&timings, true)?;
    }
    // Issue 43: the same rounds on the test server and, given the folder
    // `.ci/control-plane up DIR` wrote, on kube-apiserver with etcd. Only
    // when asked for: it needs kubectl.
    if only
        .as_ref()
        .is_some_and(|o| o.iter().any(|s| s == "servers"))
    {
        servers::section(value("--control-plane").as_deref().map(Path::new))?;
    }
    if run("watch-cost") {
        let window = Duration::from_secs(if quick { 60 } else { 200 });
        handover::cost_section(&handover::TIMINGS, window)?;
    }
    if run("threads") {
        thread_table(&server)?;
    }
    if run("storm") {
        storm_table(&server)?;
    }
    if run("lateness") {
        lateness_table()?;
    }
    if run("held") {
        held_request(&server)?;
    }
    if run("tls") {
        tls_table(quick)?;
    }
    if run("candidates") {
        candidates_table()?;
    }
    if run("shards") {
        shards_table()?;
    }
    if let Some(path) = elect {
        elect_footprint(&server, &path)?;
    }
    if let Some(path) = lease_elect.filter(|_| run("lease-elect")) {
        lease_elect_table(&path)?;
    }
    std::io::stdout().flush()?;
    Ok(())
}
