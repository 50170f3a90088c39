//! The worst overlap of two `lease-elect` candidates' COMMANDs under each
//! fault of issue 24, and the fencing tokens (`LEASE_ELECT_TERM`) of their
//! terms, at lease 4 s / renew deadline 3 s / retry 1 s and at client-go's
//! 15 s / 10 s / 2 s.
//!
//! ```text
//! cargo bench --bench overlap                        # every case, both timings (minutes)
//! cargo bench --bench overlap -- --quick             # 4/3/1 s only
//! cargo bench --bench overlap -- sigstop deleted     # some cases
//! cargo bench --bench overlap -- --lease-elect PATH  # another build (an older one)
//! ```
//!
//! A and B run the same COMMAND, which appends a timestamp every 10 ms
//! (`tests/common/overlap.rs`); A leads, B follows, then the case applies
//! its fault to A and lets B run a lease duration after it starts leading.
//! The overlap is measured from the timestamps: the time both COMMANDs
//! wrote, short of the truth by at most one 10 ms tick. A COMMAND that
//! still ran when the case ended is said so: its overlap would have grown.
//!
//! The cases (`lib` marks those the library half of issue 24 is to fix):
//! - `stuck-stderr`: A's stderr is a full pipe nobody reads; A is cut off
//!   from the API server (its requests dropped).
//! - `sigkill-stuck`: A's stderr is stuck, and A's `lease-elect` is
//!   SIGKILLed.
//! - `sigstop`: A's `lease-elect` (alone) is SIGSTOPped, and continued
//!   once B has run.
//! - `sigtstp`: A's `lease-elect` gets SIGTSTP (Ctrl-Z), then, two lease
//!   durations later, SIGTERM.
//! - `deleted` (lib): the Lease is deleted (`kubectl delete lease`) while A
//!   leads with a COMMAND that finishes slowly (it runs on two lease
//!   durations after SIGTERM; `--grace` 10 s). B watches (`--watch`), so
//!   that it, not A's next renew, is first to find the Lease gone.
//! - `lowered` (lib): A leads a Lease with `leaseTransitions` 5; another
//!   writer replaces it without `leaseTransitions` (as the official Python
//!   client writes it) and leaves it to expire; B takes over.
//! - `frozen-clock` (lib): A's wall clock is frozen (libfaketime, monotonic
//!   time left alone), so its renews write the same `renewTime`.
//! - `freed` (lib): someone frees the Lease mid-term (holder emptied);
//!   whoever takes it next leads.

use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

#[path = "../tests/common/mod.rs"]
mod common;

use common::overlap::{
    frozen_wall_clock, libfaketime, Candidate, Options, Timings, World, CLIENT_GO, SHORT,
};
use common::procs::{alive, state};

const BIN: &str = env!("CARGO_BIN_EXE_lease-elect");

type Res<T> = Result<T, String>;

struct Case {
    name: &'static str,
    /// The library half of issue 24 is to fix it.
    library: bool,
    run: fn(&World) -> Res<String>,
}

const CASES: [Case; 8] = [
    Case {
        name: "stuck-stderr",
        library: false,
        run: stuck_stderr,
    },
    Case {
        name: "sigkill-stuck",
        library: false,
        run: sigkill_stuck,
    },
    Case {
        name: "sigstop",
        library: false,
        run: sigstop,
    },
    Case {
        name: "sigtstp",
        library: false,
        run: sigtstp,
    },
    Case {
        name: "deleted",
        library: true,
        run: deleted,
    },
    Case {
        name: "lowered",
        library: true,
        run: lowered,
    },
    Case {
        name: "frozen-clock",
        library: true,
        run: frozen_clock,
    },
    Case {
        name: "freed",
        library: true,
        run: freed,
    },
];

fn main() {
    let mut args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let bin = match args.iter().position(|a| a == "--lease-elect") {
        Some(i) if i + 1 < args.len() => {
            let path = args.remove(i + 1);
            args.remove(i);
            path
        }
        Some(_) => {
            eprintln!("--lease-elect needs a path");
            std::process::exit(2);
        }
        None => BIN.to_string(),
    };
    let quick = args.iter().any(|a| a == "--quick");
    let wanted: Vec<&str> = args
        .iter()
        .filter(|a| !a.starts_with("--"))
        .map(String::as_str)
        .collect();
    if let Some(bad) = wanted.iter().find(|w| !CASES.iter().any(|c| c.name == **w)) {
        let names: Vec<&str> = CASES.iter().map(|c| c.name).collect();
        eprintln!("unknown case {bad:?}: one of {}", names.join(", "));
        std::process::exit(2);
    }
    let timings: &[Timings] = if quick { &[SHORT] } else { &[SHORT, CLIENT_GO] };
    println!("| case | lease/renew/retry | worst overlap | terms (candidate:LEASE_ELECT_TERM) | leaseTransitions stored | note |");
    println!("|---|---|---|---|---|---|");
    for t in timings {
        for case in CASES
            .iter()
            .filter(|c| wanted.is_empty() || wanted.contains(&c.name))
        {
            let world = World::new(Path::new(&bin), *t);
            let began = Instant::now();
            let note = (case.run)(&world).unwrap_or_else(|e| format!("failed: {e}"));
            let timeline = world.timeline();
            let (overlap, _) = timeline.worst_overlap();
            let terms: Vec<String> = timeline
                .terms()
                .iter()
                .map(|(who, token)| format!("{who}:{token}"))
                .collect();
            let stored = world
                .server
                .lease(common::overlap::NS, common::overlap::LEASE)
                .map_or("(no Lease)".to_string(), |l| {
                    l.spec
                        .and_then(|s| s.lease_transitions)
                        .map_or("-".to_string(), |t| t.to_string())
                });
            println!(
                "| {}{} | {t} | {} ms | {} | {stored} | {note} ({:.0} s) |",
                case.name,
                if case.library { " (lib)" } else { "" },
                overlap.as_millis(),
                terms.join(" "),
                began.elapsed().as_secs_f64()
            );
        }
    }
}

