//! Fencing external writes with a term's token, on the embedded test API
//! server: `cargo run --example fencing`.
//!
//! A lease cannot stop a process that is not running. Here candidate `a`
//! leads and its worker writes to a shared store; then `a` stalls (a long
//! pause: its worker is frozen between checking its term and writing, and
//! its elector cannot reach the API server). `b` takes over once the lease
//! has expired and writes with its own, greater token. When `a`'s worker
//! wakes and writes, the store refuses it: its token is older than one the
//! store has seen. Checking `Term::is_current()` before the write would not
//! have helped: the worker was frozen after that check.

use lease_elector::LeaderEvents;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_elector::testing::{Fault, TestApiServer};
use lease_elector::{
    Client, ClientConfig, ElectorHandle, LeaderElector, LeaderEvent, LeaseLock, Term,
};

/// The resource the leader's work writes to: it takes a write only with a
/// token at least as great as the greatest it has seen. (A database row,
/// an object store's conditional put, a file with the token beside it.)
#[derive(Default)]
struct FencedStore {
    inner: Mutex<(u64, BTreeMap<String, String>)>,
}

impl FencedStore {
    fn write(&self, token: u64, key: &str, value: &str) -> Result<(), String> {
        let mut inner = self.inner.lock().map_err(|_| "store poisoned")?;
        let (highest, data) = &mut *inner;
        if token < *highest {
            return Err(format!("token {token} is older than {highest}"));
        }
        *highest = token;
        data.insert(key.to_string(), value.to_string());
        Ok(())
    }
}

fn candidate(
    server: &TestApiServer,
    id: &str,
) -> lease_elector::Result<(ElectorHandle, LeaderEvents)> {
    // Each candidate sends its own bearer token, so the test server can
    // cut off one of them.
    let config = ClientConfig::new(server.url()).token(format!("{id}-token"));
    let lock = LeaseLock::new(Client::new(config)?, "default", "fenced-job", id);
    LeaderElector::builder(lock)
        .lease_duration(Duration::from_secs(2))
        .renew_deadline(Duration::from_millis(1500))
        .retry_period(Duration::from_millis(500))
        .build()?
        .spawn()
}

fn term_of(events: &LeaderEvents) -> Result<Term, Box<dyn std::error::Error>> {
    loop {
        if let LeaderEvent::StartedLeading { term, .. } = events.recv()? {
            return Ok(term);
        }
    }
}

fn write(store: &FencedStore, who: &str, term: &Term, key: &str, value: &str) {
    match store.write(term.token(), key, value) {
        Ok(()) => println!(
            "{who} writes {key}={value} with token {}: accepted",
            term.token()
        ),
        Err(why) => println!(
            "{who} writes {key}={value} with token {}: REFUSED ({why})",
            term.token()
        ),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = TestApiServer::start()?;
    let store = Arc::new(FencedStore::default());

    let (a, a_events) = candidate(&server, "a")?;
    let a_term = term_of(&a_events)?;
    println!("a leads with token {}", a_term.token());
    write(&store, "a", &a_term, "owner", "a");

    let (b, b_events) = candidate(&server, "b")?;
    // a stalls: its worker is frozen (it already checked its term), and
    // every request of its elector hangs.
    assert!(a_term.is_current());
    server.inject(Fault::hang().bearer("a-token").forever());
    println!("a stalls: its worker is frozen mid-operation, its elector cannot renew");

    let b_term = term_of(&b_events)?;
    println!(
        "b leads with token {} (the lease expired for b)",
        b_term.token()
    );
    write(&store, "b", &b_term, "owner", "b");

    // a's worker wakes up and goes on where it stopped.
    println!(
        "a's worker wakes (its term is current: {})",
        a_term.is_current()
    );
    write(&store, "a", &a_term, "owner", "a-again");

    server.clear_faults();
    a.stop()?;
    b.stop()?;
    let (_, data) = &*store.inner.lock().map_err(|_| "store poisoned")?;
    println!("the store holds owner={}", data["owner"]);
    Ok(())
}
