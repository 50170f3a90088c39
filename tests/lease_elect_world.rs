//! No two COMMANDs at once, and tokens that only grow, when the world
//! around the Lease misbehaves (issue 24, items 3 to 6): the Lease deleted
//! under a leader, replaced by a writer that leaves `leaseTransitions` out,
//! renewed by a leader whose wall clock stands still, freed mid-term and
//! retaken.
//!
//! These are the library half of issue 24 seen through `lease-elect`: the
//! elector holds a vanished Lease a lease duration from when it was seen
//! missing, takes tokens from max(observed, stored) + 1, counts a changed
//! `resourceVersion` as an observed change and ends a term whose Lease was
//! freed by another writer (the next term gets a new token).
//!
//! Two candidates (or one), lease 4 s, renew deadline 3 s, retry 1 s, whose
//! COMMANDs write timestamps (`common::overlap`).

#![cfg(feature = "cli")]

use std::path::Path;
use std::time::Instant;

mod common;
use common::overlap::{
    faked_wall_clock, frozen_wall_clock, libfaketime, token, Options, Timings, World, LEASE, NS,
    SHORT, WAIT,
};
use common::procs::alive;

const BIN: &str = env!("CARGO_BIN_EXE_lease-elect");

/// How long B's COMMAND runs before the runs are judged.
const B_TICKS: usize = 30;

fn world() -> World {
    World::new(Path::new(BIN), SHORT)
}

/// libfaketime, recorded as run (or skipped, with a notice, where it is
/// not installed).
fn faketime() -> Option<std::path::PathBuf> {
    let lib = libfaketime();
    match &lib {
        Some(_) => common::oracle::ran("faketime"),
        None => common::oracle::skipped(
            "faketime",
            "libfaketime is not installed (apt-get install faketime)",
        ),
    }
    lib
}

/// Each term's token is greater than the one before (terms in the order
/// their COMMANDs started).
fn assert_tokens_grow(world: &World) {
    let terms = world.timeline().terms();
    let tokens: Vec<u64> = terms
        .iter()
        .map(|(_, t)| t.parse().expect("a numeric token"))
        .collect();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens must grow from term to term: {terms:?}"
    );
}

#[test]
fn a_deleted_lease_is_not_taken_while_the_leaders_command_finishes() {
    let world = world();
    // A's COMMAND finishes slowly: 8 s after SIGTERM (--grace 10 s).
    let slow = Options {
        on_term: "linger:8".into(),
        ..Options::default()
    };
    // B watches: it, not A's next renew, is first to find the Lease gone.
    let watching = Options {
        flags: vec!["--watch".into()],
        ..Options::default()
    };
    let (a, b) = world.a_leads_b_follows(&slow, &watching);
    world.delete();
    assert!(
        b.wait_for("LEADING b", WAIT),
        "B never led: {:?}; A: {}; B: {}",
        world.server.lease(NS, LEASE),
        a.log(),
        b.log()
    );
    world.wait_ticks("b", B_TICKS);
    world.timeline().assert_no_overlap();
    assert_tokens_grow(&world);
}

#[test]
fn a_lease_rewritten_without_lease_transitions_never_lowers_the_next_token() {
    let world = world();
    // A takes a free Lease that has seen 5 transitions.
    world.overwrite("", Some(5));
    let (a, b) = world.a_leads_b_follows(&Options::default(), &Options::default());
    // Another writer takes it, leaving leaseTransitions out, and goes away.
    world.overwrite("other", None);
    a.expect("STOPPED a");
    b.expect("LEADING b");
    world.wait_ticks("b", 1);
    world.timeline().assert_no_overlap();
    assert_tokens_grow(&world);
}

