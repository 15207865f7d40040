//! The command line: the one definition that `--help`, the shell completions
//! and the man pages are generated from.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::store::Token;
use clap::{Args, Parser, Subcommand};
use nix::sys::signal::Signal;

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
    format!(
        "{}\n\nWithout it, ELECT_STORE is used, then ETCDCTL_ENDPOINTS, then {}. \
         etcd://USER:PASSWORD@HOST:PORT works, but every user of the host can read a command line \
         in ps: prefer --password-file.",
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
                     did the work, failed, were stopped, found it done before, or found the lock \
                     busy. Tab-separated; on a terminal, in columns under a header.",
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

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Name of the lock.
    #[arg(short, long, value_name = "NAME")]
    pub lock: String,

    #[command(flatten)]
    pub store: StoreArgs,

    /// Print one JSON object (the format is stable; see docs/reference.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Name of the lock.
    #[arg(short, long, value_name = "NAME")]
    pub lock: String,

    /// For a lock run with --shards: that shard's history only [default: every shard's].
    #[arg(long, value_name = "K")]
    pub shard: Option<u32>,

    /// Only tenures that began less than DUR ago (24h, 7d).
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub since: Option<Duration>,

    #[command(flatten)]
    pub store: StoreArgs,

    /// Print one JSON object per tenure, one per line (the format is stable; see docs/reference.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only locks whose names start with this.
    #[arg(long, value_name = "P", default_value = "")]
    pub prefix: String,

    #[command(flatten)]
    pub store: StoreArgs,

    /// Print a JSON array of the objects `elect status --json` prints.
    #[arg(long, conflicts_with = "names_only")]
    pub json: bool,

    /// Print only the names, one a line, and nothing on stderr: for shell completion.
    #[arg(long, hide = true)]
    pub names_only: bool,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Name of the lock.
    #[arg(
        short,
        long,
        env = "ELECT_LOCK",
        value_name = "NAME",
        hide_env_values = true
    )]
    pub lock: String,

    /// For a lock run with --shards: which shard (as ELECT_SHARD, which elect run sets).
    #[arg(long, env = "ELECT_SHARD", value_name = "K", hide_env_values = true)]
    pub shard: Option<u32>,

    /// The holder's key in the store.
    #[arg(long, env = "ELECT_KEY", value_name = "KEY", hide_env_values = true)]
    pub holder_key: String,

    /// The fencing token the holder was given.
    #[arg(long, env = "ELECT_TOKEN", value_name = "T", hide_env_values = true)]
    pub token: Token,

    #[command(flatten)]
    pub store: StoreArgs,

    /// Print one JSON object with the answer on stdout (see docs/reference.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BreakArgs {
    /// Name of the lock.
    #[arg(short, long, value_name = "NAME")]
    pub lock: String,

    /// For a lock run with --shards: the shard to break.
    #[arg(long, value_name = "K")]
    pub shard: Option<u32>,

    /// Only if the holder's token is T: refuse when the holder changed meanwhile.
    #[arg(long, value_name = "T")]
    pub token: Option<Token>,

    /// Do not ask for confirmation; required without a terminal to ask on.
    #[arg(short, long)]
    pub yes: bool,

    /// End the holder's tenure at once instead of asking it to stop its
    /// command first: the command may run on beside the next holder's until
    /// its elect notices, then at most 100 ms more.
    #[arg(long)]
    pub force: bool,

    #[command(flatten)]
    pub store: StoreArgs,

    /// Print one JSON object with the outcome on stdout (see docs/reference.md).
    #[arg(long)]
    pub json: bool,
}

/// What `elect checkpoint` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckpointAction {
    /// Print the last checkpoint committed.
    Get,
    /// Commit VALUE, or stdin, as the checkpoint.
    Put,
}

#[derive(Debug, Args)]
pub struct CheckpointArgs {
    /// get or put.
    #[arg(value_enum, value_name = "get|put")]
    pub action: CheckpointAction,

    /// The checkpoint to commit (put); without it, stdin is read to its end.
    #[arg(value_name = "VALUE")]
    pub value: Option<String>,

