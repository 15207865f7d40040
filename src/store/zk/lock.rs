//! Our node in one lock's queue, as Apache Curator's `InterProcessMutex`
//! keeps it: created in protected mode, found again by its uuid after a
//! lost reply, the holder the lowest sequence, each waiter watching the
//! node just before it.

use zookeeper_client::{Acls, CreateMode, Error as ZkError, EventType, SessionState};

use super::session::{CALL_AGAIN, LOOK_AGAIN, ZkSession};
use super::{ensure_parent, failed, lock_path, queue};
use crate::clock::{Instant, sleep_until};
use crate::log;
use crate::store::Token;
use crate::store::{Boxed, Checkpoint, HolderRecord, Lock, Loss, StoreError, Turn};

/// How ZooKeeper's counter is named in messages.
const ZXID: &str = "ZooKeeper's zxid";

/// What a restore of ZooKeeper means for the tokens, for a waiter that
/// found it went back: ZooKeeper has no way to restore above them.
const RESTORE: &str = "an elect started now takes the lock with a lower token, which a \
     resource that keeps the highest token it has seen refuses";

/// Our node in one lock's queue.
pub(super) struct ZkLock<'s> {
    session: &'s ZkSession,
    lock: String,
    /// The lock's node.
    path: String,
    /// Our node: `<path>/_c_<uuid>-lock-<seq>`.
    key: String,
    seq: i64,
    /// Our node's czxid: the token.
    czxid: i64,
    record: HolderRecord,
}

