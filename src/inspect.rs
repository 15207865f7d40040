//! `elect status`, `list`, `check`, `break` and `checkpoint`: what
//! operators and scripts ask of a lock from outside, and what a holder's
//! command commits for the next.

use std::io::{BufRead, IsTerminal, Read, Write};
use std::time::Duration;

use serde_json::{Value, json};

use crate::cli::{
    BreakArgs, CheckArgs, CheckpointAction, CheckpointArgs, HistoryArgs, ListArgs, StatusArgs,
    StoreArgs,
};
use crate::exit::{Code, DECLINED, Failure, NO, Outcome, YES};
use crate::history::{self, Tenure};
use crate::log;
use crate::reach::Reach;
use crate::store::Token;
use crate::store::records;
use crate::store::{
    Broken, CHECKPOINT_MAX, Check, Checkpoint, Forced, Holder, Location, LockStatus, Put, Store,
    shard_lock,
};

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
            let latest = history::latest(&*store, lock, holder).await?;
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
            if !args.json
                && status.holder.is_none()
                && status.waiting == 0
                && latest.ran.is_none()
                && latest.skipped.is_none() =>
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
        |status: &LockStatus, checkpoint: &Option<Checkpoint>, latest: &history::Latest| {
            let mut one = to_json(status, &location);
            one["checkpoint"] = match checkpoint {
                Some(c) => json!({"token": c.token, "at": c.at, "bytes": c.value.len()}),
                None => Value::Null,
            };
            one["last"] = json!(latest.ran);
            one["last_skip"] = json!(latest.skipped);
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
                if let Some(t) = &latest.ran {
                    println!(
                        "  last run: {}, {} to {}: {}",
                        t.who(),
                        t.started.as_deref().unwrap_or(&t.queued),
                        t.ended.as_deref().unwrap_or("?"),
                        t.how()
                    );
                }
                if let Some(t) = &latest.skipped {
                    println!(
                        "  skipped:  {}, {}: {}",
                        t.who(),
                        t.ended.as_deref().unwrap_or(&t.queued),
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
            last.push(history::latest(&*store, &status.lock, holder).await?.ran);
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

pub async fn check(mut args: CheckArgs) -> Outcome {
    let key = Some(args.holder_key.as_str());
    let (location, store, mut reach) =
        match open(&args.store, Some(&args.lock), args.shard, key).await {
            Ok(o) => o,
            Err(failure) => return failure.into(),
        };
    if let Some(k) = args.shard {
        args.lock = shard_lock(&args.lock, k);
    }
    let answer = |why: Option<&str>| {
        if args.json {
            println!(
                "{}",
                json!({
                    "lock": args.lock,
                    "store": location.to_string(),
                    "key": args.holder_key,
                    "token": args.token,
                    "holds": why.is_none(),
                    "why": why,
                })
            );
        }
    };
    let check = store.check(&args.lock, &args.holder_key, args.token);
    match reach.answered("the lock's holder", check).await {
        Ok(Check::Holder) => {
            answer(None);
            log::verbose(format_args!(
                "still the holder of lock {} with token {}",
                args.lock, args.token
            ));
            Outcome::Exit(YES)
        }
        Ok(Check::NotHolder(why)) => {
            answer(Some(&why));
            log::error(format_args!(
                "not the holder of lock {} with token {}: {why}",
                args.lock, args.token
            ));
            Outcome::Exit(NO)
        }
        Err(e) => Failure::from(e).into(),
    }
}

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

/// The stable JSON form of a lock's status (documented in docs/reference.md).
pub fn to_json(status: &LockStatus, location: &Location) -> Value {
    let h: Option<&Holder> = status.holder.as_ref();
    let record = h.and_then(|h| h.record.as_ref());
    json!({
        "lock": status.lock,
        "store": location.to_string(),
        "held": h.is_some(),
        "token": h.map(|h| h.token),
        "key": h.map(|h| h.key.clone()),
        "lease": h.and_then(|h| h.lease.clone()),
        "ttl_left_ms": h.and_then(|h| h.ttl_left).map(|d| d.as_millis() as u64),
        "holder": record.map(record_json),
        "holder_gone": record.map(crate::store::HolderRecord::gone_from_this_host),
        "waiting": status.waiting,
    })
}

/// A holder record as the JSON outputs show it.
fn record_json(r: &crate::store::HolderRecord) -> Value {
    json!({
        "identity": r.identity,
        "hostname": r.hostname,
        "pid": r.pid,
        "command": r.command,
        "since": r.since(),
        "queued": r.started,
    })
}

/// `meant`: the lock the name was likely meant to be, for one never seen.
fn human(status: &LockStatus, location: &Location, meant: Option<&str>) -> String {
    let mut out = String::new();
    let lock = &status.lock;
    let location = location.shown();
    let Some(h) = &status.holder else {
        let meant = meant.map_or_else(String::new, |m| format!("; did you mean {m}?"));
        out.push_str(&format!("lock {lock} at {location}: free{meant}\n"));
        if status.waiting > 0 {
            out.push_str(&format!("  waiting:  {}\n", status.waiting));
        }
        return out;
    };
    out.push_str(&format!("lock {lock} at {location}: held\n"));
    match &h.record {
        Some(r) => {
            // Its elect's process gone from this very host: the lease only
            // waits to run out (or `elect break` to end it).
            let gone = match (r.gone_from_this_host(), h.ttl_left) {
                (true, Some(left)) => format!(
                    "; its process is gone, the lease ends in {}",
                    crate::clock::show(left)
                ),
                (true, None) => "; its process is gone".to_string(),
                (false, _) => String::new(),
            };
            out.push_str(&format!(
                "  holder:   {} (pid {} on {}{gone})\n",
                r.identity, r.pid, r.hostname
            ));
            out.push_str(&format!("  command:  {}\n", shell_words(&r.command)));
            out.push_str(&format!("  since:    {}\n", r.since()));
        }
        None => out.push_str("  holder:   unknown (not started by elect)\n"),
    }
    out.push_str(&format!("  token:    {}\n", h.token));
    out.push_str(&format!("  key:      {}\n", h.key));
    if let Some(lease) = &h.lease {
        match h.ttl_left {
            Some(left) => out.push_str(&format!(
                "  lease:    {lease} ({} left)\n",
                crate::clock::show(left)
            )),
            None => out.push_str(&format!("  lease:    {lease}\n")),
        }
    }
    out.push_str(&format!("  waiting:  {}\n", status.waiting));
    out
}

/// A command line as a shell would show it.
fn shell_words(words: &[String]) -> String {
    let quote = |w: &String| {
        if !w.is_empty()
            && w.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
        {
            w.clone()
        } else {
            format!("'{}'", w.replace('\'', r"'\''"))
        }
    };
    words.iter().map(quote).collect::<Vec<_>>().join(" ")
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_shown_quoted() {
        let words = ["sh", "-c", "echo 'hi' $X"].map(String::from);
        assert_eq!(shell_words(&words), r#"sh -c 'echo '\''hi'\'' $X'"#);
    }
}
