//! Elect on a Lease and print one line per event:
//! `LEADING <id>`, `STOPPED <id>`, `NEW_LEADER <id>`. `STOPPED` is written
//! when the term ends, before the lease is released: a script reading
//! several candidates' lines sees it before the next one's `LEADING`.
//!
//! ```text
//! elect [--server URL --namespace NS | --kubeconfig F [--context C]] --name NAME
//!       [--identity ID] [--token-file F] [--ca-file F]
//!       [--lease-duration S --renew-deadline S --retry-period S]
//!       [--release-on-cancel] [--no-watch] [--ignore-stdin] [--no-events]
//! elect --help | --version
//! ```
//!
//! The flags that name the API server are read by
//! `lease_elector::client::ConnectOptions`, as `lease-elect` reads them:
//! without `--server` it uses `--kubeconfig F` (YAML or JSON) if given,
//! else `$KUBECONFIG` or `~/.kube/config` where there is one (in a pod
//! too), else the pod's in-cluster config, as kubectl does; `--context C`
//! picks a kubeconfig context as kubectl's does. The namespace defaults to the kubeconfig context's or the pod's;
//! with `--server` it must be given. An `https://` `--server` needs
//! `--ca-file`. Durations are seconds or Go duration strings (`15`, `1.5`,
//! `15s`, `1m30s`).
//!
//! It watches the Lease (`--no-watch` polls instead, as client-go does), so
//! that a release or a takeover reaches it within a round trip; a server
//! that refuses the watch gets polling, and one line on stderr with the
//! RBAC to grant. It records Kubernetes Events for transitions, as library-go does
//! (`--no-events` turns that off). It keeps competing after losing the
//! lease, and exits 0 on SIGTERM/SIGINT or when stdin closes, if stdin is
//! a pipe or a socket (a terminal or `/dev/null` is never read, so it runs
//! as a background job or in a container until signalled), releasing the
//! lease first with `--release-on-cancel`. Usage errors exit 2. The
//! crate's warnings and errors (a server it cannot talk to and what to
//! check, a lost lease and why, recovery, an insecure kubeconfig cluster)
//! go to stderr.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use lease_elector::client::ConnectOptions;
use lease_elector::events::EventRecorder;
use lease_elector::text::Escaped;
use lease_elector::tool::{check_election_flags, duration_flag, watch_flag};
use lease_elector::{
    Client, ElectorConfig, ElectorStatus, LeaderElector, LeaderEvent, LeaseLock, StopReason,
};

#[derive(Debug, Default)]
struct Args {
    /// Read as `lease-elect` reads them.
    connect: ConnectOptions,
    name: Option<String>,
    identity: Option<String>,
    lease_duration: Option<Duration>,
    renew_deadline: Option<Duration>,
    retry_period: Option<Duration>,
    release_on_cancel: bool,
    /// `--watch` (the default) or `--no-watch`.
    watch: Option<bool>,
    ignore_stdin: bool,
    no_events: bool,
}

const USAGE: &str = "usage: elect [--server URL --namespace NS | --kubeconfig F [--context C]] --name NAME [--identity ID] \
[--token-file F] [--ca-file F] [--lease-duration S --renew-deadline S --retry-period S] \
[--release-on-cancel] [--no-watch] [--ignore-stdin] [--no-events] | --help | --version";

const HELP: &str = "\
elect: Kubernetes leader election on a coordination.k8s.io/v1 Lease; one line per event on
stdout: LEADING <identity>, STOPPED <identity>, NEW_LEADER <identity>.

  --server URL            the API server's URL; --namespace is then required
  --ca-file F             the CA bundle to verify the server with: needed for an https:// --server
  --token-file F          bearer token, re-read as it rotates
  --kubeconfig F          a kubeconfig file (default, as kubectl: $KUBECONFIG or ~/.kube/config
                          if there is one, else in-cluster in a pod)
  --context C             a kubeconfig context, as kubectl's --context
  --namespace NS          default: the kubeconfig context's or the pod's namespace
  --name NAME             the Lease's name (required)
  --identity ID           this candidate's identity (default <hostname>_<uuid>)
  --lease-duration S      default 15s; seconds or Go durations (15, 1.5, 1m30s)
  --renew-deadline S      default 10s
  --retry-period S        default 2s, at least 100ms: every request is paced by it
  --release-on-cancel     release the lease on exit so another candidate takes over at once
  --no-watch              poll the Lease every retry period instead of watching it (the watch,
                          on by default, brings every change within a round trip and needs
                          `list` and `watch` on leases; --watch is still accepted)
  --ignore-stdin          do not stop when stdin closes (only a pipe or a socket is read)
  --no-events             do not record Kubernetes Events for transitions
  -h, --help              this text
  -V, --version           the version

