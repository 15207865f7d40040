//! elect: run a command on exactly one machine at a time.
//!
//! The library is the whole program; `src/main.rs` only calls [`main`],
//! which parses the command line, runs, and maps the outcome to an exit
//! code in one place ([`exit::Outcome::finish`]). ARCHITECTURE.md maps the
//! modules.

// elect never panics on bad input or a store's answer: a failure is one
// line and an exit code. An `expect` that states an invariant says why it
// holds where it is allowed.
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod backoff;
mod cli;
mod clock;
#[cfg(test)]
mod completions;
mod descriptors;
mod disposition;
#[cfg(test)]
mod docs;
mod exit;
#[cfg(test)]
mod fuzz;
mod history;
mod inspect;
mod kill;
#[cfg(test)]
mod layers;
mod lease;
mod log;
mod reach;
mod release;
mod report;
mod run;
mod store;
mod supervisor;
mod timeline;
mod usage;

use crate::cli::Command;
use crate::exit::{Failure, Outcome};

/// What `main` runs once the command line is parsed.
enum Work {
    Run(run::Ready),
    Other(Command),
}

/// elect, from its command line to its exit: never returns.
pub fn main() -> ! {
    timeline::start();
    // Two TLS providers are built in (ring, and aws-lc for the ZooKeeper
    // client): clients that take the process's default get ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == supervisor::guard::ARG) {
        supervisor::guard::main(&args[1..]);
    }
    if args
        .get(1)
        .is_some_and(|a| a == supervisor::guard::RELEASE_ARG)
    {
        release::main(&args[2..]);
    }
    // The copy that a reaper started (see supervisor::reaper).
    let reaped = args.get(1).is_some_and(|a| a == supervisor::reaper::ARG);
    if reaped {
        args.remove(1);
        supervisor::reaper::mark_reaped();
        supervisor::guard::set_name(c"elect");
    }
    // Every line is JSON if asked, a usage error's too: know it first.
    log::set(log::Level::Normal, usage::json_requested(&args));
    let cli = match usage::parse(&args) {
        Ok(cli) => cli,
        Err(outcome) => outcome.finish(),
    };
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => log::Level::Quiet,
        (_, true) => log::Level::Verbose,
        _ => log::Level::Normal,
    };
    log::set(level, cli.log_format == cli::LogFormat::Json);
    // Before anything opens a descriptor: too few, and the runtime or a
    // client library would abort where elect can say why.
    let listening = match &cli.command {
        Command::Run(run) if run.listen.is_some() => run::endpoint::MAX_OPEN as u64,
        _ => 0,
    };
    if let Err(failure) = descriptors::ensure(listening) {
        Outcome::from(failure).finish();
    }
    if let Command::Run(run) = &cli.command
        && !reaped
        && supervisor::reaper::needed(run.subreaper)
    {
        supervisor::reaper::main(&args[1..]);
    }
    let name = cli.command.name();
    // `elect run` forks its guard now, while elect has one thread.
    let command = match cli.command {
        Command::Run(args) => match run::prepare(args) {
            Ok(ready) => Work::Run(ready),
            Err(outcome) => usage::tail(outcome, name).finish(),
        },
        other => {
            // A reader that has gone (`elect list | head -n1`) ends an
            // inspection quietly, as it ends any Unix filter; Rust ignores
            // SIGPIPE, so a print would panic. `elect run` keeps ignoring
            // it: its stderr going must not kill it while a command runs.
            if let Err(e) = disposition::set(libc::SIGPIPE, disposition::Disposition::Default) {
                Outcome::from(Failure::software(format!("cannot reset SIGPIPE: {e}"))).finish();
            }
            Work::Other(other)
        }
    };
    // One thread: the runtime never forks from a thread that may exit, and
    // nothing here is CPU-bound. Deadlines are enforced by the guard process.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let failure = descriptors::or(&e, || Failure::software(format!("cannot start: {e}")));
            Outcome::from(failure).finish();
        }
    };
    let outcome = runtime.block_on(async {
        match command {
            Work::Run(ready) => run::run(ready).await,
            Work::Other(Command::Run(_)) => unreachable!("prepared above"),
            Work::Other(Command::Status(args)) => inspect::status(args).await,
            Work::Other(Command::List(args)) => inspect::list(args).await,
            Work::Other(Command::Check(args)) => inspect::check(args).await,
            Work::Other(Command::Break(args)) => inspect::break_lock(args).await,
            Work::Other(Command::Checkpoint(args)) => inspect::checkpoint(args).await,
            Work::Other(Command::History(args)) => inspect::history(args).await,
        }
    });
    // Drop the runtime first: its blocking threads must not outlive a re-raise.
    drop(runtime);
    usage::tail(outcome, name).finish()
}