#[test]
#[ignore = "needs libfaketime (apt-get install faketime)"]
fn a_leader_whose_wall_clock_stands_still_keeps_its_lease() {
    let Some(lib) = faketime() else {
        return;
    };
    let world = world();
    let options = frozen_wall_clock(&lib, "2026-01-01 00:00:00");
    let (_a, b) = world.a_leads_b_follows(&options, &Options::default());
    // A renews every second, each renew writing the same renewTime: B
    // must see the Lease change all the same. Two lease durations of
    // renews (each a new resourceVersion), and A holds it throughout.
    let renews = usize::try_from(2 * SHORT.lease / SHORT.retry + 1).unwrap();
    let mut versions = vec![world.lease()["metadata"]["resourceVersion"].clone()];
    let deadline = Instant::now() + WAIT;
    while versions.len() <= renews {
        let lease = world.lease();
        assert_eq!(lease["spec"]["holderIdentity"], "a", "{lease}");
        let v = lease["metadata"]["resourceVersion"].clone();
        if versions.last() != Some(&v) {
            versions.push(v);
        }
        assert!(Instant::now() < deadline, "A stopped renewing: {lease}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        b.printed().iter().all(|l| l.starts_with("NEW_LEADER ")),
        "B led while A renewed"
    );
    world.timeline().assert_no_overlap();
}

/// Issue 54 #1: wall clocks before 1970 and after 9999. `lease-elect`,
/// its supervisor and COMMAND's first step each format the time of every
/// log line; a formatter that panicked there aborted the supervisor
/// between the SIGTERM it sends at the term's end and the SIGKILL it owed,
/// so that A's COMMAND, which ignores SIGTERM, ran on beside B's while A
/// was stopped. Under each clock: A leads and renews, is stopped and its
/// supervisor kills COMMAND before B leads; B hands over to C at once on
/// SIGTERM; no two COMMANDs at once, and tokens grow.
#[test]
#[ignore = "needs libfaketime (apt-get install faketime)"]
fn a_candidate_whose_wall_clock_is_before_1970_or_after_9999_leads_renews_hands_over_and_kills_on_time(
) {
    let Some(lib) = faketime() else {
        return;
    };
    // A clock set to 1960, and one 3,000,000 days ahead (the year 10240).
    for clock in ["@1960-01-01 00:00:00", "+3000000d"] {
        let world = world();
        let mut far = faked_wall_clock(&lib, clock);
        // Each line of A's supervisor is at warn; B and C log every
        // transition too.
        let a = Options {
            on_term: "ignore".into(),
            ..far.clone()
        };
        far.flags = vec!["-v".into(), "--release-on-cancel".into()];
        let (a, b) = world.a_leads_b_follows(&a, &far);
        // A renews: the Lease's version moves on while A holds it.
        let first = world.lease()["metadata"]["resourceVersion"].clone();
        let deadline = Instant::now() + WAIT;
        while world.lease()["metadata"]["resourceVersion"] == first {
            assert_eq!(world.spec()["holderIdentity"], "a", "{clock}");
            assert!(
                Instant::now() < deadline,
                "{clock}: A never renewed: {}",
                a.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // A stops; its supervisor ends COMMAND by itself before B leads.
        a.signal("-STOP");
        b.expect("LEADING b");
        world.wait_ticks("b", 1);
        let c = world.start("c", &far);
        c.expect("NEW_LEADER b");
        b.signal("-TERM");
        c.expect("LEADING c");
        world.wait_ticks("c", 1);
        let timeline = world.timeline();
        assert_eq!(timeline.terms().len(), 3, "{clock}: {timeline:?}");
        timeline.assert_no_overlap();
        assert_tokens_grow(&world);
        a.signal("-CONT");
    }
}

#[test]
fn a_lease_freed_mid_term_ends_the_term_and_the_next_runs_with_a_greater_token() {
    let world = world();
    let (a, b) = world.a_leads_b_follows(&Options::default(), &Options::default());
    world.free();
    // Freed by another writer: A's term is over (it renews only its own
    // record); B takes the free Lease as a new term, with a new token.
    let deadline = Instant::now() + WAIT;
    loop {
        let spec = world.spec();
        if spec["holderIdentity"] == "b" {
            break;
        }
        assert!(Instant::now() < deadline, "not retaken: {spec}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // A's COMMAND is gone, and B's runs with a greater token (the
    // resourceVersion of its write, above A's).
    let deadline = Instant::now() + WAIT;
    loop {
        let runs = world.timeline().runs;
        let token = |who: &str| {
            runs.iter()
                .filter(|r| r.who == who)
                .map(|r| r.token.parse::<u64>().unwrap_or(0))
                .max()
        };
        let a_alive = runs.iter().any(|r| r.who == "a" && alive(r.pid));
        let b_alive = runs.iter().any(|r| r.who == "b" && alive(r.pid));
        if !a_alive && b_alive {
            let (ta, tb) = (token("a").unwrap_or(0), token("b").unwrap_or(0));
            assert!(tb > ta, "b's token {tb} is not above a's {ta}: {runs:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "COMMANDs {runs:?}; stderr: {} / {}",
            a.log(),
            b.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Issue 44 #1: a term that ran out is still watched. A's renews fail for
/// a whole renew deadline (10/5/1 s: its COMMAND, which lingers after
/// SIGTERM, then has until 1 s before the lease could expire, 4 s); the
/// server answers again and another writer frees the Lease, or takes it.
/// A's COMMAND must be gone within 0.1 s of that write: the next
/// candidate may start at once. (It kept running until the lease
/// deadline: nothing read the Lease once the term had run out.)
#[test]
fn a_command_whose_term_ran_out_is_killed_at_once_when_another_writer_frees_or_takes_the_lease() {
    for take in [false, true] {
        let world = World::new(
            Path::new(BIN),
            Timings {
                lease: 10,
                renew: 5,
                retry: 1,
            },
        );
        let lingering = Options {
            on_term: "linger:30".into(),
            flags: vec!["--grace".into(), "30".into()],
            ..Options::default()
        };
        let a = world.a_leads(&lingering);
        world.server.inject(
            lease_elector::testing::Fault::status(500)
                .bearer(&token("a"))
                .method("PUT")
                .forever(),
        );
        world.wait_said("a", "term");
        world.server.clear_faults();
        let written = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as u64;
        let written_at = Instant::now();
        if take {
            world.overwrite("c", Some(7));
        } else {
            world.free();
        }
        let pid = world.timeline().of("a")[0].pid;
        while alive(pid) {
            assert!(
                written_at.elapsed() < WAIT,
                "A's COMMAND still runs: {}",
                a.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let gone = written_at.elapsed();
        let last = world.timeline().of("a")[0].last;
        let after = std::time::Duration::from_micros(last.saturating_sub(written));
        eprintln!(
            "{}: A's COMMAND seen gone {gone:?} after the write, its last line {after:?} after it",
            if take { "taken" } else { "freed" }
        );
        assert!(
            after <= std::time::Duration::from_millis(100),
            "A's COMMAND ran {after:?} after another writer {} the Lease: {}",
            if take { "took" } else { "freed" },
            a.log()
        );
        // The kill names the takeover, not the renews that failed before.
        let cause = if take {
            "taken over (the lease is now held by c)"
        } else {
            "taken over (the lease was freed by another writer)"
        };
        let deadline = Instant::now() + WAIT;
        while !a.log().contains(cause) {
            assert!(
                Instant::now() < deadline,
                "A never said {cause:?}: {}",
                a.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}
