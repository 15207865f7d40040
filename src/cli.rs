//! The command line: the one definition that `--help`, the shell completions
//! and the man pages are generated from.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use nix::sys::signal::Signal;

/// Environment variables elect reads, and those it sets for COMMAND.
pub const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "ELECT_STORE",
        "Read: the store URL when --store is not given. Set for COMMAND: the store, without credentials.",
    ),
    (
        "ETCDCTL_ENDPOINTS",
        "Read: etcd endpoints (HOST:PORT,...) when neither --store nor ELECT_STORE is set.",
    ),
    (
        "ELECT_TOKEN",
        "Set for COMMAND: the fencing token, a decimal number greater than every earlier holder's.",
    ),
    ("ELECT_LOCK", "Set for COMMAND: the lock name."),
    (
        "ELECT_KEY",
        "Set for COMMAND: the key that represents this holder in the store.",
    ),
    (
        "ELECT_LEASE_ID",
        "Set for COMMAND: the lease id, in hexadecimal.",
    ),
    (
        "ELECT_IDENTITY",
        "Set for COMMAND: the holder's identity (--identity, else the hostname).",
    ),
    (
        "ELECT_PASSWORD, ETCDCTL_USER, ETCDCTL_PASSWORD",
        "Removed from COMMAND's environment: they may carry secrets.",
    ),
];

#[derive(Debug, Parser)]
#[command(
    name = "elect",
    version,
    about = "Run a command on exactly one machine at a time, under a lease with a fencing token",
    long_about = "Run a command on exactly one machine at a time.\n\n\
        elect takes a lease on a coordination store, starts COMMAND with a fencing token in \
        ELECT_TOKEN, renews the lease in the background, and if the lease is lost it signals \
        and then kills COMMAND's whole process group before the store could hand the lock to \
        anyone else.",
    after_help = crate::exit::help_text(),
    propagate_version = true
)]
pub struct Cli {
    /// Print nothing of elect's own, not even why the lock was busy.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    /// Show the lifecycle on stderr: connected, queued, acquired, renewals, released.
    #[arg(short, long, global = true)]
    pub verbose: bool,

    /// Format of elect's own lines on stderr.
    #[arg(long, global = true, value_name = "FORMAT", default_value = "text")]
    pub log_format: LogFormat,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Take the lock, run COMMAND while holding it, release it when COMMAND ends.
    #[command(after_help = run_after_help())]
    Run(RunArgs),
    /// Show who holds a lock, since when, with which token, and how many wait.
    ///
    /// Exits 0 when the lock is held, 1 when it is free.
    Status(StatusArgs),
    /// List the locks in a store with their holders.
    List(ListArgs),
    /// Exit 0 only if the caller still holds its lock with its token (run it from COMMAND).
    ///
    /// Reads ELECT_STORE, ELECT_LOCK, ELECT_KEY and ELECT_TOKEN, which elect run gives COMMAND.
    /// A cheap way to shrink the window before a significant step; never a substitute for
    /// checking the token where the work is done. Exits 1, saying why, otherwise.
    Check(CheckArgs),
    /// End the current holder's lease, so its command is stopped and the next waiter proceeds.
    ///
    /// Exits 0 when a lease was ended, 1 when the lock was free or the holder changed.
    Break(BreakArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `elect: message`, with a timestamp for -v lines.
    Text,
    /// One JSON object per line: {"time", "level", "message"}.
    Json,
}

/// Where the lock lives, shared by every subcommand.
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// Where the lock lives: etcd://HOST:PORT[,HOST:PORT...], or file:DIR for locks on this
    /// host only ("file" alone: /var/lib/elect for root, else ~/.local/state/elect).
    ///
    /// Without it, ELECT_STORE is used, then ETCDCTL_ENDPOINTS, then etcd://127.0.0.1:2379.
    #[arg(long, env = "ELECT_STORE", value_name = "URL", hide_env_values = true)]
    pub store: Option<String>,

    /// How long to keep trying to reach the store before giving up with exit code 69.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = parse_duration)]
    pub connect_timeout: Duration,

    /// CA certificate (PEM) that signed the etcd servers' certificates [else: the system's].
    #[arg(long, env = "ELECT_CACERT", value_name = "FILE")]
    pub cacert: Option<PathBuf>,

    /// Client certificate (PEM) for etcd servers that require one; needs --key.
    #[arg(long, env = "ELECT_CERT", value_name = "FILE")]
    pub cert: Option<PathBuf>,

    /// The client certificate's private key (PEM).
    #[arg(long, env = "ELECT_KEY_FILE", value_name = "FILE")]
    pub key: Option<PathBuf>,

