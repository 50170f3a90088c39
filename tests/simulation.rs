//! The seeded simulation (`lease_elector::testing::sim`): schedules of
//! faults searched for two leaders, backward tokens and terms that outlive
//! their deadline, on virtual time, every failure replayable from its seed.
//!
//! - `cargo test --test simulation` runs `LEASE_ELECTOR_SIM_SCHEDULES`
//!   schedules (default 1,000; `.ci/run` runs 10,000) and prints
//!   `simulation: N schedules, V violations, S s` (V: schedules with a
//!   violation; stops after `LEASE_ELECTOR_SIM_MAX_FAILURES`, default 5);
//! - `LEASE_ELECTOR_SIM_SEED=<seed>` replays one schedule and prints its trace;
//! - `LEASE_ELECTOR_SIM_FIRST=<seed>` starts the search elsewhere.

use lease_elector::testing::sim;

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    match v.trim().parse() {
        Ok(n) => Some(n),
        Err(_) => panic!("{name}={v:?} is not a number"),
    }
}

fn replay_command(seed: u64) -> String {
    format!("LEASE_ELECTOR_SIM_SEED={seed} cargo test --test simulation -- --nocapture")
}

#[test]
fn schedules_of_faults_never_give_two_leaders_or_backward_tokens() {
    if let Some(seed) = env_u64("LEASE_ELECTOR_SIM_SEED") {
        let outcome = sim::run_traced(seed);
        for line in &outcome.trace {
            println!("{line}");
        }
        for v in &outcome.violations {
            println!("VIOLATION {v}");
        }
        assert!(outcome.violations.is_empty(), "seed {seed} fails");
        return;
    }
    let count = env_u64("LEASE_ELECTOR_SIM_SCHEDULES").unwrap_or(1000);
    let first = env_u64("LEASE_ELECTOR_SIM_FIRST").unwrap_or(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let max_failures = env_u64("LEASE_ELECTOR_SIM_MAX_FAILURES").unwrap_or(5) as usize;
    let summary = sim::run_many(first, count, threads, max_failures);
    let failing = summary.failures.len();
    println!(
        "simulation: {} schedules, {failing} violations, {:.1} s",
        summary.schedules, summary.seconds
    );
    // The seeds first: a replay that panics still leaves them printed.
    for f in &summary.failures {
        println!("seed {}:", f.seed);
        for v in &f.violations {
            println!("  {v}");
        }
        println!("  replay: {}", replay_command(f.seed));
    }
    if let Some(first_failure) = summary.failures.first() {
        let traced = sim::run_traced(first_failure.seed);
        let tail = traced.trace.len().saturating_sub(400);
        for line in &traced.trace[..traced.trace.len().min(60)] {
            println!("{line}");
        }
        println!("...");
        for line in &traced.trace[tail.max(60)..] {
            println!("{line}");
        }
        panic!(
            "{failing} failing schedule(s); first: seed {} (replay: {})",
            first_failure.seed,
            replay_command(first_failure.seed)
        );
    }
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    for seed in [1, 2, 3] {
        let (a, b) = (sim::run_traced(seed), sim::run_traced(seed));
        assert!(a.trace.len() > 10, "a trace for seed {seed}");
        assert_eq!(a.trace, b.trace, "seed {seed}");
    }
}

/// Seeds the million-schedule search found, kept as regressions: a renew
/// whose optimistic update was answered (an error) past the round's
/// deadline fell back to a read with no time left, abandoned as soon as
/// sent, and the acquire that followed sent its first request at once:
/// two requests within a retry period against a failing server (a renew
/// woken past its deadline read too, 160855); and the checker took a
/// creation after a deletion for a knowing takeover when
/// `leaseTransitions`, pinned at its edge, made two terms look alike
/// (223535). From the second search: a release refused (409) re-read the
/// Lease from a watch that lagged behind the server, saw it not ours and
/// did not release (439485, 603832); a COMMAND whose term ran out while
/// its elector was stalled kept its grace after the elector, running
/// again, found the Lease deleted under it (339649, 774758). From the
/// third: after a term ran out, a read the watch answered paced the next
/// one by the server's last `Retry-After` again, counted from then rather
/// than from when it was asked (404669, 505951, 599990); and the checker
/// took a process whose answer was lost for one that could hear, while it
/// waited for that request's deadline (184418, 525300). From the fourth:
/// a COMMAND whose supervisor was stopped ended only when `lease-elect`
/// killed everything below it, half a margin after the SIGKILL it ordered
/// at the lease deadline, so later than the work's budget allows (504200,
/// 985002 by two at once at the drift bound's edge, 327 by the budget
/// once the checker stopped excusing it). Each replays the
/// schedule it was found in (COMMAND's later extras left out), and the
/// schedule its seed draws now.
#[test]
fn found_seeds_stay_fixed() {
    for seed in [
        327, 85302, 160855, 179197, 184418, 206883, 223535, 339649, 404669, 439485, 504200, 505951,
        525300, 599990, 603832, 774758, 985002,
    ] {
        for outcome in [sim::run_traced_as_first_drawn(seed), sim::run_traced(seed)] {
            assert!(
                outcome.violations.is_empty(),
                "seed {seed}: {:?}\nreplay: {}",
                outcome.violations,
                replay_command(seed)
            );
        }
    }
}
