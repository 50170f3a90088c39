//! The watch is on by default; where the API server refuses it, or it
//! keeps being cut, the elector polls exactly as with the watch off, says
//! so once with the fix, shows it in its status and metrics, and sends no
//! more requests than polling does. Real HTTP on the embedded server; the
//! elector's clock is manual, the watch's own back-off is real time.

mod common;

use std::time::Duration;

use common::logs::logs;
use common::*;
use lease_elector::testing::Fault;
use lease_elector::{
    render_prometheus, Client, ElectorConfig, ElectorStatus, LeaseLock, WatchMode,
};

const STEP: Duration = Duration::from_millis(500);

/// client-go's timings and everything else as a user gets it: the watch
/// is not mentioned.
fn defaults() -> ElectorConfig {
    ElectorConfig {
        release_on_cancel: true,
        ..ElectorConfig::default()
    }
}

/// A candidate on Lease `lease` with a client of its own (its requests
/// carry its token, so faults can single it out).
fn add(c: &mut Cluster, lease: &str, id: &str, config: ElectorConfig) -> usize {
    let client = Client::new(c.server.client_config(id)).unwrap();
    c.add_lock(id, LeaseLock::new(client, NS, lease, id), config)
}

fn status(c: &Cluster, i: usize) -> ElectorStatus {
    c.candidates[i].handle().probe().status()
}

/// The `lease_elector_watching` sample of `s`.
fn watching_metric(s: &ElectorStatus) -> String {
    render_prometheus(std::slice::from_ref(s))
        .lines()
        .find(|l| l.starts_with("lease_elector_watching{"))
        .expect("a lease_elector_watching sample")
        .to_string()
}

/// The warnings logged so far about `lease` that contain `words`.
fn warnings(lease: &str, words: &str) -> Vec<String> {
    let lease = format!("lease {NS}/{lease}");
    logs()
        .lock()
        .unwrap()
        .iter()
        .filter(|(level, m)| *level == log::Level::Warn && m.contains(&lease) && m.contains(words))
        .map(|(_, m)| m.clone())
        .collect()
}

/// With nothing said about the watch, a follower watches: its status and
/// metrics say so, and the leader's release reaches it with the elector
/// clock frozen (only a watch event can have woken it).
#[test]
fn the_watch_is_on_by_default_and_a_release_wakes_the_follower_at_once() {
    assert!(ElectorConfig::default().watch);
    let lease = "by-default";
    let mut c = Cluster::new();
    add(&mut c, lease, "a", defaults());
    c.step_until(STEP, Duration::from_secs(5), |c| c.leaders() == ["a"]);
    let b = add(&mut c, lease, "b", defaults());
    eventually("both watches to open", || {
        status(&c, 0).watch == WatchMode::Watching && status(&c, b).watch == WatchMode::Watching
    });
    assert_eq!(
        watching_metric(&status(&c, b)),
        format!("lease_elector_watching{{namespace=\"{NS}\",name=\"{lease}\"}} 1")
    );
    c.step(STEP);
    c.settle();
    let frozen = c.clock.elapsed();
    c.server.reset_stats();
    c.stop(0);
    wait_started(&c.candidates[b].events);
    assert_eq!(c.clock.elapsed(), frozen, "no clock time passed");
    let s = c.server.stats();
    assert_eq!((s.updates, s.gets), (2, 0), "{s:?}");
    assert_eq!(c.server.holder(NS, lease).as_deref(), Some("b"));
}

