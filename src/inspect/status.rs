//! `elect status`: who holds a lock, or its shards, and since when.

use serde_json::{Value, json};

use crate::cli::StatusArgs;
use crate::exit::{Failure, NO, Outcome, YES};
use crate::history;
use crate::store::records;
use crate::store::{Checkpoint, LockStatus, shard_lock};

use super::shown::{human, to_json};
use super::{age, open};

pub async fn status(args: StatusArgs) -> Outcome {
    let (location, store, mut reach) = match open(&args.store, Some(&args.lock), None, None).await {
        Ok(o) => o,
        Err(failure) => return failure.into(),
    };
    let shards = match reach
        .answered(
            "the lock's status",
            records::shards(&*store, &args.lock, None),
        )
        .await
    {
        Ok(shards) => shards,
        Err(e) => return Failure::from(e).into(),
    };
    let locks: Vec<String> = match shards {
        Some(n) => (0..n).map(|k| shard_lock(&args.lock, k)).collect(),
        None => vec![args.lock.clone()],
    };
    let mut shown = Vec::with_capacity(locks.len());
    for lock in &locks {
        let all = async {
            let (status, checkpoint) =
                tokio::join!(store.status(lock), records::checkpoint(&*store, lock));
            let status = status?;
            // The holder's own tenure is running: the past is the others'.
            let holder = status.holder.as_ref().map(|h| h.token);
            let latest = history::last_run(&*store, lock, holder).await?;
            Ok((status, checkpoint?, latest))
        };
        match reach.answered("the lock's status", all).await {
            Ok(all) => shown.push(all),
            Err(e) => return Failure::from(e).into(),
        }
    }
    let held = shown.iter().filter(|(s, _, _)| s.holder.is_some()).count();
    // A lock never seen (no holder, waiter, history or checkpoint) is most
    // often a name mistyped: the closest of the locks there, if one is close.
    let meant = match (shards, &shown[..]) {
        (None, [(status, None, latest)])
            if !args.json && status.holder.is_none() && status.waiting == 0 && latest.is_none() =>
        {
            let others = reach.bounded("the other locks", store.list("")).await;
            others.ok().and_then(|locks| {
                let names = locks.iter().map(|s| s.lock.as_str());
                crate::usage::closest(&args.lock, names).map(String::from)
            })
        }
        _ => None,
    };
    let status_json =
        |status: &LockStatus, checkpoint: &Option<Checkpoint>, latest: &Option<history::Tenure>| {
            let mut one = to_json(status, &location);
            one["checkpoint"] = match checkpoint {
                Some(c) => json!({"token": c.token, "at": c.at, "bytes": c.value.len()}),
                None => Value::Null,
            };
            one["last"] = json!(latest);
            one
        };
    match (shards, args.json) {
        (None, true) => println!("{}", status_json(&shown[0].0, &shown[0].1, &shown[0].2)),
        (Some(n), true) => {
            let each: Vec<Value> = shown
                .iter()
                .enumerate()
                .map(|(k, (status, checkpoint, latest))| {
                    let mut one = status_json(status, checkpoint, latest);
                    one["shard"] = json!(k);
                    one
                })
                .collect();
            println!(
                "{}",
                json!({
                    "lock": args.lock,
                    "store": location.to_string(),
                    "shards": n,
                    "held": held > 0,
                    "held_shards": held,
                    "shard": each,
                })
            );
        }
        (shards, false) => {
            if let Some(n) = shards {
                println!(
                    "lock {} at {}: {n} shards, {held} held",
                    args.lock,
                    location.shown()
                );
            }
            for (status, checkpoint, latest) in &shown {
                print!("{}", human(status, &location, meant.as_deref()));
                if let Some(t) = latest {
                    println!(
                        "  last run: {}, {} to {}: {}",
                        t.who(),
                        t.started.as_deref().unwrap_or(&t.queued),
                        t.ended.as_deref().unwrap_or("?"),
                        t.how()
                    );
                }
                if let Some(c) = checkpoint {
                    println!(
                        "  checkpoint: token {}, at {}{} ({} bytes)",
                        c.token,
                        c.at,
                        age(&c.at),
                        c.value.len()
                    );
                }
            }
        }
    }
    Outcome::Exit(if held > 0 { YES } else { NO })
}