    /// Name of the lock.
    #[arg(
        short,
        long,
        env = "ELECT_LOCK",
        value_name = "NAME",
        hide_env_values = true
    )]
    pub lock: String,

    /// For a lock run with --shards: which shard (as ELECT_SHARD, which elect run sets).
    #[arg(long, env = "ELECT_SHARD", value_name = "K", hide_env_values = true)]
    pub shard: Option<u32>,

    /// The holder's key in the store (put).
    #[arg(long, env = "ELECT_KEY", value_name = "KEY", hide_env_values = true)]
    pub holder_key: Option<String>,

    /// The fencing token the holder was given (put).
    #[arg(long, env = "ELECT_TOKEN", value_name = "T", hide_env_values = true)]
    pub token: Option<Token>,

    #[command(flatten)]
    pub store: StoreArgs,

    /// get: print one JSON object, {value, token, at}.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Name of the lock. Segments of ASCII letters, digits, '.', '_' and '-', separated by '/'.
    #[arg(short, long, value_name = "NAME")]
    pub lock: String,

    /// Split the lock into N shards, each with one owner: take a free one, or wait in every
    /// shard's queue and keep the first won. COMMAND gets ELECT_SHARD (0..N-1) and
    /// ELECT_SHARDS. N is recorded on first use; another N is refused (exit 78).
    #[arg(long, value_name = "N")]
    pub shards: Option<u32>,

    /// With --shards: take shard K when it is free [default: the shard this --identity held
    /// last].
    #[arg(
        long,
        value_name = "K",
        requires = "shards",
        env = "ELECT_PREFER_SHARD",
        hide_env_values = true
    )]
    pub prefer_shard: Option<u32>,

    #[command(flatten)]
    pub store: StoreArgs,

    /// Lease time-to-live, 1s to 24h. A lost holder's command is dead before this runs out.
    #[arg(
        long,
        value_name = "DUR",
        default_value = "15s",
        value_parser = parse_ttl,
        env = "ELECT_TTL",
        hide_env_values = true
    )]
    pub ttl: Duration,

    /// How long to wait for the lock: a duration, 0, or "forever" [default: forever].
    #[arg(
        short,
        long,
        value_name = "DUR|forever",
        value_parser = parse_wait,
        env = "ELECT_WAIT",
        hide_env_values = true
    )]
    pub wait: Option<Wait>,

    /// Do not wait: exit at once if the lock is held (same as --wait 0; wins over ELECT_WAIT).
    #[arg(short = 'n', long)]
    pub no_wait: bool,

    /// Time between the first signal and SIGKILL when the lease is lost [default: TTL/3].
    #[arg(
        long,
        value_name = "DUR",
        value_parser = parse_duration,
        env = "ELECT_GRACE",
        hide_env_values = true
    )]
    pub grace: Option<Duration>,

    /// First signal sent to COMMAND's process group when the lease is lost: a name (TERM,
    /// SIGTERM, term) or a number.
    #[arg(
        long,
        value_name = "SIG",
        default_value = "TERM",
        value_parser = SignalParser,
        hide_possible_values = true,
        env = "ELECT_SIGNAL",
        hide_env_values = true
    )]
    pub signal: Signal,

    /// Exit code when the lock was not acquired within --wait.
    #[arg(
        long,
        value_name = "N",
        default_value_t = crate::exit::Code::Busy.value(),
        env = "ELECT_BUSY_EXIT_CODE",
        hide_env_values = true
    )]
    pub busy_exit_code: u8,

    /// Exit code when the lease was lost and COMMAND was stopped.
    #[arg(
        long,
        value_name = "N",
        default_value_t = crate::exit::Code::Lost.value(),
        env = "ELECT_LOST_EXIT_CODE",
        hide_env_values = true
    )]
    pub lost_exit_code: u8,

    /// Run COMMAND only if no run of this lock succeeded within DUR (20h, 1d): else exit
    /// --done-exit-code at once, naming who ran it. The window is judged by this host's clock
    /// against the start time the successful run recorded.
    #[arg(
        long,
        value_name = "DUR",
        value_parser = parse_duration,
        env = "ELECT_ONCE_PER",
        hide_env_values = true,
        conflicts_with = "slot"
    )]
    pub once_per: Option<Duration>,

    /// Run COMMAND only if no run of this lock succeeded for the period KEY ("$(date +%F)", a
    /// billing month): a slot done is never run again. Letters, digits and . _ - :
    #[arg(long, value_name = "KEY", env = "ELECT_SLOT", hide_env_values = true)]
    pub slot: Option<String>,

    /// Exit code when --once-per or --slot found the work done already.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        env = "ELECT_DONE_EXIT_CODE",
        hide_env_values = true
    )]
    pub done_exit_code: u8,

    /// Write node_exporter's textfile metrics of this run to PATH (atomically) when COMMAND
    /// starts and when elect ends: held, token, start, end, duration, exit code, outcome.
    #[arg(
        long,
        value_name = "PATH",
        value_hint = clap::ValueHint::FilePath,
        env = "ELECT_METRICS_FILE",
        hide_env_values = true
    )]
    pub metrics_file: Option<std::path::PathBuf>,

    /// Serve /readyz (200 while this elect holds the lock), /livez and /metrics (Prometheus)
    /// over HTTP on HOST:PORT. A bare :PORT or PORT listens on 127.0.0.1 only; any other
    /// address (0.0.0.0 for every interface, a pod's) must be named explicitly.
    #[arg(
        long,
        value_name = "HOST:PORT",
        value_parser = crate::usage::listen_address,
        env = "ELECT_LISTEN",
        hide_env_values = true
    )]
    pub listen: Option<std::net::SocketAddr>,

    /// Run CMD with sh -c once the lock is released, with ELECT_OUTCOME, ELECT_EXIT_CODE,
    /// ELECT_TOKEN, ELECT_DURATION_MS and ELECT_LOCK set; killed after 10s; never changes
    /// elect's exit code.
    #[arg(long, value_name = "CMD", env = "ELECT_ON_END", hide_env_values = true)]
    pub on_end: Option<String>,

    /// How many tenures the lock's history keeps in the store (elect history); 0 records none.
    #[arg(
        long,
        value_name = "N",
        default_value_t = crate::history::KEEP,
        env = "ELECT_HISTORY",
        hide_env_values = true
    )]
    pub history: usize,

    /// After losing the lease, wait for the lock again and run COMMAND anew with a new token;
    /// "always": also after COMMAND fails. Backs off 1s, 2s, ... up to 60s between turns.
    /// The value needs '=': --rejoin=always.
    #[arg(
        long,
        value_name = "WHEN",
        num_args = 0..=1,
        default_missing_value = "lost",
        require_equals = true,
        env = "ELECT_REJOIN",
        hide_env_values = true
    )]
    pub rejoin: Option<Rejoin>,

    /// Reap orphaned processes, as elect does when it is PID 1 (a container's entrypoint).
    ///
    /// ELECT_SUBREAPER takes 1, true, yes, on or 0, false, no, off.
    #[arg(long, env = "ELECT_SUBREAPER", hide_env_values = true, value_parser = parse_bool)]
    pub subreaper: bool,

    /// Who holds the lock, as recorded in the store and in ELECT_IDENTITY [default: hostname].
    #[arg(
        long,
        value_name = "TEXT",
        env = "ELECT_IDENTITY",
        hide_env_values = true
    )]
    pub identity: Option<String>,

    /// The command to run and its arguments, after --, executed directly (no shell).
    #[arg(
        last = true,
        required = true,
        value_name = "COMMAND",
        value_hint = clap::ValueHint::CommandWithArguments
    )]
    pub command: Vec<OsString>,
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

