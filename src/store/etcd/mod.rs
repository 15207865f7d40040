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

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, Identity,
    KeyValue, PutOptions, SortOrder, SortTarget, TlsOptions, Txn, TxnOp, TxnOpResponse,
    WatchOptions,
};
use tokio::time::{sleep, timeout};

mod lock;
mod session;
mod target;

pub use target::{EtcdTarget, KIND};

use super::{
    Boxed, Breaking, Check, Checkpoint, Fence, Holder, HolderRecord, LockStatus, Owner, Put,
    Record, Session, Store, StoreError, Versioned,
};
use crate::clock::Instant;
use crate::log;

/// Pause between retries of a failed read or watch while waiting.
const RETRY: Duration = Duration::from_millis(100);

/// HTTP/2 pings go out only while a request or watch is open, after this
/// long without a frame from etcd. etcd's gRPC server allows one every 5 s
/// (`--grpc-keepalive-min-time`), and none without an open stream; a client
/// that pings more often gets GOAWAY "too_many_pings" and loses the
/// connection with every stream on it. (gRPC's own clients never ping more
/// often than every 10 s either.)
const PING_EVERY: Duration = Duration::from_secs(10);

#[derive(Clone)]
pub struct Etcd {
    client: Client,
    members: Members,
    shown: String,
    /// How long to keep retrying a request before giving up.
    patience: Patience,
}

impl Etcd {
    /// Set up a client for `endpoints`. Nothing is sent yet: the first
    /// request (the lease grant) finds out whether etcd is there.
    ///
    /// A connection is dropped when a ping goes unanswered for `ping_timeout`:
    /// it must exceed any round trip the caller can work with. Pings only unstick a watch on a connection that died
    /// silently; a renewal does not wait for them, it is retried over
    /// another connection when it goes unanswered (see [`crate::lease::keep`]).
    pub async fn connect(
        target: &EtcdTarget,
        ping_timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Self, StoreError> {
        let scheme = if target.tls { "https" } else { "http" };
        let shown = format!(
            "{}://{}",
            if target.tls { "etcds" } else { "etcd" },
            target.endpoints.join(",")
        );
        let urls: Vec<String> = target
            .endpoints
            .iter()
            .map(|e| format!("{scheme}://{e}"))
            .collect();
        let mut options = ConnectOptions::new()
            .with_keep_alive(PING_EVERY, ping_timeout)
            .with_keep_alive_while_idle(false)
            .with_connect_timeout(connect_timeout)
            .with_require_leader(true);
        if target.tls {
            // Server certificates are always verified: by the given CA, else
            // by the system's roots.
            let mut tls = TlsOptions::new();
            tls = match &target.ca {
                Some(pem) => tls.ca_certificate(Certificate::from_pem(pem)),
                None => tls.with_native_roots(),
            };
            if let Some((cert, key)) = &target.identity {
                tls = tls.identity(Identity::from_pem(cert, key));
            }
            options = options.with_tls(tls);
        }
        if let (Some(user), Some(password)) = (&target.user, &target.password) {
            // Tokens expire (simple tokens after --auth-token-ttl, JWTs at
            // their exp): refresh instead of failing a renewal.
            options = options
                .with_user(user, password.expose())
                .with_auto_token_refresh(true);
        }
        let patience = Patience {
            within: connect_timeout,
            endpoints: target.endpoints.clone().into(),
        };
        // With a user, connecting authenticates, so it can fail like any request.
        let client = retry(&patience, || {
            Client::connect(urls.clone(), Some(options.clone()))
        })
        .await
        .map_err(|e| e.unreachable(&shown, connect_timeout))?;
        Ok(Etcd {
            client,
            shown,
            patience,
            members: Members {
                urls,
                options,
                clients: Vec::new(),
                turn: Arc::new(AtomicUsize::new(0)),
            },
        })
    }
}

/// One client per member, for renewals: when a renewal fails, the next one
/// goes to another member, instead of waiting for the balancer to notice
/// that a member died. Each renewer has its own copy, so its own connections.
#[derive(Clone)]
struct Members {
    urls: Vec<String>,
    options: ConnectOptions,
    /// Connected lazily, by index into `urls`.
    clients: Vec<Option<Client>>,
    /// Shared by all copies: renewers that reset one after the other go
    /// to different members.
    turn: Arc<AtomicUsize>,
}

impl Members {
    async fn client(&mut self, index: usize) -> Result<Client, StoreError> {
        if self.clients.len() != self.urls.len() {
            self.clients = vec![None; self.urls.len()];
        }
        if let Some(client) = &self.clients[index] {
            return Ok(client.clone());
        }
        let client = Client::connect([self.urls[index].as_str()], Some(self.options.clone()))
            .await
            .map_err(|e| StoreError::unavailable(describe(&e)))?;
        self.clients[index] = Some(client.clone());
        Ok(client)
    }

