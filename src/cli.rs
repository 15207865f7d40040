//! The command line: the one definition that `--help`, the shell completions
//! and the man pages are generated from.

mod commands;
pub mod parse;
mod run;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

pub use commands::{
    BreakArgs, CheckArgs, CheckpointAction, CheckpointArgs, HistoryArgs, ListArgs, StatusArgs,
};
use parse::{parse_bool, parse_connect_timeout};
pub use run::{Rejoin, RunArgs, Wait};

/// Environment variables that are no flag's: those elect reads besides the
/// flags' own (each flag's variable is in its help), each store's among
/// them, and those it sets for COMMAND.
pub fn environment() -> Vec<(String, String)> {
    let kinds = || crate::store::kinds().map(|kind| &kind.about);
    let per_store = |what: fn(&crate::store::About) -> &'static str| {
        let each: Vec<String> = kinds()
            .map(|about| format!("{}: {}", about.title, what(about)))
            .collect();
        each.join("; ").replace('`', "")
    };
    let mut all = vec![
        (
            "ELECT_PASSWORD".to_string(),
            "Read: the user's password when --password-file is not given.".to_string(),
        ),
        (
            crate::timeline::VARIABLE.to_string(),
            "Read: 1 to add, with -v, a line for each step of elect run with its time since elect \
             started (step +1.234ms NAME), which the benchmarks read."
                .to_string(),
        ),
    ];
    for about in kinds() {
        for (names, meaning) in about.reads {
            all.push((names.to_string(), format!("Read: {meaning}")));
        }
    }
    let set = |name: &str, meaning: &str| (name.to_string(), format!("Set for COMMAND: {meaning}"));
    all.extend([
        set(
            "ELECT_TOKEN",
            "the fencing token, a decimal number greater than every earlier holder's.",
        ),
        set("ELECT_LOCK", "the lock name."),
        set(
            "ELECT_KEY",
            &format!(
                "the key that represents this holder in the store: {}.",
                per_store(|a| a.key)
            ),
        ),
        set("ELECT_LEASE_ID", &format!("{}.", per_store(|a| a.lease_id))),
        set(
            "ELECT_IDENTITY",
            "the holder's identity (--identity, else the hostname).",
        ),
    ]);
    all.push((
        "ELECT_SHARD, ELECT_SHARDS".to_string(),
        "Set for COMMAND with --shards: the shard it owns (0 to N-1), and N; never inherited."
            .to_string(),
    ));
    all.push(set(
        "ELECT_CHECKPOINT",
        "the lock's last checkpoint (elect checkpoint), if there is one of at most 4 KiB; never inherited.",
    ));
    all.push(set("ELECT_STORE", "the store URL, without credentials."));
    all.push((
        "ELECT_STORE_CREDENTIALS".to_string(),
        "Set for COMMAND when elect reached the store with a user or certificates, however given: how it did, as JSON (user, password_file, cacert, cert, key), which an elect inside COMMAND uses for ELECT_STORE and no other store. The password file is /dev/fd/N, a read-only memory file that COMMAND's processes inherit: the password is never in COMMAND's environment or arguments; never inherited.".to_string(),
    ));
    let with_secrets: Vec<&crate::store::About> =
        kinds().filter(|about| !about.secrets.is_empty()).collect();
    let names: Vec<&str> = std::iter::once("ELECT_PASSWORD")
        .chain(
            with_secrets
                .iter()
                .flat_map(|about| about.secrets.iter().copied()),
        )
        .collect();
    let stores: Vec<&str> = with_secrets.iter().map(|about| about.title).collect();
    all.push((
        names.join(", "),
        format!(
            "Removed from COMMAND's environment, ELECT_PASSWORD always and the others with their store ({}): they may carry secrets.",
            stores.join(", ")
        ),
    ));
    all
}

/// `what`, then what it is to each kind of store that takes it, and which
/// take none: a flag's help, from the stores' own descriptions.
fn per_store(what: &str, field: fn(&crate::store::About) -> Option<&'static str>) -> String {
    let (taken, refused): (Vec<_>, Vec<_>) =
        crate::store::kinds().partition(|kind| field(&kind.about).is_some());
    let taken: Vec<String> = taken
        .iter()
        .filter_map(|kind| Some(format!("{}: {}", kind.about.title, field(&kind.about)?)))
        .collect();
    let refused: Vec<&str> = refused.iter().map(|kind| kind.about.title).collect();
    let mut help = format!("{what} ({})", taken.join("; "));
    if !refused.is_empty() {
        help.push_str(&format!("; {} take none", refused.join(" and ")));
    }
    help
}

