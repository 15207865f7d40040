//! Waiting on one key: until it is deleted, or until it is put again.
//!
//! A watch can end without a deletion (a compaction, a broken stream), so
//! each wait here ends by looking whether the key is still there, and
//! watches on from the revision of that look if it is.

use etcd_client::{EventType, GetOptions, WatchOptions};
use tokio::time::sleep;

use super::client::{Cluster, Failed, RETRY, describe};
use crate::log;
use crate::store::StoreError;

/// Return once `key` no longer exists, looking from revision `after` on.
pub(super) async fn gone(cluster: &Cluster, key: &[u8], after: i64) {
    let _: Option<()> = until_gone(cluster, key, after, |_| None).await;
}

/// Watch `key` from revision `after` on until it no longer exists (`None`),
/// or until a value it is put with makes `put` say what it means.
pub(super) async fn until_gone<T>(
    cluster: &Cluster,
    key: &[u8],
    mut after: i64,
    mut put: impl FnMut(&[u8]) -> Option<T>,
) -> Option<T> {
    let key = String::from_utf8_lossy(key).into_owned();
    loop {
        match changed(&cluster.client, key.as_bytes(), after).await {
            Ok(Some((value, revision))) => {
                if let Some(meant) = put(&value) {
                    return Some(meant);
                }
                // A put that means nothing (the holder recording when it
                // got the lock): watch on from there.
                after = revision;
                continue;
            }
            Ok(None) => {}
            Err(e) => {
                log::verbose(format_args!("watching {key} failed: {e}"));
                sleep(RETRY).await;
            }
        }
        // The watch ended: a deletion, a compaction or a broken stream. Look.
        match key_exists(cluster, &key).await {
            Ok(None) => return None,
            Ok(Some(revision)) => after = revision,
            Err(e) => {
                log::verbose(format_args!("checking {key} failed: {e}"));
                sleep(RETRY).await;
            }
        }
    }
}

/// Block until `key` is deleted at a revision after `after`, or the
/// watch ends for another reason (then the caller looks again).
pub(super) async fn deleted(
    client: &etcd_client::Client,
    key: &[u8],
    mut after: i64,
) -> Result<(), StoreError> {
    // A put (the holder recording when it got the lock) is watched past.
    while let Some((_, revision)) = changed(client, key, after).await? {
        after = revision;
    }
    Ok(())
}

/// Watch `key` from revision `after` on: `Some((value, revision))` when it
/// is put, `None` when it is deleted or the watch ends (then the caller
/// looks).
async fn changed(
    client: &etcd_client::Client,
    key: &[u8],
    after: i64,
) -> Result<Option<(Vec<u8>, i64)>, StoreError> {
    let options = WatchOptions::new().with_start_revision(after + 1);
    let mut watch = client.watch_client();
    let mut stream = watch
        .watch(key.to_vec(), Some(options))
        .await
        .map_err(|e| StoreError::unavailable(describe(&e)))?;
    loop {
        match stream.message().await {
            Ok(Some(reply)) if reply.canceled() => return Ok(None),
            Ok(Some(reply)) => {
                if let Some(event) = reply.events().first() {
                    return Ok(match (event.event_type(), event.kv()) {
                        (EventType::Put, Some(kv)) => {
                            Some((kv.value().to_vec(), kv.mod_revision()))
                        }
                        _ => None,
                    });
                }
            }
            Ok(None) => return Err(StoreError::unavailable("watch ended")),
            Err(e) => return Err(StoreError::unavailable(describe(&e))),
        }
    }
}

/// The revision at which `key` was seen to exist, or `None` if it does not.
async fn key_exists(cluster: &Cluster, key: &str) -> Result<Option<i64>, StoreError> {
    let reply = cluster
        .get(key, Some(GetOptions::new().with_keys_only()))
        .await
        .map_err(Failed::plain)?;
    let revision = reply.header().map_or(0, |h| h.revision());
    Ok(reply.kvs().first().map(|_| revision))
}
