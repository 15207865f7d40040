//! The arguments of the subcommands that look at a lock or act on it
//! without holding it: `status`, `history`, `list`, `check`, `break`,
//! `checkpoint`.

use std::time::Duration;

use clap::Args;

use super::StoreArgs;
use super::parse::parse_duration;
use crate::store::Token;

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
