//! An etcd lease: granted, renewed over keep-alive streams, revoked. Locks
//! ([`super::lock`]) borrow it; when it ends, every key put with it goes.

use std::cell::RefCell;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, GetOptions, LeaseGrantResponse, LeaseKeepAliveStream, LeaseKeeper,
    PutOptions, SortOrder, SortTarget, Txn, TxnOp,
};

use super::client::{BUMP, Cluster, Failed, Members, REVISION, describe, read_at};
use super::lock::EtcdLock;
use super::records::checkpoint_key;
use crate::clock::Instant;
use crate::log;
use crate::store::{Boxed, Checkpoint, HolderRecord, Lock, Renewal, Renewer, Session, StoreError};

pub struct EtcdSession {
    /// The cluster, with this session's patience: how long to keep
    /// retrying a request before giving up.
    pub(super) cluster: Cluster,
    members: Members,
    pub(super) id: i64,
    /// As asked, in whole seconds: etcd grants at least that.
    ttl: Duration,
    granted_at: Instant,
    /// The grant, on its way while the first key is put (see [`EtcdSession::grant`]).
    grant: RefCell<Option<Grant>>,
    /// The `--ttl` asked for, which `ttl` rounds up to whole seconds.
    asked: Duration,
    /// The grant failed: there is no lease to revoke.
    refused: std::cell::Cell<bool>,
}

/// A grant request in flight, and what it came to.
type Grant = tokio::task::JoinHandle<Result<LeaseGrantResponse, Failed>>;

impl EtcdSession {
    /// Grant a lease of at least `ttl`, retrying until `within` has passed.
    ///
    /// elect chooses the lease's id, so the grant need not be answered
    /// before the key that uses it is put: the grant goes out as soon as
    /// this task next waits, and [`EtcdSession::join_queue`] sends the
    /// queue transaction beside it, so both take one round trip (etcd may
    /// still write them to its disk one after the other).
    pub(super) fn grant(
        cluster: &Cluster,
        members: &Members,
        ttl: Duration,
        within: Duration,
    ) -> EtcdSession {
        // etcd grants whole seconds; ask for at least what the user asked.
        let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        let asked = i64::try_from(secs).unwrap_or(i64::MAX);
        let id = lease_id();
        let cluster = cluster.within(within);
        let granted_at = Instant::now();
        let grant = {
            let cluster = cluster.clone();
            tokio::spawn(async move { cluster.grant(id, asked).await })
        };
        EtcdSession {
            cluster,
            members: members.clone(),
            id,
            ttl: Duration::from_secs(secs),
            asked: ttl,
            granted_at,
            grant: RefCell::new(Some(grant)),
            refused: std::cell::Cell::new(false),
        }
    }
}

/// A lease id of our own: random, positive, never zero.
fn lease_id() -> i64 {
    let random = u64::from_le_bytes(crate::store::ids::random::<8>());
    (random >> 1).max(1) as i64
}

impl EtcdSession {
    /// Wait for the grant, if it is still on its way; its failure is the
    /// session's.
    async fn granted(&self) -> Result<(), StoreError> {
        let Some(grant) = self.grant.borrow_mut().take() else {
            return Ok(());
        };
        let failed = |e: StoreError| {
            self.refused.set(true);
            e
        };
        let reply = grant
            .await
            .map_err(|e| failed(StoreError::unavailable(e.to_string())))?
            .map_err(|e| failed(e.into()))?;
        if reply.ttl() <= 0 {
            return Err(failed(StoreError::unavailable(format!(
                "{} refused the lease: {}",
                self.cluster.shown(),
                reply.error()
            ))));
        }
        // etcd grants whole seconds; elect's own deadline stays its --ttl.
        let counted = match self.asked == self.ttl {
            true => String::new(),
            false => format!(
                " (elect counts its --ttl of {})",
                crate::clock::show(self.asked)
            ),
        };
        log::verbose(format_args!(
            "connected to {}; lease {:x} granted for {}s{counted}",
            self.cluster.shown(),
            reply.id(),
            reply.ttl()
        ));
        Ok(())
    }
}

impl Session for EtcdSession {
    fn id(&self) -> String {
        format!("{:x}", self.id)
    }

    fn ttl(&self) -> Option<Duration> {
        Some(self.ttl)
    }

    fn granted_at(&self) -> Instant {
        self.granted_at
    }

    fn renewer(&self) -> Box<dyn Renewer> {
        Box::new(EtcdRenewer {
            client: self.cluster.client.clone(),
            members: self.members.clone(),
            member: None,
            id: self.id,
            ttl: self.ttl,
            stream: None,
        })
    }

    fn join(
        &self,
        lock: String,
        record: HolderRecord,
    ) -> Boxed<'_, Result<Box<dyn Lock + '_>, StoreError>> {
        Box::pin(async move {
            let lock: Box<dyn Lock + '_> = Box::new(self.join_queue(lock, &record).await?);
            Ok(lock)
        })
    }

    fn release(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(self.revoke())
    }
}

