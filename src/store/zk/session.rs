//! A ZooKeeper session as elect's lease, and a place in one lock's queue.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use tokio::sync::watch;
use zookeeper_client::{Acls, Client, CreateMode, Error as ZkError, EventType, SessionState};

use super::{ZooKeeper, ensure_parent, failed, lock_path, queue};
use crate::clock::{Instant, sleep_until};
use crate::log;
use crate::store::Token;
use crate::store::rewind::Mark;
use crate::store::{
    Boxed, Checkpoint, HolderRecord, Lock, Loss, Renewal, Renewer, Session, StoreError, Turn,
};

/// How ZooKeeper's counter is named in messages.
const ZXID: &str = "ZooKeeper's zxid";

/// How soon a call that must be made is made again while the client
/// connects again within the session (which lives on meanwhile): deleting
/// our node, a read, a list.
const CALL_AGAIN: Duration = Duration::from_millis(20);
/// How soon a look that only waits (a watch, the pause between looks) is
/// made again while the client is not connected.
pub const LOOK_AGAIN: Duration = Duration::from_millis(100);

/// What a restore of ZooKeeper means for the tokens, for a waiter that
/// found it went back: ZooKeeper has no way to restore above them.
const RESTORE: &str = "an elect started now takes the lock with a lower token, which a \
     resource that keeps the highest token it has seen refuses";

pub struct ZkSession {
    client: Client,
    /// As the servers negotiated it.
    ttl: Duration,
    /// What the servers granted: `ttl`, or their minSessionTimeout if longer.
    granted: Duration,
    granted_at: Instant,
    /// What the session's answered syncs prove, for every renewer.
    ledger: Rc<RefCell<Ledger>>,
    /// The nodes we created, for a release from another process.
    nodes: RefCell<Vec<String>>,
    /// Creates sent and not yet answered (the lock's path, our node's
    /// protected prefix): one given up, by a signal say, may have made a
    /// node that only its prefix finds.
    creating: RefCell<Vec<(String, String)>>,
    /// The store's [`Mark`]: the highest czxid seen handed out.
    mark: Mark,
}

impl ZkSession {
    /// A session whose timeout is `ttl`, or refused (78) when the servers'
    /// bounds make it shorter: elect's deadline must fit the session.
    pub async fn open(store: &ZooKeeper, ttl: Duration) -> Result<ZkSession, StoreError> {
        let granted_at = Instant::now();
        let client = store.connect(ttl).await?;
        let granted = client.session_timeout();
        if granted + Duration::from_millis(1) < ttl {
            return Err(StoreError::config(format!(
                "the ZooKeeper servers grant sessions of at most {} (their maxSessionTimeout), \
                 shorter than --ttl {}: lower --ttl, or raise maxSessionTimeout",
                crate::clock::show(granted),
                crate::clock::show(ttl)
            )));
        }
        // A quarter of the session is no shorter than a quarter of the
        // servers' minimum; a longer session than asked is that minimum.
        let learning = match granted > ttl {
            true => {
                log::verbose(format_args!(
                    "the ZooKeeper servers granted a {} session (their minSessionTimeout); \
                     elect still keeps --ttl {}",
                    crate::clock::show(granted),
                    crate::clock::show(ttl)
                ));
                log::verbose(format_args!("{}", Ledger::waits(granted)));
                Learning::Done
            }
            false => Learning::Due(store.target.clone(), ttl),
        };
        // Later reads and writes of this run go through this session too.
        *store.client.borrow_mut() = Some(client.clone());
        Ok(ZkSession {
            client,
            ttl,
            granted,
            granted_at,
            ledger: Rc::new(RefCell::new(Ledger {
                settle: granted / 4,
                learning,
                unproven: VecDeque::new(),
                // The leader made the session after we asked for it.
                proven: granted_at,
            })),
            nodes: RefCell::default(),
            creating: RefCell::default(),
            mark: store.mark.clone(),
        })
    }
}

impl Session for ZkSession {
    fn id(&self) -> String {
        format!("{:x}", self.client.session_id().0)
    }

    fn release_token(&self) -> String {
        self.nodes.borrow().join("\n")
    }

    fn ttl(&self) -> Option<Duration> {
        Some(self.ttl)
    }

    fn granted_at(&self) -> Instant {
        self.granted_at
    }

    fn renewer(&self) -> Box<dyn Renewer> {
        Box::new(ZkRenewer {
            client: self.client.clone(),
            ttl: self.ttl,
            slack: self.granted.saturating_sub(self.ttl),
            ledger: self.ledger.clone(),
        })
    }

