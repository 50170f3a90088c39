//! Elect on a Lease and print one line per event:
//! `LEADING <id>`, `STOPPED <id>`, `NEW_LEADER <id>`.
//!
//! ```text
//! elect --server URL --namespace NS --name NAME --identity ID
//!       [--token-file F] [--ca-file F]
//!       [--lease-duration S --renew-deadline S --retry-period S]
//!       [--release-on-cancel] [--ignore-stdin]
//! ```
//!
//! Without `--server` it uses `--kubeconfig F` (YAML or JSON) if given,
//! else in-cluster config in a pod and `$KUBECONFIG` or `~/.kube/config`
//! outside one; `--context C` picks a kubeconfig context as kubectl's
//! does. The namespace defaults to the kubeconfig context's or the pod's.
//! Durations are seconds or Go duration strings (`15`, `15s`, `1m30s`). It keeps competing after losing the
//! lease, and exits 0 on SIGTERM/SIGINT or when stdin closes (releasing
//! the lease first with `--release-on-cancel`); pass `--ignore-stdin` in a
//! container whose stdin is `/dev/null`.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use lease_elector::client::ConnectOptions;
use lease_elector::text::Escaped;
use lease_elector::{Client, LeaderElector, LeaderEvent, LeaseLock};

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
    ignore_stdin: bool,
}

const USAGE: &str = "usage: elect [--server URL | --kubeconfig F [--context C]] [--namespace NS] --name NAME [--identity ID] \
[--token-file F] [--ca-file F] [--lease-duration S --renew-deadline S --retry-period S] \
[--release-on-cancel] [--ignore-stdin]";

fn parse_duration(flag: &str, v: &str) -> Result<Duration, String> {
    if let Ok(secs) = v.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok(Duration::from_secs_f64(secs));
        }
    }
    lease_elector::duration::parse_go_duration(v).map_err(|e| format!("{flag}: {e}"))
}

fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args::default();
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--server" => a.connect.server = Some(value()?),
            "--kubeconfig" => a.connect.kubeconfig = Some(value()?.into()),
            "--context" => a.connect.context = Some(value()?),
            "--namespace" => a.connect.namespace = Some(value()?),
            "--name" => a.name = Some(value()?),
            "--identity" => a.identity = Some(value()?),
            "--token-file" => a.connect.token_file = Some(value()?.into()),
            "--ca-file" => a.connect.ca_file = Some(value()?.into()),
            "--lease-duration" => a.lease_duration = Some(parse_duration(&flag, &value()?)?),
            "--renew-deadline" => a.renew_deadline = Some(parse_duration(&flag, &value()?)?),
            "--retry-period" => a.retry_period = Some(parse_duration(&flag, &value()?)?),
            "--release-on-cancel" => a.release_on_cancel = true,
            "--ignore-stdin" => a.ignore_stdin = true,
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if a.connect.server.is_some() && a.connect.namespace.is_none() {
        return Err(format!("--namespace is required with --server\n{USAGE}"));
    }
    Ok(a)
}

enum Msg {
    Event(LeaderEvent),
    Quit(&'static str),
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("elect: {}", Escaped(&e.to_string()));
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let (config, namespace) = args.connect.resolve()?;
    let name = args.name.clone().ok_or("--name is required")?;
    let identity = args
        .identity
        .clone()
        .unwrap_or_else(lease_elector::identity);
    let client = Client::new(config)?;
    let lock = LeaseLock::new(client, namespace, name, identity.clone());
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
    let (handle, events) = builder.build()?.spawn()?;

    let (tx, rx) = mpsc::channel();
    let forward = {
        let tx = tx.clone();
        thread::spawn(move || {
            for ev in events {
                if tx.send(Msg::Event(ev)).is_err() {
                    break;
                }
            }
        })
    };
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])?;
    {
        let tx = tx.clone();
        thread::spawn(move || {
            if signals.forever().next().is_some() {
                let _ = tx.send(Msg::Quit("signal"));
            }
        });
    }
    if !args.ignore_stdin {
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
        };
        let mut out = out.lock();
        // stdout closed: nothing left to tell anyone.
        let _ = writeln!(out, "{line}").and_then(|()| out.flush());
    };
    let reason = loop {
        match rx.recv() {
            Ok(Msg::Event(ev)) => print(&ev),
            Ok(Msg::Quit(reason)) => break reason,
            Err(_) => break "elector ended",
        }
    };
    log::info!("stopping: {reason}");
    let stopped = handle.stop();
    // The event channel disconnects once the elector thread is gone; print
    // what it sent on the way out (StoppedLeading).
    let _ = forward.join();
    while let Ok(msg) = rx.try_recv() {
        if let Msg::Event(ev) = msg {
            print(&ev);
        }
    }
    stopped?;
    Ok(())
}
