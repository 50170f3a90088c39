//! Figures for the README: request cost, handover and failover latency,
//! threads, the load a fleet puts on a failing API server, how late a
//! leader steps down under each kind of fault, one held request at
//! client-go's timings, and (given the `elect` binary) its resident memory.
//!
//! ```text
//! cargo run --release --example bench                       # cost and latency
//! cargo run --release --example bench -- --elect PATH       # plus elect's RSS and threads
//! ```
//!
//! Latencies are measured against the embedded API server on loopback with
//! short timings (lease 2s, renew deadline 1.5s, retry 0.5s) and reported
//! as multiples of those timings, which is what carries over to a cluster.
//! The step-down figures use lease 4s / renew 3s / retry 1s (so that a
//! request can be slowed to just under the 1.5s cap), the held-request
//! figure client-go's 15s / 10s / 2s.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use lease_elector::lease::MicroTime;
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
const ROUNDS: usize = 8;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn spawn(
    server: &TestApiServer,
    name: &str,
    id: &str,
    watch: bool,
    release: bool,
) -> Res<(ElectorHandle, Receiver<LeaderEvent>)> {
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

fn wait_leading(rx: &Receiver<LeaderEvent>) -> Res<Instant> {
    loop {
        match rx.recv_timeout(Duration::from_secs(30))? {
            LeaderEvent::StartedLeading { at } => return Ok(at),
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
    let (leader, rx) = spawn(server, "steady", "leader", false, true)?;
    wait_leading(&rx)?;
    // Let the first renew happen so the cache is warm, then count.
    std::thread::sleep(RETRY * 2);
    server.reset_stats();
    let window = RETRY * 20;
    std::thread::sleep(window);
    let s = server.stats();
    let renews = s.updates.max(1);
    println!("| leader, steady state | {:.2} requests per renew ({} GET, {} PUT over {} renews) | {} B sent + {} B received per renew |",
        s.requests as f64 / renews as f64, s.gets, s.updates, renews, s.bytes_in / renews, s.bytes_out / renews);
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

/// Leader stops (releasing, or not: a crash) → the follower reports
/// StartedLeading. A graceful handover is timed from the stop; a crash from
/// the start of the leader's last successful renew, since that is what the
/// lease duration counts from.
fn handover(server: &TestApiServer, watch: bool, release: bool) -> Res<Vec<Duration>> {
    let name = format!("handover-{watch}-{release}");
    let mut out = Vec::new();
    let (mut leader, mut lrx) = spawn(server, &name, "a", watch, release)?;
    wait_leading(&lrx)?;
    for round in 0..ROUNDS {
        let id = if round % 2 == 0 { "b" } else { "a" };
        let (next, nrx) = spawn(server, &name, id, watch, release)?;
        // Let the follower observe the leader's renewals for a while.
        std::thread::sleep(RETRY * 3);
        let stopped = Instant::now();
        leader.stop()?;
        // A renew can start between any earlier look and the stop: take
        // the last one from the Lease itself (its renewTime is the wall
        // time the renew started), as an Instant.
        let t0 = if release {
            stopped
        } else {
            last_renew_instant(server, &name)?
        };
        drop(lrx);
        let at = wait_leading(&nrx)?;
        out.push(at.saturating_duration_since(t0));
        leader = next;
        lrx = nrx;
    }
    leader.stop()?;
    Ok(out)
}

fn last_renew_instant(server: &TestApiServer, name: &str) -> Res<Instant> {
    let lease = server.lease(NS, name).ok_or("lease exists")?;
    let renewed: MicroTime = lease["spec"]["renewTime"]
        .as_str()
        .ok_or("lease has a renewTime")?
        .parse()?;
    let (now, wall) = (Instant::now(), SystemTime::now());
    let ago = wall.duration_since(renewed.to_system_time())?;
    Ok(now
        .checked_sub(ago)
        .ok_or("renewTime within the process's lifetime")?)
}

fn latency_table(server: &TestApiServer) -> Res<()> {
    println!("\n| handover ({ROUNDS} rounds) | median | worst | worst / unit |");
    println!("|---|---|---|---|");
    for (release, unit, unit_name) in [
        (true, RETRY, "retryPeriod"),
        (false, LEASE, "leaseDuration"),
    ] {
        for watch in [false, true] {
            let v = handover(server, watch, release)?;
            println!(
                "| {}, {} | {} ms | {} ms | {:.2} × {unit_name} |",
                if release {
                    "graceful: stop + release → StartedLeading"
                } else {
                    "crash: last renew → StartedLeading"
                },
                if watch { "watch" } else { "polling" },
                median(v.clone()).as_millis(),
                max(&v).as_millis(),
                max(&v).as_secs_f64() / unit.as_secs_f64()
            );
        }
    }
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

impl Lock for Recorded {
    fn get(&mut self, deadline: &Deadline) -> lease_elector::Result<LeaderElectionRecord> {
        let start = Instant::now();
        let r = self.inner.get(deadline);
        self.note("GET", start, r)
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
) -> Res<(ElectorHandle, Receiver<LeaderEvent>, Calls)> {
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
fn wait_stopped(rx: &Receiver<LeaderEvent>, within: Duration) -> Option<Instant> {
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
            |s| s.inject(Fault::status(500).times(usize::MAX)),
            TestApiServer::clear_faults,
        ),
        (
            "connections dropped after the request",
            |s| s.inject(Fault::drop_connection().times(usize::MAX)),
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
                "{:.2} requests ({} in all, {} new connections)",
                s.requests as f64 / fleet_periods,
                s.requests,
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
    fn new() -> Res<TempDir> {
        let dir = std::env::temp_dir().join(format!("lease-elector-bench-{}", std::process::id()));
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
    let dir = TempDir::new()?;
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
            server.inject(f.bearer("leader").times(usize::MAX));
        }
        let stopped = wait_stopped(&lrx, deadline * 3);
        server.clear_faults();
        let ratio = match (stopped, leader.last_renew()) {
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
    server.inject(
        Fault::hang()
            .path_contains("/leases/hung")
            .times(usize::MAX),
    );
    let stopped = wait_stopped(&rx, deadline * 2);
    server.clear_faults();
    match (stopped, leader.last_renew()) {
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
    let mut child = Command::new(path)
        .args([
            "--server",
            &server.url(),
            "--namespace",
            NS,
            "--name",
            "footprint",
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
        .lease(NS, "footprint")
        .map(|l| l["spec"]["holderIdentity"] == "");
    println!("\n| elect binary while leading | peak RSS (VmHWM) {hwm} | threads {threads} (main, elector, stdin, signals, forwarder) | exit {status}, lease released: {released:?} |");
    Ok(())
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let elect = args
        .iter()
        .position(|a| a == "--elect")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let server = TestApiServer::start()?;
    println!(
        "lease {LEASE:?}, renew deadline {DEADLINE:?}, retry period {RETRY:?}, per-request cap {:?}; embedded API server on loopback\n",
        timings(LEASE, DEADLINE, RETRY).request_cap()
    );
    println!("| who | requests | bytes |");
    println!("|---|---|---|");
    steady_state(&server)?;
    latency_table(&server)?;
    thread_table(&server)?;
    storm_table(&server)?;
    lateness_table()?;
    held_request(&server)?;
    if let Some(path) = elect {
        elect_footprint(&server, &path)?;
    }
    std::io::stdout().flush()?;
    Ok(())
}
