//! Waiting on one key: until it is deleted, or until it is put again.
//!
//! A watch can end without a deletion (a compaction, a broken stream), so
//! each wait here ends by looking whether the key is still there, and
//! watches on from the revision of that look if it is. A watch opened from
//! a revision the cluster has not reached (it went back: a restore from an
//! older snapshot) would wait for that revision before reporting anything,
//! so it ends at once, and the look, a linearizable read, judges.

use etcd_client::{EventType, GetOptions, WatchOptions};
use tokio::time::sleep;

use super::client::{Cluster, Failed, RETRY, describe};
use crate::log;
use crate::store::StoreError;
use crate::store::rewind::Rewound;

/// Return once `key` no longer exists, looking from revision `after` on
/// (or the cluster went back to before it).
pub(super) async fn gone(cluster: &Cluster, key: &[u8], after: i64) {
    let _: Result<Option<()>, Rewound> = until_gone(cluster, key, after, |_| None).await;
}

/// Watch `key` from revision `after` on until it no longer exists
/// (`Ok(None)`), until a value it is put with makes `put` say what it
/// means, or until a look finds the cluster went back below what this
/// process has seen of it.
pub(super) async fn until_gone<T>(
    cluster: &Cluster,
    key: &[u8],
    mut after: i64,
    mut put: impl FnMut(&[u8]) -> Option<T>,
) -> Result<Option<T>, Rewound> {
    let key = String::from_utf8_lossy(key).into_owned();
    loop {
        match changed(&cluster.client, key.as_bytes(), after).await {
            Ok(Some((value, revision))) => {
                if let Some(meant) = put(&value) {
                    return Ok(Some(meant));
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
        // The watch ended: a deletion, a compaction, a broken stream, or a
        // cluster behind the watch's start. Look.
        match key_exists(cluster, &key).await {
            Ok(Looked::Rewound(rewound)) => return Err(rewound),
            Ok(Looked::Absent) => return Ok(None),
            Ok(Looked::There(revision)) => after = revision,
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
            // A cluster behind the start: the caller looks.
            Ok(Some(reply))
                if reply.created() && reply.header().is_some_and(|h| h.revision() < after) =>
            {
                return Ok(None);
            }
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

/// What a look at one key found.
enum Looked {
    /// It exists, as of this revision.
    There(i64),
    Absent,
    /// The cluster answered below what this process had seen of it.
    Rewound(Rewound),
}

/// Whether `key` exists, by a linearizable read.
async fn key_exists(cluster: &Cluster, key: &str) -> Result<Looked, StoreError> {
    let floor = cluster.mark.floor();
    let reply = cluster
        .get(key, Some(GetOptions::new().with_keys_only()))
        .await
        .map_err(Failed::plain)?;
    let revision = reply.header().map_or(0, |h| h.revision());
    if let Err(rewound) = cluster.mark.read(floor, revision.max(0).unsigned_abs()) {
        return Ok(Looked::Rewound(rewound));
    }
    Ok(match reply.kvs().first() {
        Some(_) => Looked::There(revision),
        None => Looked::Absent,
    })
}
