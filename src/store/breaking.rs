//! `elect break`, the same on every store: ask the holder to let go, wait
//! at most its own TTL, then end its tenure; `--force` ends it at once.
//!
//! Why the TTL bounds the wait: a holder started by elect kills its command
//! by its last confirmed renewal plus its `--ttl` (recorded in its holder
//! record) whether or not its elect answers, so a tenure ended after that
//! long from the request can no longer overlap a command of the old holder,
//! short of a pause of its whole host. A holder elect did not start is
//! waited out for its lease's TTL as the store knows it. The stores only
//! carry the steps out ([`Store::begin_break`], [`Breaking`]).

use std::time::Duration;

use super::api::{Store, StoreError};
use super::holder::{Broken, Forced, Holder, HolderRecord};
use crate::clock::Instant;
use crate::store::Token;

/// How often a holder may change between our look and our request before
/// the break gives up.
const LOOKS: usize = 3;

/// A tenure that ended no sooner than this before its lease, as the look
/// found it, would have run out ended by the lease: a live holder renews,
/// and lets go within its grace of being asked.
const EXPIRY_SLACK: Duration = Duration::from_millis(100);

/// How often a break looks whether the holder let go, on a store with no
/// watch to tell it.
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// Return once `held` finds the holder of `lock` gone, looking every
/// [`LOOK_EVERY`]. A look that fails is said under `-v` and made again:
/// `break` bounds the wait itself.
pub async fn until_let_go<F, Fut>(lock: &str, mut held: F) -> Result<(), StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, StoreError>>,
{
    loop {
        match held().await {
            Ok(false) => return Ok(()),
            Ok(true) => {}
            Err(e) => crate::log::verbose(format_args!("looking at lock {lock}: {e}")),
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// Make the holder of `lock` let go, if its token is `token` (when given).
pub async fn break_lock(
    store: &dyn Store,
    lock: &str,
    token: Option<Token>,
    force: bool,
) -> Result<Broken, StoreError> {
    for _ in 0..LOOKS {
        let Some(holder) = store.status(lock).await?.holder else {
            return Ok(Broken::Free);
        };
        if token.is_some_and(|t| t != holder.token) {
            return Ok(Broken::Changed(holder));
        }
        // Known before asking: a holder that lets go at once takes its
        // lease, and what the store knew of it, with it.
        let wait = match force {
            true => Duration::ZERO,
            false => holders_ttl(store, lock, &holder).await?,
        };
        let asked = Instant::now();
        let ended = {
            let Some(breaking) = store.begin_break(lock, &holder, !force).await? else {
                continue;
            };
            match force {
                true => {
                    breaking.end().await?;
                    Err((Forced::ForceFlag, breaking.keeps_next_out()))
                }
                false => match tokio::time::timeout(wait, breaking.ended()).await {
                    Ok(ended) => Ok(ended.map(|()| asked.elapsed())?),
                    Err(_) => {
                        breaking.end().await?;
                        Err((Forced::NoAnswer(wait), breaking.keeps_next_out()))
                    }
                },
            }
        };
        // Its elect gone from this host before it was asked, or its lease
        // run out: nobody let go.
        let gone = holder
            .record
            .as_ref()
            .is_some_and(HolderRecord::gone_from_this_host);
        let expired = |after: Duration| {
            gone || holder
                .ttl_left
                .is_some_and(|left| after + EXPIRY_SLACK >= left)
        };
        return Ok(match ended {
            Ok(after) if expired(after) => Broken::Expired { holder, after },
            Ok(after) => Broken::Stopped { holder, after },
            Err((why, kept_out)) => Broken::Forced {
                holder,
                why,
                kept_out,
            },
        });
    }
    Err(StoreError::unavailable(format!(
        "lock {lock} kept changing hands; nothing broken"
    )))
}

/// How long `holder` may take to let go: by then its command is dead
/// whether or not it answers.
async fn holders_ttl(
    store: &dyn Store,
    lock: &str,
    holder: &Holder,
) -> Result<Duration, StoreError> {
    if let Some(ms) = holder.record.as_ref().and_then(|r| r.ttl_ms) {
        return Ok(Duration::from_millis(ms));
    }
    match store.lease_ttl(lock, holder).await? {
        Some(ttl) => Ok(ttl),
        None => Err(StoreError::config(format!(
            "lock {lock} is held by {holder}, which records no TTL and has no lease that expires: \
             it cannot be waited out; nothing broken (--force ends its tenure at once)"
        ))),
    }
}
