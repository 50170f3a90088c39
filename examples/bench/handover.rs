//! Issue 37's figures: how soon every change of the Lease reaches every
//! candidate, with the watch (the default), with polling (`watch(false)`),
//! and against a server that refuses the watch (403), at three timings;
//! and what the watch costs. Printed as tables; the timeline of one
//! graceful handover, one crash failover and one takeover by another
//! writer (short timings, watching) is drawn to `docs/timeline.svg`.
//!
//! Every time is read on the elector's own clock (`SystemClock`), and a
//! write "the store took" is timed when a watch of the bench's own, on
//! loopback, received it: at most its delivery later (tens of
//! microseconds), so the figures measured from it are as long as the true
//! ones or a little shorter, never by more than that.
//!
//! Each figure is `ROUNDS` rounds, each on a Lease of its own, the rounds
//! running side by side with their actions a tenth of a retry period
//! apart (so that polling meets them at every phase of its period).

use std::io::{BufRead, BufReader, Read, Write as _};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use lease_elector::lease::MicroTime;
use lease_elector::testing::{Fault, TestApiServer};
use lease_elector::{
    Client, ClientConfig, Clock, Deadline, ElectorHandle, LeaderElector, LeaderEvent, LeaderEvents,
    LeaseLock, SystemClock,
};

use super::{median, Res, NS};
use crate::timeline::{Mark, Panel, Row, Tick};

/// Rounds per figure.
pub const ROUNDS: usize = 10;

/// One set of timings.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub name: &'static str,
    pub lease: Duration,
    pub deadline: Duration,
    pub retry: Duration,
}

impl Timing {
    fn label(&self) -> String {
        format!(
            "{}/{}/{} s",
            self.lease.as_secs(),
            self.deadline.as_secs(),
            self.retry.as_secs()
        )
    }
}

pub const TIMINGS: [Timing; 3] = [
    Timing {
        name: "short",
        lease: Duration::from_secs(4),
        deadline: Duration::from_secs(3),
        retry: Duration::from_secs(1),
    },
    Timing {
        name: "client-go",
        lease: Duration::from_secs(15),
        deadline: Duration::from_secs(10),
        retry: Duration::from_secs(2),
    },
    Timing {
        name: "OpenShift",
        lease: Duration::from_secs(137),
        deadline: Duration::from_secs(107),
        retry: Duration::from_secs(26),
    },
];

/// How changes reach the candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The default.
    Watch,
    /// `watch(false)`.
    Polling,
    /// The default, against a server that answers every watch with 403.
    Refused,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::Watch, Mode::Polling, Mode::Refused];

    fn label(self) -> &'static str {
        match self {
            Mode::Watch => "watch (default)",
            Mode::Polling => "polling (watch off)",
            Mode::Refused => "watch refused (403)",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Mode::Watch => "w",
            Mode::Polling => "p",
            Mode::Refused => "r",
        }
    }

    fn watch(self) -> bool {
        self != Mode::Polling
    }
}

fn now() -> Instant {
    SystemClock.now()
}

/// A write the Lease took, as the bench's own watch received it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    pub lease: String,
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub kind: String,
    pub holder: String,
}

impl Seen {
    /// A watch event of a Lease (as the API server or `kubectl get
    /// --watch -o json --output-watch-events` gives it), timed `at`.
    pub fn of_event(at: Instant, event: &serde_json::Value) -> Seen {
        let object = &event["object"];
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
        Seen {
            at,
            lease: text(&object["metadata"]["name"]),
            kind: text(&event["type"]),
            holder: text(&object["spec"]["holderIdentity"]),
        }
    }
}

/// The Lease writes an observer saw, shared with its reading thread.
#[derive(Clone, Default)]
pub struct Writes(Arc<Mutex<Vec<Seen>>>);

impl Writes {
    pub fn push(&self, seen: Seen) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(seen);
    }

    pub fn all(&self) -> Vec<Seen> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Those of `lease`, in the order seen.
    pub fn of(&self, lease: &str) -> Vec<Seen> {
        self.all()
            .into_iter()
            .filter(|s| s.lease == lease)
            .collect()
    }

    /// The first write of `lease` at or after `from` that `pred` accepts,
    /// waiting up to `within` for it.
    pub fn first(
        &self,
        lease: &str,
        from: Instant,
        within: Duration,
        pred: impl Fn(&Seen) -> bool,
    ) -> Option<Seen> {
        let until = Instant::now() + within;
        loop {
            if let Some(s) = self.of(lease).into_iter().find(|s| s.at >= from && pred(s)) {
                return Some(s);
            }
            if Instant::now() > until {
                return None;
            }
            thread::sleep(Duration::from_millis(2));
        }
    }
}

/// A watch on every Lease of the namespace over a plain TCP socket, each
/// event timed as it arrives.
struct Observer {
    seen: Writes,
    socket: TcpStream,
    thread: Option<thread::JoinHandle<()>>,
}

impl Observer {
    fn start(url: &str) -> Res<Observer> {
        let addr = url.strip_prefix("http://").ok_or("a plain HTTP server")?;
        let mut socket = TcpStream::connect(addr)?;
        socket.set_nodelay(true)?;
        write!(
            socket,
            "GET /apis/coordination.k8s.io/v1/namespaces/{NS}/leases?watch=true HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\n\r\n"
        )?;
        let seen = Writes::default();
        let reader = socket.try_clone()?;
        let sink = seen.clone();
        let thread = thread::Builder::new()
            .name("bench-observer".into())
            .spawn(move || {
                let _ = read_events(BufReader::new(reader), &sink);
            })?;
        Ok(Observer {
            seen,
            socket,
            thread: Some(thread),
        })
    }

