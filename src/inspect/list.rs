//! `elect list`: every lock under the store's prefix, with its holder
//! and how its last tenure ended.

use std::io::IsTerminal;

use serde_json::{Value, json};

use crate::cli::ListArgs;
use crate::exit::{Failure, Outcome, YES};
use crate::history::{self, Tenure};
use crate::log;
use crate::store::LockStatus;

use super::shown::to_json;
use super::{columns, open};

pub async fn list(args: ListArgs) -> Outcome {
    let (location, store, mut reach) = match open(&args.store, None, None, None).await {
        Ok(o) => o,
        Err(failure) => return failure.into(),
    };
    // The locks held or waited for, and the free ones that have a history:
    // the inventory of the jobs run there, each with its last run.
    let inventory = async {
        let (mut locks, recorded) =
            tokio::try_join!(store.list(&args.prefix), store.recorded(&args.prefix))?;
        for lock in recorded {
            if !locks.iter().any(|s| s.lock == lock) {
                locks.push(store.status(&lock).await?);
            }
        }
        locks.sort_by(|a, b| a.lock.cmp(&b.lock));
        let mut last = Vec::with_capacity(locks.len());
        for status in locks.iter().filter(|_| !args.names_only) {
            let holder = status.holder.as_ref().map(|h| h.token);
            last.push(history::last_run(&*store, &status.lock, holder).await?);
        }
        Ok::<_, crate::store::StoreError>((locks, last))
    };
    match reach.answered("the list of locks", inventory).await {
        Ok((locks, last)) => {
            if args.names_only {
                for status in &locks {
                    println!("{}", status.lock);
                }
            } else if args.json {
                let all: Vec<Value> = locks
                    .iter()
                    .zip(&last)
                    .map(|(s, last)| {
                        let mut one = to_json(s, &location);
                        one["last"] = json!(last);
                        one
                    })
                    .collect();
                println!("{}", Value::Array(all));
            } else if locks.is_empty() {
                let prefix = match args.prefix.as_str() {
                    "" => String::new(),
                    p => format!(" starting with {p}"),
                };
                log::notice(format_args!("no locks{prefix} at {}", location.shown()));
            } else {
                print!("{}", table(&locks, &last, std::io::stdout().is_terminal()));
            }
            Outcome::Exit(YES)
        }
        // A user with rights on some keys only may list those.
        Err(mut e) if args.prefix.is_empty() && e.message.contains("permission denied") => {
            e.message
                .push_str("; a user with rights on a prefix only lists that: --prefix PREFIX");
            Failure::from(e).into()
        }
        Err(e) => Failure::from(e).into(),
    }
}

/// `elect list`'s lines: tab-separated, or on a terminal in columns under
/// a header. `last`: each lock's last run that ran the command.
fn table(locks: &[LockStatus], last: &[Option<Tenure>], terminal: bool) -> String {
    let rows: Vec<[String; 4]> = locks
        .iter()
        .zip(last)
        .map(|(s, last)| {
            let holder = match &s.holder {
                Some(h) => format!("held by {h}"),
                None => "free".to_string(),
            };
            let waiting = match terminal {
                true => s.waiting.to_string(),
                false => format!("{} waiting", s.waiting),
            };
            let ran = match last {
                Some(t) => format!(
                    "{}, {}: {}",
                    t.who(),
                    t.ended
                        .as_deref()
                        .or(t.started.as_deref())
                        .unwrap_or(&t.queued),
                    t.how()
                ),
                None => "-".to_string(),
            };
            let ran = match terminal {
                true => ran,
                false => format!("last run: {ran}"),
            };
            [s.lock.clone(), holder, waiting, ran]
        })
        .collect();
    columns(
        &["LOCK", "HOLDER", "WAITING", "LAST RUN"].map(String::from),
        &rows,
        terminal,
    )
}
