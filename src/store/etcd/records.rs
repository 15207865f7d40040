//! Where etcd keeps the records beside a lock's queue (its checkpoint, its
//! number of shards, a shard's last holder, its tenures, the others), and
//! how it writes them; what they mean is [`crate::store::records`]'.
//!
//! They live beside the queue's prefix, never under it, where contenders
//! (`etcdctl lock` too) look; a write fenced by a holder is a transaction
//! that compares the holder's create revision, its token.

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};

use super::client::Cluster;
use crate::store::{Checkpoint, Fence, HISTORY, Owner, Put, Record, StoreError, Versioned};

/// Where the identity of the last holder of a shard is kept.
pub(super) fn last_key(lock: &str) -> String {
    record_key(lock, ".last")
}

/// Where the checkpoint of `lock` lives: beside its queue, not in it, so
/// that `etcdctl lock` never takes it for a contender.
pub(super) fn checkpoint_key(lock: &str) -> String {
    record_key(lock, ".checkpoint")
}

/// Where the record `suffix` of `lock` lives: beside its prefix, never
/// under it, where contenders (`etcdctl lock` too) look. A shard's lock,
/// `NAME/shard-K`, is under `NAME/`, so its records go beside that prefix,
/// under `NAME.shards/`: a name no lock can have or sit under.
pub(super) fn record_key(lock: &str, suffix: &str) -> String {
    match lock.rsplit_once("/shard-") {
        Some((name, k)) if !name.is_empty() && k.parse::<u32>().is_ok() => {
            format!("{name}.shards/{k}{suffix}")
        }
        _ => format!("{lock}{suffix}"),
    }
}

/// The checkpoint of `lock`, if any.
pub(super) async fn checkpoint(
    cluster: &Cluster,
    lock: &str,
) -> Result<Option<Checkpoint>, StoreError> {
    let mut reply = cluster.get(&checkpoint_key(lock), None).await?;
    Ok(reply
        .take_kvs()
        .first()
        .and_then(|kv| Checkpoint::from_json(kv.value())))
}

/// Held or not, and the last holder, for each of `locks`: one
/// transaction per 64 (etcd takes at most 128 operations in one).
pub(super) async fn owners(cluster: &Cluster, locks: &[String]) -> Result<Vec<Owner>, StoreError> {
    let mut owners = Vec::with_capacity(locks.len());
    for chunk in locks.chunks(64) {
        let ops: Vec<TxnOp> = chunk
            .iter()
            .flat_map(|lock| {
                [
                    TxnOp::get(
                        format!("{lock}/"),
                        Some(GetOptions::new().with_prefix().with_count_only()),
                    ),
                    TxnOp::get(last_key(lock), None),
                ]
            })
            .collect();
        let txn = Txn::new().and_then(ops);
        let reply = cluster.txn(&txn).await?;
        let answers = reply.op_responses();
        for pair in answers.chunks(2) {
            let (Some(TxnOpResponse::Get(queue)), Some(TxnOpResponse::Get(last))) =
                (pair.first(), pair.get(1))
            else {
                return Err(StoreError::unavailable("etcd answered out of turn"));
            };
            owners.push(Owner {
                held: queue.count() > 0,
                last: last
                    .kvs()
                    .first()
                    .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()),
            });
        }
    }
    Ok(owners)
}

/// The side record `record` of `lock`, with the revision it was put at.
pub(super) async fn record(
    cluster: &Cluster,
    lock: &str,
    record: Record<'_>,
) -> Result<Option<Versioned>, StoreError> {
    let key = record_key(lock, &record.suffix());
    let mut reply = cluster.get(&key, None).await?;
    Ok(reply.take_kvs().first().map(|kv| Versioned {
        value: String::from_utf8_lossy(kv.value()).into_owned(),
        version: kv.mod_revision() as u64,
    }))
}

/// Put the side record `record` of `lock` if `fence` still holds.
pub(super) async fn put_record(
    cluster: &Cluster,
    lock: &str,
    record: Record<'_>,
    value: &str,
    fence: Fence<'_>,
) -> Result<Put, StoreError> {
    let key = record_key(lock, &record.suffix());
    // An absent key's revisions are 0.
    let compare = match fence {
        Fence::Holder { key, token } => Some(Compare::create_revision(
            key,
            CompareOp::Equal,
            token.get() as i64,
        )),
        Fence::Version(v) => Some(Compare::mod_revision(
            key.clone(),
            CompareOp::Equal,
            v.map_or(0, |v| v as i64),
        )),
        Fence::Any => None,
    };
    let txn = Txn::new()
        .when(Vec::from_iter(compare))
        .and_then([TxnOp::put(key.clone(), value, None)]);
    let reply = cluster.txn(&txn).await?;
    Ok(match (reply.succeeded(), fence) {
        (true, _) => Put::Stored,
        (false, Fence::Holder { token, .. }) => {
            Put::Stale(format!("token {token} no longer holds lock {lock}"))
        }
        (false, _) => Put::Stale(format!("{key} changed meanwhile")),
    })
}

pub(super) async fn delete_record(
    cluster: &Cluster,
    lock: &str,
    record: Record<'_>,
) -> Result<(), StoreError> {
    cluster.delete(&record_key(lock, &record.suffix())).await?;
    Ok(())
}

/// The tenures recorded for `lock`: their ids, and their values if asked.
/// The locks under `prefix` with a history: each `NAME.history/` key
/// names one, and `NAME.shards/K.history/` shard K of NAME.
pub(super) async fn recorded(cluster: &Cluster, prefix: &str) -> Result<Vec<String>, StoreError> {
    let options = match prefix {
        "" => GetOptions::new().with_all_keys().with_keys_only(),
        _ => GetOptions::new().with_prefix().with_keys_only(),
    };
    let mut reply = cluster.get(prefix, Some(options)).await?;
    let mut locks: Vec<String> = reply
        .take_kvs()
        .iter()
        .filter_map(|kv| {
            let (head, _) = kv.key_str().ok()?.split_once(HISTORY)?;
            Some(match head.rsplit_once(".shards/") {
                Some((name, k)) if k.parse::<u32>().is_ok() => format!("{name}/shard-{k}"),
                _ => head.to_string(),
            })
        })
        .filter(|lock| lock.starts_with(prefix))
        .collect();
    locks.sort();
    locks.dedup();
    Ok(locks)
}

pub(super) async fn tenures(
    cluster: &Cluster,
    lock: &str,
    values: bool,
) -> Result<Vec<(String, String)>, StoreError> {
    let prefix = record_key(lock, HISTORY);
    let options = match values {
        true => GetOptions::new().with_prefix(),
        false => GetOptions::new().with_prefix().with_keys_only(),
    };
    let mut reply = cluster.get(&prefix, Some(options)).await?;
    Ok(reply
        .take_kvs()
        .iter()
        .filter_map(|kv| {
            let id = kv.key_str().ok()?.strip_prefix(&prefix)?.to_string();
            Some((id, String::from_utf8_lossy(kv.value()).into_owned()))
        })
        .collect())
}
