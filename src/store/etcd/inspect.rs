//! Looking at locks from outside their queues, and breaking them: what
//! `elect status`, `list`, `check` and `break` ask of etcd.
//!
//! Nothing here holds a place in a queue, so it reads keys and leases as
//! any etcdctl user would, and ends a holder only by its lease or, for a
//! key without one, by a delete guarded by the holder's token.

use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
};
use tokio::time::timeout;

use super::client::{Cluster, Failed, read_at};
use super::lock::{contender, own_key};
use super::records::record_key;
use super::watch::gone;
use crate::store::Token;
use crate::store::{
    Boxed, Breaking, Check, Holder, HolderRecord, LockStatus, Look, Record, StoreError, Versioned,
};

/// Who holds `lock` and how many wait.
pub(super) async fn status(cluster: &Cluster, lock: &str) -> Result<LockStatus, StoreError> {
    let kvs = read(cluster, &format!("{lock}/")).await?;
    let keys: Vec<&KeyValue> = kvs.iter().filter(|kv| own_key(lock, kv)).collect();
    Ok(status_of(cluster, lock, &keys).await)
}

/// A run's first look, in one transaction: `record` of `lock`, and its
/// contenders for who holds it (without the time left on its lease).
pub(super) async fn look(
    cluster: &Cluster,
    lock: &str,
    record: Option<Record<'_>>,
    holder: bool,
) -> Result<Look, StoreError> {
    let mut reads = Vec::new();
    if let Some(record) = record {
        reads.push(TxnOp::get(record_key(lock, &record.suffix()), None));
    }
    if holder {
        reads.push(TxnOp::get(format!("{lock}/"), Some(by_creation())));
    }
    if reads.is_empty() {
        return Ok(Look::default());
    }
    let reply = cluster.txn(&Txn::new().and_then(reads)).await?;
    let unexpected = || {
        StoreError::unavailable(format!(
            "etcd answered the look at lock {lock} with something else"
        ))
    };
    let mut at = 0;
    let mut next = || {
        at += 1;
        read_at(&reply, at - 1).ok_or_else(unexpected)
    };
    let record = match record {
        Some(_) => next()?.kvs().first().map(|kv| Versioned {
            value: String::from_utf8_lossy(kv.value()).into_owned(),
            version: kv.mod_revision() as u64,
        }),
        None => None,
    };
    let holder = match holder {
        true => next()?
            .kvs()
            .iter()
            .find(|kv| own_key(lock, kv))
            .map(holder_of),
        false => None,
    };
    Ok(Look { record, holder })
}

/// The status of every lock under `prefix` (every lock, for an empty one),
/// found by their contenders' keys.
pub(super) async fn list(cluster: &Cluster, prefix: &str) -> Result<Vec<LockStatus>, StoreError> {
    let kvs = if prefix.is_empty() {
        let options = GetOptions::new()
            .with_all_keys()
            .with_sort(SortTarget::Create, SortOrder::Ascend);
        cluster.get("", Some(options)).await?.take_kvs()
    } else {
        read(cluster, prefix).await?
    };
    let mut locks: Vec<(&str, Vec<&KeyValue>)> = Vec::new();
    for kv in &kvs {
        if let Some(lock) = contender(kv) {
            match locks.iter_mut().find(|(name, _)| *name == lock) {
                Some((_, keys)) => keys.push(kv),
                None => locks.push((lock, vec![kv])),
            }
        }
    }
    locks.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = Vec::new();
    for (lock, keys) in locks {
        out.push(status_of(cluster, lock, &keys).await);
    }
    Ok(out)
}

/// Whether `key` with `token` still holds `lock`.
pub(super) async fn check(
    cluster: &Cluster,
    lock: &str,
    key: &str,
    token: Token,
) -> Result<Check, StoreError> {
    // One linearizable read, so that a check before each step stays cheap.
    let kvs = read(cluster, &format!("{lock}/")).await?;
    let holder = kvs.iter().find(|kv| own_key(lock, kv)).map(holder_of);
    Ok(Check::of(lock, key, token, holder))
}

/// Begin to break `holder`'s hold: ask it to let go first if `ask`.
/// `None` when it holds no more, or changed while it was asked.
pub(super) async fn begin_break<'a>(
    cluster: &'a Cluster,
    holder: &Holder,
    ask: bool,
) -> Result<Option<Box<dyn Breaking + 'a>>, StoreError> {
    let Some(kv) = holder_key(cluster, holder).await? else {
        return Ok(None);
    };
    let after = match ask {
        true => match ask_to_let_go(cluster, &kv, holder).await? {
            Some(revision) => revision,
            None => return Ok(None),
        },
        false => kv.mod_revision(),
    };
    Ok(Some(Box::new(EtcdBreaking { cluster, kv, after })))
}

/// The TTL `holder`'s lease was granted with (see [`granted_ttl`]); zero
/// when it holds no more.
pub(super) async fn lease_ttl(
    cluster: &Cluster,
    holder: &Holder,
) -> Result<Option<Duration>, StoreError> {
    match holder_key(cluster, holder).await? {
        Some(kv) => granted_ttl(cluster, &kv).await,
        // Gone already: nothing to wait for.
        None => Ok(Some(Duration::ZERO)),
    }
}

/// A linearizable read of `prefix`, sorted by create revision.
async fn read(cluster: &Cluster, prefix: &str) -> Result<Vec<KeyValue>, StoreError> {
    Ok(cluster.get(prefix, Some(by_creation())).await?.take_kvs())
}

