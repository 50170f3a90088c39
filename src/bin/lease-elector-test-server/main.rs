//! `lease-elector-test-server`: a fake cluster on your laptop, the
//! crate's embedded API server (`lease_elector::testing::TestApiServer`)
//! on its own, with a kubeconfig for kubectl and your program. Installed
//! from a clone of the repository (once the crate is published, `cargo
//! install lease-elector --features testing --bin
//! lease-elector-test-server` needs no clone):
//!
//! ```text
//! cargo install --path . --features testing --bin lease-elector-test-server
//! lease-elector-test-server --kubeconfig /tmp/fake.kubeconfig --tls --token t0k3n &
//! KUBECONFIG=/tmp/fake.kubeconfig kubectl get leases -A
//! ```
//!
//! Serves Leases, Events (core/v1 and events.k8s.io/v1) and Namespaces
//! (get, list, watch, create, replace, patch, apply, delete; it starts
//! with `default`, `kube-system`, `kube-public` and `kube-node-lease`, and
//! `kubectl create namespace` adds one) on a port of 127.0.0.1 the system
//! picks, and prints `serving URL` and `export KUBECONFIG=PATH` once the
//! kubeconfig is written. With `--token`, requests must carry it (kubectl
//! sends it only over TLS, so pair it with `--tls`).
//!
//! It serves until SIGTERM or SIGINT (Ctrl-C), or until stdin closes when
//! stdin is a pipe or a socket: a terminal or `/dev/null` is never read,
//! so it serves as a background job of an interactive shell (`&`) or from
//! a script until signalled. Built with the `cli` feature (and as the
//! repository's `test_server` example) a signal closes every connection
//! and it exits 0; otherwise the signal ends it as it ends any process.
//! Exit status 2: bad arguments; 1: it could not start (the kubeconfig
//! could not be written, say).
//!
//! Also `cargo run --example test_server -- ...` in a clone of the
//! repository: the same program.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc;
use std::thread;

use lease_elector::testing::TestApiServer;

/// What this program is called in messages: `lease-elector-test-server`,
/// or `test_server` as the example.
const NAME: &str = env!("CARGO_BIN_NAME");

fn usage() -> String {
    format!("usage: {NAME} --kubeconfig PATH [--tls] [--token T]")
}

const HELP: &str = "\
A fake Kubernetes cluster: the lease-elector crate's embedded API server on
its own. It serves Leases, Events and Namespaces on a port of 127.0.0.1,
writes a kubeconfig for kubectl and your program to PATH, then prints
`serving URL` and `export KUBECONFIG=PATH`. It serves until SIGTERM or
SIGINT, or until stdin closes when stdin is a pipe or a socket.

  --kubeconfig PATH   where to write the kubeconfig (required)
  --tls               serve HTTPS (the kubeconfig carries its CA)
  --token T           require this bearer token (kubectl sends it over TLS only)

Exit status: 0 when stopped, 1 when it could not start, 2 on bad arguments.";

#[derive(Debug, Default)]
struct Args {
    kubeconfig: Option<PathBuf>,
    tls: bool,
    token: Option<String>,
}

/// `None` for `--help` (printed).
fn parse_args() -> Result<Option<Args>, String> {
    let mut args = Args::default();
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (arg, None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match flag.as_str() {
            "--kubeconfig" => args.kubeconfig = Some(value("--kubeconfig")?.into()),
            "--token" => args.token = Some(value("--token")?),
            "--tls" => args.tls = true,
            "-h" | "--help" => {
                println!("{}\n\n{HELP}", usage());
                return Ok(None);
            }
            other => return Err(format!("unknown argument {other:?}\n{}", usage())),
        }
    }
    if args.kubeconfig.is_none() {
        return Err(format!("--kubeconfig is required\n{}", usage()));
    }
    Ok(Some(args))
}

pub fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(a)) => a,
        Ok(None) => return ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{NAME}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let tokens: Vec<&str> = args.token.as_deref().into_iter().collect();
    let server = TestApiServer::builder()
        .tls(args.tls)
        .tokens(&tokens)
        .build()?;
    let path = args.kubeconfig.unwrap_or_default();
    server.write_kubeconfig(&path, args.token.as_deref())?;
    if args.token.is_some() && !args.tls {
        eprintln!("warning: kubectl does not send a token over plain HTTP; add --tls");
    }

    // `tx` lives until the end, so that the wait below ends only when
    // something sends (without signal-hook and a pipe, nothing does).
    let (tx, rx) = mpsc::channel::<&'static str>();
    stop_on_signals(tx.clone())?;
    if lease_elector::tool::stdin_is_a_pipe() {
        let tx = tx.clone();
        thread::spawn(move || {
            let mut sink = [0u8; 256];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
            let _ = tx.send("stdin closed");
        });
    }

    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "serving {}", server.url())?;
        writeln!(out, "export KUBECONFIG={}", path.display())?;
        out.flush()?;
    }
    let reason = rx.recv().unwrap_or("signal thread ended");
    drop(tx);
    eprintln!("{NAME}: {reason}, stopping");
    server.shutdown();
    Ok(())
}

/// SIGTERM and SIGINT stop the server cleanly (its connections closed, exit
/// 0) where signal-hook is built in: with the `cli` feature, and so in the
/// repository's example. Without it they keep their default action.
#[cfg(feature = "cli")]
fn stop_on_signals(tx: mpsc::Sender<&'static str>) -> std::io::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])?;
    thread::spawn(move || {
        if signals.forever().next().is_some() {
            let _ = tx.send("signal");
        }
    });
    Ok(())
}

#[cfg(not(feature = "cli"))]
fn stop_on_signals(_: mpsc::Sender<&'static str>) -> std::io::Result<()> {
    Ok(())
}