/// B's options: `flags` only.
fn b_with(flags: &[&str]) -> Options {
    Options {
        flags: flags.iter().map(|f| f.to_string()).collect(),
        ..Options::default()
    }
}

/// Wait (at most four lease durations) until B leads, let it run a lease
/// duration, and say whether a COMMAND of A still runs.
fn b_takes_over(world: &World, b: &Candidate) -> Res<String> {
    let limit = world.timings.lease_duration() * 4 + Duration::from_secs(5);
    if !b.wait_for("LEADING b", limit) {
        return Ok(format!(
            "B did not lead within {limit:?}; {}",
            a_still_runs(world)
        ));
    }
    world.wait_ticks("b", 1);
    thread::sleep(world.timings.lease_duration());
    Ok(a_still_runs(world))
}

fn a_still_runs(world: &World) -> String {
    let living: Vec<u32> = world
        .timeline()
        .of("a")
        .iter()
        .map(|r| r.pid)
        .filter(|&p| alive(p))
        .collect();
    if living.is_empty() {
        "A's COMMAND had ended".into()
    } else {
        "A's COMMAND still ran when the case ended".into()
    }
}

fn stuck() -> Options {
    Options {
        stuck_stderr: true,
        ..Options::default()
    }
}

fn stuck_stderr(world: &World) -> Res<String> {
    let (_a, b) = world.a_leads_b_follows(&stuck(), &Options::default());
    world.cut_off("a");
    b_takes_over(world, &b)
}

fn sigkill_stuck(world: &World) -> Res<String> {
    let (mut a, b) = world.a_leads_b_follows(&stuck(), &Options::default());
    a.child.kill().map_err(|e| e.to_string())?;
    let _ = a.child.wait();
    b_takes_over(world, &b)
}

fn sigstop(world: &World) -> Res<String> {
    let (a, b) = world.a_leads_b_follows(&Options::default(), &Options::default());
    a.signal("-STOP");
    let note = b_takes_over(world, &b);
    a.signal("-CONT");
    note
}

fn sigtstp(world: &World) -> Res<String> {
    let (mut a, b) = world.a_leads_b_follows(&Options::default(), &Options::default());
    a.signal("-TSTP");
    thread::sleep(world.timings.lease_duration() * 2);
    let stopped = state(a.pid()) == Some('T');
    let early = b.printed().iter().any(|l| l == "LEADING b");
    a.signal("-CONT");
    a.signal("-TERM");
    let _ = a.exit_code();
    let after = if early {
        format!("B led while A was stopped; {}", a_still_runs(world))
    } else {
        b_takes_over(world, &b)?
    };
    Ok(format!(
        "A {} by SIGTSTP; {after}",
        if stopped {
            "was stopped"
        } else {
            "was not stopped"
        }
    ))
}

fn deleted(world: &World) -> Res<String> {
    let slow = Options {
        on_term: format!("linger:{}", world.timings.lease * 2),
        ..Options::default()
    };
    let (_a, b) = world.a_leads_b_follows(&slow, &b_with(&["--watch"]));
    world.delete();
    b_takes_over(world, &b)
}

fn lowered(world: &World) -> Res<String> {
    world.overwrite("", Some(5));
    let (_a, b) = world.a_leads_b_follows(&Options::default(), &Options::default());
    world.overwrite("other", None);
    b_takes_over(world, &b)
}

fn frozen_clock(world: &World) -> Res<String> {
    let Some(lib) = libfaketime() else {
        return Ok("skipped: libfaketime is not installed (apt-get install faketime)".into());
    };
    // Now, in UTC: libfaketime stands still at an absolute time.
    let now = Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M:%S"])
        .output()
        .map_err(|e| e.to_string())?;
    let frozen = String::from_utf8_lossy(&now.stdout).trim().to_string();
    let options = frozen_wall_clock(&lib, &frozen);
    let (_a, b) = world.a_leads_b_follows(&options, &Options::default());
    let note = b_takes_over(world, &b)?;
    Ok(format!("A's wall clock frozen at {frozen} UTC; {note}"))
}

fn freed(world: &World) -> Res<String> {
    let (_a, b) = world.a_leads_b_follows(&Options::default(), &Options::default());
    world.free();
    b_takes_over(world, &b)
}