/// A Role without `watch`: every watch request gets 403. Both
/// candidates poll: their status and metrics say so, one warning each
/// names the fix, no watch request follows the refusal, the requests are
/// polling's (one PUT per retry period from the leader, at most one GET
/// per retry period from the follower), and a release is seen by the
/// follower only at its next attempt, as with the watch off.
#[test]
fn a_server_that_refuses_the_watch_gets_polling_one_warning_and_no_more_requests() {
    logs();
    let lease = "refused";
    let mut c = Cluster::new();
    c.server
        .inject(Fault::status(403).path_contains("watch=true").forever());
    add(&mut c, lease, "a", defaults());
    c.step_until(STEP, Duration::from_secs(5), |c| c.leaders() == ["a"]);
    let b = add(&mut c, lease, "b", defaults());
    for i in [0, b] {
        eventually("the refusal to show", || {
            matches!(status(&c, i).watch, WatchMode::Polling(_))
        });
        let WatchMode::Polling(why) = status(&c, i).watch else {
            unreachable!()
        };
        assert!(
            why.contains("403") && why.contains("grant watch on leases"),
            "{why}"
        );
        assert!(watching_metric(&status(&c, i)).ends_with("} 0"));
    }
    // The follower has read the Lease (it follows "a").
    c.step_until(STEP, Duration::from_secs(5), |c| {
        c.candidates[b].handle().probe().leader().as_deref() == Some("a")
    });

    // Twenty retry periods of the elector's clock.
    let periods = 20u32;
    c.settle();
    c.server.reset_stats();
    for _ in 0..periods * 4 {
        c.step(STEP);
    }
    let s = c.server.stats();
    let (a_status, b_status) = (status(&c, 0), status(&c, b));
    assert_eq!(s.watches, 0, "a refused watch is not asked again: {s:?}");
    assert_eq!(s.requests, s.gets + s.updates, "{s:?}");
    assert!(
        (periods - 1..=periods).contains(&(s.updates as u32)),
        "the leader renews once per retry period: {s:?}"
    );
    // Jittered pauses of 1 to 2.2 retry periods: polling's rate.
    assert!(
        (periods / 3..=periods).contains(&(s.gets as u32)),
        "the follower polls once per 1 to 2.2 retry periods: {s:?}"
    );
    assert!(a_status.consecutive_failures == 0 && b_status.consecutive_failures == 0);

    // Said once by each candidate, however often it was refused.
    let warned = warnings(lease, "grant watch on leases");
    assert_eq!(warned.len(), 2, "{warned:?}");
    assert!(
        warned[0].contains("refused to watch it (403 Forbidden)"),
        "{warned:?}"
    );

    // A release reaches the follower only at its next poll.
    c.settle();
    c.stop(0);
    c.settle();
    assert_eq!(c.candidates[b].drain(), 0, "nothing woke the follower");
    assert!(!c.candidates[b].handle().probe().is_leader());
    c.step_until(STEP, Duration::from_millis(4_500), |c| {
        c.candidates[b].started() == 1
    });
}

/// A proxy that ends every watch stream as soon as it opens (an empty
/// 200): the watch reopens with back-off, never more than its budget of
/// requests, then polls; one warning names what to check.
#[test]
fn a_watch_cut_at_every_open_stops_at_its_budget_and_polls() {
    logs();
    let lease = "cut";
    let mut c = Cluster::new();
    c.server
        .inject(Fault::raw(200, "").path_contains("watch=true").forever());
    let quick = ElectorConfig {
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(300),
        ..defaults()
    };
    add(&mut c, lease, "a", quick);
    c.step_until(STEP, Duration::from_secs(5), |c| c.leaders() == ["a"]);
    eventually(
        "the budget to run out",
        || matches!(&status(&c, 0).watch, WatchMode::Polling(why) if why.contains("cut")),
    );
    let watches = c.server.stats().watches;
    assert_eq!(watches, 10, "the budget: 10 watch requests in 10 min");
    // Five times the longest back-off: nothing more is asked.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        c.server.stats().watches,
        watches,
        "no watch request past the budget"
    );
    let warned = warnings(lease, "was cut 10 times");
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].contains("check proxies"), "{}", warned[0]);
    assert_eq!(c.leaders(), ["a"], "polling goes on");
}

/// A watch resumes from the last resourceVersion it saw; told that the
/// version has left the server's window (410), it starts afresh at once,
/// without one, and works again.
#[test]
fn a_watch_resumes_from_its_last_version_and_starts_afresh_after_410() {
    let lease = "resumed";
    let mut c = Cluster::new();
    add(&mut c, lease, "a", timings());
    c.step_until(STEP, Duration::from_secs(5), |c| c.leaders() == ["a"]);
    let b = add(&mut c, lease, "b", defaults());
    eventually("b to watch", || status(&c, b).watch == WatchMode::Watching);
    // a's renews reach b's watch: it has a version to resume from.
    let seen = c.candidates[b].handle().watch_changes();
    c.step(Duration::from_secs(2));
    eventually("a renew to reach b", || {
        c.candidates[b].handle().watch_changes() > seen
    });
    let expired = concat!(
        r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","#,
        r#""message":"too old resource version","reason":"Expired","code":410}}"#,
        "\n"
    );
    c.server.inject(
        Fault::raw(200, expired)
            .path_contains("resourceVersion=")
            .times(1),
    );
    // An outage cuts the open stream; b reopens from its version.
    let before = c.server.stats().watches;
    c.server.set_outage(true);
    eventually("the stream to be cut", || {
        c.server
            .requests()
            .iter()
            .any(|r| r.path.contains("watch=true"))
    });
    c.server.set_outage(false);
    eventually("the relist", || c.server.stats().watches >= before + 2);
    eventually("b to watch again", || {
        status(&c, b).watch == WatchMode::Watching
    });
    // The release still reaches b through the new stream, clock frozen.
    c.step(STEP);
    c.settle();
    let frozen = c.clock.elapsed();
    c.stop(0);
    wait_started(&c.candidates[b].events);
    assert_eq!(c.clock.elapsed(), frozen);
    c.stop(b);
    // A stream is logged once it has ended: the server notices b's close
    // within its probe interval.
    let watches = || -> Vec<String> {
        c.server
            .requests()
            .into_iter()
            .filter(|r| r.path.contains("watch=true"))
            .map(|r| r.path)
            .collect()
    };
    eventually("the last stream to be logged", || {
        let w = watches();
        w.iter()
            .position(|p| p.contains("resourceVersion="))
            .is_some_and(|at| at + 1 < w.len())
    });
    let w = watches();
    let at = w
        .iter()
        .position(|p| p.contains("resourceVersion="))
        .expect("a resumed watch");
    assert!(
        !w[at + 1].contains("resourceVersion="),
        "after the 410, a watch without a version: {w:#?}"
    );
}