Warnings and errors go to stderr: a server it cannot talk to, with what to check; a lost
lease and why; requests that succeed again after a failure.

Exits 0 on SIGTERM/SIGINT or when stdin (a pipe or a socket) closes, 1 on an error, 2 on a
usage error.
";

/// What the crate warns about, told on stderr from the elector's status:
/// a failing server (the first error of a streak, with what to check),
/// recovery, a lost lease and why. A `log` logger would say it too, but
/// would make every log line of the crate and of its HTTP and TLS libraries
/// live code: 79 KB that the static `elect` (at most 3 MB) cannot afford.
#[derive(Default)]
struct Reporter {
    failing: bool,
    /// The last reason for polling told (each is told once).
    polling: Option<String>,
}

impl Reporter {
    fn report(&mut self, s: &ElectorStatus, event: Option<&LeaderEvent>) {
        let lease = format!("{}/{}", s.namespace, s.name);
        match (&s.last_error, s.consecutive_failures > 0, self.failing) {
            (Some(e), true, false) => {
                eprintln!("elect: {} ({})", Escaped(&e.message), Escaped(&e.hint))
            }
            (_, false, true) => eprintln!("elect: lease {lease}: requests succeed again"),
            _ => {}
        }
        self.failing = s.consecutive_failures > 0;
        if let lease_elector::WatchMode::Polling(why) = &s.watch {
            if self.polling.as_ref() != Some(why) {
                eprintln!(
                    "elect: lease {lease}: polling, not watching: {}",
                    Escaped(why)
                );
                self.polling = Some(why.clone());
            }
        }
        // The reason is recorded before StoppedLeading is sent.
        if let (Some(LeaderEvent::StoppedLeading { reason, .. }), Some(why)) = (event, &s.last_loss)
        {
            if *reason == StopReason::Lost {
                eprintln!("elect: lost lease {lease}: {}", Escaped(why));
            }
        }
    }
}

/// What the command line asks for.
enum Parsed {
    Run(Box<Args>),
    Help,
    Version,
}

fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Parsed, String> {
    let mut a = Args::default();
    while let Some(arg) = it.next() {
        // `--flag value` or `--flag=value`, as lease-elect reads them.
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg, None),
        };
        let mut value = || match inline.clone() {
            Some(v) => Ok(v),
            None => it.next().ok_or_else(|| format!("{flag} needs a value")),
        };
        match flag.as_str() {
            "--server" => a.connect.server = Some(value()?),
            "--kubeconfig" => a.connect.kubeconfig = Some(value()?.into()),
            "--context" => a.connect.context = Some(value()?),
            "--namespace" => a.connect.namespace = Some(value()?),
            "--name" => a.name = Some(value()?),
            "--identity" => a.identity = Some(value()?),
            "--token-file" => a.connect.token_file = Some(value()?.into()),
            "--ca-file" => a.connect.ca_file = Some(value()?.into()),
            "--lease-duration" => a.lease_duration = Some(duration_flag(&flag, &value()?)?),
            "--renew-deadline" => a.renew_deadline = Some(duration_flag(&flag, &value()?)?),
            "--retry-period" => a.retry_period = Some(duration_flag(&flag, &value()?)?),
            "--release-on-cancel" | "--watch" | "--no-watch" | "--ignore-stdin" | "--no-events"
                if inline.is_some() =>
            {
                return Err(format!("{flag} takes no value"));
            }
            "--watch" | "--no-watch" => a.watch = watch_flag(&flag),
            "--release-on-cancel" => a.release_on_cancel = true,
            "--ignore-stdin" => a.ignore_stdin = true,
            "--no-events" => a.no_events = true,
            "-h" | "--help" => return Ok(Parsed::Help),
            "-V" | "--version" => return Ok(Parsed::Version),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.name.is_none() {
        return Err("--name is required".into());
    }
    a.connect.check_flags()?;
    let mut timings = ElectorConfig::default();
    for (flag, value) in [
        (&mut timings.lease_duration, a.lease_duration),
        (&mut timings.renew_deadline, a.renew_deadline),
        (&mut timings.retry_period, a.retry_period),
    ] {
        if let Some(value) = value {
            *flag = value;
        }
    }
    check_election_flags(
        &timings,
        a.connect.namespace.as_deref(),
        a.name.as_deref().unwrap_or_default(),
        a.identity.as_deref(),
    )?;
    Ok(Parsed::Run(Box::new(a)))
}

