//! A place in one etcd lock's queue, as etcd's `concurrency.Mutex` keeps
//! it: the key `<lock>/<lease id hex>`, put with the session's lease; the
//! holder is the key with the lowest create revision, and each waiter
//! watches only the key just ahead of it.

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnResponse,
};
use tokio::time::sleep;

use super::client::{BUMP, Failed, RETRY, REVISION, read_at};
use super::records::{self, checkpoint_key, last_key};
use super::session::EtcdSession;
use super::watch::{deleted, until_gone};
use crate::clock::Instant;
use crate::log;
use crate::store::Token;
use crate::store::{Boxed, Checkpoint, ErrorKind, HolderRecord, Lock, Loss, StoreError, Turn};

pub struct EtcdLock<'a> {
    pub(super) session: &'a EtcdSession,
    pub(super) lock: String,
    pub(super) key: String,
    /// The key's create revision: our place, and our token.
    pub(super) rank: u64,
    /// What the key says of us.
    pub(super) record: HolderRecord,
    /// The key was the lock's oldest when it was put: the lock is ours.
    pub(super) first: std::cell::Cell<bool>,
    /// The checkpoint, read with the put when the lock was ours at once, or
    /// with the look at the queue that found it ours.
    pub(super) checkpoint: std::cell::RefCell<Option<Option<Checkpoint>>>,
}

/// How long after getting the lock its time is written into the key: never
/// on the way to the command, and never for a command that is done by then.
const RECORD_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

impl Lock for EtcdLock<'_> {
    fn key(&self) -> &str {
        &self.key
    }

    fn rank(&self) -> u64 {
        self.rank
    }

    fn wait_turn(&self, until: Option<Instant>) -> Boxed<'_, Result<Turn, StoreError>> {
        Box::pin(self.wait(until))
    }

    fn lost(&self) -> Boxed<'_, Loss> {
        Box::pin(self.watch_own_key())
    }

    fn leave(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(self.delete_own_key())
    }

    fn acquired(&self) -> Boxed<'_, ()> {
        Box::pin(async move {
            // Who held this shard last: an instance prefers its own shard
            // when it starts again.
            if self.record.shard.is_some() {
                let key = last_key(&self.lock);
                let put = self.session.cluster.put(&key, &self.record.identity);
                if let Err(e) = put.await {
                    log::verbose(format_args!("could not record the shard's holder: {e}"));
                }
            }
        })
    }

    fn checkpoint(&self) -> Boxed<'_, Result<Option<Checkpoint>, StoreError>> {
        Box::pin(async move {
            // Read with the put, or with the look that found the lock ours;
            // else now.
            let early = self.checkpoint.borrow_mut().take();
            match early {
                Some(checkpoint) => Ok(checkpoint),
                None => records::checkpoint(&self.session.cluster, &self.lock).await,
            }
        })
    }
}

