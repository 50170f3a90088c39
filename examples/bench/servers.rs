//! Issue 43's figures: the same rounds on the test server and on
//! kube-apiserver with etcd (`.ci/control-plane up DIR`, then `--only
//! servers --control-plane DIR`), side by side: a graceful handover, a
//! crash failover, another writer's takeover seen, and what the API server
//! receives per candidate, at 4/3/1 s and 15/10/2 s, watching (the
//! default).
//!
//! One code path for both: the candidates build their clients from a
//! kubeconfig (TLS, a bearer token), and everything the bench does as an
//! operator (watch the Lease, take it) goes through kubectl with the
//! admin's kubeconfig. A write "the store took" is timed when the bench's
//! `kubectl get leases --watch` printed it: a few milliseconds after the
//! server sent it, so a figure measured from it is as long as the true one
//! or shorter, never longer. Requests per minute come from the server's
//! own record: the embedded server's request log, kube-apiserver's audit
//! log (`DIR/audit.log`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use lease_elector::testing::TestApiServer;
use lease_elector::{
    Client, ClientConfig, ElectorHandle, LeaderElector, LeaderEvent, LeaderEvents, LeaseLock,
    MicroTime,
};
use serde_json::Value;

use super::handover::{Seen, Timing, Writes, TIMINGS};
use super::{median, Res};

const ROUNDS: usize = 6;
const TOKEN: &str = "bench-token";

/// The server under the figures.
enum Backend {
    Embedded { server: TestApiServer, dir: PathBuf },
    Real(PathBuf),
}

impl Backend {
    fn label(&self) -> &'static str {
        match self {
            Backend::Embedded { .. } => "test server",
            Backend::Real(_) => "kube-apiserver + etcd",
        }
    }

    fn kubeconfig(&self) -> PathBuf {
        match self {
            Backend::Embedded { dir, .. } => dir.join("kubeconfig"),
            Backend::Real(dir) => dir.join("elector.kubeconfig"),
        }
    }

    fn admin(&self) -> PathBuf {
        match self {
            Backend::Embedded { dir, .. } => dir.join("kubeconfig"),
            Backend::Real(dir) => dir.join("admin.kubeconfig"),
        }
    }

    fn kubectl(&self, args: &[&str]) -> Res<String> {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(self.admin())
            .args(args)
            .output()?;
        if !out.status.success() {
            return Err(format!(
                "kubectl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )
            .into());
        }
        Ok(String::from_utf8(out.stdout)?)
    }

    /// Requests for Leases of namespace `ns` the server answered so far.
    fn lease_requests(&self, ns: &str) -> usize {
        match self {
            Backend::Embedded { server, .. } => {
                let within = format!("/namespaces/{ns}/leases");
                server
                    .requests()
                    .iter()
                    .filter(|r| r.path.contains(&within))
                    .count()
            }
            Backend::Real(dir) => {
                let log = std::fs::read_to_string(dir.join("audit.log")).unwrap_or_default();
                log.lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                    .filter(|e| {
                        e["stage"] == "ResponseComplete"
                            && e["objectRef"]["namespace"] == ns
                            && e["objectRef"]["resource"] == "leases"
                            && e["user"]["username"] != "admin"
                    })
                    .count()
            }
        }
    }
}

/// `kubectl get leases -n NS --watch`, each event timed as it is parsed.
struct Observer {
    child: Child,
    seen: Writes,
}

impl Observer {
    fn start(backend: &Backend, ns: &str) -> Res<Observer> {
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(backend.admin())
            .args([
                "get",
                "leases",
                "-n",
                ns,
                "--watch",
                "--output-watch-events",
            ])
            .args(["-o", "json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let out = child.stdout.take().ok_or("no stdout")?;
        let seen = Writes::default();
        let sink = seen.clone();
        thread::spawn(move || {
            let events =
                serde_json::Deserializer::from_reader(BufReader::new(out)).into_iter::<Value>();
            for e in events.map_while(Result::ok) {
                let mut seen = Seen::of_event(Instant::now(), &e);
                // A deletion leaves no holder.
                if seen.kind == "DELETED" {
                    seen.holder.clear();
                }
                sink.push(seen);
            }
        });
        Ok(Observer { child, seen })
    }

    fn seen(&self, lease: &str) -> Vec<Seen> {
        self.seen.of(lease)
    }

    /// The first write of `lease` after `from` that `pred` accepts.
    fn first(
        &self,
        lease: &str,
        from: Instant,
        within: Duration,
        pred: impl Fn(&Seen) -> bool,
    ) -> Res<Seen> {
        self.seen
            .first(lease, from, within, pred)
            .ok_or_else(|| format!("{lease}: the write was not seen").into())
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Stage<'a> {
    backend: &'a Backend,
    ns: String,
    timing: Timing,
    observer: Observer,
}

impl Stage<'_> {
    fn elector(&self, lease: &str, id: &str) -> Res<(ElectorHandle, LeaderEvents)> {
        let config = ClientConfig::from_kubeconfig(self.backend.kubeconfig(), None)?;
        let t = self.timing;
        Ok(
            LeaderElector::builder(LeaseLock::new(Client::new(config)?, &self.ns, lease, id))
                .lease_duration(t.lease)
                .renew_deadline(t.deadline)
                .retry_period(t.retry)
                .release_on_cancel(true)
                .build()?
                .spawn()?,
        )
    }
}

fn wait_event(
    events: &LeaderEvents,
    within: Duration,
    pred: impl Fn(&LeaderEvent) -> bool,
) -> Res<Instant> {
    let until = Instant::now() + within;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(e) if pred(&e) => return Ok(Instant::now()),
            Ok(_) => {}
            Err(e) => return Err(format!("no such event within {within:?}: {e}").into()),
        }
    }
}