    fn join(
        &self,
        lock: String,
        record: HolderRecord,
    ) -> Boxed<'_, Result<Box<dyn Lock + '_>, StoreError>> {
        Box::pin(async move {
            let lock: Box<dyn Lock + '_> = Box::new(ZkLock::create(self, lock, record).await?);
            Ok(lock)
        })
    }

    /// Known at once where the servers granted a longer session than
    /// asked (their minimum): then the wait is a quarter of it, unless the
    /// difference spares it (see [`ZkRenewer`]).
    fn renewal_waits(&self, rhythm: Duration) -> Option<(Duration, String)> {
        let ledger = self.ledger.borrow();
        if !matches!(ledger.learning, Learning::Done) || self.granted <= self.ttl {
            return None;
        }
        if rhythm <= self.granted - self.ttl {
            return None;
        }
        Some((
            ledger.settle,
            format!(
                "a renewal waits {} between its two syncs (a quarter of the ZooKeeper \
                 servers' shortest session, {})",
                crate::clock::show(ledger.settle),
                crate::clock::show(self.granted)
            ),
        ))
    }

    fn release(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(async move {
            // The nodes at once, so that the next waiter goes ahead; the
            // session closes when elect's last client is dropped.
            // A lost connection comes back within the session: try again
            // (the caller bounds how long).
            let mut nodes = self.nodes.borrow().clone();
            // A create given up on may have made a node: its prefix finds it.
            let creating = self.creating.borrow().clone();
            for (path, prefix) in creating {
                match self.client.list_children(&path).await {
                    Ok(children) => nodes.extend(
                        children
                            .into_iter()
                            .filter(|child| child.starts_with(&prefix))
                            .map(|child| format!("{path}/{child}")),
                    ),
                    Err(ZkError::NoNode) => {}
                    Err(e) => return Err(failed(&e, "list", &path)),
                }
            }
            for node in nodes {
                loop {
                    match self.client.delete(&node, None).await {
                        Ok(()) | Err(ZkError::NoNode) => break,
                        Err(e) if definite(&e) => return Err(failed(&e, "delete", &node)),
                        Err(_) => tokio::time::sleep(CALL_AGAIN).await,
                    }
                }
            }
            Ok(())
        })
    }
}

/// A renewal: two `sync`s, the second sent tickTime/2 after the first's
/// answer, whose answer proves the leader counts the session from no
/// earlier than the renewal's send time.
///
/// Only the leader expires sessions. A read proves nothing: a follower cut
/// off from the leader goes on answering reads (and the client's pings) for
/// up to syncLimit × tickTime. A `sync` is forwarded to the leader and
/// answered once the leader has, but forwarding it does not touch the
/// session at the leader: the follower notes its clients' requests and
/// tells the leader of them only in its answer to the leader's next ping,
/// every tickTime/2. One `sync` answered, the follower cut off before that
/// ping, would leave the leader counting from an earlier request. A second
/// `sync` sent tickTime/2 after the first's answer leaves the follower
/// after its answer to that ping (with the first noted in it), on the one
/// connection the leader reads in order, so its answer proves the leader
/// heard of the first. elect cannot read tickTime: it takes a quarter of
/// the servers' shortest session, as ZooKeeper's minSessionTimeout defaults
/// to 2 × tickTime (a server set shorter than that breaks the proof).
///
/// Every sync answered goes into the session's [`Ledger`], whichever
/// renewer sent it: an earlier one may prove enough when the servers
/// granted a longer session than `--ttl`, and then no second is needed.
struct ZkRenewer {
    client: Client,
    ttl: Duration,
    /// How much longer the leader keeps the session than elect: a renewal
    /// needs the leader's count from no earlier than its send time less this.
    slack: Duration,
    ledger: Rc<RefCell<Ledger>>,
}

/// What a renewal brings instead of a sync's answer.
type Ended = Result<Renewal, StoreError>;

impl ZkRenewer {
    /// One `sync`, its answer noted in the ledger.
    async fn sync(&self) -> Result<(), Ended> {
        let sent = Instant::now();
        let vouches = self.ledger.borrow().vouched(sent);
        match self.client.sync("/").await {
            Ok(()) => {
                self.ledger
                    .borrow_mut()
                    .answered(sent, Instant::now(), vouches);
                Ok(())
            }
            Err(ZkError::SessionExpired) => {
                Err(Ok(Renewal::Gone("the ZooKeeper session expired".into())))
            }
            Err(e) => Err(Err(StoreError::unavailable(e.to_string()))),
        }
    }

