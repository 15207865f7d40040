//! The ZooKeeper store: the standard lock recipe, as Apache Curator's
//! `InterProcessMutex` keeps it, so that elect and Java services lock each
//! other out.
//!
//! - Under `<chroot>/<lock>`, each contender creates an ephemeral
//!   sequential node named as Curator's protected mode names it,
//!   `_c_<uuid>-lock-<seq>`: a create whose reply was lost is found again by
//!   its uuid instead of leaving a ghost that blocks everyone. Parents are
//!   container nodes, which the server removes once empty.
//! - The holder is the lowest sequence; each waiter watches only the node
//!   just before it, so a release wakes one waiter.
//! - The token is the czxid of our node: cluster-wide and rising with
//!   creation order. Not the sequence, a per-parent counter that starts
//!   again when a container parent is removed and created anew.
//! - The session is the lease: its timeout is `--ttl`, as the servers
//!   negotiate it. elect judges loss itself from the send time of the last
//!   renewal the leader is proven to have counted: every TTL/3 a `sync`, and
//!   another tickTime/2 after its answer. A follower answers reads on its
//!   own, even cut off from the leader, which alone expires sessions, and
//!   tells the leader of its clients' requests only in its answer to the
//!   leader's ping, every tickTime/2: the second `sync` leaves after that
//!   answer. So the command is dead before the session could expire.
//!   tickTime/2 is taken as a quarter of the servers' minSessionTimeout:
//!   ZooKeeper's default is 2 × tickTime, and a server set to less breaks
//!   that.
//!
//! Checkpoints, shard counts and a shard's last holder live in persistent
//! nodes beside the lock's node (`<lock>.checkpoint`, `.shards`, `.last`),
//! never among its children, where Curator would take them for contenders.

mod greeting;
mod inspect;
mod lock;
mod session;
mod target;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use zookeeper_client::{Acls, Client, CreateMode, Error as ZkError, MultiWriteError};

use crate::log;
use crate::store::Token;
use crate::store::retry::{self, GaveUp, Worth};
use crate::store::rewind::Mark;
use crate::store::tls;
use crate::store::{
    Boxed, Breaking, Fence, Holder, LockStatus, Look, Put, Record, Session, Store, StoreError,
    Versioned,
};
pub use target::{KIND, ZkTarget};

/// The ZooKeeper session of `status`, `list`, `check` and `break`.
const INSPECTION_TIMEOUT: Duration = Duration::from_secs(10);

/// What it takes to end a dead elect's session from another process: its
/// lock nodes, deleted by path.
#[derive(Serialize, Deserialize)]
struct ReleaseOrder {
    target: ZkTarget,
    nodes: Vec<String>,
}

/// A ZooKeeper store; its session is made on first use (for `elect run`,
/// with the lease's timeout).
pub struct ZooKeeper {
    target: ZkTarget,
    within: Duration,
    /// Held while one is made: looks made at once (a run's first look
    /// reads the lock and a record together) share one connection.
    client: tokio::sync::Mutex<Option<Client>>,
    /// The highest zxid this process has seen handed out as a token
    /// ([`crate::store::rewind`]), for every session.
    mark: Mark,
}

impl ZooKeeper {
    pub fn new(target: ZkTarget, within: Duration) -> ZooKeeper {
        ZooKeeper {
            target,
            within,
            client: tokio::sync::Mutex::new(None),
            mark: Mark::default(),
        }
    }

    /// A new session with `timeout`, and the timeout the servers granted.
    async fn connect(&self, timeout: Duration) -> Result<Client, StoreError> {
        connect(&self.target, timeout, self.within).await
    }

    /// The session for reads and writes outside a lock.
    async fn client(&self) -> Result<Client, StoreError> {
        let mut held = self.client.lock().await;
        if let Some(client) = held.as_ref()
            && !client.state().is_terminated()
        {
            return Ok(client.clone());
        }
        let client = self.connect(INSPECTION_TIMEOUT).await?;
        *held = Some(client.clone());
        Ok(client)
    }

    /// Delete the nodes of a dead elect's session, for its guard.
    pub async fn release_nodes(
        target: ZkTarget,
        nodes: &[String],
        within: Duration,
    ) -> Result<ZooKeeper, StoreError> {
        let store = ZooKeeper::new(target, within);
        let client = store.client().await?;
        for node in nodes {
            match client.delete(node, None).await {
                Ok(()) | Err(ZkError::NoNode) => {}
                Err(e) => return Err(failed(&e, "delete", node)),
            }
        }
        Ok(store)
    }