    fn seen(&self, lease: &str) -> Vec<Seen> {
        self.seen.of(lease)
    }

    fn first(
        &self,
        lease: &str,
        from: Instant,
        within: Duration,
        pred: impl Fn(&Seen) -> bool,
    ) -> Option<Seen> {
        self.seen.first(lease, from, within, pred)
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        let _ = self.socket.shutdown(std::net::Shutdown::Both);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A chunked watch response: one event per chunk.
fn read_events(mut r: BufReader<TcpStream>, sink: &Writes) -> Res<()> {
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Ok(());
        }
        if line == "\r\n" {
            break;
        }
    }
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let size = usize::from_str_radix(line.trim(), 16)?;
        if size == 0 {
            return Ok(());
        }
        let mut chunk = vec![0; size + 2];
        r.read_exact(&mut chunk)?;
        let at = now();
        let event: serde_json::Value = serde_json::from_slice(&chunk[..size])?;
        sink.push(Seen::of_event(at, &event));
    }
}

/// One API server for one mode, its observer and a logger's count.
struct Stage {
    server: TestApiServer,
    observer: Observer,
    mode: Mode,
    timing: Timing,
}

impl Stage {
    fn new(timing: Timing, mode: Mode) -> Res<Stage> {
        let server = TestApiServer::start()?;
        server.add_namespace(NS);
        if mode == Mode::Refused {
            // The candidates' watches (by their field selector), not the
            // bench's own.
            server.inject(
                Fault::status(403)
                    .path_contains("fieldSelector=metadata.name")
                    .forever(),
            );
        }
        let observer = Observer::start(&server.url())?;
        Ok(Stage {
            server,
            observer,
            mode,
            timing,
        })
    }

    fn elector(&self, lease: &str, id: &str) -> Res<(ElectorHandle, LeaderEvents)> {
        let client = Client::new(ClientConfig::new(self.server.url()))?;
        let t = self.timing;
        Ok(
            LeaderElector::builder(LeaseLock::new(client, NS, lease, id))
                .lease_duration(t.lease)
                .renew_deadline(t.deadline)
                .retry_period(t.retry)
                .release_on_cancel(true)
                .watch(self.mode.watch())
                .build()?
                .spawn()?,
        )
    }

    /// A candidate in a process of its own (`bench --candidate ...`), to
    /// be killed with SIGKILL.
    fn child(
        &self,
        lease: &str,
        id: &str,
    ) -> Res<(Child, std::io::Lines<BufReader<std::process::ChildStdout>>)> {
        let t = self.timing;
        let mut child = Command::new(std::env::current_exe()?)
            .args(["--candidate", &self.server.url(), lease, id])
            .args([t.lease, t.deadline, t.retry].map(|d| d.as_millis().to_string()))
            .arg(if self.mode.watch() { "watch" } else { "poll" })
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let out = child.stdout.take().ok_or("no stdout")?;
        Ok((child, BufReader::new(out).lines()))
    }

    /// One request's round trip: `GET` of a Lease, median and worst of 30.
    fn rtt(&self) -> Res<(Duration, Duration)> {
        let client = Client::new(ClientConfig::new(self.server.url()))?;
        let lease = "rtt";
        self.server.put_lease(
            NS,
            &lease_elector::Lease::new(NS, lease, &Default::default()),
        );
        let mut v = Vec::new();
        for _ in 0..31 {
            let t0 = now();
            client.get_lease(NS, lease, &Deadline::from_now(Duration::from_secs(5)))?;
            v.push(now().saturating_duration_since(t0));
        }
        v.remove(0); // the connection's set-up
        let worst = v.iter().copied().max().unwrap_or_default();
        Ok((median(v), worst))
    }
}

/// `--candidate URL|KUBECONFIG LEASE ID LD_MS RD_MS RP_MS watch|poll [NS]`:
/// lead, print `LEADING`, until stdin closes or the process is killed.
pub fn candidate(args: &[String]) -> Res<()> {
    let (server, lease, id, ld, rd, rp, watch, ns) = match args {
        [u, l, i, ld, rd, rp, w] => (u, l, i, ld, rd, rp, w, NS),
        [u, l, i, ld, rd, rp, w, ns] => (u, l, i, ld, rd, rp, w, ns.as_str()),
        _ => {
            return Err(
                "--candidate URL|KUBECONFIG LEASE ID LD_MS RD_MS RP_MS watch|poll [NS]".into(),
            )
        }
    };
    let ms = |s: &String| -> Res<Duration> { Ok(Duration::from_millis(s.parse()?)) };
    let config = if server.starts_with("http") {
        ClientConfig::new(server.as_str())
    } else {
        ClientConfig::from_kubeconfig(server, None)?
    };
    let (handle, events) =
        LeaderElector::builder(LeaseLock::new(Client::new(config)?, ns, lease, id))
            .lease_duration(ms(ld)?)
            .renew_deadline(ms(rd)?)
            .retry_period(ms(rp)?)
            .release_on_cancel(true)
            .watch(watch == "watch")
            .build()?
            .spawn()?;
    for e in &events {
        if let LeaderEvent::StartedLeading { .. } = e {
            println!("LEADING");
            std::io::stdout().flush()?;
            break;
        }
    }
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    handle.stop()?;
    Ok(())
}