impl EtcdSession {
    /// Put our key under `lock`, guarded by `create_revision == 0`: its
    /// create revision is our place in the queue, and our token.
    async fn join_queue(
        &self,
        lock: String,
        record: &HolderRecord,
    ) -> Result<EtcdLock<'_>, StoreError> {
        let key = format!("{lock}/{:x}", self.id);
        // With the put, the oldest key of the lock: if it is ours, the lock
        // is ours, and nobody need look again.
        let oldest = GetOptions::new()
            .with_prefix()
            .with_keys_only()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1);
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(
                    key.as_str(),
                    record.to_json(),
                    Some(PutOptions::new().with_lease(self.id)),
                ),
                TxnOp::get(format!("{lock}/"), Some(oldest)),
                // And the checkpoint, which a holder that is first at once
                // needs before its command starts.
                TxnOp::get(checkpoint_key(&lock), None),
            ])
            .or_else([TxnOp::get(key.as_str(), None)]);
        let cluster = &self.cluster;
        let floor = cluster.mark.floor();
        // Beside the grant, and ahead of it on the wire: the grant's task
        // runs only when this one waits. etcd handles each request in a
        // goroutine of its own, and Go tends to run the one made last
        // first: sent in this order, the grant is mostly proposed first
        // (in 1 run of 7 or so not, against 3 of 4 the other way round).
        // If etcd takes the transaction first, it says the lease does not
        // exist: then put again once the grant is in. Retrying is safe: a
        // second attempt finds our key and its place.
        let beside = tokio::time::timeout(cluster.patience.attempt(), cluster.txn_once(&txn));
        let (beside, granted) = tokio::join!(beside, self.granted());
        granted?;
        let tried = match beside {
            Ok(Ok(reply)) => Ok(reply),
            _ => cluster.txn(&txn).await,
        };
        let reply = tried.map_err(|e| {
            let hint = match e.text.contains("permission denied") {
                true => format!(
                    "; the etcd user needs readwrite permission on the key prefixes \
                     '{lock}/' (its queue) and '{lock}.' (its records)"
                ),
                false => e.users_hint().to_string(),
            };
            e.error(format!("cannot queue for lock {lock}: {e}{hint}"))
        })?;
        let token = if reply.succeeded() {
            reply.header().map_or(0, |h| h.revision())
        } else {
            // Our key exists already (a retried request): its creation is our place.
            read_at(&reply, 0)
                .and_then(|get| get.kvs().first().map(|kv| kv.create_revision()))
                .unwrap_or(0)
        };
        if token <= 0 {
            return Err(StoreError::gone(format!("etcd gave no revision for {key}")));
        }
        let first = reply.succeeded()
            && read_at(&reply, 1).is_some_and(|get| {
                get.kvs()
                    .first()
                    .is_some_and(|kv| kv.key() == key.as_bytes() && kv.create_revision() == token)
            });
        let checkpoint = read_at(&reply, 2).filter(|_| first).map(|get| {
            get.kvs()
                .first()
                .and_then(|kv| Checkpoint::from_json(kv.value()))
        });
        let rewound = cluster.mark.token(floor, token.unsigned_abs());
        let placed = EtcdLock {
            session: self,
            lock,
            key,
            rank: token.unsigned_abs(),
            record: record.clone(),
            first: std::cell::Cell::new(first),
            checkpoint: std::cell::RefCell::new(checkpoint),
        };
        if let Err(rewound) = rewound {
            // No place under a token handed out before.
            let _ = placed.delete_own_key().await;
            return Err(rewound.error(REVISION, &placed.lock, BUMP));
        }
        log::verbose(format_args!(
            "queued for lock {} as {} (token {token})",
            placed.lock, placed.key
        ));
        Ok(placed)
    }

    async fn revoke(&self) -> Result<(), StoreError> {
        // A lease whose grant failed needs no revoking; one on its way does.
        if self.granted().await.is_err() || self.refused.get() {
            return Ok(());
        }
        self.cluster.revoke(self.id).await
    }
}

pub struct EtcdRenewer {
    /// The balanced client, used until the first reset.
    client: Client,
    members: Members,
    /// The member renewals go to since the last reset, if any.
    member: Option<usize>,
    id: i64,
    /// As granted: etcd renews a lease to its granted TTL.
    ttl: Duration,
    stream: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
}

impl Renewer for EtcdRenewer {
    fn renew(&mut self) -> Boxed<'_, Result<Renewal, StoreError>> {
        Box::pin(self.renew_once())
    }

    fn reset(&mut self) {
        self.stream = None;
        if let Some(left) = self.member {
            self.members.forget(left);
        }
        // Every member can renew (followers forward to the leader).
        self.member = Some(self.members.next());
    }
}

impl EtcdRenewer {
    async fn renew_once(&mut self) -> Result<Renewal, StoreError> {
        let Some((keeper, replies)) = self.stream.as_mut() else {
            let client = match self.member {
                None => self.client.clone(),
                Some(index) => self.members.client(index).await?,
            };
            // Opening the stream sends a keep-alive and waits for its answer
            // (etcd-client checks that the TTL is positive and keeps it to
            // itself): that is this renewal, in one round trip, not two.
            let opened = match client.lease_client().keep_alive(self.id).await {
                Ok(opened) => opened,
                Err(etcd_client::Error::LeaseKeepAliveError(e)) if e.contains("not found") => {
                    return Ok(Renewal::Gone(
                        "etcd says the lease is gone (not found)".into(),
                    ));
                }
                Err(e) => return Err(StoreError::unavailable(describe(&e))),
            };
            self.stream = Some(opened);
            return Ok(Renewal::Alive(self.ttl));
        };
        let result = match keeper.keep_alive().await {
            Ok(()) => replies.message().await,
            Err(e) => Err(e),
        };
        match result {
            Ok(Some(reply)) if reply.ttl() > 0 => Ok(Renewal::Alive(Duration::from_secs(
                reply.ttl().unsigned_abs(),
            ))),
            Ok(Some(_)) => Ok(Renewal::Gone("etcd says the lease is gone (TTL 0)".into())),
            Ok(None) => {
                self.stream = None;
                Err(StoreError::unavailable("the keep-alive stream ended"))
            }
            Err(e) => {
                self.stream = None;
                Err(StoreError::unavailable(describe(&e)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_ids_are_positive_and_differ() {
        let (a, b) = (lease_id(), lease_id());
        assert!(a > 0 && b > 0);
        assert_ne!(a, b);
    }
}