    async fn renewal(&self) -> Ended {
        self.ledger.borrow_mut().learn();
        let sent = Instant::now();
        let since = sent - self.slack;
        if let Err(ended) = self.sync().await {
            return ended;
        }
        if self.ledger.borrow().proven >= since {
            return Ok(Renewal::Alive(self.ttl));
        }
        if self.ready(since).await
            && let Err(ended) = self.sync().await
        {
            return ended;
        }
        match self.ledger.borrow().proven >= since {
            true => Ok(Renewal::Alive(self.ttl)),
            false => Err(StoreError::unavailable(
                "the ZooKeeper leader did not confirm the renewal",
            )),
        }
    }

    /// Wait until a sync sent would prove the leader counts from `since` or
    /// later (sooner, should a shorter `settle` be learnt meanwhile); false
    /// if none can.
    async fn ready(&self, since: Instant) -> bool {
        loop {
            let (ready, coming) = {
                let mut ledger = self.ledger.borrow_mut();
                ledger.learn();
                (ledger.ready(since), ledger.coming())
            };
            let Some(ready) = ready else {
                return false;
            };
            let Some(mut coming) = coming else {
                sleep_until(ready).await;
                return true;
            };
            tokio::select! {
                () = sleep_until(ready) => return true,
                // Learnt, or given up on: look again.
                _ = coming.changed() => {}
            }
        }
    }
}

impl Renewer for ZkRenewer {
    fn renew(&mut self) -> Boxed<'_, Result<Renewal, StoreError>> {
        Box::pin(self.renewal())
    }

    /// One session, one connection: the client reconnects by itself.
    fn reset(&mut self) {}
}

/// The servers' shortest session, as a better `settle` than a quarter of
/// ours.
enum Learning {
    /// To be looked for at `target`, below the TTL.
    Due(super::ZkTarget, Duration),
    Coming(watch::Receiver<Option<Duration>>),
    Done,
}

/// Look for the servers' shortest session in the background; tell a
/// quarter of it.
fn learn_settle(target: super::ZkTarget, ttl: Duration) -> watch::Receiver<Option<Duration>> {
    let (tell, told) = watch::channel(None);
    tokio::spawn(async move {
        match super::shortest_session(&target, ttl).await {
            Ok(shortest) => {
                log::verbose(format_args!("{}", Ledger::waits(shortest)));
                tell.send_replace(Some(shortest / 4));
            }
            Err(e) => log::verbose(format_args!(
                "could not learn the ZooKeeper servers' shortest session ({e}): a renewal \
                 waits a quarter of ours between its two syncs"
            )),
        }
    });
    told
}

/// The session's answered `sync`s, and from when the leader counts the
/// session as far as they prove.
///
/// A sync answered proves the leader heard of every sync answered at least
/// `settle` before it was sent (see [`ZkRenewer`]). (Over another
/// connection, after a reconnect, as well: a server that takes over a
/// session has the leader touch it.)
struct Ledger {
    /// tickTime/2, as far as elect can tell.
    settle: Duration,
    /// A better `settle`, to be learnt.
    learning: Learning,
    /// Syncs answered (send time, answer time) not yet known to have
    /// reached the leader, in the order of their answers.
    unproven: VecDeque<(Instant, Instant)>,
    /// The leader counts the session from no earlier than this.
    proven: Instant,
}

impl Ledger {
    /// What a renewal waits, as told with -v.
    fn waits(shortest: Duration) -> String {
        format!(
            "the ZooKeeper servers' shortest session is {}: a renewal waits {} between \
             its two syncs (tickTime/2, taken as minSessionTimeout/4)",
            crate::clock::show(shortest),
            crate::clock::show(shortest / 4)
        )
    }

    /// Look for the servers' shortest session if not yet begun (on the
    /// first renewal: the command need not wait for it, and the first sync
    /// goes out meanwhile); take the better `settle` once it came.
    fn learn(&mut self) {
        if let Learning::Due(target, ttl) = &self.learning {
            self.learning = Learning::Coming(learn_settle(target.clone(), *ttl));
        }
        let Learning::Coming(told) = &self.learning else {
            return;
        };
        let (learned, given_up) = (*told.borrow(), told.has_changed().is_err());
        if let Some(settle) = learned {
            self.settle = self.settle.min(settle);
        }
        if learned.is_some() || given_up {
            self.learning = Learning::Done;
        }
    }