fn wait_started(events: &LeaderEvents, within: Duration) -> Res<Instant> {
    let until = Instant::now() + within;
    loop {
        let left = until
            .checked_duration_since(Instant::now())
            .ok_or("no StartedLeading in time")?;
        if let LeaderEvent::StartedLeading { at, .. } = events.recv_timeout(left)? {
            return Ok(at);
        }
    }
}

fn wait_stopped(events: &LeaderEvents, within: Duration) -> Res<Instant> {
    let until = Instant::now() + within;
    loop {
        let left = until
            .checked_duration_since(Instant::now())
            .ok_or("no StoppedLeading in time")?;
        if let LeaderEvent::StoppedLeading { at, .. } = events.recv_timeout(left)? {
            return Ok(at);
        }
    }
}

fn wait_until(at: Instant) {
    let left = at.saturating_duration_since(now());
    if !left.is_zero() {
        thread::sleep(left);
    }
}

fn wait_for(what: &str, within: Duration, cond: impl Fn() -> bool) -> Res<()> {
    let until = Instant::now() + within;
    while !cond() {
        if Instant::now() > until {
            return Err(format!("timed out waiting for {what}").into());
        }
        thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

/// Every lane waits here once set up; all then act at `t0` plus their own
/// offset. A lane that failed before arriving arrives on its way out, so
/// that nobody waits for it.
struct Gate {
    arrived: Mutex<usize>,
    all: Condvar,
    lanes: usize,
    t0: OnceLock<Instant>,
    /// From everyone set up to `t0`.
    settle: Duration,
}

impl Gate {
    fn arrive(&self) -> Instant {
        let mut n = self.arrived.lock().unwrap_or_else(PoisonError::into_inner);
        *n += 1;
        self.all.notify_all();
        let until = Instant::now() + Duration::from_secs(600);
        while *n < self.lanes && Instant::now() < until {
            n = self
                .all
                .wait_timeout(n, Duration::from_millis(100))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        *self.t0.get_or_init(|| now() + self.settle)
    }
}

/// What a takeover by another writer does to the Lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Takeover {
    Taken,
    Freed,
    Deleted,
}

impl Takeover {
    const ALL: [Takeover; 3] = [Takeover::Taken, Takeover::Freed, Takeover::Deleted];

    fn label(self) -> &'static str {
        match self {
            Takeover::Taken => "taken",
            Takeover::Freed => "freed",
            Takeover::Deleted => "deleted",
        }
    }
}

/// What one round measured, and what the timeline draws of it.
#[derive(Debug, Clone)]
struct Round {
    lease: String,
    /// The figure: from `from` to `to` (negative if `to` came first).
    from: Instant,
    to: Instant,
    rows: Vec<Row>,
    /// The last renew before a crash.
    last_renew: Option<Instant>,
}

impl Round {
    /// The figure in milliseconds, signed.
    fn ms(&self) -> f64 {
        if self.to >= self.from {
            self.to.duration_since(self.from).as_secs_f64() * 1e3
        } else {
            -self.from.duration_since(self.to).as_secs_f64() * 1e3
        }
    }
}

type Ready<'a> = &'a dyn Fn() -> Instant;

/// A graceful handover: the leader `a` stops and releases; the follower
/// `b` leads. The figure: the release stored → b's `StartedLeading`.
fn graceful(stage: &Stage, lease: &str, ready: Ready<'_>) -> Res<Round> {
    let t = stage.timing;
    let a_spawned = now();
    let (a, a_events) = stage.elector(lease, "a")?;
    let a_led = wait_started(&a_events, t.lease * 3)?;
    let b_spawned = now();
    let (b, b_events) = stage.elector(lease, "b")?;
    wait_for("b to see a", t.retry * 4, || {
        b.probe().leader().as_deref() == Some("a")
    })?;
    wait_until(ready());
    let stop = now();
    a.stop()?;
    let b_led = wait_started(&b_events, t.retry * 4 + t.lease)?;
    let release = stage
        .observer
        .first(lease, stop, t.retry, |s| s.holder.is_empty())
        .ok_or("the release was not seen")?;
    // b leads on past the picture's end (other rounds run meanwhile).
    wait_until(release.at + t.retry.mul_f64(1.6));
    b.stop()?;
    Ok(Round {
        lease: lease.to_string(),
        from: release.at,
        to: b_led,
        rows: vec![
            Row::candidate("a", a_spawned, Some(a_led), Some(stop), "stopped: releases"),
            Row::candidate("b", b_spawned, Some(b_led), None, ""),
        ],
        last_renew: None,
    })
}

/// A crash: the leader, a process of its own, is killed (SIGKILL); the
/// follower leads once the last renew it saw is a lease duration old. The
/// figure: last renew stored + lease duration → b's `StartedLeading`.
fn crash(stage: &Stage, lease: &str, ready: Ready<'_>) -> Res<Round> {
    let t = stage.timing;
    let a_spawned = now();
    let (mut child, mut lines) = stage.child(lease, "a")?;
    let leading = lines.next().ok_or("the candidate exited")??;
    if leading != "LEADING" {
        return Err(format!("the candidate said {leading}").into());
    }
    let a_led = stage
        .observer
        .first(lease, a_spawned, t.retry, |s| s.holder == "a")
        .map_or(a_spawned, |s| s.at);
    let b_spawned = now();
    let (b, b_events) = stage.elector(lease, "b")?;
    let waited = wait_for("b to see a", t.retry * 4, || {
        b.probe().leader().as_deref() == Some("a")
    });
    let act = ready();
    if let Err(e) = waited {
        let _ = child.kill();
        return Err(e);
    }
    wait_until(act);
    let killed = now();
    child.kill()?;
    child.wait()?;
    let b_led = wait_started(&b_events, t.lease + t.retry * 4)?;
    let last = stage
        .observer
        .seen(lease)
        .into_iter()
        .rev()
        .find(|s| s.holder == "a" && s.at <= killed)
        .ok_or("no renew of a was seen")?;
    wait_until(b_led + t.retry.mul_f64(1.2));
    b.stop()?;
    Ok(Round {
        lease: lease.to_string(),
        from: last.at + t.lease,
        to: b_led,
        rows: vec![
            Row::candidate(
                "a (own process)",
                a_spawned,
                Some(a_led),
                Some(killed),
                "SIGKILL",
            ),
            Row::candidate("b", b_spawned, Some(b_led), None, ""),
        ],
        last_renew: Some(last.at),
    })
}

/// Another writer takes, frees or deletes the Lease `a` holds. The
/// figure: that write → a's `StoppedLeading`.
fn takeover(stage: &Stage, lease: &str, kind: Takeover, ready: Ready<'_>) -> Res<Round> {
    let t = stage.timing;
    let a_spawned = now();
    let (a, a_events) = stage.elector(lease, "a")?;
    let a_led = wait_started(&a_events, t.lease * 3)?;
    wait_until(ready());
    let write = now();
    match kind {
        Takeover::Deleted => stage.server.delete_lease(NS, lease),
        _ => {
            let mut l = stage.server.lease(NS, lease).ok_or("no lease")?;
            let mut r = l.record();
            r.holder_identity = if kind == Takeover::Taken {
                "intruder".into()
            } else {
                String::new()
            };
            let wall = MicroTime::from_system_time(SystemClock.system_time());
            r.acquire_time = Some(wall);
            r.renew_time = Some(wall);
            l.set_record(&r);
            stage.server.put_lease(NS, &l);
        }
    }
    let a_stopped = wait_stopped(&a_events, t.retry * 3)?;
    a.stop()?;
    let what = match kind {
        Takeover::Taken => "takes the Lease",
        Takeover::Freed => "frees the Lease",
        Takeover::Deleted => "deletes the Lease",
    };
    Ok(Round {
        lease: lease.to_string(),
        from: write,
        to: a_stopped,
        rows: vec![
            Row::candidate("a", a_spawned, Some(a_led), Some(a_stopped), "term ends"),
            Row::writer(what, write),
        ],
        last_renew: None,
    })
}

/// The figures of one timing in one mode.
#[derive(Debug)]
struct Figures {
    timing: Timing,
    mode: Mode,
    rtt: (Duration, Duration),
    graceful: Vec<Round>,
    crash: Vec<Round>,
    takeover: Vec<(Takeover, Round)>,
    /// Every write each lane's Lease took (for the picture).
    writes: Vec<Seen>,
    /// Refused mode: (in-process candidates, warnings naming the fix
    /// they logged, the fewest any logged, the most).
    warnings: (usize, usize, usize, usize),
}

/// Run every round of one timing in one mode, side by side.
fn run_stage(stage: &Stage) -> Res<Figures> {
    let t = stage.timing;
    let tag = format!("{}-{}", t.retry.as_secs(), stage.mode.tag());
    let before = stage.rtt()?;
    let kinds = 2 + Takeover::ALL.len();
    let lanes = ROUNDS * kinds;
    let gate = Gate {
        arrived: Mutex::new(0),
        all: Condvar::new(),
        lanes,
        t0: OnceLock::new(),
        // Polling followers are then at every phase of their period.
        settle: t.retry.mul_f64(2.2),
    };
    let gap = (t.retry / lanes as u32).max(Duration::from_millis(40));
    let out: Mutex<Vec<(usize, Round)>> = Mutex::default();
    let failed = AtomicUsize::new(0);
    thread::scope(|s| {
        for lane in 0..lanes {
            let (gate, out, failed, tag) = (&gate, &out, &failed, &tag);
            s.spawn(move || {
                let lease = format!("{tag}-{lane}");
                let arrived = std::cell::Cell::new(false);
                let ready = || {
                    arrived.set(true);
                    gate.arrive() + gap * lane as u32
                };
                let result = match lane % kinds {
                    0 => graceful(stage, &lease, &ready),
                    1 => crash(stage, &lease, &ready),
                    k => takeover(stage, &lease, Takeover::ALL[k - 2], &ready),
                };
                if !arrived.get() {
                    gate.arrive();
                }
                match result {
                    Ok(r) => out
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push((lane, r)),
                    Err(e) => {
                        eprintln!("bench: {lease}: {e}");
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let failed = failed.load(Ordering::Relaxed);
    if failed > 0 {
        return Err(format!("{failed} of {lanes} rounds failed").into());
    }
    let mut rounds = out.into_inner().unwrap_or_else(PoisonError::into_inner);
    rounds.sort_by_key(|(lane, _)| *lane);
    // Measured before and after the rounds: the machine's load varies.
    let after = stage.rtt()?;
    let rtt = ((before.0 + after.0) / 2, before.1.max(after.1));
    let mut f = Figures {
        timing: t,
        mode: stage.mode,
        rtt,
        graceful: Vec::new(),
        crash: Vec::new(),
        takeover: Vec::new(),
        writes: stage.observer.seen.all(),
        warnings: (0, 0, 0, 0),
    };
    for (lane, r) in rounds {
        match lane % kinds {
            0 => f.graceful.push(r),
            1 => f.crash.push(r),
            k => f.takeover.push((Takeover::ALL[k - 2], r)),
        }
    }
    if stage.mode == Mode::Refused {
        // In this process: a and b of a handover, b of a crash, a of a
        // takeover (a crashing candidate logs in its own process).
        let logged = warnings();
        let lease_of = |r: &Round, ids: &[&str]| (r.lease.clone(), ids.len());
        let leases: Vec<(String, usize)> = f
            .graceful
            .iter()
            .map(|r| lease_of(r, &["a", "b"]))
            .chain(f.crash.iter().map(|r| lease_of(r, &["b"])))
            .chain(f.takeover.iter().map(|(_, r)| lease_of(r, &["a"])))
            .collect();
        let per: Vec<f64> = leases
            .iter()
            .map(|(lease, n)| {
                let name = format!("lease {NS}/{lease}:");
                let logged = logged
                    .iter()
                    .filter(|m| m.starts_with(&name) && m.contains("refused to watch"))
                    .count();
                logged as f64 / *n as f64
            })
            .collect();
        let candidates: usize = leases.iter().map(|(_, n)| n).sum();
        let total = logged
            .iter()
            .filter(|m| {
                m.contains("refused to watch")
                    && leases
                        .iter()
                        .any(|(l, _)| m.starts_with(&format!("lease {NS}/{l}:")))
            })
            .count();
        let lo = per.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = per.iter().copied().fold(0.0, f64::max);
        f.warnings = (candidates, total, lo as usize, hi as usize);
    }
    Ok(f)
}

/// The warnings logged so far (the bench's logger keeps them, prints none).
fn warnings() -> Vec<String> {
    LOGGED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

static LOGGED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Keep every warning the crate logs (the bench prints only the one the
/// figures need). Installed once, by `main`.
pub fn install_logger() {
    struct Keep;
    impl log::Log for Keep {
        fn enabled(&self, m: &log::Metadata) -> bool {
            m.level() <= log::Level::Warn
        }
        fn log(&self, r: &log::Record) {
            if self.enabled(r.metadata()) && r.target().starts_with("lease_elector") {
                LOGGED
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(r.args().to_string());
            }
        }
        fn flush(&self) {}
    }
    static KEEP: Keep = Keep;
    if log::set_logger(&KEEP).is_ok() {
        log::set_max_level(log::LevelFilter::Warn);
    }
}

fn fmt_ms(ms: f64) -> String {
    let a = ms.abs();
    let sign = if ms < 0.0 { "−" } else { "" };
    if a < 1.0 {
        format!("{sign}{a:.2} ms")
    } else if a < 10.0 {
        format!("{sign}{a:.1} ms")
    } else if a < 10_000.0 {
        format!("{sign}{a:.0} ms")
    } else {
        format!("{sign}{:.1} s", a / 1e3)
    }
}

/// Median and worst (the largest) of `v`, in ms.
fn stats(v: &[f64]) -> (f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let med = s.get(s.len() / 2).copied().unwrap_or(f64::NAN);
    let worst = s.last().copied().unwrap_or(f64::NAN);
    (med, worst)
}

fn cell(v: &[f64]) -> String {
    if v.len() == 1 {
        return fmt_ms(v[0]);
    }
    if v.is_empty() {
        return "—".into();
    }
    let (m, w) = stats(v);
    format!("{} / {}", fmt_ms(m), fmt_ms(w))
}

/// The handover section: every timing, every mode, then the tables and
/// the picture.
pub fn section(timings: &[Timing], picture: bool) -> Res<()> {
    let mut all: Vec<Figures> = Vec::new();
    for t in timings {
        // Long timings run the three modes side by side (each on its own
        // server): their figures are seconds, and the run minutes.
        let together = t.retry >= Duration::from_secs(10);
        if together {
            eprintln!("bench: handover at {}: all modes together", t.label());
            let stages: Vec<Stage> = Mode::ALL
                .iter()
                .map(|m| Stage::new(*t, *m))
                .collect::<Res<_>>()?;
            let results: Vec<Res<Figures>> = thread::scope(|s| {
                let hs: Vec<_> = stages
                    .iter()
                    .map(|st| s.spawn(move || run_stage(st).map_err(|e| e.to_string())))
                    .collect();
                hs.into_iter()
                    .map(|h| match h.join() {
                        Ok(r) => r.map_err(Into::into),
                        Err(_) => Err("a stage panicked".into()),
                    })
                    .collect()
            });
            for r in results {
                all.push(r?);
            }
        } else {
            for m in Mode::ALL {
                eprintln!("bench: handover at {}: {}", t.label(), m.label());
                let stage = Stage::new(*t, m)?;
                all.push(run_stage(&stage)?);
            }
        }
    }
    print_tables(&all);
    if picture {
        if let Some(path) = draw(&all)? {
            println!(
                "\nThe timeline of one round of each (short timings, watching) is drawn to {path}."
            );
        }
    }
    Ok(())
}

fn print_tables(all: &[Figures]) {
    println!(
        "\n| lease / renew deadline / retry period | figure ({ROUNDS} rounds each; median / worst) | {} | {} | {} | goal, watching |",
        Mode::Watch.label(),
        Mode::Polling.label(),
        Mode::Refused.label()
    );
    println!("|---|---|---|---|---|---|");
    let mut timings: Vec<Timing> = Vec::new();
    for f in all {
        if !timings.iter().any(|t| t.name == f.timing.name) {
            timings.push(f.timing);
        }
    }
    for t in &timings {
        let of = |m: Mode| all.iter().find(|f| f.timing.name == t.name && f.mode == m);
        let cells = |pick: &dyn Fn(&Figures) -> Vec<f64>| -> [String; 3] {
            Mode::ALL.map(|m| of(m).map_or("—".into(), |f| cell(&pick(f))))
        };
        let rtt = of(Mode::Watch).map_or(Duration::ZERO, |f| f.rtt.0);
        let rtt_ms = rtt.as_secs_f64() * 1e3;
        let goal = |limit: f64, pick: &dyn Fn(&Figures) -> Vec<f64>| {
            of(Mode::Watch).map_or("—".to_string(), |f| {
                let (_, w) = stats(&pick(f));
                let ok = if w <= limit { "met" } else { "NOT met" };
                format!("≤ {}: {ok}", fmt_ms(limit))
            })
        };
        let row = |what: String, pick: &dyn Fn(&Figures) -> Vec<f64>, goal: String| {
            let [w, p, r] = cells(pick);
            println!("| {} | {what} | {w} | {p} | {r} | {goal} |", t.label());
        };
        let rtts = Mode::ALL.map(|m| {
            of(m).map_or("—".into(), |f| {
                let ms = |d: Duration| fmt_ms(d.as_secs_f64() * 1e3);
                format!("{} (worst {})", ms(f.rtt.0), ms(f.rtt.1))
            })
        });
        println!(
            "| {} | one request's round trip, RTT (a GET; the mean of two medians of 30, before and after the rounds) | {} | {} | {} | |",
            t.label(),
            rtts[0],
            rtts[1],
            rtts[2]
        );
        let graceful = |f: &Figures| f.graceful.iter().map(Round::ms).collect::<Vec<_>>();
        row(
            "graceful handover: the release stored → the next candidate LEADING".into(),
            &graceful,
            goal(rtt_ms + 5.0, &graceful),
        );
        let crash = |f: &Figures| f.crash.iter().map(Round::ms).collect::<Vec<_>>();
        row(
            "crash failover (SIGKILL): last renew stored + lease duration → the next LEADING"
                .into(),
            &crash,
            goal(20.0, &crash),
        );
        for k in Takeover::ALL {
            let pick = move |f: &Figures| {
                f.takeover
                    .iter()
                    .filter(|(kind, _)| *kind == k)
                    .map(|(_, r)| r.ms())
                    .collect::<Vec<_>>()
            };
            row(
                format!(
                    "Lease {} by another writer → the holder's term ends",
                    k.label()
                ),
                &pick,
                goal(rtt_ms + 5.0, &pick),
            );
        }
    }
    for f in all.iter().filter(|f| f.mode == Mode::Refused) {
        let (candidates, total, lo, hi) = f.warnings;
        println!(
            "\nWatch refused (403), {}: {candidates} candidates in the bench's process logged {total} warnings, {} each:",
            f.timing.label(),
            if lo == hi { lo.to_string() } else { format!("{lo} to {hi}") }
        );
        let own = format!("lease {NS}/{}-r-", f.timing.retry.as_secs());
        if let Some(example) = warnings()
            .into_iter()
            .find(|m| m.starts_with(&own) && m.contains("refused to watch"))
        {
            println!("> {example}");
        }
    }
}

/// The writes the Lease took in `[from, to]`, as ticks.
fn ticks(writes: &[Seen], lease: &str) -> Vec<Tick> {
    let mut out = Vec::new();
    let mut holder: Option<String> = None;
    for w in writes.iter().filter(|w| w.lease == lease) {
        let what = match (w.kind.as_str(), &holder) {
            ("DELETED", _) => "deleted".to_string(),
            (_, Some(h)) if *h == w.holder && !h.is_empty() => format!("renew ({})", w.holder),
            _ if w.holder.is_empty() => "released, holder empty".to_string(),
            _ => format!("{} takes it", w.holder),
        };
        holder = (w.kind != "DELETED").then(|| w.holder.clone());
        out.push(Tick {
            at: w.at,
            by: w.holder.clone(),
            what,
        });
    }
    out
}

/// The round whose figure is the median.
fn median_round(rounds: &[Round]) -> Option<&Round> {
    let mut v: Vec<&Round> = rounds.iter().collect();
    v.sort_by(|a, b| a.ms().total_cmp(&b.ms()));
    v.get(v.len() / 2).copied()
}

/// Renews of `by` among `ticks` before `at`: the last two, for the retry
/// period bracket.
fn last_two_renews(ticks: &[Tick], by: &str, at: Instant) -> Option<(Instant, Instant)> {
    let mut r = ticks.iter().filter(|t| t.by == by && t.at < at).rev();
    let last = r.next()?.at;
    let before = r.next()?.at;
    Some((before, last))
}

/// Draw the short timings' watching rounds to `docs/timeline.svg`.
fn draw(all: &[Figures]) -> Res<Option<String>> {
    let Some(f) = all
        .iter()
        .find(|f| f.timing.name == "short" && f.mode == Mode::Watch)
    else {
        return Ok(None);
    };
    let polling = all
        .iter()
        .find(|p| p.timing.name == "short" && p.mode == Mode::Polling);
    let t = f.timing;
    let rp = |k: f64| t.retry.mul_f64(k);
    let secs = |d: Duration| format!("{} s", d.as_secs());
    let mut panels = Vec::new();
    let poll_note = |pick: &dyn Fn(&Figures) -> Vec<f64>, what: &str| {
        polling.map_or(String::new(), |p| {
            let (m, w) = stats(&pick(p));
            format!(
                "Watching, {ROUNDS} rounds: {}. Polling (watch off), {what}: median {}, worst {}.",
                cell(&pick(f)),
                fmt_ms(m),
                fmt_ms(w)
            )
        })
    };
    if let Some(r) = median_round(&f.graceful) {
        let ticks = ticks(&f.writes, &r.lease);
        let mut marks = Vec::new();
        if let Some((a, b)) = last_two_renews(&ticks, "a", r.from) {
            marks.push(Mark {
                from: a,
                to: b,
                label: format!("retry period {}: a renews", secs(t.retry)),
            });
        }
        panels.push(Panel {
            title:
                "Graceful handover: a stops and releases the Lease; b, woken by the watch, takes it"
                    .into(),
            from: r.from - rp(2.6),
            to: r.from + rp(1.4),
            zero: r.from,
            rows: r.rows.clone(),
            writes: ticks,
            marks,
            zoom: Some((r.from, r.to, "the release stored → b leading".into())),
            note: poll_note(
                &|f: &Figures| f.graceful.iter().map(Round::ms).collect(),
                "the same handover",
            ),
            hints: Vec::new(),
        });
    }
    if let Some(r) = median_round(&f.crash) {
        let ticks = ticks(&f.writes, &r.lease);
        let last = r.last_renew.unwrap_or(r.from);
        let mut marks = Vec::new();
        if let Some((a, b)) = last_two_renews(&ticks, "a", last + Duration::from_micros(1)) {
            marks.push(Mark {
                from: a,
                to: b,
                label: format!("retry period {}", secs(t.retry)),
            });
        }
        marks.push(Mark {
            from: last,
            to: last + t.deadline,
            label: format!(
                "renew deadline {}: a would have stopped leading here",
                secs(t.deadline)
            ),
        });
        marks.push(Mark {
            from: last,
            to: last + t.lease,
            label: format!(
                "lease duration {}: from the last renew b saw",
                secs(t.lease)
            ),
        });
        panels.push(Panel {
            title: "Crash failover: a (a process of its own) is killed; b takes over one lease duration after a's last renew".into(),
            from: last - rp(1.6),
            to: last + t.lease + rp(1.0),
            zero: last,
            rows: r.rows.clone(),
            writes: ticks,
            marks,
            zoom: Some((r.from, r.to, "last renew + lease duration → b leading".into())),
            note: poll_note(
                &|f: &Figures| f.crash.iter().map(Round::ms).collect(),
                "beyond the lease duration",
            ),
            hints: Vec::new(),
        });
    }
    // The round whose write fell mid-way between two renews of a: the
    // picture then shows how long polling would have let a lead on.
    let taken = f
        .takeover
        .iter()
        .filter(|(k, _)| *k == Takeover::Taken)
        .map(|(_, r)| r)
        .min_by_key(|r| {
            let ticks = ticks(&f.writes, &r.lease);
            let next = last_two_renews(&ticks, "a", r.from).map_or(r.from, |(_, b)| b + t.retry);
            let half = t.retry / 2;
            let d = next.saturating_duration_since(r.from);
            d.max(half) - d.min(half)
        });
    if let Some(r) = taken {
        let ticks = ticks(&f.writes, &r.lease)
            .into_iter()
            .map(|mut tk| {
                if tk.by == "intruder" {
                    tk.what = "another writer takes it".into();
                }
                tk
            })
            .collect::<Vec<_>>();
        let mut marks = Vec::new();
        let mut hints = Vec::new();
        if let Some((a, b)) = last_two_renews(&ticks, "a", r.from) {
            marks.push(Mark {
                from: a,
                to: b,
                label: format!("retry period {}", secs(t.retry)),
            });
            hints.push((
                b + t.retry,
                "a's next renew: polling, the term ends here".to_string(),
            ));
        }
        panels.push(Panel {
            title: "Takeover by another writer: the Lease is written under another holder; a's term ends at the watch event".into(),
            from: r.from - rp(2.6),
            to: r.from + rp(1.4),
            zero: r.from,
            rows: r.rows.clone(),
            writes: ticks,
            marks,
            zoom: Some((r.from, r.to, "the write → a's term ends".into())),
            note: poll_note(
                &|f: &Figures| {
                    f.takeover
                        .iter()
                        .filter(|(k, _)| *k == Takeover::Taken)
                        .map(|(_, r)| r.ms())
                        .collect()
                },
                "the same takeover",
            ),
            hints,
        });
    }
    let svg = crate::timeline::render(
        &format!(
            "Every change of the Lease within a round trip (lease {}, renew deadline {}, retry period {})",
            secs(t.lease),
            secs(t.deadline),
            secs(t.retry)
        ),
        "Drawn by examples/bench.rs from its own run on loopback (the median round of each); t = 0 at the write each panel is about.",
        &panels,
    );
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/timeline.svg");
    std::fs::write(path, svg)?;
    Ok(Some("docs/timeline.svg".into()))
}

/// One row of the cost table.
struct Cost {
    timing: Timing,
    mode: Mode,
    leader_per_min: f64,
    follower_per_min: f64,
    server_per_min: f64,
    watches: u64,
    open: usize,
}

/// What the watch costs, against what polling costs: requests per minute
/// per candidate (a leader and a follower on one Lease, each server its
/// own), watch requests (reconnects) in the window, connections; and a
/// watch alone on a free Lease nobody writes (its reconnects). Every
/// timing and mode runs side by side, after a warm-up, for `window`.
pub fn cost_section(timings: &[Timing], window: Duration) -> Res<()> {
    let warm = timings
        .iter()
        .map(|t| t.retry.mul_f64(3.5))
        .max()
        .unwrap_or_default()
        .max(Duration::from_secs(60));
    eprintln!(
        "bench: watch cost: {} s of warm-up, then {} s",
        warm.as_secs(),
        window.as_secs()
    );
    let mut stages = Vec::new();
    for t in timings {
        for m in Mode::ALL {
            let server = TestApiServer::start()?;
            server.add_namespace(NS);
            if m == Mode::Refused {
                server.inject(Fault::status(403).path_contains("watch=true").forever());
            }
            let elector = |id: &str| -> Res<(ElectorHandle, LeaderEvents)> {
                let client = Client::new(ClientConfig::new(server.url()))?;
                Ok(
                    LeaderElector::builder(LeaseLock::new(client, NS, "cost", id))
                        .lease_duration(t.lease)
                        .renew_deadline(t.deadline)
                        .retry_period(t.retry)
                        .watch(m.watch())
                        .build()?
                        .spawn()?,
                )
            };
            let a = elector("a")?;
            wait_started(&a.1, t.lease * 2)?;
            let b = elector("b")?;
            stages.push((*t, m, server, a, b));
        }
    }
    // A watch alone on a free Lease, per retry period.
    let mut quiet = Vec::new();
    for t in timings {
        let server = TestApiServer::start()?;
        server.add_namespace(NS);
        let mut free = lease_elector::Lease::new(NS, "quiet", &Default::default());
        let mut r = free.record();
        r.lease_duration_seconds = t.lease.as_secs() as i32;
        free.set_record(&r);
        server.put_lease(NS, &free);
        let lock = LeaseLock::new(
            Client::new(ClientConfig::new(server.url()))?,
            NS,
            "quiet",
            "w",
        );
        let watcher = lease_elector::Lock::watch(&lock, lease_elector::Wakeup::new(), t.retry)
            .ok_or("a LeaseLock watches")??;
        quiet.push((*t, server, watcher));
    }
    thread::sleep(warm);
    let at_start: Vec<_> = stages
        .iter()
        .map(|(_, _, s, a, b)| {
            (
                s.stats(),
                a.0.probe().status().requests,
                b.0.probe().status().requests,
            )
        })
        .collect();
    let quiet_start: Vec<u64> = quiet.iter().map(|(_, s, _)| s.stats().watches).collect();
    thread::sleep(window / 2);
    let open: Vec<usize> = stages
        .iter()
        .map(|(_, _, s, _, _)| super::port_of(&s.url()).map_or(0, super::open_connections))
        .collect();
    thread::sleep(window / 2);
    let minutes = window.as_secs_f64() / 60.0;
    let mut rows = Vec::new();
    for (i, (t, m, s, a, b)) in stages.iter().enumerate() {
        let (s0, a0, b0) = &at_start[i];
        let s1 = s.stats();
        rows.push(Cost {
            timing: *t,
            mode: *m,
            leader_per_min: (a.0.probe().status().requests - a0) as f64 / minutes,
            follower_per_min: (b.0.probe().status().requests - b0) as f64 / minutes,
            server_per_min: (s1.requests - s0.requests) as f64 / minutes / 2.0,
            watches: s1.watches - s0.watches,
            open: open[i],
        });
    }
    let quiet_rows: Vec<(Timing, u64, u64)> = quiet
        .iter()
        .enumerate()
        .map(|(i, (t, s, _))| (*t, s.stats().watches, s.stats().watches - quiet_start[i]))
        .collect();
    drop(quiet);
    for (_, _, s, a, b) in stages {
        b.0.stop()?;
        a.0.stop()?;
        s.shutdown();
    }
    println!(
        "\n| lease / renew deadline / retry period | mode | requests/min by the leader, the follower (acquire and renew) | the API server's requests/min per candidate (all, watches included) | watch requests in {} s (both candidates) | open connections (both candidates) |",
        window.as_secs()
    );
    println!("|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {:.1}, {:.1} | {:.1} | {} | {} |",
            r.timing.label(),
            r.mode.label(),
            r.leader_per_min,
            r.follower_per_min,
            r.server_per_min,
            r.watches,
            r.open
        );
    }
    for (t, all, in_window) in quiet_rows {
        println!(
            "| {} | a watch alone on a free Lease nobody writes | — | — | {in_window} ({all} since it started {} s earlier) | 1 |",
            t.label(),
            (warm + window).as_secs()
        );
    }
    println!(
        "\nReconnects per hour, per watch: the server ends each stream at the timeoutSeconds the watch asks for, drawn in [300, 600) s as client-go's reflector draws it, so 6 to 12 (8 on average, read from the configuration, not waited for); nothing else reopens a stream on a held Lease (a write every retry period) or a free one (a bookmark every 60 s from the server, as kube-apiserver sends them, against a silence limit of 90 s), as the window's counts show. A server that sends no bookmarks costs a reopen every 90 s on a free Lease (40 an hour). Refused (403), the watch is asked again every 10 min: 6 an hour."
    );
    Ok(())
}