    /// The locks under `prefix` with a history: a node `NAME.history`
    /// beside a lock's node names one.
    async fn read_recorded(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let mut found = Vec::new();
        for (name, children) in self.tree().await? {
            for child in children {
                let Some(lock) = child.strip_suffix(HISTORY_NODE) else {
                    continue;
                };
                let lock = match name.is_empty() {
                    true => lock.to_string(),
                    false => format!("{name}/{lock}"),
                };
                if lock.starts_with(prefix) {
                    found.push(lock);
                }
            }
        }
        found.sort();
        found.dedup();
        Ok(found)
    }

    /// The longest session timeout the servers grant: no session, a
    /// holder's that elect did not start among them, outlives its client
    /// by more. Asked for by requesting a day, which the servers cut down.
    async fn longest_session(&self) -> Result<Duration, StoreError> {
        let client = self.connect(A_DAY).await?;
        Ok(client.session_timeout())
    }
    /// Write `data` at `path` if the holder of `key` still holds `lock`
    /// with `token`.
    async fn write_held(
        &self,
        lock: &str,
        path: &str,
        data: &[u8],
        key: &str,
        token: Token,
    ) -> Result<Put, StoreError> {
        let client = self.client().await?;
        let path = path.to_string();
        ensure_parent(&client, &path).await?;
        // The holder's node, made by the token's transaction (its czxid),
        // unchanged since we looked (its version), and the write, in one
        // multi-op. A node is never made again under its name: it is
        // sequential, and named by a uuid.
        let mut create = false;
        for _ in 0..5 {
            let version = match client.check_stat(key).await {
                Ok(Some(stat)) if Token::new(stat.czxid as u64) == token => stat.version,
                Ok(_) => {
                    return Ok(Put::Stale(format!(
                        "token {token} no longer holds lock {lock}"
                    )));
                }
                Err(e) => return Err(failed(&e, "read", key)),
            };
            let mut multi = client.new_multi_writer();
            let added = multi
                .add_check_version(key, version)
                .and_then(|()| match create {
                    false => multi.add_set_data(&path, data, None),
                    true => multi.add_create(
                        &path,
                        data,
                        &CreateMode::Persistent.with_acls(Acls::anyone_all()),
                    ),
                });
            added.map_err(|e| failed(&e, "write", &path))?;
            match multi.commit().await {
                Ok(_) => return Ok(Put::Stored),
                // Deleted, or changed (a break request): look again.
                Err(MultiWriteError::OperationFailed { index: 0, .. }) => {}
                // Not there yet (create it), or created meanwhile (set it).
                Err(MultiWriteError::OperationFailed {
                    source: ZkError::NoNode | ZkError::NodeExists,
                    ..
                }) => create = !create,
                Err(e) => return Err(failed(&ZkError::from(e), "write", &path)),
            }
        }
        Err(StoreError::unavailable(format!(
            "{path} or the holder's node {key} kept changing"
        )))
    }
}