/// The URL forms `--store` takes, from every kind of store: the first
/// paragraph of its help.
fn store_forms() -> String {
    let forms: Vec<&str> = crate::store::kinds().map(|kind| kind.about.help).collect();
    match forms.split_last() {
        Some((last, [])) => format!("Where the lock lives: {last}."),
        Some((last, rest)) => format!("Where the lock lives: {}, or {last}.", rest.join(", ")),
        None => "Where the lock lives".to_string(),
    }
}

/// `--store`'s long help.
fn store_help() -> String {
    let own: String = crate::store::kinds()
        .filter_map(|kind| kind.about.store_variable)
        .map(|variable| format!(", then {variable}"))
        .collect();
    format!(
        "{}\n\nWithout it, ELECT_STORE is used{own}, then {}. A password in the URL works, \
         but every user of the host can read a command line in ps: prefer --password-file.",
        store_forms(),
        crate::store::DEFAULT_STORE
    )
}

/// What a yes/no variable accepts, for messages and help.
pub const BOOLEANS: &str = "1, true, yes, on or 0, false, no, off";

#[derive(Debug, Parser)]
#[command(
    name = "elect",
    // The version and the commit it was built from (build.rs).
    version = env!("ELECT_VERSION"),
    about = "Run a command on exactly one machine at a time, under a lease with a fencing token",
    long_about = "Run a command on exactly one machine at a time.\n\n\
        elect takes a lease on a coordination store, starts COMMAND with a fencing token in \
        ELECT_TOKEN, renews the lease in the background, and if the lease is lost it signals \
        and then kills COMMAND's whole process group before the store could hand the lock to \
        anyone else.",
    after_help = crate::exit::help_text("elect"),
    propagate_version = true
)]
pub struct Cli {
    /// Print nothing of elect's own but errors, not even why the lock was busy.
    ///
    /// ELECT_QUIET takes 1, true, yes, on or 0, false, no, off. -q and -v on the command line
    /// win over the variables.
    #[arg(short, long, global = true, display_order = 900, env = "ELECT_QUIET", hide_env_values = true, value_parser = parse_bool)]
    pub quiet: bool,

    /// Show the lifecycle on stderr: connected, queued, acquired, renewals, released.
    ///
    /// ELECT_VERBOSE takes 1, true, yes, on or 0, false, no, off.
    #[arg(short, long, global = true, display_order = 901, env = "ELECT_VERBOSE", hide_env_values = true, value_parser = parse_bool)]
    pub verbose: bool,

    /// Format of every line elect writes on stderr, usage errors included.
    #[arg(
        long,
        global = true,
        display_order = 902,
        value_name = "FORMAT",
        default_value = "text",
        env = "ELECT_LOG_FORMAT",
        hide_env_values = true
    )]
    pub log_format: LogFormat,

    #[command(subcommand)]
    pub command: Command,
}

/// What elect was asked to do.
///
/// Written out rather than derived so that each subcommand's arguments are
/// built only when it is the one given: building all of them took longer
/// than parsing the one, at every start of every cycle.
#[derive(Debug)]
pub enum Command {
    Run(RunArgs),
    Status(StatusArgs),
    List(ListArgs),
    Check(CheckArgs),
    Break(BreakArgs),
    Checkpoint(CheckpointArgs),
    History(HistoryArgs),
}

impl Command {
    /// The subcommand's name, as typed.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Run(_) => "run",
            Command::Status(_) => "status",
            Command::List(_) => "list",
            Command::Check(_) => "check",
            Command::Break(_) => "break",
            Command::Checkpoint(_) => "checkpoint",
            Command::History(_) => "history",
        }
    }
}