    /// The member to try next.
    fn next(&self) -> usize {
        self.turn.fetch_add(1, Ordering::Relaxed) % self.urls.len()
    }

    /// Drop our connection to `index`: one that failed may be half dead.
    fn forget(&mut self, index: usize) {
        if let Some(client) = self.clients.get_mut(index) {
            *client = None;
        }
    }
}

impl Store for Etcd {
    fn open_session(
        &self,
        ttl: Duration,
        within: Duration,
    ) -> Boxed<'_, Result<Box<dyn Session + '_>, StoreError>> {
        Box::pin(async move {
            let session: Box<dyn Session + '_> = Box::new(self.grant(ttl, within).await?);
            Ok(session)
        })
    }

    fn status<'a>(&'a self, lock: &'a str) -> Boxed<'a, Result<LockStatus, StoreError>> {
        Box::pin(self.read_status(lock))
    }

    fn list<'a>(&'a self, prefix: &'a str) -> Boxed<'a, Result<Vec<LockStatus>, StoreError>> {
        Box::pin(self.read_list(prefix))
    }

    fn check<'a>(
        &'a self,
        lock: &'a str,
        key: &'a str,
        token: u64,
    ) -> Boxed<'a, Result<Check, StoreError>> {
        Box::pin(self.read_check(lock, key, token))
    }

    fn begin_break<'a>(
        &'a self,
        _lock: &'a str,
        holder: &'a Holder,
        ask: bool,
    ) -> Boxed<'a, Result<Option<Box<dyn Breaking + 'a>>, StoreError>> {
        Box::pin(async move {
            let Some(kv) = self.holder_key(holder).await? else {
                return Ok(None);
            };
            let after = match ask {
                true => match self.ask_to_let_go(&kv, holder).await? {
                    Some(revision) => revision,
                    None => return Ok(None),
                },
                false => kv.mod_revision(),
            };
            let breaking: Box<dyn Breaking + 'a> = Box::new(EtcdBreaking {
                etcd: self,
                kv,
                after,
            });
            Ok(Some(breaking))
        })
    }

    fn lease_ttl<'a>(
        &'a self,
        _lock: &'a str,
        holder: &'a Holder,
    ) -> Boxed<'a, Result<Option<Duration>, StoreError>> {
        Box::pin(async move {
            match self.holder_key(holder).await? {
                Some(kv) => self.granted_ttl(&kv).await,
                // Gone already: nothing to wait for.
                None => Ok(Some(Duration::ZERO)),
            }
        })
    }

    fn checkpoint<'a>(
        &'a self,
        lock: &'a str,
    ) -> Boxed<'a, Result<Option<Checkpoint>, StoreError>> {
        Box::pin(self.read_checkpoint(lock))
    }

    fn shards<'a>(
        &'a self,
        lock: &'a str,
        count: Option<u32>,
    ) -> Boxed<'a, Result<Option<u32>, StoreError>> {
        Box::pin(self.record_shards(lock, count))
    }

    fn owners<'a>(&'a self, locks: &'a [String]) -> Boxed<'a, Result<Vec<Owner>, StoreError>> {
        Box::pin(self.read_owners(locks))
    }

    fn put_checkpoint<'a>(
        &'a self,
        lock: &'a str,
        key: &'a str,
        checkpoint: &'a Checkpoint,
    ) -> Boxed<'a, Result<Put, StoreError>> {
        Box::pin(self.write_checkpoint(lock, key, checkpoint))
    }

    fn record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
    ) -> Boxed<'a, Result<Option<Versioned>, StoreError>> {
        Box::pin(async move {
            let key = record_key(lock, &record.suffix());
            let mut reply = self.get(&key, None).await?;
            Ok(reply.take_kvs().first().map(|kv| Versioned {
                value: String::from_utf8_lossy(kv.value()).into_owned(),
                version: kv.mod_revision() as u64,
            }))
        })
    }

    fn put_record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
        value: &'a str,
        fence: Fence<'a>,
    ) -> Boxed<'a, Result<Put, StoreError>> {
        Box::pin(async move {
            let key = record_key(lock, &record.suffix());
            // An absent key's revisions are 0.
            let compare = match fence {
                Fence::Holder { key, token } => Some(Compare::create_revision(
                    key,
                    CompareOp::Equal,
                    token as i64,
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
            let reply = self.txn(&txn).await?;
            Ok(match (reply.succeeded(), fence) {
                (true, _) => Put::Stored,
                (false, Fence::Holder { token, .. }) => {
                    Put::Stale(format!("token {token} no longer holds lock {lock}"))
                }
                (false, _) => Put::Stale(format!("{key} changed meanwhile")),
            })
        })
    }

    fn delete_record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
    ) -> Boxed<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let key = record_key(lock, &record.suffix());
            self.delete(&key).await
        })
    }

    fn tenures<'a>(
        &'a self,
        lock: &'a str,
        values: bool,
    ) -> Boxed<'a, Result<Vec<(String, String)>, StoreError>> {
        Box::pin(async move {
            let prefix = record_key(lock, super::HISTORY);
            let options = match values {
                true => GetOptions::new().with_prefix(),
                false => GetOptions::new().with_prefix().with_keys_only(),
            };
            let mut reply = self.get(&prefix, Some(options)).await?;
            Ok(reply
                .take_kvs()
                .iter()
                .filter_map(|kv| {
                    let id = kv.key_str().ok()?.strip_prefix(&prefix)?.to_string();
                    Some((id, String::from_utf8_lossy(kv.value()).into_owned()))
                })
                .collect())
        })
    }
}