/// Connect a session of `timeout` to `target`, trying for `within`, as
/// every store retries ([`crate::store::retry`]).
async fn connect(
    target: &ZkTarget,
    timeout: Duration,
    within: Duration,
) -> Result<Client, StoreError> {
    // An attempt may hang (a connection reset in the handshake is not
    // always noticed by the client): several attempts fit in `within`.
    let each = retry::attempt_within(within);
    let connector = connector(target, timeout, each.min(timeout))?;
    let shown = target.to_string();
    let attempt = || {
        let connector = connector.clone();
        async move {
            match target.tls.is_some() {
                true => connector.secure_connect(&target.connect_string()).await,
                false => connector.connect(&target.connect_string()).await,
            }
        }
    };
    let worth_retrying = |e: &ZkError| match e {
        ZkError::AuthFailed | ZkError::NoAuth => Worth::No,
        // The client keeps only the words of the I/O error it met.
        e if crate::descriptors::in_text(&e.to_string()).is_some() => Worth::No,
        // A certificate refused is not going to pass. The client keeps the
        // TLS library's error to itself (a failed handshake is a lost
        // connection to it): only its words, where it has any, say so.
        e if e.to_string().to_ascii_lowercase().contains("certificate") => Worth::No,
        e => {
            log::verbose(format_args!("connecting to {shown}: {e}; trying again"));
            Worth::Yes
        }
    };
    let what = format!("connecting to {shown}");
    let error = match retry::retry(&what, within, each, attempt, worth_retrying).await {
        Ok(client) => return chrooted(client, target).await,
        Err(GaveUp::Refused(e)) => e,
        Err(GaveUp::Bound(last)) => {
            // A TLS handshake that fails says nothing: the client only
            // tries again.
            let hint = match target.tls {
                Some(_) => {
                    "is ZooKeeper serving TLS there, with a certificate that --cacert \
                            signed, and does it accept this client certificate (--cert, --key)?"
                }
                // A server without a quorum of its ensemble turns clients
                // away, as does one at its limit of connections from one
                // address (a herd of elects on one host).
                None => {
                    "is ZooKeeper running there, with a quorum of its ensemble, and short \
                     of its maxClientCnxns from this address? (--store, ELECT_STORE)"
                }
            };
            return Err(StoreError::unavailable(format!(
                "cannot reach {shown} within {}: {}; {hint}",
                crate::clock::show(within),
                last.unwrap_or(ZkError::Timeout)
            )));
        }
    };
    if let Some(errno) = crate::descriptors::in_text(&error.to_string()) {
        return Err(StoreError::out_of_descriptors(errno));
    }
    match error {
        ZkError::AuthFailed | ZkError::NoAuth => Err(StoreError::denied(format!(
            "{shown} refused us: authentication failed for user {}",
            target.user.as_deref().unwrap_or("(none)")
        ))),
        e => Err(tls::Refused::new(tls::Why::Certificate, e.to_string()).error(&shown)),
    }
}

/// A client for `target`, its session asking for `timeout`, each attempt
/// to connect given `connection`.
fn connector(
    target: &ZkTarget,
    timeout: Duration,
    connection: Duration,
) -> Result<zookeeper_client::Connector, StoreError> {
    let mut connector = Client::connector()
        .with_session_timeout(timeout)
        .with_connection_timeout(connection);
    if let (Some(user), Some(password)) = (&target.user, &target.password) {
        connector =
            connector.with_auth("digest", format!("{user}:{}", password.expose()).as_bytes());
    }
    if let Some(tls) = &target.tls {
        let mut options = zookeeper_client::TlsOptions::new()
            .with_pem_ca(&tls.ca)
            .map_err(|e| StoreError::config(format!("--cacert: {e}")))?;
        if let Some((cert, key)) = &tls.identity {
            options = options
                .with_pem_identity(cert, key.expose())
                .map_err(|e| StoreError::config(format!("--cert and --key: {e}")))?;
        }
        connector = connector.with_tls(options);
    }
    Ok(connector)
}

/// The first session [`shortest_session`] asks for: a round trip on a
/// local network, well under any minSessionTimeout (2 × tickTime).
const FIRST_ASK: Duration = Duration::from_millis(25);

/// A session longer than any server grants, to learn their maximum.
const A_DAY: Duration = Duration::from_secs(86_400);

/// The shortest session the servers of `target` grant (their
/// minSessionTimeout), or else one as short as `below` or shorter, if
/// none is shorter than `below`.
///
/// A session asked for shorter than that is raised to the servers'
/// minimum. But the client gives a session's first connection only as long
/// as the session asked for, so a millisecond would fail on any real
/// network: ask for 25 ms, then four times longer each time the connection
/// does not come in time. A session a server granted is as good an answer
/// as any shorter one: the servers' minimum is no longer.
async fn shortest_session(target: &ZkTarget, below: Duration) -> Result<Duration, StoreError> {
    // Not a backoff: no pause comes between the attempts; what grows is
    // the session asked for, and with it the time its connection is given.
    let mut ask = FIRST_ASK;
    while ask < below {
        // The client's connection timeout at 3/5 of the session: its
        // attempt at a server's answer then takes that long, not a tick.
        let connector = connector(target, ask, ask * 3 / 5)?;
        let attempt = tokio::time::timeout(ask * 2, async {
            match target.tls.is_some() {
                true => connector.secure_connect(&target.connect_string()).await,
                false => connector.connect(&target.connect_string()).await,
            }
        })
        .await;
        match attempt {
            // Dropped, it closes.
            Ok(Ok(client)) => return Ok(client.session_timeout()),
            Ok(Err(ZkError::AuthFailed | ZkError::NoAuth)) => {
                return Err(StoreError::denied("authentication failed"));
            }
            Ok(Err(_)) | Err(_) => ask *= 4,
        }
    }
    Ok(below)
}