impl Subcommand for Command {
    fn augment_subcommands(cmd: clap::Command) -> clap::Command {
        use crate::exit::help_text;
        use clap::Command as Sub;
        cmd.subcommands([
            Sub::new("run")
                .about("Take the lock, run COMMAND while holding it, release it when COMMAND ends")
                .override_usage("elect run --lock NAME [OPTIONS] -- COMMAND [ARG...]")
                .defer(|c| with_args::<RunArgs>(c.after_help(run_after_help()))),
            Sub::new("status")
                .about("Show who holds a lock, since when, with which token, and how many wait")
                .defer(|c| {
                    with_args::<StatusArgs>(c.after_help(help_text("status")))
                }),
            Sub::new("list")
                .about("List the locks in a store with their holders")
                .long_about(
                    "List the locks in a store with their holders.\n\n\
                     One line per lock: its name, its holder (or \"free\") and how many wait, \
                     separated by tabs; on a terminal, in columns under a header. With no locks, \
                     stdout stays empty and stderr says so (unless -q).",
                )
                .defer(|c| with_args::<ListArgs>(c.after_help(help_text("list")))),
            Sub::new("check")
                .about(
                    "Exit 0 only if the caller still holds its lock with its token (run it from COMMAND)",
                )
                .long_about(
                    "Exit 0 only if the caller still holds its lock with its token (run it from \
                     COMMAND).\n\n\
                     Reads ELECT_STORE, ELECT_LOCK, ELECT_KEY and ELECT_TOKEN, which elect run \
                     gives COMMAND. A cheap way to shrink the window before a significant step; \
                     never a substitute for checking the token where the work is done.",
                )
                .defer(|c| {
                    with_args::<CheckArgs>(c.after_help(help_text("check")))
                }),
            Sub::new("break")
                .about(
                    "Make the current holder let go: its command is stopped and the next waiter proceeds",
                )
                .long_about(
                    "Make the current holder let go: its command is stopped and the next waiter \
                     proceeds.\n\n\
                     Asks for confirmation on a terminal unless --yes; without a terminal \
                     (a script, a pipe), --yes is required.",
                )
                .defer(|c| {
                    with_args::<BreakArgs>(c.after_help(help_text("break")))
                }),
            Sub::new("checkpoint")
                .about("Read or commit the lock's checkpoint: the progress the next holder resumes from")
                .long_about(
                    "Read or commit the lock's checkpoint: the progress the next holder resumes \
                     from.\n\n\
                     Run it from COMMAND: it reads ELECT_STORE, ELECT_LOCK, ELECT_KEY and \
                     ELECT_TOKEN. `put` stores VALUE (or stdin) only while the caller still holds \
                     the lock with its token, checked and written in one atomic step in the store; \
                     at most 64 KiB of UTF-8 text. `get` prints the last one committed. The next \
                     holder also finds it in ELECT_CHECKPOINT when it is at most 4 KiB.",
                )
                .defer(|c| {
                    with_args::<CheckpointArgs>(
                        c.after_help(help_text("checkpoint")),
                    )
                }),
            Sub::new("history")
                .about("Show who held a lock, when, with which token, and how each tenure ended")
                .long_about(
                    "Show who held a lock, when, with which token, and how each tenure ended.\n\n\
                     One line per tenure, oldest first, from the history elect run keeps in the \
                     store (the last --history tenures, 100 unless told otherwise): runs that \
                     did the work, failed or were stopped. A run that found the work done or the \
                     lock busy keeps no record. Tab-separated; on a terminal, in columns under a \
                     header.",
                )
                .defer(|c| with_args::<HistoryArgs>(c.after_help(help_text("history")))),
        ])
    }

    fn augment_subcommands_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_subcommands(cmd)
    }

    fn has_subcommand(name: &str) -> bool {
        matches!(
            name,
            "run" | "status" | "list" | "check" | "break" | "checkpoint" | "history"
        )
    }
}

