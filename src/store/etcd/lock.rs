//! A place in one etcd lock's queue, as etcd's `concurrency.Mutex` keeps
//! it: the key `<lock>/<lease id hex>`, put with the session's lease; the
//! holder is the key with the lowest create revision, and each waiter
//! watches only the key just ahead of it.

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, TxnResponse,
};
use tokio::time::sleep;

use super::session::EtcdSession;
use super::{RETRY, changed, deleted, key_exists, own_key, retry};
use crate::clock::Instant;
use crate::log;
use crate::store::{Boxed, Checkpoint, HolderRecord, Lock, Loss, StoreError, Turn};

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
                let key = super::last_key(&self.lock);
                let put = retry(&self.session.patience, || {
                    let mut kv = self.session.client.kv_client();
                    let (key, identity) = (key.clone(), self.record.identity.clone());
                    async move { kv.put(key, identity, None).await }
                });
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
                None => {
                    let session = self.session;
                    super::read_checkpoint(
                        &session.client,
                        &session.patience,
                        &session.shown,
                        &self.lock,
                    )
                    .await
                }
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
        let session = self.session;
        let read = |limit: i64| {
            let options = GetOptions::new()
                .with_prefix()
                .with_keys_only()
                .with_max_create_revision(mine)
                .with_sort(SortTarget::Create, SortOrder::Descend)
                .with_limit(limit);
            let txn = Txn::new().and_then([
                TxnOp::get(format!("{lock}/"), Some(options)),
                TxnOp::get(super::checkpoint_key(lock), None),
            ]);
            retry(&session.patience, move || {
                let mut kv = session.client.kv_client();
                let txn = txn.clone();
                async move { kv.txn(txn).await }
            })
        };
        let gets = |reply: TxnResponse| {
            let revision = reply.header().map_or(0, |h| h.revision());
            let mut gets = reply.op_responses().into_iter().map(|op| match op {
                TxnOpResponse::Get(get) => Some(get),
                _ => None,
            });
            match (gets.next().flatten(), gets.next().flatten()) {
                (Some(queue), Some(checkpoint)) => Ok((queue, checkpoint, revision)),
                _ => Err(StoreError::unavailable(format!(
                    "etcd answered the read of the queue of {lock} with something else"
                ))),
            }
        };
        let (mut queue, mut checkpoint, mut revision) =
            gets(read(2).await.map_err(StoreError::unavailable)?)?;
        // Keys of nested locks (`lock/x/...`) can take those two places: then look at all.
        if queue.more() && queue.kvs().iter().any(|kv| !own_key(lock, kv)) {
            (queue, checkpoint, revision) = gets(read(0).await.map_err(StoreError::unavailable)?)?;
        }
        let checkpoint = checkpoint
            .take_kvs()
            .first()
            .and_then(|kv| Checkpoint::from_json(kv.value()));
        Ok((queue.take_kvs(), revision, checkpoint))
    }

    async fn wait(&self, until: Option<Instant>) -> Result<Turn, StoreError> {
        let lock = self.lock.as_str();
        let client = &self.session.client;
        let mine = i64::try_from(self.rank).unwrap_or(i64::MAX);
        if self.first.take() {
            self.record_acquisition();
            return Ok(Turn::First {
                token: self.rank,
                taken: None,
            });
        }
        loop {
            // One read answers both questions: is our key still there (a
            // lease that expired while we queued leaves none, and etcd 3.4's
            // own recipe reports success anyway), and who is just ahead of us.
            let (reply, revision, checkpoint) = match self.newest_up_to(mine).await {
                Ok(found) => found,
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
                    token: self.rank,
                    taken: None,
                });
            };
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

    async fn watch_own_key(&self) -> Loss {
        let client = &self.session.client;
        let mut after = i64::try_from(self.rank).unwrap_or(i64::MAX);
        loop {
            match changed(client, self.key.as_bytes(), after).await {
                Ok(Some((value, revision))) => {
                    let record = HolderRecord::from_json(&value);
                    if let Some(request) = record.and_then(|r| r.break_request) {
                        return Loss::Asked(format!("{request} asked it to let go"));
                    }
                    // Another write (our own record of the acquisition):
                    // watch on from there.
                    after = revision;
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    log::verbose(format_args!("watching {} failed: {e}", self.key));
                    sleep(RETRY).await;
                }
            }
            // The watch ended: a deletion, a compaction or a broken stream. Look.
            match key_exists(client, &self.session.patience, &self.key).await {
                Ok(None) => {
                    return Loss::Gone(format!(
                        "{} was deleted from etcd (lease revoked or expired)",
                        self.key
                    ));
                }
                Ok(Some(revision)) => after = revision,
                Err(e) => {
                    log::verbose(format_args!("checking {} failed: {e}", self.key));
                    sleep(RETRY).await;
                }
            }
        }
    }

    /// Write when we got the lock into our key, a second from now, if the
    /// key is still as we put it (a break request is never overwritten).
    fn record_acquisition(&self) {
        let client = self.session.client.clone();
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
    async fn delete_own_key(&self) -> Result<(), StoreError> {
        let session = self.session;
        let txn = Txn::new()
            .when([Compare::create_revision(
                self.key.as_str(),
                CompareOp::Equal,
                i64::try_from(self.rank).unwrap_or(i64::MAX),
            )])
            .and_then([TxnOp::delete(self.key.as_str(), None)]);
        retry(&session.patience, || {
            let mut kv = session.client.kv_client();
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })
        .await
        .map(|_| ())
        .map_err(StoreError::unavailable)
    }
}