/// A chroot must exist: elect never creates one (a typo would silently
/// split the locks in two).
async fn chrooted(client: Client, target: &ZkTarget) -> Result<Client, StoreError> {
    if target.chroot.is_empty() {
        return Ok(client);
    }
    match client.check_stat("/").await {
        Ok(Some(_)) => Ok(client),
        Ok(None) | Err(ZkError::NoNode) => Err(StoreError::config(format!(
            "{target}: the chroot {} does not exist; create it, or leave it out of the URL",
            target.chroot
        ))),
        Err(e) => Err(failed(&e, "read", "/")),
    }
}

/// The node of `lock`: its contenders are its children.
/// The nodes beside a lock's that hold its history and its slots done.
const HISTORY_NODE: &str = ".history";
const SLOTS_NODE: &str = ".slots";

pub(super) fn lock_path(lock: &str) -> String {
    format!("/{}", lock.trim_start_matches('/'))
}

/// Create the parents of `path` as container nodes, as far as missing.
async fn ensure_parent(client: &Client, path: &str) -> Result<(), StoreError> {
    let Some((parent, _)) = path.rsplit_once('/') else {
        return Ok(());
    };
    if parent.is_empty() {
        return Ok(());
    }
    match client
        .mkdir(parent, &CreateMode::Container.with_acls(Acls::anyone_all()))
        .await
    {
        Ok(()) => Ok(()),
        Err(ZkError::NoNode) => Err(StoreError::config(
            "the chroot does not exist; create it, or leave it out of the URL",
        )),
        Err(e) => Err(failed(&e, "create", parent)),
    }
}

/// Is `name` a contender of the recipe (ours: `_c_<uuid>-lock-N`; Curator's
/// without protection: `lock-N`)?
fn is_contender(name: &str) -> bool {
    sequence(name).is_some()
}

/// The sequence of a contender's node: the digits after the last `lock-`,
/// as Curator sorts them.
fn sequence(name: &str) -> Option<i64> {
    let at = name.rfind("lock-")?;
    name[at + 5..].parse().ok()
}

/// The contenders among `children`, in queue order.
fn queue(children: Vec<String>) -> Vec<(String, i64)> {
    let mut nodes: Vec<(String, i64)> = children
        .into_iter()
        .filter_map(|name| sequence(&name).map(|seq| (name, seq)))
        .collect();
    nodes.sort_by_key(|(_, seq)| *seq);
    nodes
}

/// A failed request, for the user.
fn failed(e: &ZkError, what: &str, path: &str) -> StoreError {
    match e {
        ZkError::NoAuth | ZkError::AuthFailed => {
            StoreError::denied(format!("ZooKeeper refused to {what} {path}: no permission"))
        }
        ZkError::SessionExpired => StoreError::gone(format!("{what} {path}: the session expired")),
        e => StoreError::unavailable(format!("cannot {what} {path}: {e}")),
    }
}

impl Store for ZooKeeper {
    fn open_session(
        &self,
        ttl: Duration,
        _within: Duration,
    ) -> Boxed<'_, Result<Box<dyn Session + '_>, StoreError>> {
        Box::pin(async move {
            let session: Box<dyn Session + '_> =
                Box::new(session::ZkSession::open(self, ttl).await?);
            Ok(session)
        })
    }

    fn status<'a>(&'a self, lock: &'a str) -> Boxed<'a, Result<LockStatus, StoreError>> {
        Box::pin(self.read_status(lock))
    }

