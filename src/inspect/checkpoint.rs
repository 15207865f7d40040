//! `elect checkpoint get|put`: read, or commit as the holder, the progress
//! a holder's command leaves for the next.

use std::io::Read;

use serde_json::json;

use crate::cli::{CheckpointAction, CheckpointArgs};
use crate::exit::{Code, Failure, NO, Outcome, YES};
use crate::log;
use crate::store::records;
use crate::store::{CHECKPOINT_MAX, Checkpoint, Put, shard_lock};

use super::open;

/// `elect checkpoint get|put`: the progress a holder commits for the next.
pub async fn checkpoint(mut args: CheckpointArgs) -> Outcome {
    // Everything that can be checked is, before the store is asked.
    let put = match args.action {
        CheckpointAction::Get => None,
        CheckpointAction::Put => match checkpoint_to_put(&args) {
            Ok(put) => Some(put),
            Err(failure) => return failure.into(),
        },
    };
    let key = put.as_ref().map(|(key, _)| key.as_str());
    let (location, store, mut reach) =
        match open(&args.store, Some(&args.lock), args.shard, key).await {
            Ok(o) => o,
            Err(failure) => return failure.into(),
        };
    if let Some(k) = args.shard {
        args.lock = shard_lock(&args.lock, k);
    }
    let Some((key, checkpoint)) = put else {
        return match reach
            .answered("the checkpoint", records::checkpoint(&*store, &args.lock))
            .await
        {
            Ok(found) => {
                if args.json {
                    println!(
                        "{}",
                        json!({
                            "lock": args.lock,
                            "store": location.to_string(),
                            "value": found.as_ref().map(|c| &c.value),
                            "token": found.as_ref().map(|c| c.token),
                            "at": found.as_ref().map(|c| &c.at),
                        })
                    );
                } else if let Some(found) = &found {
                    let end = if found.value.ends_with('\n') {
                        ""
                    } else {
                        "\n"
                    };
                    print!("{}{end}", found.value);
                }
                match found {
                    Some(_) => Outcome::Exit(YES),
                    None => {
                        log::verbose(format_args!("lock {} has no checkpoint", args.lock));
                        Outcome::Exit(NO)
                    }
                }
            }
            Err(e) => Failure::from(e).into(),
        };
    };
    let put = records::put_checkpoint(&*store, &args.lock, &key, &checkpoint);
    let answered = reach.answered("the checkpoint's write", put).await;
    if args.json
        && let Ok(put) = &answered
    {
        println!(
            "{}",
            json!({
                "lock": args.lock,
                "store": location.to_string(),
                "token": checkpoint.token,
                "bytes": checkpoint.value.len(),
                "stored": matches!(put, Put::Stored),
                "why": match put {
                    Put::Stored => None,
                    Put::Stale(why) => Some(why),
                },
            })
        );
    }
    match answered {
        Ok(Put::Stored) => {
            log::verbose(format_args!(
                "stored the checkpoint of lock {} with token {} ({} bytes)",
                args.lock,
                checkpoint.token,
                checkpoint.value.len()
            ));
            Outcome::Exit(YES)
        }
        Ok(Put::Stale(why)) => {
            log::error(format_args!(
                "checkpoint not stored: {why}; the stored one is unchanged"
            ));
            Outcome::Exit(Code::Lost.value())
        }
        Err(e) => Failure::from(e).into(),
    }
}

/// The key and the checkpoint that `put` is to store, checked.
fn checkpoint_to_put(args: &CheckpointArgs) -> Result<(String, Checkpoint), Failure> {
    let (Some(key), Some(token)) = (&args.holder_key, args.token) else {
        return Err(Failure::usage(
            "elect checkpoint put needs ELECT_KEY and ELECT_TOKEN (run it from the command that \
             elect run started), or --holder-key and --token",
        ));
    };
    let value = match &args.value {
        Some(value) => value.clone(),
        None => {
            let mut bytes = Vec::new();
            std::io::Read::take(std::io::stdin().lock(), CHECKPOINT_MAX as u64 + 2)
                .read_to_end(&mut bytes)
                .map_err(|e| {
                    Failure::usage(format!("cannot read the checkpoint from stdin: {e}"))
                })?;
            // What `echo` adds is not part of it.
            if bytes.ends_with(b"\n") {
                bytes.pop();
            }
            String::from_utf8(bytes)
                .map_err(|_| Failure::usage("the checkpoint is not UTF-8 text"))?
        }
    };
    if value.len() > CHECKPOINT_MAX {
        return Err(Failure::usage(format!(
            "the checkpoint is more than {} KiB; store a position to resume from, not the data",
            CHECKPOINT_MAX / 1024
        )));
    }
    if value.contains('\0') {
        return Err(Failure::usage(
            "the checkpoint contains a NUL byte, which no environment variable can hold",
        ));
    }
    Ok((key.clone(), Checkpoint::now(value, token)))
}
