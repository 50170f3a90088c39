//! How fast the seeded simulation searches schedules: schedules per second
//! on one thread and on every core, and the steps (events) per schedule.
//!
//! `cargo bench --bench simulation [-- N]` (N schedules per figure,
//! default 2,000; seeds from 1,000,000 on, clear of the CI run's).

use std::time::Instant;

use lease_elector::testing::sim;

fn main() {
    let n: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(2000);
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    println!(
        "| threads | schedules | violations | schedules/s | steps/schedule | terms/schedule |"
    );
    println!("|---|---|---|---|---|---|");
    for threads in [1, cores] {
        let started = Instant::now();
        let s = sim::run_many(1_000_000, n, threads, usize::MAX);
        let secs = started.elapsed().as_secs_f64();
        println!(
            "| {threads} | {} | {} | {:.0} | {:.0} | {:.1} |",
            s.schedules,
            s.failures.len(),
            s.schedules as f64 / secs,
            s.events as f64 / s.schedules as f64,
            s.terms as f64 / s.schedules as f64
        );
    }
}