/// Where the number of shards of `lock` is recorded, beside its prefix.
fn shards_key(lock: &str) -> String {
    format!("{lock}.shards")
}

/// Where the identity of the last holder of a shard is kept.
pub(super) fn last_key(lock: &str) -> String {
    record_key(lock, ".last")
}

/// Where the record `suffix` of `lock` lives: beside its prefix, never
/// under it, where contenders (`etcdctl lock` too) look. A shard's lock,
/// `NAME/shard-K`, is under `NAME/`, so its records go beside that prefix,
/// under `NAME.shards/`: a name no lock can have or sit under.
fn record_key(lock: &str, suffix: &str) -> String {
    match lock.rsplit_once("/shard-") {
        Some((name, k)) if !name.is_empty() && k.parse::<u32>().is_ok() => {
            format!("{}/{k}{suffix}", shards_key(name))
        }
        _ => format!("{lock}{suffix}"),
    }
}

/// The checkpoint of `lock`, if any.
async fn read_checkpoint(
    client: &Client,
    patience: &Patience,
    shown: &str,
    lock: &str,
) -> Result<Option<Checkpoint>, StoreError> {
    let key = checkpoint_key(lock);
    let mut reply = retry(patience, || {
        let mut kv = client.kv_client();
        let key = key.clone();
        async move { kv.get(key, None).await }
    })
    .await
    .map_err(|e| e.unreachable(shown, patience.within))?;
    Ok(reply
        .take_kvs()
        .first()
        .and_then(|kv| Checkpoint::from_json(kv.value())))
}

