use lease_elector::{identity, Client, ClientConfig, LeaderElector, LeaseLock, StopReason};
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
    let lock = LeaseLock::new(Client::new(config)?, namespace, "my-operator", identity());
    let elector = LeaderElector::builder(lock).release_on_cancel(true).build()?;

    // SIGTERM (the pod is stopping) or Ctrl-C ends the term.
    let stopper = elector.stopper();
    let mut signals = Signals::new([SIGTERM, SIGINT])?;
    std::thread::spawn(move || signals.forever().for_each(|_| stopper.stop()));
    // The work runs on a thread of its own while this replica leads. A
    // step must end before another replica can lead: begin one only while
    // the term has time for it, and pause with the term, not a bare sleep.
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