/// `watch(false)` polls: no watch request, and the status says off.
#[test]
fn watch_false_sends_no_watch_request() {
    let lease = "off";
    let mut c = Cluster::new();
    add(
        &mut c,
        lease,
        "a",
        ElectorConfig {
            watch: false,
            ..defaults()
        },
    );
    c.step_until(STEP, Duration::from_secs(5), |c| c.leaders() == ["a"]);
    c.step(Duration::from_secs(2));
    assert_eq!(status(&c, 0).watch, WatchMode::Off);
    assert!(watching_metric(&status(&c, 0)).ends_with("} 0"));
    assert_eq!(c.server.stats().watches, 0);
}

/// A watching leader's own renews come back to it through its watch,
/// often before the answer to the `PUT`: each wakes it, and is read from
/// what the watch delivered, so a renew stays one request.
#[test]
fn a_watching_leader_sends_one_request_per_renew() {
    let lease = "steady";
    let mut c = Cluster::new();
    add(&mut c, lease, "a", defaults());
    c.step_until(STEP, Duration::from_secs(5), |c| c.leaders() == ["a"]);
    eventually("a to watch", || status(&c, 0).watch == WatchMode::Watching);
    // One renew, its event seen, and its event acted on (a pending poke
    // counts as unsettled), before each step of the clock: an event still
    // on its way when the next renew is written would be stale on arrival
    // (then the read it wakes asks the server, rightly).
    let renew = |c: &mut Cluster| {
        let seen = c.candidates[0].handle().watch_changes();
        c.step(Duration::from_secs(2));
        eventually("the renew's event", || {
            c.candidates[0].handle().watch_changes() > seen
        });
        c.settle();
    };
    renew(&mut c);
    c.server.reset_stats();
    let renews = 30;
    for _ in 0..renews {
        renew(&mut c);
    }
    let s = c.server.stats();
    assert_eq!(
        (s.updates, s.gets, s.requests),
        (renews, 0, renews),
        "{s:?}"
    );
}

/// A release wakes every watching follower at once, and they race for
/// the Lease: one wins, the others' writes get 409. Losing that race is
/// not a failure (as a create that loses it is not): no failed request,
/// no warning, and the loser follows the winner.
#[test]
fn followers_woken_together_by_a_release_race_and_the_losers_count_no_failure() {
    logs();
    let lease = "race";
    for round in 0..3 {
        let lease = format!("{lease}-{round}");
        let mut c = Cluster::new();
        add(&mut c, &lease, "a", defaults());
        c.step_until(STEP, Duration::from_secs(5), |c| c.leaders() == ["a"]);
        let b = add(&mut c, &lease, "b", defaults());
        let d = add(&mut c, &lease, "d", defaults());
        for i in [b, d] {
            eventually("the followers to watch", || {
                status(&c, i).watch == WatchMode::Watching
            });
        }
        c.step(STEP);
        c.settle();
        let frozen = c.clock.elapsed();
        c.stop(0);
        eventually("one follower to lead", || c.leaders().len() == 1);
        c.settle();
        assert_eq!(c.clock.elapsed(), frozen);
        let winner = c.server.holder(NS, &lease).unwrap();
        let loser = if winner == "b" { d } else { b };
        // The winner's write reaches the loser through its watch.
        eventually("the loser to see the winner", || {
            status(&c, loser).holder.as_deref() == Some(winner.as_str())
        });
        let s = status(&c, loser);
        assert_eq!((s.failed_requests, s.consecutive_failures), (0, 0), "{s:?}");
        let warned: Vec<String> = logs()
            .lock()
            .unwrap()
            .iter()
            .filter(|(l, m)| *l == log::Level::Warn && m.contains(&format!("{NS}/{lease}")))
            .map(|(_, m)| m.clone())
            .collect();
        assert!(warned.is_empty(), "{warned:?}");
    }
}