/// Where the checkpoint of `lock` lives: beside its queue, not in it, so
/// that `etcdctl lock` never takes it for a contender.
pub(super) fn checkpoint_key(lock: &str) -> String {
    record_key(lock, ".checkpoint")
}

impl Etcd {
    /// Record `count` shards for `lock` unless a number is recorded; the
    /// number recorded.
    async fn record_shards(
        &self,
        lock: &str,
        count: Option<u32>,
    ) -> Result<Option<u32>, StoreError> {
        let key = shards_key(lock);
        let txn = match count {
            Some(n) => Txn::new()
                .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key.as_str(), n.to_string(), None)])
                .or_else([TxnOp::get(key.as_str(), None)]),
            None => Txn::new().and_then([TxnOp::get(key.as_str(), None)]),
        };
        let reply = self.txn(&txn).await?;
        if count.is_some() && reply.succeeded() {
            return Ok(count);
        }
        let value = match reply.op_responses().first() {
            Some(TxnOpResponse::Get(get)) => get.kvs().first().map(|kv| kv.value().to_vec()),
            _ => None,
        };
        match value {
            None => Ok(None),
            Some(value) => String::from_utf8_lossy(&value)
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| StoreError::config(format!("{key} does not hold a number of shards"))),
        }
    }

    /// Held or not, and the last holder, for each of `locks`: one
    /// transaction per 64 (etcd takes at most 128 operations in one).
    async fn read_owners(&self, locks: &[String]) -> Result<Vec<Owner>, StoreError> {
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
            let reply = self.txn(&txn).await?;
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

    async fn read_checkpoint(&self, lock: &str) -> Result<Option<Checkpoint>, StoreError> {
        read_checkpoint(&self.client, &self.patience, &self.shown, lock).await
    }

    /// Put the checkpoint if the holder's key still has the create revision
    /// that is its token; else name the holder now.
    async fn write_checkpoint(
        &self,
        lock: &str,
        key: &str,
        checkpoint: &Checkpoint,
    ) -> Result<Put, StoreError> {
        let oldest = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1);
        let txn = Txn::new()
            .when([Compare::create_revision(
                key,
                CompareOp::Equal,
                checkpoint.token as i64,
            )])
            .and_then([TxnOp::put(checkpoint_key(lock), checkpoint.to_json(), None)])
            .or_else([TxnOp::get(format!("{lock}/"), Some(oldest))]);
        let reply = self.txn(&txn).await?;
        if reply.succeeded() {
            return Ok(Put::Stored);
        }
        let holder = match reply.op_responses().first() {
            Some(TxnOpResponse::Get(get)) => get.kvs().first().map(holder_of),
            _ => None,
        };
        Ok(Put::Stale(match holder {
            Some(h) => format!(
                "lock {lock} is held by {h} now, not by token {}",
                checkpoint.token
            ),
            None => format!(
                "lock {lock} is free: token {} no longer holds it",
                checkpoint.token
            ),
        }))
    }
}

impl Etcd {
    /// One transaction, retried within the store's patience.
    async fn txn(&self, txn: &Txn) -> Result<etcd_client::TxnResponse, StoreError> {
        retry(&self.patience, || {
            let mut kv = self.client.kv_client();
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })
        .await
        .map_err(|e| e.unreachable(&self.shown, self.patience.within))
    }

    /// One read, retried within the store's patience.
    async fn get(
        &self,
        key: &str,
        options: Option<GetOptions>,
    ) -> Result<etcd_client::GetResponse, StoreError> {
        retry(&self.patience, || {
            let mut kv = self.client.kv_client();
            let options = options.clone();
            async move { kv.get(key, options).await }
        })
        .await
        .map_err(|e| e.unreachable(&self.shown, self.patience.within))
    }