impl<'s> ZkLock<'s> {
    /// Create our node, as Curator's protected mode does: a create whose
    /// reply was lost is found again by its uuid.
    pub(super) async fn create(
        session: &'s ZkSession,
        lock: String,
        record: HolderRecord,
    ) -> Result<ZkLock<'s>, StoreError> {
        let path = lock_path(&lock);
        let prefix = format!("_c_{}-lock-", uuid());
        session
            .creating
            .borrow_mut()
            .push((path.clone(), prefix.clone()));
        let floor = session.mark.floor();
        let made = Self::try_create(session, lock, record, &path, &prefix).await;
        session.creating.borrow_mut().retain(|(_, p)| p != &prefix);
        let made = made?;
        // No place under a token at or below one handed out before.
        if let Err(rewound) = session.mark.token(floor, made.czxid.max(0).unsigned_abs()) {
            let _ = Lock::leave(&made).await;
            return Err(rewound.error(ZXID, &made.lock, RESTORE));
        }
        Ok(made)
    }

    /// [`ZkLock::create`]'s attempts.
    async fn try_create(
        session: &'s ZkSession,
        lock: String,
        record: HolderRecord,
        path: &str,
        prefix: &str,
    ) -> Result<ZkLock<'s>, StoreError> {
        let client = &session.client;
        let path = path.to_string();
        let node = format!("{path}/{prefix}");
        let data = record.to_json();
        let options = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        let mut made_parents = false;
        for _ in 0..10 {
            match client.create(&node, data.as_bytes(), &options).await {
                Ok((stat, sequence)) => {
                    let key = format!("{node}{sequence}");
                    session.nodes.borrow_mut().push(key.clone());
                    return Ok(ZkLock {
                        session,
                        lock,
                        path,
                        seq: sequence.into_i64(),
                        czxid: stat.czxid,
                        key,
                        record,
                    });
                }
                Err(ZkError::NoNode) if !made_parents => {
                    made_parents = true;
                    ensure_parent(client, &node).await?;
                }
                Err(e) if definite(&e) => return Err(failed(&e, "create", &node)),
                Err(e) => {
                    // Made or not? Our uuid says.
                    log::verbose(format_args!("creating {node}: {e}; looking for it"));
                    if let Some((key, seq, czxid)) = Self::find(session, &path, prefix).await? {
                        log::verbose(format_args!(
                            "the reply to our create was lost; found our node {key} again"
                        ));
                        session.nodes.borrow_mut().push(key.clone());
                        return Ok(ZkLock {
                            session,
                            lock,
                            path,
                            key,
                            seq,
                            czxid,
                            record,
                        });
                    }
                }
            }
        }
        Err(StoreError::unavailable(format!(
            "cannot create {node}: ZooKeeper keeps failing"
        )))
    }

    /// Our node under `path`, by its protected prefix, if the create took:
    /// its path, sequence and czxid.
    async fn find(
        session: &ZkSession,
        path: &str,
        prefix: &str,
    ) -> Result<Option<(String, i64, i64)>, StoreError> {
        let client = &session.client;
        // As long as the session could live without us: then it is gone,
        // and with it any node it made.
        let give_up = Instant::now() + session.ttl;
        loop {
            if give_up.remaining().is_zero() {
                return Err(StoreError::unavailable(format!(
                    "cannot look for our node under {path}: not connected again"
                )));
            }
            let children = match client.list_children(path).await {
                Ok(children) => children,
                Err(ZkError::NoNode) => return Ok(None),
                Err(e) if definite(&e) => return Err(failed(&e, "list", path)),
                // Not connected again yet: the session lives on meanwhile.
                Err(_) => {
                    tokio::time::sleep(CALL_AGAIN).await;
                    continue;
                }
            };
            let Some(name) = children.into_iter().find(|c| c.starts_with(prefix)) else {
                return Ok(None);
            };
            let key = format!("{path}/{name}");
            let (_, stat) = client
                .get_data(&key)
                .await
                .map_err(|e| failed(&e, "read", &key))?;
            let seq = super::sequence(&name).unwrap_or(0);
            return Ok(Some((key, seq, stat.czxid)));
        }
    }

    async fn wait(&self, until: Option<Instant>) -> Result<Turn, StoreError> {
        let client = &self.session.client;
        let name = self.key.rsplit_once('/').map_or("", |(_, n)| n);
        loop {
            let children = match client.list_children(&self.path).await {
                Ok(children) => children,
                // Busy only after a full look: try again, connected again.
                Err(e) if !definite(&e) => {
                    tokio::time::sleep(CALL_AGAIN).await;
                    continue;
                }
                Err(e) => return Err(failed(&e, "list", &self.path)),
            };
            let nodes = queue(children);
            let Some(at) = nodes.iter().position(|(n, _)| n == name) else {
                return Err(StoreError::gone(format!(
                    "{} vanished (session expired, or deleted)",
                    self.key
                )));
            };
            if at == 0 {
                return Ok(Turn::First {
                    token: Token::new(self.czxid as u64),
                    taken: None,
                });
            }
            if until.is_some_and(|at| at.remaining().is_zero()) {
                return Ok(Turn::Busy);
            }
            // Watch only the one just ahead of us.
            let ahead = format!("{}/{}", self.path, nodes[at - 1].0);
            let watcher = match client.check_and_watch_stat(&ahead).await {
                Ok((None, _)) => continue,
                Ok((Some(stat), watcher)) => {
                    self.session.mark.saw(stat.czxid.max(0).unsigned_abs());
                    watcher
                }
                Err(e) if !definite(&e) => {
                    self.pause(until).await;
                    continue;
                }
                Err(e) => return Err(failed(&e, "watch", &ahead)),
            };
            match until {
                None => {
                    watcher.changed().await;
                }
                Some(at) => {
                    tokio::select! {
                        _ = watcher.changed() => {}
                        () = sleep_until(at) => return Ok(Turn::Busy),
                    }
                }
            }
        }
    }

    async fn pause(&self, until: Option<Instant>) {
        let wake = Instant::now() + LOOK_AGAIN;
        sleep_until(until.map_or(wake, |at| at.min(wake))).await;
    }

    /// Watch our node: deleted (a break, or the session expired), or asked
    /// to let go (a break request in its data). After a reconnect, look
    /// that it is still there and still ours.
    async fn watch(&self) -> Loss {
        let client = &self.session.client;
        let mut states = client.state_watcher();
        loop {
            let watcher = match client.get_and_watch_data(&self.key).await {
                Ok((data, stat, watcher)) => {
                    if stat.ephemeral_owner != client.session_id().0 {
                        return Loss::Gone(format!("{} is no longer our node", self.key));
                    }
                    if let Some(why) = HolderRecord::from_json(&data).and_then(|r| r.break_request)
                    {
                        return Loss::Asked(format!("{why} asked it to let go"));
                    }
                    watcher
                }
                Err(ZkError::NoNode) => {
                    return Loss::Gone(format!("{} was deleted from ZooKeeper", self.key));
                }
                Err(ZkError::SessionExpired) => {
                    return Loss::Gone("the ZooKeeper session expired".into());
                }
                Err(_) => {
                    tokio::time::sleep(LOOK_AGAIN).await;
                    continue;
                }
            };
            tokio::select! {
                event = watcher.changed() => match event.event_type {
                    EventType::NodeDeleted => {
                        return Loss::Gone(format!("{} was deleted from ZooKeeper", self.key));
                    }
                    _ if event.session_state == SessionState::Expired => {
                        return Loss::Gone("the ZooKeeper session expired".into());
                    }
                    _ => {}
                },
                state = states.changed() => {
                    if state == SessionState::Expired {
                        return Loss::Gone("the ZooKeeper session expired".into());
                    }
                    // Reconnected (or lost): look again at the top of the loop.
                }
            }
        }
    }
}

