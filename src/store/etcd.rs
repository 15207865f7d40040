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
    KeyValue, LeaseKeepAliveStream, LeaseKeeper, PutOptions, SortOrder, SortTarget, TlsOptions,
    Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use tokio::time::{sleep, timeout};

use super::{
    Broken, Check, EtcdTarget, Forced, Holder, HolderRecord, Lease, LockStatus, Loss, Renewal,
    Renewer, Store, StoreError, Ticket, Turn,
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
    patience: Duration,
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
        // With a user, connecting authenticates, so it can fail like any request.
        let client = retry(connect_timeout, || {
            Client::connect(urls.clone(), Some(options.clone()))
        })
        .await
        .map_err(|e| match e.refused {
            true => StoreError::unavailable(format!("{shown} refused the connection: {e}")),
            false => StoreError::unavailable(format!(
                "cannot reach {shown} within {}: {e}; {}",
                humantime::format_duration(connect_timeout),
                unreachable_hint(target.tls)
            )),
        })?;
        Ok(Etcd {
            client,
            shown,
            patience: connect_timeout,
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
    type Lease = EtcdLease;

    async fn grant(&self, ttl: Duration, within: Duration) -> Result<EtcdLease, StoreError> {
        // etcd grants whole seconds; ask for at least what the user asked.
        let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        let secs = i64::try_from(secs).unwrap_or(i64::MAX);
        let (granted_at, reply) = retry(within, || {
            let mut lease = self.client.lease_client();
            async move {
                let sent = Instant::now();
                lease.grant(secs, None).await.map(|reply| (sent, reply))
            }
        })
        .await
        .map_err(|e| match e.refused {
            true => StoreError::unavailable(format!("{} refused the lease: {e}", self.shown)),
            false => StoreError::unavailable(format!(
                "cannot reach {} within {}: {e}; {}",
                self.shown,
                humantime::format_duration(within),
                unreachable_hint(self.shown.starts_with("etcds:"))
            )),
        })?;
        if reply.ttl() <= 0 {
            return Err(StoreError::unavailable(format!(
                "{} refused the lease: {}",
                self.shown,
                reply.error()
            )));
        }
        log::verbose(format_args!(
            "connected to {}; lease {:x} granted for {}s",
            self.shown,
            reply.id(),
            reply.ttl()
        ));
        Ok(EtcdLease {
            client: self.client.clone(),
            members: self.members.clone(),
            id: reply.id(),
            ttl: Duration::from_secs(reply.ttl().unsigned_abs()),
            granted_at,
            patience: within,
        })
    }

    async fn status(&self, lock: &str) -> Result<LockStatus, StoreError> {
        let kvs = self.read(&format!("{lock}/")).await?;
        let keys: Vec<&KeyValue> = kvs.iter().filter(|kv| own_key(lock, kv)).collect();
        Ok(self.status_of(lock, &keys).await)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<LockStatus>, StoreError> {
        let kvs = if prefix.is_empty() {
            let options = GetOptions::new()
                .with_all_keys()
                .with_sort(SortTarget::Create, SortOrder::Ascend);
            retry(self.patience, || {
                let mut kv = self.client.kv_client();
                let options = options.clone();
                async move { kv.get("", Some(options)).await }
            })
            .await
            .map_err(|e| {
                StoreError::unavailable(format!("cannot list locks in {}: {e}", self.shown))
            })?
            .take_kvs()
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

    async fn check(&self, lock: &str, key: &str, token: u64) -> Result<Check, StoreError> {
        // One linearizable read, so that a check before each step stays cheap.
        let kvs = self.read(&format!("{lock}/")).await?;
        let holder = kvs.iter().find(|kv| own_key(lock, kv)).map(holder_of);
        Ok(match holder {
            Some(h) if h.key == key && h.token == token => Check::Holder,
            Some(h) if h.key == key => Check::NotHolder(format!(
                "{key} holds the lock with token {}, not {token}",
                h.token
            )),
            Some(h) => Check::NotHolder(format!("the lock is held by {h}")),
            None => Check::NotHolder(format!("lock {lock} is free; {key} is gone")),
        })
    }

    async fn break_lock(
        &self,
        lock: &str,
        token: Option<u64>,
        force: bool,
    ) -> Result<Broken, StoreError> {
        // A holder can change between our read and our request: look again.
        for _ in 0..3 {
            let kvs = self.read(&format!("{lock}/")).await?;
            let Some(kv) = kvs.iter().find(|kv| own_key(lock, kv)) else {
                return Ok(Broken::Free);
            };
            let holder = holder_of(kv);
            if token.is_some_and(|t| t != holder.token) {
                return Ok(Broken::Changed(holder));
            }
            if force {
                self.end(kv).await?;
                return Ok(Broken::Forced {
                    holder,
                    why: Forced::Asked,
                });
            }
            let asked = Instant::now();
            let Some(revision) = self.ask_to_let_go(kv, &holder).await? else {
                continue;
            };
            // Its elect stops the command within its grace and revokes its
            // lease; a holder that does not answer would have lost the lease
            // within its TTL anyway.
            let patience = self.granted_ttl(kv).await;
            return match timeout(patience, self.gone(kv.key(), revision)).await {
                Ok(()) => Ok(Broken::Stopped {
                    holder,
                    after: asked.elapsed(),
                }),
                Err(_) => {
                    self.end(kv).await?;
                    Ok(Broken::Forced {
                        holder,
                        why: Forced::NoAnswer(patience),
                    })
                }
            };
        }
        Err(StoreError::unavailable(format!(
            "lock {lock} kept changing hands; nothing broken"
        )))
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
        record.break_request = Some(format!(
            "elect break from {} (pid {}) at {}",
            nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default(),
            std::process::id(),
            humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        ));
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
        let reply = retry(self.patience, || {
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

    /// The TTL the holder's lease was granted with (zero for a key without
    /// a lease, which never expires).
    async fn granted_ttl(&self, kv: &KeyValue) -> Duration {
        if kv.lease() == 0 {
            return Duration::ZERO;
        }
        let mut lease = self.client.lease_client();
        match timeout(self.patience, lease.time_to_live(kv.lease(), None)).await {
            Ok(Ok(reply)) if reply.granted_ttl() > 0 => {
                Duration::from_secs(reply.granted_ttl().unsigned_abs())
            }
            _ => Duration::ZERO,
        }
    }

    /// Return once `key` no longer exists, looking from revision `after` on.
    async fn gone(&self, key: &[u8], mut after: i64) {
        let key = String::from_utf8_lossy(key).into_owned();
        loop {
            if let Err(e) = deleted(&self.client, key.as_bytes(), after).await {
                log::verbose(format_args!("watching {key} failed: {e}"));
                sleep(RETRY).await;
            }
            match key_exists(&self.client, self.patience, &key).await {
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
            let id = kv.lease();
            retry(self.patience, || {
                let mut lease = self.client.lease_client();
                async move { lease.revoke(id).await }
            })
            .await
            .map_err(|e| StoreError::unavailable(format!("cannot revoke lease {id:x}: {e}")))?;
        } else {
            let txn = Txn::new()
                .when([Compare::create_revision(
                    kv.key(),
                    CompareOp::Equal,
                    kv.create_revision(),
                )])
                .and_then([TxnOp::delete(kv.key(), None)]);
            retry(self.patience, || {
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
        let mut reply = retry(self.patience, || {
            let mut kv = self.client.kv_client();
            let options = options.clone();
            async move { kv.get(prefix, Some(options)).await }
        })
        .await
        .map_err(|e| {
            StoreError::unavailable(format!("cannot read {} from {}: {e}", prefix, self.shown))
        })?;
        Ok(reply.take_kvs())
    }

    /// A holder's key as seen by others, with the time left on its lease
    /// (one more request: only `status` and `list` show it).
    async fn holder(&self, kv: &KeyValue) -> Holder {
        let mut holder = holder_of(kv);
        if kv.lease() != 0 {
            let mut lease = self.client.lease_client();
            if let Ok(Ok(reply)) =
                timeout(self.patience, lease.time_to_live(kv.lease(), None)).await
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
async fn retry<T, F, Fut>(patience: Duration, mut op: F) -> Result<T, Failed>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, etcd_client::Error>>,
{
    let give_up = Instant::now() + patience;
    let mut backoff = Duration::from_millis(25);
    let mut last = String::from("no answer");
    loop {
        let left = give_up.remaining();
        if left.is_zero() {
            return Err(Failed {
                refused: false,
                text: last,
            });
        }
        match timeout(left, op()).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) if is_refusal(&e) => {
                return Err(Failed {
                    refused: true,
                    text: describe(&e),
                });
            }
            Ok(Err(e)) => {
                last = describe(&e);
                log::verbose(format_args!("etcd request failed, retrying: {last}"));
                sleep(backoff.min(give_up.remaining())).await;
                backoff = (backoff * 2).min(RETRY);
            }
            Err(_) => {}
        }
    }
}

/// Why a retried request failed.
#[derive(Debug)]
struct Failed {
    /// Refused (auth, permission, certificate): retrying would not help.
    refused: bool,
    text: String,
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
    ]
    .iter()
    .any(|w| text.contains(w));
    refused_code || bad_input || tls
}

pub struct EtcdLease {
    client: Client,
    members: Members,
    id: i64,
    ttl: Duration,
    granted_at: Instant,
    /// How long to keep retrying a request before giving up.
    patience: Duration,
}

/// Keys of `lock` itself, not of locks nested under it (`a/b` under `a`).
fn own_key(lock: &str, kv: &KeyValue) -> bool {
    kv.key()
        .strip_prefix(format!("{lock}/").as_bytes())
        .is_some_and(|rest| !rest.is_empty() && !rest.contains(&b'/'))
}

impl EtcdLease {
    /// The keys of `lock` created at or before revision `mine`, newest
    /// first: usually just ours and the one ahead of it. Returns them with
    /// the revision of the read.
    async fn newest_up_to(
        &self,
        lock: &str,
        mine: i64,
    ) -> Result<(Vec<KeyValue>, i64), StoreError> {
        let read = |limit: i64| {
            let options = GetOptions::new()
                .with_prefix()
                .with_keys_only()
                .with_max_create_revision(mine)
                .with_sort(SortTarget::Create, SortOrder::Descend)
                .with_limit(limit);
            retry(self.patience, move || {
                let mut kv = self.client.kv_client();
                let options = options.clone();
                async move { kv.get(format!("{lock}/"), Some(options)).await }
            })
        };
        let mut reply = read(2).await.map_err(StoreError::unavailable)?;
        // Keys of nested locks (`lock/x/...`) can take those two places: then look at all.
        if reply.more() && reply.kvs().iter().any(|kv| !own_key(lock, kv)) {
            reply = read(0).await.map_err(StoreError::unavailable)?;
        }
        let revision = reply.header().map_or(0, |h| h.revision());
        Ok((reply.take_kvs(), revision))
    }
}

impl Lease for EtcdLease {
    type Renewer = EtcdRenewer;

    fn id(&self) -> String {
        format!("{:x}", self.id)
    }

    fn ttl(&self) -> Option<Duration> {
        Some(self.ttl)
    }

    fn granted_at(&self) -> Instant {
        self.granted_at
    }

    fn renewer(&self) -> EtcdRenewer {
        EtcdRenewer {
            client: self.client.clone(),
            members: self.members.clone(),
            member: None,
            id: self.id,
            ttl: self.ttl,
            stream: None,
        }
    }

    async fn enqueue(&self, lock: &str, record: &HolderRecord) -> Result<Ticket, StoreError> {
        let key = format!("{lock}/{:x}", self.id);
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.as_str(),
                record.to_json(),
                Some(PutOptions::new().with_lease(self.id)),
            )])
            .or_else([TxnOp::get(key.as_str(), None)]);
        // Retrying is safe: a second attempt finds our key and its place.
        let reply = retry(self.patience, || {
            let mut kv = self.client.kv_client();
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })
        .await
        .map_err(|e| {
            let hint = match e.text.contains("permission denied") {
                true => format!(
                    "; the etcd user needs readwrite permission on the key prefix '{lock}/'"
                ),
                false => String::new(),
            };
            StoreError::unavailable(format!("cannot queue for lock {lock}: {e}{hint}"))
        })?;
        let token = if reply.succeeded() {
            reply.header().map_or(0, |h| h.revision())
        } else {
            // Our key exists already (a retried request): its creation is our place.
            match reply.op_responses().first() {
                Some(TxnOpResponse::Get(get)) => {
                    get.kvs().first().map_or(0, |kv| kv.create_revision())
                }
                _ => 0,
            }
        };
        if token <= 0 {
            return Err(StoreError::gone(format!("etcd gave no revision for {key}")));
        }
        log::verbose(format_args!(
            "queued for lock {lock} as {key} (token {token})"
        ));
        Ok(Ticket {
            key,
            rank: token.unsigned_abs(),
        })
    }

    async fn wait_turn(
        &self,
        lock: &str,
        ticket: &Ticket,
        until: Option<Instant>,
    ) -> Result<Turn, StoreError> {
        let mine = i64::try_from(ticket.rank).unwrap_or(i64::MAX);
        loop {
            // One read answers both questions: is our key still there (a
            // lease that expired while we queued leaves none, and etcd 3.4's
            // own recipe reports success anyway), and who is just ahead of us.
            let (reply, revision) = match self.newest_up_to(lock, mine).await {
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
                        ticket.key
                    )));
                }
            }
            let Some(ahead) = own.next() else {
                return Ok(Turn::First(ticket.rank));
            };
            if until.is_some_and(|at| at.remaining().is_zero()) {
                return Ok(Turn::Busy);
            }
            log::verbose(format_args!(
                "waiting for {} (token {}) to go",
                String::from_utf8_lossy(ahead.key()),
                ahead.create_revision()
            ));
            let deleted = deleted(&self.client, ahead.key(), revision);
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

    async fn lost(&self, ticket: &Ticket) -> Loss {
        let mut after = i64::try_from(ticket.rank).unwrap_or(i64::MAX);
        loop {
            match changed(&self.client, ticket.key.as_bytes(), after).await {
                Ok(Some(value)) => match HolderRecord::from_json(&value)
                    .and_then(|r| r.break_request)
                {
                    Some(request) => return Loss::Asked(format!("{request} asked it to let go")),
                    None => continue,
                },
                Ok(None) => {}
                Err(e) => {
                    log::verbose(format_args!("watching {} failed: {e}", ticket.key));
                    sleep(RETRY).await;
                }
            }
            // The watch ended: a deletion, a compaction or a broken stream. Look.
            match key_exists(&self.client, self.patience, &ticket.key).await {
                Ok(None) => {
                    return Loss::Gone(format!(
                        "{} was deleted from etcd (lease revoked or expired)",
                        ticket.key
                    ));
                }
                Ok(Some(revision)) => after = revision,
                Err(e) => {
                    log::verbose(format_args!("checking {} failed: {e}", ticket.key));
                    sleep(RETRY).await;
                }
            }
        }
    }

    async fn release(&self) -> Result<(), StoreError> {
        let revoked = retry(self.patience, || {
            let mut lease = self.client.lease_client();
            async move { lease.revoke(self.id).await }
        })
        .await;
        match revoked {
            Ok(_) => Ok(()),
            // Revoking a lease that already expired is not a failure.
            Err(e) if e.text.contains("not found") => Ok(()),
            Err(e) => Err(StoreError::unavailable(e)),
        }
    }
}

/// Block until `key` is deleted at a revision after `after`, or the
/// watch ends for another reason (then the caller looks again).
async fn deleted(client: &Client, key: &[u8], after: i64) -> Result<(), StoreError> {
    let options = WatchOptions::new().with_start_revision(after + 1);
    let mut watch = client.watch_client();
    let mut stream = watch
        .watch(key.to_vec(), Some(options))
        .await
        .map_err(|e| StoreError::unavailable(describe(&e)))?;
    loop {
        match stream.message().await {
            Ok(Some(reply)) => {
                if reply.canceled() {
                    // Compacted or cancelled by the server: look again.
                    return Ok(());
                }
                if reply
                    .events()
                    .iter()
                    .any(|e| e.event_type() == EventType::Delete)
                {
                    return Ok(());
                }
            }
            Ok(None) => return Err(StoreError::unavailable("watch ended")),
            Err(e) => return Err(StoreError::unavailable(describe(&e))),
        }
    }
}

/// Watch `key` from revision `after` on: `Some(value)` when it is put,
/// `None` when it is deleted or the watch ends (then the caller looks).
async fn changed(client: &Client, key: &[u8], after: i64) -> Result<Option<Vec<u8>>, StoreError> {
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
                        (EventType::Put, Some(kv)) => Some(kv.value().to_vec()),
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
    patience: Duration,
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
    async fn renew(&mut self) -> Result<Renewal, StoreError> {
        if self.stream.is_none() {
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
        }
        let (keeper, replies) = self.stream.as_mut().expect("opened above");
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

    fn reset(&mut self) {
        self.stream = None;
        if let Some(left) = self.member {
            self.members.forget(left);
        }
        // Every member can renew (followers forward to the leader).
        self.member = Some(self.members.next());
    }
}
