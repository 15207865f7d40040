//! The records elect keeps beside a lock on every store: its checkpoint,
//! its number of shards, and who held each shard last.
//!
//! Where each lives is its store's (a key, a node, a file, an annotation, a
//! column): [`Store::record`] and [`Store::put_record`]. What they hold and
//! the rules for writing them are here, once: a checkpoint only by the
//! holder of its token, a shard count only by the first to record one. A
//! shard's last holder is written by its store as the shard is taken
//! ([`super::Lock::acquired`], or the take itself where the lock's record
//! keeps its holder), and read here.

use super::{Checkpoint, Fence, Owner, Put, Record, Store, StoreError};

/// The last checkpoint of `lock`, if any.
pub async fn checkpoint(store: &dyn Store, lock: &str) -> Result<Option<Checkpoint>, StoreError> {
    let found = store.record(lock, Record::Checkpoint).await?;
    Ok(found.and_then(|v| Checkpoint::from_json(v.value.as_bytes())))
}

/// Store `checkpoint` for `lock` if the holder of `key` still holds it
/// with `checkpoint.token`; else say who holds it now.
pub async fn put_checkpoint(
    store: &dyn Store,
    lock: &str,
    key: &str,
    checkpoint: &Checkpoint,
) -> Result<Put, StoreError> {
    let token = checkpoint.token;
    let fence = Fence::Holder { key, token };
    let put = store
        .put_record(lock, Record::Checkpoint, &checkpoint.to_json(), fence)
        .await?;
    if put == Put::Stored {
        return Ok(put);
    }
    // The refusal names who holds the lock instead, as far as a look tells.
    let holder = store.status(lock).await.ok().and_then(|s| s.holder);
    Ok(Put::Stale(match holder {
        Some(h) if h.token > token => {
            format!("lock {lock} is held by {h} now, a later holder than token {token}")
        }
        Some(h) => format!("lock {lock} is held by {h} now, not by token {token}"),
        None => format!("lock {lock} is free: token {token} no longer holds it"),
    }))
}

/// The number of shards recorded for `lock`, if any; with `count`, record
/// that first unless a number is recorded already: the first to record
/// wins, and the others are told its number.
pub async fn shards(
    store: &dyn Store,
    lock: &str,
    count: Option<u32>,
) -> Result<Option<u32>, StoreError> {
    // Read, else create: a create lost to another's is read again.
    for _ in 0..4 {
        if let Some(found) = store.record(lock, Record::Shards).await? {
            return shard_count(lock, &found.value).map(Some);
        }
        let Some(n) = count else {
            return Ok(None);
        };
        let put = store
            .put_record(lock, Record::Shards, &n.to_string(), Fence::Version(None))
            .await?;
        if put == Put::Stored {
            return Ok(Some(n));
        }
    }
    Err(StoreError::unavailable(format!(
        "the number of shards of lock {lock} changed on every look"
    )))
}

/// For each of `locks` (the shards of one lock): held or not, and who
/// held it last, a look at each in turn (at once, some stores would open a
/// connection each): what [`Store::owners`] does unless the store answers
/// for all of them in one look.
pub async fn owners<S: Store + ?Sized>(
    store: &S,
    locks: &[String],
) -> Result<Vec<Owner>, StoreError> {
    let mut owners = Vec::with_capacity(locks.len());
    for lock in locks {
        owners.push(Owner {
            held: store.status(lock).await?.holder.is_some(),
            last: store.record(lock, Record::Last).await?.map(|v| v.value),
        });
    }
    Ok(owners)
}

/// A shard count as a record holds it.
pub fn shard_count(lock: &str, value: &str) -> Result<u32, StoreError> {
    value.trim().parse().map_err(|_| {
        StoreError::config(format!(
            "the number of shards of lock {lock} is not a number: {value:?}"
        ))
    })
}

/// A checkpoint as a record holds it, for a store that keeps its parts
/// apart (in the lock's row).
pub fn checkpoint_of(lock: &str, value: &str) -> Result<Checkpoint, StoreError> {
    Checkpoint::from_json(value.as_bytes()).ok_or_else(|| {
        StoreError::config(format!(
            "a checkpoint of lock {lock} that is no checkpoint: {value}"
        ))
    })
}

/// A record that a store keeps in the lock's own row (PostgreSQL, MySQL),
/// asked for otherwise than these rules write it.
pub fn kept_in_the_row(lock: &str, record: Record<'_>) -> StoreError {
    StoreError::config(format!(
        "record {} of lock {lock} lives in the lock's row: a checkpoint is written only \
         fenced by its holder, a shard count only once, the last holder by the take",
        record.suffix()
    ))
}