    /// One delete, retried within the store's patience.
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        retry(&self.patience, || {
            let mut kv = self.client.kv_client();
            async move { kv.delete(key, None).await }
        })
        .await
        .map_err(|e| e.unreachable(&self.shown, self.patience.within))?;
        Ok(())
    }
}

impl Etcd {
    async fn read_status(&self, lock: &str) -> Result<LockStatus, StoreError> {
        let kvs = self.read(&format!("{lock}/")).await?;
        let keys: Vec<&KeyValue> = kvs.iter().filter(|kv| own_key(lock, kv)).collect();
        Ok(self.status_of(lock, &keys).await)
    }

    async fn read_list(&self, prefix: &str) -> Result<Vec<LockStatus>, StoreError> {
        let kvs = if prefix.is_empty() {
            let options = GetOptions::new()
                .with_all_keys()
                .with_sort(SortTarget::Create, SortOrder::Ascend);
            self.get("", Some(options)).await?.take_kvs()
        } else {
            self.read(prefix).await?
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
            out.push(self.status_of(lock, &keys).await);
        }
        Ok(out)
    }

    async fn read_check(&self, lock: &str, key: &str, token: u64) -> Result<Check, StoreError> {
        // One linearizable read, so that a check before each step stays cheap.
        let kvs = self.read(&format!("{lock}/")).await?;
        let holder = kvs.iter().find(|kv| own_key(lock, kv)).map(holder_of);
        Ok(Check::of(lock, key, token, holder))
    }

    /// The key of `holder`, if it still holds its place (same create
    /// revision: same token).
    async fn holder_key(&self, holder: &Holder) -> Result<Option<KeyValue>, StoreError> {
        let key = holder.key.as_str();
        let mut reply = self.get(key, None).await?;
        Ok(reply
            .take_kvs()
            .into_iter()
            .find(|kv| kv.create_revision() as u64 == holder.token))
    }
}

/// A break begun on the holder of `kv`.
struct EtcdBreaking<'a> {
    etcd: &'a Etcd,
    kv: KeyValue,
    /// The revision from which on its key's deletion is watched.
    after: i64,
}

impl Breaking for EtcdBreaking<'_> {
    fn ended(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(async move {
            self.etcd.gone(self.kv.key(), self.after).await;
            Ok(())
        })
    }

    fn end(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(self.etcd.end(&self.kv))
    }
}