/// When `--rejoin` goes back to the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Rejoin {
    /// After the lease was lost.
    Lost,
    /// Also after COMMAND exited non-zero or was killed by a signal.
    Always,
}

/// How long to wait for the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    Forever,
    For(Duration),
}

impl RunArgs {
    pub fn wait(&self) -> Wait {
        match (self.no_wait, self.wait) {
            (true, _) => Wait::For(Duration::ZERO),
            (false, Some(w)) => w,
            (false, None) => Wait::Forever,
        }
    }
}

/// Durations as humans write them: `1500ms`, `15s`, `2m`, `1h 30m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.starts_with('-') {
        return Err("a duration cannot be negative".into());
    }
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        // The reading a flag takes: seconds for small numbers (a --ttl in
        // milliseconds would be under its 1 s minimum), else milliseconds.
        return Err(match text.parse::<u64>() {
            Ok(n) if n < 100 => format!("give a unit, e.g. {text}s"),
            _ => format!("give a unit, e.g. {text}ms or {text}s"),
        });
    }
    let duration = humantime::parse_duration(text).map_err(|e| match e {
        humantime::DurationError::NumberOverflow => "a duration too long to count".to_string(),
        _ => "not a duration; write a number and a unit: 1500ms, 15s, 2m, 1h 30m".to_string(),
    })?;
    if duration > Duration::from_secs(365 * 24 * 3600) {
        return Err("a duration longer than a year is surely a typo".into());
    }
    Ok(duration)
}