impl clap::FromArgMatches for Command {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Self::from_arg_matches_mut(&mut matches.clone())
    }

    fn from_arg_matches_mut(matches: &mut clap::ArgMatches) -> Result<Self, clap::Error> {
        use clap::error::ErrorKind;
        let Some((name, mut sub)) = matches.remove_subcommand() else {
            return Err(clap::Error::raw(
                ErrorKind::MissingSubcommand,
                "a command is required",
            ));
        };
        let sub = &mut sub;
        Ok(match name.as_str() {
            "run" => Command::Run(RunArgs::from_arg_matches_mut(sub)?),
            "status" => Command::Status(StatusArgs::from_arg_matches_mut(sub)?),
            "list" => Command::List(ListArgs::from_arg_matches_mut(sub)?),
            "check" => Command::Check(CheckArgs::from_arg_matches_mut(sub)?),
            "break" => Command::Break(BreakArgs::from_arg_matches_mut(sub)?),
            "checkpoint" => Command::Checkpoint(CheckpointArgs::from_arg_matches_mut(sub)?),
            "history" => Command::History(HistoryArgs::from_arg_matches_mut(sub)?),
            other => {
                return Err(clap::Error::raw(
                    ErrorKind::InvalidSubcommand,
                    format!("unknown command '{other}'"),
                ));
            }
        })
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

/// A subcommand with its arguments. A flattened struct's doc comment would
/// become the subcommand's about: the subcommand's own is kept.
fn with_args<A: Args>(cmd: clap::Command) -> clap::Command {
    let (about, long_about) = (cmd.get_about().cloned(), cmd.get_long_about().cloned());
    let mut cmd = A::augment_args(cmd).long_about(None);
    if let Some(about) = about {
        cmd = cmd.about(about);
    }
    if let Some(long_about) = long_about {
        cmd = cmd.long_about(long_about);
    }
    without_empty_env(cmd)
}

/// A variable that is set but empty counts as unset (a unit file's
/// `Environment=ELECT_GRACE=`): its flag forgets the variable.
pub fn without_empty_env(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|arg| match arg.get_env() {
        Some(name) if std::env::var_os(name).is_some_and(|v| v.is_empty()) => {
            arg.env(None::<&'static str>)
        }
        _ => arg,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `elect: TIME message`; usage and configuration errors without the time.
    Text,
    /// One JSON object per line: {"time", "level", "message"}, with "lock", "identity",
    /// "token", "shard", "exit_code" once known and an "event" for a holder's steps.
    Json,
}

/// Exit codes and environment, after `elect run --help`.
fn run_after_help() -> String {
    let mut text = crate::exit::help_text("run");
    text.push_str("\nEnvironment:\n");
    for (name, meaning) in environment() {
        text.push_str(&format!("  {name}\n      {meaning}\n"));
    }
    text
}

/// Where the lock lives, shared by every subcommand.
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// Where the lock lives: a store URL (the forms come from the stores).
    #[arg(
        long,
        env = "ELECT_STORE",
        value_name = "URL",
        hide_env_values = true,
        help = store_forms(),
        long_help = store_help()
    )]
    pub store: Option<String>,

    /// How long the store may take to answer, from connecting until elect is queued (or, for
    /// the other commands, until each look is answered), before giving up with exit code 69.
    #[arg(
        long,
        value_name = "DUR",
        default_value = "10s",
        value_parser = parse_connect_timeout,
        env = "ELECT_CONNECT_TIMEOUT",
        hide_env_values = true
    )]
    pub connect_timeout: Duration,

    #[arg(
        long,
        help = per_store("CA certificate (PEM) that signed the servers' certificates", |a| a.cacert),
        env = "ELECT_CACERT",
        value_name = "FILE",
        hide_env_values = true
    )]
    pub cacert: Option<PathBuf>,

    /// Client certificate (PEM) for servers that require one; needs --key.
    #[arg(long, env = "ELECT_CERT", value_name = "FILE", hide_env_values = true)]
    pub cert: Option<PathBuf>,

    /// The client certificate's private key (PEM).
    #[arg(
        long,
        env = "ELECT_KEY_FILE",
        value_name = "FILE",
        hide_env_values = true
    )]
    pub key: Option<PathBuf>,

    #[arg(
        long,
        help = per_store("The store's user", |a| a.user) + ". The password comes from \
            --password-file, the store URL or ELECT_PASSWORD, else the store's own variables \
            and files (see Environment)",
        env = "ELECT_USER",
        value_name = "NAME",
        hide_env_values = true
    )]
    pub user: Option<String>,

    /// File whose first line is the user's password.
    #[arg(
        long,
        env = "ELECT_PASSWORD_FILE",
        value_name = "FILE",
        hide_env_values = true
    )]
    pub password_file: Option<PathBuf>,
}

impl StoreArgs {
    /// What every store is offered; each takes what it can use.
    pub fn settings(&self) -> crate::store::Settings {
        crate::store::Settings {
            store: self.store.clone(),
            cacert: self.cacert.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
            user: self.user.clone(),
            password_file: self.password_file.clone(),
        }
        .inherit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn definitions_are_consistent() {
        Cli::command().debug_assert();
    }
}
