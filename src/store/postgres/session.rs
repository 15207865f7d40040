//! A session on PostgreSQL: a tenure id, the rows it holds, and the
//! renewals that keep them.
//!
//! There is no lease object in the database; the session's lease is the
//! `expires_at` of each row it holds, all renewed by one statement. The
//! deadline elect keeps counts from the send time of the last renewal that
//! confirmed every row we hold. A renewal sent while an acquisition is on
//! its way could miss the row being taken (not committed yet) and still
//! confirm a later send time than the row's expiry, so the two never
//! overlap: an acquisition holds `exclusive` for writing from send to
//! answer; renewals hold it for reading.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

use tokio::sync::{Notify, RwLock, broadcast};
use tokio_postgres::types::Type;

use super::conn::{Link, describe, is_transient};
use super::{POLL_EVERY, Postgres, missing_tables};
use crate::clock::{Instant, sleep_until};
use crate::log;
use crate::store::{
    Boxed, Checkpoint, ErrorKind, HolderRecord, Lock, Loss, Renewal, Renewer, Session, StoreError,
    Turn,
};

/// How long a holder's command runs before its elect listens for news of
/// its lock on a second connection.
const LISTEN_AFTER: Duration = Duration::from_millis(200);

/// A new tenure id: 128 random bits, in hex.
pub fn tenure_id() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // Unique enough without the kernel's randomness: pid and time.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        bytes[..8].copy_from_slice(&now.as_nanos().to_le_bytes()[..8]);
        bytes[8..12].copy_from_slice(&std::process::id().to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The key of a holder (`ELECT_KEY`): the lock and the holder's tenure.
pub fn key(lock: &str, tenure: &str) -> String {
    format!("{lock}/{tenure}")
}

/// What a session and its renewers share.
struct Shared {
    tenure: String,
    ttl: Duration,
    /// Held for writing while an acquisition is on its way.
    exclusive: RwLock<()>,
    /// The locks whose rows we hold.
    held: RefCell<BTreeSet<String>>,
    /// Break requests seen by renewals, by lock.
    asked: RefCell<BTreeMap<String, String>>,
    news: Notify,
}

pub struct PgSession<'s> {
    store: &'s Postgres,
    shared: Rc<Shared>,
    granted_at: Instant,
}

impl<'s> PgSession<'s> {
    pub fn new(store: &'s Postgres, ttl: Duration) -> Self {
        PgSession {
            store,
            shared: Rc::new(Shared {
                tenure: tenure_id(),
                ttl,
                exclusive: RwLock::new(()),
                held: RefCell::default(),
                asked: RefCell::default(),
                news: Notify::new(),
            }),
            granted_at: Instant::now(),
        }
    }

    fn ttl_ms(&self) -> i64 {
        self.shared.ttl.as_millis() as i64
    }
}

impl Session for PgSession<'_> {
    fn id(&self) -> String {
        self.shared.tenure.clone()
    }

    fn ttl(&self) -> Option<Duration> {
        Some(self.shared.ttl)
    }

    fn granted_at(&self) -> Instant {
        self.granted_at
    }

    fn renewer(&self) -> Box<dyn Renewer> {
        Box::new(PgRenewer {
            shared: self.shared.clone(),
            link: self.store.link.clone(),
            statement: self.store.sql.renew.clone(),
        })
    }

    fn join(
        &self,
        lock: String,
        record: HolderRecord,
    ) -> Boxed<'_, Result<Box<dyn Lock + '_>, StoreError>> {
        Box::pin(async move {
            let lock: Box<dyn Lock + '_> = Box::new(PgLock {
                session: self,
                key: key(&lock, &self.shared.tenure),
                record: record.acquired_now().to_json(),
                lock,
                checkpoint: RefCell::new(None),
            });
            Ok(lock)
        })
    }

    fn release(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let _alone = self.shared.exclusive.write().await;
            self.store
                .query(
                    &self.store.sql.release,
                    &[(&self.shared.tenure, Type::TEXT)],
                )
                .await?;
            self.shared.held.borrow_mut().clear();
            Ok(())
        })
    }
}

/// Renews every row of the session in one statement.
struct PgRenewer {
    shared: Rc<Shared>,
    link: Link,
    statement: String,
}