impl Etcd {
    /// Ask the holder of `kv` to let go: its elect watches its own key, so
    /// write the request into the key's value, keeping its lease and its
    /// create revision (its place and its token). Returns the revision of
    /// the write, or `None` if the key changed meanwhile. A holder that is
    /// not elect's cannot be asked; it is left as it is.
    async fn ask_to_let_go(
        &self,
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
        let reply = retry(&self.patience, || {
            let mut c = self.client.kv_client();
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await
        .map_err(|e| StoreError::unavailable(format!("cannot ask the holder to let go: {e}")))?;
        Ok(reply
            .succeeded()
            .then(|| reply.header().map_or(0, |h| h.revision())))
    }

    /// The TTL the holder's lease was granted with: `None` for a key
    /// without a lease, which never expires; zero for a lease gone.
    async fn granted_ttl(&self, kv: &KeyValue) -> Result<Option<Duration>, StoreError> {
        if kv.lease() == 0 {
            return Ok(None);
        }
        let id = kv.lease();
        let reply = retry(&self.patience, || {
            let mut lease = self.client.lease_client();
            async move { lease.time_to_live(id, None).await }
        })
        .await
        .map_err(|e| e.unreachable(&self.shown, self.patience.within))?;
        Ok(Some(Duration::from_secs(
            reply.granted_ttl().max(0).unsigned_abs(),
        )))
    }

    /// Return once `key` no longer exists, looking from revision `after` on.
    async fn gone(&self, key: &[u8], mut after: i64) {
        let key = String::from_utf8_lossy(key).into_owned();
        loop {
            if let Err(e) = deleted(&self.client, key.as_bytes(), after).await {
                log::verbose(format_args!("watching {key} failed: {e}"));
                sleep(RETRY).await;
            }
            match key_exists(&self.client, &self.patience, &key).await {
                Ok(None) => return,
                Ok(Some(revision)) => after = revision,
                Err(e) => {
                    log::verbose(format_args!("checking {key} failed: {e}"));
                    sleep(RETRY).await;
                }
            }
        }
    }

    /// End the lease of the holder `kv` now: revoke it, or delete a key
    /// without a lease if it is still that holder's.
    async fn end(&self, kv: &KeyValue) -> Result<(), StoreError> {
        if kv.lease() != 0 {
            // A lease already gone is what we came for: its holder let go
            // (or expired) between our read and this request.
            revoke(&self.client, kv.lease(), &self.patience)
                .await
                .map_err(|e| {
                    StoreError::unavailable(format!("cannot revoke lease {:x}: {e}", kv.lease()))
                })?;
        } else {
            let txn = Txn::new()
                .when([Compare::create_revision(
                    kv.key(),
                    CompareOp::Equal,
                    kv.create_revision(),
                )])
                .and_then([TxnOp::delete(kv.key(), None)]);
            retry(&self.patience, || {
                let mut c = self.client.kv_client();
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await
            .map_err(StoreError::unavailable)?;
        }
        Ok(())
    }

    /// A linearizable read of `prefix`, sorted by create revision.
    async fn read(&self, prefix: &str) -> Result<Vec<KeyValue>, StoreError> {
        let options = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend);
        Ok(self.get(prefix, Some(options)).await?.take_kvs())
    }

    /// A holder's key as seen by others, with the time left on its lease
    /// (one more request: only `status` and `list` show it).
    async fn holder(&self, kv: &KeyValue) -> Holder {
        let mut holder = holder_of(kv);
        if kv.lease() != 0 {
            let mut lease = self.client.lease_client();
            if let Ok(Ok(reply)) =
                timeout(self.patience.within, lease.time_to_live(kv.lease(), None)).await
                && reply.ttl() >= 0
            {
                holder.ttl_left = Some(Duration::from_secs(reply.ttl().unsigned_abs()));
            }
        }
        holder
    }

    /// The status of `lock` from the keys directly under it, in create order.
    async fn status_of(&self, lock: &str, keys: &[&KeyValue]) -> LockStatus {
        let holder = match keys.first() {
            Some(kv) => Some(self.holder(kv).await),
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
}

/// A holder's key as seen by others, from the key alone.
fn holder_of(kv: &KeyValue) -> Holder {
    Holder {
        key: String::from_utf8_lossy(kv.key()).into_owned(),
        token: kv.create_revision().unsigned_abs(),
        record: HolderRecord::from_json(kv.value()),
        lease: (kv.lease() != 0).then(|| format!("{:x}", kv.lease())),
        ttl_left: None,
    }
}

/// Is `kv` a contender of the lock recipe: `<lock>/<its own lease in hex>`?
/// Returns the lock name.
fn contender(kv: &KeyValue) -> Option<&str> {
    let key = std::str::from_utf8(kv.key()).ok()?;
    let (lock, lease) = key.rsplit_once('/')?;
    (kv.lease() != 0 && i64::from_str_radix(lease, 16).ok()? == kv.lease() && !lock.is_empty())
        .then_some(lock)
}

/// What to check when etcd does not answer.
fn unreachable_hint(tls: bool) -> &'static str {
    match tls {
        // A server that rejects the client certificate closes the connection
        // without saying why.
        true => {
            "is etcd running there with TLS, and does it accept this client certificate (--cert, --key)?"
        }
        false => "is etcd running there? (--store, ELECT_STORE)",
    }
}

/// Run `op` until it succeeds, fails in a way retrying cannot fix, or
/// `patience` has passed. With several endpoints, a retry may reach another.
/// An attempt that gets no answer within [`Patience::attempt`] goes again.
async fn retry<T, F, Fut>(patience: &Patience, mut op: F) -> Result<T, Failed>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, etcd_client::Error>>,
{
    let give_up = Instant::now() + patience.within;
    let mut backoff = Duration::from_millis(25);
    let mut last = String::from("no answer");
    let mut probed = false;
    loop {
        let left = give_up.remaining();
        if left.is_zero() {
            return Err(Failed {
                why: Why::GaveUp,
                text: last,
            });
        }
        match timeout(left.min(patience.attempt()), op()).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) if is_refusal(&e) => {
                return Err(Failed {
                    why: Why::Refused,
                    text: describe(&e),
                });
            }
            Ok(Err(e)) => {
                last = describe(&e);
                // A refused connection is answered at once; only what can
                // heal by itself (a timeout, a member without a leader) is
                // worth the whole patience.
                if !probed && last.contains("connect") {
                    probed = true;
                    if nothing_listens(&patience.endpoints).await {
                        return Err(Failed {
                            why: Why::NothingListens,
                            text: "nothing listens there (connection refused)".into(),
                        });
                    }
                }
                log::verbose(format_args!("etcd request failed, retrying: {last}"));
                sleep(backoff.min(give_up.remaining())).await;
                backoff = (backoff * 2).min(RETRY);
            }
            Err(_) if !give_up.remaining().is_zero() => {
                log::verbose(format_args!(
                    "etcd request unanswered after {}, sending it again",
                    crate::clock::show(patience.attempt())
                ));
            }
            Err(_) => {}
        }
    }
}

/// Whether every endpoint refuses a TCP connection (none within a second
/// counts as maybe listening).
async fn nothing_listens(endpoints: &[String]) -> bool {
    for endpoint in endpoints {
        let attempt = tokio::net::TcpStream::connect(endpoint.as_str());
        match timeout(Duration::from_secs(1), attempt).await {
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
            _ => return false,
        }
    }
    true
}

/// How long to keep trying a request, and the endpoints to probe when one
/// cannot connect.
#[derive(Clone, Debug)]
struct Patience {
    within: Duration,
    endpoints: Arc<[String]>,
}

impl Patience {
    /// How long one attempt may wait for its answer: a third of the
    /// patience, at least a second. A request that reached a member just as
    /// its leader died is answered only after etcd's own request timeout
    /// (5 s plus two election timeouts), long after a new leader could have
    /// taken it; sent again, it is.
    fn attempt(&self) -> Duration {
        (self.within / 3).max(Duration::from_secs(1))
    }

    /// The same endpoints, with another time limit.
    fn for_(&self, within: Duration) -> Patience {
        Patience {
            within,
            endpoints: self.endpoints.clone(),
        }
    }
}

/// Why a retried request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Why {
    /// Refused (auth, permission, certificate): retrying would not help.
    Refused,
    /// Nothing listens at any endpoint.
    NothingListens,
    /// No answer within the patience.
    GaveUp,
}

#[derive(Debug)]
struct Failed {
    why: Why,
    text: String,
}

impl Failed {
    /// The error for a request to `shown` that failed so, with what to check.
    fn unreachable(&self, shown: &str, within: Duration) -> StoreError {
        let tls = shown.starts_with("etcds:");
        StoreError::unavailable(match self.why {
            Why::Refused => format!("{shown} refused the request: {self}{}", self.users_hint()),
            Why::NothingListens => {
                format!("cannot reach {shown}: {self}; {}", unreachable_hint(tls))
            }
            Why::GaveUp => format!(
                "cannot reach {shown} within {}: {self}; {}",
                crate::clock::show(within),
                unreachable_hint(tls)
            ),
        })
    }
}

impl Failed {
    /// What to change when etcd's users and elect's disagree, after "; ".
    pub(super) fn users_hint(&self) -> &'static str {
        if self.text.contains("authentication is not enabled") {
            "; this etcd has no users: leave out --user (and ELECT_USER, ETCDCTL_USER)"
        } else if self.text.contains("user name is empty") {
            "; this etcd has users: give --user NAME (and --password-file, or ELECT_PASSWORD)"
        } else {
            ""
        }
    }
}

