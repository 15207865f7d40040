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

use serde::{Deserialize, Serialize};

use super::{Fence, Owner, Store, StoreError, Token};

/// What a store keeps of a lock beside its queue, named after the lock:
/// `NAME.checkpoint`, `NAME.shards`, `NAME.last`, and the [`Record`]s.
pub const RECORD_SUFFIXES: [&str; 6] = [
    ".checkpoint",
    ".shards",
    ".last",
    ".done",
    ".slots",
    ".history",
];

/// A record elect keeps beside a lock alike on every store: what they
/// mean and the rules for writing them are [`super::records`]' and
/// [`crate::history`]'s; where each lives is its store's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    /// The progress a holder committed ([`Checkpoint`] as JSON), written
    /// fenced by its token.
    Checkpoint,
    /// The number of shards of a sharded lock, written once, by the first.
    Shards,
    /// The identity of the last holder of a shard.
    Last,
    /// The last run that succeeded.
    Done,
    /// Each `--slot` done.
    Slot(&'a str),
    /// One tenure in the lock's history, by its id ([`crate::history`]).
    Tenure(&'a str),
}

impl Record<'_> {
    /// Its name beside the lock's: `.checkpoint`, `.shards`, `.last`,
    /// `.done`, `.slots/KEY`, `.history/ID`.
    pub fn suffix(&self) -> String {
        match self {
            Record::Checkpoint => ".checkpoint".into(),
            Record::Shards => ".shards".into(),
            Record::Last => ".last".into(),
            Record::Done => ".done".into(),
            Record::Slot(key) => format!(".slots/{key}"),
            Record::Tenure(id) => format!("{HISTORY}{id}"),
        }
    }
}

/// Where a lock's history lives beside it: one record per tenure under it.
pub const HISTORY: &str = ".history/";

/// `value` as JSON: what elect writes of its own records, plain data of
/// strings, numbers and lists, which always serializes.
pub fn to_json(value: &impl Serialize) -> String {
    #[allow(
        clippy::expect_used,
        reason = "serde_json fails only on maps with non-string keys or a failing Serialize impl; these records have neither"
    )]
    serde_json::to_string(value).expect("a record of plain data serializes")
}

/// The largest checkpoint a store keeps: a checkpoint is a position to
/// resume from (an offset, a key, a little JSON), not the work's data.
pub const CHECKPOINT_MAX: usize = 64 * 1024;

/// The largest checkpoint handed to the command in `ELECT_CHECKPOINT`; a
/// larger one is read with `elect checkpoint get`.
pub const CHECKPOINT_IN_ENV_MAX: usize = 4096;

/// The progress a holder committed for the next one to resume from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub value: String,
    /// The token of the holder that wrote it.
    pub token: Token,
    /// When it was written, RFC 3339 UTC.
    pub at: String,
}

impl Checkpoint {
    /// A checkpoint written now by the holder of `token`.
    pub fn now(value: String, token: Token) -> Checkpoint {
        Checkpoint {
            value,
            token,
            at: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
        }
    }

    pub fn to_json(&self) -> String {
        to_json(self)
    }

    pub fn from_json(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice(bytes).ok()
    }
}

/// What `elect checkpoint put` found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Put {
    Stored,
    /// The caller no longer holds the lock, and why (naming the newer token).
    Stale(String),
}

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
