//! `elect break`: ask a holder to let go, confirmed at a terminal, and
//! tell what became of its tenure.

use std::io::{BufRead, IsTerminal, Write};
use std::time::Duration;

use serde_json::json;

use crate::cli::BreakArgs;
use crate::exit::{DECLINED, Failure, NO, Outcome, YES};
use crate::log;
use crate::reach::Reach;
use crate::store::Token;
use crate::store::records;
use crate::store::{Broken, Forced, Holder, Location, LockStatus, Store, shard_lock};

use super::open;
use super::shown::record_json;

pub async fn break_lock(mut args: BreakArgs) -> Outcome {
    // Nobody to ask: a script, a pipe, `echo n |`. Ending someone's
    // command is said in so many words, as other tools' destructive
    // commands want it.
    if !args.yes && !can_ask() {
        let force = if args.force { " --force" } else { "" };
        return Failure::usage(format!(
            "elect break{force} has no terminal to ask on; to break lock {} without asking, \
             add --yes",
            args.lock
        ))
        .into();
    }
    let (location, store, mut reach) =
        match open(&args.store, Some(&args.lock), args.shard, None).await {
            Ok(o) => o,
            Err(failure) => return failure.into(),
        };
    match args.shard {
        Some(k) => args.lock = shard_lock(&args.lock, k),
        None => {
            // A break of the whole name would end no shard's holder.
            let shards = records::shards(&*store, &args.lock, None);
            match reach.answered("the shard count", shards).await {
                Ok(None) => {}
                Ok(Some(n)) => {
                    return Failure::from(crate::store::StoreError::config(format!(
                        "lock {} is sharded: {n} shards; break one with --shard K (0 to {})",
                        args.lock,
                        n - 1
                    )))
                    .into();
                }
                Err(e) => return Failure::from(e).into(),
            }
        }
    }
    break_on(&*store, &args, &location, &mut reach).await
}

/// `elect break --json`: one object that says what happened.
fn broken_json(
    args: &BreakArgs,
    location: &Location,
    outcome: &str,
    holder: Option<&Holder>,
    after: Option<Duration>,
) {
    if !args.json {
        return;
    }
    println!(
        "{}",
        json!({
            "lock": args.lock,
            "store": location.to_string(),
            "outcome": outcome,
            "token": holder.map(|h| h.token),
            "key": holder.map(|h| h.key.clone()),
            "holder": holder.and_then(|h| h.record.as_ref()).map(record_json),
            "after_ms": after.map(|d| d.as_millis() as u64),
        })
    );
}

async fn break_on(
    store: &dyn Store,
    args: &BreakArgs,
    location: &Location,
    reach: &mut Reach,
) -> Outcome {
    let lock = &args.lock;
    let holder = match reach
        .answered("the lock's holder", store.status(lock))
        .await
    {
        Ok(LockStatus {
            holder: Some(h), ..
        }) => h,
        Ok(_) => {
            broken_json(args, location, "free", None, None);
            log::error(format_args!(
                "lock {lock} at {} is free; nothing to break",
                location.shown()
            ));
            return Outcome::Exit(NO);
        }
        Err(e) => return Failure::from(e).into(),
    };
    // Another holder than --token names: nothing to ask, nothing to confirm.
    if let Some(token) = args.token.filter(|t| *t != holder.token) {
        return report_break(args, location, token, Ok(Broken::Changed(holder)));
    }
    if !confirmed(args, &holder) {
        broken_json(args, location, "declined", Some(&holder), None);
        log::error(format_args!("not confirmed; lock {lock} not broken"));
        return Outcome::Exit(DECLINED);
    }
    // With --token, the holder must be that one; without, the one just shown.
    let token = args.token.unwrap_or(holder.token);
    if !args.force {
        let at_most = holder
            .record
            .as_ref()
            .and_then(|r| r.ttl_ms)
            .map(|ms| {
                format!(
                    ", waiting at most {}",
                    crate::clock::show(Duration::from_millis(ms))
                )
            })
            .unwrap_or_default();
        let how = match &holder.record {
            Some(r) if r.gone_from_this_host() => format!(
                "its elect (pid {}) is gone from this host: nobody will let go, so the break \
                 waits for its lease to run out{at_most} (--force ends it now)",
                r.pid
            ),
            Some(_) => format!(
                "asking it to stop its command and let go{at_most} (--force ends its lease now)"
            ),
            None => "it was not started by elect and cannot be asked to stop; \
                     its lease is ended once it could have expired anyway"
                .to_string(),
        };
        log::notice(format_args!("lock {lock} is held by {holder}; {how}"));
    }
    // Not within the bound: break waits for the holder to let go, as long
    // as its lease could last.
    let broken = crate::store::breaking::break_lock(store, lock, Some(token), args.force).await;
    report_break(args, location, token, broken)
}