    fn look<'a>(
        &'a self,
        lock: &'a str,
        record: Option<Record<'a>>,
        holder: bool,
    ) -> Boxed<'a, Result<Look, StoreError>> {
        Box::pin(self.first_look(lock, record, holder))
    }

    fn list<'a>(&'a self, prefix: &'a str) -> Boxed<'a, Result<Vec<LockStatus>, StoreError>> {
        Box::pin(self.read_list(prefix.trim_start_matches('/')))
    }

    fn begin_break<'a>(
        &'a self,
        _lock: &'a str,
        holder: &'a Holder,
        ask: bool,
    ) -> Boxed<'a, Result<Option<Box<dyn Breaking + 'a>>, StoreError>> {
        Box::pin(async move {
            let breaking = self.break_holder(holder, ask).await?;
            Ok(breaking.map(|b| Box::new(b) as Box<dyn Breaking + 'a>))
        })
    }

    fn lease_ttl<'a>(
        &'a self,
        _lock: &'a str,
        _holder: &'a Holder,
    ) -> Boxed<'a, Result<Option<Duration>, StoreError>> {
        Box::pin(async move { self.longest_session().await.map(Some) })
    }

    fn record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
    ) -> Boxed<'a, Result<Option<Versioned>, StoreError>> {
        Box::pin(async move {
            let path = format!("{}{}", lock_path(lock), record.suffix());
            let client = self.client().await?;
            match client.get_data(&path).await {
                Ok((data, stat)) => Ok(Some(Versioned {
                    value: String::from_utf8_lossy(&data).into_owned(),
                    version: stat.version as u64,
                })),
                Err(ZkError::NoNode) => Ok(None),
                Err(e) => Err(failed(&e, "read", &path)),
            }
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
            let path = format!("{}{}", lock_path(lock), record.suffix());
            let changed = || Ok(Put::Stale(format!("{path} changed meanwhile")));
            let client = self.client().await?;
            match fence {
                Fence::Holder { key, token } => {
                    self.write_held(lock, &path, value.as_bytes(), key, token)
                        .await
                }
                Fence::Version(None) => {
                    ensure_parent(&client, &path).await?;
                    let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
                    match client.create(&path, value.as_bytes(), &options).await {
                        Ok(_) => Ok(Put::Stored),
                        Err(ZkError::NodeExists) => changed(),
                        Err(e) => Err(failed(&e, "create", &path)),
                    }
                }
                Fence::Version(Some(v)) => {
                    let version = i32::try_from(v).unwrap_or(i32::MAX);
                    match client
                        .set_data(&path, value.as_bytes(), Some(version))
                        .await
                    {
                        Ok(_) => Ok(Put::Stored),
                        Err(ZkError::BadVersion | ZkError::NoNode) => changed(),
                        Err(e) => Err(failed(&e, "write", &path)),
                    }
                }
                Fence::Any => {
                    let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
                    for _ in 0..4 {
                        match client.set_data(&path, value.as_bytes(), None).await {
                            Ok(_) => return Ok(Put::Stored),
                            Err(ZkError::NoNode) => {}
                            Err(e) => return Err(failed(&e, "write", &path)),
                        }
                        ensure_parent(&client, &path).await?;
                        match client.create(&path, value.as_bytes(), &options).await {
                            Ok(_) => return Ok(Put::Stored),
                            Err(ZkError::NodeExists) => {}
                            Err(e) => return Err(failed(&e, "create", &path)),
                        }
                    }
                    changed()
                }
            }
        })
    }

    fn delete_record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
    ) -> Boxed<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let path = format!("{}{}", lock_path(lock), record.suffix());
            match self.client().await?.delete(&path, None).await {
                Ok(()) | Err(ZkError::NoNode) => Ok(()),
                Err(e) => Err(failed(&e, "delete", &path)),
            }
        })
    }

    fn recorded<'a>(&'a self, prefix: &'a str) -> Boxed<'a, Result<Vec<String>, StoreError>> {
        Box::pin(self.read_recorded(prefix.trim_start_matches('/')))
    }

    fn tenures<'a>(
        &'a self,
        lock: &'a str,
        values: bool,
    ) -> Boxed<'a, Result<Vec<(String, String)>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let parent = format!(
                "{}{}",
                lock_path(lock),
                crate::store::HISTORY.trim_end_matches('/')
            );
            let ids = match client.list_children(&parent).await {
                Ok(ids) => ids,
                Err(ZkError::NoNode) => return Ok(Vec::new()),
                Err(e) => return Err(failed(&e, "list", &parent)),
            };
            let mut found = Vec::with_capacity(ids.len());
            for id in ids {
                let value = match values {
                    true => match client.get_data(&format!("{parent}/{id}")).await {
                        Ok((data, _)) => String::from_utf8_lossy(&data).into_owned(),
                        // Trimmed meanwhile.
                        Err(ZkError::NoNode) => continue,
                        Err(e) => return Err(failed(&e, "read", &parent)),
                    },
                    false => String::new(),
                };
                found.push((id, value));
            }
            Ok(found)
        })
    }
}