impl Renewer for PgRenewer {
    fn renew(&mut self) -> Boxed<'_, Result<Renewal, StoreError>> {
        Box::pin(async move {
            let _shared = self.shared.exclusive.read().await;
            let held = self.shared.held.borrow().clone();
            let client = self.link.client().await?;
            let ttl_ms = self.shared.ttl.as_millis() as i64;
            let rows = client
                .query_typed(
                    &self.statement,
                    &[(&self.shared.tenure, Type::TEXT), (&ttl_ms, Type::INT8)],
                )
                .await
                .map_err(|e| StoreError::unavailable(describe(&e)))?;
            let mut renewed = BTreeSet::new();
            for row in rows {
                let lock: String = row.get(0);
                if let Some(why) = row.get::<_, Option<String>>(1) {
                    self.shared
                        .asked
                        .borrow_mut()
                        .insert(lock.clone(), format!("{why} asked it to let go"));
                    self.shared.news.notify_waiters();
                }
                renewed.insert(lock);
            }
            if let Some(lost) = held.difference(&renewed).next() {
                return Ok(Renewal::Gone(format!(
                    "the lease row of lock {lost} was ended or taken over"
                )));
            }
            Ok(Renewal::Alive(self.shared.ttl))
        })
    }

    fn reset(&mut self) {
        self.link = self.link.fresh();
    }
}

/// A place in the race for one lock's row.
struct PgLock<'s> {
    session: &'s PgSession<'s>,
    lock: String,
    key: String,
    record: String,
    /// The checkpoint, as the acquisition found the row.
    checkpoint: RefCell<Option<Checkpoint>>,
}

/// Why an acquisition attempt failed.
enum Failed {
    Connect(StoreError),
    Statement(tokio_postgres::Error),
}

/// What one acquisition attempt found.
enum Attempt {
    Ours(u64),
    /// Busy; the holder's lease has this long left by the database's clock
    /// (`None`: it just ended).
    Busy(Option<Duration>),
}

impl PgLock<'_> {
    fn store(&self) -> &Postgres {
        self.session.store
    }

    /// One acquisition, alone: no renewal is in flight meanwhile.
    async fn attempt(&self) -> Result<Attempt, Failed> {
        let shared = &self.session.shared;
        let _alone = shared.exclusive.write().await;
        let client = self.store().link.client().await.map_err(Failed::Connect)?;
        let ttl_ms = self.session.ttl_ms();
        let rows = client
            .query_typed(
                &self.store().sql.acquire,
                &[
                    (&self.lock, Type::TEXT),
                    (&shared.tenure, Type::TEXT),
                    (&ttl_ms, Type::INT8),
                    (&self.record, Type::TEXT),
                ],
            )
            .await
            .map_err(Failed::Statement)?;
        let fence: Option<i64> = rows[0].get(0);
        let left: Option<i64> = rows[0].get(1);
        Ok(match fence {
            Some(fence) => {
                shared.held.borrow_mut().insert(self.lock.clone());
                *self.checkpoint.borrow_mut() = super::checkpoint_of(&rows[0], 3);
                Attempt::Ours(fence as u64)
            }
            None => Attempt::Busy(left.map(|ms| Duration::from_millis(ms.max(0) as u64))),
        })
    }

    /// Try until the row is ours; set up the tables on first use.
    async fn wait(&self, until: Option<Instant>) -> Result<Turn, StoreError> {
        let store = self.store();
        // A statement that hangs on a dead connection is given up and
        // tried on a new one: a retry of an acquisition is safe.
        let patience = (self.session.shared.ttl / 3).max(Duration::from_secs(1));
        let mut notices: Option<broadcast::Receiver<String>> = None;
        let mut listening: Option<Boxed<'_, Option<broadcast::Receiver<String>>>> = None;
        let mut set_up = false;
        let mut backoff = Duration::from_millis(50);
        loop {
            let left = match tokio::time::timeout(patience, self.attempt()).await {
                Ok(Ok(Attempt::Ours(fence))) => return Ok(Turn::First(fence)),
                Ok(Ok(Attempt::Busy(left))) => left,
                Ok(Err(Failed::Statement(e))) if missing_tables(&e) && !set_up => {
                    set_up = true;
                    store.set_up().await?;
                    continue;
                }
                Ok(Err(Failed::Statement(e))) if !is_transient(&e) => {
                    return Err(store.failed(&e).await);
                }
                Ok(Err(Failed::Connect(e))) if e.kind != ErrorKind::Unavailable => return Err(e),
                Ok(Err(failed)) => {
                    let why = match failed {
                        Failed::Statement(e) => describe(&e),
                        Failed::Connect(e) => e.message,
                    };
                    log::verbose(format_args!("could not try for lock {}: {why}", self.lock));
                    store.link.reset();
                    self.pause(backoff, until).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                    if until.is_some_and(|at| at.remaining().is_zero()) {
                        return Ok(Turn::Busy);
                    }
                    continue;
                }
                Err(_) => {
                    log::verbose(format_args!(
                        "no answer within {}; connecting again",
                        crate::clock::show(patience)
                    ));
                    store.link.reset();
                    continue;
                }
            };
            backoff = Duration::from_millis(50);
            if until.is_some_and(|at| at.remaining().is_zero()) {
                return Ok(Turn::Busy);
            }
            // Start listening beside the wait: connecting and the probe take
            // round trips, and behind a pooler the probe takes its whole
            // timeout; polling goes on meanwhile.
            if notices.is_none() && listening.is_none() {
                listening = Some(Box::pin(store.notifications()));
            }
            // Wake when the holder's lease ends by the database's clock, or
            // on a release, or to poll.
            let nap = match (&notices, left) {
                (Some(_), Some(left)) => left + Duration::from_millis(5),
                (Some(_), None) => Duration::from_millis(5),
                (None, left) => left.map_or(POLL_EVERY, |l| l.min(POLL_EVERY)),
            };
            let wake = match until {
                Some(at) => at.min(Instant::now() + nap),
                None => Instant::now() + nap,
            };
            tokio::select! {
                heard = released(notices.as_mut(), &self.lock) => if !heard { notices = None },
                listened = async { listening.as_mut().expect("listening").await }, if listening.is_some() => {
                    listening = None;
                    // Listening now, or never here: either way look again,
                    // as a release before this went unheard.
                    notices = listened;
                    if notices.is_none() {
                        // Not here (a pooler), or not now (try again later).
                        listening = Some(Box::pin(std::future::pending()));
                    }
                }
                () = sleep_until(wake) => {}
            }
        }
    }

    async fn pause(&self, backoff: Duration, until: Option<Instant>) {
        let wake = Instant::now() + backoff;
        sleep_until(until.map_or(wake, |at| at.min(wake))).await;
    }

    /// Wait for a break request that a renewal found.
    async fn asked(&self) -> Loss {
        let shared = &self.session.shared;
        loop {
            let news = shared.news.notified();
            if let Some(why) = shared.asked.borrow().get(&self.lock) {
                return Loss::Asked(why.clone());
            }
            news.await;
        }
    }

    /// While we hold the lock: a break request or the end of our row, as
    /// soon as a notification about the lock comes (`elect break` sends
    /// one), else as a renewal finds it.
    async fn watch(&self) -> Loss {
        // A command that ends at once costs the database no second connection.
        tokio::time::sleep(LISTEN_AFTER).await;
        let store = self.store();
        let mut notices = store.notifications().await;
        loop {
            tokio::select! {
                loss = self.asked() => return loss,
                heard = released(notices.as_mut(), &self.lock) => {
                    if !heard {
                        notices = None;
                        continue;
                    }
                    if let Some(loss) = self.look().await {
                        return loss;
                    }
                }
            }
        }
    }

    /// Read our row: is it still ours, and has someone asked us to let go?
    async fn look(&self) -> Option<Loss> {
        let rows = self
            .store()
            .query(&self.store().sql.look, &[(&self.lock, Type::TEXT)])
            .await
            .ok()?;
        let row = rows.first()?;
        let tenure: Option<String> = row.get(0);
        let live: bool = row.get(1);
        let asked: Option<String> = row.get(2);
        if tenure.as_deref() != Some(&self.session.shared.tenure) || !live {
            return Some(Loss::Gone(format!(
                "the lease row of lock {} was ended or taken over",
                self.lock
            )));
        }
        asked.map(|why| Loss::Asked(format!("{why} asked it to let go")))
    }
}

