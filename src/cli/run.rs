//! The arguments of `elect run`: the lock, how long to wait for it, the
//! lease, the command and what is told of its tenure.

use std::ffi::OsString;
use std::time::Duration;

use clap::Args;
use nix::sys::signal::Signal;

use super::StoreArgs;
use super::parse::{SignalParser, parse_bool, parse_duration, parse_ttl, parse_wait};

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
