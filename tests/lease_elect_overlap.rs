//! No two COMMANDs run at once whatever happens to the `lease-elect` that
//! runs one (issue 24): a stderr nobody drains while the leader is cut off
//! from the API server, `lease-elect` stopped (SIGSTOP) or told to suspend
//! (SIGTSTP, Ctrl-Z), `lease-elect` killed with its stderr stuck, and a
//! term lost to another holder (COMMAND killed at once, without `--grace`).
//!
//! Two candidates, lease 4 s, renew deadline 3 s, retry 1 s; their
//! COMMANDs write timestamps, and the overlap is measured from those
//! (`common::overlap`). Each test waits on events (stdout lines, COMMAND's
//! lines), never on a sleep.

#![cfg(feature = "cli")]

use std::path::Path;
use std::time::{Duration, SystemTime};

mod common;
use common::overlap::{Options, World, SHORT, WAIT};
use common::procs::{alive, state};

const BIN: &str = env!("CARGO_BIN_EXE_lease-elect");

fn world() -> World {
    World::new(Path::new(BIN), SHORT)
}

/// How long B's COMMAND runs before the runs are judged: long enough for
/// a COMMAND of A that outlived its term to show.
const B_TICKS: usize = 30;

fn stuck_stderr() -> Options {
    Options {
        stuck_stderr: true,
        ..Options::default()
    }
}

/// COMMAND does `on_term` on SIGTERM (`TICKER`'s modes), with `--grace`.
fn on_term(on_term: &str, grace: &str) -> Options {
    Options {
        on_term: on_term.into(),
        flags: vec!["--grace".into(), grace.into()],
        ..Options::default()
    }
}

#[test]
fn a_leader_cut_off_with_a_stuck_stderr_ends_its_command_before_the_other_starts() {
    let world = world();
    let (_a, b) = world.a_leads_b_follows(&stuck_stderr(), &Options::default());
    world.cut_off("a");
    b.expect("LEADING b");
    world.wait_ticks("b", B_TICKS);
    world.timeline().assert_no_overlap();
}

#[test]
fn a_lease_elect_killed_with_a_stuck_stderr_takes_its_command_with_it() {
    let world = world();
    let (mut a, b) = world.a_leads_b_follows(&stuck_stderr(), &Options::default());
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    b.expect("LEADING b");
    world.wait_ticks("b", B_TICKS);
    world.timeline().assert_no_overlap();
}

#[test]
fn a_stopped_lease_elect_has_its_command_ended_by_the_supervisor_at_the_end_of_the_term() {
    let world = world();
    let (mut a, b) = world.a_leads_b_follows(&Options::default(), &Options::default());
    a.signal("-STOP");
    b.expect("LEADING b");
    world.wait_ticks("b", B_TICKS);
    world.timeline().assert_no_overlap();
    // The supervisor asked first (SIGTERM at the term's end).
    let run_a = &world.timeline().of("a")[0];
    assert!(run_a.said.contains(&"term".to_string()), "{run_a:?}");
    // Thawed, lease-elect finds its term over and COMMAND ended: exit 1.
    a.signal("-CONT");
    assert_eq!(a.exit_code(), Some(1), "{}", a.log());
    let log = a.log();
    assert!(
        log.contains("leadership lost") && log.contains("supervisor ended COMMAND"),
        "{log}"
    );
}

#[test]
fn ctrl_z_does_not_stop_a_leading_lease_elect() {
    let world = world();
    let (mut a, b) = world.a_leads_b_follows(&Options::default(), &Options::default());
    let before = SystemTime::now();
    a.signal("-TSTP");
    // A goes on renewing for more than a lease duration: it never stopped,
    // so B never had the lease.
    let renewed_until = before + SHORT.lease_duration() + Duration::from_secs(1);
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let spec = world.spec();
        assert_eq!(
            spec["holderIdentity"],
            "a",
            "{spec}; a's stderr: {}",
            a.log()
        );
        let renewed = spec["renewTime"]
            .as_str()
            .and_then(|t| lease_elector::MicroTime::parse_strict(t).ok())
            .map(lease_elector::MicroTime::to_system_time);
        if renewed.is_some_and(|r| r > renewed_until) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{spec}; a: {:?}",
            state(a.pid())
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_ne!(state(a.pid()), Some('T'), "not stopped");
    assert!(a.log().contains("SIGTSTP ignored"), "{}", a.log());
    assert!(b.printed().iter().all(|l| l.starts_with("NEW_LEADER ")));
    // Its supervisor was told of every renew: COMMAND runs on.
    let run_a = &world.timeline().of("a")[0];
    assert!(alive(run_a.pid) && run_a.said == ["start"], "{run_a:?}");
    // A hands over in order; B's COMMAND starts after A's ended.
    a.signal("-TERM");
    assert_eq!(a.exit_code(), Some(0), "{}", a.log());
    b.expect("LEADING b");
    world.wait_ticks("b", 1);
    world.timeline().assert_no_overlap();
}

