//! A fake cluster on your laptop: the embedded API server, with a
//! kubeconfig for kubectl and your program.
//!
//! ```text
//! cargo run --example test_server -- --kubeconfig PATH [--tls] [--token T]
//! KUBECONFIG=PATH kubectl get leases -A
//! ```
//!
//! Serves Leases, Events (core/v1 and events.k8s.io/v1) and Namespaces
//! (get, list, watch, create, replace, patch, apply, delete; it starts
//! with `default`, `kube-system`, `kube-public` and `kube-node-lease`, and
//! `kubectl create namespace` adds one) until SIGTERM/SIGINT arrives, or
//! stdin closes when it is a pipe or a socket: a terminal or `/dev/null`
//! is never read, so it serves as a background job of an interactive
//! shell (`&`) or from a script until signalled. With `--token`, requests must carry it (kubectl
//! sends it only over TLS, so pair it with `--tls`).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc;
use std::thread;

use lease_elector::testing::TestApiServer;

const USAGE: &str = "usage: test_server --kubeconfig PATH [--tls] [--token T]";

#[derive(Debug, Default)]
struct Args {
    kubeconfig: Option<PathBuf>,
    tls: bool,
    token: Option<String>,
}

fn parse_args() -> Result<Args, String> {
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
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if args.kubeconfig.is_none() {
        return Err(format!("--kubeconfig is required\n{USAGE}"));
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("test_server: {e}");
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

    let (tx, rx) = mpsc::channel::<&'static str>();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])?;
    {
        let tx = tx.clone();
        thread::spawn(move || {
            if signals.forever().next().is_some() {
                let _ = tx.send("signal");
            }
        });
    }
    if lease_elector::tool::stdin_is_a_pipe() {
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
    eprintln!("test_server: {reason}, stopping");
    server.shutdown();
    Ok(())
}