enum Msg {
    Event(LeaderEvent),
    /// The elector ended: every event was sent.
    Ended,
    Quit(&'static str),
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(Parsed::Run(a)) => a,
        Ok(Parsed::Help) => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Ok(Parsed::Version) => {
            println!("elect {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("elect: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(*args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("elect: {}", Escaped(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error as the line `main` prints. Not `Box<dyn Error>`: its vtables
/// would link the `Debug` of every error type (and those they wrap) into
/// the static binary, for a message that only ever shows `Display`.
fn said(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn run(args: Args) -> Result<(), String> {
    let (config, namespace) = args.connect.resolve().map_err(said)?;
    // Without a logger (it would link the formatting of every log line of
    // the crate into this small binary), the configuration's warnings.
    for warning in config.warnings() {
        eprintln!("elect: warning: {warning}");
    }
    let name = args.name.clone().unwrap_or_default();
    let identity = args
        .identity
        .clone()
        .unwrap_or_else(lease_elector::identity);
    let client = Client::new(config).map_err(said)?;
    let mut lock = LeaseLock::new(client.clone(), namespace, name, identity.clone());
    if !args.no_events {
        let recorder = EventRecorder::new(client, "elect").with_instance(identity.clone());
        lock = lock.with_event_sink(Arc::new(recorder));
    }
    let mut builder = LeaderElector::builder(lock)
        .release_on_cancel(args.release_on_cancel)
        .rejoin(true);
    if let Some(d) = args.lease_duration {
        builder = builder.lease_duration(d);
    }
    if let Some(d) = args.renew_deadline {
        builder = builder.renew_deadline(d);
    }
    if let Some(d) = args.retry_period {
        builder = builder.retry_period(d);
    }
    if let Some(watch) = args.watch {
        builder = builder.watch(watch);
    }
    let (handle, events) = builder
        .build()
        .and_then(LeaderElector::spawn)
        .map_err(said)?;

    let (tx, rx) = mpsc::channel();
    let forward = {
        let tx = tx.clone();
        thread::spawn(move || {
            for ev in events {
                if tx.send(Msg::Event(ev)).is_err() {
                    return;
                }
            }
            let _ = tx.send(Msg::Ended);
        })
    };
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])
    .map_err(said)?;
    {
        let tx = tx.clone();
        thread::spawn(move || {
            if signals.forever().next().is_some() {
                let _ = tx.send(Msg::Quit("signal"));
            }
        });
    }
    if !args.ignore_stdin && lease_elector::tool::stdin_is_a_pipe() {
        let tx = tx.clone();
        thread::spawn(move || {
            let mut sink = [0u8; 256];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
            let _ = tx.send(Msg::Quit("stdin closed"));
        });
    }
    drop(tx);

    let out = std::io::stdout();
    let print = |ev: &LeaderEvent| {
        let line = match ev {
            LeaderEvent::StartedLeading { .. } => format!("LEADING {}", Escaped(&identity)),
            LeaderEvent::StoppedLeading { .. } => format!("STOPPED {}", Escaped(&identity)),
            LeaderEvent::NewLeader { identity: who, .. } => format!("NEW_LEADER {}", Escaped(who)),
            _ => return,
        };
        let mut out = out.lock();
        // stdout closed: nothing left to tell anyone.
        let _ = writeln!(out, "{line}").and_then(|()| out.flush());
    };
    let mut reporter = Reporter::default();
    let stopper = handle.stopper();
    // The term as received, held until its STOPPED line is written: a
    // release waits for every hold on the term, so the line comes before
    // the next candidate can lead (a script reading several candidates'
    // lines sees this STOPPED before the next LEADING).
    let mut held = None;
    let mut stopping = false;
    loop {
        match rx.recv_timeout(Duration::from_millis(250)) {
            Ok(Msg::Event(ev)) => {
                print(&ev);
                reporter.report(&handle.probe().status(), Some(&ev));
                match ev {
                    LeaderEvent::StartedLeading { term, .. } => held = Some(term),
                    LeaderEvent::StoppedLeading { .. } => held = None,
                    _ => {}
                }
            }
            Ok(Msg::Quit(reason)) if !stopping => {
                log::info!("stopping: {reason}");
                // Not joined here: the elector steps down, this loop prints
                // its STOPPED and lets go of the term, then it releases.
                stopper.stop();
                stopping = true;
            }
            Ok(Msg::Quit(_)) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => {
                reporter.report(&handle.probe().status(), None);
            }
            Ok(Msg::Ended) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    drop(held);
    handle.stop().map_err(said)?;
    let _ = forward.join();
    Ok(())
}
