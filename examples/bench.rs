//! Figures for the README: request cost, handover and failover latency,
//! threads, and (given the `elect` binary) its resident memory.
//!
//! ```text
//! cargo run --release --example bench                       # cost and latency
//! cargo run --release --example bench -- --elect PATH       # plus elect's RSS and threads
//! ```
//!
//! Latencies are measured against the embedded API server on loopback with
//! short timings (lease 2s, renew deadline 1.5s, retry 0.5s) and reported
//! as multiples of those timings, which is what carries over to a cluster.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant, SystemTime};

use lease_elector::lease::MicroTime;
use lease_elector::testing::TestApiServer;
use lease_elector::{Client, ClientConfig, ElectorHandle, LeaderElector, LeaderEvent, LeaseLock};

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
    println!("lease {LEASE:?}, renew deadline {DEADLINE:?}, retry period {RETRY:?}; embedded API server on loopback\n");
    println!("| who | requests | bytes |");
    println!("|---|---|---|");
    steady_state(&server)?;
    latency_table(&server)?;
    thread_table(&server)?;
    if let Some(path) = elect {
        elect_footprint(&server, &path)?;
    }
    std::io::stdout().flush()?;
    Ok(())
}