/// Wait for a notification that `lock` was released; false if the
/// listener is gone. Without a listener, never.
async fn released(rx: Option<&mut broadcast::Receiver<String>>, lock: &str) -> bool {
    let Some(rx) = rx else {
        return std::future::pending().await;
    };
    loop {
        match rx.recv().await {
            Ok(name) if name == lock => return true,
            Ok(_) => {}
            // Missed some: one of them may have been ours.
            Err(broadcast::error::RecvError::Lagged(_)) => return true,
            Err(broadcast::error::RecvError::Closed) => return false,
        }
    }
}

impl Lock for PgLock<'_> {
    fn key(&self) -> &str {
        &self.key
    }

    fn rank(&self) -> u64 {
        0
    }

    fn wait_turn(&self, until: Option<Instant>) -> Boxed<'_, Result<Turn, StoreError>> {
        Box::pin(self.wait(until))
    }

    fn lost(&self) -> Boxed<'_, Loss> {
        Box::pin(self.watch())
    }

    fn checkpoint(&self) -> Boxed<'_, Result<Option<Checkpoint>, StoreError>> {
        Box::pin(async move { Ok(self.checkpoint.borrow_mut().take()) })
    }

    fn leave(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let shared = &self.session.shared;
            let _alone = shared.exclusive.write().await;
            self.store()
                .query(
                    &self.store().sql.leave,
                    &[(&self.lock, Type::TEXT), (&shared.tenure, Type::TEXT)],
                )
                .await?;
            shared.held.borrow_mut().remove(&self.lock);
            Ok(())
        })
    }
}
