//! etcd, with the lock recipe of etcd's own `concurrency.Mutex`.
//!
//! The layout is the one `etcdctl lock` uses, so both exclude each other:
//! each contender puts `<lock>/<lease id in hex>` with its lease, in a txn
//! guarded by `create_revision == 0`; the holder is the key with the lowest
//! create revision; a waiter watches only its immediate predecessor, so a
//! release wakes one waiter, not the herd. The fencing token is the key's
//! create revision: revisions are cluster-wide and only grow.
//!
//! All waiting is done with txn/get/watch rather than the server-side `Lock`
//! RPC, which blocks inside the server where elect could neither cancel it
//! nor see who is ahead.
//!
//! As in etcd's `concurrency` package, the session owns the lease and each
//! lock borrows it: [`client`] talks to the cluster, [`session`] keeps the
//! lease, [`lock`] a place in one queue, [`watch`] waits on a key,
//! [`records`] keeps what lives beside a queue, [`inspect`] looks from
//! outside, and [`target`] says where the cluster is.

use std::time::Duration;

mod client;
mod greeting;
mod inspect;
mod lock;
mod records;
mod session;
mod target;
mod watch;

use client::{Cluster, Members};
use session::EtcdSession;
pub use target::{EtcdTarget, KIND};

use super::{
    Boxed, Breaking, Check, Fence, Holder, LockStatus, Look, Owner, Put, Record, Session, Store,
    StoreError, Versioned,
};
use crate::store::Token;

#[derive(Clone)]
pub struct Etcd {
    /// Every request goes through it, retried within the connect timeout.
    cluster: Cluster,
    /// For renewals, one client per member.
    members: Members,
}

impl Etcd {
    /// Set up a client for `target`'s endpoints (see [`Cluster::connect`]).
    pub async fn connect(
        target: &EtcdTarget,
        ping_timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Self, StoreError> {
        let (cluster, members) = Cluster::connect(target, ping_timeout, connect_timeout).await?;
        Ok(Etcd { cluster, members })
    }

    /// Revoke lease `id` from outside its session (after its elect died).
    pub(super) async fn revoke(&self, id: i64, within: Duration) -> Result<(), StoreError> {
        self.cluster.within(within).revoke(id).await
    }
}

impl Store for Etcd {
    fn open_session(
        &self,
        ttl: Duration,
        within: Duration,
    ) -> Boxed<'_, Result<Box<dyn Session + '_>, StoreError>> {
        Box::pin(async move {
            let session = EtcdSession::grant(&self.cluster, &self.members, ttl, within);
            Ok(Box::new(session) as Box<dyn Session + '_>)
        })
    }

    fn status<'a>(&'a self, lock: &'a str) -> Boxed<'a, Result<LockStatus, StoreError>> {
        Box::pin(inspect::status(&self.cluster, lock))
    }

    fn holder<'a>(&'a self, lock: &'a str) -> Boxed<'a, Result<Option<Holder>, StoreError>> {
        Box::pin(async move {
            let look = inspect::look(&self.cluster, lock, None, true).await?;
            Ok(look.holder)
        })
    }

    fn look<'a>(
        &'a self,
        lock: &'a str,
        record: Option<Record<'a>>,
        holder: bool,
    ) -> Boxed<'a, Result<Look, StoreError>> {
        Box::pin(inspect::look(&self.cluster, lock, record, holder))
    }

    fn list<'a>(&'a self, prefix: &'a str) -> Boxed<'a, Result<Vec<LockStatus>, StoreError>> {
        Box::pin(inspect::list(&self.cluster, prefix))
    }

    fn check<'a>(
        &'a self,
        lock: &'a str,
        key: &'a str,
        token: Token,
    ) -> Boxed<'a, Result<Check, StoreError>> {
        Box::pin(inspect::check(&self.cluster, lock, key, token))
    }

    fn begin_break<'a>(
        &'a self,
        _lock: &'a str,
        holder: &'a Holder,
        ask: bool,
    ) -> Boxed<'a, Result<Option<Box<dyn Breaking + 'a>>, StoreError>> {
        Box::pin(inspect::begin_break(&self.cluster, holder, ask))
    }

    fn lease_ttl<'a>(
        &'a self,
        _lock: &'a str,
        holder: &'a Holder,
    ) -> Boxed<'a, Result<Option<Duration>, StoreError>> {
        Box::pin(inspect::lease_ttl(&self.cluster, holder))
    }

    fn owners<'a>(&'a self, locks: &'a [String]) -> Boxed<'a, Result<Vec<Owner>, StoreError>> {
        Box::pin(records::owners(&self.cluster, locks))
    }

    fn record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
    ) -> Boxed<'a, Result<Option<Versioned>, StoreError>> {
        Box::pin(records::record(&self.cluster, lock, record))
    }

    fn put_record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
        value: &'a str,
        fence: Fence<'a>,
    ) -> Boxed<'a, Result<Put, StoreError>> {
        Box::pin(records::put_record(
            &self.cluster,
            lock,
            record,
            value,
            fence,
        ))
    }

    fn delete_record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
    ) -> Boxed<'a, Result<(), StoreError>> {
        Box::pin(records::delete_record(&self.cluster, lock, record))
    }

    fn recorded<'a>(&'a self, prefix: &'a str) -> Boxed<'a, Result<Vec<String>, StoreError>> {
        Box::pin(records::recorded(&self.cluster, prefix))
    }

    fn tenures<'a>(
        &'a self,
        lock: &'a str,
        values: bool,
    ) -> Boxed<'a, Result<Vec<(String, String)>, StoreError>> {
        Box::pin(records::tenures(&self.cluster, lock, values))
    }
}
