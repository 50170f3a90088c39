use lease_elector::health::HealthServer;
use lease_elector::{identity, Client, ClientConfig, EventRecorder, LeaderElector, LeaseLock, StopReason};
use signal_hook::{consts::{SIGINT, SIGTERM}, iterator::Signals};
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // ureq logs each request's bytes, the bearer token among them, at trace: hold it to info.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .filter_module("ureq", log::LevelFilter::Info)
        .init();
    // As kubectl: $KUBECONFIG or ~/.kube/config if there is one, else the pod's service account.
    let config = ClientConfig::infer()?;
    let namespace = config.namespace().unwrap_or("default").to_string();
    let client = Client::new(config)?;
    let me = identity();
    // Each transition becomes an Event on the Lease (`kubectl get events`).
    let events = EventRecorder::new(client.clone(), "my-operator").with_instance(me.clone());
    let lock = LeaseLock::new(client, namespace, "my-operator", me).with_events(events);
    let elector = LeaderElector::builder(lock).release_on_cancel(true).build()?;

    // /healthz (liveness), /readyz (readiness), /leader and /metrics, on threads of their own;
    // one port per process (HEALTH_ADDR=127.0.0.1:8081 for a second one on the same machine).
    let addr = std::env::var("HEALTH_ADDR").unwrap_or_else(|_| "0.0.0.0:8080".into());
    let health = HealthServer::start(addr, vec![elector.probe()], Duration::from_secs(20))?;
    log::info!("health endpoint on http://{}", health.local_addr());

    // SIGTERM (the pod is stopping) or Ctrl-C ends the term.
    let stopper = elector.stopper();
    let mut signals = Signals::new([SIGTERM, SIGINT])?;
    std::thread::spawn(move || signals.forever().for_each(|_| stopper.stop()));
    // The work runs on a thread of its own while this replica leads.
    let ended = elector.run(|term| {
        let step = Duration::from_secs(1); // the longest one step of your work takes
        while term.is_current() && term.time_to_stop() > step {
            log::info!("leading with token {}: one step of the work", term.token());
            // your step here
            term.wait_ended(Duration::from_secs(5)); // wakes at once when the term ends
        }
    })?;
    match ended {
        StopReason::Lost => Err("leadership lost".into()), // exit 1: start afresh
        _ => Ok(()),
    }
}
