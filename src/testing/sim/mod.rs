//! A deterministic simulation of 2 to 7 candidates on one Lease, on
//! virtual time, from a seed: the crate's own state machine (`Run`, the
//! code the elector thread runs) against a simulated API server, a
//! network and a world that draws its faults from the seed, with a checker
//! asking after every step whether two candidates lead at once, whether a
//! token went backwards, whether a term outlived its deadline.
//!
//! As FoundationDB's simulation and TigerBeetle's VOPR do, it searches
//! schedules of ordinary events rather than checking one scenario: request
//! latency below, near and past the per-request cap; answers lost after
//! the write applied; 409s; 5xx with and without `Retry-After`; a
//! candidate cut off and healed; a whole process paused and resumed;
//! crash and restart (same identity, new identity); stop with and without
//! release; clocks running fast or slow within the drift bound; wall
//! clocks frozen, stepped back and forth, past the year 9999; other
//! writers deleting the Lease, dropping or lowering `leaseTransitions`,
//! rewriting or freeing its holder; the watch on and off, its events late,
//! repeated, out of order or dropped. See `check.rs` for the rules.
//!
//! Same seed, same trace, byte for byte: time is virtual (one `Instant`
//! is read as an origin, never to decide), the elector's jitter is seeded
//! from the schedule, and one thread runs everything in a fixed order.
//! Process-level faults (signals, pipes, stuck stderr) are left to the
//! process tests, which run real processes.
//!
//! Not part of the crate's API: the crate's tests and benchmark use it
//! (`tests/simulation.rs`, `benches/simulation.rs`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

mod check;
mod clock;
mod io;
mod judge;
mod layers;
mod net;
mod owed;
mod plan;
mod world;

/// What one schedule found.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The schedule's seed.
    pub seed: u64,
    /// What broke, one line each (empty: nothing).
    pub violations: Vec<String>,
    /// With [`run_traced`]: who did what, when, and what the store held.
    pub trace: Vec<String>,
    /// Leadership terms started.
    pub terms: usize,
    /// Steps taken.
    pub events: u64,
}

/// Run schedule `seed`. A panic in it (the elector's or the checker's)
/// is a violation of that schedule, with its message: the search goes on
/// and names the seed to replay (a replay, [`run_traced`], panics as
/// itself, with its backtrace).
pub fn run(seed: u64) -> Outcome {
    std::panic::catch_unwind(|| run_with(seed, false)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into());
        Outcome {
            seed,
            violations: vec![format!("the schedule panicked: {what}")],
            trace: Vec::new(),
            terms: 0,
            events: 0,
        }
    })
}

/// Run schedule `seed`, keeping its trace.
pub fn run_traced(seed: u64) -> Outcome {
    run_with(seed, true)
}

/// Run schedule `seed` as it was drawn before COMMAND's world had a
/// supervisor without its switch and a second SIGTERM (they come from a
/// stream of their own): a seed found before then replays its schedule
/// exactly, with its trace.
pub fn run_traced_as_first_drawn(seed: u64) -> Outcome {
    let mut plan = plan::Plan::draw(seed);
    plan.without_command_extras();
    finish(seed, world::World::new(plan, true).run())
}

fn run_with(seed: u64, trace: bool) -> Outcome {
    finish(seed, world::World::new(plan::Plan::draw(seed), trace).run())
}

fn finish(seed: u64, found: world::Found) -> Outcome {
    Outcome {
        seed,
        violations: found.violations,
        trace: found.trace,
        terms: found.terms,
        events: found.events,
    }
}

/// A run of many schedules.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Schedules run.
    pub schedules: u64,
    /// Schedules with a violation, with what they found.
    pub failures: Vec<Outcome>,
    /// Terms started, over all schedules.
    pub terms: u64,
    /// Steps, over all schedules.
    pub events: u64,
    /// Wall time taken, in seconds (for the report line only).
    pub seconds: f64,
}

/// Run `count` schedules from seed `first` on, on `threads` threads; stop
/// early after `max_failures` failing schedules.
pub fn run_many(first: u64, count: u64, threads: usize, max_failures: usize) -> Summary {
    let started = Instant::now();
    let next = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let failed = AtomicUsize::new(0);
    let totals = Mutex::new(Summary::default());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                if failed.load(Ordering::Relaxed) >= max_failures {
                    return;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return;
                }
                let outcome = run(first.wrapping_add(i));
                done.fetch_add(1, Ordering::Relaxed);
                let mut t = totals
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                t.terms += outcome.terms as u64;
                t.events += outcome.events;
                if !outcome.violations.is_empty() {
                    failed.fetch_add(1, Ordering::Relaxed);
                    t.failures.push(outcome);
                }
            });
        }
    });
    let mut summary = totals
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    summary.schedules = done.load(Ordering::Relaxed);
    summary.failures.sort_by_key(|o| o.seed);
    summary.seconds = started.elapsed().as_secs_f64();
    summary
}
