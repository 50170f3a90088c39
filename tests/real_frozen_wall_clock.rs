//! A leader whose wall clock stands still keeps its term (issue 44 #4).
//!
//! kube-apiserver writes nothing for an update that changes nothing and
//! answers it with the resourceVersion it already had (checked on 1.37.2:
//! a `kubectl replace` of the Lease as read answers 200 with the same
//! version). A leader whose renews wrote the stored record again would
//! renew nothing: its followers see no change and take over once the
//! lease runs out. One body, run on the test server (which answers an
//! unchanged update as kube-apiserver does) and, when
//! `LEASE_ELECTOR_CONTROL_PLANE` names a directory written by
//! `.ci/control-plane up`, on the real control plane.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use lease_elector::testing::TestApiServer;
use lease_elector::{
    Client, ClientConfig, Clock, LeaderElector, LeaderEvent, LeaseLock, Lock, SystemClock, Wake,
    Wakeup,
};

/// The real clock, but for a wall clock that stands still.
#[derive(Debug)]
struct FrozenWall(SystemTime);

impl Clock for FrozenWall {
    fn now(&self) -> Instant {
        SystemClock.now()
    }
    fn system_time(&self) -> SystemTime {
        self.0
    }
    fn sleep(&self, d: Duration, wake: &Wakeup) -> Wake {
        SystemClock.sleep(d, wake)
    }
}

const LEASE_DURATION: Duration = Duration::from_secs(4);
const RETRY: Duration = Duration::from_secs(1);

fn elector(config: &ClientConfig, ns: &str, id: &str) -> lease_elector::ElectorBuilder {
    let lock = LeaseLock::new(Client::new(config.clone()).unwrap(), ns, "frozen", id);
    LeaderElector::builder(lock)
        .lease_duration(LEASE_DURATION)
        .renew_deadline(Duration::from_secs(3))
        .retry_period(RETRY)
        .release_on_cancel(true)
}

/// A (wall clock frozen) leads, B (a true clock) follows; for `hold`, A
/// keeps its term, B never leads, and the Lease changes version at every
/// renew.
fn a_frozen_leader_keeps_its_term(config: ClientConfig, ns: &str, hold: Duration) {
    let frozen = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600); // 2026-01-01
    let (a, a_events) = elector(&config, ns, "a")
        .clock(Arc::new(FrozenWall(frozen)))
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    let started = common::wait_started(&a_events);
    let (b, b_events) = elector(&config, ns, "b").build().unwrap().spawn().unwrap();
    let mut observer = LeaseLock::new(Client::new(config).unwrap(), ns, "frozen", "observer");
    let mut versions = Vec::new();
    while started.elapsed() < hold {
        let record = observer
            .get(&lease_elector::Deadline::after(
                Arc::new(SystemClock),
                RETRY,
            ))
            .unwrap();
        assert_eq!(record.holder_identity, "a", "A lost the Lease");
        if let Some(v) = observer.version() {
            if versions.last() != Some(&v) {
                versions.push(v);
            }
        }
        if let Ok(LeaderEvent::StoppedLeading { reason, .. }) = a_events.try_recv() {
            panic!(
                "A's term ended after {:?}: {reason:?} ({:?})",
                started.elapsed(),
                a.probe().status().last_error
            );
        }
        assert!(
            !b.probe().is_leader(),
            "B leads while A renews with a frozen wall clock"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A renew every retry period, each a new version (none answered as
    // written with the version it had).
    let renews = (hold.as_secs() / RETRY.as_secs()) as usize;
    assert!(
        versions.len() + 2 >= renews,
        "{} versions in {hold:?}: {versions:?}",
        versions.len()
    );
    assert!(a.probe().is_leader());
    b.stop().unwrap();
    a.stop().unwrap();
    drop((a_events, b_events));
}

#[test]
fn a_leader_whose_wall_clock_stands_still_keeps_its_term_on_a_server_that_writes_no_op_updates_nowhere(
) {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(common::NS);
    let hold = LEASE_DURATION * 2;
    a_frozen_leader_keeps_its_term(ClientConfig::new(server.url()), common::NS, hold);
}

#[test]
#[ignore = "needs the real control plane (.ci/control-plane test)"]
fn a_leader_whose_wall_clock_stands_still_keeps_its_term_on_kube_apiserver() {
    let Some(dir) = std::env::var_os("LEASE_ELECTOR_CONTROL_PLANE") else {
        common::oracle::skipped(
            "control-plane",
            "LEASE_ELECTOR_CONTROL_PLANE is not set (.ci/control-plane up DIR)",
        );
        return;
    };
    common::oracle::ran("control-plane");
    let dir = std::path::PathBuf::from(dir);
    let ns = format!("frozen-{}", std::process::id());
    let created = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(dir.join("admin.kubeconfig"))
        .args(["create", "namespace", &ns])
        .status()
        .unwrap();
    assert!(created.success(), "kubectl create namespace {ns}");
    let config = ClientConfig::from_kubeconfig(dir.join("elector.kubeconfig"), None).unwrap();
    let hold = LEASE_DURATION * 3;
    a_frozen_leader_keeps_its_term(config, &ns, hold);
}