    /// What tells of the better `settle`, while it is on its way.
    fn coming(&self) -> Option<watch::Receiver<Option<Duration>>> {
        match &self.learning {
            Learning::Coming(told) => Some(told.clone()),
            _ => None,
        }
    }

    /// The most a sync sent at `at` proves once answered: the latest send
    /// time of the syncs answered `settle` before it.
    fn vouched(&self, at: Instant) -> Option<Instant> {
        self.unproven
            .iter()
            .filter(|(_, answered)| *answered + self.settle <= at)
            .map(|(sent, _)| *sent)
            .max()
    }

    /// A sync sent at `sent` was answered at `answered`, proving `vouches`.
    fn answered(&mut self, sent: Instant, answered: Instant, vouches: Option<Instant>) {
        if let Some(vouches) = vouches {
            self.proven = self.proven.max(vouches);
        }
        let proven = self.proven;
        self.unproven.retain(|(sent, _)| *sent > proven);
        self.unproven.push_back((sent, answered));
        // Renewals come one at a time, two at most: a few suffice.
        if self.unproven.len() > 8 {
            self.unproven.pop_front();
        }
    }

    /// When a sync sent would prove the leader counts from `since` or later.
    fn ready(&self, since: Instant) -> Option<Instant> {
        self.unproven
            .iter()
            .filter(|(sent, _)| *sent >= since)
            .map(|(_, answered)| *answered + self.settle)
            .min()
    }
}

/// Our node in one lock's queue.
struct ZkLock<'s> {
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
    async fn create(
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
fn definite(e: &ZkError) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(1_000_000_000_000 + ms * 1_000_000)
    }

    fn ledger() -> Ledger {
        Ledger {
            settle: 50 * MS,
            learning: Learning::Done,
            unproven: VecDeque::new(),
            proven: at(0),
        }
    }

    /// A renewal as it goes at its session's own TTL: the first sync
    /// proves nothing of itself, the second, sent `settle` after its
    /// answer, proves the leader counts from the first's send time.
    #[test]
    fn a_sync_proves_those_answered_settle_before_it_left() {
        let mut l = ledger();
        l.answered(at(333), at(335), l.vouched(at(333)));
        assert_eq!(l.proven, at(0));
        assert_eq!(l.ready(at(333)), Some(at(385)));
        // Sent too soon: the follower may not have told the leader yet.
        assert_eq!(l.vouched(at(384)), None);
        let vouches = l.vouched(at(385));
        assert_eq!(vouches, Some(at(333)));
        l.answered(at(385), at(387), vouches);
        assert_eq!(l.proven, at(333));
        // What is proven is forgotten; the second sync is not, yet.
        assert_eq!(l.unproven, [(at(385), at(387))]);
    }

    /// With a session longer than the TTL, the next renewal's first sync
    /// proves an earlier renewal, and that may be enough.
    #[test]
    fn a_later_sync_proves_the_earlier_renewals() {
        let mut l = ledger();
        l.answered(at(333), at(335), l.vouched(at(333)));
        l.answered(at(666), at(668), l.vouched(at(666)));
        assert_eq!(l.proven, at(333));
        // The latest one answered long enough ago counts, not the oldest.
        l.answered(at(1000), at(1002), l.vouched(at(1000)));
        assert_eq!(l.proven, at(666));
        // What a second sync would wait for: one sent since, answered.
        assert_eq!(l.ready(at(700)), Some(at(1052)));
        assert_eq!(l.ready(at(1001)), None);
    }

    #[test]
    fn a_learned_settle_is_taken_once_it_came_and_never_a_longer_one() {
        let mut l = ledger();
        let (tell, told) = watch::channel(None);
        l.learning = Learning::Coming(told);
        l.learn();
        assert!(l.coming().is_some(), "still on its way");
        tell.send_replace(Some(20 * MS));
        l.learn();
        assert_eq!((l.settle, l.coming().is_none()), (20 * MS, true));
        let (_tell, told) = watch::channel(Some(80 * MS));
        l.learning = Learning::Coming(told);
        l.learn();
        assert_eq!(l.settle, 20 * MS);
        let (tell, told) = watch::channel(None::<Duration>);
        l.learning = Learning::Coming(told);
        drop(tell);
        l.learn();
        assert!(matches!(l.learning, Learning::Done), "given up on");
    }
}