/// The bound on reaching a store: 1ms at least. Less (0s, 1ns) is no
/// bound a store could meet, on any store: a usage error, not a store
/// that seems unavailable.
fn parse_connect_timeout(text: &str) -> Result<Duration, String> {
    let bound = parse_duration(text)?;
    if bound < Duration::from_millis(1) {
        return Err("too short; the shortest --connect-timeout is 1ms".into());
    }
    Ok(bound)
}

/// A lease's time-to-live: 1s to 24h.
fn parse_ttl(text: &str) -> Result<Duration, String> {
    let ttl = parse_duration(text)?;
    let (min, max) = (Duration::from_secs(1), Duration::from_secs(24 * 3600));
    if ttl < min {
        return Err("too short; the shortest TTL is 1s".into());
    }
    if ttl > max {
        return Err("too long; the longest TTL is 24h".into());
    }
    Ok(ttl)
}

fn parse_wait(text: &str) -> Result<Wait, String> {
    match text.trim() {
        "forever" | "inf" | "infinite" => Ok(Wait::Forever),
        "0" => Ok(Wait::For(Duration::ZERO)),
        "never" | "no" | "none" => Err(
            "to not wait at all, write 0 or use -n; else forever, or a duration: 30s, 5m".into(),
        ),
        other => parse_duration(other).map(Wait::For).map_err(|e| {
            if e.starts_with("not a duration") {
                "not a duration; write forever, 0 (do not wait), or a number and a unit: 30s, 5m, 1h 30m".into()
            } else {
                e
            }
        }),
    }
}

/// Yes or no, as environment variables spell it.
pub fn parse_bool(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "y" | "on" => Ok(true),
        "0" | "false" | "no" | "n" | "off" | "" => Ok(false),
        _ => Err(format!("not a yes or no; write {BOOLEANS}")),
    }
}

/// Signal names offered to shell completion; any other name or number works too.
pub const SIGNAL_NAMES: &[&str] = &["TERM", "INT", "HUP", "QUIT", "USR1", "USR2", "ALRM", "KILL"];

/// [`parse_signal`], with the usual names as possible values for completion.
#[derive(Clone, Copy, Debug)]
pub struct SignalParser;

impl clap::builder::TypedValueParser for SignalParser {
    type Value = Signal;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Signal, clap::Error> {
        let parse: fn(&str) -> Result<Signal, String> = parse_signal;
        parse.parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            SIGNAL_NAMES
                .iter()
                .map(|n| clap::builder::PossibleValue::new(*n)),
        ))
    }
}

/// A signal by name (`TERM`, `SIGTERM`, `term`) or number (`15`).
pub fn parse_signal(text: &str) -> Result<Signal, String> {
    let text = text.trim();
    if let Ok(n) = text.parse::<i32>() {
        return Signal::try_from(n).map_err(|_| format!("no signal numbered {n}"));
    }
    let upper = text.to_ascii_uppercase();
    let name = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    name.parse::<Signal>().map_err(|_| {
        format!(
            "no signal of that name; write a name such as {} or a number",
            SIGNAL_NAMES.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn definitions_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("15").unwrap_err().contains("unit"));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("9999999999h").is_err());
        assert_eq!(parse_wait("forever"), Ok(Wait::Forever));
        assert_eq!(parse_wait("0"), Ok(Wait::For(Duration::ZERO)));
        assert!(parse_wait("never").unwrap_err().contains("-n"));
        assert!(parse_wait("soon").unwrap_err().contains("forever"));
    }

    #[test]
    fn booleans() {
        for yes in ["1", "true", "TRUE", "yes", "on", "y"] {
            assert_eq!(parse_bool(yes), Ok(true), "{yes}");
        }
        for no in ["0", "false", "No", "off", "n", ""] {
            assert_eq!(parse_bool(no), Ok(false), "{no}");
        }
        assert!(parse_bool("maybe").unwrap_err().contains("true"));
    }

    #[test]
    fn signals() {
        assert_eq!(parse_signal("TERM"), Ok(Signal::SIGTERM));
        assert_eq!(parse_signal("sigint"), Ok(Signal::SIGINT));
        assert_eq!(parse_signal("9"), Ok(Signal::SIGKILL));
        assert!(parse_signal("NOPE").is_err());
        assert!(parse_signal("99").is_err());
    }
}
