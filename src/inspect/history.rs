//! `elect history`: the tenures recorded beside a lock, as a table or JSON.

use std::io::IsTerminal;

use serde_json::json;

use crate::cli::HistoryArgs;
use crate::exit::{Failure, NO, Outcome, YES};
use crate::history::{self, Tenure};
use crate::log;
use crate::store::records;
use crate::store::shard_lock;

use super::{columns, open};

pub async fn history(args: HistoryArgs) -> Outcome {
    let (_, store, mut reach) = match open(&args.store, Some(&args.lock), args.shard, None).await {
        Ok(o) => o,
        Err(failure) => return failure.into(),
    };
    let locks: Vec<String> = match args.shard {
        Some(k) => vec![shard_lock(&args.lock, k)],
        None => match reach
            .answered(
                "the lock's shards",
                records::shards(&*store, &args.lock, None),
            )
            .await
        {
            Ok(Some(n)) => (0..n).map(|k| shard_lock(&args.lock, k)).collect(),
            Ok(None) => vec![args.lock.clone()],
            Err(e) => return Failure::from(e).into(),
        },
    };
    let mut all = Vec::new();
    for lock in &locks {
        let both = async {
            let (status, past) = tokio::join!(store.status(lock), history::read(&*store, lock));
            Ok(history::as_of(past?, status?.holder.map(|h| h.token)))
        };
        match reach.answered("the lock's history", both).await {
            Ok(entries) => all.extend(entries),
            Err(e) => return Failure::from(e).into(),
        }
    }
    if all.is_empty() {
        log::notice(format_args!("lock {} has no history", args.lock));
        return Outcome::Exit(NO);
    }
    if let Some(since) = args.since {
        let from = std::time::SystemTime::now()
            .checked_sub(since)
            .unwrap_or(std::time::UNIX_EPOCH);
        all.retain(|t| t.began().is_some_and(|b| b >= from));
    }
    all.sort_by_key(|t| t.began());
    if args.json {
        for t in &all {
            println!("{}", json!(t));
        }
    } else {
        print!("{}", history_table(&all, std::io::stdout().is_terminal()));
    }
    Outcome::Exit(YES)
}

/// `elect history`'s lines: tab-separated, or on a terminal in columns
/// under a header.
fn history_table(entries: &[Tenure], terminal: bool) -> String {
    let header = [
        "STARTED", "ENDED", "SHARD", "TOKEN", "IDENTITY", "HOST", "PID", "OUTCOME",
    ]
    .map(String::from);
    let rows: Vec<[String; 8]> = entries
        .iter()
        .map(|t| {
            [
                t.started.clone().unwrap_or_else(|| t.queued.clone()),
                t.ended.clone().unwrap_or_else(|| "-".into()),
                t.shard.map_or_else(|| "-".into(), |k| k.to_string()),
                t.token.map_or_else(|| "-".into(), |k| k.to_string()),
                t.identity.clone(),
                t.host.clone(),
                t.pid.to_string(),
                t.how(),
            ]
        })
        .collect();
    columns(&header, &rows, terminal)
}