fn started(events: &LeaderEvents, within: Duration) -> Res<Instant> {
    wait_event(events, within, |e| {
        matches!(e, LeaderEvent::StartedLeading { .. })
    })
}

fn stopped(events: &LeaderEvents, within: Duration) -> Res<Instant> {
    wait_event(events, within, |e| {
        matches!(e, LeaderEvent::StoppedLeading { .. })
    })
}

/// The release stored → the follower's `StartedLeading`.
fn graceful(stage: &Stage<'_>, lease: &str) -> Res<Duration> {
    let t = stage.timing;
    let (a, a_events) = stage.elector(lease, "a")?;
    started(&a_events, t.lease * 3)?;
    let (b, b_events) = stage.elector(lease, "b")?;
    let until = Instant::now() + t.retry * 4;
    while b.probe().leader().as_deref() != Some("a") || !b.probe().status().watch.is_watching() {
        if Instant::now() > until {
            return Err("b never saw a".into());
        }
        thread::sleep(Duration::from_millis(5));
    }
    let stop = Instant::now();
    a.stop()?;
    let led = started(&b_events, t.lease + t.retry * 4)?;
    let release = stage
        .observer
        .first(lease, stop, t.retry * 2, |s| s.holder.is_empty())?;
    b.stop()?;
    Ok(led.saturating_duration_since(release.at))
}

/// The leader, a process of its own, is killed (SIGKILL): its last renew
/// stored + the lease duration → the follower's `StartedLeading`.
fn crash(stage: &Stage<'_>, lease: &str) -> Res<Duration> {
    let t = stage.timing;
    let mut child = Command::new(std::env::current_exe()?)
        .arg("--candidate")
        .arg(stage.backend.kubeconfig())
        .args([lease, "a"])
        .args([t.lease, t.deadline, t.retry].map(|d| d.as_millis().to_string()))
        .args(["watch", &stage.ns])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
    if lines.next().transpose()?.as_deref() != Some("LEADING") {
        let _ = child.kill();
        return Err("the candidate did not lead".into());
    }
    let (b, b_events) = stage.elector(lease, "b")?;
    let until = Instant::now() + t.retry * 4;
    while b.probe().leader().as_deref() != Some("a") {
        if Instant::now() > until {
            let _ = child.kill();
            return Err("b never saw a".into());
        }
        thread::sleep(Duration::from_millis(5));
    }
    // A renew or two first, so that the last one is a renew.
    thread::sleep(t.retry * 2);
    child.kill()?;
    child.wait()?;
    let led = started(&b_events, t.lease + t.retry * 4)?;
    let last = stage
        .observer
        .seen(lease)
        .into_iter()
        .rev()
        // A renew sent just before the kill may be stored after it.
        .find(|s| s.holder == "a" && s.at <= led)
        .ok_or("no renew of a was seen")?;
    b.stop()?;
    Ok(led.saturating_duration_since(last.at + t.lease))
}

/// Another writer takes the Lease: that write stored → the holder's
/// `StoppedLeading`.
fn takeover(stage: &Stage<'_>, lease: &str) -> Res<Duration> {
    let t = stage.timing;
    let (a, a_events) = stage.elector(lease, "a")?;
    started(&a_events, t.lease * 3)?;
    thread::sleep(t.retry);
    let now = MicroTime::from_system_time(SystemTime::now()).to_string();
    let patch = serde_json::json!({"spec": {
        "holderIdentity": "intruder", "acquireTime": now, "renewTime": now,
    }})
    .to_string();
    let write = Instant::now();
    stage.backend.kubectl(&[
        "patch", "lease", lease, "-n", &stage.ns, "--type", "merge", "-p", &patch,
    ])?;
    let ended = stopped(&a_events, t.retry * 3)?;
    let seen = stage
        .observer
        .first(lease, write, t.retry, |s| s.holder == "intruder")?;
    a.stop()?;
    Ok(ended.saturating_duration_since(seen.at))
}

/// A leader and a follower for `window`: the server's Lease requests per
/// minute per candidate.
fn cost(stage: &Stage<'_>, window: Duration) -> Res<f64> {
    let t = stage.timing;
    let (a, a_events) = stage.elector("cost", "a")?;
    started(&a_events, t.lease * 3)?;
    let (b, _b_events) = stage.elector("cost", "b")?;
    thread::sleep(t.retry * 3);
    let before = stage.backend.lease_requests(&stage.ns);
    thread::sleep(window);
    let after = stage.backend.lease_requests(&stage.ns);
    b.stop()?;
    a.stop()?;
    Ok((after - before) as f64 / window.as_secs_f64() * 60.0 / 2.0)
}

