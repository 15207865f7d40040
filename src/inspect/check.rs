//! `elect check`: whether the holder with this key and fencing token still
//! holds the lock, for a script that must not act on a lease it lost.

use serde_json::json;

use crate::cli::CheckArgs;
use crate::exit::{Failure, NO, Outcome, YES};
use crate::log;
use crate::store::{Check, shard_lock};

use super::open;

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