impl From<Failed> for String {
    fn from(f: Failed) -> String {
        f.text
    }
}

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// One line for an etcd-client error.
fn describe(e: &etcd_client::Error) -> String {
    let mut text = match e {
        etcd_client::Error::GRpcStatus(s) if !s.message().is_empty() => s.message().to_string(),
        etcd_client::Error::GRpcStatus(s) => format!("{:?}", s.code()),
        other => other.to_string(),
    };
    // Transport errors say what went wrong only in their sources.
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        source = cause.source();
    }
    text.replace('\n', " ")
}

/// Errors that retrying will not fix: refusals, and certificates that do
/// not match (a TLS failure is never retried in the clear).
fn is_refusal(e: &etcd_client::Error) -> bool {
    use tonic::Code;
    let refused_code = matches!(e, etcd_client::Error::GRpcStatus(s)
        if matches!(s.code(), Code::PermissionDenied | Code::Unauthenticated | Code::InvalidArgument | Code::NotFound));
    let bad_input = matches!(
        e,
        etcd_client::Error::InvalidArgs(_) | etcd_client::Error::InvalidUri(_)
    );
    let text = describe(e).to_ascii_lowercase();
    let tls = [
        "certificate",
        "handshake",
        "unknownissuer",
        "invalid peer",
        "tls",
        "authentication failed",
        "authentication is not enabled",
    ]
    .iter()
    .any(|w| text.contains(w));
    refused_code || bad_input || tls
}