#[derive(Default)]
struct Row {
    graceful: Vec<Duration>,
    crash: Vec<Duration>,
    takeover: Vec<Duration>,
    per_min: f64,
}

fn run(backend: &Backend, timing: Timing, n: usize) -> Res<Row> {
    let ns = format!(
        "servers-{}-{}",
        timing.retry.as_secs(),
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)?
            .as_millis()
    );
    match backend {
        Backend::Embedded { server, .. } => server.add_namespace(&ns),
        Backend::Real(_) => {
            backend.kubectl(&["create", "namespace", &ns])?;
        }
    }
    let stage = Stage {
        observer: Observer::start(backend, &ns)?,
        backend,
        ns,
        timing,
    };
    // Give the observer's watch time to open.
    thread::sleep(Duration::from_millis(500));
    let mut row = Row::default();
    let results: Vec<Result<(usize, Duration), String>> = thread::scope(|s| {
        let handles: Vec<_> = (0..n * 3)
            .map(|lane| {
                let stage = &stage;
                s.spawn(move || {
                    // Lanes a little apart, so that kubectl's starts spread.
                    thread::sleep(Duration::from_millis(150) * lane as u32);
                    let lease = format!("l{lane}");
                    let d = match lane % 3 {
                        0 => graceful(stage, &lease),
                        1 => crash(stage, &lease),
                        _ => takeover(stage, &lease),
                    }
                    .map_err(|e| e.to_string())?;
                    Ok((lane % 3, d))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a round panicked".to_string()))
            })
            .collect()
    });
    for r in results {
        let (kind, d) = r?;
        match kind {
            0 => row.graceful.push(d),
            1 => row.crash.push(d),
            _ => row.takeover.push(d),
        }
    }
    row.per_min = cost(&stage, Duration::from_secs(30))?;
    Ok(row)
}

fn cell(v: &[Duration]) -> String {
    let worst = v.iter().copied().max().unwrap_or_default();
    let ms = |d: Duration| {
        let ms = d.as_secs_f64() * 1e3;
        if ms < 10.0 {
            format!("{ms:.1} ms")
        } else {
            format!("{ms:.0} ms")
        }
    };
    format!("{} / {}", ms(median(v.to_vec())), ms(worst))
}

/// Both servers at short and client-go timings; `control_plane` the
/// folder `.ci/control-plane up` wrote (without it, the test server alone).
pub fn section(control_plane: Option<&Path>) -> Res<()> {
    let dir = std::env::temp_dir().join(format!(
        "lease-elector-bench-servers-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir)?;
    let server = TestApiServer::builder()
        .tls(true)
        .tokens(&[TOKEN])
        .build()?;
    server.write_kubeconfig(dir.join("kubeconfig"), Some(TOKEN))?;
    let mut backends = vec![Backend::Embedded {
        server,
        dir: dir.clone(),
    }];
    if let Some(cp) = control_plane {
        backends.push(Backend::Real(cp.to_path_buf()));
    }
    let timings: Vec<Timing> = TIMINGS
        .into_iter()
        .filter(|t| t.name != "OpenShift")
        .collect();
    let mut table: Vec<(Timing, Vec<Row>)> = Vec::new();
    for t in &timings {
        let mut rows = Vec::new();
        for b in &backends {
            eprintln!(
                "bench: servers at {}/{}/{} s: {}",
                t.lease.as_secs(),
                t.deadline.as_secs(),
                t.retry.as_secs(),
                b.label()
            );
            rows.push(run(b, *t, ROUNDS)?);
        }
        table.push((*t, rows));
    }
    let _ = std::fs::remove_dir_all(&dir);
    let labels: Vec<&str> = backends.iter().map(Backend::label).collect();
    println!(
        "\n| lease / renew deadline / retry period | figure ({ROUNDS} rounds; median / worst) | {} |",
        labels.join(" | ")
    );
    println!("|---|---|{}", "---|".repeat(labels.len()));
    for (t, rows) in &table {
        let label = format!(
            "{}/{}/{} s",
            t.lease.as_secs(),
            t.deadline.as_secs(),
            t.retry.as_secs()
        );
        let line = |what: &str, f: &dyn Fn(&Row) -> String| {
            let cells: Vec<String> = rows.iter().map(f).collect();
            println!("| {label} | {what} | {} |", cells.join(" | "));
        };
        line(
            "graceful handover: the release stored → the next LEADING",
            &|r| cell(&r.graceful),
        );
        line(
            "crash failover (SIGKILL): last renew stored + lease duration → the next LEADING",
            &|r| cell(&r.crash),
        );
        line(
            "another writer takes the Lease: that write stored → the holder's term ends",
            &|r| cell(&r.takeover),
        );
        line("Lease requests/min at the API server per candidate (a leader and a follower, 30 s; watches counted)", &|r| format!("{:.1}", r.per_min));
    }
    Ok(())
}
