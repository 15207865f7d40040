//! A ZooKeeper session as elect's lease: its renewals, and what their
//! answered syncs prove. Our node in a lock's queue is in [`super::lock`].

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use tokio::sync::watch;
use zookeeper_client::{Client, Error as ZkError};

use super::lock::{ZkLock, definite};
use super::{ZooKeeper, failed};
use crate::clock::{Instant, sleep_until};
use crate::log;
use crate::store::rewind::Mark;
use crate::store::{Boxed, HolderRecord, Lock, Renewal, Renewer, Session, StoreError};

/// How soon a call that must be made is made again while the client
/// connects again within the session (which lives on meanwhile): deleting
/// our node, a read, a list.
pub(super) const CALL_AGAIN: Duration = Duration::from_millis(20);
/// How soon a look that only waits (a watch, the pause between looks) is
/// made again while the client is not connected.
pub const LOOK_AGAIN: Duration = Duration::from_millis(100);

pub struct ZkSession {
    pub(super) client: Client,
    /// As the servers negotiated it.
    pub(super) ttl: Duration,
    /// What the servers granted: `ttl`, or their minSessionTimeout if longer.
    granted: Duration,
    granted_at: Instant,
    /// What the session's answered syncs prove, for every renewer.
    ledger: Rc<RefCell<Ledger>>,
    /// The nodes we created, for a release from another process.
    pub(super) nodes: RefCell<Vec<String>>,
    /// Creates sent and not yet answered (the lock's path, our node's
    /// protected prefix): one given up, by a signal say, may have made a
    /// node that only its prefix finds.
    pub(super) creating: RefCell<Vec<(String, String)>>,
    /// The store's [`Mark`]: the highest czxid seen handed out.
    pub(super) mark: Mark,
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
        *store.client.lock().await = Some(client.clone());
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