/// Whether there is a terminal to ask on.
fn can_ask() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// Unless `--yes` (without a terminal, required): does the user mean it?
fn confirmed(args: &BreakArgs, holder: &Holder) -> bool {
    if args.yes {
        return true;
    }
    let what = match args.force {
        true => "End the lease of",
        false => "Stop the command of",
    };
    eprint!("{what} {holder} on lock {}? [y/N] ", args.lock);
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    let _ = std::io::stdin().lock().read_line(&mut answer);
    matches!(answer.trim(), "y" | "Y" | "yes")
}

/// What `break` did, said on stderr (and on stdout with `--json`).
fn report_break(
    args: &BreakArgs,
    location: &Location,
    token: Token,
    broken: Result<Broken, crate::store::StoreError>,
) -> Outcome {
    let lock = &args.lock;
    match broken {
        Ok(Broken::Stopped { holder, after }) => {
            broken_json(args, location, "stopped", Some(&holder), Some(after));
            log::notice(format_args!(
                "{holder} stopped its command and let go of lock {lock} after {}",
                crate::clock::show(after)
            ));
            Outcome::Exit(YES)
        }
        Ok(Broken::Expired { holder, after }) => {
            broken_json(args, location, "expired", Some(&holder), Some(after));
            log::notice(format_args!(
                "nobody let go of lock {lock}: the lease of {holder} expired after {} \
                 (its elect was gone or frozen; its guard stops the command by then)",
                crate::clock::show(after)
            ));
            Outcome::Exit(YES)
        }
        Ok(Broken::Forced {
            holder,
            why,
            kept_out,
        }) => {
            let waited = match why {
                Forced::ForceFlag => Duration::ZERO,
                Forced::NoAnswer(waited) => waited,
            };
            broken_json(args, location, "revoked", Some(&holder), Some(waited));
            log::notice(format_args!(
                "ended the lease of {holder} on lock {lock} {}",
                forced(&holder, why, kept_out)
            ));
            Outcome::Exit(YES)
        }
        Ok(Broken::Free) => {
            broken_json(args, location, "free", None, None);
            log::error(format_args!("lock {lock} became free; nothing to break"));
            Outcome::Exit(NO)
        }
        Ok(Broken::Changed(h)) => {
            broken_json(args, location, "changed", Some(&h), None);
            log::error(format_args!(
                "lock {lock} is held by {h}, not token {token}; nothing broken"
            ));
            Outcome::Exit(NO)
        }
        Err(e) => Failure::from(e).into(),
    }
}

/// When and how a lease was ended by force, and what may still run.
fn forced(holder: &Holder, why: Forced, kept_out: Option<Duration>) -> String {
    let when = match why {
        Forced::ForceFlag => "at once".to_string(),
        Forced::NoAnswer(waited) => format!(
            "after waiting {} for it to let go",
            crate::clock::show(waited)
        ),
    };
    let running = match &holder.record {
        Some(_) => format!(
            "its elect kills its command within {} of noticing; until then it \
             may still run while the next holder starts",
            crate::clock::show(crate::lease::GONE_GRACE)
        ),
        None => match kept_out {
            Some(kept) => format!(
                "it may run on until it sees that and stops, so the next holder is kept \
                 out for {}, its lease's duration",
                crate::clock::show(kept)
            ),
            None => "its command may still run while the next holder starts".to_string(),
        },
    };
    format!("{when}; {running}")
}