impl EtcdLock<'_> {
    /// The keys of `lock` created at or before revision `mine`, newest
    /// first: usually just ours and the one ahead of it. Returns them with
    /// the revision of the read, and the lock's checkpoint as of that read:
    /// when the keys say the lock is ours, that is the checkpoint our
    /// command starts from (a holder before us wrote it before it let go;
    /// one after us must hold our token), so the turn needs no second read.
    async fn newest_up_to(
        &self,
        mine: i64,
    ) -> Result<(Vec<KeyValue>, i64, Option<Checkpoint>), StoreError> {
        let lock = self.lock.as_str();
        let cluster = &self.session.cluster;
        let read = |limit: i64| {
            let options = GetOptions::new()
                .with_prefix()
                .with_keys_only()
                .with_max_create_revision(mine)
                .with_sort(SortTarget::Create, SortOrder::Descend)
                .with_limit(limit);
            Txn::new().and_then([
                TxnOp::get(format!("{lock}/"), Some(options)),
                TxnOp::get(checkpoint_key(lock), None),
            ])
        };
        let mark = &cluster.mark;
        let floor = mark.floor();
        let gets = |reply: Result<TxnResponse, Failed>| {
            let reply = reply.map_err(Failed::plain)?;
            let revision = reply.header().map_or(0, |h| h.revision());
            // A waiter takes no token below one handed out before.
            mark.read(floor, revision.max(0).unsigned_abs())
                .map_err(|rewound| rewound.error(REVISION, lock, BUMP))?;
            match (read_at(&reply, 0), read_at(&reply, 1)) {
                (Some(queue), Some(checkpoint)) => Ok((queue, checkpoint, revision)),
                _ => Err(StoreError::unavailable(format!(
                    "etcd answered the read of the queue of {lock} with something else"
                ))),
            }
        };
        let (mut queue, mut checkpoint, mut revision) = gets(cluster.txn(&read(2)).await)?;
        // Keys of nested locks (`lock/x/...`) can take those two places: then look at all.
        if queue.more() && queue.kvs().iter().any(|kv| !own_key(lock, kv)) {
            (queue, checkpoint, revision) = gets(cluster.txn(&read(0)).await)?;
        }
        let checkpoint = checkpoint
            .take_kvs()
            .first()
            .and_then(|kv| Checkpoint::from_json(kv.value()));
        Ok((queue.take_kvs(), revision, checkpoint))
    }

    async fn wait(&self, until: Option<Instant>) -> Result<Turn, StoreError> {
        let lock = self.lock.as_str();
        let client = &self.session.cluster.client;
        let mine = i64::try_from(self.rank).unwrap_or(i64::MAX);
        if self.first.take() {
            self.record_acquisition();
            return Ok(Turn::First {
                token: Token::new(self.rank),
                taken: None,
            });
        }
        loop {
            // One read answers both questions: is our key still there (a
            // lease that expired while we queued leaves none, and etcd 3.4's
            // own recipe reports success anyway), and who is just ahead of us.
            let (reply, revision, checkpoint) = match self.newest_up_to(mine).await {
                Ok(found) => found,
                Err(e) if e.kind == ErrorKind::Rewound => return Err(e),
                Err(e) => {
                    log::verbose(format_args!("reading the queue of {lock} failed: {e}"));
                    sleep(RETRY).await;
                    continue;
                }
            };
            let mut own = reply.iter().filter(|kv| own_key(lock, kv));
            match own.next() {
                Some(kv) if kv.create_revision() == mine => {}
                _ => {
                    return Err(StoreError::gone(format!(
                        "{} vanished while waiting",
                        self.key
                    )));
                }
            }
            let Some(ahead) = own.next() else {
                *self.checkpoint.borrow_mut() = Some(checkpoint);
                self.record_acquisition();
                return Ok(Turn::First {
                    token: Token::new(self.rank),
                    taken: None,
                });
            };
            self.session
                .cluster
                .mark
                .saw(ahead.create_revision().max(0).unsigned_abs());
            if until.is_some_and(|at| at.remaining().is_zero()) {
                return Ok(Turn::Busy);
            }
            log::verbose(format_args!(
                "waiting for {} (token {}) to go",
                String::from_utf8_lossy(ahead.key()),
                ahead.create_revision()
            ));
            let deleted = deleted(client, ahead.key(), revision);
            let result = match until {
                None => deleted.await,
                Some(at) => tokio::select! {
                    r = deleted => r,
                    () = crate::clock::sleep_until(at) => Ok(()),
                },
            };
            if let Err(e) = result {
                log::verbose(format_args!("watching the queue of {lock} failed: {e}"));
                sleep(RETRY).await;
            }
        }
    }

    /// Until our key is deleted, or a break request is written into it
    /// (another write, our own record of the acquisition, is watched past).
    async fn watch_own_key(&self) -> Loss {
        let after = i64::try_from(self.rank).unwrap_or(i64::MAX);
        let asked = |value: &[u8]| {
            let request = HolderRecord::from_json(value)?.break_request?;
            Some(Loss::Asked(format!("{request} asked it to let go")))
        };
        match until_gone(&self.session.cluster, self.key.as_bytes(), after, asked).await {
            Ok(Some(asked)) => asked,
            Ok(None) => Loss::Gone(format!(
                "{} was deleted from etcd (lease revoked or expired)",
                self.key
            )),
            Err(rewound) => Loss::Gone(rewound.said(REVISION)),
        }
    }

    /// Write when we got the lock into our key, a second from now, if the
    /// key is still as we put it (a break request is never overwritten).
    fn record_acquisition(&self) {
        let client = self.session.cluster.client.clone();
        let key = self.key.clone();
        let value = self.record.acquired_now().to_json();
        let put = i64::try_from(self.rank).unwrap_or(i64::MAX);
        tokio::spawn(async move {
            sleep(RECORD_AFTER).await;
            let txn = Txn::new()
                .when([Compare::mod_revision(key.as_str(), CompareOp::Equal, put)])
                .and_then([TxnOp::put(
                    key.as_str(),
                    value,
                    Some(PutOptions::new().with_ignore_lease()),
                )]);
            let _ = client.kv_client().txn(txn).await;
        });
    }

    /// Leave the queue but keep the session: delete our key, if it is still ours.
    pub(super) async fn delete_own_key(&self) -> Result<(), StoreError> {
        let txn = Txn::new()
            .when([Compare::create_revision(
                self.key.as_str(),
                CompareOp::Equal,
                i64::try_from(self.rank).unwrap_or(i64::MAX),
            )])
            .and_then([TxnOp::delete(self.key.as_str(), None)]);
        self.session
            .cluster
            .txn(&txn)
            .await
            .map(|_| ())
            .map_err(Failed::plain)
    }
}

/// Keys of `lock` itself, not of locks nested under it (`a/b` under `a`).
pub(super) fn own_key(lock: &str, kv: &KeyValue) -> bool {
    kv.key()
        .strip_prefix(format!("{lock}/").as_bytes())
        .is_some_and(|rest| !rest.is_empty() && !rest.contains(&b'/'))
}

/// Is `kv` a contender of the lock recipe: `<lock>/<its own lease in hex>`?
/// Returns the lock name.
pub(super) fn contender(kv: &KeyValue) -> Option<&str> {
    let key = std::str::from_utf8(kv.key()).ok()?;
    let (lock, lease) = key.rsplit_once('/')?;
    (kv.lease() != 0 && i64::from_str_radix(lease, 16).ok()? == kv.lease() && !lock.is_empty())
        .then_some(lock)
}
