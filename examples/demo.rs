//! Three candidates elect a leader on the embedded test API server, then the
//! leader releases the lease and the next takes over at once, twice.
//! No cluster needed:
//!
//! ```text
//! cargo run --example demo
//! ```
//!
//! One line per event, stamped with the time since start.

use std::collections::HashMap;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use lease_elector::testing::TestApiServer;
use lease_elector::{Client, ClientConfig, ElectorHandle, LeaderElector, LeaderEvent, LeaseLock};

const LEASE: Duration = Duration::from_secs(4);
const RENEW_DEADLINE: Duration = Duration::from_secs(3);
const RETRY: Duration = Duration::from_millis(500);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = TestApiServer::builder()
        .tls(true)
        .tokens(&["demo-token"])
        .build()?;
    server.add_namespace("demo");
    println!(
        "embedded API server at {} (TLS, bearer token)",
        server.url()
    );
    let start = Instant::now();
    let (tx, rx) = mpsc::channel::<(String, LeaderEvent)>();

    let mut handles: HashMap<String, ElectorHandle> = HashMap::new();
    for id in ["pod-a", "pod-b", "pod-c"] {
        let client = Client::new(
            ClientConfig::new(server.url())
                .ca_pem(server.ca_pem())
                .token("demo-token"),
        )?;
        let lock = LeaseLock::new(client, "demo", "demo-operator", id);
        let (handle, events) = LeaderElector::builder(lock)
            .lease_duration(LEASE)
            .renew_deadline(RENEW_DEADLINE)
            .retry_period(RETRY)
            .release_on_cancel(true)
            .build()?
            .spawn()?;
        let tx = tx.clone();
        let id = id.to_string();
        thread::spawn({
            let id = id.clone();
            move || {
                for ev in events {
                    if tx.send((id.clone(), ev)).is_err() {
                        break;
                    }
                }
            }
        });
        handles.insert(id, handle);
    }
    drop(tx);

    let print = |who: &str, ev: &LeaderEvent| {
        let t = start.elapsed().as_secs_f64();
        match ev {
            LeaderEvent::StartedLeading { .. } => println!("[{t:7.3}s] {who}: LEADING"),
            LeaderEvent::StoppedLeading { .. } => println!("[{t:7.3}s] {who}: STOPPED"),
            LeaderEvent::NewLeader { identity, .. } => {
                println!("[{t:7.3}s] {who}: NEW_LEADER {identity}")
            }
            _ => {}
        }
    };

    // Two handovers: each time, wait until every candidate knows the
    // leader, then stop the leader (it releases) and wait for the next.
    let mut seen: HashMap<String, String> = HashMap::new();
    for round in 1..=3 {
        let mut leader = None;
        while leader.is_none() || handles.keys().any(|id| seen.get(id) != leader.as_ref()) {
            let (who, ev) = rx.recv()?;
            print(&who, &ev);
            match ev {
                LeaderEvent::StartedLeading { .. } => leader = Some(who),
                LeaderEvent::NewLeader { identity, .. } => {
                    seen.insert(who, identity);
                }
                _ => {}
            }
        }
        let leader = leader.ok_or("no leader")?;
        let lease = server
            .lease("demo", "demo-operator")
            .ok_or("the lease should exist")?;
        let record = lease.record();
        println!(
            "          lease holder={:?} leaseTransitions={}",
            record.holder_identity, record.leader_transitions
        );
        if round == 3 {
            break;
        }
        println!("          stopping {leader} with release...");
        let stopped_at = Instant::now();
        if let Some(h) = handles.remove(&leader) {
            h.stop()?;
        }
        println!(
            "          {leader} released the lease in {} ms",
            stopped_at.elapsed().as_millis()
        );
    }
    for (_, h) in handles.drain() {
        h.stop()?;
    }
    while let Ok((who, ev)) = rx.recv_timeout(Duration::from_secs(1)) {
        print(&who, &ev);
    }
    let stats = server.stats();
    println!(
        "done: {} API requests ({} GET, {} POST, {} PUT), {} bytes in, {} bytes out",
        stats.requests, stats.gets, stats.creates, stats.updates, stats.bytes_in, stats.bytes_out
    );
    Ok(())
}
