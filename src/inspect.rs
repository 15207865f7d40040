//! `elect status`, `list`, `check`, `break`, `checkpoint` and `history`: what
//! operators and scripts ask of a lock from outside, and what a holder's
//! command commits for the next.

mod breaking;
mod check;
mod checkpoint;
mod history;
mod list;
mod shown;
mod status;

use std::time::Duration;

use crate::cli::StoreArgs;
use crate::exit::Failure;
use crate::reach::Reach;
use crate::store::{Location, Store};

/// How long a keep-alive ping may go unanswered: these commands are short.
const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// Choose, check and connect the store; `lock`, if given, is checked for it
/// (the lock's own name, and that of its shard `shard` if given), and so is
/// a holder's `key`. The store's answers, connecting and each look after,
/// are due within `--connect-timeout` ([`Reach`]).
async fn open(
    args: &StoreArgs,
    lock: Option<&str>,
    shard: Option<u32>,
    key: Option<&str>,
) -> Result<(Location, Box<dyn Store>, Reach), Failure> {
    let location = Location::from_settings(&args.settings())?;
    // The lock first: a key is judged against the lock it names.
    if let Some(lock) = lock {
        location.lock_name(lock).map_err(Failure::usage)?;
        if let Some(k) = shard {
            location
                .check_shard_names(lock, k.saturating_add(1))
                .map_err(Failure::usage)?;
        }
    }
    if let Some(key) = key {
        location.check_holder_key(key).map_err(Failure::usage)?;
    }
    let mut reach = Reach::new(&location, args.connect_timeout);
    let open = location.open(PING_TIMEOUT, args.connect_timeout);
    let store = reach.bounded("a connection", open).await?;
    Ok((location, store, reach))
}

/// Rows as tab-separated lines, or on a terminal in columns under `header`.
fn columns<const N: usize>(header: &[String; N], rows: &[[String; N]], terminal: bool) -> String {
    if !terminal {
        return rows.iter().map(|r| format!("{}\n", r.join("\t"))).collect();
    }
    let width = |i: usize| {
        rows.iter()
            .chain([header])
            .map(|r| r[i].chars().count())
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..N).map(width).collect();
    let line = |r: &[String; N]| {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        format!("{}\n", cells.join("  ").trim_end())
    };
    std::iter::once(header).chain(rows).map(line).collect()
}

/// ", N ago" for an RFC 3339 time, if it can be read.
fn age(at: &str) -> String {
    humantime::parse_rfc3339(at)
        .ok()
        .and_then(|at| std::time::SystemTime::now().duration_since(at).ok())
        .map_or(String::new(), |age| {
            format!(
                ", {} ago",
                crate::clock::show(Duration::from_secs(age.as_secs()))
            )
        })
}

pub use breaking::break_lock;
pub use check::check;
pub use checkpoint::checkpoint;
pub use history::history;
pub use list::list;
pub use status::status;