    /// etcd user. The password comes from --password-file, ELECT_PASSWORD, or a prompt.
    #[arg(long, env = "ELECT_USER", value_name = "NAME")]
    pub user: Option<String>,

    /// File whose first line is the etcd user's password.
    #[arg(long, env = "ELECT_PASSWORD_FILE", value_name = "FILE")]
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
    }
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Name of the lock.
    #[arg(short, long, value_name = "NAME")]
    pub lock: String,

    #[command(flatten)]
    pub store: StoreArgs,

    /// Print one JSON object (the format is stable; see the README).
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
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Name of the lock.
    #[arg(short, long, env = "ELECT_LOCK", value_name = "NAME")]
    pub lock: String,

    /// The holder's key in the store.
    #[arg(long, env = "ELECT_KEY", value_name = "KEY")]
    pub holder_key: String,

    /// The fencing token the holder was given.
    #[arg(long, env = "ELECT_TOKEN", value_name = "T")]
    pub token: u64,

    #[command(flatten)]
    pub store: StoreArgs,
}

#[derive(Debug, Args)]
pub struct BreakArgs {
    /// Name of the lock.
    #[arg(short, long, value_name = "NAME")]
    pub lock: String,

    /// Only if the holder's token is T: refuse when the holder changed meanwhile.
    #[arg(long, value_name = "T")]
    pub token: Option<u64>,

    /// Do not ask for confirmation on a terminal.
    #[arg(short, long)]
    pub yes: bool,

    /// End the lease at once instead of asking the holder to stop its
    /// command first: the command may run on for up to its grace while the
    /// next holder starts. (file: always waits for the holder.)
    #[arg(long)]
    pub force: bool,

    #[command(flatten)]
    pub store: StoreArgs,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Name of the lock. Segments of letters, digits, '.', '_' and '-', separated by '/'.
    #[arg(short, long, value_name = "NAME")]
    pub lock: String,

    #[command(flatten)]
    pub store: StoreArgs,

    /// Lease time-to-live. A lost holder's command is dead before this runs out.
    #[arg(long, value_name = "DUR", default_value = "15s", value_parser = parse_duration)]
    pub ttl: Duration,

    /// How long to wait for the lock: a duration, or "forever".
    #[arg(short, long, value_name = "DUR|forever", value_parser = parse_wait)]
    pub wait: Option<Wait>,

    /// Do not wait: exit at once if the lock is held (same as --wait 0).
    #[arg(short = 'n', long, conflicts_with = "wait")]
    pub no_wait: bool,

    /// Time between the first signal and SIGKILL when the lease is lost [default: TTL/3].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub grace: Option<Duration>,

    /// First signal sent to COMMAND's process group when the lease is lost.
    #[arg(long, value_name = "SIG", default_value = "TERM", value_parser = parse_signal)]
    pub signal: Signal,

    /// Exit code when the lock was not acquired within --wait.
    #[arg(long, value_name = "N", default_value_t = crate::exit::Code::Busy.value())]
    pub busy_exit_code: u8,

    /// Exit code when the lease was lost and COMMAND was stopped.
    #[arg(long, value_name = "N", default_value_t = crate::exit::Code::Lost.value())]
    pub lost_exit_code: u8,

    /// After losing the lease, wait for the lock again and run COMMAND anew with a new token;
    /// "always": also after COMMAND fails. Backs off 1s, 2s, ... up to 60s between turns.
    #[arg(long, value_name = "WHEN", num_args = 0..=1, default_missing_value = "lost", require_equals = true)]
    pub rejoin: Option<Rejoin>,

    /// Reap orphaned processes, as elect does when it is PID 1 (a container's entrypoint).
    #[arg(long)]
    pub subreaper: bool,

    /// Who holds the lock, as recorded in the store and in ELECT_IDENTITY [default: hostname].
    #[arg(long, value_name = "TEXT")]
    pub identity: Option<String>,

    /// The command to run and its arguments, executed directly (no shell).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// Exit codes and environment, after `elect run --help`.
fn run_after_help() -> String {
    let mut text = crate::exit::help_text();
    text.push_str("\nEnvironment:\n");
    for (name, meaning) in ENVIRONMENT {
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
        return Err(format!("give a unit, e.g. {text}s or {text}ms"));
    }
    let duration = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if duration > Duration::from_secs(365 * 24 * 3600) {
        return Err("a duration longer than a year is surely a typo".into());
    }
    Ok(duration)
}

fn parse_wait(text: &str) -> Result<Wait, String> {
    match text.trim() {
        "forever" | "inf" | "infinite" => Ok(Wait::Forever),
        "0" => Ok(Wait::For(Duration::ZERO)),
        other => parse_duration(other).map(Wait::For),
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
    name.parse::<Signal>()
        .map_err(|_| format!("unknown signal '{text}'"))
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