/// Every key under a prefix, the oldest first: a lock's queue in order.
fn by_creation() -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
}

/// The key of `holder`, if it still holds its place (same create
/// revision: same token).
async fn holder_key(cluster: &Cluster, holder: &Holder) -> Result<Option<KeyValue>, StoreError> {
    let mut reply = cluster.get(&holder.key, None).await?;
    Ok(reply
        .take_kvs()
        .into_iter()
        .find(|kv| Token::new(kv.create_revision() as u64) == holder.token))
}

/// A holder's key as seen by others, with the time left on its lease
/// (one more request: only `status` and `list` show it).
async fn holder(cluster: &Cluster, kv: &KeyValue) -> Holder {
    let mut holder = holder_of(kv);
    if kv.lease() != 0 {
        let mut lease = cluster.client.lease_client();
        if let Ok(Ok(reply)) = timeout(
            cluster.patience.within,
            lease.time_to_live(kv.lease(), None),
        )
        .await
            && reply.ttl() >= 0
        {
            holder.ttl_left = Some(Duration::from_secs(reply.ttl().unsigned_abs()));
        }
    }
    holder
}

/// The status of `lock` from the keys directly under it, in create order.
async fn status_of(cluster: &Cluster, lock: &str, keys: &[&KeyValue]) -> LockStatus {
    let holder = match keys.first() {
        Some(kv) => Some(holder(cluster, kv).await),
        None => None,
    };
    LockStatus {
        lock: lock.to_string(),
        holder,
        waiting: keys.len().saturating_sub(1),
        ranks: keys
            .iter()
            .skip(1)
            .map(|kv| kv.create_revision().unsigned_abs())
            .collect(),
    }
}

/// A holder's key as seen by others, from the key alone.
pub(super) fn holder_of(kv: &KeyValue) -> Holder {
    Holder {
        key: String::from_utf8_lossy(kv.key()).into_owned(),
        token: Token::new(kv.create_revision().unsigned_abs()),
        record: HolderRecord::from_json(kv.value()),
        lease: (kv.lease() != 0).then(|| format!("{:x}", kv.lease())),
        ttl_left: None,
    }
}

/// A break begun on the holder of `kv`.
struct EtcdBreaking<'a> {
    cluster: &'a Cluster,
    kv: KeyValue,
    /// The revision from which on its key's deletion is watched.
    after: i64,
}

impl Breaking for EtcdBreaking<'_> {
    fn ended(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(async move {
            gone(self.cluster, self.kv.key(), self.after).await;
            Ok(())
        })
    }

    fn end(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(end(self.cluster, &self.kv))
    }
}

/// Ask the holder of `kv` to let go: its elect watches its own key, so
/// write the request into the key's value, keeping its lease and its
/// create revision (its place and its token). Returns the revision of
/// the write, or `None` if the key changed meanwhile. A holder that is
/// not elect's cannot be asked; it is left as it is.
async fn ask_to_let_go(
    cluster: &Cluster,
    kv: &KeyValue,
    holder: &Holder,
) -> Result<Option<i64>, StoreError> {
    let Some(mut record) = holder.record.clone() else {
        return Ok(Some(kv.mod_revision()));
    };
    record.break_request = Some(crate::store::holder::break_request());
    let txn = Txn::new()
        .when([
            Compare::create_revision(kv.key(), CompareOp::Equal, kv.create_revision()),
            Compare::mod_revision(kv.key(), CompareOp::Equal, kv.mod_revision()),
        ])
        .and_then([TxnOp::put(
            kv.key(),
            record.to_json(),
            Some(PutOptions::new().with_ignore_lease()),
        )]);
    let reply = cluster
        .txn(&txn)
        .await
        .map_err(|e| e.error(format!("cannot ask the holder to let go: {e}")))?;
    Ok(reply
        .succeeded()
        .then(|| reply.header().map_or(0, |h| h.revision())))
}

/// The TTL the holder's lease was granted with: `None` for a key
/// without a lease, which never expires; zero for a lease gone.
async fn granted_ttl(cluster: &Cluster, kv: &KeyValue) -> Result<Option<Duration>, StoreError> {
    if kv.lease() == 0 {
        return Ok(None);
    }
    let reply = cluster.time_to_live(kv.lease()).await?;
    Ok(Some(Duration::from_secs(
        reply.granted_ttl().max(0).unsigned_abs(),
    )))
}

/// End the lease of the holder `kv` now: revoke it, or delete a key
/// without a lease if it is still that holder's.
async fn end(cluster: &Cluster, kv: &KeyValue) -> Result<(), StoreError> {
    if kv.lease() != 0 {
        // A lease already gone is what we came for: its holder let go
        // (or expired) between our read and this request.
        cluster.revoke(kv.lease()).await.map_err(|e| {
            let kind = e.kind;
            StoreError {
                kind,
                message: format!("cannot revoke lease {:x}: {e}", kv.lease()),
            }
        })?;
    } else {
        let txn = Txn::new()
            .when([Compare::create_revision(
                kv.key(),
                CompareOp::Equal,
                kv.create_revision(),
            )])
            .and_then([TxnOp::delete(kv.key(), None)]);
        cluster.txn(&txn).await.map_err(Failed::plain)?;
    }
    Ok(())
}
