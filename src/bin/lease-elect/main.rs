//! `lease-elect`: Kubernetes leader election from the command line
//! (feature `cli`; `cargo install --path . --features cli`).
//!
//! Without COMMAND it prints one line per event, as `examples/elect.rs`
//! does; with `-- COMMAND [ARGS...]` it runs COMMAND only while leading.
//! `args.rs` holds the flags and the exit statuses (`--help`), `run.rs`
//! when COMMAND may run, `supervise.rs` why COMMAND never outlives a
//! crashed or stopped `lease-elect`, `boottime.rs` the clock it keeps the
//! term's end on, `procs.rs` how every process COMMAND started is found,
//! signalled and reaped, `logger.rs` the stderr logger, and `outlet.rs` why
//! no line written to stderr or stdout can hold any of it up.

mod args;
mod boottime;
mod logger;
mod outlet;
mod procs;
mod run;
mod supervise;

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut argv = std::env::args_os().skip(1).peekable();
    if argv.peek().is_some_and(|a| a == supervise::FLAG) {
        return supervise::main(argv.skip(1));
    }
    if argv.peek().is_some_and(|a| a == supervise::EXEC_FLAG) {
        return supervise::exec_dying_with_parent(argv.skip(1));
    }
    let args = match args::parse(argv) {
        Ok(args::Parsed::Run(args)) => args,
        Ok(args::Parsed::Help) => {
            print!("{}", args::HELP);
            return ExitCode::SUCCESS;
        }
        Ok(args::Parsed::Version) => {
            println!("lease-elect {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("lease-elect: {e}\n{}", args::USAGE);
            return ExitCode::from(2);
        }
    };
    let logger = logger::init(
        logger::ELECT,
        logger::level_from_env(args.verbose),
        run::EXIT_FLUSH,
    );
    run::main(*args, logger)
}