#[test]
fn a_term_lost_to_another_holder_kills_the_command_at_once_without_grace() {
    let world = world();
    let mut a = world.a_leads(&on_term("ignore", "30"));
    // Another writer holds the Lease: it may run the job already.
    world.overwrite("other", Some(1));
    a.expect("STOPPED a");
    assert_eq!(a.exit_code(), Some(1), "{}", a.log());
    let run_a = &world.timeline().of("a")[0];
    assert!(!alive(run_a.pid), "{run_a:?}");
    assert_eq!(
        run_a.said,
        ["start"],
        "SIGKILL, no SIGTERM first and no grace: {run_a:?}; stderr: {}",
        a.log()
    );
    assert!(a.log().contains("killed COMMAND at once"), "{}", a.log());
}

#[test]
fn an_orderly_stop_gives_the_command_its_whole_grace_while_the_lease_is_renewed() {
    let world = world();
    // Longer than the term the supervisor was told of at SIGTERM (3 s).
    let mut a = world.a_leads(&on_term("linger:4", "8"));
    a.signal("-TERM");
    assert_eq!(a.exit_code(), Some(0), "{}", a.log());
    let run_a = &world.timeline().of("a")[0];
    assert_eq!(
        run_a.said,
        ["start", "term", "exit"],
        "COMMAND ended by itself, not killed: {run_a:?}; stderr: {}",
        a.log()
    );
    assert_eq!(world.spec()["holderIdentity"], "", "released");
}

#[test]
fn a_command_in_its_grace_is_killed_at_once_when_another_holder_takes_the_lease() {
    let world = world();
    // COMMAND takes 10 s to end after SIGTERM, within a 10 s --grace.
    let mut a = world.a_leads(&on_term("linger:10", "10"));
    a.signal("-TERM");
    world.wait_said("a", "term");
    // While COMMAND is in its grace, another writer takes the Lease: the
    // new holder may run the job already.
    let taken = std::time::Instant::now();
    world.overwrite("other", Some(1));
    assert_eq!(a.exit_code(), Some(0), "{}", a.log());
    let run_a = &world.timeline().of("a")[0];
    assert!(!alive(run_a.pid), "{run_a:?}");
    assert_eq!(
        run_a.said,
        ["start", "term"],
        "killed (SIGKILL) in its grace, not left to finish: {run_a:?}; stderr: {}",
        a.log()
    );
    // By a's next renew (a retry period), not at the end of the grace.
    let took = taken.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "{took:?}; stderr: {}",
        a.log()
    );
    assert!(
        a.log().contains("taken over") && a.log().contains("SIGKILL at once"),
        "{}",
        a.log()
    );
    assert_eq!(
        world.spec()["holderIdentity"],
        "other",
        "not released: not ours"
    );
}

#[test]
fn a_deleted_lease_kills_the_command_without_grace_and_a_fresh_candidate_runs_with_a_greater_token()
{
    let world = world();
    // COMMAND would take 5 s to end after SIGTERM, within a 10 s --grace;
    // A polls (the watch would see the deletion at once, below).
    let mut polling = on_term("linger:5", "10");
    polling.flags.push("--no-watch".into());
    let mut a = world.a_leads(&polling);
    // kubectl delete lease; then a fresh candidate, which never saw a
    // holder, creates the Lease at once.
    world.delete();
    let c = world.start("c", &Options::default());
    c.expect("LEADING c");
    world.wait_ticks("c", 1);
    assert_eq!(a.exit_code(), Some(1), "{}", a.log());
    let (run_a, run_c) = (&world.timeline().of("a")[0], &world.timeline().of("c")[0]);
    assert_eq!(
        run_a.said,
        ["start"],
        "SIGKILL, no SIGTERM first and no grace: {run_a:?}; stderr: {}",
        a.log()
    );
    assert!(a.log().contains("the lease was deleted"), "{}", a.log());
    // A learns at its next renew (a retry period): the overlap is no
    // longer, and c's token is the greater.
    let (overlap, runs) = world.timeline().worst_overlap();
    assert!(
        overlap <= Duration::from_millis(1300),
        "{overlap:?}: {runs:#?}"
    );
    let token = |r: &common::overlap::Run| r.token.parse::<u64>().unwrap();
    assert!(token(run_c) > token(run_a), "{run_a:?} {run_c:?}");
}

#[test]
fn with_the_watch_a_deleted_lease_ends_the_command_at_the_deleted_event() {
    let world = world();
    let watching = Options {
        on_term: "linger:5".into(),
        flags: vec!["--grace".into(), "10".into(), "--watch".into()],
        ..Options::default()
    };
    let mut a = world.a_leads(&watching);
    world.delete();
    let c = world.start("c", &Options::default());
    c.expect("LEADING c");
    world.wait_ticks("c", 1);
    assert_eq!(a.exit_code(), Some(1), "{}", a.log());
    let (overlap, runs) = world.timeline().worst_overlap();
    assert!(
        overlap <= Duration::from_millis(100),
        "{overlap:?}: {runs:#?}; a: {}",
        a.log()
    );
}