/// Revoke lease `id`, retrying for `patience`; a lease already gone is fine.
async fn revoke(client: &Client, id: i64, patience: &Patience) -> Result<(), StoreError> {
    let revoked = retry(patience, || {
        let mut lease = client.lease_client();
        async move { lease.revoke(id).await }
    })
    .await;
    match revoked {
        Ok(_) => Ok(()),
        Err(e) if e.text.contains("not found") => Ok(()),
        Err(e) => Err(StoreError::unavailable(e)),
    }
}

impl Etcd {
    /// Revoke lease `id` from outside its session (after its elect died).
    pub(super) async fn revoke(&self, id: i64, within: Duration) -> Result<(), StoreError> {
        revoke(&self.client, id, &self.patience.for_(within)).await
    }
}

/// Keys of `lock` itself, not of locks nested under it (`a/b` under `a`).
fn own_key(lock: &str, kv: &KeyValue) -> bool {
    kv.key()
        .strip_prefix(format!("{lock}/").as_bytes())
        .is_some_and(|rest| !rest.is_empty() && !rest.contains(&b'/'))
}

/// Block until `key` is deleted at a revision after `after`, or the
/// watch ends for another reason (then the caller looks again).
async fn deleted(client: &Client, key: &[u8], mut after: i64) -> Result<(), StoreError> {
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
    client: &Client,
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

async fn key_exists(
    client: &Client,
    patience: &Patience,
    key: &str,
) -> Result<Option<i64>, StoreError> {
    let reply = retry(patience, || {
        let mut kv = client.kv_client();
        async move { kv.get(key, Some(GetOptions::new().with_keys_only())).await }
    })
    .await
    .map_err(StoreError::unavailable)?;
    let revision = reply.header().map_or(0, |h| h.revision());
    Ok(reply.kvs().first().map(|_| revision))
}