/// An answer that says what happened: anything else (a connection lost or
/// reset, a timeout) leaves open whether the request took effect.
pub(super) fn definite(e: &ZkError) -> bool {
    matches!(
        e,
        ZkError::NoNode
            | ZkError::NodeExists
            | ZkError::NoAuth
            | ZkError::AuthFailed
            | ZkError::InvalidAcl
            | ZkError::BadArguments(_)
            | ZkError::NoChildrenForEphemerals
            | ZkError::SessionExpired
            | ZkError::ClientClosed
    )
}

/// A random uuid (version 4), as Curator's protected mode names nodes.
fn uuid() -> String {
    let mut b = crate::store::ids::random::<16>();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        h[..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..].concat()
    )
}

impl Lock for ZkLock<'_> {
    fn key(&self) -> &str {
        &self.key
    }

    fn rank(&self) -> u64 {
        self.seq as u64
    }

    fn wait_turn(&self, until: Option<Instant>) -> Boxed<'_, Result<Turn, StoreError>> {
        Box::pin(self.wait(until))
    }

    fn lost(&self) -> Boxed<'_, Loss> {
        Box::pin(self.watch())
    }

    fn leave(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(async move {
            match self.session.client.delete(&self.key, None).await {
                Ok(()) | Err(ZkError::NoNode) => {
                    self.session.nodes.borrow_mut().retain(|n| n != &self.key);
                    Ok(())
                }
                Err(e) => Err(failed(&e, "delete", &self.key)),
            }
        })
    }

    fn acquired(&self) -> Boxed<'_, ()> {
        Box::pin(async move {
            if self.record.shard.is_none() {
                return;
            }
            let client = &self.session.client;
            let path = format!("{}.last", lock_path(&self.lock));
            let identity = self.record.identity.as_bytes();
            let written = match client.set_data(&path, identity, None).await {
                Err(ZkError::NoNode) => client
                    .create(
                        &path,
                        identity,
                        &CreateMode::Persistent.with_acls(Acls::anyone_all()),
                    )
                    .await
                    .map(drop),
                other => other.map(drop),
            };
            if let Err(e) = written {
                log::verbose(format_args!("could not record the shard's holder: {e}"));
            }
        })
    }

    fn checkpoint(&self) -> Boxed<'_, Result<Option<Checkpoint>, StoreError>> {
        Box::pin(async move {
            let path = format!("{}.checkpoint", lock_path(&self.lock));
            let give_up = Instant::now() + self.session.ttl;
            loop {
                match self.session.client.get_data(&path).await {
                    Ok((data, _)) => return Ok(Checkpoint::from_json(&data)),
                    Err(ZkError::NoNode) => return Ok(None),
                    Err(e) if definite(&e) || give_up.remaining().is_zero() => {
                        return Err(failed(&e, "read", &path));
                    }
                    // Connected again within the session, or not at all.
                    Err(_) => tokio::time::sleep(CALL_AGAIN).await,
                }
            }
        })
    }
}
